//! Naming rules on hand-made metadata: resolution scopes, nesting, escaping, calling
//! conventions, modifiers, arrays and the .NET 8 truncation, none of which depend on the
//! testbed.

use super::testutil::Builder;
use super::*;

const ASSEMBLY_REF_SYSTEM_RUNTIME: u32 = (1 << 2) | 2;

/// TypeDefOrRefOrSpecEncoded / TypeDefOrRef coded values.
fn typeref(rid: u32) -> u32 {
    (rid << 2) | 1
}
fn typedef(rid: u32) -> u32 {
    rid << 2
}

fn sample(tables_stream: &'static str, method_ptr: bool) -> Vec<u8> {
    use TableId as T;
    let mut b = Builder::new();
    b.tables_stream_name = tables_stream;
    let n = b.string("Test.dll");
    b.row(T::Module, &[0, n, 1, 0, 0]);
    let n = b.string("Test");
    b.row(T::Assembly, &[0x8004, 1, 0, 0, 0, 0, 0, n, 0]);
    let n = b.string("System.Runtime");
    b.row(T::AssemblyRef, &[8, 0, 0, 0, 0, 0, n, 0, 0]);
    let n = b.string("native.so");
    b.row(T::ModuleRef, &[n]);
    let (system, object) = (b.string("System"), b.string("Object"));
    b.row(T::TypeRef, &[ASSEMBLY_REF_SYSTEM_RUNTIME, object, system]); // 1
    let (ns, n) = (b.string("Some"), b.string("Lost"));
    b.row(T::TypeRef, &[0, n, ns]); // 2: nil scope
    let (ns, n) = (b.string("Here"), b.string("Local"));
    b.row(T::TypeRef, &[1 << 2, n, ns]); // 3: this module
    let (ns, n) = (b.string("Ext"), b.string("Native"));
    b.row(T::TypeRef, &[(1 << 2) | 1, n, ns]); // 4: ModuleRef
    let n = b.string("Outer");
    b.row(T::TypeRef, &[ASSEMBLY_REF_SYSTEM_RUNTIME, n, system]); // 5
    let n = b.string("Inner");
    b.row(T::TypeRef, &[(5 << 2) | 3, n, 0]); // 6: nested in TypeRef 5
    let (ns, n) = (
        b.string("System.Runtime.CompilerServices"),
        b.string("IsVolatile"),
    );
    b.row(T::TypeRef, &[ASSEMBLY_REF_SYSTEM_RUNTIME, n, ns]); // 7

    let n = b.string("<Module>");
    b.row(T::TypeDef, &[0, n, 0, 0, 1, 1]); // 1
    let (ns, n) = (b.string("My.Space"), b.string("Outer`1"));
    b.row(T::TypeDef, &[0x100001, n, ns, typeref(1), 1, 1]); // 2: methods 1, 2
    let n = b.string("Inner");
    b.row(T::TypeDef, &[0x100002, n, 0, typeref(1), 1, 3]); // 3: method 3
    let (ns, n) = (b.string("Odd"), b.string("A+B"));
    b.row(T::TypeDef, &[0x100001, n, ns, typeref(1), 1, 4]); // 4: method 4
    let (ns, n) = (b.string("N"), b.string("Long"));
    b.row(T::TypeDef, &[0x100001, n, ns, typeref(1), 1, 5]); // 5: method 5

    let methods: [(&str, u16, Vec<u8>); 5] = [
        (".ctor", 0x1886, vec![0x20, 0x00, 0x01]),
        (
            "Get",
            0x0016,
            vec![
                0x00, 0x02, 0x13, 0x00, 0x14, 0x08, 0x02, 0x00, 0x02, 0x00, 0x00, 0x16,
            ],
        ),
        ("M", 0x0006, vec![0x65, 0x02, 0x01, 0x08, 0x41, 0x0D]),
        (
            "F",
            0x0016,
            [
                vec![0x00, 10, 0x01],
                vec![0x12, typeref(2) as u8],
                vec![0x12, typeref(3) as u8],
                vec![0x12, typeref(4) as u8],
                vec![0x11, typeref(6) as u8],
                vec![0x10, 0x20, typeref(7) as u8, 0x08],
                vec![0x1B, 0x01, 0x01, 0x08, 0x08],
                vec![0x15, 0x11, typedef(2) as u8, 0x01, 0x08],
                vec![0x12, typedef(3) as u8],
                vec![0x1E, 0x00],
                vec![0x1D, 0x0F, 0x19],
            ]
            .concat(),
        ),
        ("abcdefghijklmnopqrstuvwxyz", 0x0016, vec![0x00, 0x00, 0x01]),
    ];
    let order: Vec<usize> = if method_ptr {
        vec![4, 3, 2, 1, 0]
    } else {
        vec![0, 1, 2, 3, 4]
    };
    // With MethodPtr, MethodDef rows are stored in reverse and reached through it.
    for &i in &order {
        let (name, flags, sig) = &methods[i];
        let (n, s) = (b.string(name), b.blob(sig));
        b.row(T::MethodDef, &[0, 0, u32::from(*flags), n, s, 1]);
    }
    if method_ptr {
        for i in 0..5u32 {
            b.row(T::MethodPtr, &[5 - i]);
        }
    }
    b.row(T::NestedClass, &[3, 2]);
    let t = b.string("T");
    b.row(T::GenericParam, &[0, 0, 2 << 1, t]);
    b.row(T::GenericParam, &[0, 0, 3 << 1, t]);
    b.build()
}

