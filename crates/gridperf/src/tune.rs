//! `gridperf tune`'s I/O: reading the settings it needs (here, in a lab
//! host's network namespace, or from an agent's record), and setting them in
//! a lab's namespaces. The arithmetic is in `gridperf_core::tune`.

use crate::error::{Error, Result};
use gridperf_core::tune::{self, HostSettings};
use std::collections::BTreeMap;

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
    tune::SETTINGS.iter().filter_map(|(n, _)| crate::env::sysctl(n).map(|v| (n.to_string(), v))).collect()
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

/// The settings of this host (or of a lab host) as tune models them.
pub fn host_settings(sysctls: &BTreeMap<String, String>) -> (HostSettings, Vec<String>) {
    tune::host_from(sysctls, kernel_release().as_deref(), None)
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
        move || Ok(crate::env::sysctl(&name))
    })
    .ok()
    .flatten();
    let want = value.split_whitespace().collect::<Vec<_>>().join(" ");
    match now {
        Some(n) if n == want => Ok(()),
        n => Err(Error::usage(format!("{name}: set to {want:?} in {netns}, but it reads {:?}", n.unwrap_or_default()))),
    }
}

/// What `--apply` did with one line on one host.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub host: String,
    pub setting: String,
    pub value: String,
    /// "set", or why not.
    pub outcome: String,
}

/// Sets the per-namespace lines in every host of a lab; the global ones
/// are left alone and said to be.
pub fn apply(hosts: &[crate::lab::Host], lines: &[String]) -> Result<Vec<Applied>> {
    if !crate::env::is_root() {
        return Err(Error::usage(
            "tune --apply needs root (CAP_NET_ADMIN over the lab's namespaces): run it with sudo; nothing was changed",
        ));
    }
    let mut out = Vec::new();
    for line in lines {
        let (name, value) = split_line(line)?;
        if tune::per_namespace(&name) == Some(false) {
            out.push(Applied {
                host: "all".into(),
                setting: name,
                value,
                outcome: "left alone: global, not per namespace (set it on the host itself)".into(),
            });
            continue;
        }
        for h in hosts {
            let outcome = match set_in(&h.netns, &name, &value) {
                Ok(()) => "set".to_string(),
                Err(e) => format!("failed: {e}"),
            };
            out.push(Applied { host: h.name.clone(), setting: name.clone(), value: value.clone(), outcome });
        }
    }
    Ok(out)
}

/// One end's settings and the advice for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EndAdvice {
    /// "this host", "agent 192.0.2.7:5201", or a lab host's name.
    pub name: String,
    pub settings: HostSettings,
    pub advice: tune::Advice,
    /// Settings that could not be read or parsed: unknown, not guessed.
    pub unknown: Vec<String>,
}

/// One end's settings as read, before the advice.
#[derive(Debug, Clone)]
pub struct Record {
    pub name: String,
    pub sysctls: BTreeMap<String, String>,
    /// The kernel release.
    pub kernel: Option<String>,
    pub mtu: Option<u32>,
}

impl EndAdvice {
    pub fn new(r: &Record, path: tune::TunePath, app: Option<u64>) -> EndAdvice {
        let (settings, unknown) = tune::host_from(&r.sysctls, r.kernel.as_deref(), r.mtu);
        let advice = tune::advise(path, &settings, app);
        EndAdvice { name: r.name.clone(), settings, advice, unknown }
    }
}

/// What caps a stream from one end to the other.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DirectionCap {
    pub from: String,
    pub to: String,
    /// "sender: SETTING" or "receiver: SETTING"; None: nothing caps it below the path's rate.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
}

/// Both directions between every pair of ends (a single end: its own binding).
pub fn directions(ends: &[EndAdvice], path: tune::TunePath, app: Option<u64>) -> Vec<DirectionCap> {
    if let [one] = ends {
        return vec![DirectionCap {
            from: one.name.clone(),
            to: one.name.clone(),
            binding: one.advice.binding.clone(),
            cap_bps: one.advice.cap_bps,
        }];
    }
    let mut out = Vec::new();
    for s in ends {
        for r in ends {
            if s.name != r.name {
                let p = tune::advise_pair(path, &s.settings, &r.settings, app);
                out.push(DirectionCap {
                    from: s.name.clone(),
                    to: r.name.clone(),
                    binding: p.binding,
                    cap_bps: p.cap_bps,
                });
            }
        }
    }
    out
}

