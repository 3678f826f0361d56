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
use gridperf_core::fuzzing;
use gridperf_core::wire::{self, AgentMsg, ClientMsg, DataHello, HostLimits};
use std::path::Path;

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fuzz(target: &str, check: fn(&[u8])) {
    fuzzing::fuzz(here(), target, check);
}

fn corpus_dir(target: &str) -> std::path::PathBuf {
    fuzzing::corpus_dir(here(), target)
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
        let _ = gridperf_core::lab::cfg::parse_rate_bps(&s);
        let _ = gridperf_core::lab::cfg::parse_loss(&s);
        let _ = gridperf_core::lab::cfg::parse_queue(&s);
        let _ = gridperf_core::model::plan::parse_sizes(&s);
        let _ = gridperf_core::model::plan::parse_protos(&s);
        let _ = s.parse::<Cidr>();
        if let Ok(p) = gridperf_core::lab::cfg::profile("man") {
            let mut set = p.settings();
            let _ = gridperf_core::lab::cfg::apply_set(&mut set, &s);
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

#[test]
fn captures() {
    // pcap and pcapng as a stream, each frame decoded, the TCP segments traced
    fuzz("capture", |b| {
        let Ok(mut r) = gridperf_core::capture::CaptureReader::new(b) else { return };
        let mut an = gridperf_core::capture::trace::Analyzer::new(100_000_000);
        let mut data = Vec::new();
        let mut frames = 0;
        while let Some(f) = r.next_frame_into(&mut data) {
            let Ok(head) = f else { break };
            frames += 1;
            if frames > 10_000 {
                break;
            }
            if let Ok(seg) = gridperf_core::capture::decode(head.link, &data) {
                an.segment(head.t_ns, &seg);
            }
        }
        let _ = an.finish();
    });
}

#[test]
fn copy_frames() {
    // a block's header and its acknowledgment, as a peer sends them
    fuzz("copy-frame", |b| {
        use gridperf_core::wire::block::{Ack, BlockHeader, ACK_LEN, FRAME_HEADER};
        if let Ok(h) = b.get(..FRAME_HEADER).unwrap_or(&[]).try_into() {
            if let Ok(head) = BlockHeader::decode(h) {
                assert_eq!(BlockHeader::decode(&head.encode()), Ok(head));
            }
        }
        if let Ok(a) = b.get(..ACK_LEN).unwrap_or(&[]).try_into() {
            if let Some(ack) = Ack::decode(a) {
                assert_eq!(Ack::decode(&ack.encode()), Some(ack));
            }
        }
    });
}

#[test]
fn udp_stream_headers() {
    fuzz("udp-header", |b| {
        if let Some((stream, seq, t)) = gridperf_core::wire::udp::decode_udp_header(b) {
            let mut again = b.to_vec();
            gridperf_core::wire::udp::encode_udp_header(&mut again, stream, seq, t);
            assert_eq!(gridperf_core::wire::udp::decode_udp_header(&again), Some((stream, seq, t)));
        }
        let mut t = gridperf_core::analysis::flow::SeqTracker::new();
        for chunk in b.chunks(24) {
            if let Some((_, seq, send)) = gridperf_core::wire::udp::decode_udp_header(chunk) {
                t.record(seq, chunk.len() as u64, send, send.wrapping_add(1000));
            }
        }
    });
}

/// Writes the seed corpus (run once, by hand, when a message changes:
/// `cargo test -p gridperf-core --test fuzz write_the_corpus -- --ignored`).
#[test]
#[ignore]
fn write_the_corpus() {
    use gridperf_core::model::plan::Proto;
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
    // a capture: a handshake, data and its ACK, as pcap and pcapng
    {
        let mut w = gridperf_core::capture::PcapWriter::new(Vec::new(), 101, 65_535).expect("pcap");
        let tcp = |sp: u16, dp: u16, seq: u32, ack: u32, flags: u8, len: usize| {
            let (a, b) = if sp == 5201 { (2u8, 1u8) } else { (1, 2) };
            let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, a, 10, 0, 0, b];
            let total = (20 + 20 + len) as u16;
            p[2..4].copy_from_slice(&total.to_be_bytes());
            let mut t = vec![0u8; 20];
            t[0..2].copy_from_slice(&sp.to_be_bytes());
            t[2..4].copy_from_slice(&dp.to_be_bytes());
            t[4..8].copy_from_slice(&seq.to_be_bytes());
            t[8..12].copy_from_slice(&ack.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = flags;
            t[14..16].copy_from_slice(&65535u16.to_be_bytes());
            p.extend(t);
            p.extend(std::iter::repeat_n(0xab, len));
            p
        };
        for (k, (f, t)) in [
            (tcp(40000, 5201, 1000, 0, 0x02, 0), 0i64),
            (tcp(5201, 40000, 5000, 1001, 0x12, 0), 20_000_000),
            (tcp(40000, 5201, 1001, 5001, 0x10, 0), 20_100_000),
            (tcp(40000, 5201, 1001, 5001, 0x18, 1448), 21_000_000),
            (tcp(5201, 40000, 5001, 2449, 0x10, 0), 41_000_000),
        ]
        .into_iter()
        .enumerate()
        {
            let _ = k;
            w.write(t, &f, f.len() as u32).expect("frame");
        }
        write("capture", "raw-ip.pcap".into(), &w.into_inner());
        // pcapng: a section header, an interface, one enhanced packet
        let mut ng = Vec::new();
        let block = |ng: &mut Vec<u8>, kind: u32, body: &[u8]| {
            let len = (12 + body.len()).div_ceil(4) * 4;
            ng.extend_from_slice(&kind.to_le_bytes());
            ng.extend_from_slice(&(len as u32).to_le_bytes());
            ng.extend_from_slice(body);
            ng.resize(ng.len() + (len - 12 - body.len()), 0);
            ng.extend_from_slice(&(len as u32).to_le_bytes());
        };
        let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        block(&mut ng, 0x0a0d_0d0a, &shb);
        let mut idb = 101u16.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0]);
        idb.extend_from_slice(&65_535u32.to_le_bytes());
        block(&mut ng, 1, &idb);
        let pkt = tcp(40000, 5201, 1001, 5001, 0x18, 100);
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&1_000_000u32.to_le_bytes());
        epb.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        epb.extend_from_slice(&pkt);
        block(&mut ng, 6, &epb);
        write("capture", "raw-ip.pcapng".into(), &ng);
    }
    // a copy's block header and acknowledgments
    {
        use gridperf_core::wire::block::{Ack, AckStatus, BlockHeader};
        let h = BlockHeader { file: 3, index: 77, len: 65_536, cv: [9; 32] };
        write("copy-frame", "header".into(), &h.encode());
        for (k, status) in [AckStatus::Ok, AckStatus::Damaged, AckStatus::Failed].into_iter().enumerate() {
            write("copy-frame", format!("ack-{k}"), &Ack { file: 1, index: 2, status }.encode());
        }
    }
    // UDP stream datagrams' headers
    {
        let mut b = vec![0u8; 64];
        for (k, seq) in [0u64, 1, u64::MAX].into_iter().enumerate() {
            gridperf_core::wire::udp::encode_udp_header(&mut b, k as u32, seq, 1_000_000_007);
            write("udp-header", format!("{k:02}"), &b);
        }
    }
    let key = Key::new("alice@site-a", [7; 32]).expect("key");
    write("keys", "client".into(), key.client_line().as_bytes());
    write("keys", "authorized".into(), format!("# site\n{}{}", key.authorized_line(), key.client_line()).as_bytes());
}
