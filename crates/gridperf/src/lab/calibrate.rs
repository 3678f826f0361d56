//! `gridperf lab calibrate`: measures how faithful the lab is on this
//! machine, against docs/lab.md's targets, with probes of its own run inside
//! the lab's hosts:
//!
//! - rate: UDP sent at 1.1 x the link rate for a few seconds; the IP bytes
//!   received per second in the steady part, against the setting (target:
//!   within 1%);
//! - queue bound: round trips of a small probe sent every 1 ms while that
//!   overload keeps the queue full, against base RTT + queue/rate + two packet times (p99 within
//!   the 1 ms delay tolerance);
//! - added delay: round trips of a probe sent every 1 ms with the link at
//!   half load, against the same probe on a lab of the same rate with no
//!   delay, quantile against quantile (target: median error at most 0.1 ms,
//!   p99 at most 1 ms);
//! - a delay table (the right-skewed jitter `lab clone` fits): round trips
//!   of probes from 16 sockets at once through a lab whose a -> b delay is
//!   drawn from an exponential's table (mean 0.3 ms, 101 points), their
//!   p10, p50, p90 and p99 less the baseline and the base delay, against
//!   the table's (target: within 0.1 ms, and 1 ms at p99);
//! - the emulator's CPU use, and whether it kept to its schedule.

use super::{emulator::Health, LabSpec};
use crate::error::{Error, Result};
use gridperf_core::analysis::stats::quantile_sorted;
use gridperf_core::lab::emu::{Jitter, LinkConfig, QueueLimit};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SINK_PORT: u16 = 9100;
const ECHO_PORT: u16 = 9101;
/// UDP payload of the load: 1472 B fills a 1500-byte IP packet.
const LOAD_PAYLOAD: usize = 1472;
/// Datagrams per send with UDP_SEGMENT: 44 x 1472 B fills a 64 KiB send.
const RUN: u64 = 44;
/// The load one sending thread is given, at most.
const SENDER_BPS: f64 = 4e9;
const PROBE_PAYLOAD: usize = 64;
const TCP_PORT: u16 = 9102;
/// The mean of the exponential delay table calibration checks: 0.3 ms, a
/// spread a few hundred probes measure to tens of microseconds.
const TABLE_MEAN_NS: f64 = 300_000.0;

/// One calibration point's results.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub rate_bps: u64,
    pub delay_ns: u64,
    pub queue_bytes: u64,
    /// IP bits per second the load generator sent in the overload window
    /// (1.1 x the rate when it kept up).
    pub offered_rate_bps: f64,
    /// IP bits per second received under overload, and its error against the setting.
    pub measured_rate_bps: f64,
    pub rate_error: f64,
    /// A bulk TCP (CUBIC) flow's IP bits per second (data segments delivered
    /// x 1500 bytes), its difference from the setting, and its retransmissions. For
    /// information: what TCP makes of the link is TCP's doing as much as the
    /// emulator's, so the rate target is judged on the UDP flow.
    pub tcp_rate_bps: f64,
    pub tcp_rate_error: f64,
    pub tcp_retransmits: u32,
    /// The share of the TCP flow's measured time its sender waited on a
    /// window, the receiver's or its own send buffer (tcpi_rwnd_limited and
    /// tcpi_sndbuf_limited), and the receiver's window at its end: a flow held
    /// below the link by a window, not by the emulator, says so here.
    pub tcp_window_limited: f64,
    pub tcp_receive_window_bytes: u32,
    /// The receiver's window threshold at the end (tcpi_rcv_ssthresh): the
    /// kernel clamps it to two segments when the receive buffer overflows,
    /// and a window held small by it grows back only as the buffer allows.
    pub tcp_receiver_threshold_bytes: u32,
    /// The machine's TCP memory was past the kernel's pressure mark during
    /// the TCP flow (its windows clamped to a few segments): what it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_memory_pressure: Option<String>,
    /// Probe RTT on the zero-delay lab of the same rate under the same half
    /// load (hosts and emulator): its median and p99.
    pub baseline_rtt_ns: f64,
    pub baseline_rtt_p99_ns: f64,
    /// Added delay error, quantile against quantile: the probe's RTT at half
    /// load less 2 x delay, against the baseline's at the median and at p99.
    /// A delay line that added exactly its delay to every packet would
    /// leave the RTT's distribution the baseline's, shifted: what is left
    /// is the delay line's, where the baseline's own spread (the hosts'
    /// wake-ups on this machine, which a real path's hosts have too) is
    /// not. The p99 against the baseline's median, spread and all, is
    /// `delay_error_p99_ns + baseline_rtt_p99_ns - baseline_rtt_ns`.
    pub delay_error_median_ns: f64,
    pub delay_error_p99_ns: f64,
    /// The delay table's check: (probability, measured quantile less the
    /// table's, ns) at p10, p50, p90 and p99, and how many round trips.
    pub table_errors_ns: Vec<(f64, f64)>,
    pub table_samples: usize,
    /// Probe RTT with the queue kept full (median, p99 and max), and the bound it must stay under.
    pub loaded_rtt_median_ns: f64,
    pub loaded_rtt_p99_ns: f64,
    pub loaded_rtt_max_ns: f64,
    pub queue_bound_ns: f64,
    /// The emulator's CPU use while loaded, in percent of one CPU: the
    /// whole process's, its writer thread's on the hosts' CPUs included
    /// (from 5 Gbit/s on two CPUs or more).
    pub emulator_cpu_percent: f64,
    /// Receives of the overload the receiving host dropped for want of
    /// room in its socket (its UDP RcvbufErrors over the count): the host,
    /// not the emulator, fell behind. Each is a run of datagrams the
    /// kernel coalesced (UDP GRO), not one datagram.
    #[serde(default)]
    pub sink_drops: u64,
    /// The datagrams those drops held, estimated from the datagrams per
    /// receive the sink counted ([`dropped_datagrams`]).
    #[serde(default)]
    pub sink_drops_datagrams: u64,
    /// The emulator's own verdict over the point, or the receiving host's
    /// when it dropped more than 1 in 1000 of what it was sent.
    pub invalid: Option<String>,
    pub lag_p99_us: Option<u64>,
    /// How long the hosts' packets waited in their TUN queues before the
    /// emulator read them (its probe of them, `queue_probe`), p99 and worst,
    /// us: over the point (half load and overload), and over the overload
    /// alone, where a wait adds to the full queue's and the queue bound
    /// is missed by it.
    #[serde(default)]
    pub queue_wait_p99_us: Option<u64>,
    #[serde(default)]
    pub queue_wait_max_us: u64,
    #[serde(default)]
    pub overload_queue_wait_p99_us: Option<u64>,
    /// [`Point::meets_targets`], for scripts.
    pub targets_met: bool,
    /// The tries this point took ([`point_tried`]), and the INVALID
    /// verdicts of those before the last, in order.
    pub tries: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier_invalid: Vec<String>,
    /// The delay figures again as an rtt run across a lab judges its
    /// round trips: without those that crossed a window in which the
    /// emulator was late. Absent when the emulator's list of such windows
    /// did not reach back over a phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_round_trip: Option<ByRoundTrip>,
}

/// The half-load and delay-table figures over the round trips no late
/// window of the emulator touched. The point's own figures keep them all:
/// how late the emulator runs on this machine is what calibration
/// measures. These say what a run judged round trip by round trip (rtt,
/// and the survey's and the clone's probes) gets from the lab on it; they
/// stay a fair draw of the path, for the windows fall where the machine
/// held the emulator up, not where the path is slow.
#[derive(Debug, Clone, Serialize)]
pub struct ByRoundTrip {
    /// Round trips of the two phases left out, and counted in all.
    pub left_out: u64,
    pub counted: u64,
    pub delay_error_median_ns: f64,
    pub delay_error_p99_ns: f64,
    pub table_errors_ns: Vec<(f64, f64)>,
}

impl Point {
    /// Whether the load fell short of overloading the link (by 2%), so that
    /// the received rate says nothing about the emulator's rate.
    pub fn load_short(&self) -> bool {
        self.offered_rate_bps < self.rate_bps as f64 * 1.02
    }

    pub fn meets_targets(&self) -> bool {
        !self.load_short()
            && self.rate_error.abs() <= 0.01
            && self.delay_error_median_ns.abs() <= 100_000.0
            && self.delay_error_p99_ns <= 1_000_000.0
            && self.loaded_rtt_p99_ns <= self.queue_bound_ns + 1_000_000.0
            && self.table_held()
            && self.invalid.is_none()
    }

    /// Whether the delay table came out as set: each quantile within 0.1
    /// ms, the p99 within 1 ms.
    pub fn table_held(&self) -> bool {
        !self.table_errors_ns.is_empty()
            && self.table_errors_ns.iter().all(|&(p, e)| e.abs() <= if p >= 0.99 { 1_000_000.0 } else { 100_000.0 })
    }
}

