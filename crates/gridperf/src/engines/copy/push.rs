//! A push: this host sends its files, the agent writes them beneath its
//! root. The list in parts, the agent's needs (read while the data
//! connections open), go, the blocks over the pool, step-ready, done with
//! what changed, the outcomes.

use super::{drive, file_result, needed_bytes, net, parts, refusal, Conn, Moved, Watch};
use crate::datapath::copy::{self as dp, BlockQueue, Skipped, SourceFile};
use crate::error::Result;
use crate::host;
use crate::runner::Session;
use gridperf_core::model::CopyEvent;
use gridperf_core::wire::{chunk_files, AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    for part in chunk_files(&infos) {
        session.tell(&ClientMsg::CopyFiles { files: part })?;
    }
    // the data connections open while the agent looks at the files:
    // a round trip less before the first block (270 ms at CERN-Tokyo)
    let (needs, first) = std::thread::scope(|scope| {
        let opening = scope.spawn(|| super::connect(c.addr, c.port, c.token, o));
        let needs = parts(session, o.deadlines.control + o.idle, "needs", |m| match m {
            AgentMsg::CopyNeeds { needs, last } => Ok((needs, last)),
            other => Err(format!("{other:?}")),
        });
        let first = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        needs.and_then(|n| Ok((n, first?)))
    })?;
    // a need of a file the list did not have is the agent's mistake
    if needs.iter().any(|n| n.file as usize >= infos.len()) {
        return Err(net("the agent needs a file the list did not have"));
    }
    let total = needed_bytes(&needs, &infos, o.block);
    // the blocks go as soon as the connections are open: the agent reads
    // them once it has taken every connection (its step-ready is read
    // after them), a round trip less than waiting for it
    session.go()?;
    let queue = if o.split_static { BlockQueue::split_static(&needs, o.streams) } else { BlockQueue::new(&needs) };
    let plan = dp::PoolPlan {
        start: o.streams,
        auto: o.auto,
        restart: o.restart,
        tail: o.tail,
        connections: c.counters.len() as u32,
        restart_caveat: host::ssthresh_cached(),
    };
    // the first connections are open; a restart's or -P auto's are opened as needed
    let first: Mutex<Vec<Option<TcpStream>>> = Mutex::new(first.into_iter().map(Some).collect());
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
    let (pool, end, intervals) = drive(c.counters, total, watch, &fresh, |moved| {
        dp::send_pool(sources, o.block, &queue, &plan, &open, moved, &|e| lock(&fresh).push(e.clone()))
    });
    if let Some(why) = queue.stopped() {
        // the writing end may have said why it closed a stream (after its step-ready, if it sent one)
        let wait = o.deadlines.control.min(Duration::from_secs(2));
        if session.agent_gone_within(wait)
            && matches!(session.next(Duration::from_millis(200))?, AgentMsg::StepReady)
            && session.agent_gone_within(wait)
        {
            session.next(Duration::from_millis(200))?;
        }
        session.abort(&why);
        return Err(net(format!("the copy stopped: {why} (what arrived is kept partial: --resume goes on)")));
    }
    let failed = queue.failed();
    let mut changed: Vec<u32> =
        sources.iter().enumerate().filter(|(_, s)| s.changed()).map(|(k, _)| k as u32).collect();
    changed.extend(failed.iter().map(|(f, _)| *f));
    match session.next(o.deadlines.control)? {
        AgentMsg::StepReady => {}
        other => return Err(net(format!("expected the agent's step-ready, got {other:?}"))),
    }
    session.tell(&ClientMsg::CopyDone { changed: changed.clone() })?;
    // nothing follows the results but the report: asked for now
    session.finish_ahead()?;
    let mut agent_streams = Vec::new();
    let outcomes: Vec<CopyOutcome> = parts(session, o.deadlines.control + o.idle, "results", |m| match m {
        AgentMsg::CopyResults { files, last, streams } => {
            agent_streams.extend(streams);
            Ok((files, last))
        }
        other => Err(format!("{other:?}")),
    })?;
    let files = outcomes_of(&infos, &needs, &outcomes, &failed, &changed);
    Ok(Moved {
        files,
        skipped,
        works: pool.works,
        intervals,
        seconds: (end - t0).as_secs_f64(),
        events: pool.events,
        tail_blocks: queue.tail_sent(),
        agent_streams,
        resent: queue.resent(),
    })
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
