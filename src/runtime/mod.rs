//! A runtime found in a target: its module, version and data descriptor. This is the
//! entry point of the library:
//!
//! ```no_run
//! let rt = cdac::runtime::Runtime::attach(1234, &Default::default())?;
//! println!("{} {:?}", rt.module().path.display(), rt.version());
//! # Ok::<(), cdac::runtime::RuntimeError>(())
//! ```

pub mod discovery;

use crate::contracts::registry::{ContractContext, Contracts};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::descriptor::shipped::{self, Fit};
use crate::descriptor::{embedded, DataDescriptor, DescriptorError};
use crate::limits::{Limit, Limits};
use crate::memory::cache::PageCache;
use crate::memory::core_dump::CoreDump;
use crate::memory::elf_image::ImageError;
use crate::memory::live::LiveProcess;
use crate::memory::{DataLayout, MemorySource, OpenError, Target};

pub use discovery::{FoundModule, RuntimeVersion};

/// Why a runtime could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The target itself could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// No runtime module was found.
    #[error("no .NET runtime found in the target: {0}")]
    NoRuntime(String),
    /// The runtime module's ELF image could not be read.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The data descriptor could not be loaded.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
}

/// Where the data descriptor came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescriptorSource {
    /// The runtime's own `DotNetRuntimeContractDescriptor`.
    Embedded {
        /// Address of the exported structure.
        address: u64,
    },
    /// NativeAOT's `DotNetRuntimeDebugHeader` (.NET 8, 9 and 10), read as a descriptor.
    DebugHeader {
        /// Address of the exported structure.
        address: u64,
        /// The header's version.
        version: crate::descriptor::debug_header::DebugHeaderVersion,
    },
    /// A descriptor shipped with cdac.
    Shipped {
        /// Its name ("net8.0-linux-x64").
        name: String,
        /// How well it fits this build.
        fit: Fit,
    },
    /// A file given by the user.
    Override {
        /// The file.
        path: PathBuf,
    },
    /// The runtime's own descriptor, read from its file on disk because the target's copy
    /// could not be used (a damaged or lost page of a dump); the file was checked to be
    /// the build the process loaded.
    RuntimeFile {
        /// Address of the exported structure in the target.
        address: u64,
        /// The file it was read from.
        path: PathBuf,
        /// Why the target's copy was not used.
        reason: String,
    },
}

impl DescriptorSource {
    /// "embedded", "debug-header", "shipped" or "override".
    pub fn kind(&self) -> &'static str {
        match self {
            DescriptorSource::Embedded { .. } => "embedded",
            DescriptorSource::DebugHeader { .. } => "debug-header",
            DescriptorSource::Shipped { .. } => "shipped",
            DescriptorSource::Override { .. } => "override",
            DescriptorSource::RuntimeFile { .. } => "runtime-file",
        }
    }

    /// A name for people: the export, the shipped descriptor's name, or the file.
    pub fn name(&self) -> String {
        match self {
            DescriptorSource::Embedded { address } => {
                format!(
                    "{}@{address:#x}",
                    crate::descriptor::CONTRACT_DESCRIPTOR_SYMBOL
                )
            }
            DescriptorSource::DebugHeader { address, version } => format!(
                "{}@{address:#x} (version {}.{})",
                crate::descriptor::debug_header::DEBUG_HEADER_SYMBOL,
                version.major,
                version.minor
            ),
            DescriptorSource::Shipped { name, .. } => name.clone(),
            DescriptorSource::Override { path } => path.display().to_string(),
            DescriptorSource::RuntimeFile { address, path, .. } => format!(
                "{}@{address:#x} read from {}",
                crate::descriptor::CONTRACT_DESCRIPTOR_SYMBOL,
                path.display()
            ),
        }
    }
}

/// How to open a runtime.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Use this descriptor file instead of discovering one.
    pub descriptor: Option<PathBuf>,
    /// Limits on what target data can make cdac do (descriptor size, list lengths, bytes
    /// read, ...).
    pub limits: Limits,
    /// Directories a core's files are looked for under, first (a core of another machine:
    /// its libraries as the target's loader named them, under each).
    pub sysroots: Vec<PathBuf>,
}

