//! The gridperf command line: parse, run the engine, print. The whole
//! pipeline of a command is visible here; everything else is in the library.

use clap::{Args, Parser, Subcommand};
use gridperf::agent::{Agent, AgentConfig};
use gridperf::engines::echo::Faults;
use gridperf::engines::rtt::{self, RttOptions};
use gridperf::engines::transfer::{self, TransferOptions, PAPER_TOTAL};
use gridperf::engines::{EchoOptions, Progress, Target};
use gridperf::error::{Error, Kind, Result};
use gridperf::report;
use gridperf::runner::{resolve, Deadlines};
use gridperf_core::plan::{check_limits, parse_protos, parse_sizes};
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_ns, parse_bytes, parse_duration_ns};
use gridperf_core::wire::DEFAULT_PORT;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gridperf",
    version,
    about = "Measure, emulate and move data across LAN, MAN and WAN networks",
    long_about = "gridperf compares TCP, UDP and zero-copy sendfile by round-trip and transfer time across message sizes, \
                  with full distributions. Without a HOST it starts its own agent on loopback, so you can try it with no set-up:\n\n  \
                  gridperf rtt\n\nAgainst another host, run `gridperf serve` there first.\n\n\
                  Exit codes: 0 ok, 1 internal error, 2 usage error, 3 network or peer error, 4 no valid measurement, 5 refused by the agent."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent that answers rtt and transfer tests from other hosts.
    #[command(after_help = "Examples:\n  \
        gridperf serve                                   [::]:5301, IPv4 and IPv6 clients\n  \
        gridperf serve --bind 10.0.0.2 --port 6000 --max-tests 2\n  \
        gridperf serve --once                            one test, then exit\n\n\
        A client that finds every test slot taken is told \"busy\" at once, unless it asked to wait (rtt --queue 30s).\n\
        SIGINT or SIGTERM stops the agent cleanly; a second one exits at once.")]
    Serve(ServeArgs),
    /// Round-trip time per protocol and message size (Hockney ping-pong): S bytes out, S bytes back.
    #[command(after_help = "Examples:\n  \
        gridperf rtt --cpu 0                                  all protocols, both ends on CPU 0\n  \
        gridperf rtt --proto tcp,udp --sizes 1,64,1k..64k*2   a list and a geometric range\n  \
        gridperf rtt --busy-poll --cpu 0,1                    spinning ends on two CPUs\n  \
        gridperf rtt --nodelay off --writes 2 --sizes 2000    the Nagle x delayed-ACK stall (~40 ms)\n  \
        gridperf rtt --loopback-mtu 1500 --sizes 1000..6000+250   Ethernet MTU on loopback (root)\n  \
        gridperf rtt 192.0.2.7 --json                         against `gridperf serve` on that host\n\n\
        Times are full round trips, never halved. See docs/json.md for the --json schema.")]
    Rtt(RttArgs),
    /// Transfer time of the first document's Table 1: a total moved in messages of each size, each echoed.
    #[command(after_help = "Examples:\n  \
        gridperf transfer --cpu 0 --sizes 1k,1460,4k,16k,64000   1024 x 1000 bytes per run, 10 runs per point\n  \
        gridperf transfer --total 10MB --repeat 5 --proto tcp,sendfile 192.0.2.7\n\n\
        The rate is payload bytes sent one way per run / the median run time; every byte also came back.")]
    Transfer(TransferArgs),
    /// Bulk throughput: parallel streams, socket buffers, congestion control, pacing, zero-copy, and why a stream is slow.
    #[command(after_help = "Examples:\n  \
        gridperf stream                                   one TCP stream to a local agent for 10 s\n  \
        gridperf stream 192.0.2.7 -P 4 -t 30 --omit 2     four streams to `gridperf serve` there\n  \
        gridperf stream -w 32M -C cubic --reverse HOST    32 MB buffers at both ends, CUBIC, agent to client\n  \
        gridperf stream --pacing 500M --gap 100us HOST    SO_MAX_PACING_RATE per stream, a gap between writes\n  \
        gridperf stream --zerocopy msg                    MSG_ZEROCOPY, with its completions counted\n  \
        gridperf stream -u -b 1G                          UDP at 1 Gbit/s: loss, reordering, jitter\n  \
        gridperf stream --lab cern-icepp -w 64M --timeline cwnd.csv   across the lab, the window over time\n\n\
        Throughput is what the receiver got after --omit, per second; rates are bits per second (decimal SI: 1G = 10^9).\n\
        Each TCP stream gets a verdict from its sender's TCP_INFO: receive window, send buffer, congestion (loss or\n\
        not), or the application. See docs/json.md for the --json schema.")]
    Stream(StreamArgs),
    /// The many-to-one producer/consumer benchmark (Gigabit/Myrinet study), its four variants, and deadlock detection.
    #[command(after_help = "Examples:\n  \
        gridperf fanout                                     every variant, 2 consumers, messages 1..4096, sizes 256..8192\n  \
        gridperf fanout --variant original --size 4096 -w 64k   the document's deadlock, with 64 KiB buffers\n  \
        gridperf fanout --variant all --nodes 2,4 --messages 1,16,256,4096 --csv\n\n\
        Bandwidth = 2 x MAX x messages x nodes x size / time over MAX (--repeat) repetitions, in bits per second.\n\
        A point where no byte moves for --watchdog is reported as DEADLOCK, with who was blocked in which call\n\
        and the bytes queued in every socket; the connections are torn down and the sweep goes on.")]
    Fanout(FanoutArgs),
    /// What caps a single TCP stream on a path (rate x RTT), from this host's settings or both ends', and what to set.
    #[command(after_help = "Examples:\n  \
        gridperf tune --rate 1G --rtt 35ms                 the BDP, what each setting caps, the fix\n  \
        gridperf tune --lab baltic                         a lab profile's rate and RTT\n  \
        gridperf tune --rate 1G --rtt 270ms --buffer 32M   an application's own buffer (iperf -w)\n  \
        gridperf tune --rate 1G --rtt 35ms --write-sysctl /etc/sysctl.d/90-gridperf.conf\n  \
        gridperf tune 192.0.2.7 --rate 1G                  RTT measured, both ends' settings\n  \
        gridperf tune 192.0.2.7 --measure-rate             the bottleneck probed with UDP too\n  \
        gridperf tune 192.0.2.7 --rate 1G --measure-share  how much of each buffer is window\n  \
        gridperf tune --in-lab default --apply             a running lab: set what is missing\n\n\
        Rates in bits per second, decimal SI (1G = 10^9); the settings are read in this network namespace.")]
    Tune(TuneArgs),
    /// The main job: rtt and transfer for TCP, UDP and sendfile on the documents' networks (a lab for each),
    /// every point stored, then the report and the best-protocol table.
    #[command(after_help = "Examples:\n  \
        gridperf survey --quick                      the first document's five networks, a small sweep (root: the lab)\n  \
        gridperf survey                              the full sweep (1 B, then 128 B to 64000 B)\n  \
        gridperf survey --profiles man,wan --proto tcp,udp --sizes 1,1k,16k\n  \
        gridperf survey local --quick                loopback in this process: no lab, no root\n  \
        gridperf survey 192.0.2.7                    a real path to `gridperf serve` there\n  \
        gridperf survey --quick --resume             go on with an interrupted survey, skipping stored points\n\n\
        Results go to the store (--db, default ~/.local/share/gridperf/results.db); the report to -o.")]
    Survey(SurveyArgs),
    /// The stored runs: list, show, compare, export, delete.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Draw stored runs into one self-contained HTML file (inline SVG), or SVG files.
    #[command(after_help = "Examples:\n  \
        gridperf report                              the latest survey, to gridperf-report.html\n  \
        gridperf report 12 13 -o cmp.html            runs 12 and 13\n  \
        gridperf report --survey 3 --svg-dir plots   the plots also as SVG files")]
    Report(ReportArgs),
    /// Emulated networks on this machine: hosts in network namespaces joined by a user-space link emulator.
    #[command(subcommand)]
    Lab(LabCommand),
}

#[derive(Args)]
struct FanoutArgs {
    /// original, drain, nodelay, drain-thread (a list), or all.
    #[arg(long, default_value = "all")]
    variant: String,
    /// Requests per consumer (a list or range as --sizes takes them).
    #[arg(long, default_value = "1..4k*2", value_name = "LIST")]
    messages: String,
    /// Request size in bytes.
    #[arg(long = "size", default_value = "256..8k*2", value_name = "LIST")]
    sizes: String,
    /// Consumers.
    #[arg(long, default_value = "2", value_name = "LIST")]
    nodes: String,
    /// MAX: repetitions per point.
    #[arg(long, default_value_t = 5, value_name = "MAX")]
    repeat: u32,
    /// No byte moving on any socket for this long is a deadlock.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    watchdog: String,
    /// SO_SNDBUF and SO_RCVBUF on every socket (the kernel doubles it); small buffers deadlock sooner.
    #[arg(short = 'w', long, value_name = "SIZE")]
    window: Option<String>,
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    #[arg(long)]
    csv: bool,
    /// The results database (default ~/.local/share/gridperf/results.db).
    #[arg(long, value_name = "PATH")]
    db: Option<std::path::PathBuf>,
    /// Do not store this sweep.
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
    /// Across a lab of this profile (root): the server on host a1, one consumer per host on the far side.
    #[arg(long, value_name = "PROFILE")]
    lab: Option<String>,
    /// Override one field of the --lab profile: rate=1G, rtt=20ms (repeat).
    #[arg(long = "lab-set", value_name = "FIELD=VALUE", requires = "lab")]
    lab_sets: Vec<String>,
    /// With --lab: hosts on each side, 1xM (default 1 x the most --nodes, at most 8).
    #[arg(long, value_name = "1xM", requires = "lab")]
    hosts: Option<String>,
    /// Consumers on `gridperf serve` agents (HOST[:PORT], repeat or comma-separate), in turn.
    #[arg(long = "agents", value_name = "HOST", value_delimiter = ',')]
    agents: Vec<String>,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("far_end").args(["host", "in_lab"])))]
