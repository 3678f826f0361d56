//! What both ends of a copy run: the sending end's shared block queue and
//! stream threads, the writing end's partial files (their journal, the
//! resume that hashes what they hold again) and stream threads, and the
//! finish that renames a file into place only when every block is
//! verified. The agent runs one end, the client the other (push or pull).
//!
//! Memory: each stream holds one block buffer at each end; the blocks it
//! has unacknowledged (at most [`unacked_limit`]) are kept as numbers, not
//! data (a block sent again is read again); nothing else grows with the data.

mod dial;
mod link;
pub mod open;
mod pool;
mod queue;
mod receive;
mod send;
mod sink;
mod walk;

pub use dial::*;
pub use link::*;
pub use pool::*;
pub use queue::*;
pub use receive::*;
pub use send::*;
pub use sink::*;
pub use walk::*;

use std::sync::{Mutex, PoisonError};

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
