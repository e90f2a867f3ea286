//! The call-counting records of a LoaderAllocator: the only place the runtime notes that a
//! default code version of a method eligible for tiering was jitted optimized rather than
//! at tier 0 (a record for the default version whose stage is "disabled").
//!
//! `LoaderAllocator.CallCountingManager` → `CallCountingManager.CallCountingInfos`, an
//! `SHash` of `CallCountingInfo*`; each record names its code version
//! (`CodeVersionKind`: 1 a node, 2 a default version; `CodeVersion`: the node or the
//! MethodDesc) and its `Stage`, the global `CallCountingStageDisabled` being the disabled
//! one. Each LoaderAllocator's table is read once.

use std::collections::{HashMap, HashSet};

use super::tables::shash_elements;
use crate::contracts::fields::Fields;
use crate::contracts::ContractError;

/// `NativeCodeVersion` storage kind of a default (synthetic) version.
const KIND_SYNTHETIC: u32 = 2;

/// The default versions whose call counting is disabled, per LoaderAllocator.
#[derive(Default)]
pub(crate) struct CallCounting {
    disabled: HashMap<u64, Result<HashSet<u64>, String>>,
}

impl CallCounting {
    /// Whether the LoaderAllocator `la` records call counting of `md`'s default version as
    /// disabled.
    pub(crate) fn default_disabled(
        &mut self,
        f: &Fields<'_>,
        la: u64,
        md: u64,
    ) -> Result<bool, ContractError> {
        let set = self
            .disabled
            .entry(la)
            .or_insert_with(|| disabled_defaults(f, la).map_err(|e| e.to_string()));
        match set {
            Ok(s) => Ok(s.contains(&md)),
            Err(e) => Err(ContractError::Corrupt {
                what: "call-counting records",
                addr: la,
                detail: e.clone(),
            }),
        }
    }
}

/// The MethodDescs of the default versions whose record is in the disabled stage.
pub(crate) fn disabled_defaults(f: &Fields<'_>, la: u64) -> Result<HashSet<u64>, ContractError> {
    let disabled = f.global("CallCountingStageDisabled")?;
    let manager = f.ptr(la, "LoaderAllocator", "CallCountingManager")?;
    let mut out = HashSet::new();
    if manager == 0 {
        return Ok(out);
    }
    let hash = manager.wrapping_add(f.off("CallCountingManager", "CallCountingInfos")?);
    for info in shash_elements(f, hash, "call-counting records")? {
        if f.u32(info, "CallCountingInfo", "CodeVersionKind")? == KIND_SYNTHETIC
            && u64::from(f.u8(info, "CallCountingInfo", "Stage")?) == disabled
        {
            out.insert(f.ptr(info, "CallCountingInfo", "CodeVersion")?);
        }
    }
    Ok(out)
}
