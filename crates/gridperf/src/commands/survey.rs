//! `gridperf survey`: the main job. For each network (a lab profile
//! brought up for it, a remote agent, or loopback), rtt and transfer for
//! TCP, UDP and sendfile over a size sweep, every point written to the store
//! as it is measured; then the report and the best-protocol table. An
//! interrupted survey goes on with `--resume`, skipping the stored points.

use super::Output;
use crate::engines::rtt::{self, RttOptions};
use crate::engines::transfer::{self, TransferOptions};
use crate::engines::{EchoOptions, Progress};
use crate::error::{Error, Result};
use crate::render;
use crate::runner::{Deadlines, Network};
use crate::store::{NewRun, Recorder, RunFilter, Store};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::Measure;
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
    match gridperf_core::lab::cfg::profile(profile).ok().and_then(|p| p.settings().link_config().ok()) {
        Some(l) => (Duration::from_nanos(l.delay_ns), l.rate_bps),
        None => (Duration::ZERO, None),
    }
}

/// Each point's time budget in a full survey: enough round trips for
/// quartiles on a long path, without letting a WAN point take minutes.
fn budget(rtt: Duration) -> Duration {
    Duration::from_secs_f64((rtt.as_secs_f64() * 100.0).clamp(1.0, 20.0))
}

/// How many rounds a full survey's point is measured in: a round should
/// hold about ten round trips or more (each round's steps cost control
/// round trips), and there are at least three, so that comparisons have
/// replicates.
fn rounds_for(budget: Duration, rtt: Duration) -> u32 {
    let fit = budget.as_secs_f64() / (10.0 * rtt.as_secs_f64()).max(1e-6);
    (fit.floor() as u32).clamp(MIN_ROUNDS, MAX_ROUNDS)
}

/// A quick survey's step (one protocol in one round): a round trip, and
/// at least 25 ms (a hundred exchanges on a LAN; on a long path the one
/// exchange is the round's median: its delay is the lab's, steady to a
/// fraction of a percent). Its sizes stop once their best protocol is
/// settled ([`gridperf_core::analysis::stopping`]), after 3 to [`QUICK_ROUNDS`]
/// rounds.
fn quick_step(rtt: Duration) -> Duration {
    rtt.max(Duration::from_millis(25))
}

/// Rounds per point of a quick survey, at most.
pub const QUICK_ROUNDS: u32 = 8;
/// ... and on a busy machine, where the rounds vary more.
pub const BUSY_ROUNDS: u32 = 16;

/// Warm-up exchanges at the start of a point: five, or as many as fit in
/// 20 ms on a long path (one at least).
fn warmup_for(quick: bool, rtt: Duration) -> u64 {
    if !quick {
        return 5;
    }
    ((0.02 / rtt.as_secs_f64().max(1e-9)).floor() as u64).clamp(1, 5)
}

/// A network whose round trip is this long or longer waits on its delay,
/// not on a CPU: a quick survey measures it beside the others.
pub const BESIDE_RTT: Duration = Duration::from_millis(50);

/// Rounds per point of a full survey, at most and at least.
pub const MAX_ROUNDS: u32 = 6;
pub const MIN_ROUNDS: u32 = gridperf_core::analysis::compare::MIN_ROUNDS as u32;
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
    placement_on(net, &crate::host::cpus())
}

