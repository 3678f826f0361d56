//! Whether a point's round-trip times are one thing a median describes.
//!
//! On a small machine a ping-pong exchange lands either on one CPU or
//! across two, and the two take times 5x apart: the samples form two
//! modes, and their median flips from one to the other between runs. A
//! busy neighbour can also slow a point down halfway through. Neither
//! shows in the interquartile range alone. [`irregular`] looks for both:
//!
//! - modes: a kernel density estimate of ln(RTT) (Gaussian kernel, the
//!   bandwidth of Silverman's rule with the robust spread, 0.9 x min(sd,
//!   IQR / 1.34) x n^-1/5); its peaks, merged while the valley between two
//!   stays above half the lower peak; each peak's share of the samples, the
//!   density between the valleys on either side. Two or more peaks with at
//!   least [`MIN_MODE_SHARE`] of the samples each, [`MODES_APART`] or more
//!   apart, are two modes. A long tail is not a mode: it has no peak of its
//!   own, or too few samples. Peaks closer than that are the fine structure
//!   of one steady point (seen here, pinned: 9.9 and 10.6 us, round after
//!   round), not a median that can flip.
//! - drift: the first and last thirds of the point (in time order) have
//!   interquartile ranges that do not overlap, and medians more than
//!   [`DRIFT`] apart.
//!
//! Fewer than [`MIN_SAMPLES`] samples say nothing either way.

use serde::{Deserialize, Serialize};

/// Below this many samples no shape is judged.
pub const MIN_SAMPLES: usize = 50;
/// A mode holds at least this share of the samples.
pub const MIN_MODE_SHARE: f64 = 0.10;
/// Two peaks stay apart only when the density between them falls below
/// this share of the lower one.
pub const VALLEY: f64 = 0.5;
/// Two modes are this factor apart or more (on a 2-vCPU machine the one-CPU
/// and two-CPU modes of a ping-pong are 3x to 6x apart).
pub const MODES_APART: f64 = 1.25;
/// The first and last thirds' medians must differ by more than this share
/// of the point's median to be a drift.
pub const DRIFT: f64 = 0.05;

/// One mode of a distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mode {
    /// Where its peak is, ns.
    pub center_ns: f64,
    /// The share of the samples under it.
    pub share: f64,
}

/// Why a point's median does not describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Irregular {
    /// Two or more modes, each with at least [`MIN_MODE_SHARE`] of the samples.
    Modes { modes: Vec<Mode> },
    /// The point's median moved while it was measured.
    Drift { first_ns: f64, last_ns: f64 },
}

