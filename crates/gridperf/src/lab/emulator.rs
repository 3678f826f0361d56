//! The emulator: one process holding every host's TUN descriptor. It reads
//! each IP packet a host sends, runs it through the link model of its
//! direction (`gridperf_core::lab::emu`), and writes it to the destination host's
//! TUN when the model says it is due. It watches itself: how late it wrote
//! each packet against the model's schedule, and every packet it could not
//! deliver that the model did not decide to drop.

use gridperf_core::lab::emu::{flow_path, Counters, Link, LinkConfig, Verdict};
use gridperf_core::lab::gso::{self, VnetHdr, VNET_HDR_LEN};
use gridperf_core::lab::queue_probe;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A packet written later than this behind the model's schedule counts as
/// late (docs/lab.md's fidelity target: delay error at most 1 ms at p99).
pub const LAG_THRESHOLD_NS: u64 = 1_000_000;

/// The most packets the emulator batches for its [`Writer`] before it
/// hands them over, within a turn: a long delivery is written while it is
/// still being decided.
const WRITER_BATCH: usize = 32;

/// The packets of a turn the emulator writes itself while its [`Writer`]
/// has nothing to do ([`Writer::takes`]).
const INLINE_MOST: usize = 4;

/// The most bytes the emulator leaves its [`Writer`] to write before it
/// waits for it (32 MiB: 27 ms at 10 Gbit/s, well past what makes a run
/// late): its backlog, and the buffers it holds, stay bounded when its CPU
/// is taken.
const WRITER_MOST_BYTES: u64 = 32 << 20;

/// A run is invalid when more than 1 in this many packets was late (p99 of
/// the lag above the threshold) and at least LATE_MIN were (a handful of
/// late packets in a short run is not evidence of a p99 above 1 ms).
pub const LATE_PER_PACKETS: u64 = 100;
pub const LATE_MIN: u64 = 10;
/// A hold-up longer than this is a long one: counted, and what held the
/// emulator up is found out (the hypervisor, other tasks, or neither).
pub const LAG_LIMIT_NS: u64 = 10_000_000;
/// A run is invalid when a loaded direction of the emulated link sat idle
/// because the emulator could not feed it for more than 1 in this many of
/// the run's nanoseconds: through the emulator's hold-ups (with packets
/// waiting on it), and while packets for it waited unread. That idle time
/// is what a rate measured over the run can be off by; the lab's rate
/// target is 1%, and so is this. Through a hold-up the link goes on
/// sending what its queue holds, in model time, so a hold-up shorter than
/// the queue's work takes nothing from the rate (its packets come out
/// late, and are judged as late packets): before the rule counted that,
/// 2 of 10 streams across baltic (1 Gbit/s x 20 ms, CUBIC) went INVALID
/// as an unprivileged user under a CPU hog, each at the rate of the valid
/// ones (936 and 924 Mbit/s; 65-72 ms of 5.3-5.5 s held up in 1-18 ms
/// pieces, 0.05% of the packets late). (A single hold-up of 10 ms no
/// longer voids an 8 s run: on a VM whose CPUs the hypervisor takes for
/// tens of ms, every run had one.)
pub const HELD_UP_PER: u64 = 100;

/// Whether `ns` of a run's (or a part of it's) `span_ns` is more than the
/// 1 in HELD_UP_PER the emulator's lateness may take from it: a window
/// adds about its length to a part of many packets, so a 1 ms hold-up is
/// 0.5% of a 200 ms transfer run and 1% of a 100 ms report interval.
pub fn over_share(ns: u64, span_ns: u64) -> bool {
    ns.saturating_mul(HELD_UP_PER) > span_ns
}

/// Seconds as whole ns, a negative span as none.
fn ns_of(span_s: f64) -> u64 {
    (span_s.max(0.0) * 1e9) as u64
}
/// A direction that delivered under 1 in this many of the busiest
/// direction's bytes carries the other's acknowledgements: its idle time is
/// not a measured rate's ([`Health::idle_ns`]).
const LOADED_SHARE: u64 = 8;
/// A whole-lab pause this long or longer distorts any TCP run across it:
/// TCP's minimum retransmission timeout (Linux's TCP_RTO_MIN, 200 ms) runs
/// out while nothing moves, and on resume the senders retransmit and cut
/// their windows for a loss the path did not make.
pub const PAUSE_RTO_NS: u64 = 200_000_000;
/// Drops after whole-lab pauses that may be chance (see `Health::pause_burst_drops`).
pub const PAUSE_DROPS_MIN: u64 = 10;
/// The latest spans in which the emulator was late ([`Health::late_windows`])
/// it keeps: at the 5-10 hold-ups a second a busy VM gives it, a minute's.
pub const LATE_WINDOWS_KEPT: usize = 512;

/// Which side of the bottleneck a host is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Side {
    A,
    B,
}

/// One emulated host's end of the emulator.
pub struct Port {
    pub name: String,
    pub addr: Ipv4Addr,
    pub side: Side,
    pub tun: File,
    /// The host's /proc/net/dev, opened inside its namespace.
    pub net_dev: Option<File>,
    /// A UDP socket of the host's namespace, connected to the probe's
    /// address: the emulator's marker of the host's TUN queue
    /// (gridperf_core::lab::queue_probe). Without one, an ICMP echo to the
    /// host probes it (its reply waits behind the host's receive work too).
    pub marker: Option<std::net::UdpSocket>,
    /// The host's own access link, if it has one: the same settings from
    /// the host to the bottleneck and from the bottleneck to the host.
    pub access: Option<LinkConfig>,
}

/// One host's access link counters (host to network, network to host).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessCounters {
    pub host: String,
    pub up: Counters,
    pub down: Counters,
}

/// The TUN device's drops as the host's kernel counts them, transmit then
/// receive. Transmit: packets the host sent that found the device's queue
/// full because the emulator did not read them in time. Receive: packets
/// the emulator wrote that the host's kernel dropped before its stack took
/// them; from 5 Gbit/s the hosts receive on another CPU (RPS), and a
/// packet that finds that CPU's backlog full (net.core.netdev_max_backlog)
/// is dropped there.
fn tun_dropped(net_dev: &mut File) -> Option<(u64, u64)> {
    use std::io::Seek;
    net_dev.seek(io::SeekFrom::Start(0)).ok()?;
    let mut text = String::new();
    net_dev.read_to_string(&mut text).ok()?;
    let line = text.lines().find(|l| l.trim_start().starts_with("gp0:"))?;
    // receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes packets errs drop ...
    let fields: Vec<u64> = line.split_once(':')?.1.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    Some((*fields.get(11)?, *fields.get(3)?))
}

/// Where a VM's kernel counts the free memory it has handed back to its
/// hypervisor (free page reporting, virtio-balloon): KiB since it booted.
const VM_REPORTED_KIB: &str = "/sys/module/page_reporting/parameters/reported_kib";

/// How much freed memory this VM had handed back to its hypervisor, KiB
/// since boot, read from the file kept open (None where the kernel does
/// not report, or keeps no count).
fn vm_reported_kib(f: &mut File) -> Option<u64> {
    use std::io::Seek;
    f.seek(io::SeekFrom::Start(0)).ok()?;
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The smallest block of free memory the VM hands back (a power of two
/// of pages); past the largest block the kernel keeps (order 10 on x86,
/// 4 MiB) it hands back none.
const VM_REPORTING_ORDER: &str = "/sys/module/page_reporting/parameters/page_reporting_order";
const MAX_PAGE_ORDER: u32 = 10;

/// Whether this VM hands its free memory back to its hypervisor now: the
/// size of the blocks it hands back, bytes, if it does.
fn vm_reporting_block() -> Option<u64> {
    let order: u32 = std::fs::read_to_string(VM_REPORTING_ORDER).ok()?.trim().parse().ok()?;
    (order <= MAX_PAGE_ORDER).then(|| 4096u64 << order)
}

/// The emulator's self-monitoring figures, per direction and overall.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Link counters, A to B then B to A (with parallel paths, their sums).
    pub links: [Counters; 2],
    /// With parallel paths (`lab up --paths N`), each path's counters, A to
    /// B then B to A; empty for one.
    #[serde(default)]
    pub paths: Vec<[Counters; 2]>,
    /// The hosts' access links, where configured.
    #[serde(default)]
    pub access: Vec<AccessCounters>,
    /// The latest any packet was written behind its schedule, in ns.
    pub max_lag_ns: u64,
    /// Packets written more than LAG_LIMIT_NS late, and wake-ups more than
    /// LAG_LIMIT_NS late that found a host's packets waiting: counters, so that a run's share is the difference
    /// of two readings (a maximum is not: an earlier, longer stall would
    /// hide a run's own).
    #[serde(default)]
    pub very_late_packets: u64,
    #[serde(default)]
    pub long_stalls: u64,
    /// Packets written more than LAG_THRESHOLD_NS late, but for those that
    /// fell due while the whole lab was paused.
    pub late_packets: u64,
    /// Packets late because they fell due while the whole lab was paused
    /// (the hypervisor pausing the machine, or `lab pause`): the hosts were
    /// stopped as well, so no host could have read them sooner. They do not
    /// count against the emulator's lag; the pause's time does (held_up_ns).
    #[serde(default)]
    pub paused_late_packets: u64,
    /// Whole-lab pauses of PAUSE_RTO_NS or longer.
    #[serde(default)]
    pub rto_pauses: u64,
    /// Packets a full queue dropped within a round trip after a whole-lab
    /// pause: what fell due in the pause came out at once, the hosts
    /// answered it at once, and the burst overran a queue that an unpaused
    /// path would not have (CUBIC across baltic lost 6-7% of a 6 s run to
    /// three 20 ms pauses this way, BBR 0.7%).
    #[serde(default)]
    pub pause_drops: u64,
    /// How long those windows after whole-lab pauses lasted, summed, ns:
    /// the queue's drops in them are judged against its drops elsewhere.
    #[serde(default)]
    pub pause_window_ns: u64,
    /// How long the emulator was held up (woke more than LAG_THRESHOLD_NS
    /// later than it asked) while packets waited on it, summed, ns.
    #[serde(default)]
    pub held_up_ns: u64,
    /// The long hold-ups (over LAG_LIMIT_NS), by what held the emulator up.
    #[serde(default)]
    pub held_by: HeldBy,
    /// The short ones (LAG_THRESHOLD_NS to LAG_LIMIT_NS), with what the
    /// probe saw over the spans that held them.
    #[serde(default)]
    pub short_held: ShortHoldUps,
    /// How late packets were written behind their schedule: bucket k counts
    /// lags below 2^k microseconds (bucket 0: under 1 us).
    pub lag_hist: Vec<u64>,
    /// Times the emulator woke more than LAG_THRESHOLD_NS later than it asked
    /// (it was not running; the hosts' packets waited unseen).
    pub stalls: u64,
    /// Packets the model passed that could not be written (TUN queue full).
    pub undecided_drops: u64,
    /// Packets the hosts' kernels dropped at the TUN devices before the
    /// emulator read them (the devices' tx_dropped), since the lab came up.
    pub tun_drops: u64,
    /// Packets the emulator wrote that the hosts' kernels dropped before
    /// their stacks took them (the devices' rx_dropped: a receiving CPU's
    /// backlog full), since the lab came up.
    #[serde(default)]
    pub host_rx_drops: u64,
    /// Packets that were not IPv4, or for an address no host has.
    pub unroutable: u64,
    /// Packets between hosts on the same side (they skip the bottleneck).
    pub same_side: u64,
    /// Offloaded super-packets read (each stands for several wire segments).
    pub super_packets: u64,
    /// Super-packets cut into their surviving segments after a drop.
    pub split_packets: u64,
    pub uptime_s: f64,
    /// Whether the emulator's thread runs under SCHED_FIFO (it needs
    /// CAP_SYS_NICE in the machine's first user namespace: root, not a
    /// rootless lab); None where nothing is emulated (the loopback lab).
    #[serde(default)]
    pub realtime: Option<bool>,
    /// When this reading was written, CLOCK_MONOTONIC ns (one clock for
    /// the emulator and every process on the lab's hosts).
    #[serde(default, skip_serializing_if = "gridperf_core::is_zero")]
    pub mono_ns: u64,
    /// The latest spans, CLOCK_MONOTONIC ns, in which the emulator was
    /// late: each hold-up a host's packets waited through (from when it
    /// should have woken to when it did) and each packet written more than
    /// LAG_THRESHOLD_NS behind schedule (from when it was due to when it
    /// was written), merged where they touch; at most LATE_WINDOWS_KEPT.
    /// A round trip that crossed none of them crossed the emulated path as
    /// configured ([`late_windows_since`]). Only in the raw readings: a
    /// run's difference carries none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_windows: Vec<[u64; 2]>,
    /// How many late windows were begun since the emulator started (the
    /// kept ones and those that fell out of the list).
    #[serde(default, skip_serializing_if = "gridperf_core::is_zero")]
    pub late_windows_begun: u64,
    /// The freed memory this VM had handed back to its hypervisor (free
    /// page reporting), KiB: since boot in a raw reading, within the span
    /// in a difference; None where the kernel does not report. Memory the
    /// hypervisor took back is faulted in again by it when the kernel next
    /// uses it, slowly: on this project's VM 200 MB took 0.3-0.9 s to
    /// touch after a quiet ten seconds, against 0.1 s when used a moment
    /// before, and the kernel's buffers for a 10 Gbit/s lab churn through
    /// such memory (1.4-1.9 GiB handed back in one 10G calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_reported_kib: Option<u64>,
    /// The smallest free block this VM hands back, bytes, when it does
    /// (read as the emulator starts: `page_reporting_order`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_reporting_block: Option<u64>,
    /// How long the hosts' packets waited in their TUN queues before the
    /// emulator read them, by its probe (`queue_probe`).
    #[serde(default, skip_serializing_if = "QueueWaits::is_empty")]
    pub queue_waits: QueueWaits,
}

/// What the emulator's probe of its hosts' TUN queues found
/// (gridperf_core::lab::queue_probe): a marker the emulator sends from a
/// socket in a host's namespace joins the host's TUN queue behind what
/// waited there, and the emulator times it until it reads it back (an
/// ICMP echo's reply instead, for a host without the socket). Sent every
/// [`QUEUE_PROBE_EVERY_NS`] to each host whose device carried packets in
/// the last second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueWaits {
    pub sent: u64,
    /// Answered (the rest were lost: a queue full, or given up on after
    /// [`QUEUE_PROBE_LOST_NS`]).
    pub answered: u64,
    /// How long the answers took: bucket k counts waits below 2^k us.
    pub hist: Vec<u64>,
    pub max_ns: u64,
    /// Answers that took more than LAG_THRESHOLD_NS, and their waits
    /// summed: one probe is awaited at a time, so a queue slow for 20 ms
    /// answers one probe where a quick one answers ten, and the run is
    /// judged by the time, as its hold-ups are.
    pub slow: u64,
    #[serde(default)]
    pub slow_ns: u64,
    /// Answers over LAG_THRESHOLD_NS that the links' queues covered, and
    /// their waits summed: when the probe was sent, every link its
    /// host's packets enter first already held enough to stay busy until
    /// it was read back. What waited then leaves each link when it would
    /// have on time (first in, first out): the rate and the delays are the
    /// model's, and only a drop may come later, by up to the wait (the
    /// queue drained meanwhile). Not judged, as a hold-up the link's queue
    /// covered is not.
    #[serde(default)]
    pub covered: u64,
    #[serde(default)]
    pub covered_ns: u64,
}

/// How often a host's TUN queue is probed while it carries packets: a
/// 4-byte send and a 32-byte read, 1,000 a second for two hosts.
pub const QUEUE_PROBE_EVERY_NS: u64 = 2_000_000;
/// A probe not answered within this is counted lost and sent again.
pub const QUEUE_PROBE_LOST_NS: u64 = 500_000_000;

impl QueueWaits {
    pub fn is_empty(&self) -> bool {
        self.sent == 0
    }

    /// Counts an answer that took `wait_ns`; `covered`: the links' queues
    /// covered it (see [`QueueWaits::covered`]). Whether it is slow and
    /// uncovered (it then marks late what its host sent).
    fn add(&mut self, wait_ns: u64, covered: bool) -> bool {
        if self.hist.is_empty() {
            self.hist = vec![0; LAG_BUCKETS];
        }
        self.answered += 1;
        self.hist[lag_bucket(wait_ns)] += 1;
        self.max_ns = self.max_ns.max(wait_ns);
        if wait_ns <= LAG_THRESHOLD_NS {
            return false;
        }
        if covered {
            self.covered += 1;
            self.covered_ns += wait_ns;
            return false;
        }
        self.slow += 1;
        self.slow_ns += wait_ns;
        true
    }

    fn minus(&self, b: &QueueWaits) -> QueueWaits {
        QueueWaits {
            sent: self.sent.saturating_sub(b.sent),
            answered: self.answered.saturating_sub(b.answered),
            hist: minus_hist(&self.hist, &b.hist),
            max_ns: if self.max_ns > b.max_ns { self.max_ns } else { 0 },
            slow: self.slow.saturating_sub(b.slow),
            slow_ns: self.slow_ns.saturating_sub(b.slow_ns),
            covered: self.covered.saturating_sub(b.covered),
            covered_ns: self.covered_ns.saturating_sub(b.covered_ns),
        }
    }

    /// The longest wait in words: exact where it is this span's, else
    /// (a difference of readings whose earlier one had a longer) the bound
    /// of its histogram's top bucket.
    pub fn worst(&self) -> String {
        match (self.max_ns, self.quantile_us(1.0)) {
            (0, Some(us)) => format!("under {:.1} ms", us as f64 / 1000.0),
            (ns, _) => format!("{:.1} ms", ns as f64 / 1e6),
        }
    }

    /// The upper bound (us) of the bucket holding quantile `q` of the waits.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        hist_quantile_us(&self.hist, q)
    }
}

/// A histogram's counts since an earlier reading of it.
fn minus_hist(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter().enumerate().map(|(k, n)| n.saturating_sub(before.get(k).copied().unwrap_or(0))).collect()
}

