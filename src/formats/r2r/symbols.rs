//! An image's ReadyToRun PerfMap, made offline from the image file: one entry per hot or
//! cold part of every compiled method (a part covers the method's body and funclets),
//! named as the runtime names the method in its perf map (what `cdac ip2md` prints) or,
//! on request, as crossgen2 names it in the r2rmap it writes ([`NameStyle`]).
//!
//! A plain image's methods are its own MethodDefs and the instantiations it holds; a
//! composite image's are every component assembly's MethodDefs (each component's
//! MethodDefEntryPoints, named from the component's metadata, read from its file next to
//! the composite) and the image's instantiations.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

use super::image::{flags, section, R2rImage, TargetArch, TargetOs};
use super::methods::{compiled_methods, CompiledMethod, MethodDefEntryPoints, MethodKey};
use super::naming::{NameStyle, Namer};
use super::perf_map::{R2rPerfMap, R2rPerfMapEntry, FORMAT_VERSION};
use super::signature::ModuleSet;
use super::R2rError;
use crate::formats::cursor::Cursor;
use crate::formats::ecma::pe::{metadata_from_pe, PeLayout};
use crate::formats::ecma::{Metadata, TableId};

/// How [`r2r_perf_map`] works.
#[derive(Debug, Clone, Default)]
pub struct R2rMapOptions {
    /// Where the image's referenced assemblies (and a composite image's components) are
    /// looked for; the image's own folder is always searched first.
    pub search_dirs: Vec<PathBuf>,
    /// Names as early .NET 8 builds print them, one byte short at certain lengths
    /// ([`net8_printf_drops_last_byte`](crate::formats::ecma::names::net8_printf_drops_last_byte)),
    /// for comparing with such a runtime's perf map; by default names are exact. Only for
    /// [`NameStyle::Runtime`].
    pub net8_truncation: bool,
    /// How methods are named.
    pub names: NameStyle,
}

/// What [`r2r_perf_map`] made, with counts for the caller's report.
#[derive(Debug, Clone)]
pub struct R2rMapReport {
    /// The map.
    pub map: R2rPerfMap,
    /// Where the signature came from: the image's PerfMap debug record, or computed.
    pub signature_from_image: bool,
    /// Runtime functions in the image.
    pub runtime_functions: usize,
    /// Runtime functions inside some entry.
    pub covered_functions: usize,
    /// Methods split into hot and cold code (crossgen2 `--hot-cold-splitting`).
    pub cold_parts: usize,
    /// Runtime functions of cold parts the map leaves out: crossgen2-style maps list the
    /// hot part of a split method only, as crossgen2 does; runtime-style maps list both.
    pub unlisted_cold_functions: usize,
    /// Methods named in the map.
    pub methods: usize,
    /// Entries named with a fallback (method or type argument not decodable).
    pub fallback_names: usize,
    /// A composite image's component assemblies (0 for a plain image).
    pub components: usize,
    /// Referenced assemblies (or components) whose files were not found: what they
    /// would have named got fallback names.
    pub missing_assemblies: Vec<String>,
    /// InstanceMethodEntryPoints entries whose signature did not decode.
    pub undecoded_instances: usize,
}

fn perf_map_os(os: TargetOs) -> u32 {
    match os {
        TargetOs::Windows => 1,
        TargetOs::Linux => 2,
        TargetOs::Osx => 3,
        TargetOs::FreeBsd => 4,
        TargetOs::NetBsd => 5,
        TargetOs::SunOs => 6,
    }
}

fn perf_map_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::Arm => 1,
        TargetArch::Arm64 => 2,
        TargetArch::X64 => 3,
        TargetArch::X86 => 4,
        TargetArch::Unknown(_) => 0,
    }
}

/// The map's signature as crossgen2 computes it for one input assembly: MD5 of the MVID
/// followed by the OS, architecture and ABI tokens (little-endian u32s).
pub fn computed_signature(
    md: &Metadata<'_>,
    os: u32,
    arch: u32,
    abi: u32,
) -> Result<[u8; 16], R2rError> {
    let mvid = md.guids.get(md.module()?.mvid)?.unwrap_or([0; 16]);
    Ok(signature_of_inputs(&[("", mvid)], os, arch, abi))
}

