//! `gridperf lab`: bring a lab up and down, look at it, run a command in
//! one of its hosts, list the profiles, calibrate.

use super::{Format, Output};
use crate::error::{Error, Result};
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
        /// An earlier `lab status --json`: judge the span since it.
        since: Option<std::path::PathBuf>,
    },
    Exec {
        name: String,
        host: String,
        command: Vec<String>,
    },
    Profiles,
    /// Stop the whole lab `times` times for `length`, `every` apart.
    Pause {
        name: String,
        length: std::time::Duration,
        times: u32,
        every: std::time::Duration,
    },
    Calibrate {
        rates: Vec<u64>,
        delays: Vec<u64>,
        seconds: f64,
        /// Tries per point while it comes out INVALID.
        tries: u32,
    },
    /// The emulator process itself (started by `lab up`).
    Emulator {
        name: String,
    },
    /// A real path's profile, fitted from probes to an agent.
    Clone {
        addr: std::net::SocketAddr,
        opts: crate::engines::clone::CloneOptions,
        out: Option<std::path::PathBuf>,
        verify: bool,
        /// The lab this process runs in (lab exec), whose emulator judges the probes.
        watched: Option<String>,
        /// Where the clone is stored, as a run of kind clone.
        store: crate::store::StoreChoice,
    },
    /// A profile fitted from a stored run.
    CloneRun {
        db: std::path::PathBuf,
        id: i64,
        out: Option<std::path::PathBuf>,
    },
    /// A profile fitted from a packet capture.
    CloneCapture {
        file: std::path::PathBuf,
        out: Option<std::path::PathBuf>,
    },
}

/// A profile fitted from stored run `id`: a stream run's TCP streams, or
/// an rtt run's round trips.
fn clone_from_run(db: &std::path::Path, id: i64) -> Result<gridperf_core::lab::clone::CloneFile> {
    use crate::error::Error;
    use gridperf_core::lab::clone;
    if !crate::store::Store::exists(db) {
        return Err(Error::usage(format!("--from-run {id}: no store at {}", crate::store::shown(db))));
    }
    let store = crate::store::Store::open_existing(db)?;
    let run = store.run(id)?;
    let points = store.points(id)?;
    if run.kind == "clone" {
        // a stored clone is its own profile: given back as it was fitted,
        // with its comparison
        let of = |proto: &'static str| points.iter().filter(move |p| p.proto == proto).map(|p| p.figures.clone());
        let mut f: clone::CloneFile = of("clone-profile")
            .find_map(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| Error::usage(format!("--from-run {id}: the clone run kept no profile")))?;
        f.verify = of("clone-verify").filter_map(|v| serde_json::from_value(v).ok()).collect();
        return Ok(f);
    }
    let fitted = match run.kind.as_str() {
        "stream" => {
            let streams: Vec<gridperf_core::model::StreamResult> =
                points.iter().filter_map(|p| serde_json::from_value(p.figures.clone()).ok()).collect();
            clone::fit_from_stream(&streams)
        }
        "rtt" => {
            let figs: Vec<clone::RttPointFigures> = points
                .iter()
                .map(|p| clone::RttPointFigures {
                    proto: p.proto.clone(),
                    size: p.size,
                    samples_ns: p.samples.clone().unwrap_or_default(),
                    quartiles_ns: p.q1_ns.zip(p.median_ns).zip(p.q3_ns).map(|((a, b), c)| (a, b, c)),
                    sent: p.figures["sent"].as_u64().unwrap_or(0),
                    lost: p.figures["lost"].as_u64().unwrap_or(0),
                })
                .collect();
            clone::fit_from_rtt(&figs, run.mtu)
        }
        other => {
            Err(format!("run {id} is a {other} run: a clone fits from stream and rtt runs (a survey's rtt runs too), or gives back a stored clone"))
        }
    };
    let (profile, mut notes) = fitted.map_err(|e| Error::usage(format!("--from-run {id}: {e}")))?;
    if let Some(why) = &run.invalid {
        notes.push(format!("run {id} was INVALID ({why}): its figures may not be the path's"));
    }
    Ok(clone::CloneFile {
        schema: clone::SCHEMA.into(),
        source: clone::Source {
            host: run.target.clone(),
            date: format!("{}Z", render::utc(run.started).replace(' ', "T")),
            version: run.version.clone(),
            from: format!("run {id} ({} across {})", run.kind, run.network),
        },
        profile,
        notes,
        ..Default::default()
    })
}

