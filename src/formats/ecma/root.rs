//! The metadata root (ECMA-335 II.24.2.1) and its stream headers (II.24.2.2).

use super::error::{MetadataError, Result};
use crate::formats::cursor::Cursor;

/// "BSJB", read little-endian.
pub const METADATA_SIGNATURE: u32 = 0x424A_5342;
/// Longest version string accepted (the standard allows 255 bytes, padded to 256).
pub const MAX_VERSION_LENGTH: u32 = 256;
/// Longest stream name, with its NUL (II.24.2.2).
const MAX_STREAM_NAME: usize = 32;

/// The metadata root: versions, the version string and where each stream is.
#[derive(Debug, Clone)]
pub struct MetadataRoot<'a> {
    /// Major version.
    pub major_version: u16,
    /// Minor version.
    pub minor_version: u16,
    /// The version string (e.g. `v4.0.30319`), up to its first NUL, lossily decoded.
    pub version: String,
    /// Reserved flags.
    pub flags: u16,
    /// The stream headers, in order.
    pub streams: Vec<StreamHeader<'a>>,
}

/// One stream header and the stream's bytes.
#[derive(Debug, Clone, Copy)]
pub struct StreamHeader<'a> {
    /// Offset of the stream from the start of the metadata root.
    pub offset: u32,
    /// Declared size.
    pub size: u32,
    /// The name as stored (`#~`, `#Strings`, ...), lossily decoded.
    pub name: &'a str,
    /// The stream's bytes.
    pub data: &'a [u8],
}

impl<'a> MetadataRoot<'a> {
    /// The first stream called `name`.
    pub fn stream(&self, name: &str) -> Option<&StreamHeader<'a>> {
        self.streams.iter().find(|s| s.name == name)
    }
}

/// Parses the metadata root at the start of `data` (the bytes the CLI header's MetaData
/// directory points to). Every stream must lie within `data`.
pub fn parse_root(data: &[u8]) -> Result<MetadataRoot<'_>> {
    let mut c = Cursor::new(data);
    let signature = c.read_u32("metadata root signature")?;
    if signature != METADATA_SIGNATURE {
        return Err(MetadataError::BadSignature { found: signature });
    }
    let major_version = c.read_u16("metadata root major version")?;
    let minor_version = c.read_u16("metadata root minor version")?;
    c.skip(4, "metadata root reserved")?;
    let length = c.read_u32("metadata version string length")?;
    if length > MAX_VERSION_LENGTH {
        return Err(MetadataError::VersionTooLong {
            length,
            max: MAX_VERSION_LENGTH,
        });
    }
    // The length is meant to be a multiple of 4; honour what is written, as the runtime does.
    let version_bytes = c.read_bytes(length as usize, "metadata version string")?;
    let version_end = version_bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(version_bytes.len());
    let version = String::from_utf8_lossy(&version_bytes[..version_end]).into_owned();
    let flags = c.read_u16("metadata root flags")?;
    let count = c.read_u16("metadata stream count")?;
    let mut streams = Vec::with_capacity(usize::from(count).min(16));
    for index in 0..usize::from(count) {
        let offset = c.read_u32("stream header offset")?;
        let size = c.read_u32("stream header size")?;
        let name_area = &c.rest()[..c.remaining().min(MAX_STREAM_NAME)];
        let nul = name_area
            .iter()
            .position(|&b| b == 0)
            .ok_or(MetadataError::BadStreamName { index })?;
        let name = std::str::from_utf8(&name_area[..nul])
            .map_err(|_| MetadataError::BadStreamName { index })?;
        // Name plus NUL, padded to 4 bytes (the padding may run past the end when this
        // is the last header: the next read says so).
        c = c.at(c.position() + ((nul + 1 + 3) & !3));
        let stream_data = Cursor::new(data)
            .at(offset as usize)
            .read_bytes(size as usize, "stream")
            .map_err(|_| MetadataError::StreamOutOfBounds {
                name: name.to_string(),
                offset,
                size,
                len: data.len(),
            })?;
        streams.push(StreamHeader {
            offset,
            size,
            name,
            data: stream_data,
        });
    }
    Ok(MetadataRoot {
        major_version,
        minor_version,
        version,
        flags,
        streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::cursor::Truncation;

    fn root_with(streams: &[(&str, u32, u32)], total: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&METADATA_SIGNATURE.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&12u32.to_le_bytes());
        v.extend_from_slice(b"v4.0.30319\0\0");
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&(streams.len() as u16).to_le_bytes());
        for (name, off, size) in streams {
            v.extend_from_slice(&off.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v.extend_from_slice(name.as_bytes());
            v.push(0);
            while v.len() % 4 != 0 {
                v.push(0);
            }
        }
        v.resize(total, 0);
        v
    }

    #[test]
    fn parses_streams() {
        let data = root_with(&[("#~", 0x60, 0x10), ("#Strings", 0x70, 0x8)], 0x80);
        let root = parse_root(&data).unwrap();
        assert_eq!(root.version, "v4.0.30319");
        assert_eq!(root.streams.len(), 2);
        assert_eq!(root.stream("#Strings").unwrap().data.len(), 8);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(
            parse_root(b"XXXX"),
            Err(MetadataError::BadSignature { .. })
        ));
        let data = root_with(&[("#~", 0x60, 0x100)], 0x80);
        assert!(matches!(
            parse_root(&data),
            Err(MetadataError::StreamOutOfBounds { .. })
        ));
        // The version string is 12 bytes at 16.
        assert_eq!(
            parse_root(&data[..20]).unwrap_err(),
            MetadataError::Truncated(Truncation {
                what: "metadata version string",
                offset: 16,
                needed: 12,
                available: 4
            })
        );
        assert_eq!(
            parse_root(&data[..30]).unwrap_err().to_string(),
            "metadata stream count at offset 0x1e: needs 2 byte(s), only 0 left"
        );
    }
}
