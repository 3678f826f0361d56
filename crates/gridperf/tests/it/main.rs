//! gridperf's integration tests: agent and client in one process (or as
//! child processes of the real binary), over loopback.
//!
//! Where a new test belongs:
//! - `echo`: rtt and transfer results, statistics against samples, loss counting;
//! - `agent`: the agent's answers to bad, hostile, busy or vanishing clients;
//! - `cli`: the binary: exit codes, output formats, signals, a dying agent;
//! - `fanout`: the producer/consumer benchmark, its deadlock and the watchdog;
//! - `store`: the results store, survey (killed and resumed), runs and report;
//! - `archive`: the store in a real PostgreSQL server (a private cluster per test);
//! - `copy`: gridperf copy through the binary: local, push and pull, refusals, damage, resume;
//! - `promises`: what a site is promised, each broken as a hostile client or an unlucky user would
//!   (mixed files, hard links, descriptors, a full disk, links and pipes, reservations);
//! - `stream`: gridperf stream through the binary: byte counts, pacing, UDP, broken streams, bad input;
//! - `newcomer`: what a new user meets: listings, honest exits, peer tools' habits answered;
//! - `netns`: runs in private network namespaces (root, or a user namespace of one's own);
//! - `lab`: the lab across real namespaces and TUN devices (root, or rootless: CI runs them both ways);
//! - `isolation`: one user's rootless lab, out of another's reach (root, to be two users);
//! - `prometheus`: serve --metrics, /probe's refusals and bounds, and a real Prometheus scraping it;
//! - `pscheduler`: gridperf as a pScheduler tool, its JSON checked against pScheduler's own schemas;
//! - `layers`: which module of the binary crate may use which (the layer graph);
//! - `render`: every table, CSV and JSON the binary prints, from constructed results, pinned by snapshots;
//! - `suite`: the suite itself keeps away from the user's home, store and GRIDPERF_DB.

mod agent;
mod archive;
mod cli;
mod copy;
mod echo;
mod fanout;
mod isolation;
mod lab;
mod layers;
mod netns;
mod newcomer;
mod prometheus;
mod promises;
mod pscheduler;
mod render;
mod store;
mod stream;
mod suite;
mod trace;

use gridperf::agent::{AgentConfig, Faults};
use gridperf::engines::EchoOptions;
use gridperf::runner::Deadlines;
use gridperf_core::model::plan::Proto;
use std::time::Duration;

/// A file or directory a test writes in the temporary directory, named
/// for the test and this process, and removed when the test ends, passed
/// or panicked.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    /// `$TMPDIR/gridperf-{name}-{pid}{ext}` (ext with its dot, or "").
    pub fn new(name: &str, ext: &str) -> Scratch {
        Scratch(std::env::temp_dir().join(format!("gridperf-{name}-{}{ext}", std::process::id())))
    }

    pub fn s(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

const TEST_HOME_PREFIX: &str = "gridperf-test-home-";

/// A home of this test run's own: every gridperf a test starts gets it
/// (and XDG directories beneath it) and no GRIDPERF_DB, so that no test
/// reads or writes the user's store, key or lab state. A static has no
/// drop, so each run removes the homes of the runs before it that have
/// ended (a day of CI had left 21 in /tmp): at most the last is left.
pub fn test_home() -> &'static std::path::Path {
    static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let h = std::env::temp_dir().join(format!("{TEST_HOME_PREFIX}{}", std::process::id()));
        for d in [".local/share", ".local/state", ".config", ".cache"] {
            std::fs::create_dir_all(h.join(d)).expect("the test home");
        }
        sweep_homes_of_ended_runs(&h);
        h
    })
}

