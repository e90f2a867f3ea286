//! Every piece of managed code a runtime holds: each method in each JIT code heap, and each
//! ReadyToRun method whose entry point the runtime has resolved (what a profiler or a
//! symbolizer needs to map the whole process at once, rather than one address at a time).
//!
//! * **JIT'ed code.** The EEJitManager's code heaps (`EEJitManager.AllCodeHeaps`, chained
//!   through `CodeHeapListNode.Next`; when the descriptor has no `Next` or no
//!   `EEJitManagerAddress`, as .NET 10's, the heaps of the code-heap range sections: every
//!   heap has one) are scanned *forward*, each from the map unit of its
//!   `StartAddress` to that of its last byte (`EndAddress − 1`: the runtime keeps
//!   `EndAddress` one past the last byte it allocated), so a heap costs one read of its map
//!   per 4 KiB of map (1 MiB of code) and never more than
//!   `(EndAddress − StartAddress) / 256 + 2` map units. Every start nibble is a block start (version 1 and 2 maps alike); in a
//!   version 2 map a unit holding an encoded pointer lies inside a block that started earlier
//!   and is only checked against it. The pointer-sized slot before a start holds the
//!   `RealCodeHeader` or, for a stub, its kind (≤ `StubCodeBlockLast`; skipped and counted).
//!   The MethodDesc is the header's; the size is the GC-info code length, decoded directly
//!   (cheaper than a full `code_block` lookup per method). A header whose GC info is not
//!   written yet (a method being compiled) is counted as incomplete, not reported.
//! * **ReadyToRun code.** For each range section of an R2R image, the entry point →
//!   MethodDesc map of its `ReadyToRunInfo` (the composite image's, through `CompositeInfo`,
//!   read once per map however many component images share it) is walked bucket by bucket;
//!   every used slot is an entry point the runtime resolved. Its hot size and cold part come
//!   from [`ExecutionManager::code_block`] and [`ExecutionManager::method_region_info`], which
//!   also check that the key really starts a method of the image. Methods the runtime never
//!   prepared are not in the map and not listed (their MethodDescs may not exist yet).
//!
//! [`enumerate_code`] never fails over one damaged heap, block, image or entry: it returns
//! what it could read, and one [`EnumerationError`] per part it could not (capped at
//! [`MAX_ERRORS`]). [`all_code`] is the strict form: the first such error fails it.
//!
//! Every walk is bounded by the target's [`Limits`](crate::limits::Limits): heaps per list
//! and buckets per map by the list-length limit (cycles detected), map units per heap by
//! the map-scan limit; and consecutive unreadable chunks by [`MAX_READ_FAILURES`]. A live process that exits mid-walk ends it.
//! A live process keeps compiling and freeing code: call `Target::flush` before walking it
//! again, and expect a walk to be a moving snapshot (a method compiled meanwhile may be
//! missing, or, rarely, reported as an error).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::nibble_map::{decode_pointer, is_pointer, start_offset, NibbleMap, NibbleMapVersion};
use super::range_section_map::all_range_sections;
use super::{execution_manager, hash_map, ExecutionManager, JitType};
use crate::contracts::gc_info::{self, GcInfoArch};
use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::{decode_unsigned, ReadError, Target};

/// Consecutive unreadable chunks (of a nibble map or a bucket array) before its walk stops.
pub const MAX_READ_FAILURES: u32 = 8;
/// Most errors kept; later ones are only counted ([`EnumerationStats::errors_dropped`]).
pub const MAX_ERRORS: usize = 10_000;

/// Bytes of map or bucket array read at once (never across such a boundary).
const CHUNK: u64 = 4096;

/// One method's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CodeEntry {
    /// Start of the method's (hot) code: its entry point.
    pub start: u64,
    /// Bytes of hot code from `start` (funclets included).
    pub size: u64,
    /// The method's MethodDesc.
    pub method_desc: u64,
    /// How the code was made (`jit` or `r2r`).
    pub jit_type: JitType,
    /// Start of the cold part of a split method.
    pub cold_start: Option<u64>,
    /// Bytes of cold code (0 when not split).
    pub cold_size: u64,
}

