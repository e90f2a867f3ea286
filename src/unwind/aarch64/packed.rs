//! Packed ARM64 unwind data: a `RUNTIME_FUNCTION` whose unwind word has a low bit set
//! describes a canonical frame in its other 30 bits instead of pointing at `.xdata`.
//!
//! The fields (function length, frame size, saved integer and floating-point registers,
//! homed parameters, frame chaining) fix the prolog: integer registers x19… stored first
//! (the first store allocates the whole save area), then lr when unchained, then d8…,
//! then x0–x7 into their home area, then the locals, the frame record `{x29, lr}` at their
//! bottom when chained. The epilog undoes it in reverse, ending with `ret`.
//!
//! [`PackedUnwind::operations`] lists those instructions in unwinding order, one
//! [`PackedOp`] each, with the prolog and epilog lengths the runtime's own unwinder uses
//! to tell whether the pc is in one: the `mov x29, sp` that ends a chained prolog is not
//! counted (it is last, and undoing it changes nothing), and the home-area stores count as
//! four instructions in the prolog and one in the epilog. Where the pc is inside one, the
//! instructions not run yet (prolog) or run already (epilog) are skipped one by one; the
//! runtime's stepping differs there in corners (a chained frame with more than 512 bytes
//! of locals), where this one undoes what the instructions did.
//!
//! The JIT and crossgen2 emit no packed data (every `RUNTIME_FUNCTION` of the .NET 10
//! linux-arm64 framework points at `.xdata`); code from other compilers may.

use super::unwind_data::UnwindDataError;

/// Largest allocation one `sub sp, sp, #n` of a packed prolog makes.
const MAX_SUB: u64 = 4088;
/// Largest local area a chained frame allocates with its frame-record store alone.
const MAX_PRE_INDEXED_LOCALS: u64 = 512;
/// x19, the first callee-saved register a packed prolog saves.
const X19: usize = 19;
/// x29 (the frame pointer) and x30 (the link register).
const FP: usize = 29;
const LR: usize = 30;

/// The fields of a packed unwind word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedUnwind {
    /// 1: the function has one prolog at its start and one epilog at its end; 2: a
    /// fragment with neither (all of it is body).
    pub flag: u32,
    /// Length of the function in bytes.
    pub function_length: u64,
    /// Floating-point registers saved (d8…): 0 for none, else `reg_f + 1`.
    pub reg_f: u32,
    /// Integer registers saved (x19…), 0–10.
    pub reg_i: u32,
    /// Whether x0–x7 are stored into a home area at the start.
    pub homes_parameters: bool,
    /// 0: unchained; 1: unchained, lr saved with the integer registers; 3: chained (the
    /// frame record `{x29, lr}` at the bottom of the frame).
    pub cr: u32,
    /// Bytes of stack the function allocates.
    pub frame_size: u64,
}

/// One instruction of a packed prolog or epilog as unwinding undoes it: load up to two
/// integer registers from `sp + at` (the second 8 bytes above the first), then add
/// `add_sp` to sp. Floating-point saves and home-area stores load nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedOp {
    /// The registers loaded, by number.
    pub loads: [Option<usize>; 2],
    /// Offset from sp of the first load.
    pub at: u64,
    /// Bytes added to sp after the loads.
    pub add_sp: u64,
    /// The prolog instruction it undoes, as the assembler writes it.
    pub instruction: String,
}

impl PackedOp {
    fn new(loads: [Option<usize>; 2], at: u64, add_sp: u64, instruction: String) -> PackedOp {
        PackedOp {
            loads,
            at,
            add_sp,
            instruction,
        }
    }
}

fn invalid(word: u32, why: &str) -> UnwindDataError {
    UnwindDataError::BadPacked {
        word,
        detail: why.to_string(),
    }
}

