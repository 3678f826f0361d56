//! The client's side of a copy: push (this host sends, the agent writes
//! beneath its root) or pull (the agent sends, this host writes beneath
//! the destination directory). The conversation: the request, the file
//! list in parts, the needs (what the writing end lacks, after hashing
//! what partial files hold again), the data connections, the blocks, the
//! outcome per file.

use crate::datapath::copy::{self as dp, BlockQueue, SinkRules, StreamWork};
pub use crate::datapath::copy::{expand, Skipped, SourceFile, FLIP_BLOCK, UNREADABLE};
use crate::error::{Error, Result};
use crate::host;
use crate::runner::{Deadlines, Target};
use gridperf_core::copy::{block_count, block_len};
use gridperf_core::model::{copy_verdict, CopyEvent, CopyFileResult, CopyReport, COPY_SCHEMA};
use gridperf_core::wire::{
    chunk_files, chunk_needs, AgentMsg, ClientMsg, CopyDirection, CopyFile, CopyNeed, CopyOutcome, CopySpec, Test,
};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a copy runs.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub streams: u32,
    pub block: u64,
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_bps: Option<u64>,
    pub resume: bool,
    pub force: bool,
    /// A checksum the writing end computes besides BLAKE3.
    pub checksum: Option<gridperf_core::copy::Checksum>,
    pub deadlines: Deadlines,
    /// The longest a stream waits on the other end (a block, an acknowledgment).
    pub idle: Duration,
    /// Seal the data connections (X25519, AES-256-GCM); never sent in the clear once asked.
    pub encrypt: bool,
    /// `-P auto` (`--streams MIN..MAX`): the fewest and the most connections at once; `streams` is the start.
    pub auto: Option<(u32, u32)>,
    /// Restart a slow connection (push); send the last blocks again on idle connections (push).
    pub restart: bool,
    pub tail: bool,
    /// bbftp's static split (push): stream k sends only the k-th slice.
    pub split_static: bool,
}

impl CopyOptions {
    /// The most connections at once.
    pub fn most_streams(&self) -> u32 {
        self.auto.map_or(self.streams, |(_, hi)| hi.max(self.streams))
    }

    /// The request of a copy of `files` entries this way, as these options ask.
    pub fn spec(&self, direction: CopyDirection, files: u32) -> CopySpec {
        CopySpec {
            direction,
            files,
            streams: self.streams,
            block: self.block,
            window: self.window,
            congestion: self.congestion.clone(),
            pacing_bps: self.pacing_bps,
            resume: self.resume,
            force: self.force,
            checksum: self.checksum,
            encrypt: None,
            connections: self.connections(),
            restart: self.restart,
            tail: self.tail,
            auto: self.auto,
            senders: Vec::new(),
            join: false,
        }
    }

    /// How the sending end opens its data connections.
    pub fn dial(&self) -> dp::Dial {
        dp::Dial {
            window: self.window,
            congestion: self.congestion.clone(),
            pacing_bps: self.pacing_bps,
            within: self.deadlines.connect,
            bind: None,
            welcome: false,
        }
    }

    /// The most connections over the copy: restarts and -P auto's changes open new ones.
    pub fn connections(&self) -> u32 {
        (self.most_streams() * 2 + 16).min(gridperf_core::wire::MAX_COPY_CONNECTIONS)
    }
}

/// What to copy.
pub enum Job {
    /// This host sends these files (each one's `info.path` is where it
    /// goes beneath the agent's root); `skipped` were not sent, with why.
    Push { sources: Vec<SourceFile>, skipped: Vec<Skipped>, source: String, destination: String },
    /// The agent sends what `names` (beneath its root) hold; each file is
    /// written beneath `dest` here at `place(its path)`.
    Pull { names: Vec<String>, dest: OwnedFd, place: Box<dyn Fn(&str) -> String>, source: String, destination: String },
}

