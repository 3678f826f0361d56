//! `gridperf lab`'s arguments: a lab's settings from a profile, flags and
//! overrides, each direction and access link checked, into the spec `lab
//! up` brings up; the other subcommands' options.

use super::{lab_error, parse_hosts, Formatted};
use crate::commands::{self, Format};
use crate::error::{Error, Result};
use crate::lab::LabSpec;
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum LabCommand {
    /// Bring a lab up: a profile (lab profiles) or explicit settings, or a profile with --set overrides.
    #[command(after_help = "Examples:\n  \
        gridperf lab up --profile man                       the first document's 3 km MAN\n  \
        gridperf lab up --rate 1G --rtt 20ms --queue 1bdp   a gigabit path at 20 ms\n  \
        gridperf lab up --profile wan --set loss=1% --set burst=3\n  \
        gridperf lab up --profile baltic --sysctl net.ipv4.tcp_rmem=\"4096 87380 174760\"\n  \
        gridperf lab exec a -- gridperf rtt 10.77.2.1       measure across it from host a to host b\n\n\
        Hosts: a (10.77.1.1) and b (10.77.2.1), or a1.., b1.. with --hosts NxM; each is a network namespace.\n\
        As root they are named gp-NAME-HOST, so `ip netns exec gp-default-a CMD` works too. Any other user's\n\
        lab is rootless: its namespaces live in a user namespace of the user's own, held by the emulator,\n\
        and only `gridperf lab exec` (as the same user) enters them; the emulator then runs at normal\n\
        priority instead of SCHED_FIFO (lab calibrate says what that costs).")]
    Up(Box<LabUpArgs>),
    /// Stop a lab and remove its namespaces, devices and emulator (also after a crash).
    Down(LabNameArg),
    /// A lab's settings, hosts and live counters.
    Status(LabStatusArgs),
    /// Run a command on a lab host: gridperf lab exec a -- CMD ARGS...
    Exec(LabExecArgs),
    /// Stop the whole lab (its emulator and every process of its hosts) for a while, as a hypervisor
    /// pausing the machine would: to see what a pause does to a run, and how the run is judged.
    #[command(after_help = "Examples:\n  \
        gridperf lab pause --for 30ms                       one 30 ms pause of the default lab\n  \
        gridperf lab pause --name x --for 20ms --times 3 --every 1s\n\n\
        Each pause is written to the lab's state directory first, so the emulator lays the hold-up at\n\
        lab pause's door. The rule: packets that fell due while the whole lab was paused are not the\n\
        emulator's lag (no host ran to read them sooner); the pause's time is, as it is time the link\n\
        carried nothing. A run is INVALID when its pauses and other hold-ups took more than 1% of it, or\n\
        one pause lasted 200 ms or more (TCP's retransmission timers ran out meanwhile).")]
    Pause(LabPauseArgs),
    /// The built-in profiles: the source documents' networks.
    Profiles(LabProfilesArgs),
    /// Measure the lab's fidelity on this machine: rate error, added delay error, queue bound, emulator CPU.
    Calibrate(LabCalibrateArgs),
    /// Measure a real path through a gridperf agent and fit a lab profile to it: rate, delay, jitter,
    /// loss and its bursts, queue and MTU, each way, each with its interval.
    #[command(after_help = "Examples:\n  \
        gridperf lab clone far.example.org --out far.json   measure (60 s, at most 2.5 Gbit/s of UDP load)\n  \
        gridperf lab up --profile-file far.json             bring the path up in the lab\n  \
        gridperf stream --lab far.json -P 4                 or run across it directly\n\n\
        The far end runs `gridperf serve`; the probes use its key (--key) and limits, and wait in its queue\n\
        with --queue. For about 10% of the budget each way a UDP stream of --max-rate overruns the path, so\n\
        the path is flooded briefly: ask its owner first. A bottleneck above --max-rate is reported as a\n\
        lower bound. Loss rarer than about 3 in the datagrams the budget sends is reported as an upper\n\
        bound. The file's format: docs/clone.md.")]
    Clone(LabCloneArgs),
    /// The emulator process itself (started by lab up).
    #[command(hide = true)]
    Emulator(LabNameArg),
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the clone as JSON (gridperf.clone/1, the profile file's format: docs/json.md)")))]
#[command(mut_arg("db", |a| a.help("The results store: where --from-run reads, and where a clone from probes is \
    stored (a run of kind clone: the profile, the round trips and, with --verify, the comparison; `gridperf report` \
    draws it). Else GRIDPERF_DB or the default")))]
#[command(mut_arg("no_store", |a| a.help("Do not store the clone").conflicts_with_all(["from_run", "from_capture"])))]
pub struct LabCloneArgs {
    /// The far end: a host running `gridperf serve`.
    #[arg(required_unless_present_any = ["from_capture", "from_run"])]
    pub host: Option<String>,
    /// Fit from a stored run instead of probes: a stream run (its TCP_INFO timelines: rate, delay,
    /// queue, MTU) or an rtt run, a survey's too (delay, jitter, UDP's loss); a stored clone run is
    /// given back as it was (with --out: its profile file again); see `runs list`.
    #[arg(long, value_name = "ID", conflicts_with_all = ["host", "verify", "from_capture"])]
    pub from_run: Option<i64>,
    #[command(flatten)]
    pub store: super::StoreArgs,
    /// Fit from a packet capture (pcap or pcapng, e.g. `stream --capture`'s) instead of probes: the
    /// rate, delay, queue and MTU its TCP data shows; what it cannot show is left empty, with why.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["host", "verify"])]
    pub from_capture: Option<std::path::PathBuf>,
    /// The agent's control port.
    #[arg(short = 'p', long, default_value_t = gridperf_core::wire::DEFAULT_PORT)]
    pub port: u16,
    /// The time budget for all the probes, 20s to 600s.
    #[arg(long = "time", default_value = "60s", value_name = "DURATION")]
    pub time: String,
    /// The most UDP load the rate probe offers, each way, in IP bits per second.
    #[arg(long, default_value = "2.5G", value_name = "RATE")]
    pub max_rate: String,
    /// Write the profile to FILE (for lab up --profile-file, or --lab FILE).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Wait this long in the agent's queue when it is busy (e.g. 30s); by default fail at once.
    #[arg(long, value_name = "DURATION")]
    pub queue: Option<String>,
    /// Then bring the clone up in a lab, run the same probes and one and four CUBIC streams through
    /// both, and print the real path and the clone side by side with the clone's errors.
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
pub struct LabNameArg {
    /// Which lab (one lab named "default" unless you name them).
    #[arg(long, default_value = "default")]
    pub name: String,
}

#[derive(Args)]
pub struct LabUpArgs {
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Start from a profile (see lab profiles).
    #[arg(long, conflicts_with = "profile_file")]
    pub profile: Option<String>,
    /// Start from a profile file: a path cloned with `gridperf lab clone --out FILE` (docs/clone.md).
    #[arg(long, value_name = "FILE")]
    pub profile_file: Option<std::path::PathBuf>,
    /// Bottleneck rate in bits per second, decimal SI: 100M, 1G (= 10^9), 622Mbit.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    pub rate: Option<String>,
    /// One-way delay per direction, as netem's: 10ms, 250us.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "rtt")]
    pub delay: Option<String>,
    /// Round-trip time, split evenly over both directions: 20ms.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub rtt: Option<String>,
    /// Jitter: a duration and optional distribution, 1ms (uniform +-1ms), 2ms/normal (sigma) or
    /// 1ms/exponential (a long tail of late packets: the mean added). A profile file may carry an
    /// empirical table (`jitter_table_s`, what `lab clone` fits from a right-skewed path).
    #[arg(long, allow_hyphen_values = true, value_name = "J")]
    pub jitter: Option<String>,
    /// Let jitter reorder packets (off by default: packets keep their order).
    #[arg(long)]
    pub reorder: bool,
    /// Random loss per direction: 1% or 0.01.
    #[arg(long, allow_hyphen_values = true, value_name = "P")]
    pub loss: Option<String>,
    /// Make loss bursty: the mean burst length in packets (Gilbert-Elliott), e.g. 3.
    #[arg(long, value_name = "PACKETS")]
    pub burst: Option<String>,
    /// Bottleneck queue: packets (1000pkt), bytes as dd (256KB, 256KiB) or BDP multiples (1.5bdp), or unlimited.
    #[arg(long, value_name = "Q")]
    pub queue: Option<String>,
    /// MTU of every host's interface (576 to 65535).
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<String>,
    /// Override one field of the profile: rate, delay, rtt, jitter, loss, burst, queue, mtu, reorder (repeat).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub sets: Vec<String>,
    /// Like --set, for the A-to-B direction only (an asymmetric path), e.g. --set-ab rate=20M.
    #[arg(long = "set-ab", value_name = "FIELD=VALUE")]
    pub sets_ab: Vec<String>,
    /// Like --set, for the B-to-A direction only (the ACK path of a transfer from A), e.g. --set-ba loss=1%.
    #[arg(long = "set-ba", value_name = "FIELD=VALUE")]
    pub sets_ba: Vec<String>,
    /// An access link for every host, or for one (HOST:...): comma-separated fields as --set takes them,
    /// e.g. --access rate=100M,delay=1ms or --access a2:rate=10M (repeat).
    #[arg(long = "access", value_name = "[HOST:]FIELD=VALUE,...")]
    pub access: Vec<String>,
    /// The bottleneck as N parallel paths (a link aggregate or ECMP group, 1 to 16): each connection's
    /// 5-tuple is hashed onto one path, so a new connection (a new source port) may take another.
    /// The link's rate is shared equally among them, e.g. --paths 4 makes 1G into 4 x 250M.
    #[arg(long = "paths", value_name = "N", default_value_t = 1)]
    pub paths: usize,
    /// One path's own settings, path K from 1, comma-separated as --set takes them, both directions:
    /// e.g. --path 2:loss=1% or --path 3:rate=100M (repeat).
    #[arg(long = "path", value_name = "K:FIELD=VALUE,...")]
    pub path_sets: Vec<String>,
    /// Hosts on each side of the bottleneck: 1x1 (a, b) or NxM (a1..aN, b1..bM), at most 8x8.
    #[arg(long, default_value = "1x1", value_name = "NxM")]
    pub hosts: String,
    /// Seed of the loss and jitter generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A per-namespace sysctl for every host, e.g. an old kernel's buffers:
    /// --sysctl net.ipv4.tcp_rmem="4096 87380 174760" (repeat). Global ones are refused.
    #[arg(long = "sysctl", value_name = "NAME=VALUE")]
    pub sysctls: Vec<String>,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
pub struct LabStatusArgs {
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Judge the emulator over the span since an earlier `lab status
    /// --json` saved to FILE, by the rule every run across a lab is judged
    /// by: valid (with how long it was held up, if at all), or INVALID,
    /// why and what caused it; exits 4 if INVALID. For runs of other
    /// tools across the lab (a peer's copy under `lab exec`):
    /// `lab status --json > before.json; ...; lab status --since before.json`.
    #[arg(long, value_name = "FILE")]
    pub since: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
pub struct LabPauseArgs {
    #[arg(long, default_value = "default")]
    pub name: String,
    /// How long each pause lasts: 1ms to 10s.
    #[arg(long = "for", value_name = "DURATION", default_value = "30ms")]
    pub length: String,
    /// How many pauses.
    #[arg(long, default_value_t = 1)]
    pub times: u32,
    /// From the start of one pause to the start of the next.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub every: String,
}

#[derive(Args)]
pub struct LabExecArgs {
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The host: a, b, or a1, b2, ... in a dumbbell.
    pub host: String,
    /// The command and its arguments, after --.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct LabCalibrateArgs {
    /// Link rates to calibrate at.
    #[arg(long, default_value = "100M,1G", value_name = "LIST")]
    pub rates: String,
    /// One-way delays to calibrate at.
    #[arg(long, default_value = "25ms,150ms", value_name = "LIST")]
    pub delays: String,
    /// Seconds of overload per point for the rate and queue measurements.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Tries per point, at most: a point that comes out INVALID (the emulator held up, by the
    /// machine or by other tasks) is measured again, as the survey's points are, and the earlier
    /// tries' verdicts are kept beside it (1 to 5; 1: never again).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub tries: u32,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
pub struct LabProfilesArgs {
    #[command(flatten)]
    pub print: super::JsonArgs,
}

/// Each direction's settings (a to b, b to a) from the profile, profile
/// file or nothing, with the flags and --set overrides on both, and the
/// settings in words.
type Both = (gridperf_core::lab::cfg::LabSettings, gridperf_core::lab::cfg::LabSettings, String);

fn lab_settings(a: &LabUpArgs) -> Result<Both> {
    use gridperf_core::lab::cfg;
    let (mut s, mut s_ba, mut words) = match (&a.profile, &a.profile_file) {
        (Some(p), _) => {
            let prof = cfg::profile(p).map_err(lab_error)?;
            (prof.settings(), prof.settings(), vec![format!("profile {} ({})", prof.name, prof.source)])
        }
        (None, Some(f)) => crate::lab::run::profile_file(f)?,
        (None, None) => (cfg::LabSettings::default(), cfg::LabSettings::default(), Vec::new()),
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
        cfg::apply_set(&mut s, set).map_err(lab_error)?;
        cfg::apply_set(&mut s_ba, set).map_err(lab_error)?;
        words.push(set.clone());
    }
    Ok((s, s_ba, words.join(", ")))
}

impl TryFrom<LabUpArgs> for LabSpec {
    type Error = Error;
    fn try_from(a: LabUpArgs) -> Result<LabSpec> {
        let (settings, settings_ba, mut description) = lab_settings(&a)?;
        let direction = |base: &gridperf_core::lab::cfg::LabSettings,
                         sets: &[String],
                         tag: &str,
                         description: &mut String|
         -> Result<_> {
            let mut s = base.clone();
            for set in sets {
                gridperf_core::lab::cfg::apply_set(&mut s, set).map_err(lab_error)?;
                description.push_str(&format!(", {tag} {set}"));
            }
            if s.mtu != settings.mtu {
                return Err(Error::usage("the MTU is the hosts' own: set it with --mtu or --set, not per direction"));
            }
            Ok(s)
        };
        let (ab_set, ba_set) = (
            direction(&settings, &a.sets_ab, "a->b", &mut description)?,
            direction(&settings_ba, &a.sets_ba, "b->a", &mut description)?,
        );
        let (ab, ba) = (ab_set.link_config().map_err(lab_error)?, ba_set.link_config().map_err(lab_error)?);
        let n_paths = gridperf_core::lab::cfg::parse_paths(&a.paths.to_string()).map_err(lab_error)?;
        let own = a
            .path_sets
            .iter()
            .map(|p| gridperf_core::lab::cfg::parse_path_set(p).map_err(lab_error))
            .collect::<Result<Vec<_>>>()?;
        let paths_ab = crate::lab::run::paths_of(&ab_set, n_paths, &own)?;
        let paths_ba = crate::lab::run::paths_of(&ba_set, n_paths, &own)?;
        if n_paths > 1 {
            description.push_str(&format!(", {n_paths} paths"));
            for p in &a.path_sets {
                description.push_str(&format!(", path {p}"));
            }
        }
        let loopback = a.profile.as_deref() == Some("loopback");
        if loopback
            && (ab != gridperf_core::lab::emu::LinkConfig::default() || ab != ba || a.hosts != "1x1" || n_paths > 1)
        {
            return Err(Error::usage(
                "the loopback profile has no link to shape and two hosts on one lo: only --mtu applies to it",
            ));
        }
        let mtu_given = a.mtu.is_some() || a.sets.iter().any(|s| s.starts_with("mtu="));
        let host_shape = parse_hosts(&a.hosts)?;
        let host_names: Vec<String> = crate::lab::hosts(&a.name, host_shape).into_iter().map(|h| h.name).collect();
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
            let mut s = gridperf_core::lab::cfg::LabSettings::default();
            for f in fields.split(',').filter(|f| !f.trim().is_empty()) {
                if f.trim().starts_with("mtu=") {
                    return Err(Error::usage("--access: the MTU is the hosts' own: set it with --mtu"));
                }
                gridperf_core::lab::cfg::apply_set(&mut s, f.trim()).map_err(lab_error)?;
            }
            description.push_str(&format!(", access {spec}"));
            access.push((host, s.link_config().map_err(lab_error)?));
        }
        if loopback && !access.is_empty() {
            return Err(Error::usage("the loopback profile has no links, so no access links either"));
        }
        let spec = LabSpec {
            name: a.name.clone(),
            hosts: host_shape,
            mtu: if loopback && !mtu_given { 0 } else { settings.mtu },
            loopback,
            access,
            ab,
            ba,
            seed: a.seed,
            paths: paths_ab.into_iter().zip(paths_ba).collect(),
            profile: a.profile.clone(),
            owner: None,
            floor_ns: None,
            sysctls: a
                .sysctls
                .iter()
                .map(|l| crate::lab::host_sysctl(l).map_err(|e| Error::usage(format!("--sysctl {e}"))))
                .collect::<Result<_>>()?,
            description: if description.is_empty() {
                "no impairment".into()
            } else {
                description.trim_start_matches(", ").to_string()
            },
        };
        Ok(spec)
    }
}

impl Formatted for LabCommand {
    /// The output format the subcommand asks for.
    fn format(&self) -> Format {
        match self {
            LabCommand::Up(a) => a.print.format(),
            LabCommand::Status(a) => a.print.format(),
            LabCommand::Profiles(a) => a.print.format(),
            LabCommand::Calibrate(a) => a.print.format(),
            LabCommand::Clone(a) => a.print.format(),
            _ => Format::Table,
        }
    }
}

impl TryFrom<LabCommand> for commands::lab::Opts {
    type Error = Error;
    fn try_from(c: LabCommand) -> Result<Self> {
        use commands::lab::Opts;
        Ok(match c {
            LabCommand::Up(a) => Opts::Up(Box::new(LabSpec::try_from(*a)?)),
            LabCommand::Down(a) => Opts::Down { name: a.name },
            LabCommand::Status(a) => Opts::Status { name: a.name, since: a.since },
            LabCommand::Exec(a) => Opts::Exec { name: a.name, host: a.host, command: a.command },
            LabCommand::Pause(a) => {
                let length = super::duration(&a.length, "--for")?;
                let every = super::duration(&a.every, "--every")?;
                let ms = std::time::Duration::from_millis;
                if !(ms(1)..=ms(10_000)).contains(&length) {
                    return Err(Error::usage(format!("--for {}: a pause lasts 1ms to 10s", a.length)));
                }
                if !(1..=1000).contains(&a.times) {
                    return Err(Error::usage(format!("--times {}: 1 to 1000 pauses", a.times)));
                }
                if a.times > 1 && every <= length {
                    return Err(Error::usage(format!(
                        "--every {} is not longer than --for {}: the lab must run between pauses",
                        a.every, a.length
                    )));
                }
                Opts::Pause { name: a.name, length, times: a.times, every }
            }
            LabCommand::Profiles(_) => Opts::Profiles,
            LabCommand::Emulator(a) => Opts::Emulator { name: a.name },
            LabCommand::Clone(a) if a.from_run.is_some() => {
                Opts::CloneRun { db: super::db_path(&a.store.db), id: a.from_run.unwrap_or_default(), out: a.out }
            }
            LabCommand::Clone(a) if a.from_capture.is_some() => {
                Opts::CloneCapture { file: a.from_capture.unwrap_or_default(), out: a.out }
            }
            LabCommand::Clone(a) => {
                let host = a.host.unwrap_or_default();
                let budget = super::duration(&a.time, "--time")?;
                if !(std::time::Duration::from_secs(20)..=std::time::Duration::from_secs(600)).contains(&budget) {
                    return Err(Error::usage(format!("--time {}: the budget takes 20s to 600s", a.time)));
                }
                let max_rate_bps = gridperf_core::lab::cfg::parse_rate_bps(&a.max_rate).map_err(lab_error)?;
                let addr = crate::runner::resolve(&host, a.port)?;
                let deadlines = crate::runner::Deadlines {
                    connect: std::time::Duration::from_secs(5),
                    control: std::time::Duration::from_secs(10),
                    message: std::time::Duration::from_secs(2),
                    queue: match &a.queue {
                        Some(q) => super::duration(q, "--queue")?,
                        None => std::time::Duration::ZERO,
                    },
                };
                Opts::Clone {
                    addr,
                    opts: crate::engines::clone::CloneOptions { host, deadlines, budget, max_rate_bps },
                    out: a.out,
                    verify: a.verify,
                    watched: super::watched_lab(),
                    store: a.store.choice(),
                }
            }
            LabCommand::Calibrate(a) => {
                let rates: Vec<u64> = a
                    .rates
                    .split(',')
                    .map(|r| gridperf_core::lab::cfg::parse_rate_bps(r.trim()).map_err(lab_error))
                    .collect::<Result<_>>()?;
                let delays: Vec<u64> = a
                    .delays
                    .split(',')
                    .map(|d| gridperf_core::lab::cfg::parse_delay_ns(d.trim()).map_err(lab_error))
                    .collect::<Result<_>>()?;
                if !(1.0..=60.0).contains(&a.seconds) {
                    return Err(Error::usage("--seconds takes 1 to 60"));
                }
                if !(1..=5).contains(&a.tries) {
                    return Err(Error::usage(format!("--tries takes 1 to 5, not {}", a.tries)));
                }
                Opts::Calibrate { rates, delays, seconds: a.seconds, tries: a.tries }
            }
        })
    }
}
