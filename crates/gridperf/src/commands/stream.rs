//! `gridperf stream`: bulk throughput, each run stored, the intervals
//! printed live, the table or JSON at the end.

use super::Format;
use super::{lab_valid, Output, Place};
use crate::engines::stream::{self, StreamOptions};
use crate::error::{Error, Result};
use crate::render;
pub use crate::render::stream::Units;
use crate::store::{NewRun, Recorder, StoreChoice, StreamPoint};
use gridperf_core::model::{Measure, StreamReport};
use std::path::PathBuf;

/// What `gridperf stream` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub place: Place,
    pub stream: StreamOptions,
    /// Report the best run's total instead of the median (with --repeat).
    pub best: bool,
    /// Write every stream's TCP_INFO timeline here (CSV if it ends in .csv).
    pub timeline: Option<PathBuf>,
    /// Capture the test's packets here (and the snap length), then compare the capture with TCP_INFO.
    pub capture: Option<(PathBuf, u32)>,
    pub store: StoreChoice,
    /// The unit rates are printed in (-f).
    pub units: render::stream::Units,
    /// The settings swept (--sweep), in the order given; empty: one test.
    pub sweep: Vec<gridperf_core::model::Axis>,
    /// Go ahead with a sweep over an hour long.
    pub yes: bool,
    /// The sender's NIC rate a swept per-packet delay is reckoned against.
    pub nic_rate_bps: Option<u64>,
    /// The preset the sweep came from (--preset), if any.
    pub preset: Option<String>,
    /// Go on with the latest unfinished sweep of these settings.
    pub resume: bool,
    /// The stored sweep this test is a point of.
    pub in_sweep: Option<i64>,
}

/// One stream test (a sweep, `o.sweep` not empty, is `commands::sweep::run`).
pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let live = out.format == Format::Table;
    let r = measure(&o, out, live)?;
    if let Some(path) = &o.timeline {
        std::fs::write(path, render::stream::timeline(&r, path.extension().is_some_and(|e| e == "csv")))
            .map_err(|e| Error::usage(format!("--timeline {}: {e}", path.display())))?;
    }
    out.render(&render::Shown::new(&r, || render::stream::table(&r, o.best, o.units)))?;
    out.warnings(&r.warnings, r.runs.iter().map(|run| run.streams.len()).sum(), false);
    for run in &r.runs {
        lab_valid(&run.env)?;
    }
    if r.runs.iter().all(|run| run.streams.iter().all(|s| s.receiver.bytes == 0)) {
        return Err(Error::measurement("no stream moved any data"));
    }
    // a stream that broke is a part of the run that failed: said, and the exit says it too
    let streams: usize = r.runs.iter().map(|run| run.streams.len()).sum();
    let broken: Vec<String> = r
        .runs
        .iter()
        .flat_map(|run| run.streams.iter())
        .filter_map(|s| s.sender.broken.as_ref().or(s.receiver.broken.as_ref()))
        .cloned()
        .collect();
    if let Some(first) = broken.first() {
        return Err(Error::measurement(format!(
            "{} of {streams} streams broke (the first: {first}); the figures above are what arrived",
            broken.len()
        )));
    }
    Ok(())
}

/// Runs the test (`repeat` times) where `o.place` says, prints its
/// intervals as they pass when `live`, and stores it.
pub fn measure(o: &Opts, out: &mut Output, live: bool) -> Result<StreamReport> {
    let mut o = o.clone();
    o.store.check()?;
    let prepared = o.place.prepare("run")?;
    o.stream.notes.extend(prepared.notes.iter().cloned());
    if o.stream.path_rate_bps.is_none() {
        o.stream.path_rate_bps = prepared.path_rate_bps;
    }
    let control = match &prepared.target.agent {
        crate::runner::Endpoint::Remote(a) => Some(std::net::SocketAddr::new(a.ip().to_canonical(), a.port())),
        crate::runner::Endpoint::Local(_) => None,
    };
    let capture = match &o.capture {
        Some((path, snaplen)) => {
            let peer = match &prepared.target.agent {
                crate::runner::Endpoint::Remote(a) => a.ip().to_canonical(),
                crate::runner::Endpoint::Local(_) => std::net::IpAddr::from([127, 0, 0, 1]),
            };
            Some(super::trace::Capture::start(path, peer, *snaplen)?)
        }
        None => None,
    };
    let opts = &o.stream;
    let sending_ms = (opts.omit.as_millis() as u64) + opts.spec.duration_ms;
    let mut headed = false;
    let result = stream::run(&prepared.target, opts, &mut |run, t_ms, rows| {
        // after the senders' time, only intervals that still brought data
        if live && (t_ms <= sending_ms + opts.spec.interval_ms || rows.iter().any(|r| r.1 > 0)) {
            if !headed {
                let _ = out.print(&render::stream::interval_header(rows.len()));
                headed = true;
            }
            let line = render::stream::interval_line(
                opts.spec.interval_ms,
                opts.omit.as_millis() as u64,
                opts.repeat,
                (run, t_ms),
                rows,
                o.units,
            );
            // a live line that cannot be printed is not worth the run
            let _ = out.print(&line);
        }
    });
    let captured = capture.map(super::trace::Capture::stop);
    let mut r = match result {
        Ok(r) => r,
        Err(e) => {
            store_failure(&o, &e)?;
            return Err(e);
        }
    };
    if let (Some(stats), Some((path, _))) = (captured, &o.capture) {
        let tr = super::trace::analyse(path, std::time::Duration::from_millis(100), None, None)?;
        r.capture = Some(super::trace::compare(path, &tr, stats?, &r, control)?);
        if let Some(svg) = super::trace::overlay(path, &tr, &r)? {
            out.note(&format!("gridperf: TCP_INFO and the capture on one chart: {}", svg.display()));
        }
    }
    store(&o, &r, out)?;
    Ok(r)
}

fn new_run<'a>(o: &'a Opts, network: &'a str, target: &'a str, r: Option<&StreamReport>) -> NewRun<'a> {
    NewRun {
        survey_id: None,
        sweep_id: o.in_sweep,
        kind: Measure::Stream,
        network,
        target,
        settings: serde_json::json!({ "spec": o.stream.spec, "omit_ns": r.map(|r| r.omit_ns).unwrap_or(o.stream.omit.as_nanos() as u64) }),
        lab_profile: o.place.network.lab_profile(),
        mtu: None,
    }
}

/// Stores a stream test: one run per repetition, one point per stream.
fn store(o: &Opts, r: &StreamReport, out: &mut Output) -> Result<()> {
    let (network, target) = (o.place.network.name(), o.place.network.target());
    for run in &r.runs {
        let mut rec = Recorder::open(&o.store, &new_run(o, &network, &target, Some(r)))?;
        for s in &run.streams {
            rec.point(&StreamPoint { spec: &r.spec, result: s })?;
        }
        if let Some(where_) = rec.finish(Ok(&run.env))? {
            out.note(&format!("gridperf: {where_}"));
        }
    }
    Ok(())
}

/// A test that failed is stored as a failed run, with why.
fn store_failure(o: &Opts, e: &Error) -> Result<()> {
    let (network, target) = (o.place.network.name(), o.place.network.target());
    let mut rec = Recorder::open(&o.store, &new_run(o, &network, &target, None))?;
    rec.finish(Err(e))?;
    Ok(())
}
