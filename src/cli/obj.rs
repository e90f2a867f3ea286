//! `cdac obj ADDR` (like SOS `dumpobj`): one object's type, size, generation, header,
//! every field with its value, an array's elements, a string's text, `--statics`.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::{nonzero, Addr};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::inspect::{
    ArrayView, FieldView, Header, HeaderState, InspectOptions, Inspector, ObjectView, Value,
};

/// Arguments of `cdac obj`.
#[derive(Debug, Args)]
pub struct ObjArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The object's address (of its MethodTable pointer, as `heap --objects` lists it).
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Most array elements shown.
    #[arg(long, value_name = "N", default_value_t = 20)]
    max_elements: usize,
    /// Also the type's static fields.
    #[arg(long)]
    statics: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac obj --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjReport {
    /// The object.
    pub address: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its type.
    pub type_name: String,
    /// Its size in bytes (unaligned).
    pub size: u64,
    /// gen0, gen1, gen2, loh, poh or frozen; absent for an address in no GC segment.
    pub generation: Option<String>,
    /// Its header word, decoded.
    pub header: HeaderReport,
    /// The module that defines its type.
    pub module: String,
    /// Instance fields, base types' first (empty for strings and arrays).
    pub fields: Vec<FieldReport>,
    /// A string's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// An array's shape and first elements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayReport>,
    /// Static fields (`--statics`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statics: Vec<FieldReport>,
    /// What could not be read.
    pub notes: Vec<String>,
}

/// An object header.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HeaderReport {
    /// The 32-bit word before the MethodTable pointer.
    pub raw: u32,
    /// `empty`, `thin_lock`, `hash_code` or `sync_block`.
    pub kind: String,
    /// A thin lock's owner: its thin-lock thread id (`Thread.Id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u32>,
    /// The lock's recursion, thin or in the sync block: times taken beyond the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recursion: Option<u32>,
    /// The lock owner's `Thread` (the runtime's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_thread: Option<Addr>,
    /// The lock owner's managed thread id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_managed_id: Option<u32>,
    /// The lock owner's OS thread id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_os_id: Option<u64>,
    /// The hash code (in the header, or kept by the sync block; absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<u32>,
    /// The sync block's index in the sync table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_block_index: Option<u32>,
    /// The sync block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_block: Option<Addr>,
    /// The sync block's monitor is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,
    /// Threads waiting to enter the sync block's monitor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiters: Option<u32>,
    /// The finalizer has run.
    pub finalizer_run: bool,
}

/// One field.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FieldReport {
    /// Its name.
    pub name: String,
    /// Its declared type.
    pub type_name: String,
    /// The type that declares it.
    pub declaring_type: String,
    /// Bytes from the object's start (its MethodTable pointer) or the struct's data;
    /// statics: into the statics block.
    pub offset: u64,
    /// Where the value is.
    pub address: Addr,
    /// The element type the runtime stores for it (`i4`, `class`, `value_type`, ...).
    pub element_type: String,
    /// Static.
    #[serde(rename = "static")]
    pub is_static: bool,
    /// Its value.
    pub value: ValueReport,
}

/// A value.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ValueReport {
    /// A signed integer.
    Int {
        /// The value.
        value: i64,
    },
    /// An unsigned integer.
    UInt {
        /// The value.
        value: u64,
    },
    /// A `float` or `double`.
    Float {
        /// The value.
        value: f64,
    },
    /// A `bool`.
    Bool {
        /// The value.
        value: bool,
    },
    /// A `char`.
    Char {
        /// The UTF-16 unit.
        value: u16,
        /// As text.
        text: String,
    },
    /// An unmanaged pointer.
    Pointer {
        /// The address.
        value: Addr,
    },
    /// An object reference.
    Reference {
        /// The object (absent: null).
        address: Option<Addr>,
        /// Its type.
        #[serde(skip_serializing_if = "Option::is_none")]
        type_name: Option<String>,
        /// A string's text.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// A struct stored inline.
    Struct {
        /// Its MethodTable.
        method_table: Addr,
        /// Its type.
        type_name: String,
        /// Its fields.
        fields: Vec<FieldReport>,
    },
    /// A struct not expanded.
    NotExpanded {
        /// Why.
        reason: String,
    },
    /// Unreadable.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// An array.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ArrayReport {
    /// Its rank.
    pub rank: u32,
    /// Its number of elements.
    pub length: u64,
    /// Each dimension's length (multi-dimensional arrays).
    pub dimensions: Vec<u32>,
    /// The element type's MethodTable.
    pub element_method_table: Addr,
    /// The element type.
    pub element_type: String,
    /// Bytes per element.
    pub component_size: u32,
    /// The first element's address.
    pub data: Addr,
    /// The first `--max-elements` elements.
    pub elements: Vec<ValueReport>,
}

