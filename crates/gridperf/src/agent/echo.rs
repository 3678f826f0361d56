//! The agent's side of an echo test (`rtt`, `transfer`): the data sockets
//! of each protocol, then steps: per step, echo messages of one size until
//! the count is done or the client ends it.

use super::converse::{converse, Acts, Clock, Tasks};
use super::data::{self, accept_all};
use super::reply::{new_token, send_error, Fail};
use super::Shared;
use crate::datapath::{is_wait, sendfile_full, write_full, DataSock, RawFdRef, AGENT_POLL_SLICE};
use crate::{ctl, host};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::StepFigures;
use gridperf_core::proto::measure::{self, Event, Task};
use gridperf_core::proto::{End, Input};
use gridperf_core::wire::{ClientMsg, DataKind, EchoSpec, ErrorCode};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Runs an echo test for a client whose request was checked.
pub(super) fn run(shared: &Shared, ctl: &mut TcpStream, peer: SocketAddr, req: &EchoSpec) -> Result<(), Fail> {
    let mut pinned = None;
    if let Some(cpu) = req.cpu {
        if let Err(e) = gridperf_sys::set_thread_affinity(&[cpu]) {
            let msg = format!("cannot pin the agent to CPU {cpu}: {e} (the agent's host has CPUs {:?})", host::cpus());
            return Err(send_error(ctl, ErrorCode::Unsupported, msg));
        }
        pinned = Some(vec![cpu]);
    }
    // an IPv4 client on a dual-stack listener shows as ::ffff:a.b.c.d: use
    // the plain IPv4 form, which works whatever net.ipv6.bindv6only says
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
    let ipv6 = local_ip.is_ipv6();
    let streams: Vec<Proto> = req.protos.iter().copied().filter(|p| p.is_stream()).collect();
    let listener = if streams.is_empty() {
        None
    } else {
        Some(data::listener(local_ip, None, None, 16).map_err(|e| format!("data listener: {e}"))?)
    };
    let udp = match req.udp_port {
        Some(port) if req.protos.contains(&Proto::Udp) => {
            let s = UdpSocket::bind((local_ip, 0)).map_err(|e| format!("UDP socket: {e}"))?;
            if let Err(m) = apply_buffers(&s, req) {
                return Err(send_error(ctl, ErrorCode::Unsupported, m));
            }
            s.connect((peer_ip, port)).map_err(|e| format!("UDP connect: {e}"))?;
            Some(s)
        }
        _ => None,
    };
    let token = new_token(peer);
    let agent = host::end_info(pinned, req.busy_poll);
    let udp_ports = udp.iter().filter_map(|s| s.local_addr().ok()).map(|a| a.port()).collect();
    data::ready(ctl, listener.as_ref(), udp_ports, token, agent.clone())?;

    // the client's TCP data connections: one per stream protocol, each once
    let mut socks: Vec<DataSock> = Vec::new();
    if let Some(l) = &listener {
        let until = Instant::now() + shared.cfg.control_timeout;
        let mut fits = |h: &gridperf_core::wire::DataHello, got: &[(gridperf_core::wire::DataHello, TcpStream)]| {
            let proto = match h.kind {
                DataKind::Tcp => Proto::Tcp,
                DataKind::Sendfile => Proto::Sendfile,
                _ => return false,
            };
            streams.contains(&proto) && !got.iter().any(|(g, _)| g.kind == h.kind)
        };
        let mut conns = accept_all(l, ctl, &[peer_ip], token, streams.len(), until, &shared.stop, true, &mut fits)?;
        // in the order the request named them
        for p in &streams {
            let want = if *p == Proto::Sendfile { DataKind::Sendfile } else { DataKind::Tcp };
            let Some(at) = conns.iter().position(|(h, _)| h.kind == want) else { continue };
            let (_, s) = conns.swap_remove(at);
            s.set_nodelay(req.nodelay).map_err(|e| e.to_string())?;
            if let Err(m) = apply_buffers(&s, req) {
                return Err(send_error(ctl, ErrorCode::Unsupported, m));
            }
            socks.push(if *p == Proto::Sendfile {
                let file = gridperf_sys::memfd_pattern(req.max_size as usize).map_err(|e| format!("memfd: {e}"))?;
                DataSock::Sendfile(s, file)
            } else {
                DataSock::Tcp(s)
            });
        }
    }
    drop(listener);
    if let Some(u) = udp {
        socks.push(DataSock::Udp(u));
    }
    let timeout = Duration::from_millis(req.timeout_ms.max(1));
    for s in &socks {
        s.set_mode(req.busy_poll, AGENT_POLL_SLICE).map_err(|e| e.to_string())?;
    }
    // wait longer than the client does, so that the client reports first
    // what the client asked for, at most what the agent allows (serve --max-idle)
    let idle_limit = (timeout * 2 + Duration::from_secs(5)).min(shared.cfg.max_idle);
    let buf = vec![0u8; (req.max_size as usize).max(65_536)];
    // what is said when is the machine's; the steps' echoing is this file's
    let clock = Clock::start();
    let protos = socks.iter().map(|s| s.proto()).collect();
    let between = gridperf_core::proto::nanos(shared.cfg.control_timeout);
    let mut m = measure::Echo::new(protos, req.max_size, between, agent, clock.now());
    let mut work = Work { shared, req, socks, buf, idle_limit, ipv6 };
    converse(ctl, &mut m, Vec::new(), &clock, shared.cfg.control_timeout, &mut work)
}

