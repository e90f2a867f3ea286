//! Descriptors shipped with `cdac`: complete ones for runtimes that embed none (.NET 8),
//! and overlays for what a runtime's own descriptor lacks (.NET 9 has no ExecutionManager,
//! .NET 10 no exception-info field; the file formats' own layouts are in none).
//!
//! They are compact descriptor JSON plus one top-level key, `cdac`, that says which
//! runtimes they fit, whether they are complete or an overlay, and where their pointer data
//! comes from: .NET 8 and 9 export `g_dacTable`, the DAC's table of global addresses, and
//! its slots serve as pointer data (so `[[0],"pointer"]` is slot 0 of that table). An
//! overlay only fills in: whatever the runtime describes itself is kept
//! ([`DataDescriptor::fill`]).
//!
//! ```json
//! "cdac": {
//!   "name": "net8.0-linux-x64",
//!   "versionPrefix": "8.0.",
//!   "architecture": "x64",
//!   "verifiedBuildIds": ["7c3796010ffdb407df859c3884e92bcad0cf7925"],
//!   "pointerData": { "symbol": "g_dacTable", "count": 156 }
//! }
//! ```

use serde::Deserialize;

use super::error::DescriptorError;
use super::json::{self, PhysicalDescriptor};
use super::{DataDescriptor, Limits};
use crate::limits::Limit;
use crate::memory::Target;

/// The descriptors built into `cdac`, as (file name, text).
const BUILTIN: &[(&str, &str)] = &[
    (
        "net8.0-linux-x64.json",
        include_str!("../../descriptors/net8.0-linux-x64.json"),
    ),
    (
        "net9.0-linux-x64.overlay.json",
        include_str!("../../descriptors/net9.0-linux-x64.overlay.json"),
    ),
    (
        "net10.0-linux-x64.overlay.json",
        include_str!("../../descriptors/net10.0-linux-x64.overlay.json"),
    ),
    (
        "net11.0-linux-x64.overlay.json",
        include_str!("../../descriptors/net11.0-linux-x64.overlay.json"),
    ),
    (
        "net9.0-linux-arm64.overlay.json",
        include_str!("../../descriptors/net9.0-linux-arm64.overlay.json"),
    ),
    (
        "net10.0-linux-arm64.overlay.json",
        include_str!("../../descriptors/net10.0-linux-arm64.overlay.json"),
    ),
    (
        "net11.0-linux-arm64.overlay.json",
        include_str!("../../descriptors/net11.0-linux-arm64.overlay.json"),
    ),
    (
        "formats.overlay.json",
        include_str!("../../descriptors/formats.overlay.json"),
    ),
    (
        "nativeaot10.0-linux-x64.overlay.json",
        include_str!("../../descriptors/nativeaot10.0-linux-x64.overlay.json"),
    ),
    (
        "nativeaot11.0-linux-x64.overlay.json",
        include_str!("../../descriptors/nativeaot11.0-linux-x64.overlay.json"),
    ),
    (
        "nativeaot.overlay.json",
        include_str!("../../descriptors/nativeaot.overlay.json"),
    ),
];

/// The `cdac` key of a shipped descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShippedMeta {
    /// Short name shown to users.
    pub name: String,
    /// Runtime product versions this descriptor is for ("8.0." matches 8.0.x; "" matches
    /// every version).
    pub version_prefix: String,
    /// Architecture string as in the `Architecture` global ("x64"; "any" for layouts a
    /// file format fixes).
    pub architecture: String,
    /// An overlay fills in what a runtime's own descriptor lacks; otherwise the descriptor
    /// is complete and stands for one the runtime does not have.
    #[serde(default)]
    pub overlay: bool,
    /// The runtime flavor it describes: "coreclr" (the default), "nativeaot", or "any"
    /// (layouts a file format fixes).
    #[serde(default = "coreclr_flavor")]
    pub flavor: String,
    /// Build ids (hex) of runtime binaries on which every offset was checked.
    #[serde(default)]
    pub verified_build_ids: Vec<String>,
    /// Where pointer data comes from.
    pub pointer_data: Option<PointerDataSource>,
}

fn coreclr_flavor() -> String {
    "coreclr".into()
}

