//! The GCInfo header decoder and unwind blob sizes against a real .NET 8 runtime (8.0.33,
//! or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`; first checked on 8.0.4).
//!
//! - JIT-ed code, live: for every managed method in the runtime's own perf map, the code
//!   header before the code leads to the RealCodeHeader and its GC info; decoded with the
//!   runtime's `GCInfoVersion` (2) the code length must equal the perf map's size.
//!   Decoding the same bytes as version 4 must (almost) never give that size.
//! - ReadyToRun code, offline: System.Private.CoreLib.dll's runtime functions. The GC
//!   info of a method follows the unwind blob of its main RUNTIME_FUNCTION; its code
//!   length must cover that function and the funclets that follow it.

use crate::common;

use std::path::Path;

use cdac::contracts::gc_info::{self, code_length, decode_header, GcInfoArch};
use cdac::contracts::unwind_info::{unwind_data_size, UnwindArch};
use cdac::contracts::ContractError;
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Target};
use cdac::runtime::{OpenOptions, Runtime};
use common::{perf_map, testbed};

/// Counts of one pass over the perf map.
#[derive(Debug, Default)]
struct JitCounts {
    entries: usize,
    stubs: usize,
    /// Earlier records of a start address that a later record reuses.
    superseded: usize,
    /// Code whose header or GC info can no longer be read (freed code).
    stale: usize,
    checked: usize,
    matched: usize,
    matched_as_v4: usize,
    mismatches: Vec<String>,
    /// Fat headers among the matched, and how many carry each optional field.
    fat: usize,
    field_counts: std::collections::BTreeMap<&'static str, usize>,
}

#[test]
fn jit_code_lengths_match_the_perf_map() {
    let tb = testbed();
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let t = rt.target();
    let d = rt.descriptor();
    let gc_info_offset = d
        .ty("RealCodeHeader")
        .and_then(|ty| ty.offset("GCInfo"))
        .expect("RealCodeHeader.GCInfo");
    let version = d.global_value("GCInfoVersion").expect("GCInfoVersion") as u32;
    assert_eq!(version, 2, ".NET 8 JIT-ed code is GCInfo version 2");
    let stub_last = d.global_value("StubCodeBlockLast").unwrap_or(0xF);
    let arch = GcInfoArch::from_name(d.global_string("Architecture").expect("Architecture"))
        .expect("GC info architecture");
    assert_eq!(arch, GcInfoArch::Amd64);

    let map = perf_map(Path::new(
        tb.manifest["perf_map"].as_str().expect("perf_map"),
    ));
    // Freed code (collected LCG methods) stays in the append-only perf map, and its
    // memory is reused: a record is live only if no later record overlaps it.
    let superseded = superseded_records(&map);
    let mut c = JitCounts::default();
    for (i, (start, size, name)) in map.iter().enumerate() {
        if name.starts_with("stub<") {
            continue;
        }
        c.entries += 1;
        if superseded[i] {
            c.superseded += 1;
            continue;
        }
        let Ok(header) = t.read_pointer(start - 8) else {
            c.stale += 1;
            continue;
        };
        if header <= stub_last {
            c.stubs += 1;
            continue;
        }
        let Ok(gc_info) = t.read_pointer(header + gc_info_offset) else {
            c.stale += 1;
            continue;
        };
        let len = match code_length(t, gc_info, version, arch) {
            Ok(len) => len,
            Err(ContractError::Read(_)) => {
                c.stale += 1;
                continue;
            }
            Err(e) => panic!("{name} at {start:#x}: GC info at {gc_info:#x}: {e}"),
        };
        c.checked += 1;
        if u64::from(len) == *size {
            c.matched += 1;
            // The whole header decodes too, and agrees.
            let h = decode_header(t, gc_info, version, arch)
                .unwrap_or_else(|e| panic!("{name}: header: {e}"));
            assert_eq!(h.code_length, len, "{name}");
            assert!(
                h.return_kind.is_some(),
                "{name}: version 2 has a return kind"
            );
            if !h.slim {
                c.fat += 1;
            }
            // The fields after the code length are plausible: a misread field would
            // shift every later one.
            if let Some(r) = h.stack_base_register {
                assert_eq!(r, 5, "{name}: x64 frames are based on RBP");
            }
            assert!(h.prolog_size.unwrap_or(0) < len, "{name}: {h:?}");
            assert!(h.epilog_size.unwrap_or(0) < len, "{name}: {h:?}");
            assert!(
                h.size_of_stack_outgoing_and_scratch_area
                    .is_some_and(|a| a % 8 == 0 && a < 0x10000),
                "{name}: {h:?}"
            );
            assert!(h.num_safe_points < len, "{name}: {h:?}");
            assert!(h.num_interruptible_ranges < len, "{name}: {h:?}");
            for (field, present) in [
                ("prolog size", h.prolog_size.is_some()),
                ("GS cookie", h.gs_cookie_stack_slot.is_some()),
                (
                    "generics context",
                    h.generics_inst_context_stack_slot.is_some(),
                ),
                ("stack base register", h.stack_base_register.is_some()),
                (
                    "reverse P/Invoke",
                    h.reverse_pinvoke_frame_stack_slot.is_some(),
                ),
                ("interruptible ranges", h.num_interruptible_ranges > 0),
                ("safe points", h.num_safe_points > 0),
            ] {
                *c.field_counts.entry(field).or_default() += usize::from(present);
            }
        } else {
            c.mismatches.push(format!(
                "#{i} {name} at {start:#x}: perf map {size:#x}, GC info {len:#x}"
            ));
        }
        if code_length(t, gc_info, 4, arch).ok().map(u64::from) == Some(*size) {
            c.matched_as_v4 += 1;
        }
    }
    eprintln!(
        "JIT-ed methods: {} managed perf-map records, {} checked, {} matched, {} stale, \
         {} superseded, {} stub blocks; decoded as version 4: {} matched",
        c.entries, c.checked, c.matched, c.stale, c.superseded, c.stubs, c.matched_as_v4
    );
    eprintln!(
        "JIT-ed headers: {} fat, {} slim; fields present: {:?}",
        c.fat,
        c.matched - c.fat,
        c.field_counts
    );
    assert!(
        c.checked >= 1000,
        "only {} methods checked: {c:?}",
        c.checked
    );
    assert!(
        c.mismatches.is_empty(),
        "{} of {} code lengths differ from the perf map: {:#?}",
        c.mismatches.len(),
        c.checked,
        &c.mismatches[..c.mismatches.len().min(20)]
    );
    assert!(c.stale * 20 <= c.entries, "too many stale records: {c:?}");
    assert!(
        c.matched_as_v4 * 100 <= c.checked,
        "decoding as version 4 matched {} of {}: the version should matter",
        c.matched_as_v4,
        c.checked
    );
}

