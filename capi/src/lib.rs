//! `libcdac`: the C ABI of `cdac`, for debugger extensions (gdb and lldb Python through
//! ctypes) and C programs. `include/cdac.h` declares it; this file is the one place of the
//! workspace where `unsafe` meets foreign callers, each block with its `SAFETY:` line.
//!
//! Every entry point returns an `int32_t` status ([`CDAC_OK`], [`CDAC_NOT_FOUND`], or a
//! negative `CDAC_E_*`), records the message of a failure for [`cdac_last_error`] (per
//! thread), and catches panics: none crosses the boundary.
//!
//! A handle owns one [`Runtime`] and the readers built over it (ExecutionManager, method
//! namer, stack walker, PDB cache), made on first use and kept, so that repeated calls are
//! cheap. Handles are checked against a registry of live handles: a closed or made-up
//! pointer is [`CDAC_E_BAD_HANDLE`], never a dereference.

#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cdac_core::contracts::debug_info::{il_offset, DebugInfoFormat, IlOffset};
use cdac_core::contracts::execution_manager::exception_clauses::ClauseKind;
use cdac_core::contracts::execution_manager::{CodeBlock, ExecutionManager, JitType};
use cdac_core::contracts::loader::{self, ModuleInfo};
use cdac_core::contracts::thread::Threads;
use cdac_core::contracts::ContractError;
use cdac_core::exception_report::ExceptionReport;
use cdac_core::inspect::{FieldView, InspectOptions, Inspector, Value};
use cdac_core::memory::{DataLayout, MappedFile, MemorySource, ReadError, TargetKind, ThreadInfo};
use cdac_core::names::MethodNamer;
use cdac_core::roots::{Marker, RootKind, RootSet, Via};
use cdac_core::runtime::{OpenOptions, Runtime, RuntimeError};
use cdac_core::source_lines::SourceLines;
use cdac_core::stacks::walk::{FrameCode, StackWalker};
use cdac_core::unwind::aarch64::managed::step_managed as step_managed_arm64;
use cdac_core::unwind::x86_64::managed::step_managed;
use cdac_core::unwind::{x64_reg, Arm64Context, Registers, UnwindError, X64Context};

/// Success.
pub const CDAC_OK: i32 = 0;
/// The address is not managed code (or the asked-for thing does not exist); not an error.
pub const CDAC_NOT_FOUND: i32 = 1;
/// A required pointer argument was NULL.
pub const CDAC_E_NULL_POINTER: i32 = -1;
/// The handle is not one `cdac_open_*` returned, or it was closed.
pub const CDAC_E_BAD_HANDLE: i32 = -2;
/// The target could not be opened, or no .NET runtime was found in it.
pub const CDAC_E_OPEN_FAILED: i32 = -3;
/// Target memory could not be read.
pub const CDAC_E_READ_FAILED: i32 = -4;
/// The caller's buffer is too small (the needed size is reported where the call says).
pub const CDAC_E_BUFFER_TOO_SMALL: i32 = -5;
/// A panic inside cdac (or in a host callback) was caught.
pub const CDAC_E_PANIC: i32 = -6;
/// An argument is out of range (a path that is not UTF-8, a register set without rip or
/// rsp, ...).
pub const CDAC_E_INVALID_ARGUMENT: i32 = -7;
/// The runtime's data could not be interpreted (unsupported contract version, damaged
/// data, missing unwind information).
pub const CDAC_E_RUNTIME_DATA: i32 = -8;

/// `cdac_method_info.kind` of JIT-compiled code.
pub const CDAC_CODE_JIT: u32 = 1;
/// `cdac_method_info.kind` of ReadyToRun (precompiled) code.
pub const CDAC_CODE_READY_TO_RUN: u32 = 2;
/// `cdac_method_info.kind` when the code manager is not known.
pub const CDAC_CODE_UNKNOWN: u32 = 0;
/// `cdac_method_info.kind` of NativeAOT code (the runtime is linked into the executable;
/// `method_desc` is 0, the method is known by its start).
pub const CDAC_CODE_NATIVE_AOT: u32 = 3;

/// `cdac_frame.kind` of a frame in native code.
pub const CDAC_FRAME_NATIVE: u32 = 0;
/// `cdac_frame.kind` of a frame in managed code.
pub const CDAC_FRAME_MANAGED: u32 = 1;

/// `cdac_x64_regs.valid_mask` bits.
pub const CDAC_REG_RIP: u32 = 1 << 0;
/// rsp is valid.
pub const CDAC_REG_RSP: u32 = 1 << 1;
/// rbp is valid.
pub const CDAC_REG_RBP: u32 = 1 << 2;
/// rbx is valid.
pub const CDAC_REG_RBX: u32 = 1 << 3;
/// r12 is valid.
pub const CDAC_REG_R12: u32 = 1 << 4;
/// r13 is valid.
pub const CDAC_REG_R13: u32 = 1 << 5;
/// r14 is valid.
pub const CDAC_REG_R14: u32 = 1 << 6;
/// r15 is valid.
pub const CDAC_REG_R15: u32 = 1 << 7;
/// Not a register: rip is a return address (every frame but the innermost and those a
/// signal interrupted), so the code is looked up at `rip - 1`, in the call.
pub const CDAC_REG_RIP_IS_RETURN: u32 = 1 << 8;

/// `cdac_architecture` values.
pub const CDAC_ARCH_X64: u32 = 1;
/// An arm64 (AArch64) target.
pub const CDAC_ARCH_ARM64: u32 = 2;

/// `cdac_arm64_regs.valid_mask` bit of `sp` (bits 0–30 are x0–x30).
pub const CDAC_ARM64_REG_SP: u64 = 1 << 31;
/// `cdac_arm64_regs.valid_mask` bit of `pc`.
pub const CDAC_ARM64_REG_PC: u64 = 1 << 32;
/// Not a register: pc is a return address, so the code is looked up at `pc - 1`, in the
/// call (as [`CDAC_REG_RIP_IS_RETURN`] on x64).
pub const CDAC_ARM64_REG_PC_IS_RETURN: u64 = 1 << 33;

/// Reads `len` bytes at `addr` of the target into `buf`; returns 0 when the whole buffer
/// was filled, anything else when it could not be.
pub type CdacReadFn = Option<
    unsafe extern "C-unwind" fn(ctx: *mut c_void, addr: u64, buf: *mut u8, len: usize) -> i32,
>;

/// One file mapped into the target (from the host's module list or a core's `NT_FILE`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CdacMapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub file_offset: u64,
    /// Path of the file (NUL-terminated UTF-8); copied by `cdac_open_callbacks`.
    pub path: *const c_char,
}

/// What `cdac_ip2md` finds about the method owning an address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacMethodInfo {
    /// The method's MethodDesc.
    pub method_desc: u64,
    /// Start of the method's (hot) code.
    pub start: u64,
    /// Size of the hot code (0 when unknown).
    pub hot_size: u64,
    /// Offset of the address from `start`.
    pub relative_offset: u64,
    /// `CDAC_CODE_JIT`, `CDAC_CODE_READY_TO_RUN` or `CDAC_CODE_UNKNOWN`.
    pub kind: u32,
    /// 1 when the address is in a funclet (catch, finally, filter, fault block), else 0.
    pub is_funclet: u32,
}

/// x64 registers of one frame: what a debugger's unwinder has and needs.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacX64Regs {
    pub rip: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    /// `CDAC_REG_*` bits of the registers that are known.
    pub valid_mask: u32,
}

