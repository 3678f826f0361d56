//! The agent's side of a stream test (`gridperf stream`): open the data
//! sockets, say Ready, take the client's connections (or UDP hellos), wait
//! for StreamGo, run the stream threads, send the receivers' intervals as
//! they pass, then the TCP_INFO timelines and the figures, and answer
//! Finish with the agent's record.

use super::converse::{converse, Acts, Clock, Tasks};
use super::data::{self, accept_all, control_state, out_of_turn, Control};
use super::reply::{new_token, send_error, Fail};
use super::Shared;
use crate::datapath::stream::{launch, Slot, Sock};
use crate::host;
use gridperf_core::proto::measure::{self, Event, Task};
use gridperf_core::proto::{End, Input};
use gridperf_core::wire::{
    self, AgentMsg, DataHello, DataKind, Direction, ErrorCode, StreamSpec, HELLO_LEN, MAX_STREAMS,
};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Runs a stream test for a client whose request was checked.
pub(super) fn run(shared: &Shared, ctl: &mut TcpStream, peer: SocketAddr, spec: &StreamSpec) -> Result<(), Fail> {
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
    let (listener, udp) = if spec.proto == "udp" {
        (None, udp_sockets(local_ip, spec).map_err(|e| format!("UDP sockets: {e}"))?)
    } else {
        // the agent sends on a download and receives on an upload: its
        // listener gets that role's buffers, before it accepts
        let sending = match spec.direction {
            Direction::Up => Some(false),
            Direction::Down => Some(true),
            Direction::Both => None,
        };
        let (snd, rcv) = spec.buffers(sending);
        let l =
            data::listener(local_ip, snd, rcv, MAX_STREAMS as i32 * 2).map_err(|e| format!("data listener: {e}"))?;
        (Some(l), Vec::new())
    };
    let token = new_token(peer);
    let agent = host::end_info(None, false);
    let udp_ports = udp.iter().filter_map(|s| s.local_addr().ok()).map(|a| a.port()).collect();
    data::ready(ctl, listener.as_ref(), udp_ports, token, agent.clone())?;

    let layout = spec.layout();
    let until = Instant::now() + shared.cfg.control_timeout;
    let mut slots: Vec<Slot> = Vec::new();
    if let Some(l) = &listener {
        let mut fits = |h: &DataHello, got: &[(DataHello, TcpStream)]| {
            h.kind == DataKind::Stream
                && layout.iter().any(|(i, _)| *i == h.index)
                && !got.iter().any(|(g, _)| g.index == h.index)
        };
        for (h, s) in accept_all(l, ctl, &[peer_ip], token, layout.len(), until, &shared.stop, false, &mut fits)? {
            if let Some(cc) = &spec.congestion {
                if let Err(e) = gridperf_sys::set_tcp_congestion(&s, cc) {
                    return Err(send_error(ctl, ErrorCode::Unsupported, format!("TCP_CONGESTION {cc}: {e}")));
                }
            }
            let _ = s.set_read_timeout(None);
            // the client's upward streams arrive here: the agent receives them
            let up = layout.iter().find(|(i, _)| *i == h.index).is_some_and(|x| x.1);
            slots.push(Slot { index: h.index, sending: !up, sock: Sock::Tcp(s) });
        }
    }
    drop(listener);
    for (k, u) in udp.into_iter().enumerate() {
        let index = k as u32;
        let from = udp_hello(shared, ctl, &u, peer_ip, token, index, until)?;
        u.connect(from).map_err(|e| format!("UDP connect: {e}"))?;
        let up = layout.iter().find(|(i, _)| *i == index).map(|x| x.1).unwrap_or(true);
        slots.push(Slot { index, sending: !up, sock: Sock::Udp(u) });
    }
    slots.sort_by_key(|s| s.index);
    // what is said when is the machine's; the streams are this file's
    let clock = Clock::start();
    let within = gridperf_core::proto::nanos(shared.cfg.control_timeout);
    let (mut m, first) = measure::Stream::new(within, agent, clock.now());
    let mut work = Work { shared, spec, slots: Some(slots), ipv6: local_ip.is_ipv6() };
    converse(ctl, &mut m, first, &clock, shared.cfg.control_timeout, &mut work)
}

/// A stream test's connections, until the streams run.
struct Work<'a> {
    shared: &'a Shared,
    spec: &'a StreamSpec,
    slots: Option<Vec<Slot>>,
    ipv6: bool,
}

impl Tasks<measure::Stream> for Work<'_> {
    fn run(
        &mut self,
        t: Task,
        m: &mut measure::Stream,
        ctl: &mut TcpStream,
        clock: &Clock,
    ) -> Result<Acts<Task>, Fail> {
        let (Task::Stream, Some(slots)) = (t, self.slots.take()) else {
            return Err(Fail::Untold("internal: a stream test asked for another task, or twice".into()));
        };
        let sockets = stream_both(self.shared, ctl, self.spec, slots, self.ipv6)?;
        Ok(m.handle(Input::Event(Event::Streamed(sockets)), clock.now()))
    }

    fn stopping(&self) -> bool {
        self.shared.stopping()
    }
}

