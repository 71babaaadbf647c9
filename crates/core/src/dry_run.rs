//! The planner's figures next to llama.cpp's own: a plan's llama-server flags are given to
//! `llama-fit-params` of a registered build (the dry run), and its per-device table is set
//! beside ours. Results are cached per (model file version, flags, build), and one dry run runs
//! at a time, so asking again costs nothing and a burst of requests cannot load the machine.

use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::engines::fit_params::{self, DeviceMemory, DryRun};
use crate::engines::registry::{Availability, EngineBuild};
use crate::engines::{Backend, EngineKind};
use crate::placement::plan::DevicePlan;
use crate::placement::DeviceId;

/// Longest a dry run may take (it reads headers only; seconds are normal).
const DRY_RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Results kept; past this the cache starts over.
const CACHED_RUNS: usize = 128;

/// Ours against llama.cpp's, for one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceComparison {
    pub id: DeviceId,
    /// Our device's name, and llama.cpp's name for it.
    pub device: String,
    pub llama_device: String,
    pub ours: Figures,
    pub llama_cpp: Figures,
}

#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub model_bytes: u64,
    pub context_bytes: u64,
    /// Ours: after this rig's correction, as the plan counts it.
    pub compute_bytes: u64,
    /// Ours: the estimate before the correction; llama.cpp's: its figure.
    pub compute_estimate_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BuildRef {
    pub id: i64,
    pub version: String,
    pub backend: Backend,
}

/// A dry run's answer: the table compared with ours, or why there is none.
#[derive(Clone, Debug, Serialize)]
pub struct DryRunOutcome {
    pub build: Option<BuildRef>,
    pub dry_run: Option<DryRun>,
    pub devices: Vec<DeviceComparison>,
    pub error: Option<String>,
    /// llama.cpp itself ran and refused the plan (unknown architecture, a cache type the head
    /// size does not allow…): llama-server would refuse to start with these flags too.
    #[serde(default)]
    pub refused: bool,
}

#[derive(Clone)]
pub struct DryRuns {
    cache: Arc<Mutex<HashMap<String, Arc<DryRunOutcome>>>>,
    one_at_a_time: Arc<Semaphore>,
}

impl Default for DryRuns {
    fn default() -> Self {
        DryRuns {
            cache: Arc::default(),
            one_at_a_time: Arc::new(Semaphore::new(1)),
        }
    }
}

