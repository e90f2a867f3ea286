//! The runtime's contract descriptor read from its file on disk, for a dump whose copy is
//! damaged or lost (a garbled JSON page, a zeroed image, a page the dump left out).
//!
//! The exported structure lies in the file's data: its magic, flags and counts as written,
//! its two pointers (to the JSON and to the pointer data) as dynamic `RELATIVE`
//! relocations whose addends are the file's virtual addresses. The JSON is read-only data;
//! each pointer-data slot is a relocation too (the address of a global), or a constant
//! where it has none. Run-time addresses are the file's plus the module's load bias.
//!
//! The file is used only when it is the build the process loaded: the dump's own copy of
//! the structure (in writable data, which a damaged read-only page does not touch) must
//! hold the same header and the same relocated pointers, or, where that copy is lost, the
//! image in the dump must carry the file's build id.

use std::path::Path;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::Endianness;

use super::error::DescriptorError;
use super::CONTRACT_DESCRIPTOR_SYMBOL;

/// `R_X86_64_RELATIVE`.
const R_X86_64_RELATIVE: u32 = 8;
/// `R_AARCH64_RELATIVE`.
const R_AARCH64_RELATIVE: u32 = 1027;
/// Most pointer-data slots read (real runtimes have a few hundred).
const MAX_POINTER_DATA: u32 = 1 << 16;

/// The descriptor as the file holds it, with run-time addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDescriptor {
    /// The structure's header as the file writes it: magic, flags, JSON size (16 bytes).
    pub head: [u8; 16],
    /// Pointer-data slots.
    pub pointer_data_count: u32,
    /// Run-time address of the JSON.
    pub descriptor: u64,
    /// Run-time address of the pointer-data array.
    pub pointer_data_address: u64,
    /// The JSON text.
    pub json: Vec<u8>,
    /// The pointer data, as run-time values.
    pub pointer_data: Vec<u64>,
}

/// Reads the descriptor exported by the ELF file at `path`, its addresses moved by
/// `bias` (the module's load bias in the target). 64-bit little-endian files only (the
/// runtimes cdac reads on Linux).
pub fn read(path: &Path, bias: u64) -> Result<FileDescriptor, DescriptorError> {
    let fail = |detail: String| DescriptorError::OnDisk {
        path: path.to_path_buf(),
        detail,
    };
    let data = crate::memory::map_regular_file(path).map_err(|e| fail(e.to_string()))?;
    read_elf64(&data, bias).map_err(fail)
}

fn read_elf64(data: &[u8], bias: u64) -> Result<FileDescriptor, String> {
    let header = elf::FileHeader64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    if endian != Endianness::Little {
        return Err("a big-endian file".into());
    }
    let relative = match header.e_machine(endian) {
        elf::EM_X86_64 => R_X86_64_RELATIVE,
        elf::EM_AARCH64 => R_AARCH64_RELATIVE,
        other => return Err(format!("machine {other} is not one cdac reads")),
    };
    let segments = header
        .program_headers(endian, data)
        .map_err(|e| e.to_string())?;
    // A file virtual address's bytes in the file (never past a segment's file size).
    let bytes_at = |vaddr: u64, len: usize| -> Option<&[u8]> {
        segments.iter().find_map(|p| {
            let (start, size) = (p.p_vaddr(endian), p.p_filesz(endian));
            if p.p_type(endian) != elf::PT_LOAD || vaddr < start {
                return None;
            }
            let within = vaddr - start;
            if within.checked_add(len as u64)? > size {
                return None;
            }
            let from = usize::try_from(p.p_offset(endian).checked_add(within)?).ok()?;
            data.get(from..from.checked_add(len)?)
        })
    };
    let sections = header.sections(endian, data).map_err(|e| e.to_string())?;
    let symbols = sections
        .symbols(endian, data, elf::SHT_DYNSYM)
        .map_err(|e| e.to_string())?;
    let symbol = symbols
        .symbols()
        .iter()
        .find(|s| {
            s.name(endian, symbols.strings()).ok() == Some(CONTRACT_DESCRIPTOR_SYMBOL.as_bytes())
        })
        .ok_or_else(|| format!("it does not export {CONTRACT_DESCRIPTOR_SYMBOL}"))?;
    let at = symbol.st_value(endian);
    // The RELATIVE relocations' addends, by the address they patch.
    let mut relocated = std::collections::HashMap::new();
    for section in sections.iter() {
        if section.sh_type(endian) != elf::SHT_RELA {
            continue;
        }
        let Ok(Some((entries, _))) = section.rela(endian, data) else {
            continue;
        };
        for r in entries {
            if r.r_type(endian, false).0 == relative {
                relocated.insert(r.r_offset(endian), r.r_addend(endian) as u64);
            }
        }
    }
    let head: [u8; 16] = bytes_at(at, 16)
        .and_then(|b| b.try_into().ok())
        .ok_or("the structure is not in the file's data")?;
    if &head[..8] != b"DNCCDAC\0" {
        return Err("the exported structure has no descriptor magic".into());
    }
    let json_size = u32::from_le_bytes(head[12..16].try_into().unwrap_or_default());
    let count_bytes = bytes_at(at + 24, 4).ok_or("the structure is cut short")?;
    let pointer_data_count = u32::from_le_bytes(count_bytes.try_into().unwrap_or_default());
    if pointer_data_count > MAX_POINTER_DATA {
        return Err(format!("{pointer_data_count} pointer-data slots"));
    }
    let json_vaddr = *relocated
        .get(&(at + 16))
        .ok_or("no relocation gives the JSON's address")?;
    let pointer_data_vaddr = *relocated
        .get(&(at + 32))
        .ok_or("no relocation gives the pointer data's address")?;
    let json = bytes_at(json_vaddr, json_size as usize)
        .ok_or("the JSON is not in the file")?
        .to_vec();
    let mut pointer_data = Vec::with_capacity(pointer_data_count.min(1024) as usize);
    for i in 0..u64::from(pointer_data_count) {
        let slot = pointer_data_vaddr + 8 * i;
        let value = match relocated.get(&slot) {
            Some(&addend) => bias.wrapping_add(addend),
            None => bytes_at(slot, 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or("the pointer data is not in the file")?,
        };
        pointer_data.push(value);
    }
    Ok(FileDescriptor {
        head,
        pointer_data_count,
        descriptor: bias.wrapping_add(json_vaddr),
        pointer_data_address: bias.wrapping_add(pointer_data_vaddr),
        json,
        pointer_data,
    })
}

impl FileDescriptor {
    /// Whether the structure the dump holds at run time (its first 40 bytes, read from
    /// the target) is this one: the same header and count, and pointers relocated to the
    /// same addresses.
    pub fn matches_structure(&self, in_target: &[u8]) -> bool {
        let word = |at: usize| {
            in_target
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        in_target.len() >= 40
            && in_target[..16] == self.head
            && in_target[24..28] == self.pointer_data_count.to_le_bytes()
            && word(16) == Some(self.descriptor)
            && word(32) == Some(self.pointer_data_address)
    }
}