/// The MethodDef rid of the `i`th sample method.
fn method_rid(md: &Metadata<'_>, i: u32) -> u32 {
    if md.tables.rows(TableId::MethodPtr) > 0 {
        5 - i
    } else {
        i + 1
    }
}

fn names(md: &Metadata<'_>) -> Vec<String> {
    (0..5)
        .map(|i| {
            md.perf_map_method_name(method_rid(md, i), &PerfMapNameOptions::default())
                .unwrap()
        })
        .collect()
}

const EXPECTED: [&str; 5] = [
    "instance void [Test] My.Space.Outer`1[T]::.ctor()",
    "!0 [Test] My.Space.Outer`1[T]::Get(int32[0...,0...],typedref)",
    "explicit instance vararg void [Test] My.Space.Outer`1+Inner[T]::M(int32,...,float64)",
    "void [Test] Odd.A\\+B::F(class [*]Some.Lost,class Here.Local,class [.module native.so]Ext.Native,\
valuetype [System.Runtime]System.Outer/Inner,\
int32 modopt([System.Runtime]System.Runtime.CompilerServices.IsVolatile)&,\
method unmanaged cdecl int32 *(int32),valuetype My.Space.Outer`1<int32>,\
class My.Space.Outer`1/Inner,!!0,native uint*[])",
    // "[Test] N.Long::" + 26 letters is 41 bytes: early .NET 8 builds drop the last one
    // (see `perf_map_names_on_hand_made_metadata` below); by default names are whole.
    "void [Test] N.Long::abcdefghijklmnopqrstuvwxyz()",
];

#[test]
fn perf_map_names_on_hand_made_metadata() {
    let data = sample("#~", false);
    let md = Metadata::parse(&data).unwrap();
    assert_eq!(md.assembly_name().unwrap(), "Test");
    assert_eq!(names(&md), EXPECTED);
    let report = md.check_all();
    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    assert_eq!(report.names_ok, 5);

    // The type's instantiation comes from the caller; early .NET 8's truncation can be
    // turned on.
    let with_inst = PerfMapNameOptions {
        type_instantiation: Some(&["System.Int32"]),
        ..Default::default()
    };
    assert_eq!(
        md.perf_map_method_name(1, &with_inst).unwrap(),
        "instance void [Test] My.Space.Outer`1[System.Int32]::.ctor()"
    );
    let truncated = PerfMapNameOptions {
        net8_truncation: true,
        ..Default::default()
    };
    assert_eq!(
        md.perf_map_method_name(5, &truncated).unwrap(),
        "void [Test] N.Long::abcdefghijklmnopqrstuvwxy()"
    );
}

