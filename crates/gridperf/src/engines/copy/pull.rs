//! A pull: the agent sends what names beneath its root hold, this host
//! writes beneath the destination directory. What is said when is
//! [`proto::Pull`]'s; this file runs its tasks: the data connections
//! (opened while the agent lists its files), the partial files prepared,
//! the blocks taken on connections the agent asks for, the files renamed.

use super::{drive, file_result, needed_bytes, net, refusal, Conn, Moved, Watch};
use crate::datapath::copy::{self as dp, SinkFile, SinkRules, StreamWork};
use crate::error::{Error, Result};
use crate::runner::converse::{converse, Clock, Tasks};
use crate::runner::Session;
use gridperf_core::model::CopyEvent;
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{CopyFile, CopyNeed};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the copy's machine asks for.
type Acts = crate::runner::converse::Acts<Task>;

/// Takes what `names` hold beneath the agent's root; each file is written
/// beneath `dest` at `place(its path)`.
pub(super) fn run(
    session: &mut Session,
    c: &Conn,
    names: &[String],
    dest: &OwnedFd,
    place: &dyn Fn(&str) -> String,
    watch: &mut Watch,
) -> Result<Moved> {
    let o = c.o;
    let asked: Vec<CopyFile> =
        names.iter().map(|n| CopyFile { path: n.clone(), size: 0, mtime_ns: 0, digest: None, origin: None }).collect();
    let mut m = proto::Pull::new(asked, o.streams, c.counters.len() as u32, super::waits(o));
    let clock = Clock::start();
    let first = m.start(clock.now());
    let mut work = Work {
        c,
        dest,
        place,
        watch,
        opening: None,
        socks: Vec::new(),
        local: Vec::new(),
        sinks: Vec::new(),
        needs: Vec::new(),
        got: None,
        changed: Vec::new(),
    };
    converse(session, &mut m, first, &clock, o.deadlines.control + o.idle, &mut work)?;
    let got = work.got.take().ok_or_else(|| net("the copy ended before the blocks came"))?;
    let sent = m.take_sent().unwrap_or_default();
    let files: Vec<_> = work
        .local
        .iter()
        .enumerate()
        .map(|(k, f)| finish_file(k as u32, f, &work.needs[k], work.sinks[k].as_ref(), &work.changed))
        .collect();
    Ok(Moved {
        resent: files.iter().map(|f| f.resent).sum(),
        files,
        skipped: m.take_skipped(),
        works: got.works,
        intervals: got.intervals,
        seconds: got.seconds,
        events: sent.events,
        tail_blocks: sent.tail_blocks,
        agent_streams: sent.streams,
        agent: m.take_agent().unwrap_or_default(),
    })
}

/// What the blocks' receiving left for the report.
struct Got {
    works: Vec<std::io::Result<StreamWork>>,
    intervals: Vec<Vec<u64>>,
    seconds: f64,
}

/// A pull's tasks: the data connections (opened while the agent lists its
/// files), the partial files prepared, the blocks taken, the files renamed.
struct Work<'a, 'w> {
    c: &'a Conn<'a>,
    dest: &'a OwnedFd,
    place: &'a dyn Fn(&str) -> String,
    watch: &'a mut Watch<'w>,
    opening: Option<std::thread::JoinHandle<Result<Vec<TcpStream>>>>,
    socks: Vec<TcpStream>,
    local: Vec<CopyFile>,
    sinks: Vec<Option<SinkFile>>,
    needs: Vec<CopyNeed>,
    got: Option<Got>,
    changed: Vec<u32>,
}

impl Tasks<proto::Pull> for Work<'_, '_> {
    fn run(&mut self, t: Task, m: &mut proto::Pull, s: &mut Session, clock: &Clock) -> Result<Acts> {
        let o = self.c.o;
        match t {
            Task::OpenData { .. } => {
                let c = self.c;
                let (o, addr, port, token) = (o.clone(), c.addr, c.port, c.token);
                self.opening = Some(std::thread::spawn(move || super::connect(addr, port, token, &o)));
                Ok(Vec::new())
            }
            Task::Prepare { list } => {
                self.local = placed(s, &list, self.place)?;
                let rules = SinkRules { force: o.force, resume: o.resume, checksum: o.checksum, ..Default::default() };
                let (sinks, needs) = dp::prepare_all(self.dest, &self.local, o.block, rules);
                self.sinks = sinks;
                self.needs = needs.clone();
                Ok(m.handle(Input::Event(Event::Prepared { needs }), clock.now()))
            }
            Task::Receive => self.receive(m, s, clock),
            // the files are renamed after the conversation: the report comes meanwhile
            Task::Finish { changed } => {
                self.changed = changed;
                Ok(Vec::new())
            }
            other => Err(net(format!("internal: a pull has no task {other:?} here"))),
        }
    }

    fn wait(&mut self, m: &mut proto::Pull, clock: &Clock) -> Result<Acts> {
        let opening = self.opening.take().ok_or_else(|| net("internal: a pull waits for nothing"))?;
        self.socks = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        Ok(m.handle(Input::Event(Event::DataOpened), clock.now()))
    }
}

