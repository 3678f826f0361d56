//! `gridperf serve`: the agent. It answers the control channel, opens the
//! data sockets of each test, runs its side of it, and returns its own
//! figures.
//!
//! One thread per control connection (this file: the listeners, the
//! connection count, shutdown). Tests take a slot ([`slots`]); the
//! conversation up to the test is in [`session`], the data connections are
//! accepted in one loop ([`data`]), and each kind of test has a file of its
//! own: [`echo`] (rtt, transfer), [`stream`], [`fanout`]. Any failure of
//! one client ends that client's connection only; the accept loop goes on.

pub mod conns;
mod converse;
pub(crate) mod copy;
mod data;
pub mod echo;
mod fanout;
pub mod metrics;
mod reply;
mod session;
mod slots;
mod stream;

pub use echo::Faults;

use gridperf_core::wire::{self, AgentMsg, ErrorCode};
use slots::Slots;
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Control connections open at once from one address: a client that
    /// opens many (and stays silent) cannot keep every other one out.
    pub max_per_address: usize,
    /// Whether a client may ask the agent to busy-poll (it burns a CPU for
    /// the whole test).
    pub allow_busy_poll: bool,
    /// The keys a client must prove it holds (serve --auth); None: anyone.
    pub auth: Option<Arc<Vec<gridperf_core::auth::Key>>>,
    /// The address blocks clients may come from (serve --allow); empty: any.
    pub allow: Vec<gridperf_core::auth::Cidr>,
    /// The longest a client may keep the agent waiting on a test's next
    /// message, whatever it asked for (its per-message timeout, a fanout
    /// consumer's idle time).
    pub max_idle: Duration,
    /// The site's limits on what a test may ask for (serve --max-*).
    pub limits: SiteLimits,
    /// The directory copies read from and write into (serve --root); None: no copies.
    pub root: Option<std::path::PathBuf>,
    /// Copies may only read (serve --read-only).
    pub read_only: bool,
    /// Copies must be encrypted (serve --encrypt).
    pub encrypt: bool,
    /// Partial files of unfinished copies untouched this long are removed
    /// beneath the root (at the start, then hourly); None keeps them.
    pub partial_ttl: Option<Duration>,
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
            max_per_address: 8,
            allow_busy_poll: true,
            auth: None,
            allow: Vec::new(),
            max_idle: Duration::from_secs(30),
            limits: SiteLimits::default(),
            root: None,
            read_only: false,
            encrypt: false,
            partial_ttl: Some(PARTIAL_TTL),
            once: false,
            control_timeout: Duration::from_secs(10),
            faults: Faults::default(),
            log: true,
        }
    }
}

/// How long an unfinished copy's partial files are kept for a resume, by default.
pub const PARTIAL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often the agent looks for stale partial files.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// What a site lets one test ask for, beyond the protocol's own ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteLimits {
    /// A stream test's time, omitted part included.
    pub max_duration: Duration,
    /// Streams per direction.
    pub max_streams: u32,
    /// The sum of a stream test's paced or UDP rates, bits per second.
    pub max_rate_bps: Option<u64>,
    /// The largest message (rtt, transfer, fanout) or write (stream) a test
    /// may ask for: what the agent allocates per socket.
    pub max_message: Option<u64>,
    /// Tests one client address may start in a minute.
    pub max_tests_per_minute: Option<u32>,
    /// The memory one test may make the agent hold: its own buffers, the
    /// socket buffers it asks the kernel for, its timelines ([`test_memory`]).
    pub max_test_memory: Option<u64>,
}

/// What one connection's thread of a copy holds besides its block: the
/// stack it touches and its TCP_INFO samples (4096 at most, about 100 bytes each).
const COPY_THREAD: u64 = 512 << 10;

