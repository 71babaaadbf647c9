//! Launch profiles, running instances and engine builds over HTTP: what the Instances page and
//! `rigdeck run/ps/stop/logs/profiles` use. Profiles are checked and planned when saved, starts
//! are checked against free VRAM (see `rigdeck_core::profiles::admission`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rigdeck_core::calibration;
use rigdeck_core::engines::registry::EngineBuild;
use rigdeck_core::engines::{Backend, EngineKind, UnknownKind};
use rigdeck_core::launch::export::{export_port, shell_script, systemd_unit, ExportError};
use rigdeck_core::launch::instances::LaunchError;
use rigdeck_core::launch::ProfileStoreError;
use rigdeck_core::launch::{AdmissionError, Instances, LaunchProfile, PlannedGpu};
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::placement::from_gguf::{load_shape, LoadedModel};
use rigdeck_core::placement::report::report;
use rigdeck_core::placement::rig::Margins;
use rigdeck_core::placement::DeviceId;
use rigdeck_core::profiles::profile::{self, argv};
use rigdeck_core::profiles::{ik_memory, multi_node, python_engines};
use rigdeck_core::store::Store;
use rigdeck_core::supervisor::SuperviseError;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

pub(super) fn store(state: &AppState) -> ApiResult<&Store> {
    state.store.as_ref().ok_or_else(no_database)
}

fn instances(state: &AppState) -> ApiResult<&Arc<Instances>> {
    state.instances.as_ref().ok_or_else(no_database)
}

fn no_database() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_database",
        "the database could not be opened when the daemon started (see its log): profiles and instances need it; fix the data folder and restart `rigdeck serve`",
    )
}

fn launch_error(err: LaunchError) -> ApiError {
    let (status, code) = match &err {
        LaunchError::Profile(ProfileStoreError::NotFound(_)) => {
            (StatusCode::NOT_FOUND, "profile_not_found")
        }
        LaunchError::Profile(ProfileStoreError::Exists(_)) => {
            (StatusCode::CONFLICT, "profile_exists")
        }
        LaunchError::Profile(_) | LaunchError::Registry(_) | LaunchError::NoFreePort { .. } => {
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        }
        LaunchError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_profile"),
        LaunchError::Admission(AdmissionError::DoesNotFit { .. }) => {
            (StatusCode::CONFLICT, "does_not_fit")
        }
        LaunchError::Admission(AdmissionError::StillHeld { .. }) => {
            (StatusCode::CONFLICT, "vram_still_held")
        }
        LaunchError::Supervise(
            SuperviseError::AlreadyRunning { .. } | SuperviseError::OrphanAlive { .. },
        ) => (StatusCode::CONFLICT, "already_running"),
        LaunchError::Supervise(SuperviseError::BadProgram { .. }) => {
            (StatusCode::BAD_REQUEST, "engine_missing")
        }
        LaunchError::Supervise(_) => (StatusCode::INTERNAL_SERVER_ERROR, "supervisor"),
        LaunchError::NotRunning(_) => (StatusCode::NOT_FOUND, "instance_not_found"),
    };
    ApiError::new(status, code, err.to_string())
}

/// A stored profile the file cannot hold (one saved before today's checks): the profile must
/// be changed, so it is the client's to fix.
fn export_error(err: ExportError) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "cannot_export", err.to_string())
}

pub(super) fn store_error(err: ProfileStoreError) -> ApiError {
    launch_error(LaunchError::Profile(err))
}

fn internal(err: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        err.to_string(),
    )
}

