//! The debug directory of a PE image (PE/COFF "The .debug Section"): the CodeView entry
//! (type 2: `RSDS`, GUID, age, PDB path), the embedded portable PDB (type 17: `MPDB`,
//! uncompressed size, deflate data) and the PDB checksum (type 19).

use object::pe::{ImageDebugDirectory, ImageDosHeader, ImageNtHeaders32, ImageNtHeaders64};
use object::read::pe::ImageNtHeaders;
use object::LittleEndian as LE;

use super::error::{PdbError, Result};
use super::PdbId;
use crate::formats::cursor::Cursor;

/// Debug directory entry type: CodeView (the PDB's id and path).
pub const DEBUG_TYPE_CODEVIEW: u32 = 2;
/// Debug directory entry type: an embedded portable PDB.
pub const DEBUG_TYPE_EMBEDDED_PORTABLE_PDB: u32 = 17;
/// Debug directory entry type: a checksum of the PDB.
pub const DEBUG_TYPE_PDB_CHECKSUM: u32 = 19;
/// The minor version a CodeView entry of a portable PDB has ("PM").
pub const PORTABLE_CODEVIEW_MINOR: u16 = 0x504D;
/// Largest embedded PDB inflated (bytes).
pub const MAX_EMBEDDED_PDB: usize = 256 << 20;
/// Most debug directory entries read.
const MAX_ENTRIES: usize = 64;

/// One debug directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugEntry {
    /// The entry's TimeDateStamp (for a portable PDB's CodeView entry: the id's stamp).
    pub time_date_stamp: u32,
    /// Major version.
    pub major_version: u16,
    /// Minor version.
    pub minor_version: u16,
    /// The entry's type.
    pub kind: u32,
    /// Size of its data.
    pub size: u32,
    /// RVA of its data.
    pub rva: u32,
    /// File offset of its data.
    pub file_offset: u32,
}

/// What a CodeView (`RSDS`) entry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeViewInfo {
    /// The PDB's id: the entry's GUID and its TimeDateStamp.
    pub id: PdbId,
    /// The age (1 for portable PDBs).
    pub age: u32,
    /// The PDB path the compiler wrote.
    pub path: String,
    /// Whether the entry is marked as a portable PDB's (minor version `PM`).
    pub portable: bool,
}

/// The debug directory's entries.
#[derive(Debug, Clone, Default)]
pub struct DebugDirectory {
    /// Entries in directory order.
    pub entries: Vec<DebugEntry>,
}

fn pe_err(e: impl std::fmt::Display) -> PdbError {
    PdbError::Pe(e.to_string())
}

fn entries_of<H: ImageNtHeaders>(image: &[u8]) -> Result<Vec<DebugEntry>> {
    let dos = ImageDosHeader::parse(image).map_err(pe_err)?;
    let mut offset = dos.nt_headers_offset().into();
    let (nt, dirs) = H::parse(image, &mut offset).map_err(pe_err)?;
    let sections = nt.sections(image, offset).map_err(pe_err)?;
    let Some(dir) = dirs.get(object::pe::IMAGE_DIRECTORY_ENTRY_DEBUG) else {
        return Ok(Vec::new());
    };
    let (rva, size) = (dir.virtual_address.get(LE), dir.size.get(LE));
    if rva == 0 || size == 0 {
        return Ok(Vec::new());
    }
    let (file_offset, available) = sections
        .pe_file_range_at(rva)
        .ok_or_else(|| pe_err(format!("debug directory RVA {rva:#x} is in no section")))?;
    let size = size.min(available) as usize;
    let bytes = image
        .get(file_offset as usize..)
        .and_then(|b| b.get(..size))
        .ok_or_else(|| pe_err("debug directory is outside the image"))?;
    let n = (size / std::mem::size_of::<ImageDebugDirectory>()).min(MAX_ENTRIES);
    let (list, _) = object::pod::slice_from_bytes::<ImageDebugDirectory>(bytes, n)
        .map_err(|_| pe_err("debug directory is truncated"))?;
    Ok(list
        .iter()
        .map(|e| DebugEntry {
            time_date_stamp: e.time_date_stamp.get(LE),
            major_version: e.major_version.get(LE),
            minor_version: e.minor_version.get(LE),
            kind: e.typ.get(LE).0,
            size: e.size_of_data.get(LE),
            rva: e.address_of_raw_data.get(LE),
            file_offset: e.pointer_to_raw_data.get(LE),
        })
        .collect())
}

