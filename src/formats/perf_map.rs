//! `perf-PID.map`: the symbol map `perf` reads for JIT'ed code, one `START SIZE NAME` line per
//! code range (hexadecimal start and size).
//!
//! The .NET runtime writes these itself with `DOTNET_PerfMapEnabled`; cdac writes them from
//! outside the process. Reading accepts the runtime's quirks: a `0x` prefix on the start, and
//! records that the runtime sometimes joins with a NUL byte instead of a newline.

use std::io::{self, Write};

/// One symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First code address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Symbol name (may contain spaces).
    pub name: String,
}

/// Parses a perf map; lines that are not `START SIZE NAME` are skipped and counted.
pub fn parse(bytes: &[u8]) -> (Vec<PerfMapEntry>, usize) {
    let mut skipped = 0;
    let entries = bytes
        .split(|&b| b == b'\n' || b == 0)
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let parsed = parse_line(line);
            if parsed.is_none() {
                skipped += 1;
            }
            parsed
        })
        .collect();
    (entries, skipped)
}

fn parse_line(line: &[u8]) -> Option<PerfMapEntry> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.trim_end_matches('\r').splitn(3, ' ');
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
    Some(PerfMapEntry {
        start: hex(parts.next()?)?,
        size: hex(parts.next()?)?,
        name: parts.next()?.to_string(),
    })
}

/// Writes entries in the bare-hex form `perf` reads. Newlines in names (never produced by
/// the runtime) are replaced so that one entry stays one line.
pub fn write<W: Write>(out: &mut W, entries: &[PerfMapEntry]) -> io::Result<()> {
    for e in entries {
        let name = e.name.replace(['\n', '\0'], " ");
        writeln!(out, "{:x} {:x} {}", e.start, e.size, name)?;
    }
    Ok(())
}

/// The runtime's optimization-tier suffix (`[QuickJitted]`, `[OptimizedTier1]`, …) removed
/// from a perf-map name, if it has one.
pub fn strip_tier(name: &str) -> &str {
    match name.rfind('[') {
        Some(i)
            if name.ends_with(']')
                && i > 0
                && !name[i..].contains(' ')
                && name[..i].ends_with(')') =>
        {
            &name[..i]
        }
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_runtime_quirks() {
        let runtime = b"0x7f00001000 1a int32 [A] N.T::M(int32)[QuickJitted]\n0x7f00002000 8 stub<1> AllocateTemporaryEntryPoints<PreJit>\x000x7f00003000 ff void [B] X::Y()[OptimizedTier1]\nnot a line\n";
        let (entries, skipped) = parse(runtime);
        assert_eq!(skipped, 1);
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[0],
            PerfMapEntry {
                start: 0x7f00001000,
                size: 0x1a,
                name: "int32 [A] N.T::M(int32)[QuickJitted]".into()
            }
        );
        assert_eq!(
            entries[2].start, 0x7f00003000,
            "a record joined by NUL is split"
        );
        let mut out = Vec::new();
        write(&mut out, &entries).unwrap();
        assert!(out.starts_with(b"7f00001000 1a int32 [A]"), "bare hex");
        assert_eq!(parse(&out).0, entries);
    }

    #[test]
    fn tiers() {
        assert_eq!(
            strip_tier("int32 [A] N.T::M(int32)[QuickJitted]"),
            "int32 [A] N.T::M(int32)"
        );
        assert_eq!(
            strip_tier("int32 [A] N.T::M(int32)"),
            "int32 [A] N.T::M(int32)"
        );
        assert_eq!(
            strip_tier("instance void [A] N.G`1[System.__Canon]::.ctor()"),
            "instance void [A] N.G`1[System.__Canon]::.ctor()"
        );
        assert_eq!(strip_tier("stub<1> X<PreJit>"), "stub<1> X<PreJit>");
    }
}
