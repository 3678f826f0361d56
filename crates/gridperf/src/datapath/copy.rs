//! What both ends of a copy run: the sending end's shared block queue and
//! stream threads, the writing end's partial files (their journal, the
//! resume that hashes what they hold again) and stream threads, and the
//! finish that renames a file into place only when every block is
//! verified. The agent runs one end, the client the other (push or pull).
//!
//! Memory: each stream holds one block buffer at each end; the blocks it
//! has unacknowledged (at most [`unacked_limit`]) are kept as numbers, not
//! data (a block sent again is read again); nothing else grows with the data.

use gridperf_core::copy::{
    block_count, block_cv, block_len, file_hash, hex, unhex32, Ack, BlockHeader, ACK_LEN, END_OF_BLOCKS, FRAME_HEADER,
};
use gridperf_core::seal::{Sealer, TAG_LEN};
use gridperf_core::wire::{CopyFile, CopyNeed};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The bytes a stream may have unacknowledged: enough to keep a path of
/// 256 MiB bandwidth-delay product full (8 Gbit/s at 270 ms), since a
/// block is acknowledged only once it has all arrived and been hashed and
/// written. (It was 4 blocks: 16 MiB at the default block size, which held
/// one stream at 270 ms to 25 MB/s whatever its buffers.) The sockets'
/// buffers bound what is really on the way; this only has to stay above them.
pub const IN_FLIGHT_BYTES: u64 = 256 << 20;

/// The blocks a stream may have unacknowledged at a block size: at least 4.
pub fn unacked_limit(block: u64) -> usize {
    (IN_FLIGHT_BYTES / block.max(1)).max(4) as usize
}
/// Times one block may arrive damaged before the copy of its file gives up.
pub const MAX_RESENDS: u32 = 3;
/// The suffixes of a file being written and of its journal.
pub const PARTIAL: &str = ".gridperf-partial";
pub const JOURNAL: &str = ".gridperf-manifest";
/// The largest file a copy takes (1 PiB).
pub const MAX_FILE: u64 = 1 << 50;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A file the sending end reads.
pub struct SourceFile {
    pub file: File,
    /// As the copy names it at the writing end.
    pub info: CopyFile,
}

impl SourceFile {
    /// Opens a regular file (not a device, a pipe or a directory) and notes its size and time.
    pub fn open(file: File, path: String) -> io::Result<SourceFile> {
        let m = file.metadata()?;
        if !m.file_type().is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        Ok(SourceFile { info: CopyFile { path, size: m.len(), mtime_ns: mtime_ns(&m) }, file })
    }

    /// Whether the file changed (size or modification time) since it was opened.
    pub fn changed(&self) -> bool {
        self.file.metadata().map(|m| m.len() != self.info.size || mtime_ns(&m) != self.info.mtime_ns).unwrap_or(true)
    }
}

pub fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())
}

/// The sending end's queue: every stream takes its next block from it (a
/// faster stream takes more); a block the writing end found damaged comes
/// back to its front.
pub struct BlockQueue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

struct QueueState {
    pending: VecDeque<(u32, u64)>,
    /// Blocks taken and not yet acknowledged.
    outstanding: usize,
    resends: std::collections::HashMap<(u32, u64), u32>,
    /// Files given up on, with why (their other blocks are skipped).
    failed: Vec<(u32, String)>,
    /// Why the whole copy stops.
    stop: Option<String>,
}

