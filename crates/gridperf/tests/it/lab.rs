//! The lab across real namespaces and TUN devices: settings errors (no root
//! needed), then delay, loss and clean-up measured end to end with gridperf's
//! own probes (root; CI must run them).

use crate::netns::privileged;
use crate::Tries;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_gridperf");

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Lab tests run one at a time: a loaded lab (calibration) makes another
/// lab's emulator fall behind on a 2-CPU machine, and it would rightly say
/// its run was invalid.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    crate::heavy()
}

/// What is left of labs whose names start with `prefix`: their state
/// directories (this user's run directory), root's named namespaces, and
/// their emulators (a rootless lab's namespaces live as long as those).
fn labs_named(prefix: &str) -> Vec<String> {
    let entries = |dir: &std::path::Path, start: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(start))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = entries(&gridperf::lab::run_dir(), &format!("lab-{prefix}"));
    out.extend(entries(std::path::Path::new("/run/netns"), &format!("gp-{prefix}")));
    out.extend(emulators_named(prefix));
    out.sort();
    out
}

/// The lab emulators running for labs whose names start with `prefix`, as "emulator NAME PID".
fn emulators_named(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let c = std::fs::read(e.path().join("cmdline")).ok()?;
                    let args: Vec<String> =
                        c.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
                    let i = args.windows(3).position(|w| w[0] == "emulator" && w[1] == "--name")?;
                    let name = &args[i + 2];
                    name.starts_with(prefix).then(|| format!("emulator {name} {}", e.file_name().to_string_lossy()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The processes in a network namespace, by its inode.
fn pids_in(inode: u64) -> Vec<String> {
    let want = format!("net:[{inode}]");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l.to_string_lossy() == want))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs a command on a lab's host (`lab exec`), its output.
fn on_host(lab: &str, host: &str, cmd: &[&str]) -> Output {
    let mut all = vec!["lab", "exec", "--name", lab, host, "--"];
    all.extend_from_slice(cmd);
    run(&all)
}

/// A lab that is taken down (and checked gone) when the test ends, pass or fail.
struct Lab {
    name: String,
    agent: Option<Child>,
    /// The hosts' namespace inodes, as `lab status` gave them.
    inodes: Vec<(String, u64)>,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Lab {
    fn up(tag: &str, settings: &[&str]) -> Lab {
        let guard = serial();
        let name = format!("t{}-{tag}", std::process::id() % 100_000);
        let mut args = vec!["lab", "up", "--name", &name];
        args.extend_from_slice(settings);
        let o = run(&args);
        assert!(o.status.success(), "lab up: {}", stderr(&o));
        let mut lab = Lab { name, agent: None, inodes: Vec::new(), _serial: guard };
        let st = lab.status();
        for h in st["lab"]["hosts"].as_array().expect("hosts") {
            let inode = h["ns_inode"].as_u64().expect("each host's namespace inode");
            lab.inodes.push((h["name"].as_str().expect("name").to_string(), inode));
        }
        lab
    }

    fn inode(&self, host: &str) -> u64 {
        self.inodes.iter().find(|(h, _)| h == host).map(|&(_, i)| i).expect("host")
    }

    /// Starts `gridperf serve --once` on host b and waits until it listens.
    fn serve_on_b(&mut self) {
        self.serve_on_b_with(&["--once"]);
    }

    /// Starts `gridperf serve ARGS` on host b and waits until it listens.
    fn serve_on_b_with(&mut self, args: &[&str]) {
        let child = crate::bin()
            .args(["lab", "exec", "--name", &self.name, "b", "--", BIN, "serve"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve on b");
        self.agent = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // a socket listening on port 5301 (14B5) in b: state 0A
            let o = on_host(&self.name, "b", &["cat", "/proc/net/tcp6", "/proc/net/tcp"]);
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let listening = text.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(":14B5") && f[3] == "0A"
            });
            if listening {
                break;
            }
            assert!(Instant::now() < deadline, "the agent on b did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A measurement against `serve --once` on b, run again (after a new
    /// agent) while the emulator marks it INVALID (as [`unless_invalid`]).
    fn unless_invalid_serving(&mut self, measure: impl Fn(&Lab) -> Output) -> Output {
        let mut first = true;
        unless_invalid(|| {
            if !std::mem::take(&mut first) {
                if let Some(mut a) = self.agent.take() {
                    let _ = a.kill();
                    let _ = a.wait();
                }
                self.serve_on_b();
            }
            measure(self)
        })
    }

    fn exec_a(&self, args: &[&str]) -> Output {
        self.exec_on("a", args)
    }

    /// gridperf ARGS on one of the lab's hosts.
    fn exec_on(&self, host: &str, args: &[&str]) -> Output {
        let mut all = vec!["lab", "exec", "--name", &self.name, host, "--", BIN];
        all.extend_from_slice(args);
        run(&all)
    }

    /// `gridperf rtt` from host a to host b, 64-byte messages, JSON out.
    fn rtt_a_to_b(&self, proto: &str, n: &str, extra: &[&str]) -> Output {
        let mut args =
            vec!["rtt", "10.77.2.1", "--proto", proto, "--sizes", "64", "-n", n, "--warmup-time", "0s", "--json"];
        args.extend_from_slice(extra);
        self.exec_a(&args)
    }

    fn status(&self) -> serde_json::Value {
        let o = run(&["lab", "status", "--name", &self.name, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("status json")
    }

    /// The lab's own round trip as measured when it came up and taken off
    /// its delays, ns (a lab with a delay has one). A round trip across
    /// the lab is at least its delays as asked less this: the emulator's
    /// share is whole, and the hosts' may be less than the floor measured
    /// when the machine was busier then (tests run side by side).
    fn floor(&self) -> f64 {
        let st = self.status();
        let f = st["lab"]["spec"]["floor_ns"].as_f64().expect("the lab's own round trip");
        assert!(f > 0.0 && f < 5.0e6, "the lab's own round trip: {f} ns");
        f
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        let o = run(&["lab", "down", "--name", &self.name]);
        assert!(o.status.success(), "lab down: {}", stderr(&o));
        // no process is left in the lab's namespaces
        for (host, inode) in &self.inodes {
            let left = pids_in(*inode);
            assert!(left.is_empty(), "processes left in host {host}: {left:?}");
        }
        // no namespace name, state or emulator
        let left = labs_named(&self.name);
        assert!(left.is_empty(), "left of lab {}: {left:?}", self.name);
    }
}

/// Runs a measurement again while the lab's emulator marks it INVALID
/// (exit 4: it fell behind on a busy machine, and rightly says so; CI saw
/// one packet 15 ms late in 281): five tries, and more while
/// [`STEAL_BUDGET`] lasts ([`Tries`]).
fn unless_invalid(mut measure: impl FnMut() -> Output) -> Output {
    let mut tries = Tries::new(5, STEAL_BUDGET);
    let mut o = None;
    while tries.next() {
        if let Some(last) = &o {
            said_invalid(last);
        }
        let out = measure();
        let again = out.status.code() == Some(4);
        o = Some(out);
        if !again {
            break;
        }
    }
    o.expect("a try")
}

/// How long a test goes on trying a measurement the machine voided, past
/// its least count of tries ([`Tries`]).
const STEAL_BUDGET: Duration = Duration::from_secs(240);

/// Shows why a try was INVALID (the last lines it printed), so that a test
/// that fails after its tries says what each of them met.
fn said_invalid(o: &Output) {
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("INVALID") || l.contains("invalid run")).collect();
    eprintln!("a try was INVALID, tried again once the machine is quiet: {}", lines.join(" / "));
}

fn medians(o: &Output) -> Vec<(String, f64, u64, u64)> {
    assert!(o.status.success(), "{}", stderr(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("rtt json");
    v["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            (
                p["proto"].as_str().unwrap_or("").to_string(),
                p["summary"]["median_ns"].as_f64().unwrap_or(f64::NAN),
                p["lost"].as_u64().unwrap_or(0),
                p["sent"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn impossible_settings_name_the_field() {
    for (args, needle) in [
        (vec!["lab", "up", "--loss", "150%"], "loss"),
        (vec!["lab", "up", "--mtu", "100"], "MTU"),
        (vec!["lab", "up", "--rate", "0"], "rate of zero"),
        (vec!["lab", "up", "--delay", "-5ms"], "negative"),
        (vec!["lab", "up", "--rate", "100M", "--queue", "100B"], "smaller than one MTU"),
        (vec!["lab", "up", "--profile", "mars"], "valid profiles are"),
        (vec!["lab", "up", "--set", "colour=red"], "valid settings are"),
        (vec!["lab", "up", "--hosts", "0x3"], "NxM"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn profiles_list_their_sources() {
    let o = run(&["lab", "profiles", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], "gridperf.lab-profiles/1");
    let v = &v["profiles"];
    let names: Vec<&str> = v.as_array().expect("list").iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(
        names,
        ["loopback", "crossover-fe", "lan-gige", "man", "wan", "baltic", "cern-icepp", "lambda", "internet"]
    );
    assert!(v.as_array().expect("list").iter().all(|p| p["source"].as_str().is_some_and(|s| !s.is_empty())));
}

#[test]
fn delay_measured_end_to_end_and_down_leaves_nothing() {
    if !privileged("delay_measured_end_to_end_and_down_leaves_nothing") {
        return;
    }
    let mut lab = Lab::up("delay", &["--rtt", "20ms"]);
    // a second lab of the same name is refused
    let o = run(&["lab", "up", "--name", &lab.name]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("already up"), "{}", stderr(&o));
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| l.rtt_a_to_b("tcp,udp", "50", &["--warmup", "5"]));
    let floor = lab.floor();
    for (proto, median, lost, _) in medians(&o) {
        // 20 ms end to end: the lab's own round trip (the hosts' stacks,
        // the TUN devices, the emulator) was measured and taken off
        assert!((20.0e6 - floor..21.0e6).contains(&median), "{proto}: median {median} ns, floor {floor} ns");
        assert_eq!(lost, 0, "{proto}");
    }
    // the run records the lab it crossed, and the emulator kept up
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["env"]["lab"]["name"], lab.name.as_str());
    assert!(v["env"]["lab"]["invalid"].is_null(), "{}", v["env"]["lab"]);
    let st = lab.status();
    assert_eq!(st["lab"]["hosts"].as_array().expect("hosts").len(), 2);
    // what lab exec started there is ended by lab down (checked in Drop:
    // no process may keep the namespace's inode)
    let mut sleeper =
        crate::bin().args(["lab", "exec", "--name", &lab.name, "b", "--", "sleep", "30"]).spawn().expect("sleep in b");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!pids_in(lab.inode("b")).is_empty(), "sleep runs in b");
    // the wrapper goes; the sleep it started stays in b until lab down
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let health = &st["health"];
    assert!(health["links"][0]["delivered"].as_u64().expect("delivered") >= 110, "{health}");
    assert_eq!(health["links"][0]["lost"], 0);
}

#[test]
fn loss_counted_by_udp_within_its_interval() {
    if !privileged("loss_counted_by_udp_within_its_interval") {
        return;
    }
    let mut lab = Lab::up("loss", &["--rtt", "2ms", "--loss", "10%", "--seed", "7"]);
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| {
        l.rtt_a_to_b("udp", "300", &["--warmup", "0", "--timeout", "30ms", "--connect-timeout", "15s"])
    });
    let pts = medians(&o);
    let (_, median, lost, sent) = &pts[0];
    // a round trip survives two 10% draws: lost with p = 1 - 0.9^2 = 0.19
    // (the control channel's TCP crosses the same loss: hence the long deadline)
    let (n, p) = (*sent as f64, 0.19);
    let sd = (n * p * (1.0 - p)).sqrt();
    assert!((*lost as f64 - n * p).abs() < 4.5 * sd, "lost {lost} of {sent}");
    let floor = lab.floor();
    assert!((2.0e6 - floor..3.0e6).contains(median), "median {median}, floor {floor}");
    // the emulator's own count agrees with its setting
    let st = lab.status();
    let c = &st["health"]["links"][0];
    let (arrived, dropped) = (c["arrived"].as_u64().expect("n"), c["lost"].as_u64().expect("lost"));
    let sd = (arrived as f64 * 0.1 * 0.9).sqrt();
    assert!((dropped as f64 - arrived as f64 * 0.1).abs() < 4.5 * sd, "{dropped} of {arrived}");
}

#[test]
fn exec_on_an_unknown_host_lists_the_hosts() {
    if !privileged("exec_on_an_unknown_host_lists_the_hosts") {
        return;
    }
    let lab = Lab::up("exec", &["--hosts", "2x1"]);
    let o = run(&["lab", "exec", "--name", &lab.name, "c", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a1, a2, b"), "{}", stderr(&o));
    let o = run(&["lab", "exec", "--name", &lab.name, "a2", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // ending `lab exec` by its pid ends the command it runs on the host
    let mut exec =
        crate::bin().args(["lab", "exec", "--name", &lab.name, "b1", "--", "sleep", "57.5"]).spawn().expect("lab exec");
    let inode = lab.inode("b1");
    let sleeping = || {
        pids_in(inode)
            .iter()
            .any(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.contains("57.5")))
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !sleeping() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sleeping(), "the command did not start on b1");
    let _ = gridperf_sys::signal(exec.id(), libc::SIGTERM);
    let status = exec.wait().expect("lab exec ends");
    assert!(!status.success(), "{status:?}");
    assert!(!sleeping(), "the command outlived lab exec");
}

/// A stream across an emulator stopped for 150 ms (5% of a 3 s run: time
/// the link carried nothing, what the stream's rate is off by) is INVALID,
/// and says why. (A round trip run is judged round trip by round trip: see
/// `round_trips_that_crossed_a_held_up_emulator_are_left_out`.)
#[test]
fn a_run_across_a_stalled_emulator_is_marked_invalid() {
    if !privileged("a_run_across_a_stalled_emulator_is_marked_invalid") {
        return;
    }
    let mut lab = Lab::up("stall", &["--rtt", "2ms"]);
    let pid = lab.status()["lab"]["pid"].as_u64().expect("emulator pid").to_string();
    // twice at most: a stop that falls while the stream's packets are in a
    // host's stack, not in the emulator's delay line, delays nothing the
    // emulator had scheduled (the rootless CI once saw that with one probe)
    let mut o = None;
    for _ in 0..2 {
        lab.serve_on_b();
        let name = lab.name.clone();
        let probe = std::thread::spawn(move || {
            run(&[
                "lab",
                "exec",
                "--name",
                &name,
                "a",
                "--",
                BIN,
                "stream",
                "10.77.2.1",
                "-t",
                "3",
                "--json",
                "--no-store",
            ])
        });
        // stop the emulator for 150 ms in the middle of the run: every packet in
        // flight is then delivered far behind its schedule (while traffic flows
        // it never sleeps longer than 5 ms, so it sees that it overslept)
        // (first wait until the probe's traffic flows through the emulator)
        let before = lab.status()["health"]["links"][0]["arrived"].as_u64().unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while lab.status()["health"]["links"][0]["arrived"].as_u64().unwrap_or(0) < before + 300 {
            assert!(Instant::now() < deadline, "the probe's traffic never came");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(Command::new("kill").args(["-STOP", &pid]).status().expect("kill").success());
        std::thread::sleep(Duration::from_millis(150));
        assert!(Command::new("kill").args(["-CONT", &pid]).status().expect("kill").success());
        let got = probe.join().expect("probe");
        let invalid = got.status.code() == Some(4);
        o = Some(got);
        if invalid {
            break;
        }
        if let Some(mut a) = lab.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
    let o = o.expect("a probe ran");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("INVALID"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let why = v["runs"][0]["env"]["lab"]["invalid"].as_str().expect("invalid says why");
    // 150 ms of a 3 s run: more than the 1% a run may lose, and what held it up
    assert!(why.contains("the emulator was held up for"), "{why}");
    assert!(why.contains("with the emulator not running"), "{why}");
}

#[test]
fn asymmetric_directions_add_up() {
    if !privileged("asymmetric_directions_add_up") {
        return;
    }
    let mut lab = Lab::up("asym", &["--set-ab", "delay=12ms", "--set-ba", "delay=3ms"]);
    let st = lab.status();
    // each way less half the lab's own round trip, measured when it came up
    let floor = st["lab"]["spec"]["floor_ns"].as_f64().expect("the lab's own round trip");
    assert!(floor > 0.0 && floor < 2.0e6, "{floor} ns");
    let half = (floor / 2.0).round() as u64;
    assert_eq!(st["lab"]["spec"]["ab"]["delay_ns"], 12_000_000 - half);
    assert_eq!(st["lab"]["spec"]["ba"]["delay_ns"], 3_000_000 - half);
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| l.rtt_a_to_b("udp", "30", &["--warmup", "2"]));
    let (_, median, _, _) = medians(&o)[0].clone();
    assert!((15.0e6 - floor..16.0e6).contains(&median), "median {median} ns: 12 ms out, 3 ms back, floor {floor} ns");
}

#[test]
fn calibration_at_100_mbit_per_s_and_25_ms() {
    if !privileged("calibration_at_100_mbit_per_s_and_25_ms") {
        return;
    }
    // the rate and the queue bound are the emulator's alone; the delay's
    // median error is the emulator's plus the hosts' wake-ups
    let _serial = serial();
    // its own state directory: what calibration keeps is read by every lab after
    let state = std::env::temp_dir().join(format!("gridperf-cal100-state-{}", std::process::id()));
    // a point the emulator's hold-ups made INVALID is measured again, four
    // times and more while STEAL_BUDGET lasts, each once the hypervisor
    // leaves the machine alone (CI, under steal: a median delay error of
    // 1.03 ms)
    let mut v = serde_json::Value::Null;
    let mut tries = Tries::new(4, STEAL_BUDGET);
    while tries.next() {
        let o = crate::bin()
            .env("XDG_STATE_HOME", &state)
            // its own tries, each after a quiet moment
            .args([
                "lab",
                "calibrate",
                "--rates",
                "100M",
                "--delays",
                "25ms",
                "--seconds",
                "2",
                "--tries",
                "1",
                "--json",
            ])
            .output()
            .expect("gridperf");
        assert!(o.status.success(), "{}", stderr(&o));
        v = serde_json::from_slice(&o.stdout).expect("json");
        if v["points"][0]["invalid"].is_null() {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&state);
    assert_eq!(v["schema"], "gridperf.lab-calibration/1");
    let p = &v["points"][0];
    let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
    assert!(f("offered_rate_bps") > 1.02e8, "the load did not overload the link: {p}");
    assert!(f("rate_error").abs() <= 0.01, "rate {} bit/s", f("measured_rate_bps"));
    // a bulk TCP flow can carry no more than the link, and CUBIC with a
    // 1-BDP queue keeps it nearly full
    assert!(f("tcp_rate_bps") <= 1.01e8 && f("tcp_rate_bps") >= 0.9e8, "TCP {} bit/s", f("tcp_rate_bps"));
    // with the queue full, the probe waits queue/rate behind the load: its
    // median sits at the bound, plus the hosts' wake-ups on a machine this
    // loaded (the emulator takes 90% of one CPU, the load generator much of
    // the other: CI measured 101.9 ms against a 100.4 ms bound); its tail
    // is reported, not asserted. A queue of the wrong size misses by tens of ms.
    assert!(f("loaded_rtt_median_ns") <= f("queue_bound_ns") + 3_000_000.0, "{p}");
    // the queue was really full: the loaded RTT is well above the base
    assert!(f("loaded_rtt_median_ns") > f("queue_bound_ns") - 10_000_000.0, "{p}");
    assert!(p["table_samples"].as_u64().unwrap_or(0) >= 300, "{p}");
    assert_eq!(p["table_errors_ns"].as_array().map(Vec::len), Some(4), "{p}");
    // The delay figures as a run judged round trip by round trip sees
    // them: without the round trips that crossed a moment the emulator was
    // late. The point's own figures keep those (the emulator's lateness on
    // this machine is what calibration measures), and so move with the
    // hypervisor: CI, rootless and under steal on every CPU, four tries in
    // a row INVALID, saw a median delay error of 288 us and the table's
    // p90 2.3 ms out, its p10 0.03 ms. What the emulator does with the
    // delay and the table is judged here.
    let r = &p["by_round_trip"];
    let g = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let counted = r["counted"].as_u64().expect("the late windows reached over both phases");
    let left_out = r["left_out"].as_u64().unwrap_or(u64::MAX);
    assert!(left_out * 2 <= counted, "over half the round trips crossed a late window: {p}");
    // the emulator adds the delay: the median's error is the hosts' wake-ups
    assert!(g("delay_error_median_ns").abs() <= 300_000.0, "median delay error: {p}");
    // the delay table was drawn from: its spread from p10 to p90 (0.66 ms)
    // came out. The hosts' wake-ups only widen it (CI, as a user, with
    // another lab test beside it, saw p50 and p90 +0.4 ms and p10 +0.02 ms);
    // a lab that ignored the table would have none, 0.66 ms short. The
    // difference of two quantiles of one sample leaves the baseline out.
    let errs = r["table_errors_ns"].as_array().expect("table errors");
    assert_eq!(errs.len(), 4, "{p}");
    let e = |k: usize| errs[k][1].as_f64().unwrap_or(f64::NAN);
    let spread_miss = e(2) - e(0);
    assert!(
        (-300_000.0..=1_500_000.0).contains(&spread_miss),
        "the table's p10-p90 spread missed by {spread_miss} ns: {p}"
    );
}

/// Issue 33: a delay line beyond a memory cap is refused before anything is
/// made, with the figure and the cap; `lab up` states what a lab may hold.
#[test]
fn a_lab_that_would_not_fit_in_memory_is_refused_with_the_figure_and_the_cap() {
    // 100 Gbit/s x 10 s each way: 125 GB a direction in the line, 21 GB of
    // packet records (1500-byte packets), 1.8 MB of queue: 272.6 GiB
    let o = run(&["lab", "up", "--name", "toobig", "--rate", "100G", "--delay", "10s", "--queue", "1000pkt"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("would hold 272.6 GiB") && err.contains("half of this machine's available memory"), "{err}");
    assert!(gridperf::lab::state("toobig").is_none(), "nothing made");
}

/// Issue 33: at 10 Gbit/s the load generator (one datagram per system
/// call) offered at most 4-5 Gbit/s and the emulator, reading them one by
/// one, fell behind: the rate was never tested. With UDP segmentation
/// offload through the TUN devices (a UDP_SEGMENT send arrives as one
/// super-packet; the emulator decides each datagram and writes runs of
/// survivors as smaller ones) and a sender per 4 Gbit/s, the load
/// overloads the link and the rate is right. At 5 Gbit/s here, which
/// needs both: at 10G on this 2-vCPU machine the emulator takes 66-77% of
/// a CPU and CI once saw it saturated (106%, 9.53 Gbit/s offered), so 10G
/// is measured by bench/lab-rate.sh and crossed in CI by the kill test.
#[test]
fn calibration_at_5_gbit_per_s_overloads_the_link_and_finds_its_rate() {
    if !privileged("calibration_at_5_gbit_per_s_overloads_the_link_and_finds_its_rate") {
        return;
    }
    let _serial = serial();
    // its own state directory: what calibration keeps is read by every lab after
    let state = std::env::temp_dir().join(format!("gridperf-cal-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let gp = |args: &[&str]| crate::bin().env("XDG_STATE_HOME", &state).args(args).output().expect("gridperf");
    // a rate off by more than 1% must be said INVALID (the emulator or the
    // receiving host fell behind: CI once counted 4.22 of 5 Gbit/s), and is
    // then measured again, four times and more while STEAL_BUDGET lasts,
    // each once the hypervisor leaves the machine alone (CI: three in a
    // row INVALID under steal, the last offering 4.38 Gbit/s); a point
    // INVALID for another phase (the delay table under steal) keeps its rate. A load that fell
    // short (its sender starved: CI once offered 5.00 Gbit/s and counted
    // 4.18% short) tested nothing, and is measured again too. So is a rate
    // off by more than 1% in a run said valid: the emulator does not yet
    // say when its own CPU, not the link, set the rate (CI: 4.86 of 5
    // Gbit/s, the emulator at 103% of a CPU, valid; calibration's verdict
    // said "misses a target" and kept the rate as not held). CI's 4.90 of
    // 5 Gbit/s said valid, four tries in a row, was the sink's: it dropped
    // 314 receives of ~40 datagrams each (UDP GRO), counted as one each
    // until 2026-12-03, and is INVALID now
    let mut v = serde_json::Value::Null;
    let mut tries = Tries::new(4, STEAL_BUDGET);
    while tries.next() {
        let o =
            gp(&["lab", "calibrate", "--rates", "5G", "--delays", "5ms", "--seconds", "1", "--tries", "1", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        v = serde_json::from_slice(&o.stdout).expect("json");
        let p = &v["points"][0];
        let overloaded = p["offered_rate_bps"].as_f64().is_some_and(|r| r > 1.02 * 5e9);
        if overloaded && p["rate_error"].as_f64().is_some_and(|e| e.abs() <= 0.01) {
            break;
        }
    }
    let p = &v["points"][0];
    let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
    assert!(f("offered_rate_bps") > 1.02 * 5e9, "the load did not overload the link: {p}");
    assert!(f("rate_error").abs() <= 0.01, "rate {} bit/s: {p}", f("measured_rate_bps"));
    // kept, and said before a lab beyond it comes up: 20G was not tried
    // (when 5G held its rate), or 5G did not hold (when it did not)
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("gridperf/lab-calibration.json")).expect("kept"))
            .expect("json");
    let held = kept["points"][0]["rate_held"].as_bool().expect("rate_held");
    let o = gp(&["lab", "up", "--name", "cal20g", "--rate", "20G", "--rtt", "1ms"]);
    let _ = gp(&["lab", "down", "--name", "cal20g"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    if held {
        assert!(
            err.contains("calibrated as root up to 5.00 Gbit/s")
                || err.contains("calibrated without root (no real-time priority) up to 5.00 Gbit/s"),
            "{err}"
        );
        assert!(err.contains("20.00 Gbit/s was not tried"), "{err}");
    } else {
        assert!(err.contains("did not hold its rate at 5.00 Gbit/s") && err.contains("at 20.00 Gbit/s"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn jitter_spreads_the_round_trip_as_configured() {
    if !privileged("jitter_spreads_the_round_trip_as_configured") {
        return;
    }
    // uniform +-2 ms each way, reordering allowed: a round trip is 20 ms
    // plus the sum of two uniform draws, whose standard deviation is
    // 2 ms x sqrt(2/3) = 1.63 ms, and which stays within +-4 ms (its p99
    // +3.43 ms); a valid run's packets may be up to 1 ms behind schedule
    // (the emulator's lag threshold), all but 1% of them, so all but a few
    // round trips stay within 24 ms + 1 ms (CI: a valid run's p99 at 25.4 ms)
    let mut lab = Lab::up("jitter", &["--rtt", "20ms", "--jitter", "2ms", "--reorder"]);
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| l.rtt_a_to_b("udp", "300", &["--warmup", "2", "--samples"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let s = &v["points"][0]["summary"];
    let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
    assert!((1.3e6..2.0e6).contains(&f("stddev_ns")), "{s}");
    assert!(f("min_ns") >= 16.0e6 && (19.5e6..20.8e6).contains(&f("median_ns")), "{s}");
    let samples: Vec<u64> = v["points"][0]["samples_ns"]
        .as_array()
        .expect("--samples")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    // those that crossed the emulator while it was late are left out, and counted
    let left_out = v["points"][0]["left_out"].as_u64().unwrap_or(0) as usize;
    assert!(samples.len() + left_out >= 300 && left_out * 4 <= 300, "{} samples, {left_out} left out", samples.len());
    // the valid rule's 1% late, and 1% for the hosts' own scheduling on a busy machine
    let beyond = samples.iter().filter(|&&x| x > 25_000_000).count();
    assert!(beyond * 50 <= samples.len(), "{beyond} of {} round trips beyond 25 ms: {s}", samples.len());
}

#[test]
fn the_loopback_profile_is_lo_in_a_private_namespace() {
    if !privileged("the_loopback_profile_is_lo_in_a_private_namespace") {
        return;
    }
    let mut lab = Lab::up("lo", &["--profile", "loopback", "--mtu", "1500"]);
    let st = lab.status();
    let hosts = st["lab"]["hosts"].as_array().expect("hosts");
    assert_eq!(hosts[0]["netns"], hosts[1]["netns"]);
    lab.agent = Some(
        crate::bin()
            .args(["lab", "exec", "--name", &lab.name, "b", "--", BIN, "serve", "--once"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let o = lab.exec_a(&["rtt", "127.0.0.1", "--proto", "tcp", "--sizes", "64", "-n", "20", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // lo with the MTU asked for, not the host's lo
    assert_eq!(v["env"]["client"]["sockets"][0]["path_mtu"], 1500);
    assert!(v["points"][0]["summary"]["median_ns"].as_f64().expect("median") < 5e6);
}

#[test]
fn access_links_add_to_the_shared_bottleneck() {
    if !privileged("access_links_add_to_the_shared_bottleneck") {
        return;
    }
    // a1 and a2 share the 10 ms bottleneck to b1; every host has a 1 ms
    // access link, a2's own is 5 ms: 14 ms and 22 ms round trips
    let mut lab =
        Lab::up("acc", &["--hosts", "2x1", "--rtt", "10ms", "--access", "delay=1ms", "--access", "a2:delay=5ms"]);
    lab.agent = Some(
        crate::bin()
            .args(["lab", "exec", "--name", &lab.name, "b1", "--", BIN, "serve"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let floor = lab.floor();
    for (host, lo, hi) in [("a1", 14.0e6 - floor, 15.0e6), ("a2", 22.0e6 - floor, 23.0e6)] {
        let o = unless_invalid(|| {
            run(&[
                "lab",
                "exec",
                "--name",
                &lab.name,
                host,
                "--",
                BIN,
                "rtt",
                "10.77.2.1",
                "--proto",
                "udp",
                "--sizes",
                "64",
                "-n",
                "30",
                "--warmup-time",
                "0s",
                "--json",
            ])
        });
        let (_, median, _, _) = medians(&o)[0].clone();
        assert!((lo..hi).contains(&median), "{host}: median {median} ns");
    }
    let st = lab.status();
    let access = st["health"]["access"].as_array().expect("access counters");
    assert_eq!(access.len(), 3);
    let o = run(&["lab", "up", "--name", "x", "--hosts", "2x1", "--access", "c9:delay=1ms"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("its hosts are a1, a2, b1"), "{}", stderr(&o));
}

#[test]
fn parallel_paths_hash_each_connection_onto_one() {
    if !privileged("parallel_paths_hash_each_connection_onto_one") {
        return;
    }
    // two paths of 10 ms and 40 ms round trip: each of 16 streams sees one
    // of them, and both are taken (all 16 on one path: 1 in 32 768)
    let mut lab = Lab::up("paths", &["--rtt", "10ms", "--rate", "100M", "--paths", "2", "--path", "2:delay=20ms"]);
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| l.exec_a(&["stream", "10.77.2.1", "-P", "16", "-t", "1", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    let rtts: Vec<f64> = v["runs"][0]["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .map(|s| {
            s["timeline"]
                .as_array()
                .and_then(|t| t.last())
                .map_or(f64::NAN, |t| t["min_rtt_us"].as_f64().unwrap_or(f64::NAN))
        })
        .collect();
    // under load the emulator stamps what arrived during a tick at its
    // middle: a packet may leave half a tick (20 us) early, each way; and
    // the lab took its own round trip, measured idle, off the delays, where
    // a loaded stack's own is shorter (CI: 39958 us on the 40 ms path)
    let early = 2.0 * gridperf::lab::emulator::TICK_NS as f64 / 2.0 / 1000.0 + lab.floor() / 1000.0;
    let short = rtts.iter().filter(|&&r| (10_000.0 - early..12_000.0).contains(&r)).count();
    let long = rtts.iter().filter(|&&r| (40_000.0 - early..42_000.0).contains(&r)).count();
    assert!(short > 0 && long > 0 && short + long == 16, "min RTTs {rtts:?}");
    // the emulator counts each path; the link's figures are their sums
    let st = lab.status();
    let paths = st["health"]["paths"].as_array().expect("paths' counters");
    assert_eq!(paths.len(), 2);
    let arrived = |c: &serde_json::Value| c["arrived"].as_u64().unwrap_or(0);
    assert!(paths.iter().all(|p| arrived(&p[0]) > 0), "{paths:?}");
    assert_eq!(arrived(&paths[0][0]) + arrived(&paths[1][0]), arrived(&st["health"]["links"][0]));
    // a path that does not exist, or settings for paths without --paths
    let o = run(&["lab", "up", "--name", "x", "--paths", "2", "--path", "3:loss=1%"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("path 3 does not exist"), "{}", stderr(&o));
    let o = run(&["lab", "up", "--name", "x", "--path", "2:loss=1%"]);
    assert!(stderr(&o).contains("give paths=N"), "{}", stderr(&o));
}

#[test]
fn ctrl_c_during_lab_up_takes_it_down_again() {
    if !privileged("ctrl_c_during_lab_up_takes_it_down_again") {
        return;
    }
    let _serial = serial();
    let name = format!("t{}-ctrlc", std::process::id() % 100_000);
    // 16 hosts take tens of milliseconds to build: the interrupt lands while they are built
    let child = crate::bin()
        .args(["lab", "up", "--name", &name, "--hosts", "8x8", "--rate", "100M"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lab up");
    // spec.json is written once `lab up` catches Ctrl-C, just before it starts the emulator
    let spec = gridperf::lab::run_dir().join(format!("lab-{name}")).join("spec.json");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !spec.exists() {
        assert!(Instant::now() < deadline, "lab up made no spec.json");
        std::thread::sleep(Duration::from_micros(200));
    }
    gridperf_sys::signal(child.id(), libc::SIGINT).expect("SIGINT");
    let o = child.wait_with_output().expect("wait");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    // nothing is left: no namespace, no state, no emulator
    let left = labs_named(&name);
    assert!(left.is_empty(), "left: {left:?}");
}

#[test]
fn rtt_across_a_profile_with_lab_brings_it_up_and_down() {
    if !privileged("rtt_across_a_profile_with_lab_brings_it_up_and_down") {
        return;
    }
    let _serial = serial();
    let labs = || labs_named("run");
    let before = labs();
    // the man profile: 2 ms RTT at 100 Mbit/s; a 64-byte UDP exchange takes
    // 2 ms plus two 92-byte packet times (15 us) plus the hosts' own costs
    let o = unless_invalid(|| {
        run(&["rtt", "--lab", "man", "--lab-set", "loss=0", "--proto", "udp", "--sizes", "64", "-n", "200", "--json"])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // at least the 2 ms less the lab's own round trip, taken off its delays
    // as it came up (the hosts' costs at run time may be less than the
    // floor measured then, on a machine busier then: a rootless pass once
    // saw 1.83 ms)
    let median = v["points"][0]["summary"]["median_ns"].as_f64().expect("median");
    let floor = v["env"]["lab"]["floor_ns"].as_f64().expect("the lab's own round trip, taken off");
    assert!(floor > 0.0 && floor < 1e6, "the lab's own round trip: {floor} ns");
    assert!((2e6 - floor..3e6).contains(&median), "median RTT {median} ns across a 2 ms lab ({floor} ns taken off)");
    assert_eq!(v["env"]["lab"]["profile"], "man", "{}", v["env"]["lab"]);
    assert!(v["env"]["lab"]["invalid"].is_null(), "{}", v["env"]["lab"]);
    assert_eq!(labs(), before, "the run's lab was left behind");
    // HOST and --lab together make no sense
    let o = run(&["rtt", "127.0.0.1", "--lab", "man"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("leave out HOST"), "{}", stderr(&o));
}

/// Starts `gridperf stream --lab crossover-fe` for 30 s and waits until
/// its lab is up and the stream has flowed a second; the run and the labs
/// there were before it.
fn stream_across_a_lab(stderr: Stdio) -> (Child, Vec<String>) {
    stream_across(stderr, &["--lab", "crossover-fe"])
}

/// A 30 s stream across a lab of its own (`lab`: the --lab arguments),
/// once its lab is up and the stream has run a second.
fn stream_across(stderr: Stdio, lab: &[&str]) -> (Child, Vec<String>) {
    let before = labs_named("run");
    let child = crate::bin()
        .arg("stream")
        .args(lab)
        .args(["-t", "30", "--no-store"])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("stream --lab");
    let deadline = Instant::now() + Duration::from_secs(10);
    while labs_named("run").len() <= before.len() {
        assert!(Instant::now() < deadline, "the run's lab did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    (child, before)
}

#[test]
fn ctrl_c_during_a_lab_run_takes_the_lab_down() {
    if !privileged("ctrl_c_during_a_lab_run_takes_the_lab_down") {
        return;
    }
    let _serial = serial();
    let labs = || labs_named("run");
    let (mut child, before) = stream_across_a_lab(Stdio::piped());
    std::thread::sleep(Duration::from_secs(1));
    gridperf_sys::signal(child.id(), libc::SIGINT).expect("SIGINT");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < deadline, "gridperf did not end within 10 s of Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(child.stderr.as_mut().expect("stderr"), &mut err);
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{err}");
    assert!(err.contains("taking lab"), "{err}");
    assert_eq!(labs(), before, "the run's lab was left behind");
}

/// Issue 33's 10 Gbit/s lab in CI, kept short: four CUBIC streams across
/// 10 Gbit/s x 5 ms carry at least 9 Gbit/s in a valid 3 s run, the link's
/// queue full at times (the link, not the hosts, set the rate). By hand
/// on this 2-CPU VM: 9.52-9.55 Gbit/s valid, root and user, 9.44-9.55 beside
/// a busy loop on one CPU or niced ones on both. A run the emulator marks
/// INVALID is run again (`unless_invalid`). So is a valid one under 9
/// Gbit/s, at most four times: valid says the emulator kept up, not that
/// the hosts did, and they share this VM's two CPUs with its steal (by
/// hand on 2026-12-03, one valid run carried 8.95 Gbit/s and nine others
/// 9.10-9.55). A lab that cannot carry 9 Gbit/s fails every try.
#[test]
fn four_streams_fill_a_10_gbit_per_s_lab_in_a_valid_run() {
    if !privileged("four_streams_fill_a_10_gbit_per_s_lab_in_a_valid_run") {
        return;
    }
    let _serial = serial();
    let args: Vec<&str> =
        "stream --lab baltic --lab-set rate=10G --lab-set rtt=5ms -P 4 -t 3 -C cubic --no-store --json"
            .split_whitespace()
            .collect();
    let up = |o: &Output| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok()?["runs"][0]["up_bps"].as_f64();
    let mut low_tries = 0;
    let o = unless_invalid(|| loop {
        let o = run(&args);
        match up(&o) {
            Some(bps) if o.status.success() && bps < 9.0e9 && low_tries < 4 => {
                low_tries += 1;
                eprintln!("a valid try carried {:.2} Gbit/s, tried again once the machine is quiet", bps / 1e9);
                crate::quiet();
            }
            _ => break o,
        }
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    let r = &v["runs"][0];
    let bps = r["up_bps"].as_f64().expect("up_bps");
    let lab = &r["env"]["lab"];
    assert!(lab["invalid"].is_null(), "{lab}");
    assert!(bps >= 9.0e9, "{:.2} Gbit/s across 10 Gbit/s x 5 ms: {}", bps / 1e9, stderr(&o));
    let link = &lab["emulator"]["links"][0];
    assert!(link["queue_full"].as_u64().is_some_and(|n| n > 0), "the queue never filled: {link}");
    // the TUN queues' markers (queue_probe): one every 2 ms to each busy
    // host, each read back (all but the last one awaited a host) and none
    // sent on as a packet to its address, which no host has
    let emu = &lab["emulator"];
    let q = &emu["queue_waits"];
    let (sent, answered) = (q["sent"].as_u64().expect("sent"), q["answered"].as_u64().expect("answered"));
    assert!(sent >= 1000 && answered + 2 >= sent, "markers sent {sent}, read back {answered}: {q}");
    assert!(emu["unroutable"].as_u64().is_some_and(|n| n < 100), "markers routed on: {emu}");
}

#[test]
fn a_lab_run_killed_outright_leaves_nothing_once_it_is_gone() {
    if !privileged("a_lab_run_killed_outright_leaves_nothing_once_it_is_gone") {
        return;
    }
    let _serial = serial();
    // at 100 Mbit/s, and at 10 Gbit/s with four streams and tens of MB in
    // the emulator's delay line and queues (issue 33)
    for lab in [&["--lab", "crossover-fe"][..], &["--lab", "baltic", "--lab-set", "rate=10G", "-P", "4"][..]] {
        killed_outright_leaves_nothing(lab);
    }
}

fn killed_outright_leaves_nothing(lab: &[&str]) {
    let labs = || labs_named("run");
    let emulators_before = emulators_named("run");
    let (mut child, before) = stream_across(Stdio::null(), lab);
    // the run's agent on host b: a child of the run
    let parent = format!("PPid:\t{}", child.id());
    let agents: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| s.lines().any(|l| l == parent)))
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.starts_with(BIN.as_bytes()) && c.windows(5).any(|w| w == b"serve"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(agents.len(), 1, "the run's agent: {agents:?}");
    // SIGKILL: the run cannot take its lab down; its emulator must notice
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    // a zombie is gone too: its parent was the killed run
    let running = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
    };
    // its state, its namespaces, its agent and its emulator
    while labs() != before || running(&agents[0]) || emulators_named("run") != emulators_before {
        assert!(
            Instant::now() < deadline,
            "{lab:?}: left 10 s after the run was killed: {:?}, agent {}",
            labs(),
            agents[0]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fanout_across_a_dumbbell_deadlocks_and_drains_as_on_loopback() {
    if !privileged("fanout_across_a_dumbbell_deadlocks_and_drains_as_on_loopback") {
        return;
    }
    let _serial = serial();
    let labs = || labs_named("fo");
    let before = labs();
    // a run the emulator marks INVALID (it fell behind on a busy machine: the
    // rootless CI once saw it 23 ms behind) is run again
    let o = unless_invalid(|| {
        run(&[
            "fanout",
            "--lab",
            "lan-gige",
            "--hosts",
            "1x2",
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
            "1s",
            "--no-store",
            "--json",
        ])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let p = v["points"].as_array().expect("points");
    // original: 16 requests fit in the buffers, 256 do not
    assert!(p[0]["deadlock"].is_null() && p[0]["bandwidth_bps"].as_f64().is_some(), "{}", p[0]);
    assert!(p[1]["deadlock"].is_object(), "{}", p[1]);
    // drain gets through both
    assert!(p[2]["deadlock"].is_null() && p[3]["deadlock"].is_null(), "{} {}", p[2], p[3]);
    // the bytes crossed the emulated gigabit: slower than loopback's
    assert!(p[3]["bandwidth_bps"].as_f64().is_some_and(|b| b > 1e6 && b < 2.1e9), "{}", p[3]);
    assert_eq!(labs(), before, "the sweep's lab was left behind");
}

/// One stream a -> b in a lab: the sender's rate, bits per second.
fn stream_a_to_b(lab: &mut Lab, secs: &str) -> f64 {
    // a run the emulator marks INVALID (exit 4: it fell behind on a busy
    // machine) is run again
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|lab| {
        lab.exec_a(&["stream", "10.77.2.1", "-t", secs, "--omit", "1", "-C", "cubic", "--json", "--no-store"])
    });
    if let Some(mut a) = lab.agent.take() {
        let _ = a.wait();
    }
    assert!(o.status.success(), "stream: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    v["runs"][0]["up_bps"].as_f64().expect("up_bps")
}

#[test]
fn tune_apply_lifts_an_old_kernels_buffer_cap_in_the_lab() {
    if !privileged("tune_apply_lifts_an_old_kernels_buffer_cap_in_the_lab") {
        return;
    }
    // Linux 2.6.9's defaults (BalticGrid's Scientific Linux 4), per namespace
    let mut lab = Lab::up(
        "tune",
        &[
            "--profile",
            "baltic",
            "--set",
            "rtt=20ms",
            "--sysctl",
            "net.ipv4.tcp_rmem=4096 87380 174760",
            "--sysctl",
            "net/ipv4/tcp_wmem = \"4096 16384 131072\"",
        ],
    );
    let lab_name = lab.name.clone();
    let read = |host: &str, name: &str| {
        let p = format!("/proc/sys/{}", name.replace('.', "/"));
        let o = on_host(&lab_name, host, &["cat", &p]);
        assert!(o.status.success(), "read in the namespace: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
    };
    assert_eq!(read("a", "net.ipv4.tcp_wmem"), "4096 16384 131072");
    assert_eq!(read("b", "net.ipv4.tcp_rmem"), "4096 87380 174760");
    let status = String::from_utf8_lossy(&run(&["lab", "status", "--name", &lab.name]).stdout).into_owned();
    assert!(status.contains("net.ipv4.tcp_rmem = 4096 87380 174760"), "{status}");

    // what tune reads in the namespaces, measures across the lab, and says binds
    // a probe that could not tell a share says why (too few samples, the
    // buffer rarely held the sender: a machine that paused the lab); tune
    // does not watch the lab's emulator, so such a probe is measured again,
    // up to three times
    let tuned = || {
        // tune measures a probe the emulator did not keep up with again,
        // three times; one still INVALID after that exits 4 and is run again
        let o = unless_invalid(|| run(&["tune", "--in-lab", &lab.name, "--measure-share", "-C", "cubic", "--json"]));
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")
    };
    // the send-share probe asks the receiver for 16 times the send buffer's
    // ask (1 MiB here). net.core.rmem_max is global, the machine's, not the
    // lab's: at its default (212992) the receiver gets 425984 bytes and its
    // window, not the old send buffer, holds the probe a->b (seen: 263 kB
    // in flight at 14 of 15 samples). Such a probe tells no send share and
    // says why; tune then draws no cap from that buffer (a guess once
    // understated it). With rmem_max raised, every probe tells its share
    let rmem_max: u64 =
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").expect("rmem_max").trim().parse().expect("a number");
    let window_held = |p: &serde_json::Value| {
        rmem_max < 1 << 20
            && p["send_share"].is_null()
            && p["notes"].to_string().contains("send share: the receiver's window bound the probe")
    };
    let told = |v: &serde_json::Value| {
        v["share_probes"].as_array().is_some_and(|ps| {
            ps.iter().all(|p| {
                p["receive_share"].as_f64().is_some() && (p["send_share"].as_f64().is_some() || window_held(p))
            }) && ps.iter().any(|p| p["send_share"].as_f64().is_some())
        })
    };
    let mut v = tuned();
    for _ in 0..2 {
        if told(&v) {
            break;
        }
        eprintln!("a share probe told no share, measured again: {}", v["share_probes"]);
        v = tuned();
    }
    assert_eq!(v["bdp_bytes"], 2_500_000u64, "1 Gbit/s x 20 ms");
    assert_eq!(v["ends"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["ends"][1]["settings"]["tcp_rmem"], serde_json::json!([4096, 87380, 174760]));
    let ab = v["directions"].as_array().expect("directions").iter().find(|d| d["from"] == "a").expect("a -> b").clone();
    let binding = ab["binding"].as_str().unwrap_or_default().to_string();
    assert!(binding == "sender: net.ipv4.tcp_wmem" || binding == "receiver: net.ipv4.tcp_rmem", "{ab}");
    let cap = ab["cap_bps"].as_f64().expect("cap");
    assert!(cap < 60e6, "{ab}");
    // the probes ask for half the old ceilings (the kernel doubles them): the
    // window share of 1500-byte segments through TUN is between the kernel's
    // 50% start and 90%; the old send buffer binds, and holds more than half
    for p in v["share_probes"].as_array().expect("share_probes") {
        assert_eq!(p["rcvbuf"], 174_760u64, "{p}");
        assert_eq!(p["sndbuf"], 131_072u64, "{p}");
        let r = p["receive_share"].as_f64().expect("receive share");
        assert!((0.45..0.9).contains(&r), "{p}");
        if window_held(p) {
            eprintln!("net.core.rmem_max {rmem_max}: the receiver's window held the send-share probe: {p}");
            continue;
        }
        let s = p["send_share"].as_f64().unwrap_or_else(|| panic!("send share: the old send buffer binds: {p}"));
        assert!((0.5..1.3).contains(&s), "{p}");
    }
    assert!(told(&v), "no probe told a send share: {}", v["share_probes"]);
    // and the cap follows from them: the lower of the two ends' caps (the
    // send buffer's only where its share was told)
    let (r, s) =
        (v["share_probes"][0]["receive_share"].as_f64().unwrap_or(0.0), v["share_probes"][0]["send_share"].as_f64());
    let want = (174_760.0 * r).floor().min(s.map_or(f64::MAX, |s| (131_072.0 * s).floor())) * 8.0 / 0.02;
    assert!((cap - want).abs() < 8.0 / 0.02 + 1.0, "cap {cap}, from the shares {want}");

    // another user cannot see this lab, let alone change it
    if gridperf::host::is_root() && Command::new("setpriv").arg("--version").output().is_ok() {
        let o = crate::hermetic(&mut Command::new("setpriv"))
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "tune", "--in-lab", &lab.name, "--apply"])
            .output()
            .expect("setpriv");
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(&format!("no lab named {:?} is up", lab.name)), "{}", stderr(&o));
        assert_eq!(read("b", "net.ipv4.tcp_rmem"), "4096 87380 174760");
    }

    let before = stream_a_to_b(&mut lab, "3");
    // the window the old buffers allow, at 50-75% of them, is 65-130 kB per 20 ms: 26-53 Mbit/s
    assert!(before < 80e6, "before: {before}");
    // a cap is what a stream can carry at most: one below what the stream
    // then carried was issue 13's wrong answer (897.8 said, 964.3 carried)
    assert!(before <= cap * 1.05, "tune said {cap} bit/s at most; the stream carried {before}");

    let o = run(&["tune", "--in-lab", &lab.name, "--apply", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let applied = v["applied"].as_array().expect("applied");
    assert!(applied.len() >= 4 && applied.iter().all(|x| x["outcome"] == "set"), "{applied:?}");
    assert!(v["after"].as_array().expect("after").iter().all(|d| d["binding"].is_null()), "{}", v["after"]);
    // what was set is what the hosts now have, and it is more than the old ceilings
    for x in applied {
        let (host, name, value) = (
            x["host"].as_str().expect("host"),
            x["setting"].as_str().expect("setting"),
            x["value"].as_str().expect("value"),
        );
        assert_eq!(read(host, name), value, "{x}");
        let max: u64 = value.split(' ').nth(2).and_then(|m| m.parse().ok()).expect("max");
        assert!(max >= 4 << 20, "{x}");
    }
    for host in ["a", "b"] {
        assert!(applied.iter().any(|x| x["host"] == host && x["setting"] == "net.ipv4.tcp_rmem"), "{applied:?}");
    }
    let after = stream_a_to_b(&mut lab, "4");
    assert!(after > 5.0 * before && after > 500e6, "before {before}, after {after}");

    // a global setting is refused for a lab host, before anything is made
    let o = run(&["lab", "up", "--name", "tglobal", "--profile", "baltic", "--sysctl", "net.core.rmem_max=1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("global"), "{}", stderr(&o));
    assert!(labs_named("tglobal").is_empty());
}

#[test]
fn a_sweep_over_a_kernels_buffers_sets_them_in_the_labs_hosts() {
    if !privileged("a_sweep_over_a_kernels_buffers_sets_them_in_the_labs_hosts") {
        return;
    }
    let _serial = serial();
    let before = labs_named("run");
    // BalticGrid's figure in small: a 2.6.9 kernel's buffers and this one's, at 8 and 35 ms on 1 Gbit/s
    // (the profile swept, not --lab: the labs come up without root all the same)
    let args = [
        "stream",
        "--sweep",
        "profile=baltic",
        "--sweep",
        "buffers=2.6.9,this",
        "--sweep",
        "rtt=8ms,35ms",
        "-t",
        "1.5",
        "-C",
        "cubic",
        "--json",
        "--db",
    ];
    // stored in a store of its own: a point that stayed INVALID after the
    // sweep's own reruns (the hypervisor paused the machine in each) is
    // measured again by --resume, alone, and the points kept are not
    let dir = std::env::temp_dir().join(format!("gridperf-sweep-buffers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmpdir");
    let db = dir.join("s.db").display().to_string();
    let with_db = |resume: bool| {
        let mut a: Vec<&str> = args.to_vec();
        a.push(&db);
        if resume {
            a.push("--resume");
        }
        run(&a)
    };
    let mut o = with_db(false);
    for _ in 0..2 {
        if o.status.code() != Some(4) || !stderr(&o).contains("stayed INVALID") {
            break;
        }
        o = with_db(true);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    let at = |buffers: &str, rtt: &str| {
        points
            .iter()
            .find(|p| p["settings"][1][1] == buffers && p["settings"][2][1] == rtt)
            .unwrap_or_else(|| panic!("{buffers} {rtt}: {v}"))
            .clone()
    };
    for rtt in ["8ms", "35ms"] {
        let old = at("2.6.9", rtt);
        // the old kernel's tcp_wmem max (131072) binds below its tcp_rmem max (174760)
        assert_eq!(old["window_bytes"], 131_072, "{old}");
        assert_eq!(old["link_bps"], 1_000_000_000u64, "{old}");
        let rtt_s = old["rtt_ns"].as_f64().expect("rtt") / 1e9;
        let limit = 131_072.0 * 8.0 / rtt_s;
        let got = old["median_bps"].as_f64().expect("median");
        // window-limited: at most W/RTT (the kernel keeps part of the buffer), and not starved
        assert!(got <= limit * 1.05 && got > limit * 0.3, "{rtt}: {got} against W/RTT {limit}: {old}");
        let verdict = old["verdicts"][0].as_str().unwrap_or_default();
        assert!(verdict == "send-buffer" || verdict == "receive-window", "{old}");
    }
    // this kernel's buffers carry many times more at 35 ms (BalticGrid: 10-20 times after tuning)
    let (old, new) = (at("2.6.9", "35ms")["median_bps"].as_f64(), at("this", "35ms")["median_bps"].as_f64());
    let (old, new) = (old.expect("old"), new.expect("new"));
    assert!(new > 5.0 * old, "this kernel {new} against 2.6.9's {old}");
    assert_eq!(labs_named("run"), before, "the sweep's labs were left behind");
    // a sysctl that is global on Linux cannot be a lab host's own
    let o = run(&["stream", "--lab", "man", "--lab-set", "net.core.rmem_max=8738000", "-t", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("global on Linux, not per network namespace"), "{}", stderr(&o));
}

#[test]
fn a_copy_across_a_lab_arrives_whole_at_the_links_rate() {
    if !privileged("a_copy_across_a_lab_arrives_whole_at_the_links_rate") {
        return;
    }
    let _serial = serial();
    let before = labs_named("run");
    let (o, d) = lab_copy("rate", 16, 13, &["--lab-set", "loss=0", "-P", "2", "--block", "1M", "-v"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // 100 Mbit/s of link: the copy's goodput is most of it, never more
    let rate = v["throughput_bps"].as_f64().expect("rate");
    assert!((60e6..=100e6).contains(&rate), "{rate} bit/s across a 100 Mbit/s lab");
    assert_eq!(v["env"]["lab"]["profile"], "man", "{}", v["env"]["lab"]);
    // -v: a line a second, each stream's rate in it (on stderr: no bar here)
    let first = stderr(&o).lines().find(|l| l.trim_start().starts_with("1.0 s")).map(str::to_string);
    let first = first.unwrap_or_else(|| panic!("no line at 1.0 s: {}", stderr(&o)));
    assert!(first.contains("[0: ") && first.contains("  1: "), "{first}");
    // the RTT each stream saw is the lab's 2 ms, or more
    for s in v["per_stream"].as_array().expect("streams") {
        assert!(s["rtt_us"].as_u64().unwrap_or(0) >= 2000, "{s}");
    }
    assert_eq!(labs_named("run"), before, "the copy's lab was left behind");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn one_stream_of_small_blocks_fills_a_long_path() {
    if !privileged("one_stream_of_small_blocks_fills_a_long_path") {
        return;
    }
    let _serial = serial();
    // 100 Mbit/s and 100 ms: 1.25 MB in flight to fill it. A block is
    // acknowledged only when it has all arrived; 4 blocks of 64 KiB
    // unacknowledged (the old window) held one stream to 7.8 Mbit/s here.
    // TCP's buffers autotuned (tcp_wmem's 4 MiB): -w would be capped by the
    // machine's net.core.wmem_max (212992 when fresh: 426 kB, 34 Mbit/s)
    let settings = ["--lab-set", "loss=0", "--lab-set", "rtt=100ms", "-P", "1", "--block", "64K"];
    let (o, d) = lab_copy("long", 32, 11, &settings);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rate = v["throughput_bps"].as_f64().expect("rate");
    assert!((45e6..=100e6).contains(&rate), "{rate} bit/s with one stream across 100 Mbit/s and 100 ms");
    let _ = std::fs::remove_dir_all(&d);
    // a 256 KB buffer there: the verdict names the receiver's window, from the sending end's TCP_INFO
    let settings = ["--lab-set", "loss=0", "--lab-set", "rtt=100ms", "-P", "1", "-w", "256K"];
    let (o, d) = lab_copy("window", 8, 9, &settings);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let verdict = v["verdict"].as_str().unwrap_or_default();
    assert!(verdict.contains("TCP at the sending end: limited by the receiver's window"), "{verdict}");
    assert!(v["per_stream"][0]["tcp"].as_str().is_some_and(|t| t.contains("-w (now 262 kB)")), "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_small_copy_across_a_long_path_costs_five_round_trips_and_a_pull_six() {
    if !privileged("a_small_copy_across_a_long_path_costs_five_round_trips_and_a_pull_six") {
        return;
    }
    // at 400 ms a round trip is far above a process's start (about 0.2 s
    // with lab exec, half a round trip): the wall time counts them. A push: connect; hello with the request behind it; the
    // file list, while the four data connections open at once; the block
    // and its acknowledgment; copy-done with finish behind it. A pull: the
    // agent sends once the needs (and stream-go behind them) arrive, and the
    // client's finish goes as copy-sent arrives. Before: 12 round trips
    // for the push (the data connections one after another, the request
    // behind the welcome, the blocks behind step-ready, finish behind
    // copy-results), then 6 with the block's last segment held by Nagle
    // behind the data connection's hello.
    let mut lab = Lab::up("rtts", &["--rtt", "400ms"]);
    let d = std::env::temp_dir().join(format!("gridperf-lab-rtts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root")).expect("tmpdir");
    let data: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(d.join("f.dat"), &data).expect("write");
    std::fs::write(d.join("root/g.dat"), &data).expect("write");
    let root = d.join("root").display().to_string();
    lab.serve_on_b_with(&["--root", &root, "--allow", "10.77.0.0/16"]);
    let rtt = 0.4;
    let src = d.join("f.dat").display().to_string();
    let pulled = d.join("pulled.dat").display().to_string();
    for (what, args, most) in [
        ("push", vec!["copy", &src, "10.77.2.1:", "-P", "4", "--force", "--no-store"], 5.75),
        ("pull", vec!["copy", "10.77.2.1:g.dat", &pulled, "-P", "4", "--force", "--no-store"], 6.75),
    ] {
        // the fewest of three: a late packet or a busy CPU only adds
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            // the conversation's round trips alone: not the wait for the
            // emulator's next health write (up to 250 ms) that judges a run
            // whose host is in a lab (GRIDPERF_LAB, set by lab exec)
            let mut unwatched = vec!["lab", "exec", "--name", &lab.name, "a", "--", "env", "GRIDPERF_LAB=", BIN];
            unwatched.extend_from_slice(&args);
            let o = run(&unwatched);
            let took = t0.elapsed().as_secs_f64();
            assert!(o.status.success(), "{what}: {}", stderr(&o));
            best = best.min(took);
        }
        eprintln!("a small {what} across 400 ms: {best:.2} s, {:.1} round trips", best / rtt);
        assert!(best < most * rtt, "a small {what} took {best:.2} s across 400 ms: {:.1} round trips", best / rtt);
        assert!(best > 4.0 * rtt, "a {what} in {best:.2} s across 400 ms: the lab's delay is not in it");
    }
    assert!(std::fs::read(d.join("root/f.dat")).expect("pushed") == data, "the push differs");
    assert!(std::fs::read(&pulled).expect("pulled") == data, "the pull differs");
    drop(lab);
    let _ = std::fs::remove_dir_all(&d);
}

/// A copy of a file of `mib` MiB (a pattern shifted by `shift`) across the
/// man profile with `settings`, rerun while the lab says INVALID; it must
/// succeed and arrive whole. Its output and the temporary directory.
fn lab_copy(tag: &str, mib: u32, shift: u32, settings: &[&str]) -> (Output, std::path::PathBuf) {
    let d = std::env::temp_dir().join(format!("gridperf-lab-copy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    let data: Vec<u8> = (0..mib << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> shift) as u8).collect();
    std::fs::write(d.join("f.dat"), &data).expect("write");
    let (src, out) = (d.join("f.dat").display().to_string(), format!("{}/", d.join("out").display()));
    let o = unless_invalid(|| {
        let _ = std::fs::remove_dir_all(d.join("out"));
        let mut a = vec!["copy", &src, &out, "--lab", "man", "--no-store", "--json"];
        a.extend_from_slice(settings);
        run(&a)
    });
    // INVALID after every try for a cause outside gridperf (the rootless
    // CI: the hypervisor took 8% of a 1.8 s copy in 73 hold-ups of 1-10 ms,
    // five tries in a row) still moved every byte, and the figures these
    // tests check have wide bounds: taken, with the verdict said. INVALID
    // for the emulator's own cause is not
    valid_or_invalid_from_outside(&o);
    assert!(std::fs::read(d.join("out/f.dat")).expect("copied") == data, "the copy differs");
    (o, d)
}

/// A run that is valid (exit 0), or INVALID (exit 4) for a cause outside
/// gridperf with its verdict in its JSON: what a lab test that does not
/// check a tight figure takes after its tries. Its JSON.
fn valid_or_invalid_from_outside(o: &Output) -> serde_json::Value {
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let lab = &v["env"]["lab"];
    if o.status.code() == Some(4) {
        assert_eq!(lab["cause"], "outside", "{}", stderr(o));
    } else {
        assert!(lab["invalid"].is_null(), "{lab}");
    }
    v
}

/// Asserts that a restart event's words ("X Mbit/s against its peers'
/// median Y Mbit/s") name a stream slow by the pool's rule (below a third
/// of the median). Both figures are printed to 0.1 Mbit/s, so the rule is
/// checked against the least and most each could have been: a stream at
/// 1.79 against 5.41 prints as 1.8 against 5.4 (CI failed on exactly that).
fn assert_slow_by_the_rule(e: &serde_json::Value) {
    let why = e["why"].as_str().unwrap_or_default();
    let num = |s: &str| s.trim().split(' ').next().and_then(|n| n.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let (rate, rest) = why.split_once(" against its peers' median ").unwrap_or(("nan", "nan"));
    let (rate, median) = (num(rate), num(rest));
    assert!(rate.is_finite() && median.is_finite(), "a restart without its figures: {e}");
    assert!(
        rate - 0.05 < (median + 0.05) * gridperf_core::copy::pool::SLOW_FRACTION,
        "a restart of a stream not slow: {e}"
    );
}

#[test]
fn a_stream_on_a_lossy_path_is_restarted_onto_another() {
    if !privileged("a_stream_on_a_lossy_path_is_restarted_onto_another") {
        return;
    }
    let _serial = serial();
    // two paths of 100 Mbit/s at 20 ms, the second losing 2%: a stream
    // hashed onto it moves a few Mbit/s against tens; 6 streams. No
    // restart is due when none is on it (1 in 64) or when 4 or more are
    // (their peers' median is slow too: 22 in 64): about 1 copy in 3, so
    // up to six tries (three failed once in CI: 5% of runs)
    let settings = [
        "--lab-set",
        "rate=200M",
        "--lab-set",
        "rtt=20ms",
        "--lab-set",
        "loss=0",
        "--lab-set",
        "paths=2",
        "--lab-set",
        "path2:loss=2%",
        "-P",
        "6",
        "-C",
        "cubic",
        "--block",
        "1M",
        // the hosts cache a slow connection's ssthresh: the first restart says so
        "--lab-set",
        "net.ipv4.tcp_no_ssthresh_metrics_save=0",
    ];
    let mut restarted = None;
    for attempt in 0..6 {
        let (o, d) = lab_copy(&format!("restart{attempt}"), 96, 12, &settings);
        let _ = std::fs::remove_dir_all(&d);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let events = v["events"].as_array().cloned().unwrap_or_default();
        let restarts: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "restart").collect();
        // never more than the guard rails allow: 6 a minute, one a window
        assert!(restarts.len() <= 6, "{events:?}");
        if restarts.is_empty() {
            continue;
        }
        for e in &restarts {
            assert_slow_by_the_rule(e);
            assert!(e["why"].as_str().is_some_and(|w| !w.contains(" 0 segments retransmitted")), "{e}");
            // the old connection says why it ended; the new one took its place
            let (old, new) = (e["stream"].as_u64().expect("old"), e["new_stream"].as_u64().expect("new"));
            let streams = v["per_stream"].as_array().expect("streams");
            let find = |k: u64| streams.iter().find(|s| s["index"].as_u64() == Some(k)).cloned();
            let old_s = find(old).expect("the restarted stream is reported");
            assert!(old_s["ended"].as_str().is_some_and(|w| w.starts_with("restarted: ")), "{old_s}");
            if let Some(new_s) = find(new) {
                assert_eq!(new_s["slot"], old_s["slot"], "{new_s}");
            }
        }
        let first = restarts[0]["why"].as_str().unwrap_or_default();
        assert!(first.contains("caches the slow connection's ssthresh"), "{first}");
        restarted = Some(restarts.len());
        break;
    }
    assert!(restarted.is_some(), "no stream was restarted in six copies across a lossy path");
}

#[test]
fn on_a_path_lossy_for_every_stream_restarts_stay_rare() {
    if !privileged("on_a_path_lossy_for_every_stream_restarts_stay_rare") {
        return;
    }
    let _serial = serial();
    // 2% loss for all: every stream is slow alike, a restart would find the same path
    let settings =
        ["--lab-set", "rate=200M", "--lab-set", "rtt=20ms", "--lab-set", "loss=2%", "-P", "8", "-C", "cubic"];
    let (o, d) = lab_copy("storm", 32, 10, &settings);
    let _ = std::fs::remove_dir_all(&d);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let events = v["events"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let restarts = kinds.iter().filter(|k| **k == "restart").count();
    assert!(restarts <= 2, "{restarts} restarts on a path as bad for every stream: {events:?}");
    // after a stop, none
    if let Some(stop) = kinds.iter().position(|k| *k == "stop-restarts") {
        assert!(!kinds[stop..].contains(&"restart"), "{kinds:?}");
    }
}

#[test]
fn auto_streams_grow_while_each_stream_is_window_bound() {
    if !privileged("auto_streams_grow_while_each_stream_is_window_bound") {
        return;
    }
    let _serial = serial();
    // 100 ms and a 64 KB buffer: one stream moves about 7 Mbit/s of the
    // 100, the first 2 about 14: more streams pay, and -P auto must find
    // that out (each doubling pays, and TCP_INFO says each stream is at
    // the receiver's window), within 1..8
    let settings = ["--lab-set", "loss=0", "--lab-set", "rtt=100ms", "-P", "1..8", "-w", "64K", "--block", "256K"];
    let (o, d) = lab_copy("auto", 64, 9, &settings);
    let _ = std::fs::remove_dir_all(&d);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let events = v["events"].as_array().cloned().unwrap_or_default();
    let adds: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "add").collect();
    assert!(!adds.is_empty(), "{events:?}");
    // first a doubling (it pays twice over), then more while each is bound by its window
    let said = |w: &str| w.contains("doubling") || w.contains("limited by its window");
    assert!(adds.iter().all(|a| a["why"].as_str().is_some_and(said)), "{events:?}");
    let streams = v["per_stream"].as_array().expect("streams").len();
    assert!((4..=8 + 4).contains(&streams), "{streams} connections: {events:?}");
    assert_eq!(v["streams_auto"], serde_json::json!([1, 8]));
    assert_eq!(v["streams"], 2, "it starts with 2");
    // faster than the first two window-bound streams could be (about 14 Mbit/s)
    let rate = v["throughput_bps"].as_f64().expect("rate");
    assert!(rate > 18e6, "{rate} bit/s: {events:?}");
}

#[test]
fn a_pull_restarts_a_slow_stream_too_the_agent_asking_for_the_connection() {
    if !privileged("a_pull_restarts_a_slow_stream_too_the_agent_asking_for_the_connection") {
        return;
    }
    let d = std::env::temp_dir().join(format!("gridperf-lab-pull-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root")).expect("root");
    let data: Vec<u8> = (0..96u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(d.join("root/f.dat"), &data).expect("write");
    let mut lab = Lab::up("pull", &["--rate", "200M", "--rtt", "20ms", "--paths", "2", "--path", "2:loss=2%"]);
    let root = d.join("root").display().to_string();
    lab.agent = Some(
        crate::bin()
            .args([
                "lab",
                "exec",
                "--name",
                &lab.name,
                "b",
                "--",
                BIN,
                "serve",
                "--root",
                &root,
                "--allow",
                "10.77.0.0/16",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut restarted = false;
    for attempt in 0..6 {
        let out = d.join(format!("out{attempt}/"));
        let o = unless_invalid(|| {
            let _ = std::fs::remove_dir_all(&out);
            let to = out.display().to_string();
            lab.exec_a(&[
                "copy",
                "10.77.2.1:f.dat",
                &to,
                "-P",
                "6",
                "-C",
                "cubic",
                "--block",
                "1M",
                "--no-store",
                "--json",
            ])
        });
        // what this test is about (a restart asked of the agent) does not
        // hang on the lab's timing: INVALID after every try for a cause
        // outside gridperf (the rootless CI: the hypervisor took 370 ms of
        // every CPU in an 8.6 s pull) is taken with its verdict said
        let v = valid_or_invalid_from_outside(&o);
        assert!(std::fs::read(out.join("f.dat")).expect("pulled") == data, "the pull differs");
        // run from one of the lab's hosts: judged by its emulator, as any run across a lab
        assert_eq!(v["env"]["lab"]["name"], lab.name.as_str(), "{}", v["env"]);
        assert_eq!(v["direction"], "pull");
        let events = v["events"].as_array().cloned().unwrap_or_default();
        let restarts: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "restart").collect();
        assert!(restarts.len() <= 6, "{events:?}");
        for e in &restarts {
            assert_slow_by_the_rule(e);
        }
        if !restarts.is_empty() {
            // the new connection was asked of this end and carried blocks: the agent's side lists it
            let new = restarts[0]["new_stream"].as_u64().expect("new");
            let streams = v["agent_streams"].as_array().expect("agent streams");
            assert!(streams.iter().any(|s| s["index"].as_u64() == Some(new)), "{streams:?}");
            restarted = true;
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&d);
    assert!(restarted, "no stream of a pull was restarted in six copies across a lossy path");
}

#[test]
fn host_pairs_cross_a_dumbbell_agent_to_agent_and_assemble_one_file() {
    if !privileged("host_pairs_cross_a_dumbbell_agent_to_agent_and_assemble_one_file") {
        return;
    }
    let d = std::env::temp_dir().join(format!("gridperf-lab-pairs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for p in ["src", "dst"] {
        std::fs::create_dir_all(d.join(p)).expect("dir");
    }
    // what this test is about (the pairs, the one file) does not hang on
    // the lab's timing: a copy whose lab went INVALID (exit 4: the rootless
    // CI's, five tries in a row, held up 2-5% of each run, most of it by
    // the hypervisor taking the CPUs four agents kept busy) still moved and
    // verified every byte, printed its result and says why it is INVALID
    let data: Vec<u8> = (0..64u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(d.join("src/f.dat"), &data).expect("write");
    // each host's access link (100 Mbit/s) is narrower than the shared 1 Gbit/s bottleneck
    let lab = Lab::up("pairs", &["--hosts", "2x2", "--rate", "1G", "--rtt", "10ms", "--access", "rate=100M"]);
    // a1, a2 see the sources, b1, b2 the destination: one storage each side (this machine's)
    let _agents: Vec<crate::Served> = [("a1", "src"), ("a2", "src"), ("b1", "dst"), ("b2", "dst")]
        .iter()
        .map(|(host, root)| {
            let root = d.join(root).display().to_string();
            crate::Served(
                crate::bin()
                    .args(["lab", "exec", "--name", &lab.name, host, "--", BIN, "serve"])
                    .args(["--root", &root, "--allow", "10.77.0.0/16"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("serve"),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for (k, extra) in [(0, None), (1, Some("--same-destination"))] {
        let name = format!("f{k}.dat");
        let to = format!("10.77.2.1:{name},10.77.2.2:{name}");
        let mut a = vec!["copy", "10.77.1.1:f.dat,10.77.1.2:f.dat", &to, "-P", "2", "--force", "--no-store"];
        a.extend(extra);
        a.push("--json");
        let o = lab.exec_on("a1", &a);
        assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let invalid = &v["env"]["lab"]["invalid"];
        assert_eq!(o.status.code() == Some(4), !invalid.is_null(), "exit 4 is the lab's verdict: {invalid}");
        assert_eq!(v["direction"], "third-party");
        assert_eq!(v["env"]["lab"]["name"], lab.name.as_str(), "the lab watched: {}", v["env"]);
        assert!(std::fs::read(d.join("dst").join(&name)).expect("copied") == data, "{name} differs");
        let pairs = v["pairs"].as_array().expect("pairs");
        let bytes: Vec<u64> = pairs.iter().map(|p| p["bytes"].as_u64().unwrap_or(0)).collect();
        assert_eq!(bytes.iter().sum::<u64>(), data.len() as u64, "{v}");
        // one queue across two equal pairs: each carried a fair part
        assert!(bytes.iter().all(|&b| b > data.len() as u64 / 5), "{bytes:?}");
        let dests: Vec<&str> = pairs.iter().filter_map(|p| p["destination"].as_str()).collect();
        let (b1, b2) = (format!("10.77.2.1:{name}"), format!("10.77.2.2:{name}"));
        let want = if extra.is_some() { [&b1, &b1] } else { [&b1, &b2] };
        assert_eq!(dests, want, "{v}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_streams_own_capture_tells_what_tcp_info_tells() {
    if !privileged("a_streams_own_capture_tells_what_tcp_info_tells") {
        return;
    }
    let _serial = serial();
    let cap = std::env::temp_dir().join(format!("gridperf-lab-capture-{}.pcap", std::process::id()));
    let c = cap.display().to_string();
    // 1% loss at 20 ms: retransmissions to count; the capture on host a, the sender's side
    let o = unless_invalid(|| {
        run(&[
            "stream",
            "--lab",
            "man",
            "--lab-set",
            "rtt=20ms",
            "--lab-set",
            "loss=1%",
            "-t",
            "4",
            "-C",
            "cubic",
            "--capture",
            &c,
            "--no-store",
            "--json",
        ])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let k = &v["capture"];
    assert_eq!(k["dropped"], 0, "{k}");
    let s = &k["streams"][0];
    let (cap_rx, tcp_rx) = (s["retransmits"].as_u64().unwrap_or(0), s["tcp_info_retransmits"].as_u64().unwrap_or(0));
    assert!(tcp_rx >= 5, "1% loss retransmits: {s}");
    // every retransmission the sender counted passed the capture point, as one segment or more
    assert!(cap_rx.abs_diff(tcp_rx) <= 1 + tcp_rx / 20, "capture {cap_rx} against TCP_INFO {tcp_rx}: {s}");
    let (rtt, srtt) =
        (s["rtt_median_ms"].as_f64().unwrap_or(0.0), s["tcp_info_srtt_median_ms"].as_f64().unwrap_or(0.0));
    assert!((rtt - srtt).abs() <= 0.15 * srtt, "RTT: capture {rtt} ms, TCP_INFO {srtt} ms");
    // the most in flight: TCP_INFO's counts the host's own queue, which the
    // capture point does not see, but is sampled every 100 ms and misses
    // peaks the capture sees (CI: 356 208 against 327 248): within 0.4-1.5x
    let (fl, tfl) = (s["max_in_flight"].as_u64().unwrap_or(0), s["tcp_info_max_in_flight"].as_u64().unwrap_or(0));
    assert!(fl > 0 && fl as f64 <= 1.5 * tfl as f64 && fl as f64 >= 0.4 * tfl as f64, "in flight {fl} against {tfl}");
    // the file reads as any capture does
    let o = run(&["trace", &c, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(t["connections"].as_array().is_some_and(|c| c.len() >= 2), "control and data: {t}");
    // and a clone fits the path from it: half the 20 ms RTT each way, the
    // MTU; what a capture cannot show is left empty, with why
    let o = run(&["lab", "clone", "--from-capture", &c, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clone json");
    let ab = &f["profile"]["ab"];
    let d = ab["delay_s"]["value"].as_f64().unwrap_or(0.0);
    assert!((0.0095..0.0115).contains(&d), "one-way delay {d}: {f}");
    assert_eq!(ab["mtu"]["value"], 1500.0, "{f}");
    assert!(ab["rate_bps"]["value"].as_f64().is_some_and(|r| r > 1e6), "{f}");
    assert!(ab["loss"]["value"].is_null() && ab["loss"]["note"].as_str().is_some_and(|n| n.contains("its own")), "{f}");
    assert!(f["profile"]["ba"]["rate_bps"]["value"].is_null(), "{f}");
    let _ = std::fs::remove_file(&cap);
    // and the chart stream --capture draws beside it
    let _ = std::fs::remove_file(format!("{c}.svg"));
}

/// Stops the lab's emulator (SIGSTOP) `times` times for `each`, one stop
/// every `every`, starting after `after`: hold-ups whose cause is known.
fn hold_up(
    pid: u32,
    after: Duration,
    times: u32,
    each: Duration,
    every: Duration,
) -> std::thread::JoinHandle<Vec<[u64; 2]>> {
    let unix_ns = || SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let mut held = Vec::new();
        for _ in 0..times {
            let from = unix_ns();
            let _ = gridperf_sys::signal(pid, libc::SIGSTOP);
            std::thread::sleep(each);
            let _ = gridperf_sys::signal(pid, libc::SIGCONT);
            held.push([from, unix_ns()]);
            std::thread::sleep(every.saturating_sub(each));
        }
        held
    })
}

/// Issue 33, the pause rule for round trips: a round trip that crossed the
/// lab's emulator while it was late (held up, or a packet over 1 ms behind
/// schedule) is not the path's and is left out; the others crossed the
/// path as configured. Eight hold-ups of 40 ms (SIGSTOP of the emulator,
/// 320 ms: a whole run's verdict would be INVALID) in a 5 s rtt run across
/// a 10 ms path: valid, round trips left out for at least half of them,
/// none kept that waited through one (p99 under 30 ms), and the note says
/// so. (Not one for each: a hold-up that fell between two steps of the
/// run, while the client and the agent talked over the control connection,
/// met no timed round trip: CI's root run left 7 out for 8.)
/// Hold-ups every 60 ms for the whole run touch more than a quarter of its
/// round trips: INVALID, and the reason says so.
#[test]
fn round_trips_that_crossed_a_held_up_emulator_are_left_out() {
    if !privileged("round_trips_that_crossed_a_held_up_emulator_are_left_out") {
        return;
    }
    let mut lab = Lab::up("rtl", &["--rtt", "10ms"]);
    let pid = lab.status()["lab"]["pid"].as_u64().expect("the emulator's pid") as u32;
    let json = |o: &Output| -> serde_json::Value { serde_json::from_slice(&o.stdout).expect("rtt json") };
    lab.serve_on_b();
    let stop = hold_up(pid, Duration::from_millis(1500), 8, Duration::from_millis(40), Duration::from_millis(300));
    let o = lab.exec_a(&["rtt", "10.77.2.1", "--proto", "udp", "--sizes", "64", "-t", "5s", "--json", "--no-store"]);
    stop.join().expect("the stopper");
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let p = &v["points"][0];
    let (left_out, count) = (p["left_out"].as_u64().unwrap_or(0), p["summary"]["count"].as_u64().expect("count"));
    assert!(left_out >= 4 && left_out * 4 <= left_out + count, "{left_out} left out, {count} kept");
    let p99 = p["summary"]["p99_ns"].as_f64().expect("p99");
    assert!(p99 < 30e6, "a round trip that waited through a 40 ms hold-up was kept: p99 {p99} ns");
    let note = v["env"]["lab"]["note"].as_str().unwrap_or_default();
    assert!(note.contains(&format!("{left_out} of {} round trips crossed", left_out + count)), "{note}");
    assert!(note.contains("stopped by a signal"), "what held the emulator up: {note}");
    if let Some(mut a) = lab.agent.take() {
        let _ = a.wait();
    }
    // hold-ups for all of a run of 150 round trips: more than a quarter touched
    lab.serve_on_b();
    let stop = hold_up(pid, Duration::ZERO, 120, Duration::from_millis(40), Duration::from_millis(60));
    let o = lab.exec_a(&["rtt", "10.77.2.1", "--proto", "udp", "--sizes", "64", "-n", "150", "--json", "--no-store"]);
    stop.join().expect("the stopper");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("crossed the lab's emulator while it was late (more than 1 in 4)"), "{}", stderr(&o));
    let p = &json(&o)["points"][0];
    let (left_out, count) = (p["left_out"].as_u64().unwrap_or(0), p["summary"]["count"].as_u64().unwrap_or(0));
    assert!(left_out * 4 > left_out + count, "{left_out} left out, {count} kept");
}

/// Issue 33, the pause rule for transfers: each timed run of a transfer is
/// a loop of round trips, and one that crossed the lab's emulator while it
/// was late for over 1 in 100 of its time (as a whole run is judged) is
/// left out and measured again. Three hold-ups of 40 ms in 16 runs of 20
/// round trips across a 10 ms path: valid, 16 runs kept, at least one left
/// out, none kept that waited through a hold-up (each adds 40 ms to its
/// run), and the note says so. Hold-ups every 100 ms for 10 s touch
/// nearly every run, the extra ones too: INVALID, and the reason says so.
#[test]
fn transfer_runs_that_crossed_a_held_up_emulator_are_left_out_and_measured_again() {
    if !privileged("transfer_runs_that_crossed_a_held_up_emulator_are_left_out_and_measured_again") {
        return;
    }
    let mut lab = Lab::up("trl", &["--rtt", "10ms"]);
    let pid = lab.status()["lab"]["pid"].as_u64().expect("the emulator's pid") as u32;
    let json = |o: &Output| -> serde_json::Value { serde_json::from_slice(&o.stdout).expect("transfer json") };
    let args: Vec<&str> = "transfer 10.77.2.1 --proto udp --sizes 1000 --total 20000 -r 16 --warmup-runs 0 \
                           --warmup-time 0s --json --no-store"
        .split_whitespace()
        .collect();
    // the machine's own hold-ups leave runs out too (the rootless CI once
    // left out 7 of 23, more than a quarter, beside the three injected):
    // tried again while INVALID, each try once the machine is quiet
    lab.serve_on_b();
    let held = std::sync::Mutex::new(Vec::new());
    let o = lab.unless_invalid_serving(|lab| {
        let stop = hold_up(pid, Duration::from_millis(600), 3, Duration::from_millis(40), Duration::from_millis(700));
        let o = lab.exec_a(&args);
        *held.lock().expect("the hold-ups") = stop.join().expect("the stopper");
        o
    });
    if let Some(mut a) = lab.agent.take() {
        let _ = a.wait();
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let p = &v["points"][0];
    let left_out = p["left_out"].as_u64().unwrap_or(0);
    let times: Vec<f64> = p["run_times_ns"].as_array().expect("run times").iter().filter_map(|t| t.as_f64()).collect();
    assert_eq!(times.len(), 16, "the runs left out were measured again: {p}");
    assert!(left_out >= 1, "no run left out: {p}");
    // a run kept that crossed a hold-up injected and took 40 ms longer
    // (a run slow for the machine's own reasons, a host's process waiting
    // for a CPU beside another test's lab, is the path's and stays: CI's
    // rootless run once kept one of 242 ms against a median of 201)
    let median = p["time"]["median_ns"].as_f64().expect("median");
    let started: Vec<f64> =
        p["run_started_unix_ns"].as_array().expect("run starts").iter().filter_map(|t| t.as_f64()).collect();
    assert_eq!(started.len(), times.len(), "{p}");
    let held = held.into_inner().expect("the hold-ups");
    assert_eq!(held.len(), 3);
    for (&s, &t) in started.iter().zip(&times) {
        let crossed = held.iter().any(|&[a, b]| s < b as f64 && (a as f64) < s + t);
        assert!(
            !crossed || t - median < 30e6,
            "a run that waited through a 40 ms hold-up was kept: {t} ns against a median of {median}, hold-ups {held:?}, run starts {started:?}, times {times:?}"
        );
    }
    let note = v["env"]["lab"]["note"].as_str().unwrap_or_default();
    assert!(note.contains(&format!("{left_out} of {} transfer runs crossed", left_out + 16)), "{note}");
    // hold-ups all through: every run touched, the extra ones too
    lab.serve_on_b();
    let stop = hold_up(pid, Duration::ZERO, 100, Duration::from_millis(40), Duration::from_millis(100));
    let o = lab.exec_a(&args);
    stop.join().expect("the stopper");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("crossed the lab's emulator while it was late for over 1 in 100 of their time"),
        "{}",
        stderr(&o)
    );
}

/// Issue 33: a run is judged by how much of its time the emulator was
/// held up (time the emulated link carried nothing), not voided by any one
/// hold-up of 10 ms. Hold-ups injected with SIGSTOP: one of 30 ms in a 10 s
/// stream leaves it valid, its notes saying how long and why; eight of
/// 40 ms (320 ms, 3%) make it INVALID, and the reason says what held the
/// emulator up.
#[test]
fn a_run_is_judged_by_the_share_of_its_time_the_emulator_was_held_up() {
    if !privileged("a_run_is_judged_by_the_share_of_its_time_the_emulator_was_held_up") {
        return;
    }
    let mut lab = Lab::up("held", &["--profile", "man", "--set", "loss=0"]);
    let pid = lab.status()["lab"]["pid"].as_u64().expect("the emulator's pid") as u32;
    // 10 s: room for the machine's own hold-ups (CI: steal of 11-14 ms at
    // once) beside the 30 ms injected, within the 1% a valid run may have
    let stream = |lab: &Lab| lab.exec_a(&["stream", "10.77.2.1", "-t", "10", "-C", "cubic", "--json", "--no-store"]);
    // one hold-up of 30 ms: valid (natural hold-ups of a busy machine may
    // add to it: the run is tried again while it is INVALID, and while the
    // hold-up missed it: on a busy machine the stream may begin after the
    // stopper's 2 s; CI once had a valid run with nothing held in it)
    let held_in = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["runs"][0]["env"]["lab"]["emulator"]["held_by"]["not_running"]["count"].as_u64().unwrap_or(0) > 0
    };
    // An INVALID run with the hold-up in it must have been voided by the
    // rule with the machine's own hold-ups in it: over 1% of the run held
    // up in all, or over 1% of its packets late (30 ms alone is 0.3% of
    // each). The rootless CI, whose hypervisor takes 4-10% of the CPUs
    // whenever both are busy, gave six such runs in a row (one: 77 ms of
    // its own beside the 30): the rule is checked on each, and the note on
    // the first valid one.
    let voided_beside = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let e = &v["runs"][0]["env"]["lab"]["emulator"];
        let n = |f: &serde_json::Value| f.as_f64().unwrap_or(0.0);
        let natural = n(&e["held_up_ns"]) - n(&e["held_by"]["not_running"]["ns"]);
        let delivered = n(&e["links"][0]["delivered"]) + n(&e["links"][1]["delivered"]);
        let late = n(&e["late_packets"]);
        let held = n(&e["held_up_ns"]);
        // the rule broken (over 1% held up, or late), the machine's part in it
        natural > 0.0 && (held * 100.0 > n(&e["uptime_s"]) * 1e9 || (late >= 10.0 && late * 100.0 > delivered))
    };
    let (mut valid, mut seen) = (None, 0);
    for k in 0..6 {
        if k > 0 {
            crate::quiet();
        }
        lab.serve_on_b();
        let stop = hold_up(pid, Duration::from_secs(2), 1, Duration::from_millis(30), Duration::from_millis(30));
        let o = stream(&lab);
        stop.join().expect("the stopper");
        if let Some(mut a) = lab.agent.take() {
            let _ = a.wait();
        }
        if !held_in(&o) {
            continue;
        }
        seen += 1;
        if o.status.code() != Some(4) {
            valid = Some(o);
            break;
        }
        assert!(voided_beside(&o), "a run voided by one 30 ms hold-up in 10 s: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("with the emulator not running (stopped by a signal"), "its cause said: {err}");
    }
    assert!(seen > 0, "the hold-up fell in none of six runs");
    if let Some(o) = valid {
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
        let notes = v["runs"][0]["env"]["notes"].to_string();
        assert!(notes.contains("the lab's emulator was held up"), "the hold-up is noted: {notes}");
        assert!(notes.contains("with the emulator not running (stopped by a signal"), "and its cause: {notes}");
    } else {
        eprintln!("no valid run with the hold-up in it in six: each was voided by the machine's own hold-ups");
    }
    // eight of 40 ms: 320 ms of 10 s
    lab.serve_on_b();
    let stop = hold_up(pid, Duration::from_secs(1), 8, Duration::from_millis(40), Duration::from_millis(400));
    let o = stream(&lab);
    stop.join().expect("the stopper");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("the emulator was held up for"), "{err}");
    assert!(err.contains("with the emulator not running (stopped by a signal"), "{err}");
}

/// Issue 33: a hold-up takes from a rate only the time the link sat idle
/// through it. Through one, the link goes on sending what its queue holds
/// (in model time; its packets come out late). CUBIC across baltic with a
/// 2-BDP queue keeps over a BDP (20 ms) queued after every loss, so 80
/// hold-ups of 2 ms (SIGSTOP of the emulator alone, 160 ms of 10 s: over
/// the 1 in 100 the old rule judged by) leave the link busy: valid, the
/// rate a full link's, the note saying how little of the time the link sat
/// idle. (A 2 ms hold-up makes only the packets due in its last 1 ms
/// late, so the late-packet rule is not what is tested.)
#[test]
fn a_hold_up_the_links_queue_covered_takes_nothing_from_the_rate() {
    if !privileged("a_hold_up_the_links_queue_covered_takes_nothing_from_the_rate") {
        return;
    }
    // autotuned within buffers of 32 MiB, set in the lab's namespaces: -w
    // is capped by net.core.rmem_max / wmem_max, global and 212992 on a
    // fresh machine (a window of 426 kB, 170 Mbit/s at 20 ms: the link idle)
    let mut lab = Lab::up(
        "covered",
        &[
            "--profile",
            "baltic",
            "--set",
            "queue=2bdp",
            "--sysctl",
            "net.ipv4.tcp_rmem=4096 131072 33554432",
            "--sysctl",
            "net.ipv4.tcp_wmem=4096 16384 33554432",
        ],
    );
    let pid = lab.status()["lab"]["pid"].as_u64().expect("the emulator's pid") as u32;
    let mut last = None;
    // the machine's own hold-ups may void a try (its queue drained by
    // one longer than 20 ms, or late packets over 1%): four tries, and
    // more while STEAL_BUDGET lasts, each once the hypervisor leaves the
    // machine alone
    crate::quiet();
    let mut tries = Tries::new(4, STEAL_BUDGET);
    while tries.next() {
        lab.serve_on_b();
        let stop = hold_up(pid, Duration::from_secs(2), 80, Duration::from_millis(2), Duration::from_millis(90));
        let o = lab.exec_a(&["stream", "10.77.2.1", "-t", "10", "-C", "cubic", "--json", "--no-store"]);
        stop.join().expect("the stopper");
        if let Some(mut a) = lab.agent.take() {
            let _ = a.wait();
        }
        let valid = o.status.success();
        last = Some(o);
        if valid {
            break;
        }
    }
    let o = last.expect("a run");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    let run = &v["runs"][0];
    let e = &run["env"]["lab"]["emulator"];
    let n = |f: &serde_json::Value| f.as_f64().unwrap_or(0.0);
    let span_ns = n(&e["uptime_s"]) * 1e9;
    // held up over 1 in 100 of the run (the injected 160 ms, and the machine's)
    assert!(n(&e["held_up_ns"]) * 100.0 > span_ns, "the hold-ups fell within the run: {e}");
    // the loaded direction idle for under 1 in 100 of it, and the rate a full link's
    assert!(n(&e["links"][0]["idle_held_ns"]) * 100.0 <= span_ns, "{e}");
    assert!(n(&run["up_bps"]) > 0.9e9, "{}", run["up_bps"]);
    let notes = run["env"]["notes"].to_string();
    assert!(notes.contains("the emulated link idle for"), "{notes}");
}

/// Issue 33, the pause rule: `gridperf lab pause` stops the whole lab (the
/// emulator and every process of its hosts), as a hypervisor pausing the
/// machine does. Across baltic (1 Gbit/s x 20 ms): what fell due in a 30 ms
/// pause is the pause's, not the emulator's lag, and a paced BBR stream
/// loses only the pause's time: valid, the pause noted. A CUBIC stream's
/// answer to the burst that follows overruns the queue (5-7% of the run
/// lost, measured): INVALID, and the reason says so. One pause of 250 ms
/// outlasts TCP's minimum retransmission timeout: INVALID.
#[test]
fn a_whole_lab_pause_is_judged_by_what_it_did_to_the_run() {
    if !privileged("a_whole_lab_pause_is_judged_by_what_it_did_to_the_run") {
        return;
    }
    let mut lab = Lab::up("pause", &["--profile", "baltic"]);
    let paused_stream = |lab: &mut Lab, cc: &str, length: &'static str, times: &'static str| {
        // each try once the hypervisor leaves the machine alone: its own
        // hold-ups are not the pause under test
        crate::quiet();
        lab.serve_on_b();
        let name = lab.name.clone();
        let p = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            run(&["lab", "pause", "--name", &name, "--for", length, "--times", times, "--every", "1s"])
        });
        // 10 s: room for the machine's own hold-ups (steal) within the 1% a valid run may have
        let o = lab.exec_a(&["stream", "10.77.2.1", "-t", "10", "-C", cc, "--json", "--no-store"]);
        let paused = p.join().expect("the pauser");
        assert!(paused.status.success(), "lab pause: {}", stderr(&paused));
        if let Some(mut a) = lab.agent.take() {
            let _ = a.wait();
        }
        o
    };
    // whether the pause fell within the run the stream measured (the pauser
    // starts 2 s after the stream's process; on a busy machine the run may
    // begin later, or the pause find the run over): its record says so
    let pause_in = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let env = &v["runs"][0]["env"];
        env["lab"]["emulator"]["paused_late_packets"].as_u64().unwrap_or(0) > 0
            || env["notes"].to_string().contains("gridperf lab pause")
    };
    // natural hold-ups of a busy machine may add to it: tried again while
    // INVALID, or while the pause missed the run, six times in all (the
    // rootless CI once had none of three valid with the pause in it)
    let valid =
        (0..6).map(|_| paused_stream(&mut lab, "bbr", "30ms", "1")).find(|o| o.status.code() != Some(4) && pause_in(o));
    let o = valid.expect("a valid run with the pause in it, in six");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    let env = &v["runs"][0]["env"];
    let notes = env["notes"].to_string();
    assert!(notes.contains("by `gridperf lab pause` stopping the whole lab (injected)"), "{notes}");
    let emu = &env["lab"]["emulator"];
    let paused_late = emu["paused_late_packets"].as_u64().expect("paused late packets");
    assert!(paused_late > 0, "packets fell due in the pause and are counted as its: {emu}");
    // CUBIC's burst after three pauses: a pause may find its window small
    // and pass without a drop (measured: -0.3%), so up to three runs
    let burst = (0..3)
        .map(|_| paused_stream(&mut lab, "cubic", "20ms", "3"))
        .find(|o| stderr(o).contains("in the round trip after a pause of the whole lab"));
    let o = burst.expect("a burst that overran the queue, in three runs");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    // one pause of 250 ms: TCP's timers ran out. A valid run whose record
    // shows no pause is one the pause missed: measured again (CI once saw
    // one exit 0 with nothing on stderr)
    // `lab status --since` judges the same span by the same rule, for a
    // run of any tool across the lab (the copy bench's peers)
    let before = std::env::temp_dir().join(format!("gridperf-lab-since-{}.json", std::process::id()));
    let since = before.display().to_string();
    let long = (0..3)
        .map(|_| {
            let st = run(&["lab", "status", "--name", &lab.name, "--json"]);
            std::fs::write(&before, &st.stdout).expect("the earlier status");
            (
                paused_stream(&mut lab, "bbr", "250ms", "1"),
                run(&["lab", "status", "--name", &lab.name, "--since", &since]),
            )
        })
        .find(|(o, _)| o.status.code() != Some(0) || pause_in(o));
    let (o, judged) = long.expect("a run with the 250 ms pause in it, in three");
    assert_eq!(o.status.code(), Some(4), "{}\n{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
    let err = stderr(&o);
    assert!(err.contains("paused 1 time(s) for 200 ms or more at once"), "{err}");
    assert!(err.contains("The cause lay outside gridperf: run it again"), "{err}");
    let said = String::from_utf8_lossy(&judged.stdout).to_string();
    assert_eq!(judged.status.code(), Some(4), "{said}{}", stderr(&judged));
    assert!(said.contains("INVALID since the earlier status") && said.contains("200 ms or more at once"), "{said}");
    assert!(said.contains("The cause lay outside gridperf"), "{said}");
    // an idle span is valid; a file that is not a status is refused with what to save there
    let st = run(&["lab", "status", "--name", &lab.name, "--json"]);
    std::fs::write(&before, &st.stdout).expect("the earlier status");
    let idle = run(&["lab", "status", "--name", &lab.name, "--since", &since]);
    assert!(idle.status.success(), "{}{}", String::from_utf8_lossy(&idle.stdout), stderr(&idle));
    assert!(String::from_utf8_lossy(&idle.stdout).contains("valid since the earlier status"));
    std::fs::write(&before, "{}").expect("not a status");
    let bad = run(&["lab", "status", "--name", &lab.name, "--since", &since]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("no \"health\" in it: save `gridperf lab status --name NAME --json` there"),
        "{}",
        stderr(&bad)
    );
    let _ = std::fs::remove_file(&before);
    // nothing is left stopped: the lab carries a run again
    lab.serve_on_b();
    let o = lab.unless_invalid_serving(|l| l.rtt_a_to_b("udp", "50", &[]));
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Issue 32: the survey exited 0 with 4 of its 5 networks INVALID. A
/// network whose runs stay INVALID (its emulator held up 60 ms of every
/// 150, again and again) makes the survey exit 4, after everything is
/// stored and reported. Its transfer runs, judged as a whole, are INVALID
/// and marked so; its rtt runs are judged round trip by round trip, and
/// stand on the round trips that crossed no hold-up (with time-budgeted
/// points, a hold-up holds one round trip: here 6 of 35 were left out).
#[test]
fn a_survey_with_an_invalid_network_exits_4_after_storing_and_reporting_it() {
    if !privileged("a_survey_with_an_invalid_network_exits_4_after_storing_and_reporting_it") {
        return;
    }
    let _serial = serial();
    let d = std::env::temp_dir().join(format!("gridperf-survey-invalid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    let (db, report) = (d.join("s.db"), d.join("report.html"));
    let child = crate::bin()
        .args(["survey", "--profiles", "man", "--proto", "udp", "--sizes", "1,64", "--quick", "--db"])
        .arg(&db)
        .arg("-o")
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("survey");
    // the survey's labs are named for its pid
    let tag = (child.id() % 100_000).to_string();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 40% of the time held: every transfer run, however short, crosses a
    // hold-up more often than the 1 in 4 that voids a run (at 40 ms of
    // every 200 the share was 20% plus a run's length, and CI's quick runs
    // came in under the quarter: the survey exited 0)
    let stopper = {
        let done = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(180);
            let mut stops = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                let pids: Vec<u32> = emulators_named("")
                    .iter()
                    .filter_map(|e| {
                        let f: Vec<&str> = e.split_whitespace().collect();
                        (f.len() == 3 && f[1].ends_with(&tag)).then(|| f[2].parse().ok()).flatten()
                    })
                    .collect();
                for &p in &pids {
                    let _ = gridperf_sys::signal(p, libc::SIGSTOP);
                }
                stops += u32::from(!pids.is_empty());
                std::thread::sleep(Duration::from_millis(60));
                for &p in &pids {
                    let _ = gridperf_sys::signal(p, libc::SIGCONT);
                }
                std::thread::sleep(Duration::from_millis(90));
            }
            stops
        })
    };
    let o = child.wait_with_output().expect("survey");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let stops = stopper.join().expect("stopper");
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(stops >= 10, "the survey's emulator was stopped only {stops} times: {out}{err}");
    assert_eq!(o.status.code(), Some(4), "stopped {stops} times: {out}{err}");
    assert!(err.contains("1 of 1 networks are INVALID (man): its transfer runs are INVALID"), "{err}");
    // the report written, the runs stored, the transfer's marked
    assert!(std::fs::read_to_string(&report).is_ok_and(|h| h.contains("class=\"invalid\"")), "the report");
    let o = run(&["runs", "list", "--db", db.to_str().expect("utf-8"), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("runs json");
    let runs = v["runs"].as_array().expect("runs");
    let kind = |k: &str| runs.iter().filter(|r| r["kind"] == k).collect::<Vec<_>>();
    assert!(!kind("rtt").is_empty() && !kind("transfer").is_empty(), "rtt and transfer stored: {v}");
    assert!(kind("transfer").iter().all(|r| r["invalid"].is_string()), "{v}");
    // what the table shows rests on the rtt runs: marked INVALID where they are
    for r in kind("rtt") {
        let marked = out.lines().any(|l| l.starts_with("man (INVALID)"));
        assert_eq!(marked, r["invalid"].is_string(), "{out}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A quick survey measures a long path (wan, 180 ms) beside the others, its
/// sizes alternating between two labs of its profile and its transfer in a
/// third; the run says so, its sizes stop by the rule, and every lab goes.
#[test]
fn a_quick_survey_measures_a_long_path_beside_the_others_in_labs_of_its_own() {
    if !privileged("a_quick_survey_measures_a_long_path_beside_the_others_in_labs_of_its_own") {
        return;
    }
    let _serial = serial();
    let d = std::env::temp_dir().join(format!("gridperf-survey-beside-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    let mut tags = Vec::new();
    let o = unless_invalid(|| {
        let db = d.join(format!("s{}.db", tags.len()));
        let child = crate::bin()
            .args(["survey", "--quick", "--profiles", "loopback,wan", "--proto", "tcp,udp", "--sizes", "1,1k,16k"])
            .args(["--json", "--db"])
            .arg(&db)
            .arg("-o")
            .arg(d.join("r.html"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("survey");
        tags.push((child.id() % 100_000).to_string());
        let o = child.wait_with_output().expect("survey");
        if o.status.success() {
            // the tables in the order asked for, though wan began first
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("survey json");
            let names: Vec<&str> =
                v["networks"].as_array().expect("networks").iter().filter_map(|n| n["network"].as_str()).collect();
            assert_eq!(names, ["loopback", "wan"], "{v}");
            let store = gridperf::store::Store::open(&db).expect("store");
            let runs = store.runs(&Default::default()).expect("runs");
            let wan: Vec<_> = runs.iter().filter(|r| r.network == "wan").collect();
            assert_eq!(wan.len(), 2, "an rtt and a transfer run of wan: {runs:?}");
            for r in &wan {
                let notes = r.env.as_ref().map(|e| e.notes.join("; ")).unwrap_or_default();
                assert!(notes.contains("measured beside the survey's other networks"), "{notes}");
                if r.kind == "rtt" {
                    assert!(notes.contains("measured in 2 labs of this profile at once"), "{notes}");
                    assert_eq!(r.settings["stop_early"], true, "{}", r.settings);
                    let pts = store.points(r.id).expect("points");
                    let mut got: Vec<(String, u64)> = pts.iter().map(|p| (p.proto.clone(), p.size)).collect();
                    got.sort();
                    assert_eq!(got.len(), 6, "tcp and udp at 1, 1024 and 16384 B: {got:?}");
                    // a size ends after 3 to 8 rounds, as the rule says; up to 16 when the
                    // survey found the machine busy before the network (and says so)
                    let most = if notes.contains("up to 16 rounds a point") { 16 } else { 8 };
                    for p in &pts {
                        let n = p.figures["rounds_ns"].as_array().map_or(0, Vec::len);
                        assert!(
                            (3..=most).contains(&n),
                            "{} {} B: {n} rounds (at most {most}): {notes}",
                            p.proto,
                            p.size
                        );
                    }
                }
            }
            // and every run carries the machine's load
            assert!(runs.iter().all(|r| r.env.as_ref().is_some_and(|e| e.load.is_some())), "{runs:?}");
        }
        o
    });
    assert!(o.status.success(), "{}", stderr(&o));
    // nothing is left of any of its labs
    for tag in &tags {
        for prefix in ["sv", "sw0", "sw1", "sx"] {
            assert!(labs_named(&format!("{prefix}{tag}")).is_empty(), "{prefix}{tag}: {:?}", labs_named(prefix));
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Hidden path settings for `lab clone`, drawn from a seeded generator
/// (GRIDPERF_CLONE_SEED, or a fixed seed so that CI draws the same path
/// every time): each direction's rate, the RTT, jitter, bursty loss and a
/// queue in BDPs. Returned as `lab up` flags and the values to check.
struct Hidden {
    rate_ab: f64,
    rate_ba: f64,
    rtt_s: f64,
    loss: f64,
    queue_bdp: f64,
    flags: Vec<String>,
}

fn hidden_path(seed: u64) -> Hidden {
    let mut x = seed.max(1);
    let mut unit = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    // log-uniform rates 20M..300M, RTT 10..80 ms
    let rate_ab = (20e6f64.ln() + unit() * (300e6f64 / 20e6).ln()).exp().round();
    let rate_ba = (20e6f64.ln() + unit() * (300e6f64 / 20e6).ln()).exp().round();
    let rtt_s = (10e-3f64.ln() + unit() * 8f64.ln()).exp();
    let jitter_us = (unit() * 300.0).round();
    let loss = if unit() < 0.25 { 0.0 } else { 0.002 + unit() * 0.008 };
    let burst = 1.0 + (unit() * 3.0).round();
    let queue_bdp = 0.5 + unit() * 1.5;
    let mut flags = vec![
        "--rate".to_string(),
        format!("{rate_ab}"),
        "--set-ba".into(),
        format!("rate={rate_ba}"),
        "--rtt".into(),
        format!("{}us", (rtt_s * 1e6).round()),
        "--jitter".into(),
        format!("{jitter_us}us/normal"),
        "--queue".into(),
        format!("{queue_bdp:.2}bdp"),
    ];
    if loss > 0.0 {
        flags.extend(["--loss".into(), format!("{:.4}%", loss * 100.0), "--burst".into(), format!("{burst}")]);
    }
    Hidden { rate_ab, rate_ba, rtt_s: (rtt_s * 1e6).round() / 1e6, loss: (loss * 1e6).round() / 1e6, queue_bdp, flags }
}

#[test]
fn a_clone_of_a_hidden_path_finds_its_rates_delay_loss_and_queue() {
    if !privileged("a_clone_of_a_hidden_path_finds_its_rates_delay_loss_and_queue") {
        return;
    }
    let seed = std::env::var("GRIDPERF_CLONE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20_261_126);
    let h = hidden_path(seed);
    eprintln!("hidden path (seed {seed}): {}", h.flags.join(" "));
    let flags: Vec<&str> = h.flags.iter().map(String::as_str).collect();
    let mut lab = Lab::up("clone", &flags);
    lab.serve_on_b_with(&[]);
    let out_file = crate::Scratch::new("clone-test", ".json");
    let (out, out_s) = (&out_file.0, out_file.s());
    // the clone is never told the settings: only the agent's address
    let o = unless_invalid(|| {
        lab.exec_a(&["lab", "clone", "10.77.2.1", "--time", "20s", "--max-rate", "600M", "--out", &out_s, "--json"])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clone json");
    assert_eq!(v["schema"], "gridperf.clone/1");
    let p = &v["profile"];
    let val = |d: &str, f: &str| p[d][f]["value"].as_f64().unwrap_or_else(|| panic!("{d}.{f}: {}", p[d][f]));
    let within = |what: &str, got: f64, want: f64, tol: f64| {
        assert!(
            (got / want - 1.0).abs() <= tol,
            "{what}: fitted {got}, hidden {want} (more than {tol} off); {}\n{}",
            h.flags.join(" "),
            v
        );
    };
    within("rate a->b", val("ab", "rate_bps"), h.rate_ab, 0.10);
    within("rate b->a", val("ba", "rate_bps"), h.rate_ba, 0.10);
    within("rtt", 2.0 * val("ab", "delay_s"), h.rtt_s, 0.05);
    for d in ["ab", "ba"] {
        let loss = val(d, "loss");
        if h.loss > 0.0 {
            // within the fit's own interval, stretched from 95% to 99.9%
            // (a few tens of losses in 20 s: CI saw a fit at 0.45 of the hidden loss)
            let (lo, hi) = (p[d]["loss"]["low"].as_f64().expect("low"), p[d]["loss"]["high"].as_f64().expect("high"));
            let stretch = 3.29 / 1.96;
            let (lo, hi) = (loss - (loss - lo) * stretch, loss + (hi - loss) * stretch);
            assert!((lo..=hi).contains(&h.loss), "{d} loss: fitted {loss} ({lo}..{hi} at 99.9%), hidden {}", h.loss);
        } else {
            assert!(loss < 1e-4, "{d} loss: fitted {loss} on a path without loss");
        }
        let rate = if d == "ab" { h.rate_ab } else { h.rate_ba };
        let queue = h.queue_bdp * rate * h.rtt_s / 8.0;
        within(&format!("{d} queue"), val(d, "queue_bytes"), queue, 0.35);
        assert_eq!(val(d, "mtu"), 1500.0);
    }
    // the profile file brings the clone up; a field out of range is named and nothing is brought up
    // from stored runs across the same path: a stream's TCP_INFO, an rtt run's round trips
    let db_file = crate::Scratch::new("clone-test", ".db");
    let db_s = db_file.s();
    let o = unless_invalid(|| lab.exec_a(&["stream", "10.77.2.1", "-t", "3", "-C", "cubic", "--db", &db_s]));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = unless_invalid(|| {
        lab.exec_a(&["rtt", "10.77.2.1", "--proto", "udp", "--sizes", "64", "-n", "100", "--db", &db_s])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let runs = run(&["runs", "list", "--db", &db_s, "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("runs json");
    let id_of = |kind: &str| {
        runs["runs"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["kind"] == kind))
            .map(|r| r["id"].to_string())
            .expect(kind)
    };
    let from_run = |id: &str| -> serde_json::Value {
        let o = run(&["lab", "clone", "--from-run", id, "--db", &db_s, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("clone json")
    };
    let f = from_run(&id_of("stream"));
    let ab = &f["profile"]["ab"];
    let d = ab["delay_s"]["value"].as_f64().expect("a stream's delay");
    assert!(
        d >= h.rtt_s / 2.0 * 0.97 && d <= h.rtt_s / 2.0 * 1.15,
        "a stream's min RTT: {d} against {}",
        h.rtt_s / 2.0
    );
    assert_eq!(ab["mtu"]["value"], 1500.0, "{f}");
    let r = ab["rate_bps"]["value"].as_f64().expect("a stream's rate");
    assert!(r > 0.0 && r < 1.1 * h.rate_ab, "a stream's rate {r} against the path's {}", h.rate_ab);
    assert!(f["profile"]["ba"]["rate_bps"]["value"].is_null(), "{f}");
    let f = from_run(&id_of("rtt"));
    within("an rtt run's RTT", 2.0 * f["profile"]["ab"]["delay_s"]["value"].as_f64().expect("delay"), h.rtt_s, 0.05);
    assert!(f["profile"]["ab"]["rate_bps"]["value"].is_null(), "{f}");
    drop(db_file);
    // (this test holds the lab lock: the clone's lab is brought up by hand)
    let dup = format!("{}-dup", lab.name);
    let o = run(&["lab", "up", "--name", &dup, "--profile-file", &out_s, "--json"]);
    let down = run(&["lab", "down", "--name", &dup]);
    assert!(o.status.success() && down.status.success(), "{}{}", stderr(&o), stderr(&down));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).expect("lab up json");
    let ab_rate = st["lab"]["spec"]["ab"]["rate_bps"].as_f64().expect("the clone's rate");
    within("the clone lab's rate a->b", ab_rate, h.rate_ab, 0.10);
    assert!(labs_named(&dup).is_empty());
    let mut bad: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).expect("profile")).expect("json");
    bad["profile"]["ab"]["mtu"]["value"] = serde_json::json!(90000.0);
    std::fs::write(out, bad.to_string()).expect("write");
    let bad_name = format!("{}-bad", lab.name);
    let o = run(&["lab", "up", "--name", &bad_name, "--profile-file", &out_s]);
    if o.status.success() {
        run(&["lab", "down", "--name", &bad_name]);
    }
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("profile.ab.mtu") && stderr(&o).contains("576 to 65535"), "{}", stderr(&o));
    assert!(labs_named(&bad_name).is_empty());
}

/// Issue 36: `lab clone --verify` across a right-skewed path (exponential
/// jitter each way, in order): the clone sees the skew and fits a table,
/// its clone keeps the round trips' median and tail and four streams'
/// throughput, no TCP figure exceeds the path's rate (a probe once counted
/// its omitted seconds: 233 Mbit/s on 200), and the clone is stored as a
/// run that `runs show` tabulates and `report` draws.
#[test]
fn a_verified_clone_of_a_right_skewed_path_keeps_its_tail_and_is_stored_and_drawn() {
    if !privileged("a_verified_clone_of_a_right_skewed_path_keeps_its_tail_and_is_stored_and_drawn") {
        return;
    }
    // a jitter well above the machine's own round-trip noise, which the
    // clone counts twice (docs/clone.md): across 4 ms with 400 us of it, CI
    // measured the clone's p95 10.5% over the real path's (7.20 against
    // 6.51 ms), where 1 ms of jitter each way puts that noise at under 5%
    let mut lab =
        Lab::up("clonev", &["--rate", "200M", "--rtt", "10ms", "--jitter", "1ms/exponential", "--queue", "1bdp"]);
    lab.serve_on_b_with(&[]);
    let db_file = crate::Scratch::new("clonev-test", ".db");
    let db_s = db_file.s();
    let o = unless_invalid(|| {
        lab.exec_a(&[
            "lab",
            "clone",
            "10.77.2.1",
            "--time",
            "20s",
            "--max-rate",
            "600M",
            "--verify",
            "--json",
            "--db",
            &db_s,
        ])
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clone json");
    for d in ["ab", "ba"] {
        assert_eq!(v["profile"][d]["jitter_shape"], "right-skewed", "{}", v["profile"][d]);
        let t: Vec<f64> = v["profile"][d]["jitter_table_s"]
            .as_array()
            .expect("a table")
            .iter()
            .map(|x| x.as_f64().expect("seconds"))
            .collect();
        assert_eq!(t.len(), 101);
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
    }
    let row =
        |what: &str| v["verify"].as_array().and_then(|r| r.iter().find(|r| r["what"] == what)).cloned().expect(what);
    let err = |what: &str| row(what)["error"].as_f64().unwrap_or_else(|| panic!("{what}: {}", row(what)));
    assert!(err("rate a -> b").abs() <= 0.10, "{}", row("rate a -> b"));
    // within 10%: the real lab and the clone each take their own floor,
    // measured as they come up, off their delays; with other tests beside
    // them (CI) the two floors differ, and CI measured the clone's median
    // 6.0% over the real path's (5.12 against 4.83 ms), where a quiet
    // machine gives -0.4% (docs/clone.md)
    assert!(err("RTT p50 (64 B)").abs() <= 0.10, "{}", row("RTT p50 (64 B)"));
    assert!(err("RTT p95 (64 B)").abs() <= 0.10, "{}", row("RTT p95 (64 B)"));
    assert!(err("TCP, 4 CUBIC streams a -> b").abs() <= 0.15, "{}", row("TCP, 4 CUBIC streams a -> b"));
    // each side's streams carry at most its own link's rate: the real
    // path's 200 Mbit/s, and the clone's fitted rate (within the 10% above:
    // CI once fitted a rate a few percent over, and 4 streams carried
    // 205.5 Mbit/s across it)
    let fitted = v["profile"]["ab"]["rate_bps"]["value"].as_f64().expect("the clone's rate a -> b");
    for what in ["TCP, 1 CUBIC stream a -> b", "TCP, 4 CUBIC streams a -> b"] {
        let r = row(what);
        for (side, link) in [("real", 200e6), ("clone", fitted)] {
            let bps = r[side].as_f64().expect("a throughput");
            assert!(bps > 100e6 && bps <= link, "{what} {side}: {bps} bit/s on a {link} bit/s link");
        }
    }
    // stored: one run of kind clone, with both sides' round trips and the comparison
    let o = run(&["runs", "show", "1", "--db", &db_s]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success() && text.contains("run 1 (clone)") && text.contains("measured the same way"), "{text}");
    // and given back whole by --from-run, the table and the comparison with it
    let o = run(&["lab", "clone", "--from-run", "1", "--db", &db_s, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let back: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clone json");
    assert_eq!(back["profile"], v["profile"]);
    assert_eq!(back["verify"], v["verify"]);
    let html_file = crate::Scratch::new("clonev-test", ".html");
    let html = &html_file.0;
    let o = run(&["report", "--db", &db_s, "-o", &html_file.s()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(html).expect("report");
    assert!(page.contains("round trips: the path to 10.77.2.1 and its clone"), "no clone chart");
    assert!(page.contains("real path") && page.contains(">clone<") && page.contains("measured the same way"));
}

/// Issue 33, the pause rule for a rate taken per interval: `lab clone`'s
/// overrun (a UDP stream past the path's rate, whose rate is the mean of
/// its 100 ms report intervals) is judged interval by interval once it is
/// INVALID as a whole. An 80 ms hold-up of the emulator (SIGSTOP) once the
/// a -> b overrun fills the link's queue idles the link for about 2% of
/// the probe's span (setup and linger with it; a 40 ms one was under the
/// 1% in CI, and the run was valid as a whole): a whole run's verdict
/// voids it (CI saw three tries in a row INVALID so, under steal). It takes
/// from the intervals it lay in alone, and those are left out: the clone
/// is valid, its rate the path's, and its notes say what was left out.
/// (At 120 Mbit/s, 80 ms of load fits the TUN queue of 1000 packets: the
/// emulator reads it all after.)
#[test]
fn a_clones_overrun_leaves_out_the_intervals_a_hold_up_lay_in() {
    if !privileged("a_clones_overrun_leaves_out_the_intervals_a_hold_up_lay_in") {
        return;
    }
    let mut lab = Lab::up("cloneh", &["--rate", "100M", "--rtt", "4ms", "--queue", "1bdp"]);
    let pid = lab.status()["lab"]["pid"].as_u64().expect("the emulator's pid") as u32;
    let queue_full = |lab: &Lab| lab.status()["health"]["links"][0]["queue_full"].as_u64().unwrap_or(0);
    lab.serve_on_b_with(&[]);
    let mut last = None;
    // a try whose overrun the machine's own hold-ups voided as well (more
    // than a quarter of its intervals left out), or whose run the lab said
    // INVALID, is measured again without this hold-up, each try once the
    // machine is quiet: five, and more for five minutes (CI once saw five
    // INVALID in a row, two minutes of steal)
    crate::quiet();
    let mut tries = Tries::new(5, Duration::from_secs(300));
    while tries.next() {
        let full = queue_full(&lab);
        let mut clone = crate::bin()
            .args(["lab", "exec", "--name", &lab.name, "a", "--", BIN])
            .args(["lab", "clone", "10.77.2.1", "--time", "20s", "--max-rate", "120M", "--json", "--no-store"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lab clone");
        // the emulator writes its health every 250 ms: the hold-up lands
        // 0.2-0.5 s into the 1.5 s overrun
        let until = Instant::now() + Duration::from_secs(20);
        let mut held = false;
        while !held && Instant::now() < until && clone.try_wait().ok().flatten().is_none() {
            if queue_full(&lab) > full {
                hold_up(pid, Duration::from_millis(200), 1, Duration::from_millis(80), Duration::ZERO)
                    .join()
                    .expect("the stopper");
                held = true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = clone.wait_with_output().expect("lab clone");
        assert!(held, "the a -> b overrun never filled the link's queue: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let notes = v["notes"].to_string();
        let judged = notes.contains("a -> b (to the agent), the overrun: ")
            && notes.contains("report intervals crossed the lab's emulator while it was late");
        if !judged {
            eprintln!("a try's overrun was not judged by interval, tried again: {notes}; {}", stderr(&o));
        }
        last = Some((o, v));
        if judged {
            break;
        }
    }
    let (o, v) = last.expect("a try");
    assert!(o.status.success(), "{}", stderr(&o));
    let notes = v["notes"].to_string();
    assert!(notes.contains("report intervals crossed the lab's emulator while it was late"), "{notes}");
    let rate = v["profile"]["ab"]["rate_bps"]["value"].as_f64().expect("a rate");
    assert!((rate / 100e6 - 1.0).abs() <= 0.03, "a -> b: {rate} bit/s on a 100 Mbit/s link; {notes}");
}

/// A `nice -n 19` busy loop on every CPU (what a build does to a user's
/// machine), ended by its pid when dropped.
struct Hog(Vec<Child>);

impl Hog {
    fn on_every_cpu() -> Hog {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Hog((0..cpus)
            .map(|_| {
                Command::new("nice")
                    .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("nice -n 19 sh")
            })
            .collect())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Issue 33's busy machine, kept short (bench/lab-busy.sh runs ten 5 s
/// runs a series): with a niced busy loop on every CPU, streams across
/// baltic (1 Gbit/s x 20 ms) are valid, as root (the emulator real-time)
/// and as a user (a short fair slice, its hosts niced below it). The hog
/// may not hold the lab up: runs voided "by other tasks" twice fail the
/// test (once may be another test's lab beside this one: the rootless
/// phase runs two at a time, and only the heavy ones take the lock). A
/// run voided for another cause is tried again once the machine is quiet,
/// as every lab test's is: the hypervisor's steal, or hold-ups of 1-10 ms
/// it cannot lay at any door (the rootless CI once met 60 ms of them in a
/// 2 s run, "not running"), are no luck of ours to bet on, and the run
/// says whose they were. Three valid runs in ten tries.
#[test]
fn streams_across_baltic_are_valid_beside_a_niced_hog_on_every_cpu() {
    if !privileged("streams_across_baltic_are_valid_beside_a_niced_hog_on_every_cpu") {
        return;
    }
    let _serial = serial();
    let (mut valid, mut by_others, mut tries) = (0, Vec::new(), 0);
    while valid < 3 {
        tries += 1;
        assert!(tries <= 10, "{valid} of 3 runs valid in {} tries beside the hog", tries - 1);
        let hog = Hog::on_every_cpu();
        let o = run(&["stream", "--lab", "baltic", "-t", "4", "-C", "cubic", "--no-store", "--json"]);
        drop(hog);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
            let bps = v["runs"][0]["up_bps"].as_f64().expect("up_bps");
            assert!(bps > 0.5e9, "{bps} bit/s across 1 Gbit/s beside the hog: {}", stderr(&o));
            valid += 1;
            continue;
        }
        assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let cause = v["runs"][0]["env"]["lab"]["cause"].as_str().unwrap_or("").to_string();
        if cause == "other-tasks" {
            by_others.push(stderr(&o));
            assert!(by_others.len() < 2, "INVALID twice by other tasks beside a niced hog: {}", by_others.join("\n"));
        }
        said_invalid(&o);
        crate::quiet();
    }
}
