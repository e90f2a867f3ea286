//! A ReadyToRun image in the mock runtime, shaped and damaged by arbitrary bytes: the
//! construction the `r2r_lookups` fuzz target (mode 3) uses, shared with
//! `tests/offline/fuzz_regressions.rs` so that a stored input replays exactly what the fuzzer ran.

use super::{Clause, R2rSpec, Rf, World};

/// MethodDescs the image's methods map to.
pub const MD: u64 = 0x0101_aaa0;
pub const MD2: u64 = 0x0201_aaa0;
pub const MD3: u64 = 0x0301_aaa0;

/// Values off the front of the input; zero past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n.min(self.0.len()));
        self.0 = tail;
        head
    }
    fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let h = self.bytes(2);
        b[..h.len()].copy_from_slice(h);
        u16::from_le_bytes(b)
    }
}

fn clause(flags: u32, try_: (u32, u32), handler: (u32, u32)) -> Clause {
    Clause {
        flags,
        try_start: try_.0,
        try_end: try_.1,
        handler_start: handler.0,
        handler_end: handler.1,
        union: 0,
        type_handle: 0,
    }
}

/// The ReadyToRun image both the mock tests and the fuzz target look up in: five runtime
/// functions at 0x100.. of an image at 0x0c0c_0000 (a method with a 0x40 hot part, a 0x20
/// hot funclet that is its own method unless `split_funclet`, and a 0x40 cold part; two
/// plain methods), a hot/cold map, a 0x100-byte thunk range at 0x3000 and one fault clause.
pub fn split_image(split_funclet: bool) -> R2rSpec {
    let mut spec = R2rSpec::new(
        vec![
            Rf::method_len(0x100, 0x140, if split_funclet { 0xa0 } else { 0x80 }),
            if split_funclet {
                Rf::part(0x140, 0x160)
            } else {
                Rf::method(0x140, 0x160)
            },
            Rf::method(0x200, 0x280),
            Rf::method(0x280, 0x300),
            Rf::part(0x400, 0x440),
        ],
        if split_funclet {
            vec![(0x100, MD), (0x200, MD2)]
        } else {
            vec![(0x100, MD), (0x140, MD3), (0x200, MD2)]
        },
    );
    spec.base = 0x0c0c_0000;
    spec.hot_cold = vec![4, 0];
    spec.thunks = Some((0x3000, 0x100));
    spec.eh = vec![(
        0x100,
        vec![clause(super::CLAUSE_FAULT, (0, 4), (0x40, 0x60))],
    )];
    spec
}

/// The world built from `data` (layout, contract version, hot/cold split, header knobs, up
/// to 16 writes of up to 8 bytes into any allocation) and the ten addresses to look up.
pub fn damaged_r2r_world(data: &[u8]) -> (World, [u64; 10]) {
    let mut input = Cursor(data);
    let flags = input.u8();
    let layout = cdac::memory::DataLayout::ALL[usize::from(flags) % 4];
    let version = 1 + u64::from(flags >> 2 & 1);
    let split = flags & 0x08 != 0;
    let mut w = World::new(layout, version);
    let mut spec = split_image(split);
    let knobs = input.u8();
    if knobs & 1 != 0 {
        spec.major = 5 + u16::from(input.u8() % 6);
        spec.minor = u16::from(input.u8() % 4);
    }
    if knobs & 2 != 0 {
        spec.num_functions_override = Some(u32::from(input.u8()));
    }
    if knobs & 4 != 0 {
        spec.num_hot_cold_override = Some(u32::from(input.u8()));
    }
    if knobs & 8 != 0 {
        spec.buckets = Some(2 + u64::from(input.u8() % 32));
    }
    spec.composite = knobs & 0x10 != 0;
    spec.eh_section = knobs & 0x20 == 0;
    let img = w.add_r2r(&spec);
    // Damage: (allocation, offset, length, bytes)...
    let allocs = w.mem.allocations.clone();
    let mut damages = 0;
    while !input.0.is_empty() && damages < 16 {
        damages += 1;
        let (addr, size) = allocs[usize::from(input.u8()) % allocs.len()];
        let len = u64::from(input.u8() % 9).min(size);
        let at = addr + u64::from(input.u16()) % (size - len + 1);
        let bytes = input.bytes(len as usize).to_vec();
        w.mem.bytes(at, &bytes);
    }
    let b = spec.base;
    let ips = [
        b + 0x100,
        b + 0x13f,
        b + 0x150,
        b + 0x210,
        b + 0x290,
        b + 0x420,
        b + 0x3010,
        b + 0x180,
        b,
        img.base + spec.size - 1,
    ];
    (w, ips)
}
