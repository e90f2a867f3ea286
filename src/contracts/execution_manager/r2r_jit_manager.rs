//! The ReadyToRun manager: precompiled code in a loaded image, found through the image's
//! sorted RUNTIME_FUNCTION table, its hot/cold map, and the entry point → MethodDesc map
//! that the runtime fills as methods are first used.

use super::exception_clauses::{self, ExceptionClause};
use super::native_format;
use super::range_section_map::RangeSection;
use super::{
    hash_map, search, CodeBlock, Core, DebugInfoRef, GcInfoRef, JitType, Origin, RegionInfo,
};
use crate::contracts::gc_info;
use crate::contracts::runtime_function::{RuntimeFunction, RuntimeFunctionLayout};
use crate::contracts::unwind_info;
use crate::contracts::ContractError;
use crate::limits::Limit;

/// Most entries walked back from a funclet to its method's entry point.
const MAX_FUNCLET_WALK: u64 = 256;

/// The R2R section types used here.
const SECTION_EXCEPTION_INFO: u32 = 104;
const SECTION_DEBUG_INFO: u32 = 105;

/// What a lookup needs of an image's `ReadyToRunInfo`.
struct Image<'c> {
    core: &'c Core,
    info: u64,
    base: u64,
    functions: u64,
    count: u64,
    layout: RuntimeFunctionLayout,
}

impl<'c> Image<'c> {
    fn read(core: &'c Core, info: u64, base: u64) -> Result<Self, ContractError> {
        let count = core.u32(info, "ReadyToRunInfo", "NumRuntimeFunctions")?;
        let max_list = core.target.limits().max_list_length;
        if u64::from(count) > max_list {
            return Err(ContractError::LimitExceeded {
                what: "ReadyToRun runtime functions",
                addr: info,
                limit: Limit::ListLength,
                cap: max_list,
                unit: "entries",
            });
        }
        let functions = if count > 0 {
            core.ptr(info, "ReadyToRunInfo", "RuntimeFunctions")?
        } else {
            0
        };
        Ok(Image {
            core,
            info,
            base,
            functions,
            count: count.into(),
            layout: core.runtime_function_layout()?,
        })
    }

    fn function(&self, i: u64) -> u64 {
        self.layout.entry(self.functions, i)
    }

    fn entry(&self, i: u64) -> Result<RuntimeFunction, ContractError> {
        RuntimeFunction::read(&self.core.target, &self.layout, self.function(i))
    }

    fn begin(&self, i: u64) -> Result<u64, ContractError> {
        Ok(self.core.code_rva(self.entry(i)?.begin.into()))
    }

    /// Length of runtime function `i`'s code.
    fn length(&self, i: u64) -> Result<u64, ContractError> {
        unwind_info::function_length(
            &self.core.target,
            self.base,
            self.function(i),
            self.core.unwind_arch,
        )
    }

    /// The hot/cold map: u32 pairs (cold index, hot index), sorted.
    fn hot_cold(&self) -> Result<(u64, u64), ContractError> {
        let n = self
            .core
            .u32(self.info, "ReadyToRunInfo", "NumHotColdMap")?;
        if n == 0 {
            return Ok((0, 0));
        }
        if n % 2 != 0 {
            return Err(ContractError::Corrupt {
                what: "ReadyToRun hot/cold map",
                addr: self.info,
                detail: format!("{n} entries, not pairs"),
            });
        }
        let max_list = self.core.target.limits().max_list_length;
        if u64::from(n) > max_list.saturating_mul(2) {
            return Err(ContractError::LimitExceeded {
                what: "ReadyToRun hot/cold map",
                addr: self.info,
                limit: Limit::ListLength,
                cap: max_list.saturating_mul(2),
                unit: "entries (twice the list length)",
            });
        }
        Ok((
            self.core.ptr(self.info, "ReadyToRunInfo", "HotColdMap")?,
            u64::from(n / 2),
        ))
    }

    fn map_entry(&self, map: u64, i: u64) -> Result<u64, ContractError> {
        Ok(self.core.target.read_u32(map.wrapping_add(i * 4))?.into())
    }

