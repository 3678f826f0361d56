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
    /// Time sealing or opening frames (`--encrypt`).
    #[serde(default)]
    pub crypt_ns: u64,
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
    /// The sending end's reading of this stream's TCP_INFO over the copy,
    /// in `stream`'s words (the receiver's window, the send buffer, losses,
    /// the path's rate), with its advice; None at the writing end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// Its place among the copy's streams: a restart's connection takes the
    /// slot of the one it replaced (`index` is the connection's own number).
    #[serde(default)]
    pub slot: u32,
    /// Why it ended before the copy did (restarted, removed by -P auto,
    /// broken, or closed at the end with blocks another connection
    /// delivered first); None when it ended with the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Blocks it sent again at the tail (another connection still had them).
    #[serde(default)]
    pub tail_blocks: u64,
    /// A copy between agents: the host pair it belongs to (an index of the report's `pairs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<u32>,
}

/// One host pair of a copy between agents (third-party): a source agent
/// sending to a destination agent over its own pool of streams, blocks
/// leased from the one queue the client keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyPair {
    pub source: String,
    pub destination: String,
    /// Block bytes its destination acknowledged (as its leases reported them).
    pub bytes: u64,
    /// When it ended, seconds from the start.
    pub seconds: f64,
    /// Bytes acknowledged in each interval of the report's `interval_ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interval_bytes: Vec<u64>,
    /// Why it was lost (its blocks went to the other pairs), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Something the pool of connections did while the copy ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyEvent {
    /// Seconds since the first data connection.
    pub t_s: f64,
    /// restart, give-up (a replacement slow too), stop-restarts, add,
    /// remove, broken (a connection failed; its blocks went to the others), tail.
    pub kind: String,
    /// The connection it concerns, and the one that took its place, if any.
    pub stream: Option<u32>,
    pub new_stream: Option<u32>,
    pub why: String,
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

impl CopyEvent {
    /// The connections it concerns, in words: " stream 2 -> 7", " stream 2", or nothing.
    pub fn who(&self) -> String {
        match (self.stream, self.new_stream) {
            (Some(a), Some(b)) => format!(" stream {a} -> {b}"),
            (Some(a), None) => format!(" stream {a}"),
            _ => String::new(),
        }
    }
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
    /// `-P auto` or MIN..MAX: the bounds of the adaptive count (`streams` was the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_auto: Option<(u32, u32)>,
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
    /// This end's streams (a copy between agents: the source agents').
    pub per_stream: Vec<CopyStream>,
    /// The host pairs of a copy between agents (direction "third-party"); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<CopyPair>,
    /// The agent's streams: the other end's disk, hashing and socket time
    /// (a copy between agents: the destination agents').
    #[serde(default)]
    pub agent_streams: Vec<CopyStream>,
    /// How the data connections were protected (`--encrypt`), or null.
    #[serde(default)]
    pub encryption: Option<String>,
    /// The length of each stream's intervals (`interval_bytes`).
    #[serde(default)]
    pub interval_ms: u64,
    /// What the streams' time went to, in words.
    pub verdict: String,
    /// Restarts, connections added and removed, and the tail, as they happened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<CopyEvent>,
    /// Blocks sent again at the tail on an idle connection while a slower one still had them.
    #[serde(default)]
    pub tail_blocks: u64,
    pub env: Environment,
}

impl CopyReport {
    /// Whether every file is in place.
    pub fn complete(&self) -> bool {
        self.files.iter().all(|f| f.error.is_none())
    }
}

/// What a copy's verdict needs: bytes moved, and stream time.
pub const MIN_VERDICT_BYTES: u64 = 4 << 20;
pub const MIN_VERDICT_NS: u64 = 200_000_000;

/// One end's time, summed over its streams: disk, hashing, sealing, socket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EndTime {
    pub disk: u64,
    pub hash: u64,
    pub crypt: u64,
    pub net: u64,
}

