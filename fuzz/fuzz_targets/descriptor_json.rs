//! The compact JSON data descriptor: `descriptor::json::parse`, then merging it into a
//! `DataDescriptor` and reading every type, field and global through the typed view.
#![no_main]

use cdac::descriptor::{json, DataDescriptor, DescriptorError};
use cdac_fuzz::{layout, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let layout = layout(input.u8());
    let slots = usize::from(input.u8() % 8);
    let pointer_data: Vec<u64> = (0..slots).map(|_| input.u64()).collect();
    let text = input.rest();
    let Ok(physical) = json::parse("fuzz", text) else {
        return;
    };
    let mut d = DataDescriptor::new(layout);
    if d.merge("fuzz", &physical, &pointer_data).is_err() {
        return;
    }
    for (name, ty) in d.types() {
        assert_eq!(d.ty(name).ok().map(|t| t.name()), Some(ty.name()));
        let _ = ty.size();
        for (field, f) in ty.fields() {
            assert_eq!(ty.offset(field).ok(), Some(u64::from(f.offset)));
        }
    }
    for (name, g) in d.globals() {
        let _ = (g.value(), g.value_signed(), g.string(), g.text());
        assert!(d.global(name).is_ok());
        if let Some(i) = g.pointer_data_index() {
            assert_eq!(g.value().ok(), pointer_data.get(i as usize).copied());
        }
    }
    for v in d.contracts().values() {
        let _ = v.coreclr_number();
    }
    // Parts never override one another: merging the same part again must fail as soon as it
    // names anything, and leave the descriptor as it was.
    let before = d.clone();
    let again = d.merge("fuzz-again", &physical, &pointer_data);
    let names_something = !physical.types.is_empty()
        || !physical.globals.is_empty()
        || !physical.contracts.is_empty();
    if names_something {
        assert!(
            matches!(again, Err(DescriptorError::Duplicate { .. })),
            "{again:?}"
        );
        assert_eq!(d, before);
    }
});
