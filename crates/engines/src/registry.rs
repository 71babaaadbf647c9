//! The installed engine builds, in SQLite (`engine_builds`): what Rigdeck built, and binaries or
//! Python environments the user registered. Each row keeps the detected capabilities as JSON.
//!
//! A build whose binary (or environment) has gone from disk stays listed, marked
//! [`Availability::Missing`], so a profile that uses it can say why it cannot start.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use super::capabilities::{self, Capabilities, Features, ProbeError, VersionInfo};
use super::cmake_build::BuiltEngine;
use super::streamed_run::last_line;
use super::{is_executable_file, Backend, EngineKind};

/// Importing vLLM pulls in torch: give it time, but not forever.
pub const PYTHON_IMPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// How a build got into the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildOrigin {
    Built,
    Registered,
    /// Shipped in the package next to Rigdeck's binaries (see [`super::packaged`]).
    Packaged,
}

impl BuildOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildOrigin::Built => "built",
            BuildOrigin::Registered => "registered",
            BuildOrigin::Packaged => "packaged",
        }
    }
}

/// Whether the build's files are still there (checked each time the list is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Availability {
    Ready,
    Missing,
}

/// One installed build.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineBuild {
    pub id: i64,
    pub kind: EngineKind,
    pub version: String,
    pub backend: Backend,
    pub cuda_architectures: Option<String>,
    /// The `llama-server` binary, or the Python environment's folder (vLLM, SGLang).
    pub location: PathBuf,
    pub capabilities: Capabilities,
    pub source: BuildOrigin,
    pub created_at_ms: i64,
    pub status: Availability,
}

impl EngineBuild {
    /// One of llama.cpp's tools (`llama-bench`, `llama-perplexity`…) in the folder of this build's
    /// `llama-server`; the message says how to get it.
    pub fn tool(&self, name: &str) -> Result<PathBuf, String> {
        let program = self.location.with_file_name(name);
        if program.is_file() {
            return Ok(program);
        }
        Err(format!(
            "engine build {} has no {name} beside '{}': build llama.cpp again with `rigdeck engines build` (its tools include {name})",
            self.id,
            self.location.display()
        ))
    }
}

/// A build to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEngineBuild {
    pub kind: EngineKind,
    pub version: String,
    pub backend: Backend,
    pub cuda_architectures: Option<String>,
    pub location: PathBuf,
    pub capabilities: Capabilities,
    pub source: BuildOrigin,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("'{path}' does not exist")]
    NotFound { path: PathBuf },
    #[error("'{path}' holds neither a llama-server binary nor a Python environment (bin/python): give the path of llama-server, or of the virtual environment that has vLLM or SGLang")]
    NothingToRegister { path: PathBuf },
    #[error("{kind} runs from a Python environment: give its folder (the one with bin/python), not '{path}'")]
    NotAnEnvironment { kind: EngineKind, path: PathBuf },
    #[error("{kind} is a single binary: give the path of its llama-server, not the Python environment '{path}'")]
    NotABinary { kind: EngineKind, path: PathBuf },
    #[error("the Python environment '{path}' has no {wanted}: install it there ('{pip}' install {wanted}) or give the environment that has it ({detail})")]
    PythonPackageMissing {
        path: PathBuf,
        wanted: String,
        pip: PathBuf,
        detail: String,
    },
    #[error("no engine build with id {0}: `rigdeck engines list` shows the ids")]
    UnknownId(i64),
    #[error("engine build {id} in the database is unreadable ({detail}): remove it with `rigdeck engines remove {id}` and register it again")]
    Corrupt { id: i64, detail: String },
    #[error("database query failed: {0}")]
    Query(String),
}

/// Where registered builds are kept: the daemon's database implements it (one row per location,
/// so registering the same binary again updates it in place and keeps its id).
pub trait BuildStore: Sync {
    fn save_engine_build(
        &self,
        build: &NewEngineBuild,
        now_ms: i64,
    ) -> impl std::future::Future<Output = Result<EngineBuild, RegistryError>> + Send;
}

/// Ready when the binary (or the environment's interpreter) is still there and executable.
pub fn availability(kind: EngineKind, location: &Path) -> Availability {
    let present = if kind.is_python() {
        is_executable_file(&location.join("bin/python"))
    } else {
        is_executable_file(location)
    };
    if present {
        Availability::Ready
    } else {
        Availability::Missing
    }
}

/// ik_llama.cpp's own options (fused MoE, run-time repacking, MLA modes) tell it apart from
/// upstream llama.cpp, whose help otherwise looks the same.
pub fn guess_kind(capabilities: &Capabilities) -> EngineKind {
    if ["--fused-moe", "-fmoe", "--run-time-repack", "-rtr", "-mla"]
        .iter()
        .any(|o| capabilities.accepts(o))
    {
        EngineKind::IkLlamaCpp
    } else {
        EngineKind::LlamaCpp
    }
}

/// Stores a build Rigdeck just made (its `llama-server` probed for capabilities).
pub async fn register_built(
    store: &impl BuildStore,
    built: &BuiltEngine,
    now_ms: i64,
) -> Result<EngineBuild, RegistryError> {
    let capabilities = capabilities::probe_binary(&built.llama_server).await?;
    let version = version_text(&capabilities, &built.version);
    store
        .save_engine_build(
            &NewEngineBuild {
                kind: built.kind,
                version,
                backend: built.backend,
                cuda_architectures: built.cuda_architectures.clone(),
                location: built.llama_server.clone(),
                capabilities,
                source: BuildOrigin::Built,
            },
            now_ms,
        )
        .await
}

