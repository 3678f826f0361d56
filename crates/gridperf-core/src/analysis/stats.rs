//! Statistics over raw samples: exact quantiles, mean and spread, and the
//! warnings that tell a user a figure should not be trusted as it stands.

use serde::{Deserialize, Serialize};

/// The distribution of one point's samples, all in nanoseconds.
///
/// Quantiles are exact, computed from every kept sample by linear
/// interpolation between the two closest ranks (Hyndman and Fan's type 7,
/// the default of R and NumPy): for a sorted sample x[0..n] and a probability
/// p, h = (n - 1) p and q = x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]).
/// So the median of an even count is the mean of the two middle samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples counted (after warm-up; lost UDP messages are not samples).
    pub count: u64,
    pub min_ns: f64,
    pub q1_ns: f64,
    pub median_ns: f64,
    pub q3_ns: f64,
    pub max_ns: f64,
    pub mean_ns: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for one sample.
    pub stddev_ns: f64,
    pub p99_ns: f64,
}

/// The quantile `p` (0..=1) of sorted samples, type 7. `None` when empty.
pub fn quantile_sorted(sorted: &[u64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let p = p.clamp(0.0, 1.0);
    let h = (n - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = h - lo as f64;
    Some(sorted[lo] as f64 + frac * (sorted[hi] as f64 - sorted[lo] as f64))
}

/// The median of values: the middle one, or the mean of the two middle ones
/// (type 7, as every quantile here). `None` for none. The one median of the
/// code base: NaNs sort last (`f64::total_cmp`), so a caller that may have
/// them filters them first.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The median of samples in ns; `None` for none.
pub fn median_u64(samples: &[u64]) -> Option<f64> {
    (!samples.is_empty()).then(|| median_in_place(&mut samples.to_vec()))
}

/// The median of a non-empty buffer, reordering it (a selection, not a
/// sort: the bootstrap takes thousands). Panics on an empty buffer.
pub fn median_in_place(v: &mut [u64]) -> f64 {
    let n = v.len();
    let (_, &mut upper, _) = v.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        upper as f64
    } else {
        let lower = *v[..n / 2].iter().max().unwrap_or(&upper);
        (lower as f64 + upper as f64) / 2.0
    }
}

impl Summary {
    /// Summarises samples (in nanoseconds). `None` when there are none.
    pub fn from_samples(samples: &[u64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len() as f64;
        let mean = sorted.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = if sorted.len() > 1 {
            sorted.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let q = |p| quantile_sorted(&sorted, p).unwrap_or(f64::NAN);
        Some(Summary {
            count: sorted.len() as u64,
            min_ns: sorted[0] as f64,
            q1_ns: q(0.25),
            median_ns: q(0.5),
            q3_ns: q(0.75),
            max_ns: sorted[sorted.len() - 1] as f64,
            mean_ns: mean,
            stddev_ns: var.sqrt(),
            p99_ns: q(0.99),
        })
    }

    /// Interquartile range relative to the median.
    pub fn relative_iqr(&self) -> f64 {
        if self.median_ns > 0.0 {
            (self.q3_ns - self.q1_ns) / self.median_ns
        } else {
            0.0
        }
    }
}

/// Why a figure should be read with care, each with the advice that goes with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Warning {
    /// The interquartile range is wide compared to the median.
    Noisy { point: String, relative_iqr: f64 },
    /// A few samples are far slower than the median (long tail).
    LongTail { point: String, p99_over_median: f64 },
    /// Ends not pinned: placement varies from run to run.
    Unpinned,
    /// Too few samples for the quantiles to mean much.
    FewSamples { point: String, count: u64 },
    /// Messages were lost (UDP).
    Lost { point: String, lost: u64, sent: u64 },
    /// The lab's emulator fell behind or dropped what its model did not: the run is invalid.
    LabInvalid {
        why: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<LabCause>,
    },
    /// The point's median does not describe it (two modes, a drift), also
    /// after measuring it again; conclusions leave it out.
    Irregular { point: String, why: String, retries: u32 },
    /// The machine's TCP memory was past the kernel's pressure mark
    /// (net.ipv4.tcp_mem), where Linux clamps every TCP window to a few
    /// segments: the rate then is the machine's memory, not the network's.
    TcpMemoryPressure { used_bytes: u64, pressure_bytes: u64, orphans: u64 },
}

/// The machine's TCP memory from /proc/net/sockstat ("TCP: inuse N orphan
/// N tw N alloc N mem PAGES"), /proc/sys/net/ipv4/tcp_mem (three page
/// counts: low, pressure, high) and the kernel's own flag (the "press"
/// column of /proc/net/protocols' TCP line, "yes" or "no"): a
/// [`Warning::TcpMemoryPressure`] when TCP is under pressure or at its mark.
pub fn tcp_memory_pressure(sockstat: &str, tcp_mem: &str, protocols: &str, page: u64) -> Option<Warning> {
    let tcp = sockstat.lines().find_map(|l| l.strip_prefix("TCP:"))?;
    let field = |name: &str| {
        let words: Vec<&str> = tcp.split_whitespace().collect();
        words.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse::<u64>().ok())
    };
    let (used, orphans) = (field("mem")?, field("orphan").unwrap_or(0));
    let pressure = tcp_mem.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    // protocol size sockets memory press ...: the fifth column
    let flagged = protocols
        .lines()
        .find(|l| l.split_whitespace().next() == Some("TCP"))
        .and_then(|l| l.split_whitespace().nth(4))
        == Some("yes");
    (flagged || used >= pressure).then_some(Warning::TcpMemoryPressure {
        used_bytes: used * page,
        pressure_bytes: pressure * page,
        orphans,
    })
}

/// What made a lab run INVALID, for what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabCause {
    /// Outside gridperf: the hypervisor paused the machine or took the
    /// emulator's CPU, or held the emulator's work up faulting in memory
    /// the VM had handed back to it, or the lab was paused on purpose
    /// (`lab pause`).
    Outside,
    /// Other programs of this machine held the CPUs.
    OtherTasks,
    /// The emulator itself: it fell behind without being held, or a queue
    /// it reads overflowed.
    Emulator,
}

