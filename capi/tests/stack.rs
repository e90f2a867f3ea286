//! `cdac_stack` and `cdac_unwind_step` on the threads of a real .NET 10 core: the walk
//! through the ABI is the Rust walker's, and stepping managed frames one at a time (as a
//! debugger's frame unwinder does, the native frames below stepped by the test) reaches the
//! same callers.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, CString};

use cdac::*;
use cdac_core::contracts::debug_info::IlOffset;
use cdac_core::runtime::{OpenOptions, Runtime};
use cdac_core::stacks::walk::{FrameCode, StackWalker};
use cdac_core::unwind::aarch64::step_frame_record;
use cdac_core::unwind::native::{NativeFrame, NativeUnwinder};
use cdac_core::unwind::{x64_reg, Arm64Context, Registers, X64Context};
use common::{testbed_of, Variant};

fn last_error() -> String {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let mut buf = vec![0u8; 512];
        let n = cdac_last_error(buf.as_mut_ptr().cast::<c_char>(), buf.len());
        buf.truncate(n.saturating_sub(1).min(511));
        String::from_utf8_lossy(&buf).into_owned()
    }
}

fn regs(ctx: &X64Context, is_return: bool) -> CdacX64Regs {
    let mut r = CdacX64Regs {
        rip: ctx.rip,
        rsp: ctx.rsp(),
        valid_mask: CDAC_REG_RIP | CDAC_REG_RSP,
        ..Default::default()
    };
    let regs = [
        (CDAC_REG_RBP, x64_reg::RBP),
        (CDAC_REG_RBX, x64_reg::RBX),
        (CDAC_REG_R12, x64_reg::R12),
        (CDAC_REG_R13, x64_reg::R12 + 1),
        (CDAC_REG_R14, x64_reg::R12 + 2),
        (CDAC_REG_R15, x64_reg::R15),
    ];
    for (bit, reg) in regs {
        if let Some(v) = ctx.regs[reg] {
            r.valid_mask |= bit;
            match bit {
                CDAC_REG_RBP => r.rbp = v,
                CDAC_REG_RBX => r.rbx = v,
                CDAC_REG_R12 => r.r12 = v,
                CDAC_REG_R13 => r.r13 = v,
                CDAC_REG_R14 => r.r14 = v,
                _ => r.r15 = v,
            }
        }
    }
    if is_return {
        r.valid_mask |= CDAC_REG_RIP_IS_RETURN;
    }
    r
}

