//! Names as the .NET runtime prints them: IL-style signatures (the runtime's
//! `PrettyPrintSig`), runtime type names (`TypeString`, `Outer+Inner[args]`), and the
//! full method names of its perf map. See `README.md` next to this file for the rules.

use std::borrow::Cow;

use super::error::{MetadataError, Result};
use super::signature::{decode_method_sig, ArrayShape, CallKind, MethodSig, Primitive, TypeSig};
use super::tables::{TableId, Token};
use super::Metadata;

/// Longest name the formatters build; longer ones are errors.
pub const MAX_NAME_LENGTH: usize = 1 << 20;
/// Deepest nesting the formatters follow (nested types, TypeSpecs, type arguments).
pub const MAX_NAME_DEPTH: usize = 64;

/// How nested types are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NestedStyle {
    /// `Namespace.Outer+Inner`: reflection and runtime type names (the perf map's
    /// declaring type), with the runtime's escaping of `,[]&*+\`.
    Plus,
    /// `Namespace.Outer/Inner`: IL syntax (types inside the perf map's signatures).
    Slash,
}

/// Names `ELEMENT_TYPE_INTERNAL` TypeHandles of runtime-made signatures: the type's name
/// as its own module's metadata prints it (`System.Span`1`), or `None` if unknown.
pub type InternalTypeNamer<'x> = &'x dyn Fn(u64) -> Option<String>;

/// Prints signature types the way the runtime's `PrettyPrintSig` does (ILDASM syntax
/// without quoting): `int32`, `class [System.Runtime]System.Type`, `valuetype
/// System.Span`1<!0>`, `!!0[]`, `int32&`, `method unmanaged cdecl void *(int32)`.
#[derive(Clone, Copy)]
pub struct IlFormatter<'m, 'a> {
    md: &'m Metadata<'a>,
    internal: Option<InternalTypeNamer<'m>>,
}

impl<'m, 'a> IlFormatter<'m, 'a> {
    /// A formatter over `md`.
    pub fn new(md: &'m Metadata<'a>) -> Self {
        IlFormatter { md, internal: None }
    }

    /// Uses `namer` for `ELEMENT_TYPE_INTERNAL` types.
    pub fn with_internal_namer(mut self, namer: InternalTypeNamer<'m>) -> Self {
        self.internal = Some(namer);
        self
    }

    fn check(out: &str, depth: usize) -> Result<()> {
        if depth > MAX_NAME_DEPTH {
            return Err(MetadataError::TooDeep {
                what: "name",
                limit: MAX_NAME_DEPTH,
            });
        }
        if out.len() > MAX_NAME_LENGTH {
            return Err(MetadataError::NameTooLong {
                limit: MAX_NAME_LENGTH,
            });
        }
        Ok(())
    }

    /// Appends one type.
    pub fn type_sig(&self, t: &TypeSig, out: &mut String) -> Result<()> {
        self.ty(t, out, 0)
    }

    /// One type as a string.
    pub fn type_string(&self, t: &TypeSig) -> Result<String> {
        let mut s = String::new();
        self.type_sig(t, &mut s)?;
        Ok(s)
    }

