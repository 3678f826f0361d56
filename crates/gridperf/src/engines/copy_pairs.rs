//! A copy between agents (third-party) over several host pairs, as the
//! CERN-Tokyo study planned it: each pair is a source agent sending
//! straight to a destination agent over its own pool of streams (restarts,
//! the tail and -P auto as in any copy), and every pair takes its blocks
//! from one queue this client keeps, in leases, so that a faster pair
//! takes more and a pair that is lost gives its blocks back to the others.
//!
//! The conversation: each source lists the files with their BLAKE3
//! (sources that differ are refused before any byte moves); the
//! first destination prepares the partial files and says what it needs;
//! with different destinations on shared storage, the others join those
//! partial files (refused if they do not see them); each source is told
//! where to send and asks for leases as its queue runs low, reporting the
//! blocks acknowledged since the last; the destinations finish (the
//! others first, then the first, which renames each file once every block
//! is verified by one of them).

use super::copy::{drive, needed_bytes, parts, CopyOptions, Watch, INTERVAL};
use crate::error::{Error, Result};
use crate::host;
use crate::runner::{Opened, Target};
use gridperf_core::copy::block_len;
use gridperf_core::model::{copy_verdict, CopyEvent, CopyFileResult, CopyPair, CopyReport, CopyStream, COPY_SCHEMA};
use gridperf_core::wire::{
    chunk_files, AgentMsg, ClientMsg, CopyDirection, CopyFile, CopyNeed, CopyOutcome, CopySpec, Test,
};
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The agents of a copy between agents, each with its path beneath its root.
pub struct Pairs {
    /// One per pair: distinct agents.
    pub sources: Vec<(SocketAddr, String, String)>,
    /// One (every pair writes to it: the same destination), or one per
    /// source (different destinations, on storage they share).
    pub dests: Vec<(SocketAddr, String, String)>,
    /// Where a listed file (its path from the named source's parent) goes
    /// beneath a destination's root, given the destination's path.
    pub place: fn(&str, &str) -> String,
    pub source: String,
    pub destination: String,
}

