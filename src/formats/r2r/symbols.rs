//! An image's ReadyToRun PerfMap, made offline from the image file: one entry per hot or
//! cold part of every compiled method (a part covers the method's body and funclets), named
//! as the runtime names the method in its perf map (what `cdac ip2md` prints).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

use super::image::{R2rImage, TargetArch, TargetOs};
use super::methods::{compiled_methods, method_def_of, CompiledMethod, MethodKey};
use super::perf_map::{R2rPerfMap, R2rPerfMapEntry, FORMAT_VERSION};
use super::signature::ModuleSet;
use super::R2rError;
use crate::formats::ecma::names::PerfMapNameOptions;
use crate::formats::ecma::pe::{metadata_from_pe, PeLayout};
use crate::formats::ecma::{Metadata, TableId};

/// How [`r2r_perf_map`] works.
#[derive(Debug, Clone, Default)]
pub struct R2rMapOptions {
    /// Where the image's referenced assemblies are looked for (to name type arguments of
    /// other assemblies); the image's own folder is always searched first.
    pub search_dirs: Vec<PathBuf>,
    /// Names as early .NET 8 builds print them, one byte short at certain lengths
    /// ([`net8_printf_drops_last_byte`](crate::formats::ecma::names::net8_printf_drops_last_byte)),
    /// for comparing with such a runtime's perf map; by default names are exact.
    pub net8_truncation: bool,
}

/// What [`r2r_perf_map`] made, with counts for the caller's report.
#[derive(Debug, Clone)]
pub struct R2rMapReport {
    pub map: R2rPerfMap,
    /// Where the signature came from: the image's PerfMap debug record, or computed.
    pub signature_from_image: bool,
    pub runtime_functions: usize,
    /// Runtime functions inside some entry.
    pub covered_functions: usize,
    pub methods: usize,
    /// Entries named with a fallback (method or type argument not decodable).
    pub fallback_names: usize,
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
    let mut h = Md5::new();
    h.update(mvid);
    for v in [os, arch, abi] {
        h.update(v.to_le_bytes());
    }
    Ok(h.finalize().into())
}

/// Reads the files of the image's AssemblyRefs found in `dirs` (index = AssemblyRef rid).
fn referenced_files(md: &Metadata<'_>, dirs: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    let count = md.tables.rows(TableId::AssemblyRef);
    let mut out = vec![None];
    for rid in 1..=count {
        let name = md
            .assembly_ref(rid)
            .ok()
            .and_then(|r| md.strings.get(r.name).ok().map(str::to_string));
        let file = name.and_then(|n| {
            dirs.iter()
                .map(|d| d.join(format!("{n}.dll")))
                .find_map(|p| std::fs::read(p).ok())
        });
        out.push(file);
    }
    out
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

/// The ReadyToRun PerfMap of an image given as bytes; referenced assemblies are looked for
/// in `dirs` only.
pub fn r2r_perf_map_from_bytes(
    bytes: &[u8],
    dirs: &[PathBuf],
    options: &R2rMapOptions,
) -> Result<R2rMapReport, R2rError> {
    let img = R2rImage::parse(bytes)?;
    let md = Metadata::parse(img.metadata)?;
    let files = referenced_files(&md, dirs);
    let parsed: Vec<Option<Metadata<'_>>> = files
        .iter()
        .map(|f| {
            f.as_deref()
                .and_then(|b| metadata_from_pe(b, PeLayout::File).ok())
                .and_then(|m| Metadata::parse(m).ok())
        })
        .collect();
    let mut modules: Vec<Option<&Metadata<'_>>> = vec![Some(&md)];
    modules.extend(parsed.iter().skip(1).map(Option::as_ref));
    let set = ModuleSet { modules };
    let methods = compiled_methods(&img, &md, &set)?;

    let (os, arch, abi) = (perf_map_os(img.os), perf_map_arch(img.arch), 1);
    let (signature, from_image) = match &img.perf_map_entry {
        Some(e) => (e.signature, true),
        None => (computed_signature(&md, os, arch, abi)?, false),
    };
    let own_assembly = md.assembly_name()?.into_owned();
    let mut names: HashMap<usize, String> = HashMap::new();
    let mut fallback_names = 0;
    let mut entries = Vec::new();
    let mut covered = 0;
    for m in &methods {
        let name = match method_name(&md, &set, &own_assembly, m, options) {
            Some(n) => n,
            None => {
                fallback_names += 1;
                fallback_name(&md, &own_assembly, &img, m)
            }
        };
        for (first, count) in [(Some(m.first), m.count), (m.cold, m.cold_count)] {
            let Some(first) = first else { continue };
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
        names.insert(m.first, name);
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
        methods: methods.len(),
        fallback_names,
    })
}

fn method_name(
    md: &Metadata<'_>,
    set: &ModuleSet<'_, '_>,
    own_assembly: &str,
    m: &CompiledMethod,
    options: &R2rMapOptions,
) -> Option<String> {
    match &m.key {
        MethodKey::MethodDef(rid) => md
            .perf_map_method_name(
                *rid,
                &PerfMapNameOptions {
                    assembly_name: Some(own_assembly),
                    net8_truncation: options.net8_truncation,
                    ..PerfMapNameOptions::default()
                },
            )
            .ok(),
        MethodKey::Instance(inst) => {
            let module = *set.modules.get(inst.module as usize)?.as_ref()?;
            let rid = method_def_of(module, inst.token)?;
            let args: Vec<&str> = inst.type_args.iter().map(String::as_str).collect();
            module
                .perf_map_method_name(
                    rid,
                    &PerfMapNameOptions {
                        type_instantiation: if args.is_empty() { None } else { Some(&args) },
                        assembly_name: None,
                        net8_truncation: options.net8_truncation,
                    },
                )
                .ok()
        }
        MethodKey::Undecoded(_) => None,
    }
}

fn fallback_name(
    md: &Metadata<'_>,
    own_assembly: &str,
    img: &R2rImage<'_>,
    m: &CompiledMethod,
) -> String {
    let rva = img.runtime_functions.get(m.first).map_or(0, |f| f.begin);
    match &m.key {
        MethodKey::MethodDef(rid) => {
            format!("[{own_assembly}] <token {:#010x}>", 0x0600_0000 | rid)
        }
        MethodKey::Instance(inst) => {
            let _ = md;
            format!(
                "[{own_assembly}] <instantiation of token {:#010x} at RVA {rva:#x}>",
                inst.token.0
            )
        }
        MethodKey::Undecoded(_) => {
            format!("[{own_assembly}] <instantiated method at RVA {rva:#x}>")
        }
    }
}
