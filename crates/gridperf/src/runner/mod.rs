//! The runner: the one way every measurement reaches its agent. A
//! [`Network`] is what the user named (a lab profile, a host, or loopback);
//! [`Network::prepare`] makes it ready for a run (bringing a lab up for it)
//! and gives the [`Target`]; [`Target::open`] reaches the agent (starting
//! one on loopback when there is no host), says hello, and watches the
//! lab the run crosses, so that the run's [`Environment`] says whether the
//! emulator kept up. The lab is passed along explicitly, never through the
//! process's environment.

pub(crate) mod converse;
mod session;

pub use session::{default_key_path, failure, load_client_key, set_client_key, Deadlines, Ready, Session};

use crate::agent::{Faults, LocalAgent};
use crate::error::{Error, Result};
use crate::host;
use crate::lab::run::{spec_for, LabRun};
use crate::lab::LabWatch;
use gridperf_core::model::{EndInfo, Environment};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// An address family a user may insist on (-4, -6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Resolves `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 literal.
pub fn resolve(host: &str, default_port: u16) -> Result<SocketAddr> {
    resolve_family(host, default_port, None)
}

/// The same, taking only addresses of `family` when one is given.
pub fn resolve_family(host: &str, default_port: u16, family: Option<Family>) -> Result<SocketAddr> {
    let candidates: Vec<SocketAddr> = if let Ok(a) = host.parse::<SocketAddr>() {
        vec![a]
    } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        vec![SocketAddr::new(ip, default_port)]
    } else {
        let with_port = if host.contains(':') { host.to_string() } else { format!("{host}:{default_port}") };
        with_port.to_socket_addrs().map_err(|e| Error::network(format!("cannot resolve {host:?}: {e}")))?.collect()
    };
    let fits = |a: &SocketAddr| match family {
        Some(Family::V4) => a.is_ipv4(),
        Some(Family::V6) => a.is_ipv6(),
        None => true,
    };
    let any = !candidates.is_empty();
    candidates.into_iter().find(fits).ok_or_else(|| match (family, any) {
        (Some(f), true) => Error::usage(format!(
            "{host:?} has no IPv{} address (-{})",
            if f == Family::V4 { 4 } else { 6 },
            if f == Family::V4 { 4 } else { 6 }
        )),
        _ => Error::network(format!("{host:?} resolves to no address")),
    })
}

pub use crate::host::unix_now;

pub use gridperf_core::model::LOOPBACK;

/// Where a measurement runs, as the user named it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Network {
    /// A lab of this profile (gridperf lab profiles), brought up for the
    /// run, with overrides as `lab up --set` takes them.
    Lab { profile: String, sets: Vec<String> },
    /// A running `gridperf serve`, by address and the name the user gave.
    Host { addr: SocketAddr, label: String },
    /// An agent of this process on loopback: no lab, no privileges.
    Local,
}

impl Network {
    /// The name its runs are stored and listed under: the lab's profile,
    /// "loopback" for any loopback address, else the host as given.
    pub fn name(&self) -> String {
        match self {
            Network::Lab { profile, .. } => profile.clone(),
            Network::Host { addr, .. } if addr.ip().to_canonical().is_loopback() => LOOPBACK.into(),
            Network::Host { label, .. } => label.clone(),
            Network::Local => LOOPBACK.into(),
        }
    }

    /// The target as the user named it, for the record: the host as given,
    /// "local" for an agent of this process, the lab's profile.
    pub fn target(&self) -> String {
        match self {
            Network::Lab { profile, .. } => profile.clone(),
            Network::Host { label, .. } => label.clone(),
            Network::Local => "local".into(),
        }
    }

    /// The lab profile, for a lab.
    pub fn lab_profile(&self) -> Option<&str> {
        match self {
            Network::Lab { profile, .. } => Some(profile),
            _ => None,
        }
    }

    /// Makes the network ready for a run. A lab is brought up (named
    /// `prefix` and this process's id), its agent started on host b, and
    /// the calling thread moved into host a until the [`Prepared`] is
    /// dropped, which takes the lab down (also on an error or Ctrl-C).
    /// `watched` is a lab the run crosses without having brought it up
    /// (`gridperf lab exec`); `faults` go to a local agent (test seams).
    pub fn prepare(&self, prefix: &str, watched: Option<String>, faults: Faults) -> Result<Prepared> {
        self.prepare_serving(prefix, watched, faults, &crate::lab::run::Serving::default())
    }

