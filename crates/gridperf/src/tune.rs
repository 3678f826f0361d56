//! `gridperf tune`'s I/O: reading the settings it needs (here, in a lab
//! host's network namespace, or from an agent's record), and setting them in
//! a lab's namespaces. The arithmetic is in `gridperf_core::tune`.

use crate::error::{Error, Result};
use gridperf_core::tune::{self, HostSettings};
use std::collections::BTreeMap;

/// The kernel release (uname -r).
pub fn kernel_release() -> Option<String> {
    gridperf_sys::uname().ok().map(|[_, _, release, _, _]| release)
}

/// The release out of an environment record's "Linux 6.18.0 x86_64".
pub fn release_of(kernel: &str) -> Option<String> {
    kernel.split_whitespace().nth(1).map(str::to_string)
}

/// Reads the settings tune needs in the calling thread's namespace.
pub fn read_here() -> BTreeMap<String, String> {
    tune::SETTINGS.iter().filter_map(|(n, _)| crate::env::sysctl(n).map(|v| (n.to_string(), v))).collect()
}

/// Reads the settings of a lab host: the per-namespace ones inside its
/// namespace, the global ones here (a namespace does not show them all).
pub fn read_in(netns: &str) -> Result<BTreeMap<String, String>> {
    let mut all = read_here();
    let inside = gridperf_sys::in_netns(netns, || Ok(read_here())).map_err(|e| {
        Error::usage(format!("cannot enter the namespace {netns} (reading a lab host needs root): {e}"))
    })?;
    for (name, per_ns) in tune::SETTINGS {
        if *per_ns {
            match inside.get(*name) {
                Some(v) => all.insert(name.to_string(), v.clone()),
                None => all.remove(*name),
            };
        }
    }
    Ok(all)
}

/// Splits "name = value" (a sysctl.d line) or "name=value".
pub fn split_line(line: &str) -> Result<(String, String)> {
    let (k, v) = line.split_once('=').ok_or_else(|| {
        Error::usage(format!("{line:?}: give NAME=VALUE, e.g. net.ipv4.tcp_rmem=\"4096 87380 174760\""))
    })?;
    let (k, v) = (k.trim().replace('/', "."), v.trim().trim_matches('"').to_string());
    if k.is_empty() || v.is_empty() || !k.starts_with("net.") || k.contains("..") {
        return Err(Error::usage(format!(
            "{line:?}: give a net.* sysctl and a value, e.g. net.ipv4.tcp_rmem=\"4096 87380 174760\""
        )));
    }
    Ok((k, v))
}

/// Sets one sysctl inside a namespace. A global one (absent or read-only
/// there) is refused with a message that says so; nothing else is touched.
pub fn set_in(netns: &str, name: &str, value: &str) -> Result<()> {
    if tune::per_namespace(name) == Some(false) {
        return Err(Error::usage(format!(
            "{name} is global on Linux, not per network namespace: it cannot be set for one lab host"
        )));
    }
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    let v = value.to_string();
    let p = path.clone();
    gridperf_sys::in_netns(netns, move || std::fs::write(&p, format!("{v}\n"))).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::usage(format!("{name}: no such setting in a network namespace ({path})"))
        }
        std::io::ErrorKind::PermissionDenied => Error::usage(format!(
            "{name}: not writable in a network namespace (global on this kernel, or it needs root): {e}"
        )),
        _ => Error::usage(format!("{name} = {value:?} in {netns}: {e}")),
    })?;
    // read it back: the kernel may clamp or refuse silently
    let now = gridperf_sys::in_netns(netns, {
        let name = name.to_string();
        move || Ok(crate::env::sysctl(&name))
    })
    .ok()
    .flatten();
    let want = value.split_whitespace().collect::<Vec<_>>().join(" ");
    match now {
        Some(n) if n == want => Ok(()),
        n => Err(Error::usage(format!("{name}: set to {want:?} in {netns}, but it reads {:?}", n.unwrap_or_default()))),
    }
}

/// What `--apply` did with one line on one host.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub host: String,
    pub setting: String,
    pub value: String,
    /// "set", or why not.
    pub outcome: String,
}

