//! Finding the runtime module in a target and telling its version.

use std::path::Path;

use crate::descriptor::debug_header::DEBUG_HEADER_SYMBOL;
use crate::descriptor::CONTRACT_DESCRIPTOR_SYMBOL;
use crate::memory::elf_image::{self, ElfImage, ImageError, ModuleMapping};
use crate::memory::Target;

/// File name of the CoreCLR runtime on Linux.
pub const RUNTIME_FILE_NAME: &str = "libcoreclr.so";

/// The export .NET 8 and earlier have instead of a contract descriptor.
pub const DAC_TABLE_SYMBOL: &str = "g_dacTable";

/// Marker that precedes the runtime's version in its binary.
const VERSION_MARKER: &[u8] = b"@(#)Version ";

/// Cap on how much of a module is scanned for its version string.
const MAX_VERSION_SCAN: u64 = 256 << 20;

/// A module that exports runtime data.
#[derive(Debug, Clone)]
pub struct FoundModule {
    /// Where it is mapped.
    pub mapping: ModuleMapping,
    /// Its ELF headers.
    pub image: ElfImage,
    /// Address of `DotNetRuntimeContractDescriptor`, when exported (.NET 9+).
    pub contract_descriptor: Option<u64>,
    /// Address of `g_dacTable`, when exported.
    pub dac_table: Option<u64>,
    /// Address of `DotNetRuntimeDebugHeader`, when exported (a NativeAOT executable of
    /// .NET 8, 9 or 10).
    pub debug_header: Option<u64>,
    /// All exported symbols, for later lookups.
    pub exports: Vec<elf_image::DynamicSymbol>,
}

/// Finds the modules that host a runtime: every `libcoreclr.so`, or, when there is none,
/// any module exporting the contract descriptor or `g_dacTable` (a single-file app that
/// links the runtime statically) or NativeAOT's `DotNetRuntimeDebugHeader`.
pub fn find_runtime_modules(target: &Target) -> Result<Vec<FoundModule>, ImageError> {
    let modules = elf_image::modules(target.mapped_files());
    let (named, others): (Vec<_>, Vec<_>) = modules
        .into_iter()
        .partition(|m| m.file_name() == Some(RUNTIME_FILE_NAME));
    let mut found = Vec::new();
    let mut first_error = None;
    for m in &named {
        match inspect(target, m) {
            Ok(Some(f)) => found.push(f),
            Ok(None) => {
                tracing::warn!(path = %m.path.display(), "libcoreclr.so exports neither {CONTRACT_DESCRIPTOR_SYMBOL} nor {DAC_TABLE_SYMBOL}")
            }
            Err(e) => {
                tracing::warn!(path = %m.path.display(), error = %e, "cannot read runtime module");
                first_error.get_or_insert(e);
            }
        }
    }
    if found.is_empty() {
        for m in &others {
            // Most mappings are ordinary libraries; a read failure there is not our problem.
            match inspect(target, m) {
                Ok(Some(f)) => found.push(f),
                Ok(None) => {}
                Err(e) => tracing::debug!(path = %m.path.display(), error = %e, "skipping module"),
            }
        }
    }
    match (found.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(found),
    }
}

fn inspect(target: &Target, mapping: &ModuleMapping) -> Result<Option<FoundModule>, ImageError> {
    let disk = Some(mapping.path.as_path()).filter(|p| p.exists());
    let image = ElfImage::read(target, mapping.base, disk)?;
    let exports = image.dynamic_symbols(target)?;
    let find = |name: &str| exports.iter().find(|s| s.name == name).map(|s| s.address);
    let contract_descriptor = find(CONTRACT_DESCRIPTOR_SYMBOL);
    let dac_table = find(DAC_TABLE_SYMBOL);
    let debug_header = find(DEBUG_HEADER_SYMBOL);
    if contract_descriptor.is_none() && dac_table.is_none() && debug_header.is_none() {
        return Ok(None);
    }
    Ok(Some(FoundModule {
        mapping: mapping.clone(),
        image,
        contract_descriptor,
        dac_table,
        debug_header,
        exports,
    }))
}

/// The runtime's version, from the `@(#)Version` string CoreCLR embeds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeVersion {
    /// The file version, e.g. "8.0.424.16909".
    pub file_version: String,
    /// The product version, e.g. "8.0.4" (the file version's build number is
    /// patch × 100 + a two-digit year).
    pub product_version: String,
    /// The source commit, when given.
    pub commit: Option<String>,
}

impl RuntimeVersion {
    /// The major version (10 of "10.0.14"), when the product version starts with one.
    pub fn major(&self) -> Option<u32> {
        self.product_version.split('.').next()?.parse().ok()
    }

    /// A version a runtime states as a product version ("11.0.0"), as .NET 11 descriptors'
    /// `RuntimeProductVersionString`; `None` unless it is numbers and dots.
    pub fn parse_product(text: &str) -> Option<RuntimeVersion> {
        let ok = text.split('.').count() >= 2
            && text
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        ok.then(|| RuntimeVersion {
            file_version: text.to_string(),
            product_version: text.to_string(),
            commit: None,
        })
    }

