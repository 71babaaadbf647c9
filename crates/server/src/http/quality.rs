//! `/quality/…`: recorded references for KL-divergence runs — the corpora (built-in, a text file,
//! chat conversations in the model's format), an estimate before recording (the corpus's exact
//! tokens with the model's vocabulary, windows, the file's size against the budget and the disk),
//! recording in the background with `quality.reference` events, deleting, and the frontier of a
//! reference's measured profiles: decode speed against KL divergence.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use rigdeck_core::bench::kld::flags;
use rigdeck_core::bench::store::{RunSummary, Status};
use rigdeck_core::engines::registry::EngineBuild;
use rigdeck_core::model_runs::choose_build;
use rigdeck_core::placement::PlacementOptions;
use rigdeck_core::profiles::profile::{self, LaunchProfile};
use rigdeck_core::quality::candidates;
use rigdeck_core::quality::corpus::{self, ChatFormat, CorpusSpec, CorpusText};
use rigdeck_core::quality::engine_label;
use rigdeck_core::quality::recording::{self, ModelFacts, Windows};
use rigdeck_core::quality::references::{Reference, ReferenceState};

use super::error::ApiError;
use super::placement::parse_body;
use super::AppState;

/// Window length when the request names none: long enough for a KV cache's effect to show.
const DEFAULT_CONTEXT: u32 = 8192;

/// Which model a reference records.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelRef {
    /// A model file, placed automatically on this rig.
    File { path: PathBuf },
    /// A launch profile's file with its placement and flags.
    Profile { name: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordBody {
    model: ModelRef,
    #[serde(default = "builtin")]
    corpus: CorpusSpec,
    #[serde(default = "default_context")]
    context: u32,
    #[serde(default)]
    chunks: Option<u32>,
}

fn builtin() -> CorpusSpec {
    CorpusSpec::Builtin
}

fn default_context() -> u32 {
    DEFAULT_CONTEXT
}

/// Everything a recording needs, found and checked.
struct Planned {
    reference: Reference,
    /// The build's `llama-perplexity`, the profile's flags it keeps, and the corpus's file.
    perplexity: PathBuf,
    flags: Vec<String>,
    corpus_file: PathBuf,
    env: Vec<(String, String)>,
    windows: Windows,
    notes: Vec<String>,
}

/// The model a reference records, as it runs: its profile (a saved one, or the automatic
/// placement of a file on this rig), its build, llama-server's arguments for it (the key masked).
struct ResolvedModel {
    profile: LaunchProfile,
    /// The request named a saved profile (not a file placed for the occasion).
    saved: bool,
    build: EngineBuild,
    server_args: Vec<String>,
    notes: Vec<String>,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_reference", message)
}

/// `GET /quality/corpora`: the built-in corpus and the token counts measured so far.
pub async fn corpora(State(state): State<Arc<AppState>>) -> Json<Value> {
    let mut counts: BTreeMap<(String, String), Value> = BTreeMap::new();
    for r in state.references.list() {
        if let Some(tokens) = r.corpus_tokens {
            counts.insert(
                (r.corpus_sha256.clone(), r.model_name.clone()),
                json!({"corpus_label": r.corpus_label, "corpus_sha256": r.corpus_sha256,
                       "model_name": r.model_name, "tokens": tokens}),
            );
        }
    }
    Json(json!({
        "builtin": {
            "label": corpus::BUILTIN_LABEL,
            "bytes": corpus::builtin_bytes(),
            "parts": corpus::builtin_parts(),
        },
        "token_counts": counts.into_values().collect::<Vec<_>>(),
    }))
}

/// `GET /quality/references`.
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "references": state.references.list(),
        "budget_bytes": budget_bytes(&state),
        "used_bytes": state.references.used_bytes(),
        "free_disk_bytes": recording::free_disk_bytes(&state.quality_dir),
    }))
}

/// `POST /quality/references/estimate`: what a recording would read and write, before it runs.
pub async fn estimate(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let body: RecordBody = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    match plan(&state, &body).await {
        Ok(planned) => Json(estimate_json(&state, &planned, None)).into_response(),
        Err(e) => e.into_response(),
    }
}

