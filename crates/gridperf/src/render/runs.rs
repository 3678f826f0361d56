//! The stored runs: `runs list`, `runs show` (the run, its environment,
//! and its points in its own measurement's table), `runs compare` and
//! `runs export --format csv`. A run's points are read back into their
//! measurement's result types, so a stored stream or fanout run reads as
//! the command printed it.

use super::{environment, opt_ns, utc};
use crate::store::{PointRow, RunRow};
use gridperf_core::model::{FanoutPoint, Measure, RttPoint, StreamResult, TransferPoint};
use gridperf_core::units::{fmt_bps, fmt_bytes};
use serde::de::DeserializeOwned;
use std::fmt::Write;

/// The points' figures, read back as `T`; None when any does not read
/// (written by another version, or by another kind of run).
fn figures<T: DeserializeOwned>(points: &[PointRow]) -> Option<Vec<T>> {
    points.iter().map(|p| serde_json::from_value(p.figures.clone()).ok()).collect()
}

/// "yes", or why the run does not stand.
fn validity(r: &RunRow) -> String {
    match (&r.invalid, r.status.as_str()) {
        (Some(w), _) => format!("INVALID: {w}"),
        (None, "failed") => "INVALID: failed".into(),
        _ => "valid".into(),
    }
}

/// `gridperf runs list`.
pub fn list(runs: &[RunRow]) -> String {
    let mut out = format!(
        "{:>5} {:>6} {:<9} {:<16} {:>6} {:<11} {:<20} valid\n",
        "run", "survey", "kind", "network", "points", "status", "started (UTC)"
    );
    for r in runs {
        let _ = writeln!(
            out,
            "{:>5} {:>6} {:<9} {:<16} {:>6} {:<11} {:<20} {}",
            r.id,
            r.survey_id.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
            r.kind,
            r.network,
            r.points,
            r.status,
            utc(r.started),
            if r.valid() { "yes" } else { "INVALID" }
        );
    }
    out
}

/// `gridperf runs show`: the run, the conditions it was measured under,
/// and its points as its own command's table shows them.
pub fn show(r: &RunRow, points: &[PointRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} ({}{}) on {}: {}, started {}, {}",
        r.id,
        r.kind,
        r.survey_id.map(|s| format!(", survey {s}")).unwrap_or_default(),
        r.network,
        r.status,
        utc(r.started),
        validity(r)
    );
    let _ = writeln!(out, "command: {}\ngridperf: {}", r.command_line, r.version);
    match &r.env {
        Some(env) => out.push_str(&environment(env)),
        None => {
            let _ = writeln!(out, "environment: not recorded (the run did not finish)");
        }
    }
    out.push_str(&points_table(r, points));
    out
}

/// A run's points in its measurement's table; the stored quartiles when
/// the figures do not read back.
fn points_table(r: &RunRow, points: &[PointRow]) -> String {
    let table = match r.measure() {
        Some(Measure::Rtt) => figures::<RttPoint>(points).map(|p| super::rtt::rows(&p)),
        Some(Measure::Transfer) => figures::<TransferPoint>(points).map(|p| super::transfer::rows(&p)),
        Some(Measure::Stream) => figures::<StreamResult>(points).map(|s| {
            let proto = points.first().map(|p| p.proto.as_str()).unwrap_or("tcp");
            super::stream::rows(proto, &s, super::stream::Units::Auto)
        }),
        Some(Measure::Fanout) => figures::<FanoutPoint>(points).map(|p| super::fanout::rows(&p)),
        // a copy's points are its files, a trace's its directions: the stored table of them
        Some(Measure::Copy | Measure::Trace) | None => None,
    };
    let table = table.unwrap_or_else(|| quartiles(points));
    if table.starts_with('\n') {
        table
    } else {
        format!("\n{table}")
    }
}

/// The stored key and quartiles of each point.
fn quartiles(points: &[PointRow]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "\n{:<9} {:>9} {:<24} {:>11} {:>11} {:>11}", "proto", "size", "setting", "q1", "median", "q3");
    for p in points {
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:<24} {:>11} {:>11} {:>11}",
            p.proto,
            fmt_bytes(p.size),
            p.setting,
            opt_ns(p.q1_ns),
            opt_ns(p.median_ns),
            opt_ns(p.q3_ns)
        );
    }
    out
}

/// A stored point's figure for comparing runs: its median time, or (for a
/// stream or a fanout point, which have none) its rate.
fn figure(m: Option<Measure>, p: &PointRow) -> (Option<f64>, Option<f64>, Option<f64>) {
    let rate = |key: &str| p.figures.get(key).and_then(|v| v.as_f64());
    match m {
        Some(Measure::Stream) => (None, rate("throughput_bps"), None),
        Some(Measure::Fanout) => (None, rate("bandwidth_bps"), None),
        _ => (p.q1_ns, p.median_ns, p.q3_ns),
    }
}