/// `GET /engines`: the installed builds.
pub async fn engines(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<EngineBuild>>> {
    Ok(Json(
        store(&state)?.engine_builds().await.map_err(internal)?,
    ))
}

pub async fn list_profiles(
    State(state): State<Arc<AppState>>,
) -> ApiResult<Json<Vec<LaunchProfile>>> {
    Ok(Json(
        store(&state)?
            .launch_profiles()
            .await
            .map_err(store_error)?,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SaveQuery {
    /// Let the planner's solver choose the placement on the live rig.
    auto: bool,
}

/// `POST /profiles`: checks, plans and stores a new profile.
pub async fn create_profile(
    State(state): State<Arc<AppState>>,
    Query(query): Query<SaveQuery>,
    Json(profile): Json<LaunchProfile>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let saved = save_new_profile(&state, profile, query.auto).await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

/// Checks, plans and stores a new profile; the stored profile with its command line and the
/// warnings (the tuning's "save the best as a profile" goes this way too).
pub(crate) async fn save_new_profile(
    state: &AppState,
    profile: LaunchProfile,
    auto: bool,
) -> ApiResult<Value> {
    let (profile, warnings) = prepare(state, profile, auto, None).await?;
    store(state)?
        .create_launch_profile(&profile, rigdeck_core::now_ms())
        .await
        .map_err(store_error)?;
    saved(state, profile, warnings).await
}

/// `PUT /profiles/{name}`: replaces a profile (the body may rename it).
pub async fn update_profile(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(query): Query<SaveQuery>,
    Json(profile): Json<LaunchProfile>,
) -> ApiResult<Json<Value>> {
    let (profile, warnings) = prepare(&state, profile, query.auto, Some(&name)).await?;
    store(&state)?
        .update_launch_profile(&name, &profile, rigdeck_core::now_ms())
        .await
        .map_err(store_error)?;
    Ok(Json(saved(&state, profile, warnings).await?))
}

pub async fn get_profile(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let profile = store(&state)?
        .launch_profile(&name)
        .await
        .map_err(store_error)?;
    Ok(Json(saved(&state, profile, Vec::new()).await?))
}

pub async fn delete_profile(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    store(&state)?
        .delete_launch_profile(&name)
        .await
        .map_err(store_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Validation against the build and the machine, then the planned memory per GPU.
pub(crate) async fn prepare(
    state: &AppState,
    mut profile: LaunchProfile,
    auto: bool,
    replacing: Option<&str>,
) -> ApiResult<(LaunchProfile, Vec<String>)> {
    let others = store(state)?.launch_profiles().await.map_err(store_error)?;
    profile::check_gateway_names(&profile, &others, replacing)
        .map_err(|e| launch_error(LaunchError::Invalid(e)))?;
    let build = store(state)?
        .engine_build(profile.engine_build_id)
        .await
        .map_err(internal)?;
    let sample = state.telemetry.latest().map(|f| f.sample.clone());
    let numa_nodes = sample.as_ref().map_or(0, |s| s.host.numa_nodes.len());
    let mut warnings = profile::validate(&profile, build.as_ref(), numa_nodes)
        .map_err(|e| launch_error(LaunchError::Invalid(e)))?;
    let Some(build) = build else {
        return Ok((profile, warnings));
    };
    // A plan given by the client stands; a CPU build plans no GPU memory; vLLM and SGLang
    // take a fixed share of each GPU they use.
    let plans_gpus = profile.planned_memory.is_empty()
        && !build.kind.is_python()
        && build.backend != Backend::Cpu;
    let is_ik = build.kind == EngineKind::IkLlamaCpp;
    // The model's header, read once for the plan and for ik_llama.cpp's notes.
    let loaded =
        (plans_gpus || is_ik).then(|| load_shape(&profile.model).map_err(|e| e.to_string()));
    if profile.planned_memory.is_empty() && build.kind.is_python() {
        match &sample {
            Some(sample) => {
                profile.planned_memory = python_engines::planned_memory(&profile, &sample.gpus)
            }
            None => warnings.push("no telemetry yet: planned memory unknown".to_owned()),
        }
    }
    if let (true, Some(loaded)) = (plans_gpus, &loaded) {
        match sample {
            Some(sample) => match plan_memory(state, &mut profile, loaded, &sample, auto).await {
                Ok(mut notes) => warnings.append(&mut notes),
                Err(why) => warnings.push(format!(
                    "planned memory unknown ({why}): starts will not be checked against free VRAM"
                )),
            },
            None => warnings.push("no telemetry yet: planned memory unknown".to_owned()),
        }
    }
    if is_ik {
        let shape = loaded.as_ref().and_then(|l| l.as_ref().ok());
        let attention = shape.map(|l| &l.shape.attention);
        warnings.extend(ik_memory::notes(
            &profile.engine,
            attention,
            &profile.placement,
        ));
    }
    Ok((profile, warnings))
}

/// The profile's plan on the GPUs now, corrected by this rig's records, as its planned memory.
async fn plan_memory(
    state: &AppState,
    profile: &mut LaunchProfile,
    loaded: &Result<LoadedModel, String>,
    sample: &rigdeck_core::telemetry::snapshot::RigSample,
    auto: bool,
) -> Result<Vec<String>, String> {
    let loaded = loaded.as_ref().map_err(Clone::clone)?;
    let mut devices = live_devices(sample, &Margins::default());
    if let Some(store) = &state.store {
        let architecture = &loaded.shape.architecture;
        calibration::correct(store, Some(&sample.gpus), architecture, &mut devices).await;
    }
    let model = profile.model.to_string_lossy().into_owned();
    let planned = report(&loaded.shape, &model, &devices, &profile.placement, auto)
        .map_err(|e| e.to_string())?;
    let mut notes = planned.notes.clone();
    if !planned.fits {
        notes.push(format!(
            "the plan does not fit in the free memory now: {}",
            planned.problems.join("; ")
        ));
    }
    if auto {
        profile.placement = planned.options.clone();
    }
    profile.planned_memory = planned
        .plan
        .devices
        .iter()
        .filter_map(|d| match d.spec.id {
            DeviceId::Gpu(gpu) if d.usage.total_bytes() > 0 => Some(PlannedGpu {
                gpu,
                bytes: d.usage.total_bytes(),
            }),
            _ => None,
        })
        .collect();
    Ok(notes)
}

/// The stored profile with its exact command line; a port picked at each start is shown as
/// such (`--port <chosen at start>`), never as a number the engine will not use.
async fn saved(
    state: &AppState,
    profile: LaunchProfile,
    warnings: Vec<String>,
) -> ApiResult<Value> {
    let build = store(state)?
        .engine_build(profile.engine_build_id)
        .await
        .map_err(internal)?;
    let shown = LaunchProfile {
        seat: profile.multi_node.as_ref().and_then(multi_node::head_seat),
        ..profile.clone()
    };
    let argv = build
        .as_ref()
        .and_then(|b| profile::display_argv(&shown, b).ok());
    let command_line = argv.as_deref().map(profile::display_command_line);
    Ok(json!({
        "profile": profile,
        "warnings": warnings,
        "argv": argv,
        "command_line": command_line,
        "build_missing": build.is_none(),
        "exposes": profile.multi_node.as_ref().map(multi_node::exposure),
    }))
}

#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: String,
}

/// `GET /profiles/{name}/export?format=shell|systemd`: a text file.
pub async fn export_profile(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(query): Query<ExportQuery>,
) -> ApiResult<Response> {
    let profile = store(&state)?
        .launch_profile(&name)
        .await
        .map_err(store_error)?;
    let build = profile_build(&state, &profile).await?;
    let (port, note) = export_port(&profile).map_err(launch_error)?;
    // numactl is looked up where the file will most likely run: this machine.
    let numactl = profile
        .numa_node
        .map(|_| std::path::PathBuf::from("/usr/bin/numactl"));
    let argv = argv(&profile, &build, port, numactl.as_deref())
        .map_err(|e| launch_error(LaunchError::Invalid(e)))?;
    let (text, file) = match query.format.as_str() {
        "shell" | "sh" => (
            shell_script(&profile, &argv, note.as_deref()),
            format!("{name}.sh"),
        ),
        "systemd" => (
            systemd_unit(&profile, &argv, note.as_deref()),
            format!("rigdeck-{name}.service"),
        ),
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_format",
                format!("unknown export format '{other}': use shell or systemd"),
            ))
        }
    };
    let text = text.map_err(export_error)?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        text,
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StartBody {
    force: bool,
}

/// The engine build `profile` runs on; a profile whose build is gone is refused naming both.
pub(super) async fn profile_build(
    state: &AppState,
    profile: &LaunchProfile,
) -> ApiResult<EngineBuild> {
    store(state)?
        .engine_build(profile.engine_build_id)
        .await
        .map_err(internal)?
        .ok_or_else(|| {
            launch_error(LaunchError::Invalid(profile::ProfileError::UnknownBuild {
                profile: profile.name.clone(),
                id: profile.engine_build_id,
            }))
        })
}

/// `POST /profiles/{name}/start`.
pub async fn start_profile(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Option<Json<StartBody>>,
) -> ApiResult<Json<Value>> {
    let force = body.is_some_and(|b| b.force);
    let profile = store(&state)?
        .launch_profile(&name)
        .await
        .map_err(store_error)?;
    if profile.is_gang() {
        let build = profile_build(&state, &profile).await?;
        return super::gang::start(&state, profile, &build).await;
    }
    let view = instances(&state)?
        .start(&name, force)
        .await
        .map_err(launch_error)?;
    Ok(Json(json!(view)))
}

pub async fn list_instances(State(state): State<Arc<AppState>>) -> ApiResult<Json<Value>> {
    Ok(Json(json!(instances(&state)?.list())))
}

pub async fn stop_instance(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    if super::gang::is_gang(&state, &name) {
        return super::gang::stop(&state, &name).await;
    }
    let view = instances(&state)?.stop(&name).await.map_err(launch_error)?;
    Ok(Json(json!(view)))
}

pub async fn restart_instance(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Option<Json<StartBody>>,
) -> ApiResult<Json<Value>> {
    let force = body.is_some_and(|b| b.force);
    if super::gang::is_gang(&state, &name) {
        let _stopped = super::gang::stop(&state, &name).await?;
        return start_profile(State(state), Path(name), None).await;
    }
    let view = instances(&state)?
        .restart(&name, force)
        .await
        .map_err(launch_error)?;
    Ok(Json(json!(view)))
}

/// `GET /instances/{name}/speculation`: drafted and accepted tokens since the engine started.
pub async fn instance_speculation(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    // An engine on this machine answers its /metrics in milliseconds or not at all.
    static CLIENT: std::sync::LazyLock<reqwest::Client> = std::sync::LazyLock::new(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(3))
            .build()
            .unwrap_or_default()
    });
    let view = rigdeck_core::launch::speculation::read(instances(&state)?, CLIENT.clone(), &name)
        .await
        .map_err(launch_error)?;
    Ok(Json(json!(view)))
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub struct LogsQuery {
    search: Option<String>,
    tail: usize,
    /// Only lines with a larger `seq` (for following).
    after: Option<u64>,
}

impl Default for LogsQuery {
    fn default() -> Self {
        Self {
            search: None,
            tail: 200,
            after: None,
        }
    }
}

pub async fn instance_logs(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> ApiResult<Json<Value>> {
    let lines = instances(&state)?
        .logs(&name, query.search.as_deref(), query.after, query.tail)
        .map_err(launch_error)?;
    Ok(Json(json!(lines)))
}

/// One engine build or install at a time per daemon: a build takes every core for minutes.
static BUILDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Holds the daemon's one build slot; dropping it (the task ends, or panics) frees it.
struct BuildSlot;

impl BuildSlot {
    fn claim() -> ApiResult<Self> {
        if BUILDING.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "build_running",
                "an engine build or install is already running: wait for it to finish",
            ));
        }
        Ok(Self)
    }
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        BUILDING.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildBody {
    #[serde(default = "cpu_backend")]
    backend: String,
    /// For CUDA: `86;120`-style; default from the GPUs the telemetry sees.
    #[serde(default)]
    cuda_architectures: Option<String>,
    /// The package index the pinned source comes from (pip's `--index-url`: a mirror); default
    /// pip's own setting, else PyPI.
    #[serde(default)]
    index_url: Option<String>,
    /// `llama.cpp` (default) or `ik_llama.cpp`: each from its own pinned source.
    #[serde(default)]
    kind: Option<String>,
    /// Another release of the package the pinned source comes in (`0.3.40`: a newer llama.cpp),
    /// verified against the sha256 the index states; default the bundled pin.
    #[serde(default)]
    release: Option<String>,
}

fn cpu_backend() -> String {
    "cpu".to_owned()
}

#[derive(Debug, Deserialize)]
pub struct VersionsQuery {
    kind: String,
    index_url: Option<String>,
}

/// `GET /engines/versions?kind=vllm[&index_url=]`: the releases the package index serves, newest
/// first, against the installed builds: for vLLM and SGLang their packages (`default`, the
/// first, is what an install without a version takes); for llama.cpp and ik_llama.cpp the
/// packages their sources come in (`default` is the bundled pin, `newer` what builds beside it).
pub async fn engine_versions(
    State(state): State<Arc<AppState>>,
    Query(query): Query<VersionsQuery>,
) -> ApiResult<Json<Value>> {
    use rigdeck_core::engines::{python_env, releases};
    let kind: EngineKind = query.kind.parse().map_err(|e: UnknownKind| {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_kind", e.to_string())
    })?;
    let builds = store(&state)?.engine_builds().await.map_err(internal)?;
    let found = releases::engine_releases(kind, query.index_url.as_deref(), &builds)
        .await
        .map_err(|err| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "index_unreachable",
                err.to_string(),
            )
        })?;
    let default = match kind.is_python() {
        true => found
            .versions
            .first()
            .cloned()
            .or_else(|| python_env::default_version(kind).map(str::to_owned)),
        false => found.pinned.clone(),
    };
    let mut answer = serde_json::to_value(&found).map_err(internal)?;
    answer["default"] = json!(default);
    Ok(Json(answer))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallBody {
    kind: String,
    /// Default: the newest release on the index.
    #[serde(default)]
    version: Option<String>,
    /// pip's `--index-url` (a mirror).
    #[serde(default)]
    index_url: Option<String>,
}

/// `POST /engines/install`: vLLM or SGLang into a managed virtual environment with pip, in the
/// background. pip's output arrives as `engine.build` events, as a build's does.
pub async fn install_engine(
    State(state): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    use rigdeck_core::engines::python_env::{self, PythonInstallRequest};

    let bad =
        |code: &'static str, message: String| ApiError::new(StatusCode::BAD_REQUEST, code, message);
    let body: InstallBody = serde_json::from_slice(&body).map_err(|e| {
        let message =
            format!("request body is not valid ({e}): send JSON like {{\"kind\": \"vllm\"}}");
        bad("bad_request", message)
    })?;
    let kind: EngineKind = body
        .kind
        .parse()
        .map_err(|e: UnknownKind| bad("bad_kind", e.to_string()))?;
    let Some(package) = python_env::package_name(kind) else {
        let message =
            format!("{kind} is built from source, not installed: POST /api/v1/engines/build");
        return Err(bad("bad_kind", message));
    };
    if let Some(version) = body
        .version
        .as_deref()
        .filter(|v| !python_env::is_plain_version(v.trim()))
    {
        let message = format!("version '{version}' is not a plain version number, e.g. 0.33.0");
        return Err(bad("bad_version", message));
    }
    if let Some(version) = &body.version {
        python_env::check_version_listed(kind, version.trim(), body.index_url.as_deref(), &|_| {})
            .await
            .map_err(|e| bad("unknown_version", e.to_string()))?;
    }
    let store = store(&state)?.clone();
    let request = PythonInstallRequest {
        kind,
        version: body.version,
        index_url: body.index_url,
        engines_dir: state.data_dir.join("engines"),
        python: None,
    };
    let slot = BuildSlot::claim()?;
    let bus = state.bus.clone();
    tokio::spawn(async move {
        let _slot = slot;
        install_in_background(&store, &request, &bus, package).await;
    });
    Ok((StatusCode::ACCEPTED, Json(json!({"started": true}))).into_response())
}

/// Runs pip for `request`, its lines and the outcome published as `engine.build` events.
async fn install_in_background(
    store: &Store,
    request: &rigdeck_core::engines::python_env::PythonInstallRequest,
    bus: &rigdeck_core::events::EventBus,
    package: &str,
) {
    use rigdeck_core::engines::cmake_build::{BuildProgress, BuildStep};
    let publish = bus.build_progress();
    let report = |step: BuildStep, fraction: Option<f64>, line: String| {
        publish(BuildProgress {
            build_id: format!("{package}-install"),
            step,
            fraction,
            line: Some(line),
        })
    };
    let pip_line = |line: &str| report(BuildStep::Fetch, None, line.to_owned());
    match rigdeck_core::engines::python_env::install(store, request, &pip_line).await {
        Ok(done) => report(
            BuildStep::Done,
            Some(1.0),
            format!(
                "{} {} ready in {} (engine #{})",
                done.build.kind,
                done.build.version,
                done.venv.display(),
                done.build.id
            ),
        ),
        Err(err) => {
            tracing::error!("engine install failed: {err}");
            report(BuildStep::Failed, None, err.to_string());
        }
    }
}

/// The architectures a CUDA build is for: as asked, or those of the GPUs the telemetry sees.
fn cuda_architectures(state: &AppState, asked: Option<String>) -> ApiResult<String> {
    use rigdeck_core::engines::cmake_build;
    if let Some(asked) = asked.filter(|a| !a.trim().is_empty()) {
        return cmake_build::parse_cuda_architectures(&asked).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_cuda_architectures",
                e.to_string(),
            )
        });
    }
    let detected = state
        .telemetry
        .latest()
        .and_then(|frame| cmake_build::cuda_architectures_of(&frame.sample.gpus));
    detected.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "no_cuda_gpu",
            "no NVIDIA GPU reports a compute capability here: give the architectures \
             (\"cuda_architectures\": \"86;120\") or build for the CPU or Vulkan",
        )
    })
}

