//! The Loader contract, the parts that list modules and find their metadata.
//!
//! Modules are found through the `AppDomain` global: its assembly list is an
//! `ArrayListBase` (a first block of entries inline, then a chain of blocks) of
//! `DomainAssembly*`s (`DomainAssemblyList`, .NET 8 to 10) or `Assembly*`s (`AssemblyList`,
//! .NET 11: the record `AppDomainLayout` says which), each leading to its `Assembly` and
//! `Module`. A module's image is
//! `Module.PEAssembly` → `PEAssembly.PEImage` → `PEImage.LoadedImageLayout` (base, size,
//! flags).
//!
//! Runtimes describe this in two ways, and both are read:
//! * .NET 8 (our shipped descriptor): a `DomainAssembly` type, the path in `PEImage.Path`
//!   (the UTF-16 buffer of an embedded `SString`), and `Assembly.IsDynamic`.
//! * .NET 9 and later, as the runtime publishes it: no `DomainAssembly` type (a list
//!   entry's first pointer is its `Assembly*`, as upstream's contract reads it), the path
//!   in `Module.Path` (a pointer to UTF-16), and a dynamic module is one whose `Module.Flags`
//!   has `ReflectionEmit`.
//!
//! Dynamic (Reflection.Emit) modules have no PE image: their metadata is the copy the
//! runtime saves each time a type is created (`Module.DynamicMetadata`, see
//! [`dynamic_metadata`]).

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Serialize;

use super::fields::{Fields, FlagWidth};
use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::formats::ecma::pe::{metadata_by_parts, metadata_from_pe, PeLayout};
use crate::limits::Limit;
use crate::memory::Target;
use crate::records::loader::{AppDomainLayout, AssemblyListEntries};

/// `PEImageLayout.Flags`: the image is laid out as the loader maps it (RVA = offset).
const LAYOUT_FLAG_MAPPED: u32 = 0x1;
/// `Module.Flags`: Reflection.Emit made the module.
const MODULE_FLAG_REFLECTION_EMIT: u32 = 0x40;

/// One loaded module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleInfo {
    /// The runtime's `Module*`.
    pub address: u64,
    /// The `Assembly*` that owns it.
    pub assembly: u64,
    /// The `DomainAssembly*` the AppDomain's list holds (the `Assembly*` on .NET 11, whose
    /// list holds assemblies).
    pub domain_assembly: u64,
    /// The image file's path (`None` for dynamic modules or when unreadable).
    pub path: Option<PathBuf>,
    /// The path's last component.
    pub file_name: Option<String>,
    /// Where the image is loaded (0 when it has none).
    pub base: u64,
    /// Bytes of the loaded image (SizeOfImage when mapped, the file's length when flat).
    pub size: u64,
    /// True when the image is laid out as the loader maps it (ReadyToRun images); false for
    /// the flat (file) layout of IL-only images.
    pub mapped: bool,
    /// A Reflection.Emit module (no PE image).
    pub is_dynamic: bool,
    /// The assembly can be unloaded.
    pub is_collectible: bool,
    /// The module's `ReadyToRunInfo*` (0 for IL-only images).
    pub ready_to_run_info: u64,
}

/// The Loader contract (version 1) of one runtime: its modules and their metadata. The
/// free functions below do the same over borrowed memory and descriptor.
#[derive(Debug, Clone)]
pub struct Loader {
    target: Target,
    descriptor: DataDescriptor,
}

impl Contract for Loader {
    const NAME: &'static str = "Loader";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => Ok(Loader {
                target: context.target.clone(),
                descriptor: context.descriptor.clone(),
            }),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

impl Loader {
    /// The `DomainAssembly*`s of the AppDomain's assembly list ([`domain_assemblies`]).
    pub fn domain_assemblies(&self) -> Result<Vec<u64>, ContractError> {
        domain_assemblies(&self.target, &self.descriptor)
    }

    /// Every loaded module ([`modules`]).
    pub fn modules(&self) -> Result<Vec<ModuleInfo>, ContractError> {
        modules(&self.target, &self.descriptor)
    }

