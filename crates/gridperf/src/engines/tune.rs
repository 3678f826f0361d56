//! `gridperf tune`'s probes: the path's RTT (TCP round trips of 1 byte,
//! and the agent's record of its settings), its bottleneck rate (a UDP
//! stream), and how much of each end's buffers becomes window or data in
//! flight (TCP streams with one end's buffer set). The arithmetic is in
//! `gridperf_core::analysis::tune`; reading and setting settings in `host`.

use crate::error::{Error, Result};
use crate::lab::emulator::Side;
use crate::lab::Host;
use crate::runner::{Deadlines, Target};
use gridperf_core::analysis::tune::{self, HostSettings};
use gridperf_core::model::{Measured, ShareProbe};

/// Runs TCP ping-pong probes of 1 byte to an agent: the path's RTT, the
/// agent's record (its settings, read where it runs), and the path MTU the
/// probe's socket saw.
pub fn probe(
    addr: std::net::SocketAddr,
    deadlines: Deadlines,
) -> Result<(Measured, gridperf_core::model::EndInfo, Option<u32>)> {
    use super::{rtt, EchoOptions};
    let opts = rtt::RttOptions::counted(
        EchoOptions {
            warmup_time: std::time::Duration::from_millis(200),
            ..EchoOptions::plain(vec![gridperf_core::model::plan::Proto::Tcp], vec![1], deadlines)
        },
        50,
        5,
    );
    let r = rtt::run(&Target::remote(addr), &opts, &mut |_| {})?;
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
pub fn probe_rate(addr: std::net::SocketAddr, deadlines: Deadlines, offer: u64, secs: u64) -> Result<(f64, String)> {
    let size = 1472u64;
    let spec = gridperf_core::wire::StreamSpec {
        proto: "udp".into(),
        duration_ms: secs * 1000,
        write_size: size,
        udp_rate_bps: Some(offer),
        sample_ms: 100,
        ..probe_spec(gridperf_core::wire::Direction::Up, None, None, None)
    };
    let st = run_probe(&Target::remote(addr), deadlines, spec)?;
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

/// How long each share probe sends.
const PROBE_MS: u64 = 2000;

fn probe_spec(
    dir: gridperf_core::wire::Direction,
    send: Option<u64>,
    recv: Option<u64>,
    congestion: Option<String>,
) -> gridperf_core::wire::StreamSpec {
    gridperf_core::wire::StreamSpec {
        congestion,
        sample_ms: 100,
        linger_ms: 500,
        send_buffer: send,
        recv_buffer: recv,
        ..gridperf_core::wire::StreamSpec::tcp(dir, PROBE_MS)
    }
}

/// One probe stream; across a lab (`target.lab`), taken again (three
/// tries in all) while the lab's emulator did not keep up with it: such a
/// probe is not the path's.
fn run_probe(
    target: &Target,
    deadlines: Deadlines,
    spec: gridperf_core::wire::StreamSpec,
) -> Result<gridperf_core::model::StreamResult> {
    crate::runner::again_if_invalid(3, || super::stream::probe(target, deadlines, spec.clone()))?
        .streams
        .into_iter()
        .next()
        .ok_or_else(|| Error::network("the probe returned no stream"))
}

/// Measures, for one direction, how much of the receiver's buffer becomes
/// window and how much of the sender's buffer is data in flight, at the
/// sizes that matter (`probe_sizes`): two TCP streams of 2 s, the first with
/// the receiver's SO_RCVBUF set, the second with the sender's SO_SNDBUF set
/// and the receiver's 16 times larger, so that the send buffer binds if
/// anything on the sender does. The first half second of each is left out.
pub fn probe_shares(
    target: &Target,
    deadlines: Deadlines,
    dir: gridperf_core::wire::Direction,
    (recv_buf, send_buf): (u64, u64),
    path: gridperf_core::analysis::tune::TunePath,
    congestion: Option<&str>,
) -> Result<ShareProbe> {
    let mut p = ShareProbe {
        direction: if dir == gridperf_core::wire::Direction::Up { "up" } else { "down" }.into(),
        ..ShareProbe::default()
    };
    // past the first half second (slow start), and no later than the
    // senders stopped: the samples after that see the last bytes acked and
    // then nothing, and read a rate 3% low (seen at 35 ms in the lab)
    let settled =
        |t: &gridperf_core::analysis::flow::TcpSample| t.t_ns >= 500_000_000 && t.t_ns <= PROBE_MS * 1_000_000;

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
    let settled: Vec<_> = r.timeline.iter().filter(|t| settled(t)).collect();
    // the rate after slow start, over the whole settled part and window by
    // window: what this buffer let through on this path, and how much that
    // wandered
    let rate = |a: &gridperf_core::analysis::flow::TcpSample, b: &gridperf_core::analysis::flow::TcpSample| {
        (b.t_ns > a.t_ns).then(|| b.bytes_acked.saturating_sub(a.bytes_acked) as f64 * 8e9 / (b.t_ns - a.t_ns) as f64)
    };
    // over windows of 250 ms or four RTTs, whichever is longer: a TCP_INFO
    // sample lands anywhere in a round trip's burst, and the rate from one
    // to the next wanders by half either way without saying anything
    let window_ns = (path.rtt_ns * 4).max(250_000_000);
    let mut rates: Vec<u64> = Vec::new();
    let mut from = settled.first().copied();
    for t in &settled {
        if let Some(f) = from {
            if t.t_ns >= f.t_ns + window_ns {
                rates.extend(rate(f, t).map(|r| r as u64));
                from = Some(t);
            }
        }
    }
    rates.sort_unstable();
    let rate_q = |q: f64| gridperf_core::analysis::stats::quantile_sorted(&rates, q);
    let steady_bps = rate_q(0.5).or_else(|| match (settled.first(), settled.last()) {
        (Some(f), Some(l)) => rate(f, l),
        _ => None,
    });
    p.send_probe_bps = steady_bps.or(Some(r.throughput_bps));
    let in_flight = |t: &gridperf_core::analysis::flow::TcpSample| u64::from(t.unacked) * u64::from(t.mss);
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
    p.in_flight_median =
        gridperf_core::analysis::stats::median_u64(&settled.iter().map(|t| in_flight(t)).collect::<Vec<_>>())
            .map(|m| m.round() as u64);
    // the model's RTT: a share x buffer / the path's RTT is then the
    // probe's own rate, the cap this buffer has on this path
    let path_rtt_s = Some(path.rtt_ns as f64 / 1e9).filter(|r| *r > 0.0);
    let path_rate_bps = path.rate_bps;
    let path = path_rate_bps as f64;
    let fmt = gridperf_core::units::fmt_bps;
    match (p.sndbuf, p.in_flight_median, steady_bps, path_rtt_s) {
        _ if settled.len() < 5 => p.notes.push("send share: too few samples".into()),
        // the path was (nearly) full some of the time: what caps the
        // stream is the path, within what this probe can tell apart
        (_, _, Some(st), _) if rate_q(0.75).unwrap_or(st) >= 0.95 * path => {
            p.send_buffer_suffices = true;
            p.notes.push(format!(
                "send share: through a {}-byte send buffer the probe carried {} (a quarter of its intervals {} or more) \
                 of the path's {}: the buffer does not hold a stream below the path's rate",
                p.sndbuf.unwrap_or(0),
                fmt(st),
                fmt(rate_q(0.75).unwrap_or(st)),
                fmt(path)
            ))
        }
        _ if at_window * 5 > settled.len() => p.notes.push(format!(
            "send share: the receiver's window bound the probe in {at_window} of {} samples (net.core.rmem_max too low for a receive buffer of {big} bytes?)",
            settled.len()
        )),
        _ if held < 0.2 => p.notes.push(format!(
            "send share: the send buffer held the sender back only {:.0}% of the time, below the path's rate (cwnd or loss bound it)",
            held * 100.0
        )),
        // a write may overshoot the buffer by one skb (64 KiB); far more
        // means the kernel did not hold this socket to its buffer (seen in
        // the lab at 300 Mbit/s: SO_SNDBUF 131072, 1.3 MB queued), and the
        // ratio measures nothing
        (Some(b), Some(f), _, _) if f > b + (128 << 10) && f as f64 > 1.5 * b as f64 => p.notes.push(format!(
            "send share: {f} bytes were in flight against a send buffer of {b}: the kernel did not hold the sender to it, so the probe measures nothing"
        )),
        // the share is what the probe carried through the buffer: rate x
        // RTT / buffer, the window that rate needs. The data counted in
        // flight reads higher than that (a median of unacknowledged
        // segments includes what waits in the path's queue and in the
        // receiver's delayed ACKs), and a cap drawn from it came out above
        // what a stream then carried (689 against 626 Mbit/s at 35 ms)
        (Some(b), _, Some(st), Some(rtt)) if b > 0 && st > 0.0 => {
            let share = |bps: f64| bps / 8.0 * rtt / b as f64;
            p.send_share = Some(share(st));
            if let (Some(q1), Some(q3)) = (rate_q(0.25), rate_q(0.75)) {
                p.send_share_quartiles = Some((share(q1), share(q3)));
            }
        }
        _ => p.notes.push("send share: no granted send buffer, or no rate or RTT read".into()),
    }
    Ok(p)
}

/// Runs the share probes both ways, from the calling thread, to `target`:
/// `ends` are (this end's, the far end's) settings, for the buffer sizes.
pub fn probe_both_ways(
    target: &Target,
    deadlines: Deadlines,
    ends: (&HostSettings, &HostSettings),
    path: gridperf_core::analysis::tune::TunePath,
    congestion: Option<&str>,
    say: &dyn Fn(&str),
) -> Result<Vec<ShareProbe>> {
    use gridperf_core::wire::Direction;
    let mut out = Vec::new();
    for dir in [Direction::Up, Direction::Down] {
        let (sender, receiver) = if dir == Direction::Up { ends } else { (ends.1, ends.0) };
        let sizes = tune::probe_sizes(sender, receiver);
        say(&format!(
            "measuring the buffers' shares {}: a TCP stream of 2 s with a {}-byte receive buffer, one with a {}-byte send buffer",
            if dir == Direction::Up { "to the far end" } else { "from the far end" },
            sizes.0,
            sizes.1
        ));
        out.push(probe_shares(target, deadlines, dir, sizes, path, congestion)?);
    }
    Ok(out)
}

/// What the probes say they are about to do, for the user (the command
/// decides where, or whether, it is shown).
pub type Say = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// Runs the share probes across a running lab: an agent of its own on the
/// first B host (on a port of its own, ended afterwards by its PID), the
/// probes from a thread in the first A host.
pub fn probe_in_lab(
    name: &str,
    hosts: &[Host],
    deadlines: Deadlines,
    ends: (HostSettings, HostSettings),
    path: gridperf_core::analysis::tune::TunePath,
    congestion: Option<String>,
    say: Say,
) -> Result<Vec<ShareProbe>> {
    let a = hosts.iter().find(|h| h.side == Side::A).ok_or_else(|| Error::internal("the lab has no A host"))?;
    let b = hosts.iter().find(|h| h.side == Side::B).ok_or_else(|| Error::internal("the lab has no B host"))?;
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let mut agent = crate::lab::run::start_agent(b, port, crate::lab::hosts_niced(name))?;
    // the lab's emulator watched: a probe it did not keep up with is taken again
    let target = Target { lab: Some(name.to_string()), ..Target::remote(std::net::SocketAddr::from((b.addr, port))) };
    // the probes' own error keeps its kind (an invalid run is exit 4, not a
    // network failure); only entering the namespace fails as an io::Error
    let result = gridperf_sys::in_netns(&a.netns, move || {
        Ok(probe_both_ways(&target, deadlines, (&ends.0, &ends.1), path, congestion.as_deref(), &*say))
    });
    // the agent stops within a second of SIGTERM; one that does not is killed
    crate::lab::stop_child(&mut agent, std::time::Duration::from_secs(3));
    let what = format!("the share probes across lab {name}");
    result.map_err(|e| Error::network(format!("{what}: {e}")))?.map_err(|e| e.context(what))
}
