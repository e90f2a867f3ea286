//! One managed object, read in full (`cdac obj`, like SOS `dumpobj`): its type, size,
//! generation and header, every instance field with its name, declared type, offset and
//! value (references with their type, strings as text, structs expanded), an array's
//! elements, a string's text, and optionally the type's static fields.
//!
//! Field layouts come from the runtime's FieldDescs ([`crate::contracts::field_desc`]);
//! names and declared types from the module's ECMA metadata ([`MethodNamer`]).
//! - [`header`]: the header word (thin lock, hash code, sync block index).
//! - [`values`]: reading a field's or element's value.

pub(crate) mod delegates;
mod fields;
pub mod header;
mod managed_lock;
pub mod values;

use std::collections::HashMap;

use crate::contracts::code_versions::tables::lookup_map_entry;
use crate::contracts::field_desc::{self, ElementType, FieldDesc};
use crate::contracts::fields::Fields;
use crate::contracts::gc::{locate, GcHeapData, GcSegment, ObjectGeneration};
use crate::contracts::runtime_type_system::{method_table_info, MethodTableInfo};
use crate::contracts::sync_block::{Holder, SyncBlockInfo};
use crate::contracts::ContractError;
use crate::names::{FieldMetadata, MethodNamer};
use crate::runtime::Runtime;

pub use fields::{int_field, reference_field};
pub use header::{Header, HeaderState};
pub use managed_lock::ThreadingLock;
pub use values::Value;

/// Most levels of structs expanded inside one another.
const MAX_STRUCT_DEPTH: usize = 4;
/// Most base types followed from one type.
const MAX_BASE_TYPES: usize = 64;

/// What `inspect` reads besides the instance fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InspectOptions {
    /// Most array elements read.
    pub max_elements: usize,
    /// Also the type's static fields.
    pub statics: bool,
}

impl Default for InspectOptions {
    fn default() -> Self {
        InspectOptions {
            max_elements: 20,
            statics: false,
        }
    }
}

/// One object, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectView {
    /// Its address.
    pub address: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// Its type's name.
    pub type_name: String,
    /// Its size in bytes (unaligned, at least 24).
    pub size: u64,
    /// Its generation; `None` for an address in no GC segment (the object is then shown
    /// as its MethodTable describes it, unchecked).
    pub generation: Option<ObjectGeneration>,
    /// Its header.
    pub header: Header,
    /// The sync block of a header that names one.
    pub sync_block: Option<SyncBlockInfo>,
    /// The thread that holds its lock (thin or in the sync block): `(Thread*, managed id,
    /// OS id)`.
    pub lock_owner: Option<(u64, u32, u64)>,
    /// The module that defines its type (a path or a label).
    pub module: String,
    /// Its instance fields, base types' first.
    pub fields: Vec<FieldView>,
    /// A string's text.
    pub string: Option<String>,
    /// An array's shape and first elements.
    pub array: Option<ArrayView>,
    /// The type's static fields (with [`InspectOptions::statics`]).
    pub statics: Vec<FieldView>,
    /// What could not be read, each saying where and why (fields of a type without
    /// metadata, statics of a runtime whose layout cdac does not know, ...).
    pub notes: Vec<String>,
}

/// One field and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldView {
    /// Its name.
    pub name: String,
    /// Its declared type.
    pub type_name: String,
    /// The type that declares it.
    pub declaring_type: String,
    /// Bytes from the start of the object (including its MethodTable pointer, as SOS
    /// prints it) or of the enclosing struct's data; for statics, into the statics block.
    pub offset: u64,
    /// Where its value is.
    pub address: u64,
    /// Its element type, as the runtime stores it.
    pub element_type: ElementType,
    /// A static field.
    pub is_static: bool,
    /// Its value.
    pub value: Value,
}

