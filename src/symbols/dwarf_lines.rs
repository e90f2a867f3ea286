//! Source lines from an ELF file's DWARF (`.debug_line`): a NativeAOT executable's separate
//! `.dbg` file gives its managed code's file and line this way, as gdb shows them.

use std::path::{Path, PathBuf};

use gimli::{EndianSlice, LittleEndian};
use object::{Object, ObjectSection};

/// Most bytes inflated for one file's sections (a `.dbg` of a large service has tens of MB
/// of DWARF; a damaged one must not make cdac allocate gigabytes).
const MAX_INFLATED: u64 = 512 << 20;

/// A file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwarfLine {
    /// The source file, as the compiler recorded it.
    pub file: String,
    /// Its line.
    pub line: u32,
}

/// Every row of every line program, sorted by address (link-time addresses).
#[derive(Debug, Default)]
pub struct DwarfLines {
    /// (address, index into `files`, line); a row with `u32::MAX` as file ends a sequence.
    rows: Vec<(u64, u32, u32)>,
    files: Vec<String>,
}

/// The separate debug file an executable names (`.gnu_debuglink`), beside it or in its
/// `.debug` folder, when it is of this very build (the same GNU build id): a `.dbg` left
/// from another build would give wrong lines.
pub fn debug_link(executable: &Path) -> Option<PathBuf> {
    let map = crate::memory::map_regular_file(executable).ok()?;
    let file = object::File::parse(&*map).ok()?;
    let (name, _crc) = file.gnu_debuglink().ok()??;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    if name.components().count() != 1 {
        return None;
    }
    let id = file.build_id().ok()?;
    let dir = executable.parent()?;
    [dir.join(name), dir.join(".debug").join(name)]
        .into_iter()
        .filter(|p| p.is_file() && p != executable)
        .find(|p| {
            let same = crate::memory::map_regular_file(p)
                .ok()
                .and_then(|m| {
                    object::File::parse(&*m)
                        .ok()?
                        .build_id()
                        .ok()
                        .map(|b| b.map(<[u8]>::to_vec))
                })
                .is_some_and(|other| other.as_deref() == id);
            if !same {
                tracing::debug!(
                    "{}: another build's debug file (build id differs)",
                    p.display()
                );
            }
            same
        })
}

impl DwarfLines {
    /// Reads the line programs of the ELF file at `path`.
    pub fn load(path: &Path) -> Result<DwarfLines, String> {
        let bytes = crate::memory::map_regular_file(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let file = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut sections: Vec<(gimli::SectionId, Vec<u8>)> = Vec::new();
        let mut budget = MAX_INFLATED;
        for id in [
            gimli::SectionId::DebugAbbrev,
            gimli::SectionId::DebugInfo,
            gimli::SectionId::DebugLine,
            gimli::SectionId::DebugLineStr,
            gimli::SectionId::DebugStr,
            gimli::SectionId::DebugStrOffsets,
            gimli::SectionId::DebugAddr,
        ] {
            if let Some(s) = file.section_by_name(id.name()) {
                let data = section_bytes(&s, budget)?;
                budget = budget.saturating_sub(data.len() as u64);
                sections.push((id, data));
            }
        }
        let load = |id: gimli::SectionId| -> Result<EndianSlice<'_, LittleEndian>, gimli::Error> {
            let data = sections
                .iter()
                .find(|(s, _)| *s == id)
                .map_or(&[][..], |(_, d)| d.as_slice());
            Ok(EndianSlice::new(data, LittleEndian))
        };
        let dwarf = gimli::Dwarf::load(load).map_err(|e| e.to_string())?;
        let mut out = DwarfLines::default();
        let mut file_ids: std::collections::HashMap<String, u32> = Default::default();
        let mut units = dwarf.units();
        while let Some(header) = units.next().map_err(|e| e.to_string())? {
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            let mut rows = program.rows();
            while let Ok(Some((header, row))) = rows.next_row() {
                if row.end_sequence() {
                    out.rows.push((row.address(), u32::MAX, 0));
                    continue;
                }
                let Some(entry) = row.file(header) else {
                    continue;
                };
                let mut path = String::new();
                if let Some(dir) = entry.directory(header) {
                    if let Ok(d) = dwarf.attr_string(&unit, dir) {
                        path.push_str(&d.to_string_lossy());
                    }
                }
                if let Ok(name) = dwarf.attr_string(&unit, entry.path_name()) {
                    let name = name.to_string_lossy();
                    if name.starts_with('/') || path.is_empty() {
                        path = name.into_owned();
                    } else {
                        path = format!("{}/{name}", path.trim_end_matches('/'));
                    }
                }
                let next = out.files.len() as u32;
                let id = *file_ids.entry(path.clone()).or_insert_with(|| {
                    out.files.push(path);
                    next
                });
                let line = row.line().map_or(0, |l| l.get() as u32);
                out.rows.push((row.address(), id, line));
            }
        }
        // Stable: at one address an end of sequence comes before the next sequence's start.
        out.rows.sort_by_key(|&(a, f, _)| (a, f != u32::MAX));
        Ok(out)
    }

    /// The file and line of link-time address `address`; `None` outside every sequence or
    /// on a row of line 0 (code the compiler tied to no line).
    pub fn lookup(&self, address: u64) -> Option<DwarfLine> {
        let i = self.rows.partition_point(|&(a, _, _)| a <= address);
        let (_, file, line) = *self.rows.get(i.checked_sub(1)?)?;
        if file == u32::MAX || line == 0 {
            return None;
        }
        Some(DwarfLine {
            file: self.files.get(file as usize)?.clone(),
            line,
        })
    }

    /// Whether any line program was found.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A section's bytes, inflated when it is compressed (`SHF_COMPRESSED`, zlib), within
/// `budget` bytes.
fn section_bytes(section: &object::Section<'_, '_>, budget: u64) -> Result<Vec<u8>, String> {
    let compressed = section.compressed_data().map_err(|e| e.to_string())?;
    match compressed.format {
        object::CompressionFormat::None => Ok(compressed.data.to_vec()),
        object::CompressionFormat::Zlib => {
            if compressed.uncompressed_size > budget {
                return Err(format!(
                    "its DWARF inflates past {MAX_INFLATED} bytes ({} for {})",
                    compressed.uncompressed_size,
                    section.name().unwrap_or("?")
                ));
            }
            miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(
                compressed.data,
                compressed.uncompressed_size as usize,
            )
            .map_err(|e| format!("inflating {}: {e:?}", section.name().unwrap_or("?")))
        }
        other => Err(format!("a section compressed as {other:?}")),
    }
}
