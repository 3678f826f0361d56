//! `gridperf stream`: the table (settings, each run's streams with both
//! ends' figures and the verdict, totals and fairness, the runs' spread),
//! the live interval lines, the TCP_INFO timeline as CSV or JSON lines, and
//! the streams of a stored run as CSV.

use super::{fmt_volume, socket_line, whole_cell, Csv};
use gridperf_core::model::{EndInfo, StreamReport, StreamResult};
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns};
use std::fmt::Write;

/// The unit rates are printed in (iperf3's -f): bits per second in the
/// unit that fits (the default), or a fixed unit of bits or bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Units {
    #[default]
    Auto,
    /// k, m, g, t: 10^3k bits per second.
    Bits(u32),
    /// K, M, G, T: 10^3k bytes per second.
    Bytes(u32),
}

impl Units {
    /// `-f k|m|g|t|K|M|G|T`; None for anything else.
    pub fn parse(s: &str) -> Option<Units> {
        let power = |c: char| "kmgt".find(c.to_ascii_lowercase()).map(|k| k as u32 + 1);
        match s.chars().collect::<Vec<_>>().as_slice() {
            [c] if c.is_ascii_lowercase() => power(*c).map(Units::Bits),
            [c] if c.is_ascii_uppercase() => power(*c).map(Units::Bytes),
            _ => None,
        }
    }

    /// A rate in bits per second, in this unit.
    pub fn rate(self, bps: f64) -> String {
        let prefix = |k: u32| ["", "k", "M", "G", "T"][k as usize];
        match self {
            Units::Auto => fmt_bps(bps),
            Units::Bits(k) => format!("{:.2} {}bit/s", bps / 1000f64.powi(k as i32), prefix(k)),
            Units::Bytes(k) => format!("{:.2} {}Byte/s", bps / 8.0 / 1000f64.powi(k as i32), prefix(k)),
        }
    }
}

