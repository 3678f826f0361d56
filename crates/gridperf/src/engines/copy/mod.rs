//! The client's side of a copy: push (this host sends, the agent writes
//! beneath its root) or pull (the agent sends, this host writes beneath
//! the destination directory). The conversation: the request, the file
//! list in parts, the needs (what the writing end lacks, after hashing
//! what partial files hold again), the data connections, the blocks, the
//! outcome per file.

pub mod pairs;
mod pull;
mod push;

use crate::datapath::copy::{self as dp, StreamWork};
pub use crate::datapath::copy::{expand, Skipped, SourceFile, FLIP_BLOCK, UNREADABLE};
use crate::error::{Error, Result};
use crate::host;
use crate::runner::{Deadlines, Target};
use gridperf_core::copy::{block_count, block_len};
use gridperf_core::model::{copy_verdict, CopyEvent, CopyFileResult, CopyReport, COPY_SCHEMA};
use gridperf_core::wire::{AgentMsg, CopyDirection, CopyFile, CopyNeed, CopyOutcome, CopySpec, Test};
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

/// What the push or the pull did, for the report: the files' outcomes,
/// the streams that ran on this end and the agent's, what the pool did.
pub(crate) struct Moved {
    pub files: Vec<CopyFileResult>,
    pub skipped: Vec<Skipped>,
    /// This end's streams, by their results (a broken one is among the events).
    pub works: Vec<std::io::Result<StreamWork>>,
    /// Each connection's bytes per interval, by its number.
    pub intervals: Vec<Vec<u64>>,
    pub seconds: f64,
    pub events: Vec<CopyEvent>,
    pub tail_blocks: u64,
    pub agent_streams: Vec<StreamWork>,
    pub resent: u64,
    /// The agent's report of itself.
    pub agent: gridperf_core::model::EndInfo,
}

/// What a push or a pull needs of the opened conversation: where the data
/// connections go, the copy's keys and its per-connection byte counters.
pub(crate) struct Conn<'a> {
    pub addr: SocketAddr,
    pub port: u16,
    pub token: u64,
    pub o: &'a CopyOptions,
    pub keys: Option<&'a gridperf_core::copy::seal::CopyKeys>,
    pub counters: &'a [AtomicU64],
}

impl Conn<'_> {
    /// Data connection `k`.
    fn connect_one(&self, k: u32) -> Result<TcpStream> {
        connect_one(self.addr, self.port, self.token, self.o, k)
    }
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
    let exchange = if o.encrypt {
        Some(gridperf_core::copy::seal::Exchange::new().map_err(|e| Error::internal(format!("--encrypt: {e}")))?)
    } else {
        None
    };
    let spec = CopySpec {
        encrypt: exchange.as_ref().map(|x| gridperf_core::auth::hex(&x.public())),
        ..o.spec(direction, count as u32)
    };
    spec.validate().map_err(|r| Error::usage(r.message))?;
    let ready = opened.session.request(Test::Copy(spec))?;
    let port = ready.tcp_port.ok_or_else(|| net("the agent opened no data port"))?;
    let session = &mut opened.session;
    let keys = match exchange {
        None => None,
        Some(x) => Some(agree(session, x, o)?),
    };
    let encryption = keys.as_ref().map(encryption_words);
    let client = host::end_info(None, false);
    let counters: Vec<AtomicU64> = (0..o.connections()).map(|_| AtomicU64::new(0)).collect();
    let conn = Conn { addr, port, token: ready.token, o, keys: keys.as_ref(), counters: &counters };
    let (sending, source, destination, moved) = match job {
        Job::Push { sources, skipped, source, destination } => {
            (true, source, destination, push::run(session, &conn, &sources, skipped, watch)?)
        }
        Job::Pull { names, dest, place, source, destination } => {
            (false, source, destination, pull::run(session, &conn, &names, &dest, &*place, watch)?)
        }
    };
    let per_stream = per_stream(moved.works, moved.intervals, moved.seconds);
    let env = opened.environment(client, Some(moved.agent), Vec::new());
    let bytes_moved: u64 = moved.files.iter().map(|f| f.moved).sum();
    let seconds = moved.seconds;
    Ok(CopyReport {
        schema: COPY_SCHEMA.into(),
        direction: if sending { "push" } else { "pull" }.into(),
        source,
        destination,
        streams: o.streams,
        streams_auto: o.auto,
        block: o.block,
        checksum: o.checksum.map(|c| c.name().to_string()),
        bytes_kept: moved.files.iter().map(|f| f.kept).sum(),
        files: moved.files,
        skipped: moved.skipped,
        bytes_moved,
        blocks_resent: moved.resent,
        seconds,
        throughput_bps: if seconds > 0.0 { bytes_moved as f64 * 8.0 / seconds } else { 0.0 },
        verdict: if sending {
            copy_verdict(&per_stream, &moved.agent_streams)
        } else {
            copy_verdict(&moved.agent_streams, &per_stream)
        },
        per_stream,
        pairs: Vec::new(),
        agent_streams: moved.agent_streams,
        encryption,
        interval_ms: INTERVAL.as_millis() as u64,
        events: moved.events,
        tail_blocks: moved.tail_blocks,
        env,
    })
}

