//! The Windows ARM64 unwind data (`.xdata`) that the JIT and crossgen2 emit for arm64
//! code on every operating system: a header word (function length, epilog count, code
//! words, the E and X bits), an optional extension word, the epilog scopes and the
//! unwind-code bytes. A `RUNTIME_FUNCTION` whose unwind-data word has a low bit set holds
//! packed unwind data instead (`super::packed`).
//!
//! Decoding only: [`super::managed`] runs the codes.

use crate::memory::Target;

/// Most epilog scopes read (the extension word allows 65,535; real methods have a handful).
const MAX_EPILOG_SCOPES: u32 = 4096;

/// Why unwind data could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnwindDataError {
    /// The bytes could not be read.
    #[error("unwind data at {addr:#x} cannot be read: {detail}")]
    Unreadable {
        /// Where the data is.
        addr: u64,
        /// The read error.
        detail: String,
    },
    /// The header says a version this decoder does not know.
    #[error("unwind data at {addr:#x} has version {version} (only 0 is defined)")]
    Version {
        /// Where the data is.
        addr: u64,
        /// The version bits.
        version: u32,
    },
    /// Too many epilog scopes to be real.
    #[error("unwind data at {addr:#x} claims {count} epilog scopes")]
    TooManyEpilogs {
        /// Where the data is.
        addr: u64,
        /// The count it claims.
        count: u32,
    },
    /// A packed unwind word that describes no frame (a reserved encoding, or sizes that
    /// do not fit together).
    #[error("packed unwind data {word:#010x}: {detail}")]
    BadPacked {
        /// The packed word.
        word: u32,
        /// What is wrong with it.
        detail: String,
    },
}

/// One epilog scope: where the epilog starts and which unwind code describes its first
/// instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpilogScope {
    /// Offset of the epilog's first instruction from the function's start, in bytes.
    pub start: u64,
    /// Index in the unwind-code bytes of the code for that instruction.
    pub code_index: usize,
}

/// Decoded `.xdata` of one function (or funclet, or fragment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm64UnwindData {
    /// Length of the function in bytes.
    pub function_length: u64,
    /// Whether exception-handler data follows the codes (the X bit).
    pub has_handler_data: bool,
    /// Epilog scopes; for the E form, the single epilog at the end of the function.
    pub epilogs: Vec<EpilogScope>,
    /// The unwind-code bytes (whole words, so there may be padding after the last `end`).
    pub codes: Vec<u8>,
    /// Total size of header, scopes and codes (where the handler data starts).
    pub size: u64,
}

impl Arm64UnwindData {
    /// Reads the `.xdata` at `addr`.
    pub fn read(target: &Target, addr: u64) -> Result<Arm64UnwindData, UnwindDataError> {
        let unreadable = |at: u64| {
            move |e: crate::memory::ReadError| UnwindDataError::Unreadable {
                addr: at,
                detail: e.to_string(),
            }
        };
        let header = target.read_u32(addr).map_err(unreadable(addr))?;
        let function_length = xdata_function_length(header);
        let version = (header >> 18) & 3;
        if version != 0 {
            return Err(UnwindDataError::Version { addr, version });
        }
        let has_handler_data = header & (1 << 20) != 0;
        let single_epilog = header & (1 << 21) != 0;
        let mut epilog_field = (header >> 22) & 0x1f;
        let mut code_words = (header >> 27) & 0x1f;
        let mut at = addr + 4;
        if epilog_field == 0 && code_words == 0 {
            let ext = target.read_u32(at).map_err(unreadable(at))?;
            epilog_field = ext & 0xffff;
            code_words = (ext >> 16) & 0xff;
            at += 4;
        }
        let scope_count = if single_epilog { 0 } else { epilog_field };
        if scope_count > MAX_EPILOG_SCOPES {
            return Err(UnwindDataError::TooManyEpilogs {
                addr,
                count: scope_count,
            });
        }
        let mut epilogs = Vec::with_capacity(scope_count as usize);
        if scope_count > 0 {
            let bytes = target
                .read_bytes(at, scope_count as usize * 4)
                .map_err(unreadable(at))?;
            for w in bytes.chunks_exact(4) {
                let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                epilogs.push(EpilogScope {
                    start: u64::from(word & 0x3_ffff) * 4,
                    code_index: (word >> 22) as usize,
                });
            }
            at += u64::from(scope_count) * 4;
        }
        let codes = target
            .read_bytes(at, code_words as usize * 4)
            .map_err(unreadable(at))?;
        at += u64::from(code_words) * 4;
        if single_epilog {
            // E form: the epilog-count field is the index of the epilog's first code, and
            // that epilog (one instruction per code up to `end`, the `ret`) ends the
            // function.
            let index = epilog_field as usize;
            let instructions = codes_until_end(&codes, index) as u64 + 1;
            epilogs.push(EpilogScope {
                start: function_length.saturating_sub(instructions * 4),
                code_index: index,
            });
        }
        Ok(Arm64UnwindData {
            function_length,
            has_handler_data,
            epilogs,
            codes,
            size: at - addr,
        })
    }

