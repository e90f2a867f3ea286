//! Which of cdac's algorithms reads each contract version a runtime advertises: one table,
//! from (runtime flavor, contract, version as the runtime writes it) to the algorithm.
//!
//! cdac numbers its algorithms as .NET 9 and 10 numbered their contracts (integers: the
//! ExecutionManager of .NET 10 is 2). .NET 11 froze the contracts and started a new
//! numbering, written as strings with a flavor letter ("c1" for CoreCLR, "n1" for
//! NativeAOT): "c1" is whatever algorithm .NET 11 ships, not version 1 of the old line. The
//! letter is the numbering's flavor, so a version is looked up with its letter.
//! ExecutionManager "c1" is the algorithm .NET 10 called 2, PrecodeStubs "c1" the one it
//! called 3. So a string version is never parsed for a number: it is looked up here, and a
//! version missing from the table is unsupported (only the commands that need that
//! contract fail).

use crate::descriptor::ContractVersion;

/// The runtime a descriptor describes, as far as contract numbering goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// CoreCLR (`RuntimeFlavor` "Coreclr", or no such global: .NET 9 and 10).
    CoreClr,
    /// NativeAOT (`RuntimeFlavor` "NativeAOT", or contracts written "n…").
    NativeAot,
}

impl Flavor {
    /// The flavor a descriptor's `RuntimeFlavor` string names (any case); CoreCLR when it
    /// names none.
    pub fn from_global(text: Option<&str>) -> Flavor {
        match text.map(str::to_ascii_lowercase).as_deref() {
            Some("nativeaot") => Flavor::NativeAot,
            _ => Flavor::CoreClr,
        }
    }
}

/// One row: a version as a runtime writes it (its letter included), and the algorithm that
/// reads it.
struct Row {
    contract: &'static str,
    written: &'static str,
    algorithm: u64,
}

const fn coreclr(contract: &'static str, written: &'static str, algorithm: u64) -> Row {
    Row {
        contract,
        written,
        algorithm,
    }
}

/// The string versions cdac reads, each with its algorithm. Integers (.NET 9 and 10) are
/// not listed: integer N is algorithm N.
const STRING_VERSIONS: &[Row] = &[
    // .NET 11.0.0: same algorithms as .NET 10's where the data only moved (offsets come
    // from the descriptor); the ones whose meaning changed have algorithms of their own.
    coreclr("CodeVersions", "c1", 1),
    // No flag byte, a chunked header, three source-type bits (upstream's DebugInfo 2).
    coreclr("DebugInfo", "c1", 2),
    coreclr("Exception", "c1", 1),
    // The GC described by its own sub-descriptor (before: its table for debuggers, read
    // when the runtime names no GC contract).
    coreclr("GC", "c1", 1),
    // .NET 10's version 2: the range section map and the code heaps' constant-time map.
    coreclr("ExecutionManager", "c1", 2),
    // The AppDomain's list is `AssemblyList` of `Assembly*` (10: `DomainAssemblyList`): a
    // rename the AppDomain record states.
    coreclr("Loader", "c1", 1),
    coreclr("PlatformMetadata", "c1", 1),
    // .NET 10's version 3: stub and fixup precodes with their data a page on.
    coreclr("PrecodeStubs", "c1", 3),
    coreclr("RuntimeInfo", "c1", 1),
    coreclr("RuntimeTypeSystem", "c1", 1),
    // Monitors inflated to a managed System.Threading.Lock, the thin-lock word in the block.
    coreclr("SyncBlock", "c1", 1),
    // The thread store's list links Threads themselves (10: their link fields), and the
    // managed object is `ExposedObject`.
    coreclr("Thread", "c1", 2),
];

/// The algorithm cdac reads `contract` with, as a runtime advertises it; `None` when cdac
/// has none for that version. Integers are CoreCLR's old numbering (.NET 9 and 10).
pub fn algorithm(contract: &str, written: &ContractVersion) -> Option<u64> {
    match written {
        ContractVersion::Number(n) => Some(*n),
        ContractVersion::Tag(tag) => STRING_VERSIONS
            .iter()
            .find(|r| r.contract == contract && r.written == tag)
            .map(|r| r.algorithm),
    }
}

/// The versions of `contract` cdac reads, as runtimes write them: the string versions of
/// the table whose algorithm is one of `algorithms`, then the integers.
pub fn readable(contract: &str, algorithms: &[u64]) -> Vec<String> {
    let mut out: Vec<String> = STRING_VERSIONS
        .iter()
        .filter(|r| r.contract == contract && algorithms.contains(&r.algorithm))
        .map(|r| r.written.to_string())
        .collect();
    out.extend(algorithms.iter().map(u64::to_string));
    out
}

/// The flavor whose numbering a version is written in: "n…" NativeAOT's, anything else
/// CoreCLR's.
pub fn numbering(written: &ContractVersion) -> Flavor {
    match written {
        ContractVersion::Tag(t) if t.starts_with('n') => Flavor::NativeAot,
        _ => Flavor::CoreClr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_versions_are_looked_up_never_parsed() {
        let tag = |t: &str| ContractVersion::Tag(t.into());
        // "c1" is .NET 10's ExecutionManager 2 and PrecodeStubs 3, not version 1.
        assert_eq!(algorithm("ExecutionManager", &tag("c1")), Some(2));
        assert_eq!(algorithm("PrecodeStubs", &tag("c1")), Some(3));
        // A version nobody described is unknown, however it is spelled.
        assert_eq!(algorithm("SyncBlock", &tag("c9")), None);
        assert_eq!(algorithm("Thread", &tag("c2")), None);
        assert_eq!(algorithm("Thread", &tag("1")), None);
        // NativeAOT's "n1" is not CoreCLR's "c1".
        assert_eq!(algorithm("Loader", &tag("n1")), None);
        assert_eq!(numbering(&tag("n1")), Flavor::NativeAot);
        assert_eq!(numbering(&tag("c1")), Flavor::CoreClr);
        // Integers are .NET 9 and 10's numbering, which cdac's algorithms keep.
        assert_eq!(
            algorithm("ExecutionManager", &ContractVersion::Number(1)),
            Some(1)
        );
        assert_eq!(readable("ExecutionManager", &[1, 2]), ["c1", "1", "2"]);
    }

    #[test]
    fn the_flavor_is_the_runtimes_word_in_any_case() {
        assert_eq!(Flavor::from_global(Some("Coreclr")), Flavor::CoreClr);
        assert_eq!(Flavor::from_global(Some("NativeAOT")), Flavor::NativeAot);
        assert_eq!(Flavor::from_global(None), Flavor::CoreClr);
    }
}
