//! The writing end of a push (the client's, or the source agents' in a
//! copy between agents): every file prepared, what is needed said, the
//! blocks taken on connections as they come, each file renamed into place
//! once every block is verified.

use super::{streams_of, take_first, tune_socket, Opened};
use crate::agent::converse::{converse, Clock, Tasks};
use crate::agent::data;
use crate::agent::reply::{send_error, Fail};
use crate::agent::Shared;
use crate::ctl;
use crate::datapath::copy::{self as dp, SinkRules, StreamWork};
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{self, ClientMsg, CopySpec, DataHello, DataKind, ErrorCode};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// What the machine asks for.
type Acts = crate::agent::converse::Acts<Task>;

/// The writing end: what is said when is [`proto::Write`]'s; this end
/// prepares every file, takes the blocks, renames what is whole.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    spec: &CopySpec,
    root: &OwnedFd,
    o: Opened,
    waits: proto::Waits,
) -> Result<(), Fail> {
    let clock = Clock::start();
    let mut agent = o.agent.clone();
    agent.sockets = Vec::new();
    let mut m = proto::Write::new(spec.files, agent, waits, clock.now());
    let mut work = Work { shared, spec, root, o: &o, files: Vec::new(), socks: Vec::new(), works: Vec::new() };
    converse(ctl, &mut m, Vec::new(), &clock, shared.cfg.max_idle, &mut work)
}

/// A push's tasks at the writing end.
struct Work<'a> {
    shared: &'a Shared,
    spec: &'a CopySpec,
    root: &'a OwnedFd,
    o: &'a Opened,
    files: Vec<Option<dp::SinkFile>>,
    socks: Vec<TcpStream>,
    works: Vec<std::io::Result<StreamWork>>,
}

impl Tasks<proto::Write> for Work<'_> {
    fn run(&mut self, t: Task, m: &mut proto::Write, ctl: &mut TcpStream, clock: &Clock) -> Result<Acts, Fail> {
        let (shared, spec) = (self.shared, self.spec);
        let event = match t {
            Task::Prepare { list } => {
                let third_party = !spec.senders.is_empty();
                let rules = SinkRules {
                    force: spec.force,
                    resume: spec.resume,
                    // the first destination computes the checksum, in order, reading back what others wrote
                    checksum: spec.checksum.filter(|_| !spec.join),
                    join: spec.join,
                    adopt: third_party && !spec.join,
                };
                let (files, needs) = dp::prepare_all(self.root, &list, spec.block, rules);
                self.files = files;
                Event::Prepared { needs }
            }
            Task::TakeData => {
                self.socks = take_first(shared, ctl, spec, self.o)?;
                Event::DataTaken
            }
            Task::Receive => {
                let socks = std::mem::take(&mut self.socks);
                let (works, acts) = receive_all(shared, ctl, self.o, spec, socks, &self.files, m, clock)?;
                self.works = works;
                return Ok(acts);
            }
            Task::Finish { changed } => {
                Event::Finished { outcomes: finish_all(&self.files, &changed), streams: streams_of(&self.works) }
            }
            other => return Err(Fail::Untold(format!("internal: a push's writing end has no task {other:?}"))),
        };
        Ok(m.handle(Input::Event(event), clock.now()))
    }
}