fn in_ns<R: Send + 'static>(ns: &str, f: impl FnOnce() -> std::io::Result<R> + Send + 'static) -> Result<R> {
    gridperf_sys::in_netns(ns, f).map_err(|e| Error::internal(format!("probe in {ns}: {e}")))
}

/// The UDP datagrams dropped for want of room in a socket's buffer in
/// namespace `ns` since it was made (RcvbufErrors of its /proc/net/snmp).
fn udp_rcvbuf_errors(ns: &str) -> Result<u64> {
    in_ns(ns, || {
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        rcvbuf_errors(&snmp).ok_or_else(|| std::io::Error::other("no Udp RcvbufErrors in /proc/net/snmp"))
    })
}

/// RcvbufErrors of the Udp lines of a /proc/net/snmp (a header line of
/// names, then a line of values).
fn rcvbuf_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let k = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(k)?.parse().ok()
}

/// Cumulative CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // fields after the command name's closing parenthesis: utime is 14th, stime 15th of the whole line
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SC_CLK_TCK is 100 on Linux
    (ticks(11) + ticks(12)) / 100.0
}

/// A UDP sink and echo server on host b, until `stop`.
fn start_b(ns: &str, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>> {
    start_b_on(ns, stop, None)
}

/// The same, the echo's thread on `cpu` if given.
fn start_b_on(ns: &str, stop: Arc<AtomicBool>, cpu: Option<usize>) -> Result<std::thread::JoinHandle<()>> {
    let (sink, echo) = in_ns(ns, || {
        let sink = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, SINK_PORT))?;
        let echo = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT))?;
        // 53 ms at 10 Gbit/s where root may have it, else what
        // net.core.rmem_max grants (4 MiB here, doubled: 6.7 ms at 10G): a
        // sink held off its CPU longer drops what comes meanwhile, and
        // the point is then INVALID (the sink's drops, below)
        gridperf_sys::set_rcvbuf_past_max(&sink, 64 << 20)?;
        // the load's datagrams as the emulator wrote them, runs in one receive
        // (at 10 Gbit/s one receive per datagram would cost the sink a CPU)
        let _ = gridperf_sys::set_udp_gro(&sink, true);
        sink.set_read_timeout(Some(Duration::from_millis(50)))?;
        // receive stamps on: each count request is timed by its arrival
        // (a first call has nothing to tell and says so)
        let _ = gridperf_sys::last_rx_stamp_ns(&sink);
        echo.set_read_timeout(Some(Duration::from_millis(50)))?;
        Ok((sink, echo))
    })?;
    let stop2 = stop.clone();
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            let _ = gridperf_sys::set_thread_affinity(&[c]);
        }
        let mut buf = [0u8; 2048];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..n], from);
            }
        }
    });
    Ok(std::thread::spawn(move || {
        // the sink answers a count request (a 1-byte datagram) with how many
        // bytes and datagrams it received since the last request, and when
        // the kernel received the request (what came before it in the
        // socket's queue arrived before it): the span between two requests
        // is the kernel's, not the time a thread took to enter this
        // namespace and ask (a 2% error in a 1 s count, CI saw)
        let mut buf = vec![0u8; 65_536];
        let (mut bytes, mut count, mut receives) = (0u64, 0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sink.recv_from(&mut buf) {
                if n == 1 {
                    let stamp = gridperf_sys::last_rx_stamp_ns(&sink).unwrap_or(0);
                    let mut reply = bytes.to_be_bytes().to_vec();
                    reply.extend_from_slice(&count.to_be_bytes());
                    reply.extend_from_slice(&receives.to_be_bytes());
                    reply.extend_from_slice(&stamp.to_be_bytes());
                    let _ = sink.send_to(&reply, from);
                    bytes = 0;
                    count = 0;
                    receives = 0;
                } else {
                    // every load datagram is LOAD_PAYLOAD bytes, the last of a run no more
                    bytes += n as u64;
                    count += n.div_ceil(LOAD_PAYLOAD) as u64;
                    receives += 1;
                }
            }
        }
    }))
}

/// Sends UDP load from host a to b at `bps` (IP bits per second) until
/// `stop`; counts the datagrams it sent in `sent`. It sleeps between bursts
/// of the datagrams that fell due (about 100 us apart) rather than spinning
/// between datagrams, so that it leaves the CPU to the emulator and the
/// receiver on a small machine.
fn start_load(
    ns: &str,
    b: Ipv4Addr,
    bps: f64,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> Result<std::thread::JoinHandle<()>> {
    // one sender per 4 Gbit/s: one alone offered 10.2 Gbit/s of 11 asked
    // at a 10G point (a sender not running catches up by 2 ms at most), three 11.0
    let senders = (bps / SENDER_BPS).ceil().clamp(1.0, 4.0) as usize;
    let mut threads = Vec::new();
    for _ in 0..senders {
        threads.push(start_sender(ns, b, bps / senders as f64, stop.clone(), sent.clone())?);
    }
    Ok(std::thread::spawn(move || {
        for t in threads {
            let _ = t.join();
        }
    }))
}

/// One socket and thread of the load.
fn start_sender(
    ns: &str,
    b: Ipv4Addr,
    bps: f64,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> Result<std::thread::JoinHandle<()>> {
    let sock = in_ns(ns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(SocketAddr::new(b.into(), SINK_PORT))?;
        gridperf_sys::set_sndbuf(&s, 4 << 20)?;
        // up to RUN datagrams per send, cut by the kernel or, through the
        // lab's TUN device (USO), by the emulator only where the link drops
        let run = if gridperf_sys::set_udp_segment(&s, LOAD_PAYLOAD as u16).is_ok() { RUN } else { 1 };
        Ok((s, run))
    })?;
    let (sock, run) = sock;
    Ok(std::thread::spawn(move || {
        let _ = gridperf_sys::set_timer_slack_ns(1);
        let payload = vec![0x5au8; LOAD_PAYLOAD * run as usize];
        let per_packet_s = ((LOAD_PAYLOAD + 28) * 8) as f64 / bps;
        let start = Instant::now();
        let mut n = 0u64;
        // a sender that was not running for a while catches up with at most
        // 2 ms of datagrams at once, as a paced sender would
        let most = (0.002 / per_packet_s).ceil() as u64;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() / per_packet_s) as u64;
            n = n.max(due.saturating_sub(most));
            while n < due {
                // a full send buffer (ENOBUFS) is a datagram not sent: count only what went
                let k = (due - n).min(run);
                if sock.send(&payload[..LOAD_PAYLOAD * k as usize]).is_ok() {
                    sent.fetch_add(k, Ordering::Relaxed);
                }
                n += k;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }))
}

/// Round trips of a small UDP probe from a to b's echo, every `gap`, for `time`.
fn probe(ns: &str, b: Ipv4Addr, gap: Duration, time: Duration) -> Result<Probed> {
    probe_on(ns, b, gap, time, None)
}

/// A probe's round trips (ns), and when each began and ended
/// (CLOCK_MONOTONIC ns, the clock of the emulator's late windows), in
/// order of their starts.
#[derive(Debug, Default)]
struct Probed {
    rtts: Vec<u64>,
    spans: Vec<[u64; 2]>,
}

impl Probed {
    /// The round trips, sorted.
    fn sorted(mut self) -> Vec<u64> {
        self.rtts.sort_unstable();
        self.rtts
    }

    /// The round trips that crossed none of `windows`, sorted, and how
    /// many did.
    fn untouched(&self, windows: &[[u64; 2]]) -> (Vec<u64>, u64) {
        let crossed = super::emulator::crossing(&self.spans, windows);
        let mut kept: Vec<u64> = self.rtts.iter().zip(&crossed).filter(|(_, &c)| !c).map(|(&r, _)| r).collect();
        kept.sort_unstable();
        let left_out = (self.rtts.len() - kept.len()) as u64;
        (kept, left_out)
    }
}

/// The windows in which lab `name`'s emulator was late since `before`,
/// read once it has written a reading after now (None when it did not
/// within 400 ms, or its list no longer reaches back to `before`).
fn late_windows(name: &str, before: &Health) -> Option<Vec<[u64; 2]>> {
    let after = super::health_after(name, gridperf_sys::monotonic_ns(), Duration::from_millis(400))?;
    super::emulator::late_windows_since(before, &after)
}

/// The same, the probing thread on `cpu` if given.
fn probe_on(ns: &str, b: Ipv4Addr, gap: Duration, time: Duration, cpu: Option<usize>) -> Result<Probed> {
    in_ns(ns, move || {
        if let Some(c) = cpu {
            let _ = gridperf_sys::set_thread_affinity(&[c]);
        }
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(SocketAddr::new(b.into(), ECHO_PORT))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut out = Probed::default();
        let mut buf = [0u8; 256];
        let end = Instant::now() + time;
        let mut seq = 0u64;
        while Instant::now() < end {
            seq += 1;
            let mut msg = [0u8; PROBE_PAYLOAD];
            msg[..8].copy_from_slice(&seq.to_be_bytes());
            let t0 = gridperf_sys::monotonic_ns();
            s.send(&msg)?;
            loop {
                match s.recv(&mut buf) {
                    Ok(n) if n >= 8 && buf[..8] == msg[..8] => {
                        let t1 = gridperf_sys::monotonic_ns();
                        out.rtts.push(t1.saturating_sub(t0));
                        out.spans.push([t0, t1]);
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break, // lost (a full queue drops probes too)
                }
            }
            std::thread::sleep(gap);
        }
        Ok(out)
    })
}

/// Round trips of a small UDP probe from a to b's echo, one sent every
/// `every` for `time` whatever came back (open loop), each carrying its
/// own send time, and the echoes read until all have come back or
/// `drain` after the last was sent. A ping-pong's count falls with the
/// path's delay (29 round trips in 3 s across 50 ms, whose p99 is its
/// worst); this one's does not (3000, whose p99 is the 30th worst).
fn probe_paced(ns: &str, b: Ipv4Addr, every: Duration, time: Duration, drain: Duration) -> Result<Probed> {
    in_ns(ns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(SocketAddr::new(b.into(), ECHO_PORT))?;
        s.set_read_timeout(Some(Duration::from_millis(20)))?;
        let tx = s.try_clone()?;
        // the sender says how many it sent once it is done
        let sender = std::thread::spawn(move || {
            let _ = gridperf_sys::set_timer_slack_ns(1);
            let start = Instant::now();
            let mut sent = 0u64;
            for k in 0u32.. {
                let due = every * k;
                if due >= time {
                    break;
                }
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
                let mut msg = [0u8; PROBE_PAYLOAD];
                msg[..8].copy_from_slice(&gridperf_sys::monotonic_ns().to_be_bytes());
                // a full send buffer is a probe not sent, not a failed run
                sent += u64::from(tx.send(&msg).is_ok());
            }
            sent
        });
        let mut got: Vec<[u64; 2]> = Vec::new();
        let mut buf = [0u8; 256];
        let mut recv = |got: &mut Vec<[u64; 2]>| {
            if let Ok(n) = s.recv(&mut buf) {
                let t1 = gridperf_sys::monotonic_ns();
                let t0 = buf.get(..8).and_then(|b| b.try_into().ok()).map_or(u64::MAX, u64::from_be_bytes);
                if n >= 8 && t0 <= t1 {
                    got.push([t0, t1]);
                }
            }
        };
        while !sender.is_finished() {
            recv(&mut got);
        }
        let sent = sender.join().map_err(|_| std::io::Error::other("the probe's sender panicked"))?;
        let end = Instant::now() + drain;
        while (got.len() as u64) < sent && Instant::now() < end {
            recv(&mut got);
        }
        got.sort_unstable_by_key(|s| s[0]);
        Ok(Probed { rtts: got.iter().map(|s| s[1] - s[0]).collect(), spans: got })
    })
}

/// How long [`probe_paced`] waits for echoes after its last probe went
/// where none is lost on the way (at half load).
const PACED_DRAIN: Duration = Duration::from_secs(2);

/// How often the half-load probes and their baseline's go: 64 B a
/// millisecond is 0.5 Mbit/s beside the load, and 2 s of it 2000 round trips.
const PACED_EVERY: Duration = Duration::from_millis(1);

/// What b's sink received since the last ask.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SinkCount {
    bytes: u64,
    datagrams: u64,
    /// Its receives: each a run of datagrams the kernel coalesced (UDP GRO).
    receives: u64,
    /// When the kernel received this ask (ns, CLOCK_REALTIME; 0 if it could not say).
    stamp: i64,
}