    /// For runtime function `i`: the hot method entry it belongs to and, when the method
    /// is split, the index of its cold part.
    fn hot_and_cold(&self, i: u64) -> Result<(u64, Option<u64>), ContractError> {
        let (map, pairs) = self.hot_cold()?;
        if pairs == 0 {
            return Ok((i, None));
        }
        let first_cold = self.map_entry(map, 0)?;
        if i >= first_cold {
            // Cold: the pair whose cold range holds i (cold funclets follow their part).
            let k = search::find_covering(pairs, i, &mut |k| self.map_entry(map, 2 * k))?;
            return match k {
                Some(k) => Ok((
                    self.map_entry(map, 2 * k + 1)?,
                    Some(self.map_entry(map, 2 * k)?),
                )),
                None => Err(ContractError::Corrupt {
                    what: "ReadyToRun hot/cold map",
                    addr: map,
                    detail: format!("cold runtime function {i} precedes every pair"),
                }),
            };
        }
        let k = search::find_covering(pairs, i, &mut |k| self.map_entry(map, 2 * k + 1))?;
        match k {
            Some(k) if self.map_entry(map, 2 * k + 1)? == i => {
                Ok((i, Some(self.map_entry(map, 2 * k)?)))
            }
            _ => Ok((i, None)),
        }
    }

    /// Runtime-function index range of the cold part starting at `cold`.
    fn cold_range(&self, cold: u64) -> Result<(u64, u64), ContractError> {
        let (map, pairs) = self.hot_cold()?;
        let k =
            search::find_covering(pairs, cold, &mut |k| self.map_entry(map, 2 * k))?.unwrap_or(0);
        let last = if k + 1 < pairs {
            self.map_entry(map, 2 * (k + 1))?.saturating_sub(1)
        } else {
            self.count.saturating_sub(1)
        };
        Ok((cold, last.max(cold)))
    }

    /// The MethodDesc the entry-point map holds for `entry`, if the runtime has used it.
    fn method_desc_at(&self, entry: u64) -> Result<Option<u64>, ContractError> {
        // The map lives in the composite image's info (the image's own, when not composite).
        let composite = self
            .core
            .ptr(self.info, "ReadyToRunInfo", "CompositeInfo")?;
        let owner = if composite != 0 { composite } else { self.info };
        let map = owner.wrapping_add(
            self.core
                .descriptor
                .ty("ReadyToRunInfo")?
                .offset("EntryPointToMethodDescMap")?,
        );
        hash_map::lookup_pointer(&self.core.target, &self.core.descriptor, map, entry)
    }
}

fn image(core: &Core, section: &RangeSection) -> Result<Option<u64>, ContractError> {
    let info = core.ptr(section.r2r_module, "Module", "ReadyToRunInfo")?;
    Ok((info != 0).then_some(info))
}

/// The image's delay-load method-call thunk range, as addresses.
pub(super) fn thunk_range(
    core: &Core,
    block: &CodeBlock,
) -> Result<Option<(u64, u64)>, ContractError> {
    let (info, _, _) = parts(block);
    let thunks = core.ptr(info, "ReadyToRunInfo", "DelayLoadMethodCallThunks")?;
    if thunks == 0 {
        return Ok(None);
    }
    let va = u64::from(core.u32(thunks, "ImageDataDirectory", "VirtualAddress")?);
    let size = u64::from(core.u32(thunks, "ImageDataDirectory", "Size")?);
    let start = block.section.range_begin.wrapping_add(va);
    Ok(Some((start, start.saturating_add(size))))
}