/// arm64 registers of one frame: x0–x30 (x29 the frame pointer, x30 the link register),
/// sp and pc, each known or not (`valid_mask`: bit n for xn, then the `CDAC_ARM64_REG_*`
/// bits).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacArm64Regs {
    pub x: [u64; 31],
    pub sp: u64,
    pub pc: u64,
    pub valid_mask: u64,
}

/// One frame of `cdac_stack`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacFrame {
    /// Instruction pointer (a return address except for the innermost frame).
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// MethodDesc of a managed frame, 0 for a native one.
    pub method_desc: u64,
    /// `CDAC_FRAME_MANAGED` or `CDAC_FRAME_NATIVE`.
    pub kind: u32,
    /// IL offset of a managed frame, -1 when unknown (native frames, prolog, epilog).
    pub il_offset: i32,
}

/// `cdac_eh_clause.kind`: `catch (T)`.
pub const CDAC_EH_TYPED: u32 = 0;
/// `cdac_eh_clause.kind`: `catch when (filter)`.
pub const CDAC_EH_FILTER: u32 = 1;
/// `cdac_eh_clause.kind`: `finally`.
pub const CDAC_EH_FINALLY: u32 = 2;
/// `cdac_eh_clause.kind`: `fault`.
pub const CDAC_EH_FAULT: u32 = 4;

/// One exception clause of a method (offsets from the method's start).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacEhClause {
    /// `CDAC_EH_*`.
    pub kind: u32,
    /// The clause's raw flags.
    pub flags: u32,
    /// Protected range `[try_start, try_end)`.
    pub try_start: u32,
    pub try_end: u32,
    /// Handler range `[handler_start, handler_end)`.
    pub handler_start: u32,
    pub handler_end: u32,
    /// Filter clauses: offset of the filter funclet; else 0.
    pub filter_offset: u32,
    /// Typed clauses: the caught class's metadata token when known, else 0.
    pub class_token: u32,
    /// Typed clauses: the caught class's TypeHandle when the runtime resolved it, else 0.
    pub type_handle: u64,
}

/// One loaded module (assembly image) of the runtime.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacModule {
    /// The runtime's `Module*` (pass it to `cdac_module_path`).
    pub address: u64,
    /// Where the image is loaded (0 when it has none).
    pub base: u64,
    /// Bytes of the loaded image.
    pub size: u64,
    /// 1 for a Reflection.Emit (dynamic) module.
    pub is_dynamic: u32,
    /// 1 when the image is laid out as the loader maps it (ReadyToRun), 0 when flat.
    pub is_mapped: u32,
}

/// One segment (region) of the GC heap.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacHeapSegment {
    /// Its `heap_segment` record.
    pub segment: u64,
    /// First object.
    pub start: u64,
    /// End of its objects.
    pub end: u64,
    /// End of its committed memory.
    pub committed: u64,
    /// End of its reserved memory.
    pub reserved: u64,
    /// `heap_segment` flags.
    pub flags: u64,
    /// The heap that owns it.
    pub heap: u32,
    /// `CDAC_SEGMENT_*`: gen0, gen1, gen2, ephemeral, LOH, POH, frozen.
    pub kind: u32,
}

/// The objects of one type on the GC heap.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacTypeStat {
    /// The type's MethodTable (name it with `cdac_type_name`).
    pub method_table: u64,
    /// Number of objects.
    pub count: u64,
    /// Their total size in bytes (unaligned sizes, as SOS adds them).
    pub total_size: u64,
    /// 1 for free objects (gaps the GC filled), which have no type name.
    pub is_free: u32,
    /// Padding, 0.
    pub reserved: u32,
}

/// One GC handle in use.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacGcHandle {
    /// The handle (what `GCHandle.ToIntPtr` gives, without a pinned handle's low bit).
    pub address: u64,
    /// The object it refers to.
    pub object: u64,
    /// A dependent handle's secondary object, else 0.
    pub secondary: u64,
    /// `CDAC_HANDLE_*`: the runtime's handle type (0 weak short … 6 dependent …).
    pub kind: u32,
    /// 1 when the handle keeps its object alive.
    pub is_strong: u32,
}

/// `CdacLock.kind`: a monitor whose state is in a sync block.
pub const CDAC_LOCK_SYNC_BLOCK: u32 = 0;
/// `CdacLock.kind`: a monitor held without contention (its state in the object's header).
pub const CDAC_LOCK_THIN: u32 = 1;
/// `CdacLock.kind`: a `System.Threading.Lock` (.NET 9 and later).
pub const CDAC_LOCK_THREADING: u32 = 2;

/// One lock that is held or waited for (`cdac_lock`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CdacLock {
    /// The locked object (a `System.Threading.Lock` is its own).
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// The holder's OS thread id (0: free, or a holder that is no thread of the runtime).
    pub owner_os_id: u64,
    /// The holder's managed thread id (0: none).
    pub owner_managed_id: u32,
    /// `CDAC_LOCK_*`.
    pub kind: u32,
    /// Times the holder entered it (0: free).
    pub times_entered: u32,
    /// Threads waiting to enter it, as the lock counts them (a thin lock counts none).
    pub waiters_counted: u32,
    /// A sync block's index in the sync table (0 for the other kinds).
    pub sync_block_index: u32,
    /// Zero.
    pub reserved: u32,
}

/// One frame of a logical async stack (`cdac_async_frame`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CdacAsyncFrame {
    /// The Task (an async method's state machine box, or a plain Task).
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// The compiler's state machine type (0 for a plain Task).
    pub state_machine_type: u64,
    /// The object the method's current await holds (0: none known).
    pub awaiting: u64,
    /// Which chain it belongs to (from 0).
    pub chain: u32,
    /// Its place in the chain, 0 for the outermost.
    pub depth: u32,
    /// The await it is suspended at (from 0); -1 running; `i32::MIN` for a plain Task or
    /// an unreadable state.
    pub state: i32,
    /// `Task.m_stateFlags`.
    pub state_flags: u32,
}

/// `cdac_field.value_kind`.
pub const CDAC_VALUE_INT: u32 = 1;
/// An unsigned integer.
pub const CDAC_VALUE_UINT: u32 = 2;
/// A `float` or `double` (`value` holds a double's bits).
pub const CDAC_VALUE_FLOAT: u32 = 3;
/// A `bool` (0 or 1).
pub const CDAC_VALUE_BOOL: u32 = 4;
/// A `char` (a UTF-16 unit).
pub const CDAC_VALUE_CHAR: u32 = 5;
/// An unmanaged pointer.
pub const CDAC_VALUE_POINTER: u32 = 6;
/// An object reference (`value` is its address, 0 for null).
pub const CDAC_VALUE_REFERENCE: u32 = 7;
/// A struct: its fields follow, one `depth` deeper.
pub const CDAC_VALUE_STRUCT: u32 = 8;
/// A struct whose fields are not listed.
pub const CDAC_VALUE_NOT_EXPANDED: u32 = 9;
/// A value that could not be read.
pub const CDAC_VALUE_UNREADABLE: u32 = 10;
/// `cdac_object_fields` flags: also the type's static fields.
pub const CDAC_FIELDS_STATICS: u32 = 1;

