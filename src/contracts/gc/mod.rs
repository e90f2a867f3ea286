//! The GC contract: the managed heap's shape (workstation or server heaps, regions or
//! segments, generations and their segments). Spec: `contracts/GC.md`.
//!
//! .NET 8, 9 and 10 do not advertise the contract: they reach the GC through its table for
//! debuggers, `GcDacVars`, whose address is a slot of `g_dacTable` (`dac_vars`), read when
//! the runtime does not name the contract ([`Contract::when_absent`]). .NET 11 advertises
//! `GC` "c1" (cdac's version 1) and describes its GC in a sub-descriptor of its own (types
//! `GCHeap`, `Generation`, `HeapSegment`, globals for each variable, `GCIdentifiers`). Both
//! resolve into one [`GcVariables`].

mod dac_vars;
mod finalize;
mod gc_desc;
pub mod handles;
pub mod segments;
mod variables;
pub mod walk;

pub use dac_vars::{DacVarsSource, GcDacVars};
pub use finalize::{FinalizerEntry, FinalizerPart};
pub use gc_desc::{GcDesc, GcDescCache, CONTAINS_GC_POINTERS};
pub use handles::{Handle, HandleKind, HandleLayout};
pub use segments::{GcHeapData, GcSegment, Generation, HeapSegment, SegmentKind};
pub use variables::GcVariables;
pub use walk::{
    locate, HeapObject, ObjectGeneration, ObjectLayout, ObjectWalker, WalkProblem, WalkSummary,
};

use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// The descriptor global that names the `g_dacTable` slot holding `&g_gcDacGlobals`.
pub const DAC_TABLE_SLOT_GLOBAL: &str = "GcDacGlobalsDacTableSlot";

/// The descriptor global holding the address of `GcDacVars` itself (NativeAOT's debug
/// header's `g_gcDacGlobals`, as its loader names it).
pub const DAC_VARS_GLOBAL: &str = "GcDacVars";

/// How the GC was built and configured (the .NET 11 contract's `GCIdentifiers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GcIdentifiers {
    /// Server GC (else workstation).
    pub server: bool,
    /// Regions (else segments: `DOTNET_GCName=libclrgc.so`).
    pub regions: bool,
    /// Dynamic adaptation to the application's size (DATAS) is on; `None` where the GC
    /// does not say (server GC with a GC/DAC interface before 2.4: .NET 8 and 9, where
    /// DATAS is on by default from 9). Workstation GC never adapts.
    pub dynamic_adaptation: Option<bool>,
}

/// Where cdac found the GC's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcSource {
    /// The table for debuggers (.NET 8, 9 and 10), and how it was found.
    DacVars(GcDacVars, DacVarsSource),
    /// The GC's sub-descriptor (.NET 11), with the GC's `GCIdentifiers`.
    SubDescriptor,
}

/// The GC contract of a runtime.
#[derive(Debug, Clone)]
pub struct GcHeap {
    target: Target,
    descriptor: DataDescriptor,
    vars: GcVariables,
    source: GcSource,
    identifiers: GcIdentifiers,
}

