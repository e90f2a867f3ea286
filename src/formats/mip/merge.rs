//! Combining MIP data: a profile from a map, raw runs into a profile, profiles into one.

use std::collections::{HashMap, HashSet};

use super::error::{MipError, Result};
use super::header::{FileKind, Header, ProfileFlags};
use super::map::MipMap;
use super::md5::md5_hash;
use super::profile::{BlockProfile, Profile, ProfileFunction};
use super::raw::{RawCounters, RawProfile, RawRecordKind, COVERED, NEVER_CALLED};

/// An empty profile (nothing covered, all counts zero) with one function per map entry,
/// located through the map's resolved offsets; like `llvm-mipdata create`.
///
/// The names table is the entries' names, sorted and without duplicates. The header keeps
/// the map's layout, profile type and module hash; `names_encoding` is the format
/// document's byte length (set it to `NameCount` for LLVM's tools).
pub fn create_from_map(map: &MipMap) -> Result<Profile> {
    let resolved = map.resolve()?;
    let mut functions = Vec::with_capacity(map.entries.len());
    for ((entry, offsets), at) in map.entries.iter().zip(resolved).zip(map.entry_offsets()) {
        let out_of_range = |what: &'static str, value: i64| MipError::OffsetOutOfRange {
            what,
            offset: at as usize,
            value: i128::from(value),
        };
        functions.push(ProfileFunction {
            signature: md5_hash(&entry.name),
            raw_profile_offset: u32::try_from(offsets.raw_profile)
                .map_err(|_| out_of_range("map entry raw profile offset", offsets.raw_profile))?,
            function_start_offset: i32::try_from(offsets.function)
                .map_err(|_| out_of_range("map entry function offset", offsets.function))?,
            function_size: entry.function_size,
            cfg_signature: entry.cfg_signature,
            merge_count: 0,
            call_count: 0,
            timestamp_sum: 0,
            blocks: entry
                .block_offsets
                .iter()
                .map(|&offset| BlockProfile {
                    offset,
                    covered: false,
                })
                .collect(),
            call_edges: Vec::new(),
        });
    }
    let mut names: Vec<String> = map.entries.iter().map(|e| e.name.clone()).collect();
    names.sort();
    names.dedup();
    Ok(Profile {
        header: Header::new(
            map.header.layout,
            FileKind::Profile,
            map.header.profile_type,
            map.header.module_hash,
        ),
        functions,
        names,
        names_encoding: Default::default(),
    })
}

/// Adds one run's raw counters to `profile`, matching each raw record to the functions
/// whose raw profile offset is the record's file offset; like `llvm-mipdata merge`.
///
/// A covered function gets `merge_count + 1`; with coverage records its call count
/// becomes at least 1, with counter records the call count and timestamp are added.
/// Covered blocks are ORed in. On error `profile` is left unchanged.
pub fn merge_raw_into(profile: &mut Profile, raw: &RawProfile) -> Result<()> {
    if raw.header.module_hash != profile.header.module_hash {
        return Err(MipError::ModuleHashMismatch {
            expected: profile.header.module_hash,
            found: raw.header.module_hash,
        });
    }
    // Checked so that a header with no record layout fails even with no records.
    RawRecordKind::for_profile_type(raw.header.profile_type)?;
    let with_blocks = raw
        .header
        .profile_type
        .contains(ProfileFlags::BLOCK_COVERAGE);

    let mut by_offset: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, f) in profile.functions.iter().enumerate() {
        by_offset.entry(f.raw_profile_offset).or_default().push(i);
    }
    let names = profile.names_by_signature();
    let display = |f: &ProfileFunction| display_name(&names, f.signature);

    let mut merged = profile.functions.clone();
    for (rec, offset) in raw.records.iter().zip(raw.record_offsets()) {
        let targets = u32::try_from(offset)
            .ok()
            .and_then(|o| by_offset.get(&o))
            .ok_or(MipError::UnmatchedRawRecord { offset })?;
        for &i in targets {
            let f = &mut merged[i];
            if with_blocks && rec.blocks.len() != f.blocks.len() {
                return Err(MipError::BlockCountMismatch {
                    function: display(f),
                    expected: f.blocks.len() as u32,
                    found: rec.blocks.len() as u32,
                });
            }
            match rec.counters {
                RawCounters::Coverage(byte) => {
                    if byte == COVERED {
                        f.merge_count = f.merge_count.saturating_add(1);
                        f.call_count = f.call_count.max(1);
                    }
                }
                RawCounters::CallCountTimestamp {
                    call_count,
                    timestamp,
                } => {
                    if (call_count == NEVER_CALLED) != (timestamp == NEVER_CALLED) {
                        return Err(MipError::CorruptCounters {
                            offset: offset as usize,
                            call_count,
                            timestamp,
                        });
                    }
                    if rec.function_covered() {
                        f.merge_count = f.merge_count.saturating_add(1);
                        f.call_count = f.call_count.saturating_add(u64::from(call_count));
                        f.timestamp_sum = f.timestamp_sum.saturating_add(u64::from(timestamp));
                    }
                }
            }
            for (block, covered) in f.blocks.iter_mut().zip(rec.blocks_covered()) {
                block.covered |= covered;
            }
        }
    }
    profile.functions = merged;
    Ok(())
}

