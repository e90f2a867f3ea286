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
use super::json::{self, GlobalSource, Literal};
use super::model::{resolve_index, DataDescriptor, SubDescriptorInfo};
use super::Limits;
use crate::target::{decode_unsigned, DataLayout, Endian, ReadError, Target};

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

/// Loads the descriptor exported at `addr` and all its sub-descriptors.
pub fn load(
    target: &Target,
    addr: u64,
    limits: &Limits,
) -> Result<DataDescriptor, DescriptorError> {
    let header = read_header(target, addr, "main")?;
    let mut out = DataDescriptor::new(header.layout);
    let mut visited = HashSet::new();
    load_into(target, header, "main", 0, limits, &mut out, &mut visited)?;
    Ok(out)
}

fn load_into(
    target: &Target,
    header: ContractDescriptorHeader,
    name: &str,
    depth: u32,
    limits: &Limits,
    out: &mut DataDescriptor,
    visited: &mut HashSet<u64>,
) -> Result<(), DescriptorError> {
    visited.insert(header.address);
    if header.layout != out.layout() {
        return Err(DescriptorError::LayoutMismatch {
            descriptor: name.to_string(),
        });
    }
    let too_large = |what, value: u64, cap: u64| DescriptorError::TooLarge {
        descriptor: name.to_string(),
        what,
        value,
        cap,
    };
    if header.descriptor_size > limits.max_descriptor_bytes {
        return Err(too_large(
            "JSON size",
            header.descriptor_size.into(),
            limits.max_descriptor_bytes.into(),
        ));
    }
    if header.pointer_data_count > limits.max_pointer_data {
        return Err(too_large(
            "pointer-data count",
            header.pointer_data_count.into(),
            limits.max_pointer_data.into(),
        ));
    }
    let t = target.with_layout(header.layout);
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
    // Some runtimes count the C string's terminator in descriptor_size.
    let text = text.strip_suffix(&[0]).unwrap_or(&text);
    let physical = json::parse(name, text)?;
    out.merge(name, &physical, &pointer_data)?;

    for (sub_name, raw) in &physical.sub_descriptors {
        // The slot holds the address of a pointer variable; the variable holds the address
        // of the sub-descriptor (null until that component initializes).
        let variable = match &raw.source {
            GlobalSource::Indirect(i) => resolve_index(name, sub_name, *i, &pointer_data)?,
            GlobalSource::Direct(Literal::Number { value, .. }) => *value,
            GlobalSource::Direct(Literal::Text(_)) => continue,
        };
        let mut skip = |reason: String| {
            tracing::info!(sub_descriptor = %sub_name, "sub-descriptor not loaded: {reason}");
            out.record_sub_descriptor(SubDescriptorInfo {
                name: sub_name.clone(),
                address: None,
                skipped: Some(reason),
            });
        };
        if variable == 0 {
            skip("its pointer-data slot is null".into());
            continue;
        }
        if depth + 1 > limits.max_sub_descriptor_depth {
            return Err(too_large(
                "sub-descriptor nesting",
                u64::from(depth + 1),
                limits.max_sub_descriptor_depth.into(),
            ));
        }
        let sub_addr = match t.read_pointer(variable) {
            Ok(0) => {
                skip("the runtime has not published it yet (null pointer)".into());
                continue;
            }
            Ok(a) => a,
            Err(e) => {
                skip(format!("its pointer is unreadable: {e}"));
                continue;
            }
        };
        if visited.contains(&sub_addr) {
            return Err(DescriptorError::Invalid {
                descriptor: name.to_string(),
                detail: format!(
                    "sub-descriptor {sub_name} at {sub_addr:#x} was already loaded (a cycle)"
                ),
            });
        }
        let sub_header = match read_header(target, sub_addr, sub_name) {
            Ok(h) => h,
            Err(DescriptorError::Read { source, .. }) => {
                skip(format!("unreadable: {source}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        match load_into(
            target,
            sub_header,
            sub_name,
            depth + 1,
            limits,
            out,
            visited,
        ) {
            Ok(()) => out.record_sub_descriptor(SubDescriptorInfo {
                name: sub_name.clone(),
                address: Some(sub_addr),
                skipped: None,
            }),
            // Memory missing (a small dump) is not fatal; a malformed one is.
            Err(DescriptorError::Read { source, what, .. }) => {
                out.record_sub_descriptor(SubDescriptorInfo {
                    name: sub_name.clone(),
                    address: Some(sub_addr),
                    skipped: Some(format!("its {what} is unreadable: {source}")),
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
