//! `gridperf report`: one self-contained HTML file (inline SVG and CSS, no
//! scripts, nothing fetched) from stored runs: a table of contents; the
//! best-protocol table with its intervals and the points it left out; the
//! thresholds with their evidence; then per run its plots and its
//! environment, invalid runs marked.
//!
//! The plots, per kind of run: RTT against message size on a log axis
//! (median line, interquartile whiskers where a point was measured,
//! thresholds marked), zoomed to 4 KiB on a linear axis around the MTU
//! multiples, each protocol's quartiles alone, the RTT's distribution (a
//! CDF per protocol at a small, an MTU-sized and the largest message), and
//! the RTT over a point's exchanges; transfer time log-log; a stream's
//! rate per interval (in the unit that fits) and its window over time; a
//! fanout panel per variant and node count, deadlocks marked. A protocol
//! has one colour in every plot.

use super::survey::{analyse, curves, threshold_words, NetworkAnalysis};
use crate::store::{PointRow, RunRow};
use gridperf_core::analysis::survey::{Curve, ThresholdKind};
use gridperf_core::model::{FanoutPoint, Measure, StreamResult};
use gridperf_core::svg::{self, escape, proto_color, Chart, Series, SeriesPoint};
use std::fmt::Write;

/// Points a line of raw samples is thinned to (a plot of more is no clearer).
const DRAWN_SAMPLES: usize = 1000;

/// A curve per protocol: the median as the line, q1-q3 as whiskers, in ns / `div`.
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
            color: proto_color(&c.proto),
        })
        .collect()
}

/// Microseconds on a LAN, milliseconds on a WAN: (divisor, unit).
fn time_unit(top_ns: f64) -> (f64, &'static str) {
    if top_ns >= 10e6 {
        (1e6, "ms")
    } else {
        (1e3, "us")
    }
}

/// "tcp jump", "udp slower", "tcp faster": a threshold's mark.
fn mark(t: &gridperf_core::analysis::survey::Threshold) -> String {
    let what = match t.kind {
        ThresholdKind::Jump => "jump",
        ThresholdKind::SlopeUp => "slower per byte",
        ThresholdKind::SlopeDown => "faster per byte",
    };
    format!("{} {what}", t.proto)
}

fn rtt_chart(a: &NetworkAnalysis, curves: &[Curve], title: &str, zoom: Option<f64>) -> Chart {
    let top = curves.iter().flat_map(|c| c.points.iter().map(|p| p.median_ns)).fold(0.0f64, f64::max);
    let (div, unit) = time_unit(top);
    let protos: Vec<&str> = curves.iter().map(|c| c.proto.as_str()).collect();
    Chart {
        title: title.to_string(),
        x_label: format!("message size (bytes){}", if zoom.is_some() { "" } else { ", log scale" }),
        y_label: format!("round-trip time ({unit}): median, whiskers q1-q3"),
        // the sizes span five decades: log, except for the zoom around the MTU
        x_log: zoom.is_none(),
        y_log: false,
        x_range: zoom.map(|m| (0.0, m)),
        series: series(curves, div),
        marks: a
            .thresholds
            .iter()
            .filter(|t| protos.contains(&t.proto.as_str()) && zoom.is_none_or(|m| t.size as f64 <= m))
            .map(|t| (t.size as f64, mark(t)))
            .collect(),
        ..Chart::default()
    }
}

/// The sizes whose distributions are drawn: the smallest, the one nearest
/// an Ethernet frame's payload, and the largest.
fn cdf_sizes(points: &[PointRow]) -> Vec<u64> {
    let mut sizes: Vec<u64> = points.iter().filter(|p| has_samples(p)).map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = Vec::new();
    if let (Some(&first), Some(&last)) = (sizes.first(), sizes.last()) {
        out.push(first);
        if let Some(&mtu) = sizes.iter().min_by_key(|&&s| s.abs_diff(1460)) {
            out.push(mtu);
        }
        out.push(last);
    }
    out.dedup();
    out
}

