//! `gridperf tune`'s arguments, turned into its checked options.

use super::{buffer, rate, seconds_or};
use crate::commands::tune::{HostRate, Opts, Source};
use crate::error::{Error, Result};
use crate::runner::resolve;
use clap::Args;
use gridperf_core::units::parse_duration_ns;
use gridperf_core::wire::DEFAULT_PORT;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("far_end").args(["host", "in_lab"])))]
#[command(mut_arg("json", |a| a.help("Print gridperf.tune/2 JSON (docs/json.md) instead of the table (iperf3's -J)")))]
pub struct TuneArgs {
    /// A `gridperf serve` agent at the far end: the RTT is measured with TCP probes, its settings read over the
    /// control channel, and both ends tuned.
    pub host: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT, requires = "host")]
    pub port: u16,
    /// The path's bottleneck rate: 100M, 1G, 10G.
    #[arg(long, allow_hyphen_values = true, value_name = "RATE")]
    pub rate: Option<String>,
    /// The path's round-trip time: 35ms, 270ms (with HOST: instead of measuring it).
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub rtt: Option<String>,
    /// With HOST: find the bottleneck rate with a short UDP stream (it floods the path for --probe-time).
    #[arg(long, requires = "host", conflicts_with = "rate")]
    pub measure_rate: bool,
    /// With HOST or --in-lab: measure how much of each end's buffers becomes window or data in flight (four TCP
    /// streams of 2 s, the buffers at their autotuning ceilings as far as net.core.*mem_max allow), instead of
    /// assuming the kernel's starting half.
    #[arg(long, requires = "far_end")]
    pub measure_share: bool,
    /// The congestion control the --measure-share probes use (default: the host's), as a stream would: cubic, bbr.
    #[arg(short = 'C', long, value_name = "NAME", requires = "measure_share")]
    pub congestion: Option<String>,
    /// The UDP rate --measure-rate offers (more than the path's rate, or the figure is a lower bound).
    #[arg(long, default_value = "2G", value_name = "RATE", requires = "measure_rate")]
    pub probe_rate: String,
    /// How long --measure-rate sends.
    #[arg(long, default_value = "2", value_name = "SECONDS", requires = "measure_rate")]
    pub probe_time: String,
    /// Take the rate and RTT from a lab profile (gridperf lab profiles); this host's settings.
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["rate", "rtt", "host"])]
    pub lab: Option<String>,
    /// A running lab (lab up --name NAME): its link's rate and RTT, its hosts' settings read in their namespaces.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["lab", "host"])]
    pub in_lab: Option<String>,
    /// With --in-lab: set the per-namespace changes in every host of the lab (global ones are named and left
    /// alone), then read them back (as root, or as the user whose rootless lab it is).
    #[arg(long, requires = "in_lab")]
    pub apply: bool,
    /// The socket buffer the application sets (SO_RCVBUF / SO_SNDBUF, iperf's -w), if it does.
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Write this host's changes as a sysctl.d file (for a lab, --apply sets them in its hosts).
    #[arg(long, value_name = "FILE", conflicts_with = "in_lab")]
    pub write_sysctl: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

impl TryFrom<TuneArgs> for Opts {
    type Error = Error;
    fn try_from(a: TuneArgs) -> Result<Opts> {
        let rate_bps = a.rate.as_deref().map(|r| rate(r, "--rate")).transpose()?;
        if rate_bps.is_some_and(|r| r > 1_000_000_000_000) {
            return Err(Error::usage("--rate: at most 1T (10^12 bits per second)"));
        }
        let rtt_ns = match a.rtt.as_deref() {
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
        let measure_rate = if a.measure_rate {
            let offer_bps = rate(&a.probe_rate, "--probe-rate")?;
            let secs = seconds_or(&a.probe_time, "--probe-time")?.as_secs();
            if !(1..=30).contains(&secs) {
                return Err(Error::usage("--probe-time takes 1 to 30 seconds"));
            }
            Some(HostRate::Measure { offer_bps, secs })
        } else {
            None
        };
        let source = match (&a.host, &a.in_lab, &a.lab) {
            (Some(h), _, _) => {
                let Some(rate) = rate_bps.map(HostRate::Given).or(measure_rate) else {
                    return Err(Error::usage(
                        "tune HOST needs the path's bottleneck rate: give --rate (e.g. 1G) or --measure-rate",
                    ));
                };
                Source::Host { addr: resolve(h, a.port)?, rate }
            }
            (None, Some(name), _) => Source::InLab(name.clone()),
            (None, None, Some(p)) => {
                let prof = gridperf_core::lab::cfg::profile(p).map_err(super::lab_error)?;
                let link = prof.settings().link_config().map_err(super::lab_error)?;
                let rate_bps = rate_bps
                    .or(link.rate_bps)
                    .ok_or_else(|| Error::usage(format!("profile {p} sets no rate: give --rate")))?;
                Source::Profile { name: p.clone(), rate_bps, rtt_ns: rtt_ns.unwrap_or(2 * link.delay_ns) }
            }
            (None, None, None) => match (rate_bps, rtt_ns) {
                (Some(rate_bps), Some(rtt_ns)) => Source::Given { rate_bps, rtt_ns },
                _ => {
                    return Err(Error::usage(
                        "give the path: --rate RATE --rtt DURATION (e.g. --rate 1G --rtt 35ms), --lab PROFILE, --in-lab NAME, or HOST",
                    ))
                }
            },
        };
        // --measure-share without HOST or --in-lab: clap's `requires` says so
        if a.measure_rate && !matches!(source, Source::Host { .. }) {
            return Err(Error::usage("--measure-rate probes an agent's path: give HOST"));
        }
        Ok(Opts {
            source,
            rate_bps,
            rtt_ns,
            measure_share: a.measure_share,
            congestion: a.congestion,
            apply: a.apply,
            app_buffer: buffer(&a.buffer, "--buffer")?,
            write_sysctl: a.write_sysctl,
        })
    }
}
