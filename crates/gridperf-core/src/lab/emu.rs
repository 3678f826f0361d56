//! The lab's link model, without I/O: one direction of an emulated link.
//!
//! A packet goes through three stages, in this order (the order of
//! docs/lab.md's figure):
//!
//! 1. **loss**: random (Bernoulli) or bursty (Gilbert-Elliott), decided per
//!    wire packet as it arrives;
//! 2. **bottleneck**: a FIFO served at `rate_bps`, drop-tail when the
//!    packets waiting (not counting the one being sent) exceed the queue
//!    limit in packets or bytes;
//! 3. **delay line**: a base delay plus jitter from a distribution; with
//!    `reorder` off a packet never overtakes the one before it.
//!
//! Time is a plain `u64` of nanoseconds supplied by the caller ([`Link::arrive`]
//! and [`Link::poll`] take `now`), so the model runs in virtual time in tests
//! and on the monotonic clock in the emulator. Nothing here reads a clock,
//! sleeps or touches a descriptor. A seeded generator makes every run of a
//! test the same.

use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How many packets or bytes may wait in the bottleneck queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum QueueLimit {
    Unlimited,
    Packets(u64),
    Bytes(u64),
}

/// Random loss, decided per wire packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Loss {
    None,
    /// Each packet is lost with probability `p`.
    Random {
        p: f64,
    },
    /// Gilbert-Elliott: a two-state Markov chain stepped once per packet.
    /// In the good state a packet is lost with `loss_good`, in the bad state
    /// with `loss_bad`; `p_gb` and `p_bg` are the per-packet transition
    /// probabilities. The long-run loss rate is
    /// (p_bg x loss_good + p_gb x loss_bad) / (p_gb + p_bg), and a stay in
    /// the bad state lasts 1 / p_bg packets on average.
    GilbertElliott {
        p_gb: f64,
        p_bg: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

impl Loss {
    /// The long-run fraction of packets this model drops.
    pub fn mean_rate(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Random { p } => p,
            Loss::GilbertElliott { p_gb, p_bg, loss_good, loss_bad } => {
                if p_gb + p_bg == 0.0 {
                    loss_good
                } else {
                    (p_bg * loss_good + p_gb * loss_bad) / (p_gb + p_bg)
                }
            }
        }
    }
}

/// The distribution of the delay added on top of the base delay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Jitter {
    None,
    /// Uniform in [-j, +j] nanoseconds.
    Uniform {
        j_ns: u64,
    },
    /// Normal with standard deviation `sigma_ns`, cut at 4 sigma (and at a
    /// total delay of zero).
    Normal {
        sigma_ns: u64,
    },
    /// Exponential with mean `mean_ns`, added on top of the base delay
    /// (never below it), cut at 10 means: a long tail of late packets.
    Exponential {
        mean_ns: u64,
    },
    /// An empirical distribution: the quantiles of the added delay (signed,
    /// ns, non-decreasing) at evenly spaced probabilities from 0 to 1 (at
    /// least 2 of them), drawn by inverse transform with linear
    /// interpolation between them. What `lab clone` fits from a
    /// right-skewed path, with [`TABLE_POINTS`] points.
    Table {
        q_ns: Vec<i64>,
    },
}

/// The points of the tables `lab clone` writes: the quantiles at every 1%
/// (a long tail drawn linearly over coarser bins comes out too heavy).
pub const TABLE_POINTS: usize = 101;

impl Jitter {
    /// The latest a packet may come beyond the base delay, ns.
    pub fn widest_ns(&self) -> u64 {
        match self {
            Jitter::None => 0,
            Jitter::Uniform { j_ns } => *j_ns,
            Jitter::Normal { sigma_ns } => 4 * sigma_ns,
            Jitter::Exponential { mean_ns } => 10 * mean_ns,
            Jitter::Table { q_ns } => q_ns.last().map_or(0, |&q| q.max(0) as u64),
        }
    }

    /// The added delay (ns, signed) at cumulative probability `u` in [0, 1).
    pub fn sample(&self, u: f64, z: impl FnOnce() -> f64) -> i64 {
        match self {
            Jitter::None => 0,
            Jitter::Uniform { j_ns } => ((2.0 * u - 1.0) * *j_ns as f64).round() as i64,
            Jitter::Normal { sigma_ns } => (z().clamp(-4.0, 4.0) * *sigma_ns as f64).round() as i64,
            Jitter::Exponential { mean_ns } => ((-(1.0 - u).ln()).min(10.0) * *mean_ns as f64).round() as i64,
            Jitter::Table { q_ns } => table_quantile(q_ns, u).round() as i64,
        }
    }
}

/// The quantile at `u` of a table of quantiles at evenly spaced
/// probabilities from 0 to 1, interpolated linearly (0 for a table of
/// fewer than 2).
pub fn table_quantile(q: &[i64], u: f64) -> f64 {
    if q.len() < 2 {
        return q.first().map_or(0.0, |&v| v as f64);
    }
    let h = u.clamp(0.0, 1.0) * (q.len() - 1) as f64;
    let i = (h.floor() as usize).min(q.len() - 2);
    let f = h - i as f64;
    q[i] as f64 + f * (q[i + 1] - q[i]) as f64
}

