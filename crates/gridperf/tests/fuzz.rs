//! Fuzzing what the binary crate reads from the network or a scheduler, as
//! gridperf-core's fuzz tests do (its `fuzzing` harness, bounded in time by
//! FUZZ_SECONDS, default 3): the metrics port's probe query and scrape-timeout header, and
//! the JSON pScheduler hands the tool's methods. Corpus in `fuzz/corpus/`.

use gridperf::commands::{exporter, pscheduler};
use gridperf_core::fuzzing;
use std::path::Path;

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What the metrics port still reads by hand once hyper has parsed the
/// request: the probe's query (its target checked against the site's
/// blocks and names) and Prometheus' scrape-timeout header. Input: the
/// query, a newline, the header's value.
#[test]
fn metrics_queries_and_headers() {
    fuzzing::fuzz(here(), "http-head", |b| {
        let cfg = exporter::ProbeConfig {
            modules: Default::default(),
            targets: vec!["10.0.0.0/8".into(), "fd00::/8".into(), "far.example:5301".into()],
        };
        let (query, header) = match b.iter().position(|&c| c == b'\n') {
            Some(k) => (&b[..k], &b[k + 1..]),
            None => (b, &b[..0]),
        };
        for (k, v) in form_urlencoded::parse(query) {
            if k == "target" {
                let _ = cfg.allows(&v);
            }
        }
        let h = vec![("x-prometheus-scrape-timeout-seconds".to_string(), String::from_utf8_lossy(header).into_owned())];
        if let Some(t) = exporter::scrape_timeout(&h) {
            assert!(t > std::time::Duration::ZERO && t <= exporter::MAX_SCRAPE_TIMEOUT, "{t:?}");
        }
    });
}

#[test]
fn pscheduler_json() {
    fuzzing::fuzz(here(), "pscheduler", |b| {
        let Ok(v) = pscheduler::parse_input(&String::from_utf8_lossy(b)) else { return };
        let t = if v.get("test").is_some() { &v["test"] } else { &v };
        let kind = t["type"].as_str().unwrap_or("throughput");
        let spec = t.get("spec").cloned().unwrap_or_default();
        let _ = pscheduler::reasons(kind, &spec);
        let _ = pscheduler::duration_s(kind, &spec);
        // what a run's gridperf printed, as each test's result
        let _ = pscheduler::throughput_result(&v, "");
        let _ = pscheduler::rtt_result(&v, "");
        let _ = pscheduler::copy_result(&v, 1.0, "");
    });
}

/// Writes the seed corpus (by hand: `cargo test -p gridperf --test fuzz write_the_corpus -- --ignored`).
#[test]
#[ignore]
fn write_the_corpus() {
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let d = fuzzing::corpus_dir(here(), target);
        std::fs::create_dir_all(&d).expect("corpus dir");
        std::fs::write(d.join(name), bytes).expect("seed");
    };
    write("http-head", "v4", b"target=10.0.0.1%3A5301&module=rtt\n9.5");
    write("http-head", "v6", b"target=%5Bfd00%3A%3A1%5D%3A5301&module=rtt\n10");
    write("http-head", "name", b"target=far.example%3A5301\n2e19");
    for (name, doc) in [
        (
            "throughput",
            r#"{"participant": 0, "participant-data": [{}, {"agent-port": 5301}], "test": {"type": "throughput", "spec": {"schema": 1, "dest": "10.0.0.2", "duration": "PT10S", "parallel": 4, "interval": "PT1S"}}}"#,
        ),
        ("rtt", r#"{"type": "rtt", "spec": {"dest": "h", "count": 10, "length": 64, "timeout": "PT1S"}}"#),
        (
            "disk",
            r#"{"type": "disk-to-disk", "spec": {"source": "gridperf://h:5301/a.dat", "dest": "copy.dat", "cleanup": false, "parallel": 2}}"#,
        ),
        ("huge", r#"{"type": "throughput", "spec": {"dest": "h", "duration": "PT100000000000000000000S"}}"#),
        (
            "stream-result",
            r#"{"runs": [{"up_bps": 1e9, "streams": [{"index": 0, "retransmits": 3, "timeline": [{"srtt_us": 200}]}]}], "points": [{"summary": {"median_ns": 1000}}], "files": [{"path": "a", "error": "x"}], "bytes_moved": 5}"#,
        ),
    ] {
        write("pscheduler", name, doc.as_bytes());
    }
}