impl Contract for GcHeap {
    const NAME: &'static str = "GC";
    /// 1: .NET 11's "c1", read from the GC's sub-descriptor.
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => GcHeap::from_sub_descriptor(context),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }

    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        if let Ok(address) = context.descriptor.global_value(DAC_VARS_GLOBAL) {
            return Some(GcHeap::from_dac_vars_at(context, address));
        }
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
        let (dac_vars, source) = GcDacVars::find(target, table, size, slot)?;
        let vars = GcVariables::from_dac_vars(target, &dac_vars)?;
        Self::with_variables(context, vars, GcSource::DacVars(dac_vars, source))
    }

    /// Reads `GcDacVars` where the descriptor's global says it is (NativeAOT 10).
    fn from_dac_vars_at(context: &ContractContext, address: u64) -> Result<GcHeap, ContractError> {
        let dac_vars = GcDacVars::read(&context.target, address)?;
        let vars = GcVariables::from_dac_vars(&context.target, &dac_vars)?;
        Self::with_variables(
            context,
            vars,
            GcSource::DacVars(dac_vars, DacVarsSource::Global(address)),
        )
    }

    /// Reads the GC's sub-descriptor (.NET 11: merged into the runtime's descriptor).
    fn from_sub_descriptor(context: &ContractContext) -> Result<GcHeap, ContractError> {
        let vars = GcVariables::from_descriptor(&context.descriptor)?;
        Self::with_variables(context, vars, GcSource::SubDescriptor)
    }

    fn with_variables(
        context: &ContractContext,
        vars: GcVariables,
        source: GcSource,
    ) -> Result<GcHeap, ContractError> {
        let target = &context.target;
        let server = vars.server.is_some();
        let dynamic_adaptation = match (server, vars.dynamic_adaptation_mode) {
            (false, _) => Some(false),
            (true, None) => None,
            (true, Some(mode)) => Some(target.read_i32(mode)? == 1),
        };
        Ok(GcHeap {
            target: target.clone(),
            descriptor: context.descriptor.clone(),
            identifiers: GcIdentifiers {
                server,
                regions: vars.regions(),
                dynamic_adaptation,
            },
            vars,
            source,
        })
    }

    /// Where the GC's variables were found.
    pub fn source(&self) -> GcSource {
        self.source
    }

    /// The GC's variables, resolved.
    pub fn variables(&self) -> &GcVariables {
        &self.vars
    }

    /// Workstation or server, regions or segments, DATAS.
    pub fn identifiers(&self) -> GcIdentifiers {
        self.identifiers
    }

    /// `gc_structures_invalid_cnt`: not zero while a GC moves objects, when the heap cannot
    /// be walked reliably.
    pub fn structures_invalid_count(&self) -> Result<i32, ContractError> {
        Ok(self.target.read_i32(self.vars.structures_invalid_count)?)
    }

    /// The heaps: one under workstation GC.
    pub fn heaps(&self) -> Result<Vec<GcHeapData>, ContractError> {
        segments::heaps(&self.target, &self.vars)
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

    /// Where a walk finds an object's MethodTable fields and component count, from the
    /// descriptor (`MethodTable`, `Array`, `ObjectToMethodTableUnmask`).
    pub fn object_layout(&self) -> Result<ObjectLayout, ContractError> {
        let d = &self.descriptor;
        let mt = d.ty("MethodTable")?;
        let num_components = match d.ty("Array") {
            Ok(a) => a.offset("m_NumComponents")?,
            Err(_) => d.ty("String")?.offset("m_StringLength")?,
        };
        Ok(ObjectLayout {
            // NativeAOT names it `Flags`.
            mt_flags: mt.offset("MTFlags").or_else(|_| mt.offset("Flags"))?,
            mt_base_size: mt.offset("BaseSize")?,
            num_components,
            mt_mask: d.global_value("ObjectToMethodTableUnmask")?,
        })
    }

    /// The free object MethodTable, when the descriptor names it (`FreeObjectMethodTable`:
    /// .NET 9 and 10); a walk otherwise knows free objects by their MethodTable's shape.
    pub fn free_method_table(&self) -> Option<u64> {
        // NativeAOT 10's header gives the MethodTable itself.
        if let Ok(mt) = self.descriptor.global_value("FreeObjectMethodTableAddress") {
            return Some(mt).filter(|&mt| mt != 0);
        }
        let global = self.descriptor.global_value("FreeObjectMethodTable").ok()?;
        self.target.read_pointer(global).ok().filter(|&mt| mt != 0)
    }

    /// A walker over this heap's objects that steps over the given allocation contexts
    /// (every thread's; the generations' own are added here).
    pub fn walker(
        &self,
        heaps: &[GcHeapData],
        mut contexts: Vec<(u64, u64)>,
    ) -> Result<ObjectWalker<'_>, ContractError> {
        for h in heaps {
            contexts.extend(h.generations.iter().map(|g| (g.alloc_ptr, g.alloc_limit)));
        }
        Ok(ObjectWalker::new(
            &self.target,
            self.object_layout()?,
            contexts,
            self.free_method_table(),
        ))
    }

    /// Every GC handle in use, in every handle table (one per heap or, under server GC,
    /// per processor).
    pub fn handles(&self) -> Result<Vec<Handle>, ContractError> {
        let map = self.vars.handle_table_map;
        let layout = self.handle_layout()?;
        let mut out = Vec::new();
        for table in handles::handle_tables(&self.target, map, layout)? {
            handles::handles_of_table(&self.target, table, layout, &mut out)?;
        }
        Ok(out)
    }

    /// The handle tables' layout: the descriptor's `HandleMaxInternalTypes` when the first
    /// table's segment confirms it, else the count that fits (with a warning).
    pub fn handle_layout(&self) -> Result<HandleLayout, ContractError> {
        let types = self.descriptor.global_value("HandleMaxInternalTypes").ok();
        handles::find_layout(&self.target, self.vars.handle_table_map, types)
    }

    /// Every entry of every heap's finalization queue.
    pub fn finalizer_entries(&self) -> Result<Vec<FinalizerEntry>, ContractError> {
        let mut out = Vec::new();
        for heap in self.heaps()? {
            out.extend(finalize::entries(
                &self.target,
                heap.index,
                heap.finalize_queue,
            )?);
        }
        Ok(out)
    }
}
