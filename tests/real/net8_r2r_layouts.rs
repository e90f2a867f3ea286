//! The .NET 8 layouts (8.0.33, and 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`; first measured
//! on 8.0.4) the ExecutionManager contract reads beyond the range section map:
//! `ReadyToRunInfo` (and the R2R header structures reached through it), the
//! entry-point → MethodDesc `HashMap`, `EEJitManager.StoreRichDebugInfo`, the JIT's
//! `EEILException` / `EEExceptionClause` and the R2R `ExceptionLookupTableEntry` /
//! `R2RExceptionClause`. Every offset the shipped descriptor gives for them is checked here
//! on the live testbed and on its `createdump --full` dump, against oracles that do not come
//! from the descriptor: the ReadyToRun PE files on disk (parsed here with the `object`
//! crate), the testbed's manifest (MethodDescs, IL exception-clause kinds), the runtime's
//! perf map (code sizes) and a second testbed started with `DOTNET_RichDebugInfo=1`.
//! Where each offset comes from: descriptors/README.md.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cdac::descriptor::DataDescriptor;
use cdac::memory::Target;
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, perf_map, testbed};
use object::read::pe::PeFile64;
use object::LittleEndian as LE;

const RTR_SIGNATURE: u32 = 0x0052_5452;
const SECTION_RUNTIME_FUNCTIONS: u32 = 102;
const SECTION_IMPORT_SECTIONS: u32 = 101;
const SECTION_METHOD_DEF_ENTRY_POINTS: u32 = 103;
const SECTION_EXCEPTION_INFO: u32 = 104;
const SECTION_DEBUG_INFO: u32 = 105;
const SECTION_DELAY_LOAD_METHOD_CALL_THUNKS: u32 = 106;
const SECTION_HOT_COLD_MAP: u32 = 120;

// CorExceptionFlag bits.
const CLAUSE_FILTER: u32 = 0x1;
const CLAUSE_FINALLY: u32 = 0x2;
const CLAUSE_FAULT: u32 = 0x4;
const CLAUSE_DUPLICATED: u32 = 0x8;
const CLAUSE_CACHED_CLASS: u32 = 0x1000_0000;

/// The framework ReadyToRun images checked.
const IMAGES: [&str; 3] = [
    "System.Private.CoreLib.dll",
    "System.Linq.dll",
    "System.Text.RegularExpressions.dll",
];

/// Each build's runtime-function counts of [`IMAGES`] (section 102's size / 12), recorded
/// from the files outside this test (8.0.4: net8-linux-x64.md; 8.0.33 and 8.0.0: a
/// separate PE reader over the runtime packs' files).
const RUNTIME_FUNCTIONS: [(&str, [u64; 3]); 3] = [
    (
        "7c3796010ffdb407df859c3884e92bcad0cf7925",
        [37_544, 1_552, 1_526],
    ), // 8.0.4
    (
        "be4af8fbe7201f286fe16d9afb6e7ac51280e11c",
        [37_552, 1_552, 1_526],
    ), // 8.0.33
    (
        "00bbee3860797ccca61bc5bffd3a5da9a60c1108",
        [37_785, 1_608, 1_527],
    ), // 8.0.0
];

// ---------------------------------------------------------------- descriptor helpers

