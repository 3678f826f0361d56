//! `gridperf trace`'s table and CSV.

use super::Csv;
use gridperf_core::model::TraceReport;
use gridperf_core::units::{fmt_bps, fmt_bytes};
use std::fmt::Write;

/// Connections listed one by one at most (the largest by bytes); the rest are counted.
const LISTED: usize = 20;

pub fn table(r: &TraceReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gridperf trace {}: {} frames ({}), {} TCP segments, {} connections over {:.3} s",
        r.file,
        r.frames,
        r.links.join(", "),
        r.tcp_segments,
        r.connections.len(),
        r.seconds
    );
    let s = &r.skipped;
    if s.not_tcp + s.short + s.fragments + s.beyond_limit > 0 {
        let _ = writeln!(
            out,
            "left out: {} not TCP, {} cut by the snap length, {} fragments, {} beyond the connections followed",
            s.not_tcp, s.short, s.fragments, s.beyond_limit
        );
    }
    if r.out_of_order > 0 {
        let _ = writeln!(out, "{} frames are out of time order in the file (kept in the file's order)", r.out_of_order);
    }
    if let Some(e) = &r.ended {
        let _ = writeln!(out, "{e}");
    }
    let mut conns: Vec<&gridperf_core::model::TraceConn> = r.connections.iter().collect();
    conns.sort_by_key(|c| std::cmp::Reverse(c.directions.iter().map(|d| d.bytes_sent).sum::<u64>()));
    let _ = writeln!(
        out,
        "\n{:>4}  {:<44} {:>9} {:>9} {:>9}  handshake",
        "#", "connection", "start s", "length s", "segments"
    );
    for c in conns.iter().take(LISTED) {
        let hs = match c.handshake_rtt_ms {
            Some(ms) => format!("{ms:.2} ms"),
            None if c.handshake => "seen".into(),
            None => "not in the capture".into(),
        };
        let _ = writeln!(
            out,
            "{:>4}  {:<44} {:>9.3} {:>9.3} {:>9}  {hs}",
            c.index,
            format!("{} <-> {}", c.a, c.b),
            c.start_s,
            c.duration_s,
            c.segments
        );
    }
    if conns.len() > LISTED {
        let _ = writeln!(out, "... and {} more (--json lists them all)", conns.len() - LISTED);
    }
    for c in conns.iter().take(LISTED) {
        for d in &c.directions {
            let _ = writeln!(out, "\nconnection {}: {} -> {}", c.index, d.from, d.to);
            let _ = writeln!(out, "  capture point: {}", c.capture_point);
            let _ = writeln!(
                out,
                "  {} acknowledged in {:.3} s: {} · {} sent in {} segments",
                fmt_bytes(d.bytes_acked),
                d.seconds,
                fmt_bps(d.throughput_bps),
                fmt_bytes(d.bytes_sent),
                d.segments
            );
            let _ = writeln!(
                out,
                "  retransmissions: {} ({} fast, {} after a timeout, {} other; {} shown needless by a D-SACK)",
                d.retransmits, d.fast, d.timeout, d.other, d.spurious
            );
            let rtt = match (d.rtt_min_ms, d.rtt_median_ms, d.rtt_max_ms) {
                (Some(a), Some(m), Some(b)) => {
                    format!("min {a:.3} · median {m:.3} · max {b:.3} ms ({} samples)", d.rtt_samples)
                }
                _ => "no sample".into(),
            };
            let _ = writeln!(out, "  RTT: {rtt}; {}", d.rtt_basis);
            let scale = d.window_scale.map_or("unknown: no handshake, windows unscaled".to_string(), |w| w.to_string());
            let _ = writeln!(
                out,
                "  in flight at most {} · the receiver's window at most {} (scale {scale}) · {} zero windows",
                fmt_bytes(d.max_in_flight),
                fmt_bytes(d.max_window),
                d.zero_windows
            );
            if !d.cwnd_at_loss.is_empty() {
                let shown: Vec<String> =
                    d.cwnd_at_loss.iter().take(8).map(|(t, b)| format!("{t:.2} s: {}", fmt_bytes(*b))).collect();
                let more = if d.cwnd_at_loss.len() > 8 {
                    format!(" (+{} more)", d.cwnd_at_loss.len() - 8)
                } else {
                    String::new()
                };
                let _ = writeln!(out, "  window at each loss (in flight then): {}{more}", shown.join(", "));
            }
            if let Some(v) = &d.verdict {
                let _ = writeln!(out, "  {}", v.text);
            }
        }
    }
    let _ = writeln!(out);
    for c in &r.cannot_tell {
        let _ = writeln!(out, "note: {c}");
    }
    out
}

/// A row per connection, direction and interval with traffic.
pub fn csv(r: &TraceReport) -> String {
    let mut w = Csv::new(&[
        "connection",
        "from",
        "to",
        "t_s",
        "acked_bytes",
        "bps",
        "in_flight_bytes",
        "window_bytes",
        "seq",
        "retransmits",
        "rtt_ms",
    ]);
    for c in &r.connections {
        for d in &c.directions {
            // a long connection's points span several intervals
            let secs = if d.series_interval_s > 0.0 { d.series_interval_s } else { r.interval_ms as f64 / 1000.0 };
            for p in &d.series {
                w.row([
                    c.index.to_string(),
                    d.from.clone(),
                    d.to.clone(),
                    format!("{:.3}", p.t_s),
                    p.acked.to_string(),
                    format!("{:.0}", p.acked as f64 * 8.0 / secs),
                    p.in_flight.to_string(),
                    p.window.to_string(),
                    p.seq.to_string(),
                    p.retransmits.to_string(),
                    p.rtt_ms.map(|m| format!("{m:.3}")).unwrap_or_default(),
                ]);
            }
        }
    }
    w.text()
}

impl super::Render for TraceReport {
    fn table(&self) -> String {
        table(self)
    }

    fn csv(&self) -> Option<String> {
        Some(csv(self))
    }
}