impl BlockQueue {
    /// The queue of the needed blocks, file by file.
    pub fn new(needs: &[CopyNeed]) -> BlockQueue {
        let pending = needs
            .iter()
            .filter(|n| n.refused.is_none())
            .flat_map(|n| n.ranges.iter().flat_map(move |&(a, b)| (a..b).map(move |i| (n.file, i))))
            .collect();
        BlockQueue {
            state: Mutex::new(QueueState {
                pending,
                outstanding: 0,
                resends: Default::default(),
                failed: Vec::new(),
                stop: None,
            }),
            wake: Condvar::new(),
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.state).pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next block to send; None once every block is acknowledged (or
    /// the copy stopped). Waits while others' blocks are unacknowledged:
    /// one may come back.
    fn next(&self) -> Option<(u32, u64)> {
        let mut s = lock(&self.state);
        loop {
            if s.stop.is_some() {
                return None;
            }
            while let Some(b) = s.pending.pop_front() {
                if s.failed.iter().any(|(f, _)| *f == b.0) {
                    continue;
                }
                s.outstanding += 1;
                return Some(b);
            }
            if s.outstanding == 0 {
                return None;
            }
            s = self.wake.wait_timeout(s, Duration::from_millis(100)).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn acked(&self, block: (u32, u64), ok: bool) {
        let mut s = lock(&self.state);
        s.outstanding = s.outstanding.saturating_sub(1);
        if !ok {
            let n = s.resends.entry(block).or_insert(0);
            *n += 1;
            if *n > MAX_RESENDS {
                let why = format!("block {} arrived damaged {} times", block.1, *n);
                s.failed.push((block.0, why));
            } else {
                s.pending.push_front(block);
            }
        }
        self.wake.notify_all();
    }

    fn fail_file(&self, file: u32, why: String) {
        let mut s = lock(&self.state);
        s.failed.push((file, why));
        s.outstanding = s.outstanding.saturating_sub(1);
        self.wake.notify_all();
    }

    /// Stops every stream (a stream's connection failed).
    pub fn stop(&self, why: String) {
        let mut s = lock(&self.state);
        s.stop.get_or_insert(why);
        self.wake.notify_all();
    }

    pub fn stopped(&self) -> Option<String> {
        lock(&self.state).stop.clone()
    }

    /// Files the sending end gave up on, with why.
    pub fn failed(&self) -> Vec<(u32, String)> {
        lock(&self.state).failed.clone()
    }

    /// Blocks sent again after the writing end found them damaged.
    pub fn resent(&self) -> u64 {
        lock(&self.state).resends.values().map(|&n| u64::from(n)).sum()
    }
}

/// What one stream did, at either end.
pub use gridperf_core::model::CopyStream as StreamWork;

/// One data connection of a copy: the socket, how long a read or write
/// may wait, and its sealing (`--encrypt`).
pub struct Link {
    pub sock: TcpStream,
    pub idle: Duration,
    pub crypt: Option<Crypt>,
    /// The socket buffer asked for (`-w`), for the TCP verdict's advice.
    pub window: Option<u64>,
}

/// How often a sending stream's TCP_INFO is sampled at first (stream's
/// default timeline step); past MAX_TCP_SAMPLES every other sample is
/// dropped and the step doubles (memory stays bounded on a long copy).
const TCP_SAMPLE_GAP: Duration = Duration::from_millis(10);
const MAX_TCP_SAMPLES: usize = 4096;

/// The sending end's verdict on one stream from its TCP_INFO samples, as
/// `stream` reads them (None with fewer than two, or when they say nothing).
fn tcp_verdict(samples: &[gridperf_core::flow::TcpSample], bytes: u64, window: Option<u64>) -> Option<String> {
    use gridperf_core::flow::{verdict, Limit, VerdictContext};
    let (first, last) = (samples.first()?, samples.last()?);
    let elapsed_ns = last.t_ns.saturating_sub(first.t_ns);
    if samples.len() < 2 || elapsed_ns == 0 {
        return None;
    }
    let ctx = VerdictContext {
        throughput_bps: bytes as f64 * 8.0 / (elapsed_ns as f64 / 1e9),
        elapsed_ns,
        wmem_max: crate::host::tcp_mem_max("net.ipv4.tcp_wmem"),
        window_requested: window,
        core_wmem_max: crate::host::sysctl("net.core.wmem_max").and_then(|v| v.parse().ok()),
        ..Default::default()
    };
    let v = verdict(samples, &ctx);
    (v.limit != Limit::Unknown).then_some(v.text)
}

/// A data connection's two ways, sealed (`copy --encrypt`): the way this
/// end writes and the way it reads.
pub struct Crypt {
    pub out: Sealer,
    pub inn: Sealer,
}

impl Crypt {
    /// The way this end writes and the way it reads, each None unsealed.
    fn split(c: Option<Crypt>) -> (Option<Sealer>, Option<Sealer>) {
        c.map_or((None, None), |c| (Some(c.out), Some(c.inn)))
    }

    /// From a copy's keys, for stream `index` at the end that sends the blocks (`sending`) or writes them.
    pub fn of(keys: Option<&gridperf_core::seal::CopyKeys>, index: u32, sending: bool) -> Option<Crypt> {
        keys.map(|k| {
            let (out, inn) = k.stream(index, sending);
            Crypt { out, inn }
        })
    }
}

fn sealing(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Seals the first `len` bytes of `frame` in place and puts the tag after
/// them (`frame` has room for it); the bytes to write. Unsealed: `len`.
fn seal(sealer: Option<&mut Sealer>, frame: &mut [u8], len: usize) -> io::Result<usize> {
    match sealer {
        None => Ok(len),
        Some(s) => {
            let tag = s.seal(&mut frame[..len]).map_err(sealing)?;
            frame[len..len + TAG_LEN].copy_from_slice(&tag);
            Ok(len + TAG_LEN)
        }
    }
}

/// Reads a frame of `len` bytes (and its tag, sealed) into `frame`, opened in place.
fn read_frame(sock: &mut impl Read, opener: Option<&mut Sealer>, frame: &mut [u8], len: usize) -> io::Result<()> {
    match opener {
        None => sock.read_exact(&mut frame[..len]),
        Some(o) => {
            sock.read_exact(&mut frame[..len + TAG_LEN])?;
            o.open(&mut frame[..len + TAG_LEN]).map_err(sealing).map(|_| ())
        }
    }
}

/// A stream's blocks sent and not yet acknowledged (file, block, length),
/// in order, and the wake-up for a writer waiting for room.
type InFlight = (Mutex<VecDeque<(u32, u64, u64)>>, Condvar);

/// Sends blocks from the queue on one connection until the queue is done,
/// then the end frame; reads the writing end's acknowledgments alongside.
/// `moved` counts bytes as they are acknowledged (for a progress bar).
pub fn send_stream(
    index: u32,
    files: &[SourceFile],
    block: u64,
    queue: &BlockQueue,
    link: Link,
    moved: &AtomicU64,
) -> io::Result<StreamWork> {
    let Link { sock, idle, crypt, window } = link;
    let mut work = StreamWork { index, ..Default::default() };
    let (mut sealer, mut opener) = Crypt::split(crypt);
    let t0 = Instant::now();
    let sample_now = || {
        gridperf_sys::tcp_info(&sock).ok().map(|(info, _)| super::stream::sample(&info, t0.elapsed().as_nanos() as u64))
    };
    sock.set_write_timeout(Some(idle))?;
    let mut reader = sock.try_clone()?;
    reader.set_read_timeout(Some(idle))?;
    // acknowledgments: the blocks this stream has in flight, in order
    let in_flight: Arc<InFlight> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let sampling = AtomicBool::new(true);
    let mut samples = Vec::new();
    let acks = std::thread::scope(|scope| -> io::Result<StreamWork> {
        // TCP_INFO every TCP_SAMPLE_GAP while the stream sends, as `stream` reads it
        let sampler = scope.spawn(|| {
            let (mut v, mut gap) = (Vec::new(), TCP_SAMPLE_GAP);
            while sampling.load(Ordering::SeqCst) {
                v.extend(sample_now());
                if v.len() >= MAX_TCP_SAMPLES {
                    // a long copy: every other sample, and half as often from now on
                    v = v.into_iter().step_by(2).collect();
                    gap *= 2;
                }
                // woken at once when the stream ends (the step grows on a long copy)
                std::thread::park_timeout(gap);
            }
            v
        });
        let flight = in_flight.clone();
        let finished = done.clone();
        let ack_thread = scope.spawn(move || -> io::Result<()> {
            let mut b = [0u8; ACK_LEN + TAG_LEN];
            // a failed reader stops the copy at once: the blocks it would
            // have acknowledged hold every other stream's queue open
            let stop = |e: io::Error| {
                queue.stop(format!("stream {index}: {e}"));
                e
            };
            loop {
                match read_frame(&mut reader, opener.as_mut(), &mut b, ACK_LEN) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && finished.load(Ordering::SeqCst) => {
                        return Ok(())
                    }
                    Err(e) => return Err(stop(e)),
                }
                let a = Ack::decode(b[..ACK_LEN].try_into().expect("an ack's length"));
                let (lock_, cv) = &*flight;
                let mut f = lock(lock_);
                let pos = f.iter().position(|&(file, i, _)| file == a.file && i == a.index).ok_or_else(|| {
                    stop(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("an acknowledgment of a block not sent: {a:?}"),
                    ))
                })?;
                let (_, _, len) = f.remove(pos).expect("found");
                drop(f);
                queue.acked((a.file, a.index), a.ok);
                if a.ok {
                    moved.fetch_add(len, Ordering::Relaxed);
                }
                cv.notify_all();
            }
        });
        let mut buf = vec![0u8; block as usize + TAG_LEN];
        let mut head = [0u8; FRAME_HEADER + TAG_LEN];
        let mut out = &sock;
        let limit = unacked_limit(block);
        let result = (|| -> io::Result<()> {
            while let Some((file, idx)) = queue.next() {
                let f = &files[file as usize];
                let len = block_len(f.info.size, block, idx);
                let data = &mut buf[..len as usize];
                let t = Instant::now();
                if let Err(e) = f.file.read_exact_at(data, idx * block) {
                    queue.fail_file(file, format!("reading {}: {e}", f.info.path));
                    continue;
                }
                work.disk_ns += t.elapsed().as_nanos() as u64;
                let t = Instant::now();
                let cv = block_cv(data, idx * block);
                work.hash_ns += t.elapsed().as_nanos() as u64;
                // wait for room: at most unacked_limit(block) blocks unacknowledged
                {
                    let (lock_, cv_) = &*in_flight;
                    let mut fl = lock(lock_);
                    let until = Instant::now() + idle;
                    while fl.len() >= limit {
                        if Instant::now() > until {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no acknowledgment within the deadline",
                            ));
                        }
                        if ack_thread.is_finished() {
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionAborted,
                                "the other end stopped acknowledging",
                            ));
                        }
                        fl = cv_.wait_timeout(fl, Duration::from_millis(100)).unwrap_or_else(PoisonError::into_inner).0;
                    }
                    fl.push_back((file, idx, len));
                }
                let t = Instant::now();
                head[..FRAME_HEADER].copy_from_slice(&BlockHeader { file, index: idx, len: len as u32, cv }.encode());
                let hn = seal(sealer.as_mut(), &mut head, FRAME_HEADER)?;
                let dn = seal(sealer.as_mut(), &mut buf, len as usize)?;
                if sealer.is_some() {
                    work.crypt_ns += t.elapsed().as_nanos() as u64;
                }
                let t = Instant::now();
                out.write_all(&head[..hn])?;
                out.write_all(&buf[..dn])?;
                work.net_ns += t.elapsed().as_nanos() as u64;
                work.bytes += len;
                work.blocks += 1;
            }
            // every block acknowledged (the queue is done): the end frame
            done.store(true, Ordering::SeqCst);
            head[..FRAME_HEADER].copy_from_slice(&BlockHeader::end().encode());
            let hn = seal(sealer.as_mut(), &mut head, FRAME_HEADER)?;
            out.write_all(&head[..hn])?;
            out.flush()
        })();
        if let Err(e) = &result {
            queue.stop(format!("stream {index}: {e}"));
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
        sampling.store(false, Ordering::SeqCst);
        sampler.thread().unpark();
        samples = sampler.join().unwrap_or_default();
        let acked = ack_thread.join().unwrap_or_else(|_| Err(io::Error::other("the acknowledgment reader panicked")));
        result?;
        if let Err(e) = acked {
            queue.stop(format!("stream {index}: {e}"));
            return Err(e);
        }
        Ok(work.clone())
    })?;
    let mut work = acks;
    if let Ok((info, _)) = gridperf_sys::tcp_info(&sock) {
        work.retransmits = Some(info.total_retrans);
        work.rtt_us = Some(info.rtt_us);
    }
    samples.extend(sample_now());
    work.tcp = tcp_verdict(&samples, work.bytes, window);
    Ok(work)
}

