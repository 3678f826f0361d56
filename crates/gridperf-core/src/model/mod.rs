//! Result types: what a run measured and under which conditions. These are
//! what `--json` prints (schema documented in docs/json.md), what the store
//! keeps and the renderers draw, and what the agent returns over the
//! control channel. One file per measurement; the conditions every
//! measurement records (the environment) and the [`Measure`] that names
//! each kind are here.

mod copy;
mod echo;
mod fanout;
pub mod plan;
mod stream;
mod sweep;
mod trace;
mod tune;

pub use copy::*;
pub use echo::*;
pub use fanout::*;
pub use stream::*;
pub use sweep::*;
pub use trace::*;
pub use tune::*;

use crate::model::plan::Proto;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// JSON schema names and versions. Bump the number on any change that is
/// not adding an optional field.
pub const RTT_SCHEMA: &str = "gridperf.rtt/1";
pub const TRANSFER_SCHEMA: &str = "gridperf.transfer/1";
pub const STREAM_SCHEMA: &str = "gridperf.stream/1";
/// `gridperf copy --json`: a copy's files and figures.
pub const COPY_SCHEMA: &str = "gridperf.copy/1";
/// `gridperf stream --sweep --json`: every point of a sweep.
pub const SWEEP_SCHEMA: &str = "gridperf.sweep/1";
pub const FANOUT_SCHEMA: &str = "gridperf.fanout/1";
pub const TUNE_SCHEMA: &str = "gridperf.tune/2";
/// `gridperf trace --json`: a capture's TCP connections.
pub const TRACE_SCHEMA: &str = "gridperf.trace/1";
/// `lab clone --json`, and a profile file.
pub const CLONE_SCHEMA: &str = "gridperf.clone/1";
/// `gridperf survey --json`: the conclusions per network.
pub const SURVEY_SCHEMA: &str = "gridperf.survey/1";
/// `gridperf runs list --json`: the stored runs.
pub const RUNS_SCHEMA: &str = "gridperf.runs/1";
/// `gridperf runs show --json` and `runs export`: one stored run and its points.
pub const RUN_SCHEMA: &str = "gridperf.run/1";
/// `gridperf lab up --json` and `lab status --json`: a lab and its health.
pub const LAB_SCHEMA: &str = "gridperf.lab/1";
/// `gridperf lab profiles --json`.
pub const LAB_PROFILES_SCHEMA: &str = "gridperf.lab-profiles/1";
/// `gridperf lab calibrate --json`.
pub const LAB_CALIBRATION_SCHEMA: &str = "gridperf.lab-calibration/1";

/// The network name every run on loopback is stored under, whatever the
/// user typed to reach it (a local agent, 127.0.0.1, ::1, localhost, or the
/// lab's loopback profile).
pub const LOOPBACK: &str = "loopback";

/// The kinds of measurement gridperf makes and stores: one name leads from
/// the subcommand to its test request, its stored runs and its renderer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// Round-trip time per protocol and size (`gridperf rtt`).
    Rtt,
    /// The first document's Table 1 transfer time (`gridperf transfer`).
    Transfer,
    /// Bulk throughput (`gridperf stream`).
    Stream,
    /// The many-to-one benchmark (`gridperf fanout`).
    Fanout,
    /// Files moved, verified (`gridperf copy`).
    Copy,
    /// A packet capture's TCP connections (`gridperf trace`).
    Trace,
    /// A real path fitted to the lab's model, and with --verify its clone
    /// measured beside it (`gridperf lab clone`).
    Clone,
}

impl Measure {
    pub const ALL: [Measure; 7] = [
        Measure::Rtt,
        Measure::Transfer,
        Measure::Stream,
        Measure::Fanout,
        Measure::Copy,
        Measure::Trace,
        Measure::Clone,
    ];
    pub const VALID: &'static str = "rtt, transfer, stream, fanout, copy, trace, clone";

    pub fn name(self) -> &'static str {
        match self {
            Measure::Rtt => "rtt",
            Measure::Transfer => "transfer",
            Measure::Stream => "stream",
            Measure::Fanout => "fanout",
            Measure::Copy => "copy",
            Measure::Trace => "trace",
            Measure::Clone => "clone",
        }
    }

    pub fn parse(s: &str) -> Option<Measure> {
        Measure::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The schema of the document `--json` prints for it.
    pub fn schema(self) -> &'static str {
        match self {
            Measure::Rtt => RTT_SCHEMA,
            Measure::Transfer => TRANSFER_SCHEMA,
            Measure::Stream => STREAM_SCHEMA,
            Measure::Fanout => FANOUT_SCHEMA,
            Measure::Copy => COPY_SCHEMA,
            Measure::Trace => TRACE_SCHEMA,
            Measure::Clone => CLONE_SCHEMA,
        }
    }
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Measure {
    type Err = String;
    fn from_str(s: &str) -> Result<Measure, String> {
        Measure::parse(s).ok_or_else(|| format!("unknown measurement {s:?}: give one of {}", Measure::VALID))
    }
}

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
    /// How busy the machine was with other tasks over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<MachineLoad>,
}

