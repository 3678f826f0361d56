//! The stored runs: `runs list`, `runs show` (the run, its environment,
//! and its points in its own measurement's table), `runs compare` and
//! `runs export --format csv`. A run's points are read back into their
//! measurement's result types, so a stored stream or fanout run reads as
//! the command printed it.

use super::{environment, opt_ns, utc};
use crate::store::{PointRow, RunRow};
use gridperf_core::model::{
    CopyFileResult, FanoutPoint, Measure, RttPoint, StreamResult, TraceDirection, TransferPoint,
};
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns, fmt_size};
use serde::de::DeserializeOwned;
use std::fmt::Write;

/// The points' figures, read back as `T`; None when any does not read
/// (written by another version, or by another kind of run).
fn figures<T: DeserializeOwned>(points: &[PointRow]) -> Option<Vec<T>> {
    points.iter().map(|p| serde_json::from_value(p.figures.clone()).ok()).collect()
}

/// "yes", or why the run does not stand.
fn validity(r: &RunRow) -> String {
    match (&r.invalid, r.status.as_str()) {
        (Some(w), _) => format!("INVALID: {w}"),
        (None, "failed") => "INVALID: failed".into(),
        _ => "valid".into(),
    }
}

/// The points of a run that are of one proto, read back as `T` (a copy's
/// files, leaving its streams and events aside).
fn figures_of<T: DeserializeOwned>(points: &[PointRow], proto: &str) -> Vec<T> {
    points.iter().filter(|p| p.proto == proto).filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect()
}

/// A run's headline figure, in a few words: the range of its median RTTs,
/// its rate, what a copy moved; "-" when its points say nothing.
pub fn headline(r: &RunRow, points: &[PointRow]) -> String {
    let range = |mut v: Vec<f64>, f: &dyn Fn(f64) -> String| -> Option<String> {
        v.retain(|x| x.is_finite());
        v.sort_by(f64::total_cmp);
        let (lo, hi) = (v.first()?, v.last()?);
        Some(if (hi - lo).abs() < f64::EPSILON { f(*lo) } else { format!("{} .. {}", f(*lo), f(*hi)) })
    };
    let words = match r.measure() {
        Some(Measure::Rtt) => range(points.iter().filter_map(|p| p.median_ns).collect(), &|x| fmt_ns(x))
            .map(|t| format!("RTT {t} ({} points)", points.len())),
        Some(Measure::Transfer) => figures::<TransferPoint>(points)
            .and_then(|t| range(t.iter().filter_map(|p| p.rate_bps).collect(), &|x| fmt_bps(x))),
        Some(Measure::Stream) => figures::<StreamResult>(points).map(|s| {
            let bps: f64 = s.iter().map(|x| x.throughput_bps).sum();
            let broken = s.iter().filter(|x| x.broken.is_some()).count();
            let broken = if broken > 0 { format!(", {broken} broken") } else { String::new() };
            let n = s.len();
            format!("{} ({n} stream{}{broken})", fmt_bps(bps), if n == 1 { "" } else { "s" })
        }),
        Some(Measure::Fanout) => figures::<FanoutPoint>(points)
            .and_then(|f| range(f.iter().filter_map(|p| p.bandwidth_bps).collect(), &|x| fmt_bps(x))),
        Some(Measure::Copy) => {
            let files: Vec<CopyFileResult> = figures_of(points, "copy");
            (!files.is_empty()).then(|| {
                let moved: u64 = files.iter().map(|f| f.moved).sum();
                let bad = files.iter().filter(|f| f.error.is_some()).count();
                let bad = if bad > 0 { format!(", {bad} not in place") } else { String::new() };
                format!("{} files, {} moved{bad}", files.len(), fmt_size(moved))
            })
        }
        Some(Measure::Clone) => {
            let f = figures_of::<gridperf_core::lab::clone::CloneFile>(points, "clone-profile").into_iter().next();
            let verify: Vec<gridperf_core::lab::clone::Compared> = figures_of(points, "clone-verify");
            f.map(|f| {
                let rate = |d: &gridperf_core::lab::clone::Direction| d.rate_bps.value.map_or("-".into(), fmt_bps);
                let rtt = f.profile.ab.delay_s.value.zip(f.profile.ba.delay_s.value).map(|(a, b)| (a + b) * 1e9);
                let mut w = format!(
                    "a -> b {}, b -> a {}, RTT {}",
                    rate(&f.profile.ab),
                    rate(&f.profile.ba),
                    rtt.map_or("-".into(), fmt_ns)
                );
                let worst = verify
                    .iter()
                    .filter_map(|c| c.error)
                    .map(f64::abs)
                    .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
                if let Some(e) = worst {
                    w.push_str(&format!("; verified, the clone's largest error {:.1}%", e * 100.0));
                }
                w
            })
        }
        Some(Measure::Trace) => {
            let dirs: Vec<TraceDirection> = figures_of(points, "trace-direction");
            dirs.iter()
                .map(|d| d.throughput_bps)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
                .map(|best| format!("{} directions, the fastest {}", dirs.len(), fmt_bps(best)))
        }
        None => None,
    };
    words.unwrap_or_else(|| "-".into())
}