/// An array's shape and elements.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayView {
    /// 1 for `T[]`; the rank of `T[,]`...
    pub rank: u32,
    /// Total number of elements.
    pub length: u64,
    /// The lengths of each dimension (multi-dimensional arrays).
    pub dimensions: Vec<u32>,
    /// The element type's MethodTable.
    pub element_method_table: u64,
    /// The element type's name.
    pub element_type: String,
    /// Bytes per element.
    pub component_size: u32,
    /// The first element's address.
    pub data: u64,
    /// The first [`InspectOptions::max_elements`] elements.
    pub elements: Vec<Value>,
}

/// Reads objects of one runtime, caching type names and layouts between them.
pub struct Inspector<'r> {
    rt: &'r Runtime,
    namer: MethodNamer,
    segments: Vec<GcSegment>,
    heaps: Vec<GcHeapData>,
    type_names: HashMap<u64, String>,
    /// Instance and static fields a canonical MethodTable declares.
    layouts: HashMap<u64, std::rc::Rc<TypeFields>>,
}

/// The fields one type declares, FieldDescs matched to their metadata.
#[derive(Debug, Default)]
struct TypeFields {
    fields: Vec<(FieldDesc, FieldMetadata)>,
    /// Why some or all could not be listed.
    problem: Option<String>,
}

impl<'r> Inspector<'r> {
    /// An inspector over `rt`'s heap.
    pub fn new(rt: &'r Runtime) -> Result<Inspector<'r>, ContractError> {
        let gc = rt.contracts().gc()?;
        Ok(Inspector {
            rt,
            namer: MethodNamer::for_runtime(rt),
            segments: gc.segments()?,
            heaps: gc.heaps()?,
            type_names: HashMap::new(),
            layouts: HashMap::new(),
        })
    }

    /// An object's fields (and an array's first `elements` elements), no statics: what the
    /// heap reports (async chains, the thread pool) read of the objects they follow.
    pub fn view(&mut self, address: u64, elements: usize) -> Result<ObjectView, ContractError> {
        self.inspect(
            address,
            InspectOptions {
                max_elements: elements,
                statics: false,
            },
        )
    }

    /// The runtime this inspector reads.
    pub fn runtime(&self) -> &'r Runtime {
        self.rt
    }

    /// The runtime's name of a MethodTable's type (`<MethodTable 0x…>` when it has none).
    pub fn type_name(&mut self, mt: u64) -> String {
        if let Some(n) = self.type_names.get(&mt) {
            return n.clone();
        }
        let name = self
            .namer
            .type_name(mt)
            .unwrap_or_else(|| format!("<MethodTable {mt:#x}>"));
        self.type_names.insert(mt, name.clone());
        name
    }

    /// Whether `mt` is `System.String`'s: the runtime's `StringMethodTable` where it names
    /// it (.NET 9+), else by name (.NET 8).
    fn is_string(&mut self, mt: u64) -> bool {
        let rt = self.rt;
        match rt.descriptor().global_value("StringMethodTable") {
            Ok(global) => rt.target().read_pointer(global).ok() == Some(mt),
            Err(_) => self.type_name(mt) == "System.String",
        }
    }