fn off(d: &DataDescriptor, ty: &str, field: &str) -> u64 {
    d.ty(ty)
        .unwrap_or_else(|e| panic!("{e}"))
        .offset(field)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn size(d: &DataDescriptor, ty: &str) -> u64 {
    d.ty(ty)
        .unwrap_or_else(|e| panic!("{e}"))
        .size()
        .unwrap_or_else(|e| panic!("{e}")) as u64
}

fn ptr_field(t: &Target, d: &DataDescriptor, addr: u64, ty: &str, field: &str) -> u64 {
    t.read_pointer(addr + off(d, ty, field))
        .unwrap_or_else(|e| panic!("{ty}.{field} at {addr:#x}: {e}"))
}

fn u32_field(t: &Target, d: &DataDescriptor, addr: u64, ty: &str, field: &str) -> u32 {
    t.read_u32(addr + off(d, ty, field))
        .unwrap_or_else(|e| panic!("{ty}.{field} at {addr:#x}: {e}"))
}

/// The RangeSection holding `addr`, found through the range section map with descriptor
/// offsets only (five levels of 256 pointers over address bits 56..17, then fragments).
fn find_range_section(t: &Target, d: &DataDescriptor, addr: u64) -> Option<u64> {
    let map = d.global_value("ExecutionManagerCodeRangeMapAddress").ok()?;
    let mut level = map + off(d, "RangeSectionMap", "TopLevelData");
    for shift in [49u32, 41, 33, 25] {
        let entry = t.read_pointer(level + ((addr >> shift) & 0xff) * 8).ok()? & !1;
        if entry == 0 {
            return None;
        }
        level = entry;
    }
    let mut frag = t.read_pointer(level + ((addr >> 17) & 0xff) * 8).ok()? & !1;
    for _ in 0..1000 {
        if frag == 0 {
            return None;
        }
        let begin = t
            .read_pointer(frag + off(d, "RangeSectionFragment", "RangeBegin"))
            .ok()?;
        let end = t
            .read_pointer(frag + off(d, "RangeSectionFragment", "RangeEndOpen"))
            .ok()?;
        if begin <= addr && addr < end {
            return t
                .read_pointer(frag + off(d, "RangeSectionFragment", "RangeSection"))
                .ok();
        }
        frag = t
            .read_pointer(frag + off(d, "RangeSectionFragment", "Next"))
            .ok()?
            & !1;
    }
    None
}

// ---------------------------------------------------------------- the PE file on disk

/// A ReadyToRun PE file read from disk, independently of the runtime.
struct R2rFile {
    bytes: Vec<u8>,
    /// RVA of the READYTORUN_HEADER (the COR header's ManagedNativeHeader directory).
    header_rva: u32,
    signature: u32,
    major: u16,
    minor: u16,
    flags: u32,
    /// (type, rva, size) of every R2R section, in header order.
    sections: Vec<(u32, u32, u32)>,
    /// (begin, end, unwind) of every RUNTIME_FUNCTION.
    runtime_functions: Vec<(u32, u32, u32)>,
}

impl R2rFile {
    fn open(path: &Path) -> R2rFile {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let header_rva = {
            let pe = PeFile64::parse(&*bytes).expect("PE32+ file");
            // IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR = 14; ManagedNativeHeader at +64.
            let cor = pe.data_directory(14).expect("COR header directory");
            let cor = pe
                .section_table()
                .pe_data_at(&*bytes, cor.virtual_address.get(LE))
                .expect("COR header");
            u32::from_le_bytes(cor[64..68].try_into().unwrap())
        };
        let header = header_rva;
        let mut f = R2rFile {
            bytes,
            header_rva,
            signature: 0,
            major: 0,
            minor: 0,
            flags: 0,
            sections: Vec::new(),
            runtime_functions: Vec::new(),
        };
        let h = f.at(header, 16).to_vec();
        f.signature = u32::from_le_bytes(h[0..4].try_into().unwrap());
        f.major = u16::from_le_bytes(h[4..6].try_into().unwrap());
        f.minor = u16::from_le_bytes(h[6..8].try_into().unwrap());
        f.flags = u32::from_le_bytes(h[8..12].try_into().unwrap());
        let count = u32::from_le_bytes(h[12..16].try_into().unwrap());
        for i in 0..count {
            let s = f.at(header + 16 + 12 * i, 12);
            let w = |k: usize| u32::from_le_bytes(s[k..k + 4].try_into().unwrap());
            f.sections.push((w(0), w(4), w(8)));
        }
        let (rva, len) = f
            .section(SECTION_RUNTIME_FUNCTIONS)
            .expect("RuntimeFunctions");
        let table = f.at(rva, len as usize).to_vec();
        f.runtime_functions = table
            .chunks_exact(12)
            .map(|c| {
                let w = |k: usize| u32::from_le_bytes(c[k..k + 4].try_into().unwrap());
                (w(0), w(4), w(8))
            })
            .collect();
        f
    }

    /// `len` bytes of the file at `rva`.
    fn at(&self, rva: u32, len: usize) -> &[u8] {
        let pe = PeFile64::parse(&*self.bytes).expect("PE32+ file");
        let data = pe
            .section_table()
            .pe_data_at(&*self.bytes, rva)
            .unwrap_or_else(|| panic!("RVA {rva:#x} not in the file"));
        // The slice outlives `pe`: it borrows `self.bytes`.
        let start = data.as_ptr() as usize - self.bytes.as_ptr() as usize;
        &self.bytes[start..start + len]
    }

    fn section(&self, ty: u32) -> Option<(u32, u32)> {
        self.sections
            .iter()
            .find(|s| s.0 == ty)
            .map(|&(_, rva, size)| (rva, size))
    }

    fn section_index(&self, ty: u32) -> Option<usize> {
        self.sections.iter().position(|s| s.0 == ty)
    }

    /// The runtime-function index of MethodDef `rid`'s entry point (section 103, a
    /// NativeArray indexed by RID − 1), or None.
    fn method_def_entry_point(&self, rid: u32) -> Option<usize> {
        let (rva, size) = self.section(SECTION_METHOD_DEF_ENTRY_POINTS)?;
        let buf = self.at(rva, size as usize);
        let index = rid.checked_sub(1)? as usize;
        let (header, base) = decode_unsigned(buf, 0)?;
        let entry_size = [1usize, 2, 4, 0][(header & 3) as usize];
        if entry_size == 0 || index >= (header >> 2) as usize {
            return None;
        }
        let slot = base + entry_size * (index / 16);
        let mut block = 0usize;
        for k in 0..entry_size {
            block |= (*buf.get(slot + k)? as usize) << (8 * k);
        }
        let mut offset = base + block;
        for bit in [8usize, 4, 2, 1] {
            let (v, next) = decode_unsigned(buf, offset)?;
            if index & bit != 0 {
                if v & 2 != 0 {
                    offset += (v >> 2) as usize;
                    continue;
                }
            } else if v & 1 != 0 {
                offset = next;
                continue;
            }
            if v & 3 == 0 && (v >> 2) as usize == (index & 15) {
                offset = next;
                break;
            }
            return None;
        }
        let (id, _) = decode_unsigned(buf, offset)?;
        Some(if id & 1 != 0 { id >> 2 } else { id >> 1 } as usize)
    }
}

/// The Native Format unsigned integer at `off`: (value, offset after it).
fn decode_unsigned(buf: &[u8], off: usize) -> Option<(u32, usize)> {
    let b = *buf.get(off)? as u32;
    let le = |n: usize| -> Option<u32> {
        let mut v = 0u32;
        for k in 0..n {
            v |= (*buf.get(off + k)? as u32) << (8 * k);
        }
        Some(v)
    };
    Some(if b & 1 == 0 {
        (b >> 1, off + 1)
    } else if b & 2 == 0 {
        (le(2)? >> 2, off + 2)
    } else if b & 4 == 0 {
        (le(3)? >> 3, off + 3)
    } else if b & 8 == 0 {
        (le(4)? >> 4, off + 4)
    } else if b & 16 == 0 {
        let mut v = 0u32;
        for k in 0..4 {
            v |= (*buf.get(off + 1 + k)? as u32) << (8 * k);
        }
        (v, off + 5)
    } else {
        return None;
    })
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|k| k * k <= n).all(|k| n % k != 0)
}