    fn ty(&self, t: &TypeSig, out: &mut String, depth: usize) -> Result<()> {
        Self::check(out, depth)?;
        let d = depth + 1;
        match t {
            TypeSig::Primitive(p) => out.push_str(p.il_name()),
            TypeSig::ValueType(tok) => {
                out.push_str("valuetype ");
                self.class_or_nil(*tok, out, d)?;
            }
            TypeSig::Class(tok) => {
                out.push_str("class ");
                self.class_or_nil(*tok, out, d)?;
            }
            TypeSig::Var(n) => {
                out.push('!');
                out.push_str(&(*n as i32).to_string());
            }
            TypeSig::MVar(n) => {
                out.push_str("!!");
                out.push_str(&(*n as i32).to_string());
            }
            TypeSig::Ptr(inner) => {
                self.ty(inner, out, d)?;
                out.push('*');
            }
            TypeSig::ByRef(inner) => {
                self.ty(inner, out, d)?;
                out.push('&');
            }
            TypeSig::SzArray(inner) => {
                self.ty(inner, out, d)?;
                out.push_str("[]");
            }
            TypeSig::Pinned(inner) => {
                self.ty(inner, out, d)?;
                out.push_str(" pinned");
            }
            TypeSig::Modified {
                required,
                modifier,
                inner,
            } => {
                self.ty(inner, out, d)?;
                out.push_str(if *required { " modreq(" } else { " modopt(" });
                self.class(*modifier, out, d)?;
                out.push(')');
            }
            TypeSig::ModifiedInternal {
                required,
                handle,
                inner,
            } => {
                self.ty(inner, out, d)?;
                out.push_str(if *required { " modreq(" } else { " modopt(" });
                self.internal_type(*handle, out);
                out.push(')');
            }
            TypeSig::Array(elem, shape) => {
                self.ty(elem, out, d)?;
                array_shape(shape, out);
            }
            TypeSig::GenericInst(base, args) => {
                self.ty(base, out, d)?;
                out.push('<');
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ty(a, out, d)?;
                }
                out.push('>');
            }
            TypeSig::FnPtr(sig) => {
                out.push_str("method ");
                self.method(sig, "*", out, d)?;
            }
            TypeSig::Internal(handle) => self.internal_type(*handle, out),
        }
        Ok(())
    }

    fn internal_type(&self, handle: u64, out: &mut String) {
        match self.internal.and_then(|f| f(handle)) {
            Some(name) => out.push_str(&name),
            None => out.push_str("(null)"),
        }
        out.push_str(&format!(" /* MT: 0x{handle:x} */"));
    }

    fn class_or_nil(&self, tok: Token, out: &mut String, depth: usize) -> Result<()> {
        if tok.is_nil() {
            out.push_str("[ERROR! NIL TOKEN]");
            Ok(())
        } else {
            self.class(tok, out, depth)
        }
    }

    /// Appends the name of the type (or scope) `tok` names, as `PrettyPrintClass` does:
    /// TypeDefs as `Namespace.Outer/Inner`, TypeRefs with their resolution scope first
    /// (`[Assembly]`, `[.module Name]`, nothing for this module, `[*]` for a nil scope),
    /// TypeSpecs as their signature.
    pub fn class(&self, tok: Token, out: &mut String, depth: usize) -> Result<()> {
        Self::check(out, depth)?;
        let md = self.md;
        if tok.0 == 0 {
            out.push_str("[*]");
            return Ok(());
        }
        if !md.is_valid_token(tok) {
            out.push_str(&format!(" [ERROR: INVALID TOKEN 0x{:08X}] ", tok.0));
            return Ok(());
        }
        let d = depth + 1;
        match tok.table() {
            Some(TableId::TypeRef) | Some(TableId::TypeDef) => {
                let is_ref = tok.table() == Some(TableId::TypeRef);
                let (encloser, name_indexes) = if is_ref {
                    match md.type_ref(tok.rid()) {
                        Ok(r) => (Some(r.resolution_scope), Some((r.namespace, r.name))),
                        Err(_) => (None, None),
                    }
                } else {
                    (
                        md.enclosing_type(tok.rid())
                            .map(|e| Token::new(TableId::TypeDef, e)),
                        md.type_def(tok.rid()).ok().map(|r| (r.namespace, r.name)),
                    )
                };
                // The runtime prints a record it cannot read as this text, twice.
                let (namespace, name) = name_indexes
                    .and_then(|(ns, n)| {
                        Some((
                            md.strings.get_lossy(ns).ok()?,
                            md.strings.get_lossy(n).ok()?,
                        ))
                    })
                    .unwrap_or_else(|| {
                        let text = if is_ref {
                            "Invalid TypeRef record"
                        } else {
                            "Invalid TypeDef record"
                        };
                        (Cow::Borrowed(text), Cow::Borrowed(text))
                    });
                // A TypeRef's scope (a nil one prints `[*]`) or a TypeDef's encloser.
                if let Some(enc) = encloser {
                    if enc.0 == 0 || !enc.is_nil() {
                        self.class(enc, out, d)?;
                        if matches!(enc.table(), Some(TableId::TypeRef) | Some(TableId::TypeDef)) {
                            out.push('/');
                        }
                    }
                }
                if !namespace.is_empty() {
                    out.push_str(&namespace);
                    out.push('.');
                }
                out.push_str(&name);
            }
            Some(TableId::AssemblyRef) => {
                if let Ok(r) = md.assembly_ref(tok.rid()) {
                    if let Ok(n) = md.strings.get_lossy(r.name) {
                        if !n.is_empty() {
                            out.push('[');
                            out.push_str(&n);
                            out.push(']');
                        }
                    }
                }
            }
            Some(TableId::Assembly) => {
                if let Ok(Some(r)) = md.assembly() {
                    if let Ok(n) = md.strings.get_lossy(r.name) {
                        if !n.is_empty() {
                            out.push('[');
                            out.push_str(&n);
                            out.push(']');
                        }
                    }
                }
            }
            Some(TableId::ModuleRef) => {
                if let Ok(r) = md.module_ref(tok.rid()) {
                    if let Ok(n) = md.strings.get_lossy(r.name) {
                        if !n.is_empty() {
                            out.push_str("[.module ");
                            out.push_str(&n);
                            out.push(']');
                        }
                    }
                }
            }
            Some(TableId::TypeSpec) => match md
                .type_spec(tok.rid())
                .and_then(|r| md.type_spec_sig(r.signature))
            {
                Ok(t) => self.ty(&t, out, d)?,
                Err(_) => out.push_str(&format!("/*Invalid {:08X} record*/", tok.0)),
            },
            Some(TableId::Module) => {}
            _ => out.push_str(&format!(" [ERROR: INVALID TOKEN TYPE 0x{:08X}] ", tok.0)),
        }
        Ok(())
    }

    /// Appends a method signature with `name` between the return type and the parameters:
    /// `[explicit ][instance ][callconv ]RET NAME(P1,P2,...)`. The generic parameter count
    /// is not printed; a sentinel prints as `...`.
    pub fn method_sig(&self, sig: &MethodSig, name: &str, out: &mut String) -> Result<()> {
        self.method(sig, name, out, 0)
    }

    fn method(&self, sig: &MethodSig, name: &str, out: &mut String, depth: usize) -> Result<()> {
        Self::check(out, depth)?;
        let d = depth + 1;
        if sig.explicit_this() {
            out.push_str("explicit ");
        }
        if sig.has_this() {
            out.push_str("instance ");
        }
        match sig.kind() {
            CallKind::Default => {}
            CallKind::C => out.push_str("unmanaged cdecl "),
            CallKind::StdCall => out.push_str("unmanaged stdcall "),
            CallKind::ThisCall => out.push_str("unmanaged thiscall "),
            CallKind::FastCall => out.push_str("unmanaged fastcall "),
            CallKind::VarArg => out.push_str("vararg "),
            CallKind::Unmanaged => out.push_str("unmanaged "),
            CallKind::Property => out.push_str("callconv(8) "),
            CallKind::Other(k) => out.push_str(&format!("callconv({k}) ")),
        }
        self.ty(&sig.ret, out, d)?;
        if !name.is_empty() {
            out.push(' ');
            out.push_str(name);
        }
        out.push('(');
        let mut need_comma = false;
        for i in 0..=sig.params.len() {
            if sig.sentinel == Some(i) {
                if need_comma {
                    out.push(',');
                }
                out.push_str("...");
                need_comma = true;
            }
            if let Some(p) = sig.params.get(i) {
                if need_comma {
                    out.push(',');
                }
                self.ty(p, out, d)?;
                need_comma = true;
            }
        }
        out.push(')');
        Ok(())
    }

    /// A MethodSpec instantiation as `<T1,T2>`.
    pub fn instantiation(&self, args: &[TypeSig], out: &mut String) -> Result<()> {
        out.push('<');
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.ty(a, out, 1)?;
        }
        out.push('>');
        Ok(())
    }
}