    /// Reads the object at `address`.
    pub fn inspect(
        &mut self,
        address: u64,
        options: InspectOptions,
    ) -> Result<ObjectView, ContractError> {
        let rt = self.rt;
        let target = rt.target();
        let gc = rt.contracts().gc()?;
        let mut walker = gc.walker(&self.heaps, Vec::new())?;
        let (mt, size, _) = walker.object_at(address)?;
        let generation = locate(&self.segments, &self.heaps, address).map(|(_, g)| g);
        let header = Header::decode(target.read_u32(address.wrapping_sub(4))?);
        let info = method_table_info(target, rt.descriptor(), mt)?;
        let mut view = ObjectView {
            address,
            method_table: mt,
            type_name: self.type_name(mt),
            size,
            generation,
            header,
            sync_block: None,
            lock_owner: None,
            module: self.namer.module_label(info.module),
            fields: Vec::new(),
            string: None,
            array: None,
            statics: Vec::new(),
            notes: Vec::new(),
        };
        match header.state {
            HeaderState::SyncBlock { index } => match self.sync_block(index, address) {
                Ok(mut sb) => {
                    // .NET 11: a contended monitor is a managed Lock; its fields say who
                    // holds it.
                    if let Some(lock) = sb.lock_object {
                        let mt = rt.target().read_pointer(lock).unwrap_or(0) & !7;
                        match self.threading_lock(lock, mt) {
                            Ok(l) => sb.monitor = l.map(|l| l.as_monitor()).unwrap_or_default(),
                            Err(e) => view.notes.push(format!(
                                "sync block {index}'s System.Threading.Lock {lock:#x}: {e}"
                            )),
                        }
                    }
                    view.sync_block = Some(sb);
                    if let Some(holder) = sb.monitor.holder {
                        match self.holder_thread(holder) {
                            Ok(owner) => view.lock_owner = owner,
                            Err(e) => view.notes.push(format!("sync block {index}'s holder: {e}")),
                        }
                    }
                }
                Err(e) => view.notes.push(format!("sync block {index}: {e}")),
            },
            HeaderState::ThinLock { thread_id, .. } => {
                match self.holder_thread(Holder::ThinLockId(thread_id)) {
                    Ok(owner) => view.lock_owner = owner,
                    Err(e) => view
                        .notes
                        .push(format!("thin lock owner (thread id {thread_id}): {e}")),
                }
            }
            _ => {}
        }
        if self.is_string(mt) {
            view.string = Some(values::string_text(rt, address)?);
        } else if info.is_array() {
            view.array = Some(self.array(&info, address, options.max_elements)?);
        } else {
            view.fields = self.instance_fields(&info, address + 8, 0, &mut view.notes)?;
        }
        if options.statics {
            view.statics = self.statics(&info, &mut view.notes)?;
        }
        Ok(view)
    }

    /// The instance fields of a type `mt` laid out at `data` (an object's data after its
    /// MethodTable pointer, or a struct's), base types' first.
    fn instance_fields(
        &mut self,
        mt: &MethodTableInfo,
        data: u64,
        depth: usize,
        notes: &mut Vec<String>,
    ) -> Result<Vec<FieldView>, ContractError> {
        let rt = self.rt;
        let mut chain = Vec::new();
        let mut level = mt.address;
        while level != 0 && chain.len() < MAX_BASE_TYPES {
            let info = method_table_info(rt.target(), rt.descriptor(), level)?;
            level = info.parent;
            chain.push(info);
        }
        chain.reverse();
        let mut out = Vec::new();
        for level in &chain {
            let declaring = self.type_name(level.address);
            let layout = self.layout(level)?;
            if let Some(p) = &layout.problem {
                notes.push(format!("fields of {declaring}: {p}"));
            }
            for (fd, meta) in layout.fields.iter().filter(|(fd, _)| !fd.is_static) {
                if fd.is_added_by_edit_and_continue() {
                    continue;
                }
                let address = data + u64::from(fd.offset);
                let value = self.value_of(level, fd.element_type, meta, address, depth, notes)?;
                out.push(FieldView {
                    name: meta.name.clone(),
                    type_name: meta.type_name.clone(),
                    declaring_type: declaring.clone(),
                    offset: u64::from(fd.offset) + if depth == 0 { 8 } else { 0 },
                    address,
                    element_type: fd.element_type,
                    is_static: false,
                    value,
                });
            }
        }
        Ok(out)
    }

    /// The value at `address` of a field of element type `et` declared by `owner`.
    fn value_of(
        &mut self,
        owner: &MethodTableInfo,
        et: ElementType,
        meta: &FieldMetadata,
        address: u64,
        depth: usize,
        notes: &mut Vec<String>,
    ) -> Result<Value, ContractError> {
        if et != ElementType::ValueType {
            return Ok(self.scalar(et, address));
        }
        if let Some(handle) = meta.type_argument {
            // A field typed by one of its type's generic parameters: the instantiation
            // names the struct (a boxed async state machine's `StateMachine`).
            return self.struct_value(handle, address, depth, notes);
        }
        let Some(token) = meta.value_type_token else {
            return Ok(Value::NotExpanded {
                reason: "a generic struct".into(),
            });
        };
        let struct_mt = match self.resolve_value_type(owner.module, token) {
            Ok(Some(m)) => m,
            Ok(None) => {
                return Ok(Value::NotExpanded {
                    reason: format!("its type (token {token:#010x}) is not loaded"),
                })
            }
            Err(e) => return Ok(Value::Unreadable(e.to_string())),
        };
        self.struct_value(struct_mt, address, depth, notes)
    }

