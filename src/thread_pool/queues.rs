//! The items of the pool's queues. A `ConcurrentQueue<object>` is a list of segments, each
//! a ring of slots (`Item`, `SequenceNumber`); a `WorkStealingQueue` is a ring of objects.
//! Both clear a slot when its item is taken, so the non-null items are the queued ones; they
//! are returned oldest first (from the ring's head).

use std::collections::HashSet;

use crate::contracts::ContractError;
use crate::inspect::{Inspector, Value};

use super::{int, path, reference};

/// Most items read from one queue.
const MAX_QUEUE_ITEMS: u64 = 1 << 20;
/// Most segments followed in one ConcurrentQueue.
const MAX_SEGMENTS: usize = 4096;

/// The pointer-sized values of an array's elements, `stride` bytes apart from `first`,
/// at most [`MAX_QUEUE_ITEMS`].
fn pointers(
    inspector: &mut Inspector<'_>,
    array: u64,
    field_offset: u64,
) -> Result<Vec<u64>, ContractError> {
    let a = inspector
        .view(array, 0)?
        .array
        .ok_or(ContractError::Corrupt {
            what: "thread pool queue",
            addr: array,
            detail: "its storage is no array".into(),
        })?;
    let target = inspector.runtime().target();
    let stride = u64::from(a.component_size.max(8));
    let mut out = Vec::new();
    for i in 0..a.length.min(MAX_QUEUE_ITEMS) {
        out.push(target.read_pointer(a.data + i * stride + field_offset)?);
    }
    Ok(out)
}

/// The non-null elements of an array of references.
pub fn reference_array(
    inspector: &mut Inspector<'_>,
    array: u64,
) -> Result<Vec<u64>, ContractError> {
    Ok(pointers(inspector, array, 0)?
        .into_iter()
        .filter(|&p| p != 0)
        .collect())
}

/// The items `ring` holds, oldest first: from slot `head` (masked to the ring), round.
fn from_head(ring: Vec<u64>, head: Option<i64>) -> Vec<u64> {
    let len = ring.len();
    let start = match head {
        Some(h) if len > 0 => (h as u64 % len as u64) as usize,
        _ => 0,
    };
    ring[start..]
        .iter()
        .chain(&ring[..start])
        .copied()
        .filter(|&p| p != 0)
        .collect()
}

/// The items of a `ConcurrentQueue<object>`, segment by segment from its head.
pub fn concurrent_queue_items(
    inspector: &mut Inspector<'_>,
    queue: u64,
) -> Result<Vec<u64>, ContractError> {
    let q = inspector.view(queue, 0)?;
    let mut segment = reference(path(&q.fields, &["_head"]));
    let mut seen = HashSet::new();
    let mut items = Vec::new();
    while let Some(s) = segment {
        if !seen.insert(s) || seen.len() > MAX_SEGMENTS {
            return Err(ContractError::Corrupt {
                what: "ConcurrentQueue",
                addr: queue,
                detail: format!(
                    "its segment list loops or has more than {MAX_SEGMENTS} segments (at {s:#x})"
                ),
            });
        }
        let v = inspector.view(s, 0)?;
        if let Some(slots) = reference(path(&v.fields, &["_slots"])) {
            // A slot's Item: its offset in the slot struct, from the first element.
            let offset = inspector
                .view(slots, 1)?
                .array
                .and_then(|a| match a.elements.first() {
                    Some(Value::Struct { fields, .. }) => {
                        fields.iter().find(|f| f.name == "Item").map(|f| f.offset)
                    }
                    _ => None,
                })
                .unwrap_or(0);
            let head = int(path(&v.fields, &["_headAndTail", "Head"]));
            items.extend(from_head(pointers(inspector, slots, offset)?, head));
        }
        if items.len() as u64 >= MAX_QUEUE_ITEMS {
            break;
        }
        segment = reference(path(&v.fields, &["_nextSegment"]));
    }
    Ok(items)
}

/// The items of a worker's `WorkStealingQueue`, from its head.
pub fn stealing_queue_items(
    inspector: &mut Inspector<'_>,
    queue: u64,
) -> Result<Vec<u64>, ContractError> {
    let q = inspector.view(queue, 0)?;
    let Some(array) = reference(path(&q.fields, &["m_array"])) else {
        return Ok(Vec::new());
    };
    let head = int(path(&q.fields, &["m_headIndex"]));
    Ok(from_head(pointers(inspector, array, 0)?, head))
}

#[cfg(test)]
mod tests {
    use super::from_head;

    #[test]
    fn rings_are_read_from_their_head_and_round() {
        assert_eq!(from_head(vec![3, 0, 1, 2], Some(2)), vec![1, 2, 3]);
        assert_eq!(from_head(vec![3, 0, 1, 2], Some(6)), vec![1, 2, 3]);
        assert_eq!(from_head(vec![5, 6], None), vec![5, 6]);
        assert!(from_head(Vec::new(), Some(4)).is_empty());
    }
}
