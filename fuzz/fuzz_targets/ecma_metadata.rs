//! ECMA-335 metadata (`formats::ecma`): root, streams, heaps and tables from the input (or
//! the metadata of the input read as a PE file), then every table row, and the names and
//! signatures of every TypeDef and MethodDef.
#![no_main]

use cdac::formats::ecma::pe::{metadata_from_pe, PeLayout};
use cdac::formats::ecma::{Metadata, NestedStyle, PerfMapNameOptions, TableId, Token};
use libfuzzer_sys::fuzz_target;

/// Most rows of one table named one by one (the check_all pass covers every row).
const NAMED: u32 = 512;

fn exercise(data: &[u8]) {
    let Ok(md) = Metadata::parse(data) else {
        return;
    };
    let report = md.check_all();
    assert_eq!(report.type_defs, md.tables.rows(TableId::TypeDef));
    assert_eq!(report.method_defs, md.tables.rows(TableId::MethodDef));
    assert!(report.method_sigs_ok <= report.method_defs);
    let _ = md.assembly_name();
    for rid in 1..=md.tables.rows(TableId::TypeDef).min(NAMED) {
        let _ = md.type_name(rid, NestedStyle::Plus);
        let _ = md.type_name(rid, NestedStyle::Slash);
        let _ = md.runtime_type_name(rid, None);
        let _ = md.runtime_type_name(rid, Some(&["System.Int32", "System.__Canon"]));
        let _ = md.generic_param_names(Token::new(TableId::TypeDef, rid));
        if let Ok(methods) = md.type_methods(rid) {
            for m in methods {
                let _ = md.method_declaring_type(m);
            }
        }
        let _ = md.type_fields(rid);
        if let Some(e) = md.enclosing_type(rid) {
            assert_ne!(e, rid, "a type nested in itself");
        }
    }
    for rid in 1..=md.tables.rows(TableId::MethodDef).min(NAMED) {
        let _ = md.method_name(rid);
        let _ = md.method_is_static(rid);
        let _ = md.method_params(rid);
        if let Ok(sig) = md.method_signature(rid) {
            let mut out = String::new();
            let _ = md.il().method_sig(&sig, "M", &mut out);
        }
        let _ = md.perf_map_method_name(rid, &PerfMapNameOptions::default());
        let _ = md.il_method_signature(rid, "M");
    }
    for rid in 1..=md.tables.rows(TableId::TypeSpec).min(NAMED) {
        if let Ok(sig) = md
            .type_spec(rid)
            .and_then(|r| md.type_spec_sig(r.signature))
        {
            let _ = md.il().type_string(&sig);
        }
    }
    if let Ok(name) = md.type_name(1, NestedStyle::Plus) {
        let _ = md.find_type(&name);
    }
}

fuzz_target!(|data: &[u8]| {
    exercise(data);
    for layout in [PeLayout::File, PeLayout::Mapped] {
        if let Ok(md) = metadata_from_pe(data, layout) {
            exercise(md);
        }
    }
});