/// Sets the per-namespace lines in every host of a lab; the global ones
/// are left alone and said to be.
pub fn apply(hosts: &[crate::lab::Host], lines: &[String]) -> Result<Vec<Applied>> {
    if !crate::env::is_root() {
        return Err(Error::usage(
            "tune --apply needs root (CAP_NET_ADMIN over the lab's namespaces): run it with sudo; nothing was changed",
        ));
    }
    let mut out = Vec::new();
    for line in lines {
        let (name, value) = split_line(line)?;
        if tune::per_namespace(&name) == Some(false) {
            out.push(Applied {
                host: "all".into(),
                setting: name,
                value,
                outcome: "left alone: global, not per namespace (set it on the host itself)".into(),
            });
            continue;
        }
        for h in hosts {
            let outcome = match set_in(&h.netns, &name, &value) {
                Ok(()) => "set".to_string(),
                Err(e) => format!("failed: {e}"),
            };
            out.push(Applied { host: h.name.clone(), setting: name.clone(), value: value.clone(), outcome });
        }
    }
    Ok(out)
}

/// One end's settings and the advice for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EndAdvice {
    /// "this host", "agent 192.0.2.7:5201", or a lab host's name.
    pub name: String,
    pub settings: HostSettings,
    pub advice: tune::Advice,
    /// Settings that could not be read or parsed: unknown, not guessed.
    pub unknown: Vec<String>,
}

/// One end's settings as read, before the advice.
#[derive(Debug, Clone)]
pub struct Record {
    pub name: String,
    pub sysctls: BTreeMap<String, String>,
    /// The kernel release.
    pub kernel: Option<String>,
    pub mtu: Option<u32>,
    /// Measured by the share probes (`--measure-share`), if run.
    pub share: Option<f64>,
    pub send_share: Option<f64>,
    pub send_suffices: bool,
}

impl Record {
    pub fn new(name: &str, sysctls: BTreeMap<String, String>, kernel: Option<String>, mtu: Option<u32>) -> Record {
        Record { name: name.to_string(), sysctls, kernel, mtu, share: None, send_share: None, send_suffices: false }
    }

    /// The settings as tune models them, with what the probes measured, and
    /// the ones that could not be read.
    pub fn settings(&self) -> (HostSettings, Vec<String>) {
        let (mut h, unknown) = tune::host_from(&self.sysctls, self.kernel.as_deref(), self.mtu);
        h.measured_share = self.share;
        h.measured_send_share = self.send_share;
        h.send_buffer_suffices = self.send_suffices;
        (h, unknown)
    }
}

impl EndAdvice {
    pub fn new(r: &Record, path: tune::TunePath, app: Option<u64>) -> EndAdvice {
        let (settings, unknown) = r.settings();
        let advice = tune::advise(path, &settings, app);
        EndAdvice { name: r.name.clone(), settings, advice, unknown }
    }
}

/// What caps a stream from one end to the other.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DirectionCap {
    pub from: String,
    pub to: String,
    /// "sender: SETTING" or "receiver: SETTING"; None: nothing caps it below the path's rate.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
}

/// Both directions between every pair of ends (a single end: its own binding).
pub fn directions(ends: &[EndAdvice], path: tune::TunePath, app: Option<u64>) -> Vec<DirectionCap> {
    if let [one] = ends {
        return vec![DirectionCap {
            from: one.name.clone(),
            to: one.name.clone(),
            binding: one.advice.binding.clone(),
            cap_bps: one.advice.cap_bps,
        }];
    }
    let mut out = Vec::new();
    for s in ends {
        for r in ends {
            if s.name != r.name {
                let p = tune::advise_pair(path, &s.settings, &r.settings, app);
                out.push(DirectionCap {
                    from: s.name.clone(),
                    to: r.name.clone(),
                    binding: p.binding,
                    cap_bps: p.cap_bps,
                });
            }
        }
    }
    out
}

/// What was measured of a real path.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    /// TCP round trips of 1 byte (Nagle off), after a warm-up.
    pub round_trips: u64,
    pub rtt_min_ns: f64,
    pub rtt_median_ns: f64,
    /// The bottleneck rate found by a UDP probe (--measure-rate), IP bits per second.
    pub rate_bps: Option<f64>,
    /// How the rate was found, or why it is only a lower bound.
    pub rate_note: Option<String>,
}

