//! Method names exactly as the .NET runtime writes them in its perf map
//! (`/tmp/perf-PID.map`), without the optimization-tier suffix.
//!
//! [`MethodNamer`] reads a MethodDesc (RuntimeTypeSystem), finds its module's metadata
//! (Loader; cached per module) and formats the name with the ECMA-335 reader
//! (`formats::ecma`, whose README describes the runtime's rules):
//!
//! * methods with a MethodDef: `[instance ]RET [Assembly] Ns.Type[Inst]::Name(PARAMS)`, the
//!   declaring type's instantiation read from its MethodTable's generic dictionary;
//! * dynamic methods (LCG and IL stubs): `RET [Assembly] dynamicClass::NAME(PARAMS)`, the
//!   name and signature stored in the DynamicMethodDesc, the assembly being the module's
//!   (LCG methods live in the runtime's anonymous dynamic module, whose assembly is
//!   `Anonymously Hosted DynamicMethods Assembly`).
//!
//! A method whose metadata cannot be read or is damaged is named
//! `[module] <token 0x06000123>` (with a warning); an unreadable MethodDesc
//! `<MethodDesc 0x…>`. Naming never fails and never panics.
//!
//! Methods of Reflection.Emit modules are named from the copy of the module's metadata the
//! runtime saves whenever a type is created (Loader [`loader::dynamic_metadata`]); a method
//! of a type not created yet has no saved row and gets the fallback.
//!
//! Not named from metadata yet (they get the fallback): array methods
//! (`Get`/`Set`/`Address`), and type arguments that are TypeDescs (pointers, generic
//! variables) or multi-dimensional arrays.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use crate::contracts::fields::Fields;
use crate::contracts::gc::GcDesc;
use crate::contracts::loader::{self, ModuleInfo};
use crate::contracts::runtime_type_system::{
    method_desc_info, method_table_info, type_instantiation, MethodClassification, MethodDescInfo,
    MethodTableInfo, TYPE_HANDLE_TYPE_DESC,
};
use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::formats::ecma::signature::decode_method_sig_with;
use crate::formats::ecma::{
    format_perf_map_name, CompilerNames, GenericParam, IlFormatter, Metadata, PerfMapNameOptions,
    SigOptions, TableId, Token, TypeSig,
};
use crate::memory::Target;

/// The assembly the runtime creates for DynamicMethods without an owner (LCG).
pub const ANONYMOUS_DYNAMIC_ASSEMBLY: &str = "Anonymously Hosted DynamicMethods Assembly";
/// How many times naming loads more modules' metadata before giving up.
const MAX_ROUNDS: usize = 6;
/// Deepest generic nesting named.
const MAX_TYPE_DEPTH: usize = 32;

/// Why one name could not be built.
enum NameError {
    /// The metadata of this module is needed and not loaded yet.
    NeedModule(u64),
    /// Anything else; the fallback name is used.
    Fail(String),
}

impl From<ContractError> for NameError {
    fn from(e: ContractError) -> Self {
        NameError::Fail(e.to_string())
    }
}

impl From<crate::formats::ecma::MetadataError> for NameError {
    fn from(e: crate::formats::ecma::MetadataError) -> Self {
        NameError::Fail(e.to_string())
    }
}

/// Names MethodDescs as the runtime's perf map does, caching each module's metadata.
pub struct MethodNamer {
    target: Target,
    descriptor: DataDescriptor,
    modules: HashMap<u64, ModuleInfo>,
    /// Metadata blobs by `Module*`; `None`: none could be read.
    blobs: HashMap<u64, Option<Vec<u8>>>,
    /// Reproduce early .NET 8's one-byte truncation of some names.
    net8_truncation: bool,
    /// A NativeAOT executable's names, and its file name without extension.
    native_aot: Option<(
        std::sync::Arc<crate::nativeaot::MethodNames>,
        String,
        crate::nativeaot::TypeHashStyle,
    )>,
    /// A NativeAOT executable's `.dbg` line tables and its load address, read on first use
    /// (`None` inside: no `.dbg` beside it).
    native_aot_lines: std::sync::OnceLock<Option<(crate::symbols::dwarf_lines::DwarfLines, u64)>>,
    /// The executable, for its `.dbg`.
    native_aot_file: Option<std::path::PathBuf>,
    native_aot_base: u64,
}

