//! Builds llama.cpp (or ik_llama.cpp) with CMake + Ninja for a chosen backend, streaming the
//! output line by line as [`BuildProgress`] events.
//!
//! Layout of a build folder (`<data dir>/engines/<kind>-<version>-<backend>/` by default):
//! `cmake/` is CMake's build tree, `bin/` holds the installed binaries ([`WANTED_TARGETS`]:
//! `llama-server`, `llama-bench`, `llama-perplexity`…), `rigdeck-build.log` the full log of the last build and
//! `rigdeck-build.json` what was built from what. A build whose stamp matches the source hash and
//! the flags, with its binaries in place, is reused without running CMake at all.
//!
//! CMake and Ninja run from argv vectors; nothing is interpolated into a shell.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use super::source::{self, PreparedSource, SourceError, SourceSpec};
use super::streamed_run::{run_streaming, StreamedRun};
use super::{find_in_path, is_executable_file, Backend, EngineKind};

pub use crate::progress::{BuildProgress, BuildStep, ProgressSink};

mod configure;
mod cuda;
mod lock;
mod ninja;

pub use configure::{configure_args, ConfigurePlan, TreeOptions};
pub use cuda::{cuda_architectures, cuda_architectures_of, find_nvcc, parse_cuda_architectures};
use lock::BuildLock;
pub use ninja::{parse_ninja_progress, parse_target_list};

/// The binaries Rigdeck wants from a llama.cpp tree; only `llama-server` is required (older trees
/// and ik_llama.cpp have no `llama-fit-params`). `llama-perplexity` records reference logits and
/// measures KL divergence, `llama-quantize` makes the files compared, `llama-tokenize` counts a
/// corpus's tokens with a model's vocabulary before a run. `rpc-server` lends this rig's devices to
/// another rig's llama-server (the RPC backend, `GGML_RPC`); current llama.cpp names its target
/// `ggml-rpc-server` (see [`TARGET_ALIASES`]), it is installed as `rpc-server` all the same.
pub const WANTED_TARGETS: [&str; 7] = [
    "llama-server",
    "llama-bench",
    "llama-fit-params",
    "llama-perplexity",
    "llama-quantize",
    "llama-tokenize",
    "rpc-server",
];
/// A wanted binary's other target name in some trees: (installed name, tree's target).
pub const TARGET_ALIASES: [(&str, &str); 1] = [("rpc-server", "ggml-rpc-server")];
const REQUIRED_TARGET: &str = "llama-server";

const LOG_FILE: &str = "rigdeck-build.log";
const STAMP_FILE: &str = "rigdeck-build.json";
const LOCK_FILE: &str = "rigdeck-build.lock";

/// What to build and where.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub kind: EngineKind,
    pub source: SourceSpec,
    pub backend: Backend,
    /// `86;120`-style list for CUDA builds (see [`cuda_architectures`]); required for CUDA.
    pub cuda_architectures: Option<String>,
    /// Parent of the build folders (`<data dir>/engines`); ignored when `build_dir` is set.
    pub engines_dir: PathBuf,
    /// The exact build folder, instead of `<engines_dir>/<kind>-<version>-<backend>`.
    pub build_dir: Option<PathBuf>,
    /// Rigdeck's cache root; sources are kept under `<cache>/sources`.
    pub cache_dir: PathBuf,
    /// Parallel compile jobs; all cores when `None`.
    pub jobs: Option<usize>,
    /// For other machines (the packages ship it): no `-march=native`, the x86-64-v3 set llama.cpp
    /// enables by default (AVX2, FMA, F16C) instead of whatever this CPU has.
    pub portable: bool,
}

impl BuildRequest {
    /// The bundled llama.cpp for `backend`, built under `engines_dir` with sources cached in
    /// `cache_dir`: what the first-run offer and the tests build.
    pub fn bundled(backend: Backend, engines_dir: PathBuf, cache_dir: PathBuf) -> Self {
        Self {
            kind: EngineKind::LlamaCpp,
            source: SourceSpec::Pinned {
                pin: source::BUNDLED_LLAMA_CPP.clone(),
                index_url: None,
            },
            backend,
            cuda_architectures: None,
            engines_dir,
            build_dir: None,
            cache_dir,
            jobs: None,
            portable: false,
        }
    }

    /// The one llama.cpp build the tests, the benchmarks and the packages share: the bundled
    /// source built portably for the CPU into `<cache_dir>/engines` (see
    /// [`shared_cpu_build_dir`]). `installer/package.sh` builds the same folder
    /// (`rigdeck engines build --backend cpu --portable --engines-dir <cache>/engines`), so
    /// whichever of the tests and the package step runs first builds it and the other reuses it.
    pub fn shared_cpu(cache_dir: PathBuf) -> Self {
        Self {
            portable: true,
            ..Self::bundled(Backend::Cpu, cache_dir.join("engines"), cache_dir)
        }
    }
}

