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
/// Blocks a sending stream may have written to its socket and not yet
/// sent (TCP_NOTSENT_LOWAT), beyond what is in flight.
pub const UNSENT_BLOCKS: u64 = 2;
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
        Ok(SourceFile { info: CopyFile { path, size: m.len(), mtime_ns: mtime_ns(&m), digest: None }, file })
    }

    /// The file's BLAKE3 (hex), from its blocks' chaining values, for a
    /// third-party copy's sources to be compared before any byte moves: a
    /// read of the whole file at each source, side by side.
    pub fn digest(&self, block: u64) -> io::Result<String> {
        let n = block_count(self.info.size, block);
        let mut buf = vec![0u8; block as usize];
        let mut cvs = Vec::with_capacity(n as usize);
        let mut single = None;
        for i in 0..n {
            let len = block_len(self.info.size, block, i) as usize;
            self.file.read_exact_at(&mut buf[..len], i * block)?;
            cvs.push(block_cv(&buf[..len], i * block));
            if n == 1 {
                single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
            }
        }
        let hash = file_hash(&cvs, self.info.size, block, single).ok_or_else(|| io::Error::other("no hash"))?;
        Ok(hash.to_hex().to_string())
    }

    /// Whether the file changed (size or modification time) since it was opened.
    pub fn changed(&self) -> bool {
        self.file.metadata().map(|m| m.len() != self.info.size || mtime_ns(&m) != self.info.mtime_ns).unwrap_or(true)
    }
}

pub fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())
}

/// The sending end's queue: every connection takes its next block from it
/// (a faster one takes more); a block the writing end found damaged, or
/// one whose connection ended before its acknowledgment, comes back to its
/// front. At the tail (nothing left to take) an idle connection may take a
/// block another still has unacknowledged, to send it again: the first
/// acknowledgment wins.
pub struct BlockQueue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

/// A block taken: the connections carrying it (two when sent again at the tail), since when.
struct Taken {
    by: Vec<u32>,
    since: Instant,
}

type BlockId = (u32, u64);

