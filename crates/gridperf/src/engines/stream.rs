//! `gridperf stream`: bulk throughput with parallel streams, socket buffers,
//! congestion control, pacing and zero-copy, and why a stream is slow.
//!
//! Both ends run the same pieces: one thread per stream (sending or
//! receiving), a sampler thread reading every TCP socket's TCP_INFO, and the
//! end's main thread cutting the live byte counters into report intervals.
//! The client drives the test over the control channel (Request, then
//! StreamGo); the agent sends its receivers' intervals as they pass, then
//! its TCP_INFO timelines and its figures (StreamSamples, StreamDone).

use super::Target;
use crate::agent::LocalAgent;
use crate::env;
use crate::error::{Error, Result};
use crate::runner::{self, Deadlines, Session};
use gridperf_core::flow::{self, SeqTracker, TcpSample, VerdictContext};
use gridperf_core::model::{
    Environment, SocketInfo, StreamEnd, StreamReport, StreamResult, StreamRun, ZeroCopyFigures,
};
use gridperf_core::plan::Proto;
use gridperf_core::stats::Warning;
use gridperf_core::wire::{AgentMsg, Direction, StreamSpec, TestRequest};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Streams per direction an agent runs at most.
pub const MAX_STREAMS: u32 = 128;
/// The largest write (TCP) the agent accepts; UDP datagrams are at most 65507 bytes.
pub const MAX_WRITE: u64 = 16 << 20;
/// The longest test, and the shortest sampling interval.
pub const MAX_DURATION_MS: u64 = 3_600_000;
pub const MIN_SAMPLE_MS: u64 = 10;
/// TCP_INFO samples kept per stream (10 ms for an hour would be 360 000).
pub const MAX_SAMPLES: usize = 100_000;
/// After the senders' time, a UDP receiver stops after this long without a datagram.
pub const UDP_QUIET_MS: u64 = 500;
/// The first byte on every TCP data connection after the token: a stream.
pub const HELLO_STREAM: u8 = 3;

/// Checks a stream spec (the agent checks what a client sends; the CLI
/// checks what a user types, with the same rules).
pub fn validate(spec: &StreamSpec) -> std::result::Result<Proto, String> {
    let proto = match spec.proto.as_str() {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        other => return Err(format!("stream protocol {other:?}: give tcp or udp")),
    };
    if spec.streams == 0 || spec.streams > MAX_STREAMS {
        return Err(format!("{} streams: this agent runs 1 to {MAX_STREAMS} per direction", spec.streams));
    }
    if spec.duration_ms == 0 || spec.duration_ms + spec.omit_ms > MAX_DURATION_MS {
        return Err(format!(
            "a test of {} ms (and {} ms omitted): give 1 ms to 1 hour in all",
            spec.duration_ms, spec.omit_ms
        ));
    }
    let max_write = if proto == Proto::Udp { Proto::Udp.max_message() } else { MAX_WRITE };
    let min_write = if proto == Proto::Udp { flow::UDP_HEADER_LEN as u64 } else { 1 };
    if spec.write_size < min_write || spec.write_size > max_write {
        return Err(format!("writes of {} bytes: {proto} takes {min_write} to {max_write}", spec.write_size));
    }
    if spec.pacing_bps == Some(0) {
        return Err("a pacing rate of 0 would send nothing: give a rate above 0, or leave pacing off".into());
    }
    if proto == Proto::Udp && spec.udp_rate_bps.unwrap_or(0) == 0 {
        return Err("a UDP stream needs a rate above 0 (-b)".into());
    }
    if spec.bytes == Some(0) {
        return Err("-n 0 bytes would send nothing".into());
    }
    if spec.window.is_some_and(|w| w == 0 || w > 1 << 30) {
        return Err("a window (-w) of 1 byte to 1 GiB".into());
    }
    for (what, b) in [("send buffer", spec.send_buffer), ("receive buffer", spec.recv_buffer)] {
        if b.is_some_and(|w| w == 0 || w > 1 << 30) {
            return Err(format!("a {what} of 1 byte to 1 GiB"));
        }
        if b.is_some() && (spec.window.is_some() || spec.direction == Direction::Both) {
            return Err(format!("a {what} of its own is for one direction, without a window (-w) for both"));
        }
        if b.is_some() && proto != Proto::Tcp {
            return Err(format!("a {what} of its own is for TCP streams"));
        }
    }
    if spec.sample_ms < MIN_SAMPLE_MS || spec.interval_ms < MIN_SAMPLE_MS {
        return Err(format!("sampling and report intervals of at least {MIN_SAMPLE_MS} ms"));
    }
    if let Some(z) = &spec.zerocopy {
        if z != "sendfile" && z != "msg" {
            return Err(format!("zero-copy {z:?}: give sendfile or msg"));
        }
        if proto == Proto::Udp {
            return Err("zero-copy sending is for TCP streams".into());
        }
    }
    if let Some(cc) = &spec.congestion {
        let have = env::congestion_available();
        if !have.iter().any(|c| c == cc) {
            return Err(format!(
                "congestion control {cc:?} is not available here; this kernel offers {}",
                have.join(", ")
            ));
        }
    }
    Ok(proto)
}

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