/// `gridperf stream`'s table: the settings, each run's streams with both
/// ends' figures and the verdict, the totals and fairness, and with
/// --repeat the runs' spread.
pub fn table(r: &StreamReport, best: bool, units: Units) -> String {
    let mut out = String::new();
    let s = &r.spec;
    let way = match s.direction {
        gridperf_core::wire::Direction::Up => "client to agent",
        gridperf_core::wire::Direction::Down => "agent to client (reverse)",
        gridperf_core::wire::Direction::Both => "both ways",
    };
    let target = r.runs.first().map(|x| x.env.target.clone()).unwrap_or_default();
    let _ = writeln!(
        out,
        "\ngridperf stream to {target}: {} x {} {way}, {}{}, writes of {}",
        s.streams,
        s.proto.to_uppercase(),
        match s.bytes {
            Some(b) => format!("{} per stream (at most {})", fmt_bytes(b), fmt_ns(s.duration_ms as f64 * 1e6)),
            None => fmt_ns(s.duration_ms as f64 * 1e6),
        },
        if r.omit_ns > 0 { format!(" after {} omitted", fmt_ns(r.omit_ns as f64)) } else { String::new() },
        fmt_bytes(s.write_size)
    );
    let mut knobs = Vec::new();
    knobs.push(match s.window {
        Some(w) => format!("-w {}", fmt_bytes(w)),
        None => "buffers autotuned".into(),
    });
    if let Some(c) = &s.congestion {
        knobs.push(format!("cc {c}"));
    }
    if let Some(p) = s.pacing_bps {
        knobs.push(format!("pacing {} per stream", fmt_bps(p as f64)));
    }
    if let Some(g) = s.gap_us {
        knobs.push(format!("gap {g} us between writes"));
    }
    if let Some(z) = &s.zerocopy {
        knobs.push(format!("zero-copy {z}"));
    }
    if let Some(b) = s.udp_rate_bps {
        knobs.push(format!("{} per stream", fmt_bps(b as f64)));
    }
    if let Some(run) = r.runs.first() {
        // SACK and timestamps are per network namespace: each end's own
        let flags = |e: &EndInfo| {
            let on = |k: &str| match e.sysctls.get(k).map(String::as_str) {
                Some("0") => "off",
                Some(_) => "on",
                None => "?",
            };
            format!("SACK {}, timestamps {}", on("net.ipv4.tcp_sack"), on("net.ipv4.tcp_timestamps"))
        };
        if s.proto == "tcp" {
            knobs.push(format!("client: {}", flags(&run.env.client)));
            if let Some(a) = &run.env.server {
                knobs.push(format!("agent: {}", flags(a)));
            }
        }
    }
    let _ = writeln!(out, "{}", knobs.join(" · "));
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for (k, run) in r.runs.iter().enumerate() {
        if r.runs.len() > 1 {
            let _ = writeln!(out, "\nrun {}", k + 1);
        }
        if let Some(st) = run.streams.first() {
            for (who, end) in [("sender", &st.sender), ("receiver", &st.receiver)] {
                let _ = writeln!(out, "{}", socket_line(who, &end.socket));
            }
        }
        let _ = writeln!(out);
        out.push_str(&rows(&s.proto, &run.streams, units));
        let mut total = Vec::new();
        if let Some(u) = run.up_bps {
            total.push(format!("up {}", units.rate(u)));
        }
        if let Some(d) = run.down_bps {
            total.push(format!("down {}", units.rate(d)));
        }
        let _ = write!(out, "total: {}", total.join(", "));
        if run.streams.len() > 1 {
            let _ = write!(
                out,
                " · slowest/fastest {} · Jain's index {}",
                run.slowest_over_fastest.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into()),
                run.jain.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into())
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "CPU (stream threads): client {}, agent {}{}",
            fmt_ns(run.client_cpu_ns as f64),
            fmt_ns(run.agent_cpu_ns as f64),
            run.cpu_ns_per_byte.map(|c| format!(", {c:.3} ns per byte received")).unwrap_or_default()
        );
        if let Some(lab) = &run.env.lab {
            let _ = writeln!(
                out,
                "lab {}: {}{}",
                lab.name,
                lab.description,
                lab.invalid.as_ref().map(|w| format!(" · INVALID: {w}")).unwrap_or_else(|| " · valid".into())
            );
        }
    }
    if r.runs.len() > 1 {
        let list: Vec<String> = r.totals_bps.iter().map(|t| units.rate(*t)).collect();
        let _ = writeln!(out, "\nruns: {}", list.join(", "));
        if best {
            let _ = writeln!(out, "best: {}", r.best_bps.map(|b| units.rate(b)).unwrap_or_else(|| "-".into()));
        } else {
            let _ = writeln!(
                out,
                "median: {} · spread (max - min) / median: {}",
                r.median_bps.map(|m| units.rate(m)).unwrap_or_else(|| "-".into()),
                r.spread.map(|s| format!("{:.1}%", s * 100.0)).unwrap_or_else(|| "-".into())
            );
        }
    }
    if let Some(c) = &r.capture {
        out.push_str(&capture_lines(c));
    }
    out
}