#[test]
fn stack_and_unwind_step_match_the_rust_walker() {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let core = testbed_of(Variant::Net10).dump("full");
        let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
        let walker = StackWalker::new(&rt).expect("walker");
        let native = NativeUnwinder::new(rt.target());
        let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );

        // An x64 target takes x64 registers only.
        let mut arch = 0u32;
        assert_eq!(cdac_architecture(h, &mut arch), CDAC_OK, "{}", last_error());
        assert_eq!(arch, CDAC_ARCH_X64);
        let arm64 = CdacArm64Regs {
            pc: 0x1000,
            sp: 0x2000,
            valid_mask: CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP,
            ..Default::default()
        };
        let mut count = 0usize;
        let s = cdac_stack_arm64(h, &arm64, std::ptr::null_mut(), 0, &mut count);
        assert_eq!(s, CDAC_E_INVALID_ARGUMENT);
        assert!(
            last_error().contains("the target is x64"),
            "{}",
            last_error()
        );

        let threads = rt.target().source().threads().expect("threads");
        let (mut managed_frames, mut steps) = (0, 0);
        for t in threads {
            let Some(ctx) = t.context.and_then(|c| c.as_x64().copied()) else {
                continue;
            };
            let want = walker.walk(ctx, rt.target(), &[]);
            // Count first, then fill.
            let mut count = 0usize;
            let s = cdac_stack(h, &regs(&ctx, false), std::ptr::null_mut(), 0, &mut count);
            assert!(
                s == CDAC_E_BUFFER_TOO_SMALL || s == CDAC_OK,
                "{}",
                last_error()
            );
            assert_eq!(count, want.frames.len(), "thread {}", t.tid);
            let mut frames = vec![CdacFrame::default(); count];
            let s = cdac_stack(
                h,
                &regs(&ctx, false),
                frames.as_mut_ptr(),
                count,
                &mut count,
            );
            assert_eq!(s, CDAC_OK, "{}", last_error());
            for (got, w) in frames.iter().zip(&want.frames) {
                let (kind, md) = match w.code {
                    FrameCode::Managed { method_desc, .. } => (CDAC_FRAME_MANAGED, method_desc),
                    FrameCode::Native => (CDAC_FRAME_NATIVE, 0),
                };
                let il = w.il_offset.and_then(IlOffset::il).map_or(-1, |v| v as i32);
                assert_eq!(
                    (got.ip, got.sp, got.method_desc, got.kind, got.il_offset),
                    (w.ip, w.sp, md, kind, il)
                );
                managed_frames += usize::from(kind == CDAC_FRAME_MANAGED);
            }

            // A debugger's unwinder: native frames by CFI (here, the Rust unwinder), managed
            // ones by cdac_unwind_step.
            let mut frame = NativeFrame::innermost(ctx);
            for (k, w) in want.frames.iter().enumerate() {
                assert_eq!(
                    (frame.ctx.rip, frame.ctx.rsp()),
                    (w.ip, w.sp),
                    "thread {} frame {k}",
                    t.tid
                );
                let Some(next) = want.frames.get(k + 1) else {
                    break;
                };
                if next.found_by == cdac_core::stacks::walk::FoundBy::ExplicitFrame {
                    break;
                }
                let r = regs(&frame.ctx, !frame.ip_is_exact);
                let mut out = CdacX64Regs::default();
                let s = cdac_unwind_step(h, &r, &mut out);
                if matches!(w.code, FrameCode::Managed { .. }) {
                    assert_eq!(s, CDAC_OK, "thread {} frame {k}: {}", t.tid, last_error());
                    steps += 1;
                    let mut c = X64Context::new(out.rip, out.rsp, None);
                    let set = [
                        (CDAC_REG_RBP, x64_reg::RBP, out.rbp),
                        (CDAC_REG_RBX, x64_reg::RBX, out.rbx),
                        (CDAC_REG_R12, x64_reg::R12, out.r12),
                        (CDAC_REG_R13, x64_reg::R12 + 1, out.r13),
                        (CDAC_REG_R14, x64_reg::R12 + 2, out.r14),
                        (CDAC_REG_R15, x64_reg::R15, out.r15),
                    ];
                    for (bit, reg, v) in set {
                        if out.valid_mask & bit != 0 {
                            c.regs[reg] = Some(v);
                        }
                    }
                    frame = NativeFrame {
                        ctx: c,
                        ip_is_exact: false,
                    };
                } else {
                    assert_eq!(s, CDAC_NOT_FOUND, "thread {} frame {k}", t.tid);
                    match native.step_frame(&frame, rt.target()) {
                        Ok(Some(n)) => frame = n,
                        _ => match NativeUnwinder::step_frame_pointer(&frame.ctx, rt.target()) {
                            Ok(Some(c)) => {
                                frame = NativeFrame {
                                    ctx: c,
                                    ip_is_exact: false,
                                }
                            }
                            _ => break,
                        },
                    }
                }
            }
        }
        assert!(
            managed_frames > 10 && steps > 10,
            "{managed_frames} managed frames, {steps} steps"
        );
        eprintln!("cdac_stack: {managed_frames} managed frames as the Rust walker; {steps} cdac_unwind_step steps");
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}

