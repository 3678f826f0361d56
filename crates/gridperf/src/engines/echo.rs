//! The data path shared by `rtt` and `transfer`: one message out, the same
//! number of bytes back, for TCP, UDP and sendfile, on both ends.
//!
//! The client times each exchange with the monotonic clock. The agent echoes
//! each message once it has all of it (a stream message is read in full
//! before the reply is written, as the first document's receiver did).
//!
//! Blocking mode sleeps in recv(2); busy-poll mode spins on non-blocking
//! recv(2) so that neither end pays for a wake-up.

use gridperf_core::model::StepFigures;
use gridperf_core::plan::Proto;
use gridperf_core::wire::ClientMsg;
use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the agent sleeps in one blocking receive before it looks at the
/// control channel (a step without an exchange count ends within this).
pub const AGENT_POLL_SLICE: Duration = Duration::from_millis(5);

/// One data socket of a test, on either end.
pub enum DataSock {
    Tcp(TcpStream),
    /// A TCP connection that transmits with sendfile(2) from a memory-backed
    /// file holding the payload pattern.
    Sendfile(TcpStream, OwnedFd),
    Udp(UdpSocket),
}

impl DataSock {
    pub fn proto(&self) -> Proto {
        match self {
            DataSock::Tcp(_) => Proto::Tcp,
            DataSock::Sendfile(..) => Proto::Sendfile,
            DataSock::Udp(_) => Proto::Udp,
        }
    }

    pub fn raw_fd(&self) -> i32 {
        match self {
            DataSock::Tcp(s) | DataSock::Sendfile(s, _) => s.as_raw_fd(),
            DataSock::Udp(s) => s.as_raw_fd(),
        }
    }

    /// Blocking with a receive timeout, or non-blocking for busy-polling.
    pub fn set_mode(&self, busy: bool, recv_timeout: Duration) -> io::Result<()> {
        match self {
            DataSock::Tcp(s) | DataSock::Sendfile(s, _) => {
                s.set_nonblocking(busy)?;
                s.set_read_timeout(Some(recv_timeout))?;
                s.set_write_timeout(Some(recv_timeout.max(Duration::from_secs(1))))
            }
            DataSock::Udp(s) => {
                s.set_nonblocking(busy)?;
                s.set_read_timeout(Some(recv_timeout))?;
                s.set_write_timeout(Some(recv_timeout.max(Duration::from_secs(1))))
            }
        }
    }
}

/// A borrowed raw descriptor, for reading socket options.
pub struct RawFdRef(pub i32);

impl AsRawFd for RawFdRef {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}

/// The payload pattern (byte i is i % 251, as in the sendfile file).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(gridperf_sys::pattern_byte).collect()
}

