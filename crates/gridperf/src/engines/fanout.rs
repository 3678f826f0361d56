//! `gridperf fanout`: the many-to-one producer/consumer benchmark of the
//! Gigabit/Myrinet study (Costa et al., Measuring TCP bandwidth on top of a Gigabit and Myrinet network, 2009: docs/sources.md). A server (the producer)
//! sends `messages` requests of `size` bytes to each of `nodes` consumers,
//! then waits for one acknowledgment (the request echoed) per request; each
//! consumer echoes every request. Bandwidth = 2 x MAX x messages x nodes x
//! size / time over MAX repetitions.
//!
//! The document's original version deadlocks once both sides' socket
//! buffers fill: the server blocks sending to a consumer whose receive
//! buffer is full, while that consumer blocks sending acknowledgments the
//! server does not read. A watchdog sees no progress on any socket for a
//! while, records who was blocked in which call with the bytes queued in
//! every socket (SIOCOUTQ / SIOCINQ), tears the connections down (which
//! wakes every blocked call) and reports the point as deadlocked.
//!
//! The consumers are threads of this process (on loopback, or in a lab's
//! hosts), each with its own connection, or `gridperf serve` agents. The
//! results' types are in `gridperf_core::model::fanout`.

use crate::datapath::write_hello;
use crate::error::{Error, Result};
use crate::runner::{Deadlines, Session, Target};
use gridperf_core::analysis::stats::Summary;
use gridperf_core::model::{bandwidth_bps, Blocked, Deadlock, FanoutPoint, Queued, Variant};
use gridperf_core::wire::{DataHello, DataKind, FanoutSpec, Test};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Limits a sweep is held to (the agent holds its consumers to the same).
pub use gridperf_core::wire::{
    FANOUT_MAX_MESSAGES as MAX_MESSAGES, FANOUT_MAX_NODES as MAX_NODES, FANOUT_MAX_SIZE as MAX_SIZE,
};
/// Outstanding requests per consumer the drain-thread variant allows.
pub const DRAIN_THREAD_QUEUE: u64 = 64;

#[derive(Debug, Clone)]
pub struct FanoutOptions {
    pub variants: Vec<Variant>,
    pub messages: Vec<u64>,
    pub sizes: Vec<u64>,
    pub nodes: Vec<u32>,
    /// MAX: repetitions per point.
    pub repeat: u32,
    /// No progress on any socket for this long is a deadlock.
    pub watchdog: Duration,
    /// SO_SNDBUF and SO_RCVBUF on every socket (small buffers deadlock sooner).
    pub buffer: Option<u64>,
    /// Across a lab: the server in one host, the consumers in others (in
    /// turn); None: everything on this host's loopback.
    pub place: Option<Place>,
    /// Consumers on gridperf agents (`gridperf serve`), in turn; empty:
    /// consumer threads of this process.
    pub agents: Vec<std::net::SocketAddr>,
    pub deadlines: Option<Deadlines>,
}

/// Where the ends are in a lab: network namespaces by name.
#[derive(Debug, Clone)]
pub struct Place {
    pub server_netns: String,
    pub server_addr: std::net::Ipv4Addr,
    pub consumer_netns: Vec<String>,
}

// what a side is doing, for the watchdog's evidence (0: not started)
const SENDING: u8 = 1;
const RECEIVING: u8 = 2;
const POLLING: u8 = 3;
const DONE: u8 = 4;
const REMOTE: u8 = 5;

/// A side's state: what it does and with which node (the server) or 0.
#[derive(Default)]
struct State {
    what: AtomicU8,
    node: AtomicU64,
}

impl State {
    fn set(&self, what: u8, node: usize) {
        self.node.store(node as u64, Ordering::Relaxed);
        self.what.store(what, Ordering::Relaxed);
    }

    fn call(&self, server: bool) -> String {
        let node = self.node.load(Ordering::Relaxed);
        let peer = if server { format!("node {node}") } else { "the server".to_string() };
        match self.what.load(Ordering::Relaxed) {
            SENDING => format!("send to {peer}"),
            RECEIVING => format!("recv from {peer}"),
            POLLING => "poll (draining)".into(),
            DONE => "done".into(),
            REMOTE => "unknown (a remote agent: its calls are not seen from here)".into(),
            _ => "idle".into(),
        }
    }
}

