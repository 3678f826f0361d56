//! The client's ends of a copy between agents around the leases: each
//! source lists the files it holds ([`Listing`]) and is told where to send;
//! each destination is given the list and says what it needs, takes the
//! sources' connections, and finishes ([`Destination`]). The client steps
//! them one agent at a time (the sources must agree before a destination
//! prepares anything); between the steps a machine waits for nothing.
//! Every word is due within a deadline; an error frame, a message out of
//! turn, a list longer than a copy takes, or quiet past the deadline ends
//! the step in failure, and the client tells every agent why.

use super::{shown, ClientAction, Parts};
use crate::model::CopyStream;
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome};

/// Seconds of a wait, for the words.
fn secs(n: Nanos) -> u64 {
    std::time::Duration::from_nanos(n).as_secs()
}

/// The agent's error frame, or a message out of turn: the step fails.
fn unexpected(msg: AgentMsg, expected: &str) -> Failure {
    match msg {
        AgentMsg::Error { code, message } => Failure::agent(code, &message),
        other => Failure::Net(format!("expected the agent's {expected}, got {}", shown(&other))),
    }
}

/// A part of one of the agent's lists taken into `list`: a failure if the
/// whole is longer than a copy takes (`what`: "needs are"); whether it was
/// the last part, else the next is due by `due`.
fn part_of<T>(
    list: &mut Parts<T>,
    part: Vec<T>,
    last: bool,
    what: &str,
    deadline: &mut Option<Nanos>,
    due: Nanos,
) -> Result<bool, Failure> {
    list.take(part, last).map_err(|()| Failure::Net(format!("the agent's {what} longer than a copy takes")))?;
    *deadline = (!last).then_some(due);
    Ok(last)
}

/// The client asks a source for the files beneath the path it names,
/// each with its BLAKE3, and tells it where to send once every source has
/// listed the same.
#[derive(Debug)]
pub struct Listing {
    files: Parts<CopyFile>,
    skipped: Vec<(String, String)>,
    /// Each part is due within this.
    within: Nanos,
    deadline: Option<Nanos>,
}

impl Listing {
    pub fn new(within: Nanos) -> Listing {
        Listing { files: Parts::default(), skipped: Vec::new(), within, deadline: None }
    }

    /// The path named, as one entry of a list (its files come back).
    pub fn start(&mut self, named: CopyFile, now: Nanos) -> Vec<ClientAction> {
        self.deadline = Some(now + self.within);
        vec![Action::Send(ClientMsg::CopyFiles { files: vec![named] })]
    }

    /// The files listed, and what the source left out of its directories, with why.
    pub fn take(&mut self) -> (Vec<CopyFile>, Vec<(String, String)>) {
        (std::mem::take(&mut self.files.items), std::mem::take(&mut self.skipped))
    }

    /// Where the source sends: the destination's data port at `addr`, the
    /// token its connections carry, its connections numbered from `base`.
    /// Its leases follow ([`super::Leases`]).
    pub fn send_to(&mut self, addr: std::net::SocketAddr, token: u64, base: u32) -> Vec<ClientAction> {
        if !self.files.complete || self.deadline.is_some() {
            return self.fail(Failure::Net("internal: a source told where to send before it listed".into()));
        }
        vec![Action::Send(ClientMsg::CopyTo { addr: addr.to_string(), token, base }), Action::Done]
    }

    fn fail(&mut self, f: Failure) -> Vec<ClientAction> {
        self.deadline = None;
        vec![Action::Fail(f)]
    }
}

impl End for Listing {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = super::Task;
    type Event = super::Event;

