//! Reading an ELF core dump (`createdump`, `gcore`, the kernel's own cores).
//!
//! The file is memory-mapped, never read whole. `PT_LOAD` segments give the captured
//! memory; the `NT_FILE` note says which file backs which range, so that ranges the core
//! left out (module code in small dumps) are read from that file when it is present on
//! this machine; `NT_PRSTATUS` notes give the threads.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use memmap2::Mmap;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

use super::sys;
use super::{core_images, elf_image};
use super::{
    CrashSignal, DataLayout, Endian, MappedFile, MemorySource, OpenError, ReadError, TargetKind,
    ThreadInfo,
};
use crate::regs::{Arm64Context, Registers, X64Context};

/// Most `NT_FILE` entries accepted; a damaged count cannot make us allocate without bound.
const MAX_FILE_ENTRIES: u64 = 1 << 20;

/// One `PT_LOAD` segment of the core.
#[derive(Debug, Clone, Copy)]
struct Segment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
}

/// A file that backs part of the address space, opened on demand.
enum Backing {
    Present {
        map: Mmap,
        /// File-offset ranges of the file's own writable segments: the disk holds only
        /// their initial contents, not what the process had.
        writable: Vec<(u64, u64)>,
    },
    Missing(String),
}

/// An ELF core dump.
pub struct CoreDump {
    path: PathBuf,
    map: Mmap,
    /// The same file, for large reads: copying them with `pread` instead of from the map
    /// keeps a heap walk over gigabytes from making every page of the dump resident.
    file: Option<std::fs::File>,
    layout: DataLayout,
    machine: u16,
    segments: Vec<Segment>,
    files: Vec<MappedFile>,
    threads: Vec<ThreadInfo>,
    crash: Option<CrashSignal>,
    backing: Mutex<HashMap<PathBuf, Arc<Backing>>>,
    /// Where the dumped process's files are looked for first (a container's root).
    sysroots: Vec<PathBuf>,
    warnings: Vec<String>,
    /// The segment the last read hit: reads come in runs over one structure, and a full
    /// dump has thousands of segments to search otherwise.
    last_segment: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for CoreDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreDump")
            .field("path", &self.path)
            .field("segments", &self.segments.len())
            .field("files", &self.files.len())
            .finish()
    }
}

impl CoreDump {
    /// Opens and indexes a core dump.
    pub fn open(path: impl AsRef<Path>) -> Result<CoreDump, OpenError> {
        Self::open_with_sysroots(path, &[])
    }

    /// Opens and indexes a core dump; a core without `NT_FILE` takes the files of the
    /// libraries it lacks from under `sysroots` first
    /// (`super::core_images`).
    pub fn open_with_sysroots(
        path: impl AsRef<Path>,
        sysroots: &[PathBuf],
    ) -> Result<CoreDump, OpenError> {
        let path = path.as_ref().to_path_buf();
        let map = sys::map_regular_file(&path).map_err(|source| OpenError::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |detail: String| OpenError::BadCore {
            path: path.clone(),
            detail,
        };
        let ident = map
            .get(..6)
            .ok_or_else(|| bad("file is shorter than an ELF header".into()))?;
        if &ident[..4] != b"\x7fELF" {
            return Err(bad("no ELF magic".into()));
        }
        let parsed = match ident[4] {
            c if c == elf::ELFCLASS64.0 => parse::<elf::FileHeader64<Endianness>>(&map, sysroots),
            c if c == elf::ELFCLASS32.0 => parse::<elf::FileHeader32<Endianness>>(&map, sysroots),
            other => Err(format!("unknown ELF class {other}")),
        }
        .map_err(bad)?;
        let mut warnings = parsed.warnings;
        let missing: Vec<String> = missing_backing_files(&parsed.files, &parsed.segments, sysroots)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            warnings.push(format!(
                "{} file(s) that back memory the dump left out are not on this machine, so that memory cannot be read: {}",
                missing.len(),
                missing.join(", ")
            ));
        }
        for w in &warnings {
            tracing::warn!(core = %path.display(), "{w}");
        }
        let file = std::fs::File::open(&path).ok();
        Ok(CoreDump {
            path,
            map,
            file,
            layout: parsed.layout,
            machine: parsed.machine,
            segments: parsed.segments,
            last_segment: std::sync::atomic::AtomicUsize::new(0),
            files: parsed.files,
            threads: parsed.threads,
            crash: parsed.crash,
            backing: Mutex::new(HashMap::new()),
            sysroots: sysroots.to_vec(),
            warnings,
        })
    }

