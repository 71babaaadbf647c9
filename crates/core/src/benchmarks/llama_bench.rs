//! llama.cpp's own `llama-bench` for a launch profile: the bundled binary beside the profile's
//! llama-server, the profile's flags translated to llama-bench's syntax (the ones a server alone
//! uses are listed as dropped), the profile's environment (`CUDA_VISIBLE_DEVICES` …), and pp/tg
//! tests at depth, stored with the run like a serving benchmark's steps.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::Target;
use crate::bench::llama_bench::{self, LlamaBenchSpec};
use crate::engines::EngineKind;
use crate::launch::Instances;
use crate::profiles::profile;
use crate::store::Store;

/// What runs: the argv, the environment, and the profile flags llama-bench has no use for.
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dropped: Vec<String>,
}

impl Prepared {
    /// Stored in the run's context.
    pub fn context(&self) -> Value {
        json!({
            "command_line": profile::display_command_line(&self.argv),
            "dropped": self.dropped,
        })
    }
}

/// The llama-bench command for the profile a target names; the message names the fix.
pub async fn prepare(
    profiles: &Store,
    instances: Option<&Instances>,
    target: &Target,
    spec: &LlamaBenchSpec,
) -> Result<Prepared, String> {
    let name = match target {
        Target::Profile { name } | Target::Instance { name } => name,
        _ => return Err(
            "llama-bench runs a profile's model file with its flags: pick a profile as the target"
                .into(),
        ),
    };
    let profile = profiles
        .launch_profile(name)
        .await
        .map_err(|e| e.to_string())?;
    let build = profiles
        .engine_build(profile.engine_build_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "profile '{name}' uses engine build {}, which is not installed",
                profile.engine_build_id
            )
        })?;
    if !matches!(build.kind, EngineKind::LlamaCpp | EngineKind::IkLlamaCpp) {
        return Err(format!(
            "llama-bench is llama.cpp's; profile '{name}' runs {}: run a serving benchmark instead",
            build.kind
        ));
    }
    let program = bench_binary(&build.location).ok_or_else(|| {
        format!(
            "engine build {} has no llama-bench beside '{}': build llama.cpp again with `rigdeck engines build` (its tools include llama-bench)",
            build.id,
            build.location.display()
        )
    })?;
    if let Some((phase, _, _)) = instances.and_then(|i| i.phase_and_address(name)) {
        if super::is_up(&phase) {
            return Err(format!(
                "'{name}' is running: llama-bench loads the model itself, so the two would share the memory and the cores; stop the instance first, or run a serving benchmark against it"
            ));
        }
    }
    // llama-bench takes no key; the flags it cannot take are listed in the report, masked.
    let server_argv = profile::argv(&profile, &build, 0, None).map_err(|e| e.to_string())?;
    let server_argv = profile::key_masked(&server_argv);
    let (flags, dropped) = llama_bench::bench_flags(server_argv.get(1..).unwrap_or_default());
    Ok(Prepared {
        argv: llama_bench::argv(&program, &flags, spec),
        env: profile.env.into_iter().collect(),
        dropped,
    })
}

/// `llama-bench` in the folder of the build's llama-server.
fn bench_binary(server: &std::path::Path) -> Option<PathBuf> {
    let candidate = server.with_file_name("llama-bench");
    candidate.is_file().then_some(candidate)
}