/// What `gridperf tune` prints (schema gridperf.tune/2).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneView {
    pub schema: &'static str,
    pub path: tune::TunePath,
    pub bdp_bytes: u64,
    /// Where the rate and RTT came from.
    pub path_from: String,
    pub measured: Option<Measured>,
    pub ends: Vec<EndAdvice>,
    pub directions: Vec<DirectionCap>,
    /// With --measure-share: what the probes found, each way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub share_probes: Vec<ShareProbe>,
    /// With --apply: what was set where, and the directions as read back after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<Applied>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<DirectionCap>>,
}

/// Runs TCP ping-pong probes of 1 byte to an agent: the path's RTT, the
/// agent's record (its settings, read where it runs), and the path MTU the
/// probe's socket saw.
pub fn probe(
    addr: std::net::SocketAddr,
    deadlines: crate::runner::Deadlines,
) -> Result<(Measured, gridperf_core::model::EndInfo, Option<u32>)> {
    use crate::engines::{rtt, EchoOptions, Target};
    let opts = rtt::RttOptions {
        echo: EchoOptions {
            warmup_time: std::time::Duration::from_millis(200),
            ..EchoOptions::plain(vec![gridperf_core::plan::Proto::Tcp], vec![1], deadlines)
        },
        iterations: 50,
        duration: None,
        warmup: 5,
        keep_samples: false,
    };
    let r = rtt::run(&Target::Remote(addr), &opts, &mut |_| {})?;
    let s = r
        .points
        .first()
        .and_then(|p| p.summary.clone())
        .ok_or_else(|| Error::network(format!("no round trip to {addr} came back")))?;
    let mtu = r.env.client.sockets.iter().find_map(|x| x.path_mtu);
    let agent = r.env.server.ok_or_else(|| Error::network(format!("the agent at {addr} sent no record of itself")))?;
    Ok((
        Measured {
            round_trips: s.count,
            rtt_min_ns: s.min_ns,
            rtt_median_ns: s.median_ns,
            rate_bps: None,
            rate_note: None,
        },
        agent,
        mtu,
    ))
}

/// Finds the bottleneck rate with a UDP stream of `offer` bits per second
/// to the agent for `secs`: what arrives, in IP bits per second. When
/// little was lost, the path carried all that was offered and the figure is
/// only a lower bound, and says so.
pub fn probe_rate(
    addr: std::net::SocketAddr,
    deadlines: crate::runner::Deadlines,
    offer: u64,
    secs: u64,
) -> Result<(f64, String)> {
    let size = 1472u64;
    let spec = gridperf_core::wire::StreamSpec {
        proto: "udp".into(),
        duration_ms: secs * 1000,
        write_size: size,
        udp_rate_bps: Some(offer),
        sample_ms: 100,
        ..probe_spec(gridperf_core::wire::Direction::Up, None, None, None)
    };
    let st = run_probe(&crate::engines::Target::Remote(addr), deadlines, spec)?;
    // payload to IP: each datagram carries 28 bytes of IPv4 and UDP headers
    let wire = st.throughput_bps * (size + 28) as f64 / size as f64;
    let sent = st.sender.bytes as f64;
    let got = st.receiver.bytes as f64;
    let lost = if sent > 0.0 { 1.0 - got / sent } else { 0.0 };
    let sent_wire = if got > 0.0 { wire * sent / got } else { 0.0 };
    let note = if lost < 0.02 && sent_wire < 0.95 * offer as f64 {
        format!(
            "at least this: the path delivered {:.1}% of what the UDP probe sent in {secs} s, and the probe could send only {} of the {} asked (this host's limit, not the path's)",
            (1.0 - lost) * 100.0,
            gridperf_core::units::fmt_bps(sent_wire),
            gridperf_core::units::fmt_bps(offer as f64)
        )
    } else if lost < 0.02 {
        format!(
            "at least this: the path delivered {:.1}% of what the UDP probe sent in {secs} s; offer more with --probe-rate",
            (1.0 - lost) * 100.0
        )
    } else {
        format!("what arrived of a UDP stream that overran the path ({:.1}% lost, {secs} s)", lost * 100.0)
    };
    Ok((wire, note))
}