/// Whether a point kept samples to draw (a point whose every message was
/// lost kept none: an empty list).
fn has_samples(p: &PointRow) -> bool {
    p.samples.as_ref().is_some_and(|s| !s.is_empty())
}

/// The RTT's distribution at one size: a CDF per protocol (log RTT).
fn cdf_chart(points: &[PointRow], size: u64, network: &str) -> Chart {
    let here: Vec<&PointRow> = points.iter().filter(|p| p.size == size && has_samples(p)).collect();
    let top = here.iter().filter_map(|p| p.median_ns).fold(0.0f64, f64::max);
    let (div, unit) = time_unit(top);
    Chart {
        title: format!("RTT distribution at {}, {network}", gridperf_core::units::fmt_bytes(size)),
        x_label: format!("round-trip time ({unit}), log scale"),
        y_label: "share of the exchanges at or below".into(),
        x_log: true,
        series: here
            .iter()
            .map(|p| {
                let mut v = p.samples.clone().unwrap_or_default();
                v.sort_unstable();
                let n = v.len();
                let step = n.div_ceil(DRAWN_SAMPLES).max(1);
                Series {
                    label: p.proto.clone(),
                    points: (0..n)
                        .step_by(step)
                        .chain(std::iter::once(n - 1))
                        .map(|k| SeriesPoint { x: v[k] as f64 / div, y: (k + 1) as f64 / n as f64, band: None })
                        .collect(),
                    color: proto_color(&p.proto),
                }
            })
            .collect(),
        ..Chart::default()
    }
}

/// The RTT over one point's exchanges, each protocol at the smallest size
/// (in the order taken; rounds follow one another).
fn over_time_chart(points: &[PointRow], network: &str) -> Option<Chart> {
    let size = points.iter().filter(|p| has_samples(p)).map(|p| p.size).min()?;
    let here: Vec<&PointRow> = points.iter().filter(|p| p.size == size && has_samples(p)).collect();
    let top = here.iter().filter_map(|p| p.q3_ns).fold(0.0f64, f64::max);
    let (div, unit) = time_unit(top);
    Some(Chart {
        title: format!("RTT over the exchanges at {}, {network}", gridperf_core::units::fmt_bytes(size)),
        x_label: "exchange (as taken, the stored samples)".into(),
        y_label: format!("round-trip time ({unit})"),
        series: here
            .iter()
            .map(|p| {
                let v = p.samples.clone().unwrap_or_default();
                let step = v.len().div_ceil(DRAWN_SAMPLES).max(1);
                Series {
                    label: p.proto.clone(),
                    points: v
                        .iter()
                        .enumerate()
                        .step_by(step)
                        .map(|(k, &ns)| SeriesPoint { x: k as f64, y: ns as f64 / div, band: None })
                        .collect(),
                    color: proto_color(&p.proto),
                }
            })
            .collect(),
        ..Chart::default()
    })
}

fn rtt_charts(slug: &str, run: &RunRow, points: &[PointRow], a: &NetworkAnalysis) -> Vec<(String, Chart)> {
    let net = &run.network;
    let mut out = vec![
        (format!("{slug}-rtt.svg"), rtt_chart(a, &a.curves, &format!("RTT against message size, {net}"), None)),
        (
            format!("{slug}-rtt-4k.svg"),
            rtt_chart(a, &a.curves, &format!("RTT up to 4 KiB (around the MTU multiples), {net}"), Some(4096.0)),
        ),
    ];
    for c in &a.curves {
        out.push((
            format!("{slug}-quartiles-{}.svg", c.proto),
            rtt_chart(a, std::slice::from_ref(c), &format!("{} median and quartiles, {net}", c.proto), None),
        ));
    }
    for size in cdf_sizes(points) {
        out.push((format!("{slug}-cdf-{size}.svg"), cdf_chart(points, size, net)));
    }
    if let Some(c) = over_time_chart(points, net) {
        out.push((format!("{slug}-over-time.svg"), c));
    }
    out
}

