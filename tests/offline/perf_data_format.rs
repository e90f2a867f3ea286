//! `formats::perf_data` on perf.data files made by a small builder of this test (its own
//! layout code, written from the kernel's and perf's documentation, not the parser's): file
//! and pipe layouts in both byte orders, MMAP and MMAP2 (with and without a build id),
//! payloads after AUXTRACE and tracing-data records, and damaged input.
//!
//! A rewrite is checked against a second file built with the names and ids the rewrite
//! should leave: everything else (sizes, trailers, other records) must be byte-identical.

use std::path::PathBuf;

use cdac::formats::perf_data::{
    patched_chunks, plan_rewrite, Header, Layout, PerfDataError, PidRewrites, RewriteOptions,
    RewritePlan,
};
use cdac::formats::Truncation;

const MEMFD: &[u8] = b"/memfd:doublemapper (deleted)";
const CORELIB: &[u8] =
    b"/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.14/System.Private.CoreLib.dll";
const LIBCORECLR: &[u8] = b"/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.14/libcoreclr.so";

/// `//anon` in the room of a name of `len` bytes.
fn anon(len: usize) -> Vec<u8> {
    let mut v = b"//anon".to_vec();
    v.resize(len, 0);
    v
}

/// Writes perf.data bytes. Records carry a `sample_id` trailer of pid, tid and time, as
/// `perf record` writes them with `sample_id_all`.
struct Builder {
    big: bool,
    body: Vec<u8>,
}

impl Builder {
    fn new(big: bool) -> Builder {
        Builder {
            big,
            body: Vec::new(),
        }
    }

    fn put(&self, out: &mut Vec<u8>, v: u64, width: usize) {
        let le = v.to_le_bytes();
        let mut b = le[..width].to_vec();
        if self.big {
            b.reverse();
        }
        out.extend_from_slice(&b);
    }

    /// A record of `kind` whose body (after the 8-byte header) is `body`.
    fn record(&mut self, kind: u32, misc: u16, body: &[u8]) -> &mut Builder {
        let size = 8 + body.len();
        assert!(size <= 0xffff);
        let mut r = Vec::new();
        self.put(&mut r, kind.into(), 4);
        self.put(&mut r, misc.into(), 2);
        self.put(&mut r, size as u64, 2);
        r.extend_from_slice(body);
        self.body.extend_from_slice(&r);
        self
    }

    /// Raw bytes (a payload, or a damaged record).
    fn raw(&mut self, bytes: &[u8]) -> &mut Builder {
        self.body.extend_from_slice(bytes);
        self
    }

    /// The name, its NUL and zero padding to a multiple of 8, then the trailer.
    fn name_and_trailer(&self, out: &mut Vec<u8>, pid: u32, name: &[u8]) {
        out.extend_from_slice(name);
        out.push(0);
        while out.len() % 8 != 0 {
            out.push(0);
        }
        self.put(out, pid.into(), 4);
        self.put(out, (pid + 1).into(), 4);
        self.put(out, 0x1234_5678_9abc, 8);
    }

    /// PERF_RECORD_MMAP (body offsets from the record start: pid 8, addr 16, name 40).
    fn mmap(&mut self, pid: u32, addr: u64, exec: bool, name: &[u8]) -> &mut Builder {
        let mut b = Vec::new();
        self.put(&mut b, pid.into(), 4);
        self.put(&mut b, (pid + 1).into(), 4);
        self.put(&mut b, addr, 8);
        self.put(&mut b, 0x4000, 8);
        self.put(&mut b, 0x1000, 8);
        self.name_and_trailer(&mut b, pid, name);
        let misc = if exec { 2 } else { 2 | 1 << 13 };
        self.record(1, misc, &b)
    }

    /// PERF_RECORD_MMAP2 with device 8:1, inode 77, generation 3 — or a build id.
    fn mmap2(&mut self, pid: u32, addr: u64, prot: u32, name: &[u8], id: Id) -> &mut Builder {
        let mut b = Vec::new();
        self.put(&mut b, pid.into(), 4);
        self.put(&mut b, (pid + 1).into(), 4);
        self.put(&mut b, addr, 8);
        self.put(&mut b, 0x4000, 8);
        self.put(&mut b, 0x2000, 8);
        let mut misc = 2;
        match id {
            Id::Inode => {
                self.put(&mut b, 8, 4);
                self.put(&mut b, 1, 4);
                self.put(&mut b, 77, 8);
                self.put(&mut b, 3, 8);
            }
            Id::Zero => b.extend_from_slice(&[0; 24]),
            Id::Build => {
                misc |= 1 << 14;
                b.push(20);
                b.extend_from_slice(&[0; 3]);
                b.extend((1..=20).map(|i| i as u8 * 7));
            }
        }
        self.put(&mut b, prot.into(), 4);
        self.put(&mut b, 1, 4); // MAP_SHARED
        self.name_and_trailer(&mut b, pid, name);
        self.record(10, misc, &b)
    }

