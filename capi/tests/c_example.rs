//! The C side of libcdac: the header compiles with gcc and agrees with the library on
//! struct layouts, constants and symbols; the C example `examples/ip2md.c`, built against
//! libcdac.so, answers as the Rust API does on a real .NET 10 core dump.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cdac::{
    CdacArm64Regs, CdacEhClause, CdacField, CdacFrame, CdacGcHandle, CdacHeapSegment, CdacMapping,
    CdacMethodInfo, CdacModule, CdacRootStep, CdacTypeStat, CdacX64Regs,
};
use cdac_core::contracts::execution_manager::{execution_manager, JitType};
use cdac_core::names::MethodNamer;
use cdac_core::runtime::{OpenOptions, Runtime};
use common::{perf_map, scratch, testbed_of, Variant};

/// The directory holding libcdac.so: `deps/` (which `cargo test` builds) or the profile
/// directory above it (which `cargo build` fills), the newer of the two.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps dir");
    let profile = deps.parent().expect("profile dir");
    let modified = |dir: &Path| {
        std::fs::metadata(dir.join("libcdac.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    [deps, profile]
        .into_iter()
        .filter_map(|d| Some((modified(d)?, d.to_path_buf())))
        .max()
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("libcdac.so not found next to {}", exe.display()))
}

/// Runs a program built by [`gcc`] with the library it was linked with (cargo's
/// LD_LIBRARY_PATH, which wins over the program's runpath, may name an older copy).
fn run_c(exe: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("LD_LIBRARY_PATH", lib_dir());
    c
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Compiles C source `src` against cdac.h and libcdac.so into `out`.
fn gcc(src: &Path, out: &Path) {
    let lib = lib_dir();
    let status = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(out)
        .arg(src)
        .arg("-I")
        .arg(include_dir())
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lcdac")
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed on {}", src.display());
}

/// A C program that prints the header's constants and layouts and takes the address of
/// every function (so that linking fails if the library lacks one).
const LAYOUT_C: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include "cdac.h"
#define S(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))
#define C(c) printf("const %s %ld\n", #c, (long)(c))
int main(void) {
    S(cdac_mapping); O(cdac_mapping, end); O(cdac_mapping, file_offset); O(cdac_mapping, path);
    S(cdac_method_info); O(cdac_method_info, hot_size); O(cdac_method_info, relative_offset);
    O(cdac_method_info, kind); O(cdac_method_info, is_funclet);
    S(cdac_x64_regs); O(cdac_x64_regs, r15); O(cdac_x64_regs, valid_mask);
    S(cdac_arm64_regs); O(cdac_arm64_regs, sp); O(cdac_arm64_regs, pc);
    O(cdac_arm64_regs, valid_mask);
    C(CDAC_ARCH_X64); C(CDAC_ARCH_ARM64); C(CDAC_ARM64_REG_X(29)); C(CDAC_ARM64_REG_SP);
    C(CDAC_ARM64_REG_PC); C(CDAC_ARM64_REG_PC_IS_RETURN);
    S(cdac_eh_clause); O(cdac_eh_clause, handler_end); O(cdac_eh_clause, class_token);
    O(cdac_eh_clause, type_handle);
    S(cdac_module); O(cdac_module, size); O(cdac_module, is_dynamic); O(cdac_module, is_mapped);
    S(cdac_heap_segment); O(cdac_heap_segment, flags); O(cdac_heap_segment, heap); O(cdac_heap_segment, kind);
    S(cdac_type_stat); O(cdac_type_stat, total_size); O(cdac_type_stat, is_free);
    S(cdac_gc_handle); O(cdac_gc_handle, secondary); O(cdac_gc_handle, kind); O(cdac_gc_handle, is_strong);
    S(cdac_field); O(cdac_field, offset); O(cdac_field, value); O(cdac_field, value_kind);
    O(cdac_field, depth); O(cdac_field, is_static);
    S(cdac_root_step); O(cdac_root_step, method_table); O(cdac_root_step, slot_offset);
    S(cdac_lock); O(cdac_lock, owner_os_id); O(cdac_lock, kind); O(cdac_lock, sync_block_index);
    S(cdac_async_frame); O(cdac_async_frame, awaiting); O(cdac_async_frame, depth);
    O(cdac_async_frame, state_flags);
    C(CDAC_LOCK_SYNC_BLOCK); C(CDAC_LOCK_THIN); C(CDAC_LOCK_THREADING);
    C(CDAC_VALUE_REFERENCE); C(CDAC_VALUE_STRUCT); C(CDAC_FIELDS_STATICS);
    C(CDAC_ROOT_STRONG_HANDLE); C(CDAC_ROOT_FINALIZER_QUEUE); C(CDAC_ROOT_THREAD_STATIC); C(CDAC_VIA_DEPENDENT - CDAC_VIA_ROOT);
    C(CDAC_EH_TYPED); C(CDAC_EH_FILTER); C(CDAC_EH_FINALLY); C(CDAC_EH_FAULT);
    S(cdac_frame); O(cdac_frame, method_desc); O(cdac_frame, kind); O(cdac_frame, il_offset);
    C(CDAC_OK); C(CDAC_NOT_FOUND); C(CDAC_E_NULL_POINTER); C(CDAC_E_BAD_HANDLE);
    C(CDAC_E_OPEN_FAILED); C(CDAC_E_READ_FAILED); C(CDAC_E_BUFFER_TOO_SMALL); C(CDAC_E_PANIC);
    C(CDAC_E_INVALID_ARGUMENT); C(CDAC_E_RUNTIME_DATA);
    C(CDAC_CODE_UNKNOWN); C(CDAC_CODE_JIT); C(CDAC_CODE_READY_TO_RUN);
    C(CDAC_FRAME_NATIVE); C(CDAC_FRAME_MANAGED);
    C(CDAC_REG_RIP); C(CDAC_REG_RSP); C(CDAC_REG_RBP); C(CDAC_REG_RBX);
    C(CDAC_REG_R12); C(CDAC_REG_R13); C(CDAC_REG_R14); C(CDAC_REG_R15);
    C(CDAC_REG_RIP_IS_RETURN);
    void *fns[] = {
        (void *)cdac_last_error, (void *)cdac_open_pid, (void *)cdac_open_core,
        (void *)cdac_open_callbacks, (void *)cdac_close, (void *)cdac_ip2md,
        (void *)cdac_method_name, (void *)cdac_source_line, (void *)cdac_unwind_step,
        (void *)cdac_stack, (void *)cdac_eh_clauses, (void *)cdac_modules,
        (void *)cdac_module_path, (void *)cdac_heap_segments, (void *)cdac_heap_stat,
        (void *)cdac_type_name, (void *)cdac_gc_handles, (void *)cdac_object_fields,
        (void *)cdac_gcroot, (void *)cdac_locks, (void *)cdac_async_frames,
        (void *)cdac_architecture, (void *)cdac_unwind_step_arm64, (void *)cdac_stack_arm64,
    };
    printf("functions %zu\n", sizeof fns / sizeof fns[0]);
    /* Calls that need no target: a NULL handle and an unknown one. */
    cdac_method_info info;
    C(cdac_ip2md(NULL, 0, &info));
    C(cdac_ip2md((cdac_handle *)fns, 0, &info));
    char buf[128];
    printf("last_error %zu %s\n", cdac_last_error(buf, sizeof buf), buf);
    return 0;
}
"#;

#[test]
fn header_matches_library() {
    let dir = scratch("capi-header");
    let src = dir.join("layout.c");
    std::fs::write(&src, LAYOUT_C).expect("write layout.c");
    let exe = dir.join("layout");
    gcc(&src, &exe);
    let out = run_c(&exe).output().expect("run layout");
    let text_err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{:?}: {text_err}", out.status);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let value = |key: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{key} missing from:\n{text}"))
            .split(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} not a number"))
    };
    use std::mem::{offset_of, size_of};
    let sizes: &[(&str, usize)] = &[
        ("sizeof cdac_mapping", size_of::<CdacMapping>()),
        ("offsetof cdac_mapping.end", offset_of!(CdacMapping, end)),
        (
            "offsetof cdac_mapping.file_offset",
            offset_of!(CdacMapping, file_offset),
        ),
        ("offsetof cdac_mapping.path", offset_of!(CdacMapping, path)),
        ("sizeof cdac_method_info", size_of::<CdacMethodInfo>()),
        (
            "offsetof cdac_method_info.hot_size",
            offset_of!(CdacMethodInfo, hot_size),
        ),
        (
            "offsetof cdac_method_info.relative_offset",
            offset_of!(CdacMethodInfo, relative_offset),
        ),
        (
            "offsetof cdac_method_info.kind",
            offset_of!(CdacMethodInfo, kind),
        ),
        (
            "offsetof cdac_method_info.is_funclet",
            offset_of!(CdacMethodInfo, is_funclet),
        ),
        ("sizeof cdac_x64_regs", size_of::<CdacX64Regs>()),
        ("offsetof cdac_x64_regs.r15", offset_of!(CdacX64Regs, r15)),
        (
            "offsetof cdac_x64_regs.valid_mask",
            offset_of!(CdacX64Regs, valid_mask),
        ),
        ("sizeof cdac_frame", size_of::<CdacFrame>()),
        (
            "offsetof cdac_frame.method_desc",
            offset_of!(CdacFrame, method_desc),
        ),
        ("offsetof cdac_frame.kind", offset_of!(CdacFrame, kind)),
        (
            "offsetof cdac_frame.il_offset",
            offset_of!(CdacFrame, il_offset),
        ),
        ("functions", 24),
        ("sizeof cdac_arm64_regs", size_of::<CdacArm64Regs>()),
        ("offsetof cdac_arm64_regs.sp", offset_of!(CdacArm64Regs, sp)),
        ("offsetof cdac_arm64_regs.pc", offset_of!(CdacArm64Regs, pc)),
        (
            "offsetof cdac_arm64_regs.valid_mask",
            offset_of!(CdacArm64Regs, valid_mask),
        ),
        ("sizeof cdac_heap_segment", size_of::<CdacHeapSegment>()),
        (
            "offsetof cdac_heap_segment.flags",
            offset_of!(CdacHeapSegment, flags),
        ),
        (
            "offsetof cdac_heap_segment.heap",
            offset_of!(CdacHeapSegment, heap),
        ),
        (
            "offsetof cdac_heap_segment.kind",
            offset_of!(CdacHeapSegment, kind),
        ),
        ("sizeof cdac_type_stat", size_of::<CdacTypeStat>()),
        (
            "offsetof cdac_type_stat.total_size",
            offset_of!(CdacTypeStat, total_size),
        ),
        (
            "offsetof cdac_type_stat.is_free",
            offset_of!(CdacTypeStat, is_free),
        ),
        ("sizeof cdac_gc_handle", size_of::<CdacGcHandle>()),
        (
            "offsetof cdac_gc_handle.secondary",
            offset_of!(CdacGcHandle, secondary),
        ),
        (
            "offsetof cdac_gc_handle.kind",
            offset_of!(CdacGcHandle, kind),
        ),
        (
            "offsetof cdac_gc_handle.is_strong",
            offset_of!(CdacGcHandle, is_strong),
        ),
        ("sizeof cdac_lock", size_of::<cdac::CdacLock>()),
        (
            "offsetof cdac_lock.owner_os_id",
            offset_of!(cdac::CdacLock, owner_os_id),
        ),
        ("offsetof cdac_lock.kind", offset_of!(cdac::CdacLock, kind)),
        (
            "offsetof cdac_lock.sync_block_index",
            offset_of!(cdac::CdacLock, sync_block_index),
        ),
        ("sizeof cdac_async_frame", size_of::<cdac::CdacAsyncFrame>()),
        (
            "offsetof cdac_async_frame.awaiting",
            offset_of!(cdac::CdacAsyncFrame, awaiting),
        ),
        (
            "offsetof cdac_async_frame.depth",
            offset_of!(cdac::CdacAsyncFrame, depth),
        ),
        (
            "offsetof cdac_async_frame.state_flags",
            offset_of!(cdac::CdacAsyncFrame, state_flags),
        ),
        ("sizeof cdac_field", size_of::<CdacField>()),
        ("offsetof cdac_field.offset", offset_of!(CdacField, offset)),
        ("offsetof cdac_field.value", offset_of!(CdacField, value)),
        (
            "offsetof cdac_field.value_kind",
            offset_of!(CdacField, value_kind),
        ),
        ("offsetof cdac_field.depth", offset_of!(CdacField, depth)),
        (
            "offsetof cdac_field.is_static",
            offset_of!(CdacField, is_static),
        ),
        ("sizeof cdac_root_step", size_of::<CdacRootStep>()),
        (
            "offsetof cdac_root_step.method_table",
            offset_of!(CdacRootStep, method_table),
        ),
        (
            "offsetof cdac_root_step.slot_offset",
            offset_of!(CdacRootStep, slot_offset),
        ),
        ("sizeof cdac_eh_clause", size_of::<CdacEhClause>()),
        (
            "offsetof cdac_eh_clause.handler_end",
            offset_of!(CdacEhClause, handler_end),
        ),
        (
            "offsetof cdac_eh_clause.class_token",
            offset_of!(CdacEhClause, class_token),
        ),
        (
            "offsetof cdac_eh_clause.type_handle",
            offset_of!(CdacEhClause, type_handle),
        ),
        ("sizeof cdac_module", size_of::<CdacModule>()),
        ("offsetof cdac_module.size", offset_of!(CdacModule, size)),
        (
            "offsetof cdac_module.is_dynamic",
            offset_of!(CdacModule, is_dynamic),
        ),
        (
            "offsetof cdac_module.is_mapped",
            offset_of!(CdacModule, is_mapped),
        ),
        (
            "const cdac_ip2md(NULL, 0, &info)",
            cdac::CDAC_E_NULL_POINTER as usize,
        ),
        (
            "const cdac_ip2md((cdac_handle *)fns, 0, &info)",
            cdac::CDAC_E_BAD_HANDLE as usize,
        ),
        ("const CDAC_OK", 0),
        ("const CDAC_NOT_FOUND", 1),
    ];
    for &(key, want) in sizes {
        assert_eq!(value(key), want as i64, "{key}");
    }
    let consts: &[(&str, i64)] = &[
        ("CDAC_E_NULL_POINTER", cdac::CDAC_E_NULL_POINTER.into()),
        ("CDAC_E_BAD_HANDLE", cdac::CDAC_E_BAD_HANDLE.into()),
        ("CDAC_E_OPEN_FAILED", cdac::CDAC_E_OPEN_FAILED.into()),
        ("CDAC_E_READ_FAILED", cdac::CDAC_E_READ_FAILED.into()),
        (
            "CDAC_E_BUFFER_TOO_SMALL",
            cdac::CDAC_E_BUFFER_TOO_SMALL.into(),
        ),
        ("CDAC_E_PANIC", cdac::CDAC_E_PANIC.into()),
        (
            "CDAC_E_INVALID_ARGUMENT",
            cdac::CDAC_E_INVALID_ARGUMENT.into(),
        ),
        ("CDAC_E_RUNTIME_DATA", cdac::CDAC_E_RUNTIME_DATA.into()),
        ("CDAC_OK", cdac::CDAC_OK.into()),
        ("CDAC_NOT_FOUND", cdac::CDAC_NOT_FOUND.into()),
        ("CDAC_CODE_UNKNOWN", cdac::CDAC_CODE_UNKNOWN.into()),
        ("CDAC_CODE_JIT", cdac::CDAC_CODE_JIT.into()),
        (
            "CDAC_CODE_READY_TO_RUN",
            cdac::CDAC_CODE_READY_TO_RUN.into(),
        ),
        ("CDAC_FRAME_NATIVE", cdac::CDAC_FRAME_NATIVE.into()),
        ("CDAC_FRAME_MANAGED", cdac::CDAC_FRAME_MANAGED.into()),
        ("CDAC_REG_RIP", cdac::CDAC_REG_RIP.into()),
        ("CDAC_ARCH_X64", cdac::CDAC_ARCH_X64.into()),
        ("CDAC_ARCH_ARM64", cdac::CDAC_ARCH_ARM64.into()),
        ("CDAC_ARM64_REG_X(29)", 1 << 29),
        ("CDAC_ARM64_REG_SP", cdac::CDAC_ARM64_REG_SP as i64),
        ("CDAC_ARM64_REG_PC", cdac::CDAC_ARM64_REG_PC as i64),
        (
            "CDAC_ARM64_REG_PC_IS_RETURN",
            cdac::CDAC_ARM64_REG_PC_IS_RETURN as i64,
        ),
        ("CDAC_REG_RSP", cdac::CDAC_REG_RSP.into()),
        ("CDAC_REG_RBP", cdac::CDAC_REG_RBP.into()),
        ("CDAC_REG_RBX", cdac::CDAC_REG_RBX.into()),
        ("CDAC_REG_R12", cdac::CDAC_REG_R12.into()),
        ("CDAC_REG_R15", cdac::CDAC_REG_R15.into()),
        (
            "CDAC_REG_RIP_IS_RETURN",
            cdac::CDAC_REG_RIP_IS_RETURN.into(),
        ),
        ("CDAC_EH_TYPED", cdac::CDAC_EH_TYPED.into()),
        ("CDAC_EH_FILTER", cdac::CDAC_EH_FILTER.into()),
        ("CDAC_EH_FINALLY", cdac::CDAC_EH_FINALLY.into()),
        ("CDAC_EH_FAULT", cdac::CDAC_EH_FAULT.into()),
        ("CDAC_VALUE_REFERENCE", cdac::CDAC_VALUE_REFERENCE.into()),
        ("CDAC_VALUE_STRUCT", cdac::CDAC_VALUE_STRUCT.into()),
        ("CDAC_FIELDS_STATICS", cdac::CDAC_FIELDS_STATICS.into()),
        (
            "CDAC_ROOT_STRONG_HANDLE",
            cdac::CDAC_ROOT_STRONG_HANDLE.into(),
        ),
        (
            "CDAC_ROOT_FINALIZER_QUEUE",
            cdac::CDAC_ROOT_FINALIZER_QUEUE.into(),
        ),
        (
            "CDAC_ROOT_THREAD_STATIC",
            cdac::CDAC_ROOT_THREAD_STATIC.into(),
        ),
        ("CDAC_LOCK_SYNC_BLOCK", cdac::CDAC_LOCK_SYNC_BLOCK.into()),
        ("CDAC_LOCK_THIN", cdac::CDAC_LOCK_THIN.into()),
        ("CDAC_LOCK_THREADING", cdac::CDAC_LOCK_THREADING.into()),
        (
            "CDAC_VIA_DEPENDENT - CDAC_VIA_ROOT",
            (cdac::CDAC_VIA_DEPENDENT.wrapping_sub(cdac::CDAC_VIA_ROOT)) as i64,
        ),
    ];
    for &(name, want) in consts {
        assert_eq!(value(&format!("const {name}")), want, "{name}");
    }
    assert!(text.contains("is not an open cdac handle"), "{text}");
}