/// [`placement`] on the CPUs given, the preferred first (a busy machine's
/// idlest).
pub fn placement_on(net: &Network, cpus: &[usize]) -> (Option<usize>, Option<usize>) {
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
    // a quick survey measures the networks that wait on their delay (wan)
    // beside the others, in a thread of their own (each thread in its own
    // lab's namespace); the others one after the other, as a full survey
    // measures them all
    let beside: Vec<bool> =
        spec.networks.iter().map(|n| spec.quick && waits_on_delay(n) && spec.networks.len() > 1).collect();
    // where each network is; the bar is drawn from this thread only
    let counts = std::sync::Mutex::new(vec![(0usize, String::new()); spec.networks.len()]);
    let note = |i: usize, d: usize, what: &str| {
        let mut g = counts.lock().unwrap_or_else(|p| p.into_inner());
        g[i] = (d.min(per_network), what.to_string());
    };
    let draw = |i: usize, progress: &mut dyn FnMut(&SurveyProgress)| {
        let g = counts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let done = g.iter().map(|(d, _)| d).sum();
        let others: Vec<String> = (0..spec.networks.len())
            .filter(|&j| j != i && beside[j] && g[j].0 < per_network)
            .map(|j| spec.networks[j].name())
            .collect();
        let network = if others.is_empty() {
            spec.networks[i].name()
        } else {
            format!("{} (and {} beside)", spec.networks[i].name(), others.join(", "))
        };
        progress(&SurveyProgress { done, total, network, what: g[i].1.clone() })
    };
    let db = store.path.clone();
    let measure = |i: usize, on: &mut dyn FnMut(usize, &str)| {
        let r = survey_network(&db, spec, survey, &spec.networks[i], beside[i], on);
        note(i, per_network, "done");
        r
    };
    let results: Vec<(usize, Result<Vec<i64>>)> = std::thread::scope(|scope| {
        let (measure, note) = (&measure, &note);
        let aside: Vec<_> = (0..spec.networks.len())
            .filter(|&i| beside[i])
            .map(|i| (i, scope.spawn(move || measure(i, &mut |d, what| note(i, d, what)))))
            .collect();
        let mut results: Vec<(usize, Result<Vec<i64>>)> = Vec::new();
        for i in (0..spec.networks.len()).filter(|&i| !beside[i]) {
            let r = measure(i, &mut |d, what| {
                note(i, d, what);
                draw(i, &mut *progress);
            });
            results.push((i, r));
        }
        // then the bar follows the networks still measured beside
        for (i, h) in aside {
            while !h.is_finished() {
                draw(i, &mut *progress);
                std::thread::sleep(Duration::from_millis(200));
            }
            results.push((i, h.join().unwrap_or_else(|_| Err(Error::internal("a survey thread panicked")))));
        }
        results.sort_by_key(|(i, _)| *i);
        results
    });
    let mut out = Outcome { survey, runs: Vec::new(), failed: Vec::new() };
    for (i, r) in results {
        match r {
            Ok(runs) => out.runs.extend(runs),
            Err(e) if e.kind == crate::error::Kind::Usage => return Err(e),
            Err(e) => out.failed.push((spec.networks[i].name(), e.to_string())),
        }
    }
    store.finish_survey(survey, if out.failed.is_empty() { "done" } else { "partial" })?;
    Ok(out)
}

/// Whether a network's round trip is long enough that its points wait on
/// the delay, not on a CPU ([`BESIDE_RTT`]): a lab profile's.
fn waits_on_delay(net: &Network) -> bool {
    match net {
        Network::Lab { profile, sets } if sets.is_empty() => profile_path(profile).0 * 2 >= BESIDE_RTT,
        _ => false,
    }
}

