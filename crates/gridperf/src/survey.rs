//! `gridperf survey`: the main job. For each network (a lab profile brought
//! up for it, or a remote agent), rtt and transfer for TCP, UDP and sendfile
//! over a size sweep, every point written to the store as it is measured.

use crate::engines::rtt::{self, RttOptions};
use crate::engines::transfer::{self, TransferOptions};
use crate::engines::{EchoOptions, Progress, Target};
use crate::error::{Error, Result};
use crate::lab::run::{spec_for, LabRun};
use crate::runner::Deadlines;
use crate::store::{NewRun, PointRow, Store};
use gridperf_core::plan::Proto;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// The first document's networks, in its order.
pub const DOCUMENT_PROFILES: &[&str] = &["loopback", "crossover-fe", "lan-gige", "man", "wan"];
/// A quick survey's sizes: around the MTU multiples, up to 64000 B.
pub const QUICK_SIZES: &str = "1,64,256,512,1k,1400,1460,1500,2k,2800,3k,4k,8k,16k,32k,64000";
/// A full survey's: the document's 1 B, then 128 B to 64000 B every 128 B
/// (thinned to every 512 B above 8 KiB, where the curves are straight).
pub const FULL_SIZES: &str = "1,128..8k+128,8704..64000+512,64000";

/// Where a survey measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Network {
    /// A lab profile, brought up for its part of the survey.
    Lab(String),
    /// A remote agent, by address and the label the user gave.
    Host { addr: SocketAddr, label: String },
    /// An agent of this process on loopback: no lab, no privileges.
    Local,
}

impl Network {
    pub fn name(&self) -> String {
        match self {
            Network::Lab(p) => p.clone(),
            Network::Host { label, .. } => label.clone(),
            Network::Local => "local".into(),
        }
    }
}

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

pub fn rtt_point_row(p: &gridperf_core::model::RttPoint) -> PointRow {
    PointRow {
        proto: p.proto.name().into(),
        size: p.size_bytes,
        setting: String::new(),
        median_ns: p.summary.as_ref().map(|s| s.median_ns),
        q1_ns: p.summary.as_ref().map(|s| s.q1_ns),
        q3_ns: p.summary.as_ref().map(|s| s.q3_ns),
        figures: serde_json::to_value(p).unwrap_or_default(),
        samples: None,
    }
}

pub fn transfer_point_row(p: &gridperf_core::model::TransferPoint) -> PointRow {
    PointRow {
        proto: p.proto.name().into(),
        size: p.size_bytes,
        setting: String::new(),
        median_ns: p.time.as_ref().map(|s| s.median_ns),
        q1_ns: p.time.as_ref().map(|s| s.q1_ns),
        q3_ns: p.time.as_ref().map(|s| s.q3_ns),
        figures: serde_json::to_value(p).unwrap_or_default(),
        samples: None,
    }
}

