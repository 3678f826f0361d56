//! `gridperf survey`: the main job. For each network (a lab profile
//! brought up for it, a remote agent, or loopback), rtt and transfer for
//! TCP, UDP and sendfile over a size sweep, every point written to the store
//! as it is measured; then the report and the best-protocol table. An
//! interrupted survey goes on with `--resume`, skipping the stored points.

use super::{Format, Output};
use crate::engines::rtt::{self, RttOptions};
use crate::engines::transfer::{self, TransferOptions};
use crate::engines::{EchoOptions, Progress};
use crate::error::{Error, Result};
use crate::render;
use crate::runner::{Deadlines, Network};
use crate::store::{NewRun, Recorder, RunFilter, Store};
use gridperf_core::model::Measure;
use gridperf_core::plan::Proto;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

/// The first document's networks, in its order.
pub const DOCUMENT_PROFILES: &[&str] = &["loopback", "crossover-fe", "lan-gige", "man", "wan"];
/// A quick survey's sizes: around the MTU multiples, up to 64000 B.
pub const QUICK_SIZES: &str = "1,64,256,512,1k,1400,1460,1500,2k,2800,3k,4k,8k,16k,32k,64000";
/// A full survey's: the document's 1 B, then 128 B to 64000 B every 128 B
/// (thinned to every 512 B above 8 KiB, where the curves are straight).
pub const FULL_SIZES: &str = "1,128..8k+128,8704..64000+512,64000";

/// What a survey measures; stored with it, so that --resume finds it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveySpec {
    pub networks: Vec<Network>,
    pub protos: Vec<Proto>,
    pub sizes: Vec<u64>,
    pub quick: bool,
    /// Transfer sizes (a few: the Table 1 loop is long at small sizes).
    pub transfer_sizes: Vec<u64>,
    pub transfer_total: u64,
}

/// Where the survey is, for the progress bar.
#[derive(Debug, Clone)]
pub struct SurveyProgress {
    pub done: usize,
    pub total: usize,
    pub network: String,
    pub what: String,
}

/// What came out: the survey's id and its runs.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub survey: i64,
    pub runs: Vec<i64>,
    /// Networks that could not be measured, and why (the others stand).
    pub failed: Vec<(String, String)>,
}

/// The one-way delay and rate a profile sets (for time budgets).
fn profile_path(profile: &str) -> (Duration, Option<u64>) {
    match gridperf_core::labcfg::profile(profile).ok().and_then(|p| p.settings().link_config().ok()) {
        Some(l) => (Duration::from_nanos(l.delay_ns), l.rate_bps),
        None => (Duration::ZERO, None),
    }
}

/// Each point's time budget: enough round trips for quartiles on a long
/// path, without letting a WAN point take minutes.
fn budget(quick: bool, rtt: Duration) -> Duration {
    let (k, lo, hi) = if quick { (20, 0.25, 3.0) } else { (100, 1.0, 20.0) };
    Duration::from_secs_f64((rtt.as_secs_f64() * k as f64).clamp(lo, hi))
}

/// How many rounds a point is measured in: a round should hold about ten
/// round trips or more (each round's steps cost two control round trips),
/// and there are at least three, so that comparisons have replicates.
fn rounds_for(budget: Duration, rtt: Duration) -> u32 {
    let fit = budget.as_secs_f64() / (10.0 * rtt.as_secs_f64()).max(1e-6);
    (fit.floor() as u32).clamp(MIN_ROUNDS, MAX_ROUNDS)
}

/// Rounds per point, at most and at least.
pub const MAX_ROUNDS: u32 = 6;
pub const MIN_ROUNDS: u32 = gridperf_core::compare::MIN_ROUNDS as u32;
/// Times a size is measured again while one of its points is irregular.
pub const RETRIES: u32 = 2;

