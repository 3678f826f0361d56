//! `gridperf rtt`: Hockney ping-pong. S bytes out, S bytes back, each
//! exchange timed with the monotonic clock; per protocol and size the full
//! distribution of round-trip times (never half).

use super::echo::{start, EchoOptions, Outcome, Progress};
use crate::error::Result;
use crate::lab::emulator::crossing;
use crate::runner::Target;
use gridperf_core::analysis::shape::{self, Irregular};
use gridperf_core::analysis::stats::{self, Summary, Warning};
use gridperf_core::model::plan::{interleave, Proto};
use gridperf_core::model::{RttPoint, RttReport, Settings, StepFigures, RTT_SCHEMA};
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
    /// Rounds per point: the count or the time of a point is split over
    /// this many rounds, and within each round the protocols of a size take
    /// their turn (rotating who goes first), so that what drifts over
    /// seconds falls on every protocol alike. Each round's median is kept:
    /// comparisons take their intervals from them. 1: a point in one go.
    pub rounds: u32,
    /// How many times the points of a size are measured again when one of
    /// them is irregular (two modes, a drift); one that stays irregular is
    /// marked so.
    pub retries: u32,
    /// Stop a size before `rounds` once every pair of its protocols is told
    /// apart or shown tied, at the stated error rate
    /// ([`gridperf_core::analysis::stopping::Rule`]); never before three rounds.
    pub stop_early: bool,
}

impl RttOptions {
    /// A count of exchanges per point, in one round, no retries.
    pub fn counted(echo: EchoOptions, iterations: u64, warmup: u64) -> RttOptions {
        RttOptions {
            echo,
            iterations,
            duration: None,
            warmup,
            keep_samples: false,
            rounds: 1,
            retries: 0,
            stop_early: false,
        }
    }
}

pub fn settings(o: &RttOptions) -> Settings {
    Settings {
        iterations: o.duration.is_none().then_some(o.iterations),
        duration_ns: o.duration.map(|d| d.as_nanos() as u64),
        warmup: o.warmup,
        rounds: (o.rounds > 1).then_some(o.rounds),
        retries: (o.retries > 0).then_some(o.retries),
        stop_early: o.stop_early && o.rounds > 1,
        ..o.echo.settings()
    }
}

/// Runs the ping-pong over every (size, protocol) point, sizes outermost.
pub fn run(target: &Target, opts: &RttOptions, progress: &mut dyn FnMut(Progress)) -> Result<RttReport> {
    run_with(target, opts, progress, &|_, _| false, &mut |_| Ok(()))
}

/// What one point gathered over its rounds.
#[derive(Default)]
struct Gathered {
    samples: Vec<u64>,
    rounds: Vec<f64>,
    warmed: u64,
    sent: u64,
    lost: u64,
    late: u64,
    server: StepFigures,
    /// Across a lab: when each sample's round trip began and ended,
    /// CLOCK_MONOTONIC ns (the lab's emulator keeps the windows in which it
    /// was late on the same clock), and where each round's samples begin.
    timed: bool,
    spans: Vec<[u64; 2]>,
    round_from: Vec<usize>,
    /// Samples left out for crossing such a window.
    left_out: u64,
}

impl Gathered {
    /// Leaves out the samples whose round trip crossed one of `windows`,
    /// and takes each round's median again from the rest.
    fn leave_out(&mut self, windows: &[[u64; 2]]) {
        if !self.timed || windows.is_empty() {
            return;
        }
        let crossed = crossing(&self.spans, windows);
        let (mut samples, mut spans, mut rounds, mut round_from) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (k, &from) in self.round_from.iter().enumerate() {
            let to = self.round_from.get(k + 1).copied().unwrap_or(self.samples.len());
            round_from.push(samples.len());
            let kept_from = samples.len();
            let to = to.min(self.samples.len());
            for ((&x, &span), _) in
                self.samples[from..to].iter().zip(&self.spans[from..to]).zip(&crossed[from..to]).filter(|(_, &c)| !c)
            {
                samples.push(x);
                spans.push(span);
            }
            rounds.push(stats::median_u64(&samples[kept_from..]).unwrap_or(f64::NAN));
        }
        self.left_out += (self.samples.len() - samples.len()) as u64;
        (self.samples, self.spans, self.rounds, self.round_from) = (samples, spans, rounds, round_from);
    }

    fn add(&mut self, f: &StepFigures) {
        self.server.add(f);
    }
}

/// The share of a point's count or time that round `round` of `rounds` takes.
fn share(total: u64, rounds: u32, round: u32) -> u64 {
    let (r, k) = (u64::from(rounds.max(1)), u64::from(round));
    total / r + u64::from(k < total % r)
}

