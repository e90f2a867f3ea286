//! Checks of the values a runtime's descriptor got from `cdac` rather than from the runtime
//! itself (the shipped .NET 8 descriptor, the overlays of .NET 9 and 10): invariants of the
//! runtime's own data that hold only when those offsets and globals are right. They run on
//! the target as it is opened, so a servicing build nobody measured is trusted because its
//! data agrees, not because of its version number, and a value that moved is named.
//!
//! Each [`Check`] says which descriptor values it vouches for; the report tells which of
//! them came from a shipped file, and which shipped values no check covered.

use std::collections::{BTreeSet, HashSet};

use serde::Serialize;

use crate::contracts::execution_manager::{execution_manager, JitType};
use crate::contracts::fields::Fields;
use crate::contracts::loader::{self, ModuleInfo};
use crate::contracts::runtime_function::{RuntimeFunction, RuntimeFunctionLayout};
use crate::contracts::runtime_type_system::{method_desc_info, method_table_info};
use crate::contracts::thread::{ThreadInfo, Threads, FRAME_TOP};
use crate::contracts::ContractError;
use crate::runtime::Runtime;

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// The invariants held.
    Passed,
    /// One did not: the values it covers may be wrong for this build.
    Failed,
    /// The target had nothing to check them on (no exception in flight, say), or the
    /// runtime does not have what the check reads.
    Skipped,
}

/// One check and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Its name (`thread-list`, ...).
    pub name: &'static str,
    /// What it verifies, for people.
    pub what: &'static str,
    /// How it ended.
    pub status: CheckStatus,
    /// What it saw (passed), what broke (failed) or why it could not run (skipped).
    pub detail: String,
    /// The descriptor values it vouches for (`Type.Field`, `Type` for a size, `global Name`).
    pub covers: Vec<String>,
    /// Those of them a shipped descriptor or overlay gave (not the runtime itself).
    pub covers_shipped: Vec<String>,
    /// Microseconds since the checks began when this one ended.
    pub at_us: u64,
}

/// Every check of one runtime.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// How many values of the descriptor came from shipped files.
    pub shipped_values: usize,
    /// Shipped values that no check covers (their fitness rests on the build id or the
    /// version line alone).
    pub unchecked_shipped: Vec<String>,
    /// How long the checks took, in microseconds.
    pub elapsed_us: u64,
    /// What the runtime says of itself that cdac may read wrongly: a descriptor format
    /// newer than it knows, a newer reader recommended (`RecommendedReaderVersion`).
    pub reader_notes: Vec<String>,
}

impl ValidationReport {
    /// The checks that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Failed)
    }

    /// One line per failed check that covers values `cdac` added, naming it and those
    /// values: what a command prints as a warning. (A check that fails on values the
    /// runtime describes itself is shown by `cdac info`, but is not a warning about cdac's
    /// descriptors.)
    pub fn warnings(&self) -> Vec<String> {
        self.failed()
            .filter(|c| !c.covers_shipped.is_empty())
            .map(|c| {
                format!(
                    "check {} failed on this runtime build: {}; the values cdac added that it covers may be wrong here: {}",
                    c.name,
                    c.detail,
                    c.covers_shipped.join(", ")
                )
            })
            .chain(self.reader_notes.iter().cloned())
            .collect()
    }
}

/// The newest `RecommendedReaderVersion` (a .NET 11 global: the reader the runtime's
/// contracts were written for) cdac reads as intended.
pub const READER_VERSION: u64 = 1;

/// What the runtime's descriptor says of the reader it wants: one line per format newer
/// than cdac knows, and one if it recommends a newer reader than cdac is.
pub fn reader_notes(rt: &Runtime) -> Vec<String> {
    let d = rt.descriptor();
    let mut notes: Vec<String> = d
        .newer_formats()
        .into_iter()
        .map(|(part, format)| {
            format!(
                "descriptor {part} has format {format}, newer than the {} cdac knows: it was \
                 read with format {}'s rules (the checks below say whether they held)",
                crate::descriptor::NEWEST_FORMAT,
                crate::descriptor::NEWEST_FORMAT
            )
        })
        .collect();
    if let Ok(v) = d.global_value("RecommendedReaderVersion") {
        if v > READER_VERSION {
            notes.push(format!(
                "the runtime recommends reader version {v}; this cdac is version {READER_VERSION}: \
                 contracts it does not know are refused by name, others may have changed meaning"
            ));
        }
    }
    notes
}

/// The outcome of one check's body: `Ok(detail)` passed; `Err(Fail(..))` failed;
/// `Err(Skip(..))` could not run.
enum Stop {
    Fail(String),
    Skip(String),
}

impl From<ContractError> for Stop {
    fn from(e: ContractError) -> Stop {
        match e {
            // A dump that left the memory out (heap, normal, triage dumps) has nothing to
            // check the values on there.
            ContractError::Read(crate::memory::ReadError::NotCaptured { .. }) => {
                Stop::Skip(e.to_string())
            }
            // The runtime does not have what the check reads: nothing to check.
            ContractError::Descriptor(d) => Stop::Skip(d.to_string()),
            ContractError::Missing { .. } | ContractError::UnsupportedVersion { .. } => {
                Stop::Skip(e.to_string())
            }
            other => Stop::Fail(other.to_string()),
        }
    }
}

impl From<crate::memory::ReadError> for Stop {
    fn from(e: crate::memory::ReadError) -> Stop {
        match e {
            crate::memory::ReadError::NotCaptured { .. } => Stop::Skip(e.to_string()),
            other => Stop::Fail(other.to_string()),
        }
    }
}

impl From<crate::descriptor::DescriptorError> for Stop {
    fn from(e: crate::descriptor::DescriptorError) -> Stop {
        Stop::Skip(e.to_string())
    }
}

type Outcome = Result<String, Stop>;

fn fail(detail: String) -> Stop {
    Stop::Fail(detail)
}

/// Runs every check on `rt`. A live process runs on while it is read (a thread pushes a
/// Frame, another exits): when a check fails on one, its cached memory is dropped and the
/// checks run again, up to three times, and the last report stands.
pub fn validate(rt: &Runtime) -> ValidationReport {
    let live = matches!(
        rt.target().source().kind(),
        crate::memory::TargetKind::Live { .. }
    );
    let mut report = validate_once(rt);
    for _ in 0..2 {
        if !live || report.failed().next().is_none() {
            break;
        }
        rt.flush();
        std::thread::sleep(std::time::Duration::from_millis(5));
        report = validate_once(rt);
    }
    report.reader_notes = reader_notes(rt);
    report
}

