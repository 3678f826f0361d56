//! A capture's TCP connections over time (`gridperf trace`), reconstructed
//! from the segments alone, as the CERN-Tokyo study estimated its windows
//! from tcpdump: per direction, the bytes newly acknowledged, the data in
//! flight at the capture point (highest sent minus highest acknowledged,
//! less what the receiver SACKed), the receiver's advertised window
//! (scaled by the window scale its SYN carried), RTT samples (a segment's
//! first transmission to the ACK that covers it; Karn's rule), the
//! retransmissions by kind, zero windows, and the data in flight when a
//! loss was answered. The verdict is `stream`'s ([`crate::analysis::flow::verdict`]),
//! fed samples built from the capture.
//!
//! Memory and time are bounded whatever the capture's size: per connection
//! a few counters, the segments in flight (for RTT samples; at most
//! [`MAX_OUTSTANDING`]), one point per interval with traffic up to
//! [`MAX_SERIES`] (then two intervals to a point, and so on: the series
//! keeps the whole connection at a coarser step, and the direction's
//! totals are exact), the verdict's samples likewise, RTT samples up to
//! [`MAX_RTT_SAMPLES`] (then every other one), the smallest RTT kept as it
//! comes (no scan per interval), and at most [`MAX_LOSSES`] losses' windows.

use crate::analysis::flow::{TcpSample, VerdictContext};
use crate::capture::{Segment, ACK, FIN, RST, SYN};
use crate::model::{TraceConn, TraceDirection, TracePoint};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

/// The most connections followed (a scan's SYNs beyond it are counted, not kept).
pub const MAX_CONNECTIONS: usize = 100_000;
/// Segments remembered in flight per direction, for RTT samples.
pub const MAX_OUTSTANDING: usize = 1 << 16;
/// RTT samples kept per direction (then thinned by half, and so on).
pub const MAX_RTT_SAMPLES: usize = 1 << 20;
/// Points a direction's series keeps: beyond, two of its steps become one.
pub const MAX_SERIES: usize = 4096;
/// The verdict's samples a direction keeps (then every other one).
pub const MAX_VERDICT_SAMPLES: usize = 4096;
/// The windows at a loss a direction keeps (then every other one).
pub const MAX_LOSSES: usize = 4096;
/// Data segments a direction needs for a verdict.
pub const MIN_VERDICT_SEGMENTS: u64 = 32;
/// The least silence before a retransmission that reads as a timeout.
const MIN_RTO_NS: i64 = 200_000_000;

/// One direction's data: what its end sent and the other acknowledged.
#[derive(Default)]
struct Side {
    /// Sequence numbers relative to this (the SYN's, or the first seen minus 1).
    base: Option<u32>,
    last_raw: u32,
    last_rel: u64,
    wscale: Option<u8>,
    mss: Option<u16>,
    timestamps: bool,
    syn: bool,
    snd_max: u64,
    una: Option<u64>,
    sacked: Vec<(u64, u64)>,
    outstanding: BTreeMap<u64, (i64, bool)>,
    bytes_sent: u64,
    /// Data segments, counted as the sender's TCP counts them: a
    /// super-packet (GSO/TSO seen at the host) as the segments it becomes.
    segments: u64,
    /// The sender's segment size: the largest payload not above the peer's MSS.
    seg_size: u32,
    acked_total: u64,
    fast: u64,
    timeout: u64,
    other: u64,
    spurious: u64,
    dupacks: u32,
    sack_since_ack: bool,
    recovery_until: u64,
    last_send_t: Option<i64>,
    last_progress_t: Option<i64>,
    first_data_t: Option<i64>,
    /// The first data byte seen (relative): where a capture that missed the handshake starts counting.
    first_seq: Option<u64>,
    /// The end of the highest data sent (a FIN's sequence number is not data).
    data_max: u64,
    last_ack_t: Option<i64>,
    window: Option<u64>,
    zero_windows: u64,
    max_in_flight: u64,
    max_window: u64,
    rtts: Vec<u32>,
    rtt_stride: u32,
    rtt_skip: u32,
    /// The smallest RTT sample so far, us (0: none yet).
    min_rtt_us: u32,
    busy_ns: u64,
    last_t: Option<i64>,
    cwnd_at_loss: Vec<(f64, u64)>,
    // the interval being filled
    iv: Option<i64>,
    iv_acked: u64,
    iv_flight: u64,
    iv_retrans: u64,
    iv_rtt_sum: u64,
    iv_rtt_n: u64,
    series: Vec<TracePoint>,
    /// How many intervals one point of the series spans (1, then 2, 4, ...).
    series_step: i64,
    /// The interval (index) each point of the series starts at.
    series_k: Vec<i64>,
    samples: Vec<TcpSample>,
    samples_skip: u32,
    samples_stride: u32,
}

