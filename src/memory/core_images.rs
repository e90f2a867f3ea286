//! The ELF images of a core that has no `NT_FILE` note (qemu-user writes none), found in
//! its memory: every loaded segment that starts with an ELF header of the core's machine is
//! an image. Each is named, best first, by the dynamic loader's list (`DT_DEBUG` of the
//! executable → `r_debug` → `link_map`, which holds the paths the loader opened), by its
//! `DT_SONAME`, or, for the executable, by `AT_EXECFN` of the auxiliary vector.
//!
//! The result stands in for the `NT_FILE` mappings: one range per `PT_LOAD` of each image,
//! with its file offset, so that modules are grouped and their headers read as usual.
//!
//! An object of the loader's list whose header the core did not capture (qemu leaves out
//! the text of the system libraries) is taken from a file on this machine: its path as the
//! loader opened it, under each sysroot (those the caller gives, `cdac --sysroot` or
//! `CDAC_SYSROOT`, then the distribution's cross sysroot of the core's machine,
//! `/usr/aarch64-linux-gnu`, where qemu-user's `-L` points), then as is. The file must be of the core's machine and put its
//! dynamic section where the list says the object's is (`l_ld`): any other file is not
//! the one that was loaded.

use std::path::{Path, PathBuf};

use super::{DataLayout, Endian, MappedFile};

/// Most images taken from one core (a damaged one could look like thousands).
const MAX_IMAGES: usize = 4096;
/// Most `link_map` entries followed.
const MAX_LINK_MAP: usize = 4096;
/// Longest path read from memory.
const MAX_PATH: usize = 4096;
/// Most program headers read from one image.
const MAX_PHDRS: usize = 128;
/// Most dynamic entries read from one image.
const MAX_DYNAMIC: usize = 1024;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_PHDR: u32 = 6;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;
const DT_DEBUG: u64 = 21;
const AT_PHDR: u64 = 3;
const AT_EXECFN: u64 = 31;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const EM_AARCH64: u16 = 183;

/// Reads `len` bytes of the core's memory at an address (`None`: not all captured).
pub type ReadMemory<'a> = dyn Fn(u64, usize) -> Option<&'a [u8]> + 'a;

/// One loadable segment of an image.
#[derive(Debug, Clone, Copy)]
struct Load {
    vaddr: u64,
    memsz: u64,
    offset: u64,
}

/// An image found by its header.
#[derive(Debug)]
struct Image {
    /// Where its header is.
    base: u64,
    /// Load bias: `base` minus the first `PT_LOAD`'s page-aligned address.
    bias: u64,
    loads: Vec<Load>,
    /// Address of its program headers in memory.
    phdr: Option<u64>,
    /// Address of its dynamic section in memory.
    dynamic: Option<u64>,
}

/// Integer reads in the core's byte order.
struct Words {
    layout: DataLayout,
}

impl Words {
    fn uint(&self, b: &[u8], at: usize, size: usize) -> Option<u64> {
        let bytes = b.get(at..at.checked_add(size)?)?;
        let mut v = 0u64;
        match self.layout.endian {
            Endian::Little => {
                for &x in bytes.iter().rev() {
                    v = (v << 8) | u64::from(x);
                }
            }
            Endian::Big => {
                for &x in bytes {
                    v = (v << 8) | u64::from(x);
                }
            }
        }
        Some(v)
    }

    fn word(&self, b: &[u8], at: usize) -> Option<u64> {
        self.uint(b, at, usize::from(self.layout.pointer_size))
    }

    fn ptr_size(&self) -> usize {
        usize::from(self.layout.pointer_size)
    }
}

