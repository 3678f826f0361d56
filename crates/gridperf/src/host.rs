//! This host: its settings read (and, in a lab's namespaces, set) from the
//! kernel rather than assumed, and the environment record of each end of a
//! run. `lab` and `tune` both read and set settings through here.

use crate::error::{Error, Result};
use gridperf_core::analysis::tune;
use gridperf_core::model::plan::Proto;
use gridperf_core::model::{Applied, EndInfo, SocketInfo};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;

/// The sysctls that shape what gridperf measures. Most of net.* is per
/// network namespace: they are read in the namespace of the calling thread.
pub const SYSCTLS: &[&str] = &[
    "net.core.rmem_default",
    "net.core.rmem_max",
    "net.core.wmem_default",
    "net.core.wmem_max",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.core.default_qdisc",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_autocorking",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_adv_win_scale",
    "net.ipv4.tcp_moderate_rcvbuf",
    "net.ipv4.tcp_slow_start_after_idle",
];

/// Seconds since the Unix epoch, by this host's clock, for the record.
pub fn unix_now() -> f64 {
    unix_now_ns() as f64 / 1e9
}

/// Nanoseconds since the Unix epoch, by this host's clock.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// What an agent's checks need to know of this host.
pub fn limits() -> gridperf_core::wire::HostLimits {
    gridperf_core::wire::HostLimits { congestion: congestion_available(), cpus: cpus() }
}

/// The congestion control algorithms this kernel offers (loaded modules);
/// others in /lib/modules may load on first use by a privileged user, but
/// gridperf names only what is there.
pub fn congestion_available() -> Vec<String> {
    sysctl("net.ipv4.tcp_available_congestion_control")
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Reads one sysctl by its dotted name; None when unreadable.
pub fn sysctl(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path).ok().map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The machine's TCP memory, when it is past the kernel's pressure mark
/// (see [`gridperf_core::analysis::stats::tcp_memory_pressure`]). Machine-wide:
/// every namespace's sockets count, orphans of ended programs included.
pub fn tcp_memory_pressure() -> Option<gridperf_core::analysis::stats::Warning> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    gridperf_core::analysis::stats::tcp_memory_pressure(
        &read("/proc/net/sockstat"),
        &read("/proc/sys/net/ipv4/tcp_mem"),
        &read("/proc/net/protocols"),
        gridperf_sys::page_size(),
    )
}

/// Whether a restarted connection would start from the slow one's
/// slow-start threshold: Linux keeps TCP metrics per destination
/// (`net.ipv4.tcp_no_metrics_save` 0) and, unless
/// `tcp_no_ssthresh_metrics_save` is 1 (the default since Linux 5.7), the
/// ssthresh among them, which a new connection to the same host starts
/// from: a restart would begin in congestion avoidance at the old rate.
/// The words to say so, read in this thread's namespace; None when not.
pub fn ssthresh_cached() -> Option<String> {
    let on = |k: &str| sysctl(k).map(|v| v.trim() == "0");
    let metrics_saved = on("net.ipv4.tcp_no_metrics_save").unwrap_or(false);
    // before 5.7 there is no switch: the ssthresh is saved with the rest
    let ssthresh_saved = on("net.ipv4.tcp_no_ssthresh_metrics_save").unwrap_or(true);
    (metrics_saved && ssthresh_saved).then(|| {
        "this host caches the slow connection's ssthresh for the destination (net.ipv4.tcp_no_metrics_save=0, \
         tcp_no_ssthresh_metrics_save=0 or absent): its replacement starts from it, no faster at first; \
         sysctl -w net.ipv4.tcp_no_ssthresh_metrics_save=1 lets a restart begin afresh"
            .to_string()
    })
}

/// The ceiling of an autotuned buffer: the third field of net.ipv4.tcp_rmem
/// or tcp_wmem ("min default max"), bytes; None when unreadable.
pub fn tcp_mem_max(name: &str) -> Option<u64> {
    sysctl(name)?.split_whitespace().nth(2)?.parse().ok()
}

/// The CPUs this thread may run on (what `--cpu` can name).
pub fn cpus() -> Vec<usize> {
    gridperf_sys::thread_affinity().unwrap_or_default()
}