impl Side {
    /// A sequence number (this side's space) relative to its base, unwrapped
    /// (the first seen sets the base one below it, unless a SYN did).
    fn rel(&mut self, raw: u32) -> u64 {
        if self.base.is_none() {
            self.base = Some(raw.wrapping_sub(1));
            self.last_raw = raw;
            self.last_rel = 1;
            return 1;
        }
        let step = raw.wrapping_sub(self.last_raw) as i32;
        let rel = (self.last_rel as i64 + i64::from(step)).max(0) as u64;
        if step > 0 {
            self.last_raw = raw;
            self.last_rel = rel;
        }
        rel
    }

    fn in_flight(&self) -> u64 {
        let Some(una) = self.una else { return 0 };
        let sacked: u64 = self.sacked.iter().map(|&(a, b)| b.saturating_sub(a.max(una))).sum();
        self.snd_max.saturating_sub(una).saturating_sub(sacked)
    }

    fn srtt_ns(&self) -> Option<u64> {
        let n = self.rtts.len().min(8);
        (n > 0).then(|| self.rtts[self.rtts.len() - n..].iter().map(|&u| u64::from(u) * 1000).sum::<u64>() / n as u64)
    }

    /// Time passes to `t`: the busy time, and the intervals before t's closed.
    fn advance(&mut self, t: i64, start: i64, interval: i64) {
        if let Some(last) = self.last_t {
            if t > last && self.in_flight() > 0 {
                self.busy_ns = self.busy_ns.saturating_add(t.saturating_sub(last) as u64);
            }
        }
        self.last_t = Some(self.last_t.map_or(t, |l| l.max(t)));
        let k = t.saturating_sub(start).max(0) / interval.max(1);
        match self.iv {
            Some(cur) if k > cur => {
                self.close(cur, interval);
                self.iv = Some(k);
            }
            None => self.iv = Some(k),
            _ => {}
        }
    }

    fn close(&mut self, k: i64, interval: i64) {
        if self.iv_acked == 0 && self.iv_flight == 0 && self.iv_retrans == 0 {
            return;
        }
        let point = TracePoint {
            t_s: (k * interval) as f64 / 1e9,
            acked: self.iv_acked,
            in_flight: self.iv_flight,
            window: self.window.unwrap_or(0),
            seq: self.snd_max,
            retransmits: self.iv_retrans,
            rtt_ms: (self.iv_rtt_n > 0).then(|| self.iv_rtt_sum as f64 / self.iv_rtt_n as f64 / 1e6),
        };
        self.add_point(k, point, interval);
        // in flight in bytes (as unacked segments of one byte: the capture counts bytes)
        let sample = TcpSample {
            t_ns: (k * interval) as u64,
            unacked: self.iv_flight.min(u64::from(u32::MAX)) as u32,
            mss: 1,
            total_retrans: (self.fast + self.timeout + self.other) as u32,
            data_segs_out: self.segments as u32,
            bytes_acked: self.acked_total,
            busy_us: self.busy_ns / 1000,
            snd_wnd: self.window.unwrap_or(0).min(u64::from(u32::MAX)) as u32,
            srtt_us: self.srtt_ns().map_or(0, |n| (n / 1000) as u32),
            min_rtt_us: self.min_rtt_us,
            ..TcpSample::default()
        };
        if self.samples_skip > 0 {
            self.samples_skip -= 1;
        } else {
            self.samples.push(sample);
            self.samples_skip = self.samples_stride;
            if self.samples.len() >= MAX_VERDICT_SAMPLES {
                let kept: Vec<TcpSample> = self.samples.iter().step_by(2).cloned().collect();
                self.samples = kept;
                self.samples_stride = self.samples_stride * 2 + 1;
            }
        }
        self.iv_acked = 0;
        self.iv_flight = 0;
        self.iv_retrans = 0;
        self.iv_rtt_sum = 0;
        self.iv_rtt_n = 0;
    }

    /// Adds interval `k`'s point to the series, in the point of its step
    /// (a coarser step once the series is full: every pair merged).
    fn add_point(&mut self, k: i64, p: TracePoint, interval: i64) {
        let step = self.series_step.max(1);
        let bucket = k - k.rem_euclid(step);
        match (self.series_k.last(), self.series.last_mut()) {
            (Some(&last), Some(q)) if last == bucket => merge(q, &p),
            _ => {
                self.series_k.push(bucket);
                self.series.push(TracePoint { t_s: (bucket * interval) as f64 / 1e9, ..p });
            }
        }
        if self.series.len() >= MAX_SERIES {
            let step = step * 2;
            let mut series: Vec<TracePoint> = Vec::with_capacity(MAX_SERIES / 2 + 1);
            let mut ks: Vec<i64> = Vec::with_capacity(MAX_SERIES / 2 + 1);
            for (&k, p) in self.series_k.iter().zip(&self.series) {
                let b = k - k.rem_euclid(step);
                match (ks.last(), series.last_mut()) {
                    (Some(&last), Some(q)) if last == b => merge(q, p),
                    _ => {
                        ks.push(b);
                        series.push(TracePoint { t_s: (b * interval) as f64 / 1e9, ..p.clone() });
                    }
                }
            }
            self.series = series;
            self.series_k = ks;
            self.series_step = step;
        }
    }