/// Where the two ends of a network's exchanges run. Ping-pong on a small
/// machine is fast and steady with both ends on one CPU, and lands on one
/// CPU or across two (5x apart) when left to the scheduler: the loopback
/// runs put both ends on this process's first CPU. Across the lab the
/// packets pass through the emulator anyway: the client on the first CPU,
/// the agent on the second (the steadier placement measured here), the
/// emulator where the scheduler puts it. A remote agent is left where it
/// is; the client is pinned.
pub fn placement(net: &Network) -> (Option<usize>, Option<usize>) {
    let cpus = crate::host::cpus();
    let (first, second) = (cpus.first().copied(), cpus.get(1).or(cpus.first()).copied());
    match net {
        Network::Local => (first, first),
        Network::Lab { profile, .. } if profile == "loopback" => (first, first),
        Network::Lab { .. } => (first, second),
        Network::Host { .. } => (first, None),
    }
}

fn echo_options(spec: &SurveySpec, sizes: Vec<u64>, one_way: Duration, rate: Option<u64>, note: String) -> EchoOptions {
    // a message's time on the path, both ways, and the round trip, with room
    let biggest = sizes.iter().copied().max().unwrap_or(1);
    let wire = rate.map(|r| Duration::from_secs_f64(biggest as f64 * 8.0 / r as f64 * 2.0)).unwrap_or_default();
    let deadlines = Deadlines {
        connect: Duration::from_secs(5),
        control: Duration::from_secs(10),
        message: (one_way * 4 + wire * 2).max(Duration::from_secs(1)),
        queue: Duration::ZERO,
    };
    EchoOptions {
        warmup_time: Duration::from_millis(250),
        notes: vec![note],
        ..EchoOptions::plain(spec.protos.clone(), sizes, deadlines)
    }
}

/// Runs the survey (or resumes one: the same spec, the points already
/// stored skipped).
pub fn survey(
    store: &Store,
    spec: &SurveySpec,
    resume: bool,
    progress: &mut dyn FnMut(&SurveyProgress),
) -> Result<Outcome> {
    let spec_json = serde_json::to_value(spec).map_err(|e| Error::internal(e.to_string()))?;
    let survey = match resume.then(|| store.unfinished_survey(&spec_json)).transpose()?.flatten() {
        Some(id) => id,
        None if resume => {
            return Err(Error::usage(
                "--resume: no unfinished survey with these settings in the store; run it without --resume",
            ))
        }
        None => store.begin_survey(&spec_json)?,
    };
    let per_network = spec.protos.len() * (spec.sizes.len() + spec.transfer_sizes.len());
    let total = per_network * spec.networks.len();
    let mut out = Outcome { survey, runs: Vec::new(), failed: Vec::new() };
    let mut done = 0usize;
    for net in &spec.networks {
        let name = net.name();
        let base = done;
        let r = survey_network(&store.path, spec, survey, net, &mut |d, what| {
            done = base + d;
            progress(&SurveyProgress { done, total, network: name.clone(), what: what.to_string() })
        });
        done = base + per_network;
        match r {
            Ok(runs) => out.runs.extend(runs),
            Err(e) if e.kind == crate::error::Kind::Usage => return Err(e),
            Err(e) => out.failed.push((name, e.to_string())),
        }
    }
    store.finish_survey(survey, if out.failed.is_empty() { "done" } else { "partial" })?;
    Ok(out)
}

