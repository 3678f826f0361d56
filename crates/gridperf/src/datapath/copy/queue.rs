//! The sending end's block queue, shared by its connections.

use super::*;
use gridperf_core::wire::CopyNeed;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The sending end's queue: every connection takes its next block from it
/// (a faster one takes more); a block the writing end found damaged, or
/// one whose connection ended before its acknowledgment, comes back to its
/// front. At the tail (nothing left to take) an idle connection may take a
/// block another still has unacknowledged, to send it again: the first
/// acknowledgment wins.
pub struct BlockQueue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

/// A block taken: the connections carrying it (two when sent again at the tail), since when.
struct Taken {
    by: Vec<u32>,
    since: Instant,
}

pub(super) type BlockId = (u32, u64);

struct QueueState {
    pending: VecDeque<BlockId>,
    /// Blocks taken and not yet acknowledged.
    outstanding: std::collections::HashMap<BlockId, Taken>,
    resends: std::collections::HashMap<BlockId, u32>,
    /// Files given up on, with why (their other blocks are skipped).
    failed: Vec<(u32, String)>,
    /// Why the whole copy stops.
    stop: Option<String>,
    /// Blocks sent again at the tail.
    tail_sent: u64,
    /// Connections slow enough that their blocks may be sent again at the
    /// tail (the pool says which); None: any connection's.
    slow: Option<Vec<u32>>,
    /// A static split (bbftp's): connection k takes only from `slices[k]`,
    /// a contiguous k-th of the blocks. Empty: one shared queue.
    slices: Vec<VecDeque<BlockId>>,
    /// A third-party source's queue, fed in leases: more may come, so an
    /// empty queue is not the end until the feed ends.
    feeding: bool,
    /// Blocks acknowledged since the feed last asked (the lease's report).
    acked_log: Vec<BlockId>,
}

impl BlockQueue {
    /// The queue of the needed blocks, file by file.
    pub fn new(needs: &[CopyNeed]) -> BlockQueue {
        let pending = needs
            .iter()
            .filter(|n| n.refused.is_none())
            .flat_map(|n| n.ranges.iter().flat_map(move |&(a, b)| (a..b).map(move |i| (n.file, i))))
            .collect();
        BlockQueue {
            state: Mutex::new(QueueState {
                pending,
                outstanding: Default::default(),
                resends: Default::default(),
                failed: Vec::new(),
                stop: None,
                tail_sent: 0,
                slow: None,
                slices: Vec::new(),
                feeding: false,
                acked_log: Vec::new(),
            }),
            wake: Condvar::new(),
        }
    }

    /// The same blocks cut into `n` contiguous slices, connection k
    /// sending only the k-th, as bbftp does (`copy --split static`): the
    /// slowest connection sets the finish. For comparison, not for use.
    pub fn split_static(needs: &[CopyNeed], n: u32) -> BlockQueue {
        let q = BlockQueue::new(needs);
        {
            let mut s = lock(&q.state);
            let all: Vec<BlockId> = s.pending.drain(..).collect();
            let each = all.len().div_ceil(n.max(1) as usize).max(1);
            s.slices = all.chunks(each).map(|c| c.iter().copied().collect()).collect();
            s.slices.resize_with(n.max(1) as usize, VecDeque::new);
        }
        q
    }

    /// An empty queue that the caller feeds ([`BlockQueue::feed`]) until
    /// [`BlockQueue::end_feed`]: a third-party source's, whose blocks the
    /// client hands out in leases shared with the other pairs.
    pub fn fed() -> BlockQueue {
        let q = BlockQueue::new(&[]);
        lock(&q.state).feeding = true;
        q
    }

    /// More blocks, at the back.
    pub fn feed(&self, needs: &[CopyNeed]) {
        let mut s = lock(&self.state);
        for n in needs.iter().filter(|n| n.refused.is_none()) {
            s.pending.extend(n.ranges.iter().flat_map(|&(a, b)| (a..b).map(move |i| (n.file, i))));
        }
        self.wake.notify_all();
    }

    /// No more blocks will be fed: the queue ends once what it has is acknowledged.
    pub fn end_feed(&self) {
        lock(&self.state).feeding = false;
        self.wake.notify_all();
    }

    /// The blocks acknowledged since the last call (a lease's report).
    pub fn take_acked(&self) -> Vec<(u32, u64)> {
        std::mem::take(&mut lock(&self.state).acked_log)
    }

    /// Where connection `conn` takes its blocks from (and gives them back to).
    fn source(s: &mut QueueState, conn: u32) -> &mut VecDeque<BlockId> {
        if s.slices.is_empty() {
            &mut s.pending
        } else {
            let k = (conn as usize).min(s.slices.len() - 1);
            &mut s.slices[k]
        }
    }