/// The echo test's data sockets and what its steps need.
struct Work<'a> {
    shared: &'a Shared,
    req: &'a EchoSpec,
    socks: Vec<DataSock>,
    buf: Vec<u8>,
    /// How long a message may take to arrive in full.
    idle_limit: Duration,
    ipv6: bool,
}

impl Tasks<measure::Echo> for Work<'_> {
    fn run(&mut self, t: Task, m: &mut measure::Echo, ctl: &mut TcpStream, clock: &Clock) -> Result<Acts<Task>, Fail> {
        let event = match t {
            Task::Echo { proto, size, exchanges } => {
                let Some(sock) = self.socks.iter_mut().find(|s| s.proto() == proto) else {
                    return Err(Fail::Untold(format!("internal: a {} step without its socket", proto.name())));
                };
                let step = EchoStep {
                    ctl,
                    size: size as usize,
                    exchanges,
                    busy: self.req.busy_poll,
                    idle_limit: self.idle_limit,
                    control_timeout: self.shared.cfg.control_timeout,
                    stop: &self.shared.stop,
                    faults: self.shared.cfg.faults,
                    last_look: Instant::now(),
                };
                match step.run(sock, &mut self.buf) {
                    Ok(figures) => {
                        self.shared.metrics.moved(0, figures.bytes_in);
                        Event::Stepped(figures)
                    }
                    Err(StepError::Control(m)) => return Err(m.into()),
                    Err(StepError::Stopped) => {
                        return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()))
                    }
                    Err(e) => {
                        return Err(send_error(ctl, ErrorCode::Timeout, format!("{} {size} B: {e}", proto.name())))
                    }
                }
            }
            Task::ReadSockets => Event::Sockets(
                self.socks
                    .iter()
                    .map(|s| {
                        let fd = RawFdRef(s.raw_fd());
                        host::socket_info(&fd, s.proto(), self.ipv6, self.req.sndbuf, self.req.rcvbuf)
                    })
                    .collect(),
            ),
            Task::Stream => return Err(Fail::Untold("internal: a stream task in an echo test".into())),
        };
        Ok(m.handle(Input::Event(event), clock.now()))
    }

    fn stopping(&self) -> bool {
        self.shared.stopping()
    }
}