    /// Number of instructions the prolog has: its codes, up to the first `end`.
    pub fn prolog_instructions(&self) -> usize {
        codes_until_end(&self.codes, 0)
    }

    /// Number of instructions of the epilog whose codes start at `index`, its `ret`
    /// (the `end` code) included.
    pub fn epilog_instructions(&self, index: usize) -> usize {
        codes_until_end(&self.codes, index) + 1
    }
}

/// The packed-data flag of a `RUNTIME_FUNCTION`'s unwind word: 0 when the word is the RVA
/// of `.xdata`.
pub fn packed_flag(unwind_word: u32) -> u32 {
    unwind_word & 3
}

/// Length in bytes of the function whose `.xdata` header word is `header`.
pub fn xdata_function_length(header: u32) -> u64 {
    u64::from(header & 0x3_ffff) * 4
}

/// Length in bytes of the function a packed unwind word describes.
pub fn packed_function_length(unwind_word: u32) -> u64 {
    u64::from((unwind_word >> 2) & 0x7ff) * 4
}

/// Size in bytes of the unwind code starting with `first`.
pub fn code_size(first: u8) -> usize {
    match first {
        0x00..=0xbf => 1,
        0xc0..=0xdf => 2, // alloc_m, save_regp … save_freg_x, alloc_z
        op::ALLOC_L => 4,
        op::ADD_FP => 2,
        op::SAVE_ANY_REG => 3,
        _ => 1,
    }
}

/// How many codes come before the first `end` (or `end_c`) from `index` on: each is one
/// instruction.
fn codes_until_end(codes: &[u8], mut index: usize) -> usize {
    let mut n = 0;
    while let Some(&b) = codes.get(index) {
        if b == op::END || b == op::END_C {
            break;
        }
        n += 1;
        index += code_size(b);
    }
    n
}

/// The last instruction of an epilog (its `end` code): a `ret`, or the branch of a tail
/// call, which the unwind data does not tell apart.
pub const EPILOG_END: &str = "ret (or a tail call)";

