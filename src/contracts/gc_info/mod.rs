//! The GCInfo contract: decoding the GC information the JIT and crossgen write for each
//! method (the `GcInfoEncoder` format of every architecture but x86).
//!
//! The header gives the code length of a method; the body which slots hold object
//! references at which code offsets:
//! - `bit_reader`: the bit stream in target memory (pointer-sized words in target byte
//!   order, least significant bit first) and its variable-length numbers;
//! - `platform`: the per-architecture encoding bases and normalizations
//!   ([`GcInfoArch`]);
//! - [`header`]: the slim and fat headers of GCInfo versions 1 to 4
//!   ([`decode_header`], [`code_length`]);
//! - `body`: the safe points, interruptible ranges and slot table ([`decode`]);
//! - `live_slots`: the live slots at an offset, with the runtime's reporting filters
//!   ([`GcInfo::enumerate_live_slots`]).
//!
//! Which version to decode with: JIT-ed code uses the runtime's `GCInfoVersion` global
//! (2 in .NET 8, 3 in .NET 9, 4 from .NET 10); ReadyToRun code uses the version derived
//! from the image's R2R major version ([`r2r_gc_info_version`]). The layout differs
//! between versions (versions 2 and 3 carry return-kind bits before the code length), so
//! decoding with the wrong version gives wrong lengths. The spec is
//! `contracts/GCInfo.md`.

mod bit_reader;
mod body;
pub mod header;
mod live_slots;
mod platform;

pub use body::{decode, GcInfo, GcSlot, SlotLocation, StackBase, SLOT_INTERIOR, SLOT_PINNED};
pub use header::{
    check_version, code_length, decode_header, r2r_gc_info_version, GcInfoHeader, HEADER_MAX_BYTES,
    MAX_VERSION,
};
pub use live_slots::{
    wants_report_only_leaf, FrameRegisters, GcSlotOptions, LiveSlot, SlotAddress,
};
pub use platform::{Encoding, GcInfoArch};
