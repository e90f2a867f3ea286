//! NativeAOT runtimes: the runtime linked into the executable, described by its debug header
//! (.NET 10) or its "n1" contract descriptor (.NET 11). What a reader gets of one: its
//! threads and the exceptions they dispatch ([`threads`]), the runtime's own crash report
//! ([`crash_info`]), and managed method names from the compiler's stack-trace metadata,
//! without the `.dbg` file ([`method_names`]).
//!
//! ```no_run
//! let rt = cdac::runtime::Runtime::attach(1234, &Default::default())?;
//! if rt.is_native_aot() {
//!     let aot = cdac::nativeaot::NativeAot::new(&rt)?;
//!     for t in aot.threads()?.threads {
//!         println!("{} {:?}", t.os_id, t.exception().and_then(|e| e.type_name.clone()));
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod crash_info;
pub mod method_names;
pub mod stacks;
pub mod threads;

use std::sync::Arc;

use crate::contracts::ContractError;
use crate::records::native_aot::{
    AotExInfoLayout, AotMethodTableLayout, AotStringLayout, AotThreadLayout, AotThreadStoreLayout,
    ManagedExceptionLayout, ManagedThreadLayout,
};
use crate::runtime::Runtime;

pub use crash_info::CrashInfo;
pub use method_names::{AotMethod, CodeAt, MethodNames, TypeHashStyle};
pub use threads::{AotThread, AotThreadList};

/// A NativeAOT runtime, ready to read.
#[derive(Debug)]
pub struct NativeAot {
    rt: Runtime,
    thread_layout: AotThreadLayout,
    store_layout: AotThreadStoreLayout,
    method_table_layout: Option<AotMethodTableLayout>,
    string_layout: Option<AotStringLayout>,
    exinfo_layout: Option<AotExInfoLayout>,
    exception_layout: Option<ManagedExceptionLayout>,
    managed_thread_layout: Option<ManagedThreadLayout>,
}

impl NativeAot {
    /// Reads `rt` as a NativeAOT runtime; fails when it is not one or its descriptor lacks
    /// the thread layout.
    pub fn new(rt: &Runtime) -> Result<NativeAot, ContractError> {
        if !rt.is_native_aot() {
            return Err(ContractError::WrongFlavor {
                reader: "cdac's NativeAOT reader",
                wanted: "NativeAOT",
                found: "CoreCLR",
            });
        }
        let d = rt.descriptor();
        Ok(NativeAot {
            rt: rt.clone(),
            thread_layout: AotThreadLayout::from_descriptor(d)?,
            store_layout: AotThreadStoreLayout::from_descriptor(d)?,
            method_table_layout: AotMethodTableLayout::from_descriptor(d).ok(),
            string_layout: AotStringLayout::from_descriptor(d).ok(),
            exinfo_layout: AotExInfoLayout::from_descriptor(d).ok(),
            exception_layout: ManagedExceptionLayout::from_descriptor(d).ok(),
            managed_thread_layout: ManagedThreadLayout::from_descriptor(d).ok(),
        })
    }

    /// The runtime this reads.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The managed method names of the executable, decoded once per runtime from its
    /// stack-trace metadata; the error says why there are none (a build without the
    /// metadata, an executable whose header cannot be read).
    pub fn method_names(&self) -> Result<Arc<MethodNames>, String> {
        self.rt.native_aot_names()
    }

    /// How this runtime hashes type names into its MethodTables (.NET 11 changed it).
    pub fn hash_style(&self) -> TypeHashStyle {
        TypeHashStyle::of(&self.rt)
    }

    /// The address of the thread store.
    fn thread_store(&self) -> Result<u64, ContractError> {
        let d = self.rt.descriptor();
        let target = self.rt.target();
        // 11: a global holding the store's address; 10: the RuntimeInstance, whose first
        // field points at the store.
        if let Ok(global) = d.global_value("ThreadStore") {
            return Ok(target.read_pointer(global)?);
        }
        let instance = d.global_value("RuntimeInstanceAddress")?;
        let offset = self
            .store_layout
            .instance_thread_store
            .ok_or_else(|| crate::records::missing_field("RuntimeInstance", "ThreadStore"))?;
        Ok(target.read_pointer(instance.wrapping_add(offset))?)
    }
}

/// Most array ranks followed to an element type (`int[][][]`).
const MAX_ARRAY_NESTING: usize = 8;

/// The name of the type whose MethodTable is at `method_table`: a type the executable's
/// stack-trace metadata names, found by the name hash the MethodTable carries, or an array
/// of one (`Widget[]`: a parameterized MethodTable whose related type is the element).
pub(crate) fn type_name(
    target: &crate::memory::Target,
    layout: &AotMethodTableLayout,
    names: &MethodNames,
    style: TypeHashStyle,
    method_table: u64,
) -> Option<String> {
    let mut suffix = String::new();
    let mut mt = method_table;
    for _ in 0..MAX_ARRAY_NESTING {
        let flags = target.read_u32(mt.wrapping_add(layout.flags)).ok()?;
        // Kind bits 16-17: 2 is parameterized (arrays, pointers); with a component size,
        // an array.
        if (flags >> 16) & 3 == 2 && flags & 0x8000_0000 != 0 {
            suffix.insert_str(0, "[]");
            mt = target.read_pointer(mt.wrapping_add(layout.related)).ok()?;
            continue;
        }
        let hash = target.read_u32(mt.wrapping_add(layout.hash_code)).ok()?;
        return names
            .type_with_hash(hash, style)
            .map(|n| format!("{n}{suffix}"));
    }
    None
}