    /// Path of the dump.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ELF machine of the dumped process (`EM_X86_64`, `EM_AARCH64`, …).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// Problems found while opening (truncation, missing backing files).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Number of `PT_LOAD` segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Total bytes of memory the dump holds.
    pub fn captured_bytes(&self) -> u64 {
        self.segments
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.filesz))
    }

    fn segment_at(&self, addr: u64) -> Option<&Segment> {
        use std::sync::atomic::Ordering::Relaxed;
        let hint = self.last_segment.load(Relaxed);
        if let Some(seg) = self.segments.get(hint) {
            if addr >= seg.vaddr && addr - seg.vaddr < seg.memsz {
                return Some(seg);
            }
        }
        let i = self.segments.partition_point(|s| s.vaddr <= addr);
        let at = i.checked_sub(1)?;
        let seg = self.segments.get(at)?;
        (addr - seg.vaddr < seg.memsz).then(|| {
            self.last_segment.store(at, Relaxed);
            seg
        })
    }

    /// Bytes from `addr` to the next segment start (how far an unmapped gap reaches).
    fn gap_len(&self, addr: u64) -> u64 {
        let i = self.segments.partition_point(|s| s.vaddr <= addr);
        self.segments.get(i).map_or(u64::MAX, |s| s.vaddr - addr)
    }

    fn file_at(&self, addr: u64) -> Option<&MappedFile> {
        let i = self.files.partition_point(|f| f.start <= addr);
        let f = self.files.get(i.checked_sub(1)?)?;
        (addr < f.end).then_some(f)
    }

    fn backing(&self, path: &Path) -> Arc<Backing> {
        let mut cache = self.backing.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                let here = on_this_machine(path, &self.sysroots);
                Arc::new(self.check_backing(path, open_backing(&here)))
            })
            .clone()
    }

    /// Refuses a file on disk that differs from the one the process had mapped: where the
    /// dump holds the file's first page (ELF header, program headers, build-id note), the
    /// file must start with the same bytes. Another build at the same path would otherwise
    /// be mixed silently into the dump's memory.
    fn check_backing(&self, path: &Path, backing: Backing) -> Backing {
        let Backing::Present { map, .. } = &backing else {
            return backing;
        };
        let first_page = self
            .files
            .iter()
            .find(|f| f.path == path && f.file_offset == 0)
            .map(|f| f.start);
        let Some(start) = first_page else {
            return backing;
        };
        let mut captured = [0u8; 4096];
        let n = self.read_captured(start, &mut captured);
        if n > 0 && map.get(..n) != Some(&captured[..n]) {
            tracing::warn!(file = %path.display(), "the file on disk differs from the one in the dump; not using it");
            return Backing::Missing(
                "differs from the file the dumped process had mapped (another build?)".into(),
            );
        }
        backing
    }

    /// Copies the bytes the dump itself holds from `addr` on (never from files on disk);
    /// returns how many, stopping at the first byte not captured.
    fn read_captured(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let Some(at) = addr.checked_add(done as u64) else {
                break;
            };
            let Some(seg) = self.segment_at(at) else {
                break;
            };
            let within = at - seg.vaddr;
            if within >= seg.filesz {
                break;
            }
            let n = ((buf.len() - done) as u64).min(seg.filesz - within) as usize;
            let bytes = seg
                .offset
                .checked_add(within)
                .and_then(|from| usize::try_from(from).ok())
                .and_then(|f| self.map.get(f..f.checked_add(n)?));
            let Some(bytes) = bytes else {
                break;
            };
            buf[done..done + n].copy_from_slice(bytes);
            done += n;
        }
        done
    }

    /// Reads up to `want` bytes at `addr` from the file that backs it. Returns how many
    /// bytes were copied, or why none can be.
    fn read_backing(
        &self,
        addr: u64,
        out: &mut [u8],
        why_absent: &dyn Fn() -> ReadError,
    ) -> Result<usize, ReadError> {
        let Some(mapping) = self.file_at(addr) else {
            return Err(why_absent());
        };
        let n = (out.len() as u64).min(mapping.end - addr) as usize;
        let offset = mapping.file_offset.saturating_add(addr - mapping.start);
        let backing = self.backing(&mapping.path);
        let not_captured = |reason: String| ReadError::NotCaptured {
            addr,
            len: out.len(),
            reason,
        };
        match &*backing {
            Backing::Missing(reason) => Err(not_captured(format!(
                "the dump left it out and {} (which backs it) {reason}",
                mapping.path.display()
            ))),
            Backing::Present { map, writable } => {
                let end = offset.saturating_add(n as u64);
                if writable.iter().any(|&(s, e)| offset < e && end > s) {
                    return Err(not_captured(format!(
                        "the dump left out writable data of {}; the file on disk holds only its initial contents",
                        mapping.path.display()
                    )));
                }
                let bytes = usize::try_from(offset)
                    .ok()
                    .and_then(|o| map.get(o..o.checked_add(n)?))
                    .ok_or_else(|| {
                        not_captured(format!(
                            "the dump left it out and {} is shorter than the mapping (a different version of the file?)",
                            mapping.path.display()
                        ))
                    })?;
                out[..n].copy_from_slice(bytes);
                Ok(n)
            }
        }
    }
}

/// Reads at least this long are copied from the file with `pread`, not from the map.
const PREAD_MIN_BYTES: usize = 64 * 1024;

