//! The .NET 8 layouts (8.0.33, or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`; measured on 8.0.4)
//! the Loader and RuntimeTypeSystem contracts read to name methods and
//! list modules: `MethodDesc` (and every kind a `MethodDescChunk` can hold, with their optional
//! slots), `MethodDescChunk`, `MethodTable`, `EEClass` (and its packed fields),
//! `InstantiatedMethodDesc`, `StoredSigMethodDesc`, `DynamicMethodDesc`, `Module` and its
//! lookup maps, `Assembly`, `DomainAssembly`, `PEAssembly`, `PEImage`, `PEImageLayout`, the
//! `AppDomain` and `SystemDomain` globals and the assembly list. Every offset the shipped
//! descriptor gives for them is read here, on the live testbed and on its `createdump --full`
//! dump, and checked against oracles that do not come from the descriptor: what reflection
//! says inside the testbed (`type_system` in the manifest: type handles, metadata tokens,
//! MethodHandle / FieldHandle values, `RuntimeModule.m_pData`, `RuntimeAssembly.m_assembly`,
//! GC-measured object sizes, DynamicMethod names, signature blobs), the PE files on disk,
//! the runtime's own MethodDesc size table in `libcoreclr.so`, and the runtime's precodes and
//! code (resolved with the PrecodeStubs and ExecutionManager contracts).
//! Where each offset comes from: descriptors/README.md.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use cdac::contracts::execution_manager::execution_manager;
use cdac::contracts::precode_stubs::non_virtual_entry_to_method_desc;
use cdac::descriptor::DataDescriptor;
use cdac::memory::Target;
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, testbed};
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader, PeFile, PeFile32, PeFile64};
use object::LittleEndian as LE;
use serde_json::Value;

/// `MethodDesc::s_ClassificationSizeTable` by build of libcoreclr.so (ELF virtual
/// address): 64 bytes indexed by `Flags & 0x3f`, the operand of `MethodDesc::SizeOf`
/// (`movzwl 0x6(%rdi),%eax; and $0x3f,%eax; lea table(%rip),%rcx; movzbl (%rax,%rcx),%eax`
/// in `objdump -d`, the only `movzwl 0x6(%rdi)` followed by `and $0x3f` in each build): at
/// 0x24c9b0 in 8.0.4, 0x24cb20 in 8.0.33, 0x24c7f0 in 8.0.0.
const SIZE_TABLES: [(&str, u64); 3] = [
    ("7c3796010ffdb407df859c3884e92bcad0cf7925", 0xc59f0), // 8.0.4
    ("be4af8fbe7201f286fe16d9afb6e7ac51280e11c", 0xc5e10), // 8.0.33
    ("00bbee3860797ccca61bc5bffd3a5da9a60c1108", 0xc59e0), // 8.0.0
];

// MethodDesc.Flags (m_wFlags).
const MDF_CLASSIFICATION: u16 = 0x7;
const MDF_HAS_NON_VTABLE_SLOT: u16 = 0x8;
const MDF_HAS_METHOD_IMPL: u16 = 0x10;
const MDF_HAS_NATIVE_CODE_SLOT: u16 = 0x20;
const MDF_STATIC: u16 = 0x80;
// Classifications.
const MC_IL: u16 = 0;
const MC_FCALL: u16 = 1;
const MC_PINVOKE: u16 = 2;
const MC_EEIMPL: u16 = 3;
const MC_ARRAY: u16 = 4;
const MC_INSTANTIATED: u16 = 5;
const MC_DYNAMIC: u16 = 7;
// MethodDesc.Flags3AndTokenRemainder, upper bits.
const MDF3_IS_UNBOXING_STUB: u16 = 0x4000;
// StoredSigMethodDesc.ExtendedFlags.
const EXT_IS_LCG_METHOD: u32 = 0x4000;
const EXT_IS_IL_STUB: u32 = 0x8000;
// InstantiatedMethodDesc.Flags2 & 7.
const IMD_GENERIC_METHOD_DEFINITION: u16 = 1;
const IMD_UNSHARED: u16 = 2;
const IMD_WRAPPER_STUB: u16 = 4;
// MethodTable.MTFlags (high word) and MTFlags2.
const MTF_HAS_COMPONENT_SIZE: u32 = 0x8000_0000;
const MTF_COLLECTIBLE: u32 = 0x1000_0000;
const MTF_CATEGORY_MASK: u32 = 0x000F_0000;
const MTF_CATEGORY_VALUE_TYPE: u32 = 0x0004_0000;
const MTF_CATEGORY_PRIMITIVE_VALUE_TYPE: u32 = 0x0006_0000;
const MTF_CATEGORY_TRUE_PRIMITIVE: u32 = 0x0007_0000;
const MTF_CATEGORY_ARRAY: u32 = 0x0008_0000;
const MTF_CATEGORY_SZARRAY: u32 = 0x000A_0000;
const MTF_CATEGORY_INTERFACE: u32 = 0x000C_0000;
const MTF2_HAS_PER_INST_INFO: u16 = 0x1;
const MTF2_HAS_INTERFACE_MAP: u16 = 0x2;
const MTF2_HAS_NON_VIRTUAL_SLOTS: u16 = 0x8;
const MTF2_HAS_CCTOR: u16 = 0x400;
const MTF2_HAS_SINGLE_NON_VIRTUAL_SLOT: u16 = 0x4000;
// CorElementType.
const ELEMENT_TYPE_I4: u8 = 0x8;
const ELEMENT_TYPE_VALUETYPE: u8 = 0x11;
const ELEMENT_TYPE_CLASS: u8 = 0x12;
const ELEMENT_TYPE_ARRAY: u8 = 0x14;
const ELEMENT_TYPE_SZARRAY: u8 = 0x1d;
// Module.Flags (transient flags).
const MODULE_IS_TENURED: u32 = 0x1;
const MODULE_IS_EDIT_AND_CONTINUE: u32 = 0x8;
/// MemberRefToDescMap: entries that are FieldDescs carry this flag (the map's mask is 3).
const MEMBER_REF_IS_FIELD: u64 = 0x2;
/// PEImageLayout.Flags: the image is mapped as the loader maps it (RVA = offset from base).
const LAYOUT_FLAG_MAPPED: u32 = 0x1;
/// Vtable slots per vtable indirection chunk (the chunk pointers follow the MethodTable).
const VTABLE_SLOTS_PER_CHUNK: u64 = 8;
/// sizeof(FieldDesc) on 64-bit (m_pMTOfEnclosingClass, then the 24-bit field RID): only the
/// oracle for FieldDescList, which the descriptor does not describe further.
const FIELD_DESC_SIZE: u64 = 16;
/// What the testbed's host (the apphost, through libhostpolicy.so) passes as the AppDomain's
/// friendly name; managed AppDomain.FriendlyName says the app's name instead (it does not
/// read the native name).
const NATIVE_FRIENDLY_NAME: &str = "clrhost";

// ---------------------------------------------------------------- reading with the descriptor

struct V<'a> {
    t: &'a Target,
    d: &'a DataDescriptor,
    what: &'a str,
    /// Where libcoreclr.so is loaded: FCall entry points are native code in it.
    coreclr: std::ops::Range<u64>,
}