fn apply_buffers(sock: &impl AsRawFd, req: &EchoSpec) -> Result<(), String> {
    if let Some(b) = req.sndbuf {
        gridperf_sys::set_sndbuf(sock, b as usize).map_err(|e| format!("SO_SNDBUF: {e}"))?;
    }
    if let Some(b) = req.rcvbuf {
        gridperf_sys::set_rcvbuf(sock, b as usize).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    }
    Ok(())
}

/// Why the agent's side of a step stopped early.
#[derive(Debug)]
pub enum StepError {
    /// The data connection failed or the client vanished.
    Io(io::Error),
    /// Nothing arrived for longer than the deadline.
    Idle(Duration),
    /// A control message that does not belong in a step.
    Control(String),
    /// The agent is shutting down.
    Stopped,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Io(e) => write!(f, "data connection: {e}"),
            StepError::Idle(d) => write!(f, "no data from the client for {:.1} s", d.as_secs_f64()),
            StepError::Control(m) => write!(f, "{m}"),
            StepError::Stopped => write!(f, "the agent is shutting down"),
        }
    }
}

/// Test-only faults the agent can be told to inject.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Receive but do not echo every n-th UDP datagram (counted per step).
    pub drop_udp_every: Option<u64>,
    /// Echo every n-th UDP datagram only after `delay` (a late reply).
    pub delay_udp_every: Option<u64>,
    pub delay: Duration,
    /// Stream tests: the agent's receiver of stream 0 resets its connection
    /// after this many bytes (a connection that breaks mid-run).
    pub break_stream_after: Option<u64>,
    /// Stream tests: the agent answers StreamGo with TCP_INFO samples
    /// without end (a hostile agent, for the client's bounds).
    pub flood_stream_samples: bool,
}

/// The agent's side of one step: echo messages of `size` bytes until
/// `exchanges` are done or the client sends StepEnd.
pub struct EchoStep<'a> {
    pub ctl: &'a mut TcpStream,
    pub size: usize,
    pub exchanges: Option<u64>,
    pub busy: bool,
    /// Give up when a message takes longer than this to arrive in full.
    pub idle_limit: Duration,
    /// For reading a control message once it has begun to arrive.
    pub control_timeout: Duration,
    /// The agent's stop flag, looked at for every message and every wait.
    pub stop: &'a AtomicBool,
    pub faults: Faults,
    /// When a busy-polling step last looked at the control channel.
    pub last_look: Instant,
}