/// The map's signature as crossgen2 computes it for its input assemblies (name, MVID):
/// MD5 of the MVIDs in the order of the names (ordinal, case-insensitive), then the OS,
/// architecture and ABI tokens.
pub fn signature_of_inputs(inputs: &[(&str, [u8; 16])], os: u32, arch: u32, abi: u32) -> [u8; 16] {
    let mut sorted: Vec<&(&str, [u8; 16])> = inputs.iter().collect();
    sorted.sort_by_cached_key(|(name, _)| name.to_uppercase());
    let mut h = Md5::new();
    for (_, mvid) in sorted {
        h.update(mvid);
    }
    for v in [os, arch, abi] {
        h.update(v.to_le_bytes());
    }
    h.finalize().into()
}

/// The ReadyToRun PerfMap of the image file at `path` (its folder is searched first for
/// the assemblies it references).
pub fn r2r_perf_map(path: &Path, options: &R2rMapOptions) -> Result<R2rMapReport, R2rError> {
    let bytes =
        std::fs::read(path).map_err(|e| R2rError::Pe(format!("{}: {e}", path.display())))?;
    let mut dirs: Vec<PathBuf> = path.parent().map(Path::to_path_buf).into_iter().collect();
    dirs.extend(options.search_dirs.iter().cloned());
    r2r_perf_map_from_bytes(&bytes, &dirs, options)
}

/// Where one signature module index's metadata comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// Nothing (a composite image's index 0; undefined indices).
    None,
    /// The image's own metadata.
    Own,
    /// The image's manifest metadata.
    Manifest,
    /// The file of the assembly of this name.
    File(String),
}

/// The signature module index layout (R2R 6.3+): 0 the context (a plain image's own
/// metadata), 1..=N its AssemblyRefs, then the manifest metadata itself, then the manifest
/// AssemblyRefs. Before 6.3 the manifest AssemblyRefs follow the own ones directly.
fn module_sources(
    own: Option<&Metadata<'_>>,
    manifest: Option<&Metadata<'_>>,
    composite: bool,
    manifest_slot: bool,
) -> Vec<Source> {
    let name_of = |md: &Metadata<'_>, rid: u32| -> Option<String> {
        let r = md.assembly_ref(rid).ok()?;
        Some(md.strings.get_lossy(r.name).ok()?.into_owned())
    };
    let own_name = own.and_then(|m| m.assembly_name().ok().map(|n| n.into_owned()));
    let file = |name: Option<String>| match name {
        Some(n)
            if own_name
                .as_deref()
                .is_some_and(|o| o.eq_ignore_ascii_case(&n)) =>
        {
            Source::Own
        }
        Some(n) => Source::File(n),
        None => Source::None,
    };
    let mut out = vec![if composite { Source::None } else { Source::Own }];
    if let Some(own) = own.filter(|_| !composite) {
        for rid in 1..=own.tables.rows(TableId::AssemblyRef) {
            out.push(file(name_of(own, rid)));
        }
    }
    if let Some(manifest) = manifest {
        if manifest_slot {
            out.push(Source::Manifest);
        }
        for rid in 1..=manifest.tables.rows(TableId::AssemblyRef) {
            out.push(file(name_of(manifest, rid)));
        }
    }
    out
}

/// Reads `{name}.dll` from the first folder of `dirs` holding it.
fn read_assembly(dirs: &[PathBuf], name: &str) -> Option<Vec<u8>> {
    if name.is_empty() || name.contains(['/', '\\']) || name == ".." {
        return None;
    }
    dirs.iter()
        .map(|d| d.join(format!("{name}.dll")))
        .find_map(|p| std::fs::read(p).ok())
}

fn mvid_of(md: &Metadata<'_>) -> Option<[u8; 16]> {
    md.guids.get(md.module().ok()?.mvid).ok()?
}

