//! The ExecutionManager contract: which managed method owns a code address, where it
//! starts, how big it is, and where its unwind, GC, debug and exception-handling
//! information lives.
//!
//! Version 1 and version 2 differ only in the code heaps' nibble map (linear scan, and
//! constant-time lookup). [`execution_manager`] returns the implementation of the version
//! the runtime advertises; the spec in our words is `contracts/ExecutionManager.md`.

pub mod enumerate;
pub mod exception_clauses;
pub mod hash_map;
pub mod native_format;
pub mod nibble_map;
pub mod range_section_map;
mod search;

mod ee_jit_manager;
mod r2r_jit_manager;
mod real_code_header;

use serde::Serialize;

use self::exception_clauses::ExceptionClause;
use self::nibble_map::NibbleMapVersion;
use self::range_section_map::RangeSection;
use self::real_code_header::{RealCodeHeader, RealCodeHeaderLayout};
use super::gc_info::GcInfoArch;
use super::registry::{self, Contract, ContractContext};
use super::runtime_function::{RuntimeFunction, RuntimeFunctionLayout};
use super::unwind_info::UnwindArch;
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// How a method's code was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JitType {
    /// Not known.
    Unknown,
    /// Compiled by the JIT at run time.
    Jit,
    /// Precompiled (ReadyToRun).
    R2r,
    /// Run by the interpreter.
    Interpreter,
}

impl JitType {
    /// The name used in output: "jit", "r2r", "interpreter", "unknown".
    pub fn as_str(self) -> &'static str {
        match self {
            JitType::Unknown => "unknown",
            JitType::Jit => "jit",
            JitType::R2r => "r2r",
            JitType::Interpreter => "interpreter",
        }
    }
}

/// What one code address belongs to: the answer to `GetCodeBlockHandle` and the data the
/// other operations start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBlock {
    /// The address that was looked up.
    pub ip: u64,
    /// Start of the method's (hot) code.
    pub start: u64,
    /// The method's MethodDesc.
    pub method_desc: u64,
    /// Offset of `ip` in the method, counting the hot part before a cold one.
    pub relative_offset: u64,
    /// The JIT manager object that owns the code.
    pub jit_manager: u64,
    /// How the code was produced.
    pub jit_type: JitType,
    /// The range section holding `ip`.
    pub section: RangeSection,
    pub(crate) origin: Origin,
}

/// Where a code block's details live, per JIT manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// JIT'ed code: its `RealCodeHeader`, read with the lookup.
    Jit { header: RealCodeHeader },
    /// ReadyToRun code.
    ReadyToRun {
        /// The image's `ReadyToRunInfo`.
        r2r_info: u64,
        /// Runtime-function index of the method's main (hot) entry.
        method_index: u64,
        /// Runtime-function index of the method's cold part, when it is split.
        cold_index: Option<u64>,
    },
}

/// The parts of a method's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RegionInfo {
    /// Bytes of hot code from the start.
    pub hot_size: u64,
    /// Start of the cold part, when the method is split.
    pub cold_start: Option<u64>,
    /// Bytes of cold code (0 when not split).
    pub cold_size: u64,
}

/// Where a method's GC info is, and which encoding version it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GcInfoRef {
    /// Address of the GC info.
    pub address: u64,
    /// GCInfo encoding version.
    pub version: u32,
}

/// Where a method's debug info is.
#[derive(Debug)]
pub struct DebugInfoRef {
    /// Address of the debug info (0 when there is none).
    pub address: u64,
    /// Whether the blob starts with a flag byte, or why that could not be told. For JIT'ed
    /// code without on-stack replacement the answer is the EEJitManager's
    /// `StoreRichDebugInfo` byte, which a dump may not hold: `address` is still right
    /// then, and a reader can look at the blob itself (see
    /// [`native_map`](crate::contracts::debug_info::native_map)).
    pub has_flag_byte: Result<bool, ContractError>,
}

/// What `GetEEJitManagerInfo` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EeJitManagerInfo {
    /// The EEJitManager object.
    pub address: u64,
    /// Code type it manages (0: managed IL compiled by the JIT).
    pub code_type: u32,
    /// Head of its list of code heaps.
    pub heap_list: u64,
}

/// The ExecutionManager contract's operations.
pub trait ExecutionManager: Send + Sync {
    /// The contract version implemented.
    fn version(&self) -> u64;

    /// The method code that `ip` is in, or `None` when `ip` is not in managed code (stubs,
    /// thunks, unmanaged code). `GetCodeBlockHandle`, with `GetMethodDesc`,
    /// `GetStartAddress`, `GetRelativeOffset` and `GetJITType` answered by the fields.
    fn code_block(&self, ip: u64) -> Result<Option<CodeBlock>, ContractError>;

