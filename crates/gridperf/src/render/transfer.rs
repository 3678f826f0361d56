//! `gridperf transfer`: the table and the CSV.

use super::{header, summary_cells, whole_cell, Csv};
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
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<9}{:>9}{:>10}{:>6}{:>11}{:>11}{:>11}{:>11}{:>16}",
        "proto", "size", "messages", "lost", "min", "median", "max", "stddev", "rate (median)"
    );
    for p in points {
        let size = fmt_bytes(p.size_bytes);
        match &p.time {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "{:<9}{:>9}{:>10}{:>6}{:>11}{:>11}{:>11}{:>11}{:>16}",
                    p.proto.name(),
                    size,
                    p.messages,
                    p.lost,
                    fmt_ns(t.min_ns),
                    fmt_ns(t.median_ns),
                    fmt_ns(t.max_ns),
                    fmt_ns(t.stddev_ns),
                    p.rate_bps.map(fmt_bps).unwrap_or_default()
                );
            }
            None => {
                let _ =
                    writeln!(out, "{:<9}{:>9}{:>10}{:>6}  no run completed", p.proto.name(), size, p.messages, p.lost);
            }
        }
    }
    out
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