    /// PERF_RECORD_COMM.
    fn comm(&mut self, pid: u32, comm: &[u8]) -> &mut Builder {
        let mut b = Vec::new();
        self.put(&mut b, pid.into(), 4);
        self.put(&mut b, pid.into(), 4);
        self.name_and_trailer(&mut b, pid, comm);
        self.record(3, 0, &b)
    }

    /// PERF_RECORD_AUXTRACE followed by its payload.
    fn auxtrace(&mut self, payload: &[u8]) -> &mut Builder {
        let mut b = Vec::new();
        self.put(&mut b, payload.len() as u64, 8);
        self.put(&mut b, 0, 8); // offset
        self.put(&mut b, 0, 8); // reference
        self.put(&mut b, 0, 4); // idx
        self.put(&mut b, 5, 4); // tid
        self.put(&mut b, 0, 4); // cpu
        self.put(&mut b, 0, 4); // reserved
        self.record(71, 0, &b).raw(payload)
    }

    /// PERF_RECORD_HEADER_TRACING_DATA followed by its payload (a multiple of 8 bytes).
    fn tracing_data(&mut self, payload: &[u8]) -> &mut Builder {
        let mut b = Vec::new();
        self.put(&mut b, payload.len() as u64, 4);
        self.put(&mut b, 0, 4);
        self.record(66, 0, &b).raw(payload)
    }

    /// The file layout: header, 64 bytes standing for attributes, the records, then 32
    /// bytes standing for feature sections; `features` sets bits of the bitmap.
    fn file(&self, features: &[u32]) -> Vec<u8> {
        let mut out = b"PERFILE2".to_vec();
        if self.big {
            out.reverse();
        }
        let attrs_at = 104u64;
        let data_at = attrs_at + 64;
        self.put(&mut out, 104, 8); // header size
        self.put(&mut out, 64, 8); // attr size
        self.put(&mut out, attrs_at, 8);
        self.put(&mut out, 64, 8);
        self.put(&mut out, data_at, 8);
        self.put(&mut out, self.body.len() as u64, 8);
        self.put(&mut out, 0, 8); // event types
        self.put(&mut out, 0, 8);
        let mut bitmap = [0u64; 4];
        for &f in features {
            bitmap[f as usize / 64] |= 1 << (f % 64);
        }
        for w in bitmap {
            self.put(&mut out, w, 8);
        }
        assert_eq!(out.len(), 104);
        out.extend_from_slice(&[0xa5; 64]);
        out.extend_from_slice(&self.body);
        out.extend_from_slice(&[0x5a; 32]);
        out
    }

    /// The pipe layout: magic, header size 16, records.
    fn pipe(&self) -> Vec<u8> {
        let mut out = b"PERFILE2".to_vec();
        if self.big {
            out.reverse();
        }
        self.put(&mut out, 16, 8);
        out.extend_from_slice(&self.body);
        out
    }
}

/// What an MMAP2 record's 24 identifying bytes hold.
#[derive(Clone, Copy)]
enum Id {
    /// Device, inode and generation (what the kernel writes for a file).
    Inode,
    /// Zeros (what it writes for `//anon`).
    Zero,
    /// A build id (misc bit 14, `perf record --buildid-mmap`).
    Build,
}

const EXEC: u32 = 5; // PROT_READ | PROT_EXEC
const RW: u32 = 3;

