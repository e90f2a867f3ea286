//! NativeFormat metadata (blob 13), as far as naming a method goes, and the frame text the
//! NativeAOT runtime prints for a method: `Namespace.Type.Nested.Method[T](Int32, String)`.
//!
//! The blob starts with `u32 0xDEADDFFD`. A handle is `type << 25 | offset` (offset into the
//! blob); stored untyped it is one unsigned `offset << 7 | type`, stored where its type is
//! implied, the bare offset. Records are their fields in order, each an unsigned, a signed
//! or a handle; a collection is a count and that many handles. Strings are a length and
//! UTF-8 bytes.

use super::native_format::{signed, unsigned};
use super::{error, AotFormatError};

const SIGNATURE: u32 = 0xDEAD_DFFD;

/// Handle types (the numbering is the metadata's).
pub const ARRAY_SIGNATURE: u8 = 1;
/// `X&`.
pub const BY_REFERENCE_SIGNATURE: u8 = 2;
/// An array of string handles.
pub const CONSTANT_STRING_ARRAY: u8 = 25;
/// A string.
pub const CONSTANT_STRING_VALUE: u8 = 26;
/// A function pointer's signature.
pub const FUNCTION_POINTER_SIGNATURE: u8 = 37;
/// A generic parameter (`T`).
pub const GENERIC_PARAMETER: u8 = 38;
/// A method's signature.
pub const METHOD_SIGNATURE: u8 = 43;
/// `!!n`.
pub const METHOD_TYPE_VARIABLE_SIGNATURE: u8 = 44;
/// A namespace defined here.
pub const NAMESPACE_DEFINITION: u8 = 47;
/// A namespace of another module.
pub const NAMESPACE_REFERENCE: u8 = 48;
/// `X*`.
pub const POINTER_SIGNATURE: u8 = 50;
/// `X[]`.
pub const SZARRAY_SIGNATURE: u8 = 55;
/// A module's scope.
pub const SCOPE_DEFINITION: u8 = 56;
/// A type defined here.
pub const TYPE_DEFINITION: u8 = 58;
/// `G<A, B>`.
pub const TYPE_INSTANTIATION_SIGNATURE: u8 = 60;
/// A type of another module.
pub const TYPE_REFERENCE: u8 = 61;
/// A constructed type.
pub const TYPE_SPECIFICATION: u8 = 62;
/// `!n`.
pub const TYPE_VARIABLE_SIGNATURE: u8 = 63;

/// Deepest type nesting followed while formatting (a damaged blob could loop).
const MAX_DEPTH: usize = 64;
/// Longest method text made (real ones are far shorter; a damaged blob could repeat a long
/// string in every parameter).
const MAX_TEXT: usize = 4096;

/// A metadata handle: `type << 25 | offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u32);

impl Token {
    /// The nil handle.
    pub const NIL: Token = Token(0);

    /// The handle of type `kind` at `offset`.
    pub fn new(kind: u8, offset: u32) -> Token {
        Token(u32::from(kind) << 25 | (offset & 0x01FF_FFFF))
    }

    /// Its type.
    pub fn kind(self) -> u8 {
        (self.0 >> 25) as u8 & 0x7f
    }

    /// Its offset in the blob.
    pub fn offset(self) -> usize {
        (self.0 & 0x01FF_FFFF) as usize
    }

    /// Whether it is nil (offset 0).
    pub fn is_nil(self) -> bool {
        self.offset() == 0
    }
}

/// The metadata blob.
#[derive(Debug, Clone)]
pub struct Metadata {
    bytes: Vec<u8>,
}