/// What a test makes the agent hold, at most, in bytes: the buffers it
/// allocates for each socket, the socket buffers it asks the kernel for
/// (twice what is asked: the kernel doubles it), the intervals and the
/// TCP_INFO timelines it keeps.
pub fn test_memory(test: &gridperf_core::wire::Test) -> u64 {
    use gridperf_core::wire::{Test, MAX_SAMPLES};
    let kernel = |b: Option<u64>| 2 * b.unwrap_or(0);
    match test {
        Test::Rtt(e) | Test::Transfer(e) => {
            let files = if e.protos.contains(&gridperf_core::model::plan::Proto::Sendfile) { e.max_size } else { 0 };
            let sockets = e.protos.len() as u64 * (kernel(e.sndbuf) + kernel(e.rcvbuf));
            e.max_size.max(65_536) + files + sockets
        }
        Test::Stream(s) => {
            let n = s.layout().len() as u64;
            let time_ms = s.omit_ms.saturating_add(s.duration_ms).saturating_add(s.linger_ms);
            let samples = (time_ms / s.sample_ms.max(1)).min(MAX_SAMPLES as u64)
                * std::mem::size_of::<gridperf_core::analysis::flow::TcpSample>() as u64;
            let intervals = time_ms / s.interval_ms.max(1) * 8;
            let (snd, rcv) = s.buffers(None);
            // a sender's pattern (and its file), a receiver's 128 KiB reads
            let own = s.write_size.saturating_mul(2).max(128 << 10);
            n.saturating_mul(own + samples + intervals + kernel(snd) + kernel(rcv))
        }
        Test::Fanout(f) => fanout::MAX_CONSUMERS as u64 * (f.size + kernel(f.buffer) * 2),
        // per connection run at once: a block buffer (and its tag), the
        // socket buffers, a thread's stack as touched and its TCP_INFO
        // samples; as many again wait with their socket buffers only; the
        // file list and each file's state (a few hundred bytes a file)
        Test::Copy(c) => {
            let live = u64::from(c.live_connections());
            let per = c.block + 64 + 2 * kernel(c.window) + COPY_THREAD;
            live.saturating_mul(per).saturating_add(live.saturating_mul(2 * kernel(c.window)))
                + u64::from(c.files) * 512
        }
    }
}

impl Default for SiteLimits {
    fn default() -> Self {
        SiteLimits {
            max_duration: Duration::from_millis(gridperf_core::wire::MAX_DURATION_MS),
            max_streams: gridperf_core::wire::MAX_STREAMS,
            max_rate_bps: None,
            max_message: None,
            max_tests_per_minute: None,
            max_test_memory: None,
        }
    }
}

impl SiteLimits {
    /// Why this site refuses a test, naming the limit and its flag.
    pub fn refuses(&self, test: &gridperf_core::wire::Test) -> Option<String> {
        use gridperf_core::wire::Test;
        let size = match test {
            Test::Rtt(e) | Test::Transfer(e) => e.max_size,
            Test::Stream(s) => s.write_size,
            Test::Fanout(f) => f.size,
            Test::Copy(c) => c.block,
        };
        if let Some(max) = self.max_message.filter(|&m| size > m) {
            return Some(format!("messages of {size} bytes: this agent allows at most {max} (serve --max-message)"));
        }
        let memory = test_memory(test);
        if let Some(max) = self.max_test_memory.filter(|&m| memory > m) {
            return Some(format!(
                "this test would hold up to {memory} bytes here (buffers, socket buffers, timelines): this agent \
                 allows at most {max} per test (serve --max-test-memory); ask for fewer streams, smaller writes or buffers"
            ));
        }
        if let Test::Copy(c) = test {
            if c.streams > self.max_streams {
                return Some(format!(
                    "{} streams: this agent allows at most {} (serve --max-streams)",
                    c.streams, self.max_streams
                ));
            }
            return match (self.max_rate_bps, c.pacing_bps) {
                (Some(max), Some(r)) if r.saturating_mul(u64::from(c.streams)) > max => Some(format!(
                    "{} streams at {r} bit/s: this agent allows at most {max} bit/s in all (serve --max-rate)",
                    c.streams
                )),
                (Some(max), None) => Some(format!(
                    "an unpaced copy: this agent allows at most {max} bit/s in all (serve --max-rate): give --pacing"
                )),
                _ => None,
            };
        }
        let Test::Stream(s) = test else { return None };
        let ms = s.duration_ms.saturating_add(s.omit_ms);
        if ms > self.max_duration.as_millis() as u64 {
            return Some(format!(
                "a stream test of {ms} ms: this agent allows at most {} ms (serve --max-duration)",
                self.max_duration.as_millis()
            ));
        }
        if s.streams > self.max_streams {
            return Some(format!(
                "{} streams: this agent allows at most {} (serve --max-streams)",
                s.streams, self.max_streams
            ));
        }
        let per = s.pacing_bps.or(s.udp_rate_bps);
        let ways = if s.direction == gridperf_core::wire::Direction::Both { 2 } else { 1 };
        match (self.max_rate_bps, per) {
            (Some(max), Some(r)) if r.saturating_mul(u64::from(s.streams) * ways) > max => Some(format!(
                "{} streams at {r} bit/s: this agent allows at most {max} bit/s in all (serve --max-rate)",
                s.streams * ways as u32
            )),
            (Some(max), None) => Some(format!(
                "an unpaced stream test: this agent allows at most {max} bit/s in all (serve --max-rate): \
                 give --pacing (TCP) or -b (UDP)"
            )),
            _ => None,
        }
    }
}

