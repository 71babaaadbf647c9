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
use super::{is_executable_file, Backend, EngineKind};
use crate::store::Store;

/// Importing vLLM pulls in torch: give it time, but not forever.
pub const PYTHON_IMPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// How a build got into the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildOrigin {
    Built,
    Registered,
}

impl BuildOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildOrigin::Built => "built",
            BuildOrigin::Registered => "registered",
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
    Query(#[from] sqlx::Error),
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
    store: &Store,
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
    store: &Store,
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
            llama_binary(&binary, kind, backend).await?
        }
    } else {
        if let Some(kind) = kind.filter(|k| k.is_python()) {
            return Err(RegistryError::NotAnEnvironment { kind, path });
        }
        llama_binary(&path, kind, backend).await?
    };
    store.save_engine_build(&new, now_ms).await
}

async fn llama_binary(
    binary: &Path,
    kind: Option<EngineKind>,
    backend: Option<Backend>,
) -> Result<NewEngineBuild, RegistryError> {
    let capabilities = capabilities::probe_binary(binary).await?;
    let backend = match backend {
        Some(backend) => backend,
        None => capabilities::detect_backend(binary).await,
    };
    Ok(NewEngineBuild {
        kind: kind.unwrap_or_else(|| guess_kind(&capabilities)),
        version: version_text(&capabilities, "unknown"),
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
                    capabilities: python_capabilities(version),
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

/// Both servers always offer Prometheus metrics and speculative decoding with MTP heads (vLLM
/// `--speculative-config`, SGLang `--speculative-algorithm`); their options are not read from a
/// help text (`--help` imports torch and takes long), so the option list stays empty.
fn python_capabilities(version: String) -> Capabilities {
    Capabilities {
        version: VersionInfo {
            version: Some(version),
            ..VersionInfo::default()
        },
        features: Features {
            speculative: true,
            mtp: true,
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
        if let Some(version) = stdout.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
            return Ok(version.to_owned());
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output");
    Err(format!("import {module}: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in llama-server for registry tests: a script answering `--version` and `--help`
    /// in llama.cpp's format (the real binary is exercised by the engine-build integration test).
    fn fake_server(dir: &Path, extra_help: &str) -> PathBuf {
        let path = dir.join("llama-server");
        let script = format!(
            "#!/bin/sh\n\
             case \"$1\" in\n\
             --version) echo 'version: 0.5.0-dev (build 0, commit abc1234)' >&2; echo 'built with GNU 12.2.0 for Linux x86_64' >&2 ;;\n\
             --list-devices) echo 'Available devices:' ;;\n\
             *) printf '%s\\n' '-m,    --model FNAME                    model path' '--port PORT                             port' \
                '-ot,   --override-tensor <pattern>=<buffer type>' '--metrics                               metrics' {extra_help} ;;\n\
             esac\n"
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    async fn store(dir: &Path) -> Store {
        Store::open(&dir.join("rigdeck.db")).await.unwrap()
    }

    #[tokio::test]
    async fn registers_a_binary_lists_it_and_marks_it_missing_once_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let bin = fake_server(dir.path(), "");
        let build = register_path(&store, &bin, None, None, 1_000)
            .await
            .unwrap();
        assert_eq!(build.kind, EngineKind::LlamaCpp);
        assert_eq!(build.backend, Backend::Cpu);
        assert_eq!(build.version, "0.5.0-dev (abc1234)");
        assert_eq!(build.source, BuildOrigin::Registered);
        assert_eq!(build.status, Availability::Ready);
        assert!(build.capabilities.features.override_tensor);
        assert!(build.capabilities.features.metrics);
        assert!(!build.capabilities.features.fit);

        // Registering the folder finds the same binary and updates the row in place.
        let again = register_path(&store, dir.path(), None, Some(Backend::Cuda), 2_000)
            .await
            .unwrap();
        assert_eq!(again.id, build.id);
        assert_eq!(again.backend, Backend::Cuda);
        assert_eq!(store.engine_builds().await.unwrap().len(), 1);

        std::fs::remove_file(&bin).unwrap();
        let listed = store.engine_builds().await.unwrap();
        assert_eq!(listed[0].status, Availability::Missing);

        let removed = store.remove_engine_build(build.id).await.unwrap();
        assert_eq!(removed.location, build.location);
        assert!(store.engine_builds().await.unwrap().is_empty());
        let err = store.remove_engine_build(build.id).await.unwrap_err();
        assert!(err
            .to_string()
            .contains(&format!("no engine build with id {}", build.id)));
    }

    #[tokio::test]
    async fn ik_llama_is_told_apart_by_its_own_options() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let bin = fake_server(
            dir.path(),
            "'-fmoe, --fused-moe                      fused MoE'",
        );
        let build = register_path(&store, &bin, None, None, 1).await.unwrap();
        assert_eq!(build.kind, EngineKind::IkLlamaCpp);
    }

    #[tokio::test]
    async fn bad_paths_get_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let err = register_path(&store, &dir.path().join("nope"), None, None, 1)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");

        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = register_path(&store, &empty, None, None, 1)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RegistryError::NothingToRegister { .. }),
            "{err}"
        );

        let script = dir.path().join("hello.sh");
        std::fs::write(&script, "#!/bin/sh\necho hello\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = register_path(&store, &script, None, None, 1)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RegistryError::Probe(ProbeError::NotAnEngine { .. })),
            "{err}"
        );

        let err = register_path(&store, &script, Some(EngineKind::Vllm), None, 1)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RegistryError::NotAnEnvironment { .. }),
            "{err}"
        );
        assert!(store.engine_builds().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_python_environment_needs_the_engine_installed() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let venv = dir.path().join("venv");
        let status = std::process::Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .expect("python3 with the venv module");
        assert!(status.success());

        let err = register_path(&store, &venv, Some(EngineKind::Vllm), None, 1)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, RegistryError::PythonPackageMissing { .. }),
            "{text}"
        );
        assert!(
            text.contains("has no vllm") && text.contains("No module named 'vllm'"),
            "{text}"
        );
        assert!(text.contains("bin/pip' install vllm"), "{text}");

        // A stand-in vllm package in the environment's site-packages.
        let site = std::fs::read_dir(venv.join("lib"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("site-packages/vllm");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(site.join("__init__.py"), "__version__ = '0.99.0'\n").unwrap();
        let build = register_path(&store, &venv, None, None, 1).await.unwrap();
        assert_eq!(build.kind, EngineKind::Vllm);
        assert_eq!(build.version, "0.99.0");
        assert_eq!(build.backend, Backend::Cuda);
        assert_eq!(build.status, Availability::Ready);
        assert!(build.capabilities.features.metrics);

        let err = register_path(&store, &venv, Some(EngineKind::LlamaCpp), None, 1)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::NotABinary { .. }), "{err}");
    }
}
