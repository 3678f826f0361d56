//! Bulk-flow analysis for `gridperf stream`, without I/O: fairness across
//! parallel streams, UDP sequence accounting (loss, reordering, duplicates,
//! jitter), and the verdict that says, from a TCP_INFO timeline, what limited
//! a stream and what to change.

use serde::{Deserialize, Serialize};

/// Jain's fairness index of the streams' throughputs: (sum x)^2 / (n sum x^2).
/// 1 when all are equal, 1/n when one stream has everything. None for no
/// streams or when every stream moved nothing.
pub fn jain(x: &[f64]) -> Option<f64> {
    let _ = x;
    todo!()
}

/// The slowest stream's throughput over the fastest's (1 = all equal). None
/// for no streams or when the fastest moved nothing.
pub fn slowest_over_fastest(x: &[f64]) -> Option<f64> {
    let _ = x;
    todo!()
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
}

/// What limited a stream, most binding first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// The receiver's advertised window (tcpi_rwnd_limited).
    ReceiveWindow,
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
pub fn verdict(samples: &[TcpSample], ctx: &VerdictContext) -> Verdict {
    let _ = (samples, ctx);
    todo!()
}

/// The UDP header gridperf's UDP streams carry at the start of each
/// datagram: stream index, sequence number from 0, and the sender's
/// monotonic send time in ns.
pub const UDP_HEADER_LEN: usize = 20;

/// Encodes the header into `buf[..UDP_HEADER_LEN]` (big-endian: u32 stream, u64 seq, u64 send_ns).
pub fn encode_udp_header(buf: &mut [u8], stream: u32, seq: u64, send_ns: u64) {
    let _ = (buf, stream, seq, send_ns);
    todo!()
}

/// Decodes a header; None if the datagram is shorter than the header.
pub fn decode_udp_header(buf: &[u8]) -> Option<(u32, u64, u64)> {
    let _ = buf;
    todo!()
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
}

impl SeqStats {
    /// Sequence numbers lost: expected (max_seq + 1) minus distinct received.
    /// Datagrams still in flight at the end count as lost, as in RFC 3550.
    pub fn lost(&self) -> u64 {
        todo!()
    }
}

/// Tracks one UDP stream's sequence numbers: which arrived (a window of the
/// last [`SeqTracker::WINDOW`] numbers below the highest; older ones that
/// arrive late count as reordered and, as nothing older is remembered, not
/// as duplicates), and the jitter from send and receive times.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    pub stats: SeqStats,
    // private state as needed
}

impl SeqTracker {
    pub const WINDOW: u64 = 1 << 20;

    pub fn new() -> SeqTracker {
        SeqTracker::default()
    }

    /// One datagram of `bytes`, with its header's seq and send time, received at `recv_ns`.
    pub fn record(&mut self, seq: u64, bytes: u64, send_ns: u64, recv_ns: u64) {
        let _ = (seq, bytes, send_ns, recv_ns);
        todo!()
    }
}
