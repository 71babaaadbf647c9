//! Builds llama.cpp (or ik_llama.cpp) with CMake + Ninja for a chosen backend, streaming the
//! output line by line as [`BuildProgress`] events.
//!
//! Layout of a build folder (`<data dir>/engines/<kind>-<version>-<backend>/` by default):
//! `cmake/` is CMake's build tree, `bin/` holds the installed binaries (`llama-server`,
//! `llama-bench`, `llama-fit-params`), `rigdeck-build.log` the full log of the last build and
//! `rigdeck-build.json` what was built from what. A build whose stamp matches the source hash and
//! the flags, with its binaries in place, is reused without running CMake at all.
//!
//! CMake and Ninja run from argv vectors; nothing is interpolated into a shell.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use super::source::{self, PreparedSource, SourceError, SourceSpec};
use super::streamed_run::{run_streaming, StreamedRun};
use super::{find_in_path, is_executable_file, Backend, EngineKind};
use rigdeck_telemetry::snapshot::{ComputeCapability, GpuReadout};

/// The binaries Rigdeck wants from a llama.cpp tree; only `llama-server` is required (older trees
/// and ik_llama.cpp have no `llama-fit-params`).
pub const WANTED_TARGETS: [&str; 3] = ["llama-server", "llama-bench", "llama-fit-params"];
const REQUIRED_TARGET: &str = "llama-server";

const LOG_FILE: &str = "rigdeck-build.log";
const STAMP_FILE: &str = "rigdeck-build.json";
const LOCK_FILE: &str = "rigdeck-build.lock";

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStep {
    Fetch,
    Verify,
    Extract,
    Configure,
    Compile,
    Done,
    Failed,
}

impl BuildStep {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStep::Fetch => "fetch",
            BuildStep::Verify => "verify",
            BuildStep::Extract => "extract",
            BuildStep::Configure => "configure",
            BuildStep::Compile => "compile",
            BuildStep::Done => "done",
            BuildStep::Failed => "failed",
        }
    }
}

impl std::fmt::Display for BuildStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One progress report of a build; published on the bus as `engine.build`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildProgress {
    pub build_id: String,
    pub step: BuildStep,
    /// Progress within the compile step (Ninja's `[N/M]`), 1.0 when done; `None` where unknown.
    pub fraction: Option<f64>,
    /// The latest output line, or what the step is doing.
    pub line: Option<String>,
}

/// A progress listener: the CLI prints, the server publishes on the event bus
/// (`EventBus::build_progress`): builds know nothing of events.
pub type ProgressSink<'a> = &'a (dyn Fn(BuildProgress) + Send + Sync);

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
}

impl BuildRequest {
    /// The bundled llama.cpp for `backend`, built under `engines_dir` with sources cached in
    /// `cache_dir`: what the first-run offer and the tests build.
    pub fn bundled(backend: Backend, engines_dir: PathBuf, cache_dir: PathBuf) -> Self {
        Self {
            kind: EngineKind::LlamaCpp,
            source: SourceSpec::Bundled,
            backend,
            cuda_architectures: None,
            engines_dir,
            build_dir: None,
            cache_dir,
            jobs: None,
        }
    }
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
    #[error("{kind} is not built from source by Rigdeck: register an existing Python environment with `rigdeck engines register PATH --kind {kind}`")]
    NotBuildable { kind: EngineKind },
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

/// [`cuda_architectures`] of the GPUs NVML reports (the CLI's and the API's default).
pub fn cuda_architectures_of(gpus: &GpuReadout) -> Option<String> {
    let capabilities: Vec<ComputeCapability> = gpus
        .gpus
        .iter()
        .filter_map(|gpu| gpu.compute_capability)
        .collect();
    cuda_architectures(&capabilities)
}

/// The `CMAKE_CUDA_ARCHITECTURES` list for these GPUs: compute capability 8.6 → `86`, sorted,
/// each once, `;`-separated (`86;120`). `None` when no GPU reports one. llama.cpp itself turns a
/// plain `120` into `120a` (the Blackwell FP4 instructions need the arch-specific variant).
pub fn cuda_architectures(capabilities: &[ComputeCapability]) -> Option<String> {
    let mut archs: Vec<i32> = capabilities
        .iter()
        .filter(|c| c.major > 0 && (0..10).contains(&c.minor))
        .map(|c| c.major * 10 + c.minor)
        .collect();
    archs.sort_unstable();
    archs.dedup();
    (!archs.is_empty()).then(|| {
        archs
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(";")
    })
}

/// Checks a user's architecture list (`86`, `86;120`, `89,90`, `120a-real`, `native`) and returns
/// it `;`-separated, as CMake wants it.
pub fn parse_cuda_architectures(text: &str) -> Result<String, BuildError> {
    let bad = || BuildError::BadCudaArchitectures(text.to_owned());
    let parts: Vec<&str> = text
        .split([';', ',', ' '])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(bad());
    }
    for part in &parts {
        if matches!(*part, "native" | "all" | "all-major") && parts.len() == 1 {
            continue;
        }
        let base = part
            .strip_suffix("-real")
            .or_else(|| part.strip_suffix("-virtual"))
            .unwrap_or(part);
        let digits = base.trim_end_matches(['a', 'f']);
        let ok = (2..=3).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && base.len() - digits.len() <= 1;
        if !ok {
            return Err(bad());
        }
    }
    Ok(parts.join(";"))
}