    /// Hot size, and cold start and size for split methods (`GetMethodRegionInfo`).
    fn method_region_info(&self, block: &CodeBlock) -> Result<RegionInfo, ContractError>;

    /// Address of the RUNTIME_FUNCTION covering the block's ip (`GetUnwindInfo`).
    fn unwind_info(&self, block: &CodeBlock) -> Result<Option<u64>, ContractError>;

    /// The base the RUNTIME_FUNCTION's addresses are relative to
    /// (`GetUnwindInfoBaseAddress`).
    fn unwind_info_base_address(&self, block: &CodeBlock) -> u64 {
        block.section.range_begin
    }

    /// Where the GC info is and its version (`GetGCInfo`).
    fn gc_info(&self, block: &CodeBlock) -> Result<GcInfoRef, ContractError>;

    /// Where the debug info is (`GetDebugInfo`). Fails only when the address itself cannot
    /// be read; a flag-byte setting that cannot be read is reported in
    /// [`DebugInfoRef::has_flag_byte`].
    fn debug_info(&self, block: &CodeBlock) -> Result<DebugInfoRef, ContractError>;

    /// Start of the funclet (or main body) holding the ip (`GetFuncletStartAddress`).
    fn funclet_start(&self, block: &CodeBlock) -> Result<u64, ContractError>;

    /// True when the ip is in a funclet, not the main body (`IsFunclet`).
    fn is_funclet(&self, block: &CodeBlock) -> Result<bool, ContractError> {
        Ok(self.funclet_start(block)? != block.start)
    }

    /// The method's exception clauses (`GetExceptionClauses`).
    fn exception_clauses(&self, block: &CodeBlock) -> Result<Vec<ExceptionClause>, ContractError>;

    /// The EEJitManager and its code heaps (`GetEEJitManagerInfo`).
    fn ee_jit_manager_info(&self) -> Result<EeJitManagerInfo, ContractError>;

    /// Forgets the methods resolved so far. A live process frees and reuses code (dynamic
    /// methods, collectible assemblies): call this together with `Target::flush` before
    /// looking up addresses again after the process ran on.
    fn flush(&self);
}

/// The ExecutionManager of the version the runtime advertises (1 or 2), made through the
/// [`registry`].
pub fn execution_manager(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<Box<dyn ExecutionManager>, ContractError> {
    registry::create(&ContractContext::new(target, descriptor))
}

impl Contract for Box<dyn ExecutionManager> {
    const NAME: &'static str = "ExecutionManager";
    const VERSIONS: &'static [u64] = &[1, 2];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        // Versions 1 and 2 differ in how the nibble map finds a method's start.
        let nibble = match version {
            1 => NibbleMapVersion::Linear,
            2 => NibbleMapVersion::Constant,
            other => return registry::unsupported(Self::NAME, other, Self::VERSIONS),
        };
        let core = Core::new(&context.target, &context.descriptor, version, nibble)?;
        Ok(Box::new(core))
    }
}

/// Most methods remembered by one ExecutionManager.
const MAX_REMEMBERED: usize = 1 << 20;

/// Code ranges already resolved, so that later lookups in them skip the walk: each is a
/// range in which every address belongs to the same method, in its hot part. Valid for a
/// dump; for a live process only while its code does not change (a new ExecutionManager
/// starts empty).
#[derive(Default)]
struct Resolved {
    /// Start of a range → index in `ranges`.
    by_start: std::collections::BTreeMap<u64, usize>,
    /// (end of the range, the block as first resolved in it).
    ranges: Vec<(u64, CodeBlock)>,
}

impl Resolved {
    fn find(&self, ip: u64) -> Option<CodeBlock> {
        let (_, &i) = self.by_start.range(..=ip).next_back()?;
        let (end, block) = &self.ranges[i];
        (ip < *end).then(|| CodeBlock {
            ip,
            relative_offset: ip - block.start,
            ..block.clone()
        })
    }

    /// Remembers that `[from, end)` resolves to `block`'s method; `from` is at or after
    /// the method's start.
    fn remember(&mut self, block: &CodeBlock, from: u64, end: u64) {
        if self.ranges.len() >= MAX_REMEMBERED || end <= from || from < block.start {
            return;
        }
        // Never let two ranges overlap: that would mean code was freed and reused.
        let before = self.by_start.range(..=from).next_back();
        let after = self.by_start.range(from..).next();
        let clash = before.is_some_and(|(_, &i)| self.ranges[i].0 > from)
            || after.is_some_and(|(&s, _)| s < end);
        if !clash {
            self.by_start.insert(from, self.ranges.len());
            self.ranges.push((end, block.clone()));
        }
    }
}