/// Merges profiles of one link unit into a new one.
///
/// The same function is the n-th function with a given signature in each profile (a
/// signature may repeat, e.g. for local functions of one name). For each: merge counts,
/// call counts and timestamp sums add up (saturating), block coverage ORs (so does
/// function coverage, which follows from the counts), call edges are united. Functions
/// only in later profiles are appended, as are names not yet in the table. The header is
/// the first profile's with the profile types united.
///
/// Errors: different module hashes; the same function with different CFG signatures or
/// block counts.
pub fn merge(profiles: &[Profile]) -> Result<Profile> {
    let (first, rest) = profiles.split_first().ok_or(MipError::NothingToMerge)?;
    let mut out = first.clone();
    let mut index: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, f) in out.functions.iter().enumerate() {
        index.entry(f.signature).or_default().push(i);
    }
    let mut known_names: HashSet<String> = out.names.iter().cloned().collect();

    for p in rest {
        if p.header.module_hash != out.header.module_hash {
            return Err(MipError::ModuleHashMismatch {
                expected: out.header.module_hash,
                found: p.header.module_hash,
            });
        }
        out.header.profile_type = out.header.profile_type.union(p.header.profile_type);
        let names = p.names_by_signature();
        let mut occurrence: HashMap<u64, usize> = HashMap::new();
        for f in &p.functions {
            let n = occurrence.entry(f.signature).or_default();
            let nth = *n;
            *n += 1;
            match index.get(&f.signature).and_then(|v| v.get(nth)) {
                Some(&i) => {
                    merge_function(&mut out.functions[i], f, &display_name(&names, f.signature))?
                }
                None => {
                    index
                        .entry(f.signature)
                        .or_default()
                        .push(out.functions.len());
                    out.functions.push(f.clone());
                }
            }
        }
        for name in &p.names {
            if known_names.insert(name.clone()) {
                out.names.push(name.clone());
            }
        }
    }
    Ok(out)
}

fn merge_function(into: &mut ProfileFunction, from: &ProfileFunction, name: &str) -> Result<()> {
    if into.cfg_signature != from.cfg_signature {
        return Err(MipError::CfgMismatch {
            function: name.to_string(),
            expected: into.cfg_signature,
            found: from.cfg_signature,
        });
    }
    if into.blocks.len() != from.blocks.len() {
        return Err(MipError::BlockCountMismatch {
            function: name.to_string(),
            expected: into.blocks.len() as u32,
            found: from.blocks.len() as u32,
        });
    }
    into.merge_count = into.merge_count.saturating_add(from.merge_count);
    into.call_count = into.call_count.saturating_add(from.call_count);
    into.timestamp_sum = into.timestamp_sum.saturating_add(from.timestamp_sum);
    for (a, b) in into.blocks.iter_mut().zip(&from.blocks) {
        a.covered |= b.covered;
    }
    for edge in &from.call_edges {
        if !into.call_edges.contains(edge) {
            into.call_edges.push(*edge);
        }
    }
    Ok(())
}

/// The function's name, or its signature in hex when the table has no name for it.
fn display_name(names: &HashMap<u64, &str>, signature: u64) -> String {
    names
        .get(&signature)
        .map(|n| n.to_string())
        .unwrap_or_else(|| format!("{signature:#018x}"))
}
