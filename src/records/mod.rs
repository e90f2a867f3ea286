//! Typed records of the runtime's types, as Microsoft's cDAC has `Data/`: one record per
//! runtime type cdac reads, between the data descriptor and the contracts.
//!
//! A record has two halves. Its *layout* (`ThreadLayout`, ...) is resolved once per
//! runtime from the descriptor: each field's offset and width, an optional field as
//! `None`, a field renamed between runtimes found under whichever name this runtime uses
//! (the record lists the names, newest first, with the versions that use them). The
//! *record* itself (`ThreadRecord`, ...) is one read of the structure at an address:
//! plain values, and for a field this runtime does not have, an accessor that fails
//! naming it, so only the question that needs it fails.
//!
//! Contracts read records, never names: a field that moves is the descriptor's business,
//! one that is renamed is one line in its record.

pub(crate) mod continuation;
pub(crate) mod exception_clause;
mod fields;
pub(crate) mod loader;
pub(crate) mod native_aot;
pub(crate) mod sync_block;
pub(crate) mod thread;

pub(crate) use fields::{missing_field, TypeFields};
