//! Control-channel I/O with whole-message deadlines.
//!
//! SO_RCVTIMEO bounds one read(2), not a message: a peer that trickles a
//! byte just inside each timeout would keep a plain `read_msg` going for
//! ever. Here every read gets the time left until the message's deadline.

use gridperf_core::wire::{self, Framed, WireError};
use serde::de::DeserializeOwned;
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Until<'a> {
    s: &'a TcpStream,
    until: Instant,
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let now = Instant::now();
        if now >= self.until {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some((self.until - now).max(Duration::from_millis(1))))?;
        let mut s = self.s;
        s.read(buf)
    }
}

/// Reads one control frame's body of a `T`, all of it before `until`.
pub fn read_frame_by<T: Framed>(s: &TcpStream, until: Instant) -> Result<Vec<u8>, WireError> {
    wire::read_frame_max(&mut Until { s, until }, T::MAX_FRAME)
}

/// Reads one control message, all of it before `until`.
pub fn read_msg_by<T: DeserializeOwned + Framed>(s: &TcpStream, until: Instant) -> Result<T, WireError> {
    wire::read_msg(&mut Until { s, until })
}

/// Reads one control message within `within` from now.
pub fn read_msg_within<T: DeserializeOwned + Framed>(s: &TcpStream, within: Duration) -> Result<T, WireError> {
    read_msg_by(s, Instant::now() + within)
}
