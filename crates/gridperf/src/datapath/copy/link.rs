//! One data connection and its sealing: how a frame is sealed, read and opened.

use gridperf_core::copy::seal::{Sealer, TAG_LEN};
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

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

/// A data connection's two ways, sealed (`copy --encrypt`): the way this
/// end writes and the way it reads.
pub struct Crypt {
    pub out: Sealer,
    pub inn: Sealer,
}

impl Crypt {
    /// The way this end writes and the way it reads, each None unsealed.
    pub(super) fn split(c: Option<Crypt>) -> (Option<Sealer>, Option<Sealer>) {
        c.map_or((None, None), |c| (Some(c.out), Some(c.inn)))
    }

    /// From a copy's keys, for stream `index` at the end that sends the blocks (`sending`) or writes them.
    pub fn of(keys: Option<&gridperf_core::copy::seal::CopyKeys>, index: u32, sending: bool) -> Option<Crypt> {
        keys.map(|k| {
            let (out, inn) = k.stream(index, sending);
            Crypt { out, inn }
        })
    }
}

pub(super) fn sealing(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Seals the first `len` bytes of `frame` in place and puts the tag after
/// them (`frame` has room for it); the bytes to write. Unsealed: `len`.
pub(super) fn seal(sealer: Option<&mut Sealer>, frame: &mut [u8], len: usize) -> io::Result<usize> {
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
pub(super) fn read_frame(
    sock: &mut impl Read,
    opener: Option<&mut Sealer>,
    frame: &mut [u8],
    len: usize,
) -> io::Result<()> {
    match opener {
        None => sock.read_exact(&mut frame[..len]),
        Some(o) => {
            sock.read_exact(&mut frame[..len + TAG_LEN])?;
            o.open(&mut frame[..len + TAG_LEN]).map_err(sealing).map(|_| ())
        }
    }
}
