//! The ExecutionManager contract: which managed method owns a code address.

pub mod nibble_map;
pub mod range_section_map;
