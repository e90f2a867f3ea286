//! Function coverage taken from outside the process: which managed methods have run.
//!
//! A method has run when it has code: the JIT compiled it, or the runtime resolved its
//! ReadyToRun entry point (both found by `execution_manager::enumerate`). Methods with a
//! MethodDef are listed once per definition, for every module whose metadata can be read,
//! covered or not (the name is the definition's, generic types in open form:
//! ``List`1[T]::Add(!0)``); dynamic methods (no MethodDef: LCG and IL stubs) are listed
//! when they have code, under the name the perf map gives them.

use std::collections::HashSet;

use serde::Serialize;

use crate::contracts::execution_manager::enumerate::enumerate_code;
use crate::contracts::loader;
use crate::contracts::runtime_type_system::{method_desc_info, MethodClassification};
use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::formats::ecma::names::PerfMapNameOptions;
use crate::formats::ecma::{Metadata, TableId};
use crate::memory::Target;
use crate::names::MethodNamer;

/// One function of a coverage report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CoveredFunction {
    /// Function name, as the profile records it.
    pub name: String,
    /// True when any counter of the function is nonzero.
    pub covered: bool,
    /// The `Module*` the method belongs to.
    pub module: u64,
    /// Its MethodDef token (0 for dynamic methods).
    pub token: u32,
}

/// What [`function_coverage`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoverageReport {
    /// Every function of the profile, in its order.
    pub functions: Vec<CoveredFunction>,
    /// Code blocks enumerated (JIT'ed and resolved ReadyToRun methods).
    pub code_blocks: usize,
    /// Modules whose metadata could not be read (their methods are missing).
    pub modules_without_metadata: usize,
    /// Errors the code enumeration met (it continues past them).
    pub enumeration_errors: usize,
}

/// Which methods of the runtime have run.
pub fn function_coverage(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<CoverageReport, ContractError> {
    let en = enumerate_code(target, descriptor)?;
    let mut report = CoverageReport {
        code_blocks: en.entries.len(),
        enumeration_errors: en.errors.len(),
        ..CoverageReport::default()
    };
    let mut ran: HashSet<(u64, u32)> = HashSet::new();
    let mut dynamic = Vec::new();
    for e in &en.entries {
        match method_desc_info(target, descriptor, e.method_desc) {
            Ok(info) if info.classification == MethodClassification::Dynamic => {
                dynamic.push(e.method_desc)
            }
            Ok(info) => {
                ran.insert((info.module, info.token));
            }
            Err(err) => tracing::warn!("MethodDesc {:#x}: {err}", e.method_desc),
        }
    }
    let mut namer = MethodNamer::new(target, descriptor);
    for m in loader::modules(target, descriptor)? {
        let blob = match loader::module_metadata(target, descriptor, &m) {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => {
                report.modules_without_metadata += 1;
                continue;
            }
        };
        let md = match Metadata::parse(&blob) {
            Ok(md) => md,
            Err(e) => {
                tracing::warn!("module {:#x}: metadata: {e}", m.address);
                report.modules_without_metadata += 1;
                continue;
            }
        };
        let options = PerfMapNameOptions::default();
        for rid in 1..=md.tables.rows(TableId::MethodDef) {
            let token = 0x0600_0000 | rid;
            let name = md.perf_map_method_name(rid, &options).unwrap_or_else(|_| {
                format!("[{}] <token {token:#010x}>", namer.module_label(m.address))
            });
            report.functions.push(CoveredFunction {
                name,
                covered: ran.contains(&(m.address, token)),
                module: m.address,
                token,
            });
        }
    }
    let names = namer.names(&dynamic);
    let mut seen = HashSet::new();
    for name in names {
        if seen.insert(name.clone()) {
            report.functions.push(CoveredFunction {
                name,
                covered: true,
                module: 0,
                token: 0,
            });
        }
    }
    Ok(report)
}