/// Everything a repetition shares with the watchdog.
struct Shared {
    progress: AtomicU64,
    server: State,
    nodes: Vec<State>,
    sent: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
    torn_down: AtomicBool,
}

fn set_buffers(s: &TcpStream, buffer: Option<u64>, nodelay: bool) -> std::io::Result<()> {
    if let Some(b) = buffer {
        gridperf_sys::set_sndbuf(s, b as usize)?;
        gridperf_sys::set_rcvbuf(s, b as usize)?;
    }
    s.set_nodelay(nodelay)
}

/// Moves `len` bytes with `op` (given the offset so far), counting progress
/// for the watchdog; `eof` is the error for a call that moved nothing.
fn counted(
    len: usize,
    sh: &Shared,
    eof: ErrorKind,
    mut op: impl FnMut(usize) -> std::io::Result<usize>,
) -> std::io::Result<()> {
    let mut off = 0;
    while off < len {
        match op(off) {
            Ok(0) => return Err(eof.into()),
            Ok(n) => {
                off += n;
                sh.progress.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf`, counting progress.
fn send_all(s: &mut TcpStream, buf: &[u8], sh: &Shared) -> std::io::Result<()> {
    counted(buf.len(), sh, ErrorKind::WriteZero, |off| s.write(&buf[off..]))
}

fn recv_exact(s: &mut TcpStream, buf: &mut [u8], sh: &Shared) -> std::io::Result<()> {
    let len = buf.len();
    counted(len, sh, ErrorKind::UnexpectedEof, |off| s.read(&mut buf[off..]))
}

/// A consumer: echo every request, blocking, as the document's clients do.
fn consumer(mut s: TcpStream, k: usize, messages: u64, size: usize, sh: Arc<Shared>) -> std::io::Result<()> {
    let mut buf = vec![0u8; size];
    for _ in 0..messages {
        sh.nodes[k].set(RECEIVING, 0);
        recv_exact(&mut s, &mut buf, &sh)?;
        sh.nodes[k].set(SENDING, 0);
        send_all(&mut s, &buf, &sh)?;
    }
    sh.nodes[k].set(DONE, 0);
    Ok(())
}

/// Reads whatever acknowledgment bytes are waiting on each connection
/// (non-blocking); returns the bytes read. `partial` carries each
/// connection's bytes of an acknowledgment not yet complete.
fn drain_all(
    conns: &mut [TcpStream],
    partial: &mut [u64],
    size: u64,
    sh: &Shared,
    buf: &mut [u8],
) -> std::io::Result<u64> {
    let mut got = 0;
    for (k, c) in conns.iter_mut().enumerate() {
        loop {
            match c.read(buf) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    got += n as u64;
                    sh.progress.fetch_add(n as u64, Ordering::Relaxed);
                    partial[k] += n as u64;
                    sh.acked[k].fetch_add(partial[k] / size, Ordering::Relaxed);
                    partial[k] %= size;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(got)
}

/// The server's part of one repetition.
// Long by design: one arm per variant of the benchmark, each the server's
// whole repetition as the variant's description reads.
fn server(
    variant: Variant,
    conns: &mut [TcpStream],
    messages: u64,
    size: usize,
    sh: &Arc<Shared>,
    teardown: &(dyn Fn() + Sync),
) -> std::io::Result<()> {
    let req: Vec<u8> = (0..size).map(gridperf_sys::pattern_byte).collect();
    let nodes = conns.len();
    let want = messages * size as u64;
    match variant {
        Variant::Original => {
            for _ in 0..messages {
                for (k, c) in conns.iter_mut().enumerate() {
                    sh.server.set(SENDING, k);
                    send_all(c, &req, sh)?;
                    sh.sent[k].fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut buf = vec![0u8; size];
            for (k, c) in conns.iter_mut().enumerate() {
                sh.server.set(RECEIVING, k);
                for _ in 0..messages {
                    recv_exact(c, &mut buf, sh)?;
                    sh.acked[k].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Variant::Drain | Variant::Nodelay => {
            for c in conns.iter() {
                c.set_nonblocking(true)?;
            }
            let mut partial = vec![0u64; nodes];
            let mut buf = vec![0u8; 1 << 16];
            for _ in 0..messages {
                for k in 0..nodes {
                    let mut off = 0;
                    while off < size {
                        sh.server.set(SENDING, k);
                        match conns[k].write(&req[off..]) {
                            Ok(n) => {
                                off += n;
                                sh.progress.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                // the send would block: read what the consumers sent back
                                sh.server.set(POLLING, k);
                                if drain_all(conns, &mut partial, size as u64, sh, &mut buf)? == 0 {
                                    // nothing to read: wait for an acknowledgment or for room to send
                                    let fds: Vec<i32> = conns.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
                                    let w = std::os::fd::AsRawFd::as_raw_fd(&conns[k]);
                                    let _ = gridperf_sys::poll_read_or_write(&fds, w, 10);
                                }
                            }
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    sh.sent[k].fetch_add(1, Ordering::Relaxed);
                }
            }
            // the rest of the acknowledgments
            let fds: Vec<i32> = conns.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
            while (0..nodes).any(|k| sh.acked[k].load(Ordering::Relaxed) < messages) {
                if sh.torn_down.load(Ordering::Relaxed) {
                    return Err(ErrorKind::ConnectionAborted.into());
                }
                sh.server.set(RECEIVING, 0);
                if drain_all(conns, &mut partial, size as u64, sh, &mut buf)? == 0 {
                    let _ = gridperf_sys::poll_readable(&fds, 10);
                }
            }
            let _ = want;
        }
        Variant::DrainThread => {
            // the drainer reads acknowledgments from every consumer and frees
            // a slot of the bounded queue of outstanding requests per ack
            let readers: Vec<TcpStream> = conns.iter().map(|c| c.try_clone()).collect::<std::io::Result<_>>()?;
            let queue = Arc::new((Mutex::new(vec![0u64; nodes]), Condvar::new()));
            let q2 = queue.clone();
            let sh2 = sh.clone();
            let drainer = std::thread::spawn(move || -> std::io::Result<()> {
                // blocking sockets (O_NONBLOCK would be shared with the
                // sender's descriptors): poll, then one read per readable one
                let mut readers = readers;
                let mut partial = vec![0u64; nodes];
                let mut buf = vec![0u8; 1 << 16];
                let fds: Vec<i32> = readers.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
                while (0..nodes).any(|k| sh2.acked[k].load(Ordering::Relaxed) < messages) {
                    if sh2.torn_down.load(Ordering::Relaxed) {
                        return Err(ErrorKind::ConnectionAborted.into());
                    }
                    let ready = gridperf_sys::poll_readable(&fds, 10)?;
                    let mut freed = vec![0u64; nodes];
                    for (k, r) in ready.iter().enumerate() {
                        if !r {
                            continue;
                        }
                        match readers[k].read(&mut buf) {
                            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                            Ok(n) => {
                                sh2.progress.fetch_add(n as u64, Ordering::Relaxed);
                                partial[k] += n as u64;
                                freed[k] = partial[k] / size as u64;
                                partial[k] %= size as u64;
                                sh2.acked[k].fetch_add(freed[k], Ordering::Relaxed);
                            }
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let (lock, cv) = &*q2;
                    let mut out = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    for k in 0..nodes {
                        out[k] = out[k].saturating_sub(freed[k]);
                    }
                    cv.notify_all();
                }
                Ok(())
            });
            let mut result = Ok(());
            'send: for _ in 0..messages {
                for (k, c) in conns.iter_mut().enumerate() {
                    {
                        let (lock, cv) = &*queue;
                        let mut out = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        while out[k] >= DRAIN_THREAD_QUEUE {
                            sh.server.set(POLLING, k);
                            if sh.torn_down.load(Ordering::Relaxed) || drainer.is_finished() {
                                result = Err(ErrorKind::ConnectionAborted.into());
                                break 'send;
                            }
                            out = cv
                                .wait_timeout(out, Duration::from_millis(10))
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .0;
                        }
                        out[k] += 1;
                    }
                    sh.server.set(SENDING, k);
                    if let Err(e) = send_all(c, &req, sh) {
                        result = Err(e);
                        break 'send;
                    }
                    sh.sent[k].fetch_add(1, Ordering::Relaxed);
                }
            }
            if result.is_err() {
                teardown();
            }
            sh.server.set(RECEIVING, 0);
            let drained = drainer.join().unwrap_or_else(|_| Err(ErrorKind::Other.into()));
            result?;
            drained?;
        }
    }
    sh.server.set(DONE, 0);
    Ok(())
}

fn buffered_socket(buffer: Option<u64>) -> std::io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    if let Some(b) = buffer {
        gridperf_sys::set_sndbuf(&s, b as usize)?;
        gridperf_sys::set_rcvbuf(&s, b as usize)?;
    }
    Ok(s)
}

/// Connects `nodes` consumers to a fresh listener: on loopback, or across a
/// lab (a socket made in a namespace stays in it, whichever thread uses it).
fn connect(
    nodes: u32,
    buffer: Option<u64>,
    nodelay: bool,
    place: Option<&Place>,
) -> std::io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    let listen = move |ip: std::net::Ipv4Addr| -> std::io::Result<TcpListener> {
        let sock = buffered_socket(buffer)?;
        sock.bind(&std::net::SocketAddr::from((ip, 0)).into())?;
        sock.listen(nodes as i32 + 8)?;
        Ok(sock.into())
    };
    let l = match place {
        Some(p) => {
            let ip = p.server_addr;
            gridperf_sys::in_netns(&p.server_netns, move || listen(ip))?
        }
        None => listen(std::net::Ipv4Addr::LOCALHOST)?,
    };
    let at = l.local_addr()?;
    let dial = move || -> std::io::Result<TcpStream> {
        let s = buffered_socket(buffer)?;
        s.connect_timeout(&at.into(), Duration::from_secs(5))?;
        Ok(s.into())
    };
    l.set_nonblocking(true)?;
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for k in 0..nodes as usize {
        let c = match place {
            Some(p) if !p.consumer_netns.is_empty() => {
                gridperf_sys::in_netns(&p.consumer_netns[k % p.consumer_netns.len()], dial)?
            }
            _ => dial()?,
        };
        // the consumer's connection is established: its accept is waiting
        let until = Instant::now() + Duration::from_secs(5);
        let a = loop {
            match l.accept() {
                Ok((a, _)) => break a,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(e),
            }
        };
        a.set_nonblocking(false)?;
        set_buffers(&c, None, nodelay)?;
        set_buffers(&a, None, nodelay)?;
        clients.push(c);
        servers.push(a);
    }
    Ok((servers, clients))
}

/// One repetition: Ok(time) or the deadlock's evidence.
/// Opens `nodes` connections to the agents' consumers, in turn.
fn connect_remote(
    nodes: u32,
    buffer: Option<u64>,
    nodelay: bool,
    targets: &[Consumer],
) -> std::io::Result<Vec<TcpStream>> {
    (0..nodes as usize)
        .map(|k| {
            let (addr, token) = targets[k % targets.len()];
            let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
            if let Some(b) = buffer {
                gridperf_sys::set_sndbuf(&s, b as usize)?;
                gridperf_sys::set_rcvbuf(&s, b as usize)?;
            }
            s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
            let mut c: TcpStream = s.into();
            c.set_nodelay(nodelay)?;
            write_hello(&mut c, &DataHello::new(token, DataKind::Fanout, k as u32))?;
            Ok(c)
        })
        .collect()
}

fn repetition(
    variant: Variant,
    nodes: u32,
    messages: u64,
    size: u64,
    o: &FanoutOptions,
    rep: u32,
    remote: &[Consumer],
) -> std::result::Result<Duration, (Option<Box<Deadlock>>, String)> {
    let nodelay = variant == Variant::Nodelay;
    let (mut conns, clients) = if remote.is_empty() {
        connect(nodes, o.buffer, nodelay, o.place.as_ref()).map_err(|e| (None, format!("connecting: {e}")))?
    } else {
        let c = connect_remote(nodes, o.buffer, nodelay, remote)
            .map_err(|e| (None, format!("connecting to the agents' consumers: {e}")))?;
        (c, Vec::new())
    };
    let n = nodes as usize;
    let sh = Arc::new(Shared {
        progress: AtomicU64::new(0),
        server: State::default(),
        nodes: (0..n).map(|_| State::default()).collect(),
        sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
        acked: (0..n).map(|_| AtomicU64::new(0)).collect(),
        torn_down: AtomicBool::new(false),
    });
    if !remote.is_empty() {
        for st in &sh.nodes {
            st.set(REMOTE, 0);
        }
    }
    // clones for the watchdog: the queue sizes, and shutdown to wake every blocked call
    let all: Vec<(String, TcpStream)> = conns
        .iter()
        .enumerate()
        .map(|(k, c)| (format!("server->node {k}"), c.try_clone()))
        .chain(clients.iter().enumerate().map(|(k, c)| (format!("node {k}->server"), c.try_clone())))
        .filter_map(|(name, c)| c.ok().map(|c| (name, c)))
        .collect();
    let all = Arc::new(all);
    let teardown = {
        let all = all.clone();
        let sh = sh.clone();
        move || {
            sh.torn_down.store(true, Ordering::Relaxed);
            for (_, c) in all.iter() {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    };
    let consumers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(k, c)| {
            let sh = sh.clone();
            std::thread::spawn(move || consumer(c, k, messages, size as usize, sh))
        })
        .collect();
    // the watchdog
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let watchdog = {
        let (sh, done, all, td) = (sh.clone(), done.clone(), all.clone(), teardown.clone());
        let limit = o.watchdog;
        std::thread::spawn(move || -> Option<Deadlock> {
            let mut last = sh.progress.load(Ordering::Relaxed);
            let mut since = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                let now = sh.progress.load(Ordering::Relaxed);
                if now != last {
                    last = now;
                    since = Instant::now();
                    continue;
                }
                if since.elapsed() < limit {
                    continue;
                }
                // no byte moved anywhere for `limit`: the evidence, then the teardown
                let mut blocked = vec![Blocked { who: "server".into(), call: sh.server.call(true) }];
                for (k, st) in sh.nodes.iter().enumerate() {
                    blocked.push(Blocked { who: format!("node {k}"), call: st.call(false) });
                }
                let queues = all
                    .iter()
                    .map(|(name, c)| Queued {
                        socket: name.clone(),
                        outq: gridperf_sys::outq(c).unwrap_or(0) as u64,
                        inq: gridperf_sys::inq(c).unwrap_or(0) as u64,
                    })
                    .collect();
                let d = Deadlock {
                    after_ns: (since - start).as_nanos() as u64,
                    repetition: rep,
                    sent: sh.sent.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
                    acked: sh.acked.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
                    blocked,
                    queues,
                };
                td();
                return Some(d);
            }
            None
        })
    };
    let result = server(variant, &mut conns, messages, size as usize, &sh, &teardown);
    let elapsed = start.elapsed();
    if result.is_err() {
        teardown();
    }
    let consumed: Vec<_> = consumers.into_iter().map(|h| h.join()).collect();
    done.store(true, Ordering::Relaxed);
    let deadlock = watchdog.join().ok().flatten();
    if let Some(d) = deadlock {
        return Err((Some(Box::new(d)), "deadlock".into()));
    }
    result.map_err(|e| (None, format!("server: {e}")))?;
    for c in consumed {
        match c {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err((None, format!("consumer: {e}"))),
            Err(_) => return Err((None, "a consumer thread panicked".into())),
        }
    }
    Ok(elapsed)
}

/// How long a point waits in an agent's queue at least: long enough for
/// the previous point's session to close there.
pub const OWN_QUEUE: Duration = Duration::from_secs(5);

/// An agent's consumers: where to connect, and the token to say first.
type Consumer = (std::net::SocketAddr, u64);

/// Opens a fanout test on each agent: their consumers' ports and tokens.
fn open_agents(o: &FanoutOptions, messages: u64, size: u64, nodelay: bool) -> Result<(Vec<Session>, Vec<Consumer>)> {
    let deadlines = o.deadlines.unwrap_or(Deadlines {
        connect: Duration::from_secs(5),
        control: Duration::from_secs(10),
        message: Duration::from_secs(1),
        queue: Duration::ZERO,
    });
    // the previous point's session may still be closing at the agent when
    // this one asks (it frees its slot a moment after the client's finish):
    // wait in the agent's queue for it rather than be refused as busy
    let deadlines = Deadlines { queue: deadlines.queue.max(OWN_QUEUE), ..deadlines };
    let mut sessions = Vec::new();
    let mut targets = Vec::new();
    for &a in &o.agents {
        // reached as every test reaches its agent (hello, the key it asks for)
        let mut s = Target::remote(a).open(deadlines)?.session;
        let ready = s.request(Test::Fanout(FanoutSpec {
            size,
            messages,
            buffer: o.buffer,
            nodelay,
            idle_ms: (o.watchdog * 2 + Duration::from_secs(5)).as_millis() as u64,
        }))?;
        let port = ready.tcp_port.ok_or_else(|| Error::network(format!("the agent at {a} opened no data port")))?;
        targets.push((std::net::SocketAddr::new(a.ip(), port), ready.token));
        sessions.push(s);
    }
    Ok((sessions, targets))
}

/// Measures one point: MAX repetitions, stopping at the first deadlock.
pub fn point(variant: Variant, nodes: u32, messages: u64, size: u64, o: &FanoutOptions) -> FanoutPoint {
    let mut times = Vec::new();
    let mut deadlock = None;
    let mut error = None;
    let (mut sessions, remote) = match open_agents(o, messages, size, variant == Variant::Nodelay) {
        Ok(x) => x,
        Err(e) => (Vec::new(), {
            error = Some(format!("opening the agents' consumers: {e}"));
            Vec::new()
        }),
    };
    let reps = if error.is_some() { 0 } else { o.repeat };
    for rep in 0..reps {
        match repetition(variant, nodes, messages, size, o, rep, &remote) {
            Ok(t) => times.push(t.as_nanos() as u64),
            Err((d, e)) => {
                deadlock = d.map(|d| *d);
                if deadlock.is_none() {
                    error = Some(e);
                }
                break;
            }
        }
    }
    for s in &mut sessions {
        let _ = s.finish();
    }
    let complete = times.len() == o.repeat as usize;
    let total: u64 = times.iter().sum();
    FanoutPoint {
        variant,
        nodes,
        messages,
        size,
        repetitions: times.len() as u32,
        time: Summary::from_samples(&times),
        bandwidth_bps: (complete && total > 0)
            .then(|| bandwidth_bps(o.repeat, messages, nodes, size, Duration::from_nanos(total))),
        times_ns: times,
        deadlock,
        error,
    }
}

/// Checks the options a user gave.
pub fn validate(o: &FanoutOptions) -> Result<()> {
    if o.variants.is_empty() {
        return Err(Error::usage(format!("--variant: give one of {}", Variant::VALID)));
    }
    if let Some(m) = o.messages.iter().find(|&&m| m == 0 || m > MAX_MESSAGES) {
        return Err(Error::usage(format!("--messages {m}: give 1 to {MAX_MESSAGES}")));
    }
    if let Some(s) = o.sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        return Err(Error::usage(format!("--size {s}: give 1 byte to {MAX_SIZE} bytes")));
    }
    if let Some(n) = o.nodes.iter().find(|&&n| !(1..=MAX_NODES).contains(&n)) {
        return Err(Error::usage(format!("--nodes {n}: give 1 to {MAX_NODES} consumers")));
    }
    // two sockets per consumer, plus the clones the watchdog keeps
    let need = 4 * u64::from(o.nodes.iter().copied().max().unwrap_or(1)) + 64;
    if let Some(have) = gridperf_sys::open_files_limit() {
        if need > have {
            return Err(Error::usage(format!(
                "--nodes {}: needs about {need} file descriptors, and this process may open {have} (ulimit -n)",
                o.nodes.iter().max().unwrap_or(&0)
            )));
        }
    }
    if o.repeat == 0 || o.repeat > 10_000 {
        return Err(Error::usage("--repeat takes 1 to 10000"));
    }
    if o.watchdog < Duration::from_millis(100) {
        return Err(Error::usage("--watchdog: at least 100ms"));
    }
    Ok(())
}

/// The sweep: every variant x nodes x size x messages, in that order.
pub fn run(o: &FanoutOptions, progress: &mut dyn FnMut(usize, usize, &FanoutPoint)) -> Result<Vec<FanoutPoint>> {
    validate(o)?;
    // an agent that cannot be reached fails the sweep at once, within the
    // connect deadline, rather than every point in turn
    if !o.agents.is_empty() {
        let (mut sessions, _) = open_agents(o, 1, 1, false)?;
        for s in &mut sessions {
            s.finish()?;
        }
    }
    let total = o.variants.len() * o.nodes.len() * o.sizes.len() * o.messages.len();
    let mut out = Vec::with_capacity(total);
    for &v in &o.variants {
        for &n in &o.nodes {
            for &s in &o.sizes {
                for &m in &o.messages {
                    let p = point(v, n, m, s, o);
                    progress(out.len() + 1, total, &p);
                    out.push(p);
                }
            }
        }
    }
    Ok(out)
}
