//! `gridperf lab clone`'s probes: round trips of small UDP messages, then
//! each direction in turn (the agent sends for b -> a), a UDP stream that
//! overruns the path for its rate and queue, and one paced at a quarter of
//! that rate for its loss. The fitting is `gridperf_core::lab::clone`'s.

use super::stream;
use super::{rtt, EchoOptions};
use crate::error::{Error, Result};
use crate::runner::{again_if_invalid, Deadlines, Target};
use gridperf_core::lab::clone::{self, CloneFile, Direction, Estimate, Profile, Source};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::StreamResult;
use gridperf_core::units::fmt_bps;
use gridperf_core::wire::{self, StreamSpec};
use std::time::{Duration, Instant};

/// What a clone does, checked.
#[derive(Debug, Clone)]
pub struct CloneOptions {
    /// The far end's name as the user gave it, for the record.
    pub host: String,
    pub deadlines: Deadlines,
    /// The whole clone's time budget.
    pub budget: Duration,
    /// The most the overrunning stream offers, IP bits per second.
    pub max_rate_bps: u64,
}

/// The paced stream's most datagrams per second: loss is per packet, and
/// more packets see rarer loss, but each costs both hosts CPU.
const PACED_PPS: f64 = 20_000.0;
/// The overrun's load per UDP stream (one sender thread, segmentation
/// offload), IP bits per second: one offered 2.94 Gbit/s on loopback with
/// a third of a CPU.
const OVERRUN_STREAM_BPS: f64 = 3e9;
/// Datagram payload of the overrunning stream (a 1500-byte IP packet).
const FULL: u64 = 1472;
/// Round trips the delay's fit wants before the probe stops (its median's
/// interval from order statistics needs 6; a few dozen make it narrow).
const ENOUGH_RTTS: usize = 30;
/// The most round-trip probes of the budget's share each.
const RTT_PROBES: u32 = 4;
/// The receivers' report interval.
const INTERVAL_MS: u64 = 100;

/// How long each probe waits in the agent's queue at least: the agent
/// frees the slot of the probe before moments after its result.
const NEXT_PROBE_WAIT: Duration = Duration::from_secs(3);

/// `d` with a wait of at least [`NEXT_PROBE_WAIT`] in the agent's queue.
fn waiting(d: Deadlines) -> Deadlines {
    Deadlines { queue: d.queue.max(NEXT_PROBE_WAIT), ..d }
}

/// A probe across a lab whose emulator fell behind is taken again, up to
/// this many times in all (the clone's time budget stretches by as much).
const PROBE_TRIES: u32 = 3;

/// The round trips of one or more probes, put together (`probes`: how
/// many, counted by [`round_trips`]).
#[derive(Debug, Default)]
struct RoundTrips {
    samples: Vec<u64>,
    sent: u64,
    lost: u64,
    left_out: u64,
    probes: u32,
}

/// Takes `probe` until [`ENOUGH_RTTS`] round trips came back, at most
/// [`RTT_PROBES`] times.
fn round_trips(mut probe: impl FnMut() -> Result<RoundTrips>) -> Result<RoundTrips> {
    let mut g = RoundTrips::default();
    while g.samples.len() < ENOUGH_RTTS && g.probes < RTT_PROBES {
        let p = probe()?;
        g.samples.extend(p.samples);
        (g.sent, g.lost, g.left_out, g.probes) =
            (g.sent + p.sent, g.lost + p.lost, g.left_out + p.left_out, g.probes + 1);
    }
    Ok(g)
}

