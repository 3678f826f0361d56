//! `gridperf serve --metrics`: /metrics and /probe over HTTP, their
//! refusals and bounds, and a real Prometheus (Debian's package) scraping
//! an agent and probing another through it, as blackbox_exporter is used.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An HTTP GET on loopback: (status, body), within 30 s.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gridperf-prom-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

/// `gridperf serve` on 127.0.0.1 with metrics (and probes from `config`); (agent, its metrics port).
fn exporter(d: &std::path::Path, config: Option<&str>, extra: &[&str]) -> (crate::Served, u16, u16) {
    let mport = crate::free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let mut args = vec!["--metrics", &maddr];
    let path = d.join("probes.json");
    let p = path.to_str().expect("path").to_string();
    if let Some(c) = config {
        std::fs::write(&path, c).expect("config");
        args.extend_from_slice(&["--probe-config", &p]);
    }
    args.extend_from_slice(extra);
    let (agent, port) = crate::serve_on("127.0.0.1", &args);
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(("127.0.0.1", mport)).is_err() {
        assert!(Instant::now() < deadline, "no metrics listener");
        std::thread::sleep(Duration::from_millis(20));
    }
    (agent, mport, port)
}

const CONFIG: &str = r#"{ "modules": { "rtt": { "test": "rtt", "duration": "500ms", "timeout": "200ms" },
                                       "bulk": { "test": "stream", "duration": "1s", "rate": "100M" },
                                       "tune": { "test": "tune", "rate": "10G" } },
                          "targets": ["127.0.0.0/8"] }"#;

