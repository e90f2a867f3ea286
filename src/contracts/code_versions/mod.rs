//! The CodeVersions contract: a method's native code versions, each one's optimization
//! tier, and which one is current (the code new calls run).
//!
//! A method has a *default* native code version, whose code is in its MethodDesc's
//! native-code slot, and may have *explicit* ones (`NativeCodeVersionNode`s: tier 1,
//! instrumented tiers, on-stack replacement, ReJIT), listed newest first from the
//! method's `MethodDescVersioningState`. Where that state hangs differs by runtime:
//! * .NET 9 and 10: `MethodDesc.CodeData` → `MethodDescCodeData.VersioningState`, and the
//!   IL versioning state (ReJIT) in the module's `MethodDefToILCodeVersioningStateMap`;
//! * .NET 8 (no `MethodDesc.CodeData`): two `SHash` tables of the AppDomain's
//!   CodeVersionManager, `AppDomain.MethodDescVersioningStates` (keyed by the state's
//!   `MethodDesc`) and `AppDomain.ILCodeVersioningStates`.
//!
//! Up to .NET 10 the runtime stores the tier of explicit versions only (`OptimizationTier`);
//! the default version's is derived ([`tier::default_tier`]), with the call-counting record
//! of the default version (`call_counting`) telling a method the JIT switched to optimized
//! code. .NET 11 stores the default version's too (`MethodDescCodeData.OptimizationTier`).
//! The spec in our words is `contracts/CodeVersions.md`.

mod call_counting;
pub(crate) mod tables;
pub mod tier;

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use self::call_counting::CallCounting;
pub use self::tier::Tier;
use self::tier::{default_tier, DefaultTierInputs};
use super::fields::Fields;
use super::registry::{self, Contract, ContractContext};
use super::runtime_type_system::{method_desc_info, MethodClassification};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;

/// `MethodDesc.Flags`: a non-vtable slot follows the MethodDesc.
const MDF_HAS_NON_VTABLE_SLOT: u16 = 0x08;
/// `MethodDesc.Flags`: a MethodImpl follows (after the non-vtable slot).
const MDF_HAS_METHOD_IMPL: u16 = 0x10;
/// `MethodDesc.Flags`: a native-code slot follows (after the MethodImpl).
const MDF_HAS_NATIVE_CODE_SLOT: u16 = 0x20;
/// `MethodDesc.Flags3AndTokenRemainder`: eligible for tiered compilation.
const MDF3_ELIGIBLE_FOR_TIERING: u16 = 0x8000;
/// `MethodDesc.Flags3AndTokenRemainder`: the entry point is stable.
const MDF3_HAS_STABLE_ENTRY_POINT: u16 = 0x1000;
/// `MethodDesc.Flags3AndTokenRemainder`: the stable entry point is a precode.
const MDF3_HAS_PRECODE: u16 = 0x2000;
/// `NativeCodeVersionNode.Flags`: the active version of its IL version.
const NODE_IS_ACTIVE_CHILD: u32 = 0x1;
/// `MethodDescVersioningState.Flags`: the default version is the active one.
const STATE_DEFAULT_IS_ACTIVE_CHILD: u8 = 0x4;
/// `ILCodeVersioningState.ActiveVersionKind` of an explicit IL version (a node).
const IL_VERSION_EXPLICIT: u32 = 1;

/// One native code version of a method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeCodeVersion {
    /// The `NativeCodeVersionNode`, `None` for the default version.
    pub node: Option<u64>,
    /// Start of its code; `None` when it has none yet (or, for a default version without a
    /// native-code slot, when the MethodDesc does not say).
    pub code: Option<u64>,
    /// The ReJIT id of the IL version it compiles (0: the original IL).
    pub il_version_id: u64,
    /// Its optimization tier.
    pub tier: Tier,
    /// It is the active native version of its IL version.
    pub active: bool,
    /// It is the method's current version (the active one of the active IL version);
    /// `None` when the active IL version cannot be told.
    pub current: Option<bool>,
}

/// A method's native code versions: the default one first, then the explicit ones newest
/// first (the runtime's order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MethodVersions {
    /// The MethodDesc.
    pub method_desc: u64,
    /// The versions.
    pub versions: Vec<NativeCodeVersion>,
    /// Why `current` is unknown, when it is.
    pub current_unknown: Option<String>,
}

