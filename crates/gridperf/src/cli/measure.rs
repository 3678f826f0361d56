//! The measurements' arguments: `rtt` and `transfer` (the echo tests'
//! shared flags), `stream`, `fanout`; each turned into its command's
//! checked options.

use super::{buffer, duration, parse_cpus, parse_hosts, positive_seconds, rate, seconds_or, watched_lab};
use crate::agent::Faults;
use crate::commands::{self, Place};
use crate::engines::echo::EchoOptions;
use crate::engines::fanout::FanoutOptions;
use crate::engines::rtt::RttOptions;
use crate::engines::stream::StreamOptions;
use crate::engines::transfer::{self, TransferOptions, PAPER_TOTAL};
use crate::error::{Error, Result};
use crate::runner::{resolve, resolve_family, Deadlines, Family, Network};
use clap::Args;
use gridperf_core::model::plan::{check_limits, parse_protos, parse_sizes};
use gridperf_core::model::Variant;
use gridperf_core::units::{parse_bytes, parse_duration_ns};
use gridperf_core::wire::{Direction, StreamSpec, DEFAULT_PORT, MAX_TIMEOUT_MS};
use std::time::Duration;

#[derive(Args, Clone)]
pub struct EchoArgs {
    /// The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT. Without it, gridperf starts its own agent on loopback.
    pub host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Protocols, measured in turn at each size: tcp, udp, sendfile (TCP where both ends transmit with sendfile(2)), or all.
    #[arg(long = "proto", default_value = "tcp,udp,sendfile", value_name = "LIST")]
    pub protos: String,
    /// Message sizes: a list of sizes and ranges, e.g. 1,64,1k..64k*2 (factor) or 1..16k+256 (step), or a preset:
    /// short (1, 64, 1k, 16k, 64000: a first look), quick (the survey's 16 sizes around the MTU multiples, up to
    /// 64000), paper (1 B, then 128 B to 64000 B every 128 B), pow2 (1 B to 64 KiB), bench. Units as dd:
    /// k = 1024, KB = 1000, KiB = 1024.
    #[arg(short, long, default_value = "short", value_name = "LIST")]
    pub sizes: String,
    /// TCP_NODELAY on the data sockets of both ends: on disables Nagle (the default, as latency tools do), off keeps it.
    #[arg(long, default_value = "on", value_name = "on|off")]
    pub nodelay: OnOff,
    /// Write each TCP message in N send calls (N = 2 shows the Nagle x delayed-ACK stall with --nodelay off).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub writes: u32,
    /// Spin on non-blocking receives on both ends instead of sleeping (lower, steadier RTT; one busy CPU per
    /// end). Without HOST the ends need two CPUs (--cpu C,S): two spinning ends on one CPU wait for the
    /// scheduler at every round trip (8 ms measured, against 5.8 us on two), so that placement is refused.
    #[arg(long)]
    pub busy_poll: bool,
    /// Pin the ends: C pins both to CPU C; C,S pins the client to C and the agent to S (iperf3's -A); none
    /// leaves them to the scheduler. By default, as the survey does: both ends on the first CPU on loopback
    /// (two with --busy-poll), client on the first and agent on the second across a lab, the client on the
    /// first to a HOST.
    #[arg(short = 'A', long, value_name = "C[,S]|none")]
    pub cpu: Option<String>,
    /// Reach HOST over IPv4 only (a name that has both addresses).
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Reach HOST over IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// SO_SNDBUF to request on both ends' data sockets (the kernel doubles it and caps it at net.core.wmem_max; the granted size is reported).
    #[arg(long, value_name = "SIZE")]
    pub sndbuf: Option<String>,
    /// SO_RCVBUF to request on both ends' data sockets (doubled, capped at net.core.rmem_max).
    #[arg(long, value_name = "SIZE")]
    pub rcvbuf: Option<String>,
    /// Per-message deadline: a UDP message with no reply by then is counted lost; a TCP one gets 3 s more (it retransmits), then ends the run with an error.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub timeout: String,
    /// Deadline for connecting to the agent and for each of its control answers.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub connect_timeout: String,
    /// Wait up to DURATION in the agent's queue when it is busy (default: fail at once).
    #[arg(long, value_name = "DURATION")]
    pub queue: Option<String>,
    /// Before the first point of each protocol, exchange uncounted for this long (a cold process and
    /// connection are slower for tens of milliseconds). 0s to skip.
    #[arg(long, default_value = "250ms", value_name = "DURATION")]
    pub warmup_time: String,
    /// Run both ends in a new private network namespace whose loopback has this MTU (only without HOST).
    #[arg(long, value_name = "BYTES")]
    pub loopback_mtu: Option<u32>,
    #[command(flatten)]
    pub across: super::LabArgs,
    #[command(flatten)]
    pub store: super::StoreArgs,
    #[command(flatten)]
    pub print: super::FormatArgs,
    /// List every warning, each point's (by default a kind that came up more than 3 times is said once, counted).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Test seam: make the local agent drop every N-th UDP datagram.
    #[arg(long, hide = true, value_name = "N")]
    pub fault_drop_udp: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Args)]