/// The streams' rows (with their heading): UDP's loss, reordering and
/// jitter, or TCP's retransmissions, window and verdict.
pub fn rows(proto: &str, streams: &[StreamResult], units: Units) -> String {
    let mut out = String::new();
    if proto == "udp" {
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>11} {:>14} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10}",
            "stream", "dir", "received", "throughput", "sent", "lost", "reord", "dup", "jitter", "send errs"
        );
        for st in streams {
            let u = st.receiver.udp.clone().unwrap_or_default();
            let sent = st.sender.datagrams.unwrap_or(0);
            let lost = u.lost();
            let pct = if sent > 0 { lost as f64 * 100.0 / sent as f64 } else { 0.0 };
            let _ = writeln!(
                out,
                "{:>6} {:>5} {:>11} {:>14} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10}{}",
                st.index,
                st.direction,
                fmt_volume(st.receiver.bytes),
                units.rate(st.throughput_bps),
                sent,
                format!("{lost} ({pct:.2}%)"),
                u.reordered,
                u.duplicates,
                fmt_ns(u.jitter_ns),
                st.sender.send_errors,
                st.broken.as_ref().map(|b| format!("  BROKEN: {b}")).unwrap_or_default()
            );
        }
    } else {
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>11} {:>14} {:>8} {:>9} {:>9}  verdict",
            "stream", "dir", "received", "throughput", "retrans", "cwnd max", "min RTT"
        );
        for st in streams {
            let cwnd = st.timeline.iter().map(|t| t.cwnd).max();
            let min_rtt = st.timeline.iter().map(|t| t.min_rtt_us).filter(|&v| v > 0).min();
            let verdict = st.verdict.as_ref().map(|v| v.text.clone()).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:>6} {:>5} {:>11} {:>14} {:>8} {:>9} {:>9}  {}{}",
                st.index,
                st.direction,
                fmt_volume(st.receiver.bytes),
                units.rate(st.throughput_bps),
                st.retransmits.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                cwnd.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                min_rtt.map(|u| fmt_ns(u as f64 * 1e3)).unwrap_or_else(|| "-".into()),
                verdict,
                st.broken.as_ref().map(|b| format!("  BROKEN: {b}")).unwrap_or_default()
            );
            if let Some(z) = st.sender.zerocopy {
                let _ = writeln!(
                    out,
                    "{:>6}       MSG_ZEROCOPY: {} sends, {} completed, {} of them copied by the kernel after all",
                    "", z.sends, z.completions, z.copied
                );
            }
        }
    }
    out
}

/// Every stream's TCP_INFO timeline (the sender's), as CSV or JSON lines.
pub fn timeline(r: &StreamReport, csv: bool) -> String {
    let mut t = Csv::new(&[
        "run",
        "stream",
        "direction",
        "t_s",
        "cwnd",
        "ssthresh",
        "srtt_ms",
        "rttvar_ms",
        "min_rtt_ms",
        "unacked",
        "bytes_in_flight",
        "total_retrans",
        "delivery_rate_bps",
        "pacing_rate_bps",
        "busy_ms",
        "rwnd_limited_ms",
        "sndbuf_limited_ms",
        "snd_wnd",
        "bytes_acked",
    ]);
    let mut lines = String::new();
    let ms = |us: f64| format!("{:.3}", us / 1e3);
    for (k, run) in r.runs.iter().enumerate() {
        for st in &run.streams {
            for s in &st.timeline {
                if csv {
                    t.row([
                        (k + 1).to_string(),
                        st.index.to_string(),
                        st.direction.clone(),
                        format!("{:.3}", s.t_ns as f64 / 1e9),
                        s.cwnd.to_string(),
                        s.ssthresh.to_string(),
                        ms(s.srtt_us as f64),
                        ms(s.rttvar_us as f64),
                        ms(s.min_rtt_us as f64),
                        s.unacked.to_string(),
                        (s.unacked as u64 * s.mss as u64).to_string(),
                        s.total_retrans.to_string(),
                        (s.delivery_rate * 8).to_string(),
                        s.pacing_rate.saturating_mul(8).to_string(),
                        ms(s.busy_us as f64),
                        ms(s.rwnd_limited_us as f64),
                        ms(s.sndbuf_limited_us as f64),
                        s.snd_wnd.to_string(),
                        s.bytes_acked.to_string(),
                    ]);
                } else {
                    let line =
                        serde_json::json!({ "run": k + 1, "stream": st.index, "direction": st.direction, "sample": s });
                    let _ = writeln!(lines, "{line}");
                }
            }
        }
    }
    if csv {
        t.text()
    } else {
        lines
    }
}

/// The heading of the live lines.
pub fn interval_header(streams: usize) -> String {
    let per = if streams > 1 { "   [stream:rate ...]" } else { "" };
    format!("{:>9}  {:>14}{per}\n", "time", "received")
}

