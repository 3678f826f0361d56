//! `gridperf serve`: the agent. It answers the control channel, opens the
//! data sockets of each test, echoes, and returns its own figures.
//!
//! One thread per control connection. Tests take a slot (`--max-tests`,
//! default 1); a client that finds no slot is told "busy" at once, or waits
//! in a bounded queue if it asked to. Any failure of one client ends that
//! client's connection only; the accept loop goes on.

use crate::engines::echo::{DataSock, EchoStep, Faults, RawFdRef, StepError};
use crate::env;
use gridperf_core::plan::Proto;
use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode, StepRequest, TestRequest, WireError};
use socket2::{Domain, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Addresses to listen on. `[::]` listens on IPv4 and IPv6 alike.
    pub bind: Vec<SocketAddr>,
    /// Tests that may run side by side.
    pub max_tests: usize,
    /// Clients that may wait for a slot (if they ask to wait).
    pub queue_len: usize,
    /// Control connections open at once; more are refused at once.
    pub max_connections: usize,
    /// Exit after the first test has finished.
    pub once: bool,
    /// How long a client may take to say hello or send its next control message.
    pub control_timeout: Duration,
    /// Test-only fault injection.
    pub faults: Faults,
    /// Print a line per test to stderr.
    pub log: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            bind: vec![SocketAddr::from(([0u16; 8], wire::DEFAULT_PORT))],
            max_tests: 1,
            queue_len: 8,
            max_connections: 64,
            once: false,
            control_timeout: Duration::from_secs(10),
            faults: Faults::default(),
            log: true,
        }
    }
}

struct Slots {
    running: usize,
    waiting: usize,
}

struct Shared {
    cfg: AgentConfig,
    slots: Mutex<Slots>,
    freed: Condvar,
    connections: AtomicUsize,
    tests_done: AtomicUsize,
    stop: Arc<AtomicBool>,
}

/// A bound agent, ready to [`Agent::run`].
pub struct Agent {
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
}

/// Stops a running agent from another thread (or a signal handler's flag).
#[derive(Clone)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if addr.is_ipv6() {
        // [::] takes IPv4 clients too; a specific v6 address only v6
        sock.set_only_v6(!addr.ip().is_unspecified())?;
    }
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

impl Agent {
    pub fn bind(cfg: AgentConfig) -> io::Result<Agent> {
        let mut listeners = Vec::new();
        for &addr in &cfg.bind {
            match listen(addr) {
                Ok(l) => listeners.push(l),
                // no IPv6 on this host: fall back to IPv4 for the default [::]
                Err(e) if addr.ip() == IpAddr::from([0u16; 8]) && cfg.bind.len() == 1 => {
                    let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
                    listeners.push(listen(v4).map_err(|_| e)?);
                }
                Err(e) => return Err(io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))),
            }
        }
        let shared = Arc::new(Shared {
            cfg,
            slots: Mutex::new(Slots { running: 0, waiting: 0 }),
            freed: Condvar::new(),
            connections: AtomicUsize::new(0),
            tests_done: AtomicUsize::new(0),
            stop: Arc::new(AtomicBool::new(false)),
        });
        Ok(Agent { listeners, shared })
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.shared.stop.clone())
    }

    /// Accepts clients until stopped (or, with `once`, until one test has finished).
    pub fn run(self) -> io::Result<()> {
        let fds: Vec<i32> = self.listeners.iter().map(|l| l.as_raw_fd()).collect();
        let mut handles: Vec<thread::JoinHandle<()>> = Vec::new();
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.shared.cfg.once && self.shared.tests_done.load(Ordering::SeqCst) > 0 {
                break;
            }
            let ready = gridperf_sys::poll_readable(&fds, 100)?;
            for (i, r) in ready.iter().enumerate() {
                if !r {
                    continue;
                }
                let (stream, peer) = match self.listeners[i].accept() {
                    Ok(x) => x,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => {
                        // EMFILE and the like: say so, back off, keep serving
                        eprintln!("gridperf serve: accept failed: {e}");
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                let shared = self.shared.clone();
                if shared.connections.fetch_add(1, Ordering::SeqCst) >= shared.cfg.max_connections {
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                    let mut s = stream;
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = wire::write_msg(
                        &mut s,
                        &AgentMsg::Error {
                            code: ErrorCode::Busy,
                            message: format!(
                                "the agent has {} control connections open, its limit; try again later",
                                shared.cfg.max_connections
                            ),
                        },
                    );
                    continue;
                }
                let h = thread::Builder::new().name(format!("gridperf-client-{peer}")).spawn(move || {
                    let result = serve_client(&shared, stream, peer);
                    if let Err(e) = result {
                        if shared.cfg.log {
                            eprintln!("gridperf serve: {peer}: {e}");
                        }
                    }
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                })?;
                handles.push(h);
            }
            handles.retain(|h| !h.is_finished());
        }
        // let running tests see the stop flag and finish
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    }
}

