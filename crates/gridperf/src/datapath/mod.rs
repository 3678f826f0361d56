//! The data path both ends share: the data sockets, the echo's reads and
//! writes with a per-message deadline, the data-connection hello, and (in
//! [`stream`]) the stream threads. The client side of each measurement is
//! in `engines`, the agent's in `agent`; what both run is here, once.

pub mod copy;
pub mod stream;

use gridperf_core::model::plan::Proto;
use gridperf_core::wire::{DataHello, HELLO_LEN};
use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
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

pub fn is_wait(e: &io::Error) -> bool {
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
pub fn read_full(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let eof = (io::ErrorKind::UnexpectedEof, "the peer closed the data connection");
    move_all(buf.len(), deadline, eof, "no reply within the per-message timeout", |at| s.read(&mut buf[at..]))
}

/// Writes all of `buf` before `deadline`.
pub fn write_full(s: &mut TcpStream, buf: &[u8], deadline: Instant) -> io::Result<()> {
    let zero = (io::ErrorKind::WriteZero, "the data connection accepts no more bytes");
    move_all(buf.len(), deadline, zero, "could not send within the per-message timeout", |at| s.write(&buf[at..]))
}

/// Sends `len` bytes of the pattern file with sendfile(2) before `deadline`.
pub fn sendfile_full(s: &TcpStream, file: &OwnedFd, len: usize, deadline: Instant) -> io::Result<()> {
    let zero = (io::ErrorKind::WriteZero, "sendfile sent nothing");
    move_all(len, deadline, zero, "could not send within the per-message timeout", |at| {
        gridperf_sys::sendfile(s, file, at as u64, len - at)
    })
}

/// Reads a data connection's hello within `within`: None when the peer
/// sends something else, too little, or nothing in time (the caller closes it).
pub fn read_hello(s: &mut TcpStream, within: Duration) -> Option<DataHello> {
    let _ = s.set_nonblocking(false);
    s.set_read_timeout(Some(within)).ok()?;
    let mut b = [0u8; HELLO_LEN];
    read_full(s, &mut b, Instant::now() + within).ok()?;
    DataHello::decode(&b).ok()
}

/// Sends a data connection's hello.
pub fn write_hello(s: &mut TcpStream, hello: &DataHello) -> io::Result<()> {
    s.write_all(&hello.encode())
}