impl MemorySource for CoreDump {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        super::check_range(addr, buf.len())?;
        let len = buf.len();
        let mut done = 0usize;
        while done < len {
            let at = addr + done as u64;
            let out = &mut buf[done..];
            let n = match self.segment_at(at) {
                Some(seg) if at - seg.vaddr < seg.filesz => {
                    let within = at - seg.vaddr;
                    let n = (out.len() as u64).min(seg.filesz - within) as usize;
                    if n >= PREAD_MIN_BYTES {
                        if let Some(file) = &self.file {
                            let read = seg.offset.checked_add(within).is_some_and(|from| {
                                file.read_exact_at(&mut out[..n], from).is_ok()
                            });
                            if read {
                                done += n;
                                continue;
                            }
                        }
                    }
                    let bytes = seg
                        .offset
                        .checked_add(within)
                        .and_then(|from| usize::try_from(from).ok())
                        .and_then(|f| self.map.get(f..f.checked_add(n)?));
                    match bytes {
                        Some(bytes) => {
                            out[..n].copy_from_slice(bytes);
                            n
                        }
                        None => {
                            // The segment's bytes lie past the end of a truncated file.
                            let reason = "the core file is truncated before this segment's data";
                            self.read_backing(at, &mut out[..n], &|| ReadError::NotCaptured {
                                addr: at,
                                len: len - done,
                                reason: reason.into(),
                            })?
                        }
                    }
                }
                Some(seg) => {
                    let within = at - seg.vaddr;
                    let n = (out.len() as u64).min(seg.memsz - within) as usize;
                    self.read_backing(at, &mut out[..n], &|| ReadError::NotCaptured {
                        addr: at,
                        len: len - done,
                        reason: "the dump excluded this memory and no file backs it".into(),
                    })?
                }
                None => {
                    // Partial dumps (createdump's normal and triage kinds) leave regions out
                    // entirely, so "in no segment" cannot tell unmapped from left out.
                    let n = (out.len() as u64).min(self.gap_len(at)) as usize;
                    self.read_backing(at, &mut out[..n], &|| ReadError::NotCaptured {
                        addr: at,
                        len: len - done,
                        reason: "no part of the dump holds this address (left out of the dump, or not mapped in the process)".into(),
                    })?
                }
            };
            if n == 0 {
                return Err(ReadError::Unmapped {
                    addr: at,
                    len: len - done,
                });
            }
            done += n;
        }
        Ok(())
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &self.files
    }

    fn file_root(&self) -> Option<PathBuf> {
        self.sysroots.first().cloned()
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        Ok(self.threads.clone())
    }

    fn kind(&self) -> TargetKind {
        TargetKind::CoreDump {
            path: self.path.clone(),
        }
    }

    fn native_layout(&self) -> Option<DataLayout> {
        Some(self.layout)
    }

    fn crash_signal(&self) -> Option<CrashSignal> {
        self.crash.clone()
    }
}

/// What parsing the headers yields.
struct Parsed {
    layout: DataLayout,
    machine: u16,
    segments: Vec<Segment>,
    files: Vec<MappedFile>,
    threads: Vec<ThreadInfo>,
    crash: Option<CrashSignal>,
    warnings: Vec<String>,
}

fn parse<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    sysroots: &[PathBuf],
) -> Result<Parsed, String> {
    let header_size = std::mem::size_of::<Elf>();
    if data.len() < header_size {
        return Err(format!(
            "the file is {} bytes, shorter than its {header_size}-byte ELF header: it is truncated",
            data.len()
        ));
    }
    let header = Elf::parse(data).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    check_program_header_table(header, endian, data.len() as u64)?;
    if header.e_type(endian) != elf::ET_CORE {
        return Err(format!(
            "ELF type is {:#x}, not a core file (ET_CORE)",
            header.e_type(endian).0
        ));
    }
    let machine = header.e_machine(endian).0;
    let layout = DataLayout {
        pointer_size: if header.is_type_64() { 8 } else { 4 },
        endian: match endian {
            Endianness::Little => Endian::Little,
            Endianness::Big => Endian::Big,
        },
    };
    let headers = header
        .program_headers(endian, data)
        .map_err(|e| format!("program headers: {e}"))?;
    let mut warnings = Vec::new();
    let mut segments = Vec::new();
    let mut files = Vec::new();
    let mut threads = Vec::new();
    // Every thread's pr_cursig and si_code, in note order, and the first NT_SIGINFO.
    let mut thread_signals: Vec<ThreadSignal> = Vec::new();
    let mut siginfo = None;
    let mut saw_nt_file = false;
    let mut auxv: Option<&[u8]> = None;
    for ph in headers {
        let p_type = ph.p_type(endian);
        if p_type == elf::PT_LOAD {
            let seg = Segment {
                vaddr: ph.p_vaddr(endian).into(),
                memsz: ph.p_memsz(endian).into(),
                offset: ph.p_offset(endian).into(),
                filesz: ph.p_filesz(endian).into(),
            };
            if seg.memsz > 0 && seg.vaddr.checked_add(seg.memsz).is_some() {
                segments.push(Segment {
                    filesz: seg.filesz.min(seg.memsz),
                    ..seg
                });
            }
        } else if p_type == elf::PT_NOTE {
            let notes = match ph.notes(endian, data) {
                Ok(Some(notes)) => notes,
                Ok(None) => continue,
                Err(e) => {
                    warnings.push(format!(
                        "notes unreadable ({e}): no file mappings or threads from them"
                    ));
                    continue;
                }
            };
            let mut notes = notes;
            loop {
                let note = match notes.next() {
                    Ok(Some(note)) => note,
                    Ok(None) => break,
                    Err(e) => {
                        warnings.push(format!("note list damaged ({e}); later notes ignored"));
                        break;
                    }
                };
                if note.name() != b"CORE" {
                    continue;
                }
                let n_type = note.n_type(endian);
                if n_type == elf::NT_AUXV && auxv.is_none() {
                    auxv = Some(note.desc());
                } else if n_type == elf::NT_FILE {
                    saw_nt_file = true;
                    match parse_nt_file(note.desc(), layout) {
                        Ok(mut f) => files.append(&mut f),
                        Err(e) => warnings.push(format!("NT_FILE note damaged: {e}")),
                    }
                } else if n_type == elf::NT_PRSTATUS {
                    if let Some(t) = parse_prstatus(note.desc(), layout, machine) {
                        if let Some((cursig, code)) = prstatus_signal(note.desc(), layout) {
                            thread_signals.push(ThreadSignal {
                                tid: t.tid,
                                cursig,
                                code,
                            });
                        }
                        threads.push(t);
                    } else {
                        warnings.push("NT_PRSTATUS note too short".to_string());
                    }
                } else if n_type == elf::NT_SIGINFO && siginfo.is_none() {
                    siginfo = parse_siginfo(note.desc(), layout);
                    if siginfo.is_none() {
                        warnings.push("NT_SIGINFO note too short".to_string());
                    }
                }
            }
        }
    }
    segments.sort_by_key(|s| s.vaddr);
    if !saw_nt_file {
        files = images_without_nt_file(data, &segments, layout, machine, auxv, sysroots);
        if !files.is_empty() {
            warnings.push(format!(
                "the core has no NT_FILE note (qemu-user writes none): its {} ELF image(s) \
                 were found by their headers in its memory",
                elf_image::modules(&files).len()
            ));
        }
    }
    files.sort_by_key(|f| f.start);
    let crash = crash_signal(&thread_signals, siginfo);
    let file_len = data.len() as u64;
    let needed = headers
        .iter()
        .map(|ph| Into::<u64>::into(ph.p_offset(endian)).saturating_add(ph.p_filesz(endian).into()))
        .max()
        .unwrap_or(0);
    if needed > file_len {
        // Put it first: it explains the other warnings (unreadable notes, missing memory).
        warnings.insert(
            0,
            format!("the core file is truncated: it is {file_len} bytes but its headers describe {needed}"),
        );
    }
    Ok(Parsed {
        layout,
        machine,
        segments,
        files,
        threads,
        crash,
        warnings,
    })
}

