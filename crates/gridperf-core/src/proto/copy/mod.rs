//! A copy's conversation after the agent said ready (and, with
//! `--encrypt`, gave its key), at both ends:
//!
//! - a push: the client's [`Push`] sends its list and opens the data
//!   connections while the agent's [`Write`] prepares the files and says
//!   what it needs; the client sends stream-go and the blocks as soon as
//!   it has both (it does not wait for step-ready: the agent reads the
//!   blocks once it has taken the connections); copy-done and finish go
//!   together once every block is acknowledged; the outcomes, the report.
//! - a pull: the client's [`Pull`] sends the names and opens the data
//!   connections while the agent's [`Read`] lists its files; the client
//!   prepares, sends its needs with stream-go behind them; the agent sends
//!   once it has taken the connections; copy-sent, and the client's finish
//!   goes as it arrives (it renames its files while the report comes).
//!
//! - a copy between agents, at a source: the agent's [`Source`] lists its
//!   files with their digests, is told where to send, and asks the client
//!   for leases of blocks as its pool's queue runs low, reporting the
//!   blocks acknowledged since the last; copy-sent once the last lease is
//!   sent, then the client's finish. At the client, each source's
//!   [`Listing`] and its [`Leases`], and each destination's [`Destination`]:
//!   the needs, the sources' connections taken, the outcomes.
//!
//! A small push costs 3 round trips here and a pull 4, and 2 more before
//! (connecting, hello with the request behind it): 5 and 6 in all, counted
//! by the tests in virtual time (`pair.rs`).

mod agent;
mod client;
mod coordinate;
mod leases;
#[cfg(test)]
mod pair;
mod source;
#[cfg(test)]
mod tests;

pub use agent::{Read, Write};
pub use client::{Pull, Push};
pub use coordinate::{Destination, Listing};
pub use leases::{Leases, SourceSent};
pub use source::Source;

use super::{Action, Failure, Nanos};
use crate::model::{CopyEvent, CopyStream};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome, MAX_COPY_FILES};

/// What a copy's ends ask their drivers to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    /// The client: open the first `count` data connections (all at once), then [`Event::DataOpened`].
    OpenData { count: u32 },
    /// The client (a pull): open data connection `index`, which the agent's pool asked for.
    Connect { index: u32 },
    /// The writing end: prepare each file of `list` (resume, hash again what
    /// partial files hold), then [`Event::Prepared`] with what it needs.
    Prepare { list: Vec<CopyFile> },
    /// The agent (a pull): expand what the client named into files, then [`Event::Expanded`].
    Expand { names: Vec<CopyFile> },
    /// The agent: take the first data connections, then [`Event::DataTaken`].
    TakeData,
    /// The sending end: send the blocks `needs` asks for over the pool of
    /// connections, then [`Event::Sent`] or [`Event::Stopped`].
    SendBlocks { needs: Vec<CopyNeed> },
    /// The writing end: take blocks on the data connections until told to stop.
    Receive,
    /// The client (a pull, a copy between agents): something the agent's pool did, for the user.
    Note { event: CopyEvent },
    /// A copy between agents' source: send the leased blocks to the agent
    /// at `to` over this end's pool, its connections numbered from `base`
    /// and greeted with `token`; the pool's events come back as
    /// [`Event::Noted`], its queue's length as [`Event::Queue`], its end as
    /// [`Event::Sent`] or [`Event::Stopped`].
    SendTo { to: std::net::SocketAddr, token: u64, base: u32 },
    /// A source: take the blocks acknowledged since the last lease off the
    /// pool's queue, then [`Event::Acked`].
    TakeAcked,
    /// A source: give the pool's queue these leased blocks (and, `last`,
    /// say no more will come).
    Feed { blocks: Vec<CopyNeed>, last: bool },
    /// The client (a copy between agents): take the blocks a source reports
    /// acknowledged off the books, and draw its next lease of at most `want`
    /// blocks from the one queue, then [`Event::Leased`].
    Lease { done: Vec<CopyNeed>, want: u32 },
    /// The writing end: stop taking blocks; rename each whole file into
    /// place unless it is among `changed` (kept partial); then, at the
    /// agent, [`Event::Finished`].
    Finish { changed: Vec<u32> },
}