/// Holds a test slot; frees it on drop.
struct SlotGuard<'a>(&'a Shared);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.slots.lock() {
            s.running -= 1;
        }
        self.0.freed.notify_all();
    }
}

fn send_error(ctl: &mut TcpStream, code: ErrorCode, message: String) -> String {
    let _ = wire::write_msg(ctl, &AgentMsg::Error { code, message: message.clone() });
    message
}

fn take_slot<'a>(shared: &'a Shared, ctl: &mut TcpStream, req: &TestRequest) -> Result<SlotGuard<'a>, String> {
    let mut slots = shared.slots.lock().map_err(|_| "slot lock poisoned".to_string())?;
    if slots.running < shared.cfg.max_tests {
        slots.running += 1;
        return Ok(SlotGuard(shared));
    }
    let busy = |slots: &Slots| {
        format!(
            "the agent is busy: {} test(s) running (limit {}, set with --max-tests), {} waiting",
            slots.running, shared.cfg.max_tests, slots.waiting
        )
    };
    if req.queue_ms == 0 {
        return Err(send_error(ctl, ErrorCode::Busy, busy(&slots) + "; ask to wait with --queue DURATION"));
    }
    if slots.waiting >= shared.cfg.queue_len {
        return Err(send_error(ctl, ErrorCode::Busy, busy(&slots) + ": the queue is full"));
    }
    let ahead = slots.waiting as u32;
    slots.waiting += 1;
    drop(slots);
    let _ = wire::write_msg(ctl, &AgentMsg::Queued { ahead });
    let deadline = Instant::now() + Duration::from_millis(req.queue_ms.min(3_600_000));
    let mut slots = shared.slots.lock().map_err(|_| "slot lock poisoned".to_string())?;
    loop {
        if slots.running < shared.cfg.max_tests {
            slots.waiting -= 1;
            slots.running += 1;
            return Ok(SlotGuard(shared));
        }
        let now = Instant::now();
        if now >= deadline || shared.stop.load(Ordering::SeqCst) {
            slots.waiting -= 1;
            let msg = busy(&slots) + &format!(" after waiting {} ms in the queue", req.queue_ms);
            drop(slots);
            return Err(send_error(ctl, ErrorCode::Busy, msg));
        }
        let wait = (deadline - now).min(Duration::from_millis(200));
        slots = shared.freed.wait_timeout(slots, wait).map_err(|_| "slot lock poisoned".to_string())?.0;
    }
}

/// Checks a request against what this agent supports, before taking a slot.
fn validate(req: &TestRequest) -> Result<Vec<Proto>, (ErrorCode, String)> {
    if req.kind != "rtt" && req.kind != "transfer" {
        return Err((
            ErrorCode::Unsupported,
            format!("this agent does not know the test {:?}: it runs rtt and transfer", req.kind),
        ));
    }
    let mut protos = Vec::new();
    for name in &req.protos {
        match Proto::from_name(name) {
            Some(p) => protos.push(p),
            None => {
                return Err((
                    ErrorCode::Unsupported,
                    format!("this agent does not know the protocol {name:?}: it supports {}", Proto::VALID),
                ))
            }
        }
    }
    if protos.is_empty() {
        return Err((ErrorCode::BadMessage, "the request names no protocol".into()));
    }
    for &p in &protos {
        if req.max_size == 0 || req.max_size > p.max_message() {
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "a {p} message of {} bytes is refused: this agent takes 1 to {} bytes for {p}",
                    req.max_size,
                    p.max_message()
                ),
            ));
        }
    }
    if let Some(b) = req.sndbuf.into_iter().chain(req.rcvbuf).find(|&b| b > 1 << 30) {
        return Err((ErrorCode::TooLarge, format!("a socket buffer of {b} bytes is refused: at most 1 GiB")));
    }
    Ok(protos)
}