/// Stores a clone from probes as a run of kind `clone`: its profile, the
/// real path's round trips and, with --verify, the clone's and each figure
/// side by side (`report` draws them).
fn store_clone(
    store: &crate::store::StoreChoice,
    f: &gridperf_core::lab::clone::CloneFile,
    clone_rtts: &[u64],
    watch: Option<crate::lab::LabWatch>,
    started: f64,
    out: &mut Output,
) -> Result<()> {
    use crate::store::{CloneRtt, NewRun, Recorder};
    let new_run = NewRun {
        survey_id: None,
        sweep_id: None,
        kind: gridperf_core::model::Measure::Clone,
        network: &f.source.host,
        target: &f.source.host,
        settings: serde_json::json!({ "source": f.source, "verify": !f.verify.is_empty() }),
        lab_profile: None,
        mtu: f.profile.ab.mtu.value.map(|m| m as u32),
    };
    let mut rec = Recorder::open(store, &new_run)?;
    rec.point(f)?;
    let real = f.measured.as_ref().map(|m| m.rtt_samples_ns.as_slice()).unwrap_or_default();
    if !real.is_empty() {
        rec.point(&CloneRtt { side: "real path", samples_ns: real })?;
    }
    if !clone_rtts.is_empty() {
        rec.point(&CloneRtt { side: "clone", samples_ns: clone_rtts })?;
    }
    for c in &f.verify {
        rec.point(c)?;
    }
    let env = gridperf_core::model::Environment {
        tool_version: crate::host::software(),
        command_line: std::env::args().collect(),
        started_unix: started,
        finished_unix: crate::host::unix_now(),
        target: f.source.host.clone(),
        client: crate::host::end_info(None, false),
        server: None,
        notes: f.notes.clone(),
        lab: watch.map(crate::lab::LabWatch::record),
        load: None,
    };
    if let Some(where_) = rec.finish(Ok(&env))? {
        out.note(&format!("gridperf: {where_}"));
    }
    Ok(())
}

/// Writes a clone's profile file.
fn write_profile(f: &gridperf_core::lab::clone::CloneFile, path: &std::path::Path) -> Result<()> {
    let text = serde_json::to_string_pretty(f).map_err(|e| crate::error::Error::internal(e.to_string()))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| crate::error::Error::usage(format!("cannot write the profile to {}: {e}", path.display())))
}

/// Prints a clone (its JSON, or its table and where its file went).
fn show_clone(
    f: &gridperf_core::lab::clone::CloneFile,
    file: Option<&std::path::Path>,
    out: &mut Output,
) -> Result<()> {
    out.render(&render::Shown::new(f, || render::lab::clone(f)))?;
    if let (Some(path), false) = (file, out.format == Format::Json) {
        out.note(&format!(
            "gridperf lab clone: profile written to {p}; bring it up with: gridperf lab up --profile-file {p}",
            p = path.display()
        ));
    }
    Ok(())
}