/// The `option(...)` names a tree's top-level `CMakeLists.txt` declares. Flags depend on them:
/// current llama.cpp builds `llama-server` under `tools/` (`LLAMA_BUILD_TOOLS`), older trees and
/// ik_llama.cpp under `examples/` (`LLAMA_BUILD_EXAMPLES`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeOptions {
    declared: BTreeSet<String>,
}

impl TreeOptions {
    pub fn parse(cmakelists: &str) -> Self {
        let mut declared = BTreeSet::new();
        for line in cmakelists.lines() {
            let line = line.trim_start();
            if line.starts_with('#') {
                continue;
            }
            let Some(rest) = line.strip_prefix("option") else {
                continue;
            };
            let Some(rest) = rest.trim_start().strip_prefix('(') else {
                continue;
            };
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                declared.insert(name);
            }
        }
        Self { declared }
    }

    pub fn read(tree: &Path) -> Result<Self, BuildError> {
        let path = tree.join("CMakeLists.txt");
        let text = fs::read_to_string(&path).map_err(io_err("read", &path))?;
        Ok(Self::parse(&text))
    }

    pub fn declares(&self, name: &str) -> bool {
        self.declared.contains(name)
    }
}

/// Everything that decides the configure command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigurePlan {
    pub backend: Backend,
    pub cuda_architectures: Option<String>,
    pub cuda_compiler: Option<PathBuf>,
    /// Passed as `LLAMA_BUILD_COMMIT` when the tree has no git history to read it from.
    pub commit: Option<String>,
    pub options: TreeOptions,
}

/// The `cmake` arguments that configure `tree` into `cmake_dir`.
pub fn configure_args(tree: &Path, cmake_dir: &Path, plan: &ConfigurePlan) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-S".into(),
        tree.to_string_lossy().into_owned(),
        "-B".into(),
        cmake_dir.to_string_lossy().into_owned(),
        "-G".into(),
        "Ninja".into(),
        "-DCMAKE_BUILD_TYPE=Release".into(),
        // No libcurl: Rigdeck downloads models itself; one dependency fewer to install.
        "-DLLAMA_CURL=OFF".into(),
        // Static: the binaries keep working when the build tree is cleaned or moved.
        "-DBUILD_SHARED_LIBS=OFF".into(),
        "-DLLAMA_BUILD_TESTS=OFF".into(),
    ];
    if plan.options.declares("LLAMA_BUILD_TOOLS") {
        args.push("-DLLAMA_BUILD_TOOLS=ON".into());
        args.push("-DLLAMA_BUILD_EXAMPLES=OFF".into());
    } else {
        // Older layout (ik_llama.cpp): the server and llama-bench are examples.
        args.push("-DLLAMA_BUILD_EXAMPLES=ON".into());
    }
    if plan.options.declares("LLAMA_BUILD_SERVER") {
        args.push("-DLLAMA_BUILD_SERVER=ON".into());
    }
    if plan.options.declares("LLAMA_USE_PREBUILT_UI") {
        // Otherwise the build downloads the server's web UI from Hugging Face: no network
        // during a build, and Rigdeck has its own UI.
        args.push("-DLLAMA_USE_PREBUILT_UI=OFF".into());
    }
    if let Some(commit) = &plan.commit {
        args.push(format!("-DLLAMA_BUILD_COMMIT={commit}"));
    }
    match plan.backend {
        Backend::Cpu | Backend::Rocm => {}
        Backend::Cuda => {
            args.push("-DGGML_CUDA=ON".into());
            if let Some(archs) = &plan.cuda_architectures {
                args.push(format!("-DCMAKE_CUDA_ARCHITECTURES={archs}"));
            }
            if let Some(nvcc) = &plan.cuda_compiler {
                args.push(format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()));
            }
        }
        Backend::Vulkan => args.push("-DGGML_VULKAN=ON".into()),
    }
    args
}

