//! The CodeVersions contract over memory laid out by this file (x64 layouts, as the
//! runtimes' descriptors give them): one method with a default version (its code in the
//! native-code slot) and three explicit versions, reached the .NET 9/10 way
//! (`MethodDesc.CodeData`) and the .NET 8 way (the AppDomain's hash table); the tiers and
//! the current version; the call-counting record that makes a default version
//! `optimized`; and damaged data: a node list that cycles or is too long, a node of
//! another method, a hash table claiming more elements than slots. Every error is typed
//! and names the address.

use cdac::contracts::code_versions::{CodeVersions, NativeCodeVersion, Tier};
use cdac::contracts::ContractError;
use cdac::descriptor::{json, DataDescriptor};
use cdac::limits::{Limit, Limits};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Target};

const CHUNK: u64 = 0x10000;
const MD: u64 = CHUNK + 24;
const SLOT: u64 = MD + 16;
const MT: u64 = 0x11000;
const CODE_DATA: u64 = 0x12000;
const MODULE: u64 = 0x13000;
const LA: u64 = 0x14000;
const STATE: u64 = 0x15000;
const NODES: [u64; 3] = [0x16000, 0x16100, 0x16200];
const MANAGER: u64 = 0x17000;
const CC_TABLE: u64 = 0x18000;
const CC_INFO: u64 = 0x19000;
const DOMAIN_VAR: u64 = 0x1a000;
const DOMAIN: u64 = 0x1b000;
const STATE_TABLE: u64 = 0x1c000;
const IL_TABLE: u64 = 0x1d000;
const IL_MAP_DATA: u64 = 0x1e000;
const IL_STATE: u64 = 0x1f000;
const IL_NODE: u64 = 0x20000;

const DEFAULT_CODE: u64 = 0x50000;
/// Each node's code, tier value and flags: tier 0 instrumented (superseded), tier 1
/// (active), OSR (never active); newest first, as the runtime lists them.
const NODE_VERSIONS: [(u64, u32, u32); 3] = [(0x51000, 4, 0), (0x52000, 1, 1), (0x53000, 2, 0)];

/// How to damage or vary the layout.
#[derive(Default, Clone, Copy)]
struct Shape {
    /// .NET 8: the state in the AppDomain's table, not behind `MethodDesc.CodeData`.
    domain_table: bool,
    /// The last node's `Next` points back at the first.
    cycle: bool,
    /// The middle node names another MethodDesc.
    foreign_node: bool,
    /// A call-counting record disables counting of the default version.
    counting_disabled: bool,
    /// The call-counting table claims more elements than it has slots.
    counting_corrupt: bool,
    /// The IL versioning table (.NET 8) or the module's map (.NET 9+) holds a state
    /// (ReJIT), whose active IL version is an explicit one (ReJIT id 1).
    il_state: bool,
    /// The descriptor describes `ILCodeVersioningState` (as .NET 10's does).
    il_described: bool,
}

