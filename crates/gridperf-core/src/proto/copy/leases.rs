//! The client's end of one source's conversation in a copy between agents,
//! once the source was told where to send: each copy-lease answered from
//! the one queue the client keeps (a task: the blocks reported acknowledged
//! come off the books, at most an even share of what is left is given),
//! what the source's pool did noted for the user, and copy-sent the end.
//! The source is given `within` for each word; quiet longer, it is lost.

use super::{shown, Event, Task};
use crate::model::{CopyEvent, CopyStream};
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg};

/// How a source's sending ended: what changed meanwhile, its streams and events.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceSent {
    pub changed: Vec<u32>,
    pub streams: Vec<CopyStream>,
    pub events: Vec<CopyEvent>,
    pub tail_blocks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// The source's next word is due by the deadline.
    Sending,
    /// A lease is being drawn from the queue.
    Leasing,
    Over,
}

/// The client's end of a source's leases.
#[derive(Debug)]
pub struct Leases {
    state: State,
    within: Nanos,
    deadline: Option<Nanos>,
    sent: Option<SourceSent>,
}

impl Leases {
    /// After copy-to: the source's first word is due within `within`.
    pub fn new(within: Nanos, now: Nanos) -> Leases {
        Leases { state: State::Sending, within, deadline: Some(now + within), sent: None }
    }

    /// How the source's sending ended, once the conversation is done.
    pub fn take_sent(&mut self) -> Option<SourceSent> {
        self.sent.take()
    }

    fn sending(&mut self, now: Nanos, out: Vec<Action<ClientMsg, Task>>) -> Vec<Action<ClientMsg, Task>> {
        self.state = State::Sending;
        self.deadline = Some(now + self.within);
        out
    }

    fn fail(&mut self, f: Failure) -> Vec<Action<ClientMsg, Task>> {
        self.state = State::Over;
        self.deadline = None;
        vec![Action::Fail(f)]
    }
}

impl End for Leases {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<AgentMsg, Event>, now: Nanos) -> Vec<Action<ClientMsg, Task>> {
        match (self.state, input) {
            (State::Over, _) => Vec::new(),
            (State::Sending, Input::Msg(AgentMsg::CopyLease { done, want })) => {
                self.state = State::Leasing;
                self.deadline = None;
                vec![Action::Do(Task::Lease { done, want })]
            }
            (State::Leasing, Input::Event(Event::Leased { blocks, last })) => {
                self.sending(now, vec![Action::Send(ClientMsg::CopyLeased { blocks, last })])
            }
            (State::Sending, Input::Msg(AgentMsg::CopyEvent { event })) => {
                self.sending(now, vec![Action::Do(Task::Note { event })])
            }
            (State::Sending, Input::Msg(AgentMsg::CopySent { changed, streams, events, tail_blocks })) => {
                self.state = State::Over;
                self.deadline = None;
                self.sent = Some(SourceSent { changed, streams, events, tail_blocks });
                vec![Action::Done]
            }
            (_, Input::Msg(AgentMsg::Error { code, message })) => self.fail(Failure::agent(code, &message)),
            (State::Sending, Input::Msg(other)) => {
                self.fail(Failure::Net(format!("expected a lease or copy-sent, got {}", shown(&other))))
            }
            (State::Sending, Input::Deadline) => self.fail(Failure::Net(format!(
                "no word from the source in {} s",
                std::time::Duration::from_nanos(self.within).as_secs()
            ))),
            (state, input) => self.fail(Failure::Net(format!("internal: {input:?} while {state:?}"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        self.state == State::Sending
    }
}