// ---------------------------------------------------------------- the images in a target

/// One framework R2R image as the runtime has it loaded.
struct LoadedImage {
    name: &'static str,
    expected_functions: u64,
    path: PathBuf,
    base: u64,
    module: u64,
    r2r_info: u64,
}

/// This build's recorded runtime-function counts of [`IMAGES`].
fn expected_runtime_functions(rt: &Runtime) -> [u64; 3] {
    let build = rt.module().build_id.clone().unwrap_or_default();
    RUNTIME_FUNCTIONS
        .iter()
        .find(|(id, _)| *id == build)
        .map(|(_, counts)| *counts)
        .unwrap_or_else(|| panic!("no runtime-function counts recorded for build {build}"))
}

fn loaded_images(rt: &Runtime, what: &str) -> Vec<LoadedImage> {
    let t = rt.target();
    let d = rt.descriptor();
    let r2r_manager = t
        .read_pointer(d.global_value("ReadyToRunJitManagerAddress").unwrap())
        .unwrap();
    IMAGES
        .iter()
        .zip(expected_runtime_functions(rt))
        .map(|(&name, expected_functions)| {
            let files = t.mapped_files();
            let sect = files
                .iter()
                .find(|f| f.path.ends_with(name) && f.file_offset > 0)
                .unwrap_or_else(|| panic!("{what}: {name} is not mapped"));
            let rs = find_range_section(t, d, sect.start)
                .unwrap_or_else(|| panic!("{what}: {name} not in the range section map"));
            let base = ptr_field(t, d, rs, "RangeSection", "RangeBegin");
            assert!(
                files
                    .iter()
                    .any(|f| f.path == sect.path && f.file_offset == 0 && f.start == base),
                "{what}: {name}'s range section does not begin at the image's first mapping"
            );
            assert_eq!(
                ptr_field(t, d, rs, "RangeSection", "JitManager"),
                r2r_manager,
                "{what}: {name}"
            );
            let module = ptr_field(t, d, rs, "RangeSection", "R2RModule");
            let r2r_info = ptr_field(t, d, module, "Module", "ReadyToRunInfo");
            assert_ne!(r2r_info, 0, "{what}: {name} has no ReadyToRunInfo");
            LoadedImage {
                name,
                expected_functions,
                path: sect.path.clone(),
                base,
                module,
                r2r_info,
            }
        })
        .collect()
}

/// The owning Module of a MethodDesc: chunk = md − sizeof(MethodDescChunk) −
/// ChunkIndex × MethodDescAlignment; chunk.MethodTable.Module. Also returns the token.
fn method_desc_module_and_token(t: &Target, d: &DataDescriptor, md: u64) -> (u64, u32) {
    let align = d.global_value("MethodDescAlignment").unwrap();
    let index = t.read_u8(md + off(d, "MethodDesc", "ChunkIndex")).unwrap() as u64;
    let chunk = md - size(d, "MethodDescChunk") - index * align;
    let mt = ptr_field(t, d, chunk, "MethodDescChunk", "MethodTable");
    let module = ptr_field(t, d, mt, "MethodTable", "Module");
    let bits = d.global_value("MethodDescTokenRemainderBitCount").unwrap() as u32;
    let remainder = t
        .read_u16(md + off(d, "MethodDesc", "Flags3AndTokenRemainder"))
        .unwrap() as u32
        & ((1 << bits) - 1);
    let range = t
        .read_u16(chunk + off(d, "MethodDescChunk", "FlagsAndTokenRange"))
        .unwrap() as u32
        & ((1 << (24 - bits)) - 1);
    (module, 0x0600_0000 | (range << bits) | remainder)
}

/// The entry point → MethodDesc map of a ReadyToRunInfo: every (key, stored value) pair,
/// by a full scan of its buckets.
fn scan_hash_map(t: &Target, d: &DataDescriptor, map: u64) -> (u64, u64, BTreeMap<u64, u64>) {
    let buckets = ptr_field(t, d, map, "HashMap", "Buckets");
    let count = t.read_pointer(buckets).unwrap();
    assert!(
        count > 0 && count < 1 << 24,
        "bucket count {count} at {buckets:#x}"
    );
    let bucket = size(d, "Bucket");
    let slots = d.global_value("HashMapSlotsPerBucket").unwrap();
    let mask = d.global_value("HashMapValueMask").unwrap();
    let mut entries = BTreeMap::new();
    for b in 1..=count {
        let at = buckets + b * bucket;
        for j in 0..slots {
            let key = t
                .read_pointer(at + off(d, "Bucket", "Keys") + 8 * j)
                .unwrap();
            let value = t
                .read_pointer(at + off(d, "Bucket", "Values") + 8 * j)
                .unwrap();
            // 0 = empty, 1 = deleted.
            if key > 1 {
                assert!(
                    entries.insert(key, value & mask).is_none(),
                    "key {key:#x} twice"
                );
            }
        }
    }
    (buckets, count, entries)
}

