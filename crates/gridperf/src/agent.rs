//! `gridperf serve`: the agent. It answers the control channel, opens the
//! data sockets of each test, echoes, and returns its own figures.
//!
//! One thread per control connection. Tests take a slot (`--max-tests`,
//! default 1); a client that finds no slot is told "busy" at once, or waits
//! in a bounded queue if it asked to. Any failure of one client ends that
//! client's connection only; the accept loop goes on.

use crate::engines::echo::{DataSock, EchoStep, Faults, RawFdRef, StepError};
use crate::engines::stream;
use crate::{ctl, env};
use gridperf_core::plan::Proto;
use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode, StepRequest, TestRequest, WireError};
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
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
    /// A clone of every open control connection, to shut them down on stop.
    live: Mutex<HashMap<u64, TcpStream>>,
    next_id: AtomicU64,
}

impl Shared {
    fn slots(&self) -> MutexGuard<'_, Slots> {
        // a panicking client thread must not take the agent's slots with it
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Counts a control connection while it lives; forgets it on drop.
struct ConnGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.shared.live.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
        self.shared.connections.fetch_sub(1, Ordering::SeqCst);
    }
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
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
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
        while !self.shared.stopping() {
            if self.shared.cfg.once && self.shared.tests_done.load(Ordering::SeqCst) > 0 {
                self.shared.stop.store(true, Ordering::SeqCst);
                break;
            }
            let ready = match gridperf_sys::poll_readable(&fds, 100) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("gridperf serve: poll failed: {e}");
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
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
                let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                if let Ok(clone) = stream.try_clone() {
                    shared.live.lock().unwrap_or_else(PoisonError::into_inner).insert(id, clone);
                }
                let guard = ConnGuard { shared, id };
                let spawned = thread::Builder::new().name(format!("gridperf-client-{peer}")).spawn(move || {
                    let shared = guard.shared.clone();
                    if let Err(e) = serve_client(&shared, stream, peer) {
                        if shared.cfg.log {
                            eprintln!("gridperf serve: {peer}: {e}");
                        }
                    }
                    drop(guard);
                });
                match spawned {
                    Ok(h) => handles.push(h),
                    // the closure, and the guard in it, are dropped: the count goes back
                    Err(e) => eprintln!("gridperf serve: cannot start a thread for {peer}: {e}"),
                }
            }
            handles.retain(|h| !h.is_finished());
        }
        // tests in progress see the stop flag within a few milliseconds and tell
        // their clients; after a grace period, wake every client thread still
        // blocked in a read, then wait for them
        self.shared.freed.notify_all();
        let grace = Instant::now() + Duration::from_secs(1);
        while handles.iter().any(|h| !h.is_finished()) && Instant::now() < grace {
            thread::sleep(Duration::from_millis(10));
        }
        for s in self.shared.live.lock().unwrap_or_else(PoisonError::into_inner).values() {
            let _ = s.shutdown(Shutdown::Both);
        }
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
        let mut s = self.0.slots();
        s.running = s.running.saturating_sub(1);
        drop(s);
        self.0.freed.notify_all();
    }
}

/// Why a client's connection ended: with the client already told, or not yet.
enum Fail {
    Told(String),
    Untold(String),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Told(m) | Fail::Untold(m) => f.write_str(m),
        }
    }
}

impl From<String> for Fail {
    fn from(m: String) -> Fail {
        Fail::Untold(m)
    }
}

/// Tells the client why, and returns the reason for the agent's log.
fn send_error(ctl: &mut TcpStream, code: ErrorCode, message: String) -> Fail {
    let _ = wire::write_msg(ctl, &AgentMsg::Error { code, message: message.clone() });
    Fail::Told(message)
}