    /// The same; a lab's agent serves `serving` too (a copy's destination).
    pub fn prepare_serving(
        &self,
        prefix: &str,
        watched: Option<String>,
        faults: Faults,
        serving: &crate::lab::run::Serving,
    ) -> Result<Prepared> {
        match self {
            Network::Lab { profile, sets } => {
                let name = format!("{prefix}{}", std::process::id() % 100_000);
                let run = LabRun::start_serving(spec_for(&name, profile, sets)?, serving)?;
                Ok(Prepared {
                    target: Target { agent: Endpoint::Remote(run.agent), lab: Some(run.name.clone()), own: true },
                    notes: vec![format!("across lab {} ({})", run.name, run.description)],
                    path_rate_bps: crate::lab::state(&run.name).and_then(|s| s.spec.ab.rate_bps),
                    _lab: Some(run),
                })
            }
            Network::Host { addr, .. } => Ok(Prepared {
                target: Target { agent: Endpoint::Remote(*addr), lab: watched, own: false },
                notes: Vec::new(),
                path_rate_bps: None,
                _lab: None,
            }),
            Network::Local => Ok(Prepared {
                target: Target { agent: Endpoint::Local(faults), lab: watched, own: true },
                notes: Vec::new(),
                path_rate_bps: None,
                _lab: None,
            }),
        }
    }
}

/// A network made ready for a run; dropping it takes a lab brought up for
/// the run down again.
pub struct Prepared {
    pub target: Target,
    /// Conditions for the run's record ("across lab ...").
    pub notes: Vec<String>,
    /// The bottleneck rate, when the lab sets one (for a stream's verdict).
    pub path_rate_bps: Option<u64>,
    _lab: Option<LabRun>,
}

/// Where a test's agent is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A running agent.
    Remote(SocketAddr),
    /// An agent this process starts on loopback for the test.
    Local(Faults),
}

/// A run across a lab whose emulator fell behind is not a measurement of
/// the emulated network: exit 4, after the results were printed and stored.
pub fn lab_valid(env: &Environment) -> Result<()> {
    match env.lab.as_ref().and_then(|l| l.invalid.as_ref()) {
        Some(why) => Err(Error::measurement(format!("{INVALID_RUN} the lab's emulator did not keep up ({why})"))),
        None => Ok(()),
    }
}

/// How [`lab_valid`]'s error begins.
const INVALID_RUN: &str = "invalid run:";

/// Whether `e` is [`lab_valid`]'s: a probe across a lab whose emulator fell behind.
pub fn is_lab_invalid(e: &Error) -> bool {
    e.kind == crate::error::Kind::Measurement && e.message.starts_with(INVALID_RUN)
}

/// Runs a probe across a lab again, at most `tries` times in all, while its
/// emulator fell behind (the machine's CPU was taken away, say): a probe
/// that is not the path's is taken again, not kept. Any other error, or
/// the last invalid one, is returned.
pub fn again_if_invalid<T>(tries: u32, mut probe: impl FnMut() -> Result<T>) -> Result<T> {
    let mut left = tries.max(1);
    loop {
        left -= 1;
        match probe() {
            Err(e) if left > 0 && is_lab_invalid(&e) => {
                eprintln!("gridperf: {}; measuring it again", e.message);
            }
            r => return r,
        }
    }
}

/// What a test runs against: its agent, and the lab it crosses, if any.
#[derive(Debug, Clone)]
pub struct Target {
    pub agent: Endpoint,
    /// The lab whose emulator the test crosses: its health is read before
    /// and after, and a run it could not keep up with is marked invalid.
    pub lab: Option<String>,
    /// This process started the agent (a lab's, brought up for the run).
    pub own: bool,
}

impl Target {
    pub fn remote(addr: SocketAddr) -> Target {
        Target { agent: Endpoint::Remote(addr), lab: None, own: false }
    }

    pub fn local() -> Target {
        Target { agent: Endpoint::Local(Faults::default()), lab: None, own: true }
    }

