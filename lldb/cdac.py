"""cdac inside lldb: managed .NET frames named in backtraces, and `cdac` commands.

    (lldb) command script import /path/to/cdac/lldb/cdac.py

Loads libcdac.so (the C ABI) with ctypes: $CDAC_LIB, else the installed one
(PREFIX/lib/libcdac.so next to PREFIX/share/cdac/lldb/cdac.py, `scripts/install`), else the
repository's `target/release/libcdac.so` (`cargo build --release -p cdac-capi`). It feeds it
memory through lldb itself (`SBProcess.ReadMemory`), so it works the same on a live process
(`lldb -p PID`) and on a core (`lldb -c CORE EXE`). The mapped files cdac needs
(libcoreclr.so above all) come from lldb: its memory regions where they carry file names
(live processes), placed in the file by the modules' PT_LOAD segments, else those segments
alone (cores). Memory a core left out is read from lldb's module files, or, for the
runtime's assemblies (gcore keeps no file-backed pages and lldb 14 does not read the files a
core's NT_FILE note names), from the assembly's file.

lldb 14 has no Python frame unwinder and no frame decorator, so `bt` cannot be changed.
Its own unwinder follows the frame-pointer chain through JIT'ed code, which passes most
managed frames but skips the parent frame of a running funclet (a `finally`, `catch` or
`filter` block: the funclet shares its parent's frame pointer). `cdac bt` therefore walks
each stack with cdac (managed frames by the runtime's unwind info, native ones by CFI),
prints native frames as lldb describes them and managed frames named, and says so where
lldb's own walk differs. Commands:

  cdac bt [all]        the selected thread's (or every thread's) backtrace, managed named
  cdac clrstack        the selected thread's stack as cdac walks it (IL offsets, file:line)
  cdac ip2md ADDR      the managed method that owns a code address
  cdac modules         the runtime's loaded modules
  cdac pe [ADDR]       the exception on the selected thread (or the object at ADDR)
  cdac reset           forget what was read (also automatic when the process has run)
"""

import ctypes
import os
import shlex
import struct

import lldb

OK, NOT_FOUND, E_BUFFER_TOO_SMALL, E_RUNTIME_DATA = 0, 1, -5, -8
REG_RIP, REG_RSP, REG_RBP, REG_RBX = 1, 2, 4, 8
REG_R12, REG_R13, REG_R14, REG_R15 = 16, 32, 64, 128
SAVED = ("rbp", "rbx", "r12", "r13", "r14", "r15")
SAVED_BITS = (REG_RBP, REG_RBX, REG_R12, REG_R13, REG_R14, REG_R15)
FRAME_MANAGED = 1
MAX_FRAMES = 1024
ARCH_X64, ARCH_ARM64 = 1, 2
ARM64_REG_SP, ARM64_REG_PC = 1 << 31, 1 << 32
PAGE = 4096


class CdacError(Exception):
    """A failure to report as an lldb error (never a traceback)."""


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

_LIB = None