/// Ninja's `[N/M]` status prefix as a fraction (Rigdeck sets `NINJA_STATUS` to that form).
pub fn parse_ninja_progress(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (inside, _) = rest.split_once(']')?;
    let (done, total) = inside.split_once('/')?;
    let done = done.trim().parse().ok()?;
    let total: u64 = total.trim().parse().ok()?;
    (total > 0 && done <= total).then_some((done, total))
}

/// The target names in the output of `ninja -t targets all` (`name: rule`, one a line).
pub fn parse_target_list(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|line| line.trim().split_once(": "))
        .map(|(name, _)| name.trim().to_owned())
        .filter(|name| !name.is_empty() && !name.contains(' '))
        .collect()
}

/// What the build folder was last built from; a match (and binaries present) means no rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BuildStamp {
    /// `None` for a folder source: such a build is never reused without running Ninja.
    source_sha256: Option<String>,
    configure_args: Vec<String>,
    binaries: Vec<String>,
}

/// An exclusive `flock` on the build folder's lock file, so two builds never share a folder: a
/// second build (another click, another process, a parallel test) waits for the first and then
/// usually reuses its result. The kernel drops the lock when its holder exits, so a build that
/// died never leaves the folder locked. The file itself stays (removing a locked file would let
/// a third build lock a fresh inode beside the second).
struct BuildLock {
    _file: fs::File,
}

impl BuildLock {
    async fn acquire(dir: &Path, reporter: &Reporter<'_>) -> Result<Self, BuildError> {
        let path = dir.join(LOCK_FILE);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open", &path))?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(io_err("lock", &path))? {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            reporter.emit(
                BuildStep::Configure,
                None,
                Some(&format!(
                    "waiting for the build already running in {} (process {})",
                    dir.display(),
                    holder.trim()
                )),
            );
            let waiting = file.try_clone().map_err(io_err("lock", &path))?;
            tokio::task::spawn_blocking(move || flock(&waiting, libc::LOCK_EX))
                .await
                .map_err(|e| io_err("lock", &path)(io::Error::other(e)))?
                .map_err(io_err("lock", &path))?;
        }
        // Who holds it, for the message a waiting build shows.
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(Self { _file: file })
    }
}