/// Messages a stored transfer point lost (UDP): its time counts a
/// timeout per lost message, so it is no transfer time to draw.
fn transfer_lost(p: &PointRow) -> u64 {
    p.figures.get("lost").and_then(|v| v.as_u64()).unwrap_or(0)
}

fn transfer_charts(slug: &str, run: &RunRow, points: &[PointRow]) -> Vec<(String, Chart)> {
    let kept: Vec<PointRow> = points.iter().filter(|p| transfer_lost(p) == 0).cloned().collect();
    let curves = curves(&kept);
    let top = curves.iter().flat_map(|c| c.points.iter().map(|p| p.median_ns)).fold(0.0f64, f64::max);
    let (div, unit) = if top >= 10e9 { (1e9, "s") } else { (1e6, "ms") };
    vec![(
        format!("{slug}-transfer.svg"),
        Chart {
            title: format!("transfer time against message size, {}", run.network),
            x_label: "message size (bytes), log scale".into(),
            y_label: format!("time per run ({unit}), log scale: median, whiskers q1-q3"),
            x_log: true,
            y_log: true,
            series: series(&curves, div),
            // a point that lost messages is marked where it would be, not drawn
            marks: points
                .iter()
                .filter(|p| transfer_lost(p) > 0)
                .map(|p| (p.size as f64, format!("{} lost {}: not drawn", p.proto, transfer_lost(p))))
                .collect(),
            ..Chart::default()
        },
    )]
}

/// A last interval shorter than this share of one is not drawn as a rate.
const SHORT_TAIL: f64 = 0.25;
const TAIL_WORDS: &str = "a last interval under a quarter of one is too short to be a rate: not drawn";

/// Bits per second in the unit that fits the largest: (divisor, unit).
fn rate_unit(top_bps: f64) -> (f64, &'static str) {
    if top_bps >= 1e9 {
        (1e9, "Gbit/s")
    } else if top_bps >= 1e6 {
        (1e6, "Mbit/s")
    } else {
        (1e3, "kbit/s")
    }
}

fn stream_charts(slug: &str, run: &RunRow, streams: &[StreamResult]) -> Vec<(String, Chart)> {
    let interval_s =
        run.settings.get("spec").and_then(|s| s.get("interval_ms")).and_then(|v| v.as_f64()).unwrap_or(1000.0) / 1000.0;
    // a last interval much shorter than the others is no rate to draw: a
    // stream's last 50 ms (its drain) read as a fall from 95 to 77 Mbit/s
    let short_tail = |st: &StreamResult| {
        st.receiver.last_interval_ns.filter(|&ns| (ns as f64) < SHORT_TAIL * interval_s * 1e9).is_some()
    };
    let drawn = |st: &StreamResult| st.interval_bps.len() - usize::from(short_tail(st));
    let cut = streams.iter().any(short_tail);
    let top = streams.iter().flat_map(|s| s.interval_bps[..drawn(s)].iter().copied()).fold(0.0f64, f64::max);
    let (div, unit) = rate_unit(top);
    let per_interval = Chart {
        title: format!("throughput per interval, {}", run.network),
        x_label: if cut { format!("time (s); {TAIL_WORDS}") } else { "time (s)".into() },
        y_label: format!("received ({unit})"),
        y_from_zero: true,
        series: streams
            .iter()
            .map(|st| Series {
                label: format!("stream {} {}", st.index, st.direction),
                points: st
                    .interval_ends_s(interval_s)
                    .into_iter()
                    .zip(&st.interval_bps)
                    .take(drawn(st))
                    .map(|(x, b)| SeriesPoint { x, y: b / div, band: None })
                    .collect(),
                color: None,
            })
            .collect(),
        ..Chart::default()
    };
    let window = Chart {
        title: format!("TCP window over time (the sender's TCP_INFO), {}", run.network),
        x_label: "time (s)".into(),
        y_label: "cwnd (segments)".into(),
        y_from_zero: true,
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
                color: None,
            })
            .collect(),
        ..Chart::default()
    };
    vec![(format!("{slug}-intervals.svg"), per_interval), (format!("{slug}-cwnd.svg"), window)]
}

