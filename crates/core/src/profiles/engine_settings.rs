//! The engine knobs our users tune beyond placement, as named settings instead of free text:
//! CPU pinning and memory locking for llama.cpp and ik_llama.cpp; CPU offload, KV cache type,
//! batching and block size (and the Marlin atomic-add switch) for vLLM, with SGLang's equivalents
//! where it has them. Each is written with the build's own flag; one its engine lacks is refused
//! when the profile is saved.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::profile::ProfileError;
use crate::engines::registry::EngineBuild;
use crate::engines::EngineKind;

/// vLLM reads this switch from the environment: Marlin GPTQ/AWQ kernels reduce with atomic adds,
/// faster on small batches (+6 tok/s in one user's report).
pub const MARLIN_ATOMIC_ADD_ENV: &str = "VLLM_MARLIN_USE_ATOMIC_ADD";

/// ik_llama.cpp's options, short spelling first.
const RUN_TIME_REPACK: &[&str] = &["-rtr", "--run-time-repack"];
const MLA: &[&str] = &["-mla", "--mla-use"];
const ATTN_MAX_BATCH: &[&str] = &["-amb", "--attention-max-batch"];

/// Absent JSON fields take the engine's own defaults (nothing written).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// llama.cpp: `--cpu-mask`, the CPUs the threads may run on, as hex (`ff` = CPUs 0–7).
    pub cpu_mask: Option<String>,
    /// llama.cpp: `--cpu-strict 1`, one thread per CPU of the mask, in order.
    pub cpu_strict: bool,
    /// llama.cpp: keep the weights in RAM, never swapped (`--mlock`, or `--load-mode mlock`).
    pub mlock: bool,
    /// llama.cpp: read the weights into memory instead of mapping the file (`--no-mmap`, or
    /// `--load-mode none`): slower to load, no page cache double-counting.
    pub no_mmap: bool,
    /// ik_llama.cpp: `-rtr`, weights repacked at load for faster CPU matmuls (read into RAM).
    pub run_time_repack: bool,
    /// ik_llama.cpp: `-mla N`, how latent attention (DeepSeek, Kimi, GLM-5) is computed: 1–3.
    pub mla: Option<u8>,
    /// ik_llama.cpp: `-amb N`, the attention compute buffer capped at N MiB.
    pub attn_max_batch_mib: Option<u32>,
    /// vLLM/SGLang: GiB of weights kept in CPU RAM per GPU (`--cpu-offload-gb`).
    pub cpu_offload_gb: Option<f64>,
    /// vLLM/SGLang: KV cache element type (`--kv-cache-dtype`: auto, fp8, fp8_e4m3, fp8_e5m2, …).
    pub kv_cache_dtype: Option<String>,
    /// vLLM `--max-num-seqs`, SGLang `--max-running-requests`: sequences decoded together.
    pub max_num_seqs: Option<u32>,
    /// vLLM `--max-num-batched-tokens`, SGLang `--chunked-prefill-size`: tokens per step.
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM `--block-size`, SGLang `--page-size`: tokens per KV cache block.
    pub block_size: Option<u32>,
    /// vLLM: `VLLM_MARLIN_USE_ATOMIC_ADD=1` in the engine's environment.
    pub marlin_atomic_add: bool,
}

impl EngineSettings {
    /// The settings that only llama.cpp and ik_llama.cpp have, by name, when set.
    fn llama_only(&self) -> Option<&'static str> {
        [
            (self.cpu_mask.is_some(), "cpu_mask (--cpu-mask)"),
            (self.cpu_strict, "cpu_strict (--cpu-strict)"),
            (self.mlock, "mlock"),
            (self.no_mmap, "no_mmap"),
            (self.run_time_repack, "run_time_repack (-rtr)"),
            (self.mla.is_some(), "mla (-mla)"),
            (
                self.attn_max_batch_mib.is_some(),
                "attn_max_batch_mib (-amb)",
            ),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }

