//! The sampling profiler's record parser (`process::perf_sampler::parse_ring_bytes`): any
//! bytes as a ring buffer's new data. Every sample it returns has a stack copy no larger
//! than the record that carried it.
#![no_main]

use cdac::process::perf_sampler::parse_ring_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (samples, stats) = parse_ring_bytes(data);
    assert!(samples.len() as u64 <= stats.samples);
    for s in &samples {
        assert!(s.stack.bytes.len() <= data.len());
        assert_eq!(s.stack.base, s.regs.sp);
    }
});
