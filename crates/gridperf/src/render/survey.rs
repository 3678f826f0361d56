//! The survey's conclusions as text: which protocol is best where (the
//! first document's Fig. 6f) and where a curve jumps or changes slope,
//! from the stored rtt runs. The report draws the same analysis.

use crate::store::{PointRow, RunRow};
use gridperf_core::analysis::survey::{
    best_protocol_with, thresholds, BestRange, Curve, CurvePoint, Threshold, ThresholdKind,
};
use gridperf_core::model::Measure;
use gridperf_core::units::{fmt_bytes, fmt_ns};
use std::fmt::Write;

/// One network's RTT curves, best-protocol ranges and thresholds (in
/// `survey --json` without the curves, which `runs export` gives).
#[derive(serde::Serialize)]
pub struct NetworkAnalysis {
    /// The run analysed: each run on its own, never two merged.
    pub run: i64,
    /// The network's name; "loopback (run 12)" when the runs analysed
    /// together hold more than one run of it.
    pub network: String,
    pub mtu: Option<u32>,
    /// Every point with a median (what the plots draw).
    #[serde(skip)]
    pub curves: Vec<Curve>,
    pub best: Vec<BestRange>,
    pub thresholds: Vec<Threshold>,
    pub invalid: Option<String>,
    /// Points left out of the conclusions.
    pub excluded: Vec<Excluded>,
    /// Points that lost messages (UDP): their median is over what came back.
    pub lost: Vec<Lost>,
    /// How busy the machine was with other tasks while the run measured.
    pub load: Option<gridperf_core::model::MachineLoad>,
    /// Sizes measured (every protocol's), for "too busy to tell".
    pub sizes: usize,
}

/// A point that lost messages.
#[derive(serde::Serialize)]
pub struct Lost {
    pub proto: String,
    pub size: u64,
    pub lost: u64,
    pub sent: u64,
}

/// Messages a stored point sent and lost, when it lost any.
fn lost_of(p: &PointRow) -> Option<Lost> {
    let get = |k: &str| p.figures.get(k).and_then(|v| v.as_u64());
    let (lost, sent) = (get("lost")?, get("sent")?);
    (lost > 0).then(|| Lost { proto: p.proto.clone(), size: p.size, lost, sent })
}

/// Why a stored point is not in the conclusions, if it is not: no reply at
/// all, or a shape one median does not describe.
fn left_out(p: &PointRow) -> Option<String> {
    if p.median_ns.is_none() {
        return Some(match lost_of(p) {
            Some(l) if l.lost >= l.sent => format!("no reply: every message lost ({} of {})", l.lost, l.sent),
            _ => "no reply".into(),
        });
    }
    irregular(p)
}

/// A point the conclusions do not rest on, and why.
#[derive(serde::Serialize)]
pub struct Excluded {
    pub proto: String,
    pub size: u64,
    pub why: String,
}

/// Why a stored point's median does not describe it, if it does not.
pub fn irregular(p: &PointRow) -> Option<String> {
    let why: gridperf_core::analysis::shape::Irregular =
        serde_json::from_value(p.figures.get("irregular")?.clone()).ok()?;
    let retries = p.figures.get("retries").and_then(|r| r.as_u64()).unwrap_or(0);
    Some(if retries > 0 { format!("{}, measured {} times", why.describe(), retries + 1) } else { why.describe() })
}

/// A stored point as a curve point: median, quartiles, round medians, samples.
fn curve_point(p: &PointRow) -> Option<CurvePoint> {
    let rounds: Vec<f64> = p
        .figures
        .get("rounds_ns")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default();
    Some(CurvePoint {
        rounds_ns: rounds,
        samples_ns: p.samples.clone().unwrap_or_default(),
        ..CurvePoint::new(p.size, p.median_ns?, p.q1_ns?, p.q3_ns?)
    })
}

