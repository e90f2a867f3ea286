//! The GC contract: the managed heap's shape (workstation or server heaps, regions or
//! segments, generations and their segments), for runtimes that do not describe their GC
//! (every runtime before .NET 11). Spec: `contracts/GC.md`.
//!
//! .NET 8, 9 and 10 reach the GC through its table for debuggers, `GcDacVars`, whose address
//! is a slot of `g_dacTable` ([`dac_vars`]). No runtime advertises a `GC` contract cdac
//! implements a version of: .NET 11 advertises `GC` with a tag of its own and describes its
//! GC in a sub-descriptor, which a later version here will read. So this reader is made
//! only when the runtime does not name the contract ([`Contract::when_absent`]).

pub mod dac_vars;
pub mod segments;

pub use dac_vars::{DacVarsSource, GcDacVars};
pub use segments::{GcHeapData, GcSegment, Generation, HeapSegment, SegmentKind};

use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::memory::Target;

/// The descriptor global that names the `g_dacTable` slot holding `&g_gcDacGlobals`.
pub const DAC_TABLE_SLOT_GLOBAL: &str = "GcDacGlobalsDacTableSlot";

/// How the GC was built and configured (the .NET 11 contract's `GCIdentifiers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GcIdentifiers {
    /// Server GC (else workstation).
    pub server: bool,
    /// Regions (else segments: `DOTNET_GCName=libclrgc.so`).
    pub regions: bool,
    /// Dynamic adaptation to the application's size (DATAS) is on.
    pub dynamic_adaptation: bool,
}

/// The GC contract of a runtime.
#[derive(Debug, Clone)]
pub struct GcHeap {
    target: Target,
    vars: GcDacVars,
    source: DacVarsSource,
    identifiers: GcIdentifiers,
}

impl Contract for GcHeap {
    const NAME: &'static str = "GC";
    /// None yet: the one runtime that advertises `GC` (.NET 11) is read differently.
    const VERSIONS: &'static [u64] = &[];

    fn create(_context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        registry::unsupported(Self::NAME, version, Self::VERSIONS)
    }

    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        let (table, size) = context.dac_table?;
        Some(GcHeap::from_dac_table(context, table, size))
    }
}

impl GcHeap {
    /// Finds `GcDacVars` through `g_dacTable` and learns the GC's flavour.
    fn from_dac_table(
        context: &ContractContext,
        table: u64,
        size: u64,
    ) -> Result<GcHeap, ContractError> {
        let target = &context.target;
        let slot = context.descriptor.global_value(DAC_TABLE_SLOT_GLOBAL).ok();
        let (vars, source) = GcDacVars::find(target, table, size, slot)?;
        let server = vars.is_server(target)?;
        let regions = segments::uses_regions(target, &vars)?;
        let dynamic_adaptation = server
            && vars.dynamic_adaptation_mode != 0
            && target.read_i32(vars.dynamic_adaptation_mode)? == 1;
        Ok(GcHeap {
            target: target.clone(),
            vars,
            source,
            identifiers: GcIdentifiers {
                server,
                regions,
                dynamic_adaptation,
            },
        })
    }

    /// The GC's table for debuggers.
    pub fn dac_vars(&self) -> &GcDacVars {
        &self.vars
    }

    /// How the table was found.
    pub fn source(&self) -> DacVarsSource {
        self.source
    }

    /// Workstation or server, regions or segments, DATAS.
    pub fn identifiers(&self) -> GcIdentifiers {
        self.identifiers
    }

    /// `gc_structures_invalid_cnt`: not zero while a GC moves objects, when the heap cannot
    /// be walked reliably.
    pub fn structures_invalid_count(&self) -> Result<i32, ContractError> {
        Ok(self.target.read_i32(self.vars.gc_structures_invalid_cnt)?)
    }

    /// The heaps: one under workstation GC.
    pub fn heaps(&self) -> Result<Vec<GcHeapData>, ContractError> {
        segments::heaps(&self.target, &self.vars, self.identifiers.server)
    }

    /// Every segment of every heap, heap by heap.
    pub fn segments(&self) -> Result<Vec<GcSegment>, ContractError> {
        let mut out = Vec::new();
        for heap in self.heaps()? {
            out.extend(segments::segments(
                &self.target,
                &heap,
                self.identifiers.regions,
            )?);
        }
        Ok(out)
    }
}
