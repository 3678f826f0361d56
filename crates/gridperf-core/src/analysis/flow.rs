//! Bulk-flow analysis for `gridperf stream`, without I/O: fairness across
//! parallel streams, UDP sequence accounting (loss, reordering, duplicates,
//! jitter), and the verdict that says, from a TCP_INFO timeline, what limited
//! a stream and what to change.

use serde::{Deserialize, Serialize};

/// Jain's fairness index of the streams' throughputs: (sum x)^2 / (n sum x^2).
/// 1 when all are equal, 1/n when one stream has everything. None for no
/// streams or when every stream moved nothing.
pub fn jain(x: &[f64]) -> Option<f64> {
    if x.is_empty() || !all_valid(x) {
        return None;
    }
    // The index is scale-invariant: dividing by the largest keeps the squares
    // from overflowing whatever the magnitudes.
    let max = x.iter().copied().fold(0.0_f64, f64::max);
    if max <= 0.0 {
        return None;
    }
    let (sum, sum_sq) = x.iter().fold((0.0, 0.0), |(s, q), &v| {
        let v = v / max;
        (s + v, q + v * v)
    });
    if sum_sq <= 0.0 {
        return None;
    }
    Some(sum * sum / (x.len() as f64 * sum_sq))
}

/// Throughputs are finite and non-negative; anything else makes the ratios meaningless.
fn all_valid(x: &[f64]) -> bool {
    x.iter().all(|v| v.is_finite() && *v >= 0.0)
}

/// The slowest stream's throughput over the fastest's (1 = all equal). None
/// for no streams or when the fastest moved nothing.
pub fn slowest_over_fastest(x: &[f64]) -> Option<f64> {
    if x.is_empty() || !all_valid(x) {
        return None;
    }
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = x.iter().copied().fold(f64::INFINITY, f64::min);
    if max <= 0.0 {
        return None;
    }
    Some(min / max)
}

/// One TCP_INFO sample of a stream's socket, as `gridperf stream` records
/// it (the timeline the CERN-Tokyo study drew its window figure from).
/// Counters are cumulative since the connection opened, as the kernel keeps
/// them; `t_ns` is from the start of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSample {
    pub t_ns: u64,
    /// Congestion window, in segments.
    pub cwnd: u32,
    /// Slow-start threshold, in segments (the kernel's "infinite" is 2^31-1).
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    /// Segments sent and not yet acknowledged (bytes in flight = unacked x mss).
    pub unacked: u32,
    pub mss: u32,
    /// Cumulative retransmitted segments.
    pub total_retrans: u32,
    /// Cumulative data segments sent.
    pub data_segs_out: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// Bytes per second.
    pub delivery_rate: u64,
    pub pacing_rate: u64,
    /// Cumulative time (us) the connection had data in flight (busy), and of
    /// that, limited by the receiver's window and by the send buffer.
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// The peer's advertised receive window, in bytes (tcpi_snd_wnd).
    pub snd_wnd: u32,
    /// The kernel marked the last delivery-rate sample application-limited
    /// (tcpi_delivery_rate_app_limited): the sender had nothing more to send.
    #[serde(default)]
    pub app_limited: bool,
}

/// What the verdict knows besides the samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerdictContext {
    /// The stream's achieved throughput over the run, bits per second.
    pub throughput_bps: f64,
    /// The run's elapsed time, ns (application-limited = busy far less than this).
    pub elapsed_ns: u64,
    /// The path's bottleneck rate, when known (the lab's setting, or --expect).
    pub path_rate_bps: Option<u64>,
    /// The receiver's and sender's buffer ceilings, when known: the third
    /// field of net.ipv4.tcp_rmem / tcp_wmem, in bytes.
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// The socket buffer set with -w, if any (disables autotuning).
    pub window_requested: Option<u64>,
    /// With -w, the ceiling on it: net.core.rmem_max at the receiver and
    /// net.core.wmem_max at the sender (global, not per namespace).
    #[serde(default)]
    pub core_rmem_max: Option<u64>,
    #[serde(default)]
    pub core_wmem_max: Option<u64>,
    /// The rate the sender was paced at (--pacing, a sweep's delay), if any.
    #[serde(default)]
    pub pacing_bps: Option<u64>,
    /// Streams sharing the path in this stream's direction (0 or 1: alone):
    /// each needs only its share of the BDP in its window.
    #[serde(default)]
    pub streams: u32,
}

/// What limited a stream, most binding first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// The receiver's advertised window (tcpi_rwnd_limited).
    ReceiveWindow,
    /// The receiver's window closed because its application read too slowly,
    /// not because its buffer is too small for the path.
    ReceiverApplication,
    /// The sender's socket buffer (tcpi_sndbuf_limited).
    SendBuffer,
    /// The congestion window, with retransmissions: the path loses packets.
    CongestionLoss,
    /// The congestion window, without loss worth the name: the path's rate
    /// (or the congestion control's estimate of it).
    Congestion,
    /// The sender had nothing to send much of the time (a gap, pacing, a
    /// slow disk or CPU).
    Application,
    /// Too few samples to say.
    Unknown,
}

/// A stream's verdict: the limit, the figure that supports it, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub limit: Limit,
    /// The share of the run the limit held (0..1), where it is a time share.
    pub share: Option<f64>,
    /// Retransmitted segments over data segments sent (0..1).
    pub retrans_ratio: f64,
    /// Bandwidth-delay product at the path's rate (if known) and min RTT, bytes.
    pub bdp_bytes: Option<u64>,
    /// The verdict in words, with the figure and the advice, e.g. "limited by
    /// the receiver's window 71% of the time: raise the receiver's tcp_rmem
    /// maximum to at least 2 x BDP = 67 MB".
    pub text: String,
}