/// A program header table that does not fit in the file is named as such (a dump cut in
/// its headers), rather than with the ELF reader's generic complaint. `PN_XNUM` counts (the
/// real count is in a section header) are left to the ELF reader.
fn check_program_header_table<Elf: FileHeader<Endian = Endianness>>(
    header: &Elf,
    endian: Endianness,
    file_len: u64,
) -> Result<(), String> {
    let count = header.e_phnum(endian);
    if count == elf::PN_XNUM {
        return Ok(());
    }
    let offset: u64 = header.e_phoff(endian).into();
    let entry = u64::from(header.e_phentsize(endian));
    let end = u64::from(count)
        .checked_mul(entry)
        .and_then(|len| offset.checked_add(len));
    if end.is_none_or(|end| end > file_len) {
        return Err(format!(
            "program headers: {count} entries of {entry} bytes at offset {offset} end past the \
             end of the file ({file_len} bytes): it is truncated, or its ELF header is damaged"
        ));
    }
    Ok(())
}

/// The mappings of the ELF images in the core's memory, for a core without `NT_FILE`.
fn images_without_nt_file(
    data: &[u8],
    segments: &[Segment],
    layout: DataLayout,
    machine: u16,
    auxv: Option<&[u8]>,
    sysroots: &[PathBuf],
) -> Vec<MappedFile> {
    let read = |addr: u64, len: usize| -> Option<&[u8]> {
        let i = segments
            .partition_point(|s| s.vaddr <= addr)
            .checked_sub(1)?;
        let s = &segments[i];
        let within = addr - s.vaddr;
        let end = within.checked_add(len as u64)?;
        if end > s.filesz {
            return None;
        }
        let from = usize::try_from(s.offset.checked_add(within)?).ok()?;
        data.get(from..from.checked_add(len)?)
    };
    let starts: Vec<(u64, u64)> = segments.iter().map(|s| (s.vaddr, s.filesz)).collect();
    core_images::images_in_memory(&starts, &read, layout, machine, auxv, sysroots)
}

/// Parses `NT_FILE`: count and page size, `count` triples (start, end, page offset), then
/// `count` NUL-terminated paths.
fn parse_nt_file(desc: &[u8], layout: DataLayout) -> Result<Vec<MappedFile>, String> {
    let word = usize::from(layout.pointer_size);
    let read_word = |i: usize| -> Result<u64, String> {
        desc.get(i * word..(i + 1) * word)
            .map(|b| super::decode_unsigned(b, layout.endian))
            .ok_or_else(|| "shorter than its entry count says".to_string())
    };
    let count = read_word(0)?;
    let page_size = read_word(1)?;
    if count > MAX_FILE_ENTRIES || count as usize * 3 * word > desc.len() {
        return Err(format!("entry count {count} does not fit in the note"));
    }
    let count = count as usize;
    let names_start = (2 + 3 * count) * word;
    // Each path is NUL-terminated; a path without its terminator is a truncated note.
    let mut names = desc
        .get(names_start..)
        .ok_or_else(|| "no room for the paths after the entries".to_string())?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let start = read_word(2 + 3 * i)?;
        let end = read_word(3 + 3 * i)?;
        let page = read_word(4 + 3 * i)?;
        let nul = names
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| "fewer paths than entries".to_string())?;
        let name = &names[..nul];
        names = &names[nul + 1..];
        if end <= start {
            continue;
        }
        out.push(MappedFile {
            start,
            end,
            file_offset: page.saturating_mul(page_size),
            path: PathBuf::from(String::from_utf8_lossy(name).into_owned()),
        });
    }
    Ok(out)
}

/// Thread id and registers from `NT_PRSTATUS` (`struct elf_prstatus`).
fn parse_prstatus(desc: &[u8], layout: DataLayout, machine: u16) -> Option<ThreadInfo> {
    let word = |offset: usize, size: usize| {
        desc.get(offset..offset + size)
            .map(|b| super::decode_unsigned(b, layout.endian))
    };
    // pr_pid follows siginfo (12 bytes), cursig and padding (4) and two sigset words.
    let (pid_offset, regs_offset) = if layout.pointer_size == 8 {
        (32, 112)
    } else {
        (24, 72)
    };
    let tid = word(pid_offset, 4)? as u32 as i32;
    let reg = |index: usize| {
        word(
            regs_offset + index * usize::from(layout.pointer_size),
            usize::from(layout.pointer_size),
        )
    };
    // Register numbering of each architecture's user register set.
    let (ip, sp) = match machine {
        m if m == elf::EM_X86_64.0 => (reg(16), reg(19)),
        m if m == elf::EM_AARCH64.0 => (reg(32), reg(31)),
        m if m == elf::EM_386.0 => (reg(12), reg(15)),
        _ => (None, None),
    };
    let context = match machine {
        _ if layout.pointer_size != 8 => None,
        m if m == elf::EM_X86_64.0 => x64_context(&reg).map(Registers::X64),
        m if m == elf::EM_AARCH64.0 => Arm64Context::from_user_pt_regs(&reg).map(Registers::Arm64),
        _ => None,
    };
    Some(ThreadInfo {
        tid,
        ip,
        sp,
        context,
    })
}