fn module_stem(path: &std::path::Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The first .NET 8 servicing build seen printing whole names in its perf map.
const FIRST_UNTRUNCATED_NET8_PATCH: u32 = 29;

/// Whether a runtime of this product version drops the last character of some names in
/// its perf map ([`net8_printf_drops_last_byte`](crate::formats::ecma::names::net8_printf_drops_last_byte)):
/// seen in 8.0.4, not in 8.0.29 and later nor in .NET 9 and 10. The 8.0 builds in between
/// could not be tried (no runtime of them is served here) and are taken to truncate.
pub fn runtime_truncates_names(product_version: Option<&str>) -> bool {
    let Some(patch) = product_version.and_then(|v| v.strip_prefix("8.0.")) else {
        return false;
    };
    let digits: String = patch.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse::<u32>()
        .is_ok_and(|p| p < FIRST_UNTRUNCATED_NET8_PATCH)
}

impl MethodNamer {
    /// A namer over the target's modules (listed once, here). A module list that cannot
    /// be read leaves every method with the fallback name (and a warning).
    pub fn new(target: &Target, descriptor: &DataDescriptor) -> MethodNamer {
        let modules = match loader::modules(target, descriptor) {
            Ok(list) => list.into_iter().map(|m| (m.address, m)).collect(),
            Err(e) => {
                tracing::warn!("cannot list modules, methods will not be named: {e}");
                HashMap::new()
            }
        };
        MethodNamer {
            target: target.clone(),
            descriptor: descriptor.clone(),
            modules,
            blobs: HashMap::new(),
            net8_truncation: false,
            native_aot: None,
            native_aot_lines: std::sync::OnceLock::new(),
            native_aot_file: None,
            native_aot_base: 0,
        }
    }

    /// The file and line of NativeAOT code at `at` (a return address less one, or the
    /// innermost frame's IP), from the DWARF of the executable's `.dbg` file when it is
    /// beside it; `None` without one.
    pub fn native_aot_source(&self, at: u64) -> Option<crate::formats::pdb::SourceLocation> {
        let exe = self.native_aot_file.as_ref()?;
        let base = self.native_aot_base;
        let loaded = self.native_aot_lines.get_or_init(|| {
            let dbg = crate::symbols::dwarf_lines::debug_link(exe)?;
            match crate::symbols::dwarf_lines::DwarfLines::load(&dbg) {
                Ok(lines) => Some((lines, base)),
                Err(e) => {
                    // A .dbg cdac cannot read (zstd sections, say) leaves frames without lines.
                    tracing::debug!("{}: no source lines: {e}", dbg.display());
                    None
                }
            }
        });
        let (lines, base) = loaded.as_ref()?;
        let found = lines.lookup(at.checked_sub(*base)?)?;
        Some(crate::formats::pdb::SourceLocation {
            file: found.file,
            line: found.line,
            column: 0,
        })
    }

    /// The name of a NativeAOT method starting at `start` (as the runtime prints it), or
    /// the runtime's `module!<BaseAddress>+0x…` for code at `ip` its stack-trace data does
    /// not name; `None` for a runtime that is not NativeAOT.
    pub fn native_aot_name(&self, start: u64, ip: u64) -> Option<String> {
        let (names, stem, _) = self.native_aot.as_ref()?;
        Some(match names.method_at(start) {
            // A hidden method without an owner (the compiler's start-up wrapper) has no name.
            Some(m) if !m.name.starts_with('.') => m.name,
            _ => names.unnamed_text(stem, ip),
        })
    }

    /// A namer for a runtime: over its modules, naming methods exactly as that runtime
    /// build's perf map does (early .NET 8 builds truncate some names).
    pub fn for_runtime(rt: &crate::runtime::Runtime) -> MethodNamer {
        if rt.is_native_aot() {
            // No modules or MethodDescs: names come from the executable's stack-trace data.
            let mut namer = MethodNamer::with_modules(rt.target(), rt.descriptor(), Vec::new());
            namer.native_aot = rt
                .native_aot_names()
                .map_err(|e| tracing::debug!("NativeAOT method names: {e}"))
                .ok()
                .map(|n| {
                    (
                        n,
                        module_stem(&rt.module().path),
                        crate::nativeaot::TypeHashStyle::of(rt),
                    )
                });
            namer.native_aot_file = Some(rt.target().local_path(&rt.module().path));
            namer.native_aot_base = rt.module().base;
            return namer;
        }
        let truncates = runtime_truncates_names(rt.version().map(|v| v.product_version.as_str()));
        MethodNamer::new(rt.target(), rt.descriptor()).with_net8_truncation(truncates)
    }

    /// Whether names reproduce early .NET 8's one-byte truncation of some names.
    pub fn with_net8_truncation(mut self, on: bool) -> MethodNamer {
        self.net8_truncation = on;
        self
    }

    /// A namer over a given module list (for tests and callers that already have one).
    pub fn with_modules(
        target: &Target,
        descriptor: &DataDescriptor,
        modules: Vec<ModuleInfo>,
    ) -> MethodNamer {
        MethodNamer {
            target: target.clone(),
            descriptor: descriptor.clone(),
            modules: modules.into_iter().map(|m| (m.address, m)).collect(),
            blobs: HashMap::new(),
            net8_truncation: false,
            native_aot: None,
            native_aot_lines: std::sync::OnceLock::new(),
            native_aot_file: None,
            native_aot_base: 0,
        }
    }

    /// The module at `Module*` `address`, if listed.
    pub fn module(&self, address: u64) -> Option<&ModuleInfo> {
        self.modules.get(&address)
    }

    /// The `Module*` of the method's declaring type, when the MethodDesc is readable.
    pub fn module_of(&self, md: u64) -> Option<u64> {
        method_desc_info(&self.target, &self.descriptor, md)
            .ok()
            .map(|i| i.module)
    }

    /// The file of the method's module (its path in the target) and its MethodDef token,
    /// when the MethodDesc is readable and the module has a path: where a PDB lookup starts.
    pub fn method_def(&self, md: u64) -> Option<(std::path::PathBuf, u32)> {
        let info = method_desc_info(&self.target, &self.descriptor, md).ok()?;
        let path = self.modules.get(&info.module)?.path.clone()?;
        (info.token >> 24 == 0x06).then_some((path, info.token))
    }

    /// The short name of a module for output: its file name without `.dll`, or its
    /// address.
    pub fn module_label(&self, address: u64) -> String {
        match self
            .modules
            .get(&address)
            .and_then(|m| m.file_name.as_deref())
        {
            Some(f) => f.strip_suffix(".dll").unwrap_or(f).to_string(),
            None if self.modules.get(&address).is_some_and(|m| m.is_dynamic) => {
                format!("dynamic module {address:#x}")
            }
            None => format!("module {address:#x}"),
        }
    }

    /// The target it names methods of.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The perf-map name of one method.
    pub fn name(&mut self, md: u64) -> String {
        self.names(&[md]).pop().unwrap_or_default()
    }

    /// The perf-map names of many methods, in order (faster than one by one: each
    /// module's metadata is parsed once per call, and each MethodDesc named once).
    pub fn names(&mut self, mds: &[u64]) -> Vec<String> {
        let mut unique: Vec<u64> = mds.to_vec();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() == mds.len() {
            return self.names_of_distinct(mds);
        }
        let named: HashMap<u64, String> = unique
            .iter()
            .copied()
            .zip(self.names_of_distinct(&unique))
            .collect();
        mds.iter().map(|md| named[md].clone()).collect()
    }

    fn names_of_distinct(&mut self, mds: &[u64]) -> Vec<String> {
        let mut out: Vec<Option<String>> = vec![None; mds.len()];
        let infos: Vec<Result<MethodDescInfo, String>> = mds
            .iter()
            .map(|&md| {
                method_desc_info(&self.target, &self.descriptor, md).map_err(|e| e.to_string())
            })
            .collect();
        let mut pending: Vec<usize> = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            match info {
                Ok(info) => {
                    self.ensure_loaded(info.module);
                    pending.push(i);
                }
                Err(e) => {
                    tracing::warn!("MethodDesc {:#x}: {e}", mds[i]);
                    out[i] = Some(format!("<MethodDesc {:#x}>", mds[i]));
                }
            }
        }
        let mut failures: Vec<(usize, String)> = Vec::new();
        let mut asked: BTreeSet<u64> = BTreeSet::new();
        for round in 0..MAX_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let mut need = BTreeSet::new();
            let mut still = Vec::new();
            {
                // Only the metadata this round can use: the pending methods' modules and
                // those earlier rounds asked for (their type arguments' modules).
                let mut wanted: BTreeSet<u64> = asked.clone();
                let mut dynamic = false;
                for &i in &pending {
                    if let Ok(info) = &infos[i] {
                        wanted.insert(info.module);
                        dynamic |= info.classification == MethodClassification::Dynamic;
                    }
                }
                let ctx = Ctx::new(self, &wanted, dynamic);
                for &i in &pending {
                    let Ok(info) = &infos[i] else { continue };
                    match ctx.method_name(info) {
                        Ok(name) => out[i] = Some(name),
                        Err(NameError::NeedModule(m)) if round + 1 < MAX_ROUNDS => {
                            need.insert(m);
                            still.push(i);
                        }
                        Err(NameError::NeedModule(m)) => {
                            failures.push((i, format!("metadata of module {m:#x} not loaded")))
                        }
                        Err(NameError::Fail(e)) => failures.push((i, e)),
                    }
                }
            }
            for m in need {
                self.ensure_loaded(m);
                asked.insert(m);
            }
            pending = still;
        }
        // One warning per module and reason (a module without readable metadata would
        // otherwise warn once per method), the methods themselves at debug level.
        let mut by_module: HashMap<(u64, String), (usize, u64)> = HashMap::new();
        for (i, e) in failures {
            let Ok(info) = &infos[i] else { continue };
            tracing::debug!(
                "MethodDesc {:#x} (token {:#010x}): not named from metadata: {e}",
                info.address,
                info.token
            );
            by_module
                .entry((info.module, e))
                .or_insert((0, info.address))
                .0 += 1;
            out[i] = Some(self.fallback(info));
        }
        let mut warnings: Vec<_> = by_module.into_iter().collect();
        warnings.sort();
        for ((module, e), (count, example)) in warnings {
            tracing::warn!(
                "{count} method(s) of {} named `[module] <token …>` (e.g. MethodDesc {example:#x}): {e}",
                self.module_label(module)
            );
        }
        out.into_iter()
            .zip(mds)
            .map(|(n, md)| n.unwrap_or_else(|| format!("<MethodDesc {md:#x}>")))
            .collect()
    }

    /// The runtime's name of the type a MethodTable stands for (`System.ArgumentException`,
    /// `System.Collections.Generic.List`1[System.Int32]`), or `None` when it cannot be
    /// named (a warning says why at debug level).
    pub fn type_name(&mut self, method_table: u64) -> Option<String> {
        if let Some((names, _, style)) = &self.native_aot {
            // Callers name each MethodTable once (the heap caches them): the layout is
            // resolved per call.
            let layout =
                crate::records::native_aot::AotMethodTableLayout::from_descriptor(&self.descriptor)
                    .ok()?;
            return crate::nativeaot::type_name(&self.target, &layout, names, *style, method_table);
        }
        let mut asked: BTreeSet<u64> = BTreeSet::new();
        match method_table_info(&self.target, &self.descriptor, method_table) {
            Ok(mt) => {
                self.ensure_loaded(mt.module);
                asked.insert(mt.module);
            }
            Err(e) => {
                tracing::debug!("MethodTable {method_table:#x}: {e}");
                return None;
            }
        }
        for _ in 0..MAX_ROUNDS {
            let result = {
                let ctx = Ctx::new(self, &asked, false);
                ctx.type_handle_name(method_table, 0)
            };
            match result {
                Ok(name) => return Some(name),
                Err(NameError::NeedModule(m)) if !asked.contains(&m) => {
                    self.ensure_loaded(m);
                    asked.insert(m);
                }
                Err(NameError::NeedModule(m)) => {
                    tracing::debug!("MethodTable {method_table:#x}: module {m:#x} has no metadata");
                    return None;
                }
                Err(NameError::Fail(e)) => {
                    tracing::debug!("MethodTable {method_table:#x}: {e}");
                    return None;
                }
            }
        }
        None
    }

    /// The fields the type of a MethodTable declares (not inherited ones), from its
    /// module's metadata, in metadata order: constants (`const`, no storage) included and
    /// marked. A field's type is named with the type's own generic arguments where the
    /// MethodTable has them (`System.Int32[]` for `T[]` of a `List<int>`).
    pub fn declared_fields(&mut self, method_table: u64) -> Result<Vec<FieldMetadata>, String> {
        let mt = method_table_info(&self.target, &self.descriptor, method_table)
            .map_err(|e| e.to_string())?;
        let mut asked: BTreeSet<u64> = BTreeSet::new();
        self.ensure_loaded(mt.module);
        asked.insert(mt.module);
        for _ in 0..MAX_ROUNDS {
            let result = {
                let ctx = Ctx::new(self, &asked, false);
                ctx.declared_fields(&mt)
            };
            match result {
                Ok(fields) => return Ok(fields),
                Err(NameError::NeedModule(m)) if !asked.contains(&m) => {
                    self.ensure_loaded(m);
                    asked.insert(m);
                }
                Err(NameError::NeedModule(m)) => {
                    return Err(format!("module {m:#x} has no metadata"))
                }
                Err(NameError::Fail(e)) => return Err(e),
            }
        }
        Err("too many modules needed to name the fields".into())
    }

    /// The module file (its path in the target) and MethodDef token of the method named
    /// `name` that the type of `method_table` declares (the first, when overloaded): where
    /// a PDB lookup starts. `None` when the type, its module's path or metadata, or such a
    /// method cannot be found.
    pub fn declared_method(
        &mut self,
        method_table: u64,
        name: &str,
    ) -> Option<(std::path::PathBuf, u32)> {
        let mt = method_table_info(&self.target, &self.descriptor, method_table).ok()?;
        self.ensure_loaded(mt.module);
        let path = self.modules.get(&mt.module)?.path.clone()?;
        let blob = self.blobs.get(&mt.module)?.as_ref()?;
        let md = Metadata::parse(blob).ok()?;
        let rid = mt.token & 0x00FF_FFFF;
        md.type_methods(rid)
            .ok()?
            .into_iter()
            .find(|&m| md.method_name(m).is_ok_and(|n| n == name))
            .map(|m| (path, 0x0600_0000 | m))
    }

    /// A method as `Ns.Type.Method` (the declaring type's runtime name, a dot, the
    /// method's metadata name), as async stacks name their methods. `None` for methods
    /// without a MethodDef (dynamic, array) or when the type or metadata cannot be read.
    pub fn qualified_name(&mut self, md: u64) -> Option<String> {
        let info = method_desc_info(&self.target, &self.descriptor, md).ok()?;
        if matches!(
            info.classification,
            MethodClassification::Dynamic | MethodClassification::Array
        ) {
            return None;
        }
        let declaring = self.type_name(info.method_table)?;
        let blob = self.blobs.get(&info.module)?.as_ref()?;
        let name = Metadata::parse(blob)
            .ok()?
            .method_name(info.token & 0x00FF_FFFF)
            .ok()?
            .to_string();
        Some(format!("{declaring}.{name}"))
    }

    /// The metadata `ImplFlags` of each MethodDesc's method (`NoOptimization`,
    /// `AggressiveOptimization`, ...), in order: 0 for dynamic and array methods, which have
    /// no MethodDef; `None` when the MethodDesc or its module's metadata cannot be read.
    /// Each module's metadata is parsed once per call.
    pub fn impl_flags(&mut self, mds: &[u64]) -> Vec<Option<u16>> {
        let infos: Vec<Option<MethodDescInfo>> = mds
            .iter()
            .map(|&md| method_desc_info(&self.target, &self.descriptor, md).ok())
            .collect();
        let mut wanted = BTreeSet::new();
        for info in infos.iter().flatten() {
            self.ensure_loaded(info.module);
            wanted.insert(info.module);
        }
        let ctx = Ctx::new(self, &wanted, false);
        infos
            .iter()
            .map(|info| {
                let info = info.as_ref()?;
                if matches!(
                    info.classification,
                    MethodClassification::Dynamic | MethodClassification::Array
                ) {
                    return Some(0);
                }
                let md = ctx.metadata(info.module).ok()?;
                md.method_def(info.token & 0x00FF_FFFF)
                    .ok()
                    .map(|row| row.impl_flags)
            })
            .collect()
    }

    /// `[module] <token 0x06000123>`.
    fn fallback(&self, info: &MethodDescInfo) -> String {
        let label = self.module_label(info.module);
        match (&info.dynamic_name, info.classification) {
            (Some(name), MethodClassification::Dynamic) => {
                format!("[{label}] dynamicClass::{name}")
            }
            _ => format!("[{label}] <token {:#010x}>", info.token),
        }
    }

    fn ensure_loaded(&mut self, module: u64) {
        if self.blobs.contains_key(&module) {
            return;
        }
        let blob = match self.modules.get(&module) {
            Some(m) => match loader::module_metadata(&self.target, &self.descriptor, m) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("module {module:#x}: metadata: {e}");
                    None
                }
            },
            // The name comes out as the type's MethodTable: a pointer read while the
            // GC moved objects leads here, and a read that is thrown away must not warn.
            None => {
                tracing::debug!("module {module:#x} is not in the AppDomain's assembly list");
                None
            }
        };
        self.blobs.insert(module, blob);
    }
}

