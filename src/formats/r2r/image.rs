//! A ReadyToRun PE image read from its file: the PE headers (through `object`), the
//! READYTORUN_HEADER and its section table, the runtime functions, the metadata and the
//! PerfMap debug-directory entry.

use object::pe::{ImageDebugDirectory, ImageDosHeader, ImageNtHeaders32, ImageNtHeaders64};
use object::read::pe::{ImageNtHeaders, SectionTable};
use object::LittleEndian as LE;

use super::R2rError;
use crate::formats::cursor::{Cursor, Truncation};
use crate::formats::ecma::pe::{cli_header, PeLayout};

/// `RTR` in the READYTORUN_HEADER's signature field.
pub const READYTORUN_SIGNATURE: u32 = 0x0052_5452;
/// ReadyToRun section types this module reads.
pub mod section {
    /// The runtime-functions table (code ranges and unwind data).
    pub const RUNTIME_FUNCTIONS: u32 = 102;
    /// Entry points of non-generic methods, by MethodDef row.
    pub const METHOD_DEF_ENTRY_POINTS: u32 = 103;
    /// Entry points of generic instantiations, a hashtable by signature.
    pub const INSTANCE_METHOD_ENTRY_POINTS: u32 = 109;
    /// Extra metadata whose AssemblyRefs extend the module index space of signatures
    /// (and, in a composite image, name the component assemblies).
    pub const MANIFEST_METADATA: u32 = 112;
    /// A composite image's READYTORUN_COMPONENT_ASSEMBLIES_ENTRY array.
    pub const COMPONENT_ASSEMBLIES: u32 = 115;
    /// A rewritten component's pointer to its composite image (a UTF-8 file name).
    pub const OWNER_COMPOSITE_EXECUTABLE: u32 = 116;
    /// 16-byte MVIDs of the composite image's component assemblies.
    pub const MANIFEST_ASSEMBLY_MVIDS: u32 = 118;
    /// Pairs of hot and cold runtime functions of split methods.
    pub const HOT_COLD_MAP: u32 = 120;
}
/// `READYTORUN_FLAG_*` bits this module reads.
pub mod flags {
    /// The header of a component assembly (inside a composite image, or the rewritten IL
    /// file of one).
    pub const COMPONENT: u32 = 0x20;
}
/// The debug-directory entry type of a ReadyToRun PerfMap (`R2RM` record).
pub const IMAGE_DEBUG_TYPE_PERFMAP: u32 = 21;
/// `R2RM` little-endian.
const PERFMAP_ENTRY_MAGIC: u32 = 0x4D52_3252;
/// Most sections a header may list (the format defines a few dozen types).
const MAX_SECTIONS: u32 = 1024;
/// Most component assemblies a composite image may list.
const MAX_COMPONENTS: usize = 1 << 16;
/// Bytes of one READYTORUN_COMPONENT_ASSEMBLIES_ENTRY (two IMAGE_DATA_DIRECTORYs).
const COMPONENT_ENTRY_SIZE: usize = 16;
/// The export naming a composite image's READYTORUN_HEADER.
const RTR_HEADER_EXPORT: &[u8] = b"RTR_HEADER";

/// The target operating system, from the PE machine field: ReadyToRun images for other
/// systems than Windows XOR the architecture's machine value with an OS constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetOs {
    /// Windows (no XOR).
    Windows,
    /// Linux.
    Linux,
    /// macOS.
    Osx,
    /// FreeBSD.
    FreeBsd,
    /// NetBSD.
    NetBsd,
    /// SunOS / illumos.
    SunOs,
}

/// The target architecture, from the PE machine field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetArch {
    /// x86-64.
    X64,
    /// 32-bit x86.
    X86,
    /// 64-bit ARM.
    Arm64,
    /// 32-bit ARM (Thumb-2).
    Arm,
    /// Another machine value (after removing the OS XOR).
    Unknown(u16),
}

impl TargetArch {
    /// Bytes of one RUNTIME_FUNCTION entry: x64 and x86 keep an end address, the ARM
    /// family only begin and unwind data.
    pub fn runtime_function_size(self) -> usize {
        match self {
            TargetArch::X64 | TargetArch::X86 | TargetArch::Unknown(_) => 12,
            TargetArch::Arm64 | TargetArch::Arm => 8,
        }
    }
}

fn split_machine(machine: u16) -> (TargetOs, TargetArch) {
    const OS_XOR: [(u16, TargetOs); 6] = [
        (0, TargetOs::Windows),
        (0x7B79, TargetOs::Linux),
        (0x4644, TargetOs::Osx),
        (0xADC4, TargetOs::FreeBsd),
        (0x1993, TargetOs::NetBsd),
        (0x1992, TargetOs::SunOs),
    ];
    for (xor, os) in OS_XOR {
        let arch = match machine ^ xor {
            0x8664 => TargetArch::X64,
            0x014C => TargetArch::X86,
            0xAA64 => TargetArch::Arm64,
            0x01C4 => TargetArch::Arm,
            _ => continue,
        };
        return (os, arch);
    }
    (TargetOs::Windows, TargetArch::Unknown(machine))
}