/// The machine's load over a run: /proc/stat and gridperf's own CPU time
/// (this process and its children: the lab's emulator and agents) when
/// the watch began.
pub struct LoadWatch {
    machine: gridperf_sys::MachineTimes,
    ours_ns: u64,
    at: std::time::Instant,
}

impl LoadWatch {
    pub fn start() -> LoadWatch {
        LoadWatch {
            machine: gridperf_sys::machine_times(),
            ours_ns: gridperf_sys::tree_cpu_time_ns(std::process::id()),
            at: std::time::Instant::now(),
        }
    }

    /// The load since the start, and each allowed CPU's busy share over
    /// it, idlest first (None where /proc cannot tell).
    pub fn load(&self) -> Option<(gridperf_core::model::MachineLoad, Vec<(usize, f64)>)> {
        let now = gridperf_sys::machine_times();
        let ours = gridperf_sys::tree_cpu_time_ns(std::process::id()).saturating_sub(self.ours_ns);
        let m = &self.machine;
        let load = gridperf_core::model::MachineLoad::between(
            (&m.busy_ns, &m.idle_ns, &m.steal_ns),
            (&now.busy_ns, &now.idle_ns, &now.steal_ns),
            ours,
            self.at.elapsed().as_secs_f64(),
            now.procs_running,
        )?;
        let d = |a: &[u64], b: &[u64], c: usize| a.get(c).zip(b.get(c)).map_or(0, |(x, y)| x.saturating_sub(*y)) as f64;
        let allowed = cpus();
        let mut per: Vec<(usize, f64)> = (0..now.busy_ns.len())
            .filter(|c| allowed.contains(c))
            .map(|c| {
                let busy = d(&now.busy_ns, &m.busy_ns, c);
                let total = busy + d(&now.idle_ns, &m.idle_ns, c) + d(&now.steal_ns, &m.steal_ns, c);
                (c, if total > 0.0 { busy / total } else { 0.0 })
            })
            .collect();
        per.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        Some((load, per))
    }
}

/// How the machine's CPUs are used over `window` from now: each allowed
/// CPU with its busy share, idlest first; and the share of all of them
/// that other tasks took (busy less gridperf's own processes).
pub fn look_at_cpus(window: std::time::Duration) -> (Vec<(usize, f64)>, f64) {
    let watch = LoadWatch::start();
    std::thread::sleep(window);
    match watch.load() {
        Some((load, per)) => (per, load.others),
        None => (Vec::new(), 0.0),
    }
}

pub fn software() -> String {
    format!("gridperf {}", env!("CARGO_PKG_VERSION"))
}

/// This end's record, without sockets (add them with [`socket_info`]).
pub fn end_info(pinned_cpus: Option<Vec<usize>>, busy_poll: bool) -> EndInfo {
    let (host, kernel) = match gridperf_sys::uname() {
        Ok([sys, node, release, _version, machine]) => (node, format!("{sys} {release} {machine}")),
        Err(_) => ("unknown".into(), "unknown".into()),
    };
    let sysctls: BTreeMap<String, String> =
        SYSCTLS.iter().filter_map(|&n| sysctl(n).map(|v| (n.to_string(), v))).collect();
    EndInfo {
        host,
        kernel,
        software: software(),
        pinned_cpus,
        allowed_cpus: gridperf_sys::thread_affinity().unwrap_or_default(),
        busy_poll,
        sockets: Vec::new(),
        sysctls,
    }
}

/// What a data socket was actually given.
pub fn socket_info(
    sock: &impl AsRawFd,
    proto: Proto,
    ipv6: bool,
    sndbuf_requested: Option<u64>,
    rcvbuf_requested: Option<u64>,
) -> SocketInfo {
    let stream = proto.is_stream();
    SocketInfo {
        proto: Some(proto),
        sndbuf_requested,
        sndbuf_granted: gridperf_sys::sndbuf(sock).ok().map(|v| v as u64),
        rcvbuf_requested,
        rcvbuf_granted: gridperf_sys::rcvbuf(sock).ok().map(|v| v as u64),
        nodelay: if stream { gridperf_sys::tcp_nodelay(sock).ok() } else { None },
        mss: if stream { gridperf_sys::tcp_maxseg(sock).ok() } else { None },
        path_mtu: gridperf_sys::path_mtu(sock, ipv6).ok(),
        congestion: if stream { gridperf_sys::tcp_congestion(sock).ok() } else { None },
        busy_poll_us: None,
    }
}

