//! The agent's own counters, for `gridperf serve --metrics` (Prometheus'
//! text format): tests served by kind and outcome, tests refused by
//! reason, tests running, data bytes moved, and each client's last test
//! of each kind.
//!
//! Bytes are what the agent's end of the data connections moved: a
//! stream's bytes sent or received, a copy's verified blocks, and what an
//! rtt or transfer test's echoes brought in (the replies are the same
//! bytes again, and are not counted twice).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Clients whose last tests are kept: beyond it the one seen longest ago
/// is forgotten (a scrape's size stays bounded whoever connects).
pub const MAX_CLIENTS: usize = 256;

/// Why the agent turned a client or a test away (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Not among serve --allow's addresses.
    Address,
    /// Its address had --max-per-address control connections open.
    PerAddress,
    /// The agent had --max-connections open.
    Connections,
    /// No key, or a wrong one (serve --auth).
    Auth,
    /// Another protocol version.
    Version,
    /// A request that is malformed or beyond what any agent takes.
    BadRequest,
    /// Beyond this site's --max-* limits.
    Limits,
    /// More tests in a minute than --max-tests-per-minute.
    Rate,
    /// Something this agent does not do (busy-polling off, an unknown test).
    Unsupported,
    /// Every test slot taken (and no room, or no time, to wait).
    Busy,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Address => "address",
            Refusal::PerAddress => "per_address",
            Refusal::Connections => "connections",
            Refusal::Auth => "auth",
            Refusal::Version => "version",
            Refusal::BadRequest => "bad_request",
            Refusal::Limits => "limits",
            Refusal::Rate => "rate",
            Refusal::Unsupported => "unsupported",
            Refusal::Busy => "busy",
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Last {
    seen: u64,
    unix: f64,
    seconds: f64,
    bytes: u64,
    ok: bool,
}

#[derive(Debug, Default)]
struct Inner {
    tests: BTreeMap<(&'static str, &'static str), u64>,
    refused: BTreeMap<Refusal, u64>,
    last: BTreeMap<(String, &'static str), Last>,
    clock: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    running: AtomicI64,
    sent: AtomicU64,
    received: AtomicU64,
}

thread_local! {
    /// The bytes the test this thread serves moved so far.
    static SESSION_BYTES: Cell<u64> = const { Cell::new(0) };
}

impl Metrics {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn refused(&self, why: Refusal) {
        *self.inner().refused.entry(why).or_default() += 1;
    }

    /// Data the agent's end moved, counted on the session's thread.
    pub fn moved(&self, sent: u64, received: u64) {
        self.sent.fetch_add(sent, Ordering::Relaxed);
        self.received.fetch_add(received, Ordering::Relaxed);
        SESSION_BYTES.with(|b| b.set(b.get() + sent + received));
    }

    /// A test begins on this thread: it runs until [`Metrics::end`].
    pub fn begin(&self) {
        self.running.fetch_add(1, Ordering::SeqCst);
        SESSION_BYTES.with(|b| b.set(0));
    }

    /// The test this thread served ended: `ok` or not, after `seconds`.
    pub fn end(&self, client: std::net::IpAddr, kind: &'static str, ok: bool, seconds: f64) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        let bytes = SESSION_BYTES.with(Cell::take);
        let mut i = self.inner();
        *i.tests.entry((kind, if ok { "done" } else { "failed" })).or_default() += 1;
        i.clock += 1;
        let seen = i.clock;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        i.last.insert((client.to_string(), kind), Last { seen, unix, seconds, bytes, ok });
        let clients: std::collections::BTreeSet<&String> = i.last.keys().map(|(c, _)| c).collect();
        if clients.len() > MAX_CLIENTS {
            // forget the client seen longest ago, every kind of it
            let oldest = i.last.iter().min_by_key(|(_, l)| l.seen).map(|((c, _), _)| c.clone());
            if let Some(c) = oldest {
                i.last.retain(|(k, _), _| *k != c);
            }
        }
    }