pub(crate) struct Shared {
    cfg: AgentConfig,
    slots: Mutex<Slots>,
    freed: Condvar,
    /// The control connections open: in all, per address, per network.
    conns: Arc<conns::ConnTable>,
    /// Addresses that failed to authenticate, and their back-off.
    pub(crate) penalties: conns::Penalties,
    /// The agent's log (limited: a flood of refusals is summarised).
    pub(crate) log: conns::Log,
    /// When each client address started its tests of the last minute.
    started: Mutex<HashMap<IpAddr, std::collections::VecDeque<Instant>>>,
    tests_done: AtomicUsize,
    /// What `serve --metrics` exposes.
    pub(crate) metrics: Arc<metrics::Metrics>,
    stop: Arc<AtomicBool>,
}

impl Shared {
    pub(crate) fn slots(&self) -> MutexGuard<'_, Slots> {
        // a panicking client thread must not take the agent's slots with it
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

impl Shared {
    /// Counts a test `ip` starts; why not, when it has started its minute's worth.
    pub(crate) fn may_start(&self, ip: IpAddr) -> Option<String> {
        let max = self.cfg.limits.max_tests_per_minute?;
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        started.retain(|_, v| {
            while v.front().is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60)) {
                v.pop_front();
            }
            !v.is_empty()
        });
        let v = started.entry(ip).or_default();
        if v.len() >= max as usize {
            return Some(format!(
                "{ip} started {} tests in the last minute, this agent's limit (serve --max-tests-per-minute); try again later",
                v.len()
            ));
        }
        v.push_back(now);
        None
    }
}

