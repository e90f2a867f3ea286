//! Limits on how much work target data can make `cdac` do.
//!
//! A damaged dump can hold a list that loops, a count of four billion, a string with no
//! terminator, or a hash chain that never ends. Every walk over target data is bounded by
//! one of the limits here, in the spirit of ClrMD's `DataTargetLimits`: the defaults are far
//! above what a real runtime builds, passing one is a typed error that names the limit
//! ([`Limit`]), and callers (the CLI's `--max-*` options) can raise or lower each of them.

use std::fmt;

/// One of the limits, as named in errors and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Entries of one list, array or table walk read from the target (modules, code heaps,
    /// range section fragments, exception clauses, runtime functions, buckets of an
    /// entry-point map, generic arguments, ...).
    ListLength,
    /// Probes of one hash-table lookup.
    HashChain,
    /// Nibble-map units scanned for one code lookup, or enumerated in one code heap.
    MapScan,
    /// Bytes or code units of one string or name read from the target.
    StringLength,
    /// Bytes of a data descriptor (one, and all of a runtime's together).
    DescriptorSize,
    /// Bytes of one read from the target.
    ReadSize,
    /// Bytes read from the target by one command (one [`crate::memory::Target`] and its
    /// clones), counted as requested, cached or not.
    TotalRead,
    /// A bound built into cdac (a fixed nesting depth, a run of unreadable chunks, a cap
    /// a format's own field widths imply): not adjustable.
    Fixed,
}

impl Limit {
    /// Every adjustable limit.
    pub const ADJUSTABLE: [Limit; 7] = [
        Limit::ListLength,
        Limit::HashChain,
        Limit::MapScan,
        Limit::StringLength,
        Limit::DescriptorSize,
        Limit::ReadSize,
        Limit::TotalRead,
    ];

    /// The command-line option that sets this limit, if it can be set.
    pub fn option(self) -> Option<&'static str> {
        match self {
            Limit::ListLength => Some("--max-list-length"),
            Limit::HashChain => Some("--max-hash-chain"),
            Limit::MapScan => Some("--max-map-scan"),
            Limit::StringLength => Some("--max-string-length"),
            Limit::DescriptorSize => Some("--max-descriptor-bytes"),
            Limit::ReadSize => Some("--max-read-bytes"),
            Limit::TotalRead => Some("--max-total-read"),
            Limit::Fixed => None,
        }
    }

    /// Short name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Limit::ListLength => "list-length",
            Limit::HashChain => "hash-chain",
            Limit::MapScan => "map-scan",
            Limit::StringLength => "string-length",
            Limit::DescriptorSize => "descriptor-size",
            Limit::ReadSize => "read-size",
            Limit::TotalRead => "total-read",
            Limit::Fixed => "fixed",
        }
    }
}

impl fmt::Display for Limit {
    /// "the list-length limit (--max-list-length)", or "cdac's fixed limit".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.option() {
            Some(option) => write!(f, "the {} limit ({option})", self.name()),
            None => f.write_str("cdac's fixed limit"),
        }
    }
}

/// The limits one target is read with. [`Limits::default`] suits any real runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries of one list or array ([`Limit::ListLength`]).
    pub max_list_length: u64,
    /// Most probes of one hash lookup ([`Limit::HashChain`]).
    pub max_hash_chain: u64,
    /// Most nibble-map units one lookup scans or one heap enumeration visits
    /// ([`Limit::MapScan`]).
    pub max_map_scan: u64,
    /// Longest string or name, in bytes or UTF-16 code units ([`Limit::StringLength`]).
    pub max_string_length: u64,
    /// Largest data descriptor in bytes; all of a runtime's descriptors together may take
    /// four times this ([`Limit::DescriptorSize`]).
    pub max_descriptor_bytes: u64,
    /// Largest single read in bytes ([`Limit::ReadSize`]).
    pub max_read_bytes: u64,
    /// Most bytes one command reads ([`Limit::TotalRead`]): counted through a target and
    /// its clones until [`Target::reset_bytes_read`] or [`Target::flush`] starts the count
    /// again, which a caller that keeps one target for many operations does between them.
    ///
    /// [`Target::reset_bytes_read`]: crate::memory::Target::reset_bytes_read
    /// [`Target::flush`]: crate::memory::Target::flush
    pub max_total_read_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // The largest real lists are the runtime functions of CoreLib (~40,000) and the
            // methods of a big application's code heaps.
            max_list_length: 1 << 20,
            // Real chains are a handful of probes long.
            max_hash_chain: 1024,
            // 2^22 units of 256 bytes of code: 1 GiB of code heap.
            max_map_scan: 1 << 22,
            max_string_length: 64 << 10,
            // Real descriptors are tens of kilobytes.
            max_descriptor_bytes: 16 << 20,
            max_read_bytes: 256 << 20,
            // Listing and naming every method of the .NET 8 testbed reads about 40 MiB.
            max_total_read_bytes: 16 << 30,
        }
    }
}

impl Limits {
    /// The value of one adjustable limit ([`Limit::Fixed`] has none: `u64::MAX`).
    pub fn get(&self, limit: Limit) -> u64 {
        match limit {
            Limit::ListLength => self.max_list_length,
            Limit::HashChain => self.max_hash_chain,
            Limit::MapScan => self.max_map_scan,
            Limit::StringLength => self.max_string_length,
            Limit::DescriptorSize => self.max_descriptor_bytes,
            Limit::ReadSize => self.max_read_bytes,
            Limit::TotalRead => self.max_total_read_bytes,
            Limit::Fixed => u64::MAX,
        }
    }

    /// Sets one adjustable limit (setting [`Limit::Fixed`] does nothing).
    pub fn set(&mut self, limit: Limit, value: u64) {
        match limit {
            Limit::ListLength => self.max_list_length = value,
            Limit::HashChain => self.max_hash_chain = value,
            Limit::MapScan => self.max_map_scan = value,
            Limit::StringLength => self.max_string_length = value,
            Limit::DescriptorSize => self.max_descriptor_bytes = value,
            Limit::ReadSize => self.max_read_bytes = value,
            Limit::TotalRead => self.max_total_read_bytes = value,
            Limit::Fixed => {}
        }
    }

    /// The string cap as a `usize` for the target's string readers.
    pub fn string_cap(&self) -> usize {
        usize::try_from(self.max_string_length).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_adjustable_limit_has_an_option_and_round_trips() {
        let mut limits = Limits::default();
        for (i, limit) in Limit::ADJUSTABLE.iter().enumerate() {
            assert!(limit.option().is_some_and(|o| o.starts_with("--max-")));
            limits.set(*limit, 7 + i as u64);
            assert_eq!(limits.get(*limit), 7 + i as u64);
        }
        assert_eq!(Limit::Fixed.option(), None);
        assert_eq!(
            Limit::ListLength.to_string(),
            "the list-length limit (--max-list-length)"
        );
    }
}
