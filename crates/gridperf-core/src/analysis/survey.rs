//! Surveys of measured RTT curves, as the source paper's conclusions need
//! them: which protocol is fastest over which range of message sizes, and
//! where a protocol's curve changes behaviour (a jump, or a change of slope
//! such as TCP speeding up once a message exceeds about two MTUs).
//!
//! Everything here works on points already measured: each point's median
//! and quartiles, and (when it was measured in rounds) its round medians,
//! or its samples, from which [`crate::analysis::compare`] gives a difference its
//! 95% interval. A protocol is best only where it is faster than the others
//! beyond that interval and beyond 5% (`compare::NEGLIGIBLE`); a threshold is reported only where
//! it stands out of the points' own noise, and only with slopes a message
//! can have (a byte never costs less than nothing). Points whose median
//! does not describe them ([`crate::analysis::shape`]) are left out, and listed.
//! Nothing is measured or printed here.

use crate::analysis::compare::{self, Difference};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One protocol's RTT against message size on one network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub proto: String,
    /// Sorted by size; the functions here sort a copy when they are not.
    pub points: Vec<CurvePoint>,
}

/// One size of a [`Curve`]: the median RTT and its quartiles, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub size: u64,
    pub median_ns: f64,
    pub q1_ns: f64,
    pub q3_ns: f64,
    /// The medians of the rounds the point was measured in (empty: one go).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds_ns: Vec<f64>,
    /// The point's samples, when kept (in the order taken; maybe thinned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_ns: Vec<u64>,
}

impl CurvePoint {
    /// A point of a median and quartiles only.
    pub fn new(size: u64, median_ns: f64, q1_ns: f64, q3_ns: f64) -> CurvePoint {
        CurvePoint { size, median_ns, q1_ns, q3_ns, rounds_ns: Vec::new(), samples_ns: Vec::new() }
    }

    /// The standard error of the median: from the rounds when there are
    /// enough, else from the interquartile range and the sample count
    /// (1.2533 sigma / sqrt(n), sigma = IQR / 1.349), else half the IQR.
    pub fn median_se(&self) -> f64 {
        let r: Vec<f64> = self.rounds_ns.iter().copied().filter(|v| v.is_finite()).collect();
        if r.len() >= compare::MIN_ROUNDS {
            let m = r.iter().sum::<f64>() / r.len() as f64;
            let var = r.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (r.len() - 1) as f64;
            return (var / r.len() as f64).sqrt();
        }
        if self.samples_ns.len() >= 5 {
            return 1.2533 * (self.iqr() / 1.349) / (self.samples_ns.len() as f64).sqrt();
        }
        self.iqr() / 2.0
    }
}

/// B against A at one size: paired by rounds when both were measured in the
/// same rounds, else a bootstrap of their samples; None when neither kept
/// enough to tell.
pub fn difference(a: &CurvePoint, b: &CurvePoint) -> Option<Difference> {
    if a.rounds_ns.len() == b.rounds_ns.len() {
        if let Some(d) = compare::paired(&a.rounds_ns, &b.rounds_ns) {
            return Some(d);
        }
    }
    // a seed from the size, so that a report is the same each time
    compare::bootstrap(&a.samples_ns, &b.samples_ns, a.size.wrapping_mul(0x9E37_79B9) ^ 0x5EED)
}

impl CurvePoint {
    /// The interquartile range, 0 when the quartiles are missing or crossed.
    fn iqr(&self) -> f64 {
        let iqr = self.q3_ns - self.q1_ns;
        if iqr.is_finite() && iqr > 0.0 {
            iqr
        } else {
            0.0
        }
    }
}

impl Curve {
    /// A curve with its points sorted by size.
    pub fn new(proto: impl Into<String>, mut points: Vec<CurvePoint>) -> Curve {
        points.sort_by_key(|p| p.size);
        Curve { proto: proto.into(), points }
    }

    /// The points that can be analysed: finite medians, sorted by size, one
    /// per size (the first given wins, so a duplicate cannot reorder a curve).
    fn clean_points(&self) -> Vec<CurvePoint> {
        let mut pts: Vec<CurvePoint> = self.points.iter().filter(|p| p.median_ns.is_finite()).cloned().collect();
        pts.sort_by_key(|p| p.size);
        pts.dedup_by_key(|p| p.size);
        pts
    }
}

/// The median of values (NaN-free); 0 for none.
fn median(values: &[f64]) -> f64 {
    crate::analysis::stats::median(values).unwrap_or(0.0)
}

// ---------------------------------------------------------------------------
// Best protocol per size range
// ---------------------------------------------------------------------------

/// A range of message sizes and the protocol(s) with the best (lowest) median RTT there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestRange {
    /// First and last size of the range (inclusive), both sizes that were measured.
    pub from: u64,
    pub to: u64,
    /// One name, or several when no difference between them is a finding,
    /// fastest first (by their mean median relative to the best over the range).
    pub best: Vec<String>,
    /// `best.len() > 1`.
    pub tie: bool,
    /// Over the range: the median of (runner-up's median / best's median - 1)
    /// at each size; for a tie, that of the protocol it leaves out, shown
    /// slower at every size of the range, or 0.
    pub margin: f64,
    /// The runner-up the margin is over: for a win, the next fastest; for a
    /// tie, the protocol shown slower than all in it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<String>,
    /// The 95% intervals of the margin over the range's sizes: the lowest
    /// lower end and the highest upper end (one interval for one size);
    /// None when the points kept nothing to find one from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<(f64, f64)>,
}

/// Whether `other` is slower than `best` beyond doubt: its difference's
/// 95% interval lies wholly above [`compare::NEGLIGIBLE`]. With no
/// interval to be had (points that kept neither rounds nor samples) it is
/// not: no claim is made without its uncertainty, and the two tie. Returns
/// the difference when there is one.
fn slower(best: &CurvePoint, other: &CurvePoint) -> (bool, Option<Difference>) {
    match difference(best, other) {
        Some(d) => (d.b_slower(), Some(d)),
        None => (false, None),
    }
}

