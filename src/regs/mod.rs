//! Register contexts, one folder per architecture (the types every layer passes around,
//! so that the memory and process layers need nothing from the unwinders).

mod x86_64;

pub use x86_64::{x64_reg, X64Context};
