//! The client's side of the echo tests (`rtt`, `transfer`): the options
//! they share, opening the test (the agent reached through the runner,
//! the data sockets connected), and the [`Pinger`] that sends a message
//! and waits for its echo. The agent's side is `agent::echo`; the reads and
//! writes both use are in `datapath`.

use crate::datapath::{is_wait, pattern, read_full, sendfile_full, write_full, write_hello, DataSock, RawFdRef};
use crate::error::{Error, Result};
use crate::host;
use crate::runner::converse::{converse, Acts, Clock, Tasks};
use crate::runner::{Deadlines, Opened, Session, Target};
use gridperf_core::analysis::stats::Warning;
use gridperf_core::model::plan::Proto;
use gridperf_core::model::{Environment, LabRecord, Settings, SocketInfo};
use gridperf_core::proto::measure::client::{StepTask, Steps};
use gridperf_core::wire::{DataHello, DataKind, EchoSpec, StepRequest, Test};
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Settings shared by the echo tests (rtt and transfer).
#[derive(Debug, Clone)]
pub struct EchoOptions {
    pub protos: Vec<Proto>,
    pub sizes: Vec<u64>,
    pub nodelay: bool,
    pub writes: u32,
    pub busy_poll: bool,
    pub client_cpu: Option<usize>,
    pub server_cpu: Option<usize>,
    pub sndbuf: Option<u64>,
    pub rcvbuf: Option<u64>,
    pub deadlines: Deadlines,
    /// Before the first point of each protocol, exchange for this long uncounted.
    pub warmup_time: std::time::Duration,
    /// Conditions to note in the record (set by the CLI, e.g. a private namespace).
    pub notes: Vec<String>,
}

impl EchoOptions {
    /// Nagle off, one write per message, no pinning, busy-polling or
    /// buffer settings, no warm-up time: the defaults a program (survey,
    /// tune, tests) starts from, changing what it needs.
    pub fn plain(protos: Vec<Proto>, sizes: Vec<u64>, deadlines: Deadlines) -> EchoOptions {
        EchoOptions {
            protos,
            sizes,
            nodelay: true,
            writes: 1,
            busy_poll: false,
            client_cpu: None,
            server_cpu: None,
            sndbuf: None,
            rcvbuf: None,
            deadlines,
            warmup_time: std::time::Duration::ZERO,
            notes: Vec::new(),
        }
    }

    /// The record of these settings; each engine fills in its own counts.
    pub fn settings(&self) -> Settings {
        Settings {
            protos: self.protos.clone(),
            sizes: self.sizes.clone(),
            iterations: None,
            duration_ns: None,
            warmup: 0,
            warmup_time_ns: self.warmup_time.as_nanos() as u64,
            nodelay: self.nodelay,
            writes_per_message: self.writes,
            busy_poll: self.busy_poll,
            client_cpu: self.client_cpu,
            server_cpu: self.server_cpu,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            timeout_ns: self.deadlines.message.as_nanos() as u64,
            total_bytes: None,
            repeat: None,
            rounds: None,
            retries: None,
            stop_early: false,
        }
    }
}

/// Progress, for the CLI to turn into a bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub proto: Proto,
    pub size: u64,
}

/// An echo test in progress: the agent reached, one pinger per protocol,
/// and the record begun.
pub struct EchoTest {
    pub opened: Opened,
    pub pingers: Vec<Pinger>,
    agent: gridperf_core::model::EndInfo,
    opts: EchoOptions,
    /// The client's end of the steps' conversation.
    steps: Steps,
    clock: Clock,
}

