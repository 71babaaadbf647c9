//! What a benchmark is pointed at, and how that becomes an endpoint: a running instance (its
//! own address, engine and key), a launch profile (started for the run), a model through
//! Rigdeck's gateway, or any OpenAI-compatible URL with a key (a cloud baseline).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::bench::{Endpoint, EngineKind as BenchEngine};
use crate::engines::EngineKind;
use crate::launch::Instances;
use crate::profiles::profile::LaunchProfile;
use crate::store::Store;
use crate::supervisor::Phase;

/// A benchmark's target, as the API and the command line give it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// A running instance, by name.
    Instance { name: String },
    /// A launch profile: started for the run when it is not running, stopped after.
    Profile { name: String },
    /// A model (profile name or alias) through the gateway, as clients see it.
    Gateway { model: String },
    /// An OpenAI-compatible base URL (ending in `/v1`).
    Url {
        url: String,
        #[serde(default)]
        api_key: Option<String>,
        model: String,
    },
}

impl Target {
    /// What is stored with the run: never the key.
    pub fn view(&self) -> Value {
        match self {
            Target::Instance { name } => json!({"kind": "instance", "name": name}),
            Target::Profile { name } => json!({"kind": "profile", "name": name}),
            Target::Gateway { model } => json!({"kind": "gateway", "model": model}),
            Target::Url {
                url,
                model,
                api_key,
            } => {
                json!({"kind": "url", "url": url, "model": model, "with_key": api_key.is_some()})
            }
        }
    }

    /// A short label for run names.
    pub fn label(&self) -> String {
        match self {
            Target::Instance { name } | Target::Profile { name } => name.clone(),
            Target::Gateway { model } => format!("gateway/{model}"),
            Target::Url { url, model, .. } => format!("{model} at {url}"),
        }
    }

    /// Checks what can be checked before the run starts; the message names the fix.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Target::Url { url, model, .. } => {
                let parsed = reqwest::Url::parse(url)
                    .map_err(|e| format!("target URL '{url}' is not a URL ({e}): give the API's base, e.g. https://api.example.com/v1"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("target URL '{url}': use http:// or https://"));
                }
                if model.trim().is_empty() {
                    return Err(
                        "the target URL needs a model name: the one its /v1/models lists".into(),
                    );
                }
                Ok(())
            }
            Target::Instance { name } | Target::Profile { name } if name.trim().is_empty() => Err(
                "the target needs a name: a profile's name as `rigdeck profiles list` shows it"
                    .into(),
            ),
            Target::Gateway { model } if model.trim().is_empty() => {
                Err("the gateway target needs a model: a profile's name or alias".into())
            }
            _ => Ok(()),
        }
    }
}

/// The bench crate's view of an engine kind.
pub fn bench_engine(kind: EngineKind) -> BenchEngine {
    match kind {
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => BenchEngine::LlamaCpp,
        EngineKind::Vllm => BenchEngine::Vllm,
        EngineKind::Sglang => BenchEngine::Sglang,
    }
}

/// A ready instance's root URL, or why it cannot be benchmarked.
pub fn instance_root(instances: &Instances, name: &str) -> Result<String, String> {
    let (phase, host, port) = instances
        .phase_and_address(name)
        .ok_or_else(|| format!("no instance named '{name}' is running: start it first, or pick the profile as the target to start it for the run"))?;
    if phase != Phase::Ready {
        return Err(format!(
            "instance '{name}' is not ready ({}): wait until it is, or start it again",
            phase.name()
        ));
    }
    let port = port.ok_or_else(|| format!("instance '{name}' has no port yet"))?;
    Ok(format!("http://{host}:{port}"))
}

/// The profile behind an instance or a gateway model (a name or an alias).
pub async fn profile_for(store: &Store, name: &str) -> Option<LaunchProfile> {
    let profiles = store.launch_profiles().await.ok()?;
    profiles
        .into_iter()
        .find(|p| p.name == name || p.gateway.aliases.iter().any(|a| a == name))
}

/// The endpoint of an engine the daemon runs: its `/v1`, its key, its tokenizer and metrics.
pub fn engine_endpoint(
    root: &str,
    model: &str,
    engine: BenchEngine,
    key: Option<String>,
) -> Endpoint {
    Endpoint {
        base_url: format!("{root}/v1"),
        api_key: key.clone(),
        model: model.to_owned(),
        engine,
        engine_url: Some(root.to_owned()),
        engine_key: key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_check_and_never_show_keys() {
        let url: Target = serde_json::from_value(json!({"kind": "url", "url": "https://api.example.com/v1", "api_key": "sk-secret", "model": "m"}))
            .expect("a url target");
        assert!(url.check().is_ok());
        assert!(!url.view().to_string().contains("sk-secret"));
        let bad = Target::Url {
            url: "ftp://x".into(),
            api_key: None,
            model: "m".into(),
        };
        assert!(bad.check().expect_err("ftp").contains("http://"));
        let nameless = Target::Instance { name: " ".into() };
        assert!(nameless.check().is_err());
        let unknown = serde_json::from_value::<Target>(json!({"kind": "socket"}));
        assert!(unknown.is_err());
    }
}