fn validate_once(rt: &Runtime) -> ValidationReport {
    let started = std::time::Instant::now();
    let shipped = shipped_values(rt);
    let mut checks = Vec::new();
    let threads = Threads::for_runtime(rt);
    let list = threads.as_ref().ok().and_then(|c| c.threads().ok());
    let modules = loader::modules(rt.target(), rt.descriptor());
    // Where the descriptor has no ExceptionMethodTable (.NET 8), Exception's MethodTable is
    // found once, by name, among an exception in flight's ancestors.
    let exception_by_name = match rt.descriptor().global("ExceptionMethodTable") {
        Ok(_) => None,
        Err(_) => exception_mt_by_name(rt, list.as_ref()),
    };
    let mut run = |name: &'static str, what: &'static str, covers: &[&str], body: Outcome| {
        let covers: Vec<String> = covers.iter().map(|s| s.to_string()).collect();
        let covers_shipped = shipped
            .iter()
            .filter(|v| covers.iter().any(|c| self::covers(c, v)))
            .cloned()
            .collect();
        let (status, detail) = match body {
            Ok(d) => (CheckStatus::Passed, d),
            Err(Stop::Fail(d)) => (CheckStatus::Failed, d),
            Err(Stop::Skip(d)) => (CheckStatus::Skipped, d),
        };
        checks.push(Check {
            name,
            what,
            status,
            detail,
            covers,
            covers_shipped,
            at_us: started.elapsed().as_micros() as u64,
        });
    };
    run(
        "thread-list",
        "the ThreadStore's list is as long as its count, and every thread's OS id is a thread of the target",
        &[
            "global ThreadStore",
            "ThreadStore.FirstThreadLink",
            "ThreadStore.ThreadCount",
            "Thread.LinkNext",
            "Thread.OSId",
            "Thread.Id",
        ],
        check_thread_list(rt, &threads, list.as_ref()),
    );
    run(
        "thread-objects",
        "each thread's managed Thread object points back at it and has its managed id",
        &[
            "Thread.GCHandle",
            "ThreadObject._DONT_USE_InternalThread",
            "ThreadObject._managedThreadId",
            "ThreadObject._name",
        ],
        check_thread_objects(rt, &threads, list.as_ref()),
    );
    run(
        "frame-chains",
        "every thread's explicit Frame chain ends at FRAME_TOP, every Frame is of a known kind, and each active P/Invoke returns into managed code",
        &[
            "Thread.Frame",
            "Frame.Next",
            "InlinedCallFrame.CallerReturnAddress",
            "InlinedCallFrame.CallSiteSP",
            "InlinedCallFrame.CalleeSavedFP",
            "global *VtableSlotFromEnd",
            "global *FrameIdentifier",
        ],
        check_frame_chains(rt, &threads, list.as_ref()),
    );
    run(
        "modules",
        "the AppDomain's assembly list holds CoreLib, each module and its assembly point at each other, and each image starts with MZ where the target maps its file",
        &[
            "global AppDomain",
            "AppDomain.DomainAssemblyList",
            "ArrayListBase.Count",
            "ArrayListBase.FirstBlock",
            "ArrayListBlock.Next",
            "ArrayListBlock.Size",
            "ArrayListBlock.ArrayStart",
            "Assembly.Module",
            "Module.Assembly",
            "Module.PEAssembly",
            "PEAssembly.PEImage",
            "PEImage.LoadedImageLayout",
            "PEImageLayout.Base",
            "PEImageLayout.Size",
        ],
        check_modules(rt, &modules),
    );
    run(
        "method-tables",
        "Object, String and Exception's MethodTables: their EEClass points back, String has 2-byte components, Exception descends from Object, and CoreLib defines them",
        &[
            "global ObjectMethodTable",
            "global StringMethodTable",
            "global ExceptionMethodTable",
            "Object.m_pMethTab",
            "MethodTable.MTFlags",
            "MethodTable.MTFlags2",
            "MethodTable.Token",
            "MethodTable.ParentMethodTable",
            "MethodTable.EEClassOrCanonMT",
            "MethodTable.Module",
            "EEClass.MethodTable",
        ],
        check_method_tables(rt, &modules, exception_by_name),
    );
    run(
        "ready-to-run",
        "CoreLib's ReadyToRunInfo leads to its image's RTR header, and its runtime functions lie in the image, sorted",
        &[
            "Module.ReadyToRunInfo",
            "ReadyToRunInfo.ReadyToRunHeader",
            "ReadyToRunInfo.CompositeInfo",
            "ReadyToRunInfo.RuntimeFunctions",
            "ReadyToRunInfo.NumRuntimeFunctions",
        ],
        check_ready_to_run(rt, &modules),
    );
    let mut samples = code_samples(rt, &threads, list.as_ref());
    samples.extend(corelib_entry_points(rt, &modules));
    run(
        "jit-code",
        "JIT'ed code found through the code heaps and the threads' return addresses resolves to a MethodDesc of a listed module's type, within its GC info's code length and its unwind info, with well-formed debug and exception info",
        &[
            "global ExecutionManagerCodeRangeMapAddress",
            "RangeSectionMap",
            "RangeSectionMap.TopLevelData",
            "RangeSectionFragment.*",
            "RangeSection.*",
            "global EEJitManagerAddress",
            "EEJitManager.AllCodeHeaps",
            "CodeHeapListNode.*",
            "RealCodeHeader.*",
            "EEILException.*",
            "EEExceptionClause.*",
            "global StubCodeBlockLast",
            "global GCInfoVersion",
            "global FeatureOnStackReplacement",
            "MethodDesc.ChunkIndex",
            "MethodDesc.Flags",
            "MethodDescChunk.MethodTable",
            "global MethodDescAlignment",
        ],
        check_code(rt, &samples, &modules, JitType::Jit),
    );
    run(
        "ready-to-run-code",
        "precompiled code the threads return into resolves through its image's runtime functions and entry-point map to a MethodDesc of a listed module's type, within its code length and unwind info",
        &[
            "global ReadyToRunJitManagerAddress",
            "RuntimeFunction.*",
            "HashMap.*",
            "Bucket.*",
            "global HashMapSlotsPerBucket",
            "global HashMapValueMask",
            "ReadyToRunInfo.EntryPointToMethodDescMap",
            "ReadyToRunInfo.DelayLoadMethodCallThunks",
            "ReadyToRunInfo.HotColdMap",
            "ReadyToRunInfo.NumHotColdMap",
        ],
        check_code(rt, &samples, &modules, JitType::R2r),
    );
    run(
        "code-versions",
        "the code versions of sampled JIT'ed methods: the code each address is in is one of its method's versions, every explicit version's code resolves back to that method, every tier is known, and at most one version is current",
        &[
            "MethodDesc.CodeData",
            "MethodDescCodeData.*",
            "MethodDescVersioningState.*",
            "NativeCodeVersionNode.*",
            "ILCodeVersioningState.*",
            "Module.MethodDefToILCodeVersioningStateMap",
            "ModuleLookupMap.*",
            "AppDomain.MethodDescVersioningStates",
            "AppDomain.ILCodeVersioningStates",
            "SHash.*",
            "LoaderAllocator.CallCountingManager",
            "CallCountingManager.*",
            "CallCountingInfo.*",
            "global CallCountingStageDisabled",
            "MethodDesc.Flags3AndTokenRemainder",
        ],
        check_code_versions(rt, &samples),
    );
    run(
        "exception-objects",
        "every exception in flight is of a type that descends from Exception, with a String message (when set), a failure HResult and an exception inside",
        &[
            "Exception._message",
            "Exception._innerException",
            "Exception._HResult",
            "String.m_StringLength",
            "String.m_FirstChar",
            "Object.m_pMethTab",
        ],
        check_exceptions(rt, &threads, list.as_ref(), exception_by_name),
    );
    run(
        "gc-heap",
        "the GC's table for debuggers is at the g_dacTable slot the descriptor names; the first handle table's segment names it at the place the descriptor's handle-type count gives; every segment's objects lie inside its reserved memory and begin with a MethodTable; every thread's allocation context lies in a small-object segment",
        &[
            "global GcDacGlobalsDacTableSlot",
            "global HandleMaxInternalTypes",
            "global ObjectToMethodTableUnmask",
            "Thread.AllocContext",
            "GCAllocContext.*",
            "Array.*",
        ],
        check_gc_heap(rt, &threads, list.as_ref()),
    );
    run(
        "field-descs",
        "System.String (found through CoreLib's metadata and TypeDef map) declares FieldDescs for exactly its metadata's fields, with _stringLength an int at 0 and _firstChar a char at 4 (the String offsets the descriptor gives, less the MethodTable pointer); where the runtime counts fields, its count agrees; where statics are read, String.Empty is an empty string",
        &[
            "FieldDesc.*",
            "EEClass.FieldDescList",
            "EEClass.NumInstanceFields",
            "EEClass.NumStaticFields",
            "MethodTable.AuxiliaryData",
            "DynamicStaticsInfo.*",
            "Module.TypeDefToMethodTableMap",
        ],
        check_field_descs(rt, &modules),
    );
    run(
        "thread-statics",
        "every thread's thread-local data names the thread back, and its thread-static array is an object[] (the same MethodTable on every thread)",
        &["Thread.ThreadLocalDataPtr", "ThreadLocalData.*", "InFlightTLSData.*"],
        check_thread_statics(rt, list.as_ref()),
    );
    run(
        "helper-frames",
        "every HelperMethodFrame_1OBJ's GC pointer leads to a slot next to the Frame on its thread's stack, holding null or an object with a MethodTable",
        &["HelperMethodFrame_1OBJ.*"],
        check_helper_frames(rt, list.as_ref()),
    );
    run(
        "sync-blocks",
        "every sync table entry inside the runtime's count (SyncBlockCache.FreeSyncTableIndex; the first 1024) is used or free, and every used one has a sync block naming that entry and an object whose header names it; a held monitor's holder is a thread of the thread store with the OS id the monitor records; each entry of a sync block's wait list (Monitor.Wait) names that sync block and a thread of the thread store",
        &["SyncBlock.*", "SyncBlockCache.*", "SyncTableEntry.*", "WaitEventLink.*"],
        check_sync_blocks(rt, list.as_ref()),
    );
    let covered: BTreeSet<&str> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Passed)
        .flat_map(|c| c.covers_shipped.iter().map(String::as_str))
        .collect();
    let unchecked_shipped = shipped
        .iter()
        .filter(|v| !covered.contains(v.as_str()))
        .cloned()
        .collect();
    ValidationReport {
        checks,
        shipped_values: shipped.len(),
        unchecked_shipped,
        elapsed_us: started.elapsed().as_micros() as u64,
        reader_notes: Vec::new(),
    }
}

