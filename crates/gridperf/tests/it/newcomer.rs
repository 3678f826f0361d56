//! What a newcomer meets in the first hour, as they would meet it: the
//! store's listings say where each run went and what it found, a failed
//! copy is not listed as valid, a copy's figures show and export, peer
//! tools' habits get gridperf's way in the answer.

use std::path::PathBuf;
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gridperf-newcomer-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    d
}

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("gridperf")
}

#[test]
fn runs_list_shows_where_each_run_went_and_its_headline_and_a_copy_shows_its_files() {
    let _heavy = crate::heavy();
    let d = tmpdir("list");
    let db = d.join("r.db");
    let db = db.to_str().expect("path");
    let o = run(&["rtt", "--proto", "tcp", "--sizes", "64,1k", "-n", "200", "--db", db]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = d.join("src");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join("a.dat"), vec![7u8; 300_000]).expect("a");
    let dst = d.join("dst");
    let o = run(&["copy", src.to_str().expect("p"), &format!("{}/", dst.display()), "--db", db]);
    assert!(o.status.success(), "{}", stderr(&o));
    // the same tree from another source into the same place: refused, stored as failed
    let other = d.join("other/src");
    std::fs::create_dir_all(&other).expect("other");
    std::fs::write(other.join("a.dat"), vec![8u8; 100]).expect("b");
    let o = run(&["copy", other.to_str().expect("p"), &format!("{}/", dst.display()), "--db", db]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let o = run(&["runs", "list", "--db", db]);
    let list = stdout(&o);
    assert!(list.contains("target") && list.contains("headline") && list.contains("command"), "{list}");
    // newest first
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines[3].contains("rtt") && lines[3].contains("RTT ") && lines[3].contains("(2 points)"), "{list}");
    assert!(
        lines[2].contains("copy") && lines[2].contains("1 files, 293.0 KiB moved") && lines[2].contains("yes"),
        "{list}"
    );
    assert!(lines[1].contains("copy") && lines[1].contains("1 not in place") && lines[1].contains("INVALID"), "{list}");
    assert!(lines[2].contains("...") && lines[2].contains("dst/"), "the target's end: {list}");
    // -J as iperf3 has it, with the headline
    let v: serde_json::Value = serde_json::from_slice(&run(&["runs", "list", "--db", db, "-J"]).stdout).expect("json");
    assert!(v["runs"][1]["headline"].as_str().unwrap_or("").contains("moved"), "{v}");
    // a copy's run shows its files, and exports them
    let shown = stdout(&run(&["runs", "show", "2", "--db", db]));
    assert!(shown.contains("src/a.dat") && shown.contains("293.0 KiB"), "{shown}");
    let csv = stdout(&run(&["runs", "export", "2", "--format", "csv", "--db", db]));
    assert!(csv.starts_with("path,size_bytes,moved_bytes") && csv.contains("src/a.dat,300000,300000"), "{csv}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Under nohup, SLURM or a pipe there is no bar, but a survey still says
/// where it is: a plain line at each stage and every few seconds.
#[test]
fn a_survey_without_a_terminal_says_where_it_is_in_plain_lines() {
    let _heavy = crate::heavy();
    let dir = tmpdir("plain");
    let report = dir.join("report.html");
    let report = report.to_str().expect("utf-8 path");
    let out = run(&["survey", "local", "--quick", "--sizes", "1,64", "--proto", "tcp,udp", "-o", report]);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("gridperf: ")).collect();
    assert!(
        lines.iter().any(|l| l.contains(" points · loopback: rtt tcp 1 B")),
        "no plain progress line naming the point in:\n{err}"
    );
    assert!(!err.contains("\u{1b}["), "terminal escapes written to a pipe:\n{err}");
    assert!(out.status.success(), "survey failed:\n{err}");
    // a command whose messages are points, not stages (rtt's "tcp 64 B"), is
    // not a line per point: it wrote 16 lines for a run of one second
    let out = run(&["rtt", "--sizes", "1,64,1024", "-n", "200", "--no-store"]);
    let points = stderr(&out).lines().filter(|l| l.contains(" points · ")).count();
    assert!(out.status.success() && (1..=2).contains(&points), "{points} progress lines:\n{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
