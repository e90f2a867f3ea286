//! The stack trace a managed exception captured: `System.Exception._stackTrace`, decoded
//! into frames {IP, SP, MethodDesc, flags}, for .NET 8, 9 and 10.
//!
//! What the runtime stores (`StackTraceArray`/`StackTraceElement`, `clrex.h`/`excep.h`;
//! the cDAC `Exception` contract reads the same):
//!
//! * `_stackTrace` is either the byte array itself (`sbyte[]`/`byte[]`: .NET 8 always; .NET 9+
//!   when nothing needs keeping alive) or, on .NET 9+, an `object[]` whose slot 0 is the byte
//!   array and whose other slots keep dynamic or collectible methods alive. The two are told
//!   apart by the array's component size (its MethodTable's low flags word): 1 for the byte
//!   array, the pointer size for `object[]`.
//! * The byte array's data is a header then the elements:
//!   * .NET 8: `{ size_t size; Thread* thread; }`
//!   * .NET 9+: `{ uint32 size; uint32 keepAliveItemsCount; Thread* thread; }`
//! * then `size` elements `{ ip; sp; MethodDesc*; int32 flags; }`, each padded to pointer
//!   alignment (32 bytes on 64-bit, 16 on 32-bit).
//!
//! Everything read is checked against the array's own length, the frame count against
//! [`Limits::max_list_length`](crate::limits::Limits), and the one payload read against the
//! read-size limit; damage is a [`ContractError::Corrupt`] naming the address.

use crate::contracts::registry::{self, Contract, ContractContext};
use crate::contracts::ContractError;
use crate::limits::Limit;
use crate::memory::{decode_unsigned, Target};

/// `StackTraceElement.flags`: the element is the last frame of a trace captured elsewhere
/// (`ExceptionDispatchInfo`), after which "End of stack trace from previous location" goes.
pub const STEF_LAST_FRAME_FROM_FOREIGN_STACK_TRACE: u32 = 0x0001;
/// `StackTraceElement.flags`: the IP has already been adjusted (decremented) to point into
/// the call instruction.
pub const STEF_IP_ADJUSTED: u32 = 0x0002;

use crate::contracts::runtime_type_system::MTF_HAS_COMPONENT_SIZE as MT_HAS_COMPONENT_SIZE;

/// Which header the runtime writes before the elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceLayout {
    /// .NET 8 (and earlier): `{ size_t size; Thread* thread; }`, `_stackTrace` is the byte
    /// array itself.
    Net8,
    /// .NET 9 and later: `{ uint32 size; uint32 keepAliveItemsCount; Thread* thread; }`,
    /// `_stackTrace` is the byte array or an `object[]` holding it in slot 0.
    Net9Plus,
}

impl Contract for TraceLayout {
    const NAME: &'static str = "Exception";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            // Runtimes that name the contract (.NET 9 and later) write the newer header.
            1 => Ok(context
                .major
                .map_or(TraceLayout::Net9Plus, TraceLayout::for_runtime_major)),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }

    // .NET 8 does not name the contract: its version string tells the layout.
    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        context.major.map(|m| Ok(TraceLayout::for_runtime_major(m)))
    }
}

impl TraceLayout {
    /// The layout of a runtime of this major version.
    pub fn for_runtime_major(major: u32) -> TraceLayout {
        if major >= 9 {
            TraceLayout::Net9Plus
        } else {
            TraceLayout::Net8
        }
    }
}

/// One frame of a captured trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceFrame {
    /// Instruction pointer (a return address, or the faulting/throwing IP).
    pub ip: u64,
    /// Stack pointer of the frame.
    pub sp: u64,
    /// The frame's MethodDesc.
    pub method_desc: u64,
    /// `STEF_*` flags.
    pub flags: u32,
}

impl TraceFrame {
    /// Whether the trace continues from another capture after this frame.
    pub fn is_last_foreign_frame(&self) -> bool {
        self.flags & STEF_LAST_FRAME_FROM_FOREIGN_STACK_TRACE != 0
    }
}

/// A decoded `_stackTrace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionStackTrace {
    /// The byte array holding header and elements.
    pub array: u64,
    /// The `object[]` holding it, when `_stackTrace` was one (.NET 9+).
    pub keep_alive_array: Option<u64>,
    /// The header's keep-alive item count (.NET 9+; 0 on .NET 8).
    pub keep_alive_count: u32,
    /// The thread that captured the trace (the header's `Thread*`).
    pub thread: u64,
    /// Frames, innermost (the throw site) first.
    pub frames: Vec<TraceFrame>,
}