/// Removes the test homes of runs no longer running that belong to the
/// owner of `own` (this run's).
fn sweep_homes_of_ended_runs(own: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata(own).map(|m| m.uid()) else { return };
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(TEST_HOME_PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        let ours = e.metadata().is_ok_and(|m| m.uid() == uid && m.is_dir());
        if ours && pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Keeps a command away from the user's files: the run's own home, its
/// XDG directories, no GRIDPERF_DB.
pub fn hermetic(c: &mut std::process::Command) -> &mut std::process::Command {
    let h = test_home();
    c.env("HOME", h)
        .env("XDG_DATA_HOME", h.join(".local/share"))
        .env("XDG_STATE_HOME", h.join(".local/state"))
        .env("XDG_CONFIG_HOME", h.join(".config"))
        .env("XDG_CACHE_HOME", h.join(".cache"))
        .env_remove("GRIDPERF_DB")
}

/// The gridperf binary, to be run away from the user's files ([`hermetic`]).
pub fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gridperf"));
    hermetic(&mut c);
    c
}

/// Tests that load both CPUs (bulk streams, sweeps, surveys, the lab) take
/// this lock, so that none of them runs beside another: a lab's emulator
/// beside a 40 Gbit/s loopback stream falls behind and rightly says its run
/// is invalid.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits, up to a minute, until the hypervisor leaves this machine alone:
/// three seconds in a row of 200 ms slices, each with under 10 ms of steal
/// over all CPUs. A lab run through a burst of steal is rightly INVALID
/// (the emulator was held up); a test tries such a run again only once
/// trying again can succeed. Steal comes in bursts: CI once saw five tries
/// in a row INVALID, 2 s apart, and later five more, each after two
/// seconds under 2% steal (a burst of 20 ms in a second passed that).
/// Returns how long it waited.
pub fn quiet() -> Duration {
    const SLICE: Duration = Duration::from_millis(200);
    const CALM_SLICES: u32 = 15;
    const MOST_STEAL_NS: u64 = 10_000_000;
    let start = std::time::Instant::now();
    let mut calm = 0;
    // all the CPUs' steal (time the hypervisor gave to other guests), and all their time, ns
    let times = || {
        let t = gridperf_sys::machine_times();
        let sum = |v: &[u64]| v.iter().sum::<u64>();
        (sum(&t.steal_ns), sum(&t.busy_ns) + sum(&t.idle_ns) + sum(&t.steal_ns))
    };
    while calm < CALM_SLICES && start.elapsed() < Duration::from_secs(60) {
        let (s0, t0) = times();
        std::thread::sleep(SLICE);
        let (s1, t1) = times();
        if t1 <= t0 {
            // /proc/stat unreadable: nothing to wait for
            break;
        }
        calm = if s1.saturating_sub(s0) < MOST_STEAL_NS { calm + 1 } else { 0 };
    }
    start.elapsed()
}

/// The tries of a measurement the machine can void (a burst of steal
/// holds up the lab's emulator, or starves a sender): the first at once,
/// each after it once the machine is quiet ([`quiet`]), at least `least`
/// of them and more while `budget` lasts from the first, never more than
/// [`Tries::MOST`]. A fixed count alone lost to a long stretch of steal:
/// CI once saw a clone's run INVALID five tries in a row, the hypervisor
/// taking 80-160 ms of every CPU in the 20 ms spans that held its
/// hold-ups, for the two minutes the five tries took. A test whose
/// measurement fails for its own reasons still fails, once the budget is
/// spent.
///
/// ```ignore
/// let mut tries = Tries::new(5, Duration::from_secs(300));
/// while tries.next() { let o = measure(); if good(&o) { break } }
/// ```
pub struct Tries {
    least: u32,
    budget: Duration,
    start: std::time::Instant,
    made: u32,
}

impl Tries {
    /// The most tries whatever the budget: a bound on the test's time.
    pub const MOST: u32 = 12;

    pub fn new(least: u32, budget: Duration) -> Tries {
        Tries { least, budget, start: std::time::Instant::now(), made: 0 }
    }

    /// Whether to make another try; before any but the first, waits for a
    /// quiet machine.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> bool {
        let more = self.made < self.least || (self.start.elapsed() < self.budget && self.made < Self::MOST);
        if more && self.made > 0 {
            quiet();
        }
        self.made += u32::from(more);
        more
    }

    /// Tries made so far.
    pub fn made(&self) -> u32 {
        self.made
    }
}

/// Options for a short run: no pinning, tight deadlines.
pub fn opts(protos: &[Proto], sizes: &[u64]) -> EchoOptions {
    EchoOptions::plain(
        protos.to_vec(),
        sizes.to_vec(),
        Deadlines {
            connect: Duration::from_secs(2),
            control: Duration::from_secs(5),
            message: Duration::from_secs(1),
            queue: Duration::ZERO,
        },
    )
}

/// An agent in a thread of this process: the library's own
/// (`gridperf::agent::LocalAgent`), started as the tests want it.
pub struct TestAgent(gridperf::agent::LocalAgent);

impl std::ops::Deref for TestAgent {
    type Target = gridperf::agent::LocalAgent;
    fn deref(&self) -> &gridperf::agent::LocalAgent {
        &self.0
    }
}

