//! `gridperf tune`: what caps a single TCP stream on a path of a given rate
//! and RTT, from the host's settings, and what to set instead. No I/O: the
//! caller reads the settings (per network namespace) and prints the advice.
//!
//! The arithmetic, as Linux does it:
//! - the bandwidth-delay product, BDP = rate x RTT (DataTAG's W_opt);
//! - a receive buffer of B bytes advertises a window of B - B/2^s for
//!   tcp_adv_win_scale s > 0 (half of it at the default s = 1), or B/2^-s
//!   for s <= 0: the rest is the kernel's bookkeeping. Linux 6.6 and later
//!   ignore tcp_adv_win_scale: each connection learns the share from its
//!   segments' payload over their memory (`scaling_ratio`), starting at
//!   half; tune assumes that half there, and says so;
//! - a buffer set by the application (SO_RCVBUF, iperf's -w) is doubled by
//!   the kernel and capped at twice net.core.rmem_max; an autotuned one
//!   grows up to the third field of tcp_rmem (and only while
//!   tcp_moderate_rcvbuf is on);
//! - without window scaling the window is at most 65535 bytes;
//! - a stream can carry at most window / RTT.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The path a stream must fill.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TunePath {
    pub rate_bps: u64,
    pub rtt_ns: u64,
}

impl TunePath {
    /// The bandwidth-delay product, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (u128::from(self.rate_bps) * u128::from(self.rtt_ns) / 8 / 1_000_000_000) as u64
    }

    /// The rate a window of `bytes` allows on this path, bits per second.
    pub fn rate_of_window(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 / (self.rtt_ns as f64 / 1e9)
    }
}

/// A host's settings as read; None: unreadable (reported as unknown, never guessed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSettings {
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    pub adv_win_scale: Option<i64>,
    pub window_scaling: Option<bool>,
    pub timestamps: Option<bool>,
    pub sack: Option<bool>,
    pub moderate_rcvbuf: Option<bool>,
    pub no_metrics_save: Option<bool>,
    pub congestion: Option<String>,
    pub available_congestion: Vec<String>,
    pub default_qdisc: Option<String>,
    /// The MTU of the route, if known.
    pub mtu: Option<u32>,
    /// The kernel release (uname -r), if known: it decides how the window
    /// share of a buffer is found.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Measured on the path (`tune --measure-share`): the share of this
    /// host's receive buffer that it advertised as window, and the share of
    /// its send buffer that was data in flight.
    #[serde(default)]
    pub measured_share: Option<f64>,
    #[serde(default)]
    pub measured_send_share: Option<f64>,
    /// A probe with this host's send buffer (tcp_wmem's maximum) reached the
    /// path's rate without the buffer holding it back.
    #[serde(default)]
    pub send_buffer_suffices: bool,
    /// A probe with this host's send buffer ran and could not tell its
    /// share (the receiver's window or cwnd held it instead): the send
    /// buffer's cap is then unknown, not guessed. A guess (the receive
    /// side's share) once said 33.9 Mbit/s at most where a stream carried
    /// 45: a cap below what a stream carries is a wrong answer.
    #[serde(default)]
    pub send_share_untold: bool,
}

/// Whether a kernel release ("6.18.0-1-amd64") is at least `major.minor`.
pub fn kernel_at_least(release: &str, (major, minor): (u32, u32)) -> Option<bool> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let ma: u32 = it.next()?.parse().ok()?;
    let mi: u32 = it.next()?.parse().ok()?;
    Some((ma, mi) >= (major, minor))
}

/// The share of a socket buffer that becomes window on this host, and how it
/// was found.
pub fn share_of(h: &HostSettings) -> (f64, String) {
    if let Some(m) = h.measured_share {
        return (clamp_share(m), format!("the window is {:.0}% of it (measured on this path)", m * 100.0));
    }
    let learned = h.kernel.as_deref().and_then(|k| kernel_at_least(k, (6, 6)));
    match (learned, h.adv_win_scale) {
        (Some(true), _) => (
            0.5,
            "the window is about half of it: Linux 6.6+ ignores tcp_adv_win_scale and learns the share per connection (payload over memory), starting at 50%".into(),
        ),
        (_, Some(s)) => (window_share(s), format!("the window is {:.0}% of it (tcp_adv_win_scale {s})", window_share(s) * 100.0)),
        (_, None) => (0.5, "the window is taken as half of it (tcp_adv_win_scale unknown; 1 is the default)".into()),
    }
}

/// A measured share as the arithmetic uses it: at most the whole buffer
/// (a write may overshoot a send buffer by one skb) and at least 5%.
fn clamp_share(m: f64) -> f64 {
    if m.is_finite() {
        m.clamp(0.05, 1.0)
    } else {
        0.5
    }
}

/// The share of a send buffer that is data in flight when the buffer is
/// full: measured, or else taken as the receive buffer's window share.
pub fn send_share_of(h: &HostSettings) -> (f64, String) {
    match h.measured_send_share {
        Some(m) => (clamp_share(m), format!("{:.0}% of it was data in flight (measured on this path)", m * 100.0)),
        None => {
            let (s, _) = share_of(h);
            (s, format!("taken as {:.0}% of it in flight, as the receive side's window share", s * 100.0))
        }
    }
}

/// Builds the settings from sysctls as read (dotted name -> text), e.g. from
/// /proc/sys in one namespace or from an agent's record. Returns the
/// settings and what could not be read or parsed (reported as unknown).
pub fn host_from(
    sysctls: &std::collections::BTreeMap<String, String>,
    kernel: Option<&str>,
    mtu: Option<u32>,
) -> (HostSettings, Vec<String>) {
    let mut h = HostSettings { kernel: kernel.map(str::to_string), mtu, ..HostSettings::default() };
    let mut unknown = Vec::new();
    for (name, _) in SETTINGS {
        match sysctls.get(*name) {
            Some(v) => {
                if let Err(e) = parse_setting(&mut h, name, v) {
                    unknown.push(e);
                }
            }
            None => unknown.push(format!("{name}: unreadable")),
        }
    }
    (h, unknown)
}

