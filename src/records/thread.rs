//! `ThreadStore`, `Thread` and `ExceptionInfo`: the runtime's threads and the exception
//! each is dispatching.
//!
//! Per runtime: .NET 11 names the managed Thread object's handle `ExposedObject` (8, 9
//! and 10: `GCHandle`); the allocation context lives in `RuntimeThreadLocals` from .NET 9
//! (8: inline in the Thread, `AllocContext`); `OSId` is typed `uint32` by some runtimes and
//! is a pointer-sized word in others; `CachedStackBase`/`CachedStackLimit` are described
//! from .NET 11 only. Whether the store's list links point at `Thread.LinkNext` or at the
//! Thread is the Thread contract's version, not the layout's.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

use super::{missing_field, TypeFields};

/// Where a `ThreadStore`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadStoreLayout {
    thread_count: u64,
    first_thread_link: u64,
}

impl ThreadStoreLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "ThreadStore")?;
        Ok(ThreadStoreLayout {
            thread_count: t.required("ThreadCount")?,
            first_thread_link: t.required("FirstThreadLink")?,
        })
    }
}

/// A `ThreadStore`, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadStoreRecord {
    /// Threads the runtime counts.
    pub thread_count: u32,
    /// The head of the thread list, as stored (what it points at is the contract's).
    pub first_thread_link: u64,
}

impl ThreadStoreRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &ThreadStoreLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        Ok(ThreadStoreRecord {
            thread_count: target.read_u32(address.wrapping_add(layout.thread_count))?,
            first_thread_link: target
                .read_pointer(address.wrapping_add(layout.first_thread_link))?,
        })
    }
}

/// Where a `Thread`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadLayout {
    id: u64,
    /// `OSId`, and whether it is 4 bytes (else a pointer-sized word).
    os_id: (u64, bool),
    state: u64,
    preemptive_gc_disabled: u64,
    frame: u64,
    /// Offset of the list link inside the Thread (the contract subtracts it where links
    /// point at it).
    pub link_next: u64,
    exception_tracker: u64,
    last_thrown_object: Option<u64>,
    /// The handle of the managed `System.Threading.Thread`.
    exposed_object: Option<u64>,
    runtime_thread_locals: Option<u64>,
    inline_alloc_context: Option<u64>,
    thread_local_data: Option<u64>,
}

impl ThreadLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "Thread")?;
        let os_id = t.required("OSId")?;
        Ok(ThreadLayout {
            id: t.required("Id")?,
            os_id: (os_id, t.type_name("OSId") == Some("uint32")),
            state: t.required("State")?,
            preemptive_gc_disabled: t.required("PreemptiveGCDisabled")?,
            frame: t.required("Frame")?,
            link_next: t.required("LinkNext")?,
            exception_tracker: t.required("ExceptionTracker")?,
            last_thrown_object: t.optional("LastThrownObject"),
            // .NET 11 renamed it; 8, 9 and 10 call it GCHandle.
            exposed_object: t.renamed(&["ExposedObject", "GCHandle"]).ok(),
            runtime_thread_locals: t.optional("RuntimeThreadLocals"),
            inline_alloc_context: t.optional("AllocContext"),
            thread_local_data: t.optional("ThreadLocalDataPtr"),
        })
    }
}

/// A `Thread`, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadRecord {
    /// The `Thread*`.
    pub address: u64,
    /// Managed thread id (also the thin-lock id).
    pub id: u32,
    /// OS thread id.
    pub os_id: u64,
    /// `ThreadState` bits.
    pub state: u32,
    /// Cooperative mode (bit 0 of `PreemptiveGCDisabled`).
    pub preemptive_gc_disabled: bool,
    /// Head of the explicit Frame chain.
    pub frame: u64,
    /// The list link, as stored.
    pub link_next: u64,
    /// The `ExceptionInfo` of the exception being dispatched (0: none).
    pub exception_tracker: u64,
    last_thrown_object: Option<u64>,
    exposed_object: Option<u64>,
    runtime_thread_locals: Option<u64>,
    inline_alloc_context: Option<u64>,
    thread_local_data: Option<u64>,
}

