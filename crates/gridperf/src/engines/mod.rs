//! The engines: each runs one kind of measurement and returns raw samples
//! and counters, summarised. `rtt` and `transfer` share the echo data path
//! in [`echo`] and the set-up in [`start`].

pub mod echo;
pub mod fanout;
pub mod rtt;
pub mod stream;
pub mod transfer;

use crate::agent::LocalAgent;
use crate::env;
use crate::error::{Error, Result};
use crate::runner::{self, Deadlines, Session, Test};
use echo::Faults;
use gridperf_core::model::{Environment, Settings};
use gridperf_core::plan::Proto;
use gridperf_core::stats::Warning;
use gridperf_core::wire::TestRequest;
use std::net::SocketAddr;

/// Where the agent is.
#[derive(Debug, Clone)]
pub enum Target {
    /// A running agent.
    Remote(SocketAddr),
    /// An agent this process starts on loopback for the run.
    Local { faults: Faults },
}

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

/// A test in progress: the control session, the data sockets, and the local
/// agent if gridperf started one.
pub struct Running {
    pub session: Session,
    pub test: Test,
    pub env: Environment,
    message_timeout: std::time::Duration,
    ipv6: bool,
    buffers: (Option<u64>, Option<u64>),
    /// The lab this run crosses (run by `gridperf lab exec`), with the emulator's health before.
    lab: Option<(String, Option<crate::lab::emulator::Health>)>,
    _local: Option<LocalAgent>,
}

/// Pins this thread, reaches (or starts) the agent, and opens the test.
pub fn start(kind: &str, target: &Target, opts: &EchoOptions) -> Result<Running> {
    let started = runner::unix_now();
    if let Some(cpu) = opts.client_cpu {
        gridperf_sys::set_thread_affinity(&[cpu]).map_err(|e| {
            Error::usage(format!("cannot pin the client to CPU {cpu}: {e} (see nproc for the valid CPUs)"))
        })?;
    }
    let (addr, local, label) = match target {
        Target::Remote(a) => (*a, None, a.to_string()),
        Target::Local { faults } => {
            let agent = LocalAgent::start(*faults)
                .map_err(|e| Error::internal(format!("cannot start the local agent: {e}")))?;
            (agent.addr, Some(agent), "local".to_string())
        }
    };
    let max_size = opts.sizes.iter().copied().max().unwrap_or(1);
    let mut session = Session::connect(addr, opts.deadlines)?;
    let req = TestRequest {
        kind: kind.into(),
        protos: opts.protos.iter().map(|p| p.name().to_string()).collect(),
        max_size,
        nodelay: opts.nodelay,
        busy_poll: opts.busy_poll,
        cpu: opts.server_cpu,
        sndbuf: opts.sndbuf,
        rcvbuf: opts.rcvbuf,
        udp_port: None,
        timeout_ms: opts.deadlines.message.as_millis() as u64,
        queue_ms: 0,
        stream: None,
        fanout: None,
    };
    let test = session.start(req, opts.writes)?;
    let client = env::end_info(opts.client_cpu.map(|c| vec![c]), opts.busy_poll);
    let env = Environment {
        tool_version: env::software(),
        command_line: std::env::args().collect(),
        started_unix: started,
        finished_unix: 0.0,
        target: label,
        client,
        server: Some(test.agent.clone()),
        notes: opts.notes.clone(),
        lab: None,
    };
    let lab = std::env::var("GRIDPERF_LAB").ok().map(|name| {
        let before = crate::lab::health(&name);
        (name, before)
    });
    Ok(Running {
        session,
        test,
        env,
        message_timeout: opts.deadlines.message,
        ipv6: addr.is_ipv6(),
        buffers: (opts.sndbuf, opts.rcvbuf),
        lab,
        _local: local,
    })
}

impl Running {
    /// The pinger for a protocol.
    pub fn index(&self, proto: Proto) -> Result<usize> {
        self.test
            .pingers
            .iter()
            .position(|p| p.sock.proto() == proto)
            .ok_or_else(|| Error::internal(format!("no data socket for {proto}")))
    }

    /// Reports the last progress, adds the run-wide warnings, and ends the test.
    pub fn close(
        self,
        opts: &EchoOptions,
        points: usize,
        progress: &mut dyn FnMut(Progress),
        warnings: &mut Vec<Warning>,
    ) -> Result<Environment> {
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
        if let Some(why) = env.lab.as_ref().and_then(|l| l.invalid.clone()) {
            warnings.push(Warning::LabInvalid { why });
        }
        Ok(env)
    }