/// The runtime module as found in the target.
#[derive(Debug, Clone)]
pub struct RuntimeModule {
    /// Path of the module as the target mapped it.
    pub path: PathBuf,
    /// Address of its ELF header.
    pub base: u64,
    /// One past its highest mapped address.
    pub end: u64,
    /// GNU build id, lowercase hex.
    pub build_id: Option<String>,
    /// Descriptor architecture name ("x64").
    pub architecture: &'static str,
    /// Exports found, with their addresses.
    pub exports: Vec<crate::memory::elf_image::DynamicSymbol>,
}

impl RuntimeModule {
    /// Address of the exported symbol `name`.
    pub fn export(&self, name: &str) -> Option<u64> {
        self.exports
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.address)
    }
}

/// A shipped overlay that filled in part of the runtime's descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedOverlay {
    /// Its name ("net9.0-linux-x64").
    pub name: String,
    /// How well it fits this build.
    pub fit: Fit,
    /// What it added, and where it disagreed with the runtime (the runtime was kept).
    pub report: crate::descriptor::FillReport,
}

/// A .NET runtime in a target, with its data descriptor loaded.
#[derive(Debug, Clone)]
pub struct Runtime {
    target: Target,
    module: Arc<RuntimeModule>,
    version: Option<RuntimeVersion>,
    descriptor: DataDescriptor,
    source: DescriptorSource,
    overlays: Vec<AppliedOverlay>,
    /// Its contracts, made on first use (shared by clones).
    contracts: Arc<Contracts>,
    /// A NativeAOT executable's method names, decoded on first use (shared by clones), or
    /// why there are none.
    native_aot_names: Arc<NativeAotNames>,
}

type NativeAotNames = std::sync::OnceLock<Result<Arc<crate::nativeaot::MethodNames>, String>>;

impl Runtime {
    /// A runtime of these parts, with an empty contract cache.
    fn assemble(
        target: Target,
        module: RuntimeModule,
        version: Option<RuntimeVersion>,
        descriptor: DataDescriptor,
        source: DescriptorSource,
        overlays: Vec<AppliedOverlay>,
    ) -> Runtime {
        let dac_table = module
            .exports
            .iter()
            .find(|s| s.name == discovery::DAC_TABLE_SYMBOL)
            .map(|s| (s.address, s.size));
        let contracts = Contracts::new(ContractContext {
            target: target.clone(),
            descriptor: descriptor.clone(),
            dac_table,
            major: version.as_ref().and_then(RuntimeVersion::major),
        });
        Runtime {
            target,
            module: Arc::new(module),
            version,
            descriptor,
            source,
            overlays,
            contracts: Arc::new(contracts),
            native_aot_names: Arc::default(),
        }
    }

    /// Forgets cached target memory and what the contracts remember of it: for a live
    /// process that ran on since it was read.
    pub fn flush(&self) {
        self.target.flush();
        self.contracts.flush();
    }

    /// The runtime's contracts, each made (version checked, through the registry) on first
    /// use and then kept.
    pub fn contracts(&self) -> &Contracts {
        &self.contracts
    }

    /// Attaches to live process `pid` (read-only; the process keeps running).
    pub fn attach(pid: i32, options: &OpenOptions) -> Result<Runtime, RuntimeError> {
        let live = LiveProcess::open(pid)?;
        Self::open(Arc::new(PageCache::new(live)), options)
    }

    /// Opens an ELF core dump.
    pub fn open_dump(
        path: impl AsRef<Path>,
        options: &OpenOptions,
    ) -> Result<Runtime, RuntimeError> {
        let core = CoreDump::open_with_sysroots(path, &options.sysroots)?;
        Self::open(Arc::new(core), options)
    }

