//! `gridperf pscheduler METHOD`: gridperf as a perfSONAR pScheduler tool.
//!
//! pScheduler runs a tool's six methods as programs, JSON on stdin and JSON
//! on stdout, a non-zero exit with a message on stderr when they fail (its
//! PDK's tool.md; the iperf3 tool is the model). gridperf serves three of
//! pScheduler's tests:
//!
//! - `throughput`: `gridperf stream` from the source to a `gridperf serve`
//!   agent at the destination, its result as the iperf3 tool shapes it
//!   (bytes per interval and per stream, bits per second, retransmissions,
//!   RTT in microseconds);
//! - `rtt`: `gridperf rtt` (UDP echoes to the agent), each round trip an
//!   ISO 8601 duration;
//! - `disk-to-disk`: `gridperf copy` from an agent's file to a local path,
//!   verified block by block (`time`, `bytes-sent`, `throughput` in bits
//!   per second).
//!
//! The measurement runs in a child gridperf, bounded by the test's duration
//! plus a margin: nothing the tool starts outlives its slot.

use super::Output;
use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::io::Read;
use std::time::{Duration, Instant};

/// pScheduler's six tool methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    Enumerate,
    CanRun,
    Duration,
    ParticipantData,
    Run,
    MergedResults,
}

/// The tests gridperf serves.
pub const TESTS: &[&str] = &["throughput", "rtt", "disk-to-disk"];

/// The spec fields each test's runs take; any other is refused by can-run.
fn supported(test: &str) -> &'static [&'static str] {
    match test {
        "throughput" => &[
            "schema",
            "source",
            "source-node",
            "dest",
            "dest-node",
            "duration",
            "interval",
            "parallel",
            "window-size",
            "congestion",
            "reverse",
            "zero-copy",
            "omit",
            "udp",
            "bandwidth",
            "buffer-length",
            "ip-version",
            "single-ended",
            "single-ended-port",
        ],
        "rtt" => &["schema", "source", "source-node", "dest", "dest-node", "count", "length", "timeout", "ip-version"],
        "disk-to-disk" => &["schema", "source", "dest", "parallel", "duration", "timeout", "cleanup", "host"],
        _ => &[],
    }
}

/// Why a spec field is not taken, where there is more to say than "not supported".
fn why_not(test: &str, field: &str) -> Option<&'static str> {
    match (test, field) {
        ("rtt", "interval") => {
            Some("gridperf sends each exchange as the last one returns (a ping-pong), not on a clock")
        }
        ("rtt", "ttl" | "ip-tos" | "flow-label") => Some("gridperf's echoes leave these to the kernel"),
        ("throughput", "mss" | "ip-tos" | "flow-label" | "no-delay") => Some("gridperf stream does not set it"),
        ("throughput", "client-cpu-affinity" | "server-cpu-affinity") => {
            Some("gridperf stream pins with --cpu, which this tool does not pass")
        }
        _ => None,
    }
}

/// The test's default duration where its spec gives none (the iperf3 tool's 10 s).
const DEFAULT_THROUGHPUT_S: f64 = 10.0;
const DEFAULT_RTT_COUNT: u64 = 5;
const DEFAULT_RTT_LENGTH: u64 = 64;
const DEFAULT_RTT_TIMEOUT_S: f64 = 2.0;
/// A disk-to-disk test without a duration may take this long.
const DEFAULT_COPY_S: f64 = 60.0;
/// Setting up and tearing down around the measurement: connecting to the
/// agent, its --linger, a lab-less start.
const SETUP_S: f64 = 10.0;
/// The most JSON a method reads from pScheduler.
const MAX_INPUT: u64 = 16 << 20;

/// The tool's configuration file (as the iperf3 tool's iperf3.conf): JSON,
/// `{"agent-port": N, "dest-root": DIR}`: the port this host's `gridperf
/// serve` agent listens on, and the one directory disk-to-disk tests write
/// into; GRIDPERF_PSCHEDULER_CONF names another file.
pub const CONF: &str = "/etc/pscheduler/tool/gridperf/gridperf.conf";
pub const CONF_ENV: &str = "GRIDPERF_PSCHEDULER_CONF";
/// Where disk-to-disk tests write when the configuration names no dest-root.
pub const DEFAULT_DEST_ROOT: &str = "/var/lib/gridperf-pscheduler";

