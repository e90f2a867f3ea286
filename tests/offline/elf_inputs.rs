//! ELF inputs, good and damaged: the synthetic runtime library "loaded" into test memory
//! (each PT_LOAD placed at its address) must yield its exports and build id through the
//! target, as in a live process; and damaged images and damaged cores must yield errors,
//! never panics.

use crate::common;

use std::sync::Arc;

use cdac::memory::builder::MemoryBuilder;
use cdac::memory::core_dump::CoreDump;
use cdac::memory::elf_image::ElfImage;
use cdac::memory::{DataLayout, MemorySource};
use cdac::runtime::{OpenOptions, Runtime};
use object::{Object, ObjectSegment, ObjectSymbol};

const BASE: u64 = 0x7f00_0000_0000;

/// Deterministic pseudo-random numbers (xorshift64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Places each loadable segment of `file` at BASE + its virtual address, as a loader does
/// (without relocations: the dynamic section keeps file addresses). `None` when the
/// segments cannot be laid out (out of the file, overlapping, or huge).
fn load(file: &[u8]) -> Option<MemoryBuilder> {
    load_at(file, BASE)
}

/// [`load`] at another base address.
fn load_at(file: &[u8], base: u64) -> Option<MemoryBuilder> {
    let parsed = object::File::parse(file).ok()?;
    let mut placed: Vec<(u64, u64, &[u8])> = Vec::new();
    for seg in parsed.segments() {
        let (offset, size) = seg.file_range();
        let bytes = file.get(offset as usize..offset.checked_add(size)? as usize)?;
        let len = seg.size().max(size);
        if len > 64 << 20 {
            return None;
        }
        placed.push((base.checked_add(seg.address())?, len, bytes));
    }
    placed.sort_by_key(|p| p.0);
    if placed.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return None;
    }
    let mut b = MemoryBuilder::new(DataLayout::LE64);
    for (addr, len, bytes) in placed {
        b.region(addr, len as usize).bytes(0, bytes);
    }
    b.map_file(base, base.saturating_add(0x10000), "/fake/libcoreclr.so");
    Some(b)
}

#[test]
fn exports_and_build_id_read_through_target_memory() {
    let path = common::synthetic_dir().join("libcoreclr.so");
    let file = std::fs::read(&path).unwrap();
    let parsed = object::File::parse(&*file).unwrap();
    let expected = parsed
        .dynamic_symbols()
        .find(|s| s.name() == Ok("DotNetRuntimeContractDescriptor"))
        .expect("exported")
        .address();
    let build_id = parsed.build_id().unwrap().expect("build id").to_vec();

    let target = load(&file).expect("loadable").into_target();
    let image = ElfImage::read(&target, BASE, None).expect("image");
    assert_eq!(image.load_bias(), BASE);
    assert_eq!(image.machine(), 62);
    assert_eq!(
        image
            .find_symbol(&target, "DotNetRuntimeContractDescriptor")
            .unwrap(),
        Some(BASE + expected)
    );
    assert_eq!(image.find_symbol(&target, "NoSuchSymbol").unwrap(), None);
    assert_eq!(image.build_id(&target).unwrap(), Some(build_id));
}

#[test]
fn damaged_images_give_errors_not_panics() {
    let path = common::synthetic_dir().join("libcoreclr.so");
    let file = std::fs::read(&path).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut errors = 0;
    for round in 0..400 {
        let mut damaged = file.clone();
        // Damage the headers, program headers, dynamic symbols and hash tables (the first
        // 16 KiB) or a few bytes anywhere.
        let span = if round % 2 == 0 {
            16 << 10
        } else {
            damaged.len()
        };
        for _ in 0..(1 + rng.next() % 8) {
            let at = (rng.next() as usize) % span;
            damaged[at] = rng.next() as u8;
        }
        let Some(memory) = load(&damaged) else {
            continue;
        };
        let target = memory.clone().into_target();
        match ElfImage::read(&target, BASE, None) {
            Err(_) => errors += 1,
            Ok(image) => {
                if image.dynamic_symbols(&target).is_err() {
                    errors += 1;
                }
                let _ = image.build_id(&target);
            }
        }
        let _ = Runtime::open(Arc::new(memory.build()), &OpenOptions::default());
    }
    assert!(errors > 0, "no damage was ever detected");
}

#[test]
fn damaged_core_headers_give_errors_not_panics() {
    let host = common::SyntheticHost::start(&[]);
    let dir = common::scratch("damaged-core");
    let core = dir.join("good.core");
    host.gcore(&core);
    let good = std::fs::read(&core).unwrap();
    let store = host.addr("objects", "thread_store");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let damaged_path = dir.join("damaged.core");
    let mut opened = 0;
    for round in 0..300 {
        let mut bytes = good.clone();
        // ELF and program headers sit at the start; gdb writes the notes at the end.
        let region = match round % 3 {
            0 => 0..4096,
            1 => bytes.len().saturating_sub(16 << 10)..bytes.len(),
            _ => 0..bytes.len(),
        };
        for _ in 0..(1 + rng.next() % 16) {
            let at = region.start + (rng.next() as usize) % (region.end - region.start);
            bytes[at] = rng.next() as u8;
        }
        std::fs::write(&damaged_path, &bytes).unwrap();
        let Ok(dump) = CoreDump::open(&damaged_path) else {
            continue;
        };
        opened += 1;
        let _ = dump.read_exact(store, &mut [0u8; 64]);
        let _ = dump.threads();
        let _ = Runtime::open(Arc::new(dump), &OpenOptions::default());
    }
    assert!(opened > 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn small_and_top_of_address_space_load_biases() {
    let path = common::synthetic_dir().join("libcoreclr.so");
    let file = std::fs::read(&path).unwrap();
    let parsed = object::File::parse(&*file).unwrap();
    let offset = parsed
        .dynamic_symbols()
        .find(|s| s.name() == Ok("DotNetRuntimeContractDescriptor"))
        .unwrap()
        .address();
    // A bias smaller than the image, where file and run-time addresses overlap, and one
    // near the top of the address space.
    for base in [0x1000u64, 0xffff_ffff_fff0_0000] {
        let target = load_at(&file, base).expect("loadable").into_target();
        let image = ElfImage::read(&target, base, None).expect("image");
        assert_eq!(
            image
                .find_symbol(&target, "DotNetRuntimeContractDescriptor")
                .unwrap(),
            Some(base + offset),
            "base {base:#x}"
        );
        // The whole discovery path runs without overflow.
        let _ = Runtime::open(
            Arc::new(load_at(&file, base).unwrap().build()),
            &OpenOptions::default(),
        );
    }
}

#[test]
fn a_mapping_of_terabytes_does_not_make_discovery_scan_it() {
    // A damaged NT_FILE can claim a mapping of any size: the version scan spends a bounded
    // budget on it (unreadable chunks included) and gives up, instead of looping for ages.
    let mut memory = MemoryBuilder::new(DataLayout::LE64);
    memory
        .region(BASE, 0x1000)
        .bytes(0, b"no version string here");
    memory.map_file(BASE, BASE + (100u64 << 40), "/fake/path/libcoreclr.so");
    let target = memory.into_target();
    let modules = cdac::memory::elf_image::modules(target.mapped_files());
    assert_eq!(modules.len(), 1);
    assert_eq!(
        cdac::runtime::discovery::read_version(&target, &modules[0]),
        None
    );
}
