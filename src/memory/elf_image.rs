//! ELF images mapped in the target: where they are, their exported dynamic symbols and
//! build id, read through target memory (the way the loader sees them) with the file on
//! disk as fallback. ELF structures are decoded with the `object` crate.

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader, Sym};
use object::Endianness;

use super::{Endian, MappedFile, ReadError, Target};

/// Caps on what is read from a possibly damaged image.
const MAX_PROGRAM_HEADERS: usize = 256;
const MAX_DYNAMIC_ENTRIES: usize = 4096;
const MAX_SYMBOLS: usize = 1 << 20;
const MAX_STRTAB: usize = 64 << 20;
const MAX_NOTE_BYTES: usize = 64 << 10;

/// Why an image could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// Memory of the image could not be read.
    #[error("reading the ELF image at {base:#x}: {source}")]
    Read {
        /// Base address of the module.
        base: u64,
        /// The underlying error.
        #[source]
        source: ReadError,
    },
    /// The bytes are not a well-formed ELF image.
    #[error("the ELF image at {base:#x} is malformed: {detail}")]
    Malformed {
        /// Base address of the module.
        base: u64,
        /// What is wrong.
        detail: String,
    },
    /// The file on disk could not be used.
    #[error("{path}: {detail}")]
    File {
        /// Path of the file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// A file mapped into the target, with all of its mappings grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleMapping {
    /// Path as the target saw it.
    pub path: PathBuf,
    /// Address where the file's first byte (its ELF header) is mapped.
    pub base: u64,
    /// One past the highest address mapped from the file.
    pub end: u64,
}

impl ModuleMapping {
    /// The file name part of the path.
    pub fn file_name(&self) -> Option<&str> {
        self.path.file_name()?.to_str()
    }
}

/// Groups mapped ranges by file. A module's base is the mapping of file offset 0; it
/// extends over the later mappings of the same file up to the next mapping of offset 0 (a
/// second load of the file). Linear in the number of mappings (after sorting).
pub fn modules(files: &[MappedFile]) -> Vec<ModuleMapping> {
    let mut by_path: std::collections::HashMap<&Path, Vec<&MappedFile>> = Default::default();
    for f in files {
        by_path.entry(f.path.as_path()).or_default().push(f);
    }
    let mut out: Vec<ModuleMapping> = Vec::new();
    for (path, mut maps) in by_path {
        maps.sort_by_key(|m| m.start);
        let mut current: Option<ModuleMapping> = None;
        for m in maps {
            if m.file_offset == 0 {
                if current.as_ref().is_some_and(|c| c.base == m.start) {
                    continue;
                }
                out.extend(current.take());
                current = Some(ModuleMapping {
                    path: path.to_path_buf(),
                    base: m.start,
                    end: m.end,
                });
            } else if let Some(c) = current.as_mut() {
                c.end = c.end.max(m.end);
            }
        }
        out.extend(current);
    }
    out.sort_by_key(|m| m.base);
    out
}

/// An exported dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicSymbol {
    /// Symbol name.
    pub name: String,
    /// Address in the target (load bias applied).
    pub address: u64,
    /// Size in bytes as the symbol table gives it.
    pub size: u64,
}

/// An ELF image in target memory.
#[derive(Debug, Clone)]
pub struct ElfImage {
    base: u64,
    bias: u64,
    endian: Endian,
    is_64: bool,
    machine: u16,
    segments: Vec<SegmentInfo>,
    /// The raw program header table, for the generic decoders.
    phdr_bytes: Vec<u8>,
    disk_path: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy)]
struct SegmentInfo {
    p_type: u32,
    vaddr: u64,
    memsz: u64,
}

