//! The suite itself: it keeps away from the user's files. Every gridperf a
//! test starts runs with a home of the run's own and no GRIDPERF_DB
//! (`crate::bin`, `crate::hermetic`); this test runs a part of the suite
//! again, as a user whose home and GRIDPERF_DB are traps, and finds both
//! untouched.

use std::path::Path;

/// Every file beneath `d`.
fn files(d: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_suite_never_touches_the_users_store_home_or_gridperf_db() {
    let trap = std::env::temp_dir().join(format!("gridperf-test-trap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&trap);
    let home = trap.join("home");
    std::fs::create_dir_all(&home).expect("the trap home");
    let db = trap.join("shared-archive.db");
    // the tests that run the binary the most, storing runs as a user would,
    // and the browser that draws the report (chromium keeps a profile and a
    // cache in the home it is given)
    let exe = std::env::current_exe().expect("the suite's own binary");
    let o = std::process::Command::new(exe)
        .args(["cli::", "echo::", "newcomer::", "store::the_report_renders", "--test-threads", "2"])
        .env("HOME", &home)
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("GRIDPERF_DB", &db)
        .output()
        .expect("the suite");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("test result: ok"), "{out}");
    let left = files(&home);
    assert!(left.is_empty(), "the suite wrote into the user's home: {left:?}");
    assert!(!db.exists(), "the suite wrote into GRIDPERF_DB");
    let _ = std::fs::remove_dir_all(&trap);
}