impl<'a> V<'a> {
    fn new(rt: &'a Runtime, what: &'a str) -> V<'a> {
        V {
            t: rt.target(),
            d: rt.descriptor(),
            what,
            coreclr: rt.module().base..rt.module().end,
        }
    }

    fn off(&self, ty: &str, field: &str) -> u64 {
        self.d
            .ty(ty)
            .unwrap_or_else(|e| panic!("{e}"))
            .offset(field)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn size(&self, ty: &str) -> u64 {
        self.d
            .ty(ty)
            .unwrap_or_else(|e| panic!("{e}"))
            .size()
            .unwrap_or_else(|e| panic!("{e}")) as u64
    }

    fn global(&self, name: &str) -> u64 {
        self.d.global_value(name).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ptr(&self, addr: u64, ty: &str, field: &str) -> u64 {
        let at = addr + self.off(ty, field);
        self.t
            .read_pointer(at)
            .unwrap_or_else(|e| panic!("{}: {ty}.{field} of {addr:#x}: {e}", self.what))
    }

    fn u8(&self, addr: u64, ty: &str, field: &str) -> u8 {
        self.t
            .read_u8(addr + self.off(ty, field))
            .unwrap_or_else(|e| panic!("{}: {ty}.{field} of {addr:#x}: {e}", self.what))
    }

    fn u16(&self, addr: u64, ty: &str, field: &str) -> u16 {
        self.t
            .read_u16(addr + self.off(ty, field))
            .unwrap_or_else(|e| panic!("{}: {ty}.{field} of {addr:#x}: {e}", self.what))
    }

    fn u32(&self, addr: u64, ty: &str, field: &str) -> u32 {
        self.t
            .read_u32(addr + self.off(ty, field))
            .unwrap_or_else(|e| panic!("{}: {ty}.{field} of {addr:#x}: {e}", self.what))
    }

    fn read_ptr(&self, addr: u64) -> u64 {
        self.t
            .read_pointer(addr)
            .unwrap_or_else(|e| panic!("{}: pointer at {addr:#x}: {e}", self.what))
    }

    // ------------------------------------------------------------ MethodDesc

    fn md_flags(&self, md: u64) -> u16 {
        self.u16(md, "MethodDesc", "Flags")
    }

    fn classification(&self, md: u64) -> u16 {
        self.md_flags(md) & MDF_CLASSIFICATION
    }

    fn slot(&self, md: u64) -> u16 {
        self.u16(md, "MethodDesc", "Slot")
    }

    fn is_unboxing_stub(&self, md: u64) -> bool {
        self.u16(md, "MethodDesc", "Flags3AndTokenRemainder") & MDF3_IS_UNBOXING_STUB != 0
    }

    /// The size of the MethodDesc proper, by classification.
    fn base_size(&self, md: u64) -> u64 {
        let ty = match self.classification(md) {
            MC_IL => "MethodDesc",
            MC_FCALL => "FCallMethodDesc",
            MC_PINVOKE => "PInvokeMethodDesc",
            MC_EEIMPL => "EEImplMethodDesc",
            MC_ARRAY => "ArrayMethodDesc",
            MC_INSTANTIATED => "InstantiatedMethodDesc",
            MC_DYNAMIC => "DynamicMethodDesc",
            c => panic!("{}: MethodDesc {md:#x} has classification {c}", self.what),
        };
        self.size(ty)
    }

    /// The size of a MethodDesc with its optional slots, which follow it in the order
    /// non-vtable slot, MethodImpl, native-code slot.
    fn md_size(&self, md: u64) -> u64 {
        let flags = self.md_flags(md);
        let mut size = self.base_size(md);
        if flags & MDF_HAS_NON_VTABLE_SLOT != 0 {
            size += self.size("NonVtableSlot");
        }
        if flags & MDF_HAS_METHOD_IMPL != 0 {
            size += self.size("MethodImpl");
        }
        if flags & MDF_HAS_NATIVE_CODE_SLOT != 0 {
            size += self.size("NativeCodeSlot");
        }
        size
    }

    fn native_code_slot(&self, md: u64) -> Option<u64> {
        let flags = self.md_flags(md);
        if flags & MDF_HAS_NATIVE_CODE_SLOT == 0 {
            return None;
        }
        let mut at = md + self.base_size(md);
        if flags & MDF_HAS_NON_VTABLE_SLOT != 0 {
            at += self.size("NonVtableSlot");
        }
        if flags & MDF_HAS_METHOD_IMPL != 0 {
            at += self.size("MethodImpl");
        }
        Some(at)
    }

    /// chunk = md − sizeof(MethodDescChunk) − ChunkIndex × MethodDescAlignment.
    fn chunk_of(&self, md: u64) -> u64 {
        let index = self.u8(md, "MethodDesc", "ChunkIndex") as u64;
        md - self.size("MethodDescChunk") - index * self.global("MethodDescAlignment")
    }

    fn method_table_of(&self, md: u64) -> u64 {
        self.ptr(self.chunk_of(md), "MethodDescChunk", "MethodTable")
    }

    fn token_of(&self, md: u64) -> u32 {
        let bits = self.global("MethodDescTokenRemainderBitCount") as u32;
        let remainder =
            self.u16(md, "MethodDesc", "Flags3AndTokenRemainder") as u32 & ((1 << bits) - 1);
        let range = self.u16(self.chunk_of(md), "MethodDescChunk", "FlagsAndTokenRange") as u32
            & ((1 << (24 - bits)) - 1);
        0x0600_0000 | (range << bits) | remainder
    }

    /// Every MethodDesc of a chunk, stepping by their sizes; the steps must land exactly on
    /// the chunk's end, and there must be Count + 1 of them, each at its ChunkIndex.
    fn chunk_method_descs(&self, chunk: u64) -> Vec<u64> {
        let align = self.global("MethodDescAlignment");
        let start = chunk + self.size("MethodDescChunk");
        let end = start + (self.u8(chunk, "MethodDescChunk", "Size") as u64 + 1) * align;
        let count = self.u8(chunk, "MethodDescChunk", "Count") as usize + 1;
        let mut out = Vec::new();
        let mut md = start;
        while md < end {
            assert_eq!(
                self.u8(md, "MethodDesc", "ChunkIndex") as u64 * align,
                md - start,
                "{}: chunk {chunk:#x}: MethodDesc {md:#x} is not at its ChunkIndex",
                self.what
            );
            out.push(md);
            md += self.md_size(md);
        }
        assert_eq!(
            md, end,
            "{}: stepping through chunk {chunk:#x} overshoots its end",
            self.what
        );
        assert_eq!(out.len(), count, "{}: chunk {chunk:#x}", self.what);
        out
    }

    // ------------------------------------------------------------ MethodTable / EEClass

    /// The canonical MethodTable of `mt` (itself unless EEClassOrCanonMT is tagged).
    fn canonical(&self, mt: u64) -> u64 {
        let v = self.ptr(mt, "MethodTable", "EEClassOrCanonMT");
        if v & 1 == 1 {
            let canon = v & !1;
            assert_eq!(
                self.ptr(canon, "MethodTable", "EEClassOrCanonMT") & 1,
                0,
                "{}: canonical MethodTable {canon:#x} of {mt:#x} is not canonical",
                self.what
            );
            canon
        } else {
            mt
        }
    }

    fn eeclass(&self, mt: u64) -> u64 {
        self.ptr(self.canonical(mt), "MethodTable", "EEClassOrCanonMT")
    }

    fn packed(&self, ee: u64, field: &str) -> u32 {
        let fixed = self.u8(ee, "EEClass", "FixedEEClassFields") as u64;
        self.t
            .read_u32(ee + fixed + self.off("EEClassPackedFields", field))
            .unwrap_or_else(|e| {
                panic!("{}: EEClassPackedFields.{field} of {ee:#x}: {e}", self.what)
            })
    }

    /// Every MethodDesc of a type: EEClass.MethodDescChunk, then each chunk's Next.
    fn type_method_descs(&self, mt: u64) -> Vec<u64> {
        let canon = self.canonical(mt);
        let mut chunk = self.ptr(self.eeclass(mt), "EEClass", "MethodDescChunk");
        let mut out = Vec::new();
        let mut chunks = 0;
        while chunk != 0 {
            chunks += 1;
            assert!(
                chunks < 1000,
                "{}: chunk list of {mt:#x} does not end",
                self.what
            );
            assert_eq!(
                self.ptr(chunk, "MethodDescChunk", "MethodTable"),
                canon,
                "{}: chunk {chunk:#x} of {mt:#x}",
                self.what
            );
            out.extend(self.chunk_method_descs(chunk));
            chunk = self.ptr(chunk, "MethodDescChunk", "Next");
        }
        out
    }

    // ------------------------------------------------------------ Loader

    /// GetModuleLookupMapElement: (value without flags, flags, segments followed).
    fn map_lookup(&self, map: u64, token: u32) -> Option<(u64, u64, usize)> {
        let mask = self.ptr(map, "ModuleLookupMap", "SupportedFlagsMask");
        let mut rid = (token & 0x00FF_FFFF) as u64;
        let mut segment = map;
        let mut hops = 0;
        loop {
            let count = self.u32(segment, "ModuleLookupMap", "Count") as u64;
            if rid < count {
                let raw =
                    self.read_ptr(self.ptr(segment, "ModuleLookupMap", "TableData") + rid * 8);
                return Some((raw & !mask, raw & mask, hops));
            }
            rid -= count;
            segment = self.ptr(segment, "ModuleLookupMap", "Next");
            if segment == 0 {
                return None;
            }
            hops += 1;
            assert!(
                hops < 10_000,
                "{}: lookup map {map:#x} does not end",
                self.what
            );
        }
    }

    /// The non-null entries of a lookup map, by RID (all segments).
    fn map_entries(&self, map: u64) -> BTreeMap<u32, (u64, u64)> {
        let mask = self.ptr(map, "ModuleLookupMap", "SupportedFlagsMask");
        let mut out = BTreeMap::new();
        let mut base = 0u32;
        let mut segment = map;
        while segment != 0 {
            let count = self.u32(segment, "ModuleLookupMap", "Count");
            let table = self.ptr(segment, "ModuleLookupMap", "TableData");
            let values = self
                .t
                .read_pointers(table, count as usize)
                .unwrap_or_else(|e| panic!("{}: map {map:#x}: {e}", self.what));
            for (i, raw) in values.into_iter().enumerate() {
                if raw != 0 {
                    out.insert(base + i as u32, (raw & !mask, raw & mask));
                }
            }
            base += count;
            segment = self.ptr(segment, "ModuleLookupMap", "Next");
        }
        out
    }

    fn module_path(&self, module: u64) -> Option<String> {
        let pe_assembly = self.ptr(module, "Module", "PEAssembly");
        assert_ne!(
            pe_assembly, 0,
            "{}: Module {module:#x} has no PEAssembly",
            self.what
        );
        let image = self.ptr(pe_assembly, "PEAssembly", "PEImage");
        if image == 0 {
            return None;
        }
        let path = self.ptr(image, "PEImage", "Path");
        Some(
            self.t
                .read_utf16_c_string(path, 4096)
                .unwrap_or_else(|e| panic!("{}: path of {module:#x}: {e}", self.what)),
        )
    }
}

// ---------------------------------------------------------------- the manifest

fn ts() -> &'static Value {
    &testbed().manifest["type_system"]
}