fn descriptor(shape: Shape) -> DataDescriptor {
    let code_data = if shape.domain_table {
        ""
    } else {
        r#", "CodeData": [8, "pointer"]"#
    };
    let il = if shape.il_described {
        r#""ILCodeVersioningState": { "ActiveVersionKind": [0, "uint32"], "ActiveVersionNode": [8, "pointer"] },
          "ILCodeVersionNode": { "VersionId": [16, "nuint"] },"#
    } else {
        ""
    };
    let text = format!(
        r#"{{ "version": 0,
        "contracts": {{ "CodeVersions": 1 }},
        "types": {{
          "MethodDesc": {{ "!": 16, "Flags3AndTokenRemainder": [0, "uint16"], "ChunkIndex": [2, "uint8"], "Flags": [6, "uint16"]{code_data} }},
          "MethodDescChunk": {{ "!": 24, "MethodTable": [0, "pointer"], "FlagsAndTokenRange": [18, "uint16"] }},
          "MethodTable": {{ "Module": [24, "pointer"] }},
          "Module": {{ "LoaderAllocator": [8, "pointer"], "MethodDefToILCodeVersioningStateMap": 32 }},
          "ModuleLookupMap": {{ "Next": [0, "pointer"], "TableData": [8, "pointer"], "Count": [16, "uint32"], "SupportedFlagsMask": [24, "nuint"] }},
          "NonVtableSlot": {{ "!": 8 }}, "MethodImpl": {{ "!": 16 }}, "NativeCodeSlot": {{ "!": 8 }},
          "MethodDescCodeData": {{ "VersioningState": [0, "pointer"] }},
          "MethodDescVersioningState": {{ "MethodDesc": [0, "pointer"], "Flags": [8, "uint8"], "NativeCodeVersionNode": [16, "pointer"] }},
          "NativeCodeVersionNode": {{ "NativeCode": [0, "pointer"], "MethodDesc": [8, "pointer"], "ILVersionId": [16, "nuint"], "Next": [24, "pointer"], "OptimizationTier": [36, "uint32"], "Flags": [52, "uint32"] }},
          "LoaderAllocator": {{ "CallCountingManager": [0, "pointer"] }},
          "CallCountingManager": {{ "CallCountingInfos": 0 }},
          "CallCountingInfo": {{ "CodeVersionKind": [0, "uint32"], "CodeVersion": [8, "pointer"], "Stage": [26, "uint8"] }},
          "SHash": {{ "Table": [0, "pointer"], "TableSize": [8, "uint32"], "Count": [12, "uint32"] }},
          {il}
          "AppDomain": {{ "MethodDescVersioningStates": 0, "ILCodeVersioningStates": 24 }}
        }},
        "globals": {{
          "MethodDescAlignment": ["0x8", "uint64"],
          "MethodDescTokenRemainderBitCount": ["0xc", "uint8"],
          "CallCountingStageDisabled": ["0x4", "uint8"],
          "AppDomain": [[0], "pointer"]
        }} }}"#
    );
    let physical = json::parse("code-versions-test", text.as_bytes()).expect("descriptor JSON");
    let mut d = DataDescriptor::new(DataLayout::LE64);
    d.merge("code-versions-test", &physical, &[DOMAIN_VAR])
        .expect("merge");
    d
}

fn target(shape: Shape) -> Target {
    let mut m = MemoryBuilder::new(DataLayout::LE64);
    // The chunk, then the MethodDesc (eligible for tiering, RID 1, an IL method with a
    // native-code slot) and its slot.
    m.region(CHUNK, 0x40)
        .pointer(0, MT)
        .u16(24, 0x8001)
        .u16(24 + 6, 0x20)
        .pointer(24 + 8, if shape.domain_table { 0 } else { CODE_DATA })
        .pointer((SLOT - CHUNK) as usize, DEFAULT_CODE);
    m.region(MT, 0x40).pointer(24, MODULE);
    // The module's IL versioning map: empty (Count 0), or RID 1 → the IL state.
    m.region(MODULE, 0x80)
        .pointer(8, LA)
        .pointer(32 + 8, IL_MAP_DATA)
        .u32(32 + 16, if shape.il_state { 2 } else { 0 });
    m.region(IL_MAP_DATA, 0x10).pointer(8, IL_STATE);
    m.region(IL_STATE, 0x30).u32(0, 1).pointer(8, IL_NODE);
    m.region(IL_NODE, 0x20).pointer(16, 1);
    m.region(CODE_DATA, 0x10).pointer(0, STATE);
    // The default version is not the active one (bit 0x4 clear).
    m.region(STATE, 0x20)
        .pointer(0, MD)
        .u8(8, 0)
        .pointer(16, NODES[0]);
    for (i, (&node, &(code, tier, flags))) in NODES.iter().zip(&NODE_VERSIONS).enumerate() {
        let next = match NODES.get(i + 1) {
            Some(&n) => n,
            None if shape.cycle => NODES[0],
            None => 0,
        };
        let owner = if shape.foreign_node && i == 1 {
            0x9999_0000
        } else {
            MD
        };
        m.region(node, 0x38)
            .pointer(0, code)
            .pointer(8, owner)
            .pointer(24, next)
            .u32(36, tier)
            .u32(52, flags);
    }
    let counting = shape.counting_disabled || shape.counting_corrupt;
    m.region(LA, 0x10)
        .pointer(0, if counting { MANAGER } else { 0 });
    let count = if shape.counting_corrupt { 9 } else { 1 };
    m.region(MANAGER, 0x18)
        .pointer(0, CC_TABLE)
        .u32(8, 4)
        .u32(12, count);
    m.region(CC_TABLE, 0x20).pointer(16, CC_INFO);
    m.region(CC_INFO, 0x20).u32(0, 2).pointer(8, MD).u8(26, 4);
    // .NET 8: the AppDomain's two tables (MethodDesc states, IL states).
    m.region(DOMAIN_VAR, 8).pointer(0, DOMAIN);
    m.region(DOMAIN, 0x30)
        .pointer(0, STATE_TABLE)
        .u32(8, 2)
        .u32(12, 1)
        .pointer(24, if shape.il_state { IL_TABLE } else { 0 })
        .u32(32, if shape.il_state { 1 } else { 0 })
        .u32(36, if shape.il_state { 1 } else { 0 });
    m.region(STATE_TABLE, 0x10).pointer(8, STATE);
    m.region(IL_TABLE, 0x10).pointer(0, 0x7777_0000);
    m.into_target()
}