/// Parses a sysctl's text into the settings (the name as in /proc/sys with dots).
pub fn parse_setting(h: &mut HostSettings, name: &str, value: &str) -> Result<(), String> {
    let v = value.trim();
    let num = |v: &str| v.parse::<u64>().map_err(|_| format!("{name}: {v:?} is not a number"));
    let flag = |v: &str| match v {
        "0" => Ok(false),
        "1" | "2" | "3" | "4" => Ok(true),
        _ => Err(format!("{name}: {v:?} is not 0 or 1")),
    };
    let triple = |v: &str| -> Result<[u64; 3], String> {
        let f: Vec<&str> = v.split_whitespace().collect();
        if f.len() != 3 {
            return Err(format!("{name}: {v:?} is not three numbers (min default max)"));
        }
        Ok([num(f[0])?, num(f[1])?, num(f[2])?])
    };
    match name {
        "net.core.rmem_max" => h.rmem_max = Some(num(v)?),
        "net.core.wmem_max" => h.wmem_max = Some(num(v)?),
        "net.ipv4.tcp_rmem" => h.tcp_rmem = Some(triple(v)?),
        "net.ipv4.tcp_wmem" => h.tcp_wmem = Some(triple(v)?),
        "net.ipv4.tcp_adv_win_scale" => {
            let s = v.parse::<i64>().map_err(|_| format!("{name}: {v:?} is not a number"))?;
            if !(-31..=31).contains(&s) {
                return Err(format!("{name}: {s} is outside the kernel's -31..31"));
            }
            h.adv_win_scale = Some(s)
        }
        "net.ipv4.tcp_window_scaling" => h.window_scaling = Some(flag(v)?),
        "net.ipv4.tcp_timestamps" => h.timestamps = Some(flag(v)?),
        "net.ipv4.tcp_sack" => h.sack = Some(flag(v)?),
        "net.ipv4.tcp_moderate_rcvbuf" => h.moderate_rcvbuf = Some(flag(v)?),
        "net.ipv4.tcp_no_metrics_save" => h.no_metrics_save = Some(flag(v)?),
        "net.ipv4.tcp_congestion_control" => h.congestion = Some(v.to_string()),
        "net.ipv4.tcp_available_congestion_control" => {
            h.available_congestion = v.split_whitespace().map(str::to_string).collect()
        }
        "net.core.default_qdisc" => h.default_qdisc = Some(v.to_string()),
        _ => return Err(format!("{name}: not a setting tune reads")),
    }
    Ok(())
}

/// The sysctls tune reads, and whether Linux keeps each per network
/// namespace (true) or for the whole host (false).
pub const SETTINGS: &[(&str, bool)] = &[
    ("net.core.rmem_max", false),
    ("net.core.wmem_max", false),
    ("net.ipv4.tcp_rmem", true),
    ("net.ipv4.tcp_wmem", true),
    ("net.ipv4.tcp_adv_win_scale", true),
    ("net.ipv4.tcp_window_scaling", true),
    ("net.ipv4.tcp_timestamps", true),
    ("net.ipv4.tcp_sack", true),
    ("net.ipv4.tcp_moderate_rcvbuf", true),
    ("net.ipv4.tcp_no_metrics_save", true),
    ("net.ipv4.tcp_congestion_control", true),
    ("net.ipv4.tcp_available_congestion_control", false),
    ("net.core.default_qdisc", false),
];

/// One line of the advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub setting: String,
    pub current: String,
    /// What this setting alone lets a single stream carry on the path, bits per second.
    pub cap_bps: Option<f64>,
    /// The value to set, when it must change.
    pub recommended: Option<String>,
    pub why: String,
    /// Per network namespace (false: for the whole host).
    pub per_namespace: bool,
    /// Which end of a stream it limits.
    pub side: End,
}

/// Which end of a stream a setting limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    Sender,
    Receiver,
    Both,
}

impl End {
    fn limits(self, end: End) -> bool {
        self == End::Both || self == end
    }
}

/// The advice for a path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    pub path: TunePath,
    pub bdp_bytes: u64,
    pub rows: Vec<Row>,
    /// The setting with the lowest cap, and that cap: what a single stream gets now.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
    /// The lines for a sysctl.d file (empty: nothing to change).
    pub sysctl_lines: Vec<String>,
}

/// The share of a buffer that becomes window, for tcp_adv_win_scale.
pub fn window_share(adv_win_scale: i64) -> f64 {
    if adv_win_scale > 0 {
        1.0 - 1.0 / f64::from(1u32 << adv_win_scale.min(30) as u32)
    } else {
        1.0 / f64::from(1u32 << (-adv_win_scale).min(30) as u32)
    }
}

/// The buffer (power of two, at least 4 MiB) whose window holds `bdp`
/// bytes with a quarter to spare: the share varies from connection to
/// connection, and a stream's RTT grows while a queue builds.
fn buffer_for(bdp: u64, share: f64) -> u64 {
    let need = (bdp as f64 * 1.25 / share).ceil() as u64;
    need.max(4 << 20).next_power_of_two()
}

fn fmt_bytes(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} B")
    }
}

