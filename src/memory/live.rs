//! Reading a live process by pid: `/proc/PID/maps` for the layout, `process_vm_readv` for
//! the bytes, `/proc/PID/mem` as fallback. Strictly read-only: nothing here writes to the
//! target or stops it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use super::sys;
use super::{
    DataLayout, Endian, MappedFile, MemorySource, OpenError, ReadError, TargetKind, ThreadInfo,
};

/// How reads reach the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReadMethod {
    /// `process_vm_readv`, batched.
    VmReadv = 0,
    /// `pread` on `/proc/PID/mem`.
    ProcMem = 1,
}

/// A live process, read from outside.
pub struct LiveProcess {
    pid: i32,
    files: Vec<MappedFile>,
    layout: Option<DataLayout>,
    method: AtomicU8,
    mem_file: OnceLock<Result<File, i32>>,
}

impl std::fmt::Debug for LiveProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveProcess")
            .field("pid", &self.pid)
            .field("method", &self.method())
            .finish()
    }
}

impl LiveProcess {
    /// Opens process `pid`: reads its maps and checks that its memory can be read.
    pub fn open(pid: i32) -> Result<LiveProcess, OpenError> {
        let process = procfs::process::Process::new(pid).map_err(|e| proc_error(pid, e))?;
        let maps = process.maps().map_err(|e| proc_error(pid, e))?;
        let mut files: Vec<MappedFile> = maps
            .iter()
            .filter_map(|m| match &m.pathname {
                procfs::process::MMapPath::Path(path) => Some(MappedFile {
                    start: m.address.0,
                    end: m.address.1,
                    file_offset: m.offset,
                    path: path.clone(),
                }),
                _ => None,
            })
            .collect();
        files.sort_by_key(|f| f.start);
        let layout = executable_layout(pid);
        let live = LiveProcess {
            pid,
            files,
            layout,
            method: AtomicU8::new(ReadMethod::VmReadv as u8),
            mem_file: OnceLock::new(),
        };
        live.probe_access(&maps)?;
        Ok(live)
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How reads currently reach the process.
    pub fn method(&self) -> ReadMethod {
        if self.method.load(Ordering::Relaxed) == ReadMethod::ProcMem as u8 {
            ReadMethod::ProcMem
        } else {
            ReadMethod::VmReadv
        }
    }

    /// Forces a read method (benchmarks and tests of the fallback).
    pub fn set_method(&self, method: ReadMethod) {
        self.method.store(method as u8, Ordering::Relaxed);
    }

    /// Reads one readable byte so that a permission problem shows at open time, with its
    /// diagnosis, rather than on the first real read.
    fn probe_access(&self, maps: &procfs::process::MemoryMaps) -> Result<(), OpenError> {
        let Some(first) = maps.iter().find(|m| {
            m.perms.contains(procfs::process::MMPermissions::READ)
                && !matches!(m.pathname, procfs::process::MMapPath::Vsyscall)
        }) else {
            return Ok(());
        };
        let mut byte = [0u8; 1];
        match self.read_exact(first.address.0, &mut byte) {
            Ok(()) => Ok(()),
            Err(ReadError::PermissionDenied { hint, .. }) => Err(OpenError::PermissionDenied {
                pid: self.pid,
                hint,
            }),
            Err(ReadError::ProcessExited { .. }) => Err(OpenError::NoSuchProcess { pid: self.pid }),
            // A region that vanished between reading maps and reading it is not fatal.
            Err(_) => Ok(()),
        }
    }

    fn read_vm(&self, requests: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        let mut from = 0;
        while from < requests.len() {
            let to = (from + sys::MAX_IOVECS).min(requests.len());
            let batch = &mut requests[from..to];
            let total: usize = batch.iter().map(|(_, b)| b.len()).sum();
            let first = batch.first().map_or(0, |(a, _)| *a);
            match sys::process_vm_read(self.pid, batch) {
                Ok(n) if n == total => {}
                Ok(n) => return Err(self.short_read(batch, n)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::ENOSYS) => {
                        // Some sandboxes forbid process_vm_readv but allow /proc/PID/mem:
                        // switch for good, and finish this request there.
                        tracing::debug!(pid = self.pid, error = %e, "process_vm_readv refused, using /proc/PID/mem");
                        self.set_method(ReadMethod::ProcMem);
                        return self.read_proc_mem(&mut requests[from..]);
                    }
                    Some(libc::ESRCH) => {
                        return Err(ReadError::ProcessExited {
                            pid: self.pid,
                            addr: first,
                        })
                    }
                    Some(libc::EFAULT) => return Err(self.short_read(batch, 0)),
                    _ => {
                        return Err(ReadError::Io {
                            addr: first,
                            source: e,
                        })
                    }
                },
            }
            from = to;
        }
        Ok(())
    }