fn serve_client(shared: &Shared, mut ctl: TcpStream, peer: SocketAddr) -> Result<(), String> {
    ctl.set_nonblocking(false).map_err(|e| e.to_string())?;
    ctl.set_nodelay(true).map_err(|e| e.to_string())?;
    ctl.set_read_timeout(Some(shared.cfg.control_timeout)).map_err(|e| e.to_string())?;
    ctl.set_write_timeout(Some(shared.cfg.control_timeout)).map_err(|e| e.to_string())?;

    // hello, version check
    match wire::read_msg::<_, ClientMsg>(&mut ctl) {
        Ok(ClientMsg::Hello { magic, version, software }) => {
            if magic != wire::MAGIC {
                return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("bad magic {magic:?}")));
            }
            if version != wire::PROTOCOL_VERSION {
                return Err(send_error(
                    &mut ctl,
                    ErrorCode::VersionMismatch,
                    format!(
                        "protocol version mismatch: the client ({software}) speaks version {version}, this agent ({}) speaks version {}; run the same gridperf release on both ends",
                        env::software(),
                        wire::PROTOCOL_VERSION
                    ),
                ));
            }
        }
        Ok(other) => {
            return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("expected hello, got {other:?}")));
        }
        Err(e) => {
            let code = match e {
                WireError::TooLarge { .. } => ErrorCode::TooLarge,
                WireError::Timeout => ErrorCode::Timeout,
                _ => ErrorCode::BadMessage,
            };
            return Err(send_error(&mut ctl, code, format!("before hello: {e}")));
        }
    }
    wire::write_msg(
        &mut ctl,
        &AgentMsg::Welcome { magic: wire::MAGIC.into(), version: wire::PROTOCOL_VERSION, software: env::software() },
    )
    .map_err(|e| e.to_string())?;

    let req = match wire::read_msg::<_, ClientMsg>(&mut ctl) {
        Ok(ClientMsg::Request(r)) => r,
        Ok(other) => {
            return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("expected a request, got {other:?}")))
        }
        Err(e) => return Err(send_error(&mut ctl, ErrorCode::BadMessage, e.to_string())),
    };
    let protos = match validate(&req) {
        Ok(p) => p,
        Err((code, msg)) => return Err(send_error(&mut ctl, code, msg)),
    };
    let _slot = take_slot(shared, &mut ctl, &req)?;
    if shared.cfg.log {
        eprintln!("gridperf serve: {peer}: {} {} up to {} B", req.kind, req.protos.join(","), req.max_size);
    }
    let result = run_test(shared, &mut ctl, peer, &req, &protos);
    shared.tests_done.fetch_add(1, Ordering::SeqCst);
    match result {
        Ok(()) => Ok(()),
        Err(msg) => {
            let _ = wire::write_msg(&mut ctl, &AgentMsg::Error { code: ErrorCode::Internal, message: msg.clone() });
            Err(msg)
        }
    }
}

fn apply_buffers(sock: &impl AsRawFd, req: &TestRequest) -> Result<(), String> {
    if let Some(b) = req.sndbuf {
        gridperf_sys::set_sndbuf(sock, b as usize).map_err(|e| format!("SO_SNDBUF: {e}"))?;
    }
    if let Some(b) = req.rcvbuf {
        gridperf_sys::set_rcvbuf(sock, b as usize).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    }
    Ok(())
}