/// One entry of the READYTORUN_HEADER's section table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2rSection {
    /// Section id (`ReadyToRunSectionType`).
    pub kind: u32,
    /// Relative virtual address.
    pub rva: u32,
    /// Size in bytes.
    pub size: u32,
}

/// One component assembly of a composite image: its READYTORUN_CORE_HEADER (flags and
/// the sections that are per assembly, e.g. MethodDefEntryPoints). Its index in
/// [`R2rImage::components`] is its AssemblyRef row in the manifest metadata minus one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rComponent {
    /// The component's flags.
    pub flags: u32,
    /// The component's sections.
    pub sections: Vec<R2rSection>,
}

impl R2rComponent {
    /// The component's section of `kind`, if its header lists it.
    pub fn section(&self, kind: u32) -> Option<R2rSection> {
        self.sections.iter().copied().find(|s| s.kind == kind)
    }
}

/// One RUNTIME_FUNCTION: a contiguous piece of compiled code (a method's main body, one
/// of its funclets, or a cold part). `end` is 0 where the architecture stores none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// RVA of the code's first byte.
    pub begin: u32,
    /// RVA one past the code's last byte.
    pub end: u32,
    /// RVA of the unwind data.
    pub unwind: u32,
}

/// The image's PerfMap debug-directory record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapDebugEntry {
    /// Identity of the image, to match a map to it.
    pub signature: [u8; 16],
    /// Map format version.
    pub version: u32,
    /// The r2rmap file name the compiler chose.
    pub file_name: String,
}

/// A ReadyToRun image parsed from its file bytes.
pub struct R2rImage<'a> {
    bytes: &'a [u8],
    sections: SectionTable<'a>,
    /// Operating system compiled for.
    pub os: TargetOs,
    /// Architecture compiled for.
    pub arch: TargetArch,
    /// ReadyToRun format major version.
    pub major_version: u16,
    /// ReadyToRun format minor version.
    pub minor_version: u16,
    /// ReadyToRun header flags.
    pub flags: u32,
    /// Sections of the ReadyToRun header.
    pub r2r_sections: Vec<R2rSection>,
    /// The image's runtime functions (code ranges).
    pub runtime_functions: Vec<RuntimeFunction>,
    /// The ECMA-335 metadata blob (a composite image's CLI header, if it has one, holds
    /// the manifest metadata; empty when it has none).
    pub metadata: &'a [u8],
    /// The perf-map debug directory entry, if any.
    pub perf_map_entry: Option<PerfMapDebugEntry>,
    /// A composite image's component assemblies (empty for other images).
    pub components: Vec<R2rComponent>,
}

fn pe(e: impl std::fmt::Display) -> R2rError {
    R2rError::Pe(e.to_string())
}

struct Headers<'a> {
    machine: u16,
    sections: SectionTable<'a>,
    debug_dir: Option<(u32, u32)>,
    /// RVA of the `RTR_HEADER` export, if the image exports one.
    rtr_export: Option<u32>,
}

fn headers<'a, H: ImageNtHeaders>(bytes: &'a [u8]) -> Result<Headers<'a>, R2rError> {
    let dos = ImageDosHeader::parse(bytes).map_err(pe)?;
    let mut offset = dos.nt_headers_offset().into();
    let (nt, dirs) = H::parse(bytes, &mut offset).map_err(pe)?;
    let sections = nt.sections(bytes, offset).map_err(pe)?;
    let debug_dir = dirs
        .get(object::pe::IMAGE_DIRECTORY_ENTRY_DEBUG)
        .map(|d| (d.virtual_address.get(LE), d.size.get(LE)))
        .filter(|&(rva, size)| rva != 0 && size != 0);
    // A damaged export table only means there is no export to find.
    let rtr_export = dirs
        .export_table(bytes, &sections)
        .ok()
        .flatten()
        .and_then(|table| {
            table.name_iter().find_map(|(pointer, index)| {
                (table.name_from_pointer(pointer).ok()? == RTR_HEADER_EXPORT)
                    .then(|| table.address_by_index(index).ok())
                    .flatten()
            })
        });
    Ok(Headers {
        machine: nt.file_header().machine.get(LE).0,
        sections,
        debug_dir,
        rtr_export,
    })
}

