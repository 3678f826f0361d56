//! `gridperf copy SRC... DEST`: files moved in blocks over several
//! streams, each block verified as it arrives, resumable. HOST:PATH names
//! a file beneath a `gridperf serve --root` agent's root; two local paths
//! copy through an agent of this process rooted at the destination.

use super::Output;
use crate::agent::LocalAgent;
use crate::engines::copy::{self as dp, CopyOptions, Job, SourceFile};
use crate::error::{Error, Result};
use crate::runner::Target;
use crate::store::{NewRun, Recorder, StoreChoice};
use gridperf_core::model::{CopyReport, Measure};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// One end of a copy as the user named it.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// A path on this host.
    Local(PathBuf),
    /// A path beneath an agent's root: the agent's address, the host as
    /// typed, the path.
    Remote { addr: SocketAddr, host: String, path: String },
}

/// An agent's file as the user named it: the agent's address, the host as
/// typed, the path beneath its root.
pub type AgentPath = (SocketAddr, String, String);

/// Which way a copy goes, as the user's ends make it; every shape check
/// is made in `cli/copy.rs` before anything runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// This host sends local files: to an agent's root, or (a local
    /// destination) through an agent of this process or a lab's.
    Push { sources: Vec<PathBuf>, dest: End },
    /// One agent sends what paths beneath its root hold; this host writes
    /// beneath `dest`.
    Pull { addr: SocketAddr, paths: Vec<String>, dest: PathBuf },
    /// Agents send straight to agents: host pairs, one destination or one per source.
    Pairs { sources: Vec<AgentPath>, dests: Vec<AgentPath> },
}

/// What `gridperf copy` runs, checked.
pub struct Opts {
    pub shape: Shape,
    /// The ends as the user named them, for the report.
    pub source_words: String,
    pub dest_words: String,
    pub copy: CopyOptions,
    pub store: StoreChoice,
    /// JSON lines on stdout as the copy runs (as iperf3's --json-stream):
    /// each interval, each event of the pool, then the whole result.
    pub json_stream: bool,
    /// Test seam: the writing end damages this block (counted from 1).
    pub fault_flip_block: Option<u64>,
    /// Across a lab of this profile (with these overrides): both paths local.
    pub lab: Option<(String, Vec<String>)>,
    /// A line a second with each stream's rate.
    pub verbose: bool,
    /// The lab this host is one of (`lab exec` says so): a copy to an
    /// agent on another of its hosts is judged by the lab's emulator, as
    /// every run across a lab is.
    pub watched: Option<String>,
}

/// The local files under `path` (the file itself, or a directory's), each
/// named by its path from `path`'s parent, and what was skipped.
fn local_sources(path: &Path) -> Result<(Vec<SourceFile>, Vec<dp::Skipped>)> {
    let full = std::fs::canonicalize(path).map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    let parent = full.parent().unwrap_or(Path::new("/"));
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::usage(format!("{}: give a file or a directory, not /", path.display())))?;
    let dir: OwnedFd =
        std::fs::File::open(parent).map_err(|e| Error::usage(format!("{}: {e}", parent.display())))?.into();
    dp::expand(&dir, &name, gridperf_core::wire::MAX_COPY_FILES as usize)
        .map_err(|e| Error::usage(format!("{}: {e}", path.display())))
}

/// Where files go beneath a destination path: a directory (it ends in '/',
/// it is empty, or `many`), or the one file's own name.
fn dest_names(dest: &str, many: bool) -> (String, Option<String>) {
    let trimmed = dest.trim_end_matches('/').to_string();
    if dest.is_empty() || dest.ends_with('/') || many {
        (trimmed, None)
    } else {
        (String::new(), Some(trimmed))
    }
}

/// Where a listed file (`p`, from the named source's parent) goes beneath
/// an agent's root given the destination path there: beneath a directory
/// (the path ends in '/', or is empty, or the source was a directory:
/// its files' paths have a '/'), else at the path itself.
fn place_beneath(dest: &str, p: &str) -> String {
    if dest.is_empty() || dest.ends_with('/') || p.contains('/') {
        join(dest.trim_end_matches('/'), p)
    } else {
        dest.to_string()
    }
}

