//! A measurement's conversation at the agent, after it said ready:
//!
//! - an rtt/transfer test ([`Echo`]): steps, each asked for by the client
//!   (a protocol, a size, a count for TCP), answered by step-ready, echoed
//!   by the driver's task until its count is done or the client's
//!   step-end (which the echo reads itself, between messages, so that the
//!   control channel costs no system call per exchange), and answered by
//!   step-done with the agent's figures; between steps the client may ask
//!   for the next at once (a pipelined step-end and step), which the agent
//!   answers in order. Then finish, answered by the report.
//! - a stream test ([`Stream`]): step-ready once the streams' connections
//!   are taken, the client's stream-go, the streams (their intervals,
//!   samples and results go out from the task as they come), finish, the
//!   report.
//!
//! The client's end of the steps is [`client::Steps`]; `pair` plays the
//! two against each other in virtual time.
//!
//! - a fanout test's consumer ([`Fanout`]): after ready, the agent takes
//!   the client's data connections (its driver does, each echoed by a
//!   thread of its own) while it waits for finish; every connection taken
//!   puts the client's silence deadline off again.
//!
//! Every refusal is told to the client, with what was wrong and what is
//! valid.

pub mod client;
#[cfg(test)]
mod pair;

use super::{aborted, out_of_turn, refuse, Action, End, Failure, Input, Nanos};
use crate::model::plan::Proto;
use crate::model::{EndInfo, SocketInfo, StepFigures};
use crate::wire::{AgentMsg, ClientMsg, ErrorCode, StepRequest};

/// What the agent's measurement machines ask of their driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    /// Echo messages of `size` bytes on `proto`'s data socket: `exchanges`
    /// of them (TCP and sendfile, when the client counts on it), else until
    /// the client's step-end; then [`Event::Stepped`].
    Echo { proto: Proto, size: u64, exchanges: Option<u64> },
    /// Run the streams; their frames go out as they come; then [`Event::Streamed`].
    Stream,
    /// Read the data sockets' state for the report; then [`Event::Sockets`].
    ReadSockets,
}

/// What comes of the tasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A step ended: the agent's figures for it.
    Stepped(StepFigures),
    /// The streams ended: their sockets, for the report.
    Streamed(Vec<SocketInfo>),
    /// The data sockets as they are at the end.
    Sockets(Vec<SocketInfo>),
    /// A fanout consumer's data connection was taken.
    Accepted,
}

type AgentAction = Action<AgentMsg, Task>;

/// What a driver must not hand a machine (an event of another task, a
/// message while a task runs): said, not obeyed.
fn internal(test: &str, state: impl std::fmt::Debug, input: impl std::fmt::Debug) -> Vec<AgentAction> {
    vec![Action::Fail(Failure::Net(format!("internal: the {test} test in state {state:?} was handed {input:?}")))]
}

/// Whether these actions end the conversation in failure.
fn fails(out: &[AgentAction]) -> bool {
    out.iter().any(|a| matches!(a, Action::Fail(_)))
}