fn run_test(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    req: &TestRequest,
    protos: &[Proto],
) -> Result<(), String> {
    let mut pinned = None;
    if let Some(cpu) = req.cpu {
        gridperf_sys::set_thread_affinity(&[cpu]).map_err(|e| format!("cannot pin the agent to CPU {cpu}: {e}"))?;
        pinned = Some(vec![cpu]);
    }
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip();
    let ipv6 = local_ip.is_ipv6();
    let streams: Vec<Proto> = protos.iter().copied().filter(|p| p.is_stream()).collect();
    let listener = if streams.is_empty() {
        None
    } else {
        let l = TcpListener::bind((local_ip, 0)).map_err(|e| format!("data listener: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Some(l)
    };
    let udp = if protos.contains(&Proto::Udp) {
        let port = req.udp_port.ok_or("UDP requested without the client's UDP port")?;
        let s = UdpSocket::bind((local_ip, 0)).map_err(|e| format!("UDP socket: {e}"))?;
        apply_buffers(&s, req)?;
        s.connect((peer.ip(), port)).map_err(|e| format!("UDP connect: {e}"))?;
        Some(s)
    } else {
        None
    };
    let token: u64 = {
        // a random number (std's hasher keys are random per instance); not a
        // secret against an eavesdropper: it keeps a stray connection from
        // being taken for the client's
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u16(peer.port());
        h.finish() | 1
    };
    let mut agent = env::end_info(pinned, req.busy_poll);
    wire::write_msg(
        ctl,
        &AgentMsg::Ready {
            tcp_port: listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.port()),
            udp_port: udp.as_ref().and_then(|s| s.local_addr().ok()).map(|a| a.port()),
            token,
            agent: agent.clone(),
        },
    )
    .map_err(|e| e.to_string())?;

    // the client's TCP data connections: token, then one byte naming the protocol
    let mut socks: Vec<DataSock> = Vec::new();
    if let Some(l) = &listener {
        let deadline = Instant::now() + shared.cfg.control_timeout;
        while socks.len() < streams.len() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the client opened {} of {} data connections within {:.0} s",
                    socks.len(),
                    streams.len(),
                    shared.cfg.control_timeout.as_secs_f64()
                ));
            }
            let ready = gridperf_sys::poll_readable(&[l.as_raw_fd()], 100).map_err(|e| e.to_string())?;
            if !ready[0] {
                continue;
            }
            let (mut s, from) = match l.accept() {
                Ok(x) => x,
                Err(_) => continue,
            };
            if from.ip() != peer.ip() {
                continue;
            }
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut hello = [0u8; 9];
            if s.read_exact(&mut hello).is_err() {
                continue;
            }
            let mut tok = [0u8; 8];
            tok.copy_from_slice(&hello[..8]);
            if u64::from_be_bytes(tok) != token {
                continue;
            }
            let proto = match hello[8] {
                1 => Proto::Tcp,
                2 => Proto::Sendfile,
                _ => continue,
            };
            if !streams.contains(&proto) || socks.iter().any(|d| d.proto() == proto) {
                continue;
            }
            s.set_nodelay(req.nodelay).map_err(|e| e.to_string())?;
            apply_buffers(&s, req)?;
            socks.push(if proto == Proto::Sendfile {
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
    let timeout = Duration::from_millis(req.timeout_ms.clamp(1, 3_600_000));
    for s in &socks {
        s.set_mode(req.busy_poll, crate::engines::echo::AGENT_POLL_SLICE).map_err(|e| e.to_string())?;
    }
    // wait longer than the client does, so that the client reports first
    let idle_limit = timeout * 2 + Duration::from_secs(5);
    let mut buf = vec![0u8; (req.max_size as usize).max(65_536)];
    let file_buf = crate::engines::echo::pattern(req.max_size as usize);
    ctl.set_read_timeout(Some(idle_limit.max(shared.cfg.control_timeout))).map_err(|e| e.to_string())?;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Err("the agent is shutting down".into());
        }
        match wire::read_msg::<_, ClientMsg>(ctl) {
            Ok(ClientMsg::Step(StepRequest { proto, size, exchanges })) => {
                let p = Proto::from_name(&proto);
                let Some(sock) = socks.iter_mut().find(|s| Some(s.proto()) == p) else {
                    return Err(send_error(
                        ctl,
                        ErrorCode::BadMessage,
                        format!("step for protocol {proto:?}, which this test did not open"),
                    ));
                };
                if size == 0 || size > req.max_size {
                    return Err(send_error(
                        ctl,
                        ErrorCode::TooLarge,
                        format!("step size {size} is outside 1..={} announced in the request", req.max_size),
                    ));
                }
                wire::write_msg(ctl, &AgentMsg::StepReady).map_err(|e| e.to_string())?;
                let step = EchoStep {
                    ctl,
                    size: size as usize,
                    exchanges: if sock.proto().is_stream() { exchanges } else { None },
                    busy: req.busy_poll,
                    idle_limit,
                    faults: shared.cfg.faults,
                };
                match step.run(sock, &mut buf, &file_buf) {
                    Ok(figures) => wire::write_msg(ctl, &AgentMsg::StepDone { figures }).map_err(|e| e.to_string())?,
                    Err(StepError::Control(m)) => return Err(m),
                    Err(e) => return Err(send_error(ctl, ErrorCode::Timeout, format!("{proto} {size} B: {e}"))),
                }
            }
            Ok(ClientMsg::Finish) => {
                for s in &socks {
                    let fd = RawFdRef(s.raw_fd());
                    agent.sockets.push(env::socket_info(&fd, s.proto(), ipv6, req.sndbuf, req.rcvbuf));
                }
                return wire::write_msg(ctl, &AgentMsg::Report { agent: agent.clone() }).map_err(|e| e.to_string());
            }
            Ok(ClientMsg::Abort { reason }) => return Err(format!("client aborted: {reason}")),
            Ok(other) => return Err(send_error(ctl, ErrorCode::BadMessage, format!("unexpected {other:?}"))),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Starts an agent on loopback in this process, for runs without a HOST.
pub struct LocalAgent {
    pub addr: SocketAddr,
    stop: StopHandle,
    thread: Option<thread::JoinHandle<io::Result<()>>>,
}

impl LocalAgent {
    pub fn start(faults: Faults) -> io::Result<LocalAgent> {
        let cfg = AgentConfig {
            bind: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            faults,
            log: false,
            ..AgentConfig::default()
        };
        let agent = Agent::bind(cfg)?;
        let addr = agent.local_addrs()[0];
        let stop = agent.stop_handle();
        let thread = thread::Builder::new().name("gridperf-local-agent".into()).spawn(move || agent.run())?;
        Ok(LocalAgent { addr, stop, thread: Some(thread) })
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
