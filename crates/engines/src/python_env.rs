//! Managed Python virtual environments for vLLM and SGLang: `<data>/engines/<kind>-<version>/`
//! made with `python3 -m venv`, the pinned package installed there with pip (output streamed line
//! by line), then registered like any environment the user brings ([`registry::register_path`]).
//!
//! Every program runs from an argv vector, never through a shell. A folder whose interpreter
//! already imports the package at the wanted version is reused, not reinstalled.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::registry::{self, EngineBuild, RegistryError};
use super::streamed_run::{last_line, run_streaming, StreamedRun};
use super::{releases, EngineKind};
use crate::package_index::{self, IndexError};
use crate::registry::BuildStore;

/// The vLLM version installed when none is asked for and the package index cannot be read
/// (otherwise its newest release is); `--version` installs another.
pub const VLLM_VERSION: &str = "0.33.0";
/// The SGLang version installed when none is asked for and the package index cannot be read.
pub const SGLANG_VERSION: &str = "0.5.23";

/// How many of pip's last output lines a failure shows.
const LAST_LINES: usize = 15;

/// pip's last non-empty lines, for the error message.
fn last_lines(run: &StreamedRun) -> String {
    let lines: Vec<&str> = run
        .tail
        .iter()
        .map(String::as_str)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(LAST_LINES)..].join("\n")
}

/// Receives each progress line (Rigdeck's own steps and pip's output).
pub type LineSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// The pip package (and Python module) of a Python engine; `None` for llama.cpp and its fork.
pub fn package_name(kind: EngineKind) -> Option<&'static str> {
    match kind {
        EngineKind::Vllm => Some("vllm"),
        EngineKind::Sglang => Some("sglang"),
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => None,
    }
}

/// The version installed when none is asked for and the index cannot be read.
pub fn default_version(kind: EngineKind) -> Option<&'static str> {
    match kind {
        EngineKind::Vllm => Some(VLLM_VERSION),
        EngineKind::Sglang => Some(SGLANG_VERSION),
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => None,
    }
}

/// What to install and where.
#[derive(Debug, Clone)]
pub struct PythonInstallRequest {
    pub kind: EngineKind,
    /// `None`: the newest release the index serves, else [`default_version`].
    pub version: Option<String>,
    /// Passed to pip as `--index-url` (a mirror, or a local index in tests).
    pub index_url: Option<String>,
    /// `<data dir>/engines`.
    pub engines_dir: PathBuf,
    /// The interpreter that creates the environment (default `python3` on `PATH`).
    pub python: Option<PathBuf>,
}

/// The result: where the environment is, whether it was reused, its registry entry.
#[derive(Debug, Clone)]
pub struct PythonInstall {
    pub venv: PathBuf,
    pub reused: bool,
    pub build: EngineBuild,
}

#[derive(Debug, thiserror::Error)]
pub enum PythonEnvError {
    #[error(
        "{0} is built from source, not installed with pip: use `rigdeck engines build --kind {0}`"
    )]
    NotPython(EngineKind),
    #[error("version '{0}' is not a plain version number: give one like {VLLM_VERSION}")]
    BadVersion(String),
    #[error("{package} {version} is not on the package index {index} (its newest releases: {newest}): pick one of those (`rigdeck engines versions {package}`)")]
    VersionNotOnIndex {
        package: String,
        version: String,
        index: String,
        newest: String,
    },
    #[error("cannot run '{}' ({detail}): install Python 3 (with the venv module, e.g. `apt install python3 python3-venv`)", python.display())]
    NoPython { python: PathBuf, detail: String },
    #[error("'{} -m venv' cannot make an environment with pip ({detail}): install python3-venv (e.g. `apt install python3-venv`)", python.display())]
    NoVenv { python: PathBuf, detail: String },
    #[error("pip could not install {package} ({status}); its last lines:\n{last_lines}")]
    Pip {
        package: String,
        status: String,
        last_lines: String,
    },
    #[error("cannot use '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{package} was installed in '{}', but registering it failed: {source}", venv.display())]
    Register {
        package: String,
        venv: PathBuf,
        source: RegistryError,
    },
}

