//! When a point has been measured enough: the quick survey's sequential
//! stopping rule.
//!
//! A survey point is measured in rounds, the protocols of a size in turn
//! within each round ([`crate::analysis::compare`]). The full survey spends a fixed
//! time on every point. The quick survey looks after each round from
//! [`Rule::min_rounds`] on and stops a size once every pair of its
//! protocols is settled:
//!
//! - a finding: the pair's interval lies wholly beyond the negligible
//!   difference ([`compare::NEGLIGIBLE`], 5%) on one side, or
//! - a tie: the interval lies wholly within it;
//!
//! and at [`Rule::max_rounds`] in any case. Looking several times spends
//! the error rate several times, so each look's interval is a Bonferroni
//! one: at most `looks` looks share the stated `alpha` (5%), each at
//! `alpha / looks`. The conclusions are then drawn by the survey's analysis
//! from all the rounds measured, at 95%, like the full survey's; the test
//! below simulates many points with known differences and counts how often
//! a point stopped this way names the wrong winner.

use crate::analysis::compare::{self, NEGLIGIBLE};

/// Where a pair of protocols stands after the rounds so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pair {
    /// B is faster or slower than A by more than the negligible share.
    Finding,
    /// The difference is within the negligible share.
    Tie,
    /// Neither yet.
    Open,
}

/// The stopping rule: at least `min_rounds`, at most `max_rounds`, and the
/// looks in between share `alpha`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    pub min_rounds: usize,
    pub max_rounds: usize,
    pub alpha: f64,
}

impl Rule {
    /// The quick survey's: 3 to `max_rounds` rounds, 5% over all looks.
    pub fn quick(max_rounds: usize) -> Rule {
        Rule {
            min_rounds: compare::MIN_ROUNDS,
            max_rounds: max_rounds.max(compare::MIN_ROUNDS),
            alpha: 1.0 - compare::CONFIDENCE,
        }
    }

    /// How many times the rule looks.
    pub fn looks(&self) -> usize {
        self.max_rounds + 1 - self.min_rounds.min(self.max_rounds)
    }

    /// One pair, from its round medians (round k of A and of B measured one
    /// right after the other), at this look's level.
    pub fn pair(&self, a: &[f64], b: &[f64]) -> Pair {
        let d = compare::paired_shares(a, b);
        if d.len() < self.min_rounds.max(2) {
            return Pair::Open;
        }
        let n = d.len() as f64;
        let (mean, var) = compare::mean_var(&d);
        let half = t_quantile(self.alpha / self.looks() as f64, n - 1.0) * (var / n).sqrt();
        let (lo, hi) = (mean - half, mean + half);
        if lo > NEGLIGIBLE || hi < -NEGLIGIBLE {
            Pair::Finding
        } else if lo > -NEGLIGIBLE && hi < NEGLIGIBLE {
            Pair::Tie
        } else {
            Pair::Open
        }
    }