impl ElfImage {
    /// Reads the ELF and program headers of the image whose header is mapped at `base`.
    /// `disk_path` is the file to fall back to when memory is missing.
    pub fn read(
        target: &Target,
        base: u64,
        disk_path: Option<&Path>,
    ) -> Result<ElfImage, ImageError> {
        let read_err = |source| ImageError::Read { base, source };
        let disk = || disk_path.and_then(|p| super::map_regular_file(p).ok());
        // Headers from the file when the target's are lost (not captured) or destroyed (a
        // damaged dump's page without the ELF magic): the file the target mapped there.
        let mut file_headers = None;
        let header = match target.read_bytes(base, 64) {
            Ok(h) if h.starts_with(b"\x7fELF") => h,
            Ok(h) => match disk() {
                Some(file) if file.len() >= 64 && file.starts_with(b"\x7fELF") => {
                    tracing::warn!(
                        path = %disk_path.map(Path::display).map(|d| d.to_string()).unwrap_or_default(),
                        "the image at {base:#x} has no ELF header in the target (damaged?); its headers are read from the file"
                    );
                    let header = file[..64].to_vec();
                    file_headers = Some(file);
                    header
                }
                _ => h,
            },
            Err(e) => match disk() {
                Some(file) if file.len() >= 64 => {
                    let header = file[..64].to_vec();
                    file_headers = Some(file);
                    header
                }
                _ => return Err(read_err(e)),
            },
        };
        let file = file_headers.as_deref();
        match header.get(4) {
            Some(&c) if c == elf::ELFCLASS64.0 && header.starts_with(b"\x7fELF") => {
                Self::read_as::<elf::FileHeader64<Endianness>>(
                    target, base, &header, file, disk_path,
                )
            }
            Some(&c) if c == elf::ELFCLASS32.0 && header.starts_with(b"\x7fELF") => {
                Self::read_as::<elf::FileHeader32<Endianness>>(
                    target, base, &header, file, disk_path,
                )
            }
            _ => Err(ImageError::Malformed {
                base,
                detail: "no ELF header".into(),
            }),
        }
    }

    fn read_as<Elf: FileHeader<Endian = Endianness>>(
        target: &Target,
        base: u64,
        header_bytes: &[u8],
        file: Option<&[u8]>,
        disk_path: Option<&Path>,
    ) -> Result<ElfImage, ImageError> {
        let malformed = |detail: String| ImageError::Malformed { base, detail };
        let header = Elf::parse(header_bytes).map_err(|e| malformed(e.to_string()))?;
        let endian = header.endian().map_err(|e| malformed(e.to_string()))?;
        let phoff: u64 = header.e_phoff(endian).into();
        let phnum = usize::from(header.e_phnum(endian));
        let phentsize = usize::from(header.e_phentsize(endian));
        if phnum > MAX_PROGRAM_HEADERS || phentsize != std::mem::size_of::<Elf::ProgramHeader>() {
            return Err(malformed(format!(
                "{phnum} program headers of {phentsize} bytes"
            )));
        }
        let from_file = file.and_then(|f| {
            let start = usize::try_from(phoff).ok()?;
            f.get(start..start.checked_add(phnum * phentsize)?)
        });
        let table = match from_file {
            Some(t) => t.to_vec(),
            None => target
                .read_bytes(base.wrapping_add(phoff), phnum * phentsize)
                .map_err(|source| ImageError::Read { base, source })?,
        };
        let (headers, _) = object::pod::slice_from_bytes::<Elf::ProgramHeader>(&table, phnum)
            .map_err(|()| malformed("program header table".into()))?;
        let segments: Vec<SegmentInfo> = headers
            .iter()
            .map(|ph| SegmentInfo {
                p_type: ph.p_type(endian).0,
                vaddr: ph.p_vaddr(endian).into(),
                memsz: ph.p_memsz(endian).into(),
            })
            .collect();
        // The header is mapped at the first loadable segment's page-aligned address.
        let first_load = headers
            .iter()
            .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
            .map(|ph| {
                Into::<u64>::into(ph.p_vaddr(endian)).wrapping_sub(ph.p_offset(endian).into())
            })
            .min()
            .ok_or_else(|| malformed("no PT_LOAD segment".into()))?;
        Ok(ElfImage {
            base,
            bias: base.wrapping_sub(first_load),
            endian: match endian {
                Endianness::Little => Endian::Little,
                Endianness::Big => Endian::Big,
            },
            is_64: header.is_type_64(),
            machine: header.e_machine(endian).0,
            segments,
            phdr_bytes: table.clone(),
            disk_path: disk_path.map(Path::to_path_buf),
        })
    }