/// A record's fields, read in order.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Fields<'_> {
    fn unsigned(&mut self) -> Result<u32, AotFormatError> {
        let (v, p) = unsigned(self.bytes, self.pos)?;
        self.pos = p;
        Ok(v)
    }
    fn signed(&mut self) -> Result<i32, AotFormatError> {
        let (v, p) = signed(self.bytes, self.pos)?;
        self.pos = p;
        Ok(v)
    }
    /// An untyped handle: `offset << 7 | type`.
    fn handle(&mut self) -> Result<Token, AotFormatError> {
        let v = self.unsigned()?;
        Ok(Token::new((v & 0x7f) as u8, v >> 7))
    }
    /// A handle whose type the field implies: its offset.
    fn typed(&mut self, kind: u8) -> Result<Token, AotFormatError> {
        Ok(Token::new(kind, self.unsigned()?))
    }
    fn handles(&mut self) -> Result<Vec<Token>, AotFormatError> {
        let n = self.unsigned()?;
        self.check_count(n)?;
        (0..n).map(|_| self.handle()).collect()
    }
    fn typed_handles(&mut self, kind: u8) -> Result<Vec<Token>, AotFormatError> {
        let n = self.unsigned()?;
        self.check_count(n)?;
        (0..n).map(|_| self.typed(kind)).collect()
    }
    fn skip_typed_handles(&mut self) -> Result<(), AotFormatError> {
        let n = self.unsigned()?;
        self.check_count(n)?;
        for _ in 0..n {
            self.unsigned()?;
        }
        Ok(())
    }
    /// Each element takes at least a byte: a count beyond the blob is damage.
    fn check_count(&self, n: u32) -> Result<(), AotFormatError> {
        if n as usize > self.bytes.len().saturating_sub(self.pos) {
            return Err(error(
                "metadata",
                format!("a collection of {n} at {} overruns the blob", self.pos),
            ));
        }
        Ok(())
    }
}

/// A TypeDefinition's fields that naming needs.
struct TypeDefinition {
    namespace: Token,
    name: Token,
    enclosing: Token,
    generic_parameters: Vec<Token>,
}

impl Metadata {
    /// The blob, checked for its signature.
    pub fn new(bytes: Vec<u8>) -> Result<Metadata, AotFormatError> {
        let signature = super::le_u32(&bytes, 0);
        if signature != Some(SIGNATURE) {
            return Err(error(
                "metadata",
                format!("signature {signature:x?}, not 0xdeaddffd"),
            ));
        }
        Ok(Metadata { bytes })
    }

