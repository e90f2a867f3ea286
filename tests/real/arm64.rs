//! linux-arm64: the testbed built for linux-arm64 (.NET 10.0.15 and 9.0.23) runs under qemu-user; the
//! host reads its memory live, then qemu writes its core (SIGQUIT). Oracles: the runtime's
//! own perf map (every method it lists, with its size and name) and the testbed's manifest
//! (the MethodDescs of its methods), live and from the core; the core's ELF images, found
//! in its memory (qemu writes no NT_FILE note), equal the live process's mappings.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{self, start_testbed, Variant};
use cdac::formats::perf_map::strip_tier;
use cdac::unwind::aarch64::unwind_data::EPILOG_END;

/// The note `cdac unwind` puts after an OSR method's Tier0 frame (src/cli/code.rs).
const OSR_FRAME_NOTE: &str = " (the Tier0 frame this OSR code runs on: no instruction)";
/// The same, on .NET 11, after the instruction that stands for it.
const OSR_RELOAD_NOTE: &str =
    " (the Tier0 frame this OSR code runs on: its frame pointer and return address reloaded)";

/// `cdac methods --json` as start → (size, name, MethodDesc).
fn methods(target: &[&str]) -> BTreeMap<u64, (u64, String, u64)> {
    let v = common::cdac_json(&[&["methods", "--json"], target].concat());
    v.as_array()
        .expect("methods")
        .iter()
        .map(|m| {
            (
                common::hex(&m["start"]),
                (
                    m["size"].as_u64().expect("size"),
                    m["name"].as_str().expect("name").to_string(),
                    common::hex(&m["method_desc"]),
                ),
            )
        })
        .collect()
}