/// Runs `cdac obj`.
pub fn run_obj(args: &ObjArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    if let Some(why) = not_an_object(&rt, args.address) {
        return Err(why.into());
    }
    let mut inspector = Inspector::new(&rt)?;
    let view = inspector.inspect(
        args.address,
        InspectOptions {
            max_elements: args.max_elements,
            statics: args.statics,
        },
    )?;
    let report = report(&view);
    if args.json {
        super::emit_json(&report)?;
        return Ok(Outcome::Answered);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    print(&mut out, &report)?;
    out.flush()?;
    Ok(Outcome::Answered)
}

fn report(v: &ObjectView) -> ObjReport {
    ObjReport {
        address: Addr(v.address),
        method_table: Addr(v.method_table),
        type_name: v.type_name.clone(),
        size: v.size,
        generation: v.generation.map(|g| g.name().to_string()),
        header: header_report(&v.header, v),
        module: v.module.clone(),
        fields: v.fields.iter().map(field_report).collect(),
        string: v.string.clone(),
        array: v.array.as_ref().map(array_report),
        statics: v.statics.iter().map(field_report).collect(),
        notes: v.notes.clone(),
    }
}

fn header_report(h: &Header, v: &ObjectView) -> HeaderReport {
    let mut r = HeaderReport {
        raw: h.raw,
        kind: String::new(),
        thread_id: None,
        recursion: None,
        owner_thread: None,
        owner_managed_id: None,
        owner_os_id: None,
        hash: None,
        sync_block_index: None,
        sync_block: None,
        locked: None,
        waiters: None,
        finalizer_run: h.finalizer_run,
    };
    r.kind = match h.state {
        HeaderState::Empty => "empty",
        HeaderState::ThinLock {
            thread_id,
            recursion,
        } => {
            r.thread_id = Some(thread_id);
            r.recursion = Some(recursion);
            r.owner_thread = v.lock_owner.and_then(|o| nonzero(o.0));
            r.owner_managed_id = v.lock_owner.map(|o| o.1);
            r.owner_os_id = v.lock_owner.map(|o| o.2);
            "thin_lock"
        }
        HeaderState::HashCode { hash } => {
            r.hash = Some(hash);
            "hash_code"
        }
        HeaderState::SyncBlock { index } => {
            r.sync_block_index = Some(index);
            if let Some(sb) = &v.sync_block {
                r.sync_block = nonzero(sb.address);
                let m = sb.monitor;
                r.locked = Some(m.locked);
                r.waiters = Some(m.waiters);
                if m.locked {
                    r.recursion = Some(m.recursion.saturating_sub(1));
                    r.owner_thread = v.lock_owner.and_then(|o| nonzero(o.0));
                    r.owner_managed_id = v.lock_owner.map(|o| o.1);
                    r.owner_os_id = m.holder_os_id.or(v.lock_owner.map(|o| o.2));
                }
                r.hash = (sb.hash_code != 0).then_some(sb.hash_code);
            }
            "sync_block"
        }
    }
    .to_string();
    r
}

fn field_report(f: &FieldView) -> FieldReport {
    FieldReport {
        name: f.name.clone(),
        type_name: f.type_name.clone(),
        declaring_type: f.declaring_type.clone(),
        offset: f.offset,
        address: Addr(f.address),
        element_type: element_type_name(f.element_type),
        is_static: f.is_static,
        value: value_report(&f.value),
    }
}

fn element_type_name(et: cdac::contracts::field_desc::ElementType) -> String {
    match serde_json::to_value(et) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{et:?}").to_lowercase(),
    }
}

