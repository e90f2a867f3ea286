//! `GcDacVars`: the table of variable addresses the GC keeps for debuggers (the GC/DAC
//! interface, `g_gcDacGlobals`), and how cdac finds it through `g_dacTable`.
//!
//! The table is versioned by the GC itself (major.minor), not by the runtime: a standalone
//! GC (`DOTNET_GCName=libclrgc.so`) fills the same table from another library. A new major
//! changes the table or the layouts of the types it points at (`dac_heap_segment`,
//! `dac_generation`, `dac_finalize_queue`), so the layout below is keyed by the major the
//! table states, and any other major is refused. Minors only append fields.

use super::super::ContractError;
use crate::memory::Target;

/// The GC/DAC interface major version whose layout cdac reads (.NET 6 to 10).
pub const SUPPORTED_MAJOR: u8 = 2;
/// Generations a table describes: gen0, gen1, gen2, large and pinned objects.
pub const GENERATION_COUNT: u64 = 5;
/// Smallest and largest `generation` entry seen in a GC build, with a margin: a value
/// outside them means the address is not a `GcDacVars`.
const GENERATION_SIZE_RANGE: std::ops::RangeInclusive<u64> = 0xC0..=0x180;
/// Bytes of the version-2 table cdac reads; minor 4 appends one pointer.
const TABLE_BYTES: usize = 0x140;
/// Offset of `dynamic_adaptation_mode`, present from minor 4 (.NET 10's GC).
const DYNAMIC_ADAPTATION_OFFSET: u64 = 0x140;

/// Offsets of the version-2 table's fields (64-bit targets): one pointer per variable after
/// the two version bytes and the two sizes.
mod offset {
    pub const MAJOR: usize = 0x00;
    pub const MINOR: usize = 0x01;
    pub const GENERATION_SIZE: usize = 0x08;
    pub const TOTAL_GENERATION_COUNT: usize = 0x10;
    pub const BUILT_WITH_SVR: usize = 0x20;
    pub const GENERATION_TABLE: usize = 0x30;
    pub const MAX_GEN: usize = 0x38;
    pub const CURRENT_C_GC_STATE: usize = 0x48;
    pub const EPHEMERAL_HEAP_SEGMENT: usize = 0x50;
    pub const ALLOC_ALLOCATED: usize = 0x78;
    pub const FINALIZE_QUEUE: usize = 0x90;
    pub const N_HEAPS: usize = 0xB0;
    pub const HEAPS: usize = 0xB8;
    pub const GC_STRUCTURES_INVALID_CNT: usize = 0xC0;
    pub const HANDLE_TABLE_MAP: usize = 0xE8;
    pub const GC_HEAP_FIELD_OFFSETS: usize = 0xF0;
    pub const GENERATION_FIELD_OFFSETS: usize = 0xF8;
}

/// How the table was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DacVarsSource {
    /// At the address the descriptor's `GcDacVars` global gives (NativeAOT's debug header
    /// names `g_gcDacGlobals` itself).
    Global(u64),
    /// At the `g_dacTable` slot the descriptor names (`GcDacGlobalsDacTableSlot`).
    DescriptorSlot(u64),
    /// By searching every `g_dacTable` slot for a table that passes the structural check,
    /// because the descriptor names no slot or its slot failed the check (a build the
    /// descriptors were not made from).
    Search {
        /// The slot that holds it.
        slot: u64,
        /// The slot the descriptor named, if any.
        descriptor_slot: Option<u64>,
    },
}

impl DacVarsSource {
    /// The `g_dacTable` slot that holds `&g_gcDacGlobals` (`None`: found without one).
    pub fn slot(&self) -> Option<u64> {
        match *self {
            DacVarsSource::DescriptorSlot(slot) | DacVarsSource::Search { slot, .. } => Some(slot),
            DacVarsSource::Global(_) => None,
        }
    }
}

