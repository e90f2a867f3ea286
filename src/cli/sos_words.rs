//! SOS's words as cdac commands: `cdac dumpheap -stat --dump core` runs `cdac heap --dump
//! core`. The command line is rewritten before it is parsed: the SOS command becomes the
//! cdac one, SOS's common flags their cdac spelling, and a flag with no cdac counterpart is
//! refused with what to write instead. Options that are cdac's own (`--pid`, `--dump`,
//! `--json`, ...) pass through unchanged.

use std::ffi::OsString;

/// What an SOS flag becomes.
#[derive(Clone, Copy)]
enum Flag {
    /// Dropped: it asks for what the cdac command does anyway.
    Default,
    /// Replaced by this cdac option (and keeps its value, when it takes one).
    To(&'static str),
    /// `-type`: a substring in SOS, a regular expression in cdac (escaped).
    TypeSubstring,
    /// Not supported: the reason, with the cdac spelling where there is one.
    Refused(&'static str),
}

/// One SOS command: its cdac command, the options it always adds, and its flags.
struct Word {
    sos: &'static [&'static str],
    cdac: &'static [&'static str],
    /// Flags with values (`-mt X`) list their cdac option in `To` and are named here too.
    flags: &'static [(&'static str, Flag, bool)],
}

const WORDS: &[Word] = &[
    Word {
        sos: &["dumpheap"],
        cdac: &["heap"],
        flags: &[
            ("-stat", Flag::Default, false),
            ("-mt", Flag::To("--mt"), true),
            ("-type", Flag::TypeSubstring, true),
            ("-min", Flag::To("--min-size"), true),
            ("-max", Flag::To("--max-size"), true),
            ("-live", Flag::To("--live"), false),
            ("-gen", Flag::To("--gen"), true),
            (
                "-short",
                Flag::Refused("cdac heap --objects --json lists addresses"),
                false,
            ),
        ],
    },
    Word {
        sos: &["dumpobj", "do"],
        cdac: &["obj"],
        flags: &[(
            "-nofields",
            Flag::Refused("cdac obj always prints the fields"),
            false,
        )],
    },
    Word {
        sos: &["clrstack"],
        cdac: &["stacks"],
        flags: &[
            ("-all", Flag::Default, false),
            ("-f", Flag::To("--native"), false),
            ("-gc", Flag::To("--gc"), false),
            (
                "-a",
                Flag::Refused("arguments and locals are not read yet (cdac stacks --gc lists the live GC slots)"),
                false,
            ),
            (
                "-l",
                Flag::Refused("locals are not read yet (cdac stacks --gc lists the live GC slots)"),
                false,
            ),
            (
                "-p",
                Flag::Refused("arguments are not read yet (cdac stacks --gc lists the live GC slots)"),
                false,
            ),
        ],
    },
    Word {
        sos: &["clrthreads"],
        cdac: &["threads"],
        flags: &[],
    },
    Word {
        sos: &["syncblk"],
        cdac: &["locks"],
        flags: &[("-all", Flag::Default, false)],
    },
    Word {
        sos: &["gcroot"],
        cdac: &["gcroot"],
        flags: &[("-all", Flag::To("--all"), false)],
    },
    Word {
        sos: &["dumpasync"],
        cdac: &["async"],
        flags: &[
            ("-completed", Flag::To("--completed"), false),
            ("-tasks", Flag::To("--tasks"), false),
            ("-stacks", Flag::To("--stacks"), false),
        ],
    },
    Word {
        sos: &["eeheap"],
        cdac: &["heap", "--segments"],
        flags: &[
            ("-gc", Flag::Default, false),
            (
                "-loader",
                Flag::Refused("the loader heaps are not read yet (cdac modules lists the modules)"),
                false,
            ),
        ],
    },
    Word {
        sos: &["gchandles"],
        cdac: &["handles"],
        flags: &[("-stat", Flag::To("--stat"), false)],
    },
    Word {
        sos: &["finalizequeue", "fq"],
        cdac: &["finalizequeue"],
        flags: &[("-allReady", Flag::Default, false)],
    },
    Word {
        sos: &["dumpmt"],
        cdac: &["mt"],
        flags: &[(
            "-md",
            Flag::Refused("the MethodTable's method slots are not listed yet (cdac methods lists every method with code)"),
            false,
        )],
    },
    Word {
        sos: &["dumpmd"],
        cdac: &["md"],
        flags: &[],
    },
    Word {
        // `name2ee MODULE NAME` and `name2ee MODULE!NAME`, as `find` takes them.
        sos: &["name2ee"],
        cdac: &["find"],
        flags: &[],
    },
    Word {
        sos: &["threadpool", "tp"],
        cdac: &["threadpool"],
        flags: &[],
    },
];

/// SOS commands cdac does not have yet, and what to use meanwhile.
const NOT_YET: &[(&str, &str)] = &[
    (
        "pe",
        "cdac analyze lists the exceptions in flight; cdac obj ADDR shows one",
    ),
    (
        "printexception",
        "cdac analyze lists the exceptions in flight; cdac obj ADDR shows one",
    ),
    ("dumpclass", "not yet"),
    (
        "dso",
        "not yet; cdac stacks --gc lists each frame's live references",
    ),
    (
        "dumpstackobjects",
        "not yet; cdac stacks --gc lists each frame's live references",
    ),
    ("dumpil", "not yet"),
    ("u", "not yet"),
    ("dumplog", "not yet"),
    ("dumpdomain", "not yet; cdac modules lists the modules"),
    ("dumpassembly", "not yet; cdac modules lists the modules"),
];

