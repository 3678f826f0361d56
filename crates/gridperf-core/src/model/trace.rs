//! A packet capture's TCP connections (`gridperf trace`, schema `gridperf.trace/1`).

use serde::{Deserialize, Serialize};

/// What `gridperf trace` read and found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceReport {
    pub schema: String,
    pub file: String,
    /// pcap or pcapng.
    pub format: String,
    /// The link-layer types of its frames, by name.
    pub links: Vec<String>,
    pub frames: u64,
    pub tcp_segments: u64,
    /// Frames left out, by why.
    pub skipped: TraceSkipped,
    /// Frames whose time is before the one before them (the file's order is kept).
    pub out_of_order: u64,
    /// Where a truncated file ended, if it did (read to its last whole packet).
    pub ended: Option<String>,
    /// The first frame's time, Unix seconds; the capture's span, s.
    pub start_unix_s: f64,
    pub seconds: f64,
    pub interval_ms: u64,
    pub connections: Vec<TraceConn>,
    /// What a capture cannot tell, in words.
    pub cannot_tell: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceSkipped {
    /// Not IP, or IP and not TCP.
    pub not_tcp: u64,
    /// Cut by the snap length before the end of the TCP header.
    pub short: u64,
    /// IP fragments after the first.
    pub fragments: u64,
    /// Connections beyond the most one trace follows (their segments).
    pub beyond_limit: u64,
}

/// One TCP connection (its two endpoints; `a` the one that sent the SYN, when seen).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceConn {
    pub index: u32,
    pub a: String,
    pub b: String,
    /// From the capture's first frame, s.
    pub start_s: f64,
    pub duration_s: f64,
    pub segments: u64,
    /// The three-way handshake was in the capture (window scales, MSS known).
    pub handshake: bool,
    /// The SYN to the handshake's last ACK, ms.
    pub handshake_rtt_ms: Option<f64>,
    /// Where the capture was taken, as the handshake's timing says.
    pub capture_point: String,
    /// Each direction that carried data.
    pub directions: Vec<TraceDirection>,
}

/// The data one end of a connection sent, as the capture saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceDirection {
    pub from: String,
    pub to: String,
    /// Payload bytes the other end acknowledged.
    pub bytes_acked: u64,
    /// Payload bytes sent, retransmissions included; data segments.
    pub bytes_sent: u64,
    pub segments: u64,
    /// From the first data segment to the last acknowledgment, s; acknowledged bytes over it.
    pub seconds: f64,
    pub throughput_bps: f64,
    /// Segments sent again: all, then by kind (fast: after 3 duplicate
    /// ACKs or a SACK; timeout: after a silence of at least 200 ms and 2
    /// RTTs; other), and those a D-SACK showed were not needed.
    pub retransmits: u64,
    pub fast: u64,
    pub timeout: u64,
    pub other: u64,
    pub spurious: u64,
    /// Times the receiver's window closed to zero.
    pub zero_windows: u64,
    /// The receiver's window scale from its SYN; null: unknown (no handshake), windows shown unscaled.
    pub window_scale: Option<u8>,
    pub mss: Option<u16>,
    /// Data to its ACK as the capture point sees it (Karn's rule: not for a segment sent again).
    pub rtt_samples: u64,
    pub rtt_min_ms: Option<f64>,
    pub rtt_median_ms: Option<f64>,
    pub rtt_max_ms: Option<f64>,
    /// What those RTT samples are, given where the capture was taken.
    pub rtt_basis: String,
    pub max_in_flight: u64,
    pub max_window: u64,
    /// The data in flight when a loss was first answered (a retransmission
    /// opening a recovery): the congestion window's estimate at each loss, bytes.
    pub cwnd_at_loss: Vec<(f64, u64)>,
    /// Per interval with traffic: at most 4096 points, each spanning
    /// `series_interval_s` (the interval asked for, doubled as often as a
    /// long connection needs).
    pub series: Vec<TracePoint>,
    /// The span of one point of the series, s.
    #[serde(default)]
    pub series_interval_s: f64,
    /// In `stream`'s words, from the capture alone.
    pub verdict: Option<crate::analysis::flow::Verdict>,
}

/// One interval of a direction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TracePoint {
    /// The interval's start, s from the capture's first frame.
    pub t_s: f64,
    /// Bytes newly acknowledged in it.
    pub acked: u64,
    /// The most in flight (highest sent minus highest acknowledged, less what was SACKed), bytes.
    pub in_flight: u64,
    /// The receiver's advertised window at its end, bytes (scaled when the scale is known).
    pub window: u64,
    /// The highest sequence sent by its end, relative to the first (the time-sequence graph).
    pub seq: u64,
    pub retransmits: u64,
    /// The mean RTT sample in it, ms.
    pub rtt_ms: Option<f64>,
}
