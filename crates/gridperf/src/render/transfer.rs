//! `gridperf transfer`: the table and the CSV.

use super::{header, summary_cells, whole_cell, Csv, TextTable};
use gridperf_core::model::{TransferPoint, TransferReport};
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns};
use std::fmt::Write;

pub fn table(r: &TransferReport) -> String {
    let mut out = String::new();
    let s = &r.settings;
    header(
        &mut out,
        &format!(
            "gridperf transfer to {}: {} bytes per run in messages of each size, each echoed; {} timed runs after {} warm-up",
            r.env.target,
            s.total_bytes.unwrap_or(0),
            s.repeat.unwrap_or(0),
            s.warmup
        ),
        s,
        &r.env,
    );
    out.push_str(&rows(&r.points));
    let _ = writeln!(out, "\nrate = payload bytes sent one way per run / run time (each byte also came back)");
    out
}

/// The table's rows (with their heading), for a run's points.
pub fn rows(points: &[TransferPoint]) -> String {
    use super::Align::{Left, Right};
    let time = |name| (name, 11, Right);
    let mut t = TextTable::new(
        &[
            ("proto", 9, Left),
            ("size", 9, Right),
            ("messages", 10, Right),
            ("lost", 6, Right),
            time("min"),
            time("median"),
            time("max"),
            time("stddev"),
            ("rate (median)", 16, Right),
        ],
        "",
    );
    for p in points {
        let head = [p.proto.name().to_string(), fmt_bytes(p.size_bytes), p.messages.to_string(), p.lost.to_string()];
        match &p.time {
            Some(m) => {
                let times = [m.min_ns, m.median_ns, m.max_ns, m.stddev_ns].map(fmt_ns);
                t.row(head.into_iter().chain(times).chain([p.rate_bps.map(fmt_bps).unwrap_or_default()]));
            }
            None => t.row_then(head, "  no run completed"),
        }
    }
    format!("\n{}", t.text())
}

impl super::Render for TransferReport {
    fn table(&self) -> String {
        table(self)
    }

    fn csv(&self) -> Option<String> {
        Some(csv(self))
    }
}

/// The CSV: a row per point.
pub fn csv(r: &TransferReport) -> String {
    let mut t = Csv::new(&[
        "proto",
        "size_bytes",
        "messages",
        "bytes_per_run",
        "runs",
        "lost",
        "min_ns",
        "q1_ns",
        "median_ns",
        "q3_ns",
        "max_ns",
        "mean_ns",
        "stddev_ns",
        "rate_bps",
    ]);
    for p in &r.points {
        let m = p.time.as_ref();
        let head = [
            p.proto.name().to_string(),
            p.size_bytes.to_string(),
            p.messages.to_string(),
            p.bytes_per_run.to_string(),
            p.run_times_ns.len().to_string(),
            p.lost.to_string(),
        ];
        t.row(head.into_iter().chain(summary_cells(m, false)).chain([whole_cell(p.rate_bps)]));
    }
    t.text()
}