/// The runtime's HashMap lookup: double hashing with seed = (u32)(key >> 2) and
/// incr = 1 + ((u32)(key >> 5) + 1) % (size − 1), probing until a bucket has no
/// collision bit (the bits of Values[0] outside HashMapValueMask).
fn hash_lookup(t: &Target, d: &DataDescriptor, buckets: u64, key: u64) -> Option<u64> {
    let size_ = t.read_pointer(buckets).unwrap() as u32;
    let bucket = size(d, "Bucket");
    let slots = d.global_value("HashMapSlotsPerBucket").unwrap();
    let mask = d.global_value("HashMapValueMask").unwrap();
    let mut seed = (key >> 2) as u32;
    let incr = 1 + ((key >> 5) as u32).wrapping_add(1) % (size_ - 1);
    for _ in 0..size_ {
        let at = buckets + (1 + (seed % size_) as u64) * bucket;
        for j in 0..slots {
            if t.read_pointer(at + off(d, "Bucket", "Keys") + 8 * j)
                .unwrap()
                == key
            {
                let v = t
                    .read_pointer(at + off(d, "Bucket", "Values") + 8 * j)
                    .unwrap();
                return Some(v & mask);
            }
        }
        let first = t.read_pointer(at + off(d, "Bucket", "Values")).unwrap();
        if first & !mask == 0 {
            return None;
        }
        seed = seed.wrapping_add(incr);
    }
    None
}

// ---------------------------------------------------------------- 1. ReadyToRunInfo

