//! The RuntimeInfo contract (version 1): the target's architecture, operating system and
//! runtime flavor, from string globals. Spec: `contracts/RuntimeInfo.md`.

use serde::Serialize;

use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;

/// Target architecture (values as in `System.Runtime.InteropServices.Architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Not known.
    Unknown = 0,
    /// 32-bit x86.
    X86 = 1,
    /// x86-64.
    X64 = 2,
    /// 32-bit ARM.
    Arm = 3,
    /// 64-bit ARM.
    Arm64 = 4,
    /// WebAssembly.
    Wasm = 5,
    /// IBM z/Architecture.
    S390x = 6,
    /// 64-bit LoongArch.
    LoongArch64 = 7,
    /// 32-bit ARMv6.
    Armv6 = 8,
    /// 64-bit little-endian POWER.
    Ppc64le = 9,
    /// 64-bit RISC-V.
    RiscV64 = 10,
}

/// Target operating system family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatingSystem {
    /// Not known.
    Unknown = 0,
    /// Windows.
    Windows = 1,
    /// Linux and other Unix-like systems.
    Unix = 2,
    /// A browser (WebAssembly).
    Browser = 3,
    /// macOS, iOS and the other Apple systems.
    Apple = 4,
}

/// Runtime flavor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RuntimeFlavor {
    /// Not known.
    Unknown = 0,
    /// CoreCLR, the runtime with a JIT.
    CoreClr = 1,
    /// Native AOT, ahead-of-time compiled code with a minimal runtime.
    NativeAot = 2,
}

/// What RuntimeInfo reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RuntimeInfo {
    /// The architecture the runtime was built for.
    pub architecture: Architecture,
    /// The operating-system family.
    pub operating_system: OperatingSystem,
    /// Which runtime it is.
    pub flavor: RuntimeFlavor,
}

/// Reads RuntimeInfo (version 1). A global that is missing or names nothing known gives
/// `Unknown`, as the contract says.
pub fn runtime_info(descriptor: &DataDescriptor) -> Result<RuntimeInfo, ContractError> {
    match registry::advertised_version(descriptor, RuntimeInfo::NAME, RuntimeInfo::VERSIONS)? {
        Some(1) => Ok(read_v1(descriptor)),
        Some(other) => registry::unsupported(RuntimeInfo::NAME, other, RuntimeInfo::VERSIONS),
        None => Err(ContractError::Missing {
            contract: RuntimeInfo::NAME,
        }),
    }
}

impl Contract for RuntimeInfo {
    const NAME: &'static str = "RuntimeInfo";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => Ok(read_v1(&context.descriptor)),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

/// Version 1: the runtime's globals, as text.
fn read_v1(descriptor: &DataDescriptor) -> RuntimeInfo {
    let text = |name: &str| {
        descriptor
            .global_string(name)
            .ok()
            .map(str::to_ascii_lowercase)
    };
    let architecture = match text("Architecture").as_deref() {
        Some("x86") => Architecture::X86,
        Some("x64") => Architecture::X64,
        Some("arm") => Architecture::Arm,
        Some("arm64") => Architecture::Arm64,
        Some("wasm") => Architecture::Wasm,
        Some("s390x") => Architecture::S390x,
        Some("loongarch64") => Architecture::LoongArch64,
        Some("armv6") => Architecture::Armv6,
        Some("ppc64le") => Architecture::Ppc64le,
        Some("riscv64") => Architecture::RiscV64,
        _ => Architecture::Unknown,
    };
    // Linux builds of .NET 10 publish "1": the runtime stringifies the token `unix` after
    // the C preprocessor has replaced it with the value of its predefined `unix` macro (its
    // `RID` global reads "1-x64" for the same reason). No other system spells itself so.
    let as_written = descriptor
        .global("OperatingSystem")
        .ok()
        .and_then(|g| g.text())
        .map(str::to_ascii_lowercase);
    let operating_system = match text("OperatingSystem").or(as_written).as_deref() {
        Some("windows") => OperatingSystem::Windows,
        Some("unix") | Some("1") => OperatingSystem::Unix,
        Some("browser") => OperatingSystem::Browser,
        Some("apple") => OperatingSystem::Apple,
        _ => OperatingSystem::Unknown,
    };
    let flavor = match text("RuntimeFlavor").as_deref() {
        Some("coreclr") => RuntimeFlavor::CoreClr,
        Some("nativeaot") => RuntimeFlavor::NativeAot,
        // Runtimes before the global existed are all CoreCLR.
        None => RuntimeFlavor::CoreClr,
        Some(_) => RuntimeFlavor::Unknown,
    };
    RuntimeInfo {
        architecture,
        operating_system,
        flavor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::DataLayout;

    fn descriptor(json: &str) -> DataDescriptor {
        let physical = crate::descriptor::json::parse("test", json.as_bytes()).unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        d
    }

    #[test]
    fn reads_string_globals() {
        let d = descriptor(
            r#"{"contracts":{"RuntimeInfo":"c1"},"globals":{"Architecture":"ARM64","OperatingSystem":"unix"}}"#,
        );
        let info = runtime_info(&d).unwrap();
        assert_eq!(
            (info.architecture, info.operating_system, info.flavor),
            (
                Architecture::Arm64,
                OperatingSystem::Unix,
                RuntimeFlavor::CoreClr
            )
        );
        let d = descriptor(
            r#"{"contracts":{"RuntimeInfo":1},"globals":{"Architecture":"mips","RuntimeFlavor":"NativeAot"}}"#,
        );
        let info = runtime_info(&d).unwrap();
        assert_eq!(
            (info.architecture, info.operating_system, info.flavor),
            (
                Architecture::Unknown,
                OperatingSystem::Unknown,
                RuntimeFlavor::NativeAot
            )
        );
        // As .NET 10.0.14 for Linux x64 publishes them (the preprocessor turned `unix`
        // into 1); "2" is nobody's spelling.
        let d = descriptor(
            r#"{"contracts":{"RuntimeInfo":1},"globals":{"Architecture":["x64","string"],"OperatingSystem":["1","string"]}}"#,
        );
        let info = runtime_info(&d).unwrap();
        assert_eq!(
            (info.architecture, info.operating_system),
            (Architecture::X64, OperatingSystem::Unix)
        );
        let d = descriptor(
            r#"{"contracts":{"RuntimeInfo":1},"globals":{"OperatingSystem":["2","string"]}}"#,
        );
        assert_eq!(
            runtime_info(&d).unwrap().operating_system,
            OperatingSystem::Unknown
        );
        let d = descriptor(r#"{"contracts":{"RuntimeInfo":2}}"#);
        assert!(matches!(
            runtime_info(&d),
            Err(ContractError::UnsupportedVersion {
                contract: "RuntimeInfo",
                ..
            })
        ));
        assert!(matches!(
            runtime_info(&descriptor("{}")),
            Err(ContractError::Missing { .. })
        ));
    }
}