/// The verdict at one size: the set no other protocol is shown faster
/// than, each with its median over the best's, and for a win the margin to
/// the runner-up with its interval.
struct SizeVerdict {
    size: u64,
    /// (name, median / best median), fastest first.
    set: Vec<(String, f64)>,
    margin: f64,
    over: Option<String>,
    interval: Option<(f64, f64)>,
    /// Every protocol with a point at this size.
    measured: Vec<String>,
}

/// The verdict at one size, when at least two protocols were measured there.
fn verdict_at(size: u64, mut entries: Vec<(&str, CurvePoint)>) -> Option<SizeVerdict> {
    if entries.len() < 2 {
        return None;
    }
    entries.sort_by(|a, b| a.1.median_ns.total_cmp(&b.1.median_ns).then(a.0.cmp(b.0)));
    let best = entries[0].1.clone();
    let relative = |m: f64| if best.median_ns > 0.0 { m / best.median_ns } else { 1.0 };
    let mut set = vec![(entries[0].0.to_string(), 1.0)];
    let mut runner_up = None;
    for (name, p) in &entries[1..] {
        let (apart, d) = slower(&best, p);
        if !apart {
            set.push((name.to_string(), relative(p.median_ns)));
        } else if runner_up.is_none() {
            runner_up = Some((name.to_string(), relative(p.median_ns) - 1.0, d));
        }
    }
    // the first protocol shown slower: the margin of a win, and for a tie
    // the protocol it leaves out
    let (margin, over, interval) = match &runner_up {
        Some((name, m, d)) => (*m, Some(name.clone()), d.map(|d| (d.lo, d.hi))),
        None => (0.0, None, None),
    };
    let measured = entries.iter().map(|(n, _)| n.to_string()).collect();
    Some(SizeVerdict { size, set, margin, over, interval, measured })
}

/// The names of verdicts' sets, together, sorted by name.
fn names_of(run: &[SizeVerdict]) -> Vec<&str> {
    let mut names: Vec<&str> = run.iter().flat_map(|v| v.set.iter().map(|(n, _)| n.as_str())).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Whether `v` continues the range `run`: with the range's names and its
/// own, every verdict's set is those names (the order within a tie may flip
/// with noise), and every one of them was measured there (a protocol
/// missing at a size for want of a reply is a finding of its own).
fn continues(run: &[SizeVerdict], v: &SizeVerdict) -> bool {
    let mut all: Vec<&SizeVerdict> = run.iter().collect();
    all.push(v);
    let mut names = names_of(run).into_iter().chain(v.set.iter().map(|(n, _)| n.as_str())).collect::<Vec<_>>();
    names.sort_unstable();
    names.dedup();
    all.iter().all(|w| {
        if !names.iter().all(|n| w.measured.iter().any(|m| m == n)) {
            return false;
        }
        let mut have: Vec<&str> = w.set.iter().map(|(n, _)| n.as_str()).collect();
        have.sort_unstable();
        names == have
    })
}

/// One range from consecutive verdicts that continue one another.
fn merge_range(run: &[SizeVerdict]) -> BestRange {
    let mut best: Vec<(String, f64)> = names_of(run)
        .into_iter()
        .map(|name| {
            let here: Vec<f64> =
                run.iter().filter_map(|v| v.set.iter().find(|(n, _)| n == name).map(|(_, r)| *r)).collect();
            let rel = here.iter().sum::<f64>() / here.len().max(1) as f64;
            (name.to_string(), rel)
        })
        .collect();
    best.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let tie = best.len() > 1;
    // the runner-up (for a tie: the protocol shown slower) most often, its
    // margin, and the envelope of the intervals; for a tie only when it is
    // shown slower at every size of the range
    let mut names: Vec<&str> = run.iter().filter_map(|v| v.over.as_deref()).collect();
    names.sort_unstable();
    let over = names
        .iter()
        .max_by_key(|n| names.iter().filter(|m| m == n).count())
        .map(|n| n.to_string())
        .filter(|_| !tie || names.len() == run.len());
    let margin = match over {
        Some(_) => median(&run.iter().filter(|v| v.over.is_some()).map(|v| v.margin).collect::<Vec<_>>()),
        None => 0.0,
    };
    let intervals: Vec<(f64, f64)> = run.iter().filter_map(|v| v.interval).collect();
    let interval = (over.is_some() && intervals.len() == run.len()).then(|| {
        (intervals.iter().map(|i| i.0).fold(f64::MAX, f64::min), intervals.iter().map(|i| i.1).fold(f64::MIN, f64::max))
    });
    BestRange {
        from: run[0].size,
        to: run[run.len() - 1].size,
        best: best.into_iter().map(|(n, _)| n).collect(),
        tie,
        margin,
        over,
        interval,
    }
}

/// At each size measured by at least two protocols, the fastest protocol
/// and those not shown slower than it; then consecutive sizes with the same
/// set merged into ranges.
///
/// The rule: at one size, protocol p is slower than the fastest b when the
/// 95% interval of median(p) / median(b) - 1 lies wholly above 5% ([`compare::NEGLIGIBLE`])
/// ([`difference`]: paired by rounds, or a bootstrap of the samples). A
/// protocol not shown slower ties with the best: the difference is not a
/// finding. Points that kept neither rounds nor samples give no interval,
/// and so no claim: they tie. A size where a point was left out (its shape
/// one median does not describe) carries no claim and stops a range.
///
/// Sizes measured by only one protocol are skipped (nothing to compare), and
/// do not break a range; ranges span only measured sizes (`from` is the first,
/// `to` the last size of a run of equal sets). Non-finite medians are ignored.
pub fn best_protocol(curves: &[Curve]) -> Vec<BestRange> {
    best_protocol_with(curves, &[])
}

/// [`best_protocol`], where the points in `unknown` (protocol, size) were
/// left out for a shape one median does not describe: a range of the
/// others continues over them.
pub fn best_protocol_with(curves: &[Curve], unknown: &[(&str, u64)]) -> Vec<BestRange> {
    // a size where any protocol's point was left out carries no claim, and a
    // range stops there: a claim covers only sizes measured and regular
    let left_out: std::collections::BTreeSet<u64> = unknown.iter().map(|(_, s)| *s).collect();
    let mut at: BTreeMap<u64, Vec<(&str, CurvePoint)>> = BTreeMap::new();
    for curve in curves {
        for p in curve.clean_points() {
            if !left_out.contains(&p.size) {
                at.entry(p.size).or_default().push((curve.proto.as_str(), p));
            }
        }
    }
    let verdicts: Vec<SizeVerdict> = at.into_iter().filter_map(|(size, e)| verdict_at(size, e)).collect();
    let mut ranges = Vec::new();
    let mut start = 0;
    for i in 1..=verdicts.len() {
        let broken = i < verdicts.len() && left_out.range(verdicts[i - 1].size..verdicts[i].size).next().is_some();
        if i == verdicts.len() || broken || !continues(&verdicts[start..i], &verdicts[i]) {
            ranges.push(merge_range(&verdicts[start..i]));
            start = i;
        }
    }
    ranges
}

// ---------------------------------------------------------------------------
// Thresholds: jumps and slope changes
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdKind {
    /// A discontinuity: a new packet, a Nagle stall.
    Jump,
    /// The RTT grows faster per byte from here on.
    SlopeUp,
    /// The RTT grows slower per byte from here on (e.g. TCP past two MTUs).
    SlopeDown,
}

/// Where a curve changes behaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub proto: String,
    /// The first size after the change.
    pub size: u64,
    pub kind: ThresholdKind,
    /// Jump: median just before and at `size` (ns). Slope: the slopes before
    /// and after, in ns per byte.
    pub before: f64,
    pub after: f64,
    /// size / payload-per-MTU (mtu - 40 for TCP/sendfile, mtu - 28 for UDP),
    /// when an MTU is given: "2.1 x MTU".
    pub mtu_multiple: Option<f64>,
    /// What it rests on, in words: the medians and their noise on both
    /// sides of a jump, the fitted slopes and their errors of a slope change.
    #[serde(default)]
    pub evidence: String,
}