impl CodeEntry {
    /// One past the last byte of hot code.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    /// True when `addr` lies in the hot or the cold part.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end()).contains(&addr)
            || self
                .cold_start
                .is_some_and(|c| (c..c.saturating_add(self.cold_size)).contains(&addr))
    }
}

/// Which part of the walk an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ErrorSite {
    /// Finding the code heaps: the EEJitManager, or the list node at `node` (0: the head).
    CodeHeapList {
        /// Address of the list node.
        node: u64,
    },
    /// The code heap whose `CodeHeapListNode` is at `node` (its fields or its nibble map).
    CodeHeap {
        /// Address of the heap node.
        node: u64,
    },
    /// The block of code starting at `start` in a code heap.
    CodeBlock {
        /// Start of the code.
        start: u64,
    },
    /// The range section map (no ReadyToRun image could be listed).
    RangeSections,
    /// The ReadyToRun image whose `RangeSection` is at `section`.
    ReadyToRunImage {
        /// Address of the range section.
        section: u64,
    },
    /// The entry point → MethodDesc map at `map`.
    EntryPointMap {
        /// Address of the map.
        map: u64,
    },
    /// The ReadyToRun method whose entry point is `entry`.
    EntryPoint {
        /// Address of the entry.
        entry: u64,
    },
    /// Two different entries for the code at `start`.
    Duplicate {
        /// Start of the code found twice.
        start: u64,
    },
}

impl std::fmt::Display for ErrorSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorSite::CodeHeapList { node: 0 } => write!(f, "code heap list"),
            ErrorSite::CodeHeapList { node } => write!(f, "code heap list node {node:#x}"),
            ErrorSite::CodeHeap { node } => write!(f, "code heap {node:#x}"),
            ErrorSite::CodeBlock { start } => write!(f, "code block at {start:#x}"),
            ErrorSite::RangeSections => write!(f, "range sections"),
            ErrorSite::ReadyToRunImage { section } => {
                write!(f, "ReadyToRun image of range section {section:#x}")
            }
            ErrorSite::EntryPointMap { map } => write!(f, "entry point map {map:#x}"),
            ErrorSite::EntryPoint { entry } => write!(f, "ReadyToRun entry point {entry:#x}"),
            ErrorSite::Duplicate { start } => write!(f, "code at {start:#x}"),
        }
    }
}

/// A part of the walk that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{site}: {error}")]
pub struct EnumerationError {
    /// Where.
    pub site: ErrorSite,
    /// What went wrong.
    pub error: ContractError,
}

/// What one code heap's scan saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeapScan {
    /// The heap's `CodeHeapListNode`.
    pub node: u64,
    /// `StartAddress`.
    pub start: u64,
    /// `EndAddress` (inclusive).
    pub end: u64,
    /// Nibble-map units read (or tried).
    pub units_read: u64,
    /// Methods found.
    pub methods: u64,
    /// Stub blocks skipped.
    pub stubs: u64,
}

/// Counts of what the walk saw besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnumerationStats {
    /// The code heaps scanned, in list order.
    pub heaps: Vec<HeapScan>,
    /// Stub blocks in code heaps, by stub kind (`StubCodeBlockKind`).
    pub stub_kinds: BTreeMap<u64, u64>,
    /// Code blocks whose GC info is not written yet (methods being compiled).
    pub incomplete: u64,
    /// In a live process, blocks that start past the end its heap had when it was read:
    /// code allocated during the walk (not listed).
    pub allocated_meanwhile: u64,
    /// Range sections of ReadyToRun images.
    pub r2r_images: u64,
    /// Entry point maps walked (one per composite image).
    pub entry_point_maps: u64,
    /// Used slots found in those maps.
    pub entry_points: u64,
    /// Entries listed twice (dropped).
    pub duplicates: u64,
    /// Entries whose hot code runs into the next entry's start.
    pub overlaps: u64,
    /// Errors not kept past [`MAX_ERRORS`].
    pub errors_dropped: u64,
    /// Wall time of the code heap walk.
    pub jit_time: Duration,
    /// Wall time of the ReadyToRun walk.
    pub r2r_time: Duration,
}

/// The result of [`enumerate_code`]: what could be read, and what could not.
#[derive(Debug, Default)]
pub struct CodeEnumeration {
    /// The methods, sorted by start, each start once.
    pub entries: Vec<CodeEntry>,
    /// Parts of the walk that failed (empty for a sound runtime).
    pub errors: Vec<EnumerationError>,
    /// Counts of what was seen.
    pub stats: EnumerationStats,
}

