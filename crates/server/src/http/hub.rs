//! The model hub and the download queue over HTTP: search, a model's page (its quantizations
//! grouped, its card), the Hugging Face token, and downloads with pause, resume, cancel and
//! retry. Each a thin wrapper over the hub crate and `core::downloads`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rigdeck_core::downloads::{DownloadRequest, Downloads, QueueError};
use rigdeck_core::hub::api::{HubClient, HubError, ModelInfo, SearchQuery, SortBy, WeightFormat};
use rigdeck_core::hub::cache::inventory;
use rigdeck_core::hub::config::{HubConfig, HubToken};
use rigdeck_core::hub::download::verify;
use rigdeck_core::hub::quants;
use rigdeck_core::hub::repo::{CommitId, RepoId, Revision};
use serde::Deserialize;

use super::error::ApiError;
use super::placement::{devices_for, parse_body, planning_devices};
use super::AppState;
use rigdeck_core::hub_fit::{plan_quants, QuantFit};
use rigdeck_core::placement::rig::Margins;

pub(super) fn hub_client(state: &AppState) -> Result<(HubClient, HubConfig), ApiError> {
    let config = HubConfig::from_env(Some(&state.hub_token_file))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "hub_config", e.to_string()))?;
    let client = HubClient::new(&config).map_err(hub_error)?;
    Ok((client, config))
}

/// The hub's errors with the status that says whose side they are on.
fn hub_error(error: HubError) -> ApiError {
    let (status, code) = match &error {
        HubError::NotFound { .. } => (StatusCode::NOT_FOUND, "hub_not_found"),
        HubError::Gated { .. } | HubError::Unauthorized { .. } => {
            (StatusCode::FORBIDDEN, "hub_gated")
        }
        HubError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "hub_rate_limited"),
        _ => (StatusCode::BAD_GATEWAY, "hub_unavailable"),
    };
    ApiError::new(status, code, error.to_string())
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn repo_of(owner: &str, name: &str) -> Result<RepoId, ApiError> {
    RepoId::parse(&format!("{owner}/{name}")).map_err(|e| bad_request(e.to_string()))
}

pub(super) fn revision_of(revision: Option<&str>) -> Result<Revision, ApiError> {
    revision
        .map_or(Ok(Revision::main()), Revision::parse)
        .map_err(|e| bad_request(e.to_string()))
}

pub(super) fn respond(result: Result<serde_json::Value, ApiError>) -> Response {
    match result {
        Ok(json) => Json(json).into_response(),
        Err(error) => error.into_response(),
    }
}

#[derive(Debug, Deserialize)]
pub struct SearchParams {
    #[serde(default)]
    text: String,
    format: Option<WeightFormat>,
    #[serde(default)]
    sort: SortBy,
    limit: Option<u32>,
}

pub async fn search(
    State(state): State<Arc<AppState>>,
    Query(params): Query<SearchParams>,
) -> Response {
    let query = SearchQuery {
        text: params.text,
        format: params.format,
        sort: params.sort,
        limit: params.limit,
    };
    respond(
        async {
            let (client, _) = hub_client(&state)?;
            let hits = client.search(&query).await.map_err(hub_error)?;
            Ok(serde_json::json!(hits))
        }
        .await,
    )
}

/// The curated starter list (`assets/hub/starter-catalog.json`, built into the binary, or the
/// file `RIGDECK_STARTER_CATALOG` names), as it is written.
pub async fn starter() -> Response {
    respond(
        super::hub_recommended::catalog_text().and_then(|(text, source)| {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "catalog",
                    format!("the model catalog {source} is not valid: {e}; fix the file"),
                )
            })
        }),
    )
}

#[derive(Debug, Deserialize)]
pub struct RevisionParam {
    revision: Option<String>,
}

/// The client, and the model at a revision (its commit): where every model route starts.
pub(super) async fn model_at(
    state: &AppState,
    repo: &RepoId,
    revision: &Revision,
) -> Result<(HubClient, HubConfig, ModelInfo), ApiError> {
    let (client, config) = hub_client(state)?;
    let info = client.model_info(repo, revision).await.map_err(hub_error)?;
    Ok((client, config, info))
}

/// The model's files at its commit, grouped by quantization, and the entries refused.
pub(super) async fn groups_at(
    client: &HubClient,
    repo: &RepoId,
    info: &ModelInfo,
) -> Result<(Vec<quants::FileGroup>, Vec<String>), ApiError> {
    let listing = client
        .list_files(repo, &info.commit)
        .await
        .map_err(hub_error)?;
    Ok((quants::group(&listing.files), listing.refused))
}

/// The model a route's path and `?revision=` name, with the client that found it.
async fn model_of_path(
    state: &AppState,
    (owner, name): (String, String),
    params: RevisionParam,
) -> Result<(RepoId, Revision, HubClient, ModelInfo), ApiError> {
    let repo = repo_of(&owner, &name)?;
    let revision = revision_of(params.revision.as_deref())?;
    let (client, _, info) = model_at(state, &repo, &revision).await?;
    Ok((repo, revision, client, info))
}

