//! The command line: clap's definitions, one file per family of commands,
//! and each command's arguments turned into its checked options
//! (`TryFrom`, in the same file), so that every range and combination a
//! user can get wrong is checked here, once, with a message that says what
//! is valid. The options are the `Opts` of each `commands` module.

pub mod copy;
pub mod lab;
pub mod measure;
pub mod serve;
pub mod store;
pub mod trace;
pub mod tune;

use crate::error::{Error, Result};
use clap::{Parser, Subcommand};
use gridperf_core::units::{parse_bytes, parse_duration_ns};
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gridperf",
    version,
    args_override_self = true,
    about = "Measure, emulate and move data across LAN, MAN and WAN networks",
    long_about = "gridperf compares TCP, UDP and zero-copy sendfile by round-trip and transfer time across message sizes, \
                  with full distributions. Without a HOST it starts its own agent on loopback, so you can try it with no set-up:\n\n  \
                  gridperf rtt\n\nAgainst another host, run `gridperf serve` there first.\n\n\
                  Exit codes: 0 ok, 1 internal error, 2 usage error, 3 network or peer error, 4 no valid measurement, 5 refused by the agent."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The key to prove to an agent that asks for one (serve --auth); default ~/.config/gridperf/key if it exists.
    #[arg(long, global = true, value_name = "FILE")]
    pub key: Option<std::path::PathBuf>,
    /// With --key: still use an agent that asks for no key (by default one
    /// that does not prove it holds the key is refused: not the agent meant).
    #[arg(long, global = true)]
    pub insecure: bool,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the agent other hosts measure against and copy through: it answers rtt, transfer, stream, fanout
    /// and copy (push, pull, third-party), and exports /metrics with --metrics.
    #[command(after_help = "Examples:\n  \
        gridperf serve                                   [::]:5301, IPv4 and IPv6 clients\n  \
        gridperf serve --bind 10.0.0.2 --port 6000 --max-tests 2\n  \
        gridperf serve --once                            one test, then exit\n\n\
        A client that finds every test slot taken is told \"busy\" at once, unless it asked to wait (rtt --queue 30s).\n\
        SIGINT or SIGTERM stops the agent cleanly; a second one exits at once.")]
    Serve(Box<serve::ServeArgs>),
    /// Round-trip time per protocol and message size (Hockney ping-pong): S bytes out, S bytes back.
    #[command(after_help = "Examples:\n  \
        gridperf rtt --cpu 0                                  all protocols, both ends on CPU 0\n  \
        gridperf rtt --proto tcp,udp --sizes 1,64,1k..64k*2   a list and a geometric range\n  \
        gridperf rtt --busy-poll --cpu 0,1                    spinning ends on two CPUs\n  \
        gridperf rtt --nodelay off --writes 2 --sizes 2000    the Nagle x delayed-ACK stall (~40 ms)\n  \
        gridperf rtt --loopback-mtu 1500 --sizes 1000..6000+250   Ethernet MTU on loopback\n  \
        gridperf rtt 192.0.2.7 --json                         against `gridperf serve` on that host\n\n\
        Times are full round trips, never halved. See docs/json.md for the --json schema.")]
    Rtt(measure::RttArgs),
    /// Transfer time of the first document's Table 1: a total moved in messages of each size, each echoed.
    #[command(after_help = "Examples:\n  \
        gridperf transfer --cpu 0 --sizes 1k,1460,4k,16k,64000   1024 x 1000 bytes per run, 10 runs per point\n  \
        gridperf transfer --total 10MB --repeat 5 --proto tcp,sendfile 192.0.2.7\n\n\
        The rate is payload bytes sent one way per run / the median run time; every byte also came back.")]
    Transfer(measure::TransferArgs),
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
    Stream(Box<measure::StreamArgs>),
    /// The many-to-one producer/consumer benchmark (Gigabit/Myrinet study), its four variants, and deadlock detection.
    #[command(after_help = "Examples:\n  \
        gridperf fanout                                     every variant, 2 consumers, messages 1..4096, sizes 256..8192\n  \
        gridperf fanout --variant original --size 4096 -w 64k   the document's deadlock, with 64 KiB buffers\n  \
        gridperf fanout --variant all --nodes 2,4 --messages 1,16,256,4096 --csv\n\n\
        Bandwidth = 2 x MAX x messages x nodes x size / time over MAX (--repeat) repetitions, in bits per second.\n\
        A point where no byte moves for --watchdog is reported as DEADLOCK, with who was blocked in which call\n\
        and the bytes queued in every socket; the connections are torn down and the sweep goes on.")]
    Fanout(measure::FanoutArgs),
    /// Move files across the network in blocks over parallel streams, each block verified as it arrives, resumable.
    #[command(after_help = "Examples:\n  \
        gridperf copy run1/ dtn2:incoming/                push a directory to `gridperf serve --root DIR` there\n  \
        gridperf copy dtn2:archive/big.dat ./             pull a file beneath that agent's root\n  \
        gridperf copy -P 8 -w 32M big.dat dtn2:in/        8 streams, 32 MB socket buffers\n  \
        gridperf copy --resume run1/ dtn2:incoming/       after an interruption: what arrived is hashed again, kept\n  \
        gridperf copy /data/a.dat /scratch/b.dat          disk to disk on this host, through an agent of this process\n\n\
        A file is written as .NAME.gridperf-partial beside its destination, with a journal of its verified blocks\n\
        (.NAME.gridperf-manifest), and renamed into place only when every block is verified; its BLAKE3 is printed.\n\
        A partial file is always resumed: each block the journal names is hashed again and kept only if it still holds.\n\
        Exit codes: 0 every file in place, 4 some files not (the summary says which and why).")]
    Copy(Box<copy::CopyArgs>),
    /// A packet capture's TCP connections over time (throughput, in flight, the receiver's window, RTT,
    /// retransmissions) and why each was slow, in `stream`'s words, from the capture alone.
    #[command(after_help = "Examples:\n  \
        gridperf trace run.pcap                          every connection, and a verdict per direction\n  \
        gridperf trace run.pcapng --filter :5201         only the connections with port 5201\n  \
        gridperf trace run.pcap --csv > series.csv       the time series (in flight, window, bytes acknowledged)\n  \
        gridperf trace run.pcap -i 1s --json             one point a second, gridperf.trace/1\n\n\
        In flight is the highest sequence sent minus the highest acknowledged, less what the receiver SACKed, as\n\
        seen at the capture point; the window is the receiver's, scaled by the scale its SYN carried. RTT samples\n\
        are a segment's first sending to the ACK that covers it (Karn's rule): from the sender's side, the path's\n\
        round trip; from the receiver's side, only its own delay (the handshake says which).")]
    Trace(trace::TraceArgs),
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
    Tune(tune::TuneArgs),
    /// The main job: rtt and transfer for TCP, UDP and sendfile on the documents' networks (a lab for each),
    /// every point stored, then the report and the best-protocol table.
    #[command(after_help = "Examples:\n  \
        gridperf survey --quick                      the first document's five networks, a small sweep, in the lab (no root needed)\n  \
        gridperf survey                              the full sweep (1 B, then 128 B to 64000 B)\n  \
        gridperf survey --profiles man,wan --proto tcp,udp --sizes 1,1k,16k\n  \
        gridperf survey local --quick                loopback in this process: no lab\n  \
        gridperf survey 192.0.2.7                    a real path to `gridperf serve` there\n  \
        gridperf survey --quick --resume             go on with an interrupted survey, skipping stored points\n\n\
        Results go to the store (--db, default ~/.local/share/gridperf/results.db); the report to -o.")]
    Survey(store::SurveyArgs),
    /// The stored runs: list, show, compare, export, delete.
    #[command(subcommand)]
    Runs(store::RunsCommand),
    /// Draw stored runs into one self-contained HTML file (inline SVG), or SVG files.
    #[command(after_help = "Examples:\n  \
        gridperf report                              the latest survey, to gridperf-report.html\n  \
        gridperf report 12 13 -o cmp.html            runs 12 and 13\n  \
        gridperf report --survey 3 --svg-dir plots   the plots also as SVG files\n  \
        gridperf report --pscheduler --db postgres://archive.example/gridperf   what pScheduler's archiver put there")]
    Report(store::ReportArgs),
    /// Emulated networks on this machine: hosts in network namespaces joined by a user-space link emulator.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Shell completions: gridperf completions bash > /etc/bash_completion.d/gridperf (or zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:\n  \
        gridperf completions bash > ~/.local/share/bash-completion/completions/gridperf\n  \
        gridperf completions zsh > ~/.zfunc/_gridperf")]
    Completions(CompletionsArgs),
    /// Make a key for agents that serve only clients with one (serve --auth).
    #[command(after_help = "Examples:\n  \
        gridperf keygen alice@site-a                      writes ~/.config/gridperf/key (0600), prints the agent's line\n  \
        gridperf keygen ci -o ci.key >> authorized        a key file of its own; its line into the agent's file\n\n\
        The agent's operator adds the printed line to the file given to `gridperf serve --auth FILE` (0600: the\n\
        line is a secret shared by the two ends). The client proves it holds the key, and the agent proves it\n\
        holds it too, without sending it (BLAKE3 keyed MACs over a fresh challenge: a recorded answer is no\n\
        use on another connection).")]
    Keygen(KeygenArgs),
    /// gridperf as a perfSONAR pScheduler tool: the six methods pScheduler runs, JSON on stdin and stdout.
    #[command(after_help = "Examples:\n  \
        gridperf pscheduler enumerate\n  \
        echo '{\"type\":\"throughput\",\"spec\":{\"dest\":\"dtn2\",\"parallel\":4}}' | gridperf pscheduler can-run\n  \
        gridperf pscheduler run < input.json            the measurement, as pScheduler runs it\n\n\
        Tests: throughput (gridperf stream), rtt (gridperf rtt, UDP echoes) and disk-to-disk (gridperf copy from\n\
        gridperf://HOST[:PORT]/PATH or HOST:PATH), each against a `gridperf serve` agent at the other end. Results\n\
        are in each test's own result schema; a bad input exits non-zero with the reason on stderr.\n\
        pscheduler/ in the source tree holds the tool's directory of one-line executables and its packaging notes.")]
    Pscheduler(PschedulerArgs),
    /// Manual pages: gridperf.1 on stdout, or one page per command into --dir.
    #[command(after_help = "Examples:\n  \
        gridperf man | man -l -\n  \
        gridperf man --dir ~/.local/share/man/man1")]
    Man(ManArgs),
}

impl Command {
    /// Whether the command talks to agents as a client (and so may need a key).
    pub fn reaches_agents(&self) -> bool {
        matches!(
            self,
            Command::Rtt(_)
                | Command::Transfer(_)
                | Command::Stream(_)
                | Command::Fanout(_)
                | Command::Copy(_)
                | Command::Tune(_)
                | Command::Survey(_)
                | Command::Lab(lab::LabCommand::Clone(_))
        )
    }

    /// What the command does with labs: `main` prepares the process's user
    /// namespace for it while it is still single-threaded.
    pub fn namespaces(&self) -> crate::lab::Namespaces {
        use crate::lab::Namespaces;
        let own = |yes: bool| if yes { Namespaces::Own } else { Namespaces::None };
        match self {
            Command::Rtt(a) => own(a.echo.across.lab.is_some() || a.echo.loopback_mtu.is_some()),
            Command::Transfer(a) => own(a.echo.across.lab.is_some() || a.echo.loopback_mtu.is_some()),
            // a sweep over profiles (and every preset) brings labs up without --lab
            Command::Stream(a) => own(a.across.lab.is_some()
                || a.preset.is_some()
                || a.sweep.iter().any(|s| s.trim_start().starts_with("profile="))),
            Command::Fanout(a) => own(a.across.lab.is_some()),
            Command::Copy(a) => own(a.across.lab.is_some()),
            Command::Tune(a) => a.in_lab.clone().map_or(Namespaces::None, Namespaces::OfLab),
            Command::Survey(_) => Namespaces::Own,
            Command::Lab(lab::LabCommand::Up(_) | lab::LabCommand::Calibrate(_)) => Namespaces::Own,
            Command::Lab(lab::LabCommand::Exec(a)) => Namespaces::OfLab(a.name.clone()),
            Command::Lab(lab::LabCommand::Clone(a)) => own(a.verify),
            _ => Namespaces::None,
        }
    }
}

#[derive(clap::Args)]
pub struct PschedulerArgs {
    /// The method pScheduler calls: enumerate, can-run, duration, participant-data, run, merged-results.
    #[arg(value_enum)]
    pub method: crate::commands::pscheduler::Method,
}

impl TryFrom<PschedulerArgs> for crate::commands::pscheduler::Opts {
    type Error = Error;
    fn try_from(a: PschedulerArgs) -> Result<Self> {
        Ok(crate::commands::pscheduler::Opts { method: a.method })
    }
}

#[derive(clap::Args)]
pub struct KeygenArgs {
    /// The key's name, as the agent's log and refusals show it: 1 to 64 letters, digits, - _ . @
    pub name: String,
    /// Where to write the key (0600); default ~/.config/gridperf/key. An existing file is not overwritten.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Write gridperf.1 and a page per command (gridperf-rtt.1, ...) here instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

/// The first sentence of a flag's help, for `-h` (`--help` gives it all):
/// up to a sentence's end (". " before a capital) or "; ", and when that is
/// still long, up to its first parenthesis or colon after a few words.
pub fn first_sentence(help: &str) -> &str {
    let text = help.trim();
    let bytes = text.as_bytes();
    let mut end = text.len();
    for (i, w) in text.char_indices() {
        let next_upper = bytes.get(i + 2).is_some_and(|b| b.is_ascii_uppercase());
        if (w == '.' && bytes.get(i + 1) == Some(&b' ') && next_upper) || (w == ';' && bytes.get(i + 1) == Some(&b' '))
        {
            end = i;
            break;
        }
    }
    let mut short = &text[..end];
    if short.len() > SHORT_HELP {
        if let Some(cut) =
            [" (", ": "].iter().filter_map(|sep| short.get(16..).and_then(|rest| rest.find(sep)).map(|k| k + 16)).min()
        {
            short = &short[..cut];
        }
    }
    short.trim_end_matches('.')
}

/// Longer than this, a first sentence is cut further for `-h`.
const SHORT_HELP: usize = 80;

/// The command line's definition, `-h` short and `--help` long: each flag's
/// `-h` help is its first sentence, the whole text its `--help`.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    fn shorten(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let Some(help) = a.get_help().map(|h| h.to_string()) else { return a };
            if a.get_long_help().is_some() {
                return a;
            }
            let short = first_sentence(&help).to_string();
            if short.len() == help.trim().trim_end_matches('.').len() {
                return a;
            }
            a.help(short).long_help(help)
        })
        .mut_subcommands(shorten)
    }
    shorten(Cli::command())
}

