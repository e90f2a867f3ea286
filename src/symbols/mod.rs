//! Naming native code: the ELF symbol that covers an address, in the module that holds
//! it.
//!
//! Symbols come from the module's file on disk: its `.symtab`, else the `.symtab` of its
//! separate debug file (found by build id under `/usr/lib/debug/.build-id/`, or by
//! `.gnu_debuglink` under `/usr/lib/debug`), else its `.dynsym`. When the file is not on
//! this machine (or is not the one the target mapped), the dynamic symbols are read from
//! the target's memory through `PT_DYNAMIC`. C++ names are demangled with `cpp_demangle`,
//! Rust names with `rustc-demangle`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use object::{Object, ObjectSymbol, SymbolKind};

use crate::memory::Target;
use crate::unwind::elf_modules::{self, ModuleMap};

pub mod dwarf_lines;
mod dynamic;

/// Most symbols kept for one module.
const MAX_SYMBOLS: usize = 4_000_000;
/// Longest symbol name kept (bytes).
const MAX_NAME: usize = 4096;
/// Where separate debug files live.
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// What an address is in native code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeSymbol {
    /// The module's path, as the target saw it.
    pub module: PathBuf,
    /// Where the module is loaded (the address of its ELF header).
    pub module_base: u64,
    /// The (demangled) name of the symbol covering the address, if any.
    pub symbol: Option<String>,
    /// Offset from the symbol's start, or from `module_base` without a symbol.
    pub offset: u64,
}

impl fmt::Display for NativeSymbol {
    /// `libc.so.6!__clock_nanosleep+0x23`, or `libfoo.so+0x1234` without a symbol.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .module
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_else(|| self.module.to_string_lossy());
        match &self.symbol {
            Some(name) => write!(f, "{file}!{name}+{:#x}", self.offset),
            None => write!(f, "{file}+{:#x}", self.offset),
        }
    }
}

/// The symbols of one module: its function symbols sorted by address (in the
/// file's addresses).
/// One symbol: file address, size, binding rank (global 2, weak 1, local 0), name.
#[derive(Debug, Clone)]
struct Sym {
    addr: u64,
    size: u64,
    rank: u8,
    name: Arc<str>,
}

#[derive(Debug, Default)]
struct SymbolTable {
    /// What to add to the file's addresses to get the target's.
    bias: u64,
    /// Sorted by address; aliases of one address stay together.
    symbols: Vec<Sym>,
}

impl SymbolTable {
    /// The symbol covering file address `addr`: a sized symbol containing it, else the
    /// nearest zero-sized symbol before it (assembly labels) when no sized symbol lies
    /// between.
    fn covering(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        let before = &self.symbols[..i];
        // A symbol's aliases share its address; the first sized one that covers wins.
        let mut fallback: Option<(u64, &str)> = None;
        for sym in before.iter().rev().take(64) {
            if sym.size > 0 {
                if addr - sym.addr < sym.size {
                    return Some((sym.addr, &sym.name));
                }
                return fallback;
            }
            match fallback {
                None => fallback = Some((sym.addr, &sym.name)),
                Some((f, _)) if f != sym.addr => return fallback,
                Some(_) => {}
            }
        }
        fallback
    }
}

impl SymbolTable {
    /// Every name at the address of the symbol covering `addr`.
    fn aliases(&self, addr: u64) -> Vec<String> {
        let Some((start, _)) = self.covering(addr) else {
            return Vec::new();
        };
        let from = self.symbols.partition_point(|s| s.addr < start);
        self.symbols[from..]
            .iter()
            .take_while(|s| s.addr == start)
            .map(|s| s.name.to_string())
            .collect()
    }
}

/// Names native code addresses of a target by the ELF symbols of its modules.
///
/// Cheap to create; each module's symbols are read on the first lookup in it and
/// cached. Thread-safe.
pub struct ElfSymbols {
    target: Target,
    modules: OnceLock<ModuleMap>,
    tables: Mutex<HashMap<usize, Arc<SymbolTable>>>,
    debug_root: PathBuf,
}

