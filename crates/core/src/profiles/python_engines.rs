//! Launch profiles on vLLM and SGLang environments: their command lines (`vllm serve …`,
//! `python -m sglang.launch_server …`), what a profile must hold for them, and their planned
//! memory. Both preallocate a fixed share of each GPU they use (weights, then KV cache in the
//! rest), so the plan is that share of each GPU's total, not a per-layer sum as for llama.cpp.

use std::path::Path;

use super::admission::PlannedGpu;
use super::engine_settings;
use super::multi_node;
use super::profile::{LaunchProfile, ProfileError};
use super::speculative;
use crate::engines::registry::EngineBuild;
use crate::engines::EngineKind;
use rigdeck_telemetry::snapshot::GpuReadout;

/// The GPU share planned when the profile sets none: vLLM's `--gpu-memory-utilization`
/// default; SGLang picks its own `--mem-fraction-static` by GPU size, close to it.
pub const DEFAULT_GPU_MEMORY_FRACTION: f64 = 0.9;

/// The engine's own names for what a profile sets.
struct Flags {
    model: &'static str,
    context: &'static str,
    tensor_parallel: &'static str,
    memory_fraction: &'static str,
    /// Other spellings of the same options (refused in the extra arguments).
    aliases: &'static [&'static str],
}

fn flags(kind: EngineKind) -> Option<Flags> {
    match kind {
        EngineKind::Vllm => Some(Flags {
            model: "--model",
            context: "--max-model-len",
            tensor_parallel: "--tensor-parallel-size",
            memory_fraction: "--gpu-memory-utilization",
            aliases: &["-tp"],
        }),
        EngineKind::Sglang => Some(Flags {
            model: "--model-path",
            context: "--context-length",
            tensor_parallel: "--tp-size",
            memory_fraction: "--mem-fraction-static",
            aliases: &["--tp", "--model"],
        }),
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => None,
    }
}

/// The argv (program first) that serves `profile` from the environment `build` on `port` (a
/// number, or the placeholder a profile view shows). `None` for llama.cpp builds.
pub fn argv(
    profile: &LaunchProfile,
    build: &EngineBuild,
    port: &str,
) -> Result<Option<Vec<String>>, ProfileError> {
    let Some(flags) = flags(build.kind) else {
        return Ok(None);
    };
    let bin = build.location.join("bin");
    let model = profile.model.display().to_string();
    let mut argv = match build.kind {
        EngineKind::Vllm => vec![
            bin.join("vllm").display().to_string(),
            "serve".into(),
            model,
        ],
        _ => vec![
            bin.join("python").display().to_string(),
            "-m".into(),
            "sglang.launch_server".into(),
            flags.model.into(),
            model,
        ],
    };
    let mut push = |flag: &str, value: String| argv.extend([flag.to_owned(), value]);
    push("--host", profile.host.clone());
    push("--port", port.to_owned());
    // The gateway forwards requests with the profile's name as `model`, which both check.
    push("--served-model-name", profile.name.clone());
    if profile.placement.context > 0 {
        push(flags.context, profile.placement.context.to_string());
    }
    let tp = match &profile.seat {
        Some(seat) => Some(multi_node::tensor_parallel(
            profile.tensor_parallel.unwrap_or(1),
            seat,
        )),
        None => profile.tensor_parallel,
    };
    if let Some(tp) = tp {
        push(flags.tensor_parallel, tp.to_string());
    }
    if let Some(fraction) = profile.gpu_memory_fraction {
        push(flags.memory_fraction, fraction.to_string());
    }
    if let Some(key) = &profile.api_key {
        push("--api-key", key.clone());
    }
    argv.extend(engine_settings::python_args(&profile.engine, build.kind));
    if let Some(spec) = &profile.speculative {
        argv.extend(speculative::args(spec, build)?);
    }
    if let Some(seat) = &profile.seat {
        argv.extend(multi_node::args(build.kind, seat));
    }
    argv.extend(profile.extra_args.iter().cloned());
    Ok(Some(argv))
}