/// The longest test this tool runs: a task submitter asks for any duration.
pub const MAX_TEST_S: f64 = 86_400.0;
/// The most round trips an rtt test asks for.
pub const MAX_RTT_COUNT: u64 = 1_000_000;

/// The tool's configuration, read afresh by each method (pScheduler runs each as a program).
struct Conf {
    agent_port: u16,
    dest_root: std::path::PathBuf,
}

fn conf() -> Result<Conf> {
    let path = std::env::var(CONF_ENV).ok().filter(|p| !p.is_empty()).unwrap_or_else(|| CONF.to_string());
    let mut c = Conf { agent_port: gridperf_core::wire::DEFAULT_PORT, dest_root: DEFAULT_DEST_ROOT.into() };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(c),
        Err(e) => return Err(bad(format!("the tool's configuration {path}: {e}"))),
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("the tool's configuration {path}: {e}")))?;
    if let Some(p) = v.get("agent-port") {
        c.agent_port =
            p.as_u64().and_then(|p| u16::try_from(p).ok()).filter(|&p| p > 0).ok_or_else(|| {
                bad(format!("the tool's configuration {path}: agent-port {p} is not a port (1-65535)"))
            })?;
    }
    if let Some(d) = v.get("dest-root") {
        let d = d
            .as_str()
            .filter(|d| d.starts_with('/'))
            .ok_or_else(|| bad(format!("the tool's configuration {path}: dest-root {d} is not an absolute path")))?;
        c.dest_root = d.into();
    }
    Ok(c)
}

/// This host's agent port, from the tool's configuration (default 5301).
fn agent_port() -> Result<u16> {
    conf().map(|c| c.agent_port)
}

/// Where a disk-to-disk test's `dest` lands: beneath the tool's dest-root
/// (a relative dest is taken from there; an absolute one must lie beneath
/// it), never through `..`. A task submitter names dest; the tool writes
/// nowhere else (pScheduler's account may write elsewhere: the tool does not).
fn dest_beneath(root: &std::path::Path, dest: &str) -> std::result::Result<std::path::PathBuf, String> {
    use std::path::{Component, Path};
    let p = Path::new(dest);
    let rel = if p.is_absolute() {
        p.strip_prefix(root).map_err(|_| {
            format!(
                "dest {dest} is outside the directory this tool writes into ({}, dest-root in {CONF}): give a path \
                 beneath it, or a relative one",
                root.display()
            )
        })?
    } else {
        p
    };
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!(
            "dest {dest}: give a file's path beneath {} (no `..`, not the directory itself)",
            root.display()
        ));
    }
    Ok(root.join(rel))
}

pub use gridperf_core::units::{iso_duration as iso, iso_duration_seconds as iso_seconds};

fn bad(msg: impl Into<String>) -> Error {
    Error::usage(msg.into())
}

/// Reads the method's input: one JSON object on stdin.
fn input() -> Result<Value> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_INPUT + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("reading the JSON on stdin: {e}")))?;
    parse_input(&text)
}

/// The input as a JSON object, or what is wrong with it.
pub fn parse_input(text: &str) -> Result<Value> {
    if text.len() as u64 > MAX_INPUT {
        return Err(bad(format!("the JSON on stdin is more than {} MiB", MAX_INPUT >> 20)));
    }
    if text.trim().is_empty() {
        return Err(bad("no JSON on stdin: pScheduler gives each method a JSON object"));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("the JSON on stdin is not valid: {e}")))?;
    if !v.is_object() {
        return Err(bad("the JSON on stdin must be an object"));
    }
    Ok(v)
}

/// The test's type and spec from a method's input ({"type", "spec"} or {"test": {...}}).
fn test_of(v: &Value) -> Result<(String, Value)> {
    let t = if v.get("test").is_some() { &v["test"] } else { v };
    let kind = t["type"].as_str().ok_or_else(|| bad("the input names no test type (\"type\")"))?;
    let spec = t.get("spec").filter(|s| s.is_object()).ok_or_else(|| bad("the input has no test spec (\"spec\")"))?;
    Ok((kind.to_string(), spec.clone()))
}