/// The `GcDacVars` table, read once: the version, the two sizes and the addresses of the
/// variables cdac uses (each the address of the GC's variable, except `generation_table`,
/// `handle_table_map` and the two offset arrays, which point at the data itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcDacVars {
    /// Where the table is.
    pub address: u64,
    /// Interface major version (2).
    pub major: u8,
    /// Interface minor version.
    pub minor: u8,
    /// Bytes of one `generation` entry of a generation table.
    pub generation_size: u64,
    /// Entries of a generation table (5).
    pub total_generation_count: u64,
    /// `&built_with_svr` (a byte: the GC was built for server GC).
    pub built_with_svr: u64,
    /// The workstation generation table (its address, not a pointer to it).
    pub generation_table: u64,
    /// `&max_gen` (an int: 2).
    pub max_gen: u64,
    /// `&current_c_gc_state` (background GC state).
    pub current_c_gc_state: u64,
    /// `&ephemeral_heap_segment` (workstation).
    pub ephemeral_heap_segment: u64,
    /// `&alloc_allocated` (workstation): where allocation in the ephemeral segment ends.
    pub alloc_allocated: u64,
    /// `&finalize_queue` (workstation `CFinalize*`).
    pub finalize_queue: u64,
    /// `&n_heaps` (server: an int).
    pub n_heaps: u64,
    /// `&g_heaps` (server: a `gc_heap*` array).
    pub heaps: u64,
    /// `&gc_structures_invalid_cnt` (an int; not zero while a GC rearranges the heap).
    pub gc_structures_invalid_cnt: u64,
    /// The handle table map (`g_HandleTableMap` itself).
    pub handle_table_map: u64,
    /// Server `gc_heap` field offsets (an int array); 0 in a workstation GC.
    pub gc_heap_field_offsets: u64,
    /// `generation` field offsets (an int array: allocation context, start segment,
    /// allocation start; -1 for a field the build lacks).
    pub generation_field_offsets: u64,
    /// `&dynamic_adaptation_mode` (minor 4 on; 0 when absent or workstation).
    pub dynamic_adaptation_mode: u64,
}

impl GcDacVars {
    /// Reads and checks the table at `address`: the version bytes, the sizes and the
    /// variables every heap reader needs must make sense (`max_gen` readable and 2).
    pub fn read(target: &Target, address: u64) -> Result<GcDacVars, ContractError> {
        if target.pointer_size() != 8 {
            return Err(ContractError::UnsupportedArchitecture {
                contract: "GC",
                architecture: format!("{}-bit", u32::from(target.pointer_size()) * 8),
                supported: "64-bit targets",
            });
        }
        let bytes = target.read_bytes(address, TABLE_BYTES)?;
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let corrupt = |detail: String| ContractError::Corrupt {
            what: "GcDacVars",
            addr: address,
            detail,
        };
        let major = bytes[offset::MAJOR];
        let minor = bytes[offset::MINOR];
        if major != SUPPORTED_MAJOR {
            return Err(corrupt(format!(
                "GC/DAC interface version {major}.{minor}; cdac reads version {SUPPORTED_MAJOR}.x"
            )));
        }
        let vars = GcDacVars {
            address,
            major,
            minor,
            generation_size: u64_at(offset::GENERATION_SIZE),
            total_generation_count: u64_at(offset::TOTAL_GENERATION_COUNT),
            built_with_svr: u64_at(offset::BUILT_WITH_SVR),
            generation_table: u64_at(offset::GENERATION_TABLE),
            max_gen: u64_at(offset::MAX_GEN),
            current_c_gc_state: u64_at(offset::CURRENT_C_GC_STATE),
            ephemeral_heap_segment: u64_at(offset::EPHEMERAL_HEAP_SEGMENT),
            alloc_allocated: u64_at(offset::ALLOC_ALLOCATED),
            finalize_queue: u64_at(offset::FINALIZE_QUEUE),
            n_heaps: u64_at(offset::N_HEAPS),
            heaps: u64_at(offset::HEAPS),
            gc_structures_invalid_cnt: u64_at(offset::GC_STRUCTURES_INVALID_CNT),
            handle_table_map: u64_at(offset::HANDLE_TABLE_MAP),
            gc_heap_field_offsets: u64_at(offset::GC_HEAP_FIELD_OFFSETS),
            generation_field_offsets: u64_at(offset::GENERATION_FIELD_OFFSETS),
            dynamic_adaptation_mode: if minor >= 4 {
                target.read_pointer(address + DYNAMIC_ADAPTATION_OFFSET)?
            } else {
                0
            },
        };
        if vars.total_generation_count != GENERATION_COUNT {
            return Err(corrupt(format!(
                "{} generations (every GC of version 2 has {GENERATION_COUNT})",
                vars.total_generation_count
            )));
        }
        if !GENERATION_SIZE_RANGE.contains(&vars.generation_size) || vars.generation_size % 8 != 0 {
            return Err(corrupt(format!(
                "a generation entry of {:#x} bytes",
                vars.generation_size
            )));
        }
        if vars.generation_field_offsets == 0 || vars.max_gen == 0 {
            return Err(corrupt(
                "no generation field offsets or no max_gen variable".into(),
            ));
        }
        let max_gen = target.read_i32(vars.max_gen)?;
        if max_gen != 2 {
            return Err(corrupt(format!("max_gen is {max_gen}, not 2")));
        }
        Ok(vars)
    }