#[test]
fn type_names_nesting_and_relations() {
    let data = sample("#~", false);
    let md = Metadata::parse(&data).unwrap();
    assert_eq!(
        md.type_name(2, NestedStyle::Plus).unwrap(),
        "My.Space.Outer`1"
    );
    assert_eq!(
        md.type_name(3, NestedStyle::Plus).unwrap(),
        "My.Space.Outer`1+Inner"
    );
    assert_eq!(
        md.type_name(3, NestedStyle::Slash).unwrap(),
        "My.Space.Outer`1/Inner"
    );
    assert_eq!(md.type_name(4, NestedStyle::Plus).unwrap(), "Odd.A\\+B");
    assert_eq!(md.type_name(4, NestedStyle::Slash).unwrap(), "Odd.A+B");
    assert_eq!(
        md.runtime_type_name(3, None).unwrap(),
        "My.Space.Outer`1+Inner[T]"
    );
    assert_eq!(md.runtime_type_name(5, None).unwrap(), "N.Long");
    assert_eq!(md.find_type("My.Space.Outer`1+Inner"), Some(3));
    assert_eq!(md.enclosing_type(3), Some(2));
    assert_eq!(md.enclosing_type(2), None);
    assert_eq!(md.type_methods(2).unwrap(), vec![1, 2]);
    assert_eq!(md.type_methods(1).unwrap(), Vec::<u32>::new());
    assert_eq!(md.method_declaring_type(3), Some(3));
    assert!(!md.method_is_static(1).unwrap());
    assert!(md.method_is_static(2).unwrap());
    assert_eq!(
        md.generic_param_names(Token::new(TableId::TypeDef, 3))
            .unwrap(),
        vec!["T"]
    );
    let mut out = String::new();
    md.il()
        .class(Token::new(TableId::TypeRef, 6), &mut out, 0)
        .unwrap();
    assert_eq!(out, "[System.Runtime]System.Outer/Inner");
    let sig = md.method_signature(3).unwrap();
    assert_eq!(sig.sentinel, Some(1));
    assert_eq!(sig.kind(), CallKind::VarArg);
    assert!(sig.explicit_this() && sig.has_this());
}

#[test]
fn unoptimized_tables_with_method_ptr() {
    let data = sample("#-", true);
    let md = Metadata::parse(&data).unwrap();
    assert_eq!(md.tables.stream_name, "#-");
    assert_eq!(md.type_methods(2).unwrap(), vec![5, 4]);
    assert_eq!(md.method_declaring_type(5), Some(2));
    assert_eq!(names(&md), EXPECTED);
}

#[test]
fn wide_heap_indexes() {
    // The same metadata with 4-byte string, GUID and blob indexes.
    let mut b = Builder::new();
    b.heap_sizes = 0x07;
    let n = b.string("Wide.dll");
    b.row(TableId::Module, &[0, n, 1, 0, 0]);
    let (ns, n) = (b.string("W"), b.string("T"));
    b.row(TableId::TypeDef, &[0, n, ns, 0, 1, 1]);
    let (n, s) = (b.string("Run"), b.blob(&[0x00, 0x01, 0x01, 0x0E]));
    b.row(TableId::MethodDef, &[0, 0, 0x16, n, s, 1]);
    let data = b.build();
    let md = Metadata::parse(&data).unwrap();
    assert_eq!(
        md.tables.layout(TableId::MethodDef).row_size,
        4 + 2 + 2 + 4 + 4 + 2
    );
    // No Assembly row: the module name stands in.
    assert_eq!(
        md.perf_map_method_name(1, &PerfMapNameOptions::default())
            .unwrap(),
        "void [Wide.dll] W.T::Run(string)"
    );
}

