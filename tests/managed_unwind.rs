//! Managed x64 unwinding (`unwind::managed_x64`) and IL offsets (`contracts::debug_info`)
//! on the real C# testbed.

mod common;

use cdac::contracts::debug_info::{native_map, DebugInfoFormat, IlOffset};
use cdac::contracts::execution_manager::enumerate::all_code;
use cdac::contracts::execution_manager::{execution_manager, JitType};
use cdac::runtime::{OpenOptions, Runtime};
use common::{testbed_of, Variant};

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

#[allow(dead_code)]
fn _uses(_: IlOffset) {}

#[test]
fn probe_failing_blobs() {
    let tb = testbed_of(match std::env::var("V").as_deref() {
        Ok("8") => Variant::Net8,
        Ok("9") => Variant::Net9,
        _ => Variant::Net10,
    });
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let format = format_of(&rt);
    let code = all_code(rt.target(), rt.descriptor()).expect("code");
    let mut n = 0;
    for c in code.iter().filter(|c| c.jit_type == JitType::Jit) {
        let block = em.code_block(c.start).expect("lookup").expect("block");
        if let Err(e) = native_map(rt.target(), em.as_ref(), &block, &format) {
            eprintln!("{e}");
            let di = em.debug_info(&block).unwrap();
            let b = rt.target().read_bytes(di.address, 64).unwrap();
            eprintln!(
                "{:#x} size {} flag {} {:02x?}",
                c.start, c.size, di.has_flag_byte, b
            );
            n += 1;
            if n > 6 {
                break;
            }
        }
    }
    let di = rt.descriptor().ty("PatchpointInfo");
    eprintln!("PatchpointInfo {:?}", di.map(|t| t.size_if_known()));
}
