//! The plan: which protocols and message sizes a run measures, parsed from
//! what the user typed. First stage of the data flow (plan -> runner ->
//! engine -> stats -> store -> report).

use crate::units::{parse_bytes, UnitError};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// The largest UDP payload over IPv4: 65535 - 20 (IP header) - 8 (UDP header).
pub const UDP_MAX_PAYLOAD: u64 = 65_507;

/// The largest TCP or sendfile message gridperf will exchange (64 MiB). Both
/// ends allocate a buffer of this size, so the agent refuses anything larger.
pub const STREAM_MAX_MESSAGE: u64 = 64 << 20;

/// At most this many sizes in one plan.
pub const MAX_SIZES: usize = 100_000;

/// A transport that a round-trip or transfer test can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP with send(2)/recv(2).
    Tcp,
    /// UDP, one datagram per message (IP fragments what exceeds the MTU).
    Udp,
    /// TCP where both ends transmit with sendfile(2) from a memory-backed file.
    Sendfile,
}

impl Proto {
    pub const ALL: [Proto; 3] = [Proto::Tcp, Proto::Udp, Proto::Sendfile];
    pub const VALID: &'static str = "tcp, udp, sendfile (or all)";

    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sendfile => "sendfile",
        }
    }

    pub fn from_name(s: &str) -> Option<Proto> {
        match s {
            "tcp" => Some(Proto::Tcp),
            "udp" => Some(Proto::Udp),
            "sendfile" | "sf" => Some(Proto::Sendfile),
            _ => None,
        }
    }

    /// Whether this protocol runs over a TCP connection.
    pub fn is_stream(self) -> bool {
        !matches!(self, Proto::Udp)
    }

    /// The largest message this protocol can carry in one exchange.
    pub fn max_message(self) -> u64 {
        match self {
            Proto::Udp => UDP_MAX_PAYLOAD,
            Proto::Tcp | Proto::Sendfile => STREAM_MAX_MESSAGE,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What was wrong with a plan, and what is valid.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("unknown protocol {0:?}: valid protocols are {valid}", valid = Proto::VALID)]
    UnknownProto(String),
    #[error("no protocol given: valid protocols are {valid}", valid = Proto::VALID)]
    NoProto,
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("size list {0:?} is empty: give sizes like 1,64,1k..64k*2 or a preset ({presets})", presets = PRESET_NAMES)]
    Empty(String),
    #[error("message size 0 in {0:?}: a message holds at least 1 byte")]
    Zero(String),
    #[error("range {0:?} runs backwards: write it low..high")]
    Backwards(String),
    #[error("range {0:?} has a bad step: use *F with a whole factor F >= 2 (geometric) or +S with a step S >= 1 (arithmetic), e.g. 1k..64k*2 or 1..16k+256")]
    BadStep(String),
    #[error("the size list expands to more than {MAX_SIZES} sizes")]
    TooMany,
    #[error("{proto} message of {size} bytes is larger than {proto} allows ({max} bytes{why})")]
    TooLarge { proto: Proto, size: u64, max: u64, why: &'static str },
}

/// The named size sweeps, for `--sizes NAME`.
pub const PRESET_NAMES: &str = "quick, paper, pow2, bench";

fn preset(name: &str) -> Option<&'static str> {
    Some(match name {
        // Sizes around the MTU multiples where the first document saw its knees
        // (1400, 1800, 2800 bytes), and the decades up to 64000.
        "quick" => "1,64,256,512,1k,1400,1460,1500,2k,2800,3k,4k,8k,16k,32k,64000",
        // The first document's sweep: 1 B to 64 KB (64000, within UDP's maximum)
        // in steps of 128 B, fine enough to place its thresholds.
        "paper" => "1,128..64000+128",
        "pow2" => "1..64k*2",
        // The sizes of bench/rtt-peers.sh.
        "bench" => "1,64,1460,4k,16k,64k",
        // A first look: the smallest, a small, one near a packet, a large and the largest.
        "short" => "1,64,1k,16k,64000",
        _ => return None,
    })
}

