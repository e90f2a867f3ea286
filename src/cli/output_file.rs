//! Writing a command's output file, the same way for every command (`-o PATH`).
//!
//! * A symbolic link is followed, link by link, and its target written: the link stays a
//!   link (a `perf-PID.map` that points elsewhere keeps pointing there).
//! * A FIFO, a character or block device (such as `/dev/null`) or any other file that is
//!   not regular is opened for writing and written in place: no truncation, no rename (a
//!   FIFO's reader gets the content; a device is never replaced by a file).
//! * A regular file, or a path that does not exist yet, is replaced atomically: the content
//!   goes to a temporary file in the same directory, created exclusively under a random
//!   name (never through a link planted there), with the old file's mode and owner (or
//!   `new_mode` for a new file), and is renamed over the path once complete. A reader never
//!   sees half a file, and one that has the old file open keeps reading the old content.

use std::error::Error;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of a new output file (before the umask), as most tools create files.
pub(crate) const DEFAULT_MODE: u32 = 0o644;

/// Most symbolic links followed from the path to the file (as the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Temporary names tried before giving up (each is random, so a clash means an attack or a
/// very crowded directory).
const TEMP_ATTEMPTS: u32 = 16;

/// Longest part of the output's name kept in the temporary name (NAME_MAX is 255 bytes).
const TEMP_NAME_KEEP: usize = 100;

/// A failure to write an output file: the path, the step that failed and why.
#[derive(Debug)]
pub(crate) struct OutputError {
    path: PathBuf,
    action: &'static str,
    source: Box<dyn Error>,
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.path.display(),
            self.action,
            self.source
        )
    }
}

impl Error for OutputError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

fn fail(path: &Path, action: &'static str, source: impl Into<Box<dyn Error>>) -> OutputError {
    OutputError {
        path: path.to_path_buf(),
        action,
        source: source.into(),
    }
}

/// Writes `bytes` to `path` (see the module documentation).
pub(crate) fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_with(path, DEFAULT_MODE, |out| Ok(out.write_all(bytes)?))
}

/// Writes to `path` what `fill` writes (see the module documentation); `new_mode` is the
/// mode of a file that did not exist (the umask applies).
pub(crate) fn write_with<F>(path: &Path, new_mode: u32, fill: F) -> Result<(), OutputError>
where
    F: FnOnce(&mut dyn Write) -> Result<(), Box<dyn Error>>,
{
    let target = resolve_links(path)?;
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => Err(fail(&target, "cannot write", "it is a directory")),
        Ok(m) if m.is_file() => replace(&target, Some(&m), new_mode, random_names(), fill),
        Ok(_) => write_in_place(&target, fill),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            replace(&target, None, new_mode, random_names(), fill)
        }
        Err(e) => Err(fail(&target, "cannot inspect", e)),
    }
}

/// Follows the symbolic links that `path` names (its last component, then each link's
/// target in turn) to a path that is not a link, or does not exist yet.
fn resolve_links(path: &Path) -> Result<PathBuf, OutputError> {
    let mut cur = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&cur).map_err(|e| fail(&cur, "cannot read link", e))?;
                cur = match cur.parent() {
                    // A relative target is relative to the link's directory.
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            Ok(_) => return Ok(cur),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(cur),
            Err(e) => return Err(fail(&cur, "cannot inspect", e)),
        }
    }
    Err(fail(
        path,
        "cannot resolve",
        format!("more than {MAX_LINKS} symbolic links (a loop?)"),
    ))
}

/// Writes a FIFO, device or other non-regular file where it is.
fn write_in_place<F>(target: &Path, fill: F) -> Result<(), OutputError>
where
    F: FnOnce(&mut dyn Write) -> Result<(), Box<dyn Error>>,
{
    // No O_CREAT, no O_TRUNC: the file exists and is not ours to recreate. O_NOCTTY so
    // that a terminal device does not become our controlling terminal.
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(target)
        .map_err(|e| fail(target, "cannot open for writing", e))?;
    let mut out = BufWriter::new(file);
    fill(&mut out).map_err(|e| fail(target, "cannot write", e))?;
    out.flush().map_err(|e| fail(target, "cannot write", e))
}