/// Every method of the perf map (not the stubs) is listed, with its size and name. An entry
/// whose code a later entry took over (overlapping it) is stale and left out; a dynamic
/// method (LCG) is collectible, so one the map lists may since have been freed.
fn perf_map_methods_listed(
    map: &std::path::Path,
    ours: &BTreeMap<u64, (u64, String, u64)>,
    what: &str,
) -> usize {
    let mut current: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for (start, size, name) in common::perf_map(map) {
        if name.starts_with("stub ") || name.starts_with("stub<") {
            continue;
        }
        let end = start + size.max(1);
        let overlapped: Vec<u64> = current
            .range(..end)
            .filter(|(s, (z, _))| **s + (*z).max(1) > start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapped {
            current.remove(&s);
        }
        current.insert(start, (size, name));
    }
    let (mut wrong, mut freed_dynamic) = (Vec::new(), 0);
    for (start, (size, name)) in &current {
        let listed = ours
            .get(start)
            .is_some_and(|(s, n, _)| s == size && n == strip_tier(name));
        if listed {
            continue;
        }
        if name.contains("dynamicClass::") {
            freed_dynamic += 1;
        } else {
            wrong.push(format!(
                "{start:#x} {size:#x} {name}: ours {:?}",
                ours.get(start)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} perf map methods not listed as the runtime lists them: {:#?}",
        wrong.len(),
        current.len(),
        &wrong[..wrong.len().min(10)]
    );
    assert!(
        current.len() > 1000,
        "{what}: {} perf map methods",
        current.len()
    );
    assert!(
        freed_dynamic <= 10,
        "{what}: {freed_dynamic} dynamic methods not listed"
    );
    current.len()
}

/// The MethodDescs of the manifest's called methods that have code of their own (generic
/// instantiations over reference types run their canonical method's code: left out).
fn manifest_method_descs(tb: &common::Testbed) -> BTreeSet<u64> {
    ["emitted_methods", "async_methods", "lcg_methods"]
        .iter()
        .flat_map(|k| tb.manifest[*k].as_array().cloned().unwrap_or_default())
        .map(|m| common::hex(&m["method_desc"]))
        .collect()
}

/// (base, path) of the native modules the live process maps (guest addresses are host ones).
fn live_native_modules(pid: i32, folder: &str) -> BTreeSet<(u64, String)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    maps.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (range, offset, path) = (f.first()?, f.get(2)?, f.get(5)?);
            // Guest images only: the arm64 runtime's folder.
            (*offset == "00000000" && path.contains(folder) && path.ends_with(".so"))
                .then(|| {
                    let base = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
                    Some((base, path.to_string()))
                })
                .flatten()
        })
        .collect()
}

/// Live: the entry points the testbed took of its methods resolve to their MethodDescs,
/// through arm64 precodes (fixup precodes of the emitted static methods, stub precodes of
/// the framework's P/Invokes) or their code.
fn precodes_name_their_methods(tb: &common::Testbed, what: &str) {
    use cdac::contracts::precode_stubs::{resolve_entry_point, KnownPrecodeType};
    let rt = cdac::runtime::Runtime::attach(tb.pid, &Default::default()).expect("attach");
    let (t, d) = (rt.target(), rt.descriptor());
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let emitted = tb.manifest["emitted_methods"].as_array().expect("emitted");
    let framework = tb.manifest["framework_methods"]
        .as_array()
        .expect("framework");
    for (m, kind) in emitted
        .iter()
        .map(|m| (m, Some(KnownPrecodeType::Fixup)))
        .chain(framework.iter().map(|m| {
            // .NET 11 gives a P/Invoke a fixup precode like any other method; before, a
            // stub precode.
            let pinvoke = m["pinvoke"].as_bool().unwrap_or(false);
            let kind = if tb.variant.runtime_version().starts_with("11.") {
                KnownPrecodeType::Fixup
            } else {
                KnownPrecodeType::Stub
            };
            (m, pinvoke.then_some(kind))
        }))
    {
        let entry = common::hex(&m["function_pointer"]);
        let resolved = resolve_entry_point(t, d, entry)
            .unwrap_or_else(|e| panic!("{what}: {m}: {e}"))
            .unwrap_or_else(|| panic!("{what}: {entry:#x} resolves to nothing"));
        assert_eq!(
            resolved.method_desc,
            common::hex(&m["method_desc"]),
            "{what}: {m}"
        );
        let got = resolved.precode.map(|p| p.kind);
        if kind.is_some() {
            assert_eq!(got, kind, "{what}: {m}");
        }
        *kinds.entry(format!("{got:?}")).or_default() += 1;
    }
    assert!(
        kinds.get("Some(Fixup)").copied().unwrap_or(0) >= 10,
        "{what}: {kinds:?}"
    );
    eprintln!("{what}: entry points by kind {kinds:?}");
}

/// Every slot of the precode pages (the range-list sections) that holds the stub precode's
/// code, taken from a framework P/Invoke's entry point: its data's type byte says a stub or
/// a P/Invoke import precode (the lazy binding of a P/Invoke not called yet). Each the
/// contract reads as the same kind naming the same MethodDesc; every import precode names
/// a P/Invoke (NDirect) MethodDesc and jumps to one thunk. Returns the import precodes.
fn pinvoke_import_precodes(core: &std::path::Path, tb: &common::Testbed, what: &str) -> usize {
    use cdac::contracts::execution_manager::range_section_map::all_range_sections;
    use cdac::contracts::precode_stubs::{precode_stubs, KnownPrecodeType};
    let rt = cdac::Runtime::open_dump(core, &cdac::OpenOptions::default()).expect("open");
    let (t, d) = (rt.target(), rt.descriptor());
    let stubs = precode_stubs(t, d).expect("PrecodeStubs");
    let page = u64::from(stubs.machine().stub_code_page_size);
    let stub_type = u64::from(stubs.machine().stub_precode_type);
    let import_type = stubs
        .machine()
        .pinvoke_import_precode_type
        .map(u64::from)
        .expect("the descriptor names the P/Invoke import precode type");
    let known = tb.manifest["framework_methods"]
        .as_array()
        .expect("framework")
        .iter()
        .find(|m| m["pinvoke"] == true)
        .map(|m| common::hex(&m["function_pointer"]))
        .expect("a framework P/Invoke");
    // The stub precode's code: a framework P/Invoke's entry point up to .NET 10; .NET 11
    // gives P/Invokes fixup precodes, and its stub precodes are found by the type byte of
    // their data (the first slot the contract also reads as an import precode).
    let is_stub = stubs
        .precode(known)
        .ok()
        .flatten()
        .is_some_and(|p| p.kind == KnownPrecodeType::Stub);
    let template_at = if is_stub {
        known
    } else {
        all_range_sections(t, d)
            .expect("range sections")
            .iter()
            .filter(|s| s.is_range_list())
            .flat_map(|s| (s.range_begin..s.range_end_open.saturating_sub(23)).step_by(24))
            .find(|&entry| {
                t.read_u8(entry + page + 16).ok() == Some(import_type as u8)
                    && stubs
                        .precode(entry)
                        .ok()
                        .flatten()
                        .is_some_and(|p| p.kind == KnownPrecodeType::PInvokeImport)
            })
            .unwrap_or_else(|| panic!("{what}: no P/Invoke import precode"))
    };
    let template = t
        .read_bytes(template_at, 24)
        .expect("the stub precode's code");
    // MethodDesc classification: the low 3 bits of the flags word at +6; 2 is NDirect.
    let classification = |md: u64| t.read_u16(md + 6).map(|f| f & 7).unwrap_or(0xff);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut thunks: BTreeSet<u64> = BTreeSet::new();
    for s in all_range_sections(t, d).expect("range sections") {
        if !s.is_range_list() {
            continue;
        }
        let mut base = s.range_begin;
        while base + 24 <= s.range_end_open {
            for entry in (base..base + page - 23).step_by(24) {
                let Ok(code) = t.read_bytes(entry, 24) else {
                    break;
                };
                if code != template {
                    continue;
                }
                let data = entry + page;
                let (Ok(md), Ok(target), Ok(ty)) = (
                    t.read_pointer(data),
                    t.read_pointer(data + 8),
                    t.read_u8(data + 16),
                ) else {
                    continue;
                };
                if md == 0 {
                    *counts.entry("unused".into()).or_default() += 1;
                    continue;
                }
                let kind = match u64::from(ty) {
                    x if x == stub_type => KnownPrecodeType::Stub,
                    x if x == import_type => KnownPrecodeType::PInvokeImport,
                    other => panic!("{what}: {entry:#x}: stub data of type {other:#x}"),
                };
                let p = stubs
                    .precode(entry)
                    .expect("reads")
                    .unwrap_or_else(|| panic!("{what}: {entry:#x} is no precode to the contract"));
                assert_eq!(p.kind, kind, "{what}: {entry:#x}");
                assert_eq!(stubs.method_desc(&p).expect("reads"), Some(md), "{what}");
                if kind == KnownPrecodeType::PInvokeImport {
                    assert_eq!(classification(md), 2, "{what}: {entry:#x}: {md:#x}");
                    thunks.insert(target);
                }
                *counts.entry(format!("{kind:?}")).or_default() += 1;
            }
            base += page;
        }
    }
    let imports = counts.get("PInvokeImport").copied().unwrap_or(0);
    assert!(imports > 100, "{what}: {counts:?}");
    assert_eq!(thunks.len(), 1, "{what}: import thunks {thunks:x?}");
    eprintln!("{what}: stub-shaped precodes {counts:?}, one import thunk");
    imports
}

/// A PE image laid out at `base` as the loader maps it: headers, then each section at its
/// RVA.
fn laid_out(bytes: &[u8], base: u64) -> cdac::Target {
    use cdac::memory::builder::MemoryBuilder;
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u32_at =
        |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes")) as usize;
    let pe = u32_at(0x3c);
    let (count, optional) = (u16_at(pe + 6), u16_at(pe + 20));
    let size_of_image = u32_at(pe + 24 + 56);
    let mut b = MemoryBuilder::new(cdac::memory::DataLayout::LE64);
    let r = b.region(base, size_of_image);
    r.bytes(0, &bytes[..0x400.min(bytes.len())]);
    for k in 0..count {
        let h = pe + 24 + optional + 40 * k;
        let (vsize, rva, raw, at) = (
            u32_at(h + 8),
            u32_at(h + 12),
            u32_at(h + 16),
            u32_at(h + 20),
        );
        let n = raw.min(vsize.max(raw)).min(bytes.len() - at);
        r.bytes(rva, &bytes[at..at + n]);
    }
    b.into_target()
}

/// The hot/cold-split build of the ReadyToRun library (`split/`, crossgen2
/// `--hot-cold-splitting`; read only, the runtime crashes calling it): for each split
/// method, one unwind step from its cold part's body (unwind data `end_c`, then the host's
/// codes) reaches the same caller as one from its hot part's body, over the same registers
/// and stack, from a return address and from the cold part's first instruction (a
/// fragment has no prolog); the cold part's unwind data describes no prolog, and its
/// epilogs are its code (llvm-mc).
#[test]
fn cold_code_of_a_split_arm64_image_unwinds_as_its_hot_part() {
    use cdac::formats::r2r::R2rImage;
    use cdac::memory::builder::MemoryBuilder;
    use cdac::unwind::aarch64::managed::virtual_unwind;
    use cdac::unwind::aarch64::unwind_data::Arm64UnwindData;
    use cdac::unwind::Arm64Context;
    const BASE: u64 = 0x55_0000_0000;
    const SP: u64 = 0x7f_0000_0000;
    let path = common::testbed_exe(Variant::Net10Arm64)
        .parent()
        .expect("folder")
        .join("split/Cdac.Testbed.R2R.dll");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let img = R2rImage::parse(&bytes).expect("a ReadyToRun image");
    let code = laid_out(&bytes, BASE);
    let table = img.section(102).expect("RuntimeFunctions").rva;
    let map = img
        .section_bytes(120)
        .expect("read")
        .expect("a hot/cold map");
    let pairs: Vec<(usize, usize)> = map
        .chunks_exact(8)
        .map(|w| {
            let at = |k: usize| u32::from_le_bytes(w[k..k + 4].try_into().expect("4")) as usize;
            (at(0), at(4))
        })
        .collect();
    assert!(!pairs.is_empty(), "no split method in {}", path.display());
    // A stack of distinct words.
    let mut b = MemoryBuilder::new(cdac::memory::DataLayout::LE64);
    let st = b.region(SP, 0x1000);
    for k in 0..0x200 {
        st.u64(8 * k, SP + 0x1000 + 0x10 * k as u64);
    }
    let stack = b.into_target();
    let mut epilog_instructions = 0;
    for &(cold, hot) in &pairs {
        let rf = |i: usize| BASE + u64::from(table) + 8 * i as u64;
        let (h, c) = (&img.runtime_functions[hot], &img.runtime_functions[cold]);
        let step = |i: usize, pc: u64, exact: bool| {
            let mut ctx = Arm64Context::new(pc, SP, Some(SP));
            ctx.regs[30] = Some(0x1234_5678);
            virtual_unwind(&code, BASE, rf(i), &ctx, &stack, exact)
                .unwrap_or_else(|e| panic!("runtime function {i} at {pc:#x}: {e}"))
        };
        let from_hot = step(hot, BASE + u64::from(h.begin) + 0x10, false);
        assert!(
            from_hot.sp() > SP && from_hot.pc != 0x1234_5678,
            "{from_hot:?}"
        );
        let cold_begin = BASE + u64::from(c.begin);
        assert_eq!(
            step(cold, cold_begin + 8, false),
            from_hot,
            "cold part {cold}"
        );
        assert_eq!(
            step(cold, cold_begin, true),
            from_hot,
            "cold part {cold} at its start"
        );
        let data = Arm64UnwindData::read(&code, BASE + u64::from(c.unwind)).expect("xdata");
        assert_eq!(data.prolog_instructions(), 0, "a fragment has no prolog");
        assert!(data.prolog_text().is_empty());
        assert!(!data.epilogs.is_empty());
        for e in &data.epilogs {
            let ours = data.epilog_text(e.code_index);
            let at = cold_begin + e.start;
            let theirs = disassemble(&code.read_bytes(at, ours.len() * 4).expect("code"));
            assert_eq!(ours.len(), theirs.len());
            for (o, t) in ours.iter().zip(&theirs) {
                if o == EPILOG_END {
                    assert!(t == "ret" || t.starts_with('b'), "{t}");
                } else {
                    assert!(same_instruction(o, t), "cold epilog {ours:?} vs {theirs:?}");
                }
                epilog_instructions += 1;
            }
        }
    }
    eprintln!(
        "{}: {} split method(s): cold steps equal hot ones; {epilog_instructions} cold epilog \
         instructions read as their code",
        path.display(),
        pairs.len()
    );
}

/// Whether the instruction an unwind code stands for (`ours`) is the code's (`theirs`). An
/// allocation too large for an immediate is made from a register the prolog loaded first
/// (`mov x1, #6192; sub sp, sp, x1`, after a stack probe): the code says how much, not how.
fn same_instruction(ours: &str, theirs: &str) -> bool {
    if ours == theirs {
        return true;
    }
    ["sub sp, sp, ", "add sp, sp, "].iter().any(|verb| {
        ours.strip_prefix(verb).is_some_and(|n| n.starts_with('#'))
            && theirs
                .strip_prefix(verb)
                .is_some_and(|r| r.starts_with('x'))
    })
}

/// llvm-mc, which disassembles arm64 on any host (Debian's llvm-14, which lldb brings).
fn llvm_mc() -> std::path::PathBuf {
    let candidates = [
        "/usr/bin/llvm-mc",
        "/usr/bin/llvm-mc-14",
        "/usr/lib/llvm-14/bin/llvm-mc",
    ];
    candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .expect("llvm-mc (apt-get install llvm-14; scripts/ensure-tools does)")
}

/// The arm64 instructions of `bytes`, as llvm-mc writes them (`stp x29, x30, [sp, #-32]!`).
fn disassemble(bytes: &[u8]) -> Vec<String> {
    use std::io::Write;
    let mut child = std::process::Command::new(llvm_mc())
        .args(["--disassemble", "-triple=aarch64"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run llvm-mc");
    let text: Vec<String> = bytes.iter().map(|b| format!("{b:#04x}")).collect();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.join(" ").as_bytes())
        .expect("write to llvm-mc");
    let out = child.wait_with_output().expect("llvm-mc output");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('\t') && !l.trim_start().starts_with('.'))
        .map(|l| {
            let l = l.split("//").next().unwrap_or("").trim();
            l.replacen('\t', " ", 1).replace('\t', " ")
        })
        .collect()
}

/// `cdac unwind` of methods spread over the core's code: each prolog and epilog the unwind
/// data describes is the code's own, instruction by instruction (llvm-mc disassembling the
/// core's bytes), but for `nop` codes (an instruction unwinding ignores) and the Tier0 frame
/// of an OSR method. Returns the instructions compared.
fn unwind_describes_the_code(core: &std::path::Path, what: &str) -> usize {
    let rt = cdac::Runtime::open_dump(core, &cdac::OpenOptions::default()).expect("open");
    let c = core.display().to_string();
    // About 40 methods spread over the code, every OSR one and the large-frame one.
    let listed = common::cdac_json(&["methods", "--json", "--dump", &c]);
    let listed = listed.as_array().expect("methods");
    let step = (listed.len() / 40).max(1);
    let mut methods: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for (k, m) in listed.iter().enumerate() {
        // The testbed's method with a large frame (a stack probe, then the allocation from
        // a register) is always among them.
        let big = m["name"]
            .as_str()
            .is_some_and(|n| n.contains("Cdac.Testbed.Big::"));
        if k % step == 0 || big || m["tier"] == "optimized_tier1_osr" {
            let size = m["size"].as_u64().expect("size");
            let name = m["name"].as_str().expect("name").to_string();
            methods.insert(common::hex(&m["start"]), (size, name));
        }
    }
    let (mut compared, mut functions, mut epilogs, mut osr) = (0, 0, 0, 0);
    for (&start, (size, name)) in &methods {
        let v = common::cdac_json(&["unwind", "--json", "--dump", &c, &format!("{start:#x}")]);
        let a = &v["arm64"];
        assert_eq!(a["form"], "xdata", "{what}: {name}: {v:#}");
        let begin = common::hex(&v["begin"]);
        let length = a["function_length"].as_u64().expect("length");
        assert_eq!(
            begin, start,
            "{what}: {name}: the method's first RUNTIME_FUNCTION"
        );
        assert!(
            length <= *size,
            "{what}: {name}: {length:#x} of {size:#x} bytes"
        );
        let mut check = |at: u64, mut ours: Vec<String>, part: &str| {
            // An OSR method's first code allocates the Tier0 frame it runs on: no
            // instruction of its own.
            if ours.first().is_some_and(|i| i.ends_with(OSR_FRAME_NOTE)) {
                ours.remove(0);
                osr += 1;
            }
            // .NET 11: that code's instruction reloads the Tier0 frame's FP and LR.
            if let Some(first) = ours.first_mut() {
                if let Some(ins) = first.strip_suffix(OSR_RELOAD_NOTE) {
                    *first = ins.to_string();
                    osr += 1;
                }
            }
            let bytes = rt
                .target()
                .read_bytes(at, ours.len() * 4)
                .expect("the code is in the core");
            let theirs = disassemble(&bytes);
            assert_eq!(
                theirs.len(),
                ours.len(),
                "{what}: {name} {part}: {theirs:?}"
            );
            for (o, t) in ours.iter().zip(&theirs) {
                if o == "nop" {
                    continue;
                }
                if o == EPILOG_END {
                    let branch = t == "ret" || t.starts_with("br ") || t.starts_with("b ");
                    assert!(branch, "{what}: {name} {part}: ends with {t}");
                    compared += 1;
                    continue;
                }
                assert!(
                    same_instruction(o, t),
                    "{what}: {name} {part}: ours {ours:?}, the code {theirs:?}"
                );
                compared += 1;
            }
        };
        let prolog: Vec<String> = a["prolog"]
            .as_array()
            .expect("prolog")
            .iter()
            .map(|i| i.as_str().expect("text").to_string())
            .collect();
        check(begin, prolog, "prolog");
        for e in a["epilogs"].as_array().expect("epilogs") {
            let ins: Vec<String> = e["instructions"]
                .as_array()
                .expect("instructions")
                .iter()
                .map(|i| i.as_str().expect("text").to_string())
                .collect();
            check(begin + e["start"].as_u64().expect("start"), ins, "epilog");
            epilogs += 1;
        }
        functions += 1;
    }
    assert!(
        functions >= 30 && epilogs >= 30,
        "{what}: {functions} functions"
    );
    eprintln!(
        "{what}: unwind data of {functions} functions ({epilogs} epilogs, {osr} OSR) read as \
         their code: {compared} instructions"
    );
    compared
}

#[test]
fn net11_arm64_live_and_qemu_core() {
    live_and_qemu_core(Variant::Net11Arm64);
}

#[test]
fn net10_arm64_live_and_qemu_core() {
    live_and_qemu_core(Variant::Net10Arm64);
}

#[test]
fn net9_arm64_live_and_qemu_core() {
    live_and_qemu_core(Variant::Net9Arm64);
}

fn live_and_qemu_core(variant: Variant) {
    let _qemu = common::qemu_lock();
    let tb = start_testbed(variant, &[]);
    let name = variant.name();
    let live_what = format!("{name} live");
    let core_what = format!("{name} qemu core");
    let pid = tb.pid.to_string();
    let live = ["--pid", pid.as_str()];

    let info = common::cdac_json(&[&["info", "--json"], &live[..]].concat());
    assert_eq!(info["architecture"], "arm64", "{info:#}");

    // Live: the perf map as it was before the read, every method of it listed.
    let before = tb.dir.join("live.perfmap");
    std::fs::copy(tb.perf_map_for(None), &before).expect("copy the perf map");
    let ours_live = methods(&live);
    let n_live = perf_map_methods_listed(&before, &ours_live, "live");
    let mds: BTreeSet<u64> = ours_live.values().map(|(_, _, md)| *md).collect();
    let wanted = manifest_method_descs(&tb);
    let missing: Vec<String> = wanted
        .iter()
        .filter(|md| !mds.contains(md))
        .map(|md| format!("{md:#x}"))
        .collect();
    assert!(
        missing.is_empty(),
        "manifest MethodDescs with no code listed: {missing:?}"
    );
    // Live: the chains of tasks read from memory; stacks say why they cannot be walked.
    let live_target = vec!["--pid".to_string(), pid.clone()];
    crate::async_chains::facts_hold_on(&tb, &live_target, &live_what);
    let out = std::process::Command::new(common::cdac_exe())
        .args(["stacks", "--json", "--pid", pid.as_str()])
        .output()
        .expect("run cdac stacks");
    assert_eq!(
        out.status.code(),
        Some(1),
        "no stack is an answer in part: {out:?}"
    );
    let stacks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stacks JSON");
    let threads = stacks["threads"].as_array().expect("threads");
    assert!(threads.len() > 10, "{stacks:#}");
    for t in threads {
        assert!(t["frames"].is_null(), "{t:#}");
        assert!(
            t["note"]
                .as_str()
                .is_some_and(|n| n.contains("emulator (qemu-user)")),
            "{t:#}"
        );
    }
    precodes_name_their_methods(&tb, &live_what);
    let modules_live = live_native_modules(tb.pid, &format!("{name}/"));
    assert!(
        modules_live
            .iter()
            .any(|(_, p)| p.ends_with("/libcoreclr.so")),
        "{modules_live:?}"
    );

    // The core.
    let core = tb.qemu_core();
    let c = core.display().to_string();
    let dump = ["--dump", c.as_str()];
    let info = common::cdac_json(&[&["info", "--json"], &dump[..]].concat());
    assert_eq!(info["architecture"], "arm64", "{info:#}");
    assert_eq!(
        info["runtime_version"], tb.manifest["runtime_version"],
        "{info:#}"
    );
    assert_eq!(
        info["runtime_module"]["path"].as_str(),
        tb.manifest["libcoreclr"].as_str(),
        "the runtime module is named by its path from the loader's list"
    );
    // The core's images, found by their headers and named from the loader's list, are the
    // runtime's libraries the live process mapped (the system libraries' headers are not
    // in qemu's core).
    let opened = cdac::memory::core_dump::CoreDump::open(&core).expect("open the core");
    let in_core: BTreeSet<(u64, String)> =
        cdac::memory::elf_image::modules(cdac::memory::MemorySource::mapped_files(&opened))
            .into_iter()
            .filter(|m| m.path.to_string_lossy().ends_with(".so"))
            .map(|m| (m.base, m.path.display().to_string()))
            .collect();
    assert_eq!(in_core, modules_live, "native modules: core vs live maps");
    let ours_core = methods(&dump);
    let n_core = perf_map_methods_listed(&tb.dir.join("qemu.perfmap"), &ours_core, "core");
    // What the live read listed is still there (code is not freed: nothing is unloaded).
    let lost: Vec<&u64> = ours_live
        .iter()
        .filter(|(start, m)| ours_core.get(start) != Some(m))
        .map(|(s, _)| s)
        .take(10)
        .collect();
    assert!(
        lost.is_empty(),
        "listed live, not the same in the core: {lost:x?}"
    );
    unwind_describes_the_code(&core, &core_what);
    pinvoke_import_precodes(&core, &tb, &core_what);
    // Stacks from qemu's registers: every parked thread's frames of ours, in order, funclets
    // tied to their methods, the native frames of read(2) below the P/Invoke (libc from
    // the cross sysroot: qemu's core has none of its text).
    let stacks = crate::stacks::cdac_stacks(&["--dump", c.as_str()]);
    crate::stacks::check_parked_threads(&tb, &stacks, &core_what);
    let threads = stacks["threads"].as_array().expect("threads");
    let complete = threads
        .iter()
        .filter(|t| t["stack_end"]["reason"] == "complete")
        .count();
    assert_eq!(
        complete,
        threads.len(),
        "every stack ends at its outermost frame"
    );
    // The chains and locks that need stacks, from the core.
    let core_target = vec!["--dump".to_string(), c.clone()];
    crate::async_chains::facts_hold_on(&tb, &core_target, &core_what);
    crate::locks::facts_hold_on(&tb, &core_target, &core_what);
    crate::async_chains::running_chain_on_its_thread_on(&tb, &core_target, &core_what);
    // analyze names the exceptions of the parked filter and catch threads, on their threads.
    let out = std::process::Command::new(common::cdac_exe())
        .args(["analyze", "--json", "--dump", c.as_str()])
        .output()
        .expect("run cdac analyze");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("analyze JSON");
    for kind in ["filter", "catch"] {
        let parked = tb.manifest["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["kind"] == kind)
            .expect("parked thread");
        let e = report["exceptions"]
            .as_array()
            .expect("exceptions")
            .iter()
            .find(|e| e["thread"] == parked["os_tid"])
            .unwrap_or_else(|| panic!("no exception on the {kind} thread: {report:#}"));
        assert_eq!(e["managed_id"], parked["managed_id"], "{e:#}");
        assert_eq!(
            e["exception"]["type"], "System.InvalidOperationException",
            "{e:#}"
        );
        assert!(
            e["exception"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&format!("cdac-{kind}:"))),
            "{e:#}"
        );
    }
    eprintln!(
        "{name}: {n_live} perf map methods live, {n_core} in the core; {} and {} listed; \
         {} manifest MethodDescs",
        ours_live.len(),
        ours_core.len(),
        wanted.len()
    );
}