struct TuneArgs {
    /// A `gridperf serve` agent at the far end: the RTT is measured with TCP probes, its settings read over the
    /// control channel, and both ends tuned.
    host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT, requires = "host")]
    port: u16,
    /// The path's bottleneck rate: 100M, 1G, 10G.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    rate: Option<String>,
    /// The path's round-trip time: 35ms, 270ms (with HOST: instead of measuring it).
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    rtt: Option<String>,
    /// With HOST: find the bottleneck rate with a short UDP stream (it floods the path for --probe-time).
    #[arg(long, requires = "host", conflicts_with = "rate")]
    measure_rate: bool,
    /// With HOST or --in-lab: measure how much of each end's buffers becomes window or data in flight (four TCP
    /// streams of 2 s, the buffers at their autotuning ceilings as far as net.core.*mem_max allow), instead of
    /// assuming the kernel's starting half.
    #[arg(long, requires = "far_end")]
    measure_share: bool,
    /// The congestion control the --measure-share probes use (default: the host's), as a stream would: cubic, bbr.
    #[arg(short = 'C', long, value_name = "NAME", requires = "measure_share")]
    congestion: Option<String>,
    /// The UDP rate --measure-rate offers (more than the path's rate, or the figure is a lower bound).
    #[arg(long, default_value = "2G", value_name = "RATE", requires = "measure_rate")]
    probe_rate: String,
    /// How long --measure-rate sends.
    #[arg(long, default_value = "2", value_name = "SECONDS", requires = "measure_rate")]
    probe_time: String,
    /// Take the rate and RTT from a lab profile (gridperf lab profiles); this host's settings.
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["rate", "rtt", "host"])]
    lab: Option<String>,
    /// A running lab (lab up --name NAME): its link's rate and RTT, its hosts' settings read in their namespaces.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["lab", "host"])]
    in_lab: Option<String>,
    /// With --in-lab: set the per-namespace changes in every host of the lab (global ones are named and left
    /// alone), then read them back. Needs root.
    #[arg(long, requires = "in_lab")]
    apply: bool,
    /// The socket buffer the application sets (SO_RCVBUF / SO_SNDBUF, iperf's -w), if it does.
    #[arg(long, value_name = "SIZE")]
    buffer: Option<String>,
    /// Write this host's changes as a sysctl.d file (for a lab, --apply sets them in its hosts).
    #[arg(long, value_name = "FILE", conflicts_with = "in_lab")]
    write_sysctl: Option<std::path::PathBuf>,
    /// Print gridperf.tune/2 JSON (docs/json.md) instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SurveyArgs {
    /// Survey a real path instead of the lab: HOST[:PORT] of a `gridperf serve`, or `local` (loopback, no lab).
    host: Option<String>,
    /// A small sweep that takes a few minutes (16 sizes around the MTU multiples, short budgets per point).
    #[arg(long)]
    quick: bool,
    /// Lab profiles to survey (gridperf lab profiles), default the first document's: loopback,crossover-fe,lan-gige,man,wan.
    #[arg(long, value_name = "LIST")]
    profiles: Option<String>,
    /// Protocols: tcp, udp, sendfile.
    #[arg(long = "proto", default_value = "tcp,udp,sendfile", value_name = "LIST")]
    protos: String,
    /// Message sizes, as rtt --sizes takes them (default: the quick or the full sweep).
    #[arg(long, value_name = "LIST")]
    sizes: Option<String>,
    /// Leave out the transfer-time measurements.
    #[arg(long)]
    no_transfer: bool,
    /// The results database.
    #[arg(long, value_name = "PATH")]
    db: Option<std::path::PathBuf>,
    /// Where to write the report.
    #[arg(short, long, default_value = "gridperf-report.html", value_name = "FILE")]
    output: std::path::PathBuf,
    /// Go on with the latest unfinished survey of the same settings, skipping the points it stored.
    #[arg(long)]
    resume: bool,
    /// The agent's control port (with HOST).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
}

#[derive(Subcommand)]
enum RunsCommand {
    /// The runs, newest first.
    List(RunsListArgs),
    /// One run: its settings, environment and points.
    Show(RunsOneArgs),
    /// Two runs point by point: the change in median and quartiles.
    Compare(RunsCompareArgs),
    /// A run as JSON (run and points) or CSV (points).
    Export(RunsExportArgs),
    /// Delete a run and its points.
    Delete(RunsOneArgs),
}