/// One field of an object (or of a struct inside it), with its value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CdacField {
    /// Its name, NUL-terminated (cut to 63 bytes).
    pub name: [c_char; 64],
    /// Its declared type, NUL-terminated (cut to 191 bytes).
    pub type_name: [c_char; 192],
    /// Bytes from the object's start (a struct's field: from the struct's data).
    pub offset: u64,
    /// Where the value is.
    pub address: u64,
    /// The value's bits (integers extended to 64 bits, a double's bits, a reference's
    /// address; 0 for structs).
    pub value: u64,
    /// `CDAC_VALUE_*`.
    pub value_kind: u32,
    /// 0 for the object's own fields; n + 1 for the fields of a struct field at depth n,
    /// which follow it.
    pub depth: u32,
    /// 1 for a static field.
    pub is_static: u32,
    /// 0.
    pub reserved: u32,
}

impl Default for CdacField {
    fn default() -> Self {
        CdacField {
            name: [0; 64],
            type_name: [0; 192],
            offset: 0,
            address: 0,
            value: 0,
            value_kind: 0,
            depth: 0,
            is_static: 0,
            reserved: 0,
        }
    }
}

/// `cdac_gcroot`'s root kinds.
pub const CDAC_ROOT_STRONG_HANDLE: u32 = 1;
/// A pinned handle.
pub const CDAC_ROOT_PINNED_HANDLE: u32 = 2;
/// An async-pinned handle.
pub const CDAC_ROOT_ASYNC_PINNED_HANDLE: u32 = 3;
/// A sized-ref handle.
pub const CDAC_ROOT_SIZED_REF_HANDLE: u32 = 4;
/// The finalizer queue (ready for finalization).
pub const CDAC_ROOT_FINALIZER_QUEUE: u32 = 5;
/// A live GC slot of a managed frame (`root_address`: the slot's address, 0 for a register).
pub const CDAC_ROOT_STACK: u32 = 6;
/// A thread's thread-static storage (.NET 9 and 10; `root_address`: its slot).
pub const CDAC_ROOT_THREAD_STATIC: u32 = 7;
/// Another kind of root.
pub const CDAC_ROOT_OTHER: u32 = 255;
/// `cdac_root_step.slot_offset` of the root's own object.
pub const CDAC_VIA_ROOT: u64 = u64::MAX;
/// `cdac_root_step.slot_offset` of a dependent handle's secondary.
pub const CDAC_VIA_DEPENDENT: u64 = u64::MAX - 1;

/// One object on a path from a root.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CdacRootStep {
    /// The object.
    pub object: u64,
    /// Its MethodTable (`cdac_type_name` names it).
    pub method_table: u64,
    /// Where the previous object refers to it (bytes from its start), or `CDAC_VIA_ROOT`,
    /// `CDAC_VIA_DEPENDENT`.
    pub slot_offset: u64,
}

/// Copies `text` into a fixed C string field, cut at a character boundary.
fn fixed_text<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    let mut end = text.len().min(N - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (o, b) in out.iter_mut().zip(&text.as_bytes()[..end]) {
        *o = *b as c_char;
    }
    out
}

/// Flattens fields (structs' fields after them, one deeper).
fn flatten_fields(fields: &[FieldView], depth: u32, out: &mut Vec<CdacField>) {
    for f in fields {
        let (kind, value) = match &f.value {
            Value::Int(v) => (CDAC_VALUE_INT, *v as u64),
            Value::UInt(v) => (CDAC_VALUE_UINT, *v),
            Value::Float(v) => (CDAC_VALUE_FLOAT, v.to_bits()),
            Value::Bool(v) => (CDAC_VALUE_BOOL, u64::from(*v)),
            Value::Char(v) => (CDAC_VALUE_CHAR, u64::from(*v)),
            Value::Pointer(v) => (CDAC_VALUE_POINTER, *v),
            Value::Reference { address, .. } => (CDAC_VALUE_REFERENCE, *address),
            Value::Struct { .. } => (CDAC_VALUE_STRUCT, 0),
            Value::NotExpanded { .. } => (CDAC_VALUE_NOT_EXPANDED, 0),
            Value::Unreadable(_) => (CDAC_VALUE_UNREADABLE, 0),
        };
        out.push(CdacField {
            name: fixed_text(&f.name),
            type_name: fixed_text(&f.type_name),
            offset: f.offset,
            address: f.address,
            value,
            value_kind: kind,
            depth,
            is_static: u32::from(f.is_static),
            reserved: 0,
        });
        if let Value::Struct { fields, .. } = &f.value {
            flatten_fields(fields, depth + 1, out);
        }
    }
}

/// A memory source over the host's read callback and mapping list.
struct CallbackSource {
    read: unsafe extern "C-unwind" fn(*mut c_void, u64, *mut u8, usize) -> i32,
    ctx: usize,
    maps: Vec<MappedFile>,
}

impl MemorySource for CallbackSource {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        // SAFETY: the header requires `read` to fill at most `len` bytes of `buf` and
        // `ctx` to stay valid until cdac_close; `buf` is a live, writable slice of `len`
        // bytes for the whole call.
        let status =
            unsafe { (self.read)(self.ctx as *mut c_void, addr, buf.as_mut_ptr(), buf.len()) };
        if status == 0 {
            Ok(())
        } else {
            Err(ReadError::Io {
                addr,
                source: std::io::Error::other(format!(
                    "the host's read callback failed (status {status}, {} bytes)",
                    buf.len()
                )),
            })
        }
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &self.maps
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        Ok(Vec::new())
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Synthetic
    }

    fn native_layout(&self) -> Option<DataLayout> {
        Some(DataLayout::LE64)
    }
}

/// An opened target: the runtime (whose contracts are made on first use and cached) and
/// the readers made over it on first use. Each reader owns what it reads.
pub struct CdacHandle {
    rt: Runtime,
    namer: Option<MethodNamer>,
    modules: Option<Vec<ModuleInfo>>,
    walker: Option<StackWalker>,
    lines: SourceLines,
    debug_format: DebugInfoFormat,
}

impl CdacHandle {
    fn new(rt: Runtime) -> CdacHandle {
        let major = rt.version().and_then(|v| v.major());
        let debug_format = DebugInfoFormat::for_runtime(rt.descriptor(), major);
        CdacHandle {
            rt,
            namer: None,
            modules: None,
            walker: None,
            lines: SourceLines::new(),
            debug_format,
        }
    }

    /// The executable's method names, when the runtime is NativeAOT.
    fn aot_names(&mut self) -> Option<Result<Arc<cdac_core::nativeaot::MethodNames>, Failure>> {
        if !self.rt.is_native_aot() {
            return None;
        }
        Some(
            self.rt
                .native_aot_names()
                .map_err(|e| Failure::new(CDAC_E_RUNTIME_DATA, e)),
        )
    }

