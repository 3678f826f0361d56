//! Fuzzing on stable Rust, bounded in time: every decoder and parser a peer
//! or a user can reach is fed mutations of a corpus kept in the repository
//! (`fuzz/corpus/TARGET/`), and must answer every input with a value or an
//! error, never a panic, a hang or an allocation out of proportion.
//!
//! `cargo test -p gridperf-core --test fuzz` runs each target for
//! FUZZ_SECONDS (default 3); `FUZZ_SECONDS=600` for a long run. An input
//! that panics is written to target/fuzz-crashes/ and fails the test; new
//! inputs that reach new outcomes are not kept (no coverage feedback: a
//! mutator, not a coverage-guided fuzzer), so the corpus is what seeds it.

use gridperf_core::auth::{Cidr, Key};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, DataHello, HostLimits};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// xorshift64*: fast, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to JSON, numbers and our units.
const INTERESTING: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"-1",
    b"0",
    b"1e999",
    b"18446744073709551616",
    b"4294967296",
    b"null",
    b"true",
    b"\"tcp\"",
    b"\"udp\"",
    b"\xff",
    b"\x00",
    b"NaN",
    b"..",
    b"/",
    b"%",
    b"k",
    b"KiB",
    b"ms",
    b"G",
    b"\xe2\x80\xae",
];

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => v.insert(at, rng.next() as u8),
            3 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            4 => {
                let s = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, s.iter().copied());
            }
            5 if !v.is_empty() => {
                // repeat a chunk: deep nesting, long arrays
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(32)).min(v.len());
                let chunk = v[start..end].to_vec();
                for _ in 0..rng.below(64) {
                    v.splice(at..at, chunk.iter().copied());
                }
            }
            6 if !corpus.is_empty() => {
                // splice in part of another seed
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len());
                let to = (from + rng.below(other.len() - from + 1)).min(other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            _ => {
                if let Some(i) = (!v.is_empty()).then(|| rng.below(v.len())) {
                    // a digit run: numbers at and past every bound
                    v.splice(i..i, std::iter::repeat_n(b'9', 1 + rng.below(24)));
                }
            }
        }
    }
    v.truncate(1 << 20);
    v
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target)
}

fn load(target: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir(target))
        .map(|d| d.flatten().filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    out.sort();
    assert!(!out.is_empty(), "no corpus for {target} in {}", corpus_dir(target).display());
    out
}

fn budget() -> Duration {
    let s: f64 = std::env::var("FUZZ_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    Duration::from_secs_f64(s)
}

/// Feeds `target` mutations of its corpus for the budget; fails on a panic.
fn fuzz(target: &str, check: fn(&[u8])) {
    let corpus = load(target);
    for seed in &corpus {
        check(seed);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    let until = Instant::now() + budget();
    let mut runs = 0u64;
    let mut slowest = Duration::ZERO;
    while Instant::now() < until {
        let pick = rng.below(corpus.len());
        let input = mutate(&mut rng, &corpus[pick], &corpus);
        let t0 = Instant::now();
        if std::panic::catch_unwind(|| check(&input)).is_err() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-crashes");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{target}-{runs}"));
            let _ = std::fs::write(&path, &input);
            panic!("{target}: input {runs} panicked; it is in {}", path.display());
        }
        slowest = slowest.max(t0.elapsed());
        runs += 1;
    }
    eprintln!("fuzz {target}: {runs} inputs in {:?}, none panicked; slowest {slowest:?}", budget());
    assert!(slowest < Duration::from_secs(1), "{target}: one input took {slowest:?}");
}

#[test]
fn frames() {
    fuzz("frame", |b| {
        for max in [wire::MAX_CLIENT_FRAME, wire::MAX_FRAME] {
            if let Ok(body) = wire::read_frame_max(&mut &b[..], max) {
                assert!(body.len() <= max);
                let _ = wire::decode::<ClientMsg>(&body);
                let _ = wire::decode::<AgentMsg>(&body);
            }
        }
    });
}

#[test]
fn client_messages() {
    fuzz("client-msg", |b| {
        if let Ok(m) = wire::decode::<ClientMsg>(b) {
            if let ClientMsg::Request(r) = &m {
                let _ = r.test.validate(&HostLimits::default());
                let _ = r.test.describe();
            }
            // what decodes encodes again, to the same message
            if let Ok(frame) = wire::encode(&m) {
                assert_eq!(wire::decode::<ClientMsg>(&frame[4..]).ok(), Some(m));
            }
        }
    });
}

#[test]
fn agent_messages() {
    fuzz("agent-msg", |b| {
        if let Ok(m) = wire::decode::<AgentMsg>(b) {
            let _ = wire::encode(&m);
        }
    });
}

#[test]
fn data_hellos() {
    fuzz("hello", |b| {
        if let Ok(h) = DataHello::decode(b) {
            assert_eq!(DataHello::decode(&h.encode()).ok(), Some(h));
        }
    });
}

