//! Finding the metadata blob in a PE image (ECMA-335 II.25): the CLI header is data
//! directory 14, and its MetaData directory holds the blob's RVA and size.

use object::pe::{ImageCor20Header, ImageDosHeader, ImageNtHeaders32, ImageNtHeaders64};
use object::read::pe::ImageNtHeaders;
use object::LittleEndian as LE;

use super::error::{MetadataError, Result};

/// How the image is laid out in the bytes given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeLayout {
    /// As stored on disk: RVAs are translated through the section table.
    File,
    /// As the loader maps it (or as the runtime maps assemblies itself): offset = RVA.
    Mapped,
}

/// The parts of the CLI header callers may want.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CliHeader {
    /// Major version of the runtime the image asks for.
    pub major_runtime_version: u16,
    /// Minor version of the runtime the image asks for.
    pub minor_runtime_version: u16,
    /// RVA of the metadata.
    pub metadata_rva: u32,
    /// Size of the metadata.
    pub metadata_size: u32,
    /// `COMIMAGE_FLAGS_*`.
    pub flags: u32,
    /// Entry point token or RVA.
    pub entry_point: u32,
    /// The ReadyToRun header's directory (ManagedNativeHeader), when the image has one.
    pub managed_native_header_rva: u32,
    /// Size of the managed native header (the ReadyToRun header, when present).
    pub managed_native_header_size: u32,
}

const COM_DESCRIPTOR: usize = object::pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR;

fn pe_err(e: impl std::fmt::Display) -> MetadataError {
    MetadataError::Pe(e.to_string())
}

/// Bytes `[rva, rva + size)` of the image.
fn at_rva<'a>(
    image: &'a [u8],
    layout: PeLayout,
    sections: &object::read::pe::SectionTable<'a>,
    rva: u32,
    size: u32,
    what: &str,
) -> Result<&'a [u8]> {
    let start = match layout {
        PeLayout::Mapped => rva as usize,
        PeLayout::File => {
            let (offset, available) = sections
                .pe_file_range_at(rva)
                .ok_or_else(|| pe_err(format!("{what} RVA {rva:#x} is in no section")))?;
            if available < size {
                return Err(pe_err(format!(
                    "{what} [{rva:#x}, +{size:#x}) runs past its section"
                )));
            }
            offset as usize
        }
    };
    start
        .checked_add(size as usize)
        .and_then(|end| image.get(start..end))
        .ok_or_else(|| {
            pe_err(format!(
                "{what} [{rva:#x}, +{size:#x}) is outside the image"
            ))
        })
}

fn cli_header_inner<'a, H: ImageNtHeaders>(
    image: &'a [u8],
    layout: PeLayout,
) -> Result<(CliHeader, object::read::pe::SectionTable<'a>)> {
    let dos = ImageDosHeader::parse(image).map_err(pe_err)?;
    let mut offset = dos.nt_headers_offset().into();
    let (nt, dirs) = H::parse(image, &mut offset).map_err(pe_err)?;
    let sections = nt.sections(image, offset).map_err(pe_err)?;
    let dir = dirs
        .get(COM_DESCRIPTOR)
        .ok_or_else(|| pe_err("no CLI header directory (not a .NET image)"))?;
    let (rva, size) = (dir.virtual_address.get(LE), dir.size.get(LE));
    if rva == 0 {
        return Err(pe_err("no CLI header directory (not a .NET image)"));
    }
    let need = std::mem::size_of::<ImageCor20Header>() as u32;
    let _ = size; // Some writers store 0x48 here, some more; only the fixed header is read.
    let bytes = at_rva(image, layout, &sections, rva, need, "CLI header")?;
    let h: &ImageCor20Header = object::pod::from_bytes(bytes)
        .map_err(|_| pe_err("CLI header is truncated"))?
        .0;
    Ok((
        CliHeader {
            major_runtime_version: h.major_runtime_version.get(LE),
            minor_runtime_version: h.minor_runtime_version.get(LE),
            metadata_rva: h.meta_data.virtual_address.get(LE),
            metadata_size: h.meta_data.size.get(LE),
            flags: h.flags.get(LE).0,
            entry_point: h.entry_point_token_or_rva.get(LE),
            managed_native_header_rva: h.managed_native_header.virtual_address.get(LE),
            managed_native_header_size: h.managed_native_header.size.get(LE),
        },
        sections,
    ))
}

fn with_headers<'a>(
    image: &'a [u8],
    layout: PeLayout,
) -> Result<(CliHeader, object::read::pe::SectionTable<'a>)> {
    match object::read::pe::optional_header_magic(image).map_err(pe_err)? {
        object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => {
            cli_header_inner::<ImageNtHeaders32>(image, layout)
        }
        object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => {
            cli_header_inner::<ImageNtHeaders64>(image, layout)
        }
        m => Err(pe_err(format!("unknown optional header magic {m:#x}"))),
    }
}