/// A field as its module's metadata declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldMetadata {
    /// The FieldDef token (`0x04000000 | RID`).
    pub token: u32,
    /// Its name.
    pub name: String,
    /// Its declared type (`System.String`, `System.Collections.Generic.List`1[System.Int32]`).
    pub type_name: String,
    /// A constant: no FieldDesc and no storage.
    pub is_literal: bool,
    /// Static (`static`, `const`).
    pub is_static: bool,
    /// For a field of a non-generic struct type: the TypeDef or TypeRef token that names
    /// the struct in the field's module.
    pub value_type_token: Option<u32>,
    /// For a field whose type is one of its type's generic parameters (`T`): the type
    /// handle the instantiation gives it.
    pub type_argument: Option<u64>,
}

/// `FieldAttributes.Static`.
const FD_STATIC: u16 = 0x0010;
/// `FieldAttributes.Literal`.
const FD_LITERAL: u16 = 0x0040;

/// Parsed metadata of the loaded modules, for one naming round.
struct Ctx<'n> {
    namer: &'n MethodNamer,
    parsed: HashMap<u64, Metadata<'n>>,
    /// Modules whose blobs did not parse (so are never asked for again).
    broken: HashMap<u64, String>,
    /// Runtime names of type handles already built.
    type_names: RefCell<HashMap<u64, String>>,
}

