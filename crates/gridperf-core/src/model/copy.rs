//! A copy's result (`gridperf copy`, schema `gridperf.copy/1`).

use super::Environment;
use serde::{Deserialize, Serialize};

/// What one data connection of a copy did at this end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyStream {
    pub index: u32,
    /// Block bytes carried (sent and acknowledged, or received and verified).
    pub bytes: u64,
    pub blocks: u64,
    /// Time in the disk (reads at the sending end, writes at the writing
    /// end), in hashing, and on the socket (writing, or waiting for data).
    pub disk_ns: u64,
    pub hash_ns: u64,
    pub net_ns: u64,
    /// The sending end's TCP_INFO at the stream's end.
    pub retransmits: Option<u32>,
    pub rtt_us: Option<u32>,
    /// Bytes acknowledged (sending) or verified (writing) in each interval
    /// of the report's `interval_ms`, from the first data connection; the
    /// last interval is whatever remained when the stream ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interval_bytes: Vec<u64>,
    /// How long the last interval lasted, ms (the copy ended within it).
    #[serde(default)]
    pub last_interval_ms: u64,
}

/// One file of a copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyFileResult {
    /// As the destination names it.
    pub path: String,
    pub size: u64,
    /// The whole file's BLAKE3 (hex), from its verified blocks; null when it is not in place.
    pub blake3: Option<String>,
    /// Bytes that arrived verified in this run; kept from a partial file (or a finished one) before it.
    pub moved: u64,
    pub kept: u64,
    /// Blocks that arrived damaged and were sent again.
    pub resent: u64,
    /// Why it is not in place (it stays partial for a resume), if so.
    pub error: Option<String>,
    /// The checksum asked for (`--checksum`), hex, computed as the blocks arrived.
    #[serde(default)]
    pub checksum: Option<String>,
}

/// A copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyReport {
    pub schema: String,
    /// "push" (this host sends) or "pull" (this host writes).
    pub direction: String,
    pub source: String,
    pub destination: String,
    pub streams: u32,
    pub block: u64,
    /// The checksum computed besides BLAKE3 (md5, sha256, adler32), if asked for.
    #[serde(default)]
    pub checksum: Option<String>,
    pub files: Vec<CopyFileResult>,
    /// Entries not copied, with why (links, devices, unreadable files).
    pub skipped: Vec<(String, String)>,
    pub bytes_moved: u64,
    pub bytes_kept: u64,
    pub blocks_resent: u64,
    /// From the first data connection to the last block verified.
    pub seconds: f64,
    /// Bytes moved over that time, bits per second.
    pub throughput_bps: f64,
    /// This end's streams.
    pub per_stream: Vec<CopyStream>,
    /// The length of each stream's intervals (`interval_bytes`).
    #[serde(default)]
    pub interval_ms: u64,
    /// What the streams' time went to, in words.
    pub verdict: String,
    pub env: Environment,
}

impl CopyReport {
    /// Whether every file is in place.
    pub fn complete(&self) -> bool {
        self.files.iter().all(|f| f.error.is_none())
    }
}

/// Where a copy's streams spent their time, as a verdict: the disk, the
/// hashing (CPU) or the socket (the network, or the other end). `sending`:
/// this end reads the files and sends.
pub fn copy_verdict(streams: &[CopyStream], sending: bool) -> String {
    let (disk, hash, net) =
        streams.iter().fold((0u64, 0u64, 0u64), |(d, h, n), s| (d + s.disk_ns, h + s.hash_ns, n + s.net_ns));
    let all = (disk + hash + net).max(1) as f64;
    let pct = |x: u64| x as f64 * 100.0 / all;
    let (what, share) = [
        (
            if sending { "the source disk (reading the blocks)" } else { "the destination disk (writing the blocks)" },
            disk,
        ),
        ("the CPU (hashing the blocks)", hash),
        (
            if sending {
                "the network or the receiver (the socket writes waited)"
            } else {
                "the network or the sender (the socket reads waited)"
            },
            net,
        ),
    ]
    .into_iter()
    .max_by_key(|(_, x)| *x)
    .unwrap_or(("nothing", 0));
    format!(
        "limited by {what}: {:.0}% of the streams' time (disk {:.0}%, hashing {:.0}%, socket {:.0}%)",
        pct(share),
        pct(disk),
        pct(hash),
        pct(net)
    )
}
