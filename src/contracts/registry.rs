//! The contract registry: which contracts cdac implements and in which versions (one list,
//! [`SUPPORTED`]), the one way a contract is made ([`Contract::create`], after the version
//! the runtime advertises is checked against that list), and a lazy cache of the contracts
//! of one runtime ([`Contracts`], which [`Runtime::contracts`] holds).
//!
//! A contract owns what it reads (a [`Target`] and a [`DataDescriptor`], both cheap
//! clones), so a cached contract borrows nothing and lives as long as whoever holds it.
//!
//! [`Runtime::contracts`]: crate::runtime::Runtime::contracts

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::code_versions::CodeVersions;
use super::debug_info::DebugInfoFormat;
use super::exception_trace::TraceLayout;
use super::execution_manager::ExecutionManager;
use super::gc::GcHeap;
use super::loader::Loader;
use super::platform_metadata::PlatformMetadata;
use super::precode_stubs::PrecodeStubs;
use super::runtime_info::RuntimeInfo;
use super::runtime_type_system::RuntimeTypeSystem;
use super::sync_block::SyncBlocks;
use super::thread::Threads;
use super::versions::{self, Flavor};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// What a contract is made from: the runtime as the contracts see it.
#[derive(Debug, Clone)]
pub struct ContractContext {
    /// The target's memory.
    pub target: Target,
    /// The runtime's data descriptor, with cdac's overlays applied.
    pub descriptor: DataDescriptor,
    /// The exported `g_dacTable` (address, size in bytes), where .NET 8 and 9 keep their
    /// Frame vtables; `None` when the runtime exports none or it is unknown.
    pub dac_table: Option<(u64, u64)>,
    /// The runtime's major version from its version string, when known: some formats
    /// changed without a contract version to say so.
    pub major: Option<u32>,
}

impl ContractContext {
    /// A context of memory and a descriptor only (no `g_dacTable`, no version string), as
    /// tests and hosts without a runtime module have.
    pub fn new(target: &Target, descriptor: &DataDescriptor) -> ContractContext {
        ContractContext {
            target: target.clone(),
            descriptor: descriptor.clone(),
            dac_table: None,
            major: None,
        }
    }
}

/// A versioned contract cdac implements.
pub trait Contract: Sized {
    /// The name the runtime advertises it under.
    const NAME: &'static str;
    /// The versions implemented here.
    const VERSIONS: &'static [u64];

    /// Makes the contract of `version`, one of [`Self::VERSIONS`] (the registry checked
    /// that the runtime advertises it). Call [`create`] rather than this.
    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError>;

    /// What to do when the runtime does not advertise the contract at all: `None` (the
    /// default) makes that a [`ContractError::Missing`]; contracts whose data older
    /// runtimes have without naming it give the reader for those runtimes.
    fn when_absent(_context: &ContractContext) -> Option<Result<Self, ContractError>> {
        None
    }
}

/// One implemented contract and its versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supported {
    /// The contract's name.
    pub name: &'static str,
    /// Its versions cdac implements.
    pub versions: &'static [u64],
}

const fn entry<C: Contract>() -> Supported {
    Supported {
        name: C::NAME,
        versions: C::VERSIONS,
    }
}

/// Every contract cdac implements, with its versions: the only list of them.
pub const SUPPORTED: &[Supported] = &[
    entry::<CodeVersions>(),
    entry::<DebugInfoFormat>(),
    entry::<TraceLayout>(),
    entry::<Box<dyn ExecutionManager>>(),
    entry::<GcHeap>(),
    entry::<Loader>(),
    entry::<PlatformMetadata>(),
    entry::<PrecodeStubs>(),
    entry::<RuntimeInfo>(),
    entry::<RuntimeTypeSystem>(),
    entry::<SyncBlocks>(),
    entry::<Threads>(),
];