    /// Finds the runtime in any memory source and loads its descriptor. The source's own
    /// layout is used until the descriptor tells the real one (64-bit little-endian when the
    /// source knows none).
    pub fn open(
        source: Arc<dyn MemorySource>,
        options: &OpenOptions,
    ) -> Result<Runtime, RuntimeError> {
        let layout = source.native_layout().unwrap_or(DataLayout::LE64);
        Self::open_target(Target::new(source, layout), options)
    }

    /// Opens memory a host program reads for `cdac` (see
    /// [`CallbackSource`](crate::memory::callback::CallbackSource)).
    ///
    /// ```no_run
    /// use cdac::runtime::{OpenOptions, Runtime};
    /// use cdac::memory::callback::CallbackSource;
    /// use cdac::memory::{MappedFile, ThreadInfo};
    ///
    /// # fn host_read(addr: u64, buf: &mut [u8]) -> bool { false }
    /// # fn host_modules() -> Vec<MappedFile> { Vec::new() }
    /// # fn host_threads() -> Vec<ThreadInfo> { Vec::new() }
    /// // The debugger's own view of the target: memory, module mappings, threads.
    /// let source = CallbackSource::new(host_read, host_modules(), host_threads());
    /// let rt = Runtime::open_host(source, &OpenOptions::default())?;
    /// println!("{} at {:#x}", rt.module().path.display(), rt.module().base);
    /// # Ok::<(), cdac::runtime::RuntimeError>(())
    /// ```
    pub fn open_host(
        source: crate::memory::callback::CallbackSource,
        options: &OpenOptions,
    ) -> Result<Runtime, RuntimeError> {
        Self::open(Arc::new(source), options)
    }

    /// Finds the runtime in `target` and loads its descriptor. `target`'s layout is used
    /// until the descriptor tells the real one; its limits are replaced by `options`'.
    pub fn open_target(target: Target, options: &OpenOptions) -> Result<Runtime, RuntimeError> {
        let target = target.with_limits(options.limits);
        let mut found = discovery::find_runtime_modules(&target)?;
        if found.is_empty() {
            if let Some(path) = &options.descriptor {
                // The user's descriptor is then the only source of facts about the runtime.
                return Self::open_descriptor_only(target, path, options);
            }
            return Err(RuntimeError::NoRuntime(format!(
                "none of the {} mapped modules is {} or exports {} or {}",
                crate::memory::elf_image::modules(target.mapped_files()).len(),
                discovery::RUNTIME_FILE_NAME,
                crate::descriptor::CONTRACT_DESCRIPTOR_SYMBOL,
                discovery::DAC_TABLE_SYMBOL
            )));
        }
        if found.len() > 1 {
            tracing::warn!(
                count = found.len(),
                "several runtimes in the target; using the first, {}",
                found[0].mapping.path.display()
            );
        }
        let found = found.swap_remove(0);
        let build_id = found
            .image
            .build_id(&target)
            .ok()
            .flatten()
            .or_else(|| disk_build_id(&found.mapping.path))
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let version = discovery::read_version(&target, &found.mapping);
        let module = RuntimeModule {
            path: found.mapping.path.clone(),
            base: found.mapping.base,
            end: found.mapping.end,
            build_id,
            architecture: discovery::architecture_name(found.image.machine()),
            exports: found.exports.clone(),
        };
        let (mut descriptor, source) =
            load_descriptor(&target, &module, &found, version.as_ref(), options)?;
        // NativeAOT (and .NET 11) embed no version string: the descriptor states the
        // version (11), else the compiler's note in the executable does (10).
        let version = version
            .or_else(|| {
                descriptor
                    .global_string("RuntimeProductVersionString")
                    .ok()
                    .and_then(RuntimeVersion::parse_product)
            })
            .or_else(|| {
                let native_aot = crate::contracts::registry::flavor_of(&descriptor)
                    == crate::contracts::versions::Flavor::NativeAot;
                native_aot
                    .then(|| discovery::read_ilc_version(&target.local_path(&found.mapping.path)))
                    .flatten()
            });
        // A file given by the user is the whole description; anything else is completed
        // by the overlays that fit this runtime.
        let overlays = match source {
            DescriptorSource::Override { .. } => Vec::new(),
            _ => apply_overlays(&target, &module, version.as_ref(), &mut descriptor, options)?,
        };
        let target = target.with_layout(descriptor.layout());
        Ok(Runtime::assemble(
            target, module, version, descriptor, source, overlays,
        ))
    }