// Long by design: one network's survey in its order (its runs, a look at
// the CPUs, the rtt and transfer options that follow from both, then the
// measurements), each step commented, on one set of locals.
fn survey_network(
    db: &std::path::Path,
    spec: &SurveySpec,
    survey: i64,
    net: &Network,
    beside: bool,
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
            let mtu = gridperf_core::lab::cfg::profile(profile).ok().map(|p| p.settings().mtu);
            (d, r, if profile == "loopback" { Some(65536) } else { mtu })
        }
        // this host's lo, whose MTU the MTU multiples are of
        Network::Local => (Duration::ZERO, None, gridperf_sys::link_mtu("lo").ok()),
        Network::Host { .. } => (Duration::ZERO, None, None),
    };
    let note = if beside {
        format!(
            "survey {survey}, network {name}; measured beside the survey's other networks (its points wait on its \
             delay, not on a CPU)"
        )
    } else {
        format!("survey {survey}, network {name}")
    };
    let rtt = one_way * 2;
    // a look at the machine first: on a busy one the ends go to its idlest
    // CPUs, and a quick survey takes more rounds (the protocols still in
    // turn) before it gives up on telling them apart
    let (idlest, busy_share) = crate::host::look_at_cpus(Duration::from_millis(200));
    let busy = busy_share >= gridperf_core::model::BUSY_OTHERS;
    let (client_cpu, server_cpu) = if busy && !beside {
        placement_on(net, &idlest.iter().map(|(c, _)| *c).collect::<Vec<_>>())
    } else {
        placement(net)
    };
    let note = if busy {
        let cpus: Vec<String> = idlest.iter().map(|(c, b)| format!("CPU {c} {:.0}%", b * 100.0)).collect();
        format!(
            "{note}; the machine was busy before it ({}: other tasks took {:.0}% of the CPUs): the ends on its idlest \
             CPUs{}",
            cpus.join(", "),
            busy_share * 100.0,
            if spec.quick { format!(", up to {BUSY_ROUNDS} rounds a point") } else { String::new() }
        )
    } else {
        note
    };
    let quick_rounds = if busy { BUSY_ROUNDS } else { QUICK_ROUNDS };
    let (point_budget, rounds) = if spec.quick {
        (quick_step(rtt) * quick_rounds, quick_rounds)
    } else {
        let b = budget(rtt);
        (b, rounds_for(b, rtt))
    };
    let rtt_opts = RttOptions {
        echo: EchoOptions {
            client_cpu,
            server_cpu,
            ..echo_options(spec, spec.sizes.clone(), one_way, rate, note.clone())
        },
        iterations: 0,
        duration: Some(point_budget),
        warmup: warmup_for(spec.quick, rtt),
        keep_samples: true,
        rounds,
        retries: RETRIES,
        stop_early: spec.quick,
    };
    // a quick survey leaves out the transfer sizes whose run would take
    // more than two seconds of round trips (the Table 1 loop echoes every
    // message: 63 round trips of 180 ms for 64 KB in 1 KB messages)
    let (transfer_sizes, transfer_note) = quick_transfer_sizes(spec, rtt);
    let tr_note = match transfer_note {
        Some(left) => format!("{note}; {left}"),
        None => note,
    };
    let mut rtt_rec = run_for(Measure::Rtt, serde_json::to_value(rtt::settings(&rtt_opts)).unwrap_or_default(), mtu)?;
    let tr_opts = TransferOptions {
        echo: EchoOptions {
            client_cpu,
            server_cpu,
            ..echo_options(spec, transfer_sizes.clone(), one_way, rate, tr_note)
        },
        total: spec.transfer_total,
        repeat: if spec.quick { 3 } else { 10 },
        warmup_runs: 1,
    };
    let mut tr_rec = if transfer_sizes.is_empty() {
        None
    } else {
        Some(run_for(Measure::Transfer, serde_json::to_value(transfer::settings(&tr_opts)).unwrap_or_default(), mtu)?)
    };
    let runs: Vec<i64> = [rtt_rec.run_id(), tr_rec.as_ref().and_then(|r| r.run_id())].into_iter().flatten().collect();
    let left = |rec: &Recorder, sizes: &[u64]| {
        spec.protos.iter().flat_map(|&p| sizes.iter().map(move |&s| (p, s))).any(|(p, s)| !rec.has(p.name(), s, ""))
    };
    let rtt_left = left(&rtt_rec, &spec.sizes);
    let tr_left = tr_rec.as_ref().is_some_and(|r| left(r, &transfer_sizes));
    if !rtt_left && !tr_left {
        return Ok(runs);
    }
    // the network made ready (a lab brought up for it, taken down when this returns)
    if let Network::Lab { profile, .. } = net {
        crate::host::may_make_namespaces(&format!("the survey's lab for {profile}")).map_err(without_lab)?;
        progress(0, "bringing the lab up");
    }
    if beside {
        return measure_in_labs(net, spec, (&mut rtt_rec, rtt_left, &rtt_opts), (tr_rec, tr_left, &tr_opts), progress)
            .map(|()| runs);
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

/// Labs of one long path's profile at once, for a quick survey: its sizes
/// alternate between [`LONG_PATH_LABS`] labs for rtt, and its transfer has
/// one more. Each lab is the same model (the same delay, rate, queue and
/// loss), and every comparison is within one size, so within one lab; a
/// long path's points wait on its delay, and the labs' emulators and ends
/// take little CPU. The run's record says so, and is INVALID if any of
/// its labs was.
pub const LONG_PATH_LABS: usize = 2;

type Part<'a, R, O> = (R, bool, &'a O);