/// Where [`BuildRequest::shared_cpu`] builds: `<cache_dir>/engines/llama.cpp-<pin>-cpu-portable`.
pub fn shared_cpu_build_dir(cache_dir: &Path) -> PathBuf {
    default_build_dir(
        &cache_dir.join("engines"),
        EngineKind::LlamaCpp,
        &source::BUNDLED_LLAMA_CPP.label,
        Backend::Cpu,
        true,
    )
}

/// A finished (or reused) build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuiltEngine {
    pub build_id: String,
    pub kind: EngineKind,
    pub backend: Backend,
    pub cuda_architectures: Option<String>,
    /// The source label: the pinned commit, `src-<hash>` or `local-<hash>`.
    pub version: String,
    pub source_sha256: Option<String>,
    pub build_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub llama_server: PathBuf,
    /// Every installed binary, `llama_server` included.
    pub binaries: Vec<PathBuf>,
    pub log_file: PathBuf,
    /// True when a matching earlier build was found and nothing was compiled.
    pub reused: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("building for {backend} is not supported yet: build llama.cpp yourself and register the binary with `rigdeck engines register PATH`")]
    UnsupportedBackend { backend: Backend },
    #[error("{tool} was not found: {hint}")]
    MissingTool { tool: &'static str, hint: String },
    #[error("a CUDA build needs the GPU architectures and none were detected: pass them, e.g. --cuda-arch 86 for an RTX 3090 (compute capability 8.6)")]
    NoCudaArchitectures,
    #[error("invalid CUDA architectures '{0}': give numbers like 86 or 86;120 (compute capability without the dot)")]
    BadCudaArchitectures(String),
    #[error("CMake {step} step failed ({status}); full log in '{log}'. Last lines:\n{tail}")]
    Cmake {
        step: BuildStep,
        status: String,
        code: Option<i32>,
        log: PathBuf,
        tail: String,
    },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        source: io::Error,
    },
    #[error("the source tree in '{tree}' has no {target} target: it is not a llama.cpp or ik_llama.cpp tree Rigdeck can build")]
    MissingTarget { tree: PathBuf, target: &'static str },
    #[error("the build finished but '{path}' is missing; see the log in '{log}'")]
    MissingBinary { path: PathBuf, log: PathBuf },
    #[error("cannot {action} '{path}': {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BuildError + 'a {
    move |source| BuildError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// What the build folder was last built from; a match (and binaries present) means no rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BuildStamp {
    /// `None` for a folder source: such a build is never reused without running Ninja.
    source_sha256: Option<String>,
    configure_args: Vec<String>,
    binaries: Vec<String>,
    /// The targets asked for ([`WANTED_TARGETS`] then): a folder built when fewer were wanted is
    /// built again, and Ninja compiles only what is new.
    #[serde(default)]
    wanted: Vec<String>,
}

/// Sends [`BuildProgress`] for one build.
struct Reporter<'a> {
    build_id: String,
    sink: ProgressSink<'a>,
}

impl Reporter<'_> {
    fn emit(&self, step: BuildStep, fraction: Option<f64>, line: Option<&str>) {
        (self.sink)(BuildProgress {
            build_id: self.build_id.clone(),
            step,
            fraction,
            line: line.map(str::to_owned),
        });
    }
}

/// Builds (or reuses) an engine, reporting every step to `sink`; on failure the last report has
/// step `failed` and the error's text.
pub async fn build(
    request: &BuildRequest,
    sink: ProgressSink<'_>,
) -> Result<BuiltEngine, BuildError> {
    let reporter = Reporter {
        build_id: format!("build-{:08x}", rand::random::<u32>()),
        sink,
    };
    let outcome = run_build(request, &reporter).await;
    match &outcome {
        Ok(built) => reporter.emit(
            BuildStep::Done,
            Some(1.0),
            Some(&format!(
                "{} ready in {}",
                built.llama_server.display(),
                built.bin_dir.display()
            )),
        ),
        Err(err) => reporter.emit(BuildStep::Failed, None, Some(&err.to_string())),
    }
    outcome
}

