//! The lab's settings: what the user types (`--profile`, `--rtt`, `--set
//! field=value`) turned into the [`LinkConfig`] of one direction of an
//! emulated link, and the named profiles of docs/lab.md.
//!
//! Rates are bits per second with decimal prefixes (`100M`, `1.5G`); byte
//! sizes follow dd (see [`crate::units`]); `delay_ns` is one way, and the same
//! [`LabSettings`] serves both directions for now.

use crate::lab::emu::{Jitter, LinkConfig, Loss, QueueLimit};
use crate::units::{parse_bytes, parse_duration_ns, UnitError};
use thiserror::Error;

/// The fastest rate the lab accepts: 100 Gbit/s.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;
/// The longest one-way delay (or jitter) the lab accepts: 10 s.
pub const MAX_DELAY_NS: u64 = 10_000_000_000;
/// The longest round-trip time: twice [`MAX_DELAY_NS`].
pub const MAX_RTT_NS: u64 = 2 * MAX_DELAY_NS;
/// The smallest MTU an IPv4 host must accept, and the largest an IP packet can be.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 576..=65_535;
/// The fields `--set` knows.
pub const FIELDS: &str = "rate, delay, rtt, jitter, loss, burst, queue, mtu, reorder";
/// The profiles' names, in the order of [`profiles`].
pub const PROFILE_NAMES: &str = "loopback, crossover-fe, lan-gige, man, wan, baltic, cern-icepp, lambda, internet";

/// What was wrong with a lab setting, and what is valid.
#[derive(Debug, Error, PartialEq)]
pub enum LabError {
    #[error("rate {0:?} is not valid: use bits per second, a number with an optional decimal suffix k (1e3), M (1e6) or G (1e9) and an optional bit, bit/s or bps, e.g. 100000, 20Mbit, 100M, 1.5G")]
    BadRate(String),
    #[error("rate {0:?} is a rate of zero, which passes nothing: use at least 1 bit/s, e.g. 100k, 100M, 1G")]
    ZeroRate(String),
    #[error("rate {0:?} is above the lab's limit of 100 Gbit/s: use at most 100G")]
    RateTooHigh(String),
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("{what} {input:?} is negative: use a duration of zero or more with a unit, e.g. 0, 250us, 10ms")]
    Negative { what: &'static str, input: String },
    #[error("{what} {input:?} is longer than the lab allows: use at most {max}, e.g. 250us, 10ms, 1.5s")]
    TooLong { what: &'static str, input: String, max: &'static str },
    #[error(
        "jitter {0:?} is not valid: use a duration with an optional distribution, e.g. 1ms, 1ms/uniform, 2ms/normal, 1ms/exponential (a long tail; the mean added)"
    )]
    BadJitter(String),
    #[error("loss {0:?} is not valid: use a percentage (1%, 0.5%), a fraction below 1 (0.01) or 0")]
    BadLoss(String),
    #[error("loss {0:?} is outside 0% to 100%: use a percentage (1%, 0.5%), a fraction below 1 (0.01) or 0")]
    LossRange(String),
    #[error("loss {0:?} is ambiguous: a bare number is a fraction below 1 (0.01 is 1%); write 1% for one percent or 100% for all")]
    LossAmbiguous(String),
    #[error("loss burst {0:?} is not valid: give the mean burst length in packets, a number of at least 1 (e.g. 1, 2.5, 10), or off")]
    BadBurst(String),
    #[error("a loss of {loss} cannot come in bursts of {burst} packets: such bursts allow at most {max:.6} ({pct:.4}%); use longer bursts or less loss", max = burst / (burst + 1.0), pct = 100.0 * burst / (burst + 1.0))]
    BurstUnreachable { loss: f64, burst: f64 },
    #[error("queue {0:?} is not valid: use packets (1000pkt), bytes as dd (256KB, 256KiB, 1MB, 9000B), a multiple of the bandwidth-delay product (1.5bdp) or unlimited")]
    BadQueue(String),
    #[error("a queue of 0 packets holds nothing: use at least 1pkt, or unlimited")]
    ZeroQueue,
    #[error("queue of {bytes} bytes is smaller than one MTU ({mtu}): use at least {mtu}B, or give it in packets (100pkt) or BDP multiples (1bdp)")]
    QueueBelowMtu { bytes: u64, mtu: u32 },
    #[error("a queue of {0}bdp needs a rate to compute the bandwidth-delay product: set a rate (rate=1G) or give the queue in packets or bytes")]
    BdpWithoutRate(f64),
    #[error("MTU {0:?} is not valid: use a whole number of bytes from 576 to 65535, e.g. 1500 or 9000")]
    BadMtu(String),
    #[error("reorder {0:?} is not valid: use on or off")]
    BadReorder(String),
    #[error("setting {0:?} is not of the form field=value: use e.g. rate=100M, rtt=20ms, loss=0.1%, queue=1bdp (fields: {FIELDS})")]
    BadSet(String),
    #[error("unknown lab setting {0:?}: valid settings are {FIELDS}")]
    UnknownField(String),
    #[error("unknown lab profile {0:?}: valid profiles are {PROFILE_NAMES}")]
    UnknownProfile(String),
    #[error("paths {0:?} is not valid: give the number of parallel paths of the bottleneck, from 1 to {MAX_PATHS}, e.g. paths=4")]
    BadPaths(String),
    #[error("path setting {0:?} is not valid: use K:field=value[,field=value...] for path K (from 1), e.g. 2:loss=1% or 3:rate=100M,rtt=300ms")]
    BadPathSet(String),
    #[error("path {k} does not exist: this bottleneck has {n} paths (1 to {n}); give more with paths=N")]
    NoSuchPath { k: usize, n: usize },
    #[error("the MTU is the hosts' own: set it with --mtu, not per path")]
    MtuPerPath,
}

pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// The bottleneck queue as the user gave it; [`LabSettings::queue_limit`] resolves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueueSpec {
    Unlimited,
    Packets(u64),
    Bytes(u64),
    /// A multiple of the round-trip bandwidth-delay product.
    Bdp(f64),
}

/// The distribution of jitter around the base delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitterDist {
    Uniform,
    Normal,
    /// Exponential, added to the base delay: `jitter_ns` is its mean.
    Exponential,
    /// An empirical table of the added delay's quantiles (a profile file's
    /// `jitter_table_s`); `jitter_ns` is not used.
    Table(Vec<i64>),
}

/// One direction of a lab link, in the user's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct LabSettings {
    /// Bottleneck rate; None for no bottleneck.
    pub rate_bps: Option<u64>,
    /// One-way delay, per direction.
    pub delay_ns: u64,
    /// Uniform: the half-width j of [-j, +j]; normal: the standard
    /// deviation; exponential: the mean.
    pub jitter_ns: u64,
    pub jitter_dist: JitterDist,
    pub reorder: bool,
    /// The long-run fraction of packets lost, 0 to 1.
    pub loss: f64,
    /// Mean loss burst length in packets (Gilbert-Elliott); None for random loss.
    pub loss_burst: Option<f64>,
    pub queue: QueueSpec,
    pub mtu: u32,
}

impl Default for LabSettings {
    /// No link: no rate, delay, jitter or loss; MTU 1500.
    fn default() -> Self {
        row("none", None, 0, QueueSpec::Unlimited, 0.0).settings()
    }
}

/// A plain decimal number: digits and at most one point (no sign, exponent, inf or NaN).
fn decimal(s: &str) -> Option<f64> {
    s.chars().all(|c| c.is_ascii_digit() || c == '.').then(|| s.parse().ok()).flatten().filter(|x: &f64| x.is_finite())
}

/// Parses a rate in bits per second: `100000`, `100M`, `1.5G`, `20Mbit`, `622Mbit/s`, `10kbps`.
pub fn parse_rate_bps(input: &str) -> Result<u64> {
    let s = input.trim();
    let bad = || LabError::BadRate(input.to_string());
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let (mult, rest) = match unit.chars().next() {
        Some('k' | 'K') => (1e3, &unit[1..]),
        Some('M') => (1e6, &unit[1..]),
        Some('G') => (1e9, &unit[1..]),
        _ => (1.0, unit),
    };
    if !matches!(rest, "" | "bit" | "bit/s" | "bps") {
        return Err(bad());
    }
    let bps = (decimal(num).ok_or_else(bad)? * mult).round();
    match bps {
        _ if bps < 1.0 => Err(LabError::ZeroRate(input.to_string())),
        _ if bps > MAX_RATE_BPS as f64 => Err(LabError::RateTooHigh(input.to_string())),
        _ => Ok(bps as u64),
    }
}

/// A duration with a unit (or a bare `0`), from 0 to `max_ns`.
fn parse_dur(input: &str, what: &'static str, max_ns: u64, max: &'static str) -> Result<u64> {
    let s = input.trim();
    if s.starts_with('-') {
        return Err(LabError::Negative { what, input: input.to_string() });
    }
    let ns = if s == "0" { 0 } else { parse_duration_ns(s, what)? };
    if ns > max_ns {
        return Err(LabError::TooLong { what, input: input.to_string(), max });
    }
    Ok(ns)
}

/// Parses a one-way delay such as `10ms`, `250us` or `0`, at most 10 s.
pub fn parse_delay_ns(input: &str) -> Result<u64> {
    parse_dur(input, "delay", MAX_DELAY_NS, "10s")
}

/// Parses a round-trip time such as `20ms`, at most 20 s; [`split_rtt`] makes it a delay.
pub fn parse_rtt_ns(input: &str) -> Result<u64> {
    parse_dur(input, "rtt", MAX_RTT_NS, "20s")
}

/// The one-way delay of each direction for a round-trip time.
pub fn split_rtt(rtt_ns: u64) -> u64 {
    rtt_ns / 2
}