/// Every field (`Type.Field`), type size (`Type`) and global (`global Name`) whose value
/// came from a shipped descriptor or overlay (or a `--descriptor` file) rather than the
/// runtime.
fn shipped_values(rt: &Runtime) -> BTreeSet<String> {
    let d = rt.descriptor();
    let overlays: HashSet<&str> = rt.overlays().iter().map(|o| o.name.as_str()).collect();
    // A shipped descriptor, or a file given with `--descriptor`, stands for the whole
    // description: none of it is the runtime's own word.
    let whole_shipped = !matches!(
        rt.descriptor_source(),
        crate::runtime::DescriptorSource::Embedded { .. }
    );
    // Layouts every runtime shares by file format (the `formats` overlay) are not the
    // runtime's to get wrong; everything else a shipped file gave is.
    let is_shipped =
        |origin: &str| origin != "formats" && (whole_shipped || overlays.contains(origin));
    let mut out = BTreeSet::new();
    for (name, ty) in d.types().iter() {
        if is_shipped(ty.origin()) && ty.size_if_known().is_some() {
            out.insert(name.to_string());
        }
        for (field, f) in ty.fields().iter() {
            if is_shipped(&f.origin) {
                out.insert(format!("{name}.{field}"));
            }
        }
    }
    for (name, g) in d.globals().iter() {
        if is_shipped(g.origin()) {
            out.insert(format!("global {name}"));
        }
    }
    out
}

/// Whether the cover `pattern` names `value`: exactly, or `Type.*` for a type's size and
/// every field, or `global *Suffix` for every global ending so.
fn covers(pattern: &str, value: &str) -> bool {
    if let Some(ty) = pattern.strip_suffix(".*") {
        return value == ty
            || value
                .strip_prefix(ty)
                .is_some_and(|rest| rest.starts_with('.'));
    }
    if let Some(suffix) = pattern.strip_prefix("global *") {
        return value.starts_with("global ") && value.ends_with(suffix);
    }
    pattern == value
}

/// The target's OS thread ids, when it can list them.
fn os_thread_ids(rt: &Runtime) -> Option<HashSet<i64>> {
    let threads = rt.target().source().threads().ok()?;
    (!threads.is_empty()).then(|| threads.iter().map(|t| i64::from(t.tid)).collect())
}

fn check_thread_list(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    let contract = threads
        .as_ref()
        .map_err(|e| Stop::Skip(format!("no Thread contract: {e}")))?;
    let list = match list {
        Some(l) => l,
        None => {
            return Err(contract
                .threads()
                .err()
                .map_or_else(|| fail(String::new()), Stop::from))
        }
    };
    if let Some(e) = &list.error {
        return Err(fail(format!("the thread list was cut short: {e}")));
    }
    if list.threads.is_empty() {
        return Err(fail("the ThreadStore lists no thread".into()));
    }
    if list.threads.len() as u64 != u64::from(list.store.thread_count) {
        return Err(fail(format!(
            "{} threads listed, the ThreadStore counts {}",
            list.threads.len(),
            list.store.thread_count
        )));
    }
    let mut ids = HashSet::new();
    for t in &list.threads {
        if t.managed_id == 0 || !ids.insert(t.managed_id) {
            return Err(fail(format!(
                "thread {:#x} has managed id {} (zero or repeated)",
                t.address, t.managed_id
            )));
        }
    }
    let mut matched = 0;
    if let Some(os) = os_thread_ids(rt) {
        for t in list.threads.iter().filter(|t| t.os_id != 0) {
            if !os.contains(&(t.os_id as i64)) {
                return Err(fail(format!(
                    "thread {:#x} (managed id {}) has OS id {}, which the target has no thread of",
                    t.address, t.managed_id, t.os_id
                )));
            }
            matched += 1;
        }
    }
    Ok(format!(
        "{} threads, as counted; {matched} OS ids are threads of the target",
        list.threads.len()
    ))
}

fn check_thread_objects(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    let contract = threads
        .as_ref()
        .map_err(|e| Stop::Skip(format!("no Thread contract: {e}")))?;
    let list = list.ok_or_else(|| Stop::Skip("no thread list".into()))?;
    let f = Fields::new(rt.target(), rt.descriptor());
    let mut checked = 0;
    let mut named = 0;
    for t in &list.threads {
        let Some(object) = contract.thread_object(t)? else {
            continue;
        };
        let back = f.ptr(object, "ThreadObject", "_DONT_USE_InternalThread")?;
        if back != t.address {
            return Err(fail(format!(
                "the managed Thread {object:#x} of thread {:#x} points back at {back:#x}",
                t.address
            )));
        }
        let id = f.u32(object, "ThreadObject", "_managedThreadId")?;
        if id != t.managed_id {
            return Err(fail(format!(
                "the managed Thread {object:#x} has id {id}, its thread {}",
                t.managed_id
            )));
        }
        let name = f.ptr(object, "ThreadObject", "_name")?;
        if name != 0 {
            if !is_string(rt, contract, name)? {
                return Err(fail(format!(
                    "the managed Thread {object:#x}'s name {name:#x} is not a String"
                )));
            }
            named += 1;
        }
        checked += 1;
    }
    if checked == 0 {
        return Err(Stop::Skip("no thread has a managed Thread object".into()));
    }
    Ok(format!(
        "{checked} managed Thread objects point back at their threads with their ids ({named} named)"
    ))
}

fn check_frame_chains(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    let contract = threads
        .as_ref()
        .map_err(|e| Stop::Skip(format!("no Thread contract: {e}")))?;
    let list = list.ok_or_else(|| Stop::Skip("no thread list".into()))?;
    let em = rt.contracts().execution_manager().ok();
    let module = rt.module().base..rt.module().end;
    let (mut frames, mut unnamed, mut pinvokes) = (0, 0, 0);
    for t in &list.threads {
        if t.frame == FRAME_TOP || t.frame == 0 {
            continue;
        }
        let chain = contract.frame_chain(t.frame);
        if let Some(e) = chain.error {
            return Err(fail(format!(
                "thread {} (managed id {}): its Frame chain does not reach FRAME_TOP: {e}",
                t.os_id, t.managed_id
            )));
        }
        for fr in &chain.frames {
            frames += 1;
            if fr.kind.is_none() {
                // A kind the descriptor does not name still has its vtable in the runtime
                // (a thread caught by a suspension holds a ResumableFrame, one JIT'ing a
                // PrestubMethodFrame); a tag anywhere else is not a Frame's.
                if !module.contains(&fr.tag) {
                    return Err(fail(format!(
                        "thread {}: Frame {:#x} has tag {:#x}, of no kind the descriptor names and not in the runtime module",
                        t.os_id, fr.address, fr.tag
                    )));
                }
                unnamed += 1;
                continue;
            }
            if !fr.is_active_pinvoke() {
                continue;
            }
            let ra = fr.return_address.unwrap_or(0);
            if let (Some(sp), Some(fp)) = (fr.caller_sp, fr.saved_fp) {
                if sp > fp {
                    return Err(fail(format!(
                        "thread {}: InlinedCallFrame {:#x} has call-site SP {sp:#x} above its saved frame pointer {fp:#x}",
                        t.os_id, fr.address
                    )));
                }
            }
            if let Some(em) = &em {
                match em.code_block(ra) {
                    Ok(Some(_)) => pinvokes += 1,
                    Ok(None) => {
                        return Err(fail(format!(
                            "thread {}: InlinedCallFrame {:#x} returns to {ra:#x}, which is not managed code",
                            t.os_id, fr.address
                        )))
                    }
                    Err(e) => return Err(fail(format!("{ra:#x}: {e}"))),
                }
            }
        }
    }
    if frames == 0 {
        return Err(Stop::Skip("no thread has an explicit Frame".into()));
    }
    Ok(format!(
        "{frames} Frames ({unnamed} of kinds the descriptor does not name, their tags in the runtime module), every chain ends; {pinvokes} P/Invoke return addresses are managed code"
    ))
}

