//! The client's side of `gridperf stream`: bulk throughput with parallel
//! streams, socket buffers, congestion control, pacing and zero-copy, and
//! why a stream is slow.
//!
//! The client asks for the test, connects a data socket per stream, and
//! when the agent is ready says StreamGo; both ends then run the stream
//! threads of `datapath::stream`. The agent sends its receivers' intervals
//! as they pass, then its TCP_INFO timelines and its figures; the client
//! puts both ends together per stream, with each stream's verdict.

use crate::datapath::stream::{launch, prepare_tcp, Slot, Sock};
use crate::datapath::write_hello;
use crate::error::{Error, Result};
use crate::host;
use crate::runner::{Deadlines, Target};
use gridperf_core::analysis::flow::{self, TcpSample, VerdictContext};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::{Environment, LabRecord, StreamEnd, StreamReport, StreamResult, StreamRun};
use gridperf_core::wire::{AgentMsg, DataHello, DataKind, StreamSpec, Test};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Checks a stream spec against what this host offers (the agent checks
/// the same on its side).
pub fn validate(spec: &StreamSpec) -> std::result::Result<Proto, String> {
    spec.validate(&host::limits())
}

/// The client's settings for `gridperf stream`.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub spec: StreamSpec,
    pub omit: Duration,
    pub repeat: u32,
    pub deadlines: Deadlines,
    /// The path's rate for the verdict, if known (--expect, or the lab's).
    pub path_rate_bps: Option<u64>,
    pub notes: Vec<String>,
    /// The CPU the client's stream threads run on, if pinned.
    pub client_cpu: Option<usize>,
    /// Across a lab, judge the run interval by interval, looking this far
    /// back from each (what arrived in an interval left the bottleneck up
    /// to a one-way delay before): see [`judge_intervals`]. For a figure
    /// taken from the kept intervals alone (lab clone's rate); None judges
    /// the run as a whole.
    pub by_interval: Option<Duration>,
}

/// What the client sees while a run goes: (run, ms since start, receiver
/// bytes per stream in the interval, stream indices).
pub type OnInterval<'a> = dyn FnMut(u32, u64, &[(u32, u64)]) + 'a;

/// One run of `spec` as a probe takes it (tune's, lab clone's): checked,
/// once, its `omit_ms` left out (the agent counts the omitted bytes by the
/// spec, the client by the options: one figure for both), no notes; a run
/// across a lab whose emulator fell behind is an error (exit 4).
pub fn probe(target: &Target, deadlines: Deadlines, spec: StreamSpec) -> Result<StreamRun> {
    probe_judged(target, deadlines, spec, None)
}

/// As [`probe`], judged interval by interval across a lab (`lead`: the
/// path's one-way delay or more): each stream's `left_out_intervals` are
/// those to leave out of a figure taken per interval.
pub fn probe_by_interval(target: &Target, deadlines: Deadlines, spec: StreamSpec, lead: Duration) -> Result<StreamRun> {
    probe_judged(target, deadlines, spec, Some(lead))
}

fn probe_judged(
    target: &Target,
    deadlines: Deadlines,
    spec: StreamSpec,
    by_interval: Option<Duration>,
) -> Result<StreamRun> {
    validate(&spec).map_err(crate::error::Error::usage)?;
    let omit = Duration::from_millis(spec.omit_ms);
    let opts = StreamOptions {
        spec,
        omit,
        repeat: 1,
        deadlines,
        path_rate_bps: None,
        notes: Vec::new(),
        client_cpu: None,
        by_interval,
    };
    let r = run(target, &opts, &mut |_, _, _| {})?;
    let run =
        r.runs.into_iter().next().ok_or_else(|| crate::error::Error::network("the probe stream returned nothing"))?;
    crate::runner::lab_valid(&run.env)?;
    Ok(run)
}

