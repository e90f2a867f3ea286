//! Function-coverage profiles built from a list of names, for code no MIP compiler
//! instrumented (the .NET methods `cdac coverage` finds ran).

use super::bytes::fit_u32;
use super::error::Result;
use super::header::{FileKind, Header, Layout, ProfileFlags};
use super::md5::{md5_hash, module_hash};
use super::profile::{Profile, ProfileFunction};

/// A `.mip` of type function coverage for `link_unit`, one function per `(name, covered)`
/// in order, as if merged from a single coverage run.
///
/// - Module hash: [`module_hash`] of `link_unit`; signatures: [`md5_hash`] of each name.
/// - A covered function has merge count 1 and call count 1 (what merging one coverage
///   run gives); an uncovered one has zeros.
/// - There is no raw section, so function `i` gets the raw offset a coverage `.mipraw` of
///   these functions would give it (header size + `i`, one byte per record); code offset,
///   size and CFG signature are 0; there are no blocks or call edges.
/// - The names table is sorted and without duplicates, as LLVM's writer makes it.
pub fn function_coverage_profile<I, S>(
    link_unit: &str,
    functions: I,
    layout: Layout,
) -> Result<Profile>
where
    I: IntoIterator<Item = (S, bool)>,
    S: AsRef<str>,
{
    let mut out = Vec::new();
    let mut names = Vec::new();
    for (i, (name, covered)) in functions.into_iter().enumerate() {
        let name = name.as_ref();
        out.push(ProfileFunction {
            signature: md5_hash(name),
            raw_profile_offset: fit_u32(layout.header_size() + i, "raw profile offset")?,
            function_start_offset: 0,
            function_size: 0,
            cfg_signature: 0,
            merge_count: u32::from(covered),
            call_count: u64::from(covered),
            timestamp_sum: 0,
            blocks: Vec::new(),
            call_edges: Vec::new(),
        });
        names.push(name.to_string());
    }
    names.sort();
    names.dedup();
    Ok(Profile {
        header: Header::new(
            layout,
            FileKind::Profile,
            ProfileFlags::FUNCTION_COVERAGE,
            module_hash(link_unit),
        ),
        functions: out,
        names,
        names_encoding: Default::default(),
    })
}
