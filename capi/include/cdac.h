/*
 * cdac.h: the C ABI of cdac (libcdac.so), which reads a running .NET (CoreCLR) process or
 * its core dump from outside, for debugger extensions (gdb/lldb Python via ctypes) and C
 * programs. Linux x64 and arm64 targets (of either, from a host of either).
 *
 * Conventions
 * - Every function but cdac_last_error returns an int32_t status: CDAC_OK (0),
 *   CDAC_NOT_FOUND (1, not an error: e.g. the address is not managed code), or a negative
 *   CDAC_E_* code. After any non-zero status, cdac_last_error gives a message.
 * - No panic or exception leaves the library: an internal failure is CDAC_E_PANIC.
 * - Out parameters are written only on CDAC_OK, except where a function says otherwise
 *   (the `needed`/`count` sizes on CDAC_E_BUFFER_TOO_SMALL).
 * - Strings are NUL-terminated UTF-8. A string buffer that is too small receives the
 *   truncated, NUL-terminated text and the call returns CDAC_E_BUFFER_TOO_SMALL.
 *
 * Thread safety
 * - A handle may be used from one thread at a time (calls on one handle must not
 *   overlap); different handles may be used from different threads at once.
 * - cdac_last_error is per thread.
 * - Handles are checked against the set of open handles: a closed or made-up handle is
 *   CDAC_E_BAD_HANDLE (a handle value may be reused by a later cdac_open_*).
 *
 * Memory callbacks (cdac_open_callbacks)
 * - The read callback is called on the thread calling into cdac, during cdac_open_callbacks
 *   and later calls on the handle; `ctx` must stay valid until cdac_close.
 * - The callback must fill `len` bytes of `buf` and return 0, or return non-zero
 *   (the call then fails with CDAC_E_READ_FAILED, or CDAC_E_OPEN_FAILED while opening).
 * - The callback must not call into cdac with the same handle (it runs inside a call on it).
 * - The mappings must include the runtime module (libcoreclr.so), so that cdac finds the
 *   runtime and its data descriptor; the array and its paths are copied.
 */
#ifndef CDAC_H
#define CDAC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define CDAC_OK 0
#define CDAC_NOT_FOUND 1            /* not managed code / nothing there: not an error */
#define CDAC_E_NULL_POINTER (-1)    /* a required pointer argument was NULL */
#define CDAC_E_BAD_HANDLE (-2)      /* not an open handle (closed, or never opened) */
#define CDAC_E_OPEN_FAILED (-3)     /* the target could not be opened / no .NET runtime in it */
#define CDAC_E_READ_FAILED (-4)     /* target memory could not be read */
#define CDAC_E_BUFFER_TOO_SMALL (-5) /* the caller's buffer is too small */
#define CDAC_E_PANIC (-6)           /* a panic inside cdac (or a host callback) was caught */
#define CDAC_E_INVALID_ARGUMENT (-7) /* e.g. a non-UTF-8 path, registers without rip/rsp */
#define CDAC_E_RUNTIME_DATA (-8)    /* the runtime's data could not be interpreted */

/* cdac_method_info.kind */
#define CDAC_CODE_UNKNOWN 0
#define CDAC_CODE_JIT 1
#define CDAC_CODE_READY_TO_RUN 2
#define CDAC_CODE_NATIVE_AOT 3      /* NativeAOT code: method_desc is 0, the start names it */

/* cdac_frame.kind */
#define CDAC_FRAME_NATIVE 0
#define CDAC_FRAME_MANAGED 1

/* cdac_x64_regs.valid_mask bits */
#define CDAC_REG_RIP (1u << 0)
#define CDAC_REG_RSP (1u << 1)
#define CDAC_REG_RBP (1u << 2)
#define CDAC_REG_RBX (1u << 3)
#define CDAC_REG_R12 (1u << 4)
#define CDAC_REG_R13 (1u << 5)
#define CDAC_REG_R14 (1u << 6)
#define CDAC_REG_R15 (1u << 7)
/* Not a register: rip is a return address (every frame but the innermost and those a
 * signal interrupted), so cdac_unwind_step looks the code up at rip - 1, in the call.
 * Never set in an output. */