/// The source of a build asked for: the bundled pin of `kind`, or the `release` asked for once
/// the index has listed it with its sha256 (a release it lacks is refused now, not after the
/// build has started).
async fn build_source(
    kind: EngineKind,
    release: Option<String>,
    index_url: Option<String>,
) -> ApiResult<rigdeck_core::engines::source::SourceSpec> {
    use rigdeck_core::engines::source::{self, SourceError};
    source::pinned_or_release(kind, release.as_deref(), index_url)
        .await
        .map_err(|err| match err {
            SourceError::NoSourcePackage { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_kind",
                format!("{kind} is installed with pip, not built: POST /api/v1/engines/install"),
            ),
            SourceError::Fetch { .. } => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "index_unreachable",
                err.to_string(),
            ),
            other => ApiError::new(StatusCode::BAD_REQUEST, "bad_release", other.to_string()),
        })
}

pub async fn build_engine(
    State(state): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    use rigdeck_core::engines::cmake_build::BuildRequest;
    use rigdeck_core::engines::{install, package_index, source};

    let request: BuildBody = serde_json::from_slice(if body.is_empty() { b"{}" } else { &body })
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("request body is not valid: {e}"),
            )
        })?;
    let backend: Backend =
        request
            .backend
            .parse()
            .map_err(|e: rigdeck_core::engines::UnknownBackend| {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_backend", e.to_string())
            })?;
    let cuda_architectures = match backend {
        Backend::Cuda => Some(cuda_architectures(&state, request.cuda_architectures)?),
        _ => None,
    };
    if let Some(url) = &request.index_url {
        package_index::parse_index_url(url)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_index_url", e.to_string()))?;
    }
    let kind: EngineKind = request
        .kind
        .as_deref()
        .unwrap_or("llama.cpp")
        .parse()
        .map_err(|e: UnknownKind| {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_kind", e.to_string())
        })?;
    let source = build_source(kind, request.release, request.index_url).await?;
    let store = store(&state)?.clone();
    let cache_dir = source::cache_root().map_err(internal)?;
    let build = BuildRequest {
        kind,
        cuda_architectures,
        source,
        ..BuildRequest::bundled(backend, state.data_dir.join("engines"), cache_dir)
    };
    // A missing compiler or a bad architecture list is refused now, not after the download.
    rigdeck_core::engines::cmake_build::check_tools(&build)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "cannot_build", e.to_string()))?;
    let slot = BuildSlot::claim()?;
    let bus = state.bus.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let publish = bus.build_progress();
        match install::build_and_register(&store, &build, &publish).await {
            Ok((_, entry)) => tracing::info!(
                "engine #{} built and registered at {}",
                entry.id,
                entry.location.display()
            ),
            // The failure itself reaches the UI as a `failed` engine.build event with the log tail.
            Err(err) => tracing::error!("engine build failed: {err}"),
        }
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "started": true, "kind": kind, "backend": backend.to_string() })),
    )
        .into_response())
}
