//! `gridperf tune`'s results: each end's settings and advice, what caps a
//! stream each way, what the probes measured, and what `--apply` did. The
//! arithmetic that fills them is in [`crate::tune`].

use crate::tune::{self, HostSettings};
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

/// One end's settings and the advice for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndAdvice {
    /// "this host", "agent 192.0.2.7:5201", or a lab host's name.
    pub name: String,
    pub settings: HostSettings,
    pub advice: tune::Advice,
    /// Settings that could not be read or parsed: unknown, not guessed.
    pub unknown: Vec<String>,
}

/// What caps a stream from one end to the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionCap {
    pub from: String,
    pub to: String,
    /// "sender: SETTING" or "receiver: SETTING"; None: nothing caps it below the path's rate.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
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

/// What the share probes found for one direction of a path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareProbe {
    /// "up" (this end, or lab host a, sends) or "down" (the far end sends).
    pub direction: String,
    /// The receive buffer the receiver was granted, and the largest window
    /// it advertised: their ratio is its window share.
    pub rcvbuf: Option<u64>,
    pub window_max: Option<u64>,
    pub receive_share: Option<f64>,
    /// The send buffer the sender was granted, and the median data in
    /// flight (unacknowledged segments x MSS; a diagnostic). The send share
    /// is the window the probe's steady rate needs on the path (rate x RTT) over
    /// the buffer: what the buffer let through, as a fraction of it.
    pub sndbuf: Option<u64>,
    pub in_flight_median: Option<u64>,
    pub send_share: Option<f64>,
    /// The share at the quartiles of the probe's rate from one TCP_INFO
    /// sample to the next: how far the one share can be trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_share_quartiles: Option<(f64, f64)>,
    /// The send probe reached the path's rate without the buffer holding it
    /// back: that buffer suffices on this path.
    pub send_buffer_suffices: bool,
    /// What the send probe carried after its first half second (bytes
    /// acknowledged over the time), bits per second.
    pub send_probe_bps: Option<f64>,
    /// Why a share is missing, if one is.
    pub notes: Vec<String>,
}
