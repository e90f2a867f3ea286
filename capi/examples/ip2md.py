#!/usr/bin/env python3
"""ip2md through libcdac with ctypes: what a gdb or lldb Python extension does.

    python3 ip2md.py /path/to/libcdac.so CORE ADDR...

Prints, per address, the method's name, MethodDesc and start, or "not managed code".
"""
import ctypes
import sys

CDAC_OK, CDAC_NOT_FOUND, CDAC_E_BUFFER_TOO_SMALL = 0, 1, -5


class MethodInfo(ctypes.Structure):
    _fields_ = [
        ("method_desc", ctypes.c_uint64),
        ("start", ctypes.c_uint64),
        ("hot_size", ctypes.c_uint64),
        ("relative_offset", ctypes.c_uint64),
        ("kind", ctypes.c_uint32),
        ("is_funclet", ctypes.c_uint32),
    ]


def load(path):
    lib = ctypes.CDLL(path)
    handle = ctypes.c_void_p
    lib.cdac_open_core.argtypes = [ctypes.c_char_p, ctypes.POINTER(handle)]
    lib.cdac_open_core.restype = ctypes.c_int32
    lib.cdac_close.argtypes = [handle]
    lib.cdac_close.restype = ctypes.c_int32
    lib.cdac_ip2md.argtypes = [handle, ctypes.c_uint64, ctypes.POINTER(MethodInfo)]
    lib.cdac_ip2md.restype = ctypes.c_int32
    lib.cdac_method_name.argtypes = [
        handle, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.cdac_method_name.restype = ctypes.c_int32
    lib.cdac_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.cdac_last_error.restype = ctypes.c_size_t
    return lib


def last_error(lib):
    buf = ctypes.create_string_buffer(1024)
    lib.cdac_last_error(buf, len(buf))
    return buf.value.decode("utf-8", "replace")


def method_name(lib, h, ip):
    needed = ctypes.c_size_t(0)
    status = lib.cdac_method_name(h, ip, None, 0, ctypes.byref(needed))
    if status != CDAC_E_BUFFER_TOO_SMALL:
        return None
    buf = ctypes.create_string_buffer(needed.value)
    if lib.cdac_method_name(h, ip, buf, len(buf), ctypes.byref(needed)) != CDAC_OK:
        return None
    return buf.value.decode("utf-8", "replace")


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    lib = load(argv[1])
    h = ctypes.c_void_p()
    status = lib.cdac_open_core(argv[2].encode(), ctypes.byref(h))
    if status != CDAC_OK:
        print(f"{argv[2]}: error {status}: {last_error(lib)}", file=sys.stderr)
        return 1
    try:
        for text in argv[3:]:
            ip = int(text, 16)
            info = MethodInfo()
            status = lib.cdac_ip2md(h, ip, ctypes.byref(info))
            if status == CDAC_NOT_FOUND:
                print(f"{ip:#x} not managed code")
            elif status != CDAC_OK:
                print(f"{ip:#x} error {status}: {last_error(lib)}")
            else:
                name = method_name(lib, h, ip)
                print(f"{ip:#x} md={info.method_desc:#x} start={info.start:#x} {name}")
    finally:
        lib.cdac_close(h)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
