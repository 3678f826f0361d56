//! How the agent ends a client's conversation, shared by the session and
//! each test's own file: why it ended ([`Fail`], told to the client or
//! not), the error told, a close that does not reset, the wire error's
//! code, and a test's data-connection token.

use gridperf_core::wire::{self, AgentMsg, ErrorCode, WireError};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// Why a client's connection ended: with the client already told, or not yet.
pub(crate) enum Fail {
    Told(String),
    Untold(String),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Told(m) | Fail::Untold(m) => f.write_str(m),
        }
    }
}

impl From<String> for Fail {
    fn from(m: String) -> Fail {
        Fail::Untold(m)
    }
}

/// Tells the client why, and returns the reason for the agent's log.
pub(crate) fn send_error(ctl: &mut TcpStream, code: ErrorCode, message: String) -> Fail {
    let _ = wire::write_msg(ctl, &AgentMsg::Error { code, message: message.clone() });
    Fail::Told(message)
}

/// Closes a control connection after an error without resetting it: what
/// the client sent ahead unasked (its request behind its hello, its finish
/// behind copy-done) is read and dropped, for a close with unread data
/// sends a reset that can cost the client the error frame before it. At
/// most 250 ms and 1 MiB.
pub(crate) fn close_after_error(mut s: TcpStream) {
    use std::io::Read;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let until = Instant::now() + std::time::Duration::from_millis(250);
    let mut buf = [0u8; 16384];
    let mut total = 0usize;
    while total < 1 << 20 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

/// The error code for a control channel that failed.
pub(crate) fn wire_code(e: &WireError) -> ErrorCode {
    match e {
        WireError::TooLarge { .. } => ErrorCode::TooLarge,
        WireError::Timeout => ErrorCode::Timeout,
        _ => ErrorCode::BadMessage,
    }
}

/// A random number for a test's data connections (std's hasher keys are
/// random per instance); not a secret against an eavesdropper: it keeps a
/// stray connection from being taken for the client's.
pub(crate) fn new_token(peer: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u16(peer.port());
    h.finish() | 1
}