/// Appends an array shape as ILDASM does: `[...]` for rank 1 without bounds, else per
/// dimension the size, or `lo...` / `lo...hi` when a lower bound is given, joined by `,`.
fn array_shape(shape: &ArrayShape, out: &mut String) {
    out.push('[');
    if shape.rank == 1 && shape.sizes.is_empty() && shape.lower_bounds.is_empty() {
        out.push_str("...");
    } else {
        for i in 0..shape.rank as usize {
            let lower = shape.lower_bounds.get(i).copied().unwrap_or(0);
            let size = shape.sizes.get(i).map(|&s| s as i32);
            if lower == 0 && size.is_some() {
                out.push_str(&size.unwrap_or(0).to_string());
            } else if i < shape.lower_bounds.len() {
                out.push_str(&lower.to_string());
                out.push_str("...");
                if let Some(size) = size {
                    out.push_str(&lower.wrapping_add(size).wrapping_sub(1).to_string());
                }
            }
            if i + 1 < shape.rank as usize {
                out.push(',');
            }
        }
    }
    out.push(']');
}

/// The characters the runtime's type-name builder escapes with a backslash.
const RESERVED: &[char] = &[',', '[', ']', '&', '*', '+', '\\'];

/// Appends `name` escaped as the runtime's type-name builder does.
pub fn push_escaped(out: &mut String, name: &str) {
    if name.contains(RESERVED) {
        for ch in name.chars() {
            if RESERVED.contains(&ch) {
                out.push('\\');
            }
            out.push(ch);
        }
    } else {
        out.push_str(name);
    }
}