#define CDAC_REG_RIP_IS_RETURN (1u << 8)

/* cdac_architecture values: which register functions a handle takes (cdac_x64_regs to
 * cdac_stack/cdac_unwind_step, cdac_arm64_regs to the _arm64 ones; the others refuse with
 * CDAC_E_INVALID_ARGUMENT). */
#define CDAC_ARCH_X64 1
#define CDAC_ARCH_ARM64 2

/* cdac_arm64_regs.valid_mask bits: bit n (0-30) for xn, then these. */
#define CDAC_ARM64_REG_X(n) (1ull << (n))
#define CDAC_ARM64_REG_SP (1ull << 31)
#define CDAC_ARM64_REG_PC (1ull << 32)
/* Not a register: pc is a return address (as CDAC_REG_RIP_IS_RETURN). Never set in an
 * output. */
#define CDAC_ARM64_REG_PC_IS_RETURN (1ull << 33)

/* cdac_eh_clause.kind */
#define CDAC_EH_TYPED 0
#define CDAC_EH_FILTER 1
#define CDAC_EH_FINALLY 2
#define CDAC_EH_FAULT 4

/* An opened target. */
typedef struct cdac_handle cdac_handle;

/* Reads `len` bytes at target address `addr` into `buf`; returns 0 when it filled the
 * whole buffer, non-zero otherwise. */
typedef int32_t (*cdac_read_fn)(void *ctx, uint64_t addr, uint8_t *buf, size_t len);

/* A file mapped into the target (a line of /proc/PID/maps, an NT_FILE entry of a core). */
typedef struct cdac_mapping {
    uint64_t start;       /* first address */
    uint64_t end;         /* one past the last address */
    uint64_t file_offset; /* offset in the file of the byte at `start` */
    const char *path;     /* the file's path */
} cdac_mapping;

/* The method that owns a code address. */
typedef struct cdac_method_info {
    uint64_t method_desc;     /* the MethodDesc */
    uint64_t start;           /* start of the method's hot code */
    uint64_t hot_size;        /* size of the hot code (0 when unknown) */
    uint64_t relative_offset; /* the address's offset from `start` */
    uint32_t kind;            /* CDAC_CODE_* */
    uint32_t is_funclet;      /* 1 inside a catch/finally/filter/fault funclet */
} cdac_method_info;

/* x64 registers of a frame; `valid_mask` says which are known (CDAC_REG_*). */
typedef struct cdac_x64_regs {
    uint64_t rip, rsp, rbp, rbx, r12, r13, r14, r15;
    uint32_t valid_mask;
} cdac_x64_regs;

/* arm64 registers of a frame (x29 is the frame pointer, x30 the link register); a
 * pointer-authentication code in pc is ignored. `valid_mask` says which are known
 * (CDAC_ARM64_REG_*). */
typedef struct cdac_arm64_regs {
    uint64_t x[31];
    uint64_t sp, pc;
    uint64_t valid_mask;
} cdac_arm64_regs;

/* One frame of a walked stack. */
typedef struct cdac_frame {
    uint64_t ip;          /* a return address, except for the innermost frame */
    uint64_t sp;
    uint64_t method_desc; /* 0 for a native frame */
    uint32_t kind;        /* CDAC_FRAME_* */
    int32_t il_offset;    /* IL offset of a managed frame, -1 when unknown */
} cdac_frame;

/* One exception clause of a method; offsets are from the method's start. */
typedef struct cdac_eh_clause {
    uint32_t kind;          /* CDAC_EH_* */
    uint32_t flags;         /* the clause's raw flags */
    uint32_t try_start, try_end;         /* protected range [try_start, try_end) */
    uint32_t handler_start, handler_end; /* handler range [handler_start, handler_end) */
    uint32_t filter_offset; /* filter clauses: offset of the filter funclet, else 0 */
    uint32_t class_token;   /* typed clauses: the caught class's token when known, else 0 */
    uint64_t type_handle;   /* typed clauses: its TypeHandle when resolved, else 0 */
} cdac_eh_clause;

