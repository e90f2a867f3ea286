//! The logical data descriptor of one runtime: every (sub-)descriptor merged, indirect
//! globals resolved, and the typed view contracts use.

use std::collections::{BTreeMap, HashMap};

use super::error::DescriptorError;
use super::json::{ContractVersion, GlobalSource, Literal, PhysicalDescriptor};
use crate::memory::DataLayout;

/// Names to values, looked up many times per method a contract reads (a fast, not
/// DoS-resistant hash: the names come from the descriptor and from cdac's own code).
pub type NameMap<V> = HashMap<String, V, rustc_hash::FxBuildHasher>;

/// A field of a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the structure.
    pub offset: u32,
    /// Type name when the descriptor gives one.
    pub type_name: Option<String>,
    /// Name of the descriptor that defined the field (the type's own, or an overlay that
    /// filled it in).
    pub origin: String,
}

/// The layout of one runtime structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeLayout {
    name: String,
    size: Option<u32>,
    fields: NameMap<Field>,
    origin: String,
}

impl TypeLayout {
    /// The type's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The field `name`, or an error naming the type and field.
    pub fn field(&self, name: &str) -> Result<&Field, DescriptorError> {
        self.fields
            .get(name)
            .ok_or_else(|| DescriptorError::MissingField {
                type_name: self.name.clone(),
                field: name.to_string(),
            })
    }

    /// Offset of the field `name`.
    pub fn offset(&self, name: &str) -> Result<u64, DescriptorError> {
        Ok(u64::from(self.field(name)?.offset))
    }

    /// True when the type has the field (for fields only some runtime versions have).
    pub fn has_field(&self, name: &str) -> bool {
        self.fields.contains_key(name)
    }

    /// Size in bytes, or an error when the descriptor leaves it indeterminate.
    pub fn size(&self) -> Result<u32, DescriptorError> {
        self.size.ok_or_else(|| DescriptorError::IndeterminateSize {
            type_name: self.name.clone(),
        })
    }

    /// Size in bytes if known.
    pub fn size_if_known(&self) -> Option<u32> {
        self.size
    }

    /// All fields by name.
    pub fn fields(&self) -> &NameMap<Field> {
        &self.fields
    }

    /// Name of the (sub-)descriptor that defined the type.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// A global value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    name: String,
    value: Option<u64>,
    text: Option<String>,
    type_name: Option<String>,
    pointer_data_index: Option<u64>,
    origin: String,
}

impl Global {
    /// The global's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The numeric value (for indirect globals, the pointer-data slot's content: usually
    /// the address of a runtime variable).
    pub fn value(&self) -> Result<u64, DescriptorError> {
        self.value.ok_or_else(|| DescriptorError::GlobalKind {
            name: self.name.clone(),
            expected: "numeric",
        })
    }

    /// The numeric value read as signed.
    pub fn value_signed(&self) -> Result<i64, DescriptorError> {
        Ok(self.value()? as i64)
    }

    /// The string value of a string global (`"x64"`, `"unix"`).
    pub fn string(&self) -> Result<&str, DescriptorError> {
        match (&self.value, &self.text) {
            (None, Some(t)) => Ok(t),
            _ => Err(DescriptorError::GlobalKind {
                name: self.name.clone(),
                expected: "a string",
            }),
        }
    }

    /// The text as written, for numeric strings and string globals alike.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// Type name when the descriptor gives one.
    pub fn type_name(&self) -> Option<&str> {
        self.type_name.as_deref()
    }

    /// The pointer-data index of an indirect global.
    pub fn pointer_data_index(&self) -> Option<u64> {
        self.pointer_data_index
    }

    /// Name of the (sub-)descriptor that defined the global.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// A sub-descriptor met while loading, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubDescriptorInfo {
    /// Its name in the parent (`GC`).
    pub name: String,
    /// Address of its contract descriptor, when the pointer chain reached one.
    pub address: Option<u64>,
    /// Why it was not loaded, when it was not.
    pub skipped: Option<String>,
}