    /// A runtime whose module cannot be identified (a core without `NT_FILE`, memory a
    /// host hands over without its module list), described entirely by the descriptor file
    /// `path`: its globals must be direct values, as `cdac info --export-descriptor`
    /// writes them, since there is no runtime module to read pointer data from.
    fn open_descriptor_only(
        target: Target,
        path: &Path,
        options: &OpenOptions,
    ) -> Result<Runtime, RuntimeError> {
        let name = path.display().to_string();
        let physical = read_descriptor_file(path, options)?;
        if physical.extras.contains_key("cdac") {
            return Err(DescriptorError::Invalid {
                descriptor: name,
                detail: "a shipped descriptor reads its pointer data from the runtime module's exports, \
                         and no runtime module was found in the target; use a complete descriptor \
                         (cdac info --export-descriptor writes one)"
                    .into(),
            }
            .into());
        }
        let mut descriptor = DataDescriptor::new(target.layout());
        descriptor
            .merge(&name, &physical, &[])
            .map_err(|e| match e {
                DescriptorError::PointerDataIndex { name: global, .. } => {
                    DescriptorError::Invalid {
                        descriptor: name.clone(),
                        detail: format!(
                    "global {global} is an index into pointer data, and no runtime module was \
                     found in the target to read it from; use a descriptor whose globals are \
                     direct values (cdac info --export-descriptor writes one)"
                ),
                    }
                }
                other => other,
            })?;
        let architecture = match descriptor.global_string("Architecture") {
            Ok("x64") => "x64",
            Ok("arm64") => "arm64",
            Ok("x86") => "x86",
            Ok("arm") => "arm",
            Ok("riscv64") => "riscv64",
            Ok("loongarch64") => "loongarch64",
            _ => "unknown",
        };
        let module = RuntimeModule {
            path: PathBuf::from("(not identified: the descriptor file describes the runtime)"),
            base: 0,
            end: 0,
            build_id: None,
            architecture,
            exports: Vec::new(),
        };
        let target = target.with_layout(descriptor.layout());
        Ok(Runtime::assemble(
            target,
            module,
            None,
            descriptor,
            DescriptorSource::Override {
                path: path.to_path_buf(),
            },
            Vec::new(),
        ))
    }

    /// Whether the runtime is NativeAOT (linked into the executable): its descriptor says
    /// so, or it was found by NativeAOT's debug header. Read it with [`crate::nativeaot`].
    pub fn is_native_aot(&self) -> bool {
        crate::contracts::registry::flavor_of(&self.descriptor)
            == crate::contracts::versions::Flavor::NativeAot
    }

