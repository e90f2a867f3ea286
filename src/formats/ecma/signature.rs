//! Signature blobs (ECMA-335 II.23.2): method, field, property, local-variable and
//! MethodSpec signatures and the types inside them, decoded into a tree.
//!
//! Decoding never panics: every read is bounds-checked, type nesting is capped
//! ([`MAX_TYPE_DEPTH`]) and every count is checked against the bytes left before anything
//! is allocated for it.

use super::error::SignatureError;
use super::tables::{TableId, Token};
use crate::formats::cursor::Cursor;

/// Decodes an ECMA-335 compressed unsigned integer at the start of `data`: the value and
/// how many bytes it took (1, 2 or 4). `None` when the bytes run out or the first byte
/// starts with `111` (no valid encoding).
pub fn decompress_u32(data: &[u8]) -> Option<(u32, usize)> {
    let mut c = Cursor::new(data);
    let value = c.read_compressed_u32("compressed integer").ok()??;
    Some((value, c.position()))
}

/// Decodes an ECMA-335 compressed signed integer (II.23.2: the sign is the rotated-in
/// low bit), as array lower bounds use them: the value and how many bytes it took.
pub fn decompress_i32(data: &[u8]) -> Option<(i32, usize)> {
    let mut c = Cursor::new(data);
    let value = c.read_compressed_i32("compressed integer").ok()??;
    Some((value, c.position()))
}

/// Deepest type nesting decoded (`int32[][]...` or generic arguments inside generic
/// arguments); deeper signatures are errors.
pub const MAX_TYPE_DEPTH: usize = 64;
/// Highest array rank accepted (the runtime loads at most 32).
pub const MAX_ARRAY_RANK: u32 = 64;

/// Element types (CorElementType) that appear in signatures.
pub mod element_type {
    /// `ELEMENT_TYPE_END`.
    pub const END: u8 = 0x00;
    /// `ELEMENT_TYPE_VOID`.
    pub const VOID: u8 = 0x01;
    /// `ELEMENT_TYPE_BOOLEAN`.
    pub const BOOLEAN: u8 = 0x02;
    /// `ELEMENT_TYPE_CHAR`.
    pub const CHAR: u8 = 0x03;
    /// `ELEMENT_TYPE_I1`.
    pub const I1: u8 = 0x04;
    /// `ELEMENT_TYPE_U1`.
    pub const U1: u8 = 0x05;
    /// `ELEMENT_TYPE_I2`.
    pub const I2: u8 = 0x06;
    /// `ELEMENT_TYPE_U2`.
    pub const U2: u8 = 0x07;
    /// `ELEMENT_TYPE_I4`.
    pub const I4: u8 = 0x08;
    /// `ELEMENT_TYPE_U4`.
    pub const U4: u8 = 0x09;
    /// `ELEMENT_TYPE_I8`.
    pub const I8: u8 = 0x0A;
    /// `ELEMENT_TYPE_U8`.
    pub const U8: u8 = 0x0B;
    /// `ELEMENT_TYPE_R4`.
    pub const R4: u8 = 0x0C;
    /// `ELEMENT_TYPE_R8`.
    pub const R8: u8 = 0x0D;
    /// `ELEMENT_TYPE_STRING`.
    pub const STRING: u8 = 0x0E;
    /// `ELEMENT_TYPE_PTR`.
    pub const PTR: u8 = 0x0F;
    /// `ELEMENT_TYPE_BYREF`.
    pub const BYREF: u8 = 0x10;
    /// `ELEMENT_TYPE_VALUETYPE`.
    pub const VALUETYPE: u8 = 0x11;
    /// `ELEMENT_TYPE_CLASS`.
    pub const CLASS: u8 = 0x12;
    /// `ELEMENT_TYPE_VAR`.
    pub const VAR: u8 = 0x13;
    /// `ELEMENT_TYPE_ARRAY`.
    pub const ARRAY: u8 = 0x14;
    /// `ELEMENT_TYPE_GENERICINST`.
    pub const GENERICINST: u8 = 0x15;
    /// `ELEMENT_TYPE_TYPEDBYREF`.
    pub const TYPEDBYREF: u8 = 0x16;
    /// `ELEMENT_TYPE_I`.
    pub const I: u8 = 0x18;
    /// `ELEMENT_TYPE_U`.
    pub const U: u8 = 0x19;
    /// `ELEMENT_TYPE_FNPTR`.
    pub const FNPTR: u8 = 0x1B;
    /// `ELEMENT_TYPE_OBJECT`.
    pub const OBJECT: u8 = 0x1C;
    /// `ELEMENT_TYPE_SZARRAY`.
    pub const SZARRAY: u8 = 0x1D;
    /// `ELEMENT_TYPE_MVAR`.
    pub const MVAR: u8 = 0x1E;
    /// `ELEMENT_TYPE_CMOD_REQD`.
    pub const CMOD_REQD: u8 = 0x1F;
    /// `ELEMENT_TYPE_CMOD_OPT`.
    pub const CMOD_OPT: u8 = 0x20;
    /// Runtime-internal: a TypeHandle pointer follows (only in signatures the runtime made).
    pub const INTERNAL: u8 = 0x21;
    /// Runtime-internal custom modifier: a required flag byte and a TypeHandle pointer.
    pub const CMOD_INTERNAL: u8 = 0x22;
    /// `ELEMENT_TYPE_SENTINEL`.
    pub const SENTINEL: u8 = 0x41;
    /// `ELEMENT_TYPE_PINNED`.
    pub const PINNED: u8 = 0x45;
}

