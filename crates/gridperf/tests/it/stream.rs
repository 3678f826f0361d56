//! `gridperf stream` over loopback, through the binary and its JSON: byte
//! counts at both ends, pacing, -n, UDP accounting, a broken stream, bad input.

use std::process::Output;

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `gridperf stream ARGS --json` and returns the first run.
fn stream_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["stream"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = run(&all);
    assert!(o.status.success(), "gridperf {all:?}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], "gridperf.stream/1");
    v
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn tcp_byte_counts_agree_at_both_ends_each_way() {
    let _heavy = crate::heavy();
    for dir in [&["-P", "2"][..], &["-P", "2", "--reverse"][..], &["--bidir"][..]] {
        let mut args = vec!["-t", "1", "--sample", "20ms", "-i", "250ms"];
        args.extend_from_slice(dir);
        let v = stream_json(&args);
        let run = &v["runs"][0];
        let streams = run["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 2, "{dir:?}");
        for s in streams {
            assert!(s["broken"].is_null(), "{dir:?}: {}", s["broken"]);
            let (sent, got) = (u(&s["sender"]["bytes"]), u(&s["receiver"]["bytes"]));
            assert!(sent > 10_000_000, "{dir:?}: only {sent} bytes in 1 s on loopback");
            assert_eq!(sent, got, "{dir:?}: stream {} sent {sent}, received {got}", s["index"]);
            // the intervals add up to the total
            let sum: u64 = s["receiver"]["intervals"].as_array().expect("intervals").iter().map(u).sum();
            assert_eq!(sum, got, "{dir:?}");
            // the sender's TCP_INFO timeline was sampled every 20 ms for about 1 s
            let n = s["timeline"].as_array().map_or(0, |t| t.len());
            assert!((30..=80).contains(&n), "{dir:?}: {n} samples");
            assert!(s["verdict"]["text"].as_str().is_some_and(|t| !t.is_empty()), "{dir:?}");
        }
        let total = run["up_bps"].as_f64().unwrap_or(0.0) + run["down_bps"].as_f64().unwrap_or(0.0);
        let sum: f64 = streams.iter().map(|s| s["throughput_bps"].as_f64().expect("bps")).sum();
        assert!((total - sum).abs() < 1.0, "{dir:?}: total {total} vs sum {sum}");
        let jain = run["jain"].as_f64().expect("jain");
        assert!((0.5..=1.0).contains(&jain), "{dir:?}: Jain {jain}");
    }
}

#[test]
fn bytes_mode_moves_exactly_n_per_stream() {
    let _heavy = crate::heavy();
    let v = stream_json(&["-n", "3000000", "-P", "3", "-l", "64k"]);
    for s in v["runs"][0]["streams"].as_array().expect("streams") {
        assert_eq!(u(&s["sender"]["bytes"]), 3_000_000);
        assert_eq!(u(&s["receiver"]["bytes"]), 3_000_000);
    }
}

#[test]
fn pacing_holds_the_rate_within_2_percent() {
    let _heavy = crate::heavy();
    // SO_MAX_PACING_RATE counts the bytes TCP sends: on loopback (MSS 65483)
    // the headers are 0.1% of them
    for rate in [100_000_000.0f64, 400_000_000.0] {
        let r = format!("{}", rate as u64);
        let v = stream_json(&["-t", "3", "--omit", "1", "--pacing", &r]);
        let got = v["runs"][0]["up_bps"].as_f64().expect("bps");
        assert!((got / rate - 1.0).abs() <= 0.02, "paced at {rate} bit/s, measured {got}");
        // a paced sender has nothing to send between its packets
        let s = &v["runs"][0]["streams"][0];
        assert!(s["verdict"]["limit"] == "application" || s["verdict"]["limit"] == "congestion", "{}", s["verdict"]);
    }
}

#[test]
fn a_slow_pace_ends_with_its_time_and_breaks_nothing() {
    let _heavy = crate::heavy();
    // 1 Mbit/s with writes of 128 KiB: the socket's 4 MiB buffer took half a
    // minute of data, every stream was cut as BROKEN at the deadline, and the
    // run exited 0; now what waits unsent is 50 ms at the rate
    let started = std::time::Instant::now();
    let v = stream_json(&["-t", "3", "--pacing", "1M", "--no-store"]);
    let took = started.elapsed();
    let s = &v["runs"][0]["streams"][0];
    assert!(s["broken"].is_null(), "{}", s["broken"]);
    assert_eq!(u(&s["sender"]["bytes"]), u(&s["receiver"]["bytes"]));
    // 3 s at 1 Mbit/s is 375 kB; the first window leaves unpaced (10 segments of up to 64 KiB on loopback)
    let got = u(&s["receiver"]["bytes"]);
    assert!((300_000..=1_100_000).contains(&got), "{got} bytes");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}

#[test]
fn zero_copy_sending_counts_its_completions() {
    let _heavy = crate::heavy();
    let v = stream_json(&["-t", "1", "--zerocopy", "msg"]);
    let s = &v["runs"][0]["streams"][0];
    assert_eq!(u(&s["sender"]["bytes"]), u(&s["receiver"]["bytes"]));
    let z = &s["sender"]["zerocopy"];
    let (sends, done, copied) = (u(&z["sends"]), u(&z["completions"]), u(&z["copied"]));
    assert!(sends > 0 && done <= sends && copied <= done, "{z}");
    // loopback cannot hand pages over: the kernel copies, and says so
    assert!(done > 0 && copied == done, "{z}");
    let v = stream_json(&["-t", "1", "--zerocopy", "sendfile"]);
    let s = &v["runs"][0]["streams"][0];
    assert!(u(&s["receiver"]["bytes"]) > 10_000_000);
    assert_eq!(u(&s["sender"]["bytes"]), u(&s["receiver"]["bytes"]));
}

#[test]
fn udp_at_a_rate_is_counted_by_sequence_number() {
    let _heavy = crate::heavy();
    // 200 Mbit/s of 1500-byte packets for 2 s: 33 333 datagrams. A sender
    // descheduled for more than 5 ms loses the time (it catches up by 5 ms
    // at most), and a hypervisor takes tens of ms now and then (CI: 30 544
    // sent): measured again, up to three times in all, once the machine is quiet
    let in_range = |v: &serde_json::Value| {
        v["runs"][0]["streams"].as_array().is_some_and(|ss| {
            ss.iter().all(|s| (31_300..=34_000).contains(&s["sender"]["datagrams"].as_u64().unwrap_or(0)))
        })
    };
    let mut v = stream_json(&["-u", "-b", "200M", "-t", "2", "-P", "2"]);
    for _ in 0..2 {
        if in_range(&v) {
            break;
        }
        crate::quiet();
        v = stream_json(&["-u", "-b", "200M", "-t", "2", "-P", "2"]);
    }
    for s in v["runs"][0]["streams"].as_array().expect("streams") {
        let sent = u(&s["sender"]["datagrams"]);
        let udp = &s["receiver"]["udp"];
        let distinct = u(&udp["distinct"]);
        assert!((31_300..=34_000).contains(&sent), "{sent} datagrams");
        // loopback with a 4 MiB receive buffer loses nothing
        assert_eq!(distinct, sent, "{udp}");
        assert_eq!(u(&udp["max_seq"]) + 1, sent);
        assert_eq!(u(&udp["duplicates"]), 0);
        let bps = s["throughput_bps"].as_f64().expect("bps");
        // what arrived, over the time it took: the datagrams sent, 1472 bytes each
        let secs = (u(&s["receiver"]["last_ns"]) - u(&s["receiver"]["first_ns"])) as f64 / 1e9;
        assert!((bps - (distinct * 1472 * 8) as f64 / secs).abs() < 1.0, "{bps}");
    }
}

#[test]
fn a_broken_stream_is_reported_with_its_bytes_and_the_others_stand() {
    let _heavy = crate::heavy();
    // printed in full, and the exit says a part of the run failed
    let o = run(&["stream", "-P", "2", "-t", "2", "--fault-break-stream", "5000000", "--no-store", "--json"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 of 2 streams broke"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let streams = v["runs"][0]["streams"].as_array().expect("streams");
    let s0 = &streams[0];
    assert!(s0["broken"].as_str().is_some_and(|b| !b.is_empty()), "{s0}");
    assert!(u(&s0["receiver"]["bytes"]) >= 5_000_000, "{}", s0["receiver"]["bytes"]);
    let s1 = &streams[1];
    assert!(s1["broken"].is_null(), "{}", s1["broken"]);
    assert_eq!(u(&s1["sender"]["bytes"]), u(&s1["receiver"]["bytes"]));
    assert!(u(&s1["receiver"]["bytes"]) > 10 * u(&s0["receiver"]["bytes"]).min(5_000_000));
}

#[test]
fn bad_input_is_refused_with_what_is_valid() {
    let _heavy = crate::heavy();
    let cases: &[(&[&str], &str)] = &[
        (&["-P", "0"], "1 to 128"),
        (&["-P", "129"], "1 to 128"),
        (&["--pacing", "0"], "rate of zero"),
        (&["-t", "-5"], "negative"),
        (&["-t", "0"], "more than zero"),
        (&["-C", "nosuchcc"], "this kernel offers"),
        (&["-w", "2G"], "1 GiB"),
        (&["--zerocopy", "splice"], "sendfile or msg"),
        (&["-u", "-b", "0"], "rate"),
        (&["--sample", "1ms"], "10 ms"),
        (&["-u", "-l", "70000"], "20 to 65507"),
    ];
    for (args, want) in cases {
        let mut all = vec!["stream"];
        all.extend_from_slice(args);
        let o = run(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {:?} not in {}", want, stderr(&o));
    }
}

/// Connects to the agent, says hello and asks for a stream test: the
/// control connection, and the agent's answer.
/// A stream run's options for `spec`: one run, no omit, the tests' deadlines.
fn options(spec: gridperf_core::wire::StreamSpec) -> gridperf::engines::stream::StreamOptions {
    gridperf::engines::stream::StreamOptions {
        spec,
        omit: std::time::Duration::ZERO,
        repeat: 1,
        deadlines: crate::opts(&[], &[]).deadlines,
        path_rate_bps: None,
        notes: Vec::new(),
        client_cpu: None,
        by_interval: None,
    }
}

fn ask(
    agent: &crate::TestAgent,
    spec: gridperf_core::wire::StreamSpec,
) -> (std::net::TcpStream, gridperf_core::wire::AgentMsg) {
    use gridperf_core::wire::{self, ClientMsg, Test, TestRequest};
    let mut s = crate::agent::raw(agent);
    crate::agent::hello(&mut s, wire::PROTOCOL_VERSION);
    wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 0, test: Test::Stream(spec) }))
        .expect("request");
    let answer = wire::read_msg(&mut s).expect("answer");
    (s, answer)
}

#[test]
fn the_agent_refuses_what_the_client_did_not_check() {
    let _heavy = crate::heavy();
    use gridperf_core::wire::{AgentMsg, Direction, StreamSpec};
    let agent = crate::TestAgent::loopback();
    let base = StreamSpec { linger_ms: 1000, ..StreamSpec::tcp(Direction::Up, 1000) };
    for (spec, want) in [
        (StreamSpec { streams: 100_000, ..base.clone() }, "1 to 128"),
        (StreamSpec { send_buffer: Some(1 << 20), window: Some(1 << 20), ..base.clone() }, "one direction"),
        (StreamSpec { recv_buffer: Some(1 << 20), direction: Direction::Both, ..base.clone() }, "one direction"),
        (StreamSpec { recv_buffer: Some(0), ..base.clone() }, "1 byte to 1 GiB"),
    ] {
        let (_s, answer) = ask(&agent, spec);
        match answer {
            AgentMsg::Error { message, .. } => assert!(message.contains(want), "{want}: {message}"),
            other => panic!("{want}: {other:?}"),
        }
    }
}

#[test]
fn a_window_beyond_the_kernel_limit_is_granted_what_it_allows_and_said_so() {
    let _heavy = crate::heavy();
    let max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .expect("net.core.rmem_max");
    let ask = (4 * max).min(1 << 30);
    let v = stream_json(&["-t", "1", "-w", &ask.to_string()]);
    let s = &v["runs"][0]["streams"][0];
    let granted = u(&s["receiver"]["socket"]["rcvbuf_granted"]);
    assert!(granted < 2 * ask, "granted {granted} of {ask} asked");
    assert_eq!(u(&s["receiver"]["socket"]["rcvbuf_requested"]), ask);
    let notes: Vec<String> =
        v["notes"].as_array().expect("notes").iter().filter_map(|n| n.as_str().map(str::to_string)).collect();
    assert!(notes.iter().any(|n| n.contains("net.core.rmem_max") && n.contains(&granted.to_string())), "{notes:?}");
}

/// Regression (issue 12): a stream's last interval, cut short when the
/// stream ended within it, was reported as a whole interval, so its rate
/// read as a collapse (34.6e6 after two ~15e9 intervals). It carries the
/// time it lasted, and its rate is over that time.
#[test]
fn the_last_interval_is_as_long_as_it_lasted() {
    let _heavy = crate::heavy();
    // paced, so that every interval carries the same rate
    let v = stream_json(&["-t", "1.5", "-i", "1s", "--pacing", "200M"]);
    let s = &v["runs"][0]["streams"][0];
    let rates: Vec<f64> =
        s["interval_bps"].as_array().expect("rates").iter().map(|r| r.as_f64().expect("bps")).collect();
    assert_eq!(rates.len(), 2, "{s}");
    let last_ns = u(&s["receiver"]["last_interval_ns"]);
    assert!((300_000_000..=900_000_000).contains(&last_ns), "the last interval lasted {last_ns} ns");
    assert!((rates[1] / rates[0] - 1.0).abs() < 0.25, "{rates:?}: the last interval's rate is not the others'");
    // its bytes over its time
    let bytes = u(&s["receiver"]["intervals"][1]);
    assert!((rates[1] - bytes as f64 * 8.0 / (last_ns as f64 / 1e9)).abs() < 1.0, "{s}");
}

/// Regression (issue 12): while waiting for a stream test's data
/// connections the agent watched only its listener, so a client that hung
/// up after `ready` held the only slot until the control timeout (10 s).
/// The slot comes back at once.
#[test]
fn a_stream_client_that_hangs_up_after_ready_frees_the_slot_at_once() {
    let _heavy = crate::heavy();
    use gridperf::engines::stream;
    use gridperf::runner::Target;
    use gridperf_core::wire::{AgentMsg, Direction, StreamSpec};
    let agent = crate::TestAgent::with(|c| c.control_timeout = std::time::Duration::from_secs(10));
    let spec = StreamSpec { linger_ms: 1000, ..StreamSpec::tcp(Direction::Up, 200) };
    let (s, answer) = ask(&agent, spec.clone());
    assert!(matches!(answer, AgentMsg::Ready { .. }), "{answer:?}");
    drop(s);
    let t0 = std::time::Instant::now();
    let opts = options(spec);
    // the agent notices within its 100 ms poll; allow for a slow machine
    let r = loop {
        match stream::run(&Target::remote(agent.addr), &opts, &mut |_, _, _| {}) {
            Ok(r) => break r,
            Err(e) if t0.elapsed() < std::time::Duration::from_secs(2) => {
                assert!(e.message.contains("busy"), "{e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("the slot was not freed within 2 s: {e}"),
        }
    };
    assert!(r.runs[0].streams[0].receiver.bytes > 0);
}

#[test]
fn a_flood_of_samples_from_a_hostile_agent_ends_the_run_within_its_bound() {
    use gridperf::engines::stream;
    use gridperf::runner::Target;
    use gridperf_core::wire::{Direction, StreamSpec, MAX_SAMPLES};
    let agent = crate::TestAgent::with(|c| c.faults.flood_stream_samples = true);
    let opts = options(StreamSpec::tcp(Direction::Up, 1000));
    let e = stream::run(&Target::remote(agent.addr), &opts, &mut |_, _, _| {}).expect_err("a flood is refused");
    assert!(e.message.contains(&format!("more than {MAX_SAMPLES} TCP_INFO samples")), "{e}");
    assert!(e.message.contains("hostile agent"), "{e}");
}

#[test]
fn a_sweep_runs_every_combination_and_says_each_points_figures() {
    let _heavy = crate::heavy();
    let bin = env!("CARGO_BIN_EXE_gridperf");
    let o = std::process::Command::new(bin)
        .args([
            "stream",
            "--sweep",
            "P=1,2",
            "--sweep",
            "pacing=0,800M",
            "-t",
            "0.5",
            "--repeat",
            "2",
            "--no-store",
            "--json",
        ])
        .output()
        .expect("sweep");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], "gridperf.sweep/1");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4, "every combination");
    for p in points {
        assert_eq!(p["runs_bps"].as_array().map(Vec::len), Some(2), "{p}");
        assert_eq!(p["verdicts"].as_array().map(Vec::len), Some(2), "{p}");
    }
    // paced at 800 Mbit/s a stream, the sum follows the streams: P x 800M within 5%
    for (k, streams) in [(1, 1.0), (3, 2.0)] {
        let median = points[k]["median_bps"].as_f64().expect("median");
        assert!((median / (streams * 800e6) - 1.0).abs() < 0.05, "{}", points[k]);
        assert_eq!(points[k]["settings"][1], serde_json::json!(["pacing", "800M"]));
    }
    // a window past net.core.rmem_max is said once, before the sweep, with the sysctl to raise
    let rmem: u64 =
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").expect("rmem_max").trim().parse().expect("n");
    let too_wide = format!("w=64K,{}", rmem * 4);
    let o = std::process::Command::new(bin)
        .args(["stream", "--sweep", &too_wide, "-t", "0.3", "--no-store"])
        .output()
        .expect("sweep");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("will be capped").count(), 1, "{err}");
    assert!(err.contains(&format!("sudo sysctl -w net.core.rmem_max={}", rmem * 4)), "{err}");
    // a per-packet delay of 5 us on a 1 Gbit/s link: paced at 1500 x 8 / 17 us = 705.9 Mbit/s
    let o = std::process::Command::new(bin)
        .args(["stream", "--sweep", "delay=0,5us", "--nic-rate", "1G", "-t", "0.5", "--no-store", "--json"])
        .output()
        .expect("sweep");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points[0]["settings"][1], serde_json::json!(["paced", "no"]), "no delay: not paced");
    assert_eq!(points[1]["settings"][1], serde_json::json!(["paced", "705.88 Mbit/s"]));
    let paced = points[1]["median_bps"].as_f64().expect("median");
    assert!((paced / 705.88e6 - 1.0).abs() < 0.05, "{}", points[1]);
    // bad input is refused before anything runs, with what is valid
    for (args, want) in [
        (&["--sweep", "delay=5us"][..], "reckoned against the sender's NIC rate: give --nic-rate"),
        (&["--sweep", "colour=blue"][..], "stream's settings to sweep are w, pacing"),
        (&["--sweep", "rtt=2ms,20ms"][..], "a lab field needs a lab"),
        (
            &["--sweep", "w=1K..1G*2", "--sweep", "P=1,2,4,8,16,32,64,128", "-t", "60", "--repeat", "5"][..],
            "give --yes",
        ),
    ] {
        let o =
            std::process::Command::new(bin).args(["stream"]).args(args).args(["--no-store"]).output().expect("sweep");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}
