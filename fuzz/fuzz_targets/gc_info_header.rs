//! GC info headers (`contracts::gc_info::header`) of every version and architecture, from
//! input bytes in target memory.
#![no_main]

use cdac::contracts::gc_info::{code_length, decode_header, r2r_gc_info_version, GcInfoArch};
use cdac_fuzz::{layout, memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let b = input.u8();
    let arch = GcInfoArch::ALL[usize::from(b) % GcInfoArch::ALL.len()];
    let version = u32::from(input.u8() % 6);
    let layout = layout(input.u8());
    let (major, minor) = (input.u16(), input.u16());
    let _ = r2r_gc_info_version(major, minor);
    let target = memory(layout, input.rest(), false);
    let header = decode_header(&target, BASE, version, arch);
    let length = code_length(&target, BASE, version, arch);
    if let Ok(h) = &header {
        assert_eq!(h.version, version);
        assert_eq!(h.arch, arch);
        // The code length alone reads a prefix of what the header reads.
        assert_eq!(length.as_ref().ok(), Some(&h.code_length));
        let _ = (
            h.wants_report_only_leaf_or_has_tailcalls(),
            h.generics_inst_context(),
            h.is_vararg(),
        );
    }
});