impl Irregular {
    /// In words, with the figures.
    pub fn describe(&self) -> String {
        match self {
            Irregular::Modes { modes } => {
                let list: Vec<String> = modes
                    .iter()
                    .map(|m| format!("{} ({:.0}%)", crate::units::fmt_ns(m.center_ns), m.share * 100.0))
                    .collect();
                format!("{} modes: {}", modes.len(), list.join(" and "))
            }
            Irregular::Drift { first_ns, last_ns } => format!(
                "drifted from a median of {} in its first third to {} in its last",
                crate::units::fmt_ns(*first_ns),
                crate::units::fmt_ns(*last_ns)
            ),
        }
    }
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The modes of samples (ns), largest share first; the shares add up to 1.
/// One mode when there are too few samples to tell, or no spread.
pub fn modes(samples: &[u64]) -> Vec<Mode> {
    let mut v: Vec<f64> = samples.iter().filter(|&&s| s > 0).map(|&s| (s as f64).ln()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let one = || vec![Mode { center_ns: quantile(&v, 0.5).exp(), share: 1.0 }];
    if n < MIN_SAMPLES {
        return one();
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let iqr = quantile(&v, 0.75) - quantile(&v, 0.25);
    let spread = if iqr > 0.0 { sd.min(iqr / 1.34) } else { sd };
    let h = 0.9 * spread * (n as f64).powf(-0.2);
    if h <= 1e-9 {
        return one();
    }
    // the grid: three points per bandwidth over the bulk (extreme tails off)
    let (lo, hi) = (quantile(&v, 0.005) - 3.0 * h, quantile(&v, 0.995) + 3.0 * h);
    let step = h / 3.0;
    let g = (((hi - lo) / step).ceil() as usize + 1).min(8192);
    let step = (hi - lo) / (g - 1) as f64;
    // linear binning, then a Gaussian kernel over +-4 bandwidths
    let mut bins = vec![0.0; g];
    for &x in &v {
        if x < lo || x > hi {
            continue;
        }
        let at = (x - lo) / step;
        let i = (at.floor() as usize).min(g - 1);
        let f = at - i as f64;
        bins[i] += 1.0 - f;
        if i + 1 < g {
            bins[i + 1] += f;
        }
    }
    let radius = (4.0 * h / step).ceil() as usize;
    let kernel: Vec<f64> = (0..=radius).map(|k| (-0.5 * (k as f64 * step / h).powi(2)).exp()).collect();
    let density: Vec<f64> = (0..g)
        .map(|i| {
            let from = i.saturating_sub(radius);
            let to = (i + radius).min(g - 1);
            (from..=to).map(|j| bins[j] * kernel[i.abs_diff(j)]).sum()
        })
        .collect();
    let top = density.iter().copied().fold(0.0, f64::max);
    if top <= 0.0 {
        return one();
    }
    // peaks (plateaus count once), then merged across shallow valleys
    let mut peaks: Vec<usize> = (0..g)
        .filter(|&i| {
            let left = if i == 0 { f64::MIN } else { density[i - 1] };
            let right = if i + 1 == g { f64::MIN } else { density[i + 1] };
            density[i] > left && density[i] >= right && density[i] > 0.01 * top
        })
        .collect();
    loop {
        let mut merged = false;
        for k in 1..peaks.len() {
            let (a, b) = (peaks[k - 1], peaks[k]);
            let valley = density[a..=b].iter().copied().fold(f64::MAX, f64::min);
            if valley > VALLEY * density[a].min(density[b]) {
                // the lower peak joins the higher
                if density[a] >= density[b] {
                    peaks.remove(k);
                } else {
                    peaks.remove(k - 1);
                }
                merged = true;
                break;
            }
        }
        if !merged {
            break;
        }
    }
    // each peak's share: the density between the valleys on either side
    let total: f64 = density.iter().sum();
    let mut bounds = vec![0];
    for k in 1..peaks.len() {
        let (a, b) = (peaks[k - 1], peaks[k]);
        let valley = (a..=b).min_by(|&x, &y| density[x].total_cmp(&density[y])).unwrap_or(a);
        bounds.push(valley);
    }
    bounds.push(g);
    let mut out: Vec<Mode> = peaks
        .iter()
        .enumerate()
        .map(|(k, &p)| Mode {
            center_ns: (lo + p as f64 * step).exp(),
            share: density[bounds[k]..bounds[k + 1]].iter().sum::<f64>() / total,
        })
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    out
}

/// Whether the samples of a point (in the order they were taken) form two
/// modes or drift; None when a median describes them (or there are too few
/// to tell).
pub fn irregular(samples: &[u64]) -> Option<Irregular> {
    if samples.len() < MIN_SAMPLES {
        return None;
    }
    let mut big: Vec<Mode> = modes(samples).into_iter().filter(|m| m.share >= MIN_MODE_SHARE).collect();
    big.sort_by(|a, b| a.center_ns.total_cmp(&b.center_ns));
    if let (Some(low), Some(high)) = (big.first(), big.last()) {
        if high.center_ns >= MODES_APART * low.center_ns {
            return Some(Irregular::Modes { modes: big });
        }
    }
    let third = samples.len() / 3;
    let sorted = |part: &[u64]| {
        let mut v: Vec<f64> = part.iter().map(|&s| s as f64).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (first, last) = (sorted(&samples[..third]), sorted(&samples[samples.len() - third..]));
    let all = sorted(samples);
    let (f1, fm, f3) = (quantile(&first, 0.25), quantile(&first, 0.5), quantile(&first, 0.75));
    let (l1, lm, l3) = (quantile(&last, 0.25), quantile(&last, 0.5), quantile(&last, 0.75));
    let apart = f3 < l1 || l3 < f1;
    if apart && (lm - fm).abs() > DRIFT * quantile(&all, 0.5) {
        return Some(Irregular::Drift { first_ns: fm, last_ns: lm });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// n samples around `center` ns with relative spread `rel` (log-normal).
    fn around(rng: &mut Rng, n: usize, center: f64, rel: f64) -> Vec<u64> {
        (0..n).map(|_| (center * (rel * rng.normal()).exp()).round() as u64).collect()
    }

    fn shuffled(mut v: Vec<u64>, rng: &mut Rng) -> Vec<u64> {
        for i in (1..v.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }

    #[test]
    fn one_mode_is_one_mode_with_or_without_a_tail() {
        let mut rng = Rng::new(7);
        for rel in [0.005, 0.03, 0.15] {
            let s = around(&mut rng, 2000, 15_900.0, rel);
            assert_eq!(modes(&s).len(), 1, "rel {rel}: {:?}", modes(&s));
            assert_eq!(irregular(&s), None);
        }
        // a long tail: 5% of the exchanges 2x to 20x slower, spread out
        let mut s = around(&mut rng, 1900, 15_900.0, 0.03);
        s.extend((0..100).map(|i| 15_900 * (2 + i % 19)));
        let s = shuffled(s, &mut rng);
        assert_eq!(irregular(&s), None, "{:?}", modes(&s));
    }

    #[test]
    fn the_two_cpu_modes_are_found() {
        let mut rng = Rng::new(11);
        // one CPU (16 us) or two (80 us), half and half
        let mut s = around(&mut rng, 1000, 16_000.0, 0.05);
        s.extend(around(&mut rng, 1000, 80_000.0, 0.08));
        let s = shuffled(s, &mut rng);
        match irregular(&s) {
            Some(Irregular::Modes { modes }) => {
                assert_eq!(modes.len(), 2, "{modes:?}");
                assert!((modes[0].center_ns / 16_000.0 - 1.0).abs() < 0.05, "{modes:?}");
                assert!((modes[1].center_ns / 80_000.0 - 1.0).abs() < 0.08, "{modes:?}");
                assert!((modes[0].share - 0.5).abs() < 0.05 && (modes[1].share - 0.5).abs() < 0.05, "{modes:?}");
            }
            other => panic!("{other:?}"),
        }
        // 85 / 15: still two
        let mut s = around(&mut rng, 1700, 16_000.0, 0.05);
        s.extend(around(&mut rng, 300, 60_000.0, 0.05));
        assert!(matches!(irregular(&shuffled(s, &mut rng)), Some(Irregular::Modes { .. })));
        // two modes 30% apart, each narrow
        let mut s = around(&mut rng, 1000, 16_000.0, 0.02);
        s.extend(around(&mut rng, 1000, 21_000.0, 0.02));
        assert!(matches!(irregular(&shuffled(s, &mut rng)), Some(Irregular::Modes { .. })));
        // two peaks 7% apart are the fine structure of one steady point
        let mut s = around(&mut rng, 1200, 9_900.0, 0.01);
        s.extend(around(&mut rng, 800, 10_600.0, 0.01));
        let s = shuffled(s, &mut rng);
        assert_eq!(modes(&s).iter().filter(|m| m.share >= MIN_MODE_SHARE).count(), 2, "{:?}", modes(&s));
        assert_eq!(irregular(&s), None);
        // 97 / 3: a few slow ones are a tail, not a mode
        let mut s = around(&mut rng, 1940, 16_000.0, 0.05);
        s.extend(around(&mut rng, 60, 80_000.0, 0.05));
        assert_eq!(irregular(&shuffled(s, &mut rng)), None);
    }

    #[test]
    fn a_drift_is_found_and_noise_is_not_one() {
        let mut rng = Rng::new(3);
        // a point that slows by 30% halfway through
        let mut s = around(&mut rng, 600, 10_000.0, 0.03);
        s.extend(around(&mut rng, 600, 13_000.0, 0.03));
        match irregular(&s) {
            Some(Irregular::Drift { first_ns, last_ns }) => {
                assert!((first_ns / 10_000.0 - 1.0).abs() < 0.02 && (last_ns / 13_000.0 - 1.0).abs() < 0.02);
            }
            // two well-separated levels are also two modes: either is right
            Some(Irregular::Modes { .. }) => {}
            None => panic!("not found"),
        }
        // a slow ramp of 20% over the point, inside a wide spread
        let ramp: Vec<u64> = (0..1500)
            .map(|i| (10_000.0 * (1.0 + 0.2 * i as f64 / 1500.0) * (0.05 * rng.normal()).exp()) as u64)
            .collect();
        assert!(matches!(irregular(&ramp), Some(Irregular::Drift { .. })), "{:?}", irregular(&ramp));
        // stationary noise, however wide
        let s = around(&mut rng, 1500, 10_000.0, 0.3);
        assert_eq!(irregular(&s), None);
    }

    #[test]
    fn few_or_equal_samples_say_nothing() {
        assert_eq!(irregular(&[5, 100, 5, 100, 5]), None);
        assert_eq!(irregular(&vec![15_900; 500]), None);
        assert_eq!(modes(&vec![15_900; 500]).len(), 1);
        assert!(modes(&[]).is_empty());
    }
}
