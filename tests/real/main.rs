//! Tests against real .NET runtimes: the testbed (`testbed/`, built for .NET 10, 9 and 8
//! by scripts/testbed-setup) live and in dumps, with the runtime's perf map, crossgen2,
//! ClrMD, SOS, gdb and perf as oracles. One test binary with a module per subject, so that
//! the crate is linked once; the testbeds each variant shares are started once for all.

mod analyze;
mod arm64;
mod async_chains;
mod busy_heap;
mod callback_target;
#[path = "../common/mod.rs"]
mod common;
mod containers;
mod corrupt_corpus;
mod coverage_net8;
mod damage_suite;
mod degrade_net11;
mod ecma_metadata;
#[path = "../em_mock/mod.rs"]
mod em_mock;
mod enumerate_code;
mod every_command_net10;
mod exception_trace_live;
mod execution_manager_net8;
mod exit_codes;
mod gc_info_net8;
mod gc_info_sos;
mod heap;
mod install;
#[path = "../common/json_schema.rs"]
mod json_schema;
mod limits_net8;
mod live_safety;
mod locks;
mod managed_unwind;
mod names_net8;
mod native_unwind;
mod nativeaot;
mod net8_r2r_layouts;
mod net8_testbed;
mod net8_type_layouts;
mod obj;
mod pdb_testbed;
mod perf_inject;
mod precode_stubs_net8;
mod profile;
mod r2rmap_crossgen2;
mod r2rmap_net8;
mod real_runtimes;
mod roots;
mod sos_long_tail;
mod sos_words;
mod stack_roots;
mod stacks;
mod thread_pool;
mod thread_snapshot;
mod threads;
mod tiers;
mod validation;
mod verify_heap;
mod web;
