//! The store's write throughput, as a survey writes: one run, then each
//! point in a transaction of its own (its figures as JSON, 1000 samples).
//!
//!   cargo bench -p gridperf --bench store_write -- DB POINTS
//!
//! DB is a SQLite file or a postgres:// DSN (bench/archive.sh starts a
//! private PostgreSQL cluster and runs this against both). Prints one JSON
//! line: {"db", "points", "seconds", "points_per_s"}.

use gridperf::store::{NewRun, PointRow, Store};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let (Some(db), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: store_write DB POINTS");
        std::process::exit(2);
    };
    let store = Store::open(std::path::Path::new(db)).unwrap_or_else(|e| {
        eprintln!("store_write: {e}");
        std::process::exit(1)
    });
    let run = store
        .begin_run(&NewRun {
            survey_id: None,
            sweep_id: None,
            kind: gridperf_core::model::Measure::Rtt,
            network: "bench",
            target: "bench",
            settings: serde_json::json!({ "bench": "store_write" }),
            lab_profile: None,
            mtu: None,
        })
        .expect("run");
    let samples: Vec<u64> = (0..1000u64).map(|i| 15_000 + (i * 7919) % 3000).collect();
    let started = Instant::now();
    for i in 0..n {
        let median = 15_000.0 + (i % 97) as f64;
        let p = PointRow {
            proto: ["tcp", "udp", "sendfile"][(i % 3) as usize].into(),
            size: 1 + i,
            setting: String::new(),
            median_ns: Some(median),
            q1_ns: Some(median * 0.98),
            q3_ns: Some(median * 1.03),
            figures: serde_json::json!({ "proto": "tcp", "size_bytes": 1 + i, "summary": { "median_ns": median, "count": 1000 } }),
            samples: Some(samples.clone()),
        };
        store.add_point(run, &p).expect("point");
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({ "db": store.shown(), "points": n, "seconds": secs, "points_per_s": n as f64 / secs })
    );
}