struct QueueState {
    pending: VecDeque<BlockId>,
    /// Blocks taken and not yet acknowledged.
    outstanding: std::collections::HashMap<BlockId, Taken>,
    resends: std::collections::HashMap<BlockId, u32>,
    /// Files given up on, with why (their other blocks are skipped).
    failed: Vec<(u32, String)>,
    /// Why the whole copy stops.
    stop: Option<String>,
    /// Blocks sent again at the tail.
    tail_sent: u64,
    /// Connections slow enough that their blocks may be sent again at the
    /// tail (the pool says which); None: any connection's.
    slow: Option<Vec<u32>>,
    /// A static split (bbftp's): connection k takes only from `slices[k]`,
    /// a contiguous k-th of the blocks. Empty: one shared queue.
    slices: Vec<VecDeque<BlockId>>,
    /// A third-party source's queue, fed in leases: more may come, so an
    /// empty queue is not the end until the feed ends.
    feeding: bool,
    /// Blocks acknowledged since the feed last asked (the lease's report).
    acked_log: Vec<BlockId>,
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
                outstanding: Default::default(),
                resends: Default::default(),
                failed: Vec::new(),
                stop: None,
                tail_sent: 0,
                slow: None,
                slices: Vec::new(),
                feeding: false,
                acked_log: Vec::new(),
            }),
            wake: Condvar::new(),
        }
    }

    /// The same blocks cut into `n` contiguous slices, connection k
    /// sending only the k-th, as bbftp does (`copy --split static`): the
    /// slowest connection sets the finish. For comparison, not for use.
    pub fn split_static(needs: &[CopyNeed], n: u32) -> BlockQueue {
        let q = BlockQueue::new(needs);
        {
            let mut s = lock(&q.state);
            let all: Vec<BlockId> = s.pending.drain(..).collect();
            let each = all.len().div_ceil(n.max(1) as usize).max(1);
            s.slices = all.chunks(each).map(|c| c.iter().copied().collect()).collect();
            s.slices.resize_with(n.max(1) as usize, VecDeque::new);
        }
        q
    }

    /// An empty queue that the caller feeds ([`BlockQueue::feed`]) until
    /// [`BlockQueue::end_feed`]: a third-party source's, whose blocks the
    /// client hands out in leases shared with the other pairs.
    pub fn fed() -> BlockQueue {
        let q = BlockQueue::new(&[]);
        lock(&q.state).feeding = true;
        q
    }

    /// More blocks, at the back.
    pub fn feed(&self, needs: &[CopyNeed]) {
        let mut s = lock(&self.state);
        for n in needs.iter().filter(|n| n.refused.is_none()) {
            s.pending.extend(n.ranges.iter().flat_map(|&(a, b)| (a..b).map(move |i| (n.file, i))));
        }
        self.wake.notify_all();
    }

    /// No more blocks will be fed: the queue ends once what it has is acknowledged.
    pub fn end_feed(&self) {
        lock(&self.state).feeding = false;
        self.wake.notify_all();
    }

    /// The blocks acknowledged since the last call (a lease's report).
    pub fn take_acked(&self) -> Vec<(u32, u64)> {
        std::mem::take(&mut lock(&self.state).acked_log)
    }

    /// Where connection `conn` takes its blocks from (and gives them back to).
    fn source(s: &mut QueueState, conn: u32) -> &mut VecDeque<BlockId> {
        if s.slices.is_empty() {
            &mut s.pending
        } else {
            let k = (conn as usize).min(s.slices.len() - 1);
            &mut s.slices[k]
        }
    }

    /// Blocks waiting to be taken.
    pub fn len(&self) -> usize {
        let s = lock(&self.state);
        s.pending.len() + s.slices.iter().map(VecDeque::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every block is acknowledged (or given up on), or the copy stopped.
    pub fn done(&self) -> bool {
        let s = lock(&self.state);
        s.stop.is_some()
            || (!s.feeding
                && s.outstanding.is_empty()
                && s.pending.iter().chain(s.slices.iter().flatten()).all(|b| s.failed.iter().any(|f| f.0 == b.0)))
    }

    /// The next block for connection `conn` to send, and whether it is a
    /// second copy (the tail); None once every block is acknowledged, the
    /// copy stopped, or `quit` says so. Waits while others' blocks are
    /// unacknowledged: one may come back. With `tail`, a block another
    /// connection has had unacknowledged at least that long is taken again,
    /// by a connection that has `caught_up` (nothing of its own unacknowledged).
    fn next(
        &self,
        conn: u32,
        tail: Option<Duration>,
        quit: &dyn Fn() -> bool,
        caught_up: &dyn Fn() -> bool,
    ) -> Option<(BlockId, bool)> {
        let mut s = lock(&self.state);
        loop {
            if s.stop.is_some() || quit() {
                return None;
            }
            while let Some(b) = Self::source(&mut s, conn).pop_front() {
                if s.failed.iter().any(|(f, _)| *f == b.0) {
                    continue;
                }
                s.outstanding.insert(b, Taken { by: vec![conn], since: Instant::now() });
                return Some((b, false));
            }
            // a static split: done once its own slice is acknowledged
            let static_split = !s.slices.is_empty();
            if !s.feeding
                && (s.outstanding.is_empty() || (static_split && !s.outstanding.values().any(|t| t.by.contains(&conn))))
            {
                return None;
            }
            // only a connection with nothing of its own unacknowledged (keeping
            // up) sends another's block again: a slow one would only hold it
            if let Some(age) = tail.filter(|_| caught_up()) {
                let oldest = s
                    .outstanding
                    .iter()
                    .filter(|(_, t)| t.by.len() == 1 && t.by[0] != conn && t.since.elapsed() >= age)
                    .filter(|(_, t)| s.slow.as_ref().is_none_or(|slow| slow.contains(&t.by[0])))
                    .min_by_key(|(b, t)| (t.since, **b))
                    .map(|(b, _)| *b);
                if let Some(b) = oldest {
                    if let Some(t) = s.outstanding.get_mut(&b) {
                        t.by.push(conn);
                    }
                    s.tail_sent += 1;
                    return Some((b, true));
                }
            }
            s = self.wake.wait_timeout(s, Duration::from_millis(50)).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// The writing end's word on a block `conn` sent: true when this is
    /// the block's first good acknowledgment (its bytes count as moved).
    fn acked(&self, conn: u32, block: BlockId, ok: bool) -> bool {
        let mut s = lock(&self.state);
        let Some(t) = s.outstanding.get_mut(&block) else {
            // already acknowledged through another connection
            return false;
        };
        let first = if ok {
            s.outstanding.remove(&block);
            s.acked_log.push(block);
            true
        } else {
            t.by.retain(|&c| c != conn);
            if t.by.is_empty() {
                s.outstanding.remove(&block);
                let n = s.resends.entry(block).or_insert(0);
                *n += 1;
                if *n > MAX_RESENDS {
                    let why = format!("block {} arrived damaged {} times", block.1, *n);
                    s.failed.push((block.0, why));
                } else {
                    Self::source(&mut s, conn).push_front(block);
                }
            }
            false
        };
        self.wake.notify_all();
        first
    }

    /// Connection `conn` ended without these blocks' acknowledgments: each
    /// goes back to the front of the queue unless another connection still carries it.
    fn release(&self, conn: u32, blocks: impl IntoIterator<Item = BlockId>) {
        let mut s = lock(&self.state);
        for b in blocks {
            if let Some(t) = s.outstanding.get_mut(&b) {
                t.by.retain(|&c| c != conn);
                if t.by.is_empty() {
                    s.outstanding.remove(&b);
                    Self::source(&mut s, conn).push_front(b);
                }
            }
        }
        self.wake.notify_all();
    }

    fn fail_file(&self, block: BlockId, why: String) {
        let mut s = lock(&self.state);
        s.failed.push((block.0, why));
        s.outstanding.remove(&block);
        self.wake.notify_all();
    }

    /// Stops every stream (the copy cannot go on).
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

    /// The connections whose blocks may be sent again at the tail (the slow ones).
    pub fn set_slow(&self, conns: Vec<u32>) {
        lock(&self.state).slow = Some(conns);
    }

    /// Blocks sent again at the tail.
    pub fn tail_sent(&self) -> u64 {
        lock(&self.state).tail_sent
    }
}

/// How the pool steers one sending connection: close it (`cancel`, with
/// why), and whether it may take blocks again at the tail, after how long.
#[derive(Default)]
pub struct ConnCtl {
    pub cancel: AtomicBool,
    pub why: Mutex<Option<String>>,
    /// How long a block must have waited on another connection before this
    /// one sends it again at the tail, ns; 0: never.
    pub tail_ns: AtomicU64,
}

impl ConnCtl {
    fn tail(&self) -> Option<Duration> {
        match self.tail_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Asks the connection to stop: it takes no more blocks, gives back
    /// the ones not acknowledged, and is reset.
    pub fn close(&self, why: String) {
        *lock(&self.why) = Some(why);
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// How a sending end opens its data connections: the copy's buffers,
/// congestion control and pacing, set before it connects.
#[derive(Debug, Clone, Default)]
pub struct Dial {
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_bps: Option<u64>,
    pub within: Duration,
    /// The local address to send from (a third-party source: the one its client reached it at).
    pub bind: Option<std::net::IpAddr>,
    /// A third-party source: wait for the destination agent to greet the
    /// connection with its token before sending anything.
    pub welcome: bool,
}

/// What went wrong opening a data connection: the congestion control
/// asked for (the user's to fix), or the connection.
pub enum DialError {
    Congestion(String, io::Error),
    Net(String),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Congestion(cc, e) => write!(f, "-C {cc}: {e}"),
            DialError::Net(m) => f.write_str(m),
        }
    }
}

/// Opens data connection `k` of a copy to `at`, with its hello (`token`).
pub fn dial(at: std::net::SocketAddr, token: u64, k: u32, d: &Dial) -> Result<TcpStream, DialError> {
    let net = |e: io::Error| DialError::Net(e.to_string());
    let sock = socket2::Socket::new(socket2::Domain::for_address(at), socket2::Type::STREAM, None).map_err(net)?;
    if let Some(w) = d.window {
        gridperf_sys::set_sndbuf(&sock, w as usize).map_err(net)?;
        gridperf_sys::set_rcvbuf(&sock, w as usize).map_err(net)?;
    }
    if let Some(cc) = &d.congestion {
        gridperf_sys::set_tcp_congestion(&sock, cc).map_err(|e| DialError::Congestion(cc.clone(), e))?;
    }
    if let Some(p) = d.pacing_bps {
        gridperf_sys::set_max_pacing_rate(&sock, p / 8).map_err(net)?;
    }
    if let Some(ip) = d.bind {
        sock.bind(&std::net::SocketAddr::new(ip, 0).into()).map_err(net)?;
    }
    sock.connect_timeout(&at.into(), d.within)
        .map_err(|e| DialError::Net(format!("data connection {k} to {at}: {e}")))?;
    let mut s: TcpStream = sock.into();
    no_delay(&s);
    let hello = gridperf_core::wire::DataHello::new(token, gridperf_core::wire::DataKind::Copy, k);
    super::write_hello(&mut s, &hello).map_err(net)?;
    if d.welcome {
        let mut got = [0u8; 8];
        s.set_read_timeout(Some(d.within)).map_err(net)?;
        s.read_exact(&mut got)
            .map_err(|e| DialError::Net(format!("data connection {k} to {at}: no agent's greeting: {e}")))?;
        if u64::from_be_bytes(got) != token {
            return Err(DialError::Net(format!("data connection {k} to {at}: not the agent the client named")));
        }
    }
    Ok(s)
}

/// A copy's data connection sends what it is given at once: with Nagle a
/// block's last partial segment waited behind the 13-byte hello until it
/// was acknowledged, a round trip for every small file's first block, and a
/// 16-byte acknowledgment behind the one before it. A block is written with
/// its header queued ahead of it, so bulk segments stay full.
pub fn no_delay(s: &TcpStream) {
    let _ = s.set_nodelay(true);
}

/// Writes a block's header with MSG_MORE: it leaves with the block's first
/// bytes, not in a packet of its own (the connection has no Nagle).
fn write_ahead(sock: &TcpStream, mut head: &[u8]) -> io::Result<()> {
    let s = socket2::SockRef::from(sock);
    while !head.is_empty() {
        match s.send_with_flags(head, libc::MSG_MORE | libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the connection took nothing")),
            Ok(n) => head = &head[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resets a connection at once (what its socket still holds is thrown away).
fn reset(sock: &TcpStream) {
    let _ = socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO));
    let _ = sock.shutdown(std::net::Shutdown::Both);
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
///
/// The connection ends early, giving its unacknowledged blocks back to the
/// queue, when the pool closes it (`ctl`) or it fails (then the error);
/// at the end, a connection still holding blocks that another delivered
/// first (the tail) is reset rather than made to finish sending them.
pub fn send_stream(
    index: u32,
    files: &[SourceFile],
    block: u64,
    queue: &BlockQueue,
    link: Link,
    moved: &AtomicU64,
    ctl: &ConnCtl,
) -> io::Result<StreamWork> {
    let Link { sock, idle, crypt, window } = link;
    // at most UNSENT_BLOCKS blocks written and not yet sent: with a large
    // send buffer (-w 32M) a stream otherwise took a third of a small file
    // from the queue at once, and a stream on a lossy path held its blocks
    // where neither the queue nor a restart could give them to the others
    // (best effort: without it the copy is only slower at its tail)
    let _ = gridperf_sys::set_notsent_lowat(&sock, (UNSENT_BLOCKS * block).min(u64::from(u32::MAX)) as u32);
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
    let cancelled = || ctl.cancel.load(Ordering::SeqCst);
    let broken = AtomicBool::new(false);
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
        let broken = &broken;
        let ack_thread = scope.spawn(move || -> io::Result<()> {
            let mut b = [0u8; ACK_LEN + TAG_LEN];
            // a failed reader stops its connection at once (the writer too):
            // the blocks it holds go back to the queue for the others
            let fail = |e: io::Error, reader: &TcpStream| {
                broken.store(true, Ordering::SeqCst);
                let _ = reader.shutdown(std::net::Shutdown::Both);
                e
            };
            loop {
                match read_frame(&mut reader, opener.as_mut(), &mut b, ACK_LEN) {
                    Ok(()) => {}
                    Err(_) if finished.load(Ordering::SeqCst) || ctl.cancel.load(Ordering::SeqCst) => return Ok(()),
                    Err(e) => return Err(fail(e, &reader)),
                }
                let a = Ack::decode(b[..ACK_LEN].try_into().expect("an ack's length"));
                let (lock_, cv) = &*flight;
                let mut f = lock(lock_);
                let Some(pos) = f.iter().position(|&(file, i, _)| file == a.file && i == a.index) else {
                    // the other end is not speaking this protocol: nothing it says can be trusted
                    let why = format!("an acknowledgment of a block not sent on it: {a:?}");
                    queue.stop(format!("stream {index}: {why}"));
                    drop(f);
                    return Err(fail(io::Error::new(io::ErrorKind::InvalidData, why), &reader));
                };
                let (_, _, len) = f.remove(pos).expect("found");
                drop(f);
                if queue.acked(index, (a.file, a.index), a.ok) {
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
            let quit = || cancelled() || broken.load(Ordering::SeqCst);
            let caught_up = || lock(&in_flight.0).is_empty();
            while let Some(((file, idx), again)) = queue.next(index, ctl.tail(), &quit, &caught_up) {
                let f = &files[file as usize];
                let len = block_len(f.info.size, block, idx);
                let data = &mut buf[..len as usize];
                let t = Instant::now();
                if let Err(e) = f.file.read_exact_at(data, idx * block) {
                    queue.fail_file((file, idx), format!("reading {}: {e}", f.info.path));
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
                        if cancelled() {
                            queue.release(index, [(file, idx)]);
                            return Ok(());
                        }
                        if Instant::now() > until {
                            queue.release(index, [(file, idx)]);
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no acknowledgment within the deadline",
                            ));
                        }
                        if ack_thread.is_finished() {
                            queue.release(index, [(file, idx)]);
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
                write_ahead(&sock, &head[..hn])?;
                out.write_all(&buf[..dn])?;
                work.net_ns += t.elapsed().as_nanos() as u64;
                work.bytes += len;
                work.blocks += 1;
                if again {
                    work.tail_blocks += 1;
                }
            }
            if cancelled() {
                return Ok(());
            }
            if broken.load(Ordering::SeqCst) {
                return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the other end stopped acknowledging"));
            }
            done.store(true, Ordering::SeqCst);
            if !lock(&in_flight.0).is_empty() {
                // every block is acknowledged, some of this one's through
                // another connection: what it still sends is not needed
                *lock(&ctl.why) = Some("closed at the end: its last blocks arrived first on another connection".into());
                reset(&sock);
                return Ok(());
            }
            // every block acknowledged (the queue is done): the end frame
            head[..FRAME_HEADER].copy_from_slice(&BlockHeader::end().encode());
            let hn = seal(sealer.as_mut(), &mut head, FRAME_HEADER)?;
            out.write_all(&head[..hn])?;
            out.flush()?;
            // every block is acknowledged and nothing else comes on this
            // connection: the acknowledgment reader ends now rather than at
            // the other end's close, a round trip later (270 ms at CERN-Tokyo)
            let _ = sock.shutdown(std::net::Shutdown::Read);
            Ok(())
        })();
        if cancelled() || result.is_err() {
            // closed by the pool, or failed: reset, and its blocks back to the queue
            reset(&sock);
        }
        sampling.store(false, Ordering::SeqCst);
        sampler.thread().unpark();
        samples = sampler.join().unwrap_or_default();
        let acked = ack_thread.join().unwrap_or_else(|_| Err(io::Error::other("the acknowledgment reader panicked")));
        let left: Vec<BlockId> = lock(&in_flight.0).drain(..).map(|(f, i, _)| (f, i)).collect();
        if !done.load(Ordering::SeqCst) {
            queue.release(index, left);
        }
        if cancelled() {
            return Ok(work.clone());
        }
        result?;
        acked?;
        Ok(work.clone())
    })?;
    let mut work = acks;
    if let Ok((info, _)) = gridperf_sys::tcp_info(&sock) {
        work.retransmits = Some(info.total_retrans);
        work.rtt_us = Some(info.rtt_us);
    }
    samples.extend(sample_now());
    work.tcp = tcp_verdict(&samples, work.bytes, window);
    work.ended = lock(&ctl.why).clone();
    Ok(work)
}

/// What the pool of sending connections may do over a copy.
#[derive(Debug, Clone)]
pub struct PoolPlan {
    /// Connections at first.
    pub start: u32,
    /// `-P auto`: the fewest and the most at once; None keeps `start`.
    pub auto: Option<(u32, u32)>,
    /// Restart a slow connection (gridperf_core::pool's rules).
    pub restart: bool,
    /// Send the last blocks again on idle connections.
    pub tail: bool,
    /// The most connections over the copy (their numbers stay below it).
    pub connections: u32,
    /// Said with the first restart: why a new connection may start no
    /// faster (this host's TCP metrics cache), if it would.
    pub restart_caveat: Option<String>,
}

/// What the pool did: each connection's result (by number), and its events.
pub struct PoolOut {
    pub works: Vec<io::Result<StreamWork>>,
    pub events: Vec<gridperf_core::model::CopyEvent>,
}

/// How often the pool looks at its connections.
const POOL_TICK: Duration = Duration::from_millis(100);
/// The judging window: this many smoothed round trips, at least MIN_WINDOW.
const WINDOW_RTTS: u32 = 8;
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// A block is sent again at the tail once it has waited this many of its
/// sender's round trips (at least TAIL_MIN) for its acknowledgment.
const TAIL_MIN: Duration = Duration::from_millis(200);

/// One live connection of the pool.
struct Live<'s> {
    id: u32,
    slot: u32,
    ctl: Arc<ConnCtl>,
    started: Instant,
    replaces: Option<(u32, f64)>,
    /// A clone of its socket once connected: its TCP_INFO, and a shutdown to wake it.
    sock: Arc<Mutex<Option<TcpStream>>>,
    handle: std::thread::ScopedJoinHandle<'s, io::Result<StreamWork>>,
    /// Set as its thread returns (or unwinds), just before it wakes the pool.
    ended: Arc<AtomicBool>,
    /// (when, bytes acknowledged, TCP_INFO) over the last window.
    hist: VecDeque<(Instant, u64, Option<gridperf_core::flow::TcpSample>)>,
}

/// Held by a worker thread; dropped as it returns or unwinds: marks it
/// ended, then wakes the thread that waits for it, which sees the flag at
/// once (woken before the worker had returned, `is_finished` still said no
/// and the waiter slept its whole tick). The copy's pool of connections and
/// its progress loop both wait this way.
pub struct Ended {
    pub flag: Arc<AtomicBool>,
    pub waiter: std::thread::Thread,
}

impl Ended {
    /// A guard that wakes the current thread; and the flag it sets.
    pub fn wakes_me() -> (Ended, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        (Ended { flag: flag.clone(), waiter: std::thread::current() }, flag)
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waiter.unpark();
    }
}

/// Runs a copy's sending connections from one queue: `plan.start` of
/// them, opened by `open(number)`, then (as the plan allows) restarts of
/// slow ones, more or fewer with `-P auto`, and the tail. `moved[number]`
/// counts each one's acknowledged bytes. `event` hears each event as it
/// happens. Returns when every block is acknowledged, or the copy stopped,
/// or every connection failed (then the queue is stopped with why).
pub fn send_pool(
    files: &[SourceFile],
    block: u64,
    queue: &BlockQueue,
    plan: &PoolPlan,
    open: &(dyn Fn(u32) -> io::Result<Link> + Sync),
    moved: &[AtomicU64],
    event: &(dyn Fn(&gridperf_core::model::CopyEvent) + Sync),
) -> PoolOut {
    use gridperf_core::model::CopyEvent;
    use gridperf_core::pool::{AutoStreams, Change, ConnWindow, Decision, Restarts};
    let t0 = Instant::now();
    let budget = plan.connections.min(moved.len() as u32);
    let mut works: Vec<Option<io::Result<StreamWork>>> = Vec::new();
    let mut events: Vec<CopyEvent> = Vec::new();
    let note = |events: &mut Vec<CopyEvent>, kind: &str, stream: Option<u32>, new_stream: Option<u32>, why: String| {
        let e = CopyEvent { t_s: t0.elapsed().as_secs_f64(), kind: kind.into(), stream, new_stream, why };
        event(&e);
        events.push(e);
    };
    std::thread::scope(|scope| {
        let mut next_id = 0u32;
        let mut next_slot = 0u32;
        let spawn = |id: u32, slot: u32, replaces: Option<(u32, f64)>, tail: Option<Duration>| -> Live<'_> {
            let ctl = Arc::new(ConnCtl::default());
            ctl.tail_ns.store(tail.map_or(0, |t| t.as_nanos() as u64), Ordering::Relaxed);
            let sock: Arc<Mutex<Option<TcpStream>>> = Arc::default();
            let (c, s) = (ctl.clone(), sock.clone());
            let (wake, ended) = Ended::wakes_me();
            let handle = scope.spawn(move || {
                let _wake = wake;
                let link = open(id)?;
                *lock(&s) = Some(link.sock.try_clone()?);
                let mut w = send_stream(id, files, block, queue, link, &moved[id as usize], &c)?;
                w.slot = slot;
                Ok(w)
            });
            Live { id, slot, ctl, started: Instant::now(), replaces, sock, handle, ended, hist: VecDeque::new() }
        };
        let mut tail = plan.tail.then_some(TAIL_MIN);
        let mut live: Vec<Live> = Vec::new();
        while next_id < plan.start.min(budget) {
            live.push(spawn(next_id, next_slot, None, tail));
            next_id += 1;
            next_slot += 1;
        }
        let mut restarts = Restarts::default();
        let mut auto = plan.auto.map(|(lo, hi)| AutoStreams::new(lo, hi));
        let mut last_error: Option<String> = None;
        let mut done_at: Option<Instant> = None;
        loop {
            // a tick, or sooner when a connection ends (the last one's end
            // is the copy's: waiting out the tick was up to 100 ms of it)
            std::thread::park_timeout(POOL_TICK);
            // the connections that ended
            let mut k = 0;
            while k < live.len() {
                if !live[k].ended.load(Ordering::SeqCst) && !live[k].handle.is_finished() {
                    k += 1;
                    continue;
                }
                let l = live.swap_remove(k);
                let r = l.handle.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked")));
                let r = r.map(|mut w| {
                    w.slot = l.slot;
                    w
                });
                if let Err(e) = &r {
                    if !queue.done() {
                        let why = format!("{e} (its unacknowledged blocks went back to the queue)");
                        last_error = Some(e.to_string());
                        note(&mut events, "broken", Some(l.id), None, why);
                    }
                }
                if works.len() <= l.id as usize {
                    works.resize_with(l.id as usize + 1, || None);
                }
                works[l.id as usize] = Some(r);
            }
            if queue.done() {
                if live.is_empty() {
                    break;
                }
                // every block is acknowledged: a connection still running
                // after a grace tick is only sending what another delivered
                // (a slow one, stuck in a write): reset it
                let since = *done_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= 2 * POOL_TICK {
                    for l in &live {
                        if !l.ctl.cancel.load(Ordering::SeqCst) {
                            l.ctl
                                .close("closed at the end: its last blocks arrived first on another connection".into());
                            if let Some(s) = lock(&l.sock).as_ref() {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                        }
                    }
                }
                continue;
            }
            if live.is_empty() {
                let why = last_error.take().unwrap_or_else(|| "no connection left".into());
                queue.stop(format!("every data connection failed; the last: {why}"));
                continue;
            }
            // each connection over the last window
            let now = Instant::now();
            let srtts: Vec<f64> = live
                .iter()
                .filter_map(|l| l.hist.back().and_then(|h| h.2.as_ref()).map(|t| f64::from(t.srtt_us)))
                .collect();
            let srtt_us = gridperf_core::stats::median(&srtts).unwrap_or(0.0);
            let window = MIN_WINDOW.max(Duration::from_micros((srtt_us * f64::from(WINDOW_RTTS)) as u64));
            if plan.tail {
                let t = TAIL_MIN.max(Duration::from_micros((srtt_us * 4.0) as u64));
                tail = Some(t);
                for l in &live {
                    l.ctl.tail_ns.store(t.as_nanos() as u64, Ordering::Relaxed);
                }
            }
            for l in live.iter_mut() {
                let tcp = lock(&l.sock)
                    .as_ref()
                    .and_then(|s| gridperf_sys::tcp_info(s).ok())
                    .map(|(info, _)| super::stream::sample(&info, l.started.elapsed().as_nanos() as u64));
                l.hist.push_back((now, moved[l.id as usize].load(Ordering::Relaxed), tcp));
                while l.hist.len() > 2 && now.duration_since(l.hist[1].0) >= window {
                    l.hist.pop_front();
                }
            }
            let views: Vec<ConnWindow> = live
                .iter()
                .filter_map(|l| {
                    let (a, b) = (l.hist.front()?, l.hist.back()?);
                    let dt = b.0.duration_since(a.0).as_secs_f64();
                    if dt <= 0.0 {
                        return None;
                    }
                    let (ta, tb) = (a.2.as_ref(), b.2.as_ref());
                    let retrans = match (ta, tb) {
                        (Some(x), Some(y)) => y.total_retrans.saturating_sub(x.total_retrans),
                        _ => 0,
                    };
                    let clock = match (ta, tb) {
                        (Some(x), Some(y)) if y.busy_us > x.busy_us => {
                            let lim = (y.rwnd_limited_us + y.sndbuf_limited_us)
                                .saturating_sub(x.rwnd_limited_us + x.sndbuf_limited_us);
                            lim as f64 / (y.busy_us - x.busy_us) as f64
                        }
                        _ => 0.0,
                    };
                    // the kernel's clocks run only when a send finds the window
                    // shut (a paced sender rarely does): the samples show the
                    // data in flight reaching the receiver's window, as
                    // stream's verdict reads them
                    let tcp: Vec<&gridperf_core::flow::TcpSample> =
                        l.hist.iter().skip(1).filter_map(|h| h.2.as_ref()).collect();
                    let at_window = tcp
                        .iter()
                        .filter(|t| {
                            t.snd_wnd > 0 && u64::from(t.unacked) * u64::from(t.mss) * 100 >= u64::from(t.snd_wnd) * 85
                        })
                        .count();
                    let sampled = if tcp.is_empty() { 0.0 } else { at_window as f64 / tcp.len() as f64 };
                    let buffer_limited = clock.max(sampled).min(1.0);
                    // TCP's own count of bytes acknowledged: blocks are acknowledged
                    // whole, a few a window on a slow connection
                    let bytes = match (ta, tb) {
                        (Some(x), Some(y)) => y.bytes_acked.saturating_sub(x.bytes_acked),
                        _ => b.1.saturating_sub(a.1),
                    };
                    Some(ConnWindow {
                        id: l.id,
                        slot: l.slot,
                        age_ns: l.started.elapsed().as_nanos() as u64,
                        rate_bps: bytes as f64 * 8.0 / dt,
                        retrans,
                        buffer_limited,
                        replaces: l.replaces,
                    })
                })
                .collect();
            if plan.tail {
                queue.set_slow(gridperf_core::pool::tail_holders(&views));
            }
            let now_ns = t0.elapsed().as_nanos() as u64;
            let window_ns = window.as_nanos() as u64;
            let pending = !queue.is_empty();
            if plan.restart {
                match restarts.decide(now_ns, window_ns, &views, pending) {
                    Some(Decision::Restart { id, why }) if next_id < budget => {
                        if let Some(pos) = live.iter().position(|l| l.id == id) {
                            let slot = live[pos].slot;
                            let rate = views.iter().find(|v| v.id == id).map_or(0.0, |v| v.rate_bps);
                            live[pos].ctl.close(format!("restarted: {why}"));
                            if let Some(s) = lock(&live[pos].sock).as_ref() {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                            live.push(spawn(next_id, slot, Some((id, rate)), tail));
                            let why = match &plan.restart_caveat {
                                Some(c) if restarts.count() == 1 => format!("{why}; {c}"),
                                _ => why,
                            };
                            note(&mut events, "restart", Some(id), Some(next_id), why);
                            next_id += 1;
                        }
                    }
                    Some(Decision::Restart { id, why }) => {
                        note(&mut events, "give-up", Some(id), None, format!("no connection left to open: {why}"))
                    }
                    Some(Decision::GiveUp { id, why }) => note(&mut events, "give-up", Some(id), None, why),
                    Some(Decision::Stop { why }) => note(&mut events, "stop-restarts", None, None, why),
                    None => {}
                }
            }
            if let Some(a) = auto.as_mut() {
                let youngest = live.iter().map(|l| l.started.elapsed()).min().unwrap_or_default();
                let rate: f64 = views.iter().map(|v| v.rate_bps).sum();
                let retrans: u32 = views.iter().map(|v| v.retrans).sum();
                let buffer_limited = if views.is_empty() {
                    0.0
                } else {
                    views.iter().map(|v| v.buffer_limited).sum::<f64>() / views.len() as f64
                };
                let n = live.iter().filter(|l| !l.ctl.cancel.load(Ordering::SeqCst)).count() as u32;
                let w = gridperf_core::pool::PoolWindow {
                    now_ns,
                    window_ns,
                    live: n,
                    youngest_ns: youngest.as_nanos() as u64,
                    rate_bps: rate,
                    retrans,
                    buffer_limited,
                    pending,
                };
                match a.decide(&w) {
                    Some(Change::Add { n, why }) => {
                        let mut opened = Vec::new();
                        for _ in 0..n {
                            if next_id >= budget {
                                break;
                            }
                            live.push(spawn(next_id, next_slot, None, tail));
                            opened.push(next_id.to_string());
                            next_id += 1;
                            next_slot += 1;
                        }
                        if !opened.is_empty() {
                            note(&mut events, "add", None, None, format!("{why}: opened {}", opened.join(", ")));
                        }
                    }
                    Some(Change::Remove { why }) => {
                        if let Some(l) =
                            live.iter().filter(|l| !l.ctl.cancel.load(Ordering::SeqCst)).max_by_key(|l| l.started)
                        {
                            l.ctl.close(format!("removed by -P auto: {why}"));
                            if let Some(s) = lock(&l.sock).as_ref() {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                            note(&mut events, "remove", Some(l.id), None, why);
                        }
                    }
                    None => {}
                }
            }
        }
    });
    let works = works.into_iter().flatten().collect();
    PoolOut { works, events }
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
    /// A third-party copy's second destination: writes into the first's
    /// partial file, never renames it.
    joined: bool,
    /// A third-party copy's first destination with others joined: blocks
    /// they verified are taken from the shared journal at the finish:
    /// its records from this offset on (written in this run; the ones
    /// before were hashed again, or did not hold).
    adopt: bool,
    adopt_from: u64,
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
    /// Write into the partial files another destination agent prepared on
    /// shared storage (a third-party copy's second destination).
    pub join: bool,
    /// Take the blocks other destination agents verified from the shared
    /// journal at the finish (a third-party copy's first destination).
    pub adopt: bool,
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
            joined: rules.join,
            adopt: rules.adopt,
            adopt_from: 0,
        };
        if rules.join {
            return file.join(&partial_name, &journal_name, n);
        }
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
            // appended to (other destination agents may write records into it too)
            let flags = rw | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND;
            let j = gridperf_sys::open_beneath(&file.dir, &journal_name, flags, 0o600)
                .map_err(|e| format!("{journal_name}: {e}"))?;
            let mut j = File::from(j);
            let head =
                serde_json::json!({ "version": 1, "size": info.size, "mtime_ns": info.mtime_ns, "block": block });
            writeln!(j, "{head}").map_err(|e| format!("{journal_name}: {e}"))?;
            *lock(&file.journal) = Some(j);
        }
        file.partial = Some(partial);
        file.adopt_from = lock(&file.journal).as_ref().and_then(|j| j.metadata().ok()).map_or(u64::MAX, |m| m.len());
        let need: Vec<u64> = {
            let s = lock(&file.state);
            (0..n as u64).filter(|&i| s.cvs[i as usize].is_none()).collect()
        };
        let kept = lock(&file.state).kept;
        Ok((file, CopyNeed { ranges: gridperf_core::copy::ranges(need), ..none(kept) }))
    }

    /// A second destination's side of a file: the partial file and journal
    /// the first destination prepared, opened where this agent sees them
    /// (refused when they are not there: not the same storage). It needs
    /// nothing of its own: the client's leases say what comes here.
    fn join(mut self, partial_name: &str, journal_name: &str, n: usize) -> Result<(SinkFile, CopyNeed), String> {
        let name = self.name.clone();
        let not_shared = |what: &str| {
            format!(
                "{name}: {what}: this destination does not share the first one's storage (give \
                 --same-destination, or destinations on one shared filesystem)"
            )
        };
        let rw = libc::O_RDWR | libc::O_NOFOLLOW;
        let partial = gridperf_sys::open_beneath(&self.dir, partial_name, rw, 0)
            .map(File::from)
            .map_err(|e| not_shared(&format!("the first destination's {partial_name}: {e}")))?;
        if !partial.metadata().is_ok_and(|m| m.len() == self.info.size) {
            return Err(not_shared(&format!("{partial_name} is not of the source's size")));
        }
        let mut j = gridperf_sys::open_beneath(&self.dir, journal_name, rw | libc::O_APPEND, 0)
            .map(File::from)
            .map_err(|e| not_shared(&format!("the first destination's {journal_name}: {e}")))?;
        let mut head = String::new();
        io::BufRead::read_line(&mut io::BufReader::new(&mut j), &mut head)
            .map_err(|e| format!("{journal_name}: {e}"))?;
        let head: serde_json::Value = serde_json::from_str(&head).unwrap_or_default();
        if head["size"] != self.info.size || head["mtime_ns"] != self.info.mtime_ns || head["block"] != self.block {
            return Err(not_shared(&format!("{journal_name} belongs to another copy")));
        }
        self.partial = Some(partial);
        *lock(&self.journal) = Some(j);
        lock(&self.state).cvs = vec![None; n];
        Ok((self, CopyNeed { file: 0, ranges: Vec::new(), kept: 0, refused: None }))
    }

    /// Takes from the journal the blocks other destination agents verified
    /// and recorded there (a third-party copy on shared storage).
    fn adopt_joined(&self) -> io::Result<()> {
        let journal_name = format!(".{}{JOURNAL}", self.name);
        let fd = gridperf_sys::open_beneath(&self.dir, &journal_name, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
        let mut all = Vec::new();
        File::from(fd).read_to_end(&mut all)?;
        let from = (self.adopt_from as usize).min(all.len());
        let mut s = lock(&self.state);
        for rec in all[from..].chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes")) as usize;
            let Some(cv) = unhex32(&hex(&rec[8..40])) else { continue };
            if let Some(slot @ None) = s.cvs.get_mut(idx) {
                *slot = Some(cv);
            }
        }
        Ok(())
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
        if self.joined {
            // the first destination renames: what this one wrote is made durable first
            if let Err(e) = partial.sync_data() {
                out.error = Some(format!("{}: {e}", self.name));
            }
            return out;
        }
        if self.adopt && !self.complete() {
            if let Err(e) = self.adopt_joined() {
                out.error.get_or_insert(format!("reading the journal others wrote: {e}; kept partial"));
            }
        }
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

/// The writing end's data connections of a copy, in a thread scope: each
/// started as it comes (the first ones, then a restart's or -P auto's),
/// ended in any order. One that breaks or is reset is no error by itself
/// (the sending end sends its blocks again on another; a file is whole when
/// every block is verified); one that carried what was not sent (altered
/// on the way, not a block) ends the copy.
pub struct ReceiveSet<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    files: &'env [Option<SinkFile>],
    block: u64,
    idle: Duration,
    window: Option<u64>,
    keys: Option<&'env gridperf_core::seal::CopyKeys>,
    /// Bytes verified, by connection number.
    moved: &'env [AtomicU64],
    running: Vec<std::thread::ScopedJoinHandle<'scope, io::Result<StreamWork>>>,
    open: Vec<TcpStream>,
    works: Vec<io::Result<StreamWork>>,
}

impl<'scope, 'env> ReceiveSet<'scope, 'env> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        files: &'env [Option<SinkFile>],
        block: u64,
        idle: Duration,
        window: Option<u64>,
        keys: Option<&'env gridperf_core::seal::CopyKeys>,
        moved: &'env [AtomicU64],
    ) -> Self {
        ReceiveSet {
            scope,
            files,
            block,
            idle,
            window,
            keys,
            moved,
            running: Vec::new(),
            open: Vec::new(),
            works: Vec::new(),
        }
    }

    /// Starts receiving on connection `k`.
    pub fn start(&mut self, k: u32, sock: TcpStream) {
        if let Ok(c) = sock.try_clone() {
            self.open.push(c);
        }
        let (files, block, idle, window) = (self.files, self.block, self.idle, self.window);
        let Some(moved) = self.moved.get(k as usize).or(self.moved.last()) else { return };
        let crypt = Crypt::of(self.keys, k, false);
        self.running
            .push(self.scope.spawn(move || receive_stream(k, files, block, Link { sock, idle, crypt, window }, moved)));
    }

    /// Collects the connections that ended; why the copy must stop, if one
    /// carried what was not sent.
    pub fn reap(&mut self) -> Option<String> {
        let mut k = 0;
        while k < self.running.len() {
            if self.running[k].is_finished() {
                let h = self.running.swap_remove(k);
                self.works.push(h.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked"))));
            } else {
                k += 1;
            }
        }
        self.works
            .iter()
            .find_map(|w| w.as_ref().err().filter(|e| e.kind() == io::ErrorKind::InvalidData))
            .map(|e| e.to_string())
    }

    /// Connections still receiving.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Cuts every connection (their threads end at once).
    pub fn shut(&self) {
        for s in &self.open {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Cuts what still runs (nothing it carries is needed once the sending
    /// end says every block is acknowledged; a reset whose RST was lost
    /// would otherwise hold it for the idle deadline) and collects them all.
    pub fn finish(mut self) -> Vec<io::Result<StreamWork>> {
        self.shut();
        for h in self.running.drain(..) {
            self.works.push(h.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked"))));
        }
        self.works
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_blocks_header_waits_for_its_bytes_and_leaves_with_them() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let tx = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut rx, _) = l.accept().expect("accept");
        no_delay(&tx);
        rx.set_nonblocking(true).expect("nonblocking");
        let mut got = [0u8; 4096];
        // without Nagle a plain write leaves at once
        (&tx).write_all(&[1u8; 52]).expect("write");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rx.read(&mut got).expect("a plain write arrived"), 52);
        // a header written ahead waits for the block's bytes
        write_ahead(&tx, &[2u8; FRAME_HEADER]).expect("header");
        std::thread::sleep(Duration::from_millis(50));
        let held = rx.read(&mut got).map_err(|e| e.kind());
        assert_eq!(held, Err(io::ErrorKind::WouldBlock), "the header left alone");
        (&tx).write_all(&[3u8; 1000]).expect("block");
        rx.set_nonblocking(false).expect("blocking");
        rx.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        let mut all = Vec::new();
        while all.len() < FRAME_HEADER + 1000 {
            let n = rx.read(&mut got).expect("the header and the block");
            all.extend_from_slice(&got[..n]);
        }
        assert!(all[..FRAME_HEADER].iter().all(|&b| b == 2) && all[FRAME_HEADER..].iter().all(|&b| b == 3));
    }
}
