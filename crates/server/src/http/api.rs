//! JSON API handlers: each one a thin wrapper over a core call.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Json;
use rigdeck_core::settings::{Settings, SettingsChanges, SettingsError};
use rigdeck_core::telemetry::history::HistoryRange;
use serde::Deserialize;

use super::error::ApiError;
use super::guard::session_cookie_header;
use super::AppState;

pub async fn status(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started_at_ms": state.started_at_ms,
        "bind": state.bind.to_string(),
        "telemetry_period_ms": state.current_settings().telemetry_period_ms,
        "ws_clients": state.ws_clients.load(Ordering::Relaxed),
        "data_dir": state.data_dir.display().to_string(),
        "history_available": state.history_available,
        "engines_at_start": state.engines_at_start,
    }))
}

pub async fn latest(State(state): State<Arc<AppState>>) -> Response {
    match state.telemetry.latest() {
        Some(frame) => Json(frame).into_response(),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_sample_yet",
            "no telemetry sample yet: retry in a second",
        )
        .into_response(),
    }
}

pub async fn history(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let text = query.get("range").map_or("15m", String::as_str);
    let Some(range) = HistoryRange::parse(text) else {
        let message = format!("unknown history range '{text}': use 15m, 1h or 24h");
        return ApiError::new(StatusCode::BAD_REQUEST, "bad_range", message).into_response();
    };
    if range != HistoryRange::FifteenMinutes && !state.history_available {
        let message = "stored history is off because the database could not be opened (see the daemon's log); the 15 minute view still works";
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "history_unavailable",
            message,
        )
        .into_response();
    }
    match state.telemetry.history(range, rigdeck_core::now_ms()).await {
        Ok(history) => Json(history).into_response(),
        Err(err) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "history_failed",
            err.to_string(),
        )
        .into_response(),
    }
}

pub async fn get_settings(State(state): State<Arc<AppState>>) -> Json<Settings> {
    Json(state.current_settings())
}

pub async fn put_settings(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let changes: SettingsChanges = match serde_json::from_slice(&body) {
        Ok(changes) => changes,
        Err(err) => {
            let message = format!("settings update is not valid: {err}; send a JSON object with telemetry_period_ms, model_folders or keep_running_in_background");
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_settings", message).into_response();
        }
    };
    match apply_settings(&state, &changes, "bad_settings") {
        Ok(settings) => Json(settings).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Saves a settings update and tells the collector and the library; a change that is not valid
/// is a 400 with `bad_code`, a file that cannot be written a 500.
pub(super) fn apply_settings(
    state: &AppState,
    changes: &SettingsChanges,
    bad_code: &'static str,
) -> Result<Settings, ApiError> {
    let updated = state
        .settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .update(changes);
    match updated {
        Ok(settings) => {
            state.settings_tx.send_replace(settings.clone());
            Ok(settings)
        }
        Err(err @ SettingsError::Write { .. }) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "settings_not_saved",
            err.to_string(),
        )),
        Err(err) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            bad_code,
            err.to_string(),
        )),
    }
}

#[derive(Deserialize)]
pub struct SignIn {
    token: String,
}

/// The sign-in form: a right token gets the session cookie.
pub async fn sign_in(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let Ok(SignIn { token }) = serde_json::from_slice(&body) else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_sign_in",
            "send {\"token\": \"…\"}",
        )
        .into_response();
    };
    let token = token.trim();
    if !state.token.matches(token) {
        return ApiError::unauthorized().into_response();
    }
    (
        StatusCode::NO_CONTENT,
        [(header::SET_COOKIE, session_cookie_header(Some(token)))],
    )
        .into_response()
}

pub async fn sign_out() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::SET_COOKIE, session_cookie_header(None))],
    )
        .into_response()
}

/// `GET /login?token=…`: the link `rigdeck serve` prints. Sets the cookie and redirects to `/`
/// so the token does not stay in the address bar or the history.
pub async fn login(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match query.get("token").map(|t| t.trim()) {
        Some(token) if state.token.matches(token) => {
            ([(header::SET_COOKIE, session_cookie_header(Some(token)))], Redirect::to("/")).into_response()
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            Html(
                "<!doctype html><title>Rigdeck: sign-in failed</title><p>This sign-in link is wrong or out of date. \
                 Use the URL that <code>rigdeck serve</code> prints in a terminal, or paste the token from \
                 <code>~/.config/rigdeck/token</code> on the <a href=\"/\">sign-in page</a>.</p>",
            ),
        )
            .into_response(),
    }
}
