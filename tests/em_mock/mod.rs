//! Mock runtime memory for the ExecutionManager tests (`tests/offline/execution_manager_mock.rs`).
//!
//! Everything here is written from this file's own field table ([`F`]), its own nibble-map,
//! hash-map, GC-info and unwind writers, and the runtime formats as the specs describe them
//! (digest §7, §9, §10, §12), never from the library's constants or helpers: a layout or
//! encoding bug in the library cannot hide in the builder too. The descriptor the library
//! reads is JSON built from the same table.

#![allow(dead_code)]

use std::collections::BTreeMap;

use cdac::descriptor::{json, DataDescriptor};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Endian, Target};
use serde_json::{json, Map, Value};

pub mod damaged_r2r;

// ---------------------------------------------------------------------------------------------
// Constants from the runtime (digest §7.3, §7.4, §7.15, §12.4)
// ---------------------------------------------------------------------------------------------

pub const FLAG_COLLECTIBLE: u32 = 0x1;
pub const FLAG_CODE_HEAP: u32 = 0x2;
pub const FLAG_RANGE_LIST: u32 = 0x4;

pub const STUB_CODE_BLOCK_LAST: u64 = 0xF;

pub const CLAUSE_FILTER: u32 = 0x1;
pub const CLAUSE_FINALLY: u32 = 0x2;
pub const CLAUSE_FAULT: u32 = 0x4;
pub const CLAUSE_DUPLICATED: u32 = 0x8;
pub const CLAUSE_CACHED_CLASS: u32 = 0x1000_0000;

pub const SECTION_RUNTIME_FUNCTIONS: u32 = 102;
pub const SECTION_METHOD_DEF_ENTRY_POINTS: u32 = 103;
pub const SECTION_EXCEPTION_INFO: u32 = 104;
pub const SECTION_DEBUG_INFO: u32 = 105;
pub const SECTION_HOT_COLD_MAP: u32 = 120;

/// The upstream tests' arbitrary JIT-manager address for ReadyToRun sections.
pub const R2R_JIT_MANAGER: u64 = 0x000b_ff00;

/// `g_rgPrimes` of the runtime's hash.cpp (the sizes a HashMap grows through).
const PRIMES: [u64; 22] = [
    5, 11, 17, 23, 29, 37, 47, 59, 71, 89, 107, 131, 163, 197, 239, 293, 353, 431, 521, 631, 761,
    919,
];

pub fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

// ---------------------------------------------------------------------------------------------
// The field table
// ---------------------------------------------------------------------------------------------

/// Offsets and sizes of every structure the contract reads, for one pointer size. The order
/// is deliberately neither the upstream mock's sequential one nor the native one, and
/// several "inline" fields (`TopLevelData`, `EntryPointToMethodDescMap`, `UnwindInfos`,
/// `Clauses`) do not sit at offset 0, so that using a field's address rather than its
/// content is checked.
#[derive(Debug, Clone, Copy)]
pub struct F {
    pub ps: u64,
    pub map_top: u64,
    pub map_size: u64,
    pub frag_next: u64,
    pub frag_begin: u64,
    pub frag_end: u64,
    pub frag_section: u64,
    pub frag_size: u64,
    pub sec_flags: u64,
    pub sec_begin: u64,
    pub sec_end: u64,
    pub sec_jit_manager: u64,
    pub sec_heap_list: u64,
    pub sec_r2r_module: u64,
    pub sec_next_for_delete: u64,
    pub sec_size: u64,
    pub node_next: u64,
    pub node_end: u64,
    pub node_start: u64,
    pub node_header_map: u64,
    pub node_map_base: u64,
    pub node_size: u64,
    pub rch_debug: u64,
    pub rch_eh: u64,
    pub rch_gc: u64,
    pub rch_md: u64,
    pub rch_num_unwind: u64,
    pub rch_unwind: u64,
    pub eejm_heaps: u64,
    pub eejm_rich: u64,
    pub eejm_size: u64,
    pub module_r2r: u64,
    pub module_size: u64,
    pub r2r_composite_info: u64,
    pub r2r_header: u64,
    pub r2r_composite: u64,
    pub r2r_functions: u64,
    pub r2r_num_functions: u64,
    pub r2r_hot_cold: u64,
    pub r2r_num_hot_cold: u64,
    pub r2r_thunks: u64,
    pub r2r_map: u64,
    pub r2r_eh_section: u64,
    /// `DebugInfoSection`: just past `r2r_size`, in images laid out with debug info only
    /// (the other layouts, which the stored fuzz inputs replay, stay as they were).
    pub r2r_debug_section: u64,
    pub r2r_size: u64,
    pub hm_buckets: u64,
    pub hm_size: u64,
    pub slots: u64,
    pub bucket_keys: u64,
    pub bucket_values: u64,
    pub bucket_size: u64,
    pub rtr_major: u64,
    pub rtr_size: u64,
    pub core_info_header: u64,
    pub core_info_size: u64,
    pub core_header_size: u64,
    pub eh_clauses: u64,
    pub ee_clause_union: u64,
    pub ee_clause_size: u64,
    pub rf_size: u64,
}

