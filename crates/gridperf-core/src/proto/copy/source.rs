//! The agent's end of a copy between agents, this agent a source: the
//! files named, each with its BLAKE3 (for the client to check that every
//! source holds the same); then, told where to send, the blocks the client
//! leases, sent straight to the destination agent over this end's pool.
//!
//! The leases are this machine's. It asks for more when its pool's queue
//! would run dry before an answer could come back: when it holds fewer
//! than one block per stream the pool may run, or than 1.5 times the blocks
//! the pool sends in a lease's round trip; then it asks for enough to hold
//! three per stream, or three round trips' blocks. The pool's rate is
//! measured from the queue as it drains (at most a round trip at a time),
//! so on a long control path the leases grow about threefold a round trip,
//! as a TCP window in slow start, until they keep the pool fed. It reports
//! the blocks acknowledged since the last at least every [`REPORT_EVERY`]
//! (the client counts them as moved), and, when the client had none to
//! give, waits [`EMPTY_AGAIN`] before asking again. One lease is asked at a
//! time; the client's `last` ends the asking.

use super::agent::{within_files, Common, List, State};
use super::{AgentAction, Event, Task, Waits};
use crate::model::EndInfo;
use crate::proto::{aborted, out_of_turn, refuse, Action, End, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, ErrorCode, MAX_COPY_CONNECTIONS};

/// The longest a source goes without reporting its acknowledged blocks.
pub const REPORT_EVERY: Nanos = 500_000_000;
/// How long a source waits to ask again after a lease with no blocks.
pub const EMPTY_AGAIN: Nanos = 200_000_000;

/// The most blocks asked for at once (what the client gives at most).
pub const MOST_ASKED: u64 = 4096;

/// How fast the pool takes blocks off the queue, measured, and how long a
/// lease takes to come back.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Drain {
    /// The queue's length had nothing been sent since the last look.
    expected: u64,
    /// Since when blocks were counted, and how many were taken since.
    since: Nanos,
    taken: u64,
    /// Blocks per second, as last measured.
    per_s: f64,
    /// When the lease out was asked; the last lease's round trip.
    asked_at: Nanos,
    rtt: Nanos,
}

impl Drain {
    /// The queue holds `len` at `now`: what was taken since the last look counted.
    fn look(&mut self, len: u64, now: Nanos) {
        self.taken += self.expected.saturating_sub(len);
        self.expected = len;
        let span = now.saturating_sub(self.since);
        if span >= (200 * MS).max(self.rtt) {
            self.per_s = self.taken as f64 * 1e9 / span as f64;
            (self.since, self.taken) = (now, 0);
        }
    }

    /// The blocks the pool sends while a lease is out (and the driver's looks between).
    fn ahead(&self) -> f64 {
        self.per_s * (self.rtt + 2 * LOOK) as f64 / 1e9
    }
}

const MS: Nanos = 1_000_000;
/// How often the driver tells the machine its queue, at most.
const LOOK: Nanos = 20 * MS;

/// Where the leases stand.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lease {
    /// None asked; the last was asked (or answered) at this time, and the
    /// next is not asked before `not_before`.
    Idle { said: Nanos, not_before: Nanos },
    /// The acknowledged blocks are being taken off the queue, to ask for `want` more.
    Taking { want: u32 },
    /// Asked for `want` blocks; the answer is due.
    Asked { want: u32 },
    /// The client gave the last lease (or the asking stopped).
    Over,
}

/// The agent's end of a copy between agents as a source.
#[derive(Debug)]
pub struct Source {
    c: Common,
    list: List,
    block: u64,
    /// The most streams the pool may run at once.
    most: u32,
    files: Vec<CopyFile>,
    lease: Lease,
    drain: Drain,
}

impl Source {
    /// After ready: `count` names are due; blocks of `block` bytes; a pool
    /// of up to `most` streams; `agent` is the report.
    pub fn new(count: u32, block: u64, most: u32, agent: EndInfo, waits: Waits, now: Nanos) -> Source {
        let mut c = Common::new(agent, waits);
        c.wait(State::List, now, Some(waits.list));
        let lease = Lease::Idle { said: now, not_before: 0 };
        let (list, drain) = (List { count, items: Vec::new() }, Drain::default());
        Source { c, list, block, most: most.max(1), files: Vec::new(), lease, drain }
    }

    /// The files this end sends, once expanded.
    pub fn files(&self) -> &[CopyFile] {
        &self.files
    }

    /// How many blocks to ask for with `len` in the queue: none while it
    /// holds one per stream and 1.5 round trips' blocks; else up to three
    /// of each.
    fn want(&self, len: u64) -> u32 {
        let (most, ahead) = (u64::from(self.most), self.drain.ahead());
        let low = most.max((1.5 * ahead).ceil() as u64);
        let high = (3 * most).max((3.0 * ahead).ceil() as u64).min(MOST_ASKED);
        if len < low {
            high.saturating_sub(len) as u32
        } else {
            0
        }
    }

