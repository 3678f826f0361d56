//! The many-to-one benchmark's results (`fanout`, the Gigabit/Myrinet
//! study): per point the repetitions' times, the document's bandwidth, or
//! the evidence of a deadlock.

use crate::analysis::stats::Summary;
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
    /// What the points say together ([`nagle_notes`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A repetition at least this long, on a variant that leaves Nagle on, is
/// looked at as a possible Nagle stall: Linux delays an ACK up to 40 ms
/// (at least 40 ms once it leaves quick-ack mode), and Nagle's algorithm
/// holds a small write until the previous one is acknowledged.
pub const NAGLE_SUSPECT_NS: f64 = 20e6;
/// ...and it is one when TCP_NODELAY (the nodelay variant, at the same
/// nodes, messages and size) made the repetition this many times faster.
pub const NAGLE_FACTOR: f64 = 10.0;

/// A short note for points that stall on Nagle: those that TCP_NODELAY made
/// at least [`NAGLE_FACTOR`] times faster, with one example's figures; and,
/// when the nodelay variant was not run, the points slow enough to be
/// suspects, with the way to tell.
pub fn nagle_notes(points: &[FanoutPoint]) -> Vec<String> {
    use crate::units::{fmt_bytes, fmt_ns};
    let median = |p: &FanoutPoint| p.time.as_ref().map(|t| t.median_ns);
    let nodelay = |p: &FanoutPoint| {
        points
            .iter()
            .find(|q| q.variant == Variant::Nodelay && (q.nodes, q.messages, q.size) == (p.nodes, p.messages, p.size))
            .and_then(median)
    };
    let what =
        |p: &FanoutPoint| format!("{} {} nodes {} x {}", p.variant.name(), p.nodes, p.messages, fmt_bytes(p.size));
    let mut stalled = Vec::new();
    let mut suspects = Vec::new();
    for p in points.iter().filter(|p| p.variant != Variant::Nodelay) {
        let Some(m) = median(p).filter(|&m| m >= NAGLE_SUSPECT_NS) else { continue };
        match nodelay(p) {
            Some(n) if n * NAGLE_FACTOR <= m => stalled.push((p, m, n)),
            Some(_) => {}
            None => suspects.push((p, m)),
        }
    }
    let mut notes = Vec::new();
    if let Some((p, m, n)) = stalled.first() {
        notes.push(format!(
            "Nagle: {} of the points stalled ({}: {} a repetition, {} with TCP_NODELAY): Nagle's algorithm held a \
             small write until the peer's delayed ACK (up to 40 ms on Linux). The nodelay variant sets TCP_NODELAY.",
            stalled.len(),
            what(p),
            fmt_ns(*m),
            fmt_ns(*n)
        ));
    }
    if let Some((p, m)) = suspects.first() {
        notes.push(format!(
            "{} point(s) took {} or more a repetition ({}: {}): if that is Nagle waiting for a delayed ACK, \
             `--variant {},nodelay` tells.",
            suspects.len(),
            fmt_ns(NAGLE_SUSPECT_NS),
            what(p),
            fmt_ns(*m),
            p.variant.name()
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(variant: Variant, messages: u64, median_ns: f64) -> FanoutPoint {
        FanoutPoint {
            variant,
            nodes: 2,
            messages,
            size: 256,
            repetitions: 5,
            times_ns: vec![median_ns as u64; 5],
            time: crate::analysis::stats::Summary::from_samples(&[median_ns as u64; 5]),
            bandwidth_bps: None,
            deadlock: None,
            error: None,
        }
    }

    #[test]
    fn a_stall_that_nodelay_removes_is_named_nagle() {
        // measured on loopback: original 16 x 256 B took 42.89 ms, nodelay 467 us
        let pts = [point(Variant::Original, 16, 42.89e6), point(Variant::Nodelay, 16, 467e3)];
        let n = nagle_notes(&pts);
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0].starts_with("Nagle: 1 of the points") && n[0].contains("42.89ms"), "{n:?}");
        // as slow with TCP_NODELAY: not Nagle
        let pts = [point(Variant::Original, 16, 42.89e6), point(Variant::Nodelay, 16, 40e6)];
        assert!(nagle_notes(&pts).is_empty());
        // fast points are nobody's suspects
        let pts = [point(Variant::Drain, 1, 160e3)];
        assert!(nagle_notes(&pts).is_empty());
        // a slow point without its nodelay twin: a suspect, and how to tell
        let n = nagle_notes(&[point(Variant::Drain, 16, 44e6)]);
        assert!(n.len() == 1 && n[0].contains("--variant drain,nodelay"), "{n:?}");
    }

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