/// Reads the verdict from a sender's TCP_INFO timeline (first and last
/// samples give the cumulative counters over the run; the timeline gives the
/// RTT and window).
// Long by design: the limits a sender can meet, tried in their order of
// precedence over one set of counters, the first that held the stream back
// long enough being its verdict.
pub fn verdict(samples: &[TcpSample], ctx: &VerdictContext) -> Verdict {
    let min_rtt_us =
        min_nonzero(samples.iter().map(|s| s.min_rtt_us)).or_else(|| min_nonzero(samples.iter().map(|s| s.srtt_us)));
    let bdp_bytes = match (ctx.path_rate_bps, min_rtt_us) {
        (Some(rate), Some(rtt)) => {
            Some(u64::try_from(u128::from(rate) * u128::from(rtt) / 8_000_000).unwrap_or(u64::MAX))
        }
        _ => None,
    };

    let (first, last) = match (samples.first(), samples.last()) {
        (Some(f), Some(l)) if samples.len() >= 2 => (f, l),
        _ => return unknown(bdp_bytes),
    };
    let d_busy = last.busy_us.saturating_sub(first.busy_us);
    let d_rwnd = last.rwnd_limited_us.saturating_sub(first.rwnd_limited_us);
    let d_sndbuf = last.sndbuf_limited_us.saturating_sub(first.sndbuf_limited_us);
    // The kernel's segment counters are u32 and wrap (4 G segments is a few
    // TB): summing the wrapping steps between samples survives that, and
    // equals last - first when they don't wrap.
    let d_retrans = wrapping_delta(samples, |s| s.total_retrans);
    let d_segs = wrapping_delta(samples, |s| s.data_segs_out);
    if d_busy == 0 && d_segs == 0 {
        return unknown(bdp_bytes);
    }
    // too little to judge: a few segments say nothing of what limits a stream
    if d_segs < MIN_VERDICT_SEGMENTS || ctx.elapsed_ns < MIN_VERDICT_NS {
        return Verdict {
            text: format!(
                "too short to tell what limited it ({d_segs} segments in {:.0} ms: a verdict needs {MIN_VERDICT_SEGMENTS} \
                 and {} ms)",
                ctx.elapsed_ns as f64 / 1e6,
                MIN_VERDICT_NS / 1_000_000
            ),
            ..unknown(bdp_bytes)
        };
    }

    // a retransmission or two is no loss rate to speak of
    let retrans_ratio =
        if d_segs == 0 || d_retrans < MIN_LOSSES { 0.0 } else { (d_retrans as f64 / d_segs as f64).clamp(0.0, 1.0) };
    let share_of_busy = |d: u64| if d_busy == 0 { 0.0 } else { (d as f64 / d_busy as f64).clamp(0.0, 1.0) };
    // the kernel's rwnd-limited clock runs only when a send finds the window
    // shut; a sender paced to what the window lets through (BBR) rarely
    // does. The samples show it directly: data in flight up to the window.
    let at_window = samples
        .iter()
        .skip(1)
        .filter(|s| s.snd_wnd > 0 && u64::from(s.unacked) * u64::from(s.mss) * 100 >= u64::from(s.snd_wnd) * 85)
        .count();
    let sampled_share = at_window as f64 / (samples.len() - 1) as f64;
    let rwnd_share = share_of_busy(d_rwnd).max(sampled_share);
    // the kernel's sndbuf-limited clock misses a sender whose send buffer
    // holds all it may while its write queue runs dry (a 4 MiB buffer at
    // 35 ms: 0 us on the clock, a median 72% of the buffer in flight, below cwnd).
    // The samples show it: app-limited, below cwnd, with the data in flight
    // filling at least half of the buffer's ceiling.
    let send_ceiling = ctx.window_requested.map(|w| 2 * ctx.core_wmem_max.map_or(w, |m| w.min(m))).or(ctx.wmem_max);
    let sampled_sndbuf = match send_ceiling.filter(|&c| c > 0) {
        Some(ceiling) => {
            let held = samples
                .iter()
                .skip(1)
                .filter(|s| {
                    let in_flight = u64::from(s.unacked) * u64::from(s.mss);
                    s.app_limited && s.unacked < s.cwnd && in_flight * 2 >= ceiling
                })
                .count();
            held as f64 / (samples.len() - 1) as f64
        }
        None => 0.0,
    };
    let sndbuf_share = share_of_busy(d_sndbuf).max(sampled_sndbuf);
    // busy_us of 0 while segments went out means the kernel does not report
    // the busy time (before 4.10): that is no evidence of an idle sender.
    let busy_share = if ctx.elapsed_ns > 0 && d_busy > 0 {
        Some((d_busy as f64 * 1000.0 / ctx.elapsed_ns as f64).clamp(0.0, 1.0))
    } else {
        None
    };

    let mut v = Verdict { limit: Limit::Unknown, share: None, retrans_ratio, bdp_bytes, text: String::new() };
    // the largest window the receiver advertised, over the RTT: what its
    // buffer allows; far above the throughput, a closed window means the
    // receiving application did not keep up
    let widest = samples.iter().map(|s| u64::from(s.snd_wnd)).max().unwrap_or(0);
    let window_allows = min_rtt_us.filter(|&r| r > 0).map(|r| widest as f64 * 8.0 / (r as f64 / 1e6));
    let slow_reader = window_allows.is_some_and(|w| ctx.throughput_bps > 0.0 && w >= 2.0 * ctx.throughput_bps);
    let at_link = ctx.path_rate_bps.is_some_and(|r| r > 0 && ctx.throughput_bps >= 0.9 * r as f64);
    // paced below the path and carried near its pace: the pacing is the limit
    let paced = ctx.pacing_bps.filter(|&p| {
        p > 0 && ctx.throughput_bps >= 0.9 * p as f64 && ctx.path_rate_bps.is_none_or(|r| (p as f64) < 0.9 * r as f64)
    });
    if let Some(p) = paced {
        v.limit = Limit::Application;
        v.share = busy_share;
        let share = ctx.throughput_bps / p as f64;
        v.text = if share <= 1.1 {
            format!(
                "paced: the sender kept to its pacing rate of {} ({} of it); pacing, not the path, set the rate",
                crate::units::fmt_bps_short(p as f64),
                fmt_pct(share)
            )
        } else {
            // the kernel paces whole segments, and lets the first window out at once: on a short
            // stream, or with large segments at a low rate, that start is a large part of it
            format!(
                "paced, and above it: {} of its pacing rate of {} (the first window leaves unpaced, and the \
                 kernel paces whole segments: a longer stream, or a rate well above a segment a second, comes \
                 closer); pacing, not the path, set the rate",
                fmt_pct(share),
                crate::units::fmt_bps_short(p as f64)
            )
        };
    } else if at_link && retrans_ratio < 0.001 {
        let rate = ctx.path_rate_bps.unwrap_or(1);
        v.limit = Limit::Congestion;
        v.text = format!(
            "the path's rate: {} of its {} without loss worth the name",
            fmt_pct(ctx.throughput_bps / rate as f64),
            crate::units::fmt_bps_short(rate as f64)
        );
    } else if rwnd_share >= 0.2 && slow_reader {
        v.limit = Limit::ReceiverApplication;
        v.share = Some(rwnd_share);
        v.text = format!(
            "the receiver's window was closed {} of the time, though it opens to {} ({} at RTT {}): \
             the receiving application did not read fast enough (a CPU-bound receiver), not a buffer too small",
            fmt_pct(rwnd_share),
            crate::units::fmt_bytes_short(widest),
            crate::units::fmt_bps_short(window_allows.unwrap_or(0.0)),
            fmt_rtt_us(min_rtt_us.unwrap_or(0))
        );
    } else if rwnd_share >= 0.2 {
        v.limit = Limit::ReceiveWindow;
        v.share = Some(rwnd_share);
        let window = last_nonzero(samples.iter().map(|s| u64::from(s.snd_wnd)));
        v.text = format!("limited by the receiver's window {} of the time", fmt_pct(rwnd_share))
            + &buffer_advice(
                Buffer {
                    side: "receiver's",
                    sysctl: "tcp_rmem",
                    max: ctx.rmem_max,
                    in_use: "the window in use",
                    core_sysctl: "net.core.rmem_max",
                    core_max: ctx.core_rmem_max,
                },
                bdp_bytes,
                window,
                min_rtt_us,
                ctx.window_requested,
                ctx.streams,
            );
    } else if sndbuf_share >= 0.2 {
        v.limit = Limit::SendBuffer;
        v.share = Some(sndbuf_share);
        let in_flight = samples.iter().map(|s| u64::from(s.unacked) * u64::from(s.mss)).max().filter(|&b| b > 0);
        v.text = format!("limited by the send buffer {} of the time", fmt_pct(sndbuf_share))
            + &buffer_advice(
                Buffer {
                    side: "sender's",
                    sysctl: "tcp_wmem",
                    max: ctx.wmem_max,
                    in_use: "the data in flight",
                    core_sysctl: "net.core.wmem_max",
                    core_max: ctx.core_wmem_max,
                },
                bdp_bytes,
                in_flight,
                min_rtt_us,
                ctx.window_requested,
                ctx.streams,
            );
    } else if let Some(busy) = busy_share.filter(|&b| b < 0.5) {
        v.limit = Limit::Application;
        v.share = Some(busy);
        v.text = format!(
            "application-limited: the sender had data in flight only {} of the time \
             (a gap between writes, pacing, or a slow source)",
            fmt_pct(busy)
        );
    } else if retrans_ratio >= 0.001 {
        v.limit = Limit::CongestionLoss;
        v.share = Some((1.0 - rwnd_share - sndbuf_share).clamp(0.0, 1.0));
        v.text = format!(
            "cwnd-limited with {}% retransmissions: the path loses packets (or its queue overflows)",
            crate::units::fmt_sig(retrans_ratio * 100.0, 2)
        );
    } else {
        v.limit = Limit::Congestion;
        v.text = "cwnd-limited without loss: the congestion control set the pace".to_string();
        if let Some(rate) = ctx.path_rate_bps.filter(|&r| r > 0) {
            if ctx.throughput_bps >= 0.9 * rate as f64 {
                v.text += &format!(
                    ", at {} of the path's rate ({})",
                    fmt_pct(ctx.throughput_bps / rate as f64),
                    crate::units::fmt_bps_short(rate as f64)
                );
            }
        }
    }
    v
}