/* One loaded module (assembly image) of the runtime. */
typedef struct cdac_module {
    uint64_t address;    /* the runtime's Module* (for cdac_module_path) */
    uint64_t base;       /* where the image is loaded (0 when it has none) */
    uint64_t size;       /* bytes of the loaded image */
    uint32_t is_dynamic; /* 1 for a Reflection.Emit module */
    uint32_t is_mapped;  /* 1 when laid out as the loader maps it (ReadyToRun), 0 when flat */
} cdac_module;

/* cdac_heap_segment.kind */
#define CDAC_SEGMENT_GEN0 0
#define CDAC_SEGMENT_GEN1 1
#define CDAC_SEGMENT_GEN2 2
#define CDAC_SEGMENT_EPHEMERAL 3 /* a segments GC's newest segment: gen2's end, gen1, gen0 */
#define CDAC_SEGMENT_LOH 4
#define CDAC_SEGMENT_POH 5
#define CDAC_SEGMENT_FROZEN 6    /* frozen (NonGC) objects: string literals, type objects */

/* One segment (region) of the GC heap. */
typedef struct cdac_heap_segment {
    uint64_t segment;   /* its heap_segment record */
    uint64_t start;     /* first object */
    uint64_t end;       /* end of its objects */
    uint64_t committed; /* end of its committed memory */
    uint64_t reserved;  /* end of its reserved memory */
    uint64_t flags;     /* heap_segment flags (1 read-only, 8 LOH, 0x200 POH) */
    uint32_t heap;      /* the heap that owns it (0 under workstation GC) */
    uint32_t kind;      /* CDAC_SEGMENT_* */
} cdac_heap_segment;

/* The objects of one type on the GC heap. */
typedef struct cdac_type_stat {
    uint64_t method_table; /* the type's MethodTable (cdac_type_name names it) */
    uint64_t count;        /* objects */
    uint64_t total_size;   /* their total size in bytes, unaligned as SOS adds them */
    uint32_t is_free;      /* 1 for free objects (gaps the GC filled): type "Free" */
    uint32_t reserved;     /* 0 */
} cdac_type_stat;

/* cdac_gc_handle.kind: the runtime's handle types */
#define CDAC_HANDLE_WEAK_SHORT 0
#define CDAC_HANDLE_WEAK_LONG 1
#define CDAC_HANDLE_STRONG 2
#define CDAC_HANDLE_PINNED 3
#define CDAC_HANDLE_REF_COUNTED 5
#define CDAC_HANDLE_DEPENDENT 6
#define CDAC_HANDLE_WEAK_INTERIOR_POINTER 10

/* One GC handle in use. */
typedef struct cdac_gc_handle {
    uint64_t address;   /* the handle (GCHandle.ToIntPtr, without a pinned handle's low bit) */
    uint64_t object;    /* the object it refers to */
    uint64_t secondary; /* a dependent handle's secondary object, else 0 */
    uint32_t kind;      /* CDAC_HANDLE_* */
    uint32_t is_strong; /* 1 when it keeps its object alive */
} cdac_gc_handle;

/* cdac_lock.kind */
#define CDAC_LOCK_SYNC_BLOCK 0 /* a monitor whose state is in a sync block */
#define CDAC_LOCK_THIN 1       /* a monitor held without contention (state in the header) */
#define CDAC_LOCK_THREADING 2  /* a System.Threading.Lock (.NET 9 and later) */

typedef struct cdac_lock {
    uint64_t object;           /* the locked object (a System.Threading.Lock is its own) */
    uint64_t method_table;     /* its MethodTable */
    uint64_t owner_os_id;      /* the holder's OS thread id (0: free or not a runtime thread) */
    uint32_t owner_managed_id; /* the holder's managed thread id (0: none) */
    uint32_t kind;             /* CDAC_LOCK_* */
    uint32_t times_entered;    /* times the holder entered it (0: free) */
    uint32_t waiters_counted;  /* threads waiting, as the lock counts them */
    uint32_t sync_block_index; /* a sync block's index (0 for the other kinds) */
    uint32_t reserved;         /* zero */
} cdac_lock;