/// The command line parsed, with [`command`]'s short and long help.
pub fn parse(args: &[std::ffi::OsString]) -> std::result::Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gridperf", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The manual pages: (file name, roff), gridperf.1 first, then one per command.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    use clap::CommandFactory;
    let render = |cmd: clap::Command| -> Result<Vec<u8>> {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out).map_err(|e| Error::internal(format!("man page: {e}")))?;
        Ok(out)
    };
    let top = Cli::command();
    let mut pages = vec![("gridperf.1".to_string(), render(top.clone())?)];
    for sub in top.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("gridperf-{}", sub.get_name());
        pages.push((format!("{name}.1"), render(sub.clone().name(name))?));
    }
    Ok(pages)
}

/// A duration with a unit, more than zero.
pub fn duration(s: &str, what: &'static str) -> Result<Duration> {
    let ns = parse_duration_ns(s, what)?;
    if ns == 0 {
        return Err(Error::usage(format!("{what} must be more than zero")));
    }
    Ok(Duration::from_nanos(ns))
}

/// The longest duration any flag takes, in seconds (as the unit parser's
/// 10^18 ns): beyond it a figure would overflow the milliseconds and
/// nanoseconds it becomes. Each command's own limit is then checked.
const MAX_SECONDS: f64 = 1e9;