/// Whether `object` is a `System.String`: its MethodTable is the runtime's String one, or
/// (where the descriptor has no `StringMethodTable`, .NET 8) one of 2-byte components.
fn is_string(rt: &Runtime, threads: &Threads, object: u64) -> Result<bool, Stop> {
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let mt = threads.method_table_of(object)?;
    match f.global("StringMethodTable") {
        Ok(g) => Ok(t.read_pointer(g)? == mt),
        Err(_) => {
            let flags = f.u32(mt, "MethodTable", "MTFlags")?;
            Ok(flags & 0x8000_0000 != 0 && flags & 0xFFFF == 2)
        }
    }
}

/// Whether `object`'s type is `ancestor` or descends from it.
fn descends_from(rt: &Runtime, object: u64, ancestor: u64) -> Result<bool, Stop> {
    let f = Fields::new(rt.target(), rt.descriptor());
    let mut mt = f.ptr(object, "Object", "m_pMethTab")? & !3;
    for _ in 0..16 {
        if mt == ancestor {
            return Ok(true);
        }
        if mt == 0 {
            break;
        }
        mt = f.ptr(mt, "MethodTable", "ParentMethodTable")?;
    }
    Ok(false)
}

/// CoreLib's module.
fn corelib(modules: &[ModuleInfo]) -> Option<&ModuleInfo> {
    modules
        .iter()
        .find(|m| m.file_name.as_deref() == Some("System.Private.CoreLib.dll"))
}

fn check_modules(rt: &Runtime, modules: &Result<Vec<ModuleInfo>, ContractError>) -> Outcome {
    let modules = match modules {
        Ok(m) => m,
        Err(e) => {
            return Err(match e {
                ContractError::Descriptor(d) => Stop::Skip(d.to_string()),
                ContractError::Read(r) if r.is_not_captured() => Stop::Skip(r.to_string()),
                other => fail(format!("the module list cannot be read: {other}")),
            })
        }
    };
    if corelib(modules).is_none() {
        return Err(fail(format!(
            "none of the {} modules is System.Private.CoreLib.dll",
            modules.len()
        )));
    }
    let f = Fields::new(rt.target(), rt.descriptor());
    let files = rt.target().mapped_files();
    let mut images = 0;
    for m in modules {
        let back = f.ptr(m.address, "Module", "Assembly")?;
        if back != m.assembly {
            return Err(fail(format!(
                "module {:#x} names assembly {back:#x}, but came from assembly {:#x}",
                m.address, m.assembly
            )));
        }
        if m.is_dynamic || m.base == 0 {
            continue;
        }
        let magic = rt.target().read_bytes(m.base, 2);
        match magic {
            Ok(b) if b == b"MZ" => {}
            Ok(b) => {
                return Err(fail(format!(
                    "module {:#x}'s image at {:#x} starts with {b:02x?}, not MZ",
                    m.address, m.base
                )))
            }
            // A dump without the image's pages; the file check below still applies.
            Err(_) => {}
        }
        if let Some(path) = &m.path {
            let mapped = files
                .iter()
                .any(|mf| mf.start <= m.base && m.base < mf.end && &mf.path == path);
            let any_mapping = files.iter().any(|mf| &mf.path == path);
            // A flat (IL-only) image is read into memory, not mapped from its file.
            if m.mapped && any_mapping && !mapped {
                return Err(fail(format!(
                    "module {:#x}'s image base {:#x} is not where the target maps {}",
                    m.address,
                    m.base,
                    path.display()
                )));
            }
        }
        images += 1;
    }
    Ok(format!(
        "{} modules with CoreLib; each points back at its assembly; {images} images start with MZ where mapped",
        modules.len()
    ))
}

