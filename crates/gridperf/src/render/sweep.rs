//! A sweep (`stream --sweep`, `--preset`): its table, and its figures as
//! the source documents drew them: throughput against the swept setting
//! (a per-packet delay, a pacing rate, the RTT, ...), one line per window
//! (or other setting), one chart per lab profile, with the link's rate,
//! each window's W/RTT and a delay's pacing drawn dashed for reference.

use crate::store::SweepRow;
use gridperf_core::model::{Axis, SweepPoint};
use gridperf_core::svg::{self, escape, Chart, Series, SeriesPoint};
use gridperf_core::units::{fmt_bps, fmt_bytes};
use std::fmt::Write;

/// One row per point: its settings, the best or median of its runs, the
/// spread, and each run's verdict.
pub fn table(axes: &[Axis], rows: &[SweepPoint], best: bool) -> String {
    let mut out = String::new();
    let fields: Vec<String> = match rows.first() {
        Some(r) => r.settings.iter().map(|(f, _)| f.clone()).collect(),
        None => axes.iter().map(|a| a.field.clone()).collect(),
    };
    let mut head: Vec<String> = fields.iter().map(|f| format!("{f:>10}")).collect();
    head.push(format!("{:>14}", if best { "best" } else { "median" }));
    head.push(format!("{:>26}", "runs: least .. most"));
    head.push("  verdicts".into());
    let _ = writeln!(out, "{}", head.join(" "));
    for r in rows {
        let mut cells: Vec<String> = r.settings.iter().map(|(_, v)| format!("{v:>10}")).collect();
        match &r.error {
            Some(e) => cells.push(format!("failed: {e}")),
            None => {
                let shown = if best { r.best_bps } else { r.median_bps };
                cells.push(format!("{:>14}", shown.map(fmt_bps).unwrap_or_else(|| "-".into())));
                cells.push(format!("{:>26}", spread(r)));
                cells.push(format!("  {}", r.verdicts.join(", ")));
                if let Some(why) = &r.invalid {
                    cells.push(format!("  INVALID: {why}"));
                }
            }
        }
        let _ = writeln!(out, "{}", cells.join(" "));
    }
    out
}

/// "least .. most" of a point's runs.
fn spread(r: &SweepPoint) -> String {
    let lo = r.runs_bps.iter().copied().reduce(f64::min);
    match (lo, r.best_bps) {
        (Some(a), Some(b)) => format!("{} .. {}", fmt_bps(a), fmt_bps(b)),
        _ => "-".into(),
    }
}

/// The settings that make a good x axis, in the order one is chosen, with
/// the axis' words and how a value becomes a number in its unit.
const X_FIELDS: &[(&str, &str)] = &[
    ("delay", "per-packet delay on the sender (us)"),
    ("pacing", "pacing rate (Mbit/s; 0: unpaced)"),
    ("rtt", "round-trip time (ms)"),
    ("gap", "sleep between writes (us)"),
    ("w", "window, -w (MiB)"),
    ("length", "bytes per write (KiB)"),
    ("P", "parallel streams"),
    ("loss", "loss (%)"),
];

/// A setting's value as a number in the x axis' unit; None if it is not one.
fn numeric(field: &str, v: &str) -> Option<f64> {
    use gridperf_core::lab::cfg;
    match field {
        "delay" | "gap" => v.trim_end_matches("us").parse().ok(),
        "pacing" if v == "0" || v == "off" => Some(0.0),
        "pacing" => cfg::parse_rate_bps(v).ok().map(|b| b as f64 / 1e6),
        "rtt" => cfg::parse_rtt_ns(v).ok().map(|ns| ns as f64 / 1e6),
        "w" => v.parse::<f64>().ok().map(|b| b / 1_048_576.0),
        "length" => v.parse::<f64>().ok().map(|b| b / 1024.0),
        "P" => v.parse().ok(),
        "loss" => cfg::parse_loss(v).ok().map(|l| l * 100.0),
        _ => None,
    }
}

/// A setting's value for a legend: sizes in binary units.
fn shown(field: &str, v: &str) -> String {
    match (field, v.parse::<u64>()) {
        ("w" | "length", Ok(b)) => format!("{field} {}", fmt_bytes(b)),
        _ => format!("{field} {v}"),
    }
}