    /// Turns a read that stopped after `done` bytes into the error for the first byte
    /// that was not read.
    fn short_read(&self, batch: &[(u64, &mut [u8])], done: usize) -> ReadError {
        let mut left = done;
        for (addr, buf) in batch {
            if left < buf.len() {
                let addr = addr + left as u64;
                return self.missing(addr, buf.len() - left);
            }
            left -= buf.len();
        }
        let addr = batch.last().map_or(0, |(a, _)| *a);
        self.missing(addr, 0)
    }

    fn missing(&self, addr: u64, len: usize) -> ReadError {
        if process_gone(self.pid) {
            ReadError::ProcessExited {
                pid: self.pid,
                addr,
            }
        } else {
            ReadError::Unmapped { addr, len }
        }
    }

    fn mem_file(&self, addr: u64) -> Result<&File, ReadError> {
        let opened = self.mem_file.get_or_init(|| {
            File::open(format!("/proc/{}/mem", self.pid)).map_err(|e| e.raw_os_error().unwrap_or(0))
        });
        match opened {
            Ok(f) => Ok(f),
            Err(code) if *code == libc::ENOENT || *code == libc::ESRCH => {
                Err(ReadError::ProcessExited {
                    pid: self.pid,
                    addr,
                })
            }
            Err(code) if *code == libc::EACCES || *code == libc::EPERM => {
                Err(ReadError::PermissionDenied {
                    pid: self.pid,
                    addr,
                    hint: permission_hint(self.pid),
                })
            }
            Err(code) => Err(ReadError::Io {
                addr,
                source: io::Error::from_raw_os_error(*code),
            }),
        }
    }

