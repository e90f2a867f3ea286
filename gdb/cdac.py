"""cdac inside gdb: managed .NET frames unwound and named in `bt`, and `cdac` commands.

    (gdb) source /path/to/cdac/gdb/cdac.py

Loads libcdac.so (the C ABI) with ctypes: $CDAC_LIB, else the installed one
(PREFIX/lib/libcdac.so next to PREFIX/share/cdac/gdb/cdac.py, `scripts/install`), else the
repository's `target/release/libcdac.so` (`cargo build --release -p cdac-capi`). It feeds
it memory through gdb itself, so it works the same on a live process gdb is attached to and
on a core gdb has open. It adds:

  * a frame unwinder: a frame in managed code (JIT'ed or ReadyToRun) is unwound with the
    runtime's own unwind info, so `bt` goes through managed frames into the native ones
    below them;
  * a frame filter that names managed frames (`[Assembly] Type::Method(...)`, with
    `file:line` when a portable PDB is found);
  * commands: `cdac ip2md ADDR`, `cdac clrstack` (the selected thread, managed and native
    frames), `cdac pe [ADDR]` (the exception on the selected thread, or the exception object
    at ADDR), `cdac modules`, `cdac dumpheap [-stat] [-type SUBSTRING]` (objects per type on
    the GC heap), `cdac gchandles [-stat]`, `cdac dumpobj ADDR` (fields and values),
    `cdac gcroot ADDR` (a path from a root), `cdac syncblk` (every lock, its owner and
    waiters), `cdac dumpasync` (suspended async methods, chain by chain), `cdac reset`
    (forget what was read: after the process ran).

What was read is kept until the inferior runs again (each resume forgets it), so a live
process must stay stopped between uses, as it does in gdb's all-stop mode.
"""

import ctypes
import os
import re
import struct

import gdb
from gdb.FrameDecorator import FrameDecorator
from gdb.unwinder import Unwinder

OK, NOT_FOUND, E_BUFFER_TOO_SMALL, E_RUNTIME_DATA = 0, 1, -5, -8
REG_RIP, REG_RSP, REG_RBP, REG_RBX = 1, 2, 4, 8
REG_R12, REG_R13, REG_R14, REG_R15 = 16, 32, 64, 128
REG_RIP_IS_RETURN = 256
SAVED = ("rbp", "rbx", "r12", "r13", "r14", "r15")
SAVED_BITS = (REG_RBP, REG_RBX, REG_R12, REG_R13, REG_R14, REG_R15)
ARCH_X64, ARCH_ARM64 = 1, 2
ARM64_REG_SP, ARM64_REG_PC, ARM64_REG_PC_IS_RETURN = 1 << 31, 1 << 32, 1 << 33
# The registers an arm64 unwind step restores or keeps: x19-x28 and fp (x29).
ARM64_SAVED = tuple(range(19, 30))


class FrameId:
    """A frame's identity for gdb: the caller's stack pointer and the method's start (gdb 13
    takes any object with `sp` and `pc`; gdb 14 also has gdb.unwinder.FrameId)."""

    def __init__(self, sp, pc):
        u64 = gdb.lookup_type("unsigned long")
        self.sp = gdb.Value(sp).cast(u64)
        self.pc = gdb.Value(pc).cast(u64)


class Mapping(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("file_offset", ctypes.c_uint64), ("path", ctypes.c_char_p)]


class MethodInfo(ctypes.Structure):
    _fields_ = [("method_desc", ctypes.c_uint64), ("start", ctypes.c_uint64),
                ("hot_size", ctypes.c_uint64), ("relative_offset", ctypes.c_uint64),
                ("kind", ctypes.c_uint32), ("is_funclet", ctypes.c_uint32)]


