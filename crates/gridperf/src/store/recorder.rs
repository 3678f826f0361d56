//! The one way a measurement is stored: a [`Recorder`] begins (or, in a
//! resumed survey, finds) the run, writes each point as it is measured,
//! and ends the run with its environment, its status and, when it failed,
//! why. Every command and the survey use it; each kind of point says in
//! [`Stored`] how it becomes a row.

use super::{default_path, NewRun, PointRow, Store};
use crate::error::{Error, Result};
use gridperf_core::model::{Environment, FanoutPoint, RttPoint, StreamResult, TransferPoint};
use gridperf_core::wire::StreamSpec;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A measured point as the store keeps it: its key (protocol, size,
/// setting), the quartiles of its times where it has them, and all its
/// figures as JSON.
pub trait Stored {
    fn row(&self) -> PointRow;
}

fn figures(p: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(p).unwrap_or_default()
}

/// Samples a point keeps in the store at most: more are thinned evenly,
/// in the order they were taken (enough for a distribution and its drift).
pub const STORED_SAMPLES: usize = 4096;

/// At most [`STORED_SAMPLES`] of `samples`, evenly strided.
pub fn thinned(samples: &[u64]) -> Vec<u64> {
    if samples.len() <= STORED_SAMPLES {
        return samples.to_vec();
    }
    (0..STORED_SAMPLES).map(|k| samples[k * samples.len() / STORED_SAMPLES]).collect()
}

impl Stored for RttPoint {
    fn row(&self) -> PointRow {
        PointRow {
            proto: self.proto.name().into(),
            size: self.size_bytes,
            setting: String::new(),
            median_ns: self.summary.as_ref().map(|s| s.median_ns),
            q1_ns: self.summary.as_ref().map(|s| s.q1_ns),
            q3_ns: self.summary.as_ref().map(|s| s.q3_ns),
            // the raw times, when kept, go in a column of their own
            figures: figures(&RttPoint { samples_ns: None, ..self.clone() }),
            samples: self.samples_ns.as_deref().map(thinned),
        }
    }
}

impl Stored for TransferPoint {
    fn row(&self) -> PointRow {
        PointRow {
            proto: self.proto.name().into(),
            size: self.size_bytes,
            setting: String::new(),
            median_ns: self.time.as_ref().map(|s| s.median_ns),
            q1_ns: self.time.as_ref().map(|s| s.q1_ns),
            q3_ns: self.time.as_ref().map(|s| s.q3_ns),
            figures: figures(self),
            samples: None,
        }
    }
}

impl Stored for FanoutPoint {
    fn row(&self) -> PointRow {
        PointRow {
            proto: self.variant.name().into(),
            size: self.size,
            setting: format!("nodes={} messages={}", self.nodes, self.messages),
            median_ns: self.time.as_ref().map(|t| t.median_ns),
            q1_ns: self.time.as_ref().map(|t| t.q1_ns),
            q3_ns: self.time.as_ref().map(|t| t.q3_ns),
            figures: figures(self),
            samples: None,
        }
    }
}

/// One stream of a stream run, with the spec it ran under (its protocol
/// and write size key the row).
pub struct StreamPoint<'a> {
    pub spec: &'a StreamSpec,
    pub result: &'a StreamResult,
}

impl Stored for StreamPoint<'_> {
    fn row(&self) -> PointRow {
        PointRow {
            proto: self.spec.proto.clone(),
            size: self.spec.write_size,
            setting: format!("stream {} {}", self.result.index, self.result.direction),
            median_ns: None,
            q1_ns: None,
            q3_ns: None,
            figures: figures(self.result),
            samples: None,
        }
    }
}

/// Where a standalone measurement is stored.
#[derive(Debug, Clone, Default)]
pub enum StoreChoice {
    /// The default database: a store that cannot be opened or written is
    /// reported once on stderr and the measurement goes on without it.
    #[default]
    Default,
    /// A database the user named: every failure is an error.
    At(PathBuf),
    /// Not stored (`--no-store`).
    Off,
}

impl StoreChoice {
    pub fn new(db: Option<PathBuf>, no_store: bool) -> StoreChoice {
        match (super::named(db), no_store) {
            (_, true) => StoreChoice::Off,
            (Some(p), false) => StoreChoice::At(p),
            (None, false) => StoreChoice::Default,
        }
    }