/// What a verdict needs: segments sent, and time (below, it says it cannot tell).
pub const MIN_VERDICT_SEGMENTS: u64 = 100;
pub const MIN_VERDICT_NS: u64 = 200_000_000;
/// Retransmissions below this are not read as a path that loses packets.
pub const MIN_LOSSES: u64 = 3;

fn unknown(bdp_bytes: Option<u64>) -> Verdict {
    Verdict {
        limit: Limit::Unknown,
        share: None,
        retrans_ratio: 0.0,
        bdp_bytes,
        text: "too few TCP_INFO samples to judge what limited the stream".to_string(),
    }
}

/// Which buffer limited the stream, for [`buffer_advice`].
struct Buffer {
    /// "receiver's" or "sender's".
    side: &'static str,
    sysctl: &'static str,
    /// The sysctl's current maximum, when known.
    max: Option<u64>,
    /// What `cap` measures, e.g. "the window in use".
    in_use: &'static str,
    /// The ceiling on a -w buffer: net.core.rmem_max or wmem_max.
    core_sysctl: &'static str,
    core_max: Option<u64>,
}

/// ": raise the ... maximum to at least 2 x BDP = ..." when the BDP is
/// known; otherwise what the buffer in use caps the stream at.
fn buffer_advice(
    b: Buffer,
    bdp: Option<u64>,
    cap: Option<u64>,
    rtt_us: Option<u32>,
    window_requested: Option<u64>,
    streams: u32,
) -> String {
    let now = b.max.map(|m| format!(" (now {})", crate::units::fmt_bytes_short(m))).unwrap_or_default();
    // a buffer set with -w is not autotuned: tcp_rmem / tcp_wmem do not
    // apply, the kernel doubles the request and caps it at net.core.*_max
    if let (Some(w), Some(bdp)) = (window_requested, bdp) {
        let core = b.core_max.map(|m| format!(" (now {})", crate::units::fmt_bytes_short(m))).unwrap_or_default();
        // n streams fill the path with a window of BDP / n each
        let need = if streams > 1 {
            format!(
                "its share of the BDP, {} ({} over {streams} streams)",
                crate::units::fmt_bytes_short(bdp.div_ceil(streams as u64)),
                crate::units::fmt_bytes_short(bdp)
            )
        } else {
            format!("the BDP, {}", crate::units::fmt_bytes_short(bdp))
        };
        return format!(
            ": -w {} makes a window of about that size; use -w of at least {need}, with {} at least that{core}",
            crate::units::fmt_bytes_short(w),
            b.core_sysctl
        );
    }
    if let Some(bdp) = bdp {
        let (bdp, of) = if streams > 1 {
            (
                bdp.div_ceil(streams as u64),
                format!(" (the BDP, {}, over {streams} streams)", crate::units::fmt_bytes_short(bdp)),
            )
        } else {
            (bdp, String::new())
        };
        let what = if streams > 1 { "2 x its share of the BDP" } else { "2 x BDP" };
        let mut t = format!(
            ": raise the {} {} maximum to at least {what} = {}{of}{now}",
            b.side,
            b.sysctl,
            crate::units::fmt_bytes_short(bdp * 2)
        );
        if let Some(w) = window_requested {
            t += &format!(
                " and -w to at least the BDP, {} (now {})",
                crate::units::fmt_bytes_short(bdp),
                crate::units::fmt_bytes_short(w)
            );
        }
        return t;
    }
    let mut t = String::from(": ");
    match (cap, rtt_us) {
        (Some(cap), Some(rtt)) => {
            let rate = cap as f64 * 8.0 / (f64::from(rtt) / 1e6);
            t += &format!(
                "{}, {} at RTT {}, caps the stream at {}; ",
                b.in_use,
                crate::units::fmt_bytes_short(cap),
                fmt_rtt_us(rtt),
                crate::units::fmt_bps_short(rate)
            );
        }
        (Some(cap), None) => t += &format!("{} is {}; ", b.in_use, crate::units::fmt_bytes_short(cap)),
        _ => {}
    }
    t += &format!("raise the {} {} maximum{now}", b.side, b.sysctl);
    if let Some(w) = window_requested {
        t += &format!(" and -w (now {})", crate::units::fmt_bytes_short(w));
    }
    t + " to lift it"
}

fn min_nonzero(it: impl Iterator<Item = u32>) -> Option<u32> {
    it.filter(|&v| v > 0).min()
}

fn last_nonzero(it: impl DoubleEndedIterator<Item = u64>) -> Option<u64> {
    it.rev().find(|&v| v > 0)
}

/// Sum of the wrapping steps of a cumulative u32 counter along the timeline.
fn wrapping_delta(samples: &[TcpSample], f: impl Fn(&TcpSample) -> u32) -> u64 {
    samples.windows(2).map(|w| u64::from(f(&w[1]).wrapping_sub(f(&w[0])))).sum()
}