impl F {
    pub fn new(ps: u64) -> F {
        let slots = 4;
        let ee_union = align_up(20, ps);
        F {
            ps,
            map_top: 2 * ps,
            map_size: 2 * ps + 256 * ps,
            frag_next: 0,
            frag_begin: ps,
            frag_end: 2 * ps,
            frag_section: 3 * ps,
            frag_size: 4 * ps,
            sec_flags: 0,
            sec_begin: ps,
            sec_end: 2 * ps,
            sec_jit_manager: 3 * ps,
            sec_heap_list: 4 * ps,
            sec_r2r_module: 5 * ps,
            sec_next_for_delete: 6 * ps,
            sec_size: 7 * ps,
            node_next: 0,
            node_end: ps,
            node_start: 2 * ps,
            node_header_map: 3 * ps,
            node_map_base: 4 * ps,
            node_size: 5 * ps,
            rch_debug: 0,
            rch_eh: ps,
            rch_gc: 2 * ps,
            rch_md: 3 * ps,
            rch_num_unwind: 4 * ps,
            rch_unwind: 4 * ps + 4,
            eejm_heaps: 0,
            eejm_rich: ps,
            eejm_size: 2 * ps,
            module_r2r: 3 * ps,
            module_size: 4 * ps,
            r2r_composite_info: 0,
            r2r_header: ps,
            r2r_composite: 2 * ps,
            r2r_functions: 3 * ps,
            r2r_num_functions: 4 * ps,
            r2r_hot_cold: 5 * ps,
            r2r_num_hot_cold: 6 * ps,
            r2r_thunks: 7 * ps,
            r2r_map: 8 * ps,
            r2r_eh_section: 10 * ps,
            r2r_debug_section: 11 * ps,
            r2r_size: 11 * ps,
            hm_buckets: ps,
            hm_size: 2 * ps,
            slots,
            bucket_keys: 0,
            bucket_values: slots * ps,
            bucket_size: 2 * slots * ps,
            rtr_major: 4,
            rtr_size: 16,
            core_info_header: ps,
            core_info_size: 2 * ps,
            core_header_size: 8,
            eh_clauses: ps,
            ee_clause_union: ee_union,
            ee_clause_size: ee_union + ps,
            rf_size: 12,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// Target memory under construction: regions at fixed addresses, each its own mapping with
/// unmapped gaps between allocations.
#[derive(Debug, Clone)]
pub struct Mem {
    pub layout: DataLayout,
    regions: BTreeMap<u64, Vec<u8>>,
    next: u64,
    /// Every allocation (address, size): the "structures" the fuzz test damages.
    pub allocations: Vec<(u64, u64)>,
}

pub fn encode(layout: DataLayout, v: u64, n: usize) -> Vec<u8> {
    let le = v.to_le_bytes();
    let mut out: Vec<u8> = le[..n].to_vec();
    if layout.endian == Endian::Big {
        out.reverse();
    }
    out
}

pub fn decode(layout: DataLayout, b: &[u8]) -> u64 {
    let mut v = 0u64;
    match layout.endian {
        Endian::Little => {
            for (i, x) in b.iter().enumerate() {
                v |= u64::from(*x) << (8 * i);
            }
        }
        Endian::Big => {
            for x in b {
                v = (v << 8) | u64::from(*x);
            }
        }
    }
    v
}

impl Mem {
    pub fn new(layout: DataLayout) -> Mem {
        Mem {
            layout,
            regions: BTreeMap::new(),
            next: 0x0030_0000,
            allocations: Vec::new(),
        }
    }

    pub fn ps(&self) -> u64 {
        u64::from(self.layout.pointer_size)
    }

    /// A zeroed region at a fresh address, followed by an unmapped gap.
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        let addr = align_up(self.next, align.max(8));
        self.next = addr + size.max(1) + 0x40;
        self.map(addr, size.max(1));
        addr
    }

    /// A zeroed region at a chosen address.
    pub fn map(&mut self, addr: u64, size: u64) {
        if let Some((&b, buf)) = self.regions.range(..addr + size).next_back() {
            assert!(
                b + buf.len() as u64 <= addr,
                "test regions overlap at {addr:#x}"
            );
        }
        self.regions.insert(addr, vec![0; size as usize]);
        self.allocations.push((addr, size));
    }

    pub fn is_mapped(&self, addr: u64) -> bool {
        self.regions
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, buf)| addr - b < buf.len() as u64)
    }

    fn locate(&mut self, addr: u64, len: usize) -> (&mut Vec<u8>, usize) {
        let (&base, buf) = self
            .regions
            .range_mut(..=addr)
            .next_back()
            .unwrap_or_else(|| panic!("no region at {addr:#x}"));
        let off = (addr - base) as usize;
        assert!(
            off + len <= buf.len(),
            "write of {len} at {addr:#x} runs past its region"
        );
        (buf, off)
    }

    pub fn bytes(&mut self, addr: u64, data: &[u8]) {
        let (buf, off) = self.locate(addr, data.len());
        buf[off..off + data.len()].copy_from_slice(data);
    }

    pub fn read(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let (buf, off) = self.locate(addr, len);
        buf[off..off + len].to_vec()
    }

    pub fn u8(&mut self, addr: u64, v: u8) {
        self.bytes(addr, &[v]);
    }
    pub fn u16(&mut self, addr: u64, v: u16) {
        let b = encode(self.layout, v.into(), 2);
        self.bytes(addr, &b);
    }
    pub fn u32(&mut self, addr: u64, v: u32) {
        let b = encode(self.layout, v.into(), 4);
        self.bytes(addr, &b);
    }
    pub fn u64(&mut self, addr: u64, v: u64) {
        let b = encode(self.layout, v, 8);
        self.bytes(addr, &b);
    }
    pub fn ptr(&mut self, addr: u64, v: u64) {
        let n = self.ps() as usize;
        let b = encode(self.layout, v, n);
        self.bytes(addr, &b);
    }
    pub fn read_u32(&mut self, addr: u64) -> u32 {
        let b = self.read(addr, 4);
        decode(self.layout, &b) as u32
    }
    pub fn read_ptr(&mut self, addr: u64) -> u64 {
        let n = self.ps() as usize;
        let b = self.read(addr, n);
        decode(self.layout, &b)
    }

    /// Sets stream bit `pos` of a GCInfo bit stream whose words start at `base` (aligned to
    /// the pointer size): word `pos / word_bits`, bit `pos % word_bits` counted from the
    /// least significant, the word stored in the target's byte order (digest §10.3).
    fn set_stream_bit(&mut self, base: u64, pos: u64) {
        let ps = self.ps();
        let word_bits = 8 * ps;
        let (word, bit) = (pos / word_bits, pos % word_bits);
        let byte_in_word = match self.layout.endian {
            Endian::Little => bit / 8,
            Endian::Big => ps - 1 - bit / 8,
        };
        let addr = base + word * ps + byte_in_word;
        let old = self.read(addr, 1)[0];
        self.u8(addr, old | (1 << (bit % 8)));
    }

    /// Writes a GCInfo bit stream starting at `addr` (which need not be word-aligned; the
    /// reader aligns down and skips the leading bits). Only the stream's bits are touched.
    pub fn gc_stream(&mut self, addr: u64, bits: &[bool]) {
        let ps = self.ps();
        let base = addr - addr % ps;
        let skip = (addr - base) * 8;
        for (i, &b) in bits.iter().enumerate() {
            if b {
                self.set_stream_bit(base, skip + i as u64);
            }
        }
    }

    /// Builds a target from the regions, optionally after `patch` changed some bytes.
    pub fn into_target(self) -> Target {
        let mut b = MemoryBuilder::new(self.layout);
        for (addr, data) in self.regions {
            b.region(addr, data.len()).bytes(0, &data);
        }
        b.into_target()
    }
}

// ---------------------------------------------------------------------------------------------
// GC info and unwind info encoders
// ---------------------------------------------------------------------------------------------