/// What comes of the tasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    DataOpened,
    Prepared {
        needs: Vec<CopyNeed>,
    },
    Expanded {
        files: Vec<CopyFile>,
        skipped: Vec<(String, String)>,
    },
    DataTaken,
    /// Every block is acknowledged; these files' sources changed meanwhile
    /// (or could not be read); the sending end's streams and pool.
    Sent {
        changed: Vec<u32>,
        streams: Vec<CopyStream>,
        events: Vec<CopyEvent>,
        tail_blocks: u64,
    },
    /// The sending end stopped: why.
    Stopped {
        why: String,
    },
    /// The client (a pull): a stream here failed, or nothing came for too long.
    ReceiveFailed {
        why: String,
    },
    /// The agent's files finished: how each ended, and its streams.
    Finished {
        outcomes: Vec<CopyOutcome>,
        streams: Vec<CopyStream>,
    },
    /// The agent (a pull): its pool wants data connection `index` (a
    /// restart's, -P auto's), which only the client can open.
    ConnectWanted {
        index: u32,
    },
    /// The agent (a pull, a source): something its pool did, for the client's user.
    Noted {
        event: CopyEvent,
    },
    /// A source: the blocks its pool's queue holds, now (its driver says so
    /// every few tens of ms while the pool sends).
    Queue {
        len: u64,
    },
    /// The client: a source's next lease, and whether no more will come.
    Leased {
        blocks: Vec<CopyNeed>,
        last: bool,
    },
    /// A source: the blocks acknowledged since the last lease.
    Acked {
        done: Vec<CopyNeed>,
    },
}

/// How long each end waits for the other, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waits {
    /// For an answer.
    pub control: Nanos,
    /// For a list that takes work at the other end (the control deadline
    /// and the data idle time, at the client; the data idle time, at the agent).
    pub list: Nanos,
}

type ClientAction = Action<ClientMsg, Task>;
type AgentAction = Action<AgentMsg, Task>;

/// A list in parts, gathered until the part marked last: at most
/// [`MAX_COPY_FILES`] items.
#[derive(Debug)]
struct Parts<T> {
    items: Vec<T>,
    complete: bool,
}

impl<T> Default for Parts<T> {
    fn default() -> Parts<T> {
        Parts { items: Vec::new(), complete: false }
    }
}

impl<T> Parts<T> {
    /// Takes a part; an error if the whole is longer than a copy takes.
    fn take(&mut self, part: Vec<T>, last: bool) -> Result<(), ()> {
        if self.items.len() + part.len() > MAX_COPY_FILES as usize {
            return Err(());
        }
        self.items.extend(part);
        self.complete = last;
        Ok(())
    }
}

/// The needs in parts, each as the end's message (`last` on the final one).
fn needs_in_parts<M>(needs: &[CopyNeed], msg: impl Fn(Vec<CopyNeed>, bool) -> M) -> Vec<Action<M, Task>> {
    let parts = crate::wire::chunk_needs(needs);
    let n = parts.len();
    parts.into_iter().enumerate().map(|(k, part)| Action::Send(msg(part, k + 1 == n))).collect()
}

/// A client's first actions: its list in parts, and the first `streams`
/// data connections opening while the agent looks at the list (a round
/// trip less before the first block).
fn list_and_open(files: &[CopyFile], streams: u32) -> Vec<ClientAction> {
    let mut out: Vec<ClientAction> =
        crate::wire::chunk_files(files).into_iter().map(|files| Action::Send(ClientMsg::CopyFiles { files })).collect();
    out.push(Action::Do(Task::OpenData { count: streams }));
    out
}

/// What the agent's words were, shown (never obeyed).
fn shown<M: std::fmt::Debug>(m: &M) -> String {
    format!("{m:?}")
}

fn net(words: impl Into<String>) -> Failure {
    Failure::Net(words.into())
}