fn verify_ready_to_run_info(rt: &Runtime, what: &str) {
    let t = rt.target();
    let d = rt.descriptor();
    let images = loaded_images(rt, what);
    let corelib_module = images[0].module;
    let mut mdep_checked = 0;
    for img in &images {
        let name = format!("{what}: {}", img.name);
        let file = R2rFile::open(&img.path);
        let ri = img.r2r_info;
        assert_eq!(file.signature, RTR_SIGNATURE, "{name}: file");

        // ReadyToRunHeader → the image's READYTORUN_HEADER, R2R 9.1 like the file.
        let header = ptr_field(t, d, ri, "ReadyToRunInfo", "ReadyToRunHeader");
        assert_eq!(header, img.base + file.header_rva as u64, "{name}");
        assert_eq!(t.read_u32(header).unwrap(), RTR_SIGNATURE, "{name}");
        let major = t
            .read_u16(header + off(d, "ReadyToRunHeader", "MajorVersion"))
            .unwrap();
        let minor = t
            .read_u16(header + off(d, "ReadyToRunHeader", "MinorVersion"))
            .unwrap();
        assert_eq!((major, minor), (9, 1), "{name}");
        assert_eq!((major, minor), (file.major, file.minor), "{name}");

        // Not composite: CompositeInfo is the ReadyToRunInfo itself.
        assert_eq!(
            ptr_field(t, d, ri, "ReadyToRunInfo", "CompositeInfo"),
            ri,
            "{name}"
        );

        // Composite → ReadyToRunCoreInfo.Header → the core header (READYTORUN_HEADER + 8),
        // whose sections are the file's, section for section.
        let core_info = ptr_field(t, d, ri, "ReadyToRunInfo", "Composite");
        let core = ptr_field(t, d, core_info, "ReadyToRunCoreInfo", "Header");
        assert_eq!(core, header + 8, "{name}");
        assert_eq!(
            u32_field(t, d, core, "ReadyToRunCoreHeader", "Flags"),
            file.flags,
            "{name}"
        );
        let count = u32_field(t, d, core, "ReadyToRunCoreHeader", "NumberOfSections");
        assert_eq!(count as usize, file.sections.len(), "{name}");
        let first = core + size(d, "ReadyToRunCoreHeader");
        let mut memory_sections = Vec::new();
        for i in 0..count as u64 {
            let s = first + i * size(d, "ReadyToRunSection");
            let dir = s + off(d, "ReadyToRunSection", "Section");
            memory_sections.push((
                u32_field(t, d, s, "ReadyToRunSection", "Type"),
                u32_field(t, d, dir, "ImageDataDirectory", "VirtualAddress"),
                u32_field(t, d, dir, "ImageDataDirectory", "Size"),
            ));
        }
        assert_eq!(memory_sections, file.sections, "{name}");
        let dir_addr = |ty: u32| {
            file.section_index(ty).map(|i| {
                first
                    + i as u64 * size(d, "ReadyToRunSection")
                    + off(d, "ReadyToRunSection", "Section")
            })
        };

        // RuntimeFunctions / NumRuntimeFunctions: section 102, size / 12 entries.
        let n = u32_field(t, d, ri, "ReadyToRunInfo", "NumRuntimeFunctions") as u64;
        let (rf_rva, rf_size) = file.section(SECTION_RUNTIME_FUNCTIONS).unwrap();
        assert_eq!(n, rf_size as u64 / size(d, "RuntimeFunction"), "{name}");
        assert_eq!(n as usize, file.runtime_functions.len(), "{name}");
        assert_eq!(n, img.expected_functions, "{name}");
        let rf = ptr_field(t, d, ri, "ReadyToRunInfo", "RuntimeFunctions");
        assert_eq!(rf, img.base + rf_rva as u64, "{name}");
        for i in [0, n / 2, n - 1] {
            let e = rf + i * size(d, "RuntimeFunction");
            let got = (
                u32_field(t, d, e, "RuntimeFunction", "BeginAddress"),
                u32_field(t, d, e, "RuntimeFunction", "EndAddress"),
                u32_field(t, d, e, "RuntimeFunction", "UnwindData"),
            );
            assert_eq!(got, file.runtime_functions[i as usize], "{name}: entry {i}");
        }

        // No hot/cold section in these images: the map is empty.
        assert!(file.section(SECTION_HOT_COLD_MAP).is_none(), "{name}");
        assert_eq!(
            u32_field(t, d, ri, "ReadyToRunInfo", "NumHotColdMap"),
            0,
            "{name}"
        );
        assert_eq!(
            ptr_field(t, d, ri, "ReadyToRunInfo", "HotColdMap"),
            0,
            "{name}"
        );

        // DelayLoadMethodCallThunks → section 106's IMAGE_DATA_DIRECTORY in the header.
        let thunks = ptr_field(t, d, ri, "ReadyToRunInfo", "DelayLoadMethodCallThunks");
        let expected = dir_addr(SECTION_DELAY_LOAD_METHOD_CALL_THUNKS);
        assert!(expected.is_some(), "{name}: file has no section 106");
        assert_eq!(Some(thunks), expected, "{name}");
        let (va, sz) = file.section(SECTION_DELAY_LOAD_METHOD_CALL_THUNKS).unwrap();
        assert_eq!(
            u32_field(t, d, thunks, "ImageDataDirectory", "VirtualAddress"),
            va
        );
        assert_eq!(u32_field(t, d, thunks, "ImageDataDirectory", "Size"), sz);

        // ImportSections / NumImportSections: section 101, 20-byte entries.
        let (imp_rva, imp_size) = file.section(SECTION_IMPORT_SECTIONS).unwrap();
        assert_eq!(
            ptr_field(t, d, ri, "ReadyToRunInfo", "ImportSections"),
            img.base + imp_rva as u64,
            "{name}"
        );
        assert_eq!(
            u32_field(t, d, ri, "ReadyToRunInfo", "NumImportSections"),
            imp_size / 20,
            "{name}"
        );

        // .NET 8 keeps no pointer to the debug-info section (105): the runtime finds it in
        // the section table each time. No pointer-sized slot of the object holds it.
        assert!(
            !d.ty("ReadyToRunInfo")
                .unwrap()
                .has_field("DebugInfoSection"),
            "DebugInfoSection must stay out of the .NET 8 descriptor"
        );
        let debug_dir = dir_addr(SECTION_DEBUG_INFO).expect("section 105");
        let (debug_rva, _) = file.section(SECTION_DEBUG_INFO).unwrap();
        for slot in 0..0x200 / 8 {
            let v = t.read_pointer(ri + slot * 8).unwrap();
            assert!(
                v != debug_dir && v != img.base + debug_rva as u64,
                "{name}: ReadyToRunInfo+{:#x} points at the debug-info section",
                slot * 8
            );
        }

        // EntryPointToMethodDescMap: embedded at CompositeInfo + offset.
        let map = ptr_field(t, d, ri, "ReadyToRunInfo", "CompositeInfo")
            + off(d, "ReadyToRunInfo", "EntryPointToMethodDescMap");
        let (buckets, bucket_count, entries) = scan_hash_map(t, d, map);
        assert!(is_prime(bucket_count), "{name}: {bucket_count} buckets");
        let min_entries = if img.name.contains("CoreLib") {
            300
        } else {
            20
        };
        assert!(
            entries.len() >= min_entries,
            "{name}: only {} entry points in the map",
            entries.len()
        );
        let begins: HashSet<u64> = file
            .runtime_functions
            .iter()
            .map(|r| img.base + r.0 as u64)
            .collect();
        let mut own = 0;
        for (&key, &value) in &entries {
            // Keys: entry points, i.e. RUNTIME_FUNCTION begins of this image's code.
            assert!(
                begins.contains(&key),
                "{name}: key {key:#x} is no method start"
            );
            // Values: MethodDesc >> 1, whose chunk → MethodTable → Module is this image's
            // module (or CoreLib's, for code of a CoreLib generic compiled here).
            let md = value << 1;
            let (module, token) = method_desc_module_and_token(t, d, md);
            assert!(
                module == img.module || module == corelib_module,
                "{name}: MethodDesc {md:#x} for {key:#x} has module {module:#x}"
            );
            if module == img.module {
                own += 1;
                // Its MethodDef's entry point in the file's MethodDefEntryPoints section
                // (absent for generic code) is this key.
                if let Some(index) = file.method_def_entry_point(token & 0x00ff_ffff) {
                    assert_eq!(
                        img.base + file.runtime_functions[index].0 as u64,
                        key,
                        "{name}: MethodDesc {md:#x} token {token:#x}"
                    );
                    mdep_checked += 1;
                }
            }
            // The runtime's hash finds what the scan found.
            assert_eq!(
                hash_lookup(t, d, buckets, key),
                Some(value),
                "{name}: hash lookup of {key:#x}"
            );
        }
        assert!(
            own * 10 >= entries.len() * 9,
            "{name}: only {own} of {} MethodDescs are the image's own",
            entries.len()
        );
        // Method starts that never ran are not in the map, and the probe says so.
        let step = if n > 5000 { 7 } else { 1 };
        let mut misses = 0;
        for (i, r) in file.runtime_functions.iter().enumerate().step_by(step) {
            let key = img.base + r.0 as u64;
            let found = hash_lookup(t, d, buckets, key);
            assert_eq!(found, entries.get(&key).copied(), "{name}: function {i}");
            misses += found.is_none() as usize;
        }
        assert!(misses > 100, "{name}: {misses} misses");
    }
    assert!(
        mdep_checked >= 500,
        "{what}: only {mdep_checked} map entries checked against MethodDefEntryPoints"
    );
}

#[test]
fn ready_to_run_info_holds_in_the_live_process() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_ready_to_run_info(&rt, "live");
}

#[test]
fn ready_to_run_info_holds_in_the_full_dump() {
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_ready_to_run_info(&rt, "full dump");
}

