//! NativeAOT's `DotNetRuntimeDebugHeader` (.NET 8, 9 and 10), read as a data descriptor.
//!
//! Before .NET 11 a NativeAOT executable exports no contract descriptor. It exports this
//! header instead, filled at start-up (all zero in the file on disk):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | cookie `"DNDH"` |
//! | 4 | u16 major version (5 in .NET 10), u16 minor |
//! | 8 | u32 flags (bit 0: 64-bit pointers), u32 padding |
//! | 16 | pointer to `{type name, field name, u32 offset, u32 pad}` entries, ended by a null name |
//! | 24 | pointer to `{global name, address}` entries, ended by a null name |
//!
//! A field named `SIZEOF` is the type's size. The header's names are the runtime's C++
//! member names (`RuntimeThreadLocals.m_pNext`); the loader renames the ones cdac reads to
//! the names .NET 11's NativeAOT contract descriptor gives the same fields
//! (`Thread.LinkNext`), so that one record reads both. The table is `RENAMED`: a field
//! renamed by a later header is one line there. Entries cdac does not rename are kept under
//! their own names.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::memory::{DataLayout, Target};

use super::{json, DataDescriptor, DescriptorError};

/// The symbol NativeAOT executables of .NET 8, 9 and 10 export.
pub const DEBUG_HEADER_SYMBOL: &str = "DotNetRuntimeDebugHeader";

const COOKIE: &[u8; 4] = b"DNDH";
/// Most type entries or globals read: .NET 10 has 94 and 6.
const MAX_ENTRIES: usize = 4096;
/// Longest name read.
const MAX_NAME: usize = 256;
/// The name the header gives a type's size.
const SIZE_FIELD: &str = "SIZEOF";

/// How the header names a field cdac reads, and the name .NET 11's descriptor gives it.
struct Rename {
    header: (&'static str, &'static str),
    descriptor: (&'static str, &'static str),
}

const fn rename(
    header: (&'static str, &'static str),
    descriptor: (&'static str, &'static str),
) -> Rename {
    Rename { header, descriptor }
}

/// The header's fields cdac reads, under the names .NET 11 gives them.
const RENAMED: &[Rename] = &[
    rename(
        ("ThreadStore", "m_ThreadList"),
        ("ThreadStore", "FirstThreadLink"),
    ),
    rename(("RuntimeThreadLocals", "m_pNext"), ("Thread", "LinkNext")),
    rename(
        ("RuntimeThreadLocals", "m_eeAllocContext"),
        ("Thread", "AllocContext"),
    ),
    rename(("RuntimeThreadLocals", "m_threadId"), ("Thread", "OSId")),
    rename(
        ("RuntimeThreadLocals", "m_pExInfoStackHead"),
        ("Thread", "ExceptionTracker"),
    ),
    rename(
        ("ExInfo", "m_pPrevExInfo"),
        ("ExInfo", "PreviousNestedInfo"),
    ),
    rename(("ExInfo", "m_exception"), ("ExInfo", "ThrownObject")),
    rename(
        ("ee_alloc_context", "m_rgbAllocContextBuffer"),
        ("EEAllocContext", "GCAllocationContext"),
    ),
    rename(
        ("gc_alloc_context", "alloc_ptr"),
        ("GCAllocContext", "Pointer"),
    ),
    rename(
        ("gc_alloc_context", "alloc_limit"),
        ("GCAllocContext", "Limit"),
    ),
    rename(("MethodTable", "m_uFlags"), ("MethodTable", "Flags")),
    rename(("MethodTable", "m_uBaseSize"), ("MethodTable", "BaseSize")),
    rename(
        ("MethodTable", "m_pRelatedParameterType"),
        ("MethodTable", "RelatedType"),
    ),
    rename(("MethodTable", "m_VTable"), ("MethodTable", "VTable")),
    rename(
        ("RuntimeInstance", "m_pThreadStore"),
        ("RuntimeInstance", "ThreadStore"),
    ),
];

/// The header's globals, under the names cdac reads them by. Each entry is the address of
/// the object itself (the RuntimeInstance, `GcDacVars`, the crash buffer, the free object's
/// MethodTable), where .NET 11's globals are addresses of variables holding it: the names
/// say so where a reader would tell them apart.
const GLOBALS: &[(&str, &str)] = &[
    ("g_pTheRuntimeInstance", "RuntimeInstanceAddress"),
    ("g_gcDacGlobals", "GcDacVars"),
    // The free object's MethodTable itself (11's `FreeObjectMethodTable` holds its address).
    ("g_pFreeObjectEEType", "FreeObjectMethodTableAddress"),
    ("g_CrashInfoBuffer", "CrashInfoBuffer"),
    ("g_stressLog", "StressLog"),
    ("moduleBaseAddress", "ModuleBaseAddress"),
];

