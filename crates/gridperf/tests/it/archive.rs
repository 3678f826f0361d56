//! The shared archive in PostgreSQL: a real server (Debian's `postgresql`
//! package), a private cluster in a temporary directory made and started
//! by each test (initdb and pg_ctl as an unprivileged user, a random port,
//! its socket in the temporary directory), then stopped and removed.
//! Outside CI a machine without the server skips these loudly; in CI
//! (`.ci/run` installs it) they must run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
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
        PgServer::start_with(tag, false)
    }

    /// The same, serving TLS too with a certificate for `localhost` that a
    /// CA of the test's own signed (ca.crt in its directory; other-ca.crt a
    /// CA that signed nothing of it).
    pub fn start_tls(tag: &str) -> Option<PgServer> {
        PgServer::start_with(tag, true)
    }

    fn start_with(tag: &str, tls: bool) -> Option<PgServer> {
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
        let mut opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
            s.dir.display()
        );
        if tls {
            s.make_certificates();
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                s.dir.display()
            ));
        }
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

    /// A CA, a server certificate it signs for the name localhost (not for
    /// 127.0.0.1), and a second CA, with openssl; the key the server's own.
    fn make_certificates(&self) {
        let d = &self.dir;
        let ssl = |args: &[&str]| {
            let o = Command::new("openssl").args(args).current_dir(d).stdin(Stdio::null()).output().expect("openssl");
            assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
        };
        for ca in ["ca", "other-ca"] {
            ssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=gridperf test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ]);
        }
        ssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(d.join("san.ext"), "subjectAltName=DNS:localhost\n").expect("san");
        ssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        use std::os::unix::fs::PermissionsExt;
        let key = d.join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if let Some(u) = self.user {
            let (uid, gid) = user_ids(u).expect("the server's user");
            for f in ["server.key", "server.crt"] {
                std::os::unix::fs::chown(d.join(f), Some(uid), Some(gid)).expect("chown");
            }
        }
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

    /// Runs SQL in the server's database `db` with psql, for a test's own
    /// checks: its rows, each a line of fields separated by `|`.
    pub fn sql(&self, db: &str, sql: &str) -> Vec<String> {
        let psql = if self.bin.join("psql").exists() { self.bin.join("psql") } else { PathBuf::from("psql") };
        let o = Command::new(psql)
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", &self.dsn(db), "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        assert!(o.status.success(), "psql {sql}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect()
    }

    /// One number a query gives.
    pub fn count(&self, db: &str, sql: &str) -> i64 {
        self.sql(db, sql).first().and_then(|l| l.trim().parse().ok()).expect("a number")
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
    let mut c = crate::bin();
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
    let docs = pg.sql(
        "postgres",
        "SELECT jsonb_typeof(document), document->'run'->>'status', jsonb_array_length(document->'points') FROM runs WHERE kind = 'rtt'",
    );
    assert_eq!(docs, vec!["object|done|8".to_string(), "object|done|8".to_string()]);
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
    let half = pg.count("postgres", "SELECT COUNT(*) FROM points WHERE figures IS NULL OR median_ns IS NULL");
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
    for db in ["newer", "theirs"] {
        pg.sql("postgres", &format!("CREATE DATABASE {db}"));
    }
    // a schema newer than this gridperf's
    let newer = pg.dsn("newer");
    assert!(run(&["runs", "list", "--db", &newer]).status.success());
    pg.sql("newer", "UPDATE gridperf_schema SET version = 99");
    let o = run(&["runs", "list", "--db", &newer]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("newer gridperf (schema 99"), "{}", stderr(&o));
    assert_eq!(pg.count("newer", "SELECT version FROM gridperf_schema"), 99, "the newer archive was changed");
    // another application's tables of the same names
    pg.sql("theirs", "CREATE TABLE runs (x int); INSERT INTO runs VALUES (7)");
    let o = survey(&pg, &pg.dsn("theirs"), "1").output().expect("survey");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a gridperf archive"), "{}", stderr(&o));
    let tables = pg.count("theirs", "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'");
    assert_eq!(tables, 1, "a table was added to another application's database");
    // a user the server does not know, and a DSN that asks for TLS of a
    // server without it: turned away, never downgraded
    let o = run(&["runs", "list", "--db", &format!("postgres://nobody@127.0.0.1:{}/postgres", pg.port)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("turned gridperf away") && stderr(&o).contains("nobody"), "{}", stderr(&o));
    let o = run(&["runs", "list", "--db", &format!("{}?sslmode=require", pg.dsn("postgres"))]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sslmode asks for TLS"), "{}", stderr(&o));
    // prefer (libpq's default) to a server without TLS connects, and says so
    let o = run(&["runs", "list", "--db", &pg.dsn("postgres")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("took no TLS"), "{}", stderr(&o));
    // the server gone: a clear error before anything is measured
    let dsn = pg.dsn("postgres");
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
    let mut child = crate::bin()
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
    for d in [doc("gridperf", test, result), failed_rtt] {
        let text = d.to_string().replace('\'', "''");
        pg.sql("postgres", &format!("INSERT INTO pscheduler_results (document) VALUES ('{text}')"));
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

#[test]
fn tls_to_the_archive_as_libpq_offers_it_and_never_a_silent_downgrade() {
    let Some(pg) = PgServer::start_tls("tls") else { return };
    let home = pg.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let list = |host: &str, params: &str| {
        let dsn = format!("postgres://gridperf@{host}:{}/postgres?{params}", pg.port);
        crate::bin().args(["runs", "list", "--db", &dsn]).env("HOME", &home).output().expect("runs list")
    };
    let ca = pg.dir.join("ca.crt");
    let other = pg.dir.join("other-ca.crt");
    let (ca, other) = (ca.to_str().expect("path"), other.to_str().expect("path"));
    // require: encrypted (not verified, as libpq); prefer takes the TLS on offer, without a warning
    for params in ["sslmode=require", "sslmode=prefer"] {
        let o = list("127.0.0.1", params);
        assert!(o.status.success(), "{params}: {}", stderr(&o));
        assert!(!stderr(&o).contains("took no TLS"), "{params}: {}", stderr(&o));
    }
    // verify-full: the chain and the name
    let o = list("localhost", &format!("sslmode=verify-full&sslrootcert={ca}"));
    assert!(o.status.success(), "{}", stderr(&o));
    // an address the certificate does not name: verify-full refuses, verify-ca takes it
    let o = list("127.0.0.1", &format!("sslmode=verify-full&sslrootcert={ca}"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sslmode asks for TLS") && stderr(&o).contains("not valid for name"), "{}", stderr(&o));
    let o = list("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}"));
    assert!(o.status.success(), "{}", stderr(&o));
    // a CA that signed nothing of it: refused by verify-ca, verify-full and require with a root
    for mode in ["verify-ca", "verify-full", "require"] {
        let o = list("localhost", &format!("sslmode={mode}&sslrootcert={other}"));
        assert_eq!(o.status.code(), Some(2), "{mode}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("UnknownIssuer") || stderr(&o).contains("unknown issuer"),
            "{mode}: {}",
            stderr(&o)
        );
    }
    // verify without a root given, and none at ~/.postgresql/root.crt: says where to put one
    let o = list("localhost", "sslmode=verify-full");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("give sslrootcert=FILE"), "{}", stderr(&o));
    // a mode libpq does not know
    let o = list("localhost", "sslmode=always");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("verify-full"), "{}", stderr(&o));
}

/// A TCP proxy to `to` that passes the server's first messages through to
/// its ReadyForQuery, then passes nothing more from the server (as a server
/// that hangs after the start-up would), for as long as it lives.
fn freezing_proxy(to: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let Ok((mut client, _)) = l.accept() else { return };
        let mut server = TcpStream::connect(("127.0.0.1", to)).expect("the server");
        let (mut c2, mut srv2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut c2, &mut srv2);
        });
        // the server's messages: a type byte and a length each; through to the first 'Z'
        loop {
            let mut head = [0u8; 5];
            if server.read_exact(&mut head).is_err() {
                return;
            }
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            if server.read_exact(&mut body).is_err()
                || client.write_all(&head).is_err()
                || client.write_all(&body).is_err()
            {
                return;
            }
            if head[0] == b'Z' {
                break;
            }
        }
        // then silence, the connection held open
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (port, stop)
}

#[test]
fn a_server_that_accepts_and_never_answers_ends_in_an_error_not_a_hang() {
    // a listener that takes the connection and says nothing (connect_timeout bounded only the TCP connect)
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let held = std::thread::spawn(move || {
        let conns: Vec<_> = (0..1).filter_map(|_| l.accept().ok()).collect();
        std::thread::sleep(Duration::from_secs(8));
        drop(conns);
    });
    let started = Instant::now();
    let o = run(&["runs", "list", "--db", &format!("postgres://gridperf@127.0.0.1:{port}/x?connect_timeout=2")]);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("did not complete the connection within 2 s"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(6), "took {took:?}");
    let _ = held.join();
    // a server that finishes its start-up and then stops answering: each
    // statement waits the server's own deadline and a margin, no more
    let Some(pg) = PgServer::start("hang") else { return };
    assert!(run(&["runs", "list", "--db", &pg.dsn("postgres")]).status.success());
    let (proxy, stop) = freezing_proxy(pg.port);
    let dsn =
        format!("postgres://gridperf@127.0.0.1:{proxy}/postgres?sslmode=disable&options=-c%20statement_timeout%3D1000");
    let started = Instant::now();
    let o = run(&["runs", "list", "--db", &dsn]);
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("did not answer a statement within 6 s"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(12), "took {took:?}");
}