/// The datagrams a socket's `drops` held, each drop a receive's worth
/// (a run UDP GRO coalesced: its RcvbufErrors count runs, not
/// datagrams), at the datagrams per receive of what it did receive. CI
/// once counted a 5 Gbit/s rate 1.9% short in a point said valid: 314
/// drops, under 1 in 1000 of its datagrams as one each, were about 3% of
/// them as the runs they were.
fn dropped_datagrams(drops: u64, received: &SinkCount) -> u64 {
    if received.receives == 0 {
        // nothing received to size them by: the most a run holds
        return drops * (65_535 / LOAD_PAYLOAD as u64);
    }
    (drops as f64 * received.datagrams as f64 / received.receives as f64).round() as u64
}

/// Asks b's sink how much it received since the last ask.
fn sink_count(ns: &str, b: Ipv4Addr) -> Result<SinkCount> {
    in_ns(ns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(SocketAddr::new(b.into(), SINK_PORT))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut buf = [0u8; 64];
        for _ in 0..10 {
            s.send(&[1])?;
            if let Ok(32) = s.recv(&mut buf) {
                let word = |k: usize| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&buf[8 * k..8 * k + 8]);
                    w
                };
                return Ok(SinkCount {
                    bytes: u64::from_be_bytes(word(0)),
                    datagrams: u64::from_be_bytes(word(1)),
                    receives: u64::from_be_bytes(word(2)),
                    stamp: i64::from_be_bytes(word(3)),
                });
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the sink did not answer"))
    })
}

/// A bulk TCP flow from a to b for `warmup` then `time`: the IP bits per
/// second of data segments delivered to b over `time` (each a full
/// 1500-byte packet), and the sender's retransmissions. Both hosts' TCP buffers may grow to `buf` bytes
/// (tcp_rmem and tcp_wmem are per namespace), so that the window does not
/// cap the flow below the link rate.
fn tcp_rate(a: &str, b: &str, b_addr: Ipv4Addr, buf: u64, warmup: Duration, time: Duration) -> Result<TcpFlow> {
    use std::io::{Read, Write};
    let limits = format!("4096 131072 {buf}");
    for ns in [a, b] {
        let limits = limits.clone();
        in_ns(ns, move || {
            std::fs::write("/proc/sys/net/ipv4/tcp_rmem", &limits)?;
            std::fs::write("/proc/sys/net/ipv4/tcp_wmem", &limits)
        })?;
    }
    let listener = in_ns(b, || std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, TCP_PORT)))?;
    // before the flow: what other sockets on the machine hold (orphans an
    // interrupted run left) may put TCP under memory pressure by itself
    let memory_pressure = crate::host::tcp_memory_pressure();
    let stop = Arc::new(AtomicBool::new(false));
    // the receiver stops only once the sender has: a receiver that closed
    // first, data unread, reset the flow under the sender's last write (a
    // calibrate under a CPU hog failed so: "Broken pipe")
    let stop_rx = Arc::new(AtomicBool::new(false));
    let s2 = stop_rx.clone();
    let (conn_tx, conn_rx) = std::sync::mpsc::channel();
    let rx = std::thread::spawn(move || -> std::io::Result<u32> {
        listener.set_nonblocking(false)?;
        let (mut c, _) = listener.accept()?;
        c.set_read_timeout(Some(Duration::from_millis(200)))?;
        let _ = conn_tx.send(c.try_clone()?);
        let mut buf = vec![0u8; 1 << 20];
        while !s2.load(Ordering::Relaxed) {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(gridperf_sys::tcp_info(&c).map(|(i, _)| i.rcv_ssthresh).unwrap_or(0))
    });
    let mut tx = in_ns(a, move || {
        // CUBIC, the loss-based standard, fills a link with a 1-BDP drop-tail
        // queue; BBR leaves a few percent unused by design (its probing cycles)
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        gridperf_sys::set_tcp_congestion(&sock, "cubic")?;
        sock.connect_timeout(&SocketAddr::new(b_addr.into(), TCP_PORT).into(), Duration::from_secs(5))?;
        let tx: std::net::TcpStream = sock.into();
        tx.set_write_timeout(Some(Duration::from_millis(200)))?;
        Ok(tx)
    })?;
    let probe_tx = tx.try_clone().map_err(|e| Error::internal(format!("cloning a socket: {e}")))?;
    let s3 = stop.clone();
    let sender = std::thread::spawn(move || -> std::io::Result<(u32, u32)> {
        let chunk = vec![0x5au8; 1 << 20];
        while !s3.load(Ordering::Relaxed) {
            match tx.write(&chunk) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                // the measurement is over: how the flow ends does not matter
                Err(_) if s3.load(Ordering::Relaxed) => break,
                Err(e) => return Err(e),
            }
        }
        let (info, _) = gridperf_sys::tcp_info(&tx)?;
        Ok((info.snd_mss, info.total_retrans))
    });
    let conn = conn_rx.recv_timeout(Duration::from_secs(5));
    // the data segments the receiver acknowledged, selectively or not
    // (tcpi_delivered, counted at the sender per wire segment): what the link
    // carried, which the bytes an application reads show only late and in
    // jumps when a loss is repaired
    let info = |c: &std::net::TcpStream| {
        gridperf_sys::tcp_info(c).map(|(i, _)| i).map_err(|e| Error::measurement(format!("TCP_INFO: {e}")))
    };
    let measured = conn.map_err(|_| Error::measurement("the calibration TCP flow did not connect")).and_then(|_| {
        std::thread::sleep(warmup);
        let i0 = info(&probe_tx)?;
        let t0 = Instant::now();
        std::thread::sleep(time);
        let i1 = info(&probe_tx)?;
        let dt = t0.elapsed().as_secs_f64();
        let waited =
            (i1.rwnd_limited_us + i1.sndbuf_limited_us).saturating_sub(i0.rwnd_limited_us + i0.sndbuf_limited_us);
        Ok((i1.delivered.wrapping_sub(i0.delivered), dt, (waited as f64 / 1e6 / dt).min(1.0), i1.snd_wnd))
    });
    stop.store(true, Ordering::SeqCst);
    let sent = sender.join().map_err(|_| Error::internal("the TCP sender panicked"));
    stop_rx.store(true, Ordering::SeqCst);
    let receiver_threshold = rx.join().ok().and_then(|r| r.ok()).unwrap_or(0);
    // the machine's TCP memory as the flow ends, its own buffers included
    let memory_pressure = memory_pressure.or_else(crate::host::tcp_memory_pressure).map(|w| w.message());
    let sent = sent?;
    let (segs, dt, window_limited, receive_window) = measured?;
    let (mss, retransmits) = sent.map_err(|e| Error::measurement(format!("the calibration TCP flow broke: {e}")))?;
    if mss == 0 {
        return Err(Error::measurement("the calibration TCP flow reported no MSS"));
    }
    // a bulk flow's data segments are full: an MTU-sized packet each
    Ok(TcpFlow {
        rate_bps: segs as f64 * 1500.0 * 8.0 / dt,
        retransmits,
        window_limited,
        receive_window,
        receiver_threshold,
        memory_pressure,
    })
}

