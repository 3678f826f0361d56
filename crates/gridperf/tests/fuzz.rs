//! Fuzzing what the binary crate reads from the network or a scheduler, as
//! gridperf-core's fuzz tests do (its `fuzzing` harness, bounded in time by
//! FUZZ_SECONDS, default 3): the metrics port's HTTP head and query, and
//! the JSON pScheduler hands the tool's methods. Corpus in `fuzz/corpus/`.

use gridperf::commands::{exporter, pscheduler};
use gridperf_core::fuzzing;
use std::path::Path;

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn metrics_http_heads() {
    fuzzing::fuzz(here(), "http-head", |b| {
        if let Ok(r) = exporter::parse_head(b) {
            let _ = exporter::scrape_timeout(&r.headers);
            // lossy UTF-8: an invalid byte becomes U+FFFD, 3 bytes
            assert!(r.path.len() <= 3 * b.len());
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
    write("http-head", "metrics", b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
    write(
        "http-head",
        "probe",
        b"GET /probe?target=10.0.0.1%3A5301&module=rtt HTTP/1.1\r\nX-Prometheus-Scrape-Timeout-Seconds: 9.5\r\n\r\n",
    );
    write(
        "http-head",
        "big-timeout",
        b"GET /probe?module=x HTTP/1.1\r\nX-Prometheus-Scrape-Timeout-Seconds: 2e19\r\n\r\n",
    );
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