    /// Opens (and makes, if need be) a database named with --db before a
    /// measurement, so that a bad one is said before the run, not after it
    /// is lost. The default database's troubles stay warnings at the end.
    pub fn check(&self) -> Result<()> {
        match self {
            StoreChoice::At(p) => Store::open(p).map(drop),
            _ => Ok(()),
        }
    }

    /// The database's path (the default one when none was named).
    pub fn path(&self) -> PathBuf {
        match self {
            StoreChoice::At(p) => p.clone(),
            _ => default_path(),
        }
    }
}

/// A run being stored, point by point.
pub struct Recorder {
    store: Option<Store>,
    run: Option<i64>,
    strict: bool,
}

impl Recorder {
    /// Begins a run of a standalone measurement.
    pub fn open(choice: &StoreChoice, new_run: &NewRun) -> Result<Recorder> {
        let strict = matches!(choice, StoreChoice::At(_));
        let path = match choice {
            StoreChoice::Off => return Ok(Recorder { store: None, run: None, strict: false }),
            c => c.path(),
        };
        let opened = Store::open(&path).and_then(|s| s.begin_run(new_run).map(|id| (s, id)));
        match opened {
            Ok((s, id)) => Ok(Recorder { store: Some(s), run: Some(id), strict }),
            Err(e) if strict => Err(e),
            Err(e) => {
                eprintln!("gridperf: warning: not storing this run: {e} (--no-store to say so, --db PATH to choose)");
                Ok(Recorder { store: None, run: None, strict })
            }
        }
    }

    /// A survey's run of one kind on one network: the one a resumed survey
    /// began before, or a new one. Every failure is an error.
    pub fn in_survey(db: &Path, new_run: &NewRun) -> Result<Recorder> {
        let store = Store::open(db)?;
        let survey = new_run.survey_id.ok_or_else(|| Error::internal("a survey's run without its survey"))?;
        let id = match store.survey_run(survey, new_run.network, new_run.kind)? {
            Some(id) => id,
            None => store.begin_run(new_run)?,
        };
        Ok(Recorder { store: Some(store), run: Some(id), strict: true })
    }

    /// The run's id, when it is stored.
    pub fn run_id(&self) -> Option<i64> {
        self.run
    }

    /// Whether the run already holds this point (a resumed survey skips it).
    pub fn has(&self, proto: &str, size: u64, setting: &str) -> bool {
        match (&self.store, self.run) {
            (Some(s), Some(run)) => s.has_point(run, proto, size, setting).unwrap_or(false),
            _ => false,
        }
    }

    /// Writes a point, in a transaction of its own.
    pub fn point(&mut self, p: &impl Stored) -> Result<()> {
        let (Some(s), Some(run)) = (&self.store, self.run) else { return Ok(()) };
        match s.add_point(run, &p.row()) {
            Ok(()) => Ok(()),
            Err(e) if self.strict => Err(e),
            Err(e) => {
                eprintln!("gridperf: warning: the store failed, not storing the rest of this run: {e}");
                self.store = None;
                Ok(())
            }
        }
    }

    /// Ends the run with how the measurement ended: done with its
    /// environment, or failed with the error (the run is then not valid,
    /// and says why). Returns where it went, for the user.
    pub fn finish(&mut self, outcome: std::result::Result<&Environment, &Error>) -> Result<Option<String>> {
        match outcome {
            Ok(env) => self.finish_as(env, None),
            Err(e) => self.end(None, "failed", Some(&e.message)),
        }
    }

    /// Ends a run that measured, with its environment; `failed`: why a
    /// part of it failed (a copy's files not in place), which makes it not
    /// valid, as a failure does.
    pub fn finish_as(&mut self, env: &Environment, failed: Option<&str>) -> Result<Option<String>> {
        match failed {
            None => self.end(Some(env), "done", None),
            Some(why) => self.end(Some(env), "failed", Some(why)),
        }
    }