    /// Whether a size is measured enough: each protocol's round medians so
    /// far (all the same length); always after `max_rounds`, never before
    /// `min_rounds`. In between, once the best-protocol verdict is settled:
    /// the leader (the lowest mean round median) is told apart from, or
    /// shown tied with, every other protocol, and each protocol tied with
    /// it is settled against the rest too (a tie's members must all be
    /// faster than those it leaves out). Two protocols both well behind
    /// the leader need not be told apart.
    pub fn settled(&self, rounds: &[Vec<f64>]) -> bool {
        let done = rounds.iter().map(Vec::len).min().unwrap_or(0);
        if done >= self.max_rounds {
            return true;
        }
        if done < self.min_rounds {
            return false;
        }
        let mean = |r: &Vec<f64>| {
            let v: Vec<f64> = r.iter().copied().filter(|x| x.is_finite()).collect();
            if v.is_empty() {
                f64::INFINITY
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let Some(leader) = (0..rounds.len()).min_by(|&i, &j| mean(&rounds[i]).total_cmp(&mean(&rounds[j]))) else {
            return true;
        };
        let mut tied = vec![leader];
        for j in (0..rounds.len()).filter(|&j| j != leader) {
            match self.pair(&rounds[leader], &rounds[j]) {
                Pair::Open => return false,
                Pair::Tie => tied.push(j),
                Pair::Finding => {}
            }
        }
        tied.iter().all(|&i| {
            (0..rounds.len()).filter(|j| !tied.contains(j)).all(|j| self.pair(&rounds[i], &rounds[j]) != Pair::Open)
        })
    }
}

/// Student's t quantile: the t with P(|T| > t) = `alpha` at `df` degrees
/// of freedom (two-sided), by bisection on the distribution function.
pub fn t_quantile(alpha: f64, df: f64) -> f64 {
    if alpha.is_nan() || alpha <= 0.0 || alpha >= 1.0 || df.is_nan() || df < 1.0 {
        return f64::INFINITY;
    }
    // P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2)
    let tail = |t: f64| incomplete_beta(df / (df + t * t), df / 2.0, 0.5);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while tail(hi) > alpha {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if tail(mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-10 * hi {
            break;
        }
    }
    (lo + hi) / 2.0
}

/// ln Gamma(x), x > 0 (Lanczos, g = 7, n = 9: 15 digits).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // reflection
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function I_x(a, b), by its continued
/// fraction (modified Lentz).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // the fraction converges fast below the mean; use the symmetry above it
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(1.0 - x, b, a);
    }
    const TINY: f64 = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut f = d;
    for m in 1..300 {
        let m = m as f64;
        for numerator in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + numerator * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + numerator / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            f *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    front * f / a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::{paired, t95};
    use crate::rng::Rng;

    #[test]
    fn the_t_quantile_is_the_table_and_beyond() {
        for df in 1..=30 {
            let q = t_quantile(0.05, df as f64);
            assert!((q - t95(df as f64)).abs() < 2e-3, "df {df}: {q} vs {}", t95(df as f64));
        }
        // textbook values: t(0.995, 2) = 9.925, t(0.9975, 5) = 4.773, t(0.975, inf) ~ 1.96
        assert!((t_quantile(0.01, 2.0) - 9.925).abs() < 1e-3);
        assert!((t_quantile(0.005, 5.0) - 4.773).abs() < 1e-3);
        assert!((t_quantile(0.05, 1e6) - 1.960).abs() < 1e-3);
        assert!(t_quantile(0.0, 3.0).is_infinite() && t_quantile(0.05, 0.5).is_infinite());
    }

    #[test]
    fn a_size_is_never_settled_before_three_rounds_and_always_at_the_cap() {
        let rule = Rule::quick(8);
        let far = vec![vec![10.0, 10.0], vec![20.0, 20.0]];
        assert!(!rule.settled(&far));
        let capped = vec![vec![10.0; 8], vec![10.3, 9.4, 10.8, 9.9, 10.2, 9.1, 10.9, 10.0]];
        assert!(rule.settled(&capped));
        // two far behind the leader need not be told apart
        let lead = vec![vec![10.0, 10.1, 9.9], vec![15.0, 15.6, 14.9], vec![16.0, 15.5, 16.6]];
        assert!(rule.settled(&lead));
        assert_eq!(rule.pair(&lead[1], &lead[2]), Pair::Open);
        // but a tie's members are settled against the rest
        let tie = vec![vec![10.0, 10.1, 9.9], vec![10.0, 10.12, 9.91], vec![10.6, 10.9, 10.4]];
        assert!(!rule.settled(&tie));
        // three rounds far apart and steady: a finding, settled
        let clear = vec![vec![10.0, 10.1, 9.9], vec![15.0, 15.2, 14.9]];
        assert!(rule.settled(&clear));
        assert_eq!(rule.pair(&clear[0], &clear[1]), Pair::Finding);
        // three rounds steady and equal: a tie, settled
        let same = [vec![10.0, 10.1, 9.9], vec![10.0, 10.12, 9.91]];
        assert_eq!(rule.pair(&same[0], &same[1]), Pair::Tie);
        // 5% apart with 3% noise: open
        let near = [vec![10.0, 10.0, 10.0], vec![10.2, 10.8, 10.5]];
        assert_eq!(rule.pair(&near[0], &near[1]), Pair::Open);
    }

    /// What the survey concludes about B against A from the rounds measured
    /// (the analysis's 95% paired interval): -1 B faster, +1 B slower, 0 tie.
    fn verdict(a: &[f64], b: &[f64]) -> i32 {
        match paired(a, b) {
            Some(d) if d.b_faster() => -1,
            Some(d) if d.b_slower() => 1,
            _ => 0,
        }
    }

    /// Many points with known differences, each stopped by the rule: how
    /// often the conclusion names the wrong winner. A wrong winner is a
    /// finding whose side the truth contradicts (B called faster when it
    /// is not faster at all, or slower when it is not slower), or a finding
    /// where the truth is within the negligible share. The stated rate is
    /// the interval's: at most 5% of the points where a finding would be
    /// wrong, and the rule must not raise it over the fixed-round survey's.
    #[test]
    fn the_stopping_rule_keeps_its_error_rate() {
        let rule = Rule::quick(8);
        let mut rng = Rng::new(35);
        // true differences of B against A, as shares; round noise (the
        // spread of one round's paired difference) from steady to the
        // busy machine's
        let truths = [-0.30, -0.10, -0.06, -0.045, -0.03, 0.0, 0.03, 0.045, 0.06, 0.10, 0.30];
        let noises = [0.005, 0.02, 0.05];
        const POINTS: usize = 4000;
        for &noise in &noises {
            let (mut wrong, mut at_risk, mut rounds_used, mut fixed_wrong) = (0usize, 0usize, 0usize, 0usize);
            let mut wrong_side = 0usize;
            for &truth in &truths {
                for _ in 0..POINTS {
                    // both protocols drift alike from round to round (what pairing cancels)
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    let mut draw = |a: &mut Vec<f64>, b: &mut Vec<f64>| {
                        let drift = 1.0 + 0.05 * rng.normal();
                        let base = 20_000.0 * drift;
                        a.push(base);
                        b.push(base * (1.0 + truth + noise * rng.normal()));
                    };
                    while !rule.settled(&[a.clone(), b.clone()]) {
                        draw(&mut a, &mut b);
                    }
                    rounds_used += a.len();
                    let v = verdict(&a, &b);
                    // the same point measured for the full count of rounds
                    while a.len() < rule.max_rounds {
                        draw(&mut a, &mut b);
                    }
                    let fixed = verdict(&a, &b);
                    // a finding is wrong where the truth is within the
                    // negligible share or on the other side
                    let wrong_if = |v: i32| match v {
                        -1 => truth > -NEGLIGIBLE,
                        1 => truth < NEGLIGIBLE,
                        _ => false,
                    };
                    // the points where a finding either way is wrong
                    if truth.abs() <= NEGLIGIBLE + 1e-12 {
                        at_risk += 1;
                        wrong += wrong_if(v) as usize;
                        fixed_wrong += wrong_if(fixed) as usize;
                    } else {
                        // outside the band only the wrong side is wrong
                        wrong_side += wrong_if(v) as usize;
                    }
                }
            }
            let rate = wrong as f64 / at_risk as f64;
            let fixed_rate = fixed_wrong as f64 / at_risk as f64;
            let mean_rounds = rounds_used as f64 / (POINTS * truths.len()) as f64;
            eprintln!(
                "noise {noise}: wrong winner in {wrong} of {at_risk} points at risk ({:.2}%; fixed {} rounds: {:.2}%), \
                 {mean_rounds:.2} rounds a point; the wrong side outside it: {wrong_side}",
                rate * 100.0,
                rule.max_rounds,
                fixed_rate * 100.0
            );
            assert!(rate <= 0.05, "noise {noise}: {rate}");
            assert!(wrong_side as f64 <= 0.001 * (POINTS * truths.len()) as f64, "noise {noise}: {wrong_side}");
            assert!(rate <= fixed_rate + 0.01, "noise {noise}: stopped {rate} vs fixed {fixed_rate}");
            // and the rule saves rounds where it can: on steady rounds most
            // points (the clear findings and the clear ties) stop early
            if noise <= 0.005 {
                assert!(mean_rounds < rule.max_rounds as f64 * 0.6, "noise {noise}: {mean_rounds}");
            }
        }
    }
}