/// What the header says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugHeaderVersion {
    /// Major version (5 in .NET 10).
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}

/// Reads the header at `addr` into a descriptor: its types (renamed per `RENAMED`), its
/// globals (per `GLOBALS`), `RuntimeFlavor` "NativeAot" and no contracts.
pub fn load(
    target: &Target,
    addr: u64,
) -> Result<(DataDescriptor, DebugHeaderVersion), DescriptorError> {
    let name = format!("{DEBUG_HEADER_SYMBOL}@{addr:#x}");
    let read_err = |what: &'static str| {
        let name = name.clone();
        move |source| DescriptorError::Read {
            descriptor: name,
            what,
            source,
        }
    };
    let head = target.read_bytes(addr, 32).map_err(read_err("header"))?;
    if &head[..4] != COOKIE {
        return Err(invalid(
            &name,
            format!("cookie is {:02x?}, not \"DNDH\"", &head[..4]),
        ));
    }
    // `head` holds the 32 bytes read above: every offset below is inside it.
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]);
    let u32_at = |o: usize| u32::from(u16_at(o)) | u32::from(u16_at(o + 2)) << 16;
    let u64_at = |o: usize| u64::from(u32_at(o)) | u64::from(u32_at(o + 4)) << 32;
    let version = DebugHeaderVersion {
        major: u16_at(4),
        minor: u16_at(6),
    };
    let flags = u32_at(8);
    if flags & 1 == 0 {
        return Err(invalid(
            &name,
            "the header describes a 32-bit runtime, which cdac does not read".into(),
        ));
    }
    let types_at = u64_at(16);
    let globals_at = u64_at(24);
    if types_at == 0 || globals_at == 0 {
        return Err(invalid(
            &name,
            "the header is not filled in (the runtime fills it at start-up: a file on disk, or a process \
             caught before that, has none)"
                .into(),
        ));
    }

    let mut types: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for i in 0..MAX_ENTRIES {
        let entry = types_at + 24 * i as u64;
        let words = target
            .read_pointers(entry, 2)
            .map_err(read_err("type entries"))?;
        if words[0] == 0 {
            break;
        }
        let offset = target
            .read_u32(entry + 16)
            .map_err(read_err("type entries"))?;
        let ty = target
            .read_c_string(words[0], MAX_NAME)
            .map_err(read_err("type names"))?;
        let field = target
            .read_c_string(words[1], MAX_NAME)
            .map_err(read_err("field names"))?;
        let (ty, field) = renamed(&ty, &field);
        let field = if field == SIZE_FIELD {
            "!".to_string()
        } else {
            field
        };
        types
            .entry(ty)
            .or_default()
            .insert(field, u64::from(offset));
    }
    let mut globals: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..MAX_ENTRIES {
        let entry = globals_at + 16 * i as u64;
        let words = target
            .read_pointers(entry, 2)
            .map_err(read_err("globals"))?;
        if words[0] == 0 {
            break;
        }
        let global = target
            .read_c_string(words[0], MAX_NAME)
            .map_err(read_err("global names"))?;
        let global = GLOBALS
            .iter()
            .find(|(h, _)| *h == global)
            .map_or(global, |(_, d)| d.to_string());
        globals.insert(global, words[1]);
    }

    let text = descriptor_json(&types, &globals);
    let physical = json::parse(&name, text.as_bytes())?;
    let mut descriptor = DataDescriptor::new(DataLayout::LE64);
    descriptor.merge(&name, &physical, &[])?;
    Ok((descriptor, version))
}

fn renamed(ty: &str, field: &str) -> (String, String) {
    match RENAMED.iter().find(|r| r.header == (ty, field)) {
        Some(r) => (r.descriptor.0.to_string(), r.descriptor.1.to_string()),
        None if field == SIZE_FIELD => {
            // A renamed type keeps its size under its new name.
            let new_ty = RENAMED
                .iter()
                .find(|r| r.header.0 == ty)
                .map_or(ty, |r| r.descriptor.0);
            (new_ty.to_string(), field.to_string())
        }
        None => (ty.to_string(), field.to_string()),
    }
}