#[test]
fn broken_rows_give_located_errors() {
    let mut b = Builder::new();
    let n = b.string("X.dll");
    b.row(TableId::Module, &[0, n, 1, 0, 0]);
    b.row(TableId::TypeDef, &[0, 0x7FFF, 0, 0, 1, 1]);
    let (n, s) = (b.string("Bad"), b.blob(&[0x00, 0x03, 0x01]));
    b.row(TableId::MethodDef, &[0, 0, 0x16, n, s, 1]);
    b.row(TableId::MethodDef, &[0, 0, 0x16, n, 0x7FFF, 1]);
    b.row(TableId::CustomAttribute, &[0, 1, 0]); // unused CustomAttributeType tag 1
    let data = b.build();
    let md = Metadata::parse(&data).unwrap();
    assert!(matches!(
        md.type_name(1, NestedStyle::Plus),
        Err(MetadataError::HeapIndexOutOfBounds {
            heap: Heap::Strings,
            index: 0x7FFF,
            ..
        })
    ));
    match md.method_signature(1) {
        Err(MetadataError::InRow {
            table: TableId::MethodDef,
            row: 1,
            column: "Signature",
            source,
        }) => assert!(matches!(*source, MetadataError::Signature { .. })),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        md.method_signature(2),
        Err(MetadataError::InRow { row: 2, .. })
    ));
    let row = md.raw_row(TableId::CustomAttribute, 1).unwrap();
    assert!(matches!(
        row.values(),
        Err(MetadataError::InvalidCodedIndex {
            table: TableId::CustomAttribute,
            row: 1,
            column: "Type",
            ..
        })
    ));
    assert!(matches!(
        md.method_def(3),
        Err(MetadataError::RowOutOfBounds {
            table: TableId::MethodDef,
            row: 3,
            rows: 2
        })
    ));
    let report = md.check_all();
    assert!(report.errors > 0 && report.bad_heap_refs > 0);
}

#[test]
fn truncated_table_stream_is_an_error() {
    let data = sample("#~", false);
    let md = Metadata::parse(&data).unwrap();
    let stream = md.root.stream("#~").unwrap();
    let cut = &stream.data[..stream.data.len() - 8];
    assert!(matches!(
        parse_tables(cut, "#~"),
        Err(MetadataError::TablesTruncated { .. })
    ));
}

/// crossgen2's (`TypeString`) names of the sample methods: `System.*` primitives, `, `
/// between parameters, no `void` return, nested types with `+` (TypeDefs and TypeRefs),
/// generic arguments in brackets, `[,]` general arrays, function pointers as
/// `RET (PARAMS)`, modifiers dropped, nothing escaped, and generic parameters substituted
/// where an instantiation is given.
#[test]
fn compiler_names_on_hand_made_metadata() {
    let data = sample("#~", false);
    let md = Metadata::parse(&data).unwrap();
    let names: Vec<String> = (0..5)
        .map(|i| md.compiler_method_name(method_rid(&md, i)).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "My.Space.Outer`1::.ctor()",
            "!0 My.Space.Outer`1::Get(System.Int32[,], System.TypedReference)",
            "My.Space.Outer`1+Inner::M(System.Int32, System.Double)",
            "Odd.A+B::F(Some.Lost, Here.Local, Ext.Native, System.Outer+Inner, System.Int32&, \
System.Int32 (System.Int32), My.Space.Outer`1[System.Int32], My.Space.Outer`1+Inner, !!0, \
System.UIntPtr*[])",
            "N.Long::abcdefghijklmnopqrstuvwxyz()",
        ]
    );
    // An instantiation for the generic parameters.
    let namer = |p: GenericParam, out: &mut String| -> Result<bool> {
        match p {
            GenericParam::Type(0) => out.push_str("System.__Canon"),
            GenericParam::Method(0) => out.push_str("System.String"),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let with = CompilerNames::new(&md).with_generic_args(&namer);
    let get = md.method_signature(method_rid(&md, 1)).unwrap();
    assert_eq!(
        with.method_name("My.Space.Outer`1[System.__Canon]", "Get", &get)
            .unwrap(),
        "System.__Canon My.Space.Outer`1[System.__Canon]::Get(System.Int32[,], System.TypedReference)"
    );
    let f = md.method_signature(method_rid(&md, 3)).unwrap();
    let mut last = String::new();
    with.type_sig(&f.params[8], &mut last).unwrap();
    assert_eq!(last, "System.String");
}