/// The upper bound (us) of the bucket of a power-of-two histogram
/// ([`lag_bucket`]'s) that holds its quantile `q`.
fn hist_quantile_us(hist: &[u64], q: f64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let want = ((q * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (k, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= want {
            return Some(1u64 << k);
        }
    }
    None
}

/// How a run across the emulator is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// As a whole: its late packets and hold-ups against its packets and
    /// time (a rate over the run, a stream's window, a copy).
    Whole,
    /// Round trip by round trip: those that crossed a window in which the
    /// emulator was late were left out ([`late_windows_since`]), and the
    /// rest crossed the path as configured (`rtt`).
    ByRoundTrip,
}

impl Health {
    /// Notes that the emulator was late from `from` to `to` (CLOCK_MONOTONIC
    /// ns): joined to the last window where they touch or overlap.
    pub fn late_from(&mut self, from: u64, to: u64) {
        if join_window(&mut self.late_windows, [from, to.max(from)]) {
            return;
        }
        if self.late_windows.len() > LATE_WINDOWS_KEPT {
            self.late_windows.remove(0);
        }
        self.late_windows_begun += 1;
    }
}

/// The windows in which the emulator was late between two of its readings
/// (`before`, then `after`, of one emulator), or None when some of them
/// fell out of the list it keeps (or `after` is not later), so that a run
/// cannot be judged window by window.
pub fn late_windows_since(before: &Health, after: &Health) -> Option<Vec<[u64; 2]>> {
    if after.mono_ns < before.mono_ns || after.late_windows_begun < before.late_windows_begun {
        return None;
    }
    // the windows begun since are the list's last ones; the one open at
    // `before` (it may have grown since) must be kept too, just before them
    let (begun, len) = (after.late_windows_begun - before.late_windows_begun, after.late_windows.len() as u64);
    let lost = if before.late_windows.is_empty() { begun > len } else { begun > 0 && begun >= len };
    if lost {
        return None;
    }
    Some(after.late_windows.iter().copied().filter(|w| w[1] >= before.mono_ns).collect())
}

/// Adds windows read since an earlier reading (as [`late_windows_since`]
/// gives them: the first may be the one open then, grown since) to those
/// read before, in time order, joined where they touch or overlap.
pub fn join_windows(all: &mut Vec<[u64; 2]>, since: Vec<[u64; 2]>) {
    for w in since {
        join_window(all, w);
    }
}

/// Joins `w` to the last of `all` where they touch or overlap (true), or
/// appends it (false).
fn join_window(all: &mut Vec<[u64; 2]>, w: [u64; 2]) -> bool {
    match all.last_mut() {
        Some(last) if w[0] <= last[1] && w[1] >= last[0] => {
            last[0] = last[0].min(w[0]);
            last[1] = last[1].max(w[1]);
            true
        }
        _ => {
            all.push(w);
            false
        }
    }
}

/// Which of `spans` (each a round trip's start and end, in order of their
/// starts) crossed one of `windows` (in time order, apart, as
/// [`late_windows_since`] gives them): lay within one for any time (a
/// window is at least the 1 ms a packet must be late by, or a hold-up).
pub fn crossing(spans: &[[u64; 2]], windows: &[[u64; 2]]) -> Vec<bool> {
    late_within(spans, windows).into_iter().map(|ns| ns > 0).collect()
}

/// How long each of `spans` (each a run's or round trip's start and end,
/// in order of their starts) lay within `windows` (in time order, apart),
/// ns: one pass over both.
pub fn late_within(spans: &[[u64; 2]], windows: &[[u64; 2]]) -> Vec<u64> {
    let mut j = 0;
    spans
        .iter()
        .map(|s| {
            while j < windows.len() && windows[j][1] < s[0] {
                j += 1;
            }
            windows[j..]
                .iter()
                .take_while(|w| w[0] <= s[1])
                .map(|w| w[1].min(s[1]).saturating_sub(w[0].max(s[0])))
                .sum()
        })
        .collect()
}

/// Long hold-ups of one cause: how many, and their time, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldUps {
    pub count: u64,
    pub ns: u64,
}

impl HoldUps {
    fn add(&mut self, ns: u64) {
        self.count += 1;
        self.ns += ns;
    }

    fn minus(&self, before: &HoldUps) -> HoldUps {
        HoldUps { count: self.count.saturating_sub(before.count), ns: self.ns.saturating_sub(before.ns) }
    }
}

/// The hold-ups of 1 to 10 ms, judged together: /proc/stat counts steal in
/// 10 ms ticks, so one of them cannot be laid at the hypervisor's door, but
/// their sum over a run can. The probe is read every 20 ms; what it saw
/// over each 20 ms span that held short hold-ups (each CPU's steal, the
/// emulator thread's wait on a run queue) is summed. A tick of steal falls
/// into a span with the chance the true steal fills of a tick, so each
/// CPU's sum is right on average (each CPU's ticks fall at their own
/// moments: the least of one span's figures would not be); the sums also
/// hold what the spans had beside the hold-ups, so they are an upper bound
/// of what held the emulator up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShortHoldUps {
    pub count: u64,
    pub ns: u64,
    /// Each CPU's steal over the spans, ns.
    pub steal_ns: Vec<u64>,
    /// The emulator thread's time waiting on a run queue over the spans, ns.
    pub waited_ns: u64,
}

impl ShortHoldUps {
    /// Adds one probe span's short hold-ups (`count`, `ns`), with the probe's readings around it.
    fn add_span(&mut self, count: u64, ns: u64, before: &gridperf_sys::SchedSample, after: &gridperf_sys::SchedSample) {
        self.steal_ns.resize(after.steal_ns.len().max(self.steal_ns.len()), 0);
        for (sum, (a, b)) in self.steal_ns.iter_mut().zip(after.steal_ns.iter().zip(&before.steal_ns)) {
            *sum += a.saturating_sub(*b);
        }
        self.count += count;
        self.ns += ns;
        if let (Some(b), Some(a)) = (before.waited_ns, after.waited_ns) {
            self.waited_ns += a.saturating_sub(b);
        }
    }

    /// The least of the CPUs' steal over the spans (the whole machine paused), ns.
    pub fn steal_every_cpu_ns(&self) -> u64 {
        self.steal_ns.iter().copied().min().unwrap_or(0)
    }

    /// The most of one CPU's steal over the spans, ns.
    pub fn steal_some_cpu_ns(&self) -> u64 {
        self.steal_ns.iter().copied().max().unwrap_or(0)
    }

    fn minus(&self, b: &ShortHoldUps) -> ShortHoldUps {
        ShortHoldUps {
            count: self.count.saturating_sub(b.count),
            ns: self.ns.saturating_sub(b.ns),
            steal_ns: self
                .steal_ns
                .iter()
                .enumerate()
                .map(|(k, n)| n.saturating_sub(b.steal_ns.get(k).copied().unwrap_or(0)))
                .collect(),
            waited_ns: self.waited_ns.saturating_sub(b.waited_ns),
        }
    }

    /// What held the emulator up through them, as for one long hold-up:
    /// what covers half their time or more, first the hypervisor.
    pub fn cause(&self) -> Option<Cause> {
        let half = |x: u64| x.saturating_mul(2) >= self.ns;
        (self.count > 0).then(|| {
            if half(self.steal_every_cpu_ns()) {
                Cause::MachinePaused
            } else if half(self.steal_some_cpu_ns()) {
                Cause::CpuStolen
            } else if half(self.waited_ns) {
                Cause::OtherTasks
            } else {
                Cause::NotRunning
            }
        })
    }

    /// "41 time(s) for 1 to 10 ms, 163 ms in all; over the spans that held them ..."
    pub fn words(&self) -> Option<String> {
        let cause = self.cause()?;
        let ms = |ns: u64| ns as f64 / 1e6;
        Some(format!(
            "{} time(s) for 1 to {} ms, {:.0} ms in all; over the 20 ms spans that held them the hypervisor took {:.0} ms of \
             every CPU and {:.0} ms of the most-taken one (steal), and the emulator waited {:.0} ms to run: most \
             likely {}",
            self.count,
            LAG_LIMIT_NS / 1_000_000,
            ms(self.ns),
            ms(self.steal_every_cpu_ns()),
            ms(self.steal_some_cpu_ns()),
            ms(self.waited_ns),
            cause.words()
        ))
    }
}

/// What held the emulator up, each long hold-up judged by the CPUs' steal
/// and the emulator thread's own schedstat across it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBy {
    /// Every CPU's steal rose by half the hold-up or more: the hypervisor
    /// paused the whole machine, the hosts with it. Outside gridperf.
    pub machine_paused: HoldUps,
    /// The emulator's own sleep ran late while every CPU sat idle: the
    /// hypervisor left the machine halted past its timer (no steal shows,
    /// as no CPU asked to run), the hosts with it. Outside gridperf.
    #[serde(default)]
    pub machine_idle: HoldUps,
    /// The steal of some CPUs rose so: the hypervisor took the emulator's
    /// CPU, while the hosts may have run on another. Outside gridperf.
    pub cpu_stolen: HoldUps,
    /// The emulator waited on a run queue for half the hold-up or more:
    /// other tasks of this machine held the CPUs.
    pub other_tasks: HoldUps,
    /// The emulator was on the CPU through it: a turn of its own work ran
    /// long (the kernel's network work for the hosts, done in its system
    /// calls, included).
    #[serde(default)]
    pub working: HoldUps,
    /// On the CPU through it, half the turn or more spent writing packets
    /// to the hosts' devices (the kernel's copy of each into a TUN device,
    /// and its hand-off to the CPU that receives it). Compare the rate
    /// they wrote at (`writing_bytes` over `writing_write_ns`) with the
    /// link's: on this project's 2-CPU VM at 10 Gbit/s such turns wrote at
    /// about the link's rate, and what fell due meanwhile made the next
    /// turn longer (docs/lab.md, "Turns that write too slowly").
    #[serde(default)]
    pub writing: HoldUps,
    /// What those turns wrote, bytes, and their time in the writes, ns.
    #[serde(default)]
    pub writing_bytes: u64,
    #[serde(default)]
    pub writing_write_ns: u64,
    /// Neither: the emulator was not runnable (stopped by a signal, or held
    /// in the kernel).
    pub not_running: HoldUps,
    /// The whole lab, the emulator and every process of its hosts, was
    /// stopped by `gridperf lab pause` (a pause injected to test the rule).
    #[serde(default)]
    pub lab_paused: HoldUps,
}

impl HeldBy {
    fn minus(&self, b: &HeldBy) -> HeldBy {
        HeldBy {
            machine_paused: self.machine_paused.minus(&b.machine_paused),
            machine_idle: self.machine_idle.minus(&b.machine_idle),
            cpu_stolen: self.cpu_stolen.minus(&b.cpu_stolen),
            other_tasks: self.other_tasks.minus(&b.other_tasks),
            working: self.working.minus(&b.working),
            writing: self.writing.minus(&b.writing),
            writing_bytes: self.writing_bytes.saturating_sub(b.writing_bytes),
            writing_write_ns: self.writing_write_ns.saturating_sub(b.writing_write_ns),
            not_running: self.not_running.minus(&b.not_running),
            lab_paused: self.lab_paused.minus(&b.lab_paused),
        }
    }

    /// "2 by the hypervisor pausing the machine (steal on every CPU, 31 ms), 1 by other tasks ..."
    pub fn words(&self) -> String {
        let parts: Vec<String> = [
            (self.machine_paused, Cause::MachinePaused),
            (self.machine_idle, Cause::MachineIdle),
            (self.cpu_stolen, Cause::CpuStolen),
            (self.other_tasks, Cause::OtherTasks),
            (self.working, Cause::Working),
            (self.writing, Cause::Writing),
            (self.not_running, Cause::NotRunning),
            (self.lab_paused, Cause::LabPaused),
        ]
        .iter()
        .filter(|(h, _)| h.count > 0)
        .map(|(h, cause)| {
            let rate = match cause {
                Cause::Writing if self.writing_write_ns > 0 => format!(
                    " (they wrote at {})",
                    gridperf_core::units::fmt_bps(self.writing_bytes as f64 * 8e9 / self.writing_write_ns as f64)
                ),
                _ => String::new(),
            };
            format!("{} {}, {} ms{rate}", h.count, cause.words(), h.ns / 1_000_000)
        })
        .collect();
        parts.join("; ")
    }
}

/// A long turn of work (`held_in_work`, ns; 0 when the hold-up was a late
/// sleep) judged [`Cause::Working`] whose writes to the hosts' devices took
/// `writes_ns` of it: [`Cause::Writing`] when they took half of it or more.
/// A trace of 10 Gbit/s runs on this project's VM (perf, 1 kHz) found the
/// turns over 10 ms in the writes' copy into the TUN devices nearly
/// throughout, at 1.1-1.3 GB/s where the run's median turn wrote at 2.3.
pub fn by_writes(cause: Cause, held_in_work: u64, writes_ns: u64) -> Cause {
    if cause == Cause::Working && held_in_work > 0 && writes_ns.saturating_mul(2) >= held_in_work {
        Cause::Writing
    } else {
        cause
    }
}

/// Which cause a long hold-up of `held_ns` had, from the probe's readings
/// before and after it: the CPUs' steal and idle time (at `tick_ns`
/// resolution) and the emulator thread's time waiting on a run queue.
/// `asleep`: the hold-up was the emulator's own sleep running late (not
/// its work taking long, nor a stop by a signal). `span_ns`: the time
/// between the two readings, over which the thread's own time on a CPU
/// tells whether it was on one through the hold-up.
pub fn held_by(
    before: &gridperf_sys::SchedSample,
    after: &gridperf_sys::SchedSample,
    held_ns: u64,
    span_ns: u64,
    tick_ns: u64,
    asleep: bool,
) -> Cause {
    let rose = |a: &[u64], b: &[u64]| -> Vec<u64> { a.iter().zip(b).map(|(a, b)| a.saturating_sub(*b)).collect() };
    let stole = rose(&after.steal_ns, &before.steal_ns);
    // steal is counted in ticks: half the hold-up, less half a tick
    let half = |ns: u64| ns.saturating_mul(2).saturating_add(tick_ns) >= held_ns;
    if !stole.is_empty() && stole.iter().all(|&ns| half(ns)) {
        return Cause::MachinePaused;
    }
    if stole.iter().any(|&ns| half(ns)) {
        return Cause::CpuStolen;
    }
    let waited = match (before.waited_ns, after.waited_ns) {
        (Some(b), Some(a)) => a.saturating_sub(b),
        _ => 0,
    };
    if waited.saturating_mul(2) >= held_ns {
        return Cause::OtherTasks;
    }
    // a turn of work that ran long with the thread on a CPU all along (off
    // one for under half the hold-up): its own work, or the kernel's done in
    // its system calls (a packet written to a TUN device is received by the
    // host's TCP in the writer's context). A trace of a user's calibrate at
    // 10G x 50 ms under a CPU hog showed 20 hold-ups said "not running" while
    // the thread never left the CPU for over 10 ms but at its teardown
    if let (Some(b), Some(a)) = (before.ran_ns, after.ran_ns) {
        let off = span_ns.saturating_sub(a.saturating_sub(b));
        if !asleep && off.saturating_mul(2) < held_ns {
            return Cause::Working;
        }
    }
    // its own sleep ran late while every CPU sat idle (or was taken): nothing
    // on this machine ran, the timer that ends the sleep came late. A
    // virtual CPU the hypervisor leaves halted past its timer shows no steal
    // (it did not ask to run); the trace of a 10G run as a user showed both
    // CPUs without a single switch for 26.7 ms, the emulator asleep
    let idled = rose(&after.cpu_idle_ns, &before.cpu_idle_ns);
    if asleep
        && !idled.is_empty()
        && idled.len() == stole.len()
        && idled
            .iter()
            .zip(&stole)
            .all(|(&i, &s)| i.saturating_mul(2).saturating_add(s.saturating_mul(2)).saturating_add(tick_ns) >= held_ns)
    {
        return Cause::MachineIdle;
    }
    Cause::NotRunning
}

/// What held the emulator up once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    MachinePaused,
    /// Every CPU idle through the emulator's late sleep: the machine's timer came late.
    MachineIdle,
    /// On the CPU throughout: a turn of its own work (or the kernel's in its system calls) ran long.
    Working,
    /// As [`Cause::Working`], with most of the turn in its writes to the hosts' devices.
    Writing,
    CpuStolen,
    OtherTasks,
    NotRunning,
    /// `gridperf lab pause` stopped the whole lab (see [`paused_by_lab`]).
    LabPaused,
}

impl Cause {
    /// What held the emulator up, in words (as [`HeldBy::words`] says it).
    pub fn words(self) -> &'static str {
        match self {
            Cause::MachinePaused => {
                "by the hypervisor pausing the whole machine (steal on every CPU; outside gridperf)"
            }
            Cause::MachineIdle => {
                "by the hypervisor not waking the idle machine (every CPU idle through it, the emulator's timer late; outside gridperf)"
            }
            Cause::CpuStolen => "by the hypervisor taking the emulator's CPU (steal; outside gridperf)",
            Cause::OtherTasks => "by other tasks holding the CPUs (the emulator waited to run)",
            Cause::Working => {
                "by its own work, on the CPU throughout (a turn that ran long: its packets, or the kernel's network work for the lab's hosts done in its system calls)"
            }
            Cause::Writing => {
                "by its writes to the hosts' devices, on the CPU throughout (a turn that ran long, half of it or more in writing packets into the TUN devices: the kernel's copy and hand-off to the hosts' CPU)"
            }
            Cause::NotRunning => "with the emulator not running (stopped by a signal, or held in the kernel)",
            Cause::LabPaused => "by `gridperf lab pause` stopping the whole lab (injected)",
        }
    }

    /// The emulator and the lab's hosts were all stopped together: nothing
    /// in the lab could have seen a packet sooner (see [`Health::paused_late_packets`]).
    pub fn whole_lab(self) -> bool {
        matches!(self, Cause::MachinePaused | Cause::MachineIdle | Cause::LabPaused)
    }
}

/// The file in a lab's directory where `gridperf lab pause` writes each
/// pause before it stops the lab: a line `START_NS END_NS` each, on
/// CLOCK_MONOTONIC.
pub const PAUSES_FILE: &str = "pauses";

/// Whether a recorded pause (lines of [`PAUSES_FILE`]) covers at least half
/// of the hold-up from `from_ns` to `to_ns` (CLOCK_MONOTONIC).
pub fn paused_by_lab(pauses: &str, from_ns: u64, to_ns: u64) -> bool {
    let held = to_ns.saturating_sub(from_ns);
    pauses.lines().any(|l| {
        let mut it = l.split_whitespace().map(|w| w.parse::<u64>());
        match (it.next(), it.next()) {
            (Some(Ok(s)), Some(Ok(e))) => e.min(to_ns).saturating_sub(s.max(from_ns)).saturating_mul(2) >= held,
            _ => false,
        }
    })
}

/// The fair scheduler's slice the emulator asks for when it may not run as
/// a real-time thread (the shortest the kernel gives: 0.1 ms).
pub const FAIR_SLICE_NS: u64 = 100_000;

/// How often the emulator reads its probe between hold-ups.
const PROBE_EVERY_NS: u64 = 20_000_000;

/// How long before a packet is due the emulator stops sleeping and spins.
pub const SPIN_NS: u64 = 250_000;
/// Under load the emulator works in ticks of this length: it naps without
/// watching the TUN devices, then reads everything that arrived and writes
/// everything that fell due. A packet may so be read up to a tick after its
/// host sent it and written up to a tick after it was due (the lag
/// histogram records the second; `lab calibrate` measures both as delay
/// error). Without ticks every packet costs a wake-up of the emulator,
/// which at 1 Gbit/s of 1500-byte packets is more CPU than it has.
pub const TICK_NS: u64 = 40_000;
/// Events per 100 ms window above which the emulator works in ticks: wire
/// segments read plus segments falling due, one per tick on average (25 000
/// per second; a 1 Gbit/s flow of 1500-byte packets makes 166 000), while
/// its reads come in batches ([`Pace::TICK_BATCH`]).
const BUSY_PACKETS: u64 = Pace::WINDOW_NS / TICK_NS;