/// Code addresses to ask about: the start and a middle byte of perf-map methods (stubs
/// left out), and an address that is not code.
pub fn sample_addresses(map: &Path, count: usize) -> Vec<u64> {
    let entries: Vec<(u64, u64, String)> = perf_map(map)
        .into_iter()
        .filter(|(_, size, name)| *size > 1 && !name.starts_with("stub"))
        .collect();
    assert!(entries.len() > count, "perf map too small");
    let step = entries.len() / count;
    let mut out: Vec<u64> = entries
        .iter()
        .step_by(step)
        .take(count)
        .flat_map(|(start, size, _)| [*start, start + size / 2])
        .collect();
    out.push(0x1000);
    out
}

#[test]
fn c_example_matches_rust_api() {
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("full");
    let addrs = sample_addresses(&tb.perf_map_for(Some("full")), 40);
    let dir = scratch("capi-example");
    let exe = dir.join("ip2md");
    gcc(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ip2md.c"),
        &exe,
    );
    let out = run_c(&exe)
        .arg(&core)
        .args(addrs.iter().map(|a| format!("{a:x}")))
        .output()
        .expect("run ip2md");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open core");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let mut namer = MethodNamer::for_runtime(&rt);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), addrs.len(), "{text}");
    let mut managed = 0;
    for (ip, line) in addrs.iter().zip(&lines) {
        let want = match em.code_block(*ip).expect("code_block") {
            None => format!("{ip:#x} not managed code"),
            Some(b) => {
                managed += 1;
                let size = em.method_region_info(&b).map(|r| r.hot_size).unwrap_or(0);
                let kind = match b.jit_type {
                    JitType::Jit => "jit",
                    JitType::R2r => "r2r",
                    _ => "unknown",
                };
                let funclet = u32::from(em.is_funclet(&b).unwrap_or(false));
                format!(
                    "{ip:#x} md={:#x} start={:#x} size={size:#x} kind={kind} funclet={funclet} {}",
                    b.method_desc,
                    b.start,
                    namer.name(b.method_desc)
                )
            }
        };
        assert_eq!(*line, want);
    }
    assert!(
        managed >= addrs.len() - 1,
        "{managed} of {} managed",
        addrs.len()
    );
    assert!(text.contains("0x1000 not managed code"));
    eprintln!("ip2md.c: {managed} managed addresses answered as the Rust API does");
}

