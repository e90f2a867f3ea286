//! The ELF modules of a target: its file mappings grouped by path, with the address the
//! file was loaded at, and the bytes of the file (from disk, or the headers the target has
//! mapped). Shared by the native unwinder and the symbolizer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

use crate::memory::{MappedFile, Target};

/// One ELF file mapped into the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfModule {
    /// Path of the file, as the target saw it.
    pub path: PathBuf,
    /// Address of the mapping of file offset 0 (the ELF header).
    pub base: u64,
}

/// The target's ELF modules and which addresses each one covers.
#[derive(Debug, Default, Clone)]
pub struct ModuleMap {
    modules: Vec<ElfModule>,
    /// `(start, end, module index)` of every file mapping, sorted by start.
    ranges: Vec<(u64, u64, usize)>,
}

impl ModuleMap {
    /// Groups the target's file mappings by path. Each mapping of file offset 0 (an ELF
    /// header) starts a module (a file mapped twice is two modules); a path's other
    /// mappings belong to its nearest module below them. A mapping without such a module
    /// (no ELF header in memory, so no known load address) is left out, and so are the
    /// kernel's pseudo-files (`[vdso]`, `/dev/zero`, deleted files, ...).
    pub fn new(files: &[MappedFile]) -> ModuleMap {
        let mut sorted: Vec<&MappedFile> = files
            .iter()
            .filter(|f| f.start < f.end && is_module_path(&f.path))
            .collect();
        sorted.sort_by_key(|f| f.start);
        let mut modules: Vec<ElfModule> = Vec::new();
        let mut by_path: HashMap<&Path, Vec<(u64, usize)>> = HashMap::new();
        for f in sorted.iter().filter(|f| f.file_offset == 0) {
            by_path
                .entry(&f.path)
                .or_default()
                .push((f.start, modules.len()));
            modules.push(ElfModule {
                path: f.path.clone(),
                base: f.start,
            });
        }
        let ranges = sorted
            .iter()
            .filter_map(|f| {
                let bases = by_path.get(&*f.path)?;
                let i = bases.partition_point(|b| b.0 <= f.start);
                let (_, m) = bases.get(i.checked_sub(1)?)?;
                Some((f.start, f.end, *m))
            })
            .collect();
        ModuleMap { modules, ranges }
    }

    /// The modules, in the order of their first mapping.
    pub fn modules(&self) -> &[ElfModule] {
        &self.modules
    }

    /// The module mapped at `addr` and its index in [`ModuleMap::modules`].
    pub fn find(&self, addr: u64) -> Option<(usize, &ElfModule)> {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        let &(start, end, m) = self.ranges.get(i.checked_sub(1)?)?;
        (start <= addr && addr < end).then(|| (m, &self.modules[m]))
    }
}

fn is_module_path(path: &Path) -> bool {
    let s = path.as_os_str().as_encoded_bytes();
    s.first() == Some(&b'/')
        && !s.starts_with(b"/dev/")
        && !s.starts_with(b"/memfd:")
        && !s.ends_with(b" (deleted)")
}

/// Most bytes read from the target for the headers of one module.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most program headers accepted.
const MAX_PHDRS: usize = 512;

/// A program header, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// `p_type`.
    pub kind: elf::ProgramType,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
}

/// The program headers of a 64-bit little-endian x86-64 or AArch64 ELF image in `data`
/// (which must hold the header and the program header table).
pub fn program_headers(data: &[u8]) -> Result<Vec<Segment>, String> {
    let header = elf::FileHeader64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    let machine = header.e_machine(endian);
    if endian != Endianness::Little || !matches!(machine, elf::EM_X86_64 | elf::EM_AARCH64) {
        return Err("not an x86-64 or AArch64 little-endian ELF".into());
    }
    let phdrs = header
        .program_headers(endian, data)
        .map_err(|e| e.to_string())?;
    if phdrs.len() > MAX_PHDRS {
        return Err(format!("{} program headers", phdrs.len()));
    }
    Ok(phdrs
        .iter()
        .map(|p| Segment {
            kind: p.p_type(endian),
            offset: p.p_offset(endian),
            vaddr: p.p_vaddr(endian),
            filesz: p.p_filesz(endian),
            memsz: p.p_memsz(endian),
        })
        .collect())
}

