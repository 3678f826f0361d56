//! The agent against bad, hostile, busy and vanishing clients: each gets a
//! clear answer within a deadline, and the agent goes on serving.

use crate::{opts, TestAgent};
use gridperf::engines::echo::{self, EchoTest};
use gridperf::engines::rtt::{self, RttOptions};
use gridperf::error::Kind;
use gridperf::runner::Session;
use gridperf::runner::Target;
use gridperf_core::model::plan::Proto;
use gridperf_core::model::Measure;
use gridperf_core::wire::{
    self, AgentMsg, ClientMsg, DataHello, DataKind, EchoSpec, ErrorCode, Test, TestRequest, PROTOCOL_VERSION,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

pub fn raw(agent: &TestAgent) -> TcpStream {
    let s = TcpStream::connect(agent.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s
}

pub fn hello(s: &mut TcpStream, version: u32) -> AgentMsg {
    wire::write_msg(s, &ClientMsg::Hello { magic: wire::MAGIC.into(), version, software: "test".into() })
        .expect("send hello");
    wire::read_msg(s).expect("answer")
}

/// An rtt request for these protocols (a UDP port given when UDP is among them).
pub fn request(protos: &[Proto], max_size: u64) -> TestRequest {
    TestRequest {
        queue_ms: 0,
        test: Test::Rtt(EchoSpec {
            protos: protos.to_vec(),
            max_size,
            nodelay: true,
            busy_poll: false,
            cpu: None,
            sndbuf: None,
            rcvbuf: None,
            udp_port: protos.contains(&Proto::Udp).then_some(9),
            timeout_ms: 1000,
        }),
    }
}

/// Sends a frame of raw JSON (what a client of another version might send).
fn send_raw(s: &mut TcpStream, body: &serde_json::Value) {
    let body = body.to_string();
    s.write_all(&(body.len() as u32).to_be_bytes()).expect("write");
    s.write_all(body.as_bytes()).expect("write");
}

/// A test that holds one of the agent's slots (its data connections open)
/// until it is finished.
fn hold(agent: &TestAgent, queue: Duration) -> gridperf::error::Result<EchoTest> {
    let mut o = opts(&[Proto::Tcp], &[64]);
    o.deadlines.queue = queue;
    echo::start(Measure::Rtt, &Target::remote(agent.addr), &o)
}

/// A short rtt run: proves the agent still serves. It may wait a moment
/// for the slot: the agent frees the slot of a test it ended when the
/// test's thread has returned, a few milliseconds after its error frame
/// reached the client (which then asked at once: busy, 1 run in 5).
fn still_serves(agent: &TestAgent) {
    let mut e = opts(&[Proto::Tcp, Proto::Udp], &[64]);
    e.deadlines.queue = Duration::from_secs(2);
    let o = RttOptions::counted(e, 10, 1);
    let r = rtt::run(&Target::remote(agent.addr), &o, &mut |_| {}).expect("the agent still serves");
    assert!(r.points.iter().all(|p| p.summary.as_ref().is_some_and(|s| s.count == 10)));
}

fn expect_error(msg: AgentMsg, code: ErrorCode) -> String {
    match msg {
        AgentMsg::Error { code: c, message } if c == code => message,
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

#[test]
fn garbage_and_a_4gb_frame_get_an_error_and_the_agent_goes_on() {
    let agent = TestAgent::loopback();
    // an HTTP client: "GET " read as a length is over a gigabyte
    let mut s = raw(&agent);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let m = expect_error(wire::read_msg(&mut s).expect("an error frame"), ErrorCode::TooLarge);
    assert!(m.contains("exceeds the limit"), "{m}");
    // a frame announcing 4 GB
    let mut s = raw(&agent);
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).expect("write");
    expect_error(wire::read_msg(&mut s).expect("an error frame"), ErrorCode::TooLarge);
    // well-framed nonsense
    let mut s = raw(&agent);
    s.write_all(&[0, 0, 0, 4, b'n', b'u', b'l', b'l']).expect("write");
    expect_error(wire::read_msg(&mut s).expect("an error frame"), ErrorCode::BadMessage);
    still_serves(&agent);
}

#[test]
fn version_mismatch_is_explained_on_both_sides() {
    let agent = TestAgent::loopback();
    let mut s = raw(&agent);
    let m = expect_error(hello(&mut s, PROTOCOL_VERSION + 1), ErrorCode::VersionMismatch);
    assert!(
        m.contains(&format!("version {}", PROTOCOL_VERSION + 1)) && m.contains(&format!("version {PROTOCOL_VERSION}")),
        "{m}"
    );

    // a fake agent of a newer protocol: the client says so
    let fake = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = fake.local_addr().expect("addr");
    let t = std::thread::spawn(move || {
        let (mut c, _) = fake.accept().expect("accept");
        let _: ClientMsg = wire::read_msg(&mut c).expect("hello");
        wire::write_msg(
            &mut c,
            &AgentMsg::Welcome {
                magic: wire::MAGIC.into(),
                version: 99,
                software: "gridperf 9".into(),
                challenge: None,
            },
        )
        .expect("welcome");
    });
    // (a client without a key asks for its test right behind its hello: the welcome is read first)
    let e = Session::connect(addr, opts(&[Proto::Tcp], &[1]).deadlines)
        .and_then(|mut s| s.request(request(&[Proto::Tcp], 64).test))
        .expect_err("refused");
    assert_eq!(e.kind, Kind::Refused);
    assert!(e.message.contains("speaks version 99"), "{}", e.message);
    t.join().expect("fake agent");
    still_serves(&agent);
}

#[test]
fn a_request_sent_behind_a_refused_hello_ends_in_the_error_then_a_close_not_a_reset() {
    use std::io::Read;
    let agent = TestAgent::loopback();
    let mut s = raw(&agent);
    // a client of another version sends its request right behind its hello
    // (as a client without a key does): the agent refuses the hello with
    // the request unread; a close then would be a reset, and the client
    // could lose the error frame to it
    let hello = ClientMsg::Hello { magic: wire::MAGIC.into(), version: PROTOCOL_VERSION + 1, software: "test".into() };
    wire::write_msg(&mut s, &hello).expect("hello");
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("request");
    std::thread::sleep(Duration::from_millis(300));
    expect_error(wire::read_msg(&mut s).expect("the error frame"), ErrorCode::VersionMismatch);
    s.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest).map_err(|e| e.kind());
    assert_eq!(end, Ok(0), "after the error: {end:?} (a reset is ConnectionReset)");
    still_serves(&agent);
}

#[test]
fn unknown_protocol_test_kind_and_message_type() {
    let agent = TestAgent::loopback();
    let mut s = raw(&agent);
    assert!(matches!(hello(&mut s, PROTOCOL_VERSION), AgentMsg::Welcome { .. }));
    let mut r = serde_json::to_value(ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("json");
    r["test"]["protos"] = serde_json::json!(["quic"]);
    send_raw(&mut s, &r);
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::Unsupported);
    assert!(m.contains("quic") && m.contains("`tcp`, `udp`, `sendfile`"), "{m}");

    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    let mut r = serde_json::to_value(ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("json");
    r["test"]["kind"] = serde_json::json!("teleport");
    send_raw(&mut s, &r);
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::Unsupported);
    assert!(m.contains("teleport") && m.contains("`stream`"), "{m}");

    // a message type from a newer client
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    let body = br#"{"type":"quantum-entangle"}"#;
    s.write_all(&(body.len() as u32).to_be_bytes()).expect("write");
    s.write_all(body).expect("write");
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::BadMessage);
    assert!(m.contains("quantum-entangle"), "{m}");
    still_serves(&agent);
}

#[test]
fn a_10gb_message_is_refused() {
    let agent = TestAgent::loopback();
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Tcp], 10 << 30))).expect("send");
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::TooLarge);
    assert!(m.contains("10737418240") && m.contains("67108864"), "{m}");
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Udp], 65_508))).expect("send");
    expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::TooLarge);
    still_serves(&agent);
}