/// For each perf-map record, whether a later record overlaps its code range.
fn superseded_records(map: &[(u64, u64, String)]) -> Vec<bool> {
    let mut by_start: Vec<(u64, u64, usize)> = map
        .iter()
        .enumerate()
        .map(|(i, (s, z, _))| (*s, s + (*z).max(1), i))
        .collect();
    by_start.sort_unstable();
    let longest = by_start.iter().map(|(s, e, _)| e - s).max().unwrap_or(0);
    let mut out = vec![false; map.len()];
    for &(s, e, i) in &by_start {
        let from = by_start.partition_point(|(s2, _, _)| *s2 + longest <= s);
        out[i] = by_start[from..]
            .iter()
            .take_while(|(s2, _, _)| *s2 < e)
            .any(|&(s2, e2, j)| j > i && s2 < e && s < e2);
    }
    out
}

// ------------------------------------------------------------------ ReadyToRun, offline

/// A PE image laid out at its RVAs in a test target.
struct Image {
    target: Target,
    base: u64,
}

impl Image {
    fn load(path: &Path) -> Image {
        use object::read::pe::PeFile64;
        let data = std::fs::read(path).expect("read PE file");
        let pe = PeFile64::parse(&*data).expect("parse PE");
        let base = 0x4000_0000u64;
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        for s in pe.section_table().iter() {
            let va = s.virtual_address.get(object::LittleEndian);
            let vsize = s.virtual_size.get(object::LittleEndian);
            let raw = s.pe_data(&*data).expect("section data");
            let size = (vsize as usize).max(raw.len());
            b.region(base + u64::from(va), size).bytes(0, raw);
        }
        Image {
            target: b.into_target(),
            base,
        }
    }

    fn u32_at(&self, rva: u32) -> u32 {
        self.target
            .read_u32(self.base + u64::from(rva))
            .expect("u32 in image")
    }

    fn u16_at(&self, rva: u32) -> u16 {
        self.target
            .read_u16(self.base + u64::from(rva))
            .expect("u16 in image")
    }
}

/// RVA and size of the CLI header (data directory 14).
fn cli_header(path: &Path) -> (u32, u32) {
    use object::read::pe::PeFile64;
    let data = std::fs::read(path).expect("read PE file");
    let pe = PeFile64::parse(&*data).expect("parse PE");
    let dir = pe
        .data_directories()
        .get(object::pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR)
        .expect("CLI header directory");
    (
        dir.virtual_address.get(object::LittleEndian),
        dir.size.get(object::LittleEndian),
    )
}

/// What the R2R check found.
#[derive(Debug, Default)]
struct R2rCounts {
    functions: usize,
    /// Main entries whose code length is exactly their own RUNTIME_FUNCTION.
    main_exact: usize,
    /// Main entries whose code length spans them and the funclets that follow.
    main_with_funclets: usize,
    /// Entries inside a preceding main entry's code (funclets).
    funclets: usize,
    /// Entries neither of the above.
    unexplained: Vec<String>,
    /// Main entries matched when decoded as version 4 instead.
    matched_as_v4: usize,
}