/// A file being written at the receiving end: its directory, its final
/// name, the partial file beside it, and what is verified of it.
pub struct SinkFile {
    pub dir: OwnedFd,
    pub name: String,
    pub info: CopyFile,
    pub block: u64,
    partial: Option<File>,
    journal: Mutex<Option<File>>,
    state: Mutex<SinkState>,
    /// The checksum asked for, the next offset's block it takes, a buffer
    /// for blocks read back (they arrived ahead of the ones before them).
    summer: Mutex<Option<(gridperf_core::copy::Summer, u64, Vec<u8>)>>,
}

#[derive(Default)]
struct SinkState {
    cvs: Vec<Option<[u8; 32]>>,
    single: Option<gridperf_core::copy::Hash>,
    moved: u64,
    resent: u64,
    kept: u64,
    error: Option<String>,
}

/// How a destination is prepared.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkRules {
    /// A checksum to compute as the blocks arrive, in order.
    pub checksum: Option<gridperf_core::copy::Checksum>,
    /// Replace a finished destination.
    pub force: bool,
    /// Keep a finished destination of the source's size and time (a resumed
    /// directory copy).
    pub resume: bool,
}

/// Flips one byte of the n-th block a writing end receives (counted from 1,
/// across its streams): a test seam for damage in flight.
pub static FLIP_BLOCK: AtomicU64 = AtomicU64::new(0);
static RECEIVED: AtomicU64 = AtomicU64::new(0);