/// The end of `s` in `width` characters (a path's end says most of it).
fn tail(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    format!("...{}", s.chars().skip(n - width + 3).collect::<String>())
}

/// The command a run came from, shortened to `width` characters for a list.
fn short_command(r: &RunRow, width: usize) -> String {
    let words: Vec<&str> = r.command_line.split_whitespace().skip(1).collect();
    let mut c = words.join(" ");
    if c.chars().count() > width {
        c = c.chars().take(width.saturating_sub(3)).collect::<String>() + "...";
    }
    c
}

/// `gridperf runs list`: each run with where it went (the network, and the
/// target as it was named), its validity, its headline figure and the command.
pub fn list(runs: &[(RunRow, Vec<PointRow>)]) -> String {
    let mut out = format!(
        "{:>5} {:>6} {:<9} {:<14} {:<18} {:<20} {:<7} {:<36} command\n",
        "run", "survey", "kind", "network", "target", "started (UTC)", "valid", "headline"
    );
    for (r, points) in runs {
        let _ = writeln!(
            out,
            "{:>5} {:>6} {:<9} {:<14} {:<18} {:<20} {:<7} {:<36} {}",
            r.id,
            r.survey_id.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
            r.kind,
            r.network,
            tail(&r.target, 18),
            utc(r.started),
            if r.valid() { "yes" } else { "INVALID" },
            headline(r, points),
            short_command(r, 60)
        );
    }
    out
}

/// `gridperf runs show`: the run, the conditions it was measured under,
/// and its points as its own command's table shows them.
pub fn show(r: &RunRow, points: &[PointRow]) -> String {
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
        validity(r)
    );
    let _ = writeln!(out, "command: {}\ngridperf: {}", r.command_line, r.version);
    match &r.env {
        Some(env) => out.push_str(&environment(env)),
        None => {
            let _ = writeln!(out, "environment: not recorded (the run did not finish)");
        }
    }
    out.push_str(&points_table(r, points));
    out
}

/// A run's points in its measurement's table; the stored quartiles when
/// the figures do not read back.
fn points_table(r: &RunRow, points: &[PointRow]) -> String {
    let table = match r.measure() {
        Some(Measure::Rtt) => figures::<RttPoint>(points).map(|p| super::rtt::rows(&p)),
        Some(Measure::Transfer) => figures::<TransferPoint>(points).map(|p| super::transfer::rows(&p)),
        Some(Measure::Stream) => figures::<StreamResult>(points).map(|s| {
            let proto = points.first().map(|p| p.proto.as_str()).unwrap_or("tcp");
            super::stream::rows(proto, &s, super::stream::Units::Auto)
        }),
        Some(Measure::Fanout) => figures::<FanoutPoint>(points).map(|p| super::fanout::rows(&p)),
        Some(Measure::Copy) => Some(copy_files_table(points)),
        Some(Measure::Trace) => Some(trace_table(points)),
        Some(Measure::Clone) => {
            figures_of::<gridperf_core::lab::clone::CloneFile>(points, "clone-profile").into_iter().next().map(|f| {
                let verify: Vec<gridperf_core::lab::clone::Compared> = figures_of(points, "clone-verify");
                let mut t = super::lab::clone(&f);
                if !verify.is_empty() {
                    t.push_str("\nthe real path and its clone, measured the same way:\n");
                    t.push_str(&super::lab::clone_verify(&verify));
                }
                t
            })
        }
        None => None,
    };
    let table = table.unwrap_or_else(|| quartiles(points));
    if table.starts_with('\n') {
        table
    } else {
        format!("\n{table}")
    }
}

