//! How much slower B is than A, with a 95% interval, and whether that is a
//! finding.
//!
//! A survey measures each point in rounds, the protocols in turn within
//! each round, so that whatever drifts over seconds (the machine's load,
//! the lab's timers) falls on every protocol alike. The rounds are the
//! replicates: the difference of two protocols at one size is estimated
//! per round (median of B's round over median of A's, minus 1), and the
//! interval is Student's t on those per-round differences ([`paired`]).
//! Between two runs the rounds are not paired: Welch's t on the two sets of
//! round medians ([`unpaired`]). A point measured in fewer than three
//! rounds falls back to a percentile bootstrap of the ratio of medians over
//! its samples ([`bootstrap`]), which takes the samples as independent and
//! so gives a narrower interval than the rounds would; the method is said
//! with every interval.
//!
//! A difference is a finding when its whole 95% interval lies beyond
//! [`NEGLIGIBLE`] (5%) on one side: a smaller difference is not worth a
//! conclusion even when it is real, and a difference whose interval crosses
//! it is not shown to be real. The rounds hold what drifts within a run,
//! not what moves between runs: two quick surveys back to back on the
//! 2-vCPU machine gridperf is developed on moved a point's median by 1%
//! (median over 217 points), 3.6% at the 90th percentile; with 2% the
//! second survey found "udp 2.1% faster" where the first found a tie.

use crate::rng::Rng;
use serde::{Deserialize, Serialize};

/// The interval's confidence.
pub const CONFIDENCE: f64 = 0.95;
/// Differences smaller than this share are not findings: above the 90th
/// percentile of how far a point's median moves between two runs.
pub const NEGLIGIBLE: f64 = 0.05;
/// At least this many rounds give an interval from the rounds.
pub const MIN_ROUNDS: usize = 3;
/// Resamples of a bootstrap.
pub const BOOTSTRAP: usize = 2000;

/// How an interval was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Student's t on per-round differences (same rounds: paired).
    PairedRounds,
    /// Welch's t on two sets of round medians.
    Rounds,
    /// A percentile bootstrap of the ratio of the medians of the samples.
    Bootstrap,
}

/// B against A: `estimate` is median(B) / median(A) - 1, and [lo, hi] its
/// 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
    pub method: Method,
    /// Rounds (or samples, for the bootstrap) behind it, the smaller side.
    pub n: usize,
}

impl Difference {
    /// B is slower than A, and by more than [`NEGLIGIBLE`], at 95%.
    pub fn b_slower(&self) -> bool {
        self.lo > NEGLIGIBLE
    }

    /// B is faster than A, and by more than [`NEGLIGIBLE`], at 95%.
    pub fn b_faster(&self) -> bool {
        self.hi < -NEGLIGIBLE
    }

    /// A finding either way.
    pub fn significant(&self) -> bool {
        self.b_slower() || self.b_faster()
    }

    /// "+12.3% (95% interval +9.8 .. +14.9%)".
    pub fn describe(&self) -> String {
        format!("{:+.1}% (95% interval {:+.1} .. {:+.1}%)", self.estimate * 100.0, self.lo * 100.0, self.hi * 100.0)
    }
}

/// Student's t quantile for a two-sided 95% interval with `df` degrees of freedom.
pub fn t95(df: f64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    if df.is_nan() || df < 1.0 {
        return f64::INFINITY;
    }
    let k = df.floor() as usize;
    if k <= 30 {
        return TABLE[k - 1];
    }
    // within 0.002 of the exact quantile above 30 degrees of freedom
    1.96 + 2.5 / df
}

/// The mean and the sample variance (n - 1) of values.
pub(crate) fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = if x.len() > 1 { x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (m, v)
}

/// Round by round, B's median over A's minus 1, where both have one.
pub fn paired_shares(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.is_finite() && y.is_finite() && **x > 0.0 && **y > 0.0)
        .map(|(x, y)| y / x - 1.0)
        .collect()
}