/// The version the binary reports, else what the source was called.
fn version_text(capabilities: &Capabilities, fallback: &str) -> String {
    let v = &capabilities.version;
    if v.version.is_some() || v.commit.is_some() {
        capabilities.version_label()
    } else {
        fallback.to_owned()
    }
}

/// Registers an existing engine: a `llama-server` binary (or a folder holding one, directly or
/// in `bin/`), or a Python virtual environment with vLLM or SGLang. `kind` and `backend` are
/// detected when not given.
pub async fn register_path(
    store: &impl BuildStore,
    path: &Path,
    kind: Option<EngineKind>,
    backend: Option<Backend>,
    now_ms: i64,
) -> Result<EngineBuild, RegistryError> {
    let path = std::fs::canonicalize(path).map_err(|_| RegistryError::NotFound {
        path: path.to_owned(),
    })?;
    let new = if path.is_dir() {
        if path.join("bin/python").exists() {
            if let Some(kind) = kind.filter(|k| !k.is_python()) {
                return Err(RegistryError::NotABinary { kind, path });
            }
            python_environment(&path, kind, backend).await?
        } else {
            let binary = ["llama-server", "bin/llama-server"]
                .iter()
                .map(|name| path.join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| RegistryError::NothingToRegister { path: path.clone() })?;
            llama_binary(&binary, kind, backend, "unknown").await?
        }
    } else {
        if let Some(kind) = kind.filter(|k| k.is_python()) {
            return Err(RegistryError::NotAnEnvironment { kind, path });
        }
        llama_binary(&path, kind, backend, "unknown").await?
    };
    store.save_engine_build(&new, now_ms).await
}

/// A `llama-server` probed for its capabilities, to store as registered; `fallback_version`
/// names it when the binary reports no version.
pub(crate) async fn llama_binary(
    binary: &Path,
    kind: Option<EngineKind>,
    backend: Option<Backend>,
    fallback_version: &str,
) -> Result<NewEngineBuild, RegistryError> {
    let capabilities = capabilities::probe_binary(binary).await?;
    let backend = match backend {
        Some(backend) => backend,
        None => capabilities::detect_backend(binary).await,
    };
    Ok(NewEngineBuild {
        kind: kind.unwrap_or_else(|| guess_kind(&capabilities)),
        version: version_text(&capabilities, fallback_version),
        backend,
        cuda_architectures: None,
        location: binary.to_owned(),
        capabilities,
        source: BuildOrigin::Registered,
    })
}

/// A virtual environment with vLLM or SGLang (the one asked for, else whichever imports first).
async fn python_environment(
    venv: &Path,
    kind: Option<EngineKind>,
    backend: Option<Backend>,
) -> Result<NewEngineBuild, RegistryError> {
    let candidates = match kind {
        Some(kind) => vec![kind],
        None => vec![EngineKind::Vllm, EngineKind::Sglang],
    };
    let mut failures = Vec::new();
    for kind in &candidates {
        match python_package_version(venv, *kind).await {
            Ok(version) => {
                return Ok(NewEngineBuild {
                    kind: *kind,
                    version: version.clone(),
                    // vLLM and SGLang wheels are CUDA builds unless the user says otherwise.
                    backend: backend.unwrap_or(Backend::Cuda),
                    cuda_architectures: None,
                    location: venv.to_owned(),
                    capabilities: python_capabilities(
                        version,
                        capabilities::python_speculative_methods(venv, *kind),
                    ),
                    source: BuildOrigin::Registered,
                });
            }
            Err(detail) => failures.push(detail),
        }
    }
    let wanted = candidates
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(" or ");
    Err(RegistryError::PythonPackageMissing {
        path: venv.to_owned(),
        wanted,
        pip: venv.join("bin/pip"),
        detail: failures.join("; "),
    })
}

/// Both servers always offer Prometheus metrics and speculative decoding (vLLM
/// `--speculative-config`, SGLang `--speculative-algorithm`; `methods` in their own words); their
/// options are not read from a help text (`--help` imports torch and takes long), so the option
/// list stays empty.
fn python_capabilities(version: String, methods: Vec<String>) -> Capabilities {
    Capabilities {
        version: VersionInfo {
            version: Some(version),
            ..VersionInfo::default()
        },
        features: Features {
            speculative: true,
            mtp: methods
                .iter()
                .any(|m| m == "mtp" || m == "NEXTN" || m == "EAGLE"),
            speculative_types: methods,
            metrics: true,
            ..Features::default()
        },
        options: Default::default(),
    }
}

/// `<venv>/bin/python -c 'import vllm; print(vllm.__version__)'`; the error says why not.
pub(crate) async fn python_package_version(
    venv: &Path,
    kind: EngineKind,
) -> Result<String, String> {
    // The module name comes from our own enum, never from input.
    let module = match kind {
        EngineKind::Vllm => "vllm",
        EngineKind::Sglang => "sglang",
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => {
            return Err(format!("{kind} is not a Python package"))
        }
    };
    let python = venv.join("bin/python");
    let mut command = Command::new(&python);
    command
        .arg("-c")
        .arg(format!("import {module}; print({module}.__version__)"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(PYTHON_IMPORT_TIMEOUT, command.output())
        .await
        .map_err(|_| {
            format!(
                "importing {module} took longer than {} s",
                PYTHON_IMPORT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        if let Some(version) = last_line(&stdout) {
            return Ok(version.to_owned());
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = last_line(&stderr).unwrap_or("no output");
    Err(format!("import {module}: {last}"))
}