/// A duration where a bare number means seconds (as iperf's -t).
pub fn seconds_or(s: &str, what: &'static str) -> Result<Duration> {
    if s.trim_start().starts_with('-') {
        return Err(Error::usage(format!("{what} {s}: a duration cannot be negative")));
    }
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v <= MAX_SECONDS => Ok(Duration::from_secs_f64(v.max(0.0))),
        Ok(v) if !v.is_nan() => Err(Error::usage(format!(
            "{what} {s}: too long (at most {MAX_SECONDS:e} s; each command states its own, shorter limit)"
        ))),
        _ => Ok(Duration::from_nanos(parse_duration_ns(s, what)?)),
    }
}

/// A duration more than zero where a bare number means seconds (as iperf's -t).
pub fn positive_seconds(s: &str, what: &'static str) -> Result<Duration> {
    let d = seconds_or(s, what)?;
    if d.is_zero() {
        return Err(Error::usage(format!("{what} must be more than zero")));
    }
    Ok(d)
}

/// A rate in bits per second, decimal SI (1G = 10^9).
pub fn rate(s: &str, what: &str) -> Result<u64> {
    if s.trim_start().starts_with('-') {
        return Err(Error::usage(format!("{what} {s}: a rate cannot be negative")));
    }
    gridperf_core::lab::cfg::parse_rate_bps(s).map_err(|e| Error::usage(format!("{what}: {e}")))
}