/// Runs the test `repeat` times.
pub fn run(target: &Target, opts: &StreamOptions, on_interval: &mut OnInterval) -> Result<StreamReport> {
    let mut runs = Vec::new();
    // the machine's TCP memory past its pressure mark, before or after a
    // run (orphans of an interrupted run, or this run's own buffers)
    let mut pressure = None;
    for r in 0..opts.repeat {
        pressure = pressure.or_else(crate::host::tcp_memory_pressure);
        runs.push(run_once(target, opts, r, on_interval)?);
        pressure = pressure.or_else(crate::host::tcp_memory_pressure);
    }
    let totals: Vec<f64> = runs.iter().map(|r| r.up_bps.unwrap_or(0.0) + r.down_bps.unwrap_or(0.0)).collect();
    let median = gridperf_core::analysis::stats::median(&totals);
    let best = totals.iter().copied().reduce(f64::max);
    let worst = totals.iter().copied().reduce(f64::min);
    let spread = match (worst, best, median) {
        (Some(lo), Some(hi), Some(m)) if m > 0.0 && totals.len() > 1 => Some((hi - lo) / m),
        _ => None,
    };
    let mut warnings = Vec::new();
    for r in &runs {
        if let Some(w) = r.env.lab.as_ref().and_then(LabRecord::invalid_warning) {
            warnings.push(w);
        }
    }
    warnings.extend(pressure);
    let notes = buffer_notes(&opts.spec, runs.first());
    Ok(StreamReport {
        schema: gridperf_core::model::STREAM_SCHEMA.into(),
        spec: opts.spec.clone(),
        omit_ns: opts.omit.as_nanos() as u64,
        runs,
        totals_bps: totals,
        median_bps: median,
        best_bps: best,
        spread,
        warnings,
        notes: [opts.notes.clone(), notes].concat(),
        capture: None,
    })
}

/// What the kernel made of -w: Linux doubles a requested buffer (half of it
/// for its own bookkeeping) and caps it at net.core.wmem_max / rmem_max.
fn buffer_notes(spec: &StreamSpec, run: Option<&StreamRun>) -> Vec<String> {
    let (Some(w), Some(run)) = (spec.window, run) else { return Vec::new() };
    let mut out = Vec::new();
    let ends = [("client", &run.env.client), ("agent", run.env.server.as_ref().unwrap_or(&run.env.client))];
    for s in run.streams.iter().take(1) {
        for (who, end, info) in [("sender", &s.sender, 0), ("receiver", &s.receiver, 1)] {
            let _ = info;
            let (granted, cap_name) = if who == "sender" {
                (end.socket.sndbuf_granted, "net.core.wmem_max")
            } else {
                (end.socket.rcvbuf_granted, "net.core.rmem_max")
            };
            let Some(g) = granted else { continue };
            if g < 2 * w {
                let at = if (s.direction == "up") == (who == "sender") { ends[0] } else { ends[1] };
                let cap = at.1.sysctls.get(cap_name).cloned().unwrap_or_else(|| "?".into());
                out.push(format!(
                    "-w {w}: the {who} ({}) was granted {g} bytes, not the {} Linux gives for it: capped by {cap_name} = {cap} (the kernel doubles the request up to twice that cap); raise {cap_name} to allow more",
                    at.0,
                    2 * w
                ));
            }
        }
    }
    out
}

/// Each interval's received rate, bits per second: a whole interval over
/// its length, the last one (cut short when the stream ended within it)
/// over the time it lasted.
fn interval_rates(receiver: &StreamEnd, interval_s: f64) -> Vec<f64> {
    let n = receiver.intervals.len();
    receiver
        .intervals
        .iter()
        .enumerate()
        .map(|(k, &b)| {
            let secs = match receiver.last_interval_ns {
                Some(ns) if k + 1 == n => ns as f64 / 1e9,
                _ => interval_s,
            };
            b as f64 * 8.0 / secs
        })
        .collect()
}

fn connect_tcp(addr: SocketAddr, spec: &StreamSpec, sending: bool, within: Duration) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    prepare_tcp(&sock, spec, Some(sending))?;
    sock.connect_timeout(&addr.into(), within)?;
    let s: TcpStream = sock.into();
    s.set_nodelay(false)?;
    Ok(s)
}