fn measure_in_labs(
    net: &Network,
    spec: &SurveySpec,
    (rtt_rec, rtt_left, rtt_opts): Part<'_, &mut Recorder, RttOptions>,
    (tr_rec, tr_left, tr_opts): Part<'_, Option<Recorder>, TransferOptions>,
    progress: &mut dyn FnMut(usize, &str),
) -> Result<()> {
    use std::sync::{Mutex, MutexGuard};
    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
    let shards: Vec<Vec<u64>> = (0..LONG_PATH_LABS)
        .map(|j| spec.sizes.iter().enumerate().filter(|(i, _)| i % LONG_PATH_LABS == j).map(|(_, s)| *s).collect())
        .collect();
    let rtt_rec = Mutex::new(rtt_rec);
    let done = Mutex::new((vec![0usize; LONG_PATH_LABS + 1], String::new()));
    let tell = |k: usize, d: usize, what: String| {
        let mut g = lock(&done);
        g.0[k] = d;
        g.1 = what;
    };
    let (rtt_results, tr_result) = std::thread::scope(|scope| {
        let rtt_handles: Vec<_> = shards
            .iter()
            .enumerate()
            .filter(|_| rtt_left)
            .map(|(j, sizes)| {
                let (rtt_rec, tell) = (&rtt_rec, &tell);
                let opts = RttOptions {
                    echo: EchoOptions { sizes: sizes.clone(), ..rtt_opts.echo.clone() },
                    ..rtt_opts.clone()
                };
                scope.spawn(move || -> Result<gridperf_core::model::RttReport> {
                    let prepared = net.prepare(&format!("sw{j}"), None, Default::default())?;
                    rtt::run_with(
                        &prepared.target,
                        &opts,
                        &mut |p: Progress| tell(j, p.done, format!("rtt {} {} B", p.proto, p.size)),
                        &|p: Proto, s: u64| lock(rtt_rec).has(p.name(), s, ""),
                        &mut |p| lock(rtt_rec).point(p),
                    )
                })
            })
            .collect();
        let tr_handle = tr_rec.filter(|_| tr_left).map(|mut tr| {
            let tell = &tell;
            scope.spawn(move || -> (Recorder, Result<gridperf_core::model::TransferReport>) {
                let result = net.prepare("sx", None, Default::default()).and_then(|prepared| {
                    let rec = RefCell::new(&mut tr);
                    transfer::run_with(
                        &prepared.target,
                        tr_opts,
                        &mut |p: Progress| tell(LONG_PATH_LABS, p.done, format!("transfer {} {} B", p.proto, p.size)),
                        &|p: Proto, s: u64| rec.borrow().has(p.name(), s, ""),
                        &mut |p| rec.borrow_mut().point(p),
                    )
                });
                (tr, result)
            })
        });
        let all = || rtt_handles.iter().all(|h| h.is_finished()) && tr_handle.as_ref().is_none_or(|h| h.is_finished());
        while !all() {
            let (d, what) = {
                let g = lock(&done);
                (g.0.iter().sum::<usize>(), g.1.clone())
            };
            progress(d, &format!("{what} (in {} labs at once)", LONG_PATH_LABS + 1));
            std::thread::sleep(Duration::from_millis(200));
        }
        let rtt_results: Vec<Result<gridperf_core::model::RttReport>> = rtt_handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::internal("a survey thread panicked"))))
            .collect();
        let tr_result = tr_handle.map(|h| h.join().map_err(|_| Error::internal("a survey thread panicked")));
        (rtt_results, tr_result)
    });
    let rtt_rec = rtt_rec.into_inner().unwrap_or_else(|p| p.into_inner());
    let labs_note = format!(
        "measured in {LONG_PATH_LABS} labs of this profile at once, its sizes alternating between them (a quick \
         survey's long path)"
    );
    if rtt_left {
        match rtt_results.into_iter().collect::<Result<Vec<_>>>() {
            Ok(reports) => {
                // one record: the first lab's, with the note, INVALID if any lab was
                let mut env = reports[0].env.clone();
                env.notes.push(labs_note);
                if let Some(bad) = reports.iter().filter_map(|r| r.env.lab.as_ref()).find(|l| l.invalid.is_some()) {
                    env.lab = Some(bad.clone());
                }
                rtt_rec.finish(Ok(&env))?;
            }
            Err(e) => {
                rtt_rec.finish(Err(&e))?;
                return Err(e);
            }
        }
    }
    if let Some(joined) = tr_result {
        let (mut tr, result) = joined?;
        tr.finish(result.as_ref().map(|r| &r.env))?;
        result?;
    }
    Ok(())
}