/// The bits of a slim AMD64 GC info header (digest §10.4): IsFat = 0, UsesStackBaseRegister,
/// for versions up to 3 two ReturnKind bits, then the code length as a variable-length
/// unsigned number in base 8 (8 data bits and a "more" bit per chunk, low chunk first),
/// then NumSafePoints = 0 (base 2) and some padding.
pub fn gc_header_bits(version: u32, code_length: u32, stack_base: bool) -> Vec<bool> {
    let mut bits = vec![false, stack_base];
    if (2..=3).contains(&version) {
        // ReturnKind 1 (Object): bits 0, 1 written low first.
        bits.extend([true, false]);
    }
    let mut v = u64::from(code_length);
    loop {
        let chunk = v & 0xFF;
        v >>= 8;
        for i in 0..8 {
            bits.push(chunk >> i & 1 == 1);
        }
        bits.push(v != 0);
        if v == 0 {
            break;
        }
    }
    // NumSafePoints = 0 in base 2, NumInterruptibleRanges implied.
    bits.extend([false, false, false]);
    bits
}

/// The GCInfo version of ReadyToRun code by header version (digest §10.2): 1.x → 1,
/// up to 9.2 → 2, 9.3 to 10.x → 3, 11.0 on → 4.
pub fn r2r_gc_version(major: u16, minor: u16) -> u32 {
    match (major, minor) {
        (0..=1, _) => 1,
        (2..=8, _) | (9, 0..=2) => 2,
        (9..=10, _) => 3,
        _ => 4,
    }
}

/// Size of an x64 UNWIND_INFO blob with `codes` unwind codes, the personality slot
/// included (digest §9.1).
pub fn unwind_size(codes: u8) -> u64 {
    align_up(4 + 2 * u64::from(codes) + 4, 4)
}