/// A spec's duration field in seconds (at most MAX_TEST_S), or what is wrong with it.
fn spec_seconds(spec: &Value, field: &str) -> Result<Option<f64>> {
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match iso_seconds(s) {
            Some(x) if x.is_finite() && x <= MAX_TEST_S => Ok(Some(x)),
            Some(_) => Err(bad(format!("{field} {s:?}: at most a day (PT{MAX_TEST_S:.0}S)"))),
            None => Err(bad(format!("{field} {s:?} is not an ISO 8601 duration (PT30S)"))),
        },
        Some(other) => Err(bad(format!("{field} {other} is not an ISO 8601 duration (PT30S)"))),
    }
}

/// A spec's whole-number field, within what the tool passes on.
fn spec_u64(spec: &Value, field: &str) -> Result<Option<u64>> {
    let most = match field {
        "count" => MAX_RTT_COUNT,
        "parallel" => u64::from(gridperf_core::wire::MAX_STREAMS),
        _ => u64::from(u32::MAX),
    };
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= most => Ok(Some(n)),
            Some(n) => Err(bad(format!("{field} {n}: at most {most}"))),
            None => Err(bad(format!("{field} {v} is not a whole number"))),
        },
    }
}

fn spec_bool(spec: &Value, field: &str) -> bool {
    spec.get(field).and_then(Value::as_bool).unwrap_or(false)
}

/// Why gridperf cannot run this test (empty: it can).
pub fn reasons(kind: &str, spec: &Value) -> Vec<String> {
    if !TESTS.contains(&kind) {
        return vec![format!("gridperf does not run {kind} tests (it runs {})", TESTS.join(", "))];
    }
    let mut out = Vec::new();
    if let Some(obj) = spec.as_object() {
        for field in obj.keys() {
            if !supported(kind).contains(&field.as_str()) {
                out.push(match why_not(kind, field) {
                    Some(why) => format!("gridperf does not support {field}: {why}"),
                    None => format!("gridperf does not support {field}"),
                });
            }
        }
    }
    if spec.get("dest").and_then(Value::as_str).is_none() {
        out.push("the spec names no dest".into());
    }
    if kind == "disk-to-disk" && spec.get("source").and_then(Value::as_str).is_none() {
        out.push("the spec names no source".into());
    }
    if kind == "disk-to-disk" {
        if let Some(src) = spec.get("source").and_then(Value::as_str) {
            if let Err(e) = copy_source(src) {
                out.push(e.message);
            }
        }
        if let (Some(dest), Ok(c)) = (spec.get("dest").and_then(Value::as_str), conf()) {
            if let Err(e) = dest_beneath(&c.dest_root, dest) {
                out.push(e);
            }
        }
    }
    for f in ["duration", "interval", "omit", "timeout"] {
        if let Err(e) = spec_seconds(spec, f) {
            out.push(e.message);
        }
    }
    for f in ["count", "parallel", "length", "window-size", "buffer-length", "bandwidth"] {
        if let Err(e) = spec_u64(spec, f) {
            out.push(e.message);
        }
    }
    if let Err(e) = duration_s(kind, spec) {
        out.push(e.message);
    }
    out
}

/// How long the test takes, end to end, in seconds: at most MAX_TEST_S
/// and the set-up (a longer one is refused, naming its field).
pub fn duration_s(kind: &str, spec: &Value) -> Result<f64> {
    let s = test_seconds(kind, spec)?;
    if !s.is_finite() || s > MAX_TEST_S + SETUP_S {
        return Err(bad(format!(
            "a {kind} test of {s:.0} s: this tool runs tests of at most a day (PT{MAX_TEST_S:.0}S)"
        )));
    }
    Ok(s)
}