impl SinkFile {
    /// Prepares `name` in `dir` for `info`: what a partial file already
    /// holds is hashed again against its journal (kept if it matches this
    /// source), a finished destination is refused (unless `force`, or kept
    /// with `resume` when its size and time are the source's), and a new
    /// partial file takes its whole size at once (a full disk is said now).
    /// Returns the file and the blocks it needs.
    pub fn prepare(
        dir: OwnedFd,
        name: &str,
        info: CopyFile,
        block: u64,
        rules: SinkRules,
    ) -> Result<(SinkFile, CopyNeed), String> {
        let partial_name = format!(".{name}{PARTIAL}");
        let journal_name = format!(".{name}{JOURNAL}");
        if info.size > MAX_FILE {
            return Err(format!("{name}: {} bytes: a copy takes files of up to 1 PiB", info.size));
        }
        let n = block_count(info.size, block) as usize;
        let mut file = SinkFile {
            dir,
            name: name.to_string(),
            info: info.clone(),
            block,
            partial: None,
            journal: Mutex::new(None),
            summer: Mutex::new(rules.checksum.map(|c| (c.summer(), 0, Vec::new()))),
            // the blocks' values are kept once the file's space is known to be there
            state: Mutex::new(SinkState::default()),
        };
        let none = |kept| CopyNeed { file: 0, ranges: Vec::new(), kept, refused: None };
        // a finished destination
        if let Ok(existing) = gridperf_sys::open_beneath(&file.dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            let m = File::from(existing).metadata().map_err(|e| format!("{name}: {e}"))?;
            if !m.file_type().is_file() {
                return Err(format!("{name} exists and is not a regular file: not replaced"));
            }
            if rules.resume && !rules.force && m.len() == info.size && mtime_ns(&m) == info.mtime_ns {
                lock(&file.state).kept = info.size;
                return Ok((
                    file,
                    CopyNeed {
                        refused: Some("finished by an earlier run (its size and time are the source's)".into()),
                        ..none(info.size)
                    },
                ));
            }
            if !rules.force {
                return Err(format!(
                    "{name} exists: give --force to replace it (or --resume to keep what an earlier run finished)"
                ));
            }
        }
        let rw = libc::O_RDWR | libc::O_NOFOLLOW;
        let mut kept_blocks: Vec<usize> = Vec::new();
        let partial = match gridperf_sys::open_beneath(&file.dir, &partial_name, rw, 0) {
            Ok(fd) => {
                let p = File::from(fd);
                // a partial file of this size was reserved before: its blocks fit
                if p.metadata().is_ok_and(|m| m.len() == info.size) {
                    lock(&file.state).cvs = vec![None; n];
                    kept_blocks = file.rehash(&p, &journal_name)?;
                }
                p
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let fd = gridperf_sys::open_beneath(&file.dir, &partial_name, rw | libc::O_CREAT | libc::O_EXCL, 0o600)
                    .map_err(|e| format!("creating {partial_name}: {e}"))?;
                File::from(fd)
            }
            Err(e) => return Err(format!("{partial_name}: {e}")),
        };
        if kept_blocks.is_empty() {
            partial.set_len(0).map_err(|e| format!("{partial_name}: {e}"))?;
            gridperf_sys::preallocate(&partial, info.size).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => format!("{name}: the destination's disk has no room for its {} bytes", info.size),
                _ => format!("{name}: reserving {} bytes: {e}", info.size),
            })?;
            lock(&file.state).cvs = vec![None; n];
            // a new journal: the source it belongs to, then a record per verified block
            let j = gridperf_sys::open_beneath(&file.dir, &journal_name, rw | libc::O_CREAT | libc::O_TRUNC, 0o600)
                .map_err(|e| format!("{journal_name}: {e}"))?;
            let mut j = File::from(j);
            let head =
                serde_json::json!({ "version": 1, "size": info.size, "mtime_ns": info.mtime_ns, "block": block });
            writeln!(j, "{head}").map_err(|e| format!("{journal_name}: {e}"))?;
            *lock(&file.journal) = Some(j);
        }
        file.partial = Some(partial);
        let need: Vec<u64> = {
            let s = lock(&file.state);
            (0..n as u64).filter(|&i| s.cvs[i as usize].is_none()).collect()
        };
        let kept = lock(&file.state).kept;
        Ok((file, CopyNeed { ranges: gridperf_core::copy::ranges(need), ..none(kept) }))
    }

    /// Hashes again each block the journal says arrived verified; returns
    /// the ones that still hold (none, and the journal restarted, when it
    /// belongs to another source).
    fn rehash(&mut self, partial: &File, journal_name: &str) -> Result<Vec<usize>, String> {
        let rw = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_APPEND;
        let Ok(fd) = gridperf_sys::open_beneath(&self.dir, journal_name, rw, 0) else { return Ok(Vec::new()) };
        let mut j = File::from(fd);
        let mut all = Vec::new();
        j.read_to_end(&mut all).map_err(|e| format!("{journal_name}: {e}"))?;
        let Some(nl) = all.iter().position(|&b| b == b'\n') else { return Ok(Vec::new()) };
        let head: serde_json::Value = serde_json::from_slice(&all[..nl]).unwrap_or_default();
        let same = head["version"] == 1
            && head["size"] == self.info.size
            && head["mtime_ns"] == self.info.mtime_ns
            && head["block"] == self.block;
        if !same {
            return Ok(Vec::new());
        }
        let mut kept = Vec::new();
        let mut buf = vec![0u8; self.block as usize];
        let n = block_count(self.info.size, self.block);
        for rec in all[nl + 1..].chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes"));
            let Some(want) = unhex32(&hex(&rec[8..40])) else { continue };
            if idx >= n {
                continue;
            }
            let len = block_len(self.info.size, self.block, idx) as usize;
            if partial.read_exact_at(&mut buf[..len], idx * self.block).is_err() {
                continue;
            }
            if block_cv(&buf[..len], idx * self.block) == want {
                let mut s = lock(&self.state);
                if s.cvs[idx as usize].is_none() {
                    s.cvs[idx as usize] = Some(want);
                    s.kept += len as u64;
                    if n == 1 {
                        s.single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
                    }
                    kept.push(idx as usize);
                }
            }
        }
        *lock(&self.journal) = Some(j);
        Ok(kept)
    }

    /// Writes a verified block and records it in the journal.
    fn put(&self, idx: u64, data: &[u8], cv: [u8; 32]) -> io::Result<u64> {
        let partial = self.partial.as_ref().ok_or_else(|| io::Error::other("no partial file"))?;
        let t = Instant::now();
        partial.write_all_at(data, idx * self.block)?;
        let mut rec = [0u8; 40];
        rec[..8].copy_from_slice(&idx.to_be_bytes());
        rec[8..].copy_from_slice(&cv);
        if let Some(j) = lock(&self.journal).as_mut() {
            j.write_all(&rec)?;
        }
        let spent = t.elapsed().as_nanos() as u64;
        {
            let mut s = lock(&self.state);
            if s.cvs[idx as usize].is_none() {
                s.moved += data.len() as u64;
            }
            s.cvs[idx as usize] = Some(cv);
            if block_count(self.info.size, self.block) == 1 {
                s.single = Some(gridperf_core::copy::whole_hash(data));
            }
        }
        self.feed(Some((idx, data)))?;
        Ok(spent)
    }

    /// Takes the checksum as far as the verified blocks reach in order:
    /// `just` (a block in hand) if it is the next, then any after it that
    /// arrived ahead, read back from the partial file (the page cache, as
    /// a rule; a resumed file's kept blocks, from the disk).
    fn feed(&self, just: Option<(u64, &[u8])>) -> io::Result<()> {
        let mut g = lock(&self.summer);
        let Some((sum, cursor, buf)) = g.as_mut() else { return Ok(()) };
        let n = block_count(self.info.size, self.block);
        if let Some((idx, data)) = just {
            if idx == *cursor {
                sum.update(data);
                *cursor += 1;
            }
        }
        let partial = self.partial.as_ref().ok_or_else(|| io::Error::other("no partial file"))?;
        while *cursor < n && lock(&self.state).cvs.get(*cursor as usize).is_some_and(Option::is_some) {
            let len = block_len(self.info.size, self.block, *cursor) as usize;
            buf.resize(len, 0);
            partial.read_exact_at(&mut buf[..len], *cursor * self.block)?;
            sum.update(&buf[..len]);
            *cursor += 1;
        }
        Ok(())
    }

    /// Whether every block is verified.
    pub fn complete(&self) -> bool {
        lock(&self.state).cvs.iter().all(Option::is_some)
    }

    /// Moves the file into place once every block is verified (and the
    /// source did not change): its data made durable, its time set to the
    /// source's, the partial renamed over the final name, the journal
    /// removed. Returns the outcome either way (a file not finished stays
    /// partial, with its journal, for a resume).
    pub fn finish(&self, file: u32, source_changed: bool) -> gridperf_core::wire::CopyOutcome {
        let mut out = {
            let s = lock(&self.state);
            gridperf_core::wire::CopyOutcome {
                file,
                blake3: None,
                moved: s.moved,
                resent: s.resent,
                kept: s.kept,
                error: s.error.clone(),
                checksum: None,
            }
        };
        let Some(partial) = &self.partial else {
            // kept from an earlier run, or refused
            return out;
        };
        if out.error.is_none() && source_changed {
            out.error =
                Some("the source changed during the copy (its size or time): not renamed; copy it again".into());
        }
        if out.error.is_none() && !self.complete() {
            out.error = Some("not every block arrived: kept partial for --resume".into());
        }
        if out.error.is_some() {
            return out;
        }
        let hash = {
            let s = lock(&self.state);
            let cvs: Vec<[u8; 32]> = s.cvs.iter().flatten().copied().collect();
            file_hash(&cvs, self.info.size, self.block, s.single)
        };
        // the checksum's rest (a resumed file's kept blocks), then its value, before the rename
        let summed = match self.feed(None) {
            Ok(()) => lock(&self.summer).take().map(|(s, _, _)| s.hex()),
            Err(e) => {
                out.error = Some(format!("reading {} back for its checksum: {e}; kept partial", self.name));
                return out;
            }
        };
        let done = (|| -> io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            partial.sync_all()?;
            let when = std::time::UNIX_EPOCH + Duration::from_nanos(self.info.mtime_ns.max(0) as u64);
            partial.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when))?;
            partial.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            gridperf_sys::rename_in(&self.dir, &format!(".{}{PARTIAL}", self.name), &self.name)?;
            gridperf_sys::unlink_in(&self.dir, &format!(".{}{JOURNAL}", self.name))?;
            File::from(self.dir.try_clone()?).sync_all()
        })();
        match done {
            Ok(()) => {
                out.blake3 = hash.map(|h| h.to_hex().to_string());
                out.checksum = summed;
            }
            Err(e) => out.error = Some(format!("moving {} into place: {e}", self.name)),
        }
        out
    }
}

