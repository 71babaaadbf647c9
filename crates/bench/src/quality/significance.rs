//! How much a pass rate says: the Wilson score interval (95 %) of a proportion, and McNemar's
//! test of two probes asked the same questions, with the exact binomial p-value (valid at every
//! count of discordant questions, the small ones included).

use serde::{Deserialize, Serialize};

/// The normal quantile of a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

/// Below this p-value two probes are told apart.
pub const ALPHA: f64 = 0.05;

/// A 95 % interval of a pass rate, both ends 0–1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateInterval {
    pub low: f64,
    pub high: f64,
}

/// The Wilson score interval of `passed` of `total`; `None` when nothing was graded.
pub fn wilson(passed: u32, total: u32) -> Option<RateInterval> {
    if total == 0 {
        return None;
    }
    let n = f64::from(total);
    let p = f64::from(passed.min(total)) / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(RateInterval {
        low: (centre - half).max(0.0),
        high: (centre + half).min(1.0),
    })
}

/// The two-sided exact McNemar p-value: of the `a_only + b_only` questions the probes disagree
/// on, how likely a split at least this uneven is when each side is equally likely to win one.
pub fn mcnemar_exact(a_only: u32, b_only: u32) -> f64 {
    let n = a_only + b_only;
    if n == 0 {
        return 1.0;
    }
    let k = a_only.min(b_only);
    let tail: f64 = (0..=k).map(|i| binomial_half(n, i)).sum();
    (2.0 * tail).min(1.0)
}

/// P(X = k) for X ~ Binomial(n, ½), in logarithms so large counts do not overflow.
fn binomial_half(n: u32, k: u32) -> f64 {
    (ln_choose(n, k) - f64::from(n) * std::f64::consts::LN_2).exp()
}

fn ln_choose(n: u32, k: u32) -> f64 {
    let k = k.min(n - k);
    (0..k)
        .map(|i| (f64::from(n - i) / f64::from(i + 1)).ln())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, tolerance: f64) -> bool {
        (got - want).abs() <= tolerance
    }

    /// Published Wilson intervals (e.g. statsmodels' proportion_confint, method="wilson").
    #[test]
    fn wilson_intervals_match_published_values() {
        let cases = [
            (0, 10, 0.0, 0.277_532),
            (5, 10, 0.236_593, 0.763_407),
            (27, 30, 0.743_789, 0.965_400),
            (300, 300, 0.987_357, 1.0),
        ];
        for (passed, total, low, high) in cases {
            let i = wilson(passed, total).expect("an interval");
            assert!(
                close(i.low, low, 1e-5) && close(i.high, high, 1e-5),
                "{passed}/{total}: {i:?}, want [{low}, {high}]"
            );
        }
        assert_eq!(wilson(0, 0), None);
    }

    /// Exact McNemar p-values: 2 × P(X ≤ min) under Binomial(b + c, ½).
    #[test]
    fn mcnemar_exact_p_values_match_the_binomial_tail() {
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        assert!(close(mcnemar_exact(0, 6), 2.0 / 64.0, 1e-12));
        assert!(close(mcnemar_exact(9, 1), 2.0 * 11.0 / 1024.0, 1e-12));
        assert!(close(mcnemar_exact(2, 8), 2.0 * 56.0 / 1024.0, 1e-12));
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        assert_eq!(mcnemar_exact(1, 0), 1.0);
        // 2 × Σ_{i ≤ 12} C(42, i) / 2^42
        assert!(close(mcnemar_exact(30, 12), 0.007_916, 1e-5));
        // Hundreds of discordant questions stay finite.
        let p = mcnemar_exact(400, 300);
        assert!(p > 0.0 && p < 1e-3, "{p}");
    }
}
