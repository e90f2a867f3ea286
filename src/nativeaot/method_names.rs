//! Managed method names of a NativeAOT executable without its `.dbg` file: the compiler's
//! stack-trace metadata (the module header the `__modules` section points at → blob 27, the
//! map of method starts, and blob 13, the metadata naming them), read from the target, so
//! the relocated pointers are the runtime's. The executable's `.eh_frame` tells where each
//! function starts, so an address in a method the map leaves out is never given its
//! neighbour's name, and a funclet (a catch or finally block, a function of its own) is
//! named after the method it belongs to.

use std::collections::HashMap;

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection};

use crate::formats::nativeaot::metadata::{Metadata, TYPE_DEFINITION, TYPE_REFERENCE};
use crate::formats::nativeaot::module_header::{blob, blobs, ModuleHeader, HEADER_SIZE};
use crate::formats::nativeaot::stack_trace_map::{self, MapEntry};
use crate::runtime::Runtime;

/// Why an executable's method names cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum NamesError {
    /// The executable's file is not at hand (its section table says where the module
    /// header and the managed code are).
    #[error("the executable {0} cannot be read here (give --sysroot for a core of another machine): {1}")]
    NoFile(String, String),
    /// The file lacks a section the names need.
    #[error("the executable has no {0} section")]
    NoSection(&'static str),
    /// Target memory could not be read.
    #[error("reading the {what}: {detail}")]
    Read {
        /// What.
        what: &'static str,
        /// Why not.
        detail: String,
    },
    /// The data does not decode.
    #[error(transparent)]
    Format(#[from] crate::formats::nativeaot::AotFormatError),
}

/// What a build without stack-trace data (`StackTraceSupport=false`) leaves its frames.
pub const NO_STACK_TRACE_DATA: &str =
    "the executable was built without stack-trace data (StackTraceSupport=false): its managed \
     frames keep their addresses, as the runtime's own traces do";

/// A managed method of the executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AotMethod {
    /// Start of its main body.
    pub start: u64,
    /// Its name as the runtime prints it (`Ns.Type.Method(Int32)`).
    pub name: String,
    /// `[StackTraceHidden]`: the runtime leaves it out of its stack traces.
    pub hidden: bool,
}

/// What an address of managed code is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeAt {
    /// In a named method, at this offset from its start.
    Method(AotMethod, u64),
    /// In a function of the managed code the stack-trace map does not name (a method with
    /// reflection metadata, such as `Main`; compiler-made stubs); its start.
    Unnamed(u64),
}

/// How the runtime hashes type names into `MethodTable.HashCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeHashStyle {
    /// .NET 10: the hash of `Namespace.Name`.
    FullName,
    /// .NET 11: the hash of the namespace XOR the hash of the name.
    NamespaceXorName,
}

impl TypeHashStyle {
    /// The style of `rt`'s runtime (.NET 11 changed it).
    pub fn of(rt: &Runtime) -> TypeHashStyle {
        match rt.version().and_then(|v| v.major()) {
            Some(major) if major >= 11 => TypeHashStyle::NamespaceXorName,
            _ => TypeHashStyle::FullName,
        }
    }
}

/// One function of the managed code, from `.eh_frame`.
#[derive(Debug, Clone, Copy)]
struct Function {
    start: u64,
    end: u64,
    funclet: bool,
}

/// The executable's method names.
#[derive(Debug)]
pub struct MethodNames {
    metadata: Option<Metadata>,
    /// Sorted by start; empty in a build without stack-trace data.
    map: Vec<MapEntry>,
    /// Sorted by start.
    functions: Vec<Function>,
    managed_code: (u64, u64),
    /// The module's load address (for the runtime's `<BaseAddress>+0x…` of unnamed code).
    base: u64,
    /// Type name by its hash, per style.
    type_hashes: HashMap<(u32, bool), String>,
}