/// The images in `segments` (start address and captured length of each loaded segment),
/// named, as `NT_FILE`-style mappings; `auxv` is the core's `NT_AUXV` note.
pub fn images_in_memory(
    segments: &[(u64, u64)],
    read: &ReadMemory<'_>,
    layout: DataLayout,
    machine: u16,
    auxv: Option<&[u8]>,
    sysroots: &[PathBuf],
) -> Vec<MappedFile> {
    let w = Words { layout };
    let images: Vec<Image> = segments
        .iter()
        .filter(|(_, len)| *len >= 64)
        .filter_map(|&(start, _)| image_at(&w, read, start, machine))
        .take(MAX_IMAGES)
        .collect();
    let aux = auxv.map(|a| auxv_values(&w, a)).unwrap_or_default();
    let exe_phdr = aux.iter().find(|(k, _)| *k == AT_PHDR).map(|(_, v)| *v);
    let exe_path = aux
        .iter()
        .find(|(k, _)| *k == AT_EXECFN)
        .and_then(|(_, v)| c_string(read, *v));
    let exe = images
        .iter()
        .find(|i| exe_phdr.is_some() && i.phdr == exe_phdr);
    let loaded = exe
        .and_then(|e| e.dynamic)
        .map(|d| link_map_names(&w, read, d))
        .unwrap_or_default();
    let mut out = Vec::new();
    for (bias, name, dynamic) in &loaded {
        let in_memory = images.iter().any(|i| i.bias == *bias);
        if in_memory || name.is_empty() {
            continue;
        }
        if let Some((path, image)) = image_on_disk(&w, name, *bias, *dynamic, machine, sysroots) {
            push_loads(&mut out, &image, *bias, &path);
        }
    }
    for image in &images {
        let is_exe = exe.is_some_and(|e| e.base == image.base);
        let name = loaded
            .iter()
            .find(|(bias, name, _)| *bias == image.bias && !name.is_empty())
            .map(|(_, n, _)| n.clone())
            .or_else(|| is_exe.then(|| exe_path.clone()).flatten())
            .or_else(|| image.dynamic.and_then(|d| soname(&w, read, d, image.bias)))
            .unwrap_or_else(|| format!("[elf image at {:#x}]", image.base));
        push_loads(&mut out, image, image.bias, &PathBuf::from(&name));
    }
    out.sort_by_key(|f| f.start);
    out
}

/// One mapping per `PT_LOAD` of `image`, loaded at `bias`, backed by `path`.
fn push_loads(out: &mut Vec<MappedFile>, image: &Image, bias: u64, path: &Path) {
    for l in &image.loads {
        let page = 0xfff;
        let start = bias.wrapping_add(l.vaddr) & !page;
        let end = bias.wrapping_add(l.vaddr).wrapping_add(l.memsz);
        let end = end.checked_add(page).map_or(end, |e| e & !page);
        out.push(MappedFile {
            start,
            end,
            file_offset: l.offset & !page,
            path: path.to_path_buf(),
        });
    }
}

/// Directories a core's paths may be found under on this machine, for `machine`: the
/// caller's, then the distribution's cross sysroot.
fn sysroots(machine: u16, given: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = given.to_vec();
    if machine == EM_AARCH64 && std::env::consts::ARCH != "aarch64" {
        roots.push(PathBuf::from("/usr/aarch64-linux-gnu"));
    }
    roots
}

/// The file on this machine that is the object the loader lists as `name` at `bias`,
/// with its dynamic section at `dynamic`: (path, its image as the file lays it out).
fn image_on_disk(
    w: &Words,
    name: &str,
    bias: u64,
    dynamic: u64,
    machine: u16,
    given: &[PathBuf],
) -> Option<(PathBuf, Image)> {
    let relative = name.trim_start_matches('/');
    let mut candidates: Vec<PathBuf> = sysroots(machine, given)
        .into_iter()
        .map(|root| root.join(relative))
        .collect();
    candidates.push(PathBuf::from(name));
    candidates.into_iter().find_map(|path| {
        let map = super::map_regular_file(&path).ok()?;
        let bytes: &[u8] = &map;
        let read = |addr: u64, len: usize| -> Option<&[u8]> {
            let from = usize::try_from(addr).ok()?;
            bytes.get(from..from.checked_add(len)?)
        };
        // Read as if loaded at 0: the file's own addresses.
        let image = image_at(w, &read, 0, machine)?;
        let file_dynamic = image.dynamic?.wrapping_sub(image.bias);
        (bias.wrapping_add(file_dynamic) == dynamic).then_some((path, image))
    })
}

