//! One walk of the heap for async work: every object whose type derives from
//! `System.Threading.Tasks.Task` (state machine boxes are Tasks), and the
//! TaskCompletionSources, which say which Tasks only code holding them can complete.

use rustc_hash::FxHashMap;

use crate::contracts::runtime_type_system::method_table_info;
use crate::contracts::ContractError;
use crate::names::MethodNamer;
use crate::runtime::Runtime;

/// `System.Threading.Tasks.Task`.
const TASK: &str = "System.Threading.Tasks.Task";
/// The generic TaskCompletionSource (its name's start) and the non-generic one.
const COMPLETION_SOURCE: &str = "System.Threading.Tasks.TaskCompletionSource";
/// Objects this small hold no Task (a Task has more fields than that).
const MIN_TASK_BYTES: u64 = 24;
/// Most base types followed from one type.
const MAX_BASE_TYPES: usize = 64;

/// What the walk found.
#[derive(Debug, Default)]
pub struct FoundTasks {
    /// Every Task: (address, MethodTable), in address order within a segment.
    pub tasks: Vec<(u64, u64)>,
    /// Every TaskCompletionSource with its Task: (source, Task).
    pub completion_sources: Vec<(u64, u64)>,
    /// Names of the Task and TaskCompletionSource types seen.
    pub type_names: FxHashMap<u64, String>,
    /// Objects visited.
    pub objects_scanned: u64,
    /// Where the walk stopped early.
    pub problems: Vec<String>,
}

/// What a MethodTable's type is, for this walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Task,
    CompletionSource,
    Other,
}

/// Classifies MethodTables, each once: a type is a Task when it or a base type is named
/// `System.Threading.Tasks.Task`.
struct Classifier<'r> {
    rt: &'r Runtime,
    namer: MethodNamer,
    kinds: FxHashMap<u64, Kind>,
    names: FxHashMap<u64, String>,
}

impl Classifier<'_> {
    fn kind(&mut self, mt: u64) -> Kind {
        if let Some(k) = self.kinds.get(&mt) {
            return *k;
        }
        // Up the base chain to a level already classified, to Task itself, or to the
        // root; then every level passed is classified.
        let mut chain: Vec<(u64, String)> = Vec::new();
        let mut level = mt;
        let mut below_task = false;
        while level != 0 && chain.len() < MAX_BASE_TYPES {
            if let Some(k) = self.kinds.get(&level) {
                below_task = *k == Kind::Task;
                break;
            }
            let name = self.namer.type_name(level).unwrap_or_default();
            if name == TASK {
                self.kinds.insert(level, Kind::Task);
                self.names.insert(level, name);
                below_task = true;
                break;
            }
            chain.push((level, name));
            level = method_table_info(self.rt.target(), self.rt.descriptor(), level)
                .map_or(0, |info| info.parent);
        }
        for (at, name) in chain {
            let k = if below_task {
                Kind::Task
            } else if name.starts_with(COMPLETION_SOURCE) {
                Kind::CompletionSource
            } else {
                Kind::Other
            };
            if k != Kind::Other {
                self.names.insert(at, name);
            }
            self.kinds.insert(at, k);
        }
        self.kinds.get(&mt).copied().unwrap_or(Kind::Other)
    }
}

/// Walks every segment once.
pub fn scan(rt: &Runtime) -> Result<FoundTasks, ContractError> {
    let layout = crate::heap::layout(rt)?;
    let mut classifier = Classifier {
        rt,
        namer: MethodNamer::for_runtime(rt),
        kinds: FxHashMap::default(),
        names: FxHashMap::default(),
    };
    let mut found = FoundTasks::default();
    let in_gc = rt.contracts().gc()?.structures_invalid_count().unwrap_or(0);
    if in_gc != 0 {
        found.problems.push(format!(
            "the target was taken while a garbage collection was moving objects \
             (gc_structures_invalid_cnt = {in_gc}): Tasks may be missing"
        ));
    }
    let mut sources = Vec::new();
    let summary = crate::heap::walk(rt, &layout, |o| {
        if o.is_free {
            return;
        }
        match classifier.kind(o.method_table) {
            Kind::Task if o.size > MIN_TASK_BYTES => found.tasks.push((o.address, o.method_table)),
            Kind::Task => {}
            Kind::CompletionSource => sources.push(o.address),
            Kind::Other => {}
        }
    })?;
    found.objects_scanned = summary.objects;
    found
        .problems
        .extend(summary.problems.iter().map(|p| format!("heap walk: {p}")));
    // A TaskCompletionSource's only field is its Task (`_task`), the first after the
    // MethodTable pointer.
    let target = rt.target();
    for tcs in sources {
        match target.read_pointer(tcs + 8) {
            Ok(task) if task != 0 => found.completion_sources.push((tcs, task)),
            Ok(_) => {}
            Err(e) => found
                .problems
                .push(format!("TaskCompletionSource {tcs:#x}: {e}")),
        }
    }
    found.type_names = classifier.names;
    Ok(found)
}