/// Moves this process into a new private network namespace whose lo has
/// `mtu` (`--loopback-mtu`): both ends of a local run then talk over it.
pub fn enter_private_loopback(mtu: u32) -> Result<()> {
    may_make_namespaces("--loopback-mtu")?;
    gridperf_sys::unshare_netns()
        .map_err(|e| Error::usage(format!("--loopback-mtu: cannot make a private network namespace: {e}")))?;
    gridperf_sys::set_link_mtu("lo", mtu).map_err(|e| Error::internal(format!("setting the lo MTU to {mtu}: {e}")))?;
    gridperf_sys::set_link_up("lo").map_err(|e| Error::internal(format!("bringing lo up: {e}")))?;
    Ok(())
}

// ---------------------------------------------------------------- user namespaces

/// What became of this process's move into a user namespace at start
/// (None: it made no move).
static USERNS: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();

/// Moves a user who is not root into a user namespace of their own, in
/// which they are root over the namespaces they make and nothing else (the
/// rootless lab). Call first thing in `main`: only a single-threaded
/// process can. Root, and root of a user namespace already (a process that
/// `gridperf lab exec` started, or a container's root), stay where they
/// are. A failure is kept for [`may_make_namespaces`] to explain.
pub fn make_own_userns() {
    if gridperf_sys::euid() == 0 {
        return;
    }
    let _ = USERNS.set(gridperf_sys::unshare_user_as_root().map_err(|e| e.to_string()));
}

/// Moves a user who is not root into the user namespace of one of their
/// own processes (a rootless lab's emulator), to enter its network
/// namespaces; single-threaded only, as [`make_own_userns`].
pub fn enter_userns_of(pid: u32) {
    if gridperf_sys::euid() == 0 {
        return;
    }
    let _ = USERNS.set(
        gridperf_sys::enter_userns_of(pid).map_err(|e| format!("entering the user namespace of process {pid}: {e}")),
    );
}

/// Whether this process holds the privileges its own network namespaces
/// need (root, or root in a user namespace of its own); if not, why not
/// and the ways out.
pub fn may_make_namespaces(what: &str) -> Result<()> {
    if is_root() || (!gridperf_sys::in_initial_userns() && gridperf_sys::euid() == 0) {
        return Ok(());
    }
    let attempt = match USERNS.get() {
        Some(Err(e)) => Some(e.as_str()),
        _ => None,
    };
    Err(Error::usage(namespaces_refused(what, gridperf_sys::userns_blocker(), attempt)))
}

/// Why a user's process cannot make namespaces, and the ways out: from the
/// sysctl that blocks user namespaces, if one does, and what the attempt
/// to make one said, if it was made.
fn namespaces_refused(what: &str, blocker: Option<(&str, String)>, attempt: Option<&str>) -> String {
    let fix = |k: &str, v: &str| format!("or allow it: sudo sysctl -w {k}={v}");
    let (why, way) = match blocker {
        Some((k @ "kernel.unprivileged_userns_clone", v)) => {
            (format!("this machine does not let users make user namespaces ({k} = {v})"), fix(k, "1"))
        }
        Some((k @ "user.max_user_namespaces", v)) => {
            (format!("this machine does not let users make user namespaces ({k} = {v})"), fix(k, "15000"))
        }
        Some((k, v)) => (
            format!("an AppArmor policy keeps users from using user namespaces ({k} = {v})"),
            format!("or lift it: sudo sysctl -w {k}=0 (or give gridperf an AppArmor profile with `userns,`)"),
        ),
        None => match attempt {
            Some(e) => (
                format!("making a user namespace failed ({e})"),
                "or find what forbids it (a container's seccomp policy?)".into(),
            ),
            None => ("this process is not root and not in a user namespace of its own".into(), String::new()),
        },
    };
    format!(
        "{what} needs network namespaces, which a user who is not root makes inside a user namespace of their own, but {why}: run it as root (sudo){}",
        if way.is_empty() { String::new() } else { format!(", {way}") }
    )
}

