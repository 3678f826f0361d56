//! The lab: `lab up` and `lab status`, `lab profiles`, `lab calibrate`.

use super::fmt_signed_ns;
use crate::lab::calibrate::Point;
use crate::lab::emulator::Health;
use crate::lab::LabState;
use gridperf_core::units::{fmt_bps, fmt_ns};
use std::fmt::Write;

fn link_words(l: &gridperf_core::lab::emu::LinkConfig) -> String {
    use gridperf_core::lab::emu::{Jitter, Loss, QueueLimit};
    let mut w = Vec::new();
    w.push(match l.rate_bps {
        Some(r) => fmt_bps(r as f64),
        None => "no rate limit".into(),
    });
    w.push(format!("delay {}", fmt_ns(l.delay_ns as f64)));
    match &l.jitter {
        Jitter::None => {}
        Jitter::Uniform { j_ns } => w.push(format!("jitter +-{} uniform", fmt_ns(*j_ns as f64))),
        Jitter::Normal { sigma_ns } => w.push(format!("jitter sigma {} normal", fmt_ns(*sigma_ns as f64))),
        Jitter::Exponential { mean_ns } => w.push(format!("jitter mean {} exponential", fmt_ns(*mean_ns as f64))),
        Jitter::Table { q_ns } => {
            let q = |p| super::fmt_signed_ns(gridperf_core::lab::emu::table_quantile(q_ns, p));
            w.push(format!("jitter table p5 {} p50 {} p95 {}", q(0.05), q(0.5), q(0.95)))
        }
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
pub fn status(st: &LabState, health: Option<&Health>) -> String {
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
        for (k, (ab, ba)) in s.paths.iter().enumerate() {
            let _ = writeln!(out, "  path {} (a connection's 5-tuple picks its path):", k + 1);
            let _ = writeln!(out, "    a -> b: {}", link_words(ab));
            let _ = writeln!(out, "    b -> a: {}", link_words(ba));
        }
        for h in &st.hosts {
            if let Some(l) = s.access_of(&h.name) {
                let _ = writeln!(out, "  access {}: {}", h.name, link_words(&l));
            }
        }
        let (held, unbounded) = crate::lab::memory_of(s);
        let more = if unbounded.is_empty() {
            String::new()
        } else {
            format!(", more on {} (no rate or no queue limit: what the hosts send)", unbounded.join(", "))
        };
        let _ = writeln!(
            out,
            "  emulator memory: its delay lines and queues hold up to {} when full{more}; its read buffers take {} \
             from the start (64 at least, and enough for the fullest link's line and queue in super-packets, written before the \
             lab came up)",
            gridperf_core::units::fmt_size(held),
            gridperf_core::units::fmt_size(crate::lab::held_from_start(s))
        );
    }
    let _ = writeln!(out, "hosts:");
    for h in &st.hosts {
        let _ = writeln!(out, "  {:<4} {:<12} namespace {}", h.name, h.addr, h.netns);
    }
    if st.hosts.iter().any(|h| h.netns.starts_with("/proc/")) {
        let _ = writeln!(
            out,
            "  rootless: the emulator holds the namespaces, in a user namespace of this user's own; `gridperf lab exec` enters them"
        );
    }
    for (k, v) in &s.sysctls {
        let _ = writeln!(out, "  every host, as set at lab up: {k} = {v}");
    }
    if let Some(h) = health {
        let priority = match h.realtime {
            Some(true) => ", real-time (SCHED_FIFO)",
            Some(false) => ", at normal priority (SCHED_FIFO needs root: the lag figures below say what that costs)",
            None => "",
        };
        let _ = writeln!(out, "emulator, up {:.1} s{priority}:", h.uptime_s);
        for (dir, c) in ["a -> b", "b -> a"].iter().zip(&h.links) {
            let _ = writeln!(
                out,
                "  {dir}: {} packets in, {} delivered ({} bytes), {} lost by the model, {} dropped at the full queue, queue peak {} packets / {} bytes",
                c.arrived, c.delivered, c.delivered_bytes, c.lost, c.queue_full, c.max_queue_packets, c.max_queue_bytes
            );
        }
        for (k, p) in h.paths.iter().enumerate() {
            let _ = writeln!(
                out,
                "  path {}: a -> b {} in, {} lost, {} at the full queue; b -> a {} in, {} lost, {} at the full queue",
                k + 1,
                p[0].arrived,
                p[0].lost,
                p[0].queue_full,
                p[1].arrived,
                p[1].lost,
                p[1].queue_full
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
            "  worst lag behind schedule {}, late packets {}{}, stalls {}, drops the model did not decide {} (+{} at the TUN queues, +{} at the hosts' receiving CPUs), unroutable {}",
            fmt_ns(h.max_lag_ns as f64),
            h.late_packets,
            if h.paused_late_packets > 0 {
                format!(" (+{} that fell due while the whole lab was paused)", h.paused_late_packets)
            } else {
                String::new()
            },
            h.stalls,
            h.undecided_drops,
            h.tun_drops,
            h.host_rx_drops,
            h.unroutable
        );
        let [ab, ba] = &h.links;
        if ab.idle_held_ns + ab.starved_ns + ba.idle_held_ns + ba.starved_ns > 0 {
            let ms = |ns: u64| ns as f64 / 1e6;
            let _ = writeln!(
                out,
                "  the link idle through hold-ups a -> b {:.1} ms, b -> a {:.1} ms; while packets for it waited unread \
                 in a TUN queue a -> b {:.1} ms, b -> a {:.1} ms",
                ms(ab.idle_held_ns),
                ms(ba.idle_held_ns),
                ms(ab.starved_ns),
                ms(ba.starved_ns)
            );
        }
        if h.long_stalls > 0 {
            let _ = writeln!(
                out,
                "  held up {} ms in all; {} time(s) over 10 ms: {}",
                h.held_up_ns / 1_000_000,
                h.long_stalls,
                h.held_by.words()
            );
        }
        if let Some(w) = h.short_held.words() {
            let _ = writeln!(out, "  held up {w}");
        }
        if let (Some(p50), Some(p99)) = (h.lag_quantile_us(0.5), h.lag_quantile_us(0.99)) {
            let _ = writeln!(out, "  lag behind schedule: median under {p50} us, p99 under {p99} us");
        }
        let w = &h.queue_waits;
        if let (Some(p50), Some(p99)) = (w.quantile_us(0.5), w.quantile_us(0.99)) {
            let _ = writeln!(
                out,
                "  waits in the hosts' TUN queues before the emulator read them: median under {p50} us, p99 under {p99} us, worst {} us ({} of {} probes answered; over 1 ms: {} uncovered, {:.1} ms, and {} the links' queues covered, {:.1} ms)",
                w.max_ns / 1000,
                w.answered,
                w.sent,
                w.slow,
                w.slow_ns as f64 / 1e6,
                w.covered,
                w.covered_ns as f64 / 1e6
            );
        }
        match h.invalid_because() {
            Some(why) => {
                let _ = writeln!(out, "  INVALID: measurements across this lab cannot be trusted: {why}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "  valid: at most 1% of packets (or fewer than 10) over 1 ms behind schedule, the link idle for want of the emulator at most 1% of the time, the hosts' packets waiting over 1 ms in their TUN queues, where the links' queues did not cover the wait, at most 1% of it, no drops the model did not decide"
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
pub fn profiles(profiles: &[gridperf_core::lab::cfg::Profile]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<13}{:>14}{:>11}{:>16}{:>10}  source", "profile", "rate", "RTT", "queue", "loss");
    for p in profiles {
        let queue = match p.queue {
            gridperf_core::lab::cfg::QueueSpec::Unlimited => "-".to_string(),
            gridperf_core::lab::cfg::QueueSpec::Packets(n) => format!("{n} pkt"),
            gridperf_core::lab::cfg::QueueSpec::Bytes(b) => format!("{b} B"),
            gridperf_core::lab::cfg::QueueSpec::Bdp(x) => format!("{x} BDP"),
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

/// The delay table's largest miss over quantiles in [lo, hi).
fn worst_table_error(errors_ns: &[(f64, f64)], lo: f64, hi: f64) -> String {
    let e = errors_ns.iter().filter(|(q, _)| (lo..hi).contains(q)).map(|&(_, e)| e);
    e.max_by(|x, y| x.abs().total_cmp(&y.abs())).map(fmt_signed_ns).unwrap_or_else(|| "-".into())
}

/// `lab calibrate`: each point against docs/lab.md's targets.
pub fn calibration(points: &[Point]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>14}{:>9}{:>15}{:>15}{:>10}{:>15}{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}{:>10}{:>9}  verdict",
        "rate",
        "delay",
        "offered",
        "measured",
        "rate err",
        "TCP",
        "TCP diff",
        "delay err",
        "delay p99",
        "table err",
        "table p99",
        "loaded p99",
        "loaded max",
        "bound",
        "lag p99",
        "emu CPU"
    );
    for p in points {
        let worst = |lo: f64, hi: f64| worst_table_error(&p.table_errors_ns, lo, hi);
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
            "{:>14}{:>9}{:>15}{:>15}{:>9.2}%{:>15}{:>9.2}%{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}{:>10}{:>8.0}%  {verdict}",
            fmt_bps(p.rate_bps as f64),
            fmt_ns(p.delay_ns as f64),
            fmt_bps(p.offered_rate_bps),
            fmt_bps(p.measured_rate_bps),
            p.rate_error * 100.0,
            fmt_bps(p.tcp_rate_bps),
            p.tcp_rate_error * 100.0,
            fmt_signed_ns(p.delay_error_median_ns),
            fmt_signed_ns(p.delay_error_p99_ns),
            worst(0.0, 0.95),
            worst(0.95, 1.0),
            fmt_ns(p.loaded_rtt_p99_ns),
            fmt_ns(p.loaded_rtt_max_ns),
            fmt_ns(p.queue_bound_ns),
            p.lag_p99_us.map(|u| format!("<{u}us")).unwrap_or_default(),
            p.emulator_cpu_percent
        );
    }
    // the lines under the table, each of one point
    let at = |p: &Point| format!("{} x {}", fmt_bps(p.rate_bps as f64), fmt_ns(p.delay_ns as f64));
    for p in points.iter().filter(|p| p.tcp_window_limited > 0.05 && p.tcp_rate_error < -0.05) {
        let _ = writeln!(
            out,
            "{}: the TCP flow waited on a window {:.0}% of its measured time (the receiver's window at its end: {} KB, its threshold tcpi_rcv_ssthresh {} KB): a window, not the link, held it at {}",
            at(p),
            p.tcp_window_limited * 100.0,
            p.tcp_receive_window_bytes / 1024,
            p.tcp_receiver_threshold_bytes / 1024,
            fmt_bps(p.tcp_rate_bps)
        );
    }
    for p in points.iter().filter(|p| p.loaded_rtt_p99_ns > p.queue_bound_ns + 1e6) {
        let waits = match p.overload_queue_wait_p99_us {
            Some(us) => format!(
                "its hosts' packets waited in their TUN queues before the emulator read them under {} at p99 then (a wait the bound does not allow for)",
                fmt_ns(us as f64 * 1e3)
            ),
            None => "the emulator's probe of its hosts' TUN queues was not answered then".to_string(),
        };
        let _ = writeln!(
            out,
            "{}: with the queue full the probe's p99 was {} over its bound; {waits}",
            at(p),
            fmt_ns(p.loaded_rtt_p99_ns - p.queue_bound_ns)
        );
    }
    for p in points {
        if let Some(w) = &p.tcp_memory_pressure {
            let _ = writeln!(out, "{}: the TCP flow's {w}", at(p));
        }
    }
    for p in points {
        if let Some(r) = p.by_round_trip.as_ref().filter(|r| r.left_out > 0) {
            let worst = |lo: f64, hi: f64| worst_table_error(&r.table_errors_ns, lo, hi);
            let _ = writeln!(
                out,
                "{}: as a run judged round trip by round trip sees it ({} of {} round trips left out for crossing a moment the emulator was late): delay err {}, delay p99 {}, table err {}, table p99 {}",
                at(p),
                r.left_out,
                r.counted,
                fmt_signed_ns(r.delay_error_median_ns),
                fmt_signed_ns(r.delay_error_p99_ns),
                worst(0.0, 0.95),
                worst(0.95, 1.0)
            );
        }
    }
    for p in points.iter().filter(|p| !p.earlier_invalid.is_empty()) {
        let last = if p.invalid.is_some() { "INVALID again" } else { "valid" };
        let before: Vec<String> =
            p.earlier_invalid.iter().enumerate().map(|(i, w)| format!("try {} INVALID ({w})", i + 1)).collect();
        let _ = writeln!(out, "{}: {last} at try {}; before it: {}", at(p), p.tries, before.join("; "));
    }
    let _ = writeln!(
        out,
        "\noffered: the UDP load sent at 1.1 x the rate (IP bits per second) while the received rate was measured. TCP: a bulk TCP (CUBIC) flow's rate (IP bits per second: the data segments delivered, as the sender's TCP_INFO counts them with SACK, retransmissions included, x 1500 bytes), for information: TCP's own dynamics share in it. targets: rate error within 1% (the UDP flow); added delay error at most 0.1 ms at the median and 1 ms at p99 (the RTT of a probe sent every 1 ms at half load, less 2 x delay, against the same probe's on a zero-delay lab, median against median and p99 against p99); probe RTT with the queue full at most base + 2 x delay + queue/rate + two packet times, p99 within 1 ms of it; the delay table (an exponential's, mean 0.3 ms, drawn a -> b, probed from 16 sockets): its p10, p50 and p90 within 0.1 ms (table err: the worst), its p99 within 1 ms. lag p99: the emulator's own lateness behind its schedule; the rest of a delay error is the hosts' (their wake-ups on this machine)"
    );
    out
}

/// An estimate in a cell: its value and 95% interval in `fmt`'s unit,
/// "at least" for a lower bound, "not measured" for none.
pub fn shown(e: &gridperf_core::lab::clone::Estimate, fmt: &dyn Fn(f64) -> String) -> String {
    match (e.value, e.low, e.high) {
        (None, _, _) => "not measured".into(),
        (Some(v), Some(l), Some(h)) if l == h => fmt(v),
        (Some(v), Some(l), Some(h)) => format!("{} [{} .. {}]", fmt(v), fmt(l), fmt(h)),
        (Some(v), Some(_), None) => format!("at least {}", fmt(v)),
        (Some(v), _, _) => fmt(v),
    }
}

/// A clone's fitted fields, each with its two directions' estimates and its unit.
pub type CloneField<'a> =
    (&'static str, &'a gridperf_core::lab::clone::Estimate, &'a gridperf_core::lab::clone::Estimate, fn(f64) -> String);

/// The fields `lab clone` prints and the report tabulates, in order.
pub fn clone_fields(f: &gridperf_core::lab::clone::CloneFile) -> [CloneField<'_>; 7] {
    let (ab, ba) = (&f.profile.ab, &f.profile.ba);
    [
        ("rate", &ab.rate_bps, &ba.rate_bps, |v| fmt_bps(v)),
        ("one-way delay", &ab.delay_s, &ba.delay_s, |v| fmt_ns(v * 1e9)),
        ("jitter (sigma)", &ab.jitter_s, &ba.jitter_s, |v| fmt_ns(v * 1e9)),
        ("loss", &ab.loss, &ba.loss, |v| format!("{:.4}%", v * 100.0)),
        ("loss burst", &ab.burst, &ba.burst, |v| format!("{v:.1} pkt")),
        ("queue", &ab.queue_bytes, &ba.queue_bytes, |v| gridperf_core::units::fmt_bytes(v.max(0.0).round() as u64)),
        ("MTU", &ab.mtu, &ba.mtu, |v| format!("{v:.0}")),
    ]
}

/// The cells of `--verify`'s rows: what, the real path's figure, the
/// clone's, and the clone's error.
pub fn verify_cells(rows: &[gridperf_core::lab::clone::Compared]) -> Vec<[String; 4]> {
    let fmt = |unit: &str, v: Option<f64>| match (unit, v) {
        (_, None) => "-".to_string(),
        ("bps", Some(v)) => fmt_bps(v),
        ("s", Some(v)) => fmt_ns(v * 1e9),
        ("fraction", Some(v)) => format!("{:.4}%", v * 100.0),
        ("bytes", Some(v)) => gridperf_core::units::fmt_bytes(v.round() as u64),
        (_, Some(v)) => format!("{v}"),
    };
    rows.iter()
        .map(|r| {
            [
                r.what.clone(),
                fmt(&r.unit, r.real),
                fmt(&r.unit, r.clone),
                r.error.map_or("-".into(), |e| format!("{:+.1}%", e * 100.0)),
            ]
        })
        .collect()
}

/// `lab clone`: each field of each direction with its 95% interval, then
/// how each was found and what limits it.
pub fn clone(f: &gridperf_core::lab::clone::CloneFile) -> String {
    let mut out = String::new();
    match f.seconds {
        Some(s) => writeln!(out, "path to {} ({}), cloned in {s:.0} s", f.source.host, f.source.date),
        None => writeln!(out, "path to {} ({}), from {}", f.source.host, f.source.date, f.source.from),
    }
    .ok();
    let (ab, ba) = (&f.profile.ab, &f.profile.ba);
    let rows = clone_fields(f);
    let cells: Vec<(String, String, String)> =
        rows.iter().map(|(n, a, b, fmt)| (n.to_string(), shown(a, fmt), shown(b, fmt))).collect();
    let w0 = cells.iter().map(|c| c.0.len()).max().unwrap_or(0).max(5);
    let w1 = cells.iter().map(|c| c.1.len()).max().unwrap_or(0).max(6);
    let _ = writeln!(out, "{:<w0$}  {:<w1$}  b -> a", "", "a -> b");
    for (n, a, b) in &cells {
        let _ = writeln!(out, "{n:<w0$}  {a:<w1$}  {b}");
    }
    let shape = |d: &gridperf_core::lab::clone::Direction| {
        let s = match d.jitter_shape {
            gridperf_core::lab::clone::JitterShape::None => "no jitter",
            gridperf_core::lab::clone::JitterShape::Normal => "normal",
            gridperf_core::lab::clone::JitterShape::RightSkewed => "right-skewed",
        };
        format!("{s}{}", if d.reorders { ", reorders" } else { ", in order" })
    };
    let _ = writeln!(out, "{:<w0$}  {:<w1$}  {}", "shape", shape(ab), shape(ba));
    let _ = writeln!(out, "(95% intervals in brackets)");
    let mut methods: Vec<String> = Vec::new();
    for (n, a, b, _) in &rows {
        for (dir, e) in [("a -> b", a), ("b -> a", b)] {
            if !e.method.is_empty() && !methods.iter().any(|m| m.ends_with(&e.method)) {
                methods.push(format!("{n}: {}", e.method));
            }
            if let Some(note) = &e.note {
                methods.push(format!("{n} {dir}: {note}"));
            }
        }
    }
    for m in methods.iter().chain(&f.notes) {
        let _ = writeln!(out, "  {m}");
    }
    if !f.verify.is_empty() {
        let _ = writeln!(out, "\nthe real path and its clone, measured the same way:");
        out.push_str(&clone_verify(&f.verify));
    }
    out
}

/// `lab clone --verify`: the real path beside its clone.
pub fn clone_verify(rows: &[gridperf_core::lab::clone::Compared]) -> String {
    let mut out = String::new();
    let cells = verify_cells(rows);
    let head = ["", "real path", "clone", "error"].map(String::from);
    let w: Vec<usize> =
        (0..4).map(|k| cells.iter().map(|c| c[k].len()).chain([head[k].len()]).max().unwrap_or(0)).collect();
    for c in std::iter::once(&head).chain(&cells) {
        let _ = writeln!(
            out,
            "{:<a$}  {:>b$}  {:>c$}  {:>d$}",
            c[0],
            c[1],
            c[2],
            c[3],
            a = w[0],
            b = w[1],
            c = w[2],
            d = w[3]
        );
    }
    out
}

/// `lab status --since FILE`: the emulator's verdict over the span, by the
/// rule a run across the lab is judged by.
pub fn verdict(r: &gridperf_core::model::LabRecord) -> String {
    match &r.invalid {
        Some(why) => format!(
            "lab {}: INVALID since the earlier status: {why}\n  {}\n",
            r.name,
            gridperf_core::analysis::stats::lab_invalid_advice(r.cause)
        ),
        None => match &r.note {
            Some(note) => format!("lab {}: valid since the earlier status; {note}\n", r.name),
            None => format!("lab {}: valid since the earlier status: the emulator kept up\n", r.name),
        },
    }
}