/// The CLI header of a PE image (PE32 or PE32+, any machine, including ReadyToRun images
/// whose machine field is OS-specific).
pub fn cli_header(image: &[u8], layout: PeLayout) -> Result<CliHeader> {
    Ok(with_headers(image, layout)?.0)
}

/// The metadata blob of a PE image: what [`super::Metadata::parse`] takes.
pub fn metadata_from_pe(image: &[u8], layout: PeLayout) -> Result<&[u8]> {
    let (cli, sections) = with_headers(image, layout)?;
    at_rva(
        image,
        layout,
        &sections,
        cli.metadata_rva,
        cli.metadata_size,
        "metadata",
    )
}

/// Bytes of a PE image read for its headers: the DOS and NT headers and the section table
/// of every image the .NET SDK writes fit (a larger `SizeOfHeaders` is not needed here).
pub const PE_HEADER_BYTES: usize = 4096;

/// The metadata blob of a PE image read piecewise through `read(offset, len)` (offsets into
/// the image as laid out): the headers, the CLI header, then the blob alone, so that a
/// reader of a target's memory does not copy a whole image (CoreLib's is 16 MB) for it.
pub fn metadata_by_parts(
    read: &mut dyn FnMut(u64, usize) -> Option<Vec<u8>>,
    layout: PeLayout,
) -> Result<Vec<u8>> {
    let headers =
        read(0, PE_HEADER_BYTES).ok_or_else(|| pe_err("the image's headers are not readable"))?;
    let (cli_rva, sections) = headers_only(&headers)?;
    let offset_of = |rva: u32, size: u32, what: &str| -> Result<u64> {
        match layout {
            PeLayout::Mapped => Ok(u64::from(rva)),
            PeLayout::File => {
                let (offset, available) = section_range(&sections, rva)
                    .ok_or_else(|| pe_err(format!("{what} RVA {rva:#x} is in no section")))?;
                if available < size {
                    return Err(pe_err(format!(
                        "{what} [{rva:#x}, +{size:#x}) runs past its section"
                    )));
                }
                Ok(u64::from(offset))
            }
        }
    };
    let need = std::mem::size_of::<ImageCor20Header>();
    let at = offset_of(cli_rva, need as u32, "CLI header")?;
    let bytes = read(at, need).ok_or_else(|| pe_err("the CLI header is not readable"))?;
    let h: &ImageCor20Header = object::pod::from_bytes(&bytes)
        .map_err(|_| pe_err("CLI header is truncated"))?
        .0;
    let (rva, size) = (
        h.meta_data.virtual_address.get(LE),
        h.meta_data.size.get(LE),
    );
    let at = offset_of(rva, size, "metadata")?;
    read(at, size as usize)
        .ok_or_else(|| pe_err(format!("metadata [{rva:#x}, +{size:#x}) is not readable")))
}

/// (virtual address, size, file offset, file size) of each section.
type Sections = Vec<(u32, u32, u32, u32)>;

/// The CLI header's RVA and the section table, from the headers alone.
fn headers_only(headers: &[u8]) -> Result<(u32, Sections)> {
    fn inner<H: ImageNtHeaders>(headers: &[u8]) -> Result<(u32, Sections)> {
        let dos = ImageDosHeader::parse(headers).map_err(pe_err)?;
        let mut offset = dos.nt_headers_offset().into();
        let (nt, dirs) = H::parse(headers, &mut offset).map_err(pe_err)?;
        let table = nt.sections(headers, offset).map_err(pe_err)?;
        let dir = dirs
            .get(COM_DESCRIPTOR)
            .ok_or_else(|| pe_err("no CLI header directory (not a .NET image)"))?;
        let rva = dir.virtual_address.get(LE);
        if rva == 0 {
            return Err(pe_err("no CLI header directory (not a .NET image)"));
        }
        let sections = table
            .iter()
            .map(|s| {
                (
                    s.virtual_address.get(LE),
                    s.virtual_size.get(LE),
                    s.pointer_to_raw_data.get(LE),
                    s.size_of_raw_data.get(LE),
                )
            })
            .collect();
        Ok((rva, sections))
    }
    match object::read::pe::optional_header_magic(headers).map_err(pe_err)? {
        object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => inner::<ImageNtHeaders32>(headers),
        object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => inner::<ImageNtHeaders64>(headers),
        m => Err(pe_err(format!("unknown optional header magic {m:#x}"))),
    }
}

/// The file offset of `rva` and the file bytes left in its section from there.
fn section_range(sections: &Sections, rva: u32) -> Option<(u32, u32)> {
    sections.iter().find_map(|&(va, vsize, raw, raw_size)| {
        let inside = rva.checked_sub(va)?;
        if inside >= vsize.max(raw_size) || inside >= raw_size {
            return None;
        }
        Some((raw.checked_add(inside)?, raw_size - inside))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error() {
        assert!(metadata_from_pe(b"", PeLayout::File).is_err());
        assert!(metadata_from_pe(b"MZ", PeLayout::Mapped).is_err());
        assert!(metadata_from_pe(&[0u8; 4096], PeLayout::File).is_err());
    }
}