impl fmt::Debug for ElfSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElfSymbols")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ElfSymbols {
    /// A symbolizer over the modules mapped into `target`, looking for separate debug
    /// files under `/usr/lib/debug`.
    pub fn new(target: &Target) -> ElfSymbols {
        ElfSymbols::with_debug_root(target, Path::new(DEBUG_ROOT))
    }

    /// A symbolizer that looks for separate debug files under `debug_root` instead (a
    /// folder that does not exist turns the search off).
    pub fn with_debug_root(target: &Target, debug_root: &Path) -> ElfSymbols {
        ElfSymbols {
            target: target.clone(),
            modules: OnceLock::new(),
            tables: Mutex::new(HashMap::new()),
            debug_root: debug_root.to_path_buf(),
        }
    }

    fn modules(&self) -> &ModuleMap {
        self.modules
            .get_or_init(|| ModuleMap::new(self.target.mapped_files()))
    }

    /// The module and symbol holding `ip`; `None` when no ELF module is mapped there.
    pub fn lookup(&self, ip: u64) -> Option<NativeSymbol> {
        let (table, index) = self.table_of(ip)?;
        let module = &self.modules().modules()[index];
        let file_addr = ip.wrapping_sub(table.bias);
        let (symbol, offset) = match table.covering(file_addr) {
            Some((start, name)) => (Some(name.to_string()), file_addr - start),
            None => (None, ip.wrapping_sub(module.base)),
        };
        Some(NativeSymbol {
            module: module.path.clone(),
            module_base: module.base,
            symbol,
            offset,
        })
    }

    /// Every symbol name at the address of the symbol covering `ip` (the aliases of the
    /// name [`ElfSymbols::lookup`] gives, such as `__GI___clock_nanosleep`,
    /// `__clock_nanosleep` and `clock_nanosleep`); empty when no symbol covers it.
    pub fn aliases(&self, ip: u64) -> Vec<String> {
        let Some((table, _)) = self.table_of(ip) else {
            return Vec::new();
        };
        table.aliases(ip.wrapping_sub(table.bias))
    }

    fn table_of(&self, ip: u64) -> Option<(Arc<SymbolTable>, usize)> {
        let (index, module) = self.modules().find(ip)?;
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let table = tables
            .entry(index)
            .or_insert_with(|| Arc::new(self.load(&module.path, module.base)))
            .clone();
        Some((table, index))
    }

    /// Reads a module's symbols; an empty table when there are none to be had.
    fn load(&self, path: &Path, base: u64) -> SymbolTable {
        if let Ok(map) = crate::memory::map_regular_file(path) {
            if elf_modules::file_matches_target(&map, &self.target, base) {
                match self.read_file_symbols(&map, path, base) {
                    Ok(table) => return table,
                    Err(e) => tracing::debug!("symbols of {}: {e}", path.display()),
                }
            }
        }
        match dynamic::from_memory(&self.target, base) {
            Ok(table) => table,
            Err(e) => {
                tracing::debug!("dynamic symbols of {} in memory: {e}", path.display());
                SymbolTable::default()
            }
        }
    }

    fn read_file_symbols(
        &self,
        data: &[u8],
        path: &Path,
        base: u64,
    ) -> Result<SymbolTable, String> {
        let segments = elf_modules::program_headers(data)?;
        let bias = elf_modules::load_bias(base, &segments).ok_or("no PT_LOAD")?;
        let file = object::File::parse(data).map_err(|e| e.to_string())?;
        let mut symbols = symtab_of(&file, false);
        if symbols.is_empty() {
            if let Some(debug) = self.debug_file(&file, path) {
                if let Ok(map) = crate::memory::map_regular_file(&debug) {
                    if let Ok(dfile) = object::File::parse(&*map) {
                        symbols = symtab_of(&dfile, false);
                    }
                }
            }
        }
        if symbols.is_empty() {
            symbols = symtab_of(&file, true);
        }
        Ok(SymbolTable {
            bias,
            symbols: sort(symbols),
        })
    }

    /// The separate debug file of `file`, by build id, else by debug link.
    fn debug_file(&self, file: &object::File<'_>, path: &Path) -> Option<PathBuf> {
        if let Ok(Some(id)) = file.build_id() {
            if id.len() >= 2 {
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                let candidate = self
                    .debug_root
                    .join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]));
                if candidate.is_file() {
                    return Some(candidate);
                }
            }
        }
        let (name, _crc) = file.gnu_debuglink().ok()??;
        let name = Path::new(std::str::from_utf8(name).ok()?);
        if name.components().count() != 1 {
            return None;
        }
        let dir = path.parent()?;
        let in_root = self
            .debug_root
            .join(dir.strip_prefix("/").unwrap_or(dir))
            .join(name);
        [in_root, dir.join(".debug").join(name)]
            .into_iter()
            .find(|p| p.is_file() && p != path)
    }
}