/// What each setting caps a single stream at on `path`, which binds, and
/// what to set. `app_buffer` is the SO_RCVBUF / SO_SNDBUF an application
/// asks for (iperf's -w), if any.
// Long by design: one row per setting (receive and send buffers, window
// scaling, timestamps and SACK, congestion control, MTU), in the order the
// advice prints them, each row's cap against the same path.
pub fn advise(path: TunePath, h: &HostSettings, app_buffer: Option<u64>) -> Advice {
    let bdp = path.bdp_bytes();
    let (share, share_why) = share_of(h);
    let want = buffer_for(bdp, share);
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    let cap = |buf: u64| path.rate_of_window((buf as f64 * share) as u64);

    // the receive side: autotuned up to tcp_rmem[2], or the application's buffer
    match app_buffer {
        Some(b) => {
            let granted = h.rmem_max.map(|m| b.saturating_mul(2).min(m.saturating_mul(2)));
            let needed = (bdp as f64 / share / 2.0).ceil() as u64;
            rows.push(Row {
                setting: "net.core.rmem_max".into(),
                current: h.rmem_max.map(|m| m.to_string()).unwrap_or_else(|| "unknown".into()),
                cap_bps: granted.map(cap),
                recommended: h.rmem_max.filter(|&m| m < needed).map(|_| want.to_string()),
                why: format!(
                    "the application asks for {} (SO_RCVBUF): the kernel doubles it, capped at twice this",
                    fmt_bytes(b)
                ),
                per_namespace: false,
                side: End::Receiver,
            });
            rows.push(Row {
                setting: "application buffer (-w)".into(),
                current: b.to_string(),
                cap_bps: Some(cap(b.saturating_mul(2))),
                recommended: (b.saturating_mul(2) < (bdp as f64 / share) as u64).then(|| needed.to_string()),
                why: "a buffer set by the application is not autotuned".into(),
                per_namespace: true,
                side: End::Both,
            });
            if h.rmem_max.is_some_and(|m| m < needed) {
                lines.push(format!("net.core.rmem_max = {want}"));
                lines.push(format!("net.core.wmem_max = {want}"));
            }
        }
        None => {
            let autotune = h.moderate_rcvbuf.unwrap_or(true);
            let (buf, what) = match (h.tcp_rmem, autotune) {
                (Some(t), true) => (Some(t[2]), "the autotuned receive buffer's ceiling"),
                (Some(t), false) => (Some(t[1]), "tcp_moderate_rcvbuf is off: the buffer stays at tcp_rmem's default"),
                (None, _) => (None, "unreadable"),
            };
            let low = buf.is_some_and(|b| (b as f64 * share) < bdp as f64);
            rows.push(Row {
                setting: "net.ipv4.tcp_rmem".into(),
                current: h.tcp_rmem.map(|t| format!("{} {} {}", t[0], t[1], t[2])).unwrap_or_else(|| "unknown".into()),
                cap_bps: buf.map(cap),
                recommended: h.tcp_rmem.filter(|_| low).map(|t| format!("{} {} {want}", t[0], t[1])),
                why: format!("{what}; {}", share_why.split(':').next().unwrap_or_default()),
                per_namespace: true,
                side: End::Receiver,
            });
            if let (Some(t), true) = (h.tcp_rmem, low) {
                lines.push(format!("net.ipv4.tcp_rmem = {} {} {want}", t[0], t[1]));
            }
            rows.push(Row {
                setting: "net.ipv4.tcp_moderate_rcvbuf".into(),
                current: flag_text(h.moderate_rcvbuf),
                cap_bps: None,
                recommended: (!autotune).then(|| "1".into()),
                why: if autotune {
                    "on: the receive buffer grows with the connection's need, up to tcp_rmem's maximum".into()
                } else {
                    "receive-buffer autotuning is off".into()
                },
                per_namespace: true,
                side: End::Receiver,
            });
            if !autotune {
                lines.push("net.ipv4.tcp_moderate_rcvbuf = 1".into());
            }
            for (name, v) in [("net.core.rmem_max", h.rmem_max), ("net.core.wmem_max", h.wmem_max)] {
                rows.push(Row {
                    setting: name.into(),
                    current: v.map(|m| m.to_string()).unwrap_or_else(|| "unknown".into()),
                    cap_bps: None,
                    recommended: None,
                    why:
                        "caps only a buffer the application sets (SO_RCVBUF/SO_SNDBUF, iperf -w); autotuning ignores it"
                            .into(),
                    per_namespace: false,
                    side: if name.contains("rmem") { End::Receiver } else { End::Sender },
                });
            }
        }
    }
    // the send side holds every byte until it is acknowledged
    let (sshare, swhy) = send_share_of(h);
    let swant = buffer_for(bdp, sshare);
    // a share a probe could not tell is no cap: the guess may understate it
    let untold = h.send_share_untold && h.measured_send_share.is_none();
    let swhy = if untold {
        format!("its share could not be measured on this path (see the share probe's note), so no cap is drawn from it; sized {swhy}")
    } else {
        swhy
    };
    let scap = |buf: u64| Some(path.rate_of_window((buf as f64 * sshare) as u64)).filter(|_| !untold);
    let wbuf = match app_buffer {
        Some(b) => h.wmem_max.map(|m| b.saturating_mul(2).min(m.saturating_mul(2))),
        None => h.tcp_wmem.map(|t| t[2]),
    };
    // a probe's finding holds for the autotuned buffer it was run with, not for -w
    let suffices = h.send_buffer_suffices && app_buffer.is_none();
    let wlow = !suffices && wbuf.is_some_and(|b| (b as f64 * sshare) < bdp as f64);
    if app_buffer.is_none() {
        rows.push(Row {
            setting: "net.ipv4.tcp_wmem".into(),
            current: h.tcp_wmem.map(|t| format!("{} {} {}", t[0], t[1], t[2])).unwrap_or_else(|| "unknown".into()),
            cap_bps: wbuf.and_then(scap).filter(|_| !suffices),
            recommended: h.tcp_wmem.filter(|_| wlow).map(|t| format!("{} {} {swant}", t[0], t[1])),
            why: if suffices {
                "the send buffer's ceiling: a probe with it reached the path's rate without it holding the sender back"
                    .into()
            } else {
                format!("the send buffer's ceiling: it holds every byte until it is acknowledged; {swhy}")
            },
            per_namespace: true,
            side: End::Sender,
        });
        if let (Some(t), true) = (h.tcp_wmem, wlow) {
            lines.push(format!("net.ipv4.tcp_wmem = {} {} {swant}", t[0], t[1]));
        }
    } else {
        rows.push(Row {
            setting: "net.core.wmem_max".into(),
            current: h.wmem_max.map(|m| m.to_string()).unwrap_or_else(|| "unknown".into()),
            cap_bps: wbuf.and_then(scap),
            recommended: h.wmem_max.filter(|_| wlow).map(|_| swant.to_string()),
            why: format!("the application's SO_SNDBUF, doubled, is capped at twice this; {swhy}"),
            per_namespace: false,
            side: End::Sender,
        });
    }
    // window scaling: without it no window exceeds 64 KiB
    rows.push(Row {
        setting: "net.ipv4.tcp_window_scaling".into(),
        current: flag_text(h.window_scaling),
        cap_bps: (h.window_scaling == Some(false)).then(|| path.rate_of_window(65_535)),
        recommended: (h.window_scaling == Some(false)).then(|| "1".into()),
        why: "without it the window is at most 65535 bytes".into(),
        per_namespace: true,
        side: End::Both,
    });
    if h.window_scaling == Some(false) {
        lines.push("net.ipv4.tcp_window_scaling = 1".into());
    }
    for (name, v, off_means) in [
        ("net.ipv4.tcp_sack", h.sack, "a loss costs a whole window of retransmission instead of the lost segments"),
        (
            "net.ipv4.tcp_timestamps",
            h.timestamps,
            "no RTT per segment and no protection against wrapped sequence numbers at high rates",
        ),
    ] {
        rows.push(Row {
            setting: name.into(),
            current: flag_text(v),
            cap_bps: None,
            recommended: (v == Some(false)).then(|| "1".into()),
            why: if v == Some(false) { off_means.into() } else { "on, as it should be".into() },
            per_namespace: true,
            side: End::Both,
        });
        if v == Some(false) {
            lines.push(format!("{name} = 1"));
        }
    }
    let cc = h.congestion.clone().unwrap_or_else(|| "unknown".into());
    let better = ["bbr", "cubic"].iter().find(|c| h.available_congestion.iter().any(|a| a == *c));
    let reno = cc == "reno";
    rows.push(Row {
        setting: "net.ipv4.tcp_congestion_control".into(),
        current: cc.clone(),
        cap_bps: None,
        recommended: better.filter(|_| reno).map(|c| c.to_string()),
        why: if reno {
            "reno halves its window at each loss and grows it by one segment per RTT: at a high BDP it takes minutes to recover".into()
        } else {
            format!("available: {}", h.available_congestion.join(", "))
        },
        per_namespace: true,
        side: End::Sender,
    });
    if let (true, Some(c)) = (reno, better) {
        lines.push(format!("net.ipv4.tcp_congestion_control = {c}"));
    }
    rows.push(Row {
        setting: "net.ipv4.tcp_no_metrics_save".into(),
        current: flag_text(h.no_metrics_save),
        cap_bps: None,
        recommended: None,
        why: "0 keeps the ssthresh of the last connection to a host: a lossy one slows the next from its start".into(),
        per_namespace: true,
        side: End::Sender,
    });
    rows.push(Row {
        setting: "net.ipv4.tcp_adv_win_scale".into(),
        current: h.adv_win_scale.map(|s| s.to_string()).unwrap_or_else(|| "unknown".into()),
        cap_bps: None,
        recommended: None,
        why: share_why.clone(),
        per_namespace: true,
        side: End::Receiver,
    });
    if let Some(m) = h.mtu {
        rows.push(Row {
            setting: "MTU of the route".into(),
            current: m.to_string(),
            cap_bps: None,
            recommended: None,
            why: format!(
                "segments of up to {} bytes of payload: the BDP is {} of them",
                m.saturating_sub(52),
                bdp / u64::from(m.saturating_sub(52).max(1))
            ),
            per_namespace: true,
            side: End::Both,
        });
    }
    rows.push(Row {
        setting: "net.core.default_qdisc".into(),
        current: h.default_qdisc.clone().unwrap_or_else(|| "unknown".into()),
        cap_bps: None,
        recommended: None,
        why: "fq paces every flow; without it TCP paces itself (since Linux 4.13)".into(),
        per_namespace: false,
        side: End::Sender,
    });
    let (binding, cap_bps) = binding_of(path, rows.iter().map(|r| (r.setting.clone(), r.cap_bps)));
    Advice { path, bdp_bytes: bdp, binding, cap_bps, rows, sysctl_lines: lines }
}