impl ShippedMeta {
    /// Whether it describes runtimes of `flavor` ("coreclr", "nativeaot").
    pub fn is_for_flavor(&self, flavor: &str) -> bool {
        self.flavor == "any" || self.flavor.eq_ignore_ascii_case(flavor)
    }
}

/// An exported array of pointers used as pointer data.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointerDataSource {
    /// Exported symbol of the runtime module.
    pub symbol: String,
    /// Number of pointer-sized slots to read.
    pub count: u32,
}

/// A parsed shipped descriptor.
#[derive(Debug, Clone)]
pub struct ShippedDescriptor {
    /// Where it came from (file name).
    pub source: String,
    /// What it fits.
    pub meta: ShippedMeta,
    /// Its content.
    pub physical: PhysicalDescriptor,
}

/// How well a shipped descriptor fits a runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// The runtime's build id is one the offsets were verified on.
    VerifiedBuild,
    /// Same product version line, a build nobody verified: offsets may differ.
    SameVersionLine,
    /// Made for every runtime (the layouts a file format fixes).
    EveryRuntime,
}

/// Parses a shipped descriptor (also used for `--descriptor FILE`).
pub fn parse(source: &str, text: &[u8]) -> Result<ShippedDescriptor, DescriptorError> {
    from_physical(source, json::parse(source, text)?)
}

/// A shipped descriptor from already-parsed JSON (its `cdac` key says what it fits).
pub fn from_physical(
    source: &str,
    physical: PhysicalDescriptor,
) -> Result<ShippedDescriptor, DescriptorError> {
    let meta_value =
        physical
            .extras
            .get("cdac")
            .cloned()
            .ok_or_else(|| DescriptorError::Invalid {
                descriptor: source.to_string(),
                detail: "no \"cdac\" key saying which runtimes it fits".into(),
            })?;
    let meta: ShippedMeta =
        serde_json::from_value(meta_value).map_err(|e| DescriptorError::Invalid {
            descriptor: source.to_string(),
            detail: format!("\"cdac\" key: {e}"),
        })?;
    Ok(ShippedDescriptor {
        source: source.to_string(),
        meta,
        physical,
    })
}

/// The descriptors built into this binary.
pub fn builtin() -> Result<Vec<ShippedDescriptor>, DescriptorError> {
    BUILTIN
        .iter()
        .map(|(name, text)| parse(name, text.as_bytes()))
        .collect()
}

impl Fit {
    /// "verified-build" or "same-version-line".
    pub fn as_str(self) -> &'static str {
        match self {
            Fit::VerifiedBuild => "verified-build",
            Fit::SameVersionLine => "same-version-line",
            Fit::EveryRuntime => "every-runtime",
        }
    }
}

/// How well one shipped descriptor fits a runtime, if at all.
fn fit_of(
    d: &ShippedDescriptor,
    build_id: Option<&str>,
    product_version: Option<&str>,
    architecture: &str,
) -> Option<Fit> {
    let verified = build_id.is_some_and(|id| {
        d.meta
            .verified_build_ids
            .iter()
            .any(|b| b.eq_ignore_ascii_case(id))
    });
    if verified {
        return Some(Fit::VerifiedBuild);
    }
    if d.meta.version_prefix.is_empty() && d.meta.architecture == "any" {
        return Some(Fit::EveryRuntime);
    }
    let arch =
        d.meta.architecture == "any" || d.meta.architecture.eq_ignore_ascii_case(architecture);
    let version = product_version.is_some_and(|v| v.starts_with(&d.meta.version_prefix));
    (arch && version).then_some(Fit::SameVersionLine)
}

/// The overlays that fit a runtime, most specific first (a version line's before the
/// formats' own, which fit every runtime), each with how well it fits.
pub fn overlays_for<'a>(
    candidates: &'a [ShippedDescriptor],
    build_id: Option<&str>,
    product_version: Option<&str>,
    architecture: &str,
) -> Vec<(&'a ShippedDescriptor, Fit)> {
    let mut out: Vec<(&ShippedDescriptor, Fit)> = candidates
        .iter()
        .filter(|d| d.meta.overlay)
        .filter_map(|d| Some((d, fit_of(d, build_id, product_version, architecture)?)))
        .collect();
    out.sort_by_key(|(d, _)| std::cmp::Reverse(d.meta.version_prefix.len()));
    out
}

