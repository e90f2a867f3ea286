//! The stack-trace map (blob 27): for each compiled method, its start and the metadata
//! that names it. `u32` count, then per method a command byte whose bits say which fields
//! follow (1: owning type as a fixed `u32` handle; 2: name, a ConstantStringValue offset;
//! 4: signature, a MethodSignature offset, which clears the generic arguments; 8: a
//! signature and a ConstantStringArray of generic argument names; 0x10: the method is
//! hidden from stack traces), then an `i32` from its own address to the method's start.
//! Fields not given keep the previous method's values. Entries are not in address order.

use super::metadata::{Token, CONSTANT_STRING_ARRAY, CONSTANT_STRING_VALUE, METHOD_SIGNATURE};
use super::native_format::unsigned;
use super::{error, AotFormatError};

const UPDATE_OWNER: u8 = 0x01;
const UPDATE_NAME: u8 = 0x02;
const UPDATE_SIGNATURE: u8 = 0x04;
const UPDATE_GENERIC_SIGNATURE: u8 = 0x08;
const HIDDEN: u8 = 0x10;

/// One method of the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapEntry {
    /// The method's start address (of its main body).
    pub start: u64,
    /// Its owning type (TypeDefinition, TypeReference or TypeSpecification handle).
    pub owner: Token,
    /// Its name (ConstantStringValue).
    pub name: Token,
    /// Its signature (MethodSignature).
    pub signature: Token,
    /// The names of its generic arguments (ConstantStringArray), nil when not generic.
    pub generic_arguments: Token,
    /// `[StackTraceHidden]`: the runtime leaves it out of stack traces.
    pub hidden: bool,
}

/// Decodes the map in `bytes`, which start at address `address` (method starts are
/// relative to it). The result is sorted by start.
pub fn decode(
    bytes: &[u8],
    address: u64,
    max_entries: u64,
) -> Result<Vec<MapEntry>, AotFormatError> {
    let count = super::le_u32(bytes, 0)
        .ok_or_else(|| error("stack-trace map", "shorter than its count"))?;
    if u64::from(count) > max_entries {
        return Err(error(
            "stack-trace map",
            format!("{count} entries, over the list limit of {max_entries}"),
        ));
    }
    // Each entry takes at least 5 bytes: no more room than the blob can fill.
    let mut out = Vec::with_capacity((count as usize).min(bytes.len().saturating_sub(4) / 5));
    let mut pos = 4usize;
    let mut current = MapEntry {
        start: 0,
        owner: Token::NIL,
        name: Token::NIL,
        signature: Token::NIL,
        generic_arguments: Token::NIL,
        hidden: false,
    };
    let truncated =
        |pos: usize| error("stack-trace map", format!("ends inside the entry at {pos}"));
    for _ in 0..count {
        let command = *bytes.get(pos).ok_or_else(|| truncated(pos))?;
        pos += 1;
        if command & UPDATE_OWNER != 0 {
            current.owner = Token(super::le_u32(bytes, pos).ok_or_else(|| truncated(pos))?);
            pos += 4;
        }
        if command & UPDATE_NAME != 0 {
            let (v, p) = unsigned(bytes, pos)?;
            current.name = Token::new(CONSTANT_STRING_VALUE, v);
            pos = p;
        }
        if command & UPDATE_SIGNATURE != 0 {
            let (v, p) = unsigned(bytes, pos)?;
            current.signature = Token::new(METHOD_SIGNATURE, v);
            current.generic_arguments = Token::NIL;
            pos = p;
        }
        if command & UPDATE_GENERIC_SIGNATURE != 0 {
            let (v, p) = unsigned(bytes, pos)?;
            current.signature = Token::new(METHOD_SIGNATURE, v);
            let (g, p) = unsigned(bytes, p)?;
            current.generic_arguments = Token::new(CONSTANT_STRING_ARRAY, g);
            pos = p;
        }
        current.hidden = command & HIDDEN != 0;
        let relative = super::le_u32(bytes, pos).ok_or_else(|| truncated(pos))? as i32;
        current.start = address
            .wrapping_add(pos as u64)
            .wrapping_add_signed(i64::from(relative));
        pos += 4;
        out.push(current);
    }
    out.sort_by_key(|e| e.start);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_carry_over_and_starts_are_relative_to_their_field() {
        let mut b = Vec::new();
        b.extend(2u32.to_le_bytes());
        // Entry 1: owner, name 5, signature 7, start 0x100 after its field (at 4+1+4+1+1 = 11).
        b.push(UPDATE_OWNER | UPDATE_NAME | UPDATE_SIGNATURE);
        b.extend(((58u32 << 25) | 0x40).to_le_bytes());
        b.push(5 << 1);
        b.push(7 << 1);
        b.extend(0x100i32.to_le_bytes());
        // Entry 2: only a new name, hidden; start 0x10 before its field (at 17).
        b.push(UPDATE_NAME | HIDDEN);
        b.push(9 << 1);
        b.extend((-0x10i32).to_le_bytes());
        let map = decode(&b, 0x1000, 100).unwrap();
        assert_eq!(map.len(), 2);
        let (a, h) = (map[1], map[0]);
        assert_eq!(a.start, 0x1000 + 11 + 0x100);
        assert_eq!(h.start, 0x1000 + 17 - 0x10);
        assert_eq!(a.owner, h.owner, "the owner carries over");
        assert_eq!(h.signature, Token::new(METHOD_SIGNATURE, 7));
        assert_eq!(h.name, Token::new(CONSTANT_STRING_VALUE, 9));
        assert!(h.hidden && !a.hidden);
        assert!(decode(&b[..b.len() - 2], 0x1000, 100).is_err());
        assert!(decode(&b, 0x1000, 1).is_err());
    }
}
