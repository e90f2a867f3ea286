//! The compact JSON form of a data descriptor, parsed into a [`PhysicalDescriptor`]:
//! one descriptor's own content, before indirect globals are resolved and before it is
//! merged with its sub-descriptors.
//!
//! Like the runtime's own reader, the parser accepts comments and trailing commas, and
//! `null` for an absent section. Unlike a plain JSON map, it keeps every key so that a
//! name given twice is reported instead of silently replaced.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::DescriptorError;
use super::number::{parse_number, Number};

/// A value as written: a number, or a string that may or may not be numeric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// A JSON number or a numeric string.
    Number {
        /// The number.
        value: u64,
        /// Its text when it came as a string (for messages).
        text: Option<String>,
    },
    /// A string that is not a number (string globals such as `"x64"`).
    Text(String),
}

/// Where a global's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobalSource {
    /// The value is written in the descriptor.
    Direct(Literal),
    /// The value is the descriptor's pointer-data slot with this index.
    Indirect(u64),
}

/// One global as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawGlobal {
    /// Where the value is: inline or at an index of the pointer data.
    pub source: GlobalSource,
    /// Declared type, if any.
    pub type_name: Option<String>,
}

/// One field as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawField {
    /// Offset in the type, in bytes.
    pub offset: u32,
    /// Declared type, if any.
    pub type_name: Option<String>,
}

/// One type as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawType {
    /// Size in bytes, when declared.
    pub size: Option<u32>,
    /// Fields by name.
    pub fields: BTreeMap<String, RawField>,
}

/// A contract version: an integer (.NET 9 and 10) or a string such as "c2" (.NET 11).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContractVersion {
    /// A numeric version (.NET 9 and 10).
    Number(u64),
    /// A string version such as "c2" (.NET 11).
    Tag(String),
}

impl ContractVersion {
    /// The CoreCLR version number: `N` for the integer `N` and for the string `"cN"`.
    pub fn coreclr_number(&self) -> Option<u64> {
        match self {
            ContractVersion::Number(n) => Some(*n),
            ContractVersion::Tag(t) => {
                let digits = t.strip_prefix('c')?;
                // Plain decimal only: no sign, no leading zero ("c01" is not "c1").
                let canonical = !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'));
                canonical.then(|| digits.parse().ok()).flatten()
            }
        }
    }
}

impl ContractVersion {
    /// True when this is CoreCLR version `n`, written either way (`2` or `"c2"`).
    pub fn is_coreclr(&self, n: u64) -> bool {
        self.coreclr_number() == Some(n)
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContractVersion::Number(n) => write!(f, "{n}"),
            ContractVersion::Tag(t) => f.write_str(t),
        }
    }
}

/// One descriptor's content as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PhysicalDescriptor {
    /// Format version of the JSON.
    pub version: u64,
    /// The baseline descriptor it builds on, if any.
    pub baseline: Option<String>,
    /// Types by name.
    pub types: BTreeMap<String, RawType>,
    /// Globals by name.
    pub globals: BTreeMap<String, RawGlobal>,
    /// Contract versions by name.
    pub contracts: BTreeMap<String, ContractVersion>,
    /// Nested descriptors by name, located like globals.
    pub sub_descriptors: BTreeMap<String, RawGlobal>,
    /// Top-level keys this reader does not interpret, kept as written.
    pub extras: BTreeMap<String, Value>,
}

/// A JSON object with its keys in order, duplicates kept.
struct Entries<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<V>, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(std::marker::PhantomData))
    }
}

/// Parses compact descriptor JSON. `name` is used in errors.
pub fn parse(name: &str, text: &[u8]) -> Result<PhysicalDescriptor, DescriptorError> {
    let invalid = |detail: String| DescriptorError::Invalid {
        descriptor: name.to_string(),
        detail,
    };
    let json_err = |e: serde_json::Error| DescriptorError::Json {
        descriptor: name.to_string(),
        detail: e.to_string(),
    };
    let mut owned = text.to_vec();
    json_strip_comments::strip_slice(&mut owned).map_err(|e| DescriptorError::Json {
        descriptor: name.to_string(),
        detail: e.to_string(),
    })?;
    let text = std::str::from_utf8(&owned).map_err(|e| DescriptorError::Json {
        descriptor: name.to_string(),
        detail: format!("not UTF-8: {e}"),
    })?;
    let top: Entries<Box<RawValue>> = serde_json::from_str(text).map_err(json_err)?;
    reject_duplicates(name, "top-level key", &top.0)?;

    let mut out = PhysicalDescriptor::default();
    for (key, raw) in &top.0 {
        let raw = raw.get();
        // `null` stands for an absent optional section.
        if raw.trim() == "null" {
            continue;
        }
        match key.as_str() {
            "version" => {
                let v: Value = serde_json::from_str(raw).map_err(json_err)?;
                let n = parse_number(&v)
                    .filter(|n| !n.negative)
                    .ok_or_else(|| invalid(format!("version {v} is not a number")))?;
                out.version = n.value;
            }
            "baseline" => {
                let v: Value = serde_json::from_str(raw).map_err(json_err)?;
                let s = v
                    .as_str()
                    .ok_or_else(|| invalid(format!("baseline {v} is not a string")))?;
                out.baseline = Some(s.to_string());
            }
            "types" => {
                let types: Entries<Entries<Value>> = serde_json::from_str(raw).map_err(json_err)?;
                reject_duplicates(name, "type", &types.0)?;
                for (type_name, fields) in types.0 {
                    let parsed = parse_type(name, &type_name, fields)?;
                    out.types.insert(type_name, parsed);
                }
            }
            "globals" => {
                let globals: Entries<Value> = serde_json::from_str(raw).map_err(json_err)?;
                reject_duplicates(name, "global", &globals.0)?;
                for (global, value) in globals.0 {
                    let parsed = parse_global(&value)
                        .map_err(|d| invalid(format!("global {global}: {d}")))?;
                    out.globals.insert(global, parsed);
                }
            }
            "contracts" => {
                let contracts: Entries<Value> = serde_json::from_str(raw).map_err(json_err)?;
                reject_duplicates(name, "contract", &contracts.0)?;
                for (contract, value) in contracts.0 {
                    let version = parse_contract_version(&value)
                        .ok_or_else(|| invalid(format!("contract {contract}: version {value} is neither an integer nor a string")))?;
                    out.contracts.insert(contract, version);
                }
            }
            "subDescriptors" => {
                let subs: Entries<Value> = serde_json::from_str(raw).map_err(json_err)?;
                reject_duplicates(name, "sub-descriptor", &subs.0)?;
                for (sub, value) in subs.0 {
                    let parsed = parse_global(&value)
                        .map_err(|d| invalid(format!("sub-descriptor {sub}: {d}")))?;
                    if let GlobalSource::Direct(Literal::Text(_)) = parsed.source {
                        return Err(invalid(format!(
                            "sub-descriptor {sub} is a string, not an address"
                        )));
                    }
                    out.sub_descriptors.insert(sub, parsed);
                }
            }
            _ => {
                let v: Value = serde_json::from_str(raw).map_err(json_err)?;
                out.extras.insert(key.clone(), v);
            }
        }
    }
    Ok(out)
}