/// An RTT with 3 significant digits: `150 us`, `270 ms`, `1.20 s`.
fn fmt_rtt_us(us: u32) -> String {
    crate::units::fmt_scaled(f64::from(us), &["us", "ms", "s"])
}

/// A share (0..1) as a whole percentage: `71%`.
fn fmt_pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// A UDP receiver's accounting of one stream, in bounded memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeqStats {
    /// Datagrams received, duplicates included.
    pub received: u64,
    pub bytes: u64,
    /// Datagrams that arrived after a higher sequence number had.
    pub reordered: u64,
    /// Datagrams whose sequence number had already arrived.
    pub duplicates: u64,
    /// Highest sequence number seen, if any.
    pub max_seq: Option<u64>,
    /// RFC 3550 interarrival jitter estimate, ns (J += (|D| - J) / 16).
    pub jitter_ns: f64,
    /// Distinct sequence numbers received.
    #[serde(default)]
    pub distinct: u64,
    /// Times a datagram arrived beyond the next expected number: each one
    /// opens a run of lost (or, on a reordering path, late) numbers, so that
    /// lost / gaps is the mean loss burst.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub gaps: u64,
    /// One-way transit times (receive minus send clock) relative to the
    /// first datagram's, ns: at most [`TRANSIT_SAMPLES`], spread evenly over
    /// the stream in the order they arrived (every datagram, then every
    /// second, fourth, ... as the stream goes on). The clocks' offset cancels,
    /// so their rise is the queue's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transit_ns: Vec<i64>,
    /// The first datagram's transit itself (receive clock minus send
    /// clock, offset included), ns: samples of two streams between the same
    /// two hosts compare once each is shifted by its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit_first_ns: Option<i64>,
}

/// The most transit samples a UDP receiver keeps per stream.
pub const TRANSIT_SAMPLES: usize = 1024;

impl SeqStats {
    /// Sequence numbers lost: expected (max_seq + 1) minus distinct received.
    /// Datagrams still in flight at the end count as lost, as in RFC 3550.
    pub fn lost(&self) -> u64 {
        match self.max_seq {
            // A peer that sends seq u64::MAX expects 2^64, which saturates.
            Some(max) => max.saturating_add(1).saturating_sub(self.distinct),
            None => 0,
        }
    }
}

/// Tracks one UDP stream's sequence numbers: which arrived (a window of the
/// last [`SeqTracker::WINDOW`] numbers below the highest; older ones that
/// arrive late count as reordered and, as nothing older is remembered, not
/// as duplicates), and the jitter from send and receive times.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    pub stats: SeqStats,
    /// Which of the last WINDOW sequence numbers (up to max_seq) arrived.
    seen: SeenRing,
    /// The previous non-duplicate datagram's transit time (recv - send), ns.
    last_transit: Option<i128>,
    /// Whether transit samples are kept, the first datagram's transit, and
    /// one sample kept every `stride`.
    keep_transit: bool,
    first_transit: Option<i128>,
    stride: u64,
    since_kept: u64,
}

/// A bitmap of WINDOW bits, bit `seq % WINDOW` for `seq`, allocated on first use.
#[derive(Clone, Default)]
struct SeenRing {
    words: Vec<u64>,
}

impl std::fmt::Debug for SeenRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: u32 = self.words.iter().map(|w| w.count_ones()).sum();
        write!(f, "SeenRing({set} of {} set)", self.words.len() * 64)
    }
}

impl SeenRing {
    const BITS: u64 = SeqTracker::WINDOW;

    fn ensure(&mut self) {
        if self.words.is_empty() {
            self.words = vec![0; (Self::BITS / 64) as usize];
        }
    }

    fn slot(seq: u64) -> (usize, u64) {
        let pos = seq % Self::BITS;
        ((pos / 64) as usize, 1u64 << (pos % 64))
    }

    fn get(&self, seq: u64) -> bool {
        let (w, m) = Self::slot(seq);
        self.words.get(w).is_some_and(|word| word & m != 0)
    }

    fn set(&mut self, seq: u64) {
        self.ensure();
        let (w, m) = Self::slot(seq);
        self.words[w] |= m;
    }

    /// Clears the bits of `count` sequence numbers from `from` on, a word at a time.
    fn clear(&mut self, from: u64, count: u64) {
        self.ensure();
        if count >= Self::BITS {
            self.words.fill(0);
            return;
        }
        let mut pos = from % Self::BITS;
        let mut left = count;
        while left > 0 {
            let bit = pos % 64;
            let take = (64 - bit).min(left);
            let mask = if take == 64 { u64::MAX } else { ((1u64 << take) - 1) << bit };
            self.words[(pos / 64) as usize] &= !mask;
            left -= take;
            pos = (pos + take) % Self::BITS;
        }
    }
}

impl SeqTracker {
    pub const WINDOW: u64 = 1 << 20;

    pub fn new() -> SeqTracker {
        SeqTracker::default()
    }

    /// A tracker that also keeps samples of the one-way transit ([`SeqStats::transit_ns`]).
    pub fn with_transit() -> SeqTracker {
        SeqTracker { keep_transit: true, ..SeqTracker::default() }
    }