#[derive(Args)]
struct DbArg {
    /// The results database.
    #[arg(long, value_name = "PATH", global = true)]
    db: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct RunsListArgs {
    #[command(flatten)]
    db: DbArg,
    /// Only runs of this command: rtt, transfer, stream.
    #[arg(long)]
    kind: Option<String>,
    /// Only runs on this network (a lab profile, or a host).
    #[arg(long)]
    network: Option<String>,
    /// Only runs started in the last DURATION (e.g. 2h, 7d as 168h).
    #[arg(long, value_name = "DURATION")]
    since: Option<String>,
    /// Only the runs of this survey.
    #[arg(long)]
    survey: Option<i64>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunsOneArgs {
    #[command(flatten)]
    db: DbArg,
    id: i64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunsCompareArgs {
    #[command(flatten)]
    db: DbArg,
    a: i64,
    b: i64,
}

#[derive(Args)]
struct RunsExportArgs {
    #[command(flatten)]
    db: DbArg,
    id: i64,
    /// json or csv.
    #[arg(long, default_value = "json")]
    format: String,
}

#[derive(Args)]
struct ReportArgs {
    /// Runs to draw (default: the latest survey's).
    runs: Vec<i64>,
    /// Draw this survey's runs.
    #[arg(long)]
    survey: Option<i64>,
    #[command(flatten)]
    db: DbArg,
    #[arg(short, long, default_value = "gridperf-report.html", value_name = "FILE")]
    output: std::path::PathBuf,
    /// Also write every plot as an SVG file here.
    #[arg(long, value_name = "DIR")]
    svg_dir: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct StreamArgs {
    /// The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT. Without it, gridperf starts its own agent on loopback.
    host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Parallel streams (per direction with --bidir), each on its own thread at both ends.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// How long the senders send, after --omit: 10 (seconds) or a duration such as 500ms, 2m.
    #[arg(short = 't', long, default_value = "10", allow_hyphen_values = true, value_name = "DURATION")]
    time: String,
    /// Send this many bytes per stream instead (SIZE as dd: 1G = 2^30, 1GB = 10^9); --time then caps the test.
    #[arg(short = 'n', long, value_name = "SIZE")]
    bytes: Option<String>,
    /// Send for this long first and leave it out of the throughput (slow start, autotuning).
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_name = "DURATION")]
    omit: String,
    /// Report interval for the per-interval throughput.
    #[arg(short = 'i', long, default_value = "1s", value_name = "DURATION")]
    interval: String,
    /// The agent sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once, -P streams each way.
    #[arg(long)]
    bidir: bool,
    /// UDP instead of TCP, at the rate -b per stream.
    #[arg(short = 'u', long)]
    udp: bool,
    /// UDP: each stream's rate in bits per second (IP and UDP headers counted), decimal SI: 100M, 1G.
    #[arg(short = 'b', long, value_name = "RATE", requires = "udp")]
    bitrate: Option<String>,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1472: a 1500-byte packet).
    #[arg(short = 'l', long, value_name = "SIZE")]
    length: Option<String>,
    /// SO_SNDBUF and SO_RCVBUF on both ends (the kernel doubles it and caps it at net.core.wmem_max /
    /// rmem_max; what was granted is reported). Without it the kernel autotunes within tcp_rmem / tcp_wmem.
    #[arg(short = 'w', long, value_name = "SIZE")]
    window: Option<String>,
    /// TCP congestion control on both ends' sockets: reno, cubic, bbr, ... (as the kernel offers).
    #[arg(short = 'C', long, value_name = "NAME")]
    congestion: Option<String>,
    /// Cap each stream at RATE (SO_MAX_PACING_RATE; TCP paces itself to it), bits per second: 500M.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    pacing: Option<String>,
    /// Sleep this long between writes: application-level pacing, as the DataTAG study's inter-packet delay.
    #[arg(long, value_name = "DURATION")]
    gap: Option<String>,
    /// Send without copying: sendfile (from a memory file) or msg (MSG_ZEROCOPY; the kernel reports how many
    /// sends it copied after all: all of them on loopback and veth).
    #[arg(long, value_name = "sendfile|msg")]
    zerocopy: Option<String>,
    /// TCP_INFO sampling interval at both ends, at least 10ms.
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    sample: String,
    /// Write every stream's TCP_INFO timeline (the sender's) here: CSV if the name ends in .csv, else JSON lines.
    #[arg(long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,
    /// Run the test N times; report each run and the median and spread of the total (or the best, with --best).
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: u32,
    /// With --repeat: report the best run's total, as the DataTAG study did.
    #[arg(long, requires = "repeat")]
    best: bool,
    /// The path's bottleneck rate, for the verdict's BDP (taken from the lab with --lab).
    #[arg(long, value_name = "RATE")]
    expect: Option<String>,
    /// How long a receiver waits for the last data after the senders stop.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    linger: String,
    /// Deadline for connecting to the agent and for each of its control answers.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    connect_timeout: String,
    /// Wait up to DURATION in the agent's queue when it is busy (default: fail at once).
    #[arg(long, value_name = "DURATION")]
    queue: Option<String>,
    /// Run across a lab of this profile, brought up for the run: agent on host b, client on host a (root).
    #[arg(long, value_name = "PROFILE")]
    lab: Option<String>,
    /// Override one field of the --lab profile: rate=1G, rtt=20ms, loss=1% (repeat).
    #[arg(long = "lab-set", value_name = "FIELD=VALUE", requires = "lab")]
    lab_sets: Vec<String>,
    /// Print JSON (schema in docs/json.md) instead of the table.
    #[arg(long)]
    json: bool,
    /// The results database (default ~/.local/share/gridperf/results.db).
    #[arg(long, value_name = "PATH")]
    db: Option<std::path::PathBuf>,
    /// Do not store this run.
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
    /// Test seam: the local agent resets stream 0's connection after this many bytes.
    #[arg(long, hide = true, value_name = "BYTES")]
    fault_break_stream: Option<u64>,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Bring a lab up: a profile (lab profiles) or explicit settings, or a profile with --set overrides.
    #[command(after_help = "Examples:\n  \
        gridperf lab up --profile man                       the first document's 3 km MAN\n  \
        gridperf lab up --rate 1G --rtt 20ms --queue 1bdp   a gigabit path at 20 ms\n  \
        gridperf lab up --profile wan --set loss=1% --set burst=3\n  \
        gridperf lab up --profile baltic --sysctl net.ipv4.tcp_rmem=\"4096 87380 174760\"\n  \
        gridperf lab exec a -- gridperf rtt 10.77.2.1       measure across it from host a to host b\n\n\
        Hosts: a (10.77.1.1) and b (10.77.2.1), or a1.., b1.. with --hosts NxM; each is a network namespace\n\
        named gp-NAME-HOST, so `ip netns exec gp-default-a CMD` works too. Needs root.")]
    Up(Box<LabUpArgs>),
    /// Stop a lab and remove its namespaces, devices and emulator (also after a crash).
    Down(LabNameArg),
    /// A lab's settings, hosts and live counters.
    Status(LabStatusArgs),
    /// Run a command on a lab host: gridperf lab exec a -- CMD ARGS...
    Exec(LabExecArgs),
    /// The built-in profiles: the source documents' networks.
    Profiles(LabProfilesArgs),
    /// Measure the lab's fidelity on this machine: rate error, added delay error, queue bound, emulator CPU.
    Calibrate(LabCalibrateArgs),
    /// The emulator process itself (started by lab up).
    #[command(hide = true)]
    Emulator(LabNameArg),
}

#[derive(Args)]
struct LabNameArg {
    /// Which lab (one lab named "default" unless you name them).
    #[arg(long, default_value = "default")]
    name: String,
}

#[derive(Args)]
struct LabUpArgs {
    #[arg(long, default_value = "default")]
    name: String,
    /// Start from a profile (see lab profiles).
    #[arg(long)]
    profile: Option<String>,
    /// Bottleneck rate in bits per second, decimal SI: 100M, 1G (= 10^9), 622Mbit.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    rate: Option<String>,
    /// One-way delay per direction, as netem's: 10ms, 250us.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "rtt")]
    delay: Option<String>,
    /// Round-trip time, split evenly over both directions: 20ms.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    rtt: Option<String>,
    /// Jitter: a duration and optional distribution, 1ms (uniform +-1ms) or 2ms/normal (sigma).
    #[arg(long, allow_hyphen_values = true, value_name = "J")]
    jitter: Option<String>,
    /// Let jitter reorder packets (off by default: packets keep their order).
    #[arg(long)]
    reorder: bool,
    /// Random loss per direction: 1% or 0.01.
    #[arg(long, allow_hyphen_values = true, value_name = "P")]
    loss: Option<String>,
    /// Make loss bursty: the mean burst length in packets (Gilbert-Elliott), e.g. 3.
    #[arg(long, value_name = "PACKETS")]
    burst: Option<String>,
    /// Bottleneck queue: packets (1000pkt), bytes as dd (256KB, 256KiB) or BDP multiples (1.5bdp), or unlimited.
    #[arg(long, value_name = "Q")]
    queue: Option<String>,
    /// MTU of every host's interface (576 to 65535).
    #[arg(long, value_name = "BYTES")]
    mtu: Option<String>,
    /// Override one field of the profile: rate, delay, rtt, jitter, loss, burst, queue, mtu, reorder (repeat).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    sets: Vec<String>,
    /// Like --set, for the A-to-B direction only (an asymmetric path), e.g. --set-ab rate=20M.
    #[arg(long = "set-ab", value_name = "FIELD=VALUE")]
    sets_ab: Vec<String>,
    /// Like --set, for the B-to-A direction only (the ACK path of a transfer from A), e.g. --set-ba loss=1%.
    #[arg(long = "set-ba", value_name = "FIELD=VALUE")]
    sets_ba: Vec<String>,
    /// An access link for every host, or for one (HOST:...): comma-separated fields as --set takes them,
    /// e.g. --access rate=100M,delay=1ms or --access a2:rate=10M (repeat).
    #[arg(long = "access", value_name = "[HOST:]FIELD=VALUE,...")]
    access: Vec<String>,
    /// Hosts on each side of the bottleneck: 1x1 (a, b) or NxM (a1..aN, b1..bM), at most 8x8.
    #[arg(long, default_value = "1x1", value_name = "NxM")]
    hosts: String,
    /// Seed of the loss and jitter generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A per-namespace sysctl for every host, e.g. an old kernel's buffers:
    /// --sysctl net.ipv4.tcp_rmem="4096 87380 174760" (repeat). Global ones are refused.
    #[arg(long = "sysctl", value_name = "NAME=VALUE")]
    sysctls: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct LabStatusArgs {
    #[arg(long, default_value = "default")]
    name: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct LabExecArgs {
    #[arg(long, default_value = "default")]
    name: String,
    /// The host: a, b, or a1, b2, ... in a dumbbell.
    host: String,
    /// The command and its arguments, after --.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args)]
struct LabCalibrateArgs {
    /// Link rates to calibrate at.
    #[arg(long, default_value = "100M,1G", value_name = "LIST")]
    rates: String,
    /// One-way delays to calibrate at.
    #[arg(long, default_value = "25ms,150ms", value_name = "LIST")]
    delays: String,
    /// Seconds of overload per point for the rate and queue measurements.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct LabProfilesArgs {
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (repeat for several). The default [::] takes IPv4 and IPv6 clients.
    #[arg(long, value_name = "ADDR")]
    bind: Vec<std::net::IpAddr>,
    /// TCP port of the control channel.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Tests that may run side by side; a client beyond that is told "busy" (or waits, if it asked to with --queue).
    #[arg(long, default_value_t = 1, value_name = "N")]
    max_tests: usize,
    /// Clients that may wait for a free test slot.
    #[arg(long, default_value_t = 8, value_name = "N")]
    queue_len: usize,
    /// Exit after the first test.
    #[arg(long)]
    once: bool,
    /// How long a client may stay silent on the control channel before it is dropped.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    control_timeout: String,
    /// Test seam: receive but do not echo every N-th UDP datagram.
    #[arg(long, hide = true, value_name = "N")]
    fault_drop_udp: Option<u64>,
}

#[derive(Args, Clone)]
struct EchoArgs {
    /// The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT. Without it, gridperf starts its own agent on loopback.
    host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Protocols, measured in turn at each size: tcp, udp, sendfile (TCP where both ends transmit with sendfile(2)), or all.
    #[arg(long = "proto", default_value = "tcp,udp,sendfile", value_name = "LIST")]
    protos: String,
    /// Message sizes: a list of sizes and ranges, e.g. 1,64,1k..64k*2 (factor) or 1..16k+256 (step), or a preset:
    /// quick (sizes around the MTU multiples, up to 64000), paper (1 B, then 128 B to 64000 B every 128 B),
    /// pow2 (1 B to 64 KiB), bench. Units as dd: k = 1024, KB = 1000, KiB = 1024.
    #[arg(short, long, default_value = "quick", value_name = "LIST")]
    sizes: String,
    /// TCP_NODELAY on the data sockets of both ends: on disables Nagle (the default, as latency tools do), off keeps it.
    #[arg(long, default_value = "on", value_name = "on|off")]
    nodelay: OnOff,
    /// Write each TCP message in N send calls (N = 2 shows the Nagle x delayed-ACK stall with --nodelay off).
    #[arg(long, default_value_t = 1, value_name = "N")]
    writes: u32,
    /// Spin on non-blocking receives on both ends instead of sleeping (lower, steadier RTT; one busy CPU per end).
    #[arg(long)]
    busy_poll: bool,
    /// Pin the ends: C pins both to CPU C; C,S pins the client to C and the agent to S.
    #[arg(long, value_name = "C[,S]")]
    cpu: Option<String>,
    /// SO_SNDBUF to request on both ends' data sockets (the kernel doubles it and caps it at net.core.wmem_max; the granted size is reported).
    #[arg(long, value_name = "SIZE")]
    sndbuf: Option<String>,
    /// SO_RCVBUF to request on both ends' data sockets (doubled, capped at net.core.rmem_max).
    #[arg(long, value_name = "SIZE")]
    rcvbuf: Option<String>,
    /// Per-message deadline: a UDP message with no reply by then is counted lost; a TCP one ends the run with an error.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    timeout: String,
    /// Deadline for connecting to the agent and for each of its control answers.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    connect_timeout: String,
    /// Wait up to DURATION in the agent's queue when it is busy (default: fail at once).
    #[arg(long, value_name = "DURATION")]
    queue: Option<String>,
    /// Before the first point of each protocol, exchange uncounted for this long (a cold process and
    /// connection are slower for tens of milliseconds). 0s to skip.
    #[arg(long, default_value = "250ms", value_name = "DURATION")]
    warmup_time: String,
    /// Run both ends in a new private network namespace whose loopback has this MTU (needs root; only without HOST).
    #[arg(long, value_name = "BYTES")]
    loopback_mtu: Option<u32>,
    /// Run across a lab of this profile (gridperf lab profiles), brought up for the run and taken down
    /// after it: the agent on host b, the client on host a (needs root; only without HOST).
    #[arg(long, value_name = "PROFILE")]
    lab: Option<String>,
    /// Override one field of the --lab profile, as lab up --set takes it: rate=1G, rtt=20ms, loss=1% (repeat).
    #[arg(long = "lab-set", value_name = "FIELD=VALUE", requires = "lab")]
    lab_sets: Vec<String>,
    /// The results database every point is written to (default ~/.local/share/gridperf/results.db).
    #[arg(long, value_name = "PATH")]
    db: Option<std::path::PathBuf>,
    /// Do not store this run.
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
    /// Print JSON (schema documented in docs/json.md) instead of a table.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of a table.
    #[arg(long)]
    csv: bool,
    /// Test seam: make the local agent drop every N-th UDP datagram.
    #[arg(long, hide = true, value_name = "N")]
    fault_drop_udp: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Args)]
struct RttArgs {
    #[command(flatten)]
    echo: EchoArgs,
    /// Counted exchanges per point.
    #[arg(short = 'n', long, default_value_t = 1000, value_name = "N")]
    iterations: u64,
    /// Time budget per point instead of a count, e.g. 2s.
    #[arg(short = 't', long, value_name = "DURATION")]
    duration: Option<String>,
    /// Exchanges before counting starts (each checked against what was sent).
    #[arg(long, default_value_t = 100, value_name = "N")]
    warmup: u64,

    /// Keep every round-trip time: in --json as samples_ns, in --csv one row per sample.
    #[arg(long)]
    samples: bool,
}

#[derive(Args)]
struct TransferArgs {
    #[command(flatten)]
    echo: EchoArgs,
    /// Bytes to move per run, one way (default: the document's 1024 x 1000).
    #[arg(long, value_name = "SIZE")]
    total: Option<String>,
    /// Timed runs per point.
    #[arg(short, long, default_value_t = 10, value_name = "N")]
    repeat: u32,
    /// Untimed runs before them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    warmup_runs: u32,
}

fn duration(s: &str, what: &'static str) -> Result<Duration> {
    let ns = parse_duration_ns(s, what)?;
    if ns == 0 {
        return Err(Error::usage(format!("{what} must be more than zero")));
    }
    Ok(Duration::from_nanos(ns))
}

fn parse_cpus(s: &str) -> Result<(usize, usize)> {
    let bad = || {
        Error::usage(format!(
            "--cpu {s:?}: give C (both ends on CPU C) or C,S (client on C, agent on S), e.g. --cpu 0 or --cpu 0,1"
        ))
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let n = |p: &str| p.parse::<usize>().map_err(|_| bad());
    match parts.as_slice() {
        [c] => Ok((n(c)?, n(c)?)),
        [c, s] => Ok((n(c)?, n(s)?)),
        _ => Err(bad()),
    }
}

fn buffer(s: &Option<String>, what: &'static str) -> Result<Option<u64>> {
    match s {
        None => Ok(None),
        Some(s) => {
            let b = parse_bytes(s, what)?;
            if b == 0 || b > 1 << 30 {
                return Err(Error::usage(format!("{what} {s}: give 1 byte to 1 GiB")));
            }
            Ok(Some(b))
        }
    }
}

/// Builds the target and the shared options; enters a private namespace if asked.
fn echo_setup(a: &EchoArgs) -> Result<(Target, EchoOptions, Option<gridperf::lab::run::LabRun>)> {
    let protos = parse_protos(&a.protos)?;
    let sizes = parse_sizes(&a.sizes)?;
    check_limits(&protos, &sizes)?;
    if a.host.is_none() && a.busy_poll && a.cpu.as_deref().map(parse_cpus).transpose()?.is_some_and(|(c, s)| c == s) {
        return Err(Error::usage(
            "--busy-poll with both ends on one CPU makes two spinning threads share it: give --cpu C,S with S different from C",
        ));
    }
    if a.writes == 0 || a.writes > 64 {
        return Err(Error::usage("--writes takes 1 to 64"));
    }
    let (client_cpu, server_cpu) = match &a.cpu {
        Some(s) => {
            let (c, s) = parse_cpus(s)?;
            (Some(c), Some(s))
        }
        None => (None, None),
    };
    let deadlines = Deadlines {
        connect: duration(&a.connect_timeout, "--connect-timeout")?,
        control: duration(&a.connect_timeout, "--connect-timeout")?.max(Duration::from_secs(5)),
        message: {
            let t = duration(&a.timeout, "--timeout")?;
            if t > gridperf::agent::MAX_MESSAGE_TIMEOUT {
                return Err(Error::usage(format!("--timeout {}: at most 60s", a.timeout)));
            }
            t
        },
        queue: match &a.queue {
            Some(q) => duration(q, "--queue")?,
            None => Duration::ZERO,
        },
    };
    let mut notes = Vec::new();
    let mut lab = None;
    let target = match &a.host {
        Some(_) if a.lab.is_some() => {
            return Err(Error::usage("--lab runs both ends in a lab of its own: leave out HOST"));
        }
        None if a.lab.is_some() => {
            if a.loopback_mtu.is_some() || a.fault_drop_udp.is_some() {
                return Err(Error::usage("--lab takes neither --loopback-mtu nor --fault-drop-udp"));
            }
            let run = lab_run(a.lab.as_deref().unwrap_or_default(), &a.lab_sets)?;
            notes.push(format!("across lab {} ({})", run.name, run.description));
            let t = Target::Remote(run.agent);
            lab = Some(run);
            t
        }
        Some(h) => {
            if a.loopback_mtu.is_some() {
                return Err(Error::usage("--loopback-mtu runs both ends locally: leave out HOST"));
            }
            if a.fault_drop_udp.is_some() {
                return Err(Error::usage("--fault-drop-udp works only with the local agent"));
            }
            Target::Remote(resolve(h, a.port)?)
        }
        None => {
            if let Some(mtu) = a.loopback_mtu {
                if !(68..=65536).contains(&mtu) {
                    return Err(Error::usage(format!("--loopback-mtu {mtu}: give 68 to 65536")));
                }
                enter_private_loopback(mtu)?;
                notes.push(format!("both ends in a private network namespace; lo MTU {mtu}"));
            }
            Target::Local { faults: Faults { drop_udp_every: a.fault_drop_udp, ..Faults::default() } }
        }
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
        notes,
    };
    Ok((target, opts, lab))
}

/// Brings up a lab of `profile` for one run (see `--lab`).
fn lab_run(profile: &str, sets: &[String]) -> Result<gridperf::lab::run::LabRun> {
    let name = format!("run{}", std::process::id() % 100_000);
    let spec = gridperf::lab::run::spec_for(&name, profile, sets)?;
    gridperf::lab::run::LabRun::start(spec)
}

fn enter_private_loopback(mtu: u32) -> Result<()> {
    gridperf_sys::unshare_netns().map_err(|e| {
        Error::usage(format!("--loopback-mtu needs a private network namespace, which needs root (CAP_SYS_ADMIN): {e}"))
    })?;
    gridperf_sys::set_link_mtu("lo", mtu).map_err(|e| Error::internal(format!("setting the lo MTU to {mtu}: {e}")))?;
    gridperf_sys::set_link_up("lo").map_err(|e| Error::internal(format!("bringing lo up: {e}")))?;
    Ok(())
}

/// A bar of points on stderr, with what is measured and the time left
/// (hidden when stderr is not a terminal).
fn points_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} points · {msg} · {elapsed} elapsed, ~{eta} left")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// A progress bar on stderr for runs of several points (hidden when stderr is not a terminal).
fn progress_bar() -> (indicatif::ProgressBar, impl FnMut(Progress)) {
    let bar = points_bar();
    let b = bar.clone();
    (bar, move |p: Progress| {
        b.set_length(p.total as u64);
        b.set_position(p.done as u64);
        b.set_message(format!("{} {}", p.proto, fmt_bytes(p.size)));
    })
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // a closed pipe (| head) is a normal end
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::internal(format!("writing the output: {e}"))),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map(|s| s + "\n").map_err(|e| Error::internal(e.to_string()))
}

fn print_warnings(warnings: &[gridperf_core::stats::Warning]) {
    for w in warnings {
        eprintln!("gridperf: warning: {}", w.message());
    }
}

/// Prints a report as the user asked (JSON, CSV or a table), then its
/// warnings; fails when the run crossed a lab whose emulator fell behind.
fn emit<T: serde::Serialize>(
    a: &EchoArgs,
    report: &T,
    csv: impl FnOnce() -> String,
    table: impl FnOnce() -> String,
    warnings: &[gridperf_core::stats::Warning],
    env: &gridperf_core::model::Environment,
) -> Result<()> {
    if a.json {
        print(&json(report)?)?;
    } else if a.csv {
        print(&csv())?;
    } else {
        print(&table())?;
    }
    print_warnings(warnings);
    lab_valid(env)
}

/// A run across a lab whose emulator fell behind is not a measurement of the emulated network.
fn lab_valid(env: &gridperf_core::model::Environment) -> Result<()> {
    match env.lab.as_ref().and_then(|l| l.invalid.as_ref()) {
        Some(why) => Err(Error::measurement(format!("invalid run: the lab's emulator did not keep up ({why})"))),
        None => Ok(()),
    }
}

fn cmd_rtt(a: RttArgs) -> Result<()> {
    let (target, echo, _lab) = echo_setup(&a.echo)?;
    if a.iterations == 0 || a.iterations > 100_000_000 {
        return Err(Error::usage("--iterations takes 1 to 100000000"));
    }
    if a.warmup > 100_000_000 {
        return Err(Error::usage("--warmup takes 0 to 100000000"));
    }
    let opts = RttOptions {
        echo,
        iterations: a.iterations,
        duration: a.duration.as_deref().map(|d| duration(d, "--duration")).transpose()?,
        warmup: a.warmup,
        keep_samples: a.samples,
    };
    let mut rec = recorder(&a.echo, "rtt", serde_json::to_value(rtt::settings(&opts)).unwrap_or_default(), &_lab)?;
    let (bar, mut tick) = progress_bar();
    let samples = a.samples;
    let result = rtt::run_with(&target, &opts, &mut tick, &|_, _| false, &mut |p| {
        let mut row = gridperf::survey::rtt_point_row(p);
        if samples {
            row.samples = p.samples_ns.clone();
        }
        rec.point(&row)
    });
    bar.finish_and_clear();
    let r = stored(&mut rec, result)?;
    emit(&a.echo, &r, || report::rtt_csv(&r, a.samples), || report::rtt_table(&r), &r.warnings, &r.env)?;
    if r.points.iter().any(|p| p.summary.is_none()) {
        return Err(Error::measurement("some points have no sample: every message was lost"));
    }
    Ok(())
}

/// What a stored run was measured on: the lab's profile, the agent, or "local".
fn network_label(lab: &Option<gridperf::lab::run::LabRun>, host: &Option<String>) -> String {
    match (lab, host) {
        (Some(l), _) => l.profile.clone(),
        (None, Some(h)) => h.clone(),
        (None, None) => "local".into(),
    }
}

/// The store for a standalone rtt or transfer run.
fn recorder(
    a: &EchoArgs,
    kind: &str,
    settings: serde_json::Value,
    lab: &Option<gridperf::lab::run::LabRun>,
) -> Result<gridperf::store::Recorder> {
    let network = network_label(lab, &a.host);
    gridperf::store::Recorder::open(
        a.db.as_deref(),
        !a.no_store,
        &gridperf::store::NewRun {
            survey_id: None,
            kind,
            network: &network,
            target: a.host.as_deref().unwrap_or("local"),
            settings,
            lab_profile: lab.as_ref().map(|l| l.profile.as_str()),
            mtu: None,
        },
    )
}

/// Ends a stored run with the result's environment and status; says where it went.
fn stored<T: HasEnv>(rec: &mut gridperf::store::Recorder, result: Result<T>) -> Result<T> {
    match &result {
        Ok(r) => {
            if let Some(where_) = rec.finish(Some(r.env()), "done") {
                eprintln!("gridperf: {where_}");
            }
        }
        Err(_) => {
            rec.finish(None, "failed");
        }
    }
    result
}

trait HasEnv {
    fn env(&self) -> &gridperf_core::model::Environment;
}

impl HasEnv for gridperf_core::model::RttReport {
    fn env(&self) -> &gridperf_core::model::Environment {
        &self.env
    }
}

impl HasEnv for gridperf_core::model::TransferReport {
    fn env(&self) -> &gridperf_core::model::Environment {
        &self.env
    }
}

fn cmd_tune(a: TuneArgs) -> Result<()> {
    use gridperf::tune::{self as gt, EndAdvice, Record, TuneView};
    use gridperf_core::tune::TunePath;
    let given_rate = a.rate.as_deref().map(|r| rate(r, "--rate")).transpose()?;
    let given_rtt = match a.rtt.as_deref() {
        Some(t) => {
            if t.trim_start().starts_with('-') {
                return Err(Error::usage(format!("--rtt {t}: a round-trip time cannot be negative")));
            }
            let rtt = parse_duration_ns(t, "--rtt")?;
            if rtt == 0 || rtt > 10_000_000_000 {
                return Err(Error::usage(format!("--rtt {t}: give more than 0 and at most 10s, e.g. 35ms")));
            }
            Some(rtt)
        }
        None => None,
    };
    if given_rate.is_some_and(|r| r > 1_000_000_000_000) {
        return Err(Error::usage("--rate: at most 1T (10^12 bits per second)"));
    }
    let app = buffer(&a.buffer, "--buffer")?;
    if a.apply && !gridperf::env::is_root() {
        return Err(Error::usage(
            "tune --apply needs root (CAP_NET_ADMIN over the lab's namespaces): run it with sudo; nothing was changed",
        ));
    }
    let kernel = gt::kernel_release();
    // (rate, rtt, where they came from, measured, the ends' records, the lab's hosts)
    let mut measured = None;
    let mut lab_hosts = Vec::new();
    let (rate_bps, rtt_ns, from, records) = if let Some(h) = &a.host {
        if given_rate.is_none() && !a.measure_rate {
            return Err(Error::usage(
                "tune HOST needs the path's bottleneck rate: give --rate (e.g. 1G) or --measure-rate",
            ));
        }
        let addr = resolve(h, a.port)?;
        let deadlines = Deadlines {
            connect: Duration::from_secs(5),
            control: Duration::from_secs(10),
            message: Duration::from_secs(2),
            queue: Duration::ZERO,
        };
        let (mut m, agent, mtu) = gt::probe(addr, deadlines)?;
        let rtt = given_rtt.unwrap_or(m.rtt_median_ns.round() as u64).max(1);
        let rate_bps = match given_rate {
            Some(r) => r,
            None if a.measure_rate => {
                let offer = rate(&a.probe_rate, "--probe-rate")?;
                let secs = seconds_or(&a.probe_time, "--probe-time")?.as_secs();
                if !(1..=30).contains(&secs) {
                    return Err(Error::usage("--probe-time takes 1 to 30 seconds"));
                }
                if !a.json {
                    eprintln!("gridperf tune: probing the rate with {} of UDP for {secs} s", fmt_bps(offer as f64));
                }
                let (r, note) = gt::probe_rate(addr, deadlines, offer, secs)?;
                if r < 1.0 {
                    return Err(Error::network(format!(
                        "the rate probe to {addr} delivered nothing in {secs} s: no rate to tune for (a firewall on UDP?); give --rate"
                    )));
                }
                m.rate_bps = Some(r);
                m.rate_note = Some(note);
                r.round() as u64
            }
            None => return Err(Error::internal("no rate")),
        };
        let from = format!(
            "RTT {}: median of {} TCP round trips of 1 byte to {addr} (min {})",
            if given_rtt.is_some() { "given".to_string() } else { fmt_ns(m.rtt_median_ns) },
            m.round_trips,
            fmt_ns(m.rtt_min_ns)
        );
        measured = Some(m);
        let here = gt::read_here();
        let there_kernel = gt::release_of(&agent.kernel);
        let records = vec![
            Record::new("this host", here, kernel.clone(), mtu),
            Record::new(&format!("agent {addr}"), agent.sysctls.clone(), there_kernel, mtu),
        ];
        (rate_bps, rtt, from, records)
    } else if let Some(name) = &a.in_lab {
        let st = gridperf::lab::state(name).ok_or_else(|| {
            Error::usage(format!(
                "no lab named {name:?} is up: bring one up with `gridperf lab up --name {name} --profile baltic`"
            ))
        })?;
        let link = &st.spec.ab;
        let rate_bps = match given_rate.or(link.rate_bps) {
            Some(r) => r,
            None => return Err(Error::usage(format!("lab {name} sets no rate: give --rate"))),
        };
        let rtt = given_rtt.unwrap_or(st.spec.ab.delay_ns + st.spec.ba.delay_ns);
        if rtt == 0 {
            return Err(Error::usage(format!("lab {name} adds no delay: give --rtt")));
        }
        let mut records = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for h in &st.hosts {
            // one host of each side stands for its side; --apply sets them all
            if seen.insert(h.side as u8) {
                let mtu = (st.spec.mtu > 0).then_some(st.spec.mtu);
                records.push(Record::new(&h.name, gt::read_in(&h.netns)?, kernel.clone(), mtu));
            }
        }
        lab_hosts = st.hosts.clone();
        (rate_bps, rtt, format!("lab {name} ({})", st.spec.description), records)
    } else if let Some(p) = &a.lab {
        let prof = gridperf_core::labcfg::profile(p).map_err(lab_error)?;
        let link = prof.settings().link_config().map_err(lab_error)?;
        let rate = link.rate_bps.ok_or_else(|| Error::usage(format!("profile {p} sets no rate: give --rate")))?;
        let here = Record::new("this host", gt::read_here(), kernel.clone(), None);
        (rate, 2 * link.delay_ns, format!("lab profile {p}"), vec![here])
    } else {
        match (given_rate, given_rtt) {
            (Some(r), Some(t)) => {
                let here = Record::new("this host", gt::read_here(), kernel.clone(), None);
                (r, t, "given".to_string(), vec![here])
            }
            _ => {
                return Err(Error::usage(
                    "give the path: --rate RATE --rtt DURATION (e.g. --rate 1G --rtt 35ms), --lab PROFILE, --in-lab NAME, or HOST",
                ))
            }
        }
    };
    let path = TunePath { rate_bps, rtt_ns };
    let mut records = records;
    let mut share_probes = Vec::new();
    if a.measure_share {
        let say = |m: &str| {
            if !a.json {
                eprintln!("gridperf tune: {m}");
            }
        };
        let deadlines = Deadlines {
            connect: Duration::from_secs(5),
            control: Duration::from_secs(10),
            message: Duration::from_secs(2),
            queue: Duration::ZERO,
        };
        let (here, there) = match &records[..] {
            [x, y] => (x.settings().0, y.settings().0),
            _ => return Err(Error::usage("--measure-share needs a far end: HOST, or --in-lab NAME")),
        };
        share_probes = match (&a.host, &a.in_lab) {
            (Some(h), _) => {
                let target = gridperf::engines::Target::Remote(resolve(h, a.port)?);
                gt::probe_both_ways(&target, deadlines, (&here, &there), rate_bps, a.congestion.as_deref(), &say)?
            }
            (None, Some(name)) => {
                gt::probe_in_lab(name, &lab_hosts, deadlines, (here, there), rate_bps, a.congestion.clone(), a.json)?
            }
            _ => return Err(Error::usage("--measure-share needs a far end: HOST, or --in-lab NAME")),
        };
        if let [client, agent] = &mut records[..] {
            gt::with_shares(client, agent, &share_probes);
        }
    }
    let advise_all =
        |records: &[Record]| -> Vec<EndAdvice> { records.iter().map(|r| EndAdvice::new(r, path, app)).collect() };
    let ends = advise_all(&records);
    let directions = gt::directions(&ends, path, app);
    let mut view = TuneView {
        schema: "gridperf.tune/2",
        path,
        bdp_bytes: path.bdp_bytes(),
        path_from: from,
        measured,
        ends,
        directions,
        share_probes,
        applied: Vec::new(),
        after: None,
    };
    if let Some(f) = &a.write_sysctl {
        let mut text = format!(
            "# gridperf tune: a single TCP stream at {} over {} RTT (BDP {} bytes)\n",
            fmt_bps(rate_bps as f64),
            fmt_ns(rtt_ns as f64),
            view.bdp_bytes
        );
        let mut lines: Vec<&String> = Vec::new();
        for l in view.ends.iter().filter(|e| !e.name.starts_with("agent ")).flat_map(|e| &e.advice.sysctl_lines) {
            if !lines.contains(&l) {
                lines.push(l);
            }
        }
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(f, text).map_err(|e| Error::usage(format!("--write-sysctl {}: {e}", f.display())))?;
    }
    if a.apply {
        // each end's lines go to the hosts of its side of the bottleneck
        // (its probes measured that side); a global line is named once
        // (the loopback lab's two hosts share one namespace: the first end's lines stand)
        let mut done = std::collections::BTreeSet::new();
        for e in &view.ends {
            let side = lab_hosts.iter().find(|h| h.name == e.name).map(|h| h.side);
            let hosts: Vec<_> =
                lab_hosts.iter().filter(|h| Some(h.side) == side && done.insert(h.netns.clone())).cloned().collect();
            for x in gt::apply(&hosts, &e.advice.sysctl_lines)? {
                if x.host != "all" || !view.applied.iter().any(|y| y.host == "all" && y.setting == x.setting) {
                    view.applied.push(x);
                }
            }
        }
        let mut again = Vec::new();
        for r in &records {
            let h = lab_hosts
                .iter()
                .find(|h| h.name == r.name)
                .ok_or_else(|| Error::internal(format!("host {} is gone", r.name)))?;
            again.push(Record { sysctls: gt::read_in(&h.netns)?, ..r.clone() });
        }
        view.after = Some(gt::directions(&advise_all(&again), path, app));
    }
    if a.json {
        return print(&json(&view)?);
    }
    print(&report::tune_text(&view))
}

fn cmd_fanout(a: FanoutArgs) -> Result<()> {
    use gridperf::engines::fanout::{self, FanoutOptions, Variant};
    // counts and sizes as --sizes takes them; a zero anywhere is named for what it is
    let counts = |s: &str, what: &str| -> Result<Vec<u64>> {
        let valid = match what {
            "--messages" => format!("1 to {}", fanout::MAX_MESSAGES),
            "--size" => format!("1 byte to {} bytes", fanout::MAX_SIZE),
            _ => format!("1 to {}", fanout::MAX_NODES),
        };
        if s.split([',', '.', '*', '+']).any(|t| t.trim() == "0" || t.trim().starts_with('-')) {
            return Err(Error::usage(format!("{what} {s}: give {valid}")));
        }
        parse_sizes(s).map_err(|e| Error::usage(format!("{what}: {e} (give {valid})")))
    };
    let opts = FanoutOptions {
        variants: {
            let mut v = Vec::new();
            for name in a.variant.split(',').map(str::trim) {
                let got = Variant::parse(name)
                    .ok_or_else(|| Error::usage(format!("--variant {name}: give one of {}", Variant::VALID)))?;
                for x in got {
                    if !v.contains(&x) {
                        v.push(x);
                    }
                }
            }
            v
        },
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
    if !opts.agents.is_empty() && a.lab.is_some() {
        return Err(Error::usage("--agents and --lab: give one; the lab places its own consumers"));
    }
    fanout::validate(&opts)?;
    let mut opts = opts;
    // across a lab: the server on the first host of side A, the consumers on side B's hosts in turn
    let lab = match &a.lab {
        None => None,
        Some(profile) => {
            let most = opts.nodes.iter().copied().max().unwrap_or(1).min(8) as usize;
            let shape = match &a.hosts {
                Some(h) => parse_hosts(h)?,
                None => (1, most),
            };
            let name = format!("fo{}", std::process::id() % 100_000);
            let spec = gridperf::lab::run::spec_with_hosts(&name, profile, &a.lab_sets, shape)?;
            let (run, hosts) = gridperf::lab::run::LabRun::hosts_only(spec)?;
            let server = hosts.iter().find(|h| h.side == gridperf::lab::emulator::Side::A);
            let server = server.ok_or_else(|| Error::internal("the lab has no host on side A"))?;
            opts.place = Some(fanout::Place {
                server_netns: server.netns.clone(),
                server_addr: server.addr,
                consumer_netns: hosts
                    .iter()
                    .filter(|h| h.side == gridperf::lab::emulator::Side::B)
                    .map(|h| h.netns.clone())
                    .collect(),
            });
            let before = gridperf::lab::health(&run.name);
            Some((run, before))
        }
    };
    let bar = points_bar();
    let mut rec = gridperf::store::Recorder::open(
        a.db.as_deref(),
        !a.no_store,
        &gridperf::store::NewRun {
            survey_id: None,
            kind: "fanout",
            network: a.lab.as_deref().unwrap_or(if a.agents.is_empty() { "loopback" } else { "agents" }),
            target: "local",
            settings: serde_json::json!({ "repeat": opts.repeat, "buffer": opts.buffer,
                "watchdog_ns": opts.watchdog.as_nanos() as u64 }),
            lab_profile: a.lab.as_deref(),
            mtu: None,
        },
    )?;
    let mut store_err = None;
    let points = fanout::run(&opts, &mut |done, total, p| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(format!("{} {} nodes {} B x {}", p.variant.name(), p.nodes, p.size, p.messages));
        let row = gridperf::store::PointRow {
            proto: p.variant.name().into(),
            size: p.size,
            setting: format!("nodes={} messages={}", p.nodes, p.messages),
            median_ns: p.time.as_ref().map(|t| t.median_ns),
            q1_ns: p.time.as_ref().map(|t| t.q1_ns),
            q3_ns: p.time.as_ref().map(|t| t.q3_ns),
            figures: serde_json::to_value(p).unwrap_or_default(),
            samples: None,
        };
        if let Err(e) = rec.point(&row) {
            store_err.get_or_insert(e);
        }
    });
    bar.finish_and_clear();
    let points = points?;
    if let Some(e) = store_err {
        return Err(e);
    }
    // the lab's own verdict on the sweep, into the record
    let env = lab.as_ref().map(|(run, before)| gridperf_core::model::Environment {
        lab: Some(gridperf::engines::lab_record(&run.name, before.clone())),
        ..Default::default()
    });
    if let Some(where_) = rec.finish(env.as_ref(), "done") {
        eprintln!("gridperf: {where_}");
    }
    if a.json {
        print(&json(
            &serde_json::json!({ "schema": "gridperf.fanout/1", "buffer": opts.buffer, "repeat": opts.repeat, "points": points }),
        )?)?;
    } else if a.csv {
        print(&report::fanout_csv(&points))?;
    } else {
        print(&report::fanout_table(&points, &opts))?;
    }
    if let Some(env) = &env {
        lab_valid(env)?;
    }
    Ok(())
}

fn db_path(p: &Option<std::path::PathBuf>) -> std::path::PathBuf {
    p.clone().unwrap_or_else(gridperf::store::default_path)
}

fn cmd_survey(a: SurveyArgs) -> Result<()> {
    use gridperf::survey::{self, Network, SurveySpec};
    let protos = parse_protos(&a.protos)?;
    let sizes =
        parse_sizes(a.sizes.as_deref().unwrap_or(if a.quick { survey::QUICK_SIZES } else { survey::FULL_SIZES }))?;
    check_limits(&protos, &sizes)?;
    let networks: Vec<Network> = match (&a.host, &a.profiles) {
        (Some(_), Some(_)) => return Err(Error::usage("give HOST or --profiles, not both")),
        (Some(h), None) if h == "local" => vec![Network::Local],
        (Some(h), None) => vec![Network::Host { addr: resolve(h, a.port)?, label: h.clone() }],
        (None, p) => {
            let list: Vec<String> = match p {
                Some(p) => p.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
                None => survey::DOCUMENT_PROFILES.iter().map(|s| s.to_string()).collect(),
            };
            for name in &list {
                gridperf_core::labcfg::profile(name).map_err(lab_error)?;
            }
            if !gridperf::env::is_root() {
                return Err(Error::usage(
                    "the survey brings up a lab for each network, which needs root (network namespaces and TUN \
                     devices): run it with sudo, or survey without a lab: `gridperf survey local --quick` \
                     (loopback only, in this process) or `gridperf survey HOST` (a remote `gridperf serve`)",
                ));
            }
            list.into_iter().map(Network::Lab).collect()
        }
    };
    let transfer_sizes: Vec<u64> = if a.no_transfer {
        Vec::new()
    } else if a.quick {
        vec![1024, 16384, 64000]
    } else {
        vec![1024, 1460, 4096, 16384, 64000]
    };
    let spec = SurveySpec {
        networks,
        protos,
        sizes,
        quick: a.quick,
        transfer_sizes,
        // the Table 1 loop echoes every message: on a 180 ms WAN, 1024 x 1000 bytes in
        // 1 KB messages take three minutes a run; the quick survey moves 64 KB
        transfer_total: if a.quick { 64_000 } else { PAPER_TOTAL },
    };
    let store = gridperf::store::Store::open(&db_path(&a.db))?;
    let bar = points_bar();
    let started = std::time::Instant::now();
    let outcome = survey::run(&store, &spec, a.resume, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(format!("{}: {}", p.network, p.what));
    });
    bar.finish_and_clear();
    let outcome = outcome?;
    let runs = load_runs(
        &store,
        &store.runs(&gridperf::store::RunFilter { survey: Some(outcome.survey), ..Default::default() })?,
    )?;
    let (html, _) = gridperf::report_html::render(&runs);
    std::fs::write(&a.output, html).map_err(|e| Error::usage(format!("-o {}: {e}", a.output.display())))?;
    let analysis = gridperf::report_html::analyse(&runs);
    print(&format!(
        "gridperf survey {} ({} networks, {:.0} s), stored in {}\n\n{}\n{}\nreport: {}\n",
        outcome.survey,
        spec.networks.len(),
        started.elapsed().as_secs_f64(),
        store.path.display(),
        gridperf::report_html::best_table_text(&analysis),
        gridperf::report_html::thresholds_text(&analysis),
        a.output.display()
    ))?;
    for (net, why) in &outcome.failed {
        eprintln!("gridperf survey: {net} was not measured: {why}");
    }
    if !outcome.failed.is_empty() {
        return Err(Error::network(format!(
            "{} of {} networks failed; the others are stored (go on with --resume)",
            outcome.failed.len(),
            spec.networks.len()
        )));
    }
    Ok(())
}

fn load_runs(
    store: &gridperf::store::Store,
    runs: &[gridperf::store::RunRow],
) -> Result<Vec<(gridperf::store::RunRow, Vec<gridperf::store::PointRow>)>> {
    let mut out = Vec::new();
    // oldest first: the report follows the survey's order
    for r in runs.iter().rev() {
        out.push((r.clone(), store.points(r.id)?));
    }
    Ok(out)
}

fn cmd_report(a: ReportArgs) -> Result<()> {
    let store = gridperf::store::Store::open_existing(&db_path(&a.db.db))?;
    let rows: Vec<gridperf::store::RunRow> = if !a.runs.is_empty() {
        a.runs.iter().rev().map(|&id| store.run(id)).collect::<Result<_>>()?
    } else {
        let survey = match a.survey {
            Some(s) => Some(s),
            None => store.latest_survey()?,
        };
        match survey {
            Some(s) => store.runs(&gridperf::store::RunFilter { survey: Some(s), ..Default::default() })?,
            None => Vec::new(),
        }
    };
    if rows.is_empty() {
        return Err(Error::usage(format!(
            "nothing to draw: no runs{} in {} (gridperf runs list shows what is there)",
            a.survey.map(|s| format!(" in survey {s}")).unwrap_or_default(),
            store.path.display()
        )));
    }
    let runs = load_runs(&store, &rows)?;
    let (html, svgs) = gridperf::report_html::render(&runs);
    std::fs::write(&a.output, html).map_err(|e| Error::usage(format!("-o {}: {e}", a.output.display())))?;
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::usage(format!("--svg-dir {}: {e}", dir.display())))?;
        for (name, svg) in &svgs {
            std::fs::write(dir.join(name), svg)
                .map_err(|e| Error::usage(format!("--svg-dir {}: {e}", dir.display())))?;
        }
    }
    eprintln!("gridperf report: {} runs, {} plots -> {}", runs.len(), svgs.len(), a.output.display());
    Ok(())
}

