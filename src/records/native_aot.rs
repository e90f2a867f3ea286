//! NativeAOT's runtime types: its `ThreadStore`, `Thread` (the C++ `RuntimeThreadLocals`),
//! `ExInfo`, and the managed `System.Exception` and `System.Threading.Thread` fields a
//! reader needs.
//!
//! Per runtime: .NET 11 describes them in its contract descriptor ("n1" contracts) and its
//! `ManagedTypes` sub-descriptor; .NET 10 in its debug header, which the loader renames to
//! .NET 11's names ([`crate::descriptor::debug_header`]). What neither describes (10: the
//! thread's state and stack bounds; both: `System.Exception`'s fields) comes from the
//! shipped `nativeaot` overlays. Field offsets differ (10's thread id is at 184, 11's at
//! 176); the names are one.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

use super::{missing_field, TypeFields};

/// Where a NativeAOT `Thread`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotThreadLayout {
    link_next: u64,
    os_id: u64,
    exception_tracker: u64,
    state: Option<u64>,
    stack_limit: Option<u64>,
    stack_base: Option<u64>,
    inlined_statics: Option<u64>,
    /// Where its allocation context's next-free and limit pointers are.
    alloc_context: Option<(u64, u64)>,
}

impl AotThreadLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "Thread")?;
        Ok(AotThreadLayout {
            link_next: t.required("LinkNext")?,
            os_id: t.required("OSId")?,
            exception_tracker: t.required("ExceptionTracker")?,
            state: t.optional("State"),
            stack_limit: t.optional("CachedStackLimit"),
            stack_base: t.optional("CachedStackBase"),
            inlined_statics: t.optional("InlinedThreadStatics"),
            alloc_context: alloc_context_offsets(d),
        })
    }
}

/// `Thread.AllocContext` → `EEAllocContext.GCAllocationContext` → `GCAllocContext.{Pointer,
/// Limit}`, as offsets from the Thread.
fn alloc_context_offsets(d: &DataDescriptor) -> Option<(u64, u64)> {
    let at = TypeFields::of(d, "Thread").ok()?.optional("AllocContext")?
        + TypeFields::of(d, "EEAllocContext")
            .ok()?
            .optional("GCAllocationContext")?;
    let gc = TypeFields::of(d, "GCAllocContext").ok()?;
    Some((at + gc.optional("Pointer")?, at + gc.optional("Limit")?))
}

/// Where a NativeAOT `ThreadStore` keeps its list, and how the store is reached from the
/// RuntimeInstance (.NET 10, whose header names no store global).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotThreadStoreLayout {
    pub first_thread_link: u64,
    pub instance_thread_store: Option<u64>,
}

impl AotThreadStoreLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        Ok(AotThreadStoreLayout {
            first_thread_link: TypeFields::of(d, "ThreadStore")?.required("FirstThreadLink")?,
            instance_thread_store: TypeFields::of(d, "RuntimeInstance")
                .ok()
                .and_then(|t| t.optional("ThreadStore")),
        })
    }
}

/// Where a NativeAOT `MethodTable` keeps what a reader of objects needs: its flags (the
/// component size in the low half when the top bit is set), base size, related type (an
/// array's element) and the hash of its type's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotMethodTableLayout {
    pub(crate) flags: u64,
    pub(crate) base_size: u64,
    pub(crate) related: u64,
    pub(crate) hash_code: u64,
}

impl AotMethodTableLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "MethodTable")?;
        Ok(AotMethodTableLayout {
            flags: t.required("Flags")?,
            base_size: t.required("BaseSize")?,
            related: t.required("RelatedType")?,
            hash_code: t.required("HashCode")?,
        })
    }
}

/// Where a NativeAOT string keeps its length and characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotStringLayout {
    pub length: u64,
    pub first_char: u64,
}

impl AotStringLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "String")?;
        Ok(AotStringLayout {
            length: t.required("m_StringLength")?,
            first_char: t.required("m_FirstChar")?,
        })
    }
}

/// A NativeAOT `Thread`, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotThreadRecord {
    /// The next thread of the store's list (the link points at the Thread itself).
    pub next: u64,
    /// The kernel's thread id, as the target's PID namespace numbers it.
    pub os_id: u64,
    /// The innermost `ExInfo` of the exceptions being dispatched (0: none).
    pub exception_tracker: u64,
    state: Option<u32>,
    stack: Option<(u64, u64)>,
    inlined_statics: Option<u64>,
    alloc_context: Option<(u64, u64)>,
}