    /// Parses the text after the marker: `8.0.424.16909 @Commit: 2d7e…`.
    pub fn parse(text: &str) -> Option<RuntimeVersion> {
        let mut words = text.split_whitespace();
        let file_version = words.next()?.to_string();
        let parts: Vec<u64> = file_version
            .split('.')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        if parts.len() < 3 {
            return None;
        }
        let product_version = format!("{}.{}.{}", parts[0], parts[1], parts[2] / 100);
        let commit = text
            .split("@Commit:")
            .nth(1)
            .and_then(|c| c.split_whitespace().next())
            .map(str::to_string);
        Some(RuntimeVersion {
            file_version,
            product_version,
            commit,
        })
    }
}

/// Reads the version string of a module: through the target first (the module's
/// read-only mappings), else from the file on disk.
pub fn read_version(target: &Target, mapping: &ModuleMapping) -> Option<RuntimeVersion> {
    let ranges: Vec<(u64, u64)> = target
        .mapped_files()
        .iter()
        .filter(|f| f.path == mapping.path && f.start >= mapping.base && f.end <= mapping.end)
        .map(|f| (f.start, f.end))
        .collect();
    // One budget for the whole scan, unreadable chunks included: a damaged dump can
    // describe a mapping of terabytes.
    let mut budget = MAX_VERSION_SCAN;
    for (start, end) in ranges {
        if let Some(text) = scan_target(target, start, end, &mut budget) {
            return RuntimeVersion::parse(&text);
        }
        if budget == 0 {
            break;
        }
    }
    scan_file(&mapping.path).and_then(|t| RuntimeVersion::parse(&t))
}

/// Marker of the NativeAOT compiler's note in an executable's `.comment` section
/// (`.NET: ilc 10.0.12-servicing.26422.108+95017c7…`): the version of the runtime it linked in.
const ILC_MARKER: &[u8] = b".NET: ilc ";

/// The version of the NativeAOT runtime an executable links, from the compiler's note in
/// its `.comment` section (not loaded: read from the file, when it is at hand).
pub fn read_ilc_version(path: &Path) -> Option<RuntimeVersion> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_VERSION_SCAN)
        .read_to_end(&mut bytes)
        .ok()?;
    let at = bytes
        .windows(ILC_MARKER.len())
        .rposition(|w| w == ILC_MARKER)?;
    let rest = &bytes[at + ILC_MARKER.len()..];
    let end = rest
        .iter()
        .position(|&b| b == 0 || b.is_ascii_whitespace())
        .unwrap_or(rest.len().min(128));
    let text = std::str::from_utf8(&rest[..end.min(128)]).ok()?;
    let (version, commit) = match text.split_once('+') {
        Some((v, c)) => (v, Some(c.to_string())),
        None => (text, None),
    };
    let product_version = version.split('-').next()?.to_string();
    RuntimeVersion::parse_product(&product_version)?;
    Some(RuntimeVersion {
        file_version: version.to_string(),
        product_version,
        commit,
    })
}

/// Searches `[start, end)` in chunks that overlap by the marker's length, spending at
/// most `budget` bytes (read or not).
fn scan_target(target: &Target, start: u64, end: u64, budget: &mut u64) -> Option<String> {
    const CHUNK: u64 = 1 << 20;
    let mut at = start;
    while at < end && *budget > 0 {
        let len = (end - at).min(CHUNK + 256).min(*budget);
        *budget -= len.min(CHUNK);
        if let Ok(bytes) = target.read_bytes(at, len as usize) {
            if let Some(text) = find_version(&bytes) {
                return Some(text);
            }
        }
        // An unreadable chunk (a small dump) is skipped; the top of the address space ends
        // the scan.
        at = at.checked_add(CHUNK)?;
    }
    None
}

fn scan_file(path: &Path) -> Option<String> {
    let data = crate::memory::map_regular_file(path).ok()?;
    find_version(&data)
}

/// The text after the first `@(#)Version ` marker that parses as a version.
fn find_version(bytes: &[u8]) -> Option<String> {
    let finder = memchr::memmem::Finder::new(VERSION_MARKER);
    let mut rest = bytes;
    while let Some(pos) = finder.find(rest) {
        rest = &rest[pos + VERSION_MARKER.len()..];
        let Some(end) = rest.iter().take(256).position(|&b| b == 0) else {
            continue;
        };
        if let Ok(text) = std::str::from_utf8(&rest[..end]) {
            if RuntimeVersion::parse(text).is_some() {
                return Some(text.to_string());
            }
        }
    }
    None
}

/// The architecture name used by descriptors ("x64", "arm64", …) for an ELF machine.
pub fn architecture_name(machine: u16) -> &'static str {
    match machine {
        62 => "x64",
        183 => "arm64",
        3 => "x86",
        40 => "arm",
        243 => "riscv64",
        258 => "loongarch64",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_strings() {
        let v = RuntimeVersion::parse(
            "8.0.424.16909 @Commit: 2d7eea252964e69be94cb9c847b371b23e4dd470",
        )
        .unwrap();
        assert_eq!(v.product_version, "8.0.4");
        assert_eq!(v.file_version, "8.0.424.16909");
        assert_eq!(
            v.commit.as_deref(),
            Some("2d7eea252964e69be94cb9c847b371b23e4dd470")
        );
        assert_eq!(
            RuntimeVersion::parse("9.0.725.31616")
                .unwrap()
                .product_version,
            "9.0.7"
        );
        assert_eq!(RuntimeVersion::parse("garbage"), None);
        assert_eq!(
            find_version(b"xx@(#)Version 10.0.25.52411 @Commit: abc\0yy").as_deref(),
            Some("10.0.25.52411 @Commit: abc")
        );
    }
}
