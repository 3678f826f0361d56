//! Runs inside private network namespaces: as root, or as any other user
//! in a user namespace of their own (the rootless lab). In CI (CI=true)
//! they must run, as root and again as an unprivileged user; elsewhere,
//! where neither is possible, they skip with a loud message.

use std::process::Command;

/// Whether this process may make network namespaces (as root, or in a user
/// namespace of its own); panics in CI if not.
pub fn privileged(test: &str) -> bool {
    if gridperf::host::is_root() {
        return true;
    }
    // what gridperf does as a user: a user namespace, and a network namespace in it
    let userns = Command::new("unshare").args(["--user", "--map-root-user", "--net", "true"]).output();
    if userns.as_ref().is_ok_and(|o| o.status.success()) {
        return true;
    }
    let why = match gridperf_sys::userns_blocker() {
        Some((k, v)) => format!("{k} = {v}"),
        None => format!("unshare --user --net: {userns:?}"),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} needs network namespaces (root, or user namespaces for users: {why}), and CI must run it");
    }
    eprintln!("\n*** SKIPPED {test}: needs root or user namespaces for users ({why}) ***\n");
    false
}

#[test]
fn loopback_mtu_1500_in_a_private_namespace() {
    if !privileged("loopback_mtu_1500_in_a_private_namespace") {
        return;
    }
    let o = crate::bin()
        .args([
            "rtt",
            "--loopback-mtu",
            "1500",
            "--proto",
            "tcp,udp",
            "--sizes",
            "1400,3000",
            "-n",
            "20",
            "--warmup-time",
            "0s",
            "--json",
        ])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let notes = v["env"]["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|s| s.contains("lo MTU 1500"))), "{notes:?}");
    for s in v["env"]["client"]["sockets"].as_array().expect("sockets") {
        assert_eq!(s["path_mtu"], 1500, "{s}");
        if s["proto"] == "tcp" {
            assert_eq!(s["mss"], 1448, "MSS of MTU 1500 with timestamps: {s}");
        }
    }
    // UDP at 3000 B crossed as IP fragments and came back whole
    let udp3000 = v["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["proto"] == "udp" && p["size_bytes"] == 3000)
        .expect("point");
    assert_eq!(udp3000["summary"]["count"], 20);
}
