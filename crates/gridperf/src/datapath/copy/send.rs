//! One sending connection: blocks from the queue out, acknowledgments in.

use super::*;
use gridperf_core::copy::seal::{Sealer, TAG_LEN};
use gridperf_core::copy::{block_cv, block_len};
use gridperf_core::wire::block::{Ack, AckStatus, BlockHeader, ACK_LEN, FRAME_HEADER};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why the sending end gave a file up when the writing end could not
/// write it; the writing end's own outcome says more (a full disk).
pub const WRITE_FAILED: &str = "the writing end could not write it: kept partial there";

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

/// How often a sending stream's TCP_INFO is sampled at first (stream's
/// default timeline step); past MAX_TCP_SAMPLES every other sample is
/// dropped and the step doubles (memory stays bounded on a long copy).
const TCP_SAMPLE_GAP: Duration = Duration::from_millis(10);
const MAX_TCP_SAMPLES: usize = 4096;

/// The sending end's verdict on one stream from its TCP_INFO samples, as
/// `stream` reads them (None with fewer than two, or when they say nothing).
fn tcp_verdict(
    samples: &[gridperf_core::analysis::flow::TcpSample],
    bytes: u64,
    window: Option<u64>,
) -> Option<String> {
    use gridperf_core::analysis::flow::{verdict, Limit, VerdictContext};
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
// The writer, its TCP_INFO sampler (`sample_tcp`) and its acknowledgment
// reader (`Acks`) run in one thread scope and share its locals (the blocks
// in flight, the stop flags); the writer's loop is the rest.
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
    let (mut sealer, opener) = Crypt::split(crypt);
    let t0 = Instant::now();
    let sample_now = || {
        gridperf_sys::tcp_info(&sock)
            .ok()
            .map(|(info, _)| crate::datapath::stream::sample(&info, t0.elapsed().as_nanos() as u64))
    };
    sock.set_write_timeout(Some(idle))?;
    let reader = sock.try_clone()?;
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
        let sampler = scope.spawn(|| sample_tcp(&sampling, &sample_now));
        let flight = in_flight.clone();
        let finished = done.clone();
        let broken = &broken;
        let ack_thread = scope.spawn(move || {
            let acks = Acks { index, flight: &flight, finished: &finished, broken, ctl, queue, moved };
            acks.read(reader, opener)
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
                if let Err(e) = f.read_exact_at(data, idx * block) {
                    queue.fail_file((file, idx), format!("reading {}: {e}", f.info.path));
                    continue;
                }
                work.disk_ns += t.elapsed().as_nanos() as u64;
                let t = Instant::now();
                let cv = block_cv(data, idx * block);
                work.hash_ns += t.elapsed().as_nanos() as u64;
                // wait for room: at most unacked_limit(block) blocks unacknowledged
                let room = wait_for_room(&in_flight, limit, idle, &cancelled, || ack_thread.is_finished());
                match room {
                    Ok(true) => lock(&in_flight.0).push_back((file, idx, len)),
                    Ok(false) | Err(_) => {
                        queue.release(index, [(file, idx)]);
                        return room.map(|_| ());
                    }
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

/// TCP_INFO every TCP_SAMPLE_GAP while `sampling` holds, as `stream`
/// reads it; past MAX_TCP_SAMPLES every other sample, and half as often.
fn sample_tcp<S>(sampling: &AtomicBool, sample_now: &dyn Fn() -> Option<S>) -> Vec<S> {
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
}

/// Waits until the stream has fewer than `limit` blocks unacknowledged:
/// true then, false when the pool cancelled the stream meanwhile, an error
/// when no acknowledgment came within `idle` or the reader of them ended.
fn wait_for_room(
    in_flight: &InFlight,
    limit: usize,
    idle: Duration,
    cancelled: &dyn Fn() -> bool,
    reader_ended: impl Fn() -> bool,
) -> io::Result<bool> {
    let (lock_, cv) = in_flight;
    let mut fl = lock(lock_);
    let until = Instant::now() + idle;
    while fl.len() >= limit {
        if cancelled() {
            return Ok(false);
        }
        if Instant::now() > until {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no acknowledgment within the deadline"));
        }
        if reader_ended() {
            return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the other end stopped acknowledging"));
        }
        fl = cv.wait_timeout(fl, Duration::from_millis(100)).unwrap_or_else(PoisonError::into_inner).0;
    }
    Ok(true)
}

/// The reader of one sending stream's acknowledgments, beside its writer.
struct Acks<'a> {
    index: u32,
    flight: &'a InFlight,
    /// The writer sent its last block and every one was acknowledged.
    finished: &'a AtomicBool,
    /// Set when this reader fails: the writer stops too.
    broken: &'a AtomicBool,
    ctl: &'a ConnCtl,
    queue: &'a BlockQueue,
    moved: &'a AtomicU64,
}

impl Acks<'_> {
    /// Reads acknowledgments until the stream ends: each takes its block
    /// out of flight and tells the queue; a block not sent on this stream
    /// or a status no receiver sends stops the copy.
    fn read(&self, mut reader: TcpStream, mut opener: Option<Sealer>) -> io::Result<()> {
        let index = self.index;
        let mut b = [0u8; ACK_LEN + TAG_LEN];
        // a failed reader stops its connection at once (the writer too):
        // the blocks it holds go back to the queue for the others
        let fail = |e: io::Error, reader: &TcpStream| {
            self.broken.store(true, Ordering::SeqCst);
            let _ = reader.shutdown(std::net::Shutdown::Both);
            e
        };
        loop {
            match read_frame(&mut reader, opener.as_mut(), &mut b, ACK_LEN) {
                Ok(()) => {}
                Err(_) if self.finished.load(Ordering::SeqCst) || self.ctl.cancel.load(Ordering::SeqCst) => {
                    return Ok(())
                }
                Err(e) => return Err(fail(e, &reader)),
            }
            let Some(a) = Ack::decode(b[..ACK_LEN].try_into().expect("an ack's length")) else {
                let why = "an acknowledgment with a status no receiver sends".to_string();
                self.queue.stop(format!("stream {index}: {why}"));
                return Err(fail(io::Error::new(io::ErrorKind::InvalidData, why), &reader));
            };
            let (lock_, cv) = self.flight;
            let mut f = lock(lock_);
            let Some(pos) = f.iter().position(|&(file, i, _)| file == a.file && i == a.index) else {
                // the other end is not speaking this protocol: nothing it says can be trusted
                let why = format!("an acknowledgment of a block not sent on it: {a:?}");
                self.queue.stop(format!("stream {index}: {why}"));
                drop(f);
                return Err(fail(io::Error::new(io::ErrorKind::InvalidData, why), &reader));
            };
            let (_, _, len) = f.remove(pos).expect("found");
            drop(f);
            match a.status {
                AckStatus::Ok | AckStatus::Damaged => {
                    if self.queue.acked(index, (a.file, a.index), a.status == AckStatus::Ok) {
                        self.moved.fetch_add(len, Ordering::Relaxed);
                    }
                }
                // the writing end cannot write this file (its disk is full,
                // say): no more of it is sent, and its outcome says why
                AckStatus::Failed => self.queue.fail_file((a.file, a.index), WRITE_FAILED.into()),
            }
            cv.notify_all();
        }
    }
}