/// The curves of the points that the conclusions may rest on.
fn regular(points: &[PointRow]) -> Vec<Curve> {
    let kept: Vec<PointRow> = points.iter().filter(|p| irregular(p).is_none()).cloned().collect();
    curves(&kept)
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
            let mut pts: Vec<CurvePoint> =
                points.iter().filter(|p| p.proto == *proto).filter_map(curve_point).collect();
            pts.sort_by_key(|p| p.size);
            Curve { proto: proto.to_string(), points: pts }
        })
        .filter(|c| !c.points.is_empty())
        .collect()
}

/// Analyses every rtt run.
pub fn analyse(runs: &[(RunRow, Vec<PointRow>)]) -> Vec<NetworkAnalysis> {
    let rtt = || runs.iter().filter(|(r, _)| r.measure() == Some(Measure::Rtt));
    rtt()
        .map(|(r, pts)| {
            let twice = rtt().filter(|(o, _)| o.network == r.network).count() > 1;
            let kept = regular(pts);
            let unknown: Vec<(&str, u64)> =
                pts.iter().filter(|p| irregular(p).is_some()).map(|p| (p.proto.as_str(), p.size)).collect();
            let best = best_protocol_with(&kept, &unknown);
            let mut th: Vec<Threshold> = kept.iter().flat_map(|c| thresholds(c, r.mtu)).collect();
            th.sort_by_key(|t| t.size);
            NetworkAnalysis {
                run: r.id,
                network: if twice { format!("{} (run {})", r.network, r.id) } else { r.network.clone() },
                mtu: r.mtu,
                curves: curves(pts),
                best,
                thresholds: th,
                invalid: r.invalid.clone(),
                excluded: pts
                    .iter()
                    .filter_map(|p| Some(Excluded { proto: p.proto.clone(), size: p.size, why: left_out(p)? }))
                    .collect(),
                lost: pts.iter().filter(|p| p.median_ns.is_some()).filter_map(lost_of).collect(),
                load: r.env.as_ref().and_then(|e| e.load.clone()),
                sizes: {
                    let mut s: Vec<u64> = pts.iter().map(|p| p.size).collect();
                    s.sort_unstable();
                    s.dedup();
                    s.len()
                },
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

/// The best protocol's words: "udp", or "tie: tcp = udp" (a tie's members
/// in one fixed order, tcp, udp, sendfile: their order within it is noise).
pub fn best_words(b: &BestRange) -> String {
    if b.tie {
        let rank = |n: &str| ["tcp", "udp", "sendfile"].iter().position(|p| *p == n).unwrap_or(3);
        let mut names: Vec<&str> = b.best.iter().map(String::as_str).collect();
        names.sort_by_key(|n| (rank(n), n.to_string()));
        format!("tie: {}", names.join(" = "))
    } else {
        b.best.join("")
    }
}

/// By how much, against whom, how sure: "22.4% faster than tcp (95%
/// interval 20.1 .. 24.7%)", or what a tie means.
pub fn margin_words(b: &BestRange) -> String {
    if b.tie {
        let none = format!(
            "no difference beyond {}% shown (95%)",
            (gridperf_core::analysis::compare::NEGLIGIBLE * 100.0) as u32
        );
        return match (&b.over, b.interval) {
            (Some(o), Some((lo, hi))) => format!(
                "{none}; {o} {:.1}% slower (95% interval{} {:.1} .. {:.1}%)",
                b.margin * 100.0,
                if b.from == b.to { "" } else { "s within" },
                lo * 100.0,
                hi * 100.0
            ),
            (Some(o), None) => format!("{none}; {o} {:.1}% slower", b.margin * 100.0),
            _ => none,
        };
    }
    let over = b.over.as_deref().map(|o| format!(" than {o}")).unwrap_or_default();
    match b.interval {
        Some((lo, hi)) => format!(
            "{:.1}% faster{over} (95% interval{} {:.1} .. {:.1}%)",
            b.margin * 100.0,
            if b.from == b.to { "" } else { "s within" },
            lo * 100.0,
            hi * 100.0
        ),
        None => format!("{:.1}% faster{over} (no interval: the points kept no rounds or samples)", b.margin * 100.0),
    }
}

/// What the best protocols of a range lost there: "; udp lost 6 of 37
/// messages (its median is of those that came back)", or nothing.
pub fn loss_words(a: &NetworkAnalysis, b: &BestRange) -> String {
    let mut out = String::new();
    for name in &b.best {
        let here: Vec<&Lost> =
            a.lost.iter().filter(|l| &l.proto == name && (b.from..=b.to).contains(&l.size)).collect();
        let (lost, sent) = here.iter().fold((0, 0), |(l, s), x| (l + x.lost, s + x.sent));
        if lost > 0 {
            let _ = write!(out, "; {name} lost {lost} of the {sent} messages sent at {} of these sizes", here.len());
        }
    }
    if !out.is_empty() {
        out.push_str(" (a median of what came back)");
    }
    out
}

/// One row of the best-protocol table: a claim over a range of sizes, a
/// size left out (where no claim is made), or the network's INVALID mark.
#[derive(Debug, Clone, PartialEq)]
pub struct BestRow {
    /// The network, marked "(INVALID)" when its run is.
    pub network: String,
    pub sizes: String,
    pub best: String,
    pub by: String,
}

/// A network's rows, in the order of their sizes: its INVALID mark first
/// (each of its claims rests on a run the emulator could not keep up
/// with), then its claims and its left-out sizes, each in its place.
pub fn best_rows(a: &NetworkAnalysis) -> Vec<BestRow> {
    let network = if a.invalid.is_some() { format!("{} (INVALID)", a.network) } else { a.network.clone() };
    let mut rows: Vec<(u64, BestRow)> = Vec::new();
    if let Some(why) = &a.invalid {
        rows.push((
            0,
            BestRow { network: network.clone(), sizes: "-".into(), best: "INVALID run".into(), by: why.clone() },
        ));
    }
    let mut left: Vec<u64> = a.excluded.iter().map(|e| e.size).collect();
    left.sort_unstable();
    left.dedup();
    if let Some(load) = a.load.as_ref().filter(|l| l.busy_machine()) {
        // a busy machine is said, and where it left out many sizes, said plainly
        let too_busy = a.sizes > 0 && left.len() * 4 >= a.sizes;
        rows.push((
            0,
            BestRow {
                network: network.clone(),
                sizes: "-".into(),
                best: if too_busy { "too busy to tell".into() } else { "busy machine".into() },
                by: if too_busy {
                    format!(
                        "this machine was too busy to tell at {} of {} sizes ({} while it measured); measure again \
                         on a quieter machine",
                        left.len(),
                        a.sizes,
                        load.describe()
                    )
                } else {
                    format!("{} while it measured: these figures carry that load", load.describe())
                },
            },
        ));
    }
    for b in &a.best {
        rows.push((
            b.from,
            BestRow {
                network: network.clone(),
                sizes: range_text(b),
                best: best_words(b),
                by: format!("{}{}", margin_words(b), loss_words(a, b)),
            },
        ));
    }
    for size in left {
        let why: Vec<String> =
            a.excluded.iter().filter(|e| e.size == size).map(|e| format!("{} {}", e.proto, e.why)).collect();
        rows.push((
            size,
            BestRow { network: network.clone(), sizes: fmt_bytes(size), best: "left out".into(), by: why.join("; ") },
        ));
    }
    rows.sort_by_key(|(size, r)| (*size, r.best != "INVALID run", r.sizes != "-"));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The best-protocol table as text, for the terminal.
pub fn best_table_text(all: &[NetworkAnalysis]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<14} {:<22} {:<22} by", "network", "message size", "best RTT");
    for a in all {
        for r in best_rows(a) {
            let _ = writeln!(out, "{:<14} {:<22} {:<22} {}", r.network, r.sizes, r.best, r.by);
        }
    }
    let _ = writeln!(
        out,
        "\nA protocol is faster only where the 95% interval of the difference lies wholly beyond {}%: the interval\n\
         comes from the rounds each point was measured in (the protocols taking turns), so it holds what drifts\n\
         from second to second. A tie means no difference beyond that was shown, not that there is none. A size\n\
         left out (a median does not describe it) carries no claim, and no range spans it. A network marked\n\
         INVALID was measured through an emulator that fell behind: its rows are not the network's.",
        (gridperf_core::analysis::compare::NEGLIGIBLE * 100.0) as u32
    );
    out
}

/// The thresholds as text, each with its evidence.
pub fn thresholds_text(all: &[NetworkAnalysis]) -> String {
    let mut out = String::new();
    for a in all {
        for t in &a.thresholds {
            let _ = writeln!(out, "{:<14} {}", a.network, threshold_words(t));
            if !t.evidence.is_empty() {
                let _ = writeln!(out, "{:<14}   {}", "", t.evidence);
            }
        }
    }
    out
}

pub fn threshold_words(t: &Threshold) -> String {
    // a multiple of a 64 KiB loopback MTU says nothing: shown from half an MTU on
    let mtu = t.mtu_multiple.filter(|m| *m >= 0.5).map(|m| format!(" ({m:.1} x MTU)")).unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: u64, to: u64, best: &str) -> BestRange {
        BestRange {
            from,
            to,
            best: vec![best.into()],
            tie: false,
            margin: 0.2,
            over: Some("tcp".into()),
            interval: Some((0.1, 0.3)),
        }
    }

    #[test]
    fn an_invalid_network_is_marked_on_every_row_and_a_left_out_size_sits_in_its_place() {
        let a = NetworkAnalysis {
            run: 1,
            network: "man".into(),
            mtu: Some(1500),
            curves: Vec::new(),
            best: vec![range(1, 512, "udp"), range(2048, 8192, "udp")],
            thresholds: Vec::new(),
            invalid: Some("the emulator was 23 ms behind".into()),
            excluded: vec![Excluded { proto: "tcp".into(), size: 1024, why: "2 modes".into() }],
            lost: Vec::new(),
            load: None,
            sizes: 8,
        };
        let rows = best_rows(&a);
        let cells: Vec<(&str, &str, &str)> =
            rows.iter().map(|r| (r.network.as_str(), r.sizes.as_str(), r.best.as_str())).collect();
        assert_eq!(
            cells,
            vec![
                ("man (INVALID)", "-", "INVALID run"),
                ("man (INVALID)", "1 B - 512 B", "udp"),
                ("man (INVALID)", "1 KiB", "left out"),
                ("man (INVALID)", "2 KiB - 8 KiB", "udp"),
            ]
        );
        assert!(rows[2].by.contains("tcp 2 modes"));
        // no claim is printed without its interval
        assert!(rows.iter().filter(|r| r.best == "udp").all(|r| r.by.contains("95% interval")));
    }

    #[test]
    fn a_busy_machine_is_said_and_too_busy_to_tell_when_it_left_out_a_quarter() {
        let load = gridperf_core::model::MachineLoad {
            cpus: 2,
            wall_s: 20.0,
            busy: 0.99,
            ours: 0.45,
            others: 0.54,
            steal: 0.01,
            runnable: 3,
        };
        let mut a = NetworkAnalysis {
            run: 1,
            network: "loopback".into(),
            mtu: Some(65536),
            curves: Vec::new(),
            best: vec![range(1, 512, "udp")],
            thresholds: Vec::new(),
            invalid: None,
            excluded: vec![Excluded { proto: "tcp".into(), size: 1024, why: "2 modes".into() }],
            lost: Vec::new(),
            load: Some(load.clone()),
            sizes: 8,
        };
        let rows = best_rows(&a);
        assert_eq!((rows[0].sizes.as_str(), rows[0].best.as_str()), ("-", "busy machine"), "{rows:?}");
        assert!(rows[0].by.contains("other tasks took 54% of the 2 CPUs"), "{}", rows[0].by);
        // two of eight sizes left out: a quarter, too busy to tell
        a.excluded.push(Excluded { proto: "udp".into(), size: 2048, why: "drifts".into() });
        let rows = best_rows(&a);
        assert_eq!(rows[0].best, "too busy to tell");
        assert!(rows[0].by.contains("at 2 of 8 sizes"), "{}", rows[0].by);
        // a quiet machine says nothing of it
        a.load = Some(gridperf_core::model::MachineLoad { others: 0.05, steal: 0.0, ..load });
        assert!(best_rows(&a).iter().all(|r| r.sizes != "-"));
    }
}