fn test_seconds(kind: &str, spec: &Value) -> Result<f64> {
    Ok(match kind {
        "throughput" => {
            spec_seconds(spec, "duration")?.unwrap_or(DEFAULT_THROUGHPUT_S) + spec_seconds(spec, "omit")?.unwrap_or(0.0)
        }
        "rtt" => {
            let count = spec_u64(spec, "count")?.unwrap_or(DEFAULT_RTT_COUNT) as f64;
            // each exchange waits at most its timeout
            count * spec_seconds(spec, "timeout")?.unwrap_or(DEFAULT_RTT_TIMEOUT_S)
        }
        "disk-to-disk" => spec_seconds(spec, "duration")?.or(spec_seconds(spec, "timeout")?).unwrap_or(DEFAULT_COPY_S),
        other => return Err(bad(format!("gridperf does not run {other} tests"))),
    } + SETUP_S)
}

/// A disk-to-disk source gridperf can pull: HOST:PATH or gridperf://HOST[:PORT]/PATH.
fn copy_source(src: &str) -> Result<(String, Option<u16>)> {
    if let Some(rest) = src.strip_prefix("gridperf://") {
        let (hostport, path) =
            rest.split_once('/').ok_or_else(|| bad(format!("source {src}: give gridperf://HOST/PATH")))?;
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
                (h.to_string(), Some(p.parse::<u16>().map_err(|_| bad(format!("source {src}: port {p}?")))?))
            }
            _ => (hostport.to_string(), None),
        };
        if host.is_empty() || path.is_empty() {
            return Err(bad(format!("source {src}: give gridperf://HOST/PATH")));
        }
        return Ok((format!("{host}:{path}"), port));
    }
    if src.contains("://") {
        return Err(bad(format!(
            "source {src}: gridperf copies from a `gridperf serve --root` agent: give gridperf://HOST[:PORT]/PATH or \
             HOST:PATH (the globus and curl tools serve other URLs)"
        )));
    }
    match src.split_once(':') {
        Some((h, p)) if !h.is_empty() && !p.is_empty() => Ok((src.to_string(), None)),
        _ => Err(bad(format!("source {src}: give gridperf://HOST[:PORT]/PATH or HOST:PATH"))),
    }
}

/// The gridperf command line a test runs.
fn command_of(kind: &str, spec: &Value, port: u16) -> Result<Vec<String>> {
    let dest = spec["dest"].as_str().ok_or_else(|| bad("the spec names no dest"))?.to_string();
    let mut a: Vec<String> = Vec::new();
    let mut push = |x: &str| a.push(x.to_string());
    match kind {
        "throughput" => {
            push("stream");
            push(&dest);
            push("-t");
            push(&spec_seconds(spec, "duration")?.unwrap_or(DEFAULT_THROUGHPUT_S).to_string());
            if let Some(i) = spec_seconds(spec, "interval")? {
                push("-i");
                push(&i.to_string());
            }
            if let Some(o) = spec_seconds(spec, "omit")? {
                push("-O");
                push(&o.to_string());
            }
            for (field, flag) in [("parallel", "-P"), ("window-size", "-w"), ("buffer-length", "-l")] {
                if let Some(n) = spec_u64(spec, field)? {
                    push(flag);
                    push(&n.to_string());
                }
            }
            if let Some(c) = spec.get("congestion").and_then(Value::as_str) {
                push("-C");
                push(c);
            }
            if spec_bool(spec, "reverse") {
                push("-R");
            }
            if spec_bool(spec, "zero-copy") {
                push("-Z");
            }
            if spec_bool(spec, "udp") {
                push("-u");
                if let Some(b) = spec_u64(spec, "bandwidth")? {
                    push("-b");
                    push(&b.to_string());
                }
            }
            push("-p");
            push(&spec_u64(spec, "single-ended-port")?.unwrap_or(port.into()).to_string());
        }
        "rtt" => {
            push("rtt");
            push(&dest);
            push("--proto");
            push("udp");
            push("--sizes");
            push(&spec_u64(spec, "length")?.unwrap_or(DEFAULT_RTT_LENGTH).to_string());
            push("-n");
            push(&spec_u64(spec, "count")?.unwrap_or(DEFAULT_RTT_COUNT).to_string());
            push("--warmup");
            push("0");
            push("--samples");
            push("--timeout");
            push(&format!("{}s", spec_seconds(spec, "timeout")?.unwrap_or(DEFAULT_RTT_TIMEOUT_S)));
            push("-p");
            push(&port.to_string());
        }
        "disk-to-disk" => {
            // into the run's own directory (the caller's `dest` is where it is moved after)
            let (src, src_port) = copy_source(spec["source"].as_str().unwrap_or_default())?;
            push("copy");
            push(&src);
            push(&format!("{dest}/"));
            push("--port");
            push(&src_port.unwrap_or(port).to_string());
            if let Some(n) = spec_u64(spec, "parallel")? {
                push("-P");
                push(&n.to_string());
            }
        }
        other => return Err(bad(format!("gridperf does not run {other} tests"))),
    }
    match spec.get("ip-version").and_then(Value::as_u64) {
        Some(4) => a.push("-4".into()),
        Some(6) => a.push("-6".into()),
        _ => {}
    }
    a.extend(["--json".to_string(), "--no-store".to_string()]);
    Ok(a)
}

