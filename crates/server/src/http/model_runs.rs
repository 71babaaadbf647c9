//! `POST /model-runs`: one click from a model to a reply. A hub quantization is checked against
//! the live rig before a byte is downloaded (the same plan as the model page's verdict), then
//! downloaded, placed automatically, saved as a launch profile under the model's name and
//! started under the usual admission; `GET /model-runs/{id}` (and the `model_run.state` event)
//! say where it is. A failure leaves nothing half-made: a profile this run saved for an engine
//! that never became ready is removed again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use rigdeck_core::downloads::{DownloadRequest, DownloadState, DownloadView};
use rigdeck_core::engines::Backend;
use rigdeck_core::hub::quants;
use rigdeck_core::hub::repo::RepoId;
use rigdeck_core::model_runs::{
    choose_build, profile_name, profile_of_model, ModelRun, RunFix, RunSource, RunStep,
};
use rigdeck_core::placement::{DeviceId, PlacementOptions};
use rigdeck_core::profiles::chat_templates;
use rigdeck_core::profiles::profile::LaunchProfile;
use rigdeck_core::supervisor::Phase;

use super::error::ApiError;
use super::placement::parse_body;
use super::AppState;

/// How often a run looks at its download or its engine.
const POLL: Duration = Duration::from_millis(250);

/// The context a run plans and starts with when the request names none: the model page's
/// default, so the verdict shown there is the plan used here (capped at the model's own).
const DEFAULT_CONTEXT: u32 = 32_768;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// `{"kind": "hub", "repo", "quant"?, "revision"?}`, `{"kind": "file", "path"}` or
    /// `{"kind": "profile", "name"}`.
    source: RunSource,
    /// Context length to plan for (tokens); the model page's default when absent.
    context: Option<u32>,
}

/// Why a run stopped, and what to do instead.
struct Failure {
    message: String,
    fix: Option<RunFix>,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure { message, fix: None }
    }
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        Failure::from(error.message)
    }
}

pub async fn start(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let body: RunBody = match parse_body(&body) {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let context = body.context.unwrap_or(DEFAULT_CONTEXT);
    if context == 0 || context > 1 << 24 {
        let message = format!("context {context} is out of range: choose 1 to 16777216 tokens");
        return ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message).into_response();
    }
    if state.store.is_none() || state.instances.is_none() {
        let message =
            "running a model needs the database, which could not be opened (see the daemon's log)";
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_database", message)
            .into_response();
    }
    let run = state.model_runs.begin(body.source.clone());
    let id = run.id;
    tokio::spawn(async move {
        let outcome = drive(&state, id, &body.source, context).await;
        if let Err(failure) = outcome {
            fail(&state, id, failure).await;
        }
    });
    (StatusCode::ACCEPTED, Json(run)).into_response()
}

pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<ModelRun>> {
    Json(state.model_runs.list())
}

pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<u64>) -> Response {
    match state.model_runs.get(id) {
        Some(run) => Json(run).into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no model run #{id}: GET /api/v1/model-runs lists them"),
        )
        .into_response(),
    }
}

async fn drive(state: &AppState, id: u64, source: &RunSource, context: u32) -> Result<(), Failure> {
    let profile = match source {
        RunSource::Profile { name } => name.clone(),
        RunSource::File { path } => {
            check_file(path)?;
            saved_profile(state, id, source, path, context).await?
        }
        RunSource::Hub {
            repo,
            quant,
            revision,
        } => {
            let path = hub_model(
                state,
                id,
                repo,
                quant.as_deref(),
                revision.as_deref(),
                context,
            )
            .await?;
            saved_profile(state, id, source, &path, context).await?
        }
    };
    run_profile(state, id, &profile).await
}

fn check_file(path: &std::path::Path) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(format!(
            "'{}' is a folder: choose a model file (.gguf)",
            path.display()
        )
        .into()),
        Err(e) => Err(format!("cannot read '{}': {e}", path.display()).into()),
    }
}

