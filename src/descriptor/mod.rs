//! The runtime's data descriptor: type sizes, field offsets, globals and contract versions.
//!
//! A .NET 9+ runtime exports it ([`embedded`]); for .NET 8, which has none, `cdac` ships
//! descriptors in the same compact JSON form ([`shipped`]). Either way contracts use the
//! merged [`DataDescriptor`]:
//!
//! ```no_run
//! # fn demo(d: &cdac::descriptor::DataDescriptor) -> Result<(), cdac::descriptor::DescriptorError> {
//! let begin = d.ty("RangeSection")?.offset("RangeBegin")?;
//! let map = d.global_value("ExecutionManagerCodeRangeMapAddress")?;
//! # let _ = (begin, map); Ok(()) }
//! ```
//!
//! A descriptor is built from its compact JSON form; globals written as `[n]` are slots
//! of the pointer data that comes with it:
//!
//! ```
//! use cdac::descriptor::{json, DataDescriptor};
//! use cdac::memory::DataLayout;
//!
//! let text = br#"{
//!     "version": 0,
//!     "types": { "Thread": { "!": 64, "Id": 8, "Next": [16, "pointer"] } },
//!     "globals": { "ThreadStore": [1], "MaxThreads": 100 },
//!     "contracts": { "Thread": 1 }
//! }"#;
//! let physical = json::parse("example", text)?;
//! let mut descriptor = DataDescriptor::new(DataLayout::LE64);
//! descriptor.merge("example", &physical, &[0, 0x7f00_1000])?;
//! let thread = descriptor.ty("Thread")?;
//! assert_eq!(thread.size()?, 64);
//! assert_eq!(thread.offset("Next")?, 16);
//! assert_eq!(descriptor.global_value("ThreadStore")?, 0x7f00_1000);
//! assert_eq!(descriptor.global_value("MaxThreads")?, 100);
//! assert!(descriptor.ty("Exception").is_err());
//! # Ok::<(), cdac::descriptor::DescriptorError>(())
//! ```

pub mod debug_header;
pub mod embedded;
mod error;
pub mod json;
mod model;
pub mod number;
pub mod on_disk;
pub mod shipped;

pub use error::DescriptorError;
pub use json::{ContractVersion, PhysicalDescriptor};
pub use model::{
    DataDescriptor, Field, FillReport, Global, NameMap, SubDescriptorInfo, TypeLayout,
    NEWEST_FORMAT,
};

/// The name of the symbol .NET 9+ runtimes export.
pub const CONTRACT_DESCRIPTOR_SYMBOL: &str = "DotNetRuntimeContractDescriptor";

/// Caps on what a descriptor may make us read, so that a damaged target cannot make the
/// loader allocate or recurse without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest JSON text, in bytes.
    pub max_descriptor_bytes: u32,
    /// Most pointer-data slots.
    pub max_pointer_data: u32,
    /// Deepest chain of sub-descriptors.
    pub max_sub_descriptor_depth: u32,
    /// Most sub-descriptors loaded in all.
    pub max_sub_descriptors: u32,
    /// Most JSON bytes read over the whole tree of descriptors.
    pub max_total_descriptor_bytes: u64,
}

impl Limits {
    /// The caps for one command's [`crate::limits::Limits`]: one descriptor may be as large
    /// as its `max_descriptor_bytes`, the whole tree four times that.
    pub fn for_command(limits: &crate::limits::Limits) -> Self {
        let one = u32::try_from(limits.max_descriptor_bytes).unwrap_or(u32::MAX);
        Limits {
            max_descriptor_bytes: one,
            max_total_descriptor_bytes: limits.max_descriptor_bytes.saturating_mul(4),
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Real descriptors are tens of kilobytes.
            max_descriptor_bytes: 16 << 20,
            max_pointer_data: 1 << 16,
            max_sub_descriptor_depth: 8,
            // The .NET 10 runtime has one (the GC's).
            max_sub_descriptors: 64,
            max_total_descriptor_bytes: 64 << 20,
        }
    }
}

#[cfg(test)]
mod command_limit_tests {
    use super::Limits;
    use crate::limits::Limits as CommandLimits;

    #[test]
    fn descriptor_caps_follow_the_descriptor_size() {
        let limits = CommandLimits {
            max_descriptor_bytes: 1000,
            ..CommandLimits::default()
        };
        let d = Limits::for_command(&limits);
        assert_eq!(d.max_descriptor_bytes, 1000);
        assert_eq!(d.max_total_descriptor_bytes, 4000);
        let huge = CommandLimits {
            max_descriptor_bytes: u64::MAX,
            ..CommandLimits::default()
        };
        assert_eq!(Limits::for_command(&huge).max_descriptor_bytes, u32::MAX);
    }
}