/// What must be installed before anything is downloaded: fail fast, with the fix. Returns the
/// CUDA compiler for a CUDA build. The API calls it too, to refuse a build at once.
pub fn check_tools(request: &BuildRequest) -> Result<Option<PathBuf>, BuildError> {
    if request.kind.is_python() {
        let kind = request.kind;
        return Err(BuildError::Source(SourceError::NoSourcePackage { kind }));
    }
    if request.backend == Backend::Rocm {
        return Err(BuildError::UnsupportedBackend {
            backend: request.backend,
        });
    }
    if find_in_path("cmake").is_none() {
        return Err(BuildError::MissingTool {
            tool: "cmake",
            hint: "install CMake 3.14 or newer (Debian/Ubuntu: apt install cmake)".into(),
        });
    }
    if find_in_path("ninja").is_none() {
        return Err(BuildError::MissingTool {
            tool: "ninja",
            hint: "install Ninja (Debian/Ubuntu: apt install ninja-build)".into(),
        });
    }
    match request.backend {
        Backend::Cuda => {
            let nvcc = find_nvcc().ok_or_else(|| BuildError::MissingTool {
                tool: "nvcc",
                hint: "a CUDA build was requested but the CUDA compiler is not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin: \
                       install the CUDA toolkit, or build with --backend cpu or vulkan"
                    .into(),
            })?;
            match &request.cuda_architectures {
                None => return Err(BuildError::NoCudaArchitectures),
                Some(archs) => {
                    parse_cuda_architectures(archs)?;
                }
            }
            Ok(Some(nvcc))
        }
        Backend::Vulkan => {
            if find_in_path("glslc").is_none() {
                return Err(BuildError::MissingTool {
                    tool: "glslc",
                    hint: "the Vulkan build needs the shader compiler and headers (Debian/Ubuntu: apt install glslc libvulkan-dev)".into(),
                });
            }
            Ok(None)
        }
        Backend::Cpu | Backend::Rocm => Ok(None),
    }
}

/// The folder a build goes into when none is given (`-portable` after the backend for a build
/// meant for other machines, so it never replaces the native one).
pub fn default_build_dir(
    engines_dir: &Path,
    kind: EngineKind,
    version: &str,
    backend: Backend,
    portable: bool,
) -> PathBuf {
    let suffix = if portable { "-portable" } else { "" };
    engines_dir.join(format!(
        "{}-{version}-{}{suffix}",
        kind.as_str(),
        backend.as_str()
    ))
}