    fn read_proc_mem(&self, requests: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        for (addr, buf) in requests.iter_mut() {
            let file = self.mem_file(*addr)?;
            let mut done = 0;
            while done < buf.len() {
                let at = *addr + done as u64;
                match file.read_at(&mut buf[done..], at) {
                    Ok(0) => return Err(self.missing(at, buf.len() - done)),
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(match e.raw_os_error() {
                            Some(libc::EIO) | Some(libc::EFAULT) => {
                                self.missing(at, buf.len() - done)
                            }
                            Some(libc::ESRCH) => ReadError::ProcessExited {
                                pid: self.pid,
                                addr: at,
                            },
                            Some(libc::EPERM) | Some(libc::EACCES) => ReadError::PermissionDenied {
                                pid: self.pid,
                                addr: at,
                                hint: permission_hint(self.pid),
                            },
                            _ => ReadError::Io {
                                addr: at,
                                source: e,
                            },
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

impl MemorySource for LiveProcess {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.read_many(&mut [(addr, buf)])
    }

    fn read_many(&self, requests: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        for (addr, buf) in requests.iter() {
            super::check_range(*addr, buf.len())?;
        }
        match self.method() {
            ReadMethod::VmReadv => self.read_vm(requests),
            ReadMethod::ProcMem => self.read_proc_mem(requests),
        }
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &self.files
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        let entries = std::fs::read_dir(format!("/proc/{}/task", self.pid)).map_err(|e| {
            if process_gone(self.pid) {
                ReadError::ProcessExited {
                    pid: self.pid,
                    addr: 0,
                }
            } else {
                ReadError::Io { addr: 0, source: e }
            }
        })?;
        let mut threads: Vec<ThreadInfo> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .map(|tid| ThreadInfo {
                tid,
                ip: None,
                sp: None,
                context: None,
            })
            .collect();
        threads.sort_by_key(|t| t.tid);
        Ok(threads)
    }

    fn file_root(&self) -> Option<std::path::PathBuf> {
        let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
        let theirs = ns(&self.pid.to_string())?;
        (Some(theirs) != ns("self")).then(|| format!("/proc/{}/root", self.pid).into())
    }

    fn namespace_thread_ids(&self) -> std::collections::HashMap<u64, i32> {
        let mut ids = std::collections::HashMap::new();
        let Ok(entries) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return ids;
        };
        for tid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            let inner = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid))
                .ok()
                .and_then(|s| innermost_namespace_id(&s));
            if let Some(inner) = inner.filter(|&i| i != tid as u64) {
                ids.insert(inner, tid);
            }
        }
        ids
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Live { pid: self.pid }
    }

    fn native_layout(&self) -> Option<DataLayout> {
        self.layout
    }
}

/// The id a thread has in the innermost PID namespace it belongs to: the last of the
/// `NSpid` line of its `/proc/PID/task/TID/status` (the first is the reader's own).
fn innermost_namespace_id(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The data layout of the process's executable, from its ELF identification bytes.
fn executable_layout(pid: i32) -> Option<DataLayout> {
    let mut ident = [0u8; 6];
    let file = File::open(format!("/proc/{pid}/exe")).ok()?;
    file.read_exact_at(&mut ident, 0).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let pointer_size = match ident[4] {
        1 => 4,
        2 => 8,
        _ => return None,
    };
    let endian = match ident[5] {
        1 => Endian::Little,
        2 => Endian::Big,
        _ => return None,
    };
    Some(DataLayout {
        pointer_size,
        endian,
    })
}

/// True when the process no longer exists or is a zombie (its memory is gone).
pub fn process_gone(pid: i32) -> bool {
    if !sys::process_exists(pid) {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the command name, which is in parentheses and may
        // itself contain spaces or parentheses.
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .is_none_or(|state| state == 'Z' || state == 'X'),
        Err(_) => true,
    }
}

fn proc_error(pid: i32, e: procfs::ProcError) -> OpenError {
    match e {
        procfs::ProcError::NotFound(_) => OpenError::NoSuchProcess { pid },
        procfs::ProcError::PermissionDenied(_) => OpenError::PermissionDenied {
            pid,
            hint: permission_hint(pid),
        },
        other => OpenError::Proc {
            pid,
            detail: other.to_string(),
        },
    }
}

/// Explains which privilege is missing to read process `pid`.
pub fn permission_hint(pid: i32) -> String {
    let mut reasons = Vec::new();
    let our_uid = sys::effective_uid();
    let target_uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
        });
    let has_cap = has_cap_sys_ptrace();
    if let Some(uid) = target_uid {
        if uid != our_uid && !has_cap {
            reasons.push(format!(
                "the process runs as uid {uid} and we run as uid {our_uid}: run cdac as that user or as root"
            ));
        }
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(1) if !has_cap => reasons.push(
            "kernel.yama.ptrace_scope is 1, which lets a process read only its own descendants: \
             run as root, grant CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep), or set the sysctl to 0"
                .to_string(),
        ),
        Some(2) if !has_cap => reasons.push(
            "kernel.yama.ptrace_scope is 2 (admin only): CAP_SYS_PTRACE is required".to_string(),
        ),
        Some(3) => reasons.push(
            "kernel.yama.ptrace_scope is 3: no process may read another's memory".to_string(),
        ),
        _ => {}
    }
    if reasons.is_empty() {
        if has_cap {
            reasons.push(
                "the kernel refused ptrace-mode access although CAP_SYS_PTRACE is present \
                 (a security module, a container's seccomp profile, or a non-dumpable target)"
                    .to_string(),
            );
        } else {
            reasons.push(
                "CAP_SYS_PTRACE is missing and the kernel refused ptrace-mode access \
                 (the target may be non-dumpable, or in another user namespace)"
                    .to_string(),
            );
        }
    }
    reasons.join("; ")
}

fn has_cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// The executable path of a process, for messages.
pub fn executable_path(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

#[cfg(test)]
mod namespace_tests {
    use super::innermost_namespace_id;

    #[test]
    fn the_innermost_namespace_id_is_the_last_of_nspid() {
        let host = "Name:\tdotnet\nTgid:\t4242\nNSpid:\t4250\n";
        assert_eq!(innermost_namespace_id(host), Some(4250));
        let nested = "Tgid:\t4242\nPid:\t4250\nNSpid:\t4250\t17\t3\nNSpgid:\t1\n";
        assert_eq!(innermost_namespace_id(nested), Some(3));
        assert_eq!(innermost_namespace_id("Name:\tx\n"), None);
    }
}