pub struct RttArgs {
    #[command(flatten)]
    pub echo: EchoArgs,
    /// Counted exchanges per point.
    #[arg(short = 'n', long, default_value_t = 1000, value_name = "N")]
    pub iterations: u64,
    /// Time budget per point instead of a count: 2 (seconds), 500ms (--duration, its old name, too).
    #[arg(short = 't', long = "time", alias = "duration", value_name = "DURATION")]
    pub duration: Option<String>,
    /// Exchanges before counting starts (each checked against what was sent).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub warmup: u64,
    /// Split each point's count or time over N rounds, the protocols taking turns within each round, so that
    /// drift falls on all alike; each round's median is kept, and comparisons take their intervals from them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub rounds: u32,
    /// Measure a size's points again, up to N times, while one is irregular (two modes, a drift).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub retries: u32,

    /// Keep every round-trip time: in --json as samples_ns, in --csv one row per sample.
    #[arg(long)]
    pub samples: bool,
}

#[derive(Args)]
pub struct TransferArgs {
    #[command(flatten)]
    pub echo: EchoArgs,
    /// Bytes to move per run, one way (default: the document's 1024 x 1000).
    #[arg(long, value_name = "SIZE")]
    pub total: Option<String>,
    /// Timed runs per point.
    #[arg(short, long, default_value_t = 10, value_name = "N")]
    pub repeat: u32,
    /// Untimed runs before them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub warmup_runs: u32,
}