impl<'a> R2rImage<'a> {
    /// Parses the image file. Not a PE file, not a .NET image, or no ReadyToRun header:
    /// a typed error. The READYTORUN_HEADER is found through the CLI header's
    /// ManagedNativeHeader or, for a composite image without one, the `RTR_HEADER`
    /// export.
    pub fn parse(bytes: &'a [u8]) -> Result<R2rImage<'a>, R2rError> {
        let h = match object::read::pe::optional_header_magic(bytes).map_err(pe)? {
            object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => headers::<ImageNtHeaders32>(bytes)?,
            object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => headers::<ImageNtHeaders64>(bytes)?,
            m => return Err(pe(format!("unknown optional header magic {m:#x}"))),
        };
        let (os, arch) = split_machine(h.machine);
        let cli = cli_header(bytes, PeLayout::File).ok();
        let mut img = R2rImage {
            bytes,
            sections: h.sections,
            os,
            arch,
            major_version: 0,
            minor_version: 0,
            flags: 0,
            r2r_sections: Vec::new(),
            runtime_functions: Vec::new(),
            metadata: &[],
            perf_map_entry: None,
            components: Vec::new(),
        };
        if let Some(cli) = &cli {
            if cli.metadata_size != 0 {
                img.metadata = img.at(cli.metadata_rva, cli.metadata_size, "metadata")?;
            }
        }
        let header_rva = match (cli.map(|c| c.managed_native_header_rva), h.rtr_export) {
            (Some(rva), _) if rva != 0 => rva,
            (_, Some(rva)) => rva,
            (None, None) => return Err(pe("no CLI header and no RTR_HEADER export")),
            (Some(_), None) => return Err(R2rError::NotReadyToRun),
        };
        let mut header = Cursor::new(img.at(header_rva, 16, "ReadyToRun header")?);
        if header.read_u32("ReadyToRun header signature")? != READYTORUN_SIGNATURE {
            return Err(R2rError::NotReadyToRun);
        }
        img.major_version = header.read_u16("ReadyToRun header major version")?;
        img.minor_version = header.read_u16("ReadyToRun header minor version")?;
        let (flags, sections) = img.core_header(header_rva.saturating_add(8))?;
        img.flags = flags;
        img.r2r_sections = sections;
        if let Some(s) = img.section(section::COMPONENT_ASSEMBLIES) {
            let table = img.at(s.rva, s.size, "component assemblies")?;
            if table.len() / COMPONENT_ENTRY_SIZE > MAX_COMPONENTS {
                return Err(R2rError::Corrupt(format!(
                    "{} component assemblies",
                    table.len() / COMPONENT_ENTRY_SIZE
                )));
            }
            for entry in table.chunks_exact(COMPONENT_ENTRY_SIZE) {
                // CorHeader (RVA, size), then the component's core header (RVA, size).
                let core_header = Cursor::new(entry)
                    .at(8)
                    .read_u32("component core header RVA")?;
                let (flags, sections) = img.core_header(core_header)?;
                img.components.push(R2rComponent { flags, sections });
            }
        }
        let rf = match img.section_bytes(section::RUNTIME_FUNCTIONS)? {
            Some(rf) => rf,
            // A rewritten component: its code is in the composite image it names.
            None if img.flags & flags::COMPONENT != 0 => &[],
            None => return Err(R2rError::MissingSection(section::RUNTIME_FUNCTIONS)),
        };
        let size = arch.runtime_function_size();
        img.runtime_functions = rf
            .chunks_exact(size)
            .map(|entry| {
                let mut c = Cursor::new(entry);
                Ok(RuntimeFunction {
                    begin: c.read_u32("RUNTIME_FUNCTION begin")?,
                    end: if size == 12 {
                        c.read_u32("RUNTIME_FUNCTION end")?
                    } else {
                        0
                    },
                    unwind: c.read_u32("RUNTIME_FUNCTION unwind data")?,
                })
            })
            .collect::<Result<_, Truncation>>()?;
        if let Some((rva, size)) = h.debug_dir {
            img.perf_map_entry = img.read_perf_map_entry(rva, size);
        }
        Ok(img)
    }

    /// A READYTORUN_CORE_HEADER at `rva`: its flags and section table.
    fn core_header(&self, rva: u32) -> Result<(u32, Vec<R2rSection>), R2rError> {
        let mut head = Cursor::new(self.at(rva, 8, "ReadyToRun core header")?);
        let flags = head.read_u32("ReadyToRun core header flags")?;
        let count = head.read_u32("ReadyToRun core header section count")?;
        if count > MAX_SECTIONS {
            return Err(R2rError::Corrupt(format!(
                "ReadyToRun header lists {count} sections"
            )));
        }
        let table = self.at(
            rva.saturating_add(8),
            count * 12,
            "ReadyToRun section table",
        )?;
        let sections = table
            .chunks_exact(12)
            .map(|entry| {
                let mut c = Cursor::new(entry);
                Ok(R2rSection {
                    kind: c.read_u32("ReadyToRun section type")?,
                    rva: c.read_u32("ReadyToRun section RVA")?,
                    size: c.read_u32("ReadyToRun section size")?,
                })
            })
            .collect::<Result<_, Truncation>>()?;
        Ok((flags, sections))
    }

    /// Whether this is a composite image (it lists component assemblies).
    pub fn is_composite(&self) -> bool {
        self.section(section::COMPONENT_ASSEMBLIES).is_some()
    }

    /// For a rewritten component assembly: the file name of the composite image that
    /// holds its code.
    pub fn owner_composite(&self) -> Option<String> {
        let bytes = self
            .section_bytes(section::OWNER_COMPOSITE_EXECUTABLE)
            .ok()
            .flatten()?;
        let name = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
        Some(String::from_utf8_lossy(name).into_owned())
    }

    /// The manifest metadata blob, if the image has one.
    pub fn manifest_metadata(&self) -> Result<Option<&'a [u8]>, R2rError> {
        self.section_bytes(section::MANIFEST_METADATA)
    }