fn versions(t: &Target, d: &DataDescriptor) -> Result<Vec<NativeCodeVersion>, ContractError> {
    let mut cv = CodeVersions::new(t, d).expect("contract");
    cv.versions(MD, Some(0), &|_| false).map(|v| v.versions)
}

/// A version as compared: node, code, tier, current.
type Summary = (Option<u64>, Option<u64>, Tier, Option<bool>);

fn summary(v: &[NativeCodeVersion]) -> Vec<Summary> {
    v.iter()
        .map(|x| (x.node, x.code, x.tier, x.current))
        .collect()
}

fn healthy() -> Vec<Summary> {
    vec![
        (None, Some(DEFAULT_CODE), Tier::QuickJitted, Some(false)),
        (
            Some(NODES[0]),
            Some(0x51000),
            Tier::QuickJittedInstrumented,
            Some(false),
        ),
        (
            Some(NODES[1]),
            Some(0x52000),
            Tier::OptimizedTier1,
            Some(true),
        ),
        (
            Some(NODES[2]),
            Some(0x53000),
            Tier::OptimizedTier1Osr,
            Some(false),
        ),
    ]
}

#[test]
fn versions_tiers_and_the_current_one() {
    for domain_table in [false, true] {
        let shape = Shape {
            domain_table,
            ..Shape::default()
        };
        let (t, d) = (target(shape), descriptor(shape));
        assert_eq!(summary(&versions(&t, &d).expect("versions")), healthy());

        let mut cv = CodeVersions::new(&t, &d).expect("contract");
        let at = |cv: &mut CodeVersions, start| {
            cv.version_at(MD, start, false, Some(0))
                .expect("version_at")
                .map(|v| (v.node, v.tier, v.current))
        };
        assert_eq!(
            at(&mut cv, 0x52000),
            Some((Some(NODES[1]), Tier::OptimizedTier1, Some(true)))
        );
        assert_eq!(
            at(&mut cv, DEFAULT_CODE),
            Some((None, Tier::QuickJitted, Some(false)))
        );
        // Code that is neither the slot's nor any node's is none of the versions.
        assert_eq!(at(&mut cv, 0x5f000), None);
        // Precompiled default code is ReadyToRun whatever the rest says.
        let r2r = cv
            .version_at(MD, DEFAULT_CODE, true, Some(0))
            .expect("version_at")
            .expect("default");
        assert_eq!(r2r.tier, Tier::ReadyToRun);
    }
}