#[test]
fn probes_are_refused_outside_the_config_and_bounded_by_max_tests() {
    let _heavy = crate::heavy();
    let d = tmpdir("refuse");
    let (_b, bport) = crate::serve_on("127.0.0.2", &[]);
    let target = format!("127.0.0.2:{bport}");
    let (_a, m, aport) = exporter(&d, Some(CONFIG), &["--max-streams", "2"]);
    let probe = |module: &str, target: &str| format!("/probe?target={}&module={module}", target.replace(':', "%3A"));
    // a module that does not exist, a target not allowed, a scrape timeout too short
    let (code, body) = get(m, &probe("dns", &target), &[]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("no module \"dns\": this agent's are bulk, rtt, tune"), "{body}");
    let (code, body) = get(m, &probe("rtt", "192.0.2.7"), &[]);
    assert_eq!(code, 403, "{body}");
    let (code, body) = get(m, &probe("rtt", &target), &[("X-Prometheus-Scrape-Timeout-Seconds", "1")]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("raise scrape_timeout"), "{body}");
    // a probe that fits: its figures
    let (code, body) = get(m, &probe("bulk", &target), &[("X-Prometheus-Scrape-Timeout-Seconds", "10")]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("gridperf_probe_success 1\n"), "{body}");
    let rate: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("gridperf_probe_throughput_bytes_per_second "))
        .and_then(|v| v.parse().ok())
        .expect("throughput");
    // 100 Mbit/s paced (SO_MAX_PACING_RATE): 12.5 MB/s, which the kernel's
    // pacing keeps within a few per cent over a 1-s stream (measured 12.69)
    assert!((10e6..=13e6).contains(&rate), "{rate} B/s");
    // a tune probe: the RTT measured, and what the ends' settings let one stream carry each way
    let (code, body) = get(m, &probe("tune", &target), &[]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("gridperf_probe_success 1\n"), "{body}");
    let caps = body.lines().filter(|l| l.starts_with("gridperf_probe_tune_stream_cap_bytes_per_second{from=")).count();
    assert_eq!(caps, 2, "{body}");
    assert!(body.lines().any(|l| l.starts_with("gridperf_probe_tune_rtt_seconds ")), "{body}");
    // six scrapes at once against --max-tests 1: one measures, the others are told so; none overloads the target
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let path = probe("rtt", &target);
            std::thread::spawn(move || get(m, &path, &[]))
        })
        .collect();
    let answers: Vec<(u16, String)> = handles.into_iter().map(|h| h.join().expect("scrape")).collect();
    let ok: Vec<&(u16, String)> = answers.iter().filter(|(c, _)| *c == 200).collect();
    assert!(!ok.is_empty() && ok.len() < 6, "{answers:?}");
    assert!(ok.iter().all(|(_, b)| b.contains("gridperf_probe_success 1\n")), "{answers:?}");
    assert!(answers.iter().all(|(c, b)| *c == 200 || (*c == 503 && b.contains("--max-tests"))), "{answers:?}");
    // a scrape timeout no Duration holds (2e19 s), 20 times: each answered, none kills its handler
    for _ in 0..20 {
        let (code, body) = get(m, &probe("dns", &target), &[("X-Prometheus-Scrape-Timeout-Seconds", "2e19")]);
        assert_eq!(code, 400, "{body}");
    }
    let (code, _) = get(m, "/metrics", &[]);
    assert_eq!(code, 200, "after 20 absurd scrape timeouts");
    // silent clients take their address's HTTP slots, and the rest are shed; a
    // scrape that comes while they are new is told to come back, and one that
    // comes later takes the place of the oldest silent one
    let silent: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(("127.0.0.1", m)).expect("silent")).collect();
    std::thread::sleep(Duration::from_millis(100));
    let (code, _) = get(m, "/metrics", &[]);
    assert_eq!(code, 503, "a scrape while 16 silent connections from its address are new");
    std::thread::sleep(gridperf::agent::conns::SETTLE_GRACE);
    for _ in 0..3 {
        let (code, body) = get(m, "/metrics", &[]);
        assert_eq!(code, 200, "a scrape beside silent connections: {body}");
        assert!(body.contains("gridperf_probes_refused_total "), "{body}");
        assert!(body.contains("# TYPE gridperf_agent_tests_total counter"), "{body}");
        std::thread::sleep(gridperf::agent::conns::SETTLE_GRACE);
    }
    drop(silent);
    // the agent's own counters: a test served, one refused by the site's limits, the bytes it moved
    let a = format!("127.0.0.1:{aport}");
    let served = crate::bin().args(["stream", &a, "-t", "0.5", "--no-store"]).output().expect("stream");
    assert!(served.status.success(), "{}", String::from_utf8_lossy(&served.stderr));
    let refused = crate::bin().args(["stream", &a, "-t", "0.5", "-P", "4", "--no-store"]).output().expect("stream");
    assert!(!refused.status.success());
    let (_, body) = get(m, "/metrics", &[]);
    assert!(body.contains("gridperf_agent_tests_total{kind=\"stream\",outcome=\"done\"} 1\n"), "{body}");
    assert!(body.contains("gridperf_agent_refused_total{reason=\"limits\"} 1\n"), "{body}");
    let received: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("gridperf_agent_data_bytes_total{direction=\"received\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(received > 1e6, "{body}");
    assert!(
        body.contains(&format!("gridperf_agent_last_test_bytes{{client=\"127.0.0.1\",kind=\"stream\"}} {received}\n")),
        "{body}"
    );
    // an agent without a probe config refuses every probe, and says how to allow them
    let (_c, m2, _) = exporter(&d, None, &[]);
    let (code, body) = get(m2, &probe("rtt", &target), &[]);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("--probe-config"), "{body}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The metrics port's HTTP is hyper's: a client that sends half a head and
/// falls silent is closed after the 5 s head deadline, a head beyond 8 KiB
/// is refused, and only GET is answered.
#[test]
fn the_metrics_port_closes_a_silent_client_and_answers_only_get() {
    let d = tmpdir("http");
    let (_a, m, _) = exporter(&d, None, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", m)).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n").expect("half a head");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let t0 = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(15), "closed after {took:?}");
    let mut big = TcpStream::connect(("127.0.0.1", m)).expect("connect");
    big.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let head = format!("GET /metrics HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(16_000));
    let _ = big.write_all(head.as_bytes());
    let mut text = String::new();
    let _ = big.read_to_string(&mut text);
    assert!(!text.starts_with("HTTP/1.1 200"), "a 16 kB head: {text}");
    let mut post = TcpStream::connect(("127.0.0.1", m)).expect("connect");
    post.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    post.write_all(b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").expect("post");
    let mut text = String::new();
    post.read_to_string(&mut text).expect("read");
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    assert!(text.contains("only GET is served"), "{text}");
    let (code, body) = get(m, "/metrics", &[]);
    assert_eq!(code, 200, "{body}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_probe_config_is_refused_before_the_agent_starts() {
    let d = tmpdir("badcfg");
    for (cfg, says) in [
        (r#"{"modules": {"x": {"test": "rtt", "duration": "30s"}}, "targets": []}"#, "at most 10 s"),
        (r#"{"modules": {"x": {"test": "ping"}}, "targets": []}"#, "rtt, stream or tune"),
        (r#"{"modules": {"x": {"test": "tune"}}, "targets": []}"#, "needs the path's rate"),
        (r#"{"modules": {"x": {"test": "stream", "parallel": 64}}, "targets": []}"#, "parallel: 1 to 8"),
        (r#"{"modules": {}, "targets": ["10.0.0.0/99"]}"#, "target 10.0.0.0/99"),
        (r#"{"modules": {}, "targets": [], "extra": 1}"#, "unknown field"),
        (r#"{"modules": {"x": {"test": "rtt", "timeout": "9s"}}, "targets": []}"#, "at most 5 s"),
        (r#"{"modules": {"x": {"test": "stream", "timeout": "1s"}}, "targets": []}"#, "is rtt's"),
    ] {
        let path = d.join("c.json");
        std::fs::write(&path, cfg).expect("write");
        let o = crate::bin()
            .args(["serve", "--bind", "127.0.0.1", "--port", "0", "--metrics", "127.0.0.1:0", "--probe-config"])
            .arg(&path)
            .output()
            .expect("serve");
        assert_eq!(o.status.code(), Some(2), "{cfg}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{cfg}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Prometheus' HTTP API: a query's vector, as (labels, value).
fn query(port: u16, q: &str) -> Vec<(serde_json::Value, f64)> {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    // Prometheus may not listen yet
    if TcpStream::connect(("127.0.0.1", port)).is_err() {
        return Vec::new();
    }
    let (code, body) = get(port, &format!("/api/v1/query?query={enc}"), &[]);
    if code != 200 {
        return Vec::new();
    }
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["result"]
        .as_array()
        .map(|r| r.iter().filter_map(|s| Some((s["metric"].clone(), s["value"][1].as_str()?.parse().ok()?))).collect())
        .unwrap_or_default()
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn prometheus_scrapes_an_agent_and_probes_another_through_it() {
    let _heavy = crate::heavy();
    let Ok(prom) = which("prometheus") else {
        assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI must run this: .ci/run installs prometheus");
        eprintln!("\n*** SKIPPED prometheus::prometheus_scrapes_an_agent_and_probes_another_through_it: no prometheus (apt install prometheus) ***\n");
        return;
    };
    let d = tmpdir("real");
    let (_b, bport) = crate::serve_on("127.0.0.2", &[]);
    let (_a, m, _) = exporter(&d, Some(CONFIG), &[]);
    let pport = crate::free_port();
    let config = format!(
        "global:\n  scrape_interval: 3s\n  scrape_timeout: 3s\nscrape_configs:\n\
         - job_name: agent\n  static_configs:\n  - targets: ['127.0.0.1:{m}']\n\
         - job_name: probe\n  metrics_path: /probe\n  params:\n    module: [rtt]\n  static_configs:\n  - targets: ['127.0.0.2:{bport}']\n\
         \x20 relabel_configs:\n  - source_labels: [__address__]\n    target_label: __param_target\n\
         \x20 - source_labels: [__param_target]\n    target_label: instance\n\
         \x20 - target_label: __address__\n    replacement: 127.0.0.1:{m}\n"
    );
    std::fs::write(d.join("prometheus.yml"), config).expect("config");
    let _p = Prometheus(
        Command::new(prom)
            .arg(format!("--config.file={}", d.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{pport}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus"),
    );
    // two scrapes of each job, within a minute
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probes = query(pport, "count_over_time(gridperf_probe_success[5m])");
        let agent = query(pport, "count_over_time(gridperf_agent_tests_running[5m])");
        if probes.first().is_some_and(|(_, n)| *n >= 2.0) && agent.first().is_some_and(|(_, n)| *n >= 2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus did not scrape twice: probes {probes:?}, agent {agent:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let ok = query(pport, "min_over_time(gridperf_probe_success[5m])");
    assert_eq!(ok.first().map(|(_, v)| *v), Some(1.0), "{ok:?}");
    let median = query(pport, "gridperf_probe_rtt_seconds{quantile=\"0.5\"}");
    let (labels, v) = median.first().expect("the probe's median RTT");
    assert!(*v > 0.0 && *v < 0.01, "{v}");
    assert_eq!(labels["instance"], format!("127.0.0.2:{bport}"), "relabeled to the target");
    // the probing agent counts its probes (the scrapes of the two jobs interleave: at least one was counted)
    let probes = query(pport, "max_over_time(gridperf_probes_total[5m])");
    assert!(probes.first().is_some_and(|(_, n)| *n >= 1.0), "{probes:?}");
    let _ = std::fs::remove_dir_all(&d);
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()))
        .ok_or(())
}