    fn handle(&mut self, input: Input<AgentMsg, super::Event>, now: Nanos) -> Vec<ClientAction> {
        if self.deadline.is_none() {
            return Vec::new();
        }
        match input {
            Input::Msg(AgentMsg::CopySources { files, last, skipped }) => {
                self.skipped.extend(skipped);
                match part_of(&mut self.files, files, last, "file list is", &mut self.deadline, now + self.within) {
                    Ok(true) => vec![Action::Done],
                    Ok(false) => Vec::new(),
                    Err(f) => self.fail(f),
                }
            }
            Input::Msg(other) => self.fail(unexpected(other, "file list")),
            Input::Deadline => self.fail(Failure::Net(format!("no file list within {} s", secs(self.within)))),
            Input::Event(e) => self.fail(Failure::Net(format!("internal: {e:?} while listing"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        self.deadline.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// The needs, in parts.
    Needs,
    /// Prepared; the sources are being told where to send.
    Prepared,
    /// Step-ready, once the agent has taken every source's connections.
    Taking,
    /// The pairs run: this agent's session waits.
    Running,
    /// The outcomes, in parts.
    Results,
    Over,
}

/// The client's end of a destination: it prepares the files (or, joining
/// the first's partial files on shared storage, checks it sees them) and
/// says what it needs; it takes the sources' connections; at the end it
/// verifies and renames (the first) and says how each file ended.
#[derive(Debug)]
pub struct Destination {
    step: Step,
    needs: Parts<CopyNeed>,
    outcomes: Parts<CopyOutcome>,
    streams: Vec<CopyStream>,
    /// Each part of a list is due within this.
    within: Nanos,
    /// Step-ready is due within this once the sources are told.
    taking: Nanos,
    deadline: Option<Nanos>,
}

impl Destination {
    pub fn new(within: Nanos, taking: Nanos) -> Destination {
        Destination {
            step: Step::Needs,
            needs: Parts::default(),
            outcomes: Parts::default(),
            streams: Vec::new(),
            within,
            taking,
            deadline: None,
        }
    }

    /// The files as placed beneath this destination, in parts.
    pub fn start(&mut self, placed: &[CopyFile], now: Nanos) -> Vec<ClientAction> {
        self.deadline = Some(now + self.within);
        crate::wire::chunk_files(placed).into_iter().map(|files| Action::Send(ClientMsg::CopyFiles { files })).collect()
    }

    /// What it needs, once said.
    pub fn take_needs(&mut self) -> Vec<CopyNeed> {
        std::mem::take(&mut self.needs.items)
    }

    /// Every source feeding it was told where to send: its step-ready is
    /// awaited, and stream-go answers it.
    pub fn sources_told(&mut self, now: Nanos) -> Vec<ClientAction> {
        if self.step != Step::Prepared {
            return self.fail(Failure::Net(format!("internal: the sources told while {:?}", self.step)));
        }
        self.step = Step::Taking;
        self.deadline = Some(now + self.taking);
        Vec::new()
    }

    /// The pairs ran: copy-done, with the files whose sources changed
    /// (kept partial), then the outcomes.
    pub fn finish(&mut self, changed: Vec<u32>, now: Nanos) -> Vec<ClientAction> {
        if self.step != Step::Running {
            return self.fail(Failure::Net(format!("internal: finishing while {:?}", self.step)));
        }
        self.step = Step::Results;
        self.deadline = Some(now + self.within);
        vec![Action::Send(ClientMsg::CopyDone { changed })]
    }

    /// How each file ended here, and this agent's streams.
    pub fn take_results(&mut self) -> (Vec<CopyOutcome>, Vec<CopyStream>) {
        (std::mem::take(&mut self.outcomes.items), std::mem::take(&mut self.streams))
    }

    fn fail(&mut self, f: Failure) -> Vec<ClientAction> {
        self.step = Step::Over;
        self.deadline = None;
        vec![Action::Fail(f)]
    }
}

impl End for Destination {
    type In = AgentMsg;
    type Out = ClientMsg;
    type Task = super::Task;
    type Event = super::Event;

    fn handle(&mut self, input: Input<AgentMsg, super::Event>, now: Nanos) -> Vec<ClientAction> {
        match (self.step, input) {
            (Step::Over, _) => Vec::new(),
            (Step::Needs, Input::Msg(AgentMsg::CopyNeeds { needs, last })) => {
                match part_of(&mut self.needs, needs, last, "needs are", &mut self.deadline, now + self.within) {
                    Ok(true) => {
                        self.step = Step::Prepared;
                        vec![Action::Done]
                    }
                    Ok(false) => Vec::new(),
                    Err(f) => self.fail(f),
                }
            }
            (Step::Taking, Input::Msg(AgentMsg::StepReady)) => {
                self.step = Step::Running;
                self.deadline = None;
                vec![Action::Send(ClientMsg::StreamGo), Action::Done]
            }
            (Step::Results, Input::Msg(AgentMsg::CopyResults { files, last, streams })) => {
                self.streams.extend(streams);
                match part_of(&mut self.outcomes, files, last, "results are", &mut self.deadline, now + self.within) {
                    Ok(true) => {
                        self.step = Step::Over;
                        vec![Action::Done]
                    }
                    Ok(false) => Vec::new(),
                    Err(f) => self.fail(f),
                }
            }
            (step, Input::Msg(other)) => {
                let expected = match step {
                    Step::Needs => "needs",
                    Step::Taking => "step-ready",
                    Step::Results => "results",
                    _ => "silence until the pairs are done",
                };
                self.fail(unexpected(other, expected))
            }
            (Step::Taking, Input::Deadline) => {
                self.fail(Failure::Net(format!("no step-ready within {} s", secs(self.taking))))
            }
            (step @ (Step::Needs | Step::Results), Input::Deadline) => {
                let what = if step == Step::Needs { "needs" } else { "results" };
                self.fail(Failure::Net(format!("no {what} within {} s", secs(self.within))))
            }
            (step, input) => self.fail(Failure::Net(format!("internal: {input:?} while {step:?}"))),
        }
    }

    fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    fn wants_msg(&self) -> bool {
        matches!(self.step, Step::Needs | Step::Taking | Step::Results)
    }
}