/// B against A from the medians of the same rounds (round k of A and of B
/// were measured one right after the other). None with fewer than
/// [`MIN_ROUNDS`] rounds where both have a median.
pub fn paired(a: &[f64], b: &[f64]) -> Option<Difference> {
    let d = paired_shares(a, b);
    if d.len() < MIN_ROUNDS {
        return None;
    }
    let (m, v) = mean_var(&d);
    let half = t95(d.len() as f64 - 1.0) * (v / d.len() as f64).sqrt();
    Some(Difference { estimate: m, lo: m - half, hi: m + half, method: Method::PairedRounds, n: d.len() })
}

/// B against A from the round medians of two runs (not paired): Welch's
/// interval for the difference of the means, over A's mean. None with
/// fewer than [`MIN_ROUNDS`] rounds on either side.
pub fn unpaired(a: &[f64], b: &[f64]) -> Option<Difference> {
    let clean = |x: &[f64]| x.iter().copied().filter(|v| v.is_finite() && *v > 0.0).collect::<Vec<f64>>();
    let (a, b) = (clean(a), clean(b));
    if a.len() < MIN_ROUNDS || b.len() < MIN_ROUNDS {
        return None;
    }
    let ((ma, va), (mb, vb)) = (mean_var(&a), mean_var(&b));
    let (sa, sb) = (va / a.len() as f64, vb / b.len() as f64);
    let se = (sa + sb).sqrt();
    let df = if se > 0.0 {
        (sa + sb).powi(2) / (sa.powi(2) / (a.len() - 1) as f64 + sb.powi(2) / (b.len() - 1) as f64)
    } else {
        f64::INFINITY
    };
    let t = if df.is_finite() { t95(df) } else { 1.96 };
    let d = mb - ma;
    Some(Difference {
        estimate: d / ma,
        lo: (d - t * se) / ma,
        hi: (d + t * se) / ma,
        method: Method::Rounds,
        n: a.len().min(b.len()),
    })
}

