//! A NativeAOT runtime's threads: the thread store's list, each thread's OS id, state,
//! stack bounds, and the exceptions it is dispatching.

use std::collections::HashSet;

use serde::Serialize;

use crate::contracts::thread::ExceptionInfo;
use crate::contracts::ContractError;
use crate::limits::Limit;
use crate::records::native_aot::AotThreadRecord;

use super::NativeAot;

/// Most nested exceptions read of one thread (an ExInfo chain is as deep as the nesting
/// of catch handlers that throw).
const MAX_NESTED_EXCEPTIONS: usize = 64;
/// Most inner exceptions followed.
const MAX_INNER: usize = 16;
/// Longest exception message read, in UTF-16 units.
const MAX_MESSAGE: usize = 8192;

/// Thread state bits of NativeAOT's `Thread` (`ThreadStore`'s `TSF_*`).
const STATE_BITS: &[(u32, &str)] = &[
    (0x1, "attached"),
    (0x2, "detached"),
    (0x8, "suppress_gc_stress"),
    (0x10, "do_not_trigger_gc"),
    (0x20, "gc_special_thread"),
    (0x100, "activation_pending"),
    (0x200, "interrupted"),
    (0x400, "suspension_trapped"),
];

/// One thread of a NativeAOT runtime.
#[derive(Debug, Clone, Serialize)]
pub struct AotThread {
    /// The runtime's `Thread` (its thread-local block).
    pub address: u64,
    /// The OS thread id, as the reader sees it.
    pub os_id: u64,
    /// The id the runtime recorded, where it differs (a target in its own PID namespace).
    pub namespace_os_id: Option<u64>,
    /// State bits, where described (.NET 11; .NET 10 through cdac's overlay).
    pub state_bits: Option<u32>,
    /// Their names.
    pub state: Vec<&'static str>,
    /// The thread's stack, `[limit, base)`, where described.
    pub stack: Option<(u64, u64)>,
    /// Its managed `System.Threading.Thread` object, when found among its thread statics
    /// (the finalizer thread and threads that never ran managed code have none).
    pub managed_object: Option<u64>,
    /// `Environment.CurrentManagedThreadId`, from the managed Thread.
    pub managed_id: Option<u32>,
    /// `Thread.Name`, from the managed Thread.
    pub name: Option<String>,
    /// Its allocation context (next free byte, limit), when it has one.
    pub alloc_context: Option<(u64, u64)>,
    /// The exceptions being dispatched, innermost first.
    pub exceptions: Vec<ExceptionInfo>,
    /// Why an exception could not be read.
    pub exception_error: Option<String>,
}

impl AotThread {
    /// The innermost exception being dispatched.
    pub fn exception(&self) -> Option<&ExceptionInfo> {
        self.exceptions.first()
    }

    /// Whether this is the runtime's finalizer thread (it never ran managed code through
    /// the usual entry, and suppresses GC stress).
    pub fn is_finalizer(&self) -> bool {
        self.state_bits.is_some_and(|s| s & 0x8 != 0)
    }
}

/// The thread store's list, as far as it could be read.
#[derive(Debug, Clone, Serialize)]
pub struct AotThreadList {
    /// The store.
    pub store: u64,
    /// Threads, newest first (the runtime pushes new threads at the front).
    pub threads: Vec<AotThread>,
    /// Why the list ends before its end.
    pub error: Option<String>,
}