/// A failed run's result, in any test's schema.
fn failed(error: &str, diags: &str) -> Value {
    json!({ "schema": 1, "succeeded": false, "error": error, "diags": diags })
}

/// gridperf stream's JSON as the throughput test's result (the iperf3 tool's shape).
pub fn throughput_result(v: &Value, diags: &str) -> Value {
    let Some(run) = v["runs"].as_array().and_then(|r| r.first()) else {
        return failed("gridperf stream gave no run", diags);
    };
    let interval_s = v["spec"]["interval_ms"].as_f64().unwrap_or(1000.0) / 1000.0;
    let streams = run["streams"].as_array().cloned().unwrap_or_default();
    let n_int = streams.iter().filter_map(|s| s["receiver"]["intervals"].as_array().map(Vec::len)).max().unwrap_or(0);
    let end_of = |s: &Value, i: usize, len: usize| -> f64 {
        match (i + 1 == len, s["receiver"]["last_interval_ns"].as_f64()) {
            (true, Some(ns)) => i as f64 * interval_s + ns / 1e9,
            _ => (i + 1) as f64 * interval_s,
        }
    };
    let mut intervals = Vec::new();
    for i in 0..n_int {
        let mut per = Vec::new();
        let (mut bytes, mut end) = (0.0, (i + 1) as f64 * interval_s);
        for s in &streams {
            let ints = s["receiver"]["intervals"].as_array().cloned().unwrap_or_default();
            let Some(b) = ints.get(i).and_then(Value::as_f64) else { continue };
            let e = end_of(s, i, ints.len());
            let secs = (e - i as f64 * interval_s).max(1e-9);
            per.push(json!({
                "stream-id": s["index"], "start": i as f64 * interval_s, "end": e,
                "throughput-bytes": b, "throughput-bits": b * 8.0 / secs, "omitted": false,
            }));
            bytes += b;
            end = e;
        }
        let secs = (end - i as f64 * interval_s).max(1e-9);
        intervals.push(json!({
            "streams": per,
            "summary": { "start": i as f64 * interval_s, "end": end, "throughput-bytes": bytes,
                         "throughput-bits": bytes * 8.0 / secs, "omitted": false },
        }));
    }
    let mut sum_streams = Vec::new();
    let (mut bytes, mut retrans, mut secs) = (0.0, 0i64, 0.0f64);
    for s in &streams {
        let b = s["receiver"]["bytes"].as_f64().unwrap_or(0.0);
        let bps = s["throughput_bps"].as_f64().unwrap_or(0.0);
        let t = if bps > 0.0 { b * 8.0 / bps } else { 0.0 };
        let mut o =
            json!({ "stream-id": s["index"], "start": 0.0, "end": t, "throughput-bytes": b, "throughput-bits": bps });
        if let Some(r) = s["retransmits"].as_i64() {
            o["retransmits"] = json!(r);
            retrans += r;
        }
        // the sender's smoothed RTT as the stream ended, in microseconds as iperf3 gives it
        if let Some(rtt) = s["timeline"].as_array().and_then(|t| t.last()).and_then(|t| t["srtt_us"].as_f64()) {
            o["rtt"] = json!(rtt);
        }
        if let Some(u) = s["receiver"]["udp"].as_object() {
            let distinct = u.get("distinct").and_then(Value::as_i64).unwrap_or(0);
            let max_seq = u.get("max_seq").and_then(Value::as_i64).unwrap_or(-1);
            o["sent"] = json!(max_seq + 1);
            o["lost"] = json!((max_seq + 1 - distinct).max(0));
            if let Some(j) = u.get("jitter_ns").and_then(Value::as_f64) {
                o["jitter"] = json!(j / 1e6);
            }
        }
        bytes += b;
        secs = secs.max(t);
        sum_streams.push(o);
    }
    // gridperf's figure is what the receivers got (after --omit), per second
    let total_bps = run["up_bps"].as_f64().or(run["down_bps"].as_f64()).unwrap_or(0.0);
    let mut summary = json!({ "start": 0.0, "end": secs, "throughput-bytes": bytes, "throughput-bits": total_bps,
                              "receiver-throughput-bits": total_bps });
    if streams.iter().any(|s| s["retransmits"].is_i64()) {
        summary["retransmits"] = json!(retrans);
    }
    let mut out = json!({
        "schema": 1, "succeeded": true, "diags": diags,
        "intervals": intervals,
        "summary": { "streams": sum_streams, "summary": summary },
    });
    if let Some(mss) = streams.first().and_then(|s| s["sender"]["socket"]["mss"].as_i64()) {
        out["mss"] = json!(mss);
    }
    if let Some(w) = v["spec"]["window"].as_i64() {
        out["requested-tcp-window-size"] = json!(w);
    }
    out
}