/// `pr_cursig` and `pr_info.si_code` of an `NT_PRSTATUS` (`struct elf_prstatus` starts with
/// `struct elf_siginfo { si_signo, si_code, si_errno }`, then `short pr_cursig`).
fn prstatus_signal(desc: &[u8], layout: DataLayout) -> Option<(i32, i32)> {
    let code = desc
        .get(4..8)
        .map(|b| super::decode_unsigned(b, layout.endian) as u32 as i32)?;
    let cursig = desc
        .get(12..14)
        .map(|b| super::decode_unsigned(b, layout.endian) as u16 as i16)?;
    Some((i32::from(cursig), code))
}

/// What an `NT_SIGINFO` note (a `siginfo_t`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SigInfo {
    signo: i32,
    errno: i32,
    code: i32,
    /// The first pointer-sized word of the union (`si_addr` of a fault).
    addr: u64,
    /// The first int of the union (`si_pid` of a sent signal).
    pid: i32,
}

/// Parses a `siginfo_t`: `si_signo`, `si_errno`, `si_code` (ints), then the union, aligned
/// to the pointer size.
fn parse_siginfo(desc: &[u8], layout: DataLayout) -> Option<SigInfo> {
    let int = |offset: usize| {
        desc.get(offset..offset + 4)
            .map(|b| super::decode_unsigned(b, layout.endian) as u32 as i32)
    };
    let union_at = if layout.pointer_size == 8 { 16 } else { 12 };
    let ptr = usize::from(layout.pointer_size);
    Some(SigInfo {
        signo: int(0)?,
        errno: int(4)?,
        code: int(8)?,
        addr: desc
            .get(union_at..union_at + ptr)
            .map(|b| super::decode_unsigned(b, layout.endian))?,
        pid: int(union_at)?,
    })
}

/// One thread's `pr_cursig` and `pr_info.si_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ThreadSignal {
    tid: i32,
    cursig: i32,
    code: i32,
}

/// The thread a signal was delivered to. Writers differ: the kernel gives every thread the
/// dump's signal and writes the thread that took it first; createdump writes the threads in
/// their own order and gives the signal only to the crashing thread; gdb's gcore of a
/// running process gives none. So: the only thread (or the first of several, not all) with
/// a signal; when every thread has one, the first.
fn signalled_thread(threads: &[ThreadSignal]) -> Option<ThreadSignal> {
    let first = *threads.first()?;
    let with: Vec<&ThreadSignal> = threads.iter().filter(|t| t.cursig > 0).collect();
    if with.is_empty() || with.len() == threads.len() {
        Some(first)
    } else {
        Some(*with[0])
    }
}

/// The crash signal: `NT_SIGINFO` when present, else the `pr_cursig` of the thread that has
/// one ([`signalled_thread`]), which is also the thread the signal is reported on. A gcore
/// of a running process has no crash signal: its `NT_SIGINFO` is gdb's own attach stop.
fn crash_signal(threads: &[ThreadSignal], siginfo: Option<SigInfo>) -> Option<CrashSignal> {
    let thread = signalled_thread(threads)?;
    let tid = thread.tid;
    let prstatus = (thread.cursig, thread.code);
    // Signals whose si_code > 0 come from the CPU and carry the faulting address.
    const FAULTS: [i32; 5] = [
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGSEGV,
    ];
    // gdb's gcore of a running process records the SIGSTOP of its own attach (si_code
    // SI_KERNEL) with a pr_cursig of 0: no crash.
    let attach_stop = |si: &SigInfo| si.signo == libc::SIGSTOP && prstatus.0 == 0;
    match siginfo {
        Some(si) if si.signo > 0 && !attach_stop(&si) => Some(CrashSignal {
            tid,
            signo: si.signo,
            code: si.code,
            errno: si.errno,
            fault_addr: (si.code > 0 && FAULTS.contains(&si.signo)).then_some(si.addr),
            sender_pid: (si.code <= 0 && si.pid > 0).then_some(si.pid),
            from_siginfo: true,
        }),
        _ => {
            let (cursig, code) = prstatus;
            (cursig > 0).then_some(CrashSignal {
                tid,
                signo: cursig,
                code,
                errno: 0,
                fault_addr: None,
                sender_pid: None,
                from_siginfo: false,
            })
        }
    }
}

/// The x64 registers of a `user_regs_struct` (r15, r14, r13, r12, rbp, rbx, r11, r10, r9,
/// r8, rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ...), given its words.
fn x64_context(reg: &dyn Fn(usize) -> Option<u64>) -> Option<X64Context> {
    // user_regs_struct index of each register in unwind-code order (rax, rcx, rdx, rbx,
    // rsp, rbp, rsi, rdi, r8 ... r15).
    const USER_REGS_INDEX: [usize; 16] = [10, 11, 12, 5, 19, 4, 13, 14, 9, 8, 7, 6, 3, 2, 1, 0];
    let mut context = X64Context {
        rip: reg(16)?,
        regs: [None; 16],
    };
    for (slot, &index) in context.regs.iter_mut().zip(USER_REGS_INDEX.iter()) {
        *slot = Some(reg(index)?);
    }
    Some(context)
}

