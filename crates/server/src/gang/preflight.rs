//! What each member of a gang checks on its own box before anything starts: an engine of the
//! same kind and version as the head's, the model at the same path, and the chosen interface
//! present with a private address. The head runs it for itself and asks each follower's rig
//! for it over the fleet channel (`POST /api/v1/gang/check`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rigdeck_core::engines::registry::{Availability, EngineBuild};
use rigdeck_core::engines::EngineKind;
use rigdeck_core::network_interfaces;
use rigdeck_core::store::Store;
use serde::{Deserialize, Serialize};

/// What a member must have: the head's engine and model, and its interface (a rig that only
/// lends devices over RPC needs neither model nor interface).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckRequest {
    pub kind: EngineKind,
    pub version: String,
    #[serde(default)]
    pub model: Option<PathBuf>,
    #[serde(default)]
    pub interface: Option<String>,
}

/// What the member found: its build and address, or each problem in words (which name the
/// box only as "this rig": the head says which rig answered).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckAnswer {
    pub build_id: Option<i64>,
    pub address: Option<IpAddr>,
    pub problems: Vec<String>,
    /// The model is not at its path here (one of the problems): the head may offer its download.
    #[serde(default)]
    pub model_missing: bool,
}

/// Runs the checks on this box.
pub async fn check_here(store: &Store, request: &CheckRequest) -> CheckAnswer {
    let mut answer = CheckAnswer::default();
    match store.engine_builds().await {
        Ok(builds) => match matching_build(&builds, request.kind, &request.version) {
            Ok(build) => answer.build_id = Some(build.id),
            Err(problem) => answer.problems.push(problem),
        },
        Err(err) => answer
            .problems
            .push(format!("cannot read its engine builds: {err}")),
    }
    if let Some(problem) = request.model.as_deref().and_then(model_problem) {
        answer.problems.push(problem);
        answer.model_missing = true;
    }
    if let Some(interface) = &request.interface {
        match network_interfaces::private_address(interface) {
            Ok(address) => answer.address = Some(address),
            Err(problem) => answer
                .problems
                .push(format!("cannot carry the engine's traffic: {problem}")),
        }
    }
    answer
}

/// The installed build of `kind` at `version`; otherwise a problem naming both versions.
pub fn matching_build<'a>(
    builds: &'a [EngineBuild],
    kind: EngineKind,
    version: &str,
) -> Result<&'a EngineBuild, String> {
    let usable = || {
        builds
            .iter()
            .filter(move |b| b.kind == kind && b.status != Availability::Missing)
    };
    if let Some(build) = usable().find(|b| b.version == version) {
        return Ok(build);
    }
    let found: Vec<&str> = usable().map(|b| b.version.as_str()).collect();
    Err(if found.is_empty() {
        format!("has no {kind} installed: install {kind} {version} there (Engines → Install), the version the head runs")
    } else {
        format!(
            "has {kind} {} but the head runs {kind} {version}: every box needs the same version (install {version} there, or the same as it on the head)",
            found.join(", ")
        )
    })
}

/// The model must be at the same path on every box.
fn model_problem(model: &Path) -> Option<String> {
    let present = model.join("config.json").is_file() || model.is_file();
    (!present).then(|| {
        format!(
            "has no model at '{}': every box reads the model from the same path",
            model.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_is_named_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("m");
        assert!(model_problem(&folder).unwrap().contains("has no model at"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("config.json"), "{}").unwrap();
        assert!(model_problem(&folder).is_none());
    }
}
