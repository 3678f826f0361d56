//! The echo tests' results: round-trip time (`rtt`) and transfer time (`transfer`).

use super::Environment;
use crate::analysis::stats::{Summary, Warning};
use crate::model::plan::Proto;
use serde::{Deserialize, Serialize};

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

impl StepFigures {
    /// Adds another step's figures (a point measured in several steps).
    pub fn add(&mut self, f: &StepFigures) {
        self.echoed += f.echoed;
        self.bytes_in += f.bytes_in;
        self.dropped_on_purpose += f.dropped_on_purpose;
        self.send_failed += f.send_failed;
        self.cpu_ns += f.cpu_ns;
    }
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
    /// For rtt: the rounds each point is measured in (the protocols in turn
    /// within each round), and how often an irregular point is measured again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// For rtt: a size stops before `rounds` once its protocols are told
    /// apart or shown tied ([`crate::analysis::stopping`]; the quick survey's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_early: bool,
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
    /// When the point was measured in rounds (the protocols in turn within
    /// each round): each round's median, ns (NaN for a round whose every
    /// message was lost). The replicates a comparison's interval comes from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds_ns: Vec<f64>,
    /// Why the median does not describe the point (two modes, a drift),
    /// when it still did not after the retries: such a point is left out
    /// of the conclusions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irregular: Option<crate::analysis::shape::Irregular>,
    /// How many times the point was measured again because it was irregular.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub retries: u32,
    /// Round trips measured but left out of the figures: they crossed a
    /// lab's emulator while it was late (held up by the machine, or a
    /// packet over 1 ms behind schedule), and were not the emulated path's.
    /// `sent` counts them; the summary does not.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub left_out: u64,
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
    /// When each run of `run_times_ns` began (ns since the Unix epoch, this
    /// host's clock): a slow run set beside what else happened then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_started_unix_ns: Vec<u64>,
    /// Messages lost across all runs (UDP). A run with a loss did not move all its data.
    pub lost: u64,
    pub server: Option<StepFigures>,
    /// Timed runs measured but left out of the figures (and measured
    /// again): they crossed a lab's emulator while it was late, and were
    /// not the emulated path's. The server's figures count them.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub left_out: u64,
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