/// gridperf rtt's JSON (one UDP point, with its samples) as the rtt test's result.
pub fn rtt_result(v: &Value, diags: &str) -> Value {
    let Some(p) = v["points"].as_array().and_then(|p| p.first()) else {
        return failed("gridperf rtt gave no point", diags);
    };
    let samples: Vec<f64> =
        p["samples_ns"].as_array().map(|s| s.iter().filter_map(Value::as_f64).collect()).unwrap_or_default();
    let length = p["size_bytes"].as_u64().unwrap_or(0);
    let sent = p["sent"].as_u64().unwrap_or(samples.len() as u64);
    let lost = p["lost"].as_u64().unwrap_or(0);
    let received = samples.len() as u64;
    // each exchange's round trip, in the order taken; a lost one is not known by number
    let trips: Vec<Value> = samples.iter().map(|ns| json!({ "length": length, "rtt": iso(ns / 1e9) })).collect();
    let mut out = json!({
        "schema": 1, "succeeded": true, "diags": diags,
        "roundtrips": trips, "received": received, "lost": lost,
        "loss": if sent > 0 { lost as f64 / sent as f64 } else { 0.0 },
    });
    if sent > 0 {
        out["sent"] = json!(sent);
    }
    if let Some(s) = p["summary"].as_object() {
        for (from, to) in [("min_ns", "min"), ("max_ns", "max"), ("mean_ns", "mean"), ("stddev_ns", "stddev")] {
            if let Some(ns) = s.get(from).and_then(Value::as_f64) {
                out[to] = json!(iso(ns / 1e9));
            }
        }
    }
    out
}

/// gridperf copy's JSON as the disk-to-disk test's result.
pub fn copy_result(v: &Value, wall_s: f64, diags: &str) -> Value {
    let errors: Vec<String> = v["files"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|f| f["error"].as_str().map(|e| format!("{}: {e}", f["path"].as_str().unwrap_or("?"))))
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({
        "schema": 1, "succeeded": errors.is_empty(), "diags": diags,
        "time": iso(wall_s),
        "bytes-sent": v["bytes_moved"].as_f64().unwrap_or(0.0),
    });
    if let Some(t) = v["throughput_bps"].as_f64() {
        out["throughput"] = json!(t);
    }
    if !errors.is_empty() {
        out["error"] = json!(errors.join("; "));
    }
    out
}