/// B against A from their samples: the 2.5% and 97.5% percentiles of
/// median(B*) / median(A*) - 1 over [`BOOTSTRAP`] resamples (seeded, so a
/// report is the same every time it is drawn). None with fewer than 5
/// samples on either side.
pub fn bootstrap(a: &[u64], b: &[u64], seed: u64) -> Option<Difference> {
    if a.len() < 5 || b.len() < 5 {
        return None;
    }
    let ma = crate::analysis::stats::median_in_place(&mut a.to_vec());
    let mb = crate::analysis::stats::median_in_place(&mut b.to_vec());
    if ma <= 0.0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut draw = |src: &[u64], buf: &mut Vec<u64>| {
        buf.clear();
        buf.extend((0..src.len()).map(|_| src[(rng.next_u64() % src.len() as u64) as usize]));
        crate::analysis::stats::median_in_place(buf)
    };
    let (mut ba, mut bb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let mut ratios: Vec<f64> = (0..BOOTSTRAP)
        .filter_map(|_| {
            let (x, y) = (draw(a, &mut ba), draw(b, &mut bb));
            (x > 0.0).then(|| y / x - 1.0)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let at = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
    Some(Difference {
        estimate: mb / ma - 1.0,
        lo: at(0.025),
        hi: at(0.975),
        method: Method::Bootstrap,
        n: a.len().min(b.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn around(rng: &mut Rng, n: usize, center: f64, rel: f64) -> Vec<u64> {
        (0..n).map(|_| (center * (1.0 + rel * rng.normal())).max(1.0) as u64).collect()
    }

    #[test]
    fn equal_distributions_are_no_significant_difference() {
        for seed in 1..=8 {
            let mut rng = Rng::new(seed);
            let (a, b) = (around(&mut rng, 600, 16_000.0, 0.05), around(&mut rng, 600, 16_000.0, 0.05));
            let d = bootstrap(&a, &b, seed).expect("enough");
            // at 95% one in twenty intervals misses 0; none reaches past 2%
            assert!(!d.significant(), "seed {seed}: {d:?}");
            // round medians with round-to-round noise of 3%
            let ra: Vec<f64> = (0..6).map(|_| 16_000.0 * (1.0 + 0.03 * rng.normal())).collect();
            let rb: Vec<f64> = ra.iter().map(|x| x * (1.0 + 0.01 * rng.normal())).collect();
            let d = paired(&ra, &rb).expect("six rounds");
            assert!(!d.significant(), "seed {seed}: {d:?}");
            let d = unpaired(&ra, &rb).expect("six rounds");
            assert!(!d.significant(), "seed {seed}: {d:?}");
        }
    }

    #[test]
    fn a_real_difference_is_a_finding_with_its_interval() {
        let mut rng = Rng::new(5);
        let a = around(&mut rng, 600, 12_300.0, 0.05);
        let b = around(&mut rng, 600, 15_900.0, 0.05);
        let d = bootstrap(&a, &b, 1).expect("enough");
        assert!(d.b_slower() && d.lo < 0.293 && 0.293 < d.hi, "{d:?}");
        assert!((d.estimate - 0.293).abs() < 0.02, "{d:?}");
        // the rounds: udp 12.3 us, tcp 15.9 us, each round drifting alike
        let drift: Vec<f64> = (0..6).map(|_| 1.0 + 0.05 * rng.normal()).collect();
        let ra: Vec<f64> = drift.iter().map(|k| 12_300.0 * k * (1.0 + 0.01 * rng.normal())).collect();
        let rb: Vec<f64> = drift.iter().map(|k| 15_900.0 * k * (1.0 + 0.01 * rng.normal())).collect();
        let d = paired(&ra, &rb).expect("rounds");
        assert!(d.b_slower() && d.lo < 0.293 && 0.293 < d.hi && d.method == Method::PairedRounds, "{d:?}");
        // and the other way round
        let d = paired(&rb, &ra).expect("rounds");
        assert!(d.b_faster() && !d.b_slower(), "{d:?}");
        assert!(d.describe().starts_with("-22.") && d.describe().contains("95% interval"), "{}", d.describe());
    }

    #[test]
    fn a_small_real_difference_is_not_a_finding() {
        // 1% apart, measured very precisely: real, but under 2%
        let ra = [10_000.0, 10_010.0, 9_990.0, 10_005.0, 9_995.0, 10_000.0];
        let rb: Vec<f64> = ra.iter().map(|x| x * 1.01).collect();
        let d = paired(&ra, &rb).expect("rounds");
        assert!(d.lo > 0.0 && !d.significant(), "{d:?}");
    }

    #[test]
    fn pairing_cancels_a_drift_the_rounds_share() {
        // both protocols drift 20% over the rounds; B is 10% slower in every round
        let ra: Vec<f64> = (0..6).map(|k| 10_000.0 * (1.0 + 0.04 * k as f64)).collect();
        let rb: Vec<f64> = ra.iter().map(|x| x * 1.10).collect();
        assert!(paired(&ra, &rb).expect("rounds").b_slower());
        // unpaired, the drift widens the interval past the finding
        assert!(!unpaired(&ra, &rb).expect("rounds").b_slower());
    }

    #[test]
    fn too_little_says_nothing() {
        assert_eq!(paired(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(paired(&[1.0, f64::NAN, 3.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(unpaired(&[1.0, 2.0, 3.0], &[1.0]), None);
        assert_eq!(bootstrap(&[1, 2, 3], &[1, 2, 3, 4, 5], 1), None);
        assert!((t95(5.0) - 2.571).abs() < 1e-9 && (t95(60.0) - 2.0).abs() < 0.003);
        assert!(t95(0.5).is_infinite());
    }
}