/// Pins this thread, reaches (or starts) the agent, asks for the test and
/// connects its data sockets.
pub fn start(measure: gridperf_core::model::Measure, target: &Target, opts: &EchoOptions) -> Result<EchoTest> {
    if let Some(cpu) = opts.client_cpu {
        gridperf_sys::set_thread_affinity(&[cpu]).map_err(|e| {
            Error::usage(format!("cannot pin the client to CPU {cpu}: {e} (see nproc for the valid CPUs)"))
        })?;
    }
    let mut opened = target.open(opts.deadlines)?;
    let max_size = opts.sizes.iter().copied().max().unwrap_or(1);
    let local_ip = opened.session.local_ip()?;
    let udp = if opts.protos.contains(&Proto::Udp) {
        Some(UdpSocket::bind((local_ip, 0)).map_err(|e| Error::network(format!("UDP socket: {e}")))?)
    } else {
        None
    };
    let spec = EchoSpec {
        protos: opts.protos.clone(),
        max_size,
        nodelay: opts.nodelay,
        busy_poll: opts.busy_poll,
        cpu: opts.server_cpu,
        sndbuf: opts.sndbuf,
        rcvbuf: opts.rcvbuf,
        udp_port: match &udp {
            Some(s) => Some(s.local_addr().map_err(|e| Error::network(e.to_string()))?.port()),
            None => None,
        },
        timeout_ms: opts.deadlines.message.as_millis() as u64,
    };
    let test = match measure {
        gridperf_core::model::Measure::Transfer => Test::Transfer(spec),
        _ => Test::Rtt(spec),
    };
    let ready = opened.session.request(test)?;
    let agent_ip = opened.addr.ip();
    let mut pingers = Vec::new();
    for &p in &opts.protos {
        let sock = match p {
            Proto::Tcp | Proto::Sendfile => {
                let port = ready.tcp_port.ok_or_else(|| Error::network("the agent opened no TCP data port"))?;
                let addr = SocketAddr::new(agent_ip, port);
                let mut s = TcpStream::connect_timeout(&addr, opts.deadlines.connect)
                    .map_err(|e| Error::network(format!("data connection to {addr}: {e}")))?;
                let kind = if p == Proto::Tcp { DataKind::Tcp } else { DataKind::Sendfile };
                write_hello(&mut s, &DataHello::new(ready.token, kind, 0))
                    .map_err(|e| Error::network(format!("data connection: {e}")))?;
                s.set_nodelay(opts.nodelay).map_err(|e| Error::network(e.to_string()))?;
                set_buffers(&s, opts.sndbuf, opts.rcvbuf)?;
                if p == Proto::Sendfile {
                    let file = gridperf_sys::memfd_pattern(max_size as usize)
                        .map_err(|e| Error::internal(format!("memfd for sendfile: {e}")))?;
                    DataSock::Sendfile(s, file)
                } else {
                    DataSock::Tcp(s)
                }
            }
            Proto::Udp => {
                let s = udp.as_ref().ok_or_else(|| Error::internal("no UDP socket"))?;
                let s = s.try_clone().map_err(|e| Error::internal(e.to_string()))?;
                let port = ready
                    .udp_ports
                    .first()
                    .copied()
                    .ok_or_else(|| Error::network("the agent opened no UDP data port"))?;
                s.connect((agent_ip, port)).map_err(|e| Error::network(format!("UDP connect: {e}")))?;
                set_buffers(&s, opts.sndbuf, opts.rcvbuf)?;
                DataSock::Udp(s)
            }
        };
        let timeout = message_timeout(p, opts.deadlines.message);
        sock.set_mode(opts.busy_poll, timeout).map_err(|e| Error::network(e.to_string()))?;
        pingers.push(Pinger::new(sock, max_size as usize, timeout, opts.writes, opts.busy_poll));
    }
    let steps = Steps::new(gridperf_core::proto::nanos(opts.deadlines.control));
    Ok(EchoTest { opened, pingers, agent: ready.agent, opts: opts.clone(), steps, clock: Clock::start() })
}

fn set_buffers(sock: &impl std::os::fd::AsRawFd, sndbuf: Option<u64>, rcvbuf: Option<u64>) -> Result<()> {
    if let Some(b) = sndbuf {
        gridperf_sys::set_sndbuf(sock, b as usize).map_err(|e| Error::internal(format!("SO_SNDBUF: {e}")))?;
    }
    if let Some(b) = rcvbuf {
        gridperf_sys::set_rcvbuf(sock, b as usize).map_err(|e| Error::internal(format!("SO_RCVBUF: {e}")))?;
    }
    Ok(())
}

impl EchoTest {
    /// The pinger for a protocol.
    pub fn index(&self, proto: Proto) -> Result<usize> {
        self.pingers
            .iter()
            .position(|p| p.sock.proto() == proto)
            .ok_or_else(|| Error::internal(format!("no data socket for {proto}")))
    }

    /// Ends a run judged point by point across a lab: the run's verdict
    /// over what it left out goes to the lab's watch, then [`Self::close`].
    pub fn close_judged(
        mut self,
        judged: Option<crate::lab::RoundTrips>,
        points: usize,
        progress: &mut dyn FnMut(Progress),
        warnings: &mut Vec<Warning>,
    ) -> Result<Environment> {
        if let Some(mut j) = judged {
            j.judge_run();
            if let Some(w) = self.opened.lab_watch() {
                w.judged_by_round_trip(j);
            }
        }
        self.close(points, progress, warnings)
    }