/// Whether an early .NET 8 runtime drops the last byte of a `"[%s] %s::%s"` string of
/// `len` bytes. Its `SString` printf helper tries buffers of 40, 80, 160, ... characters
/// and, when the text is exactly one longer than a buffer, keeps the NUL the C library
/// wrote in the last place; the perf map then shows the name one character short
/// (`System.Linq.Enumerable::Su` for `Sum`). Seen in 8.0.4; 8.0.29 and later, 9 and 10
/// print the whole name ([`crate::names::runtime_truncates_names`]).
pub fn net8_printf_drops_last_byte(len: usize) -> bool {
    let m = len.wrapping_sub(1);
    len > 40 && m % 40 == 0 && (m / 40).is_power_of_two()
}

fn truncate_last_byte(s: &mut String) {
    let mut cut = s.len().saturating_sub(1);
    while cut > 0 && !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
}

/// Options of [`Metadata::perf_map_method_name`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PerfMapNameOptions<'x> {
    /// The declaring type's instantiation, already in runtime form (`System.__Canon`,
    /// `System.Int32`, ...). `None` prints the open form with the type's generic
    /// parameter names (``List`1[T]``); non-generic types ignore it.
    pub type_instantiation: Option<&'x [&'x str]>,
    /// The assembly's simple name; `None` reads it from the Assembly table.
    pub assembly_name: Option<&'x str>,
    /// Reproduce the .NET 8 truncation described at [`net8_printf_drops_last_byte`]
    /// (off by default: only early .NET 8 builds have it).
    pub net8_truncation: bool,
    /// A signature blob to print instead of the MethodDef's (a signature the runtime keeps
    /// for the method itself: .NET 11's async variants).
    pub signature: Option<&'x [u8]>,
}

