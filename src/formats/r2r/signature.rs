//! ReadyToRun signatures of instantiated methods (the keys of InstanceMethodEntryPoints),
//! decoded into the method's token (and the module it belongs to), its owner type and its
//! method instantiation, every type a tree whose tokens carry their module
//! ([`R2rType`]). Naming them is `super::naming`'s.
//!
//! ReadyToRun extends ECMA-335 type signatures with `__Canon` (0x3E, shared generic code)
//! and a module override (0x3F, a module index, then a type whose tokens belong to that
//! module). Module indices: 0 is the signature's context (a plain image's own metadata; a
//! composite image has none), then the image's AssemblyRefs, then the manifest metadata
//! and its AssemblyRefs ([`ModuleSet`]).

use crate::formats::cursor::{Cursor, Truncation};
use crate::formats::ecma::signature::element_type as et;
use crate::formats::ecma::{Metadata, Primitive, TableId, Token};

/// `READYTORUN_METHOD_SIG_*` flags.
pub mod method_flags {
    /// The entry is an unboxing stub.
    pub const UNBOXING_STUB: u32 = 0x01;
    /// The entry is an instantiating stub.
    pub const INSTANTIATING_STUB: u32 = 0x02;
    /// Method generic arguments follow.
    pub const METHOD_INSTANTIATION: u32 = 0x04;
    /// A vtable slot number replaces the method token.
    pub const SLOT_INSTEAD_OF_TOKEN: u32 = 0x08;
    /// The token is a MemberRef, not a MethodDef.
    pub const MEMBER_REF_TOKEN: u32 = 0x10;
    /// A constrained type follows.
    pub const CONSTRAINED: u32 = 0x20;
    /// The owning type follows.
    pub const OWNER_TYPE: u32 = 0x40;
    /// The module context changes for what follows.
    pub const UPDATE_CONTEXT: u32 = 0x80;
    /// The async variant of the method.
    pub const ASYNC_VARIANT: u32 = 0x100;
}
const CANON_ZAPSIG: u8 = 0x3E;
const MODULE_ZAPSIG: u8 = 0x3F;
const NATIVE_VALUETYPE_ZAPSIG: u8 = 0x3D;
/// Deepest type nesting followed.
pub const MAX_DEPTH: usize = 32;
/// Most dimensions with sizes or lower bounds an array shape may list.
const MAX_ARRAY_BOUNDS: u32 = 64;

/// Why a signature could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SigError {
    /// The signature ends early, or holds a count of more items than it has bytes left
    /// (offsets within the signature).
    #[error("signature truncated: {0}")]
    Truncated(#[from] Truncation),
    /// An element (value, byte offset) not valid where it appears.
    #[error("signature element {0:#04x} at byte {1} is not valid here")]
    Bad(u8, usize),
    /// Something the signature refers to could not be named (why).
    #[error("{0}")]
    Unnamed(String),
}

/// The metadata of the modules a signature may refer to, by module index (`None` when
/// that assembly's file was not found), and how the indices were laid out.
pub struct ModuleSet<'m, 'a> {
    /// Metadata by module index (`None`: not available).
    pub modules: Vec<Option<&'m Metadata<'a>>>,
    /// The image is a composite one: index 0 (the signature's own context) names no
    /// module, and a method whose signature gives no module is System.Private.CoreLib's.
    pub composite: bool,
    /// The index of System.Private.CoreLib, where known.
    pub system: Option<u32>,
}

impl<'m, 'a> ModuleSet<'m, 'a> {
    /// The metadata of module `index`.
    pub fn get(&self, index: u32) -> Result<&'m Metadata<'a>, SigError> {
        self.modules
            .get(index as usize)
            .copied()
            .flatten()
            .ok_or_else(|| SigError::Unnamed(format!("module {index} is not available")))
    }