/// Runs the survey (or resumes one: the same spec, the points already
/// stored skipped).
pub fn run(
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
        let r = survey_network(store, spec, survey, net, &mut |d, what| {
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
    store: &Store,
    spec: &SurveySpec,
    survey: i64,
    net: &Network,
    progress: &mut dyn FnMut(usize, &str),
) -> Result<Vec<i64>> {
    let name = net.name();
    // the runs of this network, new or (resuming) begun before
    let run_for = |kind: &str, settings: serde_json::Value, mtu: Option<u32>| -> Result<i64> {
        match store.survey_run(survey, &name, kind)? {
            Some(id) => Ok(id),
            None => store.begin_run(&NewRun {
                survey_id: Some(survey),
                kind,
                network: &name,
                target: &name,
                settings,
                lab_profile: matches!(net, Network::Lab(_)).then_some(name.as_str()),
                mtu,
            }),
        }
    };
    let (one_way, rate, mtu) = match net {
        Network::Lab(p) => {
            let (d, r) = profile_path(p);
            let mtu = gridperf_core::labcfg::profile(p).ok().map(|p| p.settings().mtu);
            (d, r, if p == "loopback" { Some(65536) } else { mtu })
        }
        Network::Host { .. } | Network::Local => (Duration::ZERO, None, None),
    };
    let rtt_budget = budget(spec.quick, one_way * 2);
    let rtt_opts = RttOptions {
        echo: echo_options(spec, spec.sizes.clone(), one_way, rate, format!("survey {survey}, network {name}")),
        iterations: 0,
        duration: Some(rtt_budget),
        warmup: 5,
        keep_samples: false,
    };
    let rtt_settings = serde_json::to_value(rtt::settings(&rtt_opts)).unwrap_or_default();
    let rtt_run = run_for("rtt", rtt_settings, mtu)?;
    let mut runs = vec![rtt_run];
    let tr_opts = TransferOptions {
        echo: echo_options(
            spec,
            spec.transfer_sizes.clone(),
            one_way,
            rate,
            format!("survey {survey}, network {name}"),
        ),
        total: spec.transfer_total,
        repeat: if spec.quick { 3 } else { 10 },
        warmup_runs: 1,
    };
    let skip_rtt = |p: Proto, s: u64| store.has_point(rtt_run, p.name(), s, "").unwrap_or(false);
    let rtt_left =
        spec.protos.iter().flat_map(|&p| spec.sizes.iter().map(move |&s| (p, s))).any(|(p, s)| !skip_rtt(p, s));
    let tr_run = if spec.transfer_sizes.is_empty() {
        None
    } else {
        Some(run_for("transfer", serde_json::to_value(transfer::settings(&tr_opts)).unwrap_or_default(), mtu)?)
    };
    let skip_tr = |p: Proto, s: u64| tr_run.is_some_and(|r| store.has_point(r, p.name(), s, "").unwrap_or(false));
    let tr_left = tr_run.is_some()
        && spec
            .protos
            .iter()
            .flat_map(|&p| spec.transfer_sizes.iter().map(move |&s| (p, s)))
            .any(|(p, s)| !skip_tr(p, s));
    if !rtt_left && !tr_left {
        runs.extend(tr_run);
        return Ok(runs);
    }
    // the lab for this network, taken down when this function returns
    let (target, _lab) = match net {
        Network::Lab(p) => {
            if !crate::env::is_root() {
                return Err(Error::usage(format!(
                    "the survey brings up a lab for {p}, which needs root (network namespaces and TUN devices): \
                     run it with sudo, or survey without a lab: `gridperf survey local` (loopback only, in this \
                     process) or `gridperf survey HOST` (a remote `gridperf serve`)"
                )));
            }
            let lab_name = format!("sv{}", std::process::id() % 100_000);
            progress(0, "bringing the lab up");
            let lab = LabRun::start(spec_for(&lab_name, p, &[])?)?;
            (Target::Remote(lab.agent), Some(lab))
        }
        Network::Host { addr, .. } => (Target::Remote(*addr), None),
        Network::Local => (Target::Local { faults: Default::default() }, None),
    };
    let mut n = 0usize;
    if rtt_left {
        let result = rtt::run_with(
            &target,
            &rtt_opts,
            &mut |p: Progress| progress(n + p.done, &format!("rtt {} {} B", p.proto, p.size)),
            &skip_rtt,
            &mut |p| store.add_point(rtt_run, &rtt_point_row(p)),
        );
        match result {
            Ok(r) => store.finish_run(rtt_run, Some(&r.env), "done")?,
            Err(e) => {
                store.finish_run(rtt_run, None, "failed")?;
                return Err(e);
            }
        }
    }
    n += spec.protos.len() * spec.sizes.len();
    if let (Some(tr_run), true) = (tr_run, tr_left) {
        runs.push(tr_run);
        let result = transfer::run_with(
            &target,
            &tr_opts,
            &mut |p: Progress| progress(n + p.done, &format!("transfer {} {} B", p.proto, p.size)),
            &skip_tr,
            &mut |p| store.add_point(tr_run, &transfer_point_row(p)),
        );
        match result {
            Ok(r) => store.finish_run(tr_run, Some(&r.env), "done")?,
            Err(e) => {
                store.finish_run(tr_run, None, "failed")?;
                return Err(e);
            }
        }
    } else {
        runs.extend(tr_run);
    }
    Ok(runs)
}