/// Files named by `NT_FILE` for ranges the dump left out, which are not on this machine.
/// Each distinct path is looked at once.
fn missing_backing_files(
    files: &[MappedFile],
    segments: &[Segment],
    sysroots: &[PathBuf],
) -> Vec<PathBuf> {
    let mut on_disk: HashMap<&Path, bool> = HashMap::new();
    let mut missing: std::collections::BTreeSet<&Path> = Default::default();
    for f in files.iter().filter(|f| is_regular_file_path(&f.path)) {
        let path = f.path.as_path();
        let here = || on_this_machine(path, sysroots).exists();
        if missing.contains(path) || *on_disk.entry(path).or_insert_with(here) {
            continue;
        }
        if has_uncaptured_bytes(f.start, f.end, segments) {
            missing.insert(path);
        }
    }
    missing.into_iter().map(Path::to_path_buf).collect()
}

/// Where the dumped process's file `path` is on this machine: under the first sysroot that
/// has it (a container's root filesystem, or `/proc/PID/root` while it runs), else at its
/// own path. The first page the dump holds must still match ([`CoreDump`] checks it).
fn on_this_machine(path: &Path, sysroots: &[PathBuf]) -> PathBuf {
    let relative = path.strip_prefix("/").unwrap_or(path);
    sysroots
        .iter()
        .map(|root| root.join(relative))
        .find(|p| p.exists())
        .unwrap_or_else(|| path.to_path_buf())
}

/// False for mappings that never were files on disk (shared memory, deleted files,
/// devices): their absence is normal, and reads of them say so anyway.
fn is_regular_file_path(path: &Path) -> bool {
    let text = path.to_string_lossy();
    !(text.starts_with("/memfd:") || text.starts_with("/dev/") || text.ends_with(" (deleted)"))
}

/// True when some byte of `[start, end)` is not in any segment's captured part (segments
/// sorted by address). Stops at the first gap.
fn has_uncaptured_bytes(start: u64, end: u64, segments: &[Segment]) -> bool {
    let mut covered_to = start;
    let first = segments.partition_point(|s| s.vaddr.saturating_add(s.filesz) <= start);
    for s in &segments[first..] {
        if covered_to >= end {
            return false;
        }
        if s.filesz == 0 {
            continue;
        }
        if s.vaddr > covered_to {
            return true;
        }
        covered_to = covered_to.max(s.vaddr.saturating_add(s.filesz));
    }
    covered_to < end
}

fn open_backing(path: &Path) -> Backing {
    match sys::map_regular_file(path) {
        Ok(map) => {
            let writable = writable_file_ranges(&map);
            Backing::Present { map, writable }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Backing::Missing("is not on this machine".into())
        }
        Err(e) => Backing::Missing(format!("cannot be used ({e})")),
    }
}

