//! ReadyToRun images read offline, and the ReadyToRun PerfMap (`.ni.r2rmap`) format.
//!
//! * [`image`]: the PE file, READYTORUN_HEADER, section table, runtime functions, PerfMap
//!   debug-directory record;
//! * [`native`]: the Native Format primitives of the sections (integers, NativeArray,
//!   NativeHashtable);
//! * [`signature`]: instantiated-method signatures, decoded to a method and its owner
//!   type's arguments;
//! * [`methods`]: which method each runtime function belongs to;
//! * [`perf_map`]: the r2rmap text format (parser and writer);
//! * [`symbols`]: an image's r2rmap, named as the runtime names methods in its perf map.

pub mod image;
pub mod methods;
pub mod native;
pub mod perf_map;
pub mod signature;
pub mod symbols;

pub use image::{R2rImage, RuntimeFunction, TargetArch, TargetOs};
pub use perf_map::{R2rPerfMap, R2rPerfMapEntry, R2rPerfMapError};
pub use symbols::{r2r_perf_map, r2r_perf_map_from_bytes, R2rMapOptions, R2rMapReport};

/// Why a ReadyToRun image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum R2rError {
    #[error("not a readable PE image: {0}")]
    Pe(String),
    #[error("not a ReadyToRun image (no READYTORUN_HEADER)")]
    NotReadyToRun,
    #[error("the ReadyToRun header lists no section {0}")]
    MissingSection(u32),
    #[error("{what} at RVA {rva:#x} (+{size:#x}) is outside the image file")]
    OutOfImage { what: String, rva: u32, size: u32 },
    #[error("bad Native Format data at section offset {offset:#x}: {what}")]
    Native { what: &'static str, offset: usize },
    #[error("damaged image: {0}")]
    Corrupt(String),
    #[error("metadata: {0}")]
    Metadata(#[from] crate::formats::ecma::MetadataError),
}