#[test]
fn a_silent_client_is_dropped_and_a_vanishing_one_forgotten() {
    let agent = TestAgent::with(|c| c.control_timeout = Duration::from_millis(300));
    // connects and says nothing
    let mut silent = raw(&agent);
    let t0 = Instant::now();
    expect_error(wire::read_msg(&mut silent).expect("an error frame"), ErrorCode::Timeout);
    assert!(t0.elapsed() < Duration::from_secs(3));
    // starts a test, then vanishes mid-frame
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    s.write_all(&[0, 0, 1, 0, b'{']).expect("write");
    drop(s);
    // takes a slot and vanishes after Ready
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("send");
    assert!(matches!(wire::read_msg::<_, AgentMsg>(&mut s).expect("ready"), AgentMsg::Ready { .. }));
    drop(s);
    // the slot comes back once the agent notices (within its control timeout)
    std::thread::sleep(Duration::from_millis(800));
    still_serves(&agent);
}

#[test]
fn a_second_client_is_told_busy_at_once_or_waits_in_the_queue() {
    let agent = TestAgent::loopback();
    // the first client holds the only slot
    let first = hold(&agent, Duration::ZERO).expect("first test");
    // the second gets "busy" at once
    let t0 = Instant::now();
    let e = hold(&agent, Duration::ZERO).err().expect("busy");
    assert_eq!(e.kind, Kind::Refused);
    assert!(e.message.contains("busy") && e.message.contains("--max-tests"), "{}", e.message);
    assert!(t0.elapsed() < Duration::from_secs(1));
    // a third asks to wait 5 s; the first finishes after 300 ms
    let waiter = std::thread::scope(|scope| {
        let w = scope.spawn(|| {
            let t = hold(&agent, Duration::from_secs(5)).map(|t| t.finish().map(|_| ()));
            (t, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let released = Instant::now();
        first.finish().expect("finish");
        let (result, started) = w.join().expect("waiter");
        (result, started, released)
    });
    let (result, started, released) = waiter;
    result.expect("the queued client got its slot").expect("and finished");
    assert!(started >= released);
}

#[test]
fn max_tests_lets_tests_run_side_by_side() {
    let agent = TestAgent::with(|c| c.max_tests = 2);
    let _a = hold(&agent, Duration::ZERO).expect("a runs");
    let _b = hold(&agent, Duration::ZERO).expect("b runs beside a");
    assert_eq!(hold(&agent, Duration::ZERO).err().expect("c is refused").kind, Kind::Refused);
}

#[test]
fn a_silent_agent_and_a_closed_port_end_within_the_deadline() {
    // accepts, never answers
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let mut d = opts(&[Proto::Tcp], &[1]).deadlines;
    d.control = Duration::from_millis(300);
    let t0 = Instant::now();
    let e =
        Session::connect(addr, d).and_then(|mut s| s.request(request(&[Proto::Tcp], 64).test)).expect_err("no answer");
    assert_eq!(e.kind, Kind::Network);
    assert!(e.message.contains("no answer"), "{}", e.message);
    assert!(t0.elapsed() < Duration::from_secs(2));
    drop(silent);
    // nobody listens
    let e = Session::connect(addr, d).err().expect("refused");
    assert_eq!(e.kind, Kind::Network);
    assert!(e.message.contains("gridperf serve"), "{}", e.message);
}

#[test]
fn a_stranger_on_the_data_port_is_ignored() {
    let agent = TestAgent::loopback();
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("send");
    let (port, token) = match wire::read_msg::<_, AgentMsg>(&mut s).expect("ready") {
        AgentMsg::Ready { tcp_port, token, .. } => (tcp_port.expect("port"), token),
        other => panic!("{other:?}"),
    };
    // a connection with the wrong token is dropped
    let mut stranger = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stranger.write_all(&DataHello::new(token ^ 2, DataKind::Tcp, 0).encode()).expect("write");
    stranger.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut b = [0u8; 1];
    assert!(matches!(stranger.read(&mut b), Ok(0) | Err(_)));
    // the real one is taken
    let mut data = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    data.write_all(&DataHello::new(token, DataKind::Tcp, 0).encode()).expect("write");
    wire::write_msg(&mut s, &ClientMsg::Step(wire::StepRequest { proto: "tcp".into(), size: 4, exchanges: Some(1) }))
        .expect("step");
    assert!(matches!(wire::read_msg::<_, AgentMsg>(&mut s).expect("ready"), AgentMsg::StepReady));
    data.write_all(b"ping").expect("ping");
    let mut back = [0u8; 4];
    data.read_exact(&mut back).expect("echo");
    assert!(matches!(wire::read_msg::<_, AgentMsg>(&mut s).expect("done"), AgentMsg::StepDone { .. }));
}

#[test]
fn a_client_trickling_a_frame_is_cut_off_at_the_control_deadline() {
    let agent = TestAgent::with(|c| c.control_timeout = Duration::from_millis(500));
    let mut s = raw(&agent);
    let t0 = Instant::now();
    // a 100-byte frame, one byte every 100 ms: each read is quick, the whole is not
    s.write_all(&100u32.to_be_bytes()).expect("write");
    let writer = s.try_clone().expect("clone");
    let t = std::thread::spawn(move || {
        let mut w = writer;
        for _ in 0..30 {
            if w.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let m = expect_error(wire::read_msg(&mut s).expect("an error frame"), ErrorCode::Timeout);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(m.contains("before hello"), "{m}");
    t.join().expect("writer");
    still_serves(&agent);
}

#[test]
fn a_stream_request_past_any_bound_is_refused_before_anything_is_made() {
    use gridperf_core::wire::{Direction, StreamSpec};
    let agent = TestAgent::loopback();
    // one request of this shape held 256 MB and 18 threads for good
    let spec = StreamSpec { streams: 8, gap_us: Some(u64::MAX), ..StreamSpec::tcp(Direction::Down, 1000) };
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Stream(spec) })).expect("send");
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::Unsupported);
    assert!(m.contains("gap") && m.contains("at most 1000000 us"), "{m}");
    still_serves(&agent);
}

#[test]
fn with_auth_a_client_needs_the_key_and_a_replayed_answer_is_refused() {
    use gridperf_core::auth::{hex, unhex, Key};
    let key = Key::new("alice", [7u8; 32]).expect("key");
    let k = key.clone();
    let agent = TestAgent::with(move |c| c.auth = Some(std::sync::Arc::new(vec![k])));
    let challenge = |m: AgentMsg| match m {
        AgentMsg::Welcome { challenge: Some(c), .. } => unhex(&c).expect("32 bytes of hex"),
        other => panic!("expected a challenge, got {other:?}"),
    };
    // a client that asks for a test without the key spends nothing: refused at once
    let mut s = raw(&agent);
    challenge(hello(&mut s, PROTOCOL_VERSION));
    wire::write_msg(&mut s, &ClientMsg::Request(request(&[Proto::Tcp], 64))).expect("send");
    let m = expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::Refused);
    assert!(m.contains("--key FILE"), "{m}");
    // the right answer is accepted, and the agent proves the key too
    let mut s = raw(&agent);
    let agent_nonce = challenge(hello(&mut s, PROTOCOL_VERSION));
    let mine = [9u8; 32];
    let answer =
        ClientMsg::Auth { key: "alice".into(), nonce: hex(&mine), proof: key.client_proof(&agent_nonce, &mine) };
    wire::write_msg(&mut s, &answer).expect("auth");
    match wire::read_msg(&mut s).expect("answer") {
        AgentMsg::AuthOk { proof } => assert!(key.agent_proves(&agent_nonce, &mine, &proof)),
        other => panic!("expected auth-ok, got {other:?}"),
    }
    // the same answer, recorded and played on another connection: refused
    let mut s2 = raw(&agent);
    let second = challenge(hello(&mut s2, PROTOCOL_VERSION));
    assert_ne!(second, agent_nonce, "every connection gets a fresh challenge");
    wire::write_msg(&mut s2, &answer).expect("replay");
    let m = expect_error(wire::read_msg(&mut s2).expect("answer"), ErrorCode::Refused);
    assert!(m.contains("authentication failed for key \"alice\""), "{m}");
    // a wrong secret under the right name: the same refusal
    let mut s3 = raw(&agent);
    let n3 = challenge(hello(&mut s3, PROTOCOL_VERSION));
    let wrong = Key::new("alice", [8u8; 32]).expect("key");
    let bad = ClientMsg::Auth { key: "alice".into(), nonce: hex(&mine), proof: wrong.client_proof(&n3, &mine) };
    wire::write_msg(&mut s3, &bad).expect("auth");
    expect_error(wire::read_msg(&mut s3).expect("answer"), ErrorCode::Refused);
}

#[test]
fn a_silent_client_holds_a_test_no_longer_than_the_agents_max_idle() {
    use gridperf_core::wire::StepRequest;
    let agent = TestAgent::with(|c| c.max_idle = Duration::from_secs(1));
    let mut s = raw(&agent);
    hello(&mut s, PROTOCOL_VERSION);
    // it asks for a 60 s per-message timeout (which let it hold the slot 125 s), then says nothing
    let mut r = request(&[Proto::Udp], 64);
    if let Test::Rtt(e) = &mut r.test {
        e.timeout_ms = 60_000;
    }
    wire::write_msg(&mut s, &ClientMsg::Request(r)).expect("request");
    assert!(matches!(wire::read_msg(&mut s).expect("ready"), AgentMsg::Ready { .. }));
    let step = StepRequest { proto: "udp".into(), size: 64, exchanges: None };
    wire::write_msg(&mut s, &ClientMsg::Step(step)).expect("step");
    assert!(matches!(wire::read_msg(&mut s).expect("step-ready"), AgentMsg::StepReady));
    let t0 = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let m = expect_error(wire::read_msg(&mut s).expect("the agent gives up"), ErrorCode::Timeout);
    let held = t0.elapsed();
    assert!(held < Duration::from_secs(4), "the slot was held {held:?} ({m})");
    still_serves(&agent);
}

#[test]
fn a_copy_client_that_says_go_and_leaves_before_its_connections_frees_the_slot_at_once() {
    use gridperf_core::wire::{CopyDirection, CopyFile, CopySpec};
    let root = std::env::temp_dir().join(format!("gridperf-test-go-and-leave-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("root");
    let r = root.clone();
    // one test at a time, and a control deadline far above the wait below
    let agent = TestAgent::with(move |c| {
        c.root = Some(r);
        c.control_timeout = Duration::from_secs(20);
    });
    let mut s = raw(&agent);
    assert!(matches!(hello(&mut s, PROTOCOL_VERSION), AgentMsg::Welcome { .. }));
    let spec = CopySpec {
        direction: CopyDirection::Push,
        files: 1,
        streams: 2,
        block: 1 << 20,
        window: None,
        congestion: None,
        pacing_bps: None,
        resume: false,
        force: false,
        checksum: None,
        encrypt: None,
        connections: 2,
        restart: false,
        tail: false,
        auto: None,
        senders: Vec::new(),
        join: false,
    };
    wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Copy(spec) })).expect("request");
    assert!(matches!(wire::read_msg(&mut s).expect("ready"), AgentMsg::Ready { .. }));
    let files = vec![CopyFile { path: "f.dat".into(), size: 10, mtime_ns: 0, digest: None, origin: None }];
    wire::write_msg(&mut s, &ClientMsg::CopyFiles { files }).expect("files");
    assert!(matches!(wire::read_msg(&mut s).expect("needs"), AgentMsg::CopyNeeds { .. }));
    // stream-go ahead of the data connections, as a client does now, then gone
    wire::write_msg(&mut s, &ClientMsg::StreamGo).expect("go");
    drop(s);
    // the agent sees the client gone while it waits for the connections
    // (its stream-go still unread), not at its 20 s deadline
    let t0 = Instant::now();
    loop {
        match hold(&agent, Duration::ZERO) {
            Ok(_) => break,
            Err(e) if e.kind == Kind::Refused && t0.elapsed() < Duration::from_secs(3) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("the slot is still taken after {:?}: {e}", t0.elapsed()),
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A connection to `to` from the loopback address `from` (127.0.0.x).
fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&std::net::SocketAddr::from((from, 0)).into()).expect("bind the source");
    s.connect(&to.into()).expect("connect");
    s.into()
}

#[test]
fn silent_connections_from_nine_addresses_do_not_lock_a_client_out() {
    // 8 silent control connections from each of 9 addresses (72, past
    // --max-connections 64): the real client, once they are no longer new,
    // takes the place of the oldest silent one and runs its test
    let agent = TestAgent::with(|c| c.max_connections = 64);
    let mut silent = Vec::new();
    for a in 2..=10u8 {
        for _ in 0..8 {
            silent.push(connect_from(std::net::Ipv4Addr::new(127, 0, 0, a), agent.addr));
        }
    }
    std::thread::sleep(gridperf::agent::conns::SETTLE_GRACE + Duration::from_millis(200));
    for _ in 0..3 {
        still_serves(&agent);
    }
    drop(silent);
}

#[test]
fn failed_authentications_are_slowed_down_at_the_door() {
    use gridperf_core::auth::{hex, Key};
    let key = Key::new("alice", [7u8; 32]).expect("key");
    let agent = TestAgent::with(move |c| c.auth = Some(std::sync::Arc::new(vec![key])));
    let wrong = Key::new("alice", [8u8; 32]).expect("key");
    // 2 s of wrong answers from one address, as fast as the agent answers
    let (mut challenged, mut at_the_door) = (0, 0);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let mut s = raw(&agent);
        match hello(&mut s, PROTOCOL_VERSION) {
            AgentMsg::Welcome { challenge: Some(c), .. } => {
                challenged += 1;
                let n = gridperf_core::auth::unhex(&c).expect("hex");
                let mine = [1u8; 32];
                let bad =
                    ClientMsg::Auth { key: "alice".into(), nonce: hex(&mine), proof: wrong.client_proof(&n, &mine) };
                wire::write_msg(&mut s, &bad).expect("auth");
                expect_error(wire::read_msg(&mut s).expect("answer"), ErrorCode::Refused);
            }
            AgentMsg::Error { code: ErrorCode::Busy, message } => {
                assert!(message.contains("failed to authenticate: wait"), "{message}");
                at_the_door += 1;
            }
            other => panic!("expected a challenge or the back-off, got {other:?}"),
        }
    }
    // the back-off doubles from 0.1 s after two free failures: 0.1+0.2+0.4+0.8 s take the 2 s
    assert!(challenged <= 8, "{challenged} challenged, {at_the_door} refused at the door");
    assert!(at_the_door > 10 * challenged, "{challenged} challenged, {at_the_door} refused at the door");
    // another address is not held back
    let mut s = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 9), agent.addr);
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    assert!(matches!(hello(&mut s, PROTOCOL_VERSION), AgentMsg::Welcome { challenge: Some(_), .. }));
}

