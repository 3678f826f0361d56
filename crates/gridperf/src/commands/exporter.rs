//! `gridperf serve --metrics ADDR`: the agent's counters for Prometheus at
//! `/metrics`, and probes at `/probe?target=HOST&module=NAME` that measure
//! to another agent at scrape time, as blackbox_exporter does.
//!
//! Probes are what the site allows: modules from `--probe-config FILE`
//! (each a short, bounded rtt or stream), targets from its list, at most
//! `--max-tests` probes at once, each cut to Prometheus' scrape timeout
//! (`X-Prometheus-Scrape-Timeout-Seconds`). Every HTTP read and write has a
//! deadline; a client that says nothing is dropped.

use crate::agent::conns::{ConnLimits, ConnTable};
use crate::agent::metrics::{family, Metrics};
use crate::error::{Error, Result};
use serde::Deserialize;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// HTTP connections served at once; more are told 503 at once (unless one
/// still reading its head can be cut to make room).
pub const MAX_HTTP: usize = 32;
/// From one address, and from one /24 or /64 (a Prometheus probing many
/// targets through this agent scrapes it many times at once).
pub const MAX_HTTP_PER_ADDRESS: usize = 16;
pub const MAX_HTTP_PER_NETWORK: usize = 32;
/// The longest scrape timeout a probe takes from Prometheus' header (more
/// is taken as this).
pub const MAX_SCRAPE_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest a module's measurement may last.
pub const MAX_PROBE: Duration = Duration::from_secs(10);
/// What a probe needs beyond its measurement: starting gridperf,
/// connecting, the agent's end, the reply (measured on a 2-vCPU VM: an rtt
/// of 1 s took 1.6 s end to end, a stream of 1 s 2.3 s).
pub const PROBE_SETUP: Duration = Duration::from_millis(1500);
pub const STREAM_SETUP: Duration = Duration::from_millis(2500);
/// How long a request may take to arrive, and a response to leave.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most a connection lives: its head, the longest probe with its
/// setup, and its answer written.
const CONNECTION_DEADLINE: Duration =
    Duration::from_secs(HTTP_TIMEOUT.as_secs() * 2 + MAX_PROBE.as_secs() + STREAM_SETUP.as_secs() + 5);
/// The largest request head read.
const MAX_HEAD: usize = 8192;

/// A probe module, as the configuration file gives it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Module {
    /// rtt, stream or tune (the target's RTT measured, both ends' settings
    /// read: what caps one stream on the path).
    pub test: String,
    /// How long it measures (rtt's time budget, stream's -t): at most 10 s.
    #[serde(default = "default_duration")]
    pub duration: String,
    /// rtt: the message size; stream: the write size.
    pub size: Option<u64>,
    /// rtt: tcp or udp (default udp).
    pub proto: Option<String>,
    /// rtt: a message with no reply by then is lost (rtt --timeout; default 1s, at most 5s).
    pub timeout: Option<String>,
    /// stream: parallel streams (at most 8).
    pub parallel: Option<u32>,
    /// stream: each stream's cap (SO_MAX_PACING_RATE), e.g. 500M; tune:
    /// the path's rate, for the advice.
    pub rate: Option<String>,
    /// stream: the agent sends (-R).
    #[serde(default)]
    pub reverse: bool,
}

fn default_duration() -> String {
    "1s".into()
}

/// The probe configuration file (JSON).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    pub modules: std::collections::BTreeMap<String, Module>,
    /// Who may be probed: address blocks (10.0.0.0/8) for targets given as
    /// addresses, exact HOST or HOST:PORT strings for names.
    pub targets: Vec<String>,
}

/// A module checked: its measurement's length and the command line it runs.
#[derive(Debug, Clone)]
pub struct Checked {
    pub name: String,
    pub measure: Duration,
    /// rtt: the per-message timeout.
    pub timeout: Duration,
    pub module: Module,
}

impl Checked {
    /// What the probe needs beyond its measurement: setting up, and for an
    /// rtt two timeouts (a lost warm-up message, the last message lost as
    /// the time budget ends).
    pub fn overhead(&self) -> Duration {
        match self.module.test.as_str() {
            "rtt" => PROBE_SETUP + 2 * self.timeout,
            _ => STREAM_SETUP,
        }
    }
}

