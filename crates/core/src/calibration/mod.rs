//! The planner's closed loop: predict, measure, correct. Every llama.cpp dry run and every engine
//! measured after load is kept next to the estimate made for it; per (architecture, backend,
//! device model) the records give the last check ("estimate off by x % on this rig last time")
//! and a correction of the two terms without a closed form (compute buffer, GPU overhead) that
//! later plans on the same devices use.

pub mod record;

use serde::Serialize;
use std::collections::HashMap;

use crate::engines::Backend;
use crate::placement::{Correction, DeviceId, DeviceSpec};

/// Records used per key and source: recent ones describe the current build and driver.
const RECENT: usize = 5;
/// A factor outside this range says the record is broken, not that the estimate is that far off.
const FACTOR_RANGE: (f64, f64) = (0.25, 4.0);
/// No GPU loses more than this to its context and allocator slack.
const MAX_OVERHEAD_BYTES: u64 = 16 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// llama.cpp's `llama-fit-params` table: each term, no GPU context.
    DryRun,
    /// NVML's memory of a running engine's processes after load: the total only.
    Measured,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::DryRun => "dry_run",
            Source::Measured => "measured",
        }
    }

    pub fn parse(text: &str) -> Option<Source> {
        match text {
            "dry_run" => Some(Source::DryRun),
            "measured" => Some(Source::Measured),
            _ => None,
        }
    }
}

/// The planner's terms on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Terms {
    pub weights_bytes: u64,
    pub kv_bytes: u64,
    pub compute_bytes: u64,
    pub overhead_bytes: u64,
}

/// Which records speak for a device: the same architecture, engine backend and device model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DeviceKey {
    pub architecture: String,
    pub backend: Backend,
    /// The GPU's name as NVML gives it, or `CPU` for host memory.
    pub device_model: String,
}

/// The host's device model in keys: host compute buffers depend on the graph, not the CPU.
pub const HOST_MODEL: &str = "CPU";

/// One estimate and what was seen for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observation {
    #[serde(flatten)]
    pub key: DeviceKey,
    pub source: Source,
    /// The model's path or address.
    pub model: String,
    pub at_ms: i64,
    /// The planner's figures before any correction.
    pub estimated: Terms,
    /// A dry run's terms (its overhead is 0); none for a measured engine.
    pub observed_terms: Option<Terms>,
    pub observed_total_bytes: u64,
}

impl Observation {
    /// What the estimate said for what was observed: a dry run leaves out the GPU context, a
    /// measured process includes it.
    pub fn estimated_total(&self) -> u64 {
        let e = &self.estimated;
        let total = e
            .weights_bytes
            .saturating_add(e.kv_bytes)
            .saturating_add(e.compute_bytes);
        match self.source {
            Source::DryRun => total,
            Source::Measured => total.saturating_add(e.overhead_bytes),
        }
    }

    /// How far the estimate was from what was seen, in % of what was seen (+ = too high).
    pub fn off_by_percent(&self) -> Option<f64> {
        let observed = self.observed_total_bytes as f64;
        (observed > 0.0).then(|| (self.estimated_total() as f64 - observed) / observed * 100.0)
    }
}

/// The newest check of a key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LastCheck {
    pub source: Source,
    pub at_ms: i64,
    pub model: String,
    pub estimated_bytes: u64,
    pub observed_bytes: u64,
    pub off_by_percent: Option<f64>,
}

/// What the records say for one key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    #[serde(flatten)]
    pub key: DeviceKey,
    pub last: LastCheck,
    pub correction: Correction,
    pub dry_runs: usize,
    pub measured: usize,
}

/// Groups records (any order) by key into calibrations, newest check first.
pub fn calibrate(records: &[Observation]) -> Vec<Calibration> {
    let mut by_key: HashMap<&DeviceKey, Vec<&Observation>> = HashMap::new();
    for r in records {
        by_key.entry(&r.key).or_default().push(r);
    }
    let mut out: Vec<Calibration> = by_key
        .into_iter()
        .filter_map(|(key, mut rows)| {
            rows.sort_by_key(|r| std::cmp::Reverse(r.at_ms));
            let newest = rows.first()?;
            let dry: Vec<&Observation> = only(&rows, Source::DryRun);
            let measured: Vec<&Observation> = only(&rows, Source::Measured);
            Some(Calibration {
                key: key.clone(),
                last: LastCheck {
                    source: newest.source,
                    at_ms: newest.at_ms,
                    model: newest.model.clone(),
                    estimated_bytes: newest.estimated_total(),
                    observed_bytes: newest.observed_total_bytes,
                    off_by_percent: newest.off_by_percent(),
                },
                correction: correction(&dry, &measured),
                dry_runs: dry.len(),
                measured: measured.len(),
            })
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.last.at_ms));
    out
}