typedef struct cdac_async_frame {
    uint64_t object;             /* the Task (an async method's state machine box, or a plain Task) */
    uint64_t method_table;       /* its MethodTable */
    uint64_t state_machine_type; /* the compiler's state machine type (0 for a plain Task) */
    uint64_t awaiting;           /* the object its current await holds (0: none known) */
    uint32_t chain;              /* which chain (from 0) */
    uint32_t depth;              /* its place in the chain, 0 for the outermost */
    int32_t state;               /* the await it is suspended at; -1 running; INT32_MIN: none */
    uint32_t state_flags;        /* Task.m_stateFlags */
} cdac_async_frame;

/* cdac_field.value_kind */
#define CDAC_VALUE_INT 1          /* value: a signed integer, sign-extended */
#define CDAC_VALUE_UINT 2         /* value: an unsigned integer */
#define CDAC_VALUE_FLOAT 3        /* value: the bits of a double (a float widened) */
#define CDAC_VALUE_BOOL 4         /* value: 0 or 1 */
#define CDAC_VALUE_CHAR 5         /* value: a UTF-16 unit */
#define CDAC_VALUE_POINTER 6      /* value: an unmanaged pointer */
#define CDAC_VALUE_REFERENCE 7    /* value: the object's address, 0 for null */
#define CDAC_VALUE_STRUCT 8       /* a struct: its fields follow, one depth deeper */
#define CDAC_VALUE_NOT_EXPANDED 9 /* a struct whose fields are not listed */
#define CDAC_VALUE_UNREADABLE 10
/* cdac_object_fields flags */
#define CDAC_FIELDS_STATICS 1     /* also the type's static fields (.NET 9 and later) */

/* One field of an object, or of a struct inside it. */
typedef struct cdac_field {
    char name[64];       /* NUL-terminated, cut to 63 bytes */
    char type_name[192]; /* its declared type, NUL-terminated, cut to 191 bytes */
    uint64_t offset;     /* from the object's start (a struct's field: the struct's data) */
    uint64_t address;    /* where the value is */
    uint64_t value;      /* CDAC_VALUE_* says how to read it */
    uint32_t value_kind; /* CDAC_VALUE_* */
    uint32_t depth;      /* 0: the object's own; n + 1: of the struct field at depth n before it */
    uint32_t is_static;  /* 1 for a static field */
    uint32_t reserved;   /* 0 */
} cdac_field;

/* cdac_gcroot root kinds */
#define CDAC_ROOT_STRONG_HANDLE 1
#define CDAC_ROOT_PINNED_HANDLE 2
#define CDAC_ROOT_ASYNC_PINNED_HANDLE 3
#define CDAC_ROOT_SIZED_REF_HANDLE 4
#define CDAC_ROOT_FINALIZER_QUEUE 5 /* ready for finalization */
#define CDAC_ROOT_STACK 6           /* a frame's live slot; root_address: the slot (0: a register) */
#define CDAC_ROOT_THREAD_STATIC 7   /* a thread's thread-static storage (.NET 9, 10) */
#define CDAC_ROOT_OTHER 255
/* cdac_root_step.slot_offset values that are not offsets */
#define CDAC_VIA_ROOT UINT64_MAX            /* the root's own object */
#define CDAC_VIA_DEPENDENT (UINT64_MAX - 1) /* a dependent handle's secondary */

/* One object on a path from a root. */
typedef struct cdac_root_step {
    uint64_t object;       /* the object */
    uint64_t method_table; /* its MethodTable (cdac_type_name names it) */
    uint64_t slot_offset;  /* where the previous object refers to it, or CDAC_VIA_* */
} cdac_root_step;

/* Copies the message of the last failure on this thread into buf (NUL-terminated,
 * truncated to len); returns the size it needs, NUL included (1: no message). buf may be
 * NULL when len is 0. */
size_t cdac_last_error(char *buf, size_t len);

/* Attaches to live process `pid` read-only (needs the rights to read its memory). */
int32_t cdac_open_pid(int32_t pid, cdac_handle **out);

