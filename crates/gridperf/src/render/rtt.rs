//! `gridperf rtt`: the table (one row per point, times in units that fit) and the CSV.

use super::{header, summary_cells, Csv, TextTable};
use gridperf_core::model::{RttPoint, RttReport};
use gridperf_core::units::{fmt_bytes, fmt_ns};

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
    use super::Align::{Left, Right};
    let time = |name| (name, 10, Right);
    let mut t = TextTable::new(
        &[
            ("proto", 9, Left),
            ("size", 9, Right),
            ("count", 9, Right),
            ("lost", 6, Right),
            time("min"),
            time("q1"),
            time("median"),
            time("q3"),
            time("p99"),
            time("max"),
            time("mean"),
            time("stddev"),
        ],
        "",
    );
    for p in points {
        let head = [p.proto.name().to_string(), fmt_bytes(p.size_bytes)];
        match &p.summary {
            Some(m) => {
                let times = [m.min_ns, m.q1_ns, m.median_ns, m.q3_ns, m.p99_ns, m.max_ns, m.mean_ns, m.stddev_ns];
                let counts = [m.count.to_string(), p.lost.to_string()];
                t.row(head.into_iter().chain(counts).chain(times.map(fmt_ns)));
            }
            None => t.row_then(head.into_iter().chain(["0".into(), p.lost.to_string()]), "  no reply came back"),
        }
    }
    format!("\n{}", t.text())
}

impl super::Render for RttReport {
    fn table(&self) -> String {
        table(self)
    }

    /// A row per point, or a row per sample when the samples were kept (--samples).
    fn csv(&self) -> Option<String> {
        Some(csv(self, self.points.iter().any(|p| p.samples_ns.is_some())))
    }
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