impl ProbeConfig {
    /// Whether `target` (HOST or HOST:PORT, as `gridperf rtt` takes it) may be probed.
    pub fn allows(&self, target: &str) -> bool {
        let host = host_of(target);
        self.targets.iter().any(|t| {
            if t.contains('/') {
                let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
                match (t.parse::<gridperf_core::auth::Cidr>(), ip) {
                    (Ok(c), Ok(ip)) => c.contains(ip.to_canonical()),
                    _ => false,
                }
            } else {
                t == target || t == host
            }
        })
    }
}

/// The host part of HOST, HOST:PORT, [V6]:PORT or a bare IPv6 address.
fn host_of(target: &str) -> &str {
    // "[v6]" and what follows; an unclosed bracket is no host (the fuzz
    // test found `[fd00::1` panicking a handler here)
    if let Some(rest) = target.strip_prefix('[') {
        return rest.find(']').map_or(target, |k| &target[..k + 2]);
    }
    if target.matches(':').count() == 1 {
        return target.split(':').next().unwrap_or(target);
    }
    target
}

/// What `--metrics` serves.
pub struct Exporter {
    pub metrics: Arc<Metrics>,
    pub max_tests: usize,
    pub probes: Option<(ProbeConfig, Vec<Checked>)>,
    probing: AtomicUsize,
    http: Arc<ConnTable>,
    probes_refused: AtomicU64,
    probes_run: AtomicU64,
}

impl Exporter {
    pub fn new(metrics: Arc<Metrics>, max_tests: usize, probes: Option<(ProbeConfig, Vec<Checked>)>) -> Exporter {
        Exporter {
            metrics,
            max_tests,
            probes,
            probing: AtomicUsize::new(0),
            http: ConnTable::new(ConnLimits {
                total: MAX_HTTP,
                per_address: MAX_HTTP_PER_ADDRESS,
                per_network: MAX_HTTP_PER_NETWORK,
            }),
            probes_refused: AtomicU64::new(0),
            probes_run: AtomicU64::new(0),
        }
    }

