//! `gridperf report`: one self-contained HTML file (inline SVG and CSS, no
//! scripts, nothing fetched) from stored runs: RTT against message size per
//! protocol with its interquartile band (full sweep and zoomed), the
//! quartiles per protocol, transfer time against size, the best-protocol
//! table with its tie rule, the thresholds, and each run's environment, with
//! invalid runs marked.

use crate::store::{PointRow, RunRow};
use gridperf_core::survey::{best_protocol, thresholds, BestRange, Curve, CurvePoint, Threshold, ThresholdKind};
use gridperf_core::svg::{self, escape, Chart, Series, SeriesPoint};
use gridperf_core::units::{fmt_bytes, fmt_ns};
use std::fmt::Write;

/// One network's RTT curves, best-protocol ranges and thresholds.
pub struct NetworkAnalysis {
    pub network: String,
    pub mtu: Option<u32>,
    pub curves: Vec<Curve>,
    pub best: Vec<BestRange>,
    pub thresholds: Vec<Threshold>,
    pub invalid: Option<String>,
}

/// The RTT curves of a run's points (medians and quartiles per protocol).
pub fn curves(points: &[PointRow]) -> Vec<Curve> {
    let mut protos: Vec<&str> = points.iter().map(|p| p.proto.as_str()).collect();
    protos.dedup();
    let mut order = vec!["tcp", "udp", "sendfile"];
    order.retain(|p| protos.contains(p));
    for p in protos {
        if !order.contains(&p) {
            order.push(p);
        }
    }
    order
        .iter()
        .map(|proto| {
            let mut pts: Vec<CurvePoint> = points
                .iter()
                .filter(|p| p.proto == *proto)
                .filter_map(|p| {
                    Some(CurvePoint { size: p.size, median_ns: p.median_ns?, q1_ns: p.q1_ns?, q3_ns: p.q3_ns? })
                })
                .collect();
            pts.sort_by_key(|p| p.size);
            Curve { proto: proto.to_string(), points: pts }
        })
        .filter(|c| !c.points.is_empty())
        .collect()
}

/// Analyses every rtt run.
pub fn analyse(runs: &[(RunRow, Vec<PointRow>)]) -> Vec<NetworkAnalysis> {
    runs.iter()
        .filter(|(r, _)| r.kind == "rtt")
        .map(|(r, pts)| {
            let curves = curves(pts);
            let best = best_protocol(&curves);
            let mut th: Vec<Threshold> = curves.iter().flat_map(|c| thresholds(c, r.mtu)).collect();
            th.sort_by_key(|t| t.size);
            NetworkAnalysis {
                network: r.network.clone(),
                mtu: r.mtu,
                curves,
                best,
                thresholds: th,
                invalid: r.invalid.clone(),
            }
        })
        .collect()
}

fn range_text(b: &BestRange) -> String {
    if b.from == b.to {
        fmt_bytes(b.from)
    } else {
        format!("{} - {}", fmt_bytes(b.from), fmt_bytes(b.to))
    }
}

/// The best-protocol table as text, for the terminal.
pub fn best_table_text(all: &[NetworkAnalysis]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<14} {:<22} {:<22} margin", "network", "message size", "best RTT");
    for a in all {
        for b in &a.best {
            let _ = writeln!(
                out,
                "{:<14} {:<22} {:<22} {}",
                a.network,
                range_text(b),
                if b.tie { format!("tie: {}", b.best.join(" = ")) } else { b.best.join("") },
                if b.tie { "within the noise".to_string() } else { format!("{:.1}%", b.margin * 100.0) }
            );
        }
        if let Some(why) = &a.invalid {
            let _ = writeln!(out, "{:<14} INVALID run: {why}", a.network);
        }
    }
    let _ = writeln!(
        out,
        "\na tie: the medians differ by at most {}% or by at most half the mean interquartile range",
        (gridperf_core::survey::TIE_RELATIVE * 100.0) as u32
    );
    out
}

/// The thresholds as text.
pub fn thresholds_text(all: &[NetworkAnalysis]) -> String {
    let mut out = String::new();
    for a in all {
        for t in &a.thresholds {
            let _ = writeln!(out, "{:<14} {}", a.network, threshold_words(t));
        }
    }
    out
}

