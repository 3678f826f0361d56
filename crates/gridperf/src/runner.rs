//! The client's side of the control channel: find the agent (or start one on
//! loopback), say hello, ask for a test, open its data sockets, and drive it
//! step by step.

use crate::engines::echo::{DataSock, Pinger};
use crate::env;
use crate::error::{Error, Result};
use gridperf_core::model::{EndInfo, SocketInfo, StepFigures};
use gridperf_core::plan::Proto;
use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode, StepRequest, TestRequest};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// Resolves `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 literal.
pub fn resolve(host: &str, default_port: u16) -> Result<SocketAddr> {
    let candidates: Vec<SocketAddr> = if let Ok(a) = host.parse::<SocketAddr>() {
        vec![a]
    } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        vec![SocketAddr::new(ip, default_port)]
    } else {
        let with_port = if host.contains(':') { host.to_string() } else { format!("{host}:{default_port}") };
        with_port.to_socket_addrs().map_err(|e| Error::network(format!("cannot resolve {host:?}: {e}")))?.collect()
    };
    candidates.into_iter().next().ok_or_else(|| Error::network(format!("{host:?} resolves to no address")))
}

fn refused(code: ErrorCode, message: String) -> Error {
    match code {
        ErrorCode::Busy | ErrorCode::VersionMismatch | ErrorCode::TooLarge | ErrorCode::Unsupported => {
            Error::refused(format!("the agent refused: {message}"))
        }
        _ => Error::network(format!("the agent reported an error: {message}")),
    }
}

/// Deadlines on the client's side.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub connect: Duration,
    /// For each control-channel answer.
    pub control: Duration,
    /// For each message's round trip.
    pub message: Duration,
    /// How long to wait in the agent's queue (zero: fail at once if busy).
    pub queue: Duration,
}

/// A control connection that has said hello.
pub struct Session {
    ctl: TcpStream,
    pub addr: SocketAddr,
    pub agent_software: String,
    deadlines: Deadlines,
}

/// A started test: its data sockets, one pinger per protocol.
pub struct Test {
    pub pingers: Vec<Pinger>,
    pub agent: EndInfo,
}

