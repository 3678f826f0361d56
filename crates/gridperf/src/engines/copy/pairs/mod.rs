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

use super::{drive, needed_bytes, CopyOptions, Watch, INTERVAL};
use crate::error::{Error, Result};
use crate::host;
use crate::runner::converse::{converse, Acts, Clock, Tasks};
use crate::runner::{Opened, Session, Target};
use gridperf_core::copy::block_len;
use gridperf_core::model::{copy_verdict, CopyEvent, CopyFileResult, CopyPair, CopyReport, CopyStream, COPY_SCHEMA};
use gridperf_core::proto::copy::{self as proto, Task};
use gridperf_core::proto::{nanos, End};
use gridperf_core::wire::{AgentMsg, ClientMsg, CopyDirection, CopyFile, CopyNeed, CopyOutcome, CopySpec, Test};
mod lease;

use lease::{lock, Ledger, PairEnd, Shared};
use std::collections::HashSet;
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
    /// The lab this host is one of: the first destination's session watches it.
    pub watched: Option<String>,
}

fn net(e: impl std::fmt::Display) -> Error {
    Error::network(e.to_string())
}

/// Runs the copy between agents, saying how it goes to `watch` (one
/// counter per pair: `interval` gets each pair's bytes). The steps: the
/// sources list the files, the destinations say what they need, the pairs
/// connect, the pairs run from the one queue, the destinations finish.
pub fn run(job: Pairs, o: &CopyOptions, watch: &mut Watch) -> Result<CopyReport> {
    check(&job, o)?;
    let mut c = Copy {
        n: job.sources.len(),
        same: job.dests.len() == 1,
        conns: o.connections(),
        within: o.deadlines.control + o.idle,
        job,
        o,
        opened: Vec::new(),
        lists: Vec::new(),
        dests: Vec::new(),
        clock: Clock::start(),
    };
    let (infos, skipped) = c.list_sources()?;
    let (dest_ports, needs) = c.prepare_dests(&infos)?;
    c.connect_pairs(&dest_ports)?;
    let total = needed_bytes(&needs, &infos, o.block);
    let ran = c.run_pairs(&infos, &needs, total, watch);
    let changed: Vec<u32> = {
        let mut ch: Vec<u32> = ran.ends.iter().flat_map(|e| e.changed.iter().copied()).collect();
        ch.sort_unstable();
        ch.dedup();
        ch
    };
    if ran.ends.iter().all(|e| e.error.is_some()) {
        let whys: Vec<String> = ran
            .ends
            .iter()
            .enumerate()
            .map(|(k, e)| format!("{}: {}", c.name(k), e.error.clone().unwrap_or_default()))
            .collect();
        let why =
            format!("every host pair was lost ({}): what arrived is kept partial, --resume goes on", whys.join("; "));
        for s in c.opened[c.n..].iter_mut() {
            s.session.abort(&why);
        }
        return Err(Error::network(why));
    }
    let Finished { outcomes, dest_streams, mut notes } = c.finish_dests(&changed)?;
    let files = c.file_results(&infos, &needs, &outcomes, &changed);
    if ran.left > 0 {
        notes.push(format!("{} blocks were never acknowledged: kept partial for --resume", ran.left));
    }
    c.report(ran, files, skipped, dest_streams, notes)
}

/// The shape of a copy between agents, before any agent is asked.
fn check(job: &Pairs, o: &CopyOptions) -> Result<()> {
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
    Ok(())
}

/// A copy between agents under way: the sessions opened so far (the
/// sources', then the destinations'), each told why if it cannot go on,
/// and the client's end of each one's conversation (what is said when is
/// theirs: [`proto::Listing`], [`proto::Leases`], [`proto::Destination`]).
struct Copy<'a> {
    job: Pairs,
    o: &'a CopyOptions,
    opened: Vec<Opened>,
    /// Each source's listing, once listed.
    lists: Vec<proto::Listing>,
    /// Each destination's end, once it said what it needs.
    dests: Vec<proto::Destination>,
    /// The machines' clock.
    clock: Clock,
    /// Host pairs (= sources).
    n: usize,
    /// One destination for every pair.
    same: bool,
    /// Connections per pair: pair k's are numbered from k * conns.
    conns: u32,
    /// How long a list's next part may take.
    within: std::time::Duration,
}