    /// The settings that only the Python engines have, by name, when set.
    fn python_only(&self, kind: EngineKind) -> Option<&'static str> {
        [
            (self.cpu_offload_gb.is_some(), "cpu_offload_gb"),
            (self.kv_cache_dtype.is_some(), "kv_cache_dtype"),
            (self.max_num_seqs.is_some(), "max_num_seqs"),
            (
                self.max_num_batched_tokens.is_some(),
                "max_num_batched_tokens",
            ),
            (self.block_size.is_some(), "block_size"),
            (
                self.marlin_atomic_add && kind != EngineKind::Vllm,
                "marlin_atomic_add",
            ),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

/// Checks each set knob against the build's engine and, for llama.cpp, its `--help`.
pub fn validate(settings: &EngineSettings, build: &EngineBuild) -> Result<(), ProfileError> {
    let elsewhere = |setting: &'static str| ProfileError::NotForEngine {
        setting,
        kind: build.kind.to_string(),
    };
    let bad = |reason: String| Err(ProfileError::BadEngineSetting { reason });
    if build.kind.is_python() {
        if let Some(setting) = settings.llama_only() {
            return Err(elsewhere(setting));
        }
        if settings.marlin_atomic_add && build.kind != EngineKind::Vllm {
            return Err(elsewhere("marlin_atomic_add"));
        }
        if let Some(gb) = settings
            .cpu_offload_gb
            .filter(|g| !(g.is_finite() && *g >= 0.0))
        {
            return bad(format!(
                "cpu_offload_gb {gb} is not a size: give GiB, e.g. 24"
            ));
        }
        if let Some(dtype) = &settings.kv_cache_dtype {
            let plain =
                !dtype.is_empty() && dtype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !plain {
                return bad(format!(
                    "kv_cache_dtype {dtype:?} is not a type name: use auto, fp8, fp8_e4m3 or fp8_e5m2"
                ));
            }
        }
        let zero = [
            (settings.max_num_seqs, "max_num_seqs"),
            (settings.max_num_batched_tokens, "max_num_batched_tokens"),
            (settings.block_size, "block_size"),
        ]
        .into_iter()
        .find(|(v, _)| *v == Some(0));
        if let Some((_, name)) = zero {
            return bad(format!(
                "{name} is 0: give a positive number, or leave it unset"
            ));
        }
        return Ok(());
    }
    if let Some(setting) = settings.python_only(build.kind) {
        return Err(elsewhere(setting));
    }
    if let Some(mask) = &settings.cpu_mask {
        let hex = mask.trim_start_matches("0x");
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return bad(format!(
                "cpu_mask {mask:?} is not a hex mask: e.g. ff for CPUs 0–7, ff00 for 8–15"
            ));
        }
    }
    let needs = |wanted: bool, flags: &[&str], setting: &'static str| {
        let options = &build.capabilities.options;
        if wanted && !options.is_empty() && !flags.iter().any(|f| options.contains(*f)) {
            Err(ProfileError::OptionMissing {
                setting,
                flag: flags[0].to_owned(),
                id: build.id,
            })
        } else {
            Ok(())
        }
    };
    needs(
        settings.cpu_mask.is_some(),
        &["--cpu-mask", "-C"],
        "cpu_mask",
    )?;
    needs(settings.cpu_strict, &["--cpu-strict"], "cpu_strict")?;
    needs(settings.mlock, &["--mlock", "--load-mode"], "mlock")?;
    needs(settings.no_mmap, &["--no-mmap", "--load-mode"], "no_mmap")?;
    needs(
        settings.run_time_repack,
        &["-rtr", "--run-time-repack"],
        "run_time_repack",
    )?;
    needs(settings.mla.is_some(), &["-mla", "--mla-use"], "mla")?;
    needs(
        settings.attn_max_batch_mib.is_some(),
        &["-amb", "--attention-max-batch"],
        "attn_max_batch_mib",
    )?;
    if let Some(mode) = settings.mla.filter(|m| !(1..=3).contains(m)) {
        return bad(format!(
            "mla {mode} is not a mode: give 1, 2 or 3 (3 suits most GPUs)"
        ));
    }
    if settings.attn_max_batch_mib == Some(0) {
        return bad("attn_max_batch_mib is 0: give MiB, e.g. 512, or leave it unset".to_owned());
    }
    Ok(())
}