fn arm64_regs(ctx: &Arm64Context, is_return: bool) -> CdacArm64Regs {
    let mut r = CdacArm64Regs {
        pc: ctx.pc,
        sp: ctx.sp(),
        valid_mask: CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP,
        ..Default::default()
    };
    for n in 0..31 {
        if let Some(v) = ctx.regs[n] {
            r.x[n] = v;
            r.valid_mask |= 1 << n;
        }
    }
    if is_return {
        r.valid_mask |= CDAC_ARM64_REG_PC_IS_RETURN;
    }
    r
}

fn arm64_context(r: &CdacArm64Regs) -> Arm64Context {
    assert_eq!(
        r.valid_mask & (CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP),
        CDAC_ARM64_REG_PC | CDAC_ARM64_REG_SP
    );
    assert_eq!(
        r.valid_mask & CDAC_ARM64_REG_PC_IS_RETURN,
        0,
        "never in an output"
    );
    let mut c = Arm64Context::new(r.pc, r.sp, None);
    for n in 0..31 {
        if r.valid_mask & (1 << n) != 0 {
            c.regs[n] = Some(r.x[n]);
        }
    }
    c
}

/// The same on the core qemu-user writes of the linux-arm64 .NET 10 testbed: the arm64
/// functions walk as the Rust walker does, and the x64 ones refuse the target by name.
#[test]
fn arm64_stack_and_unwind_step_match_the_rust_walker() {
    let _qemu = common::qemu_lock();
    let tb = common::start_testbed(Variant::Net10Arm64, &[]);
    let core = tb.qemu_core();
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
    let walker = StackWalker::new(&rt).expect("walker");
    let native = NativeUnwinder::new(rt.target());
    let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: the pointers passed to libcdac are live locals (or NULL on purpose), and the
    // handle comes from cdac_open_core.
    unsafe {
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );
        let mut arch = 0u32;
        assert_eq!(cdac_architecture(h, &mut arch), CDAC_OK, "{}", last_error());
        assert_eq!(arch, CDAC_ARCH_ARM64);
        let x64 = CdacX64Regs {
            rip: 0x1000,
            rsp: 0x2000,
            valid_mask: CDAC_REG_RIP | CDAC_REG_RSP,
            ..Default::default()
        };
        let mut count = 0usize;
        let s = cdac_stack(h, &x64, std::ptr::null_mut(), 0, &mut count);
        assert_eq!(s, CDAC_E_INVALID_ARGUMENT);
        assert!(
            last_error().contains("the target is arm64"),
            "{}",
            last_error()
        );
        let mut out = CdacX64Regs::default();
        assert_eq!(cdac_unwind_step(h, &x64, &mut out), CDAC_E_INVALID_ARGUMENT);
        // Registers without sp are refused.
        let no_sp = CdacArm64Regs {
            pc: 0x1000,
            valid_mask: CDAC_ARM64_REG_PC,
            ..Default::default()
        };
        let s = cdac_stack_arm64(h, &no_sp, std::ptr::null_mut(), 0, &mut count);
        assert_eq!(s, CDAC_E_INVALID_ARGUMENT);

        let threads = rt.target().source().threads().expect("threads");
        let (mut managed_frames, mut steps, mut walked) = (0, 0, 0);
        for t in threads {
            let Some(Registers::Arm64(ctx)) = t.context else {
                continue;
            };
            walked += 1;
            let want = walker.walk(ctx, rt.target(), &[]);
            let mut count = 0usize;
            let s = cdac_stack_arm64(
                h,
                &arm64_regs(&ctx, false),
                std::ptr::null_mut(),
                0,
                &mut count,
            );
            assert!(
                s == CDAC_E_BUFFER_TOO_SMALL || s == CDAC_OK,
                "{}",
                last_error()
            );
            assert_eq!(count, want.frames.len(), "thread {}", t.tid);
            let mut frames = vec![CdacFrame::default(); count];
            let s = cdac_stack_arm64(
                h,
                &arm64_regs(&ctx, false),
                frames.as_mut_ptr(),
                count,
                &mut count,
            );
            assert_eq!(s, CDAC_OK, "{}", last_error());
            for (got, w) in frames.iter().zip(&want.frames) {
                let (kind, md) = match w.code {
                    FrameCode::Managed { method_desc, .. } => (CDAC_FRAME_MANAGED, method_desc),
                    FrameCode::Native => (CDAC_FRAME_NATIVE, 0),
                };
                let il = w.il_offset.and_then(IlOffset::il).map_or(-1, |v| v as i32);
                assert_eq!(
                    (got.ip, got.sp, got.method_desc, got.kind, got.il_offset),
                    (w.ip, w.sp, md, kind, il)
                );
                managed_frames += usize::from(kind == CDAC_FRAME_MANAGED);
            }

            // A debugger's unwinder: native frames by CFI or the frame records (here, the
            // Rust unwinder), managed ones by cdac_unwind_step_arm64.
            let mut frame = NativeFrame::innermost(ctx);
            for (k, w) in want.frames.iter().enumerate() {
                assert_eq!(
                    (frame.ctx.pc, frame.ctx.sp()),
                    (w.ip, w.sp),
                    "thread {} frame {k}",
                    t.tid
                );
                let Some(next) = want.frames.get(k + 1) else {
                    break;
                };
                if next.found_by == cdac_core::stacks::walk::FoundBy::ExplicitFrame {
                    break;
                }
                let r = arm64_regs(&frame.ctx, !frame.ip_is_exact);
                let mut out = CdacArm64Regs::default();
                let s = cdac_unwind_step_arm64(h, &r, &mut out);
                if matches!(w.code, FrameCode::Managed { .. }) {
                    assert_eq!(s, CDAC_OK, "thread {} frame {k}: {}", t.tid, last_error());
                    steps += 1;
                    frame = NativeFrame {
                        ctx: arm64_context(&out),
                        ip_is_exact: false,
                    };
                } else {
                    assert_eq!(s, CDAC_NOT_FOUND, "thread {} frame {k}", t.tid);
                    match native.step_frame_arm64(&frame, rt.target()) {
                        Ok(Some(n)) => frame = n,
                        _ => match step_frame_record(&frame.ctx, rt.target()) {
                            Ok(Some(c)) => {
                                frame = NativeFrame {
                                    ctx: c,
                                    ip_is_exact: false,
                                }
                            }
                            _ => break,
                        },
                    }
                }
            }
        }
        assert!(walked > 10, "{walked} threads with arm64 registers");
        assert!(
            managed_frames > 10 && steps > 10,
            "{managed_frames} managed frames, {steps} steps"
        );
        eprintln!(
            "cdac_stack_arm64: {walked} threads, {managed_frames} managed frames as the Rust \
             walker; {steps} cdac_unwind_step_arm64 steps"
        );
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}