/// The `System.Exception` MethodTable found by name among the ancestors of an exception in
/// flight (for runtimes whose descriptor has no `ExceptionMethodTable`, .NET 8).
fn exception_mt_by_name(
    rt: &Runtime,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Option<u64> {
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let mut namer = crate::names::MethodNamer::for_runtime(rt);
    for th in list?.threads.iter() {
        let Some(object) = th.exception() else {
            continue;
        };
        let mut mt = f.ptr(object, "Object", "m_pMethTab").ok()? & !3;
        for _ in 0..16 {
            if mt == 0 {
                break;
            }
            if namer.type_name(mt).as_deref() == Some("System.Exception") {
                return Some(mt);
            }
            mt = f.ptr(mt, "MethodTable", "ParentMethodTable").ok()?;
        }
    }
    None
}

fn check_method_tables(
    rt: &Runtime,
    modules: &Result<Vec<ModuleInfo>, ContractError>,
    exception_by_name: Option<u64>,
) -> Outcome {
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    // .NET 8's descriptor has only Exception's; the others are checked where described.
    let global_mt = |name: &str| -> Result<Option<u64>, Stop> {
        match f.global(name) {
            Ok(g) => Ok(Some(t.read_pointer(g)?)),
            Err(_) => Ok(None),
        }
    };
    let exception = match global_mt("ExceptionMethodTable")? {
        Some(mt) => mt,
        None => exception_by_name.ok_or_else(|| {
            Stop::Skip(
                "the descriptor has no ExceptionMethodTable and no exception in flight names it"
                    .into(),
            )
        })?,
    };
    let object = global_mt("ObjectMethodTable")?;
    let string = global_mt("StringMethodTable")?;
    let corelib = modules
        .as_ref()
        .ok()
        .and_then(|m| corelib(m))
        .map(|m| m.address);
    let named = [
        ("Exception", Some(exception)),
        ("Object", object),
        ("String", string),
    ];
    for (name, mt) in named.iter().filter_map(|(n, mt)| Some((n, (*mt)?))) {
        let info = method_table_info(t, d, mt)?;
        if info.canonical == mt {
            let class = f.ptr(mt, "MethodTable", "EEClassOrCanonMT")?;
            let back = f.ptr(class, "EEClass", "MethodTable")?;
            if back != mt {
                return Err(fail(format!(
                    "{name}'s MethodTable {mt:#x} has EEClass {class:#x}, which points at {back:#x}"
                )));
            }
        }
        if let Some(corelib) = corelib {
            if info.module != corelib {
                return Err(fail(format!(
                    "{name}'s MethodTable {mt:#x} names module {:#x}, not CoreLib's {corelib:#x}",
                    info.module
                )));
            }
        }
    }
    if let Some(string) = string {
        // String: components of 2 bytes (the low half of the flags, with HasComponentSize).
        let flags = f.u32(string, "MethodTable", "MTFlags")?;
        if flags & 0x8000_0000 == 0 || flags & 0xFFFF != 2 {
            return Err(fail(format!(
                "String's MethodTable flags {flags:#x} do not say 2-byte components"
            )));
        }
    }
    // Exception descends from Object (the root: the one without a parent).
    let mut cur = exception;
    for _ in 0..8 {
        let parent = method_table_info(t, d, cur)?.parent;
        if parent == 0 {
            return match object {
                Some(o) if o != cur => Err(fail(format!(
                    "Exception's MethodTable descends from {cur:#x}, not Object's {o:#x}"
                ))),
                _ => Ok(format!(
                    "{} MethodTables agree with their EEClasses and CoreLib; Exception descends from Object",
                    named.iter().filter(|(_, mt)| mt.is_some()).count()
                )),
            };
        }
        cur = parent;
    }
    Err(fail(
        "Exception's MethodTable has more than 8 ancestors".into(),
    ))
}

fn check_ready_to_run(rt: &Runtime, modules: &Result<Vec<ModuleInfo>, ContractError>) -> Outcome {
    let modules = modules
        .as_ref()
        .map_err(|e| Stop::Skip(format!("no module list: {e}")))?;
    let corelib = corelib(modules).ok_or_else(|| Stop::Skip("no CoreLib module".into()))?;
    if corelib.ready_to_run_info == 0 {
        return Err(Stop::Skip("CoreLib has no ReadyToRun code".into()));
    }
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let info = corelib.ready_to_run_info;
    let header = f.ptr(info, "ReadyToRunInfo", "ReadyToRunHeader")?;
    let signature = t.read_u32(header)?;
    if signature != 0x0052_5452 {
        return Err(fail(format!(
            "CoreLib's ReadyToRunInfo {info:#x} leads to {header:#x}, which holds {signature:#x}, not RTR"
        )));
    }
    let end = corelib.base.saturating_add(corelib.size);
    if !(corelib.base..end).contains(&header) {
        return Err(fail(format!(
            "CoreLib's RTR header {header:#x} is outside its image [{:#x}, {end:#x})",
            corelib.base
        )));
    }
    let composite = f.ptr(info, "ReadyToRunInfo", "CompositeInfo")?;
    let functions = f.ptr(composite, "ReadyToRunInfo", "RuntimeFunctions")?;
    let count = f.u32(composite, "ReadyToRunInfo", "NumRuntimeFunctions")?;
    if count == 0 {
        return Err(fail("CoreLib's image has no runtime functions".into()));
    }
    let layout = RuntimeFunctionLayout::from_descriptor(d)?;
    let mut last = None;
    for i in 0..u64::from(count.min(16)) {
        let begin = RuntimeFunction::read(t, &layout, layout.entry(functions, i))?.begin;
        if last.is_some_and(|l| begin <= l) {
            return Err(fail(format!(
                "runtime function {i} of CoreLib begins at RVA {begin:#x}, not after the one before"
            )));
        }
        last = Some(begin);
    }
    Ok(format!(
        "CoreLib's RTR header is in its image; {count} runtime functions, the first sorted"
    ))
}

/// Managed code addresses to check: the return addresses of active P/Invokes.
fn pinvoke_returns(
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Vec<u64> {
    let mut out = Vec::new();
    if let (Ok(c), Some(list)) = (threads, list) {
        for t in &list.threads {
            let chain = c.frame_chain(t.frame);
            out.extend(
                chain
                    .frames
                    .iter()
                    .filter(|f| f.is_active_pinvoke())
                    .filter_map(|f| f.return_address),
            );
        }
    }
    out
}

/// Managed code to check: active P/Invoke return addresses and the first method of each
/// JIT code heap.
fn code_samples(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Vec<u64> {
    let mut samples = pinvoke_returns(threads, list);
    samples.extend(jit_heap_samples(rt));
    samples.sort_unstable();
    samples.dedup();
    samples
}

/// A few precompiled methods of CoreLib the runtime has prepared: the entries in the first
/// buckets of its ReadyToRun entry-point map.
fn corelib_entry_points(
    rt: &Runtime,
    modules: &Result<Vec<ModuleInfo>, ContractError>,
) -> Vec<u64> {
    let Some(corelib) = modules.as_ref().ok().and_then(|m| corelib(m)) else {
        return Vec::new();
    };
    if corelib.ready_to_run_info == 0 {
        return Vec::new();
    }
    let (t, d) = (rt.target(), rt.descriptor());
    let Ok(em) = execution_manager(t, d) else {
        return Vec::new();
    };
    let entries = crate::contracts::execution_manager::enumerate::ready_to_run_entry_points(
        em.as_ref(),
        t,
        d,
        corelib.ready_to_run_info,
        64,
    )
    .unwrap_or_default();
    entries.iter().take(8).map(|&(e, _)| e).collect()
}

/// The `kind` code among `samples` resolves to sound methods.
fn check_code(
    rt: &Runtime,
    samples: &[u64],
    modules: &Result<Vec<ModuleInfo>, ContractError>,
    kind: JitType,
) -> Outcome {
    let (t, d) = (rt.target(), rt.descriptor());
    let em = execution_manager(t, d)?;
    let module_set: HashSet<u64> = modules
        .as_ref()
        .map(|m| m.iter().map(|m| m.address).collect())
        .unwrap_or_default();
    let f = Fields::new(t, d);
    let mut methods = 0;
    for &ip in samples {
        let b = match em.code_block(ip)? {
            Some(b) if b.jit_type == kind => b,
            _ => continue,
        };
        if methods >= 16 {
            break;
        }
        let md = method_desc_info(t, d, b.method_desc)?;
        let mt = method_table_info(t, d, md.method_table)?;
        if mt.canonical == md.method_table {
            let class = f.ptr(md.method_table, "MethodTable", "EEClassOrCanonMT")?;
            if f.ptr(class, "EEClass", "MethodTable")? != md.method_table {
                return Err(fail(format!(
                    "the code at {ip:#x} belongs to MethodDesc {:#x}, whose MethodTable {:#x} its EEClass does not point back at",
                    b.method_desc, md.method_table
                )));
            }
        }
        if !module_set.is_empty() && !module_set.contains(&mt.module) {
            return Err(fail(format!(
                "the code at {ip:#x} belongs to a type of module {:#x}, which the AppDomain does not list",
                mt.module
            )));
        }
        let region = em.method_region_info(&b)?;
        let size = region.hot_size + region.cold_size;
        if b.relative_offset >= size {
            return Err(fail(format!(
                "{ip:#x} is {:#x} into its method, past the {size} bytes its GC info says it has",
                b.relative_offset
            )));
        }
        let Some(rf) = em.unwind_info(&b)? else {
            return Err(fail(format!("no unwind info covers the code at {ip:#x}")));
        };
        let base = em.unwind_info_base_address(&b);
        let layout = RuntimeFunctionLayout::from_descriptor(d)?;
        let begin = base.wrapping_add(u64::from(RuntimeFunction::read(t, &layout, rf)?.begin));
        if begin > ip {
            return Err(fail(format!(
                "the unwind info for {ip:#x} begins after it, at {begin:#x}"
            )));
        }
        let debug = em.debug_info(&b)?;
        let flag_byte_format = rt
            .contracts()
            .debug_info()
            .is_ok_and(|f| f.has_flag_byte_format());
        if debug.address != 0 && flag_byte_format && matches!(debug.has_flag_byte, Ok(true)) {
            let flag = t.read_u8(debug.address)?;
            if flag > 3 {
                return Err(fail(format!(
                    "the debug info of the code at {ip:#x} starts with {flag:#x}, not a flag byte"
                )));
            }
        }
        for c in em.exception_clauses(&b)? {
            let limit = size as u32;
            if c.try_start > c.try_end || c.try_end > limit || c.handler_end > limit {
                return Err(fail(format!(
                    "an exception clause of the code at {ip:#x} lies outside its {limit} bytes: {c:?}"
                )));
            }
        }
        methods += 1;
    }
    if methods == 0 {
        return Err(Stop::Skip(format!(
            "none of the {} sampled managed code addresses is {} code",
            samples.len(),
            kind.as_str()
        )));
    }
    Ok(format!(
        "{methods} {} methods resolve, each to a MethodDesc of a listed module's type, within its code length and unwind info",
        kind.as_str()
    ))
}

/// The first method of each JIT code heap: probe from each heap's start every 256 bytes
/// (at most 64 probes a heap).
fn jit_heap_samples(rt: &Runtime) -> Vec<u64> {
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let Ok(em) = execution_manager(t, d) else {
        return Vec::new();
    };
    let Ok(info) = em.ee_jit_manager_info() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut node = info.heap_list;
    let mut seen = HashSet::new();
    while node != 0 && seen.insert(node) && seen.len() <= 64 {
        let Ok(start) = f.ptr(node, "CodeHeapListNode", "StartAddress") else {
            break;
        };
        for k in 0..64u64 {
            let ip = start.wrapping_add(k * 256);
            if let Ok(Some(b)) = em.code_block(ip) {
                out.push(b.start);
                break;
            }
        }
        node = f.ptr(node, "CodeHeapListNode", "Next").unwrap_or(0);
    }
    out
}

fn check_code_versions(rt: &Runtime, samples: &[u64]) -> Outcome {
    use crate::contracts::code_versions::{CodeVersions, Tier};
    let (t, d) = (rt.target(), rt.descriptor());
    let em = execution_manager(t, d)?;
    let mut cv = CodeVersions::new(t, d)?;
    let (mut methods, mut versions, mut unknown) = (0, 0, 0);
    for &ip in samples {
        let Some(b) = em.code_block(ip)? else {
            continue;
        };
        if b.jit_type != JitType::Jit || methods >= 8 {
            continue;
        }
        let Some(at) = cv.version_at(b.method_desc, b.start, false, None)? else {
            return Err(fail(format!(
                "the code at {:#x} is none of MethodDesc {:#x}'s versions",
                b.start, b.method_desc
            )));
        };
        // A tier that cannot be told (what it rests on is not in this dump) is not a
        // wrong value; the other facts are checked all the same.
        unknown += usize::from(at.tier == Tier::Unknown);
        let all = cv.versions(b.method_desc, None, &|_| false)?;
        let current = all
            .versions
            .iter()
            .filter(|v| v.current == Some(true))
            .count();
        if current > 1 {
            return Err(fail(format!(
                "MethodDesc {:#x} has {current} current versions",
                b.method_desc
            )));
        }
        for v in all.versions.iter().filter(|v| v.node.is_some()) {
            let Some(code) = v.code else { continue };
            match em.code_block(code)? {
                Some(c) if c.method_desc == b.method_desc && c.start == code => {}
                other => {
                    return Err(fail(format!(
                        "version node {:#x} of MethodDesc {:#x} has code {code:#x}, which resolves to {:?}",
                        v.node.unwrap_or(0),
                        b.method_desc,
                        other.map(|c| (c.method_desc, c.start))
                    )))
                }
            }
            versions += 1;
        }
        methods += 1;
    }
    if methods == 0 {
        return Err(Stop::Skip("no JIT'ed code sampled".into()));
    }
    if unknown == methods {
        return Err(Stop::Skip(format!(
            "the tier of none of the {methods} sampled methods can be told (their data is not in the target)"
        )));
    }
    Ok(format!(
        "{methods} methods: their code is one of their versions ({unknown} of unknown tier); {versions} explicit versions resolve back to them"
    ))
}

fn check_gc_heap(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    use crate::contracts::gc::{DacVarsSource, GcSource, SegmentKind};
    let gc = match rt.contracts().gc() {
        Ok(gc) => gc,
        Err(e @ (ContractError::Missing { .. } | ContractError::UnsupportedVersion { .. })) => {
            return Err(Stop::Skip(e.to_string()))
        }
        Err(ContractError::Read(r)) if r.is_not_captured() => {
            return Err(Stop::Skip(r.to_string()))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    // A table found by search where the descriptor names a slot means the named slot is
    // wrong; where it names none (a GC without its sub-descriptor), the search is the way.
    let mut found_by_search = None;
    if let GcSource::DacVars(
        _,
        DacVarsSource::Search {
            slot,
            descriptor_slot,
        },
    ) = gc.source()
    {
        match descriptor_slot {
            Some(named) => {
                return Err(fail(format!(
                    "the GC's table is at g_dacTable slot {slot}, not at the descriptor's {named}"
                )))
            }
            None => found_by_search = Some(slot),
        }
    }
    let segments = gc.segments()?;
    let layout = gc.object_layout()?;
    let (t, mut checked) = (rt.target(), 0);
    for s in &segments {
        if !s.is_well_formed() {
            return Err(fail(format!(
                "segment {:#x}: objects {:#x}..{:#x}, committed to {:#x}, reserved to {:#x}",
                s.segment.address, s.start, s.end, s.segment.committed, s.segment.reserved
            )));
        }
        if s.end - s.start < 24 || checked >= 8 {
            continue;
        }
        let mt = t.read_pointer(s.start)? & !layout.mt_mask;
        let base = t.read_u32(mt.wrapping_add(layout.mt_base_size))?;
        if !(12..=1 << 24).contains(&base) {
            return Err(fail(format!(
                "the first object of segment {:#x} ({:#x}) has MethodTable {mt:#x} of base size {base}",
                s.segment.address, s.start
            )));
        }
        checked += 1;
    }
    let (mut contexts, mut inside) = (0, 0);
    if let (Ok(threads), Some(list)) = (threads, list) {
        for th in &list.threads {
            let Some((pointer, limit)) = threads.allocation_context(th.address)? else {
                continue;
            };
            contexts += 1;
            let small = |k: SegmentKind| {
                !matches!(k, SegmentKind::Loh | SegmentKind::Poh | SegmentKind::Frozen)
            };
            if segments
                .iter()
                .any(|s| small(s.kind) && s.start <= pointer && limit <= s.segment.reserved)
            {
                inside += 1;
            } else {
                return Err(fail(format!(
                    "thread {:#x}'s allocation context {pointer:#x}..{limit:#x} is in no small-object segment",
                    th.address
                )));
            }
        }
    }
    let handle_types = gc.handle_layout()?.types;
    match rt.descriptor().global_value("HandleMaxInternalTypes") {
        Ok(n) if n != handle_types => {
            return Err(fail(format!(
                "the handle tables have {handle_types} handle types, not the descriptor's {n}"
            )))
        }
        _ => {}
    }
    let ids = gc.identifiers();
    let found = found_by_search.map_or(String::new(), |slot| {
        format!(" (its table found at g_dacTable slot {slot}: the descriptor names none)")
    });
    Ok(format!(
        "{} GC, {}{found}; {handle_types} handle types; {} segments in bounds, {checked} first objects with a MethodTable; {inside} of {contexts} thread allocation contexts in small-object segments",
        if ids.server { "server" } else { "workstation" },
        if ids.regions { "regions" } else { "segments" },
        segments.len()
    ))
}

/// `System.String`'s MethodTable through CoreLib's metadata and TypeDef map.
fn string_method_table_by_metadata(rt: &Runtime, modules: &[ModuleInfo]) -> Result<u64, Stop> {
    use crate::contracts::code_versions::tables::lookup_map_entry;
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let corelib = corelib(modules).ok_or_else(|| Stop::Skip("CoreLib is not loaded".into()))?;
    let blob = loader::module_metadata(t, d, corelib)?
        .ok_or_else(|| Stop::Skip("CoreLib's metadata is not readable".into()))?;
    let md = crate::formats::ecma::Metadata::parse(&blob)
        .map_err(|e| fail(format!("CoreLib's metadata: {e}")))?;
    let rid = md
        .find_type("System.String")
        .ok_or_else(|| fail("CoreLib's metadata has no System.String".into()))?;
    let map = corelib
        .address
        .wrapping_add(f.off("Module", "TypeDefToMethodTableMap")?);
    let mt = lookup_map_entry(&f, map, rid)?;
    if mt == 0 {
        return Err(fail(format!(
            "CoreLib's TypeDef map has no entry for System.String (RID {rid})"
        )));
    }
    Ok(mt)
}

fn check_field_descs(rt: &Runtime, modules: &Result<Vec<ModuleInfo>, ContractError>) -> Outcome {
    use crate::contracts::field_desc::{self, ElementType};
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let modules = modules.as_ref().map_err(|e| Stop::Skip(e.to_string()))?;
    let mt = string_method_table_by_metadata(rt, modules)?;
    if let Ok(g) = f.global("StringMethodTable") {
        let named = t.read_pointer(g)?;
        if named != mt {
            return Err(fail(format!(
                "CoreLib's TypeDef map gives String's MethodTable as {mt:#x}, the runtime's StringMethodTable is {named:#x}"
            )));
        }
    }
    let meta = crate::names::MethodNamer::for_runtime(rt)
        .declared_fields(mt)
        .map_err(|e| fail(format!("String's fields in metadata: {e}")))?;
    let with_storage = meta.iter().filter(|m| !m.is_literal).count() as u64;
    let parent = f.ptr(mt, "MethodTable", "ParentMethodTable")?;
    let counted = field_desc::declared_field_count(t, d, mt, parent)?;
    if let Some(n) = counted {
        if n != with_storage {
            return Err(fail(format!(
                "String's EEClass counts {n} fields, its metadata declares {with_storage} with storage"
            )));
        }
    }
    let descs = field_desc::declared_field_descs(t, d, mt, with_storage)?;
    if descs.len() as u64 != with_storage {
        return Err(fail(format!(
            "{} of String's {with_storage} FieldDescs name String's MethodTable as their type",
            descs.len()
        )));
    }
    let name_of = |token: u32| {
        meta.iter()
            .find(|m| m.token == token)
            .map(|m| m.name.as_str())
    };
    let mut instance = Vec::new();
    for fd in &descs {
        let Some(name) = name_of(fd.token) else {
            return Err(fail(format!(
                "FieldDesc {:#x} names field {:#010x}, which String does not declare",
                fd.address, fd.token
            )));
        };
        if !fd.is_static {
            instance.push((name, fd.element_type, fd.offset));
        }
    }
    instance.sort_by_key(|i| i.2);
    let want = [
        ("_stringLength", ElementType::I4, 0),
        ("_firstChar", ElementType::Char, 4),
    ];
    if instance != want {
        return Err(fail(format!(
            "String's instance FieldDescs are {instance:?}, not {want:?}"
        )));
    }
    // The fields follow the MethodTable pointer.
    if f.off("String", "m_StringLength")? != 8 || f.off("String", "m_FirstChar")? != 12 {
        return Err(fail(
            "String's FieldDesc offsets and the descriptor's String offsets disagree".into(),
        ));
    }
    let mut statics = "statics not read on this runtime".to_string();
    if f.has("DynamicStaticsInfo", "GCStatics") {
        let empty = descs
            .iter()
            .find(|fd| fd.is_static && name_of(fd.token) == Some("Empty"))
            .ok_or_else(|| fail("String has no static Empty FieldDesc".into()))?;
        let bases = crate::inspect::values::statics_bases(rt, mt)?;
        if bases.gc != 0 {
            let s = t.read_pointer(bases.gc + u64::from(empty.offset))?;
            if s != 0 {
                let smt = f.ptr(s, "Object", "m_pMethTab")? & !7;
                let len = f.u32(s, "String", "m_StringLength")?;
                if smt != mt || len != 0 {
                    return Err(fail(format!(
                        "String.Empty read through the statics is {s:#x} (MethodTable {smt:#x}, length {len}), not an empty string"
                    )));
                }
                statics = format!("String.Empty at {s:#x}");
            } else {
                statics = "String.Empty not yet set".into();
            }
        }
    }
    Ok(format!(
        "String {mt:#x}: {} FieldDescs{}; {statics}",
        descs.len(),
        if counted.is_some() {
            ", as the EEClass counts"
        } else {
            ""
        }
    ))
}

fn check_thread_statics(
    rt: &Runtime,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    let f = Fields::new(rt.target(), rt.descriptor());
    if !f.has("Thread", "ThreadLocalDataPtr") || !f.has("ThreadLocalData", "Thread") {
        return Err(Stop::Skip(
            "the descriptor does not say where threads keep thread statics".into(),
        ));
    }
    let list = list.ok_or_else(|| Stop::Skip("no thread list".into()))?;
    let (mut with_data, mut arrays) = (0, 0);
    let mut array_mt = None;
    let threads = rt.contracts().threads().map_err(|e| fail(e.to_string()))?;
    for t in &list.threads {
        let data = threads.record(t.address)?.thread_local_data()?;
        if data == 0 {
            continue;
        }
        with_data += 1;
        let back = f.ptr(data, "ThreadLocalData", "Thread")?;
        if back != t.address {
            return Err(fail(format!(
                "thread {:#x}'s thread-local data {data:#x} names thread {back:#x}",
                t.address
            )));
        }
        let array = f.ptr(data, "ThreadLocalData", "NonCollectibleTlsArrayData")?;
        if array == 0 {
            continue;
        }
        arrays += 1;
        let mt = rt.target().read_pointer(array)? & !7;
        let component = rt.target().read_u32(mt)? & 0xFFFF;
        match array_mt {
            None if component == 8 => array_mt = Some(mt),
            Some(m) if m == mt => {}
            _ => {
                return Err(fail(format!(
                    "thread {:#x}'s thread-static array {array:#x} has MethodTable {mt:#x} (component size {component}), not an object[]'s",
                    t.address
                )))
            }
        }
    }
    if with_data == 0 {
        return Err(Stop::Skip("no thread has thread-local data".into()));
    }
    Ok(format!(
        "{with_data} thread(s) with thread-local data that names them; {arrays} thread-static object[](s)"
    ))
}

fn check_helper_frames(
    rt: &Runtime,
    list: Option<&crate::contracts::thread::ThreadList>,
) -> Outcome {
    let f = Fields::new(rt.target(), rt.descriptor());
    if !f.has("HelperMethodFrame_1OBJ", "GCPtrs") {
        return Err(Stop::Skip(
            "the descriptor does not describe HelperMethodFrame_1OBJ".into(),
        ));
    }
    let list = list.ok_or_else(|| Stop::Skip("no thread list".into()))?;
    let threads = Threads::for_runtime(rt).map_err(|e| Stop::Skip(e.to_string()))?;
    let waits = monitor_waits(rt);
    let segments = rt.contracts().gc().ok().and_then(|g| g.segments().ok());
    let (mut seen, mut waiting, mut objects, mut in_heap) = (0, 0, 0, 0);
    for t in &list.threads {
        let Ok(frames) = threads.frames(t) else {
            continue;
        };
        // The thread's innermost Frame: where a thread in Monitor.Wait waits.
        let innermost = frames.first().map(|fr| fr.address);
        for frame in frames
            .iter()
            .filter(|fr| fr.kind == Some("HelperMethodFrame_1OBJ"))
        {
            seen += 1;
            let slot = f.ptr(frame.address, "HelperMethodFrame_1OBJ", "GCPtrs")?;
            if slot.abs_diff(frame.address) > 0x1000 || slot % 8 != 0 {
                return Err(fail(format!(
                    "the HelperMethodFrame_1OBJ at {:#x} protects slot {slot:#x}, not one next to it",
                    frame.address
                )));
            }
            // A thread in Monitor.Wait waits in an FCALL whose helper frame (its innermost
            // Frame) protects the object it waits on: the object of the sync block that
            // lists the thread.
            if innermost == Some(frame.address) {
                if let Some(&object) = waits.get(&t.address) {
                    let protected = rt.target().read_pointer(slot)?;
                    if protected != object {
                        return Err(fail(format!(
                            "thread {:#x} waits on {object:#x} in Monitor.Wait, but its HelperMethodFrame_1OBJ at {:#x} protects {protected:#x}",
                            t.address, frame.address
                        )));
                    }
                    waiting += 1;
                }
            }
            let object = rt.target().read_pointer(slot)?;
            if object != 0 {
                let mt = rt.target().read_pointer(object)? & !7;
                let base_size = f.u32(mt, "MethodTable", "BaseSize")?;
                if !(16..=(1 << 20)).contains(&base_size) {
                    return Err(fail(format!(
                        "the HelperMethodFrame_1OBJ at {:#x} protects {object:#x}, whose MethodTable {mt:#x} has base size {base_size}",
                        frame.address
                    )));
                }
                // An object of the GC heap, whose type's EEClass names it back.
                if let Some(segments) = &segments {
                    if !segments.iter().any(|s| s.start <= object && object < s.end) {
                        return Err(fail(format!(
                            "the HelperMethodFrame_1OBJ at {:#x} protects {object:#x}, which is in no GC heap segment",
                            frame.address
                        )));
                    }
                    in_heap += 1;
                }
                let canonical = method_table_info(rt.target(), rt.descriptor(), mt)?.canonical;
                let class = f.ptr(canonical, "MethodTable", "EEClassOrCanonMT")?;
                let back = f.ptr(class, "EEClass", "MethodTable")?;
                if back != canonical {
                    return Err(fail(format!(
                        "the HelperMethodFrame_1OBJ at {:#x} protects {object:#x}, whose MethodTable {mt:#x} has an EEClass {class:#x} naming {back:#x}",
                        frame.address
                    )));
                }
                objects += 1;
            }
        }
    }
    if seen == 0 {
        return Err(Stop::Skip(
            "no thread is in a HelperMethodFrame_1OBJ".into(),
        ));
    }
    Ok(format!(
        "{seen} HelperMethodFrame_1OBJ(s) protect a slot next to them: {objects} an object whose MethodTable's EEClass names it back ({in_heap} inside a GC heap segment), the others null; {waiting} the object their thread waits on in Monitor.Wait"
    ))
}

/// The object each thread waits on in `Monitor.Wait` (by thread address): the objects of
/// the sync blocks whose wait lists name threads. Empty when sync blocks cannot be read.
fn monitor_waits(rt: &Runtime) -> std::collections::HashMap<u64, u64> {
    let mut waits = std::collections::HashMap::new();
    let Ok(sync) = rt.contracts().sync_blocks() else {
        return waits;
    };
    for index in 1..=1024u32 {
        let Ok(Some(entry)) = sync.entry(index) else {
            break;
        };
        if entry.object & 1 != 0 || entry.sync_block == 0 {
            continue;
        }
        if let Ok(threads) = sync.pulse_waiters(entry.sync_block) {
            for t in threads {
                waits.insert(t, entry.object);
            }
        }
    }
    waits
}

fn check_sync_blocks(rt: &Runtime, list: Option<&crate::contracts::thread::ThreadList>) -> Outcome {
    use crate::inspect::{Header, HeaderState};
    let sync = match rt.contracts().sync_blocks() {
        Ok(s) => s,
        Err(
            e @ (ContractError::Missing { .. }
            | ContractError::UnsupportedVersion { .. }
            | ContractError::Descriptor(_)),
        ) => return Err(Stop::Skip(e.to_string())),
        Err(e) => return Err(Stop::from(e)),
    };
    let (mut used, mut held, mut pulse_waiters) = (0u32, 0u32, 0usize);
    // Inside the runtime's count every entry is in use or free: a count read from the
    // wrong place (the table's size, say) reaches entries never written.
    let counted = sync.used_entries().map_err(Stop::from)?;
    for index in 1..=1024u32 {
        let Some(entry) = sync.entry(index)? else {
            if counted.is_some_and(|n| index <= n) {
                return Err(fail(format!(
                    "sync table entry {index} is empty, inside the runtime's count of {} used entries",
                    counted.unwrap_or_default()
                )));
            }
            break;
        };
        if entry.object & 1 != 0 || entry.sync_block == 0 {
            continue;
        }
        used += 1;
        let block = sync
            .of_object(index, entry.object)
            .map_err(|e| fail(e.to_string()))?;
        let header = Header::decode(rt.target().read_u32(entry.object.wrapping_sub(4))?);
        if header.state != (HeaderState::SyncBlock { index }) {
            return Err(fail(format!(
                "sync table entry {index}'s object {:#x} has header {:#010x}, which does not name it",
                entry.object, header.raw
            )));
        }
        let waiters = sync
            .pulse_waiters(entry.sync_block)
            .map_err(|e| fail(format!("sync block {index}: {e}")))?;
        if let Some(list) = list {
            if let Some(t) = waiters
                .iter()
                .find(|&&t| !list.threads.iter().any(|x| x.address == t))
            {
                return Err(fail(format!(
                    "sync block {index}'s wait list names {t:#x}, which is no thread of the thread store"
                )));
            }
        }
        pulse_waiters += waiters.len();
        let m = block.monitor;
        let Some(holder) = m.holder else { continue };
        held += 1;
        let Some(list) = list else { continue };
        let thread = holder.find(&list.threads);
        match thread {
            // A thin-lock word (.NET 11 keeps one in the block) records no OS id.
            Some(t) if m.holder_os_id.is_none_or(|os| t.has_os_id(os)) && m.recursion >= 1 => {}
            Some(t) => {
                return Err(fail(format!(
                    "sync block {index}'s monitor is held {} time(s) by thread {:#x} (OS id {}), but records OS id {:?}",
                    m.recursion, t.address, t.os_id, m.holder_os_id
                )))
            }
            None => {
                return Err(fail(format!(
                    "sync block {index}'s monitor is held by {holder:?}, which is no thread of the thread store"
                )))
            }
        }
    }
    if used == 0 {
        return Err(Stop::Skip("no sync block in use".into()));
    }
    Ok(format!(
        "{used} sync block(s) name their entries and objects; {held} held monitor(s) name their holders; {pulse_waiters} thread(s) in Monitor.Wait name their sync blocks"
    ))
}

fn check_exceptions(
    rt: &Runtime,
    threads: &Result<Threads, ContractError>,
    list: Option<&crate::contracts::thread::ThreadList>,
    exception_by_name: Option<u64>,
) -> Outcome {
    let contract = threads
        .as_ref()
        .map_err(|e| Stop::Skip(format!("no Thread contract: {e}")))?;
    let list = list.ok_or_else(|| Stop::Skip("no thread list".into()))?;
    let (t, d) = (rt.target(), rt.descriptor());
    let f = Fields::new(t, d);
    let mut checked = 0;
    let objects: Vec<(&ThreadInfo, u64)> = list
        .threads
        .iter()
        .filter_map(|th| Some((th, th.exception()?)))
        .collect();
    for (th, object) in objects {
        let descends = match (f.global("ExceptionMethodTable"), exception_by_name) {
            (Ok(_), _) => contract.is_exception_object(object),
            (Err(_), Some(exception)) => descends_from(rt, object, exception)?,
            (Err(_), None) => false,
        };
        if !descends {
            return Err(fail(format!(
                "thread {}'s exception in flight {object:#x} is not of a type that descends from Exception",
                th.os_id
            )));
        }
        let message = f.ptr(object, "Exception", "_message")?;
        if message != 0 && !is_string(rt, contract, message)? {
            return Err(fail(format!(
                "exception {object:#x}'s message {message:#x} is not a String"
            )));
        }
        let inner = f.ptr(object, "Exception", "_innerException")?;
        if inner != 0 && !contract.is_exception_object(inner) {
            return Err(fail(format!(
                "exception {object:#x}'s inner exception {inner:#x} is not an Exception"
            )));
        }
        let hresult = f.u32(object, "Exception", "_HResult")?;
        if hresult & 0x8000_0000 == 0 {
            return Err(fail(format!(
                "exception {object:#x} has HResult {hresult:#x}, not a failure code"
            )));
        }
        checked += 1;
    }
    if checked == 0 {
        return Err(Stop::Skip("no exception in flight".into()));
    }
    Ok(format!(
        "{checked} exceptions in flight: Exceptions with String messages and failure HResults"
    ))
}