fn only<'a>(rows: &[&'a Observation], source: Source) -> Vec<&'a Observation> {
    rows.iter()
        .copied()
        .filter(|r| r.source == source)
        .take(RECENT)
        .collect()
}

/// Compute: the median of llama.cpp's compute / ours over recent dry runs. Overhead: the median
/// of what measured engines held beyond weights, KV and the corrected compute (the GPU's context
/// and allocator slack), on GPUs only.
fn correction(dry: &[&Observation], measured: &[&Observation]) -> Correction {
    let ratios: Vec<f64> = dry
        .iter()
        .filter_map(|r| {
            let theirs = r.observed_terms?.compute_bytes as f64;
            let ours = r.estimated.compute_bytes as f64;
            (ours > 0.0 && theirs > 0.0).then(|| theirs / ours)
        })
        .filter(|f| (FACTOR_RANGE.0..=FACTOR_RANGE.1).contains(f))
        .collect();
    let compute_factor = median(ratios).unwrap_or(1.0);
    let residuals: Vec<f64> = measured
        .iter()
        .filter(|r| r.key.device_model != HOST_MODEL)
        .map(|r| {
            let e = &r.estimated;
            let known = e.weights_bytes as f64
                + e.kv_bytes as f64
                + (e.compute_bytes as f64 * compute_factor).round();
            (r.observed_total_bytes as f64 - known).clamp(0.0, MAX_OVERHEAD_BYTES as f64)
        })
        .collect();
    Correction {
        compute_factor,
        overhead_bytes: median(residuals).map(|b| b.round() as u64),
    }
}

/// The median (the bench statistics' 50th percentile, interpolated between the middle two).
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(crate::bench::stats::percentile(&values, 50.0))
}

/// A device's calibration as a plan shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceCalibration {
    pub device: DeviceId,
    #[serde(flatten)]
    pub calibration: Calibration,
}

/// Sets each device's correction from the calibration of its key (its model in `models`) and
/// returns the calibrations that applied, for the plan's report.
pub fn apply(
    devices: &mut [DeviceSpec],
    models: &[(DeviceId, String)],
    architecture: &str,
    backend: Backend,
    calibrations: &[Calibration],
) -> Vec<DeviceCalibration> {
    let mut applied = Vec::new();
    for device in devices.iter_mut() {
        let Some((_, model)) = models.iter().find(|(id, _)| *id == device.id) else {
            continue;
        };
        let found = calibrations.iter().find(|c| {
            c.key.architecture == architecture
                && c.key.backend == backend
                && &c.key.device_model == model
        });
        device.correction = found.map(|c| c.correction);
        if let Some(c) = found {
            applied.push(DeviceCalibration {
                device: device.id,
                calibration: c.clone(),
            });
        }
    }
    applied
}

