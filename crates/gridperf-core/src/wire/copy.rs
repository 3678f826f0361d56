//! A copy's control messages (`gridperf copy`): the request, the file
//! lists and block needs that follow it in frames of their own (a
//! directory of many files does not fit one client frame), and the
//! outcome. The blocks themselves travel on the data connections
//! ([`crate::wire::block::BlockHeader`]).

use super::{ErrorCode, Refusal, MAX_BUFFER, MAX_RATE_BPS, MAX_STREAMS};
use serde::{Deserialize, Serialize};

/// The most files one copy may name.
pub const MAX_COPY_FILES: u32 = 1_000_000;
/// The most bytes of paths a list message carries (within a client frame).
pub const COPY_LIST_BYTES: usize = 10 << 10;
/// The most block ranges one need message carries.
pub const COPY_RANGES_PER_MSG: usize = 400;

/// Which way the data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyDirection {
    /// The client sends, the agent writes beneath its root.
    Push,
    /// The agent reads beneath its root and sends, the client writes.
    Pull,
    /// A third-party copy's source: the agent reads beneath its root and
    /// sends to another agent (the client names it with CopyTo), blocks
    /// the client hands out in leases (CopyLease, CopyLeased), so that
    /// several pairs of agents share one queue.
    Send,
}

/// A copy request: the list of files follows in CopyFiles messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopySpec {
    pub direction: CopyDirection,
    /// How many entries the client's CopyFiles messages will carry.
    pub files: u32,
    pub streams: u32,
    /// Block size: a power of two, 64 KiB to 64 MiB.
    pub block: u64,
    /// SO_SNDBUF / SO_RCVBUF on the data sockets.
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_bps: Option<u64>,
    /// Keep what a partial file holds (verified again, block by block).
    pub resume: bool,
    /// Replace a destination that exists.
    pub force: bool,
    /// A checksum the writing end computes besides BLAKE3, in order, as blocks arrive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<crate::copy::Checksum>,
    /// `--encrypt`: the client's X25519 public key (hex); the agent answers
    /// with its own (CopyKey) and every data connection is sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypt: Option<String>,
    /// The most data connections the client opens over the copy: `streams`
    /// at first, then more as slow ones are restarted and `-P auto` adds
    /// them (each with a new index below this); 0 means `streams`. The
    /// writing end takes them while the copy runs, and a connection that
    /// breaks or is closed is not an error by itself (its blocks are sent
    /// again on another; a file is complete when every block is verified).
    #[serde(default)]
    pub connections: u32,
    /// What the sending end's pool may do (a pull: the agent's): restart a
    /// slow connection, send the tail again, and adapt the count between
    /// these bounds (`-P auto`; `streams` is the start).
    #[serde(default)]
    pub restart: bool,
    #[serde(default)]
    pub tail: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<(u32, u32)>,
    /// A third-party copy's destination (a push): the data connections come
    /// from these addresses (the source agents'), not from the client's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub senders: Vec<String>,
    /// A third-party copy's second destination on storage it shares with
    /// the first: write into the partial files the first prepared (refused
    /// if they are not there: not the same storage); never rename (the
    /// first does, once every block is verified by either).
    #[serde(default)]
    pub join: bool,
}

/// The most host pairs (source agents into one destination) of a third-party copy.
pub const MAX_PAIRS: usize = 16;

/// The most data connections one copy may open over its life.
pub const MAX_COPY_CONNECTIONS: u32 = 1024;

/// Connections beyond the streams that a writing end runs at once: a
/// restart's replacement may arrive before the connection it replaces has
/// ended there.
pub const RESTART_SLACK: u32 = 2;

impl CopySpec {
    /// The data connections the writing end runs at once, each with its
    /// thread and block buffer (more wait for one to end): the streams, or
    /// -P auto's most, and RESTART_SLACK, never more than the copy's
    /// connections; a third-party destination runs every source's at once.
    pub fn live_connections(&self) -> u32 {
        let over_life = self.connections.max(self.streams);
        if !self.senders.is_empty() {
            return over_life;
        }
        let most = self.auto.map_or(self.streams, |(_, hi)| hi.max(self.streams));
        most.saturating_add(RESTART_SLACK).min(over_life)
    }