    /// NativeAOT: the method at `ip` (start, name, whether `ip` is in a funclet).
    fn aot_method(&mut self, ip: u64) -> Option<Result<(u64, String, bool), Failure>> {
        let names = match self.aot_names()? {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let stem = self
            .rt
            .module()
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(match names.lookup(ip) {
            Some(cdac_core::nativeaot::CodeAt::Method(m, _)) => {
                Ok((m.start, m.name, names.is_funclet(ip)))
            }
            Some(cdac_core::nativeaot::CodeAt::Unnamed(start)) => {
                Ok((start, names.unnamed_text(&stem, ip), names.is_funclet(ip)))
            }
            None => Err(Failure::new(
                CDAC_NOT_FOUND,
                format!("{ip:#x} is not managed code"),
            )),
        })
    }

    fn em(&self) -> Result<&dyn ExecutionManager, Failure> {
        Ok(self.rt.contracts().execution_manager()?)
    }

    fn namer(&mut self) -> &mut MethodNamer {
        let rt = &self.rt;
        self.namer
            .get_or_insert_with(|| MethodNamer::for_runtime(rt))
    }

    fn block(&mut self, ip: u64) -> Result<CodeBlock, Failure> {
        self.em()?
            .code_block(ip)?
            .ok_or_else(|| Failure::new(CDAC_NOT_FOUND, format!("{ip:#x} is not managed code")))
    }
}

/// A failed call: its status and message.
#[derive(Debug)]
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<ContractError> for Failure {
    fn from(e: ContractError) -> Failure {
        let code = match e {
            ContractError::Read(_) => CDAC_E_READ_FAILED,
            _ => CDAC_E_RUNTIME_DATA,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<UnwindError> for Failure {
    fn from(e: UnwindError) -> Failure {
        let code = match e {
            UnwindError::Read(_) | UnwindError::Contract(ContractError::Read(_)) => {
                CDAC_E_READ_FAILED
            }
            UnwindError::NoUnwindInfo { .. } => CDAC_NOT_FOUND,
            _ => CDAC_E_RUNTIME_DATA,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<RuntimeError> for Failure {
    fn from(e: RuntimeError) -> Failure {
        Failure::new(CDAC_E_OPEN_FAILED, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Addresses of the live handles.
static HANDLES: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn registry<R>(f: impl FnOnce(&mut HashSet<usize>) -> R) -> R {
    let mut guard = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashSet::new))
}

/// Runs an entry point's body: catches panics, records the failure's message, returns the
/// status.
fn guard(body: impl FnOnce() -> Result<i32, Failure>) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Failure::new(
            CDAC_E_PANIC,
            format!("panic inside cdac: {what}"),
        ))
    });
    match outcome {
        Ok(code) => code,
        Err(f) => {
            LAST_ERROR.with(|e| *e.borrow_mut() = f.message);
            f.code
        }
    }
}

fn null(what: &str) -> Failure {
    Failure::new(CDAC_E_NULL_POINTER, format!("{what} is NULL"))
}

/// The live handle `h` points to.
fn handle<'a>(h: *mut CdacHandle) -> Result<&'a mut CdacHandle, Failure> {
    if h.is_null() {
        return Err(null("the handle"));
    }
    if !registry(|r| r.contains(&(h as usize))) {
        return Err(Failure::new(
            CDAC_E_BAD_HANDLE,
            format!("{h:p} is not an open cdac handle"),
        ));
    }
    // SAFETY: `h` is in the registry, so it came from `Box::into_raw` in `publish` and has
    // not been closed; the header lets one thread at a time use a handle, so this is the
    // only reference.
    Ok(unsafe { &mut *h })
}

/// Stores a new handle in `*out`.
fn publish(rt: Runtime, out: *mut *mut CdacHandle) -> Result<i32, Failure> {
    let h = Box::into_raw(Box::new(CdacHandle::new(rt)));
    registry(|r| r.insert(h as usize));
    // SAFETY: `out` was checked non-NULL by the caller; the header requires it to point
    // to a writable `cdac_handle *`.
    unsafe { *out = h };
    Ok(CDAC_OK)
}

/// Copies `text` NUL-terminated into `buf` (`len` bytes; truncated when short). Returns
/// the size needed, NUL included.
fn copy_out(text: &str, buf: *mut c_char, len: usize) -> usize {
    let bytes = text.as_bytes();
    if !buf.is_null() && len > 0 {
        let n = bytes.len().min(len - 1);
        // SAFETY: the header requires `buf` to hold `len` writable bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    bytes.len() + 1
}

/// A string out-parameter: `text` copied into `buf` (truncated when short), the size it
/// needs (NUL included) into `needed` when not NULL, and [`CDAC_E_BUFFER_TOO_SMALL`] naming
/// `what` when the buffer was short.
fn return_text(
    text: &str,
    what: &str,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> Result<i32, Failure> {
    let size = copy_out(text, buf, len);
    if !needed.is_null() {
        put(needed, size);
    }
    if size > len {
        return Err(Failure::new(
            CDAC_E_BUFFER_TOO_SMALL,
            format!("{what} needs {size} bytes, the buffer has {len}"),
        ));
    }
    Ok(CDAC_OK)
}

/// Writes a value through an out pointer checked non-NULL.
fn put<T>(out: *mut T, value: T) {
    // SAFETY: every caller checks `out` non-NULL first; the header requires it to point to
    // a writable, aligned `T`.
    unsafe { out.write(value) }
}

fn path_of(path: *const c_char) -> Result<PathBuf, Failure> {
    if path.is_null() {
        return Err(null("the path"));
    }
    // SAFETY: `path` is non-NULL and the header requires a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) };
    s.to_str()
        .map(PathBuf::from)
        .map_err(|_| Failure::new(CDAC_E_INVALID_ARGUMENT, "the path is not UTF-8"))
}

/// Copies the message of the last failed call on this thread into `buf` (NUL-terminated,
/// truncated to `len`); returns the size it needs, NUL included (1 when there was none).
/// `buf` may be NULL when `len` is 0.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_last_error(buf: *mut c_char, len: usize) -> usize {
    catch_unwind(|| LAST_ERROR.with(|e| copy_out(&e.borrow(), buf, len))).unwrap_or(0)
}

/// Attaches to live process `pid` (read-only).
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_open_pid(pid: i32, out: *mut *mut CdacHandle) -> i32 {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        let rt = Runtime::attach(pid, &OpenOptions::default())?;
        publish(rt, out)
    })
}

/// Opens an ELF core dump.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_open_core(path: *const c_char, out: *mut *mut CdacHandle) -> i32 {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        let path = path_of(path)?;
        let rt = Runtime::open_dump(&path, &OpenOptions::default())?;
        publish(rt, out)
    })
}

/// Opens a target whose memory the host reads through `read` (called with `ctx`) and
/// whose mapped files are `maps[0..n]` (copied).
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_open_callbacks(
    read: CdacReadFn,
    ctx: *mut c_void,
    maps: *const CdacMapping,
    n: usize,
    out: *mut *mut CdacHandle,
) -> i32 {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        let Some(read) = read else {
            return Err(null("the read callback"));
        };
        if maps.is_null() && n > 0 {
            return Err(null("maps"));
        }
        let maps: &[CdacMapping] = if n == 0 {
            &[]
        } else {
            // SAFETY: `maps` is non-NULL and the header requires `n` readable entries.
            unsafe { std::slice::from_raw_parts(maps, n) }
        };
        let mut files = Vec::with_capacity(maps.len());
        for m in maps {
            if m.end < m.start {
                return Err(Failure::new(
                    CDAC_E_INVALID_ARGUMENT,
                    format!("mapping {:#x}..{:#x} ends before it starts", m.start, m.end),
                ));
            }
            files.push(MappedFile {
                start: m.start,
                end: m.end,
                file_offset: m.file_offset,
                path: path_of(m.path)?,
            });
        }
        files.sort_by_key(|f| f.start);
        let source = CallbackSource {
            read,
            ctx: ctx as usize,
            maps: files,
        };
        let rt = Runtime::open(Arc::new(source), &OpenOptions::default())?;
        publish(rt, out)
    })
}