    /// Where the ELF header is mapped.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Difference between run-time addresses and the file's virtual addresses.
    pub fn load_bias(&self) -> u64 {
        self.bias
    }

    /// True for ELFCLASS64.
    pub fn is_64(&self) -> bool {
        self.is_64
    }

    /// The ELF machine (`EM_X86_64` = 62, `EM_AARCH64` = 183, ...).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// Byte order of the image.
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// Span of the image's loadable segments, as file virtual addresses.
    fn vaddr_span(&self) -> (u64, u64) {
        let loads = self.segments.iter().filter(|s| s.p_type == elf::PT_LOAD.0);
        let lo = loads.clone().map(|s| s.vaddr).min().unwrap_or(0);
        let hi = loads
            .map(|s| s.vaddr.saturating_add(s.memsz))
            .max()
            .unwrap_or(0);
        (lo, hi)
    }

    /// Bytes from target address `addr` to the end of the loadable segment holding it.
    fn bytes_to_segment_end(&self, addr: u64) -> u64 {
        let vaddr = addr.wrapping_sub(self.bias);
        self.segments
            .iter()
            .filter(|s| {
                s.p_type == elf::PT_LOAD.0
                    && s.vaddr <= vaddr
                    && vaddr < s.vaddr.saturating_add(s.memsz)
            })
            .map(|s| s.vaddr.saturating_add(s.memsz) - vaddr)
            .next()
            .unwrap_or(0)
    }

    /// Whether the dynamic section holds run-time addresses (glibc rewrites its pointer
    /// entries in place when it loads a library) or the file's virtual addresses (the file
    /// itself, other loaders). Decided once per image from `DT_STRTAB`: a string table
    /// starts with a NUL byte, so the reading that lands on one inside the image wins; when
    /// both do, an address inside the loaded image is taken as already relocated.
    fn dynamic_is_relocated(&self, target: &Target, strtab: u64) -> bool {
        if self.bias == 0 {
            return false;
        }
        let (lo, hi) = self.vaddr_span();
        let in_image = |a: u64| a >= lo.wrapping_add(self.bias) && a < hi.wrapping_add(self.bias);
        let nul_at = |a: u64| in_image(a) && target.read_u8(a).ok() == Some(0);
        let as_is = nul_at(strtab);
        let rebased = nul_at(strtab.wrapping_add(self.bias));
        match (as_is, rebased) {
            (true, false) => true,
            (false, true) => false,
            _ => in_image(strtab),
        }
    }

    /// The exported dynamic symbols, read through target memory; when that fails, from
    /// the file on disk.
    pub fn dynamic_symbols(&self, target: &Target) -> Result<Vec<DynamicSymbol>, ImageError> {
        let from_memory = if self.is_64 {
            self.symbols_from_memory::<elf::FileHeader64<Endianness>>(target)
        } else {
            self.symbols_from_memory::<elf::FileHeader32<Endianness>>(target)
        };
        match from_memory {
            Ok(symbols) => Ok(symbols),
            Err(e) => {
                let Some(path) = &self.disk_path else {
                    return Err(e);
                };
                tracing::debug!(error = %e, path = %path.display(), "dynamic symbols not readable in the target; using the file");
                self.symbols_from_file(path)
            }
        }
    }

