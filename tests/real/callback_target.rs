//! A target read through a host's callback (`CallbackSource`) answers as the target it
//! reads: the .NET 10 testbed's full dump, read through a callback over `CoreDump`, gives
//! the same code blocks as the dump opened directly; a callback that refuses reads gives
//! typed errors.

use crate::common;

use std::sync::Arc;

use cdac::contracts::execution_manager::execution_manager;
use cdac::contracts::ContractError;
use cdac::memory::callback::CallbackSource;
use cdac::memory::core_dump::CoreDump;
use cdac::memory::{MemorySource, ReadError, TargetKind};
use cdac::runtime::{OpenOptions, Runtime};
use common::{perf_map, testbed_of, Variant};

/// A callback source over a core dump, refusing reads that touch `[hole_start, hole_end)`.
fn host_over(core: Arc<CoreDump>, hole: Option<(u64, u64)>) -> CallbackSource {
    let files = core.mapped_files().to_vec();
    let threads = core.threads().expect("threads of a core");
    let layout = core.native_layout();
    let source = CallbackSource::new(
        move |addr, buf: &mut [u8]| {
            if let Some((start, end)) = hole {
                let read_end = addr.saturating_add(buf.len() as u64);
                if addr < end && read_end > start {
                    return false;
                }
            }
            core.read_exact(addr, buf).is_ok()
        },
        files,
        threads,
    );
    match layout {
        Some(layout) => source.with_layout(layout),
        None => source,
    }
}

#[test]
fn callback_over_a_dump_finds_the_same_code_blocks() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let direct = Runtime::open_dump(&dump, &OpenOptions::default()).expect("open dump");
    let core = Arc::new(CoreDump::open(&dump).expect("core"));
    let hosted =
        Runtime::open_host(host_over(core, None), &OpenOptions::default()).expect("open host");
    assert_eq!(hosted.target().source().kind(), TargetKind::Host);
    assert_eq!(hosted.module().base, direct.module().base);

    let em_direct = execution_manager(direct.target(), direct.descriptor()).expect("em");
    let em_hosted = execution_manager(hosted.target(), hosted.descriptor()).expect("em");
    let methods: Vec<_> = perf_map(&tb.perf_map_for(Some("full")))
        .into_iter()
        .filter(|(_, size, name)| *size > 0 && !name.starts_with("stub"))
        .collect();
    assert!(methods.len() > 100, "{} perf-map methods", methods.len());
    let mut found = 0;
    for (start, size, name) in &methods {
        for ip in [*start, start + size - 1] {
            let want = em_direct.code_block(ip).map_err(|e| e.to_string());
            let got = em_hosted.code_block(ip).map_err(|e| e.to_string());
            assert_eq!(got, want, "{name} at {ip:#x}");
            if matches!(want, Ok(Some(_))) {
                found += 1;
            }
        }
    }
    assert!(
        found >= methods.len(),
        "{found} code blocks for {} methods",
        methods.len()
    );
}

#[test]
fn a_refusing_callback_gives_read_errors() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let direct = Runtime::open_dump(&dump, &OpenOptions::default()).expect("open dump");
    let core = Arc::new(CoreDump::open(&dump).expect("core"));

    // The host cannot read the runtime module at all: opening fails with an error.
    let module = direct.module();
    let blind = host_over(core.clone(), Some((module.base, module.end)));
    let err = Runtime::open_host(blind, &OpenOptions::default()).expect_err("no runtime bytes");
    assert!(!err.to_string().is_empty());

    // The host refuses the page holding one method's code (and its code header): the
    // lookup fails with the host's read error, not a panic.
    let (start, _, name) = perf_map(&tb.perf_map_for(Some("full")))
        .into_iter()
        .find(|(_, size, n)| *size > 0 && !n.starts_with("stub"))
        .expect("a method");
    let page = start & !0xfff;
    let holed = host_over(core, Some((page, page + 0x1000)));
    let mut buf = [0u8; 8];
    let read = holed.read_exact(start, &mut buf).expect_err("refused");
    assert!(
        matches!(read, ReadError::HostReadFailed { addr, .. } if addr >= page && addr <= start),
        "{read:?}"
    );
    let rt = Runtime::open_host(holed, &OpenOptions::default()).expect("open host");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let answer = em.code_block(start);
    assert!(
        matches!(
            answer,
            Err(ContractError::Read(ReadError::HostReadFailed { .. }))
        ),
        "{name} at {start:#x} with its page refused: {answer:?}"
    );
}
