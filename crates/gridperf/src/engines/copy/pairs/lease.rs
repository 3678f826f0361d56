//! The one queue of a copy between agents, and the client's side of each
//! pair: a source asks for leases as its queue runs low, reporting the
//! blocks acknowledged since the last (the conversation is
//! [`proto::Leases`]'s); a pair that is lost gives its blocks back to the
//! front of the queue for the others.

use crate::error::{Error, Result};
use crate::runner::converse::{converse, Acts, Clock, Tasks};
use crate::runner::{Opened, Session};
use gridperf_core::model::{CopyEvent, CopyStream};
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{End, Input};
use gridperf_core::wire::CopyNeed;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The one queue: blocks not yet leased, the blocks each pair holds, which pairs still run.
pub(super) struct Ledger {
    pub pending: VecDeque<(u32, u64)>,
    pub leased: Vec<HashSet<(u32, u64)>>,
    pub alive: Vec<bool>,
}

impl Ledger {
    /// Whether pair `k` may be told that no more blocks will come: none
    /// left, and no other running pair holds any that might come back.
    fn last_for(&self, k: usize) -> bool {
        self.pending.is_empty() && (0..self.leased.len()).all(|p| p == k || !self.alive[p] || self.leased[p].is_empty())
    }
}

/// How one pair ended.
#[derive(Default)]
pub(super) struct PairEnd {
    pub streams: Vec<CopyStream>,
    pub events: Vec<CopyEvent>,
    pub tail_blocks: u64,
    pub changed: Vec<u32>,
    pub error: Option<String>,
    pub seconds: f64,
}

/// What the pairs' threads share: the one queue, the events as they come.
pub(super) struct Shared<'a> {
    pub ledger: &'a Mutex<Ledger>,
    pub fresh: &'a Mutex<Vec<CopyEvent>>,
    pub lost_events: &'a Mutex<Vec<CopyEvent>>,
    pub names: Vec<String>,
    pub size_of: &'a (dyn Fn(u32, u64) -> u64 + Sync),
    pub t0: Instant,
    pub conns: u32,
    pub within: std::time::Duration,
}

