//! Inference engines: where their source comes from, how Rigdeck builds them, which builds are
//! installed and what each one can do.
//!
//! - [`source`]: the pinned llama.cpp source bundled in the `llama-cpp-python` sdist (or a user's
//!   archive or folder), fetched, verified and unpacked into a cache outside any checkout.
//! - [`package_index`]: one file from a Python package index's simple API, hashed as it streams.
//! - [`cmake_build`]: configure and compile llama.cpp/ik_llama.cpp with CMake + Ninja, streaming
//!   progress as [`cmake_build::BuildProgress`] events.
//! - [`registry`]: the installed builds, in SQLite (built by Rigdeck, shipped in its package or
//!   registered by the user).
//! - [`packaged`]: the llama.cpp builds a package ships beside Rigdeck's binaries, found at start.
//! - [`capabilities`]: what a binary supports, read from its `--version` and `--help`.
//! - [`python_env`]: vLLM and SGLang installed with pip into managed virtual environments.
//! - [`releases`]: each engine's releases on the index against the installed builds (what is newer).
//! - [`progress`]: the steps of a build and one progress report, heard by a listener.
//! - [`streamed_run`]: a helper program (CMake, Ninja, pip) run with its output read line by line.
//!
//! Every external program runs from an argv vector, never through a shell.

pub mod capabilities;
pub mod cmake_build;
pub mod fit_params;
pub mod install;
pub mod package_index;
pub mod packaged;
pub mod progress;
pub mod python_env;
pub mod registry;
pub mod releases;
pub mod source;
pub mod streamed_run;

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which engine a build is. The string forms are what the database, the API and the CLI use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EngineKind {
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    #[serde(rename = "ik_llama.cpp")]
    IkLlamaCpp,
    #[serde(rename = "vllm")]
    Vllm,
    #[serde(rename = "sglang")]
    Sglang,
}

impl EngineKind {
    pub const ALL: [EngineKind; 4] = [
        EngineKind::LlamaCpp,
        EngineKind::IkLlamaCpp,
        EngineKind::Vllm,
        EngineKind::Sglang,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::IkLlamaCpp => "ik_llama.cpp",
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
        }
    }

    /// llama.cpp and its fork build from C++ source with CMake; vLLM and SGLang live in a Python
    /// environment instead.
    pub fn is_python(self) -> bool {
        matches!(self, EngineKind::Vllm | EngineKind::Sglang)
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine kind '{0}': use llama.cpp, ik_llama.cpp, vllm or sglang")]
pub struct UnknownKind(pub String);

impl FromStr for EngineKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        // "llamacpp"/"ik_llama" are what people type; accept them rather than make them guess.
        match wanted.as_str() {
            "llama.cpp" | "llamacpp" | "llama-cpp" => Ok(EngineKind::LlamaCpp),
            "ik_llama.cpp" | "ik_llama" | "ik-llama.cpp" | "ikllama" => Ok(EngineKind::IkLlamaCpp),
            "vllm" => Ok(EngineKind::Vllm),
            "sglang" => Ok(EngineKind::Sglang),
            _ => Err(UnknownKind(s.to_owned())),
        }
    }
}

/// The compute backend a build was compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cpu,
    Cuda,
    Vulkan,
    Rocm,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Vulkan => "vulkan",
            Backend::Rocm => "rocm",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend '{0}': use cpu, cuda, vulkan or rocm")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Backend::Cpu),
            "cuda" => Ok(Backend::Cuda),
            "vulkan" => Ok(Backend::Vulkan),
            "rocm" | "hip" => Ok(Backend::Rocm),
            _ => Err(UnknownBackend(s.to_owned())),
        }
    }
}

/// The first executable called `name` on `PATH`, like the shell's `command -v`, without a shell.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

/// A regular file (after following links) with an execute bit set.
pub(crate) fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Lossy text of a path for messages and the database (paths are UTF-8 in practice).
pub fn display_os(s: &OsStr) -> String {
    s.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_backends_round_trip_through_their_names() {
        for kind in EngineKind::ALL {
            assert_eq!(kind.as_str().parse::<EngineKind>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        for backend in [Backend::Cpu, Backend::Cuda, Backend::Vulkan, Backend::Rocm] {
            assert_eq!(backend.as_str().parse::<Backend>(), Ok(backend));
        }
        assert_eq!("CUDA".parse::<Backend>(), Ok(Backend::Cuda));
        assert_eq!("ik_llama".parse::<EngineKind>(), Ok(EngineKind::IkLlamaCpp));
    }

    #[test]
    fn unknown_names_say_what_is_accepted() {
        let err = "metal".parse::<Backend>().unwrap_err().to_string();
        assert!(err.contains("'metal'") && err.contains("cpu, cuda, vulkan or rocm"));
        let err = "ollama".parse::<EngineKind>().unwrap_err().to_string();
        assert!(err.contains("'ollama'") && err.contains("ik_llama.cpp"));
    }
}