/* Opens an ELF core dump. */
int32_t cdac_open_core(const char *path, cdac_handle **out);

/* Opens a target whose memory `read` reads (called with `ctx`) and whose mapped files are
 * maps[0..n]. */
int32_t cdac_open_callbacks(cdac_read_fn read, void *ctx, const cdac_mapping *maps, size_t n,
                            cdac_handle **out);

/* Closes a handle (NULL: nothing happens). */
int32_t cdac_close(cdac_handle *h);

/* The method owning code address ip: CDAC_OK, or CDAC_NOT_FOUND when ip is not managed
 * code. */
int32_t cdac_ip2md(cdac_handle *h, uint64_t ip, cdac_method_info *out);

/* The name of the method owning ip, as the runtime's perf map writes it
 * ("[Assembly]Namespace.Type::Method(args)"). *needed (if not NULL) receives the size the
 * name needs, NUL included, also on CDAC_E_BUFFER_TOO_SMALL. buf may be NULL when len is 0. */
int32_t cdac_method_name(cdac_handle *h, uint64_t ip, char *buf, size_t len, size_t *needed);

/* Source file and line of managed code at ip, from the assembly's portable PDB (next to
 * the assembly, or embedded). For a return address, pass ip - 1 (the call). *line is set
 * and the file name copied as cdac_method_name copies names. CDAC_NOT_FOUND when there is
 * no PDB, no IL offset or no sequence point. */
int32_t cdac_source_line(cdac_handle *h, uint64_t ip, char *file, size_t len, uint32_t *line);

/* One unwind step of the managed frame `in` (rip must be in managed code: looked up as
 * given, or at rip - 1 with CDAC_REG_RIP_IS_RETURN; rip and rsp must be valid): the caller's registers in `out` (rip, rsp and the
 * callee-saved registers the unwind data restores or keeps). CDAC_NOT_FOUND when rip is not
 * managed code. out->rip is 0 at the outermost frame. */
int32_t cdac_unwind_step(cdac_handle *h, const cdac_x64_regs *in, cdac_x64_regs *out);

/* Walks the stack from `regs` (managed frames by the runtime's unwind data, native ones by
 * the modules' CFI or the frame-pointer chain; at most 1024 frames) into frames[0..cap].
 * *count receives the number of frames of the walk; when it exceeds cap, the first cap
 * frames are written and the status is CDAC_E_BUFFER_TOO_SMALL. frames may be NULL when cap
 * is 0. */
int32_t cdac_stack(cdac_handle *h, const cdac_x64_regs *regs, cdac_frame *frames, size_t cap,
                   size_t *count);

/* The target's architecture: *arch receives CDAC_ARCH_X64 or CDAC_ARCH_ARM64. */
int32_t cdac_architecture(cdac_handle *h, uint32_t *arch);

/* cdac_unwind_step of an arm64 target: pc and sp must be valid; pc is looked up as given,
 * or at pc - 1 with CDAC_ARM64_REG_PC_IS_RETURN. `out` receives pc, sp and the registers
 * the unwind data restores or keeps (x19-x29; the caller's lr is unknown). */
int32_t cdac_unwind_step_arm64(cdac_handle *h, const cdac_arm64_regs *in, cdac_arm64_regs *out);

/* cdac_stack of an arm64 target (native frames by CFI or the x29/x30 frame records). */
int32_t cdac_stack_arm64(cdac_handle *h, const cdac_arm64_regs *regs, cdac_frame *frames,
                         size_t cap, size_t *count);

/* Count-then-fill lists (cdac_eh_clauses, cdac_modules): *count receives the number of
 * entries; out[0..cap] receives the first ones; when count > cap the status is
 * CDAC_E_BUFFER_TOO_SMALL. out may be NULL when cap is 0 (to ask for the count). */

/* The exception clauses of the method owning ip (CDAC_NOT_FOUND: not managed code). */
int32_t cdac_eh_clauses(cdac_handle *h, uint64_t ip, cdac_eh_clause *out, size_t cap,
                        size_t *count);