/// The precompiled method that `ip` is in.
pub(super) fn code_block(
    core: &Core,
    section: RangeSection,
    ip: u64,
) -> Result<Option<CodeBlock>, ContractError> {
    let Some(info) = image(core, &section)? else {
        return Ok(None);
    };
    let img = Image::read(core, info, section.range_begin)?;
    let rel = ip.wrapping_sub(img.base);
    // Delay-load method-call thunks lie in the image but belong to no method.
    let thunks = core.ptr(info, "ReadyToRunInfo", "DelayLoadMethodCallThunks")?;
    if thunks != 0 {
        let va = u64::from(core.u32(thunks, "ImageDataDirectory", "VirtualAddress")?);
        let size = u64::from(core.u32(thunks, "ImageDataDirectory", "Size")?);
        if va <= rel && rel < va.saturating_add(size) {
            return Ok(None);
        }
    }
    let Some(index) = search::find_covering(img.count, rel, &mut |i| img.begin(i))? else {
        return Ok(None);
    };
    // Between functions (padding, data) is no method's code.
    if rel >= img.begin(index)?.saturating_add(img.length(index)?) {
        return Ok(None);
    }
    let (hot, cold_index) = img.hot_and_cold(index)?;
    // A method's hot part precedes the code that maps back to it.
    if hot > index {
        return Err(ContractError::Corrupt {
            what: "ReadyToRun hot/cold map",
            addr: img.info,
            detail: format!("runtime function {index} maps to hot part {hot}, after it"),
        });
    }
    // Funclets follow their method and have no entry point: walk back to the entry the
    // runtime registered. The runtime registers entry points lazily, as methods are first
    // used, so an entry found further back must also cover the address (a method's GC-info
    // code length spans its funclets): otherwise the address is in a method that never ran,
    // whose MethodDesc is not known yet.
    let hot_rel = img.begin(hot)?;
    let mut method_index = hot;
    let method_desc = loop {
        let begin = img.begin(method_index)?;
        // The table is sorted: the address's method, at or before its entry, starts at or
        // before it (a damaged table or hot/cold map can name one that starts after).
        if begin > rel {
            return Err(ContractError::Corrupt {
                what: "ReadyToRun runtime functions",
                addr: info,
                detail: format!(
                    "runtime function {method_index} starts at {begin:#x}, after the \
                     address's {rel:#x} (entry {index}): the table is not sorted"
                ),
            });
        }
        if let Some(md) = img.method_desc_at(img.base.wrapping_add(begin))? {
            // Only a real method has GC info; funclet entries in between have none.
            if method_index != hot {
                let length = hot_length_of(core, &img, method_index)?;
                if begin.saturating_add(length) <= hot_rel {
                    return Ok(None);
                }
            }
            break md;
        }
        if method_index == 0 || hot - method_index >= MAX_FUNCLET_WALK {
            return Ok(None);
        }
        method_index -= 1;
    };
    // A hot funclet's own entry is not in the hot/cold map: the method's is.
    let cold_index = match cold_index {
        None if method_index != index => img.hot_and_cold(method_index)?.1,
        known => known,
    };
    let start = img.base.wrapping_add(img.begin(method_index)?);
    let mut block = CodeBlock {
        ip,
        start,
        method_desc,
        relative_offset: ip.wrapping_sub(start),
        jit_manager: section.jit_manager,
        jit_type: JitType::R2r,
        section,
        origin: Origin::ReadyToRun {
            r2r_info: info,
            method_index,
            cold_index,
        },
    };
    // In the cold part, offsets continue after the hot code.
    if let Some(cold) = cold_index {
        let cold_start = img.base.wrapping_add(img.begin(cold)?);
        if index >= cold && ip >= cold_start {
            let region = region_info(core, &block)?;
            block.relative_offset =
                region
                    .hot_size
                    .checked_add(ip - cold_start)
                    .ok_or(ContractError::Corrupt {
                        what: "ReadyToRun method region",
                        addr: info,
                        detail: format!("hot size {:#x} overflows", region.hot_size),
                    })?;
        }
    }
    Ok(Some(block))
}

/// A descriptor type used as a stride has size 0 (a damaged descriptor).
fn zero_size(type_name: &str) -> ContractError {
    ContractError::Corrupt {
        what: "data descriptor",
        addr: 0,
        detail: format!("type {type_name} has size 0"),
    }
}

/// Hot code length of the method whose main RUNTIME_FUNCTION is `index`: its GC-info
/// code length less its cold part, if it is split.
fn hot_length_of(core: &Core, img: &Image<'_>, index: u64) -> Result<u64, ContractError> {
    let total = code_length_of(core, img, index)?;
    let Some(cold) = img.hot_and_cold(index)?.1 else {
        return Ok(total);
    };
    let (first, last) = img.cold_range(cold)?;
    let cold_size = img
        .begin(last)?
        .saturating_add(img.length(last)?)
        .saturating_sub(img.begin(first)?);
    Ok(total.saturating_sub(cold_size))
}