impl PackedUnwind {
    /// Decodes a packed unwind word, refusing the reserved encodings and fields that
    /// describe no frame.
    pub fn decode(word: u32) -> Result<PackedUnwind, UnwindDataError> {
        let p = PackedUnwind {
            flag: word & 3,
            function_length: u64::from((word >> 2) & 0x7ff) * 4,
            reg_f: (word >> 13) & 7,
            reg_i: (word >> 16) & 0xf,
            homes_parameters: (word >> 20) & 1 != 0,
            cr: (word >> 21) & 3,
            frame_size: u64::from(word >> 23) * 16,
        };
        match p.flag {
            0 => return Err(invalid(word, "the word points at .xdata, it is not packed")),
            3 => return Err(invalid(word, "flag 3 is reserved")),
            _ => {}
        }
        // The runtime's unwinder refuses CR 2 (a later revision of the format gives it to
        // chained frames with a signed return address, which add instructions).
        if p.cr == 2 {
            return Err(invalid(word, "CR 2 is reserved"));
        }
        if p.reg_i > 10 {
            return Err(invalid(word, "more than 10 integer registers (x19-x28)"));
        }
        if p.save_size() > p.frame_size {
            return Err(invalid(word, "the save area is larger than the frame"));
        }
        if p.chained() && p.local_size() < 16 {
            return Err(invalid(
                word,
                "a chained frame without room for its frame record",
            ));
        }
        Ok(p)
    }

    fn chained(&self) -> bool {
        self.cr == 3
    }

    /// Bytes of the integer registers saved (lr included when unchained with CR 1).
    fn int_size(&self) -> u64 {
        u64::from(self.reg_i) * 8 + if self.cr == 1 { 8 } else { 0 }
    }

    /// Bytes of the floating-point registers saved.
    fn float_size(&self) -> u64 {
        if self.reg_f == 0 {
            0
        } else {
            u64::from(self.reg_f + 1) * 8
        }
    }

    /// Bytes of the save area (registers and home area), rounded up to 16.
    pub fn save_size(&self) -> u64 {
        let home = if self.homes_parameters { 64 } else { 0 };
        (self.int_size() + self.float_size() + home + 15) & !15
    }

    /// Bytes of locals below the save area (the frame record among them when chained).
    pub fn local_size(&self) -> u64 {
        self.frame_size.saturating_sub(self.save_size())
    }

    /// The prolog's instructions in unwinding order (last executed first), or the
    /// epilog's in execution order (`epilog`: the home area counts as one instruction).
    pub fn operations(&self, epilog: bool) -> Vec<PackedOp> {
        let mut ops = Vec::new();
        let mut locals = self.local_size();
        if self.chained() {
            if locals <= MAX_PRE_INDEXED_LOCALS {
                ops.push(PackedOp::new(
                    [Some(FP), Some(LR)],
                    0,
                    locals,
                    format!("stp x29, x30, [sp, #-{locals}]!"),
                ));
                locals = 0;
            } else {
                ops.push(PackedOp::new(
                    [Some(FP), Some(LR)],
                    0,
                    0,
                    "stp x29, x30, [sp]".to_string(),
                ));
            }
        }
        // The last `sub` first: the one that allocates what is left over 4088.
        while locals != 0 {
            let n = (locals + MAX_SUB - 1) % MAX_SUB + 1;
            ops.push(PackedOp::new(
                [None, None],
                0,
                n,
                format!("sub sp, sp, #{n}"),
            ));
            locals -= n;
        }
        let saves = ops.len();
        if self.homes_parameters {
            let base = self.int_size() + self.float_size();
            let count = if epilog { 1 } else { 4 };
            for k in (0..count).rev() {
                let text = format!("stp x{}, x{}, [sp, #{}]", 2 * k, 2 * k + 1, base + 16 * k);
                ops.push(PackedOp::new([None, None], 0, 0, text));
            }
        }
        if self.reg_f != 0 {
            let mut n = self.reg_f + 1;
            while n != 0 {
                let count = 2 - (n & 1);
                n -= count;
                let at = self.int_size() + 8 * u64::from(n);
                let text = if count == 2 {
                    format!("stp d{}, d{}, [sp, #{at}]", 8 + n, 9 + n)
                } else {
                    format!("str d{}, [sp, #{at}]", 8 + n)
                };
                ops.push(PackedOp::new([None, None], 0, 0, text));
            }
        }
        let mut reg_i = self.reg_i as usize;
        if self.cr == 1 {
            let at = self.int_size() - 8;
            if reg_i % 2 == 1 {
                // lr shares a pair with the last integer register.
                reg_i -= 1;
                let r = X19 + reg_i;
                let text = format!("stp x{r}, x30, [sp, #{}]", at - 8);
                ops.push(PackedOp::new([Some(r), Some(LR)], at - 8, 0, text));
            } else {
                ops.push(PackedOp::new(
                    [Some(LR), None],
                    at,
                    0,
                    format!("str x30, [sp, #{at}]"),
                ));
            }
        }
        while reg_i != 0 {
            let count = 2 - (reg_i & 1);
            reg_i -= count;
            let r = X19 + reg_i;
            let at = 8 * reg_i as u64;
            let (second, text) = if count == 2 {
                (Some(r + 1), format!("stp x{r}, x{}, [sp, #{at}]", r + 1))
            } else {
                (None, format!("str x{r}, [sp, #{at}]"))
            };
            ops.push(PackedOp::new([Some(r), second], at, 0, text));
        }
        // The first store of the prolog (the last to undo) allocates the save area.
        let save = self.save_size();
        if save > 0 {
            if let Some(first) = ops[saves..].last_mut() {
                first.add_sp = save;
                first.instruction = pre_indexed(&first.instruction, save);
            }
        }
        ops
    }