fn fanout_charts(slug: &str, pts: &[FanoutPoint]) -> Vec<(String, Chart)> {
    let mut panels: Vec<(gridperf_core::model::Variant, u32)> = Vec::new();
    for p in pts {
        if !panels.contains(&(p.variant, p.nodes)) {
            panels.push((p.variant, p.nodes));
        }
    }
    let top = pts.iter().filter_map(|p| p.bandwidth_bps).fold(0.0f64, f64::max);
    let (div, unit) = rate_unit(top);
    panels
        .into_iter()
        .map(|(variant, nodes)| {
            let here: Vec<&FanoutPoint> = pts.iter().filter(|p| p.variant == variant && p.nodes == nodes).collect();
            let mut sizes: Vec<u64> = here.iter().map(|p| p.size).collect();
            sizes.sort_unstable();
            sizes.dedup();
            let mut at: Vec<(u64, Vec<u64>)> = Vec::new();
            for p in here.iter().filter(|p| p.deadlock.is_some()) {
                match at.iter_mut().find(|(m, _)| *m == p.messages) {
                    Some((_, sizes)) => sizes.push(p.size),
                    None => at.push((p.messages, vec![p.size])),
                }
            }
            let chart = Chart {
                title: format!("fanout {}, {nodes} consumers", variant.name()),
                x_label: "messages per consumer, log scale".into(),
                y_label: format!("bandwidth ({unit}), 2 x MAX x messages x nodes x size / time"),
                y_from_zero: true,
                x_log: true,
                series: sizes
                    .iter()
                    .map(|&size| Series {
                        label: format!("{} B", size),
                        points: here
                            .iter()
                            .filter(|p| p.size == size)
                            .filter_map(|p| {
                                p.bandwidth_bps.map(|b| SeriesPoint { x: p.messages as f64, y: b / div, band: None })
                            })
                            .collect(),
                        color: None,
                    })
                    .collect(),
                // the whole sweep's range, so that deadlocks beyond the last
                // completed point show where they happened
                x_range: {
                    let lo = here.iter().map(|p| p.messages).min().unwrap_or(1) as f64;
                    let hi = here.iter().map(|p| p.messages).max().unwrap_or(1) as f64;
                    Some((lo, hi))
                },
                marks: at
                    .into_iter()
                    .map(|(m, sizes)| {
                        let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
                        (m as f64, format!("deadlock {} B", list.join(", ")))
                    })
                    .collect(),
                ..Chart::default()
            };
            (format!("{slug}-fanout-{}-{nodes}.svg", variant.name()), chart)
        })
        .collect()
}

/// A copy's streams: each one's throughput per interval (bytes verified).
fn copy_charts(slug: &str, run: &RunRow, streams: &[gridperf_core::model::CopyStream]) -> Vec<(String, Chart)> {
    if streams.iter().all(|s| s.interval_bytes.is_empty()) {
        return Vec::new();
    }
    let interval_s = run.settings.get("interval_ms").and_then(|v| v.as_f64()).unwrap_or(1000.0) / 1000.0;
    let rate = |s: &gridperf_core::model::CopyStream, k: usize, b: u64| {
        let last = k + 1 == s.interval_bytes.len() && s.last_interval_ms > 0;
        let len = if last { s.last_interval_ms as f64 / 1000.0 } else { interval_s };
        let x = k as f64 * interval_s + len;
        (x, b as f64 * 8.0 / len)
    };
    let short_tail = |s: &gridperf_core::model::CopyStream| {
        s.interval_bytes.len() > 1
            && s.last_interval_ms > 0
            && (s.last_interval_ms as f64) < SHORT_TAIL * interval_s * 1000.0
    };
    let drawn = |s: &gridperf_core::model::CopyStream| s.interval_bytes.len() - usize::from(short_tail(s));
    let cut = streams.iter().any(short_tail);
    let top = streams
        .iter()
        .flat_map(|s| s.interval_bytes[..drawn(s)].iter().enumerate().map(move |(k, &b)| rate(s, k, b).1))
        .fold(0.0f64, f64::max);
    let (div, unit) = rate_unit(top);
    let chart = Chart {
        title: format!("copy: each stream's verified throughput per interval, {}", run.network),
        x_label: if cut { format!("time (s); {TAIL_WORDS}") } else { "time (s)".into() },
        y_label: format!("throughput ({unit})"),
        y_from_zero: true,
        series: streams
            .iter()
            .map(|s| Series {
                label: if s.slot != s.index {
                    format!("stream {} (in {}'s place)", s.index, s.slot)
                } else {
                    format!("stream {}", s.index)
                },
                points: s
                    .interval_bytes
                    .iter()
                    .take(drawn(s))
                    .enumerate()
                    .map(|(k, &b)| {
                        let (x, y) = rate(s, k, b);
                        SeriesPoint { x, y: y / div, band: None }
                    })
                    .collect(),
                color: None,
            })
            .collect(),
        ..Chart::default()
    };
    vec![(format!("{slug}-streams.svg"), chart)]
}