/// The instruction the unwind code `code` (its bytes, [`code_size`] of them) stands for,
/// as an assembler writes it: the prolog's store (`stp x29, x30, [sp, #-32]!`), or with
/// `epilog` the load that undoes it (`ldp x29, x30, [sp], #32`). `end` is [`EPILOG_END`]
/// in an epilog; codes that are no instruction (`end_c`, `save_next`) are named as codes.
pub fn describe_code(code: &[u8], epilog: bool) -> String {
    let b0 = code.first().copied().unwrap_or(op::END);
    let b1 = u64::from(code.get(1).copied().unwrap_or(0));
    let z6 = b1 & 0x3f;
    let reg4 = 19 + ((u64::from(b0 & 3) << 2) | (b1 >> 6));
    let freg3 = 8 + ((u64::from(b0 & 1) << 2) | (b1 >> 6));
    let (pair_verb, one_verb) = if epilog {
        ("ldp", "ldr")
    } else {
        ("stp", "str")
    };
    let pair = |a: &str, b: &str, at: Address, epilog: bool| -> String {
        format!("{pair_verb} {a}, {b}, {}", at.text(epilog))
    };
    let one = |r: &str, at: Address| -> String { format!("{one_verb} {r}, {}", at.text(epilog)) };
    match b0 {
        0x00..=0x1f => alloc(u64::from(b0) * 16, epilog),
        0x20..=0x3f => pair("x19", "x20", Address::Pre(u64::from(b0 & 0x1f) * 8), epilog),
        0x40..=0x7f => pair("x29", "x30", Address::At(u64::from(b0 & 0x3f) * 8), epilog),
        0x80..=0xbf => pair(
            "x29",
            "x30",
            Address::Pre((u64::from(b0 & 0x3f) + 1) * 8),
            epilog,
        ),
        0xc0..=0xc7 => alloc(((u64::from(b0 & 7) << 8) | b1) * 16, epilog),
        0xc8..=0xcb => pair(
            &format!("x{reg4}"),
            &format!("x{}", reg4 + 1),
            Address::At(z6 * 8),
            epilog,
        ),
        0xcc..=0xcf => pair(
            &format!("x{reg4}"),
            &format!("x{}", reg4 + 1),
            Address::Pre((z6 + 1) * 8),
            epilog,
        ),
        0xd0..=0xd3 => one(&format!("x{reg4}"), Address::At(z6 * 8)),
        0xd4 | 0xd5 => {
            let reg = 19 + ((u64::from(b0 & 1) << 3) | (b1 >> 5));
            one(&format!("x{reg}"), Address::Pre(((b1 & 0x1f) + 1) * 8))
        }
        0xd6 | 0xd7 => {
            let reg = 19 + 2 * ((u64::from(b0 & 1) << 2) | (b1 >> 6));
            pair(&format!("x{reg}"), "x30", Address::At(z6 * 8), epilog)
        }
        0xd8 | 0xd9 => pair(
            &format!("d{freg3}"),
            &format!("d{}", freg3 + 1),
            Address::At(z6 * 8),
            epilog,
        ),
        0xda | 0xdb => pair(
            &format!("d{freg3}"),
            &format!("d{}", freg3 + 1),
            Address::Pre((z6 + 1) * 8),
            epilog,
        ),
        0xdc | 0xdd => one(&format!("d{freg3}"), Address::At(z6 * 8)),
        0xde => one(
            &format!("d{}", 8 + (b1 >> 5)),
            Address::Pre(((b1 & 0x1f) + 1) * 8),
        ),
        op::ALLOC_L => {
            let x = code
                .get(1..4)
                .map(|b| (u64::from(b[0]) << 16) | (u64::from(b[1]) << 8) | u64::from(b[2]))
                .unwrap_or(0);
            alloc(x * 16, epilog)
        }
        op::SET_FP if epilog => "mov sp, x29".to_string(),
        op::SET_FP => "mov x29, sp".to_string(),
        op::ADD_FP if epilog => format!("sub sp, x29, #{}", b1 * 8),
        op::ADD_FP => format!("add x29, sp, #{}", b1 * 8),
        op::NOP => "nop".to_string(),
        op::END if epilog => EPILOG_END.to_string(),
        op::END => "end".to_string(),
        op::END_C => "end_c".to_string(),
        op::SAVE_NEXT => "save_next".to_string(),
        op::SAVE_ANY_REG => "save_any_reg".to_string(),
        op::PAC_SIGN_LR if epilog => "autibsp".to_string(),
        op::PAC_SIGN_LR => "pacibsp".to_string(),
        other => format!("unwind code {other:#04x}"),
    }
}

/// Where a save goes: `[sp, #n]`, or pre-indexed `[sp, #-n]!` (post-indexed `[sp], #n`
/// when an epilog loads it back).
#[derive(Clone, Copy)]
enum Address {
    At(u64),
    Pre(u64),
}

