//! The results store: every run and every point, in SQLite.
//!
//! One file (default `$XDG_DATA_HOME/gridperf/results.db`, else
//! `~/.local/share/gridperf/results.db`; `--db PATH` to choose), in WAL
//! mode so that a second process can read while one writes. Each point is
//! written in a transaction of its own as soon as it is measured: a crash
//! or Ctrl-C loses at most the point in progress. The schema's version is
//! SQLite's `user_version`; a database from a newer gridperf is refused,
//! never migrated down or overwritten.

mod recorder;

pub use recorder::{Recorder, StoreChoice, Stored, StreamPoint};

use crate::error::{Error, Result};
use gridperf_core::model::{Environment, Measure};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema this gridperf writes.
pub const SCHEMA_VERSION: i64 = 2;

/// SQLite's application_id of a gridperf store ("GPF1"): a database without
/// it, with tables of its own, is another application's and is not touched.
pub const APPLICATION_ID: i64 = 0x4750_4631;

/// The schema's steps, oldest first: step i takes user_version i to i + 1.
pub const MIGRATIONS: &[&str] = &[
    // 0 -> 1
    "CREATE TABLE surveys (
        id INTEGER PRIMARY KEY,
        started REAL NOT NULL,
        finished REAL,
        command_line TEXT NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        survey_id INTEGER REFERENCES surveys(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        network TEXT NOT NULL,
        target TEXT NOT NULL,
        command_line TEXT NOT NULL,
        version TEXT NOT NULL,
        started REAL NOT NULL,
        finished REAL,
        settings TEXT NOT NULL,
        env TEXT,
        lab_profile TEXT,
        lab TEXT,
        mtu INTEGER,
        invalid TEXT,
        status TEXT NOT NULL
    );
    CREATE INDEX runs_by_survey ON runs(survey_id);
    CREATE TABLE points (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        proto TEXT NOT NULL,
        size INTEGER NOT NULL,
        setting TEXT NOT NULL DEFAULT '',
        median_ns REAL,
        q1_ns REAL,
        q3_ns REAL,
        figures TEXT NOT NULL,
        samples TEXT,
        created REAL NOT NULL,
        UNIQUE(run_id, proto, size, setting)
    );",
    // 1 -> 2: sweeps (stream --sweep), each point's outcome, and the runs they hold
    "CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        started REAL NOT NULL,
        finished REAL,
        command_line TEXT NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL
    );
    CREATE TABLE sweep_points (
        sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        key TEXT NOT NULL,
        point TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (sweep_id, key)
    );
    ALTER TABLE runs ADD COLUMN sweep_id INTEGER REFERENCES sweeps(id) ON DELETE SET NULL;
    CREATE INDEX runs_by_sweep ON runs(sweep_id);",
];

/// The name runs on a network are stored under, for a name a user may
/// type: every loopback spelling is "loopback" (as `runner::Network::name`
/// stores it).
pub fn network_alias(name: &str) -> &str {
    match name {
        "local" | "localhost" | "lo" | "127.0.0.1" | "::1" | "[::1]" => gridperf_core::model::LOOPBACK,
        other => other,
    }
}