    /// One datagram of `bytes`, with its header's seq and send time, received at `recv_ns`.
    pub fn record(&mut self, seq: u64, bytes: u64, send_ns: u64, recv_ns: u64) {
        let st = &mut self.stats;
        st.received += 1;
        st.bytes = st.bytes.saturating_add(bytes);
        let duplicate = match st.max_seq {
            None => {
                st.gaps += u64::from(seq > 0);
                self.seen.clear(0, Self::WINDOW);
                self.seen.set(seq);
                st.max_seq = Some(seq);
                false
            }
            Some(max) if seq > max => {
                if seq > max + 1 {
                    st.gaps += 1;
                }
                // Forget what falls out of the window: the numbers max+1..=seq
                // take the slots of max+1-WINDOW..=seq-WINDOW.
                self.seen.clear(max + 1, seq - max);
                self.seen.set(seq);
                st.max_seq = Some(seq);
                false
            }
            Some(max) if max - seq >= Self::WINDOW => {
                // Older than the window: late, and nothing says it came before.
                st.reordered += 1;
                false
            }
            Some(_) if self.seen.get(seq) => true,
            Some(_) => {
                self.seen.set(seq);
                st.reordered += 1;
                false
            }
        };
        if duplicate {
            st.duplicates += 1;
            return;
        }
        st.distinct += 1;
        let transit = i128::from(recv_ns) - i128::from(send_ns);
        if let Some(prev) = self.last_transit {
            let d = (transit - prev).unsigned_abs() as f64;
            st.jitter_ns += (d - st.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
        if self.keep_transit {
            self.sample_transit(transit);
        }
    }

    /// Keeps every `stride`-th transit; when the samples are full, every
    /// second one is dropped and the stride doubles.
    fn sample_transit(&mut self, transit: i128) {
        let first = *self.first_transit.get_or_insert(transit);
        self.stats.transit_first_ns.get_or_insert(first.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
        self.stride = self.stride.max(1);
        self.since_kept += 1;
        if self.since_kept < self.stride {
            return;
        }
        self.since_kept = 0;
        let t = &mut self.stats.transit_ns;
        if t.len() == TRANSIT_SAMPLES {
            let mut k = 0;
            t.retain(|_| {
                k += 1;
                k % 2 == 1
            });
            self.stride *= 2;
        }
        t.push((transit - first).clamp(i64::MIN as i128, i64::MAX as i128) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn jain_known_values() {
        assert_eq!(jain(&[1.0, 1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(jain(&[1.0, 0.0, 0.0, 0.0]), Some(0.25));
        assert!(close(jain(&[1.0, 2.0, 3.0, 4.0]).expect("some"), 100.0 / 120.0));
        assert_eq!(jain(&[5.0]), Some(1.0));
        // Scale-invariant, and no overflow with huge values.
        assert!(close(jain(&[1e300, 2e300, 3e300, 4e300]).expect("some"), 100.0 / 120.0));
    }

    #[test]
    fn jain_none_for_empty_zero_or_invalid() {
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
        assert_eq!(jain(&[1.0, -1.0]), None);
        assert_eq!(jain(&[1.0, f64::NAN]), None);
        assert_eq!(jain(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn slowest_over_fastest_values() {
        assert_eq!(slowest_over_fastest(&[2.0, 4.0, 8.0]), Some(0.25));
        assert_eq!(slowest_over_fastest(&[3.0, 3.0]), Some(1.0));
        assert_eq!(slowest_over_fastest(&[0.0, 5.0]), Some(0.0));
        assert_eq!(slowest_over_fastest(&[]), None);
        assert_eq!(slowest_over_fastest(&[0.0, 0.0]), None);
        assert_eq!(slowest_over_fastest(&[f64::NAN, 1.0]), None);
        assert_eq!(slowest_over_fastest(&[-1.0, 1.0]), None);
    }

    fn track(seqs: &[u64]) -> SeqTracker {
        let mut t = SeqTracker::new();
        for &s in seqs {
            t.record(s, 100, 0, 0);
        }
        t
    }

    #[test]
    fn seq_in_order_no_loss() {
        let t = track(&(0..1000).collect::<Vec<_>>());
        let s = &t.stats;
        assert_eq!((s.received, s.bytes, s.reordered, s.duplicates, s.distinct), (1000, 100_000, 0, 0, 1000));
        assert_eq!(s.max_seq, Some(999));
        assert_eq!(s.lost(), 0);
    }

    #[test]
    fn seq_nothing_received() {
        assert_eq!(SeqTracker::new().stats.lost(), 0);
        assert_eq!(SeqStats::default().lost(), 0);
    }

    #[test]
    fn seq_one_gap() {
        let s = track(&[0, 1, 3, 4]).stats;
        assert_eq!(s.lost(), 1);
        assert_eq!((s.reordered, s.duplicates), (0, 0));
        // Leading loss counts too: the first datagram to arrive was seq 2.
        assert_eq!(track(&[2, 3]).stats.lost(), 2);
    }

    #[test]
    fn seq_gaps_count_the_runs_of_lost_numbers() {
        // runs of 2, 1 and 3 lost: 6 lost in 3 runs, a mean burst of 2
        let s = track(&[0, 1, 4, 5, 7, 11, 12]).stats;
        assert_eq!((s.lost(), s.gaps), (6, 3));
        // a leading run counts as one
        assert_eq!(track(&[2, 3, 5]).stats.gaps, 2);
        assert_eq!(track(&(0..50).collect::<Vec<_>>()).stats.gaps, 0);
    }

    #[test]
    fn seq_transit_samples_stay_bounded_and_spread_over_the_stream() {
        assert!(track(&[0, 1, 2]).stats.transit_ns.is_empty(), "kept only when asked");
        let mut t = SeqTracker::with_transit();
        // send clock 1 s ahead of the receiver's: the offset cancels
        let n = 10 * TRANSIT_SAMPLES as u64 + 7;
        for k in 0..n {
            let send = 1_000_000_000 + k * 1000;
            // transit rises by 1 ns per datagram
            t.record(k, 100, send, k * 1000 + 5_000 + k);
        }
        assert_eq!(t.stats.transit_first_ns, Some(5_000 - 1_000_000_000), "the first transit, offset and all");
        let x = &t.stats.transit_ns;
        assert!(x.len() <= TRANSIT_SAMPLES && x.len() >= TRANSIT_SAMPLES / 2, "{}", x.len());
        assert_eq!(x[0], 0);
        assert!(x.windows(2).all(|w| w[1] > w[0]), "in arrival order");
        // the last sample is from the last stretch of the stream
        let last = *x.last().expect("samples") as u64;
        assert!(last > n - n / 8, "last kept transit {last} of {n}");
        // the samples are evenly spaced
        let step = x[1] - x[0];
        assert!(x.windows(2).all(|w| w[1] - w[0] == step), "even stride");
    }

    #[test]
    fn seq_reordering() {
        let s = track(&[0, 2, 1]).stats;
        assert_eq!((s.reordered, s.duplicates, s.lost()), (1, 0, 0));
    }

    #[test]
    fn seq_duplicates() {
        let s = track(&[0, 1, 1]).stats;
        assert_eq!((s.received, s.duplicates, s.reordered, s.distinct, s.lost()), (3, 1, 0, 2, 0));
        assert_eq!(s.bytes, 300, "duplicates' bytes count");
        // A late duplicate of an older number is a duplicate, not reordered.
        let s = track(&[0, 1, 2, 0]).stats;
        assert_eq!((s.duplicates, s.reordered), (1, 0));
        // A reordered datagram that arrives twice: reordered once, duplicate once.
        let s = track(&[0, 2, 1, 1]).stats;
        assert_eq!((s.duplicates, s.reordered, s.lost()), (1, 1, 0));
    }

    #[test]
    fn seq_older_than_window_is_reordered_not_duplicate() {
        let w = SeqTracker::WINDOW;
        let s = track(&[0, w, 0]).stats;
        // 0 arrived twice but the second is beyond the window: counted as reordered and distinct.
        assert_eq!((s.reordered, s.duplicates, s.distinct), (1, 0, 3));
        assert_eq!(s.lost(), w + 1 - 3);
        // Just inside the window, a number that never arrived is reordered;
        // one that did is a duplicate.
        let s = track(&[1, w, 1, 2]).stats;
        assert_eq!((s.duplicates, s.reordered), (1, 1));
    }

    #[test]
    fn seq_window_wraps_around_the_ring() {
        let w = SeqTracker::WINDOW;
        let mut t = track(&[w - 10, w + 10]);
        t.record(w - 10, 1, 0, 0);
        assert_eq!(t.stats.duplicates, 1, "still in the window after the ring wrapped");
        t.record(w - 5, 1, 0, 0);
        assert_eq!((t.stats.duplicates, t.stats.reordered), (1, 1));
        // Advance so that w - 10 leaves the window and its slot is reused.
        t.record(2 * w - 10, 1, 0, 0);
        t.record(w - 10, 1, 0, 0);
        assert_eq!((t.stats.duplicates, t.stats.reordered), (1, 2));
        t.record(2 * w - 20, 1, 0, 0);
        assert_eq!((t.stats.duplicates, t.stats.reordered), (1, 3), "slot cleared when the window moved");
    }

    #[test]
    fn seq_big_jump_clears_everything() {
        let w = SeqTracker::WINDOW;
        let mut t = track(&[0, 1, 2, 3]);
        t.record(5 * w + 2, 1, 0, 0);
        t.record(4 * w + 3, 1, 0, 0);
        assert_eq!((t.stats.duplicates, t.stats.reordered), (0, 1));
    }

    #[test]
    fn seq_hostile_huge_seq_stays_bounded() {
        let mut t = SeqTracker::new();
        t.record(u64::MAX, 10, 0, 0);
        t.record(0, 10, 0, 0);
        t.record(u64::MAX - 1, 10, 0, 0);
        t.record(u64::MAX, 10, 0, 0);
        t.record(u64::MAX / 2, 10, 0, 0);
        assert_eq!(t.seen.words.len() as u64, SeqTracker::WINDOW / 64);
        let s = &t.stats;
        assert_eq!(s.max_seq, Some(u64::MAX));
        assert_eq!((s.received, s.duplicates, s.reordered, s.distinct), (5, 1, 3, 4));
        assert_eq!(s.lost(), u64::MAX - 4);
        // Far more distinct numbers than expected (old ones repeated) saturates at 0.
        let s = track(&[SeqTracker::WINDOW, 0, 0, 0]).stats;
        assert_eq!(s.lost(), SeqTracker::WINDOW + 1 - 4);
        let s = SeqStats { max_seq: Some(1), distinct: 5, ..SeqStats::default() };
        assert_eq!(s.lost(), 0);
    }

    #[test]
    fn seq_debug_is_short() {
        let t = track(&[0, 1]);
        assert!(format!("{t:?}").len() < 400);
    }

    #[test]
    fn jitter_constant_transit_is_zero() {
        let mut t = SeqTracker::new();
        for i in 0..100u64 {
            t.record(i, 1, 1_000_000 * i, 1_000_000 * i + 5_000);
        }
        assert_eq!(t.stats.jitter_ns, 0.0);
        // Clocks that differ: transit negative but constant, still zero.
        let mut t = SeqTracker::new();
        for i in 0..100u64 {
            t.record(i, 1, 1_000_000_000 + i * 1000, i * 1000);
        }
        assert_eq!(t.stats.jitter_ns, 0.0);
    }

    #[test]
    fn jitter_alternating_transit_converges() {
        let mut t = SeqTracker::new();
        t.record(0, 1, 0, 10_000);
        assert_eq!(t.stats.jitter_ns, 0.0);
        t.record(1, 1, 1_000_000, 1_011_000);
        assert!(close(t.stats.jitter_ns, 1000.0 / 16.0));
        for i in 2..500u64 {
            let send = i * 1_000_000;
            t.record(i, 1, send, send + 10_000 + (i % 2) * 1000);
        }
        assert!((t.stats.jitter_ns - 1000.0).abs() < 1.0, "{}", t.stats.jitter_ns);
    }

    #[test]
    fn jitter_ignores_duplicates() {
        let mut t = SeqTracker::new();
        t.record(0, 1, 0, 0);
        t.record(0, 1, 0, 1_000_000);
        t.record(1, 1, 10, 10);
        assert_eq!(t.stats.jitter_ns, 0.0);
    }

    #[test]
    fn seq_stats_serde_default_distinct() {
        let json = r#"{"received":1,"bytes":2,"reordered":0,"duplicates":0,"max_seq":0,"jitter_ns":0.0}"#;
        let s: SeqStats = serde_json::from_str(json).expect("parses");
        assert_eq!(s.distinct, 0);
        let back: SeqStats = serde_json::from_str(&serde_json::to_string(&s).expect("ser")).expect("de");
        assert_eq!(back, s);
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(crate::units::fmt_bytes_short(512), "512 B");
        assert_eq!(crate::units::fmt_bytes_short(512_000), "512 kB");
        assert_eq!(crate::units::fmt_bytes_short(67_108_864), "67.1 MB");
        assert_eq!(crate::units::fmt_bytes_short(6_250_000), "6.25 MB");
        assert_eq!(crate::units::fmt_bytes_short(33_550_000), "33.6 MB");
        assert_eq!(crate::units::fmt_bytes_short(999_999), "1.00 MB");
        assert_eq!(crate::units::fmt_bytes_short(9_996), "10.0 kB");
        assert_eq!(crate::units::fmt_bytes_short(u64::MAX), "18.4 EB");
        assert_eq!(fmt_rtt_us(150), "150 us");
        assert_eq!(fmt_rtt_us(270_000), "270 ms");
        assert_eq!(fmt_rtt_us(1_500), "1.50 ms");
        assert_eq!(crate::units::fmt_bps_short(941.2e6), "941 Mbit/s");
        assert_eq!(crate::units::fmt_bps_short(1e10), "10.0 Gbit/s");
        assert_eq!(crate::units::fmt_bps_short(0.0), "0 bit/s");
        assert_eq!(fmt_pct(0.7149), "71%");
        assert_eq!(crate::units::fmt_sig(0.1234, 2), "0.12");
        assert_eq!(crate::units::fmt_sig(0.1, 2), "0.10");
        assert_eq!(crate::units::fmt_sig(12.34, 2), "12");
        assert_eq!(crate::units::fmt_sig(99.96, 3), "100");
    }

    fn sample(t_s: u64, busy_us: u64, rwnd_us: u64, sndbuf_us: u64, segs: u32, retrans: u32) -> TcpSample {
        TcpSample {
            t_ns: t_s * 1_000_000_000,
            busy_us,
            rwnd_limited_us: rwnd_us,
            sndbuf_limited_us: sndbuf_us,
            data_segs_out: segs,
            total_retrans: retrans,
            min_rtt_us: 100_000,
            srtt_us: 110_000,
            mss: 1448,
            ..TcpSample::default()
        }
    }

    fn ctx10s() -> VerdictContext {
        VerdictContext { throughput_bps: 500e6, elapsed_ns: 10_000_000_000, ..VerdictContext::default() }
    }

    #[test]
    fn verdict_unknown() {
        let ctx = ctx10s();
        assert_eq!(verdict(&[], &ctx).limit, Limit::Unknown);
        let one = verdict(&[sample(1, 5_000_000, 0, 0, 1000, 0)], &ctx);
        assert_eq!((one.limit, one.share), (Limit::Unknown, None));
        assert!(one.text.contains("too few TCP_INFO samples"), "{}", one.text);
        let s = sample(1, 5_000_000, 0, 0, 1000, 0);
        let idle = verdict(&[s, s, s], &ctx);
        assert_eq!(idle.limit, Limit::Unknown);
    }

    #[test]
    fn verdict_receive_window_with_bdp() {
        // 1 Gbit/s x 268.4 ms = 33.55 MB; 2 x BDP = 67.1 MB. 7.1 s of 10 s busy: 71%.
        let mut a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 7_100_000, 0, 1_000_000, 0);
        a.min_rtt_us = 270_000;
        b.min_rtt_us = 268_400;
        let ctx = VerdictContext {
            path_rate_bps: Some(1_000_000_000),
            rmem_max: Some(6_291_456),
            window_requested: Some(4_194_304),
            ..ctx10s()
        };
        let v = verdict(&[a, b], &ctx);
        assert_eq!(v.limit, Limit::ReceiveWindow);
        assert!(close(v.share.expect("share"), 0.71));
        assert_eq!(v.bdp_bytes, Some(33_550_000));
        // with -w the buffer is not autotuned: the advice is -w and its ceiling
        let ctx = VerdictContext { core_rmem_max: Some(4_194_304), ..ctx };
        let v = verdict(&[a, b], &ctx);
        for want in ["71%", "receiver's window", "-w 4.19 MB", "33.6 MB", "net.core.rmem_max", "(now 4.19 MB)"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
        // without -w: the autotuning ceiling, tcp_rmem, at twice the BDP
        let v = verdict(&[a, b], &VerdictContext { window_requested: None, ..ctx });
        for want in ["71%", "tcp_rmem", "67.1 MB", "(now 6.29 MB)"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
        assert!(!v.text.contains("-w"), "{}", v.text);
    }

    #[test]
    fn streams_sharing_a_path_each_need_their_share_of_the_bdp() {
        // four streams across 1 Gbit/s x 268.4 ms: each fills its quarter with 8.39 MB
        let mut a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 7_100_000, 0, 1_000_000, 0);
        a.min_rtt_us = 270_000;
        b.min_rtt_us = 268_400;
        let ctx = VerdictContext {
            path_rate_bps: Some(1_000_000_000),
            rmem_max: Some(6_291_456),
            window_requested: Some(4_194_304),
            streams: 4,
            ..ctx10s()
        };
        let v = verdict(&[a, b], &ctx);
        for want in ["its share of the BDP, 8.39 MB (33.6 MB over 4 streams)", "-w 4.19 MB"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
        let v = verdict(&[a, b], &VerdictContext { window_requested: None, ..ctx });
        assert!(v.text.contains("2 x its share of the BDP = 16.8 MB (the BDP, 33.6 MB, over 4 streams)"), "{}", v.text);
    }

    #[test]
    fn verdict_receive_window_without_bdp() {
        let a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 4_000_000, 0, 1_000_000, 0);
        b.snd_wnd = 3_000_000;
        let v = verdict(&[a, b], &ctx10s());
        assert_eq!(v.limit, Limit::ReceiveWindow);
        assert_eq!(v.bdp_bytes, None);
        // 3 MB per 100 ms = 240 Mbit/s.
        for want in ["40%", "3.00 MB", "100 ms", "240 Mbit/s", "tcp_rmem"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
    }

    #[test]
    fn verdict_sees_a_window_bound_flow_the_kernel_clock_misses() {
        // a paced sender (BBR) keeps exactly the window in flight: the
        // kernel's rwnd-limited clock stays near 0, the samples show it
        let mut v = Vec::new();
        for k in 0..10u64 {
            let mut x = sample(k, k * 1_000_000, 0, 0, k as u32 * 1000, 0);
            x.snd_wnd = 1_390_000;
            x.unacked = 960;
            x.mss = 1448;
            x.min_rtt_us = 270_000;
            v.push(x);
        }
        let ctx = VerdictContext { throughput_bps: 36e6, path_rate_bps: Some(1_000_000_000), ..ctx10s() };
        let got = verdict(&v, &ctx);
        assert_eq!(got.limit, Limit::ReceiveWindow, "{}", got.text);
        assert!(got.text.contains("100%"), "{}", got.text);
        // the same flow at the path's rate is the path's
        let got = verdict(&v, &VerdictContext { throughput_bps: 950e6, ..ctx });
        assert_eq!(got.limit, Limit::Congestion, "{}", got.text);
        assert!(got.text.contains("95%"), "{}", got.text);
    }

    #[test]
    fn verdict_slow_receiving_application() {
        // a window that opens to 4 MB at 100 us allows 320 Gbit/s; the stream
        // moved far less while the window was closed 40% of the time: the
        // reader, not the buffer
        let a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 4_000_000, 0, 1_000_000, 0);
        b.snd_wnd = 4_000_000;
        b.min_rtt_us = 100;
        let ctx = VerdictContext { throughput_bps: 12e9, ..ctx10s() };
        let v = verdict(&[a, b], &ctx);
        assert_eq!(v.limit, Limit::ReceiverApplication, "{}", v.text);
        for want in ["40%", "4.00 MB", "320 Gbit/s", "did not read fast enough"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
        // the same window at the throughput it allows is the window's limit
        let v = verdict(&[a, b], &VerdictContext { throughput_bps: 300e9, ..ctx });
        assert_eq!(v.limit, Limit::ReceiveWindow, "{}", v.text);
    }

    #[test]
    fn a_stream_that_kept_to_its_pacing_is_limited_by_it() {
        let a = sample(0, 0, 0, 0, 0, 0);
        let b = sample(10, 10_000_000, 0, 0, 1_000_000, 0);
        let paced = VerdictContext { throughput_bps: 1.99e9, pacing_bps: Some(2_000_000_000), ..ctx10s() };
        let v = verdict(&[a, b], &paced);
        assert_eq!(v.limit, Limit::Application, "{}", v.text);
        assert!(v.text.contains("paced") && v.text.contains("of 2.00 Gbit/s (100% of it)"), "{}", v.text);
        // pacing above the path's rate: the path is the limit, as before
        let above = VerdictContext { path_rate_bps: Some(1_000_000_000), throughput_bps: 0.95e9, ..paced };
        assert_ne!(verdict(&[a, b], &above).limit, Limit::Application);
        // a stream that fell well short of its pacing: something else limited it
        let short = VerdictContext { throughput_bps: 1.0e9, ..paced };
        assert!(!verdict(&[a, b], &short).text.contains("paced"));
    }

    #[test]
    fn verdict_send_buffer_from_the_samples_when_the_kernels_clock_misses_it() {
        // 35 ms, a 4 MiB send buffer: ~2500 of 1448-byte segments in flight
        // (86% of it), cwnd 3803, the kernel's sndbuf clock at 0 (constructed)
        let mut v = vec![sample(0, 0, 0, 0, 0, 0)];
        for t in 1..=10u64 {
            let mut s = sample(t, t * 1_000_000, 0, 0, (t * 50_000) as u32, 0);
            s.cwnd = 3803;
            s.unacked = 2500;
            s.snd_wnd = 17_767_424;
            s.app_limited = true;
            s.min_rtt_us = 35_000;
            v.push(s);
        }
        let ctx = VerdictContext {
            throughput_bps: 626e6,
            path_rate_bps: Some(1_000_000_000),
            wmem_max: Some(4_194_304),
            ..ctx10s()
        };
        let out = verdict(&v, &ctx);
        assert_eq!(out.limit, Limit::SendBuffer, "{}", out.text);
        assert_eq!(out.share, Some(1.0));
        assert!(out.text.contains("tcp_wmem"), "{}", out.text);
        // the same samples without the app-limited mark: the congestion control's pace
        for s in v.iter_mut() {
            s.app_limited = false;
        }
        assert_eq!(verdict(&v, &ctx).limit, Limit::Congestion);
        // app-limited with little in flight against the ceiling: not the buffer
        for s in v.iter_mut() {
            s.app_limited = true;
            s.unacked = 100;
        }
        assert_ne!(verdict(&v, &ctx).limit, Limit::SendBuffer);
    }

    #[test]
    fn verdict_send_buffer() {
        let a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 1_000_000, 5_000_000, 1_000_000, 0);
        b.min_rtt_us = 10_000;
        // 10 Gbit/s x 10 ms = 12.5 MB; 2 x BDP = 25 MB.
        let ctx = VerdictContext { path_rate_bps: Some(10_000_000_000), wmem_max: Some(4_194_304), ..ctx10s() };
        let v = verdict(&[a, b], &ctx);
        assert_eq!(v.limit, Limit::SendBuffer);
        assert!(close(v.share.expect("share"), 0.5));
        assert_eq!(v.bdp_bytes, Some(12_500_000));
        for want in ["50%", "send buffer", "tcp_wmem", "25.0 MB", "(now 4.19 MB)"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
        // Without the path's rate: what the data in flight caps the stream at.
        b.unacked = 1000; // x 1448 = 1.448 MB per 10 ms = 1.16 Gbit/s
        let v = verdict(&[a, b], &ctx10s());
        assert_eq!(v.limit, Limit::SendBuffer);
        for want in ["1.45 MB", "10.0 ms", "1.16 Gbit/s", "tcp_wmem"] {
            assert!(v.text.contains(want), "{want:?} not in {:?}", v.text);
        }
    }

    #[test]
    fn verdict_application() {
        let a = sample(0, 0, 0, 0, 0, 0);
        let b = sample(10, 3_000_000, 100_000, 0, 100_000, 500);
        let v = verdict(&[a, b], &ctx10s());
        assert_eq!(v.limit, Limit::Application);
        assert!(close(v.share.expect("share"), 0.3));
        assert!(v.text.contains("30%") && v.text.contains("application-limited"), "{}", v.text);
        // Without the elapsed time, no verdict at all: too short to tell.
        let v = verdict(&[a, b], &VerdictContext { elapsed_ns: 0, ..ctx10s() });
        assert_eq!(v.limit, Limit::Unknown);
        assert!(v.text.contains("too short to tell"), "{}", v.text);
    }

    #[test]
    fn verdict_congestion_loss() {
        let a = sample(0, 1_000_000, 0, 0, 1_000, 0);
        let b = sample(10, 11_000_000, 1_000_000, 500_000, 1_001_000, 1_234);
        let v = verdict(&[a, b], &ctx10s());
        assert_eq!(v.limit, Limit::CongestionLoss);
        assert!(close(v.retrans_ratio, 0.001234));
        assert!(close(v.share.expect("share"), 0.85));
        assert!(v.text.contains("0.12% retransmissions"), "{}", v.text);
        // The threshold: 1 in 1000, and at least MIN_LOSSES of them.
        let b = sample(10, 10_000_000, 0, 0, 3_000, 3);
        let v = verdict(&[sample(0, 0, 0, 0, 0, 0), b], &ctx10s());
        assert_eq!(v.limit, Limit::CongestionLoss);
        assert!(v.text.contains("0.10%"), "{}", v.text);
        // two retransmissions are no loss rate, however few the segments
        let b = sample(10, 10_000_000, 0, 0, 200, 2);
        assert_eq!(verdict(&[sample(0, 0, 0, 0, 0, 0), b], &ctx10s()).limit, Limit::Congestion);
        // a short stream (50 segments) is not judged at all
        let b = sample(10, 10_000_000, 0, 0, 50, 20);
        let v = verdict(&[sample(0, 0, 0, 0, 0, 0), b], &ctx10s());
        assert_eq!(v.limit, Limit::Unknown, "{}", v.text);
    }

    #[test]
    fn verdict_congestion() {
        let a = sample(0, 0, 0, 0, 0, 0);
        let b = sample(10, 10_000_000, 0, 0, 1_000_000, 999);
        let ctx = VerdictContext { path_rate_bps: Some(1_000_000_000), throughput_bps: 950e6, ..ctx10s() };
        let v = verdict(&[a, b], &ctx);
        assert_eq!((v.limit, v.share), (Limit::Congestion, None));
        assert!(v.text.contains("without loss"), "{}", v.text);
        assert!(v.text.contains("95%") && v.text.contains("1.00 Gbit/s"), "{}", v.text);
        // 12.5 MB at 1 Gbit/s x 100 ms.
        assert_eq!(v.bdp_bytes, Some(12_500_000));
        let v = verdict(&[a, b], &VerdictContext { throughput_bps: 500e6, ..ctx });
        assert_eq!(v.limit, Limit::Congestion);
        assert!(!v.text.contains("path's rate"), "{}", v.text);
    }

    #[test]
    fn verdict_without_busy_time_is_not_application() {
        // Kernels before 4.10 report no busy time: segments went out, busy stays 0.
        let v = verdict(&[sample(0, 0, 0, 0, 0, 0), sample(10, 0, 0, 0, 1_000_000, 0)], &ctx10s());
        assert_eq!(v.limit, Limit::Congestion);
    }

    #[test]
    fn verdict_counters_wrap() {
        let a = sample(0, 0, 0, 0, u32::MAX - 10, 0);
        let m = sample(5, 5_000_000, 0, 0, 5, 50);
        let b = sample(10, 10_000_000, 0, 0, 1000, 101);
        let v = verdict(&[a, m, b], &ctx10s());
        assert!(close(v.retrans_ratio, 101.0 / 1011.0), "{}", v.retrans_ratio);
        assert_eq!(v.limit, Limit::CongestionLoss);
    }

    #[test]
    fn verdict_rtt_falls_back_to_srtt() {
        let mut a = sample(0, 0, 0, 0, 0, 0);
        let mut b = sample(10, 10_000_000, 0, 0, 1_000_000, 0);
        a.min_rtt_us = 0;
        b.min_rtt_us = 0;
        a.srtt_us = 0;
        b.srtt_us = 20_000;
        let ctx = VerdictContext { path_rate_bps: Some(1_000_000_000), ..ctx10s() };
        assert_eq!(verdict(&[a, b], &ctx).bdp_bytes, Some(2_500_000));
    }
}