/// A quick survey's transfer sizes on a path of this round trip: those
/// whose run takes at most [`QUICK_TRANSFER_RUN`] of round trips, and a
/// note naming the others.
fn quick_transfer_sizes(spec: &SurveySpec, rtt: Duration) -> (Vec<u64>, Option<String>) {
    if !spec.quick {
        return (spec.transfer_sizes.clone(), None);
    }
    let run_of = |s: u64| rtt.mul_f64(spec.transfer_total.div_ceil(s.max(1)) as f64);
    let (kept, left): (Vec<u64>, Vec<u64>) =
        spec.transfer_sizes.iter().partition(|&&s| run_of(s) <= QUICK_TRANSFER_RUN);
    let note = (!left.is_empty()).then(|| {
        let sizes: Vec<String> = left.iter().map(|s| format!("{s} B")).collect();
        format!(
            "quick: transfer of {} left out (a run takes {:.1} s of round trips or more here; the full survey measures it)",
            sizes.join(", "),
            left.iter().map(|&s| run_of(s)).min().unwrap_or_default().as_secs_f64()
        )
    });
    (kept, note)
}

/// The longest a quick survey's transfer run may take in round trips.
pub const QUICK_TRANSFER_RUN: Duration = Duration::from_secs(2);

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
    let runs = super::report::load(
        &store,
        &super::report::in_document_order(
            store.runs(&RunFilter { survey: Some(outcome.survey), ..Default::default() })?,
        ),
    )?;
    let (html, _) = render::html::render(&runs);
    std::fs::write(&o.output, html).map_err(|e| Error::usage(format!("-o {}: {e}", o.output.display())))?;
    crate::host::give_back(&o.output);
    let analysis = render::survey::analyse(&runs);
    let failed: Vec<_> =
        outcome.failed.iter().map(|(net, why)| serde_json::json!({ "network": net, "why": why })).collect();
    let seconds = started.elapsed().as_secs_f64();
    let doc = serde_json::json!({
        "schema": gridperf_core::model::SURVEY_SCHEMA,
        "survey": outcome.survey,
        "db": store.shown(),
        "report": o.output,
        "seconds": seconds,
        "networks": analysis,
        "failed": failed,
    });
    out.render(&render::Shown::new(&doc, || {
        format!(
            "gridperf survey {} ({} networks, {seconds:.0} s), stored in {}\n\n{}\n{}\nreport: {}\n",
            outcome.survey,
            o.spec.networks.len(),
            store.shown(),
            render::survey::best_table_text(&analysis),
            render::survey::thresholds_text(&analysis),
            o.output.display()
        )
    }))?;
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
    let invalid: Vec<(&str, &str)> =
        runs.iter().filter(|(r, _)| !r.valid()).map(|(r, _)| (r.network.as_str(), r.kind.as_str())).collect();
    let mut invalid_nets: Vec<&str> = invalid.iter().map(|(n, _)| *n).collect();
    invalid_nets.dedup();
    let mut kinds: Vec<&str> = invalid.iter().map(|(_, k)| *k).collect();
    kinds.sort_unstable();
    kinds.dedup();
    if !invalid_nets.is_empty() {
        let (its, it) = if invalid_nets.len() == 1 { ("its", "it") } else { ("their", "them") };
        return Err(Error::measurement(format!(
            "{} of {} networks are INVALID ({}): {its} {} runs are INVALID, stored and marked, and what rests on them \
             in the table and the report is not the network's; measure {it} again (gridperf survey --profiles {})",
            invalid_nets.len(),
            o.spec.networks.len(),
            invalid_nets.join(", "),
            kinds.join(" and "),
            invalid_nets.join(",")
        )));
    }
    Ok(())
}
