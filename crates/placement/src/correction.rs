//! Corrections learned on this rig: the compute-buffer estimate and a GPU's overhead are the two
//! terms without a closed form, so records of llama.cpp's dry runs and of engines measured after
//! load (kept by the daemon) scale the one and replace the other, per device.

use serde::{Deserialize, Serialize};

/// What the records say to change on one device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Multiplies the compute-buffer estimate (llama.cpp's figure / ours, from dry runs).
    pub compute_factor: f64,
    /// Replaces the GPU's overhead margin: what measured engines held beyond weights, KV and
    /// compute (the CUDA context and the rest).
    pub overhead_bytes: Option<u64>,
}

impl Correction {
    /// The compute buffer after the correction; a factor that is not a finite positive number
    /// (a corrupt record) leaves the estimate as it is.
    pub fn compute(correction: Option<&Correction>, estimate: u64) -> u64 {
        match correction.map(|c| c.compute_factor) {
            Some(f) if f.is_finite() && f > 0.0 => (estimate as f64 * f).round() as u64,
            _ => estimate,
        }
    }

    /// A GPU's overhead: the measured one when there is one, else the user's margin.
    pub fn overhead(correction: Option<&Correction>, margin: u64) -> u64 {
        correction.and_then(|c| c.overhead_bytes).unwrap_or(margin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correction_scales_compute_and_replaces_the_overhead_margin() {
        let c = Correction {
            compute_factor: 0.75,
            overhead_bytes: Some(300),
        };
        assert_eq!(Correction::compute(Some(&c), 1000), 750);
        assert_eq!(Correction::overhead(Some(&c), 400), 300);
        assert_eq!(Correction::compute(None, 1000), 1000);
        assert_eq!(Correction::overhead(None, 400), 400);
        let broken = Correction {
            compute_factor: f64::NAN,
            overhead_bytes: None,
        };
        assert_eq!(Correction::compute(Some(&broken), 1000), 1000);
        assert_eq!(Correction::overhead(Some(&broken), 400), 400);
    }
}