impl NativeAot {
    /// Every thread on the runtime's list, with the exceptions each is dispatching. A list
    /// that cannot be read to its end keeps the threads before the break and says why.
    pub fn threads(&self) -> Result<AotThreadList, ContractError> {
        let target = self.rt.target();
        let store = self.thread_store()?;
        let first_link = self.store_layout.first_thread_link;
        let namespace_ids = target.source().namespace_thread_ids();
        let max = target.limits().max_list_length;
        let mut threads = Vec::new();
        let mut seen = HashSet::new();
        let mut error = None;
        let mut next = target.read_pointer(store.wrapping_add(first_link))?;
        while next != 0 {
            if !seen.insert(next) {
                error = Some(format!("the thread list loops back to {next:#x}"));
                break;
            }
            if threads.len() as u64 >= max {
                error = Some(
                    ContractError::LimitExceeded {
                        what: "the thread list",
                        addr: store,
                        limit: Limit::ListLength,
                        cap: max,
                        unit: "entries",
                    }
                    .to_string(),
                );
                break;
            }
            let record = match AotThreadRecord::read(target, &self.thread_layout, next) {
                Ok(r) => r,
                Err(e) => {
                    error = Some(format!("thread {next:#x}: {e}"));
                    break;
                }
            };
            let (exceptions, exception_error) = match self.exceptions_of(&record) {
                Ok(list) => (list, None),
                Err((list, e)) => (list, Some(e)),
            };
            let state_bits = record.state().ok();
            let os_id = namespace_ids
                .get(&record.os_id)
                .map_or(record.os_id, |&host| host as u64);
            let managed_object = self.managed_thread_object(&record);
            let (managed_id, name) = managed_object
                .map(|o| self.managed_thread_fields(o))
                .unwrap_or((None, None));
            let alloc_context = record.alloc_context();
            threads.push(AotThread {
                alloc_context,
                managed_object,
                managed_id,
                name,
                address: next,
                os_id,
                namespace_os_id: (os_id != record.os_id).then_some(record.os_id),
                state_bits,
                state: state_bits.map(state_names).unwrap_or_default(),
                stack: record.stack(),
                exceptions,
                exception_error,
            });
            next = record.next;
        }
        Ok(AotThreadList {
            store,
            threads,
            error,
        })
    }

    /// The exceptions a thread dispatches, innermost first; on an error, those read before it.
    fn exceptions_of(
        &self,
        record: &AotThreadRecord,
    ) -> Result<Vec<ExceptionInfo>, (Vec<ExceptionInfo>, String)> {
        let mut out = Vec::new();
        let Some(layout) = &self.exinfo_layout else {
            return Ok(out);
        };
        let mut at = record.exception_tracker;
        let mut seen = HashSet::new();
        while at != 0 && out.len() < MAX_NESTED_EXCEPTIONS {
            if !seen.insert(at) {
                return Err((out, format!("the ExInfo chain loops back to {at:#x}")));
            }
            let (previous, object) = layout
                .read(self.rt.target(), at)
                .map_err(|e| (out.clone(), format!("ExInfo {at:#x}: {e}")))?;
            if object != 0 {
                let info = self
                    .exception(object)
                    .map_err(|e| (out.clone(), format!("exception {object:#x}: {e}")))?;
                out.push(info);
            }
            at = previous;
        }
        Ok(out)
    }

    /// The exception object at `address`: its type (named where the executable's metadata
    /// names it), message, HRESULT and inner exceptions.
    pub fn exception(&self, address: u64) -> Result<ExceptionInfo, ContractError> {
        self.exception_at_depth(address, 0)
    }

    fn exception_at_depth(
        &self,
        address: u64,
        depth: usize,
    ) -> Result<ExceptionInfo, ContractError> {
        let target = self.rt.target();
        let method_table = target.read_pointer(address)? & !7;
        let type_name = self.type_name(method_table);
        let mut info = ExceptionInfo {
            address,
            method_table,
            type_name,
            message: None,
            hresult: 0,
            inner: None,
            stack_trace: 0,
            stack_trace_string: None,
            inner_error: None,
        };
        let Some(layout) = &self.exception_layout else {
            return Ok(info);
        };
        let message = target.read_pointer(address.wrapping_add(layout.message))?;
        if message != 0 {
            info.message = self.string_at(message, MAX_MESSAGE).ok();
        }
        info.hresult = target.read_i32(address.wrapping_add(layout.hresult))?;
        let inner = target.read_pointer(address.wrapping_add(layout.inner))?;
        if inner != 0 && depth < MAX_INNER {
            match self.exception_at_depth(inner, depth + 1) {
                Ok(i) => info.inner = Some(Box::new(i)),
                Err(e) => info.inner_error = Some(e.to_string()),
            }
        }
        Ok(info)
    }

    /// The name of the type whose MethodTable is `method_table`, when the executable's
    /// stack-trace metadata names a type with its hash code.
    pub fn type_name(&self, method_table: u64) -> Option<String> {
        let names = self.method_names().ok()?;
        let hash = self
            .rt
            .target()
            .read_u32(method_table.wrapping_add(20))
            .ok()?;
        names
            .type_with_hash(hash, self.hash_style())
            .map(str::to_string)
    }
}

/// Most frames of an exception's trace read.
const MAX_TRACE: usize = 4096;

