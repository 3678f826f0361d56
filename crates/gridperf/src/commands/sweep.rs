//! `gridperf stream --sweep FIELD=LIST ...`: stream's settings and the
//! lab's, swept over a grid. Every combination is a stream test of its own
//! (stored as such, `--repeat` runs of it), run quietly; the table has a
//! row per point with its best or median and the verdict of each run.

use super::stream::{measure, Opts};
use super::{Format, Output};
use crate::error::{Error, Result};
use crate::runner::Network;
use gridperf_core::model::StreamReport;
use gridperf_core::units::fmt_bps;
use serde::Serialize;
use std::fmt::Write;
use std::time::Duration;

/// The JSON schema of a sweep's output.
pub const SWEEP_SCHEMA: &str = "gridperf.sweep/1";

/// One swept setting and its values, as given (sizes expanded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    pub field: String,
    pub values: Vec<String>,
}

/// Stream's settings a sweep can vary (the lab's are any field `lab up --set` takes).
pub const STREAM_FIELDS: &[&str] = &["w", "pacing", "delay", "gap", "P", "C", "length", "profile"];

/// The most points a sweep may have.
const MAX_POINTS: usize = 10_000;

/// Every combination of the axes' values, the first axis slowest.
pub fn grid(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for a in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((a.field.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

/// The stream test of one point: the base options with its settings.
pub fn apply(base: &Opts, point: &[(String, String)]) -> Result<Opts> {
    let mut o = base.clone();
    o.sweep.clear();
    let spec = &mut o.stream.spec;
    for (field, v) in point {
        match field.as_str() {
            "w" => spec.window = if v == "auto" { None } else { v.parse().ok() },
            "length" => spec.write_size = v.parse().map_err(|_| Error::internal("checked size"))?,
            "pacing" => {
                spec.pacing_bps = match v.as_str() {
                    "0" | "off" => None,
                    r => Some(gridperf_core::labcfg::parse_rate_bps(r).map_err(|e| Error::usage(e.to_string()))?),
                }
            }
            "gap" => {
                // microseconds, as the command line normalised it
                let us: u64 = v.trim_end_matches("us").parse().map_err(|_| Error::internal("checked gap"))?;
                spec.gap_us = (us > 0).then_some(us);
            }
            "P" => spec.streams = v.parse().map_err(|_| Error::internal("checked count"))?,
            "C" => spec.congestion = Some(v.clone()),
            // after the other fields: it needs the link's rate and MTU
            "delay" => {}
            "profile" => {
                let sets = match &o.place.network {
                    Network::Lab { sets, .. } => sets.clone(),
                    _ => Vec::new(),
                };
                o.place.network = Network::Lab { profile: v.clone(), sets };
            }
            lab => match &mut o.place.network {
                Network::Lab { sets, .. } => sets.push(format!("{lab}={v}")),
                _ => {
                    return Err(Error::usage(format!(
                        "--sweep {lab}=...: a lab field needs a lab: give --lab PROFILE, or sweep profile=..."
                    )))
                }
            },
        }
    }
    if let Some((_, v)) = point.iter().find(|(f, _)| f == "delay") {
        let us: u64 = v.trim_end_matches("us").parse().map_err(|_| Error::internal("checked delay"))?;
        // no delay: the unmodified kernel, which does not pace
        o.stream.spec.pacing_bps = match us {
            0 => None,
            _ => {
                let (rate, mtu) = link_of(&o)?;
                Some(delay_pacing(us, rate, mtu))
            }
        };
    }
    crate::engines::stream::validate(&o.stream.spec)
        .map_err(|m| Error::usage(format!("--sweep at {}: {m}", words(point))))?;
    Ok(o)
}

/// The sending rate a per-packet delay implies, as the DataTAG kernel's
/// udelay in the transmit path made it: each MTU-sized packet takes its
/// time on the wire at the link's rate plus the delay, so the sender
/// keeps to `mtu x 8 / (mtu x 8 / rate + delay)` bits per second. The
/// rate is the sender's NIC's (--nic-rate: DataTAG's 1 GbE hosts on a 622
/// Mbit/s lambda), else the lab's bottleneck, else --expect's. (A sleep
/// between the application's large writes, --gap, is another thing.)
pub fn delay_pacing(delay_us: u64, rate_bps: u64, mtu: u32) -> u64 {
    let bits = f64::from(mtu) * 8.0;
    (bits / (bits / rate_bps as f64 + delay_us as f64 * 1e-6)).round() as u64
}

/// The link a delay is reckoned against: the lab's bottleneck rate and MTU
/// (or --expect's rate and 1500 bytes off the lab).
fn link_of(o: &Opts) -> Result<(u64, u32)> {
    if let Network::Lab { profile, sets } = &o.place.network {
        let mut s = gridperf_core::labcfg::profile(profile).map_err(|e| Error::usage(e.to_string()))?.settings();
        for set in sets {
            gridperf_core::labcfg::apply_set(&mut s, set).map_err(|e| Error::usage(e.to_string()))?;
        }
        if let Some(r) = o.nic_rate_bps.or(s.rate_bps) {
            return Ok((r, s.mtu));
        }
    }
    if let Some(r) = o.nic_rate_bps {
        return Ok((r, 1500));
    }
    o.stream.path_rate_bps.map(|r| (r, 1500)).ok_or_else(|| {
        Error::usage("--sweep delay=...: a per-packet delay is reckoned against the sender's NIC rate: give --nic-rate RATE (or --lab with a rate, or --expect RATE)")
    })
}

fn words(point: &[(String, String)]) -> String {
    point.iter().map(|(f, v)| format!("{f}={v}")).collect::<Vec<_>>().join(" ")
}

/// One point's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub settings: Vec<(String, String)>,
    /// Each run's throughput, both directions summed, bits per second.
    pub runs_bps: Vec<f64>,
    pub best_bps: Option<f64>,
    pub median_bps: Option<f64>,
    /// Each run's verdict: what limited its first stream.
    pub verdicts: Vec<String>,
    /// Why the lab's emulator could not vouch for it (after reruns), if so.
    pub invalid: Option<String>,
    pub error: Option<String>,
}

/// Runs a lab point again while its emulator marks it INVALID, this many times more.
const RERUNS: u32 = 2;

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let points = grid(&o.sweep);
    if points.len() > MAX_POINTS {
        return Err(Error::usage(format!("a sweep of {} points: at most {MAX_POINTS}", points.len())));
    }
    // every point checked before the first runs
    let tests: Vec<Opts> = points.iter().map(|p| apply(&o, p)).collect::<Result<_>>()?;
    let per_run = Duration::from_millis(o.stream.spec.omit_ms + o.stream.spec.duration_ms + 300);
    let lab = if tests.iter().any(|t| matches!(t.place.network, Network::Lab { .. })) { 2 } else { 0 };
    let estimate = (per_run * o.stream.repeat + Duration::from_secs(lab)) * points.len() as u32;
    if estimate > Duration::from_secs(3600) && !o.yes {
        return Err(Error::usage(format!(
            "a sweep of {} points x {} runs would take about {:.1} hours: give --yes to go ahead",
            points.len(),
            o.stream.repeat,
            estimate.as_secs_f64() / 3600.0
        )));
    }
    if let Some(w) = cap_warning(&tests) {
        out.note(&w);
    }
    out.note(&format!(
        "gridperf sweep: {} points x {} runs, about {:.0} s",
        points.len(),
        o.stream.repeat,
        estimate.as_secs_f64()
    ));
    let bar = out.bar();
    bar.set_length(points.len() as u64);
    let mut rows = Vec::new();
    for (point, test) in points.iter().zip(&tests) {
        bar.set_message(words(point));
        let mut quiet = Output::capture(Format::Table);
        let mut result = measure(test, &mut quiet, false);
        for _ in 0..RERUNS {
            match &result {
                Ok(r) if invalid(r).is_some() => result = measure(test, &mut quiet, false),
                _ => break,
            }
        }
        let mut shown = point.clone();
        if point.iter().any(|(f, _)| f == "delay") {
            let paced = test.stream.spec.pacing_bps.map(|b| fmt_bps(b as f64)).unwrap_or_else(|| "no".into());
            shown.push(("paced".into(), paced));
        }
        rows.push(match result {
            Ok(r) => point_of(&shown, &r),
            Err(e) if e.kind == crate::error::Kind::Usage => return Err(e),
            Err(e) => SweepPoint {
                settings: shown.clone(),
                runs_bps: Vec::new(),
                best_bps: None,
                median_bps: None,
                verdicts: Vec::new(),
                invalid: None,
                error: Some(e.to_string()),
            },
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    if o.json {
        out.json(
            &serde_json::json!({ "schema": SWEEP_SCHEMA, "axes": o.sweep, "repeat": o.stream.repeat, "points": rows }),
        )?;
    } else {
        out.print(&table(&o.sweep, &rows, o.best))?;
    }
    let failed = rows.iter().filter(|r| r.error.is_some() || r.invalid.is_some()).count();
    if failed > 0 {
        return Err(Error::measurement(format!("{failed} of {} points failed or stayed INVALID", rows.len())));
    }
    Ok(())
}

/// The one warning, before a sweep starts, for windows beyond what this
/// host's kernel grants a socket (SO_SNDBUF/SO_RCVBUF are capped at
/// net.core.wmem_max/rmem_max, global settings a lab's hosts share).
fn cap_warning(tests: &[Opts]) -> Option<String> {
    let widest = tests.iter().filter_map(|t| t.stream.spec.window).max()?;
    let max = |k: &str| crate::host::sysctl(k).and_then(|v| v.trim().parse::<u64>().ok());
    let (r, w) = (max("net.core.rmem_max")?, max("net.core.wmem_max")?);
    let cap = r.min(w);
    (widest > cap).then(|| {
        format!(
            "gridperf sweep: warning: windows up to {widest} bytes, but this kernel grants a socket at most \
             net.core.rmem_max {r} / wmem_max {w}: the larger windows will be capped (their points look alike); \
             raise them first: sudo sysctl -w net.core.rmem_max={widest} net.core.wmem_max={widest}"
        )
    })
}

fn invalid(r: &StreamReport) -> Option<String> {
    r.runs.iter().find_map(|run| run.env.lab.as_ref().and_then(|l| l.invalid.clone()))
}

fn point_of(settings: &[(String, String)], r: &StreamReport) -> SweepPoint {
    let runs_bps: Vec<f64> = r.runs.iter().map(|run| run.up_bps.unwrap_or(0.0) + run.down_bps.unwrap_or(0.0)).collect();
    let verdicts = r
        .runs
        .iter()
        .map(|run| {
            run.streams
                .first()
                .and_then(|s| s.verdict.as_ref())
                .and_then(|v| serde_json::to_value(v.limit).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "-".into())
        })
        .collect();
    SweepPoint {
        settings: settings.to_vec(),
        best_bps: runs_bps.iter().copied().reduce(f64::max),
        median_bps: gridperf_core::stats::median(&runs_bps),
        runs_bps,
        verdicts,
        invalid: invalid(r),
        error: None,
    }
}

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
            Some(e) => {
                cells.push(format!("failed: {e}"));
            }
            None => {
                let shown = if best { r.best_bps } else { r.median_bps };
                cells.push(format!("{:>14}", shown.map(fmt_bps).unwrap_or_else(|| "-".into())));
                let lo = r.runs_bps.iter().copied().reduce(f64::min);
                let spread = match (lo, r.best_bps) {
                    (Some(a), Some(b)) => format!("{} .. {}", fmt_bps(a), fmt_bps(b)),
                    _ => "-".into(),
                };
                cells.push(format!("{spread:>26}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_packet_delay_is_the_rate_it_leaves_the_link() {
        // 1500-byte packets at 1 Gbit/s take 12 us; 5 us more each: 1500 x 8 / 17 us
        assert_eq!(delay_pacing(5, 1_000_000_000, 1500), 705_882_353);
        assert_eq!(delay_pacing(0, 1_000_000_000, 1500), 1_000_000_000);
        // at 10 Gbit/s the same delay matters far more: 1.2 us on the wire
        assert_eq!(delay_pacing(5, 10_000_000_000, 1500), 1_935_483_871);
    }

    #[test]
    fn the_grid_is_every_combination_first_axis_slowest() {
        let a = Axis { field: "w".into(), values: vec!["1".into(), "2".into()] };
        let b = Axis { field: "P".into(), values: vec!["1".into(), "2".into(), "3".into()] };
        let g = grid(&[a, b]);
        assert_eq!(g.len(), 6);
        assert_eq!(g[0], [("w".to_string(), "1".to_string()), ("P".to_string(), "1".to_string())]);
        assert_eq!(g[3], [("w".to_string(), "2".to_string()), ("P".to_string(), "1".to_string())]);
    }
}
