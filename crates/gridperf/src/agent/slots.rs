//! Test slots: `--max-tests` tests run at once; a client that finds them
//! all taken is told "busy" at once, or waits in a bounded queue if it
//! asked to, leaving it if it hangs up.

use super::reply::{send_error, Fail};
use super::Shared;
use gridperf_core::wire::{self, AgentMsg, ErrorCode};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// Tests running and clients waiting.
pub(crate) struct Slots {
    pub running: usize,
    pub waiting: usize,
}

/// Holds a test slot; frees it on drop.
pub(super) struct SlotGuard<'a>(&'a Shared);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.0.slots();
        s.running = s.running.saturating_sub(1);
        drop(s);
        self.0.freed.notify_all();
    }
}

/// Takes a test slot for a client: at once, after waiting in the queue up
/// to `queue_ms` (the client asked to), or not ("busy", told to the client).
pub(super) fn take<'a>(shared: &'a Shared, ctl: &mut TcpStream, queue_ms: u64) -> Result<SlotGuard<'a>, Fail> {
    let busy = |slots: &Slots| {
        format!(
            "the agent is busy: {} test(s) running (limit {}, set with --max-tests), {} waiting",
            slots.running, shared.cfg.max_tests, slots.waiting
        )
    };
    let mut slots = shared.slots();
    if shared.stopping() {
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
    }
    if slots.running < shared.cfg.max_tests {
        slots.running += 1;
        return Ok(SlotGuard(shared));
    }
    if queue_ms == 0 {
        let msg = busy(&slots) + "; ask to wait with --queue DURATION";
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, msg));
    }
    if slots.waiting >= shared.cfg.queue_len {
        let msg = busy(&slots) + ": the queue is full";
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, msg));
    }
    let ahead = slots.waiting as u32;
    slots.waiting += 1;
    drop(slots);
    let _ = wire::write_msg(ctl, &AgentMsg::Queued { ahead });
    let deadline = Instant::now() + Duration::from_millis(queue_ms.min(3_600_000));
    let mut slots = shared.slots();
    loop {
        if slots.running < shared.cfg.max_tests && !shared.stopping() {
            slots.waiting -= 1;
            slots.running += 1;
            return Ok(SlotGuard(shared));
        }
        let now = Instant::now();
        let why = if shared.stopping() {
            Some("the agent is shutting down".to_string())
        } else if now >= deadline {
            Some(busy(&slots) + &format!(" after waiting {} ms in the queue", queue_ms))
        } else {
            None
        };
        // a client that hung up (or spoke out of turn) while queued leaves the queue
        let gone = gridperf_sys::poll_readable(&[ctl.as_raw_fd()], 0).map(|r| r[0]).unwrap_or(true);
        if why.is_some() || gone {
            slots.waiting -= 1;
            drop(slots);
            shared.freed.notify_all();
            return Err(match why {
                Some(msg) => send_error(ctl, ErrorCode::Busy, msg),
                None => Fail::Told("the client left the queue".into()),
            });
        }
        let wait = (deadline - now).min(Duration::from_millis(200));
        slots = shared.freed.wait_timeout(slots, wait).unwrap_or_else(PoisonError::into_inner).0;
    }
}
