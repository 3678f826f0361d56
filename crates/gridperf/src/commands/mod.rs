//! One workflow per command, callable in-process: each takes its checked
//! options (built from the command line in `cli`) and an [`Output`], runs
//! the pipeline (runner -> engine -> store -> render), and returns. Only
//! here, through the [`Output`], does anything reach stdout; progress bars
//! and warnings go to stderr.

pub mod copy;
pub mod exporter;
pub mod fanout;
pub mod lab;
pub mod progress;
pub mod pscheduler;
pub mod report;
pub mod rtt;
pub mod runs;
pub mod serve;
pub mod stream;
pub mod survey;
pub mod sweep;
pub mod trace;
pub mod transfer;
pub mod tune;

use crate::agent::Faults;
use crate::engines::Progress;
use crate::error::{Error, Result};
use crate::runner::{Network, Prepared};
use crate::store::{NewRun, Recorder, StoreChoice, Stored};
use gridperf_core::analysis::stats::Warning;
use gridperf_core::model::{Environment, Measure};
use gridperf_core::units::fmt_bytes;
use std::io::Write;
use std::time::{Duration, Instant};

/// How a result is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// A table for people (the default).
    #[default]
    Table,
    /// The result document (docs/json.md).
    Json,
    Csv,
}

enum Sink {
    Stdout,
    Buffer { out: Vec<u8>, err: Vec<u8> },
}

/// Where a command's output goes: stdout, or buffers a test reads back. A
/// closed stdout (`| head`) ends the printing, not the command: the run is
/// still measured to its end and stored, and the command exits 0.
pub struct Output {
    sink: Sink,
    closed: bool,
    pub format: Format,
}

impl Output {
    pub fn stdout(format: Format) -> Output {
        Output { sink: Sink::Stdout, closed: false, format }
    }

    /// An output that keeps what it is given, for tests.
    pub fn capture(format: Format) -> Output {
        Output { sink: Sink::Buffer { out: Vec::new(), err: Vec::new() }, closed: false, format }
    }

    /// What was printed, for an output made with [`Output::capture`].
    pub fn printed(&self) -> String {
        match &self.sink {
            Sink::Buffer { out, .. } => String::from_utf8_lossy(out).into_owned(),
            Sink::Stdout => String::new(),
        }
    }

    /// What was said on the side (warnings, notes), for a captured output.
    pub fn said(&self) -> String {
        match &self.sink {
            Sink::Buffer { err, .. } => String::from_utf8_lossy(err).into_owned(),
            Sink::Stdout => String::new(),
        }
    }

    /// Whether stdout was closed under the command.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Prints text as it is.
    pub fn print(&mut self, text: &str) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        // what a peer said may be in it (its kernel, its software, its
        // errors): control characters are shown, never sent to a terminal
        let text = &gridperf_core::wire::printable_lines(text);
        match &mut self.sink {
            Sink::Buffer { out, .. } => {
                out.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Sink::Stdout => {
                let mut o = std::io::stdout().lock();
                match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
                    Ok(()) => Ok(()),
                    // a closed pipe (| head) is a normal end of the printing
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        self.closed = true;
                        Ok(())
                    }
                    Err(e) => Err(Error::internal(format!("writing the output: {e}"))),
                }
            }
        }
    }

    /// Prints a result document as JSON.
    pub fn json<T: serde::Serialize>(&mut self, v: &T) -> Result<()> {
        self.print(&crate::render::json(v))
    }

    /// A result, the one way every command prints one: JSON, the CSV (the
    /// table where it has none), or the table, as the format asks.
    pub fn render<R: crate::render::Render>(&mut self, r: &R) -> Result<()> {
        match self.format {
            Format::Json => self.json(r),
            Format::Csv => match r.csv() {
                Some(csv) => self.print(&csv),
                None => self.print(&r.table()),
            },
            Format::Table => self.print(&r.table()),
        }
    }

    /// Says something on stderr ("gridperf: ..."): warnings, where a run was stored.
    pub fn note(&mut self, text: &str) {
        let text = &gridperf_core::wire::printable_lines(text);
        match &mut self.sink {
            Sink::Buffer { err, .. } => {
                err.extend_from_slice(text.as_bytes());
                err.push(b'\n');
            }
            Sink::Stdout => eprintln!("{text}"),
        }
    }

    /// Says each warning, with its advice.
    /// A run's warnings on stderr: a kind that came up more than 3 times
    /// said once with its count of `points` (every one when `verbose`),
    /// then what to do about them.
    pub fn warnings(&mut self, warnings: &[Warning], points: usize, verbose: bool) {
        for line in gridperf_core::analysis::stats::summarize(warnings, points, verbose) {
            self.note(&format!("gridperf: warning: {line}"));
        }
    }

    /// Progress in points on stderr: a bar on a terminal, a line every few
    /// seconds elsewhere, nothing for a captured output ([`progress::Bar`]).
    pub fn bar(&self) -> progress::Bar {
        progress::Bar::new(progress::Unit::Points, matches!(self.sink, Sink::Buffer { .. }))
    }

    /// The same, counting bytes (a copy).
    pub fn byte_bar(&self) -> progress::Bar {
        progress::Bar::new(progress::Unit::Bytes, matches!(self.sink, Sink::Buffer { .. }))
    }
}