/// Creates (or reuses) the environment, installs the package with pip, registers the result.
pub async fn install(
    store: &impl BuildStore,
    request: &PythonInstallRequest,
    sink: LineSink<'_>,
) -> Result<PythonInstall, PythonEnvError> {
    let kind = request.kind;
    let (Some(package), Some(default)) = (package_name(kind), default_version(kind)) else {
        return Err(PythonEnvError::NotPython(kind));
    };
    let version = match request.version.as_deref() {
        Some(version) => {
            check_version_listed(kind, version.trim(), request.index_url.as_deref(), sink).await?;
            version.trim().to_owned()
        }
        None => match available_versions(kind, request.index_url.as_deref()).await {
            Ok(versions) if !versions.is_empty() => versions[0].clone(),
            Ok(_) => default.to_owned(),
            Err(err) => {
                sink(&format!(
                    "cannot list {package}'s releases ({err}); installing {default}"
                ));
                default.to_owned()
            }
        },
    };
    let version = version.as_str();
    if !is_plain_version(version) {
        return Err(PythonEnvError::BadVersion(version.to_owned()));
    }
    let venv = request.engines_dir.join(format!("{package}-{version}"));
    let interpreter = venv.join("bin/python");
    let register = |reused: bool| {
        let venv = venv.clone();
        async move {
            let build = registry::register_path(
                store,
                &venv,
                Some(kind),
                None,
                rigdeck_supervisor::now_ms(),
            )
            .await
            .map_err(|source| PythonEnvError::Register {
                package: package.to_owned(),
                venv: venv.clone(),
                source,
            })?;
            Ok(PythonInstall {
                venv,
                reused,
                build,
            })
        }
    };

    if interpreter.exists() {
        match registry::python_package_version(&venv, kind).await {
            Ok(found) if found == version => {
                sink(&format!(
                    "{package} {version} is already installed in {}",
                    venv.display()
                ));
                return register(true).await;
            }
            Ok(found) => sink(&format!(
                "{} has {package} {found}; installing {version}",
                venv.display()
            )),
            Err(_) => sink(&format!("reusing the environment {}", venv.display())),
        }
    } else {
        create_venv(request.python.as_deref(), &venv, sink).await?;
    }

    let spec = format!("{package}=={version}");
    sink(&format!("installing {spec} with pip"));
    let mut command = Command::new(&interpreter);
    command.args(["-m", "pip", "install", "--disable-pip-version-check"]);
    if let Some(url) = &request.index_url {
        command.arg("--index-url").arg(url);
    }
    command.arg(&spec).env("PIP_NO_INPUT", "1");
    let run = run_streaming(command, |line| {
        if !line.trim().is_empty() {
            sink(line);
        }
    })
    .await
    .map_err(|source| PythonEnvError::Io {
        path: interpreter.clone(),
        source,
    })?;
    if !run.success() {
        return Err(PythonEnvError::Pip {
            package: spec,
            status: run.status_text(),
            last_lines: last_lines(&run),
        });
    }
    register(false).await
}

/// Refuses `version` when the package index lists the engine's releases and it is not among them
/// (before any environment is made or pip runs); an index that cannot be read is left to pip.
pub async fn check_version_listed(
    kind: EngineKind,
    version: &str,
    index_url: Option<&str>,
    sink: LineSink<'_>,
) -> Result<(), PythonEnvError> {
    let Some(package) = package_name(kind) else {
        return Err(PythonEnvError::NotPython(kind));
    };
    if !is_plain_version(version) {
        return Err(PythonEnvError::BadVersion(version.to_owned()));
    }
    let listed = match available_versions(kind, index_url).await {
        Ok(listed) => listed,
        Err(err) => {
            sink(&format!(
                "cannot list {package}'s releases ({err}); asking pip for {version}"
            ));
            return Ok(());
        }
    };
    // The index lists final releases only; a pre-release asked for by name is pip's to find.
    let pre_release = version.chars().any(|c| c.is_ascii_alphabetic());
    if listed.iter().any(|v| v == version) || pre_release {
        return Ok(());
    }
    let index = package_index::resolve_index_url(index_url).await;
    Err(PythonEnvError::VersionNotOnIndex {
        package: package.to_owned(),
        version: version.to_owned(),
        index: package_index::without_credentials(&index),
        newest: package_index::newest_releases_text(&listed),
    })
}

/// The final releases of a Python engine on the package index (`index_url`, else pip's own
/// setting, else PyPI), newest first.
pub async fn available_versions(
    kind: EngineKind,
    index_url: Option<&str>,
) -> Result<Vec<String>, IndexError> {
    match package_name(kind) {
        Some(package) => releases::listed_versions(package, index_url).await,
        None => Ok(Vec::new()),
    }
}

/// `1.2.3`, `0.5.3.post1`, `0.11.0rc2`: what a folder name and a `==` pin can hold.
pub fn is_plain_version(version: &str) -> bool {
    !version.is_empty()
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_'))
}