/* The runtime's loaded modules (listed once per handle, on first use). */
int32_t cdac_modules(cdac_handle *h, cdac_module *out, size_t cap, size_t *count);

/* The GC heap's segments, heap by heap (count-then-fill). */
int32_t cdac_heap_segments(cdac_handle *h, cdac_heap_segment *out, size_t cap, size_t *count);

/* Walks the whole GC heap and counts objects and bytes per MethodTable (SOS dumpheap
 * -stat), smallest total first (count-then-fill; each call walks the heap again). When a
 * segment could not be walked to its end the statistics hold what was walked and the
 * status is CDAC_E_RUNTIME_DATA (cdac_last_error says where). */
int32_t cdac_heap_stat(cdac_handle *h, cdac_type_stat *out, size_t cap, size_t *count);

/* The runtime's name of the type of MethodTable method_table ("System.String",
 * "System.Collections.Generic.List`1[System.Int32]"); CDAC_NOT_FOUND when it cannot be
 * named. Strings as cdac_method_name. */
int32_t cdac_type_name(cdac_handle *h, uint64_t method_table, char *buf, size_t len,
                       size_t *needed);

/* Every GC handle in use (count-then-fill). */
int32_t cdac_gc_handles(cdac_handle *h, cdac_gc_handle *out, size_t cap, size_t *count);

/* Every lock held or waited for: the sync table's monitors, thin locks and
 * System.Threading.Locks, from one heap walk (count-then-fill). No thread is stopped and no
 * stack read, so who waits is not known here (the CLI's `cdac locks` reads stacks). */
int32_t cdac_locks(cdac_handle *h, cdac_lock *out, size_t cap, size_t *count);

/* Every chain of suspended async methods (as `cdac async`), frame by frame: chains in order,
 * each outermost first (count-then-fill; each call walks the heap). Name a frame with
 * cdac_type_name of its state_machine_type ("Ns.Type+<Method>d__4": method Ns.Type.Method). */
int32_t cdac_async_frames(cdac_handle *h, cdac_async_frame *out, size_t cap, size_t *count);

/* The fields of the object at `object` with their values (a struct's fields follow it, one
 * depth deeper), count-then-fill; flags CDAC_FIELDS_STATICS adds the type's statics. */
int32_t cdac_object_fields(cdac_handle *h, uint64_t object, uint32_t flags, cdac_field *out,
                           size_t cap, size_t *count);

/* A shortest path from a root to `object`, the root's object first, count-then-fill:
 * CDAC_OK, or CDAC_NOT_FOUND when no root cdac reads reaches it (handles, the finalizer
 * queue, every thread's stack frames; a live process's threads are stopped briefly). root_kind (CDAC_ROOT_*) and root_address (the handle, or the queue entry) may be
 * NULL. */
int32_t cdac_gcroot(cdac_handle *h, uint64_t object, uint32_t *root_kind, uint64_t *root_address,
                    cdac_root_step *out, size_t cap, size_t *count);

/* The image path of module `module` (a cdac_module.address): CDAC_NOT_FOUND when it has
 * none (dynamic modules), CDAC_E_INVALID_ARGUMENT when it is not a module of the runtime.
 * Strings as cdac_method_name. */
int32_t cdac_module_path(cdac_handle *h, uint64_t module, char *buf, size_t len,
                         size_t *needed);

/* The managed exception of the thread whose OS thread id is os_tid (the one being thrown
 * or handled, else the last one it threw), or, when object is non-zero, the exception
 * object at that address (os_tid is then ignored), as text: "Type: message", HResult and
 * object address, its captured stack trace ("at Method + IL_xxxx in file:line") and its
 * inner exceptions (indented, after "---> "). CDAC_NOT_FOUND when the thread has no
 * exception or is not a managed thread; CDAC_E_INVALID_ARGUMENT when object is not an
 * exception. Strings as cdac_method_name. */
int32_t cdac_exception_text(cdac_handle *h, uint64_t os_tid, uint64_t object, char *buf,
                            size_t len, size_t *needed);

#ifdef __cplusplus
}
#endif

#endif /* CDAC_H */