/// llama.cpp and ik_llama.cpp arguments, in the build's spelling.
pub fn llama_args(settings: &EngineSettings, build: &EngineBuild) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(mask) = &settings.cpu_mask {
        argv.extend(["--cpu-mask".to_owned(), mask.clone()]);
    }
    if settings.cpu_strict {
        argv.extend(["--cpu-strict".to_owned(), "1".to_owned()]);
    }
    let caps = &build.capabilities;
    if let Some(flag) = caps
        .spelling(RUN_TIME_REPACK)
        .filter(|_| settings.run_time_repack)
    {
        argv.push(flag.to_owned());
    }
    if let (Some(mode), Some(flag)) = (settings.mla, caps.spelling(MLA)) {
        argv.extend([flag.to_owned(), mode.to_string()]);
    }
    if let (Some(mib), Some(flag)) = (settings.attn_max_batch_mib, caps.spelling(ATTN_MAX_BATCH)) {
        argv.extend([flag.to_owned(), mib.to_string()]);
    }
    if !(settings.mlock || settings.no_mmap) {
        return argv;
    }
    // Current llama.cpp folds both into one loading mode; older trees and ik_llama.cpp have the
    // two switches.
    if !build.capabilities.accepts("--mlock") && build.capabilities.accepts("--load-mode") {
        let mode = match (settings.mlock, settings.no_mmap) {
            (true, false) => "mmap+mlock",
            (true, true) => "mlock",
            _ => "none",
        };
        argv.extend(["--load-mode".to_owned(), mode.to_owned()]);
        return argv;
    }
    if settings.mlock {
        argv.push("--mlock".to_owned());
    }
    if settings.no_mmap {
        argv.push("--no-mmap".to_owned());
    }
    argv
}

/// vLLM and SGLang arguments.
pub fn python_args(settings: &EngineSettings, kind: EngineKind) -> Vec<String> {
    let sglang = kind == EngineKind::Sglang;
    let named = [
        (
            "--cpu-offload-gb",
            settings.cpu_offload_gb.map(|g| g.to_string()),
        ),
        ("--kv-cache-dtype", settings.kv_cache_dtype.clone()),
        (
            if sglang {
                "--max-running-requests"
            } else {
                "--max-num-seqs"
            },
            settings.max_num_seqs.map(|n| n.to_string()),
        ),
        (
            if sglang {
                "--chunked-prefill-size"
            } else {
                "--max-num-batched-tokens"
            },
            settings.max_num_batched_tokens.map(|n| n.to_string()),
        ),
        (
            if sglang {
                "--page-size"
            } else {
                "--block-size"
            },
            settings.block_size.map(|n| n.to_string()),
        ),
    ];
    named
        .into_iter()
        .filter_map(|(flag, value)| Some([flag.to_owned(), value?]))
        .flatten()
        .collect()
}

/// The flags the settings write, refused in a profile's extra arguments.
pub fn managed_flags(kind: EngineKind) -> &'static [&'static str] {
    match kind {
        EngineKind::Vllm => &[
            "--cpu-offload-gb",
            "--kv-cache-dtype",
            "--max-num-seqs",
            "--max-num-batched-tokens",
            "--block-size",
            "--speculative-config",
        ],
        EngineKind::Sglang => &[
            "--cpu-offload-gb",
            "--kv-cache-dtype",
            "--max-running-requests",
            "--chunked-prefill-size",
            "--page-size",
            "--speculative-algorithm",
        ],
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => &[],
    }
}