fn estimate_json(state: &AppState, planned: &Planned, problem: Option<String>) -> Value {
    let used = state.references.used_bytes();
    let w = planned.windows;
    let problem = problem.or_else(|| {
        recording::space_problem(
            w.bytes,
            used,
            budget_bytes(state),
            recording::free_disk_bytes(&state.quality_dir),
        )
    });
    json!({
        "corpus_tokens": w.corpus_tokens,
        "chunks": w.chunks,
        "scored_tokens": w.scored_tokens,
        "bytes": w.bytes,
        "budget_bytes": budget_bytes(state),
        "used_bytes": used,
        "free_disk_bytes": recording::free_disk_bytes(&state.quality_dir),
        "problem": problem,
        "notes": planned.notes,
        "existing": state.references.existing(&planned.reference).map(|r| r.id),
    })
}

/// `POST /quality/references`: records in the background (202), or answers with the ready
/// reference recorded the same way.
pub async fn record(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let body: RecordBody = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let planned = match plan(&state, &body).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(existing) = state.references.existing(&planned.reference) {
        return (StatusCode::OK, Json(json!(existing))).into_response();
    }
    let budget = budget_bytes(&state);
    let free = recording::free_disk_bytes(&state.quality_dir);
    let used = state.references.used_bytes();
    if let Some(problem) = recording::space_problem(planned.windows.bytes, used, budget, free) {
        return ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "no_room", problem).into_response();
    }
    let (logits_out, cancel) = match state.references.begin(&planned.reference) {
        Ok(begun) => begun,
        Err(e) => return bad(e.to_string()).into_response(),
    };
    let argv = flags::reference_argv(
        &planned.perplexity,
        &planned.flags,
        &planned.corpus_file,
        body.context,
        Some(planned.windows.chunks),
        &logits_out,
    );
    let id = planned.reference.id.clone();
    tokio::spawn(recording::record(
        state.references.clone(),
        state.bus.clone(),
        id,
        argv,
        planned.env,
        cancel,
    ));
    state
        .bus
        .publish(rigdeck_core::events::Event::QualityReference(Arc::new(
            planned.reference.clone(),
        )));
    (StatusCode::ACCEPTED, Json(json!(planned.reference))).into_response()
}