/// What [`tcp_rate`] measured.
struct TcpFlow {
    rate_bps: f64,
    retransmits: u32,
    /// The share of the measured time the sender waited on a window.
    window_limited: f64,
    /// The receiver's window, bytes, at the end, and its threshold (tcpi_rcv_ssthresh).
    receive_window: u32,
    receiver_threshold: u32,
    /// The machine's TCP memory past its pressure mark, before or after it.
    memory_pressure: Option<String>,
}

/// [`probe`] from `sockets` sockets at once, their round trips together.
fn probe_many(ns: &str, b: Ipv4Addr, gap: Duration, time: Duration, sockets: usize) -> Result<Probed> {
    let runs: Vec<Result<Probed>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..sockets).map(|_| sc.spawn(|| probe(ns, b, gap, time))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::internal("a probe thread panicked")))).collect()
    });
    let mut all: Vec<(u64, [u64; 2])> = Vec::new();
    for r in runs {
        let r = r?;
        all.extend(r.rtts.into_iter().zip(r.spans));
    }
    all.sort_unstable_by_key(|&(_, s)| s[0]);
    Ok(Probed { rtts: all.iter().map(|&(r, _)| r).collect(), spans: all.iter().map(|&(_, s)| s).collect() })
}

/// The delay table calibration checks: an exponential's quantiles (mean
/// `mean_ns`) at every 1%, the last point keeping its bin's mean.
fn exponential_table(mean_ns: f64) -> Vec<i64> {
    let n = gridperf_core::lab::emu::TABLE_POINTS;
    let q = |p: f64| -(1.0 - p).ln() * mean_ns;
    let mut t: Vec<i64> = (0..n - 1).map(|k| q(k as f64 / (n - 1) as f64).round() as i64).collect();
    // the top 1%'s mean is its start plus the mean (memoryless): the last point keeps it
    let start = q((n - 2) as f64 / (n - 1) as f64);
    t.push((start + 2.0 * mean_ns).round() as i64);
    t
}

/// The most delay each way of [`floor_ns`]'s twin: a longer path's own
/// round trip is a small share of it, and the twin's probes still come
/// back often enough for a median in each 50 ms slice.
const FLOOR_TWIN_MAX_DELAY_NS: u64 = 2_000_000;

/// The delay each way of [`floor_ns`]'s twin for a link asked to delay
/// `asked`: the lab's own, up to [`FLOOR_TWIN_MAX_DELAY_NS`]. The lab's own
/// round trip grows with its delay: the hosts' CPUs sit idle longer
/// between a message and its answer, and a virtual CPU halted past the
/// hypervisor's polling takes longer to wake. Across crossover-fe rtt
/// measured 43-51 us of it at 0.1 ms, 75-88 us at 0.3 ms, 113-114 us at 1
/// ms and 164-175 us at 3 ms. A twin at another delay measures another
/// floor: one at 0.1 ms each way for every lab left crossover-fe's 0.1 ms
/// at 67-80 us and a 1 ms path at 1043-1047 us.
fn twin_delay_ns(asked: u64) -> u64 {
    asked.min(FLOOR_TWIN_MAX_DELAY_NS)
}

/// The lab's own round trip on this machine, ns: the median of 64-byte UDP
/// round trips, back to back for 0.3 s (after 0.15 s unmeasured, the
/// emulator's pace settling), across a twin of `spec` (its rates, queues
/// and delays, those up to 2 ms each way, [`twin_delay_ns`]; no jitter or
/// loss), less the twin's delays and the probe's time on the wire at the
/// link's rate (a real path's too):
/// the hosts' stacks, the TUN devices and the emulator's wake-ups, the two
/// ends pinned to CPUs of their own as an rtt run's are. Back
/// to back as a ping-pong is, and with a delay as a path has: a probe
/// every 1 ms across no delay measured 122 us here, where a ping-pong's
/// own share was 72 us. Brought up under a name of its own and down again.
///
/// A floor over [`FLOOR_PLAUSIBLE_NS`] was taken while the machine was
/// busy (CI once measured 8 ms rootless, and a 20 ms lab came out at 12 ms):
/// it is measured again, up to [`FLOOR_TRIES`] times, and the lowest kept.
pub fn floor_ns(spec: &LabSpec) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..FLOOR_TRIES {
        best = best.min(floor_once(spec)?);
        if best <= FLOOR_PLAUSIBLE_NS {
            break;
        }
    }
    Ok(best)
}

/// A lab's own round trip above this is not this machine's TUN devices and
/// emulator but a moment it was busy (30-120 us measured here, root or not).
pub const FLOOR_PLAUSIBLE_NS: f64 = 1_000_000.0;

/// How many times [`floor_ns`] measures a floor that is not plausible.
const FLOOR_TRIES: usize = 3;

/// One measurement of [`floor_ns`].
fn floor_once(spec: &LabSpec) -> Result<f64> {
    // a name of its own: a survey brings labs up side by side, each with its twin
    static TWINS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("fl{}x{}", std::process::id() % 100_000, TWINS.fetch_add(1, Ordering::Relaxed) % 100);
    let bare = |l: &LinkConfig| LinkConfig {
        delay_ns: twin_delay_ns(l.delay_ns),
        jitter: Jitter::None,
        loss: gridperf_core::lab::emu::Loss::None,
        ..l.clone()
    };
    let (there, back) = (bare(&spec.ab), bare(&spec.ba));
    let delays = (there.delay_ns + back.delay_ns) as f64;
    let st = super::up(LabSpec {
        name: name.clone(),
        hosts: (1, 1),
        ab: there,
        ba: back,
        profile: None,
        description: "the lab's own round trip".into(),
        access: Vec::new(),
        owner: Some(std::process::id()),
        paths: Vec::new(),
        floor_ns: None,
        ..spec.clone()
    })?;
    let _guard = Down(name.clone());
    let (a, b) = ab(&st)?;
    let stop = Arc::new(AtomicBool::new(false));
    // the two ends on CPUs of their own, as an rtt run pins them
    let cpus = crate::host::cpus();
    let (pa, pb) = if cpus.len() >= 2 { (cpus.first().copied(), cpus.get(1).copied()) } else { (None, None) };
    let echo = start_b_on(&b, stop.clone(), pb)?;
    let settle = probe_on(&a, B_ADDR, Duration::ZERO, Duration::from_millis(150), pa);
    let rtts = settle.and_then(|_| probe_on(&a, B_ADDR, Duration::ZERO, Duration::from_millis(300), pa));
    stop.store(true, Ordering::SeqCst);
    let _ = echo.join();
    let median = settled_median(&rtts?.rtts, FLOOR_SLICE_NS)
        .ok_or_else(|| Error::measurement("no round trip came back across the lab's twin"))?;
    // a probe's time on the wire at the link's rate is the path's, not the
    // lab's (a real cable takes it too): it stays in
    let wire = |l: &LinkConfig| l.rate_bps.map_or(0.0, |r| ((PROBE_PAYLOAD + 28) * 8) as f64 * 1e9 / r as f64);
    Ok((median - delays - wire(&spec.ab) - wire(&spec.ba)).max(0.0))
}