    fn rtt(&mut self, ns: i64) {
        if ns <= 0 {
            return;
        }
        self.iv_rtt_sum += ns as u64;
        self.iv_rtt_n += 1;
        if self.rtt_skip > 0 {
            self.rtt_skip -= 1;
            return;
        }
        let us = (ns / 1000).clamp(1, i64::from(u32::MAX)) as u32;
        self.min_rtt_us = if self.min_rtt_us == 0 { us } else { self.min_rtt_us.min(us) };
        self.rtts.push(us);
        self.rtt_skip = self.rtt_stride;
        if self.rtts.len() >= MAX_RTT_SAMPLES {
            // thin by half: keep every other one, and take every other one from now on
            let kept: Vec<u32> = self.rtts.iter().step_by(2).copied().collect();
            self.rtts = kept;
            self.rtt_stride = self.rtt_stride * 2 + 1;
        }
    }
}

/// Two of a series' points as one: the later one's window and sequence,
/// the larger in flight, the sum of what was acknowledged and sent again,
/// the mean of their RTTs.
fn merge(q: &mut TracePoint, p: &TracePoint) {
    q.acked += p.acked;
    q.in_flight = q.in_flight.max(p.in_flight);
    q.window = p.window;
    q.seq = q.seq.max(p.seq);
    q.retransmits += p.retransmits;
    q.rtt_ms = match (q.rtt_ms, p.rtt_ms) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (a, b) => a.or(b),
    };
}

/// One connection being followed.
struct Conn {
    a: SocketAddr,
    b: SocketAddr,
    first_t: i64,
    last_t: i64,
    segments: u64,
    /// The SYN, the SYN-ACK and the ACK after it.
    syn_t: Option<i64>,
    synack_t: Option<i64>,
    ack_t: Option<i64>,
    ended: bool,
    sides: [Side; 2],
}

/// Follows every TCP connection in a capture, a segment at a time.
pub struct Analyzer {
    interval_ns: i64,
    start: Option<i64>,
    /// Connections being followed, by index (None once summarized).
    conns: Vec<Option<Conn>>,
    /// Connections summarized when another took their ports: a few
    /// kilobytes each, their raw state (RTT samples, segments in flight) gone.
    done: Vec<TraceConn>,
    by_key: HashMap<(SocketAddr, SocketAddr), usize>,
    /// The last segment's connection (most segments follow one of the same).
    last: Option<((SocketAddr, SocketAddr), usize)>,
    pub beyond_limit: u64,
}

fn key(x: SocketAddr, y: SocketAddr) -> (SocketAddr, SocketAddr) {
    if x <= y {
        (x, y)
    } else {
        (y, x)
    }
}

impl Analyzer {
    pub fn new(interval_ns: u64) -> Analyzer {
        Analyzer {
            interval_ns: interval_ns.max(1_000_000) as i64,
            start: None,
            conns: Vec::new(),
            done: Vec::new(),
            by_key: HashMap::new(),
            last: None,
            beyond_limit: 0,
        }
    }

    /// The capture's first frame's time (the origin of every `t_s`).
    pub fn start(&self) -> Option<i64> {
        self.start
    }

