//! Names of compiled methods, in two styles:
//!
//! * [`NameStyle::Runtime`]: as the .NET runtime names the method in its perf map (and
//!   `cdac ip2md` prints it): `instance !0 [System.Linq] System.Linq.Enumerable+Iterator`1[System.__Canon]::get_Current()`;
//! * [`NameStyle::Crossgen2`]: as crossgen2 names it in the r2rmap it writes:
//!   `System.__Canon System.Linq.Enumerable+Iterator`1[System.__Canon]::get_Current()`
//!   (the instantiated signature, see [`CompilerNames`]).
//!
//! Methods are found in the metadata of the module a signature names; a MemberRef is
//! followed to its MethodDef, in its own module or (through its class's resolution scope)
//! in another loaded one.

use crate::formats::ecma::names::push_compiler_array_rank;
use crate::formats::ecma::names::push_escaped;
use crate::formats::ecma::{
    decode_method_sig, CompilerNames, GenericParam, Metadata, MetadataError, MethodSig,
    PerfMapNameOptions, TableId, Token, TypeSig,
};

use super::signature::{InstanceMethod, ModuleSet, R2rType, SigError, MAX_DEPTH};

/// How method names are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NameStyle {
    /// The runtime's perf-map names (what `cdac ip2md` and `cdac perfmap` print).
    #[default]
    Runtime,
    /// crossgen2's r2rmap names.
    Crossgen2,
}

/// A method found in metadata: a MethodDef, or a MemberRef that could not be followed to
/// one.
struct Resolved<'m, 'a> {
    md: &'m Metadata<'a>,
    /// The MethodDef row, when known.
    def: Option<u32>,
    name: String,
    sig: MethodSig,
    /// The declaring type: a TypeDef (of a MethodDef), or a MemberRef's class.
    declaring: Token,
}

/// Names methods of the modules of a [`ModuleSet`].
pub struct Namer<'s, 'm, 'a> {
    /// The modules tokens refer to.
    pub set: &'s ModuleSet<'m, 'a>,
    /// Truncates names the way .NET 8's crossgen2 does.
    pub net8_truncation: bool,
}