impl ThreadRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &ThreadLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let ptr = |off: u64| target.read_pointer(address.wrapping_add(off));
        let (os_off, os_u32) = layout.os_id;
        let os_id = if os_u32 {
            u64::from(target.read_u32(address.wrapping_add(os_off))?)
        } else {
            ptr(os_off)?
        };
        Ok(ThreadRecord {
            address,
            id: target.read_u32(address.wrapping_add(layout.id))?,
            os_id,
            state: target.read_u32(address.wrapping_add(layout.state))?,
            preemptive_gc_disabled: target
                .read_u32(address.wrapping_add(layout.preemptive_gc_disabled))?
                & 1
                != 0,
            frame: ptr(layout.frame)?,
            link_next: ptr(layout.link_next)?,
            exception_tracker: ptr(layout.exception_tracker)?,
            last_thrown_object: layout.last_thrown_object.map(ptr).transpose()?,
            exposed_object: layout.exposed_object.map(ptr).transpose()?,
            runtime_thread_locals: layout.runtime_thread_locals.map(ptr).transpose()?,
            inline_alloc_context: layout
                .inline_alloc_context
                .map(|off| address.wrapping_add(off)),
            thread_local_data: layout.thread_local_data.map(ptr).transpose()?,
        })
    }

    /// The handle of the last exception thrown on the thread (`None` where the runtime does
    /// not describe it).
    pub fn last_thrown_object(&self) -> Option<u64> {
        self.last_thrown_object
    }

    /// The handle of the managed `System.Threading.Thread` (`ExposedObject`, or `GCHandle`
    /// before .NET 11).
    pub fn exposed_object(&self) -> Result<u64, ContractError> {
        self.exposed_object
            .ok_or_else(|| missing_field("Thread", "ExposedObject"))
    }

    /// Where the thread's allocation context is: inside its `RuntimeThreadLocals` (.NET 9
    /// and later; `Ok(None)` while it has none), or inline (.NET 8).
    pub fn alloc_context_home(&self) -> Result<AllocContextHome, ContractError> {
        match (self.runtime_thread_locals, self.inline_alloc_context) {
            (Some(0), _) => Ok(AllocContextHome::None),
            (Some(locals), _) => Ok(AllocContextHome::ThreadLocals(locals)),
            (None, Some(inline)) => Ok(AllocContextHome::Inline(inline)),
            (None, None) => Err(missing_field("Thread", "RuntimeThreadLocals")),
        }
    }

    /// The thread's `ThreadLocalData` (thread statics), 0 while it has none.
    pub fn thread_local_data(&self) -> Result<u64, ContractError> {
        self.thread_local_data
            .ok_or_else(|| missing_field("Thread", "ThreadLocalDataPtr"))
    }
}

/// Where a thread keeps its allocation context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocContextHome {
    /// It has no `RuntimeThreadLocals` yet.
    None,
    /// Its `RuntimeThreadLocals` (the context is inside, at `AllocContext`).
    ThreadLocals(u64),
    /// The context's own address, inside the Thread (.NET 8).
    Inline(u64),
}

/// Where an `ExceptionInfo`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExceptionInfoLayout {
    thrown_object: u64,
    /// Whether the descriptor types `ThrownObject` as a handle.
    thrown_object_is_handle: bool,
    previous_nested_info: Option<u64>,
}

impl ExceptionInfoLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "ExceptionInfo")?;
        Ok(ExceptionInfoLayout {
            thrown_object: t.required("ThrownObject")?,
            thrown_object_is_handle: t
                .type_name("ThrownObject")
                .is_some_and(|n| n.eq_ignore_ascii_case("GCHandle") || n == "OBJECTHANDLE"),
            previous_nested_info: t.optional("PreviousNestedInfo"),
        })
    }
}

/// An `ExceptionInfo` (an exception tracker), read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExceptionInfoRecord {
    /// The thrown exception: the object, or a handle to it (.NET 8, 9 and 10.0 keep a
    /// handle; the contract tells them apart).
    pub thrown_object: u64,
    /// Whether the descriptor says `thrown_object` is a handle.
    pub thrown_object_is_handle: bool,
    /// The tracker this one is nested in (`None` where not described).
    pub previous_nested_info: Option<u64>,
}

impl ExceptionInfoRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &ExceptionInfoLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let ptr = |off: u64| target.read_pointer(address.wrapping_add(off));
        Ok(ExceptionInfoRecord {
            thrown_object: ptr(layout.thrown_object)?,
            thrown_object_is_handle: layout.thrown_object_is_handle,
            previous_nested_info: layout.previous_nested_info.map(ptr).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;
    use crate::records::fields::test_descriptor as descriptor;

    const FIELDS: &str = r#""Id":16,"OSId":24,"State":0,"PreemptiveGCDisabled":4,"Frame":8,
        "LinkNext":32,"ExceptionTracker":40"#;

    #[test]
    fn the_managed_object_handle_is_found_under_either_name() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 0x40)
            .u32(16, 7)
            .u64(24, 4242)
            .u64(32, 0x2000)
            .u64(48, 0xabc);
        let t = b.into_target();
        for name in ["ExposedObject", "GCHandle"] {
            let d = descriptor(&format!(
                r#"{{"types":{{"Thread":{{{FIELDS},"{name}":48}}}}}}"#
            ));
            let layout = ThreadLayout::from_descriptor(&d).expect("layout");
            let r = ThreadRecord::read(&t, &layout, 0x1000).expect("record");
            assert_eq!((r.id, r.os_id, r.link_next), (7, 4242, 0x2000));
            assert_eq!(r.exposed_object().ok(), Some(0xabc), "{name}");
        }
        // A runtime with neither: only the question that needs it fails, naming it.
        let d = descriptor(&format!(r#"{{"types":{{"Thread":{{{FIELDS}}}}}}}"#));
        let r = ThreadRecord::read(
            &t,
            &ThreadLayout::from_descriptor(&d).expect("layout"),
            0x1000,
        )
        .expect("record");
        let e = r.exposed_object().expect_err("no handle field");
        assert!(e.to_string().contains("ExposedObject"), "{e}");
    }

    #[test]
    fn a_four_byte_os_id_is_read_as_four_bytes() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 0x40).u32(24, 99).u32(28, 0xffff_ffff);
        let t = b.into_target();
        let d = descriptor(
            r#"{"types":{"Thread":{"Id":16,"OSId":[24,"uint32"],"State":0,
               "PreemptiveGCDisabled":4,"Frame":8,"LinkNext":32,"ExceptionTracker":40}}}"#,
        );
        let r = ThreadRecord::read(
            &t,
            &ThreadLayout::from_descriptor(&d).expect("layout"),
            0x1000,
        )
        .expect("record");
        assert_eq!(r.os_id, 99);
    }
}
