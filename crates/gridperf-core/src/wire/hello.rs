//! The first bytes on every data connection (and in a UDP stream's first
//! datagram): the test's token, what the connection is for, and which
//! stream it carries. The agent takes a connection only when all three fit
//! the test it runs for this client; anything else is closed unread.
//!
//! ```text
//! 0        8      9              13
//! | token  | kind | index (BE)   |
//! ```

use thiserror::Error;

/// The length of a hello, in bytes.
pub const HELLO_LEN: usize = 13;

/// What a data connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataKind {
    /// An echo test's TCP socket.
    Tcp,
    /// An echo test's TCP socket that answers with sendfile(2).
    Sendfile,
    /// One TCP stream of a stream test.
    Stream,
    /// A fanout consumer's connection.
    Fanout,
    /// One UDP stream of a stream test (its first datagram).
    UdpStream,
    /// One data connection of a copy.
    Copy,
}

impl DataKind {
    pub fn byte(self) -> u8 {
        match self {
            DataKind::Tcp => 1,
            DataKind::Sendfile => 2,
            DataKind::Stream => 3,
            DataKind::Fanout => 4,
            DataKind::UdpStream => 5,
            DataKind::Copy => 6,
        }
    }

    pub fn from_byte(b: u8) -> Option<DataKind> {
        Some(match b {
            1 => DataKind::Tcp,
            2 => DataKind::Sendfile,
            3 => DataKind::Stream,
            4 => DataKind::Fanout,
            5 => DataKind::UdpStream,
            6 => DataKind::Copy,
            _ => return None,
        })
    }
}

/// Why bytes are not a hello.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HelloError {
    #[error("a data-connection hello is {HELLO_LEN} bytes, not {0}")]
    Length(usize),
    #[error("unknown data-connection kind {0}")]
    Kind(u8),
}

/// A data connection's hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHello {
    pub token: u64,
    pub kind: DataKind,
    /// The stream (or consumer) it carries; 0 for an echo socket.
    pub index: u32,
}

impl DataHello {
    pub fn new(token: u64, kind: DataKind, index: u32) -> DataHello {
        DataHello { token, kind, index }
    }

    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&self.token.to_be_bytes());
        b[8] = self.kind.byte();
        b[9..].copy_from_slice(&self.index.to_be_bytes());
        b
    }

    /// Reads a hello from exactly [`HELLO_LEN`] bytes that came off the network.
    pub fn decode(b: &[u8]) -> Result<DataHello, HelloError> {
        let b: &[u8; HELLO_LEN] = b.try_into().map_err(|_| HelloError::Length(b.len()))?;
        let mut token = [0u8; 8];
        token.copy_from_slice(&b[..8]);
        let mut index = [0u8; 4];
        index.copy_from_slice(&b[9..]);
        Ok(DataHello {
            token: u64::from_be_bytes(token),
            kind: DataKind::from_byte(b[8]).ok_or(HelloError::Kind(b[8]))?,
            index: u32::from_be_bytes(index),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip() {
        for kind in
            [DataKind::Tcp, DataKind::Sendfile, DataKind::Stream, DataKind::Fanout, DataKind::UdpStream, DataKind::Copy]
        {
            let h = DataHello::new(0x0123_4567_89ab_cdef, kind, 77);
            let b = h.encode();
            assert_eq!(b.len(), HELLO_LEN);
            assert_eq!(&b[..8], &0x0123_4567_89ab_cdefu64.to_be_bytes());
            assert_eq!(&b[9..], &77u32.to_be_bytes());
            assert_eq!(DataHello::decode(&b), Ok(h));
        }
    }

    #[test]
    fn what_is_not_a_hello() {
        assert_eq!(DataHello::decode(&[0u8; 9]), Err(HelloError::Length(9)));
        assert_eq!(DataHello::decode(&[]), Err(HelloError::Length(0)));
        let mut b = DataHello::new(1, DataKind::Tcp, 0).encode();
        b[8] = 0;
        assert_eq!(DataHello::decode(&b), Err(HelloError::Kind(0)));
        b[8] = 200;
        assert!(DataHello::decode(&b).expect_err("kind").to_string().contains("200"));
    }
}