// ---------------------------------------------------------------- MethodDesc layouts

/// The emitted methods' MethodDescs: each emitted type has exactly the manifest's methods
/// (static methods, no constructor), all in one chunk, so the chunk's Count is their number
/// and its Size spans them; the module of that type has no ReadyToRunInfo (Reflection.Emit).
fn verify_method_descs(rt: &Runtime, what: &str) {
    let t = rt.target();
    let d = rt.descriptor();
    let align = d.global_value("MethodDescAlignment").unwrap();
    let mut modules = HashSet::new();
    // chunk → (Count + 1, data size, [(MethodDesc, ChunkIndex)])
    let mut chunks = BTreeMap::<u64, (u64, u64, Vec<(u64, u64)>)>::new();
    for m in testbed().emitted() {
        let md = hex(&m["method_desc"]);
        let index = t.read_u8(md + off(d, "MethodDesc", "ChunkIndex")).unwrap() as u64;
        let chunk = md - size(d, "MethodDescChunk") - index * align;
        let data_size = (t
            .read_u8(chunk + off(d, "MethodDescChunk", "Size"))
            .unwrap() as u64
            + 1)
            * align;
        let count = t
            .read_u8(chunk + off(d, "MethodDescChunk", "Count"))
            .unwrap() as u64
            + 1;
        let data = chunk + size(d, "MethodDescChunk");
        assert!(md >= data && md < data + data_size, "{what}: {m}");
        assert!(count >= 1 && count * align <= data_size, "{what}: {m}");
        let (module, token) = method_desc_module_and_token(t, d, md);
        assert_eq!(token >> 24, 0x06, "{what}: {m}");
        assert_ne!(token & 0xff_ffff, 0, "{what}: {m}");
        assert_eq!(
            ptr_field(t, d, module, "Module", "ReadyToRunInfo"),
            0,
            "{what}: {m}"
        );
        modules.insert((m["collectible"].as_bool().unwrap(), module));
        chunks
            .entry(chunk)
            .or_insert((count, data_size, Vec::new()))
            .2
            .push((md, index));
    }
    // Handlers (7 methods), Big (1) and the collectible Worker (2).
    assert_eq!(chunks.len(), 3, "{what}: {chunks:?}");
    for (chunk, (count, data_size, mds)) in &chunks {
        assert_eq!(
            *count,
            mds.len() as u64,
            "{what}: chunk {chunk:#x}: {mds:?}"
        );
        // Same-kind MethodDescs of one size: the chunk data is `count` of them, the first
        // at ChunkIndex 0 and the last ending at the chunk's end.
        assert_eq!(data_size % count, 0, "{what}: chunk {chunk:#x}");
        let each = data_size / count;
        let mut indexes: Vec<u64> = mds.iter().map(|m| m.1 * align).collect();
        indexes.sort();
        let expected: Vec<u64> = (0..*count).map(|i| i * each).collect();
        assert_eq!(indexes, expected, "{what}: chunk {chunk:#x}");
    }
    // One module for the emitted assembly, one for the collectible one.
    assert_eq!(modules.len(), 2, "{what}: {modules:?}");
}

#[test]
fn method_desc_layouts_hold_live_and_in_the_full_dump() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_method_descs(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_method_descs(&rt, "full dump");
}

// ---------------------------------------------------------------- 3. JIT'ed EH clauses

fn kind(flags: u32) -> &'static str {
    if flags & CLAUSE_FAULT != 0 {
        "fault"
    } else if flags & CLAUSE_FINALLY != 0 {
        "finally"
    } else if flags & CLAUSE_FILTER != 0 {
        "filter"
    } else {
        "typed"
    }
}