#[test]
fn user_figures() {
    fuzz("units", |b| {
        let s = String::from_utf8_lossy(b);
        let _ = gridperf_core::units::parse_bytes(&s, "x");
        let _ = gridperf_core::units::parse_duration_ns(&s, "x");
        let _ = gridperf_core::labcfg::parse_rate_bps(&s);
        let _ = gridperf_core::labcfg::parse_loss(&s);
        let _ = gridperf_core::labcfg::parse_queue(&s);
        let _ = gridperf_core::plan::parse_sizes(&s);
        let _ = gridperf_core::plan::parse_protos(&s);
        let _ = s.parse::<Cidr>();
        if let Ok(p) = gridperf_core::labcfg::profile("man") {
            let mut set = p.settings();
            let _ = gridperf_core::labcfg::apply_set(&mut set, &s);
        }
    });
}

#[test]
fn key_files() {
    fuzz("keys", |b| {
        let s = String::from_utf8_lossy(b);
        let _ = Key::parse_client_file(&s);
        let _ = Key::parse_authorized(&s);
    });
}

/// Writes the seed corpus (run once, by hand, when a message changes:
/// `cargo test -p gridperf-core --test fuzz write_the_corpus -- --ignored`).
#[test]
#[ignore]
fn write_the_corpus() {
    use gridperf_core::plan::Proto;
    use gridperf_core::wire::{
        DataKind, Direction, EchoSpec, ErrorCode, FanoutSpec, StepRequest, StreamSpec, Test, TestRequest,
    };
    let echo = EchoSpec {
        protos: vec![Proto::Tcp, Proto::Udp, Proto::Sendfile],
        max_size: 65_536,
        nodelay: true,
        busy_poll: false,
        cpu: Some(0),
        sndbuf: Some(1 << 20),
        rcvbuf: None,
        udp_port: Some(40_000),
        timeout_ms: 1000,
    };
    let stream =
        StreamSpec { pacing_bps: Some(1_000_000_000), gap_us: Some(5), ..StreamSpec::tcp(Direction::Both, 10_000) };
    let fan = FanoutSpec { size: 4096, messages: 256, buffer: Some(16_384), nodelay: true, idle_ms: 6000 };
    let client = [
        ClientMsg::Hello {
            magic: "gridperf".into(),
            version: wire::PROTOCOL_VERSION,
            software: "gridperf 0.1.0".into(),
        },
        ClientMsg::Auth { key: "alice".into(), nonce: "ab".repeat(32), proof: "cd".repeat(32) },
        ClientMsg::Request(TestRequest { queue_ms: 3000, test: Test::Rtt(echo.clone()) }),
        ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Transfer(echo) }),
        ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Stream(stream) }),
        ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Fanout(fan) }),
        ClientMsg::Step(StepRequest { proto: "tcp".into(), size: 1460, exchanges: Some(1000) }),
        ClientMsg::StepEnd,
        ClientMsg::Finish,
        ClientMsg::StreamGo,
        ClientMsg::Abort { reason: "interrupted".into() },
    ];
    let agent = [
        AgentMsg::Welcome {
            magic: "gridperf".into(),
            version: 3,
            software: "gridperf 0.1.0".into(),
            challenge: Some("ef".repeat(32)),
        },
        AgentMsg::AuthOk { proof: "01".repeat(32) },
        AgentMsg::Queued { ahead: 2 },
        AgentMsg::StepReady,
        AgentMsg::StreamInterval { t_ms: 1000, bytes: vec![123_456_789, 0] },
        AgentMsg::StreamIntervals { index: 1, intervals: vec![1, 2, 3, u64::MAX] },
        AgentMsg::Error { code: ErrorCode::Refused, message: "no".into() },
    ];
    let write = |target: &str, name: String, bytes: &[u8]| {
        let d = corpus_dir(target);
        std::fs::create_dir_all(&d).expect("corpus dir");
        std::fs::write(d.join(name), bytes).expect("seed");
    };
    for (k, m) in client.iter().enumerate() {
        let frame = wire::encode(m).expect("encode");
        write("client-msg", format!("{k:02}.json"), &frame[4..]);
        write("frame", format!("client-{k:02}"), &frame);
    }
    for (k, m) in agent.iter().enumerate() {
        let frame = wire::encode(m).expect("encode");
        write("agent-msg", format!("{k:02}.json"), &frame[4..]);
        write("frame", format!("agent-{k:02}"), &frame);
    }
    for (k, kind) in [DataKind::Tcp, DataKind::Sendfile, DataKind::Stream, DataKind::Fanout].into_iter().enumerate() {
        write("hello", format!("{k:02}"), &DataHello::new(0x0123_4567_89ab_cdef, kind, 7).encode());
    }
    for (k, s) in [
        "64KiB",
        "1.5M",
        "250us",
        "10ms",
        "1h",
        "100M",
        "1G",
        "0.1%",
        "1bdp",
        "256KB",
        "1000pkt",
        "1,64..1K*2",
        "1..6000+250",
        "tcp,udp,sendfile",
        "10.0.0.0/8",
        "2001:db8::/32",
        "rate=1G",
        "rtt=20ms",
        "loss=1%",
        "queue=2bdp",
        "mtu=9000",
    ]
    .iter()
    .enumerate()
    {
        write("units", format!("{k:02}"), s.as_bytes());
    }
    let key = Key::new("alice@site-a", [7; 32]).expect("key");
    write("keys", "client".into(), key.client_line().as_bytes());
    write("keys", "authorized".into(), format!("# site\n{}{}", key.authorized_line(), key.client_line()).as_bytes());
}