/// Parses a loss rate into a fraction: `1%`, `0.5%`, `0.01`, `0`. A bare
/// number must be below 1 (`1` would be ambiguous between 1% and 100%).
pub fn parse_loss(input: &str) -> Result<f64> {
    let s = input.trim();
    if s.starts_with('-') {
        return Err(LabError::LossRange(input.to_string()));
    }
    let (num, percent) = s.strip_suffix('%').map_or((s, false), |n| (n.trim_end(), true));
    let v = decimal(num).ok_or_else(|| LabError::BadLoss(input.to_string()))?;
    match percent {
        true if v > 100.0 => Err(LabError::LossRange(input.to_string())),
        true => Ok(v / 100.0),
        false if v >= 1.0 => Err(LabError::LossAmbiguous(input.to_string())),
        false => Ok(v),
    }
}

/// Parses a mean loss burst length in packets (`4`, `2.5`), or `off`/`none` for random loss.
pub fn parse_burst(input: &str) -> Result<Option<f64>> {
    let s = input.trim();
    if matches!(s, "off" | "none") {
        return Ok(None);
    }
    decimal(s).filter(|b| *b >= 1.0).map(Some).ok_or_else(|| LabError::BadBurst(input.to_string()))
}

/// Parses a queue size: `1000pkt`, `256KB`, `256KiB`, `1MB` (bytes as dd), `1.5bdp`, `unlimited`.
/// A bare number is refused: packets or bytes would be a guess.
pub fn parse_queue(input: &str) -> Result<QueueSpec> {
    let s = input.trim();
    let bad = || LabError::BadQueue(input.to_string());
    if s.eq_ignore_ascii_case("unlimited") {
        return Ok(QueueSpec::Unlimited);
    }
    if let Some(n) = s.strip_suffix("bdp").or_else(|| s.strip_suffix("BDP")) {
        return decimal(n).filter(|x| *x > 0.0).map(QueueSpec::Bdp).ok_or_else(bad);
    }
    if let Some(n) = ["packets", "pkts", "pkt"].iter().find_map(|u| s.strip_suffix(u)) {
        return match n.parse::<u64>() {
            Ok(0) => Err(LabError::ZeroQueue),
            Ok(p) => Ok(QueueSpec::Packets(p)),
            Err(_) => Err(bad()),
        };
    }
    match parse_bytes(s, "queue") {
        Ok(b) if !s.chars().all(|c| c.is_ascii_digit()) => Ok(QueueSpec::Bytes(b)),
        Err(e @ UnitError::Overflow { .. }) => Err(e.into()),
        Ok(_) | Err(_) => Err(bad()),
    }
}

/// Parses an MTU in bytes, 576 to 65535.
pub fn parse_mtu(input: &str) -> Result<u32> {
    match input.trim().parse::<u32>() {
        Ok(m) if MTU_RANGE.contains(&m) => Ok(m),
        _ => Err(LabError::BadMtu(input.to_string())),
    }
}

impl LabSettings {
    /// The emulator's configuration for one direction.
    pub fn link_config(&self) -> Result<LinkConfig> {
        let jitter = match (self.jitter_ns, &self.jitter_dist) {
            (_, JitterDist::Table(q_ns)) => Jitter::Table { q_ns: q_ns.clone() },
            (0, _) => Jitter::None,
            (j_ns, JitterDist::Uniform) => Jitter::Uniform { j_ns },
            (sigma_ns, JitterDist::Normal) => Jitter::Normal { sigma_ns },
            (mean_ns, JitterDist::Exponential) => Jitter::Exponential { mean_ns },
        };
        Ok(LinkConfig {
            rate_bps: self.rate_bps,
            overhead_bytes: 0,
            queue: self.queue_limit()?,
            delay_ns: self.delay_ns,
            jitter,
            reorder: self.reorder,
            loss: self.loss_model()?,
        })
    }

    /// The queue in packets or bytes. A BDP multiple is of the round trip
    /// (rate x 2 x delay) and at least one MTU.
    pub fn queue_limit(&self) -> Result<QueueLimit> {
        if !MTU_RANGE.contains(&self.mtu) {
            return Err(LabError::BadMtu(self.mtu.to_string()));
        }
        let mtu = u64::from(self.mtu);
        match self.queue {
            QueueSpec::Unlimited => Ok(QueueLimit::Unlimited),
            QueueSpec::Packets(0) => Err(LabError::ZeroQueue),
            QueueSpec::Packets(n) => Ok(QueueLimit::Packets(n)),
            QueueSpec::Bytes(b) if b < mtu => Err(LabError::QueueBelowMtu { bytes: b, mtu: self.mtu }),
            QueueSpec::Bytes(b) => Ok(QueueLimit::Bytes(b)),
            QueueSpec::Bdp(x) => {
                let rate = self.rate_bps.ok_or(LabError::BdpWithoutRate(x))?;
                let bytes = (x * rate as f64 * 2.0 * self.delay_ns as f64 / 8e9).round() as u64;
                Ok(QueueLimit::Bytes(bytes.max(mtu)))
            }
        }
    }