/// Receives blocks on one connection until the end frame: each checked
/// against the sender's chaining value, written if it holds (and
/// acknowledged either way). `moved` counts verified bytes.
pub fn receive_stream(
    index: u32,
    files: &[Option<SinkFile>],
    block: u64,
    link: Link,
    moved: &AtomicU64,
) -> io::Result<StreamWork> {
    let Link { mut sock, idle, crypt, .. } = link;
    let mut work = StreamWork { index, ..Default::default() };
    let (mut sealer, mut opener) = Crypt::split(crypt);
    sock.set_read_timeout(Some(idle))?;
    sock.set_write_timeout(Some(idle))?;
    let mut buf = vec![0u8; block as usize + TAG_LEN];
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    loop {
        let mut h = [0u8; FRAME_HEADER + TAG_LEN];
        let t = Instant::now();
        read_frame(&mut sock, opener.as_mut(), &mut h, FRAME_HEADER)?;
        let head = BlockHeader::decode(h[..FRAME_HEADER].try_into().expect("a header's length")).map_err(bad)?;
        if head.file == END_OF_BLOCKS {
            break;
        }
        let f = files
            .get(head.file as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(format!("a block of file {}, not one this end takes", head.file)))?;
        let want = block_len(f.info.size, block, head.index);
        if head.index >= block_count(f.info.size, block) || u64::from(head.len) != want {
            return Err(bad(format!(
                "block {} of {} with {} bytes: not a block of this file",
                head.index, f.name, head.len
            )));
        }
        let framed = want as usize + if opener.is_some() { TAG_LEN } else { 0 };
        sock.read_exact(&mut buf[..framed])?;
        work.net_ns += t.elapsed().as_nanos() as u64;
        if let Some(o) = opener.as_mut() {
            let t = Instant::now();
            o.open(&mut buf[..framed]).map_err(sealing)?;
            work.crypt_ns += t.elapsed().as_nanos() as u64;
        }
        let data = &mut buf[..want as usize];
        let n = RECEIVED.fetch_add(1, Ordering::SeqCst) + 1;
        if FLIP_BLOCK.load(Ordering::SeqCst) == n {
            data[data.len() / 2] ^= 0x20;
        }
        let t = Instant::now();
        let cv = block_cv(data, head.index * block);
        work.hash_ns += t.elapsed().as_nanos() as u64;
        let ok = cv == head.cv;
        if ok {
            match f.put(head.index, data, cv) {
                Ok(ns) => work.disk_ns += ns,
                Err(e) => {
                    let why = match e.raw_os_error() {
                        Some(libc::ENOSPC) => format!("{}: the destination's disk is full", f.name),
                        _ => format!("writing {}: {e}", f.name),
                    };
                    lock(&f.state).error.get_or_insert(why.clone());
                    return Err(io::Error::other(why));
                }
            }
            moved.fetch_add(want, Ordering::Relaxed);
            work.bytes += want;
            work.blocks += 1;
        } else {
            lock(&f.state).resent += 1;
        }
        let mut a = [0u8; ACK_LEN + TAG_LEN];
        a[..ACK_LEN].copy_from_slice(&Ack { file: head.file, index: head.index, ok }.encode());
        let n = seal(sealer.as_mut(), &mut a, ACK_LEN)?;
        sock.write_all(&a[..n])?;
    }
    // the sender's end frame: say so by closing our side
    let _ = sock.shutdown(std::net::Shutdown::Write);
    Ok(work)
}