/// Closes a handle. NULL is accepted (nothing happens); a handle that is not open is
/// `CDAC_E_BAD_HANDLE`.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_close(h: *mut CdacHandle) -> i32 {
    guard(|| {
        if h.is_null() {
            return Ok(CDAC_OK);
        }
        if !registry(|r| r.remove(&(h as usize))) {
            return Err(Failure::new(
                CDAC_E_BAD_HANDLE,
                format!("{h:p} is not an open cdac handle"),
            ));
        }
        // SAFETY: `h` was in the registry (now removed), so it came from `Box::into_raw`
        // in `publish` and is freed exactly once, here.
        drop(unsafe { Box::from_raw(h) });
        Ok(CDAC_OK)
    })
}

/// The method that owns code address `ip`.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_ip2md(h: *mut CdacHandle, ip: u64, out: *mut CdacMethodInfo) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if out.is_null() {
            return Err(null("out"));
        }
        if let Some(found) = h.aot_method(ip) {
            let (start, _, funclet) = found?;
            put(
                out,
                CdacMethodInfo {
                    method_desc: 0,
                    start,
                    hot_size: 0,
                    relative_offset: ip - start,
                    kind: CDAC_CODE_NATIVE_AOT,
                    is_funclet: u32::from(funclet),
                },
            );
            return Ok(CDAC_OK);
        }
        let b = h.block(ip)?;
        let em = h.em()?;
        let hot_size = em.method_region_info(&b).map(|r| r.hot_size).unwrap_or(0);
        let is_funclet = em.is_funclet(&b).unwrap_or(false);
        put(
            out,
            CdacMethodInfo {
                method_desc: b.method_desc,
                start: b.start,
                hot_size,
                relative_offset: b.relative_offset,
                kind: match b.jit_type {
                    JitType::Jit => CDAC_CODE_JIT,
                    JitType::R2r => CDAC_CODE_READY_TO_RUN,
                    _ => CDAC_CODE_UNKNOWN,
                },
                is_funclet: u32::from(is_funclet),
            },
        );
        Ok(CDAC_OK)
    })
}

/// The name of the method that owns `ip`, as the runtime's perf map writes it.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_method_name(
    h: *mut CdacHandle,
    ip: u64,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if buf.is_null() && len > 0 {
            return Err(null("buf"));
        }
        if let Some(found) = h.aot_method(ip) {
            let (_, name, _) = found?;
            return return_text(&name, "the name", buf, len, needed);
        }
        let b = h.block(ip)?;
        let name = h.namer().name(b.method_desc);
        return_text(&name, "the name", buf, len, needed)
    })
}

/// The source file and line of managed code address `ip`, from the assembly's portable
/// PDB.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_source_line(
    h: *mut CdacHandle,
    ip: u64,
    file: *mut c_char,
    len: usize,
    line: *mut u32,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if line.is_null() {
            return Err(null("line"));
        }
        if file.is_null() && len > 0 {
            return Err(null("file"));
        }
        if h.rt.is_native_aot() {
            // From the DWARF of the executable's .dbg file, when it is beside it.
            let Some(loc) = h.namer().native_aot_source(ip) else {
                return Err(Failure::new(
                    CDAC_NOT_FOUND,
                    format!("no line for {ip:#x} (NativeAOT lines come from the executable's .dbg file beside it)"),
                ));
            };
            put(line, loc.line);
            return return_text(&loc.file, "the file name", file, len, std::ptr::null_mut());
        }
        let b = h.block(ip)?;
        let map = {
            let rt = h.rt.clone();
            let fmt = h.debug_format;
            let em = h.em()?;
            il_offset(rt.target(), em, &b, &fmt, false)?
        };
        let Some(il) = map.map(|m| m.il_offset).and_then(IlOffset::il) else {
            return Err(Failure::new(
                CDAC_NOT_FOUND,
                format!("no IL offset maps {ip:#x}"),
            ));
        };
        let Some((assembly, token)) = h.namer().method_def(b.method_desc) else {
            return Err(Failure::new(
                CDAC_NOT_FOUND,
                format!("the module of MethodDesc {:#x} is not known", b.method_desc),
            ));
        };
        let found = h
            .lines
            .locate(&assembly, token, il)
            .map_err(|e| Failure::new(CDAC_NOT_FOUND, e.to_string()))?;
        let Some(loc) = found else {
            return Err(Failure::new(CDAC_NOT_FOUND, "no sequence point"));
        };
        put(line, loc.line);
        return_text(&loc.file, "the file name", file, len, std::ptr::null_mut())
    })
}

/// The handle's target architecture as a `CDAC_ARCH_*` value, or the failure that names it
/// when it is neither.
fn architecture_of(h: &CdacHandle) -> Result<u32, Failure> {
    match h.rt.module().architecture {
        "x64" => Ok(CDAC_ARCH_X64),
        "arm64" => Ok(CDAC_ARCH_ARM64),
        other => Err(Failure::new(
            CDAC_E_RUNTIME_DATA,
            format!("the target's architecture is {other}: cdac reads x64 and arm64"),
        )),
    }
}

/// Refuses registers of the wrong architecture, naming the function that takes the
/// target's own.
fn require_architecture(h: &CdacHandle, wanted: u32, function: &str) -> Result<(), Failure> {
    let arch = architecture_of(h)?;
    if arch == wanted {
        return Ok(());
    }
    let (target, right) = if arch == CDAC_ARCH_ARM64 {
        ("arm64", "the _arm64 functions with cdac_arm64_regs")
    } else {
        ("x64", "the functions with cdac_x64_regs")
    };
    Err(Failure::new(
        CDAC_E_INVALID_ARGUMENT,
        format!("{function}: the target is {target}; its registers go to {right}"),
    ))
}

fn context_of(r: &CdacX64Regs) -> Result<X64Context, Failure> {
    let need = CDAC_REG_RIP | CDAC_REG_RSP;
    if r.valid_mask & need != need {
        return Err(Failure::new(
            CDAC_E_INVALID_ARGUMENT,
            "the registers must include rip and rsp",
        ));
    }
    let mut ctx = X64Context::new(r.rip, r.rsp, None);
    let set = [
        (CDAC_REG_RBP, x64_reg::RBP, r.rbp),
        (CDAC_REG_RBX, x64_reg::RBX, r.rbx),
        (CDAC_REG_R12, x64_reg::R12, r.r12),
        (CDAC_REG_R13, x64_reg::R12 + 1, r.r13),
        (CDAC_REG_R14, x64_reg::R12 + 2, r.r14),
        (CDAC_REG_R15, x64_reg::R15, r.r15),
    ];
    for (bit, reg, value) in set {
        if r.valid_mask & bit != 0 {
            ctx.regs[reg] = Some(value);
        }
    }
    Ok(ctx)
}

fn regs_of(ctx: &X64Context) -> CdacX64Regs {
    let mut out = CdacX64Regs {
        rip: ctx.rip,
        valid_mask: CDAC_REG_RIP,
        ..CdacX64Regs::default()
    };
    let get = [
        (CDAC_REG_RSP, x64_reg::RSP),
        (CDAC_REG_RBP, x64_reg::RBP),
        (CDAC_REG_RBX, x64_reg::RBX),
        (CDAC_REG_R12, x64_reg::R12),
        (CDAC_REG_R13, x64_reg::R12 + 1),
        (CDAC_REG_R14, x64_reg::R12 + 2),
        (CDAC_REG_R15, x64_reg::R15),
    ];
    for (bit, reg) in get {
        if let Some(v) = ctx.regs[reg] {
            out.valid_mask |= bit;
            match bit {
                CDAC_REG_RSP => out.rsp = v,
                CDAC_REG_RBP => out.rbp = v,
                CDAC_REG_RBX => out.rbx = v,
                CDAC_REG_R12 => out.r12 = v,
                CDAC_REG_R13 => out.r13 = v,
                CDAC_REG_R14 => out.r14 = v,
                _ => out.r15 = v,
            }
        }
    }
    out
}