/// The user who ran `sudo gridperf ...`: (name, uid, gid, home), when this
/// process runs as root under sudo. Files gridperf makes for that user (the
/// store, a report) are theirs, in their home, not root's.
pub fn sudo_user() -> Option<(String, u32, u32, std::path::PathBuf)> {
    if !is_root() {
        return None;
    }
    let name = std::env::var("SUDO_USER").ok().filter(|n| !n.is_empty() && n != "root")?;
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.split(':').next() == Some(name.as_str()))?;
    let f: Vec<&str> = line.split(':').collect();
    let (uid, gid) = (f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?);
    Some((name, uid, gid, std::path::PathBuf::from(f.get(5)?)))
}

/// Gives a file gridperf made back to the user who ran it with sudo (a
/// no-op otherwise, and for a file that is not there).
pub fn give_back(path: &std::path::Path) {
    if let Some((_, uid, gid, _)) = sudo_user() {
        if path.exists() {
            let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
        }
    }
}

/// A secret file's text (a key), refused when others may read it, as ssh
/// refuses a private key.
pub fn read_secret(path: &std::path::Path) -> std::result::Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err("others may read it, and it holds secrets: chmod 600 it".into());
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// 32 bytes from the kernel's random source (a nonce, a new key).
pub fn random_32() -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// Whether this process runs as the machine's root: effective UID 0 in the
/// first user namespace. Root of a user namespace of one's own (the
/// rootless lab) is not: it has no privilege beyond the namespaces it made.
pub fn is_root() -> bool {
    gridperf_sys::in_initial_userns() && gridperf_sys::euid() == 0
}

// ---------------------------------------------------------------- settings in a namespace

/// The kernel release (uname -r).
pub fn kernel_release() -> Option<String> {
    gridperf_sys::uname().ok().map(|[_, _, release, _, _]| release)
}

/// The release out of an environment record's "Linux 6.18.0 x86_64".
pub fn release_of(kernel: &str) -> Option<String> {
    kernel.split_whitespace().nth(1).map(str::to_string)
}

/// Reads the settings tune needs in the calling thread's namespace.
pub fn read_here() -> BTreeMap<String, String> {
    tune::SETTINGS.iter().filter_map(|(n, _)| sysctl(n).map(|v| (n.to_string(), v))).collect()
}

/// Reads the settings of a lab host: the per-namespace ones inside its
/// namespace, the global ones here (a namespace does not show them all).
pub fn read_in(netns: &str) -> Result<BTreeMap<String, String>> {
    let mut all = read_here();
    let inside = gridperf_sys::in_netns(netns, || Ok(read_here())).map_err(|e| {
        Error::usage(format!("cannot enter the namespace {netns} (reading a lab host needs root): {e}"))
    })?;
    for (name, per_ns) in tune::SETTINGS {
        if *per_ns {
            match inside.get(*name) {
                Some(v) => all.insert(name.to_string(), v.clone()),
                None => all.remove(*name),
            };
        }
    }
    Ok(all)
}

/// Splits "name = value" (a sysctl.d line) or "name=value".
pub fn split_line(line: &str) -> Result<(String, String)> {
    let (k, v) = line.split_once('=').ok_or_else(|| {
        Error::usage(format!("{line:?}: give NAME=VALUE, e.g. net.ipv4.tcp_rmem=\"4096 87380 174760\""))
    })?;
    let (k, v) = (k.trim().replace('/', "."), v.trim().trim_matches('"').to_string());
    if k.is_empty() || v.is_empty() || !k.starts_with("net.") || k.contains("..") {
        return Err(Error::usage(format!(
            "{line:?}: give a net.* sysctl and a value, e.g. net.ipv4.tcp_rmem=\"4096 87380 174760\""
        )));
    }
    Ok((k, v))
}