fn is_wait(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

/// Calls `op(offset)` until `len` bytes have moved or `deadline` passes.
/// `op` returns how many bytes it moved; 0 means the connection is done
/// (`zero` says why), a would-block or timeout is retried until the deadline.
fn move_all(
    len: usize,
    deadline: Instant,
    zero: (io::ErrorKind, &str),
    late: &str,
    mut op: impl FnMut(usize) -> io::Result<usize>,
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        match op(done) {
            Ok(0) => return Err(io::Error::new(zero.0, zero.1.to_string())),
            Ok(n) => {
                done += n;
                // a peer that trickles bytes must not stretch the deadline
                if done < len && Instant::now() >= deadline {
                    return Err(timed_out(late));
                }
            }
            Err(e) if is_wait(&e) => {
                if Instant::now() >= deadline {
                    return Err(timed_out(late));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_full(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let eof = (io::ErrorKind::UnexpectedEof, "the peer closed the data connection");
    move_all(buf.len(), deadline, eof, "no reply within the per-message timeout", |at| s.read(&mut buf[at..]))
}

/// Writes all of `buf` before `deadline`.
fn write_full(s: &mut TcpStream, buf: &[u8], deadline: Instant) -> io::Result<()> {
    let zero = (io::ErrorKind::WriteZero, "the data connection accepts no more bytes");
    move_all(buf.len(), deadline, zero, "could not send within the per-message timeout", |at| s.write(&buf[at..]))
}

/// Sends `len` bytes of the pattern file with sendfile(2) before `deadline`.
fn sendfile_full(s: &TcpStream, file: &OwnedFd, len: usize, deadline: Instant) -> io::Result<()> {
    let zero = (io::ErrorKind::WriteZero, "sendfile sent nothing");
    move_all(len, deadline, zero, "could not send within the per-message timeout", |at| {
        gridperf_sys::sendfile(s, file, at as u64, len - at)
    })
}

/// What one exchange came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The reply came back after this many nanoseconds.
    Rtt(u64),
    /// No reply within the timeout (UDP only; for TCP a timeout is an error).
    Lost,
}

/// The client's side of one data socket: sends a message, waits for the echo.
pub struct Pinger {
    pub sock: DataSock,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    /// UDP sequence number of the next message (continues across sizes, so a
    /// late reply from an earlier size is never taken for a current one).
    seq: u64,
    timeout: Duration,
    writes: u32,
    busy: bool,
    /// Replies that arrived after their message was counted as lost.
    pub late: u64,
    /// A message was lost since the socket was last drained: its reply may
    /// still be on the way, and is read (and counted late) before the next
    /// exchange starts its clock.
    stale: bool,
}

impl Pinger {
    /// A pinger on a socket already connected and set to its mode (see [`DataSock::set_mode`]).
    pub fn new(sock: DataSock, max_size: usize, timeout: Duration, writes: u32, busy: bool) -> Pinger {
        let alloc = if sock.proto() == Proto::Udp { max_size.max(65_536) } else { max_size };
        Pinger {
            sock,
            out: pattern(alloc),
            inbuf: vec![0; alloc],
            seq: 0,
            timeout,
            writes: writes.max(1),
            busy,
            late: 0,
            stale: false,
        }
    }

    /// One exchange of `size` bytes each way.
    pub fn exchange(&mut self, size: usize) -> io::Result<Outcome> {
        let timeout = self.timeout;
        match &mut self.sock {
            DataSock::Tcp(s) => {
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                if self.writes == 1 {
                    write_full(s, &self.out[..size], deadline)?;
                } else {
                    // the message in `writes` send calls, as an application that
                    // writes a header and a body would (this is where Nagle bites)
                    let piece = size.div_ceil(self.writes as usize).max(1);
                    for chunk in self.out[..size].chunks(piece) {
                        write_full(s, chunk, deadline)?;
                    }
                }
                read_full(s, &mut self.inbuf[..size], deadline)?;
                Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64))
            }
            DataSock::Sendfile(s, file) => {
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                sendfile_full(s, file, size, deadline)?;
                read_full(s, &mut self.inbuf[..size], deadline)?;
                Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64))
            }
            DataSock::Udp(s) => {
                // the sequence number in the first min(size, 8) bytes: a 1-byte
                // message carries it modulo 256
                let k = size.min(8);
                if self.stale {
                    self.late += drain(s, &mut self.inbuf, self.busy)?;
                    self.stale = false;
                }
                self.out[..k].copy_from_slice(&self.seq.to_le_bytes()[..k]);
                self.seq = self.seq.wrapping_add(1);
                let t0 = Instant::now();
                let deadline = t0 + timeout;
                s.send(&self.out[..size])?;
                let mut shortened = false;
                let result = loop {
                    match s.recv(&mut self.inbuf) {
                        Ok(n) if n == size && self.inbuf[..k] == self.out[..k] => {
                            break Ok(Outcome::Rtt(t0.elapsed().as_nanos() as u64));
                        }
                        Ok(_) => {
                            // a reply to an earlier message that was counted lost
                            self.late += 1;
                            let now = Instant::now();
                            if now >= deadline {
                                break Ok(Outcome::Lost);
                            }
                            if !self.busy {
                                s.set_read_timeout(Some(deadline - now))?;
                                shortened = true;
                            }
                        }
                        Err(e) if is_wait(&e) => {
                            if Instant::now() >= deadline {
                                break Ok(Outcome::Lost);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                            break Err(io::Error::new(
                                io::ErrorKind::ConnectionRefused,
                                "the agent's UDP port is closed (ICMP port unreachable): did the agent stop?",
                            ));
                        }
                        Err(e) => break Err(e),
                    }
                };
                if shortened {
                    s.set_read_timeout(Some(timeout))?;
                }
                if matches!(result, Ok(Outcome::Lost)) {
                    self.stale = true;
                }
                result
            }
        }
    }

    /// Checks the first `size` bytes of the last reply against the pattern
    /// (for UDP, past the sequence number).
    pub fn verify_last(&self, size: usize) -> bool {
        let skip = if self.sock.proto() == Proto::Udp { size.min(8) } else { 0 };
        self.inbuf[skip..size] == self.out[skip..size]
    }

    /// Sends a zero-length datagram: a hint to the agent that a UDP step ended
    /// (the StepEnd on the control channel is what counts).
    pub fn nudge(&self) {
        if let DataSock::Udp(s) = &self.sock {
            let _ = s.send(&[]);
        }
    }
}

/// Reads whatever datagrams are queued, without waiting; returns how many.
fn drain(s: &UdpSocket, buf: &mut [u8], busy: bool) -> io::Result<u64> {
    if !busy {
        s.set_nonblocking(true)?;
    }
    let mut n = 0;
    let result = loop {
        match s.recv(buf) {
            Ok(_) => n += 1,
            Err(e) if is_wait(&e) || e.kind() == io::ErrorKind::ConnectionRefused => break Ok(n),
            Err(e) => break Err(e),
        }
    };
    if !busy {
        s.set_nonblocking(false)?;
    }
    result
}

/// Why the agent's side of a step stopped early.
#[derive(Debug)]
pub enum StepError {
    /// The data connection failed or the client vanished.
    Io(io::Error),
    /// Nothing arrived for longer than the deadline.
    Idle(Duration),
    /// A control message that does not belong in a step.
    Control(String),
    /// The agent is shutting down.
    Stopped,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Io(e) => write!(f, "data connection: {e}"),
            StepError::Idle(d) => write!(f, "no data from the client for {:.1} s", d.as_secs_f64()),
            StepError::Control(m) => write!(f, "{m}"),
            StepError::Stopped => write!(f, "the agent is shutting down"),
        }
    }
}