/// Waits for a UDP stream's hello (its token and index, from the client's
/// address), watching the control connection; returns where it came from.
fn udp_hello(
    shared: &Shared,
    ctl: &mut TcpStream,
    u: &UdpSocket,
    peer: IpAddr,
    token: u64,
    index: u32,
    until: Instant,
) -> Result<SocketAddr, Fail> {
    let _ = u.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = [0u8; 64];
    loop {
        if shared.stopping() {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        if Instant::now() >= until {
            return Err(Fail::Untold(format!(
                "no UDP hello from the client for stream {index} within the control deadline"
            )));
        }
        match control_state(ctl) {
            Some(Control::Gone) => return Err(Fail::Told("the client left before its UDP streams began".into())),
            Some(Control::Speaks) => {
                return Err(out_of_turn(ctl, shared.cfg.control_timeout, "before the UDP streams began"))
            }
            None => {}
        }
        if let Ok((n, from)) = u.recv_from(&mut buf) {
            let hello = (n == HELLO_LEN).then(|| DataHello::decode(&buf[..n]).ok()).flatten();
            let wanted = DataHello::new(token, DataKind::UdpStream, index);
            if from.ip().to_canonical() == peer && hello == Some(wanted) {
                return Ok(from);
            }
        }
    }
}

/// Runs both ends' part once StreamGo came: the stream threads, the
/// receivers' intervals as they pass, then the timelines and figures.
/// Returns the sockets' records for the agent's report.
fn stream_both(
    shared: &Shared,
    ctl: &mut TcpStream,
    spec: &StreamSpec,
    slots: Vec<Slot>,
    ipv6: bool,
) -> Result<Vec<gridperf_core::model::SocketInfo>, Fail> {
    if shared.cfg.faults.flood_stream_samples {
        // the test seam: samples until the client gives up (or a minute)
        let chunk = vec![gridperf_core::analysis::flow::TcpSample::default(); 2_000];
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if wire::write_msg(ctl, &AgentMsg::StreamSamples { index: 0, samples: chunk.clone() }).is_err() {
                break;
            }
        }
        return Err(Fail::Untold("flooded the client with samples (test fault)".into()));
    }
    let omit = Duration::from_millis(spec.omit_ms);
    let mut running =
        launch(slots, spec, omit, ipv6, shared.cfg.faults.break_stream_after, spec.cpu).map_err(|e| e.to_string())?;
    let hard = Duration::from_millis(spec.omit_ms + spec.duration_ms + spec.linger_ms) + shared.cfg.control_timeout;
    let until = Instant::now() + hard;
    while !running.done() {
        if shared.stop.load(Ordering::Relaxed) {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        if Instant::now() > until {
            return Err(Fail::Untold("the stream threads overran the test's deadline".into()));
        }
        for (t_ms, bytes) in running.cut() {
            let shown: Vec<u64> =
                bytes.iter().zip(&running.live).map(|(b, (_, s, _))| if *s { 0 } else { *b }).collect();
            wire::write_msg(ctl, &AgentMsg::StreamInterval { t_ms, bytes: shown }).map_err(|e| e.to_string())?;
        }
        // a client that gives up says so, or hangs up
        match control_state(ctl) {
            Some(Control::Gone) => return Err(Fail::Told("the client went away during the stream test".into())),
            Some(Control::Speaks) => {
                return Err(out_of_turn(ctl, shared.cfg.control_timeout, "during the stream test"))
            }
            None => {}
        }
        std::thread::sleep(running.until_next_cut().clamp(Duration::from_millis(1), Duration::from_millis(20)));
    }
    let (ends, samples) = running.finish();
    let moved = |sending: bool| ends.iter().filter(|e| e.sending == sending).map(|e| e.bytes).sum();
    shared.metrics.moved(moved(true), moved(false));
    for (index, v) in samples {
        // frames are at most 1 MiB: a sample is about 400 bytes of JSON
        for chunk in v.chunks(2_000) {
            wire::write_msg(ctl, &AgentMsg::StreamSamples { index, samples: chunk.to_vec() })
                .map_err(|e| e.to_string())?;
        }
    }
    let sockets = ends.iter().map(|e| e.socket.clone()).collect();
    for m in wire::stream_done_messages(ends) {
        wire::write_msg(ctl, &m).map_err(|e| e.to_string())?;
    }
    Ok(sockets)
}

/// The agent's UDP sockets for a stream test: one per stream, bound to its address.
fn udp_sockets(local: IpAddr, spec: &StreamSpec) -> std::io::Result<Vec<UdpSocket>> {
    (0..spec.layout().len())
        .map(|_| {
            let s = UdpSocket::bind((local, 0))?;
            match spec.window {
                Some(w) => {
                    gridperf_sys::set_sndbuf(&s, w as usize)?;
                    gridperf_sys::set_rcvbuf(&s, w as usize)?;
                }
                None => {
                    // a receiver at a gigabit needs more than the default 208 KiB
                    let _ = gridperf_sys::set_rcvbuf(&s, 4 << 20);
                }
            }
            Ok(s)
        })
        .collect()
}
