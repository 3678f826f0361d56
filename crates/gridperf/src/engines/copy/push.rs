//! A push: this host sends its files, the agent writes them beneath its
//! root. What is said when is [`proto::Push`]'s; this file runs its tasks:
//! the data connections (opened while the agent looks at the files) and
//! the blocks over the pool.

use super::{drive, file_result, needed_bytes, net, refusal, Conn, Moved, Watch};
use crate::datapath::copy::{self as dp, BlockQueue, Skipped, SourceFile};
use crate::error::Result;
use crate::host;
use crate::runner::converse::{converse, Clock, Tasks};
use crate::runner::Session;
use gridperf_core::model::CopyEvent;
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{End, Input};
use gridperf_core::wire::{CopyFile, CopyNeed, CopyOutcome};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Instant;

/// What the copy's machine asks for.
type Acts = crate::runner::converse::Acts<Task>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends `sources` (each one's `info.path` beneath the agent's root).
pub(super) fn run(
    session: &mut Session,
    c: &Conn,
    sources: &[SourceFile],
    skipped: Vec<Skipped>,
    watch: &mut Watch,
) -> Result<Moved> {
    let o = c.o;
    let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
    let mut m = proto::Push::new(infos.clone(), o.streams, super::waits(o));
    let clock = Clock::start();
    let first = m.start(clock.now());
    let mut work = Work { c, sources, watch, opening: None, first: Vec::new(), sent: None };
    converse(session, &mut m, first, &clock, o.deadlines.control + o.idle, &mut work)?;
    let sent = work.sent.ok_or_else(|| net("the copy ended before its blocks were sent"))?;
    let files = outcomes_of(&infos, m.needs(), m.outcomes(), &sent.failed, &sent.changed);
    Ok(Moved {
        files,
        skipped,
        works: sent.pool.works,
        intervals: sent.intervals,
        seconds: sent.seconds,
        events: sent.pool.events,
        tail_blocks: sent.tail_blocks,
        agent_streams: m.take_agent_streams(),
        resent: sent.resent,
        agent: m.take_agent().unwrap_or_default(),
    })
}

/// What sending the blocks left for the report.
struct Sent {
    pool: dp::PoolOut,
    intervals: Vec<Vec<u64>>,
    seconds: f64,
    failed: Vec<(u32, String)>,
    changed: Vec<u32>,
    tail_blocks: u64,
    resent: u64,
}

/// A push's tasks: the data connections, opened while the agent looks at
/// the files; the blocks over the pool.
struct Work<'a, 'w> {
    c: &'a Conn<'a>,
    sources: &'a [SourceFile],
    watch: &'a mut Watch<'w>,
    opening: Option<std::thread::JoinHandle<Result<Vec<TcpStream>>>>,
    first: Vec<TcpStream>,
    sent: Option<Sent>,
}

impl Tasks<proto::Push> for Work<'_, '_> {
    fn run(&mut self, t: Task, m: &mut proto::Push, _: &mut Session, clock: &Clock) -> Result<Acts> {
        match t {
            Task::OpenData { .. } => {
                let c = self.c;
                let (o, addr, port, token) = (c.o.clone(), c.addr, c.port, c.token);
                self.opening = Some(std::thread::spawn(move || super::connect(addr, port, token, &o)));
                Ok(Vec::new())
            }
            Task::SendBlocks { needs } => {
                let event = self.send(&needs);
                Ok(m.handle(Input::Event(event), clock.now()))
            }
            other => Err(net(format!("internal: a push has no task {other:?}"))),
        }
    }

    fn wait(&mut self, m: &mut proto::Push, clock: &Clock) -> Result<Acts> {
        let opening = self.opening.take().ok_or_else(|| net("internal: a push waits for nothing"))?;
        self.first = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        Ok(m.handle(Input::Event(Event::DataOpened), clock.now()))
    }
}

impl Work<'_, '_> {
    /// The blocks `needs` asks for, over the pool: every one acknowledged, or why the sending stopped.
    fn send(&mut self, needs: &[CopyNeed]) -> Event {
        let (c, o, sources) = (self.c, self.c.o, self.sources);
        let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
        let total = needed_bytes(needs, &infos, o.block);
        let queue = if o.split_static { BlockQueue::split_static(needs, o.streams) } else { BlockQueue::new(needs) };
        let plan = dp::PoolPlan {
            start: o.streams,
            auto: o.auto,
            restart: o.restart,
            tail: o.tail,
            connections: c.counters.len() as u32,
            restart_caveat: host::ssthresh_cached(),
        };
        // the first connections are open; a restart's or -P auto's are opened as needed
        let first: Mutex<Vec<Option<TcpStream>>> =
            Mutex::new(std::mem::take(&mut self.first).into_iter().map(Some).collect());
        let open = |k: u32| -> std::io::Result<dp::Link> {
            let had = lock(&first).get_mut(k as usize).and_then(Option::take);
            let sock = match had {
                Some(s) => s,
                None => c.connect_one(k).map_err(|e| std::io::Error::other(e.to_string()))?,
            };
            Ok(dp::Link { sock, idle: o.idle, crypt: dp::Crypt::of(c.keys, k, true), window: o.window })
        };
        let fresh: Mutex<Vec<CopyEvent>> = Mutex::default();
        let t0 = Instant::now();
        let (pool, end, intervals) = drive(c.counters, total, self.watch, &fresh, |moved| {
            dp::send_pool(sources, o.block, &queue, &plan, &open, moved, &|e| lock(&fresh).push(e.clone()))
        });
        let failed = queue.failed();
        let mut changed: Vec<u32> =
            sources.iter().enumerate().filter(|(_, s)| s.changed()).map(|(k, _)| k as u32).collect();
        changed.extend(failed.iter().map(|(f, _)| *f));
        let stopped = queue.stopped();
        self.sent = Some(Sent {
            pool,
            intervals,
            seconds: (end - t0).as_secs_f64(),
            failed,
            changed: changed.clone(),
            tail_blocks: queue.tail_sent(),
            resent: queue.resent(),
        });
        match stopped {
            // the writing end may say why it closed a stream: the machine waits for its words
            Some(why) => Event::Stopped { why },
            None => Event::Sent { changed, streams: Vec::new(), events: Vec::new(), tail_blocks: 0 },
        }
    }
}

/// Each file's outcome: the agent's, or a refusal, or the reason this end
/// stopped sending it (`failed`: the writing end's own reason, where it
/// gave one, is the better one), or a source that changed meanwhile.
fn outcomes_of(
    infos: &[CopyFile],
    needs: &[CopyNeed],
    outcomes: &[CopyOutcome],
    failed: &[(u32, String)],
    changed: &[u32],
) -> Vec<gridperf_core::model::CopyFileResult> {
    infos
        .iter()
        .enumerate()
        .map(|(k, info)| {
            let k = k as u32;
            let need = needs.iter().find(|n| n.file == k);
            let outcome = outcomes.iter().find(|x| x.file == k);
            let mut error = match (refusal(need), outcome) {
                (Some(r), _) => r,
                (None, Some(x)) => x.error.clone(),
                (None, None) => Some("the agent said nothing of it".into()),
            };
            if let Some((_, why)) = failed.iter().find(|(f, _)| *f == k) {
                if why != dp::WRITE_FAILED || error.is_none() {
                    error = Some(why.clone());
                }
            } else if changed.contains(&k) && error.is_none() {
                error = Some("the source changed during the copy: not renamed".into());
            }
            file_result(&info.path, info.size, need, outcome, error)
        })
        .collect()
}
