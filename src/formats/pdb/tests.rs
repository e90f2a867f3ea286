//! Sequence-point blobs and table layouts on hand-made bytes.

use super::*;

/// Header (LocalSignature 0, InitialDocument 1), a point, a hidden point, a point with
/// negative deltas, a document record, a point in document 2.
const BLOB: &[u8] = &[
    0x00, 0x01, // header
    0x00, 0x00, 0x05, 0x0A, 0x09, // IL 0: line 10, columns 9..14
    0x03, 0x00, 0x00, // IL 3: hidden
    0x02, 0x01, 0x7D, 0x04, 0x79, // IL 5: lines 12..13, columns 5..3
    0x00, 0x02, // document 2
    0x04, 0x00, 0x03, 0x10, 0x00, // IL 9: line 20, columns 5..8
];

#[test]
fn decodes_every_record_kind() {
    let points = decode_sequence_points(7, 0, BLOB, 2).expect("decodes");
    let p = |il, doc, sl, sc, el, ec| SequencePoint {
        il_offset: il,
        document: doc,
        start_line: sl,
        start_column: sc,
        end_line: el,
        end_column: ec,
        hidden: false,
    };
    assert_eq!(
        points,
        vec![
            p(0, 1, 10, 9, 10, 14),
            SequencePoint {
                il_offset: 3,
                document: 1,
                start_line: HIDDEN_LINE,
                start_column: 0,
                end_line: HIDDEN_LINE,
                end_column: 0,
                hidden: true,
            },
            p(5, 1, 12, 5, 13, 3),
            p(9, 2, 20, 5, 20, 8),
        ]
    );
    // The last non-hidden point at or before the offset; hidden points are skipped.
    assert_eq!(point_at(&points, 0).map(|p| p.start_line), Some(10));
    assert_eq!(point_at(&points, 4).map(|p| p.start_line), Some(10));
    assert_eq!(point_at(&points, 5).map(|p| p.start_line), Some(12));
    assert_eq!(point_at(&points, 1000).map(|p| p.start_line), Some(20));
    let late =
        decode_sequence_points(7, 1, &[0x00, 0x04, 0x00, 0x01, 0x03, 0x01], 1).expect("decodes");
    assert_eq!(point_at(&late, 3), None, "nothing before the first point");
    // The row's document is used when it has one (no InitialDocument in the header).
    let own = decode_sequence_points(7, 2, &BLOB[..1], 2).expect("header only");
    assert!(own.is_empty());
    assert!(decode_sequence_points(7, 0, &[], 0)
        .expect("empty")
        .is_empty());
}

#[test]
fn damage_is_an_error_naming_the_method() {
    // Document 2 does not exist.
    match decode_sequence_points(7, 0, BLOB, 1) {
        Err(PdbError::BadSequencePoints {
            method: 7, offset, ..
        }) => assert_eq!(offset, 15),
        other => panic!("{other:?}"),
    }
    // Cut short anywhere inside a record.
    for cut in [3, 4, 6, 8, 11, 13, 16, 19] {
        assert!(
            decode_sequence_points(7, 0, &BLOB[..cut], 2).is_err(),
            "cut at {cut}"
        );
    }
    // IL offsets past 0x1FFFFFFF.
    let big = [
        0x00, 0xDF, 0xFF, 0xFF, 0xFF, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00,
    ];
    assert!(decode_sequence_points(1, 1, &big, 1).is_err());
    // A negative line.
    let neg = [
        0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x02, 0x00, 0x01, 0x41, 0x00,
    ];
    assert!(decode_sequence_points(1, 1, &neg, 1).is_err());
}

#[test]
fn garbage_blobs_never_panic() {
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(proptest::collection::vec(any::<u8>(), 0..64), 0u32..3),
            |(blob, doc)| {
                if let Ok(points) = decode_sequence_points(1, doc, &blob, 3) {
                    assert!(points.len() <= blob.len());
                    assert!(points.windows(2).all(|w| w[0].il_offset < w[1].il_offset));
                }
                Ok(())
            },
        )
        .expect("no panic");
}