/// Every JIT'ed method and every resolved ReadyToRun method of the runtime, sorted by start.
/// Fails on the first part that cannot be read; [`enumerate_code`] returns partial results.
pub fn all_code(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<Vec<CodeEntry>, ContractError> {
    let enumeration = enumerate_code(target, descriptor)?;
    match enumeration.errors.into_iter().next() {
        Some(e) => Err(e.error),
        None => Ok(enumeration.entries),
    }
}

/// Every method that can be read, with an error for each part that cannot. Fails only when
/// the ExecutionManager contract itself is unavailable.
pub fn enumerate_code(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<CodeEnumeration, ContractError> {
    let em = execution_manager(target, descriptor)?;
    Ok(enumerate_code_with(em.as_ref(), target, descriptor))
}

/// [`enumerate_code`] with an ExecutionManager the caller keeps: the ReadyToRun methods
/// resolved here are then remembered for its later lookups.
pub fn enumerate_code_with(
    em: &dyn ExecutionManager,
    target: &Target,
    descriptor: &DataDescriptor,
) -> CodeEnumeration {
    let mut walk = Walk {
        target,
        descriptor,
        em,
        out: CodeEnumeration::default(),
        stopped: false,
        live: matches!(
            target.source().kind(),
            crate::memory::TargetKind::Live { .. }
        ),
    };
    let start = Instant::now();
    walk.jit_code();
    walk.out.stats.jit_time = start.elapsed();
    if !walk.stopped {
        let start = Instant::now();
        walk.ready_to_run_code();
        walk.out.stats.r2r_time = start.elapsed();
    }
    walk.finish()
}

/// The (entry point, MethodDesc) pairs in the first `buckets` buckets of the ReadyToRun
/// entry-point map of the module whose `ReadyToRunInfo` is `info` (of its composite image
/// when it is a component): precompiled methods the runtime has prepared. Entries that do
/// not read are left out (see [`enumerate_code`] for their errors).
pub fn ready_to_run_entry_points(
    em: &dyn ExecutionManager,
    target: &Target,
    descriptor: &DataDescriptor,
    info: u64,
    buckets: u64,
) -> Result<Vec<(u64, u64)>, ContractError> {
    let layout = MapLayout::read(descriptor)?;
    let mut walk = Walk {
        target,
        descriptor,
        em,
        out: CodeEnumeration::default(),
        stopped: false,
        live: false,
    };
    let composite = walk.ptr(info, layout.composite_info)?;
    let owner = if composite != 0 { composite } else { info };
    Ok(walk.entry_points(&layout, owner.wrapping_add(layout.map), Some(buckets)))
}

/// Descriptor facts the JIT walk needs, read once.
struct JitLayout {
    version: NibbleMapVersion,
    next: Option<u64>,
    method_desc: u64,
    gc_info: u64,
    stub_last: u64,
    gc_version: u32,
    gc_arch: GcInfoArch,
}

impl JitLayout {
    fn read(em: &dyn ExecutionManager, d: &DataDescriptor) -> Result<JitLayout, ContractError> {
        let version = NibbleMapVersion::for_contract_version(em.version()).ok_or(
            ContractError::UnsupportedVersion {
                contract: "ExecutionManager",
                version: em.version().to_string(),
                supported: "1 and 2".into(),
            },
        )?;
        let node = d.ty("CodeHeapListNode")?;
        let header = super::real_code_header::RealCodeHeaderLayout::from_descriptor(d)?;
        // The EEJitManager's list needs the manager's address, which .NET 10 does not
        // publish; the range sections reach every heap too.
        let has_list = node.has_field("Next") && d.global("EEJitManagerAddress").is_ok();
        Ok(JitLayout {
            version,
            next: has_list.then(|| node.offset("Next")).transpose()?,
            method_desc: header.method_desc_offset(),
            gc_info: header.gc_info_offset()?,
            stub_last: d.global_value("StubCodeBlockLast")?,
            gc_version: u32::try_from(d.global_value("GCInfoVersion")?).unwrap_or(u32::MAX),
            gc_arch: GcInfoArch::from_name(d.global_string("Architecture")?)?,
        })
    }
}

/// Descriptor facts the ReadyToRun walk needs, read once.
struct MapLayout {
    module_r2r_info: u64,
    composite_info: u64,
    map: u64,
    buckets: u64,
    bucket_size: u64,
    keys: u64,
    values: u64,
    slots: u64,
    mask: u64,
}

impl MapLayout {
    fn read(d: &DataDescriptor) -> Result<MapLayout, ContractError> {
        let info = d.ty("ReadyToRunInfo")?;
        let bucket = d.ty("Bucket")?;
        let slots = d.global_value("HashMapSlotsPerBucket")?;
        let bucket_size = u64::from(bucket.size()?);
        if slots == 0 || slots > hash_map::MAX_SLOTS || bucket_size == 0 {
            return Err(ContractError::Corrupt {
                what: "data descriptor",
                addr: 0,
                detail: format!("{slots} hash map slots per bucket of {bucket_size} bytes"),
            });
        }
        Ok(MapLayout {
            module_r2r_info: d.ty("Module")?.offset("ReadyToRunInfo")?,
            composite_info: info.offset("CompositeInfo")?,
            map: info.offset("EntryPointToMethodDescMap")?,
            buckets: d.ty("HashMap")?.offset("Buckets")?,
            bucket_size,
            keys: bucket.offset("Keys")?,
            values: bucket.offset("Values")?,
            slots,
            mask: d.global_value("HashMapValueMask")?,
        })
    }
}

/// Whether a scan knows the last block start before the current unit (a version 2 pointer
/// unit must name it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LastStart {
    Unknown,
    Known(Option<u64>),
}

struct Walk<'a> {
    target: &'a Target,
    descriptor: &'a DataDescriptor,
    em: &'a dyn ExecutionManager,
    out: CodeEnumeration,
    /// Set when the target went away: nothing more can be read.
    stopped: bool,
    /// The target is a running process (its code heaps grow while they are walked).
    live: bool,
}

