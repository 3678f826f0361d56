//! The store's commands: `survey` (the main job, every point stored),
//! `runs` and `report`; each turned into its checked options.

use super::{db_path, duration, format, lab_error, Formatted};
use crate::commands::{self, survey::SurveySpec};
use crate::error::{Error, Result};
use crate::runner::{resolve, Network};
use crate::store::RunFilter;
use clap::{Args, Subcommand};
use gridperf_core::model::plan::{check_limits, parse_protos, parse_sizes};
use gridperf_core::model::Measure;
use gridperf_core::wire::DEFAULT_PORT;

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the conclusions as gridperf.survey/1 JSON (docs/json.md) instead of the tables")))]
pub struct SurveyArgs {
    /// Survey a real path instead of the lab: HOST[:PORT] of a `gridperf serve`, or `local` (loopback, no lab).
    pub host: Option<String>,
    /// A small sweep that takes about a minute and a half (16 sizes around the MTU multiples; a size stops once its best protocol is settled; long paths measured beside the others).
    #[arg(long)]
    pub quick: bool,
    /// Lab profiles to survey (gridperf lab profiles), default the first document's: loopback,crossover-fe,lan-gige,man,wan.
    #[arg(long, value_name = "LIST")]
    pub profiles: Option<String>,
    /// Protocols: tcp, udp, sendfile.
    #[arg(long = "proto", default_value = "tcp,udp,sendfile", value_name = "LIST")]
    pub protos: String,
    /// Message sizes, as rtt --sizes takes them (default: the quick or the full sweep).
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,
    /// Leave out the transfer-time measurements.
    #[arg(long)]
    pub no_transfer: bool,
    #[command(flatten)]
    pub db: DbArg,
    /// Where to write the report.
    #[arg(short, long, default_value = "gridperf-report.html", value_name = "FILE")]
    pub output: std::path::PathBuf,
    /// Go on with the latest unfinished survey of the same settings, skipping the points it stored.
    #[arg(long)]
    pub resume: bool,
    /// The agent's control port (with HOST).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Subcommand)]
pub enum RunsCommand {
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
pub struct DbArg {
    /// The results store: a SQLite file (default
    /// ~/.local/share/gridperf/results.db) or a PostgreSQL archive
    /// (postgres://USER@HOST/DB); GRIDPERF_DB when not given.
    #[arg(long, value_name = "PATH|DSN", global = true)]
    pub db: Option<std::path::PathBuf>,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print gridperf.runs/1 JSON (docs/json.md), each run with its headline figure")))]
pub struct RunsListArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Only runs of this measurement: rtt, transfer, stream, fanout, copy or trace.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only runs on this network (a lab profile, a host, or loopback: local, 127.0.0.1 and ::1 are loopback too).
    #[arg(long)]
    pub network: Option<String>,
    /// Only runs started in the last DURATION (e.g. 2h, 7d as 168h).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only the runs of this survey.
    #[arg(long)]
    pub survey: Option<i64>,
    /// Only the runs of this sweep (stream --sweep).
    #[arg(long)]
    pub sweep: Option<i64>,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the run and its points as JSON")))]
pub struct RunsOneArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub id: i64,
    #[command(flatten)]
    pub print: super::JsonArgs,
}

#[derive(Args)]
pub struct RunsCompareArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub a: i64,
    pub b: i64,
}

#[derive(Args)]
pub struct RunsExportArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub id: i64,
    /// json or csv.
    #[arg(long, default_value = "json")]
    pub format: String,
}

#[derive(Args)]
pub struct ReportArgs {
    /// Runs to draw (default: the latest survey or sweep, whichever is newer).
    pub runs: Vec<i64>,
    /// Draw this survey's runs.
    #[arg(long, conflicts_with = "sweep")]
    pub survey: Option<i64>,
    /// Draw this sweep's figures (stream --sweep; its id is printed at its end): throughput against the
    /// swept setting, a line per window (or other setting), a chart per profile, with the link's rate and
    /// each window's W/RTT drawn dashed.
    #[arg(long, conflicts_with = "runs")]
    pub sweep: Option<i64>,
    /// Draw the results pScheduler's postgresql archiver put into the archive's pscheduler_results table
    /// (any tool's: throughput and RTT over time per path, and a row per run).
    #[arg(long, conflicts_with_all = ["runs", "survey", "sweep"])]
    pub pscheduler: bool,
    #[command(flatten)]
    pub db: DbArg,
    #[arg(short, long, default_value = "gridperf-report.html", value_name = "FILE")]
    pub output: std::path::PathBuf,
    /// Also write every plot as an SVG file here.
    #[arg(long, value_name = "DIR")]
    pub svg_dir: Option<std::path::PathBuf>,
}