/// The share of every [`ROOM_SPAN_NS`] a real-time emulator leaves its CPU
/// to others, napping a tick at a time, while it works flat out. The kernel
/// stops a real-time thread that ran more than 95% of a second for the rest
/// of that second (RT throttling, `kernel.sched_rt_runtime_us`; since 6.12
/// also its fair server, 50 ms of every second for ordinary tasks): at 10
/// Gbit/s the emulator never slept, and was held up once or twice in each
/// calibration point for 38-55 ms, "by other tasks"; a trace showed it
/// runnable, on the CPU 99% of the second before, its CPU idle.
const ROOM_SHARE: f64 = 0.08;
/// The span over which [`ROOM_SHARE`] is kept.
const ROOM_SPAN_NS: u64 = 10_000_000;
/// How often a real-time emulator reads its own CPU time to see whether it
/// owes a nap (a system call: not every turn).
const ROOM_CHECK_NS: u64 = 250_000;

/// A real-time emulator's time on its CPU in the current span, as the
/// scheduler charges it (its own work and the kernel's in its system
/// calls: a thread's polls and writes are no rest, however short).
#[derive(Debug, Default, Clone, Copy)]
struct Room {
    /// When the span began: wall and CPU time, ns.
    from: u64,
    cpu_from: u64,
    checked: u64,
}

impl Room {
    /// Whether at `now` (wall) with `cpu` (the thread's CPU time) the
    /// emulator owes its CPU a nap: it left it less than [`ROOM_SHARE`] of
    /// the span so far. A span ends after [`ROOM_SPAN_NS`] and the next
    /// begins owing nothing.
    fn owed(&mut self, now: u64, cpu: u64) -> bool {
        self.checked = now;
        let span = now.saturating_sub(self.from);
        if span >= ROOM_SPAN_NS {
            *self = Room { from: now, cpu_from: cpu, checked: now };
            return false;
        }
        let off = span.saturating_sub(cpu.saturating_sub(self.cpu_from));
        (off as f64) < ROOM_SHARE * span as f64
    }

    /// Whether it is time to check again.
    fn due(&self, now: u64) -> bool {
        now.saturating_sub(self.checked) >= ROOM_CHECK_NS
    }

    /// Whether a real-time emulator (`realtime`) owes its CPU a nap at
    /// `now`: checked every [`ROOM_CHECK_NS`], from its own CPU time.
    fn nap_owed(&mut self, realtime: bool, now: u64) -> bool {
        realtime && self.due(now) && self.owed(now, gridperf_sys::thread_cpu_ns())
    }
}

/// Packets read from one device before the emulator turns to the others and
/// to the packets falling due.
const BATCH: usize = 64;

/// A read buffer: the virtio-net header and the largest packet.
const READ_BUF: usize = VNET_HDR_LEN + SUPER_PACKET;
/// Read buffers kept for reuse (4 MiB): a steady flow gives one back for
/// each one it takes.
const SPARE_BUFS: usize = 64;

/// The read buffers a lab's emulator starts with, every page of them
/// written once before the lab is up: enough for its fullest link's
/// delay line and queue in super-packets ([`LinkConfig::held_bytes`]),
/// at least [`SPARE_BUFS`]. Memory touched for the first time is slow on
/// a VM that gives free memory back to its host (this project's, with
/// page reporting): 200 MB took 0.3-0.9 s there, against 0.1 s for
/// memory used a moment before, and a 10 Gbit/s x 50 ms lab's emulator
/// filled its 187.5 MB of delay line and queue with fresh buffers in the
/// first quarter second of a load, held up by its own reads.
pub struct ReadBuffers {
    bufs: Vec<Vec<u8>>,
    /// How long writing them took.
    pub took: Duration,
}

impl ReadBuffers {
    /// For a lab of these links: the bottleneck's, and the hosts' access links.
    pub fn for_links<'a>(links: impl IntoIterator<Item = &'a LinkConfig>) -> ReadBuffers {
        ReadBuffers::of(buffers_for(links))
    }

    /// The bytes [`ReadBuffers::for_links`] would take.
    pub fn bytes_for<'a>(links: impl IntoIterator<Item = &'a LinkConfig>) -> u64 {
        (buffers_for(links) * READ_BUF) as u64
    }

    fn of(n: usize) -> ReadBuffers {
        // a packet buffer a packet, freed as it leaves the delay line:
        // without this, glibc gave the heap's top back and faulted it in
        // again, zeroed, page by page (29% of the emulator's CPU in a 10
        // Gbit/s copy)
        let _ = gridperf_sys::keep_freed_memory();
        let t = Instant::now();
        let bufs = (0..n)
            .map(|_| {
                let mut b = vec![0u8; READ_BUF];
                // calloc leaves fresh memory unwritten: write a byte a page
                // (not a zero, which the compiler may know is there)
                for i in (0..READ_BUF).step_by(4096) {
                    b[i] = 1;
                }
                b
            })
            .collect();
        ReadBuffers { bufs, took: t.elapsed() }
    }

    /// The bytes they take.
    pub fn bytes(&self) -> u64 {
        (self.bufs.len() * READ_BUF) as u64
    }
}

/// The largest packet a TUN device hands over: a super-packet.
const SUPER_PACKET: usize = 65_536;

/// How many read buffers hold the fullest of these links' delay line and
/// queue in super-packets, and at least [`SPARE_BUFS`]: one direction
/// full, as a bulk flow fills it (the other carries its acknowledgments,
/// copied out of the read buffer); a link without a bound adds none.
fn buffers_for<'a>(links: impl IntoIterator<Item = &'a LinkConfig>) -> usize {
    let held = links
        .into_iter()
        .filter_map(|l| {
            let (b, bounded) = l.held_bytes(SUPER_PACKET as u32);
            bounded.then_some(b)
        })
        .max()
        .unwrap_or(0);
    usize::try_from(held.div_ceil(SUPER_PACKET as u64)).unwrap_or(usize::MAX).max(SPARE_BUFS)
}

/// How the emulator paces itself, decided afresh every 100 ms from the last
/// window: it may spin before a due packet only while its work (not asleep,
/// not spinning) took at most half the window, its work and spinning
/// together at most [`Pace::MAX_BUSY`] of it, and the machine had half a
/// CPU idle (spinning on a busy machine takes the CPU from the lab's own
/// hosts: at 100 Mbit/s under a CPU hog the load generator fell 13% short);
/// and it works in ticks while packets come faster than one per tick.
/// Spinning counts as time to spare: were it counted as work, a window
/// that spun would forbid the next one to, and a ping-pong across
/// `lan-gige` took 140 us and 270 us in alternate 100 ms windows.
#[derive(Default)]
struct Pace {
    window_start: u64,
    slept: u64,
    /// Time spent spinning before a due packet, with nothing to move.
    spun: u64,
    packets: u64,
    /// Wire segments read from the devices, and the turns that read any.
    read: u64,
    reading_turns: u64,
    /// The machine's idle time (all CPUs) when the window began, ns.
    idle_start: u64,
    may_spin: bool,
    ticking: bool,
}

impl Pace {
    const WINDOW_NS: u64 = 100_000_000;
    /// The share of a window the emulator may be on the CPU, working or
    /// spinning: a SCHED_FIFO thread busy more than 95% of a second is
    /// stopped for the rest of it by the kernel's RT throttling.
    const MAX_BUSY: f64 = 0.8;
    /// The share of a window the emulator's work (not asleep, not
    /// spinning) takes when it begins to work in ticks. A ping-pong across
    /// `lan-gige` makes 28 000 events a second at 10% work: were it ticked
    /// by count alone, its round trip took 140 us and 270 us in alternate
    /// windows (ticked, it fell below the count and stopped ticking).
    const TICK_WORK: f64 = 0.25;
    /// Segments a turn that reads must find on average for ticks to pay: a
    /// tick batches what arrived during its nap, and a ping-pong has one
    /// message in flight however fast it goes, so a tick only adds its
    /// wait to each hop (a 1-byte ping-pong across a lab with no delay
    /// ticked in 17 of 23 windows and took 120 us a round trip). A bulk
    /// flow reads a host's super-packets (TCP's, UDP's GSO): tens a read.
    const TICK_BATCH: u64 = 2;

    /// A sleep from `before` to `after` that was asked to last `timeout`,
    /// after which `packets` were read or written, `read` of them read;
    /// `idle` the machine's idle time so far (all CPUs, ns).
    fn account(&mut self, before: u64, after: u64, timeout: u64, packets: u64, read: u64, idle: u64) {
        if timeout > 0 {
            self.slept += after.saturating_sub(before).min(timeout);
        }
        self.packets += packets;
        self.read += read;
        self.reading_turns += u64::from(read > 0);
        let elapsed = after.saturating_sub(self.window_start);
        if elapsed >= Self::WINDOW_NS {
            let spare = idle.saturating_sub(self.idle_start) * 2 >= elapsed;
            let awake = elapsed.saturating_sub(self.slept);
            let work = awake.saturating_sub(self.spun);
            self.may_spin = work * 2 <= elapsed && awake as f64 <= Self::MAX_BUSY * elapsed as f64 && spare;
            // ticks begin once wake-ups cost the emulator a quarter of the
            // window, and end when the events fall below one per tick again;
            // only while the reads come in batches (TICK_BATCH)
            let many = self.packets * Self::WINDOW_NS > BUSY_PACKETS * elapsed;
            let batched = self.read > Self::TICK_BATCH * self.reading_turns;
            self.ticking = many && batched && (self.ticking || work as f64 > Self::TICK_WORK * elapsed as f64);
            self.window_start = after;
            self.idle_start = idle;
            self.slept = 0;
            self.spun = 0;
            self.packets = 0;
            self.read = 0;
            self.reading_turns = 0;
        }
    }
}

/// Buckets in [`Health::lag_hist`]: up to 2^23 us (8 s) and beyond.
pub const LAG_BUCKETS: usize = 24;

fn lag_bucket(lag_ns: u64) -> usize {
    let us = lag_ns / 1000;
    if us == 0 {
        0
    } else {
        ((64 - us.leading_zeros()) as usize).min(LAG_BUCKETS - 1)
    }
}

impl Health {
    /// The upper bound (in us) of the bucket holding quantile `q` of the lag.
    pub fn lag_quantile_us(&self, q: f64) -> Option<u64> {
        hist_quantile_us(&self.lag_hist, q)
    }

    /// What happened between two snapshots of the same emulator: counts
    /// are differences, and the worst lag is the later one if it grew.
    pub fn since(&self, before: &Health) -> Health {
        let minus = |l: &mut Counters, b: &Counters| {
            l.arrived -= b.arrived.min(l.arrived);
            l.delivered -= b.delivered.min(l.delivered);
            l.lost -= b.lost.min(l.lost);
            l.queue_full -= b.queue_full.min(l.queue_full);
            l.arrived_bytes -= b.arrived_bytes.min(l.arrived_bytes);
            l.delivered_bytes -= b.delivered_bytes.min(l.delivered_bytes);
            l.starved_ns -= b.starved_ns.min(l.starved_ns);
            l.idle_held_ns -= b.idle_held_ns.min(l.idle_held_ns);
        };
        let mut links = self.links.clone();
        for (l, b) in links.iter_mut().zip(&before.links) {
            minus(l, b);
        }
        let mut paths = self.paths.clone();
        for (p, b) in paths.iter_mut().zip(&before.paths) {
            minus(&mut p[0], &b[0]);
            minus(&mut p[1], &b[1]);
        }
        Health {
            links,
            paths,
            access: self.access.clone(),
            max_lag_ns: if self.max_lag_ns > before.max_lag_ns { self.max_lag_ns } else { 0 },
            late_packets: self.late_packets.saturating_sub(before.late_packets),
            paused_late_packets: self.paused_late_packets.saturating_sub(before.paused_late_packets),
            rto_pauses: self.rto_pauses.saturating_sub(before.rto_pauses),
            pause_drops: self.pause_drops.saturating_sub(before.pause_drops),
            pause_window_ns: self.pause_window_ns.saturating_sub(before.pause_window_ns),
            held_up_ns: self.held_up_ns.saturating_sub(before.held_up_ns),
            held_by: self.held_by.minus(&before.held_by),
            short_held: self.short_held.minus(&before.short_held),
            very_late_packets: self.very_late_packets.saturating_sub(before.very_late_packets),
            long_stalls: self.long_stalls.saturating_sub(before.long_stalls),
            stalls: self.stalls.saturating_sub(before.stalls),
            lag_hist: minus_hist(&self.lag_hist, &before.lag_hist),
            undecided_drops: self.undecided_drops.saturating_sub(before.undecided_drops),
            tun_drops: self.tun_drops.saturating_sub(before.tun_drops),
            host_rx_drops: self.host_rx_drops.saturating_sub(before.host_rx_drops),
            unroutable: self.unroutable.saturating_sub(before.unroutable),
            same_side: self.same_side.saturating_sub(before.same_side),
            super_packets: self.super_packets.saturating_sub(before.super_packets),
            split_packets: self.split_packets.saturating_sub(before.split_packets),
            uptime_s: self.uptime_s - before.uptime_s,
            realtime: self.realtime,
            // the windows stay in the raw readings ([`late_windows_since`])
            mono_ns: 0,
            late_windows: Vec::new(),
            late_windows_begun: 0,
            vm_reported_kib: self.vm_reported_kib.zip(before.vm_reported_kib).map(|(a, b)| a.saturating_sub(b)),
            vm_reporting_block: self.vm_reporting_block,
            queue_waits: self.queue_waits.minus(&before.queue_waits),
        }
    }

    /// For a span whose emulator was held up by its own work, on a VM that
    /// hands its free memory back to its hypervisor: that, as the likeliest
    /// cause. Memory the kernel uses again after it was handed back waits
    /// on the hypervisor to fault it in, and a fast lab's kernel buffers
    /// grow and churn through it. On this project's VM, 10 Gbit/s
    /// calibrations alternated with the reporting on and off (`echo 11 >
    /// .../page_reporting_order`, root): at 5 ms, hold-ups by the
    /// emulator's own work of 0-577 ms a point on, 0-24 ms off (docs/lab.md).
    fn vm_memory_words(&self) -> Option<String> {
        let block = self.vm_reporting_block?;
        (self.held_by.working.count > 0).then(|| {
            let within = match self.vm_reported_kib {
                Some(k) if k >= 1 << 10 => format!(", {} MiB of it within this span", k >> 10),
                _ => String::new(),
            };
            format!(
                "this VM hands its free memory back to its hypervisor (free page reporting, blocks of {} and \
                 more{within}), and the kernel's next use of such memory waits on the hypervisor to fault it in: \
                 the likeliest cause of the turns that ran long (outside gridperf; see docs/lab.md, \"A VM that \
                 hands back its free memory\")",
                gridperf_core::units::fmt_size(block)
            )
        })
    }

    /// Why a measurement taken across the emulator cannot be trusted, if it
    /// cannot: more than 1% of its packets over 1 ms late (the delay's p99
    /// target), or the emulator held up for more than 1% of the run's time
    /// (what a rate over the run can be off by), or packets dropped that the
    /// model did not drop. Each says what held the emulator up.
    pub fn invalid_because(&self) -> Option<String> {
        self.invalid_because_with(Judged::Whole)
    }