/// Code length of the method whose main RUNTIME_FUNCTION is `index`, from its GC info.
fn code_length_of(core: &Core, img: &Image<'_>, index: u64) -> Result<u64, ContractError> {
    let unwind = img.base.wrapping_add(img.entry(index)?.unwind_data.into());
    let size = unwind_info::unwind_data_size(&core.target, unwind, core.unwind_arch)?;
    let version = r2r_gc_version(core, img.info)?;
    Ok(gc_info::code_length(
        &core.target,
        unwind.wrapping_add(size),
        version,
        core.gc_arch,
    )?
    .into())
}

/// GCInfo version of an image's code, from its ReadyToRun version.
fn r2r_gc_version(core: &Core, info: u64) -> Result<u32, ContractError> {
    let header = core.ptr(info, "ReadyToRunInfo", "ReadyToRunHeader")?;
    let ty = core.descriptor.ty("ReadyToRunHeader")?;
    let read = |field: &str| -> Result<u16, ContractError> {
        Ok(core
            .target
            .read_u16(header.wrapping_add(ty.offset(field)?))?)
    };
    Ok(gc_info::r2r_gc_info_version(
        read("MajorVersion")?,
        read("MinorVersion")?,
    ))
}

fn parts(block: &CodeBlock) -> (u64, u64, Option<u64>) {
    match block.origin {
        Origin::ReadyToRun {
            r2r_info,
            method_index,
            cold_index,
        } => (r2r_info, method_index, cold_index),
        // Only ReadyToRun blocks reach this module.
        Origin::Jit { .. } => (0, 0, None),
    }
}

/// The RUNTIME_FUNCTION covering the block's ip (a funclet's, a cold part's, or the
/// method's own).
pub(super) fn unwind_info(core: &Core, block: &CodeBlock) -> Result<Option<u64>, ContractError> {
    let (info, _, _) = parts(block);
    let img = Image::read(core, info, block.section.range_begin)?;
    let rel = block.ip.wrapping_sub(img.base);
    Ok(search::find_covering(img.count, rel, &mut |i| img.begin(i))?.map(|i| img.function(i)))
}

/// The address range of the RUNTIME_FUNCTION covering the block's ip: a lookup of any
/// address in it walks to the same method.
pub(super) fn function_range(
    core: &Core,
    block: &CodeBlock,
) -> Result<Option<(u64, u64)>, ContractError> {
    let (info, _, _) = parts(block);
    let img = Image::read(core, info, block.section.range_begin)?;
    let rel = block.ip.wrapping_sub(img.base);
    let Some(i) = search::find_covering(img.count, rel, &mut |i| img.begin(i))? else {
        return Ok(None);
    };
    let begin = img.begin(i)?;
    let mut end = begin.saturating_add(img.length(i)?);
    // A length reaching into the next function (a damaged table) must not let this range
    // answer for that function's addresses.
    if i + 1 < img.count {
        let next = img.begin(i + 1)?;
        if next <= begin {
            return Ok(None);
        }
        end = end.min(next);
    }
    Ok(Some((
        img.base.wrapping_add(begin),
        img.base.wrapping_add(end),
    )))
}

/// The RUNTIME_FUNCTION at `index` of the image.
pub(super) fn runtime_function(core: &Core, info: u64, index: u64) -> Result<u64, ContractError> {
    let functions = core.ptr(info, "ReadyToRunInfo", "RuntimeFunctions")?;
    Ok(core.runtime_function_layout()?.entry(functions, index))
}

/// The method's GC info: right after the unwind data of its main RUNTIME_FUNCTION; its
/// version follows from the image's ReadyToRun major version.
pub(super) fn gc_info(core: &Core, block: &CodeBlock) -> Result<GcInfoRef, ContractError> {
    let (info, method_index, _) = parts(block);
    let rf = runtime_function(core, info, method_index)?;
    let unwind = block
        .section
        .range_begin
        .wrapping_add(core.runtime_function(rf)?.unwind_data.into());
    let size = unwind_info::unwind_data_size(&core.target, unwind, core.unwind_arch)?;
    Ok(GcInfoRef {
        address: unwind.wrapping_add(size),
        version: r2r_gc_version(core, info)?,
    })
}

