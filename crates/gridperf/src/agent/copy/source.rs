//! A copy between agents, this agent a source: what is said when, and the
//! leases, are [`proto::Source`]'s; this end expands and hashes the files
//! named, and runs the pool that sends the leased blocks straight to the
//! destination agent (restarts, the tail and -P auto as in a pull), while
//! this thread moves the machine's frames and tells it how the pool's queue
//! stands.

use super::{run_pool, sources_of, Want};
use crate::agent::converse::{converse, Clock, Tasks};
use crate::agent::data;
use crate::agent::reply::{new_token, send_error, wire_code, Fail};
use crate::agent::Shared;
use crate::datapath::copy::{self as dp, BlockQueue};
use crate::{ctl, host};
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, CopyFile, CopyNeed, CopySpec, WireError};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::Duration;

/// How often the machine hears how the pool's queue stands (it asks for a
/// lease when the queue runs low).
const TICK: Duration = Duration::from_millis(20);

/// Runs a source's end for a client whose request was checked.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    root: &OwnedFd,
    waits: proto::Waits,
) -> Result<(), Fail> {
    let agent = host::end_info(None, false);
    data::ready(ctl, None, Vec::new(), new_token(peer), agent.clone())?;
    let clock = Clock::start();
    let most = spec.auto.map_or(spec.streams, |(_, hi)| hi.max(spec.streams));
    let mut m = proto::Source::new(spec.files, spec.block, most, agent, waits, clock.now());
    let mut work = Work { shared, peer, spec, root, sources: Vec::new() };
    converse(ctl, &mut m, Vec::new(), &clock, shared.cfg.max_idle, &mut work)
}

/// A source's tasks.
struct Work<'a> {
    shared: &'a Shared,
    peer: SocketAddr,
    spec: &'a CopySpec,
    root: &'a OwnedFd,
    sources: Vec<dp::SourceFile>,
}

impl Tasks<proto::Source> for Work<'_> {
    fn run(
        &mut self,
        t: Task,
        m: &mut proto::Source,
        ctl: &mut TcpStream,
        clock: &Clock,
    ) -> Result<crate::agent::converse::Acts<Task>, Fail> {
        let event = match t {
            // each file hashed once, before any byte moves: the client compares the sources' digests
            Task::Expand { names } => {
                let (mut sources, skipped) = sources_of(self.shared, ctl, self.peer, self.root, &names)?;
                for s in &mut sources {
                    let digest =
                        s.digest(self.spec.block).map_err(|e| format!("{}: {e}", wire::printable(&s.info.path)))?;
                    s.info.digest = Some(digest);
                }
                let files: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
                self.sources = sources;
                Event::Expanded { files, skipped }
            }
            Task::SendTo { to, token, base } => self.send(ctl, to, token, base, m, clock)?,
            other => return Err(Fail::Untold(format!("internal: a copy's source has no task {other:?}"))),
        };
        Ok(m.handle(Input::Event(event), clock.now()))
    }
}

impl Work<'_> {
    /// The leased blocks, sent to the agent at `to` over this end's pool:
    /// every block acknowledged, or why the sending stopped.
    fn send(
        &mut self,
        ctl: &mut TcpStream,
        to: SocketAddr,
        token: u64,
        base: u32,
        m: &mut proto::Source,
        clock: &Clock,
    ) -> Result<Event, Fail> {
        let (shared, spec) = (self.shared, self.spec);
        let idle = shared.cfg.max_idle;
        shared.log.line(&format!(
            "gridperf serve: {}: copy sends {} files to the agent at {to}",
            self.peer,
            self.sources.len()
        ));
        let dial = dp::Dial {
            window: spec.window,
            congestion: spec.congestion.clone(),
            pacing_bps: spec.pacing_bps,
            within: shared.cfg.control_timeout,
            // from the address the client reached this agent at: the one the destination expects
            bind: Some(ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical()),
            welcome: true,
        };
        let open = |k: u32| -> std::io::Result<dp::Link> {
            let sock = dp::dial(to, token, base + k, &dial).map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok(dp::Link { sock, idle, crypt: None, window: spec.window })
        };
        let queue = BlockQueue::fed();
        run_pool(shared, spec, &self.sources, &queue, &open, mpsc::channel(), |rx, finished| {
            let mut talk = Talk { ctl, m, clock, queue: &queue, failed: None };
            talk.while_sending(rx, finished);
            talk.failed.map_or(Ok(()), Err)
        })
    }
}

