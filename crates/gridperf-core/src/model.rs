//! Result types: what a run measured and under which conditions. These are
//! what `--json` prints (schema documented in docs/json.md) and what the
//! agent returns over the control channel.

use crate::plan::Proto;
use crate::stats::{Summary, Warning};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// JSON schema names and versions. Bump the number on any change that is
/// not adding an optional field.
pub const RTT_SCHEMA: &str = "gridperf.rtt/1";
pub const TRANSFER_SCHEMA: &str = "gridperf.transfer/1";
pub const STREAM_SCHEMA: &str = "gridperf.stream/1";

/// What one socket was actually given, as the kernel reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketInfo {
    pub proto: Option<Proto>,
    /// Requested SO_SNDBUF, if any (the kernel doubles it, capped by net.core.wmem_max).
    pub sndbuf_requested: Option<u64>,
    pub sndbuf_granted: Option<u64>,
    pub rcvbuf_requested: Option<u64>,
    pub rcvbuf_granted: Option<u64>,
    /// TCP_NODELAY as read back (true = Nagle off).
    pub nodelay: Option<bool>,
    /// TCP maximum segment size.
    pub mss: Option<u32>,
    /// The path MTU the kernel holds for this socket.
    pub path_mtu: Option<u32>,
    /// TCP congestion control algorithm in use.
    pub congestion: Option<String>,
    /// SO_BUSY_POLL in microseconds, when set.
    pub busy_poll_us: Option<u32>,
}

/// One end of a measurement: where it ran and with what.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndInfo {
    pub host: String,
    pub kernel: String,
    pub software: String,
    /// CPUs this end's measuring thread was pinned to, if pinned.
    pub pinned_cpus: Option<Vec<usize>>,
    /// CPUs it was allowed to run on.
    pub allowed_cpus: Vec<usize>,
    /// Whether it spun on non-blocking receives instead of sleeping.
    pub busy_poll: bool,
    pub sockets: Vec<SocketInfo>,
    /// Relevant sysctls as read on this end (unreadable ones are absent).
    pub sysctls: BTreeMap<String, String>,
}

/// The conditions of a run: a result without its conditions is not a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub tool_version: String,
    pub command_line: Vec<String>,
    /// Wall-clock start and end, seconds since the Unix epoch.
    pub started_unix: f64,
    pub finished_unix: f64,
    /// The agent's address, or "local" for the agent gridperf started itself.
    pub target: String,
    pub client: EndInfo,
    pub server: Option<EndInfo>,
    /// Free-form notes on conditions (e.g. "private network namespace, lo MTU 1500").
    pub notes: Vec<String>,
    /// The lab the run crossed, when run with `gridperf lab exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab: Option<LabRecord>,
}

/// The emulated network a run crossed, and what the emulator says of itself
/// over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabRecord {
    pub name: String,
    pub profile: Option<String>,
    pub description: String,
    /// The emulator's counters over the run (its health file, before and after).
    pub emulator: serde_json::Value,
    /// Why the run is invalid, if the emulator fell behind or dropped what its model did not.
    pub invalid: Option<String>,
}

/// What the agent did during one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepFigures {
    /// Messages the agent received and echoed.
    pub echoed: u64,
    /// Bytes the agent received.
    pub bytes_in: u64,
    /// Datagrams the agent received but did not echo (test fault injection only).
    pub dropped_on_purpose: u64,
    /// Echoes the agent could not send (UDP: the client's port closed, no buffer space).
    #[serde(default)]
    pub send_failed: u64,
    /// Agent CPU time (user + system) during the point, in nanoseconds.
    pub cpu_ns: u64,
}