fn cmd_runs(c: RunsCommand) -> Result<()> {
    use gridperf::store::{RunFilter, Store};
    match c {
        RunsCommand::List(a) => {
            let store = Store::open_existing(&db_path(&a.db.db))?;
            let since = a
                .since
                .as_deref()
                .map(|s| duration(s, "--since").map(|d| gridperf::runner::unix_now() - d.as_secs_f64()))
                .transpose()?;
            let runs =
                store.runs(&RunFilter { kind: a.kind.clone(), network: a.network.clone(), since, survey: a.survey })?;
            if a.json {
                return print(&json(&runs)?);
            }
            let mut out = format!(
                "{:>5} {:>6} {:<9} {:<16} {:>6} {:<11} {:<20} valid\n",
                "run", "survey", "kind", "network", "points", "status", "started (UTC)"
            );
            for r in &runs {
                out.push_str(&format!(
                    "{:>5} {:>6} {:<9} {:<16} {:>6} {:<11} {:<20} {}\n",
                    r.id,
                    r.survey_id.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
                    r.kind,
                    r.network,
                    r.points,
                    r.status,
                    report::utc(r.started),
                    if r.invalid.is_some() { "INVALID" } else { "yes" }
                ));
            }
            print(&out)
        }
        RunsCommand::Show(a) => {
            let store = Store::open_existing(&db_path(&a.db.db))?;
            let run = store.run(a.id)?;
            let points = store.points(a.id)?;
            if a.json {
                return print(&json(&serde_json::json!({ "run": run, "points": points }))?);
            }
            print(&report::run_show(&run, &points))
        }
        RunsCommand::Compare(a) => {
            let store = Store::open_existing(&db_path(&a.db.db))?;
            let (ra, rb) = (store.run(a.a)?, store.run(a.b)?);
            print(&report::run_compare(&ra, &store.points(a.a)?, &rb, &store.points(a.b)?))
        }
        RunsCommand::Export(a) => {
            let store = Store::open_existing(&db_path(&a.db.db))?;
            let run = store.run(a.id)?;
            let points = store.points(a.id)?;
            match a.format.as_str() {
                "json" => print(&json(&serde_json::json!({ "run": run, "points": points }))?),
                "csv" => print(&report::points_csv(&points)),
                other => Err(Error::usage(format!("--format {other}: give json or csv"))),
            }
        }
        RunsCommand::Delete(a) => {
            let store = Store::open_existing(&db_path(&a.db.db))?;
            store.delete(a.id)?;
            eprintln!("gridperf runs: run {} deleted", a.id);
            Ok(())
        }
    }
}