/// Tells a client it is refused before its session begins, and closes.
fn refuse_at_once(stream: TcpStream, message: String, code: ErrorCode) {
    let mut s = stream;
    let _ = s.set_nonblocking(false);
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = wire::write_msg(&mut s, &AgentMsg::Error { code, message });
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
        let limits = conns::ConnLimits::with_network(cfg.max_connections, cfg.max_per_address);
        let log = conns::Log::new(cfg.log);
        let shared = Arc::new(Shared {
            cfg,
            slots: Mutex::new(Slots { running: 0, waiting: 0 }),
            freed: Condvar::new(),
            conns: conns::ConnTable::new(limits),
            penalties: conns::Penalties::default(),
            log,
            started: Mutex::new(HashMap::new()),
            tests_done: AtomicUsize::new(0),
            metrics: Arc::new(metrics::Metrics::default()),
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

    /// The agent's counters (serve --metrics reads them while it runs).
    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.shared.metrics.clone()
    }

    /// Accepts clients until stopped (or, with `once`, until one test has finished).
    pub fn run(self) -> io::Result<()> {
        let fds: Vec<i32> = self.listeners.iter().map(|l| l.as_raw_fd()).collect();
        let mut handles: Vec<thread::JoinHandle<()>> = Vec::new();
        if let (Some(root), Some(ttl)) = (self.shared.cfg.root.clone(), self.shared.cfg.partial_ttl) {
            let shared = self.shared.clone();
            let sweeper =
                thread::Builder::new().name("gridperf-sweep".into()).spawn(move || sweep(&shared, &root, ttl));
            if let Ok(h) = sweeper {
                handles.push(h);
            }
        }
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
                let ip = peer.ip().to_canonical();
                if !shared.cfg.allow.is_empty() && !shared.cfg.allow.iter().any(|c| c.contains(ip)) {
                    shared.metrics.refused(metrics::Refusal::Address);
                    refuse_at_once(
                        stream,
                        format!("{ip} is not among the addresses this agent serves (serve --allow)"),
                        ErrorCode::Refused,
                    );
                    continue;
                }
                if let Some(wait) = shared.penalties.waiting(ip, Instant::now()) {
                    // failed to authenticate a moment ago: refused without a word to the log
                    shared.metrics.refused(metrics::Refusal::Auth);
                    refuse_at_once(
                        stream,
                        format!("{ip} failed to authenticate: wait {:.1} s before trying again", wait.as_secs_f64()),
                        ErrorCode::Busy,
                    );
                    continue;
                }
                let admitted = match shared.conns.admit(ip, stream.try_clone().ok()) {
                    Ok(a) => a,
                    Err(r) => {
                        let (why, message) = match r {
                            conns::Refused::PerAddress(n) => (
                                metrics::Refusal::PerAddress,
                                format!(
                                    "{ip} has {n} control connections open here, the agent's limit per address \
                                     (serve --max-per-address); try again later"
                                ),
                            ),
                            conns::Refused::PerNetwork(n) => (
                                metrics::Refusal::PerAddress,
                                format!(
                                    "the network of {ip} has {n} control connections open here, the agent's limit \
                                     per /24 or /64 (a quarter of serve --max-connections); try again later"
                                ),
                            ),
                            conns::Refused::Full(n) => (
                                metrics::Refusal::Connections,
                                format!(
                                    "the agent has {n} control connections open, its limit (serve --max-connections); try again later"
                                ),
                            ),
                        };
                        shared.metrics.refused(why);
                        refuse_at_once(stream, message, ErrorCode::Busy);
                        continue;
                    }
                };
                let spawned = thread::Builder::new().name(format!("gridperf-client-{peer}")).spawn(move || {
                    let closer = stream.try_clone().ok();
                    if let Err(e) = session::serve(&shared, stream, peer, &admitted) {
                        // a client's words in the log: one line, no escape codes
                        shared.log.line(&format!(
                            "gridperf serve: {peer}: {}",
                            gridperf_core::wire::printable(&e.to_string())
                        ));
                        if let Some(c) = closer {
                            reply::close_after_error(c);
                        }
                    }
                    drop(admitted);
                });
                match spawned {
                    Ok(h) => handles.push(h),
                    // the closure, and the admission in it, are dropped: the count goes back
                    Err(e) => eprintln!("gridperf serve: cannot start a thread for {peer}: {e}"),
                }
            }
            handles.retain(|h| !h.is_finished());
            self.shared.log.tick();
        }
        // tests in progress see the stop flag within a few milliseconds and tell
        // their clients; after a grace period, wake every client thread still
        // blocked in a read, then wait for them
        self.shared.freed.notify_all();
        let grace = Instant::now() + Duration::from_secs(1);
        while handles.iter().any(|h| !h.is_finished()) && Instant::now() < grace {
            thread::sleep(Duration::from_millis(10));
        }
        self.shared.conns.shut_all();
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    }
}

/// Removes stale partial files beneath the root: at once, then every
/// SWEEP_EVERY, until the agent stops (looked at every 100 ms).
fn sweep(shared: &Shared, root: &std::path::Path, ttl: Duration) {
    let mut next = Instant::now();
    while !shared.stopping() {
        if Instant::now() >= next {
            next = Instant::now() + SWEEP_EVERY;
            let swept = std::fs::File::open(root)
                .map(std::os::fd::OwnedFd::from)
                .and_then(|r| crate::datapath::copy::sweep_stale(&r, ttl, 1_000_000));
            match swept {
                Ok(s) if s.removed > 0 => shared.log.line(&format!(
                    "gridperf serve: removed {} partial files of unfinished copies ({} bytes) untouched for {} h \
                     (serve --partial-ttl)",
                    s.removed,
                    s.bytes,
                    ttl.as_secs() / 3600
                )),
                Ok(_) => {}
                Err(e) => shared.log.line(&format!("gridperf serve: looking for stale partial files: {e}")),
            }
        }
        thread::sleep(Duration::from_millis(100));
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
        Self::serving(AgentConfig { faults, bind: Self::loopback_port(), ..AgentConfig::default() })
    }

    /// An agent of this process whose copies read and write beneath `root`
    /// (a local copy: the destination directory).
    pub fn with_root(root: std::path::PathBuf) -> io::Result<LocalAgent> {
        Self::serving(AgentConfig { root: Some(root), bind: Self::loopback_port(), ..AgentConfig::default() })
    }

    /// 127.0.0.1, a port of its own.
    pub fn loopback_port() -> Vec<SocketAddr> {
        vec![SocketAddr::from(([127, 0, 0, 1], 0))]
    }

    /// An agent of this process as `cfg` sets it up (where `cfg.bind` says),
    /// its log off; the tests' agents are these.
    pub fn serving(cfg: AgentConfig) -> io::Result<LocalAgent> {
        let cfg = AgentConfig { log: false, ..cfg };
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
