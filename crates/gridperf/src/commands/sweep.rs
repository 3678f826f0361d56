//! `gridperf stream --sweep FIELD=LIST ...` (and `--preset`): stream's
//! settings and the lab's, swept over a grid. Every combination is a
//! stream test of its own (stored as such, `--repeat` runs of it, each run
//! marked as the sweep's), run quietly; each point's outcome is stored as
//! it ends, so that `--resume` goes on after an interruption; the table
//! has a row per point with its best or median and the verdict of each
//! run; `gridperf report --sweep ID` draws it.

use super::stream::{measure, Opts};
use super::{Format, Output};
use crate::error::{Error, Result};
use crate::runner::Network;
use crate::store::Store;
use gridperf_core::model::StreamReport;
pub use gridperf_core::model::{Axis, SweepPoint, SWEEP_SCHEMA};
use gridperf_core::units::fmt_bps;
use std::time::Duration;

/// Stream's settings a sweep can vary (the lab's are any field `lab up
/// --set` takes, and any per-namespace net.* sysctl of its hosts).
pub const STREAM_FIELDS: &[&str] = &["w", "pacing", "delay", "gap", "P", "C", "length", "profile", "buffers"];

/// `buffers=NAME`: a kernel's socket buffer limits, set in a lab's hosts
/// (tcp_rmem / tcp_wmem are per network namespace; autotuning stays within
/// their maximum when -w is not given).
pub const BUFFERS: &[(&str, &str, &[&str])] = &[
    (
        "2.6.9",
        "Scientific Linux 4's kernel 2.6.9 as installed (BalticGrid's 'default')",
        &["net.ipv4.tcp_rmem=4096 87380 174760", "net.ipv4.tcp_wmem=4096 16384 131072"],
    ),
    (
        "tuned",
        "BalticGrid's four lines (their rmem_max/wmem_max are global: they cap only -w, which autotuning does not use)",
        &["net.ipv4.tcp_rmem=8192 4369000 8738000", "net.ipv4.tcp_wmem=8192 4369000 8738000"],
    ),
    ("this", "this kernel's own, untouched", &[]),
];

/// A preset: a sweep that reproduces a source document's figure.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub axes: &'static [&'static str],
    /// Each run's sending time, as -t takes it.
    pub time: &'static str,
    pub repeat: u32,
    pub best: bool,
    pub nic_rate: Option<&'static str>,
    pub congestion: Option<&'static str>,
}

/// The documents' sweeps (README: what they show, and how they compare).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "datatag",
        about: "004 DataTAG: throughput against the sender's per-packet delay (0-20 us, as the pacing it implies on \
                the hosts' 1 GbE) for windows of 4-16 MB, over the lambda and the Internet; Reno, as Linux 2.4; \
                best of 5 runs of 5 s",
        axes: &["profile=lambda,internet", "w=4M,8M,12M,16M", "delay=0,5us,10us,15us,20us"],
        time: "5",
        repeat: 5,
        best: true,
        nic_rate: Some("1G"),
        congestion: Some("reno"),
    },
    Preset {
        name: "baltic",
        about: "003 BalticGrid: throughput against RTT (2-35 ms) on a 1 Gbit/s path with a 2.6.9 kernel's buffers, \
                the document's four tuned lines and this kernel's, autotuned (no -w); CUBIC (BIC's successor); \
                median of 3 runs of 5 s",
        axes: &["profile=baltic", "buffers=2.6.9,tuned,this", "rtt=2ms,8ms,15ms,25ms,35ms"],
        time: "5",
        repeat: 3,
        best: false,
        nic_rate: None,
        congestion: Some("cubic"),
    },
];

