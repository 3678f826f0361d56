//! The client's end of a push and of a pull.

use super::{list_and_open, needs_in_parts, net, shown, ClientAction, Event, Parts, Task, Waits};
use crate::model::{CopyEvent, CopyStream, EndInfo};
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome};

/// What the words "the copy stopped" carry: what arrived is kept.
fn stopped(why: &str) -> String {
    format!("the copy stopped: {why} (what arrived is kept partial: --resume goes on)")
}

#[derive(Debug, Clone, PartialEq)]
enum PushState {
    /// The needs are read while the data connections open.
    Needs,
    /// The blocks go; step-ready may come meanwhile.
    Sending,
    /// Every block is acknowledged: step-ready is awaited before copy-done.
    Ready {
        changed: Vec<u32>,
    },
    /// The sending stopped: the agent may say why (its error) before this end gives up.
    Stopping {
        why: String,
    },
    Results,
    Report,
    Over,
}

/// The client's end of a push: it sends `files`, the agent writes them.
#[derive(Debug)]
pub struct Push {
    files: Vec<CopyFile>,
    streams: u32,
    waits: Waits,
    state: PushState,
    needs: Parts<CopyNeed>,
    opened: bool,
    ready_seen: bool,
    outcomes: Parts<CopyOutcome>,
    agent_streams: Vec<CopyStream>,
    agent: Option<EndInfo>,
    deadline: Option<Nanos>,
}

impl Push {
    /// A push of `files` over `streams` first connections.
    pub fn new(files: Vec<CopyFile>, streams: u32, waits: Waits) -> Push {
        Push {
            files,
            streams,
            waits,
            state: PushState::Needs,
            needs: Parts::default(),
            opened: false,
            ready_seen: false,
            outcomes: Parts::default(),
            agent_streams: Vec::new(),
            agent: None,
            deadline: None,
        }
    }

    /// The first actions: the list in parts, and the data connections open
    /// while the agent looks at the files (a round trip less before the
    /// first block).
    pub fn start(&mut self, now: Nanos) -> Vec<ClientAction> {
        self.deadline = Some(now + self.waits.list);
        list_and_open(&self.files, self.streams)
    }

    /// What the agent needs, once read.
    pub fn needs(&self) -> &[CopyNeed] {
        &self.needs.items
    }

    /// How each file ended at the agent, once the results are read.
    pub fn outcomes(&self) -> &[CopyOutcome] {
        &self.outcomes.items
    }

    /// The agent's streams, from its last results part.
    pub fn take_agent_streams(&mut self) -> Vec<CopyStream> {
        std::mem::take(&mut self.agent_streams)
    }

    /// The agent's report of itself, once read.
    pub fn take_agent(&mut self) -> Option<EndInfo> {
        self.agent.take()
    }

    fn fail(&mut self, f: Failure) -> Vec<ClientAction> {
        self.state = PushState::Over;
        self.deadline = None;
        vec![Action::Fail(f)]
    }

    /// Stream-go and the blocks, once the needs are read and the connections open.
    fn maybe_go(&mut self) -> Vec<ClientAction> {
        if !(self.needs.complete && self.opened) {
            return Vec::new();
        }
        self.state = PushState::Sending;
        self.deadline = None;
        // the blocks go at once: the agent reads them once it has taken
        // every connection (its step-ready is read after them)
        vec![Action::Send(ClientMsg::StreamGo), Action::Do(Task::SendBlocks { needs: self.needs.items.clone() })]
    }

    /// Copy-done and finish together: nothing follows the results but the report.
    fn done(&mut self, changed: Vec<u32>, now: Nanos) -> Vec<ClientAction> {
        self.state = PushState::Results;
        self.deadline = Some(now + self.waits.list);
        vec![Action::Send(ClientMsg::CopyDone { changed }), Action::Send(ClientMsg::Finish)]
    }
}

