//! A session's opening, at both ends: hello and welcome (the magic, the
//! protocol version), the key's challenge and both proofs when the agent
//! asks for one, then the request and the agent's answer (queued, ready or
//! refused). Every test kind opens so; what follows is the kind's own.
//!
//! - [`Opening`] is the client's end. Without a key it sends its request
//!   right behind its hello and reads the welcome before the answer (a
//!   round trip less: 270 ms at CERN-Tokyo); with one it answers the
//!   challenge first and checks the agent's own proof. A client given a key
//!   refuses an agent that asks for none, unless told it may.
//! - [`Greeting`] is the agent's end, up to the request it will check
//!   against its limits: the refusals of a stranger (a bad magic, another
//!   version, no key, a wrong one) are told before anything is spent.

use super::{Action, End, Failure, Input, Nanos};
use crate::auth::{self, Key, KEY_LEN};
use crate::wire::{self, AgentMsg, ClientMsg, ErrorCode, TestRequest};

/// What the client's driver does besides sending: say it waits in the agent's queue.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    Queued { ahead: u32 },
}

/// What the agent said when it was ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    pub tcp_port: Option<u16>,
    pub udp_ports: Vec<u16>,
    pub token: u64,
    pub agent: crate::model::EndInfo,
}

/// Who the client is: its software, its key (if any), whether the agent
/// must prove it holds it, a fresh nonce, and words for the refusals.
#[derive(Debug, Clone)]
pub struct Me {
    pub software: String,
    pub key: Option<Key>,
    pub must_prove: bool,
    pub nonce: [u8; KEY_LEN],
    /// "the agent at ADDR".
    pub agent_words: String,
    /// Where a key is looked for when --key is not given (for the refusal's words).
    pub key_hint: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ClientState {
    /// The welcome is awaited before anything else (a client with a key).
    Welcome,
    /// The agent's proof is awaited.
    AuthOk {
        agent_nonce: [u8; KEY_LEN],
    },
    /// Open: a request may go.
    Open,
    /// The request went: its answer (behind the welcome, if that is still due).
    Answer,
    /// In the agent's queue.
    Queued,
    Over,
}

/// The client's end of a session's opening.
#[derive(Debug)]
pub struct Opening {
    me: Me,
    control: Nanos,
    /// How long the client waits in a busy agent's queue.
    queue: Nanos,
    state: ClientState,
    welcome_due: bool,
    deadline: Option<Nanos>,
    agent_software: String,
    secret: Option<[u8; KEY_LEN]>,
    ready: Option<Ready>,
}

impl Opening {
    pub fn new(me: Me, control: Nanos, queue: Nanos) -> Opening {
        Opening {
            me,
            control,
            queue,
            state: ClientState::Open,
            welcome_due: false,
            deadline: None,
            agent_software: String::new(),
            secret: None,
            ready: None,
        }
    }

    /// The hello. Without a key the session is open at once (the welcome
    /// is read before the request's answer); with one the welcome and the
    /// challenge come first.
    pub fn start(&mut self, now: Nanos) -> Vec<Action<ClientMsg, Note>> {
        let hello = ClientMsg::Hello {
            magic: wire::MAGIC.into(),
            version: wire::PROTOCOL_VERSION,
            software: self.me.software.clone(),
        };
        self.welcome_due = true;
        if self.me.key.is_some() {
            self.state = ClientState::Welcome;
            self.deadline = Some(now + self.control);
            vec![Action::Send(hello)]
        } else {
            vec![Action::Send(hello), Action::Done]
        }
    }

    /// The request, once open.
    pub fn request(&mut self, request: TestRequest, now: Nanos) -> Vec<Action<ClientMsg, Note>> {
        self.state = ClientState::Answer;
        self.deadline = Some(now + self.control);
        vec![Action::Send(ClientMsg::Request(request))]
    }

    /// Whether the agent's welcome is still unread (an agent that refused
    /// the hello said why in it, then closed).
    pub fn welcome_due(&self) -> bool {
        self.welcome_due
    }

    /// The agent's software, from its welcome.
    pub fn agent_software(&self) -> &str {
        &self.agent_software
    }

    /// The session's secret, when both ends proved they hold the key.
    pub fn secret(&self) -> Option<[u8; KEY_LEN]> {
        self.secret
    }

    /// What the agent said when ready.
    pub fn take_ready(&mut self) -> Option<Ready> {
        self.ready.take()
    }

    fn fail(&mut self, f: Failure) -> Vec<Action<ClientMsg, Note>> {
        self.state = ClientState::Over;
        self.deadline = None;
        vec![Action::Fail(f)]
    }