/// The quantization checked on the live rig, then downloaded (or found done): its local path.
async fn hub_model(
    state: &AppState,
    id: u64,
    repo: &str,
    quant: Option<&str>,
    revision: Option<&str>,
    context: u32,
) -> Result<PathBuf, Failure> {
    let repo_id = RepoId::parse(repo).map_err(|e| e.to_string())?;
    let revision = super::hub::revision_of(revision)?;
    let (client, config, info) = super::hub::model_at(state, &repo_id, &revision).await?;
    let (groups, _) = super::hub::groups_at(&client, &repo_id, &info).await?;
    // The model page's verdict: the same devices, margins and records as the editor's plan.
    let commit = (&repo_id, &info.commit);
    let fits = super::hub::fits_on_rig(state, &config, commit, &groups, "live", context).await?;
    let recommended = fits.iter().find(|f| f.recommended);
    let wanted = quant.or(recommended.map(|f| f.label.as_str()));
    let (label, files) = quants::select(&groups, wanted)?;
    if let Some(fit) = fits.iter().find(|f| f.label == label) {
        if fit.verdict.as_ref().is_some_and(|v| !v.fits()) {
            let fix = recommended
                .filter(|r| r.label != label && r.verdict.as_ref().is_some_and(|v| v.fits()))
                .map(|r| RunFix {
                    repo: repo.to_owned(),
                    quant: r.label.clone(),
                    summary: r.summary.clone(),
                });
            let instead = fix.as_ref().map_or_else(
                || {
                    " and no quantization of it fits now: free memory or choose a smaller model"
                        .to_owned()
                },
                |f| format!(": {} {}", f.quant, f.summary),
            );
            return Err(Failure {
                message: format!("{label} {} on this rig{instead}", fit.summary),
                fix,
            });
        }
    }
    builds_ready(state).await?;
    let request = DownloadRequest {
        repo: repo_id,
        revision,
        commit: info.commit,
        label,
        files,
    };
    let done = download(state, id, request).await?;
    first_model_file(&done)
}

/// The engine build is checked before a byte is downloaded: without one nothing can run.
async fn builds_ready(state: &AppState) -> Result<(), Failure> {
    let builds = store(state)?
        .engine_builds()
        .await
        .map_err(|e| format!("the engine builds cannot be read: {e}"))?;
    choose_build(&builds, has_gpus(state)).map(|_| ())?;
    Ok(())
}

pub(super) fn has_gpus(state: &AppState) -> bool {
    state
        .telemetry
        .latest()
        .is_some_and(|f| f.sample.gpus.gpus.iter().any(|g| g.lost.is_none()))
}

/// A finished download of the same files, or a new one followed to its end.
async fn download(
    state: &AppState,
    id: u64,
    request: DownloadRequest,
) -> Result<DownloadView, Failure> {
    let queue = state.downloads.as_ref().ok_or_else(|| {
        "downloads need the database, which could not be opened (see the daemon's log)".to_owned()
    })?;
    let view = {
        let _making = state.model_runs.making().await;
        let same = |v: &DownloadView| v.repo == request.repo && v.label == request.label;
        let done = |v: &DownloadView| {
            v.state == DownloadState::Done
                && !v.paths.is_empty()
                && v.paths.iter().all(|p| p.exists())
        };
        let under_way = |v: &DownloadView| {
            matches!(
                v.state,
                DownloadState::Queued | DownloadState::Running | DownloadState::Paused
            )
        };
        let mut known = queue.list().into_iter().rev().filter(same);
        match known.find(|v| done(v) || under_way(v)) {
            Some(view) if done(&view) => return Ok(view),
            // Another run (or the user) is downloading the same files: follow that one.
            Some(view) => view,
            None => queue
                .enqueue(request)
                .await
                .map_err(|e| format!("the download could not be queued: {e}"))?,
        }
    };
    state.model_runs.update(id, |run| {
        run.step = RunStep::Downloading;
        run.download_id = Some(view.id);
        run.detail = "waiting for the downloads before it".into();
    });
    loop {
        let Some(view) = queue.list().into_iter().find(|v| v.id == view.id) else {
            return Err("the download was removed from the list before it finished"
                .to_owned()
                .into());
        };
        match view.state {
            DownloadState::Done => return Ok(view),
            DownloadState::Failed => {
                return Err(format!(
                    "the download failed: {}; retry it in the downloads panel, then run the model again",
                    view.error.as_deref().unwrap_or("no reason given")
                )
                .into())
            }
            DownloadState::Cancelled => return Err("the download was cancelled".to_owned().into()),
            DownloadState::Paused => state.model_runs.update(id, |run| {
                run.detail = "the download is paused: resume it in the downloads panel".into();
            }),
            DownloadState::Running | DownloadState::Queued => {
                state.model_runs.update(id, |run| download_progress(run, &view))
            }
        };
        tokio::time::sleep(POLL).await;
    }
}

