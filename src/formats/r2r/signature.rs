//! ReadyToRun signatures of instantiated methods (the keys of InstanceMethodEntryPoints),
//! decoded far enough to name the method: its MethodDef or MemberRef, and its owner
//! type's instantiation written the way the runtime writes type arguments in its perf map
//! (`System.Int32`, `System.__Canon`, `Ns.Outer+Inner`, `Ns.G`1[System.Int32]`, `T[]`).
//!
//! ReadyToRun extends ECMA-335 type signatures with `__Canon` (0x3E, shared generic code)
//! and a module override (0x3F, a module index, then a type whose tokens belong to that
//! module). Module 0 is the image's own; index N > 0 is the image's AssemblyRef N. Types
//! the perf map cannot print as a type argument (pointers, byrefs, generic variables,
//! function pointers, multi-dimensional arrays) are [`SigError::Unnamed`].

use crate::formats::ecma::names::push_escaped;
use crate::formats::ecma::signature::element_type as et;
use crate::formats::ecma::{Metadata, Primitive, TableId, Token};

/// `READYTORUN_METHOD_SIG_*` flags.
pub mod method_flags {
    pub const UNBOXING_STUB: u32 = 0x01;
    pub const INSTANTIATING_STUB: u32 = 0x02;
    pub const METHOD_INSTANTIATION: u32 = 0x04;
    pub const SLOT_INSTEAD_OF_TOKEN: u32 = 0x08;
    pub const MEMBER_REF_TOKEN: u32 = 0x10;
    pub const CONSTRAINED: u32 = 0x20;
    pub const OWNER_TYPE: u32 = 0x40;
    pub const UPDATE_CONTEXT: u32 = 0x80;
}
const CANON_ZAPSIG: u8 = 0x3E;
const MODULE_ZAPSIG: u8 = 0x3F;
const NATIVE_VALUETYPE_ZAPSIG: u8 = 0x3D;
/// Deepest type nesting followed.
const MAX_DEPTH: usize = 32;

/// Why a signature could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("signature truncated at byte {0}")]
    Truncated(usize),
    #[error("signature element {0:#04x} at byte {1} is not valid here")]
    Bad(u8, usize),
    #[error("{0}")]
    Unnamed(String),
}

/// The metadata of the modules a signature may refer to: index 0 is the image's own,
/// index N its AssemblyRef N (`None` when that assembly's file was not found).
pub struct ModuleSet<'m, 'a> {
    pub modules: Vec<Option<&'m Metadata<'a>>>,
}

impl<'m, 'a> ModuleSet<'m, 'a> {
    fn get(&self, index: u32) -> Result<&'m Metadata<'a>, SigError> {
        self.modules
            .get(index as usize)
            .copied()
            .flatten()
            .ok_or_else(|| SigError::Unnamed(format!("module {index} is not available")))
    }
}

/// A decoded instance entry point key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMethod {
    pub flags: u32,
    /// The method's token in module `module` (MethodDef or MemberRef).
    pub token: Token,
    pub module: u32,
    /// The owner type's arguments in runtime form (empty: not a generic owner).
    pub type_args: Vec<String>,
}

/// A cursor over a signature.
struct Cursor<'s> {
    data: &'s [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn u8(&mut self) -> Result<u8, SigError> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or(SigError::Truncated(self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    fn compressed(&mut self) -> Result<u32, SigError> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let (v, n) =
            crate::formats::ecma::decompress_u32(rest).ok_or(SigError::Truncated(self.pos))?;
        self.pos += n;
        Ok(v)
    }

    fn type_token(&mut self) -> Result<Token, SigError> {
        let at = self.pos;
        let v = self.compressed()?;
        let table = match v & 3 {
            0 => TableId::TypeDef,
            1 => TableId::TypeRef,
            2 => TableId::TypeSpec,
            _ => return Err(SigError::Bad(v as u8, at)),
        };
        Ok(Token::new(table, v >> 2))
    }
}