/// A jump's excess over the trend must be this many times the noise of
/// the two medians it joins (their standard errors, combined)...
pub const JUMP_SIGMAS: f64 = 5.0;
/// ...and the next point must keep at least this share of it: fall back by
/// no more than the rest (a single slow point is a spike, not a jump).
pub const JUMP_PERSISTS: f64 = 0.5;
/// A fitted slope this many standard errors below zero is impossible (a
/// byte does not make a message cheaper): the fit is noise, and no slope
/// change is read from it.
pub const NEGATIVE_SIGMAS: f64 = 2.0;

/// A jump's rise, beyond the local trend, must exceed this fraction of the
/// median before it (more than one median moved between two quick surveys
/// back to back: 15% at most over 217 points; loopback UDP's +10-12% at
/// 8 KiB was a jump in one of them and not in the other)...
pub const JUMP_RELATIVE: f64 = 0.15;
/// ...and this many times the curve's median absolute (detrended) step.
pub const JUMP_STEPS: f64 = 4.0;
/// Points on each side of a step that give its local trend.
const JUMP_TREND_POINTS: usize = 3;
/// Points in each least-squares window of the finest scale.
pub const SLOPE_WINDOW: usize = 4;
/// Slope changes by at least this factor (up or down) are reported.
pub const SLOPE_RATIO: f64 = 1.8;
/// A slope change must be worth this fraction of the curve's mean median
/// over the span of the two windows.
pub const SLOPE_MEANINGFUL: f64 = 0.05;
/// A slope change must exceed its standard error (from the curve's noise)
/// this many times.
pub const SLOPE_SIGMAS: f64 = 5.0;
/// The least relative noise assumed of a measured median: what it moves
/// between runs (two quick surveys back to back: by 1% in the median over
/// 217 points, a standard deviation of about 1.5%), which the rounds of
/// one run do not see. Few points on a coarse grid can look smoother still.
pub const NOISE_FLOOR: f64 = 0.015;

/// The bytes of payload one packet carries: the MTU less the IPv4 and TCP
/// headers (40) or IPv4 and UDP headers (28).
fn payload_per_mtu(proto: &str, mtu: u32) -> Option<f64> {
    let headers = if proto.eq_ignore_ascii_case("udp") { 28 } else { 40 };
    (mtu > headers).then(|| f64::from(mtu - headers))
}

