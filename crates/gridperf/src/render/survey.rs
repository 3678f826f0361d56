//! The survey's conclusions as text: which protocol is best where (the
//! first document's Fig. 6f) and where a curve jumps or changes slope,
//! from the stored rtt runs. The report draws the same analysis.

use crate::store::{PointRow, RunRow};
use gridperf_core::model::Measure;
use gridperf_core::survey::{best_protocol, thresholds, BestRange, Curve, CurvePoint, Threshold, ThresholdKind};
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
        .filter(|(r, _)| r.measure() == Some(Measure::Rtt))
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

pub fn range_text(b: &BestRange) -> String {
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

pub fn threshold_words(t: &Threshold) -> String {
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
