//! The control conversation as state machines, without I/O.
//!
//! Each end of a conversation is an [`End`]: it is handed what arrived
//! (a message, the end of a task it asked for, or its deadline) with the
//! time, and answers with what to do: frames to send, tasks for its driver
//! (open the data connections, run the pool of senders, rename the files),
//! and whether the conversation ended, well or not. It keeps its own
//! deadline. The drivers (`runner`, `engines/copy` and `agent/copy` in the
//! binary crate) only move frames, run the tasks and fire deadlines; the
//! data path stays plain blocking I/O in the tasks.
//!
//! What this buys: the order of the messages, the early stream-go and the
//! round trips a copy costs are decided in one place, and tested in
//! virtual time by `copy::pair` (both ends against each other, with a one-way
//! latency), not by timing a lab.
//!
//! - [`session`]: every session's opening (hello, the key, the request), at both ends;
//! - [`copy`]: a push and a pull, at the client and at the agent; a copy
//!   between agents at a source agent ([`copy::Source`]) and at the client
//!   for each pair ([`copy::Leases`]);
//! - [`measure`]: the steps of an rtt/transfer test and a stream test, at the agent.

pub mod copy;
pub mod measure;
pub mod session;

use crate::wire::{AgentMsg, ClientMsg, ErrorCode};

/// A point in time, in nanoseconds on a clock the driver chooses (the
/// monotonic clock; virtual time in `pair`).
pub type Nanos = u64;

/// Nanoseconds of a duration (saturating).
pub fn nanos(d: std::time::Duration) -> Nanos {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// A driver's clock for its machine: nanoseconds since the conversation began.
pub struct Clock(std::time::Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(std::time::Instant::now())
    }
    /// Now, on this clock.
    pub fn now(&self) -> Nanos {
        nanos(self.0.elapsed())
    }
    /// The instant `n` stands for.
    pub fn at(&self, n: Nanos) -> std::time::Instant {
        self.0 + std::time::Duration::from_nanos(n)
    }
}

/// What an end is handed.
#[derive(Debug, Clone, PartialEq)]
pub enum Input<M, E> {
    /// A message from the other end.
    Msg(M),
    /// A task this end asked for ended, or something happened to one.
    Event(E),
    /// The end's deadline passed.
    Deadline,
}

/// What an end asks its driver to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<M, T> {
    /// Send this frame on the control connection.
    Send(M),
    /// Start this task; what comes of it returns as an [`Input::Event`].
    Do(T),
    /// The conversation ended well.
    Done,
    /// The conversation ended in failure: anything to tell the other end
    /// was sent before (an error frame, an abort).
    Fail(Failure),
}

/// Why a conversation ended in failure.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The agent said why (its error frame).
    Agent { code: ErrorCode, message: String },
    /// The other end broke the conversation, went quiet, or gave up: these words say how.
    Net(String),
    /// The user asked for what cannot be done.
    Usage(String),
    /// This end will not go on with that peer (another version, no key, a proof that fails).
    Refused(String),
}

impl Failure {
    /// The agent's error frame, its words made printable (shown, never obeyed).
    pub fn agent(code: ErrorCode, message: &str) -> Failure {
        Failure::Agent { code, message: crate::wire::printable(message) }
    }

    /// Whether an agent's error code is a refusal (it will not run this),
    /// rather than an error in what it ran.
    pub fn is_refusal(code: ErrorCode) -> bool {
        use ErrorCode::*;
        matches!(code, Busy | VersionMismatch | TooLarge | Unsupported | Refused)
    }

    /// The words a client says for it: the agent's refusal or error, or the network's.
    pub fn said(&self) -> String {
        match self {
            Failure::Agent { code, message } if Failure::is_refusal(*code) => format!("the agent refused: {message}"),
            Failure::Agent { message, .. } => format!("the agent reported an error: {message}"),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Agent { message, .. } => write!(f, "{message}"),
            Failure::Net(m) | Failure::Usage(m) | Failure::Refused(m) => write!(f, "{m}"),
        }
    }
}

/// One end of a conversation.
pub trait End {
    /// What it receives.
    type In;
    /// What it sends.
    type Out;
    /// Its drivers' tasks.
    type Task;
    /// What comes of them.
    type Event;
    /// Takes what arrived at `now`; what to do.
    fn handle(&mut self, input: Input<Self::In, Self::Event>, now: Nanos) -> Vec<Action<Self::Out, Self::Task>>;
    /// When [`Input::Deadline`] is due, if this end is waiting for the other.
    fn deadline(&self) -> Option<Nanos>;
    /// Whether it waits for the other end's next message (else for a task
    /// it asked for, or for nothing more).
    fn wants_msg(&self) -> bool;
}

/// The agent tells the client why, and ends.
pub(crate) fn refuse<T>(code: ErrorCode, message: String) -> Vec<Action<AgentMsg, T>> {
    vec![Action::Send(AgentMsg::Error { code, message: message.clone() }), Action::Fail(Failure::Net(message))]
}

/// The client gave up: nothing to tell it.
pub(crate) fn aborted<T>(reason: &str, more: &str) -> Vec<Action<AgentMsg, T>> {
    vec![Action::Fail(Failure::Net(format!("client aborted: {}{more}", crate::wire::printable(reason))))]
}

/// What a client's message out of turn ends: an abort is the client's
/// reason, anything else a bad message.
pub(crate) fn out_of_turn<T>(msg: ClientMsg, expected: &str) -> Vec<Action<AgentMsg, T>> {
    match msg {
        ClientMsg::Abort { reason } => aborted(&reason, ""),
        other => refuse(ErrorCode::BadMessage, format!("expected {expected}, got {other:?}")),
    }
}