/// `gridperf man`: gridperf.1 on stdout, or every page into `dir`
/// (`pages` as cli rendered them, the top page first).
/// `gridperf keygen NAME`: a new key, written 0600 (never over an existing
/// file), and the line for the agent's authorized file printed.
pub fn keygen(name: String, out_file: Option<std::path::PathBuf>, out: &mut Output) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let secret = crate::host::random_32().map_err(|e| Error::internal(format!("no random bytes: {e}")))?;
    let key = gridperf_core::auth::Key::new(&name, secret).map_err(Error::usage)?;
    let path = out_file.unwrap_or_else(crate::runner::default_key_path);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::usage(format!("{}: {e}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::usage(format!("{}: {e} (an existing key is never overwritten)", path.display())))?;
    f.write_all(key.client_line().as_bytes()).map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    out.note(&format!(
        "gridperf keygen: key {name:?} written to {} (0600); add this line to the agent's serve --auth file:",
        path.display()
    ));
    out.print(&key.authorized_line())
}

pub fn man(pages: Vec<(String, Vec<u8>)>, dir: Option<std::path::PathBuf>, out: &mut Output) -> Result<()> {
    match dir {
        None => out.print(&String::from_utf8_lossy(&pages[0].1)),
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| Error::usage(format!("--dir {}: {e}", d.display())))?;
            for (name, page) in &pages {
                std::fs::write(d.join(name), page).map_err(|e| Error::usage(format!("--dir {}: {e}", d.display())))?;
            }
            out.note(&format!("gridperf man: {} pages in {}", pages.len(), d.display()));
            Ok(())
        }
    }
}

pub use crate::runner::lab_valid;

/// Where an rtt, transfer or stream run goes, as the user named it: a
/// network, the lab a `lab exec`'d command crosses, a private loopback of
/// its own MTU, and the local agent's test seams.
#[derive(Debug, Clone)]
pub struct Place {
    pub network: Network,
    /// The lab this process runs in (`gridperf lab exec` says so).
    pub watched: Option<String>,
    /// Run both ends in a private network namespace whose lo has this MTU.
    pub loopback_mtu: Option<u32>,
    pub faults: Faults,
}

impl Place {
    pub fn network(network: Network) -> Place {
        Place { network, watched: None, loopback_mtu: None, faults: Faults::default() }
    }

    /// Makes the place ready for the run (see [`Network::prepare`]); the
    /// notes say what was done.
    pub fn prepare(&self, prefix: &str) -> Result<Prepared> {
        let mut notes = Vec::new();
        if let Some(mtu) = self.loopback_mtu {
            crate::host::enter_private_loopback(mtu)?;
            notes.push(format!("both ends in a private network namespace; lo MTU {mtu}"));
        }
        let mut p = self.network.prepare(prefix, self.watched.clone(), self.faults)?;
        notes.append(&mut p.notes);
        p.notes = notes;
        Ok(p)
    }
}

/// The workflow rtt and transfer share: the place made ready, the run
/// begun in the store, the engine run with a progress bar and each point
/// stored as it ends, the run ended (done or failed). `measure` runs the
/// engine on the prepared place; `env` finds the result's record.
pub(crate) fn echo_measure<R, P: Stored>(
    place: &Place,
    kind: Measure,
    settings: serde_json::Value,
    store: &StoreChoice,
    out: &mut Output,
    measure: impl FnOnce(&Prepared, &mut dyn FnMut(Progress), &mut dyn FnMut(&P) -> Result<()>) -> Result<R>,
    env: impl Fn(&R) -> &Environment,
) -> Result<R> {
    let prepared = place.prepare("run")?;
    let (network, target) = (place.network.name(), place.network.target());
    let mut rec = Recorder::open(
        store,
        &NewRun {
            survey_id: None,
            sweep_id: None,
            kind,
            network: &network,
            target: &target,
            settings,
            lab_profile: place.network.lab_profile(),
            mtu: None,
        },
    )?;
    let bar = out.bar();
    let result = measure(
        &prepared,
        &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(format!("{} {}", p.proto, fmt_bytes(p.size)));
        },
        &mut |p| rec.point(p),
    );
    bar.finish_and_clear();
    if let Some(where_) = rec.finish(result.as_ref().map(&env))? {
        out.note(&format!("gridperf: {where_}"));
    }
    result
}

/// Runs this gridperf with `args` as a child, killed when `limit` has
/// passed: (exit code, stdout, stderr). The pScheduler tool and the
/// exporter's probes measure this way: nothing they start outlives its slot.
pub(crate) fn run_self_bounded(args: &[String], limit: Duration) -> Result<(Option<i32>, String, String)> {
    let exe = std::env::current_exe().map_err(|e| Error::internal(format!("finding this gridperf: {e}")))?;
    let mut child = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::internal(format!("starting gridperf {}: {e}", args.join(" "))))?;
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = std::io::Read::read_to_string(&mut r, &mut s);
            }
            s
        })
    };
    let out = read(child.stdout.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let err = read(child.stderr.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| Error::internal(format!("waiting for gridperf: {e}")))? {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, mut err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if status.is_none() {
        err.push_str(&format!(
            "\ngridperf {} did not finish within {:.0} s: stopped",
            args.join(" "),
            limit.as_secs_f64()
        ));
    }
    Ok((status.and_then(|s| s.code()), out, err))
}
