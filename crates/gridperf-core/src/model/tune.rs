//! `gridperf tune`'s results: each end's settings and advice, what caps a
//! stream each way, what the probes measured, and what `--apply` did. The
//! arithmetic that fills them is in [`crate::analysis::tune`].

use crate::analysis::tune;
/// Defined beside the arithmetic that fills them (no circle with it).
pub use crate::analysis::tune::{DirectionCap, EndAdvice, ShareProbe};
use serde::{Deserialize, Serialize};

/// What `--apply` did with one line on one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub host: String,
    pub setting: String,
    pub value: String,
    /// "set", or why not.
    pub outcome: String,
}

/// What was measured of a real path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// TCP round trips of 1 byte (Nagle off), after a warm-up.
    pub round_trips: u64,
    pub rtt_min_ns: f64,
    pub rtt_median_ns: f64,
    /// The bottleneck rate found by a UDP probe (--measure-rate), IP bits per second.
    pub rate_bps: Option<f64>,
    /// How the rate was found, or why it is only a lower bound.
    pub rate_note: Option<String>,
}

/// What `gridperf tune` prints (schema gridperf.tune/2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneView {
    pub schema: String,
    pub path: tune::TunePath,
    pub bdp_bytes: u64,
    /// Where the rate and RTT came from.
    pub path_from: String,
    pub measured: Option<Measured>,
    pub ends: Vec<EndAdvice>,
    pub directions: Vec<DirectionCap>,
    /// With --measure-share: what the probes found, each way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub share_probes: Vec<ShareProbe>,
    /// With --apply: what was set where, and the directions as read back after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<Applied>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<DirectionCap>>,
}