    /// The first module index whose assembly is named `name` (ASCII case-insensitive).
    pub fn by_assembly_name(&self, name: &str) -> Option<u32> {
        self.modules.iter().enumerate().find_map(|(i, m)| {
            let m = (*m)?;
            m.assembly_name()
                .ok()
                .filter(|n| n.eq_ignore_ascii_case(name))
                .map(|_| i as u32)
        })
    }
}

/// A type of a ReadyToRun signature; tokens are qualified by their module index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum R2rType {
    /// A primitive type.
    Primitive(Primitive),
    /// `System.__Canon`: the shared instantiation over reference types.
    Canon,
    /// A TypeDef, TypeRef or TypeSpec of module `module` (CLASS or VALUETYPE).
    Named {
        /// Module index of the token.
        module: u32,
        /// TypeDef or TypeRef token.
        token: Token,
    },
    /// A generic instantiation of the type `token` of module `module`.
    Generic {
        /// Module index of the token.
        module: u32,
        /// Token of the generic type.
        token: Token,
        /// The type arguments.
        args: Vec<R2rType>,
    },
    /// Single-dimension zero-based array `T[]`.
    SzArray(Box<R2rType>),
    /// A general array of the given rank.
    Array(Box<R2rType>, u32),
    /// Unmanaged pointer `T*`.
    Ptr(Box<R2rType>),
    /// Managed reference `T&`.
    ByRef(Box<R2rType>),
    /// Function pointer.
    FnPtr {
        /// Return type.
        ret: Box<R2rType>,
        /// Parameter types.
        params: Vec<R2rType>,
    },
    /// A type's generic parameter `!n`.
    Var(u32),
    /// A method's generic parameter `!!n`.
    MVar(u32),
}

impl R2rType {
    /// Every module index the type's tokens belong to.
    pub fn modules(&self, out: &mut Vec<u32>) {
        match self {
            R2rType::Named { module, .. } => out.push(*module),
            R2rType::Generic { module, args, .. } => {
                out.push(*module);
                args.iter().for_each(|a| a.modules(out));
            }
            R2rType::SzArray(t) | R2rType::Array(t, _) | R2rType::Ptr(t) | R2rType::ByRef(t) => {
                t.modules(out)
            }
            R2rType::FnPtr { ret, params } => {
                ret.modules(out);
                params.iter().for_each(|p| p.modules(out));
            }
            R2rType::Primitive(_) | R2rType::Canon | R2rType::Var(_) | R2rType::MVar(_) => {}
        }
    }
}

/// A decoded instance entry point key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMethod {
    /// Instance entry flags.
    pub flags: u32,
    /// The module the method's token belongs to, when the signature gives it (an
    /// UpdateContext index, else the owner type's module override); `None`: the context
    /// module (module 0, or System.Private.CoreLib in a composite image).
    pub module: Option<u32>,
    /// The method's token (MethodDef or MemberRef); nil when the signature gives a
    /// vtable slot instead (`slot`).
    pub token: Token,
    /// The method's vtable slot (SlotInsteadOfToken flag).
    pub slot: Option<u32>,
    /// The owner type (OwnerType flag): a generic instantiation for methods of generic
    /// types.
    pub owner: Option<R2rType>,
    /// The method's own instantiation (MethodInstantiation flag).
    pub method_args: Vec<R2rType>,
}

/// Reads a signature (offsets in errors are within it).
struct SigReader<'s> {
    c: Cursor<'s>,
}