/// How long a slice of [`floor_ns`]'s probes is: half the emulator's pace window.
const FLOOR_SLICE_NS: u64 = 50_000_000;

/// The lowest of the medians of back-to-back round trips taken `slice` ns
/// at a time (the last slice kept if it holds a third of one): the
/// emulator decides whether to spin per 100 ms, and a window it began
/// while the twin was still coming up (the machine busy) does not spin; a
/// floor taken over it measured 87 us where the runs after it had 63 us.
fn settled_median(rtts: &[u64], slice: u64) -> Option<f64> {
    let mut best: Option<f64> = None;
    let (mut from, mut sum) = (0, 0u64);
    for (i, r) in rtts.iter().enumerate() {
        sum += r;
        let last = i + 1 == rtts.len();
        if sum >= slice || (last && sum * 3 >= slice) {
            let mut part = rtts[from..=i].to_vec();
            part.sort_unstable();
            let m = quantile_sorted(&part, 0.5);
            best = match (best, m) {
                (Some(b), Some(m)) => Some(b.min(m)),
                (b, m) => b.or(m),
            };
            (from, sum) = (i + 1, 0);
        }
    }
    best.or_else(|| {
        let mut all = rtts.to_vec();
        all.sort_unstable();
        quantile_sorted(&all, 0.5)
    })
}

/// A lab with its own round trip taken off its delays, half each way, none
/// below zero, so that a lab's RTT is end to end, as a ping between two
/// real hosts (or the source's measurement, or `lab clone`'s) holds those
/// hosts' own stacks: the 1 B round trip across `lan-gige` is its 0.2 ms,
/// not 0.2 ms plus this machine's TUN devices and emulator. Measured on a
/// twin of the lab ([`floor_ns`], ~0.5 s) whenever a link adds delay;
/// said in the description. The loopback lab and a lab without delay are
/// left as they are; `lab calibrate` measures the emulator's added delay
/// against its setting, without this.
pub fn without_floor(mut spec: LabSpec) -> Result<LabSpec> {
    let delays = |s: &LabSpec| {
        [&s.ab, &s.ba]
            .into_iter()
            .chain(s.paths.iter().flat_map(|(a, b)| [a, b]))
            .map(|l| l.delay_ns)
            .collect::<Vec<_>>()
    };
    if spec.loopback || delays(&spec).iter().all(|d| *d == 0) {
        return Ok(spec);
    }
    let floor = floor_ns(&spec)?;
    let fmt = gridperf_core::units::fmt_ns;
    if floor > FLOOR_PLAUSIBLE_NS {
        // taking a busy moment's figure off would shorten the lab for its life
        eprintln!(
            "gridperf: warning: the lab's own round trip measured {} in {FLOOR_TRIES} tries, over the {} a quiet \
             machine takes (the machine is busy): nothing is taken off the delays, so its RTT is the asked one plus \
             this machine's own",
            fmt(floor),
            fmt(FLOOR_PLAUSIBLE_NS)
        );
        spec.description.push_str(&format!(
            ", the lab's own round trip not taken off its delays (it measured {}, the machine busy)",
            fmt(floor)
        ));
        return Ok(spec);
    }
    let half = super::floor_each_way_ns(floor);
    let asked = spec.ab.delay_ns + spec.ba.delay_ns;
    let links = [&mut spec.ab, &mut spec.ba].into_iter().chain(spec.paths.iter_mut().flat_map(|(a, b)| [a, b]));
    for l in links {
        l.delay_ns = l.delay_ns.saturating_sub(half);
    }
    spec.description.push_str(&format!(", the lab's own round trip ({}, measured) taken off its delays", fmt(floor)));
    if (asked as f64) < floor {
        eprintln!(
            "gridperf: warning: the lab's round trip is {} on this machine, more than the {} asked for: its RTT is at least {}",
            fmt(floor),
            fmt(asked as f64),
            fmt(floor)
        );
    }
    spec.floor_ns = Some(floor);
    Ok(spec)
}

fn bring_up(name: &str, rate: u64, delay_ns: u64, queue_bytes: u64) -> Result<super::LabState> {
    bring_up_with(name, rate, delay_ns, queue_bytes, Jitter::None)
}

/// A calibration lab whose a -> b link's delay has `jitter` (reordering: each probe its own draw).
fn bring_up_with(name: &str, rate: u64, delay_ns: u64, queue_bytes: u64, jitter: Jitter) -> Result<super::LabState> {
    let link =
        LinkConfig { rate_bps: Some(rate), queue: QueueLimit::Bytes(queue_bytes), delay_ns, ..LinkConfig::default() };
    let reorder = !matches!(jitter, Jitter::None);
    super::up(LabSpec {
        name: name.to_string(),
        hosts: (1, 1),
        mtu: 1500,
        ab: LinkConfig { jitter, reorder, ..link.clone() },
        ba: link,
        seed: 1,
        profile: None,
        description: format!("calibration: {rate} bit/s, {delay_ns} ns one way"),
        loopback: false,
        access: Vec::new(),
        // the calibration's own probes run in the hosts; the lab goes with this process
        owner: Some(std::process::id()),
        sysctls: Vec::new(),
        paths: Vec::new(),
        floor_ns: None,
    })
}

/// The hosts' namespaces, as a calibration lab brought up names them.
fn ab(st: &super::LabState) -> Result<(String, String)> {
    let ns = |n: &str| st.hosts.iter().find(|h| h.name == n).map(|h| h.netns.clone());
    ns("a").zip(ns("b")).ok_or_else(|| Error::internal("the calibration lab has no hosts a and b"))
}

/// Host b's address in a calibration lab.
const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 1);