impl DryRuns {
    /// llama.cpp's figures for a plan of `model` (a local file, or an http(s) address whose
    /// headers are mirrored into a sparse local copy for the run and deleted after) made with
    /// `args` on the devices `plan`, from the best registered build for them.
    pub async fn run(
        &self,
        builds: &[EngineBuild],
        model: &str,
        args: &[String],
        plan: &[DevicePlan],
    ) -> Arc<DryRunOutcome> {
        let wants_gpu = plan.iter().any(|d| matches!(d.spec.id, DeviceId::Gpu(_)));
        let Some((build, bin)) = choose_build(builds, wants_gpu) else {
            return Arc::new(failed(None, "no llama.cpp build with llama-fit-params is registered for this rig: build the bundled llama.cpp on the Engines page (for the GPUs' backend)".into()));
        };
        let key = cache_key(model, args, build.id);
        if let Some(done) = self.lock().get(&key) {
            return done.clone();
        }
        let _turn = self.one_at_a_time.acquire().await;
        if let Some(done) = self.lock().get(&key) {
            return done.clone();
        }
        let build_ref = BuildRef {
            id: build.id,
            version: build.version.clone(),
            backend: build.backend,
        };
        let outcome = match run_on_disk(&bin, model, args).await {
            Ok(dry_run) => DryRunOutcome {
                devices: compare(plan, &dry_run.devices),
                build: Some(build_ref),
                dry_run: Some(dry_run),
                error: None,
                refused: false,
            },
            Err(e) => DryRunOutcome {
                refused: e.refused,
                ..failed(Some(build_ref), e.message)
            },
        };
        let outcome = Arc::new(outcome);
        // A timeout or a build that would not start may pass next time: only answers are kept.
        if outcome.error.is_some() && !outcome.refused {
            return outcome;
        }
        let mut cache = self.lock();
        if cache.len() >= CACHED_RUNS {
            cache.clear();
        }
        cache.insert(key, outcome.clone());
        outcome
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<DryRunOutcome>>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn failed(build: Option<BuildRef>, error: String) -> DryRunOutcome {
    DryRunOutcome {
        build,
        dry_run: None,
        devices: Vec::new(),
        error: Some(error),
        refused: false,
    }
}

/// Why a dry run gave no table.
struct NoTable {
    message: String,
    /// llama.cpp ran and said no (not a timeout, not a binary that would not start).
    refused: bool,
}

impl From<String> for NoTable {
    fn from(message: String) -> Self {
        NoTable {
            message,
            refused: false,
        }
    }
}

impl From<fit_params::DryRunError> for NoTable {
    fn from(e: fit_params::DryRunError) -> Self {
        NoTable {
            refused: matches!(e, fit_params::DryRunError::Failed { .. }),
            message: e.to_string(),
        }
    }
}

/// Runs the dry run on the model as given, or on a sparse mirror of a remote one.
async fn run_on_disk(bin: &Path, model: &str, args: &[String]) -> Result<DryRun, NoTable> {
    if !(model.starts_with("http://") || model.starts_with("https://")) {
        return Ok(fit_params::run(bin, args, DRY_RUN_TIMEOUT).await?);
    }
    let headers = rigdeck_gguf::remote::HttpReader::new()
        .read_model(model)
        .await
        .map_err(|e| format!("reading the headers for the dry run: {e}"))?;
    let dir =
        tempfile::tempdir().map_err(|e| format!("no temporary folder for the dry run: {e}"))?;
    let mirror = {
        let dir = dir.path().to_owned();
        tokio::task::spawn_blocking(move || {
            rigdeck_gguf::mirror::write_sparse_mirror(&headers, &dir, "model")
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("writing the sparse copy for the dry run: {e}"))?
    };
    let local = mirror.display().to_string();
    let args: Vec<String> = args
        .iter()
        .map(|a| if a == model { local.clone() } else { a.clone() })
        .collect();
    let result = fit_params::run(bin, &args, DRY_RUN_TIMEOUT).await;
    drop(dir); // the sparse copy goes with its folder
    Ok(result?)
}

/// The backend of the build a dry run of a plan would use (and so the backend this rig's
/// records for the plan are kept under); `None` when no build can run one.
pub fn planning_backend(builds: &[EngineBuild], plan_has_gpus: bool) -> Option<Backend> {
    choose_build(builds, plan_has_gpus).map(|(b, _)| b.backend)
}

/// A ready llama.cpp build that has `llama-fit-params`: for a plan with GPUs a GPU build
/// (CUDA first), else a CPU build first (a CPU build cannot place anything on a GPU).
fn choose_build(
    builds: &[EngineBuild],
    wants_gpu: bool,
) -> Option<(&EngineBuild, std::path::PathBuf)> {
    let rank = |backend: Backend| match (wants_gpu, backend) {
        (true, Backend::Cuda) | (false, Backend::Cpu) => 0,
        (true, Backend::Vulkan | Backend::Rocm) => 1,
        (true, Backend::Cpu) => 9,
        (false, _) => 2,
    };
    builds
        .iter()
        .filter(|b| b.kind == EngineKind::LlamaCpp && b.status == Availability::Ready)
        .filter(|b| !(wants_gpu && b.backend == Backend::Cpu))
        .filter_map(|b| fit_params::fit_params_beside(&b.location).map(|bin| (b, bin)))
        .min_by_key(|(b, _)| (rank(b.backend), -b.created_at_ms))
}

/// The model's version (a file's path, size and modification time; an address as given: a
/// hub address holds its commit), the flags and the build.
fn cache_key(model: &str, args: &[String], build: i64) -> String {
    let stamp = std::fs::metadata(model)
        .map(|m| {
            let modified = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis());
            format!("{}:{modified}", m.len())
        })
        .unwrap_or_default();
    format!("{model}|{stamp}|{build}|{}", args.join("\u{1f}"))
}

/// Pairs our devices with llama.cpp's names for them: `CUDA<n>`/`Vulkan<n>`/`ROCm<n>` is GPU
/// n, `Host` (or `CPU`) is the CPU.
fn compare(plan: &[DevicePlan], theirs: &[DeviceMemory]) -> Vec<DeviceComparison> {
    theirs
        .iter()
        .filter_map(|t| {
            let id = llama_device_id(&t.device)?;
            let ours = plan.iter().find(|d| d.spec.id == id)?;
            Some(DeviceComparison {
                id,
                device: ours.spec.name.clone(),
                llama_device: t.device.clone(),
                ours: Figures {
                    model_bytes: ours.usage.weights_bytes,
                    context_bytes: ours.usage.kv_bytes,
                    compute_bytes: ours.usage.compute_bytes,
                    compute_estimate_bytes: ours.usage.compute_estimate_bytes,
                },
                llama_cpp: Figures {
                    model_bytes: t.model_bytes,
                    context_bytes: t.context_bytes,
                    compute_bytes: t.compute_bytes,
                    compute_estimate_bytes: t.compute_bytes,
                },
            })
        })
        .collect()
}

fn llama_device_id(name: &str) -> Option<DeviceId> {
    if matches!(name, "Host" | "CPU") {
        return Some(DeviceId::Cpu);
    }
    let digits = name.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let prefix = &name[..name.len() - digits.len()];
    match prefix {
        "CUDA" | "Vulkan" | "ROCm" => digits.parse().ok().map(DeviceId::Gpu),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_device_names_map_to_ours() {
        assert_eq!(llama_device_id("Host"), Some(DeviceId::Cpu));
        assert_eq!(llama_device_id("CUDA0"), Some(DeviceId::Gpu(0)));
        assert_eq!(llama_device_id("Vulkan12"), Some(DeviceId::Gpu(12)));
        assert_eq!(llama_device_id("Metal"), None);
        assert_eq!(llama_device_id("CUDA"), None);
    }
}