/// A recording of two .NET processes (100, 200) and a native one (300): their JIT code
/// mappings (executable views, one writable view), images, and other records. With
/// `fixed`, the names and ids the rewrite should leave (`images`: also the `*.dll` ones).
fn mixed(b: &mut Builder, fixed: bool, images: bool) {
    let jit = |n: &[u8]| if fixed { anon(n.len()) } else { n.to_vec() };
    let img = |n: &[u8]| {
        if fixed && images {
            anon(n.len())
        } else {
            n.to_vec()
        }
    };
    let jit_id = if fixed { Id::Zero } else { Id::Inode };
    let img_id = if fixed && images { Id::Zero } else { Id::Inode };
    b.comm(100, b"App")
        .mmap2(100, 0x7f00_0000_0000, EXEC, LIBCORECLR, Id::Inode)
        .mmap2(100, 0x7f10_0000_0000, EXEC, &jit(MEMFD), jit_id)
        .mmap2(100, 0x7f10_0001_0000, RW, MEMFD, Id::Inode)
        .mmap2(100, 0x7f20_0000_0000, EXEC, &img(CORELIB), img_id)
        .mmap2(100, 0x7f20_1000_0000, 1, CORELIB, Id::Inode)
        .mmap(200, 0x7e10_0000_0000, true, &jit(MEMFD))
        .mmap(200, 0x7e10_0001_0000, false, MEMFD)
        .mmap2(200, 0x7e10_0002_0000, EXEC, &jit(MEMFD), jit_id)
        .mmap2(300, 0x5500_0000_0000, EXEC, b"/usr/bin/native", Id::Inode)
        .mmap2(300, 0x5500_1000_0000, EXEC, b"//anon", Id::Zero);
}

fn applied(bytes: &[u8], plan: &RewritePlan) -> Vec<u8> {
    patched_chunks(bytes, &plan.patches).concat()
}

fn counts(jit_code: u64, images: u64) -> PidRewrites {
    PidRewrites { jit_code, images }
}

/// The rewrite of a file equals the file built with the fixed names, in every layout and
/// byte order, with and without images.
#[test]
fn rewrites_exactly_the_executable_dotnet_mappings() {
    for big in [false, true] {
        for pipe in [false, true] {
            for images in [true, false] {
                let what = format!("big={big} pipe={pipe} images={images}");
                let (mut orig, mut want) = (Builder::new(big), Builder::new(big));
                mixed(&mut orig, false, images);
                mixed(&mut want, true, images);
                let (orig, want) = if pipe {
                    (orig.pipe(), want.pipe())
                } else {
                    (orig.file(&[]), want.file(&[]))
                };
                assert_eq!(orig.len(), want.len(), "{what}: record sizes are kept");
                let plan = plan_rewrite(&orig, &RewriteOptions { images }).expect(&what);
                assert_eq!(
                    plan.header.layout,
                    if pipe { Layout::Pipe } else { Layout::File },
                    "{what}"
                );
                assert_eq!(plan.records, 11, "{what}");
                assert_eq!(plan.mappings, 10, "{what}");
                assert_eq!(plan.skipped_not_executable, 2 + u64::from(images), "{what}");
                let mut by_pid: Vec<(u32, PidRewrites)> =
                    plan.by_pid.iter().map(|(p, c)| (*p, *c)).collect();
                by_pid.sort_by_key(|(p, _)| *p);
                assert_eq!(
                    by_pid,
                    [(100, counts(1, u64::from(images))), (200, counts(2, 0))],
                    "{what}"
                );
                let out = applied(&orig, &plan);
                assert!(
                    out == want,
                    "{what}: the rewrite differs from the expected file"
                );
                // Done once, nothing is left to do.
                let again = plan_rewrite(&out, &RewriteOptions { images }).expect(&what);
                assert!(again.patches.is_empty(), "{what}");
                assert_eq!(again.records, plan.records, "{what}");
            }
        }
    }
}

/// A build id in an MMAP2 record stays; only the name changes.
#[test]
fn build_id_mappings_keep_their_build_id() {
    for big in [false, true] {
        let mut orig = Builder::new(big);
        orig.mmap2(42, 0x1000, EXEC, MEMFD, Id::Build);
        let mut want = Builder::new(big);
        want.mmap2(42, 0x1000, EXEC, &anon(MEMFD.len()), Id::Build);
        let (orig, want) = (orig.file(&[]), want.file(&[]));
        let plan = plan_rewrite(&orig, &RewriteOptions::default()).expect("parses");
        assert_eq!(plan.by_pid.get(&42), Some(&counts(1, 0)));
        assert_eq!(plan.patches.len(), 1, "only the name is patched");
        assert!(applied(&orig, &plan) == want, "big={big}");
    }
}