impl<'m, 'a> Namer<'_, 'm, 'a> {
    /// The name of MethodDef `rid` of module `module` (a method without instantiation).
    pub fn method_def(
        &self,
        style: NameStyle,
        module: u32,
        rid: u32,
        assembly: Option<&str>,
    ) -> Option<String> {
        let md = self.set.get(module).ok()?;
        match style {
            NameStyle::Runtime => md
                .perf_map_method_name(
                    rid,
                    &PerfMapNameOptions {
                        assembly_name: assembly,
                        net8_truncation: self.net8_truncation,
                        ..PerfMapNameOptions::default()
                    },
                )
                .ok(),
            NameStyle::Crossgen2 => md.compiler_method_name(rid).ok(),
        }
    }

    /// The module a decoded instance method's token belongs to.
    fn method_module(&self, inst: &InstanceMethod) -> Option<u32> {
        match inst.module {
            Some(m) => Some(m),
            None if self.set.composite => self.set.system,
            None => Some(0),
        }
    }

    /// The name of an instantiated method.
    pub fn instance(&self, style: NameStyle, inst: &InstanceMethod) -> Option<String> {
        if inst.slot.is_some() {
            return None;
        }
        // Every module the instantiation names must be at hand.
        let mut used = Vec::new();
        if let Some(owner) = &inst.owner {
            owner.modules(&mut used);
        }
        inst.method_args.iter().for_each(|a| a.modules(&mut used));
        if used.iter().any(|&m| self.set.get(m).is_err()) {
            return None;
        }
        let module = self.method_module(inst)?;
        let resolved = self.resolve(module, inst.token, 0)?;
        let owner_args: &[R2rType] = match &inst.owner {
            Some(R2rType::Generic { args, .. }) => args,
            _ => &[],
        };
        match style {
            NameStyle::Runtime => {
                let rid = resolved.def?;
                let args = owner_args
                    .iter()
                    .map(|a| self.runtime_type(a, 0))
                    .collect::<Result<Vec<String>, SigError>>()
                    .ok()?;
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                resolved
                    .md
                    .perf_map_method_name(
                        rid,
                        &PerfMapNameOptions {
                            type_instantiation: (!args.is_empty()).then_some(&args[..]),
                            assembly_name: None,
                            net8_truncation: self.net8_truncation,
                            signature: None,
                        },
                    )
                    .ok()
            }
            NameStyle::Crossgen2 => {
                let mut declaring = String::new();
                match &inst.owner {
                    Some(owner) => self.compiler_type(owner, &mut declaring, 0).ok()?,
                    None => CompilerNames::new(resolved.md)
                        .type_token(resolved.declaring, &mut declaring, 0)
                        .ok()?,
                }
                let namer = |p: GenericParam, out: &mut String| -> Result<bool, MetadataError> {
                    let arg = match p {
                        GenericParam::Type(n) => owner_args.get(n as usize),
                        GenericParam::Method(n) => inst.method_args.get(n as usize),
                    };
                    match arg {
                        Some(t) => self.compiler_type(t, out, 1).map(|()| true),
                        None => Ok(false),
                    }
                };
                CompilerNames::new(resolved.md)
                    .with_generic_args(&namer)
                    .method_name(&declaring, &resolved.name, &resolved.sig)
                    .ok()
            }
        }
    }

    /// The method `token` of module `module` names, followed to its MethodDef where it
    /// can be.
    fn resolve(&self, module: u32, token: Token, depth: usize) -> Option<Resolved<'m, 'a>> {
        let md = self.set.get(module).ok()?;
        match token.table()? {
            TableId::MethodDef => {
                let rid = token.rid();
                Some(Resolved {
                    md,
                    def: Some(rid),
                    name: md.method_name(rid).ok()?.into_owned(),
                    sig: md.method_signature(rid).ok()?,
                    declaring: Token::new(TableId::TypeDef, md.method_declaring_type(rid)?),
                })
            }
            TableId::MemberRef => {
                let mr = md.member_ref(token.rid()).ok()?;
                let name = md.strings.get_lossy(mr.name).ok()?.into_owned();
                let blob = md.blobs.get(mr.signature).ok()?;
                let sig = decode_method_sig(blob).ok()?;
                if let Some((target, type_rid)) = self.member_ref_owner(module, mr.class, depth) {
                    let tmd = self.set.get(target).ok()?;
                    if let Some(rid) = find_method(md, tmd, type_rid, &name, blob, &sig) {
                        return self.resolve(target, Token::new(TableId::MethodDef, rid), depth);
                    }
                }
                Some(Resolved {
                    md,
                    def: None,
                    name,
                    sig,
                    declaring: mr.class,
                })
            }
            _ => None,
        }
    }

    /// The TypeDef (module, rid) a MemberRef's class names: a TypeDef, a TypeRef
    /// followed to its module, or a generic instantiation's type.
    fn member_ref_owner(&self, module: u32, class: Token, depth: usize) -> Option<(u32, u32)> {
        let md = self.set.get(module).ok()?;
        match class.table()? {
            TableId::TypeDef => Some((module, class.rid())),
            TableId::TypeRef => self.resolve_type_ref(module, class.rid(), depth),
            TableId::TypeSpec => {
                let spec = md.type_spec(class.rid()).ok()?;
                match md.type_spec_sig(spec.signature).ok()? {
                    TypeSig::GenericInst(base, _) => match base.unmodified() {
                        TypeSig::Class(t) | TypeSig::ValueType(t) if depth < MAX_DEPTH => {
                            self.member_ref_owner(module, *t, depth + 1)
                        }
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The TypeDef (module, rid) a TypeRef of `module` names: the module its outermost
    /// resolution scope names (an AssemblyRef, or a ModuleRef naming an assembly, as the
    /// manifest metadata's references to System.Private.CoreLib do), else any loaded
    /// module defining a type of that name (type forwarders).
    fn resolve_type_ref(&self, module: u32, rid: u32, depth: usize) -> Option<(u32, u32)> {
        if depth > MAX_DEPTH {
            return None;
        }
        let md = self.set.get(module).ok()?;
        let full = type_ref_name(md, rid, 0).ok()?;
        let mut outer = md.type_ref(rid).ok()?;
        let mut steps = 0;
        while outer.resolution_scope.table() == Some(TableId::TypeRef) && steps < MAX_DEPTH {
            outer = md.type_ref(outer.resolution_scope.rid()).ok()?;
            steps += 1;
        }
        let scope = outer.resolution_scope;
        let named = match scope.table() {
            Some(TableId::AssemblyRef) => md
                .assembly_ref(scope.rid())
                .ok()
                .and_then(|r| md.strings.get(r.name).ok())
                .and_then(|n| self.set.by_assembly_name(n)),
            Some(TableId::ModuleRef) => md
                .module_ref(scope.rid())
                .ok()
                .and_then(|r| md.strings.get(r.name).ok())
                .and_then(|n| self.set.by_assembly_name(n))
                .or(Some(module)),
            _ => Some(module),
        };
        if let Some(target) = named {
            if let Some(rid) = self.set.get(target).ok()?.find_type(&full) {
                return Some((target, rid));
            }
        }
        // Forwarded: any loaded module that defines it.
        (0..self.set.modules.len() as u32).find_map(|m| {
            let rid = self.set.get(m).ok()?.find_type(&full)?;
            Some((m, rid))
        })
    }

    /// A type argument as the runtime prints it inside a type name (`System.Int32`,
    /// `System.__Canon`, ``Ns.G`1[System.Int32]``, `T[]`); pointers, byrefs, generic
    /// variables, function pointers and general arrays have no such name.
    fn runtime_type(&self, t: &R2rType, depth: usize) -> Result<String, SigError> {
        if depth > MAX_DEPTH * 2 {
            return Err(SigError::Unnamed("type nesting too deep".into()));
        }
        match t {
            R2rType::Primitive(p) => Ok(p.runtime_name().to_string()),
            R2rType::Canon => Ok("System.__Canon".into()),
            R2rType::Named { module, token } => {
                runtime_token_name(self.set.get(*module)?, *token, None)
            }
            R2rType::Generic {
                module,
                token,
                args,
            } => {
                let args = args
                    .iter()
                    .map(|a| self.runtime_type(a, depth + 1))
                    .collect::<Result<Vec<String>, SigError>>()?;
                runtime_token_name(self.set.get(*module)?, *token, Some(&args))
            }
            R2rType::SzArray(inner) => Ok(format!("{}[]", self.runtime_type(inner, depth + 1)?)),
            _ => Err(SigError::Unnamed(
                "a type argument of this kind is not printed by name".into(),
            )),
        }
    }

    /// Appends a type as crossgen2 prints it ([`CompilerNames`]).
    fn compiler_type(
        &self,
        t: &R2rType,
        out: &mut String,
        depth: usize,
    ) -> Result<(), MetadataError> {
        if depth > MAX_DEPTH * 2 {
            return Err(MetadataError::TooDeep {
                what: "type",
                limit: MAX_DEPTH * 2,
            });
        }
        if out.len() > crate::formats::ecma::names::MAX_NAME_LENGTH {
            return Err(MetadataError::NameTooLong {
                limit: crate::formats::ecma::names::MAX_NAME_LENGTH,
            });
        }
        let md_of = |module: u32, token: Token| {
            self.set
                .get(module)
                .map_err(|_| MetadataError::InvalidToken { token: token.0 })
        };
        let d = depth + 1;
        match t {
            R2rType::Primitive(p) => out.push_str(p.runtime_name()),
            R2rType::Canon => out.push_str("System.__Canon"),
            R2rType::Named { module, token } => {
                CompilerNames::new(md_of(*module, *token)?).type_token(*token, out, d)?
            }
            R2rType::Generic {
                module,
                token,
                args,
            } => {
                CompilerNames::new(md_of(*module, *token)?).type_token(*token, out, d)?;
                out.push('[');
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.compiler_type(a, out, d)?;
                }
                out.push(']');
            }
            R2rType::SzArray(inner) => {
                self.compiler_type(inner, out, d)?;
                out.push_str("[]");
            }
            R2rType::Array(inner, rank) => {
                self.compiler_type(inner, out, d)?;
                push_compiler_array_rank(*rank, out);
            }
            R2rType::Ptr(inner) => {
                self.compiler_type(inner, out, d)?;
                out.push('*');
            }
            R2rType::ByRef(inner) => {
                self.compiler_type(inner, out, d)?;
                out.push('&');
            }
            R2rType::FnPtr { ret, params } => {
                self.compiler_type(ret, out, d)?;
                out.push_str(" (");
                for (i, p) in params.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.compiler_type(p, out, d)?;
                }
                out.push(')');
            }
            R2rType::Var(n) => out.push_str(&format!("!{n}")),
            R2rType::MVar(n) => out.push_str(&format!("!!{n}")),
        }
        Ok(())
    }
}

/// The MethodDef of TypeDef `type_rid` of `tmd` that a MemberRef of `md` (name, signature
/// blob and decoded signature) names: same name and, in the same metadata, the same
/// signature bytes; across metadata, the same signature shape and type names.
fn find_method(
    md: &Metadata<'_>,
    tmd: &Metadata<'_>,
    type_rid: u32,
    name: &str,
    blob: &[u8],
    sig: &MethodSig,
) -> Option<u32> {
    let same = std::ptr::eq(md, tmd);
    let wanted = (!same).then(|| open_signature(md, sig)).flatten();
    tmd.type_methods(type_rid).ok()?.into_iter().find(|&rid| {
        let Ok(row) = tmd.method_def(rid) else {
            return false;
        };
        if tmd.strings.get_bytes(row.name).ok() != Some(name.as_bytes()) {
            return false;
        }
        let Ok(candidate) = tmd.blobs.get(row.signature) else {
            return false;
        };
        if same {
            return candidate == blob;
        }
        let Ok(csig) = decode_method_sig(candidate) else {
            return false;
        };
        wanted.is_some() && open_signature(tmd, &csig) == wanted
    })
}

/// A method signature's calling convention, generic arity and types, named without
/// modules (to compare signatures of different metadata).
fn open_signature(md: &Metadata<'_>, sig: &MethodSig) -> Option<(u8, u32, Vec<String>)> {
    let names = CompilerNames::new(md);
    let mut types = Vec::with_capacity(sig.params.len() + 1);
    for t in std::iter::once(&sig.ret).chain(&sig.params) {
        let mut s = String::new();
        names.type_sig(t, &mut s).ok()?;
        types.push(s);
    }
    Some((sig.calling_convention, sig.generic_param_count, types))
}

/// The runtime name of a TypeDef or TypeRef, with `args` as its instantiation.
fn runtime_token_name(
    md: &Metadata<'_>,
    tok: Token,
    args: Option<&[String]>,
) -> Result<String, SigError> {
    let fail = |e: MetadataError| SigError::Unnamed(e.to_string());
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

/// `Ns.Outer+Inner` of a TypeRef (nested TypeRefs have a TypeRef as resolution scope),
/// escaped as the runtime escapes type names.
fn type_ref_name(md: &Metadata<'_>, rid: u32, depth: usize) -> Result<String, MetadataError> {
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
