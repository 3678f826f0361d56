//! What the binary prints: readable tables, CSV, JSON. Libraries return
//! values; only this module and main turn them into text.

use gridperf_core::model::{EndInfo, Environment, RttReport, Settings, SocketInfo, TransferReport};
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns};
use std::fmt::Write;

fn placement(s: &Settings) -> String {
    let cpu = |c: Option<usize>| c.map(|c| format!("CPU {c}")).unwrap_or_else(|| "unpinned".into());
    format!("client {}, agent {}", cpu(s.client_cpu), cpu(s.server_cpu))
}

fn socket_line(who: &str, s: &SocketInfo) -> String {
    let mut parts = Vec::new();
    if let Some(m) = s.mss {
        parts.push(format!("MSS {m}"));
    }
    if let Some(m) = s.path_mtu {
        parts.push(format!("path MTU {m}"));
    }
    if let Some(c) = &s.congestion {
        parts.push(format!("cc {c}"));
    }
    if let Some(n) = s.nodelay {
        parts.push(format!("TCP_NODELAY {}", if n { "on" } else { "off" }));
    }
    let buf = |req: Option<u64>, got: Option<u64>| match (req, got) {
        (Some(r), Some(g)) => format!("{g} (asked {r})"),
        (None, Some(g)) => format!("{g}"),
        _ => "?".into(),
    };
    parts.push(format!("sndbuf {}", buf(s.sndbuf_requested, s.sndbuf_granted)));
    parts.push(format!("rcvbuf {}", buf(s.rcvbuf_requested, s.rcvbuf_granted)));
    let proto = s.proto.map(|p| p.name()).unwrap_or("?");
    format!("  {proto:<8} {who:<6} {}", parts.join(", "))
}

fn header(out: &mut String, title: &str, s: &Settings, env: &Environment) {
    let _ = writeln!(out, "{title}");
    let nagle = if s.nodelay { "TCP_NODELAY on (Nagle off)" } else { "TCP_NODELAY off (Nagle on)" };
    let mode = if s.busy_poll { "busy-poll" } else { "blocking" };
    let writes = if s.writes_per_message == 1 {
        "1 send per message".to_string()
    } else {
        format!("{} sends per message", s.writes_per_message)
    };
    let _ = writeln!(out, "{nagle} · {writes} · {mode} · {} · timeout {}", placement(s), fmt_ns(s.timeout_ns as f64));
    for n in &env.notes {
        let _ = writeln!(out, "{n}");
    }
    if let Some(lab) = &env.lab {
        let _ = writeln!(out, "across lab {}: {}", lab.name, lab.description);
        if let Some(why) = &lab.invalid {
            let _ = writeln!(out, "INVALID: the emulator did not keep up during this run: {why}");
        }
    }
    let sockets = |who: &str, e: &EndInfo, out: &mut String| {
        for sock in &e.sockets {
            let _ = writeln!(out, "{}", socket_line(who, sock));
        }
    };
    sockets("client", &env.client, out);
    if let Some(server) = &env.server {
        sockets("agent", server, out);
    }
}

/// The rtt table: one row per point, times in units that fit.
pub fn rtt_table(r: &RttReport) -> String {
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
    let _ = writeln!(
        out,
        "\n{:<9}{:>9}{:>9}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "proto", "size", "count", "lost", "min", "q1", "median", "q3", "p99", "max", "mean", "stddev"
    );
    for p in &r.points {
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

pub fn rtt_csv(r: &RttReport, samples: bool) -> String {
    let mut out = String::new();
    if samples {
        out.push_str("proto,size_bytes,index,rtt_ns\n");
        for p in &r.points {
            for (i, ns) in p.samples_ns.iter().flatten().enumerate() {
                let _ = writeln!(out, "{},{},{i},{ns}", p.proto.name(), p.size_bytes);
            }
        }
        return out;
    }
    out.push_str(
        "proto,size_bytes,count,warmup,sent,lost,late,min_ns,q1_ns,median_ns,q3_ns,p99_ns,max_ns,mean_ns,stddev_ns\n",
    );
    for p in &r.points {
        let _ = write!(out, "{},{},", p.proto.name(), p.size_bytes);
        match &p.summary {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    m.count,
                    p.warmup,
                    p.sent,
                    p.lost,
                    p.late,
                    m.min_ns,
                    m.q1_ns,
                    m.median_ns,
                    m.q3_ns,
                    m.p99_ns,
                    m.max_ns,
                    m.mean_ns,
                    m.stddev_ns
                );
            }
            None => {
                let _ = writeln!(out, "0,{},{},{},{},,,,,,,,", p.warmup, p.sent, p.lost, p.late);
            }
        }
    }
    out
}

