//! `gridperf fanout`: the variants, the original's deadlock and its
//! evidence, bad input.

use std::process::Output;
use std::time::{Duration, Instant};

fn fanout(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let mut all = vec!["fanout"];
    all.extend_from_slice(args);
    let o = crate::bin().args(&all).output().expect("run gridperf");
    (o, t.elapsed())
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (o, _) = fanout(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("json")
}

#[test]
fn every_variant_completes_where_the_buffers_hold_everything() {
    let _heavy = crate::heavy();
    let v = json(&["--variant", "all", "--size", "1k", "--messages", "1,16", "--nodes", "3", "--repeat", "2"]);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4 * 2);
    for p in points {
        assert!(p["deadlock"].is_null() && p["error"].is_null(), "{p}");
        assert_eq!(p["repetitions"], 2);
        // the document's formula from the point's own times
        let total: u64 = p["times_ns"].as_array().expect("times").iter().map(|t| t.as_u64().expect("ns")).sum();
        let want = 2.0 * 2.0 * p["messages"].as_f64().expect("m") * 3.0 * 1024.0 * 8.0 / (total as f64 / 1e9);
        let got = p["bandwidth_bps"].as_f64().expect("bandwidth");
        assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
    }
}

#[test]
fn the_original_deadlocks_with_small_buffers_and_the_watchdog_says_where() {
    let _heavy = crate::heavy();
    // 16 KiB buffers (the kernel gives 32 KiB) cannot hold 256 x 4 KiB each way
    let (o, took) = fanout(&[
        "--variant",
        "original,drain,drain-thread",
        "--size",
        "4k",
        "--messages",
        "256",
        "-w",
        "16k",
        "--repeat",
        "1",
        "--watchdog",
        "500ms",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(took < Duration::from_secs(30), "a deadlock must not hang gridperf: {took:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let p = &v["points"][0];
    assert_eq!(p["variant"], "original");
    let d = &p["deadlock"];
    assert!(d.is_object(), "the original did not deadlock: {p}");
    assert!(p["bandwidth_bps"].is_null());
    // the evidence: the server blocked sending, the consumers blocked sending their acknowledgments
    let blocked = d["blocked"].as_array().expect("blocked");
    assert!(
        blocked[0]["who"] == "server" && blocked[0]["call"].as_str().is_some_and(|c| c.starts_with("send to node")),
        "{d}"
    );
    assert!(blocked[1..].iter().all(|b| b["call"] == "send to the server"), "{d}");
    // bytes were stuck in the sockets when it stopped
    let queued: u64 = d["queues"].as_array().expect("queues").iter().map(|q| q["outq"].as_u64().unwrap_or(0)).sum();
    assert!(queued > 0, "{d}");
    // draining, on a thread or between sends, gets through the same point
    for p in &v["points"].as_array().expect("points")[1..] {
        assert!(p["deadlock"].is_null() && p["bandwidth_bps"].as_f64().is_some_and(|b| b > 0.0), "{p}");
    }
}

#[test]
fn bad_counts_are_refused_with_what_is_valid() {
    let _heavy = crate::heavy();
    for (args, want) in [
        (&["--messages", "0"][..], "1 to"),
        (&["--size", "0"][..], "1 byte"),
        (&["--nodes", "0"][..], "1 to 64"),
        (&["--nodes", "100000"][..], "1 to 64"),
        (&["--variant", "fast"][..], "original, drain"),
        (&["--repeat", "0"][..], "1 to 10000"),
    ] {
        let (o, _) = fanout(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn consumers_on_an_agent_deadlock_and_drain_the_same() {
    let _heavy = crate::heavy();
    let (mut agent, port) = crate::serve_on("127.0.0.1", &[]);
    let at = format!("127.0.0.1:{port}");
    let idle = crate::settles_at(agent.id(), (0, 0), Duration::from_millis(300));
    let (o, took) = fanout(&[
        "--agents",
        &at,
        "--nodes",
        "2",
        "--variant",
        "original,drain",
        "--size",
        "4k",
        "--messages",
        "16,256",
        "-w",
        "16k",
        "--repeat",
        "1",
        "--watchdog",
        "500ms",
        "--no-store",
        "--json",
    ]);
    // every consumer thread and its connection went with its point (they
    // lingered for their idle time, 6 s here: 16 per test took the agent
    // from 262 to 775 MB)
    let after = crate::settles_at(agent.id(), idle, Duration::from_secs(1));
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(after, idle, "the agent's threads and descriptors after the sweep");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let p = v["points"].as_array().expect("points");
    assert!(p[0]["deadlock"].is_null() && p[0]["error"].is_null(), "{}", p[0]);
    let d = &p[1]["deadlock"];
    assert!(d.is_object(), "{}", p[1]);
    assert!(d["blocked"][0]["call"].as_str().is_some_and(|c| c.starts_with("send to node")), "{d}");
    assert!(d["blocked"][1]["call"].as_str().is_some_and(|c| c.contains("remote agent")), "{d}");
    assert!(p[2]["error"].is_null() && p[3]["bandwidth_bps"].as_f64().is_some(), "{} {}", p[2], p[3]);
}

#[test]
fn an_agent_that_is_not_there_fails_the_sweep_at_once() {
    let _heavy = crate::heavy();
    let port = crate::free_port();
    let at = format!("127.0.0.1:{port}");
    let (o, took) = fanout(&["--agents", &at, "--no-store"]);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot connect to the agent"));
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn a_fanout_client_that_leaves_its_consumers_hanging_leaves_nothing_behind() {
    use gridperf_core::wire::{self, AgentMsg, ClientMsg, DataHello, DataKind, FanoutSpec, Test, TestRequest};
    use std::io::Write;
    use std::net::TcpStream;
    let _heavy = crate::heavy();
    let (agent, port) = crate::serve_on("127.0.0.1", &[]);
    let idle = crate::settles_at(agent.id(), (0, 0), Duration::from_millis(300));
    for round in 0..3 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        crate::agent::hello(&mut s, wire::PROTOCOL_VERSION);
        // consumers told to wait ten minutes for requests of 1 MiB
        let spec = FanoutSpec { size: 1 << 20, messages: 4, buffer: None, nodelay: true, idle_ms: 600_000 };
        wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Fanout(spec) }))
            .expect("request");
        let (data_port, token) = match wire::read_msg(&mut s).expect("answer") {
            AgentMsg::Ready { tcp_port: Some(p), token, .. } => (p, token),
            other => panic!("expected ready, got {other:?}"),
        };
        let conns: Vec<TcpStream> = (0..16)
            .map(|k| {
                let mut c = TcpStream::connect(("127.0.0.1", data_port)).expect("data connection");
                c.write_all(&DataHello::new(token, DataKind::Fanout, k).encode()).expect("hello");
                c
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while crate::threads_and_fds(agent.id()).0 < idle.0 + 16 {
            assert!(Instant::now() < deadline, "the agent did not take the 16 consumers");
            std::thread::sleep(Duration::from_millis(20));
        }
        // the control connection goes; the consumers' connections stay open, silent
        drop(s);
        let after = crate::settles_at(agent.id(), idle, Duration::from_secs(3));
        assert_eq!(after, idle, "round {round}: the agent's threads and descriptors once the client left");
        drop(conns);
    }
}