/// Stores a stream test: one run per repetition, one point per stream.
fn store_stream(
    a: &StreamArgs,
    r: &gridperf_core::model::StreamReport,
    lab: &Option<gridperf::lab::run::LabRun>,
) -> Result<()> {
    let network = network_label(lab, &a.host);
    for run in &r.runs {
        let mut rec = gridperf::store::Recorder::open(
            a.db.as_deref(),
            !a.no_store,
            &gridperf::store::NewRun {
                survey_id: None,
                kind: "stream",
                network: &network,
                target: &run.env.target,
                settings: serde_json::json!({ "spec": r.spec, "omit_ns": r.omit_ns }),
                lab_profile: lab.as_ref().map(|l| l.profile.as_str()),
                mtu: None,
            },
        )?;
        for s in &run.streams {
            rec.point(&gridperf::store::PointRow {
                proto: r.spec.proto.clone(),
                size: r.spec.write_size,
                setting: format!("stream {} {}", s.index, s.direction),
                median_ns: None,
                q1_ns: None,
                q3_ns: None,
                figures: serde_json::to_value(s).unwrap_or_default(),
                samples: None,
            })?;
        }
        if let Some(where_) = rec.finish(Some(&run.env), "done") {
            eprintln!("gridperf: {where_}");
        }
    }
    Ok(())
}