/// A capture's largest directions (at most 4): the time-sequence graph
/// (the highest sequence sent and the bytes acknowledged over time, as
/// Stevens drew them) and the window against the data in flight, as the
/// CERN-Tokyo study drew its windows from tcpdump.
fn trace_charts(slug: &str, dirs: &[gridperf_core::model::TraceDirection]) -> Vec<(String, Chart)> {
    let mut dirs: Vec<&gridperf_core::model::TraceDirection> = dirs.iter().filter(|d| d.series.len() >= 2).collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.bytes_acked));
    let mut out = Vec::new();
    for (k, d) in dirs.iter().take(4).enumerate() {
        let mb = |b: u64| b as f64 / 1e6;
        let mut acked = 0u64;
        // every interval that sent a segment again, as a tick (a label each
        // would be illegible at thousands)
        let rug: Vec<f64> = d.series.iter().filter(|p| p.retransmits > 0).map(|p| p.t_s).collect();
        let rug_label = format!("retransmitted ({} segments)", d.retransmits);
        let seq = Chart {
            title: format!("time-sequence: {} -> {}", d.from, d.to),
            x_label: "time (s)".into(),
            y_label: "sequence (MB from the first)".into(),
            series: vec![
                Series {
                    label: "highest sent".into(),
                    points: d.series.iter().map(|p| SeriesPoint { x: p.t_s, y: mb(p.seq), band: None }).collect(),
                    color: None,
                },
                Series {
                    label: "acknowledged".into(),
                    points: d
                        .series
                        .iter()
                        .map(|p| {
                            acked += p.acked;
                            SeriesPoint { x: p.t_s, y: mb(acked), band: None }
                        })
                        .collect(),
                    color: None,
                },
            ],
            y_from_zero: true,
            rug: rug.clone(),
            rug_label: rug_label.clone(),
            ..Chart::default()
        };
        let window = Chart {
            title: format!("window and data in flight: {} -> {}", d.from, d.to),
            x_label: "time (s)".into(),
            y_label: "bytes (MB)".into(),
            series: vec![
                Series {
                    label: "in flight (most per interval)".into(),
                    points: d.series.iter().map(|p| SeriesPoint { x: p.t_s, y: mb(p.in_flight), band: None }).collect(),
                    color: None,
                },
                Series {
                    label: "the receiver's window".into(),
                    points: d.series.iter().map(|p| SeriesPoint { x: p.t_s, y: mb(p.window), band: None }).collect(),
                    color: None,
                },
            ],
            y_from_zero: true,
            rug,
            rug_label,
            ..Chart::default()
        };
        out.push((format!("{slug}-{k}-sequence.svg"), seq));
        out.push((format!("{slug}-{k}-window.svg"), window));
    }
    out
}