/// --encrypt: the agent's half of the key agreement, or nothing is sent.
fn agree(
    session: &mut crate::runner::Session,
    x: gridperf_core::copy::seal::Exchange,
    o: &CopyOptions,
) -> Result<gridperf_core::copy::seal::CopyKeys> {
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
    let secret = session.secret();
    x.agree(&theirs, true, secret.as_ref()).map_err(|e| net(format!("--encrypt: {e}: nothing was sent")))
}

/// The report's words for the data connections' encryption.
fn encryption_words(k: &gridperf_core::copy::seal::CopyKeys) -> String {
    if k.authenticated {
        format!(
            "{} (bound to the session's key: no one without it can read or alter the data)",
            gridperf_core::copy::seal::CIPHER
        )
    } else {
        format!(
            "{} (no key: safe from eavesdroppers, not from a man in the middle; serve --auth and --key bind it)",
            gridperf_core::copy::seal::CIPHER
        )
    }
}

/// Each connection that ran, with its intervals by its number, in order.
fn per_stream(works: Vec<std::io::Result<StreamWork>>, mut intervals: Vec<Vec<u64>>, seconds: f64) -> Vec<StreamWork> {
    let mut out = Vec::new();
    for w in works {
        let Ok(mut s) = w else { continue };
        let iv = intervals.get_mut(s.index as usize).map(std::mem::take).unwrap_or_default();
        let whole = iv.len().saturating_sub(1) as f64 * INTERVAL.as_secs_f64();
        s.last_interval_ms = ((seconds - whole).max(0.0) * 1000.0).round() as u64;
        s.interval_bytes = iv;
        out.push(s);
    }
    out.sort_by_key(|s| s.index);
    out
}

/// A file's outcome in the report, from the need and what the writing
/// end said of it (`outcome`), and an error of the sending end's.
fn file_result(
    path: &str,
    size: u64,
    need: Option<&CopyNeed>,
    outcome: Option<&CopyOutcome>,
    error: Option<String>,
) -> CopyFileResult {
    CopyFileResult {
        path: path.to_string(),
        size,
        blake3: outcome.and_then(|x| x.blake3.clone()),
        moved: outcome.map(|x| x.moved).unwrap_or(0),
        kept: outcome.map(|x| x.kept).unwrap_or_else(|| need.map(|n| n.kept).unwrap_or(0)),
        resent: outcome.map(|x| x.resent).unwrap_or(0),
        checksum: outcome.and_then(|x| x.checksum.clone()),
        error,
    }
}

/// How long the client waits for the agent in a copy's conversation.
fn waits(o: &CopyOptions) -> gridperf_core::proto::copy::Waits {
    use gridperf_core::proto::nanos;
    gridperf_core::proto::copy::Waits { control: nanos(o.deadlines.control), list: nanos(o.deadlines.control + o.idle) }
}

/// A need's refusal, unless an earlier run finished the file (not an error).
fn refusal(need: Option<&CopyNeed>) -> Option<Option<String>> {
    need.and_then(|n| n.refused.clone()).map(|r| (!r.starts_with("finished by an earlier run")).then_some(r))
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