/// Endless unpredictable temporary-name suffixes.
fn random_names() -> impl Iterator<Item = OsString> {
    use std::hash::{BuildHasher, RandomState};
    // Each RandomState has fresh keys from the operating system's random source.
    (0u64..).map(|i| {
        let n = RandomState::new().hash_one((std::process::id(), i));
        OsString::from(format!("{n:016x}"))
    })
}

/// The temporary name beside `target` with this suffix: `.NAME.cdac-SUFFIX`.
fn temp_path(target: &Path, suffix: &OsString) -> PathBuf {
    let name = target.file_name().map(OsStrExt::as_bytes).unwrap_or(b"out");
    let mut temp = b".".to_vec();
    temp.extend_from_slice(&name[..name.len().min(TEMP_NAME_KEEP)]);
    temp.extend_from_slice(b".cdac-");
    temp.extend_from_slice(suffix.as_bytes());
    target.with_file_name(OsString::from_vec(temp))
}

/// Removes the temporary file unless the rename succeeded.
struct TempGuard<'a>(Option<&'a Path>);

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes a temporary file beside `target` and renames it over `target`.
fn replace<F>(
    target: &Path,
    old: Option<&Metadata>,
    new_mode: u32,
    mut names: impl Iterator<Item = OsString>,
    fill: F,
) -> Result<(), OutputError>
where
    F: FnOnce(&mut dyn Write) -> Result<(), Box<dyn Error>>,
{
    let mode = old.map_or(new_mode, |m| m.mode() & 0o7777);
    let (temp, file) = create_exclusive(target, mode, &mut names)?;
    let mut guard = TempGuard(Some(&temp));
    if let Some(m) = old {
        // Keep the old file's owner where we may (as root), then its exact mode (the umask
        // applied at creation; chown may clear set-id bits).
        let _ = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()));
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| fail(&temp, "cannot set the mode", e))?;
    }
    let mut out = BufWriter::new(file);
    fill(&mut out).map_err(|e| fail(target, "cannot write", e))?;
    let file = out
        .into_inner()
        .map_err(|e| fail(target, "cannot write", e.into_error()))?;
    file.sync_all()
        .map_err(|e| fail(target, "cannot write", e))?;
    std::fs::rename(&temp, target).map_err(|e| fail(target, "cannot replace", e))?;
    guard.0 = None;
    Ok(())
}