/// What [`DataDescriptor::fill`] added, and where the overlay disagreed with what was
/// already there (the first definition was kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FillReport {
    /// Types the descriptor did not have.
    pub added_types: Vec<String>,
    /// `Type.Field` (or `Type.!` for a size) added to types it had.
    pub added_fields: Vec<String>,
    /// Globals added.
    pub added_globals: Vec<String>,
    /// Contracts added.
    pub added_contracts: Vec<String>,
    /// Where the overlay says something else than the descriptor.
    pub conflicts: Vec<String>,
}

impl FillReport {
    /// True when the overlay added nothing.
    pub fn is_empty(&self) -> bool {
        self.added_types.is_empty()
            && self.added_fields.is_empty()
            && self.added_globals.is_empty()
            && self.added_contracts.is_empty()
    }
}

/// The logical descriptor of a runtime.
///
/// Cheap to clone (the parts are shared, copied only if a clone is changed), so that every
/// contract can own the descriptor it reads instead of borrowing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDescriptor {
    parts: std::sync::Arc<DescriptorParts>,
}

/// What a [`DataDescriptor`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DescriptorParts {
    layout: DataLayout,
    types: NameMap<TypeLayout>,
    globals: NameMap<Global>,
    contracts: BTreeMap<String, ContractVersion>,
    contract_origin: BTreeMap<String, String>,
    sub_descriptors: Vec<SubDescriptorInfo>,
    extras: BTreeMap<String, serde_json::Value>,
    /// Each merged part's physical format version, by origin.
    formats: BTreeMap<String, u64>,
}

/// The newest physical format this reader knows: 0 (.NET 9 and 10), 1, and 2 (.NET 11:
/// contract versions as strings, fields without types, sub-descriptors). A runtime's own
/// descriptor of a newer format is read with format 2's grammar and said to be newer
/// ([`DataDescriptor::newer_formats`]); the open-time checks then tell whether it held.
pub const NEWEST_FORMAT: u64 = 2;

impl DataDescriptor {
    /// The parts to change, copied first if a clone shares them.
    fn parts_mut(&mut self) -> &mut DescriptorParts {
        std::sync::Arc::make_mut(&mut self.parts)
    }

    /// An empty descriptor for a target of this layout; parts are added with
    /// [`merge`](Self::merge).
    pub fn new(layout: DataLayout) -> DataDescriptor {
        let parts = DescriptorParts {
            layout,
            types: NameMap::default(),
            globals: NameMap::default(),
            contracts: BTreeMap::new(),
            contract_origin: BTreeMap::new(),
            sub_descriptors: Vec::new(),
            extras: BTreeMap::new(),
            formats: BTreeMap::new(),
        };
        DataDescriptor {
            parts: std::sync::Arc::new(parts),
        }
    }