impl<'n> Ctx<'n> {
    /// Parses the loaded metadata of the `wanted` modules, and, when dynamic methods are to
    /// be named (their signatures hold no tokens, so any metadata formats them), that of
    /// the loaded module with the lowest address too.
    fn new(namer: &'n MethodNamer, wanted: &BTreeSet<u64>, dynamic: bool) -> Self {
        let mut parsed = HashMap::new();
        let mut broken = HashMap::new();
        let any = dynamic
            .then(|| {
                namer
                    .blobs
                    .iter()
                    .filter(|(_, b)| b.is_some())
                    .map(|(&m, _)| m)
                    .min()
            })
            .flatten();
        for (&m, blob) in &namer.blobs {
            if !wanted.contains(&m) && Some(m) != any {
                continue;
            }
            match blob {
                Some(b) => match Metadata::parse(b) {
                    Ok(md) => {
                        parsed.insert(m, md);
                    }
                    Err(e) => {
                        broken.insert(m, e.to_string());
                    }
                },
                None => {
                    broken.insert(m, "no metadata".into());
                }
            }
        }
        Ctx {
            namer,
            parsed,
            broken,
            type_names: RefCell::new(HashMap::new()),
        }
    }

    fn metadata(&self, module: u64) -> Result<&Metadata<'n>, NameError> {
        if let Some(md) = self.parsed.get(&module) {
            return Ok(md);
        }
        match self.broken.get(&module) {
            Some(e) => Err(NameError::Fail(format!("module {module:#x}: {e}"))),
            None => Err(NameError::NeedModule(module)),
        }
    }

    /// Any parsed metadata (for formatting signatures that hold no tokens).
    fn any_metadata(&self) -> Result<&Metadata<'n>, NameError> {
        // Prefer a deterministic choice: the lowest module address.
        self.parsed
            .iter()
            .min_by_key(|(m, _)| **m)
            .map(|(_, md)| md)
            .ok_or_else(|| NameError::Fail("no module metadata could be read".into()))
    }

    fn method_name(&self, info: &MethodDescInfo) -> Result<String, NameError> {
        if info.classification == MethodClassification::Dynamic {
            return self.dynamic_method_name(info);
        }
        if info.classification == MethodClassification::Array {
            return Err(NameError::Fail("array methods are not named yet".into()));
        }
        let md = self.metadata(info.module)?;
        let mt = method_table_info(
            &self.namer.target,
            &self.namer.descriptor,
            info.method_table,
        )?;
        let rid = info.token & 0x00FF_FFFF;
        let owner = md
            .method_declaring_type(rid)
            .ok_or_else(|| NameError::Fail(format!("MethodDef {rid} has no declaring type")))?;
        let count = md
            .generic_params_of(Token::new(TableId::TypeDef, owner))
            .len();
        let args = if count > 0 {
            let handles =
                type_instantiation(&self.namer.target, &self.namer.descriptor, &mt, count)?;
            let mut names = Vec::with_capacity(handles.len());
            for h in handles {
                names.push(self.type_handle_name(h, 0)?);
            }
            Some(names)
        } else {
            None
        };
        let arg_refs: Option<Vec<&str>> = args
            .as_ref()
            .map(|a| a.iter().map(String::as_str).collect());
        let options = PerfMapNameOptions {
            type_instantiation: arg_refs.as_deref(),
            net8_truncation: self.namer.net8_truncation,
            signature: info.async_sig.as_deref(),
            ..PerfMapNameOptions::default()
        };
        Ok(md.perf_map_method_name(rid, &options)?)
    }

    fn dynamic_method_name(&self, info: &MethodDescInfo) -> Result<String, NameError> {
        let name = info
            .dynamic_name
            .as_deref()
            .ok_or_else(|| NameError::Fail("dynamic method without a name".into()))?;
        let sig_bytes = info
            .stored_sig
            .as_deref()
            .ok_or_else(|| NameError::Fail("dynamic method without a signature".into()))?;
        let sig = decode_method_sig_with(
            sig_bytes,
            SigOptions {
                pointer_size: self.namer.target.pointer_size(),
                ..SigOptions::default()
            },
        )
        .map_err(|e| NameError::Fail(format!("stored signature: {e}")))?;
        let is_dynamic_module = self
            .namer
            .modules
            .get(&info.module)
            .is_some_and(|m| m.is_dynamic);
        let (md, assembly) = if is_dynamic_module && info.is_lcg {
            (
                self.any_metadata()?,
                std::borrow::Cow::Borrowed(ANONYMOUS_DYNAMIC_ASSEMBLY),
            )
        } else {
            let md = self.metadata(info.module)?;
            (md, md.assembly_name()?)
        };
        let missing: RefCell<Option<u64>> = RefCell::new(None);
        let namer = |handle: u64| -> Option<String> {
            match self.internal_type_name(handle) {
                Ok(n) => Some(n),
                Err(NameError::NeedModule(m)) => {
                    *missing.borrow_mut() = Some(m);
                    None
                }
                Err(NameError::Fail(_)) => None,
            }
        };
        let il = IlFormatter::new(md).with_internal_namer(&namer);
        let text = format_perf_map_name(
            &il,
            &assembly,
            "dynamicClass",
            name,
            &sig,
            self.namer.net8_truncation,
        )?;
        if let Some(m) = missing.into_inner() {
            return Err(NameError::NeedModule(m));
        }
        Ok(text)
    }

    fn declared_fields(
        &self,
        mt: &crate::contracts::runtime_type_system::MethodTableInfo,
    ) -> Result<Vec<FieldMetadata>, NameError> {
        let md = self.metadata(mt.module)?;
        let rid = mt.token & 0x00FF_FFFF;
        let count = md
            .generic_params_of(Token::new(TableId::TypeDef, rid))
            .len();
        let handles = if count > 0 {
            type_instantiation(&self.namer.target, &self.namer.descriptor, mt, count)?
        } else {
            Vec::new()
        };
        let mut args: Vec<String> = Vec::with_capacity(handles.len());
        for &h in &handles {
            args.push(self.type_handle_name(h, 0)?);
        }
        let generic = |p: GenericParam, out: &mut String| -> crate::formats::ecma::Result<bool> {
            match p {
                GenericParam::Type(n) => match args.get(n as usize) {
                    Some(a) => {
                        out.push_str(a);
                        Ok(true)
                    }
                    None => Ok(false),
                },
                GenericParam::Method(_) => Ok(false),
            }
        };
        let names = CompilerNames::new(md).with_generic_args(&generic);
        let mut out = Vec::new();
        for field in md.type_fields(rid)? {
            let row = md.field(field)?;
            let ty = md.field_type(field)?;
            let mut type_name = String::new();
            names.type_sig(&ty, &mut type_name)?;
            let value_type_token = match ty.unmodified() {
                TypeSig::ValueType(tok) => Some(tok.0),
                _ => None,
            };
            let type_argument = match ty.unmodified() {
                TypeSig::Var(n) => handles.get(*n as usize).copied(),
                _ => None,
            };
            out.push(FieldMetadata {
                token: 0x0400_0000 | field,
                name: md.field_name(field)?.into_owned(),
                type_name,
                is_literal: row.flags & FD_LITERAL != 0,
                is_static: row.flags & FD_STATIC != 0,
                value_type_token,
                type_argument,
            });
        }
        Ok(out)
    }

    /// The name `ELEMENT_TYPE_INTERNAL` prints: the type's runtime name without its
    /// instantiation (`System.Span`1`).
    fn internal_type_name(&self, handle: u64) -> Result<String, NameError> {
        if handle & TYPE_HANDLE_TYPE_DESC != 0 {
            return Err(NameError::Fail("TypeDesc".into()));
        }
        let mt = method_table_info(&self.namer.target, &self.namer.descriptor, handle)?;
        if mt.is_array() {
            return self.type_handle_name(handle, 0);
        }
        let md = self.metadata(mt.module)?;
        Ok(md.runtime_type_name(mt.token & 0x00FF_FFFF, Some(&[]))?)
    }

    /// The runtime's name of a type handle as a generic argument: `System.Int32`,
    /// `System.__Canon`, `System.Collections.Generic.KeyValuePair`2[System.Int32,System.__Canon]`,
    /// `System.String[]`.
    fn type_handle_name(&self, handle: u64, depth: usize) -> Result<String, NameError> {
        if let Some(n) = self.type_names.borrow().get(&handle) {
            return Ok(n.clone());
        }
        if depth > MAX_TYPE_DEPTH {
            return Err(NameError::Fail("generic nesting too deep".into()));
        }
        if handle & TYPE_HANDLE_TYPE_DESC != 0 {
            return Err(NameError::Fail(format!(
                "type argument {handle:#x} is a TypeDesc"
            )));
        }
        let mt = method_table_info(&self.namer.target, &self.namer.descriptor, handle)?;
        let name = if mt.is_array() {
            let mut n = self.type_handle_name(mt.per_inst_info, depth + 1)?;
            if mt.is_sz_array() {
                n.push_str("[]");
            } else {
                // A rank-R array's base size holds the MethodTable, the length and its
                // padding (24 bytes) and R bounds and lower bounds (8 bytes per rank).
                let base = Fields::new(&self.namer.target, &self.namer.descriptor).u32(
                    handle,
                    "MethodTable",
                    "BaseSize",
                )?;
                let rank = (u64::from(base).saturating_sub(24) / 8).clamp(1, 32);
                n.push('[');
                n.push_str(&",".repeat(rank as usize - 1));
                n.push(']');
            }
            n
        } else if mt.token & 0x00FF_FFFF == 0 && mt.parent != 0 {
            // No TypeDef: a type the runtime made at run time (.NET 11's async
            // continuations, subtypes of CoreLib's Continuation with a tailored layout).
            self.runtime_made_type_name(&mt, depth)?
        } else {
            let md = self.metadata(mt.module)?;
            let rid = mt.token & 0x00FF_FFFF;
            let count = md
                .generic_params_of(Token::new(TableId::TypeDef, rid))
                .len();
            if count > 0 {
                let handles =
                    type_instantiation(&self.namer.target, &self.namer.descriptor, &mt, count)?;
                let mut args = Vec::with_capacity(handles.len());
                for h in handles {
                    args.push(self.type_handle_name(h, depth + 1)?);
                }
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                md.runtime_type_name(rid, Some(&refs))?
            } else {
                md.runtime_type_name(rid, None)?
            }
        };
        self.type_names.borrow_mut().insert(handle, name.clone());
        Ok(name)
    }

    /// The name of a type without a TypeDef. A runtime-async continuation is named as the
    /// runtime names it: `Continuation_` and its data size, then `_offset_count` for each
    /// run of references in its data (offsets from the data's start, counts in pointers);
    /// its data follows its parent's fields (the parent's base size, less the header word).
    /// Any other is named by its parent, marked as made at run time.
    fn runtime_made_type_name(
        &self,
        mt: &MethodTableInfo,
        depth: usize,
    ) -> Result<String, NameError> {
        let parent = self.type_handle_name(mt.parent, depth + 1)?;
        if parent != "System.Runtime.CompilerServices.Continuation" {
            return Ok(format!("<type made at run time, from {parent}>"));
        }
        let f = Fields::new(&self.namer.target, &self.namer.descriptor);
        let base = u64::from(f.u32(mt.address, "MethodTable", "BaseSize")?);
        let parent_base = u64::from(f.u32(mt.parent, "MethodTable", "BaseSize")?);
        let data_size = base.saturating_sub(parent_base);
        let data_offset = parent_base.saturating_sub(8);
        let mut name = format!("Continuation_{data_size}");
        if let GcDesc::Series(series) = GcDesc::read(&self.namer.target, mt.address, mt.flags)? {
            let mut runs: Vec<(u64, u64)> = series
                .iter()
                .filter(|(offset, _)| *offset >= data_offset)
                .map(|&(offset, size)| {
                    let bytes = size.wrapping_add(base as i64).max(0) as u64;
                    (offset - data_offset, bytes / 8)
                })
                .collect();
            runs.sort_unstable();
            for (offset, count) in runs {
                name.push_str(&format!("_{offset}_{count}"));
            }
        }
        Ok(name)
    }
}
