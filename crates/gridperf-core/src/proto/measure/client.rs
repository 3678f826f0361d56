//! The client's end of an rtt/transfer test's steps, once the agent said
//! ready: ask for a step and wait for step-ready; end it (step-end, then a
//! nudge of the data socket, unless the agent counts the exchanges itself)
//! and wait for step-done with the agent's figures.
//!
//! A step the client ends may be followed by the next one's request in the
//! same flight ([`Steps::end`] with `next`): the agent reads its control
//! messages in order, so it answers step-done, then step-ready, and two
//! steps cost one round trip where they cost two. Not after a step the
//! agent counts: it may still be echoing when the request arrives, and the
//! request would be read as the end of its count.

use crate::model::StepFigures;
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, StepRequest};

/// What the client's steps ask of their driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepTask {
    /// Wake the agent's echo, which may be blocked reading the data
    /// socket (a UDP datagram, a TCP message) when step-end arrives.
    Nudge,
}

type ClientAction = Action<ClientMsg, StepTask>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No step asked for, or the last one's figures read.
    Between,
    /// A step was asked for: waiting for step-ready.
    Asked,
    /// The step runs on the data sockets (the client's exchanges).
    Stepping,
    /// Step-end went (or the agent counts): waiting for step-done.
    Ending,
    Over,
}

impl State {
    /// What the client waits for in this state, for words.
    fn awaits(self) -> &'static str {
        match self {
            State::Asked => "step-ready",
            State::Ending => "step-done",
            _ => "nothing",
        }
    }
}

/// The client's end of the steps.
#[derive(Debug)]
pub struct Steps {
    /// How long the agent may take to answer.
    within: Nanos,
    state: State,
    deadline: Option<Nanos>,
    /// The next step was asked for behind the last one's step-end: its
    /// step-ready follows step-done.
    next_asked: bool,
    figures: Option<StepFigures>,
}

impl Steps {
    /// Steps whose answers are awaited at most `within` each.
    pub fn new(within: Nanos) -> Steps {
        Steps { within, state: State::Between, deadline: None, next_asked: false, figures: None }
    }

    fn awaiting(&mut self, state: State, now: Nanos) {
        self.state = state;
        self.deadline = Some(now + self.within);
    }

    /// Asks for a step at `now`; the machine then waits for step-ready.
    pub fn step(&mut self, req: StepRequest, now: Nanos) -> Vec<ClientAction> {
        if self.state != State::Between {
            return self.misused("a step asked for");
        }
        self.awaiting(State::Asked, now);
        vec![Action::Send(ClientMsg::Step(req))]
    }

    /// Ends the step that runs at `now`: step-end and the nudge unless
    /// `counted_by_agent`, and with `next` (not after a counted step) the
    /// next step's request in the same flight. The machine then waits for
    /// step-done, and for the next step's step-ready behind it.
    pub fn end(&mut self, counted_by_agent: bool, next: Option<StepRequest>, now: Nanos) -> Vec<ClientAction> {
        if self.state != State::Stepping {
            return self.misused("the end of a step");
        }
        let mut out = Vec::new();
        if !counted_by_agent {
            out.push(Action::Send(ClientMsg::StepEnd));
            out.push(Action::Do(StepTask::Nudge));
            if let Some(req) = next {
                out.push(Action::Send(ClientMsg::Step(req)));
                self.next_asked = true;
            }
        }
        self.awaiting(State::Ending, now);
        out
    }

    /// The figures of the step that ended last, once (after [`Steps::end`]).
    pub fn take_figures(&mut self) -> Option<StepFigures> {
        self.figures.take()
    }

    /// Whether a step runs (its step-ready came, its end was not asked for).
    pub fn stepping(&self) -> bool {
        self.state == State::Stepping
    }

    /// A caller's mistake (a step asked for while one runs): said, and the steps end.
    fn misused(&mut self, what: &str) -> Vec<ClientAction> {
        let words = format!("internal: {what} while the steps were {:?}", self.state);
        self.over();
        vec![Action::Fail(Failure::Net(words))]
    }

    fn over(&mut self) {
        self.state = State::Over;
        self.deadline = None;
    }
}

impl End for Steps {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = StepTask;
    type Event = ();

    fn handle(&mut self, input: Input<AgentMsg, ()>, now: Nanos) -> Vec<ClientAction> {
        use State::*;
        let awaits = self.state.awaits();
        match (self.state, input) {
            (Asked, Input::Msg(AgentMsg::StepReady)) => {
                self.state = Stepping;
                self.deadline = None;
                Vec::new()
            }
            (Ending, Input::Msg(AgentMsg::StepDone { figures })) => {
                self.figures = Some(figures);
                if std::mem::take(&mut self.next_asked) {
                    self.awaiting(Asked, now);
                } else {
                    self.state = Between;
                    self.deadline = None;
                }
                Vec::new()
            }
            (_, Input::Msg(AgentMsg::Error { code, message })) => {
                self.over();
                vec![Action::Fail(Failure::agent(code, &message))]
            }
            (Asked | Ending, Input::Deadline) => {
                self.over();
                let s = self.within as f64 / 1e9;
                vec![Action::Fail(Failure::Net(format!("no {awaits} from the agent within {s:.1} s")))]
            }
            (_, Input::Msg(other)) => {
                self.over();
                vec![Action::Fail(Failure::Net(format!("expected {awaits} from the agent, got {other:?}")))]
            }
            (state, input) => {
                self.over();
                vec![Action::Fail(Failure::Net(format!(
                    "internal: the steps in state {state:?} were handed {input:?}"
                )))]
            }
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        matches!(self.state, State::Asked | State::Ending)
    }
}