fn verify_jit_clauses(rt: &Runtime, what: &str) {
    let tb = testbed();
    let t = rt.target();
    let d = rt.descriptor();
    let map = perf_map(Path::new(tb.manifest["perf_map"].as_str().unwrap()));
    let clause_size = size(d, "EEExceptionClause");
    let mut versions = 0;
    let mut seen = BTreeMap::<&str, usize>::new();
    for m in tb.emitted() {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().unwrap(),
            m["name"].as_str().unwrap()
        );
        let expected: Vec<&str> = m["clauses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        for (start, code_size, name) in map.iter().filter(|(_, _, n)| n.contains(&needle)) {
            let header = t.read_pointer(start - 8).unwrap();
            assert_eq!(
                ptr_field(t, d, header, "RealCodeHeader", "MethodDesc"),
                hex(&m["method_desc"]),
                "{what}: {name}"
            );
            let eh = ptr_field(t, d, header, "RealCodeHeader", "EHInfo");
            if expected.is_empty() {
                assert_eq!(eh, 0, "{what}: {name} has EH info");
                continue;
            }
            assert_ne!(eh, 0, "{what}: {name} has no EH info");
            // The clause count is the pointer-sized value just before the EH info; the
            // EE_ILEXCEPTION header (fat section: kind 0x40, 24-bit data size) agrees.
            let count = t.read_pointer(eh - 8).unwrap();
            assert!((1..=64).contains(&count), "{what}: {name}: {count} clauses");
            let sect = t.read_u32(eh).unwrap();
            assert_eq!(sect & 0xff, 0x40, "{what}: {name}");
            assert_eq!((sect >> 8) as u64, count * clause_size, "{what}: {name}");

            // Funclet starts (relative to the method start): the code header's unwind
            // infos, whose RVAs are relative to the range section's begin.
            let rs = find_range_section(t, d, *start).expect("range section");
            let rs_begin = ptr_field(t, d, rs, "RangeSection", "RangeBegin");
            let n_unwind = u32_field(t, d, header, "RealCodeHeader", "NumUnwindInfos") as u64;
            let unwind = header + off(d, "RealCodeHeader", "UnwindInfos");
            let funclets: HashSet<u64> = (0..n_unwind)
                .map(|i| {
                    let e = unwind + i * size(d, "RuntimeFunction");
                    rs_begin + u32_field(t, d, e, "RuntimeFunction", "BeginAddress") as u64 - start
                })
                .collect();
            assert!(
                funclets.contains(&0),
                "{what}: {name}: no main-body unwind info"
            );

            let mut kinds = Vec::new();
            for i in 0..count {
                let c = eh + off(d, "EEILException", "Clauses") + i * clause_size;
                let r = |f: &str| u32_field(t, d, c, "EEExceptionClause", f) as u64;
                let flags = r("Flags") as u32;
                let (ts, te, hs, he) = (
                    r("TryStartPC"),
                    r("TryEndPC"),
                    r("HandlerStartPC"),
                    r("HandlerEndPC"),
                );
                let ctx =
                    format!("{what}: {name} clause {i} flags {flags:#x} {ts}..{te} {hs}..{he}");
                assert!(ts <= te && te <= *code_size, "{ctx}");
                assert!(hs < he && he <= *code_size, "{ctx}");
                assert_eq!(flags & !0x1000_001f, 0, "{ctx}: unknown flag bits");
                if flags & CLAUSE_DUPLICATED != 0 {
                    *seen.entry("duplicated").or_default() += 1;
                    continue;
                }
                assert!(ts < te, "{ctx}");
                // A handler is a funclet (never the main body at offset 0).
                assert!(
                    hs > 0 && funclets.contains(&hs),
                    "{ctx}: handler is no funclet start"
                );
                let k = kind(flags);
                *seen.entry(k).or_default() += 1;
                match k {
                    "filter" => {
                        let filter = r("FilterOffset");
                        // The filter funclet: after the try body, before the handler.
                        assert!(funclets.contains(&filter), "{ctx}: filter {filter}");
                        assert!(te <= filter && filter < hs, "{ctx}: filter {filter}");
                    }
                    "typed" => {
                        let token = r("ClassToken") as u32;
                        let handle = t
                            .read_u64(c + off(d, "EEExceptionClause", "TypeHandle"))
                            .unwrap();
                        if flags & CLAUSE_CACHED_CLASS != 0 {
                            assert!(handle > 0xffff && handle % 8 == 0, "{ctx}: {handle:#x}");
                        } else {
                            // A TypeRef, TypeDef or TypeSpec token, alone in the union.
                            assert!(
                                matches!(token >> 24, 0x01 | 0x02 | 0x1b),
                                "{ctx}: {token:#x}"
                            );
                            assert_ne!(token & 0xff_ffff, 0, "{ctx}");
                            assert_eq!(handle, token as u64, "{ctx}");
                        }
                    }
                    _ => {}
                }
                kinds.push(k);
            }
            // The IL exception table's kinds, in order; optimized code may turn a finally
            // into a fault (finally cloning).
            assert_eq!(kinds.len(), expected.len(), "{what}: {name}: {kinds:?}");
            for (got, want) in kinds.iter().zip(&expected) {
                assert!(
                    got == want || (*want == "finally" && *got == "fault"),
                    "{what}: {name}: {kinds:?} vs {expected:?}"
                );
            }
            versions += 1;
        }
    }
    assert!(
        versions >= 15,
        "{what}: only {versions} code versions with EH"
    );
    for k in ["typed", "finally", "fault", "filter", "duplicated"] {
        assert!(
            seen.get(k).copied().unwrap_or(0) > 0,
            "{what}: no {k} clause: {seen:?}"
        );
    }
}

#[test]
fn jit_exception_clauses_match_the_manifest_live() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_jit_clauses(&rt, "live");
}

#[test]
fn jit_exception_clauses_match_the_manifest_in_the_full_dump() {
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_jit_clauses(&rt, "full dump");
}

// ---------------------------------------------------------------- 4. R2R EH clauses