impl Address {
    fn text(self, epilog: bool) -> String {
        match self {
            Address::At(0) => "[sp]".to_string(),
            Address::At(n) => format!("[sp, #{n}]"),
            Address::Pre(n) if epilog => format!("[sp], #{n}"),
            Address::Pre(n) => format!("[sp, #-{n}]!"),
        }
    }
}

/// `sub sp, sp, #n` (`add` in an epilog), with a shifted immediate as assemblers write
/// multiples of 4096.
fn alloc(n: u64, epilog: bool) -> String {
    let verb = if epilog { "add" } else { "sub" };
    if n >= 4096 && n % 4096 == 0 {
        format!("{verb} sp, sp, #{}, lsl #12", n / 4096)
    } else {
        format!("{verb} sp, sp, #{n}")
    }
}

impl Arm64UnwindData {
    /// The prolog's instructions in execution order (the codes up to the first `end`,
    /// reversed).
    pub fn prolog_text(&self) -> Vec<String> {
        let mut out = self.texts_from(0, false);
        out.reverse();
        out
    }

    /// The instructions of the epilog whose codes start at `index`, [`EPILOG_END`] last.
    pub fn epilog_text(&self, index: usize) -> Vec<String> {
        let mut out = self.texts_from(index, true);
        out.push(EPILOG_END.to_string());
        out
    }

    /// The codes from `index` to the first `end`, each as its instruction (storage order).
    fn texts_from(&self, mut index: usize, epilog: bool) -> Vec<String> {
        let mut codes: Vec<&[u8]> = Vec::new();
        while let Some(&b) = self.codes.get(index) {
            if b == op::END || b == op::END_C || codes.len() >= 1024 {
                break;
            }
            let end = (index + code_size(b)).min(self.codes.len());
            codes.push(&self.codes[index..end]);
            index = end;
        }
        let mut out = Vec::with_capacity(codes.len());
        let mut k = 0;
        while k < codes.len() {
            // A run of `save_next` codes extends the pair save stored after it: the m-th
            // pair after it is the run's m-th code from its end.
            let run = codes[k..]
                .iter()
                .take_while(|c| c[0] == op::SAVE_NEXT)
                .count();
            if run > 0 {
                let base = codes.get(k + run).and_then(|c| pair_save(c));
                for j in 0..run {
                    out.push(match base {
                        Some(p) => p.next(run - j, epilog),
                        None => describe_code(codes[k + j], epilog),
                    });
                }
                k += run;
                continue;
            }
            out.push(describe_code(codes[k], epilog));
            k += 1;
        }
        out
    }
}

/// A register-pair save that `save_next` codes can extend.
#[derive(Clone, Copy)]
struct PairSave {
    /// `x` or `d`.
    bank: char,
    /// The first register of the pair.
    first: u64,
    /// Its offset from sp (after the allocation, for a pre-indexed save).
    offset: u64,
}

impl PairSave {
    /// The instruction of the `m`-th pair after this one: the next registers, 16 bytes on.
    fn next(self, m: usize, epilog: bool) -> String {
        let reg = self.first + 2 * m as u64;
        let verb = if epilog { "ldp" } else { "stp" };
        let at = Address::At(self.offset + 16 * m as u64).text(epilog);
        format!("{verb} {b}{reg}, {b}{}, {at}", reg + 1, b = self.bank)
    }
}

/// The pair save of `code`, when it is one `save_next` can follow.
fn pair_save(code: &[u8]) -> Option<PairSave> {
    let b0 = code[0];
    let b1 = u64::from(code.get(1).copied().unwrap_or(0));
    let reg4 = 19 + ((u64::from(b0 & 3) << 2) | (b1 >> 6));
    let freg3 = 8 + ((u64::from(b0 & 1) << 2) | (b1 >> 6));
    let (bank, first, offset) = match b0 {
        0x20..=0x3f => ('x', 19, 0),
        0xc8..=0xcb => ('x', reg4, (b1 & 0x3f) * 8),
        0xcc..=0xcf => ('x', reg4, 0),
        0xd8 | 0xd9 => ('d', freg3, (b1 & 0x3f) * 8),
        0xda | 0xdb => ('d', freg3, 0),
        _ => return None,
    };
    Some(PairSave {
        bank,
        first,
        offset,
    })
}

