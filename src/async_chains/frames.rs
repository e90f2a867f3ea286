//! One async method suspended in a state machine box: which method it is, the await it
//! is suspended at (its state, and the await's source line from the PDB's async stepping
//! information), and what that await holds.

use std::collections::HashMap;
use std::path::PathBuf;

use rustc_hash::FxHashMap;

use crate::contracts::gc::{locate, GcHeapData, GcSegment};
use crate::contracts::ContractError;
use crate::formats::pdb::{AwaitPoint, SourceLocation};
use crate::inspect::{FieldView, Inspector, ObjectView, Value};
use crate::names::MethodNamer;
use crate::runtime::Runtime;
use crate::source_lines::SourceLines;

use crate::inspect::int_field;

/// The start of a state machine box's type name (async `Task`, `Task<T>`, `ValueTask`
/// and `void` methods all box their state machines in it).
const BOX_PREFIX: &str = "System.Runtime.CompilerServices.AsyncTaskMethodBuilder`1+";
/// The field of a box that holds the compiler's state machine.
const STATE_MACHINE_FIELD: &str = "StateMachine";
/// The compiler's state field: -1 running, -2 done, N >= 0 suspended at await N.
const STATE_FIELD: &str = "<>1__state";
/// The start of the compiler's awaiter fields' names (`<>u__1`, `<>u__2`, …).
const AWAITER_PREFIX: &str = "<>u__";

/// Whether a type (by its runtime name) is an async state machine box.
pub fn is_state_machine_box(type_name: &str) -> bool {
    type_name.starts_with(BOX_PREFIX) && type_name.contains("StateMachineBox`1[")
}

/// What an await holds: the awaiter field and the object in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaited {
    /// The awaiter field (`<>u__1`).
    pub field: String,
    /// Its type (`System.Runtime.CompilerServices.TaskAwaiter`…).
    pub awaiter_type: String,
    /// The object the awaiter holds (a Task, or an `IValueTaskSource` such as a socket's
    /// event args).
    pub object: u64,
    /// That object's type.
    pub object_type: String,
}

/// An async method suspended (or running) in a box.
#[derive(Debug, Clone, PartialEq)]
pub struct StateMachineFrame {
    /// The compiler's state machine type (`Ns.Type+<Method>d__8`).
    pub type_name: String,
    /// Its MethodTable.
    pub method_table: u64,
    /// The async method (`Ns.Type.Method`).
    pub method: String,
    /// Its state: N >= 0 suspended at await N (counted from 0), -1 running, -2 done;
    /// `None` when unreadable.
    pub state: Option<i32>,
    /// `MoveNext`'s module file and MethodDef token.
    pub move_next: Option<(PathBuf, u32)>,
    /// Where the await it is suspended at is in the source.
    pub await_location: Option<SourceLocation>,
    /// What that await holds.
    pub awaiting: Option<Awaited>,
}

/// The async method a state machine type runs: `Ns.Type+<Method>d__8` is `Ns.Type.Method`.
pub fn async_method_name(state_machine_type: &str) -> String {
    let (declaring, nested) = state_machine_type
        .rsplit_once('+')
        .unwrap_or(("", state_machine_type));
    let method = nested
        .strip_prefix('<')
        .and_then(|n| n.rfind(">d__").map(|end| &n[..end]))
        .unwrap_or(nested);
    if declaring.is_empty() {
        method.to_string()
    } else {
        format!("{declaring}.{method}")
    }
}

/// What kind of thing an awaited object is, by its type.
pub fn kind_of_awaited(type_name: &str, has_completion_source: bool) -> &'static str {
    if has_completion_source {
        "task_completion_source"
    } else if type_name.starts_with("System.Threading.Tasks.Task+DelayPromise") {
        "timer"
    } else if type_name.starts_with("System.Net.Sockets.")
        || type_name.starts_with("System.IO.")
        || type_name.contains("AsyncSocketEventArgs")
    {
        "io"
    } else if type_name.starts_with("System.Threading.SemaphoreSlim") {
        "semaphore"
    } else if type_name.starts_with("System.Threading.Tasks.Task") {
        "task"
    } else {
        "other"
    }
}

/// A method's module file and MethodDef token.
type MethodDef = (PathBuf, u32);

/// Reads state machine frames, caching each state machine type's await points.
pub struct FrameReader<'n, 'l> {
    rt: &'n Runtime,
    namer: &'n mut MethodNamer,
    lines: &'l SourceLines,
    segments: Vec<GcSegment>,
    heaps: Vec<GcHeapData>,
    /// Per state machine MethodTable: its MoveNext.
    move_nexts: HashMap<u64, Option<MethodDef>>,
    /// Per MoveNext: its awaits, from the PDB.
    awaits: HashMap<MethodDef, Option<Vec<AwaitPoint>>>,
    type_names: FxHashMap<u64, String>,
}

impl<'n, 'l> FrameReader<'n, 'l> {
    /// Its namer and source lines, lent to the runtime-async reader.
    pub(super) fn namer_and_lines(&mut self) -> (&mut MethodNamer, &'l SourceLines) {
        (&mut *self.namer, self.lines)
    }

    /// A reader over `rt`'s heap.
    pub fn new(rt: &'n Runtime, namer: &'n mut MethodNamer, lines: &'l SourceLines) -> Self {
        let (segments, heaps) = match rt.contracts().gc() {
            Ok(gc) => (
                gc.segments().unwrap_or_default(),
                gc.heaps().unwrap_or_default(),
            ),
            Err(_) => (Vec::new(), Vec::new()),
        };
        FrameReader {
            rt,
            namer,
            lines,
            segments,
            heaps,
            move_nexts: HashMap::new(),
            awaits: HashMap::new(),
            type_names: FxHashMap::default(),
        }
    }

