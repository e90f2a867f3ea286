//! Types and methods found by name in the loaded modules' metadata (what SOS `name2ee`
//! answers): each match's module, token, and the runtime's MethodTable or MethodDesc for it
//! where the runtime has made one (read from the module's TypeDef and MethodDef maps).

use serde::Serialize;

use crate::contracts::code_versions::tables::lookup_map_entry;
use crate::contracts::fields::Fields;
use crate::contracts::loader::{module_metadata, modules, ModuleInfo};
use crate::contracts::ContractError;
use crate::formats::ecma::Metadata;
use crate::runtime::Runtime;

/// What a name matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FoundKind {
    /// A type (TypeDef).
    Type,
    /// A method (MethodDef).
    Method,
}

/// One match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// A type or a method.
    pub kind: FoundKind,
    /// The module whose metadata defines it.
    pub module: u64,
    /// That module's file name.
    pub module_file: Option<String>,
    /// Its TypeDef or MethodDef token.
    pub token: u32,
    /// The type's MethodTable or the method's MethodDesc; 0 where the runtime has not
    /// loaded the type or made the MethodDesc.
    pub runtime_handle: u64,
    /// Its name from the metadata: the type's full name, or the method's IL signature
    /// with its declaring type (`instance void Ns.Type::Add(!0)`); generic types' methods
    /// are named as declared, since the MethodDesc the runtime keeps for them is the open
    /// one.
    pub name: String,
}

/// What a search found, and the modules it could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FindReport {
    /// The matches, modules in load order.
    pub found: Vec<Found>,
    /// Modules searched.
    pub modules_searched: usize,
    /// Modules whose metadata could not be read, and why.
    pub unreadable: Vec<(u64, String)>,
}

/// Finds `name` in every loaded module whose file name is `module_file` (any module when
/// `None`): a type by its full name (`Ns.Outer+Inner`, generic types with their arity as
/// `List`1`), else every method `Type.Method` of that name (each overload).
pub fn find(
    rt: &Runtime,
    module_file: Option<&str>,
    name: &str,
) -> Result<FindReport, ContractError> {
    let (target, descriptor) = (rt.target(), rt.descriptor());
    let f = Fields::new(target, descriptor);
    let type_map = f.off("Module", "TypeDefToMethodTableMap")?;
    let method_map = f.off("Module", "MethodDefToDescMap").ok();
    let mut report = FindReport::default();
    let wanted = |m: &ModuleInfo| match module_file {
        None | Some("*") => true,
        Some(file) => m.file_name.as_deref().is_some_and(|n| {
            n.eq_ignore_ascii_case(file)
                || n.strip_suffix(".dll")
                    .is_some_and(|s| s.eq_ignore_ascii_case(file))
        }),
    };
    for m in modules(target, descriptor)?.iter().filter(|m| wanted(m)) {
        report.modules_searched += 1;
        let blob = match module_metadata(target, descriptor, m) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                report.unreadable.push((m.address, e.to_string()));
                continue;
            }
        };
        let md = match Metadata::parse(&blob) {
            Ok(md) => md,
            Err(e) => {
                report.unreadable.push((m.address, e.to_string()));
                continue;
            }
        };
        let found = |kind, token: u32, handle, name: String| Found {
            kind,
            module: m.address,
            module_file: m.file_name.clone(),
            token,
            runtime_handle: handle,
            name,
        };
        // A damaged lookup map costs this module's handles, not the search.
        let mut handle =
            |map: u64, rid: u32| match lookup_map_entry(&f, m.address.wrapping_add(map), rid) {
                Ok(h) => h,
                Err(e) => {
                    report.unreadable.push((m.address, e.to_string()));
                    0
                }
            };
        if let Some(rid) = md.find_type(name) {
            let mt = handle(type_map, rid);
            report.found.push(found(
                FoundKind::Type,
                0x0200_0000 | rid,
                mt,
                name.to_string(),
            ));
            continue;
        }
        // `Ns.Type.Method`, and constructors: `Ns.Type..ctor`, `Ns.Type..cctor`.
        let split = match name.rfind("..") {
            Some(i) => Some((&name[..i], &name[i + 1..])),
            None => name.rsplit_once('.'),
        };
        let Some((type_name, method)) = split else {
            continue;
        };
        let Some(type_rid) = md.find_type(type_name) else {
            continue;
        };
        for rid in md.type_methods(type_rid).unwrap_or_default() {
            if md.method_name(rid).ok().as_deref() != Some(method) {
                continue;
            }
            let desc = method_map.map_or(0, |off| handle(off, rid));
            let full = format!("{type_name}::{method}");
            let signature = md.il_method_signature(rid, &full).unwrap_or(full);
            report
                .found
                .push(found(FoundKind::Method, 0x0600_0000 | rid, desc, signature));
        }
    }
    Ok(report)
}