/// The lowest cap among (name, cap), and what a stream gets: the binding
/// name only when it caps below the path's rate.
fn binding_of(path: TunePath, caps: impl Iterator<Item = (String, Option<f64>)>) -> (Option<String>, Option<f64>) {
    let low = caps.filter_map(|(n, c)| c.map(|c| (c, n))).min_by(|a, b| a.0.total_cmp(&b.0));
    let rate = path.rate_bps as f64;
    (low.as_ref().filter(|(c, _)| *c < rate).map(|(_, n)| n.clone()), low.map(|(c, _)| c.min(rate)))
}

/// The advice for a stream from one host to another: each end's own advice,
/// and what binds the stream (the sender's send side, the receiver's
/// receive side, and what both ends must agree on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairAdvice {
    pub sender: Advice,
    pub receiver: Advice,
    /// "sender: SETTING" or "receiver: SETTING", when one caps below the path's rate.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
}

pub fn advise_pair(
    path: TunePath,
    sender: &HostSettings,
    receiver: &HostSettings,
    app_buffer: Option<u64>,
) -> PairAdvice {
    let s = advise(path, sender, app_buffer);
    let r = advise(path, receiver, app_buffer);
    let caps = s
        .rows
        .iter()
        .filter(|x| x.side.limits(End::Sender))
        .map(|x| (format!("sender: {}", x.setting), x.cap_bps))
        .chain(
            r.rows
                .iter()
                .filter(|x| x.side.limits(End::Receiver))
                .map(|x| (format!("receiver: {}", x.setting), x.cap_bps)),
        );
    let (binding, cap_bps) = binding_of(path, caps);
    PairAdvice { sender: s, receiver: r, binding, cap_bps }
}