fn value_report(v: &Value) -> ValueReport {
    match v {
        Value::Int(value) => ValueReport::Int { value: *value },
        Value::UInt(value) => ValueReport::UInt { value: *value },
        Value::Float(value) => ValueReport::Float { value: *value },
        Value::Bool(value) => ValueReport::Bool { value: *value },
        Value::Char(value) => ValueReport::Char {
            value: *value,
            text: String::from_utf16_lossy(&[*value]),
        },
        Value::Pointer(p) => ValueReport::Pointer { value: Addr(*p) },
        Value::Reference {
            address,
            type_name,
            text,
        } => ValueReport::Reference {
            address: nonzero(*address),
            type_name: type_name.clone(),
            text: text.clone(),
        },
        Value::Struct {
            method_table,
            type_name,
            fields,
        } => ValueReport::Struct {
            method_table: Addr(*method_table),
            type_name: type_name.clone(),
            fields: fields.iter().map(field_report).collect(),
        },
        Value::NotExpanded { reason } => ValueReport::NotExpanded {
            reason: reason.clone(),
        },
        Value::Unreadable(reason) => ValueReport::Unreadable {
            reason: reason.clone(),
        },
    }
}

fn array_report(a: &ArrayView) -> ArrayReport {
    ArrayReport {
        rank: a.rank,
        length: a.length,
        dimensions: a.dimensions.clone(),
        element_method_table: Addr(a.element_method_table),
        element_type: a.element_type.clone(),
        component_size: a.component_size,
        data: Addr(a.data),
        elements: a.elements.iter().map(value_report).collect(),
    }
}