/// Runs the probes against `target` and fits the path; `say` hears each step.
pub fn run(target: &Target, o: &CloneOptions, say: &mut dyn FnMut(&str)) -> Result<CloneFile> {
    // a dozen probes in a row, each a test of its own: each waits a moment
    // in the agent's queue for the slot of the one before (CI, a busy
    // machine: the overrun back was told "busy: 1 test(s) running", the
    // paced stream just ended)
    let o = &CloneOptions { deadlines: waiting(o.deadlines), ..o.clone() };
    let start = Instant::now();
    let budget = o.budget.as_secs_f64();
    let mut notes = Vec::new();

    // round trips: about 8% of the budget, at least 2 s
    let rtt_time = Duration::from_secs_f64((budget * 0.08).clamp(2.0, 10.0));
    say(&format!("round trips of 64-byte UDP messages for {:.0} s", rtt_time.as_secs_f64()));
    let mut ro = rtt::RttOptions::counted(EchoOptions::plain(vec![Proto::Udp], vec![64], o.deadlines), 0, 2);
    ro.duration = Some(rtt_time);
    ro.keep_samples = true;
    // a lost message costs the probe its timeout (1 s), and a loss burst
    // of a few costs it all: CI's clone of an 11 ms path with 0.22% loss in
    // bursts of 3 got 3 round trips back in 2 s. Round trips are taken
    // again until [`ENOUGH_RTTS`] came back, up to [`RTT_PROBES`] probes.
    let RoundTrips { samples, sent, lost, left_out, probes } = round_trips(|| {
        let r = again_if_invalid(PROBE_TRIES, || {
            let r = rtt::run(target, &ro, &mut |_| {})?;
            crate::runner::lab_valid(&r.env).map(|_| r)
        })?;
        let p = r.points.into_iter().next().ok_or_else(|| Error::network("the round-trip probe returned no point"))?;
        Ok(RoundTrips {
            samples: p.samples_ns.unwrap_or_default(),
            sent: p.sent,
            lost: p.lost,
            left_out: p.left_out,
            ..RoundTrips::default()
        })
    })?;
    if samples.is_empty() {
        return Err(Error::network(format!(
            "no round trip came back from {} in {probes} probe(s) of {:.0} s ({sent} sent): the path loses everything, or the agent's UDP port is blocked",
            o.host,
            rtt_time.as_secs_f64(),
        )));
    }
    if probes > 1 {
        notes.push(format!(
            "the round trips were taken in {probes} probes of {:.0} s, {} coming back: each lost message costs its 1 s timeout{}",
            rtt_time.as_secs_f64(),
            samples.len(),
            if left_out > 0 { format!(" ({left_out} more left out: they crossed the lab's emulator while it was late)") } else { String::new() }
        ));
    }
    let (delay, jitter, shape) = clone::fit_delay(&samples);
    let table = (shape == clone::JitterShape::RightSkewed).then(|| clone::fit_table(&samples)).flatten();
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    let q = |p| gridperf_core::analysis::stats::quantile_sorted(&sorted, p).map(|ns| ns / 1e9);
    let measured = clone::Measured {
        rtt_p50_s: q(0.5),
        rtt_p95_s: q(0.95),
        rtt_samples_ns: samples.clone(),
        ..Default::default()
    };
    let rtt_s = 2.0 * delay.value.unwrap_or(0.0);
    if lost > 0 {
        notes.push(format!("{lost} of {sent} round-trip messages were lost"));
    }

    // each direction: the overrun (rate, queue) then the paced stream (loss);
    // the paced streams share what is left of the budget, less a margin
    let overrun_s = (1.0 + 6.0 * rtt_s).clamp(1.5, 4.0);
    let linger_s = 1.0 + 4.0 * rtt_s;
    let mut dirs = Vec::new();
    for (k, dir) in [wire::Direction::Up, wire::Direction::Down].into_iter().enumerate() {
        let name = if dir == wire::Direction::Up { "a -> b (to the agent)" } else { "b -> a (from the agent)" };
        // a stream per 3 Gbit/s asked
        let senders = (o.max_rate_bps as f64 / OVERRUN_STREAM_BPS).ceil().clamp(1.0, 8.0) as u32;
        say(&format!(
            "{name}: {senders} UDP stream(s) of {} in all for {overrun_s:.1} s, to overrun the path",
            fmt_bps(o.max_rate_bps as f64)
        ));
        let spec = StreamSpec {
            streams: senders,
            ..udp_spec(dir, FULL, o.max_rate_bps / u64::from(senders), overrun_s, linger_s)
        };
        // judged interval by interval: a hold-up of the lab's emulator (a
        // busy machine, the hypervisor) takes from the intervals it lay in,
        // which the rate leaves out, and voids no more than that; looking a
        // round trip back from each, for what left the link before it arrived
        let lead = Duration::from_secs_f64(rtt_s.max(0.001));
        let over =
            again_if_invalid(PROBE_TRIES, || stream::probe_by_interval(target, o.deadlines, spec.clone(), lead))?;
        if let Some(n) = over.env.lab.as_ref().and_then(|l| l.note.as_ref()) {
            notes.push(format!("{name}, the overrun: {n}"));
        }
        let over = over.streams;
        let (rate, loaded, overrun_note) = rate_of(&over, o.max_rate_bps as f64, overrun_s);
        if let Some(n) = overrun_note {
            notes.push(format!("{name}: {n}"));
        }
        let r = rate.value.unwrap_or(o.max_rate_bps as f64);
        // a quarter of the rate, in datagrams of at least 64 bytes, at most
        // PACED_PPS a second; and slow enough that the most a paced sender
        // sends at once (what fell due while it was not running, up to 5 ms)
        // fits in half the queue, or the probe's own bursts would overflow
        // it and count as the path's loss. The queue here is provisional:
        // the rise over the overrun's smallest transit.
        let base = loaded_min(&over);
        let provisional = base.map(|b| clone::fit_queue(&[b; 6], &loaded, &rate));
        let fits = provisional.and_then(|q| q.value).map_or(f64::INFINITY, |q| q * 8.0 / 2.0 / CATCH_UP_S);
        let paced_bps = (r / 4.0).min(fits).max(PACED_MIN_BPS);
        let size = ((paced_bps / 8.0 / PACED_PPS) - 28.0).clamp(64.0, FULL as f64) as u64;
        let left = budget - start.elapsed().as_secs_f64();
        let dirs_left = 2 - k;
        let overheads = (dirs_left - 1) as f64 * (overrun_s + 2.0 * linger_s + 2.0) + linger_s + 2.0;
        let paced_s = ((left - overheads) / dirs_left as f64).clamp(2.0, 60.0);
        say(&format!(
            "{name}: a UDP stream paced at {} in {}-byte datagrams for {paced_s:.0} s, for loss",
            fmt_bps(paced_bps),
            size + 28
        ));
        let spec = udp_spec(dir, size, paced_bps as u64, paced_s, linger_s);
        let paced = first(again_if_invalid(PROBE_TRIES, || stream::probe(target, o.deadlines, spec.clone()))?.streams)?;
        let (expected, lost, gaps, reordered, idle) = seq_of(&paced);
        notes.push(format!(
            "{name}: {expected} paced datagrams sent, {lost} lost in {gaps} runs, {reordered} out of order"
        ));
        let (loss, burst) = clone::fit_loss(expected, lost, gaps, Some(expected as f64 / paced_s));
        let queue = clone::fit_queue(&idle, &loaded, &rate);
        let mtu = over
            .iter()
            .find_map(|s| s.sender.socket.path_mtu)
            .or(paced.sender.socket.path_mtu)
            .map(|m| Estimate::new(m as f64, m as f64, m as f64, "the sending socket's path MTU (IP_MTU)"))
            .unwrap_or_else(|| {
                Estimate::missing("the sending socket's path MTU (IP_MTU)", "the sender did not report it")
            });
        dirs.push(Direction {
            rate_bps: rate,
            delay_s: delay.clone(),
            jitter_s: jitter.clone(),
            jitter_shape: shape,
            jitter_table_s: table.clone(),
            reorders: reordered > 0,
            loss,
            burst,
            queue_bytes: queue,
            mtu,
        });
    }
    notes.push(format!(
        "load: UDP streams of up to {} each way for {overrun_s:.1} s (--max-rate), then a quarter of the rate found",
        fmt_bps(o.max_rate_bps as f64)
    ));
    let ba = dirs.pop().expect("two directions");
    let ab = dirs.pop().expect("two directions");
    Ok(CloneFile {
        schema: clone::SCHEMA.into(),
        source: Source {
            host: o.host.clone(),
            // the command dates it
            date: String::new(),
            version: env!("CARGO_PKG_VERSION").into(),
            from: "probes".into(),
        },
        profile: Profile { ab, ba },
        notes,
        seconds: Some(start.elapsed().as_secs_f64()),
        measured: Some(measured),
        verify: Vec::new(),
    })
}