impl TryFrom<SurveyArgs> for commands::survey::Opts {
    type Error = Error;
    fn try_from(a: SurveyArgs) -> Result<Self> {
        use commands::survey::{transfer_plan, DOCUMENT_PROFILES, FULL_SIZES, QUICK_SIZES};
        let protos = parse_protos(&a.protos)?;
        let sizes = parse_sizes(a.sizes.as_deref().unwrap_or(if a.quick { QUICK_SIZES } else { FULL_SIZES }))?;
        check_limits(&protos, &sizes)?;
        let networks: Vec<Network> = match (&a.host, &a.profiles) {
            (Some(_), Some(_)) => return Err(Error::usage("give HOST or --profiles, not both")),
            (Some(h), None) if h == "local" => vec![Network::Local],
            (Some(h), None) => vec![Network::Host { addr: resolve(h, a.port)?, label: h.clone() }],
            (None, p) => {
                let list: Vec<String> = match p {
                    Some(p) => p.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
                    None => DOCUMENT_PROFILES.iter().map(|s| s.to_string()).collect(),
                };
                for name in &list {
                    gridperf_core::lab::cfg::profile(name).map_err(lab_error)?;
                }
                list.into_iter().map(|profile| Network::Lab { profile, sets: Vec::new() }).collect()
            }
        };
        let (transfer_sizes, transfer_total) = transfer_plan(a.quick, a.no_transfer);
        Ok(commands::survey::Opts {
            spec: SurveySpec { networks, protos, sizes, quick: a.quick, transfer_sizes, transfer_total },
            db: db_path(&a.db.db),
            output: a.output,
            resume: a.resume,
        })
    }
}

impl TryFrom<RunsCommand> for commands::runs::Opts {
    type Error = Error;
    fn try_from(c: RunsCommand) -> Result<Self> {
        use commands::runs::Opts;
        Ok(match c {
            RunsCommand::List(a) => Opts::List {
                db: db_path(&a.db.db),
                filter: RunFilter {
                    kind: a
                        .kind
                        .as_deref()
                        .map(|k| {
                            Measure::parse(k)
                                .ok_or_else(|| Error::usage(format!("--kind {k}: give one of {}", Measure::VALID)))
                        })
                        .transpose()?,
                    network: a.network.clone(),
                    since: a
                        .since
                        .as_deref()
                        .map(|s| duration(s, "--since").map(|d| crate::runner::unix_now() - d.as_secs_f64()))
                        .transpose()?,
                    survey: a.survey,
                    sweep: a.sweep,
                },
            },
            RunsCommand::Show(a) => Opts::Show { db: db_path(&a.db.db), id: a.id },
            RunsCommand::Compare(a) => Opts::Compare { db: db_path(&a.db.db), a: a.a, b: a.b },
            RunsCommand::Export(a) => {
                if a.format != "json" && a.format != "csv" {
                    return Err(Error::usage(format!("--format {}: give json or csv", a.format)));
                }
                Opts::Export { db: db_path(&a.db.db), id: a.id }
            }
            RunsCommand::Delete(a) => Opts::Delete { db: db_path(&a.db.db), id: a.id },
        })
    }
}

impl Formatted for RunsCommand {
    /// The output format the subcommand asks for.
    fn format(&self) -> commands::Format {
        match self {
            RunsCommand::List(a) => a.print.format(),
            RunsCommand::Show(a) | RunsCommand::Delete(a) => a.print.format(),
            RunsCommand::Compare(_) => format(false, false),
            RunsCommand::Export(a) => format(a.format == "json", a.format == "csv"),
        }
    }
}

impl TryFrom<ReportArgs> for commands::report::Opts {
    type Error = Error;
    fn try_from(a: ReportArgs) -> Result<Self> {
        Ok(commands::report::Opts {
            db: db_path(&a.db.db),
            runs: a.runs,
            survey: a.survey,
            sweep: a.sweep,
            pscheduler: a.pscheduler,
            output: a.output,
            svg_dir: a.svg_dir,
        })
    }
}