/// Calling-convention byte (II.23.2.1-3): low nibble kind, high bits flags.
pub mod calling_convention {
    /// Kind `IMAGE_CEE_CS_CALLCONV_DEFAULT`.
    pub const DEFAULT: u8 = 0x0;
    /// Kind `IMAGE_CEE_CS_CALLCONV_C`.
    pub const C: u8 = 0x1;
    /// Kind `IMAGE_CEE_CS_CALLCONV_STDCALL`.
    pub const STDCALL: u8 = 0x2;
    /// Kind `IMAGE_CEE_CS_CALLCONV_THISCALL`.
    pub const THISCALL: u8 = 0x3;
    /// Kind `IMAGE_CEE_CS_CALLCONV_FASTCALL`.
    pub const FASTCALL: u8 = 0x4;
    /// Kind `IMAGE_CEE_CS_CALLCONV_VARARG`.
    pub const VARARG: u8 = 0x5;
    /// Kind `IMAGE_CEE_CS_CALLCONV_FIELD`.
    pub const FIELD: u8 = 0x6;
    /// Kind `IMAGE_CEE_CS_CALLCONV_LOCAL_SIG`.
    pub const LOCAL_SIG: u8 = 0x7;
    /// Kind `IMAGE_CEE_CS_CALLCONV_PROPERTY`.
    pub const PROPERTY: u8 = 0x8;
    /// Kind `IMAGE_CEE_CS_CALLCONV_UNMANAGED`.
    pub const UNMANAGED: u8 = 0x9;
    /// Kind `IMAGE_CEE_CS_CALLCONV_GENERICINST`.
    pub const GENERICINST: u8 = 0xA;
    /// Bits holding the kind.
    pub const KIND_MASK: u8 = 0x0F;
    /// Flag: the method has generic parameters.
    pub const GENERIC: u8 = 0x10;
    /// Flag: the method takes `this`.
    pub const HASTHIS: u8 = 0x20;
    /// Flag: `this` is an explicit first parameter.
    pub const EXPLICITTHIS: u8 = 0x40;
}

/// The primitive element types, which carry nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `void`.
    Void,
    /// `bool`.
    Boolean,
    /// `char` (UTF-16 code unit).
    Char,
    /// `sbyte`.
    I1,
    /// `byte`.
    U1,
    /// `short`.
    I2,
    /// `ushort`.
    U2,
    /// `int`.
    I4,
    /// `uint`.
    U4,
    /// `long`.
    I8,
    /// `ulong`.
    U8,
    /// `float`.
    R4,
    /// `double`.
    R8,
    /// `string`.
    String,
    /// `object`.
    Object,
    /// Native int (`ELEMENT_TYPE_I`).
    I,
    /// Native unsigned int (`ELEMENT_TYPE_U`).
    U,
    /// `System.TypedReference`.
    TypedByRef,
}

