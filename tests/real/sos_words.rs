//! SOS's words run their cdac commands (`src/cli/sos_words.rs`): on the .NET 10 testbed's full
//! dump each SOS spelling prints exactly what its cdac spelling prints, with the same exit
//! status; an SOS flag or command cdac does not have is refused (exit 2) naming what to use.

use std::process::Command;

use crate::common::{cdac_exe, testbed_of, Variant};

fn run(args: &[&str], dump: &str) -> (Option<i32>, String, String) {
    let out = Command::new(cdac_exe())
        .args(args)
        .args(["--dump", dump])
        .output()
        .expect("run cdac");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sos_words_print_what_their_cdac_commands_print() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full").to_string_lossy().into_owned();
    // An object to ask about: the first Marker the testbed keeps.
    let (_, heap, _) = run(&["heap", "--objects", "--json", "--type", "Marker"], &dump);
    let heap: serde_json::Value = serde_json::from_str(&heap).expect("heap JSON");
    let object = heap["object_list"][0]["address"]
        .as_str()
        .expect("a Marker")
        .to_string();
    let method_table = heap["object_list"][0]["method_table"]
        .as_str()
        .expect("its MethodTable")
        .to_string();
    let pairs: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["dumpheap", "-stat"], vec!["heap"]),
        (
            vec!["dumpheap", "-type", "Marker"],
            vec!["heap", "--objects", "--type", "Marker"],
        ),
        (
            vec!["dumpheap", "-stat", "-min", "1000", "-gen", "2"],
            vec!["heap", "--min-size", "1000", "--gen", "2"],
        ),
        (vec!["dumpheap", "-stat", "-live"], vec!["heap", "--live"]),
        (vec!["dumpobj", &object], vec!["obj", &object]),
        (vec!["dumpmt", &method_table], vec!["mt", &method_table]),
        (
            vec!["do", &object, "--json"],
            vec!["obj", &object, "--json"],
        ),
        (
            vec!["gcroot", "-all", &object],
            vec!["gcroot", "--all", &object],
        ),
        (vec!["clrstack", "-all"], vec!["stacks"]),
        (vec!["clrstack", "-f"], vec!["stacks", "--native"]),
        (vec!["clrthreads"], vec!["threads"]),
        (vec!["syncblk"], vec!["locks"]),
        (vec!["dumpasync"], vec!["async"]),
        (vec!["eeheap", "-gc"], vec!["heap", "--segments"]),
        (vec!["gchandles", "-stat"], vec!["handles", "--stat"]),
        (vec!["finalizequeue"], vec!["finalizequeue"]),
        (vec!["threadpool"], vec!["threadpool"]),
    ];
    for (sos, cdac) in &pairs {
        let a = run(sos, &dump);
        let b = run(cdac, &dump);
        assert_eq!((a.0, &a.1), (b.0, &b.1), "{sos:?} vs {cdac:?}: {}", a.2);
        assert!(!a.1.is_empty(), "{sos:?} printed nothing");
    }
    for (sos, says) in [
        (vec!["clrstack", "-a"], "cdac stacks --gc"),
        (vec!["dumpheap", "-bogus"], "cdac heap --help"),
        (vec!["pe"], "cdac analyze"),
        (vec!["dumpmt", "-md", &method_table], "cdac methods"),
    ] {
        let (code, _, stderr) = run(&sos, &dump);
        assert_eq!(code, Some(2), "{sos:?}");
        assert!(stderr.contains(says), "{sos:?}: {stderr}");
    }
}
