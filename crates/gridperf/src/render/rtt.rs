//! `gridperf rtt`: the table (one row per point, times in units that fit) and the CSV.

use super::{header, summary_cells, Csv};
use gridperf_core::model::{RttPoint, RttReport};
use gridperf_core::units::{fmt_bytes, fmt_ns};
use std::fmt::Write;

/// The rtt table: one row per point, times in units that fit.
pub fn table(r: &RttReport) -> String {
    let mut out = String::new();
    let s = &r.settings;
    let count = match (s.iterations, s.duration_ns) {
        (_, Some(d)) => format!("{} per point", fmt_ns(d as f64)),
        (Some(n), None) => format!("{n} exchanges per point"),
        _ => String::new(),
    };
    header(
        &mut out,
        &format!("gridperf rtt to {}: round-trip times (not half), {count} after {} warm-up", r.env.target, s.warmup),
        s,
        &r.env,
    );
    out.push_str(&rows(&r.points));
    out
}

/// The table's rows (with their heading), for a run's points.
pub fn rows(points: &[RttPoint]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<9}{:>9}{:>9}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "proto", "size", "count", "lost", "min", "q1", "median", "q3", "p99", "max", "mean", "stddev"
    );
    for p in points {
        let size = fmt_bytes(p.size_bytes);
        match &p.summary {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "{:<9}{:>9}{:>9}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
                    p.proto.name(),
                    size,
                    m.count,
                    p.lost,
                    fmt_ns(m.min_ns),
                    fmt_ns(m.q1_ns),
                    fmt_ns(m.median_ns),
                    fmt_ns(m.q3_ns),
                    fmt_ns(m.p99_ns),
                    fmt_ns(m.max_ns),
                    fmt_ns(m.mean_ns),
                    fmt_ns(m.stddev_ns)
                );
            }
            None => {
                let _ = writeln!(out, "{:<9}{:>9}{:>9}{:>6}  no reply came back", p.proto.name(), size, 0, p.lost);
            }
        }
    }
    out
}

/// The CSV: a row per point, or with `samples` a row per sample.
pub fn csv(r: &RttReport, samples: bool) -> String {
    if samples {
        let mut t = Csv::new(&["proto", "size_bytes", "index", "rtt_ns"]);
        for p in &r.points {
            for (i, ns) in p.samples_ns.iter().flatten().enumerate() {
                t.row([p.proto.name().to_string(), p.size_bytes.to_string(), i.to_string(), ns.to_string()]);
            }
        }
        return t.text();
    }
    let mut t = Csv::new(&[
        "proto",
        "size_bytes",
        "count",
        "warmup",
        "sent",
        "lost",
        "late",
        "min_ns",
        "q1_ns",
        "median_ns",
        "q3_ns",
        "p99_ns",
        "max_ns",
        "mean_ns",
        "stddev_ns",
        "irregular",
    ]);
    for p in &r.points {
        let m = p.summary.as_ref();
        let head = [
            p.proto.name().to_string(),
            p.size_bytes.to_string(),
            m.map_or(0, |m| m.count).to_string(),
            p.warmup.to_string(),
            p.sent.to_string(),
            p.lost.to_string(),
            p.late.to_string(),
        ];
        let why = p.irregular.as_ref().map(|i| i.describe()).unwrap_or_default();
        t.row(head.into_iter().chain(summary_cells(m, true)).chain([why]));
    }
    t.text()
}