    /// The welcome: the magic, the version, and what the challenge asks.
    fn welcome(
        &mut self,
        magic: String,
        version: u32,
        software: String,
        challenge: Option<String>,
        now: Nanos,
    ) -> Vec<Action<ClientMsg, Note>> {
        let at = self.me.agent_words.clone();
        self.welcome_due = false;
        if magic != wire::MAGIC {
            return self.fail(Failure::Net(format!("{at} is not a gridperf agent")));
        }
        if version != wire::PROTOCOL_VERSION {
            return self.fail(Failure::Refused(format!(
                "protocol version mismatch: {at} ({}) speaks version {version}, this client ({}) speaks version {}; \
                 run the same gridperf release on both ends",
                wire::printable(&software),
                self.me.software,
                wire::PROTOCOL_VERSION
            )));
        }
        self.agent_software = software;
        match (challenge, &self.me.key) {
            (Some(c), Some(key)) => {
                let Some(agent_nonce) = auth::unhex(&c) else {
                    return self.fail(Failure::Net(format!("{at} sent a challenge that is not 32 bytes of hex")));
                };
                let auth = ClientMsg::Auth {
                    key: key.name.clone(),
                    nonce: auth::hex(&self.me.nonce),
                    proof: key.client_proof(&agent_nonce, &self.me.nonce),
                };
                self.state = ClientState::AuthOk { agent_nonce };
                self.deadline = Some(now + self.control);
                vec![Action::Send(auth)]
            }
            (Some(_), None) => self.fail(Failure::Refused(format!(
                "{at} serves only clients with a key: give --key FILE (or keep one at {}); `gridperf keygen NAME` \
                 makes one, and the agent's operator adds its line to serve --auth",
                self.me.key_hint
            ))),
            (None, _) if self.me.must_prove => self.fail(Failure::Refused(format!(
                "{at} asks for no key, but --key was given: an agent that holds the key proves it, so this one is \
                 not the agent you meant, or something between the two dropped its challenge; give --insecure to \
                 use an agent without keys"
            ))),
            (None, _) if self.state == ClientState::Welcome => {
                self.state = ClientState::Open;
                self.deadline = None;
                vec![Action::Done]
            }
            // the welcome read before the request's answer
            (None, _) => Vec::new(),
        }
    }
}

impl End for Opening {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = Note;
    type Event = ();