fn types() -> Vec<Value> {
    ts()["types"].as_array().expect("type_system.types").clone()
}

fn opt_hex(v: &Value) -> Option<u64> {
    v.as_str().map(|_| hex(v))
}

fn tok(v: &Value) -> u32 {
    hex(v) as u32
}

fn flag(v: &Value, key: &str) -> bool {
    v[key].as_bool().unwrap_or_else(|| panic!("{key} of {v}"))
}

fn methods(t: &Value) -> Vec<Value> {
    t["methods"].as_array().cloned().unwrap_or_default()
}

/// The classification reflection's facts imply for a method of type `t`.
fn expected_classification(t: &Value, m: &Value) -> u16 {
    const METHOD_ATTRIBUTE_PINVOKE_IMPL: u64 = 0x2000;
    const METHOD_IMPL_INTERNAL_CALL: u64 = 0x1000;
    let delegate = t["label"] == "Action";
    if flag(t, "is_array") {
        MC_ARRAY
    } else if flag(m, "is_generic_definition") {
        MC_INSTANTIATED
    } else if m["attributes"].as_u64().unwrap() & METHOD_ATTRIBUTE_PINVOKE_IMPL != 0 {
        MC_PINVOKE
    } else if delegate && !flag(m, "is_constructor") {
        MC_EEIMPL // Invoke, BeginInvoke, EndInvoke: implemented by the runtime
    } else if delegate || m["impl_attributes"].as_u64().unwrap() & METHOD_IMPL_INTERNAL_CALL != 0 {
        MC_FCALL // delegate constructors and InternalCall methods
    } else {
        MC_IL
    }
}

/// One method the manifest names, with what reflection says about it.
struct ManifestMethod {
    label: String,
    method_desc: u64,
    declaring_type: Option<u64>,
    token: Option<u32>,
    is_static: bool,
    module: Option<u64>,
}

impl ManifestMethod {
    fn new(label: String, e: &Value, declaring_type: Option<u64>, module: Option<u64>) -> Self {
        ManifestMethod {
            label,
            method_desc: hex(&e["method_desc"]),
            declaring_type,
            token: e.get("metadata_token").map(tok),
            is_static: flag(e, "is_static"),
            module,
        }
    }
}

/// Every method of the manifest: emitted and framework methods, generic instantiations, and
/// every method of every type it lists.
fn manifest_methods() -> Vec<ManifestMethod> {
    let m = &testbed().manifest;
    let mut out = Vec::new();
    for key in ["emitted_methods", "framework_methods"] {
        for e in m[key].as_array().unwrap() {
            let label = format!("{key} {}.{}", e["type"], e["name"]);
            let (ty, module) = (
                opt_hex(&e["declaring_type_handle"]),
                opt_hex(&e["module_handle"]),
            );
            out.push(ManifestMethod::new(label, e, ty, module));
        }
    }
    for g in ts()["generic_methods"].as_array().unwrap() {
        let label = format!("generic {}", g["label"]);
        let (ty, module) = (
            opt_hex(&g["declaring_type_handle"]),
            opt_hex(&g["module_handle"]),
        );
        out.push(ManifestMethod::new(label, g, ty, module));
    }
    for t in types() {
        for mm in methods(&t) {
            let label = format!("{}.{}", t["label"], mm["name"]);
            let (ty, module) = (Some(hex(&t["type_handle"])), opt_hex(&t["module_handle"]));
            out.push(ManifestMethod::new(label, &mm, ty, module));
        }
    }
    out
}

// ---------------------------------------------------------------- 1. MethodDesc sizes

/// The descriptor's MethodDesc sizes against the runtime's own size table (this build only).
fn verify_size_table(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let build = rt.module().build_id.clone().unwrap_or_default();
    let rva = SIZE_TABLES
        .iter()
        .find(|(id, _)| *id == build)
        .map(|(_, rva)| *rva)
        .unwrap_or_else(|| panic!("{what}: no size table address for build {build}"));
    let table =
        v.t.read_bytes(rt.module().base + rva, 64)
            .expect("s_ClassificationSizeTable");
    let base = [
        "MethodDesc",
        "FCallMethodDesc",
        "PInvokeMethodDesc",
        "EEImplMethodDesc",
        "ArrayMethodDesc",
        "InstantiatedMethodDesc",
        // mcComInterop: no COM interop on Unix, the table holds sizeof(MethodDesc).
        "MethodDesc",
        "DynamicMethodDesc",
    ];
    for (flags, &size) in table.iter().enumerate() {
        let flags = flags as u16;
        let mut expected = v.size(base[(flags & MDF_CLASSIFICATION) as usize]);
        if flags & MDF_HAS_NON_VTABLE_SLOT != 0 {
            expected += v.size("NonVtableSlot");
        }
        if flags & MDF_HAS_METHOD_IMPL != 0 {
            expected += v.size("MethodImpl");
        }
        if flags & MDF_HAS_NATIVE_CODE_SLOT != 0 {
            expected += v.size("NativeCodeSlot");
        }
        assert_eq!(
            size as u64, expected,
            "{what}: s_ClassificationSizeTable[{flags:#x}]"
        );
    }
}

#[test]
fn method_desc_sizes_equal_the_runtime_size_table() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_size_table(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_size_table(&rt, "full dump");
}

// ---------------------------------------------------------------- 2. MethodDesc → type, token, module