impl Work<'_, '_> {
    /// The blocks, while the progress is told: the machine's answer once
    /// the agent said every block is sent, or why the copy stopped.
    fn receive(&mut self, m: &mut proto::Pull, s: &mut Session, clock: &Clock) -> Result<Acts> {
        if let Some(opening) = self.opening.take() {
            self.socks = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        let c = self.c;
        let total = needed_bytes(&self.needs, &self.local, c.o.block);
        let socks = std::mem::take(&mut self.socks);
        let sinks = &self.sinks;
        let fresh: Mutex<Vec<CopyEvent>> = Mutex::default();
        let t0 = Instant::now();
        let ((works, acts), end, intervals) =
            drive(c.counters, total, self.watch, &fresh, |moved| receive(s, m, clock, c, sinks, socks, moved, &fresh));
        self.got = Some(Got { works, intervals, seconds: (end - t0).as_secs_f64() });
        Ok(acts)
    }
}

/// Where each of the agent's files goes here, its path checked as the
/// agent's paths are there; two to one destination are refused.
fn placed(session: &mut Session, list: &[CopyFile], place: &dyn Fn(&str) -> String) -> Result<Vec<CopyFile>> {
    let mut local: Vec<CopyFile> = Vec::with_capacity(list.len());
    for f in list {
        gridperf_core::copy::check_relative(&f.path)
            .map_err(|m| net(format!("the agent named a file {m}: nothing was written")))?;
        local.push(CopyFile { path: place(&f.path), ..f.clone() });
    }
    if !gridperf_core::copy::named_twice(local.iter().map(|f| f.path.as_str())).is_empty() {
        let why = "two of the agent's files go to one destination here: one destination takes one source; \
                   pull them into different directories";
        session.abort(why);
        return Err(Error::usage(why));
    }
    Ok(local)
}

/// The agent sends; this end takes its connections as it asks for them (a
/// restart's, -P auto's) until it says every block is sent. Each of the
/// agent's frames goes to the machine; what it answers that is not a
/// connection or a note ends the receiving: the streams' results, and the
/// machine's actions (finish and the files' end, or why the copy stopped).
#[allow(clippy::too_many_arguments)]
fn receive(
    session: &mut Session,
    m: &mut proto::Pull,
    clock: &Clock,
    c: &Conn,
    sinks: &[Option<SinkFile>],
    socks: Vec<TcpStream>,
    moved: &[AtomicU64],
    fresh: &Mutex<Vec<CopyEvent>>,
) -> (Vec<std::io::Result<StreamWork>>, Acts) {
    let o = c.o;
    std::thread::scope(|scope| {
        let mut set = dp::ReceiveSet::new(scope, sinks, o.block, o.idle, o.window, c.keys, moved);
        for (k, s) in socks.into_iter().enumerate() {
            set.start(k as u32, s);
        }
        let mut quiet_since = Instant::now();
        let rest: Acts = 'receiving: loop {
            let failed = if let Some(e) = set.reap() {
                Some(format!("a stream here: {e}"))
            } else if set.running() > 0 {
                quiet_since = Instant::now();
                None
            } else if quiet_since.elapsed() > o.idle {
                Some(format!("no data connection and no word from the agent for {:?}", o.idle))
            } else {
                None
            };
            let acts = match failed {
                Some(why) => m.handle(Input::Event(Event::ReceiveFailed { why }), clock.now()),
                None if !session.agent_gone_within(Duration::from_millis(100)) => continue,
                None => match session.frame_by(Instant::now() + o.deadlines.control) {
                    Ok(Some(msg)) => m.handle(Input::Msg(msg), clock.now()),
                    Ok(None) => m.handle(Input::Deadline, clock.now()),
                    Err(e) => m.handle(Input::Event(Event::ReceiveFailed { why: e.to_string() }), clock.now()),
                },
            };
            let mut rest = Vec::new();
            for a in acts {
                match a {
                    Action::Do(Task::Connect { index }) => match c.connect_one(index) {
                        Ok(s) => set.start(index, s),
                        // the agent's pool sees it never came, and goes on without it
                        Err(e) => eprintln!("gridperf copy: data connection {index}: {e}"),
                    },
                    Action::Do(Task::Note { event }) => {
                        fresh.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event)
                    }
                    other => rest.push(other),
                }
            }
            if !rest.is_empty() {
                break 'receiving rest;
            }
        };
        (set.finish(), rest)
    })
}

/// File `k`'s outcome: its sink finished here (renamed once every block
/// is verified, unless the agent said its source changed), or its refusal.
fn finish_file(
    k: u32,
    f: &CopyFile,
    need: &CopyNeed,
    sink: Option<&SinkFile>,
    changed: &[u32],
) -> gridperf_core::model::CopyFileResult {
    let outcome = sink.map(|s| s.finish(k, changed.contains(&k)));
    let error = match (refusal(Some(need)), &outcome) {
        (Some(r), _) => r,
        (None, Some(x)) => x.error.clone(),
        (None, None) => Some("not prepared".into()),
    };
    file_result(&f.path, f.size, Some(need), outcome.as_ref(), error)
}