/// One direction of a link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Bottleneck rate in bits per second; None for no bottleneck.
    pub rate_bps: Option<u64>,
    /// Bytes a packet occupies on the wire beyond the length given to
    /// [`Link::arrive`] (38 for Ethernet: preamble, header, FCS, gap).
    pub overhead_bytes: u32,
    pub queue: QueueLimit,
    pub delay_ns: u64,
    pub jitter: Jitter,
    /// Let jitter reorder packets (as netem does); off keeps them in order.
    pub reorder: bool,
    pub loss: Loss,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            rate_bps: None,
            overhead_bytes: 0,
            queue: QueueLimit::Unlimited,
            delay_ns: 0,
            jitter: Jitter::None,
            reorder: false,
            loss: Loss::None,
        }
    }
}

/// What the emulator holds for a packet beyond its bytes: its record (about
/// 140 bytes: the path, each segment's length and fate, the reference
/// counts), four allocations' headers and a queue or delay-line entry (48),
/// counted from the structures for a one-segment packet.
pub const PACKET_OVERHEAD_BYTES: u64 = 256;

impl LinkConfig {
    /// The most this link holds at once, in bytes of memory, with packets
    /// of `mtu` bytes: its delay line full at its rate (delay plus the
    /// widest jitter) and its queue full; and whether that is a bound. It
    /// is not without a rate (the line holds whatever the hosts send: only
    /// the queue is counted) or with an unlimited queue (only the line is).
    pub fn held_bytes(&self, mtu: u32) -> (u64, bool) {
        let widest = self.jitter.widest_ns();
        let line = self.rate_bps.map(|r| r as u128 * (self.delay_ns + widest) as u128 / 8 / 1_000_000_000);
        let queue = match self.queue {
            QueueLimit::Unlimited => None,
            QueueLimit::Packets(n) => Some(n as u128 * mtu as u128),
            QueueLimit::Bytes(b) => Some(b as u128),
        };
        let bytes = line.unwrap_or(0) + queue.unwrap_or(0);
        let packets = bytes.div_ceil(mtu.max(1) as u128);
        let held = u64::try_from(bytes + packets * PACKET_OVERHEAD_BYTES as u128).unwrap_or(u64::MAX);
        (held, line.is_some() && queue.is_some())
    }
}

/// What the link did with an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Dropped by the loss model.
    Lost,
    /// Dropped because the bottleneck queue was full.
    QueueFull,
}

/// The link's own counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub arrived: u64,
    pub arrived_bytes: u64,
    pub delivered: u64,
    pub delivered_bytes: u64,
    pub lost: u64,
    pub queue_full: u64,
    /// The most packets and bytes that ever waited in the bottleneck queue.
    pub max_queue_packets: u64,
    pub max_queue_bytes: u64,
    /// Time the link sat idle while a packet for it already waited unread
    /// in a TUN queue ([`Link::starved`]): the emulator's reading, not the
    /// link, set the pace meanwhile, ns.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub starved_ns: u64,
    /// Time the link sat idle through the emulator's hold-ups, from when
    /// its queue ran dry (or the hold-up began) to the emulator's waking
    /// ([`Link::idle_through`]): what a hold-up took from its rate, ns.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub idle_held_ns: u64,
}

impl Counters {
    /// Adds another link's counters (the parallel paths of one direction):
    /// sums, and the larger of the two queue maxima.
    pub fn add(&mut self, o: &Counters) {
        self.arrived += o.arrived;
        self.arrived_bytes += o.arrived_bytes;
        self.delivered += o.delivered;
        self.delivered_bytes += o.delivered_bytes;
        self.lost += o.lost;
        self.queue_full += o.queue_full;
        self.max_queue_packets = self.max_queue_packets.max(o.max_queue_packets);
        self.max_queue_bytes = self.max_queue_bytes.max(o.max_queue_bytes);
        self.starved_ns += o.starved_ns;
        self.idle_held_ns += o.idle_held_ns;
    }
}

/// Which of `n` parallel paths an IPv4 packet takes, as a link aggregate or
/// an ECMP group hashes it: by its 5-tuple (addresses, protocol, and the
/// ports of TCP and UDP), the same both ways, so that every packet of a
/// connection takes one path and a new connection (a new source port) is
/// hashed afresh. `seed` picks the hash (a lab's seed). A packet that is
/// not IPv4, or a fragment after the first, hashes by its addresses alone.
pub fn flow_path(pkt: &[u8], n: usize, seed: u64) -> usize {
    if n <= 1 || pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return 0;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let proto = pkt[9];
    let first_fragment = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff == 0;
    let port = |at: usize| u16::from_be_bytes([pkt[at], pkt[at + 1]]);
    let ports = if matches!(proto, 6 | 17) && first_fragment && pkt.len() >= ihl + 4 {
        (port(ihl), port(ihl + 2))
    } else {
        (0, 0)
    };
    let end = |addr: &[u8], port: u16| {
        (u64::from(u32::from_be_bytes(addr.try_into().expect("4 bytes"))) << 16) | u64::from(port)
    };
    let (x, y) = (end(&pkt[12..16], ports.0), end(&pkt[16..20], ports.1));
    let (lo, hi) = (x.min(y), x.max(y));
    let mut r = Rng::new(seed ^ lo.rotate_left(17) ^ hi.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(proto));
    (r.next_u64() % n as u64) as usize
}

/// A packet in the bottleneck: transmission starts at `start`, ends at `end`.
#[derive(Debug)]
struct InService<T> {
    start: u64,
    end: u64,
    bytes: u64,
    item: T,
}

/// A packet in the delay line, ordered by delivery time then arrival order.
#[derive(Debug)]
struct Flight<T> {
    at: u64,
    seq: u64,
    bytes: u64,
    item: T,
}