/// Measures one (rate, one-way delay) point; `seconds` of overload for the
/// rate. Its phases: the baseline round trip at zero delay, then on a lab
/// with the delay the round trips at half load, the overload, a bulk TCP
/// flow, and on a third lab the delay table's quantiles.
pub fn point(rate: u64, delay_ns: u64, seconds: f64, progress: &mut dyn FnMut(&str)) -> Result<Point> {
    let name = format!("cal{}", std::process::id() % 100_000);
    // a 1-BDP queue, at least 64 packets
    let bdp = (rate as f64 / 8.0 * 2.0 * delay_ns as f64 / 1e9) as u64;
    let queue_bytes = bdp.max(64 * 1500);

    progress("baseline");
    let (baseline, baseline_p99) = baseline_rtt(&name, rate, queue_bytes)?;

    progress("half load");
    let st = bring_up(&name, rate, delay_ns, queue_bytes)?;
    let guard = Down(name.clone());
    let (a, b) = ab(&st)?;
    let before = super::health(&name).unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let sink = start_b(&b, stop.clone())?;
    let stop_half = Arc::new(AtomicBool::new(false));
    let load = start_load(&a, B_ADDR, rate as f64 * 0.5, stop_half.clone(), Arc::default())?;
    let probe_time = Duration::from_millis((2_000 + 20 * delay_ns / 1_000_000).min(8_000));
    let half_probed = probe_paced(&a, B_ADDR, PACED_EVERY, probe_time, PACED_DRAIN)?;
    stop_half.store(true, Ordering::SeqCst);
    let _ = load.join();
    let half_untouched = late_windows(&name, &before).map(|w| half_probed.untouched(&w));
    let half_counted = half_probed.rtts.len() as u64;
    let half = half_probed.sorted();
    let added =
        |sorted: &[u64], p: f64| quantile_sorted(sorted, p).unwrap_or(f64::NAN) - baseline - 2.0 * delay_ns as f64;
    // quantile against the baseline's quantile
    let added_p99 = |sorted: &[u64]| added(sorted, 0.99) - (baseline_p99 - baseline);
    let (d_med, d_p99) = (added(&half, 0.5), added_p99(&half));

    progress("overload");
    let pkt_ns = (LOAD_PAYLOAD + 28) as f64 * 8.0 / rate as f64 * 1e9;
    let bound = baseline + 2.0 * delay_ns as f64 + queue_bytes as f64 * 8.0 / rate as f64 * 1e9 + 2.0 * pkt_ns;
    // a full queue drops probes too (a tenth of them at 1.1 x the rate):
    // the echoes are awaited for twice the bound, not for every one
    let drain = Duration::from_secs_f64((2.0 * bound / 1e9).max(0.2)).min(PACED_DRAIN);
    let over = overload(&name, &a, &b, rate, delay_ns, seconds, drain, st.pid)?;
    stop.store(true, Ordering::SeqCst);
    let _ = sink.join();
    std::thread::sleep(Duration::from_millis(300));
    let after = super::health(&name).unwrap_or_default();

    progress("bulk TCP");
    // slow start (or BBR's startup) takes some round trips to reach the rate
    let rtt = 2.0 * delay_ns as f64 / 1e9;
    let warmup = Duration::from_secs_f64((1.0 + 30.0 * rtt).min(10.0));
    // the window a single flow needs: twice the path's BDP with the queue, and headroom
    let buf = (4 * (bdp + queue_bytes)).max(8 << 20);
    // the bytes a receiver reads jump when a loss is repaired (the data held
    // out of order becomes readable at once), so the window spans many round trips
    let window = Duration::from_secs_f64(seconds.max(20.0 * rtt).min(12.0));
    let tcp = tcp_rate(&a, &b, B_ADDR, buf, warmup, window)?;
    let tcp_health = super::health(&name).unwrap_or_default().since(&after);
    drop(guard);

    progress("delay table");
    let table = delay_table(&name, rate, delay_ns, queue_bytes, baseline)?;
    let by_round_trip = match (half_untouched, &table.untouched) {
        (Some((kept, half_left_out)), Some((table_kept, table_left_out))) => Some(ByRoundTrip {
            left_out: half_left_out + table_left_out,
            counted: half_counted + table.samples as u64,
            delay_error_median_ns: added(&kept, 0.5),
            delay_error_p99_ns: added_p99(&kept),
            table_errors_ns: table_kept.clone(),
        }),
        _ => None,
    };

    let d: Health = after.since(&before);
    // the overload's hold-ups against the second its rate was counted
    // over, not the phases' 4 s: CI once counted 4.2% short across a hold-up
    // of a whole-machine pause that was under 1% of the 4 s
    let over_health = after.since(&over.health0);
    let over_held = over_health.held_up_beyond(over.counted_s).or_else(|| over_health.starved_beyond(over.counted_s));
    let loaded = &over.loaded;
    let (sink_drops, sink_drops_datagrams) = (over.sink_drops, over.sink_drops_datagrams);
    let mut p = Point {
        rate_bps: rate,
        delay_ns,
        queue_bytes,
        offered_rate_bps: over.offered,
        measured_rate_bps: over.measured,
        rate_error: over.measured / rate as f64 - 1.0,
        baseline_rtt_ns: baseline,
        baseline_rtt_p99_ns: baseline_p99,
        delay_error_median_ns: d_med,
        delay_error_p99_ns: d_p99,
        loaded_rtt_median_ns: quantile_sorted(loaded, 0.5).unwrap_or(f64::NAN),
        loaded_rtt_p99_ns: quantile_sorted(loaded, 0.99).unwrap_or(f64::NAN),
        loaded_rtt_max_ns: loaded.last().copied().unwrap_or(0) as f64,
        queue_bound_ns: bound,
        emulator_cpu_percent: over.cpu_percent,
        tcp_rate_bps: tcp.rate_bps,
        tcp_rate_error: tcp.rate_bps / rate as f64 - 1.0,
        tcp_retransmits: tcp.retransmits,
        tcp_window_limited: tcp.window_limited,
        tcp_receive_window_bytes: tcp.receive_window,
        tcp_receiver_threshold_bytes: tcp.receiver_threshold,
        tcp_memory_pressure: tcp.memory_pressure,
        table_errors_ns: table.errors_ns,
        table_samples: table.samples,
        sink_drops,
        sink_drops_datagrams,
        invalid: d
            .invalid_because()
            .or_else(|| over_held.map(|w| format!("during the overload: {w}")))
            .or_else(|| {
                (sink_drops_datagrams * 1000 > over.count.max(1)).then(|| {
                    format!(
                        "the receiving host dropped about {sink_drops_datagrams} of the overload's {} datagrams \
                         ({sink_drops} receives' worth) for want of room in its socket (a busy CPU): the rate it \
                         counted is not the emulator's",
                        over.count + sink_drops_datagrams
                    )
                })
            })
            .or_else(|| tcp_health.invalid_because().map(|w| format!("during the TCP flow: {w}")))
            .or_else(|| table.health.invalid_because().map(|w| format!("during the delay table: {w}"))),
        lag_p99_us: d.lag_quantile_us(0.99),
        queue_wait_p99_us: d.queue_waits.quantile_us(0.99),
        queue_wait_max_us: d.queue_waits.max_ns / 1000,
        overload_queue_wait_p99_us: over_health.queue_waits.quantile_us(0.99),
        targets_met: false,
        tries: 1,
        earlier_invalid: Vec::new(),
        by_round_trip,
    };
    p.targets_met = p.meets_targets();
    Ok(p)
}