    /// As [`Health::invalid_because`], for a run judged as `judged` says:
    /// one judged round trip by round trip has left out every round trip
    /// that crossed a late window, so the late packets and the hold-ups
    /// void it no more (what else would, does).
    pub fn invalid_because_with(&self, judged: Judged) -> Option<String> {
        let mut why = Vec::new();
        let delivered: u64 = self.links.iter().map(|c| c.delivered).sum();
        let whole = judged == Judged::Whole;
        let too_many_late =
            whole && self.late_packets >= LATE_MIN && self.late_packets * LATE_PER_PACKETS > delivered.max(1);
        let span_ns = ns_of(self.uptime_s);
        // what the hold-ups took from a rate: the time the link sat idle
        // through them (not while its queue still had work), and idle after
        // while packets for it waited unread; a run judged round trip by
        // round trip has left out what crossed a hold-up
        let (idle_held, starved) = self.idle_ns();
        let idle = if whole { idle_held + starved } else { starved };
        let over = over_share(idle, span_ns);
        let held_too_long = over && whole && idle_held > 0;
        // the hosts' packets that waited unread in their TUN queues: a
        // delay no setting made, which the lag behind schedule (counted from
        // the reading) does not see
        let q = &self.queue_waits;
        let queue_slow = whole && over_share(q.slow_ns, span_ns);
        if too_many_late {
            let mut w = format!(
                "{} of {} packets were delivered more than {} us behind schedule",
                self.late_packets,
                delivered,
                LAG_THRESHOLD_NS / 1000
            );
            if self.max_lag_ns > 0 {
                w += &format!(", worst {} us behind", self.max_lag_ns / 1000);
            }
            why.push(w);
        }
        if held_too_long {
            let more =
                if starved > 0 { format!(", and {:.1} ms more after", starved as f64 / 1e6) } else { String::new() };
            why.push(format!(
                "the emulator was held up for {} ms of the run's {:.1} s, the emulated link idle for {:.1} ms of it{more} \
                 (more than 1 in {HELD_UP_PER})",
                self.held_up_ns / 1_000_000,
                self.uptime_s,
                idle_held as f64 / 1e6
            ));
        } else if over {
            why.push(self.starved_words(idle, self.uptime_s));
        }
        if queue_slow {
            why.push(format!(
                "the hosts' packets waited more than {} us in their TUN queues before the emulator read them for \
                 {:.1} ms of the run's {:.1} s (more than 1 in {HELD_UP_PER}; {} of {} probes of the queues, worst \
                 {}): it fell behind reading, with a link's queue too short to cover the wait, and what the hosts sent \
                 meanwhile waited as long on top of the path's delay{}",
                LAG_THRESHOLD_NS / 1000,
                q.slow_ns as f64 / 1e6,
                self.uptime_s,
                q.slow,
                q.answered,
                q.worst(),
                if q.covered > 0 {
                    format!(
                        " ({} more slow answers, {:.1} ms, the links' queues covered: not counted)",
                        q.covered,
                        q.covered_ns as f64 / 1e6
                    )
                } else {
                    String::new()
                }
            ));
        }
        let late = too_many_late || held_too_long || queue_slow;
        if late && self.long_stalls > 0 {
            why.push(format!(
                "held up {} time(s) for more than {} ms: {}",
                self.long_stalls,
                LAG_LIMIT_NS / 1_000_000,
                self.held_by.words()
            ));
            why.extend(self.vm_memory_words());
        }
        if let Some(w) = self.short_held.words().filter(|_| late) {
            why.push(format!("held up {w}"));
        }
        if self.rto_pauses > 0 {
            why.push(format!(
                "the whole lab was paused {} time(s) for {} ms or more at once: TCP's retransmission timers ran out \
                 meanwhile, a loss the path did not make",
                self.rto_pauses,
                PAUSE_RTO_NS / 1_000_000
            ));
        }
        if let Some(expected) = self.pause_burst_drops() {
            why.push(format!(
                "{} packets were dropped at a full queue in the round trip after a pause of the whole lab, where \
                 the rest of the run dropped {expected:.0} in as long (what fell due in the pause came out at once): \
                 a loss the path would not have made",
                self.pause_drops
            ));
        }
        if self.undecided_drops > 0 {
            why.push(format!("{} packets were dropped that the model did not drop", self.undecided_drops));
        }
        if self.tun_drops > 0 {
            why.push(format!("{} packets overflowed a TUN queue before the emulator read them", self.tun_drops));
        }
        if self.host_rx_drops > 0 {
            why.push(format!(
                "{} packets the emulator wrote were dropped by the receiving host's kernel before its stack took \
                 them (the receiving CPU's backlog full: net.core.netdev_max_backlog)",
                self.host_rx_drops
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The bottleneck's loaded directions (each path's, with `--paths`):
    /// those that delivered at least 1 in LOADED_SHARE of the busiest
    /// one's bytes. A direction under that carries the other's
    /// acknowledgements, and its idle time is not a rate's.
    fn loaded(&self) -> Vec<&Counters> {
        let dirs: Vec<&Counters> =
            if self.paths.is_empty() { self.links.iter().collect() } else { self.paths.iter().flatten().collect() };
        let most = dirs.iter().map(|c| c.delivered_bytes).max().unwrap_or(0);
        dirs.into_iter().filter(|c| c.delivered_bytes.saturating_mul(LOADED_SHARE) >= most).collect()
    }

    /// What the emulator took from the rate of the loaded direction it
    /// took most from, ns: the time it sat idle through hold-ups
    /// ([`Counters::idle_held_ns`]), and while a packet for it waited
    /// unread in a TUN queue ([`Counters::starved_ns`]).
    pub fn idle_ns(&self) -> (u64, u64) {
        self.loaded().into_iter().map(|c| (c.idle_held_ns, c.starved_ns)).max_by_key(|(h, s)| h + s).unwrap_or((0, 0))
    }

    fn starved_words(&self, ns: u64, span_s: f64) -> String {
        format!(
            "the emulated link sat idle for {:.1} ms of {span_s:.1} s while packets for it waited unread in a TUN \
             queue (more than 1 in {HELD_UP_PER}): the emulator's reading, not the link, set the rate",
            ns as f64 / 1e6
        )
    }

    /// Why a figure measured over `span_s` is the emulator's and not the
    /// link's, if it is: a loaded direction of the bottleneck sat idle,
    /// with packets for it waiting unread, for more than 1 in HELD_UP_PER
    /// of the span. The emulator's reading then set the rate: its CPU short
    /// of the work, or taken from it in pieces too short to count as
    /// hold-ups (CI once counted 4.86 of 5 Gbit/s with no hold-up over the
    /// rule, and nothing said why).
    pub fn starved_beyond(&self, span_s: f64) -> Option<String> {
        let (_, ns) = self.idle_ns();
        let span_ns = ns_of(span_s);
        over_share(ns, span_ns).then(|| self.starved_words(ns, span_s))
    }

    /// Why the emulator's hold-ups in this span void a rate measured over
    /// `span_s` of it (counted over three seconds of a longer span), if
    /// they do: the loaded link sat idle through them, or while packets for
    /// it waited unread, for more than 1 in HELD_UP_PER of `span_s` (what
    /// the rate can be off by), with what held it up. Through a hold-up
    /// its queue covered, the link went on sending in model time and the
    /// rate lost nothing: its packets came out late, which the delay
    /// figures measure. Until 2026-12-02 the hold-ups' own time was judged
    /// here, against the rule every run across a lab is judged by (README,
    /// "The emulator watches itself"): a calibration's overloads went
    /// INVALID for 31-57 ms of short hold-ups in 3 s, the link's 1-BDP
    /// queue full through all of them. Idle time just outside the measured
    /// part counts too: the span holds it, and the verdict errs on the
    /// strict side.
    pub fn held_up_beyond(&self, span_s: f64) -> Option<String> {
        let span_ns = ns_of(span_s);
        let (idle_held, starved) = self.idle_ns();
        (idle_held > 0 && over_share(idle_held + starved, span_ns)).then(|| {
            let more =
                if starved > 0 { format!(", and {:.1} ms more after", starved as f64 / 1e6) } else { String::new() };
            let mut w = format!(
                "the emulator was held up for {} ms around the {span_s:.2} s measured, the emulated link idle for \
                 {:.1} ms of it{more} (more than 1 in {HELD_UP_PER})",
                self.held_up_ns / 1_000_000,
                idle_held as f64 / 1e6
            );
            if self.long_stalls > 0 {
                w += &format!(", {}", self.held_by.words());
            }
            if let Some(m) = self.vm_memory_words() {
                w += &format!("; {m}");
            }
            w
        })
    }

    /// What made the run INVALID, if it is: a pause of the whole machine or
    /// lab, or a CPU the hypervisor took (outside gridperf); other tasks
    /// holding the CPUs; else the emulator itself. Other tasks come first:
    /// they are what the user can do something about.
    pub fn invalid_cause(&self) -> Option<gridperf_core::model::LabCause> {
        self.invalid_cause_with(Judged::Whole)
    }

    /// As [`Health::invalid_cause`], for a run judged as `judged` says.
    pub fn invalid_cause_with(&self, judged: Judged) -> Option<gridperf_core::model::LabCause> {
        use gridperf_core::model::LabCause;
        self.invalid_because_with(judged)?;
        let h = &self.held_by;
        let any_held = self.late_packets >= LATE_MIN || self.held_up_ns > 0;
        let held = any_held && self.long_stalls > 0;
        // the short hold-ups, judged together
        let short = self.short_held.cause().filter(|_| any_held);
        // a pause past TCP's timeout, or its burst's drops, void a run alone
        let decisive = self.rto_pauses > 0 || self.pause_burst_drops().is_some();
        // its own work held up on a VM that hands its free memory back:
        // the likeliest cause is the hypervisor's faults ([`Health::vm_memory_words`])
        let vm_memory = held && self.vm_memory_words().is_some();
        let outside = (held
            && h.machine_paused.count + h.machine_idle.count + h.cpu_stolen.count + h.lab_paused.count > 0)
            || vm_memory
            || matches!(short, Some(Cause::MachinePaused | Cause::CpuStolen))
            || decisive;
        // other tasks' hold-ups: the user's to act on, unless an outside
        // pause voided the run and they alone would not have (a rootless
        // lab's own hosts holding its emulator 65 ms of a 10 s run with a
        // 250 ms pause in it: the pause is why)
        let others_ns = h.other_tasks.ns + if short == Some(Cause::OtherTasks) { self.short_held.ns } else { 0 };
        let span_ns = ns_of(self.uptime_s);
        let others_alone = over_share(others_ns, span_ns);
        let others = (held && h.other_tasks.count > 0) || short == Some(Cause::OtherTasks);
        Some(if others && (others_alone || !decisive) {
            LabCause::OtherTasks
        } else if outside {
            LabCause::Outside
        } else {
            LabCause::Emulator
        })
    }

    /// Whether the bursts after whole-lab pauses overran a queue: more than
    /// PAUSE_DROPS_MIN drops in the round trips after them, and more than
    /// twice what the queue dropped in as long elsewhere in the run (a
    /// loss-based sender fills the queue now and then whatever happens).
    /// The drops the rest of the run would have made in as long, if so.
    pub fn pause_burst_drops(&self) -> Option<f64> {
        let queue_full: u64 = self.links.iter().map(|c| c.queue_full).sum();
        let span_ns = ns_of(self.uptime_s);
        let rest_ns = span_ns.saturating_sub(self.pause_window_ns).max(1);
        let expected =
            queue_full.saturating_sub(self.pause_drops) as f64 * self.pause_window_ns as f64 / rest_ns as f64;
        (self.pause_drops > PAUSE_DROPS_MIN && self.pause_drops as f64 > 2.0 * expected).then_some(expected)
    }

    /// For a valid run that the emulator's hold-ups touched (one over 10
    /// ms, or over 1 in HELD_UP_PER of its time in all): how much, how
    /// long the link sat idle for them (the bound its figures stayed
    /// within), and what held it up.
    pub fn held_up_note(&self) -> Option<String> {
        let span_ns = ns_of(self.uptime_s);
        let much = over_share(self.held_up_ns, span_ns);
        if self.invalid_because().is_some() || (self.long_stalls == 0 && !much) {
            return None;
        }
        let mut w = format!(
            "the lab's emulator was held up for {} ms in all of the run's {:.1} s, the emulated link idle for {:.1} ms \
             of it (within the 1 in {HELD_UP_PER} a run may lose)",
            self.held_up_ns / 1_000_000,
            self.uptime_s,
            self.idle_ns().0 as f64 / 1e6
        );
        if self.long_stalls > 0 {
            w += &format!(
                "; {} time(s) for more than {} ms: {}",
                self.long_stalls,
                LAG_LIMIT_NS / 1_000_000,
                self.held_by.words()
            );
        }
        Some(w)
    }
}

fn dest_v4(pkt: &[u8]) -> Option<Ipv4Addr> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]))
}

/// A packet as read from a TUN device (virtio-net header included), on its
/// way through its links one wire segment at a time.
struct InFlight {
    buf: Vec<u8>,
    dst: usize,
    /// The links it crosses, in order (access up, bottleneck, access down).
    path: Vec<usize>,
    /// Each segment's length on the wire.
    lens: Vec<u32>,
    /// Which segments came out of the last link.
    survived: Vec<bool>,
    /// Segments still inside some link.
    pending: usize,
}

/// A segment in a link: its packet, its index, and which hop of the path it is on.
type Item = (Rc<RefCell<InFlight>>, usize, usize);

/// The packet of `n` bytes just read, as a buffer of its own: a large
/// one (a super-packet) takes the read buffer itself, and a spare
/// takes its place; a small one is copied (an ACK must not hold 64 KB
/// for the length of the delay line). The emulator's copies in user
/// space, these and the cuts', were 11.5% of its CPU at 10 Gbit/s.
fn take_buf(buf: &mut Vec<u8>, spare: &mut Vec<Vec<u8>>, n: usize) -> Vec<u8> {
    if n < READ_BUF / 2 {
        return buf[..n].to_vec();
    }
    let next = spare.pop().unwrap_or_else(|| vec![0u8; READ_BUF]);
    let mut b = std::mem::replace(buf, next);
    b.truncate(n);
    b
}

/// A delivered packet's buffer, back at its full size, if it was a read
/// buffer (a super-packet's, [`take_buf`]): it serves a read again.
fn read_buf_again(mut b: Vec<u8>) -> Option<Vec<u8>> {
    (b.capacity() >= READ_BUF).then(|| {
        b.resize(READ_BUF, 0);
        b
    })
}

/// Writes a packet whose last surviving segment came out: whole when every
/// segment survived, else cut into the survivors.
fn deliver(tun: &mut File, buf: &[u8], survived: &[bool], health: &mut Health) {
    if survived.iter().all(|&a| a) {
        // a TUN write takes a whole packet or none of it
        if !matches!(tun.write(buf), Ok(n) if n == buf.len()) {
            health.undecided_drops += 1;
        }
        return;
    }
    let hdr = VnetHdr::parse(buf).unwrap_or_default();
    let pkt = &buf[VNET_HDR_LEN..];
    match gso::cuts(&hdr, pkt, |i| survived[i]) {
        Ok(cuts) => {
            health.split_packets += 1;
            for c in cuts {
                // each cut's own headers, then its payload where it lies
                let parts = [io::IoSlice::new(&c.head), io::IoSlice::new(&pkt[c.data.clone()])];
                let len = c.head.len() + c.data.len();
                if !matches!(tun.write_vectored(&parts), Ok(n) if n == len) {
                    health.undecided_drops += 1;
                }
            }
        }
        Err(_) => health.undecided_drops += survived.iter().filter(|&&a| a).count() as u64,
    }
}

/// A packet handed to the [`Writer`]: the port it goes to, its buffer and
/// which of its segments survived, and when it fell due (ns on the
/// emulator's clock).
struct Job {
    dst: usize,
    buf: Vec<u8>,
    survived: Vec<bool>,
    due: u64,
}

/// What the [`Writer`] hands back for a batch: the read buffers to serve
/// again, its drops and cuts, and each packet's due time with when it was
/// written (ns on the emulator's clock), so that the emulator counts the
/// lag of the write itself, not of its hand-off.
#[derive(Default)]
struct Written {
    /// The bytes of its packets.
    bytes: u64,
    bufs: Vec<Vec<u8>>,
    undecided_drops: u64,
    split_packets: u64,
    at: Vec<(u64, u64)>,
}

/// A thread of the emulator's on the hosts' CPUs that writes what fell due
/// into the hosts' TUN devices, for a lab whose hosts receive on CPUs other
/// than the emulator's ([`Setup::writer_cpus`]). Written from the
/// emulator's own thread, each packet was copied into the kernel there and
/// handed to the receiving CPU by an interrupt (RPS): at 10 Gbit/s on a
/// 2-CPU VM, 48-50% of the emulator's CPU was those writes and 10-12% the
/// interrupts (~6 us a write on this nested VM), and its long turns were
/// delivery turns in which the writes fell to the link's own rate. From a
/// thread on the receiving CPU, the copy runs there and the host's stack
/// takes the packet on the same CPU, with no interrupt; the emulator keeps
/// the reads and the schedule. A turn's packets go as one batch (one
/// wake-up), in the order they fell due.
struct Writer {
    jobs: Vec<Job>,
    /// The bytes handed over and not yet written.
    outstanding_bytes: u64,
    tx: Option<std::sync::mpsc::Sender<Vec<Job>>>,
    back: std::sync::mpsc::Receiver<Written>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Starts it on `cpus`, writing to its own handles of `tuns`; it takes
    /// the emulator thread's scheduling (real-time where it has it).
    fn start(tuns: &[File], cpus: &[usize], start: Instant) -> io::Result<Writer> {
        let mut tuns: Vec<File> = tuns.iter().map(|t| t.try_clone()).collect::<io::Result<_>>()?;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Job>>();
        let (done, back) = std::sync::mpsc::channel();
        let cpus = cpus.to_vec();
        let thread = std::thread::Builder::new().name("gridperf-lab-writer".into()).spawn(move || {
            let _ = gridperf_sys::set_thread_affinity(&cpus);
            let mut h = Health::default();
            while let Ok(batch) = rx.recv() {
                let mut w = Written { at: Vec::with_capacity(batch.len()), ..Written::default() };
                for j in batch {
                    w.bytes += j.buf.len() as u64;
                    deliver(&mut tuns[j.dst], &j.buf, &j.survived, &mut h);
                    w.at.push((j.due, start.elapsed().as_nanos() as u64));
                    w.bufs.extend(read_buf_again(j.buf));
                }
                (w.undecided_drops, w.split_packets) = (h.undecided_drops, h.split_packets);
                (h.undecided_drops, h.split_packets) = (0, 0);
                if done.send(w).is_err() {
                    break;
                }
            }
        })?;
        Ok(Writer { jobs: Vec::new(), outstanding_bytes: 0, tx: Some(tx), back, thread: Some(thread) })
    }

    /// Hands over what is batched.
    fn flush(&mut self) {
        if !self.jobs.is_empty() {
            if let Some(tx) = &self.tx {
                let bytes: u64 = self.jobs.iter().map(|j| j.buf.len() as u64).sum();
                if tx.send(std::mem::take(&mut self.jobs)).is_ok() {
                    self.outstanding_bytes += bytes;
                }
            }
        }
    }

    /// Whether the emulator's `delivered`-th packet of a turn (from 0)
    /// goes to the writer: once the writer has work, so that each host's
    /// packets stay in order, and from the [`INLINE_MOST`]-th on. The few
    /// packets of a quiet lab are written at once by the emulator itself: a
    /// hand-off wakes the writer on another CPU, and that cost an idle round
    /// trip at 5-10 Gbit/s 100 us or more (baselines of 356-803 us against
    /// 271-389 us, three calibrations each).
    fn takes(&self, delivered: usize) -> bool {
        self.outstanding_bytes > 0 || !self.jobs.is_empty() || delivered >= INLINE_MOST
    }