fn download_progress(run: &mut ModelRun, view: &DownloadView) {
    let p = &view.progress;
    if view.state == DownloadState::Queued || p.total_bytes == 0 {
        run.detail = "waiting for the downloads before it".into();
        run.progress = None;
        return;
    }
    let fraction = p.done_bytes as f64 / p.total_bytes as f64;
    run.progress = Some(fraction.clamp(0.0, 1.0));
    run.detail = format!(
        "downloading {:.0} % of {}",
        fraction * 100.0,
        human_bytes(p.total_bytes)
    );
}

fn human_bytes(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// The path to give the engine: the first GGUF file (the first shard of a split model).
fn first_model_file(done: &DownloadView) -> Result<PathBuf, Failure> {
    let mut ggufs: Vec<&PathBuf> = done
        .paths
        .iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    ggufs.sort();
    ggufs.first().map(|p| (*p).clone()).ok_or_else(|| {
        "the download holds no GGUF file: this repository is for vLLM or SGLang; \
         make a profile for it on the Models page"
            .to_owned()
            .into()
    })
}

/// The profile of this model saved earlier, or a new one: the automatic placement on the live
/// rig (what the model page's verdict showed) under the model's name.
async fn saved_profile(
    state: &AppState,
    id: u64,
    source: &RunSource,
    model: &std::path::Path,
    context: u32,
) -> Result<String, Failure> {
    state
        .model_runs
        .step(id, RunStep::Planning, "placing the model on this rig");
    let _making = state.model_runs.making().await;
    let profiles = store(state)?
        .launch_profiles()
        .await
        .map_err(|e| format!("the launch profiles cannot be read: {e}"))?;
    if let Some(existing) = profile_of_model(&profiles, model) {
        return Ok(existing.name.clone());
    }
    let builds = store(state)?
        .engine_builds()
        .await
        .map_err(|e| format!("the engine builds cannot be read: {e}"))?;
    let build = choose_build(&builds, has_gpus(state))?;
    let taken: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
    let name = profile_name(source, model, &taken);
    let facts = header_facts(model).await;
    let context = context.min(facts.context.unwrap_or(context));
    let profile = LaunchProfile {
        name: name.clone(),
        engine_build_id: build.id,
        model: model.to_owned(),
        placement: PlacementOptions {
            context,
            ..PlacementOptions::default()
        },
        chat_template: facts.template.map(str::to_owned),
        ..LaunchProfile::default()
    };
    let saved = super::instances::save_new_profile(state, profile, true).await?;
    let mut warnings: Vec<String> = saved["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    warnings.extend(facts.note);
    if has_gpus(state) && build.backend == Backend::Cpu {
        warnings.push(
            "no CUDA build of llama.cpp yet: it runs on the CPU; build one on the Engines page \
             to use the GPUs"
                .into(),
        );
    }
    state.model_runs.update(id, |run| {
        run.profile = Some(name.clone());
        run.created_profile = true;
        run.notes = warnings;
    });
    Ok(name)
}

/// What a new profile takes from the model's header: its own context length, and the chat
/// template to name when the file carries none (with a note that says so).
struct HeaderFacts {
    context: Option<u32>,
    template: Option<&'static str>,
    note: Option<String>,
}

async fn header_facts(model: &std::path::Path) -> HeaderFacts {
    let path = model.to_owned();
    let loaded =
        tokio::task::spawn_blocking(move || rigdeck_core::placement::from_gguf::load_shape(&path))
            .await
            .ok()
            .and_then(Result::ok);
    let Some(loaded) = loaded else {
        return HeaderFacts {
            context: None,
            template: None,
            note: None,
        };
    };
    let summary = &loaded.summary;
    let context = summary
        .context_length
        .and_then(|c| u32::try_from(c).ok())
        .filter(|c| *c > 0);
    if summary.chat_template.is_some() {
        return HeaderFacts {
            context,
            template: None,
            note: None,
        };
    }
    let architecture = summary.architecture.as_deref().unwrap_or("");
    let template = chat_templates::for_architecture(architecture);
    let note = match template {
        Some(name) => format!(
            "this file carries no chat template: the profile names llama-server's '{name}' \
             ({architecture}'s own); change it in the profile"
        ),
        None => "this file carries no chat template: llama-server would use ChatML; choose \
                 the model's template in the profile"
            .to_owned(),
    };
    HeaderFacts {
        context,
        template,
        note: Some(note),
    }
}

/// Starts the profile (unless it runs already) and follows the engine until it answers.
async fn run_profile(state: &AppState, id: u64, name: &str) -> Result<(), Failure> {
    let instances = state
        .instances
        .as_ref()
        .ok_or_else(|| "engines need the database, which could not be opened".to_owned())?;
    state
        .model_runs
        .update(id, |run| run.profile = Some(name.to_owned()));
    let running = |instances: &rigdeck_core::launch::Instances| {
        instances
            .get(name)
            .is_some_and(|v| !matches!(v.state.phase, Phase::Stopped | Phase::Crashed { .. }))
    };
    if !running(instances) {
        state
            .model_runs
            .step(id, RunStep::Starting, "starting the engine");
        if let Err(e) = instances.start(name, false).await {
            // Another run (or the user) started it a moment before: follow that start.
            if !running(instances) {
                return Err(e.to_string().into());
            }
        }
    }
    let placement = placement_words(state, name).await;
    loop {
        let Some(view) = instances.get(name) else {
            return Err(format!("the engine of '{name}' is gone").into());
        };
        match &view.state.phase {
            Phase::Ready => {
                state.model_runs.update(id, |run| {
                    run.step = RunStep::Ready;
                    run.progress = None;
                    run.detail = format!("ready on {}", placement.as_deref().unwrap_or("this rig"));
                    run.model = Some(name.to_owned());
                    run.placement = placement.clone();
                });
                return Ok(());
            }
            Phase::Crashed {
                explanation,
                restart: None,
                last_lines,
                ..
            } => {
                let last = last_lines
                    .last()
                    .map(|l| format!(" (last line: {l})"))
                    .unwrap_or_default();
                return Err(
                    format!("the engine stopped while loading: {explanation}{last}").into(),
                );
            }
            Phase::Stopped | Phase::Stopping => {
                return Err(format!("'{name}' was stopped before it was ready").into())
            }
            Phase::Loading { progress } => {
                let progress = progress.map(f64::from);
                let words = placement.as_deref().unwrap_or("this rig");
                state.model_runs.update(id, |run| {
                    run.step = RunStep::Loading;
                    run.progress = progress;
                    run.detail = format!("loading on {words}");
                    run.placement = placement.clone();
                })
            }
            Phase::Starting | Phase::Crashed { .. } => state.model_runs.update(id, |run| {
                run.step = RunStep::Starting;
            }),
        };
        tokio::time::sleep(POLL).await;
    }
}

/// Where the profile's plan puts the model, in a few words: "CPU", "GPU 0", "GPU 0–1 + RAM".
async fn placement_words(state: &AppState, name: &str) -> Option<String> {
    let profile = store(state).ok()?.launch_profile(name).await.ok()?;
    let gpus: Vec<u32> = profile.planned_memory.iter().map(|p| p.gpu).collect();
    let in_ram = profile
        .placement
        .overrides
        .iter()
        .any(|o| o.device == DeviceId::Cpu);
    let words = match (gpus.as_slice(), in_ram) {
        ([], _) => "CPU".to_owned(),
        ([one], false) => format!("GPU {one}"),
        ([one], true) => format!("GPU {one} + experts in RAM"),
        ([first, .., last], false) => format!("GPU {first}–{last}"),
        ([first, .., last], true) => format!("GPU {first}–{last} + experts in RAM"),
    };
    Some(words)
}

/// Ends the run with its reason; a profile this run saved is removed (and its engine stopped),
/// so a failed run leaves nothing behind.
async fn fail(state: &AppState, id: u64, failure: Failure) {
    let run = state.model_runs.get(id);
    if let Some(ModelRun {
        profile: Some(name),
        created_profile: true,
        ..
    }) = &run
    {
        if let Some(instances) = &state.instances {
            let _ = instances.stop(name).await;
        }
        if let Ok(store) = store(state) {
            if let Err(e) = store.delete_launch_profile(name).await {
                tracing::warn!("the profile '{name}' of a failed run stays: {e}");
            }
        }
    }
    state.model_runs.update(id, |run| {
        run.step = RunStep::Failed;
        run.progress = None;
        run.detail = failure.message.clone();
        run.error = Some(failure.message);
        run.fix = failure.fix;
        if run.created_profile {
            run.profile = None;
            run.created_profile = false;
        }
    });
}

fn store(state: &AppState) -> Result<&rigdeck_core::store::Store, String> {
    state
        .store
        .as_ref()
        .ok_or_else(|| "the database could not be opened (see the daemon's log)".to_owned())
}