/// A socket buffer size: 1 byte to 1 GiB.
pub fn buffer(s: &Option<String>, what: &'static str) -> Result<Option<u64>> {
    match s {
        None => Ok(None),
        Some(s) => {
            let b = parse_bytes(s, what)?;
            if b == 0 || b > gridperf_core::wire::MAX_BUFFER {
                return Err(Error::usage(format!("{what} {s}: give 1 byte to 1 GiB")));
            }
            Ok(Some(b))
        }
    }
}

/// `--cpu C` (both ends on CPU C) or `C,S` (client on C, agent on S).
pub fn parse_cpus(s: &str) -> Result<(usize, usize)> {
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

/// A lab's hosts per side, `NxM`, 1 to 8 each.
pub fn parse_hosts(s: &str) -> Result<(usize, usize)> {
    let bad = || Error::usage(format!("--hosts {s:?}: give NxM hosts per side, 1 to 8 each, e.g. 1x1 or 2x2"));
    let (a, b) = s.split_once('x').ok_or_else(bad)?;
    let a: usize = a.parse().map_err(|_| bad())?;
    let b: usize = b.parse().map_err(|_| bad())?;
    if !(1..=8).contains(&a) || !(1..=8).contains(&b) {
        return Err(bad());
    }
    Ok((a, b))
}

pub fn lab_error(e: gridperf_core::lab::cfg::LabError) -> Error {
    Error::usage(e.to_string())
}

/// What a flag of another tool's means in gridperf, for one clap did not
/// know (`arg`, given to `command`): iperf3's -c and -s, scp's and cp's -r,
/// rsync's -a. None for a flag of no tool gridperf knows of.
pub fn peer_habit(command: Option<&str>, arg: &str) -> Option<String> {
    let flag = arg.split('=').next().unwrap_or(arg);
    let host_first = "gridperf takes the host as an argument, not after a flag: gridperf stream HOST (iperf3 -c \
                      HOST), gridperf rtt HOST; the other end runs `gridperf serve`";
    Some(match (command, flag) {
        (_, "-c" | "--client") => host_first.to_string(),
        (_, "-s" | "--server" | "-D" | "--daemon") => {
            "the server is `gridperf serve` (iperf3 -s): run it on the other host; `gridperf serve --help` says \
             how to limit and secure it"
                .to_string()
        }
        (Some("copy"), "-r" | "-R" | "--recursive" | "-a" | "--archive") => {
            "a directory is copied with everything in it: no -r is needed (gridperf copy DIR HOST:PATH); links, \
             devices and pipes are listed and left out, never followed"
                .to_string()
        }
        (Some("copy"), "-e" | "--rsh") => {
            "gridperf copy has no ssh: run `gridperf serve --root DIR` on the host and give HOST:PATH".to_string()
        }
        (Some("rtt" | "transfer"), "-u" | "--udp") => {
            "rtt and transfer measure every protocol at once: --proto udp (or tcp,udp,sendfile)".to_string()
        }
        _ => return None,
    })
}

/// A lab brought up for the run, as every command that can run across one takes it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LabArgs {
    /// Run across a lab of this profile (gridperf lab profiles) or profile file (lab clone --out), brought up
    /// for the run and taken down after it, also on an error or Ctrl-C: this end on host a (a1), the far end
    /// on host b (b1.., one per consumer for fanout; a copy's agent writes beneath its local destination).
    #[arg(long, value_name = "PROFILE")]
    pub lab: Option<String>,
    /// Override one field of the --lab profile, as lab up --set takes it: rate=1G, rtt=20ms, loss=1%; or give
    /// every host a per-namespace sysctl, e.g. a 2.6.9 kernel's buffers: net.ipv4.tcp_rmem="4096 87380 174760"
    /// (repeat).
    #[arg(long = "lab-set", value_name = "FIELD=VALUE", requires = "lab")]
    pub sets: Vec<String>,
}