/// A PDB made of a root with a `#Pdb` stream and a table stream of one Document row.
fn tiny_pdb(name_blob: &[u8], extra_table_bit: Option<u8>) -> Vec<u8> {
    let mut pdb_stream = vec![0x11u8; 20]; // id
    pdb_stream.extend_from_slice(&0u32.to_le_bytes()); // entry point
    pdb_stream.extend_from_slice(&(1u64 << 6).to_le_bytes()); // MethodDef referenced
    pdb_stream.extend_from_slice(&3u32.to_le_bytes()); // 3 MethodDefs
    let mut tables = vec![0u8, 0, 0, 0, 2, 0, 0, 1];
    let valid = (1u64 << 0x30) | extra_table_bit.map_or(0, |b| 1u64 << b);
    tables.extend_from_slice(&valid.to_le_bytes());
    tables.extend_from_slice(&0u64.to_le_bytes());
    if extra_table_bit.is_some_and(|b| b < 0x30) {
        tables.extend_from_slice(&1u32.to_le_bytes());
    }
    tables.extend_from_slice(&1u32.to_le_bytes()); // 1 Document
    tables.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]); // Name blob 1, rest 0
    let mut blob = vec![0u8];
    blob.push(name_blob.len() as u8);
    blob.extend_from_slice(name_blob);
    for part in [b"src".as_slice(), b"a.cs"] {
        blob.push(part.len() as u8);
        blob.extend_from_slice(part);
    }
    while blob.len() % 4 != 0 {
        blob.push(0);
    }
    let streams: [(&str, &[u8]); 3] = [("#Pdb", &pdb_stream), ("#~", &tables), ("#Blob", &blob)];
    let mut header = Vec::new();
    header.extend_from_slice(b"BSJB");
    header.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0, 0]);
    header.extend_from_slice(&12u32.to_le_bytes());
    header.extend_from_slice(b"PDB v1.0\0\0\0\0");
    header.extend_from_slice(&[0, 0, 3, 0]);
    let names_len: usize = streams.iter().map(|(n, _)| 8 + (n.len() + 4) / 4 * 4).sum();
    let mut offset = header.len() + names_len;
    let mut body = Vec::new();
    for (name, data) in streams {
        let mut d = data.to_vec();
        while d.len() % 4 != 0 {
            d.push(0);
        }
        header.extend_from_slice(&(offset as u32).to_le_bytes());
        header.extend_from_slice(&(d.len() as u32).to_le_bytes());
        header.extend_from_slice(name.as_bytes());
        header.push(0);
        while header.len() % 4 != 0 {
            header.push(0);
        }
        offset += d.len();
        body.extend_from_slice(&d);
    }
    header.extend_from_slice(&body);
    header
}

#[test]
fn document_names_join_their_parts() {
    // Name blob: separator '/', parts: "" (blob 0), "src", "a.cs" at blob offsets.
    // Blob heap: [0] empty, [1] name blob (len, '/', 0x00, parts...), then the parts.
    // The name blob takes bytes 1..6 (length and 4 bytes), so "src" is at 6 and "a.cs"
    // at 10.
    let pdb = PortablePdb::parse(tiny_pdb(&[b'/', 0x00, 6, 10], None)).expect("parses");
    assert_eq!(pdb.id.guid, [0x11; 16]);
    assert_eq!(pdb.row_count(PdbTable::Document), 1);
    assert_eq!(pdb.tables.rows[6], 3, "MethodDef rows from #Pdb");
    assert_eq!(pdb.document_name(1).expect("name"), "/src/a.cs");
    assert!(pdb.document_name(2).is_err());
    // A part index past the heap.
    let bad = PortablePdb::parse(tiny_pdb(&[b'/', 0x00, 6, 0x7F], None)).expect("parses");
    assert!(bad.document_name(1).is_err());
    // No separator: parts are concatenated.
    let none = PortablePdb::parse(tiny_pdb(&[0, 6, 10, 0], None)).expect("parses");
    assert_eq!(none.document_name(1).expect("name"), "srca.cs");
    // A type-system table in a PDB's table stream is refused.
    assert!(matches!(
        PortablePdb::parse(tiny_pdb(&[b'/', 7, 11, 0], Some(0x02))),
        Err(PdbError::UnexpectedTable { bit: 2 })
    ));
    // Not a PDB: no #Pdb stream.
    let mut no_pdb = tiny_pdb(&[b'/', 7, 11, 0], None);
    let at = no_pdb.windows(4).position(|w| w == b"#Pdb").expect("name");
    no_pdb[at + 1] = b'X';
    assert!(matches!(
        PortablePdb::parse(no_pdb),
        Err(PdbError::NoPdbStream)
    ));
}
