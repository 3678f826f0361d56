//! A pull: the agent sends what names beneath its root hold, this host
//! writes beneath the destination directory. The names in parts, the
//! agent's list (read while the data connections open), the needs this end
//! works out, go, the blocks taken on connections the agent asks for,
//! copy-sent, the files renamed here.

use super::{drive, file_result, needed_bytes, net, parts, refusal, Conn, Moved, Watch};
use crate::datapath::copy::{self as dp, SinkFile, SinkRules, StreamWork};
use crate::error::{Error, Result};
use crate::runner::Session;
use gridperf_core::model::CopyEvent;
use gridperf_core::wire::{chunk_files, chunk_needs, AgentMsg, ClientMsg, CopyFile, CopyNeed};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    for part in chunk_files(&asked) {
        session.tell(&ClientMsg::CopyFiles { files: part })?;
    }
    // the data connections open while the agent lists its files and this
    // end prepares the partial files: a round trip less
    let opening = std::thread::spawn({
        let (o, addr, port, token) = (o.clone(), c.addr, c.port, c.token);
        move || super::connect(addr, port, token, &o)
    });
    let mut skipped = Vec::new();
    let list: Vec<CopyFile> = parts(session, o.deadlines.control + o.idle, "file list", |m| match m {
        AgentMsg::CopySources { files, last, skipped: theirs } => {
            skipped.extend(theirs);
            Ok((files, last))
        }
        other => Err(format!("{other:?}")),
    })?;
    let local = placed(session, &list, place)?;
    let rules = SinkRules { force: o.force, resume: o.resume, checksum: o.checksum, ..Default::default() };
    let (sinks, needs) = dp::prepare_all(dest, &local, o.block, rules);
    let chunks = chunk_needs(&needs);
    let n = chunks.len();
    for (k, part) in chunks.into_iter().enumerate() {
        session.tell(&ClientMsg::CopyNeeds { needs: part, last: k + 1 == n })?;
    }
    let total = needed_bytes(&needs, &local, o.block);
    // the agent may send as soon as it has taken the connections: go now,
    // not after its step-ready (read below), a round trip less
    session.go()?;
    let socks = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    let fresh: Mutex<Vec<CopyEvent>> = Mutex::default();
    let t0 = Instant::now();
    let ((works, sent), end, intervals) =
        drive(c.counters, total, watch, &fresh, |moved| receive(session, c, &sinks, socks, moved, &fresh));
    let seconds = (end - t0).as_secs_f64();
    let (changed, agent_streams, events, tail_blocks) = match sent {
        Ok(AgentMsg::CopySent { changed, streams, events, tail_blocks }) => {
            // the report comes while this end renames its files
            session.finish_ahead()?;
            (changed, streams, events, tail_blocks)
        }
        Ok(_) => return Err(net("expected the agent's copy-sent")),
        Err(why) => {
            let why = format!("the copy stopped: {why} (what arrived is kept partial: --resume goes on)");
            session.abort(&why);
            return Err(net(why));
        }
    };
    let files: Vec<_> = local
        .iter()
        .enumerate()
        .map(|(k, f)| finish_file(k as u32, f, &needs[k], sinks[k].as_ref(), &changed))
        .collect();
    Ok(Moved {
        resent: files.iter().map(|f| f.resent).sum(),
        files,
        skipped,
        works,
        intervals,
        seconds,
        events,
        tail_blocks,
        agent_streams,
    })
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
/// restart's, -P auto's) until it says every block is sent: the streams'
/// results, and the agent's copy-sent or why the copy stopped.
fn receive(
    session: &mut Session,
    c: &Conn,
    sinks: &[Option<SinkFile>],
    socks: Vec<TcpStream>,
    moved: &[AtomicU64],
    fresh: &Mutex<Vec<CopyEvent>>,
) -> (Vec<std::io::Result<StreamWork>>, std::result::Result<AgentMsg, String>) {
    let o = c.o;
    std::thread::scope(|scope| {
        let mut set = dp::ReceiveSet::new(scope, sinks, o.block, o.idle, o.window, c.keys, moved);
        for (k, s) in socks.into_iter().enumerate() {
            set.start(k as u32, s);
        }
        let mut quiet_since = Instant::now();
        let mut ready_seen = false;
        let sent: std::result::Result<AgentMsg, String> = loop {
            if let Some(e) = set.reap() {
                break Err(format!("a stream here: {e}"));
            }
            if set.running() > 0 {
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() > o.idle {
                break Err(format!("no data connection and no word from the agent for {:?}", o.idle));
            }
            if !session.agent_gone_within(Duration::from_millis(100)) {
                continue;
            }
            match session.next(o.deadlines.control) {
                Ok(AgentMsg::CopyConnect { index }) if (index as usize) < moved.len() => match c.connect_one(index) {
                    Ok(s) => set.start(index, s),
                    // the agent's pool sees it never came, and goes on without it
                    Err(e) => eprintln!("gridperf copy: data connection {index}: {e}"),
                },
                Ok(AgentMsg::StepReady) if !ready_seen => ready_seen = true,
                Ok(AgentMsg::CopyEvent { event }) => {
                    fresh.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event)
                }
                Ok(m @ AgentMsg::CopySent { .. }) if ready_seen => break Ok(m),
                Ok(other) => break Err(format!("expected the agent's copy-sent, got {other:?}")),
                Err(e) => break Err(e.to_string()),
            }
        };
        (set.finish(), sent)
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