/// One live line: the receivers' bytes in the interval that ended `t_ms`
/// after the start (per stream, when there are several), as a rate.
pub fn interval_line(
    interval_ms: u64,
    omit_ms: u64,
    repeat: u32,
    (run, t_ms): (u32, u64),
    rows: &[(u32, u64)],
    units: Units,
) -> String {
    let secs = interval_ms as f64 / 1000.0;
    let total: u64 = rows.iter().map(|r| r.1).sum();
    let per: Vec<String> = rows.iter().map(|(i, b)| format!("{i}:{}", units.rate(*b as f64 * 8.0 / secs))).collect();
    let omitted = if t_ms <= omit_ms { " (omitted)" } else { "" };
    let run = if repeat > 1 { format!("run {} ", run + 1) } else { String::new() };
    let per = if rows.len() > 1 { format!("   [{}]", per.join("  ")) } else { String::new() };
    format!("{run}{:>7.1} s  {:>14}{per}{omitted}\n", t_ms as f64 / 1000.0, units.rate(total as f64 * 8.0 / secs))
}

/// The streams of a stored run, one CSV row each.
pub fn csv(streams: &[StreamResult]) -> String {
    let mut t = Csv::new(&[
        "stream",
        "direction",
        "sent_bytes",
        "received_bytes",
        "throughput_bps",
        "retransmits",
        "limit",
        "verdict",
        "broken",
    ]);
    for s in streams {
        let limit = s.verdict.as_ref().and_then(|v| serde_json::to_value(v.limit).ok());
        t.row([
            s.index.to_string(),
            s.direction.clone(),
            s.sender.bytes.to_string(),
            s.receiver.bytes.to_string(),
            whole_cell(Some(s.throughput_bps)),
            s.retransmits.map(|r| r.to_string()).unwrap_or_default(),
            limit.and_then(|l| l.as_str().map(str::to_string)).unwrap_or_default(),
            s.verdict.as_ref().map(|v| v.text.clone()).unwrap_or_default(),
            s.broken.clone().unwrap_or_default(),
        ]);
    }
    t.text()
}

/// `stream --capture`: the capture's figures beside TCP_INFO's.
pub fn capture_lines(c: &gridperf_core::model::StreamCapture) -> String {
    use gridperf_core::units::fmt_bytes;
    let mut out = String::new();
    let dropped = if c.dropped > 0 {
        format!(" ({} dropped by the kernel before the capture read them: the figures below miss them)", c.dropped)
    } else {
        " (none dropped)".to_string()
    };
    let _ = writeln!(
        out,
        "
capture {}: {} packets{dropped}; what it tells, beside TCP_INFO:",
        c.file, c.packets
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2} ms"));
    for d in &c.streams {
        let who = d.stream.map_or(String::new(), |s| format!(" (stream {s})"));
        let _ = writeln!(out, "  {} -> {}{who}: {} acknowledged", d.from, d.to, fmt_bytes(d.bytes_acked));
        let _ =
            writeln!(out, "    retransmissions: capture {}, TCP_INFO {}", d.retransmits, opt(d.tcp_info_retransmits));
        let _ = writeln!(
            out,
            "    most in flight: capture {}, TCP_INFO {}",
            fmt_bytes(d.max_in_flight),
            d.tcp_info_max_in_flight.map_or("-".to_string(), fmt_bytes)
        );
        let _ = writeln!(
            out,
            "    RTT median: capture {}, TCP_INFO's smoothed {}",
            ms(d.rtt_median_ms),
            ms(d.tcp_info_srtt_median_ms)
        );
        if let Some(v) = &d.verdict {
            let _ = writeln!(out, "    from the capture: {v}");
        }
        if let Some(v) = &d.tcp_info_verdict {
            let _ = writeln!(out, "    from TCP_INFO:    {v}");
        }
    }
    out
}
