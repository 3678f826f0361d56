//! The environment record: what each end ran on and with what, read from
//! the kernel rather than assumed.

use gridperf_core::model::{EndInfo, SocketInfo};
use gridperf_core::plan::Proto;
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

/// The CPUs this thread may run on (what `--cpu` can name).
pub fn cpus() -> Vec<usize> {
    gridperf_sys::thread_affinity().unwrap_or_default()
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

/// Whether this process runs as root (effective UID 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}
