//! `gridperf tune`: each end's settings, what each caps a stream at and
//! what to set, the probes' findings, the binding limit each way, and what
//! `--apply` did.

use gridperf_core::model::{DirectionCap, TuneView};
use gridperf_core::units::{fmt_bps, fmt_ns};
use std::fmt::Write;

/// `gridperf tune`'s table, the verdict and the lines to apply.
pub fn text(v: &TuneView) -> String {
    let mut out = String::new();
    let rate = v.path.rate_bps as f64;
    let _ = writeln!(
        out,
        "a single TCP stream at {} over {} RTT needs a window of {} bytes (the bandwidth-delay product)",
        fmt_bps(rate),
        fmt_ns(v.path.rtt_ns as f64),
        v.bdp_bytes
    );
    let _ = writeln!(out, "path: {}", v.path_from);
    if let Some(m) = &v.measured {
        if let (Some(r), Some(n)) = (m.rate_bps, &m.rate_note) {
            let _ = writeln!(out, "rate: {} measured, {n}", fmt_bps(r));
        }
    }
    for p in &v.share_probes {
        let dir = if p.direction == "up" { "to the far end" } else { "from the far end" };
        if let (Some(s), Some(w), Some(b)) = (p.receive_share, p.window_max, p.rcvbuf) {
            let _ = writeln!(
                out,
                "measured {dir}: the receiver advertised {w} bytes of window from its {b}-byte buffer ({:.0}%)",
                s * 100.0
            );
        }
        if let (Some(s), Some(f), Some(b)) = (p.send_share, p.in_flight_median, p.sndbuf) {
            let _ = writeln!(
                out,
                "measured {dir}: the sender kept a median {f} bytes in flight from its {b}-byte buffer ({:.0}%)",
                s * 100.0
            );
        }
        for n in &p.notes {
            let _ = writeln!(out, "measured {dir}: {n}");
        }
    }
    for e in &v.ends {
        let _ = writeln!(
            out,
            "\n{}{}:",
            e.name,
            e.settings.kernel.as_deref().map(|k| format!(" (Linux {k})")).unwrap_or_default()
        );
        let _ = writeln!(out, "  {:<32} {:<28} {:>14} {:<28}  why", "setting", "now", "caps a stream", "set to");
        for r in &e.advice.rows {
            let _ = writeln!(
                out,
                "  {:<32} {:<28} {:>14} {:<28}  {}{}",
                r.setting,
                r.current,
                r.cap_bps.map(|c| fmt_bps(c.min(rate))).unwrap_or_else(|| "-".into()),
                r.recommended.clone().unwrap_or_else(|| "-".into()),
                r.why,
                if r.per_namespace { "" } else { " (global, not per namespace)" }
            );
        }
        for u in &e.unknown {
            let _ = writeln!(out, "  unknown: {u}");
        }
        if !e.advice.sysctl_lines.is_empty() {
            let _ = match e.name.as_str() {
                "this host" => {
                    writeln!(out, "  to apply here (as root; --write-sysctl FILE writes them for /etc/sysctl.d):")
                }
                n if n.starts_with("agent ") => writeln!(out, "  to apply on the agent's host (as root there):"),
                n => writeln!(out, "  to apply in lab host {n} (tune --in-lab NAME --apply does it):"),
            };
            for l in &e.advice.sysctl_lines {
                let (k, val) = l.split_once(" = ").unwrap_or((l, ""));
                let _ = writeln!(out, "    sysctl -w {k}=\"{val}\"");
            }
        }
    }
    let caps = |out: &mut String, ds: &[DirectionCap]| {
        for d in ds {
            let dir = if d.from == d.to { String::new() } else { format!("{} -> {}: ", d.from, d.to) };
            let _ = match (&d.binding, d.cap_bps) {
                (Some(b), Some(c)) => writeln!(
                    out,
                    "  {dir}{b} caps a single stream at {} of the path's {} ({:.0}%)",
                    fmt_bps(c),
                    fmt_bps(rate),
                    c / rate * 100.0
                ),
                _ => writeln!(
                    out,
                    "  {dir}nothing caps a single stream below the path's rate: the buffers are sufficient"
                ),
            };
        }
    };
    let _ = writeln!(out, "\nbinding:");
    caps(&mut out, &v.directions);
    if !v.applied.is_empty() {
        let _ = writeln!(out, "\napplied:");
        for x in &v.applied {
            let _ = writeln!(out, "  {:<4} {} = {}: {}", x.host, x.setting, x.value, x.outcome);
        }
    }
    if let Some(after) = &v.after {
        let _ = writeln!(out, "\nafter, as read back:");
        caps(&mut out, after);
    }
    out
}