    /// Takes a segment seen at `t` (ns).
    // Long by design: one segment's effect on its connection, in the order
    // tcptrace applies them (the connection found or begun, then this end's
    // data, then its acknowledgment and window of the peer's), on one borrow
    // of the two ends.
    pub fn segment(&mut self, t: i64, s: &Segment) {
        let (Some(src), Some(dst)) = (s.src, s.dst) else { return };
        let start = *self.start.get_or_insert(t);
        let k = key(src, dst);
        let fresh_syn = s.flags & SYN != 0 && s.flags & ACK == 0;
        let found = match self.last {
            Some((lk, i)) if lk == k => Some(i),
            _ => self.by_key.get(&k).copied(),
        };
        let existing = found.filter(|&i| self.conns[i].is_some());
        let replaced = existing.is_some_and(|i| {
            self.conns[i].as_ref().is_some_and(|c| fresh_syn && (c.ended || c.sides.iter().any(|x| x.bytes_sent > 0)))
        });
        let idx = match existing {
            Some(i) if !replaced => i,
            _ => {
                // a SYN on an ended connection's ports: a new connection; the old one is summed up now
                if let Some((i, mut c)) = existing.and_then(|i| self.conns[i].take().map(|c| (i, c))) {
                    self.done.push(summarize(&mut c, i, start, self.interval_ns));
                }
                if self.conns.len() >= MAX_CONNECTIONS {
                    self.beyond_limit += 1;
                    return;
                }
                // the first sender is `a`, unless this is a SYN-ACK (then its peer sent the SYN)
                let (a, b) = if s.flags & SYN != 0 && s.flags & ACK != 0 { (dst, src) } else { (src, dst) };
                self.conns.push(Some(Conn {
                    a,
                    b,
                    first_t: t,
                    last_t: t,
                    segments: 0,
                    syn_t: None,
                    synack_t: None,
                    ack_t: None,
                    ended: false,
                    sides: [Side::default(), Side::default()],
                }));
                self.by_key.insert(k, self.conns.len() - 1);
                self.conns.len() - 1
            }
        };
        let interval = self.interval_ns;
        self.last = Some((k, idx));
        let Some(c) = self.conns[idx].as_mut() else { return };
        c.segments += 1;
        c.last_t = c.last_t.max(t);
        if s.flags & (FIN | RST) != 0 {
            c.ended = true;
        }
        let from = usize::from(src != c.a);
        if s.flags & SYN != 0 && s.flags & ACK == 0 {
            c.syn_t.get_or_insert(t);
        } else if s.flags & SYN != 0 {
            c.synack_t.get_or_insert(t);
        } else if from == 0 && c.synack_t.is_some() && c.ack_t.is_none() {
            c.ack_t = Some(t);
        }
        for side in &mut c.sides {
            side.advance(t, start, interval);
        }
        let (first, second) = c.sides.split_at_mut(1);
        let (me, peer) = if from == 0 { (&mut first[0], &mut second[0]) } else { (&mut second[0], &mut first[0]) };
        // this end's data
        if s.flags & SYN != 0 {
            me.base = Some(s.seq);
            me.last_raw = s.seq;
            me.last_rel = 0;
            me.syn = true;
            me.wscale = s.wscale;
            me.mss = s.mss;
            me.timestamps = s.timestamps;
            me.snd_max = me.snd_max.max(1);
        }
        let seq = me.rel(s.seq);
        let seq = if s.flags & SYN != 0 { seq + 1 } else { seq };
        if s.len > 0 {
            let end = seq + u64::from(s.len);
            me.first_data_t.get_or_insert(t);
            me.first_seq.get_or_insert(seq);
            me.data_max = me.data_max.max(end);
            me.bytes_sent += u64::from(s.len);
            // the peer's MSS (less the timestamps, when both SYNs had them) is a full segment; a
            // larger payload is a super-packet seen at the host (GSO/TSO), counted as its segments
            let limit = peer.mss.map_or(u32::MAX, |m| {
                u32::from(m).saturating_sub(if me.timestamps && peer.timestamps { 12 } else { 0 })
            });
            if me.seg_size == 0 && limit != u32::MAX {
                me.seg_size = limit;
            }
            if s.len <= limit {
                me.seg_size = me.seg_size.max(s.len);
            }
            let segs = u64::from(s.len.div_ceil(me.seg_size.max(1)).max(1));
            me.segments += segs;
            if seq < me.snd_max {
                // sent before: a retransmission, by what came before it
                let silence = me.last_progress_t.or(me.last_send_t).map_or(0, |p| t.saturating_sub(p));
                let rto = me.srtt_ns().map_or(MIN_RTO_NS, |r| (2 * r as i64).max(MIN_RTO_NS));
                if me.dupacks >= 3 || me.sack_since_ack {
                    me.fast += segs;
                } else if silence >= rto {
                    me.timeout += segs;
                } else {
                    me.other += segs;
                }
                me.iv_retrans += segs;
                if me.una.is_none_or(|u| u >= me.recovery_until) {
                    // a new loss episode: what was in flight is the window's estimate
                    let at = t.saturating_sub(start) as f64 / 1e9;
                    if me.cwnd_at_loss.len() < 10_000 {
                        me.cwnd_at_loss.push((at, me.in_flight()));
                        if me.cwnd_at_loss.len() >= MAX_LOSSES {
                            let kept = me.cwnd_at_loss.iter().step_by(2).copied().collect();
                            me.cwnd_at_loss = kept;
                        }
                    }
                    me.recovery_until = me.snd_max;
                }
                for (_, v) in me.outstanding.range_mut(seq + 1..=end) {
                    v.1 = true;
                }
                if end > me.snd_max {
                    me.outstanding.insert(end, (t, true));
                    me.snd_max = end;
                }
            } else {
                me.snd_max = end;
                if me.outstanding.len() >= MAX_OUTSTANDING {
                    me.outstanding.pop_first();
                }
                me.outstanding.insert(end, (t, false));
            }
            me.last_send_t = Some(t);
        }
        if s.flags & FIN != 0 {
            me.snd_max = me.snd_max.max(seq + u64::from(s.len) + 1);
        }
        // this segment's acknowledgment and window, of the peer's data
        if s.flags & ACK != 0 && peer.base.is_some() {
            let ack = peer.rel(s.ack);
            let scale = match (me.wscale, peer.wscale) {
                (Some(w), Some(_)) if s.flags & SYN == 0 => w,
                _ => 0,
            };
            let window = u64::from(s.win) << scale;
            if peer.bytes_sent > 0 && window == 0 && peer.window != Some(0) {
                peer.zero_windows += 1;
            }
            peer.window = Some(window);
            peer.max_window = peer.max_window.max(window);
            if peer.una.is_none() {
                // the first ACK seen: from the first data byte seen, if any was
                peer.una = Some(peer.first_seq.map_or(ack, |f| f.min(ack)));
                peer.last_progress_t = Some(t);
            }
            match peer.una {
                Some(u) if ack > u => {
                    // data bytes only: a SYN's or FIN's sequence number is none
                    let newly = ack.min(peer.data_max).saturating_sub(u.min(peer.data_max));
                    peer.acked_total += newly;
                    peer.iv_acked += newly;
                    peer.una = Some(ack);
                    peer.dupacks = 0;
                    peer.sack_since_ack = false;
                    peer.last_progress_t = Some(t);
                    peer.last_ack_t = Some(t);
                    // the newest segment it covers that was sent once: an RTT sample
                    let covered: Vec<u64> = peer.outstanding.range(..=ack).map(|(&e, _)| e).collect();
                    if let Some(sample) = covered.iter().rev().find_map(|e| {
                        let (sent, again) = peer.outstanding[e];
                        (!again).then_some(t.saturating_sub(sent))
                    }) {
                        peer.rtt(sample);
                    }
                    for e in covered {
                        peer.outstanding.remove(&e);
                    }
                    peer.sacked.retain(|&(_, b)| b > ack);
                }
                Some(u) if ack == u && s.len == 0 && s.flags & (SYN | FIN) == 0 && peer.snd_max > u => {
                    peer.dupacks += 1;
                }
                _ => {}
            }
            let una = peer.una.unwrap_or(ack);
            for (i, &(l, r)) in s.sack.iter().enumerate() {
                let (l, r) = (peer.rel(l), peer.rel(r));
                if r <= l {
                    continue;
                }
                // a D-SACK: the first block below the ACK, or within the second
                if i == 0 && (r <= una || s.sack.get(1).is_some_and(|&(l2, r2)| l >= peer.rel(l2) && r <= peer.rel(r2)))
                {
                    peer.spurious += 1;
                    continue;
                }
                peer.sack_since_ack = true;
                if r > una {
                    peer.sacked.push((l.max(una), r));
                    // the newest segment it SACKs that was sent once: an RTT sample (taken now,
                    // not at the cumulative ACK after the hole is filled); none later for any of them
                    let mut newest = None;
                    for (_, v) in peer.outstanding.range_mut(l + 1..=r) {
                        if !v.1 {
                            newest = Some(v.0);
                        }
                        v.1 = true;
                    }
                    if let Some(sent) = newest {
                        peer.rtt(t.saturating_sub(sent));
                    }
                }
            }
            if peer.sacked.len() > 1 {
                peer.sacked.sort_unstable();
                let mut merged: Vec<(u64, u64)> = Vec::with_capacity(peer.sacked.len());
                for &(l, r) in &peer.sacked {
                    match merged.last_mut() {
                        Some(m) if l <= m.1 => m.1 = m.1.max(r),
                        _ => merged.push((l, r)),
                    }
                }
                merged.truncate(64);
                peer.sacked = merged;
            }
        }
        for side in &mut c.sides {
            let f = side.in_flight();
            side.iv_flight = side.iv_flight.max(f);
            side.max_in_flight = side.max_in_flight.max(f);
        }
    }

