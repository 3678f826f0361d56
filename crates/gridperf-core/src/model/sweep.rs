//! A sweep (`gridperf stream --sweep`): stream tests over a grid of
//! settings, one point per combination.

use serde::{Deserialize, Serialize};

/// One swept setting and its values, as given (sizes expanded to bytes,
/// delays and gaps to microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    pub field: String,
    pub values: Vec<String>,
}

/// One point's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Its settings (field, value), in the axes' order; a delay point also
    /// has `paced`, the pacing rate the delay stands for.
    pub settings: Vec<(String, String)>,
    /// Each run's throughput, both directions summed, bits per second.
    pub runs_bps: Vec<f64>,
    pub best_bps: Option<f64>,
    pub median_bps: Option<f64>,
    /// Each run's verdict: what limited its first stream.
    pub verdicts: Vec<String>,
    /// Why the lab's emulator could not vouch for it (after reruns), if so.
    pub invalid: Option<String>,
    pub error: Option<String>,
    /// What the point ran against, for the reference lines: the path's
    /// bottleneck rate, its round-trip time (a lab's), the window asked
    /// for (-w, or the buffers' maximum that autotuning stays within), the
    /// pacing rate (--pacing, or a delay's).
    #[serde(default)]
    pub link_bps: Option<u64>,
    #[serde(default)]
    pub rtt_ns: Option<u64>,
    #[serde(default)]
    pub window_bytes: Option<u64>,
    #[serde(default)]
    pub pacing_bps: Option<u64>,
}

impl SweepPoint {
    /// The value of one setting at this point.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.settings.iter().find(|(f, _)| f == field).map(|(_, v)| v.as_str())
    }

    /// Whether the point stands: measured, and valid.
    pub fn good(&self) -> bool {
        self.error.is_none() && self.invalid.is_none() && !self.runs_bps.is_empty()
    }
}