/// What a vLLM or SGLang profile must hold; llama.cpp-only settings are refused by name.
pub fn validate(profile: &LaunchProfile, build: &EngineBuild) -> Result<(), ProfileError> {
    let Some(flags) = flags(build.kind) else {
        return Ok(());
    };
    let kind = build.kind.to_string();
    if !is_servable(&profile.model) {
        return Err(ProfileError::NotServable {
            path: profile.model.clone(),
            kind,
        });
    }
    let llama_only = [
        (
            !profile.placement.overrides.is_empty(),
            "tensor overrides (-ot)",
        ),
        (profile.placement.n_gpu_layers.is_some(), "-ngl"),
        (profile.reasoning.is_some(), "the reasoning default"),
        (profile.numa_node.is_some(), "the NUMA binding"),
    ];
    if let Some((_, setting)) = llama_only.iter().find(|(set, _)| *set) {
        return Err(ProfileError::LlamaOnly { setting, kind });
    }
    if let Some(fraction) = profile.gpu_memory_fraction {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(ProfileError::BadMemoryFraction { fraction });
        }
    }
    if profile.tensor_parallel == Some(0) {
        return Err(ProfileError::BadTensorParallel);
    }
    let managed = [
        flags.model,
        flags.context,
        flags.tensor_parallel,
        flags.memory_fraction,
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
    ];
    let settings = engine_settings::managed_flags(build.kind);
    let seat_flags: &[&str] = match profile.multi_node {
        Some(_) => &multi_node::MANAGED_FLAGS,
        None => &[],
    };
    for arg in &profile.extra_args {
        let flag = arg.split('=').next().unwrap_or(arg);
        if seat_flags.contains(&flag) {
            return Err(ProfileError::ManagedFlag {
                flag: flag.to_owned(),
                field: "multi_node",
            });
        }
        if managed.contains(&flag) || flags.aliases.contains(&flag) || settings.contains(&flag) {
            return Err(ProfileError::ManagedFlag {
                flag: flag.to_owned(),
                field: "the profile's own settings",
            });
        }
    }
    Ok(())
}

/// A Hugging Face model folder (`config.json` beside the weights) or a GGUF file.
fn is_servable(model: &Path) -> bool {
    model.join("config.json").is_file()
        || (model.is_file() && model.extension().is_some_and(|e| e == "gguf"))
}