fn threshold_words(t: &Threshold) -> String {
    let mtu = t.mtu_multiple.map(|m| format!(" ({m:.1} x MTU)")).unwrap_or_default();
    match t.kind {
        ThresholdKind::Jump => {
            format!("{} jumps at {}{mtu}: {} -> {}", t.proto, fmt_bytes(t.size), fmt_ns(t.before), fmt_ns(t.after))
        }
        ThresholdKind::SlopeUp => format!(
            "{} slows down from {}{mtu}: {:.2} -> {:.2} ns per byte",
            t.proto,
            fmt_bytes(t.size),
            t.before,
            t.after
        ),
        ThresholdKind::SlopeDown => format!(
            "{} speeds up from {}{mtu}: {:.2} -> {:.2} ns per byte",
            t.proto,
            fmt_bytes(t.size),
            t.before,
            t.after
        ),
    }
}

/// A curve per protocol: the median as the line, q1-q3 as the band, in ns / `div`.
fn series(curves: &[Curve], div: f64) -> Vec<Series> {
    curves
        .iter()
        .map(|c| Series {
            label: c.proto.clone(),
            points: c
                .points
                .iter()
                .map(|p| SeriesPoint {
                    x: p.size as f64,
                    y: p.median_ns / div,
                    band: Some((p.q1_ns / div, p.q3_ns / div)),
                })
                .collect(),
        })
        .collect()
}

fn rtt_chart(a: &NetworkAnalysis, title: &str, x_max: Option<f64>) -> Chart {
    // microseconds on a LAN, milliseconds on a WAN
    let top = a.curves.iter().flat_map(|c| c.points.iter().map(|p| p.median_ns)).fold(0.0f64, f64::max);
    let (div, unit) = if top >= 10e6 { (1e6, "ms") } else { (1e3, "us") };
    Chart {
        title: title.to_string(),
        x_label: "message size (bytes)".into(),
        y_label: format!("round-trip time ({unit}): median, band q1-q3"),
        x_log: false,
        y_log: false,
        x_range: x_max.map(|m| (0.0, m)),
        series: series(&a.curves, div),
        marks: a
            .thresholds
            .iter()
            .filter(|t| x_max.map_or(true, |m| t.size as f64 <= m))
            .map(|t| (t.size as f64, format!("{} {:?}", t.proto, t.kind).to_lowercase()))
            .collect(),
    }
}