/// The compact JSON form of what the header said (format 2: globals may be strings).
fn descriptor_json(
    types: &BTreeMap<String, BTreeMap<String, u64>>,
    globals: &BTreeMap<String, u64>,
) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let mut text = String::from("{\"version\":2,\"types\":{");
    for (i, (ty, fields)) in types.iter().enumerate() {
        let _ = write!(text, "{}{}:{{", if i > 0 { "," } else { "" }, quote(ty));
        for (j, (field, offset)) in fields.iter().enumerate() {
            let _ = write!(
                text,
                "{}{}:{offset}",
                if j > 0 { "," } else { "" },
                quote(field)
            );
        }
        text.push('}');
    }
    text.push_str("},\"globals\":{\"RuntimeFlavor\":[\"NativeAot\",\"string\"],\"Architecture\":[\"x64\",\"string\"]");
    for (global, value) in globals {
        let _ = write!(text, ",{}:[\"{value:#x}\",\"pointer\"]", quote(global));
    }
    text.push_str("},\"contracts\":{}}");
    text
}

fn invalid(descriptor: &str, detail: String) -> DescriptorError {
    DescriptorError::Invalid {
        descriptor: descriptor.to_string(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;

    /// A header as .NET 10 lays it out at `base`, with a few of its entries.
    fn header_at(base: u64, edit: impl FnOnce(&mut crate::memory::builder::Region)) -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(base, 0x2000);
        let mut names = Vec::new();
        let mut at = 0x1000usize;
        for s in [
            "RuntimeThreadLocals",
            "m_pNext",
            "SIZEOF",
            "ExInfo",
            "m_exception",
            "Weird",
            "m_field",
            "g_pTheRuntimeInstance",
            "g_gcDacGlobals",
            "g_other",
        ] {
            r.bytes(at, format!("{s}\0").as_bytes());
            names.push(base + at as u64);
            at += s.len() + 1;
        }
        let entries = [(0, 1, 96u32), (0, 2, 208), (3, 4, 16), (5, 6, 4)];
        for (i, (t, f, o)) in entries.iter().enumerate() {
            let e = 0x100 + 24 * i;
            r.u64(e, names[*t]).u64(e + 8, names[*f]).u32(e + 16, *o);
        }
        let globals = [(7, 0x7000_1000u64), (8, 0x5000_2000), (9, 0x1234)];
        for (i, (n, v)) in globals.iter().enumerate() {
            r.u64(0x200 + 16 * i, names[*n]).u64(0x200 + 16 * i + 8, *v);
        }
        r.bytes(0, b"DNDH").u16(4, 5).u16(6, 0).u32(8, 1);
        r.u64(16, base + 0x100).u64(24, base + 0x200);
        edit(r);
        b.into_target()
    }

    #[test]
    fn header_fields_and_globals_take_the_names_of_the_contract_descriptor() {
        let addr = 0x10_0000;
        let target = header_at(addr, |_| {});
        let (d, version) = load(&target, addr).expect("header");
        assert_eq!(version, DebugHeaderVersion { major: 5, minor: 0 });
        assert_eq!(d.ty("Thread").unwrap().offset("LinkNext").unwrap(), 96);
        assert_eq!(d.ty("Thread").unwrap().size().unwrap(), 208);
        assert_eq!(d.ty("ExInfo").unwrap().offset("ThrownObject").unwrap(), 16);
        assert_eq!(
            d.ty("Weird").unwrap().offset("m_field").unwrap(),
            4,
            "unknown entries kept"
        );
        assert_eq!(
            d.global_value("RuntimeInstanceAddress").unwrap(),
            0x7000_1000
        );
        assert_eq!(d.global_value("GcDacVars").unwrap(), 0x5000_2000);
        assert_eq!(d.global_value("g_other").unwrap(), 0x1234);
        assert_eq!(d.global_string("RuntimeFlavor").unwrap(), "NativeAot");
        assert!(d.contracts().is_empty());
    }

    #[test]
    fn an_unfilled_or_foreign_header_is_an_error_naming_why() {
        let addr = 0x10_0000;
        let target = header_at(addr, |r| {
            r.u64(16, 0);
        });
        let e = load(&target, addr).unwrap_err().to_string();
        assert!(e.contains("not filled in"), "{e}");

        let target = header_at(addr, |r| {
            r.bytes(0, b"XXXX");
        });
        let e = load(&target, addr).unwrap_err().to_string();
        assert!(e.contains("cookie"), "{e}");
    }
}