/// The directory that holds `rel` beneath `root` (its parents made, part
/// by part, when `make`), opened without leaving `root`, and the file's
/// own name. `rel` is checked first ([`gridperf_core::copy::check_relative`]).
pub fn dir_beneath(root: &impl AsRawFd, rel: &str, make: bool) -> io::Result<(OwnedFd, String)> {
    gridperf_core::copy::check_relative(rel).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let parts: Vec<&str> = rel.split('/').collect();
    let (name, parents) = parts.split_last().expect("a checked path has a part");
    let dir_flags = libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW;
    let mut cur = gridperf_sys::open_beneath(root, ".", dir_flags, 0)?;
    for p in parents {
        if make {
            gridperf_sys::mkdir_in(&cur, p)?;
        }
        cur = gridperf_sys::open_beneath(&cur, p, dir_flags, 0)?;
    }
    Ok((cur, name.to_string()))
}

/// A file skipped while a directory was listed, and why.
pub type Skipped = (String, String);

/// How a skipped entry that could not be read (not one skipped by design:
/// a link, a device) begins its reason: the copy fails for it.
pub const UNREADABLE: &str = "cannot read";

/// The regular files at `rel` beneath `root`: the file itself, or every one
/// under the directory, each named by its path from `rel`'s parent (so
/// `data/run1` gives `run1/a.dat`, ...). Symbolic links, devices, pipes and
/// sockets are skipped and listed, never followed or read; at most `max`
/// files.
pub fn expand(root: &impl AsRawFd, rel: &str, max: usize) -> io::Result<(Vec<SourceFile>, Vec<Skipped>)> {
    let (dir, name) = dir_beneath(root, rel, false)?;
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    walk(&dir, &name, &name, &mut files, &mut skipped, max, 0)?;
    Ok((files, skipped))
}