/// Where this runtime keeps a method's versioning state.
enum Storage {
    /// `MethodDesc.CodeData` (.NET 9 and later).
    PerMethodDesc,
    /// The AppDomain's hash tables (.NET 8), read once.
    DomainTables {
        states: Option<HashMap<u64, u64>>,
        il_states: Option<usize>,
    },
}

/// What one MethodDesc says about its versions.
struct MethodFacts {
    module: u64,
    token: u32,
    classification: MethodClassification,
    eligible: bool,
    native_code_slot: Option<u64>,
    /// Without a native-code slot, the non-vtable slot when it holds the code itself (a
    /// stable entry point that is not a precode: a precompiled P/Invoke stub, say).
    stable_code_slot: Option<u64>,
}

/// Reads code versions (see the module documentation). It caches the tables it reads
/// (call-counting records per LoaderAllocator, .NET 8's versioning tables): make a new one
/// after flushing a live target.
pub struct CodeVersions {
    target: Target,
    descriptor: DataDescriptor,
    storage: Storage,
    call_counting: CallCounting,
}

impl Contract for CodeVersions {
    const NAME: &'static str = "CodeVersions";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => CodeVersions::v1(&context.target, &context.descriptor),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

impl CodeVersions {
    fn f(&self) -> Fields<'_> {
        Fields::new(&self.target, &self.descriptor)
    }

    /// The contract over a runtime's descriptor: `CodeVersions` 1 (advertised by .NET 10;
    /// cdac's .NET 9 overlay and .NET 8 descriptor add it), in the form the descriptor
    /// describes (`MethodDesc.CodeData`, or `AppDomain.MethodDescVersioningStates`).
    pub fn new(
        target: &Target,
        descriptor: &DataDescriptor,
    ) -> Result<CodeVersions, ContractError> {
        registry::create(&ContractContext::new(target, descriptor))
    }

    /// Version 1, in the form the descriptor describes.
    fn v1(target: &Target, descriptor: &DataDescriptor) -> Result<CodeVersions, ContractError> {
        let f = Fields::new(target, descriptor);
        let storage = if f.has("MethodDesc", "CodeData") {
            Storage::PerMethodDesc
        } else {
            // Fails with the field's name when the descriptor has neither form.
            f.off("AppDomain", "MethodDescVersioningStates")?;
            Storage::DomainTables {
                states: None,
                il_states: None,
            }
        };
        Ok(CodeVersions {
            target: target.clone(),
            descriptor: descriptor.clone(),
            storage,
            call_counting: CallCounting::default(),
        })
    }

    /// Every native code version of `md`. `impl_flags` is the method's metadata
    /// `ImplFlags` (0 for a method without metadata; `None` when unknown), which some tiers
    /// of the default version depend on; `is_ready_to_run` tells whether code is
    /// precompiled.
    pub fn versions(
        &mut self,
        md: u64,
        impl_flags: Option<u16>,
        is_ready_to_run: &dyn Fn(u64) -> bool,
    ) -> Result<MethodVersions, ContractError> {
        let facts = self.facts(md)?;
        let state = self.versioning_state(md)?;
        let (active_il, current_unknown) = self.active_il_version(&facts)?;
        let current = |il: u64, active: bool| active_il.map(|a| active && il == a);
        let mut versions = Vec::new();
        let code_slot = facts.native_code_slot.or(facts.stable_code_slot);
        let default_code = match code_slot {
            Some(slot) => Some(self.f().t.read_pointer(slot)?).filter(|&c| c != 0),
            None => None,
        };
        let default_active = self.default_is_active(state)?;
        let default_tier = match (code_slot, default_code) {
            (None, _) => Tier::Unknown,
            (Some(_), code) => {
                self.default_tier(md, &facts, code.is_some_and(is_ready_to_run), impl_flags)?
            }
        };
        versions.push(NativeCodeVersion {
            node: None,
            code: default_code,
            il_version_id: 0,
            tier: default_tier,
            active: default_active,
            current: current(0, default_active),
        });
        for node in self.nodes(md, state)? {
            versions.push(NativeCodeVersion {
                node: Some(node.address),
                code: Some(node.code).filter(|&c| c != 0),
                il_version_id: node.il_version_id,
                tier: node_tier(&node, is_ready_to_run),
                active: node.active,
                current: current(node.il_version_id, node.active),
            });
        }
        Ok(MethodVersions {
            method_desc: md,
            versions,
            current_unknown,
        })
    }

