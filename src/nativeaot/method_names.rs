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

/// Most funclets one method has (catch, finally and filter blocks), when looking back from
/// one to its method.
const MAX_FUNCLETS: usize = 4096;

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
        let bytes = crate::memory::map_regular_file(&path)
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
            .read_pointer(base.wrapping_add(modules.address()))
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
        let code_start = base.wrapping_add(code.address());
        let managed_code = (code_start, code_start.saturating_add(code.size()));
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
        if function.is_none() && !self.functions.is_empty() {
            // `.eh_frame` covers every function of the managed code: an address outside
            // all of them is padding or data, not a method to guess a name for.
            return None;
        }
        // A funclet belongs to the method whose main body precedes it (the nearest
        // function before it that is not a funclet); a function is a method when the map
        // names its start.
        let owner_start = match function {
            Some(f) if f.funclet => self.parent_of(f.start),
            Some(f) => Some(f.start),
            None => self.floor_entry(ip).map(|e| e.start),
        };
        let entry = owner_start.and_then(|s| self.entry_at(s));
        match (entry, owner_start) {
            (Some(e), _) => Some(CodeAt::Method(self.method(e), ip - e.start)),
            (None, Some(start)) => Some(CodeAt::Unnamed(start)),
            (None, None) => function.map(|f| CodeAt::Unnamed(f.start)),
        }
    }

    /// The start of the main body a funclet starting at `funclet_start` belongs to.
    fn parent_of(&self, funclet_start: u64) -> Option<u64> {
        let i = self.functions.partition_point(|f| f.start < funclet_start);
        self.functions[..i]
            .iter()
            .rev()
            .take(MAX_FUNCLETS)
            .find(|f| !f.funclet)
            .map(|f| f.start)
    }

    /// The text the runtime prints for code it cannot name: `module!<BaseAddress>+0x…`.
    pub fn unnamed_text(&self, module_name: &str, ip: u64) -> String {
        format!(
            "{module_name}!<BaseAddress>+{:#x}",
            ip.wrapping_sub(self.base)
        )
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
            if let Some((whole, parts)) = type_hashes(metadata, token, 0) {
                out.insert((whole, true), name.clone());
                out.insert((parts, false), name);
            }
        }
        out
    }
}

/// Most enclosing types followed for a nested type's hash.
const MAX_NESTING: usize = 32;

/// A type's `MethodTable.HashCode` under both styles ([`TypeHashStyle::FullName`],
/// [`TypeHashStyle::NamespaceXorName`]): a nested type's is its enclosing type's plus that
/// rotated left 11 bits, XOR the hash of its own name (checked on `Parking.<>c` of 10.0.12 and
/// 11.0.0: 0xd712befa and 0x89dc3792).
fn type_hashes(
    metadata: &Metadata,
    token: crate::formats::nativeaot::metadata::Token,
    depth: usize,
) -> Option<(u32, u32)> {
    let (namespace, name, enclosing) = metadata.type_parts(token).ok()?;
    if !enclosing.is_nil() {
        if depth >= MAX_NESTING {
            return None;
        }
        let (outer_whole, outer_parts) = type_hashes(metadata, enclosing, depth + 1)?;
        let own = name_hash(&name);
        let nest = |outer: u32| outer.wrapping_add(outer.rotate_left(11)) ^ own;
        return Some((nest(outer_whole), nest(outer_parts)));
    }
    let whole = if namespace.is_empty() {
        name_hash(&name)
    } else {
        name_hash(&format!("{namespace}.{name}"))
    };
    Some((whole, name_hash(&namespace) ^ name_hash(&name)))
}

/// The runtime's hash of a type name (`MethodTable.HashCode`): two interleaved
/// rotate-add-xor accumulators over the name's UTF-16 units.
pub fn name_hash(name: &str) -> u32 {
    let units: Vec<u16> = name.encode_utf16().collect();
    let mut h1: u32 = 0x6DA3_B944;
    let mut h2: u32 = 0;
    for pair in units.chunks(2) {
        h1 = h1.wrapping_add(h1.rotate_left(5)) ^ u32::from(pair[0]);
        if let Some(&c) = pair.get(1) {
            h2 = h2.wrapping_add(h2.rotate_left(5)) ^ u32::from(c);
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
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => {
                // Functions after a damaged entry are not known: their addresses get no name.
                tracing::debug!("the executable's .eh_frame: {e}");
                break;
            }
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        let start = base.wrapping_add(fde.initial_address());
        if !(managed_code.0..managed_code.1).contains(&start) {
            continue;
        }
        let funclet = match fde.lsda() {
            Some(gimli::Pointer::Direct(lsda)) => target
                .read_u8(base.wrapping_add(lsda))
                .map(|flags| flags & 3 != 0)
                .unwrap_or(false),
            _ => false,
        };
        out.push(Function {
            start,
            end: start.saturating_add(fde.len()),
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
        let h = name_hash;
        assert_eq!(h("System.String"), STRING_HASH_10);
        assert_eq!(h("System") ^ h("String"), STRING_HASH_11);
    }

    const STRING_HASH_10: u32 = 0xb74f_3361;
    const STRING_HASH_11: u32 = 0x03eb_ebe0;

    #[test]
    fn nested_type_hashes_match_the_runtimes() {
        // MethodTable.HashCode of Cdac.TestbedAot.Parking.<>c (the lambdas' class) read from
        // the NativeAOT testbed of 10.0.12 and 11.0.0.
        let nest = |outer: u32| outer.wrapping_add(outer.rotate_left(11)) ^ name_hash("<>c");
        assert_eq!(nest(name_hash("Cdac.TestbedAot.Parking")), 0xd712_befa);
        assert_eq!(
            nest(name_hash("Cdac.TestbedAot") ^ name_hash("Parking")),
            0x89dc_3792
        );
    }
}