/// A copy's request as a raw client sends it: a push of `files` files.
fn push_spec(streams: u32, connections: u32, block: u64) -> gridperf_core::wire::CopySpec {
    gridperf_core::wire::CopySpec {
        direction: gridperf_core::wire::CopyDirection::Push,
        files: 1,
        streams,
        block,
        window: None,
        congestion: None,
        pacing_bps: None,
        resume: false,
        force: false,
        checksum: None,
        encrypt: None,
        connections,
        restart: false,
        tail: false,
        auto: None,
        senders: Vec::new(),
        join: false,
    }
}

#[test]
fn max_test_memory_bounds_a_copys_connections_and_the_agent_runs_no_more_than_it_counted() {
    use gridperf_core::wire::CopyFile;
    let root = std::env::temp_dir().join(format!("gridperf-test-copy-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("root");
    let (agent, port) =
        crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p"), "--max-test-memory", "64M"]);
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let ask = |spec| {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        assert!(matches!(hello(&mut s, PROTOCOL_VERSION), AgentMsg::Welcome { .. }));
        wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Copy(spec) }))
            .expect("request");
        let m: AgentMsg = wire::read_msg(&mut s).expect("answer");
        (s, m)
    };
    // 4 streams of 16 MiB blocks: 6 connections at once (2 for restarts) are 96 MiB: refused
    let (_, m) = ask(push_spec(4, 32, 16 << 20));
    let m = expect_error(m, ErrorCode::Refused);
    assert!(m.contains("would hold up to") && m.contains("--max-test-memory"), "{m}");
    // one stream, 32 connections over the copy, 16 MiB blocks: 32 threads
    // and 512 MiB of blocks were let in under 64M; it now runs three at a
    // time (what the limit counted), the others waiting without a thread
    let (before, _) = crate::threads_and_fds(agent.id());
    let (mut s, m) = ask(push_spec(1, 32, 16 << 20));
    let AgentMsg::Ready { tcp_port: Some(data_port), token, .. } = m else { panic!("expected ready, got {m:?}") };
    let files = vec![CopyFile { path: "big.dat".into(), size: 256 << 20, mtime_ns: 0, digest: None, origin: None }];
    wire::write_msg(&mut s, &ClientMsg::CopyFiles { files }).expect("files");
    assert!(matches!(wire::read_msg(&mut s).expect("needs"), AgentMsg::CopyNeeds { .. }));
    wire::write_msg(&mut s, &ClientMsg::StreamGo).expect("go");
    let conns: Vec<TcpStream> = (0..32u32)
        .map(|k| {
            let to = std::net::SocketAddr::new(addr.ip(), data_port);
            let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect("data");
            let h = DataHello { token, kind: DataKind::Copy, index: k };
            c.write_all(&h.encode()).expect("hello");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let (during, _) = crate::threads_and_fds(agent.id());
    // the client's session thread, the accept loop's, and at most 3 streams
    assert!(during <= before + 5, "{before} threads before, {during} with 32 connections open");
    drop(conns);
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}