/// File-offset ranges of an ELF file's writable `PT_LOAD` segments (empty for non-ELF).
fn writable_file_ranges(data: &[u8]) -> Vec<(u64, u64)> {
    fn ranges<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<Vec<(u64, u64)>> {
        let header = Elf::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let headers = header.program_headers(endian, data).ok()?;
        Some(
            headers
                .iter()
                .filter(|ph| {
                    ph.p_type(endian) == elf::PT_LOAD && ph.p_flags(endian).0 & elf::PF_W.0 != 0
                })
                .map(|ph| {
                    let start: u64 = ph.p_offset(endian).into();
                    let size: u64 = ph.p_filesz(endian).into();
                    // Pages are mapped whole: the page holding the segment's first byte
                    // is writable too.
                    (start & !0xfff, start.saturating_add(size))
                })
                .collect(),
        )
    }
    match data.get(4) {
        Some(&c) if c == elf::ELFCLASS64.0 => ranges::<elf::FileHeader64<Endianness>>(data),
        Some(&c) if c == elf::ELFCLASS32.0 => ranges::<elf::FileHeader32<Endianness>>(data),
        _ => None,
    }
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes words of the given size and byte order (independently of the parser).
    fn words(layout: DataLayout, values: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &v in values {
            match (layout.pointer_size, layout.endian) {
                (8, Endian::Little) => out.extend_from_slice(&v.to_le_bytes()),
                (8, Endian::Big) => out.extend_from_slice(&v.to_be_bytes()),
                (_, Endian::Little) => out.extend_from_slice(&(v as u32).to_le_bytes()),
                (_, Endian::Big) => out.extend_from_slice(&(v as u32).to_be_bytes()),
            }
        }
        out
    }

    #[test]
    fn nt_file_in_every_layout() {
        for layout in DataLayout::ALL {
            let mut desc = words(layout, &[2, 4096, 0x1000, 0x3000, 0, 0x5000, 0x6000, 3]);
            desc.extend_from_slice(b"/lib/a.so\0/lib/b.so\0");
            let files = parse_nt_file(&desc, layout).unwrap();
            assert_eq!(
                files,
                vec![
                    MappedFile {
                        start: 0x1000,
                        end: 0x3000,
                        file_offset: 0,
                        path: "/lib/a.so".into()
                    },
                    MappedFile {
                        start: 0x5000,
                        end: 0x6000,
                        file_offset: 3 * 4096,
                        path: "/lib/b.so".into()
                    },
                ],
                "{layout:?}"
            );
            // A count the note cannot hold, and a note that ends before its paths.
            assert!(parse_nt_file(&words(layout, &[1000, 4096]), layout).is_err());
            assert!(parse_nt_file(&words(layout, &[1, 4096, 1, 2, 0]), layout).is_err());
        }
    }

    #[test]
    fn prstatus_registers_per_machine() {
        // x86_64: pid at 32, rip = register 16, rsp = register 19 of the set at 112.
        let mut d = vec![0u8; 336];
        d[32..36].copy_from_slice(&4242u32.to_le_bytes());
        d[112 + 16 * 8..112 + 17 * 8].copy_from_slice(&0x401000u64.to_le_bytes());
        d[112 + 19 * 8..112 + 20 * 8].copy_from_slice(&0x7ffe0000u64.to_le_bytes());
        // rbp is register 4, r15 register 0, rax register 10.
        d[112 + 4 * 8..112 + 5 * 8].copy_from_slice(&0x7ffe0040u64.to_le_bytes());
        d[112..120].copy_from_slice(&15u64.to_le_bytes());
        d[112 + 10 * 8..112 + 11 * 8].copy_from_slice(&1u64.to_le_bytes());
        let t = parse_prstatus(&d, DataLayout::LE64, elf::EM_X86_64.0).unwrap();
        let Some(Registers::X64(context)) = t.context else {
            panic!("x64 registers: {:?}", t.context)
        };
        assert_eq!(context.rip, t.ip.unwrap());
        assert_eq!(Some(context.rsp()), t.sp);
        assert_eq!(context.rbp(), Some(0x7ffe0040));
        assert_eq!(context.regs[15], Some(15));
        assert_eq!(context.regs[0], Some(1));
        assert_eq!(
            (t.tid, t.ip, t.sp),
            (4242, Some(0x401000), Some(0x7ffe0000))
        );
        // aarch64: sp = register 31, pc = register 32.
        let mut d = vec![0u8; 392];
        d[32..36].copy_from_slice(&7u32.to_le_bytes());
        d[112 + 31 * 8..112 + 32 * 8].copy_from_slice(&0xfff0u64.to_le_bytes());
        d[112 + 32 * 8..112 + 33 * 8].copy_from_slice(&0x4000u64.to_le_bytes());
        // x29 = 0x1234, x30 = 0x5678, pstate (33) present.
        d[112 + 29 * 8..112 + 30 * 8].copy_from_slice(&0x1234u64.to_le_bytes());
        d[112 + 30 * 8..112 + 31 * 8].copy_from_slice(&0x5678u64.to_le_bytes());
        let t = parse_prstatus(&d, DataLayout::LE64, elf::EM_AARCH64.0).unwrap();
        assert_eq!((t.tid, t.ip, t.sp), (7, Some(0x4000), Some(0xfff0)));
        let Some(Registers::Arm64(context)) = t.context else {
            panic!("arm64 registers: {:?}", t.context)
        };
        assert_eq!((context.pc, context.sp()), (0x4000, 0xfff0));
        assert_eq!((context.fp(), context.lr()), (Some(0x1234), Some(0x5678)));
        assert_eq!(context.regs[0], Some(0));
        // A register set cut short: the thread is listed, its registers are not.
        let t = parse_prstatus(&d[..112 + 20 * 8], DataLayout::LE64, elf::EM_AARCH64.0).unwrap();
        assert_eq!((t.tid, t.context), (7, None));
        // i386, big-endian words to check byte order: pid at 24, eip = 12, esp = 15 at 72.
        let mut d = vec![0u8; 144];
        d[24..28].copy_from_slice(&99u32.to_be_bytes());
        d[72 + 12 * 4..72 + 13 * 4].copy_from_slice(&0x8048000u32.to_be_bytes());
        d[72 + 15 * 4..72 + 16 * 4].copy_from_slice(&0xbffff000u32.to_be_bytes());
        let t = parse_prstatus(&d, DataLayout::BE32, elf::EM_386.0).unwrap();
        assert_eq!((t.tid, t.ip, t.sp), (99, Some(0x8048000), Some(0xbffff000)));
        // Another machine: the thread is listed without registers; a short note is refused.
        let t = parse_prstatus(&vec![0u8; 336], DataLayout::LE64, 0xffff).unwrap();
        assert_eq!((t.ip, t.sp), (None, None));
        assert!(parse_prstatus(&[0u8; 20], DataLayout::LE64, elf::EM_X86_64.0).is_none());
    }

    fn threads(signals: &[(i32, i32)]) -> Vec<ThreadSignal> {
        signals
            .iter()
            .map(|&(tid, cursig)| ThreadSignal {
                tid,
                cursig,
                code: 0,
            })
            .collect()
    }

    #[test]
    fn crash_signal_from_siginfo_or_cursig() {
        // siginfo_t of a SIGSEGV at 0x1234 (SEGV_MAPERR), 64-bit: union at 16.
        let mut si = vec![0u8; 128];
        si[0..4].copy_from_slice(&11i32.to_le_bytes());
        si[8..12].copy_from_slice(&1i32.to_le_bytes());
        si[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        let parsed = parse_siginfo(&si, DataLayout::LE64).unwrap();
        let one = [ThreadSignal {
            tid: 7,
            cursig: 11,
            code: 1,
        }];
        let c = crash_signal(&one, Some(parsed)).unwrap();
        assert_eq!(
            (c.tid, c.signo, c.code, c.fault_addr, c.sender_pid),
            (7, 11, 1, Some(0x1234), None)
        );
        assert_eq!(c.name(), Some("SIGSEGV"));
        // SIGABRT by tgkill (SI_TKILL) from pid 99, 32-bit big-endian: union at 12.
        let mut si = vec![0u8; 128];
        si[0..4].copy_from_slice(&6i32.to_be_bytes());
        si[8..12].copy_from_slice(&(-6i32).to_be_bytes());
        si[12..16].copy_from_slice(&99i32.to_be_bytes());
        let parsed = parse_siginfo(&si, DataLayout::BE32).unwrap();
        let c = crash_signal(&threads(&[(99, 0)]), Some(parsed)).unwrap();
        assert_eq!(
            (c.signo, c.code, c.fault_addr, c.sender_pid, c.name()),
            (6, -6, None, Some(99), Some("SIGABRT"))
        );
        // No NT_SIGINFO: pr_cursig of the thread that has it.
        let mut pr = vec![0u8; 336];
        pr[4..8].copy_from_slice(&(-6i32).to_le_bytes());
        pr[12..14].copy_from_slice(&6i16.to_le_bytes());
        let (cursig, code) = prstatus_signal(&pr, DataLayout::LE64).unwrap();
        let c = crash_signal(
            &[ThreadSignal {
                tid: 5,
                cursig,
                code,
            }],
            None,
        )
        .unwrap();
        assert_eq!((c.tid, c.signo, c.code, c.from_siginfo), (5, 6, -6, false));
        // gcore of a running process: its attach's SIGSTOP, pr_cursig 0.
        let mut si = vec![0u8; 128];
        si[0..4].copy_from_slice(&19i32.to_le_bytes());
        si[8..12].copy_from_slice(&0x80i32.to_le_bytes());
        let stop = parse_siginfo(&si, DataLayout::LE64).unwrap();
        assert!(crash_signal(&threads(&[(5, 0), (6, 0)]), Some(stop)).is_none());
        assert!(crash_signal(&threads(&[(5, 19)]), Some(stop)).is_some());
        // No signal at all, or no thread.
        assert!(crash_signal(&threads(&[(5, 0)]), None).is_none());
        assert!(crash_signal(&[], Some(parsed)).is_none());
        assert!(parse_siginfo(&[0u8; 10], DataLayout::LE64).is_none());
        assert_eq!(super::super::signal_name(31), Some("SIGSYS"));
        assert_eq!(super::super::signal_name(0), None);
        assert_eq!(super::super::signal_name(34), None);
    }

    /// The thread a signal belongs to, as each dump writer records it.
    #[test]
    fn the_signal_belongs_to_the_thread_that_took_it() {
        // createdump: threads in their own order, the signal only on the crashing one.
        let t = signalled_thread(&threads(&[(100, 0), (101, 0), (150, 6), (102, 0)]));
        assert_eq!(t.map(|t| t.tid), Some(150));
        let mut abort = vec![0u8; 128];
        abort[0..4].copy_from_slice(&6i32.to_le_bytes());
        let si = parse_siginfo(&abort, DataLayout::LE64).unwrap();
        let c = crash_signal(&threads(&[(100, 0), (150, 6), (102, 0)]), Some(si)).unwrap();
        assert_eq!((c.tid, c.signo), (150, 6));
        // The kernel: every thread has the signal; the one that took it is first.
        let t = signalled_thread(&threads(&[(201, 11), (200, 11), (202, 11)]));
        assert_eq!(t.map(|t| t.tid), Some(201));
        // gcore of a running process: none has one; no crash is claimed.
        assert!(crash_signal(&threads(&[(300, 0), (301, 0)]), None).is_none());
    }

    /// A core cut inside its ELF header or its program header table is reported as truncated
    /// (the ELF reader alone says "Invalid ELF program header size or alignment").
    #[test]
    fn truncated_headers_are_named() {
        let mut core = vec![0u8; 64 + 3 * 56];
        core[..4].copy_from_slice(b"\x7fELF");
        core[4] = 2; // ELFCLASS64
        core[5] = 1; // little-endian
        core[6] = 1; // EV_CURRENT
        core[16..18].copy_from_slice(&elf::ET_CORE.0.to_le_bytes());
        core[18..20].copy_from_slice(&elf::EM_X86_64.0.to_le_bytes());
        core[20..24].copy_from_slice(&1u32.to_le_bytes());
        core[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        core[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        core[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        core[56..58].copy_from_slice(&3u16.to_le_bytes()); // e_phnum
        let whole = parse::<elf::FileHeader64<Endianness>>(&core, &[]);
        assert!(whole.is_ok(), "{:?}", whole.err());
        let cut = parse::<elf::FileHeader64<Endianness>>(&core[..64 + 56 + 10], &[]).err();
        let cut = cut.expect("a table cut in its second entry is refused");
        assert!(
            cut.contains("program headers") && cut.contains("truncated"),
            "{cut}"
        );
        let short = parse::<elf::FileHeader64<Endianness>>(&core[..40], &[]).err();
        assert!(short.expect("refused").contains("truncated"));
        // An offset that overflows is the same error, not an overflow.
        core[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let huge = parse::<elf::FileHeader64<Endianness>>(&core, &[]).err();
        assert!(huge
            .expect("refused")
            .contains("end past the end of the file"));
    }

    #[test]
    fn uncaptured_ranges() {
        let seg = |vaddr, filesz| Segment {
            vaddr,
            memsz: filesz,
            offset: 0,
            filesz,
        };
        let segs = [
            seg(0x1000, 0x1000),
            seg(0x2000, 0x1000),
            seg(0x4000, 0x1000),
        ];
        assert!(!has_uncaptured_bytes(0x1000, 0x3000, &segs));
        assert!(has_uncaptured_bytes(0x1000, 0x3001, &segs));
        assert!(has_uncaptured_bytes(0x3000, 0x4000, &segs));
        assert!(!has_uncaptured_bytes(0x4800, 0x5000, &segs));
        assert!(has_uncaptured_bytes(0, u64::MAX, &segs));
    }
}
