//! The per-function rows `show` prints (name filtering is the caller's).

use serde::Serialize;

use super::profile::Profile;

/// One function of a profile, as `show` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShowRow {
    /// The function's name, when the names table has one with its signature.
    pub name: Option<String>,
    /// MD5-based signature of the name.
    pub signature: u64,
    /// Total calls.
    pub call_count: u64,
    /// Sum of first-call timestamps ("order sum"): lower means earlier.
    pub order_sum: u64,
    /// Raw profiles merged in that saw the function run.
    pub merge_count: u32,
    /// Whether the function ran.
    pub covered: bool,
    /// Coverage of each block, the entry block first (hot = true).
    pub blocks: Vec<bool>,
}

impl ShowRow {
    /// Blocks that ran.
    pub fn hot_blocks(&self) -> usize {
        self.blocks.iter().filter(|&&b| b).count()
    }

    /// Blocks that did not run.
    pub fn cold_blocks(&self) -> usize {
        self.blocks.len() - self.hot_blocks()
    }
}

/// One row per function, in file order.
pub fn show_rows(profile: &Profile) -> Vec<ShowRow> {
    let names = profile.names_by_signature();
    profile
        .functions
        .iter()
        .map(|f| ShowRow {
            name: names.get(&f.signature).map(|n| n.to_string()),
            signature: f.signature,
            call_count: f.call_count,
            order_sum: f.timestamp_sum,
            merge_count: f.merge_count,
            covered: f.covered(),
            blocks: f.block_coverage(),
        })
        .collect()
}