/// The conversation while the pool sends: the machine's frames out, the
/// client's leases in, the queue fed. A failure stops the queue (the pool
/// then ends) and is kept for after it.
struct Talk<'a> {
    ctl: &'a mut TcpStream,
    m: &'a mut proto::Source,
    clock: &'a Clock,
    queue: &'a BlockQueue,
    failed: Option<Fail>,
}

impl Talk<'_> {
    /// Until the pool ends: what it tells, the queue's state every
    /// [`TICK`], and the client's answer when a lease is out.
    fn while_sending(&mut self, rx: &mpsc::Receiver<Want>, finished: impl Fn() -> bool) {
        loop {
            let mut wants = Vec::new();
            let ended = loop {
                match rx.try_recv() {
                    Ok(Want::Done) | Err(TryRecvError::Disconnected) => break true,
                    Ok(w) => wants.push(w),
                    Err(TryRecvError::Empty) => break finished(),
                }
            };
            for w in wants {
                if let Want::Note(event) = w {
                    self.event(Event::Noted { event });
                }
            }
            if ended {
                return;
            }
            if self.failed.is_some() {
                // the pool ends on the stopped queue's word
                match rx.recv_timeout(TICK) {
                    Ok(Want::Done) | Err(RecvTimeoutError::Disconnected) => return,
                    _ => continue,
                }
            }
            self.event(Event::Queue { len: self.queue.len() as u64 });
            if self.failed.is_none() && self.m.wants_msg() {
                self.listen();
                continue;
            }
            match rx.recv_timeout(TICK) {
                Ok(Want::Note(event)) => self.event(Event::Noted { event }),
                Ok(Want::Done) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Want::Connect(_)) | Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Waits up to a tick for the client's answer, or its deadline.
    fn listen(&mut self) {
        let readable = gridperf_sys::poll_readable(&[self.ctl.as_raw_fd()], TICK.as_millis() as i32);
        let due = self.m.deadline().is_some_and(|d| self.clock.now() >= d);
        let input = match readable {
            Ok(r) if r[0] => {
                let until = self.m.deadline().map_or_else(|| std::time::Instant::now() + TICK, |d| self.clock.at(d));
                match ctl::read_msg_by::<ClientMsg>(self.ctl, until) {
                    Ok(msg) => Input::Msg(msg),
                    Err(WireError::Timeout) => Input::Deadline,
                    Err(e) => {
                        let why = format!("reading the client's next message: {e}");
                        let told = send_error(self.ctl, wire_code(&e), why);
                        return self.fail(told);
                    }
                }
            }
            Ok(_) if due => Input::Deadline,
            Ok(_) => return,
            Err(e) => return self.fail(Fail::Untold(format!("waiting for the client: {e}"))),
        };
        let acts = self.m.handle(input, self.clock.now());
        self.act(acts);
    }

    fn event(&mut self, e: Event) {
        let acts = self.m.handle(Input::Event(e), self.clock.now());
        self.act(acts);
    }

    /// The machine's actions while the pool sends.
    fn act(&mut self, acts: Vec<Action<AgentMsg, Task>>) {
        let mut acts: VecDeque<_> = acts.into();
        while let Some(a) = acts.pop_front() {
            match a {
                // a control connection that fails stops the pool
                Action::Send(msg) if self.failed.is_none() => {
                    if let Err(e) = wire::write_msg(self.ctl, &msg) {
                        self.fail(Fail::Untold(format!("the control connection: {e}")));
                    }
                }
                Action::Send(_) => {}
                Action::Do(Task::TakeAcked) => {
                    let done = CopyNeed::of_blocks(self.queue.take_acked());
                    acts.extend(self.m.handle(Input::Event(Event::Acked { done }), self.clock.now()));
                }
                Action::Do(Task::Feed { blocks, last }) => {
                    self.queue.feed(&blocks);
                    if last {
                        self.queue.end_feed();
                    }
                }
                Action::Fail(f) => self.fail(Fail::Told(f.to_string())),
                other => self.fail(Fail::Untold(format!("internal: while sending, {other:?}"))),
            }
        }
    }

    /// The first failure stops the queue; the pool ends on it.
    fn fail(&mut self, f: Fail) {
        if self.failed.is_none() {
            self.queue.stop(f.to_string());
            self.failed = Some(f);
        }
    }
}
