//! Everything gridperf prints, as text: one file per measurement (its
//! table, CSV and, where it has them, live lines), the lab's and tune's
//! words, the stored runs, the survey's tables and the HTML report. Every
//! renderer takes results and returns a `String`; nothing here prints or
//! measures, so each is tested on constructed results (tests/it/render.rs
//! pins their output with snapshots).

pub mod copy;
pub mod fanout;
pub mod html;
pub mod lab;
pub mod pscheduler;
pub mod rtt;
pub mod runs;
pub mod stream;
pub mod survey;
pub mod sweep;
pub mod trace;
pub mod transfer;
pub mod tune;

use gridperf_core::model::{EndInfo, Environment, Settings, SocketInfo};
use gridperf_core::units::fmt_ns;
use std::fmt::Write;

/// A CSV table, written with the csv crate (quoting what needs it).
pub struct Csv {
    w: csv::Writer<Vec<u8>>,
}

impl Csv {
    pub fn new(header: &[&str]) -> Csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record(header);
        Csv { w }
    }

    pub fn row<I, T>(&mut self, cells: I)
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        let _ = self.w.write_record(cells);
    }

    pub fn text(self) -> String {
        String::from_utf8_lossy(&self.w.into_inner().unwrap_or_default()).into_owned()
    }
}

/// A text table whose columns are declared once, beside [`Csv`]: each a
/// heading, a width, and a side; the heading line and every row are
/// aligned from that one declaration, so they cannot drift apart.
pub struct TextTable {
    cols: Vec<(&'static str, usize, Align)>,
    gap: &'static str,
    out: String,
}

/// Which side a column's cells keep to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

impl TextTable {
    /// A table of these columns (heading, width, side), `gap` between
    /// them; its heading line written.
    pub fn new(cols: &[(&'static str, usize, Align)], gap: &'static str) -> TextTable {
        let mut t = TextTable { cols: cols.to_vec(), gap, out: String::new() };
        let names: Vec<&str> = cols.iter().map(|c| c.0).collect();
        t.row(names);
        t
    }

    /// A row: a cell per column, in their order (fewer: the row ends early).
    pub fn row<I, T>(&mut self, cells: I)
    where
        I: IntoIterator<Item = T>,
        T: std::fmt::Display,
    {
        self.row_then(cells, "");
    }

    /// A row of the first columns' cells, then `tail` (a point that has no
    /// figures says why there).
    pub fn row_then<I, T>(&mut self, cells: I, tail: &str)
    where
        I: IntoIterator<Item = T>,
        T: std::fmt::Display,
    {
        let mut line = String::new();
        for (k, (cell, (_, width, align))) in cells.into_iter().zip(&self.cols).enumerate() {
            if k > 0 {
                line.push_str(self.gap);
            }
            let _ = match align {
                Align::Left => write!(line, "{cell:<width$}"),
                Align::Right => write!(line, "{cell:>width$}"),
            };
        }
        line.push_str(tail);
        let _ = writeln!(self.out, "{line}");
    }

    pub fn text(self) -> String {
        self.out
    }
}

/// A result that prints itself each way a command offers it: JSON (its
/// serde form, schema in docs/json.md), the table, and the CSV where the
/// command has one. `Output::render` picks by the format asked for.
pub trait Render: serde::Serialize {
    fn table(&self) -> String;
    /// None: this result has no CSV (the table is printed instead).
    fn csv(&self) -> Option<String> {
        None
    }
}

/// A result whose JSON is a document and whose table (and CSV) are drawn
/// only when printed so: the way a command whose table needs more than its
/// document (its options, a stored sweep) prints through [`Render`].
pub struct Shown<'a, T: serde::Serialize> {
    doc: &'a T,
    table: Box<dyn Fn() -> String + 'a>,
    csv: Option<Box<dyn Fn() -> String + 'a>>,
}

impl<'a, T: serde::Serialize> Shown<'a, T> {
    pub fn new(doc: &'a T, table: impl Fn() -> String + 'a) -> Shown<'a, T> {
        Shown { doc, table: Box::new(table), csv: None }
    }

    /// With a CSV of its own.
    pub fn csv(mut self, csv: impl Fn() -> String + 'a) -> Shown<'a, T> {
        self.csv = Some(Box::new(csv));
        self
    }
}

impl<T: serde::Serialize> serde::Serialize for Shown<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.doc.serialize(s)
    }
}

impl<T: serde::Serialize> Render for Shown<'_, T> {
    fn table(&self) -> String {
        (self.table)()
    }
    fn csv(&self) -> Option<String> {
        self.csv.as_ref().map(|c| c())
    }
}

/// A time in ns as CSV holds it: to a tenth of a nanosecond (the quantiles
/// interpolate between samples; the clock itself counts whole ns), no
/// trailing zeros; empty for none.
/// A summary's cells, in the CSVs' order: min, q1, median, q3, (p99,)
/// max, mean, stddev; empty cells for no summary.
pub fn summary_cells(m: Option<&gridperf_core::analysis::stats::Summary>, p99: bool) -> Vec<String> {
    let f = |g: fn(&gridperf_core::analysis::stats::Summary) -> f64| ns_cell(m.map(g));
    let mut out = vec![f(|m| m.min_ns), f(|m| m.q1_ns), f(|m| m.median_ns), f(|m| m.q3_ns)];
    if p99 {
        out.push(f(|m| m.p99_ns));
    }
    out.extend([f(|m| m.max_ns), f(|m| m.mean_ns), f(|m| m.stddev_ns)]);
    out
}

pub fn ns_cell(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => {
            let s = format!("{v:.1}");
            s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
        }
        _ => String::new(),
    }
}

/// A rate (or any large figure) in whole units; empty for none.
pub fn whole_cell(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.0}"),
        _ => String::new(),
    }
}

