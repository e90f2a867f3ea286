//! The ReadyToRun PerfMap, version 1 (`.ni.r2rmap`): UTF-8 lines `RVA LENGTH NAME`, hex
//! numbers, led by five header records whose RVA is a pseudo token and whose length is 0:
//! the signature (16 bytes as 32 hex digits), the format version, the target OS, the
//! architecture and the ABI (decimal numbers), in that order. crossgen2 lists the hot part
//! of a method split into hot and cold code (`--hot-cold-splitting`) only; cdac's
//! runtime-style maps give the cold part a line of its own, named as the method.
//!
//! Writers print the length with at least two hex digits but more when needed, so it is
//! parsed as a 32-bit value. Names may contain spaces (everything after the second
//! separator is the name).

use std::fmt::Write as _;

/// Pseudo RVAs of the header records, in their fixed order.
pub const HEADER_TOKENS: [u32; 5] = [
    0xFFFF_FFFF,
    0xFFFF_FFFE,
    0xFFFF_FFFD,
    0xFFFF_FFFC,
    0xFFFF_FFFB,
];
/// The format version this module writes (and the highest it reads).
pub const FORMAT_VERSION: u32 = 1;

/// `PerfMapOSToken` values by name.
pub const OS_NAMES: [&str; 7] = [
    "Unknown", "Windows", "Linux", "OSX", "FreeBSD", "NetBSD", "SunOS",
];
/// `PerfMapArchitectureToken` values by name.
pub const ARCH_NAMES: [&str; 5] = ["Unknown", "ARM", "ARM64", "X64", "X86"];
/// `PerfMapAbiToken` values by name.
pub const ABI_NAMES: [&str; 3] = ["Unknown", "Default", "Armel"];

/// The name of enum value `v` in `names`, or `Unknown(v)`.
pub fn enum_name(names: &[&str], v: u32) -> String {
    names
        .get(v as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("Unknown({v})"))
}

/// One code entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rPerfMapEntry {
    /// RVA of the method's code.
    pub rva: u32,
    /// Size of the code.
    pub length: u32,
    /// The method's name.
    pub name: String,
}

/// A parsed (or to-be-written) r2rmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rPerfMap {
    /// Identity of the image the map is for.
    pub signature: [u8; 16],
    /// Map format version.
    pub version: u32,
    /// Target OS value of the header.
    pub os: u32,
    /// Target architecture value of the header.
    pub arch: u32,
    /// Target ABI value of the header.
    pub abi: u32,
    /// The methods, in file order.
    pub entries: Vec<R2rPerfMapEntry>,
}

/// Why a map did not parse; `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum R2rPerfMapError {
    /// A line without the three fields.
    #[error("line {line}: expected `RVA LENGTH NAME`")]
    Shape {
        /// 1-based line number.
        line: usize,
    },
    /// A field that is not a hex number.
    #[error("line {line}: bad hex number {text:?}")]
    Number {
        /// 1-based line number.
        line: usize,
        /// Its text when it came as a string (for messages).
        text: String,
    },
    /// A header record with the wrong pseudo-RVA.
    #[error(
        "line {line}: header record {index} must have RVA {expected:#010x}, found {found:#010x}"
    )]
    HeaderToken {
        /// 1-based line number.
        line: usize,
        /// Which header record (0-based).
        index: usize,
        /// The value expected.
        expected: u32,
        /// The value found.
        found: u32,
    },
    /// A header record with a nonzero length.
    #[error("line {line}: header record length must be 0, found {found}")]
    HeaderLength {
        /// 1-based line number.
        line: usize,
        /// The value found.
        found: u32,
    },
    /// A header record whose value does not parse.
    #[error("line {line}: bad header value {text:?}")]
    HeaderValue {
        /// 1-based line number.
        line: usize,
        /// The text that did not parse.
        text: String,
    },
    /// The map ends before its header does.
    #[error("the map ends after {lines} line(s), inside its five-record header")]
    MissingHeader {
        /// Lines the map has.
        lines: usize,
    },
    /// A format version newer than this reader's.
    #[error("format version {0} is newer than the {FORMAT_VERSION} this reader knows")]
    UnknownVersion(u32),
}