    /// Every connection, in the order first seen.
    pub fn finish(mut self) -> Vec<TraceConn> {
        let start = self.start.unwrap_or(0);
        let interval = self.interval_ns;
        let mut out = std::mem::take(&mut self.done);
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(c) = c.as_mut() {
                out.push(summarize(c, i, start, interval));
            }
        }
        out.sort_by_key(|c| c.index);
        out
    }
}

/// One connection's figures, its raw state spent.
fn summarize(c: &mut Conn, i: usize, start: i64, interval: i64) -> TraceConn {
    for side in &mut c.sides {
        if let Some(k) = side.iv {
            side.close(k, interval);
        }
    }
    let handshake = c.syn_t.is_some() && c.synack_t.is_some();
    let (d1, d2) = match (c.syn_t, c.synack_t, c.ack_t) {
        (Some(s), Some(sa), Some(a)) => (Some(sa.saturating_sub(s)), Some(a.saturating_sub(sa))),
        (Some(s), Some(sa), None) => (Some(sa.saturating_sub(s)), None),
        _ => (None, None),
    };
    let handshake_rtt = d1.zip(d2).map(|(x, y)| x.saturating_add(y));
    // near the end whose packets need the least time to come back to the capture point
    let near = match (d1, d2) {
        (Some(x), Some(y)) if x > y.max(1).saturating_mul(4) => Some(0usize),
        (Some(x), Some(y)) if y > x.max(1).saturating_mul(4) => Some(1),
        (Some(_), Some(_)) => None,
        _ => None,
    };
    let ends = [c.a.to_string(), c.b.to_string()];
    let capture_point = match (handshake_rtt, near) {
        (None, _) => "unknown: the capture started after the handshake".to_string(),
        (Some(_), Some(n)) => format!(
            "near {} (its SYN's answer took {:.2} ms, its own ACK {:.2} ms)",
            ends[n],
            d1.unwrap_or(0) as f64 / 1e6,
            d2.unwrap_or(0) as f64 / 1e6
        ),
        (Some(_), None) => format!(
            "between the ends (the SYN's answer {:.2} ms, the handshake's last ACK {:.2} ms)",
            d1.unwrap_or(0) as f64 / 1e6,
            d2.unwrap_or(0) as f64 / 1e6
        ),
    };
    let wscales = [c.sides[0].wscale, c.sides[1].wscale];
    let msses = [c.sides[0].mss, c.sides[1].mss];
    let mut directions = Vec::new();
    for (k, side) in c.sides.iter_mut().enumerate() {
        if side.bytes_sent == 0 {
            continue;
        }
        let other = 1 - k;
        let mut rtts = std::mem::take(&mut side.rtts);
        rtts.sort_unstable();
        let q = |p: f64| rtts.get(((rtts.len() - 1) as f64 * p).round() as usize).map(|&u| f64::from(u) / 1000.0);
        let (rtt_min, rtt_med, rtt_max) = if rtts.is_empty() { (None, None, None) } else { (q(0.0), q(0.5), q(1.0)) };
        let rtt_basis = match near {
                Some(n) if n == k => "data to its ACK from the capture point at the sender's side: the path's round trip".to_string(),
                Some(_) => format!(
                    "data to its ACK from the capture point at the receiver's side: the receiver's delay only (the handshake's round trip: {:.2} ms)",
                    handshake_rtt.unwrap_or(0) as f64 / 1e6
                ),
                None => "data to its ACK from the capture point (its place in the path unknown: the part of the round trip beyond it)".to_string(),
            };
        let seconds = match (side.first_data_t, side.last_ack_t) {
            (Some(f), Some(l)) if l > f => l.saturating_sub(f) as f64 / 1e9,
            _ => 0.0,
        };
        let throughput = if seconds > 0.0 { side.acked_total as f64 * 8.0 / seconds } else { 0.0 };
        // the verdict's RTT: the handshake's when the samples are only the receiver's delay
        let mut samples = std::mem::take(&mut side.samples);
        if let (Some(n), Some(h)) = (near, handshake_rtt) {
            if n != k {
                for x in &mut samples {
                    x.min_rtt_us = (h / 1000) as u32;
                    x.srtt_us = x.srtt_us.max((h / 1000) as u32);
                }
            }
        }
        // a verdict needs a transfer: a control connection's few messages tell nothing
        let verdict = (samples.len() >= 2 && side.segments >= MIN_VERDICT_SEGMENTS).then(|| {
            let mut v = crate::analysis::flow::verdict(
                &samples,
                &VerdictContext {
                    throughput_bps: throughput,
                    elapsed_ns: (seconds * 1e9) as u64,
                    ..VerdictContext::default()
                },
            );
            if v.limit == crate::analysis::flow::Limit::Application {
                v.text += " (from a capture: a sender held back by its send buffer looks the same)";
            }
            v
        });
        directions.push(TraceDirection {
            from: ends[k].clone(),
            to: ends[other].clone(),
            bytes_acked: side.acked_total,
            bytes_sent: side.bytes_sent,
            segments: side.segments,
            seconds,
            throughput_bps: throughput,
            retransmits: side.fast + side.timeout + side.other,
            fast: side.fast,
            timeout: side.timeout,
            other: side.other,
            spurious: side.spurious,
            zero_windows: side.zero_windows,
            window_scale: if handshake { wscales[other].filter(|_| wscales[k].is_some()).or(Some(0)) } else { None },
            mss: msses[k].or(msses[other]),
            rtt_samples: rtts.len() as u64,
            rtt_min_ms: rtt_min,
            rtt_median_ms: rtt_med,
            rtt_max_ms: rtt_max,
            rtt_basis,
            max_in_flight: side.max_in_flight,
            max_window: side.max_window,
            cwnd_at_loss: std::mem::take(&mut side.cwnd_at_loss),
            series_interval_s: (side.series_step.max(1) * interval) as f64 / 1e9,
            series: std::mem::take(&mut side.series),
            verdict,
        });
    }
    TraceConn {
        index: i as u32,
        a: c.a.to_string(),
        b: c.b.to_string(),
        start_s: c.first_t.saturating_sub(start) as f64 / 1e9,
        duration_s: c.last_t.saturating_sub(c.first_t) as f64 / 1e9,
        segments: c.segments,
        handshake,
        handshake_rtt_ms: handshake_rtt.map(|h| h as f64 / 1e6),
        capture_point,
        directions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(src: u16, seq: u32, ack: u32, flags: u8, win: u16, len: u32) -> Segment {
        let a: SocketAddr = "10.0.0.1:40000".parse().expect("a");
        let b: SocketAddr = "10.0.0.2:5201".parse().expect("b");
        let (s, d) = if src == 0 { (a, b) } else { (b, a) };
        Segment { src: Some(s), dst: Some(d), seq, ack, flags, win, len, ..Segment::default() }
    }

    /// A transfer seen at the sender's side: 20 ms RTT, a segment lost and
    /// sent again after three duplicate ACKs, a window scale of 7.
    #[test]
    fn a_transfer_at_the_senders_side_gives_its_rtt_retransmission_and_window() {
        let mut an = Analyzer::new(100_000_000);
        let ms = 1_000_000i64;
        let mut syn = seg(0, 1000, 0, SYN, 65535, 0);
        syn.wscale = Some(7);
        syn.mss = Some(1448);
        an.segment(0, &syn);
        let mut synack = seg(1, 5000, 1001, SYN | ACK, 65535, 0);
        synack.wscale = Some(7);
        an.segment(20 * ms, &synack);
        an.segment(20 * ms + 10_000, &seg(0, 1001, 5001, ACK, 512, 0));
        // ten segments of 1448 at t = 21 ms, the third lost
        for k in 0..10u32 {
            an.segment(21 * ms, &seg(0, 1001 + k * 1448, 5001, ACK, 512, 1448));
        }
        // ACKs at 41 ms: the first two, then three duplicates (SACKing the rest)
        an.segment(41 * ms, &seg(1, 5001, 1001 + 1448, ACK, 1000, 0));
        an.segment(41 * ms, &seg(1, 5001, 1001 + 2 * 1448, ACK, 1000, 0));
        for k in 3..10u32 {
            let mut d = seg(1, 5001, 1001 + 2 * 1448, ACK, 1000, 0);
            d.sack = vec![(1001 + 3 * 1448, 1001 + (k + 1) * 1448)];
            an.segment(41 * ms + i64::from(k), &d);
        }
        // the lost one again, then its ACK covering all ten
        an.segment(42 * ms, &seg(0, 1001 + 2 * 1448, 5001, ACK, 512, 1448));
        an.segment(62 * ms, &seg(1, 5001, 1001 + 10 * 1448, ACK, 1000, 0));
        let conns = an.finish();
        assert_eq!(conns.len(), 1);
        let c = &conns[0];
        assert!(c.handshake);
        assert!(c.capture_point.starts_with("near 10.0.0.1:40000"), "{}", c.capture_point);
        assert_eq!(c.directions.len(), 1);
        let d = &c.directions[0];
        assert_eq!((d.bytes_acked, d.bytes_sent, d.segments), (10 * 1448, 11 * 1448, 11));
        assert_eq!((d.retransmits, d.fast, d.timeout), (1, 1, 0));
        assert_eq!(d.window_scale, Some(7));
        assert_eq!(d.max_window, 1000 << 7);
        // RTT samples: 20 ms (the first ACKs); the retransmitted segment's ACK gives none
        assert_eq!(d.rtt_min_ms, Some(20.0));
        assert!(d.rtt_max_ms.is_some_and(|m| m < 21.0), "{:?}", d.rtt_max_ms);
        // in flight before the ACKs: all ten; at the loss, the 8 unacknowledged less the 7 SACKed
        assert_eq!(d.max_in_flight, 10 * 1448);
        assert_eq!(d.cwnd_at_loss.len(), 1);
        assert!((d.cwnd_at_loss[0].0 - 0.042).abs() < 1e-9 && d.cwnd_at_loss[0].1 == 1448, "{:?}", d.cwnd_at_loss);
        assert!(d.rtt_basis.contains("the path's round trip"));
    }

    /// A long, slow connection: a segment and its ACK every 100 ms for
    /// 100,000 intervals. Its series and its verdict's samples stay within
    /// their bounds at a coarser step, and lose no byte of the totals.
    #[test]
    fn a_long_connection_keeps_its_series_bounded_and_its_totals_whole() {
        let interval = 100_000_000i64;
        let mut an = Analyzer::new(interval as u64);
        let ms = 1_000_000i64;
        an.segment(0, &seg(0, 1000, 0, SYN, 65535, 0));
        an.segment(ms, &seg(1, 5000, 1001, SYN | ACK, 65535, 0));
        an.segment(2 * ms, &seg(0, 1001, 5001, ACK, 512, 0));
        let n = 100_000u32;
        for k in 0..n {
            let t = 10 * ms + i64::from(k) * interval;
            let seq = 1001u32.wrapping_add(k * 100);
            an.segment(t, &seg(0, seq, 5001, ACK, 512, 100));
            // the RTT varies: its smallest is at the middle
            let rtt = if k == n / 2 { ms / 2 } else { ms + i64::from(k % 7) * 1000 };
            an.segment(t + rtt, &seg(1, 5001, seq.wrapping_add(100), ACK, 512, 0));
        }
        let c = &an.finish()[0];
        let d = &c.directions[0];
        assert!(d.series.len() <= MAX_SERIES, "{} points", d.series.len());
        assert!(d.series.len() >= MAX_SERIES / 4, "{} points", d.series.len());
        // 100,000 intervals in at most 4096 points: a step of 32 intervals
        assert!((d.series_interval_s - 3.2).abs() < 1e-9, "{}", d.series_interval_s);
        assert_eq!(d.series.iter().map(|p| p.acked).sum::<u64>(), d.bytes_acked);
        assert_eq!(d.bytes_acked, u64::from(n) * 100);
        assert!(d.series.windows(2).all(|w| w[1].t_s - w[0].t_s >= d.series_interval_s - 1e-9));
        assert_eq!(d.rtt_min_ms, Some(0.5));
        assert!(d.verdict.is_some());
    }

    #[test]
    fn a_connection_without_its_handshake_says_so_and_a_timeout_is_told_apart() {
        let mut an = Analyzer::new(100_000_000);
        let ms = 1_000_000i64;
        an.segment(0, &seg(0, u32::MAX - 1000, 77, ACK, 100, 1000));
        an.segment(10 * ms, &seg(1, 77, u32::MAX, ACK, 100, 0));
        // across the sequence space's wrap
        an.segment(11 * ms, &seg(0, u32::MAX, 77, ACK, 100, 1000));
        // nothing for 300 ms: the same segment again is a timeout
        an.segment(311 * ms, &seg(0, u32::MAX, 77, ACK, 100, 1000));
        an.segment(321 * ms, &seg(1, 77, 999, ACK, 0, 0));
        let c = &an.finish()[0];
        assert!(!c.handshake);
        assert!(c.capture_point.starts_with("unknown"), "{}", c.capture_point);
        let d = &c.directions[0];
        assert_eq!(d.window_scale, None);
        assert_eq!((d.retransmits, d.timeout), (1, 1));
        assert_eq!(d.bytes_acked, 2000);
        assert_eq!(d.zero_windows, 1);
    }

    #[test]
    fn a_new_syn_on_the_same_ports_is_a_new_connection_and_the_old_is_summed_up() {
        let mut an = Analyzer::new(100_000_000);
        let ms = 1_000_000i64;
        for k in 0..3i64 {
            let t = k * 1000 * ms;
            an.segment(t, &seg(0, 1000, 0, SYN, 65535, 0));
            an.segment(t + ms, &seg(1, 5000, 1001, SYN | ACK, 65535, 0));
            an.segment(t + 2 * ms, &seg(0, 1001, 5001, ACK, 512, 1000));
            an.segment(t + 3 * ms, &seg(1, 5001, 2001, ACK, 512, 0));
            an.segment(t + 4 * ms, &seg(0, 2001, 5001, ACK | FIN, 512, 0));
            // the first two are summed up as soon as the next SYN comes
            assert_eq!(an.done.len() as i64, k);
        }
        let conns = an.finish();
        assert_eq!(conns.len(), 3);
        assert!(conns.iter().enumerate().all(|(k, c)| c.index as usize == k && c.directions[0].bytes_acked == 1000));
    }
}