fn net(e: impl std::fmt::Display) -> Error {
    Error::network(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The one queue: blocks not yet leased, the blocks each pair holds, which pairs still run.
struct Ledger {
    pending: VecDeque<(u32, u64)>,
    leased: Vec<HashSet<(u32, u64)>>,
    alive: Vec<bool>,
}

impl Ledger {
    /// Whether pair `k` may be told that no more blocks will come: none
    /// left, and no other running pair holds any that might come back.
    fn last_for(&self, k: usize) -> bool {
        self.pending.is_empty() && (0..self.leased.len()).all(|p| p == k || !self.alive[p] || self.leased[p].is_empty())
    }
}

/// How one pair ended.
#[derive(Default)]
struct PairEnd {
    streams: Vec<CopyStream>,
    events: Vec<CopyEvent>,
    tail_blocks: u64,
    changed: Vec<u32>,
    error: Option<String>,
    seconds: f64,
}

/// Runs the copy between agents, saying how it goes to `watch` (one
/// counter per pair: `interval` gets each pair's bytes).
pub fn run(job: Pairs, o: &CopyOptions, watch: &mut Watch) -> Result<CopyReport> {
    let n = job.sources.len();
    if n == 0 || job.dests.is_empty() || (job.dests.len() != 1 && job.dests.len() != n) {
        return Err(Error::usage(format!(
            "{n} source agents and {} destinations: give one destination (every pair writes to it) or one per source",
            job.dests.len()
        )));
    }
    if n > gridperf_core::wire::MAX_PAIRS {
        return Err(Error::usage(format!("{n} host pairs: at most {}", gridperf_core::wire::MAX_PAIRS)));
    }
    let distinct = |v: &[(SocketAddr, String, String)]| v.iter().map(|e| e.0).collect::<HashSet<_>>().len() == v.len();
    if !distinct(&job.sources) || !distinct(&job.dests) {
        return Err(Error::usage(
            "each source agent and each destination agent may be named once (an agent runs one copy at a time)",
        ));
    }
    if o.encrypt || o.split_static {
        return Err(Error::usage(
            "--encrypt and --split static are not built for a copy between agents: copy through this host for them",
        ));
    }
    let same = job.dests.len() == 1;
    let dest_of = |k: usize| if same { 0 } else { k };
    let conns = o.connections();
    let base_spec = o.spec(CopyDirection::Send, 1);
    let within = o.deadlines.control + o.idle;
    // sessions opened so far: each is told why if the copy cannot go on
    let mut opened: Vec<Opened> = Vec::new();
    let fail = |opened: &mut Vec<Opened>, e: Error| -> Error {
        for s in opened.iter_mut() {
            s.session.abort(&e.to_string());
        }
        e
    };

    // 1. every source lists the files, each with its BLAKE3
    let mut lists: Vec<Vec<CopyFile>> = Vec::new();
    // what the first source left out of its directories (the others hold the same)
    let mut skipped: Vec<(String, String)> = Vec::new();
    for (addr, host, path) in &job.sources {
        let first = lists.is_empty();
        gridperf_core::copy::check_relative(path).map_err(|m| Error::usage(format!("{host}:{path}: {m}")))?;
        let mut s = match Target::remote(*addr).open(o.deadlines) {
            Ok(s) => s,
            Err(e) => return Err(fail(&mut opened, e)),
        };
        let listed = (|| -> Result<Vec<CopyFile>> {
            s.session.request(Test::Copy(base_spec.clone()))?;
            let named = CopyFile { path: path.clone(), size: 0, mtime_ns: 0, digest: None, origin: None };
            s.session.tell(&ClientMsg::CopyFiles { files: vec![named] })?;
            parts(&mut s.session, within, "file list", |m| match m {
                AgentMsg::CopySources { files, last, skipped: skip } => {
                    if first {
                        skipped.extend(skip);
                    }
                    Ok((files, last))
                }
                other => Err(format!("{other:?}")),
            })
        })();
        opened.push(s);
        match listed {
            Ok(l) => lists.push(l),
            Err(e) => return Err(fail(&mut opened, Error::network(format!("source {host}: {e}")))),
        }
    }
    let infos = lists[0].clone();
    if infos.is_empty() {
        return Err(fail(&mut opened, Error::usage("nothing to copy: no regular file among the sources")));
    }
    for f in &infos {
        if let Err(m) = gridperf_core::copy::check_relative(&f.path) {
            return Err(fail(&mut opened, net(format!("a source agent named a file {m}: nothing was written"))));
        }
    }
    for (k, list) in lists.iter().enumerate().skip(1) {
        let differs = if list.len() != infos.len() {
            Some(format!("{} files against {}", list.len(), infos.len()))
        } else {
            // the named file (or directory) may be named differently on each; what is beneath it may not
            let beneath = |p: &str| p.split_once('/').map(|(_, rest)| rest.to_string()).unwrap_or_default();
            list.iter()
                .zip(&infos)
                .find(|(a, b)| beneath(&a.path) != beneath(&b.path) || a.size != b.size || a.digest != b.digest)
                .map(|(a, b)| {
                    if beneath(&a.path) != beneath(&b.path) {
                        format!("{} where the first has {}", a.path, b.path)
                    } else if a.size != b.size {
                        format!("{} is {} bytes, {} at the first", a.path, a.size, b.size)
                    } else {
                        format!("{}: its BLAKE3 differs from the first's ({} there)", a.path, b.path)
                    }
                })
        };
        if let Some(why) = differs {
            let e = Error::refused(format!(
                "the sources do not hold the same data: {}:{} against {}:{}: {why}; nothing was moved",
                job.sources[k].1, job.sources[k].2, job.sources[0].1, job.sources[0].2
            ));
            return Err(fail(&mut opened, e));
        }
    }

    // 2. the destinations: the first prepares and says what it needs; the others join its partial files
    let mut dest_ports: Vec<(u16, u64)> = Vec::new();
    let mut needs: Vec<CopyNeed> = Vec::new();
    for (j, (addr, host, path)) in job.dests.iter().enumerate() {
        let feeding: Vec<usize> = (0..n).filter(|&k| dest_of(k) == j).collect();
        let placed: Vec<CopyFile> =
            infos.iter().map(|f| CopyFile { path: (job.place)(path, &f.path), digest: None, ..f.clone() }).collect();
        let spec = CopySpec {
            direction: CopyDirection::Push,
            files: placed.len() as u32,
            streams: o.streams * feeding.len() as u32,
            connections: (conns * feeding.len() as u32).min(gridperf_core::wire::MAX_COPY_CONNECTIONS),
            restart: false,
            tail: false,
            auto: None,
            senders: feeding.iter().map(|&k| job.sources[k].0.ip().to_canonical().to_string()).collect(),
            join: j > 0,
            ..base_spec.clone()
        };
        let mut s = match Target::remote(*addr).open(o.deadlines) {
            Ok(s) => s,
            Err(e) => return Err(fail(&mut opened, e)),
        };
        let asked = (|| -> Result<(u16, u64, Vec<CopyNeed>)> {
            spec.validate().map_err(|r| Error::usage(r.message))?;
            let ready = s.session.request(Test::Copy(spec))?;
            let port = ready.tcp_port.ok_or_else(|| net("the agent opened no data port"))?;
            for part in chunk_files(&placed) {
                s.session.tell(&ClientMsg::CopyFiles { files: part })?;
            }
            let got = parts(&mut s.session, within, "needs", |m| match m {
                AgentMsg::CopyNeeds { needs, last } => Ok((needs, last)),
                other => Err(format!("{other:?}")),
            })?;
            Ok((port, ready.token, got))
        })();
        opened.push(s);
        let (port, token, got) = match asked {
            Ok(x) => x,
            Err(e) => return Err(fail(&mut opened, Error::network(format!("destination {host}: {e}")))),
        };
        if got.iter().any(|x| x.file as usize >= infos.len()) {
            return Err(fail(&mut opened, net(format!("destination {host} needs a file the list did not have"))));
        }
        if j == 0 {
            needs = got;
        } else if let Some(x) =
            got.iter().find(|x| x.refused.is_some() && needs.iter().any(|p| p.file == x.file && p.refused.is_none()))
        {
            let why = x.refused.clone().unwrap_or_default();
            return Err(fail(&mut opened, Error::refused(format!("destination {host}: {why}; nothing was moved"))));
        }
        dest_ports.push((port, token));
    }
    let total = needed_bytes(&needs, &infos, o.block);

    // 3. each source is told where to send; each destination takes its connections
    for k in 0..n {
        let j = dest_of(k);
        let slot = (0..k).filter(|&p| dest_of(p) == j).count() as u32;
        let (port, token) = dest_ports[j];
        let to = SocketAddr::new(job.dests[j].0.ip(), port);
        let told = opened[k].session.tell(&ClientMsg::CopyTo { addr: to.to_string(), token, base: slot * conns });
        if let Err(e) = told {
            return Err(fail(&mut opened, Error::network(format!("source {}: {e}", job.sources[k].1))));
        }
    }
    for j in 0..job.dests.len() {
        let s = &mut opened[n + j].session;
        let ready = match s.next(o.deadlines.control + o.deadlines.connect) {
            Ok(AgentMsg::StepReady) => s.go(),
            Ok(other) => Err(net(format!("expected the agent's step-ready, got {other:?}"))),
            Err(e) => Err(e),
        };
        if let Err(e) = ready {
            let e = Error::network(format!("destination {}: the sources' connections: {e}", job.dests[j].1));
            return Err(fail(&mut opened, e));
        }
    }

    // 4. the pairs run, each source asking for leases from the one queue
    let ledger = Mutex::new(Ledger {
        pending: needs
            .iter()
            .filter(|x| x.refused.is_none())
            .flat_map(|x| x.ranges.iter().flat_map(move |&(a, b)| (a..b).map(move |i| (x.file, i))))
            .collect(),
        leased: vec![HashSet::new(); n],
        alive: vec![true; n],
    });
    let size_of = |file: u32, idx: u64| infos.get(file as usize).map_or(0, |f| block_len(f.size, o.block, idx));
    let names: Vec<String> = (0..n).map(|k| format!("{} → {}", job.sources[k].1, job.dests[dest_of(k)].1)).collect();
    let counters: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let fresh: Mutex<Vec<CopyEvent>> = Mutex::default();
    let lost_events: Mutex<Vec<CopyEvent>> = Mutex::default();
    let t0 = Instant::now();
    let (sources_opened, dests_opened) = opened.split_at_mut(n);
    let (ends, end, intervals) = drive(&counters, total, watch, &fresh, |moved| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = sources_opened
                .iter_mut()
                .enumerate()
                .map(|(k, s)| {
                    let (ledger, fresh, names, size_of, lost_events) =
                        (&ledger, &fresh, &names, &size_of, &lost_events);
                    scope.spawn(move || {
                        let lost = |why: String| {
                            let mut l = lock(ledger);
                            l.alive[k] = false;
                            let mut back: Vec<(u32, u64)> = l.leased[k].drain().collect();
                            back.sort_unstable();
                            let count = back.len();
                            for b in back.into_iter().rev() {
                                l.pending.push_front(b);
                            }
                            let alive = l.alive.iter().any(|a| *a);
                            drop(l);
                            let whither = if alive { "the other pairs take them" } else { "no pair is left" };
                            let event = CopyEvent {
                                t_s: t0.elapsed().as_secs_f64(),
                                kind: "pair-lost".into(),
                                stream: None,
                                new_stream: None,
                                why: format!("pair {k} ({}): {why}; its {count} blocks in hand: {whither}", names[k]),
                            };
                            lock(fresh).push(event.clone());
                            lock(lost_events).push(event);
                            PairEnd { error: Some(why), seconds: t0.elapsed().as_secs_f64(), ..Default::default() }
                        };
                        loop {
                            match s.session.next(within) {
                                Ok(AgentMsg::CopyLease { done, want }) => {
                                    let mut l = lock(ledger);
                                    let mut bytes = 0;
                                    for x in &done {
                                        for &(a, b) in &x.ranges {
                                            for i in a..b.min(a + (1 << 24)) {
                                                if l.leased[k].remove(&(x.file, i)) {
                                                    bytes += size_of(x.file, i);
                                                }
                                            }
                                        }
                                    }
                                    moved[k].fetch_add(bytes, Ordering::Relaxed);
                                    // at most an even share of what is left, so that a small
                                    // file's blocks do not all go to the pair that asked first
                                    let alive = l.alive.iter().filter(|a| **a).count().max(1);
                                    let share = l.pending.len().div_ceil(alive).max(1);
                                    let mut give = Vec::new();
                                    while give.len() < (want.min(4096) as usize).min(share) {
                                        let Some(b) = l.pending.pop_front() else { break };
                                        give.push(b);
                                    }
                                    l.leased[k].extend(give.iter().copied());
                                    let last = l.last_for(k);
                                    drop(l);
                                    let blocks = CopyNeed::of_blocks(give);
                                    if let Err(e) = s.session.tell(&ClientMsg::CopyLeased { blocks, last }) {
                                        return lost(e.to_string());
                                    }
                                }
                                Ok(AgentMsg::CopyEvent { event }) => {
                                    let shift = |x: Option<u32>| x.map(|i| i + k as u32 * conns);
                                    lock(fresh).push(CopyEvent {
                                        stream: shift(event.stream),
                                        new_stream: shift(event.new_stream),
                                        why: format!("pair {k} ({}): {}", names[k], event.why),
                                        ..event
                                    });
                                }
                                Ok(AgentMsg::CopySent { changed, streams, events, tail_blocks }) => {
                                    // the pool ended well: what it still held was acknowledged
                                    let mut l = lock(ledger);
                                    let held: Vec<(u32, u64)> = l.leased[k].drain().collect();
                                    l.alive[k] = false;
                                    drop(l);
                                    let bytes: u64 = held
                                        .iter()
                                        .filter(|(f, _)| !changed.contains(f))
                                        .map(|&(f, i)| size_of(f, i))
                                        .sum();
                                    moved[k].fetch_add(bytes, Ordering::Relaxed);
                                    // in the report, pair k's connections are numbered from k * conns
                                    let global = k as u32 * conns;
                                    let shift = |x: Option<u32>| x.map(|i| i + global);
                                    return PairEnd {
                                        streams: streams
                                            .into_iter()
                                            .map(|st| CopyStream {
                                                index: st.index + global,
                                                slot: st.slot + global,
                                                pair: Some(k as u32),
                                                ..st
                                            })
                                            .collect(),
                                        events: events
                                            .into_iter()
                                            .map(|e| CopyEvent {
                                                stream: shift(e.stream),
                                                new_stream: shift(e.new_stream),
                                                why: format!("pair {k} ({}): {}", names[k], e.why),
                                                ..e
                                            })
                                            .collect(),
                                        tail_blocks,
                                        changed,
                                        error: None,
                                        seconds: t0.elapsed().as_secs_f64(),
                                    };
                                }
                                Ok(other) => return lost(format!("expected a lease or copy-sent, got {other:?}")),
                                Err(e) => return lost(e.to_string()),
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect::<Vec<_>>()
        })
    });
    let seconds = (end - t0).as_secs_f64();
    let left = {
        let l = lock(&ledger);
        l.pending.len() + l.leased.iter().map(HashSet::len).sum::<usize>()
    };

    // 5. the destinations finish: the joined ones first, then the first (it renames)
    let changed: Vec<u32> = {
        let mut c: Vec<u32> = ends.iter().flat_map(|e| e.changed.iter().copied()).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    if ends.iter().all(|e| e.error.is_some()) {
        let whys: Vec<String> = ends
            .iter()
            .enumerate()
            .map(|(k, e)| format!("{}: {}", names[k], e.error.clone().unwrap_or_default()))
            .collect();
        let why =
            format!("every host pair was lost ({}): what arrived is kept partial, --resume goes on", whys.join("; "));
        for s in dests_opened.iter_mut() {
            s.session.abort(&why);
        }
        return Err(Error::network(why));
    }
    let mut outcomes: Vec<Vec<CopyOutcome>> = vec![Vec::new(); job.dests.len()];
    let mut dest_streams: Vec<CopyStream> = Vec::new();
    let mut notes = Vec::new();
    for j in (0..job.dests.len()).rev() {
        let s = &mut dests_opened[j].session;
        let mut theirs = Vec::new();
        let results = s.tell(&ClientMsg::CopyDone { changed: changed.clone() }).and_then(|()| {
            parts(s, within, "results", |m| match m {
                AgentMsg::CopyResults { files, last, streams } => {
                    theirs.extend(streams);
                    Ok((files, last))
                }
                other => Err(format!("{other:?}")),
            })
        });
        match results {
            Ok(r) => outcomes[j] = r,
            Err(e) if j > 0 => {
                notes.push(format!("destination {}: {e} (the first finishes with what it sees)", job.dests[j].1))
            }
            Err(e) => return Err(Error::network(format!("destination {}: {e}", job.dests[j].1))),
        }
        let feeding: Vec<usize> = (0..n).filter(|&k| dest_of(k) == j).collect();
        // numbered as the sources' are: pair k's from k * conns
        dest_streams.extend(theirs.into_iter().filter_map(|st| {
            let k = *feeding.get((st.index / conns.max(1)) as usize)?;
            let shift = (k - (st.index / conns.max(1)) as usize) as u32 * conns;
            Some(CopyStream { pair: Some(k as u32), index: st.index + shift, slot: st.slot + shift, ..st })
        }));
    }
    let mut files_out = Vec::new();
    for (k, info) in infos.iter().enumerate() {
        let need = needs.iter().find(|x| x.file == k as u32);
        let first = outcomes[0].iter().find(|x| x.file == k as u32);
        let others = outcomes.iter().skip(1).flatten().filter(|x| x.file == k as u32);
        let (moved, resent) = others.fold((first.map_or(0, |x| x.moved), first.map_or(0, |x| x.resent)), |a, x| {
            (a.0 + x.moved, a.1 + x.resent)
        });
        let mut error = match (need.and_then(|x| x.refused.clone()), first) {
            (Some(r), _) if r.starts_with("finished by an earlier run") => None,
            (Some(r), _) => Some(r),
            (None, Some(x)) => x.error.clone(),
            (None, None) => Some("the destination said nothing of it".into()),
        };
        if changed.contains(&(k as u32)) && error.is_none() {
            error = Some("the source changed during the copy (or its blocks failed): not renamed".into());
        }
        files_out.push(CopyFileResult {
            path: (job.place)(&job.dests[0].2, &info.path),
            size: info.size,
            blake3: first.and_then(|x| x.blake3.clone()),
            moved,
            kept: first.map_or_else(|| need.map_or(0, |x| x.kept), |x| x.kept),
            resent,
            checksum: first.and_then(|x| x.checksum.clone()),
            error,
        });
    }
    if left > 0 {
        notes.push(format!("{left} blocks were never acknowledged: kept partial for --resume"));
    }
    // every agent is asked to finish at once, then each report is read: one
    // round trip for all of them, not one each
    for s in opened.iter_mut() {
        let _ = s.session.finish_ahead();
    }
    let mut agents = Vec::new();
    for s in opened.iter_mut() {
        agents.push(s.session.finish().ok());
    }
    let client = host::end_info(None, false);
    let primary = agents.get(n).cloned().flatten();
    let mut env = opened[n].environment(client, primary, notes);
    env.target = job.destination.clone();
    let mut per_stream: Vec<CopyStream> = Vec::new();
    let mut events: Vec<CopyEvent> = lock(&lost_events).drain(..).collect();
    let mut tail_blocks = 0;
    let mut pairs = Vec::new();
    for (k, e) in ends.into_iter().enumerate() {
        per_stream.extend(e.streams);
        events.extend(e.events);
        tail_blocks += e.tail_blocks;
        pairs.push(CopyPair {
            source: format!("{}:{}", job.sources[k].1, job.sources[k].2),
            destination: format!("{}:{}", job.dests[dest_of(k)].1, job.dests[dest_of(k)].2),
            bytes: counters[k].load(Ordering::Relaxed),
            seconds: e.seconds,
            interval_bytes: intervals.get(k).cloned().unwrap_or_default(),
            error: e.error,
        });
    }
    events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    per_stream.sort_by_key(|s| (s.pair, s.index));
    let bytes_moved: u64 = files_out.iter().map(|f| f.moved).sum();
    Ok(CopyReport {
        schema: COPY_SCHEMA.into(),
        direction: "third-party".into(),
        source: job.source,
        destination: job.destination,
        streams: o.streams,
        streams_auto: o.auto,
        block: o.block,
        checksum: o.checksum.map(|c| c.name().to_string()),
        bytes_kept: files_out.iter().map(|f| f.kept).sum(),
        blocks_resent: files_out.iter().map(|f| f.resent).sum(),
        files: files_out,
        skipped,
        bytes_moved,
        seconds,
        throughput_bps: if seconds > 0.0 { bytes_moved as f64 * 8.0 / seconds } else { 0.0 },
        verdict: copy_verdict(&per_stream, &dest_streams),
        per_stream,
        pairs,
        agent_streams: dest_streams,
        encryption: None,
        interval_ms: INTERVAL.as_millis() as u64,
        events,
        tail_blocks,
        env,
    })
}