/// The context of arm64 registers `r` (pc and sp required; a pointer-authentication code in
/// pc is dropped).
fn arm64_context_of(r: &CdacArm64Regs) -> Result<Arm64Context, Failure> {
    let need = CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP;
    if r.valid_mask & need != need {
        return Err(Failure::new(
            CDAC_E_INVALID_ARGUMENT,
            "the registers must include pc and sp",
        ));
    }
    let mut ctx = Arm64Context::new(Arm64Context::strip_pac(r.pc), r.sp, None);
    for (n, value) in r.x.iter().enumerate() {
        if r.valid_mask & (1 << n) != 0 {
            ctx.regs[n] = Some(*value);
        }
    }
    Ok(ctx)
}

fn arm64_regs_of(ctx: &Arm64Context) -> CdacArm64Regs {
    let mut out = CdacArm64Regs {
        pc: ctx.pc,
        sp: ctx.sp(),
        valid_mask: CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP,
        ..CdacArm64Regs::default()
    };
    for (n, slot) in out.x.iter_mut().enumerate() {
        if let Some(v) = ctx.regs[n] {
            *slot = v;
            out.valid_mask |= 1 << n;
        }
    }
    out
}

/// The target's architecture: `*arch` receives `CDAC_ARCH_X64` or `CDAC_ARCH_ARM64`, which
/// says which register functions the handle takes.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes; a handle may be any value (unknown ones are refused) but one handle must not
/// be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_architecture(h: *mut CdacHandle, arch: *mut u32) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if arch.is_null() {
            return Err(null("arch"));
        }
        put(arch, architecture_of(h)?);
        Ok(CDAC_OK)
    })
}

/// One step of a managed frame: the caller's registers from the frame's `in`.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_unwind_step(
    h: *mut CdacHandle,
    regs_in: *const CdacX64Regs,
    regs_out: *mut CdacX64Regs,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if regs_in.is_null() {
            return Err(null("in"));
        }
        if regs_out.is_null() {
            return Err(null("out"));
        }
        require_architecture(h, CDAC_ARCH_X64, "cdac_unwind_step")?;
        // SAFETY: `regs_in` is non-NULL and the header requires a readable cdac_x64_regs.
        let regs_in = unsafe { &*regs_in };
        let ctx = context_of(regs_in)?;
        let lookup = if regs_in.valid_mask & CDAC_REG_RIP_IS_RETURN != 0 {
            ctx.rip.saturating_sub(1)
        } else {
            ctx.rip
        };
        let b = h.block(lookup)?;
        let rt = h.rt.clone();
        let em = h.em()?;
        let caller = step_managed(rt.target(), em, &b, &ctx, rt.target())?;
        put(regs_out, regs_of(&caller));
        Ok(CDAC_OK)
    })
}

/// One step of a managed arm64 frame: the caller's registers from the frame's `in`.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes; a handle may be any value (unknown ones are refused) but one handle must not
/// be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_unwind_step_arm64(
    h: *mut CdacHandle,
    regs_in: *const CdacArm64Regs,
    regs_out: *mut CdacArm64Regs,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if regs_in.is_null() {
            return Err(null("in"));
        }
        if regs_out.is_null() {
            return Err(null("out"));
        }
        require_architecture(h, CDAC_ARCH_ARM64, "cdac_unwind_step_arm64")?;
        // SAFETY: `regs_in` is non-NULL and the header requires a readable cdac_arm64_regs.
        let regs_in = unsafe { &*regs_in };
        let ctx = arm64_context_of(regs_in)?;
        let is_return = regs_in.valid_mask & CDAC_ARM64_REG_PC_IS_RETURN != 0;
        let lookup = if is_return {
            ctx.pc.saturating_sub(1)
        } else {
            ctx.pc
        };
        let b = h.block(lookup)?;
        let rt = h.rt.clone();
        let em = h.em()?;
        let caller = step_managed_arm64(rt.target(), em, &b, &ctx, rt.target(), !is_return)?;
        put(regs_out, arm64_regs_of(&caller));
        Ok(CDAC_OK)
    })
}

/// Walks a stack from `regs` (managed frames by the runtime's unwind data, native ones by
/// CFI or the frame-pointer chain) into `frames[0..cap]`.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_stack(
    h: *mut CdacHandle,
    regs: *const CdacX64Regs,
    frames: *mut CdacFrame,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if regs.is_null() {
            return Err(null("regs"));
        }
        require_architecture(h, CDAC_ARCH_X64, "cdac_stack")?;
        // SAFETY: `regs` is non-NULL and the header requires a readable cdac_x64_regs.
        let ctx = context_of(unsafe { &*regs })?;
        walk_into(h, ctx.into(), frames, cap, count)
    })
}

/// `cdac_stack` of an arm64 target, from arm64 registers.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_stack_arm64(
    h: *mut CdacHandle,
    regs: *const CdacArm64Regs,
    frames: *mut CdacFrame,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if regs.is_null() {
            return Err(null("regs"));
        }
        require_architecture(h, CDAC_ARCH_ARM64, "cdac_stack_arm64")?;
        // SAFETY: `regs` is non-NULL and the header requires a readable cdac_arm64_regs.
        let ctx = arm64_context_of(unsafe { &*regs })?;
        walk_into(h, ctx.into(), frames, cap, count)
    })
}

/// The walk of `cdac_stack` and `cdac_stack_arm64`: the stack from `start` into
/// `frames[0..cap]`, its length in `*count`.
fn walk_into(
    h: &mut CdacHandle,
    start: Registers,
    frames: *mut CdacFrame,
    cap: usize,
    count: *mut usize,
) -> Result<i32, Failure> {
    if count.is_null() {
        return Err(null("count"));
    }
    if frames.is_null() && cap > 0 {
        return Err(null("frames"));
    }
    if h.walker.is_none() {
        h.walker = Some(if h.rt.is_native_aot() {
            StackWalker::native_only(&h.rt)?
        } else {
            StackWalker::new(&h.rt)?
        });
    }
    // Without the executable's names (its file not at hand) the walk still gives every
    // frame, native ones.
    let aot_names = h.aot_names().and_then(Result::ok);
    let Some(walker) = &h.walker else {
        return Err(Failure::new(CDAC_E_RUNTIME_DATA, "no stack walker"));
    };
    let mut stack = walker.walk(start, h.rt.target(), &[]);
    if let Some(names) = &aot_names {
        cdac_core::nativeaot::stacks::mark_stack(names, &mut stack);
    }
    let n = stack.frames.len();
    put(count, n);
    for (i, f) in stack.frames.iter().take(cap).enumerate() {
        let (kind, md) = match f.code {
            FrameCode::Managed { method_desc, .. } => (CDAC_FRAME_MANAGED, method_desc),
            FrameCode::Native => (CDAC_FRAME_NATIVE, 0),
        };
        let il = f
            .il_offset
            .and_then(IlOffset::il)
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(-1);
        // SAFETY: `frames` is non-NULL (cap > 0) and the header requires `cap` writable
        // entries; `i < cap`.
        put(
            unsafe { frames.add(i) },
            CdacFrame {
                ip: f.ip,
                sp: f.sp,
                method_desc: md,
                kind,
                il_offset: il,
            },
        );
    }
    if n > cap {
        return Err(Failure::new(
            CDAC_E_BUFFER_TOO_SMALL,
            format!("the stack has {n} frames, the buffer {cap}"),
        ));
    }
    Ok(CDAC_OK)
}