/// The load bias of an image whose header is mapped at `base`: what to add to the file's
/// virtual addresses to get the target's (`base` minus the page of the first `PT_LOAD`).
pub fn load_bias(base: u64, segments: &[Segment]) -> Option<u64> {
    let first = segments
        .iter()
        .filter(|s| s.kind == elf::PT_LOAD)
        .min_by_key(|s| s.offset)?;
    Some(base.wrapping_sub(first.vaddr.wrapping_sub(first.offset)))
}

/// Reads the ELF header and program headers of the module mapped at `base` from target
/// memory.
pub fn headers_from_memory(target: &Target, base: u64) -> Result<Vec<Segment>, String> {
    let ehdr = target.read_bytes(base, 64).map_err(|e| e.to_string())?;
    let header = elf::FileHeader64::<Endianness>::parse(&*ehdr).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    let phoff = header.e_phoff(endian);
    let phsize = u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
    let len = phoff.saturating_add(phsize);
    if len > MAX_HEADER_BYTES as u64 {
        return Err(format!(
            "program headers end at {len:#x}, beyond {MAX_HEADER_BYTES:#x}"
        ));
    }
    let data = target
        .read_bytes(base, (len as usize).max(64))
        .map_err(|e| e.to_string())?;
    program_headers(&data)
}

/// Whether the file at `path` on this machine is the one the target mapped at `base`: its
/// ELF header matches the target's bytes (when the target has an ELF header there; a dump
/// without those bytes cannot tell, and the file is trusted; so is one whose reader gives
/// zeros for what the dump left out, as gdb does for qemu's cores).
pub fn file_matches_target(file: &[u8], target: &Target, base: u64) -> bool {
    match (file.get(..64), target.read_bytes(base, 64)) {
        (Some(disk), Ok(mem)) if mem.iter().any(|&b| b != 0) => disk == mem.as_slice(),
        (Some(_), _) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(start: u64, end: u64, file_offset: u64, path: &str) -> MappedFile {
        MappedFile {
            start,
            end,
            file_offset,
            path: PathBuf::from(path),
        }
    }

    #[test]
    fn a_file_matches_unless_the_target_holds_another_elf_header() {
        use crate::memory::builder::MemoryBuilder;
        use crate::memory::DataLayout;
        let mut file = vec![0u8; 64];
        file[..4].copy_from_slice(b"\x7fELF");
        file[4] = 2;
        let mut other = file.clone();
        other[4] = 1;
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 64).bytes(0, &file);
        b.region(0x2000, 64).bytes(0, &other);
        b.region(0x3000, 64);
        let t = b.into_target();
        assert!(file_matches_target(&file, &t, 0x1000), "the same header");
        assert!(
            !file_matches_target(&file, &t, 0x2000),
            "another ELF header"
        );
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 64).bytes(0, b"MZ");
        let pe = b.into_target();
        assert!(
            !file_matches_target(&file, &pe, 0x1000),
            "another file's header"
        );
        assert!(
            file_matches_target(&file, &t, 0x3000),
            "zeros: left out of the dump"
        );
        assert!(file_matches_target(&file, &t, 0x9000), "unreadable");
        assert!(
            !file_matches_target(&file[..10], &t, 0x1000),
            "not a whole header"
        );
    }

    #[test]
    fn mappings_group_into_modules_by_path_and_header() {
        let map = ModuleMap::new(&[
            file(0x1000, 0x2000, 0, "/lib/a.so"),
            file(0x2000, 0x5000, 0x1000, "/lib/a.so"),
            file(0x9000, 0xa000, 0, "/lib/a.so"), // mapped again, as data
            file(0x6000, 0x7000, 0x1000, "/lib/b.so"), // no header: no module
            file(0x7000, 0x8000, 0, "/dev/zero"),
            file(0x500, 0x800, 0x3000, "/lib/a.so"), // below every header of a.so
        ]);
        assert_eq!(map.modules().len(), 2);
        assert_eq!(map.find(0x1800).map(|m| m.1.base), Some(0x1000));
        assert_eq!(map.find(0x4fff).map(|m| m.1.base), Some(0x1000));
        assert_eq!(map.find(0x9800).map(|m| (m.0, m.1.base)), Some((1, 0x9000)));
        for unmapped in [0x5000, 0x6800, 0x7800, 0x600, 0] {
            assert_eq!(map.find(unmapped), None, "{unmapped:#x}");
        }
    }
}