#[derive(Args)]
pub struct StreamArgs {
    /// The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT. Without it, gridperf starts its own agent on loopback.
    pub host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Parallel streams (per direction with --bidir), each on its own thread at both ends.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub parallel: u32,
    /// How long the senders send, after --omit: 10 (seconds) or a duration such as 500ms, 2m [default: 10,
    /// or the --preset's].
    #[arg(short = 't', long, allow_hyphen_values = true, value_name = "DURATION")]
    pub time: Option<String>,
    /// Send this many bytes per stream instead (SIZE as dd: 1G = 2^30, 1GB = 10^9); --time then caps the test.
    #[arg(short = 'n', long, value_name = "SIZE")]
    pub bytes: Option<String>,
    /// Send for this long first and leave it out of the throughput (slow start, autotuning) (iperf3's -O).
    #[arg(short = 'O', long, default_value = "0", allow_hyphen_values = true, value_name = "DURATION")]
    pub omit: String,
    /// Report interval for the per-interval throughput.
    #[arg(short = 'i', long, default_value = "1s", value_name = "DURATION")]
    pub interval: String,
    /// The agent sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once, -P streams each way.
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP, at the rate -b per stream.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// UDP: each stream's rate in bits per second (IP and UDP headers counted), decimal SI: 100M, 1G.
    #[arg(short = 'b', long, value_name = "RATE", requires = "udp")]
    pub bitrate: Option<String>,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1472: a 1500-byte packet).
    #[arg(short = 'l', long, value_name = "SIZE")]
    pub length: Option<String>,
    /// SO_SNDBUF and SO_RCVBUF on both ends (the kernel doubles it and caps it at net.core.wmem_max /
    /// rmem_max; what was granted is reported). Without it the kernel autotunes within tcp_rmem / tcp_wmem.
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    /// TCP congestion control on both ends' sockets: reno, cubic, bbr, ... (as the kernel offers).
    #[arg(short = 'C', long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// Cap each stream at RATE (SO_MAX_PACING_RATE; TCP paces itself to it), bits per second: 500M.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    pub pacing: Option<String>,
    /// Sleep this long between writes: application-level pacing, as the DataTAG study's inter-packet delay.
    #[arg(long, value_name = "DURATION")]
    pub gap: Option<String>,
    /// Send without copying: sendfile (from a memory file) or msg (MSG_ZEROCOPY; the kernel reports how many
    /// sends it copied after all: all of them on loopback and veth).
    #[arg(long, value_name = "sendfile|msg", conflicts_with = "sendfile")]
    pub zerocopy: Option<String>,
    /// The same as --zerocopy sendfile (iperf3's -Z).
    #[arg(short = 'Z')]
    pub sendfile: bool,
    /// Pin the stream threads: C pins both ends' to CPU C; C,S the client's to C and the agent's to S (iperf3's -A).
    #[arg(short = 'A', long, value_name = "C[,S]")]
    pub cpu: Option<String>,
    /// Rates in this unit (iperf3's -f): k, m, g, t bits per second, or K, M, G, T bytes per second; default:
    /// bits per second in the unit that fits.
    #[arg(short = 'f', long = "format", value_name = "UNIT")]
    pub units: Option<String>,
    /// Reach HOST over IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Reach HOST over IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// TCP_INFO sampling interval at both ends, at least 10ms.
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    pub sample: String,
    /// Write every stream's TCP_INFO timeline (the sender's) here: CSV if the name ends in .csv, else JSON lines.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<std::path::PathBuf>,
    /// Capture the test's packets at this end (an AF_PACKET socket: root, or --lab, whose hosts are this user's
    /// own) into FILE, a raw-IP pcap of the first --snaplen bytes of each, and compare what the capture tells
    /// (`gridperf trace`) with TCP_INFO: retransmissions, the most in flight, RTT.
    #[arg(long, value_name = "FILE")]
    pub capture: Option<std::path::PathBuf>,
    /// Bytes kept of each captured packet (the headers need 40 to 120).
    #[arg(long, default_value = "128", value_name = "BYTES", requires = "capture")]
    pub snaplen: u32,
    /// Run the test N times; report each run and the median and spread of the total (or the best, with --best)
    /// [default: 1, or the --preset's].
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// With --repeat: report the best run's total, as the DataTAG study did.
    #[arg(long)]
    pub best: bool,
    /// The path's bottleneck rate, for the verdict's BDP (taken from the lab with --lab).
    #[arg(long, value_name = "RATE")]
    pub expect: Option<String>,
    /// How long a receiver waits for the last data after the senders stop.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub linger: String,
    /// Deadline for connecting to the agent and for each of its control answers.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub connect_timeout: String,
    /// Wait up to DURATION in the agent's queue when it is busy (default: fail at once).
    #[arg(long, value_name = "DURATION")]
    pub queue: Option<String>,
    #[command(flatten)]
    pub across: super::LabArgs,
    #[command(flatten)]
    pub print: super::JsonArgs,
    #[command(flatten)]
    pub store: super::StoreArgs,
    /// Test seam: the local agent resets stream 0's connection after this many bytes.
    #[arg(long, hide = true, value_name = "BYTES")]
    pub fault_break_stream: Option<u64>,
    /// Sweep one setting over a list; repeat for a grid, every combination a stored run: w=1M..16M*2,
    /// pacing=0,400M,600M, delay=0,5us,10us (a per-packet delay, as the DataTAG kernel's: the pacing it
    /// implies at the link's rate), gap=0,10us (a sleep between writes), P=1,2, C=cubic,bbr, length=64K,1M,
    /// profile=lambda,internet, buffers=2.6.9,tuned,this (a kernel's tcp_rmem/tcp_wmem in the lab's hosts), or a
    /// lab field with --lab (rtt=8ms,20ms,35ms, queue=128KB,2bdp, loss=0,0.1%, net.ipv4.tcp_rmem=4096 87380 174760).
    /// Each sweep is stored as it goes: --resume goes on after an interruption; report --sweep ID draws it.
    #[arg(long = "sweep", value_name = "FIELD=LIST")]
    pub sweep: Vec<String>,
    /// A source document's sweep: datatag (004: throughput against a per-packet delay, windows 4-16 MB,
    /// lambda and Internet, best of 5 x 5 s; about 25 minutes) or baltic (003: throughput against RTT 2-35 ms
    /// for a 2.6.9 kernel's buffers, the tuned ones and this kernel's; about 6 minutes). -t, --repeat, -C and
    /// --nic-rate given on the command line win over the preset's.
    #[arg(long, value_name = "NAME", conflicts_with = "sweep")]
    pub preset: Option<String>,
    /// Go on with the latest unfinished sweep of the same settings: the points it stored are kept, the rest
    /// (and any that failed or stayed INVALID) measured.
    #[arg(long)]
    pub resume: bool,
    /// Go ahead with a sweep that would take more than an hour.
    #[arg(long)]
    pub yes: bool,
    /// The sender's NIC rate a swept per-packet delay is reckoned against (DataTAG's hosts: 1G on a 622
    /// Mbit/s lambda); default the lab's bottleneck rate, or --expect.
    #[arg(long, value_name = "RATE")]
    pub nic_rate: Option<String>,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print gridperf.fanout/1 JSON (docs/json.md) instead of the table")))]
pub struct FanoutArgs {
    /// original, drain, nodelay, drain-thread (a list), or all.
    #[arg(long, default_value = "all")]
    pub variant: String,
    /// Requests per consumer (a list or range as --sizes takes them).
    #[arg(long, default_value = "1..4k*2", value_name = "LIST")]
    pub messages: String,
    /// Request size in bytes.
    #[arg(long = "size", visible_alias = "sizes", default_value = "256..8k*2", value_name = "LIST")]
    pub sizes: String,
    /// Consumers.
    #[arg(long, default_value = "2", value_name = "LIST")]
    pub nodes: String,
    /// MAX: repetitions per point.
    #[arg(long, default_value_t = 5, value_name = "MAX")]
    pub repeat: u32,
    /// No byte moving on any socket for this long is a deadlock.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub watchdog: String,
    /// SO_SNDBUF and SO_RCVBUF on every socket (the kernel doubles it); small buffers deadlock sooner.
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    #[command(flatten)]
    pub print: super::FormatArgs,
    #[command(flatten)]
    pub store: super::StoreArgs,
    #[command(flatten)]
    pub across: super::LabArgs,
    /// With --lab: hosts on each side, 1xM (default 1 x the most --nodes, at most 8).
    #[arg(long, value_name = "1xM", requires = "lab")]
    pub hosts: Option<String>,
    /// Consumers on `gridperf serve` agents (HOST[:PORT], repeat or comma-separate), in turn.
    #[arg(long = "agents", value_name = "HOST", value_delimiter = ',')]
    pub agents: Vec<String>,
}

