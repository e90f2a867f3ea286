//! Tests that need no real runtime: the library and the `cdac` binary against mock
//! runtime memory, the synthetic .NET 10-style runtime (built with gcc) and file formats.
//! One test binary with a module per subject, so that the crate is linked once.

mod code_versions_mock;
#[path = "../common/mod.rs"]
mod common;
mod descriptor;
mod elf_inputs;
#[path = "../em_mock/mod.rs"]
mod em_mock;
mod execution_manager_mock;
mod execution_manager_synthetic;
mod fuzz_regressions;
mod gc_info;
mod gc_info_body;
#[path = "../common/json_schema.rs"]
mod json_schema;
mod loader_mock;
mod mip_format;
mod nibble_map;
mod perf_data_format;
mod perf_sampler;
mod precode_stubs_mock;
mod r2r_perf_map_format;
mod range_section_map;
mod snapshots;
mod synthetic;
mod synthetic_commands;