pub fn transfer_table(r: &TransferReport) -> String {
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
    let _ = writeln!(
        out,
        "\n{:<9}{:>9}{:>10}{:>6}{:>11}{:>11}{:>11}{:>11}{:>16}",
        "proto", "size", "messages", "lost", "min", "median", "max", "stddev", "rate (median)"
    );
    for p in &r.points {
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
    let _ = writeln!(out, "\nrate = payload bytes sent one way per run / run time (each byte also came back)");
    out
}

pub fn transfer_csv(r: &TransferReport) -> String {
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

fn link_words(l: &gridperf_core::emu::LinkConfig) -> String {
    use gridperf_core::emu::{Jitter, Loss, QueueLimit};
    let mut w = Vec::new();
    w.push(match l.rate_bps {
        Some(r) => fmt_bps(r as f64),
        None => "no rate limit".into(),
    });
    w.push(format!("delay {}", fmt_ns(l.delay_ns as f64)));
    match l.jitter {
        Jitter::None => {}
        Jitter::Uniform { j_ns } => w.push(format!("jitter +-{} uniform", fmt_ns(j_ns as f64))),
        Jitter::Normal { sigma_ns } => w.push(format!("jitter sigma {} normal", fmt_ns(sigma_ns as f64))),
    }
    if !matches!(l.jitter, Jitter::None) {
        w.push(if l.reorder { "reordering".into() } else { "in order".into() });
    }
    w.push(match l.queue {
        QueueLimit::Unlimited => "queue unlimited".into(),
        QueueLimit::Packets(n) => format!("queue {n} packets"),
        QueueLimit::Bytes(b) => format!("queue {b} bytes"),
    });
    match l.loss {
        Loss::None => {}
        Loss::Random { p } => w.push(format!("loss {:.4}%", p * 100.0)),
        ge @ Loss::GilbertElliott { p_bg, .. } => {
            w.push(format!("loss {:.4}% in bursts of {:.1} packets", ge.mean_rate() * 100.0, 1.0 / p_bg))
        }
    }
    w.join(", ")
}

/// `lab up` and `lab status`.
pub fn lab_status(st: &crate::lab::LabState, health: Option<&crate::lab::emulator::Health>) -> String {
    let mut out = String::new();
    let s = &st.spec;
    if s.loopback {
        let mtu = if s.mtu == 0 { "lo's own MTU".to_string() } else { format!("lo MTU {}", s.mtu) };
        let _ = writeln!(
            out,
            "lab {}: loopback: hosts a and b share one private namespace over lo ({mtu}); no emulated link (pid {})",
            s.name, st.pid
        );
    } else {
        let _ = writeln!(out, "lab {}: {} (emulator pid {}, MTU {})", s.name, s.description, st.pid, s.mtu);
        let _ = writeln!(out, "  a -> b: {}", link_words(&s.ab));
        let _ = writeln!(out, "  b -> a: {}", link_words(&s.ba));
        for h in &st.hosts {
            if let Some(l) = s.access_of(&h.name) {
                let _ = writeln!(out, "  access {}: {}", h.name, link_words(&l));
            }
        }
    }
    let _ = writeln!(out, "hosts:");
    for h in &st.hosts {
        let _ = writeln!(out, "  {:<4} {:<12} namespace {}", h.name, h.addr, h.netns);
    }
    for (k, v) in &s.sysctls {
        let _ = writeln!(out, "  every host, as set at lab up: {k} = {v}");
    }
    if let Some(h) = health {
        let _ = writeln!(out, "emulator, up {:.1} s:", h.uptime_s);
        for (dir, c) in ["a -> b", "b -> a"].iter().zip(&h.links) {
            let _ = writeln!(
                out,
                "  {dir}: {} packets in, {} delivered ({} bytes), {} lost by the model, {} dropped at the full queue, queue peak {} packets / {} bytes",
                c.arrived, c.delivered, c.delivered_bytes, c.lost, c.queue_full, c.max_queue_packets, c.max_queue_bytes
            );
        }
        for a in &h.access {
            let _ = writeln!(
                out,
                "  access {}: up {} in, {} lost, {} at the full queue; down {} in, {} lost, {} at the full queue",
                a.host, a.up.arrived, a.up.lost, a.up.queue_full, a.down.arrived, a.down.lost, a.down.queue_full
            );
        }
        let _ = writeln!(
            out,
            "  worst lag behind schedule {}, late packets {}, stalls {}, drops the model did not decide {} (+{} at the TUN queues), unroutable {}",
            fmt_ns(h.max_lag_ns as f64),
            h.late_packets,
            h.stalls,
            h.undecided_drops,
            h.tun_drops,
            h.unroutable
        );
        if let (Some(p50), Some(p99)) = (h.lag_quantile_us(0.5), h.lag_quantile_us(0.99)) {
            let _ = writeln!(out, "  lag behind schedule: median under {p50} us, p99 under {p99} us");
        }
        match h.invalid_because() {
            Some(why) => {
                let _ = writeln!(out, "  INVALID: measurements across this lab cannot be trusted: {why}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "  valid: at most 1% of packets (or fewer than 10) over 1 ms behind schedule, none over 10 ms, no drops the model did not decide"
                );
            }
        }
    }
    let first = st.hosts.first().map(|h| h.name.as_str()).unwrap_or("a");
    let other = st.hosts.iter().find(|h| h.side != st.hosts[0].side).map(|h| h.addr.to_string()).unwrap_or_default();
    let _ = writeln!(out, "try: gridperf lab exec {first} -- gridperf rtt {other}   (start `gridperf serve` on the other host first: gridperf lab exec b -- gridperf serve)");
    out
}

/// `lab profiles`.
pub fn lab_profiles(profiles: &[gridperf_core::labcfg::Profile]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<13}{:>14}{:>11}{:>16}{:>10}  source", "profile", "rate", "RTT", "queue", "loss");
    for p in profiles {
        let queue = match p.queue {
            gridperf_core::labcfg::QueueSpec::Unlimited => "-".to_string(),
            gridperf_core::labcfg::QueueSpec::Packets(n) => format!("{n} pkt"),
            gridperf_core::labcfg::QueueSpec::Bytes(b) => format!("{b} B"),
            gridperf_core::labcfg::QueueSpec::Bdp(x) => format!("{x} BDP"),
        };
        let _ = writeln!(
            out,
            "{:<13}{:>14}{:>11}{:>16}{:>9.4}%  {}",
            p.name,
            p.rate_bps.map(|r| fmt_bps(r as f64)).unwrap_or_else(|| "-".into()),
            if p.rtt_ns == 0 { "-".into() } else { fmt_ns(p.rtt_ns as f64) },
            queue,
            p.loss * 100.0,
            p.source
        );
        if !p.assumptions.is_empty() {
            let _ = writeln!(out, "{:13}assumed: {}", "", p.assumptions);
        }
    }
    out
}

/// `lab calibrate`: each point against DESIGN.md's targets.
pub fn calibration(points: &[crate::lab::calibrate::Point]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>14}{:>9}{:>15}{:>15}{:>10}{:>15}{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>10}{:>9}  verdict",
        "rate",
        "delay",
        "offered",
        "measured",
        "rate err",
        "TCP",
        "TCP diff",
        "delay err",
        "delay p99",
        "loaded p99",
        "loaded max",
        "bound",
        "lag p99",
        "emu CPU"
    );
    for p in points {
        let mut verdict = match (&p.invalid, p.meets_targets()) {
            (Some(why), _) => format!("INVALID: {why}"),
            (None, true) => "meets the targets".to_string(),
            (None, false) => "misses a target".to_string(),
        };
        if p.load_short() {
            verdict.push_str("; the load generator did not overload the link, so the rate was not tested");
        }
        let _ = writeln!(
            out,
            "{:>14}{:>9}{:>15}{:>15}{:>9.2}%{:>15}{:>9.2}%{:>12}{:>12}{:>12}{:>12}{:>12}{:>10}{:>8.0}%  {verdict}",
            fmt_bps(p.rate_bps as f64),
            fmt_ns(p.delay_ns as f64),
            fmt_bps(p.offered_rate_bps),
            fmt_bps(p.measured_rate_bps),
            p.rate_error * 100.0,
            fmt_bps(p.tcp_rate_bps),
            p.tcp_rate_error * 100.0,
            fmt_signed_ns(p.delay_error_median_ns),
            fmt_signed_ns(p.delay_error_p99_ns),
            fmt_ns(p.loaded_rtt_p99_ns),
            fmt_ns(p.loaded_rtt_max_ns),
            fmt_ns(p.queue_bound_ns),
            p.lag_p99_us.map(|u| format!("<{u}us")).unwrap_or_default(),
            p.emulator_cpu_percent
        );
    }
    let _ = writeln!(
        out,
        "\noffered: the UDP load sent at 1.1 x the rate (IP bits per second) while the received rate was measured. TCP: a bulk TCP (CUBIC) flow's rate (IP bits per second: the data segments delivered, as the sender's TCP_INFO counts them with SACK, retransmissions included, x 1500 bytes), for information: TCP's own dynamics share in it. targets: rate error within 1% (the UDP flow); added delay error at most 0.1 ms at the median and 1 ms at p99 (probe RTT at half load minus the same probe on a zero-delay lab minus 2 x delay); probe RTT with the queue full at most base + 2 x delay + queue/rate + two packet times, p99 within 1 ms of it. lag p99: the emulator's own lateness behind its schedule; the rest of a delay error is the hosts' (their wake-ups on this machine)"
    );
    out
}