    pub fn validate(&self) -> Result<(), Refusal> {
        let unsupported = |m: String| Refusal { code: ErrorCode::Unsupported, message: m };
        if self.streams == 0 || self.streams > MAX_STREAMS {
            return Err(unsupported(format!("{} streams: give 1 to {MAX_STREAMS}", self.streams)));
        }
        if self.connections != 0 && !(self.streams..=MAX_COPY_CONNECTIONS).contains(&self.connections) {
            return Err(unsupported(format!(
                "{} connections over the copy for {} streams: give {} to {MAX_COPY_CONNECTIONS}",
                self.connections, self.streams, self.streams
            )));
        }
        if let Some((lo, hi)) = self.auto.filter(|&(lo, hi)| lo == 0 || lo > hi || hi > MAX_STREAMS) {
            return Err(unsupported(format!("-P {lo}..{hi}: give 1 <= MIN <= MAX <= {MAX_STREAMS}")));
        }
        if self.auto.is_some_and(|(_, hi)| self.connections < hi) {
            return Err(unsupported(format!("{} connections for up to {:?} streams", self.connections, self.auto)));
        }
        crate::copy::check_block(self.block).map_err(unsupported)?;
        if self.files == 0 || self.files > MAX_COPY_FILES {
            return Err(unsupported(format!("a copy of {} files: give 1 to {MAX_COPY_FILES}", self.files)));
        }
        if let Some(w) = self.window.filter(|&w| w == 0 || w > MAX_BUFFER) {
            return Err(unsupported(format!("a window of {w} bytes: give 1 byte to 1 GiB")));
        }
        if let Some(p) = self.pacing_bps.filter(|&p| p == 0 || p > MAX_RATE_BPS) {
            return Err(unsupported(format!("pacing at {p} bit/s: give 1 to {MAX_RATE_BPS}")));
        }
        if self.senders.len() > MAX_PAIRS {
            return Err(unsupported(format!("{} source agents: give at most {MAX_PAIRS}", self.senders.len())));
        }
        if let Some(bad) = self.senders.iter().find(|a| a.parse::<std::net::IpAddr>().is_err()) {
            return Err(Refusal {
                code: ErrorCode::BadMessage,
                message: format!("a sender {bad:?} that is not an IP address"),
            });
        }
        if (!self.senders.is_empty() || self.join) && self.direction != CopyDirection::Push {
            return Err(unsupported("senders and join are for a third-party copy's destination (a push)".into()));
        }
        if self.direction == CopyDirection::Send && self.encrypt.is_some() {
            return Err(unsupported(
                "a third-party copy is not encrypted yet: copy through this host for --encrypt".into(),
            ));
        }
        if self.encrypt.as_deref().is_some_and(|k| crate::auth::unhex(k).is_none()) {
            return Err(Refusal {
                code: ErrorCode::BadMessage,
                message: "an encryption key that is not 32 bytes of hex".into(),
            });
        }
        Ok(())
    }
}

/// A file of a copy: where it goes (push) or what to read (pull, expanded
/// by the agent into its files), relative to the root; its size and
/// modification time where known (the source's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyFile {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// A third-party source's BLAKE3 of the file (hex, from its blocks),
    /// so that the client can tell before any byte moves that several
    /// source agents hold the same data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Which file the sending end read: a hash of its host, device, inode,
    /// size and time (hex), so that a partial file is resumed only from the
    /// very file it began with (two files of one size and time, made within
    /// one clock tick, are not taken for each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// What the writing end needs of one file: the blocks, as ranges of
/// indexes [start, end); or why it refuses the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyNeed {
    pub file: u32,
    pub ranges: Vec<(u64, u64)>,
    /// Bytes a partial file already held, verified again (--resume).
    pub kept: u64,
    /// Why this file is not copied (the rest go on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl CopyNeed {
    /// Blocks (file, index) as ranges by file, in order: a lease, or a lease's report.
    pub fn of_blocks(mut blocks: Vec<(u32, u64)>) -> Vec<CopyNeed> {
        blocks.sort_unstable();
        blocks.dedup();
        let mut out: Vec<CopyNeed> = Vec::new();
        for (file, idx) in blocks {
            match out.last_mut() {
                Some(n) if n.file == file => match n.ranges.last_mut() {
                    Some(r) if r.1 == idx => r.1 = idx + 1,
                    _ => n.ranges.push((idx, idx + 1)),
                },
                _ => out.push(CopyNeed { file, ranges: vec![(idx, idx + 1)], kept: 0, refused: None }),
            }
        }
        out
    }
}