impl EndTime {
    pub fn of(streams: &[CopyStream]) -> EndTime {
        streams.iter().fold(EndTime::default(), |t, s| EndTime {
            disk: t.disk + s.disk_ns,
            hash: t.hash + s.hash_ns,
            crypt: t.crypt + s.crypt_ns,
            net: t.net + s.net_ns,
        })
    }

    fn all(&self) -> u64 {
        self.disk + self.hash + self.crypt + self.net
    }

    /// A part's share of the end's time, %.
    fn pct(&self, x: u64) -> f64 {
        x as f64 * 100.0 / self.all().max(1) as f64
    }

    /// Each part's share of the end's time, %: disk, CPU (hashing and sealing), socket.
    fn shares(&self) -> (f64, f64, f64) {
        (self.pct(self.disk), self.pct(self.hash + self.crypt), self.pct(self.net))
    }

    fn words(&self) -> String {
        let sealing = if self.crypt > 0 { format!(", sealing {:.0}%", self.pct(self.crypt)) } else { String::new() };
        let (disk, hash, net) = (self.pct(self.disk), self.pct(self.hash), self.pct(self.net));
        format!("disk {disk:.0}%, hashing {hash:.0}%{sealing}, socket {net:.0}%")
    }
}

/// The share of an end's time above which its disk or CPU is named as the limit.
pub const END_LIMIT_PCT: f64 = 50.0;