    /// The names of the awaited objects' types met so far.
    pub fn take_type_names(&mut self) -> FxHashMap<u64, String> {
        std::mem::take(&mut self.type_names)
    }

    /// The frame of the box `view`.
    pub fn read(
        &mut self,
        inspector: &mut Inspector<'_>,
        view: &ObjectView,
    ) -> Result<StateMachineFrame, ContractError> {
        let field = view
            .fields
            .iter()
            .find(|f| f.name == STATE_MACHINE_FIELD)
            .ok_or_else(|| ContractError::Corrupt {
                what: "async state machine box",
                addr: view.address,
                detail: "it has no StateMachine field".into(),
            })?;
        // A struct state machine (release builds) is stored in the box; a class one
        // (debug builds) is referenced.
        let (method_table, type_name, fields) = match &field.value {
            Value::Struct {
                method_table,
                type_name,
                fields,
            } => (*method_table, type_name.clone(), fields.clone()),
            Value::Reference { address, .. } if *address != 0 => {
                let sm = inspector.view(*address, 0)?;
                (sm.method_table, sm.type_name, sm.fields)
            }
            other => {
                return Err(ContractError::Corrupt {
                    what: "async state machine box",
                    addr: view.address,
                    detail: format!("its StateMachine is {other:?}"),
                })
            }
        };
        let state = int_field(&fields, STATE_FIELD).map(|s| s as i32);
        let awaiting = match state {
            Some(s) if s >= 0 => self.awaited(inspector, &fields, s),
            _ => None,
        };
        let await_location = match state {
            Some(s) if s >= 0 => self.await_location(method_table, s as usize),
            _ => None,
        };
        let move_next = self.move_next(method_table);
        Ok(StateMachineFrame {
            method: async_method_name(&type_name),
            type_name,
            method_table,
            state,
            move_next,
            await_location,
            awaiting,
        })
    }

    /// The awaiter field in use at await `state` and the object it holds. As SOS does:
    /// `<>u__1` at state 0 or when it is the only awaiter field; otherwise the first one
    /// holding an object (the compiler clears an awaiter field once its await is done).
    fn awaited(
        &mut self,
        inspector: &mut Inspector<'_>,
        fields: &[FieldView],
        state: i32,
    ) -> Option<Awaited> {
        let awaiters: Vec<&FieldView> = fields
            .iter()
            .filter(|f| f.name.starts_with(AWAITER_PREFIX))
            .collect();
        let target = self.rt.target();
        // An awaiter's object reference is its first field (TaskAwaiter's m_task,
        // ValueTaskAwaiter's ValueTask._obj), or the field is the reference itself.
        let held = |f: &FieldView| -> Option<u64> {
            target.read_pointer(f.address).ok().filter(|&a| a != 0)
        };
        let chosen = if state == 0 || awaiters.len() == 1 {
            awaiters.iter().find(|f| f.name == "<>u__1").copied()
        } else {
            awaiters.iter().find(|f| held(f).is_some()).copied()
        }?;
        let object = held(chosen)?;
        // Only an object of the heap counts (the first bytes of some awaiters are no
        // reference).
        locate(&self.segments, &self.heaps, object)?;
        let mt = target.read_pointer(object).ok()? & !7;
        let object_type = match self.type_names.get(&mt) {
            Some(n) => n.clone(),
            None => {
                let n = inspector.type_name(mt);
                self.type_names.insert(mt, n.clone());
                n
            }
        };
        if object_type.starts_with("<MethodTable") {
            return None;
        }
        Some(Awaited {
            field: chosen.name.clone(),
            awaiter_type: chosen.type_name.clone(),
            object,
            object_type,
        })
    }

    /// Where await `state` of the state machine type `method_table` is in the source.
    /// The `MoveNext` of a state machine type.
    fn move_next(&mut self, method_table: u64) -> Option<MethodDef> {
        if let Some(m) = self.move_nexts.get(&method_table) {
            return m.clone();
        }
        let found = self.namer.declared_method(method_table, "MoveNext");
        self.move_nexts.insert(method_table, found.clone());
        found
    }

    fn await_location(&mut self, method_table: u64, state: usize) -> Option<SourceLocation> {
        let move_next = self.move_next(method_table)?;
        if !self.awaits.contains_key(&move_next) {
            let (path, token) = &move_next;
            let found = self
                .lines
                .finder()
                .pdb_for(path)
                .ok()
                .and_then(|pdb| pdb.pdb.async_await_points(token & 0x00FF_FFFF).ok());
            self.awaits.insert(move_next.clone(), found);
        }
        let points = self.awaits.get(&move_next)?.as_ref()?;
        let point = points.get(state)?;
        let (path, token) = &move_next;
        let pdb = self.lines.finder().pdb_for(path).ok()?;
        pdb.pdb
            .line_at(token & 0x00FF_FFFF, point.yield_offset)
            .ok()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_methods_are_named_from_their_state_machines() {
        assert_eq!(
            async_method_name("Cdac.Testbed.Async.AsyncChains+<SuspendedInner>d__8"),
            "Cdac.Testbed.Async.AsyncChains.SuspendedInner"
        );
        assert_eq!(
            async_method_name("System.IO.Pipes.PipeStream+<ReadAsyncCore>d__82"),
            "System.IO.Pipes.PipeStream.ReadAsyncCore"
        );
        assert_eq!(async_method_name("Odd"), "Odd");
    }

    #[test]
    fn boxes_are_told_by_name() {
        assert!(is_state_machine_box(
            "System.Runtime.CompilerServices.AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1[System.Int32,A+<M>d__1]"
        ));
        assert!(!is_state_machine_box(
            "System.Threading.Tasks.Task`1[System.Int32]"
        ));
    }
}