/// `python3 -m venv DIR`, then checks pip is in it (Debian's python3 without python3-venv
/// either fails at ensurepip or leaves an environment without pip). A failed attempt leaves
/// no folder behind.
async fn create_venv(
    python: Option<&Path>,
    venv: &Path,
    sink: LineSink<'_>,
) -> Result<(), PythonEnvError> {
    let python = python.unwrap_or(Path::new("python3")).to_owned();
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|source| PythonEnvError::Io {
            path: parent.to_owned(),
            source,
        })?;
    }
    sink(&format!("creating the environment {}", venv.display()));
    let output = Command::new(&python)
        .args(["-m", "venv"])
        .arg(venv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| PythonEnvError::NoPython {
            python: python.clone(),
            detail: e.to_string(),
        })?;
    let failed = |detail: String| {
        let _ = std::fs::remove_dir_all(venv);
        PythonEnvError::NoVenv {
            python: python.clone(),
            detail,
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = last_line(&stderr).unwrap_or("no output");
        return Err(failed(format!("{}: {last}", output.status)));
    }
    let pip = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    match pip {
        Ok(status) if status.success() => Ok(()),
        _ => Err(failed("the new environment has no pip".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// These refusals all come before anything would be registered.
    struct NeverReached;

    impl BuildStore for NeverReached {
        async fn save_engine_build(
            &self,
            _: &registry::NewEngineBuild,
            _: i64,
        ) -> Result<EngineBuild, RegistryError> {
            Err(RegistryError::Query(
                "nothing is registered in these tests".into(),
            ))
        }
    }

    #[test]
    fn versions_and_kinds() {
        assert!(is_plain_version("0.11.0"));
        assert!(is_plain_version("0.5.3.post1"));
        assert!(!is_plain_version(">=0.1"));
        assert!(!is_plain_version("0.1; rm -rf"));
        assert!(!is_plain_version(""));
        assert_eq!(default_version(EngineKind::Vllm), Some("0.33.0"));
        assert_eq!(default_version(EngineKind::Sglang), Some("0.5.23"));
        assert_eq!(package_name(EngineKind::LlamaCpp), None);
    }

    #[tokio::test]
    async fn refuses_llama_cpp_and_odd_versions() {
        let dir = tempfile::tempdir().unwrap();
        let store = NeverReached;
        let mut request = PythonInstallRequest {
            kind: EngineKind::LlamaCpp,
            version: None,
            index_url: None,
            engines_dir: dir.path().join("engines"),
            python: None,
        };
        let err = install(&store, &request, &|_| {}).await.unwrap_err();
        assert!(matches!(err, PythonEnvError::NotPython(_)), "{err}");
        request.kind = EngineKind::Vllm;
        request.version = Some("==1.0".into());
        let err = install(&store, &request, &|_| {}).await.unwrap_err();
        assert!(matches!(err, PythonEnvError::BadVersion(_)), "{err}");
    }

    #[tokio::test]
    async fn a_missing_interpreter_says_to_install_python() {
        let dir = tempfile::tempdir().unwrap();
        let store = NeverReached;
        let request = PythonInstallRequest {
            kind: EngineKind::Sglang,
            version: None,
            index_url: None,
            engines_dir: dir.path().join("engines"),
            python: Some(dir.path().join("no-python3")),
        };
        let err = install(&store, &request, &|_| {}).await.unwrap_err();
        assert!(matches!(err, PythonEnvError::NoPython { .. }), "{err}");
        assert!(err.to_string().contains("python3-venv"), "{err}");
    }

    #[tokio::test]
    async fn a_python_without_venv_says_to_install_python3_venv() {
        // An "interpreter" whose `-m venv` fails the way Debian's does without python3-venv.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = NeverReached;
        let python = dir.path().join("python3");
        std::fs::write(
            &python,
            "#!/bin/sh\necho 'The virtual environment was not created successfully because ensurepip is not available.' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let request = PythonInstallRequest {
            kind: EngineKind::Vllm,
            version: Some("0.11.0".into()),
            index_url: None,
            engines_dir: dir.path().join("engines"),
            python: Some(python),
        };
        let err = install(&store, &request, &|_| {}).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PythonEnvError::NoVenv { .. }), "{text}");
        assert!(
            text.contains("install python3-venv") && text.contains("ensurepip"),
            "{text}"
        );
        assert!(!dir.path().join("engines/vllm-0.11.0").exists());
    }
}
