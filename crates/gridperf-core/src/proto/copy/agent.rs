//! The agent's end of a push (it writes) and of a pull (it reads and sends).
//! Every refusal is told to the client, with what was wrong, before the
//! conversation ends.

use super::{needs_in_parts, AgentAction, Event, Task, Waits};
use crate::copy::{block_count, check_relative};
use crate::model::EndInfo;
use crate::proto::{aborted, out_of_turn, refuse, Action, End, Failure, Input, Nanos};
use crate::wire::{chunk_files, AgentMsg, ClientMsg, CopyFile, CopyNeed, ErrorCode, MAX_COPY_FILES};

/// Outcomes per results part.
const RESULTS_PART: usize = 2000;

/// The client's list: `count` entries in copy-files parts.
#[derive(Debug)]
pub(super) struct List {
    pub(super) count: u32,
    pub(super) items: Vec<CopyFile>,
}

impl List {
    /// Takes a message: the whole list once it is complete and every path
    /// is one beneath the root; or the refusal.
    fn take(&mut self, msg: ClientMsg) -> Result<Option<Vec<CopyFile>>, Vec<AgentAction>> {
        match msg {
            ClientMsg::CopyFiles { files }
                if !files.is_empty() && self.items.len() + files.len() <= self.count as usize =>
            {
                self.items.extend(files);
                if self.items.len() < self.count as usize {
                    return Ok(None);
                }
                for f in &self.items {
                    if let Err(why) = check_relative(&f.path) {
                        return Err(refuse(ErrorCode::Refused, format!("{why}: nothing was touched")));
                    }
                }
                Ok(Some(std::mem::take(&mut self.items)))
            }
            ClientMsg::CopyFiles { files } => Err(refuse(
                ErrorCode::BadMessage,
                format!(
                    "a list of {} more files after {}: the request said {}",
                    files.len(),
                    self.items.len(),
                    self.count
                ),
            )),
            other => Err(out_of_turn(other, "copy-files")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum State {
    List,
    /// The writing end prepares; the reading end expands the names.
    Working,
    /// The reading end: the client's needs.
    Needs,
    /// A copy between agents' source: where to send.
    CopyTo,
    Taking,
    Go,
    /// The writing end takes blocks; the reading end sends them.
    Moving,
    Finishing,
    AwaitFinish,
    Over,
}

/// What both agent ends share: the state, the deadline, the report.
#[derive(Debug)]
pub(super) struct Common {
    pub(super) state: State,
    pub(super) waits: Waits,
    pub(super) deadline: Option<Nanos>,
    go_seen: bool,
    /// The client's finish came while this end finished its files (it
    /// sends finish behind copy-done).
    finish_seen: bool,
    agent: EndInfo,
}

impl Common {
    pub(super) fn new(agent: EndInfo, waits: Waits) -> Common {
        Common { state: State::List, waits, deadline: None, go_seen: false, finish_seen: false, agent }
    }

    pub(super) fn wait(&mut self, state: State, now: Nanos, within: Option<Nanos>) {
        self.state = state;
        self.deadline = within.map(|w| now + w);
    }

    /// A part of the client's list; once whole, the work on it (`work`).
    pub(super) fn list(
        &mut self,
        list: &mut List,
        m: ClientMsg,
        now: Nanos,
        work: impl FnOnce(Vec<CopyFile>) -> Task,
    ) -> Vec<AgentAction> {
        match list.take(m) {
            Ok(None) => {
                self.wait(State::List, now, Some(self.waits.list));
                Vec::new()
            }
            Ok(Some(whole)) => {
                self.wait(State::Working, now, None);
                vec![Action::Do(work(whole))]
            }
            Err(refusal) => refusal,
        }
    }

    /// The files this sending end expanded, told in parts; then the client's next word (`next`).
    pub(super) fn listed(
        &mut self,
        files: &[CopyFile],
        skipped: Vec<(String, String)>,
        next: State,
        now: Nanos,
    ) -> Vec<AgentAction> {
        self.wait(next, now, Some(self.waits.list));
        sources_in_parts(files, skipped)
    }

    /// Whether it waits for the client (a task of its driver reads the
    /// client meanwhile: the writing end's copy-done while blocks come).
    pub(super) fn wants_msg(&self) -> bool {
        matches!(self.state, State::List | State::Needs | State::CopyTo | State::Go | State::AwaitFinish)
    }

    pub(super) fn end(&mut self, out: Vec<AgentAction>) -> Vec<AgentAction> {
        if out.iter().any(|a| matches!(a, Action::Fail(_) | Action::Done)) {
            self.state = State::Over;
            self.deadline = None;
        }
        out
    }

    /// Step-ready once the first connections are taken; the moving begins
    /// at once if stream-go came already (it does not wait for step-ready).
    fn taken(&mut self, now: Nanos, moving: Task) -> Vec<AgentAction> {
        let mut out = vec![Action::Send(AgentMsg::StepReady)];
        if self.go_seen {
            self.wait(State::Moving, now, None);
            out.push(Action::Do(moving));
        } else {
            self.wait(State::Go, now, Some(self.waits.control));
        }
        out
    }

    fn report(&mut self) -> Vec<AgentAction> {
        vec![Action::Send(AgentMsg::Report { agent: self.agent.clone() }), Action::Done]
    }

    /// Waits for the client's finish, unless it came already: then the report.
    pub(super) fn await_finish(&mut self, now: Nanos, mut out: Vec<AgentAction>) -> Vec<AgentAction> {
        if self.finish_seen {
            out.extend(self.report());
        } else {
            self.wait(State::AwaitFinish, now, Some(self.waits.list));
        }
        out
    }

    /// What every state shares: stream-go early, the finish, the deadlines.
    pub(super) fn common(
        &mut self,
        input: Input<ClientMsg, Event>,
        now: Nanos,
        moving: impl FnOnce() -> Task,
    ) -> Vec<AgentAction> {
        match (self.state, input) {
            (State::Taking, Input::Msg(ClientMsg::StreamGo)) if !self.go_seen => {
                self.go_seen = true;
                Vec::new()
            }
            (State::Go, Input::Msg(ClientMsg::StreamGo)) => {
                self.wait(State::Moving, now, None);
                vec![Action::Do(moving())]
            }
            (State::Finishing, Input::Msg(ClientMsg::Finish)) if !self.finish_seen => {
                self.finish_seen = true;
                Vec::new()
            }
            (State::AwaitFinish, Input::Msg(ClientMsg::Finish)) => self.report(),
            (state, Input::Msg(m)) => out_of_turn(m, expected(state)),
            (state, Input::Deadline) => {
                refuse(ErrorCode::Timeout, format!("waiting for {}: no word from the client in time", expected(state)))
            }
            (state, Input::Event(e)) => vec![Action::Fail(Failure::Net(format!("internal: {e:?} while {state:?}")))],
        }
    }
}

/// The files an agent sends, in copy-sources parts, and what it left out
/// of the directories it listed (in the last part).
fn sources_in_parts(files: &[CopyFile], skipped: Vec<(String, String)>) -> Vec<AgentAction> {
    let parts = chunk_files(files);
    let n = parts.len().max(1);
    let mut skipped = Some(skipped);
    (0..n)
        .map(|k| {
            let last = k + 1 == n;
            Action::Send(AgentMsg::CopySources {
                files: parts.get(k).cloned().unwrap_or_default(),
                last,
                skipped: if last { skipped.take().unwrap_or_default() } else { Vec::new() },
            })
        })
        .collect()
}

/// Whether every block of `blocks` lies within its file of `files`.
pub(super) fn within_files(blocks: &[CopyNeed], files: &[CopyFile], block: u64) -> bool {
    blocks.iter().all(|n| {
        files.get(n.file as usize).is_some_and(|f| {
            let count = block_count(f.size, block);
            n.ranges.iter().all(|&(a, b)| a < b && b <= count)
        })
    })
}

pub(super) fn expected(state: State) -> &'static str {
    match state {
        State::List => "copy-files",
        State::Needs => "copy-needs",
        State::CopyTo => "copy-to",
        State::Go => "stream-go",
        State::Moving => "copy-done",
        State::AwaitFinish => "finish",
        _ => "nothing",
    }
}

/// The agent's end of a push: it writes beneath its root what the client sends.
#[derive(Debug)]
pub struct Write {
    c: Common,
    list: List,
    files: usize,
}

impl Write {
    /// After ready: a list of `count` files is due; `agent` is the report.
    pub fn new(count: u32, agent: EndInfo, waits: Waits, now: Nanos) -> Write {
        let mut c = Common::new(agent, waits);
        c.wait(State::List, now, Some(waits.list));
        Write { c, list: List { count, items: Vec::new() }, files: 0 }
    }

    /// Every file's number: kept partial, each one, when the copy ends early.
    fn all(&self) -> Vec<u32> {
        (0..self.files as u32).collect()
    }
}

impl End for Write {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        let out = match (self.c.state, input) {
            (State::Over, _) => return Vec::new(),
            (State::List, Input::Msg(m)) => {
                let files = &mut self.files;
                self.c.list(&mut self.list, m, now, |list| {
                    *files = list.len();
                    Task::Prepare { list }
                })
            }
            (State::Working, Input::Event(Event::Prepared { needs })) => {
                let mut out = needs_in_parts(&needs, |needs, last| AgentMsg::CopyNeeds { needs, last });
                out.push(Action::Do(Task::TakeData));
                self.c.wait(State::Taking, now, None);
                out
            }
            (State::Taking, Input::Event(Event::DataTaken)) => self.c.taken(now, Task::Receive),
            (State::Moving, Input::Msg(ClientMsg::CopyDone { changed })) => {
                self.c.wait(State::Finishing, now, None);
                vec![Action::Do(Task::Finish { changed })]
            }
            // what arrived stays, partial, for a resume
            (State::Moving, Input::Msg(ClientMsg::Abort { reason })) => {
                let mut out = vec![Action::Do(Task::Finish { changed: self.all() })];
                out.extend(aborted(&reason, " (partial files kept for a resume)"));
                out
            }
            (State::Finishing, Input::Event(Event::Finished { outcomes, streams })) => {
                let chunks: Vec<_> = outcomes.chunks(RESULTS_PART).map(<[_]>::to_vec).collect();
                let n = chunks.len().max(1);
                let mut streams = Some(streams);
                let out = (0..n)
                    .map(|k| {
                        let files = chunks.get(k).cloned().unwrap_or_default();
                        let last = k + 1 == n;
                        let streams = if last { streams.take().unwrap_or_default() } else { Vec::new() };
                        Action::Send(AgentMsg::CopyResults { files, last, streams })
                    })
                    .collect();
                self.c.await_finish(now, out)
            }
            (_, input) => self.c.common(input, now, || Task::Receive),
        };
        self.c.end(out)
    }

    fn deadline(&self) -> Option<Nanos> {
        self.c.deadline
    }

    fn wants_msg(&self) -> bool {
        self.c.wants_msg()
    }
}

/// The agent's end of a pull: it sends what the client named beneath its root.
#[derive(Debug)]
pub struct Read {
    c: Common,
    list: List,
    block: u64,
    files: Vec<CopyFile>,
    needs: Vec<CopyNeed>,
}

impl Read {
    /// After ready: `count` names are due; blocks of `block` bytes; `agent` is the report.
    pub fn new(count: u32, block: u64, agent: EndInfo, waits: Waits, now: Nanos) -> Read {
        let mut c = Common::new(agent, waits);
        c.wait(State::List, now, Some(waits.list));
        Read { c, list: List { count, items: Vec::new() }, block, files: Vec::new(), needs: Vec::new() }
    }

    /// The files this end sends, once expanded.
    pub fn files(&self) -> &[CopyFile] {
        &self.files
    }

    /// A part of the client's needs: each of a file in the list, within its blocks.
    fn needs(&mut self, part: Vec<CopyNeed>, last: bool, now: Nanos) -> Vec<AgentAction> {
        if self.needs.len() + part.len() > MAX_COPY_FILES as usize {
            return refuse(ErrorCode::BadMessage, "more needs than a copy takes".into());
        }
        for n in part {
            if !within_files(std::slice::from_ref(&n), &self.files, self.block) {
                return refuse(
                    ErrorCode::BadMessage,
                    format!("a need of file {} beyond its blocks (or not in the list)", n.file),
                );
            }
            self.needs.push(n);
        }
        if !last {
            self.c.wait(State::Needs, now, Some(self.c.waits.list));
            return Vec::new();
        }
        self.c.wait(State::Taking, now, None);
        vec![Action::Do(Task::TakeData)]
    }
}

impl End for Read {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        let out = match (self.c.state, input) {
            (State::Over, _) => return Vec::new(),
            (State::List, Input::Msg(m)) => self.c.list(&mut self.list, m, now, |names| Task::Expand { names }),
            (State::Working, Input::Event(Event::Expanded { files, skipped })) => {
                let out = self.c.listed(&files, skipped, State::Needs, now);
                self.files = files;
                out
            }
            (State::Needs, Input::Msg(ClientMsg::CopyNeeds { needs, last })) => self.needs(needs, last, now),
            (State::Taking, Input::Event(Event::DataTaken)) => {
                self.c.taken(now, Task::SendBlocks { needs: self.needs.clone() })
            }
            (State::Moving, Input::Event(Event::Sent { changed, streams, events, tail_blocks })) => self
                .c
                .await_finish(now, vec![Action::Send(AgentMsg::CopySent { changed, streams, events, tail_blocks })]),
            (State::Moving, Input::Event(Event::Stopped { why })) => {
                refuse(ErrorCode::Internal, format!("the copy stopped: {why}"))
            }
            // while the pool sends: a connection it wants, asked of the
            // client (it opens them all); what it did, told
            (State::Moving, Input::Event(Event::ConnectWanted { index })) => {
                vec![Action::Send(AgentMsg::CopyConnect { index })]
            }
            (State::Moving, Input::Event(Event::Noted { event })) => vec![Action::Send(AgentMsg::CopyEvent { event })],
            (_, input) => {
                let needs = self.needs.clone();
                self.c.common(input, now, || Task::SendBlocks { needs })
            }
        };
        self.c.end(out)
    }

    fn deadline(&self) -> Option<Nanos> {
        self.c.deadline
    }

    fn wants_msg(&self) -> bool {
        self.c.wants_msg()
    }
}