    /// Address of the exported symbol `name`, if the image exports it.
    pub fn find_symbol(&self, target: &Target, name: &str) -> Result<Option<u64>, ImageError> {
        Ok(self
            .dynamic_symbols(target)?
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.address))
    }

    fn symbols_from_memory<Elf: FileHeader<Endian = Endianness>>(
        &self,
        target: &Target,
    ) -> Result<Vec<DynamicSymbol>, ImageError> {
        let base = self.base;
        let malformed = |detail: &str| ImageError::Malformed {
            base,
            detail: detail.to_string(),
        };
        let read = |addr: u64, len: usize| {
            target
                .read_bytes(addr, len)
                .map_err(|source| ImageError::Read { base, source })
        };
        let endian = match self.endian {
            Endian::Little => Endianness::Little,
            Endian::Big => Endianness::Big,
        };
        let dynamic = self
            .segments
            .iter()
            .find(|s| s.p_type == elf::PT_DYNAMIC.0)
            .ok_or_else(|| malformed("no PT_DYNAMIC segment"))?;
        let entry_size = std::mem::size_of::<Elf::Dyn>();
        let count = (dynamic.memsz as usize / entry_size).min(MAX_DYNAMIC_ENTRIES);
        let bytes = read(dynamic.vaddr.wrapping_add(self.bias), count * entry_size)?;
        let (entries, _) = object::pod::slice_from_bytes::<Elf::Dyn>(&bytes, count)
            .map_err(|()| malformed("dynamic section"))?;
        let (mut symtab, mut strtab, mut strsz, mut hash, mut gnu_hash) =
            (None, None, None, None, None);
        for entry in entries {
            let tag = entry.tag(endian);
            let value = entry.val(endian);
            if tag == elf::DT_NULL {
                break;
            } else if tag == elf::DT_SYMTAB {
                symtab = Some(value);
            } else if tag == elf::DT_STRTAB {
                strtab = Some(value);
            } else if tag == elf::DT_STRSZ {
                strsz = Some(value);
            } else if tag == elf::DT_HASH {
                hash = Some(value);
            } else if tag == elf::DT_GNU_HASH {
                gnu_hash = Some(value);
            }
        }
        let relocated = strtab.is_some_and(|s| self.dynamic_is_relocated(target, s));
        let runtime = |v: u64| {
            if relocated {
                v
            } else {
                v.wrapping_add(self.bias)
            }
        };
        let (symtab, strtab, hash, gnu_hash) = (
            symtab.map(runtime),
            strtab.map(runtime),
            hash.map(runtime),
            gnu_hash.map(runtime),
        );
        let symtab = symtab.ok_or_else(|| malformed("no DT_SYMTAB"))?;
        let strtab = strtab.ok_or_else(|| malformed("no DT_STRTAB"))?;
        let strsz = strsz.ok_or_else(|| malformed("no DT_STRSZ"))? as usize;
        if strsz > MAX_STRTAB {
            return Err(malformed("string table larger than the cap"));
        }
        let sym_size = std::mem::size_of::<Elf::Sym>() as u64;
        let count = if let Some(hash) = hash {
            // SysV hash: nbucket, nchain; nchain is the number of symbols.
            let header = read(hash, 8)?;
            let (table, _) = object::pod::slice_from_bytes::<object::U32<Endianness>>(&header, 2)
                .map_err(|()| malformed("hash table"))?;
            table[1].get(endian) as usize
        } else if let Some(gnu) = gnu_hash {
            // The GNU hash table's length is not stored: read up to the end of its segment
            // and let the chains tell where the symbols end.
            let len = (self.bytes_to_segment_end(gnu) as usize).min(MAX_STRTAB);
            let data = read(gnu, len)?;
            let table = object::read::elf::GnuHashTable::<Elf>::parse(endian, &data)
                .map_err(|_| malformed("GNU hash table"))?;
            table
                .symbol_table_length(endian)
                .ok_or_else(|| malformed("GNU hash chains"))? as usize
        } else {
            return Err(malformed(
                "neither DT_HASH nor DT_GNU_HASH: cannot tell the number of dynamic symbols",
            ));
        };
        if count > MAX_SYMBOLS {
            return Err(malformed("more dynamic symbols than the cap"));
        }
        let sym_bytes = read(symtab, count * sym_size as usize)?;
        let strings = read(strtab, strsz)?;
        let (symbols, _) = object::pod::slice_from_bytes::<Elf::Sym>(&sym_bytes, count)
            .map_err(|()| malformed("symbol table"))?;
        Ok(collect_symbols::<Elf>(symbols, endian, self.bias, |s| {
            let rest = strings.get(s.st_name(endian) as usize..)?;
            Some(&rest[..rest.iter().position(|&b| b == 0)?])
        }))
    }

    fn symbols_from_file(&self, path: &Path) -> Result<Vec<DynamicSymbol>, ImageError> {
        let file_err = |detail: String| ImageError::File {
            path: path.to_path_buf(),
            detail,
        };
        let data = super::map_regular_file(path).map_err(|e| file_err(e.to_string()))?;
        fn from_file<Elf: FileHeader<Endian = Endianness>>(
            data: &[u8],
            bias: u64,
        ) -> Result<Vec<DynamicSymbol>, String> {
            let header = Elf::parse(data).map_err(|e| e.to_string())?;
            let endian = header.endian().map_err(|e| e.to_string())?;
            let sections = header.sections(endian, data).map_err(|e| e.to_string())?;
            let table = sections
                .symbols(endian, data, elf::SHT_DYNSYM)
                .map_err(|e| e.to_string())?;
            let strings = table.strings();
            Ok(collect_symbols::<Elf>(table.symbols(), endian, bias, |s| {
                s.name(endian, strings).ok()
            }))
        }
        if self.is_64 {
            from_file::<elf::FileHeader64<Endianness>>(&data, self.bias)
        } else {
            from_file::<elf::FileHeader32<Endianness>>(&data, self.bias)
        }
        .map_err(file_err)
    }

    /// The GNU build id, read from the image's note segments in target memory.
    pub fn build_id(&self, target: &Target) -> Result<Option<Vec<u8>>, ImageError> {
        if self.is_64 {
            self.build_id_as::<elf::FileHeader64<Endianness>>(target)
        } else {
            self.build_id_as::<elf::FileHeader32<Endianness>>(target)
        }
    }

    fn build_id_as<Elf: FileHeader<Endian = Endianness>>(
        &self,
        target: &Target,
    ) -> Result<Option<Vec<u8>>, ImageError> {
        let endian = match self.endian {
            Endian::Little => Endianness::Little,
            Endian::Big => Endianness::Big,
        };
        let count = self.phdr_bytes.len() / std::mem::size_of::<Elf::ProgramHeader>();
        let Ok((headers, _)) =
            object::pod::slice_from_bytes::<Elf::ProgramHeader>(&self.phdr_bytes, count)
        else {
            return Ok(None);
        };
        for ph in headers
            .iter()
            .filter(|ph| ph.p_type(endian) == elf::PT_NOTE)
        {
            let vaddr: u64 = ph.p_vaddr(endian).into();
            let memsz: u64 = ph.p_memsz(endian).into();
            let data = target
                .read_bytes(
                    vaddr.wrapping_add(self.bias),
                    (memsz as usize).min(MAX_NOTE_BYTES),
                )
                .map_err(|source| ImageError::Read {
                    base: self.base,
                    source,
                })?;
            let Ok(mut notes) =
                object::read::elf::NoteIterator::<Elf>::new(endian, ph.p_align(endian), &data)
            else {
                continue;
            };
            while let Ok(Some(note)) = notes.next() {
                if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                    return Ok(Some(note.desc().to_vec()));
                }
            }
        }
        Ok(None)
    }
}

fn collect_symbols<'a, Elf: FileHeader<Endian = Endianness>>(
    symbols: &'a [Elf::Sym],
    endian: Endianness,
    bias: u64,
    name_of: impl Fn(&'a Elf::Sym) -> Option<&'a [u8]>,
) -> Vec<DynamicSymbol> {
    symbols
        .iter()
        .filter(|s| s.st_shndx(endian) != elf::SHN_UNDEF && s.st_name(endian) != 0)
        .filter_map(|s| {
            Some(DynamicSymbol {
                name: String::from_utf8_lossy(name_of(s)?).into_owned(),
                address: Into::<u64>::into(s.st_value(endian)).wrapping_add(bias),
                size: s.st_size(endian).into(),
            })
        })
        .collect()
}