impl SigReader<'_> {
    fn pos(&self) -> usize {
        self.c.position()
    }

    fn u8(&mut self) -> Result<u8, SigError> {
        Ok(self.c.read_u8("signature element")?)
    }

    fn peek(&self) -> Option<u8> {
        self.c.peek_u8()
    }

    /// A compressed integer; a first byte that starts none is a bad element.
    fn compressed(&mut self) -> Result<u32, SigError> {
        let at = self.pos();
        match self.c.read_compressed_u32("compressed integer")? {
            Some(v) => Ok(v),
            None => Err(SigError::Bad(self.peek().unwrap_or(0), at)),
        }
    }

    /// A count of items that take at least one byte each: at most the bytes left.
    fn count(&mut self) -> Result<u32, SigError> {
        let n = self.compressed()?;
        if n as usize > self.c.remaining() {
            return Err(self.c.truncation("counted items", u64::from(n)).into());
        }
        Ok(n)
    }

    fn type_token(&mut self) -> Result<Token, SigError> {
        let at = self.pos();
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

/// Decodes the method signature at the start of `data`; returns it and the bytes it took
/// (the entry point follows them).
pub fn decode_instance_method(data: &[u8]) -> Result<(InstanceMethod, usize), SigError> {
    use method_flags as f;
    let mut c = SigReader {
        c: Cursor::new(data),
    };
    let flags = c.compressed()?;
    let mut module = None;
    if flags & f::UPDATE_CONTEXT != 0 {
        module = Some(c.compressed()?);
    }
    let context = module.unwrap_or(0);
    let mut owner = None;
    if flags & f::OWNER_TYPE != 0 {
        // Without an UpdateContext, the owner type's module override is the method's.
        if module.is_none() && c.peek() == Some(MODULE_ZAPSIG) {
            let mut look = SigReader {
                c: c.c.at(c.pos() + 1),
            };
            module = Some(look.compressed()?);
        }
        owner = Some(read_type(&mut c, context, 0)?);
    }
    let rid = c.compressed()?;
    let (token, slot) = if flags & f::SLOT_INSTEAD_OF_TOKEN != 0 {
        (Token(0), Some(rid))
    } else if flags & f::MEMBER_REF_TOKEN != 0 {
        (Token::new(TableId::MemberRef, rid), None)
    } else {
        (Token::new(TableId::MethodDef, rid), None)
    };
    let mut method_args = Vec::new();
    if flags & f::METHOD_INSTANTIATION != 0 {
        let count = c.count()?;
        for _ in 0..count {
            method_args.push(read_type(&mut c, context, 0)?);
        }
    }
    if flags & f::CONSTRAINED != 0 {
        read_type(&mut c, context, 0)?;
    }
    Ok((
        InstanceMethod {
            flags,
            module,
            token,
            slot,
            owner,
            method_args,
        },
        c.pos(),
    ))
}

/// One type, its tokens read in module `module` unless a module override says otherwise.
fn read_type(c: &mut SigReader<'_>, module: u32, depth: usize) -> Result<R2rType, SigError> {
    if depth > MAX_DEPTH {
        return Err(SigError::Unnamed("type nesting too deep".into()));
    }
    let at = c.pos();
    let e = c.u8()?;
    if let Some(p) = Primitive::from_element_type(e) {
        return Ok(R2rType::Primitive(p));
    }
    let d = depth + 1;
    Ok(match e {
        CANON_ZAPSIG => R2rType::Canon,
        MODULE_ZAPSIG => {
            let m = c.compressed()?;
            read_type(c, m, d)?
        }
        NATIVE_VALUETYPE_ZAPSIG => read_type(c, module, d)?,
        et::CLASS | et::VALUETYPE => R2rType::Named {
            module,
            token: c.type_token()?,
        },
        et::GENERICINST => {
            // The generic type, itself CLASS or VALUETYPE (possibly module-overridden).
            let (gmodule, token) = generic_base(c, module, d)?;
            let count = c.count()?;
            let mut args = Vec::with_capacity(count as usize);
            for _ in 0..count {
                args.push(read_type(c, module, d)?);
            }
            R2rType::Generic {
                module: gmodule,
                token,
                args,
            }
        }
        et::SZARRAY => R2rType::SzArray(Box::new(read_type(c, module, d)?)),
        et::PTR => R2rType::Ptr(Box::new(read_type(c, module, d)?)),
        et::BYREF => R2rType::ByRef(Box::new(read_type(c, module, d)?)),
        et::VAR => R2rType::Var(c.compressed()?),
        et::MVAR => R2rType::MVar(c.compressed()?),
        et::CMOD_REQD | et::CMOD_OPT => {
            c.type_token()?;
            read_type(c, module, d)?
        }
        et::ARRAY => {
            let elem = read_type(c, module, d)?;
            let rank = c.compressed()?;
            for _ in 0..2 {
                let n = c.compressed()?;
                if n > MAX_ARRAY_BOUNDS {
                    return Err(SigError::Bad(et::ARRAY, at));
                }
                for _ in 0..n {
                    c.compressed()?;
                }
            }
            R2rType::Array(Box::new(elem), rank)
        }
        et::FNPTR => {
            let calling_convention = c.u8()?;
            if calling_convention & 0x10 != 0 {
                c.compressed()?; // generic parameter count
            }
            let count = c.count()?;
            let ret = read_type(c, module, d)?;
            let mut params = Vec::with_capacity(count as usize);
            for _ in 0..count {
                if c.peek() == Some(et::SENTINEL) {
                    c.u8()?;
                }
                params.push(read_type(c, module, d)?);
            }
            R2rType::FnPtr {
                ret: Box::new(ret),
                params,
            }
        }
        _ => return Err(SigError::Bad(e, at)),
    })
}

/// The generic type of a GENERICINST: its module and token.
fn generic_base(
    c: &mut SigReader<'_>,
    module: u32,
    depth: usize,
) -> Result<(u32, Token), SigError> {
    if depth > MAX_DEPTH {
        return Err(SigError::Unnamed("type nesting too deep".into()));
    }
    let at = c.pos();
    match c.u8()? {
        et::CLASS | et::VALUETYPE => Ok((module, c.type_token()?)),
        MODULE_ZAPSIG => {
            let m = c.compressed()?;
            generic_base(c, m, depth + 1)
        }
        NATIVE_VALUETYPE_ZAPSIG => generic_base(c, module, depth + 1),
        e => Err(SigError::Bad(e, at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_owner_instantiation_and_module_overrides() {
        // OwnerType | MethodInstantiation; owner: module 2's GENERICINST CLASS TypeRef 3
        // <int32, __Canon>; MethodDef 5; one method argument: module 1's VALUETYPE TypeDef 4;
        // entry point byte follows.
        let sig = [
            0x44,
            MODULE_ZAPSIG,
            2,
            et::GENERICINST,
            et::CLASS,
            (3 << 2) | 1,
            2,
            et::I4,
            CANON_ZAPSIG,
            5,
            1,
            MODULE_ZAPSIG,
            1,
            et::VALUETYPE,
            4 << 2,
            0xAA,
        ];
        let (m, used) = decode_instance_method(&sig).expect("decodes");
        assert_eq!(used, sig.len() - 1);
        assert_eq!(m.module, Some(2));
        assert_eq!(m.token, Token::new(TableId::MethodDef, 5));
        assert_eq!(
            m.owner,
            Some(R2rType::Generic {
                module: 2,
                token: Token::new(TableId::TypeRef, 3),
                args: vec![R2rType::Primitive(Primitive::I4), R2rType::Canon],
            })
        );
        assert_eq!(
            m.method_args,
            vec![R2rType::Named {
                module: 1,
                token: Token::new(TableId::TypeDef, 4)
            }]
        );
    }

    #[test]
    fn damage_is_an_error() {
        // Truncated everywhere, a count larger than the bytes, an unknown element.
        let sig = [0x44, et::GENERICINST, et::CLASS, 4, 2, et::I4, et::I4, 5];
        for n in 0..sig.len() - 1 {
            assert!(decode_instance_method(&sig[..n]).is_err(), "{n}");
        }
        assert!(decode_instance_method(&[0x44, et::GENERICINST, et::CLASS, 4, 100, 8]).is_err());
        assert!(decode_instance_method(&[0x40, 0x77, 5]).is_err());
        // Nesting deeper than the limit.
        let mut deep = vec![0x40];
        deep.extend(std::iter::repeat_n(et::SZARRAY, 100));
        deep.extend([et::I4, 2]);
        assert!(decode_instance_method(&deep).is_err());
    }
}
