//! The contract descriptor a .NET 9+ runtime exports as `DotNetRuntimeContractDescriptor`:
//! reading the structure, its JSON and pointer data from target memory, then its
//! sub-descriptors, recursively, into one [`DataDescriptor`].
//!
//! Structure (pointer-sized fields are 4 or 8 bytes):
//! `u64 magic; u32 flags; u32 descriptor_size; ptr descriptor; u32 pointer_data_count;
//! u32 pad; ptr pointer_data`. The magic's byte order tells the target's; flags bit 1 set
//! means 4-byte pointers.

use std::collections::HashSet;

use super::error::DescriptorError;
use super::json::{self, GlobalSource};
use super::model::{resolve_index, DataDescriptor, SubDescriptorInfo};
use super::Limits;
use crate::limits::Limit;
use crate::memory::{decode_unsigned, DataLayout, Endian, ReadError, Target};

/// "DNCCDAC\0" as it lies in memory on a little-endian target.
const MAGIC_LE: [u8; 8] = *b"DNCCDAC\0";

/// The descriptor's header fields, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractDescriptorHeader {
    /// Address of the structure.
    pub address: u64,
    /// Layout given by the magic and flags.
    pub layout: DataLayout,
    /// Raw flags word.
    pub flags: u32,
    /// Bytes of JSON.
    pub descriptor_size: u32,
    /// Address of the JSON.
    pub descriptor: u64,
    /// Number of pointer-data slots.
    pub pointer_data_count: u32,
    /// Address of the pointer-data array.
    pub pointer_data: u64,
}

/// Reads and validates the structure at `addr`.
pub fn read_header(
    target: &Target,
    addr: u64,
    name: &str,
) -> Result<ContractDescriptorHeader, DescriptorError> {
    let read_err = |what: &'static str| {
        move |source| DescriptorError::Read {
            descriptor: name.to_string(),
            what,
            source,
        }
    };
    // magic (8), flags (4), descriptor_size (4); then pointer-sized fields.
    let mut head = [0u8; 16];
    target
        .read_into(addr, &mut head)
        .map_err(read_err("header"))?;
    let magic: [u8; 8] = head[..8].try_into().unwrap_or_default();
    let mut magic_be = MAGIC_LE;
    magic_be.reverse();
    let endian = if magic == MAGIC_LE {
        Endian::Little
    } else if magic == magic_be {
        Endian::Big
    } else {
        return Err(DescriptorError::BadMagic { addr, found: magic });
    };
    let flags = decode_unsigned(&head[8..12], endian) as u32;
    if flags & 1 == 0 {
        return Err(DescriptorError::BadFlags { addr, flags });
    }
    let pointer_size: u8 = if flags & 2 != 0 { 4 } else { 8 };
    let descriptor_size = decode_unsigned(&head[12..16], endian) as u32;
    // descriptor (ptr), pointer_data_count (4), pad (4), pointer_data (ptr).
    let ps = usize::from(pointer_size);
    let mut rest = vec![0u8; 2 * ps + 8];
    let rest_addr = addr
        .checked_add(16)
        .ok_or(ReadError::AddressOverflow {
            addr,
            len: 16 + rest.len(),
        })
        .map_err(read_err("header"))?;
    target
        .read_into(rest_addr, &mut rest)
        .map_err(read_err("header"))?;
    let descriptor = decode_unsigned(&rest[..ps], endian);
    let pointer_data_count = decode_unsigned(&rest[ps..ps + 4], endian) as u32;
    let pointer_data = decode_unsigned(&rest[ps + 8..2 * ps + 8], endian);
    let t = target.with_layout(DataLayout {
        pointer_size,
        endian,
    });
    Ok(ContractDescriptorHeader {
        address: addr,
        layout: t.layout(),
        flags,
        descriptor_size,
        descriptor,
        pointer_data_count,
        pointer_data,
    })
}

/// The pointer data of the descriptor exported at `addr` (for a descriptor given by the
/// user that indexes the runtime's own pointer data).
pub fn pointer_data(
    target: &Target,
    addr: u64,
    limits: &Limits,
) -> Result<Vec<u64>, DescriptorError> {
    let header = read_header(target, addr, "main")?;
    if header.pointer_data_count > limits.max_pointer_data {
        return Err(DescriptorError::TooLarge {
            descriptor: "main".into(),
            what: "pointer-data count",
            limit: Limit::Fixed,
            value: header.pointer_data_count.into(),
            cap: limits.max_pointer_data.into(),
        });
    }
    target
        .with_layout(header.layout)
        .read_pointers(header.pointer_data, header.pointer_data_count as usize)
        .map_err(|source| DescriptorError::Read {
            descriptor: "main".into(),
            what: "pointer data",
            source,
        })
}