    /// The loss model: random, or Gilbert-Elliott (lossless good state,
    /// all-lost bad state) whose bad stays last `loss_burst` packets on
    /// average and whose long-run rate is `loss`. No loss gives `Loss::None`.
    pub fn loss_model(&self) -> Result<Loss> {
        let p = self.loss;
        if !(0.0..=1.0).contains(&p) {
            return Err(LabError::LossRange(p.to_string()));
        }
        if p == 0.0 {
            return Ok(Loss::None);
        }
        let Some(burst) = self.loss_burst else { return Ok(Loss::Random { p }) };
        if burst.is_nan() || burst < 1.0 {
            return Err(LabError::BadBurst(burst.to_string()));
        }
        let p_bg = 1.0 / burst;
        // mean rate p_gb / (p_gb + p_bg) = p
        let p_gb = p * p_bg / (1.0 - p);
        if p_gb > 1.0 {
            return Err(LabError::BurstUnreachable { loss: p, burst });
        }
        Ok(Loss::GilbertElliott { p_gb, p_bg, loss_good: 0.0, loss_bad: 1.0 })
    }
}

/// Applies one `--set field=value` (fields: [`FIELDS`]). On an error the
/// settings are unchanged.
pub fn apply_set(settings: &mut LabSettings, spec: &str) -> Result<()> {
    let (field, value) = spec.split_once('=').ok_or_else(|| LabError::BadSet(spec.to_string()))?;
    let value = value.trim();
    let s = settings;
    match field.trim() {
        "rate" if matches!(value, "unlimited" | "none") => s.rate_bps = None,
        "rate" => s.rate_bps = Some(parse_rate_bps(value)?),
        "delay" => s.delay_ns = parse_delay_ns(value)?,
        "rtt" => s.delay_ns = split_rtt(parse_rtt_ns(value)?),
        "jitter" => {
            let (dur, dist) = value.split_once('/').unwrap_or((value, ""));
            let dist = match dist.trim() {
                "" => match &s.jitter_dist {
                    JitterDist::Table(_) => JitterDist::Normal,
                    d => d.clone(),
                },
                "uniform" => JitterDist::Uniform,
                "normal" => JitterDist::Normal,
                "exponential" | "exp" => JitterDist::Exponential,
                _ => return Err(LabError::BadJitter(value.to_string())),
            };
            s.jitter_ns = parse_dur(dur, "jitter", MAX_DELAY_NS, "10s")?;
            s.jitter_dist = dist;
        }
        "loss" => s.loss = parse_loss(value)?,
        "burst" => s.loss_burst = parse_burst(value)?,
        "queue" => s.queue = parse_queue(value)?,
        "mtu" => s.mtu = parse_mtu(value)?,
        "reorder" if matches!(value, "on" | "yes" | "true") => s.reorder = true,
        "reorder" if matches!(value, "off" | "no" | "false") => s.reorder = false,
        "reorder" => return Err(LabError::BadReorder(value.to_string())),
        other => return Err(LabError::UnknownField(other.to_string())),
    }
    Ok(())
}

/// The most parallel paths a lab's bottleneck may have.
pub const MAX_PATHS: usize = 16;

/// The number of paths in `paths=N` (1 to [`MAX_PATHS`]).
pub fn parse_paths(input: &str) -> Result<usize> {
    match input.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PATHS).contains(&n) => Ok(n),
        _ => Err(LabError::BadPaths(input.to_string())),
    }
}

/// One path's own settings, `K:field=value[,field=value...]` (K from 1):
/// the path's index from 0 and its settings, each checked.
pub fn parse_path_set(spec: &str) -> Result<(usize, Vec<String>)> {
    let bad = || LabError::BadPathSet(spec.to_string());
    let (k, fields) = spec.split_once(':').ok_or_else(bad)?;
    let k: usize = k.trim().parse().map_err(|_| bad())?;
    if !(1..=MAX_PATHS).contains(&k) {
        return Err(bad());
    }
    let sets: Vec<String> = fields.split(',').map(str::trim).filter(|f| !f.is_empty()).map(String::from).collect();
    if sets.is_empty() {
        return Err(bad());
    }
    let mut probe = LabSettings::default();
    for f in &sets {
        if f.starts_with("mtu=") {
            return Err(LabError::MtuPerPath);
        }
        apply_set(&mut probe, f)?;
    }
    Ok((k - 1, sets))
}

