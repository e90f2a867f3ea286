//! `AppDomain`: where the loaded assemblies are listed.
//!
//! Per runtime: .NET 8, 9 and 10 list `DomainAssembly*`s in `DomainAssemblyList` (whose
//! first pointer is the `Assembly*` where the runtime does not describe the type); .NET 11
//! has no DomainAssembly and lists `Assembly*`s in `AssemblyList`.

use crate::descriptor::{DataDescriptor, DescriptorError};

use super::TypeFields;

/// What the AppDomain's assembly list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AssemblyListEntries {
    /// `DomainAssembly*`s (`DomainAssemblyList`: .NET 8, 9 and 10).
    DomainAssemblies,
    /// `Assembly*`s (`AssemblyList`: .NET 11).
    Assemblies,
}

/// Where an `AppDomain`'s assembly list is, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppDomainLayout {
    /// Offset of the list (an `ArrayListBase`).
    pub assembly_list: u64,
    /// What its entries are.
    pub entries: AssemblyListEntries,
}

impl AppDomainLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "AppDomain")?;
        if let Some(at) = t.optional("AssemblyList") {
            return Ok(AppDomainLayout {
                assembly_list: at,
                entries: AssemblyListEntries::Assemblies,
            });
        }
        Ok(AppDomainLayout {
            assembly_list: t.required("DomainAssemblyList")?,
            entries: AssemblyListEntries::DomainAssemblies,
        })
    }
}