#[test]
fn disabled_call_counting_makes_the_default_version_optimized() {
    let shape = Shape {
        counting_disabled: true,
        ..Shape::default()
    };
    let v = versions(&target(shape), &descriptor(shape)).expect("versions");
    assert_eq!(v[0].tier, Tier::Optimized);
    // Unreadable records leave the tier unknown rather than guessed.
    let shape = Shape {
        counting_corrupt: true,
        ..Shape::default()
    };
    let v = versions(&target(shape), &descriptor(shape)).expect("versions");
    assert_eq!(v[0].tier, Tier::Unknown);
}

#[test]
fn a_cycle_in_the_node_list_is_a_typed_error_naming_the_state() {
    for domain_table in [false, true] {
        let shape = Shape {
            domain_table,
            cycle: true,
            ..Shape::default()
        };
        match versions(&target(shape), &descriptor(shape)) {
            Err(ContractError::LimitExceeded {
                what, addr, limit, ..
            }) => {
                assert_eq!(
                    (what, addr, limit),
                    ("native code version list", STATE, Limit::ListLength)
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_list_longer_than_the_limit_is_a_typed_error() {
    let shape = Shape::default();
    let t = target(shape).with_limits(Limits {
        max_list_length: 2,
        ..Limits::default()
    });
    match versions(&t, &descriptor(shape)) {
        Err(ContractError::LimitExceeded { addr, cap, .. }) => assert_eq!((addr, cap), (STATE, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_node_of_another_method_is_corrupt() {
    let shape = Shape {
        foreign_node: true,
        ..Shape::default()
    };
    match versions(&target(shape), &descriptor(shape)) {
        Err(ContractError::Corrupt { what, addr, .. }) => {
            assert_eq!((what, addr), ("NativeCodeVersionNode", NODES[1]))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn net8_il_versions_leave_current_unknown() {
    let shape = Shape {
        domain_table: true,
        il_state: true,
        ..Shape::default()
    };
    let (t, d) = (target(shape), descriptor(shape));
    let mut cv = CodeVersions::new(&t, &d).expect("contract");
    let v = cv.versions(MD, Some(0), &|_| false).expect("versions");
    assert!(v.versions.iter().all(|x| x.current.is_none()));
    assert!(v.current_unknown.is_some());
    // The tiers do not depend on it.
    let tiers: Vec<Tier> = v.versions.iter().map(|x| x.tier).collect();
    let want: Vec<Tier> = healthy().iter().map(|x| x.2).collect();
    assert_eq!(tiers, want);
}

#[test]
fn an_active_rejit_version_makes_no_original_version_current() {
    // .NET 10 describes the IL state: its active IL version (ReJIT id 1) has no native
    // version here, so none of the original IL's versions is current.
    let shape = Shape {
        il_state: true,
        il_described: true,
        ..Shape::default()
    };
    let (t, d) = (target(shape), descriptor(shape));
    let v = versions(&t, &d).expect("versions");
    assert!(v.iter().all(|x| x.current == Some(false)), "{v:?}");
    // .NET 9's descriptor does not describe it: current is unknown, with the reason.
    let shape = Shape {
        il_state: true,
        ..Shape::default()
    };
    let (t, d) = (target(shape), descriptor(shape));
    let mut cv = CodeVersions::new(&t, &d).expect("contract");
    let v = cv.versions(MD, Some(0), &|_| false).expect("versions");
    assert!(v.versions.iter().all(|x| x.current.is_none()));
    assert!(v
        .current_unknown
        .as_deref()
        .is_some_and(|w| w.contains(&format!("{IL_STATE:#x}"))));
}

#[test]
fn a_descriptor_without_code_versions_is_a_typed_error() {
    let text = r#"{ "version": 0, "types": {}, "globals": {} }"#;
    let physical = json::parse("empty", text.as_bytes()).expect("JSON");
    let mut d = DataDescriptor::new(DataLayout::LE64);
    d.merge("empty", &physical, &[]).expect("merge");
    let t = target(Shape::default());
    match CodeVersions::new(&t, &d) {
        Err(ContractError::Missing { contract }) => assert_eq!(contract, "CodeVersions"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a contract without a descriptor"),
    }
}