/// Which addresses of a name to take: -4, -6, or either.
fn family(v4: bool, v6: bool) -> Option<Family> {
    match (v4, v6) {
        (true, _) => Some(Family::V4),
        (_, true) => Some(Family::V6),
        _ => None,
    }
}

/// Where a run goes: a host, a lab of a profile, or loopback.
fn network(
    host: &Option<String>,
    port: u16,
    fam: Option<Family>,
    lab: &Option<String>,
    sets: &[String],
) -> Result<Network> {
    Ok(match (host, lab) {
        (Some(_), Some(_)) => return Err(Error::usage("--lab runs both ends in a lab of its own: leave out HOST")),
        (Some(h), None) => Network::Host { addr: resolve_family(h, port, fam)?, label: h.clone() },
        (None, Some(p)) => {
            // the profile and overrides are checked before anything is brought up
            crate::lab::run::spec_for("check", p, sets)?;
            Network::Lab { profile: p.clone(), sets: sets.to_vec() }
        }
        (None, None) => Network::Local,
    })
}

/// The echo tests' shared flags: where, what, and how.
fn echo(a: &EchoArgs) -> Result<(Place, EchoOptions)> {
    let protos = parse_protos(&a.protos)?;
    let sizes = parse_sizes(&a.sizes)?;
    check_limits(&protos, &sizes)?;
    let cpus = match a.cpu.as_deref() {
        Some("none") => None,
        Some(c) => Some(parse_cpus(c)?),
        None => None,
    };
    if a.host.is_none() && a.busy_poll && cpus.is_some_and(|(c, s)| c == s) {
        return Err(Error::usage(
            "--busy-poll with both ends on one CPU makes two spinning threads share it: give --cpu C,S with S different from C",
        ));
    }
    if a.writes == 0 || a.writes > 64 {
        return Err(Error::usage("--writes takes 1 to 64"));
    }
    let message = duration(&a.timeout, "--timeout")?;
    if message > Duration::from_millis(MAX_TIMEOUT_MS) {
        return Err(Error::usage(format!("--timeout {}: at most 60s", a.timeout)));
    }
    let deadlines = Deadlines {
        connect: duration(&a.connect_timeout, "--connect-timeout")?,
        control: duration(&a.connect_timeout, "--connect-timeout")?.max(Duration::from_secs(5)),
        message,
        queue: match &a.queue {
            Some(q) => duration(q, "--queue")?,
            None => Duration::ZERO,
        },
    };
    let network = network(&a.host, a.port, family(a.ipv4, a.ipv6), &a.across.lab, &a.across.sets)?;
    match (&network, a.loopback_mtu, a.fault_drop_udp) {
        (Network::Lab { .. }, Some(_), _) | (Network::Lab { .. }, _, Some(_)) => {
            return Err(Error::usage("--lab takes neither --loopback-mtu nor --fault-drop-udp"))
        }
        (Network::Host { .. }, Some(_), _) => {
            return Err(Error::usage("--loopback-mtu runs both ends locally: leave out HOST"))
        }
        (Network::Host { .. }, _, Some(_)) => {
            return Err(Error::usage("--fault-drop-udp works only with the local agent"))
        }
        (_, Some(mtu), _) if !(68..=65536).contains(&mtu) => {
            return Err(Error::usage(format!("--loopback-mtu {mtu}: give 68 to 65536")))
        }
        _ => {}
    }
    // pinned as the survey pins its ends, unless told (--cpu C[,S], or none); a remote agent is left alone
    let (client_cpu, server_cpu) = match (cpus, a.cpu.as_deref()) {
        (Some((c, s)), _) => (Some(c), Some(s)),
        (None, Some("none")) => (None, None),
        (None, _) => {
            let (c, s) = crate::commands::survey::placement(&network);
            let spin = a.busy_poll && matches!(network, Network::Local);
            (c, if spin { crate::host::cpus().get(1).copied().or(s) } else { s })
        }
    };
    let place = Place {
        network,
        watched: watched_lab(),
        loopback_mtu: a.loopback_mtu,
        faults: Faults { drop_udp_every: a.fault_drop_udp, ..Faults::default() },
    };
    let opts = EchoOptions {
        protos,
        sizes,
        nodelay: matches!(a.nodelay, OnOff::On),
        writes: a.writes,
        busy_poll: a.busy_poll,
        client_cpu,
        server_cpu,
        sndbuf: buffer(&a.sndbuf, "--sndbuf")?,
        rcvbuf: buffer(&a.rcvbuf, "--rcvbuf")?,
        deadlines,
        warmup_time: Duration::from_nanos(parse_duration_ns(&a.warmup_time, "--warmup-time")?),
        notes: Vec::new(),
    };
    Ok((place, opts))
}

