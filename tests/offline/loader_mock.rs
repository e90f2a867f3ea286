//! The Loader contract's saved metadata of Reflection.Emit modules
//! (`cdac::contracts::loader::dynamic_metadata`) over memory laid out by this file, for every
//! pointer size and byte order:
//! * the .NET 9+ form: `Module.DynamicMetadata` → a `DynamicMetadata` holding its size and
//!   then the bytes inline;
//! * the .NET 8 form: → an `SBuffer` holding its size and a pointer to the bytes;
//! * nothing saved yet (null holder, zero size), no field in the descriptor, a size past
//!   the limit (typed error, nothing read), bytes that cannot be read (typed error).

use cdac::contracts::loader::dynamic_metadata;
use cdac::contracts::ContractError;
use cdac::descriptor::{json, DataDescriptor};
use cdac::limits::{Limit, Limits};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::DataLayout;

/// Where `Module.DynamicMetadata` sits in this file's module.
const MODULE_FIELD: u64 = 0x58;
/// The inline bytes' offset in the .NET 9+ holder.
const INLINE_DATA: u64 = 4;
/// The pointer's offset in the .NET 8 holder (after size, allocation and flags).
fn sbuffer_pointer(layout: DataLayout) -> u64 {
    if layout.pointer_size == 8 {
        16
    } else {
        12
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Form {
    Inline,
    SBuffer,
    /// The descriptor has the module field but neither holder type.
    NoHolderType,
    /// The descriptor has no `Module.DynamicMetadata` at all.
    NoField,
}

fn descriptor(layout: DataLayout, form: Form) -> DataDescriptor {
    let module = if form == Form::NoField {
        r#""Module": { "Flags": [0, "uint32"] }"#.to_string()
    } else {
        format!(r#""Module": {{ "DynamicMetadata": [{MODULE_FIELD}, "pointer"] }}"#)
    };
    let holder = match form {
        Form::Inline => {
            format!(r#", "DynamicMetadata": {{ "Size": [0, "uint32"], "Data": {INLINE_DATA} }}"#)
        }
        Form::SBuffer => format!(
            r#", "SBuffer": {{ "Size": [0, "uint32"], "Buffer": [{}, "pointer"] }}"#,
            sbuffer_pointer(layout)
        ),
        Form::NoHolderType | Form::NoField => String::new(),
    };
    let text = format!(r#"{{ "version": 0, "types": {{ {module}{holder} }}, "globals": {{}} }}"#);
    let physical = json::parse("loader-test", text.as_bytes()).expect("test descriptor JSON");
    let mut d = DataDescriptor::new(layout);
    d.merge("loader-test", &physical, &[0]).expect("merge");
    d
}

/// A metadata-like blob whose every byte depends on its position.
fn blob(len: usize) -> Vec<u8> {
    let mut b = b"BSJB".to_vec();
    b.extend((4..len).map(|i| (i * 7 + 3) as u8));
    b
}

/// Lays out a module whose holder is in `form` with `size` (declared) and `bytes` (present).
/// Returns the target and the module's address.
fn lay_out(
    layout: DataLayout,
    form: Form,
    size: u32,
    bytes: Option<&[u8]>,
) -> (cdac::memory::Target, u64) {
    let mut m = MemoryBuilder::new(layout);
    let holder = match form {
        Form::Inline => {
            let data = bytes.unwrap_or(&[]);
            let r = m.alloc(INLINE_DATA as usize + data.len(), 8);
            r.u32(0, size).bytes(INLINE_DATA as usize, data);
            r.at(0)
        }
        _ => {
            let data_addr = match bytes {
                Some(data) => m.alloc(data.len(), 8).bytes(0, data).at(0),
                // A pointer into nothing.
                None => 0x7ff0_0000,
            };
            let r = m.alloc(32, 8);
            r.u32(0, size)
                .u32(4, size)
                .pointer(sbuffer_pointer(layout) as usize, data_addr);
            r.at(0)
        }
    };
    let module = m
        .alloc(0x100, 8)
        .pointer(MODULE_FIELD as usize, holder)
        .at(0);
    (m.into_target(), module)
}

#[test]
fn both_forms_give_the_saved_bytes_on_every_layout() {
    for layout in DataLayout::ALL {
        for form in [Form::Inline, Form::SBuffer] {
            for len in [4usize, 281, 4096] {
                let want = blob(len);
                let (t, module) = lay_out(layout, form, len as u32, Some(&want));
                let d = descriptor(layout, form);
                let got = dynamic_metadata(&t, &d, module).expect("dynamic_metadata");
                assert_eq!(got.as_deref(), Some(&want[..]), "{layout:?} {form:?} {len}");
            }
        }
    }
}

#[test]
fn nothing_saved_is_none() {
    for layout in DataLayout::ALL {
        for form in [Form::Inline, Form::SBuffer] {
            // Zero size.
            let (t, module) = lay_out(layout, form, 0, Some(&blob(16)));
            let d = descriptor(layout, form);
            assert_eq!(dynamic_metadata(&t, &d, module).expect("zero size"), None);
            // Null holder.
            let mut m = MemoryBuilder::new(layout);
            let module = m.alloc(0x100, 8).at(0);
            let t = m.into_target();
            assert_eq!(dynamic_metadata(&t, &d, module).expect("null holder"), None);
        }
        // A descriptor that cannot locate the bytes: none, not an error.
        for form in [Form::NoHolderType, Form::NoField] {
            let (t, module) = lay_out(layout, Form::SBuffer, 16, Some(&blob(16)));
            let d = descriptor(layout, form);
            assert_eq!(
                dynamic_metadata(&t, &d, module).expect("descriptor without the holder"),
                None
            );
        }
    }
}

#[test]
fn a_size_past_the_limit_is_a_typed_error() {
    for layout in DataLayout::ALL {
        for form in [Form::Inline, Form::SBuffer] {
            let (t, module) = lay_out(layout, form, 4097, Some(&blob(16)));
            let t = t.with_limits(Limits {
                max_read_bytes: 4096,
                ..Limits::default()
            });
            let d = descriptor(layout, form);
            match dynamic_metadata(&t, &d, module) {
                Err(ContractError::LimitExceeded { limit, cap, .. }) => {
                    assert_eq!((limit, cap), (Limit::ReadSize, 4096))
                }
                other => panic!("{layout:?} {form:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn unreadable_bytes_are_a_read_error() {
    for layout in DataLayout::ALL {
        // Declared 4 KiB, 16 bytes present (inline), or a pointer into nothing (SBuffer).
        let (t, module) = lay_out(layout, Form::Inline, 4096, Some(&blob(16)));
        let d = descriptor(layout, Form::Inline);
        assert!(matches!(
            dynamic_metadata(&t, &d, module),
            Err(ContractError::Read(_))
        ));
        let (t, module) = lay_out(layout, Form::SBuffer, 64, None);
        let d = descriptor(layout, Form::SBuffer);
        assert!(matches!(
            dynamic_metadata(&t, &d, module),
            Err(ContractError::Read(_))
        ));
    }
}