impl MethodNames {
    /// Reads the names of `rt`'s executable.
    pub fn for_runtime(rt: &Runtime) -> Result<MethodNames, NamesError> {
        let target = rt.target();
        let module = rt.module();
        let path = target.local_path(&module.path);
        let bytes = std::fs::read(&path)
            .map_err(|e| NamesError::NoFile(path.display().to_string(), e.to_string()))?;
        let file = object::File::parse(&*bytes)
            .map_err(|e| NamesError::NoFile(path.display().to_string(), e.to_string()))?;
        let modules = file
            .section_by_name("__modules")
            .ok_or(NamesError::NoSection("__modules"))?;
        let code = file
            .section_by_name("__managedcode")
            .ok_or(NamesError::NoSection("__managedcode"))?;
        let base = module.base;
        let read_err = |what: &'static str| {
            move |e: crate::memory::ReadError| NamesError::Read {
                what,
                detail: e.to_string(),
            }
        };
        let header_at = target
            .read_pointer(base + modules.address())
            .map_err(read_err("module header pointer"))?;
        let fixed = target
            .read_bytes(header_at, HEADER_SIZE)
            .map_err(read_err("module header"))?;
        let header = ModuleHeader::parse(&fixed)?;
        let all = target
            .read_bytes(header_at, header.total_size())
            .map_err(read_err("module header"))?;
        let sections = header.rows(&all)?;
        let max_read = target.limits().max_read_bytes;
        let read_blob = |number: u32, what: &'static str| -> Result<(u64, Vec<u8>), NamesError> {
            let s = blob(&sections, number).ok_or(NamesError::Read {
                what,
                detail: format!("the module header lists no blob {number}"),
            })?;
            if s.length > max_read {
                return Err(NamesError::Read {
                    what,
                    detail: format!("{} bytes, over --max-read-bytes", s.length),
                });
            }
            let bytes = target
                .read_bytes(s.start, s.length as usize)
                .map_err(read_err(what))?;
            Ok((s.start, bytes))
        };
        let (map_at, map_bytes) = read_blob(blobs::STACK_TRACE_MAP, "stack-trace map")?;
        let map = stack_trace_map::decode(&map_bytes, map_at, target.limits().max_list_length)?;
        // Without stack-trace data the map is empty: the code is still known as managed.
        let metadata = if map.is_empty() {
            None
        } else {
            let (_, metadata_bytes) = read_blob(blobs::METADATA, "metadata")?;
            Some(Metadata::new(metadata_bytes)?)
        };
        let managed_code = (base + code.address(), base + code.address() + code.size());
        let functions = functions(&file, target, base, managed_code);
        let mut names = MethodNames {
            metadata,
            map,
            functions,
            managed_code,
            base,
            type_hashes: HashMap::new(),
        };
        names.type_hashes = names.hash_owner_types(target.limits().max_list_length as usize);
        Ok(names)
    }

    /// Whether the build carries stack-trace data (else see [`NO_STACK_TRACE_DATA`]).
    pub fn has_stack_trace_data(&self) -> bool {
        !self.map.is_empty()
    }

    /// The name of the method starting at `start`, when the map names one.
    pub fn method_at(&self, start: u64) -> Option<AotMethod> {
        self.entry_at(start).map(|e| self.method(e))
    }

    /// Whether the function containing `ip` is a funclet.
    pub fn is_funclet(&self, ip: u64) -> bool {
        self.function_at(ip).is_some_and(|f| f.funclet)
    }

    /// Every named method, by start.
    pub fn methods(&self) -> impl Iterator<Item = AotMethod> + '_ {
        self.map.iter().map(|e| self.method(e))
    }

    /// How many methods the map names.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map names none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `ip` is in the executable's managed code.
    pub fn is_managed_code(&self, ip: u64) -> bool {
        (self.managed_code.0..self.managed_code.1).contains(&ip)
    }

    /// What the code at `ip` is: `None` outside the managed code.
    pub fn lookup(&self, ip: u64) -> Option<CodeAt> {
        if !self.is_managed_code(ip) {
            return None;
        }
        let function = self.function_at(ip);
        // A funclet belongs to the method before it; a function is a method when the map
        // names its start.
        let owner_start = match function {
            Some(f) if f.funclet => self.floor_entry(f.start).map(|e| e.start),
            Some(f) => Some(f.start),
            None => self.floor_entry(ip).map(|e| e.start),
        };
        let entry = owner_start.and_then(|s| self.entry_at(s));
        match (entry, function) {
            (Some(e), _) => Some(CodeAt::Method(self.method(e), ip - e.start)),
            (None, Some(f)) => Some(CodeAt::Unnamed(f.start)),
            (None, None) => None,
        }
    }

    /// The text the runtime prints for code it cannot name: `module!<BaseAddress>+0x…`.
    pub fn unnamed_text(&self, module_name: &str, ip: u64) -> String {
        format!("{module_name}!<BaseAddress>+{:#x}", ip - self.base)
    }

    /// The type whose name hashes to `hash`, among the types that own methods.
    pub fn type_with_hash(&self, hash: u32, style: TypeHashStyle) -> Option<&str> {
        self.type_hashes
            .get(&(hash, style == TypeHashStyle::FullName))
            .map(String::as_str)
    }

    fn method(&self, e: &MapEntry) -> AotMethod {
        let name = match &self.metadata {
            Some(md) => md
                .method_text(e.owner, e.name, e.signature, e.generic_arguments)
                .unwrap_or_else(|err| format!("<method at {:#x}: {err}>", e.start)),
            None => format!("<method at {:#x}>", e.start),
        };
        AotMethod {
            start: e.start,
            name,
            hidden: e.hidden,
        }
    }

    fn entry_at(&self, start: u64) -> Option<&MapEntry> {
        let i = self.map.partition_point(|e| e.start < start);
        self.map.get(i).filter(|e| e.start == start)
    }

    fn floor_entry(&self, ip: u64) -> Option<&MapEntry> {
        let i = self.map.partition_point(|e| e.start <= ip);
        i.checked_sub(1).map(|i| &self.map[i])
    }

    fn function_at(&self, ip: u64) -> Option<Function> {
        let i = self.functions.partition_point(|f| f.start <= ip);
        let f = *self.functions.get(i.checked_sub(1)?)?;
        (ip < f.end).then_some(f)
    }

    /// The name of every type of the metadata (and every owner of a method) under both
    /// hash styles.
    fn hash_owner_types(&self, max_types: usize) -> HashMap<(u32, bool), String> {
        let mut seen = std::collections::HashSet::new();
        let mut out = HashMap::new();
        let Some(metadata) = &self.metadata else {
            return out;
        };
        let defined = metadata.type_definitions(max_types).unwrap_or_else(|e| {
            tracing::debug!("NativeAOT metadata types: {e}");
            Vec::new()
        });
        let owners = self.map.iter().map(|e| e.owner);
        for token in defined.into_iter().chain(owners) {
            if !matches!(token.kind(), TYPE_DEFINITION | TYPE_REFERENCE) || !seen.insert(token) {
                continue;
            }
            let Ok(name) = metadata.type_name(token) else {
                continue;
            };
            let (namespace, simple) = name.rsplit_once('.').unwrap_or(("", &name));
            out.insert((name_hash(name.as_bytes()), true), name.clone());
            out.insert(
                (
                    name_hash(namespace.as_bytes()) ^ name_hash(simple.as_bytes()),
                    false,
                ),
                name.clone(),
            );
        }
        out
    }
}