impl NativeAot {
    /// The code addresses an exception's trace recorded (innermost first), each with the
    /// method it is in as the runtime names it (`module!<BaseAddress>+0x…` where the
    /// executable's stack-trace data does not name it).
    pub fn exception_trace(
        &self,
        exception: u64,
    ) -> Result<Vec<(u64, Option<super::AotMethod>)>, ContractError> {
        let target = self.rt.target();
        let layout = self
            .exception_layout
            .ok_or_else(|| crate::records::missing_field("System.Exception", "_message"))?;
        let (Some(trace), Some(used)) = (layout.trace, layout.trace_used) else {
            return Err(crate::records::missing_field(
                "System.Exception",
                "_corDbgStackTrace",
            ));
        };
        let array = target.read_pointer(exception.wrapping_add(trace))?;
        if array == 0 {
            return Ok(Vec::new());
        }
        let length = target.read_u32(array.wrapping_add(8))? as usize;
        let used = usize::try_from(target.read_i32(exception.wrapping_add(used))?).unwrap_or(0);
        let count = used.min(length).min(MAX_TRACE);
        let ips = target.read_pointers(array.wrapping_add(16), count)?;
        let names = self.method_names().ok();
        Ok(ips
            .into_iter()
            .map(|ip| {
                let method = names
                    .as_ref()
                    .and_then(|n| match n.lookup(ip.saturating_sub(1)) {
                        Some(super::CodeAt::Method(m, _)) => Some(m),
                        _ => None,
                    });
                (ip, method)
            })
            .collect())
    }

    /// The thread's managed `System.Threading.Thread`: the runtime keeps it only in a
    /// thread static (`Thread.t_currentThread`), a field of the object holding the thread's
    /// inlined statics at an offset no descriptor states; it is the one field holding an
    /// object whose type hashes as `System.Threading.Thread`.
    fn managed_thread_object(&self, record: &AotThreadRecord) -> Option<u64> {
        let target = self.rt.target();
        let root = record.inlined_statics().filter(|&r| r != 0)?;
        let holder = target.read_pointer(root).ok().filter(|&h| h != 0)?;
        let mt = self.method_table_layout.as_ref()?;
        let holder_mt = target.read_pointer(holder).ok()? & !7;
        let size =
            u64::from(target.read_u32(holder_mt.wrapping_add(mt.base_size)).ok()?).min(64 << 10);
        let wanted = self.thread_type_hash();
        let slots = target
            .read_pointers(
                holder.wrapping_add(8),
                (size.saturating_sub(8) / 8) as usize,
            )
            .ok()?;
        slots.into_iter().filter(|&o| o != 0).find(|&o| {
            target
                .read_pointer(o)
                .and_then(|o| target.read_u32((o & !7).wrapping_add(mt.hash_code)))
                .is_ok_and(|h| h == wanted)
        })
    }

    fn thread_type_hash(&self) -> u32 {
        use super::method_names::name_hash;
        match self.hash_style() {
            super::TypeHashStyle::FullName => name_hash("System.Threading.Thread"),
            super::TypeHashStyle::NamespaceXorName => {
                name_hash("System.Threading") ^ name_hash("Thread")
            }
        }
    }

    /// (managed id, name) of a managed Thread: its id is a `ManagedThreadId` object whose
    /// first field is the number.
    fn managed_thread_fields(&self, thread: u64) -> (Option<u32>, Option<String>) {
        let Some(layout) = &self.managed_thread_layout else {
            return (None, None);
        };
        let target = self.rt.target();
        let id = target
            .read_pointer(thread.wrapping_add(layout.managed_id))
            .ok()
            .filter(|&o| o != 0)
            .and_then(|o| target.read_u32(o.wrapping_add(8)).ok());
        let name = target
            .read_pointer(thread.wrapping_add(layout.name))
            .ok()
            .filter(|&s| s != 0)
            .and_then(|s| self.string_at(s, 1024).ok());
        (id, name)
    }

    /// The text of the string object at `address` (at most `max_chars` UTF-16 units).
    pub fn string_at(&self, address: u64, max_chars: usize) -> Result<String, ContractError> {
        let target = self.rt.target();
        let string = self
            .string_layout
            .ok_or_else(|| crate::records::missing_field("String", "m_StringLength"))?;
        let length = target.read_u32(address.wrapping_add(string.length))? as usize;
        target
            .read_utf16(
                address.wrapping_add(string.first_char),
                length.min(max_chars),
            )
            .map_err(Into::into)
    }
}

fn state_names(bits: u32) -> Vec<&'static str> {
    STATE_BITS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect()
}