/// Loads the descriptor exported at `addr` and all its sub-descriptors.
///
/// A sub-descriptor that cannot be used (unreadable, damaged, of another layout, past a
/// limit) is recorded in [`DataDescriptor::sub_descriptors`] with the reason and skipped:
/// the runtime's own data stays usable. A name that two descriptors both define is an
/// error, since either definition could be the wrong one.
pub fn load(
    target: &Target,
    addr: u64,
    limits: &Limits,
) -> Result<DataDescriptor, DescriptorError> {
    let header = read_header(target, addr, "main")?;
    let mut out = DataDescriptor::new(header.layout);
    let mut walk = Walk {
        target,
        limits,
        visited: HashSet::new(),
        subs_left: limits.max_sub_descriptors,
        bytes_left: limits.max_total_descriptor_bytes,
    };
    walk.load_into(header, "main", 0, &mut out)?;
    Ok(out)
}

/// Loads the descriptor exported at `addr` from its copy in the runtime's file on disk
/// (JSON and pointer data; see [`super::on_disk`]), with its sub-descriptors read from
/// the target as usual.
pub fn load_from_file(
    target: &Target,
    addr: u64,
    file: &super::on_disk::FileDescriptor,
    limits: &Limits,
) -> Result<DataDescriptor, DescriptorError> {
    let layout = DataLayout {
        pointer_size: 8,
        endian: Endian::Little,
    };
    let t = target.with_layout(layout);
    let mut out = DataDescriptor::new(layout);
    let mut walk = Walk {
        target: &t,
        limits,
        visited: HashSet::from([addr]),
        subs_left: limits.max_sub_descriptors,
        bytes_left: limits.max_total_descriptor_bytes,
    };
    walk.merge_text(&t, &file.json, &file.pointer_data, "main", 0, &mut out)?;
    Ok(out)
}

/// State of one load: what was visited and what the budgets still allow.
struct Walk<'a> {
    target: &'a Target,
    limits: &'a Limits,
    visited: HashSet<u64>,
    subs_left: u32,
    bytes_left: u64,
}