/// Sets one sysctl inside a namespace. A global one (absent or read-only
/// there) is refused with a message that says so; nothing else is touched.
pub fn set_in(netns: &str, name: &str, value: &str) -> Result<()> {
    if tune::per_namespace(name) == Some(false) {
        return Err(Error::usage(format!(
            "{name} is global on Linux, not per network namespace: it cannot be set for one lab host"
        )));
    }
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    let v = value.to_string();
    let p = path.clone();
    gridperf_sys::in_netns(netns, move || std::fs::write(&p, format!("{v}\n"))).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::usage(format!("{name}: no such setting in a network namespace ({path})"))
        }
        std::io::ErrorKind::PermissionDenied => Error::usage(format!(
            "{name}: not writable in a network namespace (global on this kernel, or it needs root): {e}"
        )),
        _ => Error::usage(format!("{name} = {value:?} in {netns}: {e}")),
    })?;
    // read it back: the kernel may clamp or refuse silently
    let now = gridperf_sys::in_netns(netns, {
        let name = name.to_string();
        move || Ok(sysctl(&name))
    })
    .ok()
    .flatten();
    let want = value.split_whitespace().collect::<Vec<_>>().join(" ");
    match now {
        Some(n) if n == want => Ok(()),
        n => Err(Error::usage(format!("{name}: set to {want:?} in {netns}, but it reads {:?}", n.unwrap_or_default()))),
    }
}

/// Sets the per-namespace lines in every host of a lab (name, namespace);
/// the global ones are left alone and said to be.
pub fn apply(hosts: &[(String, String)], lines: &[String]) -> Result<Vec<Applied>> {
    may_make_namespaces("tune --apply").map_err(|e| Error::usage(format!("{e}; nothing was changed")))?;
    let mut out = Vec::new();
    for line in lines {
        let (name, value) = split_line(line)?;
        if tune::per_namespace(&name) == Some(false) {
            out.push(Applied {
                host: "all".into(),
                setting: name,
                value,
                outcome: if is_root() {
                    "left alone: global, not per namespace (set it on the host itself)".into()
                } else {
                    "left alone: global, not per namespace, and read-only without root (set it on the host itself, as root)"
                        .into()
                },
            });
            continue;
        }
        for (host, netns) in hosts {
            let outcome = match set_in(netns, &name, &value) {
                Ok(()) => "set".to_string(),
                Err(e) => format!("failed: {e}"),
            };
            out.push(Applied { host: host.clone(), setting: name.clone(), value: value.clone(), outcome });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_user_namespace_names_its_setting_and_both_ways_out() {
        let cases = [
            ("kernel.unprivileged_userns_clone", "0", "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
            ("user.max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"),
            (
                "kernel.apparmor_restrict_unprivileged_userns",
                "1",
                "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
            ),
        ];
        for (k, v, fix) in cases {
            let m = namespaces_refused("lab up", Some((k, v.to_string())), Some("Operation not permitted"));
            assert!(m.starts_with("lab up needs network namespaces"), "{m}");
            assert!(m.contains(&format!("({k} = {v})")), "{m}");
            assert!(m.contains("run it as root (sudo)") && m.contains(fix), "{m}");
        }
        let m = namespaces_refused("lab up", None, Some("Operation not permitted (os error 1)"));
        assert!(m.contains("making a user namespace failed (Operation not permitted (os error 1))"), "{m}");
        assert!(m.contains("run it as root (sudo)"), "{m}");
    }

    #[test]
    fn sysctl_lines_split() {
        assert_eq!(
            split_line("net.ipv4.tcp_rmem = 4096 87380 8388608").expect("line"),
            ("net.ipv4.tcp_rmem".into(), "4096 87380 8388608".into())
        );
        assert_eq!(
            split_line("net/ipv4/tcp_wmem=\"8192 4369000 8738000\"").expect("line"),
            ("net.ipv4.tcp_wmem".into(), "8192 4369000 8738000".into())
        );
        assert!(split_line("tcp_rmem").is_err());
        assert!(split_line("kernel.panic=1").is_err());
        assert!(split_line("net.ipv4.tcp_rmem=").is_err());
        assert!(split_line("net..x=1").is_err());
    }

    #[test]
    fn the_release_of_a_record() {
        assert_eq!(release_of("Linux 6.18.0 x86_64").as_deref(), Some("6.18.0"));
        assert_eq!(release_of("unknown"), None);
    }
}