/// A duration where a bare number means seconds (as iperf's -t).
fn seconds_or(s: &str, what: &'static str) -> Result<Duration> {
    if s.trim_start().starts_with('-') {
        return Err(Error::usage(format!("{what} {s}: a duration cannot be negative")));
    }
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Duration::from_secs_f64(v.max(0.0))),
        _ => Ok(Duration::from_nanos(parse_duration_ns(s, what)?)),
    }
}

fn rate(s: &str, what: &str) -> Result<u64> {
    if s.trim_start().starts_with('-') {
        return Err(Error::usage(format!("{what} {s}: a rate cannot be negative")));
    }
    gridperf_core::labcfg::parse_rate_bps(s).map_err(|e| Error::usage(format!("{what}: {e}")))
}

fn cmd_stream(a: StreamArgs) -> Result<()> {
    use gridperf::engines::stream::{self, StreamOptions};
    use gridperf_core::wire::{Direction, StreamSpec};
    let time = seconds_or(&a.time, "--time")?;
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
        congestion: a.congestion.clone(),
        pacing_bps: a.pacing.as_deref().map(|p| rate(p, "--pacing")).transpose()?,
        gap_us: a.gap.as_deref().map(|g| seconds_or(g, "--gap").map(|d| d.as_micros() as u64)).transpose()?,
        zerocopy: a.zerocopy.clone(),
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
    };
    if spec.pacing_bps.is_some() && udp {
        return Err(Error::usage("--pacing is for TCP; a UDP stream is paced by -b"));
    }
    if a.repeat == 0 || a.repeat > 1000 {
        return Err(Error::usage("--repeat takes 1 to 1000"));
    }
    stream::validate(&spec).map_err(|m| Error::usage(format!("gridperf stream: {m}")))?;
    let deadlines = Deadlines {
        connect: duration(&a.connect_timeout, "--connect-timeout")?,
        control: duration(&a.connect_timeout, "--connect-timeout")?.max(Duration::from_secs(5)),
        message: Duration::from_secs(1),
        queue: match &a.queue {
            Some(q) => duration(q, "--queue")?,
            None => Duration::ZERO,
        },
    };
    let mut notes = Vec::new();
    let mut path_rate_bps = a.expect.as_deref().map(|r| rate(r, "--expect")).transpose()?;
    let (target, _lab) = match (&a.host, &a.lab) {
        (Some(_), Some(_)) => return Err(Error::usage("--lab runs both ends in a lab of its own: leave out HOST")),
        (Some(h), None) => (Target::Remote(resolve(h, a.port)?), None),
        (None, Some(p)) => {
            let run = lab_run(p, &a.lab_sets)?;
            notes.push(format!("across lab {} ({})", run.name, run.description));
            if path_rate_bps.is_none() {
                path_rate_bps = gridperf::lab::state(&run.name).and_then(|s| s.spec.ab.rate_bps);
            }
            (Target::Remote(run.agent), Some(run))
        }
        (None, None) => {
            (Target::Local { faults: Faults { break_stream_after: a.fault_break_stream, ..Faults::default() } }, None)
        }
    };
    let opts = StreamOptions { spec, omit, repeat: a.repeat, deadlines, path_rate_bps, notes };
    let live = !a.json;
    let sending_ms = (opts.omit + time).as_millis() as u64;
    let mut on_interval = |run: u32, t_ms: u64, rows: &[(u32, u64)]| {
        // after the senders' time, only intervals that still brought data
        if live && (t_ms <= sending_ms + opts.spec.interval_ms || rows.iter().any(|r| r.1 > 0)) {
            print_interval(&opts, run, t_ms, rows);
        }
    };
    let r = stream::run(&target, &opts, &mut on_interval)?;
    store_stream(&a, &r, &_lab)?;
    if let Some(path) = &a.timeline {
        std::fs::write(path, report::stream_timeline(&r, path.extension().is_some_and(|e| e == "csv")))
            .map_err(|e| Error::usage(format!("--timeline {}: {e}", path.display())))?;
    }
    if a.json {
        print(&json(&r)?)?;
    } else {
        print(&report::stream_table(&r, a.best))?;
    }
    print_warnings(&r.warnings);
    for run in &r.runs {
        lab_valid(&run.env)?;
    }
    if r.runs.iter().all(|run| run.streams.iter().all(|s| s.receiver.bytes == 0)) {
        return Err(Error::measurement("no stream moved any data"));
    }
    Ok(())
}