/// Payloads after AUXTRACE and tracing-data records are skipped, even when they hold bytes
/// that look like a JIT code mapping.
#[test]
fn payloads_after_auxtrace_and_tracing_data_are_skipped() {
    let mut decoy = Builder::new(false);
    decoy.mmap2(7, 0x1000, EXEC, MEMFD, Id::Inode);
    let decoy = decoy.body.clone();
    assert_eq!(decoy.len() % 8, 0);
    for pipe in [false, true] {
        let mut b = Builder::new(false);
        b.auxtrace(&decoy)
            .tracing_data(&decoy)
            .mmap2(8, 0x2000, EXEC, MEMFD, Id::Inode);
        let bytes = if pipe { b.pipe() } else { b.file(&[]) };
        let plan = plan_rewrite(&bytes, &RewriteOptions::default()).expect("parses");
        assert_eq!(plan.records, 3, "pipe={pipe}");
        assert_eq!(plan.by_pid.keys().copied().collect::<Vec<_>>(), [8]);
        let out = applied(&bytes, &plan);
        let decoy_at = bytes
            .windows(decoy.len())
            .position(|w| w == decoy)
            .expect("decoy");
        assert_eq!(&out[decoy_at..decoy_at + decoy.len()], &decoy[..]);
    }
}

#[test]
fn compressed_and_directory_recordings_are_refused() {
    let mut b = Builder::new(false);
    b.mmap2(1, 0x1000, EXEC, MEMFD, Id::Inode)
        .record(81, 0, &[0; 24]);
    let file = b.file(&[]);
    let err = plan_rewrite(&file, &RewriteOptions::default()).expect_err("compressed");
    let at = 104 + 64 + (b.body.len() - 32) as u64;
    assert_eq!(err, PerfDataError::Compressed { offset: Some(at) });
    assert!(err.to_string().contains("perf record -z"), "{err}");
    assert!(plan_rewrite(&b.pipe(), &RewriteOptions::default()).is_err());
    // The newer aligned form too.
    let mut b2 = Builder::new(true);
    b2.record(83, 0, &[0; 16]);
    assert!(matches!(
        plan_rewrite(&b2.pipe(), &RewriteOptions::default()),
        Err(PerfDataError::Compressed { offset: Some(16) })
    ));
    // The header's feature bits: HEADER_COMPRESSED (27), HEADER_DIR_FORMAT (24).
    let plain = Builder::new(false);
    assert_eq!(
        Header::parse(&plain.file(&[27])),
        Err(PerfDataError::Compressed { offset: None })
    );
    assert_eq!(
        Header::parse(&plain.file(&[24])),
        Err(PerfDataError::DirectoryFormat)
    );
    // Other feature bits are fine.
    assert!(Header::parse(&plain.file(&[2, 3, 11, 200])).is_ok());
}

#[test]
fn headers_that_are_not_perf_data_are_typed_errors() {
    let opts = RewriteOptions::default();
    assert_eq!(
        plan_rewrite(b"PERF", &opts),
        Err(PerfDataError::TooShort { len: 4 })
    );
    assert!(matches!(
        plan_rewrite(&[0x7f; 200], &opts),
        Err(PerfDataError::NotPerfData { .. })
    ));
    let mut v1 = b"PERFFILE".to_vec();
    v1.extend_from_slice(&[0; 200]);
    assert_eq!(plan_rewrite(&v1, &opts), Err(PerfDataError::Version1));
    let mut odd = Builder::new(false).file(&[]);
    odd[8..16].copy_from_slice(&50u64.to_le_bytes());
    assert_eq!(
        plan_rewrite(&odd, &opts),
        Err(PerfDataError::BadHeaderSize { size: 50 })
    );
    // A header claiming file mode, cut short.
    let file = Builder::new(false).file(&[]);
    assert_eq!(
        plan_rewrite(&file[..60], &opts),
        Err(PerfDataError::TooShort { len: 60 })
    );
    // A data section past the end, overlapping the header, or wrapping around.
    for (offset, size) in [(168u64, 1u64 << 20), (8, 16), (u64::MAX - 4, 16)] {
        let mut f = file.clone();
        f[40..48].copy_from_slice(&offset.to_le_bytes());
        f[48..56].copy_from_slice(&size.to_le_bytes());
        assert!(
            matches!(
                plan_rewrite(&f, &opts),
                Err(PerfDataError::DataOutsideFile { .. })
            ),
            "{offset:#x}+{size:#x}"
        );
    }
}

