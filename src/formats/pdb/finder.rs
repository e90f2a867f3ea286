//! Finding an assembly's portable PDB: the embedded one first, then the path its CodeView
//! entry names, then `NAME.pdb` next to the assembly. A PDB counts only when its id (GUID
//! and stamp) is the one the assembly's CodeView entry names and, when the assembly has
//! SHA256 PdbChecksum entries, its checksum (SHA-256 with the id zeroed) is one of them; an
//! assembly with neither accepts any portable PDB found.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::error::{PdbError, Result};
use super::pe_debug::debug_directory;
use super::PortablePdb;

/// Where a PDB was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdbSource {
    /// The assembly's embedded portable PDB.
    Embedded,
    /// The path the assembly's CodeView entry names.
    CodeViewPath(PathBuf),
    /// `NAME.pdb` next to the assembly.
    NextToAssembly(PathBuf),
}

/// A PDB found for an assembly.
#[derive(Debug, Clone)]
pub struct FoundPdb {
    /// The PDB.
    pub pdb: PortablePdb,
    /// Where it came from.
    pub source: PdbSource,
}

fn io(path: &Path, e: std::io::Error) -> PdbError {
    PdbError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Finds the portable PDB of the assembly at `assembly` (a PE file in file layout).
pub fn find_pdb(assembly: &Path) -> Result<FoundPdb> {
    // Mapped, not read: framework assemblies are large and most have no PDB anywhere.
    let image = crate::memory::map_regular_file(assembly).map_err(|e| io(assembly, e))?;
    let image: &[u8] = &image;
    let dir = debug_directory(image)?;
    let codeview = dir.codeview(image)?;
    let mut tried: Vec<String> = Vec::new();
    // SHA256 PDB checksums the assembly names (other algorithms are not checked).
    let sha256: Vec<Vec<u8>> = dir
        .pdb_checksums(image)
        .unwrap_or_default()
        .into_iter()
        .filter(|(alg, _)| alg == "SHA256")
        .map(|(_, sum)| sum)
        .collect();
    let check = |pdb: &PortablePdb, path: &str| -> Result<()> {
        if let Some(cv) = &codeview {
            if cv.id != pdb.id {
                return Err(PdbError::IdMismatch {
                    path: path.to_string(),
                    wanted: cv.id.to_string(),
                    found: pdb.id.to_string(),
                });
            }
        }
        if !sha256.is_empty() {
            let sum = pdb.checksum_sha256();
            if !sha256.iter().any(|s| s.as_slice() == sum) {
                return Err(PdbError::ChecksumMismatch {
                    path: path.to_string(),
                });
            }
        }
        Ok(())
    };
    match dir.embedded_pdb(image) {
        Ok(Some(bytes)) => match PortablePdb::parse(bytes).and_then(|p| {
            check(&p, "embedded")?;
            Ok(p)
        }) {
            Ok(pdb) => {
                return Ok(FoundPdb {
                    pdb,
                    source: PdbSource::Embedded,
                })
            }
            Err(e) => tried.push(format!("embedded: {e}")),
        },
        Ok(None) => tried.push("no embedded PDB".into()),
        Err(e) => tried.push(format!("embedded: {e}")),
    }
    let mut candidates: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(cv) = &codeview {
        if !cv.path.is_empty() {
            // Windows-style paths do not name a file here.
            let p = PathBuf::from(cv.path.replace('\\', "/"));
            if p.is_absolute() {
                candidates.push((p, true));
            } else if let Some(parent) = assembly.parent() {
                candidates.push((parent.join(p), true));
            }
        }
    }
    candidates.push((assembly.with_extension("pdb"), false));
    for (path, from_codeview) in candidates {
        if !path.is_file() {
            tried.push(format!("{}: no such file", path.display()));
            continue;
        }
        match PortablePdb::open(&path).and_then(|p| {
            check(&p, &path.display().to_string())?;
            Ok(p)
        }) {
            Ok(pdb) => {
                let source = if from_codeview {
                    PdbSource::CodeViewPath(path)
                } else {
                    PdbSource::NextToAssembly(path)
                };
                return Ok(FoundPdb { pdb, source });
            }
            Err(e) => tried.push(e.to_string()),
        }
    }
    Err(PdbError::NotFound {
        assembly: assembly.display().to_string(),
        tried: tried.join("; "),
    })
}

/// [`find_pdb`] with a cache per assembly path (failures are cached too).
#[derive(Debug, Default)]
pub struct PdbFinder {
    cache: Mutex<HashMap<PathBuf, std::result::Result<Arc<FoundPdb>, PdbError>>>,
    /// Where the target's paths are, when its files are not at the same paths here (a
    /// process in a mount namespace of its own: `/proc/PID/root`).
    root: Option<PathBuf>,
}

impl PdbFinder {
    /// An empty cache.
    pub fn new() -> PdbFinder {
        PdbFinder::default()
    }

    /// An empty cache for a target whose files are under `root` (`None`: at their paths).
    pub fn with_root(root: Option<PathBuf>) -> PdbFinder {
        PdbFinder {
            root,
            ..PdbFinder::default()
        }
    }

    /// Where the target's file `path` is here: under the target's root when it is there.
    fn here(&self, path: &Path) -> PathBuf {
        match (&self.root, path.strip_prefix("/")) {
            (Some(root), Ok(relative)) if root.join(relative).exists() => root.join(relative),
            _ => path.to_path_buf(),
        }
    }

    /// The PDB of `assembly`, found once.
    pub fn pdb_for(&self, assembly: &Path) -> Result<Arc<FoundPdb>> {
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(assembly)
        {
            return hit.clone();
        }
        let found = find_pdb(&self.here(assembly)).map(Arc::new);
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(assembly.to_path_buf(), found.clone());
        found
    }
}