    /// Hands over what is batched and waits until all of it is written.
    fn finish(&mut self) {
        self.flush();
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts a packet written `now` that fell due at `due` (ns on the
/// emulator's clock) into the lag figures: its histogram, the worst, and
/// a late one's window and kind (within the last whole-lab pause, `paused`,
/// or not).
fn count_lag(health: &mut Health, due: u64, now: u64, mono0: u64, paused: (u64, u64)) {
    let lag = now.saturating_sub(due);
    health.max_lag_ns = health.max_lag_ns.max(lag);
    health.lag_hist[lag_bucket(lag)] += 1;
    if lag > LAG_THRESHOLD_NS {
        health.late_from(mono0 + due, mono0 + now);
        if (paused.0..=paused.1).contains(&due) {
            health.paused_late_packets += 1;
        } else {
            health.late_packets += 1;
        }
    }
    if lag > LAG_LIMIT_NS {
        health.very_late_packets += 1;
    }
}

/// What an emulator moves packets between and across: the hosts' devices,
/// the bottleneck (a link each way per path), its read buffers, and the
/// seed of its loss and jitter.
pub struct Setup<'a> {
    pub ports: Vec<Port>,
    pub bottleneck: &'a [(LinkConfig, LinkConfig)],
    pub buffers: ReadBuffers,
    pub seed: u64,
    /// The CPUs the hosts receive on, when not the emulator's (RPS): its
    /// writes are then made there, by a [`Writer`].
    pub writer_cpus: Option<Vec<usize>>,
}

/// Runs until `stop` is set; calls `report` with the health figures about
/// every `report_every`. The TUN devices must have been made with offloads
/// (each packet behind a virtio-net header).
pub fn run(
    pauses: Option<&std::path::Path>,
    setup: Setup,
    stop: &AtomicBool,
    report_every: Duration,
    report: &mut dyn FnMut(&Health),
) -> io::Result<Health> {
    let _ = gridperf_sys::set_timer_slack_ns(1);
    // a stop by a signal (SIGSTOP of the emulator) is told from the
    // machine's late timer by the continue that ends it
    let _ = gridperf_sys::count_continues();
    let realtime = take_realtime();
    for p in &setup.ports {
        gridperf_sys::set_fd_nonblocking(&p.tun, true)?;
    }
    let Setup { ports, bottleneck, buffers, seed, writer_cpus } = setup;
    let mut emu = Emulator::new(pauses, ports, bottleneck, seed, realtime, buffers)?;
    // only a real-time emulator's: without it the writer ran at the hosts'
    // priority beside them, and a calibration's senders on those CPUs left
    // it 0.4-0.5 s behind at 10 Gbit/s as a user (bench/results
    // lab-rate-20261203-141319), where the emulator writing itself kept up
    if let Some(cpus) = writer_cpus.filter(|_| realtime) {
        emu.writer = Some(Writer::start(&emu.tuns, &cpus, emu.start)?);
    }
    // at once: what runs on the hosts is niced when the emulator is not real-time
    emu.health.mono_ns = gridperf_sys::monotonic_ns();
    report(&emu.health);
    let mut last_report = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if !emu.turn()? {
            continue;
        }
        if last_report.elapsed() >= report_every {
            emu.take_stock();
            report(&emu.health);
            last_report = Instant::now();
        }
    }
    if let Some(w) = &mut emu.writer {
        w.finish();
    }
    emu.take_stock();
    Ok(emu.health)
}

/// Makes this thread real-time (SCHED_FIFO) if it may: a real-time thread
/// is not kept waiting behind the hosts' own work on a small machine. Root
/// may, and so may a user whose RLIMIT_RTPRIO allows it (limits.conf's
/// rtprio); without it the lag counters will say so.
fn take_realtime() -> bool {
    let limit = gridperf_sys::rtprio_limit();
    match gridperf_sys::set_realtime(50) {
        Ok(()) => true,
        Err(_) if limit > 0 && gridperf_sys::set_realtime(limit as i32).is_ok() => true,
        Err(e) => {
            // the next best: a short slice, so that on waking it runs before
            // what a busy machine runs with the default slice
            let slice = match gridperf_sys::set_fair_slice(FAIR_SLICE_NS, 0) {
                Ok(()) => format!("a fair slice of {} us instead", FAIR_SLICE_NS / 1000),
                Err(s) => format!("nor take a short fair slice ({s})"),
            };
            eprintln!(
                "gridperf lab emulator: cannot run as a real-time thread ({e}; RLIMIT_RTPRIO {limit}); {slice}; lag may follow"
            );
            false
        }
    }
}

/// The emulated links and which of them a packet crosses: links 2k and
/// 2k + 1 are the bottleneck's path k, A to B and B to A (one path but for
/// `--paths`); then each host's access link, up (from the host) and down
/// (to it).
struct Fabric {
    links: Vec<Link<Item>>,
    /// Per port: its access links (up, down), if it has one.
    access: Vec<Option<(usize, usize)>>,
    n_paths: usize,
}

impl Fabric {
    fn new(bottleneck: &[(LinkConfig, LinkConfig)], ports: &[Port], seed: u64) -> Fabric {
        let mut links: Vec<Link<Item>> = Vec::new();
        for (k, (ab, ba)) in bottleneck.iter().enumerate() {
            let s = seed.wrapping_add((k as u64) << 32);
            links.push(Link::new(ab.clone(), s));
            links.push(Link::new(ba.clone(), s ^ 0x5bd1_e995));
        }
        if links.is_empty() {
            links = vec![Link::new(LinkConfig::default(), seed), Link::new(LinkConfig::default(), seed ^ 0x5bd1_e995)];
        }
        let mut access = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            access.push(p.access.clone().map(|cfg| {
                let up = links.len();
                links.push(Link::new(cfg.clone(), seed.wrapping_add(2 * i as u64 + 2)));
                links.push(Link::new(cfg, seed.wrapping_add(2 * i as u64 + 3)));
                (up, up + 1)
            }));
        }
        Fabric { links, access, n_paths: bottleneck.len().max(1) }
    }

    /// The links a packet from port `from` (on `side`) may enter first:
    /// its access link, or the bottleneck's paths in its direction.
    fn first_links(&self, from: usize, side: Side) -> impl Iterator<Item = &Link<Item>> {
        let own = self.access[from].map(|(up, _)| up);
        let dir = if side == Side::A { 0 } else { 1 };
        let paths = if own.is_some() { 0 } else { self.n_paths };
        own.into_iter().chain((0..paths).map(move |k| 2 * k + dir)).map(move |l| &self.links[l])
    }

    /// The links a packet from port `from` to port `to` crosses, in order,
    /// `dir` being the bottleneck's link it hashed onto.
    fn path(&self, from: usize, dir: usize, to: usize) -> Vec<usize> {
        let mut path = Vec::with_capacity(3);
        if let Some((up, _)) = self.access[from] {
            path.push(up);
        }
        path.push(dir);
        if let Some((_, down)) = self.access[to] {
            path.push(down);
        }
        path
    }

    /// The links' counters into `health`: the bottleneck's summed over its
    /// paths (and each path's when there are several), each access link's.
    fn snapshot(&self, ports: &[Port], health: &mut Health) {
        let links = &self.links;
        let mut sum = [Counters::default(), Counters::default()];
        health.paths.clear();
        for k in 0..self.n_paths {
            sum[0].add(&links[2 * k].counters);
            sum[1].add(&links[2 * k + 1].counters);
            if self.n_paths > 1 {
                health.paths.push([links[2 * k].counters.clone(), links[2 * k + 1].counters.clone()]);
            }
        }
        health.links = sum;
        health.access = ports
            .iter()
            .zip(&self.access)
            .filter_map(|(p, a)| {
                a.map(|(u, d)| AccessCounters {
                    host: p.name.clone(),
                    up: links[u].counters.clone(),
                    down: links[d].counters.clone(),
                })
            })
            .collect();
    }
}

/// One turn's waking: when the turn began and woke, what it asked to
/// sleep, which devices had packets, and when a link's next one fell due.
struct Woken {
    /// When the turn began (before any nap).
    began: u64,
    woke: u64,
    nap: u64,
    timeout: u64,
    ready: Vec<bool>,
    wake: Option<u64>,
    ticking: bool,
}

/// The emulator's state across the turns of its event loop.
struct Emulator<'p> {
    pauses: Option<&'p std::path::Path>,
    ports: Vec<Port>,
    fds: Vec<i32>,
    tuns: Vec<File>,
    fabric: Fabric,
    seed: u64,
    start: Instant,
    /// The emulator's clock (ns from `start`) on CLOCK_MONOTONIC, the hosts' clock too.
    mono0: u64,
    health: Health,
    /// What the next read fills (READ_BUF bytes long).
    buf: Vec<u8>,
    /// Read buffers of delivered super-packets, for the reads to come.
    spare: Vec<Vec<u8>>,
    /// How many of them are kept: as many as it started with
    /// ([`ReadBuffers`]), so that a delay line filled again takes none
    /// fresh from the heap.
    spare_cap: usize,
    pace: Pace,
    /// A device still held more than the last batch took.
    backlog: bool,
    last_packet: u64,
    /// The last whole-lab pause, on the emulator's clock: packets falling
    /// due within it are the pause's, not the emulator's lag.
    paused: (u64, u64),
    /// A round trip of the bottleneck and a little: how long after a pause
    /// its burst may still overrun a queue.
    burst_window: u64,
    /// What held the emulator up, read across each long hold-up.
    probe: gridperf_sys::SchedProbe,
    probed: gridperf_sys::SchedSample,
    probed_at: u64,
    /// How many times the process had been continued after a stop (SIGCONT) at the last probe.
    continued: u64,
    /// Drops the hosts' kernels count at the TUN devices, at the start.
    tun_base: Vec<(u64, u64)>,
    /// When the last turn began, if it spun before a due packet and moved nothing.
    spun_from: Option<u64>,
    /// Real-time (SCHED_FIFO): it keeps [`ROOM_SHARE`] of its CPU for others.
    realtime: bool,
    room: Room,
    /// When the emulator last woke: the turn's work (reading, deciding,
    /// writing) ran from then to the top of the next turn.
    woke_at: u64,
    /// The short hold-ups since the probe was last read: how many, how long.
    span_short: (u64, u64),
    /// Per port: when its last batch stopped with packets left in its TUN
    /// queue, so that the first read next finds one that waited from then.
    left_unread: Vec<Option<u64>>,
    /// The VM's count of memory handed back to its hypervisor, if it keeps one.
    vm_reported: Option<File>,
    /// Per port: the probe of its TUN queue.
    queue_probes: Vec<QueueProbe>,
    /// The last turn's writes to the hosts' devices: their time (ns) and bytes.
    turn_writes: (u64, u64),
    /// Makes its writes, where the hosts receive on other CPUs.
    writer: Option<Writer>,
}

/// One host's TUN-queue probe: its last sequence number, when the one
/// awaited was written (emulator ns), when the next is due, and when the
/// host's device last carried a packet of its own.
#[derive(Debug, Default, Clone)]
struct QueueProbe {
    seq: u16,
    awaited: Option<u64>,
    /// When the awaited one was written: whether every link its host's
    /// packets enter first had been busy without a break since then less
    /// the slow threshold, and until when the least busy would run out of
    /// what it held (0: one was idle).
    covered_until: u64,
    /// Since when they had all been busy.
    busy_since: u64,
    next_ns: u64,
    last_read_ns: Option<u64>,
}

impl<'p> Emulator<'p> {
    fn new(
        pauses: Option<&'p std::path::Path>,
        mut ports: Vec<Port>,
        bottleneck: &[(LinkConfig, LinkConfig)],
        seed: u64,
        realtime: bool,
        buffers: ReadBuffers,
    ) -> io::Result<Emulator<'p>> {
        let fabric = Fabric::new(bottleneck, &ports, seed);
        let fds = ports.iter().map(|p| p.tun.as_raw_fd()).collect();
        let tuns = ports.iter().map(|p| p.tun.try_clone()).collect::<io::Result<_>>()?;
        let start = Instant::now();
        let mono0 = gridperf_sys::monotonic_ns().saturating_sub(start.elapsed().as_nanos() as u64);
        let burst_window = 2 * bottleneck.iter().map(|(a, b)| a.delay_ns + b.delay_ns).max().unwrap_or(0) + 10_000_000;
        let mut probe = gridperf_sys::SchedProbe::for_this_thread();
        let probed = probe.sample();
        let tun_base = ports.iter_mut().map(|p| p.net_dev.as_mut().and_then(tun_dropped).unwrap_or((0, 0))).collect();
        let left_unread = vec![None; ports.len()];
        let n_ports = ports.len();
        let mut emu = Emulator {
            pauses,
            ports,
            fds,
            tuns,
            fabric,
            seed,
            start,
            mono0,
            health: Health { lag_hist: vec![0; LAG_BUCKETS], realtime: Some(realtime), ..Health::default() },
            buf: vec![0u8; READ_BUF],
            spare_cap: buffers.bufs.len(),
            spare: buffers.bufs,
            pace: Pace::default(),
            backlog: false,
            last_packet: 0,
            paused: (0, 0),
            burst_window,
            probe,
            probed,
            probed_at: 0,
            continued: gridperf_sys::continued(),
            tun_base,
            spun_from: None,
            realtime,
            room: Room::default(),
            woke_at: 0,
            span_short: (0, 0),
            left_unread,
            vm_reported: File::open(VM_REPORTED_KIB).ok(),
            queue_probes: vec![QueueProbe::default(); n_ports],
            turn_writes: (0, 0),
            writer: None,
        };
        emu.health.vm_reporting_block = vm_reporting_block();
        emu.health.vm_reported_kib = emu.vm_reported.as_mut().and_then(vm_reported_kib);
        emu.woke_at = emu.now_ns();
        Ok(emu)
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// One turn: wait, judge a hold-up, read what arrived, deliver what
    /// fell due. False when a hold-up came while reading: what fell due
    /// meanwhile is written next turn, once the hold-up is judged.
    fn turn(&mut self) -> io::Result<bool> {
        let w = self.wait()?;
        let held_woke = self.judge_hold_up(&w);
        self.turn_writes = (0, 0);
        self.backlog = false;
        // what the hosts sent during a tick arrived, as far as the emulator
        // can know, uniformly over it: it takes the middle. A packet is then
        // written at the first tick after it is due, so under load every
        // packet spends on average half a tick (TICK_NS / 2) more in the
        // lab than its settings say, at any delay, and at most a tick.
        let base = if w.ticking { w.began + (w.woke - w.began) / 2 } else { w.woke };
        let mut read = 0u64;
        for i in 0..self.ports.len() {
            if w.ready[i] {
                read += self.read_port(i, base, w.woke, held_woke)?;
            }
        }
        let now = self.now_ns();
        // held up while reading (it takes tens of us): what fell due
        // meanwhile is written next turn, once the hold-up is judged (its
        // cause, a whole-lab pause's window), not counted as lag now (CI: a
        // 30 ms `lab pause` whose late packets all counted as the emulator's)
        if now.saturating_sub(w.woke) > LAG_LIMIT_NS {
            return Ok(false);
        }
        let moved = read + self.deliver_due(now);
        self.probe_queues(now);
        self.pace.account(w.began, w.woke, w.nap + w.timeout, moved, read, self.probed.idle_ns);
        if !w.ticking && w.nap + w.timeout == 0 && moved == 0 && w.wake.is_some_and(|d| d > now) {
            self.spun_from = Some(w.began);
        }
        Ok(true)
    }

    /// Sleeps or ticks until packets arrive or one falls due.
    fn wait(&mut self) -> io::Result<Woken> {
        let now = self.now_ns();
        if let Some(from) = self.spun_from.take() {
            self.pace.spun += now.saturating_sub(from);
        }
        let wake = self.fabric.links.iter().filter_map(|l| l.next_wake()).min();
        // sleep until shortly before the next packet is due (at most 100 ms,
        // to see the stop flag), then spin: waking an idle virtual CPU takes
        // 50-150 us here, more than the delay error the lab may make
        // while traffic flows, never sleep more than 5 ms: a stall (the
        // emulator not running) longer than that always shows as a late wake
        let cap = if now.saturating_sub(self.last_packet) < 1_000_000_000 { 5_000_000 } else { 100_000_000 };
        let until_due = wake.map_or(cap, |w| w.saturating_sub(now)).min(cap);
        let ticking = self.pace.ticking;
        let (mut nap, mut timeout) = if ticking {
            // under load: a tick's nap without watching the devices, then
            // whatever arrived or fell due meanwhile in one go; no nap while
            // a device still holds more than the last batch took
            (if self.backlog { 0 } else { TICK_NS }, 0)
        } else {
            // ...then spin, but only while the emulator has CPU to spare: a
            // SCHED_FIFO thread busy more than 95% of a second is stopped for
            // the rest of it by the kernel's RT throttling (a 50 ms stall)
            (0, until_due.saturating_sub(if self.pace.may_spin { SPIN_NS } else { 0 }))
        };
        // flat out as a real-time thread: a tick's nap now and then, so that
        // the kernel never takes its CPU back for 50 ms at once (ROOM_SHARE)
        // (a wait asked for is no nap: the devices may hold packets already)
        if nap == 0 && self.room.nap_owed(self.realtime, now) {
            nap = TICK_NS;
            timeout = timeout.saturating_sub(TICK_NS);
        }
        if nap > 0 {
            std::thread::sleep(Duration::from_nanos(nap));
        }
        let ready = gridperf_sys::ppoll_readable(&self.fds, Some(timeout))?;
        Ok(Woken { began: now, woke: self.now_ns(), nap, timeout, ready, wake, ticking })
    }

    /// Counts the turn's waking as a hold-up when it came later than asked
    /// while packets waited, and lays a long one at the door of what took
    /// the time. Returns when the emulator woke from a hold-up, if it did.
    fn judge_hold_up(&mut self, w: &Woken) -> Option<u64> {
        let now_after = w.woke;
        let worked = w.began.saturating_sub(self.woke_at);
        self.woke_at = now_after;
        // woken later than asked: the emulator was not running (descheduled,
        // stopped), and whatever the hosts sent meanwhile waited unseen. A
        // stop or descheduling while it worked shows only in how long the
        // work took: a turn's work takes tens of us, one that took more
        // than LAG_LIMIT_NS was held up, all of it (CI: a run with a 250
        // ms `lab pause` in it was said valid, with no pause of 200 ms
        // seen: the stop came while the emulator worked)
        let held_in_work = if worked > LAG_LIMIT_NS { worked } else { 0 };
        let overslept = now_after.saturating_sub(w.began + w.nap + w.timeout) + held_in_work;
        let health = &mut self.health;
        if overslept > LAG_THRESHOLD_NS {
            health.stalls += 1;
            health.max_lag_ns = health.max_lag_ns.max(overslept);
        }
        // a hold-up matters when packets waited through it: a host's unseen
        // in a TUN queue, or the lab's own falling due meanwhile
        let waited = w.ready.iter().any(|&r| r) || w.wake.is_some_and(|d| d < now_after);
        // a link's idle after a hold-up while packets waited unread counts
        // from the waking, not from before it (counted as the hold-up's)
        let mut held_woke = None;
        if overslept > LAG_THRESHOLD_NS && waited {
            // what it took from each link: the link's idle time through it
            for l in self.fabric.links.iter_mut() {
                l.idle_through(now_after - overslept, now_after);
            }
            held_woke = Some(now_after);
            health.held_up_ns += overslept;
            health.late_from(self.mono0 + now_after - overslept, self.mono0 + now_after);
            if overslept <= LAG_LIMIT_NS {
                self.span_short = (self.span_short.0 + 1, self.span_short.1 + overslept);
            }
        }
        let long = overslept > LAG_LIMIT_NS && waited;
        if !long && now_after.saturating_sub(self.probed_at) < PROBE_EVERY_NS {
            return held_woke;
        }
        let now_probe = self.probe.sample();
        if self.span_short.0 > 0 {
            health.short_held.add_span(self.span_short.0, self.span_short.1, &self.probed, &now_probe);
            self.span_short = (0, 0);
        }
        if long {
            health.long_stalls += 1;
            let mono = gridperf_sys::monotonic_ns();
            let injected = self
                .pauses
                .and_then(|p| std::fs::read_to_string(p).ok())
                .is_some_and(|text| paused_by_lab(&text, mono.saturating_sub(overslept), mono));
            let cause = if injected {
                Cause::LabPaused
            } else {
                // its own sleep ran late, and no stop by a signal ended it
                let stopped = gridperf_sys::continued() != self.continued;
                let span = now_after.saturating_sub(self.probed_at);
                let cause = held_by(
                    &self.probed,
                    &now_probe,
                    overslept,
                    span,
                    self.probe.tick_ns(),
                    held_in_work == 0 && !stopped,
                );
                by_writes(cause, held_in_work, self.turn_writes.0)
            };
            let h = &mut health.held_by;
            match cause {
                Cause::MachinePaused => h.machine_paused.add(overslept),
                Cause::MachineIdle => h.machine_idle.add(overslept),
                Cause::CpuStolen => h.cpu_stolen.add(overslept),
                Cause::OtherTasks => h.other_tasks.add(overslept),
                Cause::Working => h.working.add(overslept),
                Cause::Writing => {
                    h.writing.add(overslept);
                    h.writing_write_ns += self.turn_writes.0;
                    h.writing_bytes += self.turn_writes.1;
                }
                Cause::NotRunning => h.not_running.add(overslept),
                Cause::LabPaused => h.lab_paused.add(overslept),
            }
            if cause.whole_lab() {
                self.paused = (now_after - overslept, now_after);
                health.pause_window_ns += self.burst_window;
                if overslept >= PAUSE_RTO_NS {
                    health.rto_pauses += 1;
                }
            }
        }
        self.probed = now_probe;
        self.probed_at = now_after;
        self.continued = gridperf_sys::continued();
        held_woke
    }