    /// Ends the test and completes the record with the agent's report. Both
    /// ends read their sockets' state now, after the traffic (autotuned
    /// buffers and the MSS in use are known only then).
    pub fn finish(mut self) -> Result<Environment> {
        self.env.client.sockets = runner::client_sockets(&self.test, self.ipv6, self.buffers.0, self.buffers.1);
        let agent = self.session.finish()?;
        self.env.server = Some(agent);
        self.env.finished_unix = runner::unix_now();
        if let Some((name, before)) = self.lab.take() {
            self.env.lab = Some(lab_record(&name, before));
        }
        Ok(self.env)
    }

    /// One warm-up exchange: not counted, but the echo is checked against what was sent.
    pub fn warm_exchange(&mut self, idx: usize, proto: Proto, size: u64, n: u64) -> Result<()> {
        match self.test.pingers[idx].exchange(size as usize) {
            Ok(echo::Outcome::Rtt(_)) => {
                if !self.test.pingers[idx].verify_last(size as usize) {
                    self.session.abort("corrupted echo");
                    return Err(Error::measurement(format!(
                        "{proto} {size} B: the echo of warm-up exchange {n} differs from what was sent"
                    )));
                }
                Ok(())
            }
            Ok(echo::Outcome::Lost) => Ok(()),
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
        self.session.step(proto, size, None)?;
        let until = std::time::Instant::now() + time;
        let mut n = 0;
        while std::time::Instant::now() < until {
            self.warm_exchange(idx, proto, size, n)?;
            n += 1;
        }
        self.session.end_step(&self.test.pingers[idx], false)?;
        Ok(n)
    }

    /// Turns an I/O failure of an exchange into an error that says where it happened.
    /// `n` counts exchanges from 1.
    pub fn fail(&mut self, proto: Proto, size: u64, n: u64, e: std::io::Error) -> Error {
        // the agent may have said why it stopped; its word can trail the data
        // connection's reset by a moment
        let gone = if self.session.agent_gone_within(std::time::Duration::from_millis(200)) {
            match self.session.last_words() {
                Some(why) => format!(" (the agent stopped: {why})"),
                None => " (the agent has closed the control connection)".to_string(),
            }
        } else {
            String::new()
        };
        self.session.abort(&format!("client error: {e}"));
        match e.kind() {
            std::io::ErrorKind::TimedOut => Error::network(format!(
                "{proto} {size} B, exchange {n}: {e} ({:?}){gone}; raise --timeout if the path is that slow",
                self.message_timeout
            )),
            _ => Error::network(format!("{proto} {size} B, exchange {n}: {e}{gone}")),
        }
    }

    /// Counts a lost UDP message; after enough losses in a row (at least 10,
    /// and at least 3 s of timeouts) the path or the agent is taken to be
    /// gone, rather than waiting out every remaining message.
    pub fn lost_in_a_row(&mut self, proto: Proto, size: u64, in_a_row: u64) -> Result<()> {
        let limit = (3_000 / self.message_timeout.as_millis().max(1) as u64).max(10);
        if self.session.agent_gone() {
            let why = self.session.last_words().unwrap_or_else(|| "it closed the control connection".into());
            return Err(Error::network(format!("{proto} {size} B: the agent stopped mid-run: {why}")));
        }
        if in_a_row >= limit {
            return Err(Error::network(format!(
                "{proto} {size} B: no reply to {in_a_row} datagrams in a row (timeout {:?} each): the path or the agent is down",
                self.message_timeout
            )));
        }
        Ok(())
    }
}

/// What the lab's emulator says of itself over a run: it writes its health
/// every 250 ms, so wait for one more write before reading it again.
pub fn lab_record(name: &str, before: Option<crate::lab::emulator::Health>) -> gridperf_core::model::LabRecord {
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = crate::lab::health(name);
    let state = crate::lab::state(name);
    let (emulator, invalid) = match (&before, &after) {
        (Some(b), Some(a)) => {
            let d = a.since(b);
            (serde_json::to_value(&d).unwrap_or_default(), d.invalid_because())
        }
        _ => (serde_json::Value::Null, Some(format!("the emulator of lab {name:?} could not be read"))),
    };
    gridperf_core::model::LabRecord {
        name: name.to_string(),
        profile: state.as_ref().and_then(|s| s.spec.profile.clone()),
        description: state.map(|s| s.spec.description).unwrap_or_default(),
        emulator,
        invalid,
    }
}