fn print_interval(opts: &gridperf::engines::stream::StreamOptions, run: u32, t_ms: u64, rows: &[(u32, u64)]) {
    let secs = opts.spec.interval_ms as f64 / 1000.0;
    let total: u64 = rows.iter().map(|r| r.1).sum();
    let per: Vec<String> = rows.iter().map(|(i, b)| format!("{i}:{}", fmt_bps(*b as f64 * 8.0 / secs))).collect();
    let omitted = if (t_ms as u128) <= opts.omit.as_millis() { " (omitted)" } else { "" };
    let run = if opts.repeat > 1 { format!("run {} ", run + 1) } else { String::new() };
    let per = if rows.len() > 1 { format!("   [{}]", per.join("  ")) } else { String::new() };
    println!("{run}{:>7.1} s  {:>14}{per}{omitted}", t_ms as f64 / 1000.0, fmt_bps(total as f64 * 8.0 / secs));
}

fn cmd_transfer(a: TransferArgs) -> Result<()> {
    let (target, echo, _lab) = echo_setup(&a.echo)?;
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
    let smallest = echo.sizes[0];
    if transfer::messages_per_run(total, smallest) > 100_000_000 {
        return Err(Error::usage(format!(
            "--total {total} in messages of {smallest} B is more than 100 million messages per run: raise the size or lower the total"
        )));
    }
    let opts = TransferOptions { echo, total, repeat: a.repeat, warmup_runs: a.warmup_runs };
    let (bar, mut tick) = progress_bar();
    let mut rec =
        recorder(&a.echo, "transfer", serde_json::to_value(transfer::settings(&opts)).unwrap_or_default(), &_lab)?;
    let result = transfer::run_with(&target, &opts, &mut tick, &|_, _| false, &mut |p| {
        rec.point(&gridperf::survey::transfer_point_row(p))
    });
    bar.finish_and_clear();
    let r = stored(&mut rec, result)?;
    emit(&a.echo, &r, || report::transfer_csv(&r), || report::transfer_table(&r), &r.warnings, &r.env)?;
    if r.points.iter().any(|p| p.time.is_none()) {
        return Err(Error::measurement("some points completed no run"));
    }
    Ok(())
}

