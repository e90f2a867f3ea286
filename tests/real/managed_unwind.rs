//! Managed x64 unwinding (`unwind::x86_64::managed`) and IL offsets (`contracts::debug_info`)
//! on the real C# testbed.

use crate::common;

use cdac::contracts::debug_info::{
    il_offset, native_map, BoundsEncoding, DebugInfoFormat, IlOffset,
};
use cdac::contracts::execution_manager::enumerate::all_code;
use cdac::contracts::execution_manager::{execution_manager, ExecutionManager, JitType};
use cdac::runtime::{OpenOptions, Runtime};
use cdac::stacks::StackWalker;
use cdac::unwind::x86_64::managed::step_managed;
use cdac::unwind::{UnwindError, X64Context};
use common::{hex, testbed_of, Variant};

fn format_of(rt: &Runtime) -> DebugInfoFormat {
    rt.contracts().debug_info().expect("the DebugInfo contract")
}

/// Every live JIT'ed method's debug info decodes, and its mappings lie in the method.
fn debug_info_of_every_jitted_method(variant: Variant) {
    let tb = testbed_of(variant);
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let format = format_of(&rt);
    let code = all_code(rt.target(), rt.descriptor()).expect("code");
    let (mut jitted, mut with_map, mut entries, mut failures) = (0, 0, 0, Vec::new());
    let (mut r2r, mut r2r_with_map) = (0, 0);
    for c in code.iter().filter(|c| c.jit_type == JitType::R2r) {
        let block = em.code_block(c.start).expect("lookup").expect("block");
        r2r += 1;
        match native_map(rt.target(), em.as_ref(), &block, &format) {
            Ok(map) => {
                r2r_with_map += usize::from(!map.is_empty());
                let inside = map
                    .iter()
                    .all(|m| u64::from(m.native_offset) <= c.size + c.cold_size);
                if !inside {
                    failures.push(format!("R2R {:#x}: {map:?}", c.start));
                }
            }
            Err(e) => failures.push(format!("R2R {:#x}: {e}", c.start)),
        }
    }
    // The neighbouring runtime's format, to show that the checks tell them apart. .NET 11's
    // is told from .NET 10's by its header: the extra source-type bit alone leaves most
    // small maps readable either way.
    let other = match format.encoding {
        BoundsEncoding::Nibble => DebugInfoFormat {
            encoding: BoundsEncoding::Packed,
            ..format
        },
        BoundsEncoding::Packed => DebugInfoFormat {
            encoding: BoundsEncoding::Nibble,
            ..format
        },
        BoundsEncoding::PackedAsync => DebugInfoFormat {
            encoding: BoundsEncoding::Packed,
            chunked_header: false,
            ..format
        },
    };
    let mut other_accepted = 0;
    for c in code.iter().filter(|c| c.jit_type == JitType::Jit) {
        jitted += 1;
        let block = em.code_block(c.start).expect("lookup").expect("block");
        if native_map(rt.target(), em.as_ref(), &block, &other).is_ok_and(|m| !m.is_empty()) {
            other_accepted += 1;
        }
        match native_map(rt.target(), em.as_ref(), &block, &format) {
            Ok(map) => {
                if !map.is_empty() {
                    with_map += 1;
                }
                entries += map.len();
                let sorted = map
                    .windows(2)
                    .all(|w| w[0].native_offset <= w[1].native_offset);
                let inside = map.iter().all(|m| u64::from(m.native_offset) <= c.size);
                if !sorted || !inside {
                    failures.push(format!("{:#x}: {map:?}", c.start));
                }
            }
            Err(e) => failures.push(format!("{:#x}: {e}", c.start)),
        }
    }
    eprintln!(
        "{}: {jitted} JIT'ed methods, {with_map} with a map, {entries} mappings; \
         {r2r} ReadyToRun methods, {r2r_with_map} with a map; {} failures; format {format:?}",
        variant.name(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{}: {:#?}",
        variant.name(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        jitted > 100 && with_map * 10 >= jitted * 9,
        "{jitted} {with_map}"
    );
    eprintln!(
        "{}: the other encoding ({:?}) accepted {other_accepted} of {with_map} maps",
        variant.name(),
        other.encoding
    );
    assert!(
        other_accepted * 4 < with_map,
        "{other_accepted} of {with_map}"
    );
}

#[test]
fn debug_info_net10() {
    debug_info_of_every_jitted_method(Variant::Net10);
}

#[test]
fn debug_info_net11() {
    debug_info_of_every_jitted_method(Variant::Net11);
}

#[test]
fn debug_info_net9() {
    debug_info_of_every_jitted_method(Variant::Net9);
}

#[test]
fn debug_info_net8() {
    debug_info_of_every_jitted_method(Variant::Net8);
}

/// One managed frame met by a walk.
#[derive(Debug)]
struct Frame {
    ip: u64,
    method_desc: u64,
    il: Option<IlOffset>,
}

/// Walks from `ctx` with `step_managed` alone while the IP is in managed code. Returns the
/// frames met and the error that stopped the walk, if one did.
fn walk(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    format: &DebugInfoFormat,
    mut ctx: X64Context,
) -> (Vec<Frame>, Option<UnwindError>) {
    let mut frames = Vec::new();
    for depth in 0..64 {
        let Ok(Some(block)) = em.code_block(ctx.rip) else {
            break;
        };
        let il = il_offset(rt.target(), em, &block, format, depth > 0)
            .expect("debug info decodes")
            .map(|m| m.il_offset);
        frames.push(Frame {
            ip: ctx.rip,
            method_desc: block.method_desc,
            il,
        });
        match step_managed(rt.target(), em, &block, &ctx, rt.target()) {
            Ok(next) => ctx = next,
            Err(e) => return (frames, Some(e)),
        }
    }
    (frames, None)
}

/// The IL size of `Namespace.Type::Method` in the testbed's own assembly, from its
/// metadata (MethodDef RVA, then the method body's tiny or fat header).
fn il_size(tb: &common::Testbed, name: &str) -> u32 {
    use cdac::formats::ecma::pe::{metadata_from_pe, PeLayout};
    use cdac::formats::ecma::tables::TableId;
    use cdac::formats::ecma::Metadata;
    use object::read::pe::PeFile64;
    let dll = std::path::Path::new(tb.manifest["app_dir"].as_str().expect("app_dir"))
        .join("Cdac.Testbed.dll");
    let image = std::fs::read(&dll).expect("testbed assembly");
    let md = Metadata::parse(metadata_from_pe(&image, PeLayout::File).expect("metadata"))
        .expect("parse metadata");
    let (ty, method) = name.split_once("::").expect("Type::Method");
    let type_rid = md.find_type(ty).unwrap_or_else(|| panic!("{ty} not found"));
    let rid = md
        .type_methods(type_rid)
        .expect("methods")
        .into_iter()
        .find(|&r| md.method_name(r).expect("name") == method)
        .unwrap_or_else(|| panic!("{name} not found"));
    let rva = md.tables.row(TableId::MethodDef, rid).expect("row").raw(0);
    let pe = PeFile64::parse(&*image).expect("PE");
    let (offset, _) = pe
        .section_table()
        .pe_file_range_at(rva)
        .expect("body in a section");
    let body = &image[offset as usize..];
    match body[0] & 3 {
        2 => u32::from(body[0] >> 2),
        3 => u32::from_le_bytes([body[4], body[5], body[6], body[7]]),
        _ => panic!("{name}: bad method header {:#x}", body[0]),
    }
}

/// On a dump of the .NET 10 testbed: the spinner's managed frames are its chain, and no
/// other thread's walk fails while in managed code.
fn spinner_chain_in(kind: &str) {
    let tb = testbed_of(Variant::Net10);
    let path = tb.dump(kind);
    let rt = Runtime::open_dump(&path, &OpenOptions::default()).expect("open dump");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let format = format_of(&rt);
    let spin = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "spin")
        .expect("spin thread");
    let tid = spin["os_tid"].as_i64().expect("os_tid") as i32;
    let want: Vec<u64> = spin["chain_method_descs"]
        .as_array()
        .expect("chain_method_descs")
        .iter()
        .map(hex)
        .collect();
    let threads = rt.target().source().threads().expect("threads");
    let mut managed_threads = 0;
    let mut spinner = None;
    for t in &threads {
        let Some(ctx) = t.context.and_then(|c| c.as_x64().copied()) else {
            continue;
        };
        if em.code_block(ctx.rip).ok().flatten().is_none() {
            continue;
        }
        managed_threads += 1;
        let (frames, err) = walk(&rt, em.as_ref(), &format, ctx);
        assert!(
            err.is_none(),
            "{kind}: thread {} failed after {frames:x?}: {err:?}",
            t.tid
        );
        if t.tid == tid {
            spinner = Some(frames);
        }
    }
    let frames = spinner.unwrap_or_else(|| panic!("{kind}: spinner {tid} not in managed code"));
    let met: Vec<u64> = frames.iter().map(|f| f.method_desc).collect();
    // OSR: the looping method may have a second frame (its OSR version over its tier-0
    // one). After the chain come the framework's thread-start frames (managed too).
    let mut expected = want.clone();
    if met.get(1) == Some(&want[0]) {
        expected.insert(0, want[0]);
    }
    assert!(met.len() >= expected.len(), "{kind}: {frames:x?}");
    assert_eq!(met[..expected.len()], expected[..], "{kind}: {frames:x?}");
    assert!(
        met[expected.len()..].iter().all(|md| !want.contains(md)),
        "{kind}: {frames:x?}"
    );
    eprintln!("{kind}: spinner frames {frames:x?}; {managed_threads} threads in managed code");
    // Every caller frame's IP is a return address: it follows a call.
    for f in &frames[1..] {
        assert!(after_call(&rt, f.ip), "{kind}: {f:x?} follows no call");
    }
    // IL offsets: every frame of ours maps into its method's IL (a caller frame, at a
    // call, to a real offset).
    let names: Vec<&str> = spin["expected_chain"]
        .as_array()
        .expect("expected_chain")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    let mut ils = Vec::new();
    for (i, f) in frames[..expected.len()].iter().enumerate() {
        let name = names[want
            .iter()
            .position(|&md| md == f.method_desc)
            .expect("ours")];
        let size = il_size(tb, name);
        let il =
            f.il.unwrap_or_else(|| panic!("{kind}: {name} has no mapping"));
        match il {
            IlOffset::Il(n) => assert!(n < size, "{kind}: {name} at IL {n:#x} of {size:#x}"),
            other => assert!(i == 0, "{kind}: caller {name} maps to {other:?}"),
        }
        ils.push((name, il, size));
    }
    eprintln!("{kind}: IL offsets (offset, IL size) {ils:?}");
}

#[test]
fn spinner_chain_gcore() {
    spinner_chain_in("gcore");
}

#[test]
fn spinner_chain_createdump_full() {
    spinner_chain_in("full");
}

/// Whether the bytes before `ra` end a call instruction (`call rel32`, or `call r/m64` in
/// its register, `[reg]`, `[reg+disp8]`, `[reg+disp32]` and `[rip+disp32]` forms).
fn after_call(rt: &Runtime, ra: u64) -> bool {
    let Some(Ok(b)) = ra.checked_sub(7).map(|a| rt.target().read_bytes(a, 7)) else {
        return false;
    };
    let at = |back: usize| b[7 - back];
    let modrm_call = |m: u8| m & 0x38 == 0x10;
    at(5) == 0xe8
        || (at(2) == 0xff && modrm_call(at(1)) && at(1) >> 6 == 3)
        || (at(2) == 0xff
            && modrm_call(at(1))
            && at(1) >> 6 == 0
            && at(1) & 7 != 4
            && at(1) & 7 != 5)
        || (at(3) == 0xff && modrm_call(at(2)) && at(2) >> 6 == 1 && at(2) & 7 != 4)
        || (at(4) == 0xff && modrm_call(at(3)) && at(3) >> 6 == 1 && at(3) & 7 == 4)
        || (at(6) == 0xff && modrm_call(at(5)) && (at(5) >> 6 == 2 || at(5) & 0xc7 == 5))
        || (at(7) == 0xff && modrm_call(at(6)) && at(6) >> 6 == 2 && at(6) & 7 == 4)
}

/// Walks a parked thread from its registers with the stack walker (managed frames by
/// `step_managed`, native ones by their CFI) and returns the managed frames met, checking
/// that every managed caller's return address follows a call.
fn walk_parked(rt: &Runtime, ctx: X64Context) -> Result<Vec<(u64, u64)>, String> {
    let walker = StackWalker::new(rt).map_err(|e| e.to_string())?;
    let stack = walker.walk(ctx, rt.target(), &[]);
    let managed: Vec<(u64, u64)> = stack
        .frames
        .iter()
        .filter_map(|f| Some((f.ip, f.method_desc()?)))
        .collect();
    for (i, f) in stack.frames.iter().enumerate().skip(1) {
        if f.method_desc().is_some() && !after_call(rt, f.ip) {
            return Err(format!("frame {i} at {:#x} follows no call", f.ip));
        }
    }
    Ok(managed)
}

/// Every parked thread of a testbed (gcore dump): walked from its registers, our managed
/// frames are its chain (a funclet's method counted once), and every managed return
/// address follows a call.
fn parked_threads_through_native_frames(variant: Variant) {
    let tb = testbed_of(variant);
    let rt = Runtime::open_dump(tb.dump("gcore"), &OpenOptions::default()).expect("open dump");
    let threads = rt.target().source().threads().expect("threads");
    let mut checked = Vec::new();
    for parked in tb.manifest["threads"].as_array().expect("threads") {
        let kind = parked["kind"].as_str().expect("kind");
        let tid = parked["os_tid"].as_i64().expect("os_tid") as i32;
        let names: Vec<&str> = parked["expected_chain"]
            .as_array()
            .expect("chain")
            .iter()
            .map(|v| v.as_str().expect("name"))
            .collect();
        let mds: Vec<u64> = parked["chain_method_descs"]
            .as_array()
            .expect("mds")
            .iter()
            .map(hex)
            .collect();
        let physical: Vec<&str> = parked["physical_frames"]
            .as_array()
            .expect("physical")
            .iter()
            .map(|v| v.as_str().expect("name"))
            .collect();
        // Our methods that have frames, in chain order (an inlined P/Invoke has none).
        let want: Vec<u64> = names
            .iter()
            .zip(&mds)
            .filter(|(n, _)| physical.contains(n))
            .map(|(_, &md)| md)
            .collect();
        let ctx = threads
            .iter()
            .find(|t| t.tid == tid)
            .and_then(|t| t.context.and_then(|c| c.as_x64().copied()))
            .unwrap_or_else(|| panic!("{kind}: thread {tid} has no registers"));
        let frames = walk_parked(&rt, ctx).unwrap_or_else(|e| panic!("{kind}: {e}"));
        // Ours, consecutive repeats (a funclet, then its method; OSR) counted once.
        let mut ours: Vec<u64> = frames
            .iter()
            .map(|&(_, md)| md)
            .filter(|md| mds.contains(md))
            .collect();
        ours.dedup();
        assert_eq!(ours, want, "{} {kind}: frames {frames:x?}", variant.name());
        checked.push((kind.to_string(), frames.len()));
    }
    eprintln!(
        "{}: parked threads walked (managed frames each): {checked:?}",
        variant.name()
    );
    assert!(checked.len() >= 8, "{checked:?}");
}

#[test]
fn parked_threads_net10() {
    parked_threads_through_native_frames(Variant::Net10);
}

#[test]
fn parked_threads_net11() {
    parked_threads_through_native_frames(Variant::Net11);
}

#[test]
fn parked_threads_net9() {
    parked_threads_through_native_frames(Variant::Net9);
}

#[test]
fn parked_threads_net8() {
    parked_threads_through_native_frames(Variant::Net8);
}

/// A stack where every slot holds a value made from its address: every read succeeds.
struct FakeStack;

impl cdac::unwind::StackMemory for FakeStack {
    fn read_u64(&self, addr: u64) -> Result<u64, cdac::memory::ReadError> {
        Ok(addr.wrapping_mul(0x9e37_79b9).rotate_left(17) | 1)
    }
}

/// The unwind info of every JIT'ed and ReadyToRun method of the live .NET 10 testbed is
/// accepted: at the first instruction only the return address is popped, and right after
/// the prolog the step moves up the stack.
#[test]
fn unwind_info_of_every_method() {
    use cdac::unwind::x86_64::managed::{virtual_unwind, RuntimeFunction};
    use cdac::unwind::StackMemory;
    let tb = testbed_of(Variant::Net10);
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let t = rt.target();
    let code = all_code(t, rt.descriptor()).expect("code");
    let (mut checked, mut osr, mut failures) = (0, 0, Vec::new());
    let (rsp, rbp) = (0x7000_0000u64, 0x7000_1000u64);
    for c in &code {
        let block = em.code_block(c.start).expect("lookup").expect("block");
        let Some(rf) = em.unwind_info(&block).expect("unwind info") else {
            failures.push(format!("{:#x}: no RUNTIME_FUNCTION", c.start));
            continue;
        };
        let base = em.unwind_info_base_address(&block);
        let func = RuntimeFunction::read(t, base, rf).expect("RUNTIME_FUNCTION");
        assert_eq!(func.begin, c.start, "the method's entry starts it");
        let prolog = u64::from(t.read_u8(func.unwind_info + 1).expect("prolog size"));
        checked += 1;
        // OSR methods describe the tier-0 frame they sit on with codes at offset 0: those
        // apply at the entry too (the step then leaves both frames).
        let count = usize::from(t.read_u8(func.unwind_info + 2).expect("count"));
        let slots = t
            .read_bytes(func.unwind_info + 4, 2 * count)
            .expect("codes");
        let at_zero = slots.chunks(2).any(|s| s[0] == 0);
        osr += usize::from(at_zero);
        let at_entry = X64Context::new(c.start, rsp, Some(rbp));
        match virtual_unwind(t, base, rf, &at_entry, &FakeStack, &|_| false) {
            Ok(out) if out.rip == FakeStack.read_u64(rsp).unwrap() && out.rsp() == rsp + 8 => {}
            Ok(out) if at_zero && out.rsp() > rsp + 8 => {}
            other => failures.push(format!(
                "{:#x} ({:?}, prolog {prolog}) at entry: {other:x?}; code {:02x?} info {:02x?}",
                c.start,
                c.jit_type,
                t.read_bytes(c.start, 16),
                t.read_bytes(func.unwind_info, 16)
            )),
        }
        if prolog < c.size {
            let body = X64Context::new(c.start + prolog, rsp, Some(rbp));
            match virtual_unwind(t, base, rf, &body, &FakeStack, &|_| false) {
                Ok(out) if out.rsp() > rsp.min(rbp - 0x1000) => {}
                other => failures.push(format!("{:#x} after the prolog: {other:x?}", c.start)),
            }
        }
    }
    eprintln!(
        "unwind info of {checked} methods checked ({osr} with codes at offset 0: OSR), {} failures",
        failures.len()
    );
    assert!(checked > 1000, "{checked}");
    assert!(
        failures.is_empty(),
        "{:#?}",
        &failures[..failures.len().min(10)]
    );
}

/// Real epilogs: in every JIT'ed method of the live .NET 10 testbed, the pops of the
/// registers its prolog pushed (in reverse order) followed by `ret`, and the stack
/// adjustment before them when there is one, are emulated: unwinding from each of those
/// instructions restores the pushed registers from where the pops read them.
#[test]
fn real_epilogs_are_emulated() {
    use cdac::unwind::x86_64::managed::{virtual_unwind, RuntimeFunction};
    use cdac::unwind::StackMemory;
    let tb = testbed_of(Variant::Net10);
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let t = rt.target();
    let code = all_code(t, rt.descriptor()).expect("code");
    let (mut with_pushes, mut found, mut checked_ips, mut failures) = (0, 0, 0, Vec::new());
    let mut leas = 0;
    for c in code.iter().filter(|c| c.jit_type == JitType::Jit) {
        let block = em.code_block(c.start).expect("lookup").expect("block");
        let Some(rf) = em.unwind_info(&block).expect("unwind info") else {
            continue;
        };
        let base = em.unwind_info_base_address(&block);
        let func = RuntimeFunction::read(t, base, rf).expect("RUNTIME_FUNCTION");
        let count = usize::from(t.read_u8(func.unwind_info + 2).expect("count"));
        let slots = t
            .read_bytes(func.unwind_info + 4, 2 * count)
            .expect("codes");
        // Pushed registers, last pushed first (the codes' order).
        let mut pushed = Vec::new();
        let mut other_ops = false;
        let mut i = 0;
        while i < count {
            let (op, info) = (slots[2 * i + 1] & 0xf, slots[2 * i + 1] >> 4);
            match op {
                0 => pushed.push(info),
                2 | 3 => {}
                1 => i += 1 + usize::from(info == 1),
                4 | 8 => {
                    other_ops = true;
                    i += 1
                }
                _ => other_ops = true,
            }
            i += 1;
        }
        if pushed.is_empty() || other_ops {
            continue;
        }
        with_pushes += 1;
        let mut pattern = Vec::new();
        for &r in &pushed {
            if r >= 8 {
                pattern.push(0x41);
            }
            pattern.push(0x58 + (r & 7));
        }
        pattern.push(0xc3);
        let len = (func.end - func.begin) as usize;
        let Ok(bytes) = t.read_bytes(func.begin, len) else {
            continue;
        };
        let starts: Vec<usize> = bytes
            .windows(pattern.len())
            .enumerate()
            .filter(|(_, w)| *w == &pattern[..])
            .map(|(k, _)| k)
            .collect();
        if starts.is_empty() {
            continue;
        }
        found += 1;
        let rsp = 0x7000_0000u64;
        for k in starts {
            // At the first pop; and at the stack adjustment before it, when present.
            let mut at = vec![(k, rsp)];
            if k >= 4 && bytes[k - 4..k - 1] == [0x48, 0x83, 0xc4] {
                at.push((k - 4, rsp - u64::from(bytes[k - 1])));
            }
            if k >= 7 && bytes[k - 7..k - 4] == [0x48, 0x81, 0xc4] {
                let n =
                    u32::from_le_bytes([bytes[k - 4], bytes[k - 3], bytes[k - 2], bytes[k - 1]]);
                at.push((k - 7, rsp - u64::from(n)));
            }
            let mut at: Vec<(usize, u64, u64)> =
                at.into_iter().map(|(o, sp)| (o, sp, 0x1234)).collect();
            // lea rsp, [rbp+disp8]: rbp locates the pops, rsp is anywhere below.
            if k >= 4 && bytes[k - 4..k - 1] == [0x48, 0x8d, 0x65] {
                let disp = i64::from(bytes[k - 1] as i8);
                at.push((k - 4, rsp - 0x400, rsp.wrapping_add_signed(-disp)));
                leas += 1;
            }
            for (offset, sp, rbp) in at {
                checked_ips += 1;
                let ctx = X64Context::new(func.begin + offset as u64, sp, Some(rbp));
                let out = virtual_unwind(t, base, rf, &ctx, &FakeStack, &|_| false);
                let ok = out.as_ref().is_ok_and(|o| {
                    pushed.iter().enumerate().all(|(j, &r)| {
                        o.regs[usize::from(r)] == FakeStack.read_u64(rsp + 8 * j as u64).ok()
                    }) && o.rsp() == rsp + 8 * pushed.len() as u64 + 8
                        && o.rip == FakeStack.read_u64(rsp + 8 * pushed.len() as u64).unwrap()
                });
                if !ok {
                    failures.push(format!("{:#x}+{offset:#x}: {out:x?}", func.begin));
                }
            }
        }
    }
    eprintln!(
        "{with_pushes} methods push registers (and use only pushes, allocations, a frame \
         register); {found} have a pops-then-ret epilog; {checked_ips} epilog IPs unwound ({leas} at lea rsp, [rbp+d]); {} failures",
        failures.len()
    );
    assert!(found * 10 >= with_pushes * 8, "{found} of {with_pushes}");
    assert!(
        failures.is_empty(),
        "{:#?}",
        &failures[..failures.len().min(10)]
    );
}