/// The image whose ELF header is at `base`, if one of `machine` is.
fn image_at(w: &Words, read: &ReadMemory<'_>, base: u64, machine: u16) -> Option<Image> {
    let head = read(base, 64)?;
    if &head[..4] != b"\x7fELF" {
        return None;
    }
    let is_64 = w.layout.pointer_size == 8;
    if head[4] != if is_64 { 2 } else { 1 } {
        return None;
    }
    let e_type = w.uint(head, 16, 2)? as u16;
    if (e_type != ET_EXEC && e_type != ET_DYN) || w.uint(head, 18, 2)? as u16 != machine {
        return None;
    }
    let (phoff, phentsize, phnum) = if is_64 {
        (
            w.word(head, 32)?,
            w.uint(head, 54, 2)?,
            w.uint(head, 56, 2)?,
        )
    } else {
        (
            w.word(head, 28)?,
            w.uint(head, 42, 2)?,
            w.uint(head, 44, 2)?,
        )
    };
    let (phentsize, phnum) = (phentsize as usize, (phnum as usize).min(MAX_PHDRS));
    if phentsize < if is_64 { 56 } else { 32 } {
        return None;
    }
    let table = read(base.checked_add(phoff)?, phentsize.checked_mul(phnum)?)?;
    let mut loads = Vec::new();
    let (mut dynamic, mut phdr_vaddr) = (None, None);
    for i in 0..phnum {
        let p = &table[i * phentsize..(i + 1) * phentsize];
        let p_type = w.uint(p, 0, 4)? as u32;
        let (offset, vaddr, memsz) = if is_64 {
            (w.word(p, 8)?, w.word(p, 16)?, w.word(p, 40)?)
        } else {
            (w.word(p, 4)?, w.word(p, 8)?, w.word(p, 20)?)
        };
        match p_type {
            PT_LOAD => loads.push(Load {
                vaddr,
                memsz,
                offset,
            }),
            PT_DYNAMIC => dynamic = Some(vaddr),
            PT_PHDR => phdr_vaddr = Some(vaddr),
            _ => {}
        }
    }
    let first = loads.iter().map(|l| l.vaddr).min()?;
    let bias = base.wrapping_sub(first & !0xfff);
    Some(Image {
        base,
        bias,
        phdr: Some(phdr_vaddr.map_or(base.wrapping_add(phoff), |v| bias.wrapping_add(v))),
        dynamic: dynamic.map(|d| bias.wrapping_add(d)),
        loads,
    })
}

/// (type, value) pairs of an auxiliary vector, up to `AT_NULL`.
fn auxv_values(w: &Words, auxv: &[u8]) -> Vec<(u64, u64)> {
    let p = w.ptr_size();
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(k), Some(v)) = (w.word(auxv, at), w.word(auxv, at + p)) {
        if k == 0 {
            break;
        }
        out.push((k, v));
        at += 2 * p;
    }
    out
}

/// The dynamic entries at `dynamic`, up to `DT_NULL`.
fn dynamic_entries(w: &Words, read: &ReadMemory<'_>, dynamic: u64) -> Vec<(u64, u64)> {
    let p = w.ptr_size();
    let mut out = Vec::new();
    for i in 0..MAX_DYNAMIC {
        let Some(e) = dynamic
            .checked_add((i * 2 * p) as u64)
            .and_then(|a| read(a, 2 * p))
        else {
            break;
        };
        let (Some(tag), Some(val)) = (w.word(e, 0), w.word(e, p)) else {
            break;
        };
        if tag == DT_NULL {
            break;
        }
        out.push((tag, val));
    }
    out
}

/// `DT_SONAME` of the image whose dynamic section is at `dynamic`.
fn soname(w: &Words, read: &ReadMemory<'_>, dynamic: u64, bias: u64) -> Option<String> {
    let entries = dynamic_entries(w, read, dynamic);
    let strtab = entries.iter().find(|(t, _)| *t == DT_STRTAB)?.1;
    let name = entries.iter().find(|(t, _)| *t == DT_SONAME)?.1;
    // The loader relocates DT_STRTAB in place on most targets; otherwise it is relative.
    [strtab, bias.wrapping_add(strtab)]
        .into_iter()
        .find_map(|s| c_string(read, s.checked_add(name)?))
}