/// Where a copy's time went, as a verdict. `sender` and `writer` are the
/// two ends' streams (either may be empty: an agent that said nothing).
/// The end whose disk or CPU took more than [`END_LIMIT_PCT`] of its
/// streams' time is named (the larger such share wins); when neither did,
/// both ends waited on their sockets: the network (its rate, a window, or
/// losses: the sending end's TCP_INFO tells which).
pub fn copy_verdict(sender: &[CopyStream], writer: &[CopyStream]) -> String {
    let (s, w) = (EndTime::of(sender), EndTime::of(writer));
    // a few blocks say nothing of what limits a copy
    let moved: u64 = sender.iter().map(|x| x.bytes).sum::<u64>().max(writer.iter().map(|x| x.bytes).sum());
    let spent = s.all().max(w.all());
    if spent == 0 {
        return "limited by nothing measured: no stream moved a block".into();
    }
    if moved < MIN_VERDICT_BYTES || spent < MIN_VERDICT_NS {
        return format!(
            "too little moved to tell what limited it ({moved} bytes in {:.0} ms of stream time: a verdict needs {} \
             MiB and {} ms)",
            spent as f64 / 1e6,
            MIN_VERDICT_BYTES >> 20,
            MIN_VERDICT_NS / 1_000_000
        );
    }
    let (sd, sc, sn) = s.shares();
    let (wd, wc, wn) = w.shares();
    let mut candidates: Vec<(&str, f64)> = Vec::new();
    if s.all() > 0 {
        candidates.push(("the source disk (reading the blocks)", sd));
        candidates.push((
            if s.crypt > 0 { "the sending end's CPU (hashing and sealing)" } else { "the sending end's CPU (hashing)" },
            sc,
        ));
    }
    if w.all() > 0 {
        candidates.push(("the destination disk (writing the blocks)", wd));
        candidates.push((
            if w.crypt > 0 { "the writing end's CPU (opening and hashing)" } else { "the writing end's CPU (hashing)" },
            wc,
        ));
    }
    let top = candidates.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    let detail = |t: &EndTime| if t.all() > 0 { t.words() } else { "not known".to_string() };
    let ends = format!("(sending end: {}; writing end: {})", detail(&s), detail(&w));
    match top {
        Some((what, share)) if share > END_LIMIT_PCT => {
            format!("limited by {what}: {share:.0}% of that end's stream time {ends}")
        }
        Some(_) => {
            let waited = [
                (s.all() > 0).then(|| format!("the sending end {sn:.0}%")),
                (w.all() > 0).then(|| format!("the writing end {wn:.0}%")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            // what TCP said at the sending end, for the stream that carried the most
            let tcp = sender
                .iter()
                .filter(|x| x.tcp.is_some())
                .max_by_key(|x| x.bytes)
                .map(|x| {
                    let of = if sender.len() > 1 {
                        format!(" (stream {} of {})", x.index, sender.len())
                    } else {
                        String::new()
                    };
                    format!("; TCP at the sending end{of}: {}", x.tcp.as_deref().unwrap_or_default())
                })
                .unwrap_or_default();
            format!("limited by the network: the sockets waited ({waited} of its time) {ends}{tcp}")
        }
        None => "limited by nothing measured: no stream moved a block".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares of an end's time in hundredths of a second (100: one second),
    /// over a gigabyte: enough for a verdict.
    const T: u64 = 10_000_000;

    fn end(disk: u64, hash: u64, crypt: u64, net: u64) -> Vec<CopyStream> {
        vec![CopyStream {
            disk_ns: disk * T,
            hash_ns: hash * T,
            crypt_ns: crypt * T,
            net_ns: net * T,
            bytes: 1 << 30,
            ..Default::default()
        }]
    }

    #[test]
    fn a_copy_too_small_to_judge_says_so() {
        // six bytes in a few microseconds were "limited by the sending end's CPU (hashing): 79%"
        let tiny = vec![CopyStream { bytes: 6, hash_ns: 79_000, net_ns: 21_000, ..Default::default() }];
        let v = copy_verdict(&tiny, &tiny);
        assert!(v.starts_with("too little moved to tell what limited it (6 bytes"), "{v}");
    }

    #[test]
    fn the_network_verdict_says_what_tcp_said_for_the_largest_stream() {
        let mut sender = end(1, 1, 0, 98);
        sender.push(CopyStream { index: 1, bytes: 10 << 20, net_ns: 98 * T, ..Default::default() });
        sender[0].tcp = Some("limited by the receiver's window 57% of the time".into());
        sender[1].tcp = Some("cwnd-limited without loss".into());
        sender[0].bytes = 100 << 20;
        let v = copy_verdict(&sender, &end(1, 1, 0, 98));
        assert!(v.starts_with("limited by the network: the sockets waited"), "{v}");
        assert!(
            v.ends_with("TCP at the sending end (stream 0 of 2): limited by the receiver's window 57% of the time"),
            "{v}"
        );
        sender[1].bytes = 1000 << 20;
        let v = copy_verdict(&sender, &end(1, 1, 0, 98));
        assert!(v.ends_with("(stream 1 of 2): cwnd-limited without loss"), "{v}");
        // a disk that took most of an end's time is named before TCP is
        assert!(!copy_verdict(&end(90, 1, 0, 9), &end(1, 1, 0, 98)).contains("TCP at"));
    }

    #[test]
    fn the_verdict_names_the_end_and_the_part_that_held_the_copy_back() {
        // both ends waited on their sockets: the network
        let v = copy_verdict(&end(10, 20, 0, 70), &end(5, 15, 0, 80));
        assert!(v.starts_with("limited by the network"), "{v}");
        assert!(v.contains("the sending end 70%") && v.contains("the writing end 80%"), "{v}");
        // the destination's disk took most of the writing end's time; the sender waited on it
        let v = copy_verdict(&end(10, 10, 0, 80), &end(70, 10, 0, 20));
        assert!(v.starts_with("limited by the destination disk"), "{v}");
        assert!(v.contains("70% of that end"), "{v}");
        // the sender's disk
        let v = copy_verdict(&end(60, 10, 0, 30), &end(5, 10, 0, 85));
        assert!(v.starts_with("limited by the source disk"), "{v}");
        // sealing and hashing at the sending end: its CPU, and sealing is named
        let v = copy_verdict(&end(5, 30, 40, 25), &end(5, 20, 20, 55));
        assert!(v.starts_with("limited by the sending end's CPU (hashing and sealing): 70%"), "{v}");
        assert!(v.contains("sealing 40%"), "{v}");
        // the agent said nothing of its end: this end alone, and said so
        let v = copy_verdict(&end(10, 10, 0, 80), &[]);
        assert!(v.starts_with("limited by the network") && v.contains("writing end: not known"), "{v}");
        assert!(copy_verdict(&[], &[]).contains("nothing measured"));
    }
}