    /// Reports the last progress, adds the run-wide warnings, and ends the test.
    pub fn close(
        self,
        points: usize,
        progress: &mut dyn FnMut(Progress),
        warnings: &mut Vec<Warning>,
    ) -> Result<Environment> {
        let opts = self.opts.clone();
        progress(Progress {
            done: points,
            total: points,
            proto: opts.protos[0],
            size: opts.sizes.last().copied().unwrap_or(0),
        });
        if opts.client_cpu.is_none() && opts.server_cpu.is_none() {
            warnings.push(Warning::Unpinned);
        }
        let env = self.finish()?;
        if let Some(w) = env.lab.as_ref().and_then(LabRecord::invalid_warning) {
            warnings.push(w);
        }
        Ok(env)
    }

    /// Ends the test and completes the record with the agent's report. Both
    /// ends read their sockets' state now, after the traffic (autotuned
    /// buffers and the MSS in use are known only then).
    pub fn finish(mut self) -> Result<Environment> {
        let ipv6 = self.opened.addr.is_ipv6();
        let (snd, rcv) = (self.opts.sndbuf, self.opts.rcvbuf);
        let sockets: Vec<SocketInfo> = self
            .pingers
            .iter()
            .map(|p| host::socket_info(&RawFdRef(p.sock.raw_fd()), p.sock.proto(), ipv6, snd, rcv))
            .collect();
        let agent = self.opened.session.finish()?;
        let mut client = host::end_info(self.opts.client_cpu.map(|c| vec![c]), self.opts.busy_poll);
        client.sockets = sockets;
        let _ = &self.agent;
        Ok(self.opened.environment(client, Some(agent), self.opts.notes.clone()))
    }

    /// One warm-up exchange: not counted, but the echo is checked against what was sent.
    pub fn warm_exchange(&mut self, idx: usize, proto: Proto, size: u64, n: u64) -> Result<()> {
        match self.pingers[idx].exchange(size as usize) {
            Ok(Outcome::Rtt(_)) => {
                if !self.pingers[idx].verify_last(size as usize) {
                    self.opened.session.abort("corrupted echo");
                    return Err(Error::measurement(format!(
                        "{proto} {size} B: the echo of warm-up exchange {n} differs from what was sent"
                    )));
                }
                Ok(())
            }
            Ok(Outcome::Lost) => Ok(()),
            Err(e) => Err(self.fail(proto, size, n + 1, e)),
        }
    }

    /// Exchanges for `time` in a step of its own, before the first point of
    /// a protocol: a cold process and connection are slower for tens of
    /// milliseconds (measured here: 1 B TCP ping-pong takes about 20 us for
    /// the first ~3000 exchanges, then 15.9 us). Returns the exchanges done.
    pub fn preheat(&mut self, idx: usize, proto: Proto, size: u64, time: std::time::Duration) -> Result<u64> {
        if time.is_zero() {
            return Ok(0);
        }
        self.step(proto, size, None)?;
        let until = std::time::Instant::now() + time;
        let mut n = 0;
        while std::time::Instant::now() < until {
            self.warm_exchange(idx, proto, size, n)?;
            n += 1;
        }
        self.end_step(idx, false)?;
        Ok(n)
    }

    /// Starts a step and waits until the agent is ready for it; with
    /// `exchanges` the agent counts them and ends the step itself.
    pub fn step(&mut self, proto: Proto, size: u64, exchanges: Option<u64>) -> Result<()> {
        let acts = self.steps.step(StepRequest { proto: proto.name().into(), size, exchanges }, self.clock.now());
        self.converse(acts, None)
    }

    /// Ends a step (step-end, then the pinger's nudge, unless the agent
    /// counts the exchanges itself); the agent's figures for it.
    pub fn end_step(&mut self, idx: usize, counted_by_agent: bool) -> Result<gridperf_core::model::StepFigures> {
        self.end_step_then(idx, counted_by_agent, None)
    }

    /// Ends a step and, with `next` (a protocol and size), asks for the
    /// next one in the same flight: a round trip less
    /// ([`gridperf_core::proto::measure::client`]).
    pub fn end_step_then(
        &mut self,
        idx: usize,
        counted_by_agent: bool,
        next: Option<(Proto, u64)>,
    ) -> Result<gridperf_core::model::StepFigures> {
        let next = next.map(|(p, size)| StepRequest { proto: p.name().into(), size, exchanges: None });
        let acts = self.steps.end(counted_by_agent, next, self.clock.now());
        self.converse(acts, Some(idx))?;
        self.steps.take_figures().ok_or_else(|| Error::internal("the step ended without the agent's figures"))
    }

