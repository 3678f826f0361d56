//! The client's side of the control conversation: say hello, ask for a
//! test, wait in the agent's queue if asked to; a test's own conversation
//! is its machine's, driven by [`super::converse`].
//! Every answer has a deadline; an error frame from the agent becomes an
//! error of the kind it is (refused, or a network error).

use crate::error::{Error, Result};
use crate::host;
use gridperf_core::auth;
use gridperf_core::model::EndInfo;
use gridperf_core::proto::session::{Me, Note, Opening};
use gridperf_core::proto::{nanos, Action, Clock, End, Input};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode, Test, TestRequest};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The error a failed conversation (a [`gridperf_core::proto`] machine's) is to the user.
pub fn failure(f: gridperf_core::proto::Failure) -> Error {
    use gridperf_core::proto::Failure;
    match f {
        Failure::Agent { code, message } => refused(code, message),
        Failure::Net(m) => Error::network(m),
        Failure::Usage(m) => Error::usage(m),
        Failure::Refused(m) => Error::refused(m),
    }
}

fn refused(code: ErrorCode, message: String) -> Error {
    // the agent's words reach a terminal: shown, never obeyed
    let words = gridperf_core::proto::Failure::agent(code, &message).said();
    if gridperf_core::proto::Failure::is_refusal(code) {
        Error::refused(words)
    } else {
        Error::network(words)
    }
}

/// The key this process proves itself with, when an agent asks: set once,
/// before any test, from --key or the default file (`main`).
static CLIENT_KEY: std::sync::OnceLock<Option<auth::Key>> = std::sync::OnceLock::new();

/// Where a key is looked for when --key is not given.
pub fn default_key_path() -> std::path::PathBuf {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
    home.join(".config/gridperf/key")
}

/// Reads the client's key: the file given, or the default one if it
/// exists. A key file others may read is refused, as ssh refuses one.
pub fn load_client_key(given: Option<&std::path::Path>) -> Result<Option<auth::Key>> {
    let default = default_key_path();
    let path = match given {
        Some(p) => p.to_path_buf(),
        None if default.exists() => default,
        None => return Ok(None),
    };
    let what = |e: String| Error::usage(format!("--key {}: {e}", path.display()));
    let text = host::read_secret(&path).map_err(what)?;
    auth::Key::parse_client_file(&text).map(Some).map_err(what)
}

/// Whether an agent this process did not start must prove it holds the
/// key: set once, with the key; true when --key was given (and not
/// --insecure).
static AGENT_MUST_PROVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Sets the key for every session of this process (once; later calls do
/// nothing), and whether an agent must prove it too (`must_prove`: the
/// user gave --key, so an agent that asks for none is not the one meant).
pub fn set_client_key(key: Option<auth::Key>, must_prove: bool) {
    let _ = CLIENT_KEY.set(key);
    let _ = AGENT_MUST_PROVE.set(must_prove);
}

fn agent_must_prove() -> bool {
    AGENT_MUST_PROVE.get().copied().unwrap_or(false)
}

fn client_key() -> Option<&'static auth::Key> {
    CLIENT_KEY.get().and_then(Option::as_ref)
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
    /// The opening's conversation (hello, the key, the request): what is
    /// sent when is its; without a key the request goes right behind the
    /// hello (a round trip less, 270 ms at CERN-Tokyo) and the welcome is
    /// read before the answer.
    opening: Opening,
    clock: Clock,
    /// Finish was sent ahead of the test's last answers ([`Session::finish_ahead`]).
    finish_sent: bool,
}

/// What the agent said when it was ready: where its data sockets are, the
/// token every data connection opens with, and its record of itself.
#[derive(Debug, Clone)]
pub struct Ready {
    pub tcp_port: Option<u16>,
    pub udp_ports: Vec<u16>,
    pub token: u64,
    pub agent: EndInfo,
}

impl Session {
    /// Reaches an agent the user named: with --key given it must prove it
    /// holds the key (an agent that asks for none is refused, unless --insecure).
    pub fn connect(addr: SocketAddr, deadlines: Deadlines) -> Result<Session> {
        Session::open(addr, deadlines, agent_must_prove())
    }

    /// Reaches an agent this process started itself (its loopback agent, a
    /// lab's): nobody else's, so nothing to prove.
    pub fn connect_own(addr: SocketAddr, deadlines: Deadlines) -> Result<Session> {
        Session::open(addr, deadlines, false)
    }

    fn open(addr: SocketAddr, deadlines: Deadlines, must_prove: bool) -> Result<Session> {
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
        let key = client_key().cloned();
        let nonce = match key {
            Some(_) => host::random_32().map_err(|e| Error::internal(format!("no random nonce: {e}")))?,
            None => [0; auth::KEY_LEN],
        };
        let me = Me {
            software: host::software(),
            key,
            must_prove,
            nonce,
            agent_words: format!("the agent at {addr}"),
            key_hint: default_key_path().display().to_string(),
        };
        let opening = Opening::new(me, nanos(deadlines.control), nanos(deadlines.queue));
        let mut s = Session {
            ctl,
            addr,
            agent_software: String::new(),
            deadlines,
            opening,
            clock: Clock::start(),
            finish_sent: false,
        };
        let first = s.opening.start(s.clock.now());
        s.drive(first)?;
        Ok(s)
    }

    /// Carries out the opening's actions, reading the agent's frames while
    /// it waits for them, until it is done (the session open, or ready).
    fn drive(&mut self, mut acts: Vec<Action<ClientMsg, Note>>) -> Result<()> {
        loop {
            for a in std::mem::take(&mut acts) {
                match a {
                    Action::Send(m) => self.send(&m)?,
                    Action::Do(Note::Queued { ahead }) => {
                        eprintln!("gridperf: the agent is busy; waiting in its queue ({ahead} ahead)")
                    }
                    Action::Done => {
                        self.agent_software = self.opening.agent_software().to_string();
                        return Ok(());
                    }
                    Action::Fail(f) => return Err(failure(f)),
                }
            }
            if !self.opening.wants_msg() {
                return Ok(());
            }
            acts = self.opening_input()?;
        }
    }

    /// The agent's next frame for the opening, or its deadline.
    fn opening_input(&mut self) -> Result<Vec<Action<ClientMsg, Note>>> {
        let until = self
            .opening
            .deadline()
            .map_or_else(|| std::time::Instant::now() + self.deadlines.control, |d| self.clock.at(d));
        let input = self.read_by(until)?.map_or(Input::Deadline, Input::Msg);
        Ok(self.opening.handle(input, self.clock.now()))
    }

    /// Reads the agent's welcome if it has not been read (a client without
    /// a key reads it before the answer to its request).
    fn welcome_if_due(&mut self) -> Result<()> {
        while self.opening.welcome_due() {
            let acts = self.opening_input()?;
            self.drive(acts)?;
        }
        Ok(())
    }

    /// The session's secret, if the agent asked for a key and both proved they hold it.
    pub fn secret(&self) -> Option<[u8; auth::KEY_LEN]> {
        self.opening.secret()
    }

    fn send(&mut self, msg: &ClientMsg) -> Result<()> {
        let sent =
            wire::write_msg(&mut self.ctl, msg).map_err(|e| Error::network(format!("agent at {}: {e}", self.addr)));
        if sent.is_err() {
            // an agent that refused the hello has closed: its answer says why
            self.welcome_if_due()?;
        }
        sent
    }

    fn recv(&mut self) -> Result<AgentMsg> {
        self.recv_within(self.deadlines.control)
    }

    fn recv_within(&mut self, within: Duration) -> Result<AgentMsg> {
        self.welcome_if_due()?;
        self.read_answer(within)
    }

    fn read_answer(&mut self, within: Duration) -> Result<AgentMsg> {
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

    /// Asks for a test; waits in the agent's queue (within the queue
    /// deadline) if it is busy and the client asked to wait.
    pub fn request(&mut self, test: Test) -> Result<Ready> {
        let queue_ms = self.deadlines.queue.as_millis() as u64;
        let acts = self.opening.request(TestRequest { queue_ms, test }, self.clock.now());
        self.drive(acts)?;
        let r = self.opening.take_ready().ok_or_else(|| Error::network("the agent said nothing of the request"))?;
        Ok(Ready { tcp_port: r.tcp_port, udp_ports: r.udp_ports, token: r.token, agent: r.agent })
    }

    /// Sends a message of the test's own conversation (a copy's lists).
    pub fn tell(&mut self, msg: &ClientMsg) -> Result<()> {
        self.send(msg)
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

    /// The agent's next frame as it is (an error frame too) by `until`, or
    /// `None` if nothing came by then: what a conversation's machine is handed.
    pub fn frame_by(&mut self, until: std::time::Instant) -> Result<Option<AgentMsg>> {
        self.welcome_if_due()?;
        self.read_by(until)
    }

    /// The next frame by `until`, or `None` if nothing came by then.
    fn read_by(&self, until: std::time::Instant) -> Result<Option<AgentMsg>> {
        match crate::ctl::read_msg_by(&self.ctl, until) {
            Ok(m) => Ok(Some(m)),
            Err(wire::WireError::Timeout) => Ok(None),
            Err(e) => Err(Error::network(format!("agent at {}: {e}", self.addr))),
        }
    }

    /// Sends a conversation's frame: finish through [`Session::finish_ahead`] (the report is the machine's to read).
    pub fn send_frame(&mut self, msg: &ClientMsg) -> Result<()> {
        match msg {
            ClientMsg::Finish => self.finish_ahead(),
            m => self.send(m),
        }
    }

    /// The client's address on the control connection (data sockets bind to it).
    pub fn local_ip(&self) -> Result<std::net::IpAddr> {
        self.ctl.local_addr().map(|a| a.ip()).map_err(|e| Error::network(e.to_string()))
    }

    /// Sends finish before the test's last answers are read (the agent
    /// answers in order: those answers, then its report), a round trip
    /// less; [`Session::finish`] then only reads the report.
    pub fn finish_ahead(&mut self) -> Result<()> {
        self.finish_sent = true;
        self.send(&ClientMsg::Finish)
    }

    /// Ends the test; returns the agent's record of itself and its sockets.
    pub fn finish(&mut self) -> Result<EndInfo> {
        if !std::mem::take(&mut self.finish_sent) {
            self.send(&ClientMsg::Finish)?;
        }
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
            Ok(AgentMsg::Error { message, .. }) => Some(gridperf_core::wire::printable(&message)),
            _ => None,
        }
    }
}