/// `DELETE /quality/references/{id}`: stops a recording, deletes the files.
pub async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.references.delete(&id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => {
            ApiError::new(StatusCode::NOT_FOUND, "no_reference", e.to_string()).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct CandidatesQuery {
    profile: String,
}

/// `GET /quality/reference-candidates?profile=NAME`: the library's files of the profile's model,
/// highest precision first, and the repository to download a better one from when none is.
pub async fn candidates(
    State(state): State<Arc<AppState>>,
    Query(query): Query<CandidatesQuery>,
) -> Response {
    let Some(store) = &state.store else {
        return bad("references need the database, which could not be opened").into_response();
    };
    let profile = match store.launch_profile(&query.profile).await {
        Ok(p) => p,
        Err(e) => {
            return ApiError::new(StatusCode::NOT_FOUND, "no_profile", e.to_string())
                .into_response()
        }
    };
    let model = profile.model.clone();
    let loaded =
        tokio::task::spawn_blocking(move || rigdeck_core::placement::from_gguf::load_shape(&model))
            .await;
    let summary = match loaded {
        Ok(Ok(loaded)) => loaded.summary,
        Ok(Err(e)) => return bad(e.to_string()).into_response(),
        Err(e) => return bad(e.to_string()).into_response(),
    };
    let found = candidates::reference_candidates(&state.library.entries(), &summary);
    let has_good = found.iter().any(|c| c.good_reference);
    let repository = candidates::hub_repository(&profile.model);
    let advice = match (has_good, &repository) {
        (true, _) => None,
        (false, Some(repo)) => Some(format!(
            "no file of this model at 8 bits per weight or more: download the BF16, F16 or Q8_0 file of {repo} and record it as the reference"
        )),
        (false, None) => Some(
            "no file of this model at 8 bits per weight or more: download its BF16, F16 or Q8_0 file and record it as the reference (a lower-precision reference measures distance from that file, not from the original weights)".to_owned(),
        ),
    };
    Json(json!({
        "profile": query.profile,
        "model_path": profile.model,
        "candidates": found,
        "repository": repository,
        "advice": advice,
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
pub struct FrontierQuery {
    reference: String,
}

/// `GET /quality/frontier?reference=ID`: each measured profile's latest KL divergence against
/// the reference, beside its latest decode speed.
pub async fn frontier(
    State(state): State<Arc<AppState>>,
    Query(query): Query<FrontierQuery>,
) -> Response {
    let reference = match state.references.get(&query.reference) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::new(StatusCode::NOT_FOUND, "no_reference", e.to_string())
                .into_response()
        }
    };
    let Some(benchmarks) = &state.benchmarks else {
        return Json(json!({"reference": reference, "points": []})).into_response();
    };
    let runs = match benchmarks.store().list().await {
        Ok(runs) => runs,
        Err(e) => {
            return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string())
                .into_response()
        }
    };
    Json(json!({"reference": reference, "points": frontier_points(&runs, &reference.id)}))
        .into_response()
}

/// The profile a run measured.
fn profile_of(run: &RunSummary) -> Option<&str> {
    run.target.get("name").and_then(Value::as_str)
}

/// Runs come newest first: the first KLD run per profile is its latest.
fn frontier_points(runs: &[RunSummary], reference: &str) -> Vec<Value> {
    let mut points: BTreeMap<String, Value> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.status == Status::Done) {
        let (Some(kld), Some(profile)) = (&run.kld, profile_of(run)) else {
            continue;
        };
        if kld.reference != reference || points.contains_key(profile) {
            continue;
        }
        let speed = runs
            .iter()
            .filter(|r| r.status == Status::Done && profile_of(r) == Some(profile))
            .find_map(|r| decode_tps(r).map(|tps| (r.id, tps)));
        points.insert(
            profile.to_owned(),
            json!({
                "profile": profile,
                "kld_run_id": run.id,
                "mean": kld.stats.mean,
                "mean_unc": kld.stats.mean_unc,
                "same_top": kld.stats.same_top,
                "decode_tps": speed.map(|(_, tps)| tps),
                "speed_run_id": speed.map(|(id, _)| id),
            }),
        );
    }
    points.into_values().collect()
}

/// A run's single-stream decode speed: a serving run's best per-stream median.
fn decode_tps(run: &RunSummary) -> Option<f64> {
    run.steps
        .iter()
        .filter_map(|s| s.stream_tps)
        .max_by(f64::total_cmp)
}

fn budget_bytes(state: &AppState) -> u64 {
    (state.current_settings().quality_reference_budget_gb * 1e9) as u64
}

/// Finds the model, the build, the flags and the corpus, counts its tokens and sizes the file.
async fn plan(state: &AppState, body: &RecordBody) -> Result<Planned, ApiError> {
    let mut resolved = resolve_model(state, &body.model, body.context).await?;
    let (perplexity, tokenize) = (
        resolved.build.tool("llama-perplexity").map_err(bad)?,
        resolved.build.tool("llama-tokenize").map_err(bad)?,
    );
    let model = resolved.profile.model.clone();
    let facts = {
        let model = model.clone();
        tokio::task::spawn_blocking(move || recording::model_facts(&model))
            .await
            .map_err(|e| bad(e.to_string()))?
            .map_err(bad)?
    };
    let corpus = corpus_of(state, &body.corpus, &facts.chat).await?;
    resolved.notes.extend(corpus.notes.iter().cloned());
    let corpus_file = recording::write_corpus(&state.quality_dir, &corpus).map_err(bad)?;
    let tokens = state
        .token_counts
        .count(&tokenize, &model, &corpus_file, &corpus.sha256)
        .await
        .map_err(bad)?;
    let windows = recording::windows(
        &corpus.label,
        body.context,
        facts.n_vocab,
        tokens,
        body.chunks,
    )
    .map_err(bad)?;
    let (kept, dropped) = flags::perplexity_flags(&resolved.server_args, body.context);
    // A profile's own serving settings are worth naming; the automatic ones of a file are not.
    if resolved.saved && !dropped.is_empty() {
        resolved.notes.push(format!(
            "the profile's serving flags are not used for the recording: {}",
            dropped.join(" ")
        ));
    }
    Ok(Planned {
        reference: draft(&resolved, body, &corpus, &facts, windows),
        perplexity,
        flags: kept,
        corpus_file,
        env: resolved.profile.env.clone().into_iter().collect(),
        windows,
        notes: resolved.notes,
    })
}

fn draft(
    resolved: &ResolvedModel,
    body: &RecordBody,
    corpus: &CorpusText,
    facts: &ModelFacts,
    windows: Windows,
) -> Reference {
    // Two recordings asked for in the same millisecond still get two ids.
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let created_at_ms = rigdeck_core::now_ms();
    let model = &resolved.profile.model;
    Reference {
        id: format!("r{created_at_ms:x}{made:x}"),
        state: ReferenceState::Recording,
        error: None,
        model_path: model.clone(),
        model_name: model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        model_bytes: std::fs::metadata(model).map(|m| m.len()).unwrap_or(0),
        profile: resolved.saved.then(|| resolved.profile.name.clone()),
        corpus: body.corpus.clone(),
        corpus_label: corpus.label.clone(),
        corpus_sha256: corpus.sha256.clone(),
        context: body.context,
        chunks: Some(windows.chunks),
        scored_tokens: Some(windows.scored_tokens),
        corpus_tokens: Some(windows.corpus_tokens),
        n_vocab: Some(facts.n_vocab),
        bytes: windows.bytes,
        engine: engine_label(&resolved.build),
        engine_build_id: resolved.build.id,
        created_at_ms,
        wall_s: None,
        progress: Some(rigdeck_core::quality::references::RecordingProgress {
            fraction: 0.0,
            eta_s: None,
        }),
    }
}

async fn corpus_of(
    state: &AppState,
    spec: &CorpusSpec,
    chat: &ChatFormat,
) -> Result<CorpusText, ApiError> {
    let store = state
        .store
        .as_ref()
        .ok_or_else(|| bad("references need the database, which could not be opened"))?;
    let chats = rigdeck_core::chat::ChatStore::new(store.pool().clone());
    corpus::corpus_text(spec, &chats, chat)
        .await
        .map_err(|e| bad(e.to_string()))
}

/// The model as it runs: a profile's own settings, or a file placed automatically on this rig.
async fn resolve_model(
    state: &AppState,
    model: &ModelRef,
    context: u32,
) -> Result<ResolvedModel, ApiError> {
    let store = state
        .store
        .as_ref()
        .ok_or_else(|| bad("references need the database, which could not be opened"))?;
    let (profile, notes) = match model {
        ModelRef::Profile { name } => (
            store
                .launch_profile(name)
                .await
                .map_err(|e| bad(e.to_string()))?,
            Vec::new(),
        ),
        ModelRef::File { path } => {
            if !path.is_file() {
                return Err(bad(format!(
                    "model file {} does not exist: give the path of a GGUF file (the Models page lists them)",
                    path.display()
                )));
            }
            let builds = store
                .engine_builds()
                .await
                .map_err(|e| bad(e.to_string()))?;
            let has_gpus = super::model_runs::has_gpus(state);
            let build = choose_build(&builds, has_gpus).map_err(bad)?;
            let draft = LaunchProfile {
                name: "quality-reference".into(),
                engine_build_id: build.id,
                model: path.clone(),
                placement: PlacementOptions {
                    context,
                    ..PlacementOptions::default()
                },
                ..LaunchProfile::default()
            };
            super::instances::prepare(state, draft, true, Some("quality-reference"))
                .await
                .map_err(|e| bad(e.message))?
        }
    };
    let build = store
        .engine_build(profile.engine_build_id)
        .await
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| {
            bad(format!(
                "engine build {} is not installed: build llama.cpp with `rigdeck engines build`",
                profile.engine_build_id
            ))
        })?;
    let argv = profile::argv(&profile, &build, 0, None).map_err(|e| bad(e.to_string()))?;
    let argv = profile::key_masked(&argv);
    Ok(ResolvedModel {
        server_args: argv.get(1..).unwrap_or_default().to_vec(),
        saved: matches!(model, ModelRef::Profile { .. }),
        profile,
        build,
        notes,
    })
}