fn net(e: impl std::fmt::Display) -> Error {
    Error::network(e.to_string())
}

/// Bytes the needs ask for.
pub(crate) fn needed_bytes(needs: &[CopyNeed], files: &[CopyFile], block: u64) -> u64 {
    needs
        .iter()
        .filter(|n| n.refused.is_none())
        .filter_map(|n| files.get(n.file as usize).map(|f| (n, f)))
        .map(|(n, f)| n.ranges.iter().flat_map(|&(a, b)| a..b).map(|i| block_len(f.size, block, i)).sum::<u64>())
        .sum()
}

/// What a copy says while it runs: `bytes(done, total)` as bytes are
/// verified, `interval(k, per connection)` at the end of each whole interval
/// with each connection's bytes in it (by number; zero for those not open),
/// `event` what the pool of connections did.
pub struct Watch<'a> {
    pub bytes: &'a mut dyn FnMut(u64, u64),
    pub interval: &'a mut dyn FnMut(usize, &[u64]),
    /// A restart, a connection added or removed, one broken: as it happens.
    pub event: &'a mut dyn FnMut(&CopyEvent),
}

/// Runs the copy, saying how it goes to `watch`.
pub fn run(target: &Target, o: &CopyOptions, job: Job, watch: &mut Watch) -> Result<CopyReport> {
    let mut opened = target.open(o.deadlines)?;
    let addr = opened.addr;
    let (direction, count) = match &job {
        Job::Push { sources, .. } => (CopyDirection::Push, sources.len()),
        Job::Pull { names, .. } => (CopyDirection::Pull, names.len()),
    };
    if count == 0 {
        return Err(Error::usage("nothing to copy: no regular file among the sources"));
    }
    if direction == CopyDirection::Pull && o.split_static {
        return Err(Error::usage("--split static is for a push (this host sends)"));
    }

    let spec = o.spec(direction, count as u32);
    let exchange = if o.encrypt {
        Some(gridperf_core::seal::Exchange::new().map_err(|e| Error::internal(format!("--encrypt: {e}")))?)
    } else {
        None
    };
    let spec = CopySpec { encrypt: exchange.as_ref().map(|x| gridperf_core::auth::hex(&x.public())), ..spec };
    spec.validate().map_err(|r| Error::usage(r.message))?;
    let ready = opened.session.request(Test::Copy(spec))?;
    let port = ready.tcp_port.ok_or_else(|| net("the agent opened no data port"))?;
    let session = &mut opened.session;
    // --encrypt: the agent's half of the key agreement, or nothing is sent
    let keys = match exchange {
        None => None,
        Some(x) => {
            let theirs = match session.next(o.deadlines.control)? {
                AgentMsg::CopyKey { public } => gridperf_core::auth::unhex(&public)
                    .ok_or_else(|| net("the agent's encryption key is not 32 bytes of hex: nothing was sent"))?,
                other => {
                    let why = format!(
                        "asked for --encrypt, the agent answered {other:?} instead of its key (an older agent?): \
                         nothing was sent"
                    );
                    session.abort(&why);
                    return Err(Error::refused(why));
                }
            };
            let secret = session.secret().copied();
            Some(
                x.agree(&theirs, true, secret.as_ref())
                    .map_err(|e| net(format!("--encrypt: {e}: nothing was sent")))?,
            )
        }
    };
    let encryption = keys.as_ref().map(|k| {
        if k.authenticated {
            format!(
                "{} (bound to the session's key: no one without it can read or alter the data)",
                gridperf_core::seal::CIPHER
            )
        } else {
            format!(
                "{} (no key: safe from eavesdroppers, not from a man in the middle; serve --auth and --key bind it)",
                gridperf_core::seal::CIPHER
            )
        }
    });
    let agent_streams: Vec<StreamWork>;
    let client = host::end_info(None, false);
    let counters: Vec<AtomicU64> = (0..o.connections()).map(|_| AtomicU64::new(0)).collect();
    let events: Vec<CopyEvent>;
    let tail_blocks: u64;
    let intervals: Vec<Vec<u64>>;
    let report_files: Vec<CopyFileResult>;
    let skipped: Vec<Skipped>;
    let works: Vec<std::io::Result<StreamWork>>;
    let seconds: f64;
    let kept_total: u64;
    let resent: u64;
    let sending: bool;
    let source: String;
    let destination: String;
    match job {
        Job::Push { sources, skipped: skip, source: src, destination: dst } => {
            let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
            for part in chunk_files(&infos) {
                session.tell(&ClientMsg::CopyFiles { files: part })?;
            }
            // the data connections open while the agent looks at the files:
            // a round trip less before the first block (270 ms at CERN-Tokyo)
            let (needs, first) = std::thread::scope(|scope| {
                let opening = scope.spawn(|| connect(addr, port, ready.token, o));
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
            // the blocks go as soon as the connections are open: the agent
            // reads them once it has taken every connection (its step-ready
            // is read after them), a round trip less than waiting for it
            session.go()?;
            let queue =
                if o.split_static { BlockQueue::split_static(&needs, o.streams) } else { BlockQueue::new(&needs) };
            let plan = dp::PoolPlan {
                start: o.streams,
                auto: o.auto,
                restart: o.restart,
                tail: o.tail,
                connections: counters.len() as u32,
                restart_caveat: host::ssthresh_cached(),
            };
            // the first connections are open; a restart's or -P auto's are opened as needed
            let first: std::sync::Mutex<Vec<Option<TcpStream>>> =
                std::sync::Mutex::new(first.into_iter().map(Some).collect());
            let open = |k: u32| -> std::io::Result<dp::Link> {
                let had = first
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_mut(k as usize)
                    .and_then(Option::take);
                let sock = match had {
                    Some(s) => s,
                    None => {
                        connect_one(addr, port, ready.token, o, k).map_err(|e| std::io::Error::other(e.to_string()))?
                    }
                };
                Ok(dp::Link { sock, idle: o.idle, crypt: dp::Crypt::of(keys.as_ref(), k, true), window: o.window })
            };
            let fresh: std::sync::Mutex<Vec<CopyEvent>> = std::sync::Mutex::default();
            let t0 = Instant::now();
            let (pool, end, taken) = drive(&counters, total, watch, &fresh, |moved| {
                dp::send_pool(&sources, o.block, &queue, &plan, &open, moved, &|e| {
                    fresh.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(e.clone())
                })
            });
            let results = pool.works;
            events = pool.events;
            tail_blocks = queue.tail_sent();
            intervals = taken;
            seconds = (end - t0).as_secs_f64();
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
            let mut theirs = Vec::new();
            let outcomes: Vec<CopyOutcome> = parts(session, o.deadlines.control + o.idle, "results", |m| match m {
                AgentMsg::CopyResults { files, last, streams } => {
                    theirs.extend(streams);
                    Ok((files, last))
                }
                other => Err(format!("{other:?}")),
            })?;
            agent_streams = theirs;
            let mut files_out = Vec::new();
            for (k, info) in infos.iter().enumerate() {
                let need = needs.iter().find(|n| n.file == k as u32);
                let outcome = outcomes.iter().find(|x| x.file == k as u32);
                let mut error = match (need.and_then(|n| n.refused.clone()), outcome) {
                    (Some(r), _) if r.starts_with("finished by an earlier run") => None,
                    (Some(r), _) => Some(r),
                    (None, Some(x)) => x.error.clone(),
                    (None, None) => Some("the agent said nothing of it".into()),
                };
                if let Some((_, why)) = failed.iter().find(|(f, _)| *f == k as u32) {
                    // the writing end's own reason, where it gave one (a full disk), is the better one
                    if why != dp::WRITE_FAILED || error.is_none() {
                        error = Some(why.clone());
                    }
                } else if changed.contains(&(k as u32)) && error.is_none() {
                    error = Some("the source changed during the copy: not renamed".into());
                }
                files_out.push(CopyFileResult {
                    path: info.path.clone(),
                    size: info.size,
                    blake3: outcome.and_then(|x| x.blake3.clone()),
                    moved: outcome.map(|x| x.moved).unwrap_or(0),
                    kept: outcome.map(|x| x.kept).unwrap_or_else(|| need.map(|n| n.kept).unwrap_or(0)),
                    resent: outcome.map(|x| x.resent).unwrap_or(0),
                    checksum: outcome.and_then(|x| x.checksum.clone()),
                    error,
                });
            }
            resent = queue.resent();
            kept_total = files_out.iter().map(|f| f.kept).sum();
            report_files = files_out;
            skipped = skip;
            works = results;
            sending = true;
            source = src;
            destination = dst;
        }
        Job::Pull { names, dest, place, source: src, destination: dst } => {
            let asked: Vec<CopyFile> = names
                .iter()
                .map(|n| CopyFile { path: n.clone(), size: 0, mtime_ns: 0, digest: None, origin: None })
                .collect();
            for part in chunk_files(&asked) {
                session.tell(&ClientMsg::CopyFiles { files: part })?;
            }
            // the data connections open while the agent lists its files and
            // this end prepares the partial files: a round trip less
            let opening = std::thread::spawn({
                let (o, token) = (o.clone(), ready.token);
                move || connect(addr, port, token, &o)
            });
            let mut theirs_skipped = Vec::new();
            let list: Vec<CopyFile> = parts(session, o.deadlines.control + o.idle, "file list", |m| match m {
                AgentMsg::CopySources { files, last, skipped } => {
                    theirs_skipped.extend(skipped);
                    Ok((files, last))
                }
                other => Err(format!("{other:?}")),
            })?;
            // where each goes here: checked as the agent's paths are there
            let mut local: Vec<CopyFile> = Vec::with_capacity(list.len());
            for f in &list {
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
            let rules = SinkRules { force: o.force, resume: o.resume, checksum: o.checksum, ..Default::default() };
            let (sinks, needs) = dp::prepare_all(&dest, &local, o.block, rules);
            let parts = chunk_needs(&needs);
            let n = parts.len();
            for (k, part) in parts.into_iter().enumerate() {
                session.tell(&ClientMsg::CopyNeeds { needs: part, last: k + 1 == n })?;
            }
            let total = needed_bytes(&needs, &local, o.block);
            // the agent may send as soon as it has taken the connections: go
            // now, not after its step-ready (read below), a round trip less
            session.go()?;
            let socks = opening.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            let fresh: std::sync::Mutex<Vec<CopyEvent>> = std::sync::Mutex::default();
            let t0 = Instant::now();
            let token = ready.token;
            // the agent sends; this end takes its connections as it asks for
            // them (a restart's, -P auto's) until it says every block is sent
            let ((results, sent), end, taken) = drive(&counters, total, watch, &fresh, |moved| {
                std::thread::scope(|scope| {
                    let mut set = dp::ReceiveSet::new(scope, &sinks, o.block, o.idle, o.window, keys.as_ref(), moved);
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
                            Ok(AgentMsg::CopyConnect { index }) if (index as usize) < moved.len() => {
                                match connect_one(addr, port, token, o, index) {
                                    Ok(s) => set.start(index, s),
                                    // the agent's pool sees it never came, and goes on without it
                                    Err(e) => eprintln!("gridperf copy: data connection {index}: {e}"),
                                }
                            }
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
            });
            intervals = taken;
            seconds = (end - t0).as_secs_f64();
            let changed = match sent {
                Ok(AgentMsg::CopySent { changed, streams, events: theirs, tail_blocks: tail }) => {
                    // the report comes while this end renames its files
                    session.finish_ahead()?;
                    agent_streams = streams;
                    events = theirs;
                    tail_blocks = tail;
                    changed
                }
                Ok(_) => return Err(net("expected the agent's copy-sent")),
                Err(why) => {
                    let why = format!("the copy stopped: {why} (what arrived is kept partial: --resume goes on)");
                    session.abort(&why);
                    return Err(net(why));
                }
            };
            let mut files_out = Vec::new();
            for (k, f) in local.iter().enumerate() {
                let need = &needs[k];
                let outcome = sinks[k].as_ref().map(|s| s.finish(k as u32, changed.contains(&(k as u32))));
                let error = match (&need.refused, &outcome) {
                    (Some(r), _) if r.starts_with("finished by an earlier run") => None,
                    (Some(r), _) => Some(r.clone()),
                    (None, Some(x)) => x.error.clone(),
                    (None, None) => Some("not prepared".into()),
                };
                files_out.push(CopyFileResult {
                    path: f.path.clone(),
                    size: f.size,
                    blake3: outcome.as_ref().and_then(|x| x.blake3.clone()),
                    moved: outcome.as_ref().map(|x| x.moved).unwrap_or(0),
                    kept: outcome.as_ref().map(|x| x.kept).unwrap_or(need.kept),
                    resent: outcome.as_ref().map(|x| x.resent).unwrap_or(0),
                    checksum: outcome.as_ref().and_then(|x| x.checksum.clone()),
                    error,
                });
            }
            resent = files_out.iter().map(|f| f.resent).sum();
            kept_total = files_out.iter().map(|f| f.kept).sum();
            report_files = files_out;
            skipped = theirs_skipped;
            works = results;
            sending = false;
            source = src;
            destination = dst;
        }
    }
    // each connection that ran (a broken one is among the events), its intervals by its number
    let mut intervals = intervals;
    let mut per_stream = Vec::new();
    for w in works {
        let Ok(mut s) = w else { continue };
        let iv = intervals.get_mut(s.index as usize).map(std::mem::take).unwrap_or_default();
        let whole = iv.len().saturating_sub(1) as f64 * INTERVAL.as_secs_f64();
        s.last_interval_ms = ((seconds - whole).max(0.0) * 1000.0).round() as u64;
        s.interval_bytes = iv;
        per_stream.push(s);
    }
    per_stream.sort_by_key(|s| s.index);
    let agent = session.finish()?;
    let env = opened.environment(client, Some(agent), Vec::new());
    let bytes_moved: u64 = report_files.iter().map(|f| f.moved).sum();
    Ok(CopyReport {
        schema: COPY_SCHEMA.into(),
        direction: if sending { "push" } else { "pull" }.into(),
        source,
        destination,
        streams: o.streams,
        streams_auto: o.auto,
        block: o.block,
        checksum: o.checksum.map(|c| c.name().to_string()),
        files: report_files,
        skipped,
        bytes_moved,
        bytes_kept: kept_total,
        blocks_resent: resent,
        seconds,
        throughput_bps: if seconds > 0.0 { bytes_moved as f64 * 8.0 / seconds } else { 0.0 },
        verdict: if sending {
            copy_verdict(&per_stream, &agent_streams)
        } else {
            copy_verdict(&agent_streams, &per_stream)
        },
        per_stream,
        pairs: Vec::new(),
        agent_streams,
        encryption,
        interval_ms: INTERVAL.as_millis() as u64,
        events,
        tail_blocks,
        env,
    })
}

/// The parts of one of the agent's lists, until the one marked last; at
/// most [`gridperf_core::wire::MAX_COPY_FILES`] items in all.
pub(crate) fn parts<T>(
    session: &mut crate::runner::Session,
    within: Duration,
    what: &str,
    mut part: impl FnMut(AgentMsg) -> std::result::Result<(Vec<T>, bool), String>,
) -> Result<Vec<T>> {
    let mut all = Vec::new();
    loop {
        match part(session.next(within)?) {
            Ok((items, last)) => {
                if all.len() + items.len() > gridperf_core::wire::MAX_COPY_FILES as usize {
                    return Err(net(format!("the agent's {what} is longer than a copy takes")));
                }
                all.extend(items);
                if last {
                    return Ok(all);
                }
            }
            Err(other) => return Err(net(format!("expected the agent's {what}, got {other}"))),
        }
    }
}

/// Runs the streams (`streams` returns their results) while this thread
/// reports progress every 200 ms.
pub(crate) fn drive<R: Send>(
    counters: &[AtomicU64],
    total: u64,
    watch: &mut Watch,
    fresh: &std::sync::Mutex<Vec<CopyEvent>>,
    streams: impl FnOnce(&[AtomicU64]) -> R + Send,
) -> (R, Instant, Vec<Vec<u64>>) {
    let tell = |watch: &mut Watch| {
        let new: Vec<CopyEvent> = std::mem::take(&mut *fresh.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for e in &new {
            (watch.event)(e);
        }
    };
    let sum = || counters.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
    let start = Instant::now();
    let mut intervals: Vec<Vec<u64>> = vec![Vec::new(); counters.len()];
    let mut last: Vec<u64> = vec![0; counters.len()];
    let mut take = |intervals: &mut Vec<Vec<u64>>| {
        for (k, c) in counters.iter().enumerate() {
            let now = c.load(Ordering::Relaxed);
            intervals[k].push(now - last[k]);
            last[k] = now;
        }
    };
    let (r, end) = std::thread::scope(|scope| {
        // the end is stamped where the streams end, not when this thread
        // next looks; and it looks at once (dp::Ended)
        let (wake, ended) = dp::Ended::wakes_me();
        let h = scope.spawn(move || {
            let _wake = wake;
            let r = streams(counters);
            (r, Instant::now())
        });
        let running = || !ended.load(Ordering::SeqCst) && !h.is_finished();
        let mut next = start + INTERVAL;
        while running() {
            (watch.bytes)(sum(), total);
            tell(watch);
            std::thread::park_timeout(Duration::from_millis(200).min(next.saturating_duration_since(Instant::now())));
            while Instant::now() >= next && running() {
                take(&mut intervals);
                let k = intervals.first().map(Vec::len).unwrap_or(0);
                let last: Vec<u64> = intervals.iter().map(|iv| iv.last().copied().unwrap_or(0)).collect();
                (watch.interval)(k, &last);
                next += INTERVAL;
            }
        }
        (watch.bytes)(sum(), total);
        tell(watch);
        h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    // the last, partial interval
    take(&mut intervals);
    (r, end, intervals)
}

/// The length of a copy's per-stream intervals.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The first data connections, each opened as [`connect_one`] opens it.
/// All at once: one after another they took a round trip each (0.8 s
/// more for four streams at CERN-Tokyo).
fn connect(addr: SocketAddr, port: u16, token: u64, o: &CopyOptions) -> Result<Vec<TcpStream>> {
    std::thread::scope(|scope| {
        let opening: Vec<_> =
            (0..o.streams).map(|k| scope.spawn(move || connect_one(addr, port, token, o, k))).collect();
        opening.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

/// Data connection `k`, opened as [`dp::dial`] opens it.
fn connect_one(addr: SocketAddr, port: u16, token: u64, o: &CopyOptions, k: u32) -> Result<TcpStream> {
    dp::dial(SocketAddr::new(addr.ip(), port), token, k, &o.dial()).map_err(|e| match e {
        dp::DialError::Congestion(..) => Error::usage(e.to_string()),
        dp::DialError::Net(m) => net(m),
    })
}

/// Blocks a file of `size` has (for the report's words).
pub fn blocks_of(size: u64, block: u64) -> u64 {
    block_count(size, block)
}