impl TryFrom<RttArgs> for commands::rtt::Opts {
    type Error = Error;
    fn try_from(a: RttArgs) -> Result<Self> {
        if a.iterations == 0 || a.iterations > 100_000_000 {
            return Err(Error::usage("--iterations takes 1 to 100000000"));
        }
        if a.warmup > 100_000_000 {
            return Err(Error::usage("--warmup takes 0 to 100000000"));
        }
        if !(1..=1000).contains(&a.rounds) {
            return Err(Error::usage("--rounds takes 1 to 1000"));
        }
        if a.retries > 10 {
            return Err(Error::usage("--retries takes 0 to 10"));
        }
        let (place, echo) = echo(&a.echo)?;
        Ok(commands::rtt::Opts {
            place,
            rtt: RttOptions {
                echo,
                iterations: a.iterations,
                duration: a.duration.as_deref().map(|d| positive_seconds(d, "--duration")).transpose()?,
                warmup: a.warmup,
                keep_samples: a.samples,
                rounds: a.rounds,
                retries: a.retries,
                stop_early: false,
            },
            store: a.echo.store.choice(),
            verbose: a.echo.verbose,
        })
    }
}

impl TryFrom<TransferArgs> for commands::transfer::Opts {
    type Error = Error;
    fn try_from(a: TransferArgs) -> Result<Self> {
        let total = match &a.total {
            Some(t) => parse_bytes(t, "--total")?,
            None => PAPER_TOTAL,
        };
        if total == 0 || total > 1 << 40 {
            return Err(Error::usage("--total takes 1 byte to 1 TiB"));
        }
        if a.repeat == 0 || a.repeat > 10_000 {
            return Err(Error::usage("--repeat takes 1 to 10000"));
        }
        if a.warmup_runs > 10_000 {
            return Err(Error::usage("--warmup-runs takes 0 to 10000"));
        }
        let (place, echo) = echo(&a.echo)?;
        let smallest = echo.sizes[0];
        if transfer::messages_per_run(total, smallest) > 100_000_000 {
            return Err(Error::usage(format!(
                "--total {total} in messages of {smallest} B is more than 100 million messages per run: raise the size or lower the total"
            )));
        }
        Ok(commands::transfer::Opts {
            place,
            transfer: TransferOptions { echo, total, repeat: a.repeat, warmup_runs: a.warmup_runs },
            store: a.echo.store.choice(),
            verbose: a.echo.verbose,
        })
    }
}