    /// A struct of type `struct_mt` stored at `address`, its fields expanded.
    fn struct_value(
        &mut self,
        struct_mt: u64,
        address: u64,
        depth: usize,
        notes: &mut Vec<String>,
    ) -> Result<Value, ContractError> {
        if depth >= MAX_STRUCT_DEPTH {
            return Ok(Value::NotExpanded {
                reason: format!("nested more than {MAX_STRUCT_DEPTH} deep"),
            });
        }
        let info = method_table_info(self.rt.target(), self.rt.descriptor(), struct_mt)?;
        // A struct's own fields only: its base types (ValueType, Object) have none.
        let fields = self.instance_fields(&info, address, depth + 1, notes)?;
        Ok(Value::Struct {
            method_table: struct_mt,
            type_name: self.type_name(struct_mt),
            fields,
        })
    }

    /// A primitive, pointer or reference value.
    fn scalar(&mut self, et: ElementType, address: u64) -> Value {
        match values::read_scalar(self.rt.target(), et, address) {
            Ok(Value::Reference { address: obj, .. }) if obj != 0 => self.reference(obj),
            Ok(v) => v,
            Err(e) => Value::Unreadable(e.to_string()),
        }
    }

    /// A reference to `obj`, with its type and, for a string, its text.
    fn reference(&mut self, obj: u64) -> Value {
        let rt = self.rt;
        let mt = match rt.target().read_pointer(obj) {
            Ok(v) => v & !7,
            Err(e) => return Value::Unreadable(format!("object {obj:#x}: {e}")),
        };
        let text = if self.is_string(mt) {
            values::string_text(rt, obj).ok()
        } else {
            None
        };
        Value::Reference {
            address: obj,
            type_name: Some(self.type_name(mt)),
            text,
        }
    }

    /// The MethodTable a struct type token of `module` stands for, when the runtime has
    /// loaded it (a TypeDef of the module, or a TypeRef it has resolved).
    fn resolve_value_type(&self, module: u64, token: u32) -> Result<Option<u64>, ContractError> {
        let f = Fields::new(self.rt.target(), self.rt.descriptor());
        let map = match token >> 24 {
            0x02 => "TypeDefToMethodTableMap",
            0x01 => "TypeRefToMethodTableMap",
            _ => return Ok(None),
        };
        let at = module.wrapping_add(f.off("Module", map)?);
        let mt = lookup_map_entry(&f, at, token & 0x00FF_FFFF)?;
        Ok((mt != 0).then_some(mt))
    }