impl<T> PartialEq for Flight<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<T> Eq for Flight<T> {}
impl<T> PartialOrd for Flight<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Flight<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The delay line: packets in flight, taken in order of delivery time, then
/// of arrival. Without reordering the delivery times never go back, and a
/// queue keeps that order at O(1) a packet; with it, a heap. (At 10 Gbit/s
/// and 50 ms the line holds 40,000 full-size packets: a heap's log n with a
/// cache miss at each step took the emulator from 70% of a CPU to all of one.)
#[derive(Debug)]
enum DelayLine<T> {
    InOrder(VecDeque<Flight<T>>),
    Reordering(BinaryHeap<Reverse<Flight<T>>>),
}

impl<T> DelayLine<T> {
    fn push(&mut self, f: Flight<T>) {
        match self {
            DelayLine::InOrder(q) => q.push_back(f),
            DelayLine::Reordering(h) => h.push(Reverse(f)),
        }
    }

    fn next_at(&self) -> Option<u64> {
        match self {
            DelayLine::InOrder(q) => q.front().map(|f| f.at),
            DelayLine::Reordering(h) => h.peek().map(|Reverse(f)| f.at),
        }
    }

    fn pop(&mut self) -> Option<Flight<T>> {
        match self {
            DelayLine::InOrder(q) => q.pop_front(),
            DelayLine::Reordering(h) => h.pop().map(|Reverse(f)| f),
        }
    }

    fn len(&self) -> usize {
        match self {
            DelayLine::InOrder(q) => q.len(),
            DelayLine::Reordering(h) => h.len(),
        }
    }
}

/// One direction of an emulated link, generic over what a packet carries.
#[derive(Debug)]
pub struct Link<T> {
    cfg: LinkConfig,
    rng: Rng,
    /// Gilbert-Elliott state: true when bad; and when the chain last stepped.
    bad: bool,
    stepped_at: Option<u64>,
    bottleneck: VecDeque<InService<T>>,
    /// When the bottleneck finishes sending all it holds.
    busy_until: u64,
    /// When it last began to send after sitting idle: it has been busy
    /// from then to `busy_until` without a break.
    busy_since: u64,
    /// Bytes and packets in `bottleneck` (waiting and in service).
    held_bytes: u64,
    delay_line: DelayLine<T>,
    seq: u64,
    /// Latest delivery time handed out (for in-order jitter).
    last_delivery: u64,
    pub counters: Counters,
}

