//! The releases of each engine that the package index serves, set against the installed builds:
//! vLLM's and SGLang's own packages, and the packages llama.cpp's and ik_llama.cpp's sources come
//! in. A release newer than the bundled pin and than every build is what "a newer source is
//! available" means; it builds beside the builds already there (its folder is named by its own
//! label), which stay until removed.

use std::time::Duration;

use serde::Serialize;

use super::package_index::{self, IndexError, Timeouts};
use super::registry::EngineBuild;
use super::{python_env, source, EngineKind};

/// One engine's releases on the index, against what is installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineReleases {
    pub kind: EngineKind,
    /// The package on the index: `vllm`, or `llama-cpp-python` for llama.cpp's source.
    pub package: String,
    /// Final releases on the index, newest first.
    pub versions: Vec<String>,
    /// The bundled source's version (llama.cpp, ik_llama.cpp); `None` for vLLM and SGLang.
    pub pinned: Option<String>,
    /// The releases the installed builds of this kind came from, newest first.
    pub installed: Vec<String>,
    /// Releases newer than the pin and than every installed build, newest first.
    pub newer: Vec<String>,
}

/// The package `kind`'s releases are published as.
pub fn index_package(kind: EngineKind) -> Option<String> {
    python_env::package_name(kind)
        .map(str::to_owned)
        .or_else(|| source::pinned_source(kind).map(|pin| pin.package.to_string()))
}

/// The final releases of `package` on the index (`index_url`, else pip's own setting, else
/// PyPI), newest first.
pub async fn listed_versions(
    package: &str,
    index_url: Option<&str>,
) -> Result<Vec<String>, IndexError> {
    let index = package_index::resolve_index_url(index_url).await;
    let index = package_index::parse_index_url(&index)?;
    let timeouts = Timeouts {
        total: Duration::from_secs(60),
        ..Timeouts::default()
    };
    let client = package_index::client(&timeouts)?;
    package_index::project_versions(&client, &index, package, &timeouts).await
}

/// `kind`'s releases on the index against `builds` (every installed build; other kinds are
/// ignored).
pub async fn engine_releases(
    kind: EngineKind,
    index_url: Option<&str>,
    builds: &[EngineBuild],
) -> Result<EngineReleases, IndexError> {
    let Some(package) = index_package(kind) else {
        return Ok(compare(kind, String::new(), Vec::new(), builds));
    };
    let versions = listed_versions(&package, index_url).await?;
    Ok(compare(kind, package, versions, builds))
}

/// Sets the listed `versions` against the pin and the installed builds of `kind`.
pub fn compare(
    kind: EngineKind,
    package: String,
    versions: Vec<String>,
    builds: &[EngineBuild],
) -> EngineReleases {
    let pin = source::pinned_source(kind);
    let mut installed: Vec<String> = builds
        .iter()
        .filter(|b| b.kind == kind)
        .filter_map(|b| match pin {
            Some(pin) => pin.release_of_build(&b.version),
            None => Some(b.version.clone()),
        })
        .filter(|v| package_index::release_numbers(v).is_some())
        .collect();
    installed.sort_unstable_by_key(|v| std::cmp::Reverse(package_index::release_numbers(v)));
    installed.dedup();
    let pinned = pin.map(|p| p.version.to_string());
    let newest_had = pinned
        .iter()
        .chain(&installed)
        .filter_map(|v| package_index::release_numbers(v))
        .max();
    let newer = versions
        .iter()
        .filter(|v| package_index::release_numbers(v) > newest_had)
        .cloned()
        .collect();
    EngineReleases {
        kind,
        package,
        versions,
        pinned,
        installed,
        newer,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::capabilities::Capabilities;
    use crate::registry::{Availability, BuildOrigin};
    use crate::Backend;

    fn build(kind: EngineKind, version: &str) -> EngineBuild {
        EngineBuild {
            id: 1,
            kind,
            version: version.to_owned(),
            backend: Backend::Cpu,
            cuda_architectures: None,
            location: PathBuf::from("/x"),
            capabilities: Capabilities::default(),
            source: BuildOrigin::Built,
            created_at_ms: 0,
            status: Availability::Ready,
        }
    }

    fn listed(versions: &[&str]) -> Vec<String> {
        versions.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn a_release_newer_than_the_pin_is_offered_until_it_is_built() {
        let index = listed(&["0.3.40", "0.3.38", "0.3.36", "0.3.2"]);
        let pinned_only = [build(EngineKind::LlamaCpp, "0c1e570")];
        let r = compare(
            EngineKind::LlamaCpp,
            "llama-cpp-python".into(),
            index.clone(),
            &pinned_only,
        );
        assert_eq!(r.pinned.as_deref(), Some("0.3.36"));
        assert_eq!(r.installed, ["0.3.36"]);
        assert_eq!(r.newer, ["0.3.40", "0.3.38"]);

        // Built side by side: the newest is had, the older build stays listed as installed.
        let both = [
            build(EngineKind::LlamaCpp, "0c1e570"),
            build(EngineKind::LlamaCpp, "py0.3.40"),
        ];
        let r = compare(EngineKind::LlamaCpp, "p".into(), index, &both);
        assert_eq!(r.installed, ["0.3.40", "0.3.36"]);
        assert!(r.newer.is_empty(), "{:?}", r.newer);
    }

    #[test]
    fn builds_from_a_users_own_source_and_other_kinds_do_not_count() {
        let builds = [
            build(EngineKind::LlamaCpp, "src-0123456789ab"),
            build(EngineKind::LlamaCpp, "local-01234567"),
            build(EngineKind::IkLlamaCpp, "py0.9.9"),
        ];
        let r = compare(
            EngineKind::LlamaCpp,
            "p".into(),
            listed(&["0.3.37"]),
            &builds,
        );
        assert!(r.installed.is_empty());
        assert_eq!(r.newer, ["0.3.37"]);

        let r = compare(
            EngineKind::IkLlamaCpp,
            "p".into(),
            listed(&["0.1.6", "0.1.5"]),
            &builds,
        );
        assert_eq!(r.installed, ["0.9.9"]);
        assert!(r.newer.is_empty());
    }

    #[test]
    fn python_engines_compare_with_the_installed_package_version() {
        let builds = [build(EngineKind::Vllm, "0.33.0")];
        let r = compare(
            EngineKind::Vllm,
            "vllm".into(),
            listed(&["0.34.1", "0.33.0", "0.32.0"]),
            &builds,
        );
        assert_eq!(r.pinned, None);
        assert_eq!(r.newer, ["0.34.1"]);
        // Nothing installed yet: every listed release is "newer" than nothing.
        let r = compare(
            EngineKind::Sglang,
            "sglang".into(),
            listed(&["0.5.23"]),
            &[],
        );
        assert_eq!(r.newer, ["0.5.23"]);
    }
}