/// TCP throughput a -> b of `streams` CUBIC streams (bits per second),
/// after slow start: a run of 4 s or 10 round trips, the first second and
/// 10 round trips left out.
pub fn tcp_throughput(target: &Target, deadlines: Deadlines, streams: u32, rtt_s: f64) -> Result<f64> {
    let omit = (1.0 + 10.0 * rtt_s).min(5.0);
    let secs = omit + (10.0 * rtt_s).clamp(4.0, 10.0);
    let spec = StreamSpec {
        streams,
        congestion: Some("cubic".into()),
        omit_ms: (omit * 1000.0) as u64,
        ..StreamSpec::tcp(wire::Direction::Up, ((secs - omit) * 1000.0) as u64)
    };
    again_if_invalid(PROBE_TRIES, || stream::probe(target, deadlines, spec.clone()))?
        .up_bps
        .ok_or_else(|| Error::network("the TCP streams returned nothing"))
}

/// How many times four streams are run; their median is the figure.
const FOUR_STREAM_RUNS: usize = 3;

/// The steps [`add_tcp`] reports as it goes (for a progress bar).
pub const TCP_STEPS: u64 = 2 + FOUR_STREAM_RUNS as u64;

/// Adds one and four CUBIC streams' throughput to a clone's measurements.
pub fn add_tcp(f: &mut CloneFile, target: &Target, deadlines: Deadlines, say: &mut dyn FnMut(&str)) -> Result<()> {
    let deadlines = waiting(deadlines);
    let rtt_s = f.measured.as_ref().and_then(|m| m.rtt_p50_s).unwrap_or(0.0);
    let m = f.measured.get_or_insert_with(Default::default);
    say("TCP: one CUBIC stream a -> b");
    m.tcp_1_bps = Some(tcp_throughput(target, deadlines, 1, rtt_s)?);
    // the median of three: one run of four short streams can lose a second
    // to a timeout after synchronized drops (CI once measured 142 Mbit/s on
    // a clone where the real path and five runs after gave 178-191)
    let mut four = Vec::with_capacity(FOUR_STREAM_RUNS);
    for k in 1..=FOUR_STREAM_RUNS {
        say(&format!("TCP: four CUBIC streams a -> b ({k} of {FOUR_STREAM_RUNS})"));
        four.push(tcp_throughput(target, deadlines, 4, rtt_s)?);
    }
    m.tcp_4_bps = gridperf_core::analysis::stats::median(&four);
    say("TCP: one CUBIC stream a -> b again");
    m.tcp_1_again_bps = Some(tcp_throughput(target, deadlines, 1, rtt_s)?);
    Ok(())
}