    /// The version of `md` whose code starts at `start` (a code block the
    /// ExecutionManager found; `ready_to_run` when it is precompiled): the explicit version
    /// with that code, else the default version, whose code the native-code slot holds
    /// (any code when the MethodDesc has no slot). `None` when the code is none of the
    /// method's versions (code the runtime compiled but did not publish).
    pub fn version_at(
        &mut self,
        md: u64,
        start: u64,
        ready_to_run: bool,
        impl_flags: Option<u16>,
    ) -> Result<Option<NativeCodeVersion>, ContractError> {
        let facts = self.facts(md)?;
        let state = self.versioning_state(md)?;
        let (active_il, _) = self.active_il_version(&facts)?;
        let current = |il: u64, active: bool| active_il.map(|a| active && il == a);
        if let Some(node) = self
            .nodes(md, state)?
            .into_iter()
            .find(|n| n.code == start && start != 0)
        {
            return Ok(Some(NativeCodeVersion {
                node: Some(node.address),
                code: Some(start),
                il_version_id: node.il_version_id,
                tier: node_tier(&node, &|_| ready_to_run),
                active: node.active,
                current: current(node.il_version_id, node.active),
            }));
        }
        if let Some(slot) = facts.native_code_slot.or(facts.stable_code_slot) {
            if self.f().t.read_pointer(slot)? != start {
                return Ok(None);
            }
        }
        let active = self.default_is_active(state)?;
        Ok(Some(NativeCodeVersion {
            node: None,
            code: Some(start),
            il_version_id: 0,
            tier: self.default_tier(md, &facts, ready_to_run, impl_flags)?,
            active,
            current: current(0, active),
        }))
    }

    fn facts(&self, md: u64) -> Result<MethodFacts, ContractError> {
        let f = &self.f();
        let info = method_desc_info(f.t, f.d, md)?;
        let flags = f.u16(md, "MethodDesc", "Flags")?;
        let flags3 = f.u16(md, "MethodDesc", "Flags3AndTokenRemainder")?;
        let end = md.wrapping_add(f.size(size_type(info.classification))?);
        let native_code_slot = if flags & MDF_HAS_NATIVE_CODE_SLOT != 0 {
            let mut at = end;
            if flags & MDF_HAS_NON_VTABLE_SLOT != 0 {
                at = at.wrapping_add(f.size("NonVtableSlot")?);
            }
            if flags & MDF_HAS_METHOD_IMPL != 0 {
                at = at.wrapping_add(f.size("MethodImpl")?);
            }
            Some(at)
        } else {
            None
        };
        // The runtime's rule for a MethodDesc without a native-code slot: its code is its
        // stable entry point unless that is a precode.
        let stable_code_slot = (native_code_slot.is_none()
            && flags & MDF_HAS_NON_VTABLE_SLOT != 0
            && flags3 & (MDF3_HAS_STABLE_ENTRY_POINT | MDF3_HAS_PRECODE)
                == MDF3_HAS_STABLE_ENTRY_POINT)
            .then_some(end);
        Ok(MethodFacts {
            module: info.module,
            token: info.token,
            classification: info.classification,
            eligible: flags3 & MDF3_ELIGIBLE_FOR_TIERING != 0,
            native_code_slot,
            stable_code_slot,
        })
    }