impl<T> Link<T> {
    pub fn new(cfg: LinkConfig, seed: u64) -> Link<T> {
        let delay_line =
            if cfg.reorder { DelayLine::Reordering(BinaryHeap::new()) } else { DelayLine::InOrder(VecDeque::new()) };
        Link {
            cfg,
            rng: Rng::new(seed),
            bad: false,
            stepped_at: None,
            bottleneck: VecDeque::new(),
            busy_until: 0,
            busy_since: 0,
            held_bytes: 0,
            delay_line,
            seq: 0,
            last_delivery: 0,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Until when the link sends what it already holds, model ns: a packet
    /// arriving before then leaves when it would have at any earlier
    /// arrival (first in, first out). 0 for a link without a rate (it holds
    /// no queue: the emulator sets its pace).
    pub fn busy_until(&self) -> u64 {
        if self.cfg.rate_bps.is_some() {
            self.busy_until
        } else {
            0
        }
    }

    /// When it last began to send after sitting idle (u64::MAX for a link
    /// without a rate: it is never busy).
    pub fn busy_since(&self) -> u64 {
        if self.cfg.rate_bps.is_some() {
            self.busy_since
        } else {
            u64::MAX
        }
    }

    /// Time to put `bytes` on the wire at the bottleneck rate, in ns.
    fn tx_time(&self, bytes: u64) -> u64 {
        match self.cfg.rate_bps {
            Some(r) if r > 0 => {
                let bits = (bytes + self.cfg.overhead_bytes as u64) as u128 * 8 * 1_000_000_000;
                bits.div_ceil(r as u128) as u64
            }
            _ => 0,
        }
    }

    /// Whether a packet arriving at `now` is lost.
    ///
    /// The Gilbert-Elliott chain steps once per packet slot: the time a
    /// full-size (1500-byte) packet takes at the link's rate. Packets back
    /// to back step it once each, as configured; one that comes k idle
    /// slots after the last finds the chain stepped k times (the k-step
    /// transition, exact), so that packets seconds apart (a SYN sent again
    /// after 1 s, then 2 s; a ping) are no longer one burst: stepped per
    /// packet, on a quiet path with 0.22% loss in bursts of 3 a lost SYN's
    /// two retransmissions were lost with it 4 times in 9, so about 1
    /// connect in 1,000 timed out (the root CI's clone test met one). The
    /// loss rate is unchanged.
    fn lose(&mut self, now: u64) -> bool {
        match self.cfg.loss {
            Loss::None => false,
            Loss::Random { p } => self.rng.unit() < p,
            Loss::GilbertElliott { p_gb, p_bg, loss_good, loss_bad } => {
                let slot = self.tx_time(1500);
                let k = match self.stepped_at {
                    Some(t) if slot > 0 => (now.saturating_sub(t) / slot).max(1),
                    _ => 1,
                };
                self.stepped_at = Some(now);
                if k == 1 || p_gb + p_bg <= 0.0 {
                    // step the chain, then decide in the new state
                    let flip = if self.bad { p_bg } else { p_gb };
                    if self.rng.unit() < flip {
                        self.bad = !self.bad;
                    }
                } else {
                    // P(bad after k steps) = pi + (start - pi) (1 - p_gb - p_bg)^k
                    let pi = p_gb / (p_gb + p_bg);
                    let fade = (1.0 - p_gb - p_bg).powf(k as f64);
                    let p_bad = if self.bad { pi + (1.0 - pi) * fade } else { pi - pi * fade };
                    self.bad = self.rng.unit() < p_bad;
                }
                self.rng.unit() < if self.bad { loss_bad } else { loss_good }
            }
        }
    }

    fn jitter_ns(&mut self) -> i64 {
        match &self.cfg.jitter {
            Jitter::None => 0,
            Jitter::Uniform { j_ns: 0 } => 0,
            Jitter::Uniform { j_ns } => (self.rng.next_u64() % (2 * j_ns + 1)) as i64 - *j_ns as i64,
            Jitter::Normal { .. } => {
                let rng = &mut self.rng;
                self.cfg.jitter.sample(0.0, || rng.normal())
            }
            j => {
                let u = self.rng.unit();
                j.sample(u, || 0.0)
            }
        }
    }

    /// Moves packets whose transmission ended by `now` into the delay line.
    fn advance(&mut self, now: u64) {
        while self.bottleneck.front().is_some_and(|p| p.end <= now) {
            let Some(p) = self.bottleneck.pop_front() else { break };
            self.held_bytes -= p.bytes;
            self.launch(p.end, p.bytes, p.item);
        }
    }

    /// Puts a packet that left the bottleneck at `t` into the delay line.
    fn launch(&mut self, t: u64, bytes: u64, item: T) {
        let base = t + self.cfg.delay_ns;
        let mut at = (base as i64 + self.jitter_ns()).max(t as i64) as u64;
        if !self.cfg.reorder {
            at = at.max(self.last_delivery);
        }
        self.last_delivery = self.last_delivery.max(at);
        self.seq += 1;
        self.delay_line.push(Flight { at, seq: self.seq, bytes, item });
    }

    /// Packets and bytes waiting in the bottleneck at `now` (not counting the
    /// one being sent). Call after [`Link::advance`].
    fn waiting(&self, now: u64) -> (u64, u64) {
        match self.bottleneck.front() {
            Some(p) if p.start <= now => (self.bottleneck.len() as u64 - 1, self.held_bytes - p.bytes),
            Some(_) => (self.bottleneck.len() as u64, self.held_bytes),
            None => (0, 0),
        }
    }

    /// A packet that was already waiting to be read at `waiting_since`
    /// (the emulator left it in a TUN queue then) arrives at `now`: the time
    /// in between that the link sat idle is time its rate was not what set
    /// the pace (counted in [`Counters::starved_ns`]). Call before
    /// [`Link::arrive`]; a link without a rate is never idle.
    pub fn starved(&mut self, waiting_since: u64, now: u64) {
        if self.cfg.rate_bps.is_some() {
            self.counters.starved_ns += now.saturating_sub(self.busy_until.max(waiting_since));
        }
    }

    /// The emulator was held up from `from` to `to` (it could read and
    /// write nothing): the link went on sending what its queue held, in
    /// model time, and sat idle from when that ran out (counted in
    /// [`Counters::idle_held_ns`]). A link without a rate holds no queue:
    /// the emulator is what sets its pace, and it is idle throughout.
    pub fn idle_through(&mut self, from: u64, to: u64) {
        self.counters.idle_held_ns += to.saturating_sub(self.busy_until.max(from));
    }

    /// A packet of `bytes` (its length on the wire, IP header included)
    /// arrives at `now`.
    pub fn arrive(&mut self, now: u64, bytes: u64, item: T) -> Verdict {
        self.counters.arrived += 1;
        self.counters.arrived_bytes += bytes;
        if self.lose(now) {
            self.counters.lost += 1;
            return Verdict::Lost;
        }
        if self.cfg.rate_bps.is_none() {
            self.launch(now, bytes, item);
            return Verdict::Accepted;
        }
        self.advance(now);
        let (pkts, held) = self.waiting(now);
        // the queue takes the packet only if it fits; an idle link sends it at once
        let would_wait = self.busy_until > now;
        if would_wait {
            let full = match self.cfg.queue {
                QueueLimit::Unlimited => false,
                QueueLimit::Packets(n) => pkts + 1 > n,
                QueueLimit::Bytes(b) => held + bytes > b,
            };
            if full {
                self.counters.queue_full += 1;
                return Verdict::QueueFull;
            }
        }
        if self.busy_until < now {
            self.busy_since = now;
        }
        let start = self.busy_until.max(now);
        let end = start + self.tx_time(bytes);
        self.busy_until = end;
        self.held_bytes += bytes;
        self.bottleneck.push_back(InService { start, end, bytes, item });
        let (pkts, held) = self.waiting(now);
        self.counters.max_queue_packets = self.counters.max_queue_packets.max(pkts);
        self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(held);
        Verdict::Accepted
    }

    /// The next packet due by `now`, with the time it was due.
    pub fn poll(&mut self, now: u64) -> Option<(u64, T)> {
        self.advance(now);
        if self.delay_line.next_at().is_some_and(|at| at <= now) {
            let f = self.delay_line.pop()?;
            self.counters.delivered += 1;
            self.counters.delivered_bytes += f.bytes;
            return Some((f.at, f.item));
        }
        None
    }

    /// When the next packet due by `now` is due, without taking it.
    pub fn peek_due(&mut self, now: u64) -> Option<u64> {
        self.advance(now);
        self.delay_line.next_at().filter(|&at| at <= now)
    }

    /// When the link next has something to do (a transmission ends or a
    /// packet is due); None when it is empty.
    pub fn next_wake(&self) -> Option<u64> {
        let tx = self.bottleneck.front().map(|p| p.end);
        let fl = self.delay_line.next_at();
        match (tx, fl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Packets held anywhere in the link.
    pub fn in_flight(&self) -> usize {
        self.bottleneck.len() + self.delay_line.len()
    }
}

#[cfg(test)]
mod tests {

    /// A link says since when it has been busy without a break and until
    /// when it sends what it holds: what the TUN-queue probe asks to tell a
    /// wait the link's queue covered from one that took from the rate.
    #[test]
    fn a_link_says_since_when_and_until_when_it_is_busy() {
        // 8 Mbit/s: a 1000-byte packet takes 1 ms
        let cfg = LinkConfig { rate_bps: Some(8_000_000), ..LinkConfig::default() };
        let mut l: Link<u32> = Link::new(cfg, 1);
        assert_eq!(l.arrive(10_000_000, 1000, 1), Verdict::Accepted);
        assert_eq!((l.busy_since(), l.busy_until()), (10_000_000, 11_000_000));
        // back to back: the same busy spell, longer
        assert_eq!(l.arrive(10_500_000, 1000, 2), Verdict::Accepted);
        assert_eq!((l.busy_since(), l.busy_until()), (10_000_000, 12_000_000));
        // after an idle gap: a new spell
        assert_eq!(l.arrive(20_000_000, 1000, 3), Verdict::Accepted);
        assert_eq!((l.busy_since(), l.busy_until()), (20_000_000, 21_000_000));
        // a link without a rate holds no queue: never busy
        let free: Link<u32> = Link::new(LinkConfig::default(), 1);
        assert_eq!((free.busy_since(), free.busy_until()), (u64::MAX, 0));
    }

    use super::*;

    #[test]
    fn a_links_memory_is_its_delay_line_and_queue_full() {
        // 10 Gbit/s x 100 ms one way: 125 MB in the line, a 1-BDP queue 250 MB more
        let l = LinkConfig {
            rate_bps: Some(10_000_000_000),
            delay_ns: 100_000_000,
            queue: QueueLimit::Bytes(250_000_000),
            ..LinkConfig::default()
        };
        let packets = 375_000_000u64.div_ceil(1500);
        assert_eq!(l.held_bytes(1500), (375_000_000 + packets * PACKET_OVERHEAD_BYTES, true));
        // jitter widens the line: uniform by its bound, normal by 4 sigma (where it is cut)
        let j =
            LinkConfig { jitter: Jitter::Normal { sigma_ns: 25_000_000 }, queue: QueueLimit::Bytes(0), ..l.clone() };
        assert_eq!(j.held_bytes(1500).0 / 1_000_000, 250 + 250 * PACKET_OVERHEAD_BYTES / 1500);
        // no rate: the queue alone, and no bound; no queue limit: the line alone, no bound
        let queue_only = 250_000_000 + 250_000_000u64.div_ceil(1500) * PACKET_OVERHEAD_BYTES;
        assert_eq!(LinkConfig { rate_bps: None, ..l.clone() }.held_bytes(1500), (queue_only, false));
        let line_only = 125_000_000 + 125_000_000u64.div_ceil(1500) * PACKET_OVERHEAD_BYTES;
        assert_eq!(LinkConfig { queue: QueueLimit::Unlimited, ..l }.held_bytes(1500), (line_only, false));
    }

    const MS: u64 = 1_000_000;

    /// Runs the link until empty; returns (arrival id, delivery time) in delivery order.
    fn drain(link: &mut Link<u64>) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(t) = link.next_wake() {
            while let Some((at, id)) = link.poll(t) {
                out.push((id, at));
            }
        }
        out
    }

    #[test]
    fn pure_delay_is_exact() {
        let mut l = Link::new(LinkConfig { delay_ns: 25 * MS, ..Default::default() }, 1);
        for i in 0..100 {
            assert_eq!(l.arrive(i * 1000, 1500, i), Verdict::Accepted);
        }
        let out = drain(&mut l);
        assert_eq!(out.len(), 100);
        for (id, at) in out {
            assert_eq!(at, id * 1000 + 25 * MS);
        }
    }

    #[test]
    fn rate_is_exact_in_virtual_time() {
        // 10 000 packets of 1500 B at 100 Mbit/s: 120 us each, 1.2 s in all
        let cfg = LinkConfig { rate_bps: Some(100_000_000), ..Default::default() };
        let mut l = Link::new(cfg, 1);
        for i in 0..10_000 {
            l.arrive(0, 1500, i);
        }
        let out = drain(&mut l);
        assert_eq!(out.len(), 10_000);
        assert_eq!(out[0].1, 120_000);
        assert_eq!(out.last().map(|x| x.1), Some(1_200_000_000));
        assert_eq!(l.counters.max_queue_packets, 9_999);
    }

    /// A link is starved for the time it sat idle after a packet for it was
    /// known to wait unread: not while it was still sending, not before the
    /// packet was known to wait, never without a rate.
    #[test]
    fn a_link_is_starved_while_idle_with_a_packet_waiting_unread() {
        let cfg = LinkConfig { rate_bps: Some(100_000_000), ..Default::default() };
        let mut l = Link::new(cfg.clone(), 1);
        // busy until 120 us; a packet known to wait from 100 us, read at 200 us
        l.arrive(0, 1500, 0);
        l.starved(100_000, 200_000);
        assert_eq!(l.counters.starved_ns, 80_000);
        l.arrive(200_000, 1500, 1);
        // still sending until 320 us: a packet read at 300 us found it busy
        l.starved(250_000, 300_000);
        assert_eq!(l.counters.starved_ns, 80_000);
        l.arrive(300_000, 1500, 2);
        // known to wait only from 500 us, though the link was idle from 440 us
        l.starved(500_000, 530_000);
        assert_eq!(l.counters.starved_ns, 110_000);
        let mut sum = Counters::default();
        sum.add(&l.counters);
        sum.add(&l.counters);
        assert_eq!(sum.starved_ns, 220_000);
        let mut free = Link::<u64>::new(LinkConfig { rate_bps: None, ..cfg }, 1);
        free.starved(0, 1_000_000);
        assert_eq!(free.counters.starved_ns, 0);
    }

    /// Through a hold-up the link sends what its queue holds: it is idle
    /// only from when that ran out, or from the hold-up's start if empty.
    #[test]
    fn a_link_is_idle_through_a_hold_up_only_once_its_queue_ran_dry() {
        let cfg = LinkConfig { rate_bps: Some(100_000_000), ..Default::default() };
        let mut l = Link::new(cfg, 1);
        // 100 packets at once: busy until 12 ms
        for i in 0..100 {
            l.arrive(0, 1500, i);
        }
        // held up from 1 ms to 10 ms: the queue covered it
        l.idle_through(1_000_000, 10_000_000);
        assert_eq!(l.counters.idle_held_ns, 0);
        // from 11 ms to 15 ms: idle from 12 ms
        l.idle_through(11_000_000, 15_000_000);
        assert_eq!(l.counters.idle_held_ns, 3_000_000);
        // from 20 ms to 25 ms, nothing queued: all of it
        l.idle_through(20_000_000, 25_000_000);
        assert_eq!(l.counters.idle_held_ns, 8_000_000);
        let mut sum = Counters::default();
        sum.add(&l.counters);
        assert_eq!(sum.idle_held_ns, 8_000_000);
        // no rate: the emulator sets the pace, idle throughout
        let mut free = Link::new(LinkConfig { rate_bps: None, ..Default::default() }, 1);
        free.arrive(0, 1500, 0);
        free.idle_through(1_000_000, 3_000_000);
        assert_eq!(free.counters.idle_held_ns, 2_000_000);
    }

    #[test]
    fn ethernet_overhead_counts_toward_the_rate() {
        let cfg = LinkConfig { rate_bps: Some(1_000_000_000), overhead_bytes: 38, ..Default::default() };
        let mut l = Link::new(cfg, 1);
        l.arrive(0, 1500, 0);
        assert_eq!(l.next_wake(), Some(12_304)); // (1500 + 38) x 8 ns
    }

    #[test]
    fn queue_bound_in_packets_drops_tail_and_bounds_the_delay() {
        // packets arrive at twice the rate; the queue holds 100
        let rate = 100_000_000u64; // 120 us per 1500 B packet
        let cfg = LinkConfig {
            rate_bps: Some(rate),
            queue: QueueLimit::Packets(100),
            delay_ns: 10 * MS,
            ..Default::default()
        };
        let mut l = Link::new(cfg, 1);
        let mut arrivals = Vec::new();
        let mut out = Vec::new();
        for i in 0..5_000u64 {
            let now = i * 60_000;
            while let Some((at, id)) = l.poll(now) {
                out.push((id, at));
            }
            if l.arrive(now, 1500, i) == Verdict::Accepted {
                arrivals.push((i, now));
            }
        }
        out.extend(drain(&mut l));
        assert!(l.counters.queue_full > 2_000, "{:?}", l.counters);
        assert_eq!(l.counters.max_queue_packets, 100);
        // a packet's time through the link: at most base delay + 100 waiting
        // packets + its own transmission + the rest of the one in service
        let bound = 10 * MS + 102 * 120_000;
        let sent: std::collections::HashMap<u64, u64> = arrivals.into_iter().collect();
        for (id, at) in &out {
            assert!(at - sent[id] <= bound, "packet {id} took {} ns", at - sent[id]);
        }
        assert_eq!(out.len() as u64 + l.counters.queue_full, 5_000);
    }

    #[test]
    fn queue_bound_in_bytes() {
        let cfg = LinkConfig {
            rate_bps: Some(8_000_000), // 1 B per us
            queue: QueueLimit::Bytes(10_000),
            ..Default::default()
        };
        let mut l = Link::new(cfg, 1);
        // one in service + 10 000 bytes waiting: 1 + 6 packets of 1500 (9000 B); the 8th does not fit
        let verdicts: Vec<Verdict> = (0..8).map(|i| l.arrive(0, 1500, i)).collect();
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Accepted).count(), 7);
        assert_eq!(verdicts[7], Verdict::QueueFull);
        assert_eq!(l.counters.max_queue_bytes, 9_000);
    }

    /// Whether `k` losses in `n` trials fit a loss rate `p` (within 4.5
    /// standard deviations of the binomial: a one in 150 000 chance of a
    /// false alarm, with a seeded generator none at all).
    fn binomial_ok(k: u64, n: u64, p: f64) -> bool {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (k as f64 - mean).abs() <= 4.5 * sd
    }

    #[test]
    fn random_loss_within_the_binomial_interval() {
        for (seed, p) in [(1, 0.001), (2, 0.01), (3, 0.1), (4, 0.5)] {
            let mut l = Link::new(LinkConfig { loss: Loss::Random { p }, ..Default::default() }, seed);
            let n = 200_000;
            for i in 0..n {
                l.arrive(i, 100, i);
            }
            assert!(binomial_ok(l.counters.lost, n, p), "p {p}: {} lost of {n}", l.counters.lost);
        }
        let mut l = Link::new(LinkConfig { loss: Loss::Random { p: 0.0 }, ..Default::default() }, 5);
        (0..10_000).for_each(|i| {
            l.arrive(i, 100, i);
        });
        assert_eq!(l.counters.lost, 0);
    }

    #[test]
    fn gilbert_elliott_loss_rate_and_burst_length() {
        let loss = Loss::GilbertElliott { p_gb: 0.01, p_bg: 0.25, loss_good: 0.0, loss_bad: 1.0 };
        let mut l = Link::new(LinkConfig { loss, ..Default::default() }, 7);
        let n = 400_000u64;
        let mut runs = Vec::new();
        let mut run = 0u64;
        for i in 0..n {
            if l.arrive(i, 100, i) == Verdict::Lost {
                run += 1;
            } else if run > 0 {
                runs.push(run);
                run = 0;
            }
        }
        let rate = l.counters.lost as f64 / n as f64;
        let expect = loss.mean_rate(); // 0.01 / 0.26 = 3.85%
        assert!((rate - expect).abs() < 0.004, "rate {rate}, expected {expect}");
        let mean_burst = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
        assert!((mean_burst - 4.0).abs() < 0.3, "mean burst {mean_burst}, expected 1/p_bg = 4");
    }

    /// The chain steps per packet slot: on a 100 Mbit/s link (a slot of
    /// 120 us) packets back to back keep the bursts as configured, and
    /// packets 1 s apart (a SYN sent again) are lost independently, at
    /// the same mean rate.
    #[test]
    fn gilbert_elliott_bursts_are_of_back_to_back_packets_not_of_packets_seconds_apart() {
        let loss = Loss::GilbertElliott { p_gb: 0.01, p_bg: 0.25, loss_good: 0.0, loss_bad: 1.0 };
        let cfg = LinkConfig { loss, rate_bps: Some(100_000_000), queue: QueueLimit::Unlimited, ..Default::default() };
        let lost_after_lost = |gap_ns: u64| {
            let mut l = Link::new(cfg.clone(), 11);
            let (mut prev, mut after_lost, mut both) = (false, 0u64, 0u64);
            for i in 0..200_000u64 {
                let lost = l.arrive(i * gap_ns, 100, i) == Verdict::Lost;
                if prev {
                    after_lost += 1;
                    both += u64::from(lost);
                }
                prev = lost;
            }
            (l.counters.lost as f64 / 200_000.0, both as f64 / after_lost.max(1) as f64)
        };
        let expect = loss.mean_rate();
        // back to back (one slot apart): a loss is followed by another 3 times in 4
        let (rate, next) = lost_after_lost(120_000);
        assert!((rate - expect).abs() < 0.005 && (next - 0.75).abs() < 0.03, "rate {rate}, next {next}");
        // a second apart: the next packet is lost at the mean rate, not 3 times in 4
        let (rate, next) = lost_after_lost(1_000_000_000);
        assert!((rate - expect).abs() < 0.005 && (next - expect).abs() < 0.02, "rate {rate}, next {next}");
    }

    #[test]
    fn uniform_jitter_spreads_delay_and_reorders_only_when_allowed() {
        let base = 20 * MS;
        let j = MS;
        for reorder in [true, false] {
            let cfg = LinkConfig { delay_ns: base, jitter: Jitter::Uniform { j_ns: j }, reorder, ..Default::default() };
            let mut l = Link::new(cfg, 11);
            let n = 20_000u64;
            for i in 0..n {
                l.arrive(i * 10_000, 100, i); // one packet every 10 us: jitter >> spacing
            }
            let out = drain(&mut l);
            assert_eq!(out.len() as u64, n);
            let delays: Vec<i64> = out.iter().map(|(id, at)| *at as i64 - (*id * 10_000) as i64).collect();
            let inversions = out.windows(2).filter(|w| w[1].0 < w[0].0).count();
            if reorder {
                assert!(delays.iter().all(|&d| d >= (base - j) as i64 && d <= (base + j) as i64));
                let mean = delays.iter().sum::<i64>() as f64 / n as f64;
                assert!((mean - base as f64).abs() < 0.02 * j as f64, "mean {mean}");
                // the uniform's standard deviation is j / sqrt(3)
                let sd = (delays.iter().map(|&d| (d as f64 - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
                assert!((sd - j as f64 / 3f64.sqrt()).abs() < 0.03 * j as f64, "sd {sd}");
                assert!(inversions > n as usize / 4, "{inversions} inversions");
            } else {
                assert_eq!(inversions, 0);
                assert!(delays.iter().all(|&d| d >= (base - j) as i64 && d <= (base + j) as i64 + 10_000));
            }
        }
    }

    #[test]
    fn normal_jitter_has_its_sigma() {
        let cfg = LinkConfig {
            delay_ns: 50 * MS,
            jitter: Jitter::Normal { sigma_ns: 2 * MS },
            reorder: true,
            ..Default::default()
        };
        let mut l = Link::new(cfg, 13);
        let n = 50_000u64;
        for i in 0..n {
            l.arrive(i, 100, i);
        }
        let out = drain(&mut l);
        let d: Vec<f64> = out.iter().map(|(id, at)| (*at - id) as f64).collect();
        let mean = d.iter().sum::<f64>() / n as f64;
        let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean - 50e6).abs() < 0.03e6, "mean {mean}");
        assert!((sd - 2e6).abs() < 0.05e6, "sd {sd}");
    }

    /// The delays (ns after arrival) of `n` packets far apart through a link of `jitter`.
    fn delays_through(jitter: Jitter, n: u64) -> Vec<f64> {
        let cfg = LinkConfig { delay_ns: 50 * MS, jitter, reorder: true, ..Default::default() };
        let mut l = Link::new(cfg, 17);
        for i in 0..n {
            l.arrive(i, 100, i);
        }
        let mut d: Vec<f64> = drain(&mut l).iter().map(|(id, at)| (*at - id) as f64).collect();
        d.sort_by(f64::total_cmp);
        d
    }

    #[test]
    fn exponential_jitter_adds_a_long_tail_above_the_base() {
        let d = delays_through(Jitter::Exponential { mean_ns: 2 * MS }, 50_000);
        let q = |p: f64| d[((d.len() - 1) as f64 * p) as usize] - 50e6;
        assert!(q(0.0) >= 0.0, "nothing comes before the base delay: {}", q(0.0));
        let mean = d.iter().map(|x| x - 50e6).sum::<f64>() / d.len() as f64;
        assert!((mean - 2e6).abs() < 0.05e6, "mean {mean}");
        // an exponential's median is ln 2 of its mean, its p99 ln 100
        assert!((q(0.5) - 2e6 * 2f64.ln()).abs() < 0.05e6, "p50 {}", q(0.5));
        assert!((q(0.99) - 2e6 * 100f64.ln()).abs() < 0.5e6, "p99 {}", q(0.99));
        assert!(q(1.0) <= 20e6, "cut at 10 means: {}", q(1.0));
    }

    #[test]
    fn a_table_jitter_gives_back_its_quantiles() {
        // a skewed table of 21 points: -0.5 ms at p0, 0 at the median, 8 ms at p100
        let q_ns: Vec<i64> = (0..21)
            .map(|k| {
                let p = k as f64 / 20.0;
                if p <= 0.5 {
                    (-(0.5 - p) * MS as f64) as i64
                } else {
                    ((p - 0.5).powi(3) * 64.0 * MS as f64) as i64
                }
            })
            .collect();
        let jitter = Jitter::Table { q_ns: q_ns.clone() };
        assert_eq!(jitter.widest_ns(), 8 * MS);
        let d = delays_through(jitter, 50_000);
        for k in [1, 5, 10, 15, 19] {
            let got = d[(d.len() - 1) * k / 20] - 50e6;
            assert!((got - q_ns[k] as f64).abs() < 0.04e6, "p{}: {got} against {}", k * 5, q_ns[k]);
        }
        assert!(d[0] - 50e6 >= q_ns[0] as f64 && *d.last().expect("delivered") - 50e6 <= q_ns[20] as f64);
        assert_eq!(table_quantile(&q_ns, 0.525), (q_ns[10] + q_ns[11]) as f64 / 2.0);
    }

    /// An IPv4 TCP header from `src:sp` to `dst:dp`.
    fn tcp_packet(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sp.to_be_bytes());
        p[22..24].copy_from_slice(&dp.to_be_bytes());
        p
    }

    #[test]
    fn a_connection_takes_one_path_both_ways_and_new_ports_spread() {
        let (a, b) = ([10, 77, 1, 1], [10, 77, 2, 1]);
        let mut seen = [0u32; 4];
        for sp in 40_000..44_000u16 {
            let k = flow_path(&tcp_packet(a, sp, b, 5201), 4, 1);
            assert_eq!(k, flow_path(&tcp_packet(b, 5201, a, sp), 4, 1), "port {sp}: the reverse way differs");
            seen[k] += 1;
        }
        // 4000 connections over 4 paths: each near 1000 (binomial sd 27)
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
        // another seed hashes them differently; one path, or not IPv4: path 0
        let moved = (40_000..40_100u16)
            .filter(|&sp| flow_path(&tcp_packet(a, sp, b, 1), 4, 1) != flow_path(&tcp_packet(a, sp, b, 1), 4, 2))
            .count();
        assert!(moved > 50, "{moved} of 100 moved with a new seed");
        assert_eq!(flow_path(&tcp_packet(a, 1, b, 2), 1, 1), 0);
        assert_eq!(flow_path(&[0x60; 40], 4, 1), 0);
        assert_eq!(flow_path(&[0x45; 10], 4, 1), 0);
    }

    #[test]
    fn counters_of_paths_add_up() {
        let mut a = Counters { arrived: 3, lost: 1, max_queue_bytes: 10, ..Counters::default() };
        a.add(&Counters { arrived: 4, lost: 2, max_queue_bytes: 7, delivered: 5, ..Counters::default() });
        assert_eq!((a.arrived, a.lost, a.delivered, a.max_queue_bytes), (7, 3, 5, 10));
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let cfg = LinkConfig {
            loss: Loss::Random { p: 0.05 },
            jitter: Jitter::Uniform { j_ns: MS },
            reorder: true,
            delay_ns: 5 * MS,
            ..Default::default()
        };
        let run = |seed| {
            let mut l = Link::new(cfg.clone(), seed);
            (0..1000).for_each(|i| {
                l.arrive(i * 1000, 100, i);
            });
            drain(&mut l)
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