    /// The fields a type declares, matched FieldDesc to metadata, cached per canonical
    /// MethodTable.
    fn layout(&mut self, mt: &MethodTableInfo) -> Result<std::rc::Rc<TypeFields>, ContractError> {
        if let Some(l) = self.layouts.get(&mt.address) {
            return Ok(l.clone());
        }
        let rt = self.rt;
        let (target, descriptor) = (rt.target(), rt.descriptor());
        let mut layout = TypeFields::default();
        match self.namer.declared_fields(mt.address) {
            Ok(meta) => {
                let parent_canonical = if mt.parent == 0 {
                    0
                } else {
                    method_table_info(target, descriptor, mt.parent)?.canonical
                };
                let count = match field_desc::declared_field_count(
                    target,
                    descriptor,
                    mt.canonical,
                    parent_canonical,
                )? {
                    Some(n) => n,
                    None => meta.iter().filter(|m| !m.is_literal).count() as u64,
                };
                let descs =
                    field_desc::declared_field_descs(target, descriptor, mt.canonical, count)?;
                if (descs.len() as u64) < count {
                    layout.problem = Some(format!(
                        "{} of {count} FieldDescs belong to the type",
                        descs.len()
                    ));
                }
                let by_token: HashMap<u32, &FieldMetadata> =
                    meta.iter().map(|m| (m.token, m)).collect();
                for fd in descs {
                    match by_token.get(&fd.token) {
                        Some(m) => layout.fields.push((fd, (*m).clone())),
                        None => {
                            layout.problem = Some(format!(
                            "FieldDesc {:#x} names field {:#010x}, which the type does not declare",
                            fd.address, fd.token
                        ))
                        }
                    }
                }
            }
            // A runtime-async continuation's type (or another the runtime made) has no
            // TypeDef: its own data is the suspended method's, which nothing describes.
            Err(_) if mt.token & 0x00FF_FFFF == 0 => {
                layout.problem = Some(
                    "a type the runtime made (no TypeDef): its own fields are not described".into(),
                )
            }
            Err(e) => layout.problem = Some(format!("no metadata: {e}")),
        }
        let layout = std::rc::Rc::new(layout);
        self.layouts.insert(mt.address, layout.clone());
        Ok(layout)
    }

    /// An array's shape and its first `max` elements.
    fn array(
        &mut self,
        mt: &MethodTableInfo,
        address: u64,
        max: usize,
    ) -> Result<ArrayView, ContractError> {
        let rt = self.rt;
        let target = rt.target();
        let f = Fields::new(target, rt.descriptor());
        let base_size = u64::from(f.u32(mt.address, "MethodTable", "BaseSize")?);
        let component_size = mt.flags & 0xFFFF;
        let length = u64::from(target.read_u32(address + 8)?);
        // The array's data follows its bounds: base size minus the header word before it.
        let data = address + base_size.saturating_sub(8);
        let rank = if mt.is_sz_array() {
            1
        } else {
            (base_size.saturating_sub(24) / 8).clamp(1, 32) as u32
        };
        let mut dimensions = Vec::new();
        if !mt.is_sz_array() {
            for i in 0..u64::from(rank) {
                dimensions.push(target.read_u32(address + 16 + i * 4)?);
            }
        }
        let element_mt = mt.per_inst_info;
        let element_type = self.type_name(element_mt);
        let et = values::element_type_of(rt, element_mt)?;
        let mut elements = Vec::new();
        let mut notes = Vec::new();
        for i in 0..length.min(max as u64) {
            let at = data + i * u64::from(component_size);
            let v = if et == ElementType::ValueType {
                self.struct_value(element_mt, at, 0, &mut notes)?
            } else {
                self.scalar(et, at)
            };
            elements.push(v);
        }
        Ok(ArrayView {
            rank,
            length,
            dimensions,
            element_method_table: element_mt,
            element_type,
            component_size,
            data,
            elements,
        })
    }

    /// The static fields of a type (not thread statics).
    fn statics(
        &mut self,
        mt: &MethodTableInfo,
        notes: &mut Vec<String>,
    ) -> Result<Vec<FieldView>, ContractError> {
        let layout = self.layout(mt)?;
        let declaring = self.type_name(mt.address);
        let statics: Vec<_> = layout
            .fields
            .iter()
            .filter(|(fd, _)| fd.is_static)
            .cloned()
            .collect();
        if statics.is_empty() {
            return Ok(Vec::new());
        }
        let bases = match values::statics_bases(self.rt, mt.address) {
            Ok(b) => b,
            Err(e) => {
                notes.push(format!("statics of {declaring}: {e}"));
                return Ok(Vec::new());
            }
        };
        let mut out = Vec::new();
        for (fd, meta) in statics {
            if fd.is_thread_static || fd.is_rva {
                notes.push(format!(
                    "static {}: {} statics are not read yet",
                    meta.name,
                    if fd.is_rva { "RVA" } else { "thread" }
                ));
                continue;
            }
            let base = if fd.element_type == ElementType::Class
                || fd.element_type == ElementType::ValueType
            {
                bases.gc
            } else {
                bases.non_gc
            };
            if base == 0 {
                notes.push(format!(
                    "static {}: its statics are not allocated",
                    meta.name
                ));
                continue;
            }
            let address = base + u64::from(fd.offset);
            let value = if fd.element_type == ElementType::ValueType {
                // A struct static is boxed: the slot holds the box.
                match self.rt.target().read_pointer(address) {
                    Ok(0) => Value::Reference {
                        address: 0,
                        type_name: None,
                        text: None,
                    },
                    Ok(boxed) => self.reference(boxed),
                    Err(e) => Value::Unreadable(e.to_string()),
                }
            } else {
                self.scalar(fd.element_type, address)
            };
            out.push(FieldView {
                name: meta.name.clone(),
                type_name: meta.type_name.clone(),
                declaring_type: declaring.clone(),
                offset: u64::from(fd.offset),
                address,
                element_type: fd.element_type,
                is_static: true,
                value,
            });
        }
        Ok(out)
    }