    /// Serves HTTP on `listener` until `stop`.
    pub fn serve(self: Arc<Self>, listener: TcpListener, stop: Arc<AtomicBool>) {
        let _ = listener.set_nonblocking(true);
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, peer)) => {
                    let Ok(admitted) = self.http.admit(peer.ip(), s.try_clone().ok()) else {
                        shed(&s);
                        continue;
                    };
                    let me = self.clone();
                    // the admission leaves the table however the handler ends (a panic too)
                    let _ = std::thread::Builder::new().name("gridperf-metrics".into()).spawn(move || {
                        me.handle(s, &admitted);
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        self.http.shut_all();
    }

    /// Serves one admitted connection: hyper reads the request head
    /// (within HTTP_TIMEOUT and MAX_HEAD, or the connection is closed),
    /// [`Exporter::answer`] answers it, and the connection closes. The
    /// whole exchange has a deadline, the probe's time included.
    fn handle(&self, s: TcpStream, admitted: &crate::agent::conns::Admitted) {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        if s.set_nonblocking(true).is_err() {
            return;
        }
        rt.block_on(async {
            let Ok(io) = tokio::net::TcpStream::from_std(s) else { return };
            let service = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| {
                // a whole head came: the connection is a client's, not a silent one
                admitted.settle();
                let (code, kind, body) = if req.method() == hyper::Method::GET {
                    let query: Pairs = req
                        .uri()
                        .query()
                        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                        .unwrap_or_default();
                    let headers: Pairs = req
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                        .collect();
                    self.answer(req.uri().path(), &query, &headers)
                } else {
                    (405, "text/plain", "only GET is served: /metrics, or /probe?target=HOST&module=NAME\n".into())
                };
                let reply = hyper::Response::builder()
                    .status(code)
                    .header(hyper::header::CONTENT_TYPE, kind)
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)));
                std::future::ready(reply)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HTTP_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_HEAD)
                .serve_connection(hyper_util::rt::TokioIo::new(io), service);
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, conn).await;
        });
    }

    /// The answer to GET `path`: (HTTP status, content type, body).
    fn answer(
        &self,
        path: &str,
        query: &[(String, String)],
        headers: &[(String, String)],
    ) -> (u16, &'static str, String) {
        const METRICS: &str = "text/plain; version=0.0.4; charset=utf-8";
        match path {
            "/metrics" => {
                let mut body = self.metrics.render(self.max_tests);
                let one = |v: f64| [(String::new(), v)];
                family(
                    &mut body,
                    "gridperf_probes_running",
                    "gauge",
                    "Probes measuring now.",
                    one(self.probing.load(Ordering::SeqCst) as f64),
                );
                family(
                    &mut body,
                    "gridperf_probes_total",
                    "counter",
                    "Probes run.",
                    one(self.probes_run.load(Ordering::Relaxed) as f64),
                );
                family(
                    &mut body,
                    "gridperf_probes_refused_total",
                    "counter",
                    "Probes refused (a target or module not allowed, too many at once, a scrape timeout too short).",
                    one(self.probes_refused.load(Ordering::Relaxed) as f64),
                );
                (200, METRICS, body)
            }
            "/probe" => match self.probe(query, scrape_timeout(headers)) {
                Ok(body) => (200, METRICS, body),
                Err((code, why)) => {
                    self.probes_refused.fetch_add(1, Ordering::Relaxed);
                    (code, "text/plain", format!("{why}\n"))
                }
            },
            "/" => (
                200,
                "text/html",
                "<html><head><title>gridperf agent</title></head><body><h1>gridperf agent</h1>\
                 <p><a href=\"/metrics\">/metrics</a>; /probe?target=HOST&amp;module=NAME</p></body></html>\n"
                    .into(),
            ),
            _ => (404, "text/plain", "not found: /metrics, or /probe?target=HOST&module=NAME\n".into()),
        }
    }

    /// Runs a probe; its metrics, or (HTTP status, why not).
    fn probe(
        &self,
        query: &[(String, String)],
        scrape: Option<Duration>,
    ) -> std::result::Result<String, (u16, String)> {
        let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
        let Some((cfg, modules)) = &self.probes else {
            return Err((
                404,
                "this agent runs no probes: its operator gives modules with serve --probe-config FILE".into(),
            ));
        };
        let target = get("target").filter(|t| !t.is_empty()).ok_or((400, "give target=HOST[:PORT]".to_string()))?;
        let name = get("module").ok_or((400, "give module=NAME".to_string()))?;
        let Some(m) = modules.iter().find(|m| m.name == name) else {
            let names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
            return Err((400, format!("no module {name:?}: this agent's are {}", names.join(", "))));
        };
        if !cfg.allows(target) {
            return Err((
                403,
                format!("target {target} is not among the targets this agent may probe (--probe-config)"),
            ));
        }
        // the measurement fits the scrape: Prometheus' timeout, less a margin for the reply
        let mut measure = m.measure;
        if let Some(t) = scrape {
            let need = m.overhead() + Duration::from_millis(500);
            let room = t.saturating_sub(need);
            if room < Duration::from_millis(200) {
                return Err((
                    400,
                    format!(
                        "a scrape timeout of {:.1} s leaves no time to measure: module {} needs {:.1} s beyond its \
                         measurement, and at least 0.2 s to measure (raise scrape_timeout{})",
                        t.as_secs_f64(),
                        m.name,
                        need.as_secs_f64(),
                        if m.module.test == "rtt" { ", or lower the module's timeout" } else { "" }
                    ),
                ));
            }
            measure = measure.min(room);
        }
        if self.probing.fetch_add(1, Ordering::SeqCst) >= self.max_tests {
            self.probing.fetch_sub(1, Ordering::SeqCst);
            return Err((503, format!("{} probes are measuring, this agent's --max-tests; try again", self.max_tests)));
        }
        let args = command(m, target, measure);
        let started = Instant::now();
        let ran = super::run_self_bounded(&args, measure + m.overhead());
        self.probing.fetch_sub(1, Ordering::SeqCst);
        self.probes_run.fetch_add(1, Ordering::Relaxed);
        let took = started.elapsed().as_secs_f64();
        let mut out = String::new();
        let (ok, figures) = match ran {
            Ok((Some(0), stdout, _)) => match serde_json::from_str::<Value>(&stdout) {
                Ok(v) => (true, figures(&m.module.test, &v)),
                Err(_) => (false, String::new()),
            },
            Ok((_, _, err)) => {
                let why = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().replace('"', "'");
                (false, format!("# the probe failed: {why}\n"))
            }
            Err(e) => (false, format!("# the probe failed: {}\n", e.message)),
        };
        family(
            &mut out,
            "gridperf_probe_success",
            "gauge",
            "Whether the probe measured.",
            [(String::new(), f64::from(u8::from(ok)))],
        );
        family(
            &mut out,
            "gridperf_probe_duration_seconds",
            "gauge",
            "How long the probe took.",
            [(String::new(), took)],
        );
        out.push_str(&figures);
        Ok(out)
    }
}