/// Function symbols of `.symtab` (or `.dynsym`), demangled.
fn symtab_of(file: &object::File<'_>, dynamic: bool) -> Vec<Sym> {
    let symbols = if dynamic {
        file.dynamic_symbols()
    } else {
        file.symbols()
    };
    // (A separate debug file's code sections are NOBITS; its symbols still hold.)
    symbols
        .filter(|s| s.is_definition() && matches!(s.kind(), SymbolKind::Text))
        .filter_map(|s| {
            let name = s.name_bytes().ok()?;
            if name.is_empty() || name.len() > MAX_NAME {
                return None;
            }
            let name = unversioned(std::str::from_utf8(name).ok()?);
            let rank = if s.is_global() {
                2
            } else if s.is_weak() {
                1
            } else {
                0
            };
            Some(Sym {
                addr: s.address(),
                size: s.size(),
                rank,
                name: Arc::from(demangle(name)),
            })
        })
        .take(MAX_SYMBOLS)
        .collect()
}

/// A name without its symbol version (`pthread_cond_wait@@GLIBC_2.3.2`).
fn unversioned(name: &str) -> &str {
    match name.find('@') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

fn sort(mut symbols: Vec<Sym>) -> Vec<Sym> {
    // Among aliases, sized symbols and then global ones last, so that a lookup going back
    // meets them first.
    symbols.sort_by_key(|s| (s.addr, s.size.min(1), s.rank));
    symbols
}

/// The demangled form of a C++ or Rust symbol name (the name itself otherwise). Rust
/// names lose their hash.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") || is_rust_legacy(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return d;
            }
        }
    }
    name.to_string()
}

/// `_ZN...17h<16 hex digits>E`: a legacy-mangled Rust name.
fn is_rust_legacy(name: &str) -> bool {
    let b = name.as_bytes();
    name.starts_with("_ZN")
        && b.len() > 24
        && b.ends_with(b"E")
        && b[b.len() - 20..b.len() - 17] == *b"17h"
        && b[b.len() - 17..b.len() - 1]
            .iter()
            .all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_and_leaves_c_alone() {
        assert_eq!(
            demangle("_ZN7CorUnix10CPalThread7SuspendEv"),
            "CorUnix::CPalThread::Suspend()"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("__clock_nanosleep"), "__clock_nanosleep");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn covering_prefers_sized_symbols_and_falls_back_to_labels() {
        let t = SymbolTable {
            bias: 0,
            symbols: sort(
                [
                    (0x100, 0x10, 0, "f_local"),
                    (0x100, 0x10, 2, "f"),
                    (0x100, 0x10, 1, "f_weak"),
                    (0x100, 0, 2, "f_alias_label"),
                    (0x200, 0, 0, "label"),
                    (0x300, 0x20, 0, "g"),
                ]
                .into_iter()
                .map(|(addr, size, rank, name)| Sym {
                    addr,
                    size,
                    rank,
                    name: Arc::from(name),
                })
                .collect(),
            ),
        };
        assert_eq!(
            t.covering(0x105),
            Some((0x100, "f")),
            "global before weak, local"
        );
        assert_eq!(
            t.aliases(0x105),
            ["f_alias_label", "f_local", "f_weak", "f"]
        );
        assert_eq!(t.covering(0x110), None, "past f's end, before the label");
        assert_eq!(t.covering(0x250), Some((0x200, "label")));
        assert_eq!(t.covering(0x31f), Some((0x300, "g")));
        assert_eq!(t.covering(0x320), None);
        assert_eq!(t.covering(0x50), None);
        let d = NativeSymbol {
            module: PathBuf::from("/lib/libc.so.6"),
            module_base: 0x7000,
            symbol: Some("f".into()),
            offset: 0x23,
        };
        assert_eq!(d.to_string(), "libc.so.6!f+0x23");
        let d = NativeSymbol { symbol: None, ..d };
        assert_eq!(d.to_string(), "libc.so.6+0x23");
    }
}
