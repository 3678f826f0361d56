//! The stream threads both ends run (`gridperf stream`): one thread per
//! stream, sending or receiving, a sampler reading every TCP socket's
//! TCP_INFO, and the live byte counters that the end's main thread cuts
//! into report intervals. The client drives them from `engines::stream`,
//! the agent from `agent::stream`.

use crate::host;
use gridperf_core::analysis::flow::{SeqTracker, TcpSample};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::{SocketInfo, StreamEnd, ZeroCopyFigures};
use gridperf_core::wire::udp::{decode_udp_header, encode_udp_header, UDP_HEADER_LEN};
use gridperf_core::wire::{StreamSpec, MAX_SAMPLES};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After the senders' time, a UDP receiver stops after this long without a datagram.
pub const UDP_QUIET_MS: u64 = 500;

/// One end's data socket of one stream.
pub enum Sock {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// A stream at one end: its index, whether this end sends on it, its socket.
pub struct Slot {
    pub index: u32,
    pub sending: bool,
    pub sock: Sock,
}

/// Sets what must be set before a TCP connection is made (buffers, for the
/// window scale) and what applies to it after (congestion control, pacing).
pub fn prepare_tcp(sock: &impl AsRawFd, spec: &StreamSpec, sending: Option<bool>) -> std::io::Result<()> {
    let (snd, rcv) = spec.buffers(sending);
    if let Some(w) = snd {
        gridperf_sys::set_sndbuf(sock, w as usize)?;
    }
    if let Some(w) = rcv {
        gridperf_sys::set_rcvbuf(sock, w as usize)?;
    }
    if let Some(cc) = &spec.congestion {
        gridperf_sys::set_tcp_congestion(sock, cc)?;
    }
    Ok(())
}

pub(crate) fn sample(info: &gridperf_sys::TcpInfo, t_ns: u64) -> TcpSample {
    TcpSample {
        t_ns,
        cwnd: info.snd_cwnd,
        ssthresh: info.snd_ssthresh,
        srtt_us: info.rtt_us,
        rttvar_us: info.rttvar_us,
        min_rtt_us: info.min_rtt,
        unacked: info.unacked,
        mss: info.snd_mss,
        total_retrans: info.total_retrans,
        data_segs_out: info.data_segs_out,
        bytes_acked: info.bytes_acked,
        bytes_received: info.bytes_received,
        delivery_rate: info.delivery_rate,
        pacing_rate: info.pacing_rate,
        busy_us: info.busy_time_us,
        rwnd_limited_us: info.rwnd_limited_us,
        sndbuf_limited_us: info.sndbuf_limited_us,
        snd_wnd: info.snd_wnd,
        app_limited: info.app_limited_and_fastopen & 1 == 1,
    }
}

/// What a stream thread shares while it runs: bytes moved so far.
type Live = Arc<AtomicU64>;

struct Timing {
    start: Instant,
    omit: Duration,
    /// When the senders stop (start + omit + duration).
    send_until: Instant,
    /// When a receiver stops waiting for the end of its stream.
    recv_until: Instant,
    /// Set when the test is abandoned (its client went away, the agent
    /// stops): every stream thread ends at its next turn.
    abort: AtomicBool,
}

fn ns_since(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

impl Timing {
    fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// Sleeps `d`, in slices, unless the test is abandoned meanwhile.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.aborted() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }

    /// Counts `n` bytes moved now on a stream: its first and last times,
    /// its total, what fell in --omit, and the live counter the intervals read.
    fn moved(&self, end: &mut StreamEnd, n: usize, live: &Live) {
        let now = ns_since(self.start);
        end.first_ns.get_or_insert(now);
        end.last_ns = Some(now);
        end.bytes += n as u64;
        if now < self.omit.as_nanos() as u64 {
            end.omitted_bytes += n as u64;
        }
        live.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Reads a socket's record (buffers granted, MSS, congestion control).
type InfoOf<'a> = &'a dyn Fn(i32, Proto) -> SocketInfo;

/// A TCP sender: writes until its time or its bytes are up, then closes its
/// side. A broken connection ends it with the bytes it moved.
fn send_tcp(
    mut s: TcpStream,
    spec: &StreamSpec,
    t: &Timing,
    live: &Live,
    memfd: Option<&OwnedFd>,
    info: InfoOf,
) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd { sending: true, ..StreamEnd::default() };
    let size = spec.write_size as usize;
    let buf: Vec<u8> = (0..size).map(gridperf_sys::pattern_byte).collect();
    let msg_zc = spec.zerocopy.as_deref() == Some("msg");
    let mut zc = ZeroCopyFigures::default();
    if msg_zc {
        if let Err(e) = gridperf_sys::set_zerocopy(&s) {
            end.broken = Some(format!("SO_ZEROCOPY: {e}"));
            return end;
        }
    }
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let budget = spec.bytes.unwrap_or(u64::MAX);
    let gap = spec.gap_us.map(Duration::from_micros);
    let mut file_off = 0u64;
    while end.bytes < budget && Instant::now() < t.send_until && !t.aborted() {
        let want = (budget - end.bytes).min(size as u64) as usize;
        let r = match (memfd, msg_zc) {
            (Some(f), _) => {
                let r = gridperf_sys::sendfile(&s, f, file_off, want);
                if let Ok(n) = r {
                    file_off = (file_off + n as u64) % spec.write_size.max(1);
                }
                r
            }
            (None, true) => {
                let r = gridperf_sys::send_zerocopy(&s, &buf[..want]);
                if r.is_ok() {
                    zc.sends += 1;
                }
                if let Ok((d, c)) = gridperf_sys::reap_zerocopy(&s) {
                    zc.completions += d;
                    zc.copied += c;
                }
                // the kernel's notification memory is full: reap and retry
                if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENOBUFS)) {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                r
            }
            (None, false) => s.write(&buf[..want]),
        };
        match r {
            Ok(0) => {
                end.broken = Some("the connection closed".into());
                break;
            }
            Ok(n) => {
                t.moved(&mut end, n, live);
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                end.broken = Some(format!("sending: {e}"));
                break;
            }
        }
        if let Some(g) = gap {
            t.sleep(g);
        }
    }
    if msg_zc {
        // the completions of the last sends trail them
        let until = Instant::now() + Duration::from_millis(500);
        while zc.completions < zc.sends && Instant::now() < until {
            if let Ok((d, c)) = gridperf_sys::reap_zerocopy(&s) {
                zc.completions += d;
                zc.copied += c;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        end.zerocopy = Some(zc);
    }
    let _ = s.shutdown(Shutdown::Write);
    // wait for the receiver to close: everything sent has then arrived, and
    // the last TCP_INFO sample covers the whole transfer
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 256];
    while Instant::now() < t.recv_until && !t.aborted() {
        match s.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    end.tcp_last = gridperf_sys::tcp_info(&s).ok().map(|(i, _)| sample(&i, ns_since(t.start)));
    end.socket = info(s.as_raw_fd(), Proto::Tcp);
    let cpu1 = gridperf_sys::thread_cpu_time_ns();
    end.cpu_ns = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    end
}

/// A TCP receiver: reads until the sender closes, or the time is up.
fn recv_tcp(mut s: TcpStream, t: &Timing, live: &Live, info: InfoOf, break_after: Option<u64>) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd::default();
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    // 128 KiB reads: a 1 MiB buffer, past the L2 cache, made every copy
    // from the socket cost twice as much per byte (0.44 against 0.19 ns/B)
    let mut buf = vec![0u8; 128 << 10];
    let mut closed = false;
    while Instant::now() < t.recv_until && !t.aborted() {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => {
                t.moved(&mut end, n, live);
                if break_after.is_some_and(|b| end.bytes >= b) {
                    // the test seam: a reset (SO_LINGER 0, then close) as a crashed peer makes
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                    end.broken = Some("reset on purpose (test fault)".into());
                    end.socket = info(s.as_raw_fd(), Proto::Tcp);
                    return end;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                end.broken = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    if !closed && end.broken.is_none() {
        end.broken = Some("the sender did not finish its stream by the deadline".into());
    }
    end.tcp_last = gridperf_sys::tcp_info(&s).ok().map(|(i, _)| sample(&i, ns_since(t.start)));
    end.socket = info(s.as_raw_fd(), Proto::Tcp);
    let _ = s.shutdown(Shutdown::Both);
    let cpu1 = gridperf_sys::thread_cpu_time_ns();
    end.cpu_ns = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    end
}

/// A UDP sender at the spec's rate: it sleeps between bursts of what fell
/// due and never catches up more than 5 ms at once (a sender that was not
/// running longer than that has lost the time, as a paced sender would).
/// What fell due goes in one send where the kernel takes UDP segmentation
/// offload (UDP_SEGMENT): up to [`GSO_RUN`] datagrams, each with its own
/// header, cut by the kernel (or, through the lab's TUN device, by the
/// emulator only where a datagram is lost). One send per datagram tops out
/// near 1.7 Gbit/s of 1500-byte datagrams on one CPU; the receiver sees the
/// same datagrams either way.
fn send_udp(s: UdpSocket, index: u32, spec: &StreamSpec, t: &Timing, live: &Live, info: InfoOf) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd { sending: true, ..StreamEnd::default() };
    let size = spec.write_size as usize;
    let mut run = if size >= UDP_HEADER_LEN && gridperf_sys::set_udp_segment(&s, size as u16).is_ok() {
        (GSO_BYTES / size).clamp(1, GSO_RUN)
    } else {
        1
    };
    let mut buf: Vec<u8> = (0..size * run).map(|i| gridperf_sys::pattern_byte(i % size)).collect();
    let rate = spec.udp_rate_bps.unwrap_or(1) as f64;
    // the rate counts the datagram's IP and UDP headers (28 bytes), as a link does
    let per_datagram_s = ((size + 28) * 8) as f64 / rate;
    let most = (0.005 / per_datagram_s).ceil() as u64;
    let budget = spec.bytes.unwrap_or(u64::MAX);
    let (mut seq, mut n) = (0u64, 0u64);
    let _ = gridperf_sys::set_timer_slack_ns(1);
    let go = Instant::now();
    'run: while end.bytes < budget && Instant::now() < t.send_until && !t.aborted() {
        let due = (go.elapsed().as_secs_f64() / per_datagram_s) as u64;
        n = n.max(due.saturating_sub(most));
        while n < due {
            let left = budget.saturating_sub(end.bytes).div_ceil(size as u64).max(1);
            let k = (due - n).min(run as u64).min(left) as usize;
            n += k as u64;
            let now = gridperf_sys::monotonic_ns();
            for j in 0..k {
                encode_udp_header(&mut buf[j * size..], index, seq + j as u64, now);
            }
            match s.send(&buf[..k * size]) {
                Ok(_) => {
                    seq += k as u64;
                    t.moved(&mut end, k * size, live);
                    if end.bytes >= budget {
                        break 'run;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    end.broken = Some("the receiver's port is closed (ICMP port unreachable)".into());
                    break 'run;
                }
                // a path that will not take the super-datagram: one datagram a send from here on
                Err(e) if k > 1 && matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::EINVAL | libc::EIO)) => {
                    let _ = gridperf_sys::set_udp_segment(&s, 0);
                    run = 1;
                    buf.truncate(size);
                    n -= k as u64;
                }
                Err(_) => end.send_errors += k as u64,
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    end.datagrams = Some(seq);
    end.socket = info(s.as_raw_fd(), Proto::Udp);
    let cpu1 = gridperf_sys::thread_cpu_time_ns();
    end.cpu_ns = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    end
}

/// The most datagrams in one segmented send, and its most bytes (the
/// kernel's limits: 64 segments, one IP datagram's 64 KiB).
const GSO_RUN: usize = 64;
const GSO_BYTES: usize = 65_000;

/// A UDP receiver: counts datagrams by sequence number until the time is up.
fn recv_udp(s: UdpSocket, index: u32, transit: bool, t: &Timing, live: &Live, info: InfoOf) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd::default();
    let mut seqs = if transit { SeqTracker::with_transit() } else { SeqTracker::new() };
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 65_536];
    let mut last_seen = Instant::now();
    // UDP has no end marker: once the senders' time is up, a receiver stops
    // after a quiet spell (or at the linger deadline)
    while Instant::now() < t.recv_until
        && !t.aborted()
        && !(Instant::now() > t.send_until && last_seen.elapsed() > Duration::from_millis(UDP_QUIET_MS))
    {
        match s.recv(&mut buf) {
            Ok(n) => {
                let Some((stream, seq, sent)) = decode_udp_header(&buf[..n]) else {
                    continue;
                };
                if stream != index {
                    continue;
                }
                last_seen = Instant::now();
                t.moved(&mut end, n, live);
                seqs.record(seq, n as u64, sent, gridperf_sys::monotonic_ns());
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // an ICMP error from an earlier send on this socket: not ours to count
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(e) => {
                end.broken = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    end.udp = Some(seqs.stats);
    end.socket = info(s.as_raw_fd(), Proto::Udp);
    let cpu1 = gridperf_sys::thread_cpu_time_ns();
    end.cpu_ns = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    end
}

/// Each TCP stream's TCP_INFO samples, by stream index.
pub type Timelines = Vec<(u32, Vec<TcpSample>)>;

/// One end's running streams.
pub struct Running {
    timing: Arc<Timing>,
    threads: Vec<(u32, bool, JoinHandle<StreamEnd>)>,
    pub live: Vec<(u32, bool, Live)>,
    sampler: Option<(Arc<AtomicBool>, JoinHandle<Timelines>)>,
    /// Bytes per interval per stream, as cut so far.
    cut: Vec<Vec<u64>>,
    last: Vec<u64>,
    pub start: Instant,
    /// CLOCK_MONOTONIC at `start`, ns (each end's `start_mono_ns`).
    start_mono: u64,
    pub interval: Duration,
    next_cut: Instant,
}

/// Starts one thread per stream, and the TCP_INFO sampler.
pub fn launch(
    slots: Vec<Slot>,
    spec: &StreamSpec,
    omit: Duration,
    ipv6: bool,
    break_after: Option<u64>,
    cpu: Option<usize>,
) -> std::io::Result<Running> {
    let start = Instant::now();
    let start_mono = gridperf_sys::monotonic_ns();
    let send_until = start + omit + Duration::from_millis(spec.duration_ms);
    let t = Arc::new(Timing {
        start,
        omit,
        send_until,
        recv_until: send_until + Duration::from_millis(spec.linger_ms.saturating_add(spec.paced_drain_ms())),
        abort: AtomicBool::new(false),
    });
    let memfd = if spec.zerocopy.as_deref() == Some("sendfile") {
        Some(Arc::new(gridperf_sys::memfd_pattern(spec.write_size as usize)?))
    } else {
        None
    };
    let mut tcp_clones = Vec::new();
    for s in &slots {
        if let Sock::Tcp(t) = &s.sock {
            tcp_clones.push((s.index, t.try_clone()?));
        }
        if let (Sock::Tcp(t), true, Some(p)) = (&s.sock, s.sending, spec.pacing_bps) {
            gridperf_sys::set_max_pacing_rate(t, p / 8)?;
            // what waits unsent is bounded: the stream ends with its time, not half a minute later
            if let Some(lowat) = spec.paced_unsent_bytes() {
                gridperf_sys::set_notsent_lowat(t, lowat.min(u64::from(u32::MAX)) as u32)?;
            }
        }
    }
    let mut threads = Vec::new();
    let mut live = Vec::new();
    for s in slots {
        let counter: Live = Arc::default();
        live.push((s.index, s.sending, counter.clone()));
        let (t, spec, memfd) = (t.clone(), spec.clone(), memfd.clone());
        let (index, sending) = (s.index, s.sending);
        let h = std::thread::Builder::new().name(format!("gridperf-stream-{index}")).spawn(move || {
            if let Some(c) = cpu {
                // placement was checked when the test was asked for; a CPU gone since is the scheduler's
                let _ = gridperf_sys::set_thread_affinity(&[c]);
            }
            // what the kernel gave the socket, read as the stream ends (autotuning grows the buffers)
            let (snd, rcv) = spec.buffers(Some(sending));
            let info = |fd: i32, proto| host::socket_info(&super::RawFdRef(fd), proto, ipv6, snd, rcv);
            let mut end = match (s.sock, sending) {
                (Sock::Tcp(sock), true) => send_tcp(sock, &spec, &t, &counter, memfd.as_deref(), &info),
                (Sock::Tcp(sock), false) => recv_tcp(sock, &t, &counter, &info, break_after.filter(|_| index == 0)),
                (Sock::Udp(sock), true) => send_udp(sock, index, &spec, &t, &counter, &info),
                (Sock::Udp(sock), false) => recv_udp(sock, index, spec.transit, &t, &counter, &info),
            };
            end.index = index;
            end
        })?;
        threads.push((index, sending, h));
    }
    let sampler = if tcp_clones.is_empty() {
        None
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let every = Duration::from_millis(spec.sample_ms);
        let h = std::thread::Builder::new().name("gridperf-tcp-info".into()).spawn(move || {
            let mut out: Vec<(u32, Vec<TcpSample>)> = tcp_clones.iter().map(|(i, _)| (*i, Vec::new())).collect();
            let mut next = start;
            while !stop2.load(Ordering::Relaxed) {
                let t_ns = ns_since(start);
                for ((_, sock), (_, v)) in tcp_clones.iter().zip(out.iter_mut()) {
                    if v.len() < MAX_SAMPLES {
                        if let Ok((info, _)) = gridperf_sys::tcp_info(sock) {
                            v.push(sample(&info, t_ns));
                        }
                    }
                }
                next += every;
                let now = Instant::now();
                if next > now {
                    // in slices: a stop is seen within 50 ms, whatever the period
                    while !stop2.load(Ordering::Relaxed) && Instant::now() < next {
                        std::thread::sleep(
                            next.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)),
                        );
                    }
                } else {
                    next = now;
                }
            }
            out
        })?;
        Some((stop, h))
    };
    let interval = Duration::from_millis(spec.interval_ms);
    let n = live.len();
    Ok(Running {
        timing: t,
        threads,
        live,
        sampler,
        cut: vec![Vec::new(); n],
        last: vec![0; n],
        start,
        start_mono,
        interval,
        next_cut: start + interval,
    })
}

/// A test abandoned before [`Running::finish`] (its client went away, the
/// agent stops, an error) still ends every thread it started: the streams
/// stop at their next turn and are joined, and so is the sampler, with the
/// socket clones it holds.
impl Drop for Running {
    fn drop(&mut self) {
        self.timing.abort.store(true, Ordering::Relaxed);
        for (_, _, h) in self.threads.drain(..) {
            let _ = h.join();
        }
        if let Some((stop, h)) = self.sampler.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }
}

impl Running {
    /// Whether every stream thread has ended.
    pub fn done(&self) -> bool {
        self.threads.iter().all(|(_, _, h)| h.is_finished())
    }

    /// Cuts every interval that has ended; returns (ms since start, bytes per
    /// stream in launch order) for each.
    pub fn cut(&mut self) -> Vec<(u64, Vec<u64>)> {
        let mut out = Vec::new();
        while Instant::now() >= self.next_cut {
            out.push(self.cut_now(self.next_cut));
            self.next_cut += self.interval;
        }
        out
    }

    fn cut_now(&mut self, at: Instant) -> (u64, Vec<u64>) {
        let mut row = Vec::with_capacity(self.live.len());
        for (k, (_, _, c)) in self.live.iter().enumerate() {
            let now = c.load(Ordering::Relaxed);
            let d = now - self.last[k];
            self.last[k] = now;
            self.cut[k].push(d);
            row.push(d);
        }
        ((at - self.start).as_millis() as u64, row)
    }

    /// How long until the next interval ends.
    pub fn until_next_cut(&self) -> Duration {
        self.next_cut.saturating_duration_since(Instant::now())
    }

    /// Waits for the stream threads, cuts the last (partial) interval, stops
    /// the sampler; returns each stream's figures and TCP_INFO timeline.
    pub fn finish(mut self) -> (Vec<StreamEnd>, Vec<(u32, Vec<TcpSample>)>) {
        let mut ends = Vec::new();
        let threads = std::mem::take(&mut self.threads);
        for (index, sending, h) in threads {
            ends.push(h.join().unwrap_or_else(|_| StreamEnd {
                index,
                sending,
                broken: Some("the stream's thread panicked".into()),
                ..StreamEnd::default()
            }));
        }
        // the rest after the last whole interval: an interval of its own,
        // with the time it lasted (its rate is not a whole interval's)
        let mut partial = None;
        if self.live.iter().enumerate().any(|(k, (_, _, c))| c.load(Ordering::Relaxed) > self.last[k]) {
            let now = Instant::now();
            let began = self.next_cut.checked_sub(self.interval).unwrap_or(self.start);
            self.cut_now(now);
            partial = Some(now.saturating_duration_since(began).as_nanos() as u64).filter(|&ns| ns > 0);
        }
        let samples = match self.sampler.take() {
            Some((stop, h)) => {
                stop.store(true, Ordering::Relaxed);
                h.join().unwrap_or_default()
            }
            None => Vec::new(),
        };
        for (k, e) in ends.iter_mut().enumerate() {
            e.intervals = std::mem::take(&mut self.cut[k]);
            e.last_interval_ns = partial.filter(|&ns| ns < self.interval.as_nanos() as u64);
            e.start_mono_ns = Some(self.start_mono);
        }
        (ends, samples)
    }
}