impl Shared<'_> {
    /// Pair k's source, until it says every block is sent or is lost:
    /// what is said when is [`proto::Leases`]'s; its tasks draw leases
    /// from the one queue, counting in `moved` the bytes the source says
    /// were acknowledged, and note what its pool did.
    pub fn serve(&self, k: usize, s: &mut Opened, moved: &AtomicU64) -> PairEnd {
        let clock = Clock::start();
        let mut m = proto::Leases::new(gridperf_core::proto::nanos(self.within), clock.now());
        let mut tasks = PairTasks { shared: self, k, moved };
        match converse(&mut s.session, &mut m, Vec::new(), &clock, self.within, &mut tasks) {
            Ok(()) => match m.take_sent() {
                Some(x) => self.sent(k, x.changed, x.streams, x.events, x.tail_blocks, moved),
                None => self.lost(k, "internal: the conversation ended before copy-sent".into()),
            },
            Err(e) => self.lost(k, e.to_string()),
        }
    }

    /// What pair k's source did, for the user: its connections numbered from k * conns.
    fn note(&self, k: usize, event: CopyEvent) {
        let shift = |x: Option<u32>| x.map(|i| i + k as u32 * self.conns);
        lock(self.fresh).push(CopyEvent {
            stream: shift(event.stream),
            new_stream: shift(event.new_stream),
            why: format!("pair {k} ({}): {}", self.names[k], event.why),
            ..event
        });
    }

    /// The blocks acknowledged since pair k's last lease off its books, and
    /// its next lease: at most an even share of what is left, so that a
    /// small file's blocks do not all go to the pair that asked first.
    fn lease(&self, k: usize, done: &[CopyNeed], want: u32, moved: &AtomicU64) -> (Vec<CopyNeed>, bool) {
        let mut l = lock(self.ledger);
        let mut bytes = 0;
        for x in done {
            for &(a, b) in &x.ranges {
                for i in a..b.min(a + (1 << 24)) {
                    if l.leased[k].remove(&(x.file, i)) {
                        bytes += (self.size_of)(x.file, i);
                    }
                }
            }
        }
        moved.fetch_add(bytes, Ordering::Relaxed);
        let alive = l.alive.iter().filter(|a| **a).count().max(1);
        let share = l.pending.len().div_ceil(alive).max(1);
        let mut give = Vec::new();
        while give.len() < (want.min(4096) as usize).min(share) {
            let Some(b) = l.pending.pop_front() else { break };
            give.push(b);
        }
        l.leased[k].extend(give.iter().copied());
        let last = l.last_for(k);
        (CopyNeed::of_blocks(give), last)
    }

    /// Pair k's pool ended well: what it still held was acknowledged; its
    /// connections are numbered from k * conns in the report.
    fn sent(
        &self,
        k: usize,
        changed: Vec<u32>,
        streams: Vec<CopyStream>,
        events: Vec<CopyEvent>,
        tail_blocks: u64,
        moved: &AtomicU64,
    ) -> PairEnd {
        let mut l = lock(self.ledger);
        let held: Vec<(u32, u64)> = l.leased[k].drain().collect();
        l.alive[k] = false;
        drop(l);
        let bytes: u64 = held.iter().filter(|(f, _)| !changed.contains(f)).map(|&(f, i)| (self.size_of)(f, i)).sum();
        moved.fetch_add(bytes, Ordering::Relaxed);
        let global = k as u32 * self.conns;
        let shift = |x: Option<u32>| x.map(|i| i + global);
        PairEnd {
            streams: streams
                .into_iter()
                .map(|st| CopyStream { index: st.index + global, slot: st.slot + global, pair: Some(k as u32), ..st })
                .collect(),
            events: events
                .into_iter()
                .map(|e| CopyEvent {
                    stream: shift(e.stream),
                    new_stream: shift(e.new_stream),
                    why: format!("pair {k} ({}): {}", self.names[k], e.why),
                    ..e
                })
                .collect(),
            tail_blocks,
            changed,
            error: None,
            seconds: self.t0.elapsed().as_secs_f64(),
        }
    }

    /// Pair k is lost: its blocks in hand go back to the front of the queue
    /// for the other pairs, and the event says so.
    fn lost(&self, k: usize, why: String) -> PairEnd {
        let mut l = lock(self.ledger);
        l.alive[k] = false;
        let mut back: Vec<(u32, u64)> = l.leased[k].drain().collect();
        back.sort_unstable();
        let count = back.len();
        for b in back.into_iter().rev() {
            l.pending.push_front(b);
        }
        let alive = l.alive.iter().any(|a| *a);
        drop(l);
        let whither = if alive { "the other pairs take them" } else { "no pair is left" };
        let event = CopyEvent {
            t_s: self.t0.elapsed().as_secs_f64(),
            kind: "pair-lost".into(),
            stream: None,
            new_stream: None,
            why: format!("pair {k} ({}): {why}; its {count} blocks in hand: {whither}", self.names[k]),
        };
        lock(self.fresh).push(event.clone());
        lock(self.lost_events).push(event);
        PairEnd { error: Some(why), seconds: self.t0.elapsed().as_secs_f64(), ..Default::default() }
    }
}

/// Pair k's tasks while its source sends.
struct PairTasks<'a, 'b> {
    shared: &'a Shared<'b>,
    k: usize,
    moved: &'a AtomicU64,
}

impl Tasks<proto::Leases> for PairTasks<'_, '_> {
    fn run(&mut self, t: Task, m: &mut proto::Leases, _: &mut Session, clock: &Clock) -> Result<Acts<Task>> {
        match t {
            Task::Lease { done, want } => {
                let (blocks, last) = self.shared.lease(self.k, &done, want, self.moved);
                Ok(m.handle(Input::Event(Event::Leased { blocks, last }), clock.now()))
            }
            Task::Note { event } => {
                self.shared.note(self.k, event);
                Ok(Vec::new())
            }
            other => Err(Error::internal(format!("a pair's leases have no task {other:?}"))),
        }
    }
}