async fn run_build(
    request: &BuildRequest,
    reporter: &Reporter<'_>,
) -> Result<BuiltEngine, BuildError> {
    let cuda_compiler = check_tools(request)?;
    let cuda_architectures = match (request.backend, &request.cuda_architectures) {
        (Backend::Cuda, Some(archs)) => Some(parse_cuda_architectures(archs)?),
        _ => None,
    };

    let report_source = |step: BuildStep, line: &str| reporter.emit(step, None, Some(line));
    let prepared: PreparedSource =
        source::prepare(&request.source, &request.cache_dir, &report_source).await?;

    let build_dir = request.build_dir.clone().unwrap_or_else(|| {
        default_build_dir(
            &request.engines_dir,
            request.kind,
            &prepared.label,
            request.backend,
            request.portable,
        )
    });
    fs::create_dir_all(&build_dir).map_err(io_err("create the build folder", &build_dir))?;
    let _lock = BuildLock::acquire(&build_dir, reporter).await?;
    let shown_version = prepared.commit.as_deref().unwrap_or(&prepared.label);
    if configure::supply_build_info(&prepared.tree, shown_version)? {
        reporter.emit(
            BuildStep::Configure,
            None,
            Some("the source has no build-info generator: wrote common/cmake/build-info-gen-cpp.cmake"),
        );
    }
    let cmake_dir = build_dir.join("cmake");
    let bin_dir = build_dir.join("bin");
    let log_file = build_dir.join(LOG_FILE);
    let stamp_file = build_dir.join(STAMP_FILE);

    let plan = ConfigurePlan {
        backend: request.backend,
        cuda_architectures: cuda_architectures.clone(),
        cuda_compiler,
        commit: prepared.commit.clone(),
        options: TreeOptions::read(&prepared.tree)?,
        portable: request.portable,
    };
    let args = configure_args(&prepared.tree, &cmake_dir, &plan);
    let built = |binaries: Vec<PathBuf>, reused: bool| BuiltEngine {
        build_id: reporter.build_id.clone(),
        kind: request.kind,
        backend: request.backend,
        cuda_architectures: cuda_architectures.clone(),
        version: prepared.label.clone(),
        source_sha256: prepared.sha256.clone(),
        build_dir: build_dir.clone(),
        bin_dir: bin_dir.clone(),
        llama_server: bin_dir.join(REQUIRED_TARGET),
        binaries,
        log_file: log_file.clone(),
        reused,
    };

    let previous: Option<BuildStamp> = fs::read(&stamp_file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    if let Some(binaries) = reusable(previous.as_ref(), &bin_dir, &prepared, &args) {
        reporter.emit(
            BuildStep::Compile,
            Some(1.0),
            Some(&format!(
                "reusing the build in {} (same source and flags)",
                build_dir.display()
            )),
        );
        return Ok(built(binaries, true));
    }
    // From here on the folder is being rebuilt: no stale stamp may vouch for it.
    let _ = fs::remove_file(&stamp_file);
    if previous.map(|p| p.configure_args) != Some(args.clone()) {
        // Other (or unknown) flags than last time: CMake's cache would keep options we no
        // longer pass (a GGML_CUDA=ON in a folder now built for CPU). The objects stay; Ninja
        // recompiles only what the new flags change.
        let _ = fs::remove_file(cmake_dir.join("CMakeCache.txt"));
    }
    let mut log =
        io::BufWriter::new(fs::File::create(&log_file).map_err(io_err("create", &log_file))?);

    // Configure.
    let _ = writeln!(log, "$ cmake {}", args.join(" "));
    reporter.emit(
        BuildStep::Configure,
        None,
        Some(&format!("cmake {}", args.join(" "))),
    );
    let configure = run_cmake(&args, |line| {
        let _ = writeln!(log, "{line}");
        reporter.emit(BuildStep::Configure, None, Some(line));
    })
    .await?;
    let _ = log.flush();
    if !configure.success() {
        return Err(cmake_failed(BuildStep::Configure, &configure, &log_file));
    }

    // Which of the wanted targets this tree has. Ninja lists every target (CMake's `help`
    // target leaves out those defined in the top folder).
    let cmake_dir_text = cmake_dir.to_string_lossy().into_owned();
    let mut listing = Command::new("ninja");
    listing
        .arg("-C")
        .arg(&cmake_dir)
        .args(["-t", "targets", "all"]);
    let mut help_text = String::new();
    let help = run_streaming(listing, |line| {
        help_text.push_str(line);
        help_text.push('\n');
    })
    .await
    .map_err(|source| BuildError::Spawn {
        program: "ninja",
        source,
    })?;
    if !help.success() {
        return Err(cmake_failed(BuildStep::Configure, &help, &log_file));
    }
    let available = parse_target_list(&help_text);
    if !available.contains(REQUIRED_TARGET) {
        return Err(BuildError::MissingTarget {
            tree: prepared.tree.clone(),
            target: REQUIRED_TARGET,
        });
    }
    let wanted: Vec<(&str, &str)> = WANTED_TARGETS
        .into_iter()
        .filter_map(|name| tree_target(name, &available).map(|target| (name, target)))
        .collect();
    let targets: Vec<&str> = wanted.iter().map(|(_, target)| *target).collect();

    // Compile.
    let jobs = request
        .jobs
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(2)
        .max(1);
    let mut build_args = vec!["--build".to_owned(), cmake_dir_text, "--target".to_owned()];
    build_args.extend(targets.iter().map(|t| (*t).to_owned()));
    build_args.extend(["-j".to_owned(), jobs.to_string()]);
    let _ = writeln!(log, "$ cmake {}", build_args.join(" "));
    reporter.emit(
        BuildStep::Compile,
        Some(0.0),
        Some(&format!("cmake {}", build_args.join(" "))),
    );
    let mut fraction = 0.0;
    let compile = run_cmake(&build_args, |line| {
        let _ = writeln!(log, "{line}");
        if let Some((done, total)) = parse_ninja_progress(line) {
            fraction = done as f64 / total as f64;
        }
        reporter.emit(BuildStep::Compile, Some(fraction), Some(line));
    })
    .await?;
    let _ = log.flush();
    if !compile.success() {
        return Err(cmake_failed(BuildStep::Compile, &compile, &log_file));
    }
    // Ninja counts edges it later finds up to date: an incremental build ends short of [M/M].
    reporter.emit(BuildStep::Compile, Some(1.0), None);

    // Install: copy into bin/ under a temporary name and rename, so a llama-server running from
    // the old copy keeps its file and the new one appears whole.
    fs::create_dir_all(&bin_dir).map_err(io_err("create the folder", &bin_dir))?;
    let mut binaries = Vec::new();
    for (name, target) in &wanted {
        // llama.cpp puts its programs in bin/ (CMAKE_RUNTIME_OUTPUT_DIRECTORY); a tree that
        // does not leaves them where their target is defined.
        let built_file = [cmake_dir.join("bin").join(target), cmake_dir.join(target)]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| BuildError::MissingBinary {
                path: cmake_dir.join("bin").join(target),
                log: log_file.clone(),
            })?;
        let installed = bin_dir.join(name);
        let partial = bin_dir.join(format!(".{name}.partial"));
        fs::copy(&built_file, &partial).map_err(io_err("copy the binary to", &partial))?;
        fs::rename(&partial, &installed).map_err(io_err("install", &installed))?;
        binaries.push(installed);
    }
    let stamp = BuildStamp {
        source_sha256: prepared.sha256.clone(),
        configure_args: args.clone(),
        binaries: wanted.iter().map(|(name, _)| (*name).to_owned()).collect(),
        wanted: WANTED_TARGETS.iter().map(|t| (*t).to_owned()).collect(),
    };
    let bytes = serde_json::to_vec_pretty(&stamp).unwrap_or_default();
    fs::write(&stamp_file, bytes).map_err(io_err("write", &stamp_file))?;
    Ok(built(binaries, false))
}

