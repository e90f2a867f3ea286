//! Dynamic symbols read from the target's memory, for a module whose file is not on this
//! machine: `PT_DYNAMIC` gives the symbol and string tables, and the hash table how many
//! symbols there are.

use std::sync::Arc;

use super::{demangle, sort, Sym, SymbolTable, MAX_NAME, MAX_SYMBOLS};
use crate::memory::Target;
use crate::unwind::elf_modules;

const DT_NULL: u64 = 0;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const DT_GNU_HASH: u64 = 0x6fff_fef5;
/// Most `PT_DYNAMIC` entries read.
const MAX_DYNAMIC: u64 = 512;
/// Largest string table read (bytes).
const MAX_STRTAB: u64 = 32 << 20;
/// Most hash buckets read.
const MAX_BUCKETS: u64 = 1 << 20;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;

/// The function symbols of the module loaded at `base`, from its dynamic symbol table in
/// the target's memory.
pub(super) fn from_memory(target: &Target, base: u64) -> Result<SymbolTable, String> {
    let err = |e: crate::memory::ReadError| e.to_string();
    let segments = elf_modules::headers_from_memory(target, base)?;
    let bias = elf_modules::load_bias(base, &segments).ok_or("no PT_LOAD")?;
    let dynamic = segments
        .iter()
        .find(|s| s.kind == object::elf::PT_DYNAMIC)
        .ok_or("no PT_DYNAMIC")?;
    let count = (dynamic.memsz / 16).min(MAX_DYNAMIC);
    let words = target
        .read_pointers(bias.wrapping_add(dynamic.vaddr), count as usize * 2)
        .map_err(err)?;
    let (mut symtab, mut strtab, mut strsz, mut hash, mut gnu_hash) =
        (None, None, None, None, None);
    for pair in words.chunks_exact(2) {
        // The loader relocates the table addresses in place; a file address still needs
        // the bias.
        let ptr = if pair[1] >= base {
            pair[1]
        } else {
            pair[1].wrapping_add(bias)
        };
        match pair[0] {
            DT_NULL => break,
            DT_SYMTAB => symtab = Some(ptr),
            DT_STRTAB => strtab = Some(ptr),
            DT_STRSZ => strsz = Some(pair[1]),
            DT_HASH => hash = Some(ptr),
            DT_GNU_HASH => gnu_hash = Some(ptr),
            _ => {}
        }
    }
    let (symtab, strtab, strsz) = match (symtab, strtab, strsz) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err("no DT_SYMTAB, DT_STRTAB or DT_STRSZ".into()),
    };
    let nsyms = match (gnu_hash, hash) {
        (Some(h), _) => gnu_hash_count(target, h)?,
        (None, Some(h)) => u64::from(target.read_u32(h.wrapping_add(4)).map_err(err)?),
        (None, None) => return Err("no hash table to count the symbols".into()),
    }
    .min(MAX_SYMBOLS as u64);
    let strings = target
        .read_bytes(strtab, strsz.min(MAX_STRTAB) as usize)
        .map_err(err)?;
    let entries = target
        .read_bytes(symtab, nsyms as usize * 24)
        .map_err(err)?;
    let mut symbols = Vec::new();
    for e in entries.chunks_exact(24) {
        let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let le64 = |b: &[u8]| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let (name, info, shndx) = (
            le32(&e[0..4]) as usize,
            e[4],
            u16::from_le_bytes([e[6], e[7]]),
        );
        let (value, size) = (le64(&e[8..16]), le64(&e[16..24]));
        if shndx == 0 || !matches!(info & 0xf, STT_FUNC | STT_GNU_IFUNC) {
            continue;
        }
        let Some(rest) = strings.get(name..) else {
            continue;
        };
        let end = rest.iter().take(MAX_NAME).position(|&b| b == 0);
        let Some(Ok(text)) = end.map(|n| std::str::from_utf8(&rest[..n])) else {
            continue;
        };
        if !text.is_empty() {
            symbols.push(Sym {
                addr: value,
                size,
                rank: match info >> 4 {
                    1 => 2,
                    2 => 1,
                    _ => 0,
                },
                name: Arc::from(demangle(super::unversioned(text))),
            });
        }
    }
    Ok(SymbolTable {
        bias,
        symbols: sort(symbols),
    })
}

/// The number of symbols of a `DT_GNU_HASH` table: one past the last symbol any chain
/// reaches.
fn gnu_hash_count(target: &Target, table: u64) -> Result<u64, String> {
    let err = |e: crate::memory::ReadError| e.to_string();
    let nbuckets = u64::from(target.read_u32(table).map_err(err)?);
    let symoffset = u64::from(target.read_u32(table.wrapping_add(4)).map_err(err)?);
    let bloom_size = u64::from(target.read_u32(table.wrapping_add(8)).map_err(err)?);
    if nbuckets > MAX_BUCKETS || bloom_size > MAX_BUCKETS {
        return Err(format!(
            "GNU hash table of {nbuckets} buckets, {bloom_size} bloom words"
        ));
    }
    let buckets_at = table.wrapping_add(16 + bloom_size * 8);
    let bytes = target
        .read_bytes(buckets_at, nbuckets as usize * 4)
        .map_err(err)?;
    let last = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .max()
        .unwrap_or(0);
    let last = u64::from(last);
    if last < symoffset {
        return Ok(symoffset);
    }
    let chains_at = buckets_at.wrapping_add(nbuckets * 4);
    for i in (last..).take(MAX_SYMBOLS) {
        let h = target
            .read_u32(chains_at.wrapping_add((i - symoffset) * 4))
            .map_err(err)?;
        if h & 1 == 1 {
            return Ok(i + 1);
        }
    }
    Err("GNU hash chain without an end".into())
}
