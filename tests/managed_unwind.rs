//! Managed x64 unwinding (`unwind::managed_x64`) and IL offsets (`contracts::debug_info`)
//! on the real C# testbed.

mod common;

use cdac::contracts::debug_info::{il_offset, native_map, DebugInfoFormat, IlOffset};
use cdac::contracts::execution_manager::enumerate::all_code;
use cdac::contracts::execution_manager::{execution_manager, ExecutionManager, JitType};
use cdac::runtime::{OpenOptions, Runtime};
use cdac::unwind::managed_x64::step_managed;
use cdac::unwind::{UnwindError, X64Context};
use common::{hex, testbed_of, Variant};

fn format_of(rt: &Runtime) -> DebugInfoFormat {
    let major = rt
        .version()
        .and_then(|v| v.product_version.split('.').next()?.parse().ok());
    DebugInfoFormat::for_runtime(rt.descriptor(), major)
}

/// Every live JIT'ed method's debug info decodes, and its mappings lie in the method.
fn debug_info_of_every_jitted_method(variant: Variant) {
    let tb = testbed_of(variant);
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let format = format_of(&rt);
    let code = all_code(rt.target(), rt.descriptor()).expect("code");
    let (mut jitted, mut with_map, mut entries, mut failures) = (0, 0, 0, Vec::new());
    for c in code.iter().filter(|c| c.jit_type == JitType::Jit) {
        jitted += 1;
        let block = em.code_block(c.start).expect("lookup").expect("block");
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
        "{}: {jitted} JIT'ed methods, {with_map} with a map, {entries} mappings, {} failures, format {format:?}",
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
}

#[test]
fn debug_info_net10() {
    debug_info_of_every_jitted_method(Variant::Net10);
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
        let Some(ctx) = t.context else { continue };
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
    // IL offsets: every caller frame is at a call, which maps to IL.
    for f in &frames[1..expected.len()] {
        let il = f.il.and_then(IlOffset::il);
        assert!(
            il.is_some_and(|n| n < 0x1000),
            "{kind}: caller frame {f:x?} has no IL offset"
        );
    }
    assert!(frames[0].il.is_some(), "{kind}: the innermost frame maps");
}

#[test]
fn spinner_chain_gcore() {
    spinner_chain_in("gcore");
}

#[test]
fn spinner_chain_createdump_full() {
    spinner_chain_in("full");
}