/// The debug directory of a PE image in file layout (as stored on disk).
pub fn debug_directory(image: &[u8]) -> Result<DebugDirectory> {
    let entries = match object::read::pe::optional_header_magic(image).map_err(pe_err)? {
        object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => entries_of::<ImageNtHeaders32>(image)?,
        object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => entries_of::<ImageNtHeaders64>(image)?,
        m => return Err(pe_err(format!("unknown optional header magic {m:#x}"))),
    };
    Ok(DebugDirectory { entries })
}

impl DebugDirectory {
    fn data<'a>(&self, image: &'a [u8], e: &DebugEntry) -> Result<&'a [u8]> {
        let start = e.file_offset as usize;
        start
            .checked_add(e.size as usize)
            .and_then(|end| image.get(start..end))
            .ok_or_else(|| {
                pe_err(format!(
                    "debug entry of type {} [{start:#x}, +{:#x}) is outside the image",
                    e.kind, e.size
                ))
            })
    }

    /// The first CodeView (`RSDS`) entry, if any.
    pub fn codeview(&self, image: &[u8]) -> Result<Option<CodeViewInfo>> {
        let Some(e) = self.entries.iter().find(|e| e.kind == DEBUG_TYPE_CODEVIEW) else {
            return Ok(None);
        };
        let data = self.data(image, e)?;
        let mut c = Cursor::new(data);
        // Too short for the fixed part, or another signature: not an RSDS record.
        let not_rsds = || pe_err("CodeView entry is not an RSDS record");
        if c.read_array::<4>("CodeView signature").ok() != Some(*b"RSDS") {
            return Err(not_rsds());
        }
        let guid = c
            .read_array::<16>("CodeView GUID")
            .map_err(|_| not_rsds())?;
        let age = c.read_u32("CodeView age").map_err(|_| not_rsds())?;
        let rest = c.rest();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        Ok(Some(CodeViewInfo {
            id: PdbId {
                guid,
                stamp: e.time_date_stamp,
            },
            age,
            path: String::from_utf8_lossy(&rest[..end]).into_owned(),
            portable: e.minor_version == PORTABLE_CODEVIEW_MINOR,
        }))
    }

    /// The embedded portable PDB, inflated, if the image has one.
    pub fn embedded_pdb(&self, image: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(e) = self
            .entries
            .iter()
            .find(|e| e.kind == DEBUG_TYPE_EMBEDDED_PORTABLE_PDB)
        else {
            return Ok(None);
        };
        let data = self.data(image, e)?;
        let mut c = Cursor::new(data);
        let no_mpdb = || PdbError::Embedded("no MPDB signature".into());
        if c.read_array::<4>("embedded PDB signature").ok() != Some(*b"MPDB") {
            return Err(no_mpdb());
        }
        let size = c.read_u32("embedded PDB size").map_err(|_| no_mpdb())? as usize;
        if size > MAX_EMBEDDED_PDB {
            return Err(PdbError::Embedded(format!(
                "stated size {size} is over the {MAX_EMBEDDED_PDB}-byte limit"
            )));
        }
        let out = miniz_oxide::inflate::decompress_to_vec_with_limit(c.rest(), size)
            .map_err(|e| PdbError::Embedded(format!("deflate data: {e}")))?;
        if out.len() != size {
            return Err(PdbError::Embedded(format!(
                "inflates to {} bytes, not the stated {size}",
                out.len()
            )));
        }
        Ok(Some(out))
    }

    /// The PDB checksum entries: (algorithm name, checksum bytes).
    pub fn pdb_checksums(&self, image: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        for e in self
            .entries
            .iter()
            .filter(|e| e.kind == DEBUG_TYPE_PDB_CHECKSUM)
        {
            let data = self.data(image, e)?;
            let nul = data
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| pe_err("PDB checksum entry has no algorithm name"))?;
            out.push((
                String::from_utf8_lossy(&data[..nul]).into_owned(),
                data[nul + 1..].to_vec(),
            ));
        }
        Ok(out)
    }
}