fn take_slot<'a>(shared: &'a Shared, ctl: &mut TcpStream, req: &TestRequest) -> Result<SlotGuard<'a>, Fail> {
    let busy = |slots: &Slots| {
        format!(
            "the agent is busy: {} test(s) running (limit {}, set with --max-tests), {} waiting",
            slots.running, shared.cfg.max_tests, slots.waiting
        )
    };
    let mut slots = shared.slots();
    if shared.stopping() {
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
    }
    if slots.running < shared.cfg.max_tests {
        slots.running += 1;
        return Ok(SlotGuard(shared));
    }
    if req.queue_ms == 0 {
        let msg = busy(&slots) + "; ask to wait with --queue DURATION";
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, msg));
    }
    if slots.waiting >= shared.cfg.queue_len {
        let msg = busy(&slots) + ": the queue is full";
        drop(slots);
        return Err(send_error(ctl, ErrorCode::Busy, msg));
    }
    let ahead = slots.waiting as u32;
    slots.waiting += 1;
    drop(slots);
    let _ = wire::write_msg(ctl, &AgentMsg::Queued { ahead });
    let deadline = Instant::now() + Duration::from_millis(req.queue_ms.min(3_600_000));
    let mut slots = shared.slots();
    loop {
        if slots.running < shared.cfg.max_tests && !shared.stopping() {
            slots.waiting -= 1;
            slots.running += 1;
            return Ok(SlotGuard(shared));
        }
        let now = Instant::now();
        let why = if shared.stopping() {
            Some("the agent is shutting down".to_string())
        } else if now >= deadline {
            Some(busy(&slots) + &format!(" after waiting {} ms in the queue", req.queue_ms))
        } else {
            None
        };
        // a client that hung up (or spoke out of turn) while queued leaves the queue
        let gone = gridperf_sys::poll_readable(&[ctl.as_raw_fd()], 0).map(|r| r[0]).unwrap_or(true);
        if why.is_some() || gone {
            slots.waiting -= 1;
            drop(slots);
            shared.freed.notify_all();
            return Err(match why {
                Some(msg) => send_error(ctl, ErrorCode::Busy, msg),
                None => Fail::Told("the client left the queue".into()),
            });
        }
        let wait = (deadline - now).min(Duration::from_millis(200));
        slots = shared.freed.wait_timeout(slots, wait).unwrap_or_else(PoisonError::into_inner).0;
    }
}

