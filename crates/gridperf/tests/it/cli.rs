//! The binary: exit codes, output formats, signals, and an agent that dies.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts `gridperf serve` on a free loopback port and waits until it listens.
fn serve(extra: &[&str]) -> (crate::Served, u16) {
    crate::serve_on("127.0.0.1", extra)
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn usage_errors_exit_2_and_show_the_valid_forms() {
    for (args, needle) in [
        (vec!["rtt", "--proto", "quic"], "valid protocols are tcp, udp, sendfile"),
        (vec!["rtt", "--sizes", "1..8x"], "1KiB"),
        (vec!["rtt", "--sizes", "0"], "at least 1 byte"),
        (vec!["rtt", "--proto", "udp", "--sizes", "65536"], "65507"),
        (vec!["rtt", "--sizes", "10G"], "67108864"),
        (vec!["rtt", "--timeout", "5"], "500us, 10ms"),
        (vec!["rtt", "--cpu", "x"], "--cpu 0,1"),
        (vec!["rtt", "--cpu", "0", "--busy-poll"], "--cpu C,S"),
        (vec!["rtt", "--timeout", "2m"], "at most 60s"),
        (vec!["rtt", "--warmup", "999999999999"], "--warmup"),
        (vec!["transfer", "--total", "1M", "--sizes", "1", "--repeat", "0"], "--repeat"),
        // a duration past any limit is refused, not a panic (exit 101) or a wrap to 5 s
        (vec!["stream", "127.0.0.1", "-t", "1e99"], "--time 1e99: too long"),
        (vec!["stream", "127.0.0.1", "-t", "18446744073709556.616"], "too long"),
        (vec!["stream", "127.0.0.1", "--linger", "1e99"], "--linger 1e99: too long"),
        (vec!["stream", "127.0.0.1", "--omit", "1e99"], "--omit 1e99: too long"),
        (vec!["stream", "127.0.0.1", "--sample", "1e99"], "--sample 1e99: too long"),
        (vec!["stream", "127.0.0.1", "-i", "1e99"], "1e99: too long"),
        (vec!["stream", "127.0.0.1", "-t", "inf"], "--time inf"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn network_errors_exit_3() {
    let port = crate::free_port().to_string();
    let o = run(&["rtt", "127.0.0.1", "-p", &port, "--connect-timeout", "1s"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("network error"), "{}", stderr(&o));
}

#[test]
fn busy_agent_exits_5() {
    // an agent whose only slot is taken by a client that never goes on
    let (mut agent, port) = serve(&["--control-timeout", "5s"]);
    let p = port.to_string();
    let mut holder = crate::bin()
        .args(["rtt", "127.0.0.1", "-p", &p, "--proto", "udp", "--sizes", "1", "-t", "3s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("holder");
    std::thread::sleep(Duration::from_millis(700));
    let o = run(&["rtt", "127.0.0.1", "-p", &p, "--sizes", "1"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("busy"), "{}", stderr(&o));
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn json_and_csv_outputs() {
    let o = run(&[
        "rtt",
        "--proto",
        "tcp,udp",
        "--sizes",
        "1,1k",
        "-n",
        "50",
        "--warmup-time",
        "0s",
        "--json",
        "--samples",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["schema"], "gridperf.rtt/1");
    assert_eq!(v["measure"], "rtt");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    for p in points {
        assert_eq!(p["summary"]["count"], 50);
        assert_eq!(p["samples_ns"].as_array().expect("samples").len(), 50);
        assert!(p["summary"]["median_ns"].as_f64().expect("median") > 0.0);
    }
    assert_eq!(v["settings"]["nodelay"], true);
    assert!(v["env"]["command_line"].as_array().expect("argv").len() > 3);
    assert!(v["env"]["server"]["sockets"].as_array().expect("agent sockets").len() == 2);

    let o = run(&["rtt", "--proto", "tcp", "--sizes", "64", "-n", "20", "--warmup-time", "0s", "--csv"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    assert!(lines.next().expect("header").starts_with("proto,size_bytes,count,warmup,sent,lost,late,min_ns"));
    let row: Vec<&str> = lines.next().expect("row").split(',').collect();
    assert_eq!(&row[..3], ["tcp", "64", "20"]);

    let o = run(&["transfer", "--proto", "tcp", "--sizes", "1000", "--total", "10000", "-r", "2", "--csv"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.lines().nth(1).expect("row").starts_with("tcp,1000,10,10000,2,0,"), "{text}");
}

#[test]
fn the_table_says_rtt_and_the_nagle_state() {
    let o = run(&["rtt", "--proto", "tcp", "--sizes", "64", "-n", "20", "--nodelay", "off", "--cpu", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("round-trip times (not half)"), "{out}");
    assert!(out.contains("TCP_NODELAY off (Nagle on)"), "{out}");
    assert!(stderr(&o).contains("not pinned"), "the unpinned warning: {}", stderr(&o));
}

#[test]
fn an_agent_that_dies_mid_run_ends_the_client_with_a_network_error() {
    let (mut agent, port) = serve(&[]);
    let p = port.to_string();
    let mut client = crate::bin()
        .args(["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "64", "-t", "20s", "--timeout", "500ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client");
    std::thread::sleep(Duration::from_millis(600));
    agent.kill().expect("kill agent");
    let _ = agent.wait();
    let st = wait_with_deadline(&mut client, Duration::from_secs(5));
    let mut err = String::new();
    client.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    assert_eq!(st.code(), Some(3), "{err}");
}

#[test]
fn sigterm_stops_the_agent_cleanly() {
    let (mut agent, _port) = serve(&[]);
    let pid = agent.id() as i32;
    let rc = send_signal(pid, libc::SIGTERM);
    assert_eq!(rc, 0);
    let st = wait_with_deadline(&mut agent, Duration::from_secs(3));
    assert!(st.success(), "{st:?}");
}

/// kill(1), so that the tests need no unsafe code.
fn send_signal(pid: i32, sig: i32) -> i32 {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| if s.success() { 0 } else { 1 })
        .unwrap_or(1)
}

#[test]
fn once_serves_one_test_and_exits() {
    let (mut agent, port) = serve(&["--once"]);
    let p = port.to_string();
    let o = run(&["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "1", "-n", "10"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let st = wait_with_deadline(&mut agent, Duration::from_secs(3));
    assert!(st.success());
}

#[test]
fn nagle_and_delayed_ack_stall_a_message_written_in_two_sends() {
    // the trap latency tools fall into: one send per message never stalls
    // on Linux; two sends with Nagle on wait for the delayed ACK (~40 ms)
    let args = |nodelay: &'static str| {
        vec![
            "rtt",
            "--proto",
            "tcp",
            "--sizes",
            "2000",
            "-n",
            "5",
            "--warmup",
            "1",
            "--warmup-time",
            "0s",
            "--writes",
            "2",
            "--nodelay",
            nodelay,
            "--json",
        ]
    };
    let median = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        v["points"][0]["summary"]["median_ns"].as_f64().expect("median")
    };
    let off = run(&args("off"));
    assert!(off.status.success(), "{}", stderr(&off));
    let on = run(&args("on"));
    assert!(on.status.success(), "{}", stderr(&on));
    assert!(median(&off) > 20e6, "Nagle on, two sends: median {} ns", median(&off));
    assert!(median(&on) < 5e6, "Nagle off: median {} ns", median(&on));
}

#[test]
fn sigterm_during_a_test_stops_the_agent_and_the_client_is_told() {
    let (mut agent, port) = serve(&[]);
    let p = port.to_string();
    let mut client = crate::bin()
        .args(["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "64", "-t", "30s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(send_signal(agent.id() as i32, 15), 0);
    let st = wait_with_deadline(&mut agent, Duration::from_secs(3));
    assert!(st.success(), "{st:?}");
    let st = wait_with_deadline(&mut client, Duration::from_secs(5));
    let mut err = String::new();
    client.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("shutting down"), "{err}");
}

#[test]
fn tune_reads_this_host_and_says_what_caps_a_stream() {
    let dir = std::env::temp_dir().join(format!("gridperf-tune-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("90-gridperf.conf");
    let o = run(&["tune", "--rate", "10G", "--rtt", "300ms", "--json", "--write-sysctl", file.to_str().expect("path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], "gridperf.tune/2");
    // 10 Gbit/s x 300 ms = 375 MB: no default host holds that
    assert_eq!(v["bdp_bytes"], 375_000_000u64);
    let me = &v["ends"][0];
    assert_eq!(me["name"], "this host");
    assert!(me["advice"]["binding"].is_string(), "{}", me["advice"]);
    assert_eq!(v["directions"][0]["binding"], me["advice"]["binding"]);
    // the settings are this host's, as /proc/sys has them
    let rmem: Vec<u64> = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .expect("tcp_rmem")
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    assert_eq!(me["settings"]["tcp_rmem"], serde_json::json!(rmem));
    let lines: Vec<String> = me["advice"]["sysctl_lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter_map(|l| l.as_str().map(str::to_string))
        .collect();
    let written = std::fs::read_to_string(&file).expect("sysctl file");
    assert!(!lines.is_empty() && lines.iter().all(|l| written.contains(l.as_str())), "{written}");
    // bad input names the valid forms
    for (args, want) in [
        (&["tune", "--rate", "0", "--rtt", "35ms"][..], "zero"),
        (&["tune", "--rate", "1G", "--rtt", "-5ms"][..], "negative"),
        (&["tune", "--rate", "1G", "--rtt", "35"][..], "35"),
        (&["tune", "--rate", "fast", "--rtt", "35ms"][..], "fast"),
        (&["tune", "--lab", "nosuch"][..], "valid profiles"),
        (&["tune"][..], "--rate RATE --rtt DURATION"),
        (&["tune", "--rate", "1G"][..], "--rtt"),
        (&["tune", "--rate", "1G", "--rtt", "35ms", "--apply"][..], "--in-lab"),
        (&["tune", "--in-lab", "nosuchlab"][..], "no lab named"),
        (&["tune", "127.0.0.1:9"][..], "--measure-rate"),
        (&["tune", "--rate", "1G", "--rtt", "20ms", "--measure-share"][..], "--in-lab"),
        (&["tune", "--lab", "man", "--measure-share"][..], "<HOST|--in-lab <NAME>>"),
        (&["tune", "--lab", "man", "--measure-rate"][..], "give HOST"),
        (&["tune", "--in-lab", "x", "--measure-rate"][..], "give HOST"),
        (&["trace", "/nonexistent.pcap", "--filter", "10.0.0.1:http"][..], "give ADDR, ADDR:PORT or :PORT"),
        (&["trace", "/nonexistent.pcap", "--filter", ":99999"][..], "give ADDR, ADDR:PORT or :PORT"),
        (&["tune", "--in-lab", "x", "--write-sysctl", "f.conf"][..], "cannot be used"),
        (&["tune", "--rate", "1G", "--rtt", "20ms", "--probe-rate", "3G"][..], "--measure-rate"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tune_against_an_agent_measures_the_rtt_and_reads_both_ends() {
    let agent = crate::TestAgent::start(gridperf::agent::AgentConfig {
        bind: vec!["127.0.0.1:0".parse().expect("addr")],
        max_tests: 2,
        ..Default::default()
    });
    let target = agent.addr.to_string();
    let o = run(&["tune", &target, "--rate", "1G", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let m = &v["measured"];
    assert_eq!(m["round_trips"], 50);
    let (min, median) = (m["rtt_min_ns"].as_f64().expect("min"), m["rtt_median_ns"].as_f64().expect("median"));
    assert!(min > 0.0 && min <= median && median < 50e6, "{m}");
    // the path's RTT is the measured median, and the BDP follows from it
    assert_eq!(v["path"]["rtt_ns"].as_u64(), Some(median.round() as u64));
    assert_eq!(v["bdp_bytes"].as_u64(), Some((1e9 * median.round() / 8e9) as u64));
    // both ends: this host and the agent, whose settings came over the control channel
    let ends = v["ends"].as_array().expect("ends");
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1]["name"], format!("agent {target}"));
    let wmem: Vec<u64> = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .expect("tcp_wmem")
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    assert_eq!(ends[1]["settings"]["tcp_wmem"], serde_json::json!(wmem));
    assert!(ends[1]["settings"]["adv_win_scale"].is_i64(), "{}", ends[1]["settings"]);
    let dirs = v["directions"].as_array().expect("directions");
    assert_eq!(dirs.len(), 2);
    assert!(dirs.iter().any(|d| d["from"] == "this host" && d["to"] == format!("agent {target}")), "{dirs:?}");

    // --measure-rate: a UDP probe at 200 Mbit/s that loopback carries whole is a lower bound, and says so
    let o = run(&["tune", &target, "--measure-rate", "--probe-rate", "200M", "--probe-time", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let r = v["measured"]["rate_bps"].as_f64().expect("rate");
    assert!((170e6..=205e6).contains(&r), "{}", v["measured"]);
    assert!(v["measured"]["rate_note"].as_str().unwrap_or_default().starts_with("at least"), "{}", v["measured"]);
    assert_eq!(v["path"]["rate_bps"].as_u64(), Some(r.round() as u64));

    // --measure-share: each way, the receiver's window against its granted buffer, and the ends take them
    let rmem: Vec<u64> = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .expect("tcp_rmem")
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    let o = run(&["tune", &target, "--rate", "1G", "--measure-share", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let probes = v["share_probes"].as_array().expect("share_probes");
    assert_eq!(probes.iter().map(|p| p["direction"].as_str().unwrap_or_default()).collect::<Vec<_>>(), ["up", "down"]);
    for p in probes {
        let (w, b) = (p["window_max"].as_u64().expect("window"), p["rcvbuf"].as_u64().expect("rcvbuf"));
        // half of tcp_rmem's maximum asked, doubled by the kernel up to twice net.core.rmem_max
        let rmem_max: u64 =
            std::fs::read_to_string("/proc/sys/net/core/rmem_max").expect("rmem_max").trim().parse().expect("number");
        let tcp_rmem_max: u64 = rmem[2];
        assert_eq!(b, (tcp_rmem_max / 2).clamp(16 << 10, 512 << 20).min(rmem_max) * 2, "{p}");
        let share = p["receive_share"].as_f64().expect("share");
        assert!(w <= b && (share - w as f64 / b as f64).abs() < 1e-9 && share > 0.2, "{p}");
        assert!(p["send_share"].is_f64() || !p["notes"].as_array().expect("notes").is_empty(), "{p}");
    }
    assert_eq!(v["ends"][1]["settings"]["measured_share"], probes[0]["receive_share"]);
    assert_eq!(v["ends"][0]["settings"]["measured_share"], probes[1]["receive_share"]);
}

/// Regression (issue 12): a closed stdout (`gridperf ... | head`) panicked
/// with exit 101 ("failed printing to stdout"). It ends the printing, not
/// the run: the command finishes and exits 0.
#[test]
fn a_closed_stdout_ends_the_printing_not_the_run() {
    let _heavy = crate::heavy();
    for args in [
        &["stream", "-t", "2", "-i", "100ms", "--pacing", "100M", "--no-store"][..],
        &["rtt", "--proto", "udp", "--sizes", "1", "-n", "30000", "--csv", "--samples", "--no-store"][..],
    ] {
        let mut child = crate::bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
        // read a little, then close the pipe, as `| head -1` does
        let mut first = [0u8; 16];
        let mut stdout = child.stdout.take().expect("stdout");
        let _ = stdout.read(&mut first);
        drop(stdout);
        let st = wait_with_deadline(&mut child, Duration::from_secs(30));
        let mut err = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
        assert_eq!(st.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Regression (issue 12): a run that failed (here, no agent listening) was
/// stored as a valid run. It is stored, failed, with why, and listed INVALID.
#[test]
fn a_failed_run_is_stored_as_invalid_with_why() {
    let dir = std::env::temp_dir().join(format!("gridperf-failed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("f.db");
    let dbs = db.to_str().expect("path");
    let port = crate::free_port().to_string();
    // before anything is stored, the list is empty, in both forms
    let o = run(&["runs", "list", "--db", dbs]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1, "only the header");
    let o = run(&["runs", "list", "--db", dbs, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(!db.exists(), "listing created the store");
    let o = run(&["rtt", "127.0.0.1", "-p", &port, "--connect-timeout", "1s", "--db", dbs]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(&["runs", "list", "--db", dbs, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(runs["schema"], "gridperf.runs/1");
    let r = &runs["runs"][0];
    assert_eq!(r["status"], "failed", "{r}");
    let why = r["invalid"].as_str().unwrap_or_default();
    assert!(why.contains("cannot connect to the agent"), "{r}");
    let o = run(&["runs", "list", "--db", dbs]);
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(listed.lines().nth(1).is_some_and(|l| l.contains(" INVALID ")), "{listed}");
    let o = run(&["runs", "show", &r["id"].to_string(), "--db", dbs]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("INVALID: failed: cannot connect"), "{}", stderr(&o));
    for args in [&["runs", "show", "--json"][..], &["runs", "export", "--format", "json"]] {
        let mut all = args.to_vec();
        let id = r["id"].to_string();
        all.extend_from_slice(&[&id, "--db", dbs]);
        let o = run(&all);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["schema"], "gridperf.run/1", "{args:?}");
        assert_eq!(v["run"]["status"], "failed", "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression (issue 12): loopback was stored under four network names
/// (local, loopback, 127.0.0.1, ::1). Every way of reaching it is
/// "loopback", and `runs list --network local` finds them all.
#[test]
fn loopback_is_one_network_however_it_is_reached() {
    let _heavy = crate::heavy();
    let dir = std::env::temp_dir().join(format!("gridperf-loopback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("l.db");
    let dbs = db.to_str().expect("path");
    let quick = ["--proto", "tcp", "--sizes", "64", "--warmup-time", "0s", "--db", dbs];
    let mut runs = 0;
    let mut with = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&quick);
        let o = run(&all);
        assert!(o.status.success(), "{all:?}: {}", stderr(&o));
        runs += 1;
    };
    with(&["rtt", "-n", "10"]);
    let (mut v4, port) = serve(&[]);
    let p = port.to_string();
    with(&["rtt", "127.0.0.1", "-p", &p, "-n", "10"]);
    with(&["transfer", "localhost", "-p", &p, "--total", "640", "-r", "2"]);
    let _ = v4.kill();
    let _ = v4.wait();
    // ::1, where this host has IPv6 on loopback
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let (mut v6, port6) = crate::serve_on("::1", &[]);
        let p6 = port6.to_string();
        with(&["rtt", "::1", "-p", &p6, "-n", "10"]);
        let _ = v6.kill();
        let _ = v6.wait();
    }
    let o = run(&["fanout", "--variant", "drain", "--size", "1k", "--messages", "1", "--repeat", "1", "--db", dbs]);
    assert!(o.status.success(), "{}", stderr(&o));
    runs += 1;
    let o = run(&["runs", "list", "--db", dbs, "--network", "local", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let listed = listed["runs"].as_array().expect("runs");
    assert_eq!(listed.len(), runs, "{listed:?}");
    assert!(listed.iter().all(|r| r["network"] == "loopback"), "{listed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stream_clients_killed_mid_test_leave_the_agent_as_it_was() {
    let _heavy = crate::heavy();
    let (agent, port) = serve(&[]);
    let p = port.to_string();
    // one whole test first: whatever the agent makes once and keeps is made
    let o = run(&["stream", "127.0.0.1", "-p", &p, "-P", "4", "-t", "0.3", "--no-store", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let idle = crate::settles_at(agent.id(), (0, 0), Duration::from_millis(500));
    for proto in ["tcp", "udp", "tcp"] {
        let mut client = crate::bin()
            .args(["stream", "127.0.0.1", "-p", &p, "-P", "4", "-t", "30", "--no-store"])
            .args(if proto == "udp" { &["-u", "-b", "100M"][..] } else { &[][..] })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("stream");
        std::thread::sleep(Duration::from_millis(1500));
        let busy = crate::threads_and_fds(agent.id());
        assert!(busy.0 > idle.0, "the test was running: {busy:?} against {idle:?}");
        client.kill().expect("kill the client");
        let _ = client.wait();
        let after = crate::settles_at(agent.id(), idle, Duration::from_secs(10));
        assert_eq!(after, idle, "threads and descriptors after a {proto} client was killed mid-test");
    }
}

#[test]
fn a_peers_escape_codes_and_newlines_reach_neither_terminal_nor_log() {
    use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode};
    // the agent's log: a client whose software name would clear the screen and forge a line
    let log = std::env::temp_dir().join(format!("gridperf-test-log-{}", std::process::id()));
    let port = crate::free_port();
    let p = port.to_string();
    let _agent = crate::Served(
        crate::bin()
            .args(["serve", "--bind", "127.0.0.1", "--port", &p])
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("serve"),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            break s;
        }
        assert!(Instant::now() < deadline, "the agent did not listen");
        std::thread::sleep(Duration::from_millis(20));
    };
    let forged = "x\ngridperf serve: 6.6.6.6:1: rtt tcp up to 1 B\u{1b}[2J";
    wire::write_msg(&mut s, &ClientMsg::Hello { magic: wire::MAGIC.into(), version: 999, software: forged.into() })
        .expect("hello");
    let _ = wire::read_msg::<_, AgentMsg>(&mut s);
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(&log).expect("read log");
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("version mismatch"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("gridperf serve: 6.6.6.6")), "a forged log line: {text}");
    assert!(!text.contains('\u{1b}'), "an escape code in the log: {text:?}");

    // the client's terminal: an agent whose error would do the same
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let fake = l.local_addr().expect("addr").port().to_string();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().expect("accept");
        let _ = wire::read_msg::<_, ClientMsg>(&mut c);
        let message = "busy\u{1b}]0;owned\u{7}\u{1b}[31m\nrm -rf".to_string();
        wire::write_msg(&mut c, &AgentMsg::Error { code: ErrorCode::Busy, message }).expect("error");
    });
    let o = run(&["rtt", "127.0.0.1", "-p", &fake, "--no-store"]);
    let _ = t.join();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("busy\\u{1b}]0;owned\\u{7}\\u{1b}[31m\\u{a}rm -rf"), "{err:?}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
}

/// A memory figure of an agent process from /proc/PID/status (VmHWM: its
/// peak resident memory, VmRSS: now), in bytes.
fn memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.split(':').next() == Some(field));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).unwrap_or(0) * 1024
}

#[test]
fn sixty_clients_sending_1_mib_hellos_at_once_cost_the_agent_little() {
    use std::io::Write;
    let _heavy = crate::heavy();
    // all 60 from one address, let in: each must be read to be refused
    let (agent, port) = serve(&["--max-per-address", "64"]);
    let before = memory(agent.id(), "VmHWM");
    // a hello padded with an array of half a million numbers, 1 MiB in all
    let mut body = br#"{"type":"hello","magic":"gridperf","version":3,"software":"x","pad":["#.to_vec();
    while body.len() < (1 << 20) - 8 {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0]}");
    let body = std::sync::Arc::new(body);
    let clients: Vec<_> = (0..60)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
                let _ = s.write_all(&(body.len() as u32).to_be_bytes());
                let _ = s.write_all(&body);
                let mut answer = Vec::new();
                let _ = s.read_to_end(&mut answer);
                answer
            })
        })
        .collect();
    let answers: Vec<Vec<u8>> = clients.into_iter().map(|c| c.join().expect("client")).collect();
    let grew = memory(agent.id(), "VmHWM").saturating_sub(before);
    eprintln!("sixty 1 MiB hellos: the agent's peak memory grew by {} kB", grew >> 10);
    assert!(grew < 32 << 20, "the agent's peak memory grew by {} MB", grew >> 20);
    for a in answers {
        assert!(String::from_utf8_lossy(&a).contains("too-large"), "{}", String::from_utf8_lossy(&a));
    }
}

/// A control connection from `source` to the agent, left silent.
fn silent_from(source: &str, port: u16) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let src: std::net::SocketAddr = format!("{source}:0").parse().expect("source");
    s.bind(&src.into()).expect("bind the source address");
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("agent");
    s.connect(&to.into()).expect("connect");
    s.into()
}

#[test]
fn silent_connections_from_one_address_keep_no_one_else_out() {
    let _heavy = crate::heavy();
    let (_agent, port) = serve(&[]);
    let p = port.to_string();
    // 64 silent connections from 127.0.0.2 (the agent's limit in all was 64)
    let mut silent: Vec<std::net::TcpStream> = (0..64).map(|_| silent_from("127.0.0.2", port)).collect();
    // beyond 8 (--max-per-address) they are told so at once
    let mut refused = 0;
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
        let mut buf = [0u8; 512];
        if let Ok(n) = s.read(&mut buf) {
            if n > 0 && String::from_utf8_lossy(&buf[..n]).contains("--max-per-address") {
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 56, "all but 8 of the 64 are refused at once");
    // a client from another address gets its test while they stay
    let o = run(&["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "64", "-n", "20", "--no-store"]);
    assert!(o.status.success(), "{}", stderr(&o));
    drop(silent);
}

#[test]
fn busy_polling_is_the_agents_operator_to_allow() {
    let _heavy = crate::heavy();
    let args = |p: &str| {
        let p = p.to_string();
        move |extra: &[&str]| {
            let mut a = vec!["rtt", "127.0.0.1", "-p", &p, "--proto", "udp", "--sizes", "64", "-n", "20", "--no-store"];
            a.extend_from_slice(extra);
            run(&a)
        }
    };
    let (_agent, port) = serve(&[]);
    let o = args(&port.to_string())(&["--busy-poll"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("busy-polling is off on this agent") && stderr(&o).contains("--allow-busy-poll"),
        "{}",
        stderr(&o)
    );
    let (_agent2, port2) = serve(&["--allow-busy-poll"]);
    let o = args(&port2.to_string())(&["--busy-poll"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn serve_auth_refuses_a_client_without_the_key_and_serves_one_with_it() {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("gridperf-test-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    let (alice, bob, authorized) = (d.join("alice.key"), d.join("bob.key"), d.join("authorized"));
    let o = run(&["keygen", "alice", "-o", &alice.to_string_lossy()]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&authorized, &o.stdout).expect("authorized");
    assert!(run(&["keygen", "bob", "-o", &bob.to_string_lossy()]).status.success());
    assert_eq!(std::fs::metadata(&alice).expect("key").permissions().mode() & 0o777, 0o600);
    // an authorized file others may read is refused
    std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let o = run(&["serve", "--port", "1", "--auth", &authorized.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("chmod 600"), "{}", stderr(&o));
    std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_agent, port) = serve(&["--auth", &authorized.to_string_lossy()]);
    let p = port.to_string();
    let rtt = |extra: &[&str]| {
        let mut a = vec!["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "64", "-n", "10", "--no-store"];
        a.extend_from_slice(extra);
        crate::bin().args(&a).env("HOME", &d).output().expect("rtt")
    };
    let o = rtt(&[]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("serves only clients with a key: give --key FILE"), "{}", stderr(&o));
    let o = rtt(&["--key", &bob.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("authentication failed for key \"bob\""), "{}", stderr(&o));
    let o = rtt(&["--key", &alice.to_string_lossy()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // the proof is mutual: a client given --key refuses an agent that asks
    // for no key (a fake, or a man in the middle that dropped the challenge)
    let (_open, open_port) = serve(&[]);
    let p = open_port.to_string();
    let rtt_open = |extra: &[&str]| {
        let mut a = vec!["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", "64", "-n", "10", "--no-store"];
        a.extend_from_slice(extra);
        crate::bin().args(&a).env("HOME", &d).output().expect("rtt")
    };
    let o = rtt_open(&["--key", &alice.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("asks for no key, but --key was given"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--insecure"), "{}", stderr(&o));
    let o = rtt_open(&["--key", &alice.to_string_lossy(), "--insecure"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // without --key (a key kept in the default place or none) an open agent is used as before
    let o = rtt_open(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_sites_limits_refuse_what_is_beyond_them_and_say_which() {
    let _heavy = crate::heavy();
    let (_agent, port) =
        serve(&["--allow", "127.0.0.1/32,::1", "--max-duration", "2s", "--max-streams", "2", "--max-rate", "1G"]);
    let p = port.to_string();
    // an address outside --allow is refused at once
    let mut s = silent_from("127.0.0.2", port);
    s.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.contains("127.0.0.2 is not among the addresses this agent serves (serve --allow)"), "{answer}");
    let stream = |extra: &[&str]| {
        let mut a = vec!["stream", "127.0.0.1", "-p", &p, "--no-store"];
        a.extend_from_slice(extra);
        run(&a)
    };
    for (args, want) in [
        (&["-t", "5", "--pacing", "100M"][..], "at most 2000 ms (serve --max-duration)"),
        (
            &["-t", "1", "-P", "4", "--pacing", "100M"][..],
            "4 streams: this agent allows at most 2 (serve --max-streams)",
        ),
        (&["-t", "1", "-P", "2", "--pacing", "600M"][..], "at most 1000000000 bit/s in all (serve --max-rate)"),
        (&["-t", "1"][..], "an unpaced stream test"),
    ] {
        let o = stream(args);
        assert_eq!(o.status.code(), Some(5), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // within them, the test runs
    let o = stream(&["-t", "0.5", "-P", "2", "--pacing", "400M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["serve", "--allow", "10.0.0.0/33"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("address block"), "{}", stderr(&o));
}

#[test]
fn soak_legitimate_clients_get_their_tests_among_hostile_ones_and_the_agent_stays_flat() {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let _heavy = crate::heavy();
    let seconds: f64 = std::env::var("SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(8.0);
    let (agent, port) = serve(&[]);
    let p = port.to_string();
    let legit = |n: &str| {
        run(&[
            "rtt",
            "127.0.0.1",
            "-p",
            &p,
            "--proto",
            "tcp,udp",
            "--sizes",
            "64",
            "-n",
            n,
            "--queue",
            "10s",
            "--no-store",
        ])
    };
    assert!(legit("50").status.success(), "a first test");
    let idle = crate::settles_at(agent.id(), (0, 0), Duration::from_millis(300));
    let rss0 = memory(agent.id(), "VmRSS");
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    // hostile clients from eight other loopback addresses, each in a loop of
    // one misdeed per connection
    let hostile: Vec<_> = (2..10u8)
        .map(|a| {
            let (stop, made) = (stop.clone(), made.clone());
            std::thread::spawn(move || {
                let source = format!("127.0.0.{a}");
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut s = silent_from(&source, port);
                    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
                    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
                    match k % 6 {
                        0 => {
                            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
                        }
                        1 => {
                            let _ = s.write_all(&u32::MAX.to_be_bytes());
                        }
                        2 => {
                            // a frame that promises 100 bytes and sends 3, then vanishes
                            let _ = s.write_all(&100u32.to_be_bytes());
                            let _ = s.write_all(b"{\"t");
                        }
                        3 => {
                            let hello = br#"{"type":"hello","magic":"gridperf","version":3,"software":"x"}"#;
                            let _ = s.write_all(&(hello.len() as u32).to_be_bytes());
                            let _ = s.write_all(hello);
                            // then silence, held for a while
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        4 => {
                            let body = br#"{"type":"request","queue_ms":0,"test":{"kind":"stream","proto":"tcp","streams":999}}"#;
                            let _ = s.write_all(&(body.len() as u32).to_be_bytes());
                            let _ = s.write_all(body);
                        }
                        _ => {}
                    }
                    let mut sink = [0u8; 256];
                    let _ = std::io::Read::read(&mut s, &mut sink);
                    drop(s);
                    made.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let mut tests = 0;
    let mut peak_threads = 0;
    while t0.elapsed().as_secs_f64() < seconds {
        let o = legit("200");
        assert!(o.status.success(), "a legitimate client among hostile ones: {}", stderr(&o));
        tests += 1;
        peak_threads = peak_threads.max(crate::threads_and_fds(agent.id()).0);
    }
    stop.store(true, Ordering::Relaxed);
    for h in hostile {
        let _ = h.join();
    }
    let hostile_made = made.load(Ordering::Relaxed);
    let after = crate::settles_at(agent.id(), idle, Duration::from_secs(15));
    let grew = memory(agent.id(), "VmRSS") as i64 - rss0 as i64;
    eprintln!(
        "soak: {seconds} s, {tests} legitimate tests, {hostile_made} hostile connections; agent threads/fds {idle:?} -> {after:?} (peak {peak_threads} threads), RSS {} -> {} kB",
        rss0 >> 10,
        (rss0 as i64 + grew) >> 10
    );
    assert!(hostile_made >= 1000, "only {hostile_made} hostile connections");
    assert!(tests >= 1);
    assert_eq!(after, idle, "the agent's threads and descriptors after the soak");
    assert!(grew < 16 << 20, "the agent's memory grew {} MB", grew >> 20);
}

#[test]
fn a_site_limits_message_sizes_and_tests_per_address_per_minute() {
    let _heavy = crate::heavy();
    let (_agent, port) = serve(&["--max-message", "4K", "--max-tests-per-minute", "2"]);
    let p = port.to_string();
    let rtt =
        |size: &str| run(&["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", size, "-n", "5", "--no-store"]);
    let o = rtt("8K");
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("messages of 8192 bytes: this agent allows at most 4096 (serve --max-message)"),
        "{}",
        stderr(&o)
    );
    assert!(rtt("1K").status.success());
    assert!(rtt("1K").status.success());
    let o = rtt("1K");
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("started 2 tests in the last minute") && stderr(&o).contains("--max-tests-per-minute"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn serve_takes_its_limits_from_a_config_file_and_the_command_line_wins() {
    let _heavy = crate::heavy();
    let d = std::env::temp_dir().join(format!("gridperf-test-conf-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    let conf = d.join("serve.conf");
    std::fs::write(
        &conf,
        "# a DTN's limits\nmax-message = 4K\nmax-per-address = 2\nallow = 127.0.0.0/8, ::1\nallow-busy-poll = false\n",
    )
    .expect("conf");
    let c = conf.to_string_lossy().into_owned();
    let (_agent, port) = serve(&["--config", &c]);
    let p = port.to_string();
    let rtt =
        |size: &str| run(&["rtt", "127.0.0.1", "-p", &p, "--proto", "tcp", "--sizes", size, "-n", "5", "--no-store"]);
    let o = rtt("8K");
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("(serve --max-message)"), "{}", stderr(&o));
    assert!(rtt("1K").status.success());
    // the command line's own flag wins over the file's
    let (_agent2, port2) = serve(&["--config", &c, "--max-message", "16K"]);
    let p2 = port2.to_string();
    let o = run(&["rtt", "127.0.0.1", "-p", &p2, "--proto", "tcp", "--sizes", "8K", "-n", "5", "--no-store"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // a setting that does not exist is named, with the valid ones
    std::fs::write(&conf, "max-speed = 10G\n").expect("conf");
    let o = run(&["serve", "--config", &c]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("line 1: \"max-speed\" is not a setting; valid are bind, port"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_test_that_would_hold_more_memory_than_the_site_allows_is_refused() {
    let _heavy = crate::heavy();
    let (_agent, port) = serve(&["--max-test-memory", "64M"]);
    let p = port.to_string();
    // 64 streams with 4 MB buffers each way: over 1 GB of socket buffers alone
    let o = run(&["stream", "127.0.0.1", "-p", &p, "-P", "64", "-w", "4M", "-t", "1", "--no-store"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("allows at most 67108864 per test (serve --max-test-memory)"), "{}", stderr(&o));
    let o = run(&["stream", "127.0.0.1", "-p", &p, "-P", "2", "-t", "0.5", "--no-store"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Regression (issue 32): `-h` was `--help` (98 lines for rtt). `-h` gives
/// each flag's first sentence, `--help` the whole text, for every command.
#[test]
fn dash_h_is_short_and_dash_dash_help_is_long() {
    for cmd in ["rtt", "transfer", "stream", "survey", "copy", "serve", "trace", "fanout", "lab", "tune", "report"] {
        let short = String::from_utf8_lossy(&run(&[cmd, "-h"]).stdout).into_owned();
        let long = String::from_utf8_lossy(&run(&[cmd, "--help"]).stdout).into_owned();
        assert!(short.contains("Usage: gridperf"), "{cmd} -h:\n{short}");
        assert!(
            short.lines().count() * 10 <= long.lines().count() * 8,
            "{cmd}: -h has {} lines, --help {}",
            short.lines().count(),
            long.lines().count()
        );
    }
    let short = String::from_utf8_lossy(&run(&["rtt", "-h"]).stdout).into_owned();
    let long = String::from_utf8_lossy(&run(&["rtt", "--help"]).stdout).into_owned();
    assert!(short.contains("Message sizes: a list of sizes and ranges, e.g. 1,64,1k..64k*2\n"), "{short}");
    assert!(long.contains("paper (1 B, then 128 B to 64000"), "{long}");
    assert!(short.contains("see more with '--help'"), "{short}");
}

#[test]
fn lab_clone_is_refused_by_a_keyed_agent_and_finds_only_a_lower_bound_on_loopback() {
    let d = std::env::temp_dir().join(format!("gridperf-test-clone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    let (alice, authorized) = (d.join("alice.key"), d.join("authorized"));
    let o = run(&["keygen", "alice", "-o", &alice.to_string_lossy()]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&authorized, &o.stdout).expect("authorized");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_keyed, port) = serve(&["--auth", &authorized.to_string_lossy()]);
    let o = crate::bin()
        .args(["lab", "clone", "127.0.0.1", "-p", &port.to_string(), "--time", "20s"])
        .env("HOME", &d)
        .output()
        .expect("clone");
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("serves only clients with a key"), "{}", stderr(&o));
    // bad budgets and rates are usage errors, before any probe
    for (args, needle) in [(vec!["--time", "5s"], "20s to 600s"), (vec!["--max-rate", "fast"], "rate")] {
        let mut a = vec!["lab", "clone", "127.0.0.1", "-p", "1"];
        a.extend(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{needle}: {}", stderr(&o));
    }
    // loopback carries far more than 200 Mbit/s: the rate is a lower bound, said so
    let (_open, port) = serve(&[]);
    let o =
        run(&["lab", "clone", "127.0.0.1", "-p", &port.to_string(), "--time", "20s", "--max-rate", "200M", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clone json");
    for dir in ["ab", "ba"] {
        let r = &f["profile"][dir]["rate_bps"];
        assert!(r["high"].is_null() && r["note"].as_str().is_some_and(|n| n.contains("at least")), "{dir}: {r}");
        let v = r["value"].as_f64().unwrap_or(0.0);
        assert!((1.6e8..2.2e8).contains(&v), "{dir}: about what was offered: {v}");
        // (a busy machine may overflow a loopback receiver's buffer now and then)
        let loss = &f["profile"][dir]["loss"];
        assert!(
            loss["value"].as_f64().is_some_and(|l| l < 0.01) && loss["high"].as_f64().is_some_and(|h| h > 0.0),
            "{f}"
        );
    }
    assert!(f["seconds"].as_f64().is_some_and(|s| s <= 25.0), "{f}");
    let _ = std::fs::remove_dir_all(&d);
}