/// Where results go when no --db is given: `$XDG_DATA_HOME/gridperf`, else
/// `~/.local/share/gridperf`; under sudo, in the home of the user who ran
/// it (and theirs: see [`Store`]'s drop), not root's.
pub fn default_path() -> PathBuf {
    if let Some((_, _, _, home)) = crate::host::sudo_user() {
        return home.join(".local/share/gridperf/results.db");
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("gridperf").join("results.db")
}

/// A table of groups of runs: the same columns, one kind each.
#[derive(Clone, Copy)]
struct Group(&'static str);
const SURVEYS: Group = Group("surveys");
const SWEEPS: Group = Group("sweeps");

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: i64,
    pub survey_id: Option<i64>,
    /// The sweep (`stream --sweep`) the run is a point of, if any.
    #[serde(default)]
    pub sweep_id: Option<i64>,
    /// What was measured: a [`Measure`]'s name (a newer gridperf may store others).
    pub kind: String,
    /// The network: a lab profile's name, or the agent's address.
    pub network: String,
    pub target: String,
    pub command_line: String,
    pub version: String,
    /// Seconds since the Unix epoch (as env's `started_unix`).
    #[serde(rename = "started_unix", alias = "started")]
    pub started: f64,
    #[serde(rename = "finished_unix", alias = "finished")]
    pub finished: Option<f64>,
    pub settings: serde_json::Value,
    pub env: Option<Environment>,
    pub lab_profile: Option<String>,
    pub mtu: Option<u32>,
    /// Why the run is invalid (the lab's emulator fell behind), if it is.
    pub invalid: Option<String>,
    /// running, done, failed or interrupted.
    pub status: String,
    pub points: i64,
}

impl RunRow {
    /// What the run measured, if this gridperf knows the kind.
    pub fn measure(&self) -> Option<Measure> {
        Measure::parse(&self.kind)
    }

    /// Whether the run stands: it finished, and neither failed nor crossed
    /// a lab whose emulator fell behind.
    pub fn valid(&self) -> bool {
        self.invalid.is_none() && self.status != "failed"
    }
}

/// A point as stored: a protocol at a size (and a setting), its summary
/// figures for queries and all its figures as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointRow {
    pub proto: String,
    #[serde(rename = "size_bytes", alias = "size")]
    pub size: u64,
    pub setting: String,
    pub median_ns: Option<f64>,
    pub q1_ns: Option<f64>,
    pub q3_ns: Option<f64>,
    /// Everything the point's JSON has (as `rtt --json` prints a point).
    pub figures: serde_json::Value,
    /// The stored samples, in ns (up to 4096, thinned evenly), if kept.
    #[serde(rename = "samples_ns", alias = "samples")]
    pub samples: Option<Vec<u64>>,
}

/// What a new run is.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub survey_id: Option<i64>,
    pub sweep_id: Option<i64>,
    pub kind: Measure,
    pub network: &'a str,
    pub target: &'a str,
    pub settings: serde_json::Value,
    pub lab_profile: Option<&'a str>,
    pub mtu: Option<u32>,
}

pub struct Store {
    conn: Connection,
    pub path: PathBuf,
}

fn db_err(path: &Path, e: rusqlite::Error) -> Error {
    let text = e.to_string();
    if text.contains("locked") || text.contains("busy") {
        Error::usage(format!(
            "the results database {} is locked by another process (waited 5 s); try again when it is done",
            path.display()
        ))
    } else if text.contains("not a database") || text.contains("malformed") {
        Error::usage(format!(
            "{} is not a gridperf results database, or it is damaged ({text}); it was left as it is: give another --db",
            path.display()
        ))
    } else {
        Error::internal(format!("results database {}: {text}", path.display()))
    }
}