/// Picks the complete descriptor for a runtime: one verified on its exact build first,
/// else one for its version line and architecture.
pub fn select<'a>(
    candidates: &'a [ShippedDescriptor],
    build_id: Option<&str>,
    product_version: Option<&str>,
    architecture: &str,
) -> Result<(&'a ShippedDescriptor, Fit), DescriptorError> {
    let complete = || candidates.iter().filter(|d| !d.meta.overlay);
    for wanted in [Fit::VerifiedBuild, Fit::SameVersionLine] {
        if let Some(d) =
            complete().find(|d| fit_of(d, build_id, product_version, architecture) == Some(wanted))
        {
            return Ok((d, wanted));
        }
    }
    let have: Vec<String> = complete()
        .map(|d| {
            format!(
                "{} ({}x {})",
                d.meta.name, d.meta.version_prefix, d.meta.architecture
            )
        })
        .collect();
    Err(DescriptorError::NotFound(format!(
        "no shipped descriptor fits runtime version {} on {architecture} (build id {}); cdac ships: {}",
        product_version.unwrap_or("unknown"),
        build_id.unwrap_or("unknown"),
        have.join(", ")
    )))
}

/// Builds the logical descriptor of a runtime from a shipped descriptor: reads its
/// pointer data through `resolve_symbol` (the runtime module's exports) and the target.
pub fn instantiate(
    shipped: &ShippedDescriptor,
    target: &Target,
    resolve_symbol: &dyn Fn(&str) -> Option<(u64, u64)>,
    limits: &Limits,
) -> Result<DataDescriptor, DescriptorError> {
    let pointer_data = pointer_data(shipped, target, resolve_symbol, limits)?;
    let mut out = DataDescriptor::new(target.layout());
    out.merge(&shipped.source, &shipped.physical, &pointer_data)?;
    Ok(out)
}

/// Fills `into` with what the overlay `shipped` has and it lacks (its pointer data read
/// as for [`instantiate`]).
pub fn apply_overlay(
    shipped: &ShippedDescriptor,
    into: &mut DataDescriptor,
    target: &Target,
    resolve_symbol: &dyn Fn(&str) -> Option<(u64, u64)>,
    limits: &Limits,
) -> Result<super::FillReport, DescriptorError> {
    let pointer_data = pointer_data(shipped, target, resolve_symbol, limits)?;
    into.fill(&shipped.meta.name, &shipped.physical, &pointer_data)
}

/// The shipped descriptor's pointer data: the slots of the export it names.
fn pointer_data(
    shipped: &ShippedDescriptor,
    target: &Target,
    resolve_symbol: &dyn Fn(&str) -> Option<(u64, u64)>,
    limits: &Limits,
) -> Result<Vec<u64>, DescriptorError> {
    Ok(match &shipped.meta.pointer_data {
        None => Vec::new(),
        Some(src) => {
            if src.count > limits.max_pointer_data {
                return Err(DescriptorError::TooLarge {
                    descriptor: shipped.source.clone(),
                    what: "pointer-data count",
                    limit: Limit::Fixed,
                    value: src.count.into(),
                    cap: limits.max_pointer_data.into(),
                });
            }
            let (addr, size) = resolve_symbol(&src.symbol).ok_or_else(|| {
                DescriptorError::NotFound(format!(
                    "descriptor {} reads its pointer data from the export {}, which the runtime module does not have",
                    shipped.source, src.symbol
                ))
            })?;
            let needed = u64::from(src.count) * u64::from(target.pointer_size());
            if size != 0 && size < needed {
                return Err(DescriptorError::Invalid {
                    descriptor: shipped.source.clone(),
                    detail: format!(
                        "{} slots of {} need {needed} bytes, but the runtime's {} is {size} bytes: a different runtime build",
                        src.count, src.symbol, src.symbol
                    ),
                });
            }
            target
                .read_pointers(addr, src.count as usize)
                .map_err(|source| DescriptorError::Read {
                    descriptor: shipped.source.clone(),
                    what: "pointer data",
                    source,
                })?
        }
    })
}