/// The model at a revision: summary, commit, files grouped by quantization, refused entries.
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(path): Path<(String, String)>,
    Query(params): Query<RevisionParam>,
) -> Response {
    respond(
        async {
            let (repo, revision, client, info) = model_of_path(&state, path, params).await?;
            let (groups, refused) = groups_at(&client, &repo, &info).await?;
            Ok(serde_json::json!({
                "model": info,
                "revision": revision,
                "groups": groups,
                "refused": refused,
            }))
        }
        .await,
    )
}

pub async fn card(
    State(state): State<Arc<AppState>>,
    Path(path): Path<(String, String)>,
    Query(params): Query<RevisionParam>,
) -> Response {
    respond(
        async {
            let (repo, _, client, info) = model_of_path(&state, path, params).await?;
            let markdown = client
                .model_card(&repo, &info.commit)
                .await
                .map_err(hub_error)?;
            Ok(serde_json::json!({ "commit": info.commit, "markdown": markdown }))
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitBody {
    repo: String,
    revision: Option<String>,
    /// `live` (this machine now) or a preset id.
    #[serde(default = "live")]
    rig: String,
    /// Context length to plan for (tokens).
    #[serde(default = "default_context")]
    context: u32,
}

fn live() -> String {
    "live".to_owned()
}

fn default_context() -> u32 {
    32_768
}

/// Every GGUF quantization of a repository planned on the rig from its headers (no download).
pub async fn fit(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    respond(
        async {
            let body: FitBody = parse_body(&body)?;
            let repo = RepoId::parse(&body.repo).map_err(|e| bad_request(e.to_string()))?;
            let revision = revision_of(body.revision.as_deref())?;
            if body.context == 0 || body.context > 1 << 24 {
                return Err(bad_request(format!(
                    "context {} is out of range: choose 1 to 16777216 tokens",
                    body.context
                )));
            }
            // Checked first: a rig with no reading yet answers at once, before the hub is asked.
            devices_for(&state, &body.rig, &Margins::default())?;
            let (client, config, info) = model_at(&state, &repo, &revision).await?;
            let (groups, _) = groups_at(&client, &repo, &info).await?;
            let quants = fits_on_rig(
                &state,
                &config,
                (&repo, &info.commit),
                &groups,
                &body.rig,
                body.context,
            )
            .await?;
            Ok(serde_json::json!({
                "commit": info.commit,
                "rig": body.rig,
                "context": body.context,
                "quants": quants,
            }))
        }
        .await,
    )
}

/// Every GGUF quantization of `groups` planned on `rig` at `context` tokens from its header,
/// on the devices the placement editor plans on (the same margins, this rig's records for the
/// model's architecture applied): the verdict a model page shows is the plan the editor opens.
pub(super) async fn fits_on_rig(
    state: &AppState,
    config: &HubConfig,
    (repo, commit): (&RepoId, &CommitId),
    groups: &[quants::FileGroup],
    rig: &str,
    context: u32,
) -> Result<Vec<QuantFit>, ApiError> {
    let margins = Margins::default();
    let headers = state
        .hub_headers
        .read_quants(config, repo, commit, groups)
        .await;
    // One rig per architecture the headers name (one, in practice).
    let mut rigs = std::collections::BTreeMap::new();
    for architecture in headers.iter().filter_map(|h| h.architecture()) {
        if !rigs.contains_key(architecture) {
            let (devices, _) = planning_devices(state, rig, &margins, architecture).await?;
            rigs.insert(architecture.to_owned(), devices);
        }
    }
    Ok(plan_quants(
        &headers,
        |architecture| rigs.get(architecture).cloned().unwrap_or_default(),
        context,
    ))
}

/// Whether a token is set, and where from (never the token itself).
pub async fn token_status(State(state): State<Arc<AppState>>) -> Response {
    let source = if std::env::var("HF_TOKEN").is_ok_and(|t| !t.trim().is_empty()) {
        Some("HF_TOKEN")
    } else if state.hub_token_file.exists() {
        Some("rigdeck")
    } else {
        HubConfig::from_env(None)
            .ok()
            .and_then(|c| c.token)
            .map(|_| "HF_HOME/token")
    };
    Json(serde_json::json!({ "present": source.is_some(), "source": source })).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    token: String,
}

pub async fn set_token(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let body: TokenBody = match parse_body(&body) {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let token = match HubToken::parse(&body.token) {
        Ok(token) => token,
        Err(why) => return bad_request(format!("the token was not saved: {why}")).into_response(),
    };
    match token.save(&state.hub_token_file) {
        Ok(()) => token_status(State(state)).await,
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "token_not_saved",
            e.to_string(),
        )
        .into_response(),
    }
}

pub async fn delete_token(State(state): State<Arc<AppState>>) -> Response {
    let _ = std::fs::remove_file(&state.hub_token_file);
    token_status(State(state)).await
}

/// The models in the shared cache, with disk use (a blob shared by snapshots counted once).
pub async fn cached(State(state): State<Arc<AppState>>) -> Response {
    respond(
        async {
            let (_, config) = hub_client(&state)?;
            let dir = config.cache_dir.clone();
            let repos = tokio::task::spawn_blocking(move || inventory::list(&dir))
                .await
                .map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "cache", e.to_string())
                })?;
            Ok(serde_json::json!({ "cache_dir": config.cache_dir, "models": repos }))
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
pub struct CommitParam {
    commit: Option<String>,
}

/// Removes a model from the cache (one snapshot with `?commit=`, else all); a blob another
/// snapshot uses stays. The library rescans at once.
pub async fn remove_cached(
    State(state): State<Arc<AppState>>,
    Path((owner, name)): Path<(String, String)>,
    Query(params): Query<CommitParam>,
) -> Response {
    respond(
        async {
            let repo = repo_of(&owner, &name)?;
            let commit = params
                .commit
                .as_deref()
                .map(CommitId::parse)
                .transpose()
                .map_err(|e| bad_request(e.to_string()))?;
            let (_, config) = hub_client(&state)?;
            let dir = config.cache_dir.clone();
            let removed = tokio::task::spawn_blocking(move || {
                inventory::remove(&dir, &repo, commit.as_ref())
            })
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "cache", e.to_string()))?
            .map_err(|e| {
                let status = match e.kind() {
                    std::io::ErrorKind::NotFound => StatusCode::NOT_FOUND,
                    // A download of the model is running: its partial file would go.
                    std::io::ErrorKind::ResourceBusy => StatusCode::CONFLICT,
                    _ => StatusCode::INTERNAL_SERVER_ERROR,
                };
                ApiError::new(status, "cache", e.to_string())
            })?;
            let library = state.library.clone();
            tokio::spawn(async move { library.rescan().await });
            Ok(serde_json::json!(removed))
        }
        .await,
    )
}

/// Re-hashes a cached model's files against the hub and says whether the hub moved on.
pub async fn verify_cached(
    State(state): State<Arc<AppState>>,
    Path((owner, name)): Path<(String, String)>,
    Query(params): Query<RevisionParam>,
) -> Response {
    respond(
        async {
            let repo = repo_of(&owner, &name)?;
            let revision = revision_of(params.revision.as_deref())?;
            let (client, config) = hub_client(&state)?;
            let checked = verify::verify(&client, &config.cache_dir, &repo, &revision)
                .await
                .map_err(hub_error)?;
            Ok(serde_json::json!(checked))
        }
        .await,
    )
}

fn queue(state: &AppState) -> Result<&Downloads, ApiError> {
    state.downloads.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "downloads need the database, which could not be opened (see the daemon's log)",
        )
    })
}