/// The implementation shared by both versions; `nibble` is what differs.
pub(crate) struct Core {
    pub(crate) target: Target,
    pub(crate) descriptor: DataDescriptor,
    version: u64,
    pub(crate) nibble: NibbleMapVersion,
    pub(crate) unwind_arch: UnwindArch,
    pub(crate) gc_arch: GcInfoArch,
    platform: super::platform_metadata::PlatformMetadata,
    /// Where a `RealCodeHeader`'s fields are (`None`: the descriptor lacks one it needs;
    /// the error comes at the first JIT'ed method).
    real_code_header: Option<RealCodeHeaderLayout>,
    resolved: std::sync::RwLock<Resolved>,
}

/// The target's code-pointer conventions; when the runtime's PlatformMetadata cannot be
/// read, those of its architecture (lookups should not fail over a flag that is 0 on
/// every 64-bit target).
fn platform_or_default(
    target: &Target,
    descriptor: &DataDescriptor,
) -> super::platform_metadata::PlatformMetadata {
    use super::platform_metadata::{PlatformMetadata, HAS_ARM32_THUMB_BIT};
    super::platform_metadata::platform_metadata(target, descriptor).unwrap_or_else(|e| {
        tracing::warn!("PlatformMetadata unreadable ({e}); using the architecture's conventions");
        let arm32 = descriptor.global_string("Architecture").ok() == Some("arm");
        PlatformMetadata {
            precode_machine_descriptor: None,
            code_pointer_flags: if arm32 { HAS_ARM32_THUMB_BIT } else { 0 },
        }
    })
}

impl Core {
    fn new(
        target: &Target,
        descriptor: &DataDescriptor,
        version: u64,
        nibble: NibbleMapVersion,
    ) -> Result<Core, ContractError> {
        let arch = descriptor.global_string("Architecture")?;
        Ok(Core {
            target: target.clone(),
            descriptor: descriptor.clone(),
            version,
            nibble,
            unwind_arch: UnwindArch::from_name(arch)?,
            gc_arch: GcInfoArch::from_name(arch)?,
            platform: platform_or_default(target, descriptor),
            real_code_header: RealCodeHeaderLayout::from_descriptor(descriptor).ok(),
            resolved: Default::default(),
        })
    }

    /// A RUNTIME_FUNCTION begin RVA as a code offset: on ARM32 it carries the Thumb bit.
    pub(crate) fn code_rva(&self, rva: u64) -> u64 {
        self.platform.code_address(rva)
    }

    /// Reads a pointer at `base + field offset` of `ty`.
    pub(crate) fn ptr(&self, base: u64, ty: &str, field: &str) -> Result<u64, ContractError> {
        let off = self.descriptor.ty(ty)?.offset(field)?;
        Ok(self.target.read_pointer(base.wrapping_add(off))?)
    }

    /// The runtime's `RUNTIME_FUNCTION` layout, from the descriptor.
    pub(crate) fn runtime_function_layout(&self) -> Result<RuntimeFunctionLayout, ContractError> {
        RuntimeFunctionLayout::from_descriptor(&self.descriptor)
    }

    /// The `RUNTIME_FUNCTION` at `addr`.
    pub(crate) fn runtime_function(&self, addr: u64) -> Result<RuntimeFunction, ContractError> {
        RuntimeFunction::read(&self.target, &self.runtime_function_layout()?, addr)
    }

    /// The `RealCodeHeader` at `address`.
    pub(crate) fn real_code_header(&self, address: u64) -> Result<RealCodeHeader, ContractError> {
        let layout = match self.real_code_header {
            Some(layout) => layout,
            None => RealCodeHeaderLayout::from_descriptor(&self.descriptor)?,
        };
        RealCodeHeader::read(&self.target, &layout, address)
    }

    /// Reads a u32 at `base + field offset` of `ty`.
    pub(crate) fn u32(&self, base: u64, ty: &str, field: &str) -> Result<u32, ContractError> {
        let off = self.descriptor.ty(ty)?.offset(field)?;
        Ok(self.target.read_u32(base.wrapping_add(off))?)
    }
}

impl Core {
    /// The full lookup, without the cache of resolved methods.
    fn look_up(&self, ip: u64) -> Result<Option<CodeBlock>, ContractError> {
        let Some(section) =
            range_section_map::find_range_section(&self.target, &self.descriptor, ip)?
        else {
            return Ok(None);
        };
        // A ReadyToRun module marks an image section; else a code heap (JIT) section.
        if section.r2r_module != 0 {
            r2r_jit_manager::code_block(self, section, ip)
        } else if section.is_code_heap() {
            ee_jit_manager::code_block(self, section, ip)
        } else {
            Ok(None)
        }
    }
}