impl TryFrom<StreamArgs> for commands::stream::Opts {
    type Error = Error;
    fn try_from(a: StreamArgs) -> Result<Self> {
        let preset = a.preset.as_deref().map(commands::sweep::preset).transpose()?;
        let time = seconds_or(a.time.as_deref().or(preset.map(|p| p.time)).unwrap_or("10"), "--time")?;
        let repeat = a.repeat.or(preset.map(|p| p.repeat)).unwrap_or(1);
        let best = a.best || preset.is_some_and(|p| p.best);
        if a.best && repeat == 1 {
            return Err(Error::usage("--best picks the best of --repeat N runs: give --repeat too"));
        }
        let sweep: Vec<commands::sweep::Axis> = match preset {
            Some(p) => p.axes.iter().map(|s| parse_axis(s)).collect::<Result<_>>()?,
            None => a.sweep.iter().map(|s| parse_axis(s)).collect::<Result<_>>()?,
        };
        if sweep.is_empty() {
            for (given, flag) in [(a.resume, "--resume"), (a.yes, "--yes"), (a.nic_rate.is_some(), "--nic-rate")] {
                if given {
                    return Err(Error::usage(format!("{flag} is for a sweep: give --sweep FIELD=LIST or --preset")));
                }
            }
        }
        let nic_rate = a.nic_rate.as_deref().or(preset.and_then(|p| p.nic_rate));
        if time.is_zero() {
            return Err(Error::usage("--time must be more than zero"));
        }
        let omit = seconds_or(&a.omit, "--omit")?;
        let udp = a.udp;
        let write_size = match &a.length {
            Some(l) => parse_bytes(l, "--length")?,
            None if udp => 1472,
            None => 128 * 1024,
        };
        let spec = StreamSpec {
            proto: if udp { "udp" } else { "tcp" }.into(),
            streams: a.parallel,
            direction: if a.bidir {
                Direction::Both
            } else if a.reverse {
                Direction::Down
            } else {
                Direction::Up
            },
            duration_ms: time.as_millis().max(1) as u64,
            bytes: a.bytes.as_deref().map(|b| parse_bytes(b, "--bytes")).transpose()?,
            write_size,
            window: buffer(&a.window, "--window")?,
            congestion: a.congestion.clone().or(preset.and_then(|p| p.congestion.map(str::to_string))),
            pacing_bps: a.pacing.as_deref().map(|p| rate(p, "--pacing")).transpose()?,
            gap_us: a.gap.as_deref().map(|g| seconds_or(g, "--gap").map(|d| d.as_micros() as u64)).transpose()?,
            zerocopy: if a.sendfile { Some("sendfile".into()) } else { a.zerocopy.clone() },
            udp_rate_bps: match (&a.bitrate, udp) {
                (Some(b), _) => Some(rate(b, "--bitrate")?),
                (None, true) => Some(100_000_000),
                (None, false) => None,
            },
            sample_ms: seconds_or(&a.sample, "--sample")?.as_millis() as u64,
            interval_ms: seconds_or(&a.interval, "--interval")?.as_millis() as u64,
            linger_ms: seconds_or(&a.linger, "--linger")?.as_millis() as u64,
            omit_ms: omit.as_millis() as u64,
            send_buffer: None,
            recv_buffer: None,
            cpu: None,
            transit: false,
        };
        let cpus = a.cpu.as_deref().map(parse_cpus).transpose()?;
        let spec = StreamSpec { cpu: cpus.map(|c| c.1), ..spec };
        if let Some((c, _)) = cpus {
            let have = crate::host::cpus();
            if !have.contains(&c) {
                return Err(Error::usage(format!("--cpu {c}: this host's CPUs are {have:?}")));
            }
        }
        if spec.pacing_bps.is_some() && udp {
            return Err(Error::usage("--pacing is for TCP; a UDP stream is paced by -b"));
        }
        if repeat == 0 || repeat > 1000 {
            return Err(Error::usage("--repeat takes 1 to 1000"));
        }
        crate::engines::stream::validate(&spec).map_err(|m| Error::usage(format!("gridperf stream: {m}")))?;
        let deadlines = Deadlines {
            connect: duration(&a.connect_timeout, "--connect-timeout")?,
            control: duration(&a.connect_timeout, "--connect-timeout")?.max(Duration::from_secs(5)),
            message: Duration::from_secs(1),
            queue: match &a.queue {
                Some(q) => duration(q, "--queue")?,
                None => Duration::ZERO,
            },
        };
        let network = network(&a.host, a.port, family(a.ipv4, a.ipv6), &a.across.lab, &a.across.sets)?;
        if a.fault_break_stream.is_some() && network != Network::Local {
            return Err(Error::usage("--fault-break-stream works only with the local agent"));
        }
        if a.resume && matches!(a.store.choice(), crate::store::StoreChoice::Off) {
            return Err(Error::usage("--resume goes on with a stored sweep: leave out --no-store"));
        }
        let o = commands::stream::Opts {
            place: Place {
                network,
                watched: watched_lab(),
                loopback_mtu: None,
                faults: Faults { break_stream_after: a.fault_break_stream, ..Faults::default() },
            },
            stream: StreamOptions {
                spec,
                omit,
                repeat,
                deadlines,
                path_rate_bps: a.expect.as_deref().map(|r| rate(r, "--expect")).transpose()?,
                notes: Vec::new(),
                client_cpu: cpus.map(|c| c.0),
                by_interval: None,
            },
            best,
            timeline: a.timeline.clone(),
            capture: match &a.capture {
                Some(p) if !(64..=65535).contains(&a.snaplen) => {
                    return Err(Error::usage(format!("--snaplen {}: give 64 to 65535 bytes", a.snaplen)))
                }
                Some(p) if !sweep.is_empty() => {
                    return Err(Error::usage(format!("--capture {}: one test at a time, not a sweep", p.display())))
                }
                Some(p) => Some((p.clone(), a.snaplen)),
                None => None,
            },
            store: a.store.choice(),
            sweep,
            yes: a.yes,
            nic_rate_bps: nic_rate.map(|r| rate(r, "--nic-rate")).transpose()?,
            preset: preset.map(|p| p.name.to_string()),
            resume: a.resume,
            in_sweep: None,
            units: a.units.as_deref().map(units).transpose()?.unwrap_or_default(),
        };
        // a sweep's every point, checked before the first runs
        if !o.sweep.is_empty() {
            commands::sweep::points(&o)?;
        }
        Ok(o)
    }
}