    /// Reads a bounded batch from port `i`'s device (so that one busy
    /// sender cannot starve the schedule) and puts each packet on its
    /// first link. Returns how many wire segments it read.
    fn read_port(&mut self, i: usize, base: u64, woke: u64, held_woke: Option<u64>) -> io::Result<u64> {
        // the packet first read here waited unread since then, if the last
        // batch left it
        let left = self.left_unread[i].take();
        let mut waiting_since = held_woke.or(left);
        let mut moved = 0;
        for taken in 0..=BATCH {
            if taken == BATCH {
                self.backlog = true;
                self.left_unread[i] = Some(self.now_ns());
                break;
            }
            let n = match self.tuns[i].read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n <= VNET_HDR_LEN + 64 && self.queue_reply(i, n) {
                continue;
            }
            self.last_packet = woke;
            self.queue_probes[i].last_read_ns = Some(woke);
            // A packet arrived before it was read, no earlier than the
            // tick's stamp allows: the stamp is at most half a tick before
            // the read. What the emulator reads after a stall (descheduled
            // mid-batch, or a nap the kernel stretched) may have been sent
            // just before: the tick's stamp would put it long before, and
            // deliver it early (a 10 ms path's RTT measured 9.54 ms
            // rootless on a busy machine). What waited unseen through the
            // stall is late instead, as counted.
            let arrived = base.max(self.now_ns().saturating_sub(TICK_NS / 2));
            moved += self.admit(i, n, arrived, waiting_since.take());
        }
        Ok(moved)
    }

    /// Routes the packet of `n` bytes in the buffer, read from port `i`:
    /// onto its first link, segment by segment, or straight across to a
    /// host on the same side. Returns how many wire segments it has.
    fn admit(&mut self, i: usize, n: usize, arrived: u64, waited_from: Option<u64>) -> u64 {
        let health = &mut self.health;
        if n <= VNET_HDR_LEN {
            health.unroutable += 1;
            return 0;
        }
        let pkt = &self.buf[VNET_HDR_LEN..n];
        let Some(dst) = dest_v4(pkt).and_then(|d| self.ports.iter().position(|p| p.addr == d)) else {
            health.unroutable += 1;
            return 0;
        };
        if self.ports[dst].side == self.ports[i].side {
            health.same_side += 1;
            if !matches!(self.tuns[dst].write(&self.buf[..n]), Ok(w) if w == n) {
                health.undecided_drops += 1;
            }
            return 0;
        }
        // the path this connection hashes onto, then its direction
        let dir =
            2 * flow_path(pkt, self.fabric.n_paths, self.seed) + if self.ports[i].side == Side::A { 0 } else { 1 };
        let hdr = VnetHdr::parse(&self.buf[..n]).unwrap_or_default();
        let lens = gso::segments(&hdr, pkt);
        if lens.len() > 1 {
            health.super_packets += 1;
        }
        let path = self.fabric.path(i, dir, dst);
        let first = path[0];
        let links = &mut self.fabric.links;
        // the first link idle while this packet waited unread: the
        // emulator's reading, not the link, set the pace meanwhile
        if let Some(from) = waited_from {
            links[first].starved(from, arrived);
        }
        let segments = lens.len() as u64;
        let p = Rc::new(RefCell::new(InFlight {
            buf: take_buf(&mut self.buf, &mut self.spare, n),
            dst,
            path,
            survived: vec![false; lens.len()],
            lens: lens.clone(),
            pending: 0,
        }));
        // loss and queueing are decided per wire segment
        for (k, len) in lens.into_iter().enumerate() {
            match links[first].arrive(arrived, len as u64, (p.clone(), k, 0)) {
                Verdict::Accepted => p.borrow_mut().pending += 1,
                Verdict::QueueFull if self.paused.1 > 0 && arrived < self.paused.1 + self.burst_window => {
                    health.pause_drops += 1
                }
                _ => {}
            }
        }
        segments
    }

    /// Writes the next probe to each host whose TUN queue carried packets
    /// in the last second and has none awaited ([`QueueProbe`]).
    fn probe_queues(&mut self, now: u64) {
        for (i, q) in self.queue_probes.iter_mut().enumerate() {
            let active = q.last_read_ns.is_some_and(|t| now.saturating_sub(t) < 1_000_000_000);
            if !active || now < q.next_ns {
                continue;
            }
            if q.awaited.is_some_and(|t| now.saturating_sub(t) < QUEUE_PROBE_LOST_NS) {
                continue;
            }
            q.seq = q.seq.wrapping_add(1);
            // every link this host's packets may enter first, and until
            // when the least busy of them sends what it holds
            let first = || self.fabric.first_links(i, self.ports[i].side);
            let covered_until = first().map(|l| l.busy_until()).min();
            let busy_since = first().map(|l| l.busy_since()).max();
            let sent = match &self.ports[i].marker {
                // the marker is in the queue by the time the send returns
                Some(m) => {
                    let mark = queue_probe::marker(q.seq);
                    matches!(m.send(&mark), Ok(n) if n == mark.len())
                }
                // the reply is queued by the time the write returns
                // (received in the write), or once the host's CPU has
                // received it (steered)
                None => {
                    let req = queue_probe::echo_request(self.ports[i].addr, q.seq);
                    matches!(self.tuns[i].write(&req), Ok(w) if w == req.len())
                }
            };
            if sent {
                self.health.queue_waits.sent += 1;
                q.awaited = Some(self.start.elapsed().as_nanos() as u64);
                q.covered_until = covered_until.unwrap_or(0);
                q.busy_since = busy_since.unwrap_or(u64::MAX);
            }
            q.next_ns = now + QUEUE_PROBE_EVERY_NS;
        }
    }

    /// Whether the `n` bytes read from port `i` are a probe of its host's
    /// queue (a marker, or an echo's reply), counting the awaited one's
    /// wait, unless a whole-lab pause fell within it (the host was stopped
    /// too).
    fn queue_reply(&mut self, i: usize, n: usize) -> bool {
        let ip = &self.buf[VNET_HDR_LEN..n];
        let Some(seq) = queue_probe::marker_seq(ip).or_else(|| queue_probe::reply_seq(ip)) else {
            return false;
        };
        let now = self.now_ns();
        let q = &mut self.queue_probes[i];
        if let Some(sent) = q.awaited.filter(|_| seq == q.seq) {
            q.awaited = None;
            let paused = self.paused.1 > sent && self.paused.0 < now;
            let wait = now.saturating_sub(sent);
            // the links held enough at the send to stay busy past the
            // read, and had been busy since before what waited ahead of the
            // probe was sent (it waited about as long: the queue is read
            // in order)
            let covered = q.covered_until >= now && q.busy_since <= sent.saturating_sub(wait);
            // what a host sent from the probe on is read after it, so
            // what it sent until 1 ms before the probe was read waited
            // over 1 ms: a round trip through it was late, unless the
            // links' queues covered the wait
            if !paused && self.health.queue_waits.add(wait, covered) {
                self.health.late_from(self.mono0 + sent, self.mono0 + now - LAG_THRESHOLD_NS);
            }
        }
        true
    }

    /// Moves every segment due by `now` on to its next link, in time order
    /// across all links (so that a link fed by several others sees its
    /// arrivals in order), and writes each packet whose last segment came
    /// out. Returns how many segments it moved.
    fn deliver_due(&mut self, now: u64) -> u64 {
        self.take_written();
        let (mut moved, mut delivered) = (0, 0);
        let links = &mut self.fabric.links;
        let health = &mut self.health;
        loop {
            let next = links.iter_mut().enumerate().filter_map(|(i, l)| l.peek_due(now).map(|t| (t, i))).min();
            let Some((_, li)) = next else { break };
            let Some((due, (p, k, hop))) = links[li].poll(now) else { break };
            moved += 1;
            let next_hop = {
                let q = p.borrow();
                q.path.get(hop + 1).copied().map(|l| (l, q.lens[k]))
            };
            match next_hop {
                Some((nl, len)) => {
                    // on to the next link, arriving when it left this one
                    let v = links[nl].arrive(due, len as u64, (p.clone(), k, hop + 1));
                    if v == Verdict::QueueFull && self.paused.1 > 0 && due < self.paused.1 + self.burst_window {
                        health.pause_drops += 1;
                    }
                    if v != Verdict::Accepted {
                        p.borrow_mut().pending -= 1;
                    }
                }
                None => {
                    let mut q = p.borrow_mut();
                    q.survived[k] = true;
                    q.pending -= 1;
                }
            }
            let q = p.borrow();
            if q.pending > 0 || !q.survived.iter().any(|&s| s) {
                continue;
            }
            delivered += 1;
            if let Some(w) = self.writer.as_mut().filter(|w| w.takes(delivered - 1)) {
                // its lag is counted when the writer says it was written
                drop(q);
                let mut q = p.borrow_mut();
                let survived = q.survived.clone();
                w.jobs.push(Job { dst: q.dst, buf: std::mem::take(&mut q.buf), survived, due });
                if w.jobs.len() >= WRITER_BATCH {
                    w.flush();
                }
                continue;
            }
            count_lag(health, due, now, self.mono0, self.paused);
            let wrote = Instant::now();
            deliver(&mut self.tuns[q.dst], &q.buf, &q.survived, health);
            self.turn_writes.0 += wrote.elapsed().as_nanos() as u64;
            self.turn_writes.1 += q.buf.len() as u64;
            drop(q);
            // its buffer, if it was a read buffer, serves a read again
            if self.spare.len() < self.spare_cap {
                self.spare.extend(read_buf_again(std::mem::take(&mut p.borrow_mut().buf)));
            }
            // a long delivery (hundreds of super-packets after a hold-up,
            // each received by a host's TCP in this thread's writes) rests
            // on the way too: turns of 5 ms and more at 10 Gbit/s took the
            // emulator to 99% of its CPU, napping between turns
            if moved % 16 == 0 && self.room.nap_owed(self.realtime, self.start.elapsed().as_nanos() as u64) {
                std::thread::sleep(Duration::from_nanos(TICK_NS));
            }
        }
        if let Some(w) = &mut self.writer {
            w.flush();
        }
        moved
    }

