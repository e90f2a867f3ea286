//! The EE (JIT) manager: code in the runtime's code heaps, found through the heap's
//! nibble map and described by the `RealCodeHeader` that the pointer-sized slot just
//! before each method's first instruction points to.

use super::nibble_map::NibbleMap;
use super::range_section_map::RangeSection;
use super::real_code_header::RealCodeHeader;
use super::{search, CodeBlock, Core, DebugInfoRef, JitType, Origin};
use crate::contracts::runtime_function::RuntimeFunction;
use crate::contracts::ContractError;
use crate::limits::Limit;

/// The JIT'ed method that `ip` is in.
pub(super) fn code_block(
    core: &Core,
    section: RangeSection,
    ip: u64,
) -> Result<Option<CodeBlock>, ContractError> {
    if section.is_range_list() || section.heap_list == 0 {
        return Ok(None);
    }
    let map = NibbleMap::from_heap_list_node(
        &core.target,
        &core.descriptor,
        core.nibble,
        section.heap_list,
    )?;
    let Some(start) = map.find_method_start(&core.target, ip)? else {
        return Ok(None);
    };
    let ps = u64::from(core.target.pointer_size());
    let slot = start.checked_sub(ps).ok_or(ContractError::Corrupt {
        what: "code header slot",
        addr: start,
        detail: "method start below the pointer size".into(),
    })?;
    // The slot holds the RealCodeHeader's address, or, for stub blocks placed in code
    // heaps, a small stub kind.
    let header = core.target.read_pointer(slot)?;
    if header <= core.descriptor.global_value("StubCodeBlockLast")? {
        return Ok(None);
    }
    let header = core.real_code_header(header)?;
    Ok(Some(CodeBlock {
        ip,
        start,
        method_desc: header.method_desc,
        relative_offset: ip - start,
        jit_manager: section.jit_manager,
        jit_type: JitType::Jit,
        section,
        origin: Origin::Jit { header },
    }))
}

/// The RUNTIME_FUNCTION among the header's unwind infos that covers the block's ip.
pub(super) fn unwind_info(
    core: &Core,
    block: &CodeBlock,
    header: &RealCodeHeader,
) -> Result<Option<u64>, ContractError> {
    let (count, first) = header.unwind_infos()?;
    let max_list = core.target.limits().max_list_length;
    if u64::from(count) > max_list {
        return Err(ContractError::LimitExceeded {
            what: "unwind infos of a method",
            addr: header.address,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "entries",
        });
    }
    let layout = core.runtime_function_layout()?;
    // Unwind addresses of JIT'ed code are relative to the code heap's range section.
    let rel = block.ip.wrapping_sub(block.section.range_begin);
    let found = search::find_covering(u64::from(count), rel, &mut |i| {
        let entry = RuntimeFunction::read(&core.target, &layout, layout.entry(first, i))?;
        Ok(core.code_rva(entry.begin.into()))
    })?;
    Ok(found.map(|i| layout.entry(first, i)))
}

/// The debug info pointer, and whether its blob starts with a flag byte: with on-stack
/// replacement compiled in, or rich debug info stored, the runtime writes one. The pointer
/// is returned even when the `StoreRichDebugInfo` byte cannot be read (a dump without the
/// EEJitManager's memory): only the flag's answer is then an error.
pub(super) fn debug_info(
    core: &Core,
    block: &CodeBlock,
    header: &RealCodeHeader,
) -> Result<DebugInfoRef, ContractError> {
    let address = header.debug_info()?;
    let osr = core
        .descriptor
        .global("FeatureOnStackReplacement")
        .ok()
        .and_then(|g| g.value().ok())
        .is_some_and(|v| v != 0);
    // On-stack replacement alone implies the flag byte: the setting is not needed then.
    let has_flag_byte = if osr {
        Ok(true)
    } else {
        store_rich_debug_info(core, block)
    };
    Ok(DebugInfoRef {
        address,
        has_flag_byte,
    })
}

/// The EEJitManager's `StoreRichDebugInfo` setting. Runtimes that do not describe it (.NET
/// 10) count as off: they have on-stack replacement on every 64-bit target, which already
/// implies the flag byte.
fn store_rich_debug_info(core: &Core, block: &CodeBlock) -> Result<bool, ContractError> {
    match core.descriptor.ty("EEJitManager") {
        Ok(manager) if manager.has_field("StoreRichDebugInfo") => {
            let at = block
                .jit_manager
                .wrapping_add(manager.offset("StoreRichDebugInfo")?);
            Ok(core.target.read_u8(at)? != 0)
        }
        _ => Ok(false),
    }
}