    /// The queue holds `len`: a lease asked for if one is due.
    fn queue(&mut self, len: u64, now: Nanos) -> Vec<AgentAction> {
        self.drain.look(len, now);
        let Lease::Idle { said, not_before } = self.lease else { return Vec::new() };
        let want = self.want(len);
        if now < not_before || (want == 0 && now < said + REPORT_EVERY) {
            return Vec::new();
        }
        self.lease = Lease::Taking { want };
        vec![Action::Do(Task::TakeAcked)]
    }

    /// The client's lease: the blocks for the queue, each within its file.
    fn leased(&mut self, blocks: Vec<crate::wire::CopyNeed>, last: bool, want: u32, now: Nanos) -> Vec<AgentAction> {
        if !within_files(&blocks, &self.files, self.block) {
            return refuse(ErrorCode::BadMessage, "the client leased blocks beyond its files".into());
        }
        self.c.deadline = None;
        self.drain.rtt = now.saturating_sub(self.drain.asked_at);
        self.drain.expected += blocks.iter().flat_map(|n| &n.ranges).map(|&(a, b)| b - a).sum::<u64>();
        self.lease = if last {
            Lease::Over
        } else {
            // others hold what is left: ask again in a while
            let again = if blocks.is_empty() && want > 0 { now + EMPTY_AGAIN } else { now };
            Lease::Idle { said: now, not_before: again }
        };
        vec![Action::Do(Task::Feed { blocks, last })]
    }
}

impl End for Source {
    type In = ClientMsg;
    type Out = AgentMsg;
    type Task = Task;
    type Event = Event;

    fn handle(&mut self, input: Input<ClientMsg, Event>, now: Nanos) -> Vec<AgentAction> {
        let out = match (self.c.state, input) {
            (State::Over, _) => return Vec::new(),
            (State::List, Input::Msg(m)) => self.c.list(&mut self.list, m, now, |names| Task::Expand { names }),
            (State::Working, Input::Event(Event::Expanded { files, skipped })) => {
                let out = self.c.listed(&files, skipped, State::CopyTo, now);
                self.files = files;
                out
            }
            (State::CopyTo, Input::Msg(ClientMsg::CopyTo { addr, token, base })) => {
                match addr.parse::<std::net::SocketAddr>() {
                    Ok(to) if base < MAX_COPY_CONNECTIONS => {
                        self.c.wait(State::Moving, now, None);
                        self.lease = Lease::Idle { said: now, not_before: 0 };
                        self.drain = Drain { since: now, ..Drain::default() };
                        vec![Action::Do(Task::SendTo { to, token, base })]
                    }
                    _ => refuse(ErrorCode::BadMessage, format!("copy-to {addr:?} base {base}")),
                }
            }
            (State::Moving, Input::Event(Event::Queue { len })) => self.queue(len, now),
            (State::Moving, Input::Event(Event::Acked { done })) => match self.lease {
                Lease::Taking { want } => {
                    self.lease = Lease::Asked { want };
                    self.drain.asked_at = now;
                    self.c.deadline = Some(now + self.c.waits.list);
                    vec![Action::Send(AgentMsg::CopyLease { done, want })]
                }
                other => refuse(ErrorCode::Internal, format!("internal: acknowledged blocks while {other:?}")),
            },
            (State::Moving, Input::Msg(ClientMsg::CopyLeased { blocks, last })) => match self.lease {
                Lease::Asked { want } => self.leased(blocks, last, want, now),
                _ => refuse(ErrorCode::BadMessage, "a lease that was not asked for".into()),
            },
            (State::Moving, Input::Msg(ClientMsg::Abort { reason })) => aborted(&reason, ""),
            (State::Moving, Input::Msg(other)) => out_of_turn(other, "copy-leased"),
            (State::Moving, Input::Deadline) => {
                refuse(ErrorCode::Timeout, "waiting for copy-leased: no word from the client in time".into())
            }
            (State::Moving, Input::Event(Event::Noted { event })) => vec![Action::Send(AgentMsg::CopyEvent { event })],
            (State::Moving, Input::Event(Event::Sent { changed, streams, events, tail_blocks })) => {
                self.lease = Lease::Over;
                self.c
                    .await_finish(now, vec![Action::Send(AgentMsg::CopySent { changed, streams, events, tail_blocks })])
            }
            (State::Moving, Input::Event(Event::Stopped { why })) => {
                refuse(ErrorCode::Internal, format!("the copy stopped: {why}"))
            }
            (_, input) => self.c.common(input, now, || Task::Receive),
        };
        self.c.end(out)
    }

    fn deadline(&self) -> Option<Nanos> {
        self.c.deadline
    }

    /// While the pool sends, only a lease asked for is awaited.
    fn wants_msg(&self) -> bool {
        match self.c.state {
            State::Moving => matches!(self.lease, Lease::Asked { .. }),
            _ => self.c.wants_msg(),
        }
    }
}

#[cfg(test)]
mod tests;