/// The gridperf command line of a probe.
fn command(c: &Checked, target: &str, measure: Duration) -> Vec<String> {
    let m = &c.module;
    let secs = format!("{}s", measure.as_secs_f64());
    let mut a: Vec<String> = match m.test.as_str() {
        "rtt" => vec![
            "rtt".into(),
            target.into(),
            "--proto".into(),
            m.proto.clone().unwrap_or_else(|| "udp".into()),
            "--sizes".into(),
            m.size.unwrap_or(64).to_string(),
            "-t".into(),
            secs,
            "--warmup".into(),
            "10".into(),
            "--timeout".into(),
            format!("{}s", c.timeout.as_secs_f64()),
        ],
        "tune" => vec!["tune".into(), target.into(), "--rate".into(), m.rate.clone().unwrap_or_default()],
        _ => {
            let mut a = vec!["stream".into(), target.into(), "-t".into(), secs];
            if let Some(p) = m.parallel {
                a.extend(["-P".into(), p.to_string()]);
            }
            if let Some(r) = &m.rate {
                a.extend(["--pacing".into(), r.clone()]);
            }
            if let Some(s) = m.size {
                a.extend(["-l".into(), s.to_string()]);
            }
            if m.reverse {
                a.push("-R".into());
            }
            a
        }
    };
    a.push("--json".into());
    if m.test != "tune" {
        a.push("--no-store".into());
    }
    a
}

/// A probe's figures as metrics (base units: seconds, bytes).
pub fn figures(test: &str, v: &Value) -> String {
    let mut o = String::new();
    // a figure the probe did not give is left out, family and all
    let mut gauge = |name: &str, help: &str, samples: &[(String, f64)]| {
        if !samples.is_empty() {
            family(&mut o, name, "gauge", help, samples.iter().cloned());
        }
    };
    if test == "rtt" {
        let p = &v["points"][0];
        let s = &p["summary"];
        let q: Vec<(String, f64)> = [
            ("0", "min_ns"),
            ("0.25", "q1_ns"),
            ("0.5", "median_ns"),
            ("0.75", "q3_ns"),
            ("0.99", "p99_ns"),
            ("1", "max_ns"),
        ]
        .iter()
        .filter_map(|(q, f)| s[*f].as_f64().map(|ns| (format!("{{quantile=\"{q}\"}}"), ns / 1e9)))
        .collect();
        gauge("gridperf_probe_rtt_seconds", "Round-trip times of the probe's exchanges (full round trips).", &q);
        let one = |f: &str| s[f].as_f64().map(|ns| vec![(String::new(), ns / 1e9)]).unwrap_or_default();
        gauge("gridperf_probe_rtt_mean_seconds", "The mean round trip.", &one("mean_ns"));
        let n = |f: &str| p[f].as_f64().map(|x| vec![(String::new(), x)]).unwrap_or_default();
        gauge(
            "gridperf_probe_exchanges",
            "Exchanges counted.",
            &s["count"].as_f64().map(|x| vec![(String::new(), x)]).unwrap_or_default(),
        );
        gauge("gridperf_probe_lost", "Exchanges with no reply within the timeout (UDP).", &n("lost"));
    } else if test == "tune" {
        let one = |x: Option<f64>| x.map(|x| vec![(String::new(), x)]).unwrap_or_default();
        gauge(
            "gridperf_probe_tune_rtt_seconds",
            "The median RTT tune measured to the target.",
            &one(v["measured"]["rtt_median_ns"].as_f64().map(|ns| ns / 1e9)),
        );
        gauge(
            "gridperf_probe_tune_bdp_bytes",
            "The path's bandwidth-delay product (the module's rate x the RTT).",
            &one(v["bdp_bytes"].as_f64()),
        );
        let label = |x: &Value| x.as_str().unwrap_or("").replace(['"', '\\'], "'");
        let caps: Vec<(String, f64)> = v["directions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                let bps = d["cap_bps"].as_f64()?;
                let binding = if d["binding"].is_null() { "none".to_string() } else { label(&d["binding"]) };
                Some((
                    format!("{{from=\"{}\",to=\"{}\",binding=\"{binding}\"}}", label(&d["from"]), label(&d["to"])),
                    bps / 8.0,
                ))
            })
            .collect();
        gauge(
            "gridperf_probe_tune_stream_cap_bytes_per_second",
            "What the ends' settings let one stream carry on the path, each direction (binding: the setting that caps it, none: the path's rate).",
            &caps,
        );
    } else {
        let run = &v["runs"][0];
        let bps = run["up_bps"].as_f64().or(run["down_bps"].as_f64());
        gauge(
            "gridperf_probe_throughput_bytes_per_second",
            "What the receivers got per second, all streams.",
            &bps.map(|b| vec![(String::new(), b / 8.0)]).unwrap_or_default(),
        );
        let streams = run["streams"].as_array().cloned().unwrap_or_default();
        let retrans: Vec<(String, f64)> = streams
            .iter()
            .filter_map(|s| s["retransmits"].as_f64().map(|r| (format!("{{stream=\"{}\"}}", s["index"]), r)))
            .collect();
        gauge("gridperf_probe_retransmits", "Segments each stream's sender retransmitted.", &retrans);
        let srtt: Vec<(String, f64)> = streams
            .iter()
            .filter_map(|s| {
                let us = s["timeline"].as_array()?.last()?["srtt_us"].as_f64()?;
                Some((format!("{{stream=\"{}\"}}", s["index"]), us / 1e6))
            })
            .collect();
        gauge("gridperf_probe_srtt_seconds", "Each stream's smoothed RTT as it ended (the sender's TCP_INFO).", &srtt);
    }
    o
}