/// Whether Linux keeps a setting per network namespace (None: not one tune knows).
pub fn per_namespace(name: &str) -> Option<bool> {
    SETTINGS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

fn flag_text(v: Option<bool>) -> String {
    match v {
        Some(true) => "1".into(),
        Some(false) => "0".into(),
        None => "unknown".into(),
    }
}

// ---------------------------------------------------------------------------
// Ends and directions: the records read at each end, the advice for each,
// and what caps a stream each way
// ---------------------------------------------------------------------------

/// One end's settings as read, before the advice.
#[derive(Debug, Clone)]
pub struct Record {
    pub name: String,
    pub sysctls: BTreeMap<String, String>,
    /// The kernel release.
    pub kernel: Option<String>,
    pub mtu: Option<u32>,
    /// Measured by the share probes (`--measure-share`), if run.
    pub share: Option<f64>,
    pub send_share: Option<f64>,
    pub send_suffices: bool,
    /// A send-share probe ran and could not tell the share.
    pub send_untold: bool,
}

impl Record {
    pub fn new(name: &str, sysctls: BTreeMap<String, String>, kernel: Option<String>, mtu: Option<u32>) -> Record {
        Record {
            name: name.to_string(),
            sysctls,
            kernel,
            mtu,
            share: None,
            send_share: None,
            send_suffices: false,
            send_untold: false,
        }
    }

    /// The settings as tune models them, with what the probes measured, and
    /// the ones that could not be read.
    pub fn settings(&self) -> (HostSettings, Vec<String>) {
        let (mut h, unknown) = host_from(&self.sysctls, self.kernel.as_deref(), self.mtu);
        h.measured_share = self.share;
        h.measured_send_share = self.send_share;
        h.send_buffer_suffices = self.send_suffices;
        h.send_share_untold = self.send_untold && self.send_share.is_none() && !self.send_suffices;
        (h, unknown)
    }
}

impl EndAdvice {
    pub fn new(r: &Record, path: TunePath, app: Option<u64>) -> EndAdvice {
        let (settings, unknown) = r.settings();
        let advice = advise(path, &settings, app);
        EndAdvice { name: r.name.clone(), settings, advice, unknown }
    }
}

/// Both directions between every pair of ends (a single end: its own binding).
pub fn directions(ends: &[EndAdvice], path: TunePath, app: Option<u64>) -> Vec<DirectionCap> {
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
                let p = advise_pair(path, &s.settings, &r.settings, app);
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

/// The buffer sizes the probes ask for, from the ceilings that matter: the
/// receiver's tcp_rmem maximum and the sender's tcp_wmem maximum, halved
/// (the kernel doubles what is asked), within 16 KiB to 512 MiB. A socket
/// cannot ask for more than net.core.rmem_max / wmem_max: above that the
/// probe runs at the largest buffer it can have, and says so.
pub fn probe_sizes(sender: &HostSettings, receiver: &HostSettings) -> (u64, u64) {
    let half = |v: Option<[u64; 3]>, core: Option<u64>| {
        let want = v.map(|t| t[2] / 2).unwrap_or(64 << 10);
        core.map_or(want, |c| want.min(c)).clamp(16 << 10, 512 << 20)
    };
    (half(receiver.tcp_rmem, receiver.rmem_max), half(sender.tcp_wmem, sender.wmem_max))
}

/// Folds the probes into the ends' records: in each direction the receiver
/// gets its receive share and the sender its send share. `client` is the
/// end that ran the probes ("up": it sent), `agent` the far end.
pub fn with_shares(client: &mut Record, agent: &mut Record, probes: &[ShareProbe]) {
    for p in probes {
        let (sender, receiver) =
            if p.direction == "up" { (&mut *client, &mut *agent) } else { (&mut *agent, &mut *client) };
        sender.send_share = p.send_share.or(sender.send_share);
        sender.send_suffices |= p.send_buffer_suffices;
        sender.send_untold |= p.send_share.is_none() && !p.send_buffer_suffices;
        receiver.share = p.receive_share.or(receiver.share);
    }
}

/// One end's settings and the advice for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndAdvice {
    /// "this host", "agent 192.0.2.7:5201", or a lab host's name.
    pub name: String,
    pub settings: HostSettings,
    pub advice: Advice,
    /// Settings that could not be read or parsed: unknown, not guessed.
    pub unknown: Vec<String>,
}

/// What caps a stream from one end to the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionCap {
    pub from: String,
    pub to: String,
    /// "sender: SETTING" or "receiver: SETTING"; None: nothing caps it below the path's rate.
    pub binding: Option<String>,
    pub cap_bps: Option<f64>,
}