    fn default_tier(
        &mut self,
        md: u64,
        facts: &MethodFacts,
        ready_to_run: bool,
        impl_flags: Option<u16>,
    ) -> Result<Tier, ContractError> {
        // .NET 11 records the default version's tier itself (`MethodDescCodeData.
        // OptimizationTier`) where it is not the initial one. Left unset (all ones), it
        // is derived as before, except that nothing else can say the JIT switched to
        // optimized code: 11 has no call-counting record for that (every unset eligible
        // default version of the testbed is `[QuickJitted]` in its perf map).
        let mut records_tier = false;
        if !ready_to_run && self.f().has("MethodDescCodeData", "OptimizationTier") {
            records_tier = true;
            let code_data = self.f().ptr(md, "MethodDesc", "CodeData")?;
            if code_data != 0 {
                let value = self
                    .f()
                    .u32(code_data, "MethodDescCodeData", "OptimizationTier")?;
                let tier = Tier::from_node_value(value);
                if tier != Tier::Unknown {
                    return Ok(tier);
                }
            }
        }
        // Only an eligible jitted method's tier depends on its call-counting record.
        let call_counting_disabled = if records_tier {
            Some(false)
        } else if facts.eligible && !ready_to_run {
            let la = self.f().ptr(facts.module, "Module", "LoaderAllocator")?;
            match self.call_counting.default_disabled(
                &Fields::new(&self.target, &self.descriptor),
                la,
                md,
            ) {
                Ok(d) => Some(d),
                Err(e) => {
                    tracing::debug!("call counting of MethodDesc {md:#x}: {e}");
                    None
                }
            }
        } else {
            None
        };
        Ok(default_tier(DefaultTierInputs {
            ready_to_run,
            eligible: facts.eligible,
            impl_flags,
            call_counting_disabled,
        }))
    }

    /// The method's `MethodDescVersioningState`, 0 when it has none.
    fn versioning_state(&mut self, md: u64) -> Result<u64, ContractError> {
        match &mut self.storage {
            Storage::PerMethodDesc => {
                let code_data = self.f().ptr(md, "MethodDesc", "CodeData")?;
                if code_data == 0 {
                    return Ok(0);
                }
                self.f()
                    .ptr(code_data, "MethodDescCodeData", "VersioningState")
            }
            Storage::DomainTables { states, .. } => {
                if states.is_none() {
                    *states = Some(domain_states(&Fields::new(&self.target, &self.descriptor))?);
                }
                Ok(states
                    .as_ref()
                    .and_then(|s| s.get(&md).copied())
                    .unwrap_or(0))
            }
        }
    }

    fn default_is_active(&self, state: u64) -> Result<bool, ContractError> {
        if state == 0 {
            return Ok(true);
        }
        let flags = self.f().u8(state, "MethodDescVersioningState", "Flags")?;
        Ok(flags & STATE_DEFAULT_IS_ACTIVE_CHILD != 0)
    }

    /// The explicit versions of the state's list, newest first. The list is bounded by the
    /// list-length limit, and a node seen twice (a cycle) ends it with an error.
    fn nodes(&self, md: u64, state: u64) -> Result<Vec<Node>, ContractError> {
        if state == 0 {
            return Ok(Vec::new());
        }
        let f = &self.f();
        let cap = f.t.limits().max_list_length;
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut node = f.ptr(state, "MethodDescVersioningState", "NativeCodeVersionNode")?;
        while node != 0 {
            if out.len() as u64 >= cap || !seen.insert(node) {
                return Err(ContractError::LimitExceeded {
                    what: "native code version list",
                    addr: state,
                    limit: Limit::ListLength,
                    cap,
                    unit: "nodes (or a cycle)",
                });
            }
            let owner = f.ptr(node, "NativeCodeVersionNode", "MethodDesc")?;
            if owner != md {
                return Err(ContractError::Corrupt {
                    what: "NativeCodeVersionNode",
                    addr: node,
                    detail: format!("belongs to MethodDesc {owner:#x}, listed for {md:#x}"),
                });
            }
            out.push(Node {
                address: node,
                code: f.ptr(node, "NativeCodeVersionNode", "NativeCode")?,
                il_version_id: f.ptr(node, "NativeCodeVersionNode", "ILVersionId")?,
                tier: match f.has("NativeCodeVersionNode", "OptimizationTier") {
                    true => Some(f.u32(node, "NativeCodeVersionNode", "OptimizationTier")?),
                    false => None,
                },
                active: f.u32(node, "NativeCodeVersionNode", "Flags")? & NODE_IS_ACTIVE_CHILD != 0,
            });
            node = f.ptr(node, "NativeCodeVersionNode", "Next")?;
        }
        Ok(out)
    }