impl End for Push {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<AgentMsg, Event>, now: Nanos) -> Vec<ClientAction> {
        let state = self.state.clone();
        match (state, input) {
            (PushState::Over, _) => Vec::new(),
            (PushState::Stopping { why }, Input::Msg(AgentMsg::StepReady)) => {
                self.deadline = Some(now + self.waits.control.min(2_000_000_000));
                self.state = PushState::Stopping { why };
                Vec::new()
            }
            // the writing end said why it closed a stream: its words are the better ones
            (PushState::Stopping { .. }, Input::Msg(AgentMsg::Error { code, message })) => {
                self.fail(Failure::agent(code, &message))
            }
            (PushState::Stopping { why }, _) => {
                let mut out = vec![Action::Send(ClientMsg::Abort { reason: why.clone() })];
                out.extend(self.fail(net(stopped(&why))));
                out
            }
            (_, Input::Msg(AgentMsg::Error { code, message })) => self.fail(Failure::agent(code, &message)),
            (PushState::Needs, Input::Msg(AgentMsg::CopyNeeds { needs, last })) if !self.needs.complete => {
                if self.needs.take(needs, last).is_err() {
                    return self.fail(net("the agent's needs is longer than a copy takes"));
                }
                // a need of a file the list did not have is the agent's mistake
                if self.needs.items.iter().any(|n| n.file as usize >= self.files.len()) {
                    return self.fail(net("the agent needs a file the list did not have"));
                }
                self.deadline = (!last).then_some(now + self.waits.list);
                self.maybe_go()
            }
            (PushState::Needs, Input::Event(Event::DataOpened)) => {
                self.opened = true;
                self.maybe_go()
            }
            (PushState::Needs, Input::Msg(other)) => {
                self.fail(net(format!("expected the agent's needs, got {}", shown(&other))))
            }
            (PushState::Sending, Input::Msg(AgentMsg::StepReady)) if !self.ready_seen => {
                self.ready_seen = true;
                Vec::new()
            }
            (PushState::Sending, Input::Event(Event::Sent { changed, .. })) => {
                if self.ready_seen {
                    self.done(changed, now)
                } else {
                    self.state = PushState::Ready { changed };
                    self.deadline = Some(now + self.waits.control);
                    Vec::new()
                }
            }
            (PushState::Sending, Input::Event(Event::Stopped { why })) => {
                self.state = PushState::Stopping { why };
                self.deadline = Some(now + self.waits.control.min(2_000_000_000));
                Vec::new()
            }
            (PushState::Ready { changed }, Input::Msg(AgentMsg::StepReady)) => self.done(changed, now),
            (PushState::Ready { .. } | PushState::Sending, Input::Msg(other)) => {
                self.fail(net(format!("expected the agent's step-ready, got {}", shown(&other))))
            }
            (PushState::Results, Input::Msg(AgentMsg::CopyResults { files, last, streams })) => {
                if self.outcomes.take(files, last).is_err() {
                    return self.fail(net("the agent's results is longer than a copy takes"));
                }
                self.agent_streams.extend(streams);
                self.deadline = Some(now + if last { self.waits.control } else { self.waits.list });
                if last {
                    self.state = PushState::Report;
                }
                Vec::new()
            }
            (PushState::Results, Input::Msg(other)) => {
                self.fail(net(format!("expected the agent's results, got {}", shown(&other))))
            }
            (PushState::Report, Input::Msg(AgentMsg::Report { agent })) => {
                self.agent = Some(agent);
                self.state = PushState::Over;
                self.deadline = None;
                vec![Action::Done]
            }
            (PushState::Report, Input::Msg(other)) => {
                self.fail(net(format!("expected report from the agent, got {}", shown(&other))))
            }
            (state, Input::Deadline) => {
                let what = match state {
                    PushState::Needs => "needs",
                    PushState::Ready { .. } => "step-ready",
                    PushState::Results => "results",
                    _ => "report",
                };
                self.fail(net(format!("no {what} from the agent in time")))
            }
            (state, Input::Event(e)) => self.fail(Failure::Net(format!("internal: {e:?} while {state:?}"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        match self.state {
            PushState::Needs => !self.needs.complete,
            PushState::Sending | PushState::Over => false,
            _ => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum PullState {
    /// The agent's list is read while the data connections open.
    Sources,
    /// The partial files are prepared here.
    Preparing,
    /// The needs and stream-go are sent: the connections are still opening.
    Opening,
    /// The blocks come; the agent may ask for more connections.
    Receiving,
    Report,
    Over,
}

/// What the agent said when every block was sent (a pull).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sent {
    pub changed: Vec<u32>,
    pub streams: Vec<CopyStream>,
    pub events: Vec<CopyEvent>,
    pub tail_blocks: u64,
}

/// The client's end of a pull: the agent sends what `names` hold.
#[derive(Debug)]
pub struct Pull {
    names: Vec<CopyFile>,
    streams: u32,
    /// The most connections over the copy: the agent may ask for one below it.
    connections: u32,
    waits: Waits,
    state: PullState,
    list: Parts<CopyFile>,
    skipped: Vec<(String, String)>,
    opened: bool,
    ready_seen: bool,
    sent: Option<Sent>,
    agent: Option<EndInfo>,
    deadline: Option<Nanos>,
}

impl Pull {
    /// A pull of what `names` hold beneath the agent's root.
    pub fn new(names: Vec<CopyFile>, streams: u32, connections: u32, waits: Waits) -> Pull {
        Pull {
            names,
            streams,
            connections,
            waits,
            state: PullState::Sources,
            list: Parts::default(),
            skipped: Vec::new(),
            opened: false,
            ready_seen: false,
            sent: None,
            agent: None,
            deadline: None,
        }
    }

    /// The names in parts; the data connections open while the agent
    /// lists its files and this end prepares (a round trip less).
    pub fn start(&mut self, now: Nanos) -> Vec<ClientAction> {
        self.deadline = Some(now + self.waits.list);
        list_and_open(&self.names, self.streams)
    }

    /// The agent's files, once listed.
    pub fn list(&self) -> &[CopyFile] {
        &self.list.items
    }

    /// What the agent left out of the directories it listed.
    pub fn take_skipped(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.skipped)
    }

    /// What the agent said when every block was sent.
    pub fn take_sent(&mut self) -> Option<Sent> {
        self.sent.take()
    }

    /// The agent's report of itself, once read.
    pub fn take_agent(&mut self) -> Option<EndInfo> {
        self.agent.take()
    }

    fn fail(&mut self, f: Failure) -> Vec<ClientAction> {
        self.state = PullState::Over;
        self.deadline = None;
        vec![Action::Fail(f)]
    }

    /// The copy stopped while blocks came: the agent hears why, what arrived is kept.
    fn stop(&mut self, why: &str) -> Vec<ClientAction> {
        let why = stopped(why);
        let mut out = vec![Action::Send(ClientMsg::Abort { reason: why.clone() })];
        out.extend(self.fail(net(why)));
        out
    }
}

impl End for Pull {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<AgentMsg, Event>, now: Nanos) -> Vec<ClientAction> {
        let state = self.state.clone();
        match (state, input) {
            (PullState::Over, _) => Vec::new(),
            (PullState::Receiving, Input::Msg(AgentMsg::Error { code, message })) => {
                let f = Failure::agent(code, &message);
                self.stop(&f.said())
            }
            (_, Input::Msg(AgentMsg::Error { code, message })) => self.fail(Failure::agent(code, &message)),
            (PullState::Sources | PullState::Preparing, Input::Event(Event::DataOpened)) => {
                self.opened = true;
                Vec::new()
            }
            (PullState::Sources, Input::Msg(AgentMsg::CopySources { files, last, skipped })) => {
                if self.list.take(files, last).is_err() {
                    return self.fail(net("the agent's file list is longer than a copy takes"));
                }
                self.skipped.extend(skipped);
                if !last {
                    self.deadline = Some(now + self.waits.list);
                    return Vec::new();
                }
                self.state = PullState::Preparing;
                self.deadline = None;
                vec![Action::Do(Task::Prepare { list: self.list.items.clone() })]
            }
            (PullState::Sources, Input::Msg(other)) => {
                self.fail(net(format!("expected the agent's file list, got {}", shown(&other))))
            }
            (PullState::Preparing, Input::Event(Event::Prepared { needs })) => {
                let mut out = needs_in_parts(&needs, |needs, last| ClientMsg::CopyNeeds { needs, last });
                // the agent may send as soon as it has taken the connections:
                // go now, not after its step-ready, a round trip less
                out.push(Action::Send(ClientMsg::StreamGo));
                if self.opened {
                    self.state = PullState::Receiving;
                    out.push(Action::Do(Task::Receive));
                } else {
                    self.state = PullState::Opening;
                }
                out
            }
            (PullState::Opening, Input::Event(Event::DataOpened)) => {
                self.state = PullState::Receiving;
                vec![Action::Do(Task::Receive)]
            }
            (PullState::Receiving, Input::Msg(AgentMsg::CopyConnect { index })) if index < self.connections => {
                vec![Action::Do(Task::Connect { index })]
            }
            (PullState::Receiving, Input::Msg(AgentMsg::StepReady)) if !self.ready_seen => {
                self.ready_seen = true;
                Vec::new()
            }
            (PullState::Receiving, Input::Msg(AgentMsg::CopyEvent { event })) => vec![Action::Do(Task::Note { event })],
            (PullState::Receiving, Input::Msg(AgentMsg::CopySent { changed, streams, events, tail_blocks }))
                if self.ready_seen =>
            {
                self.sent = Some(Sent { changed: changed.clone(), streams, events, tail_blocks });
                self.state = PullState::Report;
                self.deadline = Some(now + self.waits.control);
                // the report comes while this end renames its files
                vec![Action::Send(ClientMsg::Finish), Action::Do(Task::Finish { changed })]
            }
            (PullState::Receiving, Input::Msg(other)) => {
                self.stop(&format!("expected the agent's copy-sent, got {}", shown(&other)))
            }
            (PullState::Receiving, Input::Event(Event::ReceiveFailed { why })) => self.stop(&why),
            (PullState::Report, Input::Msg(AgentMsg::Report { agent })) => {
                self.agent = Some(agent);
                self.state = PullState::Over;
                self.deadline = None;
                vec![Action::Done]
            }
            (PullState::Report, Input::Msg(other)) => {
                self.fail(net(format!("expected report from the agent, got {}", shown(&other))))
            }
            (state @ (PullState::Preparing | PullState::Opening), Input::Msg(other)) => {
                self.fail(net(format!("the agent sent {} out of turn ({state:?})", shown(&other))))
            }
            (state, Input::Deadline) => {
                let what = if state == PullState::Sources { "file list" } else { "report" };
                self.fail(net(format!("no {what} from the agent in time")))
            }
            (state, Input::Event(e)) => self.fail(Failure::Net(format!("internal: {e:?} while {state:?}"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        matches!(self.state, PullState::Sources | PullState::Receiving | PullState::Report)
    }
}