/// Name and value pairs (a query's, or a request's headers).
type Pairs = Vec<(String, String)>;

/// Prometheus' scrape timeout from its header: a positive number of
/// seconds, at most MAX_SCRAPE_TIMEOUT (a larger one, 2e19 say, is taken
/// as that; nonsense is taken as no header).
pub fn scrape_timeout(headers: &[(String, String)]) -> Option<Duration> {
    let t = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-prometheus-scrape-timeout-seconds"))
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)?;
    // a timeout below a nanosecond is one nanosecond (no room to measure), not none
    Some(
        Duration::try_from_secs_f64(t).unwrap_or(MAX_SCRAPE_TIMEOUT).clamp(Duration::from_nanos(1), MAX_SCRAPE_TIMEOUT),
    )
}

/// Tells a connection beyond MAX_HTTP to come back, briefly: what it sent
/// is read first (at most 100 ms), so that closing does not reset it.
fn shed(mut s: &TcpStream) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; MAX_HEAD];
    let _ = s.read(&mut buf);
    respond(s, 503, "text/plain", "too many HTTP connections at once; try again\n");
    let _ = s.shutdown(std::net::Shutdown::Write);
}

fn respond(mut s: &TcpStream, code: u16, kind: &str, body: &str) {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    // one write: the head and the body leave together, not a packet per piece of the format
    let whole = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(whole.as_bytes());
    let _ = s.flush();
}

/// Binds the exporter's address, and says what is wrong with it.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| Error::usage(format!("--metrics {addr}: cannot listen there: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_target_is_found_in_any_string() {
        assert_eq!(host_of("[fd00::1]:5301"), "[fd00::1]");
        assert_eq!(host_of("10.0.0.1:5301"), "10.0.0.1");
        assert_eq!(host_of("fd00::1"), "fd00::1");
        assert_eq!(host_of("[fd00::1"), "[fd00::1", "unclosed: no panic");
        assert_eq!(host_of("[\u{e9}]x"), "[\u{e9}]");
    }

    #[test]
    fn targets_are_allowed_by_block_or_by_name() {
        let cfg = ProbeConfig {
            modules: Default::default(),
            targets: vec!["10.0.0.0/8".into(), "dtn2.example".into(), "dtn3.example:6000".into()],
        };
        assert!(cfg.allows("10.1.2.3") && cfg.allows("10.1.2.3:6000"));
        assert!(cfg.allows("dtn2.example") && cfg.allows("dtn2.example:5301") && cfg.allows("dtn3.example:6000"));
        assert!(!cfg.allows("dtn3.example") && !cfg.allows("11.0.0.1") && !cfg.allows("evil.example"));
    }

    #[test]
    fn a_scrape_timeout_of_any_size_is_read_without_a_panic() {
        let h = |v: &str| vec![("X-Prometheus-Scrape-Timeout-Seconds".to_string(), v.to_string())];
        assert_eq!(scrape_timeout(&h("2e19")), Some(MAX_SCRAPE_TIMEOUT));
        assert_eq!(scrape_timeout(&h("1e300")), Some(MAX_SCRAPE_TIMEOUT));
        assert_eq!(scrape_timeout(&h("9.5")), Some(Duration::from_millis(9500)));
        for bad in ["inf", "NaN", "-1", "0", "x", ""] {
            assert_eq!(scrape_timeout(&h(bad)), None, "{bad}");
        }
    }
}