/// A value on one line (structs as `{X = 7, Y = -9}`).
fn value_text(v: &ValueReport) -> String {
    match v {
        ValueReport::Int { value } => value.to_string(),
        ValueReport::UInt { value } => value.to_string(),
        ValueReport::Float { value } => value.to_string(),
        ValueReport::Bool { value } => value.to_string(),
        ValueReport::Char { value, text } => format!("'{}' ({value:#x})", text.escape_debug()),
        ValueReport::Pointer { value } => hex(value.0),
        ValueReport::Reference { address: None, .. } => "null".into(),
        ValueReport::Reference {
            address: Some(a),
            type_name,
            text,
        } => match text {
            Some(t) => format!("{} \"{}\"", hex(a.0), t.escape_debug()),
            None => format!(
                "{} ({})",
                hex(a.0),
                type_name.as_deref().unwrap_or("unknown type")
            ),
        },
        ValueReport::Struct { fields, .. } => {
            let parts: Vec<String> = fields
                .iter()
                .map(|f| format!("{} = {}", f.name, value_text(&f.value)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        ValueReport::NotExpanded { reason } => format!("(struct not expanded: {reason})"),
        ValueReport::Unreadable { reason } => format!("(unreadable: {reason})"),
    }
}

fn print(out: &mut impl Write, r: &ObjReport) -> std::io::Result<()> {
    writeln!(out, "Object      {}  {}", hex(r.address.0), r.type_name)?;
    writeln!(out, "MethodTable {}", hex(r.method_table.0))?;
    writeln!(
        out,
        "Size        {} bytes, {}",
        r.size,
        r.generation.as_deref().unwrap_or("not in a GC segment")
    )?;
    writeln!(out, "Module      {}", r.module)?;
    let h = &r.header;
    let what = match h.kind.as_str() {
        "thin_lock" => format!(
            "thin lock held by thread id {} (managed id {}, OS id {}), recursion {}",
            h.thread_id.unwrap_or(0),
            h.owner_managed_id.map_or("?".into(), |v| v.to_string()),
            h.owner_os_id.map_or("?".into(), |v| v.to_string()),
            h.recursion.unwrap_or(0)
        ),
        "hash_code" => format!("hash code {}", h.hash.unwrap_or(0)),
        "sync_block" => {
            let mut text = format!(
                "sync block {} ({})",
                h.sync_block_index.unwrap_or(0),
                h.sync_block.map_or("not read".into(), |a| hex(a.0))
            );
            if h.locked == Some(true) {
                text += &format!(
                    ": held by managed id {} (OS id {}), recursion {}, {} waiting",
                    h.owner_managed_id.map_or("?".into(), |v| v.to_string()),
                    h.owner_os_id.map_or("?".into(), |v| v.to_string()),
                    h.recursion.unwrap_or(0),
                    h.waiters.unwrap_or(0)
                );
            } else if h.locked == Some(false) {
                text += ": not locked";
            }
            if let Some(hash) = h.hash {
                text += &format!(", hash code {hash}");
            }
            text
        }
        _ => "empty".into(),
    };
    writeln!(
        out,
        "Header      {:#010x}: {what}{}",
        h.raw,
        if h.finalizer_run {
            ", finalizer run"
        } else {
            ""
        }
    )?;
    if let Some(s) = &r.string {
        writeln!(out, "String      \"{}\"", s.escape_debug())?;
    }
    if let Some(a) = &r.array {
        let dims = if a.dimensions.is_empty() {
            String::new()
        } else {
            let d: Vec<String> = a.dimensions.iter().map(u32::to_string).collect();
            format!(" [{}]", d.join(" x "))
        };
        writeln!(
            out,
            "Array       rank {}, {} element(s){dims} of {} ({} bytes each) at {}",
            a.rank,
            a.length,
            a.element_type,
            a.component_size,
            hex(a.data.0)
        )?;
        for (i, e) in a.elements.iter().enumerate() {
            writeln!(out, "  [{i}] {}", value_text(e))?;
        }
        if (a.elements.len() as u64) < a.length {
            writeln!(
                out,
                "  ... {} more (--max-elements)",
                a.length - a.elements.len() as u64
            )?;
        }
    }
    for (title, list) in [("Fields", &r.fields), ("Statics", &r.statics)] {
        if list.is_empty() {
            continue;
        }
        writeln!(out, "{title}:")?;
        writeln!(
            out,
            "  {:>6}  {:<40} {:<24} value",
            "offset", "type", "name"
        )?;
        for f in list {
            print_field(out, f, 1)?;
        }
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

fn print_field(out: &mut impl Write, f: &FieldReport, depth: usize) -> std::io::Result<()> {
    let indent = "  ".repeat(depth);
    let name = format!("{indent}{}", f.name);
    match &f.value {
        ValueReport::Struct { fields, .. } => {
            writeln!(out, "  {:>#6x}  {:<40} {:<24}", f.offset, f.type_name, name)?;
            for inner in fields {
                print_field(out, inner, depth + 1)?;
            }
            Ok(())
        }
        v => writeln!(
            out,
            "  {:>#6x}  {:<40} {:<24} {}",
            f.offset,
            f.type_name,
            name,
            value_text(v)
        ),
    }
}

/// Why `address` is not an object, saying which object it lies in when it does (like SOS's
/// gcwhere); `None` for an object's start, and when the heap cannot be walked to tell.
pub(crate) fn not_an_object(rt: &cdac::runtime::Runtime, address: u64) -> Option<String> {
    use cdac::heap::Location;
    let location = match cdac::heap::locate(rt, address) {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!("{address:#x} not located on the heap: {e}");
            return None;
        }
    };
    let name = |mt: u64| {
        cdac::names::MethodNamer::for_runtime(rt)
            .type_name(mt)
            .unwrap_or_else(|| format!("<MethodTable {mt:#x}>"))
    };
    let why = match location {
        Location::Object { .. } => return None,
        Location::Inside {
            object,
            method_table,
            size,
        } => format!(
            "it lies {} bytes into {} at {object:#x} ({size} bytes): `cdac obj {object:#x}`",
            address - object,
            name(method_table)
        ),
        Location::Free { block } => {
            format!("it lies in free space (the free block at {block:#x})")
        }
        Location::Unallocated => {
            "it lies in a GC segment but in no object (space not allocated yet, or damage \
             the heap walk skipped)"
                .to_string()
        }
        Location::OutsideHeap => "it is not in the GC heap".to_string(),
    };
    // An address taken from an earlier answer about a running process may have held an
    // object then: compacting collections move objects.
    let live = matches!(
        rt.target().source().kind(),
        cdac::memory::TargetKind::Live { .. }
    );
    let moved = if live && !matches!(location, Location::OutsideHeap) {
        "; if it held an object when the address was taken, a garbage collection has moved \
         that object since (collections compact the heap of a running process): find it \
         again with `cdac heap --objects`"
    } else {
        ""
    };
    Some(format!("{address:#x} is not an object: {why}{moved}"))
}
