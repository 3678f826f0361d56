//! gridperf as a pScheduler tool: each method run as pScheduler runs it
//! (JSON on stdin, JSON on stdout), against a real agent on loopback, and
//! every spec and result checked against the JSON schema pScheduler itself
//! checks them with (tests/fixtures/pscheduler, written from its
//! validate.py files by extract.py there), by python3-jsonschema.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pscheduler")
}

/// `gridperf pscheduler METHOD` with `input` on stdin (and the tool's
/// configuration file `conf`, if given).
fn method(m: &str, input: &str, conf: Option<&std::path::Path>) -> Output {
    let mut c = crate::bin();
    c.args(["pscheduler", m]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(f) = conf {
        c.env("GRIDPERF_PSCHEDULER_CONF", f);
    }
    let mut child = c.spawn().expect("gridperf pscheduler");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    child.wait_with_output().expect("wait")
}

fn json_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// Whether pScheduler's own schema takes `doc` (python3-jsonschema, as pScheduler validates).
fn check(schema: &str, doc: &serde_json::Value) {
    let mut child = Command::new("python3")
        .arg(fixtures().join("validate.py"))
        .arg(fixtures().join(schema))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (and python3-jsonschema: .ci/run installs them)");
    child.stdin.take().expect("stdin").write_all(doc.to_string().as_bytes()).expect("write");
    let o = child.wait_with_output().expect("validate");
    assert!(o.status.success(), "{schema} refuses it: {}\n{doc:#}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_throughput_test_runs_as_pscheduler_runs_it_and_its_result_fits_the_schema() {
    let _heavy = crate::heavy();
    let (_agent, port) = crate::serve_on("127.0.0.1", &[]);
    let spec = serde_json::json!({ "schema": 1, "dest": "127.0.0.1", "duration": "PT2S", "parallel": 2, "interval": "PT0.5S" });
    check("throughput-spec.schema.json", &spec);
    let test = serde_json::json!({ "type": "throughput", "spec": spec });
    // enumerate, can-run, duration, participant-data
    let e = json_of(&method("enumerate", "", None));
    assert_eq!(e["name"], "gridperf");
    assert!(e["tests"].as_array().expect("tests").iter().any(|t| t == "throughput"));
    assert_eq!(json_of(&method("can-run", &test.to_string(), None))["can-run"], true);
    let d = json_of(&method("duration", &serde_json::json!({ "spec": spec, "type": "throughput" }).to_string(), None));
    assert_eq!(d["duration"], "PT12S", "2 s and 10 s to set up and end");
    let conf = std::env::temp_dir().join(format!("gridperf-pscheduler-{}.conf", std::process::id()));
    std::fs::write(&conf, format!("{{\"agent-port\": {port}}}")).expect("conf");
    let pd1 = json_of(&method("participant-data", r#"{"participant": 1}"#, Some(&conf)));
    assert_eq!(pd1["agent-port"], port);
    // run, as participant 0 (the source measures) and 1 (its agent serves)
    let input = |p: u64| {
        serde_json::json!({ "participant": p, "participant-data": [{}, pd1], "test": test,
                            "schedule": { "start": "2026-11-24T12:00:00Z", "duration": "PT12S" } })
        .to_string()
    };
    let r0 = json_of(&method("run", &input(0), None));
    check("throughput-result.schema.json", &r0);
    assert_eq!(r0["succeeded"], true, "{r0:#}");
    let sum = &r0["summary"]["summary"];
    assert!(sum["throughput-bits"].as_f64().unwrap_or(0.0) > 1e8, "{sum}");
    assert_eq!(r0["summary"]["streams"].as_array().map(Vec::len), Some(2));
    let intervals = r0["intervals"].as_array().expect("intervals");
    assert!((4..=5).contains(&intervals.len()), "{} intervals of 0.5 s in 2 s", intervals.len());
    // the intervals' bytes are the streams' bytes
    let per: f64 = intervals.iter().map(|i| i["summary"]["throughput-bytes"].as_f64().unwrap_or(0.0)).sum();
    let total = sum["throughput-bytes"].as_f64().unwrap_or(0.0);
    assert!(
        (per - total).abs() <= total * 0.35,
        "{per} over the intervals, {total} in all (the intervals include --omit's)"
    );
    let r1 = json_of(&method("run", &input(1), None));
    check("throughput-result.schema.json", &r1);
    let merged =
        json_of(&method("merged-results", &serde_json::json!({ "test": test, "results": [r0, r1] }).to_string(), None));
    check("throughput-result.schema.json", &merged);
    assert_eq!(merged["summary"], r0["summary"]);
    assert!(merged["diags"].as_str().unwrap_or("").contains("Participant 1:"));
    let _ = std::fs::remove_file(&conf);
}

#[test]
fn an_rtt_test_gives_each_round_trip_as_a_duration() {
    let (_agent, port) = crate::serve_on("127.0.0.1", &[]);
    let conf = std::env::temp_dir().join(format!("gridperf-pscheduler-rtt-{}.conf", std::process::id()));
    std::fs::write(&conf, format!("{{\"agent-port\": {port}}}")).expect("conf");
    let spec = serde_json::json!({ "schema": 1, "dest": "127.0.0.1", "count": 20, "length": 200, "timeout": "PT1S" });
    check("rtt-spec.schema.json", &spec);
    let input =
        serde_json::json!({ "participant": 0, "participant-data": [{}], "test": { "type": "rtt", "spec": spec } });
    let r = json_of(&method("run", &input.to_string(), Some(&conf)));
    check("rtt-result.schema.json", &r);
    assert_eq!(r["succeeded"], true, "{r:#}");
    let trips = r["roundtrips"].as_array().expect("roundtrips");
    assert_eq!(trips.len() as u64 + r["lost"].as_u64().expect("lost"), 20);
    assert!(trips.iter().all(|t| t["length"] == 200));
    let secs = |v: &serde_json::Value| {
        gridperf::commands::pscheduler::iso_seconds(v.as_str().expect("a duration")).expect("ISO 8601")
    };
    let (min, max) = (secs(&r["min"]), secs(&r["max"]));
    assert!(min > 0.0 && min <= max && max < 1.0, "{min} {max}");
    assert!(trips.iter().all(|t| (min..=max).contains(&secs(&t["rtt"]))));
    let _ = std::fs::remove_file(&conf);
}

#[test]
fn a_disk_to_disk_test_copies_verified_and_cleans_up() {
    let d = std::env::temp_dir().join(format!("gridperf-pscheduler-d2d-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root")).expect("dir");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(d.join("root/a.dat"), &data).expect("source");
    let root = d.join("root");
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("path")]);
    // the tool writes only beneath its own directory (dest-root in its configuration)
    let out = d.join("out");
    let conf = d.join("gridperf.conf");
    std::fs::write(&conf, serde_json::json!({ "dest-root": out.to_str().expect("path") }).to_string()).expect("conf");
    let run = |spec: &serde_json::Value| {
        let input = serde_json::json!({ "participant": 0, "participant-data": [{}], "test": { "type": "disk-to-disk", "spec": spec } });
        method("run", &input.to_string(), Some(&conf))
    };
    let spec = serde_json::json!({ "schema": 1, "source": format!("gridperf://127.0.0.1:{port}/a.dat"),
                                   "dest": "copy.dat", "parallel": 2, "cleanup": false });
    check("disk-to-disk-spec.schema.json", &spec);
    let r = json_of(&run(&spec));
    check("disk-to-disk-result.schema.json", &r);
    assert_eq!(r["succeeded"], true, "{r:#}");
    assert_eq!(r["bytes-sent"], 3_000_000.0);
    assert_eq!(std::fs::read(out.join("copy.dat")).expect("the copy"), data);
    // cleanup (pScheduler's default) removes what was copied, and nothing else
    let mut spec = spec;
    spec["cleanup"] = serde_json::json!(true);
    spec["dest"] = serde_json::json!(out.join("second.dat").to_str().expect("path"));
    let r = json_of(&run(&spec));
    assert_eq!(r["succeeded"], true, "{r:#}");
    let left: Vec<_> = std::fs::read_dir(&out).expect("out").flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("copy.dat")], "cleanup left more, or took the first copy");
    // an existing dest is never replaced nor removed: with cleanup false the copy says so, with cleanup it is untouched
    std::fs::write(out.join("precious.conf"), b"keep me").expect("precious");
    for cleanup in [false, true] {
        spec["cleanup"] = serde_json::json!(cleanup);
        spec["dest"] = serde_json::json!("precious.conf");
        let r = json_of(&run(&spec));
        check("disk-to-disk-result.schema.json", &r);
        assert_eq!(std::fs::read(out.join("precious.conf")).expect("still there"), b"keep me", "cleanup {cleanup}");
        if !cleanup {
            assert_eq!(r["succeeded"], false, "{r:#}");
            assert!(r["error"].as_str().unwrap_or("").contains("replaces nothing"), "{r:#}");
        }
    }
    // a dest outside the tool's directory: can-run says no, and run touches nothing
    std::fs::write(d.join("site.conf"), b"site").expect("site");
    spec["dest"] = serde_json::json!(d.join("site.conf").to_str().expect("path"));
    let input = serde_json::json!({ "type": "disk-to-disk", "spec": spec });
    let v = json_of(&method("can-run", &input.to_string(), Some(&conf)));
    assert_eq!(v["can-run"], false, "{v}");
    assert!(v["reasons"].to_string().contains("outside the directory this tool writes into"), "{v}");
    for dest in [d.join("site.conf").to_str().expect("path").to_string(), "../site.conf".into()] {
        spec["dest"] = serde_json::json!(dest);
        let o = run(&spec);
        assert!(!o.status.success(), "{dest}");
        assert_eq!(std::fs::read(d.join("site.conf")).expect("untouched"), b"site", "{dest}");
    }
    // a source that is not there fails in the result, with the reason, and leaves nothing
    spec["dest"] = serde_json::json!("missing.dat");
    spec["source"] = serde_json::json!(format!("gridperf://127.0.0.1:{port}/missing.dat"));
    let r = json_of(&run(&spec));
    check("disk-to-disk-result.schema.json", &r);
    assert_eq!(r["succeeded"], false, "{r:#}");
    assert!(r["error"].as_str().unwrap_or("").contains("missing.dat"), "{r:#}");
    let mut left: Vec<_> = std::fs::read_dir(&out).expect("out").flatten().map(|e| e.file_name()).collect();
    left.sort();
    assert_eq!(left, vec![std::ffi::OsString::from("copy.dat"), "precious.conf".into()]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn absurd_durations_and_counts_are_refused_not_a_panic() {
    for (m, spec, says) in [
        ("run", r#"{"dest": "127.0.0.1", "duration": "PT100000000000000000000S"}"#, "at most a day"),
        ("duration", r#"{"dest": "127.0.0.1", "duration": "PT100000000000000000000S"}"#, "at most a day"),
    ] {
        let input = format!(
            r#"{{"participant": 0, "participant-data": [{{}}], "test": {{"type": "throughput", "spec": {spec}}}}}"#
        );
        let o = method(m, &input, None);
        assert_eq!(o.status.code(), Some(2), "{m}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{m}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let rtt = r#"{"participant": 0, "participant-data": [{}], "test": {"type": "rtt", "spec": {"dest": "127.0.0.1", "count": 18446744073709551615}}}"#;
    for m in ["run", "duration"] {
        let o = method(m, rtt, None);
        assert_eq!(o.status.code(), Some(2), "{m}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains("count 18446744073709551615: at most"), "{m}");
    }
    let v =
        json_of(&method("can-run", r#"{"type": "rtt", "spec": {"dest": "h", "count": 18446744073709551615}}"#, None));
    assert_eq!(v["can-run"], false, "{v}");
}

#[test]
fn malformed_or_missing_json_exits_non_zero_with_a_message() {
    for (m, input, says) in [
        ("run", "", "no JSON on stdin"),
        ("run", "{\"participant\": 0,", "not valid"),
        ("run", "[1, 2]", "must be an object"),
        ("run", r#"{"participant": 0, "test": {"type": "throughput"}}"#, "no test spec"),
        ("run", r#"{"participant": 0, "test": {"type": "latency", "spec": {}}}"#, "does not run latency"),
        ("duration", r#"{"type": "throughput", "spec": {"dest": "h", "duration": "ten"}}"#, "ISO 8601"),
        ("merged-results", r#"{"test": {}}"#, "no results"),
        ("participant-data", "{}", "no participant"),
    ] {
        let o = method(m, input, None);
        assert!(!o.status.success(), "{m} {input}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{m} {input}: {err}");
        assert!(o.stdout.is_empty(), "{m} {input} printed {:?}", String::from_utf8_lossy(&o.stdout));
    }
    // can-run answers, rather than fails, for a test it cannot run
    let o = method("can-run", r#"{"type": "rtt", "spec": {"dest": "h", "ttl": 2}}"#, None);
    let v = json_of(&o);
    assert_eq!(v["can-run"], false);
    assert!(v["reasons"][0].as_str().unwrap_or("").contains("ttl"), "{v}");
}
