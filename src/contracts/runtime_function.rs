//! `RUNTIME_FUNCTION`: one contiguous piece of compiled code (a method's main body, one of
//! its funclets, or a cold part) in a code heap's or a ReadyToRun image's function table.
//! The one reader of these entries in target memory: the ExecutionManager's lookups, the
//! unwind-data sizes and the managed unwinder all go through [`RuntimeFunction::read`].
//!
//! x64 entries are three 32-bit RVAs (begin, end, unwind data); ARM64, ARM32, LoongArch64
//! and RISC-V64 entries have no end (the length is in the unwind data). The runtime's
//! descriptor names the fields (`RuntimeFunction.BeginAddress`, `EndAddress`,
//! `UnwindData`); where there is no descriptor (the unwinder following a chained entry),
//! [`RuntimeFunctionLayout::X64`] is the Windows x64 format.

use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// Where the fields of a `RUNTIME_FUNCTION` are, and how large one entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeFunctionLayout {
    /// Bytes per entry (the table's stride).
    pub size: u64,
    /// Offset of `BeginAddress`.
    pub begin: u64,
    /// Offset of `EndAddress`, on architectures that store one.
    pub end: Option<u64>,
    /// Offset of `UnwindData`.
    pub unwind_data: u64,
}

impl RuntimeFunctionLayout {
    /// The Windows x64 entry: begin, end and unwind data RVAs, 12 bytes.
    pub const X64: RuntimeFunctionLayout = RuntimeFunctionLayout {
        size: 12,
        begin: 0,
        end: Some(4),
        unwind_data: 8,
    };

    /// The Windows ARM64 entry: begin RVA and unwind data (an RVA, or packed data), 8
    /// bytes; the length is in the unwind data.
    pub const ARM64: RuntimeFunctionLayout = RuntimeFunctionLayout {
        size: 8,
        begin: 0,
        end: None,
        unwind_data: 4,
    };

    /// The layout the runtime's descriptor gives (`RuntimeFunction`).
    pub fn from_descriptor(descriptor: &DataDescriptor) -> Result<Self, ContractError> {
        let ty = descriptor.ty("RuntimeFunction")?;
        Ok(RuntimeFunctionLayout {
            size: u64::from(ty.size()?),
            begin: ty.offset("BeginAddress")?,
            end: ty
                .has_field("EndAddress")
                .then(|| ty.offset("EndAddress"))
                .transpose()?,
            unwind_data: ty.offset("UnwindData")?,
        })
    }

    /// Address of entry `index` of the table at `table`.
    pub fn entry(&self, table: u64, index: u64) -> u64 {
        table.wrapping_add(index.wrapping_mul(self.size))
    }
}

/// One `RUNTIME_FUNCTION`, its fields as stored: RVAs from the image (or, for JIT'ed code,
/// the code heap's range section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// RVA of the code's first byte (on ARM32 with the Thumb bit).
    pub begin: u32,
    /// RVA one past the code's last byte, where the architecture stores it.
    pub end: Option<u32>,
    /// RVA of the unwind data, or packed unwind data itself (low two bits nonzero on ARM).
    pub unwind_data: u32,
}

impl RuntimeFunction {
    /// Reads the entry at `addr` (one read of the whole entry).
    pub fn read(
        target: &Target,
        layout: &RuntimeFunctionLayout,
        addr: u64,
    ) -> Result<RuntimeFunction, ContractError> {
        let len = usize::try_from(layout.size).unwrap_or(usize::MAX);
        let bytes = target.read_bytes(addr, len)?;
        let field = |offset: u64| -> Result<u32, ContractError> {
            let at = usize::try_from(offset).unwrap_or(usize::MAX);
            let raw = at
                .checked_add(4)
                .and_then(|end| bytes.get(at..end))
                .ok_or_else(|| ContractError::Corrupt {
                    what: "RUNTIME_FUNCTION",
                    addr,
                    detail: format!("a field at offset {offset} is outside its {len} bytes"),
                })?;
            let raw: [u8; 4] = [raw[0], raw[1], raw[2], raw[3]];
            Ok(match target.layout().endian {
                crate::memory::Endian::Little => u32::from_le_bytes(raw),
                crate::memory::Endian::Big => u32::from_be_bytes(raw),
            })
        };
        Ok(RuntimeFunction {
            begin: field(layout.begin)?,
            end: layout.end.map(field).transpose()?,
            unwind_data: field(layout.unwind_data)?,
        })
    }

    /// `end - begin` where the entry stores an end: the code's length in bytes.
    pub fn stored_length(&self, addr: u64) -> Option<Result<u64, ContractError>> {
        let end = self.end?;
        Some(
            end.checked_sub(self.begin)
                .map(u64::from)
                .ok_or_else(|| ContractError::Corrupt {
                    what: "RUNTIME_FUNCTION",
                    addr,
                    detail: format!("ends ({end:#x}) before it begins ({:#x})", self.begin),
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    #[test]
    fn x64_entries_and_their_length() {
        let mut m = MemoryBuilder::new(DataLayout::LE64);
        let table = m
            .alloc(24, 4)
            .u32(0, 0x1000)
            .u32(4, 0x1040)
            .u32(8, 0x5000)
            .addr;
        let t = m.into_target();
        let rf = RuntimeFunction::read(&t, &RuntimeFunctionLayout::X64, table).unwrap();
        assert_eq!(
            rf,
            RuntimeFunction {
                begin: 0x1000,
                end: Some(0x1040),
                unwind_data: 0x5000
            }
        );
        assert_eq!(rf.stored_length(table).unwrap().unwrap(), 0x40);
        // The second entry is past what was laid out: the read fails at its address.
        let second = RuntimeFunctionLayout::X64.entry(table, 2);
        assert!(RuntimeFunction::read(&t, &RuntimeFunctionLayout::X64, second).is_err());
    }

    #[test]
    fn an_entry_without_an_end_and_a_backwards_one() {
        let arm64 = RuntimeFunctionLayout {
            size: 8,
            begin: 0,
            end: None,
            unwind_data: 4,
        };
        let mut m = MemoryBuilder::new(DataLayout::LE64);
        let at = m.alloc(20, 4).u32(0, 0x2000).u32(4, 0x31).u32(8, 0x30).addr;
        let t = m.into_target();
        let rf = RuntimeFunction::read(&t, &arm64, at).unwrap();
        assert_eq!((rf.begin, rf.end, rf.unwind_data), (0x2000, None, 0x31));
        assert!(rf.stored_length(at).is_none());
        // begin 0x31, end 0x30: corrupt, not a huge length.
        let backwards = RuntimeFunction::read(&t, &RuntimeFunctionLayout::X64, at + 4).unwrap();
        assert!(matches!(
            backwards.stored_length(at + 4),
            Some(Err(ContractError::Corrupt { .. }))
        ));
    }
}
