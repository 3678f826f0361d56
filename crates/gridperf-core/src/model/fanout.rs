//! The many-to-one benchmark's results (`fanout`, the Gigabit/Myrinet
//! study): per point the repetitions' times, the document's bandwidth, or
//! the evidence of a deadlock.

use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The document's variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Blocking sends of all requests, then the receives (the document's Figure 1).
    Original,
    /// When a send would block, drain what is readable from every consumer, then retry.
    Drain,
    /// `drain` with TCP_NODELAY.
    Nodelay,
    /// A second thread drains continuously; the sender waits on a bounded
    /// queue of outstanding requests that the drainer empties.
    DrainThread,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::Original, Variant::Drain, Variant::Nodelay, Variant::DrainThread];
    pub const VALID: &'static str = "original, drain, nodelay, drain-thread, all";

    pub fn name(self) -> &'static str {
        match self {
            Variant::Original => "original",
            Variant::Drain => "drain",
            Variant::Nodelay => "nodelay",
            Variant::DrainThread => "drain-thread",
        }
    }

    pub fn parse(s: &str) -> Option<Vec<Variant>> {
        match s {
            "all" => Some(Variant::ALL.to_vec()),
            _ => Variant::ALL.iter().find(|v| v.name() == s).map(|v| vec![*v]),
        }
    }
}

/// What one side was doing when the watchdog fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blocked {
    /// "server" or "node 3".
    pub who: String,
    /// The call it was in: "send to node 1", "recv from node 0", "poll", "done".
    pub call: String,
}

/// The bytes queued in one socket when the watchdog fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queued {
    /// "server->node 1" (the server's socket to node 1) or "node 1->server".
    pub socket: String,
    /// Not yet acknowledged by the peer (SIOCOUTQ) and not yet read (SIOCINQ).
    pub outq: u64,
    pub inq: u64,
}

/// The evidence of a deadlock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deadlock {
    /// When in the repetition progress stopped, and the repetition.
    pub after_ns: u64,
    pub repetition: u32,
    /// Requests sent and acknowledgments received by the server, per node.
    pub sent: Vec<u64>,
    pub acked: Vec<u64>,
    pub blocked: Vec<Blocked>,
    pub queues: Vec<Queued>,
}

/// One point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanoutPoint {
    pub variant: Variant,
    pub nodes: u32,
    pub messages: u64,
    pub size: u64,
    /// Repetitions completed, and the time of each.
    pub repetitions: u32,
    pub times_ns: Vec<u64>,
    pub time: Option<Summary>,
    /// 2 x MAX x messages x nodes x size x 8 / total time, bits per second
    /// (None when a repetition did not complete).
    pub bandwidth_bps: Option<f64>,
    pub deadlock: Option<Deadlock>,
    /// An error other than a deadlock (a connection that broke).
    pub error: Option<String>,
}

/// The document's formula: bits per second moved both ways.
pub fn bandwidth_bps(max: u32, messages: u64, nodes: u32, size: u64, total: Duration) -> f64 {
    2.0 * f64::from(max) * messages as f64 * f64::from(nodes) * size as f64 * 8.0 / total.as_secs_f64()
}

/// What `gridperf fanout --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanoutReport {
    pub schema: String,
    /// SO_SNDBUF and SO_RCVBUF asked on every socket, if any.
    pub buffer: Option<u64>,
    /// MAX: repetitions per point.
    pub repeat: u32,
    pub points: Vec<FanoutPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documents_formula() {
        // 2 x MAX 5 x 100 messages x 4 nodes x 1000 B x 8 / 2 s = 16 Mbit/s
        let b = bandwidth_bps(5, 100, 4, 1000, Duration::from_secs(2));
        assert!((b - 16_000_000.0).abs() < 1e-6, "{b}");
    }

    #[test]
    fn variant_names_round_trip() {
        for v in Variant::ALL {
            assert_eq!(Variant::parse(v.name()), Some(vec![v]));
        }
        assert_eq!(Variant::parse("all").map(|v| v.len()), Some(4));
        assert_eq!(Variant::parse("fast"), None);
    }
}