fn survey_network(
    db: &std::path::Path,
    spec: &SurveySpec,
    survey: i64,
    net: &Network,
    progress: &mut dyn FnMut(usize, &str),
) -> Result<Vec<i64>> {
    let name = net.name();
    let target = net.target();
    // the runs of this network, new or (resuming) begun before
    let run_for = |kind: Measure, settings: serde_json::Value, mtu: Option<u32>| -> Result<Recorder> {
        Recorder::in_survey(
            db,
            &NewRun {
                survey_id: Some(survey),
                sweep_id: None,
                kind,
                network: &name,
                target: &target,
                settings,
                lab_profile: net.lab_profile(),
                mtu,
            },
        )
    };
    let (one_way, rate, mtu) = match net {
        Network::Lab { profile, .. } => {
            let (d, r) = profile_path(profile);
            let mtu = gridperf_core::labcfg::profile(profile).ok().map(|p| p.settings().mtu);
            (d, r, if profile == "loopback" { Some(65536) } else { mtu })
        }
        // this host's lo, whose MTU the MTU multiples are of
        Network::Local => (Duration::ZERO, None, gridperf_sys::link_mtu("lo").ok()),
        Network::Host { .. } => (Duration::ZERO, None, None),
    };
    let note = format!("survey {survey}, network {name}");
    let (client_cpu, server_cpu) = placement(net);
    let point_budget = budget(spec.quick, one_way * 2);
    let rtt_opts = RttOptions {
        echo: EchoOptions {
            client_cpu,
            server_cpu,
            ..echo_options(spec, spec.sizes.clone(), one_way, rate, note.clone())
        },
        iterations: 0,
        duration: Some(point_budget),
        warmup: 5,
        keep_samples: true,
        rounds: rounds_for(point_budget, one_way * 2),
        retries: RETRIES,
    };
    let mut rtt_rec = run_for(Measure::Rtt, serde_json::to_value(rtt::settings(&rtt_opts)).unwrap_or_default(), mtu)?;
    let tr_opts = TransferOptions {
        echo: EchoOptions {
            client_cpu,
            server_cpu,
            ..echo_options(spec, spec.transfer_sizes.clone(), one_way, rate, note)
        },
        total: spec.transfer_total,
        repeat: if spec.quick { 3 } else { 10 },
        warmup_runs: 1,
    };
    let mut tr_rec = if spec.transfer_sizes.is_empty() {
        None
    } else {
        Some(run_for(Measure::Transfer, serde_json::to_value(transfer::settings(&tr_opts)).unwrap_or_default(), mtu)?)
    };
    let runs: Vec<i64> = [rtt_rec.run_id(), tr_rec.as_ref().and_then(|r| r.run_id())].into_iter().flatten().collect();
    let left = |rec: &Recorder, sizes: &[u64]| {
        spec.protos.iter().flat_map(|&p| sizes.iter().map(move |&s| (p, s))).any(|(p, s)| !rec.has(p.name(), s, ""))
    };
    let rtt_left = left(&rtt_rec, &spec.sizes);
    let tr_left = tr_rec.as_ref().is_some_and(|r| left(r, &spec.transfer_sizes));
    if !rtt_left && !tr_left {
        return Ok(runs);
    }
    // the network made ready (a lab brought up for it, taken down when this returns)
    if let Network::Lab { profile, .. } = net {
        crate::host::may_make_namespaces(&format!("the survey's lab for {profile}")).map_err(without_lab)?;
        progress(0, "bringing the lab up");
    }
    let prepared = net.prepare("sv", None, Default::default())?;
    let mut n = 0usize;
    // a resumed run skips the points it holds; each new point is written as it ends
    if rtt_left {
        let rec = RefCell::new(&mut rtt_rec);
        let result = rtt::run_with(
            &prepared.target,
            &rtt_opts,
            &mut |p: Progress| progress(n + p.done, &format!("rtt {} {} B", p.proto, p.size)),
            &|p: Proto, s: u64| rec.borrow().has(p.name(), s, ""),
            &mut |p| rec.borrow_mut().point(p),
        );
        rtt_rec.finish(result.as_ref().map(|r| &r.env))?;
        result?;
    }
    n += spec.protos.len() * spec.sizes.len();
    if let (Some(tr), true) = (&mut tr_rec, tr_left) {
        let rec = RefCell::new(&mut *tr);
        let result = transfer::run_with(
            &prepared.target,
            &tr_opts,
            &mut |p: Progress| progress(n + p.done, &format!("transfer {} {} B", p.proto, p.size)),
            &|p: Proto, s: u64| rec.borrow().has(p.name(), s, ""),
            &mut |p| rec.borrow_mut().point(p),
        );
        tr.finish(result.as_ref().map(|r| &r.env))?;
        result?;
    }
    Ok(runs)
}