/// A copy's files as stored: each one's size, what moved, what was kept,
/// its hash or why it is not in place; then how many streams ran.
fn copy_files_table(points: &[PointRow]) -> String {
    let files: Vec<CopyFileResult> = figures_of(points, "copy");
    let mut out = format!("\n{:<40} {:>11} {:>11} {:>11} {:>6}  blake3\n", "file", "size", "moved", "kept", "resent");
    for f in &files {
        let hash = match (&f.blake3, &f.error) {
            (_, Some(e)) => format!("NOT IN PLACE: {e}"),
            (Some(h), None) => h.clone(),
            (None, None) => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<40} {:>11} {:>11} {:>11} {:>6}  {hash}",
            f.path,
            fmt_size(f.size),
            fmt_size(f.moved),
            fmt_size(f.kept),
            f.resent
        );
    }
    let streams = points.iter().filter(|p| p.proto == "copy-stream").count();
    let events = points.iter().filter(|p| p.proto == "copy-event").count();
    let _ = writeln!(out, "{streams} streams, {events} events (runs export --format json has them all)");
    out
}

/// A trace's directions as stored.
fn trace_table(points: &[PointRow]) -> String {
    let dirs: Vec<TraceDirection> = figures_of(points, "trace-direction");
    let mut out = format!(
        "\n{:<24} {:<24} {:>11} {:>13} {:>8} {:>11}  verdict\n",
        "from", "to", "acked", "throughput", "retrans", "RTT median"
    );
    for d in &dirs {
        let _ = writeln!(
            out,
            "{:<24} {:<24} {:>11} {:>13} {:>8} {:>11}  {}",
            d.from,
            d.to,
            fmt_size(d.bytes_acked),
            fmt_bps(d.throughput_bps),
            d.retransmits,
            d.rtt_median_ms.map(|m| format!("{m:.2} ms")).unwrap_or_else(|| "-".into()),
            d.verdict.as_ref().map(|v| v.text.as_str()).unwrap_or("-")
        );
    }
    out
}

/// The stored key and quartiles of each point.
fn quartiles(points: &[PointRow]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "\n{:<9} {:>9} {:<24} {:>11} {:>11} {:>11}", "proto", "size", "setting", "q1", "median", "q3");
    for p in points {
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:<24} {:>11} {:>11} {:>11}",
            p.proto,
            fmt_bytes(p.size),
            p.setting,
            opt_ns(p.q1_ns),
            opt_ns(p.median_ns),
            opt_ns(p.q3_ns)
        );
    }
    out
}

/// A stored point's figure for comparing runs: its median time, or (for a
/// stream or a fanout point, which have none) its rate.
fn figure(m: Option<Measure>, p: &PointRow) -> (Option<f64>, Option<f64>, Option<f64>) {
    let rate = |key: &str| p.figures.get(key).and_then(|v| v.as_f64());
    match m {
        Some(Measure::Stream) => (None, rate("throughput_bps"), None),
        Some(Measure::Fanout) => (None, rate("bandwidth_bps"), None),
        _ => (p.q1_ns, p.median_ns, p.q3_ns),
    }
}