fn fmt_signed_ns(ns: f64) -> String {
    if ns < 0.0 {
        format!("-{}", fmt_ns(-ns))
    } else {
        format!("+{}", fmt_ns(ns))
    }
}

/// Decimal bytes with 3 significant figures (1.23 GB), as throughput tools print volumes.
fn fmt_volume(n: u64) -> String {
    let n = n as f64;
    let (v, unit) = if n >= 1e9 {
        (n / 1e9, "GB")
    } else if n >= 1e6 {
        (n / 1e6, "MB")
    } else if n >= 1e3 {
        (n / 1e3, "kB")
    } else {
        return format!("{n} B");
    };
    format!("{v:.3} {unit}")
}

/// `gridperf stream`'s table: the settings, each run's streams with both
/// ends' figures and the verdict, the totals and fairness, and with
/// --repeat the runs' spread.
pub fn stream_table(r: &gridperf_core::model::StreamReport, best: bool) -> String {
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
        if s.proto == "udp" {
            let _ = writeln!(
                out,
                "{:>6} {:>5} {:>11} {:>14} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10}",
                "stream", "dir", "received", "throughput", "sent", "lost", "reord", "dup", "jitter", "send errs"
            );
            for st in &run.streams {
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
                    fmt_bps(st.throughput_bps),
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
            for st in &run.streams {
                let cwnd = st.timeline.iter().map(|t| t.cwnd).max();
                let min_rtt = st.timeline.iter().map(|t| t.min_rtt_us).filter(|&v| v > 0).min();
                let verdict = st.verdict.as_ref().map(|v| v.text.clone()).unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    out,
                    "{:>6} {:>5} {:>11} {:>14} {:>8} {:>9} {:>9}  {}{}",
                    st.index,
                    st.direction,
                    fmt_volume(st.receiver.bytes),
                    fmt_bps(st.throughput_bps),
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
        let mut total = Vec::new();
        if let Some(u) = run.up_bps {
            total.push(format!("up {}", fmt_bps(u)));
        }
        if let Some(d) = run.down_bps {
            total.push(format!("down {}", fmt_bps(d)));
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
        let list: Vec<String> = r.totals_bps.iter().map(|t| fmt_bps(*t)).collect();
        let _ = writeln!(out, "\nruns: {}", list.join(", "));
        if best {
            let _ = writeln!(out, "best: {}", r.best_bps.map(fmt_bps).unwrap_or_else(|| "-".into()));
        } else {
            let _ = writeln!(
                out,
                "median: {} · spread (max - min) / median: {}",
                r.median_bps.map(fmt_bps).unwrap_or_else(|| "-".into()),
                r.spread.map(|s| format!("{:.1}%", s * 100.0)).unwrap_or_else(|| "-".into())
            );
        }
    }
    out
}

/// Every stream's TCP_INFO timeline (the sender's), as CSV or JSON lines.
pub fn stream_timeline(r: &gridperf_core::model::StreamReport, csv: bool) -> String {
    let mut out = String::new();
    if csv {
        out.push_str("run,stream,direction,t_s,cwnd,ssthresh,srtt_ms,rttvar_ms,min_rtt_ms,unacked,bytes_in_flight,total_retrans,delivery_rate_bps,pacing_rate_bps,busy_ms,rwnd_limited_ms,sndbuf_limited_ms,snd_wnd,bytes_acked\n");
    }
    for (k, run) in r.runs.iter().enumerate() {
        for st in &run.streams {
            for t in &st.timeline {
                if csv {
                    let _ = writeln!(
                        out,
                        "{},{},{},{:.3},{},{},{:.3},{:.3},{:.3},{},{},{},{},{},{:.3},{:.3},{:.3},{},{}",
                        k + 1,
                        st.index,
                        st.direction,
                        t.t_ns as f64 / 1e9,
                        t.cwnd,
                        t.ssthresh,
                        t.srtt_us as f64 / 1e3,
                        t.rttvar_us as f64 / 1e3,
                        t.min_rtt_us as f64 / 1e3,
                        t.unacked,
                        t.unacked as u64 * t.mss as u64,
                        t.total_retrans,
                        t.delivery_rate * 8,
                        t.pacing_rate.saturating_mul(8),
                        t.busy_us as f64 / 1e3,
                        t.rwnd_limited_us as f64 / 1e3,
                        t.sndbuf_limited_us as f64 / 1e3,
                        t.snd_wnd,
                        t.bytes_acked
                    );
                } else {
                    let line =
                        serde_json::json!({ "run": k + 1, "stream": st.index, "direction": st.direction, "sample": t });
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    }
    out
}

/// Unix seconds as "YYYY-MM-DD HH:MM:SS" (UTC).
pub fn utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn opt_ns(v: Option<f64>) -> String {
    v.map(fmt_ns).unwrap_or_else(|| "-".into())
}

/// `gridperf runs show`.
pub fn run_show(r: &crate::store::RunRow, points: &[crate::store::PointRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} ({}{}) on {}: {}, started {}, {}",
        r.id,
        r.kind,
        r.survey_id.map(|s| format!(", survey {s}")).unwrap_or_default(),
        r.network,
        r.status,
        utc(r.started),
        r.invalid.as_ref().map(|w| format!("INVALID: {w}")).unwrap_or_else(|| "valid".into())
    );
    let _ = writeln!(out, "command: {}\ngridperf: {}", r.command_line, r.version);
    let _ = writeln!(out, "\n{:<9} {:>9} {:>11} {:>11} {:>11}", "proto", "size", "q1", "median", "q3");
    for p in points {
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>11} {:>11} {:>11}",
            p.proto,
            fmt_bytes(p.size),
            opt_ns(p.q1_ns),
            opt_ns(p.median_ns),
            opt_ns(p.q3_ns)
        );
    }
    out
}

/// `gridperf runs compare A B`: the points both have, with the change.
pub fn run_compare(
    ra: &crate::store::RunRow,
    a: &[crate::store::PointRow],
    rb: &crate::store::RunRow,
    b: &[crate::store::PointRow],
) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "run {} ({} on {}) -> run {} ({} on {})", ra.id, ra.kind, ra.network, rb.id, rb.kind, rb.network);
    let _ = writeln!(
        out,
        "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "proto", "size", "median A", "median B", "change", "q1 chg", "q3 chg"
    );
    let pct = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if x > 0.0 => format!("{:+.1}%", (y / x - 1.0) * 100.0),
        _ => "-".into(),
    };
    let mut only = 0;
    for p in a {
        let Some(q) = b.iter().find(|q| q.proto == p.proto && q.size == p.size && q.setting == p.setting) else {
            only += 1;
            continue;
        };
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}",
            p.proto,
            fmt_bytes(p.size),
            opt_ns(p.median_ns),
            opt_ns(q.median_ns),
            pct(p.median_ns, q.median_ns),
            pct(p.q1_ns, q.q1_ns),
            pct(p.q3_ns, q.q3_ns)
        );
    }
    let only_b = b
        .iter()
        .filter(|q| !a.iter().any(|p| p.proto == q.proto && p.size == q.size && p.setting == q.setting))
        .count();
    if only + only_b > 0 {
        let _ = writeln!(out, "({only} points only in run {}, {only_b} only in run {})", ra.id, rb.id);
    }
    out
}