fn verify_method_descs(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let em = execution_manager(v.t, v.d).expect("ExecutionManager");
    let mut checked = 0;
    let mut with_code = 0;
    let mut non_vtable = 0;
    for ManifestMethod {
        label,
        method_desc: md,
        declaring_type: mt,
        token,
        is_static,
        module,
    } in manifest_methods()
    {
        let chunk_mt = v.method_table_of(md);
        if let Some(mt) = mt {
            assert_eq!(chunk_mt, v.canonical(mt), "{what}: {label}: MethodTable");
        }
        if let Some(token) = token {
            assert_eq!(v.token_of(md), token, "{what}: {label}: token");
        }
        assert_eq!(
            v.md_flags(md) & MDF_STATIC != 0,
            is_static,
            "{what}: {label}: static flag"
        );
        if let Some(module) = module {
            assert_eq!(
                v.ptr(chunk_mt, "MethodTable", "Module"),
                module,
                "{what}: {label}: module"
            );
        }
        // The non-vtable slot right after the MethodDesc holds an entry point of the method:
        // a precode or code of it, or for an FCall its native implementation (in
        // libcoreclr.so or a runtime-generated helper), which is no managed code.
        if v.md_flags(md) & MDF_HAS_NON_VTABLE_SLOT != 0 && !v.is_unboxing_stub(md) {
            let entry = v.read_ptr(md + v.base_size(md));
            assert_ne!(entry, 0, "{what}: {label}: non-vtable slot");
            match non_virtual_entry_to_method_desc(v.t, v.d, entry).unwrap() {
                Some(m) => assert_eq!(m, md, "{what}: {label}: non-vtable slot {entry:#x}"),
                None => assert_eq!(
                    v.classification(md),
                    MC_FCALL,
                    "{what}: {label}: {entry:#x}"
                ),
            }
            non_vtable += 1;
        }
        // The native-code slot, after the optional slots before it, holds the method's code.
        if let Some(at) = v.native_code_slot(md) {
            let code = v.read_ptr(at);
            if code != 0 {
                let block = em
                    .code_block(code)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{what}: {label}: native code {code:#x} is no code"));
                assert_eq!(block.method_desc, md, "{what}: {label}: native code slot");
                assert_eq!(block.start, code, "{what}: {label}: native code slot");
                with_code += 1;
            }
        }
        checked += 1;
    }
    assert!(checked >= 600, "{what}: only {checked} methods");
    assert!(non_vtable >= 200, "{what}: {non_vtable} non-vtable slots");
    assert!(with_code >= 20, "{what}: {with_code} native code slots");

    // Every MethodTable's Module leads to the assembly the manifest names, by path.
    for t in types() {
        let mt = hex(&t["type_handle"]);
        let module = v.ptr(mt, "MethodTable", "Module");
        assert_eq!(module, hex(&t["module_handle"]), "{what}: {}", t["label"]);
        let path = t["module_path"].as_str().unwrap();
        match v.module_path(module) {
            Some(p) => assert_eq!(p, path, "{what}: {}", t["label"]),
            None => assert_eq!(path, "<In Memory Module>", "{what}: {}", t["label"]),
        }
    }
    for (key, e) in ["emitted_methods", "framework_methods"]
        .iter()
        .flat_map(|k| {
            testbed().manifest[*k]
                .as_array()
                .unwrap()
                .iter()
                .map(move |e| (k, e))
        })
    {
        let module = v.ptr(
            v.method_table_of(hex(&e["method_desc"])),
            "MethodTable",
            "Module",
        );
        let location = e["assembly_location"].as_str().unwrap();
        match v.module_path(module) {
            Some(p) => assert_eq!(p, location, "{what}: {key} {}", e["name"]),
            None => assert_eq!(location, "", "{what}: {key} {}: dynamic", e["name"]),
        }
    }
}

#[test]
fn method_descs_lead_to_their_type_token_module_and_code() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_method_descs(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_method_descs(&rt, "full dump");
}

// ---------------------------------------------------------------- 3. types: chunks, slots, EEClass

fn verify_types(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let by_label: HashMap<String, Value> = types()
        .into_iter()
        .map(|t| (t["label"].as_str().unwrap().to_string(), t))
        .collect();
    let object_mt = hex(&by_label["Object"]["type_handle"]);
    let mut kinds_seen = BTreeSet::new();
    let mut optional_seen = 0u16;
    let mut chunks_seen = HashSet::new();
    let (mut vtable_checked, mut vtable_native) = (0, 0);
    for t in by_label.values() {
        let label = t["label"].as_str().unwrap();
        let w = format!("{what}: {label}");
        let mt = hex(&t["type_handle"]);
        let canon = v.canonical(mt);
        let ee = v.eeclass(mt);
        let is_array = flag(t, "is_array");

        // ---- MethodTable
        assert_eq!(
            v.ptr(ee, "EEClass", "MethodTable"),
            canon,
            "{w}: EEClass.MethodTable"
        );
        if let Some(token) = t.get("metadata_token") {
            assert_eq!(
                v.u16(mt, "MethodTable", "Token") as u32,
                tok(token) & 0x00FF_FFFF,
                "{w}: Token"
            );
        }
        let num_virtuals = v.u16(mt, "MethodTable", "NumVirtuals");
        assert_eq!(
            num_virtuals as u64,
            t["num_virtuals"].as_u64().unwrap(),
            "{w}: NumVirtuals"
        );
        let num_interfaces = v.u16(mt, "MethodTable", "NumInterfaces");
        // A single-dimension array's generic interfaces (IList<T>, ...) are not in its map.
        if label != "Int32[]" {
            assert_eq!(
                num_interfaces as u64,
                t["num_interfaces"].as_u64().unwrap(),
                "{w}: NumInterfaces"
            );
        }
        let parent = v.ptr(mt, "MethodTable", "ParentMethodTable");
        match opt_hex(&t["parent_type_handle"]) {
            Some(p) => assert_eq!(parent, p, "{w}: ParentMethodTable"),
            None if flag(t, "is_interface") => assert_eq!(parent, object_mt, "{w}"),
            None => assert_eq!(parent, 0, "{w}: ParentMethodTable"),
        }
        if let Some(size) = t["base_size"].as_u64() {
            assert_eq!(
                v.u32(mt, "MethodTable", "BaseSize") as u64,
                size,
                "{w}: BaseSize"
            );
        }
        let flags = v.u32(mt, "MethodTable", "MTFlags");
        let component = match label {
            "String" => Some(2),
            _ if is_array => Some(4), // Int32 elements
            _ => None,
        };
        assert_eq!(
            flags & MTF_HAS_COMPONENT_SIZE != 0,
            component.is_some(),
            "{w}: MTFlags"
        );
        if let Some(c) = component {
            assert_eq!(flags & 0xFFFF, c, "{w}: component size");
        }
        let category = match label {
            "Int32" => MTF_CATEGORY_TRUE_PRIMITIVE,
            "DayOfWeek" => MTF_CATEGORY_PRIMITIVE_VALUE_TYPE,
            "Int32[]" => MTF_CATEGORY_SZARRAY,
            _ if is_array => MTF_CATEGORY_ARRAY,
            _ if flag(t, "is_interface") => MTF_CATEGORY_INTERFACE,
            _ if flag(t, "is_value_type") => MTF_CATEGORY_VALUE_TYPE,
            _ => 0,
        };
        assert_eq!(flags & MTF_CATEGORY_MASK, category, "{w}: MTFlags category");
        // The collectible assemblies: the RunAndCollect emitted one, and the plugin loaded
        // into a collectible AssemblyLoadContext.
        assert_eq!(
            flags & MTF_COLLECTIBLE != 0,
            t["assembly"] == "Cdac.Testbed.Collectible" || t["assembly"] == "Cdac.Testbed.Plugin",
            "{w}: MTFlags collectible"
        );
        let flags2 = v.u16(mt, "MethodTable", "MTFlags2");
        assert_eq!(
            flags2 & MTF2_HAS_INTERFACE_MAP != 0,
            num_interfaces > 0,
            "{w}: MTFlags2 {flags2:#x}"
        );
        assert_eq!(
            flags2 & MTF2_HAS_PER_INST_INFO != 0,
            flag(t, "is_generic_instance") || is_array,
            "{w}: MTFlags2 {flags2:#x}"
        );
        assert_eq!(
            flags2 & MTF2_HAS_CCTOR != 0,
            flag(t, "has_cctor"),
            "{w}: MTFlags2 {flags2:#x}"
        );
        // Generic arguments: the type's dictionary (the last and, the parents being
        // non-generic here, only one PerInstInfo points to) starts with them. An array's
        // PerInstInfo slot is its element type.
        let per_inst = v.ptr(mt, "MethodTable", "PerInstInfo");
        if flag(t, "is_generic_instance") {
            let args: Vec<u64> = t["generic_args"]
                .as_array()
                .unwrap()
                .iter()
                .map(hex)
                .collect();
            let dict = v.read_ptr(per_inst);
            let got = v.t.read_pointers(dict, args.len()).unwrap();
            assert_eq!(got, args, "{w}: PerInstInfo dictionary");
            if mt != canon {
                // Shared code: the canonical instantiation is over __Canon.
                let canon_args =
                    v.t.read_pointers(
                        v.read_ptr(v.ptr(canon, "MethodTable", "PerInstInfo")),
                        args.len(),
                    )
                    .unwrap();
                let canon_type = hex(&ts()["canon_type_handle"]);
                for (i, &a) in args.iter().enumerate() {
                    let is_value = v.u32(a, "MethodTable", "MTFlags") & MTF_CATEGORY_MASK != 0
                        && v.u32(a, "MethodTable", "MTFlags") & MTF_CATEGORY_MASK
                            != MTF_CATEGORY_INTERFACE;
                    assert_eq!(
                        canon_args[i],
                        if is_value { a } else { canon_type },
                        "{w}: canonical argument {i}"
                    );
                }
            }
        } else if is_array {
            assert_eq!(
                per_inst,
                hex(&by_label["Int32"]["type_handle"]),
                "{w}: element type"
            );
        }

        // ---- EEClass
        assert_eq!(
            v.u32(ee, "EEClass", "CorTypeAttr") as u64,
            t["attributes"].as_u64().unwrap(),
            "{w}: CorTypeAttr"
        );
        let element_type = match label {
            "Int32" | "DayOfWeek" => ELEMENT_TYPE_I4,
            "Int32[]" => ELEMENT_TYPE_SZARRAY,
            _ if is_array => ELEMENT_TYPE_ARRAY,
            _ if flag(t, "is_value_type") => ELEMENT_TYPE_VALUETYPE,
            _ => ELEMENT_TYPE_CLASS,
        };
        assert_eq!(
            v.u8(ee, "EEClass", "InternalCorElementType"),
            element_type,
            "{w}: InternalCorElementType"
        );
        assert_eq!(
            v.u8(ee, "EEClass", "FieldsArePacked"),
            0,
            "{w}: packed fields are DWORDs"
        );

        // Fields.
        if let Some(fields) = t["fields"].as_array() {
            let live: Vec<&Value> = fields.iter().filter(|f| !flag(f, "is_literal")).collect();
            let instance = live.iter().filter(|f| !flag(f, "is_static")).count() as u32;
            let statics = live.iter().filter(|f| flag(f, "is_static")).count() as u32;
            let thread = live.iter().filter(|f| flag(f, "is_thread_static")).count() as u32;
            let inherited = if parent == 0 || flag(t, "is_interface") {
                0
            } else {
                v.packed(v.eeclass(parent), "NumInstanceFields")
            };
            if !flag(t, "is_generic_instance") || mt == canon {
                assert_eq!(
                    v.packed(ee, "NumInstanceFields"),
                    inherited + instance,
                    "{w}: NumInstanceFields"
                );
                assert_eq!(
                    v.packed(ee, "NumStaticFields"),
                    statics,
                    "{w}: NumStaticFields"
                );
                assert_eq!(
                    v.packed(ee, "NumThreadStaticFields"),
                    thread,
                    "{w}: NumThreadStaticFields"
                );
                let list = v.ptr(ee, "EEClass", "FieldDescList");
                assert_eq!(list == 0, live.is_empty(), "{w}: FieldDescList");
                for f in &live {
                    let fd = hex(&f["field_desc"]);
                    assert!(
                        fd >= list
                            && (fd - list) % FIELD_DESC_SIZE == 0
                            && (fd - list) / FIELD_DESC_SIZE < (instance + statics) as u64,
                        "{w}: field {} {fd:#x} is not in FieldDescList {list:#x}",
                        f["name"]
                    );
                    assert_eq!(v.read_ptr(fd), canon, "{w}: FieldDesc {fd:#x}");
                    assert_eq!(
                        v.t.read_u32(fd + 8).unwrap() & 0x00FF_FFFF,
                        tok(&f["metadata_token"]) & 0x00FF_FFFF,
                        "{w}: FieldDesc {fd:#x} token"
                    );
                }
            }
        }

        // ---- the type's MethodDescs, by chunk walking, against reflection
        let walked = v.type_method_descs(mt);
        for &md in &walked {
            chunks_seen.insert(v.chunk_of(md));
            optional_seen |= v.md_flags(md)
                & (MDF_HAS_NON_VTABLE_SLOT | MDF_HAS_METHOD_IMPL | MDF_HAS_NATIVE_CODE_SLOT);
        }
        let walked_set: HashSet<u64> = walked.iter().copied().collect();
        assert_eq!(walked_set.len(), walked.len(), "{w}: a MethodDesc twice");
        let num_non_virtual_slots = v.packed(ee, "NumNonVirtualSlots") as u16;
        if let Some(ms) = t["methods"].as_array() {
            let reflected: HashMap<u64, &Value> =
                ms.iter().map(|m| (hex(&m["method_desc"]), m)).collect();
            for (&md, m) in &reflected {
                let mw = format!("{w}.{}", m["name"]);
                assert!(
                    walked_set.contains(&md),
                    "{mw}: {md:#x} not in the type's chunks"
                );
                let c = v.classification(md);
                assert_eq!(c, expected_classification(t, m), "{mw}: classification");
                kinds_seen.insert(c);
                if let Some(token) = m.get("metadata_token") {
                    assert_eq!(v.token_of(md), tok(token), "{mw}: token");
                }
                assert_eq!(
                    v.md_flags(md) & MDF_STATIC != 0,
                    flag(m, "is_static"),
                    "{mw}"
                );
                assert_eq!(
                    (v.slot(md) < num_virtuals) && !flag(t, "is_array"),
                    flag(m, "is_virtual"),
                    "{mw}: slot {} of {num_virtuals} virtual",
                    v.slot(md)
                );
                if let Some(base) = opt_hex(&m["base_definition"]) {
                    assert_eq!(
                        v.slot(md),
                        v.slot(base),
                        "{mw}: an override takes its base's slot"
                    );
                }
                // Runtime-stored signatures (EEImpl, Array): calling convention and count.
                if matches!(c, MC_EEIMPL | MC_ARRAY) {
                    let n = v.u32(md, "StoredSigMethodDesc", "cSig") as usize;
                    let sig =
                        v.t.read_bytes(v.ptr(md, "StoredSigMethodDesc", "Sig"), n)
                            .unwrap();
                    assert!(n >= 3, "{mw}: cSig {n}");
                    assert_eq!(sig[0] & 0x20 != 0, !flag(m, "is_static"), "{mw}: HASTHIS");
                    assert_eq!(
                        sig[1] as u64,
                        m["num_params"].as_u64().unwrap(),
                        "{mw}: {sig:02x?}"
                    );
                    if label == "Action" && m["name"] == "Invoke" {
                        assert_eq!(sig, [0x20, 0x00, 0x01], "{mw}: instance void ()");
                    }
                }
            }
            // What else the chunks hold: for value types, the other half of each unboxing
            // stub pair (same token, one of the two an unboxing stub); nothing otherwise.
            for &md in walked.iter().filter(|md| !reflected.contains_key(md)) {
                assert!(
                    flag(t, "is_value_type"),
                    "{w}: {md:#x} in the chunks is no method reflection knows"
                );
                let pair: Vec<u64> = reflected
                    .keys()
                    .copied()
                    .filter(|&r| v.token_of(r) == v.token_of(md))
                    .collect();
                assert_eq!(pair.len(), 1, "{w}: {md:#x} has no unboxing-stub pair");
                assert_ne!(
                    v.is_unboxing_stub(md),
                    v.is_unboxing_stub(pair[0]),
                    "{w}: {md:#x}"
                );
            }
        }
        // Slots: virtual ones distinct and below NumVirtuals; the MethodTable's non-virtual
        // slots right after them; then one per MethodDesc with its own (non-vtable) slot,
        // up to NumMethods.
        let num_methods = v.packed(ee, "NumMethods") as u16;
        let mut virtual_slots = BTreeSet::new();
        let mut mt_slots = Vec::new();
        let mut own_slots = BTreeSet::new();
        for &md in &walked {
            let s = v.slot(md);
            if v.md_flags(md) & MDF_HAS_NON_VTABLE_SLOT != 0 {
                assert!(own_slots.insert(s), "{w}: slot {s} twice");
            } else if s < num_virtuals {
                assert!(virtual_slots.insert(s), "{w}: virtual slot {s} twice");
            } else {
                mt_slots.push(s);
            }
        }
        mt_slots.sort();
        assert_eq!(
            mt_slots,
            (num_virtuals..num_virtuals + num_non_virtual_slots).collect::<Vec<_>>(),
            "{w}: NumNonVirtualSlots {num_non_virtual_slots}"
        );
        assert_eq!(
            num_methods as usize,
            (num_virtuals + num_non_virtual_slots) as usize + own_slots.len(),
            "{w}: NumMethods"
        );
        if let (Some(&lo), Some(&hi)) = (own_slots.first(), own_slots.last()) {
            assert!(
                lo >= num_virtuals + num_non_virtual_slots && hi < num_methods,
                "{w}: {own_slots:?}"
            );
        }
        if mt == canon {
            assert_eq!(
                flags2 & MTF2_HAS_NON_VIRTUAL_SLOTS != 0,
                num_non_virtual_slots > 0,
                "{w}: MTFlags2 {flags2:#x}"
            );
            assert_eq!(
                flags2 & MTF2_HAS_SINGLE_NON_VIRTUAL_SLOT != 0,
                num_non_virtual_slots == 1,
                "{w}: MTFlags2 {flags2:#x}"
            );
        }
        // The vtable: chunks of 8 slots whose pointers follow the MethodTable; each slot's
        // entry point is a method with that slot, of this type or an ancestor.
        if !flag(t, "is_interface") && !is_array && mt == canon {
            let mut ancestors = HashSet::new();
            let mut a = mt;
            while a != 0 {
                ancestors.insert(v.canonical(a));
                a = v.ptr(a, "MethodTable", "ParentMethodTable");
            }
            for s in 0..num_virtuals as u64 {
                let chunk =
                    v.read_ptr(mt + v.size("MethodTable") + (s / VTABLE_SLOTS_PER_CHUNK) * 8);
                let entry = v.read_ptr(chunk + (s % VTABLE_SLOTS_PER_CHUNK) * 8);
                let Some(md) = non_virtual_entry_to_method_desc(v.t, v.d, entry).unwrap() else {
                    // An FCall's slot holds its native code (ValueType.GetHashCode, ...).
                    assert!(
                        v.coreclr.contains(&entry),
                        "{w}: vtable slot {s} entry {entry:#x} resolves to nothing"
                    );
                    vtable_native += 1;
                    continue;
                };
                vtable_checked += 1;
                assert_eq!(v.slot(md) as u64, s, "{w}: vtable slot {s} holds {md:#x}");
                assert!(
                    ancestors.contains(&v.method_table_of(md)),
                    "{w}: vtable slot {s} holds {md:#x} of another type"
                );
                if walked_set.contains(&md) {
                    assert!(virtual_slots.contains(&(s as u16)), "{w}: slot {s}");
                }
            }
        }
    }
    for kind in [
        MC_IL,
        MC_FCALL,
        MC_PINVOKE,
        MC_EEIMPL,
        MC_ARRAY,
        MC_INSTANTIATED,
    ] {
        assert!(
            kinds_seen.contains(&kind),
            "{what}: no MethodDesc of classification {kind}"
        );
    }
    assert_eq!(
        optional_seen,
        MDF_HAS_NON_VTABLE_SLOT | MDF_HAS_METHOD_IMPL | MDF_HAS_NATIVE_CODE_SLOT,
        "{what}: every optional slot stepped over"
    );
    assert!(
        chunks_seen.len() >= 20,
        "{what}: {} chunks",
        chunks_seen.len()
    );
    assert!(
        vtable_checked >= 150 && vtable_native <= vtable_checked / 10,
        "{what}: {vtable_checked} vtable slots resolved, {vtable_native} native"
    );
}

#[test]
fn types_chunks_slots_and_eeclasses_match_reflection() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_types(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_types(&rt, "full dump");
}

// ---------------------------------------------------------------- 4. generic method instantiations

fn verify_instantiated(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let generic = ts()["generic_methods"].as_array().unwrap();
    assert!(
        generic.len() >= 8,
        "{what}: {} generic methods",
        generic.len()
    );
    let mut kinds = BTreeSet::new();
    for g in generic {
        let w = format!("{what}: {}", g["label"]);
        let md = hex(&g["method_desc"]);
        assert_eq!(v.classification(md), MC_INSTANTIATED, "{w}");
        let args: Vec<u64> = g["generic_args"]
            .as_array()
            .unwrap()
            .iter()
            .map(hex)
            .collect();
        let values: Vec<bool> = g["args_are_value_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        assert_eq!(
            v.u16(md, "InstantiatedMethodDesc", "NumGenericArgs") as usize,
            values.len(),
            "{w}: NumGenericArgs"
        );
        let kind = v.u16(md, "InstantiatedMethodDesc", "Flags2") & 7;
        let expected = if flag(g, "is_generic_definition") {
            IMD_GENERIC_METHOD_DEFINITION
        } else if values.iter().all(|&b| b) {
            IMD_UNSHARED
        } else {
            // Reflection hands out the exact instantiation: an instantiating stub that wraps
            // the code shared over __Canon.
            IMD_WRAPPER_STUB
        };
        assert_eq!(kind, expected, "{w}: Flags2");
        kinds.insert(kind);
        let per_inst = v.ptr(md, "InstantiatedMethodDesc", "PerInstInfo");
        assert_ne!(per_inst, 0, "{w}: PerInstInfo");
        let dict = v.t.read_pointers(per_inst, values.len()).unwrap();
        if flag(g, "is_generic_definition") {
            // The formal type parameters: TypeDescs (type-handle tag 2).
            assert!(dict.iter().all(|&p| p & 2 == 2), "{w}: {dict:x?}");
        } else {
            assert_eq!(dict, args, "{w}: PerInstInfo");
        }
    }
    assert_eq!(
        kinds,
        BTreeSet::from([
            IMD_GENERIC_METHOD_DEFINITION,
            IMD_UNSHARED,
            IMD_WRAPPER_STUB
        ]),
        "{what}"
    );
}

#[test]
fn instantiated_method_descs_hold_their_type_arguments() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_instantiated(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_instantiated(&rt, "full dump");
}

// ---------------------------------------------------------------- 5. LCG: DynamicMethodDesc

fn verify_dynamic(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let mut all = Vec::new();
    for e in testbed().manifest["lcg_methods"].as_array().unwrap() {
        all.push((
            hex(&e["method_desc"]),
            e["method_name"].as_str().unwrap().to_string(),
            None,
        ));
    }
    for e in ts()["dynamic_methods"].as_array().unwrap() {
        let sig: Vec<u8> = e["signature"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        all.push((
            hex(&e["method_desc"]),
            e["method_name"].as_str().unwrap().to_string(),
            Some(sig),
        ));
    }
    assert!(all.len() >= 9, "{what}: {} LCG methods", all.len());
    assert!(
        all.iter().any(|(_, n, _)| !n.is_ascii()),
        "{what}: a non-ASCII name"
    );
    let mut chunks = BTreeMap::<u64, Vec<u64>>::new();
    for (md, name, sig) in &all {
        let w = format!("{what}: {name}");
        assert_eq!(v.classification(*md), MC_DYNAMIC, "{w}");
        assert_ne!(v.md_flags(*md) & MDF_STATIC, 0, "{w}: static");
        assert_eq!(v.token_of(*md) & 0x00FF_FFFF, 0, "{w}: no metadata token");
        let ext = v.u32(*md, "StoredSigMethodDesc", "ExtendedFlags");
        assert_ne!(ext & EXT_IS_LCG_METHOD, 0, "{w}: ExtendedFlags {ext:#x}");
        assert_eq!(ext & EXT_IS_IL_STUB, 0, "{w}: ExtendedFlags {ext:#x}");
        let got =
            v.t.read_c_bytes(v.ptr(*md, "DynamicMethodDesc", "MethodName"), 1024)
                .unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            *name,
            "{w}: MethodName (UTF-8)"
        );
        let n = v.u32(*md, "StoredSigMethodDesc", "cSig") as usize;
        let stored =
            v.t.read_bytes(v.ptr(*md, "StoredSigMethodDesc", "Sig"), n)
                .unwrap();
        assert_eq!(stored[0] & 0x20, 0, "{w}: a static signature {stored:02x?}");
        if let Some(sig) = sig {
            // Reflection.Emit's blob, then the end-of-signature byte DynamicMethod appends.
            let mut expected = sig.clone();
            expected.push(0);
            assert_eq!(stored, expected, "{w}: Sig / cSig");
        }
        chunks.entry(v.chunk_of(*md)).or_default().push(*md);
    }
    // Stepping through the chunks that hold them lands on each (all of them Dynamic).
    for (chunk, mds) in &chunks {
        let stepped = v.chunk_method_descs(*chunk);
        for md in mds {
            assert!(
                stepped.contains(md),
                "{what}: {md:#x} not stepped onto in {chunk:#x}"
            );
        }
        assert!(
            stepped.iter().all(|&m| v.classification(m) == MC_DYNAMIC),
            "{what}"
        );
    }
}

#[test]
fn dynamic_method_descs_name_lcg_methods() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_dynamic(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_dynamic(&rt, "full dump");
}

// ---------------------------------------------------------------- 6. Module lookup maps

fn verify_lookup_maps(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let map = |module: u64, name: &str| module + v.off("Module", name);
    let mut hops_seen = 0;
    let mut checked = BTreeMap::<&str, usize>::new();
    for t in types() {
        let Some(token) = t.get("metadata_token") else {
            continue;
        };
        if flag(&t, "is_generic_instance") {
            continue;
        }
        let w = format!("{what}: {}", t["label"]);
        let module = hex(&t["module_handle"]);
        let mt = hex(&t["type_handle"]);
        let (got, _, hops) = v
            .map_lookup(map(module, "TypeDefToMethodTableMap"), tok(token))
            .unwrap_or_else(|| panic!("{w}: TypeDef {token} beyond the map"));
        assert_eq!(got, mt, "{w}: TypeDefToMethodTableMap");
        hops_seen += hops;
        *checked.entry("TypeDef").or_default() += 1;
        for m in methods(&t) {
            let md = hex(&m["method_desc"]);
            let (got, _, hops) = v
                .map_lookup(map(module, "MethodDefToDescMap"), tok(&m["metadata_token"]))
                .unwrap_or_else(|| panic!("{w}.{}: beyond the map", m["name"]));
            hops_seen += hops;
            if got != md {
                // A value type's virtual method: reflection gives its unboxing stub, the map
                // the method itself (same token, same type).
                assert!(
                    v.is_unboxing_stub(md) && !v.is_unboxing_stub(got),
                    "{w}.{}",
                    m["name"]
                );
                assert_eq!(v.token_of(got), v.token_of(md), "{w}.{}", m["name"]);
                assert_eq!(
                    v.method_table_of(got),
                    v.method_table_of(md),
                    "{w}.{}",
                    m["name"]
                );
            }
            *checked.entry("MethodDef").or_default() += 1;
        }
        for f in t["fields"].as_array().cloned().unwrap_or_default().iter() {
            if flag(f, "is_literal") {
                continue;
            }
            let (got, _, hops) = v
                .map_lookup(map(module, "FieldDefToDescMap"), tok(&f["metadata_token"]))
                .unwrap();
            hops_seen += hops;
            assert_eq!(
                got,
                hex(&f["field_desc"]),
                "{w}.{}: FieldDefToDescMap",
                f["name"]
            );
            *checked.entry("FieldDef").or_default() += 1;
        }
    }
    // Emitted methods live in a dynamic module whose maps grow by segments.
    for e in testbed().manifest["emitted_methods"].as_array().unwrap() {
        let md = hex(&e["method_desc"]);
        let (got, _, hops) = v
            .map_lookup(
                map(hex(&e["module_handle"]), "MethodDefToDescMap"),
                tok(&e["metadata_token"]),
            )
            .unwrap();
        assert_eq!(got, md, "{what}: emitted {}", e["name"]);
        hops_seen += hops;
    }
    assert!(
        hops_seen > 0,
        "{what}: no lookup needed a map's Next segment"
    );

    let modules: HashMap<String, u64> = ts()["assemblies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                hex(&a["module_handle"]),
            )
        })
        .collect();
    for a in ts()["assemblies"].as_array().unwrap() {
        let module = hex(&a["module_handle"]);
        let w = format!("{what}: {}", a["name"]);
        // AssemblyRef RID → the referenced assembly's Module, once resolved.
        if let Some(refs) = a["references"].as_array() {
            let entries = v.map_entries(map(module, "ManifestModuleReferencesMap"));
            for (&rid, &(value, _)) in &entries {
                let name = refs[rid as usize - 1].as_str().unwrap();
                assert_eq!(
                    Some(&value),
                    modules.get(name),
                    "{w}: AssemblyRef {rid} ({name})"
                );
                *checked.entry("AssemblyRef").or_default() += 1;
            }
        }
        if let Some(type_refs) = a["type_refs"].as_array() {
            let entries = v.map_entries(map(module, "TypeRefToMethodTableMap"));
            assert!(
                entries.len() >= 50,
                "{w}: {} TypeRefs resolved",
                entries.len()
            );
            for (&rid, &(value, _)) in &entries {
                let e = &type_refs[rid as usize - 1];
                assert_eq!(tok(&e["token"]), 0x0100_0000 | rid, "{w}");
                assert_eq!(
                    Some(value),
                    opt_hex(&e["type_handle"]),
                    "{w}: TypeRef {rid} {}",
                    e["name"]
                );
                *checked.entry("TypeRef").or_default() += 1;
            }
        }
        if let Some(member_refs) = a["member_refs"].as_array() {
            let entries = v.map_entries(map(module, "MemberRefToDescMap"));
            assert!(
                entries.len() >= 50,
                "{w}: {} MemberRefs resolved",
                entries.len()
            );
            for (&rid, &(value, flags)) in &entries {
                let e = &member_refs[rid as usize - 1];
                let ew = format!("{w}: MemberRef {rid} {}", e["name"]);
                let handle = opt_hex(&e["handle"]).unwrap_or_else(|| panic!("{ew}: unresolved"));
                if e["kind"] == "field" {
                    assert_eq!(flags, MEMBER_REF_IS_FIELD, "{ew}");
                    assert_eq!(value, handle, "{ew}");
                } else {
                    assert_eq!(flags, 0, "{ew}");
                    if value != handle {
                        // As for MethodDefs: the method, where reflection names its unboxing stub.
                        assert!(
                            v.is_unboxing_stub(handle),
                            "{ew}: {value:#x} vs {handle:#x}"
                        );
                        assert_eq!(v.token_of(value), v.token_of(handle), "{ew}");
                        assert_eq!(v.method_table_of(value), v.method_table_of(handle), "{ew}");
                    }
                }
                *checked
                    .entry(if e["kind"] == "field" {
                        "MemberRef field"
                    } else {
                        "MemberRef method"
                    })
                    .or_default() += 1;
            }
        }
    }
    for (kind, min) in [
        ("TypeDef", 10),
        ("MethodDef", 500),
        ("FieldDef", 15),
        ("AssemblyRef", 5),
        ("TypeRef", 300),
        ("MemberRef method", 300),
        ("MemberRef field", 10),
    ] {
        let n = checked.get(kind).copied().unwrap_or(0);
        assert!(
            n >= min,
            "{what}: only {n} {kind} entries checked: {checked:?}"
        );
    }
}