impl AotThreadRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &AotThreadLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let at = |o: u64| address.wrapping_add(o);
        let optional_pointer = |o: Option<u64>| -> Result<Option<u64>, ContractError> {
            o.map(|o| target.read_pointer(at(o)))
                .transpose()
                .map_err(Into::into)
        };
        let stack = match (layout.stack_limit, layout.stack_base) {
            (Some(l), Some(b)) => Some((target.read_pointer(at(l))?, target.read_pointer(at(b))?)),
            _ => None,
        };
        Ok(AotThreadRecord {
            next: target.read_pointer(at(layout.link_next))?,
            os_id: target.read_u64(at(layout.os_id))?,
            exception_tracker: target.read_pointer(at(layout.exception_tracker))?,
            state: layout.state.map(|o| target.read_u32(at(o))).transpose()?,
            stack,
            inlined_statics: optional_pointer(layout.inlined_statics)?,
            alloc_context: match layout.alloc_context {
                Some((p, l)) => {
                    let (pointer, limit) =
                        (target.read_pointer(at(p))?, target.read_pointer(at(l))?);
                    (pointer != 0 && limit >= pointer).then_some((pointer, limit))
                }
                None => None,
            },
        })
    }

    /// The thread's state bits (`Thread.State`).
    pub fn state(&self) -> Result<u32, ContractError> {
        self.state.ok_or_else(|| missing_field("Thread", "State"))
    }

    /// The thread's allocation context (next free byte, limit), when it has one.
    pub fn alloc_context(&self) -> Option<(u64, u64)> {
        self.alloc_context
    }

    /// The thread's stack, `[limit, base)`, when described.
    pub fn stack(&self) -> Option<(u64, u64)> {
        self.stack
    }

    /// The root of the thread's inlined thread statics (an `InlinedThreadStaticRoot`, whose
    /// first field is the object holding them), when described.
    pub fn inlined_statics(&self) -> Option<u64> {
        self.inlined_statics
    }
}

/// Where an `ExInfo` (one exception being dispatched) keeps its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AotExInfoLayout {
    previous: u64,
    thrown_object: u64,
}

impl AotExInfoLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "ExInfo")?;
        Ok(AotExInfoLayout {
            previous: t.required("PreviousNestedInfo")?,
            thrown_object: t.required("ThrownObject")?,
        })
    }

    /// The (previous ExInfo, exception object) of the ExInfo at `address`.
    pub(crate) fn read(&self, target: &Target, address: u64) -> Result<(u64, u64), ContractError> {
        Ok((
            target.read_pointer(address.wrapping_add(self.previous))?,
            target.read_pointer(address.wrapping_add(self.thrown_object))?,
        ))
    }
}

/// Where a managed `System.Exception` keeps what a report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ManagedExceptionLayout {
    pub message: u64,
    pub inner: u64,
    pub hresult: u64,
    /// The `IntPtr[]` of code addresses the runtime records as the exception unwinds.
    pub trace: Option<u64>,
    /// How many of them are used.
    pub trace_used: Option<u64>,
}

impl ManagedExceptionLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "System.Exception")?;
        Ok(ManagedExceptionLayout {
            message: t.required("_message")?,
            inner: t.required("_innerException")?,
            hresult: t.required("_HResult")?,
            trace: t.optional("_corDbgStackTrace"),
            trace_used: t.optional("_idxFirstFreeStackTraceEntry"),
        })
    }
}

/// Where a managed `System.Threading.Thread` keeps its id and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ManagedThreadLayout {
    pub managed_id: u64,
    pub name: u64,
}

impl ManagedThreadLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "System.Threading.Thread")?;
        Ok(ManagedThreadLayout {
            managed_id: t.required("_managedThreadId")?,
            name: t.required("_name")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;
    use crate::records::fields::test_descriptor;

    #[test]
    fn a_thread_of_the_debug_header_lacks_only_what_it_does_not_describe() {
        // .NET 10's header, renamed: no state, no stack bounds.
        let d = test_descriptor(
            r#"{"version":2,"types":{"Thread":{"LinkNext":96,"OSId":184,"ExceptionTracker":120}}}"#,
        );
        let layout = AotThreadLayout::from_descriptor(&d).unwrap();
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 208)
            .u64(96, 0x2000)
            .u64(184, 4242)
            .u64(120, 0x3000);
        let t = AotThreadRecord::read(&b.into_target(), &layout, 0x1000).unwrap();
        assert_eq!(
            (t.next, t.os_id, t.exception_tracker),
            (0x2000, 4242, 0x3000)
        );
        assert!(t.state().unwrap_err().to_string().contains("State"));
        assert_eq!(t.stack(), None);
    }
}
