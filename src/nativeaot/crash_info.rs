//! The NativeAOT runtime's own crash report: the JSON text it writes into a buffer of the
//! executable (`g_CrashInfoBuffer`, 8 KiB) before it aborts on an unhandled exception or a
//! fail-fast, for debuggers to find in the core. .NET 10 names the buffer in its debug
//! header; .NET 11 names it nowhere, so it is looked for in the executable's `.bss`.
//!
//! The text: `{"version":"1.0.0","runtime_base":"0x…","runtime_type":"4",
//! "runtime_version":"10.0.12","reason":"1","thread":"0x2F07","message":"…",
//! "exception":{"address":"0x…","hr":"0x…","message":"…","type":"System.…",
//! "stack":[{"ip":"0x…","module":"0x…","offset":"0x38","name":"…"}],"inner":[…]}}`;
//! numbers are quoted, hexadecimal where prefixed.

use serde::{Deserialize, Serialize};

use crate::runtime::Runtime;

/// Size of the runtime's buffer.
const BUFFER_SIZE: usize = 0x2000;
/// How the text starts (what the `.bss` scan looks for).
const PREFIX: &[u8] = b"{\"version\":\"";
/// Most bytes of `.bss` scanned for the buffer.
const MAX_SCAN: u64 = 256 << 20;

/// Why the runtime wrote its report (`reason`).
pub fn reason_name(reason: u32) -> &'static str {
    match reason {
        1 => "unhandled exception",
        2 => "Environment.FailFast",
        3 => "internal runtime error",
        _ => "unknown",
    }
}

/// The runtime's crash report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashInfo {
    /// Format version ("1.0.0").
    #[serde(default)]
    pub version: String,
    /// The runtime's version.
    #[serde(default)]
    pub runtime_version: String,
    /// Why: see [`reason_name`].
    #[serde(default, deserialize_with = "number")]
    pub reason: u64,
    /// The crashing thread's OS id (as the target's PID namespace numbers it).
    #[serde(default, deserialize_with = "number")]
    pub thread: u64,
    /// The fail-fast message.
    #[serde(default)]
    pub message: Option<String>,
    /// The exception, for an unhandled one.
    #[serde(default)]
    pub exception: Option<CrashException>,
    /// Where the buffer is.
    #[serde(skip_deserializing)]
    pub address: u64,
}

/// An exception of the crash report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashException {
    /// The object.
    #[serde(default, deserialize_with = "number")]
    pub address: u64,
    /// HRESULT.
    #[serde(default, deserialize_with = "number")]
    pub hr: u64,
    /// Its message.
    #[serde(default)]
    pub message: Option<String>,
    /// Its type's full name.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
    /// Its stack trace, innermost first.
    #[serde(default)]
    pub stack: Vec<CrashFrame>,
    /// Inner exceptions.
    #[serde(default)]
    pub inner: Vec<CrashException>,
}

/// One frame of a crash report's stack trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashFrame {
    /// Instruction pointer.
    #[serde(default, deserialize_with = "number")]
    pub ip: u64,
    /// Offset in its method.
    #[serde(default, deserialize_with = "number")]
    pub offset: u64,
    /// The method, as the runtime names it.
    #[serde(default)]
    pub name: Option<String>,
}

fn number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| serde::de::Error::custom(format!("not a number: {text:?}")))
}

/// Parses the buffer's bytes: the JSON text up to its NUL. `None` for an empty buffer (no
/// crash reported); an error for text that is not the report.
pub fn parse(bytes: &[u8]) -> Option<Result<CrashInfo, String>> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = &bytes[..end];
    if text.is_empty() {
        return None;
    }
    Some(serde_json::from_slice(text).map_err(|e| format!("the crash report does not parse: {e}")))
}

impl CrashInfo {
    /// The report of `rt`'s runtime: `Ok(None)` when it wrote none (it did not crash, or
    /// not through the runtime's fail-fast).
    pub fn read(rt: &Runtime) -> Result<Option<CrashInfo>, String> {
        let target = rt.target();
        let address = match rt.descriptor().global_value("CrashInfoBuffer") {
            Ok(a) => a,
            Err(_) => match find_in_bss(rt) {
                Some(a) => a,
                None => return Ok(None),
            },
        };
        let bytes = target
            .read_bytes(address, BUFFER_SIZE)
            .map_err(|e| format!("the crash report buffer at {address:#x}: {e}"))?;
        match parse(&bytes) {
            None => Ok(None),
            Some(Ok(mut info)) => {
                info.address = address;
                Ok(Some(info))
            }
            Some(Err(e)) => Err(e),
        }
    }
}

/// Where the report starts in the executable's `.bss`, when it is there (.NET 11, whose
/// descriptor does not name the buffer).
fn find_in_bss(rt: &Runtime) -> Option<u64> {
    use object::{Object, ObjectSection};
    let module = rt.module();
    let path = rt.target().local_path(&module.path);
    let bytes = crate::memory::map_regular_file(&path).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    let bss = file.section_by_name(".bss")?;
    let start = module.base.checked_add(bss.address())?;
    let size = bss.size().min(MAX_SCAN);
    let target = rt.target();
    const CHUNK: u64 = 1 << 20;
    let end = start.saturating_add(size);
    let mut at = start;
    while at < end {
        let len = CHUNK.min(end - at);
        // Each read runs a prefix's length into the next chunk: a report straddling the
        // edge is found whole.
        let want = len.saturating_add(PREFIX.len() as u64).min(end - at);
        if let Ok(chunk) = target.read_bytes(at, want as usize) {
            if let Some(i) = memchr::memmem::find(&chunk, PREFIX) {
                return Some(at + i as u64);
            }
        }
        at += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_parses_with_hex_and_decimal_numbers() {
        let text = br#"{"version":"1.0.0","runtime_base":"0x55A957D33000","runtime_type":"4","runtime_version":"10.0.12","reason":"1","thread":"0x2F07","message":"boom","exception":{"address":"0x7FC98308D128","hr":"0x80131509","message":"boom","type":"System.InvalidOperationException","stack":[{"ip":"0x55A957DDC988","module":"0x55A957D33000","offset":"0x38","name":"A.B.C()"}]}}"#;
        let mut buffer = text.to_vec();
        buffer.extend([0u8; 16]);
        let info = parse(&buffer).expect("a report").expect("parses");
        assert_eq!(info.reason, 1);
        assert_eq!(info.thread, 0x2F07);
        let e = info.exception.expect("exception");
        assert_eq!(
            e.type_name.as_deref(),
            Some("System.InvalidOperationException")
        );
        assert_eq!(e.hr, 0x8013_1509);
        assert_eq!(e.stack[0].offset, 0x38);
        assert_eq!(e.stack[0].name.as_deref(), Some("A.B.C()"));
        assert!(parse(&[0u8; 32]).is_none());
        assert!(parse(b"{\"version\":\0").expect("text").is_err());
    }
}