/// Checks a request against what this agent supports, before taking a slot.
fn validate(req: &TestRequest) -> Result<Vec<Proto>, (ErrorCode, String)> {
    if req.kind == "fanout" {
        let Some(f) = &req.fanout else {
            return Err((ErrorCode::BadMessage, "a fanout test without its settings".into()));
        };
        use crate::engines::fanout::{MAX_MESSAGES, MAX_SIZE};
        if f.size == 0 || f.size > MAX_SIZE || f.messages == 0 || f.messages > MAX_MESSAGES {
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "fanout requests: 1 to {MAX_MESSAGES} of 1 to {MAX_SIZE} bytes, not {} of {}",
                    f.messages, f.size
                ),
            ));
        }
        return Ok(vec![Proto::Tcp]);
    }
    if req.kind == "stream" {
        let Some(spec) = &req.stream else {
            return Err((ErrorCode::BadMessage, "a stream test without its settings".into()));
        };
        let proto = stream::validate(spec).map_err(|m| (ErrorCode::Unsupported, m))?;
        return Ok(vec![proto]);
    }
    if req.kind != "rtt" && req.kind != "transfer" {
        return Err((
            ErrorCode::Unsupported,
            format!("this agent does not know the test {:?}: it runs rtt, transfer and stream", req.kind),
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

fn wire_code(e: &WireError) -> ErrorCode {
    match e {
        WireError::TooLarge { .. } => ErrorCode::TooLarge,
        WireError::Timeout => ErrorCode::Timeout,
        _ => ErrorCode::BadMessage,
    }
}

fn serve_client(shared: &Shared, mut ctl: TcpStream, peer: SocketAddr) -> Result<(), Fail> {
    let setup = |ctl: &TcpStream| -> io::Result<()> {
        ctl.set_nonblocking(false)?;
        ctl.set_nodelay(true)?;
        ctl.set_write_timeout(Some(shared.cfg.control_timeout))
    };
    setup(&ctl).map_err(|e| e.to_string())?;
    // hello and request, both within one control timeout
    let until = Instant::now() + shared.cfg.control_timeout;

    match ctl::read_msg_by::<ClientMsg>(&ctl, until) {
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
        Err(e) => return Err(send_error(&mut ctl, wire_code(&e), format!("before hello: {e}"))),
    }
    wire::write_msg(
        &mut ctl,
        &AgentMsg::Welcome { magic: wire::MAGIC.into(), version: wire::PROTOCOL_VERSION, software: env::software() },
    )
    .map_err(|e| e.to_string())?;

    let req = match ctl::read_msg_by::<ClientMsg>(&ctl, until) {
        Ok(ClientMsg::Request(r)) => r,
        Ok(other) => {
            return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("expected a request, got {other:?}")))
        }
        Err(e) => return Err(send_error(&mut ctl, wire_code(&e), format!("reading the request: {e}"))),
    };
    let protos = match validate(&req) {
        Ok(p) => p,
        Err((code, msg)) => return Err(send_error(&mut ctl, code, msg)),
    };
    let _slot = take_slot(shared, &mut ctl, &req)?;
    if shared.cfg.log {
        eprintln!("gridperf serve: {peer}: {} {} up to {} B", req.kind, req.protos.join(","), req.max_size);
    }
    let result = if req.kind == "fanout" {
        run_fanout(shared, &mut ctl, peer, &req)
    } else if req.kind == "stream" {
        run_stream(shared, &mut ctl, peer, &req)
    } else {
        run_test(shared, &mut ctl, peer, &req, &protos)
    };
    shared.tests_done.fetch_add(1, Ordering::SeqCst);
    match result {
        Ok(()) => Ok(()),
        Err(Fail::Untold(msg)) => {
            let code = if shared.stopping() { ErrorCode::Busy } else { ErrorCode::Internal };
            Err(send_error(&mut ctl, code, msg))
        }
        Err(told) => Err(told),
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

/// A random number for a test's data connections (std's hasher keys are
/// random per instance); not a secret against an eavesdropper: it keeps a
/// stray connection from being taken for the client's.
fn new_token(peer: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u16(peer.port());
    h.finish() | 1
}

/// A stream test (`gridperf stream`): open the data sockets, say Ready, run
/// both ends' part, then answer Finish with the agent's record.
fn run_stream(shared: &Shared, ctl: &mut TcpStream, peer: SocketAddr, req: &TestRequest) -> Result<(), Fail> {
    let Some(spec) = &req.stream else {
        return Err(send_error(ctl, ErrorCode::BadMessage, "a stream test without its settings".into()));
    };
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
    let (listener, udp) = if spec.proto == "udp" {
        (None, stream::agent_udp(local_ip, spec).map_err(|e| format!("UDP sockets: {e}"))?)
    } else {
        (Some(stream::agent_listener(local_ip, spec).map_err(|e| format!("data listener: {e}"))?), Vec::new())
    };
    let token = new_token(peer);
    let mut agent = env::end_info(None, false);
    wire::write_msg(
        ctl,
        &AgentMsg::Ready {
            tcp_port: listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.port()),
            udp_port: None,
            token,
            agent: agent.clone(),
            udp_ports: udp.iter().filter_map(|s| s.local_addr().ok()).map(|a| a.port()).collect(),
        },
    )
    .map_err(|e| e.to_string())?;
    let side = stream::AgentSide {
        ctl: &mut *ctl,
        spec,
        token,
        peer_ip,
        listener,
        udp,
        control_timeout: shared.cfg.control_timeout,
        stop: &shared.stop,
        ipv6: local_ip.is_ipv6(),
        break_after: shared.cfg.faults.break_stream_after,
    };
    let sockets = match side.run() {
        Ok(s) => s,
        Err(m) => {
            let code = if shared.stopping() { ErrorCode::Busy } else { ErrorCode::Internal };
            return Err(send_error(ctl, code, m));
        }
    };
    match ctl::read_msg_within::<ClientMsg>(ctl, shared.cfg.control_timeout) {
        Ok(ClientMsg::Finish) => {
            agent.sockets = sockets;
            wire::write_msg(ctl, &AgentMsg::Report { agent }).map_err(|e| e.to_string().into())
        }
        Ok(ClientMsg::Abort { reason }) => Err(Fail::Told(format!("client aborted: {reason}"))),
        Ok(other) => Err(send_error(ctl, ErrorCode::BadMessage, format!("expected finish, got {other:?}"))),
        Err(e) => Err(send_error(ctl, wire_code(&e), format!("waiting for finish: {e}"))),
    }
}

/// Consumer threads a fanout test may have at once.
const FANOUT_MAX_CONSUMERS: usize = 64;

/// A fanout point's consumers: every data connection the client opens gets
/// a thread that echoes the requests, until the client says Finish.
fn run_fanout(shared: &Shared, ctl: &mut TcpStream, peer: SocketAddr, req: &TestRequest) -> Result<(), Fail> {
    let Some(f) = req.fanout.clone() else {
        return Err(send_error(ctl, ErrorCode::BadMessage, "a fanout test without its settings".into()));
    };
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
    let listener = {
        let addr = SocketAddr::new(local_ip, 0);
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(|e| e.to_string())?;
        if let Some(b) = f.buffer {
            let _ = gridperf_sys::set_sndbuf(&sock, b as usize);
            let _ = gridperf_sys::set_rcvbuf(&sock, b as usize);
        }
        sock.bind(&addr.into()).map_err(|e| e.to_string())?;
        sock.listen(128).map_err(|e| e.to_string())?;
        sock.set_nonblocking(true).map_err(|e| e.to_string())?;
        TcpListener::from(sock)
    };
    let token = new_token(peer);
    wire::write_msg(
        ctl,
        &AgentMsg::Ready {
            tcp_port: listener.local_addr().ok().map(|a| a.port()),
            udp_port: None,
            token,
            agent: env::end_info(None, false),
            udp_ports: Vec::new(),
        },
    )
    .map_err(|e| e.to_string())?;
    let idle = Duration::from_millis(f.idle_ms.clamp(100, 600_000));
    let mut consumers: Vec<thread::JoinHandle<()>> = Vec::new();
    // until Finish: accept the client's data connections, a consumer for each
    let until_quiet = || Instant::now() + shared.cfg.control_timeout + idle;
    let mut deadline = until_quiet();
    loop {
        if shared.stopping() {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        if Instant::now() > deadline {
            return Err(Fail::Untold("the fanout client went silent".into()));
        }
        consumers.retain(|h| !h.is_finished());
        let fds = [listener.as_raw_fd(), ctl.as_raw_fd()];
        let ready = gridperf_sys::poll_readable(&fds, 100).map_err(|e| e.to_string())?;
        if ready[1] {
            match ctl::read_msg_within::<ClientMsg>(ctl, shared.cfg.control_timeout) {
                Ok(ClientMsg::Finish) => {
                    return wire::write_msg(ctl, &AgentMsg::Report { agent: env::end_info(None, false) })
                        .map_err(|e| e.to_string().into())
                }
                Ok(ClientMsg::Abort { reason }) => return Err(Fail::Told(format!("client aborted: {reason}"))),
                Ok(other) => return Err(send_error(ctl, ErrorCode::BadMessage, format!("unexpected {other:?}"))),
                Err(e) => return Err(send_error(ctl, wire_code(&e), format!("during the fanout test: {e}"))),
            }
        }
        if !ready[0] {
            continue;
        }
        let Ok((mut s, from)) = listener.accept() else { continue };
        if from.ip().to_canonical() != peer_ip || consumers.len() >= FANOUT_MAX_CONSUMERS {
            continue;
        }
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut hello = [0u8; 13];
        if s.read_exact(&mut hello).is_err() || hello[..8] != token.to_be_bytes() || hello[8] != 4 {
            continue;
        }
        deadline = until_quiet();
        let f = f.clone();
        consumers.push(thread::spawn(move || {
            let _ = s.set_nodelay(f.nodelay);
            let _ = s.set_read_timeout(Some(idle));
            let _ = s.set_write_timeout(Some(idle));
            let mut buf = vec![0u8; f.size as usize];
            for _ in 0..f.messages {
                if s.read_exact(&mut buf).is_err() || std::io::Write::write_all(&mut s, &buf).is_err() {
                    return;
                }
            }
            // the client closes when its repetition is done
            let _ = s.read(&mut buf);
        }));
    }
}

/// The longest per-message timeout the agent honours (the client's --timeout).
pub const MAX_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

fn run_test(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    req: &TestRequest,
    protos: &[Proto],
) -> Result<(), Fail> {
    let mut pinned = None;
    if let Some(cpu) = req.cpu {
        if let Err(e) = gridperf_sys::set_thread_affinity(&[cpu]) {
            let msg = format!("cannot pin the agent to CPU {cpu}: {e} (the agent's host has CPUs {:?})", env::cpus());
            return Err(send_error(ctl, ErrorCode::Unsupported, msg));
        }
        pinned = Some(vec![cpu]);
    }
    // an IPv4 client on a dual-stack listener shows as ::ffff:a.b.c.d: use
    // the plain IPv4 form, which works whatever net.ipv6.bindv6only says
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
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
        let Some(port) = req.udp_port else {
            return Err(send_error(ctl, ErrorCode::BadMessage, "UDP requested without the client's UDP port".into()));
        };
        let s = UdpSocket::bind((local_ip, 0)).map_err(|e| format!("UDP socket: {e}"))?;
        if let Err(m) = apply_buffers(&s, req) {
            return Err(send_error(ctl, ErrorCode::Unsupported, m));
        }
        s.connect((peer_ip, port)).map_err(|e| format!("UDP connect: {e}"))?;
        Some(s)
    } else {
        None
    };
    let token = new_token(peer);
    let mut agent = env::end_info(pinned, req.busy_poll);
    wire::write_msg(
        ctl,
        &AgentMsg::Ready {
            tcp_port: listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.port()),
            udp_port: udp.as_ref().and_then(|s| s.local_addr().ok()).map(|a| a.port()),
            token,
            agent: agent.clone(),
            udp_ports: Vec::new(),
        },
    )
    .map_err(|e| e.to_string())?;

    // the client's TCP data connections: token, then one byte naming the protocol
    let mut socks: Vec<DataSock> = Vec::new();
    if let Some(l) = &listener {
        let deadline = Instant::now() + shared.cfg.control_timeout;
        let mut step_waiting = false;
        while socks.len() < streams.len() {
            if Instant::now() >= deadline || shared.stopping() {
                return Err(format!(
                    "the client opened {} of {} data connections within {:.0} s",
                    socks.len(),
                    streams.len(),
                    shared.cfg.control_timeout.as_secs_f64()
                )
                .into());
            }
            // watch the control connection too, for a client that hangs up;
            // once its first step has arrived there, only the listener
            let fds = [l.as_raw_fd(), ctl.as_raw_fd()];
            let ready = gridperf_sys::poll_readable(&fds[..if step_waiting { 1 } else { 2 }], 100)
                .map_err(|e| e.to_string())?;
            if ready.get(1) == Some(&true) {
                match ctl.peek(&mut [0u8; 1]) {
                    Ok(0) | Err(_) => {
                        return Err(Fail::Told("the client left before opening its data connections".into()))
                    }
                    Ok(_) => step_waiting = true,
                }
            }
            if !ready[0] {
                continue;
            }
            let (mut s, from) = match l.accept() {
                Ok(x) => x,
                Err(_) => {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            if from.ip().to_canonical() != peer_ip {
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
            if let Err(m) = apply_buffers(&s, req) {
                return Err(send_error(ctl, ErrorCode::Unsupported, m));
            }
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
    let timeout = Duration::from_millis(req.timeout_ms.max(1)).min(MAX_MESSAGE_TIMEOUT);
    for s in &socks {
        s.set_mode(req.busy_poll, crate::engines::echo::AGENT_POLL_SLICE).map_err(|e| e.to_string())?;
    }
    // wait longer than the client does, so that the client reports first
    let idle_limit = timeout * 2 + Duration::from_secs(5);
    let mut buf = vec![0u8; (req.max_size as usize).max(65_536)];
    loop {
        if shared.stopping() {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        // between steps the client answers at once: the control timeout applies
        match ctl::read_msg_within::<ClientMsg>(ctl, shared.cfg.control_timeout) {
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
                    control_timeout: shared.cfg.control_timeout,
                    stop: &shared.stop,
                    faults: shared.cfg.faults,
                    last_look: Instant::now(),
                };
                match step.run(sock, &mut buf) {
                    Ok(figures) => wire::write_msg(ctl, &AgentMsg::StepDone { figures }).map_err(|e| e.to_string())?,
                    Err(StepError::Control(m)) => return Err(m.into()),
                    Err(StepError::Stopped) => {
                        return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()))
                    }
                    Err(e) => return Err(send_error(ctl, ErrorCode::Timeout, format!("{proto} {size} B: {e}"))),
                }
            }
            Ok(ClientMsg::Finish) => {
                for s in &socks {
                    let fd = RawFdRef(s.raw_fd());
                    agent.sockets.push(env::socket_info(&fd, s.proto(), ipv6, req.sndbuf, req.rcvbuf));
                }
                return wire::write_msg(ctl, &AgentMsg::Report { agent: agent.clone() })
                    .map_err(|e| e.to_string().into());
            }
            Ok(ClientMsg::Abort { reason }) => return Err(Fail::Told(format!("client aborted: {reason}"))),
            Ok(other) => return Err(send_error(ctl, ErrorCode::BadMessage, format!("unexpected {other:?}"))),
            Err(e) => return Err(send_error(ctl, wire_code(&e), format!("between steps: {e}"))),
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