impl Primitive {
    pub(crate) fn from_element_type(et: u8) -> Option<Primitive> {
        use element_type as e;
        Some(match et {
            e::VOID => Primitive::Void,
            e::BOOLEAN => Primitive::Boolean,
            e::CHAR => Primitive::Char,
            e::I1 => Primitive::I1,
            e::U1 => Primitive::U1,
            e::I2 => Primitive::I2,
            e::U2 => Primitive::U2,
            e::I4 => Primitive::I4,
            e::U4 => Primitive::U4,
            e::I8 => Primitive::I8,
            e::U8 => Primitive::U8,
            e::R4 => Primitive::R4,
            e::R8 => Primitive::R8,
            e::STRING => Primitive::String,
            e::OBJECT => Primitive::Object,
            e::I => Primitive::I,
            e::U => Primitive::U,
            e::TYPEDBYREF => Primitive::TypedByRef,
            _ => return None,
        })
    }

    /// The IL keyword (`int32`, `native int`, `typedref`...).
    pub fn il_name(self) -> &'static str {
        match self {
            Primitive::Void => "void",
            Primitive::Boolean => "bool",
            Primitive::Char => "char",
            Primitive::I1 => "int8",
            Primitive::U1 => "uint8",
            Primitive::I2 => "int16",
            Primitive::U2 => "uint16",
            Primitive::I4 => "int32",
            Primitive::U4 => "uint32",
            Primitive::I8 => "int64",
            Primitive::U8 => "uint64",
            Primitive::R4 => "float32",
            Primitive::R8 => "float64",
            Primitive::String => "string",
            Primitive::Object => "object",
            Primitive::I => "native int",
            Primitive::U => "native uint",
            Primitive::TypedByRef => "typedref",
        }
    }

    /// The runtime (reflection) name (`System.Int32`...), as type names print it.
    pub fn runtime_name(self) -> &'static str {
        match self {
            Primitive::Void => "System.Void",
            Primitive::Boolean => "System.Boolean",
            Primitive::Char => "System.Char",
            Primitive::I1 => "System.SByte",
            Primitive::U1 => "System.Byte",
            Primitive::I2 => "System.Int16",
            Primitive::U2 => "System.UInt16",
            Primitive::I4 => "System.Int32",
            Primitive::U4 => "System.UInt32",
            Primitive::I8 => "System.Int64",
            Primitive::U8 => "System.UInt64",
            Primitive::R4 => "System.Single",
            Primitive::R8 => "System.Double",
            Primitive::String => "System.String",
            Primitive::Object => "System.Object",
            Primitive::I => "System.IntPtr",
            Primitive::U => "System.UIntPtr",
            Primitive::TypedByRef => "System.TypedReference",
        }
    }
}

/// The shape of a general array (II.23.2.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayShape {
    /// Number of dimensions.
    pub rank: u32,
    /// Sizes of the leading dimensions that have one.
    pub sizes: Vec<u32>,
    /// Lower bounds of the leading dimensions that have one.
    pub lower_bounds: Vec<i32>,
}

