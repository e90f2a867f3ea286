//! Holding every thread of a live process stopped while cdac reads it (`--freeze`).
//!
//! The default is to stop nothing while the heap is read (a garbage collection that runs
//! meanwhile makes the read start again) and threads one at a time for their stacks. A
//! freeze is the other trade: every thread is seized and held for the whole read, so the
//! heap cannot change under it, at the cost of the process doing nothing meanwhile; how
//! long is measured and said. Threads started while the freeze is being taken are caught
//! by listing again until no new one appears.
//!
//! A stack snapshot taken during a freeze reads the held threads without stopping them
//! again ([`holds`]). ptrace ties a traced thread to the thread of cdac that seized it:
//! the freeze is taken, used and released from one thread.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::thread_snapshot::{
    list_threads, stop_thread, thread_state, Seized, SnapshotError, Stop,
};

/// `(pid, tid)` of every thread a [`Freeze`] of this process holds.
static HELD: Mutex<Vec<(i32, i32)>> = Mutex::new(Vec::new());

/// Rounds of listing the threads before the freeze gives up on catching new ones (a
/// process that starts threads faster than they are stopped).
const MAX_ROUNDS: usize = 16;

/// Whether a freeze holds thread `tid` of `pid`.
pub fn holds(pid: i32, tid: i32) -> bool {
    HELD.lock()
        .map(|h| h.contains(&(pid, tid)))
        .unwrap_or(false)
}

/// Every thread of a process, held stopped until [`Freeze::release`] or drop.
pub struct Freeze {
    pid: i32,
    held: Vec<Seized>,
    /// When the first thread was asked to stop.
    asked: Instant,
    /// From asking the first thread to stop to the last one stopping.
    stopping: Duration,
}

/// How long a freeze held a process.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FreezeReport {
    /// Threads held.
    pub threads: usize,
    /// From asking the first thread to stop to letting the last one go, in milliseconds.
    pub held_ms: f64,
    /// Of which taking the freeze (stopping every thread), in milliseconds.
    pub stopping_ms: f64,
}

impl FreezeReport {
    /// "34 threads held stopped for 120.4 ms (--freeze; 1.2 ms to stop them)".
    pub fn describe(&self) -> String {
        format!(
            "{} threads held stopped for {:.1} ms (--freeze; {:.1} ms to stop them)",
            self.threads, self.held_ms, self.stopping_ms
        )
    }
}

impl Freeze {
    /// Stops every thread of `pid` and holds them.
    pub fn take(pid: i32) -> Result<Freeze, SnapshotError> {
        let asked = Instant::now();
        let mut freeze = Freeze {
            pid,
            held: Vec::new(),
            asked,
            stopping: Duration::ZERO,
        };
        let mut tried: Vec<i32> = Vec::new();
        for _ in 0..MAX_ROUNDS {
            let new: Vec<i32> = list_threads(pid)?
                .into_iter()
                .filter(|t| !tried.contains(t))
                .collect();
            if new.is_empty() {
                freeze.stopping = asked.elapsed();
                return Ok(freeze);
            }
            for tid in new {
                tried.push(tid);
                // An exited thread whose process lives on (a zombie main thread) never
                // stops: nothing of it runs to hold.
                if matches!(thread_state(pid, tid), None | Some('Z' | 'X')) {
                    continue;
                }
                if let Stop::Held { seized, .. } = stop_thread(pid, tid)? {
                    freeze.held.push(seized);
                    if let Ok(mut h) = HELD.lock() {
                        h.push((pid, tid));
                    }
                }
            }
        }
        Err(SnapshotError::Ptrace {
            pid,
            tid: pid,
            op: "freeze",
            source: std::io::Error::other(format!(
                "new threads kept starting while {} were stopped",
                freeze.held.len()
            )),
        })
    }

    /// Lets every thread go, and says for how long they were held.
    pub fn release(mut self) -> FreezeReport {
        self.let_go();
        FreezeReport {
            threads: self.held.len(),
            held_ms: self.asked.elapsed().as_secs_f64() * 1e3,
            stopping_ms: self.stopping.as_secs_f64() * 1e3,
        }
    }

    fn let_go(&mut self) {
        if let Ok(mut h) = HELD.lock() {
            h.retain(|&(pid, _)| pid != self.pid);
        }
        for s in &mut self.held {
            if let Err(e) = s.detach() {
                tracing::warn!(pid = self.pid, error = %e, "letting a frozen thread go failed");
            }
        }
    }
}

impl Drop for Freeze {
    fn drop(&mut self) {
        // Detaching twice is harmless: a detached Seized remembers it.
        self.let_go();
    }
}