    /// The method names of a NativeAOT executable (its stack-trace metadata), decoded once
    /// for every reader of this runtime; the error says why there are none (another flavor,
    /// the executable's file not at hand, its header unreadable).
    pub fn native_aot_names(&self) -> Result<Arc<crate::nativeaot::MethodNames>, String> {
        if !self.is_native_aot() {
            return Err("not a NativeAOT runtime".into());
        }
        self.native_aot_names
            .get_or_init(|| {
                crate::nativeaot::MethodNames::for_runtime(self)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// The target, read with the runtime's layout.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The runtime module.
    pub fn module(&self) -> &RuntimeModule {
        &self.module
    }

    /// The runtime's version, when its version string could be read.
    pub fn version(&self) -> Option<&RuntimeVersion> {
        self.version.as_ref()
    }

    /// The data descriptor.
    pub fn descriptor(&self) -> &DataDescriptor {
        &self.descriptor
    }

    /// Where the descriptor came from.
    pub fn descriptor_source(&self) -> &DescriptorSource {
        &self.source
    }

    /// The shipped overlays that completed the descriptor, most specific first.
    pub fn overlays(&self) -> &[AppliedOverlay] {
        &self.overlays
    }
}

/// Fills the descriptor with the shipped overlays that fit the runtime: its version line's
/// (for what that runtime's descriptor lacks), then the file formats'.
fn apply_overlays(
    target: &Target,
    module: &RuntimeModule,
    version: Option<&RuntimeVersion>,
    descriptor: &mut DataDescriptor,
    options: &OpenOptions,
) -> Result<Vec<AppliedOverlay>, RuntimeError> {
    let resolve = |name: &str| {
        module
            .exports
            .iter()
            .find(|s| s.name == name)
            .map(|s| (s.address, s.size))
    };
    let flavor = match crate::contracts::registry::flavor_of(descriptor) {
        crate::contracts::versions::Flavor::NativeAot => "nativeaot",
        crate::contracts::versions::Flavor::CoreClr => "coreclr",
    };
    let candidates: Vec<_> = shipped::builtin()?
        .into_iter()
        .filter(|d| d.meta.is_for_flavor(flavor))
        .collect();
    let fitting = shipped::overlays_for(
        &candidates,
        module.build_id.as_deref(),
        version.map(|v| v.product_version.as_str()),
        module.architecture,
    );
    let mut applied = Vec::new();
    for (overlay, fit) in fitting {
        let report = shipped::apply_overlay(
            overlay,
            descriptor,
            target,
            &resolve,
            &crate::descriptor::Limits::for_command(&options.limits),
        )?;
        // A build nobody measured the overlay on is checked by `crate::validation`, which
        // warns when the values fail their checks, not because of the version.
        if fit == Fit::SameVersionLine && !report.is_empty() {
            tracing::debug!(
                overlay = %overlay.meta.name,
                build_id = module.build_id.as_deref().unwrap_or("unknown"),
                "overlay fitted by version line (the values it adds are checked when opened)"
            );
        }
        for c in &report.conflicts {
            tracing::warn!(overlay = %overlay.meta.name, "the runtime's descriptor disagrees with the overlay (kept the runtime's): {c}");
        }
        applied.push(AppliedOverlay {
            name: overlay.meta.name.clone(),
            fit,
            report,
        });
    }
    Ok(applied)
}

fn load_descriptor(
    target: &Target,
    module: &RuntimeModule,
    found: &FoundModule,
    version: Option<&RuntimeVersion>,
    options: &OpenOptions,
) -> Result<(DataDescriptor, DescriptorSource), RuntimeError> {
    let descriptor_limits = crate::descriptor::Limits::for_command(&options.limits);
    let resolve = |name: &str| {
        module
            .exports
            .iter()
            .find(|s| s.name == name)
            .map(|s| (s.address, s.size))
    };
    if let Some(path) = &options.descriptor {
        let name = path.display().to_string();
        let physical = read_descriptor_file(path, options)?;
        let descriptor = if physical.extras.contains_key("cdac") {
            let parsed = shipped::from_physical(&name, physical)?;
            shipped::instantiate(&parsed, target, &resolve, &descriptor_limits)?
        } else {
            {
                // A plain descriptor (a corrected copy of the runtime's own, say): its
                // indirect globals index the runtime's own pointer data, when it has one.
                let pointer_data = match found.contract_descriptor {
                    Some(address) => embedded::pointer_data(target, address, &descriptor_limits)?,
                    None => Vec::new(),
                };
                let mut d = DataDescriptor::new(target.layout());
                d.merge(&name, &physical, &pointer_data)?;
                d
            }
        };
        return Ok((
            descriptor,
            DescriptorSource::Override { path: path.clone() },
        ));
    }
    if let Some(address) = found.contract_descriptor {
        let damaged = match embedded::load(target, address, &descriptor_limits) {
            Ok(descriptor) => return Ok((descriptor, DescriptorSource::Embedded { address })),
            Err(e) => e,
        };
        // The target's copy is damaged or lost: the runtime's file holds the same bytes.
        return match descriptor_from_file(target, module, found, address, &descriptor_limits) {
            Ok((descriptor, path)) => {
                tracing::warn!(
                    "the runtime's descriptor in the target cannot be used ({damaged}); read it from {}, the same build",
                    path.display()
                );
                Ok((
                    descriptor,
                    DescriptorSource::RuntimeFile {
                        address,
                        path,
                        reason: damaged.to_string(),
                    },
                ))
            }
            Err(why) => {
                tracing::warn!("the runtime's file cannot stand in for its descriptor: {why}");
                Err(damaged.into())
            }
        };
    }
    if let Some(address) = found.debug_header {
        let (descriptor, version) = crate::descriptor::debug_header::load(target, address)?;
        return Ok((
            descriptor,
            DescriptorSource::DebugHeader { address, version },
        ));
    }
    let candidates = shipped::builtin()?;
    let (chosen, fit) = shipped::select(
        &candidates,
        module.build_id.as_deref(),
        version.map(|v| v.product_version.as_str()),
        module.architecture,
    )?;
    if fit == Fit::SameVersionLine {
        tracing::debug!(
            descriptor = %chosen.meta.name,
            build_id = module.build_id.as_deref().unwrap_or("unknown"),
            "shipped descriptor fitted by version line (its values are checked when opened)"
        );
    }
    let descriptor = shipped::instantiate(chosen, target, &resolve, &descriptor_limits)?;
    Ok((
        descriptor,
        DescriptorSource::Shipped {
            name: chosen.meta.name.clone(),
            fit,
        },
    ))
}

/// The runtime's descriptor read from its file on disk (the module's path, under the
/// target's root), when the file is the build the target loaded: the dump's copy of the
/// exported structure (kept in writable data) holds the file's header and pointers as
/// relocated, or, where that copy is unreadable, the image in the target has the file's
/// build id.
fn descriptor_from_file(
    target: &Target,
    module: &RuntimeModule,
    found: &FoundModule,
    address: u64,
    limits: &crate::descriptor::Limits,
) -> Result<(DataDescriptor, PathBuf), String> {
    let path = target.local_path(&module.path);
    let file = crate::descriptor::on_disk::read(&path, found.image.load_bias())
        .map_err(|e| e.to_string())?;
    let mut structure = [0u8; 40];
    let verified = match target.read_into(address, &mut structure) {
        Ok(()) if file.matches_structure(&structure) => true,
        Ok(()) if structure[..8] == file.head[..8] => {
            return Err(format!(
                "the structure in the target differs from the one in {} (another build?)",
                path.display()
            ))
        }
        // Lost or zeroed: the build id decides.
        _ => {
            let in_target = found.image.build_id(target).ok().flatten();
            in_target.is_some() && in_target == disk_build_id(&path)
        }
    };
    if !verified {
        return Err(format!(
            "cannot tell that {} is the build the target loaded (its descriptor structure is \
             lost and no build id matches)",
            path.display()
        ));
    }
    let descriptor =
        embedded::load_from_file(target, address, &file, limits).map_err(|e| e.to_string())?;
    Ok((descriptor, path))
}

/// Reads and parses a descriptor file given with `--descriptor`, within the size limit.
fn read_descriptor_file(
    path: &Path,
    options: &OpenOptions,
) -> Result<crate::descriptor::PhysicalDescriptor, RuntimeError> {
    let file_err = |detail: String| DescriptorError::File {
        path: path.display().to_string(),
        detail,
    };
    let text = crate::memory::map_regular_file(path).map_err(|e| file_err(e.to_string()))?;
    if text.len() as u64 > options.limits.max_descriptor_bytes {
        return Err(DescriptorError::TooLarge {
            descriptor: path.display().to_string(),
            what: "file size",
            limit: Limit::DescriptorSize,
            value: text.len() as u64,
            cap: options.limits.max_descriptor_bytes,
        }
        .into());
    }
    Ok(crate::descriptor::json::parse(
        &path.display().to_string(),
        &text,
    )?)
}

fn disk_build_id(path: &Path) -> Option<Vec<u8>> {
    use object::Object;
    let data = crate::memory::map_regular_file(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}
