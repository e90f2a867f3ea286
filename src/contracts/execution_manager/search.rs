//! Searching the sorted tables of code ranges (RUNTIME_FUNCTIONs, hot/cold maps): a
//! binary search narrows the range, a short linear scan finds the entry.

use crate::contracts::ContractError;

/// Below this many candidates the search scans linearly (as the runtime does).
const LINEAR_THRESHOLD: u64 = 10;

/// The index `i` in `0..count` with `begin(i) <= value < begin(i + 1)` (the last entry has
/// no upper bound), for a table sorted by `begin`. `None` when `value` precedes the first
/// entry or the table is empty.
pub fn find_covering(
    count: u64,
    value: u64,
    begin: &mut dyn FnMut(u64) -> Result<u64, ContractError>,
) -> Result<Option<u64>, ContractError> {
    if count == 0 {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0u64, count - 1);
    while hi - lo > LINEAR_THRESHOLD {
        let mid = lo + (hi - lo) / 2;
        if value < begin(mid)? {
            hi = mid - 1;
        } else {
            lo = mid;
        }
    }
    let mut found = None;
    for i in lo..=hi {
        if begin(i)? <= value {
            found = Some(i);
        } else {
            break;
        }
    }
    // The scan stopped inside [lo, hi]; an entry past hi may still start at or below the
    // value only if hi was moved below it, which the binary step rules out.
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(table: &[u64], value: u64) -> Option<u64> {
        find_covering(table.len() as u64, value, &mut |i| Ok(table[i as usize])).unwrap()
    }

    #[test]
    fn matches_a_plain_scan() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in [0usize, 1, 2, 5, 10, 11, 12, 50, 333] {
            let mut table: Vec<u64> = Vec::new();
            let mut at = 100;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                at += 1 + x % 40;
                table.push(at);
            }
            for value in 0..at + 50 {
                let expected = table.iter().rposition(|&b| b <= value).map(|i| i as u64);
                assert_eq!(run(&table, value), expected, "len {len} value {value}");
            }
        }
    }
}