fn join(dir: &str, rest: &str) -> String {
    if dir.is_empty() {
        rest.to_string()
    } else {
        format!("{dir}/{rest}")
    }
}

/// Two sources that land on one destination are refused before anything
/// moves: written into one file, they would make a file of both.
pub(crate) fn refuse_named_twice<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let twice = gridperf_core::copy::named_twice(names);
    let mut twice: Vec<&str> = twice.into_iter().collect();
    twice.sort_unstable();
    match twice.first() {
        None => Ok(()),
        Some(first) => Err(Error::usage(format!(
            "{} of the sources go to one destination ({first}{}): one destination takes one source; copy them \
             into different directories",
            if twice.len() == 1 { "two".to_string() } else { format!("{} pairs", twice.len()) },
            if twice.len() > 1 { ", ..." } else { "" }
        ))),
    }
}

/// What a copy runs: one agent and this host, or host pairs of agents.
enum Work {
    Direct(Target, Job),
    Pairs(crate::engines::copy::pairs::Pairs),
}

/// What a copy keeps running until it ends: the agent of this process (a
/// local copy), or the lab brought up for it. Held, never read: dropping
/// it stops the agent or takes the lab down.
#[allow(dead_code)]
enum Keep {
    Nothing,
    Agent(LocalAgent),
    Lab(Box<crate::runner::Prepared>),
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    o.store.check()?;
    if let Some(n) = o.fault_flip_block {
        dp::FLIP_BLOCK.store(n, std::sync::atomic::Ordering::SeqCst);
    }
    let (work, network, _keep) = match &o.shape {
        Shape::Pairs { sources, dests } => (pairs_work(&o, sources, dests), host_network(dests[0].0), Keep::Nothing),
        Shape::Pull { addr, paths, dest } => (pull_work(&o, *addr, paths, dest)?, host_network(*addr), Keep::Nothing),
        Shape::Push { sources, dest } => push_work(&o, sources, dest, out)?,
    };
    let result = watched(work, &o, out);
    let r = record(&o, &network, result, out)?;
    tell(&o, &r, out)
}

fn host_network(addr: SocketAddr) -> String {
    crate::runner::Network::Host { addr, label: addr.to_string() }.name()
}

/// A copy between agents.
fn pairs_work(o: &Opts, sources: &[AgentPath], dests: &[AgentPath]) -> Work {
    Work::Pairs(crate::engines::copy::pairs::Pairs {
        sources: sources.to_vec(),
        dests: dests.to_vec(),
        place: place_beneath,
        source: o.source_words.clone(),
        destination: o.dest_words.clone(),
        watched: o.watched.clone(),
    })
}

/// A pull into `dest`: a directory (several sources, an existing
/// directory, a path ending in '/'), or the one file's own name.
fn pull_work(o: &Opts, addr: SocketAddr, paths: &[String], dest: &Path) -> Result<Work> {
    let many = paths.len() > 1 || dest.is_dir() || dest.as_os_str().to_string_lossy().ends_with('/');
    let (dir, file) = if many {
        std::fs::create_dir_all(dest).map_err(|e| Error::usage(format!("{}: {e}", dest.display())))?;
        (dest.to_path_buf(), None)
    } else {
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
        (parent.to_path_buf(), name)
    };
    let root: OwnedFd = std::fs::File::open(&dir).map_err(|e| Error::usage(format!("{}: {e}", dir.display())))?.into();
    let place: Box<dyn Fn(&str) -> String> = match file {
        // one file named: it takes the destination's name
        Some(name) => Box::new(move |p: &str| if p.contains('/') { p.to_string() } else { name.clone() }),
        None => Box::new(|p: &str| p.to_string()),
    };
    let job = Job::Pull {
        names: paths.to_vec(),
        dest: root,
        place,
        source: o.source_words.clone(),
        destination: o.dest_words.clone(),
    };
    Ok(Work::Direct(Target { lab: o.watched.clone(), ..Target::remote(addr) }, job))
}

