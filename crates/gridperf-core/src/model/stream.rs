//! Bulk throughput's results (`stream`): both ends' figures per stream.

use super::{Environment, SocketInfo};
use crate::analysis::stats::Warning;
use serde::{Deserialize, Serialize};

/// What one end did on one stream, as that end measured it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamEnd {
    pub index: u32,
    /// Whether this end sent or received on this stream.
    pub sending: bool,
    /// Bytes written (sender) or received (receiver): payload, UDP headers included.
    pub bytes: u64,
    /// Bytes moved before the --omit time ended.
    pub omitted_bytes: u64,
    /// Bytes per report interval. The last one may be cut short: the
    /// stream ended within it (see `last_interval_ns`).
    pub intervals: Vec<u64>,
    /// How long the last interval lasted when the stream ended before it
    /// was whole, in ns (None: every interval is whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_interval_ns: Option<u64>,
    /// CLOCK_MONOTONIC when this end's clock started, ns: on one machine
    /// (both ends in a lab) the scale of the lab emulator's late windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_mono_ns: Option<u64>,
    /// From the start: when the first and the last byte moved, in ns.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// CPU time (user + system) of the stream's thread, in ns.
    pub cpu_ns: u64,
    /// Why the stream's connection broke, if it did (its bytes stand).
    pub broken: Option<String>,
    pub socket: SocketInfo,
    /// UDP receiver: sequence accounting.
    pub udp: Option<crate::analysis::flow::SeqStats>,
    /// UDP sender: datagrams sent, and sends that failed (no buffer space).
    pub datagrams: Option<u64>,
    pub send_errors: u64,
    /// MSG_ZEROCOPY sender: sends, completions reaped, and how many of those
    /// the kernel did by copying after all (always, on loopback and veth).
    pub zerocopy: Option<ZeroCopyFigures>,
    /// The last TCP_INFO sample of the stream's socket.
    pub tcp_last: Option<crate::analysis::flow::TcpSample>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ZeroCopyFigures {
    pub sends: u64,
    pub completions: u64,
    pub copied: u64,
}

/// One stream of a run: both ends' figures, the sender's TCP_INFO timeline
/// and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub index: u32,
    /// "up" (client to agent) or "down" (agent to client).
    pub direction: String,
    pub sender: StreamEnd,
    pub receiver: StreamEnd,
    /// Received bytes after --omit over the time they took, bits per second.
    pub throughput_bps: f64,
    /// Received bits per second in each interval (the last one over the
    /// time it lasted, when the stream ended within it).
    pub interval_bps: Vec<f64>,
    pub retransmits: Option<u32>,
    pub verdict: Option<crate::analysis::flow::Verdict>,
    /// The sender's TCP_INFO timeline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<crate::analysis::flow::TcpSample>,
    pub broken: Option<String>,
    /// A run across a lab judged interval by interval: the receiver's
    /// intervals (from 0) left out of its figures for crossing a window in
    /// which the lab's emulator was late.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out_intervals: Vec<u32>,
}

impl StreamResult {
    /// When each of the receiver's intervals ended, seconds from the start:
    /// whole intervals at their boundaries, the last one (when the stream
    /// ended within it) at the time it lasted.
    pub fn interval_ends_s(&self, interval_s: f64) -> Vec<f64> {
        let n = self.interval_bps.len();
        (0..n)
            .map(|k| match self.receiver.last_interval_ns {
                Some(ns) if k + 1 == n => k as f64 * interval_s + ns as f64 / 1e9,
                _ => (k + 1) as f64 * interval_s,
            })
            .collect()
    }
}

/// One run of `gridperf stream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRun {
    pub streams: Vec<StreamResult>,
    /// Sum of the streams' throughputs per direction, bits per second.
    pub up_bps: Option<f64>,
    pub down_bps: Option<f64>,
    /// Across the streams of each direction: slowest over fastest, and Jain's index.
    pub slowest_over_fastest: Option<f64>,
    pub jain: Option<f64>,
    /// CPU time of the stream threads at each end, and per byte received.
    pub client_cpu_ns: u64,
    pub agent_cpu_ns: u64,
    pub cpu_ns_per_byte: Option<f64>,
    pub env: Environment,
}

/// What `gridperf stream --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub schema: String,
    pub spec: crate::wire::StreamSpec,
    /// --omit, in ns.
    pub omit_ns: u64,
    pub runs: Vec<StreamRun>,
    /// With --repeat: the total throughput (both directions) of each run,
    /// the median, the best, and the spread (max - min) over the median.
    pub totals_bps: Vec<f64>,
    pub median_bps: Option<f64>,
    pub best_bps: Option<f64>,
    pub spread: Option<f64>,
    pub warnings: Vec<Warning>,
    /// Notes on what the kernel granted (capped buffers and the like).
    pub notes: Vec<String>,
    /// `--capture`: what the capture of the test's packets tells, next to TCP_INFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<StreamCapture>,
}

/// A stream test's own capture (`stream --capture`) read as `trace` reads
/// one, next to the senders' TCP_INFO.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamCapture {
    pub file: String,
    /// Packets written, and those the kernel dropped before the capture read them.
    pub packets: u64,
    pub dropped: u64,
    /// Each data direction of the test (the largest first), beside the stream of the same rank by bytes.
    pub streams: Vec<CaptureVsTcpInfo>,
}

/// One data direction: the capture's figures and TCP_INFO's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureVsTcpInfo {
    pub from: String,
    pub to: String,
    /// The stream (index) it is set beside.
    pub stream: Option<u32>,
    pub bytes_acked: u64,
    pub retransmits: u64,
    pub tcp_info_retransmits: Option<u64>,
    pub max_in_flight: u64,
    pub tcp_info_max_in_flight: Option<u64>,
    pub rtt_median_ms: Option<f64>,
    pub tcp_info_srtt_median_ms: Option<f64>,
    pub verdict: Option<String>,
    pub tcp_info_verdict: Option<String>,
}