/// Contracts whose data cdac reads without a reader of the contract itself, each with how:
/// their algorithms are fixed by formats cdac decodes on its own (GC info, metadata,
/// unwinding) or reached through contracts it implements.
pub const READ_BY_OWN_MEANS: &[(&str, &str)] = &[
    (
        "EcmaMetadata",
        "metadata read from each module's image (src/formats/ecma)",
    ),
    ("GCInfo", "GC info decoded by cdac (src/contracts/gc_info)"),
    (
        "ManagedTypeSource",
        "managed types found by name in the loaded modules",
    ),
    (
        "Object",
        "objects read through RuntimeTypeSystem (src/inspect)",
    ),
    ("ReJIT", "IL code versions read by CodeVersions"),
    (
        "SHash",
        "the hash tables CodeVersions and the Loader use, read where used",
    ),
    ("Signature", "signatures decoded by cdac's ECMA-335 reader"),
    (
        "StackWalk",
        "stacks walked by cdac (unwind data, CFI, explicit Frames: src/stacks)",
    ),
];

/// How cdac reads a contract it has no reader of, when it reads that data at all.
pub fn read_by_own_means(name: &str) -> Option<&'static str> {
    READ_BY_OWN_MEANS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, how)| *how)
}

/// The versions of contract `name` cdac implements, if any.
pub fn supported_versions(name: &str) -> Option<&'static [u64]> {
    SUPPORTED
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.versions)
}

/// "1", "1 and 2", "1, 2 and 3".
fn list_versions(versions: &[u64]) -> String {
    let text: Vec<String> = versions.iter().map(u64::to_string).collect();
    list_words(&text)
}

