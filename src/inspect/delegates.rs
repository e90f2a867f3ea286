//! The method a delegate calls. A delegate bound to an instance (lambdas are: the compiler
//! makes them instance methods of a closure) keeps that method's entry point in
//! `_methodPtr`; one over a static method keeps a shuffle thunk there and the method's
//! entry point in `_methodPtrAux`. An entry point is a precode or the method's code.

use crate::contracts::precode_stubs::non_virtual_entry_to_method_desc;
use crate::runtime::Runtime;

use super::values::Value;
use super::FieldView;

fn pointer_field(fields: &[FieldView], name: &str) -> Option<u64> {
    fields
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| match f.value {
            Value::Int(v) => Some(v as u64),
            Value::UInt(v) | Value::Pointer(v) => Some(v),
            _ => None,
        })
        .filter(|&p| p != 0)
}

/// The MethodDesc a delegate object (its fields, as [`super::Inspector`] reads them) calls;
/// `None` when its entry points lead to no method.
pub fn delegate_method(rt: &Runtime, fields: &[FieldView]) -> Option<u64> {
    let (target, descriptor) = (rt.target(), rt.descriptor());
    let resolve = |entry: u64| {
        non_virtual_entry_to_method_desc(target, descriptor, entry)
            .ok()
            .flatten()
    };
    pointer_field(fields, "_methodPtrAux")
        .and_then(resolve)
        .or_else(|| pointer_field(fields, "_methodPtr").and_then(resolve))
}
