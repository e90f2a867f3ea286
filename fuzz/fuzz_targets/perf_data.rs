//! The perf.data rewriter (`formats::perf_data::plan_rewrite`): any bytes as a recording,
//! with and without images. A plan's patches lie inside the input, in order, never
//! overlapping, and keep its length; the patched file parses to the same records and needs
//! no further rewrite.
#![no_main]

use cdac::formats::perf_data::{patched_chunks, plan_rewrite, RewriteOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for images in [false, true] {
        let options = RewriteOptions { images };
        let Ok(plan) = plan_rewrite(data, &options) else {
            continue;
        };
        let mut end = 0u64;
        for p in &plan.patches {
            assert!(p.offset >= end, "patches overlap or are out of order");
            end = p.offset + p.bytes.len() as u64;
            assert!(end <= data.len() as u64, "a patch runs past the input");
        }
        let out: Vec<u8> = patched_chunks(data, &plan.patches).concat();
        assert_eq!(out.len(), data.len());
        let again = plan_rewrite(&out, &options).expect("the patched file parses");
        assert_eq!(again.records, plan.records);
        assert_eq!(again.mappings, plan.mappings);
        assert!(again.patches.is_empty(), "a second rewrite found more to do");
        assert!(plan.rewritten() <= plan.mappings);
    }
});