/// A type in a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeSig {
    /// A primitive type.
    Primitive(Primitive),
    /// `valuetype` + TypeDef/TypeRef/TypeSpec token.
    ValueType(Token),
    /// `class` + token.
    Class(Token),
    /// A type's generic parameter `!n`.
    Var(u32),
    /// A method's generic parameter `!!n`.
    MVar(u32),
    /// Unmanaged pointer `T*`.
    Ptr(Box<TypeSig>),
    /// Managed reference `T&`.
    ByRef(Box<TypeSig>),
    /// Single-dimension zero-based array `T[]`.
    SzArray(Box<TypeSig>),
    /// General array of the element type, with its rank and bounds.
    Array(Box<TypeSig>, ArrayShape),
    /// A generic instantiation: the generic type (a `Class` or `ValueType`) and its arguments.
    GenericInst(Box<TypeSig>, Vec<TypeSig>),
    /// Function pointer with its method signature.
    FnPtr(Box<MethodSig>),
    /// `modreq`/`modopt` applied to the type that follows it.
    Modified {
        /// True for `modreq`, false for `modopt`.
        required: bool,
        /// The modifier type's token.
        modifier: Token,
        /// The modified type.
        inner: Box<TypeSig>,
    },
    /// `pinned` local of the inner type.
    Pinned(Box<TypeSig>),
    /// `ELEMENT_TYPE_INTERNAL`: a runtime TypeHandle (only in runtime-made signatures).
    Internal(u64),
    /// `ELEMENT_TYPE_CMOD_INTERNAL`: a runtime custom modifier.
    ModifiedInternal {
        /// True for `modreq`, false for `modopt`.
        required: bool,
        /// The modifier's runtime TypeHandle.
        handle: u64,
        /// The modified type.
        inner: Box<TypeSig>,
    },
}

impl TypeSig {
    /// The type with custom modifiers (and `pinned`) stripped from the outside.
    pub fn unmodified(&self) -> &TypeSig {
        match self {
            TypeSig::Modified { inner, .. }
            | TypeSig::ModifiedInternal { inner, .. }
            | TypeSig::Pinned(inner) => inner.unmodified(),
            t => t,
        }
    }
}

/// The kind in a calling-convention byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// The managed calling convention.
    Default,
    /// Unmanaged cdecl.
    C,
    /// Unmanaged stdcall.
    StdCall,
    /// Unmanaged thiscall.
    ThisCall,
    /// Unmanaged fastcall.
    FastCall,
    /// Managed with variable arguments.
    VarArg,
    /// A property signature.
    Property,
    /// Unmanaged, the convention given by modifiers.
    Unmanaged,
    /// Any other low nibble (field, local and MethodSpec signatures have decoders of
    /// their own).
    Other(u8),
}

/// A method (or property, or function-pointer) signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodSig {
    /// The calling-convention byte as stored.
    pub calling_convention: u8,
    /// Number of the method's generic parameters (GENERIC flag), else 0.
    pub generic_param_count: u32,
    /// Return type.
    pub ret: TypeSig,
    /// Parameter types.
    pub params: Vec<TypeSig>,
    /// Index in `params` where a SENTINEL stood (the variable arguments of a vararg call
    /// site start there).
    pub sentinel: Option<usize>,
}

impl MethodSig {
    /// True when the method takes `this` (HASTHIS).
    pub fn has_this(&self) -> bool {
        self.calling_convention & calling_convention::HASTHIS != 0
    }
    /// True when `this` is an explicit first parameter (EXPLICITTHIS).
    pub fn explicit_this(&self) -> bool {
        self.calling_convention & calling_convention::EXPLICITTHIS != 0
    }
    /// True when the method has generic parameters (GENERIC).
    pub fn is_generic(&self) -> bool {
        self.calling_convention & calling_convention::GENERIC != 0
    }
    /// The calling-convention kind (low four bits).
    pub fn kind(&self) -> CallKind {
        use calling_convention as cc;
        match self.calling_convention & cc::KIND_MASK {
            cc::DEFAULT => CallKind::Default,
            cc::C => CallKind::C,
            cc::STDCALL => CallKind::StdCall,
            cc::THISCALL => CallKind::ThisCall,
            cc::FASTCALL => CallKind::FastCall,
            cc::VARARG => CallKind::VarArg,
            cc::PROPERTY => CallKind::Property,
            cc::UNMANAGED => CallKind::Unmanaged,
            k => CallKind::Other(k),
        }
    }
}