/// A disk-to-disk test's own directory beneath the tool's dest-root: made
/// 0700 for this run alone (the dest-root too, if missing; one others may
/// write into, or a link, is refused). The copy lands here and nowhere else.
fn run_dir(root: &std::path::Path) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let made = std::fs::DirBuilder::new().mode(0o700).recursive(true).create(root);
    made.map_err(|e| bad(format!("the tool's dest-root {}: {e}", root.display())))?;
    let m = std::fs::symlink_metadata(root).map_err(|e| bad(format!("dest-root {}: {e}", root.display())))?;
    if !m.is_dir() || m.mode() & 0o022 != 0 || m.uid() != gridperf_sys::euid() {
        return Err(bad(format!(
            "the tool's dest-root {} must be a directory of this account's that others cannot write into",
            root.display()
        )));
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = root.join(format!(".gridperf-run-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| bad(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// Where a disk-to-disk test's copy ended: kept at `dest` (cleanup false:
/// moved there only if nothing is there yet) or removed with the run's
/// directory, which held nothing else.
fn settle_copy(run: &std::path::Path, dest: &std::path::Path, keep: bool) -> std::result::Result<(), String> {
    let mut kept = Ok(());
    if keep {
        let copied = std::fs::read_dir(run).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| e.path());
        kept = match copied {
            None => Err("the copy left nothing to keep".to_string()),
            Some(from) => gridperf_sys::rename_noreplace(&from, dest).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    format!("dest {} exists: this tool replaces nothing; the copy was removed", dest.display())
                } else {
                    format!("moving the copy to {}: {e}", dest.display())
                }
            }),
        };
    }
    let _ = std::fs::remove_dir_all(run);
    kept
}

/// The `run` method: the measurement, as participant `participant`.
fn run_test(v: &Value) -> Result<Value> {
    let (kind, spec) = test_of(v)?;
    let reasons = reasons(&kind, &spec);
    if !reasons.is_empty() {
        return Err(bad(reasons.join("; ")));
    }
    let participant = v["participant"].as_u64().ok_or_else(|| bad("the input names no participant"))?;
    if participant > 0 {
        // the destination's side: its `gridperf serve` agent serves the test
        return Ok(json!({ "schema": 1, "succeeded": true, "diags":
            "participant 1: the destination's `gridperf serve` agent serves the test; participant 0 measures",
            "intervals": [], "summary": { "streams": [], "summary": {} } }));
    }
    // the other end's agent port, as its participant data gave it (the
    // iperf3 tool's server_port), else this host's configuration's
    let port = match v["participant-data"].get(1).and_then(|d| d.get("agent-port")).and_then(Value::as_u64) {
        Some(p) => u16::try_from(p).map_err(|_| bad(format!("participant 1's agent-port {p} is not a port")))?,
        None => agent_port()?,
    };
    // disk-to-disk: the copy goes into a directory of this run's own, beneath the tool's dest-root
    let mut spec = spec;
    let mut copy_to = None;
    if kind == "disk-to-disk" {
        let root = conf()?.dest_root;
        let dest = dest_beneath(&root, spec["dest"].as_str().unwrap_or_default()).map_err(bad)?;
        let run = run_dir(&root)?;
        spec["dest"] = json!(run.to_string_lossy());
        copy_to = Some((run, dest));
    }
    let args = command_of(&kind, &spec, port)?;
    let limit = Duration::try_from_secs_f64(duration_s(&kind, &spec)?).map_err(|e| bad(e.to_string()))?;
    let started = Instant::now();
    let (code, out, err) = super::run_self_bounded(&args, limit)?;
    let wall = started.elapsed().as_secs_f64();
    let diags = format!("gridperf {}\n{}", args.join(" "), err.trim());

    let parsed: Option<Value> = serde_json::from_str(&out).ok();
    let result = match (&kind[..], parsed) {
        ("throughput", Some(p)) if code == Some(0) => throughput_result(&p, &diags),
        ("rtt", Some(p)) if code == Some(0) => rtt_result(&p, &diags),
        ("disk-to-disk", Some(p)) if code == Some(0) || code == Some(4) => {
            let mut r = copy_result(&p, wall, &diags);
            // the test moves data; the data is not kept (as the curl and
            // globus tools do) unless cleanup is false
            let keep = spec.get("cleanup").and_then(Value::as_bool) == Some(false) && code == Some(0);
            if let Some((run, dest)) = copy_to.take() {
                if let Err(e) = settle_copy(&run, &dest, keep) {
                    r["succeeded"] = json!(false);
                    r["error"] = json!(e);
                }
            }
            r
        }
        (kind, _) => {
            let why = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("gridperf failed").trim().to_string();
            let mut r = failed(&why, &diags);
            // what the test's schema requires and a failure still knows:
            // how long it took, and that nothing was measured (an rtt's
            // loss is not known, and is not made up)
            match kind {
                "disk-to-disk" => r["time"] = json!(iso(wall)),
                "throughput" => {
                    r["intervals"] = json!([]);
                    r["summary"] = json!({ "streams": [], "summary": {} });
                }
                _ => r["roundtrips"] = json!([]),
            }
            r
        }
    };
    if let Some((run, _)) = copy_to {
        // a copy that failed: its directory does not outlive the run
        let _ = std::fs::remove_dir_all(run);
    }
    Ok(result)
}