/// Decodes the method signature at the start of `data`: the method and its owner type's
/// arguments; returns it and the bytes it took (the entry point follows them).
pub fn decode_instance_method(
    data: &[u8],
    modules: &ModuleSet<'_, '_>,
) -> Result<(InstanceMethod, usize), SigError> {
    use method_flags as f;
    let mut c = Cursor { data, pos: 0 };
    let flags = c.compressed()?;
    let mut module = 0;
    if flags & f::UPDATE_CONTEXT != 0 {
        module = c.compressed()?;
    }
    let mut type_args = Vec::new();
    if flags & f::OWNER_TYPE != 0 {
        type_args = owner_type_args(&mut c, modules, module)?.1;
    }
    if flags & f::SLOT_INSTEAD_OF_TOKEN != 0 {
        return Err(SigError::Unnamed("method given by slot".into()));
    }
    let rid = c.compressed()?;
    let token = if flags & f::MEMBER_REF_TOKEN != 0 {
        Token::new(TableId::MemberRef, rid)
    } else {
        Token::new(TableId::MethodDef, rid)
    };
    if flags & f::METHOD_INSTANTIATION != 0 {
        let count = c.compressed()?;
        if count as usize > data.len() {
            return Err(SigError::Truncated(c.pos));
        }
        for _ in 0..count {
            skip_type(&mut c, 0)?;
        }
    }
    if flags & f::CONSTRAINED != 0 {
        skip_type(&mut c, 0)?;
    }
    Ok((
        InstanceMethod {
            flags,
            token,
            module,
            type_args,
        },
        c.pos,
    ))
}

/// The bytes the method signature at the start of `data` takes, read without naming
/// anything (to find the entry point after a signature that could not be named).
pub fn skip_instance_method(data: &[u8]) -> Option<usize> {
    use method_flags as f;
    let mut c = Cursor { data, pos: 0 };
    let flags = c.compressed().ok()?;
    if flags & f::UPDATE_CONTEXT != 0 {
        c.compressed().ok()?;
    }
    if flags & f::OWNER_TYPE != 0 {
        skip_type(&mut c, 0).ok()?;
    }
    if flags & f::SLOT_INSTEAD_OF_TOKEN != 0 {
        return None;
    }
    c.compressed().ok()?;
    if flags & f::METHOD_INSTANTIATION != 0 {
        let count = c.compressed().ok()?;
        for _ in 0..count.min(data.len() as u32) {
            skip_type(&mut c, 0).ok()?;
        }
    }
    if flags & f::CONSTRAINED != 0 {
        skip_type(&mut c, 0).ok()?;
    }
    Some(c.pos)
}

/// The owner type: a generic instantiation (its arguments are named) or a plain type (no
/// arguments). Returns the module the owner's token belongs to and the arguments.
fn owner_type_args(
    c: &mut Cursor<'_>,
    modules: &ModuleSet<'_, '_>,
    mut module: u32,
) -> Result<(u32, Vec<String>), SigError> {
    let mut e = c.u8()?;
    if e == MODULE_ZAPSIG {
        module = c.compressed()?;
        e = c.u8()?;
    }
    match e {
        et::GENERICINST => {
            let _kind = c.u8()?;
            let _generic = c.type_token()?;
            let count = c.compressed()?;
            if count as usize > c.data.len() {
                return Err(SigError::Truncated(c.pos));
            }
            let mut args = Vec::with_capacity(count as usize);
            for _ in 0..count {
                args.push(type_name(c, modules, module, 1)?);
            }
            Ok((module, args))
        }
        _ => {
            c.pos -= 1;
            skip_type(c, 0)?;
            Ok((module, Vec::new()))
        }
    }
}

/// The runtime's name of the type at the cursor, tokens read in module `module`.
fn type_name(
    c: &mut Cursor<'_>,
    modules: &ModuleSet<'_, '_>,
    module: u32,
    depth: usize,
) -> Result<String, SigError> {
    if depth > MAX_DEPTH {
        return Err(SigError::Unnamed("type nesting too deep".into()));
    }
    let at = c.pos;
    let e = c.u8()?;
    if let Some(p) = Primitive::from_element_type(e) {
        return Ok(p.runtime_name().to_string());
    }
    match e {
        CANON_ZAPSIG => Ok("System.__Canon".into()),
        MODULE_ZAPSIG => {
            let m = c.compressed()?;
            type_name(c, modules, m, depth + 1)
        }
        NATIVE_VALUETYPE_ZAPSIG => type_name(c, modules, module, depth + 1),
        et::CLASS | et::VALUETYPE => {
            let tok = c.type_token()?;
            token_name(modules.get(module)?, tok, None)
        }
        et::GENERICINST => {
            let _kind = c.u8()?;
            let tok = c.type_token()?;
            let count = c.compressed()?;
            if count as usize > c.data.len() {
                return Err(SigError::Truncated(c.pos));
            }
            let mut args = Vec::with_capacity(count as usize);
            for _ in 0..count {
                args.push(type_name(c, modules, module, depth + 1)?);
            }
            token_name(modules.get(module)?, tok, Some(&args))
        }
        et::SZARRAY => Ok(format!("{}[]", type_name(c, modules, module, depth + 1)?)),
        et::CMOD_REQD | et::CMOD_OPT => {
            c.type_token()?;
            type_name(c, modules, module, depth + 1)
        }
        et::PTR | et::BYREF | et::VAR | et::MVAR | et::ARRAY | et::FNPTR => Err(SigError::Unnamed(
            format!("type argument of kind {e:#04x} is not printed by name"),
        )),
        _ => Err(SigError::Bad(e, at)),
    }
}

