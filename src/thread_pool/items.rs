//! What a queued work item runs: a `QueueUserWorkItem` callback's delegate, a Task's
//! action, an async method's state machine box, or another `IThreadPoolWorkItem`, named
//! by its type.

use crate::async_chains::frames::{async_method_name, is_state_machine_box};
use crate::inspect::delegates::delegate_method;
use crate::inspect::{Inspector, Value};
use crate::names::MethodNamer;
use crate::runtime::Runtime;

/// One queued work item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The queued object.
    pub object: u64,
    /// Its type.
    pub type_name: String,
    /// `work` (a callback), `task`, `async` (an async method to resume) or `other`.
    pub kind: &'static str,
    /// The method it runs (`Ns.Type.Method`), when known.
    pub method: Option<String>,
    /// The MethodDesc of that method (not for async methods, named from their state
    /// machine).
    pub method_desc: Option<u64>,
}

/// `Ns.Type.Method` from a perf-map name (`void [Module] Ns.Type::Method(int32)`).
pub fn short_method_name(perf_map_name: &str) -> String {
    let after_module = perf_map_name
        .split_once("] ")
        .map_or(perf_map_name, |(_, rest)| rest);
    let name = match after_module.find("::") {
        Some(sep) => {
            let end = after_module[sep..]
                .find('(')
                .map_or(after_module.len(), |p| sep + p);
            &after_module[..end]
        }
        None => after_module,
    };
    name.replace("::", ".")
}

/// Describes work items, naming their methods.
pub struct Describer<'r> {
    rt: &'r Runtime,
    namer: MethodNamer,
}

impl<'r> Describer<'r> {
    /// A describer for `rt`.
    pub fn new(rt: &'r Runtime) -> Self {
        Describer {
            rt,
            namer: MethodNamer::for_runtime(rt),
        }
    }

    /// The method the delegate in field `name` of `fields` calls.
    fn delegate(
        &mut self,
        inspector: &mut Inspector<'_>,
        fields: &[crate::inspect::FieldView],
        name: &str,
    ) -> Option<(String, u64)> {
        let d = fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| match f.value {
                Value::Reference { address, .. } if address != 0 => Some(address),
                _ => None,
            })?;
        let v = inspector.view(d, 0).ok()?;
        let md = delegate_method(self.rt, &v.fields)?;
        Some((short_method_name(&self.namer.name(md)), md))
    }

    /// What `object` runs.
    pub fn describe(&mut self, inspector: &mut Inspector<'_>, object: u64) -> WorkItem {
        let Some(v) = inspector.view(object, 0).ok() else {
            return WorkItem {
                object,
                type_name: "?".into(),
                kind: "other",
                method: None,
                method_desc: None,
            };
        };
        let has = |n: &str| v.fields.iter().any(|f| f.name == n);
        let (kind, method, method_desc) = if is_state_machine_box(&v.type_name) {
            let sm = v
                .fields
                .iter()
                .find(|f| f.name == "StateMachine")
                .map(|f| async_method_name(&f.type_name));
            ("async", sm, None)
        } else if has("m_stateFlags") {
            match self.delegate(inspector, &v.fields, "m_action") {
                Some((m, md)) => ("task", Some(m), Some(md)),
                None => ("task", None, None),
            }
        } else if has("_callback") {
            match self.delegate(inspector, &v.fields, "_callback") {
                Some((m, md)) => ("work", Some(m), Some(md)),
                None => ("work", None, None),
            }
        } else {
            ("other", None, None)
        };
        WorkItem {
            object,
            type_name: v.type_name,
            kind,
            method,
            method_desc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::short_method_name;

    #[test]
    fn perf_map_names_shorten_to_type_and_method() {
        assert_eq!(
            short_method_name(
                "void [Cdac.Testbed] Cdac.Testbed.Pool.ThreadPoolFacts::QueuedCallback(object)"
            ),
            "Cdac.Testbed.Pool.ThreadPoolFacts.QueuedCallback"
        );
        assert_eq!(
            short_method_name("instance void [Lib] A.B`1[System.Int32]::Run()"),
            "A.B`1[System.Int32].Run"
        );
        assert_eq!(short_method_name("odd"), "odd");
    }
}
