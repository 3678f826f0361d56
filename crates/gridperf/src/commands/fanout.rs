//! `gridperf fanout`: the many-to-one sweep, on loopback, to agents, or
//! across a lab dumbbell brought up for it; every point stored as it ends.

use super::{lab_valid, Output};
use crate::engines::fanout::{self, FanoutOptions, Place as FanoutPlace};
use crate::error::{Error, Result};
use crate::lab::emulator::Side;
use crate::lab::run::{spec_with_hosts, LabRun};
use crate::lab::LabWatch;
use crate::render;
use crate::runner::LOOPBACK;
use crate::store::{NewRun, Recorder, StoreChoice};
use gridperf_core::model::{Environment, FanoutReport, Measure, FANOUT_SCHEMA};
use gridperf_core::units::fmt_bytes;

/// A lab brought up for the sweep: the server on its first A host, one
/// consumer per B host in turn.
#[derive(Debug, Clone)]
pub struct Lab {
    pub profile: String,
    pub sets: Vec<String>,
    /// Hosts on each side: 1 x M.
    pub hosts: (usize, usize),
}

/// What `gridperf fanout` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub fanout: FanoutOptions,
    pub lab: Option<Lab>,
    pub store: StoreChoice,
}

/// Where the sweep's points are stored: the lab's profile, "loopback" for
/// this host's threads and loopback agents, or the agents.
fn network(o: &Opts) -> String {
    match (&o.lab, o.fanout.agents.as_slice()) {
        (Some(l), _) => l.profile.clone(),
        (None, []) => LOOPBACK.into(),
        (None, agents) if agents.iter().all(|a| a.ip().to_canonical().is_loopback()) => LOOPBACK.into(),
        (None, agents) => agents.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(","),
    }
}

/// The table's header line: where the ends were.
fn place_words(o: &FanoutOptions) -> String {
    match &o.place {
        Some(p) => {
            format!("across the lab: server in {}, consumers in {}", p.server_netns, p.consumer_netns.join(", "))
        }
        None if !o.agents.is_empty() => format!(
            "to consumers on the agents {}",
            o.agents.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
        ),
        None => "on loopback".into(),
    }
}

/// The sweep's header, for the table.
pub fn sweep(o: &FanoutOptions) -> render::fanout::Sweep {
    render::fanout::Sweep {
        place: place_words(o),
        repeat: o.repeat,
        watchdog_ns: o.watchdog.as_nanos() as u64,
        buffer: o.buffer,
    }
}

pub fn run(mut o: Opts, out: &mut Output) -> Result<()> {
    // across a lab: the server on the first host of side A, the consumers on side B's hosts in turn
    let lab = match &o.lab {
        None => None,
        Some(l) => {
            let name = format!("fo{}", std::process::id() % 100_000);
            let (run, hosts) = LabRun::hosts_only(spec_with_hosts(&name, &l.profile, &l.sets, l.hosts)?)?;
            let server = hosts.iter().find(|h| h.side == Side::A);
            let server = server.ok_or_else(|| Error::internal("the lab has no host on side A"))?;
            o.fanout.place = Some(FanoutPlace {
                server_netns: server.netns.clone(),
                server_addr: server.addr,
                consumer_netns: hosts.iter().filter(|h| h.side == Side::B).map(|h| h.netns.clone()).collect(),
            });
            let watch = LabWatch::start(&run.name);
            Some((run, watch))
        }
    };
    let opts = &o.fanout;
    let network = network(&o);
    let mut rec = Recorder::open(
        &o.store,
        &NewRun {
            survey_id: None,
            sweep_id: None,
            kind: Measure::Fanout,
            network: &network,
            target: &network,
            settings: serde_json::json!({ "repeat": opts.repeat, "buffer": opts.buffer,
                "watchdog_ns": opts.watchdog.as_nanos() as u64 }),
            lab_profile: o.lab.as_ref().map(|l| l.profile.as_str()),
            mtu: None,
        },
    )?;
    let bar = out.bar();
    let started = crate::runner::unix_now();
    let mut store_err = None;
    let points = fanout::run(opts, &mut |done, total, p| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(format!("{} {} nodes {} x {}", p.variant.name(), p.nodes, fmt_bytes(p.size), p.messages));
        if let Err(e) = rec.point(p) {
            store_err.get_or_insert(e);
        }
    });
    bar.finish_and_clear();
    let points = match points {
        Ok(p) => p,
        Err(e) => {
            rec.finish(Err(&e))?;
            return Err(e);
        }
    };
    // the sweep's record: this host's, and the lab's verdict over the sweep
    let mut env = Environment {
        tool_version: crate::host::software(),
        command_line: std::env::args().collect(),
        client: crate::host::end_info(None, false),
        target: network.clone(),
        started_unix: started,
        finished_unix: crate::runner::unix_now(),
        ..Environment::default()
    };
    env.set_lab(lab.map(|(_run, watch)| watch.record()));
    if let Some(where_) = rec.finish(Ok(&env))? {
        out.note(&format!("gridperf: {where_}"));
    }
    if let Some(e) = store_err {
        return Err(e);
    }
    let report = FanoutReport {
        schema: FANOUT_SCHEMA.into(),
        buffer: opts.buffer,
        repeat: opts.repeat,
        notes: gridperf_core::model::nagle_notes(&points),
        points,
    };
    let shown = render::Shown::new(&report, || render::fanout::table(&report.points, &sweep(opts)));
    out.render(&shown.csv(|| render::fanout::csv(&report.points)))?;
    lab_valid(&env)
}