/// What was measured of a real path.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    /// TCP round trips of 1 byte (Nagle off), after a warm-up.
    pub round_trips: u64,
    pub rtt_min_ns: f64,
    pub rtt_median_ns: f64,
    /// The bottleneck rate found by a UDP probe (--measure-rate), IP bits per second.
    pub rate_bps: Option<f64>,
    /// How the rate was found, or why it is only a lower bound.
    pub rate_note: Option<String>,
}

/// What `gridperf tune` prints (schema gridperf.tune/1).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneView {
    pub schema: &'static str,
    pub path: tune::TunePath,
    pub bdp_bytes: u64,
    /// Where the rate and RTT came from.
    pub path_from: String,
    pub measured: Option<Measured>,
    pub ends: Vec<EndAdvice>,
    pub directions: Vec<DirectionCap>,
    /// With --apply: what was set where, and the directions as read back after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<Applied>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<DirectionCap>>,
}

/// Runs TCP ping-pong probes of 1 byte to an agent: the path's RTT, the
/// agent's record (its settings, read where it runs), and the path MTU the
/// probe's socket saw.
pub fn probe(
    addr: std::net::SocketAddr,
    deadlines: crate::runner::Deadlines,
) -> Result<(Measured, gridperf_core::model::EndInfo, Option<u32>)> {
    use crate::engines::{rtt, EchoOptions, Target};
    let opts = rtt::RttOptions {
        echo: EchoOptions {
            warmup_time: std::time::Duration::from_millis(200),
            ..EchoOptions::plain(vec![gridperf_core::plan::Proto::Tcp], vec![1], deadlines)
        },
        iterations: 50,
        duration: None,
        warmup: 5,
        keep_samples: false,
    };
    let r = rtt::run(&Target::Remote(addr), &opts, &mut |_| {})?;
    let s = r
        .points
        .first()
        .and_then(|p| p.summary.clone())
        .ok_or_else(|| Error::network(format!("no round trip to {addr} came back")))?;
    let mtu = r.env.client.sockets.iter().find_map(|x| x.path_mtu);
    let agent = r.env.server.ok_or_else(|| Error::network(format!("the agent at {addr} sent no record of itself")))?;
    Ok((
        Measured {
            round_trips: s.count,
            rtt_min_ns: s.min_ns,
            rtt_median_ns: s.median_ns,
            rate_bps: None,
            rate_note: None,
        },
        agent,
        mtu,
    ))
}

/// Finds the bottleneck rate with a UDP stream of `offer` bits per second
/// to the agent for `secs`: what arrives, in IP bits per second. When
/// little was lost, the path carried all that was offered and the figure is
/// only a lower bound, and says so.
pub fn probe_rate(
    addr: std::net::SocketAddr,
    deadlines: crate::runner::Deadlines,
    offer: u64,
    secs: u64,
) -> Result<(f64, String)> {
    use crate::engines::stream::{self, StreamOptions};
    use gridperf_core::wire::{Direction, StreamSpec};
    let size = 1472u64;
    let spec = StreamSpec {
        proto: "udp".into(),
        streams: 1,
        direction: Direction::Up,
        duration_ms: secs * 1000,
        bytes: None,
        write_size: size,
        window: None,
        congestion: None,
        pacing_bps: None,
        gap_us: None,
        zerocopy: None,
        udp_rate_bps: Some(offer),
        sample_ms: 100,
        interval_ms: 1000,
        linger_ms: 500,
        omit_ms: 0,
    };
    stream::validate(&spec).map_err(Error::usage)?;
    let opts = StreamOptions {
        spec,
        omit: std::time::Duration::ZERO,
        repeat: 1,
        deadlines,
        path_rate_bps: None,
        notes: Vec::new(),
    };
    let r = stream::run(&crate::engines::Target::Remote(addr), &opts, &mut |_, _, _| {})?;
    let st = r
        .runs
        .first()
        .and_then(|run| run.streams.first())
        .ok_or_else(|| Error::network("the rate probe returned no stream"))?;
    // payload to IP: each datagram carries 28 bytes of IPv4 and UDP headers
    let wire = st.throughput_bps * (size + 28) as f64 / size as f64;
    let sent = st.sender.bytes as f64;
    let got = st.receiver.bytes as f64;
    let lost = if sent > 0.0 { 1.0 - got / sent } else { 0.0 };
    let note = if lost < 0.02 {
        format!(
            "at least this: the path carried {:.1}% of the {} offered (UDP, {secs} s); offer more with --probe-rate",
            (1.0 - lost) * 100.0,
            gridperf_core::units::fmt_bps(offer as f64)
        )
    } else {
        format!("what arrived of a UDP stream that overran the path ({:.1}% lost, {secs} s)", lost * 100.0)
    };
    Ok((wire, note))
}

#[cfg(test)]
mod tests {
    use super::*;

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