/// Parses a size list: comma-separated sizes (`1460`, `4k`), ranges with a
/// factor (`1k..64k*2`, geometric) or a step (`1..16k+256`, arithmetic; a range
/// without either doubles), and preset names. Returns the sizes sorted, without
/// duplicates.
pub fn parse_sizes(input: &str) -> Result<Vec<u64>, PlanError> {
    let mut out = Vec::new();
    for item in input.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(p) = preset(item) {
            out.extend(parse_sizes(p)?);
            continue;
        }
        if let Some((lo, rest)) = item.split_once("..") {
            let lo = parse_bytes(lo, "range start")?;
            let (hi, step) = if let Some((hi, f)) = rest.split_once('*') {
                let f: u64 = f.trim().parse().map_err(|_| PlanError::BadStep(item.into()))?;
                if f < 2 {
                    return Err(PlanError::BadStep(item.into()));
                }
                (hi, Step::Factor(f))
            } else if let Some((hi, s)) = rest.split_once('+') {
                let s = parse_bytes(s, "range step").map_err(|_| PlanError::BadStep(item.into()))?;
                if s < 1 {
                    return Err(PlanError::BadStep(item.into()));
                }
                (hi, Step::Add(s))
            } else {
                (rest, Step::Factor(2))
            };
            let hi = parse_bytes(hi, "range end")?;
            if lo == 0 {
                return Err(PlanError::Zero(item.into()));
            }
            if hi < lo {
                return Err(PlanError::Backwards(item.into()));
            }
            let mut v = lo;
            while v <= hi {
                out.push(v);
                if out.len() > MAX_SIZES {
                    return Err(PlanError::TooMany);
                }
                v = match step {
                    Step::Factor(f) => v.saturating_mul(f),
                    Step::Add(s) => v.saturating_add(s),
                };
                if v == u64::MAX {
                    break;
                }
            }
        } else {
            let v = parse_bytes(item, "message size")?;
            if v == 0 {
                return Err(PlanError::Zero(item.into()));
            }
            out.push(v);
        }
        if out.len() > MAX_SIZES {
            return Err(PlanError::TooMany);
        }
    }
    if out.is_empty() {
        return Err(PlanError::Empty(input.into()));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

enum Step {
    Factor(u64),
    Add(u64),
}

/// Parses a protocol list such as `tcp,udp,sendfile` or `all`, keeping the
/// order given (that is the order in which each size is measured).
pub fn parse_protos(input: &str) -> Result<Vec<Proto>, PlanError> {
    let mut out: Vec<Proto> = Vec::new();
    for item in input.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let list: Vec<Proto> = if item == "all" {
            Proto::ALL.to_vec()
        } else {
            vec![Proto::from_name(&item.to_ascii_lowercase()).ok_or_else(|| PlanError::UnknownProto(item.into()))?]
        };
        for p in list {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    if out.is_empty() {
        return Err(PlanError::NoProto);
    }
    Ok(out)
}

/// Checks every size against every protocol's maximum.
pub fn check_limits(protos: &[Proto], sizes: &[u64]) -> Result<(), PlanError> {
    for &p in protos {
        if let Some(&s) = sizes.iter().find(|&&s| s > p.max_message()) {
            let why = match p {
                Proto::Udp => ": 65535 minus the IPv4 and UDP headers",
                _ => ": gridperf's limit for one message, which each end must hold in memory",
            };
            return Err(PlanError::TooLarge { proto: p, size: s, max: p.max_message(), why });
        }
    }
    Ok(())
}

/// One measurement of a plan: a protocol at a message size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub proto: Proto,
    pub size: u64,
}

/// The points in measuring order: for each size, every protocol in turn, so
/// that drift over the run hits all protocols alike.
pub fn interleave(protos: &[Proto], sizes: &[u64]) -> Vec<Point> {
    sizes.iter().flat_map(|&size| protos.iter().map(move |&proto| Point { proto, size })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_ranges_and_steps() {
        assert_eq!(parse_sizes("1,64,1k..8k*2"), Ok(vec![1, 64, 1024, 2048, 4096, 8192]));
        assert_eq!(parse_sizes("1..1k+256"), Ok(vec![1, 257, 513, 769]));
        assert_eq!(parse_sizes("1..16k+256").map(|v| v.len()), Ok(64));
        assert_eq!(parse_sizes("4k..16k"), Ok(vec![4096, 8192, 16384]));
        assert_eq!(parse_sizes("64, 1, 64"), Ok(vec![1, 64]));
        assert_eq!(parse_sizes("1..27*3"), Ok(vec![1, 3, 9, 27]));
    }

    #[test]
    fn presets() {
        let paper = parse_sizes("paper").expect("paper");
        assert_eq!(paper.first(), Some(&1));
        assert_eq!(paper.last(), Some(&64_000));
        assert_eq!(paper.len(), 501);
        assert_eq!(parse_sizes("pow2").map(|v| v.len()), Ok(17));
        assert_eq!(parse_sizes("bench"), Ok(vec![1, 64, 1460, 4096, 16384, 65536]));
        assert_eq!(parse_sizes("short"), Ok(vec![1, 64, 1024, 16384, 64000]));
        assert!(parse_sizes("quick").expect("quick").iter().all(|&s| s <= UDP_MAX_PAYLOAD));
    }

    #[test]
    fn bad_sizes_say_what_is_valid() {
        assert_eq!(parse_sizes(""), Err(PlanError::Empty("".into())));
        assert_eq!(parse_sizes("0"), Err(PlanError::Zero("0".into())));
        assert_eq!(parse_sizes("0..8"), Err(PlanError::Zero("0..8".into())));
        assert_eq!(parse_sizes("8k..1k"), Err(PlanError::Backwards("8k..1k".into())));
        assert_eq!(parse_sizes("1..8*1"), Err(PlanError::BadStep("1..8*1".into())));
        assert_eq!(parse_sizes("1..8+0"), Err(PlanError::BadStep("1..8+0".into())));
        assert!(matches!(parse_sizes("1..8x2"), Err(PlanError::Unit(_))));
        assert_eq!(parse_sizes("1..1G+1"), Err(PlanError::TooMany));
        let msg = parse_sizes("fast").expect_err("not a preset").to_string();
        assert!(msg.contains("64k"), "{msg}");
        let msg = parse_sizes("1..8*1").expect_err("bad").to_string();
        assert!(msg.contains("*F") && msg.contains("+S"), "{msg}");
    }

    #[test]
    fn protocols() {
        assert_eq!(parse_protos("udp,tcp"), Ok(vec![Proto::Udp, Proto::Tcp]));
        assert_eq!(parse_protos("all"), Ok(Proto::ALL.to_vec()));
        assert_eq!(parse_protos("TCP,tcp"), Ok(vec![Proto::Tcp]));
        let e = parse_protos("quic").expect_err("unknown");
        assert_eq!(e.to_string(), "unknown protocol \"quic\": valid protocols are tcp, udp, sendfile (or all)");
        assert_eq!(parse_protos(","), Err(PlanError::NoProto));
    }

    #[test]
    fn limits() {
        assert!(check_limits(&[Proto::Udp], &[65_507]).is_ok());
        let e = check_limits(&[Proto::Tcp, Proto::Udp], &[65_536]).expect_err("too big for udp");
        assert!(e.to_string().contains("65507"), "{e}");
        let e = check_limits(&[Proto::Tcp], &[10 << 30]).expect_err("10 GiB");
        assert!(matches!(e, PlanError::TooLarge { proto: Proto::Tcp, .. }));
    }

    #[test]
    fn interleaving_puts_every_protocol_at_each_size() {
        let pts = interleave(&[Proto::Tcp, Proto::Udp], &[1, 2]);
        let got: Vec<(Proto, u64)> = pts.iter().map(|p| (p.proto, p.size)).collect();
        assert_eq!(got, vec![(Proto::Tcp, 1), (Proto::Udp, 1), (Proto::Tcp, 2), (Proto::Udp, 2)]);
    }
}