/// Variables the settings add to the engine's environment (the profile's own `env` wins).
pub fn env(settings: &EngineSettings) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if settings.marlin_atomic_add {
        env.insert(MARLIN_ATOMIC_ADD_ENV.to_owned(), "1".to_owned());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::profile::tests::build;

    #[test]
    fn llama_knobs_use_the_builds_spelling() {
        let settings = EngineSettings {
            cpu_mask: Some("ff00".into()),
            cpu_strict: true,
            mlock: true,
            no_mmap: true,
            ..EngineSettings::default()
        };
        let current = build("/x", &["--cpu-mask", "--cpu-strict", "--load-mode"]);
        assert_eq!(validate(&settings, &current), Ok(()));
        assert_eq!(
            llama_args(&settings, &current),
            [
                "--cpu-mask",
                "ff00",
                "--cpu-strict",
                "1",
                "--load-mode",
                "mlock"
            ]
        );
        let older = build(
            "/x",
            &["--cpu-mask", "--cpu-strict", "--mlock", "--no-mmap"],
        );
        assert_eq!(llama_args(&settings, &older)[4..], ["--mlock", "--no-mmap"]);
        let lacking = build("/x", &["--cpu-mask", "--cpu-strict"]);
        let err = validate(&settings, &lacking).unwrap_err().to_string();
        assert!(err.contains("mlock") && err.contains("--mlock"), "{err}");
    }

    #[test]
    fn ik_llama_knobs_are_refused_on_llama_cpp() {
        let settings = EngineSettings {
            run_time_repack: true,
            mla: Some(3),
            attn_max_batch_mib: Some(512),
            ..EngineSettings::default()
        };
        let ik = build("/ik", &["--run-time-repack", "-mla", "-amb", "--mlock"]);
        assert_eq!(validate(&settings, &ik), Ok(()));
        assert_eq!(
            llama_args(&settings, &ik),
            ["--run-time-repack", "-mla", "3", "-amb", "512"]
        );
        let upstream = build("/llama", &["--cpu-mask", "--load-mode"]);
        let err = validate(&settings, &upstream).unwrap_err().to_string();
        assert!(err.contains("run_time_repack needs `-rtr`"), "{err}");
        let odd = EngineSettings {
            mla: Some(7),
            ..EngineSettings::default()
        };
        assert!(validate(&odd, &ik)
            .unwrap_err()
            .to_string()
            .contains("1, 2 or 3"));
    }

    #[test]
    fn python_knobs_and_their_refusals() {
        let settings = EngineSettings {
            cpu_offload_gb: Some(24.0),
            kv_cache_dtype: Some("fp8".into()),
            max_num_seqs: Some(8),
            max_num_batched_tokens: Some(8192),
            block_size: Some(32),
            marlin_atomic_add: true,
            ..EngineSettings::default()
        };
        let mut vllm = build("/venv", &[]);
        vllm.kind = EngineKind::Vllm;
        assert_eq!(validate(&settings, &vllm), Ok(()));
        assert_eq!(
            python_args(&settings, EngineKind::Vllm),
            [
                "--cpu-offload-gb",
                "24",
                "--kv-cache-dtype",
                "fp8",
                "--max-num-seqs",
                "8",
                "--max-num-batched-tokens",
                "8192",
                "--block-size",
                "32"
            ]
        );
        assert_eq!(env(&settings)[MARLIN_ATOMIC_ADD_ENV], "1");
        let mut sglang = vllm.clone();
        sglang.kind = EngineKind::Sglang;
        let err = validate(&settings, &sglang).unwrap_err().to_string();
        assert!(
            err.contains("marlin_atomic_add") && err.contains("sglang"),
            "{err}"
        );
        let llama = build("/x", &[]);
        let err = validate(&settings, &llama).unwrap_err().to_string();
        assert!(
            err.contains("cpu_offload_gb") && err.contains("llama.cpp"),
            "{err}"
        );
        let pinned = EngineSettings {
            mlock: true,
            ..EngineSettings::default()
        };
        assert!(validate(&pinned, &vllm)
            .unwrap_err()
            .to_string()
            .contains("mlock"));
        let odd = EngineSettings {
            kv_cache_dtype: Some("fp8; rm".into()),
            ..EngineSettings::default()
        };
        assert!(validate(&odd, &vllm)
            .unwrap_err()
            .to_string()
            .contains("not a type name"));
    }
}