/// What to do about an INVALID lab run, from what held its emulator up
/// (the emulator's words, see the binary's `HeldBy::words`).
pub fn lab_invalid_advice(cause: Option<LabCause>) -> &'static str {
    match cause {
        Some(LabCause::Outside) => "The cause lay outside gridperf: run it again (a survey or sweep measures such points again by itself).",
        Some(LabCause::OtherTasks) => {
            "Other programs held the CPUs: close them (or `echo 19 > /proc/self/autogroup` in their shell), then run it again; see gridperf lab status."
        }
        Some(LabCause::Emulator) | None => "Rerun with less load, or see gridperf lab status.",
    }
}

impl Warning {
    /// The warning, in words (what to do about it: [`advice`], which
    /// depends on the run).
    pub fn message(&self) -> String {
        match self {
            Warning::Noisy { point, relative_iqr } => {
                format!("{point}: the interquartile range is {:.0}% of the median; the point is noisy", relative_iqr * 100.0)
            }
            Warning::LongTail { point, p99_over_median } => format!(
                "{point}: p99 is {p99_over_median:.1}x the median; something (scheduling, interrupts, retransmission) \
                 stalls a few exchanges (the max and the raw samples, --samples, show them)"
            ),
            Warning::Unpinned => "the ends were not pinned to CPUs: on small machines placement alone changes the RTT \
                several times over (both ends on one CPU vs two). Use --cpu 0 or --cpu 0,1 for repeatable figures."
                .to_string(),
            Warning::FewSamples { point, count } => format!("{point}: only {count} samples; quantiles need more"),
            Warning::Lost { point, lost, sent } => format!(
                "{point}: {lost} of {sent} messages lost; the statistics cover only the ones that came back"
            ),
            Warning::Irregular { point, why, retries } => format!(
                "{point}: {why}{}; a median does not describe it, and conclusions leave it out",
                if *retries > 0 { format!(" (measured {} times)", retries + 1) } else { String::new() }
            ),
            Warning::TcpMemoryPressure { used_bytes, pressure_bytes, orphans } => format!(
                "TCP was under memory pressure: the machine's TCP sockets held {} MB, past the kernel's pressure \
                 mark of {} MB (net.ipv4.tcp_mem){}; under pressure Linux clamps every TCP window to a few \
                 segments, so the rate measured is the machine's memory, not the network's. {}",
                used_bytes >> 20,
                pressure_bytes >> 20,
                if *orphans > 0 {
                    format!(", {orphans} of them orphans (their programs ended with data unsent)")
                } else {
                    String::new()
                },
                if *orphans > 0 {
                    "Orphans time out within minutes: run it again then."
                } else {
                    "Use smaller buffers (-w), or raise net.ipv4.tcp_mem."
                }
            ),
            Warning::LabInvalid { why, cause } => format!(
                "INVALID: the lab's emulator did not keep up during this run ({why}); its figures are not the emulated network's. {}",
                lab_invalid_advice(*cause)
            ),
        }
    }

