//! `gridperf tune`: each end's settings, what each caps a stream at and
//! what to set, the probes' findings, the binding limit each way, and what
//! `--apply` did.

use gridperf_core::model::{DirectionCap, TuneView};
use gridperf_core::units::{fmt_bps, fmt_ns, fmt_size};
use std::fmt::Write;

/// The table's width: it reads in a 100-column terminal.
const WIDTH: usize = 100;

/// A setting's value for reading: buffer sizes in binary units
/// ("4 KiB 128 KiB 32 MiB"); anything else as read. The lines to apply
/// keep the exact numbers.
fn readable(setting: &str, value: &str) -> String {
    let sizes = ["tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max", "rmem_default", "wmem_default"];
    if !sizes.iter().any(|s| setting.ends_with(s)) {
        return value.to_string();
    }
    let parts: Option<Vec<String>> = value.split_whitespace().map(|n| n.parse::<u64>().ok().map(fmt_size)).collect();
    match parts {
        Some(p) if !p.is_empty() => p.join(" "),
        _ => value.to_string(),
    }
}

/// `text` broken into lines of at most `width` columns: the first
/// indented `first`, the rest `rest`.
fn wrap(text: &str, first: usize, rest: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    let mut indent = first;
    // a figure and its unit stay on one line
    let mut words: Vec<String> = Vec::new();
    for w in text.split_whitespace() {
        let unit = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "B", "KiB", "MiB", "GiB", "bytes", "ms", "us"]
            .iter()
            .any(|u| w.trim_end_matches([',', ')', ';', ':']) == *u);
        match words.last_mut() {
            Some(prev) if unit && prev.chars().last().is_some_and(|c| c.is_ascii_digit()) => {
                prev.push(' ');
                prev.push_str(w);
            }
            _ => words.push(w.to_string()),
        }
    }
    for word in &words {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{:indent$}{line}", "");
            line.clear();
            indent = rest;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
    out
}

/// `gridperf tune`'s table, the verdict and the lines to apply.
pub fn text(v: &TuneView) -> String {
    let mut out = String::new();
    let rate = v.path.rate_bps as f64;
    out.push_str(&wrap(
        &format!(
            "a single TCP stream at {} over {} RTT needs a window of {} ({} bytes, the bandwidth-delay product)",
            fmt_bps(rate),
            fmt_ns(v.path.rtt_ns as f64),
            fmt_size(v.bdp_bytes),
            v.bdp_bytes
        ),
        0,
        2,
        WIDTH,
    ));
    out.push_str(&wrap(&format!("path: {}", v.path_from), 0, 2, WIDTH));
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
                "measured {dir}: the receiver advertised {} of window from its {} buffer ({:.0}%)",
                fmt_size(w),
                fmt_size(b),
                s * 100.0
            );
        }
        if let (Some(s), Some(b), Some(bps)) = (p.send_share, p.sndbuf, p.send_probe_bps) {
            let spread = p
                .send_share_quartiles
                .map(|(q1, q3)| format!(", quartiles {:.0}-{:.0}%", q1 * 100.0, q3 * 100.0))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "measured {dir}: the sender's {} buffer carried {}, a window of {:.0}% of it{spread}",
                fmt_size(b),
                fmt_bps(bps),
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
        let _ = writeln!(out, "  {:<31} {:<24} {:>13}  set to", "setting", "now", "caps a stream");
        for r in &e.advice.rows {
            let _ = writeln!(
                out,
                "  {:<31} {:<24} {:>13}  {}",
                r.setting,
                readable(&r.setting, &r.current),
                r.cap_bps.map(|c| fmt_bps(c.min(rate))).unwrap_or_else(|| "-".into()),
                r.recommended.as_deref().map(|s| readable(&r.setting, s)).unwrap_or_else(|| "keep".into()),
            );
            let global = if r.per_namespace { "" } else { " (global, not per namespace)" };
            out.push_str(&wrap(&format!("{}{global}", r.why), 6, 6, WIDTH));
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
            let dir = if d.from == d.to { String::new() } else { format!("{} -> {}:\n    ", d.from, d.to) };
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
    fit(&out)
}

/// Every line longer than [`WIDTH`] wrapped, its continuation indented two
/// more than it; the commands to apply stay whole, to be copied.
fn fit(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.len() <= WIDTH || line.trim_start().starts_with("sysctl -w") {
            out.push_str(line);
            out.push('\n');
        } else {
            out.push_str(&wrap(line, indent, indent + 2, WIDTH));
        }
    }
    out
}