/// Every cut of a pipe-mode file: whole records parse, a cut inside one is `Truncated`.
#[test]
fn every_truncation_is_an_error_or_a_record_boundary() {
    let mut b = Builder::new(false);
    mixed(&mut b, false, true);
    b.auxtrace(&[1; 24]);
    let full = b.pipe();
    let whole = plan_rewrite(&full, &RewriteOptions::default()).expect("whole");
    // Record boundaries, found by our own walk of the builder's output.
    let mut boundaries = vec![16usize];
    let mut pos = 16;
    while pos < full.len() {
        let kind = u32::from_le_bytes(full[pos..pos + 4].try_into().unwrap());
        let mut size = u16::from_le_bytes(full[pos + 6..pos + 8].try_into().unwrap()) as usize;
        if kind == 71 {
            size += u64::from_le_bytes(full[pos + 8..pos + 16].try_into().unwrap()) as usize;
        }
        pos += size;
        boundaries.push(pos);
    }
    assert_eq!(boundaries.len() as u64, whole.records + 1);
    for cut in 16..full.len() {
        match plan_rewrite(&full[..cut], &RewriteOptions::default()) {
            Ok(plan) => {
                let n = boundaries.iter().position(|&b| b == cut);
                assert_eq!(n.map(|n| n as u64), Some(plan.records), "cut at {cut}");
            }
            Err(PerfDataError::Truncated { .. }) => {
                assert!(!boundaries.contains(&cut), "cut at {cut}: a boundary")
            }
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
}

#[test]
fn damaged_records_are_typed_errors_not_hangs() {
    let opts = RewriteOptions::default();
    // Size 0 and 4: such a record would never move a walk forward.
    for size in [0u16, 4] {
        let mut b = Builder::new(false);
        b.raw(&1u32.to_le_bytes())
            .raw(&0u16.to_le_bytes())
            .raw(&size.to_le_bytes());
        b.raw(&[0; 64]);
        assert_eq!(
            plan_rewrite(&b.pipe(), &opts),
            Err(PerfDataError::RecordTooSmall {
                offset: 16,
                kind: 1,
                size,
                min: 8
            })
        );
    }
    // An AUXTRACE payload size that would wrap the offset around.
    let mut b = Builder::new(false);
    b.auxtrace(&[]);
    let mut bytes = b.pipe();
    bytes[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        plan_rewrite(&bytes, &opts),
        Err(PerfDataError::Truncated(Truncation {
            what: "AUXTRACE payload",
            ..
        }))
    ));
    // An MMAP2 record too small for its fixed part, and one whose name has no NUL.
    let mut b = Builder::new(false);
    b.record(10, 2, &[0; 56]);
    assert!(matches!(
        plan_rewrite(&b.pipe(), &opts),
        Err(PerfDataError::RecordTooSmall { kind: 10, .. })
    ));
    let mut b = Builder::new(false);
    let mut body = vec![0u8; 32];
    body.extend_from_slice(b"/memfd:doublemapper");
    b.record(1, 2, &body);
    assert_eq!(
        plan_rewrite(&b.pipe(), &opts),
        Err(PerfDataError::UnterminatedName { offset: 16 })
    );
}

/// A name too short to hold `//anon` is left alone and counted.
#[test]
fn short_image_names_are_skipped() {
    let mut b = Builder::new(false);
    b.mmap2(9, 0x1000, EXEC, b"a.dll", Id::Inode);
    let bytes = b.file(&[]);
    let plan = plan_rewrite(&bytes, &RewriteOptions::default()).expect("parses");
    assert_eq!(plan.skipped_short_name, 1);
    assert!(plan.patches.is_empty());
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/perf_data")
}

/// The fuzz target's seeds are this builder's files (`CDAC_WRITE_FUZZ_SEEDS=1` rewrites
/// them), and each needs rewriting.
#[test]
fn fuzz_seeds_are_the_builders_files() {
    let mut file = Builder::new(false);
    mixed(&mut file, false, true);
    file.auxtrace(&[0; 16]);
    let mut pipe = Builder::new(true);
    pipe.tracing_data(&[0; 8])
        .mmap2(5, 0x1000, EXEC, MEMFD, Id::Build)
        .mmap(5, 0x2000, true, CORELIB);
    let seeds = [("file-le", file.file(&[2])), ("pipe-be", pipe.pipe())];
    for (name, bytes) in seeds {
        let path = seed_dir().join(name);
        if std::env::var_os("CDAC_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(seed_dir()).expect("seed dir");
            std::fs::write(&path, &bytes).expect("write seed");
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(committed == bytes, "{name} differs from the builder's");
        let plan = plan_rewrite(&committed, &RewriteOptions::default()).expect(name);
        assert!(plan.rewritten() >= 2, "{name}");
    }
}