    fn at(&self, token: Token) -> Fields<'_> {
        Fields {
            bytes: &self.bytes,
            pos: token.offset(),
        }
    }

    /// The string a ConstantStringValue handle names ("" for nil).
    pub fn string(&self, token: Token) -> Result<String, AotFormatError> {
        if token.is_nil() {
            return Ok(String::new());
        }
        let mut f = self.at(token);
        let len = f.unsigned()? as usize;
        let bytes = self.bytes.get(f.pos..f.pos + len).ok_or_else(|| {
            error(
                "metadata",
                format!("string at {} overruns the blob", token.offset()),
            )
        })?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn string_array(&self, token: Token) -> Result<Vec<Token>, AotFormatError> {
        if token.is_nil() {
            return Ok(Vec::new());
        }
        self.at(token).handles()
    }

    fn type_definition(&self, token: Token) -> Result<TypeDefinition, AotFormatError> {
        let mut f = self.at(token);
        f.unsigned()?; // flags
        f.handle()?; // base type
        let namespace = f.typed(NAMESPACE_DEFINITION)?;
        let name = f.typed(CONSTANT_STRING_VALUE)?;
        f.unsigned()?; // size
        f.unsigned()?; // packing size
        let enclosing = f.typed(TYPE_DEFINITION)?;
        for _ in 0..5 {
            // nested types, methods, fields, properties, events
            f.skip_typed_handles()?;
        }
        let generic_parameters = f.typed_handles(GENERIC_PARAMETER)?;
        Ok(TypeDefinition {
            namespace,
            name,
            enclosing,
            generic_parameters,
        })
    }

    /// (first handle, name) of a TypeReference, NamespaceDefinition or NamespaceReference.
    fn parent_and_name(&self, token: Token) -> Result<(Token, Token), AotFormatError> {
        let mut f = self.at(token);
        let parent = f.handle()?;
        let name = f.typed(CONSTANT_STRING_VALUE)?;
        Ok((parent, name))
    }

    fn one_handle(&self, token: Token) -> Result<Token, AotFormatError> {
        self.at(token).handle()
    }

    /// The frame text of a method: `Owner.Name[GenericArgs](ParameterTypes)`, as the
    /// NativeAOT runtime prints it (owner namespace-qualified, nested types joined by `.`,
    /// generic types without their arguments, parameters without namespaces).
    pub fn method_text(
        &self,
        owner: Token,
        name: Token,
        signature: Token,
        generic_arguments: Token,
    ) -> Result<String, AotFormatError> {
        let method_context = self.string_array(generic_arguments)?;
        let type_context = self.type_context(owner)?;
        let ctx = Context {
            md: self,
            type_context,
            method_context,
        };
        let mut text = String::new();
        ctx.emit(owner, true, &mut text, 0)?;
        text.push('.');
        text.push_str(&self.string(name)?);
        if !ctx.method_context.is_empty() {
            let names: Vec<String> = ctx
                .method_context
                .iter()
                .map(|&t| self.string(t))
                .collect::<Result<_, _>>()?;
            text.push('[');
            text.push_str(&names.join(","));
            text.push(']');
        }
        text.push('(');
        if !signature.is_nil() {
            let mut f = self.at(signature);
            f.unsigned()?; // calling convention
            f.signed()?; // generic parameter count
            f.handle()?; // return type
            for (i, p) in f.handles()?.into_iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                ctx.emit(p, false, &mut text, 0)?;
            }
        }
        text.push(')');
        Ok(text)
    }

    /// The full name of a type (`Namespace.Outer.Inner`), for a TypeDefinition,
    /// TypeReference or TypeSpecification handle.
    pub fn type_name(&self, token: Token) -> Result<String, AotFormatError> {
        let ctx = Context {
            md: self,
            type_context: Vec::new(),
            method_context: Vec::new(),
        };
        let mut text = String::new();
        ctx.emit(token, true, &mut text, 0)?;
        Ok(text)
    }

    /// A type's namespace (empty for a nested type), simple name and enclosing type (nil
    /// for a top-level one), for a TypeDefinition or TypeReference handle.
    pub fn type_parts(&self, token: Token) -> Result<(String, String, Token), AotFormatError> {
        match token.kind() {
            TYPE_DEFINITION => {
                let d = self.type_definition(token)?;
                let namespace = if d.enclosing.is_nil() {
                    self.namespace(d.namespace, NAMESPACE_DEFINITION)?
                } else {
                    String::new()
                };
                Ok((namespace, self.string(d.name)?, d.enclosing))
            }
            TYPE_REFERENCE => {
                let (parent, name) = self.parent_and_name(token)?;
                if parent.is_nil() || parent.kind() == NAMESPACE_REFERENCE {
                    let namespace = self.namespace(parent, NAMESPACE_REFERENCE)?;
                    Ok((namespace, self.string(name)?, Token::NIL))
                } else {
                    Ok((String::new(), self.string(name)?, parent))
                }
            }
            other => Err(error(
                "metadata",
                format!("handle type {other} is not a type definition or reference"),
            )),
        }
    }

    /// Every TypeDefinition of every scope (namespaces and nested types followed), at most
    /// `max`.
    pub fn type_definitions(&self, max: usize) -> Result<Vec<Token>, AotFormatError> {
        let mut f = Fields {
            bytes: &self.bytes,
            pos: 4,
        };
        let mut namespaces = Vec::new();
        for scope in f.typed_handles(SCOPE_DEFINITION)? {
            let mut f = self.at(scope);
            f.unsigned()?; // flags
            f.unsigned()?; // name
            for _ in 0..5 {
                f.unsigned()?; // hash algorithm, major, minor, build, revision
            }
            let key = f.unsigned()? as usize; // public key bytes
            f.pos += key;
            f.unsigned()?; // culture
            namespaces.push(f.typed(NAMESPACE_DEFINITION)?);
        }
        let mut types = Vec::new();
        // A damaged blob can list a namespace or type twice, or inside itself: each is
        // visited once, and the lists stay within `max`.
        let mut seen = std::collections::HashSet::new();
        while let Some(ns) = namespaces.pop() {
            if !seen.insert(ns) {
                continue;
            }
            if seen.len() > max || namespaces.len() + types.len() > max {
                return Err(error("metadata", format!("more than {max} namespaces")));
            }
            let mut f = self.at(ns);
            f.handle()?; // parent
            f.unsigned()?; // name
            types.extend(f.typed_handles(TYPE_DEFINITION)?);
            f.skip_typed_handles()?; // type forwarders
            namespaces.extend(f.typed_handles(NAMESPACE_DEFINITION)?);
        }
        let mut out = Vec::new();
        while let Some(t) = types.pop() {
            if !seen.insert(t) {
                continue;
            }
            if out.len() >= max || types.len() > max {
                return Err(error("metadata", format!("more than {max} types")));
            }
            let mut f = self.at(t);
            f.unsigned()?; // flags
            f.handle()?; // base type
            f.unsigned()?; // namespace
            f.unsigned()?; // name
            f.unsigned()?; // size
            f.unsigned()?; // packing size
            f.unsigned()?; // enclosing type
            types.extend(f.typed_handles(TYPE_DEFINITION)?);
            out.push(t);
        }
        Ok(out)
    }

    /// The generic arguments `!n` of the owner's methods refer to.
    fn type_context(&self, owner: Token) -> Result<Vec<Token>, AotFormatError> {
        match owner.kind() {
            TYPE_DEFINITION => Ok(self.type_definition(owner)?.generic_parameters),
            TYPE_SPECIFICATION => {
                let signature = self.one_handle(owner)?;
                if signature.kind() == TYPE_INSTANTIATION_SIGNATURE {
                    let mut f = self.at(signature);
                    f.handle()?;
                    f.handles()
                } else {
                    Ok(Vec::new())
                }
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The namespace chain of a namespace handle, outermost first, joined by `.` (the root
    /// namespace's empty name adds nothing).
    fn namespace(&self, mut token: Token, kind: u8) -> Result<String, AotFormatError> {
        let mut parts = Vec::new();
        while !token.is_nil() && token.kind() == kind && parts.len() < MAX_DEPTH {
            let (parent, name) = self.parent_and_name(token)?;
            parts.push(self.string(name)?);
            token = parent;
        }
        parts.retain(|p| !p.is_empty());
        parts.reverse();
        Ok(parts.join("."))
    }
}

/// What `!n` and `!!n` stand for while formatting one method.
struct Context<'m> {
    md: &'m Metadata,
    type_context: Vec<Token>,
    method_context: Vec<Token>,
}

impl Context<'_> {
    fn emit(
        &self,
        token: Token,
        qualify: bool,
        out: &mut String,
        depth: usize,
    ) -> Result<(), AotFormatError> {
        if depth > MAX_DEPTH {
            return Err(error("metadata", "types nested beyond 64 levels (a loop?)"));
        }
        if out.len() > MAX_TEXT {
            return Err(error(
                "metadata",
                format!("a name longer than {MAX_TEXT} bytes"),
            ));
        }
        let md = self.md;
        let next = depth + 1;
        match token.kind() {
            TYPE_REFERENCE => {
                let (parent, name) = md.parent_and_name(token)?;
                if !parent.is_nil() {
                    if parent.kind() != NAMESPACE_REFERENCE {
                        self.emit(parent, qualify, out, next)?;
                        out.push('.');
                    } else if qualify {
                        push_namespace(out, md.namespace(parent, NAMESPACE_REFERENCE)?);
                    }
                }
                out.push_str(&md.string(name)?);
            }
            TYPE_DEFINITION => {
                let d = md.type_definition(token)?;
                if !d.enclosing.is_nil() {
                    self.emit(d.enclosing, qualify, out, next)?;
                    out.push('.');
                } else if qualify {
                    push_namespace(out, md.namespace(d.namespace, NAMESPACE_DEFINITION)?);
                }
                out.push_str(&md.string(d.name)?);
            }
            TYPE_SPECIFICATION => self.emit(md.one_handle(token)?, qualify, out, next)?,
            TYPE_INSTANTIATION_SIGNATURE => {
                // Generic types print without their arguments (`List`1`).
                self.emit(md.one_handle(token)?, qualify, out, next)?
            }
            SZARRAY_SIGNATURE => {
                self.emit(md.one_handle(token)?, qualify, out, next)?;
                out.push_str("[]");
            }
            ARRAY_SIGNATURE => {
                let mut f = md.at(token);
                let element = f.handle()?;
                let rank = f.signed()?;
                self.emit(element, qualify, out, next)?;
                out.push('[');
                if rank > 1 {
                    out.push_str(&",".repeat((rank - 1).min(32) as usize));
                } else {
                    out.push('*');
                }
                out.push(']');
            }
            POINTER_SIGNATURE => {
                self.emit(md.one_handle(token)?, false, out, next)?;
                out.push('*');
            }
            BY_REFERENCE_SIGNATURE => {
                self.emit(md.one_handle(token)?, false, out, next)?;
                out.push('&');
            }
            TYPE_VARIABLE_SIGNATURE => {
                let n = md.at(token).signed()?;
                let t = nth(&self.type_context, n);
                self.emit(t, qualify, out, next)?;
            }
            METHOD_TYPE_VARIABLE_SIGNATURE => {
                let n = md.at(token).signed()?;
                let t = nth(&self.method_context, n);
                self.emit(t, qualify, out, next)?;
            }
            GENERIC_PARAMETER => {
                let mut f = md.at(token);
                f.unsigned()?; // number
                f.unsigned()?; // flags
                f.unsigned()?; // kind
                let name = f.typed(CONSTANT_STRING_VALUE)?;
                out.push_str(&md.string(name)?);
            }
            // The runtime prints nothing for a function pointer.
            FUNCTION_POINTER_SIGNATURE => {}
            CONSTANT_STRING_VALUE => out.push_str(&md.string(token)?),
            _ if token.is_nil() => {}
            _ => out.push_str("???"),
        }
        Ok(())
    }
}

fn nth(list: &[Token], n: i32) -> Token {
    usize::try_from(n)
        .ok()
        .and_then(|i| list.get(i).copied())
        .unwrap_or(Token::NIL)
}

fn push_namespace(out: &mut String, namespace: String) {
    if !namespace.is_empty() {
        out.push_str(&namespace);
        out.push('.');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob laid out by hand: namespace `A.B` (under the root), type `A.B.Orders` with a
    /// nested `Item`, method `Orders.Checkout(Int32, Item[])` where `Int32` is a reference to
    /// `System.Int32`.
    struct Blob(Vec<u8>);
    impl Blob {
        fn here(&self) -> u32 {
            self.0.len() as u32
        }
        fn u(&mut self, v: u32) {
            assert!(v < 128);
            self.0.push((v << 1) as u8);
        }
        fn big(&mut self, v: u32) {
            // 2-byte form
            assert!(v < (1 << 14));
            self.0.push((0x01 | (v << 2)) as u8);
            self.0.push((v >> 6) as u8);
        }
        fn h(&mut self, t: Token) {
            let v = (t.offset() as u32) << 7 | u32::from(t.kind());
            self.big(v);
        }
        fn string(&mut self, s: &str) -> Token {
            let at = self.here();
            self.u(s.len() as u32);
            self.0.extend(s.as_bytes());
            Token::new(CONSTANT_STRING_VALUE, at)
        }
    }

    #[test]
    fn a_method_is_named_as_the_runtime_prints_it() {
        let mut b = Blob(SIGNATURE.to_le_bytes().to_vec());
        b.0.extend([0; 4]);
        let empty = b.string("");
        let a = b.string("A");
        let bb = b.string("B");
        let orders = b.string("Orders");
        let item = b.string("Item");
        let checkout = b.string("Checkout");
        let system = b.string("System");
        let int32 = b.string("Int32");
        // Namespaces: root (empty), A, A.B; each: parent, name, then three empty collections.
        let ns = |b: &mut Blob, parent: Token, name: Token| {
            let at = b.here();
            b.h(parent);
            b.big(name.offset() as u32);
            for _ in 0..3 {
                b.u(0);
            }
            Token::new(NAMESPACE_DEFINITION, at)
        };
        let root = ns(&mut b, Token::NIL, empty);
        let ns_a = ns(&mut b, root, a);
        let ns_ab = ns(&mut b, ns_a, bb);
        let ty = |b: &mut Blob, namespace: Token, name: Token, enclosing: Token| {
            let at = b.here();
            b.u(0);
            b.h(Token::NIL);
            b.big(namespace.offset() as u32);
            b.big(name.offset() as u32);
            b.u(0);
            b.u(0);
            b.big(enclosing.offset() as u32);
            for _ in 0..8 {
                b.u(0);
            }
            Token::new(TYPE_DEFINITION, at)
        };
        let t_orders = ty(&mut b, ns_ab, orders, Token::NIL);
        let t_item = ty(&mut b, Token::NIL, item, t_orders);
        let ref_ns = {
            let at = b.here();
            b.h(Token::NIL);
            b.big(system.offset() as u32);
            Token::new(NAMESPACE_REFERENCE, at)
        };
        let r_int = {
            let at = b.here();
            b.h(ref_ns);
            b.big(int32.offset() as u32);
            Token::new(TYPE_REFERENCE, at)
        };
        let arr = {
            let at = b.here();
            b.h(t_item);
            Token::new(SZARRAY_SIGNATURE, at)
        };
        let sig = {
            let at = b.here();
            b.u(0);
            b.u(0);
            b.h(Token::NIL);
            b.u(2);
            b.h(r_int);
            b.h(arr);
            b.u(0);
            Token::new(METHOD_SIGNATURE, at)
        };
        let md = Metadata::new(b.0).unwrap();
        assert_eq!(
            md.method_text(t_orders, checkout, sig, Token::NIL).unwrap(),
            "A.B.Orders.Checkout(Int32, Orders.Item[])"
        );
        assert_eq!(md.type_name(t_item).unwrap(), "A.B.Orders.Item");
        assert_eq!(md.type_name(r_int).unwrap(), "System.Int32");
        assert!(Metadata::new(vec![0; 8]).is_err());
    }
}
