//! The PlatformMetadata contract (version 1): how code pointers are encoded on the target
//! (the Thumb bit on ARM32, pointer authentication on arm64e). Spec:
//! `contracts/PlatformMetadata.md`.

use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// `CodePointerFlags`: code pointers carry the Thumb bit (bit 0).
pub const HAS_ARM32_THUMB_BIT: u8 = 0x1;
/// `CodePointerFlags`: return addresses carry pointer-authentication bits.
pub const HAS_ARM64_PTR_AUTH: u8 = 0x2;

/// The target's code-pointer conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformMetadata {
    /// Address of the runtime's precode machine descriptor, when it publishes one.
    pub precode_machine_descriptor: Option<u64>,
    /// `CodePointerFlags`.
    pub code_pointer_flags: u8,
}

impl PlatformMetadata {
    /// The code address a code pointer stands for.
    pub fn code_address(&self, pointer: u64) -> u64 {
        if self.code_pointer_flags & HAS_ARM32_THUMB_BIT != 0 {
            pointer & !1
        } else {
            pointer
        }
    }

    /// The code pointer for a code address.
    pub fn code_pointer(&self, address: u64) -> u64 {
        if self.code_pointer_flags & HAS_ARM32_THUMB_BIT != 0 && address != 0 {
            address | 1
        } else {
            address
        }
    }
}

/// Reads PlatformMetadata, through the [`registry`]. Runtimes that do not advertise the
/// contract (such as .NET 8 through its shipped descriptor) get the conventions of their
/// architecture: the Thumb bit on ARM32, nothing elsewhere.
pub fn platform_metadata(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<PlatformMetadata, ContractError> {
    registry::create(&ContractContext::new(target, descriptor))
}

impl Contract for PlatformMetadata {
    const NAME: &'static str = "PlatformMetadata";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => read_v1(&context.target, &context.descriptor),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }

    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        let arm32 = context.descriptor.global_string("Architecture").ok() == Some("arm");
        Some(Ok(PlatformMetadata {
            precode_machine_descriptor: None,
            code_pointer_flags: if arm32 { HAS_ARM32_THUMB_BIT } else { 0 },
        }))
    }
}

/// Version 1: the runtime's metadata object, which the global points at.
fn read_v1(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<PlatformMetadata, ContractError> {
    let object = descriptor.global_value("PlatformMetadata")?;
    let ty = descriptor.ty("PlatformMetadata")?;
    Ok(PlatformMetadata {
        precode_machine_descriptor: ty
            .has_field("PrecodeMachineDescriptor")
            .then(|| {
                ty.offset("PrecodeMachineDescriptor")
                    .map(|o| object.wrapping_add(o))
            })
            .transpose()?,
        code_pointer_flags: target.read_u8(object.wrapping_add(ty.offset("CodePointerFlags")?))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    #[test]
    fn flags_from_the_runtime_or_the_architecture() {
        for layout in DataLayout::ALL {
            let mut b = MemoryBuilder::new(layout);
            let object = b.alloc(16, 8).addr;
            b.region(object + 16, 1).u8(0, HAS_ARM32_THUMB_BIT);
            let target = b.into_target();
            let json = r#"{"contracts":{"PlatformMetadata":1},"types":{"PlatformMetadata":{"PrecodeMachineDescriptor":0,"CodePointerFlags":16}},"globals":{"PlatformMetadata":[[1],"pointer"]}}"#;
            let physical = crate::descriptor::json::parse("t", json.as_bytes()).unwrap();
            let mut d = DataDescriptor::new(layout);
            d.merge("t", &physical, &[0, object]).unwrap();
            let p = platform_metadata(&target, &d).unwrap();
            assert_eq!(p.code_pointer_flags, HAS_ARM32_THUMB_BIT, "{layout:?}");
            assert_eq!(p.precode_machine_descriptor, Some(object));
            assert_eq!(
                (
                    p.code_address(0x1001),
                    p.code_pointer(0x1000),
                    p.code_pointer(0)
                ),
                (0x1000, 0x1001, 0)
            );
        }
        // Without the contract: the architecture decides.
        let target = MemoryBuilder::new(DataLayout::LE64).into_target();
        for (arch, flags) in [("x64", 0), ("arm", HAS_ARM32_THUMB_BIT), ("arm64", 0)] {
            let json = format!(r#"{{"globals":{{"Architecture":"{arch}"}}}}"#);
            let physical = crate::descriptor::json::parse("t", json.as_bytes()).unwrap();
            let mut d = DataDescriptor::new(DataLayout::LE64);
            d.merge("t", &physical, &[]).unwrap();
            assert_eq!(
                platform_metadata(&target, &d).unwrap().code_pointer_flags,
                flags,
                "{arch}"
            );
        }
    }
}
