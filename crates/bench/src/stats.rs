//! Summary statistics as the field reports them (benchmarks.md): mean, median, p10/p90/p99,
//! min, max, standard deviation and CV. Percentiles interpolate linearly between order
//! statistics (numpy's default), so figures match other tools' on the same samples.

use serde::{Deserialize, Serialize};

/// A sample's summary. Empty samples have none (`Stats::of` returns `None`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    /// Sample standard deviation (n − 1); 0 for a single value.
    pub stdev: f64,
    /// stdev / mean; 0 when the mean is 0.
    pub cv: f64,
}

impl Stats {
    /// Summarizes the finite values of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Stats> {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let variance = if n > 1 {
            sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let stdev = variance.sqrt();
        Some(Stats {
            n,
            mean,
            median: percentile(&sorted, 50.0),
            p10: percentile(&sorted, 10.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            min: sorted[0],
            max: sorted[n - 1],
            stdev,
            cv: if mean == 0.0 { 0.0 } else { stdev / mean.abs() },
        })
    }
}

/// The `p`th percentile (0–100) of sorted, non-empty values, linearly interpolated.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    let fraction = rank - below as f64;
    sorted[below] + (sorted[above] - sorted[below]) * fraction
}

/// Whether `candidate` beats `baseline` by more than the noise either shows: the difference of
/// medians must exceed twice the larger standard deviation of the two (so a "+0.5 tok/s" inside
/// the run-to-run spread is not called a win). `higher_is_better` picks the direction.
pub fn beats_noise(candidate: &Stats, baseline: &Stats, higher_is_better: bool) -> bool {
    let gain = if higher_is_better {
        candidate.median - baseline.median
    } else {
        baseline.median - candidate.median
    };
    gain > 2.0 * candidate.stdev.max(baseline.stdev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_on_a_known_sample() {
        // numpy.percentile([1, 2, 3, 4, 10], [10, 50, 90, 99]) = 1.4, 3, 7.6, 9.76
        let s = Stats::of([4.0, 1.0, 10.0, 3.0, 2.0]).expect("non-empty");
        assert_eq!(s.n, 5);
        assert!((s.p10 - 1.4).abs() < 1e-9);
        assert_eq!(s.median, 3.0);
        assert!((s.p90 - 7.6).abs() < 1e-9);
        assert!((s.p99 - 9.76).abs() < 1e-9);
        assert_eq!((s.min, s.max, s.mean), (1.0, 10.0, 4.0));
        // sample stdev of the five: sqrt(50 / 4)
        assert!((s.stdev - 12.5f64.sqrt()).abs() < 1e-9);
        assert!((s.cv - 12.5f64.sqrt() / 4.0).abs() < 1e-9);
    }

    #[test]
    fn empty_and_non_finite_samples() {
        assert!(Stats::of([]).is_none());
        assert!(Stats::of([f64::NAN, f64::INFINITY]).is_none());
        let one = Stats::of([7.0, f64::NAN]).expect("one finite value");
        assert_eq!((one.n, one.median, one.stdev, one.cv), (1, 7.0, 0.0, 0.0));
    }

    #[test]
    fn a_gain_inside_the_spread_is_noise() {
        let base = Stats::of([10.0, 10.4, 9.6, 10.2, 9.8]).expect("sample");
        let slightly = Stats::of([10.5, 10.9, 10.1, 10.7, 10.3]).expect("sample");
        let clearly = Stats::of([12.0, 12.4, 11.6, 12.2, 11.8]).expect("sample");
        assert!(!beats_noise(&slightly, &base, true));
        assert!(beats_noise(&clearly, &base, true));
        assert!(!beats_noise(&clearly, &base, false));
    }
}