impl Core {
    /// The addresses around a freshly resolved block whose lookups give the same answer:
    /// for JIT'ed code the method's hot code (the nibble map finds its start from any of
    /// it); for ReadyToRun code only the RUNTIME_FUNCTION holding the address, since a
    /// fresh lookup answers "no method" between a method's functions (alignment padding
    /// between its main body and a funclet). Never a cold part, whose offsets do not
    /// follow from the start.
    fn cacheable_range(&self, b: &CodeBlock) -> Option<(u64, u64)> {
        if b.ip.checked_sub(b.start) != Some(b.relative_offset) {
            return None;
        }
        match b.origin {
            Origin::Jit { .. } => {
                let region = self.method_region_info(b).ok()?;
                Some((b.start, b.start.saturating_add(region.hot_size)))
            }
            Origin::ReadyToRun { .. } => {
                let (from, end) = r2r_jit_manager::function_range(self, b).ok()??;
                // A range overlapping an image's thunks (a damaged image) would let the
                // cache answer for thunk addresses: keep such functions uncached.
                let thunks = r2r_jit_manager::thunk_range(self, b).ok()?;
                let overlaps = thunks.is_some_and(|(s, e)| s < end && from < e);
                (!overlaps).then_some((from, end))
            }
        }
    }
}

impl ExecutionManager for Core {
    fn version(&self) -> u64 {
        self.version
    }

    fn code_block(&self, ip: u64) -> Result<Option<CodeBlock>, ContractError> {
        // A code pointer (Thumb bit on ARM32) to the address it stands for.
        let ip = self.platform.code_address(ip);
        if let Some(hit) = self.resolved.read().ok().and_then(|r| r.find(ip)) {
            return Ok(Some(hit));
        }
        let block = self.look_up(ip)?;
        if let Some(b) = &block {
            if let Some((from, end)) = self.cacheable_range(b) {
                if let Ok(mut r) = self.resolved.write() {
                    r.remember(b, from, end);
                }
            }
        }
        Ok(block)
    }

    fn method_region_info(&self, block: &CodeBlock) -> Result<RegionInfo, ContractError> {
        match block.origin {
            Origin::Jit { .. } => {
                let gc = self.gc_info(block)?;
                let hot = super::gc_info::code_length(
                    &self.target,
                    gc.address,
                    gc.version,
                    self.gc_arch,
                )?;
                Ok(RegionInfo {
                    hot_size: u64::from(hot),
                    cold_start: None,
                    cold_size: 0,
                })
            }
            Origin::ReadyToRun { .. } => r2r_jit_manager::region_info(self, block),
        }
    }

    fn unwind_info(&self, block: &CodeBlock) -> Result<Option<u64>, ContractError> {
        match block.origin {
            Origin::Jit { header } => ee_jit_manager::unwind_info(self, block, &header),
            Origin::ReadyToRun { .. } => r2r_jit_manager::unwind_info(self, block),
        }
    }

    fn gc_info(&self, block: &CodeBlock) -> Result<GcInfoRef, ContractError> {
        match block.origin {
            Origin::Jit { header } => Ok(GcInfoRef {
                address: header.gc_info()?,
                version: u32::try_from(self.descriptor.global_value("GCInfoVersion")?)
                    .unwrap_or(u32::MAX),
            }),
            Origin::ReadyToRun { .. } => r2r_jit_manager::gc_info(self, block),
        }
    }

    fn debug_info(&self, block: &CodeBlock) -> Result<DebugInfoRef, ContractError> {
        match block.origin {
            Origin::Jit { header } => ee_jit_manager::debug_info(self, block, &header),
            Origin::ReadyToRun { .. } => r2r_jit_manager::debug_info(self, block),
        }
    }

    fn funclet_start(&self, block: &CodeBlock) -> Result<u64, ContractError> {
        let Some(rf) = self.unwind_info(block)? else {
            return Ok(block.start);
        };
        let begin = self.code_rva(self.runtime_function(rf)?.begin.into());
        Ok(block.section.range_begin.wrapping_add(begin))
    }

    fn exception_clauses(&self, block: &CodeBlock) -> Result<Vec<ExceptionClause>, ContractError> {
        match block.origin {
            Origin::Jit { header } => exception_clauses::read_jit_clauses(
                &self.target,
                &self.descriptor,
                header.eh_info()?,
            ),
            Origin::ReadyToRun { .. } => r2r_jit_manager::exception_clauses(self, block),
        }
    }

    fn flush(&self) {
        if let Ok(mut r) = self.resolved.write() {
            *r = Resolved::default();
        }
    }

    fn ee_jit_manager_info(&self) -> Result<EeJitManagerInfo, ContractError> {
        let variable = self.descriptor.global_value("EEJitManagerAddress")?;
        let address = self.target.read_pointer(variable)?;
        Ok(EeJitManagerInfo {
            address,
            code_type: 0,
            heap_list: self.ptr(address, "EEJitManager", "AllCodeHeaps")?,
        })
    }
}