/// Where `curve` changes behaviour, sorted by size. The detector is meant
/// for noisy measured curves, and errs on the side of reporting nothing:
///
/// 1. Jumps. From each step between consecutive sizes, the rise the local
///    trend explains is taken away: the trend is the steeper (never below 0)
///    of two least-squares slopes, over the 3 points up to the step and the
///    3 points from it on, so that neither a knee nor a sloped curve on an
///    uneven grid (1, 64, ..., 32k, 64000, where a straight line rises by more
///    than 10% per step) passes for a jump. What is left is a jump when it
///    exceeds both 10% of the previous median and 4 times the curve's median
///    absolute detrended step (each step relative to the median before it,
///    since measurement noise grows with the RTT).
/// 2. The jumps are then taken out of the curve (everything from a jump on is
///    lowered by its excess), so that a step does not pass for a slope change.
/// 3. Slope changes. At each candidate size, lines are fitted by least squares
///    to the k points before it and the k points from it on (k = 4, or half
///    the curve when shorter; at least 3), and again at scales of 2k, 4k, ...
///    points while the curve holds two windows, since on a dense noisy grid
///    only wider windows see a knee. A candidate is kept when
///    - the slope ratio after/before is above 1.8 (slope-up) or below 1/1.8
///      (slope-down), a slope below the meaningful difference counting as
///      that difference (so a flat side does not divide by zero);
///    - the difference of slopes is meaningful: above 5% of the curve's mean
///      median over the size span of the two windows;
///    - the difference exceeds 5 standard errors, computed from the curve's
///      relative noise: the robust spread (1.4826 x MAD) of each median about
///      the line through its two neighbours, relative to the median, and no
///      less than 0.5% (a few points on a coarse grid can look smoother than
///      any measurement is). Many candidates are tried, hence 5 and not 2;
///    - its size is not a jump, and neither window holds one.
/// 4. Of candidates within k points of each other (the larger k of the two),
///    only the strongest stays: largest |ln ratio|, then the finer scale,
///    then the smaller size.
///
/// A flat or straight curve gives nothing. Curves shorter than 6 points give
/// no slope change; non-finite medians are ignored.
pub fn thresholds(curve: &Curve, mtu: Option<u32>) -> Vec<Threshold> {
    let pts = curve.clean_points();
    let x: Vec<f64> = pts.iter().map(|p| p.size as f64).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.median_ns).collect();
    let se: Vec<f64> = pts.iter().map(|p| p.median_se().max(NOISE_FLOOR * p.median_ns)).collect();
    // a jump stands out of both medians' noise, and the level stays up after it
    let jumps: Vec<(usize, f64)> = find_jumps(&x, &y)
        .into_iter()
        .filter(|&(i, excess)| {
            let noise = (se[i - 1].powi(2) + se[i].powi(2)).sqrt();
            // the next point does not fall back by more than part of the
            // jump (a spike does; the level after a jump stays). Not a
            // trend extrapolated over the next step: on a doubling grid
            // that step is the longest yet, and a 15% move of one median
            // at 64000 B decided whether man's 32 KiB jump was one
            let persists = i + 1 >= y.len() || y[i] - y[i + 1] <= (1.0 - JUMP_PERSISTS) * excess;
            excess > JUMP_SIGMAS * noise && persists
        })
        .collect();
    let mut out: Vec<Threshold> = jumps
        .iter()
        .map(|&(i, excess)| {
            let noise = (se[i - 1].powi(2) + se[i].powi(2)).sqrt();
            Threshold {
                proto: curve.proto.clone(),
                size: pts[i].size,
                kind: ThresholdKind::Jump,
                before: y[i - 1],
                after: y[i],
                mtu_multiple: None,
                evidence: format!(
                    "median {} (+-{}) at {} B, then {} (+-{}) at {} B: {} above the trend, {:.0} times the noise",
                    fmt_ns(y[i - 1]),
                    fmt_ns(se[i - 1]),
                    pts[i - 1].size,
                    fmt_ns(y[i]),
                    fmt_ns(se[i]),
                    pts[i].size,
                    fmt_ns(excess),
                    excess / noise.max(f64::MIN_POSITIVE)
                ),
            }
        })
        .collect();
    let jump_at: Vec<usize> = jumps.iter().map(|&(i, _)| i).collect();
    let smooth = despike(&x, &remove_jumps(&y, &jumps), &se, &jump_at);
    out.extend(find_slope_changes(&x, &smooth, &jump_at).into_iter().map(|c| Threshold {
        proto: curve.proto.clone(),
        size: pts[c.at].size,
        kind: c.kind,
        before: c.before,
        after: c.after,
        mtu_multiple: None,
        evidence: format!(
            "least squares over {}..{} B: {:.2} +- {:.2} ns per byte; over {}..{} B: {:.2} +- {:.2}",
            pts[c.at - c.k].size,
            pts[c.at - 1].size,
            c.before,
            c.before_se,
            pts[c.at].size,
            pts[c.at + c.k - 1].size,
            c.after,
            c.after_se
        ),
    }));
    out.sort_by_key(|t| t.size);
    if let Some(payload) = mtu.and_then(|m| payload_per_mtu(&curve.proto, m)) {
        for t in &mut out {
            t.mtu_multiple = Some(t.size as f64 / payload);
        }
    }
    out
}

fn fmt_ns(ns: f64) -> String {
    crate::units::fmt_ns(ns)
}

/// The rise of each interval (index i: from point i - 1 to i) beyond the
/// local trend; index 0 is unused (0).
fn detrended_steps(x: &[f64], y: &[f64]) -> Vec<f64> {
    let n = y.len();
    let side = |from: usize, to: usize| (to - from >= 2).then(|| fit_line(&x[from..to], &y[from..to], 0.0).slope);
    let mut out = vec![0.0; n];
    for (i, step) in out.iter_mut().enumerate().skip(1) {
        let left = side(i.saturating_sub(JUMP_TREND_POINTS), i);
        let right = side(i, (i + JUMP_TREND_POINTS).min(n));
        let trend = left.into_iter().chain(right).fold(0.0, f64::max);
        *step = (y[i] - y[i - 1]) - trend * (x[i] - x[i - 1]);
    }
    out
}

/// The jumps of a curve: (index of the first point after, excess rise).
fn find_jumps(x: &[f64], y: &[f64]) -> Vec<(usize, f64)> {
    if y.len() < 2 {
        return Vec::new();
    }
    let steps = detrended_steps(x, y);
    let relative = |i: usize| if y[i - 1] > 0.0 { steps[i] / y[i - 1] } else { f64::INFINITY };
    let typical = median(&(1..y.len()).map(|i| relative(i).abs()).collect::<Vec<_>>());
    (1..y.len())
        .filter(|&i| steps[i] > 0.0 && relative(i) > JUMP_RELATIVE.max(JUMP_STEPS * typical))
        .map(|i| (i, steps[i]))
        .collect()
}