    /// Which operations undo the frame at `offset` bytes into the function, and how many
    /// of them to skip: in a prolog those not yet run, in the epilog those already run.
    /// `exact`: the pc is where the frame is, not a return address (which is never in a
    /// prolog or epilog).
    pub fn plan(&self, offset: u64, exact: bool) -> (Vec<PackedOp>, usize) {
        let prolog = self.operations(false);
        if !exact || self.flag != 1 {
            return (prolog, 0);
        }
        let instruction = (offset / 4) as usize;
        if instruction < prolog.len() {
            let skip = prolog.len() - instruction;
            return (prolog, skip);
        }
        let epilog = self.operations(true);
        let instructions = (self.function_length / 4) as usize;
        // The epilog's first instruction undoes nothing yet: from there on, the body's
        // plan holds; from its second, what it undid is skipped.
        let start = instructions.saturating_sub(epilog.len() + 1);
        if instruction > start {
            // (An offset past the function, which the caller refuses, skips them all.)
            let skip = (instruction - start).min(epilog.len());
            return (epilog, skip);
        }
        (prolog, 0)
    }
}

impl PackedOp {
    /// The epilog instruction that undoes this one: the load of what it stored
    /// (post-indexed where the store was pre-indexed), `add` for `sub`. A home-area store
    /// has nothing to undo but its share of the epilog's count.
    pub fn epilog_instruction(&self) -> String {
        let text = &self.instruction;
        if let Some(rest) = text.strip_prefix("sub sp, sp, ") {
            return format!("add sp, sp, {rest}");
        }
        let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
        let verb = match verb {
            "stp" => "ldp",
            "str" => "ldr",
            other => other,
        };
        if self.loads == [None, None] && verb == "ldp" && rest.starts_with('x') {
            // The home area's store that allocated the save area frees it.
            return match self.add_sp {
                0 => "(home area)".to_string(),
                n => format!("add sp, sp, #{n}"),
            };
        }
        match rest.rsplit_once("[sp, #-") {
            Some((regs, n)) => format!("{verb} {regs}[sp], #{}", n.trim_end_matches(['!', ']'])),
            None => format!("{verb} {rest}"),
        }
    }
}