#[test]
fn eh_clauses_and_modules_match_the_rust_api() {
    use cdac_core::contracts::execution_manager::execution_manager;
    use cdac_core::contracts::loader;
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("full");
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: the pointers passed to libcdac are live locals (or NULL on purpose), and the
    // handle comes from cdac_open_core.
    unsafe {
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );
        // Clauses of every perf-map method that has some.
        let mut with_clauses = 0;
        for (start, size, name) in common::perf_map(&tb.perf_map_for(Some("full"))) {
            if size == 0 || name.starts_with("stub") {
                continue;
            }
            let Ok(Some(b)) = em.code_block(start) else {
                continue;
            };
            let want = em.exception_clauses(&b).unwrap_or_default();
            let mut count = 0usize;
            let s = cdac_eh_clauses(h, start, std::ptr::null_mut(), 0, &mut count);
            if want.is_empty() {
                assert!(s == CDAC_OK || s < 0, "{start:#x}");
                continue;
            }
            assert_eq!(s, CDAC_E_BUFFER_TOO_SMALL, "{start:#x}: {}", last_error());
            assert_eq!(count, want.len());
            let mut got = vec![CdacEhClause::default(); count];
            let s = cdac_eh_clauses(h, start, got.as_mut_ptr(), got.len(), &mut count);
            assert_eq!(s, CDAC_OK);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    (
                        g.try_start,
                        g.try_end,
                        g.handler_start,
                        g.handler_end,
                        g.flags
                    ),
                    (
                        w.try_start,
                        w.try_end,
                        w.handler_start,
                        w.handler_end,
                        w.flags
                    )
                );
                assert_eq!(g.type_handle, w.type_handle.unwrap_or(0));
            }
            with_clauses += 1;
        }
        assert!(with_clauses > 0);

        let want = loader::modules(rt.target(), rt.descriptor()).expect("modules");
        let mut count = 0usize;
        cdac_modules(h, std::ptr::null_mut(), 0, &mut count);
        assert_eq!(count, want.len());
        let mut got = vec![CdacModule::default(); count];
        assert_eq!(
            cdac_modules(h, got.as_mut_ptr(), count, &mut count),
            CDAC_OK
        );
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((g.address, g.base, g.size), (w.address, w.base, w.size));
            let mut buf = vec![0u8; 4096];
            let mut needed = 0usize;
            let s = cdac_module_path(
                h,
                g.address,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut needed,
            );
            match &w.path {
                Some(p) => {
                    assert_eq!(s, CDAC_OK, "{}", last_error());
                    buf.truncate(needed - 1);
                    assert_eq!(String::from_utf8_lossy(&buf), p.to_string_lossy());
                }
                None => assert_eq!(s, CDAC_NOT_FOUND),
            }
        }
        assert_eq!(
            cdac_module_path(h, 0x10, std::ptr::null_mut(), 0, std::ptr::null_mut()),
            CDAC_E_INVALID_ARGUMENT
        );
        eprintln!(
            "cdac_eh_clauses: {with_clauses} methods with clauses; cdac_modules: {count} modules"
        );
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}