/// The machine's CPUs over a run as one stacked bar (gridperf, other
/// tasks, the hypervisor's steal, idle) with its words: what the figures
/// beside it carried.
fn load_bar(l: &gridperf_core::model::MachineLoad) -> String {
    let idle = (1.0 - l.ours - l.others - l.steal).max(0.0);
    let parts = [
        (l.ours, "#4a7fb5", "gridperf"),
        (l.others, "#d9822b", "other tasks"),
        (l.steal, "#c0392b", "steal"),
        (idle, "#e8e8e8", "idle"),
    ];
    let (w, mut x) = (600.0, 0.0);
    let mut bar = String::new();
    for (share, color, name) in parts {
        let width = (share.clamp(0.0, 1.0) * w * 10.0).round() / 10.0;
        let _ = write!(
            bar,
            "<rect x=\"{x:.1}\" y=\"0\" width=\"{width:.1}\" height=\"18\" fill=\"{color}\"><title>{name} {:.0}%</title></rect>",
            share * 100.0
        );
        x += width;
    }
    let legend: Vec<String> = parts.iter().map(|(s, _, n)| format!("{n} {:.0}%", s * 100.0)).collect();
    format!(
        "<div class=\"load{}\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"18\" role=\"img\" \
         aria-label=\"CPU load\">{bar}</svg><br>The machine's {} CPUs over this run ({:.0} s): {}; {} tasks runnable \
         at its end.{}</div>\n",
        if l.busy_machine() { " busy" } else { "" },
        l.cpus,
        l.wall_s,
        legend.join(", "),
        l.runnable,
        if l.busy_machine() { " A busy machine: the figures here carry that load." } else { "" }
    )
}

/// A clone's round trips, the real path's and (with --verify) the
/// clone's, as CDFs on one chart.
fn clone_charts(slug: &str, run: &RunRow, points: &[PointRow]) -> Vec<(String, Chart)> {
    let sides: Vec<PointRow> = points
        .iter()
        .filter(|p| p.proto == "clone-rtt" && has_samples(p))
        .map(|p| PointRow { proto: p.setting.clone(), ..p.clone() })
        .collect();
    if sides.is_empty() {
        return Vec::new();
    }
    let mut chart = cdf_chart(&sides, 64, &run.network);
    chart.title = format!("64-byte UDP round trips: the path to {} and its clone", run.network);
    vec![(format!("{slug}-rtt-cdf.svg"), chart)]
}

/// A clone's fitted profile and, with --verify, each figure of the real
/// path beside the clone's, as HTML tables.
fn clone_table(points: &[PointRow]) -> String {
    let of = |proto: &'static str| points.iter().filter(move |p| p.proto == proto).map(|p| p.figures.clone());
    let mut h = String::new();
    let Some(f) =
        of("clone-profile").find_map(|v| serde_json::from_value::<gridperf_core::lab::clone::CloneFile>(v).ok())
    else {
        return h;
    };
    h.push_str("<table><tr><th>fitted</th><th>a -> b</th><th>b -> a</th></tr>");
    for (name, a, b, fmt) in super::lab::clone_fields(&f) {
        let (a, b) = (super::lab::shown(a, &fmt), super::lab::shown(b, &fmt));
        let _ = write!(h, "<tr><td>{name}</td><td>{}</td><td>{}</td></tr>", escape(&a), escape(&b));
    }
    h.push_str("</table>\n");
    let verify: Vec<gridperf_core::lab::clone::Compared> =
        of("clone-verify").filter_map(|v| serde_json::from_value(v).ok()).collect();
    if !verify.is_empty() {
        h.push_str("<table><tr><th>measured the same way</th><th>real path</th><th>clone</th><th>error</th></tr>");
        for c in super::lab::verify_cells(&verify) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&c[0]),
                escape(&c[1]),
                escape(&c[2]),
                escape(&c[3])
            );
        }
        h.push_str("</table>\n");
    }
    h
}

fn run_title(run: &RunRow) -> String {
    format!("{} on {} (run {})", run.kind, run.network, run.id)
}