/// The machine's CPUs over a run: how much went to gridperf (this process
/// and its children: the lab's emulator and agents), how much to other
/// tasks, and how much the hypervisor took (steal). Shares are of all the
/// CPUs' time over the run's wall time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    pub cpus: u32,
    pub wall_s: f64,
    /// Every task's busy time.
    pub busy: f64,
    /// gridperf's.
    pub ours: f64,
    /// Other tasks': busy less gridperf's.
    pub others: f64,
    /// The hypervisor's (the CPUs not running at all).
    pub steal: f64,
    /// Runnable tasks at the end of the run, the reader included.
    pub runnable: u64,
}

/// Other tasks taking this share of the CPUs (or steal this share) make a
/// busy machine: what the survey says beside figures measured on it.
pub const BUSY_OTHERS: f64 = 0.25;
pub const BUSY_STEAL: f64 = 0.05;

impl MachineLoad {
    /// The load between two readings: the machine's per-CPU times and
    /// gridperf's own CPU time (ns), `wall_s` apart.
    pub fn between(
        before: (&[u64], &[u64], &[u64]),
        after: (&[u64], &[u64], &[u64]),
        ours_ns: u64,
        wall_s: f64,
        runnable: u64,
    ) -> Option<MachineLoad> {
        let cpus = after.0.len();
        if cpus == 0 || before.0.len() != cpus || wall_s <= 0.0 {
            return None;
        }
        let d =
            |a: &[u64], b: &[u64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x.saturating_sub(*y) as f64).collect() };
        let (busy, idle, steal) = (d(after.0, before.0), d(after.1, before.1), d(after.2, before.2));
        // the CPUs' time as /proc/stat counted it (ticks): busy + idle + steal
        let total: f64 = busy.iter().chain(&idle).chain(&steal).sum::<f64>().max(1.0);
        let busy_all: f64 = busy.iter().sum();
        let ours = (ours_ns as f64).min(busy_all);
        let others = busy_all - ours;
        Some(MachineLoad {
            cpus: cpus as u32,
            wall_s,
            busy: busy_all / total,
            ours: ours / total,
            others: others / total,
            steal: steal.iter().sum::<f64>() / total,
            runnable,
        })
    }

    /// Other tasks or the hypervisor took enough to show in the figures.
    pub fn busy_machine(&self) -> bool {
        self.others >= BUSY_OTHERS || self.steal >= BUSY_STEAL
    }

    /// "other tasks took 48% of the 2 CPUs, steal 1%".
    pub fn describe(&self) -> String {
        format!(
            "other tasks took {:.0}% of the {} CPUs, the hypervisor {:.0}% (steal), gridperf {:.0}%",
            self.others * 100.0,
            self.cpus,
            self.steal * 100.0,
            self.ours * 100.0
        )
    }
}

pub use crate::analysis::stats::LabCause;

/// The emulated network a run crossed, and what the emulator says of itself
/// over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabRecord {
    pub name: String,
    pub profile: Option<String>,
    pub description: String,
    /// The lab's own round trip on this machine, ns, measured as it came up
    /// and taken off its delays (half each way): a round trip across the
    /// lab is at least its delays as asked less this. None when nothing was
    /// taken off (no delay, the loopback lab, or a floor measured busy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ns: Option<f64>,
    /// The emulator's counters over the run (its health file, before and after).
    pub emulator: serde_json::Value,
    /// Why the run is invalid, if the emulator fell behind or dropped what its model did not.
    pub invalid: Option<String>,
    /// What made it invalid, as the advice needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<LabCause>,
    /// For a valid run: how long the emulator was held up, and by what
    /// (within the share a run may lose); it is among the run's notes too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LabRecord {
    /// The INVALID warning this record carries, if it does.
    pub fn invalid_warning(&self) -> Option<crate::analysis::stats::Warning> {
        self.invalid.clone().map(|why| crate::analysis::stats::Warning::LabInvalid { why, cause: self.cause })
    }
}

impl Environment {
    /// The lab a run crossed: its record, and its note among the run's notes.
    pub fn set_lab(&mut self, lab: Option<LabRecord>) {
        if let Some(n) = lab.as_ref().and_then(|l| l.note.clone()) {
            self.notes.push(n);
        }
        self.lab = lab;
    }
}

#[cfg(test)]
mod tests {
    /// A result stored as JSON and read back is the same number, to the
    /// last bit: serde_json's default parser may land one unit in the last
    /// place off (CI: a clone's jitter table read back from its run had
    /// -2.1235838311602087e-7 where -2.123583831160209e-7 was stored), so
    /// the workspace asks for its `float_roundtrip`.
    #[test]
    fn a_number_stored_as_json_reads_back_bit_for_bit() {
        let mut rng = crate::rng::Rng::new(36);
        let mut values = vec![-2.123583831160209e-7, 0.0058760867500000005, f64::MIN_POSITIVE, 1e300, -0.0];
        for _ in 0..20_000 {
            // every exponent, every mantissa
            let bits = rng.next_u64();
            let x = f64::from_bits(bits);
            if x.is_finite() {
                values.push(x);
            }
            values.push(rng.normal() * 1e-6);
        }
        for x in values {
            let text = serde_json::to_string(&x).expect("a finite number");
            let back: f64 = serde_json::from_str(&text).expect("read back");
            assert_eq!(back.to_bits(), x.to_bits(), "{x:e} written as {text}, read back as {back:e}");
        }
    }
}