    /// Drives the steps' machine until it waits for nothing (the exchanges are the caller's).
    fn converse(&mut self, acts: Acts<StepTask>, nudged: Option<usize>) -> Result<()> {
        struct Nudge<'a>(Option<&'a Pinger>);
        impl Tasks<Steps> for Nudge<'_> {
            fn run(&mut self, t: StepTask, _: &mut Steps, _: &mut Session, _: &Clock) -> Result<Acts<StepTask>> {
                match t {
                    StepTask::Nudge => {
                        if let Some(p) = self.0 {
                            p.nudge();
                        }
                    }
                }
                Ok(Vec::new())
            }
            fn pauses(&self) -> bool {
                true
            }
        }
        let mut nudge = Nudge(nudged.map(|k| &self.pingers[k]));
        let longest = self.opts.deadlines.control;
        converse(&mut self.opened.session, &mut self.steps, acts, &self.clock, longest, &mut nudge)
    }

    /// Turns an I/O failure of an exchange into an error that says where it happened.
    /// `n` counts exchanges from 1.
    pub fn fail(&mut self, proto: Proto, size: u64, n: u64, e: std::io::Error) -> Error {
        // the agent may have said why it stopped; its word can trail the data
        // connection's reset by a moment
        let gone = if self.opened.session.agent_gone_within(std::time::Duration::from_millis(200)) {
            match self.opened.session.last_words() {
                Some(why) => format!(" (the agent stopped: {why})"),
                None => " (the agent has closed the control connection)".to_string(),
            }
        } else {
            String::new()
        };
        self.opened.session.abort(&format!("client error: {e}"));
        match e.kind() {
            std::io::ErrorKind::TimedOut => Error::network(format!(
                "{proto} {size} B, exchange {n}: {e} ({:?}){gone}; raise --timeout if the path is that slow",
                message_timeout(proto, self.opts.deadlines.message)
            )),
            _ => Error::network(format!("{proto} {size} B, exchange {n}: {e}{gone}")),
        }
    }

    /// Counts a lost UDP message; after enough losses in a row (at least 10,
    /// and at least 3 s of timeouts) the path or the agent is taken to be
    /// gone, rather than waiting out every remaining message.
    pub fn lost_in_a_row(&mut self, proto: Proto, size: u64, in_a_row: u64) -> Result<()> {
        let limit = (3_000 / self.opts.deadlines.message.as_millis().max(1) as u64).max(10);
        if self.opened.session.agent_gone() {
            let why = self.opened.session.last_words().unwrap_or_else(|| "it closed the control connection".into());
            return Err(Error::network(format!("{proto} {size} B: the agent stopped mid-run: {why}")));
        }
        if in_a_row >= limit {
            return Err(Error::network(format!(
                "{proto} {size} B: no reply to {in_a_row} datagrams in a row (timeout {:?} each): the path or the agent is down",
                self.opts.deadlines.message
            )));
        }
        Ok(())
    }
}

/// What one exchange came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The reply came back after this many nanoseconds.
    Rtt(u64),
    /// No reply within the timeout (UDP only; for TCP a timeout is an error).
    Lost,
}

/// What TCP gets beyond the per-message timeout before an exchange is an
/// error: TCP loses no message, it retransmits it, and on a lossy long path
/// a lost segment costs a retransmission timeout (200 ms at least, more
/// after a backoff) on top of slow start after idle. The survey's WAN
/// profile (180 ms, 0.5% loss) once took over 1 s for one 16 KiB exchange
/// and lost the whole network's results to it. The agent waits 2 x the
/// timeout + 5 s, longer than this, so the client reports first.
pub const TCP_GRACE: Duration = Duration::from_secs(3);

/// How long one exchange may take: the timeout for a UDP message (after
/// which it is lost), that and [`TCP_GRACE`] for TCP and sendfile.
pub fn message_timeout(p: Proto, message: Duration) -> Duration {
    match p {
        Proto::Udp => message,
        Proto::Tcp | Proto::Sendfile => message + TCP_GRACE,
    }
}

/// The client's side of one data socket: sends a message, waits for the echo.
pub struct Pinger {
    pub sock: DataSock,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    /// UDP sequence number of the next message (continues across sizes, so a
    /// late reply from an earlier size is never taken for a current one).
    seq: u64,
    timeout: Duration,
    writes: u32,
    busy: bool,
    /// Replies that arrived after their message was counted as lost.
    pub late: u64,
    /// A message was lost since the socket was last drained: its reply may
    /// still be on the way, and is read (and counted late) before the next
    /// exchange starts its clock.
    stale: bool,
}

