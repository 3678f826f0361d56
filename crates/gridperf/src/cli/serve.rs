//! `gridperf serve`'s arguments, into the agent's configuration.

use super::duration;
use crate::agent::{AgentConfig, Faults};
use crate::commands::exporter::{Checked, ProbeConfig, MAX_PROBE};
use crate::error::{Error, Result};
use clap::Args;
use gridperf_core::wire::DEFAULT_PORT;
use std::net::SocketAddr;
use std::time::Duration;

/// The settings a `serve --config FILE` may hold: serve's own flags.
const CONFIG_KEYS: &[(&str, bool)] = &[
    ("bind", false),
    ("port", false),
    ("max-tests", false),
    ("queue-len", false),
    ("control-timeout", false),
    ("max-connections", false),
    ("max-per-address", false),
    ("allow-busy-poll", true),
    ("auth", false),
    ("allow", false),
    ("max-idle", false),
    ("max-duration", false),
    ("max-streams", false),
    ("max-rate", false),
    ("max-message", false),
    ("max-tests-per-minute", false),
    ("max-test-memory", false),
    ("partial-ttl", false),
];

/// `gridperf serve --config FILE`: the file's settings (`name = value`
/// per line, serve's flag names, `#` comments; `true`/`false` for a switch)
/// become flags placed before the command line's own, which win.
pub fn expand_config(args: Vec<std::ffi::OsString>) -> Result<Vec<std::ffi::OsString>> {
    let Some(serve) = args.iter().position(|a| a == "serve") else { return Ok(args) };
    let mut path = None;
    for (k, a) in args.iter().enumerate().skip(serve + 1) {
        let a = a.to_string_lossy();
        if a == "--config" {
            path = args.get(k + 1).map(std::path::PathBuf::from);
        } else if let Some(p) = a.strip_prefix("--config=") {
            path = Some(std::path::PathBuf::from(p));
        }
    }
    let Some(path) = path else { return Ok(args) };
    let what = |line: usize, e: String| Error::usage(format!("--config {} line {line}: {e}", path.display()));
    let text = std::fs::read_to_string(&path).map_err(|e| Error::usage(format!("--config {}: {e}", path.display())))?;
    let mut from_file: Vec<std::ffi::OsString> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').map(|(k, v)| (k.trim(), v.trim())).unwrap_or((line, "true"));
        let Some(&(key, switch)) = CONFIG_KEYS.iter().find(|(k, _)| *k == key) else {
            let valid: Vec<&str> = CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
            return Err(what(n + 1, format!("{key:?} is not a setting; valid are {}", valid.join(", "))));
        };
        match (switch, value) {
            (true, "true") => from_file.push(format!("--{key}").into()),
            (true, "false") => {}
            (true, v) => return Err(what(n + 1, format!("{key} = {v:?}: give true or false"))),
            (false, "") => return Err(what(n + 1, format!("{key} needs a value"))),
            (false, v) => {
                from_file.push(format!("--{key}").into());
                from_file.push(v.into());
            }
        }
    }
    let mut out = args[..=serve].to_vec();
    out.extend(from_file);
    out.extend_from_slice(&args[serve + 1..]);
    Ok(out)
}