/// The preset of that name; an unknown one lists them.
pub fn preset(name: &str) -> Result<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        Error::usage(format!("--preset {name}: the presets are {}", names.join(", ")))
    })
}

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
                    r => Some(gridperf_core::lab::cfg::parse_rate_bps(r).map_err(|e| Error::usage(e.to_string()))?),
                }
            }
            "gap" => {
                // microseconds, as the command line normalised it
                let us: u64 = v.trim_end_matches("us").parse().map_err(|_| Error::internal("checked gap"))?;
                spec.gap_us = (us > 0).then_some(us);
            }
            "P" => spec.streams = v.parse().map_err(|_| Error::internal("checked count"))?,
            "buffers" => {
                let (_, _, lines) =
                    BUFFERS.iter().find(|(n, _, _)| n == v).ok_or_else(|| Error::internal("checked buffers"))?;
                match &mut o.place.network {
                    Network::Lab { sets, .. } => sets.extend(lines.iter().map(|l| l.to_string())),
                    _ => {
                        return Err(Error::usage(
                            "--sweep buffers=...: a kernel's buffers are set in a lab's hosts: give --lab PROFILE, or sweep profile=...",
                        ))
                    }
                }
            }
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
            // a lab field, or a sysctl of its hosts (net.*): both go to the lab as sets
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
        let mut s = gridperf_core::lab::cfg::profile(profile).map_err(|e| Error::usage(e.to_string()))?.settings();
        for set in sets.iter().filter(|s| !s.trim_start().starts_with("net.")) {
            gridperf_core::lab::cfg::apply_set(&mut s, set).map_err(|e| Error::usage(e.to_string()))?;
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

/// Runs a lab point again while its emulator marks it INVALID, this many times more.
const RERUNS: u32 = 2;

/// A sweep's points, each as its stream test, and about how long they take.
pub struct Points {
    pub points: Vec<Vec<(String, String)>>,
    pub tests: Vec<Opts>,
    pub estimate: Duration,
}

/// Every point of the sweep `o` asks for, as its stream test: the usage
/// checks of the whole sweep (its size, each point's settings together, a
/// sweep over an hour without --yes), called by `cli/measure.rs` before
/// anything runs, and by [`run`] for the tests.
pub fn points(o: &Opts) -> Result<Points> {
    let points = grid(&o.sweep);
    if points.len() > MAX_POINTS {
        return Err(Error::usage(format!("a sweep of {} points: at most {MAX_POINTS}", points.len())));
    }
    let tests: Vec<Opts> = points.iter().map(|p| apply(o, p)).collect::<Result<_>>()?;
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
    Ok(Points { points, tests, estimate })
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let Points { points, tests, estimate } = points(&o)?;
    let (store, sweep_id, mut done) = begin(&o)?;
    if let Some(w) = cap_warning(&tests) {
        out.note(&w);
    }
    let todo = points.iter().filter(|p| !done.contains_key(&words(p))).count();
    out.note(&format!(
        "gridperf sweep{}: {} points x {} runs{}, about {:.0} s",
        sweep_id.map(|i| format!(" {i}")).unwrap_or_default(),
        points.len(),
        o.stream.repeat,
        match points.len() - todo {
            0 => String::new(),
            n => format!(" ({n} stored: {todo} to go)"),
        },
        estimate.as_secs_f64() * todo as f64 / points.len().max(1) as f64
    ));
    let bar = out.bar();
    bar.set_length(points.len() as u64);
    let mut rows = Vec::new();
    for (idx, (point, test)) in points.iter().zip(&tests).enumerate() {
        let key = words(point);
        if let Some(stored) = done.remove(&key) {
            rows.push(stored);
            bar.inc(1);
            continue;
        }
        bar.set_message(key.clone());
        let mut test = test.clone();
        test.in_sweep = sweep_id;
        let mut quiet = Output::capture(Format::Table);
        let mut result = measure(&test, &mut quiet, false);
        for _ in 0..RERUNS {
            match &result {
                Ok(r) if invalid(r).is_some() => result = measure(&test, &mut quiet, false),
                _ => break,
            }
        }
        let mut shown = point.clone();
        if point.iter().any(|(f, _)| f == "delay") {
            let paced = test.stream.spec.pacing_bps.map(|b| fmt_bps(b as f64)).unwrap_or_else(|| "no".into());
            shown.push(("paced".into(), paced));
        }
        let mut row = match result {
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
                link_bps: None,
                rtt_ns: None,
                window_bytes: None,
                pacing_bps: None,
            },
        };
        (row.link_bps, row.rtt_ns, row.window_bytes) = reference(&test);
        row.pacing_bps = test.stream.spec.pacing_bps;
        if let (Some(s), Some(id)) = (&store, sweep_id) {
            let json = serde_json::to_value(&row).map_err(|e| Error::internal(e.to_string()))?;
            s.put_sweep_point(id, idx, &key, &json)?;
        }
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let failed = rows.iter().filter(|r| !r.good()).count();
    if let (Some(s), Some(id)) = (&store, sweep_id) {
        s.finish_sweep(id, if failed > 0 { "incomplete" } else { "done" })?;
    }
    let doc = serde_json::json!({
        "schema": SWEEP_SCHEMA,
        "sweep_id": sweep_id,
        "preset": o.preset,
        "axes": o.sweep,
        "repeat": o.stream.repeat,
        "points": rows
    });
    out.render(&crate::render::Shown::new(&doc, || crate::render::sweep::table(&o.sweep, &rows, o.best)))?;
    if let Some(id) = sweep_id {
        out.note(&format!("gridperf: stored as sweep {id}: gridperf report --sweep {id} draws it"));
    }
    if failed > 0 {
        return Err(Error::measurement(format!(
            "{failed} of {} points failed or stayed INVALID{}",
            rows.len(),
            if sweep_id.is_some() { " (--resume measures them again)" } else { "" }
        )));
    }
    Ok(())
}

/// What a sweep measures, as stored: a resumed sweep must match it.
fn spec_of(o: &Opts) -> serde_json::Value {
    let network = match &o.place.network {
        Network::Lab { profile, sets } => serde_json::json!({ "lab": profile, "sets": sets }),
        Network::Host { label, .. } => serde_json::json!({ "host": label }),
        Network::Local => serde_json::json!("local"),
    };
    serde_json::json!({
        "preset": o.preset,
        "axes": o.sweep,
        "network": network,
        "stream": o.stream.spec,
        "repeat": o.stream.repeat,
        "best": o.best,
        "nic_rate_bps": o.nic_rate_bps,
        "expect_bps": o.stream.path_rate_bps,
    })
}

/// The store the sweep goes to, its id there, and (resuming) the points
/// it already holds that stand, by key. The default store's troubles are a
/// warning (the sweep runs unstored); a named one's are errors.
#[allow(clippy::type_complexity)]
fn begin(o: &Opts) -> Result<(Option<Store>, Option<i64>, std::collections::HashMap<String, SweepPoint>)> {
    use crate::store::StoreChoice;
    let mut done = std::collections::HashMap::new();
    let store = match &o.store {
        // --resume with --no-store: refused by cli/measure.rs
        StoreChoice::Off => return Ok((None, None, done)),
        c => match Store::open(&c.path()) {
            Ok(s) => s,
            Err(e) if o.resume || matches!(c, StoreChoice::At(_)) => return Err(e),
            Err(e) => {
                eprintln!("gridperf: warning: not storing this sweep: {e} (--no-store to say so, --db PATH to choose)");
                return Ok((None, None, done));
            }
        },
    };
    let spec = spec_of(o);
    let id = if o.resume {
        let id = store.unfinished_sweep(&spec)?.ok_or_else(|| {
            Error::usage(format!(
                "--resume: no unfinished sweep with these settings in {}; run it without --resume",
                store.shown()
            ))
        })?;
        for (key, point) in store.sweep(id)?.points {
            if let Ok(p) = serde_json::from_value::<SweepPoint>(point) {
                if p.good() {
                    done.insert(key, p);
                }
            }
        }
        id
    } else {
        store.begin_sweep(&spec)?
    };
    Ok((Some(store), Some(id), done))
}

/// The reference figures of a point: the lab's bottleneck rate (else
/// --expect's), its round-trip time, and the window: -w, else (autotuned)
/// the smaller of the tcp_rmem and tcp_wmem maxima its lab's hosts have
/// (a buffers= point's, else this host's, which a new namespace copies).
fn reference(o: &Opts) -> (Option<u64>, Option<u64>, Option<u64>) {
    let mut link = o.stream.path_rate_bps;
    let mut rtt = None;
    let mut window = o.stream.spec.window;
    if let Network::Lab { profile, sets } = &o.place.network {
        if let Ok(p) = gridperf_core::lab::cfg::profile(profile) {
            let mut s = p.settings();
            let max = |name: &str| {
                sets.iter()
                    .filter_map(|l| l.strip_prefix(name))
                    .filter_map(|v| v.split_whitespace().nth(2)?.parse::<u64>().ok())
                    .next_back()
            };
            let (r, w) = (max("net.ipv4.tcp_rmem="), max("net.ipv4.tcp_wmem="));
            for set in sets.iter().filter(|s| !s.trim_start().starts_with("net.")) {
                let _ = gridperf_core::lab::cfg::apply_set(&mut s, set);
            }
            link = s.rate_bps.or(link);
            rtt = Some(s.delay_ns * 2);
            if window.is_none() {
                // a lab's hosts start with this host's tcp_rmem / tcp_wmem
                let here = crate::host::tcp_mem_max;
                let (r, w) = (r.or_else(|| here("net.ipv4.tcp_rmem")), w.or_else(|| here("net.ipv4.tcp_wmem")));
                window = match (r, w) {
                    (Some(r), Some(w)) => Some(r.min(w)),
                    (r, w) => r.or(w),
                };
            }
        }
    }
    (link, rtt, window)
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
        median_bps: gridperf_core::analysis::stats::median(&runs_bps),
        runs_bps,
        verdicts,
        invalid: invalid(r),
        error: None,
        link_bps: None,
        rtt_ns: None,
        window_bytes: None,
        pacing_bps: None,
    }
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