/// What the share probes found for one direction of a path.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ShareProbe {
    /// "up" (this end, or lab host a, sends) or "down" (the far end sends).
    pub direction: String,
    /// The receive buffer the receiver was granted, and the largest window
    /// it advertised: their ratio is its window share.
    pub rcvbuf: Option<u64>,
    pub window_max: Option<u64>,
    pub receive_share: Option<f64>,
    /// The send buffer the sender was granted, and the median data in
    /// flight while it held the sender back: their ratio is its send share.
    pub sndbuf: Option<u64>,
    pub in_flight_median: Option<u64>,
    pub send_share: Option<f64>,
    /// The send probe reached the path's rate without the buffer holding it
    /// back: that buffer suffices on this path.
    pub send_buffer_suffices: bool,
    /// What the send probe carried, bits per second.
    pub send_probe_bps: Option<f64>,
    /// Why a share is missing, if one is.
    pub notes: Vec<String>,
}

/// The buffer sizes the probes ask for, from the ceilings that matter: the
/// receiver's tcp_rmem maximum and the sender's tcp_wmem maximum, halved
/// (the kernel doubles what is asked), within 16 KiB to 512 MiB. A socket
/// cannot ask for more than net.core.rmem_max / wmem_max: above that the
/// probe runs at the largest buffer it can have, and says so.
pub fn probe_sizes(sender: &HostSettings, receiver: &HostSettings) -> (u64, u64) {
    let half = |v: Option<[u64; 3]>, core: Option<u64>| {
        let want = v.map(|t| t[2] / 2).unwrap_or(64 << 10);
        core.map_or(want, |c| want.min(c)).clamp(16 << 10, 512 << 20)
    };
    (half(receiver.tcp_rmem, receiver.rmem_max), half(sender.tcp_wmem, sender.wmem_max))
}

fn probe_spec(
    dir: gridperf_core::wire::Direction,
    send: Option<u64>,
    recv: Option<u64>,
    congestion: Option<String>,
) -> gridperf_core::wire::StreamSpec {
    gridperf_core::wire::StreamSpec {
        proto: "tcp".into(),
        streams: 1,
        direction: dir,
        duration_ms: 2000,
        bytes: None,
        write_size: 128 << 10,
        window: None,
        congestion,
        pacing_bps: None,
        gap_us: None,
        zerocopy: None,
        udp_rate_bps: None,
        sample_ms: 20,
        interval_ms: 1000,
        linger_ms: 500,
        omit_ms: 0,
        send_buffer: send,
        recv_buffer: recv,
    }
}