/// The ReadyToRun PerfMap of an image given as bytes; referenced assemblies are looked for
/// in `dirs` only.
pub fn r2r_perf_map_from_bytes(
    bytes: &[u8],
    dirs: &[PathBuf],
    options: &R2rMapOptions,
) -> Result<R2rMapReport, R2rError> {
    let img = R2rImage::parse(bytes)?;
    if img.flags & flags::COMPONENT != 0 && img.section(section::RUNTIME_FUNCTIONS).is_none() {
        return Err(R2rError::ComponentOfComposite {
            composite: img.owner_composite().unwrap_or_default(),
        });
    }
    let composite = img.is_composite();
    let own = if composite || img.metadata.is_empty() {
        None
    } else {
        Some(Metadata::parse(img.metadata)?)
    };
    if own.is_none() && !composite {
        return Err(R2rError::Corrupt("the image has no metadata".into()));
    }
    let manifest = match img.manifest_metadata()? {
        Some(blob) if composite => Some(Metadata::parse(blob)?),
        // A damaged manifest only costs the names of what it references.
        Some(blob) => Metadata::parse(blob).ok(),
        None => None,
    };
    let manifest_slot = img.major_version > 6 || (img.major_version == 6 && img.minor_version >= 3);
    let sources = module_sources(own.as_ref(), manifest.as_ref(), composite, manifest_slot);

    // Each assembly's file once, then its metadata.
    let mut file_index: HashMap<String, usize> = HashMap::new();
    let mut files: Vec<Option<Vec<u8>>> = Vec::new();
    let mut missing_assemblies = Vec::new();
    for s in &sources {
        if let Source::File(name) = s {
            if let std::collections::hash_map::Entry::Vacant(slot) =
                file_index.entry(name.to_ascii_lowercase())
            {
                let file = read_assembly(dirs, name);
                if file.is_none() {
                    missing_assemblies.push(name.clone());
                }
                slot.insert(files.len());
                files.push(file);
            }
        }
    }
    let parsed: Vec<Option<Metadata<'_>>> = files
        .iter()
        .map(|f| {
            f.as_deref()
                .and_then(|b| metadata_from_pe(b, PeLayout::File).ok())
                .and_then(|m| Metadata::parse(m).ok())
        })
        .collect();
    let mut modules: Vec<Option<&Metadata<'_>>> = sources
        .iter()
        .map(|s| match s {
            Source::None => None,
            Source::Own => own.as_ref(),
            Source::Manifest => manifest.as_ref(),
            Source::File(name) => file_index
                .get(&name.to_ascii_lowercase())
                .and_then(|&i| parsed.get(i)?.as_ref()),
        })
        .collect();

    // A composite image's components: manifest AssemblyRef k+1 is component k, and the
    // file found must be the one compiled (its MVID, where the image lists them).
    let first_component = if manifest_slot { 2 } else { 1 };
    let mvids = img
        .section_bytes(section::MANIFEST_ASSEMBLY_MVIDS)?
        .unwrap_or_default();
    let mut component_inputs: Vec<(String, [u8; 16])> = Vec::new();
    let mut method_defs = Vec::new();
    if composite {
        for (k, component) in img.components.iter().enumerate() {
            let index = first_component + k as u32;
            let slot = index as usize;
            let listed: Option<[u8; 16]> = Cursor::new(mvids)
                .at(k.saturating_mul(16))
                .read_array("component MVID")
                .ok();
            if let (Some(md), Some(listed)) = (modules.get(slot).copied().flatten(), listed) {
                if mvid_of(md) != Some(listed) {
                    let name = md
                        .assembly_name()
                        .map(|n| n.into_owned())
                        .unwrap_or_default();
                    tracing::warn!(
                        "component {name}: the file found is not the one compiled into the \
                         composite image (MVID differs); its methods get fallback names"
                    );
                    missing_assemblies.push(name);
                    if let Some(m) = modules.get_mut(slot) {
                        *m = None;
                    }
                }
            }
            let md = modules.get(slot).copied().flatten();
            let name = match sources.get(slot) {
                Some(Source::File(n)) => n.clone(),
                _ => String::new(),
            };
            if let Some(mvid) = listed.or_else(|| md.and_then(mvid_of)) {
                component_inputs.push((name, mvid));
            }
            if let Some(s) = component.section(section::METHOD_DEF_ENTRY_POINTS) {
                method_defs.push(MethodDefEntryPoints {
                    module: index,
                    section: img.at(s.rva, s.size, "component MethodDefEntryPoints")?,
                    rows: md.map(|m| m.tables.rows(TableId::MethodDef)),
                });
            }
        }
    } else if let Some(buf) = img.section_bytes(section::METHOD_DEF_ENTRY_POINTS)? {
        method_defs.push(MethodDefEntryPoints {
            module: 0,
            section: buf,
            rows: own.as_ref().map(|m| m.tables.rows(TableId::MethodDef)),
        });
    }
    let mut set = ModuleSet {
        modules,
        composite,
        system: None,
    };
    set.system = set.by_assembly_name("System.Private.CoreLib");
    let scan = compiled_methods(&img, &method_defs)?;
    let methods = scan.methods;

    let (os, arch, abi) = (perf_map_os(img.os), perf_map_arch(img.arch), 1);
    let (signature, from_image) = match (&img.perf_map_entry, &own) {
        (Some(e), _) => (e.signature, true),
        (None, Some(md)) => (computed_signature(md, os, arch, abi)?, false),
        (None, None) => {
            let inputs: Vec<(&str, [u8; 16])> = component_inputs
                .iter()
                .map(|(n, m)| (n.as_str(), *m))
                .collect();
            (signature_of_inputs(&inputs, os, arch, abi), false)
        }
    };
    let own_assembly = own
        .as_ref()
        .and_then(|m| m.assembly_name().ok())
        .map(|n| n.into_owned());
    let namer = Namer {
        set: &set,
        net8_truncation: options.net8_truncation,
    };
    let mut fallback_names = 0;
    let mut entries = Vec::new();
    let (mut covered, mut cold_parts, mut unlisted_cold) = (0, 0, 0);
    for m in &methods {
        let name = match &m.key {
            MethodKey::MethodDef { module, rid } => {
                let assembly = if *module == 0 {
                    own_assembly.as_deref()
                } else {
                    None
                };
                namer.method_def(options.names, *module, *rid, assembly)
            }
            MethodKey::Instance(inst) => namer.instance(options.names, inst),
        };
        let name = match name {
            Some(n) => n,
            None => {
                fallback_names += 1;
                fallback_name(&set, &sources, &img, m)
            }
        };
        if m.cold.is_some() {
            cold_parts += 1;
        }
        let parts = [
            (Some(m.first), m.count, false),
            (m.cold, m.cold_count, true),
        ];
        for (first, count, is_cold) in parts {
            let Some(first) = first else { continue };
            // crossgen2's own maps list the hot part of a split method only.
            if options.names == NameStyle::Crossgen2 && is_cold {
                unlisted_cold += count;
                continue;
            }
            let Some(start) = img.runtime_functions.get(first).map(|f| f.begin) else {
                continue;
            };
            let Some(end) = img.function_end(first + count - 1) else {
                continue;
            };
            covered += count;
            entries.push(R2rPerfMapEntry {
                rva: start,
                length: end.saturating_sub(start),
                name: name.clone(),
            });
        }
    }
    entries.sort_by_key(|e| e.rva);
    Ok(R2rMapReport {
        map: R2rPerfMap {
            signature,
            version: FORMAT_VERSION,
            os,
            arch,
            abi,
            entries,
        },
        signature_from_image: from_image,
        runtime_functions: img.runtime_functions.len(),
        covered_functions: covered,
        cold_parts,
        unlisted_cold_functions: unlisted_cold,
        methods: methods.len(),
        fallback_names,
        components: img.components.len(),
        missing_assemblies,
        undecoded_instances: scan.undecoded_instances,
    })
}

