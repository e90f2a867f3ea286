//! File formats cdac reads and writes: ECMA-335 metadata (`ecma`), perf maps (`perf_map`),
//! perf recordings (`perf_data`), LLVM MIP profiles (`mip`), ReadyToRun images and their
//! PerfMaps (`r2r`), portable PDBs (`pdb`), NativeAOT's stack-trace metadata (`nativeaot`). Their parsers share one bounds-checked byte
//! cursor and one error for input that ends early (`cursor`, [`Truncation`]).

pub(crate) mod cursor;
pub mod ecma;
pub mod mip;
pub mod nativeaot;
pub mod pdb;
pub mod perf_data;
pub mod perf_map;
pub mod r2r;

pub use cursor::Truncation;