fn verify_r2r_clauses(rt: &Runtime, what: &str) {
    let t = rt.target();
    let d = rt.descriptor();
    let entry_size = size(d, "ExceptionLookupTableEntry");
    let clause_size = size(d, "R2RExceptionClause");
    let mut filters = 0;
    for img in loaded_images(rt, what) {
        let name = format!("{what}: {}", img.name);
        let file = R2rFile::open(&img.path);
        let begins: HashSet<u32> = file.runtime_functions.iter().map(|r| r.0).collect();
        // Section 104 through the core header's section table, as the runtime finds it.
        let core_info = ptr_field(t, d, img.r2r_info, "ReadyToRunInfo", "Composite");
        let core = ptr_field(t, d, core_info, "ReadyToRunCoreInfo", "Header");
        let count = u32_field(t, d, core, "ReadyToRunCoreHeader", "NumberOfSections") as u64;
        let first = core + size(d, "ReadyToRunCoreHeader");
        let (va, sz) = (0..count)
            .map(|i| first + i * size(d, "ReadyToRunSection"))
            .find(|&s| u32_field(t, d, s, "ReadyToRunSection", "Type") == SECTION_EXCEPTION_INFO)
            .map(|s| {
                let dir = s + off(d, "ReadyToRunSection", "Section");
                (
                    u32_field(t, d, dir, "ImageDataDirectory", "VirtualAddress"),
                    u32_field(t, d, dir, "ImageDataDirectory", "Size"),
                )
            })
            .unwrap_or_else(|| panic!("{name}: no ExceptionInfo section"));
        assert_eq!(
            file.section(SECTION_EXCEPTION_INFO),
            Some((va, sz)),
            "{name}"
        );
        assert_eq!(sz as u64 % entry_size, 0, "{name}");
        let n = sz as u64 / entry_size;
        let table = img.base + va as u64;
        let entry = |i: u64| {
            let e = table + i * entry_size;
            (
                u32_field(t, d, e, "ExceptionLookupTableEntry", "MethodStartRVA"),
                u32_field(t, d, e, "ExceptionLookupTableEntry", "ExceptionInfoRVA"),
            )
        };
        // Sorted method starts, then a sentinel.
        assert_eq!(entry(n - 1).0, u32::MAX, "{name}: no sentinel");
        let mut clauses = 0;
        let mut prev = None;
        for i in 0..n - 1 {
            let (method, info) = entry(i);
            let next_info = entry(i + 1).1;
            assert!(prev < Some(method), "{name}: entry {i} out of order");
            prev = Some(method);
            assert!(
                begins.contains(&method),
                "{name}: {method:#x} is no method start"
            );
            let span = (next_info - info) as u64;
            assert!(
                span > 0 && span % clause_size == 0,
                "{name}: entry {i}: {span} bytes"
            );
            for k in 0..span / clause_size {
                let c = img.base + info as u64 + k * clause_size;
                let r = |f: &str| u32_field(t, d, c, "R2RExceptionClause", f);
                let flags = r("Flags");
                let ctx = format!("{name}: method {method:#x} clause {k} flags {flags:#x}");
                assert_eq!(flags & !0x1f, 0, "{ctx}");
                assert!(r("TryStartPC") <= r("TryEndPC"), "{ctx}");
                assert!(r("HandlerStartPC") < r("HandlerEndPC"), "{ctx}");
                clauses += 1;
                if flags & CLAUSE_DUPLICATED != 0 {
                    continue;
                }
                // (An empty try range does occur: one CoreLib clause, at 67..67.)
                assert!(
                    r("HandlerStartPC") > 0 && begins.contains(&(method + r("HandlerStartPC"))),
                    "{ctx}: handler is no funclet start"
                );
                if flags & CLAUSE_FILTER != 0 {
                    let filter = r("FilterOffset");
                    assert!(
                        filter >= r("TryEndPC") && filter < r("HandlerStartPC"),
                        "{ctx}: filter {filter}"
                    );
                    assert!(
                        begins.contains(&(method + filter)),
                        "{ctx}: filter is no funclet start"
                    );
                    filters += 1;
                } else if kind(flags) == "typed" {
                    let token = r("ClassToken");
                    assert!(
                        matches!(token >> 24, 0x01 | 0x02 | 0x1b),
                        "{ctx}: {token:#x}"
                    );
                }
            }
        }
        assert!(clauses >= 100, "{name}: only {clauses} clauses");
    }
    assert!(filters > 0, "{what}: no filter clause in the R2R images");
}

#[test]
fn r2r_exception_clauses_hold_live_and_in_the_full_dump() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    verify_r2r_clauses(&rt, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    verify_r2r_clauses(&rt, "full dump");
}

// ---------------------------------------------------------------- 2. StoreRichDebugInfo

fn store_rich_debug_info(rt: &Runtime) -> u8 {
    let t = rt.target();
    let d = rt.descriptor();
    let ee = t
        .read_pointer(d.global_value("EEJitManagerAddress").unwrap())
        .unwrap();
    // A C++ object: its first word is a vtable in libcoreclr.so's image.
    let vtable = t.read_pointer(ee).unwrap();
    assert!(rt.module().base <= vtable && vtable < rt.module().end);
    t.read_u8(ee + off(d, "EEJitManager", "StoreRichDebugInfo"))
        .unwrap()
}

/// A second testbed, started with extra environment and stopped on drop.
struct ExtraTestbed {
    manifest: PathBuf,
}

impl ExtraTestbed {
    fn start(env: &[(&str, &str)]) -> (ExtraTestbed, i32) {
        let dir = common::scratch("rich-debug-info");
        let manifest = dir.join("manifest.json");
        let status = Command::new(common::repo().join("scripts/testbed-start"))
            .args(["--variant", testbed().variant.name()])
            .args(["--max-seconds", "600", "--manifest"])
            .arg(&manifest)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/testbed-start");
        assert!(status.success(), "testbed-start failed");
        let pid = serde_json::from_slice::<serde_json::Value>(&std::fs::read(&manifest).unwrap())
            .unwrap()["pid"]
            .as_i64()
            .unwrap() as i32;
        (ExtraTestbed { manifest }, pid)
    }
}

impl Drop for ExtraTestbed {
    fn drop(&mut self) {
        let _ = Command::new(common::repo().join("scripts/testbed-stop"))
            .arg(&self.manifest)
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn store_rich_debug_info_follows_dotnet_rich_debug_info() {
    // The shared testbed runs without DOTNET_RichDebugInfo: the flag is clear.
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    assert_eq!(store_rich_debug_info(&rt), 0, "live");
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).expect("open");
    assert_eq!(store_rich_debug_info(&rt), 0, "full dump");

    // The same runtime started with DOTNET_RichDebugInfo=1 sets it (in LoadJIT).
    let (extra, pid) = ExtraTestbed::start(&[("DOTNET_RichDebugInfo", "1")]);
    let rt = Runtime::attach(pid, &OpenOptions::default()).expect("attach");
    assert_eq!(
        store_rich_debug_info(&rt),
        1,
        "live, DOTNET_RichDebugInfo=1"
    );
    drop(rt);
    drop(extra);
}