#[test]
fn python_ctypes_example_matches_the_c_example() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("no python3: skipped");
        return;
    }
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("full");
    let addrs: Vec<String> = sample_addresses(&tb.perf_map_for(Some("full")), 10)
        .iter()
        .map(|a| format!("{a:x}"))
        .collect();
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ip2md.py"))
        .arg(lib_dir().join("libcdac.so"))
        .arg(&core)
        .args(&addrs)
        .output()
        .expect("run python3");
    let py = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{py}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = scratch("capi-example-py");
    let exe = dir.join("ip2md");
    gcc(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ip2md.c"),
        &exe,
    );
    let out = run_c(&exe)
        .arg(&core)
        .args(&addrs)
        .output()
        .expect("run ip2md");
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(py.lines().count(), addrs.len(), "{py}");
    for (p, c) in py.lines().zip(c.lines()) {
        // The C example prints more fields: the Python line's address, MethodDesc, start
        // and name are in it.
        let fields: Vec<&str> = p.split(' ').collect();
        if p.ends_with("not managed code") {
            assert_eq!(p, c);
            continue;
        }
        assert!(
            c.starts_with(&format!("{} {} {}", fields[0], fields[1], fields[2])),
            "{p}\n{c}"
        );
        assert!(c.ends_with(&fields[3..].join(" ")), "{p}\n{c}");
    }
}