    /// Finds the table through `g_dacTable` (`table`, `size` bytes): at `slot` when the
    /// descriptor names one and it passes the check, else by trying every slot.
    pub fn find(
        target: &Target,
        table: u64,
        size: u64,
        slot: Option<u64>,
    ) -> Result<(GcDacVars, DacVarsSource), ContractError> {
        let slots = size / 8;
        let at_slot = |s: u64| -> Result<GcDacVars, ContractError> {
            // The slot holds &g_gcDacGlobals, which points at the table.
            let variable = target.read_pointer(table + s * 8)?;
            let vars = target.read_pointer(variable)?;
            GcDacVars::read(target, vars)
        };
        let mut descriptor_error = None;
        if let Some(s) = slot {
            if s < slots {
                match at_slot(s) {
                    Ok(v) => return Ok((v, DacVarsSource::DescriptorSlot(s))),
                    Err(e) => descriptor_error = Some(e),
                }
            }
        }
        for s in (0..slots).filter(|&s| Some(s) != slot) {
            if let Ok(v) = at_slot(s) {
                if let Some(e) = &descriptor_error {
                    tracing::warn!(
                        "the g_dacTable slot the descriptor names for the GC's variables \
                         (GcDacGlobalsDacTableSlot {}) fails its check ({e}); slot {s} holds them",
                        slot.unwrap_or_default()
                    );
                }
                return Ok((
                    v,
                    DacVarsSource::Search {
                        slot: s,
                        descriptor_slot: slot,
                    },
                ));
            }
        }
        // The descriptor's slot could not be read at all (a dump that left it out): that,
        // not the table, is the answer.
        if let Some(ContractError::Read(e)) = descriptor_error {
            if e.is_missing_memory() {
                return Err(ContractError::Read(e));
            }
            descriptor_error = Some(ContractError::Read(e));
        }
        Err(ContractError::Corrupt {
            what: "g_dacTable",
            addr: table,
            detail: match (slot, descriptor_error) {
                (Some(s), Some(e)) => format!(
                    "no slot leads to the GC's variables (GcDacVars): the descriptor's \
                     GcDacGlobalsDacTableSlot {s} fails its check ({e}), and none of the \
                     other {slots} slots passes it"
                ),
                (Some(s), None) => format!(
                    "no slot leads to the GC's variables (GcDacVars): the descriptor's \
                     GcDacGlobalsDacTableSlot {s} is past the table's {slots} slots, and none \
                     passes the check"
                ),
                (None, _) => {
                    format!("no slot of its {slots} leads to the GC's variables (GcDacVars)")
                }
            },
        })
    }

    /// Whether the GC runs as server GC (one heap per core, or as many as DATAS keeps).
    pub fn is_server(&self, target: &Target) -> Result<bool, ContractError> {
        if self.gc_heap_field_offsets == 0 || self.built_with_svr == 0 {
            return Ok(false);
        }
        Ok(target.read_u8(self.built_with_svr)? != 0)
    }
}