/// `gridperf runs export --format csv`.
pub fn points_csv(points: &[crate::store::PointRow]) -> String {
    let mut out = String::from("proto,size_bytes,setting,q1_ns,median_ns,q3_ns\n");
    let f = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_default();
    for p in points {
        let _ = writeln!(out, "{},{},{},{},{},{}", p.proto, p.size, p.setting, f(p.q1_ns), f(p.median_ns), f(p.q3_ns));
    }
    out
}

/// `gridperf fanout`'s table, and the evidence of each deadlock.
pub fn fanout_table(
    points: &[crate::engines::fanout::FanoutPoint],
    o: &crate::engines::fanout::FanoutOptions,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gridperf fanout {}: MAX {} repetitions per point, watchdog {}, buffers {}",
        match &o.place {
            Some(p) =>
                format!("across the lab: server in {}, consumers in {}", p.server_netns, p.consumer_netns.join(", ")),
            None if !o.agents.is_empty() => format!(
                "to consumers on the agents {}",
                o.agents.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
            ),
            None => "on loopback".into(),
        },
        o.repeat,
        fmt_ns(o.watchdog.as_nanos() as f64),
        o.buffer.map(|b| format!("-w {}", fmt_bytes(b))).unwrap_or_else(|| "autotuned".into())
    );
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
    out
}

/// `gridperf fanout --csv`.
pub fn fanout_csv(points: &[crate::engines::fanout::FanoutPoint]) -> String {
    let mut out = String::from("variant,nodes,size,messages,repetitions,bandwidth_bps,median_rep_ns,deadlock,error\n");
    for p in points {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            p.variant.name(),
            p.nodes,
            p.size,
            p.messages,
            p.repetitions,
            p.bandwidth_bps.map(|b| format!("{b:.0}")).unwrap_or_default(),
            p.time.as_ref().map(|t| format!("{:.0}", t.median_ns)).unwrap_or_default(),
            p.deadlock.is_some(),
            p.error.as_deref().unwrap_or("").replace(',', ";")
        );
    }
    out
}

/// `gridperf tune`'s table, the verdict and the lines to apply.
pub fn tune_text(v: &crate::tune::TuneView) -> String {
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
    let caps = |out: &mut String, ds: &[crate::tune::DirectionCap]| {
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