impl EchoStep<'_> {
    /// Whether a control message is waiting, and if so whether it ends the step.
    fn control_says_end(&mut self) -> Result<bool, StepError> {
        let ready = gridperf_sys::poll_readable(&[self.ctl.as_raw_fd()], 0).map_err(StepError::Io)?;
        if !ready[0] {
            return Ok(false);
        }
        match ctl::read_msg_within::<ClientMsg>(self.ctl, self.control_timeout) {
            Ok(ClientMsg::StepEnd) => Ok(true),
            Ok(ClientMsg::Abort { reason }) => Err(StepError::Control(format!("client aborted: {reason}"))),
            Ok(other) => Err(StepError::Control(format!("unexpected control message during a step: {other:?}"))),
            Err(e) => Err(StepError::Control(format!("control channel: {e}"))),
        }
    }

    /// What to do when no data is waiting: keep waiting (Ok(false)), the
    /// step ended (Ok(true)), or give up.
    fn on_wait(&mut self, spins: &mut u32, since: Instant, may_end: bool) -> Result<bool, StepError> {
        *spins = spins.wrapping_add(1);
        if self.busy {
            // spinning: look at the clock every 256 spins and at the control
            // channel once a millisecond, so that the poll(2) it takes is not
            // in the way of the next message
            if *spins % 256 != 0 {
                return Ok(false);
            }
            let now = Instant::now();
            if now.duration_since(self.last_look) < Duration::from_millis(1) {
                return Ok(false);
            }
            self.last_look = now;
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(StepError::Stopped);
        }
        if may_end && self.control_says_end()? {
            return Ok(true);
        }
        let idle = since.elapsed();
        if idle > self.idle_limit {
            return Err(StepError::Idle(idle));
        }
        Ok(false)
    }

    pub fn run(mut self, data: &mut DataSock, buf: &mut [u8]) -> Result<StepFigures, StepError> {
        let mut fig = StepFigures::default();
        let (u0, s0) = gridperf_sys::thread_cpu_time_ns();
        let mut spins: u32 = 0;
        let size = self.size;
        loop {
            if self.exchanges.is_some_and(|n| fig.echoed >= n) {
                break;
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(StepError::Stopped);
            }
            // receive one message; it must arrive in full within idle_limit
            let since = Instant::now();
            let received = match data {
                DataSock::Tcp(s) | DataSock::Sendfile(s, _) => {
                    let mut got = 0;
                    let mut ended = false;
                    while got < size {
                        match s.read(&mut buf[got..size]) {
                            Ok(0) => {
                                return Err(StepError::Io(io::Error::new(
                                    io::ErrorKind::UnexpectedEof,
                                    "the client closed the data connection",
                                )))
                            }
                            Ok(n) => {
                                got += n;
                                if got < size && since.elapsed() > self.idle_limit {
                                    return Err(StepError::Idle(since.elapsed()));
                                }
                            }
                            Err(e) if is_wait(&e) => {
                                if self.on_wait(&mut spins, since, got == 0)? {
                                    ended = true;
                                    break;
                                }
                            }
                            Err(e) => return Err(StepError::Io(e)),
                        }
                    }
                    (!ended).then_some(size)
                }
                DataSock::Udp(s) => loop {
                    match s.recv(buf) {
                        // the client's hint that the step ended; StepEnd decides
                        Ok(0) => {
                            if self.control_says_end()? {
                                break None;
                            }
                        }
                        Ok(n) => break Some(n),
                        // ICMP from the client's port (a reply it no longer waits for)
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                        Err(e) if is_wait(&e) => {
                            if self.on_wait(&mut spins, since, true)? {
                                break None;
                            }
                        }
                        Err(e) => return Err(StepError::Io(e)),
                    }
                },
            };
            let Some(n) = received else { break };
            fig.bytes_in += n as u64;
            // reply: TCP sends back the bytes it received, sendfile sends the
            // pattern from its file, UDP the datagram (sequence number included)
            let deadline = Instant::now() + self.idle_limit;
            match data {
                DataSock::Tcp(s) => write_full(s, &buf[..n], deadline).map_err(StepError::Io)?,
                DataSock::Sendfile(s, file) => sendfile_full(s, file, n, deadline).map_err(StepError::Io)?,
                DataSock::Udp(s) => {
                    let count = fig.echoed + fig.dropped_on_purpose + fig.send_failed + 1;
                    if self.faults.drop_udp_every.is_some_and(|k| k > 0 && count % k == 0) {
                        fig.dropped_on_purpose += 1;
                        continue;
                    }
                    if self.faults.delay_udp_every.is_some_and(|k| k > 0 && count % k == 0) {
                        std::thread::sleep(self.faults.delay);
                    }
                    match s.send(&buf[..n]) {
                        Ok(_) => {}
                        // the client went away or its queue is full: its loss to count
                        Err(e)
                            if e.kind() == io::ErrorKind::ConnectionRefused
                                || is_wait(&e)
                                || e.raw_os_error() == Some(libc::ENOBUFS) =>
                        {
                            fig.send_failed += 1;
                            continue;
                        }
                        Err(e) => return Err(StepError::Io(e)),
                    }
                }
            }
            fig.echoed += 1;
        }
        let (u1, s1) = gridperf_sys::thread_cpu_time_ns();
        fig.cpu_ns = (u1 - u0) + (s1 - s0);
        Ok(fig)
    }
}
