//! `gridperf tune`: what caps a single TCP stream on a path, from this
//! host's settings, an agent's, or a running lab's hosts', and what to set;
//! with `--apply`, set it in the lab and read it back.

use super::Format;
use super::Output;
use crate::engines::tune as probes;
use crate::error::{Error, Result};
use crate::host;
use crate::lab::Host;
use crate::render;
use crate::runner::Deadlines;
use gridperf_core::analysis::tune::{directions, with_shares, Record, TunePath};
use gridperf_core::model::{EndAdvice, Measured, TuneView, TUNE_SCHEMA};
use gridperf_core::units::{fmt_bps, fmt_ns};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the path's rate and RTT and the ends' settings come from, as
/// `cli/tune.rs` checked it: each carries what it needs.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--rate` and `--rtt`, this host's settings.
    Given { rate_bps: u64, rtt_ns: u64 },
    /// A lab profile's rate and RTT, this host's settings.
    Profile { name: String, rate_bps: u64, rtt_ns: u64 },
    /// A `gridperf serve` agent: the RTT measured, both ends' settings.
    Host { addr: SocketAddr, rate: HostRate },
    /// A running lab: its link's rate and RTT, its hosts' settings.
    InLab(String),
}

/// Where a host's path rate comes from.
#[derive(Debug, Clone, Copy)]
pub enum HostRate {
    /// `--rate`.
    Given(u64),
    /// `--measure-rate`: this much UDP for this many seconds.
    Measure { offer_bps: u64, secs: u64 },
}

/// What `gridperf tune` does, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub source: Source,
    /// With a lab: its rate and RTT, when given (they win over what is read).
    pub rate_bps: Option<u64>,
    /// With a host or a lab: the RTT, when given (it wins over what is measured or read).
    pub rtt_ns: Option<u64>,
    /// With a host or a lab (checked): probe each end's buffer shares.
    pub measure_share: bool,
    pub congestion: Option<String>,
    /// With a lab: set what is missing in its hosts, then read them back.
    pub apply: bool,
    /// The socket buffer an application sets (iperf -w), if it does.
    pub app_buffer: Option<u64>,
    pub write_sysctl: Option<PathBuf>,
}

const DEADLINES: Deadlines = Deadlines {
    connect: Duration::from_secs(5),
    control: Duration::from_secs(10),
    message: Duration::from_secs(2),
    queue: Duration::ZERO,
};

/// The path, where it came from, what was measured, the ends' records, and
/// (for a lab) its hosts.
struct Path {
    tune: TunePath,
    from: String,
    measured: Option<Measured>,
    records: Vec<Record>,
    lab_hosts: Vec<Host>,
}

fn from_host(o: &Opts, addr: SocketAddr, rate: HostRate, kernel: Option<String>, out: &mut Output) -> Result<Path> {
    let (mut m, agent, mtu) = probes::probe(addr, DEADLINES)?;
    let rtt = o.rtt_ns.unwrap_or(m.rtt_median_ns.round() as u64).max(1);
    let rate_bps = match rate {
        HostRate::Given(r) => r,
        HostRate::Measure { offer_bps: offer, secs } => {
            if out.format == Format::Table {
                out.note(&format!(
                    "gridperf tune: probing the rate with {} of UDP for {secs} s",
                    fmt_bps(offer as f64)
                ));
            }
            let (r, note) = probes::probe_rate(addr, DEADLINES, offer, secs)?;
            if r < 1.0 {
                return Err(Error::network(format!(
                    "the rate probe to {addr} delivered nothing in {secs} s: no rate to tune for (a firewall on UDP?); give --rate"
                )));
            }
            m.rate_bps = Some(r);
            m.rate_note = Some(note);
            r.round() as u64
        }
    };
    let from = format!(
        "RTT {}: median of {} TCP round trips of 1 byte to {addr} (min {})",
        if o.rtt_ns.is_some() { "given".to_string() } else { fmt_ns(m.rtt_median_ns) },
        m.round_trips,
        fmt_ns(m.rtt_min_ns)
    );
    let records = vec![
        Record::new("this host", host::read_here(), kernel, mtu),
        Record::new(&format!("agent {addr}"), agent.sysctls.clone(), host::release_of(&agent.kernel), mtu),
    ];
    Ok(Path { tune: TunePath { rate_bps, rtt_ns: rtt }, from, measured: Some(m), records, lab_hosts: Vec::new() })
}

fn from_lab(o: &Opts, name: &str, kernel: Option<String>) -> Result<Path> {
    let st = crate::lab::running(name)?;
    let rate_bps = o
        .rate_bps
        .or(st.spec.ab.rate_bps)
        .ok_or_else(|| Error::usage(format!("lab {name} sets no rate: give --rate")))?;
    let rtt = o.rtt_ns.unwrap_or(st.spec.rtt_ns());
    if rtt == 0 {
        return Err(Error::usage(format!("lab {name} adds no delay: give --rtt")));
    }
    let mut records = Vec::new();
    let mut seen = BTreeSet::new();
    for h in &st.hosts {
        // one host of each side stands for its side; --apply sets them all
        if seen.insert(h.side as u8) {
            let mtu = (st.spec.mtu > 0).then_some(st.spec.mtu);
            records.push(Record::new(&h.name, host::read_in(&h.netns)?, kernel.clone(), mtu));
        }
    }
    Ok(Path {
        tune: TunePath { rate_bps, rtt_ns: rtt },
        from: format!("lab {name} ({})", st.spec.description),
        measured: None,
        records,
        lab_hosts: st.hosts.clone(),
    })
}