/// Test-only faults the agent can be told to inject.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Receive but do not echo every n-th UDP datagram (counted per step).
    pub drop_udp_every: Option<u64>,
    /// Echo every n-th UDP datagram only after `delay` (a late reply).
    pub delay_udp_every: Option<u64>,
    pub delay: Duration,
    /// Stream tests: the agent's receiver of stream 0 resets its connection
    /// after this many bytes (a connection that breaks mid-run).
    pub break_stream_after: Option<u64>,
}

/// The agent's side of one step: echo messages of `size` bytes until
/// `exchanges` are done or the client sends StepEnd.
pub struct EchoStep<'a> {
    pub ctl: &'a mut TcpStream,
    pub size: usize,
    pub exchanges: Option<u64>,
    pub busy: bool,
    /// Give up when a message takes longer than this to arrive in full.
    pub idle_limit: Duration,
    /// For reading a control message once it has begun to arrive.
    pub control_timeout: Duration,
    /// The agent's stop flag, looked at for every message and every wait.
    pub stop: &'a AtomicBool,
    pub faults: Faults,
    /// When a busy-polling step last looked at the control channel.
    pub last_look: Instant,
}

impl EchoStep<'_> {
    /// Whether a control message is waiting, and if so whether it ends the step.
    fn control_says_end(&mut self) -> Result<bool, StepError> {
        let ready = gridperf_sys::poll_readable(&[self.ctl.as_raw_fd()], 0).map_err(StepError::Io)?;
        if !ready[0] {
            return Ok(false);
        }
        match crate::ctl::read_msg_within::<ClientMsg>(self.ctl, self.control_timeout) {
            Ok(ClientMsg::StepEnd) => Ok(true),
            Ok(ClientMsg::Abort { reason }) => Err(StepError::Control(format!("client aborted: {reason}"))),
            Ok(other) => Err(StepError::Control(format!("unexpected control message during a step: {other:?}"))),
            Err(e) => Err(StepError::Control(format!("control channel: {e}"))),
        }
    }

    /// What to do when no data is waiting: keep waiting (Ok(false)), the
    /// step ended (Ok(true)), or give up.
    fn on_wait(&mut self, spins: &mut u32, since: Instant, may_end: bool) -> Result<bool, StepError> {
        *spins = spins.wrapping_add(1);
        if self.busy {
            // spinning: look at the clock every 256 spins and at the control
            // channel once a millisecond, so that the poll(2) it takes is not
            // in the way of the next message
            if *spins % 256 != 0 {
                return Ok(false);
            }
            let now = Instant::now();
            if now.duration_since(self.last_look) < Duration::from_millis(1) {
                return Ok(false);
            }
            self.last_look = now;
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(StepError::Stopped);
        }
        if may_end && self.control_says_end()? {
            return Ok(true);
        }
        let idle = since.elapsed();
        if idle > self.idle_limit {
            return Err(StepError::Idle(idle));
        }
        Ok(false)
    }

    pub fn run(mut self, data: &mut DataSock, buf: &mut [u8]) -> Result<StepFigures, StepError> {
        let mut fig = StepFigures::default();
        let (u0, s0) = gridperf_sys::thread_cpu_time_ns();
        let mut spins: u32 = 0;
        let size = self.size;
        loop {
            if self.exchanges.is_some_and(|n| fig.echoed >= n) {
                break;
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(StepError::Stopped);
            }
            // receive one message; it must arrive in full within idle_limit
            let since = Instant::now();
            let received = match data {
                DataSock::Tcp(s) | DataSock::Sendfile(s, _) => {
                    let mut got = 0;
                    let mut ended = false;
                    while got < size {
                        match s.read(&mut buf[got..size]) {
                            Ok(0) => {
                                return Err(StepError::Io(io::Error::new(
                                    io::ErrorKind::UnexpectedEof,
                                    "the client closed the data connection",
                                )))
                            }
                            Ok(n) => {
                                got += n;
                                if got < size && since.elapsed() > self.idle_limit {
                                    return Err(StepError::Idle(since.elapsed()));
                                }
                            }
                            Err(e) if is_wait(&e) => {
                                if self.on_wait(&mut spins, since, got == 0)? {
                                    ended = true;
                                    break;
                                }
                            }
                            Err(e) => return Err(StepError::Io(e)),
                        }
                    }
                    (!ended).then_some(size)
                }
                DataSock::Udp(s) => loop {
                    match s.recv(buf) {
                        // the client's hint that the step ended; StepEnd decides
                        Ok(0) => {
                            if self.control_says_end()? {
                                break None;
                            }
                        }
                        Ok(n) => break Some(n),
                        // ICMP from the client's port (a reply it no longer waits for)
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                        Err(e) if is_wait(&e) => {
                            if self.on_wait(&mut spins, since, true)? {
                                break None;
                            }
                        }
                        Err(e) => return Err(StepError::Io(e)),
                    }
                },
            };
            let Some(n) = received else { break };
            fig.bytes_in += n as u64;
            // reply: TCP sends back the bytes it received, sendfile sends the
            // pattern from its file, UDP the datagram (sequence number included)
            let deadline = Instant::now() + self.idle_limit;
            match data {
                DataSock::Tcp(s) => write_full(s, &buf[..n], deadline).map_err(StepError::Io)?,
                DataSock::Sendfile(s, file) => sendfile_full(s, file, n, deadline).map_err(StepError::Io)?,
                DataSock::Udp(s) => {
                    let count = fig.echoed + fig.dropped_on_purpose + fig.send_failed + 1;
                    if self.faults.drop_udp_every.is_some_and(|k| k > 0 && count % k == 0) {
                        fig.dropped_on_purpose += 1;
                        continue;
                    }
                    if self.faults.delay_udp_every.is_some_and(|k| k > 0 && count % k == 0) {
                        std::thread::sleep(self.faults.delay);
                    }
                    match s.send(&buf[..n]) {
                        Ok(_) => {}
                        // the client went away or its queue is full: its loss to count
                        Err(e)
                            if e.kind() == io::ErrorKind::ConnectionRefused
                                || is_wait(&e)
                                || e.raw_os_error() == Some(libc::ENOBUFS) =>
                        {
                            fig.send_failed += 1;
                            continue;
                        }
                        Err(e) => return Err(StepError::Io(e)),
                    }
                }
            }
            fig.echoed += 1;
        }
        let (u1, s1) = gridperf_sys::thread_cpu_time_ns();
        fig.cpu_ns = (u1 - u0) + (s1 - s0);
        Ok(fig)
    }
}