fn hex_u32(text: &str, line: usize) -> Result<u32, R2rPerfMapError> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 8 {
        return Err(R2rPerfMapError::Number {
            line,
            text: text.to_string(),
        });
    }
    u32::from_str_radix(digits, 16).map_err(|_| R2rPerfMapError::Number {
        line,
        text: text.to_string(),
    })
}

/// Splits `RVA LENGTH NAME` (the name may hold spaces; it may be empty only in headers).
fn split_line(text: &str, line: usize) -> Result<(u32, u32, &str), R2rPerfMapError> {
    // A CRLF file's `\r`, and any more before it: a name cannot end in `\r`, which the
    // writer's line could not carry back (it would read as part of the line ending).
    let text = text.trim_end_matches('\r');
    let mut it = text.splitn(3, ' ');
    let (Some(rva), Some(len), Some(name)) = (it.next(), it.next(), it.next()) else {
        return Err(R2rPerfMapError::Shape { line });
    };
    Ok((hex_u32(rva, line)?, hex_u32(len, line)?, name))
}

impl R2rPerfMap {
    /// Parses a map. Empty lines after the header are skipped.
    pub fn parse(text: &str) -> Result<R2rPerfMap, R2rPerfMapError> {
        let mut lines = text.lines().enumerate();
        let mut header = [""; 5];
        for (index, slot) in header.iter_mut().enumerate() {
            let Some((i, line)) = lines.next() else {
                return Err(R2rPerfMapError::MissingHeader { lines: index });
            };
            let (rva, len, value) = split_line(line, i + 1)?;
            if rva != HEADER_TOKENS[index] {
                return Err(R2rPerfMapError::HeaderToken {
                    line: i + 1,
                    index,
                    expected: HEADER_TOKENS[index],
                    found: rva,
                });
            }
            if len != 0 {
                return Err(R2rPerfMapError::HeaderLength {
                    line: i + 1,
                    found: len,
                });
            }
            *slot = value;
        }
        let signature = parse_signature(header[0]).ok_or(R2rPerfMapError::HeaderValue {
            line: 1,
            text: header[0].to_string(),
        })?;
        let number = |k: usize| -> Result<u32, R2rPerfMapError> {
            header[k]
                .trim()
                .parse()
                .map_err(|_| R2rPerfMapError::HeaderValue {
                    line: k + 1,
                    text: header[k].to_string(),
                })
        };
        let version = number(1)?;
        if version > FORMAT_VERSION {
            return Err(R2rPerfMapError::UnknownVersion(version));
        }
        let mut map = R2rPerfMap {
            signature,
            version,
            os: number(2)?,
            arch: number(3)?,
            abi: number(4)?,
            entries: Vec::new(),
        };
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let (rva, length, name) = split_line(line, i + 1)?;
            map.entries.push(R2rPerfMapEntry {
                rva,
                length,
                name: name.to_string(),
            });
        }
        Ok(map)
    }

    /// The map's text: the header, then one line per entry, `\n`-terminated.
    pub fn write(&self) -> String {
        let mut out = String::with_capacity(64 * (self.entries.len() + 5));
        let sig: String = self.signature.iter().map(|b| format!("{b:02X}")).collect();
        let values = [
            sig,
            self.version.to_string(),
            self.os.to_string(),
            self.arch.to_string(),
            self.abi.to_string(),
        ];
        for (token, value) in HEADER_TOKENS.iter().zip(values) {
            let _ = writeln!(out, "{token:08X} 00 {value}");
        }
        for e in &self.entries {
            let _ = writeln!(out, "{:08X} {:02X} {}", e.rva, e.length, e.name);
        }
        out
    }

    /// The entry whose code holds `rva` (entries sorted or not; the first match wins).
    pub fn lookup(&self, rva: u32) -> Option<&R2rPerfMapEntry> {
        self.entries
            .iter()
            .find(|e| rva >= e.rva && u64::from(rva) < u64::from(e.rva) + u64::from(e.length))
    }
}

fn parse_signature(text: &str) -> Option<[u8; 16]> {
    let text = text.trim();
    if text.len() != 32 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