/// Hot size from the GC info; cold start and size from the hot/cold map.
pub(super) fn region_info(core: &Core, block: &CodeBlock) -> Result<RegionInfo, ContractError> {
    let (info, _, cold_index) = parts(block);
    let gc = gc_info(core, block)?;
    let total = u64::from(gc_info::code_length(
        &core.target,
        gc.address,
        gc.version,
        core.gc_arch,
    )?);
    let Some(cold) = cold_index else {
        return Ok(RegionInfo {
            hot_size: total,
            cold_start: None,
            cold_size: 0,
        });
    };
    let img = Image::read(core, info, block.section.range_begin)?;
    let (first, last) = img.cold_range(cold)?;
    let cold_begin = img.begin(first)?;
    let cold_end = img.begin(last)?.saturating_add(img.length(last)?);
    let cold_size = cold_end.saturating_sub(cold_begin);
    Ok(RegionInfo {
        hot_size: total.saturating_sub(cold_size),
        cold_start: Some(img.base.wrapping_add(cold_begin)),
        cold_size,
    })
}

/// Debug info of precompiled code: element `method index` of the NativeArray in the
/// image's DebugInfo section holds a look-back distance to a shared blob, or the blob
/// follows it. The blob never has a flag byte.
pub(super) fn debug_info(core: &Core, block: &CodeBlock) -> Result<DebugInfoRef, ContractError> {
    let (info, method_index, _) = parts(block);
    let none = || DebugInfoRef {
        address: 0,
        has_flag_byte: Ok(false),
    };
    let located = image_section(core, info, "DebugInfoSection", SECTION_DEBUG_INFO)?;
    let Some((va, size)) = located else {
        return Ok(none());
    };
    let reader =
        native_format::NativeReader::new(&core.target, block.section.range_begin, va, size);
    let Some(element) = reader.array_get(va, method_index)? else {
        return Ok(none());
    };
    let (look_back, after) = reader.decode_unsigned(element)?;
    let blob = if look_back != 0 {
        element
            .checked_sub(look_back)
            .ok_or(ContractError::Corrupt {
                what: "ReadyToRun debug info",
                addr: block.section.range_begin.wrapping_add(element),
                detail: format!("look-back {look_back} before the image"),
            })?
    } else {
        after
    };
    Ok(DebugInfoRef {
        address: block.section.range_begin.wrapping_add(blob),
        has_flag_byte: Ok(false),
    })
}

/// (RVA, size) of one of the image's sections: newer runtimes point at its directory from a
/// `ReadyToRunInfo` field; .NET 8 is reached through the image's section table.
fn image_section(
    core: &Core,
    info: u64,
    field: &str,
    kind: u32,
) -> Result<Option<(u64, u64)>, ContractError> {
    if !core.descriptor.ty("ReadyToRunInfo")?.has_field(field) {
        return section(core, info, kind);
    }
    match core.ptr(info, "ReadyToRunInfo", field)? {
        0 => Ok(None),
        dir => Ok(Some((
            core.u32(dir, "ImageDataDirectory", "VirtualAddress")?
                .into(),
            core.u32(dir, "ImageDataDirectory", "Size")?.into(),
        ))),
    }
}

/// Bytes of a `READYTORUN_HEADER` before its core header: the signature and the major and
/// minor versions (ReadyToRun format).
const R2R_HEADER_PREFIX: u64 = 8;