    fn handle(&mut self, input: Input<AgentMsg, ()>, now: Nanos) -> Vec<Action<ClientMsg, Note>> {
        let at = self.me.agent_words.clone();
        let msg = match input {
            Input::Msg(m) => m,
            Input::Deadline => {
                let what = if self.state == ClientState::Queued { "in its queue, " } else { "" };
                return self.fail(Failure::Net(format!("{at}: no answer {what}in time")));
            }
            Input::Event(()) => return Vec::new(),
        };
        if let AgentMsg::Error { code, message } = msg {
            return self.fail(Failure::agent(code, &message));
        }
        // the welcome comes first, whatever was sent behind the hello
        if self.welcome_due && matches!(self.state, ClientState::Welcome | ClientState::Answer | ClientState::Open) {
            return match msg {
                AgentMsg::Welcome { magic, version, software, challenge } => {
                    self.welcome(magic, version, software, challenge, now)
                }
                other => self.fail(Failure::Net(format!("unexpected answer to hello: {other:?}"))),
            };
        }
        match (self.state, msg) {
            (ClientState::Over | ClientState::Open, _) => Vec::new(),
            (ClientState::AuthOk { agent_nonce }, AgentMsg::AuthOk { proof }) => {
                let Some(key) = self.me.key.clone() else { return self.fail(Failure::Net("internal: no key".into())) };
                if !key.agent_proves(&agent_nonce, &self.me.nonce, &proof) {
                    return self.fail(Failure::Refused(format!(
                        "{at} accepted key {:?} but could not prove it holds it: not the agent you meant?",
                        key.name
                    )));
                }
                self.secret = Some(key.session_secret(&agent_nonce, &self.me.nonce));
                self.state = ClientState::Open;
                self.deadline = None;
                vec![Action::Done]
            }
            (ClientState::AuthOk { .. }, other) => {
                self.fail(Failure::Net(format!("unexpected answer to the key: {other:?}")))
            }
            (ClientState::Answer, AgentMsg::Queued { ahead }) => {
                self.state = ClientState::Queued;
                self.deadline = Some(now + self.queue + self.control);
                vec![Action::Do(Note::Queued { ahead })]
            }
            (ClientState::Answer | ClientState::Queued, AgentMsg::Ready { tcp_port, udp_ports, token, agent }) => {
                self.ready = Some(Ready { tcp_port, udp_ports, token, agent });
                self.state = ClientState::Over;
                self.deadline = None;
                vec![Action::Done]
            }
            (_, other) => self.fail(Failure::Net(format!("expected ready from the agent, got {other:?}"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        !matches!(self.state, ClientState::Open | ClientState::Over)
    }
}

/// Where the agent's greeting stopped, for its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Hello,
    Version,
    Auth,
    Request,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum AgentState {
    Hello,
    Auth,
    Request,
    Over,
}

/// The agent's end of a session's opening, up to the request.
#[derive(Debug)]
pub struct Greeting {
    software: String,
    /// The keys this agent accepts and its fresh challenge, when it asks for one.
    auth: Option<(Vec<Key>, [u8; KEY_LEN])>,
    state: AgentState,
    stage: Stage,
    until: Nanos,
    secret: Option<[u8; KEY_LEN]>,
    request: Option<TestRequest>,
}

impl Greeting {
    /// Everything before the request must come by `until`.
    pub fn new(software: String, auth: Option<(Vec<Key>, [u8; KEY_LEN])>, until: Nanos) -> Greeting {
        Greeting { software, auth, state: AgentState::Hello, stage: Stage::Hello, until, secret: None, request: None }
    }

    /// Where it stopped, or is.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Whether the client proved it holds a key (its session's secret).
    pub fn secret(&self) -> Option<[u8; KEY_LEN]> {
        self.secret
    }

    /// The request, once read.
    pub fn take_request(&mut self) -> Option<TestRequest> {
        self.request.take()
    }

    fn refuse(&mut self, code: ErrorCode, message: String) -> Vec<Action<AgentMsg, ()>> {
        self.state = AgentState::Over;
        vec![Action::Send(AgentMsg::Error { code, message: message.clone() }), Action::Fail(Failure::Net(message))]
    }
}

impl End for Greeting {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = ();
    type Event = ();

    fn handle(&mut self, input: Input<ClientMsg, ()>, _now: Nanos) -> Vec<Action<AgentMsg, ()>> {
        let msg = match input {
            Input::Msg(m) => m,
            Input::Deadline => {
                let what = match self.state {
                    AgentState::Hello => "before hello",
                    AgentState::Auth => "waiting for the key",
                    _ => "reading the request",
                };
                return self.refuse(ErrorCode::Timeout, format!("{what}: timed out"));
            }
            Input::Event(()) => return Vec::new(),
        };
        match (self.state, msg) {
            (AgentState::Over, _) => Vec::new(),
            (AgentState::Hello, ClientMsg::Hello { magic, version, software }) => {
                if magic != wire::MAGIC {
                    return self.refuse(ErrorCode::BadMessage, format!("bad magic {:?}", wire::printable(&magic)));
                }
                if version != wire::PROTOCOL_VERSION {
                    self.stage = Stage::Version;
                    return self.refuse(
                        ErrorCode::VersionMismatch,
                        format!(
                            "protocol version mismatch: the client ({}) speaks version {version}, this agent ({}) \
                             speaks version {}; run the same gridperf release on both ends",
                            wire::printable(&software),
                            self.software,
                            wire::PROTOCOL_VERSION
                        ),
                    );
                }
                let challenge = self.auth.as_ref().map(|(_, nonce)| auth::hex(nonce));
                let welcome = AgentMsg::Welcome {
                    magic: wire::MAGIC.into(),
                    version: wire::PROTOCOL_VERSION,
                    software: self.software.clone(),
                    challenge,
                };
                if self.auth.is_some() {
                    self.state = AgentState::Auth;
                    self.stage = Stage::Auth;
                } else {
                    self.state = AgentState::Request;
                    self.stage = Stage::Request;
                }
                vec![Action::Send(welcome)]
            }
            (AgentState::Hello, other) => self.refuse(ErrorCode::BadMessage, format!("expected hello, got {other:?}")),
            (AgentState::Auth, ClientMsg::Auth { key, nonce: theirs, proof }) => {
                let Some((keys, nonce)) = self.auth.as_ref() else { return Vec::new() };
                let found = keys.iter().find(|k| k.name == key);
                match (found, auth::unhex(&theirs)) {
                    (Some(k), Some(cn)) if k.client_proves(nonce, &cn, &proof) => {
                        let ok = AgentMsg::AuthOk { proof: k.agent_proof(nonce, &cn) };
                        self.secret = Some(k.session_secret(nonce, &cn));
                        self.state = AgentState::Request;
                        self.stage = Stage::Request;
                        vec![Action::Send(ok)]
                    }
                    // one answer for an unknown name and a wrong proof: nothing learnt
                    _ => self.refuse(
                        ErrorCode::Refused,
                        format!(
                            "authentication failed for key {:?}: not a key this agent accepts, or not its secret",
                            wire::printable(&key)
                        ),
                    ),
                }
            }
            (AgentState::Auth, _) => self.refuse(
                ErrorCode::Refused,
                "this agent serves only clients with a key (serve --auth): give the client --key FILE (gridperf \
                 keygen makes one)"
                    .into(),
            ),
            (AgentState::Request, ClientMsg::Request(r)) => {
                self.request = Some(r);
                self.state = AgentState::Over;
                vec![Action::Done]
            }
            (AgentState::Request, other) => {
                self.refuse(ErrorCode::BadMessage, format!("expected a request, got {other:?}"))
            }
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        (self.state != AgentState::Over).then_some(self.until)
    }

    fn wants_msg(&self) -> bool {
        self.state != AgentState::Over
    }
}

#[cfg(test)]
mod tests;