/// Builds a perf-map method name from its parts (also for methods without metadata rows,
/// e.g. `dynamicClass` methods, whose signature comes from target memory):
/// `SIGPREFIX RET [ASSEMBLY] TYPE::NAME(PARAMS)`.
pub fn format_perf_map_name(
    il: &IlFormatter<'_, '_>,
    assembly: &str,
    declaring_type: &str,
    method_name: &str,
    sig: &MethodSig,
    net8_truncation: bool,
) -> Result<String> {
    let mut label = format!("[{assembly}] {declaring_type}::{method_name}");
    if net8_truncation && net8_printf_drops_last_byte(label.len()) {
        truncate_last_byte(&mut label);
    }
    let mut out = String::with_capacity(label.len() + 64);
    il.method_sig(sig, &label, &mut out)?;
    Ok(out)
}

impl<'a> Metadata<'a> {
    /// An IL formatter over this metadata.
    pub fn il(&self) -> IlFormatter<'_, 'a> {
        IlFormatter::new(self)
    }

    /// The TypeDef's name with namespace and enclosing types, without generic arguments:
    /// `System.Collections.Generic.List`1+Enumerator` (runtime style, escaped as the
    /// runtime does) or `System.Collections.Generic.List`1/Enumerator` (IL style).
    pub fn type_name(&self, rid: u32, style: NestedStyle) -> Result<String> {
        let mut out = String::new();
        match style {
            NestedStyle::Slash => {
                self.expect_token(Token::new(TableId::TypeDef, rid), TableId::TypeDef)?;
                self.il()
                    .class(Token::new(TableId::TypeDef, rid), &mut out, 0)?;
            }
            NestedStyle::Plus => self.push_runtime_type_name(rid, &mut out)?,
        }
        Ok(out)
    }

    fn push_runtime_type_name(&self, rid: u32, out: &mut String) -> Result<()> {
        // Outermost first.
        let mut chain = vec![rid];
        let mut cur = rid;
        while let Some(enc) = self.enclosing_type(cur) {
            if chain.len() > MAX_NAME_DEPTH || chain.contains(&enc) {
                return Err(MetadataError::TooDeep {
                    what: "type nesting",
                    limit: MAX_NAME_DEPTH,
                });
            }
            chain.push(enc);
            cur = enc;
        }
        for (i, t) in chain.iter().rev().enumerate() {
            let row = self.type_def(*t)?;
            if i > 0 {
                out.push('+');
            }
            let ns = self.strings.get_lossy(row.namespace)?;
            if !ns.is_empty() {
                push_escaped(out, &ns);
                out.push('.');
            }
            push_escaped(out, &self.strings.get_lossy(row.name)?);
        }
        Ok(())
    }

    /// The runtime's name of the TypeDef (as `TypeString` prints a MethodTable with
    /// namespaces but no assemblies): `Namespace.Outer+Inner[Arg1,Arg2]`. For a generic
    /// type, `instantiation` gives the arguments in runtime form; `None` prints the
    /// generic parameter names (the open type).
    pub fn runtime_type_name(&self, rid: u32, instantiation: Option<&[&str]>) -> Result<String> {
        let mut out = String::new();
        self.push_runtime_type_name(rid, &mut out)?;
        let params = self.generic_params_of(Token::new(TableId::TypeDef, rid));
        let args: Vec<Cow<'_, str>> = match instantiation {
            Some(inst) => inst.iter().map(|s| Cow::Borrowed(*s)).collect(),
            None => params
                .iter()
                .map(|p| {
                    self.strings.get_lossy(p.name).map(|n| {
                        let mut e = String::new();
                        push_escaped(&mut e, &n);
                        Cow::Owned(e)
                    })
                })
                .collect::<Result<_>>()?,
        };
        if !args.is_empty() {
            out.push('[');
            out.push_str(&args.join(","));
            out.push(']');
        }
        Ok(out)
    }

    /// The assembly's simple name (the Assembly row; the Module name for a netmodule).
    pub fn assembly_name(&self) -> Result<Cow<'a, str>> {
        match self.assembly()? {
            Some(a) => self.strings.get_lossy(a.name),
            None => self.strings.get_lossy(self.module()?.name),
        }
    }

    /// The method's name as the .NET runtime writes it to its perf map (without the
    /// `[Tier]` suffix): `instance int32 [System.Linq] System.Linq.Enumerable+Iterator`1[System.__Canon]::get_Count()`.
    pub fn perf_map_method_name(
        &self,
        method_rid: u32,
        options: &PerfMapNameOptions<'_>,
    ) -> Result<String> {
        let owner = self
            .method_declaring_type(method_rid)
            .ok_or(MetadataError::NoDeclaringType { method: method_rid })?;
        let declaring = self.runtime_type_name(owner, options.type_instantiation)?;
        let assembly = match options.assembly_name {
            Some(a) => Cow::Borrowed(a),
            None => self.assembly_name()?,
        };
        let row = self.method_def(method_rid)?;
        let name = self.strings.get_lossy(row.name)?;
        let sig = match options.signature {
            Some(blob) => decode_method_sig(blob)
                .map_err(|source| MetadataError::Signature { blob: 0, source })?,
            None => self.method_signature(method_rid)?,
        };
        format_perf_map_name(
            &self.il(),
            &assembly,
            &declaring,
            &name,
            &sig,
            options.net8_truncation,
        )
    }

    /// The method's signature in IL style with `name` in place
    /// (`instance bool Contains(!0)`); `name` may be empty.
    pub fn il_method_signature(&self, method_rid: u32, name: &str) -> Result<String> {
        let sig = self.method_signature(method_rid)?;
        let mut out = String::new();
        self.il().method_sig(&sig, name, &mut out)?;
        Ok(out)
    }
}