fn walk(
    dir: &OwnedFd,
    name: &str,
    shown: &str,
    files: &mut Vec<SourceFile>,
    skipped: &mut Vec<Skipped>,
    max: usize,
    depth: usize,
) -> io::Result<()> {
    if depth > 64 {
        skipped.push((shown.to_string(), "deeper than 64 directories".into()));
        return Ok(());
    }
    let fd = match gridperf_sys::open_beneath(dir, name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            skipped.push((shown.to_string(), "a symbolic link: not followed".into()));
            return Ok(());
        }
        Err(e) if depth == 0 => return Err(e),
        Err(e) => {
            skipped.push((shown.to_string(), format!("{UNREADABLE}: {e}")));
            return Ok(());
        }
    };
    let f = File::from(fd);
    let kind = f.metadata()?.file_type();
    if kind.is_file() {
        if files.len() >= max {
            return Err(io::Error::other(format!("more than {max} files")));
        }
        // reads block again: the non-blocking flag was for opening only
        gridperf_sys::set_fd_nonblocking(&f, false)?;
        files.push(SourceFile::open(f, shown.to_string())?);
    } else if kind.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", f.as_raw_fd()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let sub: OwnedFd = f.into();
        for n in names {
            if n.ends_with(PARTIAL) || n.ends_with(JOURNAL) {
                continue;
            }
            walk(&sub, &n, &format!("{shown}/{n}"), files, skipped, max, depth + 1)?;
        }
    } else {
        skipped.push((shown.to_string(), "not a regular file or a directory (a device, pipe or socket)".into()));
    }
    Ok(())
}