/// Copies `items` into `out[0..cap]`, stores their count in `*count`; too small a buffer
/// gets the first `cap` and `CDAC_E_BUFFER_TOO_SMALL`.
fn fill<T: Copy>(items: &[T], out: *mut T, cap: usize, count: *mut usize) -> Result<i32, Failure> {
    put(count, items.len());
    for (i, item) in items.iter().take(cap).enumerate() {
        // SAFETY: callers check `out` non-NULL when `cap > 0`; the header requires `cap`
        // writable entries, and `i < cap`.
        put(unsafe { out.add(i) }, *item);
    }
    if items.len() > cap {
        return Err(Failure::new(
            CDAC_E_BUFFER_TOO_SMALL,
            format!("{} entries, the buffer has room for {cap}", items.len()),
        ));
    }
    Ok(CDAC_OK)
}

/// The exception clauses of the method owning `ip`, count-then-fill.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_eh_clauses(
    h: *mut CdacHandle,
    ip: u64,
    out: *mut CdacEhClause,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let b = h.block(ip)?;
        let clauses: Vec<CdacEhClause> = h
            .em()?
            .exception_clauses(&b)?
            .iter()
            .map(|c| CdacEhClause {
                kind: match c.kind {
                    ClauseKind::Typed => CDAC_EH_TYPED,
                    ClauseKind::Filter => CDAC_EH_FILTER,
                    ClauseKind::Finally => CDAC_EH_FINALLY,
                    ClauseKind::Fault => CDAC_EH_FAULT,
                },
                flags: c.flags,
                try_start: c.try_start,
                try_end: c.try_end,
                handler_start: c.handler_start,
                handler_end: c.handler_end,
                filter_offset: c.filter_offset.unwrap_or(0),
                class_token: c.class_token.unwrap_or(0),
                type_handle: c.type_handle.unwrap_or(0),
            })
            .collect();
        fill(&clauses, out, cap, count)
    })
}

impl CdacHandle {
    /// The runtime's modules, listed on first use.
    fn modules(&mut self) -> Result<&[ModuleInfo], Failure> {
        if self.modules.is_none() {
            self.modules = Some(loader::modules(self.rt.target(), self.rt.descriptor())?);
        }
        Ok(self.modules.as_deref().unwrap_or(&[]))
    }
}

/// The runtime's loaded modules, count-then-fill (listed once per handle).
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_modules(
    h: *mut CdacHandle,
    out: *mut CdacModule,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let list: Vec<CdacModule> = h
            .modules()?
            .iter()
            .map(|m| CdacModule {
                address: m.address,
                base: m.base,
                size: m.size,
                is_dynamic: u32::from(m.is_dynamic),
                is_mapped: u32::from(m.mapped),
            })
            .collect();
        fill(&list, out, cap, count)
    })
}

/// The image path of module `module` (a `cdac_module.address`).
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_module_path(
    h: *mut CdacHandle,
    module: u64,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if buf.is_null() && len > 0 {
            return Err(null("buf"));
        }
        let Some(m) = h.modules()?.iter().find(|m| m.address == module) else {
            return Err(Failure::new(
                CDAC_E_INVALID_ARGUMENT,
                format!("{module:#x} is not a module of the runtime"),
            ));
        };
        let Some(path) = m.path.as_ref().map(|p| p.to_string_lossy().into_owned()) else {
            return Err(Failure::new(CDAC_NOT_FOUND, "the module has no path"));
        };
        return_text(&path, "the path", buf, len, needed)
    })
}

/// The managed exception of a thread (or at an address), described as text.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_exception_text(
    h: *mut CdacHandle,
    os_tid: u64,
    object: u64,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if buf.is_null() && len > 0 {
            return Err(null("buf"));
        }
        let rt = h.rt.clone();
        let threads = Threads::for_runtime(&rt)?;
        let object = if object != 0 {
            if !threads.is_exception_object(object) {
                return Err(Failure::new(
                    CDAC_E_INVALID_ARGUMENT,
                    format!("{object:#x} is not an exception object"),
                ));
            }
            object
        } else {
            let list = threads.threads()?;
            let Some(thread) = list.threads.iter().find(|t| t.os_id == os_tid) else {
                return Err(Failure::new(
                    CDAC_NOT_FOUND,
                    format!("thread {os_tid} is not a managed thread of the runtime"),
                ));
            };
            let Some(object) = thread.exception() else {
                return Err(Failure::new(
                    CDAC_NOT_FOUND,
                    format!("thread {os_tid} has no exception"),
                ));
            };
            object
        };
        let exception = threads.exception(object, h.namer())?;
        let mut namer = h
            .namer
            .take()
            .unwrap_or_else(|| MethodNamer::for_runtime(&rt));
        let report = ExceptionReport::new(&rt, &exception, &mut namer, &h.lines);
        h.namer = Some(namer);
        let text = report.text(0);
        return_text(&text, "the text", buf, len, needed)
    })
}

/// The segment kinds of `CdacHeapSegment.kind`.
fn segment_kind(k: cdac_core::contracts::gc::SegmentKind) -> u32 {
    use cdac_core::contracts::gc::SegmentKind::*;
    match k {
        Gen0 => 0,
        Gen1 => 1,
        Gen2 => 2,
        Ephemeral => 3,
        Loh => 4,
        Poh => 5,
        Frozen => 6,
    }
}

/// The GC heap's segments (regions), count-then-fill, heap by heap.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_heap_segments(
    h: *mut CdacHandle,
    out: *mut CdacHeapSegment,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let list: Vec<CdacHeapSegment> =
            h.rt.contracts()
                .gc()?
                .segments()?
                .iter()
                .map(|s| CdacHeapSegment {
                    segment: s.segment.address,
                    start: s.start,
                    end: s.end,
                    committed: s.segment.committed,
                    reserved: s.segment.reserved,
                    flags: s.segment.flags,
                    heap: u32::try_from(s.heap).unwrap_or(u32::MAX),
                    kind: segment_kind(s.kind),
                })
                .collect();
        fill(&list, out, cap, count)
    })
}

/// Walks the whole GC heap and counts objects and bytes per MethodTable (what SOS
/// `dumpheap -stat` prints), count-then-fill, smallest total size first. The walk runs
/// on every call. When some segment could not be walked to its end, the statistics hold
/// what was walked and the status is `CDAC_E_RUNTIME_DATA` (`cdac_last_error` says where),
/// unless the buffer was too small.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_heap_stat(
    h: *mut CdacHandle,
    out: *mut CdacTypeStat,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let layout = cdac_core::heap::layout(&h.rt)?;
        let mut stats = cdac_core::heap::HeapStats::default();
        let summary = cdac_core::heap::walk(&h.rt, &layout, |o| stats.add(o))?;
        let list: Vec<CdacTypeStat> = stats
            .sorted()
            .iter()
            .map(|s| CdacTypeStat {
                method_table: s.method_table,
                count: s.count,
                total_size: s.total_size,
                is_free: u32::from(s.is_free),
                reserved: 0,
            })
            .collect();
        let status = fill(&list, out, cap, count)?;
        match summary.problems.first() {
            Some(p) if status == CDAC_OK => Err(Failure::new(
                CDAC_E_RUNTIME_DATA,
                format!(
                    "{} segment(s) could not be walked to their end; the first stopped at {:#x}: {}",
                    summary.problems.len(),
                    p.address,
                    p.detail
                ),
            )),
            _ => Ok(status),
        }
    })
}