/// Where a measurement's results go, as every measuring command takes it.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// The results store: a SQLite file (default
    /// ~/.local/share/gridperf/results.db) or a PostgreSQL archive
    /// (postgres://USER@HOST/DB); GRIDPERF_DB when not given.
    #[arg(long, value_name = "PATH|DSN")]
    pub db: Option<std::path::PathBuf>,
    /// Do not store the results.
    #[arg(long, conflicts_with = "db")]
    pub no_store: bool,
}

impl StoreArgs {
    pub fn choice(&self) -> crate::store::StoreChoice {
        crate::store::StoreChoice::new(self.db.clone(), self.no_store)
    }
}

/// The results store: the one given (--db, else GRIDPERF_DB), or the default.
pub fn db_path(p: &Option<std::path::PathBuf>) -> std::path::PathBuf {
    crate::store::named(p.clone()).unwrap_or_else(crate::store::default_path)
}

/// The lab this process runs in, when `gridperf lab exec` started it.
pub fn watched_lab() -> Option<String> {
    std::env::var(crate::lab::LAB_ENV).ok().filter(|n| !n.is_empty())
}

/// The output format a command's flags ask for.
pub fn format(json: bool, csv: bool) -> crate::commands::Format {
    match (json, csv) {
        (true, _) => crate::commands::Format::Json,
        (_, true) => crate::commands::Format::Csv,
        _ => crate::commands::Format::Table,
    }
}