fn udp_spec(dir: wire::Direction, size: u64, rate_bps: u64, secs: f64, linger_s: f64) -> StreamSpec {
    StreamSpec {
        proto: "udp".into(),
        write_size: size,
        udp_rate_bps: Some(rate_bps.max(1)),
        interval_ms: INTERVAL_MS,
        linger_ms: (linger_s * 1000.0) as u64,
        transit: true,
        ..StreamSpec::tcp(dir, (secs * 1000.0) as u64)
    }
}

/// The most a paced UDP sender sends at once (`datapath::stream::send_udp`).
const CATCH_UP_S: f64 = 0.005;
/// The slowest paced stream, IP bits per second.
const PACED_MIN_BPS: f64 = 200_000.0;

/// The smallest transit any overrunning stream saw (its first datagrams,
/// before the queue filled), on the clocks' own scale.
fn loaded_min(over: &[StreamResult]) -> Option<i64> {
    over.iter().filter_map(|s| s.receiver.udp.as_ref()).flat_map(absolute).min()
}

/// A probe's one stream.
fn first(streams: Vec<StreamResult>) -> Result<StreamResult> {
    streams.into_iter().next().ok_or_else(|| Error::network("the probe stream returned nothing"))
}

/// The rate from the overrunning streams: the receivers' summed whole
/// intervals between the first datagram and the last, but those any stream
/// left out for the emulator's lateness ([`stream::probe_by_interval`]), in IP bits per
/// second; the first stream's later transit samples (the queue full); and
/// a note on the load.
fn rate_of(streams: &[StreamResult], offered: f64, secs: f64) -> (Estimate, Vec<i64>, Option<String>) {
    let udp: Vec<&gridperf_core::analysis::flow::SeqStats> =
        streams.iter().filter_map(|s| s.receiver.udp.as_ref()).collect();
    if udp.is_empty() {
        return (Estimate::missing("", "the receivers kept no sequence numbers"), Vec::new(), None);
    }
    let sent: u64 = streams.iter().filter_map(|s| s.sender.datagrams).sum();
    let distinct: u64 = udp.iter().map(|u| u.distinct).sum();
    let lost = if sent > 0 { 1.0 - distinct as f64 / sent as f64 } else { 0.0 };
    let ip = (FULL + 28) as f64 / FULL as f64;
    let step = INTERVAL_MS as f64 * 1e6;
    let first = streams.iter().filter_map(|s| s.receiver.first_ns).min().unwrap_or(0) as f64;
    let last = streams.iter().filter_map(|s| s.receiver.last_ns).max().unwrap_or(0) as f64;
    let n = streams.iter().map(|s| s.receiver.intervals.len()).max().unwrap_or(0);
    let left_out = |k: usize| streams.iter().any(|s| s.left_out_intervals.contains(&(k as u32)));
    let whole: Vec<f64> = (0..n)
        .filter(|&k| k as f64 * step >= first && (k + 1) as f64 * step <= last && !left_out(k))
        .map(|k| {
            let bytes: u64 = streams.iter().filter_map(|s| s.receiver.intervals.get(k)).sum();
            bytes as f64 * 8.0 * ip / (step / 1e9)
        })
        .collect();
    let sent_bps = sent as f64 * ((FULL + 28) * 8) as f64 / secs;
    let note = (sent_bps < 0.95 * offered).then(|| {
        format!(
            "the overrunning streams could send only {} of the {} asked (this host's limit)",
            fmt_bps(sent_bps),
            fmt_bps(offered)
        )
    });
    let rate = clone::fit_rate(&whole, lost, sent_bps);
    // the later half of every stream's samples, each on the clocks' own
    // scale (its first datagram may have met a queue the others had filled)
    let loaded =
        udp.iter().flat_map(|u| absolute(u)[u.transit_ns.len() / 2..u.transit_ns.len() * 19 / 20].to_vec()).collect();
    (rate, loaded, note)
}

