//! File formats cdac reads and writes (perf maps, ReadyToRun PerfMaps, MIP profiles) land with the formats issue.

pub mod ecma;