/// How a command with a table, JSON and CSV prints its results; each
/// command names its own schema in `--help` (`mut_arg("json", ...)`).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct FormatArgs {
    /// Print JSON (its schema in docs/json.md) instead of the table (iperf3's -J).
    #[arg(short = 'J', long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
}

/// How a command with a table and JSON prints its results.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct JsonArgs {
    /// Print JSON (its schema in docs/json.md) instead of the table (iperf3's -J).
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// The format a command's arguments ask for: the one way it is chosen (`main`).
pub trait Formatted {
    fn format(&self) -> crate::commands::Format;
}

impl Formatted for FormatArgs {
    fn format(&self) -> crate::commands::Format {
        format(self.json, self.csv)
    }
}

impl Formatted for JsonArgs {
    fn format(&self) -> crate::commands::Format {
        format(self.json, false)
    }
}

/// Each command's format, from its flattened group.
macro_rules! formatted_by {
    ($($t:ty => $($field:ident).+;)*) => {$(
        impl Formatted for $t {
            fn format(&self) -> crate::commands::Format {
                self.$($field).+.format()
            }
        }
    )*};
}

formatted_by! {
    measure::RttArgs => echo.print;
    measure::TransferArgs => echo.print;
    measure::StreamArgs => print;
    measure::FanoutArgs => print;
    copy::CopyArgs => print;
    tune::TuneArgs => print;
    trace::TraceArgs => print;
    store::SurveyArgs => print;
}

/// The commands that print only their table (or a page, a pScheduler document).
macro_rules! table_only {
    ($($t:ty),*) => {$(
        impl Formatted for $t {
            fn format(&self) -> crate::commands::Format {
                crate::commands::Format::Table
            }
        }
    )*};
}

table_only!(serve::ServeArgs, store::ReportArgs, PschedulerArgs);

#[cfg(test)]
mod tests {
    use super::first_sentence;

    #[test]
    fn the_first_sentence_is_what_dash_h_shows() {
        assert_eq!(
            first_sentence("The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT. Without it, gridperf starts"),
            "The agent: HOST, HOST:PORT, an IPv6 literal or [V6]:PORT"
        );
        // "e.g. 1" is no sentence's end; a long first sentence stops at its parenthesis
        assert_eq!(
            first_sentence(
                "Message sizes: a list of sizes and ranges, e.g. 1,64,1k..64k*2 (factor) or 1..16k+256 (step)"
            ),
            "Message sizes: a list of sizes and ranges, e.g. 1,64,1k..64k*2"
        );
        assert_eq!(
            first_sentence("Pin the ends: C pins both to CPU C; C,S pins the client"),
            "Pin the ends: C pins both to CPU C"
        );
        assert_eq!(first_sentence("Do not store this run."), "Do not store this run");
        assert_eq!(first_sentence(""), "");
    }
}