fn reject_duplicates<V>(
    descriptor: &str,
    kind: &str,
    entries: &[(String, V)],
) -> Result<(), DescriptorError> {
    let mut seen = std::collections::HashSet::new();
    for (k, _) in entries {
        if !seen.insert(k.as_str()) {
            return Err(DescriptorError::Invalid {
                descriptor: descriptor.to_string(),
                detail: format!("{kind} {k} is given twice"),
            });
        }
    }
    Ok(())
}

fn parse_type(
    descriptor: &str,
    type_name: &str,
    entries: Entries<Value>,
) -> Result<RawType, DescriptorError> {
    let invalid = |detail: String| DescriptorError::Invalid {
        descriptor: descriptor.to_string(),
        detail: format!("type {type_name}: {detail}"),
    };
    reject_duplicates(
        descriptor,
        &format!("in type {type_name}, field"),
        &entries.0,
    )?;
    let mut out = RawType::default();
    for (field, value) in entries.0 {
        if field == "!" {
            out.size = Some(unsigned_u32(&value).ok_or_else(|| {
                invalid(format!("size {value} is not an unsigned 32-bit number"))
            })?);
            continue;
        }
        let (offset, type_name) = match &value {
            Value::Array(items) => match items.as_slice() {
                [offset, Value::String(t)] => (offset, Some(t.clone())),
                [offset] => (offset, None),
                _ => {
                    return Err(invalid(format!(
                        "field {field}: {value} is not OFFSET or [OFFSET, \"type\"]"
                    )))
                }
            },
            other => (other, None),
        };
        let offset = unsigned_u32(offset).ok_or_else(|| {
            invalid(format!(
                "field {field}: offset {offset} is not an unsigned 32-bit number"
            ))
        })?;
        out.fields.insert(field, RawField { offset, type_name });
    }
    Ok(out)
}

fn unsigned_u32(v: &Value) -> Option<u32> {
    let n = parse_number(v)?;
    if n.negative {
        return None;
    }
    u32::try_from(n.value).ok()
}

fn literal(v: &Value) -> Result<Literal, String> {
    if let Some(n) = parse_number(v) {
        let Number { value, .. } = n;
        return Ok(Literal::Number {
            value,
            text: v.as_str().map(str::to_string),
        });
    }
    match v {
        Value::String(s) => Ok(Literal::Text(s.clone())),
        other => Err(format!("{other} is neither a number nor a string")),
    }
}

fn index(v: &Value) -> Result<u64, String> {
    match parse_number(v) {
        Some(n) if !n.negative => Ok(n.value),
        _ => Err(format!("pointer-data index {v} is not an unsigned number")),
    }
}

/// Parses the four global shapes: `VALUE`, `[INDEX]`, `[VALUE, "type"]`,
/// `[[INDEX], "type"]`.
fn parse_global(v: &Value) -> Result<RawGlobal, String> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Array(inner), Value::String(t)] => match inner.as_slice() {
                [i] => Ok(RawGlobal {
                    source: GlobalSource::Indirect(index(i)?),
                    type_name: Some(t.clone()),
                }),
                _ => Err(format!("{v}: an indirect value is a one-element array")),
            },
            [value, Value::String(t)] => Ok(RawGlobal {
                source: GlobalSource::Direct(literal(value)?),
                type_name: Some(t.clone()),
            }),
            [i] => Ok(RawGlobal {
                source: GlobalSource::Indirect(index(i)?),
                type_name: None,
            }),
            _ => Err(format!(
                "{v} is not one of VALUE, [INDEX], [VALUE, \"type\"], [[INDEX], \"type\"]"
            )),
        },
        other => Ok(RawGlobal {
            source: GlobalSource::Direct(literal(other)?),
            type_name: None,
        }),
    }
}

fn parse_contract_version(v: &Value) -> Option<ContractVersion> {
    match v {
        Value::String(s) if !s.is_empty() => Some(ContractVersion::Tag(s.clone())),
        Value::Number(n) => n.as_u64().map(ContractVersion::Number),
        _ => None,
    }
}