/// `flock(2)` on `file`; `Ok(false)` when `LOCK_NB` was asked and another holder has it.
fn flock(file: &fs::File, operation: libc::c_int) -> io::Result<bool> {
    use std::os::fd::AsRawFd as _;
    loop {
        // SAFETY: the descriptor belongs to `file`, which outlives the call.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
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
        return Err(BuildError::NotBuildable { kind: request.kind });
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

/// The CUDA compiler: `$CUDACXX`, `nvcc` on PATH, `$CUDA_HOME/bin`, `$CUDA_PATH/bin`, then the
/// toolkit's usual place.
pub fn find_nvcc() -> Option<PathBuf> {
    if let Some(cudacxx) = std::env::var_os("CUDACXX").map(PathBuf::from) {
        if is_executable_file(&cudacxx) {
            return Some(cudacxx);
        }
    }
    if let Some(nvcc) = find_in_path("nvcc") {
        return Some(nvcc);
    }
    ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|home| PathBuf::from(home).join("bin/nvcc"))
        .chain([PathBuf::from("/usr/local/cuda/bin/nvcc")])
        .find(|p| is_executable_file(p))
}

/// The folder a build goes into when none is given.
pub fn default_build_dir(
    engines_dir: &Path,
    kind: EngineKind,
    version: &str,
    backend: Backend,
) -> PathBuf {
    engines_dir.join(format!("{}-{version}-{}", kind.as_str(), backend.as_str()))
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
        )
    });
    fs::create_dir_all(&build_dir).map_err(io_err("create the build folder", &build_dir))?;
    let _lock = BuildLock::acquire(&build_dir, reporter).await?;
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
    let targets: Vec<&str> = WANTED_TARGETS
        .into_iter()
        .filter(|t| available.contains(*t))
        .collect();

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

    // Install: copy into bin/ under a temporary name and rename, so a llama-server running from
    // the old copy keeps its file and the new one appears whole.
    fs::create_dir_all(&bin_dir).map_err(io_err("create the folder", &bin_dir))?;
    let mut binaries = Vec::new();
    for target in &targets {
        // llama.cpp puts its programs in bin/ (CMAKE_RUNTIME_OUTPUT_DIRECTORY); a tree that
        // does not leaves them where their target is defined.
        let built_file = [cmake_dir.join("bin").join(target), cmake_dir.join(target)]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| BuildError::MissingBinary {
                path: cmake_dir.join("bin").join(target),
                log: log_file.clone(),
            })?;
        let installed = bin_dir.join(target);
        let partial = bin_dir.join(format!(".{target}.partial"));
        fs::copy(&built_file, &partial).map_err(io_err("copy the binary to", &partial))?;
        fs::rename(&partial, &installed).map_err(io_err("install", &installed))?;
        binaries.push(installed);
    }
    let stamp = BuildStamp {
        source_sha256: prepared.sha256.clone(),
        configure_args: args.clone(),
        binaries: targets.iter().map(|t| (*t).to_owned()).collect(),
    };
    let bytes = serde_json::to_vec_pretty(&stamp).unwrap_or_default();
    fs::write(&stamp_file, bytes).map_err(io_err("write", &stamp_file))?;
    Ok(built(binaries, false))
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
    if !stamp.binaries.iter().any(|b| b == REQUIRED_TARGET) {
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

    fn cc(major: i32, minor: i32) -> ComputeCapability {
        ComputeCapability { major, minor }
    }

    #[test]
    fn cuda_architectures_come_from_the_gpus_compute_capabilities() {
        assert_eq!(
            cuda_architectures(&[cc(12, 0), cc(8, 6), cc(8, 6)]).as_deref(),
            Some("86;120")
        );
        assert_eq!(cuda_architectures(&[cc(9, 0)]).as_deref(), Some("90"));
        assert_eq!(
            cuda_architectures(&[cc(8, 9), cc(7, 5), cc(8, 0)]).as_deref(),
            Some("75;80;89")
        );
        assert_eq!(cuda_architectures(&[]), None);
        assert_eq!(cuda_architectures(&[cc(0, 0)]), None);
    }

    #[test]
    fn user_architecture_lists_are_checked_and_normalised() {
        assert_eq!(parse_cuda_architectures("86").unwrap(), "86");
        assert_eq!(parse_cuda_architectures("86,120").unwrap(), "86;120");
        assert_eq!(parse_cuda_architectures(" 89 ; 90 ").unwrap(), "89;90");
        assert_eq!(
            parse_cuda_architectures("120a-real;90-virtual").unwrap(),
            "120a-real;90-virtual"
        );
        assert_eq!(parse_cuda_architectures("native").unwrap(), "native");
        for bad in ["", "8.6", "sm_86", "86;$(rm -rf /)", "1234", "native;86"] {
            let err = parse_cuda_architectures(bad).unwrap_err().to_string();
            assert!(err.contains("invalid CUDA architectures"), "{bad}: {err}");
        }
    }

    #[test]
    fn tree_options_are_read_from_option_declarations() {
        let text = "option(LLAMA_BUILD_TOOLS \"llama: build tools\" ON)\n\
                    # option(LLAMA_COMMENTED \"no\" ON)\n\
                    option (LLAMA_BUILD_SERVER \"server\" ON)\n\
                    set(LLAMA_NOT_AN_OPTION ON)\n";
        let options = TreeOptions::parse(text);
        assert!(options.declares("LLAMA_BUILD_TOOLS"));
        assert!(options.declares("LLAMA_BUILD_SERVER"));
        assert!(!options.declares("LLAMA_COMMENTED"));
        assert!(!options.declares("LLAMA_NOT_AN_OPTION"));
    }

    fn plan(backend: Backend, options: &str) -> ConfigurePlan {
        ConfigurePlan {
            backend,
            cuda_architectures: Some("86;120".into()),
            cuda_compiler: Some(PathBuf::from("/usr/local/cuda/bin/nvcc")),
            commit: None,
            options: TreeOptions::parse(options),
        }
    }

    const CURRENT_TREE: &str = "option(LLAMA_BUILD_TOOLS \"\" ON)\noption(LLAMA_BUILD_SERVER \"\" ON)\noption(LLAMA_USE_PREBUILT_UI \"\" ON)\n";

    #[test]
    fn configure_flags_for_a_current_tree_on_cpu() {
        let args = configure_args(
            Path::new("/src"),
            Path::new("/b/cmake"),
            &ConfigurePlan {
                commit: Some("0c1e570".into()),
                ..plan(Backend::Cpu, CURRENT_TREE)
            },
        );
        assert_eq!(
            args,
            [
                "-S",
                "/src",
                "-B",
                "/b/cmake",
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLLAMA_CURL=OFF",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_TOOLS=ON",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_BUILD_COMMIT=0c1e570",
            ]
        );
    }

    #[test]
    fn configure_flags_for_cuda_vulkan_and_an_older_tree() {
        let cuda = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cuda, CURRENT_TREE),
        );
        assert!(cuda.ends_with(&[
            "-DGGML_CUDA=ON".to_owned(),
            "-DCMAKE_CUDA_ARCHITECTURES=86;120".to_owned(),
            "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc".to_owned(),
        ]));
        let vulkan = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Vulkan, CURRENT_TREE),
        );
        assert_eq!(vulkan.last().map(String::as_str), Some("-DGGML_VULKAN=ON"));
        assert!(!vulkan.iter().any(|a| a.contains("CUDA")));
        // ik_llama.cpp: no LLAMA_BUILD_TOOLS, the server is an example.
        let older = configure_args(
            Path::new("/s"),
            Path::new("/b"),
            &plan(Backend::Cpu, "option(LLAMA_BUILD_SERVER \"\" ON)\n"),
        );
        assert!(older.contains(&"-DLLAMA_BUILD_EXAMPLES=ON".to_owned()));
        assert!(!older
            .iter()
            .any(|a| a.contains("LLAMA_BUILD_TOOLS") || a.contains("PREBUILT")));
    }

    #[test]
    fn ninja_status_lines_become_fractions() {
        assert_eq!(
            parse_ninja_progress(
                "[12/240] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
            ),
            Some((12, 240))
        );
        assert_eq!(
            parse_ninja_progress("[240/240] Linking CXX executable bin/llama-server"),
            Some((240, 240))
        );
        assert_eq!(parse_ninja_progress("-- Configuring done"), None);
        assert_eq!(parse_ninja_progress("[3/0] nonsense"), None);
        assert_eq!(parse_ninja_progress("[warning] something"), None);
    }

    #[test]
    fn ninja_target_lists_are_parsed() {
        let text =
            "bin/llama-server: CXX_EXECUTABLE_LINKER__llama-server_Release\nedit_cache: phony\n\
                    llama-server: phony\nllama-bench: phony\ntools/server/install: phony\n";
        let targets = parse_target_list(text);
        assert!(targets.contains("llama-server") && targets.contains("llama-bench"));
        assert!(targets.contains("bin/llama-server"));
        assert!(!targets.contains("llama-fit-params"));
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