/// The tree's target that builds the wanted binary `name`: itself, or its alias in this tree.
fn tree_target<'a>(
    name: &'a str,
    available: &std::collections::HashSet<String>,
) -> Option<&'a str> {
    if available.contains(name) {
        return Some(name);
    }
    TARGET_ALIASES
        .into_iter()
        .find(|(wanted, target)| *wanted == name && available.contains(*target))
        .map(|(_, target)| target)
}

/// The installed binaries when the folder was built from this very source with these flags.
/// A folder source has no hash: Ninja's own bookkeeping decides what to recompile there.
fn reusable(
    stamp: Option<&BuildStamp>,
    bin_dir: &Path,
    prepared: &PreparedSource,
    args: &[String],
) -> Option<Vec<PathBuf>> {
    let stamp = stamp?;
    let sha256 = prepared.sha256.as_deref()?;
    if stamp.source_sha256.as_deref() != Some(sha256) || stamp.configure_args != args {
        return None;
    }
    if !stamp.binaries.iter().any(|b| b == REQUIRED_TARGET) || stamp.wanted != WANTED_TARGETS {
        return None;
    }
    let binaries: Vec<PathBuf> = stamp.binaries.iter().map(|b| bin_dir.join(b)).collect();
    binaries
        .iter()
        .all(|b| is_executable_file(b))
        .then_some(binaries)
}

async fn run_cmake(args: &[String], on_line: impl FnMut(&str)) -> Result<StreamedRun, BuildError> {
    let mut command = Command::new("cmake");
    command.args(args);
    // A fixed status prefix whatever the user's environment says, so progress parses.
    command.env("NINJA_STATUS", "[%f/%t] ");
    run_streaming(command, on_line)
        .await
        .map_err(|source| BuildError::Spawn {
            program: "cmake",
            source,
        })
}

fn cmake_failed(step: BuildStep, run: &StreamedRun, log: &Path) -> BuildError {
    BuildError::Cmake {
        step,
        status: run.status_text(),
        code: run.code,
        log: log.to_owned(),
        tail: run.tail_text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rpc_server_is_built_under_either_target_name() {
        let current = parse_target_list("ggml-rpc-server: phony\nllama-server: phony\n");
        assert_eq!(tree_target("rpc-server", &current), Some("ggml-rpc-server"));
        assert_eq!(tree_target("llama-server", &current), Some("llama-server"));
        let older = parse_target_list("rpc-server: phony\n");
        assert_eq!(tree_target("rpc-server", &older), Some("rpc-server"));
        assert_eq!(tree_target("llama-bench", &older), None);
    }

    #[tokio::test]
    async fn a_second_build_of_a_folder_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let quiet = |_: BuildProgress| {};
        let first_reporter = Reporter {
            build_id: "first".into(),
            sink: &quiet,
        };
        let first = BuildLock::acquire(dir.path(), &first_reporter)
            .await
            .unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (path, seen) = (dir.path().to_owned(), lines.clone());
        let second = tokio::spawn(async move {
            let sink = move |p: BuildProgress| seen.lock().unwrap().extend(p.line);
            let reporter = Reporter {
                build_id: "second".into(),
                sink: &sink,
            };
            BuildLock::acquire(&path, &reporter).await.map(drop)
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!second.is_finished(), "the second build did not wait");
        let said = lines.lock().unwrap().clone();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("waiting for the build already running in")
                && said[0].ends_with(&format!("(process {})", std::process::id())),
            "{said:?}"
        );
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(10), second)
            .await
            .expect("the second build goes on once the first is done")
            .unwrap()
            .unwrap();
    }
}
