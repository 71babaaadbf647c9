//! What becomes a record: a dry run's per-device table next to the plan it checked, and an
//! engine's memory measured after load next to the plan made as it started (on the GPUs as
//! they were then, which is what llama.cpp split its layers by).

use std::path::Path;

use super::{DeviceKey, Observation, Source, Terms, HOST_MODEL};
use crate::dry_run::DryRunOutcome;
use crate::engines::registry::EngineBuild;
use crate::engines::{Backend, EngineKind};
use crate::live_rig::gpu_devices;
use crate::placement::from_gguf::load_shape;
use crate::placement::plan::DevicePlan;
use crate::placement::rig::Margins;
use crate::placement::{DeviceId, DeviceSpec, PlacementOptions};
use crate::profiles::admission::Held;
use crate::telemetry::snapshot::GpuReadout;

/// Each device's model, as keys name it: GPUs by NVML's name, host memory as [`HOST_MODEL`].
/// Without a readout (a hypothetical rig) only the host is known.
pub fn device_models(gpus: Option<&GpuReadout>) -> Vec<(DeviceId, String)> {
    let mut models: Vec<(DeviceId, String)> = gpus
        .map(|r| {
            r.gpus
                .iter()
                .filter(|g| g.lost.is_none())
                .filter_map(|g| Some((DeviceId::Gpu(g.index), g.name.clone()?)))
                .collect()
        })
        .unwrap_or_default();
    models.push((DeviceId::Cpu, HOST_MODEL.to_owned()));
    models
}

/// The planner's own terms for a device: the compute estimate before any correction, the
/// overhead margin the user set (a dry run's figures leave the GPU context out).
fn estimated(device: &DevicePlan) -> Terms {
    Terms {
        weights_bytes: device.usage.weights_bytes,
        kv_bytes: device.usage.kv_bytes,
        compute_bytes: device.usage.compute_estimate_bytes,
        overhead_bytes: if matches!(device.spec.id, DeviceId::Gpu(_)) {
            device.spec.overhead_bytes
        } else {
            0
        },
    }
}

/// One record per device of a successful dry run whose model is known, with the key that a
/// second run of the same flags and build replaces.
pub fn from_dry_run(
    outcome: &DryRunOutcome,
    plan: &[DevicePlan],
    architecture: &str,
    models: &[(DeviceId, String)],
    model: &str,
    at_ms: i64,
) -> Vec<(String, Observation)> {
    let (Some(build), Some(run)) = (&outcome.build, &outcome.dry_run) else {
        return Vec::new();
    };
    outcome
        .devices
        .iter()
        .filter_map(|d| {
            let ours = plan.iter().find(|p| p.spec.id == d.id)?;
            let (_, device_model) = models.iter().find(|(id, _)| *id == d.id)?;
            let theirs = Terms {
                weights_bytes: d.llama_cpp.model_bytes,
                kv_bytes: d.llama_cpp.context_bytes,
                compute_bytes: d.llama_cpp.compute_bytes,
                overhead_bytes: 0,
            };
            let dedupe = format!(
                "dry_run|{}|{model}|{}|{}",
                build.id,
                run.args.join("\u{1f}"),
                d.llama_device
            );
            let observation = Observation {
                key: DeviceKey {
                    architecture: architecture.to_owned(),
                    backend: build.backend,
                    device_model: device_model.clone(),
                },
                source: Source::DryRun,
                model: model.to_owned(),
                at_ms,
                estimated: estimated(ours),
                observed_terms: Some(theirs),
                observed_total_bytes: theirs
                    .weights_bytes
                    .saturating_add(theirs.kv_bytes)
                    .saturating_add(theirs.compute_bytes),
            };
            Some((dedupe, observation))
        })
        .collect()
}

/// A GPU engine's plan per GPU as it starts, kept until the engine is measured.
#[derive(Clone, Debug)]
pub struct StartEstimate {
    pub architecture: String,
    pub backend: Backend,
    pub model: String,
    /// GPU index, its model, the planned terms.
    pub gpus: Vec<(u32, String, Terms)>,
}

/// The plan of `options` for the model on the GPUs as NVML reads them now, for a llama.cpp-style
/// build with a GPU backend (the engines whose memory the planner predicts); `None` otherwise or
/// when the header cannot be read (the engine will say why itself).
pub fn estimate_at_start(
    model: &Path,
    options: &PlacementOptions,
    build: &EngineBuild,
    gpus: &GpuReadout,
) -> Option<StartEstimate> {
    let plans_memory = matches!(build.kind, EngineKind::LlamaCpp | EngineKind::IkLlamaCpp);
    if !plans_memory || build.backend == Backend::Cpu {
        return None;
    }
    let shape = load_shape(model).ok()?.shape;
    let mut devices = gpu_devices(gpus, &Margins::default());
    devices.push(DeviceSpec {
        id: DeviceId::Cpu,
        name: HOST_MODEL.to_owned(),
        capacity_bytes: u64::MAX / 4,
        reserve_bytes: 0,
        overhead_bytes: 0,
        bandwidth_bytes_per_s: None,
        link_degraded: false,
        correction: None,
    });
    let plan = crate::placement::plan(&shape, &devices, options).ok()?;
    let models = device_models(Some(gpus));
    let planned = plan
        .devices
        .iter()
        .filter_map(|d| {
            let DeviceId::Gpu(index) = d.spec.id else {
                return None;
            };
            let terms = estimated(d);
            let holds = terms.weights_bytes > 0 || terms.kv_bytes > 0;
            let (_, name) = models.iter().find(|(id, _)| *id == d.spec.id)?;
            holds.then(|| (index, name.clone(), terms))
        })
        .collect::<Vec<_>>();
    (!planned.is_empty()).then(|| StartEstimate {
        architecture: shape.architecture,
        backend: build.backend,
        model: model.display().to_string(),
        gpus: planned,
    })
}

/// Records of an engine measured after load: per planned GPU, what its processes held there.
/// `run` names the engine run (a restart is a new run, a new record).
pub fn from_measured(
    estimate: &StartEstimate,
    held: &[Held],
    run: &str,
    at_ms: i64,
) -> Vec<(String, Observation)> {
    estimate
        .gpus
        .iter()
        .filter_map(|(gpu, device_model, terms)| {
            let bytes: u64 = held.iter().filter(|h| h.gpu == *gpu).map(|h| h.bytes).sum();
            (bytes > 0).then(|| {
                let observation = Observation {
                    key: DeviceKey {
                        architecture: estimate.architecture.clone(),
                        backend: estimate.backend,
                        device_model: device_model.clone(),
                    },
                    source: Source::Measured,
                    model: estimate.model.clone(),
                    at_ms,
                    estimated: *terms,
                    observed_terms: None,
                    observed_total_bytes: bytes,
                };
                (format!("measured|{run}|{gpu}"), observation)
            })
        })
        .collect()
}