    /// The Prometheus text exposition of everything counted.
    pub fn render(&self, max_tests: usize) -> String {
        let i = self.inner();
        let mut o = String::new();
        let one = |v: f64| vec![(String::new(), v)];
        family(
            &mut o,
            "gridperf_agent_tests_total",
            "counter",
            "Tests the agent served, by kind and outcome.",
            i.tests
                .iter()
                .map(|((kind, outcome), n)| (format!("{{kind=\"{kind}\",outcome=\"{outcome}\"}}"), *n as f64)),
        );
        family(
            &mut o,
            "gridperf_agent_refused_total",
            "counter",
            "Clients and tests the agent turned away, by reason.",
            i.refused.iter().map(|(why, n)| (format!("{{reason=\"{}\"}}", why.label()), *n as f64)),
        );
        family(
            &mut o,
            "gridperf_agent_tests_running",
            "gauge",
            "Tests running now.",
            one(self.running.load(Ordering::SeqCst) as f64),
        );
        family(
            &mut o,
            "gridperf_agent_max_tests",
            "gauge",
            "Tests that may run at once (serve --max-tests).",
            one(max_tests as f64),
        );
        family(
            &mut o,
            "gridperf_agent_data_bytes_total",
            "counter",
            "Bytes the agent's end of the data connections moved.",
            [
                ("{direction=\"sent\"}".to_string(), self.sent.load(Ordering::Relaxed) as f64),
                ("{direction=\"received\"}".to_string(), self.received.load(Ordering::Relaxed) as f64),
            ],
        );
        type Last_ = (&'static str, &'static str, fn(&Last) -> f64);
        let lasts: [Last_; 4] = [
            (
                "gridperf_agent_last_test_timestamp_seconds",
                "When each client's last test of each kind ended (Unix time).",
                |l| l.unix,
            ),
            ("gridperf_agent_last_test_duration_seconds", "How long each client's last test of each kind took.", |l| {
                l.seconds
            }),
            (
                "gridperf_agent_last_test_bytes",
                "The bytes each client's last test of each kind moved at the agent.",
                |l| l.bytes as f64,
            ),
            (
                "gridperf_agent_last_test_success",
                "Whether each client's last test of each kind completed (1) or failed (0).",
                |l| f64::from(u8::from(l.ok)),
            ),
        ];
        for (name, help, value) in lasts {
            let samples =
                i.last.iter().map(|((client, kind), l)| (format!("{{client=\"{client}\",kind=\"{kind}\"}}"), value(l)));
            family(&mut o, name, "gauge", help, samples);
        }
        o
    }
}

/// One metric family in Prometheus' text format: its HELP and TYPE lines,
/// then a line per sample (labels as `{name="value",...}`, or empty). The
/// agent's metrics and the exporter's probes are written through it.
pub fn family(o: &mut String, name: &str, kind: &str, help: &str, samples: impl IntoIterator<Item = (String, f64)>) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(o, "{name}{labels} {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_as_prometheus_reads_them() {
        let m = Metrics::default();
        m.refused(Refusal::Auth);
        m.refused(Refusal::Auth);
        let ip: std::net::IpAddr = "192.0.2.1".parse().expect("ip");
        m.begin();
        m.moved(0, 1000);
        m.end(ip, "stream", true, 2.5);
        let t = m.render(1);
        assert!(t.contains("gridperf_agent_refused_total{reason=\"auth\"} 2\n"), "{t}");
        assert!(t.contains("gridperf_agent_tests_total{kind=\"stream\",outcome=\"done\"} 1\n"), "{t}");
        assert!(t.contains("gridperf_agent_last_test_bytes{client=\"192.0.2.1\",kind=\"stream\"} 1000\n"), "{t}");
        assert!(t.contains("gridperf_agent_tests_running 0\n"), "{t}");
        assert!(t.contains("gridperf_agent_data_bytes_total{direction=\"received\"} 1000\n"), "{t}");
    }

    #[test]
    fn clients_beyond_the_bound_are_forgotten_oldest_first() {
        let m = Metrics::default();
        for k in 0..(MAX_CLIENTS as u32 + 10) {
            m.begin();
            m.end(std::net::IpAddr::from(k.to_be_bytes()), "rtt", true, 0.1);
        }
        let t = m.render(1);
        assert_eq!(t.matches("gridperf_agent_last_test_success{").count(), MAX_CLIENTS);
        assert!(!t.contains("client=\"0.0.0.0\""), "the first client is still there");
    }
}