/// A push of local files: to an agent's root, or to a local destination
/// through an agent of this process rooted there (or the lab's, on its
/// host b). The work, its network's name, and what must keep running.
fn push_work(o: &Opts, paths: &[PathBuf], dest: &End, out: &mut Output) -> Result<(Work, String, Keep)> {
    let mut sources = Vec::new();
    let mut skipped = Vec::new();
    for p in paths {
        let (found, skip) = local_sources(p)?;
        sources.extend(found);
        skipped.extend(skip);
    }
    let many = paths.len() > 1 || paths.iter().any(|p| p.is_dir());
    let (target, dest_path, network, keep) = match dest {
        End::Remote { addr, path, .. } => {
            let target = Target { lab: o.watched.clone(), ..Target::remote(*addr) };
            (target, path.clone(), host_network(*addr), Keep::Nothing)
        }
        End::Local(d) => {
            let is_dir = many || d.is_dir() || d.as_os_str().to_string_lossy().ends_with('/');
            let (root, name) = if is_dir {
                std::fs::create_dir_all(d).map_err(|e| Error::usage(format!("{}: {e}", d.display())))?;
                (d.clone(), String::new())
            } else {
                let parent = d.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                (parent.to_path_buf(), d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            };
            let root = std::fs::canonicalize(&root).map_err(|e| Error::usage(format!("{}: {e}", root.display())))?;
            let (target, network, keep) = local_agent(o, root)?;
            (target, if is_dir { String::new() } else { name }, network, keep)
        }
    };
    let (dir, file) = dest_names(&dest_path, many || dest_path.is_empty());
    for s in &mut sources {
        s.info.path = match &file {
            Some(name) => name.clone(),
            None => join(&dir, &s.info.path),
        };
    }
    refuse_named_twice(sources.iter().map(|s| s.info.path.as_str()))?;
    for (path, why) in &skipped {
        out.note(&format!("gridperf copy: skipped {path}: {why}"));
    }
    let job = Job::Push { sources, skipped, source: o.source_words.clone(), destination: o.dest_words.clone() };
    Ok((Work::Direct(target, job), network, keep))
}

/// The agent a local copy writes through, rooted at `root`: the lab's (it
/// takes files from the lab's own addresses only), or one of this process.
fn local_agent(o: &Opts, root: PathBuf) -> Result<(Target, String, Keep)> {
    match &o.lab {
        Some((profile, sets)) => {
            let net = crate::runner::Network::Lab { profile: profile.clone(), sets: sets.clone() };
            let serving = crate::lab::run::Serving { root: Some(root) };
            let prepared = net.prepare_serving("run", None, crate::agent::Faults::default(), &serving)?;
            Ok((prepared.target.clone(), net.name(), Keep::Lab(Box::new(prepared))))
        }
        None => {
            let agent = LocalAgent::with_root(root)
                .map_err(|e| Error::internal(format!("cannot start the local agent: {e}")))?;
            Ok((Target::remote(agent.addr), gridperf_core::model::LOOPBACK.to_string(), Keep::Agent(agent)))
        }
    }
}

/// Runs the copy with a byte bar, -v's line a second, the pool's events as
/// they happen, and --json-stream's lines.
fn watched(work: Work, o: &Opts, out: &mut Output) -> Result<CopyReport> {
    let bar = out.byte_bar();
    bar.set_message("copying");
    let verbose = o.verbose;
    // above the bar on a terminal; on stderr when there is no bar to keep clear of
    let say = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    let interval_s = crate::engines::copy::INTERVAL.as_secs_f64();
    let json_stream = o.json_stream;
    // --json-stream: a JSON line per interval and per event, printed as they come
    let lines = std::cell::RefCell::new(&mut *out);
    let line = |event: &str, data: serde_json::Value| {
        if json_stream {
            let l = serde_json::json!({ "event": event, "data": data });
            let _ = lines.borrow_mut().print(&format!("{l}\n"));
        }
    };
    let mut watch = crate::engines::copy::Watch {
        bytes: &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
        // -v: a line a second, each stream's rate in it (those that moved anything in it)
        interval: &mut |k, bytes| {
            let moved: serde_json::Map<String, serde_json::Value> =
                bytes.iter().enumerate().filter(|(_, b)| **b > 0).map(|(i, b)| (i.to_string(), (*b).into())).collect();
            let all: u64 = bytes.iter().sum();
            let t_s = k as f64 * interval_s;
            line("interval", serde_json::json!({ "t_s": t_s, "bytes": moved, "bps": all as f64 * 8.0 / interval_s }));
            if verbose {
                let rates: Vec<String> = bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b > 0)
                    .map(|(i, b)| format!("{i}: {}", gridperf_core::units::fmt_bps(*b as f64 * 8.0 / interval_s)))
                    .collect();
                let all_bps = gridperf_core::units::fmt_bps(all as f64 * 8.0 / interval_s);
                say(format!("{t_s:>6.1} s  {all_bps}  [{}]", rates.join("  ")));
            }
        },
        // restarts, -P auto's changes, broken connections: always said, as they happen
        event: &mut |e| {
            say(format!("{:>6.1} s  {}{}: {}", e.t_s, e.kind, e.who(), e.why));
            line(&e.kind, serde_json::to_value(e).unwrap_or_default());
        },
    };
    let result = match work {
        Work::Direct(target, job) => crate::engines::copy::run(&target, &o.copy, job, &mut watch),
        Work::Pairs(pairs) => crate::engines::copy::pairs::run(pairs, &o.copy, &mut watch),
    };
    bar.finish_and_clear();
    result
}