impl TestAgent {
    pub fn start(cfg: AgentConfig) -> TestAgent {
        TestAgent(gridperf::agent::LocalAgent::serving(cfg).expect("bind agent"))
    }

    pub fn loopback() -> TestAgent {
        TestAgent::with(|_| {})
    }

    pub fn with(f: impl FnOnce(&mut AgentConfig)) -> TestAgent {
        let mut cfg = AgentConfig { bind: gridperf::agent::LocalAgent::loopback_port(), ..AgentConfig::default() };
        f(&mut cfg);
        TestAgent::start(cfg)
    }
}

/// A `gridperf serve` a test started: killed and reaped when dropped, so a
/// test that fails half-way leaves no agent behind (one did, for hours).
pub struct Served(pub std::process::Child);

impl std::ops::Deref for Served {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Served {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on at the moment, on `ip`.
pub fn free_port_on(ip: std::net::IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0)).expect("bind").local_addr().expect("addr").port()
}

/// A port nothing listens on at the moment, on 127.0.0.1.
pub fn free_port() -> u16 {
    free_port_on(std::net::Ipv4Addr::LOCALHOST.into())
}

/// Polls `done` every 50 ms until it holds; fails the test, saying `what`
/// did not happen, once `limit` has passed.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `gridperf serve` (the binary) on a free port of `host` (an IP
/// address) and waits, at most 5 s, until it listens.
pub fn serve_on(host: &str, extra: &[&str]) -> (Served, u16) {
    let (mut one, port) = serve_on_one_port(&[(host, extra.to_vec())]);
    (one.remove(0), port)
}

/// Starts `gridperf serve` on `host` and `port` and waits, at most 5 s, until it listens.
pub fn serve_at(host: &str, port: u16, extra: &[&str]) -> Served {
    try_serve_at(host, port, extra)
        .unwrap_or_else(|| panic!("the agent on {host}:{port} ended before it listened: the port taken meanwhile?"))
}

/// The same, or `None` if the agent ended before it listened (its port taken meanwhile).
fn try_serve_at(host: &str, port: u16, extra: &[&str]) -> Option<Served> {
    let ip: std::net::IpAddr = host.parse().expect("an IP address");
    let p = port.to_string();
    let mut args = vec!["serve", "--bind", host, "--port", &p];
    args.extend_from_slice(extra);
    let mut child = Served(
        bin()
            .args(&args)
            // nobody reads it: a pipe would fill and stall the agent
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn serve"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect((ip, port)).is_err() {
        if let Ok(Some(_)) = child.0.try_wait() {
            return None;
        }
        assert!(std::time::Instant::now() < deadline, "the agent did not start listening on {host}:{port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child)
}

/// Agents on one port, each on its address with its own arguments: a port
/// free on every address, tried again (at most 20 times) if another test
/// took it on one of them between the look and the agents' binding.
pub fn serve_on_one_port(agents: &[(&str, Vec<&str>)]) -> (Vec<Served>, u16) {
    for _ in 0..20 {
        let Some(port) = port_free_on_all(agents.iter().map(|a| a.0)) else { continue };
        let started: Option<Vec<Served>> = agents.iter().map(|(host, extra)| try_serve_at(host, port, extra)).collect();
        if let Some(all) = started {
            return (all, port);
        }
    }
    panic!("no port stayed free on {:?} for 20 tries", agents.iter().map(|a| a.0).collect::<Vec<_>>());
}

/// A port free, at this moment, on every one of `hosts`.
fn port_free_on_all<'a>(mut hosts: impl Iterator<Item = &'a str>) -> Option<u16> {
    let first = std::net::TcpListener::bind((hosts.next()?, 0)).ok()?;
    let port = first.local_addr().ok()?.port();
    let rest: Option<Vec<_>> = hosts.map(|h| std::net::TcpListener::bind((h, port)).ok()).collect();
    rest.map(|_| port)
}

pub fn faults(drop_every: Option<u64>, delay_every: Option<u64>, delay: Duration) -> Faults {
    Faults { drop_udp_every: drop_every, delay_udp_every: delay_every, delay, ..Faults::default() }
}

/// An agent process's threads and open descriptors.
pub fn threads_and_fds(pid: u32) -> (usize, usize) {
    let count = |d: String| std::fs::read_dir(d).map(|d| d.count()).unwrap_or(0);
    (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")))
}

/// Waits up to `limit` for an agent to come back to `want` threads and descriptors.
pub fn settles_at(pid: u32, want: (usize, usize), limit: Duration) -> (usize, usize) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let now = threads_and_fds(pid);
        if now == want || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
