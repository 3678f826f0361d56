//! `gridperf rtt`: Hockney ping-pong. S bytes out, S bytes back, each
//! exchange timed with the monotonic clock; per protocol and size the full
//! distribution of round-trip times (never half).

use super::echo::{start, EchoOptions, Outcome, Progress};
use crate::error::Result;
use crate::runner::Target;
use gridperf_core::model::{RttPoint, RttReport, Settings, RTT_SCHEMA};
use gridperf_core::plan::interleave;
use gridperf_core::stats::{self, Summary, Warning};
use std::time::{Duration, Instant};

/// At most this many samples are kept per point (80 MB of u64).
pub const MAX_SAMPLES: usize = 10_000_000;

#[derive(Debug, Clone)]
pub struct RttOptions {
    pub echo: EchoOptions,
    /// Counted exchanges per point (ignored when `duration` is set).
    pub iterations: u64,
    /// Time budget per point instead of a count.
    pub duration: Option<Duration>,
    /// Exchanges before counting starts, at each point.
    pub warmup: u64,
    /// Keep the raw samples in the report.
    pub keep_samples: bool,
}

pub fn settings(o: &RttOptions) -> Settings {
    Settings {
        iterations: o.duration.is_none().then_some(o.iterations),
        duration_ns: o.duration.map(|d| d.as_nanos() as u64),
        warmup: o.warmup,
        ..o.echo.settings()
    }
}

/// Runs the ping-pong over every (size, protocol) point, sizes outermost.
pub fn run(target: &Target, opts: &RttOptions, progress: &mut dyn FnMut(Progress)) -> Result<RttReport> {
    run_with(target, opts, progress, &|_, _| false, &mut |_| Ok(()))
}

/// As [`run`], leaving out the points `skip` names (already measured), and
/// handing each point to `on_point` as soon as it is measured (the store
/// writes it there); an error from `on_point` ends the run.
pub fn run_with(
    target: &Target,
    opts: &RttOptions,
    progress: &mut dyn FnMut(Progress),
    skip: &dyn Fn(gridperf_core::plan::Proto, u64) -> bool,
    on_point: &mut dyn FnMut(&RttPoint) -> Result<()>,
) -> Result<RttReport> {
    let mut r = start(gridperf_core::model::Measure::Rtt, target, &opts.echo)?;
    let points: Vec<_> =
        interleave(&opts.echo.protos, &opts.echo.sizes).into_iter().filter(|p| !skip(p.proto, p.size)).collect();
    let mut out = Vec::with_capacity(points.len());
    let mut warnings = Vec::new();
    for (i, pt) in points.iter().enumerate() {
        progress(Progress { done: i, total: points.len(), proto: pt.proto, size: pt.size });
        let idx = r.index(pt.proto)?;
        let size = pt.size as usize;
        let by_agent = pt.proto.is_stream() && opts.duration.is_none();
        let mut warmed = 0u64;
        // a cold process and connection run slower for tens of milliseconds:
        // the first point of each protocol warms up for a while first, in a
        // step of its own (the agent cannot count it in advance)
        if !out.iter().any(|p: &RttPoint| p.proto == pt.proto) {
            warmed += r.preheat(idx, pt.proto, pt.size, opts.echo.warmup_time)?;
        }
        r.opened.session.step(pt.proto, pt.size, by_agent.then_some(opts.warmup.saturating_add(opts.iterations)))?;
        for _ in 0..opts.warmup {
            r.warm_exchange(idx, pt.proto, pt.size, warmed)?;
            warmed += 1;
        }
        let late_before = r.pingers[idx].late;
        let cap = if opts.duration.is_some() { MAX_SAMPLES } else { (opts.iterations as usize).min(MAX_SAMPLES) };
        let mut samples: Vec<u64> = Vec::with_capacity(cap.min(1 << 20));
        let (mut sent, mut lost, mut in_a_row) = (0u64, 0u64, 0u64);
        let end = opts.duration.map(|d| Instant::now() + d);
        loop {
            let more = match end {
                Some(end) => Instant::now() < end && samples.len() < MAX_SAMPLES,
                None => sent < opts.iterations,
            };
            if !more {
                break;
            }
            sent += 1;
            match r.pingers[idx].exchange(size) {
                Ok(Outcome::Rtt(ns)) => {
                    samples.push(ns);
                    in_a_row = 0;
                }
                Ok(Outcome::Lost) => {
                    lost += 1;
                    in_a_row += 1;
                    r.lost_in_a_row(pt.proto, pt.size, in_a_row)?;
                }
                Err(e) => return Err(r.fail(pt.proto, pt.size, warmed + sent, e)),
            }
        }
        let figures = r.end_step(idx, by_agent)?;
        let summary = Summary::from_samples(&samples);
        let label = format!("{} {} B", pt.proto, pt.size);
        if let Some(s) = &summary {
            warnings.extend(stats::check(&label, s));
        }
        if lost > 0 {
            warnings.push(Warning::Lost { point: label, lost, sent });
        }
        out.push(RttPoint {
            proto: pt.proto,
            size_bytes: pt.size,
            summary,
            warmup: warmed,
            sent,
            lost,
            late: r.pingers[idx].late - late_before,
            samples_ns: opts.keep_samples.then_some(samples),
            server: Some(figures),
        });
        if let Some(p) = out.last() {
            on_point(p)?;
        }
    }
    let env = r.close(points.len(), progress, &mut warnings)?;
    Ok(RttReport {
        schema: RTT_SCHEMA.into(),
        measure: gridperf_core::model::Measure::Rtt.name().into(),
        settings: settings(opts),
        env,
        points: out,
        warnings,
    })
}
