//! Two users' rootless labs: the second can neither see, enter nor take
//! down the first one's. Runs as root, which becomes the two users with
//! setpriv (two numeric UIDs with no other rights); in CI it must run.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_gridperf");
const FIRST: u32 = 65534;
const SECOND: u32 = 65533;

/// Runs `cmd` as user `uid` with a bare environment (plus `env`).
fn as_user(uid: u32, env: &[(&str, &str)], cmd: &[&str]) -> Output {
    let id = format!("--reuid={uid}");
    let gid = format!("--regid={uid}");
    let mut c = Command::new("setpriv");
    crate::hermetic(&mut c);
    c.args([
        id.as_str(),
        gid.as_str(),
        "--clear-groups",
        "env",
        "-i",
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/tmp",
    ]);
    for (k, v) in env {
        c.arg(format!("{k}={v}"));
    }
    c.args(cmd).current_dir("/tmp").output().expect("setpriv")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Takes the first user's lab down when the test ends, passed or failed.
struct FirstUsersLab(String);

impl Drop for FirstUsersLab {
    fn drop(&mut self) {
        let _ = as_user(FIRST, &[], &[BIN, "lab", "down", "--name", &self.0]);
    }
}

#[test]
#[ignore = "needs root, to become two users: `sudo cargo test -p gridperf --test it -- --ignored isolation::` (.ci/run runs it)"]
fn a_second_user_cannot_see_enter_or_take_down_the_first_users_lab() {
    assert!(gridperf::host::is_root(), "needs root, to become two users");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/net/tun").map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o006 != 0o006 {
            // .ci/run opens it to users as udev does; elsewhere it is the machine's choice
            assert!(std::env::var("CI").ok().as_deref() != Some("true"), "CI must run this: /dev/net/tun is {mode:o}");
            eprintln!(
                "\n*** SKIPPED a_second_user_cannot_see...: users cannot open /dev/net/tun here (mode {:o}; \
                 udev makes it 0666): sudo chmod 0666 /dev/net/tun to run it ***\n",
                mode & 0o777
            );
            return;
        }
    }
    let _heavy = crate::heavy();
    let name = format!("iso{}", std::process::id() % 100_000);
    let o = as_user(FIRST, &[], &[BIN, "lab", "up", "--name", &name, "--profile", "man"]);
    assert!(o.status.success(), "the first user's lab up: {}", text(&o));
    let _down = FirstUsersLab(name.clone());
    let o = as_user(FIRST, &[], &[BIN, "lab", "status", "--name", &name, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status json");
    let emulator = st["lab"]["pid"].as_u64().expect("pid").to_string();
    let netns = st["lab"]["hosts"][0]["netns"].as_str().expect("netns").to_string();
    assert!(netns.starts_with("/proc/"), "a rootless lab's namespace is held, not named: {netns}");

    // not seen: not by name, not with XDG_RUNTIME_DIR pointed elsewhere, not its files
    let o = as_user(SECOND, &[], &[BIN, "lab", "status", "--name", &name]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no lab named"), "{}", text(&o));
    let o = as_user(SECOND, &[("XDG_RUNTIME_DIR", "/tmp")], &[BIN, "lab", "status", "--name", &name]);
    assert_eq!(o.status.code(), Some(2), "a runtime directory that is not the user's own is not used: {}", text(&o));
    let first_dir = format!("/tmp/gridperf-{FIRST}");
    let o = as_user(SECOND, &[], &["ls", &first_dir]);
    assert!(!o.status.success(), "the first user's state is closed to others: {}", text(&o));

    // not entered: not by lab exec, not by its namespaces directly
    let o = as_user(SECOND, &[], &[BIN, "lab", "exec", "--name", &name, "a", "--", "true"]);
    assert!(!o.status.success(), "{}", text(&o));
    let o = as_user(SECOND, &[], &["nsenter", "--user", "--net", "-t", &emulator, "--preserve-credentials", "true"]);
    assert!(!o.status.success(), "nsenter into another user's lab: {}", text(&o));
    let o = as_user(SECOND, &[], &["cat", &netns]);
    assert!(!o.status.success(), "another user's held namespace: {}", text(&o));

    // not taken down: lab down finds nothing of its own, the emulator takes no signal from it
    let o = as_user(SECOND, &[], &[BIN, "lab", "down", "--name", &name]);
    assert!(o.status.success() && text(&o).contains("was not up"), "{}", text(&o));
    let o = as_user(SECOND, &[], &["kill", &emulator]);
    assert!(!o.status.success(), "{}", text(&o));
    let o = as_user(FIRST, &[], &[BIN, "lab", "status", "--name", &name]);
    assert!(o.status.success(), "the first user's lab is still up: {}", text(&o));

    // and the first user still runs across it
    let o =
        as_user(FIRST, &[], &[BIN, "lab", "exec", "--name", &name, "a", "--", "cat", "/proc/sys/net/ipv4/tcp_rmem"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A root lab's named namespaces go with `lab down` even after `ip netns
/// add`: iproute2 binds /run/netns onto itself when it is not yet a mount
/// point, and the namespaces mounted there before sat beneath that mount,
/// neither unmounted nor removed (umount2 EINVAL, unlink EBUSY), alive
/// after their lab. gridperf now makes /run/netns a shared mount point of
/// its own first, as iproute2 does.
#[test]
#[ignore = "needs root, for named namespaces and iproute2's `ip netns add`: `sudo cargo test -p gridperf --test it -- --ignored isolation::` (.ci/run runs it)"]
fn a_root_labs_namespaces_go_even_after_ip_netns_add() {
    assert!(gridperf::host::is_root(), "needs root");
    let _serial = crate::heavy();
    let name = format!("ipn{}", std::process::id() % 100_000);
    let other = format!("gptest-ipn{}", std::process::id() % 100_000);
    let up = crate::bin().args(["lab", "up", "--name", &name]).output().expect("lab up");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let added = Command::new("ip").args(["netns", "add", &other]).status().expect("ip (iproute2)");
    let down = crate::bin().args(["lab", "down", "--name", &name]).output().expect("lab down");
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let _ = Command::new("ip").args(["netns", "del", &other]).status();
    assert!(added.success(), "ip netns add {other}");
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    let prefix = format!("gp-{name}-");
    assert!(!left.iter().any(|n| n.starts_with(&prefix)), "left in /run/netns after lab down: {left:?}");
}