impl Walk<'_> {
    fn error(&mut self, site: ErrorSite, error: ContractError) {
        if matches!(error, ContractError::Read(ReadError::ProcessExited { .. })) {
            self.stopped = true;
        }
        if self.out.errors.len() < MAX_ERRORS {
            self.out.errors.push(EnumerationError { site, error });
        } else {
            self.out.stats.errors_dropped += 1;
        }
    }

    fn ptr(&self, addr: u64, offset: u64) -> Result<u64, ContractError> {
        let at = addr.checked_add(offset).ok_or(ReadError::AddressOverflow {
            addr,
            len: usize::try_from(offset).unwrap_or(usize::MAX),
        })?;
        Ok(self.target.read_pointer(at)?)
    }

    // ----- JIT'ed code ---------------------------------------------------------------------

    fn jit_code(&mut self) {
        let layout = match JitLayout::read(self.em, self.descriptor) {
            Ok(l) => l,
            Err(e) => return self.error(ErrorSite::CodeHeapList { node: 0 }, e),
        };
        for node in self.heap_nodes(&layout) {
            if self.stopped {
                return;
            }
            self.scan_heap(&layout, node);
        }
    }

    /// The `CodeHeapListNode`s: the EEJitManager's list, or, when that cannot be reached,
    /// the heaps of the code-heap range sections.
    fn heap_nodes(&mut self, layout: &JitLayout) -> Vec<u64> {
        let Some(next) = layout.next else {
            return match all_range_sections(self.target, self.descriptor) {
                Ok(sections) => {
                    let mut seen = BTreeSet::new();
                    sections
                        .iter()
                        .filter(|s| s.is_code_heap() && s.r2r_module == 0 && s.heap_list != 0)
                        .map(|s| s.heap_list)
                        .filter(|&n| seen.insert(n))
                        .collect()
                }
                Err(e) => {
                    self.error(ErrorSite::RangeSections, e);
                    Vec::new()
                }
            };
        };
        let mut node = match self.em.ee_jit_manager_info() {
            Ok(info) => info.heap_list,
            Err(e) => {
                self.error(ErrorSite::CodeHeapList { node: 0 }, e);
                return Vec::new();
            }
        };
        let mut nodes = Vec::new();
        let mut seen = BTreeSet::new();
        while node != 0 {
            let max_list = self.target.limits().max_list_length;
            if !seen.insert(node) || nodes.len() as u64 == max_list {
                let cyclic = (nodes.len() as u64) < max_list;
                self.error(
                    ErrorSite::CodeHeapList { node },
                    ContractError::LimitExceeded {
                        what: if cyclic {
                            "cyclic code heap list"
                        } else {
                            "code heap list"
                        },
                        addr: node,
                        limit: Limit::ListLength,
                        cap: max_list,
                        unit: "heaps",
                    },
                );
                break;
            }
            nodes.push(node);
            match self.ptr(node, next) {
                Ok(n) => node = n,
                Err(e) => {
                    self.error(ErrorSite::CodeHeapList { node }, e);
                    break;
                }
            }
        }
        nodes
    }

    /// Scans one heap's nibble map forward and reads every block it starts.
    fn scan_heap(&mut self, layout: &JitLayout, node: u64) {
        let site = ErrorSite::CodeHeap { node };
        let map = match NibbleMap::from_heap_list_node(
            self.target,
            self.descriptor,
            layout.version,
            node,
        ) {
            Ok(m) => m,
            Err(e) => return self.error(site, e),
        };
        let mut scan = HeapScan {
            node,
            start: map.heap_start,
            end: map.heap_end,
            ..HeapScan::default()
        };
        if map.heap_start < map.map_base || map.heap_end < map.heap_start {
            self.error(
                site,
                ContractError::Corrupt {
                    what: "code heap",
                    addr: node,
                    detail: format!(
                        "start {:#x}, end {:#x}, map base {:#x}",
                        map.heap_start, map.heap_end, map.map_base
                    ),
                },
            );
            self.out.stats.heaps.push(scan);
            return;
        }
        // The runtime keeps `EndAddress` one past the last byte allocated (the lookup guard
        // treats it as inclusive): no block starts there, and its unit may lie past the map.
        let first = (map.heap_start - map.map_base) / 256;
        let last = (map.heap_end.saturating_sub(1).max(map.heap_start) - map.map_base) / 256;
        let mut end = last + 1;
        let max_units = self.target.limits().max_map_scan;
        if end - first > max_units {
            self.error(
                site,
                ContractError::LimitExceeded {
                    what: "code heap nibble map",
                    addr: node,
                    limit: Limit::MapScan,
                    cap: max_units,
                    unit: "map units",
                },
            );
            end = first + max_units;
        }
        let endian = self.target.layout().endian;
        let mut last_start = LastStart::Known(None);
        let mut failures = 0;
        let mut unit = first;
        while unit < end && !self.stopped {
            let Some(addr) = unit
                .checked_mul(4)
                .and_then(|o| map.header_map.checked_add(o))
            else {
                self.error(
                    site,
                    ContractError::Read(ReadError::AddressOverflow {
                        addr: map.header_map,
                        len: usize::MAX,
                    }),
                );
                break;
            };
            let count = ((CHUNK - addr % CHUNK) / 4).clamp(1, end - unit);
            scan.units_read += count;
            let target = self.target;
            let (readable, error) = read_items(target, addr, 4, count, |i, b| {
                let value = decode_unsigned(b, endian) as u32;
                if value != 0 {
                    self.unit(layout, &map, &mut scan, &mut last_start, unit + i, value);
                }
            });
            if let Some(e) = error {
                self.error(site, e.into());
                // Blocks in the units that could not be read are unknown.
                last_start = LastStart::Unknown;
            }
            if readable > 0 {
                failures = 0;
            } else {
                failures += 1;
                if failures == MAX_READ_FAILURES {
                    self.error(
                        site,
                        ContractError::LimitExceeded {
                            what: "unreadable code heap nibble map",
                            addr,
                            limit: Limit::Fixed,
                            cap: MAX_READ_FAILURES.into(),
                            unit: "consecutive chunks",
                        },
                    );
                    break;
                }
            }
            unit += count;
        }
        self.out.stats.heaps.push(scan);
    }

    /// One non-zero map unit: a version 2 pointer into the block started last, or nibbles.
    fn unit(
        &mut self,
        layout: &JitLayout,
        map: &NibbleMap,
        scan: &mut HeapScan,
        last_start: &mut LastStart,
        unit: u64,
        value: u32,
    ) {
        let unit_addr = map.header_map.wrapping_add(unit * 4);
        let corrupt = |detail: String| ContractError::Corrupt {
            what: "nibble map unit",
            addr: unit_addr,
            detail,
        };
        let site = ErrorSite::CodeHeap { node: scan.node };
        if layout.version == NibbleMapVersion::Constant && is_pointer(value) {
            let target = decode_pointer(value).map(|rel| map.map_base.wrapping_add(rel.into()));
            match (target, *last_start) {
                (None, _) => self.error(
                    site,
                    corrupt(format!(
                        "{value:#010x} has pointer marker {} (the runtime writes 9..=12)",
                        value & 0xF
                    )),
                ),
                (Some(t), LastStart::Known(last)) if last != Some(t) => self.error(
                    site,
                    corrupt(format!(
                        "{value:#010x} points to {t:#x}, but the last block starts at {}",
                        last.map_or("no block".to_string(), |l| format!("{l:#x}"))
                    )),
                ),
                _ => {}
            }
            return;
        }
        for pos in 0..8u64 {
            let nibble = (value >> (28 - 4 * pos)) & 0xF;
            if nibble == 0 {
                continue;
            }
            let start = unit
                .checked_mul(8)
                .and_then(|b| start_offset(b + pos, nibble))
                .and_then(|rel| map.map_base.checked_add(rel));
            match start {
                Some(s) if s >= map.heap_start && s <= map.heap_end => {
                    *last_start = LastStart::Known(Some(s));
                    self.block(layout, map, scan, s);
                }
                // The heap's end was read before its map: in a process still running, a
                // block past that end is code allocated since, not damage.
                Some(s) if s > map.heap_end && self.live => {
                    self.out.stats.allocated_meanwhile += 1;
                }
                _ => self.error(
                    site,
                    corrupt(if nibble > 8 {
                        format!(
                            "{value:#010x} has nibble {nibble} at index {pos} (start nibbles are 1..=8)"
                        )
                    } else {
                        format!(
                            "{value:#010x}: nibble {nibble} at index {pos} is outside the heap [{:#x}, {:#x}]",
                            map.heap_start, map.heap_end
                        )
                    }),
                ),
            }
        }
    }

    /// The block starting at `start`: a method (listed), a stub or an unfinished method
    /// (counted).
    fn block(&mut self, layout: &JitLayout, map: &NibbleMap, scan: &mut HeapScan, start: u64) {
        match self.read_block(layout, map, start) {
            Ok(Block::Method(entry)) => {
                scan.methods += 1;
                self.out.entries.push(entry);
            }
            Ok(Block::Stub(kind)) => {
                scan.stubs += 1;
                *self.out.stats.stub_kinds.entry(kind).or_default() += 1;
            }
            Ok(Block::Incomplete) => self.out.stats.incomplete += 1,
            Err(e) => self.error(ErrorSite::CodeBlock { start }, e),
        }
    }

    fn read_block(
        &self,
        layout: &JitLayout,
        map: &NibbleMap,
        start: u64,
    ) -> Result<Block, ContractError> {
        let ps = u64::from(self.target.pointer_size());
        let slot = start.checked_sub(ps).ok_or(ContractError::Corrupt {
            what: "code header slot",
            addr: start,
            detail: "block start below the pointer size".into(),
        })?;
        let header = self.target.read_pointer(slot)?;
        if header <= layout.stub_last {
            return Ok(Block::Stub(header));
        }
        let method_desc = self.ptr(header, layout.method_desc)?;
        let gc = self.ptr(header, layout.gc_info)?;
        if gc == 0 {
            return Ok(Block::Incomplete);
        }
        let size = u64::from(gc_info::code_length(
            self.target,
            gc,
            layout.gc_version,
            layout.gc_arch,
        )?);
        // The heap's end covers every byte allocated in it.
        if start.saturating_add(size) > map.heap_end.saturating_add(1) {
            return Err(ContractError::Corrupt {
                what: "code block",
                addr: start,
                detail: format!(
                    "GC info at {gc:#x} gives {size} bytes, past the heap end {:#x}",
                    map.heap_end
                ),
            });
        }
        Ok(Block::Method(CodeEntry {
            start,
            size,
            method_desc,
            jit_type: JitType::Jit,
            cold_start: None,
            cold_size: 0,
        }))
    }

    // ----- ReadyToRun code -----------------------------------------------------------------

    fn ready_to_run_code(&mut self) {
        let sections = match all_range_sections(self.target, self.descriptor) {
            Ok(s) => s,
            Err(e) => return self.error(ErrorSite::RangeSections, e),
        };
        let images: Vec<_> = sections.iter().filter(|s| s.r2r_module != 0).collect();
        self.out.stats.r2r_images = images.len() as u64;
        if images.is_empty() {
            return;
        }
        let layout = match MapLayout::read(self.descriptor) {
            Ok(l) => l,
            Err(e) => return self.error(ErrorSite::RangeSections, e),
        };
        let mut maps = BTreeSet::new();
        for section in images {
            if self.stopped {
                return;
            }
            let site = ErrorSite::ReadyToRunImage {
                section: section.address,
            };
            let owner = self
                .ptr(section.r2r_module, layout.module_r2r_info)
                .and_then(|info| {
                    if info == 0 {
                        return Ok(0);
                    }
                    // The map lives in the composite image's info (the image's own when
                    // not composite).
                    let composite = self.ptr(info, layout.composite_info)?;
                    Ok(if composite != 0 { composite } else { info })
                });
            let map = match owner {
                Ok(0) => continue,
                Ok(owner) => owner.wrapping_add(layout.map),
                Err(e) => {
                    self.error(site, e);
                    continue;
                }
            };
            if maps.insert(map) {
                self.out.stats.entry_point_maps += 1;
                for (entry, method_desc) in self.entry_points(&layout, map, None) {
                    if self.stopped {
                        return;
                    }
                    self.r2r_method(entry, method_desc);
                }
            }
        }
    }

    /// Every used (key, MethodDesc) slot of the `PtrHashMap` embedded at `map`.
    fn entry_points(
        &mut self,
        layout: &MapLayout,
        map: u64,
        first_buckets: Option<u64>,
    ) -> Vec<(u64, u64)> {
        let site = ErrorSite::EntryPointMap { map };
        let buckets = match self.ptr(map, layout.buckets) {
            Ok(0) => return Vec::new(),
            Ok(b) => b,
            Err(e) => {
                self.error(site, e);
                return Vec::new();
            }
        };
        let count = match self.target.read_pointer(buckets) {
            Ok(c) => c,
            Err(e) => {
                self.error(site, e.into());
                return Vec::new();
            }
        };
        if !(2..=hash_map::MAX_BUCKETS).contains(&count) {
            self.error(
                site,
                ContractError::Corrupt {
                    what: "hash map bucket count",
                    addr: buckets,
                    detail: format!("{count} buckets"),
                },
            );
            return Vec::new();
        }
        // A sample reads only the first buckets.
        let count = first_buckets.map_or(count, |n| count.min(n));
        let max_list = self.target.limits().max_list_length;
        let count = if count > max_list {
            self.error(
                site,
                ContractError::LimitExceeded {
                    what: "entry point map walk",
                    addr: map,
                    limit: Limit::ListLength,
                    cap: max_list,
                    unit: "buckets",
                },
            );
            max_list
        } else {
            count
        };
        let ps = u64::from(self.target.pointer_size());
        let endian = self.target.layout().endian;
        let per_chunk = (CHUNK / layout.bucket_size).max(1);
        let mut out = Vec::new();
        let mut failures = 0;
        // Real buckets are elements 1..=count.
        let mut bucket = 1;
        while bucket <= count && !self.stopped {
            let n = per_chunk.min(count + 1 - bucket);
            let Some(addr) = bucket
                .checked_mul(layout.bucket_size)
                .and_then(|o| buckets.checked_add(o))
            else {
                break;
            };
            let target = self.target;
            let (readable, error) = read_items(target, addr, layout.bucket_size, n, |_, b| {
                let word = |off: u64| -> u64 {
                    let at = off as usize;
                    b.get(at..at + ps as usize)
                        .map_or(0, |w| decode_unsigned(w, endian))
                };
                for j in 0..layout.slots {
                    let key = word(layout.keys + j * ps);
                    // 0: empty, 1: deleted.
                    if key > 1 {
                        let value = word(layout.values + j * ps);
                        out.push((key, (value & layout.mask) << 1));
                    }
                }
            });
            if let Some(e) = error {
                self.error(site, e.into());
            }
            if readable > 0 {
                failures = 0;
            } else {
                failures += 1;
                if failures == MAX_READ_FAILURES {
                    self.error(
                        site,
                        ContractError::LimitExceeded {
                            what: "unreadable entry point map",
                            addr,
                            limit: Limit::Fixed,
                            cap: MAX_READ_FAILURES.into(),
                            unit: "consecutive chunks",
                        },
                    );
                    break;
                }
            }
            bucket += n;
        }
        self.out.stats.entry_points += out.len() as u64;
        out
    }

    /// The ReadyToRun method at `entry`, checked through the ExecutionManager.
    fn r2r_method(&mut self, entry: u64, method_desc: u64) {
        let site = ErrorSite::EntryPoint { entry };
        let block = match self.em.code_block(entry) {
            Ok(Some(b)) if b.start == entry && b.jit_type == JitType::R2r => b,
            Ok(found) => {
                let detail = match found {
                    Some(b) => format!(
                        "resolves to the {} method at {:#x}",
                        b.jit_type.as_str(),
                        b.start
                    ),
                    None => "is not in ReadyToRun code".to_string(),
                };
                return self.error(
                    site,
                    ContractError::Corrupt {
                        what: "entry point map key",
                        addr: entry,
                        detail,
                    },
                );
            }
            Err(e) => return self.error(site, e),
        };
        if block.method_desc != method_desc {
            self.error(
                site,
                ContractError::Corrupt {
                    what: "entry point map",
                    addr: entry,
                    detail: format!(
                        "slot holds MethodDesc {method_desc:#x}, lookup gives {:#x}",
                        block.method_desc
                    ),
                },
            );
        }
        match self.em.method_region_info(&block) {
            Ok(region) => self.out.entries.push(CodeEntry {
                start: entry,
                size: region.hot_size,
                method_desc,
                jit_type: JitType::R2r,
                cold_start: region.cold_start,
                cold_size: region.cold_size,
            }),
            Err(e) => self.error(site, e),
        }
    }

    // ----- result ----------------------------------------------------------------------------

    fn finish(mut self) -> CodeEnumeration {
        let mut entries = std::mem::take(&mut self.out.entries);
        entries.sort_by_key(|e| e.start);
        let mut kept: Vec<CodeEntry> = Vec::with_capacity(entries.len());
        for e in entries {
            match kept.last() {
                Some(prev) if prev.start == e.start => {
                    self.out.stats.duplicates += 1;
                    if *prev != e {
                        self.error(
                            ErrorSite::Duplicate { start: e.start },
                            ContractError::Corrupt {
                                what: "code entries",
                                addr: e.start,
                                detail: format!("listed as {prev:?} and as {e:?}"),
                            },
                        );
                    }
                }
                _ => kept.push(e),
            }
        }
        self.out.stats.overlaps =
            kept.windows(2).filter(|w| w[0].end() > w[1].start).count() as u64;
        self.out.entries = kept;
        self.out
    }
}

/// Calls `visit(i, bytes)` for each of the `n` items of `size` bytes from `addr` that can be
/// read: all in one read, or item by item when that fails (a chunk running into memory a
/// dump left out). Returns how many items were read, and the first error.
fn read_items(
    target: &Target,
    addr: u64,
    size: u64,
    n: u64,
    mut visit: impl FnMut(u64, &[u8]),
) -> (u64, Option<ReadError>) {
    let item = size as usize;
    match target.read_bytes(addr, item * n as usize) {
        Ok(bytes) => {
            for (i, b) in bytes.chunks_exact(item).enumerate() {
                visit(i as u64, b);
            }
            (n, None)
        }
        Err(first) => {
            let mut buf = vec![0u8; item];
            let mut readable = 0;
            for i in 0..n {
                let at = addr.checked_add(i * size);
                if at.is_some_and(|a| target.read_into(a, &mut buf).is_ok()) {
                    readable += 1;
                    visit(i, &buf);
                }
            }
            (readable, Some(first))
        }
    }
}

enum Block {
    Method(CodeEntry),
    Stub(u64),
    Incomplete,
}