    /// The kind, for grouping: None for the run-wide ones (said each once).
    fn kind(&self) -> Option<&'static str> {
        match self {
            Warning::Noisy { .. } => Some("noisy (their interquartile range above half the median)"),
            Warning::LongTail { .. } => Some("with a long tail (p99 above 10x the median)"),
            Warning::FewSamples { .. } => Some("with fewer than 20 samples"),
            Warning::Lost { .. } => Some("that lost messages (their statistics cover what came back)"),
            Warning::Irregular { .. } => {
                Some("that one median does not describe (two modes, a drift): left out of conclusions")
            }
            Warning::Unpinned | Warning::LabInvalid { .. } | Warning::TcpMemoryPressure { .. } => None,
        }
    }
}

/// What to do about a run's noisy or irregular points: pin the ends when
/// they were not; when they were, what else there is.
pub fn advice(warnings: &[Warning]) -> Option<String> {
    let noisy = warnings.iter().any(|w| matches!(w, Warning::Noisy { .. } | Warning::Irregular { .. }));
    let few = warnings.iter().any(|w| matches!(w, Warning::FewSamples { .. }));
    let unpinned = warnings.contains(&Warning::Unpinned);
    let mut out = Vec::new();
    if noisy {
        out.push(if unpinned {
            "pin both ends (--cpu 0), close other programs, or measure longer (-t 2s)"
        } else {
            "the ends were pinned: close other programs (a busy machine moves the figures), or measure longer (-t 2s)"
        });
    }
    if few {
        out.push("raise --iterations or -t for more samples");
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// A run's warnings for a terminal: each kind of point warning that came
/// up more than 3 times said once, with its count out of `points` and the
/// first of them (`verbose`: every one); the run-wide ones once each; then
/// what to do. A first run on a busy laptop printed 50 lines; it prints a few.
pub fn summarize(warnings: &[Warning], points: usize, verbose: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut kinds: Vec<&'static str> = Vec::new();
    for w in warnings {
        match w.kind() {
            None => out.push(w.message()),
            Some(k) if !kinds.contains(&k) => kinds.push(k),
            Some(_) => {}
        }
    }
    let mut summarized = false;
    for k in kinds {
        let these: Vec<&Warning> = warnings.iter().filter(|w| w.kind() == Some(k)).collect();
        if verbose || these.len() <= 3 {
            out.extend(these.iter().map(|w| w.message()));
        } else {
            summarized = true;
            out.push(format!("{} of {points} points {k}, the first: {}", these.len(), these[0].message()));
        }
    }
    if let Some(a) = advice(warnings) {
        out.push(format!("what to do: {a}"));
    }
    if summarized {
        out.push("--verbose lists every warning".into());
    }
    out
}

/// Thresholds for [`check`]: a relative IQR above 0.5, a p99 more than ten
/// times the median, or fewer than 20 samples.
pub fn check(point: &str, s: &Summary) -> Vec<Warning> {
    let mut w = Vec::new();
    if s.count < 20 {
        w.push(Warning::FewSamples { point: point.into(), count: s.count });
    }
    if s.relative_iqr() > 0.5 {
        w.push(Warning::Noisy { point: point.into(), relative_iqr: s.relative_iqr() });
    }
    if s.median_ns > 0.0 && s.p99_ns / s.median_ns > 10.0 {
        w.push(Warning::LongTail { point: point.into(), p99_over_median: s.p99_ns / s.median_ns });
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_memory_pressure_is_read_from_the_kernel() {
        // this machine after two 10 Gbit/s calibrations: orphans held 1.2 GB
        let stat = "sockets: used 7\nTCP: inuse 1 orphan 10 tw 0 alloc 11 mem 308517\nUDP: inuse 0 mem 235\n";
        let protocols = "protocol  size sockets  memory press maxhdr  slab module     cl co di ac io in de\n\
                         UDP       1344      0     235   NI       0   yes  kernel      y  y  y  n  y  y  y\n\
                         TCP       2304      1  308517   no     192   yes  kernel      y  y  y  y  y  y  y\n";
        // past the low mark, under the pressure mark, not flagged: nothing
        assert_eq!(tcp_memory_pressure(stat, "287898\t383866\t575796\n", protocols, 4096), None);
        // past the pressure mark
        let w = tcp_memory_pressure(stat, "200000 300000 400000", protocols, 4096);
        assert_eq!(
            w,
            Some(Warning::TcpMemoryPressure { used_bytes: 308517 * 4096, pressure_bytes: 300000 * 4096, orphans: 10 })
        );
        let text = w.map(|w| w.message()).unwrap_or_default();
        assert!(text.contains("held 1205 MB, past the kernel's pressure mark of 1171 MB"), "{text}");
        assert!(text.contains("10 of them orphans"), "{text}");
        // flagged by the kernel (it leaves pressure only below the low mark)
        let flagged = protocols.replace("308517   no ", "308517   yes");
        assert!(tcp_memory_pressure(stat, "287898 383866 575796", &flagged, 4096).is_some());
        // unreadable: nothing said
        assert_eq!(tcp_memory_pressure("", "1 2 3", protocols, 4096), None);
    }

    #[test]
    fn exact_quantiles_type7() {
        // 1..=10: type 7 gives q1 = 3.25, median = 5.5, q3 = 7.75, p99 = 9.91
        let s = Summary::from_samples(&[10, 2, 3, 4, 5, 6, 7, 8, 9, 1]).expect("some");
        assert_eq!(s.count, 10);
        assert_eq!(s.min_ns, 1.0);
        assert_eq!(s.max_ns, 10.0);
        assert_eq!(s.q1_ns, 3.25);
        assert_eq!(s.median_ns, 5.5);
        assert_eq!(s.q3_ns, 7.75);
        assert!((s.p99_ns - 9.91).abs() < 1e-9);
        assert_eq!(s.mean_ns, 5.5);
        // sample stddev of 1..=10 = sqrt(82.5/9)
        assert!((s.stddev_ns - (82.5f64 / 9.0).sqrt()).abs() < 1e-9);
    }

    #[test]
    fn odd_count_median_is_the_middle_sample() {
        let s = Summary::from_samples(&[5, 1, 9]).expect("some");
        assert_eq!(s.median_ns, 5.0);
        assert_eq!(s.q1_ns, 3.0);
        assert_eq!(s.q3_ns, 7.0);
    }

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // the same figure as the summary's median of the same samples
        let s = Summary::from_samples(&[10, 2, 3, 4, 5, 6, 7, 8, 9, 1]).expect("some");
        assert_eq!(median(&[10.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.0]), Some(s.median_ns));
    }

    #[test]
    fn one_and_none() {
        assert!(Summary::from_samples(&[]).is_none());
        let s = Summary::from_samples(&[42]).expect("one");
        assert_eq!((s.min_ns, s.median_ns, s.max_ns, s.stddev_ns), (42.0, 42.0, 42.0, 0.0));
    }

    #[test]
    fn warnings_fire_on_their_thresholds() {
        let steady: Vec<u64> = (0..100).map(|i| 1000 + i).collect();
        assert!(check("tcp 64 B", &Summary::from_samples(&steady).expect("s")).is_empty());
        let mut tail = steady.clone();
        tail.extend([100_000, 100_000]);
        let w = check("tcp 64 B", &Summary::from_samples(&tail).expect("s"));
        assert!(matches!(w.as_slice(), [Warning::LongTail { .. }]), "{w:?}");
        let noisy: Vec<u64> = (0..100).map(|i| if i % 2 == 0 { 1000 } else { 3000 }).collect();
        let w = check("p", &Summary::from_samples(&noisy).expect("s"));
        assert!(matches!(w.as_slice(), [Warning::Noisy { .. }]), "{w:?}");
        let w = check("p", &Summary::from_samples(&[1, 1, 1]).expect("s"));
        assert!(matches!(w.as_slice(), [Warning::FewSamples { count: 3, .. }]), "{w:?}");
    }
}