    /// Adds one physical descriptor, resolving its indirect globals against its own
    /// `pointer_data`. A type, global or contract that an earlier part already defined is
    /// an error: sub-descriptors extend, they never override. A format newer than
    /// [`NEWEST_FORMAT`] is read with that format's grammar and recorded (it is the
    /// runtime's own description: refusing it would stop every command).
    pub fn merge(
        &mut self,
        origin: &str,
        physical: &PhysicalDescriptor,
        pointer_data: &[u64],
    ) -> Result<(), DescriptorError> {
        if let Some(b) = physical.baseline.as_deref().filter(|b| *b != "empty") {
            return Err(DescriptorError::UnsupportedBaseline {
                descriptor: origin.to_string(),
                baseline: b.to_string(),
            });
        }
        // Check everything before changing anything, so a failed merge leaves self intact.
        for name in physical.types.keys() {
            if let Some(t) = self.parts.types.get(name) {
                return Err(duplicate("type", name, &t.origin, origin));
            }
        }
        for name in physical.globals.keys() {
            if let Some(g) = self.parts.globals.get(name) {
                return Err(duplicate("global", name, &g.origin, origin));
            }
        }
        for name in physical.contracts.keys() {
            if let Some(first) = self.parts.contract_origin.get(name) {
                return Err(duplicate("contract", name, first, origin));
            }
        }
        let mut globals = Vec::with_capacity(physical.globals.len());
        for (name, raw) in &physical.globals {
            let (value, text, index) = match &raw.source {
                GlobalSource::Direct(Literal::Number { value, text }) => {
                    (Some(*value), text.clone(), None)
                }
                GlobalSource::Direct(Literal::Text(t)) => (None, Some(t.clone()), None),
                GlobalSource::Indirect(i) => (
                    Some(resolve_index(origin, name, *i, pointer_data)?),
                    None,
                    Some(*i),
                ),
            };
            globals.push(Global {
                name: name.clone(),
                value,
                text,
                type_name: raw.type_name.clone(),
                pointer_data_index: index,
                origin: origin.to_string(),
            });
        }
        for g in globals {
            self.parts_mut().globals.insert(g.name.clone(), g);
        }
        for (name, raw) in &physical.types {
            self.parts_mut().types.insert(
                name.clone(),
                TypeLayout {
                    name: name.clone(),
                    size: raw.size,
                    fields: raw
                        .fields
                        .iter()
                        .map(|(f, rf)| {
                            (
                                f.clone(),
                                Field {
                                    offset: rf.offset,
                                    type_name: rf.type_name.clone(),
                                    origin: origin.to_string(),
                                },
                            )
                        })
                        .collect(),
                    origin: origin.to_string(),
                },
            );
        }
        for (name, version) in &physical.contracts {
            self.parts_mut()
                .contracts
                .insert(name.clone(), version.clone());
            self.parts_mut()
                .contract_origin
                .insert(name.clone(), origin.to_string());
        }
        for (k, v) in &physical.extras {
            self.parts_mut()
                .extras
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        self.parts_mut()
            .formats
            .insert(origin.to_string(), physical.version);
        Ok(())
    }

    /// The physical format version of each part merged (the runtime's own descriptor and
    /// its sub-descriptors), by name.
    pub fn formats(&self) -> &BTreeMap<String, u64> {
        &self.parts.formats
    }

    /// The parts whose format is newer than this reader knows ([`NEWEST_FORMAT`]), with
    /// their format.
    pub fn newer_formats(&self) -> Vec<(&str, u64)> {
        self.parts
            .formats
            .iter()
            .filter(|(_, &v)| v > NEWEST_FORMAT)
            .map(|(o, &v)| (o.as_str(), v))
            .collect()
    }

    /// Adds what an overlay knows and this descriptor lacks: types, fields of types it has,
    /// sizes it leaves indeterminate, globals and contracts. What is already here is kept:
    /// the runtime's own description wins, and every place where the overlay says something
    /// else is reported in [`FillReport::conflicts`] (an overlay written for another build).
    /// Indirect globals of the overlay resolve against its own `pointer_data`.
    pub fn fill(
        &mut self,
        origin: &str,
        physical: &PhysicalDescriptor,
        pointer_data: &[u64],
    ) -> Result<FillReport, DescriptorError> {
        if physical.version > NEWEST_FORMAT {
            return Err(DescriptorError::UnsupportedVersion {
                descriptor: origin.to_string(),
                version: physical.version.to_string(),
            });
        }
        let mut report = FillReport::default();
        // Resolve every global first, so that a failed fill leaves self intact.
        let mut globals = Vec::new();
        for (name, raw) in &physical.globals {
            let (value, text, index) = match &raw.source {
                GlobalSource::Direct(Literal::Number { value, text }) => {
                    (Some(*value), text.clone(), None)
                }
                GlobalSource::Direct(Literal::Text(t)) => (None, Some(t.clone()), None),
                GlobalSource::Indirect(i) => (
                    Some(resolve_index(origin, name, *i, pointer_data)?),
                    None,
                    Some(*i),
                ),
            };
            globals.push(Global {
                name: name.clone(),
                value,
                text,
                type_name: raw.type_name.clone(),
                pointer_data_index: index,
                origin: origin.to_string(),
            });
        }
        for g in globals {
            match self.parts.globals.get(&g.name) {
                Some(have) if have.value != g.value || have.text != g.text => {
                    if have.value.is_some() && g.value.is_some() {
                        report.conflicts.push(format!(
                            "global {}: runtime {:#x}, overlay {:#x}",
                            g.name,
                            have.value.unwrap_or_default(),
                            g.value.unwrap_or_default()
                        ));
                    } else {
                        report
                            .conflicts
                            .push(format!("global {}: runtime and overlay differ", g.name));
                    }
                }
                Some(_) => {}
                None => {
                    report.added_globals.push(g.name.clone());
                    self.parts_mut().globals.insert(g.name.clone(), g);
                }
            }
        }
        for (name, raw) in &physical.types {
            let field_of = |rf: &super::json::RawField| Field {
                offset: rf.offset,
                type_name: rf.type_name.clone(),
                origin: origin.to_string(),
            };
            match self.parts_mut().types.get_mut(name) {
                None => {
                    report.added_types.push(name.clone());
                    self.parts_mut().types.insert(
                        name.clone(),
                        TypeLayout {
                            name: name.clone(),
                            size: raw.size,
                            fields: raw
                                .fields
                                .iter()
                                .map(|(f, rf)| (f.clone(), field_of(rf)))
                                .collect(),
                            origin: origin.to_string(),
                        },
                    );
                }
                Some(have) => {
                    match (have.size, raw.size) {
                        (None, Some(s)) => {
                            have.size = Some(s);
                            report.added_fields.push(format!("{name}.!"));
                        }
                        (Some(a), Some(b)) if a != b => report
                            .conflicts
                            .push(format!("size of {name}: runtime {a}, overlay {b}")),
                        _ => {}
                    }
                    for (f, rf) in &raw.fields {
                        match have.fields.get(f) {
                            None => {
                                have.fields.insert(f.clone(), field_of(rf));
                                report.added_fields.push(format!("{name}.{f}"));
                            }
                            Some(field) if field.offset != rf.offset => {
                                report.conflicts.push(format!(
                                    "{name}.{f}: runtime offset {}, overlay {}",
                                    field.offset, rf.offset
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
        }
        for (name, version) in &physical.contracts {
            match self.parts.contracts.get(name) {
                None => {
                    self.parts_mut()
                        .contracts
                        .insert(name.clone(), version.clone());
                    self.parts_mut()
                        .contract_origin
                        .insert(name.clone(), origin.to_string());
                    report.added_contracts.push(name.clone());
                }
                Some(have) if have != version => report.conflicts.push(format!(
                    "contract {name}: runtime {have:?}, overlay {version:?}"
                )),
                Some(_) => {}
            }
        }
        Ok(report)
    }

    /// This logical descriptor as one complete compact descriptor: every type and field of
    /// every part (sub-descriptors and overlays included), every global as a direct value
    /// (indirect ones resolved), every contract. Given back with `--descriptor`, it
    /// describes the same runtime without reading anything from the runtime module, so it
    /// also serves targets where that module cannot be found.
    pub fn to_complete_json(&self) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        let mut types = Map::new();
        for (name, t) in &self.parts.types {
            let mut fields = Map::new();
            if let Some(size) = t.size {
                fields.insert("!".into(), json!(size));
            }
            for (f, field) in &t.fields {
                let v = match &field.type_name {
                    Some(ty) => json!([field.offset, ty]),
                    None => json!(field.offset),
                };
                fields.insert(f.clone(), v);
            }
            types.insert(name.clone(), Value::Object(fields));
        }
        let mut globals = Map::new();
        for (name, g) in &self.parts.globals {
            let value = match (g.value, &g.text) {
                (Some(v), _) => Value::String(format!("{v:#x}")),
                (None, Some(t)) => Value::String(t.clone()),
                (None, None) => continue,
            };
            let v = match &g.type_name {
                Some(ty) => json!([value, ty]),
                None => value,
            };
            globals.insert(name.clone(), v);
        }
        let contracts: Map<String, Value> = self
            .parts
            .contracts
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    ContractVersion::Number(n) => json!(n),
                    ContractVersion::Tag(t) => json!(t),
                };
                (k.clone(), v)
            })
            .collect();
        json!({
            "version": 0,
            "baseline": "empty",
            "types": types,
            "globals": globals,
            "contracts": contracts,
        })
    }

    /// Name of the descriptor that advertised contract `name`.
    pub fn contract_origin(&self, name: &str) -> Option<&str> {
        self.parts.contract_origin.get(name).map(String::as_str)
    }

    /// Records what became of a sub-descriptor.
    pub fn record_sub_descriptor(&mut self, info: SubDescriptorInfo) {
        self.parts_mut().sub_descriptors.push(info);
    }

    /// Pointer size and byte order of the runtime.
    pub fn layout(&self) -> DataLayout {
        self.parts.layout
    }

    /// The type `name`, or an error naming it.
    pub fn ty(&self, name: &str) -> Result<&TypeLayout, DescriptorError> {
        self.parts
            .types
            .get(name)
            .ok_or_else(|| DescriptorError::MissingType {
                name: name.to_string(),
            })
    }

    /// The global `name`, or an error naming it.
    pub fn global(&self, name: &str) -> Result<&Global, DescriptorError> {
        self.parts
            .globals
            .get(name)
            .ok_or_else(|| DescriptorError::MissingGlobal {
                name: name.to_string(),
            })
    }

    /// The numeric value of global `name`.
    pub fn global_value(&self, name: &str) -> Result<u64, DescriptorError> {
        self.global(name)?.value()
    }

    /// The string value of global `name`.
    pub fn global_string(&self, name: &str) -> Result<&str, DescriptorError> {
        self.global(name)?.string()
    }

    /// The version of contract `name`, if the runtime advertises it.
    pub fn contract(&self, name: &str) -> Option<&ContractVersion> {
        self.parts.contracts.get(name)
    }

    /// All types by name.
    pub fn types(&self) -> &NameMap<TypeLayout> {
        &self.parts.types
    }

    /// All globals by name.
    pub fn globals(&self) -> &NameMap<Global> {
        &self.parts.globals
    }

    /// All contracts by name.
    pub fn contracts(&self) -> &BTreeMap<String, ContractVersion> {
        &self.parts.contracts
    }

    /// Sub-descriptors met while loading.
    pub fn sub_descriptors(&self) -> &[SubDescriptorInfo] {
        &self.parts.sub_descriptors
    }

    /// Top-level keys the format does not define (first definition wins).
    pub fn extras(&self) -> &BTreeMap<String, serde_json::Value> {
        &self.parts.extras
    }
}

fn duplicate(kind: &'static str, name: &str, first: &str, second: &str) -> DescriptorError {
    DescriptorError::Duplicate {
        kind,
        name: name.to_string(),
        first: first.to_string(),
        second: second.to_string(),
    }
}

/// The pointer-data slot `index`, or an error naming the global that asked for it.
pub(crate) fn resolve_index(
    descriptor: &str,
    name: &str,
    index: u64,
    pointer_data: &[u64],
) -> Result<u64, DescriptorError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| pointer_data.get(i))
        .copied()
        .ok_or_else(|| DescriptorError::PointerDataIndex {
            descriptor: descriptor.to_string(),
            name: name.to_string(),
            index,
            count: pointer_data.len(),
        })
}
