//! ReadyToRun images read offline, and the ReadyToRun PerfMap (`.ni.r2rmap`) format.
//!
//! * [`image`]: the PE file, READYTORUN_HEADER, section table, runtime functions, PerfMap
//!   debug-directory record, a composite image's component assemblies;
//! * [`native`]: the Native Format primitives of the sections (integers, NativeArray,
//!   NativeHashtable);
//! * [`signature`]: instantiated-method signatures, decoded to a method, its owner type
//!   and its instantiation;
//! * [`methods`]: which method each runtime function belongs to;
//! * `naming`: method names in the runtime's style and in crossgen2's;
//! * [`perf_map`]: the r2rmap text format (parser and writer);
//! * [`symbols`]: an image's r2rmap (plain or composite), named in either style.

pub mod image;
pub mod methods;
mod naming;
pub mod native;
pub mod perf_map;
pub mod signature;
pub mod symbols;

pub use image::{R2rComponent, R2rImage, RuntimeFunction, TargetArch, TargetOs};
pub use naming::NameStyle;
pub use perf_map::{R2rPerfMap, R2rPerfMapEntry, R2rPerfMapError};
pub use symbols::{r2r_perf_map, r2r_perf_map_from_bytes, R2rMapOptions, R2rMapReport};

use crate::formats::cursor::Truncation;

/// Why a ReadyToRun image could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum R2rError {
    /// The PE image could not be parsed (the reason).
    #[error("not a readable PE image: {0}")]
    Pe(String),
    /// The image has no ReadyToRun header.
    #[error("not a ReadyToRun image (no READYTORUN_HEADER)")]
    NotReadyToRun,
    /// A section (by its ReadyToRun section id) the reader needs is absent.
    #[error("the ReadyToRun header lists no section {0}")]
    MissingSection(u32),
    /// A structure lies outside the image file.
    #[error("{what} at RVA {rva:#x} (+{size:#x}) is outside the image file")]
    OutOfImage {
        /// The structure.
        what: String,
        /// Relative virtual address.
        rva: u32,
        /// Size in bytes.
        size: u32,
    },
    /// Native Format data (hashtables, arrays) that does not decode.
    #[error("bad Native Format data at section offset {offset:#x}: {what}")]
    Native {
        /// What did not decode.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
    },
    /// Other inconsistent data (described).
    #[error("damaged image: {0}")]
    Corrupt(String),
    /// The image is one component of a composite image, whose code lives in that image.
    #[error(
        "a component assembly of the composite image {composite:?}, which holds its code: \
         make the map of that image (it lists every component's methods)"
    )]
    ComponentOfComposite {
        /// File name of the composite image.
        composite: String,
    },
    /// A structure is shorter than its fields (offsets within the structure).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// The image's ECMA metadata is unreadable.
    #[error("metadata: {0}")]
    Metadata(#[from] crate::formats::ecma::MetadataError),
}