/// The runtime's name of the type a MethodTable stands for. Strings as
/// `cdac_method_name`; `CDAC_NOT_FOUND` when it cannot be named.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_type_name(
    h: *mut CdacHandle,
    method_table: u64,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if buf.is_null() && len > 0 {
            return Err(null("buf"));
        }
        match h.namer().type_name(method_table) {
            Some(name) => return_text(&name, "the name", buf, len, needed),
            None => Ok(CDAC_NOT_FOUND),
        }
    })
}

/// The fields of the object at `object` with their values (structs' fields after them, one
/// `depth` deeper), count-then-fill; with `CDAC_FIELDS_STATICS` in `flags`, the type's
/// static fields after them.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_object_fields(
    h: *mut CdacHandle,
    object: u64,
    flags: u32,
    out: *mut CdacField,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let view = Inspector::new(&h.rt)?.inspect(
            object,
            InspectOptions {
                max_elements: 0,
                statics: flags & CDAC_FIELDS_STATICS != 0,
            },
        )?;
        let mut list = Vec::new();
        flatten_fields(&view.fields, 0, &mut list);
        flatten_fields(&view.statics, 0, &mut list);
        fill(&list, out, cap, count)
    })
}

/// A path from a root to `object` (count-then-fill, the root's object first): `CDAC_OK`,
/// or `CDAC_NOT_FOUND` when no root cdac reads reaches it (handles, the finalizer queue and
/// every thread's stack frames are read; a live process's threads are stopped briefly). `root_kind` (`CDAC_ROOT_*`) and
/// `root_address` (the handle, or the finalizer queue's entry) may be NULL.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_gcroot(
    h: *mut CdacHandle,
    object: u64,
    root_kind: *mut u32,
    root_address: *mut u64,
    out: *mut CdacRootStep,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let roots = RootSet::read(&h.rt)?;
        let mut marker = Marker::new(&h.rt, roots)?;
        let Some(path) = marker.path_to(object) else {
            put(count, 0);
            return Ok(CDAC_NOT_FOUND);
        };
        if !root_kind.is_null() {
            put(
                root_kind,
                match path.root.kind {
                    RootKind::StrongHandle => CDAC_ROOT_STRONG_HANDLE,
                    RootKind::PinnedHandle => CDAC_ROOT_PINNED_HANDLE,
                    RootKind::AsyncPinnedHandle => CDAC_ROOT_ASYNC_PINNED_HANDLE,
                    RootKind::SizedRefHandle => CDAC_ROOT_SIZED_REF_HANDLE,
                    RootKind::FinalizerQueue => CDAC_ROOT_FINALIZER_QUEUE,
                    RootKind::Stack { .. } => CDAC_ROOT_STACK,
                    RootKind::ThreadStatic { .. } => CDAC_ROOT_THREAD_STATIC,
                },
            );
        }
        if !root_address.is_null() {
            put(root_address, path.root.address);
        }
        let steps: Vec<CdacRootStep> = path
            .steps
            .iter()
            .map(|s| CdacRootStep {
                object: s.object,
                method_table: s.method_table,
                slot_offset: match s.via {
                    Via::Root => CDAC_VIA_ROOT,
                    Via::Dependent => CDAC_VIA_DEPENDENT,
                    Via::Slot(o) => o,
                },
            })
            .collect();
        fill(&steps, out, cap, count)
    })
}

/// Every GC handle in use, count-then-fill.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_gc_handles(
    h: *mut CdacHandle,
    out: *mut CdacGcHandle,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let list: Vec<CdacGcHandle> =
            h.rt.contracts()
                .gc()?
                .handles()?
                .iter()
                .map(|g| CdacGcHandle {
                    address: g.address,
                    object: g.object,
                    secondary: g.secondary,
                    kind: u32::from(g.kind.number()),
                    is_strong: u32::from(g.kind.is_strong()),
                })
                .collect();
        fill(&list, out, cap, count)
    })
}

/// Every lock held or waited for: monitors of the sync table, thin locks and
/// `System.Threading.Lock`s, from one heap walk (count-then-fill). No thread's stack is read
/// (no thread is stopped), so who waits is not known here.
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_locks(
    h: *mut CdacHandle,
    out: *mut CdacLock,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let report = cdac_core::locks::read_locks_from(&h.rt, true, None)?;
        let list: Vec<CdacLock> = report
            .locks
            .iter()
            .map(|l| {
                let (kind, index) = match l.kind {
                    cdac_core::locks::LockKind::SyncBlock { index, .. } => {
                        (CDAC_LOCK_SYNC_BLOCK, index)
                    }
                    cdac_core::locks::LockKind::ThinLock => (CDAC_LOCK_THIN, 0),
                    cdac_core::locks::LockKind::ThreadingLock => (CDAC_LOCK_THREADING, 0),
                };
                CdacLock {
                    object: l.object,
                    method_table: l.method_table,
                    owner_os_id: l.owner.as_ref().map_or(0, |o| o.os_id),
                    owner_managed_id: l.owner.as_ref().and_then(|o| o.managed_id).unwrap_or(0),
                    kind,
                    times_entered: l.times_entered,
                    waiters_counted: l.waiters_counted,
                    sync_block_index: index,
                    reserved: 0,
                }
            })
            .collect();
        fill(&list, out, cap, count)
    })
}

/// Every chain of suspended async methods as `cdac async` finds them, frame by frame,
/// chains in order and each outermost first (count-then-fill; each call walks the heap).
///
/// # Safety
///
/// Each pointer argument must be NULL or valid for the reads and writes `cdac.h`
/// describes (buffers of the lengths given); a handle may be any value (unknown ones are
/// refused) but one handle must not be used by two threads at once.
#[no_mangle]
pub unsafe extern "C" fn cdac_async_frames(
    h: *mut CdacHandle,
    out: *mut CdacAsyncFrame,
    cap: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        let h = handle(h)?;
        if count.is_null() {
            return Err(null("count"));
        }
        if out.is_null() && cap > 0 {
            return Err(null("out"));
        }
        let report = cdac_core::async_chains::read_async(
            &h.rt,
            cdac_core::async_chains::AsyncOptions::default(),
        )?;
        let mut list = Vec::new();
        for (chain, c) in report.chains.iter().enumerate() {
            for (depth, a) in c.objects.iter().enumerate() {
                let Some(o) = report.objects.get(a) else {
                    continue;
                };
                let sm = o.state_machine.as_ref();
                list.push(CdacAsyncFrame {
                    object: o.address,
                    method_table: o.method_table,
                    state_machine_type: sm.map_or(0, |s| s.method_table),
                    awaiting: sm.and_then(|s| s.awaiting.as_ref()).map_or(0, |w| w.object),
                    chain: u32::try_from(chain).unwrap_or(u32::MAX),
                    depth: u32::try_from(depth).unwrap_or(u32::MAX),
                    state: sm.and_then(|s| s.state).unwrap_or(i32::MIN),
                    state_flags: o.state_flags,
                });
            }
        }
        fill(&list, out, cap, count)
    })
}