// Long by design: one run's conversation in its order (the request, the
// data connections, go, the intervals, the end and the verdict), each step
// commented, over one session.
fn run_once(target: &Target, opts: &StreamOptions, run_no: u32, on_interval: &mut OnInterval) -> Result<StreamRun> {
    let spec = &opts.spec;
    let proto = spec.validate(&host::limits()).map_err(Error::usage)?;
    let mut opened = target.open(opts.deadlines)?;
    let addr = opened.addr;
    let ready = opened.session.request(Test::Stream(spec.clone()))?;
    let (tcp_port, udp_ports, token) = (ready.tcp_port, ready.udp_ports.clone(), ready.token);
    let session = &mut opened.session;
    let local_ip: IpAddr = session.local_ip()?;
    let layout = spec.layout();
    let mut slots = Vec::new();
    for &(index, up) in &layout {
        let sock = match proto {
            Proto::Udp => {
                let port = *udp_ports
                    .get(index as usize)
                    .ok_or_else(|| Error::network(format!("the agent opened no UDP port for stream {index}")))?;
                let s = UdpSocket::bind((local_ip, 0)).map_err(|e| Error::network(format!("UDP socket: {e}")))?;
                if let Some(w) = spec.window {
                    let _ = gridperf_sys::set_sndbuf(&s, w as usize);
                    let _ = gridperf_sys::set_rcvbuf(&s, w as usize);
                } else {
                    // a receiver at a gigabit needs more than the default 208 KiB
                    let _ = gridperf_sys::set_rcvbuf(&s, 4 << 20);
                }
                s.connect(SocketAddr::new(addr.ip(), port)).map_err(|e| Error::network(format!("UDP connect: {e}")))?;
                // the agent learns this socket's address from its hello
                let hello = DataHello::new(token, DataKind::UdpStream, index).encode();
                for _ in 0..3 {
                    let _ = s.send(&hello);
                }
                Sock::Udp(s)
            }
            _ => {
                let port = tcp_port.ok_or_else(|| Error::network("the agent opened no TCP data port"))?;
                let a = SocketAddr::new(addr.ip(), port);
                let mut s = connect_tcp(a, spec, up, opts.deadlines.connect)
                    .map_err(|e| Error::network(format!("data connection {index} to {a}: {e}")))?;
                write_hello(&mut s, &DataHello::new(token, DataKind::Stream, index))
                    .map_err(|e| Error::network(format!("data connection {index}: {e}")))?;
                Sock::Tcp(s)
            }
        };
        slots.push(Slot { index, sending: up, sock });
    }
    // the agent says when its side is ready (every UDP hello arrived, every
    // connection accepted): only then does the clock start at both ends
    match session.next(opts.deadlines.control)? {
        AgentMsg::StepReady => {}
        other => return Err(Error::network(format!("expected the agent's step-ready, got {other:?}"))),
    }
    session.go()?;
    let running = launch(slots, spec, opts.omit, addr.is_ipv6(), None, opts.client_cpu)
        .map_err(|e| Error::internal(format!("starting the streams: {e}")))?;
    let mut running = running;
    let mut agent_rows: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut agent_samples: Vec<(u32, Vec<TcpSample>)> = Vec::new();
    let hard = Duration::from_millis(spec.duration_ms + spec.linger_ms + spec.paced_drain_ms())
        + opts.omit
        + opts.deadlines.control * 2;
    let deadline = Instant::now() + hard;
    let mut agent_ends: Option<Vec<StreamEnd>> = None;
    let mut agent_intervals: Vec<(u32, Vec<u64>)> = Vec::new();
    // what an agent can rightly send, and no more: a broken or hostile one
    // does not grow this process without bound
    let max_rows = (hard.as_millis() as u64 / spec.interval_ms.max(1)) as usize + 16;
    let hostile = |what: String| Error::network(format!("{what}: a broken or hostile agent; the run was abandoned"));
    let ours = |index: u32| layout.iter().any(|(i, _)| *i == index);
    let receiving_here: Vec<u32> = layout.iter().filter(|(_, up)| !up).map(|(i, _)| *i).collect();
    // until both ends are done: the client's own intervals are cut here, the
    // agent's arrive over the control channel
    while agent_ends.is_none() || !running.done() {
        for (t_ms, row) in running.cut() {
            let shown: Vec<(u32, u64)> = running
                .live
                .iter()
                .zip(&row)
                .filter(|((i, _, _), _)| receiving_here.contains(i))
                .map(|((i, _, _), b)| (*i, *b))
                .collect();
            if !shown.is_empty() {
                on_interval(run_no, t_ms, &shown);
            }
        }
        if Instant::now() > deadline {
            session.abort("the test overran its deadline");
            return Err(Error::network(format!(
                "the stream test did not end within {:.0} s (its time, the linger and two control deadlines)",
                hard.as_secs_f64()
            )));
        }
        if agent_ends.is_some() {
            std::thread::sleep(running.until_next_cut().min(Duration::from_millis(20)));
            continue;
        }
        let wait = running.until_next_cut().clamp(Duration::from_millis(1), Duration::from_millis(100));
        if !session.agent_gone_within(wait) {
            continue;
        }
        match session.next(opts.deadlines.control)? {
            AgentMsg::StreamInterval { t_ms, bytes } => {
                if bytes.len() != layout.len() || agent_rows.len() >= max_rows {
                    session.abort("too many intervals, or of the wrong shape");
                    return Err(hostile(format!(
                        "the agent sent interval {} of {} streams; the test has at most {max_rows} of {}",
                        agent_rows.len() + 1,
                        bytes.len(),
                        layout.len()
                    )));
                }
                let shown: Vec<(u32, u64)> =
                    layout.iter().zip(&bytes).filter(|((_, up), _)| *up).map(|((i, _), b)| (*i, *b)).collect();
                if !shown.is_empty() {
                    on_interval(run_no, t_ms, &shown);
                }
                agent_rows.push((t_ms, bytes));
            }
            AgentMsg::StreamSamples { index, samples } => {
                let most = gridperf_core::wire::MAX_SAMPLES;
                if let Err(why) = gather(&mut agent_samples, index, samples, most, &ours, "TCP_INFO samples") {
                    session.abort(&why);
                    return Err(hostile(why));
                }
            }
            AgentMsg::StreamIntervals { index, intervals } => {
                if let Err(why) = gather(&mut agent_intervals, index, intervals, max_rows, &ours, "intervals") {
                    session.abort(&why);
                    return Err(hostile(why));
                }
            }
            AgentMsg::StreamDone { mut ends } => {
                if ends.len() > layout.len() {
                    session.abort("more ends than streams");
                    return Err(hostile(format!("the agent sent {} ends for {} streams", ends.len(), layout.len())));
                }
                for e in &mut ends {
                    if let Some(k) = agent_intervals.iter().position(|(i, _)| *i == e.index) {
                        e.intervals = agent_intervals.swap_remove(k).1;
                    }
                }
                agent_ends = Some(ends)
            }
            other => return Err(Error::network(format!("unexpected message from the agent mid-stream: {other:?}"))),
        }
    }
    let (client_ends, client_samples) = running.finish();
    let agent_ends = agent_ends.unwrap_or_default();
    let agent_final = session.finish()?;
    let left_out = match (opts.by_interval, opened.lab_watch()) {
        (Some(lead), Some(watch)) => {
            let receivers: Vec<&StreamEnd> = layout
                .iter()
                .filter_map(|&(i, up)| if up { &agent_ends } else { &client_ends }.iter().find(|e| e.index == i))
                .collect();
            judge_intervals(watch, &receivers, Duration::from_millis(spec.interval_ms), lead)
        }
        _ => Vec::new(),
    };
    let env = opened.environment(host::end_info(None, false), Some(agent_final), opts.notes.clone());
    let mut run = assemble(spec, opts, &layout, client_ends, client_samples, agent_ends, agent_samples, env);
    for s in &mut run.streams {
        if let Some((_, l)) = left_out.iter().find(|(i, _)| *i == s.index) {
            s.left_out_intervals = l.clone();
        }
    }
    Ok(run)
}