/// Options of the decoder.
#[derive(Debug, Clone, Copy)]
pub struct SigOptions {
    /// Size of the pointers after `ELEMENT_TYPE_INTERNAL` (signatures the runtime built in
    /// the target's memory); metadata blobs never hold them.
    pub pointer_size: u8,
    /// Deepest nesting of types accepted.
    pub max_depth: usize,
}

impl Default for SigOptions {
    fn default() -> Self {
        SigOptions {
            pointer_size: 8,
            max_depth: MAX_TYPE_DEPTH,
        }
    }
}

/// Reads one signature blob; offsets in its errors are within the blob.
#[derive(Debug, Clone)]
pub struct SigReader<'a> {
    c: Cursor<'a>,
    options: SigOptions,
}

impl<'a> SigReader<'a> {
    /// A reader of `data` with default options.
    pub fn new(data: &'a [u8]) -> Self {
        Self::with_options(data, SigOptions::default())
    }

    /// A reader of `data` with the given options.
    pub fn with_options(data: &'a [u8], options: SigOptions) -> Self {
        SigReader {
            c: Cursor::new(data),
            options,
        }
    }

    /// Offset of the next byte.
    pub fn position(&self) -> usize {
        self.c.position()
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.c.remaining()
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, SignatureError> {
        Ok(self.c.read_u8(what)?)
    }

    fn compressed(&mut self, what: &'static str) -> Result<u32, SignatureError> {
        let offset = self.position();
        self.c
            .read_compressed_u32(what)?
            .ok_or(SignatureError::BadCompressedInt { offset })
    }

    fn compressed_signed(&mut self, what: &'static str) -> Result<i32, SignatureError> {
        let offset = self.position();
        self.c
            .read_compressed_i32(what)?
            .ok_or(SignatureError::BadCompressedInt { offset })
    }

    /// A count (the field `field`) of `what` items, each needing at least a byte: checked
    /// against the bytes left.
    fn count(&mut self, what: &'static str, field: &'static str) -> Result<u32, SignatureError> {
        let offset = self.position();
        let count = self.compressed(field)?;
        if count as usize > self.remaining() {
            return Err(SignatureError::TooManyItems {
                what,
                offset,
                count,
            });
        }
        Ok(count)
    }

    /// A TypeDefOrRefOrSpecEncoded token (II.23.2.8).
    pub fn type_token(&mut self) -> Result<Token, SignatureError> {
        let offset = self.position();
        let v = self.compressed("type token")?;
        let table = match v & 3 {
            0 => TableId::TypeDef,
            1 => TableId::TypeRef,
            2 => TableId::TypeSpec,
            _ => return Err(SignatureError::BadTypeToken { offset, value: v }),
        };
        Ok(Token::new(table, v >> 2))
    }

    fn pointer(&mut self) -> Result<u64, SignatureError> {
        let n = usize::from(self.options.pointer_size.clamp(1, 8));
        Ok(self.c.read_uint(n, "internal type handle")?)
    }

    /// One type (II.23.2.12), with any custom modifiers before it.
    pub fn read_type(&mut self) -> Result<TypeSig, SignatureError> {
        self.type_at(0)
    }

    fn type_at(&mut self, depth: usize) -> Result<TypeSig, SignatureError> {
        use element_type as e;
        if depth >= self.options.max_depth {
            return Err(SignatureError::TooDeep {
                limit: self.options.max_depth,
            });
        }
        let offset = self.position();
        let et = self.u8("element type")?;
        if let Some(p) = Primitive::from_element_type(et) {
            return Ok(TypeSig::Primitive(p));
        }
        let next = depth + 1;
        Ok(match et {
            e::VALUETYPE => TypeSig::ValueType(self.type_token()?),
            e::CLASS => TypeSig::Class(self.type_token()?),
            e::VAR => TypeSig::Var(self.compressed("generic parameter number")?),
            e::MVAR => TypeSig::MVar(self.compressed("generic parameter number")?),
            e::PTR => TypeSig::Ptr(Box::new(self.type_at(next)?)),
            e::BYREF => TypeSig::ByRef(Box::new(self.type_at(next)?)),
            e::SZARRAY => TypeSig::SzArray(Box::new(self.type_at(next)?)),
            e::PINNED => TypeSig::Pinned(Box::new(self.type_at(next)?)),
            e::CMOD_REQD | e::CMOD_OPT => {
                let modifier = self.type_token()?;
                TypeSig::Modified {
                    required: et == e::CMOD_REQD,
                    modifier,
                    inner: Box::new(self.type_at(next)?),
                }
            }
            e::ARRAY => {
                let elem = self.type_at(next)?;
                let shape_at = self.position();
                let rank = self.compressed("array rank")?;
                if rank == 0 || rank > MAX_ARRAY_RANK {
                    return Err(SignatureError::BadArrayShape {
                        offset: shape_at,
                        problem: "rank is 0 or too large",
                    });
                }
                let num_sizes = self.count("array size", "array size count")?;
                if num_sizes > rank {
                    return Err(SignatureError::BadArrayShape {
                        offset: shape_at,
                        problem: "more sizes than dimensions",
                    });
                }
                let sizes = (0..num_sizes)
                    .map(|_| self.compressed("array size"))
                    .collect::<Result<Vec<_>, _>>()?;
                let num_bounds = self.count("array lower bound", "array lower bound count")?;
                if num_bounds > rank {
                    return Err(SignatureError::BadArrayShape {
                        offset: shape_at,
                        problem: "more lower bounds than dimensions",
                    });
                }
                let lower_bounds = (0..num_bounds)
                    .map(|_| self.compressed_signed("array lower bound"))
                    .collect::<Result<Vec<_>, _>>()?;
                TypeSig::Array(
                    Box::new(elem),
                    ArrayShape {
                        rank,
                        sizes,
                        lower_bounds,
                    },
                )
            }
            e::GENERICINST => {
                let base = self.type_at(next)?;
                let count = self.count("generic argument", "generic argument count")?;
                let args = (0..count)
                    .map(|_| self.type_at(next))
                    .collect::<Result<Vec<_>, _>>()?;
                TypeSig::GenericInst(Box::new(base), args)
            }
            e::FNPTR => TypeSig::FnPtr(Box::new(self.method_at(next)?)),
            e::INTERNAL => TypeSig::Internal(self.pointer()?),
            e::CMOD_INTERNAL => {
                let required = self.u8("internal modifier kind")? != 0;
                let handle = self.pointer()?;
                TypeSig::ModifiedInternal {
                    required,
                    handle,
                    inner: Box::new(self.type_at(next)?),
                }
            }
            _ => {
                return Err(SignatureError::UnexpectedElementType {
                    offset,
                    value: et,
                    context: "type",
                })
            }
        })
    }

    /// A method signature (MethodDefSig, MethodRefSig, StandAloneMethodSig, a function
    /// pointer's, or a PropertySig) starting at its calling-convention byte.
    pub fn read_method(&mut self) -> Result<MethodSig, SignatureError> {
        self.method_at(0)
    }

    fn method_at(&mut self, depth: usize) -> Result<MethodSig, SignatureError> {
        use calling_convention as cc;
        if depth >= self.options.max_depth {
            return Err(SignatureError::TooDeep {
                limit: self.options.max_depth,
            });
        }
        let offset = self.position();
        let conv = self.u8("calling convention")?;
        let kind = conv & cc::KIND_MASK;
        if matches!(kind, cc::FIELD | cc::LOCAL_SIG | cc::GENERICINST) {
            return Err(SignatureError::BadCallingConvention {
                offset,
                value: conv,
                expected: "method signature",
            });
        }
        let generic_param_count = if conv & cc::GENERIC != 0 {
            self.compressed("generic parameter count")?
        } else {
            0
        };
        let count = self.count("parameter", "parameter count")?;
        let ret = self.type_at(depth + 1)?;
        let mut params = Vec::with_capacity(count as usize);
        let mut sentinel = None;
        loop {
            // A sentinel may stand before any parameter, or after the last one.
            if self.c.peek_u8() == Some(element_type::SENTINEL) {
                if sentinel.is_some() {
                    return Err(SignatureError::SecondSentinel {
                        offset: self.position(),
                    });
                }
                sentinel = Some(params.len());
                self.c.skip(1, "sentinel")?;
                continue;
            }
            if params.len() == count as usize {
                break;
            }
            params.push(self.type_at(depth + 1)?);
        }
        Ok(MethodSig {
            calling_convention: conv,
            generic_param_count,
            ret,
            params,
            sentinel,
        })
    }
}

/// Decodes a method signature blob (MethodDef, MemberRef to a method, StandAloneSig of
/// `calli`, property).
pub fn decode_method_sig(blob: &[u8]) -> Result<MethodSig, SignatureError> {
    SigReader::new(blob).read_method()
}

/// Decodes a method signature the runtime stored in target memory, which may hold
/// `ELEMENT_TYPE_INTERNAL` TypeHandles of `pointer_size` bytes.
pub fn decode_method_sig_with(
    blob: &[u8],
    options: SigOptions,
) -> Result<MethodSig, SignatureError> {
    SigReader::with_options(blob, options).read_method()
}

/// Decodes a FieldSig (II.23.2.4): `0x06` then the field's type.
pub fn decode_field_sig(blob: &[u8]) -> Result<TypeSig, SignatureError> {
    let mut r = SigReader::new(blob);
    let conv = r.u8("calling convention")?;
    if conv & calling_convention::KIND_MASK != calling_convention::FIELD {
        return Err(SignatureError::BadCallingConvention {
            offset: 0,
            value: conv,
            expected: "field signature",
        });
    }
    r.read_type()
}

/// Decodes a LocalVarSig (II.23.2.6): `0x07`, a count, the locals' types.
pub fn decode_locals_sig(blob: &[u8]) -> Result<Vec<TypeSig>, SignatureError> {
    let mut r = SigReader::new(blob);
    let conv = r.u8("calling convention")?;
    if conv != calling_convention::LOCAL_SIG {
        return Err(SignatureError::BadCallingConvention {
            offset: 0,
            value: conv,
            expected: "local variable signature",
        });
    }
    let count = r.count("local", "local count")?;
    (0..count).map(|_| r.read_type()).collect()
}

/// Decodes a MethodSpec instantiation (II.23.2.15): `0x0A`, a count, the type arguments.
pub fn decode_method_spec(blob: &[u8]) -> Result<Vec<TypeSig>, SignatureError> {
    let mut r = SigReader::new(blob);
    let conv = r.u8("calling convention")?;
    if conv != calling_convention::GENERICINST {
        return Err(SignatureError::BadCallingConvention {
            offset: 0,
            value: conv,
            expected: "MethodSpec instantiation",
        });
    }
    let count = r.count("generic argument", "generic argument count")?;
    (0..count).map(|_| r.read_type()).collect()
}

/// Decodes a TypeSpec blob (II.23.2.14): one type.
pub fn decode_type_spec(blob: &[u8]) -> Result<TypeSig, SignatureError> {
    SigReader::new(blob).read_type()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::cursor::Truncation;

    #[test]
    fn instance_method_with_generic_args() {
        // instance void (class List`1<int32>, !0[], !!1&)  generic<2>
        let blob = [
            0x30, 0x02, 0x03, 0x01, // HASTHIS|GENERIC, 2 generic params, 3 params, void
            0x15, 0x12, 0x09, 0x01, 0x08, // GENERICINST CLASS TypeRef#2 <int32>
            0x1D, 0x13, 0x00, // SZARRAY VAR 0
            0x10, 0x1E, 0x01, // BYREF MVAR 1
        ];
        let sig = decode_method_sig(&blob).unwrap();
        assert!(sig.has_this() && sig.is_generic());
        assert_eq!(sig.generic_param_count, 2);
        assert_eq!(sig.ret, TypeSig::Primitive(Primitive::Void));
        assert_eq!(
            sig.params[0],
            TypeSig::GenericInst(
                Box::new(TypeSig::Class(Token::new(TableId::TypeRef, 2))),
                vec![TypeSig::Primitive(Primitive::I4)]
            )
        );
        assert_eq!(sig.params[1], TypeSig::SzArray(Box::new(TypeSig::Var(0))));
        assert_eq!(sig.params[2], TypeSig::ByRef(Box::new(TypeSig::MVar(1))));
    }

    #[test]
    fn vararg_sentinel_and_array_shape() {
        // vararg int32 (int32, ..., float64)
        let sig = decode_method_sig(&[0x05, 0x02, 0x08, 0x08, 0x41, 0x0D]).unwrap();
        assert_eq!(sig.sentinel, Some(1));
        assert_eq!(sig.kind(), CallKind::VarArg);
        // int32[0...,0...]
        let t = decode_type_spec(&[0x14, 0x08, 0x02, 0x00, 0x02, 0x00, 0x00]).unwrap();
        assert_eq!(
            t,
            TypeSig::Array(
                Box::new(TypeSig::Primitive(Primitive::I4)),
                ArrayShape {
                    rank: 2,
                    sizes: vec![],
                    lower_bounds: vec![0, 0]
                }
            )
        );
    }

    #[test]
    fn truncated_blobs_name_what_was_cut() {
        fn cut<T>(
            what: &'static str,
            offset: u64,
            needed: u64,
            available: u64,
        ) -> Result<T, SignatureError> {
            Err(SignatureError::Truncated(Truncation {
                what,
                offset,
                needed,
                available,
            }))
        }
        assert_eq!(decode_method_sig(&[]), cut("calling convention", 0, 1, 0));
        // A two-byte parameter count with its second byte missing.
        assert_eq!(
            decode_method_sig(&[0x00, 0x80]),
            cut("parameter count", 1, 2, 1)
        );
        // int32[,] with its lower-bound count cut.
        assert_eq!(
            decode_type_spec(&[0x14, 0x08, 0x02, 0x00]),
            cut("array lower bound count", 4, 1, 0)
        );
        // An 8-byte ELEMENT_TYPE_INTERNAL handle with 3 bytes.
        let options = SigOptions {
            pointer_size: 8,
            ..SigOptions::default()
        };
        assert_eq!(
            decode_method_sig_with(&[0x00, 0x00, 0x21, 1, 2, 3], options),
            cut("internal type handle", 3, 8, 3)
        );
        assert_eq!(
            decode_method_sig(&[0x00, 0x80]).unwrap_err().to_string(),
            "parameter count at offset 0x1: needs 2 byte(s), only 1 left"
        );
        // A first byte with no valid encoding is not a truncation.
        assert_eq!(
            decode_method_sig(&[0x00, 0xE0]),
            Err(SignatureError::BadCompressedInt { offset: 1 })
        );
    }

    #[test]
    fn public_decompress_helpers() {
        assert_eq!(decompress_u32(&[0xAE, 0x57, 0xFF]), Some((0x2E57, 2)));
        assert_eq!(decompress_u32(&[0xC0, 0x00]), None);
        assert_eq!(decompress_u32(&[0xE0]), None);
        assert_eq!(decompress_i32(&[0x80, 0x01]), Some((-8192, 2)));
        assert_eq!(decompress_i32(&[]), None);
    }

    #[test]
    fn malformed_blobs_are_errors() {
        assert!(decode_method_sig(&[]).is_err());
        assert!(decode_method_sig(&[0x00, 0x05, 0x01]).is_err()); // 5 params, no bytes
        assert!(decode_method_sig(&[0x00, 0x00, 0x50]).is_err()); // unknown element type
        assert!(decode_method_sig(&[0x06, 0x00, 0x01]).is_err()); // field calling convention
        assert!(decode_type_spec(&[0x12, 0x03]).is_err()); // tag 3
        let deep = vec![0x1D; 1000];
        assert!(matches!(
            decode_type_spec(&deep),
            Err(SignatureError::TooDeep { .. })
        ));
        assert!(decode_type_spec(&[0x14, 0x08, 0x01, 0x02, 0x00, 0x00]).is_err());
    }
}
