//! A launch profile run by one of llama.cpp's own tools (llama-bench, llama-perplexity) instead
//! of its server: the profile a target names, its llama.cpp build, the tool beside the build's
//! llama-server, and the profile's server arguments (the key masked) to translate — refused while
//! the profile's engine runs, since the tool loads the model itself.

use std::path::PathBuf;

use super::Target;
use crate::engines::registry::EngineBuild;
use crate::engines::EngineKind;
use crate::launch::Instances;
use crate::profiles::profile::{self, LaunchProfile};
use crate::store::Store;

/// What a tool needs of a profile.
pub struct ToolTarget {
    pub name: String,
    pub profile: LaunchProfile,
    pub build: EngineBuild,
    /// The tool's binary in the build's folder.
    pub program: PathBuf,
    /// llama-server's arguments for the profile (without the program), the key masked.
    pub server_args: Vec<String>,
}

/// The profile `target` names, checked for `tool`; each message names the fix.
pub async fn resolve(
    profiles: &Store,
    instances: Option<&Instances>,
    target: &Target,
    tool: &str,
) -> Result<ToolTarget, String> {
    let name = match target {
        Target::Profile { name } | Target::Instance { name } => name.clone(),
        _ => {
            return Err(format!(
                "{tool} runs a profile's model file with its flags: pick a profile as the target"
            ))
        }
    };
    let profile = profiles
        .launch_profile(&name)
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
            "{tool} is llama.cpp's; profile '{name}' runs {}: run a serving benchmark instead",
            build.kind
        ));
    }
    let program = build.tool(tool)?;
    if let Some((phase, _, _)) = instances.and_then(|i| i.phase_and_address(&name)) {
        if super::is_up(&phase) {
            return Err(format!(
                "'{name}' is running: {tool} loads the model itself, so the two would share the memory and the cores; stop the instance first, or run a serving benchmark against it"
            ));
        }
    }
    let server_argv = profile::argv(&profile, &build, 0, None).map_err(|e| e.to_string())?;
    let server_args = profile::key_masked(&server_argv)
        .get(1..)
        .unwrap_or_default()
        .to_vec();
    Ok(ToolTarget {
        name,
        profile,
        build,
        program,
        server_args,
    })
}
