//! Which method each piece of a ReadyToRun image's code belongs to, read offline from the
//! image: MethodDefEntryPoints (non-generic methods, by MethodDef) and
//! InstanceMethodEntryPoints (instantiations, by signature) give each method's first
//! runtime function; the runtime functions after it that are no method's entry point are
//! its funclets; the hot/cold map pairs cold parts with their hot part.

use std::collections::HashMap;

use super::image::{section, R2rImage};
use super::native::{array_get, decode_unsigned, hashtable_entries};
use super::signature::{decode_instance_method, InstanceMethod, ModuleSet};
use super::R2rError;
use crate::formats::ecma::{Metadata, TableId, Token};

/// What a method entry point names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MethodKey {
    /// A MethodDef of the image (no instantiation).
    MethodDef(u32),
    /// An instantiated method, decoded.
    Instance(InstanceMethod),
    /// An instantiated method whose signature could not be decoded (why).
    Undecoded(String),
}

/// One compiled method of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledMethod {
    pub key: MethodKey,
    /// Index of its first (hot) runtime function.
    pub first: usize,
    /// Runtime functions of its hot part (the body and its funclets): `first..first+count`.
    pub count: usize,
    /// Index of its cold part's first runtime function, if split.
    pub cold: Option<usize>,
    /// Runtime functions of the cold part.
    pub cold_count: usize,
}

/// The runtime-function index an entry point's `id` encodes (bit 0: fixups follow).
fn entry_index(buf: &[u8], at: usize) -> Result<usize, R2rError> {
    let (id, _) = decode_unsigned(buf, at)?;
    Ok(if id & 1 != 0 { id >> 2 } else { id >> 1 } as usize)
}

/// Every compiled method of the image, in runtime-function order.
pub fn compiled_methods(
    img: &R2rImage<'_>,
    md: &Metadata<'_>,
    modules: &ModuleSet<'_, '_>,
) -> Result<Vec<CompiledMethod>, R2rError> {
    let n = img.runtime_functions.len();
    let mut starts: HashMap<usize, MethodKey> = HashMap::new();
    if let Some(buf) = img.section_bytes(section::METHOD_DEF_ENTRY_POINTS)? {
        for rid in 1..=md.tables.rows(TableId::MethodDef) {
            if let Some(at) = array_get(buf, rid - 1)? {
                let index = entry_index(buf, at)?;
                if index < n {
                    starts.insert(index, MethodKey::MethodDef(rid));
                }
            }
        }
    }
    if let Some(buf) = img.section_bytes(section::INSTANCE_METHOD_ENTRY_POINTS)? {
        for at in hashtable_entries(buf, 0)? {
            let sig = &buf[at..];
            let (key, entry_at) = match decode_instance_method(sig, modules) {
                Ok((m, used)) => (MethodKey::Instance(m), at + used),
                Err(e) => {
                    // The entry point still follows the signature: skip it by decoding
                    // the signature's shape without names.
                    match super::signature::skip_instance_method(sig) {
                        Some(used) => (MethodKey::Undecoded(e.to_string()), at + used),
                        None => continue,
                    }
                }
            };
            let index = entry_index(buf, entry_at)?;
            if index < n {
                starts.entry(index).or_insert(key);
            }
        }
    }
    // Cold parts: (cold index, hot index) pairs.
    let mut cold_of: HashMap<usize, usize> = HashMap::new();
    if let Some(buf) = img.section_bytes(section::HOT_COLD_MAP)? {
        for pair in buf.chunks_exact(8) {
            let cold = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]) as usize;
            let hot = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]) as usize;
            if cold < n && hot < n {
                cold_of.insert(hot, cold);
            }
        }
    }
    // A part runs from its first runtime function up to the next method's or cold
    // part's first one: what lies between are its funclets.
    let mut boundaries: Vec<usize> = starts.keys().chain(cold_of.values()).copied().collect();
    boundaries.sort_unstable();
    boundaries.dedup();
    let part_len = |first: usize| -> usize {
        let next = match boundaries.binary_search(&first) {
            Ok(i) => boundaries.get(i + 1).copied(),
            Err(i) => boundaries.get(i).copied(),
        };
        next.unwrap_or(n).saturating_sub(first).max(1)
    };
    let mut order: Vec<(usize, MethodKey)> = starts.into_iter().collect();
    order.sort_unstable_by_key(|(first, _)| *first);
    let mut out = Vec::with_capacity(order.len());
    for (first, key) in order {
        let cold = cold_of.get(&first).copied();
        out.push(CompiledMethod {
            key,
            first,
            count: part_len(first),
            cold,
            cold_count: cold.map_or(0, part_len),
        });
    }
    Ok(out)
}

/// The MethodDef an instantiated method's token names in `md`: a MethodDef directly, or a
/// MemberRef on a type of `md` matched by name and signature bytes.
pub fn method_def_of(md: &Metadata<'_>, token: Token) -> Option<u32> {
    match token.table()? {
        TableId::MethodDef => Some(token.rid()),
        TableId::MemberRef => {
            let mr = md.member_ref(token.rid()).ok()?;
            let owner = match mr.class.table()? {
                TableId::TypeDef => mr.class.rid(),
                TableId::TypeSpec => {
                    let spec = md.type_spec(mr.class.rid()).ok()?;
                    let blob = md.blobs.get(spec.signature).ok()?;
                    // GENERICINST (CLASS|VALUETYPE) TypeDefOrRef...: the generic type.
                    if blob.first() != Some(&0x15) {
                        return None;
                    }
                    let (coded, _) = crate::formats::ecma::decompress_u32(blob.get(2..)?)?;
                    if coded & 3 != 0 {
                        return None;
                    }
                    coded >> 2
                }
                _ => return None,
            };
            let name = md.strings.get_bytes(mr.name).ok()?;
            let sig = md.blobs.get(mr.signature).ok()?;
            md.type_methods(owner).ok()?.into_iter().find(|&rid| {
                md.method_def(rid).ok().is_some_and(|row| {
                    md.strings.get_bytes(row.name).ok() == Some(name)
                        && md.blobs.get(row.signature).ok() == Some(sig)
                })
            })
        }
        _ => None,
    }
}