/// Parses `FIELD=LIST`, checking the field and every value.
pub fn parse_axis(s: &str) -> Result<commands::sweep::Axis> {
    let (field, list) = s.split_once('=').ok_or_else(|| {
        Error::usage(format!("--sweep {s:?}: give FIELD=LIST, e.g. w=1M..16M*2, pacing=0,400M or rtt=8ms,20ms"))
    })?;
    let field = field.trim().to_string();
    let items: Vec<&str> = list.split(',').map(str::trim).filter(|v| !v.is_empty()).collect();
    if items.is_empty() {
        return Err(Error::usage(format!("--sweep {field}=: give at least one value")));
    }
    let bad = |v: &str, e: String| Error::usage(format!("--sweep {field}={v}: {e}"));
    let values: Vec<String> = match field.as_str() {
        "w" | "length" => {
            let mut out = Vec::new();
            for v in &items {
                if field == "w" && *v == "auto" {
                    out.push("auto".into());
                    continue;
                }
                let sizes = gridperf_core::model::plan::parse_sizes(v).map_err(|e| bad(v, e.to_string()))?;
                out.extend(sizes.iter().map(u64::to_string));
            }
            out
        }
        "pacing" => {
            for v in &items {
                if *v != "0" && *v != "off" {
                    gridperf_core::lab::cfg::parse_rate_bps(v).map_err(|e| bad(v, e.to_string()))?;
                }
            }
            items.iter().map(|v| v.to_string()).collect()
        }
        "gap" | "delay" => {
            // normalised to microseconds, as the agent takes it
            let mut out = Vec::new();
            for v in &items {
                let d = seconds_or(v, "gap").map_err(|e| bad(v, e.to_string()))?;
                out.push(format!("{}us", d.as_micros()));
            }
            out
        }
        "P" => {
            for v in &items {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| bad(v, "give a count of streams, 1 or more".into()))?;
            }
            items.iter().map(|v| v.to_string()).collect()
        }
        "C" => items.iter().map(|v| v.to_string()).collect(),
        "buffers" => {
            for v in &items {
                if !commands::sweep::BUFFERS.iter().any(|(n, _, _)| n == v) {
                    let names: Vec<String> =
                        commands::sweep::BUFFERS.iter().map(|(n, about, _)| format!("{n} ({about})")).collect();
                    return Err(bad(v, format!("the buffers a sweep knows are {}", names.join("; "))));
                }
            }
            items.iter().map(|v| v.to_string()).collect()
        }
        sysctl if sysctl.starts_with("net.") => {
            for v in &items {
                crate::lab::host_sysctl(&format!("{sysctl}={v}")).map_err(|e| bad(v, e.to_string()))?;
            }
            items.iter().map(|v| v.to_string()).collect()
        }
        "profile" => {
            for v in &items {
                gridperf_core::lab::cfg::profile(v).map_err(|e| bad(v, e.to_string()))?;
            }
            items.iter().map(|v| v.to_string()).collect()
        }
        lab => {
            // a lab field: as `lab up --set` takes it, checked on a profile's settings
            let prof = gridperf_core::lab::cfg::profile("man").map_err(|e| Error::internal(e.to_string()))?;
            for v in &items {
                let mut set = prof.settings();
                gridperf_core::lab::cfg::apply_set(&mut set, &format!("{lab}={v}")).map_err(|e| {
                    Error::usage(format!(
                        "--sweep {lab}={v}: {e} (stream's settings to sweep are {}; the lab's, any field of lab up --set)",
                        commands::sweep::STREAM_FIELDS.join(", ")
                    ))
                })?;
            }
            items.iter().map(|v| v.to_string()).collect()
        }
    };
    Ok(commands::sweep::Axis { field, values })
}

impl TryFrom<FanoutArgs> for commands::fanout::Opts {
    type Error = Error;
    fn try_from(a: FanoutArgs) -> Result<Self> {
        use crate::engines::fanout::{MAX_MESSAGES, MAX_NODES, MAX_SIZE};
        // counts and sizes as --sizes takes them; a zero anywhere is named for what it is
        let counts = |s: &str, what: &str| -> Result<Vec<u64>> {
            let valid = match what {
                "--messages" => format!("1 to {MAX_MESSAGES}"),
                "--size" => format!("1 byte to {MAX_SIZE} bytes"),
                _ => format!("1 to {MAX_NODES}"),
            };
            if s.split([',', '.', '*', '+']).any(|t| t.trim() == "0" || t.trim().starts_with('-')) {
                return Err(Error::usage(format!("{what} {s}: give {valid}")));
            }
            parse_sizes(s).map_err(|e| Error::usage(format!("{what}: {e} (give {valid})")))
        };
        let mut variants = Vec::new();
        for name in a.variant.split(',').map(str::trim) {
            let got = Variant::parse(name)
                .ok_or_else(|| Error::usage(format!("--variant {name}: give one of {}", Variant::VALID)))?;
            for x in got {
                if !variants.contains(&x) {
                    variants.push(x);
                }
            }
        }
        let opts = FanoutOptions {
            variants,
            messages: counts(&a.messages, "--messages")?,
            sizes: counts(&a.sizes, "--size")?,
            nodes: counts(&a.nodes, "--nodes")?.into_iter().map(|n| n.min(u32::MAX as u64) as u32).collect(),
            repeat: a.repeat,
            watchdog: duration(&a.watchdog, "--watchdog")?,
            buffer: buffer(&a.window, "--window")?,
            place: None,
            agents: a.agents.iter().map(|h| resolve(h, DEFAULT_PORT)).collect::<Result<_>>()?,
            deadlines: None,
        };
        if !opts.agents.is_empty() && a.across.lab.is_some() {
            return Err(Error::usage("--agents and --lab: give one; the lab places its own consumers"));
        }
        crate::engines::fanout::validate(&opts)?;
        let lab = match &a.across.lab {
            None => None,
            Some(profile) => {
                let most = opts.nodes.iter().copied().max().unwrap_or(1).min(8) as usize;
                let hosts = match &a.hosts {
                    Some(h) => parse_hosts(h)?,
                    None => (1, most),
                };
                crate::lab::run::spec_with_hosts("check", profile, &a.across.sets, hosts)?;
                Some(commands::fanout::Lab { profile: profile.clone(), sets: a.across.sets.clone(), hosts })
            }
        };
        Ok(commands::fanout::Opts { fanout: opts, lab, store: a.store.choice() })
    }
}