/// How one file's copy ended, as the writing end saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyOutcome {
    pub file: u32,
    /// The whole file's BLAKE3 (hex), from the verified blocks.
    pub blake3: Option<String>,
    /// Bytes that arrived verified in this run.
    pub moved: u64,
    /// Blocks that arrived damaged and were sent again.
    pub resent: u64,
    /// Bytes kept from a partial file.
    pub kept: u64,
    /// Why the file is not in place (it stays partial), if so.
    pub error: Option<String>,
    /// The checksum asked for (--checksum), in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// Splits a list into messages of at most [`COPY_LIST_BYTES`] of paths
/// (and at least one entry each).
pub fn chunk_files(files: &[CopyFile]) -> Vec<Vec<CopyFile>> {
    let mut out: Vec<Vec<CopyFile>> = Vec::new();
    let mut bytes = 0;
    for f in files {
        let cost = f.path.len() + 64;
        if out.is_empty() || bytes + cost > COPY_LIST_BYTES {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += cost;
        out.last_mut().expect("a chunk").push(f.clone());
    }
    out
}

/// Splits needs into messages of at most [`COPY_RANGES_PER_MSG`] ranges
/// (a file with more ranges spans messages, in order).
pub fn chunk_needs(needs: &[CopyNeed]) -> Vec<Vec<CopyNeed>> {
    let mut out: Vec<Vec<CopyNeed>> = vec![Vec::new()];
    let mut count = 0;
    for n in needs {
        let mut rest = n.ranges.as_slice();
        loop {
            let room = COPY_RANGES_PER_MSG.saturating_sub(count).max(1);
            let take = rest.len().min(room);
            if count + take > COPY_RANGES_PER_MSG {
                out.push(Vec::new());
                count = 0;
                continue;
            }
            out.last_mut().expect("a chunk").push(CopyNeed { ranges: rest[..take].to_vec(), ..n.clone() });
            count += take.max(1);
            rest = &rest[take..];
            if rest.is_empty() {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_become_ranges_by_file() {
        let n = CopyNeed::of_blocks(vec![(1, 4), (0, 2), (0, 0), (0, 1), (1, 5), (0, 7), (0, 1)]);
        let got: Vec<(u32, Vec<(u64, u64)>)> = n.into_iter().map(|x| (x.file, x.ranges)).collect();
        assert_eq!(got, vec![(0, vec![(0, 3), (7, 8)]), (1, vec![(4, 6)])]);
        assert!(CopyNeed::of_blocks(Vec::new()).is_empty());
    }

    #[test]
    fn lists_and_needs_are_cut_to_fit_a_frame() {
        let files: Vec<CopyFile> = (0..500)
            .map(|i| CopyFile {
                path: format!("dir/file-{i:05}.dat"),
                size: 1,
                mtime_ns: 0,
                digest: None,
                origin: None,
            })
            .collect();
        let chunks = chunk_files(&files);
        assert!(chunks.len() > 1);
        assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), 500);
        for c in &chunks {
            let msg = super::super::ClientMsg::CopyFiles { files: c.clone() };
            assert!(super::super::encode(&msg).expect("encode").len() < super::super::MAX_CLIENT_FRAME);
        }
        let needs = vec![
            CopyNeed { file: 0, ranges: (0..1000).map(|i| (2 * i, 2 * i + 1)).collect(), kept: 0, refused: None },
            CopyNeed { file: 1, ranges: vec![], kept: 5, refused: Some("exists".into()) },
        ];
        let chunks = chunk_needs(&needs);
        assert!(chunks.iter().all(|c| c.iter().map(|n| n.ranges.len()).sum::<usize>() <= COPY_RANGES_PER_MSG));
        let back: Vec<(u64, u64)> =
            chunks.iter().flatten().filter(|n| n.file == 0).flat_map(|n| n.ranges.clone()).collect();
        assert_eq!(back, needs[0].ranges);
        assert!(chunks.iter().flatten().any(|n| n.file == 1 && n.refused.is_some()));
        for c in &chunks {
            let msg = super::super::ClientMsg::CopyNeeds { needs: c.clone(), last: true };
            assert!(super::super::encode(&msg).expect("encode").len() < super::super::MAX_CLIENT_FRAME);
        }
    }
}