    /// The static field of a loaded, non-generic type whose storage is at `slot` (a
    /// reference static, as a path from a root passes through it): `Type.Field`. Looks at
    /// every type in every module's TypeDef map, so it is for one question, not a loop.
    /// `None` where statics are not read (.NET 8) or no type's statics hold that slot.
    pub fn static_at(&mut self, slot: u64) -> Option<String> {
        let rt = self.rt;
        let (target, descriptor) = (rt.target(), rt.descriptor());
        let f = Fields::new(target, descriptor);
        if !f.has("DynamicStaticsInfo", "GCStatics") {
            return None;
        }
        let map_offset = f.off("Module", "TypeDefToMethodTableMap").ok()?;
        let modules = crate::contracts::loader::modules(target, descriptor).ok()?;
        for m in &modules {
            let Ok(Some(blob)) = crate::contracts::loader::module_metadata(target, descriptor, m)
            else {
                continue;
            };
            let Ok(md) = crate::formats::ecma::Metadata::parse(&blob) else {
                continue;
            };
            let types = md.tables.rows(crate::formats::ecma::TableId::TypeDef);
            for rid in 1..=types {
                let Ok(mt) = lookup_map_entry(&f, m.address.wrapping_add(map_offset), rid) else {
                    break;
                };
                if mt == 0 {
                    continue;
                }
                let Ok(bases) = values::statics_bases(rt, mt) else {
                    continue;
                };
                // A type's reference statics sit together after its GC statics base.
                if bases.gc == 0 || slot < bases.gc || slot - bases.gc >= 1 << 16 {
                    continue;
                }
                let Ok(info) = method_table_info(target, descriptor, mt) else {
                    continue;
                };
                let Ok(layout) = self.layout(&info) else {
                    continue;
                };
                let hit = layout.fields.iter().find(|(fd, _)| {
                    fd.is_static
                        && !fd.is_thread_static
                        && matches!(fd.element_type, ElementType::Class | ElementType::ValueType)
                        && bases.gc + u64::from(fd.offset) == slot
                });
                if let Some((_, meta)) = hit {
                    let name = meta.name.clone();
                    return Some(format!("{}.{name}", self.type_name(mt)));
                }
            }
        }
        None
    }

    /// The sync block at `index` of the sync table, checked to belong to `object`.
    fn sync_block(&self, index: u32, object: u64) -> Result<SyncBlockInfo, ContractError> {
        self.rt.contracts().sync_blocks()?.of_object(index, object)
    }

    /// The thread holding a lock: a sync block's holder, or a thin lock's owner
    /// (`Holder::ThinLockId`).
    fn holder_thread(&self, holder: Holder) -> Result<Option<(u64, u32, u64)>, ContractError> {
        let rt = self.rt;
        let threads = rt.contracts().threads()?.threads()?;
        Ok(holder
            .find(&threads.threads)
            .map(|t| (t.address, t.managed_id, t.os_id)))
    }
}