/// (load bias, path, dynamic section) of every object in the loader's list (`DT_DEBUG` →
/// `r_debug`).
fn link_map_names(w: &Words, read: &ReadMemory<'_>, exe_dynamic: u64) -> Vec<(u64, String, u64)> {
    let p = w.ptr_size();
    let Some(r_debug) = dynamic_entries(w, read, exe_dynamic)
        .into_iter()
        .find(|(t, v)| *t == DT_DEBUG && *v != 0)
        .map(|(_, v)| v)
    else {
        return Vec::new();
    };
    // r_debug: an int version, then the list head (pointer-aligned).
    let Some(mut node) = read(r_debug, 2 * p).and_then(|b| w.word(b, p)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // link_map: l_addr, l_name, l_ld, l_next, l_prev.
    while node != 0 && out.len() < MAX_LINK_MAP && seen.insert(node) {
        let Some(entry) = read(node, 4 * p) else {
            break;
        };
        let (Some(bias), Some(name), Some(ld), Some(next)) = (
            w.word(entry, 0),
            w.word(entry, p),
            w.word(entry, 2 * p),
            w.word(entry, 3 * p),
        ) else {
            break;
        };
        out.push((bias, c_string(read, name).unwrap_or_default(), ld));
        node = next;
    }
    out
}

/// The NUL-terminated string at `addr` (UTF-8, lossy), read page by page.
fn c_string(read: &ReadMemory<'_>, addr: u64) -> Option<String> {
    let mut bytes = Vec::new();
    let mut at = addr;
    while bytes.len() < MAX_PATH {
        // Up to the end of the page, so that a string near a capture's end still reads.
        let chunk = (0x1000 - (at & 0xfff)) as usize;
        let b = read(at, chunk)?;
        if let Some(end) = b.iter().position(|&c| c == 0) {
            bytes.extend_from_slice(&b[..end]);
            return (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned());
        }
        bytes.extend_from_slice(b);
        at = at.checked_add(chunk as u64)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const AARCH64: u16 = 183;

    /// A 64-bit little-endian shared object of `machine` at `base`, two pages: its header,
    /// a PT_LOAD and a PT_DYNAMIC, the dynamic section (DT_STRTAB relocated, DT_SONAME) and
    /// the string table.
    fn image(base: u64, machine: u16, soname: &str) -> Vec<u8> {
        let mut m = vec![0u8; 0x2000];
        let put = |m: &mut Vec<u8>, at: usize, v: u64, n: usize| {
            m[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        };
        m[..4].copy_from_slice(b"\x7fELF");
        m[4] = 2;
        put(&mut m, 16, u64::from(ET_DYN), 2);
        put(&mut m, 18, u64::from(machine), 2);
        put(&mut m, 32, 64, 8);
        put(&mut m, 54, 56, 2);
        put(&mut m, 56, 2, 2);
        // PT_LOAD: offset 0, vaddr 0, memsz two pages.
        put(&mut m, 64, u64::from(PT_LOAD), 4);
        put(&mut m, 64 + 40, 0x2000, 8);
        // PT_DYNAMIC at 0x1000.
        put(&mut m, 120, u64::from(PT_DYNAMIC), 4);
        put(&mut m, 120 + 16, 0x1000, 8);
        put(&mut m, 0x1000, DT_STRTAB, 8);
        put(&mut m, 0x1008, base + 0x1100, 8);
        put(&mut m, 0x1010, DT_SONAME, 8);
        put(&mut m, 0x1018, 1, 8);
        m[0x1101..0x1101 + soname.len()].copy_from_slice(soname.as_bytes());
        m
    }

    #[test]
    fn images_are_found_by_header_and_named_by_soname() {
        let regions: Vec<(u64, Vec<u8>)> = vec![
            (0x10000, image(0x10000, AARCH64, "libfoo.so")),
            (0x20000, vec![0x55; 0x1000]),
            (0x30000, image(0x30000, 62, "libx64.so")),
        ];
        let read = |addr: u64, len: usize| -> Option<&[u8]> {
            let (start, bytes) = regions
                .iter()
                .find(|(s, b)| addr >= *s && addr - s + len as u64 <= b.len() as u64)?;
            let at = (addr - start) as usize;
            Some(&bytes[at..at + len])
        };
        let starts: Vec<(u64, u64)> = regions.iter().map(|(s, b)| (*s, b.len() as u64)).collect();
        let files = images_in_memory(&starts, &read, DataLayout::LE64, AARCH64, None, &[]);
        assert_eq!(
            files,
            vec![MappedFile {
                start: 0x10000,
                end: 0x12000,
                file_offset: 0,
                path: PathBuf::from("libfoo.so"),
            }]
        );
    }

    #[test]
    fn a_library_left_out_is_taken_from_a_sysroot_only_where_the_list_puts_it() {
        let root = std::env::temp_dir().join(format!("cdac-sysroot-{}", std::process::id()));
        let lib = root.join("lib");
        std::fs::create_dir_all(&lib).expect("temp sysroot");
        std::fs::write(lib.join("libbar.so.1"), image(0, AARCH64, "libbar.so.1")).expect("file");
        std::fs::write(lib.join("libx64.so"), image(0, 62, "libx64.so")).expect("file");
        let w = Words {
            layout: DataLayout::LE64,
        };
        let roots = [root.clone()];
        // Loaded at 0x40000: its dynamic section (file 0x1000) at 0x41000, as l_ld says.
        let found = image_on_disk(&w, "/lib/libbar.so.1", 0x40000, 0x41000, AARCH64, &roots);
        let (path, image) = found.expect("found under the sysroot");
        assert_eq!(path, lib.join("libbar.so.1"));
        let mut out = Vec::new();
        push_loads(&mut out, &image, 0x40000, &path);
        assert_eq!((out[0].start, out[0].end), (0x40000, 0x42000));
        // The list puts the dynamic section elsewhere: another file, not this one.
        assert!(image_on_disk(&w, "/lib/libbar.so.1", 0x40000, 0x51000, AARCH64, &roots).is_none());
        // A file of another machine is not taken, nor one that is not there.
        assert!(image_on_disk(&w, "/lib/libx64.so", 0x40000, 0x41000, AARCH64, &roots).is_none());
        assert!(image_on_disk(&w, "/lib/nothere.so", 0x40000, 0x41000, AARCH64, &roots).is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}