/// `stp a, b, [sp, #k]` as the pre-indexed store that allocates `save` bytes.
fn pre_indexed(instruction: &str, save: u64) -> String {
    match instruction.rsplit_once("[sp, #") {
        Some((head, _)) => format!("{head}[sp, #-{save}]!"),
        None => instruction.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(flag: u32, len: u32, reg_f: u32, reg_i: u32, h: bool, cr: u32, frame: u32) -> u32 {
        flag | (len << 2)
            | (reg_f << 13)
            | (reg_i << 16)
            | (u32::from(h) << 20)
            | (cr << 21)
            | (frame << 23)
    }

    fn texts(ops: &[PackedOp]) -> Vec<&str> {
        ops.iter().map(|o| o.instruction.as_str()).collect()
    }

    /// The word of Microsoft's "frame-chained, compact-form" example: `str x19, [sp,
    /// #-16]!; sub sp, sp, #0x810; stp fp, lr, [sp]; mov fp, sp` in a function of 492
    /// bytes with a frame of 2080.
    #[test]
    fn the_documented_chained_example_decodes_to_its_prolog() {
        let p = PackedUnwind::decode(0x416101ed).expect("valid");
        assert_eq!(
            (
                p.flag,
                p.function_length,
                p.reg_f,
                p.reg_i,
                p.cr,
                p.frame_size
            ),
            (1, 492, 0, 1, 3, 2080)
        );
        assert!(!p.homes_parameters);
        assert_eq!((p.save_size(), p.local_size()), (16, 0x810));
        let ops = p.operations(false);
        assert_eq!(
            texts(&ops),
            [
                "stp x29, x30, [sp]",
                "sub sp, sp, #2064",
                "str x19, [sp, #-16]!"
            ]
        );
        assert_eq!(ops[0].loads, [Some(FP), Some(LR)]);
        assert_eq!(ops[2].loads, [Some(X19), None]);
        let epilog: Vec<String> = p
            .operations(true)
            .iter()
            .map(PackedOp::epilog_instruction)
            .collect();
        assert_eq!(
            epilog,
            [
                "ldp x29, x30, [sp]",
                "add sp, sp, #2064",
                "ldr x19, [sp], #16"
            ]
        );
        assert_eq!(ops.iter().map(|o| o.add_sp).sum::<u64>(), 2080);
    }

    #[test]
    fn unchained_with_lr_pairs_it_with_the_last_register() {
        // x19–x21 and lr (CR 1), d8–d10, a 128-byte frame.
        let p = PackedUnwind::decode(word(1, 40, 2, 3, false, 1, 8)).expect("valid");
        assert_eq!((p.int_size(), p.float_size(), p.save_size()), (32, 24, 64));
        let ops = p.operations(false);
        assert_eq!(
            texts(&ops),
            [
                "sub sp, sp, #64",
                "str d10, [sp, #48]",
                "stp d8, d9, [sp, #32]",
                "stp x21, x30, [sp, #16]",
                "stp x19, x20, [sp, #-64]!",
            ]
        );
        assert_eq!(ops[3].loads, [Some(21), Some(LR)]);
        assert_eq!(ops[3].at, 16);
    }

    #[test]
    fn large_locals_take_two_subtractions() {
        // A chained frame of 8176 bytes saving x19 and x20: 8160 bytes of locals.
        let p = PackedUnwind::decode(word(1, 100, 0, 2, false, 3, 511)).expect("valid");
        assert_eq!(p.local_size(), 8176 - 16);
        let ops = p.operations(false);
        assert_eq!(
            texts(&ops),
            [
                "stp x29, x30, [sp]",
                "sub sp, sp, #4072",
                "sub sp, sp, #4088",
                "stp x19, x20, [sp, #-16]!",
            ]
        );
    }

    #[test]
    fn homed_parameters_count_four_in_the_prolog_and_one_in_the_epilog() {
        let p = PackedUnwind::decode(word(1, 32, 0, 0, true, 3, 6)).expect("valid");
        assert_eq!((p.save_size(), p.local_size()), (64, 32));
        let prolog = p.operations(false);
        assert_eq!(
            texts(&prolog),
            [
                "stp x29, x30, [sp, #-32]!",
                "stp x6, x7, [sp, #48]",
                "stp x4, x5, [sp, #32]",
                "stp x2, x3, [sp, #16]",
                "stp x0, x1, [sp, #-64]!",
            ]
        );
        let epilog: Vec<String> = p
            .operations(true)
            .iter()
            .map(PackedOp::epilog_instruction)
            .collect();
        assert_eq!(epilog, ["ldp x29, x30, [sp], #32", "add sp, sp, #64"]);
    }

    #[test]
    fn plans_skip_what_has_not_run_and_what_already_ran() {
        let p = PackedUnwind::decode(word(1, 40, 0, 2, false, 3, 4)).expect("valid");
        // Prolog: stp x19, x20, [sp, #-16]!; stp x29, x30, [sp, #-48]!; (mov x29, sp).
        assert_eq!(p.plan(0, true).1, 2);
        assert_eq!(p.plan(4, true).1, 1);
        assert_eq!(p.plan(8, true).1, 0);
        // Epilog of 2 + ret at instructions 37–39: at its first, nothing is undone yet.
        assert_eq!(p.plan(37 * 4, true).1, 0);
        assert_eq!(p.plan(38 * 4, true).1, 1);
        assert_eq!(p.plan(39 * 4, true).1, 2);
        // A return address is in the body; a fragment (flag 2) has neither.
        assert_eq!(p.plan(0, false).1, 0);
        let f = PackedUnwind::decode(word(2, 40, 0, 2, false, 3, 4)).expect("valid");
        assert_eq!(f.plan(0, true).1, 0);
    }

    /// Over every combination of fields: a word either is refused or its prolog, undone
    /// whole, pops exactly its frame and loads only callee-saved registers and lr, each
    /// once; its epilog is no longer than its prolog.
    #[test]
    fn every_accepted_word_pops_its_whole_frame() {
        let mut accepted = 0;
        for frame in 0..512 {
            for cr in 0..4 {
                for h in [false, true] {
                    for reg_i in 0..16 {
                        for reg_f in 0..8 {
                            let Ok(p) =
                                PackedUnwind::decode(word(1, 64, reg_f, reg_i, h, cr, frame))
                            else {
                                continue;
                            };
                            accepted += 1;
                            let ops = p.operations(false);
                            let popped: u64 = ops.iter().map(|o| o.add_sp).sum();
                            assert_eq!(popped, p.frame_size, "{p:?}");
                            let mut loaded: Vec<usize> =
                                ops.iter().flat_map(|o| o.loads).flatten().collect();
                            let n = loaded.len();
                            loaded.sort_unstable();
                            loaded.dedup();
                            assert_eq!(loaded.len(), n, "{p:?}: a register loaded twice");
                            assert!(loaded.iter().all(|r| (X19..=LR).contains(r)), "{p:?}");
                            assert_eq!(loaded.contains(&LR), p.cr != 0, "{p:?}");
                            assert!(p.operations(true).len() <= ops.len(), "{p:?}");
                        }
                    }
                }
            }
        }
        assert!(accepted > 100_000, "{accepted}");
    }

    #[test]
    fn reserved_and_impossible_words_are_refused() {
        for (w, why) in [
            (0x1234_5670, "not packed"),
            (word(3, 4, 0, 0, false, 0, 1), "flag 3"),
            (word(1, 4, 0, 0, false, 2, 1), "CR 2"),
            (word(1, 4, 0, 11, false, 0, 8), "more than 10"),
            (word(1, 4, 0, 4, false, 0, 1), "larger than the frame"),
            (word(1, 4, 0, 2, false, 3, 1), "frame record"),
        ] {
            let e = PackedUnwind::decode(w).expect_err(why);
            assert!(e.to_string().contains(why), "{e}");
        }
    }
}