    /// What the writer wrote since last asked: its lag counted, its buffers
    /// kept for the reads to come; while it has more than
    /// [`WRITER_MOST_BYTES`] left to write, waits until it has not.
    fn take_written(&mut self) {
        let Some(w) = &mut self.writer else { return };
        loop {
            let done = match w.back.try_recv() {
                Ok(done) => done,
                // past its bound: waits for it (the emulator is then late,
                // and says so), a millisecond at a time
                Err(std::sync::mpsc::TryRecvError::Empty) if w.outstanding_bytes > WRITER_MOST_BYTES => {
                    match w.back.recv_timeout(Duration::from_millis(1)) {
                        Ok(done) => done,
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                Err(_) => break,
            };
            w.outstanding_bytes = w.outstanding_bytes.saturating_sub(done.bytes);
            let health = &mut self.health;
            health.undecided_drops += done.undecided_drops;
            health.split_packets += done.split_packets;
            for (due, at) in done.at {
                count_lag(health, due, at, self.mono0, self.paused);
            }
            for b in done.bufs {
                if self.spare.len() < self.spare_cap {
                    self.spare.push(b);
                }
            }
        }
    }

    /// The figures a report carries, brought up to date: the TUN drops
    /// since the start, the links' counters, the uptime and the clock.
    fn take_stock(&mut self) {
        self.take_written();
        let health = &mut self.health;
        let (mut tx, mut rx) = (0, 0);
        for (p, base) in self.ports.iter_mut().zip(&self.tun_base) {
            let now = p.net_dev.as_mut().and_then(tun_dropped).unwrap_or(*base);
            tx += now.0.saturating_sub(base.0);
            rx += now.1.saturating_sub(base.1);
        }
        (health.tun_drops, health.host_rx_drops) = (tx, rx);
        self.fabric.snapshot(&self.ports, health);
        health.vm_reported_kib = self.vm_reported.as_mut().and_then(vm_reported_kib);
        health.uptime_s = self.start.elapsed().as_secs_f64();
        health.mono_ns = gridperf_sys::monotonic_ns();
    }
}

/// Wraps a TUN descriptor for reading and writing.
pub fn tun_file(fd: OwnedFd) -> File {
    File::from(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridperf_core::model::LabCause;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_writer_writes_each_batch_in_order_and_says_when_it_did() {
        let dir = std::env::temp_dir().join(format!("gridperf-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = |i: usize| dir.join(format!("port{i}"));
        let mut files: Vec<File> = (0..2).map(|i| File::create(path(i)).expect("file")).collect();
        // a port whose writes fail (read only): its packet is a drop the model did not make
        std::fs::write(path(2), b"").expect("file");
        files.push(File::open(path(2)).expect("file"));
        let start = Instant::now();
        let mut w = Writer::start(&files, &crate::host::cpus(), start).expect("the writer");
        let due = start.elapsed().as_nanos() as u64;
        // a read buffer (a super-packet's: served again at its full size) and a small packet's
        let mut big = vec![7u8; READ_BUF];
        big.truncate(3000);
        let job = |dst, buf: &[u8], due| Job { dst, buf: buf.to_vec(), survived: vec![true], due };
        w.jobs.push(Job { dst: 0, buf: big, survived: vec![true, true], due });
        w.jobs.push(job(1, b"ack", due + 1));
        w.flush();
        w.jobs.push(job(0, b"second", due + 2));
        w.jobs.push(job(2, b"lost", due + 3));
        w.finish();
        let got: Vec<Written> = w.back.try_iter().collect();
        assert_eq!(got.len(), 2, "a batch a flush");
        let at: Vec<(u64, u64)> = got.iter().flat_map(|g| g.at.clone()).collect();
        assert_eq!(at.iter().map(|a| a.0).collect::<Vec<_>>(), [due, due + 1, due + 2, due + 3]);
        // each written after it was handed over, in order
        assert!(at.iter().all(|&(d, t)| t >= d) && at.windows(2).all(|p| p[0].1 <= p[1].1), "{at:?}");
        let bufs: Vec<usize> = got.iter().flat_map(|g| g.bufs.iter().map(|b| b.len())).collect();
        assert_eq!(bufs, [READ_BUF]);
        assert_eq!(got.iter().map(|g| g.undecided_drops).sum::<u64>(), 1);
        assert_eq!(got.iter().map(|g| g.bytes).sum::<u64>(), 3000 + 3 + 6 + 4);
        assert_eq!(w.outstanding_bytes, 3013, "as handed over, until taken back");
        assert_eq!(std::fs::read(path(0)).expect("port 0"), [vec![7u8; 3000], b"second".to_vec()].concat());
        assert_eq!(std::fs::read(path(1)).expect("port 1"), b"ack");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_packets_lag_is_counted_from_when_it_fell_due_to_when_it_was_written() {
        let mut h = Health { lag_hist: vec![0; LAG_BUCKETS], ..Health::default() };
        let paused = (50 * MS, 60 * MS);
        count_lag(&mut h, 10 * MS, 10 * MS + 200_000, 0, paused);
        assert_eq!((h.late_packets, h.max_lag_ns), (0, 200_000));
        // late, very late, late within a pause; written before due is no lag
        count_lag(&mut h, 20 * MS, 22 * MS, 0, paused);
        count_lag(&mut h, 30 * MS, 42 * MS, 0, paused);
        count_lag(&mut h, 55 * MS, 57 * MS, 0, paused);
        count_lag(&mut h, 70 * MS, 69 * MS, 0, paused);
        assert_eq!((h.late_packets, h.paused_late_packets, h.very_late_packets), (2, 1, 1));
        assert_eq!(h.max_lag_ns, 12 * MS);
        assert_eq!(h.lag_hist.iter().sum::<u64>(), 5);
        assert_eq!(h.lag_hist[0], 1, "the one written early: {:?}", h.lag_hist);
        assert_eq!(h.late_windows, [[20 * MS, 22 * MS], [30 * MS, 42 * MS], [55 * MS, 57 * MS]]);
    }

    /// Feeds `Pace` one 100 ms window of wake-ups every `every` ns, each
    /// after sleeping `slept` of it and moving `events`, all of them read.
    fn window(pace: &mut Pace, start: u64, every: u64, slept: u64, events: u64) -> u64 {
        window_read(pace, start, every, slept, events, events)
    }

    /// The same, `read` of the events read (the rest written).
    fn window_read(pace: &mut Pace, start: u64, every: u64, slept: u64, events: u64, read: u64) -> u64 {
        window_idle_read(pace, start, every, slept, events, read, 1.0)
    }

    /// The same, the machine's CPUs idle `idle_cpus` of the time together.
    fn window_idle(pace: &mut Pace, start: u64, every: u64, slept: u64, events: u64, idle_cpus: f64) -> u64 {
        window_idle_read(pace, start, every, slept, events, events, idle_cpus)
    }

    fn window_idle_read(
        pace: &mut Pace,
        start: u64,
        every: u64,
        slept: u64,
        events: u64,
        read: u64,
        idle_cpus: f64,
    ) -> u64 {
        let mut t = start;
        while t < start + Pace::WINDOW_NS {
            pace.account(t, t + every, slept, events, read, ((t + every) as f64 * idle_cpus) as u64);
            t += every;
        }
        t
    }

    #[test]
    fn ticks_only_while_events_come_faster_than_one_per_tick() {
        let mut pace = Pace::default();
        // 1 Gbit/s as TCP sends it: a 64 KB super-packet (45 segments) read
        // every 540 us, and 45 segments due
        let t = window_read(&mut pace, 0, 540_000, 270_000, 90, 45);
        assert!(pace.ticking, "166 000 events a second must tick");
        // 100 Mbit/s: 17 000 events a second, each wake-up worth it
        let t = window(&mut pace, t, 120_000, 100_000, 2);
        assert!(!pace.ticking, "17 000 events a second need not tick");
        // exactly at the threshold it does not tick; above it, it does
        let t = window(&mut pace, t, 3 * TICK_NS, 3 * TICK_NS / 2, 3);
        assert!(!pace.ticking);
        window(&mut pace, t, 3 * TICK_NS, 3 * TICK_NS / 2, 6);
        assert!(pace.ticking);
    }

    #[test]
    fn spins_only_while_it_slept_half_the_time() {
        let mut pace = Pace::default();
        let t = window(&mut pace, 0, MS, MS * 6 / 10, 1);
        assert!(pace.may_spin);
        let t = window(&mut pace, t, MS, MS * 4 / 10, 1);
        assert!(!pace.may_spin, "busy 60% of the window: no spinning, or RT throttling stalls it");
        // asleep most of the time, but the machine had under half a CPU idle
        let t = window_idle(&mut pace, t, MS, MS * 6 / 10, 1, 0.3);
        assert!(!pace.may_spin, "a busy machine: spinning would take the CPU from the lab's hosts");
        window_idle(&mut pace, t, MS, MS * 6 / 10, 1, 0.6);
        assert!(pace.may_spin);
    }

    #[test]
    fn many_events_tick_only_once_their_wake_ups_cost_a_quarter_of_the_time() {
        let mut pace = Pace::default();
        // a ping-pong: 28 000 events a second (one per 36 us), asleep 90% of the time
        let t = window(&mut pace, 0, 36_000, 32_400, 1);
        assert!(!pace.ticking, "cheap wake-ups: each packet its own, for the round trip's sake");
        // a flow as many events, read three at a time, working 40% of the time: ticks
        let t = window(&mut pace, t, 108_000, 64_800, 3);
        assert!(pace.ticking);
        // ticking, its work falls: it keeps ticking while the events stay many
        let t = window(&mut pace, t, 108_000, 97_200, 3);
        assert!(pace.ticking, "ticks must not end only because they saved the work they were for");
        window(&mut pace, t, 120_000, 100_000, 2);
        assert!(!pace.ticking);
    }

    #[test]
    fn a_ping_pong_never_ticks_however_hard_it_works() {
        let mut pace = Pace::default();
        // across no delay: a message read and one written every 30 us (66 000
        // events a second), working 40% of the time; each read finds one
        let t = window_read(&mut pace, 0, 30_000, 18_000, 2, 1);
        assert!(!pace.ticking, "a tick would only add its wait to each hop");
        // ticking when the ping-pong began (a flow before it): it stops
        pace.ticking = true;
        window_read(&mut pace, t, 30_000, 18_000, 2, 1);
        assert!(!pace.ticking, "reads of one segment: ticks batch nothing");
    }

    #[test]
    fn spinning_is_time_to_spare_but_bounded() {
        // a ping-pong across lan-gige: asleep 39%, spinning 56%, working 5%
        let mut pace = Pace::default();
        let t = window(&mut pace, 0, MS, MS / 2, 1);
        assert!(pace.may_spin);
        let spin_window = |pace: &mut Pace, t: u64, slept: u64, spun: u64| {
            pace.spun = spun * (Pace::WINDOW_NS / MS);
            window(pace, t, MS, slept, 1)
        };
        let t = spin_window(&mut pace, t, MS * 39 / 100, MS * 56 / 100);
        assert!(pace.may_spin, "a window that spun may spin again, or alternate windows differ by a wake-up");
        // spinning and working 90% of the window: RT throttling is near
        let t = spin_window(&mut pace, t, MS / 10, MS * 85 / 100);
        assert!(!pace.may_spin, "on the CPU 90% of the window");
        // working 60% (spinning 10%): as busy as before, no spinning
        spin_window(&mut pace, t, MS * 3 / 10, MS / 10);
        assert!(!pace.may_spin, "working 60% of the window");
    }

    #[test]
    fn a_real_time_emulator_flat_out_naps_its_share_of_every_span() {
        // on the CPU all the time but for the naps it owes, checked as the
        // emulator checks: a turn every 5 us, the CPU time read when due
        let mut room = Room::default();
        let (mut now, mut cpu, mut naps) = (0u64, 0u64, 0u32);
        while now < 3 * ROOM_SPAN_NS {
            if room.due(now) && room.owed(now, cpu) {
                naps += 1;
                now += TICK_NS;
            }
            now += 5_000;
            cpu += 5_000;
        }
        let share = 1.0 - cpu as f64 / now as f64;
        assert!((ROOM_SHARE * 0.9..=ROOM_SHARE * 1.6).contains(&share), "off the CPU {share:.3} of the time");
        // in short naps, not one long one
        assert!(naps >= 3 * 15, "{naps} naps in three spans");
        // time off the CPU already (asleep, or waiting on a device) is rest:
        // half the span so far off, no nap owed
        let mut room = Room::default();
        room.owed(ROOM_SPAN_NS, 0);
        assert!(!room.owed(ROOM_SPAN_NS + 2_000_000, 1_000_000), "off the CPU half the span so far");
        assert!(room.owed(ROOM_SPAN_NS + 2_000_000, 1_900_000), "off the CPU 5% of the span so far");
        // a new span begins owing nothing, whatever the last one owed
        assert!(!room.owed(ROOM_SPAN_NS * 3, 20_000_000), "a fresh span");
        // and the CPU time is read once a check is due, not every turn
        assert!(!room.due(ROOM_SPAN_NS * 3 + ROOM_CHECK_NS - 1));
        assert!(room.due(ROOM_SPAN_NS * 3 + ROOM_CHECK_NS));
    }

    fn held(count: u64, ns: u64) -> HoldUps {
        HoldUps { count, ns }
    }

    #[test]
    fn a_runs_own_hold_up_counts_even_after_a_longer_earlier_one() {
        // before the run: a 200 ms hold-up; during its 8 s: a 150 ms one, by other tasks
        let before = Health {
            max_lag_ns: 200 * MS,
            long_stalls: 1,
            stalls: 1,
            held_up_ns: 200 * MS,
            held_by: HeldBy { not_running: held(1, 200 * MS), ..HeldBy::default() },
            uptime_s: 10.0,
            links: [Counters { idle_held_ns: 200 * MS, ..Counters::default() }, Counters::default()],
            ..Health::default()
        };
        let after = Health {
            long_stalls: 2,
            stalls: 2,
            held_up_ns: 350 * MS,
            links: [Counters { idle_held_ns: 350 * MS, ..Counters::default() }, Counters::default()],
            held_by: HeldBy { other_tasks: held(1, 150 * MS), ..before.held_by },
            uptime_s: 18.0,
            ..before.clone()
        };
        let run = after.since(&before);
        let why = run.invalid_because().expect("150 ms of 8 s is more than 1 in 100");
        assert!(why.contains("held up for 150 ms of the run's 8.0 s"), "{why}");
        assert!(why.contains("1 by other tasks holding the CPUs"), "{why}");
        assert!(!why.contains("not running"), "the earlier hold-up is not the run's: {why}");
        assert_eq!(run.invalid_cause(), Some(LabCause::OtherTasks));
        assert_eq!(before.since(&before).invalid_cause(), None);
        // and a run with no hold-up of its own stays valid, with nothing to note
        assert_eq!(before.since(&before).invalid_because(), None);
        assert_eq!(before.since(&before).held_up_note(), None);
    }

    /// The rule (issue 33): a run is judged by the time its link sat idle
    /// through the emulator's hold-ups, not by whether any packet was ever
    /// 10 ms late. 30 ms in 8 s (0.4%) stays valid, said; 100 ms in 8 s
    /// (1.25%) does not; nor does a hold-up's time that the link's queue
    /// covered count.
    #[test]
    fn a_run_is_judged_by_the_share_of_its_time_held_up() {
        // the link idle through all of it (a window-limited flow, its queue empty)
        let run = |held_ms: u64| Health {
            links: [
                Counters { delivered: 80_000, idle_held_ns: held_ms * MS, ..Counters::default() },
                Counters::default(),
            ],
            late_packets: 300,
            long_stalls: 1,
            stalls: 1,
            max_lag_ns: held_ms * MS,
            very_late_packets: 200,
            held_up_ns: held_ms * MS,
            held_by: HeldBy { machine_paused: held(1, held_ms * MS), ..HeldBy::default() },
            uptime_s: 8.0,
            ..Health::default()
        };
        assert_eq!(run(30).invalid_because(), None);
        let note = run(30).held_up_note().expect("a note");
        assert!(
            note.contains("30 ms in all of the run's 8.0 s") && note.contains("pausing the whole machine"),
            "{note}"
        );
        let why = run(100).invalid_because().expect("invalid");
        assert!(why.contains("held up for 100 ms of the run's 8.0 s") && why.contains("outside gridperf"), "{why}");
        assert_eq!(run(100).held_up_note(), None, "an invalid run has its reason, not a note");
        assert_eq!(run(100).invalid_cause(), Some(LabCause::Outside));
        assert_eq!(run(30).invalid_cause(), None);
        // the same share held up by other tasks beside the machine's pause: the user's to act on
        let both = Health {
            held_by: HeldBy { other_tasks: held(1, 60 * MS), ..run(100).held_by },
            long_stalls: 2,
            ..run(100)
        };
        assert_eq!(both.invalid_cause(), Some(LabCause::OtherTasks));
        // a 250 ms pause of the whole lab voids a run alone: beside it, other
        // tasks' hold-ups that would not have are not why
        let paused = Health {
            held_by: HeldBy { lab_paused: held(1, 250 * MS), other_tasks: held(1, 60 * MS), ..HeldBy::default() },
            long_stalls: 2,
            held_up_ns: 310 * MS,
            rto_pauses: 1,
            ..run(100)
        };
        assert_eq!(paused.invalid_cause(), Some(LabCause::Outside));
        let busier = Health {
            held_by: HeldBy { other_tasks: held(3, 90 * MS), ..paused.held_by },
            long_stalls: 4,
            ..paused.clone()
        };
        assert_eq!(busier.invalid_cause(), Some(LabCause::OtherTasks));
        // 100 ms held up with the link's queue covering all but 20 ms of
        // it: the rate lost 0.25%, valid, noted with the idle time
        let covered = Health {
            links: [Counters { idle_held_ns: 20 * MS, ..run(100).links[0].clone() }, Counters::default()],
            ..run(100)
        };
        assert_eq!(covered.invalid_because(), None);
        let note = covered.held_up_note().expect("a note");
        assert!(note.contains("100 ms in all") && note.contains("the emulated link idle for 20.0 ms of it"), "{note}");
        // the acknowledgements' direction idle through the hold-ups: not a rate's
        let acks = Health {
            links: [
                Counters { delivered_bytes: 90_000_000, ..covered.links[0].clone() },
                Counters { delivered_bytes: 2_000_000, idle_held_ns: 100 * MS, ..Counters::default() },
            ],
            ..covered.clone()
        };
        assert_eq!(acks.idle_ns(), (20 * MS, 0));
        assert_eq!(acks.invalid_because(), None);
    }

    /// The pause rule: packets that fell due while the whole lab was paused
    /// are not the emulator's lag; the pause's time is; a pause of TCP's
    /// minimum retransmission timeout or more voids the run whatever its share.
    #[test]
    fn a_whole_lab_pause_is_judged_by_its_time_not_by_the_packets_it_held() {
        let run = |late: u64, paused_late: u64, held_ms: u64, rto_pauses: u64| Health {
            links: [
                Counters { delivered: 100_000, idle_held_ns: held_ms * MS, ..Counters::default() },
                Counters::default(),
            ],
            late_packets: late,
            paused_late_packets: paused_late,
            long_stalls: 3,
            held_up_ns: held_ms * MS,
            held_by: HeldBy { lab_paused: held(3, held_ms * MS), ..HeldBy::default() },
            rto_pauses,
            uptime_s: 10.0,
            ..Health::default()
        };
        // 3 x 20 ms in 10 s held 5 000 packets (5%): the pause's, so valid
        assert_eq!(run(20, 5_000, 60, 0).invalid_because(), None);
        // the same packets late with the hosts running: the emulator's lag
        let why = run(5_020, 0, 60, 0).invalid_because().expect("5% late is the emulator's");
        assert!(why.contains("5020 of 100000 packets"), "{why}");
        // late with the lab paused around it: a pause, outside gridperf's emulator
        assert_eq!(run(5_020, 0, 60, 0).invalid_cause(), Some(LabCause::Outside));
        // late with no hold-up at all: the emulator's own
        let own = Health { long_stalls: 0, held_up_ns: 0, held_by: HeldBy::default(), ..run(5_020, 0, 0, 0) };
        assert_eq!(own.invalid_cause(), Some(LabCause::Emulator));
        // 150 ms of pauses in 10 s: the rate is off by 1.5%
        let why = run(0, 5_000, 150, 0).invalid_because().expect("1.5% of the time");
        assert!(why.contains("held up for 150 ms") && why.contains("(injected)"), "{why}");
        // one 250 ms pause in 30 s: a small share, but TCP's timers ran out
        let long = Health { uptime_s: 30.0, ..run(0, 1_000, 250, 1) };
        let why = long.invalid_because().expect("a pause past TCP's RTO");
        assert!(why.contains("200 ms or more at once"), "{why}");
        assert_eq!(long.invalid_cause(), Some(LabCause::Outside));
    }

    /// A rate counted over one second of a four-second span is judged by
    /// that second: a 36 ms pause is under 1% of the span, 3.6% of the
    /// second (the 5G calibration CI counted 4.2% short, said valid), and
    /// counts as far as it left the link idle.
    #[test]
    fn hold_ups_are_weighed_against_the_span_a_figure_was_measured_over() {
        let d = Health {
            long_stalls: 1,
            held_up_ns: 36 * MS,
            held_by: HeldBy { machine_paused: held(1, 36 * MS), ..HeldBy::default() },
            uptime_s: 4.2,
            ..Health::default()
        };
        assert_eq!(d.invalid_because(), None);
        // the queue covered it: the link went on sending, the rate lost nothing
        assert_eq!(d.held_up_beyond(1.0), None);
        // it ran dry 6 ms into the pause: idle 30 ms of the second
        let idle =
            |ns: u64| [Counters { delivered: 1_000, idle_held_ns: ns, ..Counters::default() }, Counters::default()];
        let dry = Health { links: idle(30 * MS), ..d.clone() };
        let why = dry.held_up_beyond(1.0).expect("3.0% of the second");
        assert!(
            why.contains("held up for 36 ms around the 1.00 s measured, the emulated link idle for 30.0 ms"),
            "{why}"
        );
        assert!(why.contains("by the hypervisor pausing the whole machine"), "{why}");
        assert_eq!(dry.held_up_beyond(4.0), None);
        assert_eq!(Health { links: idle(9 * MS), ..d }.held_up_beyond(1.0), None);
    }

    /// A bottleneck idle while packets for it waited unread voids a run
    /// over 1 in 100 of its time, judged per direction (and per path with
    /// `--paths`, where the sums of a direction would add parallel time),
    /// whatever the run is judged by; `since` takes it as a difference.
    #[test]
    fn a_link_starved_by_the_emulators_reading_voids_the_run() {
        let c = |ns: u64| Counters { arrived: 1_000, delivered: 1_000, starved_ns: ns, ..Counters::default() };
        let run = Health { links: [c(45 * MS), c(3 * MS)], uptime_s: 4.0, ..Health::default() };
        assert_eq!(run.idle_ns(), (0, 45 * MS));
        let why = run.invalid_because_with(Judged::ByRoundTrip).expect("45 ms of 4 s");
        assert!(why.contains("idle for 45.0 ms of 4.0 s while packets for it waited unread"), "{why}");
        assert_eq!(run.invalid_cause(), Some(gridperf_core::model::LabCause::Emulator));
        assert_eq!(Health { uptime_s: 5.0, ..run.clone() }.invalid_because(), None);
        // the overload's second alone: 45 ms of it is over the rule
        assert!(run.starved_beyond(1.0).is_some() && run.starved_beyond(4.5).is_none());
        let before = Health { links: [c(20 * MS), c(0)], ..Health::default() };
        assert_eq!(run.since(&before).idle_ns(), (0, 25 * MS));
        // two paths each idle 30 ms of 4 s: 60 ms summed, each under 1 in 100
        let paths = Health { links: [c(60 * MS), c(0)], paths: vec![[c(30 * MS), c(0)]; 2], ..run };
        assert_eq!(paths.idle_ns(), (0, 30 * MS));
        assert_eq!(paths.invalid_because(), None);
    }

    /// Packets that waited unread in the hosts' TUN queues void a run as
    /// its hold-ups do: by the time its probes waited over 1 ms, more than
    /// 1 in 100 of the run's; a difference of two readings counts only its own.
    #[test]
    fn waits_in_the_hosts_tun_queues_void_a_run_past_one_hundredth_of_its_time() {
        let mut q = QueueWaits { sent: 1_000, ..QueueWaits::default() };
        for _ in 0..988 {
            assert!(!q.add(200_000, false));
        }
        for _ in 0..12 {
            assert!(q.add(4 * MS, false), "slow and uncovered: it marks a late window");
        }
        assert_eq!((q.answered, q.slow, q.slow_ns, q.max_ns), (1_000, 12, 48 * MS, 4 * MS));
        // slow waits the links' queues covered are counted apart, and judge nothing
        let mut covered = q.clone();
        for _ in 0..100 {
            assert!(!covered.add(5 * MS, true), "a covered wait marks no late window");
        }
        assert_eq!((covered.slow, covered.slow_ns, covered.covered, covered.covered_ns), (12, 48 * MS, 100, 500 * MS));
        assert_eq!((q.quantile_us(0.5), q.quantile_us(0.99)), (Some(256), Some(4096)));
        // a difference whose earlier reading had the longer wait: its bucket's bound
        assert_eq!(
            (q.worst(), QueueWaits { max_ns: 0, ..q.clone() }.worst()),
            ("4.0 ms".into(), "under 4.1 ms".into())
        );
        let c = Counters { arrived: 1_000, delivered: 1_000, ..Counters::default() };
        let run = Health { links: [c.clone(), c], uptime_s: 4.0, queue_waits: q.clone(), ..Health::default() };
        let why = run.invalid_because().expect("48 ms of 4 s");
        assert!(
            why.contains(
                "more than 1000 us in their TUN queues before the emulator read them for 48.0 ms of the run's 4.0 s"
            ),
            "{why}"
        );
        assert!(why.contains("12 of 1000 probes of the queues, worst 4.0 ms"), "{why}");
        assert_eq!(run.invalid_cause(), Some(gridperf_core::model::LabCause::Emulator));
        // a run judged round trip by round trip leaves out what crossed them (late windows)
        assert_eq!(run.invalid_because_with(Judged::ByRoundTrip), None);
        // the same waits over 5 s: under 1 in 100
        assert_eq!(Health { uptime_s: 5.0, ..run.clone() }.invalid_because(), None);
        // half a second of covered waits over 5 s: still valid; over 4 s,
        // INVALID by the uncovered 48 ms alone, the covered ones said apart
        let cov = Health { uptime_s: 5.0, queue_waits: covered.clone(), ..run.clone() };
        assert_eq!(cov.invalid_because(), None);
        let why = Health { uptime_s: 4.0, ..cov }.invalid_because().expect("48 ms of 4 s");
        assert!(why.contains("for 48.0 ms of the run's 4.0 s"), "{why}");
        assert!(why.contains("(100 more slow answers, 500.0 ms, the links' queues covered: not counted)"), "{why}");
        // since a reading that had 4 of them: 32 ms of 4 s left
        let before = Health {
            queue_waits: QueueWaits { slow: 4, slow_ns: 16 * MS, answered: 500, ..q.clone() },
            ..Health::default()
        };
        let d = Health { uptime_s: 4.0, ..run.since(&before) };
        assert_eq!((d.queue_waits.slow, d.queue_waits.slow_ns, d.queue_waits.answered), (8, 32 * MS, 500));
        assert_eq!(d.invalid_because(), None);
    }

    /// How long a run lay within late windows: the overlaps summed, one
    /// pass over both lists.
    #[test]
    fn how_long_a_run_lay_within_late_windows_is_summed() {
        let spans = [[0, 100], [100, 200], [200, 300]];
        let windows = [[10, 20], [90, 110], [150, 151], [290, 400]];
        assert_eq!(late_within(&spans, &windows), vec![20, 11, 10]);
        assert_eq!(late_within(&spans, &[]), vec![0; 3]);
    }

    /// A round trip crosses a late window when the two overlap for any time.
    #[test]
    fn a_round_trip_that_crossed_a_late_window_is_found() {
        let spans = [[0, 10], [10, 20], [20, 30], [30, 40], [40, 50], [50, 60]];
        let windows = [[12, 14], [29, 31], [55, 100]];
        assert_eq!(crossing(&spans, &windows), vec![false, true, true, true, false, true]);
        assert_eq!(crossing(&spans, &[]), vec![false; 6]);
        assert_eq!(crossing(&[], &windows), Vec::<bool>::new());
        // round trips in flight together (several sockets), in order of
        // their starts: a long one ends past a window a short one missed
        let spans = [[0, 100], [10, 20], [25, 26], [30, 60]];
        assert_eq!(crossing(&spans, &[[21, 24], [50, 55]]), vec![true, false, false, true]);
    }

    /// Windows read in turns join into one list: the window open at the
    /// earlier reading, grown since, is joined, not repeated.
    #[test]
    fn windows_read_in_turns_are_joined_in_order() {
        let mut all = vec![[10, 20], [30, 40]];
        join_windows(&mut all, vec![[30, 45], [50, 60]]);
        assert_eq!(all, vec![[10, 20], [30, 45], [50, 60]]);
        join_windows(&mut all, vec![[70, 80]]);
        join_windows(&mut all, vec![]);
        assert_eq!(all, vec![[10, 20], [30, 45], [50, 60], [70, 80]]);
        let mut none = Vec::new();
        join_windows(&mut none, vec![[1, 2], [2, 3]]);
        assert_eq!(none, vec![[1, 3]]);
    }

    /// The late windows: joined where they touch, the latest
    /// LATE_WINDOWS_KEPT kept, and a run's windows told apart from those
    /// before it, or not told at all once some fell out of the list.
    #[test]
    fn late_windows_are_joined_kept_and_told_since_a_reading() {
        let mut h = Health { mono_ns: 1_000, ..Health::default() };
        let before = h.clone();
        h.late_from(2_000, 3_000);
        // a packet due within the hold-up, written after it: the same window
        h.late_from(2_500, 3_400);
        h.late_from(5_000, 6_000);
        assert_eq!(h.late_windows, vec![[2_000, 3_400], [5_000, 6_000]]);
        assert_eq!(h.late_windows_begun, 2);
        h.mono_ns = 7_000;
        assert_eq!(late_windows_since(&before, &h), Some(vec![[2_000, 3_400], [5_000, 6_000]]));
        // from a later reading: the window open then (it grew since) and the new one
        let mid = Health { mono_ns: 3_200, late_windows: vec![[2_000, 3_000]], late_windows_begun: 1, ..h.clone() };
        assert_eq!(late_windows_since(&mid, &h), Some(vec![[2_000, 3_400], [5_000, 6_000]]));
        let later = Health { mono_ns: 4_000, ..h.clone() };
        assert_eq!(late_windows_since(&later, &h), Some(vec![[5_000, 6_000]]));
        // more windows than are kept: the run cannot be judged window by window
        let mut full = h.clone();
        for k in 0..LATE_WINDOWS_KEPT as u64 {
            full.late_from(10_000 + 10 * k, 10_005 + 10 * k);
        }
        assert_eq!(full.late_windows.len(), LATE_WINDOWS_KEPT);
        assert_eq!(full.late_windows[0], [10_000, 10_005]);
        full.mono_ns = 1_000_000;
        assert_eq!(late_windows_since(&h, &full), None);
        assert_eq!(late_windows_since(&before, &full), None);
        // an earlier reading than `before` is no run
        assert_eq!(late_windows_since(&h, &before), None);
    }

    /// A run judged round trip by round trip: its late packets and hold-ups
    /// no longer void it; a drop the model did not make still does.
    #[test]
    fn a_run_judged_by_round_trip_is_void_only_beside_the_lateness() {
        let late = Health {
            links: [Counters { delivered: 283, ..Counters::default() }, Counters::default()],
            late_packets: 10,
            held_up_ns: 42 * MS,
            uptime_s: 3.3,
            ..Health::default()
        };
        assert!(late.invalid_because().is_some_and(|w| w.contains("10 of 283 packets")));
        assert_eq!(late.invalid_because_with(Judged::ByRoundTrip), None);
        assert_eq!(late.invalid_cause_with(Judged::ByRoundTrip), None);
        let dropped = Health { undecided_drops: 3, ..late };
        let why = dropped.invalid_because_with(Judged::ByRoundTrip).expect("a drop the model did not make");
        assert!(why.contains("3 packets were dropped") && !why.contains("283"), "{why}");
        assert_eq!(dropped.invalid_cause_with(Judged::ByRoundTrip), Some(LabCause::Emulator));
    }

    /// The burst after a pause: judged against the queue's own drops.
    #[test]
    fn drops_after_a_pause_count_only_beyond_what_the_queue_drops_anyway() {
        let run = |pause_drops: u64, queue_full: u64| Health {
            links: [Counters { delivered: 500_000, queue_full, ..Counters::default() }, Counters::default()],
            pause_drops,
            pause_window_ns: 150 * MS,
            uptime_s: 6.5,
            ..Health::default()
        };
        // CUBIC across baltic after three 20 ms pauses: 305 there, 10 elsewhere
        let why = run(305, 315).invalid_because().expect("a burst");
        assert!(why.contains("305 packets were dropped at a full queue in the round trip after a pause"), "{why}");
        // a handful: chance
        assert_eq!(run(6, 40).invalid_because(), None);
        // a queue that drops as often anyway (a loss-based sender filling it)
        assert_eq!(run(40, 1_700).invalid_because(), None);
    }

    #[test]
    fn a_recorded_pause_explains_a_hold_up_it_covers_half_of() {
        let pauses = "1000 2000\n5000 5100\ngarbage\n";
        assert!(paused_by_lab(pauses, 1100, 1900), "inside a pause");
        assert!(paused_by_lab(pauses, 900, 1900), "mostly inside");
        assert!(!paused_by_lab(pauses, 1900, 3000), "a tenth inside: another cause");
        assert!(!paused_by_lab(pauses, 3000, 4000), "between the pauses");
        assert!(!paused_by_lab("", 1100, 1900), "no pause recorded");
    }

    #[test]
    fn a_hold_up_is_laid_at_the_door_of_what_took_the_time() {
        let s = |steal: &[u64], waited: u64| gridperf_sys::SchedSample {
            ran_ns: Some(0),
            waited_ns: Some(waited),
            steal_ns: steal.to_vec(),
            idle_ns: 0,
            cpu_idle_ns: vec![0; steal.len()],
        };
        let tick = 10 * MS;
        let before = s(&[0, 0], 0);
        for asleep in [true, false] {
            // 30 ms held: 20 ms of steal on both CPUs (ticks of 10 ms)
            assert_eq!(
                held_by(&before, &s(&[20 * MS, 30 * MS], 0), 30 * MS, 40 * MS, tick, asleep),
                Cause::MachinePaused
            );
            assert_eq!(held_by(&before, &s(&[30 * MS, 0], 0), 30 * MS, 40 * MS, tick, asleep), Cause::CpuStolen);
            assert_eq!(held_by(&before, &s(&[0, 0], 25 * MS), 30 * MS, 40 * MS, tick, asleep), Cause::OtherTasks);
            assert_eq!(held_by(&before, &s(&[0, 0], 2 * MS), 30 * MS, 40 * MS, tick, asleep), Cause::NotRunning);
            // one tick of steal explains a 15 ms hold-up (steal is counted in ticks)
            assert_eq!(
                held_by(&before, &s(&[10 * MS, 10 * MS], 0), 15 * MS, 40 * MS, tick, asleep),
                Cause::MachinePaused
            );
            // without schedstats or /proc/stat: not running, the cause unknown
            let none = gridperf_sys::SchedSample::default();
            assert_eq!(held_by(&none, &none, 30 * MS, 40 * MS, tick, asleep), Cause::NotRunning);
        }
        // its own sleep 27 ms late, both CPUs idle through it (or one of
        // them taken): the machine was left halted past its timer
        let idle = |cpu_idle: &[u64], steal: &[u64]| gridperf_sys::SchedSample {
            cpu_idle_ns: cpu_idle.to_vec(),
            ..s(steal, 2 * MS)
        };
        let after = idle(&[20 * MS, 30 * MS], &[0, 0]);
        assert_eq!(held_by(&before, &after, 27 * MS, 40 * MS, tick, true), Cause::MachineIdle);
        assert!(Cause::MachineIdle.whole_lab());
        // idle counted in ticks, as steal is
        assert_eq!(
            held_by(&before, &idle(&[20 * MS, 10 * MS], &[0, 0]), 27 * MS, 40 * MS, tick, true),
            Cause::MachineIdle
        );
        // held while it worked (in the kernel, its CPU idle meanwhile): not the machine's
        assert_eq!(held_by(&before, &after, 27 * MS, 40 * MS, tick, false), Cause::NotRunning);
        // one CPU busy through it (the hosts ran): the emulator, not the machine, was held
        assert_eq!(held_by(&before, &idle(&[30 * MS, 0], &[0, 0]), 27 * MS, 40 * MS, tick, true), Cause::NotRunning);
        // a turn of work 30 ms long, the thread on the CPU for 35 ms of the
        // 40 between the readings: its own work, not a stop or a wait in the kernel
        let ran = |ns: u64| gridperf_sys::SchedSample { ran_ns: Some(ns), ..s(&[0, 0], 2 * MS) };
        assert_eq!(held_by(&before, &ran(35 * MS), 30 * MS, 40 * MS, tick, false), Cause::Working);
        assert!(!Cause::Working.whole_lab());
        // such a turn that spent half of it or more writing to the hosts'
        // devices was held by its writes; a late sleep (no turn of work) and
        // the other causes never are
        assert_eq!(by_writes(Cause::Working, 30 * MS, 15 * MS), Cause::Writing);
        assert_eq!(by_writes(Cause::Working, 30 * MS, 14 * MS), Cause::Working);
        assert_eq!(by_writes(Cause::Working, 0, 20 * MS), Cause::Working);
        assert_eq!(by_writes(Cause::CpuStolen, 30 * MS, 30 * MS), Cause::CpuStolen);
        assert!(!Cause::Writing.whole_lab());
        // and says how fast the writes of those turns went
        let h = HeldBy {
            writing: HoldUps { count: 2, ns: 25 * MS },
            writing_bytes: 12_500_000,
            writing_write_ns: 20 * MS,
            ..HeldBy::default()
        };
        let words = h.words();
        assert!(words.starts_with("2 by its writes to the hosts' devices"), "{words}");
        assert!(words.ends_with(", 25 ms (they wrote at 5.00 Gbit/s)"), "{words}");
        // on the CPU for 25 ms of 40: off it for 15 of the 30 held, not throughout
        assert_eq!(held_by(&before, &ran(25 * MS), 30 * MS, 40 * MS, tick, false), Cause::NotRunning);
        // a sleep that ran late was not work, whatever the rest of the span was
        assert_eq!(held_by(&before, &ran(35 * MS), 30 * MS, 40 * MS, tick, true), Cause::NotRunning);
    }

    /// Short hold-ups judged together: /proc/stat's steal moves in 10 ms
    /// ticks, so a 3 ms hold-up's span shows 0 or 10 ms of it, but the
    /// run's sum comes out right and lays them at the hypervisor's door.
    #[test]
    fn short_hold_ups_are_laid_at_a_door_by_their_sum() {
        let tick = 10 * MS;
        let at = |steal: u64, waited: u64| gridperf_sys::SchedSample {
            ran_ns: Some(0),
            waited_ns: Some(waited),
            // what /proc/stat shows: whole ticks of the true steal
            steal_ns: vec![steal / tick * tick, (steal + 4 * MS) / tick * tick],
            idle_ns: 0,
            cpu_idle_ns: Vec::new(),
        };
        // 200 spans of 20 ms, each with one hold-up of 3 ms
        let spans = |steal_per: u64, waited_per: u64| {
            let mut h = ShortHoldUps::default();
            for k in 0..200u64 {
                h.add_span(
                    1,
                    3 * MS,
                    &at(k * steal_per, k * waited_per),
                    &at((k + 1) * steal_per, (k + 1) * waited_per),
                );
            }
            h
        };
        let stolen = spans(3 * MS, 0);
        assert!((590 * MS..=610 * MS).contains(&stolen.steal_every_cpu_ns()), "{stolen:?}");
        assert_eq!(stolen.cause(), Some(Cause::MachinePaused));
        assert_eq!(spans(0, 2 * MS).cause(), Some(Cause::OtherTasks));
        assert_eq!(spans(0, 0).cause(), Some(Cause::NotRunning));
        assert_eq!(ShortHoldUps::default().cause(), None);
        // a run held up 600 ms of 10 s by them alone: INVALID, outside gridperf
        let run = Health {
            links: [
                Counters { delivered: 100_000, idle_held_ns: stolen.ns, ..Counters::default() },
                Counters::default(),
            ],
            held_up_ns: stolen.ns,
            short_held: stolen.clone(),
            uptime_s: 10.0,
            ..Health::default()
        };
        let why = run.invalid_because().expect("6% of the run");
        assert!(why.contains("held up 200 time(s) for 1 to 10 ms, 600 ms in all"), "{why}");
        assert!(why.contains("most likely by the hypervisor pausing the whole machine"), "{why}");
        assert_eq!(run.invalid_cause(), Some(LabCause::Outside));
        let other = Health { short_held: spans(0, 2 * MS), ..run.clone() };
        assert_eq!(other.invalid_cause(), Some(LabCause::OtherTasks));
        let own = Health { short_held: spans(0, 0), ..run };
        assert_eq!(own.invalid_cause(), Some(LabCause::Emulator));
    }

    #[test]
    fn a_super_packet_keeps_the_buffer_it_was_read_into_and_a_small_packet_is_copied() {
        let mut buf = vec![7u8; READ_BUF];
        let mut spare = vec![vec![0u8; READ_BUF]];
        // an ACK: copied, to its own length; the read buffer stays
        let ack = take_buf(&mut buf, &mut spare, 66);
        assert_eq!((ack.len(), ack.capacity() < READ_BUF, spare.len()), (66, true, 1));
        assert!(ack.iter().all(|&b| b == 7));
        // a super-packet: takes the read buffer itself, a spare takes its place
        let big = take_buf(&mut buf, &mut spare, 60_000);
        assert_eq!((big.len(), big.capacity() >= READ_BUF, spare.len()), (60_000, true, 0));
        assert!(big.iter().all(|&b| b == 7));
        assert_eq!(buf.len(), READ_BUF);
        assert!(buf.iter().all(|&b| b == 0), "the spare, not the packet, is read into next");
        // no spare left: a new buffer, full length
        let _ = take_buf(&mut buf, &mut spare, 60_000);
        assert_eq!(buf.len(), READ_BUF);
    }

    #[test]
    fn turns_that_ran_long_while_the_vm_handed_back_memory_say_so() {
        let run = |vm_kib: Option<u64>, working: bool| Health {
            vm_reporting_block: vm_kib.map(|_| 128 << 10),
            links: [Counters { delivered: 80_000, idle_held_ns: 150 * MS, ..Counters::default() }, Counters::default()],
            long_stalls: 3,
            held_up_ns: 150 * MS,
            held_by: if working {
                HeldBy { working: held(3, 150 * MS), ..HeldBy::default() }
            } else {
                HeldBy { other_tasks: held(3, 150 * MS), ..HeldBy::default() }
            },
            uptime_s: 7.0,
            vm_reported_kib: vm_kib,
            ..Health::default()
        };
        let why = run(Some(1_400 << 10), true).invalid_because().expect("invalid");
        assert!(
            why.contains("by its own work") && why.contains("blocks of 128 KiB and more, 1400 MiB of it within"),
            "{why}"
        );
        let over = run(Some(1_400 << 10), true).held_up_beyond(3.0).expect("held up");
        assert!(over.contains("hands its free memory back"), "{over}");
        // a quiet span still says the VM hands memory back, without a figure
        let quiet = run(Some(0), true).invalid_because().expect("invalid");
        assert!(quiet.contains("(free page reporting, blocks of 128 KiB and more)"), "{quiet}");
        // a VM that hands nothing back, or hold-ups not its own work: not said
        for h in [run(None, true), run(Some(1_400 << 10), false)] {
            let why = h.invalid_because().expect("invalid");
            assert!(!why.contains("free memory"), "{why}");
        }
        assert_eq!(run(Some(0), true).invalid_cause(), Some(LabCause::Outside));
        assert_eq!(run(None, true).invalid_cause(), Some(LabCause::Emulator));
        // a difference of two readings is what was handed back between them
        let (a, b) = (run(Some(5_000), true), run(Some(7_500), true));
        assert_eq!(b.since(&a).vm_reported_kib, Some(2_500));
        assert_eq!(b.since(&run(None, true)).vm_reported_kib, None);
    }

    #[test]
    fn read_buffers_hold_the_fullest_links_line_and_queue_each_page_written() {
        use gridperf_core::lab::emu::QueueLimit;
        // 1 Gbit/s x 20 ms with a 1-BDP queue (40 ms): 2.5 MB + 5 MB
        let wan = LinkConfig {
            rate_bps: Some(1_000_000_000),
            delay_ns: 20_000_000,
            queue: QueueLimit::Bytes(5_000_000),
            ..LinkConfig::default()
        };
        let ack_way = LinkConfig { queue: QueueLimit::Bytes(1_000_000), ..wan.clone() };
        let n = buffers_for([&wan, &ack_way]);
        let (held, _) = wan.held_bytes(SUPER_PACKET as u32);
        assert!(n * SUPER_PACKET >= held as usize && (n - 1) * SUPER_PACKET < held as usize, "{n} for {held}");
        // one direction full, not both; an unbounded link adds nothing
        assert_eq!(buffers_for([&wan, &wan]), n);
        assert_eq!(buffers_for([&LinkConfig::default()]), SPARE_BUFS);
        let b = ReadBuffers::of(3);
        assert_eq!((b.bufs.len(), b.bytes()), (3, 3 * READ_BUF as u64));
        assert!(b.bufs.iter().all(|v| v.len() == READ_BUF && (0..READ_BUF).step_by(4096).all(|i| v[i] == 1)));
    }

    #[test]
    fn lag_buckets_are_powers_of_two_microseconds() {
        assert_eq!(lag_bucket(0), 0);
        assert_eq!(lag_bucket(999), 0);
        assert_eq!(lag_bucket(1_000), 1);
        assert_eq!(lag_bucket(40_000), 6);
        assert_eq!(lag_bucket(u64::MAX), LAG_BUCKETS - 1);
    }
}