/// The command line with an SOS command (`args[1]`) rewritten as its cdac command; other
/// command lines unchanged. `Err` says why an SOS command or flag cannot be run, and what
/// to write instead.
pub fn translate(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return Ok(args);
    };
    let first = first.to_ascii_lowercase();
    if let Some((word, instead)) = NOT_YET.iter().find(|(w, _)| *w == first) {
        return Err(format!("SOS's {word} has no cdac command: {instead}"));
    }
    let Some(word) = WORDS.iter().find(|w| w.sos.contains(&first.as_str())) else {
        return Ok(args);
    };
    let mut out: Vec<OsString> = vec![args[0].clone()];
    out.extend(word.cdac.iter().map(OsString::from));
    let mut objects = word.cdac == ["heap"];
    let mut rest = args.into_iter().skip(2);
    while let Some(arg) = rest.next() {
        let text = arg.to_str().unwrap_or_default();
        // cdac's own options (two dashes) and positional values pass through.
        if !text.starts_with('-') || text.starts_with("--") || text.len() == 1 {
            out.push(arg);
            continue;
        }
        let Some(&(_, flag, takes_value)) = word
            .flags
            .iter()
            .find(|(f, ..)| f.eq_ignore_ascii_case(text))
        else {
            return Err(format!(
                "SOS's {first} {text} has no cdac counterpart; see `cdac {} --help`",
                word.cdac[0]
            ));
        };
        let value = if takes_value {
            Some(
                rest.next()
                    .ok_or_else(|| format!("SOS's {first} {text} needs a value"))?,
            )
        } else {
            None
        };
        match flag {
            Flag::Default => {
                if text.eq_ignore_ascii_case("-stat") {
                    objects = false;
                }
            }
            Flag::To(option) => {
                out.push(option.into());
                out.extend(value);
            }
            Flag::TypeSubstring => {
                out.push("--type".into());
                let v = value.unwrap_or_default();
                out.push(regex::escape(&v.to_string_lossy()).into());
            }
            Flag::Refused(why) => {
                return Err(format!("SOS's {first} {text}: {why}"));
            }
        }
    }
    // SOS's dumpheap lists every object unless -stat asks for the statistics.
    if objects {
        out.insert(2, "--objects".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<String, String> {
        let args = line.split(' ').map(OsString::from).collect();
        translate(args).map(|v| {
            v.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
    }

    #[test]
    fn sos_words_become_cdac_commands() {
        assert_eq!(
            run("cdac dumpheap -stat --dump c").unwrap(),
            "cdac heap --dump c"
        );
        assert_eq!(
            run("cdac dumpheap -mt 0x10 --dump c").unwrap(),
            "cdac heap --objects --mt 0x10 --dump c"
        );
        assert_eq!(
            run("cdac dumpheap -stat -type List`1 -min 100 --json --pid 7").unwrap(),
            "cdac heap --type List`1 --min-size 100 --json --pid 7"
        );
        assert_eq!(
            run("cdac dumpheap -stat -type System.String[] --dump c").unwrap(),
            "cdac heap --type System\\.String\\[\\] --dump c"
        );
        assert_eq!(
            run("cdac do 0x1234 --dump c").unwrap(),
            "cdac obj 0x1234 --dump c"
        );
        assert_eq!(
            run("cdac clrstack -all -f --pid 3").unwrap(),
            "cdac stacks --native --pid 3"
        );
        assert_eq!(run("cdac SyncBlk --dump c").unwrap(), "cdac locks --dump c");
        assert_eq!(
            run("cdac eeheap -gc --dump c").unwrap(),
            "cdac heap --segments --dump c"
        );
        assert_eq!(
            run("cdac gcroot -all 0x10 --dump c").unwrap(),
            "cdac gcroot --all 0x10 --dump c"
        );
        // cdac's own commands are left alone.
        assert_eq!(
            run("cdac heap --objects --dump c").unwrap(),
            "cdac heap --objects --dump c"
        );
    }

    #[test]
    fn flags_without_a_counterpart_are_refused_with_the_cdac_spelling() {
        let e = run("cdac clrstack -a --dump c").unwrap_err();
        assert!(e.contains("-a") && e.contains("cdac stacks --gc"), "{e}");
        let e = run("cdac dumpheap -bogus --dump c").unwrap_err();
        assert!(e.contains("cdac heap --help"), "{e}");
        let e = run("cdac dumpheap -mt").unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
        let e = run("cdac dumpclass 0x10").unwrap_err();
        assert!(e.contains("dumpclass") && e.contains("not yet"), "{e}");
        let e = run("cdac dumpmt -md 0x10").unwrap_err();
        assert!(e.contains("cdac methods"), "{e}");
        // The commands that have come since translate.
        assert_eq!(
            run("cdac name2ee M.dll N.T --dump c").unwrap(),
            "cdac find M.dll N.T --dump c"
        );
        assert_eq!(run("cdac dumpmd 0x10").unwrap(), "cdac md 0x10");
    }
}