/// The `merged-results` method: participant 0 measured; the others add their diagnostics.
fn merged(v: &Value) -> Result<Value> {
    let results = v["results"].as_array().ok_or_else(|| bad("the input has no results (\"results\")"))?;
    let first = results.first().filter(|r| r.is_object()).ok_or_else(|| bad("the results are empty"))?;
    let mut out = first.clone();
    let diags: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r["diags"].as_str().map(|d| format!("Participant {i}:\n{d}")))
        .collect();
    out["diags"] = json!(diags.join("\n"));
    Ok(out)
}

/// What `gridperf pscheduler` does, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub method: Method,
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let result = match o.method {
        Method::Enumerate => json!({
            "schema": 1,
            "name": "gridperf",
            "description": "Measure throughput (gridperf stream), round-trip time (gridperf rtt) and verified \
                            disk-to-disk copies (gridperf copy) against gridperf serve agents",
            "version": env!("CARGO_PKG_VERSION"),
            "tests": TESTS,
            "preference": 0,
            "maintainer": { "name": "gridperf", "email": "gridperf@example.invalid", "href": "https://example.invalid/gridperf" },
        }),
        Method::CanRun => {
            let v = input()?;
            match test_of(&v) {
                Ok((kind, spec)) => {
                    let r = reasons(&kind, &spec);
                    if r.is_empty() {
                        json!({ "can-run": true })
                    } else {
                        json!({ "can-run": false, "reasons": r })
                    }
                }
                Err(e) => json!({ "can-run": false, "reasons": [e.message] }),
            }
        }
        Method::Duration => {
            let v = input()?;
            let (kind, spec) = test_of(&v)?;
            json!({ "duration": iso(duration_s(&kind, &spec)?.ceil()) })
        }
        Method::ParticipantData => {
            let v = input()?;
            let p = v["participant"].as_u64().ok_or_else(|| bad("the input names no participant"))?;
            json!({ "schema": 1, "participant": p, "gridperf-version": env!("CARGO_PKG_VERSION"),
                    "agent-port": agent_port()? })
        }
        Method::Run => run_test(&input()?)?,
        Method::MergedResults => merged(&input()?)?,
    };
    out.print(&format!("{result}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_gridperf_cannot_run_says_why() {
        let r = reasons("rtt", &json!({ "dest": "h", "ttl": 3, "interval": "PT1S" }));
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r.iter().any(|m| m.contains("interval") && m.contains("ping-pong")), "{r:?}");
        assert!(reasons("latency", &json!({}))[0].contains("does not run latency"));
        assert!(reasons("throughput", &json!({ "dest": "h", "duration": "30s" }))[0].contains("ISO 8601"));
        let r = reasons("disk-to-disk", &json!({ "source": "ftp://h/x", "dest": "/tmp/x" }));
        assert!(r[0].contains("globus and curl"), "{r:?}");
        assert!(reasons("throughput", &json!({ "dest": "h", "parallel": 4, "duration": "PT5S" })).is_empty());
    }

    #[test]
    fn copy_sources_take_both_forms() {
        assert_eq!(copy_source("gridperf://dtn1:6000/data/a").ok(), Some(("dtn1:data/a".into(), Some(6000))));
        assert_eq!(copy_source("dtn1:data/a").ok(), Some(("dtn1:data/a".into(), None)));
        assert!(copy_source("/data/a").is_err());
    }
}