#[derive(Args)]
pub struct ServeArgs {
    /// Read settings from FILE: `name = value` per line with serve's flag names (max-rate = 10G, allow =
    /// 10.0.0.0/8, allow-busy-poll = true); flags on the command line win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Address to listen on (repeat for several). The default [::] takes IPv4 and IPv6 clients.
    #[arg(long, value_name = "ADDR")]
    pub bind: Vec<std::net::IpAddr>,
    /// TCP port of the control channel.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Tests that may run side by side; a client beyond that is told "busy" (or waits, if it asked to with --queue).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub max_tests: usize,
    /// Clients that may wait for a free test slot.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub queue_len: usize,
    /// Control connections open at once; more are told "busy" at once.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_connections: usize,
    /// Control connections open at once from one client address: one address's silent connections cannot keep
    /// everyone else out.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_per_address: usize,
    /// Let clients ask the agent to busy-poll (rtt --busy-poll): it burns a CPU for the whole test.
    #[arg(long)]
    pub allow_busy_poll: bool,
    /// Serve only clients that prove they hold one of the keys in FILE (0600; lines `NAME HEX`, as
    /// `gridperf keygen` prints them). Without it anyone who can reach the agent may use it.
    #[arg(long, value_name = "FILE")]
    pub auth: Option<std::path::PathBuf>,
    /// Serve only clients from these address blocks (comma-separated: 10.0.0.0/8,2001:db8::/32); others are
    /// refused at once.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// The longest a client may keep the agent waiting on a test's next message, whatever it asks for.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub max_idle: String,
    /// The longest stream test this agent runs (omitted part included).
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub max_duration: String,
    /// Streams per direction a stream test may have here.
    #[arg(long, default_value_t = gridperf_core::wire::MAX_STREAMS, value_name = "N")]
    pub max_streams: u32,
    /// The most a stream test may send in all (its streams' paced or UDP rates summed), e.g. 10G; an unpaced TCP
    /// test is then refused.
    #[arg(long, value_name = "RATE")]
    pub max_rate: Option<String>,
    /// The largest message (rtt, transfer, fanout) or write (stream) a test may ask for, e.g. 1M.
    #[arg(long, value_name = "SIZE")]
    pub max_message: Option<String>,
    /// Tests one client address may start in a minute.
    #[arg(long, value_name = "N")]
    pub max_tests_per_minute: Option<u32>,
    /// The memory one test may make the agent hold (its buffers, the socket buffers it asks for, its
    /// timelines), e.g. 512M.
    #[arg(long, value_name = "SIZE")]
    pub max_test_memory: Option<String>,
    /// The directory copies read from and write into (gridperf copy HOST:PATH): every path a client names is
    /// resolved beneath it (no '..', no absolute path, no symbolic link out of it, no device). Without it the
    /// agent refuses every copy.
    #[arg(long, value_name = "DIR")]
    pub root: Option<std::path::PathBuf>,
    /// Partial files of copies that did not finish, untouched this long, are removed beneath --root (at the
    /// start, then hourly): a resume keeps what arrived until then. 0 keeps them for ever.
    #[arg(long, default_value = "7d", value_name = "DURATION", requires = "root")]
    pub partial_ttl: String,
    /// Copies may read beneath --root, never write.
    #[arg(long, requires = "root")]
    pub read_only: bool,
    /// Copies must be encrypted: a copy without --encrypt is refused (with --encrypt the data connections
    /// are sealed with AES-256-GCM under keys agreed by X25519, bound to the session's key with --auth).
    #[arg(long, requires = "root")]
    pub encrypt: bool,
    /// Exit after the first test.
    #[arg(long)]
    pub once: bool,
    /// How long a client may stay silent on the control channel before it is dropped.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub control_timeout: String,
    /// Test seam: receive but do not echo every N-th UDP datagram.
    #[arg(long, hide = true, value_name = "N")]
    pub fault_drop_udp: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (tests served and refused, running, bytes moved,
    /// each client's last test) and, with --probe-config, probes at /probe?target=HOST&module=NAME.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// The probe modules and the targets they may measure (JSON: {"modules": {"rtt": {"test": "rtt",
    /// "duration": "1s"}}, "targets": ["10.0.0.0/8", "dtn2.example"]}); at most --max-tests probes at once,
    /// each at most 10 s and cut to Prometheus' scrape timeout.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub probe_config: Option<std::path::PathBuf>,
}

impl TryFrom<ServeArgs> for crate::commands::serve::Opts {
    type Error = Error;
    fn try_from(mut a: ServeArgs) -> Result<Self> {
        let metrics = a.metrics.take();
        let probes = match a.probe_config.take() {
            Some(p) => Some(probe_config(&p)?),
            None => None,
        };
        Ok(crate::commands::serve::Opts { agent: AgentConfig::try_from(a)?, metrics, probes })
    }
}

impl TryFrom<ServeArgs> for AgentConfig {
    type Error = Error;
    fn try_from(a: ServeArgs) -> Result<AgentConfig> {
        let ips = if a.bind.is_empty() { vec![std::net::IpAddr::from([0u16; 8])] } else { a.bind };
        let auth = match &a.auth {
            Some(path) => Some(std::sync::Arc::new(authorized_keys(path)?)),
            None => None,
        };
        Ok(AgentConfig {
            bind: ips.into_iter().map(|ip| SocketAddr::new(ip, a.port)).collect(),
            max_tests: a.max_tests.max(1),
            queue_len: a.queue_len,
            once: a.once,
            max_connections: a.max_connections.max(1),
            max_per_address: a.max_per_address.max(1),
            allow_busy_poll: a.allow_busy_poll,
            auth,
            allow: a
                .allow
                .iter()
                .map(|c| c.parse().map_err(|e: String| Error::usage(format!("--allow {e}"))))
                .collect::<Result<_>>()?,
            max_idle: duration(&a.max_idle, "--max-idle")?,
            root: match &a.root {
                Some(r) => Some(
                    std::fs::canonicalize(r)
                        .ok()
                        .filter(|p| p.is_dir())
                        .ok_or_else(|| Error::usage(format!("--root {}: not a directory", r.display())))?,
                ),
                None => None,
            },
            read_only: a.read_only,
            encrypt: a.encrypt,
            partial_ttl: Some(super::seconds_or(&a.partial_ttl, "--partial-ttl")?).filter(|d| !d.is_zero()),
            limits: crate::agent::SiteLimits {
                max_duration: duration(&a.max_duration, "--max-duration")?,
                max_streams: a.max_streams.max(1),
                max_rate_bps: a.max_rate.as_deref().map(|r| super::rate(r, "--max-rate")).transpose()?,
                max_message: a
                    .max_message
                    .as_deref()
                    .map(|m| gridperf_core::units::parse_bytes(m, "--max-message"))
                    .transpose()?,
                max_tests_per_minute: a.max_tests_per_minute.map(|n| n.max(1)),
                max_test_memory: a
                    .max_test_memory
                    .as_deref()
                    .map(|m| gridperf_core::units::parse_bytes(m, "--max-test-memory"))
                    .transpose()?,
            },
            control_timeout: duration(&a.control_timeout, "--control-timeout")?,
            faults: Faults { drop_udp_every: a.fault_drop_udp, ..Faults::default() },
            ..AgentConfig::default()
        })
    }
}

/// Reads and checks serve --probe-config's file: every module within the safe limits.
pub fn probe_config(path: &std::path::Path) -> Result<(ProbeConfig, Vec<Checked>)> {
    let what = |e: String| Error::usage(format!("--probe-config {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| what(e.to_string()))?;
    let cfg: ProbeConfig = serde_json::from_str(&text).map_err(|e| what(e.to_string()))?;
    let mut checked = Vec::new();
    for (name, m) in &cfg.modules {
        let bad = |why: String| what(format!("module {name}: {why}"));
        let measure = super::positive_seconds(&m.duration, "duration").map_err(|e| bad(e.message))?;
        if measure > MAX_PROBE {
            return Err(bad(format!("duration {}: a probe may measure for at most 10 s", m.duration)));
        }
        match m.test.as_str() {
            "rtt" => {
                if m.parallel.is_some() || m.rate.is_some() || m.reverse {
                    return Err(bad("parallel, rate and reverse are stream's".into()));
                }
                if !matches!(m.proto.as_deref(), None | Some("udp") | Some("tcp")) {
                    return Err(bad("proto: tcp or udp".into()));
                }
                if m.size.is_some_and(|s| s == 0 || s > 65_507) {
                    return Err(bad("size: 1 to 65507 bytes".into()));
                }
            }
            "tune" => {
                if m.parallel.is_some() || m.reverse || m.proto.is_some() || m.size.is_some() {
                    return Err(bad("a tune probe takes only rate (the path's, for the advice)".into()));
                }
                match &m.rate {
                    Some(r) => super::rate(r, "rate").map(drop).map_err(|e| bad(e.message))?,
                    None => return Err(bad("a tune probe needs the path's rate (\"rate\": \"10G\")".into())),
                }
            }
            "stream" => {
                if m.proto.is_some() {
                    return Err(bad("proto is rtt's (a stream probe is TCP)".into()));
                }
                if m.parallel.is_some_and(|p| p == 0 || p > 8) {
                    return Err(bad("parallel: 1 to 8".into()));
                }
                if let Some(r) = &m.rate {
                    super::rate(r, "rate").map_err(|e| bad(e.message))?;
                }
            }
            other => return Err(bad(format!("test {other:?}: rtt, stream or tune"))),
        }
        let timeout = match &m.timeout {
            Some(t) if m.test != "rtt" => return Err(bad(format!("timeout {t} is rtt's"))),
            Some(t) => duration(t, "timeout").map_err(|e| bad(e.message))?,
            None => Duration::from_secs(1),
        };
        if timeout > Duration::from_secs(5) {
            return Err(bad("timeout: at most 5 s".into()));
        }
        checked.push(Checked { name: name.clone(), measure, timeout, module: m.clone() });
    }
    for t in &cfg.targets {
        if t.contains('/') {
            t.parse::<gridperf_core::auth::Cidr>().map_err(|e| what(format!("target {t}: {e}")))?;
        }
    }
    Ok((cfg, checked))
}

/// The agent's authorized keys: a file only its owner may read.
fn authorized_keys(path: &std::path::Path) -> Result<Vec<gridperf_core::auth::Key>> {
    let what = |e: String| Error::usage(format!("--auth {}: {e}", path.display()));
    let text = crate::host::read_secret(path).map_err(what)?;
    gridperf_core::auth::Key::parse_authorized(&text).map_err(what)
}