fn run_probe(
    target: &crate::engines::Target,
    deadlines: crate::runner::Deadlines,
    spec: gridperf_core::wire::StreamSpec,
) -> Result<gridperf_core::model::StreamResult> {
    use crate::engines::stream::{self, StreamOptions};
    stream::validate(&spec).map_err(Error::usage)?;
    let opts = StreamOptions {
        spec,
        omit: std::time::Duration::ZERO,
        repeat: 1,
        deadlines,
        path_rate_bps: None,
        notes: Vec::new(),
    };
    let r = stream::run(target, &opts, &mut |_, _, _| {})?;
    r.runs
        .into_iter()
        .next()
        .and_then(|run| run.streams.into_iter().next())
        .ok_or_else(|| Error::network("the probe returned no stream"))
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// Measures, for one direction, how much of the receiver's buffer becomes
/// window and how much of the sender's buffer is data in flight, at the
/// sizes that matter (`probe_sizes`): two TCP streams of 2 s, the first with
/// the receiver's SO_RCVBUF set, the second with the sender's SO_SNDBUF set
/// and the receiver's 16 times larger, so that the send buffer binds if
/// anything on the sender does. The first half second of each is left out.
pub fn probe_shares(
    target: &crate::engines::Target,
    deadlines: crate::runner::Deadlines,
    dir: gridperf_core::wire::Direction,
    (recv_buf, send_buf): (u64, u64),
    path_rate_bps: u64,
    congestion: Option<&str>,
) -> Result<ShareProbe> {
    let mut p = ShareProbe {
        direction: if dir == gridperf_core::wire::Direction::Up { "up" } else { "down" }.into(),
        ..ShareProbe::default()
    };
    let settled = |t: &gridperf_core::flow::TcpSample| t.t_ns >= 500_000_000;

    let r = run_probe(target, deadlines, probe_spec(dir, None, Some(recv_buf), congestion.map(str::to_string)))?;
    // an agent older than the buffer fields ignores them: its buffer was autotuned
    if r.receiver.socket.rcvbuf_requested != Some(recv_buf) {
        return Err(Error::refused(format!(
            "the receiving end did not set the receive buffer the probe asked for ({recv_buf} bytes): is the agent older than this gridperf? Leave out --measure-share, or update it"
        )));
    }
    p.rcvbuf = r.receiver.socket.rcvbuf_granted;
    p.window_max = r.timeline.iter().filter(|t| settled(t)).map(|t| u64::from(t.snd_wnd)).max();
    match (p.rcvbuf, p.window_max) {
        (Some(b), Some(w)) if b > 0 && w > 0 => p.receive_share = Some(w as f64 / b as f64),
        _ => p.notes.push("receive share: the probe saw no advertised window or no granted buffer".into()),
    }

    let big = (send_buf * 16).min(1 << 30);
    let r = run_probe(target, deadlines, probe_spec(dir, Some(send_buf), Some(big), congestion.map(str::to_string)))?;
    if r.sender.socket.sndbuf_requested != Some(send_buf) {
        return Err(Error::refused(format!(
            "the sending end did not set the send buffer the probe asked for ({send_buf} bytes): is the agent older than this gridperf? Leave out --measure-share, or update it"
        )));
    }
    p.sndbuf = r.sender.socket.sndbuf_granted;
    p.send_probe_bps = Some(r.throughput_bps);
    let settled: Vec<_> = r.timeline.iter().filter(|t| settled(t)).collect();
    let in_flight = |t: &gridperf_core::flow::TcpSample| u64::from(t.unacked) * u64::from(t.mss);
    let at_window = settled.iter().filter(|t| t.snd_wnd > 0 && in_flight(t) * 100 >= u64::from(t.snd_wnd) * 85).count();
    // held back by the send buffer, as stream's verdict reads it: the
    // kernel's sndbuf-limited clock ran at least a fifth of the busy time,
    // or (when the write queue ran dry instead) it marked at least a fifth
    // of the samples app-limited below cwnd
    let n = settled.len().max(1) as f64;
    // (app-limited with little in flight is a slow application, not the buffer)
    let granted = r.sender.socket.sndbuf_granted.unwrap_or(u64::MAX);
    let marked = settled
        .iter()
        .filter(|t| t.app_limited && t.unacked < t.cwnd && in_flight(t).saturating_mul(2) >= granted)
        .count() as f64
        / n;
    let clock = match (settled.first(), settled.last()) {
        (Some(f), Some(l)) if l.busy_us > f.busy_us => {
            l.sndbuf_limited_us.saturating_sub(f.sndbuf_limited_us) as f64 / (l.busy_us - f.busy_us) as f64
        }
        _ => 0.0,
    };
    let held = clock.max(marked);
    p.in_flight_median = median(settled.iter().map(|t| in_flight(t)).collect());
    let at_rate = r.throughput_bps >= 0.9 * path_rate_bps as f64;
    match (p.sndbuf, p.in_flight_median) {
        (_, _) if settled.len() < 5 => p.notes.push("send share: too few samples".into()),
        (_, _) if held < 0.2 && at_rate => {
            p.send_buffer_suffices = true;
            p.notes.push(format!(
                "send share: a {}-byte send buffer did not hold the sender back; the probe carried {} of the path's {}",
                p.sndbuf.unwrap_or(0),
                gridperf_core::units::fmt_bps(r.throughput_bps),
                gridperf_core::units::fmt_bps(path_rate_bps as f64)
            ))
        }
        (_, _) if at_window * 5 > settled.len() => p.notes.push(format!(
            "send share: the receiver's window bound the probe in {at_window} of {} samples (net.core.rmem_max too low for a receive buffer of {big} bytes?)",
            settled.len()
        )),
        (_, _) if held < 0.2 => p.notes.push(format!(
            "send share: the send buffer held the sender back only {:.0}% of the time, below the path's rate (cwnd or loss bound it)",
            held * 100.0
        )),
        // a write may overshoot the buffer by one skb (64 KiB); far more
        // means the kernel did not hold this socket to its buffer (seen in
        // the lab at 300 Mbit/s: SO_SNDBUF 131072, 1.3 MB queued), and the
        // ratio measures nothing
        (Some(b), Some(f)) if f > b + (128 << 10) && f as f64 > 1.5 * b as f64 => p.notes.push(format!(
            "send share: {f} bytes were in flight against a send buffer of {b}: the kernel did not hold the sender to it, so the probe measures nothing"
        )),
        (Some(b), Some(f)) if b > 0 && f > 0 => p.send_share = Some(f as f64 / b as f64),
        _ => p.notes.push("send share: no granted send buffer".into()),
    }
    Ok(p)
}

/// Folds the probes into the ends' records: in each direction the receiver
/// gets its receive share and the sender its send share. `client` is the
/// end that ran the probes ("up": it sent), `agent` the far end.
pub fn with_shares(client: &mut Record, agent: &mut Record, probes: &[ShareProbe]) {
    for p in probes {
        let (sender, receiver) =
            if p.direction == "up" { (&mut *client, &mut *agent) } else { (&mut *agent, &mut *client) };
        sender.send_share = p.send_share.or(sender.send_share);
        sender.send_suffices |= p.send_buffer_suffices;
        receiver.share = p.receive_share.or(receiver.share);
    }
}

/// Runs the share probes both ways, from the calling thread, to `target`:
/// `ends` are (this end's, the far end's) settings, for the buffer sizes.
pub fn probe_both_ways(
    target: &crate::engines::Target,
    deadlines: crate::runner::Deadlines,
    ends: (&HostSettings, &HostSettings),
    path_rate_bps: u64,
    congestion: Option<&str>,
    say: &dyn Fn(&str),
) -> Result<Vec<ShareProbe>> {
    use gridperf_core::wire::Direction;
    let mut out = Vec::new();
    for dir in [Direction::Up, Direction::Down] {
        let (sender, receiver) = if dir == Direction::Up { ends } else { (ends.1, ends.0) };
        let sizes = probe_sizes(sender, receiver);
        say(&format!(
            "measuring the buffers' shares {}: a TCP stream of 2 s with a {}-byte receive buffer, one with a {}-byte send buffer",
            if dir == Direction::Up { "to the far end" } else { "from the far end" },
            sizes.0,
            sizes.1
        ));
        out.push(probe_shares(target, deadlines, dir, sizes, path_rate_bps, congestion)?);
    }
    Ok(out)
}

/// Runs the share probes across a running lab: an agent of its own on the
/// first B host (on a port of its own, ended afterwards by its PID), the
/// probes from a thread in the first A host.
pub fn probe_in_lab(
    name: &str,
    hosts: &[crate::lab::Host],
    deadlines: crate::runner::Deadlines,
    ends: (HostSettings, HostSettings),
    path_rate_bps: u64,
    congestion: Option<String>,
    quiet: bool,
) -> Result<Vec<ShareProbe>> {
    use crate::lab::emulator::Side;
    let a = hosts.iter().find(|h| h.side == Side::A).ok_or_else(|| Error::internal("the lab has no A host"))?;
    let b = hosts.iter().find(|h| h.side == Side::B).ok_or_else(|| Error::internal("the lab has no B host"))?;
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let mut agent = crate::lab::run::start_agent(name, b, port)?;
    let target = crate::engines::Target::Remote(std::net::SocketAddr::from((b.addr, port)));
    let result = gridperf_sys::in_netns(&a.netns, move || {
        let say = move |m: &str| {
            if !quiet {
                eprintln!("gridperf tune: {m}");
            }
        };
        probe_both_ways(&target, deadlines, (&ends.0, &ends.1), path_rate_bps, congestion.as_deref(), &say)
            .map_err(|e| std::io::Error::other(e.to_string()))
    });
    // the agent stops within a second of SIGTERM; one that does not is killed
    crate::lab::stop_child(&mut agent, std::time::Duration::from_secs(3));
    result.map_err(|e| Error::network(format!("the share probes across lab {name}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_lines_split() {
        assert_eq!(
            split_line("net.ipv4.tcp_rmem = 4096 87380 8388608").expect("line"),
            ("net.ipv4.tcp_rmem".into(), "4096 87380 8388608".into())
        );
        assert_eq!(
            split_line("net/ipv4/tcp_wmem=\"8192 4369000 8738000\"").expect("line"),
            ("net.ipv4.tcp_wmem".into(), "8192 4369000 8738000".into())
        );
        assert!(split_line("tcp_rmem").is_err());
        assert!(split_line("kernel.panic=1").is_err());
        assert!(split_line("net.ipv4.tcp_rmem=").is_err());
        assert!(split_line("net..x=1").is_err());
    }

    #[test]
    fn the_release_of_a_record() {
        assert_eq!(release_of("Linux 6.18.0 x86_64").as_deref(), Some("6.18.0"));
        assert_eq!(release_of("unknown"), None);
    }
}