/// A generic parameter a [`CompilerNames`] formatter met: `!n` of the type or `!!n` of
/// the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenericParam {
    /// `!n`: the type's parameter number n.
    Type(u32),
    /// `!!n`: the method's parameter number n.
    Method(u32),
}

/// Names a generic parameter while formatting (the instantiation's argument): appends it
/// and returns `true`, or returns `false` to print the parameter as `!n` / `!!n`.
pub type GenericArgNamer<'x> = &'x dyn Fn(GenericParam, &mut String) -> Result<bool>;

/// Prints types the way crossgen2 (the ReadyToRun compiler, `ILCompiler`'s `TypeString`
/// formatter) names them in its r2rmap: `System.Int32`, `Ns.Outer+Inner` (a nested type's
/// own namespace is not printed), ``System.Collections.Generic.Dictionary`2[System.String, System.Int32]``
/// (the arguments of a nested generic type all after the innermost name), `T[]`, `T[,]`,
/// `T[*]` (rank-1 general array), `T*`, `T&`, `RET (P1, P2)` (function pointers), `!0`,
/// `!!0` (uninstantiated generic parameters). Nothing is escaped, custom modifiers and
/// `pinned` are not printed. `with_generic_args` substitutes an instantiation.
#[derive(Clone, Copy)]
pub struct CompilerNames<'m, 'a, 'x> {
    md: &'m Metadata<'a>,
    generic: Option<GenericArgNamer<'x>>,
}

impl<'m, 'a, 'x> CompilerNames<'m, 'a, 'x> {
    /// A formatter over `md`, printing generic parameters as `!n` / `!!n`.
    pub fn new(md: &'m Metadata<'a>) -> Self {
        CompilerNames { md, generic: None }
    }

    /// Uses `namer` for the generic parameters of the types printed.
    pub fn with_generic_args(mut self, namer: GenericArgNamer<'x>) -> Self {
        self.generic = Some(namer);
        self
    }

    /// Appends one type.
    pub fn type_sig(&self, t: &TypeSig, out: &mut String) -> Result<()> {
        self.ty(t, out, 0)
    }