fn path(o: &Opts, out: &mut Output) -> Result<Path> {
    let kernel = host::kernel_release();
    let here = |kernel: Option<String>| vec![Record::new("this host", host::read_here(), kernel, None)];
    match &o.source {
        Source::Host { addr, rate } => from_host(o, *addr, *rate, kernel, out),
        Source::InLab(name) => from_lab(o, name, kernel),
        Source::Profile { name, rate_bps, rtt_ns } => Ok(Path {
            tune: TunePath { rate_bps: *rate_bps, rtt_ns: *rtt_ns },
            from: format!("lab profile {name}"),
            measured: None,
            records: here(kernel),
            lab_hosts: Vec::new(),
        }),
        Source::Given { rate_bps, rtt_ns } => Ok(Path {
            tune: TunePath { rate_bps: *rate_bps, rtt_ns: *rtt_ns },
            from: "given".into(),
            measured: None,
            records: here(kernel),
            lab_hosts: Vec::new(),
        }),
    }
}

/// The lines of this host's advice, as a sysctl.d file.
fn sysctl_file(v: &TuneView) -> String {
    let mut text = format!(
        "# gridperf tune: a single TCP stream at {} over {} RTT (BDP {} bytes)\n",
        fmt_bps(v.path.rate_bps as f64),
        fmt_ns(v.path.rtt_ns as f64),
        v.bdp_bytes
    );
    let mut lines: Vec<&String> = Vec::new();
    for l in v.ends.iter().filter(|e| !e.name.starts_with("agent ")).flat_map(|e| &e.advice.sysctl_lines) {
        if !lines.contains(&l) {
            lines.push(l);
        }
    }
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    text
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let Path { tune: p, from, measured, mut records, lab_hosts } = path(&o, out)?;
    if o.apply {
        host::may_make_namespaces("tune --apply").map_err(|e| Error::usage(format!("{e}; nothing was changed")))?;
    }
    let mut share_probes = Vec::new();
    // a far end (a host, a lab) has two records; cli/tune.rs takes --measure-share for no other
    if let (true, [client, agent]) = (o.measure_share, &mut records[..]) {
        let (here, there) = (client.settings().0, agent.settings().0);
        let json = out.format == Format::Json;
        let say: probes::Say = std::sync::Arc::new(move |m: &str| {
            if !json {
                eprintln!("gridperf tune: {m}");
            }
        });
        share_probes = match &o.source {
            Source::Host { addr, .. } => {
                let target = crate::runner::Target::remote(*addr);
                probes::probe_both_ways(&target, DEADLINES, (&here, &there), p, o.congestion.as_deref(), &*say)?
            }
            Source::InLab(name) => {
                probes::probe_in_lab(name, &lab_hosts, DEADLINES, (here, there), p, o.congestion.clone(), say)?
            }
            Source::Given { .. } | Source::Profile { .. } => Vec::new(),
        };
        with_shares(client, agent, &share_probes);
    }
    let app = o.app_buffer;
    let advise_all =
        |records: &[Record]| -> Vec<EndAdvice> { records.iter().map(|r| EndAdvice::new(r, p, app)).collect() };
    let ends = advise_all(&records);
    let dirs = directions(&ends, p, app);
    let mut view = TuneView {
        schema: TUNE_SCHEMA.into(),
        path: p,
        bdp_bytes: p.bdp_bytes(),
        path_from: from,
        measured,
        ends,
        directions: dirs,
        share_probes,
        applied: Vec::new(),
        after: None,
    };
    if let Some(f) = &o.write_sysctl {
        std::fs::write(f, sysctl_file(&view))
            .map_err(|e| Error::usage(format!("--write-sysctl {}: {e}", f.display())))?;
    }
    if o.apply {
        // each end's lines go to the hosts of its side of the bottleneck
        // (its probes measured that side); a global line is named once
        // (the loopback lab's two hosts share one namespace: the first end's lines stand)
        let mut done = BTreeSet::new();
        for e in &view.ends {
            let side = lab_hosts.iter().find(|h| h.name == e.name).map(|h| h.side);
            let hosts: Vec<(String, String)> = lab_hosts
                .iter()
                .filter(|h| Some(h.side) == side && done.insert(h.netns.clone()))
                .map(|h| (h.name.clone(), h.netns.clone()))
                .collect();
            for x in host::apply(&hosts, &e.advice.sysctl_lines)? {
                if x.host != "all" || !view.applied.iter().any(|y| y.host == "all" && y.setting == x.setting) {
                    view.applied.push(x);
                }
            }
        }
        let mut again = Vec::new();
        for r in &records {
            let h = lab_hosts
                .iter()
                .find(|h| h.name == r.name)
                .ok_or_else(|| Error::internal(format!("host {} is gone", r.name)))?;
            again.push(Record { sysctls: host::read_in(&h.netns)?, ..r.clone() });
        }
        view.after = Some(directions(&advise_all(&again), p, app));
    }
    let shown = render::Shown::new(&view, || render::tune::text(&view));
    out.render(&shown)
}