/// The core header whose section table holds the image's method-level sections (debug and
/// exception info): .NET 8's descriptor reaches it through `ReadyToRunInfo.Composite`;
/// runtimes that do not describe that field through the header of the image that holds
/// the code (`CompositeInfo`'s: a component of a composite image keeps these sections in
/// the composite's header, a plain image is its own `CompositeInfo`).
fn core_header(core: &Core, info: u64) -> Result<u64, ContractError> {
    let r2r_info = core.descriptor.ty("ReadyToRunInfo")?;
    if r2r_info.has_field("Composite") {
        let composite = core.ptr(info, "ReadyToRunInfo", "Composite")?;
        return core.ptr(composite, "ReadyToRunCoreInfo", "Header");
    }
    let holder = match core.ptr(info, "ReadyToRunInfo", "CompositeInfo")? {
        0 => info,
        c => c,
    };
    let header = core.ptr(holder, "ReadyToRunInfo", "ReadyToRunHeader")?;
    Ok(header.wrapping_add(R2R_HEADER_PREFIX))
}

/// The image's section directory entry of `kind`, through the core header's section table.
fn section(core: &Core, info: u64, kind: u32) -> Result<Option<(u64, u64)>, ContractError> {
    let header = core_header(core, info)?;
    let core_header = core.descriptor.ty("ReadyToRunCoreHeader")?;
    let count = core.u32(header, "ReadyToRunCoreHeader", "NumberOfSections")?;
    if count > 1024 {
        return Err(ContractError::LimitExceeded {
            what: "ReadyToRun sections",
            addr: header,
            limit: Limit::Fixed,
            cap: 1024,
            unit: "sections",
        });
    }
    let entry = core.descriptor.ty("ReadyToRunSection")?;
    let stride = u64::from(entry.size()?);
    let first = header.wrapping_add(core_header.size()?.into());
    for i in 0..u64::from(count) {
        let s = first.wrapping_add(i * stride);
        if core.u32(s, "ReadyToRunSection", "Type")? == kind {
            let dir = s.wrapping_add(entry.offset("Section")?);
            return Ok(Some((
                core.u32(dir, "ImageDataDirectory", "VirtualAddress")?
                    .into(),
                core.u32(dir, "ImageDataDirectory", "Size")?.into(),
            )));
        }
    }
    Ok(None)
}

/// The method's clauses from the image's ExceptionInfo section: a table of (method start
/// RVA, clauses RVA) sorted by method, ending with a sentinel; a method's clauses run to
/// the next entry's.
pub(super) fn exception_clauses(
    core: &Core,
    block: &CodeBlock,
) -> Result<Vec<ExceptionClause>, ContractError> {
    let (info, _, _) = parts(block);
    let located = image_section(core, info, "ExceptionInfoSection", SECTION_EXCEPTION_INFO)?;
    let Some((va, size)) = located else {
        return Ok(Vec::new());
    };
    let base = block.section.range_begin;
    let entry = core.descriptor.ty("ExceptionLookupTableEntry")?;
    let stride = u64::from(entry.size()?);
    if stride == 0 {
        return Err(zero_size("ExceptionLookupTableEntry"));
    }
    let entries = size / stride;
    if entries < 2 {
        return Ok(Vec::new());
    }
    let table = base.wrapping_add(va);
    let method_rva = block.start.wrapping_sub(base);
    let start_of = |i: u64| -> Result<u64, ContractError> {
        Ok(core
            .u32(
                table.wrapping_add(i * stride),
                "ExceptionLookupTableEntry",
                "MethodStartRVA",
            )?
            .into())
    };
    // The last entry is the sentinel.
    let Some(i) = search::find_covering(entries - 1, method_rva, &mut |i| start_of(i))? else {
        return Ok(Vec::new());
    };
    if start_of(i)? != method_rva {
        return Ok(Vec::new());
    }
    let clauses_of = |i: u64| -> Result<u64, ContractError> {
        Ok(core
            .u32(
                table.wrapping_add(i * stride),
                "ExceptionLookupTableEntry",
                "ExceptionInfoRVA",
            )?
            .into())
    };
    let (from, to) = (clauses_of(i)?, clauses_of(i + 1)?);
    let clause_size = u64::from(core.descriptor.ty("R2RExceptionClause")?.size()?);
    if clause_size == 0 {
        return Err(zero_size("R2RExceptionClause"));
    }
    let count = to.saturating_sub(from) / clause_size;
    exception_clauses::read_r2r_clauses(
        &core.target,
        &core.descriptor,
        base.wrapping_add(from),
        count,
    )
}
