//! The `RealCodeHeader` of a JIT'ed method, read once into a typed record: the code's
//! MethodDesc, its GC, debug and exception-handling info, and its unwind infos (spec:
//! `contracts/ExecutionManager.md`). Where the fields are is resolved once per
//! ExecutionManager ([`RealCodeHeaderLayout`]), not looked up by name at each use.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

const TYPE: &str = "RealCodeHeader";

/// Offsets of a `RealCodeHeader`'s fields. Only `MethodDesc` is required: a lookup needs
/// nothing else, and a descriptor without the rest (a mock, a runtime that does not
/// describe `EHInfo`) fails only the question that needs the missing field, naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RealCodeHeaderLayout {
    method_desc: u64,
    gc_info: Option<u64>,
    debug_info: Option<u64>,
    eh_info: Option<u64>,
    unwind_infos: Option<(u64, u64)>,
}

impl RealCodeHeaderLayout {
    /// The layout the descriptor gives.
    pub(crate) fn from_descriptor(
        descriptor: &DataDescriptor,
    ) -> Result<RealCodeHeaderLayout, DescriptorError> {
        let ty = descriptor.ty(TYPE)?;
        let optional = |name: &str| ty.has_field(name).then(|| ty.offset(name)).transpose();
        let unwind = match (optional("NumUnwindInfos")?, optional("UnwindInfos")?) {
            (Some(count), Some(first)) => Some((count, first)),
            _ => None,
        };
        Ok(RealCodeHeaderLayout {
            method_desc: ty.offset("MethodDesc")?,
            gc_info: optional("GCInfo")?,
            debug_info: optional("DebugInfo")?,
            eh_info: optional("EHInfo")?,
            unwind_infos: unwind,
        })
    }

    /// Offset of `MethodDesc`.
    pub(crate) fn method_desc_offset(&self) -> u64 {
        self.method_desc
    }

    /// Offset of `GCInfo`, or the error naming it.
    pub(crate) fn gc_info_offset(&self) -> Result<u64, ContractError> {
        self.gc_info.ok_or_else(|| missing("GCInfo"))
    }
}

/// A `RealCodeHeader`, read once. A field the descriptor does not place is `None`, and its
/// accessor's error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RealCodeHeader {
    /// Address of the header.
    pub address: u64,
    /// The method's `MethodDesc`.
    pub method_desc: u64,
    gc_info: Option<u64>,
    debug_info: Option<u64>,
    eh_info: Option<u64>,
    /// The number of `RUNTIME_FUNCTION`s (main body, then funclets) and the first's address.
    unwind_infos: Option<(u32, u64)>,
}

impl RealCodeHeader {
    /// Reads the header at `address`.
    pub(crate) fn read(
        target: &Target,
        layout: &RealCodeHeaderLayout,
        address: u64,
    ) -> Result<RealCodeHeader, ContractError> {
        let ptr = |offset: u64| target.read_pointer(address.wrapping_add(offset));
        let unwind_infos = match layout.unwind_infos {
            Some((count, first)) => Some((
                target.read_u32(address.wrapping_add(count))?,
                address.wrapping_add(first),
            )),
            None => None,
        };
        Ok(RealCodeHeader {
            address,
            method_desc: ptr(layout.method_desc)?,
            gc_info: layout.gc_info.map(ptr).transpose()?,
            debug_info: layout.debug_info.map(ptr).transpose()?,
            eh_info: layout.eh_info.map(ptr).transpose()?,
            unwind_infos,
        })
    }

    /// The GC info pointer.
    pub(crate) fn gc_info(&self) -> Result<u64, ContractError> {
        self.gc_info.ok_or_else(|| missing("GCInfo"))
    }

    /// The debug info pointer.
    pub(crate) fn debug_info(&self) -> Result<u64, ContractError> {
        self.debug_info.ok_or_else(|| missing("DebugInfo"))
    }

    /// The exception-handling info pointer.
    pub(crate) fn eh_info(&self) -> Result<u64, ContractError> {
        self.eh_info.ok_or_else(|| missing("EHInfo"))
    }

    /// How many `RUNTIME_FUNCTION`s the method has (main body, then funclets), and the
    /// address of the first.
    pub(crate) fn unwind_infos(&self) -> Result<(u32, u64), ContractError> {
        self.unwind_infos.ok_or_else(|| missing("UnwindInfos"))
    }
}

fn missing(field: &str) -> ContractError {
    ContractError::Descriptor(DescriptorError::MissingField {
        type_name: TYPE.into(),
        field: field.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::json;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    fn descriptor(with_eh: bool) -> DataDescriptor {
        let eh = if with_eh { r#", "EHInfo": 24"# } else { "" };
        let text = format!(
            r#"{{ "types": {{ "RealCodeHeader": {{ "MethodDesc": 0, "GCInfo": 8,
                   "DebugInfo": 16{eh}, "NumUnwindInfos": 32, "UnwindInfos": 40 }} }} }}"#
        );
        let physical = json::parse("test", text.as_bytes()).expect("descriptor");
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).expect("merge");
        d
    }

    #[test]
    fn every_field_is_read_from_its_offset() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 0x40)
            .u64(0, 0xaa)
            .u64(8, 0xbb)
            .u64(16, 0xcc)
            .u64(24, 0xdd)
            .u32(32, 3);
        let t = b.into_target();
        let layout = RealCodeHeaderLayout::from_descriptor(&descriptor(true)).expect("layout");
        let h = RealCodeHeader::read(&t, &layout, 0x1000).expect("header");
        assert_eq!((h.method_desc, h.gc_info().ok()), (0xaa, Some(0xbb)));
        assert_eq!(
            (h.debug_info().ok(), h.eh_info().ok()),
            (Some(0xcc), Some(0xdd))
        );
        assert_eq!(h.unwind_infos().ok(), Some((3, 0x1028)));
    }

    #[test]
    fn a_field_the_descriptor_lacks_is_named_when_asked_for() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 0x40).u64(0, 0xaa);
        let t = b.into_target();
        let layout = RealCodeHeaderLayout::from_descriptor(&descriptor(false)).expect("layout");
        let h = RealCodeHeader::read(&t, &layout, 0x1000).expect("header");
        assert_eq!(h.method_desc, 0xaa);
        let err = h.eh_info().expect_err("no EHInfo");
        assert!(err.to_string().contains("no field EHInfo"), "{err}");
    }
}