/// Whether a point's change between two runs is a finding: Welch's
/// interval on the two sets of round medians, or a bootstrap of the
/// samples; "?" when the points kept neither.
fn significance(p: &PointRow, q: &PointRow) -> String {
    let rounds = |x: &PointRow| -> Vec<f64> {
        x.figures
            .get("rounds_ns")
            .and_then(|r| r.as_array())
            .map(|r| r.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default()
    };
    let d = gridperf_core::analysis::compare::unpaired(&rounds(p), &rounds(q)).or_else(|| {
        let (sa, sb) = (p.samples.as_deref().unwrap_or_default(), q.samples.as_deref().unwrap_or_default());
        gridperf_core::analysis::compare::bootstrap(sa, sb, p.size ^ 0x5EED)
    });
    match d {
        Some(d) if d.significant() => format!("yes ({:+.1}..{:+.1}%)", d.lo * 100.0, d.hi * 100.0),
        Some(d) => format!("no ({:+.1}..{:+.1}%)", d.lo * 100.0, d.hi * 100.0),
        None => "?".into(),
    }
}

/// `gridperf runs compare A B`: the points both have, with the change and
/// whether it is a finding (its 95% interval wholly beyond 5%, `compare::NEGLIGIBLE`).
pub fn compare(ra: &RunRow, a: &[PointRow], rb: &RunRow, b: &[PointRow]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "run {} ({} on {}) -> run {} ({} on {})", ra.id, ra.kind, ra.network, rb.id, rb.kind, rb.network);
    let rates = matches!(ra.measure(), Some(Measure::Stream | Measure::Fanout));
    let same = |p: &PointRow, q: &PointRow| q.proto == p.proto && q.size == p.size && q.setting == p.setting;
    let pct = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if x > 0.0 => format!("{:+.1}%", (y / x - 1.0) * 100.0),
        _ => "-".into(),
    };
    if rates {
        let _ = writeln!(out, "{:<13} {:<24} {:>14} {:>14} {:>9}", "proto", "setting", "rate A", "rate B", "change");
    } else {
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}  significant (95% interval)",
            "proto", "size", "median A", "median B", "change", "q1 chg", "q3 chg"
        );
    }
    let mut only = 0;
    for p in a {
        let Some(q) = b.iter().find(|q| same(p, q)) else {
            only += 1;
            continue;
        };
        let (fa, fb) = (figure(ra.measure(), p), figure(rb.measure(), q));
        if rates {
            let show = |v: Option<f64>| v.map(fmt_bps).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:<13} {:<24} {:>14} {:>14} {:>9}",
                p.proto,
                p.setting,
                show(fa.1),
                show(fb.1),
                pct(fa.1, fb.1)
            );
        } else {
            let _ = writeln!(
                out,
                "{:<9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}  {}",
                p.proto,
                fmt_bytes(p.size),
                opt_ns(fa.1),
                opt_ns(fb.1),
                pct(fa.1, fb.1),
                pct(fa.0, fb.0),
                pct(fa.2, fb.2),
                significance(p, q)
            );
        }
    }
    let only_b = b.iter().filter(|q| !a.iter().any(|p| same(p, q))).count();
    if only + only_b > 0 {
        let _ = writeln!(out, "({only} points only in run {}, {only_b} only in run {})", ra.id, rb.id);
    }
    if !rates {
        let _ = writeln!(
            out,
            "significant: the 95% interval of the change (Welch's, on the points' round medians; else a bootstrap of their\n\
             samples) lies wholly beyond {}%; ?: the points kept neither",
            (gridperf_core::analysis::compare::NEGLIGIBLE * 100.0) as u32
        );
    }
    out
}

/// `gridperf runs export --format csv`: a stream or fanout run as its
/// command's CSV; otherwise each point's key and quartiles.
pub fn csv(r: &RunRow, points: &[PointRow]) -> String {
    let own = match r.measure() {
        Some(Measure::Stream) => figures::<StreamResult>(points).map(|s| super::stream::csv(&s)),
        Some(Measure::Fanout) => figures::<FanoutPoint>(points).map(|p| super::fanout::csv(&p)),
        Some(Measure::Copy) => {
            let mut t = super::Csv::new(&[
                "path",
                "size_bytes",
                "moved_bytes",
                "kept_bytes",
                "resent_blocks",
                "blake3",
                "checksum",
                "error",
            ]);
            for f in figures_of::<CopyFileResult>(points, "copy") {
                t.row([
                    f.path,
                    f.size.to_string(),
                    f.moved.to_string(),
                    f.kept.to_string(),
                    f.resent.to_string(),
                    f.blake3.unwrap_or_default(),
                    f.checksum.unwrap_or_default(),
                    f.error.unwrap_or_default(),
                ]);
            }
            Some(t.text())
        }
        Some(Measure::Trace) => {
            let mut t = super::Csv::new(&[
                "from",
                "to",
                "bytes_acked",
                "bytes_sent",
                "seconds",
                "throughput_bps",
                "retransmits",
                "rtt_median_ms",
                "limit",
            ]);
            for d in figures_of::<TraceDirection>(points, "trace-direction") {
                t.row([
                    d.from,
                    d.to,
                    d.bytes_acked.to_string(),
                    d.bytes_sent.to_string(),
                    format!("{:.3}", d.seconds),
                    format!("{:.0}", d.throughput_bps),
                    d.retransmits.to_string(),
                    d.rtt_median_ms.map(|m| format!("{m:.3}")).unwrap_or_default(),
                    d.verdict.map(|v| format!("{:?}", v.limit).to_lowercase()).unwrap_or_default(),
                ]);
            }
            Some(t.text())
        }
        _ => None,
    };
    own.unwrap_or_else(|| {
        let mut t = super::Csv::new(&["proto", "size_bytes", "setting", "q1_ns", "median_ns", "q3_ns"]);
        for p in points {
            t.row([
                p.proto.clone(),
                p.size.to_string(),
                p.setting.clone(),
                super::ns_cell(p.q1_ns),
                super::ns_cell(p.median_ns),
                super::ns_cell(p.q3_ns),
            ]);
        }
        t.text()
    })
}