    /// Reaches the agent (starting the local one), says hello, and notes
    /// the lab's health before the test.
    pub fn open(&self, deadlines: Deadlines) -> Result<Opened> {
        let started = unix_now();
        let (addr, local, label) = match &self.agent {
            Endpoint::Remote(a) => (*a, None, a.to_string()),
            Endpoint::Local(faults) => {
                let agent = LocalAgent::start(*faults)
                    .map_err(|e| Error::internal(format!("cannot start the local agent: {e}")))?;
                (agent.addr, Some(agent), "local".to_string())
            }
        };
        let lab = self.lab.as_deref().map(LabWatch::start);
        // an agent this process started (its own, a lab's) proves nothing
        let session = if local.is_some() || self.own {
            Session::connect_own(addr, deadlines)?
        } else {
            Session::connect(addr, deadlines)?
        };
        Ok(Opened { session, addr, label, started, lab, load: host::LoadWatch::start(), _local: local })
    }
}

/// A test's agent reached: the control session, and what the record needs.
pub struct Opened {
    pub session: Session,
    /// The agent's address.
    pub addr: SocketAddr,
    /// The target as the record names it ("local" for an agent of this process).
    pub label: String,
    started: f64,
    lab: Option<LabWatch>,
    load: host::LoadWatch,
    _local: Option<LocalAgent>,
}

impl Opened {
    /// The watch on the lab the test crosses, if it crosses one.
    pub fn lab_watch(&mut self) -> Option<&mut LabWatch> {
        self.lab.as_mut()
    }

    /// The run's record: both ends, the notes, and the lab's verdict over
    /// the run (read now: call it once the traffic is over).
    pub fn environment(&mut self, client: EndInfo, agent: Option<EndInfo>, notes: Vec<String>) -> Environment {
        let mut env = Environment {
            tool_version: host::software(),
            command_line: std::env::args().collect(),
            started_unix: self.started,
            finished_unix: unix_now(),
            target: self.label.clone(),
            client,
            server: agent,
            notes,
            lab: None,
            load: self.load.load().map(|(l, _)| l),
        };
        env.set_lab(self.lab.take().map(|w| w.record()));
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_the_lab_could_not_keep_up_with_is_taken_again_a_bounded_number_of_times() {
        let invalid = || {
            let env = Environment {
                lab: Some(gridperf_core::model::LabRecord { invalid: Some("held up".into()), ..Default::default() }),
                ..Default::default()
            };
            lab_valid(&env).expect_err("invalid")
        };
        assert!(is_lab_invalid(&invalid()));
        assert!(!is_lab_invalid(&Error::measurement("no round trip came back")));
        // invalid twice, then valid: the third try's result
        let mut n = 0;
        let r = again_if_invalid(3, || {
            n += 1;
            if n < 3 {
                Err(invalid())
            } else {
                Ok(n)
            }
        });
        assert_eq!(r.expect("valid at last"), 3);
        // invalid every time: the last error, after exactly 3 tries
        let mut n = 0;
        let r: Result<()> = again_if_invalid(3, || {
            n += 1;
            Err(invalid())
        });
        assert!(r.is_err_and(|e| is_lab_invalid(&e)) && n == 3);
        // another error is not retried
        let mut n = 0;
        let r: Result<()> = again_if_invalid(3, || {
            n += 1;
            Err(Error::network("refused"))
        });
        assert!(r.is_err() && n == 1);
    }

    #[test]
    fn loopback_has_one_name() {
        for host in ["127.0.0.1:5301", "127.9.9.9:1", "[::1]:5301", "[::ffff:127.0.0.1]:5301"] {
            let addr: SocketAddr = host.parse().expect("addr");
            assert_eq!(Network::Host { addr, label: host.into() }.name(), LOOPBACK, "{host}");
        }
        assert_eq!(Network::Local.name(), LOOPBACK);
        assert_eq!(Network::Lab { profile: "loopback".into(), sets: vec![] }.name(), LOOPBACK);
        let far = Network::Host { addr: "192.0.2.7:5301".parse().expect("addr"), label: "dtn1".into() };
        assert_eq!(far.name(), "dtn1");
        assert_eq!(Network::Lab { profile: "man".into(), sets: vec![] }.name(), "man");
    }
}