/// `-f`: the unit stream's rates are printed in.
fn units(s: &str) -> Result<crate::commands::stream::Units> {
    crate::commands::stream::Units::parse(s).ok_or_else(|| {
        Error::usage(format!(
            "-f {s}: give k, m, g or t (kilo- to terabits per second) or K, M, G or T (bytes per second)"
        ))
    })
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn axes_expand_and_bad_ones_say_what_is_valid() {
        let w = parse_axis("w=1M..16M*2").expect("w");
        assert_eq!(w.values, ["1048576", "2097152", "4194304", "8388608", "16777216"]);
        assert_eq!(parse_axis("pacing=0,400M").expect("pacing").values, ["0", "400M"]);
        assert_eq!(parse_axis("rtt=8ms,20ms,35ms").expect("lab field").values.len(), 3);
        for (bad, want) in [
            ("w", "FIELD=LIST"),
            ("P=0", "1 or more"),
            ("pacing=fast", "pacing=fast"),
            ("profile=mars", "mars"),
            ("colour=blue", "stream's settings to sweep are w, pacing"),
            ("rtt=", "at least one value"),
        ] {
            let e = parse_axis(bad).expect_err(bad).to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn a_kernels_buffers_and_host_sysctls_are_axes_and_global_ones_are_refused() {
        assert_eq!(parse_axis("buffers=2.6.9,this").expect("buffers").values, ["2.6.9", "this"]);
        let e = parse_axis("buffers=2.4").expect_err("unknown").to_string();
        assert!(e.contains("2.6.9 (") && e.contains("tuned (") && e.contains("this ("), "{e}");
        let rmem = parse_axis("net.ipv4.tcp_rmem=4096 87380 174760,4096 131072 6291456").expect("sysctl");
        assert_eq!(rmem.values, ["4096 87380 174760", "4096 131072 6291456"]);
        let e = parse_axis("net.core.rmem_max=8738000").expect_err("global").to_string();
        assert!(e.contains("global on Linux"), "{e}");
    }

    fn stream_opts(args: &[&str]) -> Result<commands::stream::Opts> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["gridperf", "stream"].iter().chain(args))
            .map_err(|e| Error::usage(e.to_string()))?;
        match cli.command {
            crate::cli::Command::Stream(a) => (*a).try_into(),
            _ => Err(Error::internal("not stream")),
        }
    }

    #[test]
    fn a_preset_is_the_documents_sweep_and_the_command_line_wins_over_it() {
        let o = stream_opts(&["--preset", "datatag"]).expect("datatag");
        let fields: Vec<&str> = o.sweep.iter().map(|a| a.field.as_str()).collect();
        assert_eq!(fields, ["profile", "w", "delay"]);
        assert_eq!(commands::sweep::grid(&o.sweep).len(), 2 * 4 * 5);
        assert_eq!((o.stream.repeat, o.best, o.stream.spec.duration_ms), (5, true, 5000));
        assert_eq!((o.nic_rate_bps, o.stream.spec.congestion.as_deref()), (Some(1_000_000_000), Some("reno")));
        assert_eq!(o.preset.as_deref(), Some("datatag"));
        let o = stream_opts(&["--preset", "datatag", "-t", "2", "--repeat", "2", "-C", "bbr"]).expect("overridden");
        assert_eq!((o.stream.repeat, o.stream.spec.duration_ms), (2, 2000));
        assert_eq!(o.stream.spec.congestion.as_deref(), Some("bbr"));
        let o = stream_opts(&["--preset", "baltic"]).expect("baltic");
        assert_eq!(commands::sweep::grid(&o.sweep).len(), 3 * 5);
        assert_eq!((o.stream.repeat, o.best), (3, false));
        for (args, want) in [
            (&["--preset", "iperf"][..], "the presets are datatag, baltic"),
            (&["--preset", "baltic", "--sweep", "P=1,2"][..], "cannot be used with"),
            (&["--resume"][..], "--resume is for a sweep"),
            (&["--nic-rate", "1G"][..], "--nic-rate is for a sweep"),
            (&["--best"][..], "--best picks the best of --repeat N runs"),
        ] {
            let e = stream_opts(args).expect_err(&format!("{args:?}")).to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }
}