/// What the share probes found for one direction of a path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareProbe {
    /// "up" (this end, or lab host a, sends) or "down" (the far end sends).
    pub direction: String,
    /// The receive buffer the receiver was granted, and the largest window
    /// it advertised: their ratio is its window share.
    pub rcvbuf: Option<u64>,
    pub window_max: Option<u64>,
    pub receive_share: Option<f64>,
    /// The send buffer the sender was granted, and the median data in
    /// flight (unacknowledged segments x MSS; a diagnostic). The send share
    /// is the window the probe's steady rate needs on the path (rate x RTT) over
    /// the buffer: what the buffer let through, as a fraction of it.
    pub sndbuf: Option<u64>,
    pub in_flight_median: Option<u64>,
    pub send_share: Option<f64>,
    /// The share at the quartiles of the probe's rate from one TCP_INFO
    /// sample to the next: how far the one share can be trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_share_quartiles: Option<(f64, f64)>,
    /// The send probe reached the path's rate without the buffer holding it
    /// back: that buffer suffices on this path.
    pub send_buffer_suffices: bool,
    /// What the send probe carried after its first half second (bytes
    /// acknowledged over the time), bits per second.
    pub send_probe_bps: Option<f64>,
    /// Why a share is missing, if one is.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old_kernel() -> HostSettings {
        // a 2.6-era default: 4 MB autotuning ceiling would be generous; BalticGrid's hosts had 256 KB
        HostSettings {
            rmem_max: Some(131_071),
            wmem_max: Some(131_071),
            tcp_rmem: Some([4096, 87_380, 262_144]),
            tcp_wmem: Some([4096, 16_384, 262_144]),
            adv_win_scale: Some(2),
            window_scaling: Some(true),
            timestamps: Some(true),
            sack: Some(true),
            moderate_rcvbuf: Some(true),
            no_metrics_save: Some(false),
            congestion: Some("cubic".into()),
            available_congestion: vec!["reno".into(), "cubic".into()],
            default_qdisc: Some("pfifo_fast".into()),
            mtu: Some(1500),
            kernel: None,
            measured_share: None,
            measured_send_share: None,
            send_buffer_suffices: false,
            send_share_untold: false,
        }
    }

    #[test]
    fn bdp_and_window_rate() {
        // DataTAG's rule: 1 Gbit/s x 35 ms = 4.375 MB
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 };
        assert_eq!(p.bdp_bytes(), 4_375_000);
        // a 64 KiB window at 35 ms: 14.98 Mbit/s
        assert!((p.rate_of_window(65_535) - 14_979_428.57).abs() < 1.0);
    }

    #[test]
    fn the_window_share_of_a_buffer() {
        assert_eq!(window_share(1), 0.5);
        assert_eq!(window_share(2), 0.75);
        assert_eq!(window_share(0), 1.0);
        assert_eq!(window_share(-2), 0.25);
    }

    #[test]
    fn an_old_kernel_caps_a_gigabit_at_35_ms_by_its_receive_buffer() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 };
        let a = advise(p, &old_kernel(), None);
        assert_eq!(a.binding.as_deref(), Some("net.ipv4.tcp_rmem"));
        // 262144 x 0.75 = 196608 bytes per 35 ms = 44.9 Mbit/s: BalticGrid's 50-120
        let cap = a.cap_bps.expect("cap");
        assert!((cap - 44_938_971.4).abs() < 10.0, "{cap}");
        // the buffer whose window holds the BDP, a quarter to spare: 4.375 MB x 1.25 / 0.75 = 7.3 MB -> 8 MiB
        assert!(a.sysctl_lines.contains(&"net.ipv4.tcp_rmem = 4096 87380 8388608".to_string()), "{:?}", a.sysctl_lines);
        assert!(a.sysctl_lines.contains(&"net.ipv4.tcp_wmem = 4096 16384 8388608".to_string()));
    }

    #[test]
    fn an_application_buffer_is_doubled_and_capped_by_rmem_max() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let a = advise(p, &old_kernel(), Some(4 << 20));
        // asked 4 MiB, granted 2 x 131071 = 262142 bytes: rmem_max binds
        let r = a.rows.iter().find(|r| r.setting == "net.core.rmem_max").expect("row");
        let cap = r.cap_bps.expect("cap");
        assert!((cap - (262_142.0f64 * 0.75).floor() * 8.0 / 0.02).abs() < 1.0, "{cap}");
        assert_eq!(a.binding.as_deref(), Some("net.core.rmem_max"));
        assert!(a.sysctl_lines.iter().any(|l| l.starts_with("net.core.rmem_max = ")));
    }

    #[test]
    fn sufficient_buffers_say_so() {
        let mut h = old_kernel();
        h.tcp_rmem = Some([4096, 131_072, 67_108_864]);
        h.tcp_wmem = Some([4096, 16_384, 67_108_864]);
        let a = advise(TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 }, &h, None);
        assert_eq!(a.binding, None, "{:?}", a.rows);
        assert!(a.sysctl_lines.is_empty(), "{:?}", a.sysctl_lines);
        assert_eq!(a.cap_bps, Some(1e9));
    }

    #[test]
    fn window_scaling_off_caps_at_64_kib() {
        let mut h = old_kernel();
        h.window_scaling = Some(false);
        let a = advise(TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 }, &h, None);
        assert_eq!(a.binding.as_deref(), Some("net.ipv4.tcp_window_scaling"));
        assert!(a.sysctl_lines.contains(&"net.ipv4.tcp_window_scaling = 1".to_string()));
    }

    #[test]
    fn unreadable_settings_are_unknown_not_guessed() {
        let a = advise(TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 }, &HostSettings::default(), None);
        let r = a.rows.iter().find(|r| r.setting == "net.ipv4.tcp_rmem").expect("row");
        assert_eq!(r.current, "unknown");
        assert_eq!(r.cap_bps, None);
        assert!(a.sysctl_lines.is_empty());
    }

    #[test]
    fn parsing_each_setting() {
        let mut h = HostSettings::default();
        parse_setting(&mut h, "net.ipv4.tcp_rmem", "4096\t131072  6291456").expect("rmem");
        assert_eq!(h.tcp_rmem, Some([4096, 131_072, 6_291_456]));
        parse_setting(&mut h, "net.ipv4.tcp_adv_win_scale", "-2").expect("scale");
        assert_eq!(h.adv_win_scale, Some(-2));
        parse_setting(&mut h, "net.ipv4.tcp_sack", "0").expect("sack");
        assert_eq!(h.sack, Some(false));
        parse_setting(&mut h, "net.ipv4.tcp_available_congestion_control", "reno cubic bbr").expect("cc");
        assert_eq!(h.available_congestion.len(), 3);
        assert!(parse_setting(&mut h, "net.ipv4.tcp_rmem", "4096 x").is_err());
        assert!(parse_setting(&mut h, "net.core.rmem_max", "lots").is_err());
    }

    #[test]
    fn kernel_releases_compare() {
        assert_eq!(kernel_at_least("6.18.0-1-amd64", (6, 6)), Some(true));
        assert_eq!(kernel_at_least("6.6.0", (6, 6)), Some(true));
        assert_eq!(kernel_at_least("6.5.13", (6, 6)), Some(false));
        assert_eq!(kernel_at_least("2.6.9-89.ELsmp", (6, 6)), Some(false));
        assert_eq!(kernel_at_least("10.0", (6, 6)), Some(true));
        assert_eq!(kernel_at_least("unknown", (6, 6)), None);
    }

    #[test]
    fn linux_6_6_ignores_adv_win_scale() {
        let mut h = old_kernel();
        h.kernel = Some("6.18.0".into());
        assert_eq!(share_of(&h).0, 0.5);
        h.kernel = Some("2.6.9-89.EL".into());
        assert_eq!(share_of(&h).0, 0.75);
        // at 0.5 the old 262144-byte ceiling carries 131072 bytes per 35 ms
        h.kernel = Some("6.18.0".into());
        let a = advise(TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 }, &h, None);
        let cap = a.cap_bps.expect("cap");
        assert!((cap - 131_072.0 * 8.0 / 0.035).abs() < 1.0, "{cap}");
        // and the buffer for the BDP: 4.375 MB x 1.25 / 0.5 = 10.9 MB -> 16 MiB
        assert!(
            a.sysctl_lines.contains(&"net.ipv4.tcp_rmem = 4096 87380 16777216".to_string()),
            "{:?}",
            a.sysctl_lines
        );
    }

    #[test]
    fn a_pair_is_bound_by_the_senders_send_side_or_the_receivers_receive_side() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let mut good = old_kernel();
        good.tcp_rmem = Some([4096, 131_072, 67_108_864]);
        good.tcp_wmem = Some([4096, 16_384, 67_108_864]);
        let old = old_kernel();
        // a tuned sender to an old receiver: the receiver's tcp_rmem binds
        let a = advise_pair(p, &good, &old, None);
        assert_eq!(a.binding.as_deref(), Some("receiver: net.ipv4.tcp_rmem"));
        // an old sender to a tuned receiver: the sender's tcp_wmem binds, not its tcp_rmem
        let mut old_send = good.clone();
        old_send.tcp_wmem = Some([4096, 16_384, 131_072]);
        let a = advise_pair(p, &old_send, &good, None);
        assert_eq!(a.binding.as_deref(), Some("sender: net.ipv4.tcp_wmem"));
        let cap = a.cap_bps.expect("cap");
        assert!((cap - (131_072.0f64 * 0.75).floor() * 8.0 / 0.02).abs() < 1.0, "{cap}");
        // window scaling off at either end binds
        let mut noscale = good.clone();
        noscale.window_scaling = Some(false);
        let a = advise_pair(p, &good, &noscale, None);
        assert_eq!(a.binding.as_deref(), Some("receiver: net.ipv4.tcp_window_scaling"));
        // both tuned: nothing binds
        assert_eq!(advise_pair(p, &good, &good, None).binding, None);
    }

    #[test]
    fn settings_from_a_record_name_the_missing_ones() {
        let mut m = std::collections::BTreeMap::new();
        m.insert("net.ipv4.tcp_rmem".to_string(), "4096 131072 6291456".to_string());
        m.insert("net.ipv4.tcp_sack".to_string(), "yes".to_string());
        let (h, unknown) = host_from(&m, Some("6.18.0"), Some(1500));
        assert_eq!(h.tcp_rmem, Some([4096, 131_072, 6_291_456]));
        assert_eq!(h.sack, None);
        assert!(unknown.iter().any(|u| u.starts_with("net.ipv4.tcp_sack")), "{unknown:?}");
        assert!(unknown.iter().any(|u| u == "net.core.rmem_max: unreadable"), "{unknown:?}");
        assert_eq!(unknown.len(), SETTINGS.len() - 1);
        assert_eq!(per_namespace("net.core.rmem_max"), Some(false));
        assert_eq!(per_namespace("net.ipv4.tcp_rmem"), Some(true));
    }

    #[test]
    fn measured_shares_replace_the_model() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let mut h = old_kernel();
        h.kernel = Some("6.18.0".into());
        h.tcp_rmem = Some([4096, 87_380, 174_760]);
        h.tcp_wmem = Some([4096, 16_384, 131_072]);
        // the model: 50% of both, the send buffer binds at 131072 x 0.5 per 20 ms
        let a = advise(p, &h, None);
        assert_eq!(a.binding.as_deref(), Some("net.ipv4.tcp_wmem"));
        assert!((a.cap_bps.expect("cap") - 65_536.0 * 8.0 / 0.02).abs() < 1.0);
        // measured: 60% of the receive buffer is window, 81% of the send buffer in flight
        h.measured_share = Some(0.60);
        h.measured_send_share = Some(0.81);
        let a = advise(p, &h, None);
        let rcap = (174_760.0f64 * 0.60).floor() * 8.0 / 0.02;
        let scap = (131_072.0f64 * 0.81).floor() * 8.0 / 0.02;
        assert!(rcap < scap);
        assert_eq!(a.binding.as_deref(), Some("net.ipv4.tcp_rmem"));
        assert!((a.cap_bps.expect("cap") - rcap).abs() < 1.0, "{:?}", a.cap_bps);
        let w = a.rows.iter().find(|r| r.setting == "net.ipv4.tcp_wmem").expect("wmem");
        assert!((w.cap_bps.expect("cap") - scap).abs() < 1.0);
        assert!(w.why.contains("81% of it was data in flight (measured"), "{}", w.why);
        // the buffers to set follow the measured shares, a quarter to spare:
        // 2.5 MB x 1.25 / 0.6 -> 5.2 MB -> 8 MiB; / 0.81 -> 3.86 MB -> 4 MiB
        assert!(a.sysctl_lines.contains(&"net.ipv4.tcp_rmem = 4096 87380 8388608".to_string()), "{:?}", a.sysctl_lines);
        assert!(a.sysctl_lines.contains(&"net.ipv4.tcp_wmem = 4096 16384 4194304".to_string()), "{:?}", a.sysctl_lines);
    }

    #[test]
    fn a_send_share_a_probe_could_not_tell_draws_no_cap_but_still_sizes() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let mut h = old_kernel();
        h.kernel = Some("6.18.0".into());
        h.tcp_rmem = Some([4096, 87_380, 174_760]);
        h.tcp_wmem = Some([4096, 16_384, 131_072]);
        h.measured_share = Some(0.6475);
        // guessed at the receive share, the send buffer binds: 131072 x 0.6475 per 20 ms
        assert_eq!(advise(p, &h, None).binding.as_deref(), Some("net.ipv4.tcp_wmem"));
        // the probe ran and the receiver's window held it: the sender's cap is
        // unknown, the receiver's binds, and the send buffer is still sized
        let mut r = Record::new("a", BTreeMap::new(), None, None);
        let probe = ShareProbe { direction: "up".into(), ..ShareProbe::default() };
        let mut far = Record::new("b", BTreeMap::new(), None, None);
        with_shares(&mut r, &mut far, &[probe]);
        assert!(r.send_untold && !far.send_untold);
        h.send_share_untold = true;
        let a = advise(p, &h, None);
        assert_eq!(a.binding.as_deref(), Some("net.ipv4.tcp_rmem"), "{:?}", a.rows);
        assert!((a.cap_bps.expect("cap") - (174_760.0f64 * 0.6475).floor() * 8.0 / 0.02).abs() < 8.0 / 0.02 + 1.0);
        let w = a.rows.iter().find(|r| r.setting == "net.ipv4.tcp_wmem").expect("wmem");
        assert!(w.cap_bps.is_none() && w.why.contains("could not be measured"), "{w:?}");
        assert!(a.sysctl_lines.iter().any(|l| l.starts_with("net.ipv4.tcp_wmem = ")), "{:?}", a.sysctl_lines);
        // a measured share wins over the flag
        h.measured_send_share = Some(0.9);
        assert!(advise(p, &h, None).rows.iter().any(|r| r.setting == "net.ipv4.tcp_wmem" && r.cap_bps.is_some()));
    }

    #[test]
    fn a_send_buffer_a_probe_found_sufficient_caps_nothing() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let mut h = old_kernel();
        h.kernel = Some("6.18.0".into());
        h.tcp_rmem = Some([4096, 131_072, 33_554_432]);
        h.tcp_wmem = Some([4096, 16_384, 4_194_304]);
        // modelled at 50%: 2 MiB of window per 20 ms caps at 839 Mbit/s
        assert_eq!(advise(p, &h, None).binding.as_deref(), Some("net.ipv4.tcp_wmem"));
        h.send_buffer_suffices = true;
        let a = advise(p, &h, None);
        assert_eq!(a.binding, None, "{:?}", a.rows);
        assert!(a.sysctl_lines.is_empty(), "{:?}", a.sysctl_lines);
        // not for a buffer the application sets
        let a = advise(p, &h, Some(256 << 10));
        assert!(a.rows.iter().any(|r| r.setting == "net.core.wmem_max" && r.cap_bps.is_some()));
    }

    #[test]
    fn measured_shares_are_clamped_and_odd_records_do_not_overflow() {
        let p = TunePath { rate_bps: 1_000_000_000, rtt_ns: 20_000_000 };
        let mut h = old_kernel();
        // a write overshoots a small send buffer: 125% in flight counts as the whole buffer
        h.measured_send_share = Some(1.25);
        let w = advise(p, &h, None).rows.into_iter().find(|r| r.setting == "net.ipv4.tcp_wmem").expect("wmem");
        assert!((w.cap_bps.expect("cap") - 262_144.0 * 8.0 / 0.02).abs() < 1.0, "{w:?}");
        // a share of 0 or NaN sizes no infinite buffer
        for bad in [0.0, f64::NAN] {
            h.measured_send_share = Some(bad);
            let a = advise(p, &h, None);
            assert!(a.sysctl_lines.iter().all(|l| !l.ends_with(" 0")), "{:?}", a.sysctl_lines);
        }
        // tcp_adv_win_scale outside the kernel's range, and a huge rmem_max from a record
        assert!(parse_setting(&mut h, "net.ipv4.tcp_adv_win_scale", "-9223372036854775808").is_err());
        assert!(parse_setting(&mut h, "net.ipv4.tcp_adv_win_scale", "32").is_err());
        h.rmem_max = Some(u64::MAX);
        h.wmem_max = Some(u64::MAX);
        let a = advise(p, &h, Some(u64::MAX / 2 + 1));
        assert!(a.cap_bps.is_some());
    }
}