def _library_candidates():
    """Where libcdac.so may be, in order: $CDAC_LIB; the installed layout (scripts/install:
    PREFIX/share/cdac/lldb/cdac.py -> PREFIX/lib/libcdac.so, only when this file sits in
    such a share/cdac/ folder); the repository's release build (lldb/cdac.py ->
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
            so = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        if os.environ.get("CDAC_LIB") and path != os.environ["CDAC_LIB"]:
            print("cdac: CDAC_LIB not loaded (%s); using %s" % (tried[0], path))
        return so
    raise CdacError("cannot load libcdac.so; looked at: %s. Install it with `scripts/install`, "
                    "build it with `cargo build --release -p cdac-capi`, or set CDAC_LIB"
                    % "; ".join(tried))


def lib():
    """libcdac.so, loaded on first use (where: _library_candidates)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    so = _load_library()
    h, hp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    sigs = {
        "cdac_open_callbacks": [READ_FN, ctypes.c_void_p, ctypes.POINTER(Mapping),
                                ctypes.c_size_t, hp],
        "cdac_close": [h],
        "cdac_ip2md": [h, ctypes.c_uint64, ctypes.POINTER(MethodInfo)],
        "cdac_method_name": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, size_p],
        "cdac_source_line": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_uint32)],
        "cdac_stack": [h, ctypes.POINTER(Regs), ctypes.POINTER(Frame), ctypes.c_size_t, size_p],
        "cdac_architecture": [h, ctypes.POINTER(ctypes.c_uint32)],
        "cdac_stack_arm64": [h, ctypes.POINTER(Arm64Regs), ctypes.POINTER(Frame),
                             ctypes.c_size_t, size_p],
        "cdac_modules": [h, ctypes.POINTER(Module), ctypes.c_size_t, size_p],
        "cdac_module_path": [h, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, size_p],
        # Newer libraries only (bound when exported).
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
    for name, args in sigs.items():
        if not hasattr(so, name):
            continue
        fn = getattr(so, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int32
    so.cdac_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    so.cdac_last_error.restype = ctypes.c_size_t
    _LIB = so
    return so


def last_error():
    buf = ctypes.create_string_buffer(4096)
    lib().cdac_last_error(buf, len(buf))
    return buf.value.decode("utf-8", "replace") or "unknown error"


def _string(fn, *args):
    """A string out of a cdac_method_name-style call: (status, text or None)."""
    needed = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(512)
    status = fn(*args, buf, len(buf), ctypes.byref(needed))
    if status == E_BUFFER_TOO_SMALL and needed.value > len(buf):
        buf = ctypes.create_string_buffer(needed.value)
        status = fn(*args, buf, len(buf), ctypes.byref(needed))
    if status != OK:
        return status, None
    return status, buf.value.decode("utf-8", "replace")


# ---------------------------------------------------------------- the target

def _read_memory(_ctx, addr, buf, length):
    """cdac's read callback: the whole range through lldb, or failure. No exception may
    leave a ctypes callback."""
    try:
        data = Target.read(addr, length)
        if data is None:
            return -1
        ctypes.memmove(buf, data, length)
        return 0
    except Exception:  # noqa: BLE001 -- reported to cdac as a failed read
        return -1


_READ = READ_FN(_read_memory)


def _module_path(module):
    spec = module.GetPlatformFileSpec()
    if not spec.IsValid() or not spec.GetFilename():
        spec = module.GetFileSpec()
    return spec.fullpath if spec.IsValid() and spec.GetFilename() else None


def _segments(target):
    """(start, end, file_offset, path) of every loaded PT_LOAD segment of the target's
    modules, widened to pages (how the loader maps them)."""
    out = []
    for module in target.module_iter():
        path = _module_path(module)
        if not path:
            continue
        for section in module.section_iter():
            if not (section.GetName() or "").startswith("PT_LOAD"):
                continue
            load = section.GetLoadAddress(target)
            size = section.GetByteSize()
            if load == lldb.LLDB_INVALID_ADDRESS or size == 0:
                continue
            start = load & ~(PAGE - 1)
            end = (load + size + PAGE - 1) & ~(PAGE - 1)
            offset = section.GetFileOffset() - (load - start)
            if offset < 0:
                continue
            out.append((start, end, offset, path))
    return out


def _mappings(target, process):
    """The target's file mappings. Live processes: lldb's memory regions named by file
    (as /proc/PID/maps has them), each placed in its file by the module segment it lies
    in. Cores (lldb names no regions there) and files with no named region: the module
    segments themselves."""
    segments = _segments(target)
    by_path = {}
    for seg in segments:
        by_path.setdefault(seg[3], []).append(seg)
    named = []
    regions = process.GetMemoryRegions()
    for i in range(regions.GetSize()):
        region = lldb.SBMemoryRegionInfo()
        if not regions.GetMemoryRegionAtIndex(i, region):
            continue
        name = region.GetName()
        if not name or not name.startswith("/") or name not in by_path:
            continue
        base, end = region.GetRegionBase(), region.GetRegionEnd()
        for start, seg_end, offset, path in by_path[name]:
            if start <= base < seg_end:
                named.append((base, end, offset + (base - start), path))
                break
    covered = {m[3] for m in named}
    return named + [s for s in segments if s[3] not in covered]


class Target:
    """The opened cdac handle of the selected process, reopened when the process changed
    (another process, or it ran since: lldb's stop id) and on `cdac reset`."""

    handle = None
    key = None
    process = None
    target = None
    keep = None
    names = {}
    pages = {}
    images = None

    @classmethod
    def get(cls, debugger):
        target = debugger.GetSelectedTarget()
        process = target.GetProcess() if target.IsValid() else None
        if process is None or not process.IsValid():
            raise CdacError("no process (attach with `lldb -p PID` or open a core with "
                            "`lldb -c CORE EXE`)")
        key = (process.GetUniqueID(), process.GetProcessID(), process.GetStopID())
        if cls.handle is not None and cls.key == key:
            return cls.handle
        cls.reset()
        cls.process, cls.target = process, target
        maps = _mappings(target, process)
        # libcoreclr.so, or an executable with the runtime linked in (NativeAOT): the
        # library tells which, and says why when neither is there.
        paths = [m[3].encode() for m in maps]
        arr = (Mapping * len(maps))(*[Mapping(s, e, o, p)
                                      for (s, e, o, _), p in zip(maps, paths)])
        handle = ctypes.c_void_p()
        status = lib().cdac_open_callbacks(_READ, None, arr, len(maps), ctypes.byref(handle))
        if status != OK:
            cls.process = cls.target = None
            raise CdacError(last_error())
        cls.handle, cls.key, cls.keep = handle, key, (arr, paths)
        cls.images = _images(handle)
        return handle

    @classmethod
    def reset(cls):
        if cls.handle is not None:
            lib().cdac_close(cls.handle)
        cls.handle = cls.key = cls.process = cls.target = cls.keep = cls.images = None
        cls.names, cls.pages = {}, {}

    @classmethod
    def read(cls, addr, length):
        """`length` bytes at `addr`, through whole pages kept until the process runs (cdac
        reads the same runtime structures over and over); None when unreadable."""
        first, last = addr // PAGE, (addr + length - 1) // PAGE
        if last - first > 16:
            return cls._read_direct(addr, length)
        chunks = []
        for page in range(first, last + 1):
            data = cls.pages.get(page)
            if data is None:
                data = cls._read_direct(page * PAGE, PAGE)
                if data is None:
                    # A page only partly readable: the exact range may still be.
                    return cls._read_direct(addr, length)
                cls.pages[page] = data
            chunks.append(data)
        blob = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        skip = addr - first * PAGE
        return blob[skip:skip + length]

    @classmethod
    def _read_direct(cls, addr, length):
        error = lldb.SBError()
        data = cls.process.ReadMemory(addr, length, error)
        if error.Success() and data is not None and len(data) == length:
            return data
        # Memory a core left out may still be in the module files lldb has loaded.
        error = lldb.SBError()
        data = cls.target.ReadMemory(lldb.SBAddress(addr, cls.target), length, error)
        if error.Success() and data is not None and len(data) == length:
            return data
        # A managed assembly's image the dump left out (gcore keeps no file-backed
        # pages; lldb 14 does not read them from the files the core's NT_FILE note
        # names): from the file, placed as the runtime laid it out.
        for image in cls.images or ():
            if image.base <= addr and addr + length <= image.base + image.size:
                return image.read(addr - image.base, length)
        return None


class Image:
    """A managed assembly's file, read at offsets from its load address: flat (the file
    as is) or laid out as the runtime's PE loader maps it (headers, then each section at
    its RVA; ReadyToRun images)."""

    def __init__(self, base, size, mapped, path):
        self.base, self.size, self.mapped, self.path = base, size, mapped, path
        self.sections = None  # [(rva, virtual size, raw size, file offset)], headers first

    def _layout(self, f):
        head = f.read(4096)
        if len(head) < 0x40 or head[:2] != b"MZ":
            raise ValueError("not a PE file")
        pe = struct.unpack_from("<I", head, 0x3C)[0]
        if head[pe:pe + 4] != b"PE\0\0":
            raise ValueError("not a PE file")
        count, opt_size = struct.unpack_from("<H", head, pe + 6)[0], \
            struct.unpack_from("<H", head, pe + 20)[0]
        header_size = struct.unpack_from("<I", head, pe + 24 + 60)[0]
        table = pe + 24 + opt_size
        f.seek(table)
        raw = f.read(40 * count)
        sections = [(0, header_size, header_size, 0)]
        for i in range(count):
            vsize, rva, rsize, offset = struct.unpack_from("<IIII", raw, 40 * i + 8)
            sections.append((rva, max(vsize, rsize), rsize, offset))
        return sections

    def read(self, rva, length):
        try:
            with open(self.path, "rb") as f:
                if not self.mapped:
                    f.seek(rva)
                    data = f.read(length)
                    return data if len(data) == length else None
                if self.sections is None:
                    self.sections = self._layout(f)
                out = bytearray(length)
                for start, vsize, rsize, offset in self.sections:
                    lo, hi = max(rva, start), min(rva + length, start + vsize)
                    if lo >= hi:
                        continue
                    n = max(0, min(hi, start + rsize) - lo)
                    if n:
                        f.seek(offset + lo - start)
                        chunk = f.read(n)
                        out[lo - rva:lo - rva + len(chunk)] = chunk
                return bytes(out)
        except (OSError, ValueError, struct.error):
            return None


def _images(h):
    """The runtime's assemblies that have a file: where each is loaded and how."""
    count = ctypes.c_size_t(0)
    if lib().cdac_modules(h, None, 0, ctypes.byref(count)) not in (OK, E_BUFFER_TOO_SMALL):
        return []
    mods = (Module * count.value)()
    if lib().cdac_modules(h, mods, count.value, ctypes.byref(count)) != OK:
        return []
    images = []
    for m in mods:
        if not m.base or not m.size or m.is_dynamic:
            continue
        status, path = _string(lib().cdac_module_path, h, m.address)
        if status == OK and path and os.path.isfile(path):
            images.append(Image(m.base, m.size, m.is_mapped, path))
    return images


def method_at(h, ip, lines=True):
    """(MethodInfo, name, 'file:line' or None) of managed code at `ip`, or None."""
    info = MethodInfo()
    status = lib().cdac_ip2md(h, ip, ctypes.byref(info))
    if status == NOT_FOUND:
        return None
    if status != OK:
        raise CdacError(last_error())
    # NativeAOT code has no MethodDesc (0): its method is known by its start.
    key = info.method_desc or info.start
    name = Target.names.get(key)
    if name is None:
        _, name = _string(lib().cdac_method_name, h, ip)
        if name is None:
            name = "<MethodDesc %#x>" % info.method_desc
        Target.names[key] = name
    where = None
    if lines:
        file_buf = ctypes.create_string_buffer(4096)
        line = ctypes.c_uint32(0)
        if lib().cdac_source_line(h, ip, file_buf, len(file_buf), ctypes.byref(line)) == OK:
            where = "%s:%d" % (file_buf.value.decode("utf-8", "replace"), line.value)
    return info, name, where


# ---------------------------------------------------------------- stacks

def _architecture(h):
    """The target's CDAC_ARCH_* (x64 with a library too old to say)."""
    if not hasattr(lib(), "cdac_architecture"):
        return ARCH_X64
    arch = ctypes.c_uint32(0)
    if lib().cdac_architecture(h, ctypes.byref(arch)) != OK:
        raise CdacError(last_error())
    return arch.value


def _register(frame, thread, name, required):
    """A register of lldb's frame as a number; None when lldb has no value for it."""
    value = frame.FindRegister(name)
    if not value.IsValid() or value.GetValue() is None:
        if required:
            raise CdacError("thread %d: no %s" % (thread.GetThreadID(), name))
        return None
    return value.GetValueAsUnsigned()


def _registers(thread):
    """The thread's x64 registers (its innermost frame's) for cdac_stack."""
    frame = thread.GetFrameAtIndex(0)
    if not frame.IsValid():
        raise CdacError("thread %d has no registers" % thread.GetThreadID())
    regs = Regs()
    for name in ("rip", "rsp") + SAVED:
        value = _register(frame, thread, name, name in ("rip", "rsp"))
        if value is None:
            continue
        setattr(regs, name, value)
        if name == "rip":
            regs.valid_mask |= REG_RIP
        elif name == "rsp":
            regs.valid_mask |= REG_RSP
        else:
            regs.valid_mask |= SAVED_BITS[SAVED.index(name)]
    return regs


def _arm64_registers(thread):
    """The thread's arm64 registers (x0-x30, sp, pc) for cdac_stack_arm64; lldb names x29
    and x30 fp and lr."""
    frame = thread.GetFrameAtIndex(0)
    if not frame.IsValid():
        raise CdacError("thread %d has no registers" % thread.GetThreadID())
    regs = Arm64Regs()
    regs.pc = _register(frame, thread, "pc", True)
    regs.sp = _register(frame, thread, "sp", True)
    regs.valid_mask = ARM64_REG_PC | ARM64_REG_SP
    for n in range(31):
        value = _register(frame, thread, {29: "fp", 30: "lr"}.get(n, "x%d" % n), False)
        if value is not None:
            regs.x[n] = value
            regs.valid_mask |= 1 << n
    return regs


def cdac_stack(h, thread):
    """The thread's frames as cdac walks them (a list of Frame)."""
    frames = (Frame * MAX_FRAMES)()
    count = ctypes.c_size_t(0)
    if _architecture(h) == ARCH_ARM64:
        status = lib().cdac_stack_arm64(h, ctypes.byref(_arm64_registers(thread)), frames,
                                        MAX_FRAMES, ctypes.byref(count))
    else:
        status = lib().cdac_stack(h, ctypes.byref(_registers(thread)), frames, MAX_FRAMES,
                                  ctypes.byref(count))
    if status < 0 and status != E_BUFFER_TOO_SMALL:
        raise CdacError(last_error())
    return [frames[i] for i in range(min(count.value, MAX_FRAMES))]


def _lldb_physical_frames(thread):
    """lldb's frames grouped by physical frame: [(pc, [SBFrame...])], inlined frames with
    the function they are inlined in (lldb lists them as frames of their own)."""
    groups, pending = [], []
    for frame in thread:
        pending.append(frame)
        if frame.IsInlined():
            continue
        groups.append((pending[0].GetPC(), pending))
        pending = []
    if pending:
        groups.append((pending[0].GetPC(), pending))
    return groups


def _frame_text(frame):
    """lldb's own description of a frame, without its `frame #N: ` prefix."""
    stream = lldb.SBStream()
    frame.GetDescription(stream)
    text = stream.GetData().strip().splitlines()[0] if stream.GetData() else ""
    if text.startswith("frame #"):
        text = text.split(": ", 1)[1] if ": " in text else text
    return text or "%#018x" % frame.GetPC()


def _native_text(target, pc, caller):
    """A native code address described as lldb describes frames (module`symbol + off)."""
    addr = target.ResolveLoadAddress(pc - 1 if caller and pc else pc)
    text = "%#018x" % pc
    module = addr.GetModule()
    if module.IsValid():
        text += " " + (module.GetFileSpec().GetFilename() or "?") + "`"
        symbol = addr.GetSymbol()
        if symbol.IsValid():
            start = symbol.GetStartAddress().GetLoadAddress(target)
            text += "%s + %d" % (symbol.GetName(), pc - start)
        else:
            text += "%#x" % (pc - module.GetObjectFileHeaderAddress().GetLoadAddress(target))
        entry = addr.GetLineEntry()
        if entry.IsValid() and entry.GetFileSpec().GetFilename():
            text += " at %s:%d" % (entry.GetFileSpec().GetFilename(), entry.GetLine())
    return text


def _method_or_none(h, ip):
    """method_at, with a failed lookup (unreadable memory, say) taken as unknown."""
    try:
        return method_at(h, ip)
    except CdacError:
        return None


def _managed_text(h, frame, caller):
    found = _method_or_none(h, frame.ip - 1 if caller else frame.ip)
    if found is None:
        return "%#018x <MethodDesc %#x>" % (frame.ip, frame.method_desc), None
    info, name, where = found
    text = "%#018x %s + %d" % (frame.ip, name, frame.ip - info.start)
    if info.is_funclet:
        text += " (funclet)"
    if where:
        text += " at %s" % where
    return text, found


def backtrace(h, target, thread, selected):
    """`cdac bt` of one thread, as lines."""
    name = thread.GetName()
    head = "%sthread #%d, tid = %d%s" % ("* " if selected else "  ", thread.GetIndexID(),
                                         thread.GetThreadID(),
                                         ", name = '%s'" % name if name else "")
    ours = note = None
    lldb_groups = _lldb_physical_frames(thread)
    try:
        ours = cdac_stack(h, thread)
    except CdacError as e:
        note = "cdac could not walk this stack (%s); lldb's frames, managed ones named" % e
    lines = [head]
    n = 0
    if ours is None:
        for k, (pc, frames) in enumerate(lldb_groups):
            found = _method_or_none(h, pc - 1 if k else pc)
            if found is not None:
                text, _ = _managed_text(h, Frame(pc, 0, found[0].method_desc, FRAME_MANAGED,
                                                 -1), k > 0)
                lines.append("    frame #%d: %s" % (n, text))
                n += 1
                continue
            for f in frames:
                lines.append("    frame #%d: %s" % (n, _frame_text(f)))
                n += 1
        lines.insert(1, "    note: " + note)
        return lines
    by_pc = {}
    for k, (pc, frames) in enumerate(lldb_groups):
        by_pc.setdefault(pc, k)
    walked = []  # (pc, number of its first line) of each physical frame, in order
    for k, f in enumerate(ours):
        walked.append((f.ip, n))
        if f.kind == FRAME_MANAGED:
            text, _ = _managed_text(h, f, k > 0)
            lines.append("    frame #%d: %s" % (n, text))
            n += 1
            continue
        j = by_pc.get(f.ip)
        if j is None:
            lines.append("    frame #%d: %s" % (n, _native_text(target, f.ip, k > 0)))
            n += 1
            continue
        for lf in lldb_groups[j][1]:
            lines.append("    frame #%d: %s" % (n, _frame_text(lf)))
            n += 1
    # Where cdac's native walk stops early and lldb knows the rest, lldb's frames follow.
    if ours and ours[-1].kind != FRAME_MANAGED and by_pc.get(ours[-1].ip) is not None:
        for pc, frames in lldb_groups[by_pc[ours[-1].ip] + 1:]:
            walked.append((pc, n))
            for lf in frames:
                lines.append("    frame #%d: %s" % (n, _frame_text(lf)))
                n += 1
    theirs = [pc for pc, _ in lldb_groups]
    if [pc for pc, _ in walked] != theirs:
        k = next((i for i, (a, b) in enumerate(zip(walked, theirs)) if a[0] != b),
                 min(len(walked), len(theirs)))
        where = "frame #%d" % walked[k][1] if k < len(walked) else "the end"
        lines.insert(1, "    note: walked by cdac; lldb's own unwinder (frame pointers through "
                        "managed code) parts from this walk at %s (%d physical frames to "
                        "cdac's %d)" % (where, len(theirs), len(walked)))
    return lines


def clrstack(h, target, thread):
    """`cdac clrstack` of one thread: cdac's walk with IL offsets and source lines."""
    lines = []
    for i, f in enumerate(cdac_stack(h, thread)):
        if f.kind == FRAME_MANAGED:
            found = _method_or_none(h, f.ip - 1 if i > 0 else f.ip)
            name = found[1] if found else "<MethodDesc %#x>" % f.method_desc
            il = " [IL_%04x]" % f.il_offset if f.il_offset >= 0 else ""
            where = " at %s" % found[2] if found and found[2] else ""
            lines.append("#%-3d %#018x %#018x %s%s%s" % (i, f.sp, f.ip, name, il, where))
        else:
            text = _native_text(target, f.ip, i > 0).split(" ", 1)
            lines.append("#%-3d %#018x %#018x (native) %s" % (
                i, f.sp, f.ip, text[1] if len(text) > 1 else "??"))
    return lines


# ---------------------------------------------------------------- commands

def _address(debugger, text):
    """An address argument: a number, or an expression lldb evaluates ($pc, a variable)."""
    try:
        return int(text, 0)
    except ValueError:
        pass
    frame = debugger.GetSelectedTarget().GetProcess().GetSelectedThread().GetSelectedFrame()
    value = frame.EvaluateExpression(text) if frame.IsValid() else \
        debugger.GetSelectedTarget().EvaluateExpression(text)
    if not value.IsValid() or value.GetError().Fail():
        raise CdacError("cannot evaluate %r: %s" % (text, value.GetError().GetCString()))
    return value.GetValueAsUnsigned()


def cmd_ip2md(debugger, args):
    if len(args) != 1:
        raise CdacError("usage: cdac ip2md ADDR")
    ip = _address(debugger, args[0])
    h = Target.get(debugger)
    found = method_at(h, ip)
    if found is None:
        return ["%#x: not managed code" % ip]
    info, name, where = found
    kind = {1: "jit", 2: "r2r"}.get(info.kind, "unknown")
    out = ["%#x: %s" % (ip, name),
           "  MethodDesc %#x, start %#x + %#x, size %#x, %s%s" % (
               info.method_desc, info.start, info.relative_offset, info.hot_size, kind,
               ", funclet" if info.is_funclet else "")]
    if where:
        out.append("  at %s" % where)
    return out


def _selected_thread(debugger):
    thread = debugger.GetSelectedTarget().GetProcess().GetSelectedThread()
    if not thread.IsValid():
        raise CdacError("no selected thread")
    return thread


def cmd_bt(debugger, args):
    h = Target.get(debugger)
    process = Target.process
    selected = process.GetSelectedThread()
    if args == ["all"]:
        threads = list(process)
    elif not args:
        threads = [_selected_thread(debugger)]
    else:
        raise CdacError("usage: cdac bt [all]")
    out = []
    for thread in threads:
        out.extend(backtrace(h, Target.target, thread,
                             thread.GetThreadID() == selected.GetThreadID()))
    return out


def cmd_clrstack(debugger, args):
    if args:
        raise CdacError("usage: cdac clrstack (the selected thread: `thread select N` first)")
    h = Target.get(debugger)
    thread = _selected_thread(debugger)
    return ["thread #%d, tid = %d" % (thread.GetIndexID(), thread.GetThreadID())] + \
        clrstack(h, Target.target, thread)


def cmd_modules(debugger, args):
    h = Target.get(debugger)
    count = ctypes.c_size_t(0)
    status = lib().cdac_modules(h, None, 0, ctypes.byref(count))
    if status not in (OK, E_BUFFER_TOO_SMALL):
        raise CdacError(last_error())
    mods = (Module * count.value)()
    if lib().cdac_modules(h, mods, count.value, ctypes.byref(count)) != OK:
        raise CdacError(last_error())
    out = []
    for m in mods:
        status, path = _string(lib().cdac_module_path, h, m.address)
        out.append("Module %#x base %#x size %#x%s %s" % (
            m.address, m.base, m.size, " dynamic" if m.is_dynamic else "",
            path if status == OK else "<no file>"))
    return out


def cmd_pe(debugger, args):
    if len(args) > 1:
        raise CdacError("usage: cdac pe [ADDR]")
    if not hasattr(lib(), "cdac_exception_text"):
        raise CdacError("this libcdac.so has no cdac_exception_text: rebuild it "
                        "(`cargo build --release -p cdac-capi`)")
    obj = _address(debugger, args[0]) if args else 0
    h = Target.get(debugger)
    thread = _selected_thread(debugger)
    status, text = _string(lib().cdac_exception_text, h, thread.GetThreadID(), obj)
    if status == NOT_FOUND:
        if obj:
            return ["%#x: not an exception object" % obj]
        return ["thread #%d (tid %d) has no exception" % (thread.GetIndexID(),
                                                           thread.GetThreadID())]
    if status != OK:
        raise CdacError(last_error())
    return text.rstrip("\n").splitlines()


def _require(name):
    if not hasattr(lib(), name):
        raise CdacError("this libcdac.so has no %s: rebuild it "
                        "(`cargo build --release -p cdac-capi`)" % name)


def _listed(fn, h, cls):
    """A count-then-fill list; a partial heap walk (E_RUNTIME_DATA) is kept, with its
    message."""
    count = ctypes.c_size_t(0)
    status = fn(h, None, 0, ctypes.byref(count))
    if status not in (OK, E_BUFFER_TOO_SMALL, E_RUNTIME_DATA):
        raise CdacError(last_error())
    items = (cls * count.value)()
    status = fn(h, items, count.value, ctypes.byref(count))
    warning = last_error() if status == E_RUNTIME_DATA else None
    if status not in (OK, E_RUNTIME_DATA):
        raise CdacError(last_error())
    return items, warning


def _type_name(h, mt):
    status, name = _string(lib().cdac_type_name, h, mt)
    return name if status == OK else "<MethodTable %#x>" % mt


def dumpheap_lines(h, args):
    """`dumpheap [-stat] [-type SUBSTRING]`: objects per type, smallest total first."""
    substring = None
    rest = list(args)
    while rest:
        a = rest.pop(0)
        if a == "-stat":
            continue
        if a == "-type" and rest:
            substring = rest.pop(0)
            continue
        raise CdacError("usage: cdac dumpheap [-stat] [-type SUBSTRING]")
    stats, warning = _listed(lib().cdac_heap_stat, h, TypeStat)
    out = ["%-18s %10s %14s %s" % ("MT", "Count", "TotalSize", "Class Name")]
    objects = total = 0
    for s in stats:
        name = "Free" if s.is_free else _type_name(h, s.method_table)
        if substring is not None and substring not in name:
            continue
        objects += s.count
        total += s.total_size
        out.append("%-18s %10d %14d %s" % ("%#x" % s.method_table, s.count, s.total_size, name))
    out.append("Total %d objects, %d bytes" % (objects, total))
    if warning:
        out.append("warning: %s" % warning)
    return out


def gchandles_lines(h, args):
    """`gchandles [-stat]`: every GC handle, then the count per kind."""
    if args not in ([], ["-stat"]):
        raise CdacError("usage: cdac gchandles [-stat]")
    handles, _ = _listed(lib().cdac_gc_handles, h, GcHandle)
    out = []
    counts = {}
    for g in handles:
        kind = HANDLE_KINDS.get(g.kind, "Type%d" % g.kind)
        counts[kind] = counts.get(kind, 0) + 1
        if not args:
            out.append("%-18s %-20s %-18s %s" % ("%#x" % g.address, kind, "%#x" % g.object,
                                                  "secondary %#x" % g.secondary if g.secondary else ""))
    for kind in sorted(counts):
        out.append("%8d %s" % (counts[kind], kind))
    out.append("%8d handles" % len(handles))
    return out


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


def cmd_syncblk(debugger, args):
    _require("cdac_locks")
    return locks_lines(Target.get(debugger), lambda h: _listed(lib().cdac_locks, h, Lock),
                       _type_name)


def cmd_dumpasync(debugger, args):
    _require("cdac_async_frames")
    return dumpasync_lines(Target.get(debugger),
                           lambda h: _listed(lib().cdac_async_frames, h, AsyncFrame),
                           _type_name)


def cmd_dumpheap(debugger, args):
    _require("cdac_heap_stat")
    return dumpheap_lines(Target.get(debugger), args)


def cmd_gchandles(debugger, args):
    _require("cdac_gc_handles")
    return gchandles_lines(Target.get(debugger), args)


def _one_address(args):
    try:
        return int(args[0], 0) if len(args) == 1 else None
    except ValueError:
        return None


def dumpobj_lines(h, args):
    """`dumpobj ADDR`: the object's fields and values, then its type's statics."""
    addr = _one_address(args)
    if addr is None:
        raise CdacError("usage: cdac dumpobj ADDR")
    fields, _ = _listed(lambda h_, out, cap, count: lib().cdac_object_fields(
        h_, addr, 1, out, cap, count), h, Field)
    out = ["%8s  %-40s %-24s %s" % ("offset", "type", "name", "value")]
    for f in fields:
        name = "  " * f.depth + f.name.decode("utf-8", "replace")
        out.append("%8s  %-40s %-24s %s%s" % (
            "%#x" % f.offset, f.type_name.decode("utf-8", "replace"), name, field_value(f),
            " (static)" if f.is_static else ""))
    return out


def gcroot_lines(h, args):
    """`gcroot ADDR`: a path from a root to the object."""
    addr = _one_address(args)
    if addr is None:
        raise CdacError("usage: cdac gcroot ADDR")
    kind, root = ctypes.c_uint32(0), ctypes.c_uint64(0)
    steps = (RootStep * 256)()
    count = ctypes.c_size_t(0)
    status = lib().cdac_gcroot(h, addr, ctypes.byref(kind), ctypes.byref(root), steps,
                               len(steps), ctypes.byref(count))
    if status == NOT_FOUND:
        return ["no root cdac reads reaches %#x" % addr]
    if status != OK:
        raise CdacError("cdac: " + last_error())
    out = ["%s %#x" % (ROOT_KINDS.get(kind.value, "root"), root.value)]
    for s in steps[:count.value]:
        via = ("" if s.slot_offset == VIA_ROOT else "  (dependent)"
               if s.slot_offset == VIA_DEPENDENT else "  (at +%#x)" % s.slot_offset)
        out.append("  -> %#x %s%s" % (s.object, _type_name(h, s.method_table), via))
    return out


def cmd_dumpobj(debugger, args):
    _require("cdac_object_fields")
    return dumpobj_lines(Target.get(debugger), args)


def cmd_gcroot(debugger, args):
    _require("cdac_gcroot")
    return gcroot_lines(Target.get(debugger), args)


def cmd_reset(debugger, args):
    Target.reset()
    return []


COMMANDS = {
    "bt": cmd_bt,
    "clrstack": cmd_clrstack,
    "dumpasync": cmd_dumpasync,
    "dumpheap": cmd_dumpheap,
    "dumpobj": cmd_dumpobj,
    "gchandles": cmd_gchandles,
    "gcroot": cmd_gcroot,
    "ip2md": cmd_ip2md,
    "modules": cmd_modules,
    "pe": cmd_pe,
    "reset": cmd_reset,
    "syncblk": cmd_syncblk,
}

USAGE = """cdac: .NET runtime data read by cdac
  cdac bt [all]     backtrace of the selected thread (or all), managed frames named
  cdac clrstack     the selected thread's stack as cdac walks it, IL offsets, file:line
  cdac dumpasync    each chain of suspended async methods, outermost first
  cdac dumpheap [-stat] [-type SUBSTRING]
                    objects per type on the GC heap, smallest total first
  cdac dumpobj ADDR the object's fields and values, and its type's statics
  cdac gcroot ADDR  a path from a root (a handle, the finalizer queue) to the object
  cdac gchandles [-stat]
                    every GC handle (kind, object, secondary), then the count per kind
  cdac ip2md ADDR   the managed method owning a code address
  cdac modules      the runtime's loaded modules
  cdac pe [ADDR]    the exception on the selected thread (or the object at ADDR)
  cdac reset        forget what cdac read
  cdac syncblk      every lock held or waited for, its owner, recursion and waiters"""


def cdac_command(debugger, command, result, _internal_dict):
    """cdac bt [all] | clrstack | dumpasync | dumpheap | dumpobj ADDR | gcroot ADDR | gchandles |
    ip2md ADDR | modules | pe [ADDR] | reset | syncblk"""
    try:
        args = shlex.split(command)
    except ValueError as e:
        result.SetError("cdac: %s" % e)
        return
    if not args or args[0] in ("help", "-h", "--help"):
        result.AppendMessage(USAGE)
        return
    fn = COMMANDS.get(args[0])
    if fn is None:
        result.SetError("cdac: unknown command %r\n%s" % (args[0], USAGE))
        return
    try:
        lines = fn(debugger, args[1:])
    except CdacError as e:
        result.SetError("cdac: %s" % e)
        return
    except Exception as e:  # noqa: BLE001 -- a message, never a traceback
        result.SetError("cdac: %s: %s" % (type(e).__name__, e))
        return
    if lines:
        result.AppendMessage("\n".join(lines))


def __lldb_init_module(debugger, _internal_dict):
    debugger.HandleCommand("command script add -f %s.cdac_command cdac" % __name__)