/// A receiver's transit samples with their first datagram's transit added
/// back: the receive clock minus the send clock, comparable across the
/// streams and runs between the same two hosts.
fn absolute(u: &gridperf_core::analysis::flow::SeqStats) -> Vec<i64> {
    let first = u.transit_first_ns.unwrap_or(0);
    u.transit_ns.iter().map(|t| t.saturating_add(first)).collect()
}

/// The paced stream's sequence accounting: expected, lost, loss runs,
/// reordered, and its transit samples.
fn seq_of(s: &StreamResult) -> (u64, u64, u64, u64, Vec<i64>) {
    let sent = s.sender.datagrams.unwrap_or(0);
    match s.receiver.udp.as_ref() {
        Some(u) => (sent, sent.saturating_sub(u.distinct), u.gaps, u.reordered, absolute(u)),
        None => (sent, sent, 0, 0, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(n: usize, lost: u64) -> RoundTrips {
        RoundTrips { samples: vec![10_000_000; n], sent: n as u64 + lost, lost, ..RoundTrips::default() }
    }

    /// A probe a loss burst cut short (its timeouts took the time) is taken
    /// again until enough round trips came back, and no more than that.
    #[test]
    fn round_trips_cut_short_by_lost_messages_are_taken_again_up_to_a_bound() {
        let mut given = vec![probe(3, 3), probe(20, 1), probe(40, 0), probe(40, 0)].into_iter();
        let g = round_trips(|| Ok(given.next().expect("no more probes than needed"))).expect("the probes");
        assert_eq!((g.probes, g.samples.len(), g.sent, g.lost), (3, 63, 67, 4));
        let g = round_trips(|| Ok(probe(40, 0))).expect("the probes");
        assert_eq!((g.probes, g.samples.len()), (1, 40));
        // a path that keeps losing: bounded
        let g = round_trips(|| Ok(probe(2, 3))).expect("the probes");
        assert_eq!((g.probes, g.samples.len(), g.lost), (RTT_PROBES, 8, 12));
    }
}