/// "a", "a and b", "a, b and c" ("none" for none).
fn list_words(words: &[String]) -> String {
    match words.split_last() {
        None => "none".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The versions of `name` cdac reads, as runtimes write them, in words ("c1, 1 and 2").
pub fn readable_versions(name: &str, versions: &[u64]) -> String {
    list_words(&versions::readable(name, versions))
}

/// The error for a version outside a contract's list: what a `match` on the version in
/// [`Contract::create`] answers for versions it has no arm for.
pub fn unsupported<T>(
    name: &'static str,
    version: u64,
    versions: &'static [u64],
) -> Result<T, ContractError> {
    Err(ContractError::UnsupportedVersion {
        contract: name,
        version: version.to_string(),
        supported: list_versions(versions),
    })
}

/// The version of `name` the runtime advertises, as the algorithm cdac reads it with (the
/// table of [`versions`]): `Ok(None)` when the runtime does not advertise
/// the contract, a typed error when it advertises a version cdac has no algorithm for, or
/// one whose algorithm is not among `versions`.
pub fn advertised_version(
    descriptor: &DataDescriptor,
    name: &'static str,
    versions: &'static [u64],
) -> Result<Option<u64>, ContractError> {
    let Some(advertised) = descriptor.contract(name) else {
        return Ok(None);
    };
    match versions::algorithm(name, advertised) {
        Some(n) if versions.contains(&n) => Ok(Some(n)),
        _ => Err(ContractError::UnsupportedVersion {
            contract: name,
            version: advertised.to_string(),
            supported: readable_versions(name, versions),
        }),
    }
}

/// The runtime flavor a descriptor describes: its `RuntimeFlavor` string (.NET 11), else
/// NativeAOT when it advertises contracts in NativeAOT's numbering ("n1"), else CoreCLR.
pub fn flavor_of(descriptor: &DataDescriptor) -> Flavor {
    if let Ok(text) = descriptor.global_string("RuntimeFlavor") {
        return Flavor::from_global(Some(text));
    }
    let native_aot = descriptor
        .contracts()
        .values()
        .any(|v| versions::numbering(v) == Flavor::NativeAot);
    if native_aot {
        Flavor::NativeAot
    } else {
        Flavor::CoreClr
    }
}

/// [`advertised_version`] for a contract named at run time (the names in [`SUPPORTED`]).
pub fn advertised_version_of(
    descriptor: &DataDescriptor,
    name: &str,
    versions: &'static [u64],
) -> Result<Option<u64>, ContractError> {
    match SUPPORTED.iter().find(|s| s.name == name) {
        Some(s) => advertised_version(descriptor, s.name, versions),
        None => Ok(None),
    }
}

/// Makes contract `C` for a runtime: checks the version it advertises against
/// [`Contract::VERSIONS`] and builds that version (or the reader for runtimes that do not
/// advertise it, where the contract has one).
pub fn create<C: Contract>(context: &ContractContext) -> Result<C, ContractError> {
    match advertised_version(&context.descriptor, C::NAME, C::VERSIONS)? {
        Some(version) => C::create(context, version),
        None => {
            C::when_absent(context).unwrap_or(Err(ContractError::Missing { contract: C::NAME }))
        }
    }
}

/// The contracts of one runtime, each made on first use and kept. A contract that could
/// not be made is tried again on the next call (its error is not kept).
pub struct Contracts {
    context: ContractContext,
    execution_manager: OnceLock<Arc<dyn ExecutionManager>>,
    threads: OnceLock<Threads>,
    precode_stubs: OnceLock<PrecodeStubs>,
    code_versions: OnceLock<Mutex<CodeVersions>>,
    loader: OnceLock<Loader>,
    runtime_type_system: OnceLock<RuntimeTypeSystem>,
    runtime_info: OnceLock<RuntimeInfo>,
    platform_metadata: OnceLock<PlatformMetadata>,
    debug_info: OnceLock<DebugInfoFormat>,
    exception: OnceLock<TraceLayout>,
    gc: OnceLock<GcHeap>,
    sync_blocks: OnceLock<SyncBlocks>,
}

impl std::fmt::Debug for Contracts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contracts")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// The cached value of `cell`, made by `make` if there is none yet.
fn cached<T>(
    cell: &OnceLock<T>,
    make: impl FnOnce() -> Result<T, ContractError>,
) -> Result<&T, ContractError> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let made = make()?;
    // Another thread may have set it meanwhile: either value is the same contract.
    Ok(cell.get_or_init(|| made))
}

impl Contracts {
    /// An empty cache over `context`.
    pub fn new(context: ContractContext) -> Contracts {
        Contracts {
            context,
            execution_manager: OnceLock::new(),
            threads: OnceLock::new(),
            precode_stubs: OnceLock::new(),
            code_versions: OnceLock::new(),
            loader: OnceLock::new(),
            runtime_type_system: OnceLock::new(),
            runtime_info: OnceLock::new(),
            platform_metadata: OnceLock::new(),
            debug_info: OnceLock::new(),
            exception: OnceLock::new(),
            gc: OnceLock::new(),
            sync_blocks: OnceLock::new(),
        }
    }

    /// What the contracts are made from.
    pub fn context(&self) -> &ContractContext {
        &self.context
    }

    /// ExecutionManager: which method a code address is in, code enumeration.
    pub fn execution_manager(&self) -> Result<&dyn ExecutionManager, ContractError> {
        self.shared_execution_manager_ref().map(|em| em.as_ref())
    }

    /// The same ExecutionManager, as a handle that outlives this borrow (a stack walker
    /// keeps one).
    pub fn shared_execution_manager(&self) -> Result<Arc<dyn ExecutionManager>, ContractError> {
        self.shared_execution_manager_ref().cloned()
    }

    fn shared_execution_manager_ref(&self) -> Result<&Arc<dyn ExecutionManager>, ContractError> {
        cached(&self.execution_manager, || {
            create::<Box<dyn ExecutionManager>>(&self.context).map(Arc::from)
        })
    }

    /// Forgets what the contracts remember of target memory (the ExecutionManager's
    /// resolved methods): call with [`Target::flush`] when a live process ran on.
    pub fn flush(&self) {
        if let Some(em) = self.execution_manager.get() {
            em.flush();
        }
    }

    /// Thread: the thread list, Frames, exceptions in flight.
    pub fn threads(&self) -> Result<&Threads, ContractError> {
        cached(&self.threads, || create(&self.context))
    }

    /// PrecodeStubs: the method behind a precode or stub address.
    pub fn precode_stubs(&self) -> Result<&PrecodeStubs, ContractError> {
        cached(&self.precode_stubs, || create(&self.context))
    }

    /// CodeVersions: the native code versions of a method and their tiers. It remembers
    /// tables it has read, hence the lock.
    pub fn code_versions(&self) -> Result<MutexGuard<'_, CodeVersions>, ContractError> {
        let cell = cached(&self.code_versions, || {
            create(&self.context).map(Mutex::new)
        })?;
        // A panic while the lock was held leaves only caches behind: still usable.
        Ok(cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Loader: modules, assemblies and their metadata.
    pub fn loader(&self) -> Result<&Loader, ContractError> {
        cached(&self.loader, || create(&self.context))
    }

    /// RuntimeTypeSystem: MethodDescs and MethodTables.
    pub fn runtime_type_system(&self) -> Result<&RuntimeTypeSystem, ContractError> {
        cached(&self.runtime_type_system, || create(&self.context))
    }

    /// RuntimeInfo: the runtime's architecture, operating system and flavor.
    pub fn runtime_info(&self) -> Result<RuntimeInfo, ContractError> {
        cached(&self.runtime_info, || create(&self.context)).copied()
    }

    /// PlatformMetadata: code-pointer conventions and the precode machine descriptor.
    pub fn platform_metadata(&self) -> Result<PlatformMetadata, ContractError> {
        cached(&self.platform_metadata, || create(&self.context)).copied()
    }

    /// DebugInfo: how the runtime encodes native→IL maps.
    pub fn debug_info(&self) -> Result<DebugInfoFormat, ContractError> {
        cached(&self.debug_info, || create(&self.context)).copied()
    }

    /// Exception: the layout of captured exception stack traces.
    pub fn exception(&self) -> Result<TraceLayout, ContractError> {
        cached(&self.exception, || create(&self.context)).copied()
    }

    /// GC: the managed heap's heaps, generations and segments.
    pub fn gc(&self) -> Result<&GcHeap, ContractError> {
        cached(&self.gc, || create(&self.context))
    }

    /// SyncBlock: the sync table and the monitors in sync blocks.
    pub fn sync_blocks(&self) -> Result<&SyncBlocks, ContractError> {
        cached(&self.sync_blocks, || create(&self.context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    /// A descriptor that advertises only `contract`, in `version` (JSON text: a number or
    /// a tag), for a 64-bit target.
    fn advertising(contract: &str, version: &str) -> ContractContext {
        let json = format!(
            r#"{{"contracts":{{"{contract}":{version}}},"globals":{{"Architecture":"x64"}}}}"#
        );
        let physical = crate::descriptor::json::parse("test", json.as_bytes()).unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        let target = MemoryBuilder::new(DataLayout::LE64).into_target();
        ContractContext::new(&target, &d)
    }

    /// Every way a contract is made (the generic `create` and the cache's accessor) for
    /// one contract: the answers of both, as text for errors.
    fn made(name: &str, context: &ContractContext) -> [Result<(), ContractError>; 2] {
        fn direct<C: Contract>(c: &ContractContext) -> Result<(), ContractError> {
            create::<C>(c).map(|_| ())
        }
        let cache = Contracts::new(context.clone());
        match name {
            "CodeVersions" => [
                direct::<CodeVersions>(context),
                cache.code_versions().map(|_| ()),
            ],
            "DebugInfo" => [
                direct::<DebugInfoFormat>(context),
                cache.debug_info().map(|_| ()),
            ],
            "Exception" => [
                direct::<TraceLayout>(context),
                cache.exception().map(|_| ()),
            ],
            "ExecutionManager" => [
                direct::<Box<dyn ExecutionManager>>(context),
                cache.execution_manager().map(|_| ()),
            ],
            "Loader" => [direct::<Loader>(context), cache.loader().map(|_| ())],
            "PlatformMetadata" => [
                direct::<PlatformMetadata>(context),
                cache.platform_metadata().map(|_| ()),
            ],
            "PrecodeStubs" => [
                direct::<PrecodeStubs>(context),
                cache.precode_stubs().map(|_| ()),
            ],
            "RuntimeInfo" => [
                direct::<RuntimeInfo>(context),
                cache.runtime_info().map(|_| ()),
            ],
            "RuntimeTypeSystem" => [
                direct::<RuntimeTypeSystem>(context),
                cache.runtime_type_system().map(|_| ()),
            ],
            "Thread" => [direct::<Threads>(context), cache.threads().map(|_| ())],
            "GC" => [direct::<GcHeap>(context), cache.gc().map(|_| ())],
            "SyncBlock" => [
                direct::<SyncBlocks>(context),
                cache.sync_blocks().map(|_| ()),
            ],
            other => panic!("no test arm for contract {other}: add one"),
        }
    }

    #[test]
    fn an_unsupported_version_of_every_contract_is_refused_by_name() {
        for s in SUPPORTED {
            // One past the newest version (1 for a contract read only on runtimes that
            // do not name it).
            let above = s.versions.iter().max().map_or(1, |v| v + 1);
            for (json, shown) in [
                (above.to_string(), above.to_string()),
                ("\"c0\"".to_string(), "c0".to_string()),
                ("\"future-tag\"".to_string(), "future-tag".to_string()),
            ] {
                let context = advertising(s.name, &json);
                for answer in made(s.name, &context) {
                    match answer {
                        Err(ContractError::UnsupportedVersion {
                            contract,
                            version,
                            supported,
                        }) => {
                            assert_eq!(contract, s.name);
                            assert_eq!(version, shown, "{}", s.name);
                            assert_eq!(supported, readable_versions(s.name, s.versions));
                        }
                        other => panic!("{} {json}: {other:?}", s.name),
                    }
                }
            }
        }
    }

    #[test]
    fn a_contract_the_runtime_does_not_name_is_missing_unless_older_runtimes_have_it() {
        // Advertise some other contract only.
        let context = advertising("SomethingElse", "1");
        for s in SUPPORTED {
            for answer in made(s.name, &context) {
                match s.name {
                    // Architecture conventions and the format by version stand in.
                    "PlatformMetadata" | "DebugInfo" => assert!(answer.is_ok(), "{}", s.name),
                    _ => match answer {
                        Err(ContractError::Missing { contract }) => assert_eq!(contract, s.name),
                        other => panic!("{}: {other:?}", s.name),
                    },
                }
            }
        }
        // The exception trace layout of a runtime that does not name it follows its
        // version string, when there is one.
        let mut net8 = context.clone();
        net8.major = Some(8);
        assert_eq!(create::<TraceLayout>(&net8).unwrap(), TraceLayout::Net8);
    }

    #[test]
    fn versions_read_as_a_list() {
        assert_eq!(list_versions(&[1]), "1");
        assert_eq!(list_versions(&[1, 2]), "1 and 2");
        assert_eq!(list_versions(&[1, 2, 3]), "1, 2 and 3");
    }

    #[test]
    fn every_contract_is_listed_once() {
        let mut names: Vec<&str> = SUPPORTED.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "{names:?}");
        // Every contract has a version: GC and SyncBlock are 1 (.NET 11's "c1"; earlier
        // runtimes, which do not advertise them, are read with the same algorithm).
        assert!(SUPPORTED.iter().all(|s| !s.versions.is_empty()));
        assert_eq!(supported_versions("ExecutionManager"), Some(&[1, 2][..]));
        assert_eq!(supported_versions("PrecodeStubs"), Some(&[1, 2, 3][..]));
        assert_eq!(supported_versions("GC"), Some(&[1][..]));
        assert_eq!(supported_versions("SyncBlock"), Some(&[1][..]));
        assert_eq!(supported_versions("ObjectHeader"), None);
        // A contract read by cdac's own means has no reader of its own.
        for (name, _) in READ_BY_OWN_MEANS {
            assert_eq!(supported_versions(name), None, "{name}");
        }
    }
}