/// Prepares every file of a copy at the writing end, beneath `root`:
/// the files, and what each needs (a file refused says why; the rest go on).
pub fn prepare_all(
    root: &impl AsRawFd,
    list: &[CopyFile],
    block: u64,
    rules: SinkRules,
) -> (Vec<Option<SinkFile>>, Vec<CopyNeed>) {
    let mut files = Vec::with_capacity(list.len());
    let mut needs = Vec::with_capacity(list.len());
    for (k, f) in list.iter().enumerate() {
        let prepared = dir_beneath(root, &f.path, true)
            .map_err(|e| format!("{}: {e}", f.path))
            .and_then(|(dir, name)| SinkFile::prepare(dir, &name, f.clone(), block, rules));
        match prepared {
            Ok((sf, need)) => {
                files.push(Some(sf));
                needs.push(CopyNeed { file: k as u32, ..need });
            }
            Err(why) => {
                files.push(None);
                needs.push(CopyNeed { file: k as u32, ranges: Vec::new(), kept: 0, refused: Some(why) });
            }
        }
    }
    (files, needs)
}

/// Runs `f` for each connection on a thread of its own; their results, in order.
pub fn each_stream<F>(socks: Vec<TcpStream>, f: F) -> Vec<io::Result<StreamWork>>
where
    F: Fn(u32, TcpStream) -> io::Result<StreamWork> + Sync,
{
    std::thread::scope(|scope| {
        let f = &f;
        let hs: Vec<_> = socks.into_iter().enumerate().map(|(k, s)| scope.spawn(move || f(k as u32, s))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked")))).collect()
    })
}