/// One step's exchanges of `size` bytes over `proto`: `count` of them, or
/// for `budget` (at most MAX_SAMPLES kept); into `g`. Losses in a row
/// beyond what the path can explain end the run, as a failed exchange does.
fn exchanges(
    r: &mut super::echo::EchoTest,
    idx: usize,
    proto: Proto,
    size: u64,
    g: &mut Gathered,
    count: u64,
    budget: Option<std::time::Duration>,
) -> Result<()> {
    let late_before = r.pingers[idx].late;
    let (mut sent, mut in_a_row) = (0u64, 0u64);
    let end = budget.map(|d| Instant::now() + d);
    loop {
        let more = match end {
            Some(end) => Instant::now() < end && g.samples.len() < MAX_SAMPLES,
            None => sent < count,
        };
        if !more {
            break;
        }
        sent += 1;
        match r.pingers[idx].exchange(size as usize) {
            Ok(Outcome::Rtt(ns)) => {
                if g.samples.len() < MAX_SAMPLES {
                    g.samples.push(ns);
                    if g.timed {
                        let end = gridperf_sys::monotonic_ns();
                        g.spans.push([end.saturating_sub(ns), end]);
                    }
                }
                in_a_row = 0;
            }
            Ok(Outcome::Lost) => {
                g.lost += 1;
                in_a_row += 1;
                r.lost_in_a_row(proto, size, in_a_row)?;
            }
            Err(e) => return Err(r.fail(proto, size, g.warmed + g.sent + sent, e)),
        }
    }
    g.sent += sent;
    g.late += r.pingers[idx].late - late_before;
    Ok(())
}

/// A measured point, its warnings added to `warnings`.
fn point(
    proto: Proto,
    size: u64,
    g: Gathered,
    irregular: Option<Irregular>,
    attempt: u32,
    opts: &RttOptions,
    warnings: &mut Vec<Warning>,
) -> RttPoint {
    let summary = Summary::from_samples(&g.samples);
    let label = format!("{proto} {size} B");
    if let Some(s) = &summary {
        warnings.extend(stats::check(&label, s));
    }
    if g.lost > 0 {
        warnings.push(Warning::Lost { point: label.clone(), lost: g.lost, sent: g.sent });
    }
    if let Some(why) = &irregular {
        warnings.push(Warning::Irregular { point: label, why: why.describe(), retries: attempt });
    }
    RttPoint {
        proto,
        size_bytes: size,
        summary,
        warmup: g.warmed,
        sent: g.sent,
        lost: g.lost,
        late: g.late,
        samples_ns: opts.keep_samples.then_some(g.samples),
        server: Some(g.server),
        rounds_ns: if opts.rounds.max(1) > 1 { g.rounds } else { Vec::new() },
        irregular,
        retries: attempt,
        left_out: g.left_out,
    }
}