/// Whether a point's change between two runs is a finding: Welch's
/// interval on the two sets of round medians, or a bootstrap of the
/// samples; "?" when the points kept neither.
fn significance(p: &PointRow, q: &PointRow) -> String {
    let rounds = |x: &PointRow| -> Vec<f64> {
        x.figures
            .get("rounds_ns")
            .and_then(|r| r.as_array())
            .map(|r| r.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default()
    };
    let d = gridperf_core::compare::unpaired(&rounds(p), &rounds(q)).or_else(|| {
        let (sa, sb) = (p.samples.as_deref().unwrap_or_default(), q.samples.as_deref().unwrap_or_default());
        gridperf_core::compare::bootstrap(sa, sb, p.size ^ 0x5EED)
    });
    match d {
        Some(d) if d.significant() => format!("yes ({:+.1}..{:+.1}%)", d.lo * 100.0, d.hi * 100.0),
        Some(d) => format!("no ({:+.1}..{:+.1}%)", d.lo * 100.0, d.hi * 100.0),
        None => "?".into(),
    }
}

/// `gridperf runs compare A B`: the points both have, with the change and
/// whether it is a finding (its 95% interval wholly beyond 5%, `compare::NEGLIGIBLE`).
pub fn compare(ra: &RunRow, a: &[PointRow], rb: &RunRow, b: &[PointRow]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "run {} ({} on {}) -> run {} ({} on {})", ra.id, ra.kind, ra.network, rb.id, rb.kind, rb.network);
    let rates = matches!(ra.measure(), Some(Measure::Stream | Measure::Fanout));
    let same = |p: &PointRow, q: &PointRow| q.proto == p.proto && q.size == p.size && q.setting == p.setting;
    let pct = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if x > 0.0 => format!("{:+.1}%", (y / x - 1.0) * 100.0),
        _ => "-".into(),
    };
    if rates {
        let _ = writeln!(out, "{:<13} {:<24} {:>14} {:>14} {:>9}", "proto", "setting", "rate A", "rate B", "change");
    } else {
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}  significant (95% interval)",
            "proto", "size", "median A", "median B", "change", "q1 chg", "q3 chg"
        );
    }
    let mut only = 0;
    for p in a {
        let Some(q) = b.iter().find(|q| same(p, q)) else {
            only += 1;
            continue;
        };
        let (fa, fb) = (figure(ra.measure(), p), figure(rb.measure(), q));
        if rates {
            let show = |v: Option<f64>| v.map(fmt_bps).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:<13} {:<24} {:>14} {:>14} {:>9}",
                p.proto,
                p.setting,
                show(fa.1),
                show(fb.1),
                pct(fa.1, fb.1)
            );
        } else {
            let _ = writeln!(
                out,
                "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}  {}",
                p.proto,
                fmt_bytes(p.size),
                opt_ns(fa.1),
                opt_ns(fb.1),
                pct(fa.1, fb.1),
                pct(fa.0, fb.0),
                pct(fa.2, fb.2),
                significance(p, q)
            );
        }
    }
    let only_b = b.iter().filter(|q| !a.iter().any(|p| same(p, q))).count();
    if only + only_b > 0 {
        let _ = writeln!(out, "({only} points only in run {}, {only_b} only in run {})", ra.id, rb.id);
    }
    if !rates {
        let _ = writeln!(
            out,
            "significant: the 95% interval of the change (Welch's, on the points' round medians; else a bootstrap of their\n\
             samples) lies wholly beyond {}%; ?: the points kept neither",
            (gridperf_core::compare::NEGLIGIBLE * 100.0) as u32
        );
    }
    out
}

/// `gridperf runs export --format csv`: a stream or fanout run as its
/// command's CSV; otherwise each point's key and quartiles.
pub fn csv(r: &RunRow, points: &[PointRow]) -> String {
    let own = match r.measure() {
        Some(Measure::Stream) => figures::<StreamResult>(points).map(|s| super::stream::csv(&s)),
        Some(Measure::Fanout) => figures::<FanoutPoint>(points).map(|p| super::fanout::csv(&p)),
        _ => None,
    };
    own.unwrap_or_else(|| {
        let mut t = super::Csv::new(&["proto", "size_bytes", "setting", "q1_ns", "median_ns", "q3_ns"]);
        for p in points {
            t.row([
                p.proto.clone(),
                p.size.to_string(),
                p.setting.clone(),
                super::ns_cell(p.q1_ns),
                super::ns_cell(p.median_ns),
                super::ns_cell(p.q3_ns),
            ]);
        }
        t.text()
    })
}
