//! The tier and currency of code blocks, for `methods` and `ip2md`: one CodeVersions
//! reader and one metadata pass (the `ImplFlags` some default versions' tiers depend on)
//! per command.

use std::collections::HashMap;

use super::model::Tier;
use cdac::contracts::code_versions::CodeVersions;
use cdac::names::MethodNamer;
use cdac::runtime::Runtime;

/// One code block to place among its method's versions.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// Its MethodDesc.
    pub method_desc: u64,
    /// Start of its code.
    pub start: u64,
    /// It is precompiled code.
    pub ready_to_run: bool,
}

/// The tier and `current` of the version holding each block, in order, or why they could
/// not be read. Code that is none of its method's versions has tier unknown and is not
/// current. When the runtime's code versions cannot be read at all, one warning says why.
pub fn tiers(
    rt: &Runtime,
    namer: &mut MethodNamer,
    blocks: &[Block],
) -> Vec<Result<(Tier, Option<bool>), String>> {
    let mut cv = match CodeVersions::new(rt.target(), rt.descriptor()) {
        Ok(cv) => cv,
        Err(e) => {
            let why = format!("tiers unknown on this runtime: {e}");
            tracing::warn!("{why}");
            return blocks.iter().map(|_| Err(why.clone())).collect();
        }
    };
    let mut mds: Vec<u64> = blocks.iter().map(|b| b.method_desc).collect();
    mds.sort_unstable();
    mds.dedup();
    let flags: HashMap<u64, Option<u16>> =
        mds.iter().copied().zip(namer.impl_flags(&mds)).collect();
    blocks
        .iter()
        .map(|b| {
            let impl_flags = flags.get(&b.method_desc).copied().flatten();
            match cv.version_at(b.method_desc, b.start, b.ready_to_run, impl_flags) {
                Ok(Some(v)) => Ok((v.tier.into(), v.current)),
                Ok(None) => Ok((Tier::Unknown, Some(false))),
                Err(e) => {
                    tracing::debug!("code versions of MethodDesc {:#x}: {e}", b.method_desc);
                    Err(e.to_string())
                }
            }
        })
        .collect()
}

/// The text columns: `*` current, ` ` not, `?` unknown.
pub fn current_mark(current: Option<bool>) -> char {
    match current {
        Some(true) => '*',
        Some(false) => ' ',
        None => '?',
    }
}

/// The tier's name in text output (as in JSON).
pub fn tier_name(t: Tier) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}