impl Session {
    pub fn connect(addr: SocketAddr, deadlines: Deadlines) -> Result<Session> {
        let ctl = TcpStream::connect_timeout(&addr, deadlines.connect).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                " (is `gridperf serve` running there, on this port?)"
            } else {
                ""
            };
            Error::network(format!("cannot connect to the agent at {addr}: {e}{hint}"))
        })?;
        ctl.set_nodelay(true).map_err(|e| Error::network(e.to_string()))?;
        ctl.set_read_timeout(Some(deadlines.control)).map_err(|e| Error::network(e.to_string()))?;
        ctl.set_write_timeout(Some(deadlines.control)).map_err(|e| Error::network(e.to_string()))?;
        let mut s = Session { ctl, addr, agent_software: String::new(), deadlines };
        s.send(&ClientMsg::Hello {
            magic: wire::MAGIC.into(),
            version: wire::PROTOCOL_VERSION,
            software: env::software(),
        })?;
        match s.recv()? {
            AgentMsg::Welcome { magic, version, software } => {
                if magic != wire::MAGIC {
                    return Err(Error::network(format!("{addr} is not a gridperf agent")));
                }
                if version != wire::PROTOCOL_VERSION {
                    return Err(Error::refused(format!(
                        "protocol version mismatch: the agent at {addr} ({software}) speaks version {version}, this client ({}) speaks version {}; run the same gridperf release on both ends",
                        env::software(),
                        wire::PROTOCOL_VERSION
                    )));
                }
                s.agent_software = software;
                Ok(s)
            }
            AgentMsg::Error { code, message } => Err(refused(code, message)),
            other => Err(Error::network(format!("unexpected answer to hello: {other:?}"))),
        }
    }

    fn send(&mut self, msg: &ClientMsg) -> Result<()> {
        wire::write_msg(&mut self.ctl, msg).map_err(|e| Error::network(format!("agent at {}: {e}", self.addr)))
    }

    fn recv(&mut self) -> Result<AgentMsg> {
        self.recv_within(self.deadlines.control)
    }

    fn recv_within(&mut self, within: Duration) -> Result<AgentMsg> {
        crate::ctl::read_msg_within(&self.ctl, within)
            .map_err(|e| Error::network(format!("agent at {}: {e}", self.addr)))
    }

    fn expect<T>(&mut self, what: &str, f: impl FnOnce(AgentMsg) -> Option<T>) -> Result<T> {
        match self.recv()? {
            AgentMsg::Error { code, message } => Err(refused(code, message)),
            other => {
                let shown = format!("{other:?}");
                f(other).ok_or_else(|| Error::network(format!("expected {what} from the agent, got {shown}")))
            }
        }
    }

    /// Asks for a test and opens its data sockets.
    pub fn start(&mut self, mut req: TestRequest, writes: u32) -> Result<Test> {
        let protos: Vec<Proto> = req.protos.iter().filter_map(|p| Proto::from_name(p)).collect();
        let local_ip = self.ctl.local_addr().map_err(|e| Error::network(e.to_string()))?.ip();
        let udp = if protos.contains(&Proto::Udp) {
            let s = UdpSocket::bind((local_ip, 0)).map_err(|e| Error::network(format!("UDP socket: {e}")))?;
            req.udp_port = Some(s.local_addr().map_err(|e| Error::network(e.to_string()))?.port());
            Some(s)
        } else {
            None
        };
        req.queue_ms = self.deadlines.queue.as_millis() as u64;
        let busy = req.busy_poll;
        let nodelay = req.nodelay;
        let (sndbuf, rcvbuf) = (req.sndbuf, req.rcvbuf);
        let max_size = req.max_size as usize;
        self.send(&ClientMsg::Request(req))?;
        // a queued request waits for its slot, within the queue deadline
        let mut answer = self.recv()?;
        if let AgentMsg::Queued { ahead } = answer {
            eprintln!("gridperf: the agent is busy; waiting in its queue ({ahead} ahead)");
            answer = self.recv_within(self.deadlines.queue + self.deadlines.control)?;
        }
        let (tcp_port, udp_port, token, agent) = match answer {
            AgentMsg::Ready { tcp_port, udp_port, token, agent, .. } => (tcp_port, udp_port, token, agent),
            AgentMsg::Error { code, message } => return Err(refused(code, message)),
            other => return Err(Error::network(format!("expected ready from the agent, got {other:?}"))),
        };
        let mut pingers = Vec::new();
        for &p in &protos {
            let sock = match p {
                Proto::Tcp | Proto::Sendfile => {
                    let port = tcp_port.ok_or_else(|| Error::network("the agent opened no TCP data port"))?;
                    let addr = SocketAddr::new(self.addr.ip(), port);
                    let mut s = TcpStream::connect_timeout(&addr, self.deadlines.connect)
                        .map_err(|e| Error::network(format!("data connection to {addr}: {e}")))?;
                    let mut hello = token.to_be_bytes().to_vec();
                    hello.push(if p == Proto::Tcp { 1 } else { 2 });
                    s.write_all(&hello).map_err(|e| Error::network(format!("data connection: {e}")))?;
                    s.set_nodelay(nodelay).map_err(|e| Error::network(e.to_string()))?;
                    set_buffers(&s, sndbuf, rcvbuf)?;
                    if p == Proto::Sendfile {
                        let file = gridperf_sys::memfd_pattern(max_size)
                            .map_err(|e| Error::internal(format!("memfd for sendfile: {e}")))?;
                        DataSock::Sendfile(s, file)
                    } else {
                        DataSock::Tcp(s)
                    }
                }
                Proto::Udp => {
                    let s = udp.as_ref().ok_or_else(|| Error::internal("no UDP socket"))?;
                    let s = s.try_clone().map_err(|e| Error::internal(e.to_string()))?;
                    let port = udp_port.ok_or_else(|| Error::network("the agent opened no UDP data port"))?;
                    s.connect((self.addr.ip(), port)).map_err(|e| Error::network(format!("UDP connect: {e}")))?;
                    set_buffers(&s, sndbuf, rcvbuf)?;
                    DataSock::Udp(s)
                }
            };
            sock.set_mode(busy, self.deadlines.message).map_err(|e| Error::network(e.to_string()))?;
            pingers.push(Pinger::new(sock, max_size, self.deadlines.message, writes, busy));
        }
        Ok(Test { pingers, agent })
    }

    /// Asks for a stream test (kind "stream"); returns the agent's TCP data
    /// port, its UDP ports (one per stream), the token and its record.
    pub fn request_stream(&mut self, mut req: TestRequest) -> Result<(Option<u16>, Vec<u16>, u64, EndInfo)> {
        req.queue_ms = self.deadlines.queue.as_millis() as u64;
        self.send(&ClientMsg::Request(req))?;
        let mut answer = self.recv()?;
        if let AgentMsg::Queued { ahead } = answer {
            eprintln!("gridperf: the agent is busy; waiting in its queue ({ahead} ahead)");
            answer = self.recv_within(self.deadlines.queue + self.deadlines.control)?;
        }
        match answer {
            AgentMsg::Ready { tcp_port, token, agent, udp_ports, .. } => Ok((tcp_port, udp_ports, token, agent)),
            AgentMsg::Error { code, message } => Err(refused(code, message)),
            other => Err(Error::network(format!("expected ready from the agent, got {other:?}"))),
        }
    }

    /// Starts a stream test's transfer.
    pub fn go(&mut self) -> Result<()> {
        self.send(&ClientMsg::StreamGo)
    }

    /// The next message from the agent within `within`; an error frame
    /// becomes an error.
    pub fn next(&mut self, within: Duration) -> Result<AgentMsg> {
        match self.recv_within(within)? {
            AgentMsg::Error { code, message } => Err(refused(code, message)),
            m => Ok(m),
        }
    }

    /// The client's address on the control connection (data sockets bind to it).
    pub fn local_ip(&self) -> Result<std::net::IpAddr> {
        self.ctl.local_addr().map(|a| a.ip()).map_err(|e| Error::network(e.to_string()))
    }

    /// Starts a step and waits until the agent is ready for it.
    pub fn step(&mut self, proto: Proto, size: u64, exchanges: Option<u64>) -> Result<()> {
        self.send(&ClientMsg::Step(StepRequest { proto: proto.name().into(), size, exchanges }))?;
        self.expect("step-ready", |m| matches!(m, AgentMsg::StepReady).then_some(()))
    }

    /// Ends a step (sending StepEnd unless the agent counts the exchanges
    /// itself) and returns the agent's figures for it.
    pub fn end_step(&mut self, pinger: &Pinger, counted_by_agent: bool) -> Result<StepFigures> {
        if !counted_by_agent {
            self.send(&ClientMsg::StepEnd)?;
            pinger.nudge();
        }
        self.expect("step-done", |m| match m {
            AgentMsg::StepDone { figures } => Some(figures),
            _ => None,
        })
    }

    /// Ends the test; returns the agent's record of itself and its sockets.
    pub fn finish(&mut self) -> Result<EndInfo> {
        self.send(&ClientMsg::Finish)?;
        self.expect("report", |m| match m {
            AgentMsg::Report { agent } => Some(agent),
            _ => None,
        })
    }

    /// Tells the agent the client gives up (best effort).
    pub fn abort(&mut self, reason: &str) {
        let _ = wire::write_msg(&mut self.ctl, &ClientMsg::Abort { reason: reason.into() });
    }

    /// Whether the agent has closed the control connection (or sent something unasked).
    pub fn agent_gone(&self) -> bool {
        self.agent_gone_within(Duration::ZERO)
    }

    /// The same, waiting up to `wait` for the agent's word to arrive.
    pub fn agent_gone_within(&self, wait: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        gridperf_sys::poll_readable(&[self.ctl.as_raw_fd()], ms).map(|r| r[0]).unwrap_or(true)
    }

    /// What the agent said before it went (an error frame), if anything.
    pub fn last_words(&mut self) -> Option<String> {
        match crate::ctl::read_msg_within::<AgentMsg>(&self.ctl, Duration::from_millis(200)) {
            Ok(AgentMsg::Error { message, .. }) => Some(message),
            _ => None,
        }
    }
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

/// What the client's data sockets were given.
pub fn client_sockets(test: &Test, ipv6: bool, sndbuf: Option<u64>, rcvbuf: Option<u64>) -> Vec<SocketInfo> {
    test.pingers
        .iter()
        .map(|p| {
            let fd = crate::engines::echo::RawFdRef(p.sock.raw_fd());
            env::socket_info(&fd, p.sock.proto(), ipv6, sndbuf, rcvbuf)
        })
        .collect()
}

/// Seconds since the Unix epoch, for the record.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