#[test]
fn module_lookup_maps_map_tokens_back() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_lookup_maps(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_lookup_maps(&rt, "full dump");
}

// ---------------------------------------------------------------- 7. AppDomain, assemblies, images

/// The PE file's SizeOfImage, the file offset and RVA and first 64 bytes of its metadata,
/// and the file's length. IL-only assemblies are PE32 files, ReadyToRun ones PE32+.
fn pe_facts(path: &Path) -> (u32, u64, u32, Vec<u8>, u64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match PeFile64::parse(&*bytes) {
        Ok(pe) => pe_facts_of(&pe, &bytes),
        Err(_) => pe_facts_of(&PeFile32::parse(&*bytes).expect("PE file"), &bytes),
    }
}

fn pe_facts_of<H: ImageNtHeaders>(
    pe: &PeFile<'_, H>,
    bytes: &[u8],
) -> (u32, u64, u32, Vec<u8>, u64) {
    let size_of_image = pe.nt_headers().optional_header().size_of_image();
    // IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR = 14; MetaData directory at +8 of the COR header.
    let cor = pe.data_directory(14).expect("COR header directory");
    let cor = pe
        .section_table()
        .pe_data_at(bytes, cor.virtual_address.get(LE))
        .expect("COR header");
    let md_rva = u32::from_le_bytes(cor[8..12].try_into().unwrap());
    let md = pe
        .section_table()
        .pe_data_at(bytes, md_rva)
        .expect("metadata");
    let file_offset = md.as_ptr() as u64 - bytes.as_ptr() as u64;
    (
        size_of_image,
        file_offset,
        md_rva,
        md[..64].to_vec(),
        bytes.len() as u64,
    )
}

