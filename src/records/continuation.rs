//! `ContinuationObject` and `AsyncResumeInfo`: an async method the runtime itself
//! suspended (runtime-async).
//!
//! Per runtime: .NET 11 describes both. A continuation is a managed object whose first
//! fields are `Next` (the caller's continuation, null for the outermost), `ResumeInfo` (a
//! native pointer to the method's resume stub and the address in its code it resumes at,
//! `DiagnosticIP`) and `State` (which suspension point of the method it is at). Runtimes
//! before 11 do not describe them, and the layout fails naming the type.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

use super::TypeFields;

/// Where a continuation's fields are, and its resume information's code address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContinuationLayout {
    next: u64,
    resume_info: u64,
    state: u64,
    diagnostic_ip: u64,
}

impl ContinuationLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let c = TypeFields::of(d, "ContinuationObject")?;
        let r = TypeFields::of(d, "AsyncResumeInfo")?;
        Ok(ContinuationLayout {
            next: c.required("Next")?,
            resume_info: c.required("ResumeInfo")?,
            state: c.required("State")?,
            diagnostic_ip: r.required("DiagnosticIP")?,
        })
    }
}

/// A continuation, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContinuationRecord {
    /// The caller's continuation (0: the outermost).
    pub next: u64,
    /// The suspension point the method is at.
    pub state: i32,
    /// The address in the suspended method's code where it resumes (0: none, as for the
    /// continuations the library writes by hand to await a Task or a value-task source).
    pub resume_address: u64,
}

impl ContinuationRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &ContinuationLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let resume_info = target.read_pointer(address.wrapping_add(layout.resume_info))?;
        let resume_address = if resume_info == 0 {
            0
        } else {
            target.read_pointer(resume_info.wrapping_add(layout.diagnostic_ip))?
        };
        Ok(ContinuationRecord {
            next: target.read_pointer(address.wrapping_add(layout.next))?,
            state: target.read_u32(address.wrapping_add(layout.state))? as i32,
            resume_address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;
    use crate::records::fields::test_descriptor as descriptor;

    /// .NET 11.0.0's layout.
    const NET11: &str = r#"{"types":{"ContinuationObject":{"Next":8,"ResumeInfo":16,"State":28},
        "AsyncResumeInfo":{"DiagnosticIP":8}}}"#;

    #[test]
    fn a_continuation_resumes_where_its_resume_info_says() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        // A method's continuation, its caller's, and a hand-written one (no resume info).
        b.region(0x1000, 0x20)
            .u64(8, 0x2000)
            .u64(16, 0x5000)
            .u32(28, 2);
        b.region(0x2000, 0x20).u64(16, 0x5010);
        b.region(0x3000, 0x20).u64(8, 0x1000);
        b.region(0x5000, 0x20)
            .u64(0, 0x6000)
            .u64(8, 0x7777)
            .u64(16, 0x6100)
            .u64(24, 0x8888);
        let t = b.into_target();
        let layout = ContinuationLayout::from_descriptor(&descriptor(NET11)).expect("layout");
        let inner = ContinuationRecord::read(&t, &layout, 0x1000).expect("inner");
        assert_eq!(
            (inner.next, inner.state, inner.resume_address),
            (0x2000, 2, 0x7777)
        );
        let outer = ContinuationRecord::read(&t, &layout, 0x2000).expect("outer");
        assert_eq!(
            (outer.next, outer.state, outer.resume_address),
            (0, 0, 0x8888)
        );
        let by_hand = ContinuationRecord::read(&t, &layout, 0x3000).expect("hand-written");
        assert_eq!((by_hand.next, by_hand.resume_address), (0x1000, 0));
    }

    #[test]
    fn a_runtime_without_continuations_fails_naming_the_type() {
        let d = descriptor(r#"{"types":{"Thread":{"Id":0}}}"#);
        let e = ContinuationLayout::from_descriptor(&d).expect_err("no continuation type");
        assert!(e.to_string().contains("ContinuationObject"), "{e}");
    }
}