fn corrupt(addr: u64, detail: String) -> ContractError {
    ContractError::Corrupt {
        what: "exception stack trace",
        addr,
        detail,
    }
}

/// Offset of an array's first element from the object's address: MethodTable pointer,
/// then the 32-bit length, padded to pointer size.
fn array_data_offset(pointer_size: u8) -> u64 {
    if pointer_size == 8 {
        16
    } else {
        8
    }
}

/// The component size of the array at `object` (from its MethodTable), and its length.
fn array_shape(target: &Target, object: u64) -> Result<(u32, u32), ContractError> {
    let mt = target.read_pointer(object)? & !7;
    if mt == 0 {
        return Err(corrupt(object, "the array has no MethodTable".into()));
    }
    let flags = target.read_u32(mt)?;
    if flags & MT_HAS_COMPONENT_SIZE == 0 {
        return Err(corrupt(
            object,
            format!("MethodTable {mt:#x} is not an array's (flags {flags:#010x})"),
        ));
    }
    let ps = u64::from(target.pointer_size());
    let length = target.read_u32(object.wrapping_add(ps))?;
    Ok((flags & 0xFFFF, length))
}

/// Decodes the captured stack trace `stack_trace` (the value of an exception's
/// `_stackTrace` field; 0 gives an empty trace) of a runtime with `layout`.
pub fn decode_stack_trace(
    target: &Target,
    stack_trace: u64,
    layout: TraceLayout,
) -> Result<ExceptionStackTrace, ContractError> {
    let ps = target.pointer_size();
    if ps != 4 && ps != 8 {
        return Err(corrupt(stack_trace, format!("pointer size {ps}")));
    }
    let ptr = u64::from(ps);
    let empty = |array, keep_alive_array| ExceptionStackTrace {
        array,
        keep_alive_array,
        keep_alive_count: 0,
        thread: 0,
        frames: Vec::new(),
    };
    if stack_trace == 0 {
        return Ok(empty(0, None));
    }
    let data_offset = array_data_offset(ps);
    let (component, length) = array_shape(target, stack_trace)?;
    let (array, keep_alive_array) = if component == 1 {
        (stack_trace, None)
    } else if u64::from(component) == ptr && layout == TraceLayout::Net9Plus {
        if length == 0 {
            return Err(corrupt(
                stack_trace,
                "the keep-alive object[] is empty".into(),
            ));
        }
        let inner = target.read_pointer(stack_trace.wrapping_add(data_offset))?;
        if inner == 0 {
            return Ok(empty(0, Some(stack_trace)));
        }
        let (c, _) = array_shape(target, inner)?;
        if c != 1 {
            return Err(corrupt(
                inner,
                format!("slot 0 of the keep-alive array is an array of {c}-byte components, not a byte array"),
            ));
        }
        (inner, Some(stack_trace))
    } else {
        return Err(corrupt(
            stack_trace,
            format!("an array of {component}-byte components is no stack trace of {layout:?}"),
        ));
    };
    let (_, bytes_len) = array_shape(target, array)?;
    let data = array.wrapping_add(data_offset);
    let header_size = match layout {
        TraceLayout::Net8 => 2 * ptr,
        TraceLayout::Net9Plus => 8 + ptr,
    };
    let element_size = (3 * ptr + 4).div_ceil(ptr) * ptr;
    let bytes_len = u64::from(bytes_len);
    if bytes_len < header_size {
        if bytes_len == 0 {
            return Ok(empty(array, keep_alive_array));
        }
        return Err(corrupt(
            array,
            format!("{bytes_len}-byte array is shorter than the {header_size}-byte header"),
        ));
    }
    let header = target.read_bytes(data, header_size as usize)?;
    let endian = target.layout().endian;
    // Callers pass in-bounds ranges: the header and elements were read whole.
    let word = |b: &[u8], at: usize, n: u64| -> u64 {
        b.get(at..at + n as usize)
            .map_or(0, |bytes| decode_unsigned(bytes, endian))
    };
    let (count, keep_alive_count, thread) = match layout {
        TraceLayout::Net8 => (word(&header, 0, ptr), 0u32, word(&header, ps as usize, ptr)),
        TraceLayout::Net9Plus => (
            word(&header, 0, 4),
            word(&header, 4, 4) as u32,
            word(&header, 8, ptr),
        ),
    };
    let cap = target.limits().max_list_length;
    if count > cap {
        return Err(ContractError::LimitExceeded {
            what: "exception stack trace frames",
            addr: array,
            limit: Limit::ListLength,
            cap,
            unit: "entries",
        });
    }
    let body_len = count.saturating_mul(element_size);
    let needed = header_size.saturating_add(body_len);
    if needed > bytes_len {
        return Err(corrupt(
            array,
            format!("{count} frames need {needed} bytes, the array holds {bytes_len}"),
        ));
    }
    let body = target.read_bytes(data.wrapping_add(header_size), body_len as usize)?;
    let frames = body
        .chunks_exact(element_size as usize)
        .map(|e| TraceFrame {
            ip: word(e, 0, ptr),
            sp: word(e, ps as usize, ptr),
            method_desc: word(e, 2 * ps as usize, ptr),
            flags: word(e, 3 * ps as usize, 4) as u32,
        })
        .collect();
    Ok(ExceptionStackTrace {
        array,
        keep_alive_array,
        keep_alive_count,
        thread,
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    const BYTE_MT: u64 = 0x5000;
    const OBJ_ARRAY_MT: u64 = 0x6000;
    const STRING_MT: u64 = 0x7000;

    fn frame(i: u64) -> TraceFrame {
        TraceFrame {
            ip: 0x7f00_0000_1000 + i * 0x10,
            sp: 0x7ffd_0000_0000 + i * 0x40,
            method_desc: 0x7f00_1000_0000 + i * 0x28,
            flags: if i == 1 {
                STEF_LAST_FRAME_FROM_FOREIGN_STACK_TRACE
            } else {
                0
            },
        }
    }

    /// Writes a byte array holding a trace of `n` frames (claiming `claimed` in its header)
    /// and, if `wrap`, an object[] holding it; returns the `_stackTrace` value.
    fn build(
        layout: DataLayout,
        trace: TraceLayout,
        n: u64,
        claimed: u64,
        wrap: bool,
    ) -> (Target, u64, u64) {
        let ps = u64::from(layout.pointer_size);
        let mut b = MemoryBuilder::new(layout);
        b.region(BYTE_MT, 16).u32(0, MT_HAS_COMPONENT_SIZE | 1);
        b.region(OBJ_ARRAY_MT, 16)
            .u32(0, MT_HAS_COMPONENT_SIZE | ps as u32);
        b.region(STRING_MT, 16).u32(0, 0x0000_0002);
        let data = array_data_offset(layout.pointer_size) as usize;
        let header = match trace {
            TraceLayout::Net8 => 2 * ps,
            TraceLayout::Net9Plus => 8 + ps,
        } as usize;
        let elem = (3 * ps + 4).div_ceil(ps) * ps;
        let len = header + (n * elem) as usize;
        let r = b.alloc(data + len, 8);
        let array = r.at(0);
        r.pointer(0, BYTE_MT).u32(ps as usize, len as u32);
        match trace {
            TraceLayout::Net8 => {
                r.pointer(data, claimed).pointer(data + ps as usize, 0xabc0);
            }
            TraceLayout::Net9Plus => {
                r.u32(data, claimed as u32)
                    .u32(data + 4, 2)
                    .pointer(data + 8, 0xabc0);
            }
        }
        for i in 0..n {
            let at = data + header + (i * elem) as usize;
            let f = frame(i);
            r.pointer(at, f.ip)
                .pointer(at + ps as usize, f.sp)
                .pointer(at + 2 * ps as usize, f.method_desc)
                .u32(at + 3 * ps as usize, f.flags);
        }
        let value = if wrap {
            let w = b.alloc(data + 3 * ps as usize, 8);
            w.pointer(0, OBJ_ARRAY_MT)
                .u32(ps as usize, 3)
                .pointer(data, array)
                .pointer(data + ps as usize, 0x1234_5670);
            w.at(0)
        } else {
            array
        };
        (b.into_target(), value, array)
    }

    #[test]
    fn decodes_every_shape() {
        for layout in [DataLayout::LE64, DataLayout::LE32, DataLayout::BE64] {
            for (trace, wrap) in [
                (TraceLayout::Net8, false),
                (TraceLayout::Net9Plus, false),
                (TraceLayout::Net9Plus, true),
            ] {
                let (t, value, array) = build(layout, trace, 3, 3, wrap);
                let got = decode_stack_trace(&t, value, trace).expect("decodes");
                let mask = if layout.pointer_size == 4 {
                    0xFFFF_FFFF
                } else {
                    u64::MAX
                };
                let want: Vec<TraceFrame> = (0..3)
                    .map(|i| {
                        let f = frame(i);
                        TraceFrame {
                            ip: f.ip & mask,
                            sp: f.sp & mask,
                            method_desc: f.method_desc & mask,
                            flags: f.flags,
                        }
                    })
                    .collect();
                assert_eq!(got.frames, want, "{layout:?} {trace:?} wrap={wrap}");
                assert_eq!(got.array, array);
                assert_eq!(got.thread, 0xabc0);
                assert_eq!(got.keep_alive_array, wrap.then_some(value));
                assert_eq!(
                    got.keep_alive_count,
                    if trace == TraceLayout::Net9Plus { 2 } else { 0 }
                );
                assert!(got.frames[1].is_last_foreign_frame());
                assert!(!got.frames[0].is_last_foreign_frame());
            }
        }
    }

    #[test]
    fn empty_and_null() {
        let (t, value, _) = build(DataLayout::LE64, TraceLayout::Net9Plus, 0, 0, false);
        assert!(decode_stack_trace(&t, value, TraceLayout::Net9Plus)
            .expect("empty")
            .frames
            .is_empty());
        assert!(decode_stack_trace(&t, 0, TraceLayout::Net8)
            .expect("null")
            .frames
            .is_empty());
    }

    #[test]
    fn damage_is_a_typed_error() {
        // A count past what the array holds.
        let (t, value, array) = build(DataLayout::LE64, TraceLayout::Net9Plus, 2, 5, false);
        match decode_stack_trace(&t, value, TraceLayout::Net9Plus) {
            Err(ContractError::Corrupt { addr, .. }) => assert_eq!(addr, array),
            other => panic!("{other:?}"),
        }
        // A count past the list-length limit.
        let (t, value, _) = build(DataLayout::LE64, TraceLayout::Net8, 2, 2, false);
        let limits = crate::limits::Limits {
            max_list_length: 1,
            ..Default::default()
        };
        let t = t.with_limits(limits);
        let err = decode_stack_trace(&t, value, TraceLayout::Net8).expect_err("limit");
        assert_eq!(err.limit(), Some(Limit::ListLength));
        // A .NET 8 trace is never an object[].
        let (t, value, _) = build(DataLayout::LE64, TraceLayout::Net8, 2, 2, true);
        assert!(matches!(
            decode_stack_trace(&t, value, TraceLayout::Net8),
            Err(ContractError::Corrupt { .. })
        ));
        // Not an array at all, and unmapped memory.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(STRING_MT, 16).u32(0, 2);
        let obj = b.alloc(32, 8).pointer(0, STRING_MT).at(0);
        let t = b.into_target();
        assert!(matches!(
            decode_stack_trace(&t, obj, TraceLayout::Net9Plus),
            Err(ContractError::Corrupt { .. })
        ));
        assert!(matches!(
            decode_stack_trace(&t, 0xdead_0000, TraceLayout::Net9Plus),
            Err(ContractError::Read(_))
        ));
    }

    #[test]
    fn garbage_never_panics() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &(
                    proptest::collection::vec(any::<u8>(), 0..256),
                    any::<bool>(),
                    any::<bool>(),
                ),
                |(bytes, net9, wrap)| {
                    let mut b = MemoryBuilder::new(DataLayout::LE64);
                    b.region(BYTE_MT, 16).u32(0, MT_HAS_COMPONENT_SIZE | 1);
                    b.region(OBJ_ARRAY_MT, 16).u32(0, MT_HAS_COMPONENT_SIZE | 8);
                    let r = b.alloc(16 + bytes.len(), 8);
                    r.bytes(16, &bytes)
                        .pointer(0, if wrap { OBJ_ARRAY_MT } else { BYTE_MT })
                        .u32(8, bytes.len() as u32);
                    let at = r.at(0);
                    let t = b.into_target();
                    let layout = if net9 {
                        TraceLayout::Net9Plus
                    } else {
                        TraceLayout::Net8
                    };
                    let _ = decode_stack_trace(&t, at, layout);
                    Ok(())
                },
            )
            .expect("no panic");
    }
}