/// Judges a run across a lab interval by interval, once it is INVALID as a
/// whole (a valid one keeps every interval): each receiver's report
/// intervals that lay within the emulator's late windows (each looked at
/// `lead` earlier too) for more than 1 in HELD_UP_PER of their time are
/// left out, by stream index, and the run's verdict leaves the lateness out
/// (what else voids a run still does, and so does leaving out more than 1
/// in LEFT_OUT_PER of the intervals). An interval's rate is the link's
/// while the emulator kept up: a hold-up that left the link idle takes
/// from the rate of the intervals it lay in, and from no other. Nothing is
/// left out, and the run is judged as a whole, when the windows cannot be
/// known (the emulator unread) or a receiver did not say when its clock
/// started (an older agent).
fn judge_intervals(
    watch: &mut crate::lab::LabWatch,
    receivers: &[&StreamEnd],
    interval: Duration,
    lead: Duration,
) -> Vec<(u32, Vec<u32>)> {
    use crate::lab::emulator::{late_within, over_share, HELD_UP_PER};
    if receivers.is_empty() || receivers.iter().any(|e| e.start_mono_ns.is_none()) {
        return Vec::new();
    }
    let Some(windows) = watch.late_windows(gridperf_sys::monotonic_ns()) else {
        return Vec::new();
    };
    // a run valid as a whole keeps every interval: an interval's late
    // windows include packets delivered late while the queue kept the link
    // busy, which take nothing from a rate (the rootless lab under a CPU
    // hog: 1-2% of an overrun's packets over 1 ms late, in 6 to 13 of its
    // 20 intervals, where the whole rule's 1 in 100 of the packets left
    // most runs valid)
    if watch.invalid_as_a_whole() != Some(true) {
        return Vec::new();
    }
    let (step, lead) = (interval.as_nanos() as u64, lead.as_nanos() as u64);
    let mut judged =
        crate::lab::RoundTrips { what: "report intervals", late_share_over: Some(HELD_UP_PER), ..Default::default() };
    let mut out = Vec::new();
    for e in receivers {
        let start = e.start_mono_ns.unwrap_or(0);
        let spans: Vec<[u64; 2]> = (0..e.intervals.len() as u64)
            // (saturating: the figure came from the agent)
            .map(|k| {
                let from = start.saturating_add(k.saturating_mul(step));
                [from.saturating_sub(lead), from.saturating_add(step)]
            })
            .collect();
        let left: Vec<u32> = late_within(&spans, &windows)
            .into_iter()
            .enumerate()
            .filter(|&(_, late)| over_share(late, step))
            .map(|(k, _)| k as u32)
            .collect();
        judged.count_point(&format!("stream {}", e.index), spans.len() as u64, left.len() as u64);
        out.push((e.index, left));
    }
    judged.judge_run();
    watch.judged_by_round_trip(judged);
    out
}