/// The runtime name of a TypeDef or TypeRef, with `args` as its instantiation.
fn token_name(md: &Metadata<'_>, tok: Token, args: Option<&[String]>) -> Result<String, SigError> {
    let fail = |e: crate::formats::ecma::MetadataError| SigError::Unnamed(e.to_string());
    let mut out = match tok.table() {
        Some(TableId::TypeDef) => {
            let refs: Option<Vec<&str>> = args.map(|a| a.iter().map(String::as_str).collect());
            return md
                .runtime_type_name(tok.rid(), refs.as_deref())
                .map_err(fail);
        }
        Some(TableId::TypeRef) => type_ref_name(md, tok.rid(), 0).map_err(fail)?,
        _ => return Err(SigError::Unnamed(format!("type token {:#010x}", tok.0))),
    };
    if let Some(args) = args {
        out.push('[');
        out.push_str(&args.join(","));
        out.push(']');
    }
    Ok(out)
}

/// `Ns.Outer+Inner` of a TypeRef (nested TypeRefs have a TypeRef as resolution scope).
fn type_ref_name(
    md: &Metadata<'_>,
    rid: u32,
    depth: usize,
) -> Result<String, crate::formats::ecma::MetadataError> {
    let row = md.type_ref(rid)?;
    let mut out = String::new();
    if row.resolution_scope.table() == Some(TableId::TypeRef) && depth < MAX_DEPTH {
        out = type_ref_name(md, row.resolution_scope.rid(), depth + 1)?;
        out.push('+');
    } else {
        let ns = md.strings.get_lossy(row.namespace)?;
        if !ns.is_empty() {
            push_escaped(&mut out, &ns);
            out.push('.');
        }
    }
    push_escaped(&mut out, &md.strings.get_lossy(row.name)?);
    Ok(out)
}

/// Steps over one type.
fn skip_type(c: &mut Cursor<'_>, depth: usize) -> Result<(), SigError> {
    if depth > MAX_DEPTH {
        return Err(SigError::Unnamed("type nesting too deep".into()));
    }
    let at = c.pos;
    let e = c.u8()?;
    if Primitive::from_element_type(e).is_some() || e == CANON_ZAPSIG {
        return Ok(());
    }
    match e {
        MODULE_ZAPSIG => {
            c.compressed()?;
            skip_type(c, depth + 1)
        }
        NATIVE_VALUETYPE_ZAPSIG | et::SZARRAY | et::PTR | et::BYREF => skip_type(c, depth + 1),
        et::CLASS | et::VALUETYPE => c.type_token().map(|_| ()),
        et::VAR | et::MVAR => c.compressed().map(|_| ()),
        et::CMOD_REQD | et::CMOD_OPT => {
            c.type_token()?;
            skip_type(c, depth + 1)
        }
        et::GENERICINST => {
            c.u8()?;
            c.type_token()?;
            let count = c.compressed()?;
            if count as usize > c.data.len() {
                return Err(SigError::Truncated(c.pos));
            }
            for _ in 0..count {
                skip_type(c, depth + 1)?;
            }
            Ok(())
        }
        et::ARRAY => {
            skip_type(c, depth + 1)?;
            let _rank = c.compressed()?;
            let sizes = c.compressed()?;
            for _ in 0..sizes.min(64) {
                c.compressed()?;
            }
            let lows = c.compressed()?;
            for _ in 0..lows.min(64) {
                c.compressed()?;
            }
            Ok(())
        }
        _ => Err(SigError::Bad(e, at)),
    }
}