fn cmd_serve(a: ServeArgs) -> Result<()> {
    let ips = if a.bind.is_empty() { vec![std::net::IpAddr::from([0u16; 8])] } else { a.bind };
    let cfg = AgentConfig {
        bind: ips.into_iter().map(|ip| SocketAddr::new(ip, a.port)).collect(),
        max_tests: a.max_tests.max(1),
        queue_len: a.queue_len,
        once: a.once,
        control_timeout: duration(&a.control_timeout, "--control-timeout")?,
        faults: Faults { drop_udp_every: a.fault_drop_udp, ..Faults::default() },
        ..AgentConfig::default()
    };
    let agent = Agent::bind(cfg).map_err(|e| Error::network(format!("gridperf serve: {e}")))?;
    let stop = agent.stop_handle();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // the first signal stops the agent cleanly; a second one exits at once
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.flag())
            .map_err(|e| Error::internal(e.to_string()))?;
        signal_hook::flag::register(sig, stop.flag()).map_err(|e| Error::internal(e.to_string()))?;
    }
    let addrs: Vec<String> = agent.local_addrs().iter().map(|a| a.to_string()).collect();
    eprintln!(
        "gridperf serve: listening on {} (protocol {}, {} test(s) at a time)",
        addrs.join(", "),
        gridperf_core::wire::PROTOCOL_VERSION,
        a.max_tests.max(1)
    );
    agent.run().map_err(|e| Error::network(format!("gridperf serve: {e}")))?;
    eprintln!("gridperf serve: stopped");
    Ok(())
}

fn lab_error(e: gridperf_core::labcfg::LabError) -> Error {
    Error::usage(e.to_string())
}

fn lab_settings(a: &LabUpArgs) -> Result<(gridperf_core::labcfg::LabSettings, String)> {
    use gridperf_core::labcfg;
    let (mut s, mut words) = match &a.profile {
        Some(p) => {
            let prof = labcfg::profile(p).map_err(lab_error)?;
            (prof.settings(), vec![format!("profile {} ({})", prof.name, prof.source)])
        }
        None => (labcfg::LabSettings::default(), Vec::new()),
    };
    let mut sets: Vec<String> = Vec::new();
    for (field, v) in [
        ("rate", &a.rate),
        ("delay", &a.delay),
        ("rtt", &a.rtt),
        ("jitter", &a.jitter),
        ("loss", &a.loss),
        ("burst", &a.burst),
        ("queue", &a.queue),
        ("mtu", &a.mtu),
    ] {
        if let Some(v) = v {
            sets.push(format!("{field}={v}"));
        }
    }
    if a.reorder {
        sets.push("reorder=on".into());
    }
    sets.extend(a.sets.iter().cloned());
    for set in &sets {
        labcfg::apply_set(&mut s, set).map_err(lab_error)?;
        words.push(set.clone());
    }
    Ok((s, words.join(", ")))
}

fn parse_hosts(s: &str) -> Result<(usize, usize)> {
    let bad = || Error::usage(format!("--hosts {s:?}: give NxM hosts per side, 1 to 8 each, e.g. 1x1 or 2x2"));
    let (a, b) = s.split_once('x').ok_or_else(bad)?;
    let a: usize = a.parse().map_err(|_| bad())?;
    let b: usize = b.parse().map_err(|_| bad())?;
    if !(1..=8).contains(&a) || !(1..=8).contains(&b) {
        return Err(bad());
    }
    Ok((a, b))
}

fn cmd_lab(c: LabCommand) -> Result<()> {
    use gridperf::lab;
    match c {
        LabCommand::Up(a) => {
            let (settings, mut description) = lab_settings(&a)?;
            let direction = |sets: &[String], tag: &str, description: &mut String| -> Result<_> {
                let mut s = settings.clone();
                for set in sets {
                    gridperf_core::labcfg::apply_set(&mut s, set).map_err(lab_error)?;
                    description.push_str(&format!(", {tag} {set}"));
                }
                if s.mtu != settings.mtu {
                    return Err(Error::usage(
                        "the MTU is the hosts' own: set it with --mtu or --set, not per direction",
                    ));
                }
                s.link_config().map_err(lab_error)
            };
            let ab = direction(&a.sets_ab, "a->b", &mut description)?;
            let ba = direction(&a.sets_ba, "b->a", &mut description)?;
            let loopback = a.profile.as_deref() == Some("loopback");
            if loopback && (ab != gridperf_core::emu::LinkConfig::default() || ab != ba || a.hosts != "1x1") {
                return Err(Error::usage(
                    "the loopback profile has no link to shape and two hosts on one lo: only --mtu applies to it",
                ));
            }
            let mtu_given = a.mtu.is_some() || a.sets.iter().any(|s| s.starts_with("mtu="));
            let host_shape = parse_hosts(&a.hosts)?;
            let host_names: Vec<String> = lab::hosts(&a.name, host_shape).into_iter().map(|h| h.name).collect();
            let mut access = Vec::new();
            for spec in &a.access {
                let (host, fields) = match spec.split_once(':') {
                    Some((h, rest)) if !h.contains('=') => (Some(h.to_string()), rest),
                    _ => (None, spec.as_str()),
                };
                if let Some(h) = &host {
                    if !host_names.contains(h) {
                        return Err(Error::usage(format!(
                            "--access {spec}: no host {h:?} in this lab; its hosts are {}",
                            host_names.join(", ")
                        )));
                    }
                }
                let mut s = gridperf_core::labcfg::LabSettings::default();
                for f in fields.split(',').filter(|f| !f.trim().is_empty()) {
                    if f.trim().starts_with("mtu=") {
                        return Err(Error::usage("--access: the MTU is the hosts' own: set it with --mtu"));
                    }
                    gridperf_core::labcfg::apply_set(&mut s, f.trim()).map_err(lab_error)?;
                }
                description.push_str(&format!(", access {spec}"));
                access.push((host, s.link_config().map_err(lab_error)?));
            }
            if loopback && !access.is_empty() {
                return Err(Error::usage("the loopback profile has no links, so no access links either"));
            }
            let spec = lab::LabSpec {
                name: a.name.clone(),
                hosts: host_shape,
                mtu: if loopback && !mtu_given { 0 } else { settings.mtu },
                loopback,
                access,
                ab,
                ba,
                seed: a.seed,
                profile: a.profile.clone(),
                owner: None,
                sysctls: a
                    .sysctls
                    .iter()
                    .map(|l| {
                        let (k, v) = gridperf::tune::split_line(l)?;
                        if gridperf_core::tune::per_namespace(&k) == Some(false) {
                            return Err(Error::usage(format!(
                                "--sysctl {k}: global on Linux, not per network namespace; a lab host cannot have its own"
                            )));
                        }
                        Ok((k, v))
                    })
                    .collect::<Result<_>>()?,
                description: if description.is_empty() {
                    "no impairment".into()
                } else {
                    description.trim_start_matches(", ").to_string()
                },
            };
            let st = lab::up(spec)?;
            if a.json {
                print(&json(&st)?)?;
            } else {
                print(&report::lab_status(&st, None))?;
            }
            Ok(())
        }
        LabCommand::Down(a) => {
            let was = lab::down(&a.name)?;
            eprintln!("gridperf lab: {} {}", a.name, if was { "is down" } else { "was not up; cleaned what it left" });
            Ok(())
        }
        LabCommand::Status(a) => {
            let st = lab::state(&a.name)
                .ok_or_else(|| Error::usage(format!("no lab named {:?} is up: `gridperf lab up` first", a.name)))?;
            let health = lab::health(&a.name);
            if a.json {
                print(&json(&serde_json::json!({ "lab": st, "health": health }))?)?;
            } else {
                print(&report::lab_status(&st, health.as_ref()))?;
            }
            Ok(())
        }
        LabCommand::Exec(a) => {
            let st = lab::exec(&a.name, &a.host, &a.command)?;
            std::process::exit(st.code().unwrap_or(1));
        }
        LabCommand::Profiles(a) => {
            let profiles = gridperf_core::labcfg::profiles();
            if a.json {
                let rows: Vec<serde_json::Value> = profiles
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "name": p.name, "rate_bps": p.rate_bps, "rtt_ns": p.rtt_ns,
                            "queue": format!("{:?}", p.queue), "loss": p.loss, "mtu": p.mtu,
                            "source": p.source, "assumptions": p.assumptions,
                        })
                    })
                    .collect();
                print(&json(&rows)?)?;
            } else {
                print(&report::lab_profiles(&profiles))?;
            }
            Ok(())
        }
        LabCommand::Emulator(a) => lab::emulator_main(&a.name),
        LabCommand::Calibrate(a) => {
            let rates: Vec<u64> = a
                .rates
                .split(',')
                .map(|r| gridperf_core::labcfg::parse_rate_bps(r.trim()).map_err(lab_error))
                .collect::<Result<_>>()?;
            let delays: Vec<u64> = a
                .delays
                .split(',')
                .map(|d| gridperf_core::labcfg::parse_delay_ns(d.trim()).map_err(lab_error))
                .collect::<Result<_>>()?;
            if !(1.0..=60.0).contains(&a.seconds) {
                return Err(Error::usage("--seconds takes 1 to 60"));
            }
            let mut points = Vec::new();
            for &rate in &rates {
                for &delay in &delays {
                    let label = format!("{} {}", fmt_bps(rate as f64), fmt_ns(delay as f64));
                    let p = lab::calibrate::point(rate, delay, a.seconds, &mut |phase| {
                        eprintln!("gridperf lab calibrate: {label}: {phase}")
                    })?;
                    points.push(p);
                }
            }
            if a.json {
                print(&json(&points)?)?;
            } else {
                print(&report::calibration(&points))?;
            }
            Ok(())
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => cmd_serve(a),
        Command::Rtt(a) => cmd_rtt(a),
        Command::Transfer(a) => cmd_transfer(a),
        Command::Stream(a) => cmd_stream(a),
        Command::Survey(a) => cmd_survey(a),
        Command::Tune(a) => cmd_tune(a),
        Command::Fanout(a) => cmd_fanout(a),
        Command::Runs(c) => cmd_runs(c),
        Command::Report(a) => cmd_report(a),
        Command::Lab(c) => cmd_lab(c),
    };
    if let Err(e) = result {
        let kind = match e.kind {
            Kind::Usage => "usage error",
            Kind::Network => "network error",
            Kind::Measurement => "measurement failed",
            Kind::Refused => "refused",
            Kind::Internal => "error",
        };
        eprintln!("gridperf: {kind}: {e}");
        std::process::exit(e.kind.exit_code());
    }
}