class TypeStat(ctypes.Structure):
    _fields_ = [("method_table", ctypes.c_uint64), ("count", ctypes.c_uint64),
                ("total_size", ctypes.c_uint64), ("is_free", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class GcHandle(ctypes.Structure):
    _fields_ = [("address", ctypes.c_uint64), ("object", ctypes.c_uint64),
                ("secondary", ctypes.c_uint64), ("kind", ctypes.c_uint32),
                ("is_strong", ctypes.c_uint32)]


class Lock(ctypes.Structure):
    _fields_ = [("object", ctypes.c_uint64), ("method_table", ctypes.c_uint64),
                ("owner_os_id", ctypes.c_uint64), ("owner_managed_id", ctypes.c_uint32),
                ("kind", ctypes.c_uint32), ("times_entered", ctypes.c_uint32),
                ("waiters_counted", ctypes.c_uint32), ("sync_block_index", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class AsyncFrame(ctypes.Structure):
    _fields_ = [("object", ctypes.c_uint64), ("method_table", ctypes.c_uint64),
                ("state_machine_type", ctypes.c_uint64), ("awaiting", ctypes.c_uint64),
                ("chain", ctypes.c_uint32), ("depth", ctypes.c_uint32),
                ("state", ctypes.c_int32), ("state_flags", ctypes.c_uint32)]


LOCK_KINDS = {0: "SyncBlock", 1: "ThinLock", 2: "Lock"}


class Field(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("type_name", ctypes.c_char * 192),
                ("offset", ctypes.c_uint64), ("address", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("value_kind", ctypes.c_uint32),
                ("depth", ctypes.c_uint32), ("is_static", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class RootStep(ctypes.Structure):
    _fields_ = [("object", ctypes.c_uint64), ("method_table", ctypes.c_uint64),
                ("slot_offset", ctypes.c_uint64)]


ROOT_KINDS = {1: "strong handle", 2: "pinned handle", 3: "async-pinned handle",
              4: "sized-ref handle", 5: "finalizer queue", 6: "stack slot", 255: "root"}
VIA_ROOT, VIA_DEPENDENT = 2**64 - 1, 2**64 - 2


def field_value(f):
    """A cdac_field's value as text (its kind, cdac.h CDAC_VALUE_*)."""
    k, v = f.value_kind, f.value
    if k == 1:
        return str(v - 2**64 if v >= 2**63 else v)
    if k == 2:
        return str(v)
    if k == 3:
        return repr(struct.unpack("<d", struct.pack("<Q", v))[0])
    if k == 4:
        return "true" if v else "false"
    if k == 5:
        return "'%s' (%#x)" % (chr(v), v)
    if k in (6, 7):
        return "null" if v == 0 and k == 7 else "%#x" % v
    return {8: "", 9: "(struct not expanded)"}.get(k, "(unreadable)")


HANDLE_KINDS = {0: "WeakShort", 1: "WeakLong", 2: "Strong", 3: "Pinned", 4: "Variable",
                5: "RefCounted", 6: "Dependent", 7: "AsyncPinned", 8: "SizedRef",
                9: "WeakNativeCom", 10: "WeakInteriorPointer", 11: "CrossReference"}


class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("rip", "rsp") + SAVED] + \
        [("valid_mask", ctypes.c_uint32)]


class Arm64Regs(ctypes.Structure):
    """cdac_arm64_regs: x0-x30, sp, pc; valid_mask bit n for xn, then ARM64_REG_*."""
    _fields_ = [("x", ctypes.c_uint64 * 31), ("sp", ctypes.c_uint64), ("pc", ctypes.c_uint64),
                ("valid_mask", ctypes.c_uint64)]


class Frame(ctypes.Structure):
    _fields_ = [("ip", ctypes.c_uint64), ("sp", ctypes.c_uint64),
                ("method_desc", ctypes.c_uint64), ("kind", ctypes.c_uint32),
                ("il_offset", ctypes.c_int32)]


class Module(ctypes.Structure):
    _fields_ = [("address", ctypes.c_uint64), ("base", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("is_dynamic", ctypes.c_uint32),
                ("is_mapped", ctypes.c_uint32)]


READ_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64,
                           ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t)


def _library_candidates():
    """Where libcdac.so may be, in order: $CDAC_LIB; the installed layout (scripts/install:
    PREFIX/share/cdac/gdb/cdac.py -> PREFIX/lib/libcdac.so, only when this file sits in
    such a share/cdac/ folder); the repository's release build (gdb/cdac.py ->
    target/release/libcdac.so)."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = []
    if os.environ.get("CDAC_LIB"):
        paths.append(os.environ["CDAC_LIB"])
    share = os.path.dirname(os.path.dirname(here))
    if os.path.basename(share) == "share" and os.path.basename(os.path.dirname(here)) == "cdac":
        paths.append(os.path.join(os.path.dirname(share), "lib", "libcdac.so"))
    paths.append(os.path.normpath(os.path.join(here, "..", "target", "release", "libcdac.so")))
    return paths


def _load_library():
    """The first of the candidates that loads; an error naming every place looked at."""
    tried = []
    for path in _library_candidates():
        if not os.path.exists(path):
            tried.append("%s (not found)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        if os.environ.get("CDAC_LIB") and path != os.environ["CDAC_LIB"]:
            print("cdac: CDAC_LIB not loaded (%s); using %s" % (tried[0], path))
        return lib
    raise gdb.GdbError("cdac: cannot load libcdac.so; looked at: %s. Install it with "
                       "`scripts/install`, build it with `cargo build --release -p cdac-capi`, "
                       "or set CDAC_LIB" % "; ".join(tried))


def _library():
    lib = _load_library()
    h, hp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    sigs = {
        "cdac_open_callbacks": ([READ_FN, ctypes.c_void_p, ctypes.POINTER(Mapping),
                                 ctypes.c_size_t, hp]),
        "cdac_close": [h],
        "cdac_ip2md": [h, ctypes.c_uint64, ctypes.POINTER(MethodInfo)],
        "cdac_method_name": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, size_p],
        "cdac_source_line": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_uint32)],
        "cdac_unwind_step": [h, ctypes.POINTER(Regs), ctypes.POINTER(Regs)],
        "cdac_stack": [h, ctypes.POINTER(Regs), ctypes.POINTER(Frame), ctypes.c_size_t, size_p],
        "cdac_modules": [h, ctypes.POINTER(Module), ctypes.c_size_t, size_p],
        "cdac_module_path": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, size_p],
    }
    # Newer calls are bound when the library has them (an older libcdac.so lacks them).
    optional = {
        "cdac_architecture": [h, ctypes.POINTER(ctypes.c_uint32)],
        "cdac_unwind_step_arm64": [h, ctypes.POINTER(Arm64Regs), ctypes.POINTER(Arm64Regs)],
        "cdac_stack_arm64": [h, ctypes.POINTER(Arm64Regs), ctypes.POINTER(Frame),
                             ctypes.c_size_t, size_p],
        "cdac_exception_text": [h, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p,
                                ctypes.c_size_t, size_p],
        "cdac_heap_stat": [h, ctypes.POINTER(TypeStat), ctypes.c_size_t, size_p],
        "cdac_type_name": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, size_p],
        "cdac_gc_handles": [h, ctypes.POINTER(GcHandle), ctypes.c_size_t, size_p],
        "cdac_locks": [h, ctypes.POINTER(Lock), ctypes.c_size_t, size_p],
        "cdac_async_frames": [h, ctypes.POINTER(AsyncFrame), ctypes.c_size_t, size_p],
        "cdac_object_fields": [h, ctypes.c_uint64, ctypes.c_uint32, ctypes.POINTER(Field),
                               ctypes.c_size_t, size_p],
        "cdac_gcroot": [h, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32),
                        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(RootStep),
                        ctypes.c_size_t, size_p],
    }
    for name, args in list(sigs.items()) + list(optional.items()):
        fn = getattr(lib, name, None)
        if fn is None and name in optional:
            continue
        fn.argtypes = args
        fn.restype = ctypes.c_int32
    lib.cdac_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.cdac_last_error.restype = ctypes.c_size_t
    return lib


LIB = _library()


def last_error():
    buf = ctypes.create_string_buffer(2048)
    LIB.cdac_last_error(buf, len(buf))
    return buf.value.decode("utf-8", "replace")


def _read_memory(_ctx, addr, buf, length):
    try:
        data = gdb.selected_inferior().read_memory(addr, length).tobytes()
    except (gdb.MemoryError, gdb.error, OverflowError):
        return -1
    ctypes.memmove(buf, data, length)
    return 0


_READ = READ_FN(_read_memory)


def _mappings():
    """The inferior's file mappings, from `info proc mappings` (live and cores alike), else
    (a core without an NT_FILE note, as qemu-user writes) from the executable and shared
    libraries gdb loaded."""
    try:
        out = gdb.execute("info proc mappings", to_string=True)
    except gdb.error:
        out = ""
    maps = []
    for line in out.splitlines():
        m = re.match(r"\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)\s+"
                     r"(?:[rwxps-]{4}\s+)?(/\S.*)$", line)
        if m:
            maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16),
                         m.group(4).strip()))
    return maps or _library_mappings()


def _elf_layout(path):
    """(address of .text, [(vaddr, file offset, file size)] of each PT_LOAD) of a 64-bit
    little-endian ELF file, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, shoff = struct.unpack_from("<QQ", head, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", head, 54)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
            loads = []
            for k in range(phnum):
                p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                    "<IIQQQQ", ph, k * phentsize)
                if p_type == 1:
                    loads.append((p_vaddr, p_offset, p_filesz))
            f.seek(shoff)
            sh = f.read(shentsize * shnum)
            if shstrndx >= shnum:
                return None
            str_off, str_size = struct.unpack_from("<QQ", sh, shstrndx * shentsize + 24)
            f.seek(str_off)
            names = f.read(str_size)
            for k in range(shnum):
                name_at = struct.unpack_from("<I", sh, k * shentsize)[0]
                name = names[name_at:names.find(b"\0", name_at)]
                if name == b".text":
                    return struct.unpack_from("<Q", sh, k * shentsize + 16)[0], loads
    except (OSError, struct.error, ValueError):
        return None
    return None


def _text_starts():
    """(address of .text, path) of the executable and of each shared library gdb placed
    (`info files`: the executable's sections first, then each library's `... in PATH`)."""
    try:
        out = gdb.execute("info files", to_string=True)
    except gdb.error:
        return []
    exe = gdb.current_progspace().filename
    starts = []
    for line in out.splitlines():
        m = re.match(r"\s*(0x[0-9a-f]+) - 0x[0-9a-f]+ is \.text(?: in (/\S.*))?$", line)
        if m:
            path = m.group(2).strip() if m.group(2) else exe
            if path:
                starts.append((int(m.group(1), 16), os.path.abspath(path)))
    return starts


def _library_mappings():
    """The PT_LOAD segments of the executable and of each shared library where gdb placed
    them (where their .text landed), widened to pages as the loader maps them."""
    maps = []
    for text_at, path in _text_starts():
        layout = _elf_layout(path)
        if layout is None:
            continue
        text, loads = layout
        bias = text_at - text
        for vaddr, offset, size in loads:
            start = (bias + vaddr) & ~0xFFF
            end = (bias + vaddr + size + 0xFFF) & ~0xFFF
            maps.append((start, end, offset & ~0xFFF, path))
    return maps


class Target:
    """One opened target per inferior, kept until the inferior runs again (or `cdac
    reset`). A target without a runtime (libcoreclr.so not loaded yet) is remembered as
    such, so that native-only stacks do not pay for a fresh attempt at every frame; a newly
    loaded library clears that."""

    handle = None
    key = None
    failure = None
    names = {}
    keep = None
    arch = ARCH_X64

    @classmethod
    def get(cls):
        inf = gdb.selected_inferior()
        key = (inf.num, inf.pid)
        if cls.key == key:
            if cls.handle is not None:
                return cls.handle
            if cls.failure is not None:
                raise gdb.GdbError(cls.failure)
        cls.reset()
        if inf.pid == 0:
            raise gdb.GdbError("cdac: no process or core")
        maps = _mappings()
        paths = [p.encode() for (_, _, _, p) in maps]
        arr = (Mapping * len(maps))(*[Mapping(s, e, o, p) for (s, e, o, _), p in zip(maps, paths)])
        handle = ctypes.c_void_p()
        status = LIB.cdac_open_callbacks(_READ, None, arr, len(maps), ctypes.byref(handle))
        if status != OK:
            cls.key, cls.failure = key, "cdac: " + last_error()
            raise gdb.GdbError(cls.failure)
        cls.handle, cls.key, cls.keep = handle, key, (arr, paths, maps)
        cls.arch = ARCH_X64
        if hasattr(LIB, "cdac_architecture"):
            arch = ctypes.c_uint32(0)
            if LIB.cdac_architecture(handle, ctypes.byref(arch)) == OK:
                cls.arch = arch.value
        return handle

    @classmethod
    def architecture(cls):
        """The target's CDAC_ARCH_*."""
        cls.get()
        return cls.arch

    @classmethod
    def mappings(cls):
        """The file mappings the target was opened with."""
        cls.get()
        return cls.keep[2]

    @classmethod
    def reset(cls):
        if cls.handle is not None:
            LIB.cdac_close(cls.handle)
        cls.handle, cls.key, cls.failure, cls.names, cls.keep = None, None, None, {}, None

    @classmethod
    def forget_failure(cls):
        if cls.handle is None:
            cls.reset()


def method_at(ip, lines=True):
    """(MethodInfo, name, 'file:line' or None) of managed code at `ip`, or None. The
    unwinder needs no source line (`lines=False`): only names are shown."""
    try:
        h = Target.get()
    except gdb.GdbError:
        return None
    info = MethodInfo()
    if LIB.cdac_ip2md(h, ip, ctypes.byref(info)) != OK:
        return None
    # NativeAOT code has no MethodDesc (0): its method is known by its start.
    key = info.method_desc or info.start
    name = Target.names.get(key)
    if name is None:
        needed = ctypes.c_size_t(0)
        LIB.cdac_method_name(h, ip, None, 0, ctypes.byref(needed))
        buf = ctypes.create_string_buffer(max(needed.value, 1))
        if LIB.cdac_method_name(h, ip, buf, len(buf), ctypes.byref(needed)) == OK:
            name = buf.value.decode("utf-8", "replace")
        else:
            name = "<MethodDesc %#x>" % info.method_desc
        Target.names[key] = name
    file_buf = ctypes.create_string_buffer(1024)
    line = ctypes.c_uint32(0)
    where = None
    if lines and LIB.cdac_source_line(h, ip, file_buf, len(file_buf), ctypes.byref(line)) == OK:
        where = "%s:%d" % (file_buf.value.decode("utf-8", "replace"), line.value)
    return info, name, where


class ManagedUnwinder(Unwinder):
    """Unwinds frames in managed code with the runtime's unwind info."""

    def __init__(self):
        super().__init__("cdac-managed")

    def __call__(self, pending_frame):
        try:
            arm64 = Target.architecture() == ARCH_ARM64
        except gdb.GdbError:
            return None
        if arm64:
            return self._arm64(pending_frame)
        pc = int(pending_frame.read_register("rip"))
        caller_frame = pending_frame.level() > 0
        # A return address belongs to the call before it.
        found = method_at(pc - 1 if caller_frame else pc, lines=False)
        if found is None:
            return None
        regs = Regs()
        regs.rip = pc
        regs.rsp = int(pending_frame.read_register("rsp"))
        regs.valid_mask = REG_RIP | REG_RSP | (REG_RIP_IS_RETURN if caller_frame else 0)
        for name, bit in zip(SAVED, SAVED_BITS):
            try:
                setattr(regs, name, int(pending_frame.read_register(name)) & (2**64 - 1))
                regs.valid_mask |= bit
            except gdb.error:
                pass
        out = Regs()
        if LIB.cdac_unwind_step(Target.get(), ctypes.byref(regs), ctypes.byref(out)) != OK:
            return None
        info = pending_frame.create_unwind_info(FrameId(out.rsp, found[0].start))
        u64 = gdb.lookup_type("unsigned long")
        info.add_saved_register("rip", gdb.Value(out.rip).cast(u64))
        info.add_saved_register("rsp", gdb.Value(out.rsp).cast(u64))
        for name, bit in zip(SAVED, SAVED_BITS):
            if out.valid_mask & bit:
                info.add_saved_register(name, gdb.Value(getattr(out, name)).cast(u64))
        return info

    def _arm64(self, pending_frame):
        pc = int(pending_frame.read_register("pc")) & (2**64 - 1)
        caller_frame = pending_frame.level() > 0
        found = method_at(pc - 1 if caller_frame else pc, lines=False)
        if found is None:
            return None
        regs = _arm64_registers(pending_frame)
        if caller_frame:
            regs.valid_mask |= ARM64_REG_PC_IS_RETURN
        out = Arm64Regs()
        if LIB.cdac_unwind_step_arm64(Target.get(), ctypes.byref(regs), ctypes.byref(out)) != OK:
            return None
        info = pending_frame.create_unwind_info(FrameId(out.sp, found[0].start))
        u64 = gdb.lookup_type("unsigned long")
        info.add_saved_register("pc", gdb.Value(out.pc).cast(u64))
        info.add_saved_register("sp", gdb.Value(out.sp).cast(u64))
        for n in ARM64_SAVED:
            if out.valid_mask & (1 << n):
                info.add_saved_register("x%d" % n, gdb.Value(out.x[n]).cast(u64))
        return info


class ManagedFrame(FrameDecorator):
    def __init__(self, base, name, where):
        super().__init__(base)
        self._name, self._where = name, where

    def function(self):
        return self._name

    def filename(self):
        return self._where.rsplit(":", 1)[0] if self._where else None

    def line(self):
        return int(self._where.rsplit(":", 1)[1]) if self._where else None


class UnnamedFrame(FrameDecorator):
    """A frame gdb has no name for prints as `??`, as without filters."""

    def function(self):
        name = super().function()
        return "??" if name is None or isinstance(name, int) else name


class ManagedFrameNames:
    """Names managed frames in `bt`."""

    def __init__(self):
        self.name = "cdac"
        self.priority = 100
        self.enabled = True
        gdb.frame_filters[self.name] = self

    def filter(self, frames):
        for f in frames:
            frame = f.inferior_frame()
            pc = frame.pc()
            found = method_at(pc - 1 if frame.level() > 0 else pc)
            yield ManagedFrame(f, found[1], found[2]) if found else UnnamedFrame(f)


def _arm64_registers(frame):
    """A frame's (or pending frame's) arm64 registers: pc, sp and x0-x30 where gdb has
    them."""
    regs = Arm64Regs()
    regs.pc = int(frame.read_register("pc")) & (2**64 - 1)
    regs.sp = int(frame.read_register("sp")) & (2**64 - 1)
    regs.valid_mask = ARM64_REG_PC | ARM64_REG_SP
    for n in range(31):
        try:
            regs.x[n] = int(frame.read_register("x%d" % n)) & (2**64 - 1)
            regs.valid_mask |= 1 << n
        except (gdb.error, ValueError):
            pass
    return regs


def _registers(frame):
    regs = Regs()
    regs.rip = int(frame.read_register("rip"))
    regs.rsp = int(frame.read_register("rsp"))
    regs.valid_mask = REG_RIP | REG_RSP
    for name, bit in zip(SAVED, SAVED_BITS):
        try:
            setattr(regs, name, int(frame.read_register(name)) & (2**64 - 1))
            regs.valid_mask |= bit
        except gdb.error:
            pass
    return regs


def _native_name(pc, shown):
    """`module!function+0xoff` for native code at pc (offset from the shown address), or
    `module+0xoff` from the module's start when gdb knows no function there."""
    maps = Target.mappings()
    module = next((p for (s, e, _, p) in maps if s <= pc < e), None)
    name = None
    try:
        block = gdb.block_for_pc(pc)
        while block is not None and block.function is None:
            block = block.superblock
        if block is not None:
            name, start = block.function.print_name, block.start
    except RuntimeError:
        pass
    if name is None:
        sym = gdb.execute("info symbol %#x" % pc, to_string=True)
        m = re.match(r"(\S+)(?: \+ (\d+))? in section", sym)
        if m:
            name, start = m.group(1), pc - int(m.group(2) or 0)
    short = os.path.basename(module) if module else None
    if name is not None:
        return "%s%s+%#x" % (short + "!" if short else "", name, shown - start)
    if short is not None:
        base = min(s - o for (s, _, o, p) in maps if p == module)
        return "%s+%#x" % (short, shown - base)
    return "??"


class CdacCommand(gdb.Command):
    """cdac: .NET runtime data read by cdac (ip2md ADDR, clrstack, pe [ADDR], modules,
    dumpheap [-stat] [-type SUBSTRING], gchandles [-stat], dumpobj ADDR, gcroot ADDR, reset)."""

    def __init__(self):
        super().__init__("cdac", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)


class Ip2md(gdb.Command):
    """cdac ip2md ADDR: the managed method that owns a code address."""

    def __init__(self):
        super().__init__("cdac ip2md", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        ip = int(gdb.parse_and_eval(arg))
        found = method_at(ip)
        if found is None:
            gdb.write("%#x: not managed code\n" % ip)
            return
        info, name, where = found
        kind = {1: "jit", 2: "r2r"}.get(info.kind, "unknown")
        gdb.write("%#x: %s\n  MethodDesc %#x, start %#x + %#x, size %#x, %s%s\n" % (
            ip, name, info.method_desc, info.start, info.relative_offset, info.hot_size, kind,
            ", funclet" if info.is_funclet else ""))
        if where:
            gdb.write("  at %s\n" % where)


class ClrStack(gdb.Command):
    """cdac clrstack: the selected thread's stack as cdac walks it (managed and native)."""

    def __init__(self):
        super().__init__("cdac clrstack", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        frame = gdb.newest_frame()
        frames = (Frame * 512)()
        count = ctypes.c_size_t(0)
        h = Target.get()
        if Target.architecture() == ARCH_ARM64:
            status = LIB.cdac_stack_arm64(h, ctypes.byref(_arm64_registers(frame)), frames, 512,
                                          ctypes.byref(count))
        else:
            status = LIB.cdac_stack(h, ctypes.byref(_registers(frame)), frames, 512,
                                    ctypes.byref(count))
        if status < 0:
            raise gdb.GdbError("cdac: " + last_error())
        for i in range(min(count.value, 512)):
            f = frames[i]
            if f.kind == 1:
                found = method_at(f.ip - 1 if i > 0 else f.ip)
                name = found[1] if found else "<MethodDesc %#x>" % f.method_desc
                il = " [IL_%04x]" % f.il_offset if f.il_offset >= 0 else ""
                where = " at %s" % found[2] if found and found[2] else ""
                gdb.write("#%-3d %#018x %#018x %s%s%s\n" % (i, f.sp, f.ip, name, il, where))
            else:
                gdb.write("#%-3d %#018x %#018x (native) %s\n" % (
                    i, f.sp, f.ip, _native_name(f.ip - 1 if i > 0 else f.ip, f.ip)))


class PrintException(gdb.Command):
    """cdac pe [ADDR]: the managed exception on the selected thread (the one it is
    dispatching or last threw), or the exception object at ADDR: type, message, HResult,
    the frames of its captured stack trace with file:line, and its inner exceptions."""

    def __init__(self):
        super().__init__("cdac pe", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        if not hasattr(LIB, "cdac_exception_text"):
            raise gdb.GdbError("cdac pe: this libcdac.so has no cdac_exception_text")
        h = Target.get()
        obj = int(gdb.parse_and_eval(arg)) & (2**64 - 1) if arg.strip() else 0
        thread = gdb.selected_thread()
        if obj == 0 and thread is None:
            raise gdb.GdbError("cdac pe: no thread selected")
        tid = thread.ptid[1] if thread is not None else 0
        needed = ctypes.c_size_t(0)
        buf = ctypes.create_string_buffer(4096)
        status = LIB.cdac_exception_text(h, tid, obj, buf, len(buf), ctypes.byref(needed))
        if status == E_BUFFER_TOO_SMALL:
            buf = ctypes.create_string_buffer(needed.value)
            status = LIB.cdac_exception_text(h, tid, obj, buf, len(buf), ctypes.byref(needed))
        if status == NOT_FOUND:
            gdb.write("no managed exception on thread %d (LWP %d)\n" % (thread.num, tid)
                      if obj == 0 else "%#x: not an exception object\n" % obj)
            return
        if status != OK:
            raise gdb.GdbError("cdac: " + last_error())
        text = buf.value.decode("utf-8", "replace")
        gdb.write(text if text.endswith("\n") else text + "\n")


class Modules(gdb.Command):
    """cdac modules: the runtime's loaded modules."""

    def __init__(self):
        super().__init__("cdac modules", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        h = Target.get()
        count = ctypes.c_size_t(0)
        LIB.cdac_modules(h, None, 0, ctypes.byref(count))
        mods = (Module * count.value)()
        LIB.cdac_modules(h, mods, count.value, ctypes.byref(count))
        for m in mods:
            needed = ctypes.c_size_t(0)
            buf = ctypes.create_string_buffer(4096)
            LIB.cdac_module_path(h, m.address, buf, len(buf), ctypes.byref(needed))
            gdb.write("Module %#x base %#x size %#x%s %s\n" % (
                m.address, m.base, m.size, " dynamic" if m.is_dynamic else "",
                buf.value.decode("utf-8", "replace")))


def _listed(fn, h, cls):
    """A count-then-fill list and, for a partial heap walk, its message."""
    count = ctypes.c_size_t(0)
    status = fn(h, None, 0, ctypes.byref(count))
    if status not in (OK, E_BUFFER_TOO_SMALL, E_RUNTIME_DATA):
        raise gdb.GdbError("cdac: " + last_error())
    items = (cls * count.value)()
    status = fn(h, items, count.value, ctypes.byref(count))
    if status not in (OK, E_RUNTIME_DATA):
        raise gdb.GdbError("cdac: " + last_error())
    return items, (last_error() if status == E_RUNTIME_DATA else None)


def _type_name(h, mt):
    needed = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(4096)
    if LIB.cdac_type_name(h, mt, buf, len(buf), ctypes.byref(needed)) != OK:
        return "<MethodTable %#x>" % mt
    return buf.value.decode("utf-8", "replace")


def _require(name):
    if not hasattr(LIB, name) or getattr(LIB, name).argtypes is None:
        raise gdb.GdbError("cdac: this libcdac.so has no %s: rebuild it "
                           "(`cargo build --release -p cdac-capi`)" % name)


class DumpHeap(gdb.Command):
    """cdac dumpheap [-stat] [-type SUBSTRING]: objects per type on the GC heap, smallest
    total first (like SOS dumpheap -stat)."""

    def __init__(self):
        super().__init__("cdac dumpheap", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_heap_stat")
        args, substring = arg.split(), None
        while args:
            a = args.pop(0)
            if a == "-stat":
                continue
            if a == "-type" and args:
                substring = args.pop(0)
                continue
            raise gdb.GdbError("usage: cdac dumpheap [-stat] [-type SUBSTRING]")
        h = Target.get()
        stats, warning = _listed(LIB.cdac_heap_stat, h, TypeStat)
        gdb.write("%-18s %10s %14s %s\n" % ("MT", "Count", "TotalSize", "Class Name"))
        objects = total = 0
        for s in stats:
            name = "Free" if s.is_free else _type_name(h, s.method_table)
            if substring is not None and substring not in name:
                continue
            objects += s.count
            total += s.total_size
            gdb.write("%-18s %10d %14d %s\n" % ("%#x" % s.method_table, s.count,
                                                 s.total_size, name))
        gdb.write("Total %d objects, %d bytes\n" % (objects, total))
        if warning:
            gdb.write("warning: %s\n" % warning)


class GcHandles(gdb.Command):
    """cdac gchandles [-stat]: every GC handle (kind, object, secondary), then the count per
    kind."""

    def __init__(self):
        super().__init__("cdac gchandles", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_gc_handles")
        if arg.split() not in ([], ["-stat"]):
            raise gdb.GdbError("usage: cdac gchandles [-stat]")
        handles, _ = _listed(LIB.cdac_gc_handles, Target.get(), GcHandle)
        counts = {}
        for g in handles:
            kind = HANDLE_KINDS.get(g.kind, "Type%d" % g.kind)
            counts[kind] = counts.get(kind, 0) + 1
            if not arg.split():
                gdb.write("%-18s %-20s %-18s %s\n" % (
                    "%#x" % g.address, kind, "%#x" % g.object,
                    "secondary %#x" % g.secondary if g.secondary else ""))
        for kind in sorted(counts):
            gdb.write("%8d %s\n" % (counts[kind], kind))
        gdb.write("%8d handles\n" % len(handles))


def locks_lines(h, listed, type_name):
    """`syncblk`: every lock held or waited for (as `cdac locks --no-stacks`)."""
    locks, warning = listed(h)
    out = ["%-18s %-9s %5s %-7s %-8s %7s %7s %s" % (
        "Object", "Kind", "Index", "Owner", "OS id", "Entered", "Waiting", "Type")]
    for l in locks:
        out.append("%-18s %-9s %5s %-7s %-8s %7d %7d %s" % (
            "%#x" % l.object, LOCK_KINDS.get(l.kind, str(l.kind)),
            l.sync_block_index if l.kind == 0 else "-",
            l.owner_managed_id or "-", l.owner_os_id or "-", l.times_entered,
            l.waiters_counted, type_name(h, l.method_table)))
    out.append("%d locks" % len(locks))
    if warning:
        out.append("warning: %s" % warning)
    return out


def async_method(state_machine_type):
    """The async method a compiler state machine type runs: Ns.Type+<Method>d__4 -> Ns.Type.Method."""
    declaring, _, nested = state_machine_type.rpartition("+")
    if nested.startswith("<") and ">d__" in nested:
        nested = nested[1:nested.rindex(">d__")]
    return "%s.%s" % (declaring, nested) if declaring else nested


def dumpasync_lines(h, listed, type_name):
    """`dumpasync`: each chain of suspended async methods, outermost first."""
    frames, warning = listed(h)
    out = []
    chain = None
    for f in frames:
        if f.chain != chain:
            chain = f.chain
            out.append("STACK %d" % (chain + 1))
        if f.state_machine_type:
            name = async_method(type_name(h, f.state_machine_type))
            state = "(%d)" % f.state if f.state != -(2 ** 31) else "(?)"
        else:
            name, state = type_name(h, f.method_table), "(task)"
        out.append("%s%#x %s %s" % ("  " * f.depth, f.object, state, name))
    out.append("%d async chain(s)" % (0 if chain is None else chain + 1))
    if warning:
        out.append("warning: %s" % warning)
    return out


class SyncBlk(gdb.Command):
    """cdac syncblk: every lock held or waited for (monitors of the sync table, thin locks,
    System.Threading.Locks), its owner, recursion and waiters (like SOS syncblk)."""

    def __init__(self):
        super().__init__("cdac syncblk", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_locks")
        for line in locks_lines(Target.get(), lambda h: _listed(LIB.cdac_locks, h, Lock),
                                _type_name):
            gdb.write(line + "\n")


class DumpAsync(gdb.Command):
    """cdac dumpasync: each chain of suspended async methods, outermost first, with the await
    each is at (like SOS dumpasync)."""

    def __init__(self):
        super().__init__("cdac dumpasync", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_async_frames")
        for line in dumpasync_lines(
                Target.get(), lambda h: _listed(LIB.cdac_async_frames, h, AsyncFrame),
                _type_name):
            gdb.write(line + "\n")


class DumpObj(gdb.Command):
    """cdac dumpobj ADDR: the object's fields with their values (a struct's fields indented
    under it) and its type's statics (like SOS dumpobj)."""

    def __init__(self):
        super().__init__("cdac dumpobj", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_object_fields")
        try:
            addr = int(gdb.parse_and_eval(arg))
        except gdb.error:
            raise gdb.GdbError("usage: cdac dumpobj ADDR")
        h = Target.get()
        fields, _ = _listed(lambda h_, out, cap, count: LIB.cdac_object_fields(
            h_, addr, 1, out, cap, count), h, Field)
        gdb.write("%8s  %-40s %-24s %s\n" % ("offset", "type", "name", "value"))
        for f in fields:
            name = "  " * f.depth + f.name.decode("utf-8", "replace")
            gdb.write("%8s  %-40s %-24s %s%s\n" % (
                "%#x" % f.offset, f.type_name.decode("utf-8", "replace"), name,
                field_value(f), " (static)" if f.is_static else ""))


class GcRoot(gdb.Command):
    """cdac gcroot ADDR: a path from a root (a handle, the finalizer queue) to the object
    (like SOS gcroot)."""

    def __init__(self):
        super().__init__("cdac gcroot", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        _require("cdac_gcroot")
        try:
            addr = int(gdb.parse_and_eval(arg))
        except gdb.error:
            raise gdb.GdbError("usage: cdac gcroot ADDR")
        h = Target.get()
        kind, root = ctypes.c_uint32(0), ctypes.c_uint64(0)
        steps = (RootStep * 256)()
        count = ctypes.c_size_t(0)
        status = LIB.cdac_gcroot(h, addr, ctypes.byref(kind), ctypes.byref(root), steps,
                                 len(steps), ctypes.byref(count))
        if status == NOT_FOUND:
            gdb.write("no root cdac reads reaches %#x\n" % addr)
            return
        if status != OK:
            raise gdb.GdbError("cdac: " + last_error())
        gdb.write("%s %#x\n" % (ROOT_KINDS.get(kind.value, "root"), root.value))
        for s in steps[:count.value]:
            via = ("" if s.slot_offset == VIA_ROOT else "  (dependent)"
                   if s.slot_offset == VIA_DEPENDENT else "  (at +%#x)" % s.slot_offset)
            gdb.write("  -> %#x %s%s\n" % (s.object, _type_name(h, s.method_table), via))


class Reset(gdb.Command):
    """cdac reset: forget what cdac read (after the process ran on)."""

    def __init__(self):
        super().__init__("cdac reset", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        Target.reset()


CdacCommand()
Ip2md()
ClrStack()
PrintException()
Modules()
DumpHeap()
GcHandles()
SyncBlk()
DumpAsync()
DumpObj()
GcRoot()
Reset()
ManagedFrameNames()
gdb.unwinder.register_unwinder(None, ManagedUnwinder(), replace=True)
gdb.events.cont.connect(lambda _event: Target.reset())
gdb.events.exited.connect(lambda _event: Target.reset())
gdb.events.new_objfile.connect(lambda _event: Target.forget_failure())