impl Pinger {
    /// A pinger on a socket already connected and set to its mode (see [`DataSock::set_mode`]).
    pub fn new(sock: DataSock, max_size: usize, timeout: Duration, writes: u32, busy: bool) -> Pinger {
        let alloc = if sock.proto() == Proto::Udp { max_size.max(65_536) } else { max_size };
        Pinger {
            sock,
            out: pattern(alloc),
            inbuf: vec![0; alloc],
            seq: 0,
            timeout,
            writes: writes.max(1),
            busy,
            late: 0,
            stale: false,
        }
    }

    /// One exchange of `size` bytes each way.
    pub fn exchange(&mut self, size: usize) -> io::Result<Outcome> {
        let timeout = self.timeout;
        match &mut self.sock {
            DataSock::Tcp(s) => {
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                if self.writes == 1 {
                    write_full(s, &self.out[..size], deadline)?;
                } else {
                    // the message in `writes` send calls, as an application that
                    // writes a header and a body would (this is where Nagle bites)
                    let piece = size.div_ceil(self.writes as usize).max(1);
                    for chunk in self.out[..size].chunks(piece) {
                        write_full(s, chunk, deadline)?;
                    }
                }
                read_full(s, &mut self.inbuf[..size], deadline)?;
                Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64))
            }
            DataSock::Sendfile(s, file) => {
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                sendfile_full(s, file, size, deadline)?;
                read_full(s, &mut self.inbuf[..size], deadline)?;
                Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64))
            }
            DataSock::Udp(s) => {
                // the sequence number in the first min(size, 8) bytes: a 1-byte
                // message carries it modulo 256
                let k = size.min(8);
                if self.stale {
                    self.late += drain(s, &mut self.inbuf, self.busy)?;
                    self.stale = false;
                }
                self.out[..k].copy_from_slice(&self.seq.to_le_bytes()[..k]);
                self.seq = self.seq.wrapping_add(1);
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                s.send(&self.out[..size])?;
                let mut shortened = false;
                let result = loop {
                    match s.recv(&mut self.inbuf) {
                        Ok(n) if n == size && self.inbuf[..k] == self.out[..k] => {
                            break Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64));
                        }
                        Ok(_) => {
                            // a reply to an earlier message that was counted lost
                            self.late += 1;
                            let now = Instant::now();
                            if now >= deadline {
                                break Ok(Outcome::Lost);
                            }
                            if !self.busy {
                                s.set_read_timeout(Some(deadline - now))?;
                                shortened = true;
                            }
                        }
                        Err(e) if is_wait(&e) => {
                            if Instant::now() >= deadline {
                                break Ok(Outcome::Lost);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                            break Err(io::Error::new(
                                io::ErrorKind::ConnectionRefused,
                                "the agent's UDP port is closed (ICMP port unreachable): did the agent stop?",
                            ));
                        }
                        Err(e) => break Err(e),
                    }
                };
                if shortened {
                    s.set_read_timeout(Some(timeout))?;
                }
                if matches!(result, Ok(Outcome::Lost)) {
                    self.stale = true;
                }
                result
            }
        }
    }

    /// Checks the first `size` bytes of the last reply against the pattern
    /// (for UDP, past the sequence number).
    pub fn verify_last(&self, size: usize) -> bool {
        let skip = if self.sock.proto() == Proto::Udp { size.min(8) } else { 0 };
        self.inbuf[skip..size] == self.out[skip..size]
    }

    /// Sends a zero-length datagram: a hint to the agent that a UDP step ended
    /// (the StepEnd on the control channel is what counts).
    pub fn nudge(&self) {
        if let DataSock::Udp(s) = &self.sock {
            let _ = s.send(&[]);
        }
    }
}

/// Reads whatever datagrams are queued, without waiting; returns how many.
fn drain(s: &UdpSocket, buf: &mut [u8], busy: bool) -> io::Result<u64> {
    if !busy {
        s.set_nonblocking(true)?;
    }
    let mut n = 0;
    let result = loop {
        match s.recv(buf) {
            Ok(_) => n += 1,
            Err(e) if is_wait(&e) || e.kind() == io::ErrorKind::ConnectionRefused => break Ok(n),
            Err(e) => break Err(e),
        }
    };
    if !busy {
        s.set_nonblocking(false)?;
    }
    result
}