    /// `size` bytes of the file at `rva`.
    pub fn at(&self, rva: u32, size: u32, what: &str) -> Result<&'a [u8], R2rError> {
        let (offset, available) =
            self.sections
                .pe_file_range_at(rva)
                .ok_or_else(|| R2rError::OutOfImage {
                    what: what.to_string(),
                    rva,
                    size,
                })?;
        if available < size {
            return Err(R2rError::OutOfImage {
                what: what.to_string(),
                rva,
                size,
            });
        }
        Cursor::new(self.bytes)
            .at(offset as usize)
            .read_bytes(size as usize, "structure")
            .map_err(|_| R2rError::OutOfImage {
                what: what.to_string(),
                rva,
                size,
            })
    }

    /// The section of `kind`, if the header lists it.
    pub fn section(&self, kind: u32) -> Option<R2rSection> {
        self.r2r_sections.iter().copied().find(|s| s.kind == kind)
    }

    /// The bytes of the section of `kind`, if the header lists it.
    pub fn section_bytes(&self, kind: u32) -> Result<Option<&'a [u8]>, R2rError> {
        match self.section(kind) {
            Some(s) => Ok(Some(self.at(s.rva, s.size, "ReadyToRun section")?)),
            None => Ok(None),
        }
    }

    /// The end of a hot or cold part: its `end` RVA; on arm64, which stores none, its
    /// start plus the length in its unwind data; on ARM32, the next runtime function's
    /// start.
    pub fn function_end(&self, index: usize) -> Option<u32> {
        use crate::unwind::aarch64::unwind_data::{
            packed_flag, packed_function_length, xdata_function_length,
        };
        let rf = self.runtime_functions.get(index)?;
        if rf.end != 0 {
            return Some(rf.end);
        }
        if self.arch == TargetArch::Arm64 {
            let length = if packed_flag(rf.unwind) != 0 {
                packed_function_length(rf.unwind)
            } else {
                let header = self.at(rf.unwind, 4, "arm64 unwind data").ok()?;
                xdata_function_length(u32::from_le_bytes(header.try_into().ok()?))
            };
            return rf.begin.checked_add(u32::try_from(length).ok()?);
        }
        self.runtime_functions.get(index + 1).map(|n| n.begin)
    }

    fn read_perf_map_entry(&self, rva: u32, size: u32) -> Option<PerfMapDebugEntry> {
        let entry_size = std::mem::size_of::<ImageDebugDirectory>() as u32;
        let dir = self
            .at(rva, size - size % entry_size, "debug directory")
            .ok()?;
        for raw in dir.chunks_exact(entry_size as usize) {
            let (entry, _) = object::pod::from_bytes::<ImageDebugDirectory>(raw).ok()?;
            if entry.typ.get(LE).0 != IMAGE_DEBUG_TYPE_PERFMAP {
                continue;
            }
            let len = entry.size_of_data.get(LE) as usize;
            let start = entry.pointer_to_raw_data.get(LE) as usize;
            let data = Cursor::new(self.bytes)
                .at(start)
                .read_bytes(len, "PerfMap debug entry")
                .ok()?;
            let mut c = Cursor::new(data);
            if c.read_u32("PerfMap entry magic").ok()? != PERFMAP_ENTRY_MAGIC {
                return None;
            }
            let signature = c.read_array::<16>("PerfMap entry signature").ok()?;
            let version = c.read_u32("PerfMap entry version").ok()?;
            let name = c.rest();
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            return Some(PerfMapDebugEntry {
                signature,
                version,
                file_name: String::from_utf8_lossy(name).into_owned(),
            });
        }
        None
    }
}