/// The settings a round-trip or transfer run used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub protos: Vec<Proto>,
    pub sizes: Vec<u64>,
    pub iterations: Option<u64>,
    /// Time budget per point, if the run was time-bounded.
    pub duration_ns: Option<u64>,
    pub warmup: u64,
    /// Uncounted exchanging before the first point of each protocol, in nanoseconds.
    pub warmup_time_ns: u64,
    /// TCP_NODELAY requested (true = Nagle off).
    pub nodelay: bool,
    /// Number of write calls each message is split into (1 = one send per message).
    pub writes_per_message: u32,
    pub busy_poll: bool,
    pub client_cpu: Option<usize>,
    pub server_cpu: Option<usize>,
    pub sndbuf: Option<u64>,
    pub rcvbuf: Option<u64>,
    pub timeout_ns: u64,
    /// For transfer: bytes to move per run, and the runs per point.
    pub total_bytes: Option<u64>,
    pub repeat: Option<u32>,
}

/// One round-trip point: a protocol at a size. Times are round trips, not half.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttPoint {
    pub proto: Proto,
    pub size_bytes: u64,
    /// None when no exchange came back.
    pub summary: Option<Summary>,
    /// Exchanges done before counting began.
    pub warmup: u64,
    /// Messages sent while counting (counted + lost).
    pub sent: u64,
    /// Messages that did not come back within the timeout (UDP).
    pub lost: u64,
    /// Replies that arrived after their timeout and were discarded (UDP).
    pub late: u64,
    /// The raw round-trip times in nanoseconds, when asked for (--samples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_ns: Option<Vec<u64>>,
    pub server: Option<StepFigures>,
}

/// What `gridperf rtt --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttReport {
    pub schema: String,
    /// Always "rtt": times are full round trips.
    pub measure: String,
    pub settings: Settings,
    pub env: Environment,
    pub points: Vec<RttPoint>,
    pub warnings: Vec<Warning>,
}

/// One transfer point: `total_bytes` moved in messages of `size_bytes`, each
/// echoed, repeated `runs` times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferPoint {
    pub proto: Proto,
    pub size_bytes: u64,
    /// Messages per run: ceil(total / size), each of `size_bytes` (the Table 1 loop).
    pub messages: u64,
    /// Payload bytes sent one way per run (messages x size).
    pub bytes_per_run: u64,
    /// Distribution of the total time of each run, in nanoseconds.
    pub time: Option<Summary>,
    /// Median rate, payload bytes one way per second, in bits per second.
    pub rate_bps: Option<f64>,
    /// Total time of each run in nanoseconds.
    pub run_times_ns: Vec<u64>,
    /// Messages lost across all runs (UDP). A run with a loss did not move all its data.
    pub lost: u64,
    pub server: Option<StepFigures>,
}

/// What `gridperf transfer --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferReport {
    pub schema: String,
    pub settings: Settings,
    pub env: Environment,
    pub points: Vec<TransferPoint>,
    pub warnings: Vec<Warning>,
}

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
    /// Bytes per report interval.
    pub intervals: Vec<u64>,
    /// From the start: when the first and the last byte moved, in ns.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// CPU time (user + system) of the stream's thread, in ns.
    pub cpu_ns: u64,
    /// Why the stream's connection broke, if it did (its bytes stand).
    pub broken: Option<String>,
    pub socket: SocketInfo,
    /// UDP receiver: sequence accounting.
    pub udp: Option<crate::flow::SeqStats>,
    /// UDP sender: datagrams sent, and sends that failed (no buffer space).
    pub datagrams: Option<u64>,
    pub send_errors: u64,
    /// MSG_ZEROCOPY sender: sends, completions reaped, and how many of those
    /// the kernel did by copying after all (always, on loopback and veth).
    pub zerocopy: Option<ZeroCopyFigures>,
    /// The last TCP_INFO sample of the stream's socket.
    pub tcp_last: Option<crate::flow::TcpSample>,
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
    /// Received bits per second in each interval.
    pub interval_bps: Vec<f64>,
    pub retransmits: Option<u32>,
    pub verdict: Option<crate::flow::Verdict>,
    /// The sender's TCP_INFO timeline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<crate::flow::TcpSample>,
    pub broken: Option<String>,
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
}