    /// Blocks waiting to be taken.
    pub fn len(&self) -> usize {
        let s = lock(&self.state);
        s.pending.len() + s.slices.iter().map(VecDeque::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every block is acknowledged (or given up on), or the copy stopped.
    pub fn done(&self) -> bool {
        let s = lock(&self.state);
        s.stop.is_some()
            || (!s.feeding
                && s.outstanding.is_empty()
                && s.pending.iter().chain(s.slices.iter().flatten()).all(|b| s.failed.iter().any(|f| f.0 == b.0)))
    }

    /// The next block for connection `conn` to send, and whether it is a
    /// second copy (the tail); None once every block is acknowledged, the
    /// copy stopped, or `quit` says so. Waits while others' blocks are
    /// unacknowledged: one may come back. With `tail`, a block another
    /// connection has had unacknowledged at least that long is taken again,
    /// by a connection that has `caught_up` (nothing of its own unacknowledged).
    pub(super) fn next(
        &self,
        conn: u32,
        tail: Option<Duration>,
        quit: &dyn Fn() -> bool,
        caught_up: &dyn Fn() -> bool,
    ) -> Option<(BlockId, bool)> {
        let mut s = lock(&self.state);
        loop {
            if s.stop.is_some() || quit() {
                return None;
            }
            while let Some(b) = Self::source(&mut s, conn).pop_front() {
                if s.failed.iter().any(|(f, _)| *f == b.0) {
                    continue;
                }
                s.outstanding.insert(b, Taken { by: vec![conn], since: Instant::now() });
                return Some((b, false));
            }
            // a static split: done once its own slice is acknowledged
            let static_split = !s.slices.is_empty();
            if !s.feeding
                && (s.outstanding.is_empty() || (static_split && !s.outstanding.values().any(|t| t.by.contains(&conn))))
            {
                return None;
            }
            // only a connection with nothing of its own unacknowledged (keeping
            // up) sends another's block again: a slow one would only hold it
            if let Some(age) = tail.filter(|_| caught_up()) {
                let oldest = s
                    .outstanding
                    .iter()
                    .filter(|(_, t)| t.by.len() == 1 && t.by[0] != conn && t.since.elapsed() >= age)
                    .filter(|(_, t)| s.slow.as_ref().is_none_or(|slow| slow.contains(&t.by[0])))
                    .min_by_key(|(b, t)| (t.since, **b))
                    .map(|(b, _)| *b);
                if let Some(b) = oldest {
                    if let Some(t) = s.outstanding.get_mut(&b) {
                        t.by.push(conn);
                    }
                    s.tail_sent += 1;
                    return Some((b, true));
                }
            }
            s = self.wake.wait_timeout(s, Duration::from_millis(50)).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// The writing end's word on a block `conn` sent: true when this is
    /// the block's first good acknowledgment (its bytes count as moved).
    pub(super) fn acked(&self, conn: u32, block: BlockId, ok: bool) -> bool {
        let mut s = lock(&self.state);
        let Some(t) = s.outstanding.get_mut(&block) else {
            // already acknowledged through another connection
            return false;
        };
        let first = if ok {
            s.outstanding.remove(&block);
            s.acked_log.push(block);
            true
        } else {
            t.by.retain(|&c| c != conn);
            if t.by.is_empty() {
                s.outstanding.remove(&block);
                let n = s.resends.entry(block).or_insert(0);
                *n += 1;
                if *n > MAX_RESENDS {
                    let why = format!("block {} arrived damaged {} times", block.1, *n);
                    s.failed.push((block.0, why));
                } else {
                    Self::source(&mut s, conn).push_front(block);
                }
            }
            false
        };
        self.wake.notify_all();
        first
    }

    /// Connection `conn` ended without these blocks' acknowledgments: each
    /// goes back to the front of the queue unless another connection still carries it.
    pub(super) fn release(&self, conn: u32, blocks: impl IntoIterator<Item = BlockId>) {
        let mut s = lock(&self.state);
        for b in blocks {
            if let Some(t) = s.outstanding.get_mut(&b) {
                t.by.retain(|&c| c != conn);
                if t.by.is_empty() {
                    s.outstanding.remove(&b);
                    Self::source(&mut s, conn).push_front(b);
                }
            }
        }
        self.wake.notify_all();
    }

    pub(super) fn fail_file(&self, block: BlockId, why: String) {
        let mut s = lock(&self.state);
        s.failed.push((block.0, why));
        s.outstanding.remove(&block);
        self.wake.notify_all();
    }

    /// Stops every stream (the copy cannot go on).
    pub fn stop(&self, why: String) {
        let mut s = lock(&self.state);
        s.stop.get_or_insert(why);
        self.wake.notify_all();
    }

    pub fn stopped(&self) -> Option<String> {
        lock(&self.state).stop.clone()
    }

    /// Files the sending end gave up on, with why.
    pub fn failed(&self) -> Vec<(u32, String)> {
        lock(&self.state).failed.clone()
    }

    /// Blocks sent again after the writing end found them damaged.
    pub fn resent(&self) -> u64 {
        lock(&self.state).resends.values().map(|&n| u64::from(n)).sum()
    }

    /// The connections whose blocks may be sent again at the tail (the slow ones).
    pub fn set_slow(&self, conns: Vec<u32>) {
        lock(&self.state).slow = Some(conns);
    }

    /// Blocks sent again at the tail.
    pub fn tail_sent(&self) -> u64 {
        lock(&self.state).tail_sent
    }
}