/// The runtime's hash of a type name (`MethodTable.HashCode`): two interleaved
/// rotate-add-xor accumulators over the name's bytes.
pub fn name_hash(bytes: &[u8]) -> u32 {
    let mut h1: u32 = 0x6DA3_B944;
    let mut h2: u32 = 0;
    for pair in bytes.chunks(2) {
        h1 = h1.wrapping_add(h1.rotate_left(5)) ^ u32::from(pair[0]);
        if let Some(&b) = pair.get(1) {
            h2 = h2.wrapping_add(h2.rotate_left(5)) ^ u32::from(b);
        }
    }
    h1 = h1.wrapping_add(h1.rotate_left(8));
    h2 = h2.wrapping_add(h2.rotate_left(8));
    h1 ^ h2
}

/// The managed code's functions from `.eh_frame`, with whether each is a funclet (its
/// LSDA's first byte says: kind 1 handler, 2 filter).
fn functions(
    file: &object::File<'_>,
    target: &crate::memory::Target,
    base: u64,
    managed_code: (u64, u64),
) -> Vec<Function> {
    let Some(eh) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = eh.data() else {
        return Vec::new();
    };
    let section = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut out = Vec::new();
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        let start = base + fde.initial_address();
        if !(managed_code.0..managed_code.1).contains(&start) {
            continue;
        }
        let funclet = match fde.lsda() {
            Some(gimli::Pointer::Direct(lsda)) => target
                .read_u8(base + lsda)
                .map(|flags| flags & 3 != 0)
                .unwrap_or(false),
            _ => false,
        };
        out.push(Function {
            start,
            end: start + fde.len(),
            funclet,
        });
    }
    out.sort_by_key(|f| f.start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_name_hashes_match_the_runtimes() {
        // MethodTable.HashCode of System.String in NativeAOT 10.0.12 (the whole name) and
        // 11.0.0 (namespace and name apart), read from the testbed's processes.
        let h = |s: &str| name_hash(s.as_bytes());
        assert_eq!(h("System.String"), STRING_HASH_10);
        assert_eq!(h("System") ^ h("String"), STRING_HASH_11);
    }

    const STRING_HASH_10: u32 = 0xb74f_3361;
    const STRING_HASH_11: u32 = 0x03eb_ebe0;
}