#[test]
fn ready_to_run_code_lengths_match_runtime_functions() {
    let tb = testbed();
    let dir = Path::new(tb.manifest["runtime_dir"].as_str().expect("runtime_dir"));
    let path = dir.join("System.Private.CoreLib.dll");
    let img = Image::load(&path);
    let (cli_rva, _) = cli_header(&path);
    // IMAGE_COR20_HEADER.ManagedNativeHeader is the directory at offset 64.
    let r2r_rva = img.u32_at(cli_rva + 64);
    assert_ne!(r2r_rva, 0, "CoreLib has no managed native (R2R) header");
    assert_eq!(
        img.u32_at(r2r_rva),
        0x0052_5452,
        "READYTORUN_HEADER signature 'RTR'"
    );
    let major = img.u16_at(r2r_rva + 4);
    let minor = img.u16_at(r2r_rva + 6);
    let version = gc_info::r2r_gc_info_version(major, minor);
    let count = img.u32_at(r2r_rva + 12);
    let functions = (0..count)
        .map(|i| r2r_rva + 16 + 12 * i)
        .find(|&s| img.u32_at(s) == 102)
        .map(|s| (img.u32_at(s + 4), img.u32_at(s + 8)))
        .expect("RuntimeFunctions section (102)");
    let n = (functions.1 / 12) as usize;
    assert!(n > 10_000, "only {n} runtime functions");
    let rf = |i: usize| {
        let at = functions.0 + 12 * i as u32;
        (img.u32_at(at), img.u32_at(at + 4), img.u32_at(at + 8))
    };

    let mut c = R2rCounts {
        functions: n,
        ..Default::default()
    };
    // End of the code of the current main entry (funclets lie before it).
    let mut method_end = 0u32;
    for i in 0..n {
        let (begin, end, unwind) = rf(i);
        assert!(begin < end, "runtime function {i}");
        if begin < method_end {
            c.funclets += 1;
            assert!(end <= method_end, "funclet {i} runs past its method");
            continue;
        }
        let u = img.base + u64::from(unwind);
        let blob = unwind_data_size(&img.target, u, UnwindArch::Amd64)
            .unwrap_or_else(|e| panic!("runtime function {i}: {e}"));
        let gc = u + blob;
        let len = match code_length(&img.target, gc, version, GcInfoArch::Amd64) {
            Ok(len) => len,
            Err(e) => {
                c.unexplained
                    .push(format!("#{i} {begin:#x}..{end:#x}: GC info: {e}"));
                continue;
            }
        };
        if code_length(&img.target, gc, 4, GcInfoArch::Amd64).ok() == Some(end - begin) {
            c.matched_as_v4 += 1;
        }
        let h = decode_header(&img.target, gc, version, GcInfoArch::Amd64)
            .unwrap_or_else(|e| panic!("runtime function {i}: header: {e}"));
        assert_eq!(h.code_length, len, "runtime function {i}");
        if let Some(r) = h.stack_base_register {
            assert_eq!(r, 5, "runtime function {i}: x64 frames are based on RBP");
        }
        assert!(h.return_kind.is_some(), "runtime function {i}");
        if len == end - begin {
            c.main_exact += 1;
            method_end = end;
        } else if len > end - begin && is_span(&rf, i, n, begin + len) {
            c.main_with_funclets += 1;
            method_end = begin + len;
        } else {
            c.unexplained.push(format!(
                "#{i} {begin:#x}..{end:#x}: GC info code length {len:#x}"
            ));
        }
    }
    eprintln!(
        "ReadyToRun CoreLib (R2R {major}.{minor}, GCInfo version {version}): {} runtime \
         functions, {} main entries matched exactly, {} main entries matched with their \
         funclets, {} funclets, {} unexplained; decoded as version 4: {} matched",
        c.functions,
        c.main_exact,
        c.main_with_funclets,
        c.funclets,
        c.unexplained.len(),
        c.matched_as_v4
    );
    assert!(
        c.unexplained.is_empty(),
        "{} runtime functions unexplained: {:#?}",
        c.unexplained.len(),
        &c.unexplained[..c.unexplained.len().min(20)]
    );
    assert_eq!(
        c.main_exact + c.main_with_funclets + c.funclets,
        c.functions
    );
    let mains = c.main_exact + c.main_with_funclets;
    assert!(
        c.matched_as_v4 * 100 <= mains,
        "decoding as version 4 matched {} of {mains}",
        c.matched_as_v4
    );
}

/// Whether the runtime functions from `i` on, each starting where the previous one
/// ends (up to alignment padding), end exactly at `end`.
fn is_span(rf: &dyn Fn(usize) -> (u32, u32, u32), i: usize, n: usize, end: u32) -> bool {
    let mut j = i;
    while j < n {
        let (_, e, _) = rf(j);
        if e == end {
            return true;
        }
        if e > end || j + 1 == n {
            return false;
        }
        let (next_begin, _, _) = rf(j + 1);
        if next_begin < e || next_begin > end {
            return false;
        }
        j += 1;
    }
    false
}