/// What the destinations said as they finished: each one's outcomes,
/// their streams (numbered as the sources'), and notes for the report.
struct Finished {
    outcomes: Vec<Vec<CopyOutcome>>,
    dest_streams: Vec<CopyStream>,
    notes: Vec<String>,
}

/// A destination's data port and the token its connections carry.
type DataPort = (u16, u64);

/// What a source left out of its directories, with why.
type Skipped = Vec<(String, String)>;

/// What the pairs did.
struct Ran {
    ends: Vec<PairEnd>,
    seconds: f64,
    intervals: Vec<Vec<u64>>,
    bytes: Vec<u64>,
    lost_events: Vec<CopyEvent>,
    /// Blocks never acknowledged.
    left: usize,
}

impl Copy<'_> {
    fn dest_of(&self, k: usize) -> usize {
        if self.same {
            0
        } else {
            k
        }
    }

    /// Pair k's words: "a1 → b1".
    fn name(&self, k: usize) -> String {
        format!("{} → {}", self.job.sources[k].1, self.job.dests[self.dest_of(k)].1)
    }

    /// `e`, after every session opened so far was told it.
    fn fail(&mut self, e: Error) -> Error {
        for s in self.opened.iter_mut() {
            s.session.abort(&e.to_string());
        }
        e
    }

    /// Step 1: Every source lists the files, each with its BLAKE3; they must
    /// hold the same. The first's list, and what it left out.
    fn list_sources(&mut self) -> Result<(Vec<CopyFile>, Skipped)> {
        let base_spec = self.o.spec(CopyDirection::Send, 1);
        let mut lists: Vec<Vec<CopyFile>> = Vec::new();
        // what the first source left out of its directories (the others hold the same)
        let mut skipped: Skipped = Vec::new();
        for (addr, host, path) in self.job.sources.clone() {
            let first = lists.is_empty();
            gridperf_core::copy::check_relative(&path).map_err(|m| Error::usage(format!("{host}:{path}: {m}")))?;
            let mut s = match Target::remote(addr).open(self.o.deadlines) {
                Ok(s) => s,
                Err(e) => return Err(self.fail(e)),
            };
            let (within, clock) = (self.within, &self.clock);
            let mut m = proto::Listing::new(nanos(within));
            let listed = (|| -> Result<()> {
                s.session.request(Test::Copy(base_spec.clone()))?;
                let named = CopyFile { path: path.clone(), size: 0, mtime_ns: 0, digest: None, origin: None };
                let asking = m.start(named, clock.now());
                talk(&mut s.session, &mut m, asking, clock, within)
            })();
            self.opened.push(s);
            if let Err(e) = listed {
                return Err(self.fail(Error::network(format!("source {host}: {e}"))));
            }
            let (files, skip) = m.take();
            if first {
                skipped.extend(skip);
            }
            lists.push(files);
            self.lists.push(m);
        }
        let infos = lists[0].clone();
        if infos.is_empty() {
            return Err(self.fail(Error::usage("nothing to copy: no regular file among the sources")));
        }
        for f in &infos {
            if let Err(m) = gridperf_core::copy::check_relative(&f.path) {
                return Err(self.fail(net(format!("a source agent named a file {m}: nothing was written"))));
            }
        }
        for (k, list) in lists.iter().enumerate().skip(1) {
            if let Some(why) = differs(list, &infos) {
                let (a, b) = (&self.job.sources[k], &self.job.sources[0]);
                let e = Error::refused(format!(
                    "the sources do not hold the same data: {}:{} against {}:{}: {why}; nothing was moved",
                    a.1, a.2, b.1, b.2
                ));
                return Err(self.fail(e));
            }
        }
        Ok((infos, skipped))
    }

    /// Step 2: The destinations: the first prepares and says what it needs; the
    /// others join its partial files. Each one's data port and token, and
    /// the first's needs.
    fn prepare_dests(&mut self, infos: &[CopyFile]) -> Result<(Vec<DataPort>, Vec<CopyNeed>)> {
        let base_spec = self.o.spec(CopyDirection::Send, 1);
        let mut dest_ports: Vec<DataPort> = Vec::new();
        let mut needs: Vec<CopyNeed> = Vec::new();
        for (j, (addr, host, path)) in self.job.dests.clone().into_iter().enumerate() {
            let feeding: Vec<usize> = (0..self.n).filter(|&k| self.dest_of(k) == j).collect();
            let placed: Vec<CopyFile> = infos
                .iter()
                .map(|f| CopyFile { path: (self.job.place)(&path, &f.path), digest: None, ..f.clone() })
                .collect();
            let spec = CopySpec {
                direction: CopyDirection::Push,
                files: placed.len() as u32,
                streams: self.o.streams * feeding.len() as u32,
                connections: (self.conns * feeding.len() as u32).min(gridperf_core::wire::MAX_COPY_CONNECTIONS),
                restart: false,
                tail: false,
                auto: None,
                senders: feeding.iter().map(|&k| self.job.sources[k].0.ip().to_canonical().to_string()).collect(),
                join: j > 0,
                ..base_spec.clone()
            };
            // the first destination's record is the copy's: it watches the lab, if any
            let lab = if j == 0 { self.job.watched.clone() } else { None };
            let mut s = match (Target { lab, ..Target::remote(addr) }).open(self.o.deadlines) {
                Ok(s) => s,
                Err(e) => return Err(self.fail(e)),
            };
            let (within, clock) = (self.within, &self.clock);
            // step-ready is due once the sources' connections are taken
            let taking = nanos(self.o.deadlines.control + self.o.deadlines.connect);
            let mut m = proto::Destination::new(nanos(within), taking);
            let asked = (|| -> Result<(u16, u64, Vec<CopyNeed>)> {
                spec.validate().map_err(|r| Error::usage(r.message))?;
                let ready = s.session.request(Test::Copy(spec))?;
                let port = ready.tcp_port.ok_or_else(|| net("the agent opened no data port"))?;
                let listing = m.start(&placed, clock.now());
                talk(&mut s.session, &mut m, listing, clock, within)?;
                Ok((port, ready.token, m.take_needs()))
            })();
            self.opened.push(s);
            self.dests.push(m);
            let (port, token, got) = match asked {
                Ok(x) => x,
                Err(e) => return Err(self.fail(Error::network(format!("destination {host}: {e}")))),
            };
            if got.iter().any(|x| x.file as usize >= infos.len()) {
                return Err(self.fail(net(format!("destination {host} needs a file the list did not have"))));
            }
            if j == 0 {
                needs = got;
            } else if let Some(x) = got
                .iter()
                .find(|x| x.refused.is_some() && needs.iter().any(|p| p.file == x.file && p.refused.is_none()))
            {
                let why = x.refused.clone().unwrap_or_default();
                return Err(self.fail(Error::refused(format!("destination {host}: {why}; nothing was moved"))));
            }
            dest_ports.push((port, token));
        }
        Ok((dest_ports, needs))
    }

    /// Step 3: Each source is told where to send; each destination takes its connections.
    fn connect_pairs(&mut self, dest_ports: &[DataPort]) -> Result<()> {
        let n = self.n;
        for k in 0..n {
            let j = self.dest_of(k);
            let slot = (0..k).filter(|&p| self.dest_of(p) == j).count() as u32;
            let (port, token) = dest_ports[j];
            let to = SocketAddr::new(self.job.dests[j].0.ip(), port);
            let first = self.lists[k].send_to(to, token, slot * self.conns);
            let told = talk(&mut self.opened[k].session, &mut self.lists[k], first, &self.clock, self.within);
            if let Err(e) = told {
                let e = Error::network(format!("source {}: {e}", self.job.sources[k].1));
                return Err(self.fail(e));
            }
        }
        for j in 0..self.job.dests.len() {
            let first = self.dests[j].sources_told(self.clock.now());
            let ready = talk(&mut self.opened[n + j].session, &mut self.dests[j], first, &self.clock, self.within);
            if let Err(e) = ready {
                let e = Error::network(format!("destination {}: the sources' connections: {e}", self.job.dests[j].1));
                return Err(self.fail(e));
            }
        }
        Ok(())
    }

    /// Step 4: The pairs run, each source asking for leases from the one queue.
    fn run_pairs(&mut self, infos: &[CopyFile], needs: &[CopyNeed], total: u64, watch: &mut Watch) -> Ran {
        let n = self.n;
        let ledger = Mutex::new(Ledger {
            pending: needs
                .iter()
                .filter(|x| x.refused.is_none())
                .flat_map(|x| x.ranges.iter().flat_map(move |&(a, b)| (a..b).map(move |i| (x.file, i))))
                .collect(),
            leased: vec![HashSet::new(); n],
            alive: vec![true; n],
        });
        let block = self.o.block;
        let size_of = |file: u32, idx: u64| infos.get(file as usize).map_or(0, |f| block_len(f.size, block, idx));
        let (fresh, lost_events) = (Mutex::default(), Mutex::default());
        let shared = Shared {
            ledger: &ledger,
            fresh: &fresh,
            lost_events: &lost_events,
            names: (0..n).map(|k| self.name(k)).collect(),
            size_of: &size_of,
            t0: Instant::now(),
            conns: self.conns,
            within: self.within,
        };
        let counters: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        let sources = &mut self.opened[..n];
        let (ends, end, intervals) = drive(&counters, total, watch, shared.fresh, |moved| {
            std::thread::scope(|scope| {
                let handles: Vec<_> = sources
                    .iter_mut()
                    .enumerate()
                    .map(|(k, s)| {
                        let shared = &shared;
                        scope.spawn(move || shared.serve(k, s, &moved[k]))
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
            })
        });
        let left = {
            let l = lock(&ledger);
            l.pending.len() + l.leased.iter().map(HashSet::len).sum::<usize>()
        };
        let t0 = shared.t0;
        drop(shared);
        Ran {
            ends,
            seconds: (end - t0).as_secs_f64(),
            intervals,
            bytes: counters.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            lost_events: lost_events.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner),
            left,
        }
    }

    /// Step 5: The destinations finish: the joined ones first, then the first
    /// (it renames). Each one's outcomes, their streams, and notes.
    fn finish_dests(&mut self, changed: &[u32]) -> Result<Finished> {
        let (n, conns) = (self.n, self.conns);
        let mut outcomes: Vec<Vec<CopyOutcome>> = vec![Vec::new(); self.job.dests.len()];
        let mut dest_streams: Vec<CopyStream> = Vec::new();
        let mut notes = Vec::new();
        for j in (0..self.job.dests.len()).rev() {
            let first = self.dests[j].finish(changed.to_vec(), self.clock.now());
            let results = talk(&mut self.opened[n + j].session, &mut self.dests[j], first, &self.clock, self.within)
                .map(|()| self.dests[j].take_results());
            let host = &self.job.dests[j].1;
            let mut theirs = Vec::new();
            match results {
                Ok((r, streams)) => {
                    outcomes[j] = r;
                    theirs = streams;
                }
                Err(e) if j > 0 => {
                    notes.push(format!("destination {host}: {e} (the first finishes with what it sees)"))
                }
                Err(e) => return Err(Error::network(format!("destination {host}: {e}"))),
            }
            let feeding: Vec<usize> = (0..n).filter(|&k| self.dest_of(k) == j).collect();
            // numbered as the sources' are: pair k's from k * conns
            dest_streams.extend(theirs.into_iter().filter_map(|st| {
                let k = *feeding.get((st.index / conns.max(1)) as usize)?;
                let shift = (k - (st.index / conns.max(1)) as usize) as u32 * conns;
                Some(CopyStream { pair: Some(k as u32), index: st.index + shift, slot: st.slot + shift, ..st })
            }));
        }
        Ok(Finished { outcomes, dest_streams, notes })
    }

    /// Each file's outcome: the first destination's (it renames), with the
    /// bytes every destination took.
    fn file_results(
        &self,
        infos: &[CopyFile],
        needs: &[CopyNeed],
        outcomes: &[Vec<CopyOutcome>],
        changed: &[u32],
    ) -> Vec<CopyFileResult> {
        let mut files_out = Vec::new();
        for (k, info) in infos.iter().enumerate() {
            let need = needs.iter().find(|x| x.file == k as u32);
            let first = outcomes[0].iter().find(|x| x.file == k as u32);
            let others = outcomes.iter().skip(1).flatten().filter(|x| x.file == k as u32);
            let (moved, resent) = others.fold((first.map_or(0, |x| x.moved), first.map_or(0, |x| x.resent)), |a, x| {
                (a.0 + x.moved, a.1 + x.resent)
            });
            let mut error = match (super::refusal(need), first) {
                (Some(r), _) => r,
                (None, Some(x)) => x.error.clone(),
                (None, None) => Some("the destination said nothing of it".into()),
            };
            if changed.contains(&(k as u32)) && error.is_none() {
                error = Some("the source changed during the copy (or its blocks failed): not renamed".into());
            }
            files_out.push(CopyFileResult {
                moved,
                resent,
                ..super::file_result(&(self.job.place)(&self.job.dests[0].2, &info.path), info.size, need, first, error)
            });
        }
        files_out
    }

    /// The report, once every agent was asked to finish at once and each
    /// report read: one round trip for all of them, not one each.
    fn report(
        mut self,
        ran: Ran,
        files: Vec<CopyFileResult>,
        skipped: Skipped,
        dest_streams: Vec<CopyStream>,
        notes: Vec<String>,
    ) -> Result<CopyReport> {
        let n = self.n;
        for s in self.opened.iter_mut() {
            let _ = s.session.finish_ahead();
        }
        let mut agents = Vec::new();
        for s in self.opened.iter_mut() {
            agents.push(s.session.finish().ok());
        }
        let client = host::end_info(None, false);
        let primary = agents.get(n).cloned().flatten();
        let mut env = self.opened[n].environment(client, primary, notes);
        env.target = self.job.destination.clone();
        let mut per_stream: Vec<CopyStream> = Vec::new();
        let mut events = ran.lost_events;
        let mut tail_blocks = 0;
        let mut pairs = Vec::new();
        for (k, e) in ran.ends.into_iter().enumerate() {
            per_stream.extend(e.streams);
            events.extend(e.events);
            tail_blocks += e.tail_blocks;
            let (src, dst) = (&self.job.sources[k], &self.job.dests[self.dest_of(k)]);
            pairs.push(CopyPair {
                source: format!("{}:{}", src.1, src.2),
                destination: format!("{}:{}", dst.1, dst.2),
                bytes: ran.bytes[k],
                seconds: e.seconds,
                interval_bytes: ran.intervals.get(k).cloned().unwrap_or_default(),
                error: e.error,
            });
        }
        events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        per_stream.sort_by_key(|s| (s.pair, s.index));
        let bytes_moved: u64 = files.iter().map(|f| f.moved).sum();
        let (o, seconds) = (self.o, ran.seconds);
        Ok(CopyReport {
            schema: COPY_SCHEMA.into(),
            direction: "third-party".into(),
            source: self.job.source,
            destination: self.job.destination,
            streams: o.streams,
            streams_auto: o.auto,
            block: o.block,
            checksum: o.checksum.map(|c| c.name().to_string()),
            bytes_kept: files.iter().map(|f| f.kept).sum(),
            blocks_resent: files.iter().map(|f| f.resent).sum(),
            files,
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
}

/// The coordinator's steps ask for no task: their machines only talk.
struct Talk;

impl<M: End<Task = Task>> Tasks<M> for Talk {
    fn run(&mut self, t: Task, _: &mut M, _: &mut Session, _: &Clock) -> Result<Acts<Task>> {
        Err(Error::internal(format!("a step of a copy between agents has no task {t:?}")))
    }
}

/// One step of an agent's conversation, from the machine's `first`
/// actions until it is done (its own deadlines bound every wait; `within`
/// is the longest when it keeps none).
fn talk<M>(s: &mut Session, m: &mut M, first: Acts<Task>, clock: &Clock, within: std::time::Duration) -> Result<()>
where
    M: End<In = AgentMsg, Out = ClientMsg, Task = Task>,
{
    converse(s, m, first, clock, within, &mut Talk)
}

/// Where one source's list differs from the first's, if it does: the named
/// file (or directory) may be named differently on each, what is beneath
/// it may not.
fn differs(list: &[CopyFile], infos: &[CopyFile]) -> Option<String> {
    if list.len() != infos.len() {
        return Some(format!("{} files against {}", list.len(), infos.len()));
    }
    let beneath = |p: &str| p.split_once('/').map(|(_, rest)| rest.to_string()).unwrap_or_default();
    list.iter()
        .zip(infos)
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
}