    fn ty(&self, t: &TypeSig, out: &mut String, depth: usize) -> Result<()> {
        IlFormatter::check(out, depth)?;
        let d = depth + 1;
        match t {
            TypeSig::Primitive(p) => out.push_str(p.runtime_name()),
            TypeSig::ValueType(tok) | TypeSig::Class(tok) => self.type_token(*tok, out, d)?,
            TypeSig::Var(n) => self.generic_param(GenericParam::Type(*n), out)?,
            TypeSig::MVar(n) => self.generic_param(GenericParam::Method(*n), out)?,
            TypeSig::Ptr(inner) => {
                self.ty(inner, out, d)?;
                out.push('*');
            }
            TypeSig::ByRef(inner) => {
                self.ty(inner, out, d)?;
                out.push('&');
            }
            TypeSig::SzArray(inner) => {
                self.ty(inner, out, d)?;
                out.push_str("[]");
            }
            TypeSig::Array(elem, shape) => {
                self.ty(elem, out, d)?;
                push_compiler_array_rank(shape.rank, out);
            }
            TypeSig::Pinned(inner)
            | TypeSig::Modified { inner, .. }
            | TypeSig::ModifiedInternal { inner, .. } => self.ty(inner, out, d)?,
            TypeSig::GenericInst(base, args) => {
                match base.unmodified() {
                    TypeSig::Class(tok) | TypeSig::ValueType(tok) => {
                        self.type_token(*tok, out, d)?
                    }
                    other => self.ty(other, out, d)?,
                }
                out.push('[');
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.ty(a, out, d)?;
                }
                out.push(']');
            }
            TypeSig::FnPtr(sig) => {
                self.ty(&sig.ret, out, d)?;
                out.push_str(" (");
                for (i, p) in sig.params.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.ty(p, out, d)?;
                }
                out.push(')');
            }
            // Only in signatures the runtime made in memory; no name to give.
            TypeSig::Internal(handle) => out.push_str(&format!("(MT: {handle:#x})")),
        }
        Ok(())
    }

    fn generic_param(&self, p: GenericParam, out: &mut String) -> Result<()> {
        if let Some(namer) = self.generic {
            if namer(p, out)? {
                return Ok(());
            }
        }
        match p {
            GenericParam::Type(n) => out.push_str(&format!("!{n}")),
            GenericParam::Method(n) => out.push_str(&format!("!!{n}")),
        }
        Ok(())
    }

    /// Appends the type a TypeDef, TypeRef or TypeSpec token names (a TypeDef or TypeRef
    /// without its generic arguments: ``List`1``).
    pub fn type_token(&self, tok: Token, out: &mut String, depth: usize) -> Result<()> {
        IlFormatter::check(out, depth)?;
        let md = self.md;
        match tok.table() {
            Some(TableId::TypeDef) => {
                let mut chain = vec![tok.rid()];
                let mut cur = tok.rid();
                while let Some(enc) = md.enclosing_type(cur) {
                    if chain.len() > MAX_NAME_DEPTH || chain.contains(&enc) {
                        return Err(MetadataError::TooDeep {
                            what: "type nesting",
                            limit: MAX_NAME_DEPTH,
                        });
                    }
                    chain.push(enc);
                    cur = enc;
                }
                for (i, rid) in chain.iter().rev().enumerate() {
                    let row = md.type_def(*rid)?;
                    if i == 0 {
                        push_namespace(out, &md.strings.get_lossy(row.namespace)?);
                    } else {
                        out.push('+');
                    }
                    out.push_str(&md.strings.get_lossy(row.name)?);
                }
            }
            Some(TableId::TypeRef) => {
                let mut chain = vec![tok.rid()];
                let mut row = md.type_ref(tok.rid())?;
                while row.resolution_scope.table() == Some(TableId::TypeRef) {
                    let enc = row.resolution_scope.rid();
                    if chain.len() > MAX_NAME_DEPTH || chain.contains(&enc) {
                        return Err(MetadataError::TooDeep {
                            what: "type nesting",
                            limit: MAX_NAME_DEPTH,
                        });
                    }
                    chain.push(enc);
                    row = md.type_ref(enc)?;
                }
                for (i, rid) in chain.iter().rev().enumerate() {
                    let row = md.type_ref(*rid)?;
                    if i == 0 {
                        push_namespace(out, &md.strings.get_lossy(row.namespace)?);
                    } else {
                        out.push('+');
                    }
                    out.push_str(&md.strings.get_lossy(row.name)?);
                }
            }
            Some(TableId::TypeSpec) => {
                let spec = md.type_spec(tok.rid())?;
                let t = md.type_spec_sig(spec.signature)?;
                self.ty(&t, out, depth + 1)?;
            }
            _ => return Err(MetadataError::InvalidToken { token: tok.0 }),
        }
        Ok(())
    }

    /// A method's name as crossgen2 writes it to its r2rmap:
    /// `RET DECLARING::NAME(P1, P2)`, the return type left out when it is `void`.
    pub fn method_name(&self, declaring_type: &str, name: &str, sig: &MethodSig) -> Result<String> {
        let mut out = String::with_capacity(declaring_type.len() + name.len() + 64);
        if !matches!(sig.ret.unmodified(), TypeSig::Primitive(Primitive::Void)) {
            self.ty(&sig.ret, &mut out, 0)?;
            out.push(' ');
        }
        out.push_str(declaring_type);
        out.push_str("::");
        out.push_str(name);
        out.push('(');
        for (i, p) in sig.params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            self.ty(p, &mut out, 0)?;
        }
        out.push(')');
        IlFormatter::check(&out, 0)?;
        Ok(out)
    }
}