/// The whole report; also every chart as (file name, SVG) for --svg-dir.
// Long by design: the report's sections in the order a reader meets them,
// each a few lines over the one analysis.
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
         .busy{{background:#ffe;border:2px solid #c90;padding:0.5em}}.load{{margin:0.5em 0;font-size:90%}}\
         .charts svg{{margin:0.5em 0;display:block}}code{{background:#f4f4f4}}\
         nav li{{margin:0.15em 0}}.evidence{{color:#555;font-size:90%}}</style></head><body>\n\
         <h1>gridperf report</h1>\n<p>{} run(s), generated by {}.</p>\n",
        runs.len(),
        escape(&crate::host::software())
    );
    // the table of contents
    h.push_str("<nav id=\"toc\"><h2>Contents</h2><ul>\n");
    h.push_str("<li><a href=\"#best\">Best protocol by message size</a></li>\n");
    h.push_str("<li><a href=\"#thresholds\">Thresholds</a></li>\n");
    for (run, _) in runs {
        let _ = writeln!(h, "<li><a href=\"#run-{}\">{}</a></li>", run.id, escape(&run_title(run)));
    }
    h.push_str("</ul></nav>\n");
    // the summary table: what the document's Fig. 6f says
    h.push_str("<h2 id=\"best\">Best protocol by message size</h2>\n<table><tr><th>network</th><th>message size</th><th>best RTT</th><th>by</th></tr>\n");
    for a in &analysis {
        for r in super::survey::best_rows(a) {
            let class = if a.invalid.is_some() { " class=\"invalid\"" } else { "" };
            let _ = writeln!(
                h,
                "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&r.network),
                escape(&r.sizes),
                escape(&r.best),
                escape(&r.by)
            );
        }
    }
    let _ = writeln!(
        h,
        "</table>\n<p>A protocol is faster only where the 95% interval of the difference lies wholly beyond {}%; a tie \
         means no difference beyond that was shown. The interval comes from the rounds each point was measured in \
         (the protocols taking turns). A size left out carries no claim, and no range spans it; a network marked \
         INVALID was measured through an emulator that fell behind: its rows are not the network's.</p>",
        (gridperf_core::analysis::compare::NEGLIGIBLE * 100.0) as u32
    );

    h.push_str("<h2 id=\"thresholds\">Thresholds</h2>\n<table><tr><th>network</th><th>MTU</th><th>change</th></tr>\n");
    for a in &analysis {
        for t in &a.thresholds {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}<br><span class=\"evidence\">{}</span></td></tr>",
                escape(&a.network),
                a.mtu.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
                escape(&threshold_words(t)),
                escape(&t.evidence)
            );
        }
    }
    h.push_str("</table>\n");
    for (run, points) in runs {
        let _ = writeln!(h, "<h2 id=\"run-{}\">{}</h2>", run.id, escape(&run_title(run)));
        if let Some(why) = &run.invalid {
            let _ = writeln!(
                h,
                "<div class=\"invalid\">INVALID: {}; its figures are not the network's.</div>",
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
        if let Some(load) = run.env.as_ref().and_then(|e| e.load.as_ref()) {
            h.push_str(&load_bar(load));
        }
        h.push_str("<div class=\"charts\">\n");
        let slug = format!("run{}-{}-{}", run.id, run.kind, run.network.replace(|c: char| !c.is_alphanumeric(), "_"));
        let charts = match run.measure() {
            // this run's own analysis: two runs of one network are drawn apart
            Some(Measure::Rtt) => {
                analysis.iter().find(|a| a.run == run.id).map(|a| rtt_charts(&slug, run, points, a)).unwrap_or_default()
            }
            Some(Measure::Transfer) => transfer_charts(&slug, run, points),
            Some(Measure::Stream) => {
                let streams: Vec<StreamResult> =
                    points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
                stream_charts(&slug, run, &streams)
            }
            Some(Measure::Fanout) => {
                let pts: Vec<FanoutPoint> =
                    points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
                fanout_charts(&slug, &pts)
            }
            Some(Measure::Copy) => {
                let streams: Vec<gridperf_core::model::CopyStream> = points
                    .iter()
                    .filter(|p| p.proto == "copy-stream")
                    .filter_map(|p| serde_json::from_value(p.figures.clone()).ok())
                    .collect();
                copy_charts(&slug, run, &streams)
            }
            Some(Measure::Clone) => clone_charts(&slug, run, points),
            Some(Measure::Trace) => {
                let dirs: Vec<gridperf_core::model::TraceDirection> = points
                    .iter()
                    .filter(|p| p.proto == "trace-direction")
                    .filter_map(|p| serde_json::from_value(p.figures.clone()).ok())
                    .collect();
                trace_charts(&slug, &dirs)
            }
            None => Vec::new(),
        };
        for (name, chart) in charts {
            let s = svg::render(&chart, 900, 420);
            h.push_str(&s);
            h.push('\n');
            svgs.push((name, s));
        }
        if run.measure() == Some(Measure::Clone) {
            h.push_str(&clone_table(points));
        }
        if run.measure() == Some(Measure::Copy) {
            // a copy's points are its files
            let files: Vec<gridperf_core::model::CopyFileResult> = points
                .iter()
                .filter(|p| p.proto == "copy")
                .filter_map(|p| serde_json::from_value(p.figures.clone()).ok())
                .collect();
            h.push_str(
                "<table><tr><th>file</th><th>size</th><th>moved</th><th>kept</th><th>resent</th><th>BLAKE3</th></tr>",
            );
            for f in &files {
                let hash = match (&f.blake3, &f.error) {
                    (_, Some(e)) => format!("NOT IN PLACE: {e}"),
                    (Some(b), None) => b.clone(),
                    (None, None) => "-".into(),
                };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                    escape(&f.path),
                    escape(&gridperf_core::units::fmt_bytes(f.size)),
                    escape(&gridperf_core::units::fmt_bytes(f.moved)),
                    escape(&gridperf_core::units::fmt_bytes(f.kept)),
                    f.resent,
                    escape(&hash)
                );
            }
            h.push_str("</table>\n");
            // restarts, -P auto's changes, broken connections, as they happened
            let events: Vec<gridperf_core::model::CopyEvent> = points
                .iter()
                .filter(|p| p.proto == "copy-event")
                .filter_map(|p| serde_json::from_value(p.figures.clone()).ok())
                .collect();
            if !events.is_empty() {
                h.push_str("<table><tr><th>time</th><th>event</th><th>stream</th><th>why</th></tr>");
                for e in &events {
                    let who = e.who();
                    let _ = write!(
                        h,
                        "<tr><td>{:.1} s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        e.t_s,
                        escape(&e.kind),
                        escape(who.trim_start()),
                        escape(&e.why)
                    );
                }
                h.push_str("</table>\n");
            }
        }
        if run.measure() == Some(Measure::Stream) {
            let streams: Vec<StreamResult> =
                points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
            h.push_str("<table><tr><th>stream</th><th>throughput</th><th>verdict</th></tr>");
            for st in &streams {
                let _ = write!(
                    h,
                    "<tr><td>{} {}</td><td>{}</td><td>{}</td></tr>",
                    st.index,
                    escape(&st.direction),
                    escape(&gridperf_core::units::fmt_bps(st.throughput_bps)),
                    escape(&st.verdict.as_ref().map(|v| v.text.clone()).unwrap_or_default())
                );
            }
            h.push_str("</table>\n");
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
    let placement = |key: &str| run.settings.get(key).and_then(|v| v.as_u64()).map(|c| format!("CPU {c}"));
    if let (Some(c), s) = (placement("client_cpu"), placement("server_cpu")) {
        row(h, "placement", &format!("client {c}, agent {}", s.unwrap_or_else(|| "unpinned".into())));
    }
    if let Some(r) = run.settings.get("rounds").and_then(|v| v.as_u64()) {
        row(h, "rounds per point", &r.to_string());
    }
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