/// As [`run`], leaving out the points `skip` names (already measured), and
/// handing each point to `on_point` as soon as it is measured (the store
/// writes it there); an error from `on_point` ends the run.
pub fn run_with(
    target: &Target,
    opts: &RttOptions,
    progress: &mut dyn FnMut(Progress),
    skip: &dyn Fn(gridperf_core::model::plan::Proto, u64) -> bool,
    on_point: &mut dyn FnMut(&RttPoint) -> Result<()>,
) -> Result<RttReport> {
    let mut r = start(gridperf_core::model::Measure::Rtt, target, &opts.echo)?;
    let points: Vec<_> =
        interleave(&opts.echo.protos, &opts.echo.sizes).into_iter().filter(|p| !skip(p.proto, p.size)).collect();
    // the points of each size, in the order given
    let mut sizes: Vec<(u64, Vec<Proto>)> = Vec::new();
    for p in &points {
        match sizes.last_mut() {
            Some((s, protos)) if *s == p.size => protos.push(p.proto),
            _ => sizes.push((p.size, vec![p.proto])),
        }
    }
    let rounds = opts.rounds.max(1);
    let rule = opts.stop_early.then(|| gridperf_core::analysis::stopping::Rule::quick(rounds as usize));
    let mut out: Vec<RttPoint> = Vec::with_capacity(points.len());
    let mut warnings = Vec::new();
    let mut preheated: Vec<Proto> = Vec::new();
    // across a lab, each point is judged round trip by round trip, while
    // the emulator's late windows can be read (see `judged`)
    let timed = r.opened.lab_watch().is_some();
    let mut judged = timed.then(crate::lab::RoundTrips::default);
    for (size, protos) in &sizes {
        let size = *size;
        let mut attempt = 0;
        let measured = loop {
            let mut got: Vec<Gathered> = protos.iter().map(|_| Gathered { timed, ..Gathered::default() }).collect();
            // the step the agent was told of ahead, with the end of the one before
            let mut ready: Option<Proto> = None;
            let mut round = 0;
            while round < rounds {
                for k in 0..protos.len() {
                    let at = (k + round as usize) % protos.len();
                    let proto = protos[at];
                    progress(Progress { done: out.len() + at, total: points.len(), proto, size });
                    let g = &mut got[at];
                    let idx = r.index(proto)?;
                    // a cold process and connection run slower for tens of
                    // milliseconds: a protocol's first point warms up for a
                    // while first, in a step of its own
                    if !preheated.contains(&proto) {
                        g.warmed += r.preheat(idx, proto, size, opts.echo.warmup_time)?;
                        preheated.push(proto);
                    }
                    let warmup = if round == 0 { opts.warmup } else { 0 };
                    let count = share(opts.iterations, rounds, round);
                    let budget = opts.duration.map(|d| d / rounds);
                    let by_agent = proto.is_stream() && budget.is_none();
                    if ready.take() != Some(proto) {
                        r.step(proto, size, by_agent.then_some(warmup.saturating_add(count)))?;
                    }
                    for _ in 0..warmup {
                        r.warm_exchange(idx, proto, size, g.warmed)?;
                        g.warmed += 1;
                    }
                    let from = g.samples.len();
                    g.round_from.push(from);
                    exchanges(&mut r, idx, proto, size, g, count, budget)?;
                    g.rounds.push(stats::median_u64(&g.samples[from..]).unwrap_or(f64::NAN));
                    // the next step of this size, told to the agent with this
                    // one's end (a round trip less on a long path): the next
                    // protocol of the round, or the next round's first unless
                    // the size is settled
                    let last_of_round = k + 1 == protos.len();
                    let settled = last_of_round
                        && (round + 1 >= rounds
                            || rule.is_some_and(|rule| {
                                rule.settled(&got.iter().map(|g| g.rounds.clone()).collect::<Vec<_>>())
                            }));
                    // (only between steps the client ends: a step the agent
                    // counts ends by itself, and a counted request cannot ride ahead)
                    let next = (!settled && budget.is_some())
                        .then(|| {
                            let (r2, k2) = if last_of_round { (round + 1, 0) } else { (round, k + 1) };
                            protos[(k2 + r2 as usize) % protos.len()]
                        })
                        .filter(|p| preheated.contains(p));
                    let figures = r.end_step_then(idx, by_agent, next.map(|p| (p, size)))?;
                    got[at].add(&figures);
                    ready = next;
                    if settled {
                        round = rounds;
                    }
                }
                round += 1;
            }
            // the round trips that crossed the lab's emulator while it was
            // late are not the path's: left out, before the shape is judged
            if judged.is_some() {
                let windows = r.opened.lab_watch().and_then(|w| w.late_windows(gridperf_sys::monotonic_ns()));
                match windows {
                    Some(windows) => got.iter_mut().for_each(|g| g.leave_out(&windows)),
                    // not known: the run is judged as a whole
                    None => judged = None,
                }
            }
            let irregular: Vec<Option<Irregular>> = got.iter().map(|g| shape::irregular(&g.samples)).collect();
            if irregular.iter().any(Option::is_some) && attempt < opts.retries {
                attempt += 1;
                continue;
            }
            break got.into_iter().zip(irregular).collect::<Vec<_>>();
        };
        for (proto, (g, irregular)) in protos.iter().zip(measured) {
            if let Some(j) = judged.as_mut() {
                j.count_point(&format!("{proto} {size} B"), g.samples.len() as u64 + g.left_out, g.left_out);
            }
            out.push(point(*proto, size, g, irregular, attempt, opts, &mut warnings));
            if let Some(p) = out.last() {
                on_point(p)?;
            }
        }
    }
    let env = r.close_judged(judged, points.len(), progress, &mut warnings)?;
    Ok(RttReport {
        schema: RTT_SCHEMA.into(),
        measure: gridperf_core::model::Measure::Rtt.name().into(),
        settings: settings(opts),
        env,
        points: out,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The samples whose round trip crossed a late window are left out.
    #[test]
    fn a_round_trip_that_crossed_a_late_window_is_left_out() {
        let spans = [[0, 10], [10, 20], [20, 30], [30, 40], [40, 50], [50, 60]];
        // two rounds of three: each round's median is taken again from what is kept
        let mut g = Gathered {
            samples: vec![10, 11, 12, 40, 13, 14],
            spans: spans.to_vec(),
            rounds: vec![11.0, 14.0],
            round_from: vec![0, 3],
            timed: true,
            ..Gathered::default()
        };
        g.leave_out(&[[12, 14], [35, 36]]);
        assert_eq!(g.samples, vec![10, 12, 13, 14]);
        assert_eq!(g.round_from, vec![0, 2]);
        assert_eq!(g.rounds, vec![11.0, 13.5]);
        assert_eq!(g.left_out, 2);
        // a point measured without a lab is left whole
        let mut plain = Gathered { samples: vec![1, 2], spans: vec![[0, 1], [1, 2]], ..Gathered::default() };
        plain.leave_out(&[[0, 5]]);
        assert_eq!((plain.samples.len(), plain.left_out), (2, 0));
    }
}