    fn end(&mut self, env: Option<&Environment>, status: &str, why: Option<&str>) -> Result<Option<String>> {
        let (Some(s), Some(run)) = (&self.store, self.run) else { return Ok(None) };
        let done = s.finish_run(run, env, status, why);
        match done {
            Ok(()) => Ok(Some(format!("stored as run {run} in {}", s.shown()))),
            Err(e) if self.strict => Err(e),
            Err(e) => {
                eprintln!("gridperf: warning: the store failed at the end of this run: {e}");
                Ok(None)
            }
        }
    }
}

/// One file of a copy: keyed by its path, its figures as JSON.
impl Stored for gridperf_core::model::CopyFileResult {
    fn row(&self) -> PointRow {
        PointRow {
            proto: "copy".into(),
            size: self.size,
            setting: self.path.clone(),
            median_ns: None,
            q1_ns: None,
            q3_ns: None,
            figures: figures(self),
            samples: None,
        }
    }
}

/// One data connection of a copy, with its bytes per interval.
impl Stored for gridperf_core::model::CopyStream {
    fn row(&self) -> PointRow {
        PointRow {
            proto: "copy-stream".into(),
            size: self.bytes,
            setting: format!("stream {}", self.index),
            median_ns: None,
            q1_ns: None,
            q3_ns: None,
            figures: figures(self),
            samples: None,
        }
    }
}

/// One direction of a captured TCP connection (`gridperf trace`), its series in the figures.
impl Stored for gridperf_core::model::TraceDirection {
    fn row(&self) -> PointRow {
        PointRow {
            proto: "trace-direction".into(),
            size: self.bytes_acked,
            setting: format!("{} -> {}", self.from, self.to),
            median_ns: self.rtt_median_ms.map(|m| m * 1e6),
            q1_ns: None,
            q3_ns: None,
            figures: figures(self),
            samples: None,
        }
    }
}

/// Something a copy's pool of connections did (a restart, -P auto's
/// change, a broken connection): keyed by its kind and connections.
impl Stored for gridperf_core::model::CopyEvent {
    fn row(&self) -> PointRow {
        PointRow {
            proto: "copy-event".into(),
            size: 0,
            setting: format!("{}{} at {:.1} s", self.kind, self.who(), self.t_s),
            median_ns: None,
            q1_ns: None,
            q3_ns: None,
            figures: figures(self),
            samples: None,
        }
    }
}

/// A clone's profile as fitted (`lab clone`): its file without the
/// comparison, which has points of its own.
impl Stored for gridperf_core::lab::clone::CloneFile {
    fn row(&self) -> PointRow {
        let fitted = gridperf_core::lab::clone::CloneFile { verify: Vec::new(), ..self.clone() };
        PointRow {
            proto: "clone-profile".into(),
            size: 0,
            setting: String::new(),
            median_ns: self.measured.as_ref().and_then(|m| m.rtt_p50_s).map(|s| s * 1e9),
            q1_ns: None,
            q3_ns: None,
            figures: figures(&fitted),
            samples: None,
        }
    }
}

/// One figure of `lab clone --verify`: the real path's and the clone's.
impl Stored for gridperf_core::lab::clone::Compared {
    fn row(&self) -> PointRow {
        PointRow {
            proto: "clone-verify".into(),
            size: 0,
            setting: self.what.clone(),
            median_ns: None,
            q1_ns: None,
            q3_ns: None,
            figures: figures(self),
            samples: None,
        }
    }
}

/// The 64-byte round trips a clone measured on one side ("real path" or
/// "clone"), kept for the report's distributions.
pub struct CloneRtt<'a> {
    pub side: &'a str,
    pub samples_ns: &'a [u64],
}

impl Stored for CloneRtt<'_> {
    fn row(&self) -> PointRow {
        let mut v = self.samples_ns.to_vec();
        v.sort_unstable();
        let q = |p| gridperf_core::analysis::stats::quantile_sorted(&v, p);
        PointRow {
            proto: "clone-rtt".into(),
            size: 64,
            setting: self.side.into(),
            median_ns: q(0.5),
            q1_ns: q(0.25),
            q3_ns: q(0.75),
            figures: serde_json::json!({ "side": self.side, "count": v.len(), "p95_ns": q(0.95) }),
            samples: Some(thinned(self.samples_ns)),
        }
    }
}