    /// The ReJIT id of the method's active IL version (0: the original IL), or why it
    /// cannot be told.
    fn active_il_version(
        &mut self,
        facts: &MethodFacts,
    ) -> Result<(Option<u64>, Option<String>), ContractError> {
        // Dynamic and array methods have no MethodDef, so no IL versions but the original.
        let has_method_def = !matches!(
            facts.classification,
            MethodClassification::Dynamic | MethodClassification::Array
        );
        let rid = facts.token & 0x00FF_FFFF;
        if !has_method_def || rid == 0 {
            return Ok((Some(0), None));
        }
        let f = &Fields::new(&self.target, &self.descriptor);
        match &mut self.storage {
            Storage::PerMethodDesc => {
                let map = facts
                    .module
                    .wrapping_add(f.off("Module", "MethodDefToILCodeVersioningStateMap")?);
                let state = tables::lookup_map_entry(f, map, rid)?;
                if state == 0 {
                    return Ok((Some(0), None));
                }
                if !f.has("ILCodeVersioningState", "ActiveVersionKind") {
                    return Ok((
                        None,
                        Some(format!(
                            "the method has IL versions (ReJIT state {state:#x}), which this \
                             runtime's descriptor does not describe"
                        )),
                    ));
                }
                let kind = f.u32(state, "ILCodeVersioningState", "ActiveVersionKind")?;
                if kind != IL_VERSION_EXPLICIT {
                    return Ok((Some(0), None));
                }
                let node = f.ptr(state, "ILCodeVersioningState", "ActiveVersionNode")?;
                Ok((Some(f.ptr(node, "ILCodeVersionNode", "VersionId")?), None))
            }
            Storage::DomainTables { il_states, .. } => {
                let count = match il_states {
                    Some(c) => *c,
                    None => {
                        let domain = f.t.read_pointer(f.global("AppDomain")?)?;
                        let hash =
                            domain.wrapping_add(f.off("AppDomain", "ILCodeVersioningStates")?);
                        let n = tables::shash_elements(f, hash, "IL versioning states")?.len();
                        *il_states = Some(n);
                        n
                    }
                };
                Ok(match count {
                    0 => (Some(0), None),
                    n => (
                        None,
                        Some(format!(
                            "the runtime holds {n} IL versioning state(s) (ReJIT), which are \
                             not read on this runtime"
                        )),
                    ),
                })
            }
        }
    }
}

/// One `NativeCodeVersionNode` as read.
struct Node {
    address: u64,
    code: u64,
    il_version_id: u64,
    tier: Option<u32>,
    active: bool,
}

/// An explicit version's tier: precompiled code is ReadyToRun (as the runtime's own
/// diagnostics report it), otherwise the node's field.
fn node_tier(node: &Node, is_ready_to_run: &dyn Fn(u64) -> bool) -> Tier {
    if node.code != 0 && is_ready_to_run(node.code) {
        return Tier::ReadyToRun;
    }
    node.tier.map_or(Tier::Unknown, Tier::from_node_value)
}

/// The descriptor type whose size is that of a MethodDesc of this classification.
fn size_type(c: MethodClassification) -> &'static str {
    match c {
        MethodClassification::Il => "MethodDesc",
        MethodClassification::FCall => "FCallMethodDesc",
        MethodClassification::PInvoke => "PInvokeMethodDesc",
        MethodClassification::EEImpl => "EEImplMethodDesc",
        MethodClassification::Array => "ArrayMethodDesc",
        MethodClassification::Instantiated => "InstantiatedMethodDesc",
        MethodClassification::ComInterop => "CLRToCOMCallMethodDesc",
        MethodClassification::Dynamic => "DynamicMethodDesc",
    }
}

/// .NET 8: the AppDomain's MethodDesc → versioning state table.
fn domain_states(f: &Fields<'_>) -> Result<HashMap<u64, u64>, ContractError> {
    let domain = f.t.read_pointer(f.global("AppDomain")?)?;
    if domain == 0 {
        return Ok(HashMap::new());
    }
    let hash = domain.wrapping_add(f.off("AppDomain", "MethodDescVersioningStates")?);
    let mut out = HashMap::new();
    for state in tables::shash_elements(f, hash, "MethodDesc versioning states")? {
        out.insert(
            f.ptr(state, "MethodDescVersioningState", "MethodDesc")?,
            state,
        );
    }
    Ok(out)
}
