//! `gridperf lab`: bring a lab up and down, look at it, run a command in
//! one of its hosts, list the profiles, calibrate.

use super::{Format, Output};
use crate::error::Result;
use crate::lab::{self, LabSpec};
use crate::render;
use gridperf_core::model::{LAB_CALIBRATION_SCHEMA, LAB_PROFILES_SCHEMA, LAB_SCHEMA};
use gridperf_core::units::{fmt_bps, fmt_ns};

/// What `gridperf lab` does, checked.
#[derive(Debug, Clone)]
pub enum Opts {
    Up(Box<LabSpec>),
    Down {
        name: String,
    },
    Status {
        name: String,
    },
    Exec {
        name: String,
        host: String,
        command: Vec<String>,
    },
    Profiles,
    Calibrate {
        rates: Vec<u64>,
        delays: Vec<u64>,
        seconds: f64,
    },
    /// The emulator process itself (started by `lab up`).
    Emulator {
        name: String,
    },
}

/// Runs a lab command; `lab exec` returns the exit status of what it ran.
pub fn run(o: Opts, out: &mut Output) -> Result<Option<i32>> {
    match o {
        Opts::Up(spec) => {
            if let Some(w) = lab::calibrate::advice_for(&spec) {
                eprintln!("gridperf: warning: {w}");
            }
            let st = lab::up(*spec)?;
            match out.format {
                Format::Json => out.json(&serde_json::json!({ "schema": LAB_SCHEMA, "lab": st, "health": null }))?,
                _ => out.print(&render::lab::status(&st, None))?,
            }
        }
        Opts::Down { name } => {
            let was = lab::down(&name)?;
            out.note(&format!(
                "gridperf lab: {name} {}",
                if was { "is down" } else { "was not up; cleaned what it left" }
            ));
        }
        Opts::Status { name } => {
            let st = lab::running(&name)?;
            let health = lab::health(&name);
            match out.format {
                Format::Json => out.json(&serde_json::json!({ "schema": LAB_SCHEMA, "lab": st, "health": health }))?,
                _ => out.print(&render::lab::status(&st, health.as_ref()))?,
            }
        }
        Opts::Exec { name, host, command } => {
            let st = lab::exec(&name, &host, &command)?;
            return Ok(Some(st.code().unwrap_or(1)));
        }
        Opts::Profiles => {
            let profiles = gridperf_core::labcfg::profiles();
            match out.format {
                Format::Json => {
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
                    out.json(&serde_json::json!({ "schema": LAB_PROFILES_SCHEMA, "profiles": rows }))?
                }
                _ => out.print(&render::lab::profiles(&profiles))?,
            }
        }
        Opts::Emulator { name } => lab::emulator_main(&name)?,
        Opts::Calibrate { rates, delays, seconds } => {
            let mut points = Vec::new();
            for &rate in &rates {
                for &delay in &delays {
                    let label = format!("{} {}", fmt_bps(rate as f64), fmt_ns(delay as f64));
                    let mut say = |phase: &str| eprintln!("gridperf lab calibrate: {label}: {phase}");
                    points.push(lab::calibrate::point(rate, delay, seconds, &mut say)?);
                }
            }
            // kept, so that a lab beyond what this machine can emulate is said before its run
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            let at = format!("{} UTC", render::utc(now));
            match lab::calibrate::keep(&points, crate::host::is_root(), &at) {
                Ok(path) => {
                    eprintln!("gridperf lab calibrate: kept in {} for the labs that come after", path.display())
                }
                Err(e) => eprintln!("gridperf lab calibrate: warning: not kept: {e}"),
            }
            match out.format {
                Format::Json => out.json(&serde_json::json!({ "schema": LAB_CALIBRATION_SCHEMA, "points": points }))?,
                _ => out.print(&render::lab::calibration(&points))?,
            }
        }
    }
    Ok(None)
}