/// The bottleneck of one direction as `n` parallel paths (a link aggregate
/// of `n` members, or an ECMP group): each path has the link's settings with
/// its rate shared equally (a 1 Gbit/s link as 4 paths of 250 Mbit/s, each
/// with a queue of its own, a BDP queue of its own rate), then its own
/// settings (`own`: a path's index from 0 and its fields) on top. One path
/// is the link itself.
pub fn split_paths(link: &LabSettings, n: usize, own: &[(usize, Vec<String>)]) -> Result<Vec<LabSettings>> {
    if !(1..=MAX_PATHS).contains(&n) {
        return Err(LabError::BadPaths(n.to_string()));
    }
    let mut paths = vec![LabSettings { rate_bps: link.rate_bps.map(|r| (r / n as u64).max(1)), ..link.clone() }; n];
    for (k, sets) in own {
        let path = paths.get_mut(*k).ok_or(LabError::NoSuchPath { k: k + 1, n })?;
        for f in sets {
            apply_set(path, f)?;
        }
    }
    Ok(paths)
}

/// A named network from the source documents.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    pub rate_bps: Option<u64>,
    pub rtt_ns: u64,
    pub queue: QueueSpec,
    pub loss: f64,
    pub mtu: u32,
    /// The document and the network in it.
    pub source: &'static str,
    /// Every value the document does not give, in words.
    pub assumptions: &'static str,
}

const MS: u64 = 1_000_000;
const MBIT: u64 = 1_000_000;
const GBIT: u64 = 1_000_000_000;

/// A profile's numbers; `source` and `assume` fill in its words.
fn row(name: &'static str, rate_bps: Option<u64>, rtt_ns: u64, queue: QueueSpec, loss: f64) -> Profile {
    Profile { name, rate_bps, rtt_ns, queue, loss, mtu: 1500, source: "", assumptions: "" }
}

impl Profile {
    /// The profile as settings for each direction (half the RTT each way).
    pub fn settings(&self) -> LabSettings {
        LabSettings {
            rate_bps: self.rate_bps,
            delay_ns: split_rtt(self.rtt_ns),
            jitter_ns: 0,
            jitter_dist: JitterDist::Uniform,
            reorder: false,
            loss: self.loss,
            loss_burst: None,
            queue: self.queue,
            mtu: self.mtu,
        }
    }

    fn source(self, source: &'static str) -> Profile {
        Profile { source, ..self }
    }
    fn assume(self, assumptions: &'static str) -> Profile {
        Profile { assumptions, ..self }
    }
}

/// The lab profiles of docs/lab.md, in its order; MTU 1500 (Ethernet) for all, assumed where not given.
pub fn profiles() -> Vec<Profile> {
    use QueueSpec::{Bdp, Bytes, Packets, Unlimited};
    vec![
        row("loopback", None, 0, Unlimited, 0.0)
            .source("000: Dodonov et al., loop-back baseline (in memory, no physical transmission)")
            .assume("no link: a private namespace, lo only; MTU 1500 is nominal (lo's own is 65536)"),
        row("crossover-fe", Some(100 * MBIT), MS / 10, Packets(100), 0.0)
            .source("000: Dodonov et al., Fast-Ethernet cross-over cable, no switch")
            .assume("not in the paper: 0.1 ms RTT (a cable, two NICs), a 100-packet queue, no loss; MTU 1500"),
        row("lan-gige", Some(GBIT), MS / 5, Packets(1000), 0.0)
            .source("000: Dodonov et al., switched Gigabit Ethernet LAN at USP")
            .assume("not in the paper: 0.2 ms RTT (one switch), a 1000-packet queue (txqueuelen), no loss; MTU 1500"),
        row("man", Some(100 * MBIT), 2 * MS, Bdp(1.0), 0.001)
            .source("000: Dodonov et al., MAN USP-UFSCar: 3 km of 100 Mbit fiber, 8 routers")
            .assume("not in the paper: 2 ms RTT (for 3 km and 8 routers), a 1 BDP queue, 0.1% loss; MTU 1500"),
        row("wan", Some(20 * MBIT), 180 * MS, Bdp(1.0), 0.005)
            .source("000: Dodonov et al., WAN Brazil (ICMC) - Canada (St. Francis Xavier)")
            .assume("not in the paper: 20 Mbit/s, 180 ms RTT, a 1 BDP queue, 0.5% loss (UDP lost some); MTU 1500"),
        row("baltic", Some(GBIT), 20 * MS, Bdp(1.0), 0.0)
            .source("003: BalticGrid-II TCP performance tests, 1 Gbit/s links, 8-35 ms RTT between sites")
            .assume("20 ms RTT picked within 8-35 ms; a 1 BDP queue and no loss; MTU 1500"),
        row("cern-icepp", Some(GBIT), 270 * MS, Bdp(1.0), 0.00001)
            .source("001: Tanaka et al., CERN - ICEPP Tokyo, 1 Gbit/s, RTT about 270 ms, not dedicated")
            .assume("0.001% random loss stands for the other traffic on the shared path; a 1 BDP queue; MTU 1500"),
        row("lambda", Some(622 * MBIT), 100 * MS, Bytes(128_000), 0.0)
            .source("004: DataTAG WP3, Amsterdam - Chicago over a lambda (STS-12c), RTT about 100 ms")
            .assume("'little network memory' as 128 KB (128 000 B, as dd); no loss; 622M is the line rate; MTU 1500"),
        row("internet", Some(GBIT), 100 * MS, Bdp(2.0), 0.0)
            .source("004: DataTAG WP3, Amsterdam - Chicago over SURFnet5 (regular Internet), RTT about 100 ms")
            .assume("1 Gbit/s (no rate given); 'massive buffer memory' taken as a 2 BDP queue; no loss; MTU 1500"),
    ]
}

