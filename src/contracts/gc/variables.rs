//! Where the GC keeps what cdac reads, from either of the places a runtime says so: the
//! GC's table for debuggers (`GcDacVars`, .NET 8, 9 and 10) or its own sub-descriptor (.NET
//! 11's GC "c1": types `GCHeap`, `Generation`, `HeapSegment`, `CFinalize` and globals named
//! for each variable). Both are resolved once, into the same shape, so the readers of
//! heaps, generations and segments do not care which one the runtime had.

use super::dac_vars::GcDacVars;
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// Where a `generation` entry's fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationFields {
    /// Bytes of one entry of a generation table.
    pub size: u64,
    /// The entry's allocation context (pointer, then limit).
    pub alloc_context: Option<u64>,
    /// Its first segment (region).
    pub start_segment: Option<u64>,
    /// Where the generation starts in the ephemeral segment (segments GC only).
    pub allocation_start: Option<u64>,
}

/// Where a server `gc_heap`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHeapFields {
    /// `alloc_allocated`.
    pub alloc_allocated: Option<u64>,
    /// `ephemeral_heap_segment`.
    pub ephemeral_heap_segment: Option<u64>,
    /// `finalize_queue`.
    pub finalize_queue: Option<u64>,
    /// `generation_table` (the table itself lies at this offset).
    pub generation_table: u64,
}

/// The server GC's heaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHeaps {
    /// `&n_heaps` (an int).
    pub n_heaps: u64,
    /// `&g_heaps` (a `gc_heap*` array).
    pub heaps: u64,
    /// Where each heap's fields are.
    pub fields: ServerHeapFields,
}

/// The workstation GC's variables (each the address of the variable, but the generation
/// table, which is the table's own address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkstationHeap {
    /// The generation table.
    pub generation_table: u64,
    /// `&alloc_allocated`.
    pub alloc_allocated: u64,
    /// `&ephemeral_heap_segment`.
    pub ephemeral_heap_segment: u64,
    /// `&finalize_queue`.
    pub finalize_queue: u64,
}

/// Everything the heap readers need, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcVariables {
    /// The server GC's heaps, `None` under workstation GC.
    pub server: Option<ServerHeaps>,
    /// The workstation heap's variables (unused under server GC).
    pub workstation: WorkstationHeap,
    /// Generation entries.
    pub generation: GenerationFields,
    /// `&gc_structures_invalid_cnt`.
    pub structures_invalid_count: u64,
    /// The handle table map (`g_HandleTableMap` itself).
    pub handle_table_map: u64,
    /// `&dynamic_adaptation_mode`, where the GC publishes it.
    pub dynamic_adaptation_mode: Option<u64>,
}

impl GcVariables {
    /// From the table for debuggers: its offset arrays read once.
    pub fn from_dac_vars(target: &Target, vars: &GcDacVars) -> Result<GcVariables, ContractError> {
        let generation_offset = |i: u64| field_offset(target, vars.generation_field_offsets, i);
        let generation = GenerationFields {
            size: vars.generation_size,
            alloc_context: generation_offset(0)?,
            start_segment: generation_offset(1)?,
            allocation_start: generation_offset(2)?,
        };
        let server = if vars.is_server(target)? {
            let heap_offset = |i: u64| field_offset(target, vars.gc_heap_field_offsets, i);
            Some(ServerHeaps {
                n_heaps: vars.n_heaps,
                heaps: vars.heaps,
                fields: ServerHeapFields {
                    alloc_allocated: heap_offset(ALLOC_ALLOCATED_FIELD)?,
                    ephemeral_heap_segment: heap_offset(EPHEMERAL_HEAP_SEGMENT_FIELD)?,
                    finalize_queue: heap_offset(FINALIZE_QUEUE_FIELD)?,
                    generation_table: heap_offset(GENERATION_TABLE_FIELD)?.ok_or(
                        ContractError::Corrupt {
                            what: "server GC heap field offsets",
                            addr: vars.gc_heap_field_offsets,
                            detail: "no generation table offset".into(),
                        },
                    )?,
                },
            })
        } else {
            None
        };
        Ok(GcVariables {
            server,
            workstation: WorkstationHeap {
                generation_table: vars.generation_table,
                alloc_allocated: vars.alloc_allocated,
                ephemeral_heap_segment: vars.ephemeral_heap_segment,
                finalize_queue: vars.finalize_queue,
            },
            generation,
            structures_invalid_count: vars.gc_structures_invalid_cnt,
            handle_table_map: vars.handle_table_map,
            dynamic_adaptation_mode: (vars.dynamic_adaptation_mode != 0)
                .then_some(vars.dynamic_adaptation_mode),
        })
    }