/// Stores the run: its settings, each file, stream and event, or its error.
fn record(o: &Opts, network: &str, result: Result<CopyReport>, out: &mut Output) -> Result<CopyReport> {
    let settings = serde_json::json!({
        "streams": o.copy.streams, "block": o.copy.block, "window": o.copy.window,
        "congestion": o.copy.congestion, "pacing_bps": o.copy.pacing_bps,
        "resume": o.copy.resume, "force": o.copy.force,
        "auto": o.copy.auto, "restart": o.copy.restart, "tail": o.copy.tail, "split_static": o.copy.split_static,
        "interval_ms": crate::engines::copy::INTERVAL.as_millis() as u64,
    });
    let new_run = NewRun {
        survey_id: None,
        sweep_id: None,
        kind: Measure::Copy,
        network,
        target: &o.dest_words,
        settings,
        lab_profile: o.lab.as_ref().map(|(p, _)| p.as_str()),
        mtu: None,
    };
    let mut rec = Recorder::open(&o.store, &new_run)?;
    let r: CopyReport = match result {
        Ok(r) => r,
        Err(e) => {
            rec.finish(Err(&e))?;
            return Err(e);
        }
    };
    for f in &r.files {
        rec.point(f)?;
    }
    for s in &r.per_stream {
        rec.point(s)?;
    }
    for e in &r.events {
        rec.point(e)?;
    }
    let failed = r.files.iter().filter(|f| f.error.is_some()).count();
    let failed_why = (failed > 0).then(|| format!("{failed} of {} files are not in place", r.files.len()));
    if let Some(where_) = rec.finish_as(&r.env, failed_why.as_deref())? {
        out.note(&format!("gridperf: {where_}"));
    }
    Ok(r)
}

/// Prints the result as asked, and exits as it went: 4 for an INVALID lab
/// run or files not in place, with what to do.
fn tell(o: &Opts, r: &CopyReport, out: &mut Output) -> Result<()> {
    if o.json_stream {
        let end = serde_json::json!({ "event": "end", "data": r });
        out.print(&format!("{end}\n"))?;
    } else {
        out.render(r)?;
    }
    super::lab_valid(&r.env)?;
    let failed = r.files.iter().filter(|f| f.error.is_some()).count();
    if r.bytes_moved == 0 && failed == 0 && !r.files.is_empty() {
        out.note(&format!(
            "gridperf copy: nothing to do: the {} files are in place already, each this very source's",
            r.files.len()
        ));
    }
    if failed > 0 {
        return Err(Error::measurement(format!(
            "{failed} of {} files are not in place (what arrived is kept partial: run the copy again with --resume)",
            r.files.len()
        )));
    }
    let unreadable: Vec<&str> =
        r.skipped.iter().filter(|(_, why)| why.starts_with(dp::UNREADABLE)).map(|(p, _)| p.as_str()).collect();
    if !unreadable.is_empty() {
        return Err(Error::measurement(format!(
            "{} source files could not be read and were not copied: {} (the others are in place)",
            unreadable.len(),
            unreadable.join(", ")
        )));
    }
    Ok(())
}