// ---------------------------------------------------------------------------------------------
// Descriptor
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct DescOpts {
    /// The contract version as raw JSON (`1`, `"c2"`), or `None` for no ExecutionManager.
    pub contract: Option<String>,
    pub gc_version: u32,
    /// `FeatureOnStackReplacement` global, if present.
    pub osr: Option<u64>,
    /// Whether `EEJitManager` has the `StoreRichDebugInfo` field.
    pub rich_field: bool,
    pub arch: String,
    /// Type sizes to override (damaged descriptors).
    pub sizes: Vec<(&'static str, u64)>,
    /// Whether `ReadyToRunInfo` has the `ExceptionInfoSection` field (newer runtimes);
    /// without it the ExceptionInfo section is found through the core header.
    pub eh_section_field: bool,
    /// Whether `ReadyToRunInfo` has the `DebugInfoSection` field (newer runtimes); without
    /// it the DebugInfo section is found through the core header. Needs an image laid out
    /// with `R2rSpec::debug`.
    pub debug_section_field: bool,
}

impl DescOpts {
    pub fn for_version(v: u64) -> DescOpts {
        DescOpts {
            contract: Some(v.to_string()),
            gc_version: 4,
            osr: None,
            rich_field: true,
            arch: "x64".into(),
            sizes: Vec::new(),
            eh_section_field: false,
            debug_section_field: false,
        }
    }
}

fn ty(size: Option<u64>, fields: &[(&str, u64, &str)]) -> Value {
    let mut m = Map::new();
    if let Some(s) = size {
        m.insert("!".into(), json!(s));
    }
    for (name, off, t) in fields {
        if t.is_empty() {
            m.insert((*name).into(), json!(off));
        } else {
            m.insert((*name).into(), json!([off, t]));
        }
    }
    Value::Object(m)
}

/// The descriptor JSON for field table `f`; pointer data slot 1 is the range section map
/// object, slot 2 the `EEJitManager` pointer variable.
pub fn descriptor_json(f: &F, o: &DescOpts, value_mask: u64) -> String {
    let p = "pointer";
    let u32t = "uint32";
    let mut types = Map::new();
    types.insert(
        "RangeSectionMap".into(),
        ty(Some(f.map_size), &[("TopLevelData", f.map_top, p)]),
    );
    types.insert(
        "RangeSectionFragment".into(),
        ty(
            Some(f.frag_size),
            &[
                ("RangeBegin", f.frag_begin, p),
                ("RangeEndOpen", f.frag_end, p),
                ("RangeSection", f.frag_section, p),
                ("Next", f.frag_next, p),
            ],
        ),
    );
    types.insert(
        "RangeSection".into(),
        ty(
            Some(f.sec_size),
            &[
                ("RangeBegin", f.sec_begin, p),
                ("RangeEndOpen", f.sec_end, p),
                ("NextForDelete", f.sec_next_for_delete, p),
                ("JitManager", f.sec_jit_manager, p),
                ("Flags", f.sec_flags, "int32"),
                ("HeapList", f.sec_heap_list, p),
                ("R2RModule", f.sec_r2r_module, p),
            ],
        ),
    );
    types.insert(
        "CodeHeapListNode".into(),
        ty(
            Some(f.node_size),
            &[
                ("Next", f.node_next, p),
                ("StartAddress", f.node_start, p),
                ("EndAddress", f.node_end, p),
                ("MapBase", f.node_map_base, p),
                ("HeaderMap", f.node_header_map, p),
            ],
        ),
    );
    types.insert(
        "RealCodeHeader".into(),
        ty(
            None,
            &[
                ("MethodDesc", f.rch_md, p),
                ("GCInfo", f.rch_gc, p),
                ("DebugInfo", f.rch_debug, p),
                ("EHInfo", f.rch_eh, p),
                ("NumUnwindInfos", f.rch_num_unwind, u32t),
                ("UnwindInfos", f.rch_unwind, ""),
            ],
        ),
    );
    types.insert(
        "RuntimeFunction".into(),
        ty(
            Some(f.rf_size),
            &[
                ("BeginAddress", 0, u32t),
                ("EndAddress", 4, u32t),
                ("UnwindData", 8, u32t),
            ],
        ),
    );
    let mut eejm = vec![("AllCodeHeaps", f.eejm_heaps, p)];
    if o.rich_field {
        eejm.push(("StoreRichDebugInfo", f.eejm_rich, "uint8"));
    }
    types.insert("EEJitManager".into(), ty(Some(f.eejm_size), &eejm));
    types.insert(
        "Module".into(),
        ty(Some(f.module_size), &[("ReadyToRunInfo", f.module_r2r, p)]),
    );
    let mut r2r = vec![
        ("ReadyToRunHeader", f.r2r_header, p),
        ("CompositeInfo", f.r2r_composite_info, p),
        ("Composite", f.r2r_composite, p),
        ("RuntimeFunctions", f.r2r_functions, p),
        ("NumRuntimeFunctions", f.r2r_num_functions, u32t),
        ("HotColdMap", f.r2r_hot_cold, p),
        ("NumHotColdMap", f.r2r_num_hot_cold, u32t),
        ("DelayLoadMethodCallThunks", f.r2r_thunks, p),
        ("EntryPointToMethodDescMap", f.r2r_map, ""),
    ];
    if o.eh_section_field {
        r2r.push(("ExceptionInfoSection", f.r2r_eh_section, p));
    }
    let mut r2r_size = f.r2r_size;
    if o.debug_section_field {
        r2r.push(("DebugInfoSection", f.r2r_debug_section, p));
        r2r_size += f.ps;
    }
    types.insert("ReadyToRunInfo".into(), ty(Some(r2r_size), &r2r));
    types.insert(
        "ReadyToRunHeader".into(),
        ty(
            Some(f.rtr_size),
            &[
                ("MajorVersion", f.rtr_major, "uint16"),
                ("MinorVersion", f.rtr_major + 2, "uint16"),
            ],
        ),
    );
    types.insert(
        "ReadyToRunCoreInfo".into(),
        ty(Some(f.core_info_size), &[("Header", f.core_info_header, p)]),
    );
    types.insert(
        "ReadyToRunCoreHeader".into(),
        ty(
            Some(f.core_header_size),
            &[("Flags", 0, u32t), ("NumberOfSections", 4, u32t)],
        ),
    );
    types.insert(
        "ReadyToRunSection".into(),
        ty(
            Some(12),
            &[("Type", 0, u32t), ("Section", 4, "ImageDataDirectory")],
        ),
    );
    types.insert(
        "ImageDataDirectory".into(),
        ty(Some(8), &[("VirtualAddress", 0, u32t), ("Size", 4, u32t)]),
    );
    types.insert(
        "HashMap".into(),
        ty(Some(f.hm_size), &[("Buckets", f.hm_buckets, p)]),
    );
    types.insert(
        "Bucket".into(),
        ty(
            Some(f.bucket_size),
            &[("Keys", f.bucket_keys, ""), ("Values", f.bucket_values, "")],
        ),
    );
    types.insert(
        "EEILException".into(),
        ty(None, &[("Clauses", f.eh_clauses, "")]),
    );
    types.insert(
        "EEExceptionClause".into(),
        ty(
            Some(f.ee_clause_size),
            &[
                ("Flags", 0, u32t),
                ("TryStartPC", 4, u32t),
                ("TryEndPC", 8, u32t),
                ("HandlerStartPC", 12, u32t),
                ("HandlerEndPC", 16, u32t),
                ("ClassToken", f.ee_clause_union, u32t),
                ("FilterOffset", f.ee_clause_union, u32t),
                ("TypeHandle", f.ee_clause_union, "nuint"),
            ],
        ),
    );
    types.insert(
        "R2RExceptionClause".into(),
        ty(
            Some(24),
            &[
                ("Flags", 0, u32t),
                ("TryStartPC", 4, u32t),
                ("TryEndPC", 8, u32t),
                ("HandlerStartPC", 12, u32t),
                ("HandlerEndPC", 16, u32t),
                ("ClassToken", 20, u32t),
                ("FilterOffset", 20, u32t),
            ],
        ),
    );
    types.insert(
        "ExceptionLookupTableEntry".into(),
        ty(
            Some(8),
            &[("MethodStartRVA", 0, u32t), ("ExceptionInfoRVA", 4, u32t)],
        ),
    );
    for (name, size) in &o.sizes {
        if let Some(Value::Object(m)) = types.get_mut(*name) {
            m.insert("!".into(), json!(size));
        }
    }

    let mut globals = Map::new();
    globals.insert(
        "ExecutionManagerCodeRangeMapAddress".into(),
        json!([[1], "pointer"]),
    );
    globals.insert("EEJitManagerAddress".into(), json!([[2], "pointer"]));
    globals.insert(
        "StubCodeBlockLast".into(),
        json!([format!("{STUB_CODE_BLOCK_LAST:#x}"), "uint8"]),
    );
    globals.insert(
        "GCInfoVersion".into(),
        json!([format!("{:#x}", o.gc_version), "uint32"]),
    );
    globals.insert(
        "HashMapSlotsPerBucket".into(),
        json!([format!("{:#x}", f.slots), "uint32"]),
    );
    globals.insert(
        "HashMapValueMask".into(),
        json!([format!("{value_mask:#x}"), "uint64"]),
    );
    globals.insert("Architecture".into(), json!(o.arch));
    if let Some(v) = o.osr {
        globals.insert(
            "FeatureOnStackReplacement".into(),
            json!([format!("{v:#x}"), "uint8"]),
        );
    }

    let mut top = Map::new();
    top.insert("version".into(), json!(0));
    top.insert("baseline".into(), json!("empty"));
    if let Some(c) = &o.contract {
        let v: Value = serde_json::from_str(c).expect("contract version JSON");
        top.insert("contracts".into(), json!({ "ExecutionManager": v }));
    }
    top.insert("types".into(), Value::Object(types));
    top.insert("globals".into(), Value::Object(globals));
    Value::Object(top).to_string()
}

// ---------------------------------------------------------------------------------------------
// The world: range section map, code heaps, ReadyToRun images
// ---------------------------------------------------------------------------------------------

/// A JIT code heap: its code range, list node and nibble map.
#[derive(Debug, Clone, Copy)]
pub struct Heap {
    pub begin: u64,
    pub size: u64,
    pub node: u64,
    pub map: u64,
    cursor: u64,
}

/// One exception clause as written (JIT or ReadyToRun).
#[derive(Debug, Clone, Copy, Default)]
pub struct Clause {
    pub flags: u32,
    pub try_start: u32,
    pub try_end: u32,
    pub handler_start: u32,
    pub handler_end: u32,
    /// Class token or filter offset.
    pub union: u32,
    /// JIT clauses with the cached-class flag: the type handle (pointer-sized union).
    pub type_handle: u64,
}

/// A JIT'ed method to lay out.
#[derive(Debug, Clone, Default)]
pub struct JitSpec {
    pub size: u32,
    pub method_desc: u64,
    /// GC-info code length (default: `size`).
    pub code_length: Option<u32>,
    /// Unwind entries as (start, end) offsets from the method start.
    pub unwind: Vec<(u32, u32)>,
    pub eh: Option<Vec<Clause>>,
    pub debug_info: u64,
    /// Override of the header's `NumUnwindInfos`.
    pub num_unwind_override: Option<u32>,
}

/// A laid-out JIT'ed method.
#[derive(Debug, Clone, Copy)]
pub struct JitMethod {
    pub start: u64,
    pub size: u64,
    pub header: u64,
    pub gc_info: u64,
    pub eh_info: u64,
    pub unwind_infos: u64,
}

/// A RUNTIME_FUNCTION of a ReadyToRun image to lay out.
#[derive(Debug, Clone, Copy)]
pub struct Rf {
    pub begin: u32,
    pub end: u32,
    pub codes: u8,
    /// GC-info code length: written after the unwind blob of a method's main entry.
    pub gc_len: Option<u32>,
}

impl Rf {
    /// A method's main entry whose GC info covers just this entry.
    pub fn method(begin: u32, end: u32) -> Rf {
        Rf {
            begin,
            end,
            codes: 2,
            gc_len: Some(end - begin),
        }
    }
    /// A method's main entry whose GC info covers `total` bytes (funclets, cold part).
    pub fn method_len(begin: u32, end: u32, total: u32) -> Rf {
        Rf {
            begin,
            end,
            codes: 2,
            gc_len: Some(total),
        }
    }
    /// A funclet or cold-part entry (no GC info of its own).
    pub fn part(begin: u32, end: u32) -> Rf {
        Rf {
            begin,
            end,
            codes: 1,
            gc_len: None,
        }
    }
}

/// A ReadyToRun image to lay out.
#[derive(Debug, Clone)]
pub struct R2rSpec {
    pub base: u64,
    pub size: u64,
    pub functions: Vec<Rf>,
    /// Override of `NumRuntimeFunctions`.
    pub num_functions_override: Option<u32>,
    pub hot_cold: Vec<u32>,
    /// Override of `NumHotColdMap`.
    pub num_hot_cold_override: Option<u32>,
    /// Entry point RVA → MethodDesc.
    pub entries: Vec<(u32, u64)>,
    /// Bucket count of the entry-point map (default: the runtime's sizing).
    pub buckets: Option<u64>,
    pub major: u16,
    /// READYTORUN_HEADER minor version.
    pub minor: u16,
    pub thunks: Option<(u32, u32)>,
    /// Whether the entry-point map lives in a separate composite image's info.
    pub composite: bool,
    /// Methods' exception clauses (method start RVA, clauses), sorted by RVA.
    pub eh: Vec<(u32, Vec<Clause>)>,
    /// Whether the core header lists an ExceptionInfo section at all.
    pub eh_section: bool,
    /// RVA of the unwind blobs (0x40 bytes each) and of the exception info.
    pub unwind_rva: u32,
    pub eh_rva: u32,
    /// The DebugInfo section: (RVA, bytes) written into the image. Without it the section
    /// table lists 8 zero bytes at RVA 0x30 (an empty NativeArray).
    pub debug: Option<(u32, Vec<u8>)>,
}

impl R2rSpec {
    pub fn new(functions: Vec<Rf>, entries: Vec<(u32, u64)>) -> R2rSpec {
        R2rSpec {
            base: 0x0a0a_0000,
            size: 0xc000,
            functions,
            num_functions_override: None,
            hot_cold: Vec::new(),
            num_hot_cold_override: None,
            entries,
            buckets: None,
            major: 9,
            minor: 1,
            thunks: None,
            composite: false,
            eh: Vec::new(),
            eh_section: true,
            unwind_rva: 0x8000,
            eh_rva: 0xa000,
            debug: None,
        }
    }
}

/// A laid-out ReadyToRun image.
#[derive(Debug, Clone)]
pub struct R2rImage {
    pub base: u64,
    pub info: u64,
    pub module: u64,
    pub section: u64,
    pub functions: u64,
    pub composite_info: u64,
    pub map: u64,
    pub buckets: u64,
    pub unwind: Vec<u64>,
    pub gc: Vec<u64>,
    pub core_header: u64,
    pub hot_cold: u64,
}

impl R2rImage {
    pub fn rf(&self, i: usize) -> u64 {
        self.functions + 12 * i as u64
    }
}

pub struct World {
    pub layout: DataLayout,
    pub f: F,
    /// Contract version the nibble maps are written for (1: start nibbles only; 2: also
    /// pointer units).
    pub version: u64,
    pub mem: Mem,
    pub opts: DescOpts,
    pub map_object: u64,
    pub top: u64,
    pub ee_jit_manager: u64,
    pub ee_jit_manager_var: u64,
    pub heaps: Vec<Heap>,
}

impl World {
    pub fn new(layout: DataLayout, version: u64) -> World {
        let ps = u64::from(layout.pointer_size);
        let f = F::new(ps);
        let mut mem = Mem::new(layout);
        let map_object = mem.alloc(f.map_size, ps);
        let ee_jit_manager = mem.alloc(f.eejm_size, ps);
        let ee_jit_manager_var = mem.alloc(ps, ps);
        mem.ptr(ee_jit_manager_var, ee_jit_manager);
        World {
            layout,
            f,
            version,
            mem,
            opts: DescOpts::for_version(version),
            map_object,
            top: map_object + f.map_top,
            ee_jit_manager,
            ee_jit_manager_var,
            heaps: Vec::new(),
        }
    }

    pub fn ps(&self) -> u64 {
        self.f.ps
    }

    /// HashMapValueMask: every bit but the top one of a pointer.
    pub fn value_mask(&self) -> u64 {
        if self.ps() == 4 {
            0x7fff_ffff
        } else {
            0x7fff_ffff_ffff_ffff
        }
    }

    pub fn descriptor(&self) -> DataDescriptor {
        let text = descriptor_json(&self.f, &self.opts, self.value_mask());
        let physical = json::parse("em-mock", text.as_bytes()).expect("mock descriptor parses");
        let mut d = DataDescriptor::new(self.layout);
        d.merge(
            "em-mock",
            &physical,
            &[0, self.map_object, self.ee_jit_manager_var],
        )
        .expect("mock descriptor merges");
        d
    }

    pub fn into_parts(self) -> (Target, DataDescriptor) {
        let d = self.descriptor();
        (self.mem.into_target(), d)
    }

    // ----- range section map --------------------------------------------------------------

    fn geometry(&self) -> (u32, u32) {
        if self.ps() == 4 {
            (2, 16)
        } else {
            (5, 17)
        }
    }

    pub fn chunk(&self) -> u64 {
        1 << self.geometry().1
    }

    fn index(&self, addr: u64, level: u32) -> u64 {
        (addr >> (self.geometry().1 + 8 * (level - 1))) & 0xFF
    }

    /// The level-1 entry slot for `addr`, creating the levels above it.
    pub fn leaf_slot(&mut self, addr: u64) -> u64 {
        let ps = self.ps();
        let levels = self.geometry().0;
        let mut array = self.top;
        for level in (2..=levels).rev() {
            let slot = array + self.index(addr, level) * ps;
            let mut next = self.mem.read_ptr(slot) & !1;
            if next == 0 {
                next = self.mem.alloc(256 * ps, ps);
                self.mem.ptr(slot, next);
            }
            array = next;
        }
        array + self.index(addr, 1) * ps
    }

    /// Writes a fragment and pushes it at the head of the list of the chunk at `chunk_addr`.
    /// `next_tag` is or-ed into its `Next` link.
    pub fn push_fragment(
        &mut self,
        chunk_addr: u64,
        begin: u64,
        end: u64,
        section: u64,
        next_tag: u64,
    ) -> u64 {
        let f = self.f;
        let slot = self.leaf_slot(chunk_addr);
        let head = self.mem.read_ptr(slot);
        let frag = self.mem.alloc(f.frag_size, f.ps);
        self.mem.ptr(frag + f.frag_begin, begin);
        self.mem.ptr(frag + f.frag_end, end);
        self.mem.ptr(frag + f.frag_section, section);
        self.mem.ptr(
            frag + f.frag_next,
            if head != 0 { head | next_tag } else { 0 },
        );
        self.mem.ptr(slot, frag);
        frag
    }

    /// Writes a `RangeSection`.
    #[allow(clippy::too_many_arguments)]
    pub fn write_section(
        &mut self,
        begin: u64,
        end: u64,
        flags: u32,
        jit_manager: u64,
        heap_list: u64,
        r2r_module: u64,
        next_for_delete: u64,
    ) -> u64 {
        let f = self.f;
        let s = self.mem.alloc(f.sec_size, f.ps);
        self.mem.u32(s + f.sec_flags, flags);
        self.mem.ptr(s + f.sec_begin, begin);
        self.mem.ptr(s + f.sec_end, end);
        self.mem.ptr(s + f.sec_jit_manager, jit_manager);
        self.mem.ptr(s + f.sec_heap_list, heap_list);
        self.mem.ptr(s + f.sec_r2r_module, r2r_module);
        self.mem.ptr(s + f.sec_next_for_delete, next_for_delete);
        s
    }

    /// Maps `[begin, end)` to `section`: one fragment per chunk, as the runtime does.
    pub fn map_range(&mut self, begin: u64, end: u64, section: u64) -> Vec<u64> {
        let chunk = self.chunk();
        let mut c = begin & !(chunk - 1);
        let mut frags = Vec::new();
        while c < end {
            frags.push(self.push_fragment(c, begin, end, section, 0));
            c += chunk;
        }
        frags
    }

    // ----- JIT code heaps -----------------------------------------------------------------

    /// A code heap over `[begin, begin + size)` (mapped, zeroed), with its list node and an
    /// empty nibble map. Returns its index.
    pub fn add_heap(&mut self, begin: u64, size: u64) -> usize {
        let f = self.f;
        self.mem.map(begin, size);
        let map = self.mem.alloc(size.div_ceil(256) * 4, 4);
        let node = self.mem.alloc(f.node_size, f.ps);
        let prev = self.heaps.last().map_or(0, |h| h.node);
        self.mem.ptr(node + f.node_next, prev);
        self.mem.ptr(node + f.node_start, begin);
        self.mem.ptr(node + f.node_end, begin + size);
        self.mem.ptr(node + f.node_map_base, begin);
        self.mem.ptr(node + f.node_header_map, map);
        self.heaps.push(Heap {
            begin,
            size,
            node,
            map,
            cursor: begin,
        });
        self.heaps.len() - 1
    }

    /// The RangeSection of a code heap (flags: code heap), mapped.
    pub fn heap_section(&mut self, heap: usize) -> u64 {
        let h = self.heaps[heap];
        let s = self.write_section(
            h.begin,
            h.begin + h.size,
            FLAG_CODE_HEAP,
            self.ee_jit_manager,
            h.node,
            0,
            0,
        );
        self.map_range(h.begin, h.begin + h.size, s);
        s
    }

    pub fn set_all_code_heaps(&mut self, v: u64) {
        let f = self.f;
        self.mem.ptr(self.ee_jit_manager + f.eejm_heaps, v);
    }

    pub fn set_store_rich_debug_info(&mut self, v: u8) {
        let f = self.f;
        self.mem.u8(self.ee_jit_manager + f.eejm_rich, v);
    }

    /// Records a method start in the heap's nibble map (digest §7.8, §7.9).
    pub fn nibble_mark(&mut self, heap: usize, start: u64, size: u64) {
        let h = self.heaps[heap];
        let rel = start - h.begin;
        assert_eq!(rel % 4, 0, "code starts are 4-byte aligned");
        let bucket = rel / 32;
        let unit = h.map + (bucket / 8) * 4;
        let shift = 28 - 4 * (bucket % 8);
        let nibble = (rel % 32) / 4 + 1;
        let old = self.mem.read_u32(unit);
        self.mem.u32(unit, old | ((nibble as u32) << shift));
        if self.version == 2 {
            let pointer = ((rel as u32) & !0xF) + ((rel as u32 & 0xF) >> 2) + 9;
            let mut u = rel / 256 + 1;
            while (u + 1) * 256 <= rel + size {
                self.mem.u32(h.map + u * 4, pointer);
                u += 1;
            }
        }
    }

    /// Reserves the code header slot and code of a block of `size` bytes; returns its start.
    fn place_block(&mut self, heap: usize, size: u64) -> u64 {
        let ps = self.ps();
        let h = self.heaps[heap];
        let start = align_up(h.cursor + ps, 16);
        assert!(start + size <= h.begin + h.size, "code heap full");
        self.heaps[heap].cursor = start + size + 32;
        start
    }

    /// A stub block whose code header slot holds `kind`.
    pub fn add_stub(&mut self, heap: usize, size: u64, kind: u64) -> u64 {
        let start = self.place_block(heap, size);
        let ps = self.ps();
        self.mem.ptr(start - ps, kind);
        self.nibble_mark(heap, start, size);
        start
    }

    /// A JIT'ed method with its RealCodeHeader, GC info, unwind entries and EH info.
    pub fn add_jit_method(&mut self, heap: usize, spec: &JitSpec) -> JitMethod {
        let f = self.f;
        let ps = self.ps();
        let size = u64::from(spec.size);
        let start = self.place_block(heap, size);
        let h = self.heaps[heap];
        let header = self
            .mem
            .alloc(f.rch_unwind + 12 * spec.unwind.len().max(1) as u64, ps);
        self.mem.ptr(start - ps, header);
        self.mem.ptr(header + f.rch_md, spec.method_desc);
        self.mem.ptr(header + f.rch_debug, spec.debug_info);
        let gc = self.mem.alloc(32, 8);
        let bits = gc_header_bits(
            self.opts.gc_version,
            spec.code_length.unwrap_or(spec.size),
            true,
        );
        self.mem.gc_stream(gc, &bits);
        self.mem.ptr(header + f.rch_gc, gc);
        self.mem.u32(
            header + f.rch_num_unwind,
            spec.num_unwind_override.unwrap_or(spec.unwind.len() as u32),
        );
        let unwind_infos = header + f.rch_unwind;
        for (i, &(b, e)) in spec.unwind.iter().enumerate() {
            let rf = unwind_infos + 12 * i as u64;
            let rva = (start - h.begin) as u32;
            self.mem.u32(rf, rva + b);
            self.mem.u32(rf + 4, rva + e);
            self.mem.u32(rf + 8, 0x40 + 16 * i as u32);
        }
        let eh_info = match &spec.eh {
            None => 0,
            Some(clauses) => self.write_jit_eh(clauses),
        };
        self.mem.ptr(header + f.rch_eh, eh_info);
        self.nibble_mark(heap, start, size);
        JitMethod {
            start,
            size,
            header,
            gc_info: gc,
            eh_info,
            unwind_infos,
        }
    }

    /// EE_ILEXCEPTION with its clause count in the pointer-sized slot before it.
    pub fn write_jit_eh(&mut self, clauses: &[Clause]) -> u64 {
        let f = self.f;
        let ps = self.ps();
        let base = self.mem.alloc(
            ps + f.eh_clauses + f.ee_clause_size * clauses.len() as u64,
            ps,
        );
        self.mem.ptr(base, clauses.len() as u64);
        let eh = base + ps;
        for (i, c) in clauses.iter().enumerate() {
            let a = eh + f.eh_clauses + f.ee_clause_size * i as u64;
            self.mem.u32(a, c.flags);
            self.mem.u32(a + 4, c.try_start);
            self.mem.u32(a + 8, c.try_end);
            self.mem.u32(a + 12, c.handler_start);
            self.mem.u32(a + 16, c.handler_end);
            if c.flags & CLAUSE_CACHED_CLASS != 0 {
                self.mem.ptr(a + f.ee_clause_union, c.type_handle);
            } else {
                self.mem.u32(a + f.ee_clause_union, c.union);
            }
        }
        eh
    }

    // ----- hash maps ----------------------------------------------------------------------

    /// Fills the `HashMap` embedded at `map` (digest §7.12): element 0 of the bucket array
    /// holds the count, buckets from element 1, open addressing with the runtime's hash and
    /// collision flags. `ptr_map` stores values shifted right by one (PtrHashMap).
    pub fn write_hash_map(
        &mut self,
        map: u64,
        entries: &[(u64, u64)],
        ptr_map: bool,
        size: Option<u64>,
    ) -> u64 {
        let f = self.f;
        let ps = self.ps();
        let size = size.unwrap_or_else(|| {
            let required = entries.len() as u64 * 3 / 2;
            *PRIMES.iter().find(|&&p| p > required).expect("map size")
        });
        let buckets = self.mem.alloc((size + 1) * f.bucket_size, ps);
        self.mem.ptr(buckets, size);
        let flag = !self.value_mask() & if ps == 4 { 0xffff_ffff } else { u64::MAX };
        for &(key, value) in entries {
            let key = if ptr_map && key <= 1 { key + 100 } else { key };
            let value = if ptr_map { value >> 1 } else { value };
            let mut seed = (key >> 2) as u32;
            let incr = 1 + (((key >> 5) as u32).wrapping_add(1) % (size as u32 - 1));
            let mut placed = false;
            for _ in 0..size {
                let b = buckets + (1 + u64::from(seed) % size) * f.bucket_size;
                let free =
                    (0..f.slots).find(|&j| self.mem.read_ptr(b + f.bucket_keys + j * ps) == 0);
                if let Some(j) = free {
                    self.mem.ptr(b + f.bucket_keys + j * ps, key);
                    let v0 = self.mem.read_ptr(b + f.bucket_values + j * ps);
                    self.mem
                        .ptr(b + f.bucket_values + j * ps, value | (v0 & flag));
                    placed = true;
                    break;
                }
                let v0 = self.mem.read_ptr(b + f.bucket_values);
                self.mem.ptr(b + f.bucket_values, v0 | flag);
                seed = seed.wrapping_add(incr);
            }
            assert!(placed, "hash map full");
        }
        self.mem.ptr(map + f.hm_buckets, buckets);
        buckets
    }

    // ----- ReadyToRun ---------------------------------------------------------------------

    fn write_r2r_info(&mut self, spec: &R2rSpec, functions: u64, hot_cold: u64) -> u64 {
        let f = self.f;
        let extra = if spec.debug.is_some() { f.ps } else { 0 };
        let info = self.mem.alloc(f.r2r_size + extra, f.ps);
        let header = self.mem.alloc(f.rtr_size, 4);
        self.mem.u32(header, 0x0052_5452);
        self.mem.u16(header + f.rtr_major, spec.major);
        self.mem.u16(header + f.rtr_major + 2, spec.minor);
        self.mem.ptr(info + f.r2r_header, header);
        self.mem.ptr(info + f.r2r_composite_info, info);
        self.mem.ptr(info + f.r2r_functions, functions);
        self.mem.u32(
            info + f.r2r_num_functions,
            spec.num_functions_override
                .unwrap_or(spec.functions.len() as u32),
        );
        self.mem.ptr(info + f.r2r_hot_cold, hot_cold);
        self.mem.u32(
            info + f.r2r_num_hot_cold,
            spec.num_hot_cold_override
                .unwrap_or(spec.hot_cold.len() as u32),
        );
        info
    }

    /// Lays out a ReadyToRun image: the image range (mapped), its RUNTIME_FUNCTIONs and
    /// their unwind blobs and GC info, the hot/cold map, the entry-point map, the core
    /// header's section table with the ExceptionInfo lookup table, the module and the
    /// range section.
    pub fn add_r2r(&mut self, spec: &R2rSpec) -> R2rImage {
        let f = self.f;
        let ps = self.ps();
        let base = spec.base;
        self.mem.map(base, spec.size);
        // Runtime functions (plus the runtime's sentinel entry) outside the image.
        let n = spec.functions.len() as u64;
        let functions = self.mem.alloc(12 * (n + 1), 4);
        let mut unwind = Vec::new();
        let mut gc = Vec::new();
        let gc_version = r2r_gc_version(spec.major, spec.minor);
        for (i, rf) in spec.functions.iter().enumerate() {
            let a = functions + 12 * i as u64;
            let urva = spec.unwind_rva + 0x40 * i as u32;
            self.mem.u32(a, rf.begin);
            self.mem.u32(a + 4, rf.end);
            self.mem.u32(a + 8, urva);
            let u = base + u64::from(urva);
            // Version 1, flags EHANDLER | UHANDLER, prolog 4, codes, no frame register.
            self.mem.bytes(u, &[1 | (3 << 3), 4, rf.codes, 0]);
            for c in 0..u64::from(rf.codes) {
                self.mem.bytes(u + 4 + 2 * c, &[4, 0x02]);
            }
            let size = unwind_size(rf.codes);
            let g = u + size;
            // The personality routine RVA. The GC-info reader reads pointer-sized words
            // aligned down from the stream's start (as the runtime's reader does); on a
            // big-endian 64-bit target a stream starting 4 bytes into a word therefore
            // has its first 32 bits in the 4 bytes *before* it, here the personality
            // slot, which must then hold only stream bits. (No big-endian CoreCLR exists;
            // the combination is kept for the layout matrix.)
            let overlaid = self.layout.endian == Endian::Big && g % ps != 0;
            if !overlaid {
                self.mem.u32(u + size - 4, 0x0000_1234);
            }
            unwind.push(u);
            if let Some(len) = rf.gc_len {
                self.mem
                    .gc_stream(g, &gc_header_bits(gc_version, len, false));
            }
            gc.push(g);
        }
        self.mem.u32(functions + 12 * n, u32::MAX);
        let hot_cold = if spec.hot_cold.is_empty() {
            0
        } else {
            let m = self.mem.alloc(4 * spec.hot_cold.len() as u64, 4);
            for (i, v) in spec.hot_cold.iter().enumerate() {
                self.mem.u32(m + 4 * i as u64, *v);
            }
            m
        };
        let info = self.write_r2r_info(spec, functions, hot_cold);
        let entries: Vec<(u64, u64)> = spec
            .entries
            .iter()
            .map(|&(rva, md)| (base + u64::from(rva), md))
            .collect();
        let (composite_info, map, buckets) = if spec.composite {
            // The map lives in the composite image's info; the component's own map holds
            // decoys that must not be used.
            let other = self.write_r2r_info(spec, functions, hot_cold);
            let decoys: Vec<(u64, u64)> = entries.iter().map(|&(k, v)| (k, v + 0x1000)).collect();
            self.write_hash_map(info + f.r2r_map, &decoys, true, spec.buckets);
            self.mem.ptr(info + f.r2r_composite_info, other);
            let b = self.write_hash_map(other + f.r2r_map, &entries, true, spec.buckets);
            (other, other + f.r2r_map, b)
        } else {
            let b = self.write_hash_map(info + f.r2r_map, &entries, true, spec.buckets);
            (info, info + f.r2r_map, b)
        };
        if let Some((va, size)) = spec.thunks {
            let dir = self.mem.alloc(8, 4);
            self.mem.u32(dir, va);
            self.mem.u32(dir + 4, size);
            self.mem.ptr(info + f.r2r_thunks, dir);
        }
        // Exception info inside the image: lookup table (with sentinel) then clauses.
        let table_rva = spec.eh_rva;
        let mut clause_rva = table_rva + 8 * (spec.eh.len() as u32 + 1);
        for (i, (method_rva, clauses)) in spec.eh.iter().enumerate() {
            let e = base + u64::from(table_rva) + 8 * i as u64;
            self.mem.u32(e, *method_rva);
            self.mem.u32(e + 4, clause_rva);
            for c in clauses {
                let a = base + u64::from(clause_rva);
                for (k, v) in [
                    c.flags,
                    c.try_start,
                    c.try_end,
                    c.handler_start,
                    c.handler_end,
                    c.union,
                ]
                .iter()
                .enumerate()
                {
                    self.mem.u32(a + 4 * k as u64, *v);
                }
                clause_rva += 24;
            }
        }
        let sentinel = base + u64::from(table_rva) + 8 * spec.eh.len() as u64;
        self.mem.u32(sentinel, u32::MAX);
        self.mem.u32(sentinel + 4, clause_rva);
        // Core info → core header {Flags, NumberOfSections} + sections sorted by type.
        let mut sections = vec![(SECTION_RUNTIME_FUNCTIONS, 0x10u32, 12 * n as u32)];
        sections.push((SECTION_METHOD_DEF_ENTRY_POINTS, 0x20, 8));
        if spec.eh_section {
            sections.push((
                SECTION_EXCEPTION_INFO,
                table_rva,
                8 * (spec.eh.len() as u32 + 1),
            ));
        }
        let (debug_rva, debug_size) = match &spec.debug {
            Some((rva, bytes)) => {
                self.mem.bytes(base + u64::from(*rva), bytes);
                (*rva, bytes.len() as u32)
            }
            None => (0x30, 8),
        };
        sections.push((SECTION_DEBUG_INFO, debug_rva, debug_size));
        let core_header = self
            .mem
            .alloc(f.core_header_size + 12 * sections.len() as u64, 4);
        self.mem.u32(core_header, 0);
        self.mem.u32(core_header + 4, sections.len() as u32);
        for (i, (t, va, size)) in sections.iter().enumerate() {
            let s = core_header + f.core_header_size + 12 * i as u64;
            self.mem.u32(s, *t);
            self.mem.u32(s + 4, *va);
            self.mem.u32(s + 8, *size);
        }
        // Newer runtimes: ReadyToRunInfo.ExceptionInfoSection → the section's directory.
        if spec.eh_section {
            let dir = self.mem.alloc(8, 4);
            self.mem.u32(dir, table_rva);
            self.mem.u32(dir + 4, 8 * (spec.eh.len() as u32 + 1));
            self.mem.ptr(info + f.r2r_eh_section, dir);
        }
        // Newer runtimes: ReadyToRunInfo.DebugInfoSection → the section's directory.
        if spec.debug.is_some() {
            let dir = self.mem.alloc(8, 4);
            self.mem.u32(dir, debug_rva);
            self.mem.u32(dir + 4, debug_size);
            self.mem.ptr(info + f.r2r_debug_section, dir);
        }
        let core_info = self.mem.alloc(f.core_info_size, ps);
        self.mem.ptr(core_info + f.core_info_header, core_header);
        self.mem.ptr(info + f.r2r_composite, core_info);
        // Module and range section.
        let module = self.mem.alloc(f.module_size, ps);
        self.mem.ptr(module + f.module_r2r, info);
        let section = self.write_section(base, base + spec.size, 0, R2R_JIT_MANAGER, 0, module, 0);
        self.map_range(base, base + spec.size, section);
        R2rImage {
            base,
            info,
            module,
            section,
            functions,
            composite_info,
            map,
            buckets,
            unwind,
            gc,
            core_header,
            hot_cold,
        }
    }
}
