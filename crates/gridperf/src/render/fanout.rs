//! `gridperf fanout`: the table, the evidence of each deadlock, the CSV.

use super::{whole_cell, Csv};
use gridperf_core::model::FanoutPoint;
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns};
use std::fmt::Write;

/// What a sweep was run with, for its table's header: where the ends
/// were ("on loopback", "across the lab: ...", "to consumers on the
/// agents ..."), MAX, the watchdog and the buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub place: String,
    pub repeat: u32,
    pub watchdog_ns: u64,
    pub buffer: Option<u64>,
}

/// `gridperf fanout`'s table, and the evidence of each deadlock.
pub fn table(points: &[FanoutPoint], o: &Sweep) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gridperf fanout {}: MAX {} repetitions per point, watchdog {}, buffers {}",
        o.place,
        o.repeat,
        fmt_ns(o.watchdog_ns as f64),
        o.buffer.map(|b| format!("-w {}", fmt_bytes(b))).unwrap_or_else(|| "autotuned".into())
    );
    out.push_str(&rows(points));
    for p in points.iter().filter(|p| p.deadlock.is_some()).take(3) {
        let Some(d) = &p.deadlock else { continue };
        let _ = writeln!(
            out,
            "\ndeadlock: {} {} nodes, {} x {} requests:",
            p.variant.name(),
            p.nodes,
            p.messages,
            fmt_bytes(p.size)
        );
        let _ = writeln!(out, "  server sent {:?} requests, got {:?} acknowledgments (per node)", d.sent, d.acked);
        for b in &d.blocked {
            let _ = writeln!(out, "  {:<8} blocked in {}", b.who, b.call);
        }
        for q in &d.queues {
            let _ = writeln!(
                out,
                "  {:<16} {:>9} bytes unacknowledged (SIOCOUTQ), {:>9} unread (SIOCINQ)",
                q.socket, q.outq, q.inq
            );
        }
    }
    let n = points.iter().filter(|p| p.deadlock.is_some()).count();
    if n > 3 {
        let _ = writeln!(out, "\n({} more deadlocked points: --json has the evidence of each)", n - 3);
    }
    for note in gridperf_core::model::nagle_notes(points) {
        let _ = writeln!(out, "\n{note}");
    }
    out
}

/// The points' rows (with their heading).
pub fn rows(points: &[FanoutPoint]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<13} {:>5} {:>8} {:>8} {:>14} {:>11}  result",
        "variant", "nodes", "size", "messages", "bandwidth", "median rep"
    );
    for p in points {
        let result = match (&p.deadlock, &p.error) {
            (Some(d), _) => format!("DEADLOCK after {} (repetition {})", fmt_ns(d.after_ns as f64), d.repetition + 1),
            (None, Some(e)) => format!("ERROR: {e}"),
            (None, None) => "ok".into(),
        };
        let _ = writeln!(
            out,
            "{:<13} {:>5} {:>8} {:>8} {:>14} {:>11}  {result}",
            p.variant.name(),
            p.nodes,
            fmt_bytes(p.size),
            p.messages,
            p.bandwidth_bps.map(fmt_bps).unwrap_or_else(|| "-".into()),
            p.time.as_ref().map(|t| fmt_ns(t.median_ns)).unwrap_or_else(|| "-".into())
        );
    }
    out
}

/// `gridperf fanout --csv`.
pub fn csv(points: &[FanoutPoint]) -> String {
    let mut t = Csv::new(&[
        "variant",
        "nodes",
        "size",
        "messages",
        "repetitions",
        "bandwidth_bps",
        "median_rep_ns",
        "deadlock",
        "error",
    ]);
    for p in points {
        t.row([
            p.variant.name().to_string(),
            p.nodes.to_string(),
            p.size.to_string(),
            p.messages.to_string(),
            p.repetitions.to_string(),
            whole_cell(p.bandwidth_bps),
            whole_cell(p.time.as_ref().map(|t| t.median_ns)),
            p.deadlock.is_some().to_string(),
            p.error.clone().unwrap_or_default(),
        ]);
    }
    t.text()
}