/// The curve with each lone outlier (a point above both its neighbours, or
/// below both, by more than 10% and by more than [`JUMP_SIGMAS`] times its
/// noise, not at a jump) put back on the line through its neighbours: a
/// single slow point is neither a jump nor the start of a slope.
fn despike(x: &[f64], y: &[f64], se: &[f64], jump_at: &[usize]) -> Vec<f64> {
    let mut out = y.to_vec();
    for i in 1..y.len().saturating_sub(1) {
        if jump_at.contains(&i) || jump_at.contains(&(i + 1)) || x[i + 1] <= x[i - 1] {
            continue;
        }
        let (up, down) = (y[i] - y[i - 1], y[i] - y[i + 1]);
        let limit = (JUMP_RELATIVE * y[i - 1].abs().min(y[i + 1].abs())).max(JUMP_SIGMAS * se[i]);
        if (up > limit && down > limit) || (up < -limit && down < -limit) {
            let t = (x[i] - x[i - 1]) / (x[i + 1] - x[i - 1]);
            out[i] = y[i - 1] + t * (y[i + 1] - y[i - 1]);
        }
    }
    out
}

/// The curve with each jump's excess taken off every point from it on.
fn remove_jumps(y: &[f64], jumps: &[(usize, f64)]) -> Vec<f64> {
    let mut out = y.to_vec();
    for &(i, excess) in jumps {
        for v in &mut out[i..] {
            *v -= excess;
        }
    }
    out
}

/// The typical relative noise of a curve's medians: 1.4826 times the median
/// absolute deviation of each median from the straight line through its two
/// neighbours, scaled for the neighbours' own noise, over the median. Knees
/// and jumps touch a few points only, and the median ignores them.
fn relative_noise(x: &[f64], y: &[f64]) -> f64 {
    let devs: Vec<f64> = (1..y.len().saturating_sub(1))
        .filter(|&i| y[i] > 0.0 && x[i + 1] > x[i - 1])
        .map(|i| {
            let t = (x[i] - x[i - 1]) / (x[i + 1] - x[i - 1]);
            let line = y[i - 1] + t * (y[i + 1] - y[i - 1]);
            let scale = (1.0 + (1.0 - t).powi(2) + t.powi(2)).sqrt();
            ((y[i] - line) / scale / y[i]).abs()
        })
        .collect();
    (1.4826 * median(&devs)).max(NOISE_FLOOR)
}

/// A least-squares line: its slope and the variance of that slope when each
/// point has noise `noise * y`.
struct Fit {
    slope: f64,
    variance: f64,
}