/// What `gridperf survey` does, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub spec: SurveySpec,
    pub db: PathBuf,
    /// Where the report goes.
    pub output: PathBuf,
    pub resume: bool,
}

/// The transfer sizes and total of a survey: a few sizes (the Table 1 loop
/// echoes every message: on a 180 ms WAN, 1024 x 1000 bytes in 1 KB
/// messages take three minutes a run), and 64 KB moved in a quick one.
pub fn transfer_plan(quick: bool, none: bool) -> (Vec<u64>, u64) {
    let sizes = if none {
        Vec::new()
    } else if quick {
        vec![1024, 16384, 64000]
    } else {
        vec![1024, 1460, 4096, 16384, 64000]
    };
    (sizes, if quick { 64_000 } else { crate::engines::transfer::PAPER_TOTAL })
}

/// A survey that cannot bring its labs up says how to survey without one.
fn without_lab(e: Error) -> Error {
    Error::usage(format!(
        "{e}; or survey without a lab: `gridperf survey local --quick` (loopback only, in this process) or \
         `gridperf survey HOST` (a remote `gridperf serve`)"
    ))
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    if o.spec.networks.iter().any(|n| matches!(n, Network::Lab { .. })) {
        crate::host::may_make_namespaces("the survey's labs").map_err(without_lab)?;
    }
    let store = Store::open(&o.db)?;
    let bar = out.bar();
    let started = std::time::Instant::now();
    let outcome = survey(&store, &o.spec, o.resume, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(format!("{}: {}", p.network, p.what));
    });
    bar.finish_and_clear();
    let outcome = outcome?;
    let runs =
        super::report::load(&store, &store.runs(&RunFilter { survey: Some(outcome.survey), ..Default::default() })?)?;
    let (html, _) = render::html::render(&runs);
    std::fs::write(&o.output, html).map_err(|e| Error::usage(format!("-o {}: {e}", o.output.display())))?;
    crate::host::give_back(&o.output);
    let analysis = render::survey::analyse(&runs);
    if out.format == Format::Json {
        let failed: Vec<_> =
            outcome.failed.iter().map(|(net, why)| serde_json::json!({ "network": net, "why": why })).collect();
        out.json(&serde_json::json!({
            "schema": gridperf_core::model::SURVEY_SCHEMA,
            "survey": outcome.survey,
            "db": store.shown(),
            "report": o.output,
            "seconds": started.elapsed().as_secs_f64(),
            "networks": analysis,
            "failed": failed,
        }))?;
    } else {
        out.print(&format!(
            "gridperf survey {} ({} networks, {:.0} s), stored in {}\n\n{}\n{}\nreport: {}\n",
            outcome.survey,
            o.spec.networks.len(),
            started.elapsed().as_secs_f64(),
            store.shown(),
            render::survey::best_table_text(&analysis),
            render::survey::thresholds_text(&analysis),
            o.output.display()
        ))?;
    }
    for (net, why) in &outcome.failed {
        out.note(&format!("gridperf survey: {net} was not measured: {why}"));
    }
    if !outcome.failed.is_empty() {
        return Err(Error::network(format!(
            "{} of {} networks failed; the others are stored (go on with --resume)",
            outcome.failed.len(),
            o.spec.networks.len()
        )));
    }
    // every network's runs, valid or not, are stored and reported: then the exit says if any is not
    let invalid: Vec<&str> =
        runs.iter().filter(|(r, _)| !r.valid()).map(|(r, _)| r.network.as_str()).collect::<Vec<_>>();
    let mut invalid_nets = invalid.clone();
    invalid_nets.dedup();
    if !invalid_nets.is_empty() {
        return Err(Error::measurement(format!(
            "{} of {} networks are INVALID ({}): their runs are stored and marked, and their rows in the table and the \
             report are not the network's; measure them again (gridperf survey --profiles {})",
            invalid_nets.len(),
            o.spec.networks.len(),
            invalid_nets.join(", "),
            invalid_nets.join(",")
        )));
    }
    Ok(())
}