/// Creates a new temporary file beside `target` under the first free name of `names`. It
/// is never a link: O_EXCL fails on any existing name, a planted link included.
fn create_exclusive(
    target: &Path,
    mode: u32,
    names: &mut impl Iterator<Item = OsString>,
) -> Result<(PathBuf, File), OutputError> {
    let mut last = None;
    for suffix in names.take(TEMP_ATTEMPTS as usize) {
        let temp = temp_path(target, &suffix);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
        {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(fail(target, "cannot create a temporary file beside it", e)),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::other("no temporary name"));
    Err(fail(target, "cannot create a temporary file beside it", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .expect("Umask line");
        u32::from_str_radix(line.trim(), 8).expect("octal")
    }

    #[test]
    fn a_symlink_stays_a_link_and_its_target_gets_the_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.map");
        std::fs::write(&real, "old\n").expect("write");
        let link = dir.path().join("perf-1.map");
        std::os::unix::fs::symlink("real.map", &link).expect("symlink");
        write_bytes(&link, b"new content\n").expect("write through the link");
        let meta = std::fs::symlink_metadata(&link).expect("lstat");
        assert!(meta.file_type().is_symlink(), "the link was replaced");
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("real.map"));
        assert_eq!(std::fs::read(&real).unwrap(), b"new content\n");
    }

    #[test]
    fn a_dangling_link_gets_its_target_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        let link = dir.path().join("out.txt");
        std::os::unix::fs::symlink("sub/made.txt", &link).expect("symlink");
        write_bytes(&link, b"made").expect("write");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(sub.join("made.txt")).unwrap(), b"made");
    }

    #[test]
    fn a_fifo_reader_gets_the_whole_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo")
            .success();
        assert!(ok, "mkfifo failed");
        // More than a pipe buffer holds, so the writer must stream it to the reader.
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                File::open(&fifo)
                    .expect("open the FIFO for reading")
                    .read_to_end(&mut got)
                    .expect("read");
                got
            })
        };
        write_bytes(&fifo, &content).expect("write the FIFO");
        let got = reader.join().expect("reader thread");
        assert_eq!(got.len(), content.len());
        assert!(got == content, "the reader got other bytes");
        let meta = std::fs::symlink_metadata(&fifo).unwrap();
        assert!(meta.file_type().is_fifo(), "the FIFO was replaced");
    }

    #[test]
    fn a_regular_file_is_replaced_atomically_with_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.map");
        std::fs::write(&path, "old content\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let old_inode = std::fs::metadata(&path).unwrap().ino();
        // A reader that opened the old file keeps it whole.
        let mut reader = File::open(&path).expect("open");
        write_bytes(&path, b"new\n").expect("write");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600, "mode kept");
        assert_ne!(
            meta.ino(),
            old_inode,
            "a new file was renamed over the old one"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"new\n");
        let mut old = String::new();
        reader.read_to_string(&mut old).unwrap();
        assert_eq!(old, "old content\n");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from("out.map")]);
    }

    #[test]
    fn a_new_file_gets_the_default_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("new.txt");
        write_bytes(&path, b"x").expect("write");
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(mode, DEFAULT_MODE & !umask());
        let other = dir.path().join("private.data");
        write_with(&other, 0o600, |out| Ok(out.write_all(b"y")?)).expect("write");
        let mode = std::fs::metadata(&other).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600 & !umask());
    }

    #[test]
    fn a_planted_link_at_the_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-7.map");
        std::fs::write(&path, "old").unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // The first name tried is taken by a link to the victim; the second is free.
        let names = [OsString::from("planted"), OsString::from("free")];
        let planted = temp_path(&path, &names[0]);
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        replace(&path, Some(&meta), DEFAULT_MODE, names.into_iter(), |out| {
            Ok(out.write_all(b"map")?)
        })
        .expect("write under the second name");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"map");
        // Only planted names: an error, and nothing written anywhere.
        let only = [OsString::from("planted")];
        let err = replace(&path, Some(&meta), DEFAULT_MODE, only.into_iter(), |out| {
            Ok(out.write_all(b"other")?)
        })
        .expect_err("every name is taken");
        assert!(err.to_string().contains("temporary file"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"map");
    }

    #[test]
    fn dev_null_is_written_as_a_device() {
        let null = Path::new("/dev/null");
        write_bytes(null, b"discarded").expect("write /dev/null");
        let meta = std::fs::symlink_metadata(null).unwrap();
        assert!(meta.file_type().is_char_device(), "/dev/null was replaced");
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keep.txt");
        std::fs::write(&path, "keep").unwrap();
        let err = write_with(&path, DEFAULT_MODE, |out| {
            out.write_all(b"half")?;
            Err("the producer failed".into())
        })
        .expect_err("fill failed");
        assert!(err.to_string().contains("the producer failed"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn directories_and_link_loops_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = write_bytes(dir.path(), b"x").expect_err("a directory");
        assert!(err.to_string().contains("directory"), "{err}");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let err = write_bytes(&a, b"x").expect_err("a loop");
        assert!(err.to_string().contains("symbolic links"), "{err}");
    }
}
