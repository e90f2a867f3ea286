//! File formats cdac reads and writes: ECMA-335 metadata (`ecma`), perf maps (`perf_map`);
//! ReadyToRun PerfMaps and MIP profiles come with the formats issue.

pub mod ecma;
pub mod perf_map;