fn verify_loader(rt: &Runtime, what: &str) {
    let v = V::new(rt, what);
    let app_domain = v.read_ptr(v.global("AppDomain"));
    let system_domain = v.read_ptr(v.global("SystemDomain"));
    assert_ne!(app_domain, 0, "{what}: AppDomain");
    let name =
        v.t.read_utf16_c_string(v.ptr(app_domain, "AppDomain", "FriendlyName"), 256)
            .unwrap();
    assert_eq!(name, NATIVE_FRIENDLY_NAME, "{what}: AppDomain.FriendlyName");

    // The assembly list: an ArrayListBase with its first block inline.
    let list = app_domain + v.off("AppDomain", "DomainAssemblyList");
    let count = v.u32(list, "ArrayListBase", "Count") as usize;
    let mut block = list + v.off("ArrayListBase", "FirstBlock");
    let mut domain_assemblies = Vec::new();
    let mut blocks = 0;
    while domain_assemblies.len() < count {
        assert_ne!(
            block,
            0,
            "{what}: the list ends after {}",
            domain_assemblies.len()
        );
        let size = v.u32(block, "ArrayListBlock", "Size") as usize;
        assert!((1..=100_000).contains(&size), "{what}: block size {size}");
        let take = size.min(count - domain_assemblies.len());
        domain_assemblies.extend(
            v.t.read_pointers(block + v.off("ArrayListBlock", "ArrayStart"), take)
                .unwrap(),
        );
        block = v.ptr(block, "ArrayListBlock", "Next");
        blocks += 1;
    }
    assert!(
        blocks >= 2,
        "{what}: {count} assemblies in {blocks} block(s)"
    );
    let listed: HashSet<u64> = domain_assemblies.iter().copied().collect();
    let global_allocator = system_domain + v.off("SystemDomain", "GlobalLoaderAllocator");
    let mut collectible_allocators = HashSet::new();
    let assemblies = ts()["assemblies"].as_array().unwrap();
    assert!(
        assemblies.len() >= 25,
        "{what}: {} assemblies",
        assemblies.len()
    );
    let mut images = 0;
    for a in assemblies {
        let w = format!("{what}: {}", a["name"]);
        let domain_assembly = hex(&a["native_assembly"]);
        assert!(
            listed.contains(&domain_assembly),
            "{w}: not in the AppDomain's list"
        );
        let module = hex(&a["module_handle"]);
        let assembly = v.ptr(domain_assembly, "DomainAssembly", "Assembly");
        assert_eq!(
            v.ptr(domain_assembly, "DomainAssembly", "Module"),
            module,
            "{w}"
        );
        assert_eq!(
            v.ptr(assembly, "Assembly", "Module"),
            module,
            "{w}: Assembly.Module"
        );
        assert_eq!(
            v.ptr(module, "Module", "Assembly"),
            assembly,
            "{w}: Module.Assembly"
        );
        assert_eq!(
            v.u32(assembly, "Assembly", "IsDynamic") != 0,
            flag(a, "is_dynamic"),
            "{w}"
        );
        let collectible = flag(a, "is_collectible");
        assert_eq!(
            v.u32(assembly, "Assembly", "IsCollectible") != 0,
            collectible,
            "{w}"
        );
        let flags = v.u32(module, "Module", "Flags");
        assert_ne!(flags & MODULE_IS_TENURED, 0, "{w}: Module.Flags {flags:#x}");
        assert_eq!(
            flags & MODULE_IS_EDIT_AND_CONTINUE,
            0,
            "{w}: Module.Flags {flags:#x}"
        );
        let allocator = v.ptr(module, "Module", "LoaderAllocator");
        if collectible {
            assert!(
                allocator != 0 && allocator != global_allocator,
                "{w}: LoaderAllocator"
            );
            collectible_allocators.insert(allocator);
        } else {
            assert_eq!(allocator, global_allocator, "{w}: LoaderAllocator");
        }
        if a["name"] == "System.Private.CoreLib" {
            assert_eq!(
                v.ptr(system_domain, "SystemDomain", "SystemAssembly"),
                assembly,
                "{w}"
            );
        }
        // The image: path, and the loaded layout against the file on disk.
        let location = a["location"].as_str().unwrap();
        let image = v.ptr(
            v.ptr(module, "Module", "PEAssembly"),
            "PEAssembly",
            "PEImage",
        );
        if flag(a, "is_dynamic") {
            assert_eq!(image, 0, "{w}: a dynamic assembly has no image");
            continue;
        }
        assert_eq!(
            v.module_path(module).as_deref(),
            Some(location),
            "{w}: PEImage.Path"
        );
        let layout = v.ptr(image, "PEImage", "LoadedImageLayout");
        let base = v.ptr(layout, "PEImageLayout", "Base");
        let size = v.u32(layout, "PEImageLayout", "Size");
        let layout_flags = v.u32(layout, "PEImageLayout", "Flags");
        assert!(
            v.t.mapped_files()
                .iter()
                .any(|f| f.start == base && f.file_offset == 0 && f.path == Path::new(location)),
            "{w}: layout base {base:#x} is not where the file is mapped"
        );
        let (size_of_image, md_file_offset, md_rva, md_bytes, file_len) =
            pe_facts(Path::new(location));
        let metadata = if layout_flags & LAYOUT_FLAG_MAPPED != 0 {
            assert_eq!(size, size_of_image, "{w}: mapped layout Size");
            base + md_rva as u64
        } else {
            assert_eq!(size as u64, file_len, "{w}: flat layout Size");
            base + md_file_offset
        };
        assert_eq!(&md_bytes[..4], b"BSJB", "{w}");
        assert_eq!(
            v.t.read_bytes(metadata, 64).unwrap(),
            md_bytes,
            "{w}: metadata"
        );
        images += 1;
    }
    // Each collectible assembly has a LoaderAllocator of its own: the RunAndCollect emitted
    // one and the plugin in its collectible AssemblyLoadContext.
    assert_eq!(
        collectible_allocators.len(),
        2,
        "{what}: two collectible assemblies"
    );
    assert!(images >= 20, "{what}: {images} images");
}

#[test]
fn app_domain_lists_every_assembly_with_its_module_and_image() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_loader(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_loader(&rt, "full dump");
}