/// A result as `--json` prints it: pretty, with a final newline.
pub fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}\n", e.to_string()))
}

pub fn placement(s: &Settings) -> String {
    let cpu = |c: Option<usize>| c.map(|c| format!("CPU {c}")).unwrap_or_else(|| "unpinned".into());
    format!("client {}, agent {}", cpu(s.client_cpu), cpu(s.server_cpu))
}

pub fn socket_line(who: &str, s: &SocketInfo) -> String {
    let mut parts = Vec::new();
    if let Some(m) = s.mss {
        parts.push(format!("MSS {m}"));
    }
    if let Some(m) = s.path_mtu {
        parts.push(format!("path MTU {m}"));
    }
    if let Some(c) = &s.congestion {
        parts.push(format!("cc {c}"));
    }
    if let Some(n) = s.nodelay {
        parts.push(format!("TCP_NODELAY {}", if n { "on" } else { "off" }));
    }
    let buf = |req: Option<u64>, got: Option<u64>| match (req, got) {
        (Some(r), Some(g)) => format!("{g} (asked {r})"),
        (None, Some(g)) => format!("{g}"),
        _ => "?".into(),
    };
    parts.push(format!("sndbuf {}", buf(s.sndbuf_requested, s.sndbuf_granted)));
    parts.push(format!("rcvbuf {}", buf(s.rcvbuf_requested, s.rcvbuf_granted)));
    let proto = s.proto.map(|p| p.name()).unwrap_or("?");
    format!("  {proto:<8} {who:<6} {}", parts.join(", "))
}

pub fn header(out: &mut String, title: &str, s: &Settings, env: &Environment) {
    let _ = writeln!(out, "{title}");
    let nagle = if s.nodelay { "TCP_NODELAY on (Nagle off)" } else { "TCP_NODELAY off (Nagle on)" };
    let mode = if s.busy_poll { "busy-poll" } else { "blocking" };
    let writes = if s.writes_per_message == 1 {
        "1 send per message".to_string()
    } else {
        format!("{} sends per message", s.writes_per_message)
    };
    let _ = writeln!(out, "{nagle} · {writes} · {mode} · {} · timeout {}", placement(s), fmt_ns(s.timeout_ns as f64));
    for n in &env.notes {
        let _ = writeln!(out, "{n}");
    }
    if let Some(lab) = &env.lab {
        let _ = writeln!(out, "across lab {}: {}", lab.name, lab.description);
        if let Some(why) = &lab.invalid {
            let _ = writeln!(out, "INVALID: the emulator did not keep up during this run: {why}");
        }
    }
    let sockets = |who: &str, e: &EndInfo, out: &mut String| {
        for sock in &e.sockets {
            let _ = writeln!(out, "{}", socket_line(who, sock));
        }
    };
    sockets("client", &env.client, out);
    if let Some(server) = &env.server {
        sockets("agent", server, out);
    }
}

pub fn fmt_signed_ns(ns: f64) -> String {
    if ns < 0.0 {
        format!("-{}", fmt_ns(-ns))
    } else {
        format!("+{}", fmt_ns(ns))
    }
}

/// Decimal bytes with 3 significant figures (1.23 GB), as throughput tools print volumes.
pub fn fmt_volume(n: u64) -> String {
    let n = n as f64;
    let (v, unit) = if n >= 1e9 {
        (n / 1e9, "GB")
    } else if n >= 1e6 {
        (n / 1e6, "MB")
    } else if n >= 1e3 {
        (n / 1e3, "kB")
    } else {
        return format!("{n} B");
    };
    format!("{v:.3} {unit}")
}

/// Unix seconds as "YYYY-MM-DD HH:MM:SS" (UTC).
pub fn utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub fn opt_ns(v: Option<f64>) -> String {
    v.map(fmt_ns).unwrap_or_else(|| "-".into())
}

/// The sysctls `runs show` prints of each end (all are in `--json`).
const SHOWN_SYSCTLS: &[&str] = &[
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
];

fn end_line(out: &mut String, who: &str, e: &EndInfo) {
    let cpus = match &e.pinned_cpus {
        Some(c) => format!("pinned to CPU {}", c.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")),
        None => {
            format!("unpinned (CPUs {})", e.allowed_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","))
        }
    };
    let mode = if e.busy_poll { ", busy-polling" } else { "" };
    let _ = writeln!(out, "{who:<7}{} ({}), {}, {cpus}{mode}", e.host, e.kernel, e.software);
    for k in SHOWN_SYSCTLS {
        if let Some(v) = e.sysctls.get(*k) {
            let _ = writeln!(out, "         {k} = {v}");
        }
    }
}

/// The conditions a run was measured under, as `runs show` prints them:
/// when, both ends (host, kernel, placement, the sysctls that shape a
/// stream), the notes, the lab and its verdict, and each socket's record.
pub fn environment(env: &Environment) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "measured {} to {} UTC, against {}", utc(env.started_unix), utc(env.finished_unix), env.target);
    end_line(&mut out, "client", &env.client);
    if let Some(a) = &env.server {
        end_line(&mut out, "agent", a);
    }
    for n in &env.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if let Some(lab) = &env.lab {
        let _ = writeln!(
            out,
            "across lab {}: {}{}",
            lab.name,
            lab.description,
            lab.invalid
                .as_ref()
                .map(|w| format!(" · INVALID: {w}"))
                .unwrap_or_else(|| " · the emulator kept up".into())
        );
    }
    for s in &env.client.sockets {
        let _ = writeln!(out, "{}", socket_line("client", s));
    }
    for s in env.server.iter().flat_map(|a| &a.sockets) {
        let _ = writeln!(out, "{}", socket_line("agent", s));
    }
    out
}