/// The profile of that name.
pub fn profile(name: &str) -> Result<Profile> {
    let name = name.trim();
    profiles().into_iter().find(|p| p.name == name).ok_or_else(|| LabError::UnknownProfile(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_text<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.expect_err("expected an error").to_string()
    }

    #[test]
    fn rates_are_decimal_bits_per_second() {
        let good = [("100M", 100 * MBIT), ("1G", GBIT), ("622M", 622 * MBIT), ("1.5G", 1500 * MBIT), ("64K", 64_000)];
        let more = [("20Mbit", 20 * MBIT), ("622Mbit/s", 622 * MBIT), ("10kbps", 10_000), ("100000", 100_000)];
        for (s, v) in good.into_iter().chain(more).chain([("100G", MAX_RATE_BPS), (" 0.1G ", 100 * MBIT)]) {
            assert_eq!(parse_rate_bps(s), Ok(v), "{s}");
        }
        for s in ["", "M", "fast", "100m", "100MB", "100Mb", "1e9", "-1M", "1.2.3M", "10 M", "infG"] {
            let e = err_text(parse_rate_bps(s));
            assert!(e.contains("rate") && e.contains("20Mbit") && e.contains("1.5G"), "{s}: {e}");
        }
        for s in ["0", "0M", "0.0001"] {
            assert!(err_text(parse_rate_bps(s)).contains("a rate of zero"), "{s}");
        }
        assert!(err_text(parse_rate_bps("100.1G")).contains("at most 100G"));
    }

    #[test]
    fn delays_need_a_unit_and_stay_within_10s() {
        for (s, v) in [("10ms", 10 * MS), ("250us", 250_000), ("0", 0), ("0ms", 0), ("10s", MAX_DELAY_NS)] {
            assert_eq!(parse_delay_ns(s), Ok(v), "{s}");
        }
        for (s, why) in [("-5ms", "is negative"), ("10.5s", "at most 10s"), ("10", "not a valid duration")] {
            let e = err_text(parse_delay_ns(s));
            assert!(e.contains("delay") && e.contains(why) && e.contains("10ms"), "{e}");
        }
        assert_eq!(parse_rtt_ns("20s"), Ok(MAX_RTT_NS));
        assert!(err_text(parse_rtt_ns("21s")).contains("rtt"));
        assert_eq!((split_rtt(20 * MS), split_rtt(0)), (10 * MS, 0));
    }

    #[test]
    fn loss_is_a_percentage_or_a_fraction() {
        for (s, v) in [("1%", 0.01), ("0.5%", 0.005), ("0.01", 0.01), ("0", 0.0), ("100%", 1.0), ("0.001%", 0.00001)] {
            assert_eq!(parse_loss(s), Ok(v), "{s}");
        }
        for s in ["101%", "-1%", "-0.1"] {
            let e = err_text(parse_loss(s));
            assert!(e.contains("outside 0% to 100%") && e.contains("0.5%"), "{s}: {e}");
        }
        for s in ["", "%", "abc", "1e-3", "nan", "inf", ".%"] {
            let e = err_text(parse_loss(s));
            assert!(e.contains("loss") && e.contains("1%") && e.contains("0.01"), "{s}: {e}");
        }
        assert!(err_text(parse_loss("1")).contains("write 1% for one percent"));
        assert_eq!((parse_burst("4"), parse_burst("off")), (Ok(Some(4.0)), Ok(None)));
        for s in ["0.5", "0", "x", "inf", "-2"] {
            assert!(err_text(parse_burst(s)).contains("at least 1"), "{s}");
        }
    }

    #[test]
    fn queues_in_packets_bytes_or_bdp() {
        use QueueSpec::{Bdp, Bytes, Packets, Unlimited};
        let good = [("1000pkt", Packets(1000)), ("100packets", Packets(100)), ("256KB", Bytes(256_000))];
        let more = [("256KiB", Bytes(262_144)), ("1MB", Bytes(1_000_000)), ("1.5bdp", Bdp(1.5))];
        for (s, v) in good.into_iter().chain(more).chain([("unlimited", Unlimited)]) {
            assert_eq!(parse_queue(s), Ok(v), "{s}");
        }
        for s in ["", "1000", "1.5pkt", "pkt", "0bdp", "-1bdp", "xbdp", "bdp", "12q", "1.5KB"] {
            let e = err_text(parse_queue(s));
            assert!(e.contains("queue") && e.contains("1000pkt") && e.contains("1.5bdp"), "{s}: {e}");
        }
        assert!(err_text(parse_queue("0pkt")).contains("at least 1pkt"));
        assert!(matches!(parse_queue("99999999999G"), Err(LabError::Unit(UnitError::Overflow { .. }))));
    }

    #[test]
    fn mtus_from_576_to_65535() {
        assert_eq!((parse_mtu("1500"), parse_mtu("576"), parse_mtu("65535")), (Ok(1500), Ok(576), Ok(65_535)));
        for s in ["575", "65536", "1500B", "", "-1"] {
            assert!(err_text(parse_mtu(s)).contains("from 576 to 65535"), "{s}");
        }
    }

    fn gige(rtt_ns: u64, queue: QueueSpec) -> LabSettings {
        LabSettings { rate_bps: Some(GBIT), delay_ns: split_rtt(rtt_ns), queue, ..LabSettings::default() }
    }

    fn profile_link(name: &str) -> Result<LinkConfig> {
        profile(name).and_then(|p| p.settings().link_config())
    }

    #[test]
    fn bdp_is_of_the_round_trip_and_at_least_one_mtu() {
        assert_eq!(gige(20 * MS, QueueSpec::Bdp(1.0)).queue_limit(), Ok(QueueLimit::Bytes(2_500_000)));
        assert_eq!(gige(20 * MS, QueueSpec::Bdp(1.5)).queue_limit(), Ok(QueueLimit::Bytes(3_750_000)));
        assert_eq!(gige(0, QueueSpec::Bdp(1.0)).queue_limit(), Ok(QueueLimit::Bytes(1500)));
        assert_eq!(profile_link("lambda").map(|c| c.queue), Ok(QueueLimit::Bytes(128_000)));
        assert_eq!(profile_link("internet").map(|c| c.queue), Ok(QueueLimit::Bytes(25_000_000)));
        let e = err_text(gige(MS, QueueSpec::Bytes(1000)).queue_limit());
        assert!(e.contains("queue of 1000 bytes is smaller than one MTU (1500)"), "{e}");
        assert_eq!(gige(MS, QueueSpec::Packets(0)).queue_limit(), Err(LabError::ZeroQueue));
        let no_rate = LabSettings { queue: QueueSpec::Bdp(1.0), ..LabSettings::default() };
        assert!(err_text(no_rate.queue_limit()).contains("needs a rate"));
    }

    #[test]
    fn gilbert_elliott_keeps_the_loss_rate_asked_for() {
        for loss in [0.00001, 0.001, 0.005, 0.01, 0.2, 0.5] {
            for burst in [1.0, 2.5, 4.0, 10.0] {
                let m = LabSettings { loss, loss_burst: Some(burst), ..LabSettings::default() }.loss_model();
                let Ok(Loss::GilbertElliott { p_bg, loss_good, loss_bad, .. }) = m else { panic!("{m:?}") };
                assert_eq!((p_bg, loss_good, loss_bad), (1.0 / burst, 0.0, 1.0));
                let rate = m.map(|l| l.mean_rate()).unwrap_or(f64::NAN);
                assert!((rate - loss).abs() < 1e-12, "loss {loss} burst {burst}: mean rate {rate}");
            }
        }
        let d = LabSettings::default;
        assert_eq!(LabSettings { loss: 0.01, ..d() }.loss_model(), Ok(Loss::Random { p: 0.01 }));
        assert_eq!(LabSettings { loss_burst: Some(4.0), ..d() }.loss_model(), Ok(Loss::None));
        let too_much = LabSettings { loss: 0.9, loss_burst: Some(1.0), ..d() };
        assert!(err_text(too_much.loss_model()).contains("use longer bursts or less loss"));
        assert!(LabSettings { loss: 1.5, ..d() }.link_config().is_err());
    }

    #[test]
    fn every_profile_gives_a_valid_link() {
        let all = profiles();
        assert_eq!(all.iter().map(|p| p.name).collect::<Vec<_>>().join(", "), PROFILE_NAMES);
        for p in &all {
            let c = p.settings().link_config();
            assert!(c.is_ok() && p.mtu == 1500 && !p.source.is_empty() && !p.assumptions.is_empty(), "{p:?}: {c:?}");
            assert_eq!(c.map(|c| (c.rate_bps, c.delay_ns)), Ok((p.rate_bps, p.rtt_ns / 2)));
        }
        assert_eq!(profile_link("loopback"), Ok(LinkConfig::default()));
        assert_eq!(profile_link("baltic").map(|c| c.queue), Ok(QueueLimit::Bytes(2_500_000)));
        assert_eq!(profile_link("cern-icepp").map(|c| c.loss), Ok(Loss::Random { p: 0.00001 }));
        let e = err_text(profile("gigabit"));
        assert!(e.contains("gigabit") && e.contains(PROFILE_NAMES), "{e}");
    }

    #[test]
    fn paths_share_the_rate_and_take_their_own_settings() {
        let link = profile("cern-icepp").map(|p| p.settings()).unwrap_or_default();
        let own = vec![
            parse_path_set("2:loss=1%").unwrap_or_default(),
            parse_path_set("4: rate=100M , rtt=300ms").unwrap_or_default(),
        ];
        assert_eq!(own[0], (1, vec!["loss=1%".to_string()]));
        let p = split_paths(&link, 4, &own).unwrap_or_default();
        assert_eq!(
            p.iter().map(|s| s.rate_bps).collect::<Vec<_>>(),
            vec![Some(250 * MBIT), Some(250 * MBIT), Some(250 * MBIT), Some(100 * MBIT)]
        );
        assert_eq!(p.iter().map(|s| s.loss).collect::<Vec<_>>(), vec![0.00001, 0.01, 0.00001, 0.00001]);
        assert_eq!((p[0].delay_ns, p[3].delay_ns), (135 * MS, 150 * MS));
        // a BDP queue is of the path's own rate: a quarter of the link's
        let q = |s: &LabSettings| s.queue_limit().ok();
        assert_eq!(q(&p[0]), Some(QueueLimit::Bytes(8_437_500)));
        assert_eq!(q(&link), Some(QueueLimit::Bytes(33_750_000)));
        assert_eq!(split_paths(&link, 1, &[]), Ok(vec![link.clone()]));
        assert_eq!(parse_paths("4"), Ok(4));
        for bad in ["0", "17", "x", "-1", ""] {
            assert!(err_text(parse_paths(bad)).contains("from 1 to 16"), "{bad}");
        }
        for bad in ["loss=1%", "0:loss=1%", "17:loss=1%", "x:loss=1%", "2:", "2:speed=1G"] {
            let e = err_text(parse_path_set(bad));
            assert!(e.contains("2:loss=1%") || e.contains(FIELDS), "{bad}: {e}");
        }
        assert!(err_text(parse_path_set("2:mtu=9000")).contains("not per path"));
        let e = err_text(split_paths(&link, 2, &[(2, vec!["loss=1%".into()])]));
        assert!(e.contains("path 3 does not exist") && e.contains("2 paths"), "{e}");
    }

    #[test]
    fn set_changes_one_field() {
        let mut s = profile("baltic").map(|p| p.settings()).unwrap_or_default();
        for spec in ["rate=622M", "rtt=100ms", "jitter=2ms/normal", "loss=1%", "burst=4", "queue=64pkt", "mtu=9000"] {
            assert_eq!(apply_set(&mut s, spec), Ok(()), "{spec}");
        }
        assert_eq!(apply_set(&mut s, "reorder=on"), Ok(()));
        let want = LabSettings {
            rate_bps: Some(622 * MBIT),
            delay_ns: 50 * MS,
            jitter_ns: 2 * MS,
            jitter_dist: JitterDist::Normal,
            reorder: true,
            loss: 0.01,
            loss_burst: Some(4.0),
            queue: QueueSpec::Packets(64),
            mtu: 9000,
        };
        assert_eq!(s, want);
        assert_eq!(s.link_config().map(|c| c.jitter), Ok(Jitter::Normal { sigma_ns: 2 * MS }));
        for spec in ["delay=7ms", "rate=unlimited", "burst=off", "reorder=off", "jitter=1ms"] {
            assert_eq!(apply_set(&mut s, spec), Ok(()), "{spec}");
        }
        assert_eq!((s.delay_ns, s.rate_bps, s.loss_burst, s.reorder), (7 * MS, None, None, false));
        assert_eq!((s.jitter_ns, &s.jitter_dist), (MS, &JitterDist::Normal));
        let exp = apply_set(&mut s, "jitter=2ms/exponential").and_then(|_| s.link_config()).map(|c| c.jitter);
        assert_eq!(exp, Ok(Jitter::Exponential { mean_ns: 2 * MS }));
        // a table (from a profile file) gives way to a plain duration as a normal
        s.jitter_dist = JitterDist::Table(vec![0, MS as i64]);
        assert_eq!(s.link_config().map(|c| c.jitter), Ok(Jitter::Table { q_ns: vec![0, MS as i64] }));
        assert_eq!(apply_set(&mut s, "jitter=1ms"), Ok(()));
        assert_eq!(s.jitter_dist, JitterDist::Normal);
        let uniform = apply_set(&mut s, "jitter=1ms/uniform").and_then(|_| s.link_config()).map(|c| c.jitter);
        assert_eq!(uniform, Ok(Jitter::Uniform { j_ns: MS }));
        let before = s.clone();
        let e = err_text(apply_set(&mut s, "bandwidth=1G"));
        assert!(e.contains("bandwidth") && e.contains(FIELDS), "{e}");
        assert!(err_text(apply_set(&mut s, "rate")).contains("field=value"));
        assert!(err_text(apply_set(&mut s, "reorder=maybe")).contains("on or off"));
        assert!(err_text(apply_set(&mut s, "jitter=1ms/pareto")).contains("2ms/normal"));
        assert!(err_text(apply_set(&mut s, "loss=5")).contains("ambiguous"));
        assert_eq!(s, before);
    }
}