/// Seconds of a span of nanoseconds, for words.
fn secs(n: Nanos) -> f64 {
    n as f64 / 1e9
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum EchoState {
    /// Waiting for a step or finish (the client answers at once).
    Between,
    /// The echo task runs.
    Stepping,
    /// The sockets are read for the report.
    Reporting,
    Over,
}

/// The agent's end of an rtt/transfer test, once its data sockets are open.
#[derive(Debug)]
pub struct Echo {
    /// The protocols whose data sockets this test opened.
    protos: Vec<Proto>,
    /// The largest message the request announced.
    max_size: u64,
    /// How long the client may take between steps.
    between: Nanos,
    state: EchoState,
    deadline: Option<Nanos>,
    agent: EndInfo,
}

impl Echo {
    /// A test whose data sockets for `protos` are open at `now`: it waits
    /// for the first step, at most `between`.
    pub fn new(protos: Vec<Proto>, max_size: u64, between: Nanos, agent: EndInfo, now: Nanos) -> Echo {
        Echo { protos, max_size, between, state: EchoState::Between, deadline: Some(now + between), agent }
    }

    fn step(&mut self, req: StepRequest) -> Vec<AgentAction> {
        let StepRequest { proto, size, exchanges } = req;
        let Some(p) = Proto::from_name(&proto).filter(|p| self.protos.contains(p)) else {
            let open: Vec<&str> = self.protos.iter().map(|p| p.name()).collect();
            return refuse(
                ErrorCode::BadMessage,
                format!("step for protocol {proto:?}, which this test did not open (it opened {})", open.join(", ")),
            );
        };
        if size == 0 || size > self.max_size {
            return refuse(
                ErrorCode::TooLarge,
                format!("step size {size} is outside 1..={} announced in the request", self.max_size),
            );
        }
        self.state = EchoState::Stepping;
        self.deadline = None;
        // a count is for the stream protocols; a UDP step ends by the client's word
        let exchanges = if p.is_stream() { exchanges } else { None };
        vec![Action::Send(AgentMsg::StepReady), Action::Do(Task::Echo { proto: p, size, exchanges })]
    }
}

impl End for Echo {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        use EchoState::*;
        let out = match (self.state, input) {
            (Between, Input::Msg(ClientMsg::Step(req))) => self.step(req),
            (Between, Input::Msg(ClientMsg::Finish)) => {
                self.state = Reporting;
                self.deadline = None;
                vec![Action::Do(Task::ReadSockets)]
            }
            (Between, Input::Msg(ClientMsg::Abort { reason })) => aborted(&reason, ""),
            (Between, Input::Msg(other)) => refuse(
                ErrorCode::BadMessage,
                format!("unexpected {other:?} between steps: a step or finish is valid there"),
            ),
            (Between, Input::Deadline) => refuse(
                ErrorCode::Timeout,
                format!("between steps: nothing from the client within {:.1} s", secs(self.between)),
            ),
            (Stepping, Input::Event(Event::Stepped(figures))) => {
                self.state = Between;
                self.deadline = Some(now + self.between);
                vec![Action::Send(AgentMsg::StepDone { figures })]
            }
            (Reporting, Input::Event(Event::Sockets(sockets))) => {
                self.state = Over;
                self.agent.sockets.extend(sockets);
                vec![Action::Send(AgentMsg::Report { agent: self.agent.clone() }), Action::Done]
            }
            (state, input) => internal("echo", state, input),
        };
        if fails(&out) {
            self.state = Over;
            self.deadline = None;
        }
        out
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        self.state == EchoState::Between
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum StreamState {
    /// Step-ready went; waiting for stream-go.
    Go,
    Streaming,
    /// Waiting for finish.
    Finish,
    Over,
}

/// The agent's end of a stream test, once its streams' connections are taken.
#[derive(Debug)]
pub struct Stream {
    /// How long the client may take to answer.
    within: Nanos,
    state: StreamState,
    deadline: Option<Nanos>,
    agent: EndInfo,
}

impl Stream {
    /// The streams' connections were taken at `now`: the machine and its
    /// first action, step-ready; stream-go is awaited at most `within`.
    pub fn new(within: Nanos, agent: EndInfo, now: Nanos) -> (Stream, Vec<AgentAction>) {
        let s = Stream { within, state: StreamState::Go, deadline: Some(now + within), agent };
        (s, vec![Action::Send(AgentMsg::StepReady)])
    }
}

impl End for Stream {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        use StreamState::*;
        let out = match (self.state, input) {
            (Go, Input::Msg(ClientMsg::StreamGo)) => {
                self.state = Streaming;
                self.deadline = None;
                vec![Action::Do(Task::Stream)]
            }
            (Go, Input::Msg(other)) => out_of_turn(other, "stream-go"),
            (Go, Input::Deadline) => refuse(
                ErrorCode::Timeout,
                format!("waiting for stream-go: nothing from the client within {:.1} s", secs(self.within)),
            ),
            (Streaming, Input::Event(Event::Streamed(sockets))) => {
                self.state = Finish;
                self.deadline = Some(now + self.within);
                self.agent.sockets = sockets;
                Vec::new()
            }
            (Finish, Input::Msg(ClientMsg::Finish)) => {
                self.state = Over;
                vec![Action::Send(AgentMsg::Report { agent: self.agent.clone() }), Action::Done]
            }
            (Finish, Input::Msg(other)) => out_of_turn(other, "finish"),
            (Finish, Input::Deadline) => refuse(
                ErrorCode::Timeout,
                format!("waiting for finish: nothing from the client within {:.1} s", secs(self.within)),
            ),
            (state, input) => internal("stream", state, input),
        };
        if fails(&out) {
            self.state = Over;
            self.deadline = None;
        }
        out
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        matches!(self.state, StreamState::Go | StreamState::Finish)
    }
}

/// The agent's end of a fanout test, once it said ready: its driver takes
/// the client's data connections, each echoed by a thread of its own,
/// until the client's finish.
#[derive(Debug)]
pub struct Fanout {
    /// How long the client may stay silent: no message and no connection.
    quiet: Nanos,
    deadline: Option<Nanos>,
    agent: EndInfo,
}

impl Fanout {
    /// Ready went at `now`; the client's connections or finish are awaited at most `quiet`.
    pub fn new(quiet: Nanos, agent: EndInfo, now: Nanos) -> Fanout {
        Fanout { quiet, deadline: Some(now + quiet), agent }
    }
}

impl End for Fanout {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        if self.deadline.is_none() {
            return internal("fanout", "over", input);
        }
        let out = match input {
            Input::Msg(ClientMsg::Finish) => {
                vec![Action::Send(AgentMsg::Report { agent: self.agent.clone() }), Action::Done]
            }
            Input::Msg(ClientMsg::Abort { reason }) => aborted(&reason, ""),
            Input::Msg(other) => refuse(
                ErrorCode::BadMessage,
                format!("unexpected {other:?} during a fanout test: finish is valid there"),
            ),
            Input::Event(Event::Accepted) => {
                self.deadline = Some(now + self.quiet);
                return Vec::new();
            }
            Input::Deadline => refuse(
                ErrorCode::Timeout,
                format!("the fanout client went silent: no connection and no message within {:.1} s", secs(self.quiet)),
            ),
            other => internal("fanout", "serving", other),
        };
        self.deadline = None;
        out
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        self.deadline.is_some()
    }
}

#[cfg(test)]
mod tests;
