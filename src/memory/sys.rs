//! The memory layer's `unsafe`: system calls for reading another process, and read-only
//! memory maps of files (the sampling profiler's is in `process::perf_sys`). Each block states why it is sound.

use std::fs::File;
use std::io;

use memmap2::Mmap;

/// Most iovecs the kernel takes in one `process_vm_readv` call (`IOV_MAX` on Linux).
pub(crate) const MAX_IOVECS: usize = 1024;

/// Copies from the address space of `pid` into the local buffers with one
/// `process_vm_readv` call: `requests` pairs a remote address with a local buffer of the
/// length to read. Returns the number of bytes copied, which is less than the total when
/// the kernel stopped at an unreadable address. At most [`MAX_IOVECS`] requests.
pub(crate) fn process_vm_read(pid: i32, requests: &mut [(u64, &mut [u8])]) -> io::Result<usize> {
    debug_assert!(requests.len() <= MAX_IOVECS);
    let mut local = Vec::with_capacity(requests.len());
    let mut remote = Vec::with_capacity(requests.len());
    for (addr, buf) in requests.iter_mut() {
        local.push(libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        });
        remote.push(libc::iovec {
            iov_base: *addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        });
    }
    // SAFETY: every local iovec points into a distinct `&mut [u8]` that lives for the whole
    // call and has exactly `iov_len` writable bytes. Remote iovecs are only addresses in the
    // other process; the kernel validates them and never touches our memory through them.
    let n = unsafe {
        libc::process_vm_readv(
            pid,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Opens `path` for reading without blocking (a FIFO named by a damaged dump must not hang
/// us) and maps it read-only, refusing anything but a regular file: devices such as
/// `/dev/zero` never end, and opening some has side effects.
pub(crate) fn map_regular_file(path: &std::path::Path) -> io::Result<Mmap> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    map_file(&file)
}

/// Maps a whole file read-only.
pub(crate) fn map_file(file: &File) -> io::Result<Mmap> {
    // SAFETY: the map is read-only and private to this process. Dumps and module files are
    // not expected to change while mapped; if another process truncates one anyway, reads
    // of the lost pages fault (SIGBUS) rather than corrupt memory, the documented limit of
    // every mmap-based reader.
    unsafe { Mmap::map(file) }
}

/// True while a process with this pid exists (it may be a zombie).
pub(crate) fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; kill only checks that the pid exists and whether we
    // may signal it. No memory is involved.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

// ---------------------------------------------------------------- ptrace, for thread snapshots
//
// The only place cdac stops a thread: `thread_snapshot` seizes one thread, interrupts it,
// copies its registers and stack, and detaches. These wrappers return raw errno values so
// that the caller can tell an exited thread (ESRCH) from missing privilege (EPERM).

/// `PTRACE_SEIZE` of one thread (no options): attaches without stopping it.
pub(crate) fn ptrace_seize(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_SEIZE takes a tid and an options word (0); addr and data are not
    // pointers into our memory. The kernel checks the tid and our privilege.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `PTRACE_INTERRUPT`: asks a seized thread to stop (it reports a `PTRACE_EVENT_STOP`).
pub(crate) fn ptrace_interrupt(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_INTERRUPT uses neither addr nor data; no memory of ours is involved.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_INTERRUPT,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `PTRACE_DETACH`, delivering `signal` (0 for none) as the thread resumes.
pub(crate) fn ptrace_detach(tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal to deliver in `data` as a plain integer; addr is
    // unused. No memory of ours is involved.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as usize as *mut libc::c_void,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `PTRACE_GETREGS` of a stopped tracee: its `user_regs_struct`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn ptrace_getregs(tid: i32) -> io::Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain integers, for which all-zero bytes are valid.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes exactly one user_regs_struct at `data`, which points at
    // our local `regs`, alive and writable for the whole call.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            (&mut regs as *mut libc::user_regs_struct).cast::<libc::c_void>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(regs)
    }
}

/// Waits up to `timeout` for a state change of the traced thread `tid` (`waitpid` with
/// `__WALL`): `Ok(Some(status))`, or `Ok(None)` when nothing was reported in time. Polls
/// (`WNOHANG`, sleeping 20 µs growing to 1 ms) rather than blocking: a thread of a process
/// that died under us may never report, and a caller must never hang.
pub(crate) fn wait_thread(tid: i32, timeout: std::time::Duration) -> io::Result<Option<i32>> {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = std::time::Duration::from_micros(20);
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes one c_int at the pointer, our local `status`.
        let rc = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if rc > 0 {
            return Ok(Some(status));
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        if std::time::Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
}