fn fit_line(x: &[f64], y: &[f64], noise: f64) -> Fit {
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let sxx: f64 = x.iter().map(|v| (v - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return Fit { slope: 0.0, variance: f64::INFINITY };
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let variance = x.iter().zip(y).map(|(a, b)| ((a - mx) / sxx * noise * b).powi(2)).sum();
    Fit { slope: sxy / sxx, variance }
}

/// A slope-change candidate: the first point after the change, the window
/// size, the slopes and the strength |ln ratio|.
struct SlopeChange {
    at: usize,
    k: usize,
    kind: ThresholdKind,
    before: f64,
    after: f64,
    before_se: f64,
    after_se: f64,
    strength: f64,
}

/// The slope change at point `i` with windows of `k` points, if it passes.
fn slope_change_at(x: &[f64], y: &[f64], i: usize, k: usize, mean: f64, noise: f64) -> Option<SlopeChange> {
    let span = x[i + k - 1] - x[i - k];
    if span <= 0.0 {
        return None;
    }
    let before = fit_line(&x[i - k..i], &y[i - k..i], noise);
    let after = fit_line(&x[i..i + k], &y[i..i + k], noise);
    // a byte does not make a message cheaper: a slope below zero beyond its
    // error is noise, and nothing is read from it; one within its error is 0
    let (before_se, after_se) = (before.variance.sqrt(), after.variance.sqrt());
    if before.slope < -NEGATIVE_SIGMAS * before_se || after.slope < -NEGATIVE_SIGMAS * after_se {
        return None;
    }
    let (before_slope, after_slope) = (before.slope.max(0.0), after.slope.max(0.0));
    let meaningful = SLOPE_MEANINGFUL * mean.abs() / span;
    let diff = (after_slope - before_slope).abs();
    if diff <= meaningful || diff <= SLOPE_SIGMAS * (before.variance + after.variance).sqrt() {
        return None;
    }
    let ratio = after_slope.max(meaningful) / before_slope.max(meaningful);
    let kind = if ratio > SLOPE_RATIO {
        ThresholdKind::SlopeUp
    } else if ratio < 1.0 / SLOPE_RATIO {
        ThresholdKind::SlopeDown
    } else {
        return None;
    };
    Some(SlopeChange {
        at: i,
        k,
        kind,
        before: before_slope,
        after: after_slope,
        before_se,
        after_se,
        strength: ratio.ln().abs(),
    })
}

/// The slope changes of a jump-free curve, after suppression (see [`thresholds`]).
fn find_slope_changes(x: &[f64], y: &[f64], jump_at: &[usize]) -> Vec<SlopeChange> {
    let n = y.len();
    let mut k = SLOPE_WINDOW.min(n / 2);
    if k < 3 {
        return Vec::new();
    }
    let mean = y.iter().sum::<f64>() / n as f64;
    let noise = relative_noise(x, y);
    let mut candidates = Vec::new();
    while 2 * k <= n {
        // neither window may hold a jump: the jump's excess is an estimate,
        // and a slope read across it (man's 32 KiB jump inside 8..64 KiB,
        // crossover-fe's 1460 B inside 1..1.5 KiB) came and went between
        // two surveys of the same curve
        let clear = |i: usize| !jump_at.iter().any(|&j| j + k > i && j < i + k);
        candidates.extend((k..=n - k).filter(|&i| clear(i)).filter_map(|i| slope_change_at(x, y, i, k, mean, noise)));
        k *= 2;
    }
    candidates.sort_by(|a, b| b.strength.total_cmp(&a.strength).then(a.k.cmp(&b.k)).then(a.at.cmp(&b.at)));
    let mut kept: Vec<SlopeChange> = Vec::new();
    for c in candidates {
        if kept.iter().all(|s| s.at.abs_diff(c.at) > s.k.max(c.k)) {
            kept.push(c);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point measured in four rounds, each at its median exactly: a
    /// difference between two such points has a zero-width interval.
    fn point(size: u64, median: f64) -> CurvePoint {
        CurvePoint { rounds_ns: vec![median; 4], ..point_iqr(size, median, 0.0) }
    }

    fn point_iqr(size: u64, median: f64, iqr: f64) -> CurvePoint {
        CurvePoint::new(size, median, median - iqr / 2.0, median + iqr / 2.0)
    }

    fn curve(proto: &str, sizes: &[u64], mut f: impl FnMut(u64) -> f64) -> Curve {
        Curve::new(proto, sizes.iter().map(|&s| point(s, f(s))).collect())
    }

    /// The `quick` preset's sizes: uneven, denser around the MTU multiples.
    const QUICK: [u64; 16] =
        [1, 64, 256, 512, 1024, 1400, 1460, 1500, 2048, 2800, 3000, 4096, 8192, 16384, 32768, 64000];

    /// The `paper` preset's sizes: 1, then 128 to 64000 every 128.
    fn paper() -> Vec<u64> {
        std::iter::once(1).chain((128..=64000).step_by(128)).collect()
    }

    /// Deterministic noise in [-1, 1] (a xorshift generator).
    fn noise(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    fn knee(s: u64) -> f64 {
        let s = s as f64;
        if s <= 3000.0 {
            10_000.0 + 2.0 * s
        } else {
            16_000.0 + 0.5 * (s - 3000.0)
        }
    }

    #[test]
    fn straight_and_flat_curves_have_no_threshold() {
        for sizes in [QUICK.to_vec(), paper()] {
            assert_eq!(thresholds(&curve("tcp", &sizes, |s| 10_000.0 + 2.0 * s as f64), Some(1500)), vec![]);
            assert_eq!(thresholds(&curve("udp", &sizes, |_| 25_000.0), Some(1500)), vec![]);
        }
    }

    #[test]
    fn a_step_is_one_jump() {
        for sizes in [QUICK.to_vec(), (250..=8000).step_by(250).chain([1460, 1500]).collect()] {
            let c = curve("udp", &sizes, |s| 10_000.0 + 0.5 * s as f64 + if s >= 1500 { 6000.0 } else { 0.0 });
            let t = thresholds(&c, None);
            assert_eq!(t.len(), 1, "{t:?}");
            assert_eq!((t[0].size, t[0].kind), (1500, ThresholdKind::Jump));
            assert_eq!((t[0].before, t[0].after), (10_730.0, 16_750.0));
            assert_eq!(t[0].mtu_multiple, None);
        }
    }

    #[test]
    fn tcp_speeding_up_after_two_mtus_is_one_slope_down() {
        for sizes in [QUICK.to_vec(), (250..=12000).step_by(250).collect(), paper()] {
            let t = thresholds(&curve("tcp", &sizes, knee), Some(1500));
            assert_eq!(t.len(), 1, "{t:?}");
            assert_eq!(t[0].kind, ThresholdKind::SlopeDown);
            let at = sizes.iter().position(|&s| s == t[0].size).expect("a measured size");
            let knee_at = sizes.iter().position(|&s| s >= 3000).expect("3000");
            assert!(at.abs_diff(knee_at) <= 1, "{t:?}");
            assert!((t[0].before - 2.0).abs() < 0.05 && (t[0].after - 0.5).abs() < 0.05, "{t:?}");
            let m = t[0].mtu_multiple.expect("mtu given");
            assert!((m - 2.0).abs() < 0.25, "{m}");
        }
    }

    #[test]
    fn noise_on_a_straight_line_is_no_threshold() {
        let grids: [Vec<u64>; 3] = [QUICK.to_vec(), paper(), (100..=8000).step_by(100).collect()];
        for sizes in &grids {
            for seed in 1..=20u64 {
                let mut state = seed * 7919;
                let c = curve("tcp", sizes, |s| (10_000.0 + 2.0 * s as f64) * (1.0 + 0.02 * noise(&mut state)));
                assert_eq!(thresholds(&c, Some(1500)), vec![], "seed {seed}, {} sizes", sizes.len());
            }
        }
    }

    #[test]
    fn a_knee_is_found_through_noise_on_a_dense_grid() {
        let mut seed = 99;
        let c = curve("tcp", &paper(), |s| knee(s) * (1.0 + 0.02 * noise(&mut seed)));
        let t = thresholds(&c, Some(1500));
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].kind, ThresholdKind::SlopeDown);
        assert!(t[0].size.abs_diff(3000) <= 1000, "{t:?}");
    }

    #[test]
    fn a_slope_up_and_a_jump_together() {
        // flat to 1500 then a packet's jump, then 3 ns/B from 4000 on
        let sizes: Vec<u64> = (250..=10_000).step_by(250).collect();
        let c = curve("udp", &sizes, |s| {
            let s = s as f64;
            20_000.0 + if s >= 1500.0 { 5000.0 } else { 0.0 } + if s > 4000.0 { 3.0 * (s - 4000.0) } else { 0.0 }
        });
        let t = thresholds(&c, Some(1500));
        let kinds: Vec<(u64, ThresholdKind)> = t.iter().map(|t| (t.size, t.kind)).collect();
        assert_eq!(kinds.len(), 2, "{t:?}");
        assert_eq!(kinds[0], (1500, ThresholdKind::Jump));
        assert_eq!(kinds[1].1, ThresholdKind::SlopeUp);
        assert!(kinds[1].0.abs_diff(4000) <= 250, "{t:?}");
        // UDP: payload per packet is 1500 - 28
        assert_eq!(t[0].mtu_multiple, Some(1500.0 / 1472.0));
    }

    #[test]
    fn unsorted_and_short_curves() {
        let mut c = curve("tcp", &QUICK, knee);
        c.points.reverse();
        assert_eq!(thresholds(&c, None).len(), 1);
        let short = curve("tcp", &[1, 2, 3, 4, 5], |s| s as f64 * 100.0);
        assert_eq!(thresholds(&short, None), vec![]);
        assert_eq!(thresholds(&curve("tcp", &[], |_| 0.0), None), vec![]);
    }

    fn names(r: &BestRange) -> Vec<&str> {
        r.best.iter().map(String::as_str).collect()
    }

    #[test]
    fn udp_below_1000_then_tcp_and_sendfile_tie() {
        let sizes = [1, 64, 256, 512, 999, 1000, 2000, 4000, 8000];
        let tcp = curve("tcp", &sizes, |s| 20_000.0 + s as f64);
        let sendfile = curve("sendfile", &sizes, |s| (20_000.0 + s as f64) * 1.008);
        let udp = curve("udp", &sizes, |s| if s < 1000 { 15_000.0 } else { 40_000.0 + s as f64 });
        let r = best_protocol(&[tcp, udp, sendfile]);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].from, r[0].to, names(&r[0]), r[0].tie), (1, 999, vec!["udp"], false));
        // margin: median over sizes of tcp / udp - 1 (tcp is second everywhere)
        let expected = median(&[1, 64, 256, 512, 999].map(|s| (20_000.0 + s as f64) / 15_000.0 - 1.0));
        assert!((r[0].margin - expected).abs() < 1e-12, "{r:?}");
        assert_eq!((r[1].from, r[1].to, names(&r[1]), r[1].tie), (1000, 8000, vec!["tcp", "sendfile"], true));
        // the tie leaves udp out, slower at every size: named, with its margin
        assert_eq!(r[1].over.as_deref(), Some("udp"), "{r:?}");
        let expected = median(&[1000, 2000, 4000, 8000].map(|s| (40_000.0 + s as f64) / (20_000.0 + s as f64) - 1.0));
        assert!((r[1].margin - expected).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn without_rounds_or_samples_no_protocol_is_claimed_faster() {
        // 10% apart, but neither point kept rounds or samples: no interval, so no claim
        let a = Curve::new("tcp", vec![point_iqr(100, 10_000.0, 200.0), point_iqr(200, 10_000.0, 200.0)]);
        let b = Curve::new("udp", vec![point_iqr(100, 11_000.0, 200.0), point_iqr(200, 11_000.0, 200.0)]);
        let r = best_protocol(&[a, b]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].from, r[0].to, r[0].tie, r[0].interval), (100, 200, true, None));
        // measured in rounds, the same 10% is a finding with its interval
        let a = Curve::new("tcp", vec![point(100, 10_000.0), point(200, 10_000.0)]);
        let b = Curve::new("udp", vec![point(100, 11_000.0), point(200, 11_000.0)]);
        let r = best_protocol(&[a, b]);
        assert_eq!((r.len(), names(&r[0]), r[0].tie), (1, vec!["tcp"], false), "{r:?}");
        assert!(r[0].interval.is_some_and(|(lo, hi)| (lo - 0.1).abs() < 1e-9 && (hi - 0.1).abs() < 1e-9), "{r:?}");
    }

    #[test]
    fn a_point_left_out_stops_a_range_and_carries_no_claim() {
        // three protocols tie at 1, 2 and 4; udp's point at 3 was left out:
        // no claim at 3, and no range spans it
        let tcp = Curve::new("tcp", (1..=4).map(|s| point(s, 100.0)).collect());
        let sf = Curve::new("sendfile", (1..=4).map(|s| point(s, 100.0)).collect());
        let udp = Curve::new("udp", [1, 2, 4].iter().map(|&s| point(s, 100.0)).collect());
        let r = best_protocol_with(&[tcp.clone(), sf.clone(), udp.clone()], &[("udp", 3)]);
        let got: Vec<(u64, u64, usize)> = r.iter().map(|r| (r.from, r.to, r.best.len())).collect();
        assert_eq!(got, vec![(1, 2, 3), (4, 4, 3)], "{r:?}");
        // missing for want of a reply (not left out): a range of its own
        let r = best_protocol(&[tcp.clone(), sf.clone(), udp]);
        let got: Vec<(u64, u64, usize)> = r.iter().map(|r| (r.from, r.to, r.best.len())).collect();
        assert_eq!(got, vec![(1, 2, 3), (3, 3, 2), (4, 4, 3)], "{r:?}");
        // and udp faster at 4 than the others is a range of its own
        let udp = Curve::new("udp", vec![point(1, 100.0), point(2, 100.0), point(4, 50.0)]);
        let r = best_protocol_with(&[tcp, sf, udp], &[("udp", 3)]);
        let got: Vec<(u64, u64, usize)> = r.iter().map(|r| (r.from, r.to, r.best.len())).collect();
        assert_eq!(got, vec![(1, 2, 3), (4, 4, 1)], "{r:?}");
    }

    #[test]
    fn sizes_missing_from_some_curves() {
        let tcp = Curve::new("tcp", vec![point(1, 100.0), point(2, 100.0), point(3, 100.0), point(5, 100.0)]);
        let udp = Curve::new("udp", vec![point(1, 50.0), point(3, 60.0), point(4, 10.0), point(5, 200.0)]);
        let sf = Curve::new("sendfile", vec![point(5, 300.0), point(6, 1.0)]);
        let r = best_protocol(&[tcp, udp, sf]);
        // 2, 4 and 6 have one protocol each: skipped, and 1..3 stay one range
        let got: Vec<(u64, u64, Vec<&str>)> = r.iter().map(|r| (r.from, r.to, names(r))).collect();
        assert_eq!(got, vec![(1, 3, vec!["udp"]), (5, 5, vec!["tcp"])]);
        assert!(best_protocol(&[]).is_empty());
        assert!(best_protocol(&[Curve::new("tcp", vec![point(1, 1.0)])]).is_empty());
    }

    /// A point measured in six rounds around `median`, each round off by
    /// the factor `drift[k]` (shared by the protocols measured in that
    /// round) and by its own noise of `rel`.
    fn rounds_point(size: u64, median: f64, drift: &[f64], rel: f64, seed: &mut u64) -> CurvePoint {
        let rounds: Vec<f64> = drift.iter().map(|k| median * k * (1.0 + rel * noise(seed))).collect();
        let m = crate::analysis::stats::median(&rounds).unwrap_or(median);
        CurvePoint { rounds_ns: rounds, ..CurvePoint::new(size, m, m * 0.97, m * 1.03) }
    }

    #[test]
    fn equal_protocols_are_no_significant_difference_and_different_ones_carry_their_interval() {
        let mut seed = 17;
        let drift: Vec<f64> = (0..6).map(|_| 1.0 + 0.05 * noise(&mut seed)).collect();
        let sizes = [1, 64, 1024];
        let curve = |proto: &str, f: f64, seed: &mut u64| {
            Curve::new(proto, sizes.iter().map(|&s| rounds_point(s, f, &drift, 0.01, seed)).collect())
        };
        // tcp and sendfile the same, udp 22% faster
        let tcp = curve("tcp", 15_900.0, &mut seed);
        let sendfile = curve("sendfile", 15_900.0, &mut seed);
        let udp = curve("udp", 12_300.0, &mut seed);
        let r = best_protocol(&[tcp.clone(), sendfile.clone()]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].tie && r[0].interval.is_none(), "{r:?}");
        let r = best_protocol(&[tcp, udp, sendfile]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((names(&r[0]), r[0].tie), (vec!["udp"], false));
        let (lo, hi) = r[0].interval.expect("an interval");
        let truth = 15_900.0 / 12_300.0 - 1.0;
        assert!(lo < truth && truth < hi && lo > compare::NEGLIGIBLE, "{r:?}");
        assert!(r[0].over.is_some(), "{r:?}");
    }

    #[test]
    fn a_real_doubling_is_found_and_a_noise_spike_is_not() {
        let mut seed = 5;
        let drift = [1.0; 6];
        let at = |f: &dyn Fn(u64) -> f64, seed: &mut u64| {
            Curve::new("tcp", QUICK.iter().map(|&s| rounds_point(s, f(s), &drift, 0.01, seed)).collect())
        };
        // the RTT doubles from 1500 B on (a second packet) and stays there
        let knee = at(&|s| if s >= 1500 { 30_000.0 } else { 15_000.0 }, &mut seed);
        let t = thresholds(&knee, Some(1500));
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!((t[0].size, t[0].kind), (1500, ThresholdKind::Jump));
        assert!(t[0].evidence.contains("above the trend") && t[0].evidence.contains("times the noise"), "{t:?}");
        // one slow point at 2800 B, the next back where they were
        let spike = at(&|s| if s == 2800 { 30_000.0 } else { 15_000.0 }, &mut seed);
        assert_eq!(thresholds(&spike, Some(1500)), vec![]);
        // a rise within the points' own noise: every round of the two points spread 30%
        let wide = |size: u64, m: f64| CurvePoint {
            rounds_ns: vec![m * 0.7, m * 1.3, m * 0.7, m * 1.3, m * 0.7, m * 1.3],
            ..CurvePoint::new(size, m, m * 0.8, m * 1.2)
        };
        let noisy = Curve::new(
            "udp",
            QUICK.iter().map(|&s| if s < 1500 { wide(s, 15_000.0) } else { wide(s, 17_500.0) }).collect(),
        );
        assert!(
            thresholds(&noisy, Some(1500)).iter().all(|t| t.kind != ThresholdKind::Jump),
            "{:?}",
            thresholds(&noisy, Some(1500))
        );
    }

    #[test]
    fn no_threshold_has_a_negative_cost_per_byte() {
        // flat and noisy, as loopback is: medians wander 5% with no trend
        for s0 in 1..=30u64 {
            let mut seed = s0 * 104_729;
            let c = curve("tcp", &QUICK, |_| 16_000.0 * (1.0 + 0.05 * noise(&mut seed)));
            for t in thresholds(&c, Some(65_536)) {
                assert!(t.kind == ThresholdKind::Jump || (t.before >= 0.0 && t.after >= 0.0), "seed {s0}: {t:?}");
            }
        }
        // a curve that falls past 3 KiB (as a noisy measurement did): no slope is read from it
        let falling =
            curve("tcp", &QUICK, |s| if s <= 3000 { 5_000.0 + 2.0 * s as f64 } else { 11_000.0 - 0.05 * s as f64 });
        assert!(thresholds(&falling, Some(65_536)).iter().all(|t| t.before >= 0.0 && t.after >= 0.0));
    }

    #[test]
    fn serde_names() {
        assert_eq!(serde_json::to_string(&ThresholdKind::SlopeDown).expect("json"), "\"slope-down\"");
        let r = BestRange {
            from: 1,
            to: 2,
            best: vec!["udp".into()],
            tie: false,
            margin: 0.5,
            over: Some("tcp".into()),
            interval: Some((0.4, 0.6)),
        };
        let back: BestRange = serde_json::from_str(&serde_json::to_string(&r).expect("json")).expect("parse");
        assert_eq!(back, r);
    }
}