/// The whole report; also every chart as (file name, SVG) for --svg-dir.
pub fn render(runs: &[(RunRow, Vec<PointRow>)]) -> (String, Vec<(String, String)>) {
    let analysis = analyse(runs);
    let mut svgs: Vec<(String, String)> = Vec::new();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gridperf report</title>\n<style>\
         body{{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}\
         .invalid{{background:#fdd;border:2px solid #c00;padding:0.5em;margin:0.5em 0}}\
         .charts svg{{margin:0.5em 0;display:block}}code{{background:#f4f4f4}}</style></head><body>\n\
         <h1>gridperf report</h1>\n<p>{} run(s), generated by {}.</p>\n",
        runs.len(),
        escape(&crate::env::software())
    );
    // the summary table first: what the document's Fig. 6f says
    h.push_str("<h2>Best protocol by message size</h2>\n<table id=\"best\"><tr><th>network</th><th>message size</th><th>best RTT</th><th>margin</th></tr>\n");
    for a in &analysis {
        for b in &a.best {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&a.network),
                escape(&range_text(b)),
                escape(&if b.tie { format!("tie: {}", b.best.join(" = ")) } else { b.best.join("") }),
                if b.tie { "within the noise".to_string() } else { format!("{:.1}%", b.margin * 100.0) }
            );
        }
    }
    let _ = writeln!(
        h,
        "</table>\n<p>A tie: the medians differ by at most {}%, or by at most half the mean interquartile range of the two.</p>",
        (gridperf_core::survey::TIE_RELATIVE * 100.0) as u32
    );
    h.push_str("<h2>Thresholds</h2>\n<table id=\"thresholds\"><tr><th>network</th><th>MTU</th><th>change</th></tr>\n");
    for a in &analysis {
        for t in &a.thresholds {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&a.network),
                a.mtu.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
                escape(&threshold_words(t))
            );
        }
    }
    h.push_str("</table>\n");
    for (run, points) in runs {
        let _ = writeln!(
            h,
            "<h2 id=\"run-{}\">{} on {} (run {})</h2>",
            run.id,
            escape(&run.kind),
            escape(&run.network),
            run.id
        );
        if let Some(why) = &run.invalid {
            let _ = writeln!(
                h,
                "<div class=\"invalid\">INVALID: the lab's emulator did not keep up during this run ({}); its figures are not the emulated network's.</div>",
                escape(why)
            );
        }
        if run.status != "done" {
            let _ = writeln!(
                h,
                "<div class=\"invalid\">This run is {}: some points are missing.</div>",
                escape(&run.status)
            );
        }
        h.push_str("<div class=\"charts\">\n");
        let slug = format!("run{}-{}-{}", run.id, run.kind, run.network.replace(|c: char| !c.is_alphanumeric(), "_"));
        let mut add = |name: String, chart: &Chart, h: &mut String| {
            let s = svg::render(chart, 900, 420);
            h.push_str(&s);
            h.push('\n');
            svgs.push((name, s));
        };
        if run.kind == "rtt" {
            if let Some(a) = analysis.iter().find(|a| a.network == run.network) {
                add(format!("{slug}-rtt.svg"), &rtt_chart(a, &format!("RTT, {}", run.network), None), &mut h);
                add(
                    format!("{slug}-rtt-4k.svg"),
                    &rtt_chart(a, &format!("RTT up to 4 KB, {}", run.network), Some(4096.0)),
                    &mut h,
                );
                add(
                    format!("{slug}-rtt-16k.svg"),
                    &rtt_chart(a, &format!("RTT up to 16 KB, {}", run.network), Some(16384.0)),
                    &mut h,
                );
                for c in &a.curves {
                    let one = NetworkAnalysis {
                        network: a.network.clone(),
                        mtu: a.mtu,
                        curves: vec![c.clone()],
                        best: Vec::new(),
                        thresholds: a.thresholds.iter().filter(|t| t.proto == c.proto).cloned().collect(),
                        invalid: None,
                    };
                    add(
                        format!("{slug}-quartiles-{}.svg", c.proto),
                        &rtt_chart(&one, &format!("{} quartiles, {}", c.proto, run.network), None),
                        &mut h,
                    );
                }
            }
        } else if run.kind == "fanout" {
            let pts: Vec<crate::engines::fanout::FanoutPoint> =
                points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
            let mut panels: Vec<(crate::engines::fanout::Variant, u32)> = Vec::new();
            for p in &pts {
                if !panels.contains(&(p.variant, p.nodes)) {
                    panels.push((p.variant, p.nodes));
                }
            }
            for (variant, nodes) in panels {
                let here: Vec<&crate::engines::fanout::FanoutPoint> =
                    pts.iter().filter(|p| p.variant == variant && p.nodes == nodes).collect();
                let mut sizes: Vec<u64> = here.iter().map(|p| p.size).collect();
                sizes.sort_unstable();
                sizes.dedup();
                let chart = Chart {
                    title: format!("fanout {}, {nodes} consumers", variant.name()),
                    x_label: "messages per consumer".into(),
                    y_label: "bandwidth (Mbit/s), 2 x MAX x messages x nodes x size / time".into(),
                    x_log: true,
                    series: sizes
                        .iter()
                        .map(|&size| Series {
                            label: format!("{} B", size),
                            points: here
                                .iter()
                                .filter(|p| p.size == size)
                                .filter_map(|p| {
                                    p.bandwidth_bps.map(|b| SeriesPoint {
                                        x: p.messages as f64,
                                        y: b / 1e6,
                                        band: None,
                                    })
                                })
                                .collect(),
                        })
                        .collect(),
                    // the whole sweep's range, so that deadlocks beyond the last
                    // completed point show where they happened
                    x_range: {
                        let lo = here.iter().map(|p| p.messages).min().unwrap_or(1) as f64;
                        let hi = here.iter().map(|p| p.messages).max().unwrap_or(1) as f64;
                        Some((lo, hi))
                    },
                    marks: {
                        let mut at: Vec<(u64, Vec<u64>)> = Vec::new();
                        for p in here.iter().filter(|p| p.deadlock.is_some()) {
                            match at.iter_mut().find(|(m, _)| *m == p.messages) {
                                Some((_, sizes)) => sizes.push(p.size),
                                None => at.push((p.messages, vec![p.size])),
                            }
                        }
                        at.into_iter()
                            .map(|(m, sizes)| {
                                let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
                                (m as f64, format!("deadlock {} B", list.join(", ")))
                            })
                            .collect()
                    },
                    ..Chart::default()
                };
                add(format!("{slug}-fanout-{}-{nodes}.svg", variant.name()), &chart, &mut h);
            }
        } else if run.kind == "stream" {
            let streams: Vec<gridperf_core::model::StreamResult> =
                points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
            let interval_s =
                run.settings.get("spec").and_then(|s| s.get("interval_ms")).and_then(|v| v.as_f64()).unwrap_or(1000.0)
                    / 1000.0;
            let per_interval = Chart {
                title: format!("throughput per interval, {}", run.network),
                x_label: "time (s)".into(),
                y_label: "received (Mbit/s)".into(),
                series: streams
                    .iter()
                    .map(|st| Series {
                        label: format!("stream {} {}", st.index, st.direction),
                        points: st
                            .interval_bps
                            .iter()
                            .enumerate()
                            .map(|(k, b)| SeriesPoint { x: (k + 1) as f64 * interval_s, y: b / 1e6, band: None })
                            .collect(),
                    })
                    .collect(),
                ..Chart::default()
            };
            add(format!("{slug}-intervals.svg"), &per_interval, &mut h);
            let window = Chart {
                title: format!("TCP window over time (the sender's TCP_INFO), {}", run.network),
                x_label: "time (s)".into(),
                y_label: "cwnd (segments)".into(),
                series: streams
                    .iter()
                    .filter(|st| !st.timeline.is_empty())
                    .map(|st| Series {
                        label: format!("stream {} {}", st.index, st.direction),
                        points: st
                            .timeline
                            .iter()
                            .map(|t| SeriesPoint { x: t.t_ns as f64 / 1e9, y: t.cwnd as f64, band: None })
                            .collect(),
                    })
                    .collect(),
                ..Chart::default()
            };
            add(format!("{slug}-cwnd.svg"), &window, &mut h);
            h.push_str("<table><tr><th>stream</th><th>throughput</th><th>verdict</th></tr>");
            for st in &streams {
                let _ = write!(
                    h,
                    "<tr><td>{} {}</td><td>{:.1} Mbit/s</td><td>{}</td></tr>",
                    st.index,
                    escape(&st.direction),
                    st.throughput_bps / 1e6,
                    escape(&st.verdict.as_ref().map(|v| v.text.clone()).unwrap_or_default())
                );
            }
            h.push_str("</table>\n");
        } else if run.kind == "transfer" {
            let chart = Chart {
                title: format!("transfer time, {}", run.network),
                x_label: "message size (bytes)".into(),
                y_label: "time per run (ms): median, band q1-q3".into(),
                series: series(&curves(points), 1e6),
                ..Chart::default()
            };
            add(format!("{slug}-transfer.svg"), &chart, &mut h);
        }
        h.push_str("</div>\n");
        env_table(&mut h, run);
    }
    h.push_str("</body></html>\n");
    (h, svgs)
}

fn env_table(h: &mut String, run: &RunRow) {
    h.push_str("<table class=\"env\">");
    let row = |h: &mut String, k: &str, v: &str| {
        let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    };
    row(h, "command", &run.command_line);
    row(h, "gridperf", &run.version);
    row(h, "status", &run.status);
    if let Some(env) = &run.env {
        row(h, "client", &format!("{} ({})", env.client.host, env.client.kernel));
        if let Some(s) = &env.server {
            row(h, "agent", &format!("{} ({})", s.host, s.kernel));
        }
        if let Some(l) = &env.lab {
            row(h, "lab", &format!("{}: {}", l.name, l.description));
        }
        for n in &env.notes {
            row(h, "note", n);
        }
        for (k, v) in env.client.sysctls.iter().filter(|(k, _)| k.contains("tcp_") || k.contains("mem_max")) {
            row(h, k, v);
        }
    }
    h.push_str("</table>\n");
}