impl Walk<'_> {
    fn load_into(
        &mut self,
        header: ContractDescriptorHeader,
        name: &str,
        depth: u32,
        out: &mut DataDescriptor,
    ) -> Result<(), DescriptorError> {
        self.visited.insert(header.address);
        if header.layout != out.layout() {
            return Err(DescriptorError::LayoutMismatch {
                descriptor: name.to_string(),
            });
        }
        let too_large = |what, value: u64, cap: u64| DescriptorError::TooLarge {
            descriptor: name.to_string(),
            what,
            limit: Limit::DescriptorSize,
            value,
            cap,
        };
        let limits = self.limits;
        if header.descriptor_size > limits.max_descriptor_bytes {
            return Err(too_large(
                "JSON size",
                header.descriptor_size.into(),
                limits.max_descriptor_bytes.into(),
            ));
        }
        if u64::from(header.descriptor_size) > self.bytes_left {
            return Err(too_large(
                "JSON size, added to the descriptors already read,",
                header.descriptor_size.into(),
                limits.max_total_descriptor_bytes,
            ));
        }
        self.bytes_left -= u64::from(header.descriptor_size);
        if header.pointer_data_count > limits.max_pointer_data {
            return Err(too_large(
                "pointer-data count",
                header.pointer_data_count.into(),
                limits.max_pointer_data.into(),
            ));
        }
        let t = self.target.with_layout(header.layout);
        let read_err = |what| {
            move |source| DescriptorError::Read {
                descriptor: name.to_string(),
                what,
                source,
            }
        };
        let text = t
            .read_bytes(header.descriptor, header.descriptor_size as usize)
            .map_err(read_err("JSON text"))?;
        let pointer_data = t
            .read_pointers(header.pointer_data, header.pointer_data_count as usize)
            .map_err(read_err("pointer data"))?;
        self.merge_text(&t, &text, &pointer_data, name, depth, out)
    }

    /// Parses one descriptor's JSON, merges it with its pointer data into `out`, and
    /// loads its sub-descriptors from the target.
    fn merge_text(
        &mut self,
        t: &Target,
        text: &[u8],
        pointer_data: &[u64],
        name: &str,
        depth: u32,
        out: &mut DataDescriptor,
    ) -> Result<(), DescriptorError> {
        // Some runtimes count the C string's terminator in descriptor_size.
        let text = text.strip_suffix(&[0]).unwrap_or(text);
        let physical = json::parse(name, text)?;
        out.merge(name, &physical, pointer_data)?;

        for (sub_name, raw) in &physical.sub_descriptors {
            let (address, outcome) =
                self.load_sub(t, name, sub_name, raw, pointer_data, depth, out);
            match outcome {
                Ok(()) => out.record_sub_descriptor(SubDescriptorInfo {
                    name: sub_name.clone(),
                    address,
                    skipped: None,
                }),
                Err(e @ DescriptorError::Duplicate { .. }) => return Err(e),
                Err(e) => {
                    tracing::info!(sub_descriptor = %sub_name, "sub-descriptor not loaded: {e}");
                    out.record_sub_descriptor(SubDescriptorInfo {
                        name: sub_name.clone(),
                        address,
                        skipped: Some(e.to_string()),
                    })
                }
            }
        }
        Ok(())
    }

    /// Finds and loads one sub-descriptor; returns its address when the pointer chain
    /// reached one, and the outcome.
    #[allow(clippy::too_many_arguments)]
    fn load_sub(
        &mut self,
        t: &Target,
        parent: &str,
        sub_name: &str,
        raw: &json::RawGlobal,
        pointer_data: &[u64],
        depth: u32,
        out: &mut DataDescriptor,
    ) -> (Option<u64>, Result<(), DescriptorError>) {
        let invalid = |detail: String| DescriptorError::Invalid {
            descriptor: parent.to_string(),
            detail: format!("sub-descriptor {sub_name}: {detail}"),
        };
        // The runtime writes sub-descriptors as [[k],"pointer"]: the slot holds the
        // address of a pointer variable, which holds the sub-descriptor's address (null
        // until that component initializes).
        let GlobalSource::Indirect(index) = raw.source else {
            return (None, Err(invalid("not an indirect [[index]] value".into())));
        };
        let variable = match resolve_index(parent, sub_name, index, pointer_data) {
            Ok(v) => v,
            Err(e) => return (None, Err(e)),
        };
        if variable == 0 {
            return (None, Err(invalid("its pointer-data slot is null".into())));
        }
        if self.subs_left == 0 {
            return (
                None,
                Err(DescriptorError::TooLarge {
                    descriptor: parent.to_string(),
                    what: "number of sub-descriptors",
                    limit: Limit::Fixed,
                    value: u64::from(self.limits.max_sub_descriptors) + 1,
                    cap: self.limits.max_sub_descriptors.into(),
                }),
            );
        }
        self.subs_left -= 1;
        if depth + 1 > self.limits.max_sub_descriptor_depth {
            return (
                None,
                Err(DescriptorError::TooLarge {
                    descriptor: parent.to_string(),
                    what: "sub-descriptor nesting",
                    limit: Limit::Fixed,
                    value: u64::from(depth + 1),
                    cap: self.limits.max_sub_descriptor_depth.into(),
                }),
            );
        }
        let sub_addr = match t.read_pointer(variable) {
            Ok(0) => {
                return (
                    None,
                    Err(invalid(
                        "the runtime has not published it yet (null pointer)".into(),
                    )),
                )
            }
            Ok(a) => a,
            Err(source) => {
                return (
                    None,
                    Err(DescriptorError::Read {
                        descriptor: parent.to_string(),
                        what: "sub-descriptor pointer",
                        source,
                    }),
                )
            }
        };
        if self.visited.contains(&sub_addr) {
            return (
                Some(sub_addr),
                Err(invalid(format!(
                    "the descriptor at {sub_addr:#x} was already loaded (a cycle, or two names for one descriptor)"
                ))),
            );
        }
        let outcome = read_header(self.target, sub_addr, sub_name)
            .and_then(|header| self.load_into(header, sub_name, depth + 1, out));
        (Some(sub_addr), outcome)
    }
}