/// [`point`], measured again while it comes out INVALID, `tries` times in
/// all at most, as the survey measures its points again: a point whose
/// emulator the machine held up says how often that happens here (the
/// earlier tries' verdicts are kept beside the last, and the table says
/// so), and a later try says what the lab does when it is not held up.
pub fn point_tried(
    rate: u64,
    delay_ns: u64,
    seconds: f64,
    tries: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<Point> {
    let (mut p, earlier) = tried(tries, |say| point(rate, delay_ns, seconds, say), |p| p.invalid.clone(), progress)?;
    p.tries = earlier.len() as u32 + 1;
    p.earlier_invalid = earlier;
    Ok(p)
}

/// `measure` while `invalid` says why its result is INVALID, `tries` times
/// in all at most: the last result, and the earlier ones' verdicts.
fn tried<T>(
    tries: u32,
    mut measure: impl FnMut(&mut dyn FnMut(&str)) -> Result<T>,
    invalid: impl Fn(&T) -> Option<String>,
    progress: &mut dyn FnMut(&str),
) -> Result<(T, Vec<String>)> {
    let mut earlier = Vec::new();
    loop {
        let r = measure(progress)?;
        match invalid(&r) {
            Some(why) if (earlier.len() as u32) + 1 < tries => {
                progress(&format!("INVALID ({why}); measuring it again"));
                earlier.push(why);
            }
            _ => return Ok((r, earlier)),
        }
    }
}

/// The lab's own round trip at `rate` with no delay, under half a load:
/// what every delay is measured against (its median and p99, ns).
fn baseline_rtt(name: &str, rate: u64, queue_bytes: u64) -> Result<(f64, f64)> {
    let st = bring_up(name, rate, 0, queue_bytes)?;
    let _guard = Down(name.to_string());
    let (a, b) = ab(&st)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sink = start_b(&b, stop.clone())?;
    let load = start_load(&a, B_ADDR, rate as f64 * 0.5, stop.clone(), Arc::default())?;
    let base = probe_paced(&a, B_ADDR, PACED_EVERY, Duration::from_secs(2), PACED_DRAIN);
    stop.store(true, Ordering::SeqCst);
    let _ = (sink.join(), load.join());
    let base = base?;
    let p99 = lowest_part_quantile(&base.rtts, BASELINE_PARTS, 0.99);
    let all = base.sorted();
    quantile_sorted(&all, 0.5).zip(p99).ok_or_else(|| Error::measurement("no probe came back on the baseline lab"))
}

/// Parts of the baseline's probes (in the order sent) whose p99s are taken.
const BASELINE_PARTS: usize = 4;

/// The lowest of the `p` quantiles of `rtts` cut into `parts` runs in the
/// order they were sent (all of them when too few for a part to have 100).
/// The baseline's p99 is what the delayed lab's p99 is judged against: one
/// hold-up of the machine during it (a probe every 1 ms, so a 20 ms hold-up
/// is 1% of 2 s) would raise it and make the delay line look better than
/// it is; the lowest part's leans the other way.
fn lowest_part_quantile(rtts: &[u64], parts: usize, p: f64) -> Option<f64> {
    let parts = if rtts.len() >= 100 * parts { parts } else { 1 };
    let size = rtts.len().div_ceil(parts.max(1)).max(1);
    rtts.chunks(size)
        .filter_map(|c| {
            let mut c = c.to_vec();
            c.sort_unstable();
            quantile_sorted(&c, p)
        })
        .min_by(f64::total_cmp)
}

/// What the overload found.
struct Overload {
    /// What a offered, IP bits per second.
    offered: f64,
    /// What b received, IP bits per second, over the span its kernel timed.
    measured: f64,
    /// Datagrams b received meanwhile.
    count: u64,
    /// Receives b's sockets dropped for want of room meanwhile.
    sink_drops: u64,
    /// The datagrams they held ([`dropped_datagrams`]).
    sink_drops_datagrams: u64,
    /// A probe's round trips meanwhile, sorted (ns).
    loaded: Vec<u64>,
    /// The emulator's CPU over it, percent of one.
    cpu_percent: f64,
    /// The span `measured` was counted over, s.
    counted_s: f64,
    /// The emulator's health as reported before the count began.
    health0: Health,
}

/// UDP at 1.1 x the rate from a to b (b's sink running) for `seconds`
/// once the queue is full, a probe's round trips meanwhile.
#[allow(clippy::too_many_arguments)]
fn overload(
    name: &str,
    a: &str,
    b: &str,
    rate: u64,
    delay_ns: u64,
    seconds: f64,
    drain: Duration,
    emulator: u32,
) -> Result<Overload> {
    let stop_load = Arc::new(AtomicBool::new(false));
    let _ = sink_count(b, B_ADDR);
    let cpu0 = cpu_seconds(emulator);
    let sent = Arc::new(AtomicU64::new(0));
    let load = start_load(a, B_ADDR, rate as f64 * 1.1, stop_load.clone(), sent.clone())?;
    let counted = (|| -> Result<Overload> {
        // let the queue fill, then count the steady part
        std::thread::sleep(Duration::from_secs_f64(0.5 + 2.0 * delay_ns as f64 / 1e9));
        let drops0 = udp_rcvbuf_errors(b)?;
        let health0 = super::health(name).unwrap_or_default();
        let stamp0 = sink_count(b, B_ADDR)?.stamp;
        let sent0 = sent.load(Ordering::Relaxed);
        let t0 = Instant::now();
        // one probe a millisecond whatever comes back, as at half load: a
        // ping-pong across a full queue took 13 round trips in 3 s at 50
        // ms (each lost one waiting out its timeout), whose p99 was its worst
        let loaded = probe_paced(a, B_ADDR, PACED_EVERY, Duration::from_secs_f64(seconds), drain)?.sorted();
        let got = sink_count(b, B_ADDR)?;
        let (bytes, count, stamp1) = (got.bytes, got.datagrams, got.stamp);
        let dt = t0.elapsed().as_secs_f64();
        let offered = (sent.load(Ordering::Relaxed) - sent0) as f64 * ((LOAD_PAYLOAD + 28) * 8) as f64 / dt;
        let sink_drops = udp_rcvbuf_errors(b)?.saturating_sub(drops0);
        // the count's span as the receiving kernel timed it, else this thread's
        let counted_s = if stamp0 > 0 && stamp1 > stamp0 { (stamp1 - stamp0) as f64 / 1e9 } else { dt };
        let cpu1 = cpu_seconds(emulator);
        Ok(Overload {
            offered,
            measured: (bytes + 28 * count) as f64 * 8.0 / counted_s,
            count,
            sink_drops,
            sink_drops_datagrams: dropped_datagrams(sink_drops, &got),
            loaded,
            cpu_percent: (cpu1 - cpu0) / dt * 100.0,
            counted_s,
            health0,
        })
    })();
    stop_load.store(true, Ordering::SeqCst);
    let _ = load.join();
    counted
}

/// What the delay table's phase found: each quantile's error (the
/// probability, and the measured quantile less the table's, ns) over all
/// its round trips, and over those no late window touched with how many
/// were left out (None when the windows were not known); how many round
/// trips; the emulator's health over it.
struct TableErrors {
    errors_ns: Vec<(f64, f64)>,
    untouched: Option<(Vec<(f64, f64)>, u64)>,
    samples: usize,
    health: Health,
}

/// A lab whose a -> b delay draws from an exponential table: how its
/// quantiles came out.
fn delay_table(name: &str, rate: u64, delay_ns: u64, queue_bytes: u64, baseline: f64) -> Result<TableErrors> {
    let table = exponential_table(TABLE_MEAN_NS);
    let st = bring_up_with(name, rate, delay_ns, queue_bytes, Jitter::Table { q_ns: table.clone() })?;
    let _guard = Down(name.to_string());
    let (a, b) = ab(&st)?;
    let before = super::health(name).unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let sink = start_b(&b, stop.clone())?;
    let table_time = Duration::from_millis((2_000 + 20 * delay_ns / 1_000_000).min(6_000));
    let drawn = probe_many(&a, B_ADDR, Duration::from_millis(5), table_time, 16);
    stop.store(true, Ordering::SeqCst);
    let _ = sink.join();
    let windows = late_windows(name, &before);
    let health = super::health(name).unwrap_or_default();
    let drawn = drawn?;
    let errors = |sorted: &[u64]| -> Vec<(f64, f64)> {
        [0.1, 0.5, 0.9, 0.99]
            .iter()
            .filter_map(|&p| {
                let got = quantile_sorted(sorted, p)? - baseline - 2.0 * delay_ns as f64;
                Some((p, got - gridperf_core::lab::emu::table_quantile(&table, p)))
            })
            .collect()
    };
    let untouched = windows.map(|w| {
        let (kept, left_out) = drawn.untouched(&w);
        (errors(&kept), left_out)
    });
    let samples = drawn.rtts.len();
    Ok(TableErrors { errors_ns: errors(&drawn.sorted()), untouched, samples, health })
}

/// A calibration point as kept for the labs that come after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub rate_bps: u64,
    pub delay_ns: u64,
    /// Calibrated as root (a real-time emulator) or not.
    pub root: bool,
    /// When, "YYYY-MM-DD HH:MM:SS UTC".
    pub at: String,
    /// The rate test held: the load overloaded the link, the rate was
    /// within 1%, and the emulator kept up.
    pub rate_held: bool,
    pub targets_met: bool,
    /// Why the rate test did not hold, if it did not.
    pub why: Option<String>,
}

impl Point {
    /// Whether the rate test held: the load overloaded the link, the rate
    /// was within 1%, and the emulator kept up.
    pub fn rate_held(&self) -> bool {
        !self.load_short() && self.rate_error.abs() <= 0.01 && self.invalid.is_none()
    }

    fn kept(&self, root: bool, at: &str) -> Kept {
        let why = if self.rate_held() {
            None
        } else if let Some(w) = &self.invalid {
            Some(w.clone())
        } else if self.load_short() {
            Some("the load did not overload the link".to_string())
        } else {
            Some(format!("rate {:+.2}%", self.rate_error * 100.0))
        };
        Kept {
            rate_bps: self.rate_bps,
            delay_ns: self.delay_ns,
            root,
            at: at.to_string(),
            rate_held: self.rate_held(),
            targets_met: self.targets_met,
            why,
        }
    }
}

/// Where `lab calibrate` keeps what it found on this machine:
/// `$XDG_STATE_HOME/gridperf/lab-calibration.json`, else `~/.local/state/...`.
pub fn kept_path() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".local/state")))?;
    Some(base.join("gridperf").join("lab-calibration.json"))
}

/// What was kept (nothing when there is no file or it is not ours).
pub fn kept() -> Vec<Kept> {
    #[derive(Deserialize)]
    struct File {
        points: Vec<Kept>,
    }
    kept_path()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<File>(&b).ok())
        .map(|f| f.points)
        .unwrap_or_default()
}

/// Keeps new points, each replacing an older one of the same rate, delay and privilege.
pub fn keep(points: &[Point], root: bool, at: &str) -> Result<std::path::PathBuf> {
    let path = kept_path().ok_or_else(|| Error::internal("no HOME or XDG_STATE_HOME to keep the calibration in"))?;
    let mut all = kept();
    for p in points {
        all.retain(|k| !(k.rate_bps == p.rate_bps && k.delay_ns == p.delay_ns && k.root == root));
        all.push(p.kept(root, at));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::internal(format!("{}: {e}", dir.display())))?;
    }
    super::write_atomic(&path, &serde_json::json!({ "schema": "gridperf.lab-calibration-kept/1", "points": all }))?;
    Ok(path)
}

/// What to say before a lab whose fastest link runs at `rate` comes up,
/// from what calibration found on this machine with the same privilege:
/// nothing when a calibration at that rate or above held its rate (or
/// there is none to go by); that it did not hold when one at that rate or
/// below failed; else that the rate was not tried, with the highest that
/// held and the nearest above that did not. A failure above the rate says
/// nothing of the rate itself: a failed 10 Gbit/s calibration once warned
/// every 100 Mbit/s lab that it might come out INVALID.
pub fn advice(kept: &[Kept], rate: u64, root: bool) -> Option<String> {
    use gridperf_core::units::fmt_bps;
    let mine: Vec<&Kept> = kept.iter().filter(|k| k.root == root).collect();
    if mine.iter().any(|k| k.rate_bps >= rate && k.rate_held) {
        return None;
    }
    let who = if root { "as root" } else { "without root (no real-time priority)" };
    let why = |k: &Kept| format!("{} ({}): {}", fmt_bps(k.rate_bps as f64), k.at, k.why.as_deref().unwrap_or("missed"));
    // a failure that a higher rate holding belies says nothing either
    let held_up_to = mine.iter().filter(|k| k.rate_held).map(|k| k.rate_bps).max().unwrap_or(0);
    let failed = |k: &&&Kept| !k.rate_held && k.rate_bps > held_up_to;
    if let Some(k) = mine.iter().filter(failed).filter(|k| k.rate_bps <= rate).max_by_key(|k| k.rate_bps) {
        return Some(format!(
            "the calibration of this machine's lab {who} did not hold its rate at {}: this run at {} may come out \
             INVALID; try a lower rate, or a quieter machine",
            why(k),
            fmt_bps(rate as f64)
        ));
    }
    let best = mine.iter().filter(|k| k.rate_held).max_by_key(|k| k.rate_bps)?;
    let above = mine
        .iter()
        .filter(failed)
        .filter(|k| k.rate_bps > rate)
        .min_by_key(|k| k.rate_bps)
        .map(|k| format!(" (it did not hold at {})", why(k)))
        .unwrap_or_default();
    Some(format!(
        "this machine's lab was calibrated {who} up to {} ({}){above}; {} was not tried: `gridperf lab calibrate \
         --rates {} --delays 5ms` says whether it can be emulated here",
        fmt_bps(best.rate_bps as f64),
        best.at,
        fmt_bps(rate as f64),
        // as --rates takes it: 10G, 2500M
        match rate {
            r if r % 1_000_000_000 == 0 => format!("{}G", r / 1_000_000_000),
            r if r % 1_000_000 == 0 => format!("{}M", r / 1_000_000),
            r => r.to_string(),
        }
    ))
}