/// Runs a lab command; `lab exec` returns the exit status of what it ran.
// Long by design: one arm per `lab` subcommand, each a few lines over lab::.
pub fn run(o: Opts, out: &mut Output) -> Result<Option<i32>> {
    match o {
        Opts::Up(spec) => {
            if let Some(w) = lab::calibrate::advice_for(&spec) {
                eprintln!("gridperf: warning: {w}");
            }
            let st = lab::up(lab::calibrate::without_floor(*spec)?)?;
            let doc = serde_json::json!({ "schema": LAB_SCHEMA, "lab": st, "health": null });
            out.render(&render::Shown::new(&doc, || render::lab::status(&st, None)))?;
        }
        Opts::Down { name } => {
            let was = lab::down(&name)?;
            out.note(&format!(
                "gridperf lab: {name} {}",
                if was { "is down" } else { "was not up; cleaned what it left" }
            ));
        }
        Opts::Pause { name, length, times, every } => {
            for k in 0..times {
                if k > 0 {
                    std::thread::sleep(every.saturating_sub(length));
                }
                let n = lab::pause(&name, length)?;
                out.note(&format!("gridperf lab: {name} paused for {length:?}: {n} processes stopped and resumed"));
            }
        }
        Opts::Status { name, since: None } => {
            let st = lab::running(&name)?;
            let health = lab::health(&name);
            let doc = serde_json::json!({ "schema": LAB_SCHEMA, "lab": st, "health": health });
            out.render(&render::Shown::new(&doc, || render::lab::status(&st, health.as_ref())))?;
        }
        Opts::Status { name, since: Some(file) } => {
            lab::running(&name)?;
            let before = earlier_health(&file)?;
            // judged as a run across the lab is (LabWatch: the emulator's next write read)
            let record = crate::lab::LabWatch::since(&name, before).record();
            let doc = serde_json::json!({ "schema": LAB_SCHEMA, "since": record });
            out.render(&render::Shown::new(&doc, || render::lab::verdict(&record)))?;
            if record.invalid.is_some() {
                return Ok(Some(crate::error::Kind::Measurement.exit_code()));
            }
        }
        Opts::Exec { name, host, command } => {
            let st = lab::exec(&name, &host, &command)?;
            return Ok(Some(st.code().unwrap_or(1)));
        }
        Opts::Profiles => {
            let profiles = gridperf_core::lab::cfg::profiles();
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
            let doc = serde_json::json!({ "schema": LAB_PROFILES_SCHEMA, "profiles": rows });
            out.render(&render::Shown::new(&doc, || render::lab::profiles(&profiles)))?;
        }
        Opts::Emulator { name } => lab::emulator_main(&name)?,
        Opts::Clone { addr, opts, out: file, verify, watched, store } => {
            let started = crate::host::unix_now();
            let watch = watched.as_deref().map(crate::lab::LabWatch::start);
            let bar = out.bar();
            // the path's five probes, then with --verify the TCP streams, and both again on the clone
            bar.set_length(if verify { 2 * (5 + crate::engines::clone::TCP_STEPS) } else { 5 });
            let mut step = 0;
            let mut say = |m: &str| {
                bar.set_position(step);
                bar.set_message(m.to_string());
                step += 1;
            };
            // across a lab (lab exec), its emulator's health judges the probes
            let target = crate::runner::Target { lab: watched, ..crate::runner::Target::remote(addr) };
            let mut f = crate::engines::clone::run(&target, &opts, &mut say)?;
            f.source.date = format!("{}Z", render::utc(crate::host::unix_now()).replace(' ', "T"));
            let write = write_profile;
            if let Some(path) = &file {
                write(&f, path)?;
            }
            if verify {
                crate::engines::clone::add_tcp(&mut f, &target, opts.deadlines, &mut say)?;
                // the clone, brought up from the profile as --lab FILE would
                let own = std::env::temp_dir().join(format!("gridperf-clone-{}.json", std::process::id()));
                let path = file.clone().unwrap_or(own.clone());
                write(&f, &path)?;
                let lab = crate::runner::Network::Lab { profile: path.display().to_string(), sets: Vec::new() };
                let measured = (|| {
                    let prepared = lab.prepare("cv", None, Default::default())?;
                    let o = crate::engines::clone::CloneOptions { host: "the clone".into(), ..opts.clone() };
                    let mut c = crate::engines::clone::run(&prepared.target, &o, &mut say)?;
                    crate::engines::clone::add_tcp(&mut c, &prepared.target, opts.deadlines, &mut say)?;
                    Ok::<_, crate::error::Error>(c)
                })();
                if file.is_none() {
                    let _ = std::fs::remove_file(&own);
                }
                let measured = measured?;
                f.verify = gridperf_core::lab::clone::compare(&f, &measured);
                if let Some(path) = &file {
                    write(&f, path)?;
                }
                let lab_rtts = measured.measured.map(|m| m.rtt_samples_ns).unwrap_or_default();
                store_clone(&store, &f, &lab_rtts, watch, started, out)?;
            } else {
                store_clone(&store, &f, &[], watch, started, out)?;
            }
            bar.set_position(step);
            bar.finish_and_clear();
            show_clone(&f, file.as_deref(), out)?;
        }
        Opts::CloneRun { db, id, out: to } => {
            let f = clone_from_run(&db, id)?;
            if let Some(path) = &to {
                write_profile(&f, path)?;
            }
            show_clone(&f, to.as_deref(), out)?;
        }
        Opts::CloneCapture { file, out: to } => {
            let bar = out.byte_bar();
            let report = super::trace::analyse(&file, std::time::Duration::from_millis(100), None, Some(&bar))?;
            bar.finish_and_clear();
            let (profile, notes) = gridperf_core::lab::clone::fit_from_trace(&report)
                .map_err(|e| crate::error::Error::measurement(format!("lab clone --from-capture: {e}")))?;
            let f = gridperf_core::lab::clone::CloneFile {
                schema: gridperf_core::lab::clone::SCHEMA.into(),
                source: gridperf_core::lab::clone::Source {
                    host: report.connections.first().map(|c| c.b.clone()).unwrap_or_default(),
                    date: format!("{}Z", render::utc(report.start_unix_s).replace(' ', "T")),
                    version: env!("CARGO_PKG_VERSION").into(),
                    from: format!("capture {}", file.display()),
                },
                profile,
                notes,
                ..Default::default()
            };
            if let Some(path) = &to {
                write_profile(&f, path)?;
            }
            show_clone(&f, to.as_deref(), out)?;
        }
        Opts::Calibrate { rates, delays, seconds, tries } => {
            let mut points = Vec::new();
            for &rate in &rates {
                for &delay in &delays {
                    let label = format!("{} {}", fmt_bps(rate as f64), fmt_ns(delay as f64));
                    let mut say = |phase: &str| eprintln!("gridperf lab calibrate: {label}: {phase}");
                    points.push(lab::calibrate::point_tried(rate, delay, seconds, tries, &mut say)?);
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
            let doc = serde_json::json!({ "schema": LAB_CALIBRATION_SCHEMA, "points": points });
            out.render(&render::Shown::new(&doc, || render::lab::calibration(&points)))?;
        }
    }
    Ok(None)
}

/// The emulator's health in an earlier `lab status --json`, saved to `file`.
fn earlier_health(file: &std::path::Path) -> Result<lab::emulator::Health> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| Error::usage(format!("--since {shown}: {e}")))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::usage(format!("--since {shown}: not the JSON of `lab status --json`: {e}")))?;
    match doc.get("health") {
        Some(h) if !h.is_null() => serde_json::from_value(h.clone())
            .map_err(|e| Error::usage(format!("--since {shown}: its \"health\" is not the emulator's health: {e}"))),
        _ => Err(Error::usage(format!(
            "--since {shown}: no \"health\" in it: save `gridperf lab status --name NAME --json` there \
             before the run (a loopback lab has no emulator to judge)"
        ))),
    }
}