    /// The metadata of a module ([`module_metadata`]).
    pub fn module_metadata(&self, module: &ModuleInfo) -> Result<Option<Vec<u8>>, ContractError> {
        module_metadata(&self.target, &self.descriptor, module)
    }
}

/// The `DomainAssembly*`s of the AppDomain's assembly list, in list order, without
/// duplicates or null entries.
pub fn domain_assemblies(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<Vec<u64>, ContractError> {
    let f = Fields::new(target, descriptor);
    let app_domain = target.read_pointer(f.global("AppDomain")?)?;
    if app_domain == 0 {
        return Ok(Vec::new());
    }
    let list = app_domain.wrapping_add(AppDomainLayout::from_descriptor(descriptor)?.assembly_list);
    let count = u64::from(f.u32(list, "ArrayListBase", "Count")?);
    let max_list = target.limits().max_list_length;
    if count > max_list {
        return Err(ContractError::LimitExceeded {
            what: "AppDomain assembly list",
            addr: list,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "assemblies",
        });
    }
    let mut out = Vec::new();
    let mut seen_entries = HashSet::new();
    let mut seen_blocks = HashSet::new();
    let mut block = list.wrapping_add(f.off("ArrayListBase", "FirstBlock")?);
    let mut left = count;
    let mut blocks = 0u64;
    while left > 0 && block != 0 {
        blocks += 1;
        if blocks > max_list || !seen_blocks.insert(block) {
            return Err(ContractError::LimitExceeded {
                what: "AppDomain assembly list blocks",
                addr: list,
                limit: Limit::ListLength,
                cap: max_list,
                unit: "blocks (or a cycle)",
            });
        }
        let size = u64::from(f.u32(block, "ArrayListBlock", "Size")?);
        if size == 0 || size > max_list {
            return Err(ContractError::Corrupt {
                what: "ArrayListBlock",
                addr: block,
                detail: format!("block size {size}"),
            });
        }
        let take = size.min(left);
        let start = block.wrapping_add(f.off("ArrayListBlock", "ArrayStart")?);
        for p in target.read_pointers(start, take as usize)? {
            if p != 0 && seen_entries.insert(p) {
                out.push(p);
            }
        }
        left -= take;
        block = f.ptr(block, "ArrayListBlock", "Next")?;
    }
    Ok(out)
}

/// Every module of the AppDomain's assemblies. A module whose details cannot be read is
/// still listed with what could be read (a warning says what failed).
pub fn modules(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<Vec<ModuleInfo>, ContractError> {
    let f = Fields::new(target, descriptor);
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let described = descriptor.ty("DomainAssembly").is_ok();
    let entries = AppDomainLayout::from_descriptor(descriptor)?.entries;
    for da in domain_assemblies(target, descriptor)? {
        let assembly = if entries == AssemblyListEntries::Assemblies {
            da
        } else if described {
            f.ptr(da, "DomainAssembly", "Assembly")?
        } else {
            // The runtime does not describe the entry: its first pointer is the Assembly.
            target.read_pointer(da)?
        };
        let mut module = if f.has("DomainAssembly", "Module") {
            f.ptr(da, "DomainAssembly", "Module")?
        } else {
            0
        };
        if module == 0 && assembly != 0 {
            module = f.ptr(assembly, "Assembly", "Module")?;
        }
        if module == 0 || !seen.insert(module) {
            continue;
        }
        match module_info(&f, da, assembly, module) {
            Ok(info) => out.push(info),
            Err(e) => {
                tracing::warn!("module {module:#x}: {e}");
                out.push(ModuleInfo {
                    address: module,
                    assembly,
                    domain_assembly: da,
                    path: None,
                    file_name: None,
                    base: 0,
                    size: 0,
                    mapped: false,
                    is_dynamic: false,
                    is_collectible: false,
                    ready_to_run_info: 0,
                });
            }
        }
    }
    Ok(out)
}

fn module_info(
    f: &Fields<'_>,
    domain_assembly: u64,
    assembly: u64,
    module: u64,
) -> Result<ModuleInfo, ContractError> {
    // Upstream's contract reads IsCollectible as one byte; .NET 8's descriptor types it.
    let is_collectible =
        assembly != 0 && f.flag(assembly, "Assembly", "IsCollectible", FlagWidth::One)?;
    let is_dynamic = if f.has("Assembly", "IsDynamic") {
        assembly != 0 && f.flag(assembly, "Assembly", "IsDynamic", FlagWidth::One)?
    } else {
        f.u32(module, "Module", "Flags")? & MODULE_FLAG_REFLECTION_EMIT != 0
    };
    let ready_to_run_info = if f.has("Module", "ReadyToRunInfo") {
        f.ptr(module, "Module", "ReadyToRunInfo")?
    } else {
        0
    };
    let mut info = ModuleInfo {
        address: module,
        assembly,
        domain_assembly,
        path: None,
        file_name: None,
        base: 0,
        size: 0,
        mapped: false,
        is_dynamic,
        is_collectible,
        ready_to_run_info,
    };
    let pe_assembly = f.ptr(module, "Module", "PEAssembly")?;
    let image = if pe_assembly == 0 {
        0
    } else {
        f.ptr(pe_assembly, "PEAssembly", "PEImage")?
    };
    let path_buf = if f.has("Module", "Path") {
        f.ptr(module, "Module", "Path")?
    } else if image != 0 {
        f.ptr(image, "PEImage", "Path")?
    } else {
        0
    };
    if path_buf != 0 {
        match f.t.read_utf16_c_string(path_buf, f.t.limits().string_cap()) {
            Ok(p) if !p.is_empty() => {
                let path = PathBuf::from(p);
                info.file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                info.path = Some(path);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("module {module:#x}: path: {e}"),
        }
    }
    if image == 0 {
        return Ok(info);
    }
    let layout = f.ptr(image, "PEImage", "LoadedImageLayout")?;
    if layout != 0 {
        info.base = f.ptr(layout, "PEImageLayout", "Base")?;
        info.size = u64::from(f.u32(layout, "PEImageLayout", "Size")?);
        info.mapped = f.u32(layout, "PEImageLayout", "Flags")? & LAYOUT_FLAG_MAPPED != 0;
    }
    Ok(info)
}

/// The metadata a dynamic module's runtime saved for debuggers, or `None` when the runtime
/// has saved none (no type created yet) or the descriptor does not describe it.
///
/// `Module.DynamicMetadata` points either at a `DynamicMetadata` (size, then the bytes
/// inline: .NET 9 and later) or, in .NET 8, at an `SBuffer` (size, and a pointer to the
/// bytes); the descriptor says which by the type it describes. The blob is at most the
/// target's read-size limit.
pub fn dynamic_metadata(
    target: &Target,
    descriptor: &DataDescriptor,
    module: u64,
) -> Result<Option<Vec<u8>>, ContractError> {
    let f = Fields::new(target, descriptor);
    if !f.has("Module", "DynamicMetadata") {
        return Ok(None);
    }
    let holder = f.ptr(module, "Module", "DynamicMetadata")?;
    if holder == 0 {
        return Ok(None);
    }
    let (size, data) = if f.has("DynamicMetadata", "Data") {
        (
            f.u32(holder, "DynamicMetadata", "Size")?,
            holder
                .checked_add(f.off("DynamicMetadata", "Data")?)
                .ok_or_else(|| ContractError::Corrupt {
                    what: "DynamicMetadata",
                    addr: holder,
                    detail: "data offset runs past the address space".into(),
                })?,
        )
    } else if f.has("SBuffer", "Buffer") {
        (
            f.u32(holder, "SBuffer", "Size")?,
            f.ptr(holder, "SBuffer", "Buffer")?,
        )
    } else {
        // Neither holder type described: the saved copy cannot be located.
        return Ok(None);
    };
    if size == 0 || data == 0 {
        return Ok(None);
    }
    let max_read = target.limits().max_read_bytes;
    if u64::from(size) > max_read {
        return Err(ContractError::LimitExceeded {
            what: "saved metadata of a dynamic module",
            addr: holder,
            limit: Limit::ReadSize,
            cap: max_read,
            unit: "bytes",
        });
    }
    Ok(Some(target.read_bytes(data, size as usize)?))
}

/// Most bytes a dump's copy of a module's metadata may differ from its file's and still be
/// taken for damage to the same file (a hundredth: 5,000 random 8-byte writes across
/// CoreLib's 15 MiB image change 0.2 % of its metadata; another build of the same length
/// differs nearly everywhere, its heaps and rows shifted).
const DAMAGE_FRACTION: usize = 100;

/// The metadata read from a core dump, checked against the module's file on disk where
/// the file is there: the same blob but for a few bytes is the same file with damage in
/// the dump, and the file's copy is used (with a warning) so that no name is read from
/// garbled tables. A blob of another length, or one differing widely, is another build of
/// the file: the dump's copy is the truth then.
fn undamaged_metadata(target: &Target, module: &ModuleInfo, md: Vec<u8>) -> Vec<u8> {
    if !matches!(
        target.source().kind(),
        crate::memory::TargetKind::CoreDump { .. }
    ) {
        return md;
    }
    let Some(path) = module.path.as_deref().map(|p| target.local_path(p)) else {
        return md;
    };
    let Ok(map) = crate::memory::map_regular_file(&path) else {
        return md;
    };
    let Ok(on_disk) = metadata_from_pe(&map, PeLayout::File) else {
        return md;
    };
    if on_disk.len() != md.len() || on_disk == md.as_slice() {
        return md;
    }
    let differing = on_disk.iter().zip(&md).filter(|(a, b)| a != b).count();
    if differing > md.len() / DAMAGE_FRACTION {
        tracing::debug!(
            "{}: the dump's metadata differs from the file's in {differing} bytes: another build; the dump's is used",
            path.display()
        );
        return md;
    }
    // Each module's metadata is read by several readers of one command: said once.
    let what = format!("the image of {} differs from its file", path.display());
    if target.note_damage(what) {
        tracing::warn!(
            "{}: the dump's copy of this module's metadata differs from the file on disk in {differing} of {} bytes (damage in the dump): names are read from the file",
            path.display(),
            md.len()
        );
    }
    on_disk.to_vec()
}

/// The module's metadata blob (what the CLI header's MetaData directory points to): read
/// from the image in target memory (at most the target's read-size limit), or, when that
/// fails, from the image file at the module's path; for dynamic modules, the copy the
/// runtime saved ([`dynamic_metadata`]). `None` when none of these can be read (a warning
/// says why).
pub fn module_metadata(
    target: &Target,
    descriptor: &DataDescriptor,
    module: &ModuleInfo,
) -> Result<Option<Vec<u8>>, ContractError> {
    if module.is_dynamic {
        return dynamic_metadata(target, descriptor, module.address);
    }
    if module.base != 0 && module.size != 0 {
        let layout = if module.mapped {
            PeLayout::Mapped
        } else {
            PeLayout::File
        };
        // The headers, then the metadata alone: never more than the image, nor more than
        // the read-size limit in one read.
        let max_read = target.limits().max_read_bytes;
        let mut too_large = None;
        let mut read = |offset: u64, len: usize| -> Option<Vec<u8>> {
            let end = offset.checked_add(len as u64)?;
            if end > module.size {
                return None;
            }
            if len as u64 > max_read {
                too_large = Some(len);
                return None;
            }
            target
                .read_bytes(module.base.checked_add(offset)?, len)
                .ok()
        };
        match metadata_by_parts(&mut read, layout) {
            Ok(md) => return Ok(Some(undamaged_metadata(target, module, md))),
            Err(_) if too_large.is_some() => tracing::warn!(
                "module {:#x}: its metadata ({} bytes) is larger than the {max_read} read from \
                 memory at once (--max-read-bytes); reading its file instead",
                module.address,
                too_large.unwrap_or_default()
            ),
            Err(e) => tracing::debug!(
                "module {:#x}: metadata in target memory: {e}",
                module.address
            ),
        }
    }
    let Some(path) = &module.path else {
        return Ok(None);
    };
    match crate::memory::map_regular_file(path) {
        Ok(map) => match metadata_from_pe(&map, PeLayout::File) {
            Ok(md) => Ok(Some(md.to_vec())),
            Err(e) => {
                tracing::warn!("{}: metadata: {e}", path.display());
                Ok(None)
            }
        },
        Err(e) => {
            tracing::warn!("{}: {e}", path.display());
            Ok(None)
        }
    }
}