/// [`advice`] for a lab about to come up, from what is kept.
pub fn advice_for(spec: &LabSpec) -> Option<String> {
    let rate = super::fastest_rate(spec)?;
    advice(&kept(), rate, crate::host::is_root())
}

/// Takes a lab down when dropped.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = super::down(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_point_is_measured_again_up_to_its_tries_and_its_earlier_verdicts_kept() {
        let said = std::cell::RefCell::new(Vec::new());
        let mut say = |s: &str| said.borrow_mut().push(s.to_string());
        // INVALID twice, then valid: three tries, two verdicts kept
        let mut outcomes = vec![None, Some("held up"), Some("paused")];
        let (last, earlier) =
            tried(3, |_| Ok(outcomes.pop().expect("no more than 3 tries")), |r| r.map(String::from), &mut say)
                .expect("tried");
        assert_eq!((last, earlier), (None, vec!["paused".to_string(), "held up".to_string()]));
        assert_eq!(said.borrow().len(), 2, "{:?}", said.borrow());
        // INVALID every time: the last try's INVALID is the result, after exactly `tries`
        let mut n = 0;
        let (last, earlier) = tried(
            2,
            |_| {
                n += 1;
                Ok(Some("held up"))
            },
            |r| r.map(String::from),
            &mut |_| {},
        )
        .expect("tried");
        assert_eq!((n, last, earlier.len()), (2, Some("held up"), 1));
        // one try: never again; an error ends it at once
        let (_, earlier) = tried(1, |_| Ok(Some("x")), |r| r.map(String::from), &mut |_| {}).expect("tried");
        assert!(earlier.is_empty());
        let e = tried(3, |_| Err::<Option<&str>, _>(Error::measurement("gone")), |r| r.map(String::from), &mut |_| {});
        assert!(e.is_err());
    }

    #[test]
    fn the_baselines_p99_is_its_lowest_parts_so_a_hold_up_in_it_cannot_flatter_the_delay_line() {
        // 2000 round trips of 100 us, 30 in a row held up to 5 ms in the third part
        let mut rtts = vec![100_000u64; 2000];
        for r in &mut rtts[1100..1130] {
            *r = 5_000_000;
        }
        let all = {
            let mut s = rtts.clone();
            s.sort_unstable();
            quantile_sorted(&s, 0.99).expect("p99")
        };
        assert!(all > 1_000_000.0, "over all of them the hold-up is the p99: {all}");
        assert_eq!(lowest_part_quantile(&rtts, 4, 0.99), Some(100_000.0));
        // too few for parts of 100: all of them, as one
        assert_eq!(lowest_part_quantile(&rtts[1000..1200], 4, 0.99), Some(5_000_000.0));
        assert_eq!(lowest_part_quantile(&[], 4, 0.99), None);
    }

    #[test]
    fn the_floor_is_the_lowest_slices_median() {
        // a slow first slice (no spinning yet), then two settled ones
        let mut rtts = vec![150_000u64; 400];
        rtts.extend(vec![70_000u64; 800]);
        rtts.extend([65_000u64, 66_000, 200_000].repeat(300));
        let m = settled_median(&rtts, 50_000_000).expect("median");
        assert_eq!(m, 66_000.0);
        // too few for a slice: the median of all
        assert_eq!(settled_median(&[3, 1, 2], 50_000_000), Some(2.0));
        assert_eq!(settled_median(&[], 50_000_000), None);
    }

    #[test]
    fn a_hosts_udp_receive_buffer_drops_are_read_from_its_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\n\
                    Udp: 4410233 3 712 18 709 0 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\n\
                    UdpLite: 0 0 0 0 5 0 0\n";
        assert_eq!(rcvbuf_errors(snmp), Some(709));
        assert_eq!(rcvbuf_errors("Udp: InDatagrams\nUdp: 4\n"), None);
        assert_eq!(rcvbuf_errors(""), None);
        // and this machine's own, as a lab host's is read
        let own = std::fs::read_to_string("/proc/thread-self/net/snmp").expect("snmp");
        assert!(rcvbuf_errors(&own).is_some(), "{own}");
    }

    #[test]
    fn a_sockets_drops_are_counted_as_the_runs_of_datagrams_they_were() {
        // what this machine's kernel does (unshare -n, a UDP_GRO socket on
        // loopback with a 256 KiB buffer, 200 sends of 44 x 1472 bytes with
        // UDP_SEGMENT): 8,492 datagrams lost, RcvbufErrors +193, 44.0 each
        let got = |datagrams, receives| SinkCount { bytes: datagrams * 1472, datagrams, receives, stamp: 0 };
        assert_eq!(dropped_datagrams(193, &got(308, 7)), 8492);
        // the CI point that went unsaid: 314 drops beside ~420,000 datagrams
        // in runs of ~40 are 3%, over the rule's 1 in 1000; as one each they were not
        let ci = got(420_000, 10_500);
        assert_eq!(dropped_datagrams(314, &ci), 12_560);
        assert!(dropped_datagrams(314, &ci) * 1000 > ci.datagrams && 314 * 1000 < ci.datagrams);
        // no GRO: a receive is a datagram
        assert_eq!(dropped_datagrams(5, &got(1000, 1000)), 5);
        assert_eq!(dropped_datagrams(0, &got(1000, 10)), 0);
        // nothing received to size them by: each the most a run holds
        assert_eq!(dropped_datagrams(2, &SinkCount::default()), 2 * 44);
    }

    fn k(rate_bps: u64, root: bool, rate_held: bool) -> Kept {
        Kept {
            rate_bps,
            delay_ns: 5_000_000,
            root,
            at: "2026-11-26 01:00:00 UTC".into(),
            rate_held,
            targets_met: rate_held,
            why: (!rate_held).then(|| "the load did not overload the link".into()),
        }
    }

    #[test]
    fn a_lab_beyond_what_calibration_held_is_said_before_its_run() {
        let kept = [k(1_000_000_000, true, true), k(10_000_000_000, true, false), k(10_000_000_000, false, true)];
        // held at that rate or above: nothing to say
        assert_eq!(advice(&kept, 1_000_000_000, true), None);
        assert_eq!(advice(&kept, 500_000_000, true), None);
        // between what held (1G) and what did not (10G): not tried, both said
        let w = advice(&kept, 5_000_000_000, true).expect("said");
        assert!(w.contains("up to 1.00 Gbit/s") && w.contains("--rates 5G"), "{w}");
        assert!(w.contains("did not hold at 10.00 Gbit/s (2026-11-26") && w.contains("did not overload"), "{w}");
        // failed at that rate or below: it may come out INVALID, with why and when
        let w = advice(&kept, 10_000_000_000, true).expect("said");
        assert!(w.contains("did not hold its rate at 10.00 Gbit/s (2026-11-26 01:00:00 UTC)"), "{w}");
        assert!(w.contains("the load did not overload the link") && w.contains("may come out INVALID"), "{w}");
        let w = advice(&[k(1_000_000_000, true, false)], 2_500_000_000, true).expect("said");
        assert!(w.contains("at 1.00 Gbit/s") && w.contains("this run at 2.50 Gbit/s"), "{w}");
        // ...unless a higher rate held since
        let w = advice(&[k(1_000_000_000, true, false), k(2_500_000_000, true, true)], 5_000_000_000, true);
        assert!(w.as_deref().is_some_and(|w| w.contains("up to 2.50 Gbit/s") && !w.contains("did not")), "{w:?}");
        // a failure above the rate alone says nothing of it
        assert_eq!(advice(&[k(10_000_000_000, true, false)], 100_000_000, true), None);
        // each privilege by its own calibration: without root 10G held
        assert_eq!(advice(&kept, 10_000_000_000, false), None);
        // above anything tried: the highest that held, and how to try
        let w = advice(&[k(1_000_000_000, true, true)], 2_500_000_000, true).expect("said");
        assert!(w.contains("up to 1.00 Gbit/s") && w.contains("--rates 2500M"), "{w}");
        // nothing kept, or nothing of this privilege: nothing to go by
        assert_eq!(advice(&[], 10_000_000_000, true), None);
        assert_eq!(advice(&[k(1_000_000_000, false, true)], 10_000_000_000, true), None);
    }
}