/// Corrects `devices` (a plan's rig) from this rig's records for `architecture`, under the
/// backend a dry run of the plan would use; `gpus` is NVML's readout when the rig is the live one
/// (a hypothetical rig's GPUs are not this rig's, so only its host memory is corrected).
pub async fn correct(
    store: &crate::store::Store,
    gpus: Option<&crate::telemetry::snapshot::GpuReadout>,
    architecture: &str,
    devices: &mut [DeviceSpec],
) -> Vec<DeviceCalibration> {
    let builds = store.engine_builds().await.unwrap_or_default();
    let has_gpus = devices.iter().any(|d| matches!(d.id, DeviceId::Gpu(_)));
    let Some(backend) = crate::dry_run::planning_backend(&builds, has_gpus) else {
        return Vec::new();
    };
    let records = match store.plan_observations().await {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("the planner's records cannot be read: {e}");
            return Vec::new();
        }
    };
    let models = record::device_models(gpus);
    apply(
        devices,
        &models,
        architecture,
        backend,
        &calibrate(&records),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn key(device_model: &str) -> DeviceKey {
        DeviceKey {
            architecture: "llama".into(),
            backend: Backend::Cuda,
            device_model: device_model.into(),
        }
    }

    fn dry(at_ms: i64, ours_compute: u64, theirs_compute: u64) -> Observation {
        let estimated = Terms {
            weights_bytes: 1000 * MIB,
            kv_bytes: 200 * MIB,
            compute_bytes: ours_compute,
            overhead_bytes: 400 * MIB,
        };
        Observation {
            key: key("NVIDIA GeForce RTX 3090"),
            source: Source::DryRun,
            model: "m.gguf".into(),
            at_ms,
            estimated,
            observed_terms: Some(Terms {
                compute_bytes: theirs_compute,
                overhead_bytes: 0,
                ..estimated
            }),
            observed_total_bytes: 1200 * MIB + theirs_compute,
        }
    }

    fn measured(at_ms: i64, total: u64) -> Observation {
        Observation {
            source: Source::Measured,
            observed_terms: None,
            observed_total_bytes: total,
            ..dry(at_ms, 100 * MIB, 100 * MIB)
        }
    }

    #[test]
    fn dry_runs_scale_the_compute_estimate_by_their_median_ratio() {
        let records = [
            dry(1, 100 * MIB, 80 * MIB),
            dry(2, 100 * MIB, 70 * MIB),
            dry(3, 100 * MIB, 75 * MIB),
        ];
        let c = &calibrate(&records)[0];
        assert!((c.correction.compute_factor - 0.75).abs() < 1e-9);
        assert_eq!(c.correction.overhead_bytes, None);
        assert_eq!(c.dry_runs, 3);
        // The newest record is the last check: ours 1300 MiB against llama.cpp's 1275 MiB.
        assert_eq!(c.last.at_ms, 3);
        let off = c.last.off_by_percent.unwrap();
        assert!((off - 25.0 / 1275.0 * 100.0).abs() < 1e-9, "{off}");
    }

    #[test]
    fn measured_engines_set_the_overhead_to_what_they_held_beyond_the_terms() {
        // Weights 1000 + KV 200 + compute 100 × 0.5 = 1250 MiB known; the engine held 1562.
        let records = [dry(1, 100 * MIB, 50 * MIB), measured(2, 1562 * MIB)];
        let c = &calibrate(&records)[0];
        assert_eq!(c.correction.overhead_bytes, Some(312 * MIB));
        assert_eq!(c.last.source, Source::Measured);
        // Planned 1000 + 200 + 100 + 400 = 1700 MiB against 1562 measured.
        let off = c.last.off_by_percent.unwrap();
        assert!((off - 138.0 / 1562.0 * 100.0).abs() < 1e-9, "{off}");
    }

    #[test]
    fn broken_records_do_not_turn_into_wild_corrections() {
        let records = [
            dry(1, 100 * MIB, 0),
            dry(2, 100 * MIB, 100_000 * MIB),
            measured(3, 0),
        ];
        let c = &calibrate(&records)[0];
        assert_eq!(c.correction.compute_factor, 1.0);
        assert_eq!(c.correction.overhead_bytes, Some(0));
        assert_eq!(c.last.off_by_percent, None);
    }

    #[test]
    fn only_records_of_the_same_architecture_backend_and_device_model_apply() {
        let mut other_gpu = dry(5, 100 * MIB, 50 * MIB);
        other_gpu.key = key("NVIDIA GeForce RTX 4090");
        let records = [dry(1, 100 * MIB, 80 * MIB), other_gpu];
        let calibrations = calibrate(&records);
        assert_eq!(calibrations.len(), 2);
        let mut devices = vec![
            crate::placement::DeviceSpec {
                id: DeviceId::Gpu(0),
                name: "GPU 0".into(),
                capacity_bytes: 24 << 30,
                reserve_bytes: 0,
                overhead_bytes: 400 * MIB,
                bandwidth_bytes_per_s: None,
                link_degraded: false,
                correction: None,
            };
            2
        ];
        devices[1].id = DeviceId::Gpu(1);
        let models = [
            (DeviceId::Gpu(0), "NVIDIA GeForce RTX 3090".to_owned()),
            (DeviceId::Gpu(1), "NVIDIA GeForce RTX 3060".to_owned()),
        ];
        let applied = apply(&mut devices, &models, "llama", Backend::Cuda, &calibrations);
        assert_eq!(applied.len(), 1);
        assert!((devices[0].correction.unwrap().compute_factor - 0.8).abs() < 1e-9);
        assert_eq!(devices[1].correction, None);
        let none = apply(&mut devices, &models, "qwen3", Backend::Cuda, &calibrations);
        assert!(none.is_empty());
    }
}