fn queue_error(error: QueueError) -> ApiError {
    let status = match error {
        QueueError::NotFound(_) => StatusCode::NOT_FOUND,
        QueueError::WrongState { .. } => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, "download", error.to_string())
}

pub async fn list_downloads(State(state): State<Arc<AppState>>) -> Response {
    respond(queue(&state).map(|q| serde_json::json!(q.list())))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDownload {
    repo: String,
    quant: Option<String>,
    revision: Option<String>,
}

/// Resolves the revision to a commit and the quantization to its files, then queues them.
pub async fn create_download(
    State(state): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Response {
    let result: Result<serde_json::Value, ApiError> = async {
        let body: NewDownload = parse_body(&body)?;
        let queue = queue(&state)?;
        let repo = RepoId::parse(&body.repo).map_err(|e| bad_request(e.to_string()))?;
        let revision = revision_of(body.revision.as_deref())?;
        let (client, _, info) = model_at(&state, &repo, &revision).await?;
        let (groups, _) = groups_at(&client, &repo, &info).await?;
        let (label, files) = quants::select(&groups, body.quant.as_deref()).map_err(bad_request)?;
        let request = DownloadRequest {
            repo,
            revision,
            commit: info.commit,
            label,
            files,
        };
        let view = queue.enqueue(request).await.map_err(queue_error)?;
        Ok(serde_json::json!(view))
    }
    .await;
    match result {
        Ok(json) => (StatusCode::CREATED, Json(json)).into_response(),
        Err(error) => error.into_response(),
    }
}

pub async fn download_action(
    State(state): State<Arc<AppState>>,
    Path((id, action)): Path<(i64, String)>,
) -> Response {
    let result = async {
        let queue = queue(&state)?;
        let view = match action.as_str() {
            "pause" => queue.pause(id).await,
            "resume" => queue.resume(id).await,
            "cancel" => queue.cancel(id).await,
            "retry" => queue.retry(id).await,
            other => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no action '{other}': use pause, resume, cancel or retry"),
                ))
            }
        };
        view.map(|v| serde_json::json!(v)).map_err(queue_error)
    }
    .await;
    respond(result)
}

pub async fn delete_download(State(state): State<Arc<AppState>>, Path(id): Path<i64>) -> Response {
    let result = async {
        queue(&state)?.forget(id).await.map_err(queue_error)?;
        Ok(serde_json::json!({ "removed": id }))
    }
    .await;
    respond(result)
}