/// Unwind-code bytes with fixed values.
pub mod op {
    /// `alloc_l`: a 24-bit allocation in 16-byte units.
    pub const ALLOC_L: u8 = 0xe0;
    /// `set_fp`: `mov fp, sp`.
    pub const SET_FP: u8 = 0xe1;
    /// `add_fp`: `add fp, sp, #x*8`.
    pub const ADD_FP: u8 = 0xe2;
    /// `nop`: an instruction that changes nothing unwinding cares about.
    pub const NOP: u8 = 0xe3;
    /// `end`: the end of a prolog or epilog (the `ret` of an epilog).
    pub const END: u8 = 0xe4;
    /// `end_c`: the end of a chained scope.
    pub const END_C: u8 = 0xe5;
    /// `save_next`: the next register pair after the previous save.
    pub const SAVE_NEXT: u8 = 0xe6;
    /// `save_any_reg`.
    pub const SAVE_ANY_REG: u8 = 0xe7;
    /// `pac_sign_lr`: the return address was signed.
    pub const PAC_SIGN_LR: u8 = 0xfc;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    const AT: u64 = 0x1000;

    fn target(words: &[u32]) -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(AT, 0x100);
        for (i, w) in words.iter().enumerate() {
            r.u32(i * 4, *w);
        }
        b.into_target()
    }

    fn header(len_words: u32, x: bool, e: bool, epilogs: u32, code_words: u32) -> u32 {
        len_words
            | (u32::from(x) << 20)
            | (u32::from(e) << 21)
            | (epilogs << 22)
            | (code_words << 27)
    }

    #[test]
    fn header_scopes_and_codes() {
        // 0x40 instructions, one epilog at instruction 0x3a whose codes start at index 3;
        // codes: save_fplr_x 16 bytes (0x81), set_fp, end | set_fp... as bytes.
        let codes = u32::from_le_bytes([0xe1, 0x81, 0xe4, 0x81]);
        let codes2 = u32::from_le_bytes([0xe4, 0xe3, 0xe3, 0xe3]);
        let scope = 0x3a | (3 << 22);
        let t = target(&[header(0x40, true, false, 1, 2), scope, codes, codes2]);
        let d = Arm64UnwindData::read(&t, AT).expect("decodes");
        assert_eq!(d.function_length, 0x100);
        assert!(d.has_handler_data);
        assert_eq!(
            d.epilogs,
            vec![EpilogScope {
                start: 0xe8,
                code_index: 3
            }]
        );
        assert_eq!(
            d.codes,
            vec![0xe1, 0x81, 0xe4, 0x81, 0xe4, 0xe3, 0xe3, 0xe3]
        );
        assert_eq!(d.size, 16);
        assert_eq!(d.prolog_instructions(), 2);
        assert_eq!(d.epilog_instructions(3), 2);
    }

    #[test]
    fn the_e_form_puts_its_epilog_at_the_end() {
        // E bit, epilog codes at index 0 (the prolog's own, mirrored): 2 codes then end.
        let codes = u32::from_le_bytes([0xe1, 0x81, 0xe4, 0xe3]);
        let t = target(&[header(0x10, false, true, 0, 1), codes]);
        let d = Arm64UnwindData::read(&t, AT).expect("decodes");
        // Three instructions at the end: mov sp, fp; ldp fp, lr, [sp], #16; ret.
        assert_eq!(
            d.epilogs,
            vec![EpilogScope {
                start: 0x40 - 12,
                code_index: 0
            }]
        );
        assert_eq!(d.size, 8);
    }

    #[test]
    fn the_extension_word_holds_large_counts() {
        let ext = 2 | (1 << 16);
        let t = target(&[
            header(0x20, false, false, 0, 0),
            ext,
            0x10,
            0x14 | (1 << 22),
            0xe4e4_e4e4,
        ]);
        let d = Arm64UnwindData::read(&t, AT).expect("decodes");
        assert_eq!(d.epilogs.len(), 2);
        assert_eq!(d.epilogs[1].start, 0x50);
        assert_eq!(d.codes.len(), 4);
        assert_eq!(d.size, 20);
    }

    #[test]
    fn codes_read_as_the_instructions_they_stand_for() {
        let cases: &[(&[u8], &str, &str)] = &[
            (
                &[0x85],
                "stp x29, x30, [sp, #-48]!",
                "ldp x29, x30, [sp], #48",
            ),
            (
                &[0x42],
                "stp x29, x30, [sp, #16]",
                "ldp x29, x30, [sp, #16]",
            ),
            (
                &[0xc8, 0x02],
                "stp x19, x20, [sp, #16]",
                "ldp x19, x20, [sp, #16]",
            ),
            (&[0xd0, 0x84], "str x21, [sp, #32]", "ldr x21, [sp, #32]"),
            (&[0xd4, 0x21], "str x20, [sp, #-16]!", "ldr x20, [sp], #16"),
            (
                &[0xd6, 0x42],
                "stp x21, x30, [sp, #16]",
                "ldp x21, x30, [sp, #16]",
            ),
            (&[0xd8, 0x00], "stp d8, d9, [sp]", "ldp d8, d9, [sp]"),
            (&[0x02], "sub sp, sp, #32", "add sp, sp, #32"),
            (
                &[0xc1, 0x00],
                "sub sp, sp, #1, lsl #12",
                "add sp, sp, #1, lsl #12",
            ),
            (&[0xe1], "mov x29, sp", "mov sp, x29"),
            (&[0xe2, 0x02], "add x29, sp, #16", "sub sp, x29, #16"),
            (&[0xe4], "end", EPILOG_END),
        ];
        for (code, prolog, epilog) in cases {
            assert_eq!(describe_code(code, false), *prolog, "{code:02x?}");
            assert_eq!(describe_code(code, true), *epilog, "{code:02x?}");
        }
    }

    #[test]
    fn save_next_reads_as_the_pairs_it_stands_for() {
        // Codes: save_next, save_next, save_regp x19 at 16, end; as a prolog (reversed) and
        // as an epilog (in order).
        let t = target(&[
            header(0x10, false, true, 0, 2),
            u32::from_le_bytes([0xe6, 0xe6, 0xc8, 0x02]),
            u32::from_le_bytes([0xe4, 0xe3, 0xe3, 0xe3]),
        ]);
        let d = Arm64UnwindData::read(&t, AT).expect("decodes");
        assert_eq!(
            d.prolog_text(),
            [
                "stp x19, x20, [sp, #16]",
                "stp x21, x22, [sp, #32]",
                "stp x23, x24, [sp, #48]"
            ]
        );
        assert_eq!(
            d.epilog_text(0),
            [
                "ldp x23, x24, [sp, #48]",
                "ldp x21, x22, [sp, #32]",
                "ldp x19, x20, [sp, #16]",
                EPILOG_END
            ]
        );
    }

    #[test]
    fn bad_versions_huge_counts_and_short_memory_are_typed_errors() {
        let t = target(&[1 << 18]);
        assert!(matches!(
            Arm64UnwindData::read(&t, AT),
            Err(UnwindDataError::Version { version: 1, .. })
        ));
        let t = target(&[0, 0xffff]);
        assert!(matches!(
            Arm64UnwindData::read(&t, AT),
            Err(UnwindDataError::TooManyEpilogs { count: 0xffff, .. })
        ));
        // 31 code words (124 bytes) run past the mapped region's 0x100 bytes.
        let mut words = vec![0u32; 0x3c];
        words.push(header(4, false, false, 0, 31));
        let t = target(&words);
        assert!(matches!(
            Arm64UnwindData::read(&t, AT + 0xf0),
            Err(UnwindDataError::Unreadable { .. })
        ));
    }

    #[test]
    fn packed_words_are_told_apart() {
        assert_eq!(packed_flag(0x1234_5678 & !3), 0);
        assert_eq!(packed_flag(0x0040_0021), 1);
        assert_eq!(packed_function_length(0x0040_0021), 8 * 4);
    }
}
