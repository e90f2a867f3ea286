//! `cdac schema COMMAND`: the JSON Schema of a command's `--json` output, generated from
//! the types that print it (so it cannot drift from what the command prints).

use clap::{Args, ValueEnum};

use super::{CliResult, Outcome};

/// The commands whose `--json` output has a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaCommand {
    /// `cdac info --json`.
    Info,
    /// `cdac ip2md --json`.
    Ip2md,
    /// `cdac eh --json`.
    Eh,
    /// `cdac unwind --json`.
    Unwind,
    /// `cdac gcinfo --json`.
    Gcinfo,
    /// `cdac modules --json`.
    Modules,
    /// `cdac methods --json`.
    Methods,
    /// `cdac threads --json`.
    Threads,
    /// `cdac stacks --json`.
    Stacks,
    /// `cdac analyze --json`.
    Analyze,
    /// `cdac heap --json` (per type) and `cdac heap --objects --json`.
    Heap,
    /// `cdac heap --segments --json`.
    HeapSegments,
    /// `cdac handles --json`.
    Handles,
    /// `cdac finalizequeue --json`.
    Finalizequeue,
    /// `cdac obj --json`.
    Obj,
    /// `cdac gcroot --json`.
    Gcroot,
    /// `cdac objsize --json`.
    Objsize,
    /// `cdac gcwhere --json`.
    Gcwhere,
    /// `cdac mt --json`.
    Mt,
    /// `cdac md --json`.
    Md,
    /// `cdac find --json`.
    Find,
    /// `cdac verifyheap --json`.
    Verifyheap,
    /// `cdac locks --json`.
    Locks,
    /// `cdac async --json`.
    Async,
    /// `cdac threadpool --json`.
    Threadpool,
}

impl SchemaCommand {
    /// Every command with a schema.
    pub const ALL: [SchemaCommand; 25] = [
        SchemaCommand::Info,
        SchemaCommand::Ip2md,
        SchemaCommand::Eh,
        SchemaCommand::Unwind,
        SchemaCommand::Gcinfo,
        SchemaCommand::Modules,
        SchemaCommand::Methods,
        SchemaCommand::Threads,
        SchemaCommand::Stacks,
        SchemaCommand::Analyze,
        SchemaCommand::Heap,
        SchemaCommand::HeapSegments,
        SchemaCommand::Handles,
        SchemaCommand::Finalizequeue,
        SchemaCommand::Obj,
        SchemaCommand::Gcroot,
        SchemaCommand::Objsize,
        SchemaCommand::Gcwhere,
        SchemaCommand::Mt,
        SchemaCommand::Md,
        SchemaCommand::Find,
        SchemaCommand::Verifyheap,
        SchemaCommand::Locks,
        SchemaCommand::Async,
        SchemaCommand::Threadpool,
    ];