/// The name of a method that could not be named: its assembly, token and where its
/// code starts.
fn fallback_name(
    set: &ModuleSet<'_, '_>,
    sources: &[Source],
    img: &R2rImage<'_>,
    m: &CompiledMethod,
) -> String {
    let rva = img.runtime_functions.get(m.first).map_or(0, |f| f.begin);
    let assembly = |module: Option<u32>| -> String {
        let module = module.unwrap_or(0);
        if let Ok(md) = set.get(module) {
            if let Ok(n) = md.assembly_name() {
                return n.into_owned();
            }
        }
        match sources.get(module as usize) {
            Some(Source::File(n)) => n.clone(),
            _ => "?".into(),
        }
    };
    match &m.key {
        MethodKey::MethodDef { module, rid } => {
            format!(
                "[{}] <token {:#010x}>",
                assembly(Some(*module)),
                0x0600_0000 | rid
            )
        }
        MethodKey::Instance(inst) => match inst.slot {
            Some(slot) => format!(
                "[{}] <instantiation of slot {slot} at RVA {rva:#x}>",
                assembly(inst.module)
            ),
            None => format!(
                "[{}] <instantiation of token {:#010x} at RVA {rva:#x}>",
                assembly(inst.module),
                inst.token.0
            ),
        },
    }
}