/// The share of each GPU the engine preallocates: the first `tensor_parallel` (default 1) of
/// the GPUs it sees, which are those `CUDA_VISIBLE_DEVICES` names (NVML indices, the order
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID` gives CUDA) or all of them.
pub fn planned_memory(profile: &LaunchProfile, gpus: &GpuReadout) -> Vec<PlannedGpu> {
    let fraction = profile
        .gpu_memory_fraction
        .unwrap_or(DEFAULT_GPU_MEMORY_FRACTION);
    let visible: Vec<u32> = match profile.env.get("CUDA_VISIBLE_DEVICES") {
        Some(list) => list
            .split(',')
            .filter_map(|i| i.trim().parse().ok())
            .collect(),
        None => gpus.gpus.iter().map(|g| g.index).collect(),
    };
    let used = profile.tensor_parallel.unwrap_or(1) as usize;
    visible
        .iter()
        .take(used)
        .filter_map(|index| gpus.gpus.iter().find(|g| g.index == *index))
        .filter_map(|gpu| {
            let total = gpu.memory.as_ref()?.total_bytes;
            Some(PlannedGpu {
                gpu: gpu.index,
                bytes: (total as f64 * fraction) as u64,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::profiles::profile::tests::{build, profile};
    use rigdeck_telemetry::snapshot::{DriverState, GpuMemory, GpuSnapshot};

    const GIB: u64 = 1 << 30;

    fn env_build(kind: EngineKind) -> EngineBuild {
        EngineBuild {
            kind,
            ..build("/data/engines/venv", &[])
        }
    }

    /// A model folder as vLLM and SGLang read it.
    fn model_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        dir
    }

    #[test]
    fn vllm_serves_the_folder_with_its_own_flag_names() {
        let mut p = profile(Path::new("/models/Qwen3-8B"));
        p.tensor_parallel = Some(2);
        p.gpu_memory_fraction = Some(0.85);
        p.api_key = Some("k".into());
        p.extra_args = vec!["--enable-prefix-caching".into()];
        let argv = argv(&p, &env_build(EngineKind::Vllm), "8000")
            .unwrap()
            .unwrap();
        assert_eq!(
            argv,
            [
                "/data/engines/venv/bin/vllm",
                "serve",
                "/models/Qwen3-8B",
                "--host",
                "127.0.0.1",
                "--port",
                "8000",
                "--served-model-name",
                "qwen",
                "--max-model-len",
                "4096",
                "--tensor-parallel-size",
                "2",
                "--gpu-memory-utilization",
                "0.85",
                "--api-key",
                "k",
                "--enable-prefix-caching",
            ]
        );
    }

    #[test]
    fn sglang_runs_its_launch_server_module() {
        let mut p = profile(Path::new("/models/m"));
        p.placement.context = 0; // the model's own
        p.tensor_parallel = Some(4);
        let argv = argv(&p, &env_build(EngineKind::Sglang), "30000")
            .unwrap()
            .unwrap();
        assert_eq!(
            argv,
            [
                "/data/engines/venv/bin/python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "/models/m",
                "--host",
                "127.0.0.1",
                "--port",
                "30000",
                "--served-model-name",
                "qwen",
                "--tp-size",
                "4",
            ]
        );
        assert!(argv_of_llama_is_none());
    }

    fn argv_of_llama_is_none() -> bool {
        argv(
            &profile(Path::new("/m.gguf")),
            &build("/llama-server", &[]),
            "1",
        )
        .unwrap()
        .is_none()
    }

    #[test]
    fn validation_names_llama_only_settings_and_bad_values() {
        let folder = model_folder();
        let vllm = env_build(EngineKind::Vllm);
        let ok = profile(folder.path());
        assert!(validate(&ok, &vllm).is_ok());
        let problem = |change: &dyn Fn(&mut LaunchProfile)| {
            let mut p = ok.clone();
            change(&mut p);
            validate(&p, &vllm).unwrap_err().to_string()
        };
        assert!(problem(&|p| p.model = PathBuf::from("/no/such/model"))
            .contains("serves a model folder (config.json beside the weights) or a .gguf file"));
        assert!(problem(&|p| p.placement.n_gpu_layers = Some(10))
            .starts_with("-ngl is a llama.cpp setting; vllm has no such option"));
        assert!(problem(&|p| p.reasoning = Some(true)).contains("reasoning default"));
        assert!(problem(&|p| p.gpu_memory_fraction = Some(1.5)).contains("not between 0 and 1"));
        assert!(problem(&|p| p.tensor_parallel = Some(0)).contains("at least 1"));
        assert!(problem(&|p| p.extra_args = vec!["--port=9".into()]).contains("'--port'"));
        assert!(problem(&|p| p.extra_args = vec!["-tp".into(), "2".into()]).contains("'-tp'"));
        // A GGUF file is servable too.
        let gguf = folder.path().join("m.gguf");
        std::fs::write(&gguf, b"GGUF").unwrap();
        assert!(validate(&profile(&gguf), &vllm).is_ok());
    }

    fn rig(totals_gib: &[u64]) -> GpuReadout {
        GpuReadout {
            driver: DriverState::Ready {
                driver_version: None,
                cuda_driver_version: None,
            },
            gpus: totals_gib
                .iter()
                .enumerate()
                .map(|(i, gib)| GpuSnapshot {
                    memory: Some(GpuMemory {
                        total_bytes: gib * GIB,
                        used_bytes: 0,
                        free_bytes: gib * GIB,
                    }),
                    ..GpuSnapshot::blank(i as u32)
                })
                .collect(),
        }
    }

    #[test]
    fn planned_memory_is_the_share_of_each_gpu_it_uses() {
        let gpus = rig(&[24, 24, 48, 48]);
        let mut p = profile(Path::new("/m"));
        let plan = planned_memory(&p, &gpus);
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].gpu, plan[0].bytes), (0, (24 * GIB) * 9 / 10));
        p.tensor_parallel = Some(2);
        p.gpu_memory_fraction = Some(0.5);
        p.env.insert("CUDA_VISIBLE_DEVICES".into(), "3, 2".into());
        let plan = planned_memory(&p, &gpus);
        let got: Vec<(u32, u64)> = plan.iter().map(|g| (g.gpu, g.bytes)).collect();
        assert_eq!(got, [(3, 24 * GIB), (2, 24 * GIB)]);
    }
}
