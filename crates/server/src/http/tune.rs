//! The tuning API under `/api/v1/bench/tunes`: start a tuning of a profile's knobs, list and
//! read tunings with every trial, cancel, delete, and save the best values as a new profile.
//! Progress reaches the UI as `bench.tune` events (each trial's benchmark as `bench.run`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use rigdeck_core::bench::store::tunes::TuneView;
use rigdeck_core::benchmarks::tuning::{NewTune, TuneError, Tunings};
use serde::Deserialize;
use serde_json::Value;

use super::bench::store_error;
use super::error::ApiError;
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

fn tunings(state: &AppState) -> ApiResult<&Arc<Tunings>> {
    state.tunings.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "tuning needs the database and the engine instances, which could not be opened: see the daemon's log",
        )
    })
}

fn tune_error(err: TuneError) -> ApiError {
    match err {
        TuneError::Invalid(message) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_tuning", message)
        }
        TuneError::Busy(_) => ApiError::new(StatusCode::CONFLICT, "busy", err.to_string()),
        TuneError::NotRunning(_) => {
            ApiError::new(StatusCode::CONFLICT, "not_running", err.to_string())
        }
        TuneError::Store(err) => store_error(err),
    }
}

/// `POST /bench/tunes`: the body is read here so a bad one gets a message naming the field.
pub async fn start(
    State(state): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<TuneView>)> {
    let new: NewTune = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_tuning",
            format!("the tuning request is not valid: {e}"),
        )
    })?;
    let view = tunings(&state)?.begin(new).await.map_err(tune_error)?;
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<TuneView>>> {
    let views = tunings(&state)?.store().list().await.map_err(store_error)?;
    Ok(Json(views))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<TuneView>> {
    let view = tunings(&state)?
        .store()
        .get(id)
        .await
        .map_err(store_error)?;
    Ok(Json(view))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<TuneView>> {
    let tunings = tunings(&state)?;
    tunings.cancel(id).map_err(tune_error)?;
    Ok(Json(tunings.store().get(id).await.map_err(store_error)?))
}

/// `DELETE /bench/tunes/{id}`: a running tuning is cancelled, then deleted.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<StatusCode> {
    tunings(&state)?.delete(id).await.map_err(tune_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveBest {
    /// The new profile's name.
    name: String,
}

/// `POST /bench/tunes/{id}/save`: the profile with the best values, saved under a new name
/// (checked and planned like any new profile).
pub async fn save_best(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
    Json(body): Json<SaveBest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let tunings = tunings(&state)?;
    let profile = tunings
        .best_profile(id, body.name.trim())
        .await
        .map_err(tune_error)?;
    let saved = super::instances::save_new_profile(&state, profile, false).await?;
    tunings
        .store()
        .set_saved_profile(id, body.name.trim())
        .await
        .map_err(store_error)?;
    Ok((StatusCode::CREATED, Json(saved)))
}