fn push_namespace(out: &mut String, ns: &str) {
    if !ns.is_empty() {
        out.push_str(ns);
        out.push('.');
    }
}

/// Appends a general array's brackets as crossgen2 prints them: `[*]` for rank 1,
/// otherwise one comma fewer than the rank (`[,]`).
pub fn push_compiler_array_rank(rank: u32, out: &mut String) {
    out.push('[');
    if rank == 1 {
        out.push('*');
    } else {
        for _ in 1..rank.min(super::signature::MAX_ARRAY_RANK) {
            out.push(',');
        }
    }
    out.push(']');
}

impl<'a> Metadata<'a> {
    /// MethodDef `rid`'s name as crossgen2 writes it to its r2rmap (see
    /// [`CompilerNames`]), for a method that needs no instantiation: its declaring type
    /// is printed as a type definition (a generic one without arguments) and generic
    /// parameters as `!n` / `!!n`.
    pub fn compiler_method_name(&self, method_rid: u32) -> Result<String> {
        let owner = self
            .method_declaring_type(method_rid)
            .ok_or(MetadataError::NoDeclaringType { method: method_rid })?;
        let names = CompilerNames::new(self);
        let mut declaring = String::new();
        names.type_token(Token::new(TableId::TypeDef, owner), &mut declaring, 0)?;
        let name = self.method_name(method_rid)?;
        let sig = self.method_signature(method_rid)?;
        names.method_name(&declaring, &name, &sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_lengths() {
        let hits: Vec<usize> = (0..2000)
            .filter(|&l| net8_printf_drops_last_byte(l))
            .collect();
        assert_eq!(hits, vec![41, 81, 161, 321, 641, 1281]);
    }

    #[test]
    fn escaping() {
        let mut s = String::new();
        push_escaped(&mut s, "A+B[,]");
        assert_eq!(s, "A\\+B\\[\\,\\]");
        let mut s = String::new();
        push_escaped(&mut s, "<>c__DisplayClass0_0");
        assert_eq!(s, "<>c__DisplayClass0_0");
    }

    #[test]
    fn array_shapes() {
        let f = |rank, sizes: Vec<u32>, lower_bounds: Vec<i32>| {
            let mut s = String::new();
            array_shape(
                &ArrayShape {
                    rank,
                    sizes,
                    lower_bounds,
                },
                &mut s,
            );
            s
        };
        assert_eq!(f(1, vec![], vec![]), "[...]");
        assert_eq!(f(2, vec![], vec![0, 0]), "[0...,0...]");
        assert_eq!(f(2, vec![], vec![]), "[,]");
        assert_eq!(f(2, vec![3, 4], vec![]), "[3,4]");
        assert_eq!(f(1, vec![5], vec![2]), "[2...6]");
    }
}
