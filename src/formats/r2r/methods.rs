//! Which method each piece of a ReadyToRun image's code belongs to, read offline from the
//! image: MethodDefEntryPoints (non-generic methods, by MethodDef; one section per
//! component assembly in a composite image) and InstanceMethodEntryPoints (instantiations,
//! by signature) give each method's first runtime function; the runtime functions after it
//! that are no method's entry point are its funclets; the hot/cold map pairs cold parts
//! with their hot part.

use std::collections::HashMap;

use super::image::{section, R2rImage};
use super::native::{array_get, decode_unsigned, hashtable_entries, read_unsigned};
use super::signature::{decode_instance_method, InstanceMethod};
use super::R2rError;
use crate::formats::cursor::Cursor;

/// Highest MethodDef row id (24 bits).
const MAX_RID: u32 = 0x00FF_FFFF;

/// What a method entry point names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MethodKey {
    /// A MethodDef (no instantiation) of signature module `module` (0: a plain image's
    /// own; a composite image's components by their index).
    MethodDef {
        /// Signature module index.
        module: u32,
        /// MethodDef row id.
        rid: u32,
    },
    /// An instantiated method, decoded.
    Instance(InstanceMethod),
}

/// One compiled method of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledMethod {
    /// Which method.
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

/// A MethodDefEntryPoints section and the module whose MethodDefs it indexes.
#[derive(Debug, Clone, Copy)]
pub struct MethodDefEntryPoints<'s> {
    /// The module's signature index.
    pub module: u32,
    /// Bytes of the MethodDefEntryPoints section.
    pub section: &'s [u8],
    /// MethodDef rows of the module, when its metadata is at hand (otherwise every
    /// element the array has is listed).
    pub rows: Option<u32>,
}

/// What [`compiled_methods`] found besides the methods.
#[derive(Debug, Clone, Default)]
pub struct MethodScan {
    /// The compiled methods found.
    pub methods: Vec<CompiledMethod>,
    /// InstanceMethodEntryPoints entries whose signature did not decode (skipped: the
    /// entry point follows the signature).
    pub undecoded_instances: usize,
}

/// The runtime-function index an entry point's `id` encodes (bit 0: fixups follow).
fn entry_index(buf: &[u8], at: usize) -> Result<usize, R2rError> {
    let (id, _) = decode_unsigned(buf, at)?;
    Ok(if id & 1 != 0 { id >> 2 } else { id >> 1 } as usize)
}

/// The elements a NativeArray says it has, bounded by what its bytes can hold (one root
/// offset of at least a byte per block of 16).
fn array_len(buf: &[u8]) -> u32 {
    let count = read_unsigned(buf, 0).map_or(0, |(header, _)| header >> 2);
    count
        .min(MAX_RID)
        .min(u32::try_from(buf.len().saturating_mul(16)).unwrap_or(u32::MAX))
}

/// Every compiled method of the image, in runtime-function order: those of the
/// MethodDefEntryPoints sections given (the image's own; each component's of a composite
/// image) and the image's instantiations.
pub fn compiled_methods(
    img: &R2rImage<'_>,
    method_defs: &[MethodDefEntryPoints<'_>],
) -> Result<MethodScan, R2rError> {
    let n = img.runtime_functions.len();
    let mut starts: HashMap<usize, MethodKey> = HashMap::new();
    for source in method_defs {
        let buf = source.section;
        let rows = source.rows.unwrap_or_else(|| array_len(buf)).min(MAX_RID);
        for rid in 1..=rows {
            if let Some(at) = array_get(buf, rid - 1)? {
                let index = entry_index(buf, at)?;
                if index < n {
                    starts.insert(
                        index,
                        MethodKey::MethodDef {
                            module: source.module,
                            rid,
                        },
                    );
                }
            }
        }
    }
    let mut undecoded_instances = 0;
    if let Some(buf) = img.section_bytes(section::INSTANCE_METHOD_ENTRY_POINTS)? {
        for at in hashtable_entries(buf, 0)? {
            let Ok((m, used)) = decode_instance_method(&buf[at..]) else {
                undecoded_instances += 1;
                continue;
            };
            let index = entry_index(buf, at + used)?;
            if index < n {
                starts.entry(index).or_insert(MethodKey::Instance(m));
            }
        }
    }
    // Cold parts: (cold index, hot index) pairs.
    let mut cold_of: HashMap<usize, usize> = HashMap::new();
    if let Some(buf) = img.section_bytes(section::HOT_COLD_MAP)? {
        for pair in buf.chunks_exact(8) {
            let mut c = Cursor::new(pair);
            let cold = c.read_u32("hot/cold map cold index")? as usize;
            let hot = c.read_u32("hot/cold map hot index")? as usize;
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
    let mut methods = Vec::with_capacity(order.len());
    for (first, key) in order {
        let cold = cold_of.get(&first).copied();
        methods.push(CompiledMethod {
            key,
            first,
            count: part_len(first),
            cold,
            cold_count: cold.map_or(0, part_len),
        });
    }
    Ok(MethodScan {
        methods,
        undecoded_instances,
    })
}
