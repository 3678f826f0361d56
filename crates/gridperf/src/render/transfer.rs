//! `gridperf transfer`: the table and the CSV.

use super::header;
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

pub fn csv(r: &TransferReport) -> String {
    let mut out = String::from(
        "proto,size_bytes,messages,bytes_per_run,runs,lost,min_ns,q1_ns,median_ns,q3_ns,max_ns,mean_ns,stddev_ns,rate_bps\n",
    );
    for p in &r.points {
        let _ = write!(
            out,
            "{},{},{},{},{},{},",
            p.proto.name(),
            p.size_bytes,
            p.messages,
            p.bytes_per_run,
            p.run_times_ns.len(),
            p.lost
        );
        match &p.time {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{}",
                    t.min_ns,
                    t.q1_ns,
                    t.median_ns,
                    t.q3_ns,
                    t.max_ns,
                    t.mean_ns,
                    t.stddev_ns,
                    p.rate_bps.unwrap_or(f64::NAN)
                );
            }
            None => {
                let _ = writeln!(out, ",,,,,,,");
            }
        }
    }
    out
}