#[test]
fn source_lines_of_managed_frames() {
    use cdac_core::names::MethodNamer;
    use cdac_core::source_lines::SourceLines;
    let core = testbed_of(Variant::Net10).dump("full");
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
    let walker = StackWalker::new(&rt).expect("walker");
    let namer = MethodNamer::for_runtime(&rt);
    let lines = SourceLines::new();
    let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
    let threads = rt.target().source().threads().expect("threads");
    // SAFETY: the pointers passed to libcdac are live locals, and the handle comes from
    // cdac_open_core.
    unsafe {
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );
        let mut found = Vec::new();
        for t in threads {
            let Some(ctx) = t.context.and_then(|c| c.as_x64().copied()) else {
                continue;
            };
            for (k, f) in walker.walk(ctx, rt.target(), &[]).frames.iter().enumerate() {
                let FrameCode::Managed { method_desc, .. } = f.code else {
                    continue;
                };
                let want = f.il_offset.and_then(IlOffset::il).and_then(|il| {
                    let (assembly, token) = namer.method_def(method_desc)?;
                    lines.locate(&assembly, token, il).ok().flatten()
                });
                let ip = if k == 0 { f.ip } else { f.ip - 1 };
                let mut file = vec![0u8; 1024];
                let mut line = 0u32;
                let s = cdac_source_line(h, ip, file.as_mut_ptr().cast(), file.len(), &mut line);
                match want {
                    Some(w) => {
                        assert_eq!(s, CDAC_OK, "{ip:#x}: {}", last_error());
                        let end = file.iter().position(|&b| b == 0).unwrap_or(file.len());
                        let got = String::from_utf8_lossy(&file[..end]).into_owned();
                        assert_eq!((got.as_str(), line), (w.file.as_str(), w.line));
                        found.push(format!("{got}:{line}"));
                    }
                    None => assert!(s != CDAC_OK, "{ip:#x}"),
                }
            }
        }
        assert!(found.iter().any(|f| f.contains("Program.cs")), "{found:?}");
        eprintln!(
            "cdac_source_line: {} frames with a line, e.g. {}",
            found.len(),
            found[0]
        );
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}