/// The SO_SNDBUF and SO_RCVBUF a socket asks for: -w on both, or the send
/// buffer on a sending socket and the receive buffer on a receiving one
/// (`sending` None: a listener for both roles).
pub fn buffers(spec: &StreamSpec, sending: Option<bool>) -> (Option<u64>, Option<u64>) {
    match spec.window {
        Some(w) => (Some(w), Some(w)),
        None => {
            (spec.send_buffer.filter(|_| sending != Some(false)), spec.recv_buffer.filter(|_| sending != Some(true)))
        }
    }
}

/// Sets what must be set before a TCP connection is made (buffers, for the
/// window scale) and what applies to it after (congestion control, pacing).
pub fn prepare_tcp(sock: &impl AsRawFd, spec: &StreamSpec, sending: Option<bool>) -> std::io::Result<()> {
    let (snd, rcv) = buffers(spec, sending);
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

fn sample(info: &gridperf_sys::TcpInfo, t_ns: u64) -> TcpSample {
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
}

fn ns_since(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

impl Timing {
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

/// A TCP sender: writes until its time or its bytes are up, then closes its
/// side. A broken connection ends it with the bytes it moved.
/// Reads a socket's record (buffers granted, MSS, congestion control).
type InfoOf<'a> = &'a dyn Fn(i32, Proto) -> SocketInfo;

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
    while end.bytes < budget && Instant::now() < t.send_until {
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
            std::thread::sleep(g);
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
    while Instant::now() < t.recv_until {
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
    while Instant::now() < t.recv_until {
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
fn send_udp(s: UdpSocket, index: u32, spec: &StreamSpec, t: &Timing, live: &Live, info: InfoOf) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd { sending: true, ..StreamEnd::default() };
    let size = spec.write_size as usize;
    let mut buf: Vec<u8> = (0..size).map(gridperf_sys::pattern_byte).collect();
    let rate = spec.udp_rate_bps.unwrap_or(1) as f64;
    // the rate counts the datagram's IP and UDP headers (28 bytes), as a link does
    let per_datagram_s = ((size + 28) * 8) as f64 / rate;
    let most = (0.005 / per_datagram_s).ceil() as u64;
    let budget = spec.bytes.unwrap_or(u64::MAX);
    let (mut seq, mut n) = (0u64, 0u64);
    let _ = gridperf_sys::set_timer_slack_ns(1);
    let go = Instant::now();
    'run: while end.bytes < budget && Instant::now() < t.send_until {
        let due = (go.elapsed().as_secs_f64() / per_datagram_s) as u64;
        n = n.max(due.saturating_sub(most));
        while n < due {
            n += 1;
            flow::encode_udp_header(&mut buf, index, seq, gridperf_sys::monotonic_ns());
            match s.send(&buf) {
                Ok(k) => {
                    seq += 1;
                    t.moved(&mut end, k, live);
                    if end.bytes >= budget {
                        break 'run;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    end.broken = Some("the receiver's port is closed (ICMP port unreachable)".into());
                    break 'run;
                }
                Err(_) => end.send_errors += 1,
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

/// A UDP receiver: counts datagrams by sequence number until the time is up.
fn recv_udp(s: UdpSocket, index: u32, t: &Timing, live: &Live, info: InfoOf) -> StreamEnd {
    let cpu0 = gridperf_sys::thread_cpu_time_ns();
    let mut end = StreamEnd::default();
    let mut seqs = SeqTracker::new();
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 65_536];
    let mut last_seen = Instant::now();
    // UDP has no end marker: once the senders' time is up, a receiver stops
    // after a quiet spell (or at the linger deadline)
    while Instant::now() < t.recv_until
        && !(Instant::now() > t.send_until && last_seen.elapsed() > Duration::from_millis(UDP_QUIET_MS))
    {
        match s.recv(&mut buf) {
            Ok(n) => {
                let Some((stream, seq, sent)) = flow::decode_udp_header(&buf[..n]) else { continue };
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
    threads: Vec<(u32, bool, JoinHandle<StreamEnd>)>,
    pub live: Vec<(u32, bool, Live)>,
    sampler: Option<(Arc<AtomicBool>, JoinHandle<Timelines>)>,
    /// Bytes per interval per stream, as cut so far.
    cut: Vec<Vec<u64>>,
    last: Vec<u64>,
    pub start: Instant,
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
) -> std::io::Result<Running> {
    let start = Instant::now();
    let send_until = start + omit + Duration::from_millis(spec.duration_ms);
    let t =
        Arc::new(Timing { start, omit, send_until, recv_until: send_until + Duration::from_millis(spec.linger_ms) });
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
            // what the kernel gave the socket, read as the stream ends (autotuning grows the buffers)
            let (snd, rcv) = buffers(&spec, Some(sending));
            let info = |fd: i32, proto| env::socket_info(&super::echo::RawFdRef(fd), proto, ipv6, snd, rcv);
            let mut end = match (s.sock, sending) {
                (Sock::Tcp(sock), true) => send_tcp(sock, &spec, &t, &counter, memfd.as_deref(), &info),
                (Sock::Tcp(sock), false) => recv_tcp(sock, &t, &counter, &info, break_after.filter(|_| index == 0)),
                (Sock::Udp(sock), true) => send_udp(sock, index, &spec, &t, &counter, &info),
                (Sock::Udp(sock), false) => recv_udp(sock, index, &t, &counter, &info),
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
                    std::thread::sleep(next - now);
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
        threads,
        live,
        sampler,
        cut: vec![Vec::new(); n],
        last: vec![0; n],
        start,
        interval,
        next_cut: start + interval,
    })
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
        // the rest after the last whole interval
        if self.live.iter().enumerate().any(|(k, (_, _, c))| c.load(Ordering::Relaxed) > self.last[k]) {
            self.cut_now(Instant::now());
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
        }
        (ends, samples)
    }
}

/// The stream indices and who sends on each, for a spec: streams 0..P go
/// the spec's way (up or down); with Both, P..2P go down.
pub fn layout(spec: &StreamSpec) -> Vec<(u32, bool)> {
    let p = spec.streams;
    match spec.direction {
        Direction::Up => (0..p).map(|i| (i, true)).collect(),
        Direction::Down => (0..p).map(|i| (i, false)).collect(),
        Direction::Both => (0..p).map(|i| (i, true)).chain((p..2 * p).map(|i| (i, false))).collect(),
    }
}

/// The client's settings for `gridperf stream`.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub spec: StreamSpec,
    pub omit: Duration,
    pub repeat: u32,
    pub deadlines: Deadlines,
    /// The path's rate for the verdict, if known (--expect, or the lab's).
    pub path_rate_bps: Option<u64>,
    pub notes: Vec<String>,
}

/// What the client sees while a run goes: (run, ms since start, receiver
/// bytes per stream in the interval, stream indices).
pub type OnInterval<'a> = dyn FnMut(u32, u64, &[(u32, u64)]) + 'a;

/// Runs the test `repeat` times.
pub fn run(target: &Target, opts: &StreamOptions, on_interval: &mut OnInterval) -> Result<StreamReport> {
    let mut runs = Vec::new();
    for r in 0..opts.repeat {
        runs.push(run_once(target, opts, r, on_interval)?);
    }
    let totals: Vec<f64> = runs.iter().map(|r| r.up_bps.unwrap_or(0.0) + r.down_bps.unwrap_or(0.0)).collect();
    let mut sorted = totals.clone();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    };
    let best = sorted.last().copied();
    let spread = match (sorted.first(), sorted.last(), median) {
        (Some(lo), Some(hi), Some(m)) if m > 0.0 && sorted.len() > 1 => Some((hi - lo) / m),
        _ => None,
    };
    let mut warnings = Vec::new();
    for r in &runs {
        if let Some(why) = r.env.lab.as_ref().and_then(|l| l.invalid.clone()) {
            warnings.push(Warning::LabInvalid { why });
        }
    }
    let notes = buffer_notes(&opts.spec, runs.first());
    Ok(StreamReport {
        schema: gridperf_core::model::STREAM_SCHEMA.into(),
        spec: opts.spec.clone(),
        omit_ns: opts.omit.as_nanos() as u64,
        runs,
        totals_bps: totals,
        median_bps: median,
        best_bps: best,
        spread,
        warnings,
        notes: [opts.notes.clone(), notes].concat(),
    })
}

/// What the kernel made of -w: Linux doubles a requested buffer (half of it
/// for its own bookkeeping) and caps it at net.core.wmem_max / rmem_max.
fn buffer_notes(spec: &StreamSpec, run: Option<&StreamRun>) -> Vec<String> {
    let (Some(w), Some(run)) = (spec.window, run) else { return Vec::new() };
    let mut out = Vec::new();
    let ends = [("client", &run.env.client), ("agent", run.env.server.as_ref().unwrap_or(&run.env.client))];
    for s in run.streams.iter().take(1) {
        for (who, end, info) in [("sender", &s.sender, 0), ("receiver", &s.receiver, 1)] {
            let _ = info;
            let (granted, cap_name) = if who == "sender" {
                (end.socket.sndbuf_granted, "net.core.wmem_max")
            } else {
                (end.socket.rcvbuf_granted, "net.core.rmem_max")
            };
            let Some(g) = granted else { continue };
            if g < 2 * w {
                let at = if (s.direction == "up") == (who == "sender") { ends[0] } else { ends[1] };
                let cap = at.1.sysctls.get(cap_name).cloned().unwrap_or_else(|| "?".into());
                out.push(format!(
                    "-w {w}: the {who} ({}) was granted {g} bytes, not the {} Linux gives for it: capped by {cap_name} = {cap} (the kernel doubles the request up to twice that cap); raise {cap_name} to allow more",
                    at.0,
                    2 * w
                ));
            }
        }
    }
    out
}

fn connect_tcp(addr: SocketAddr, spec: &StreamSpec, sending: bool, within: Duration) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    prepare_tcp(&sock, spec, Some(sending))?;
    sock.connect_timeout(&addr.into(), within)?;
    let s: TcpStream = sock.into();
    s.set_nodelay(false)?;
    Ok(s)
}

fn run_once(target: &Target, opts: &StreamOptions, run_no: u32, on_interval: &mut OnInterval) -> Result<StreamRun> {
    let started = runner::unix_now();
    let spec = &opts.spec;
    let proto = validate(spec).map_err(Error::usage)?;
    let (addr, _local, label) = match target {
        Target::Remote(a) => (*a, None, a.to_string()),
        Target::Local { faults } => {
            let agent = LocalAgent::start(*faults)
                .map_err(|e| Error::internal(format!("cannot start the local agent: {e}")))?;
            (agent.addr, Some(agent), "local".to_string())
        }
    };
    let lab = std::env::var("GRIDPERF_LAB").ok().map(|name| {
        let before = crate::lab::health(&name);
        (name, before)
    });
    let mut session = Session::connect(addr, opts.deadlines)?;
    let req = TestRequest {
        kind: "stream".into(),
        protos: vec![proto.name().into()],
        max_size: spec.write_size,
        nodelay: false,
        busy_poll: false,
        cpu: None,
        sndbuf: spec.window,
        rcvbuf: spec.window,
        udp_port: None,
        timeout_ms: opts.deadlines.message.as_millis() as u64,
        queue_ms: 0,
        stream: Some(spec.clone()),
        fanout: None,
    };
    let (tcp_port, udp_ports, token, agent_info) = session.request_stream(req)?;
    let local_ip: IpAddr = session.local_ip()?;
    let layout = layout(spec);
    let mut slots = Vec::new();
    for &(index, up) in &layout {
        let sock = match proto {
            Proto::Udp => {
                let port = *udp_ports
                    .get(index as usize)
                    .ok_or_else(|| Error::network(format!("the agent opened no UDP port for stream {index}")))?;
                let s = UdpSocket::bind((local_ip, 0)).map_err(|e| Error::network(format!("UDP socket: {e}")))?;
                if let Some(w) = spec.window {
                    let _ = gridperf_sys::set_sndbuf(&s, w as usize);
                    let _ = gridperf_sys::set_rcvbuf(&s, w as usize);
                } else {
                    // a receiver at a gigabit needs more than the default 208 KiB
                    let _ = gridperf_sys::set_rcvbuf(&s, 4 << 20);
                }
                s.connect(SocketAddr::new(addr.ip(), port)).map_err(|e| Error::network(format!("UDP connect: {e}")))?;
                // the agent learns this socket's address from its hello
                let mut hello = token.to_be_bytes().to_vec();
                hello.extend_from_slice(&index.to_be_bytes());
                for _ in 0..3 {
                    let _ = s.send(&hello);
                }
                Sock::Udp(s)
            }
            _ => {
                let port = tcp_port.ok_or_else(|| Error::network("the agent opened no TCP data port"))?;
                let a = SocketAddr::new(addr.ip(), port);
                let mut s = connect_tcp(a, spec, up, opts.deadlines.connect)
                    .map_err(|e| Error::network(format!("data connection {index} to {a}: {e}")))?;
                let mut hello = token.to_be_bytes().to_vec();
                hello.push(HELLO_STREAM);
                hello.extend_from_slice(&index.to_be_bytes());
                s.write_all(&hello).map_err(|e| Error::network(format!("data connection {index}: {e}")))?;
                Sock::Tcp(s)
            }
        };
        slots.push(Slot { index, sending: up, sock });
    }
    // the agent says when its side is ready (every UDP hello arrived, every
    // connection accepted): only then does the clock start at both ends
    match session.next(opts.deadlines.control)? {
        AgentMsg::StepReady => {}
        other => return Err(Error::network(format!("expected the agent's step-ready, got {other:?}"))),
    }
    session.go()?;
    let running = launch(slots, spec, opts.omit, addr.is_ipv6(), None)
        .map_err(|e| Error::internal(format!("starting the streams: {e}")))?;
    let mut running = running;
    let mut agent_rows: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut agent_samples: Vec<(u32, Vec<TcpSample>)> = Vec::new();
    let hard = Duration::from_millis(spec.duration_ms + spec.linger_ms) + opts.omit + opts.deadlines.control * 2;
    let deadline = Instant::now() + hard;
    let mut agent_ends: Option<Vec<StreamEnd>> = None;
    let receiving_here: Vec<u32> = layout.iter().filter(|(_, up)| !up).map(|(i, _)| *i).collect();
    // until both ends are done: the client's own intervals are cut here, the
    // agent's arrive over the control channel
    while agent_ends.is_none() || !running.done() {
        for (t_ms, row) in running.cut() {
            let shown: Vec<(u32, u64)> = running
                .live
                .iter()
                .zip(&row)
                .filter(|((i, _, _), _)| receiving_here.contains(i))
                .map(|((i, _, _), b)| (*i, *b))
                .collect();
            if !shown.is_empty() {
                on_interval(run_no, t_ms, &shown);
            }
        }
        if Instant::now() > deadline {
            session.abort("the test overran its deadline");
            return Err(Error::network(format!(
                "the stream test did not end within {:.0} s (its time, the linger and two control deadlines)",
                hard.as_secs_f64()
            )));
        }
        if agent_ends.is_some() {
            std::thread::sleep(running.until_next_cut().min(Duration::from_millis(20)));
            continue;
        }
        let wait = running.until_next_cut().clamp(Duration::from_millis(1), Duration::from_millis(100));
        if !session.agent_gone_within(wait) {
            continue;
        }
        match session.next(opts.deadlines.control)? {
            AgentMsg::StreamInterval { t_ms, bytes } => {
                let shown: Vec<(u32, u64)> =
                    layout.iter().zip(&bytes).filter(|((_, up), _)| *up).map(|((i, _), b)| (*i, *b)).collect();
                if !shown.is_empty() {
                    on_interval(run_no, t_ms, &shown);
                }
                agent_rows.push((t_ms, bytes));
            }
            AgentMsg::StreamSamples { index, samples } => match agent_samples.iter_mut().find(|(i, _)| *i == index) {
                Some((_, v)) => v.extend(samples),
                None => agent_samples.push((index, samples)),
            },
            AgentMsg::StreamDone { ends } => agent_ends = Some(ends),
            other => return Err(Error::network(format!("unexpected message from the agent mid-stream: {other:?}"))),
        }
    }
    let (client_ends, client_samples) = running.finish();
    let agent_ends = agent_ends.unwrap_or_default();
    let agent_final = session.finish()?;
    let mut env = Environment {
        tool_version: env::software(),
        command_line: std::env::args().collect(),
        started_unix: started,
        finished_unix: runner::unix_now(),
        target: label,
        client: env::end_info(None, false),
        server: Some(agent_final),
        notes: opts.notes.clone(),
        lab: None,
    };
    let _ = agent_info;
    if let Some((name, before)) = lab {
        env.lab = Some(super::lab_record(&name, before));
    }
    Ok(assemble(spec, opts, &layout, client_ends, client_samples, agent_ends, agent_samples, env))
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    spec: &StreamSpec,
    opts: &StreamOptions,
    layout: &[(u32, bool)],
    client_ends: Vec<StreamEnd>,
    client_samples: Vec<(u32, Vec<TcpSample>)>,
    agent_ends: Vec<StreamEnd>,
    agent_samples: Vec<(u32, Vec<TcpSample>)>,
    env: Environment,
) -> StreamRun {
    let omit_ns = opts.omit.as_nanos() as u64;
    let interval_s = spec.interval_ms as f64 / 1000.0;
    let tcp_max = |end: &gridperf_core::model::EndInfo, key: &str| -> Option<u64> {
        end.sysctls.get(key).and_then(|v| v.split_whitespace().nth(2)).and_then(|v| v.parse().ok())
    };
    let agent_env = env.server.clone().unwrap_or_default();
    let mut streams = Vec::new();
    for &(index, up) in layout {
        let find = |v: &[StreamEnd]| v.iter().find(|e| e.index == index).cloned().unwrap_or_default();
        let (c, a) = (find(&client_ends), find(&agent_ends));
        let (sender, receiver) = if up { (c, a) } else { (a, c) };
        let timeline = if up { &client_samples } else { &agent_samples }
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let counted = receiver.bytes.saturating_sub(receiver.omitted_bytes);
        let from = receiver.first_ns.unwrap_or(0).max(if omit_ns > 0 { omit_ns } else { 0 });
        let throughput_bps = match receiver.last_ns {
            Some(last) if last > from && counted > 0 => counted as f64 * 8.0 / ((last - from) as f64 / 1e9),
            _ => 0.0,
        };
        let (send_env, recv_env) = if up { (&env.client, &agent_env) } else { (&agent_env, &env.client) };
        let verdict = (spec.proto == "tcp" && timeline.len() >= 2).then(|| {
            flow::verdict(
                &timeline,
                &VerdictContext {
                    throughput_bps,
                    elapsed_ns: sender.last_ns.unwrap_or(0).saturating_sub(sender.first_ns.unwrap_or(0)),
                    path_rate_bps: opts.path_rate_bps,
                    rmem_max: tcp_max(recv_env, "net.ipv4.tcp_rmem"),
                    wmem_max: tcp_max(send_env, "net.ipv4.tcp_wmem"),
                    window_requested: spec.window,
                    core_rmem_max: recv_env.sysctls.get("net.core.rmem_max").and_then(|v| v.parse().ok()),
                    core_wmem_max: send_env.sysctls.get("net.core.wmem_max").and_then(|v| v.parse().ok()),
                },
            )
        });
        let retransmits = sender.tcp_last.map(|t| t.total_retrans);
        let broken = sender
            .broken
            .as_ref()
            .map(|b| format!("sender: {b}"))
            .or_else(|| receiver.broken.as_ref().map(|b| format!("receiver: {b}")));
        streams.push(StreamResult {
            index,
            direction: if up { "up" } else { "down" }.into(),
            interval_bps: receiver.intervals.iter().map(|&b| b as f64 * 8.0 / interval_s).collect(),
            sender,
            receiver,
            throughput_bps,
            retransmits,
            verdict,
            timeline,
            broken,
        });
    }
    let sum = |up: bool| -> Option<f64> {
        let v: Vec<f64> = streams.iter().filter(|s| (s.direction == "up") == up).map(|s| s.throughput_bps).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let rates: Vec<f64> = streams.iter().map(|s| s.throughput_bps).collect();
    let client_cpu_ns: u64 = client_ends.iter().map(|e| e.cpu_ns).sum();
    let agent_cpu_ns: u64 = agent_ends.iter().map(|e| e.cpu_ns).sum();
    let received: u64 = streams.iter().map(|s| s.receiver.bytes).sum();
    StreamRun {
        up_bps: sum(true),
        down_bps: sum(false),
        slowest_over_fastest: flow::slowest_over_fastest(&rates),
        jain: flow::jain(&rates),
        client_cpu_ns,
        agent_cpu_ns,
        cpu_ns_per_byte: (received > 0).then(|| (client_cpu_ns + agent_cpu_ns) as f64 / received as f64),
        streams,
        env,
    }
}

// ---------------------------------------------------------------- the agent's side

/// The agent's side of a stream test, after Ready: accept the client's data
/// connections (or UDP hellos), wait for StreamGo, run, report.
pub struct AgentSide<'a> {
    pub ctl: &'a mut TcpStream,
    pub spec: &'a StreamSpec,
    pub token: u64,
    pub peer_ip: IpAddr,
    pub listener: Option<std::net::TcpListener>,
    pub udp: Vec<UdpSocket>,
    pub control_timeout: Duration,
    pub stop: &'a AtomicBool,
    pub ipv6: bool,
    /// Test seam: stream 0's receiver resets its connection after this many bytes.
    pub break_after: Option<u64>,
}

impl AgentSide<'_> {
    /// Runs the test; Err is a reason to give the client.
    pub fn run(self) -> std::result::Result<Vec<SocketInfo>, String> {
        use gridperf_core::wire::{self, ClientMsg};
        let spec = self.spec;
        let layout = layout(spec);
        let deadline = Instant::now() + self.control_timeout;
        let mut slots: Vec<Slot> = Vec::new();
        if let Some(l) = &self.listener {
            while slots.len() < layout.len() {
                if Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
                    return Err(format!(
                        "the client opened {} of {} data connections within {:.0} s",
                        slots.len(),
                        layout.len(),
                        self.control_timeout.as_secs_f64()
                    ));
                }
                let ready = gridperf_sys::poll_readable(&[l.as_raw_fd()], 100).map_err(|e| e.to_string())?;
                if !ready[0] {
                    continue;
                }
                let Ok((mut s, from)) = l.accept() else { continue };
                if from.ip().to_canonical() != self.peer_ip {
                    continue;
                }
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut hello = [0u8; 13];
                if s.read_exact(&mut hello).is_err() {
                    continue;
                }
                let tok = u64::from_be_bytes(hello[..8].try_into().unwrap_or_default());
                let index = u32::from_be_bytes(hello[9..13].try_into().unwrap_or_default());
                if tok != self.token || hello[8] != HELLO_STREAM || slots.iter().any(|x| x.index == index) {
                    continue;
                }
                let Some(&(_, up)) = layout.iter().find(|(i, _)| *i == index) else { continue };
                if let Some(cc) = &spec.congestion {
                    gridperf_sys::set_tcp_congestion(&s, cc).map_err(|e| format!("TCP_CONGESTION {cc}: {e}"))?;
                }
                let _ = s.set_read_timeout(None);
                // the client's upward streams arrive here: the agent receives them
                slots.push(Slot { index, sending: !up, sock: Sock::Tcp(s) });
            }
        }
        for (k, u) in self.udp.into_iter().enumerate() {
            let index = k as u32;
            let _ = u.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = [0u8; 64];
            let from = loop {
                if Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
                    return Err(format!("no UDP hello from the client for stream {index} within the control deadline"));
                }
                match u.recv_from(&mut buf) {
                    Ok((12, from))
                        if from.ip().to_canonical() == self.peer_ip
                            && u64::from_be_bytes(buf[..8].try_into().unwrap_or_default()) == self.token
                            && u32::from_be_bytes(buf[8..12].try_into().unwrap_or_default()) == index =>
                    {
                        break from
                    }
                    _ => continue,
                }
            };
            u.connect(from).map_err(|e| format!("UDP connect: {e}"))?;
            let up = layout.iter().find(|(i, _)| *i == index).map(|x| x.1).unwrap_or(true);
            slots.push(Slot { index, sending: !up, sock: Sock::Udp(u) });
        }
        slots.sort_by_key(|s| s.index);
        wire::write_msg(self.ctl, &AgentMsg::StepReady).map_err(|e| e.to_string())?;
        match crate::ctl::read_msg_within::<ClientMsg>(self.ctl, self.control_timeout) {
            Ok(ClientMsg::StreamGo) => {}
            Ok(ClientMsg::Abort { reason }) => return Err(format!("client aborted: {reason}")),
            Ok(other) => return Err(format!("expected stream-go, got {other:?}")),
            Err(e) => return Err(format!("waiting for stream-go: {e}")),
        }
        let omit = Duration::from_millis(spec.omit_ms);
        let mut running = launch(slots, spec, omit, self.ipv6, self.break_after).map_err(|e| e.to_string())?;
        let hard = Duration::from_millis(spec.omit_ms + spec.duration_ms + spec.linger_ms) + self.control_timeout;
        let until = Instant::now() + hard;
        while !running.done() {
            if self.stop.load(Ordering::Relaxed) {
                return Err("the agent is shutting down".into());
            }
            if Instant::now() > until {
                return Err("the stream threads overran the test's deadline".into());
            }
            for (t_ms, bytes) in running.cut() {
                let shown: Vec<u64> =
                    bytes.iter().zip(&running.live).map(|(b, (_, s, _))| if *s { 0 } else { *b }).collect();
                wire::write_msg(self.ctl, &AgentMsg::StreamInterval { t_ms, bytes: shown })
                    .map_err(|e| e.to_string())?;
            }
            // a client that gives up says so, or hangs up
            if gridperf_sys::poll_readable(&[self.ctl.as_raw_fd()], 0).map(|r| r[0]).unwrap_or(false) {
                match crate::ctl::read_msg_within::<ClientMsg>(self.ctl, self.control_timeout) {
                    Ok(ClientMsg::Abort { reason }) => return Err(format!("client aborted: {reason}")),
                    Ok(other) => return Err(format!("unexpected {other:?} during the stream test")),
                    Err(e) => return Err(format!("the client went away during the stream test: {e}")),
                }
            }
            std::thread::sleep(running.until_next_cut().clamp(Duration::from_millis(1), Duration::from_millis(20)));
        }
        let (ends, samples) = running.finish();
        for (index, v) in samples {
            // frames are at most 1 MiB: a sample is about 400 bytes of JSON
            for chunk in v.chunks(2_000) {
                wire::write_msg(self.ctl, &AgentMsg::StreamSamples { index, samples: chunk.to_vec() })
                    .map_err(|e| e.to_string())?;
            }
        }
        let sockets = ends.iter().map(|e| e.socket.clone()).collect();
        wire::write_msg(self.ctl, &AgentMsg::StreamDone { ends }).map_err(|e| e.to_string())?;
        Ok(sockets)
    }
}

/// The agent's UDP sockets for a stream test: one per stream, bound to its address.
pub fn agent_udp(local: IpAddr, spec: &StreamSpec) -> std::io::Result<Vec<UdpSocket>> {
    let n = layout(spec).len();
    (0..n)
        .map(|_| {
            let s = UdpSocket::bind((local, 0))?;
            match spec.window {
                Some(w) => {
                    gridperf_sys::set_sndbuf(&s, w as usize)?;
                    gridperf_sys::set_rcvbuf(&s, w as usize)?;
                }
                None => {
                    let _ = gridperf_sys::set_rcvbuf(&s, 4 << 20);
                }
            }
            Ok(s)
        })
        .collect()
}

/// The agent's TCP listener for a stream test, with -w set on it so that the
/// accepted connections' window scale allows the window.
pub fn agent_listener(local: IpAddr, spec: &StreamSpec) -> std::io::Result<std::net::TcpListener> {
    let addr = SocketAddr::new(local, 0);
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    // the agent sends on a download and receives on an upload
    let sending = match spec.direction {
        Direction::Up => Some(false),
        Direction::Down => Some(true),
        Direction::Both => None,
    };
    let (snd, rcv) = buffers(spec, sending);
    if let Some(w) = snd {
        gridperf_sys::set_sndbuf(&sock, w as usize)?;
    }
    if let Some(w) = rcv {
        gridperf_sys::set_rcvbuf(&sock, w as usize)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(MAX_STREAMS as i32 * 2)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}
