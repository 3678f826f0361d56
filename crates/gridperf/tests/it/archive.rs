//! The shared archive in PostgreSQL: a real server (Debian's `postgresql`
//! package), a private cluster in a temporary directory made and started
//! by each test (initdb and pg_ctl as an unprivileged user, a random port,
//! its socket in the temporary directory), then stopped and removed.
//! Outside CI a machine without the server skips these loudly; in CI
//! (`.ci/run` installs it) they must run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gridperf");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The newest PostgreSQL server's programs on this machine.
fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok())
    });
    dirs.pop()
}

/// A user's uid and gid from /etc/passwd.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let f: Vec<&str> = passwd.lines().find(|l| l.split(':').next() == Some(name))?.split(':').collect();
    Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
}

/// A private PostgreSQL cluster, stopped and removed when dropped.
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    /// Who runs it: None when the tests do not run as root (they run it).
    user: Option<&'static str>,
    pub port: u16,
    reports: std::sync::atomic::AtomicUsize,
}

impl PgServer {
    /// Makes and starts a cluster; None (said loudly) where there is no
    /// server to run, which CI does not allow.
    pub fn start(tag: &str) -> Option<PgServer> {
        let Some(bin) = pg_bin() else {
            assert!(
                std::env::var("CI").ok().as_deref() != Some("true"),
                "CI must run the archive tests: .ci/run installs postgresql"
            );
            eprintln!("\n*** SKIPPED archive::{tag}: no PostgreSQL server (apt install postgresql) ***\n");
            return None;
        };
        let root = gridperf_sys::euid() == 0;
        // initdb refuses root: root runs the server as the package's user
        let user = root.then_some("postgres");
        let dir = std::env::temp_dir().join(format!("gridperf-pg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pg dir");
        if let Some(u) = user {
            let (uid, gid) = user_ids(u).expect("the postgresql package's user, postgres");
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown");
        }
        let port = crate::free_port();
        let s = PgServer { dir, bin, user, port, reports: Default::default() };
        let data = s.dir.join("data");
        let o = s
            .cmd(
                "initdb",
                &["-D", data.to_str().expect("path"), "-A", "trust", "-U", "gridperf", "-E", "UTF8", "--no-sync"],
            )
            .output()
            .expect("initdb");
        assert!(o.status.success(), "initdb: {}", stderr(&o));
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
            s.dir.display()
        );
        let log = s.dir.join("log");
        let o = s
            .cmd(
                "pg_ctl",
                &[
                    "-D",
                    data.to_str().expect("path"),
                    "-o",
                    &opts,
                    "-l",
                    log.to_str().expect("path"),
                    "-w",
                    "-t",
                    "30",
                    "start",
                ],
            )
            .output()
            .expect("pg_ctl start");
        assert!(
            o.status.success(),
            "pg_ctl start: {} {}",
            stderr(&o),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Some(s)
    }

    fn cmd(&self, prog: &str, args: &[&str]) -> Command {
        let exe = self.bin.join(prog);
        let mut c = match self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        c.args(args).current_dir(&self.dir).stdin(Stdio::null());
        c
    }

    /// A DSN for a database of this server.
    pub fn dsn(&self, db: &str) -> String {
        format!("postgres://gridperf@127.0.0.1:{}/{db}", self.port)
    }

    /// A client of the server's database `db`, for a test's own checks.
    pub fn client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.dsn(db), postgres::NoTls).expect("connect")
    }

    /// Stops the server at once (as a crash would).
    pub fn stop(&self) {
        let data = self.dir.join("data");
        let _ = self
            .cmd("pg_ctl", &["-D", data.to_str().expect("path"), "-m", "immediate", "-w", "-t", "30", "stop"])
            .output();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A quick loopback survey into `dsn`, its report written into `pg`'s directory.
fn survey(pg: &PgServer, dsn: &str, sizes: &str) -> Command {
    let mut c = Command::new(BIN);
    let report = pg.dir.join(format!("report-{}.html", pg.reports.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    c.args([
        "survey",
        "local",
        "--quick",
        "--proto",
        "tcp,udp",
        "--sizes",
        sizes,
        "--no-transfer",
        "--db",
        dsn,
        "--json",
    ]);
    c.arg("-o").arg(report);
    c
}

fn runs_in(dsn: &str) -> serde_json::Value {
    let o = run(&["runs", "list", "--db", dsn, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("runs json")
}

#[test]
fn two_surveys_write_one_archive_at_once_and_a_third_process_reports_it() {
    let _heavy = crate::heavy();
    let Some(pg) = PgServer::start("two") else { return };
    let dsn = pg.dsn("postgres");
    // both arrive at an empty archive together: one makes the schema
    let children: Vec<Child> = (0..2)
        .map(|_| {
            survey(&pg, &dsn, "1,64,512,1k").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("survey")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("survey");
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("survey json");
        assert_eq!(v["networks"][0]["network"], "loopback", "{v}");
    }
    let listed = runs_in(&dsn);
    let runs = listed["runs"].as_array().expect("runs");
    let rtt: Vec<&serde_json::Value> = runs.iter().filter(|r| r["kind"] == "rtt").collect();
    assert_eq!(rtt.len(), 2, "{listed}");
    assert!(rtt.iter().all(|r| r["points"] == 8 && r["status"] == "done"), "{listed}");
    assert_ne!(rtt[0]["survey_id"], rtt[1]["survey_id"]);
    // each run's whole document is kept as jsonb beside the columns
    let mut c = pg.client("postgres");
    let docs = c
        .query("SELECT jsonb_typeof(document), document->'run'->>'status', jsonb_array_length(document->'points') FROM runs WHERE kind = 'rtt'", &[])
        .expect("documents");
    assert_eq!(docs.len(), 2);
    for d in &docs {
        assert_eq!(d.get::<_, Option<String>>(0).as_deref(), Some("object"));
        assert_eq!(d.get::<_, Option<String>>(1).as_deref(), Some("done"));
        assert_eq!(d.get::<_, Option<i32>>(2), Some(8));
    }
    // a third process draws the report from the archive
    let d = std::env::temp_dir().join(format!("gridperf-pg-report-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    let report = d.join("r.html");
    let o = run(&["report", "--db", &dsn, "-o", report.to_str().expect("path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&report).expect("report");
    assert!(html.contains("<svg"), "no plot in the report");
    // the password of a DSN is never shown
    let o =
        run(&["runs", "show", "999", "--db", &format!("postgres://gridperf:s3cret@127.0.0.1:{}/postgres", pg.port)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no run 999 in postgres://gridperf:***@127.0.0.1"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("s3cret"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_survey_killed_mid_run_resumes_against_the_archive() {
    let _heavy = crate::heavy();
    let Some(pg) = PgServer::start("resume") else { return };
    let dsn = pg.dsn("postgres");
    let sizes = "1,64,512,1k,1460,2k,4k,8k,16k,32k";
    let mut child = survey(&pg, &dsn, sizes).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("survey");
    let points = || crate::store::points_stored(Path::new(&dsn));
    crate::wait_until(Duration::from_secs(60), "no points stored", || points() >= 5);
    child.kill().expect("kill");
    let _ = child.wait();
    let kept = points();
    // every point is its own transaction: what is there is whole
    let mut c = pg.client("postgres");
    let half: i64 = c
        .query_one("SELECT COUNT(*) FROM points WHERE figures IS NULL OR median_ns IS NULL", &[])
        .expect("count")
        .get(0);
    assert_eq!(half, 0);
    let o = survey(&pg, &dsn, sizes).arg("--resume").output().expect("resume");
    assert!(o.status.success(), "{}", stderr(&o));
    let listed = runs_in(&dsn);
    let rtt: Vec<&serde_json::Value> =
        listed["runs"].as_array().expect("runs").iter().filter(|r| r["kind"] == "rtt").collect();
    assert_eq!(rtt.len(), 1, "resume made a second run: {listed}");
    assert_eq!(rtt[0]["points"], 20, "2 protocols x 10 sizes, each once ({kept} kept before)");
    assert_eq!(rtt[0]["status"], "done");
}

#[test]
fn an_archive_down_newer_or_not_ours_is_refused_and_left_untouched() {
    let _heavy = crate::heavy();
    let Some(pg) = PgServer::start("refuse") else { return };
    let mut c = pg.client("postgres");
    for db in ["newer", "theirs"] {
        c.batch_execute(&format!("CREATE DATABASE {db}")).expect("database");
    }
    // a schema newer than this gridperf's
    let newer = pg.dsn("newer");
    assert!(run(&["runs", "list", "--db", &newer]).status.success());
    let mut n = pg.client("newer");
    n.batch_execute("UPDATE gridperf_schema SET version = 99").expect("bump");
    let o = run(&["runs", "list", "--db", &newer]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("newer gridperf (schema 99"), "{}", stderr(&o));
    let v: i64 = n.query_one("SELECT version FROM gridperf_schema", &[]).expect("version").get(0);
    assert_eq!(v, 99, "the newer archive was changed");
    // another application's tables of the same names
    let mut t = pg.client("theirs");
    t.batch_execute("CREATE TABLE runs (x int); INSERT INTO runs VALUES (7)").expect("theirs");
    let o = survey(&pg, &pg.dsn("theirs"), "1").output().expect("survey");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a gridperf archive"), "{}", stderr(&o));
    let tables: i64 = t
        .query_one("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'", &[])
        .expect("tables")
        .get(0);
    assert_eq!(tables, 1, "a table was added to another application's database");
    // a user the server does not know, and a DSN that asks for TLS (which
    // gridperf does not speak): turned away, never downgraded
    let o = run(&["runs", "list", "--db", &format!("postgres://nobody@127.0.0.1:{}/postgres", pg.port)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("turned gridperf away") && stderr(&o).contains("nobody"), "{}", stderr(&o));
    let o = run(&["runs", "list", "--db", &format!("{}?sslmode=require", pg.dsn("postgres"))]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be reached"), "{}", stderr(&o));
    // the server gone: a clear error before anything is measured
    let dsn = pg.dsn("postgres");
    drop((c, n, t));
    pg.stop();
    let started = Instant::now();
    let o = survey(&pg, &dsn, "1").output().expect("survey");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be reached"), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    // with the default SQLite store nothing changes: a run stores as before
    let d = std::env::temp_dir().join(format!("gridperf-pg-down-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    let db = d.join("r.db");
    let o = survey(&pg, db.to_str().expect("path"), "1").output().expect("survey");
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn pscheduler_archiver_documents_are_drawn_by_the_report() {
    let _heavy = crate::heavy();
    let Some(pg) = PgServer::start("psched") else { return };
    let dsn = pg.dsn("postgres");
    // the archive's tables, as any gridperf makes them on first use
    assert!(run(&["runs", "list", "--db", &dsn]).status.success());
    // a throughput result as gridperf's pScheduler tool gives it, against a real agent
    let (_agent, port) = crate::serve_on("127.0.0.1", &[]);
    let test =
        serde_json::json!({ "type": "throughput", "spec": { "schema": 1, "dest": "127.0.0.1", "duration": "PT1S" } });
    let input = serde_json::json!({ "participant": 0, "participant-data": [{}, { "agent-port": port }], "test": test });
    let mut child = Command::new(BIN)
        .args(["pscheduler", "run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pscheduler run");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.to_string().as_bytes()).expect("write");
    let o = child.wait_with_output().expect("run");
    assert!(o.status.success(), "{}", stderr(&o));
    let result: serde_json::Value = serde_json::from_slice(&o.stdout).expect("result");
    let bps = result["summary"]["summary"]["throughput-bits"].as_f64().expect("throughput");
    // the document pScheduler's archiver hands its archivers, for this run and a failed rtt of another tool
    let doc = |tool: &str, test: serde_json::Value, result: serde_json::Value| {
        serde_json::json!({ "id": "0c7d1b7e", "schedule": { "start": "2026-11-24T12:00:00Z", "duration": "PT11S" },
                            "test": test, "tool": { "name": tool, "version": "1.0" }, "participants": ["src.example"],
                            "result": result })
    };
    let failed_rtt = doc(
        "ping",
        serde_json::json!({ "type": "rtt", "spec": { "dest": "203.0.113.9" } }),
        serde_json::json!({ "succeeded": false, "error": "host unreachable" }),
    );
    // as the archiver inserts it: INSERT INTO table (column) VALUES (%s), the JSON as a literal
    let mut c = pg.client("postgres");
    for d in [doc("gridperf", test, result), failed_rtt] {
        let text = d.to_string().replace('\'', "''");
        c.batch_execute(&format!("INSERT INTO pscheduler_results (document) VALUES ('{text}')")).expect("archive");
    }
    let report = pg.dir.join("ps.html");
    let o = run(&["report", "--pscheduler", "--db", &dsn, "-o", report.to_str().expect("path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 pScheduler results, 1 plots"), "{}", stderr(&o));
    let html = std::fs::read_to_string(&report).expect("report");
    assert!(html.contains(&format!("{:.2} Mbit/s", bps / 1e6)), "the run's throughput is not in the table");
    assert!(html.contains("failed: host unreachable"));
    assert!(html.contains("src.example -&gt; 203.0.113.9"), "{html}");
    assert!(html.contains("<svg"));
}