fn now() -> f64 {
    crate::host::unix_now()
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // the folders this makes (under sudo, they are the user's too)
            let missing: Vec<PathBuf> = dir.ancestors().take_while(|d| !d.exists()).map(Path::to_path_buf).collect();
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::usage(format!("cannot create {} for the results database: {e}", dir.display())))?;
            for d in missing {
                crate::host::give_back(&d);
            }
        }
        Self::open_with(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE)
    }

    /// Opens an existing database (for `runs` and `report`): a missing one is an error.
    pub fn open_existing(path: &Path) -> Result<Store> {
        if !path.exists() {
            return Err(Error::usage(format!(
                "no results database at {}: run a survey (or give --db PATH) first",
                path.display()
            )));
        }
        Self::open_with(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
    }

    fn open_with(path: &Path, flags: OpenFlags) -> Result<Store> {
        let e = |err| db_err(path, err);
        let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(e)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(e)?;
        // reading the version is the first real access: a file that is not
        // SQLite fails here, before anything is written to it
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(e)?;
        if version > SCHEMA_VERSION {
            return Err(Error::usage(format!(
                "{} was written by a newer gridperf (schema {version}; this one knows up to {SCHEMA_VERSION}); \
                 it was left untouched: use that gridperf, or give another --db",
                path.display()
            )));
        }
        // another application's database is left as it was: not a table
        // added, not its journal mode changed
        let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(e)?;
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .and_then(|mut q| q.query_map([], |r| r.get(0))?.collect())
            .map_err(e)?;
        let ours = app == APPLICATION_ID
            || (app == 0 && tables.is_empty() && version == 0)
            // written by a gridperf from before the mark
            || (app == 0 && version > 0 && tables.iter().any(|t| t == "runs") && tables.iter().any(|t| t == "points"));
        if !ours {
            let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
            return Err(Error::usage(format!(
                "{} is another application's SQLite database (application_id {app}, tables {}{}): gridperf left it \
                 untouched; give --db a file of its own",
                path.display(),
                if shown.is_empty() { "none".to_string() } else { shown.join(", ") },
                if tables.len() > shown.len() { ", ..." } else { "" }
            )));
        }
        conn.pragma_update(None, "journal_mode", "WAL").map_err(e)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(e)?;
        if app != APPLICATION_ID {
            conn.pragma_update(None, "application_id", APPLICATION_ID).map_err(e)?;
        }
        let mut store = Store { conn, path: path.to_path_buf() };
        store.migrate(version)?;
        Ok(store)
    }

    /// The store's files: the database, its write-ahead log and shared memory.
    fn files(&self) -> Vec<PathBuf> {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut out = vec![self.path.clone()];
        for ext in ["-wal", "-shm"] {
            out.push(self.path.with_file_name(format!("{name}{ext}")));
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            out.push(dir.to_path_buf());
        }
        out
    }

    fn migrate(&mut self, from: i64) -> Result<()> {
        let path = self.path.clone();
        for (v, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            let tx = self.conn.transaction().map_err(|e| db_err(&path, e))?;
            tx.execute_batch(sql).map_err(|e| db_err(&path, e))?;
            tx.pragma_update(None, "user_version", v as i64 + 1).map_err(|e| db_err(&path, e))?;
            tx.commit().map_err(|e| db_err(&path, e))?;
        }
        Ok(())
    }

    fn e(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        |err| db_err(&self.path, err)
    }

    /// Begins a group of runs (a survey or a sweep) in its table: what it
    /// measures (`spec`, which a resumed one must match), its command line.
    fn begin_group(&self, table: Group, spec: &serde_json::Value) -> Result<i64> {
        self.conn
            .execute(
                &format!(
                    "INSERT INTO {} (started, command_line, spec, status) VALUES (?1, ?2, ?3, 'running')",
                    table.0
                ),
                params![now(), std::env::args().collect::<Vec<_>>().join(" "), spec.to_string()],
            )
            .map_err(self.e())?;
        Ok(self.conn.last_insert_rowid())
    }

    fn finish_group(&self, table: Group, id: i64, status: &str) -> Result<()> {
        self.conn
            .execute(
                &format!("UPDATE {} SET finished = ?1, status = ?2 WHERE id = ?3", table.0),
                params![now(), status, id],
            )
            .map_err(self.e())?;
        Ok(())
    }

    /// The latest group of this spec that did not finish (for --resume).
    fn unfinished_group(&self, table: Group, spec: &serde_json::Value) -> Result<Option<i64>> {
        self.conn
            .query_row(
                &format!("SELECT id FROM {} WHERE status != 'done' AND spec = ?1 ORDER BY id DESC LIMIT 1", table.0),
                params![spec.to_string()],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.e())
    }

    pub fn begin_survey(&self, spec: &serde_json::Value) -> Result<i64> {
        self.begin_group(SURVEYS, spec)
    }

    pub fn finish_survey(&self, id: i64, status: &str) -> Result<()> {
        self.finish_group(SURVEYS, id, status)
    }

    /// The latest survey that did not finish, with the same spec (for --resume).
    pub fn unfinished_survey(&self, spec: &serde_json::Value) -> Result<Option<i64>> {
        self.unfinished_group(SURVEYS, spec)
    }

    /// The run of a survey for a network and kind, if it was begun.
    pub fn survey_run(&self, survey: i64, network: &str, kind: Measure) -> Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT id FROM runs WHERE survey_id = ?1 AND network = ?2 AND kind = ?3 ORDER BY id DESC LIMIT 1",
                params![survey, network, kind.name()],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.e())
    }

    pub fn begin_run(&self, r: &NewRun) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO runs (survey_id, kind, network, target, command_line, version, started, settings,
                                   lab_profile, mtu, sweep_id, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'running')",
                params![
                    r.survey_id,
                    r.kind.name(),
                    r.network,
                    r.target,
                    std::env::args().collect::<Vec<_>>().join(" "),
                    crate::host::software(),
                    now(),
                    r.settings.to_string(),
                    r.lab_profile,
                    r.mtu,
                    r.sweep_id,
                ],
            )
            .map_err(self.e())?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Writes one point, in a transaction of its own (replacing a point of
    /// the same protocol, size and setting in the run).
    pub fn add_point(&self, run: i64, p: &PointRow) -> Result<()> {
        let samples = p.samples.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default());
        self.conn
            .execute(
                "INSERT OR REPLACE INTO points (run_id, proto, size, setting, median_ns, q1_ns, q3_ns, figures, samples, created)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    run,
                    p.proto,
                    p.size as i64,
                    p.setting,
                    p.median_ns,
                    p.q1_ns,
                    p.q3_ns,
                    p.figures.to_string(),
                    samples,
                    now()
                ],
            )
            .map_err(self.e())?;
        Ok(())
    }

    pub fn has_point(&self, run: i64, proto: &str, size: u64, setting: &str) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT 1 FROM points WHERE run_id = ?1 AND proto = ?2 AND size = ?3 AND setting = ?4",
                params![run, proto, size as i64, setting],
                |_| Ok(()),
            )
            .optional()
            .map(|o| o.is_some())
            .map_err(self.e())
    }

    /// Ends a run: its environment record, its validity, its status. A run
    /// that failed is not valid: `failure` says why, and is kept as the
    /// reason (a run across a lab whose emulator fell behind says that).
    pub fn finish_run(&self, run: i64, env: Option<&Environment>, status: &str, failure: Option<&str>) -> Result<()> {
        let lab_invalid = env.and_then(|e| e.lab.as_ref()).and_then(|l| l.invalid.clone());
        let invalid = match (failure, lab_invalid) {
            (Some(f), Some(l)) => Some(format!("{status}: {f}; {l}")),
            (Some(f), None) => Some(format!("{status}: {f}")),
            (None, l) => l,
        };
        let lab = env.and_then(|e| e.lab.as_ref()).map(|l| serde_json::to_string(l).unwrap_or_default());
        let env = env.map(|e| serde_json::to_string(e).unwrap_or_default());
        self.conn
            .execute(
                "UPDATE runs SET finished = ?1, env = COALESCE(?2, env), lab = COALESCE(?3, lab), invalid = ?4, status = ?5
                 WHERE id = ?6",
                params![now(), env, lab, invalid, status, run],
            )
            .map_err(self.e())?;
        Ok(())
    }

    fn run_from(r: &rusqlite::Row) -> rusqlite::Result<RunRow> {
        let settings: String = r.get("settings")?;
        let env: Option<String> = r.get("env")?;
        Ok(RunRow {
            id: r.get("id")?,
            survey_id: r.get("survey_id")?,
            sweep_id: r.get("sweep_id")?,
            kind: r.get("kind")?,
            network: r.get("network")?,
            target: r.get("target")?,
            command_line: r.get("command_line")?,
            version: r.get("version")?,
            started: r.get("started")?,
            finished: r.get("finished")?,
            settings: serde_json::from_str(&settings).unwrap_or_default(),
            env: env.and_then(|e| serde_json::from_str(&e).ok()),
            lab_profile: r.get("lab_profile")?,
            mtu: r.get("mtu")?,
            invalid: r.get("invalid")?,
            status: r.get("status")?,
            points: r.get("points")?,
        })
    }

    const RUN_SELECT: &'static str =
        "SELECT runs.*, (SELECT COUNT(*) FROM points WHERE run_id = runs.id) AS points FROM runs";

    /// Runs, newest first, filtered by kind, network (profile or host) and
    /// start time (unix seconds), and by survey.
    pub fn runs(&self, f: &RunFilter) -> Result<Vec<RunRow>> {
        let sql = format!(
            "{} WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR network = ?2) AND (?3 IS NULL OR started >= ?3)
               AND (?4 IS NULL OR survey_id = ?4) AND (?5 IS NULL OR sweep_id = ?5) ORDER BY id DESC",
            Self::RUN_SELECT
        );
        let mut st = self.conn.prepare(&sql).map_err(self.e())?;
        let rows = st
            .query_map(
                params![f.kind.map(Measure::name), f.network.as_deref().map(network_alias), f.since, f.survey, f.sweep],
                Self::run_from,
            )
            .map_err(self.e())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.e())?;
        Ok(rows)
    }

    /// One run; an unknown id says which ids exist.
    pub fn run(&self, id: i64) -> Result<RunRow> {
        let sql = format!("{} WHERE id = ?1", Self::RUN_SELECT);
        match self.conn.query_row(&sql, params![id], Self::run_from).optional().map_err(self.e())? {
            Some(r) => Ok(r),
            None => {
                let ids: Vec<i64> = self.runs(&RunFilter::default())?.iter().map(|r| r.id).collect();
                Err(Error::usage(if ids.is_empty() {
                    format!("no run {id}: {} holds no runs yet", self.path.display())
                } else {
                    let shown: Vec<String> = ids.iter().take(20).map(|i| i.to_string()).collect();
                    format!(
                        "no run {id} in {}; its runs are {}{} (gridperf runs list)",
                        self.path.display(),
                        shown.join(", "),
                        if ids.len() > 20 { ", ..." } else { "" }
                    )
                }))
            }
        }
    }

    /// A run's points, in the order they were measured.
    pub fn points(&self, run: i64) -> Result<Vec<PointRow>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT proto, size, setting, median_ns, q1_ns, q3_ns, figures, samples FROM points
                 WHERE run_id = ?1 ORDER BY id",
            )
            .map_err(self.e())?;
        let rows = st
            .query_map(params![run], |r| {
                let figures: String = r.get(6)?;
                let samples: Option<String> = r.get(7)?;
                Ok(PointRow {
                    proto: r.get(0)?,
                    size: r.get::<_, i64>(1)? as u64,
                    setting: r.get(2)?,
                    median_ns: r.get(3)?,
                    q1_ns: r.get(4)?,
                    q3_ns: r.get(5)?,
                    figures: serde_json::from_str(&figures).unwrap_or_default(),
                    samples: samples.and_then(|s| serde_json::from_str(&s).ok()),
                })
            })
            .map_err(self.e())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.e())?;
        Ok(rows)
    }

    /// Deletes a run and its points.
    pub fn delete(&self, id: i64) -> Result<()> {
        self.run(id)?;
        self.conn.execute("DELETE FROM runs WHERE id = ?1", params![id]).map_err(self.e())?;
        Ok(())
    }

    /// The newest survey's id, if any.
    pub fn latest_survey(&self) -> Result<Option<i64>> {
        self.conn.query_row("SELECT MAX(id) FROM surveys", [], |r| r.get(0)).map_err(self.e())
    }

    /// Begins a sweep: what it measures (`spec`, which a resumed sweep must match).
    pub fn begin_sweep(&self, spec: &serde_json::Value) -> Result<i64> {
        self.begin_group(SWEEPS, spec)
    }

    /// Ends a sweep: done, or incomplete (some points failed: --resume measures them again).
    pub fn finish_sweep(&self, id: i64, status: &str) -> Result<()> {
        self.finish_group(SWEEPS, id, status)
    }

    /// The latest sweep with this spec that did not finish (for --resume).
    pub fn unfinished_sweep(&self, spec: &serde_json::Value) -> Result<Option<i64>> {
        self.unfinished_group(SWEEPS, spec)
    }

    /// Stores (or replaces) one point's outcome: its place in the grid,
    /// its key (the settings in words), the point as JSON.
    pub fn put_sweep_point(&self, sweep: i64, idx: usize, key: &str, point: &serde_json::Value) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO sweep_points (sweep_id, idx, key, point, created) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![sweep, idx as i64, key, point.to_string(), now()],
            )
            .map_err(self.e())?;
        Ok(())
    }

    /// A sweep as stored: the row and its points in grid order.
    pub fn sweep(&self, id: i64) -> Result<SweepRow> {
        let row = self
            .conn
            .query_row(
                "SELECT id, started, finished, command_line, spec, status FROM sweeps WHERE id = ?1",
                params![id],
                |r| {
                    let spec: String = r.get(4)?;
                    Ok(SweepRow {
                        id: r.get(0)?,
                        started: r.get(1)?,
                        finished: r.get(2)?,
                        command_line: r.get(3)?,
                        spec: serde_json::from_str(&spec).unwrap_or_default(),
                        status: r.get(5)?,
                        points: Vec::new(),
                    })
                },
            )
            .optional()
            .map_err(self.e())?;
        let Some(mut row) = row else {
            let ids: Vec<i64> = self
                .conn
                .prepare("SELECT id FROM sweeps ORDER BY id DESC LIMIT 20")
                .and_then(|mut q| q.query_map([], |r| r.get(0))?.collect())
                .map_err(self.e())?;
            return Err(Error::usage(match ids.is_empty() {
                true => format!("no sweep {id}: {} holds no sweeps (stream --sweep makes one)", self.path.display()),
                false => format!(
                    "no sweep {id} in {}; the latest are {}",
                    self.path.display(),
                    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                ),
            }));
        };
        let mut st = self
            .conn
            .prepare("SELECT key, point FROM sweep_points WHERE sweep_id = ?1 ORDER BY idx")
            .map_err(self.e())?;
        row.points = st
            .query_map(params![id], |r| {
                let point: String = r.get(1)?;
                Ok((r.get(0)?, serde_json::from_str(&point).unwrap_or_default()))
            })
            .map_err(self.e())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.e())?;
        Ok(row)
    }

    /// The newest sweep's id and start time, if any.
    pub fn latest_sweep(&self) -> Result<Option<(i64, f64)>> {
        self.conn
            .query_row("SELECT id, started FROM sweeps ORDER BY id DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(self.e())
    }

    /// The newest survey's start time, if any.
    pub fn latest_survey_started(&self) -> Result<Option<f64>> {
        self.conn.query_row("SELECT MAX(started) FROM surveys", [], |r| r.get(0)).map_err(self.e())
    }
}

/// A sweep as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    pub id: i64,
    #[serde(rename = "started_unix")]
    pub started: f64,
    #[serde(rename = "finished_unix")]
    pub finished: Option<f64>,
    pub command_line: String,
    /// What it measures (axes, the base test, the network).
    pub spec: serde_json::Value,
    /// running, done, incomplete (a point failed) or interrupted.
    pub status: String,
    /// (key, point) in grid order: the settings in words and the point's outcome.
    pub points: Vec<(String, serde_json::Value)>,
}

impl Drop for Store {
    /// Under sudo, the store's files go back to the user who ran gridperf,
    /// so that their own `gridperf runs` can read and write them later.
    fn drop(&mut self) {
        for f in self.files() {
            crate::host::give_back(&f);
        }
    }
}

/// What `runs list` filters on.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub kind: Option<Measure>,
    pub network: Option<String>,
    pub since: Option<f64>,
    pub survey: Option<i64>,
    pub sweep: Option<i64>,
}