    /// The command's name.
    pub fn name(self) -> &'static str {
        match self {
            SchemaCommand::Info => "info",
            SchemaCommand::Ip2md => "ip2md",
            SchemaCommand::Eh => "eh",
            SchemaCommand::Unwind => "unwind",
            SchemaCommand::Gcinfo => "gcinfo",
            SchemaCommand::Modules => "modules",
            SchemaCommand::Methods => "methods",
            SchemaCommand::Threads => "threads",
            SchemaCommand::Stacks => "stacks",
            SchemaCommand::Analyze => "analyze",
            SchemaCommand::Heap => "heap",
            SchemaCommand::HeapSegments => "heap-segments",
            SchemaCommand::Handles => "handles",
            SchemaCommand::Finalizequeue => "finalizequeue",
            SchemaCommand::Obj => "obj",
            SchemaCommand::Gcroot => "gcroot",
            SchemaCommand::Objsize => "objsize",
            SchemaCommand::Gcwhere => "gcwhere",
            SchemaCommand::Mt => "mt",
            SchemaCommand::Md => "md",
            SchemaCommand::Find => "find",
            SchemaCommand::Verifyheap => "verifyheap",
            SchemaCommand::Locks => "locks",
            SchemaCommand::Async => "async",
            SchemaCommand::Threadpool => "threadpool",
        }
    }

    /// The schema of the command's output.
    pub fn schema(self) -> schemars::Schema {
        use super::model::{Method, Module};
        let mut schema = match self {
            SchemaCommand::Info => schemars::schema_for!(super::info::InfoReport),
            SchemaCommand::Ip2md => schemars::schema_for!(Vec<super::code::Ip2mdItem>),
            SchemaCommand::Eh => schemars::schema_for!(super::code::EhReport),
            SchemaCommand::Unwind => schemars::schema_for!(super::code::UnwindReport),
            SchemaCommand::Gcinfo => schemars::schema_for!(Vec<super::gcinfo::GcInfoItem>),
            SchemaCommand::Modules => schemars::schema_for!(Vec<Module>),
            SchemaCommand::Methods => schemars::schema_for!(Vec<Method>),
            SchemaCommand::Threads => schemars::schema_for!(super::threads::ThreadsReport),
            SchemaCommand::Stacks => schemars::schema_for!(super::stacks::StacksReport),
            SchemaCommand::Analyze => schemars::schema_for!(super::analyze::AnalyzeReport),
            SchemaCommand::Heap => schemars::schema_for!(super::heap::HeapReport),
            SchemaCommand::HeapSegments => schemars::schema_for!(super::heap::SegmentsReport),
            SchemaCommand::Handles => schemars::schema_for!(super::handles::HandlesReport),
            SchemaCommand::Finalizequeue => {
                schemars::schema_for!(super::handles::FinalizeQueueReport)
            }
            SchemaCommand::Obj => schemars::schema_for!(super::obj::ObjReport),
            SchemaCommand::Gcroot => schemars::schema_for!(super::gcroot::GcRootReport),
            SchemaCommand::Objsize => schemars::schema_for!(super::objsize::ObjSizeReport),
            SchemaCommand::Gcwhere => schemars::schema_for!(super::gcwhere::GcWhereReport),
            SchemaCommand::Mt => schemars::schema_for!(super::mt::MtReport),
            SchemaCommand::Md => schemars::schema_for!(super::md::MdReport),
            SchemaCommand::Find => schemars::schema_for!(super::find::FindReport),
            SchemaCommand::Verifyheap => {
                schemars::schema_for!(super::verifyheap::VerifyHeapReport)
            }
            SchemaCommand::Locks => schemars::schema_for!(super::locks::LocksReport),
            SchemaCommand::Async => schemars::schema_for!(super::async_chains::AsyncJson),
            SchemaCommand::Threadpool => schemars::schema_for!(super::threadpool::ThreadPoolJson),
        };
        schema.insert(
            "title".into(),
            format!("cdac {} --json", self.name()).into(),
        );
        schema
    }
}

/// Arguments of `cdac schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The command whose `--json` output to describe (without one: the list of commands
    /// that have a schema).
    #[arg(value_enum)]
    command: Option<SchemaCommand>,
}

/// Runs `cdac schema`.
pub fn run_schema(args: &SchemaArgs) -> CliResult {
    match args.command {
        Some(c) => super::emit_json(&c.schema())?,
        None => {
            let names: Vec<&str> = SchemaCommand::ALL.iter().map(|c| c.name()).collect();
            out!("{}", names.join("\n"));
        }
    }
    Ok(Outcome::Answered)
}

#[cfg(test)]
mod tests {
    use super::SchemaCommand;

    /// `docs/schemas/COMMAND.json` is what `cdac schema COMMAND` prints (run with
    /// `CDAC_UPDATE_SCHEMAS=1` to rewrite them after changing an output type).
    #[test]
    fn committed_schemas_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schemas");
        let update = std::env::var_os("CDAC_UPDATE_SCHEMAS").is_some();
        let mut stale = Vec::new();
        for c in SchemaCommand::ALL {
            let text = serde_json::to_string_pretty(&c.schema()).expect("JSON") + "\n";
            let path = dir.join(format!("{}.json", c.name()));
            if update {
                std::fs::create_dir_all(&dir).expect("mkdir");
                std::fs::write(&path, &text).expect("write schema");
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "out of date (CDAC_UPDATE_SCHEMAS=1 cargo test --bin cdac schema): {stale:?}"
        );
    }

    /// One shape per entity: every schema that has a thread, frame, method, module or
    /// exception defines it identically.
    #[test]
    fn entities_have_one_shape_across_commands() {
        let mut seen: std::collections::BTreeMap<String, (String, serde_json::Value)> =
            Default::default();
        let mut shared = 0;
        for c in SchemaCommand::ALL {
            let schema = serde_json::to_value(c.schema()).expect("JSON");
            let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
            for (name, def) in defs {
                match seen.get(&name) {
                    Some((first, d)) => {
                        assert_eq!(d, &def, "{name} differs between {first} and {}", c.name());
                        shared += 1;
                    }
                    None => {
                        seen.insert(name, (c.name().to_string(), def));
                    }
                }
            }
        }
        for entity in ["Thread", "Frame", "Method", "Module", "Exception"] {
            assert!(seen.contains_key(entity), "{entity} has no schema");
        }
        assert!(shared > 5, "the commands share only {shared} definitions");
    }
}