/// Adds what the agent sent of stream `index` to what came before it: of
/// this test's streams only, and at most `most` in all per stream.
fn gather<T>(
    got: &mut Vec<(u32, Vec<T>)>,
    index: u32,
    more: Vec<T>,
    most: usize,
    ours: &dyn Fn(u32) -> bool,
    what: &str,
) -> std::result::Result<(), String> {
    let k = match got.iter().position(|(i, _)| *i == index) {
        Some(k) => k,
        None if ours(index) => {
            got.push((index, Vec::new()));
            got.len() - 1
        }
        None => return Err(format!("the agent sent {what} of stream {index}, not in this test")),
    };
    let v = &mut got[k].1;
    if v.len() + more.len() > most {
        return Err(format!("the agent sent more than {most} {what} of stream {index}, more than the test can have"));
    }
    v.extend(more);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    spec: &StreamSpec,
    opts: &StreamOptions,
    layout: &[(u32, bool)],
    client_ends: Vec<StreamEnd>,
    client_samples: Vec<(u32, Vec<TcpSample>)>,
    agent_ends: Vec<StreamEnd>,
    agent_samples: Vec<(u32, Vec<TcpSample>)>,
    env: Environment,
) -> StreamRun {
    let omit_ns = opts.omit.as_nanos() as u64;
    let interval_s = spec.interval_ms as f64 / 1000.0;
    let tcp_max = |end: &gridperf_core::model::EndInfo, key: &str| -> Option<u64> {
        end.sysctls.get(key).and_then(|v| v.split_whitespace().nth(2)).and_then(|v| v.parse().ok())
    };
    let agent_env = env.server.clone().unwrap_or_default();
    let mut streams = Vec::new();
    for &(index, up) in layout {
        let find = |v: &[StreamEnd]| v.iter().find(|e| e.index == index).cloned().unwrap_or_default();
        let (c, a) = (find(&client_ends), find(&agent_ends));
        let (sender, receiver) = if up { (c, a) } else { (a, c) };
        let timeline = if up { &client_samples } else { &agent_samples }
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let counted = receiver.bytes.saturating_sub(receiver.omitted_bytes);
        let from = receiver.first_ns.unwrap_or(0).max(if omit_ns > 0 { omit_ns } else { 0 });
        let throughput_bps = match receiver.last_ns {
            Some(last) if last > from && counted > 0 => counted as f64 * 8.0 / ((last - from) as f64 / 1e9),
            _ => 0.0,
        };
        let (send_env, recv_env) = if up { (&env.client, &agent_env) } else { (&agent_env, &env.client) };
        let verdict = (spec.proto == "tcp" && timeline.len() >= 2).then(|| {
            flow::verdict(
                &timeline,
                &VerdictContext {
                    throughput_bps,
                    elapsed_ns: sender.last_ns.unwrap_or(0).saturating_sub(sender.first_ns.unwrap_or(0)),
                    path_rate_bps: opts.path_rate_bps,
                    rmem_max: tcp_max(recv_env, "net.ipv4.tcp_rmem"),
                    wmem_max: tcp_max(send_env, "net.ipv4.tcp_wmem"),
                    window_requested: spec.window,
                    core_rmem_max: recv_env.sysctls.get("net.core.rmem_max").and_then(|v| v.parse().ok()),
                    core_wmem_max: send_env.sysctls.get("net.core.wmem_max").and_then(|v| v.parse().ok()),
                    pacing_bps: spec.pacing_bps,
                    streams: layout.iter().filter(|&&(_, u)| u == up).count() as u32,
                },
            )
        });
        let retransmits = sender.tcp_last.map(|t| t.total_retrans);
        let broken = sender
            .broken
            .as_ref()
            .map(|b| format!("sender: {b}"))
            .or_else(|| receiver.broken.as_ref().map(|b| format!("receiver: {b}")));
        streams.push(StreamResult {
            index,
            direction: if up { "up" } else { "down" }.into(),
            interval_bps: interval_rates(&receiver, interval_s),
            sender,
            receiver,
            throughput_bps,
            retransmits,
            verdict,
            timeline,
            broken,
            left_out_intervals: Vec::new(),
        });
    }
    let sum = |up: bool| -> Option<f64> {
        let v: Vec<f64> = streams.iter().filter(|s| (s.direction == "up") == up).map(|s| s.throughput_bps).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let rates: Vec<f64> = streams.iter().map(|s| s.throughput_bps).collect();
    let client_cpu_ns: u64 = client_ends.iter().map(|e| e.cpu_ns).sum();
    let agent_cpu_ns: u64 = agent_ends.iter().map(|e| e.cpu_ns).sum();
    let received: u64 = streams.iter().map(|s| s.receiver.bytes).sum();
    StreamRun {
        up_bps: sum(true),
        down_bps: sum(false),
        slowest_over_fastest: flow::slowest_over_fastest(&rates),
        jain: flow::jain(&rates),
        client_cpu_ns,
        agent_cpu_ns,
        cpu_ns_per_byte: (received > 0).then(|| (client_cpu_ns + agent_cpu_ns) as f64 / received as f64),
        streams,
        env,
    }
}