    /// From the GC's sub-descriptor (.NET 11): server GC when it describes `GCHeap` (and
    /// the `NumHeaps` and `Heaps` globals), workstation GC when it names the workstation
    /// heap's variables (`GCHeapAllocAllocated`, ...).
    pub fn from_descriptor(d: &DataDescriptor) -> Result<GcVariables, ContractError> {
        let g = |name: &str| d.global_value(name);
        let generation_type = d.ty("Generation")?;
        let generation = GenerationFields {
            size: u64::from(generation_type.size()?),
            alloc_context: generation_type.offset("AllocationContext").ok(),
            start_segment: generation_type.offset("StartSegment").ok(),
            allocation_start: generation_type.offset("AllocationStart").ok(),
        };
        let server = match d.ty("GCHeap") {
            Ok(heap) => Some(ServerHeaps {
                n_heaps: g("NumHeaps")?,
                heaps: g("Heaps")?,
                fields: ServerHeapFields {
                    alloc_allocated: heap.offset("AllocAllocated").ok(),
                    ephemeral_heap_segment: heap.offset("EphemeralHeapSegment").ok(),
                    finalize_queue: heap.offset("FinalizeQueue").ok(),
                    generation_table: heap.offset("GenerationTable")?,
                },
            }),
            Err(_) => None,
        };
        let workstation = if server.is_some() {
            WorkstationHeap {
                generation_table: 0,
                alloc_allocated: 0,
                ephemeral_heap_segment: 0,
                finalize_queue: 0,
            }
        } else {
            WorkstationHeap {
                generation_table: g("GCHeapGenerationTable")?,
                alloc_allocated: g("GCHeapAllocAllocated")?,
                ephemeral_heap_segment: g("GCHeapEphemeralHeapSegment")?,
                finalize_queue: g("GCHeapFinalizeQueue")?,
            }
        };
        Ok(GcVariables {
            server,
            workstation,
            generation,
            structures_invalid_count: g("StructureInvalidCount")?,
            handle_table_map: g("HandleTableMap")?,
            dynamic_adaptation_mode: g("DynamicAdaptationMode").ok(),
        })
    }

    /// Whether the GC uses regions: a generation has no allocation start with regions.
    pub fn regions(&self) -> bool {
        self.generation.allocation_start.is_none()
    }
}

/// Indexes of the server heap fields read here, in the GC/DAC interface's field-offset
/// array (`dac_gcheap_fields.h`).
const ALLOC_ALLOCATED_FIELD: u64 = 0;
const EPHEMERAL_HEAP_SEGMENT_FIELD: u64 = 1;
const FINALIZE_QUEUE_FIELD: u64 = 2;
const GENERATION_TABLE_FIELD: u64 = 18;

/// Field `index` of an int array of field offsets; -1 (absent) gives `None`.
fn field_offset(target: &Target, offsets: u64, index: u64) -> Result<Option<u64>, ContractError> {
    if offsets == 0 {
        return Ok(None);
    }
    let v = target.read_i32(offsets + index * 4)?;
    Ok(u64::try_from(v).ok())
}