/// The sweep's charts, (file name, chart): throughput against the first
/// numeric setting that varies (see [`X_FIELDS`]), a chart per profile, a
/// line per combination of the other settings. None when no numeric
/// setting varies (the table says it all).
pub fn charts(sweep: &SweepRow) -> Vec<(String, Chart)> {
    let axes: Vec<Axis> = serde_json::from_value(sweep.spec["axes"].clone()).unwrap_or_default();
    let best = sweep.spec["best"].as_bool().unwrap_or(false);
    let repeat = sweep.spec["repeat"].as_u64().unwrap_or(1);
    let points: Vec<SweepPoint> =
        sweep.points.iter().filter_map(|(_, p)| serde_json::from_value(p.clone()).ok()).collect();
    let varies = |f: &str| axes.iter().any(|a| a.field == f && a.values.len() > 1);
    let Some(&(x_field, x_label)) = X_FIELDS.iter().find(|(f, _)| varies(f)) else { return Vec::new() };
    let base_lab = sweep.spec["network"]["lab"].as_str().map(str::to_string);
    let profile_of = |p: &SweepPoint| p.get("profile").map(str::to_string).or(base_lab.clone());
    let mut panels: Vec<Option<String>> = Vec::new();
    for p in &points {
        let name = profile_of(p);
        if !panels.contains(&name) {
            panels.push(name);
        }
    }
    let trace_fields: Vec<&str> =
        axes.iter().map(|a| a.field.as_str()).filter(|f| *f != x_field && *f != "profile").collect();
    let name = sweep.spec["preset"].as_str().map(|p| format!("{p} sweep {}", sweep.id));
    let name = name.unwrap_or_else(|| format!("sweep {}", sweep.id));
    let statistic = match (best, repeat) {
        (_, 1) => "one run".to_string(),
        (true, n) => format!("best of {n} runs, whiskers least to most"),
        (false, n) => format!("median of {n} runs, whiskers least to most"),
    };
    let mut out = Vec::new();
    for panel in &panels {
        let here: Vec<&SweepPoint> = points.iter().filter(|p| &profile_of(p) == panel).collect();
        // the lines: one per combination of the other settings, in grid order
        let mut labels: Vec<String> = Vec::new();
        for p in &here {
            let l = trace_label(p, &trace_fields);
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        let mut series = Vec::new();
        let mut references = Vec::new();
        let mut top = 0.0f64;
        for (i, label) in labels.iter().enumerate() {
            let mine: Vec<&&SweepPoint> = here.iter().filter(|p| &trace_label(p, &trace_fields) == label).collect();
            let pts: Vec<SeriesPoint> = mine
                .iter()
                .filter(|p| p.good())
                .filter_map(|p| {
                    let x = numeric(x_field, p.get(x_field)?)?;
                    let y = if best { p.best_bps } else { p.median_bps }? / 1e6;
                    let lo = p.runs_bps.iter().copied().reduce(f64::min)? / 1e6;
                    let hi = p.runs_bps.iter().copied().reduce(f64::max)? / 1e6;
                    top = top.max(hi);
                    Some(SeriesPoint { x, y, band: (repeat > 1).then_some((lo, hi)) })
                })
                .collect();
            let color = svg::palette(i);
            // the window's limit, W/RTT, where both are known
            let limit: Vec<SeriesPoint> = mine
                .iter()
                .filter_map(|p| {
                    let x = numeric(x_field, p.get(x_field)?)?;
                    let (w, rtt) = (p.window_bytes?, p.rtt_ns.filter(|&r| r > 0)?);
                    Some(SeriesPoint { x, y: w as f64 * 8.0 / (rtt as f64 * 1e-9) / 1e6, band: None })
                })
                .collect();
            let window = mine.iter().find_map(|p| p.window_bytes);
            series.push(Series {
                label: if label.is_empty() { "throughput".into() } else { label.clone() },
                points: pts,
                color: Some(color),
            });
            if let Some(w) = window {
                references.push(Series {
                    label: format!("W/RTT, W {}", fmt_bytes(w)),
                    points: limit,
                    color: Some(color),
                });
            }
        }
        let link = here.iter().filter_map(|p| p.link_bps).max();
        if let Some(l) = link {
            top = top.max(l as f64 / 1e6);
        }
        let xs: Vec<f64> = here.iter().filter_map(|p| numeric(x_field, p.get(x_field)?)).collect();
        let (x_lo, x_hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        if let Some(l) = link {
            references.push(Series {
                label: format!("link {}", fmt_bps(l as f64)),
                points: vec![
                    SeriesPoint { x: x_lo, y: l as f64 / 1e6, band: None },
                    SeriesPoint { x: x_hi, y: l as f64 / 1e6, band: None },
                ],
                color: Some("#555555"),
            });
        }
        if x_field == "delay" {
            // the cap a delay sets: the pacing it stands for
            let mut cap: Vec<SeriesPoint> = here
                .iter()
                .filter_map(|p| {
                    Some(SeriesPoint {
                        x: numeric("delay", p.get("delay")?)?,
                        y: p.pacing_bps? as f64 / 1e6,
                        band: None,
                    })
                })
                .collect();
            cap.sort_by(|a, b| a.x.total_cmp(&b.x));
            cap.dedup_by(|a, b| a.x == b.x);
            references.push(Series { label: "the delay's pacing".into(), points: cap, color: Some("#999999") });
        }
        // a reference far above everything measured would flatten the chart
        let ceiling = top * 1.3;
        for r in &mut references {
            r.points.retain(|p| p.y <= ceiling);
        }
        let on = panel.as_deref().map(|p| format!(" on {p}")).unwrap_or_default();
        let chart = Chart {
            title: format!("{name}: throughput{on}"),
            x_label: x_label.to_string(),
            y_label: format!("throughput (Mbit/s), {statistic}"),
            series,
            references,
            y_from_zero: true,
            ..Chart::default()
        };
        let slug = panel.as_deref().unwrap_or("host").replace(|c: char| !c.is_alphanumeric(), "_");
        out.push((format!("sweep{}-{x_field}-{slug}.svg", sweep.id), chart));
    }
    out
}

fn trace_label(p: &SweepPoint, fields: &[&str]) -> String {
    fields.iter().filter_map(|f| p.get(f).map(|v| shown(f, v))).collect::<Vec<_>>().join(", ")
}

/// The sweep's page for `gridperf report --sweep`: its figures, then a row
/// per point; also every chart as (file name, SVG).
pub fn html(sweep: &SweepRow) -> (String, Vec<(String, String)>) {
    let mut svgs = Vec::new();
    let mut h = String::new();
    let title = match sweep.spec["preset"].as_str() {
        Some(p) => format!("gridperf sweep {} (preset {p})", sweep.id),
        None => format!("gridperf sweep {}", sweep.id),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}\
         .invalid{{background:#fdd}}.charts svg{{margin:0.5em 0;display:block}}code{{background:#f4f4f4}}</style>\
         </head><body>\n<h1>{t}</h1>\n<p><code>{}</code><br>{} points, {}; generated by {}.</p>\n",
        escape(&sweep.command_line),
        sweep.points.len(),
        escape(&sweep.status),
        escape(&crate::host::software()),
        t = escape(&title)
    );
    if sweep.status != "done" {
        let _ = writeln!(
            h,
            "<p class=\"invalid\">This sweep is {}: some points are missing or failed (gridperf stream ... --resume \
             measures them).</p>",
            escape(&sweep.status)
        );
    }
    h.push_str(
        "<p>Dashed: not measured but reckoned. The link's rate; each window's W/RTT, a guide rather than a cap \
         (W the window asked for with -w, which the kernel doubles and makes part of into window, or the maximum \
         autotuned buffers may grow to, of which the kernel keeps part for overhead); a per-packet delay's pacing \
         rate (MTU x 8 / (MTU x 8 / NIC rate + delay)).</p>\n<div class=\"charts\">\n",
    );
    for (name, chart) in charts(sweep) {
        let s = svg::render(&chart, 900, 440);
        h.push_str(&s);
        h.push('\n');
        svgs.push((name, s));
    }
    h.push_str("</div>\n");
    let axes: Vec<Axis> = serde_json::from_value(sweep.spec["axes"].clone()).unwrap_or_default();
    let best = sweep.spec["best"].as_bool().unwrap_or(false);
    let points: Vec<SweepPoint> =
        sweep.points.iter().filter_map(|(_, p)| serde_json::from_value(p.clone()).ok()).collect();
    h.push_str("<table><tr>");
    let fields: Vec<String> = match points.first() {
        Some(p) => p.settings.iter().map(|(f, _)| f.clone()).collect(),
        None => axes.iter().map(|a| a.field.clone()).collect(),
    };
    for f in &fields {
        let _ = write!(h, "<th>{}</th>", escape(f));
    }
    let _ = writeln!(
        h,
        "<th>{}</th><th>runs: least .. most</th><th>verdicts</th></tr>",
        if best { "best" } else { "median" }
    );
    for p in &points {
        let _ = write!(h, "<tr{}>", if p.good() { "" } else { " class=\"invalid\"" });
        for (_, v) in &p.settings {
            let _ = write!(h, "<td>{}</td>", escape(v));
        }
        let figure = if best { p.best_bps } else { p.median_bps };
        let why = match (&p.error, &p.invalid) {
            (Some(e), _) => format!("failed: {e}"),
            (None, Some(i)) => format!("{}; INVALID: {i}", p.verdicts.join(", ")),
            (None, None) => p.verdicts.join(", "),
        };
        let _ = writeln!(
            h,
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&figure.map(fmt_bps).unwrap_or_else(|| "-".into())),
            escape(&spread(p)),
            escape(&why)
        );
    }
    h.push_str("</table>\n</body></html>\n");
    (h, svgs)
}