/// The writing end's connections of a push: the first ones, then any the
/// client opens while the copy runs (a restart, `-P auto`), each with its
/// own number below `spec.connections`, taken as they come; until the
/// client says the copy is done. A connection that breaks or is reset is
/// not an error here (the client sends its blocks again on another: a file
/// is whole when every block is verified), but one that carried what was
/// not sent (altered on the way, or not a block) ends the copy at once,
/// every partial file kept. The client's frames go to the machine: its
/// answer ends the receiving.
#[allow(clippy::too_many_arguments)]
fn receive_all(
    shared: &Shared,
    ctl: &mut TcpStream,
    o: &Opened,
    spec: &CopySpec,
    socks: Vec<TcpStream>,
    files: &[Option<dp::SinkFile>],
    m: &mut proto::Write,
    clock: &Clock,
) -> Result<Received, Fail> {
    let (l, senders, token, keys) = (&o.listener, &o.senders, o.token, o.keys.as_ref());
    let idle = shared.cfg.max_idle;
    let most = if spec.connections == 0 { spec.streams } else { spec.connections };
    let moved: Vec<AtomicU64> = (0..most).map(|_| AtomicU64::new(0)).collect();
    let mut seen: Vec<u32> = (0..socks.len() as u32).collect();
    let live = spec.live_connections() as usize;
    let mut waiting: std::collections::VecDeque<(u32, TcpStream)> = std::collections::VecDeque::new();
    let received = std::thread::scope(|scope| {
        let mut set = dp::ReceiveSet::new(scope, files, spec.block, idle, spec.window, keys, &moved);
        for (k, s) in socks.into_iter().enumerate() {
            set.start(k as u32, s);
        }
        let mut quiet_since = Instant::now();
        let outcome: Result<Acts, Fail> = loop {
            // what arrived was not what was sent: say so before the client asks, keep every partial file
            if let Some(e) = set.reap() {
                set.shut();
                finish_all(files, &(0..files.len() as u32).collect::<Vec<_>>());
                let why = format!("a stream at the writing end: {e}; nothing renamed, partial files kept for a resume");
                break Err(send_error(ctl, ErrorCode::BadMessage, why));
            }
            if set.running() > 0 {
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() > idle {
                set.shut();
                break Err(Fail::Told(format!(
                    "the client opened no data connection and said nothing for {} s: partial files kept",
                    idle.as_secs()
                )));
            }
            if shared.stop.load(std::sync::atomic::Ordering::Relaxed) {
                set.shut();
                break Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
            }
            let ready = match gridperf_sys::poll_readable(&[l.as_raw_fd(), ctl.as_raw_fd()], 100) {
                Ok(r) => r,
                Err(e) => {
                    set.shut();
                    break Err(Fail::Told(format!("waiting on the copy's connections: {e}")));
                }
            };
            // connections beyond what runs at once wait, without a thread or a buffer, for one to end
            while set.running() < live {
                let Some((k, s)) = waiting.pop_front() else { break };
                set.start(k, s);
            }
            if ready[0] {
                let mut fits = |h: &DataHello| h.kind == DataKind::Copy && h.index < most && !seen.contains(&h.index);
                if let Some((h, s)) = data::accept_one(l, senders, token, &mut fits) {
                    tune_socket(&s, spec);
                    if !spec.senders.is_empty() && welcome(&s, token).is_err() {
                        continue;
                    }
                    seen.push(h.index);
                    if set.running() < live {
                        set.start(h.index, s);
                    } else if waiting.len() < live {
                        waiting.push_back((h.index, s));
                    }
                    // beyond both: closed (its blocks go again on another)
                }
            }
            if !ready[1] {
                continue;
            }
            match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
                Ok(msg) => {
                    let acts = m.handle(Input::Msg(msg), clock.now());
                    if acts.iter().any(|a| matches!(a, Action::Fail(_))) {
                        set.shut();
                    }
                    break Ok(acts);
                }
                Err(e) => {
                    // the client vanished: what arrived stays, partial, for a resume
                    set.shut();
                    break Err(Fail::Told(format!("the client went away during the copy: {e}; partial files kept")));
                }
            }
        };
        // the client says done once every block is acknowledged: what its
        // connections still carry is not needed
        let works = set.finish();
        outcome.map(|acts| (works, acts))
    });
    shared.metrics.moved(0, moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum());
    received
}

/// The streams' results, and the machine's answer to the client's frame that ended them.
type Received = (Vec<std::io::Result<StreamWork>>, Acts);

/// A third-party copy's destination greets a source agent's data
/// connection with the token it carried: the source sends nothing until
/// it sees it (a client cannot aim a source agent's data at anything but
/// an agent expecting it).
pub(super) fn welcome(mut s: &TcpStream, token: u64) -> std::io::Result<()> {
    use std::io::Write;
    s.write_all(&token.to_be_bytes())
}
/// Every file's end: renamed into place if whole (and its source unchanged), else kept partial.
pub(super) fn finish_all(files: &[Option<dp::SinkFile>], changed: &[u32]) -> Vec<wire::CopyOutcome> {
    files
        .iter()
        .enumerate()
        .filter_map(|(k, f)| f.as_ref().map(|f| f.finish(k as u32, changed.contains(&(k as u32)))))
        .collect()
}
