//! The model folders other tools keep on this machine (`GET /models/found-folders`) and adding a
//! folder to the library (`POST /models/folders`): the path checked, saved in the settings'
//! `model_folders`, and the library rescanned.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rigdeck_core::library::{known_folders, Library};
use rigdeck_core::settings::SettingsChanges;
use serde::Deserialize;

use super::error::ApiError;
use super::AppState;

/// The found folders' models as last scanned: a header is read again only when its file changed,
/// so opening the list again costs a walk of the folders.
static FOUND_SCANNER: LazyLock<Mutex<Library>> = LazyLock::new(Mutex::default);

pub async fn found_folders(State(state): State<Arc<AppState>>) -> Response {
    let folders = state.current_settings().library_folders();
    let scan = move || {
        let mut scanner = FOUND_SCANNER.lock().unwrap_or_else(PoisonError::into_inner);
        known_folders::find(&folders, &mut scanner)
    };
    match tokio::task::spawn_blocking(scan).await {
        Ok(found) => Json(found).into_response(),
        Err(err) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "scan_failed",
            format!("the model folders could not be scanned: {err}"),
        )
        .into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddFolder {
    path: String,
}

pub async fn add_folder(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let folder = match serde_json::from_slice::<AddFolder>(&body)
        .map_err(|err| format!("{err}; send {{\"path\": \"/home/you/models\"}}"))
        .and_then(|request| checked_folder(&request.path))
    {
        Ok(folder) => folder,
        Err(message) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_folder", message).into_response()
        }
    };
    let current = state.current_settings();
    let already = known_folders::is_in_library(&current.library_folders(), &folder);
    let settings = if already {
        current
    } else {
        let mut model_folders = current.model_folders;
        model_folders.push(folder.clone());
        let changes = SettingsChanges {
            model_folders: Some(model_folders),
            ..Default::default()
        };
        match super::api::apply_settings(&state, &changes, "bad_folder") {
            Ok(settings) => settings,
            Err(error) => return error.into_response(),
        }
    };
    let models = state.library.rescan().await;
    Json(serde_json::json!({
        "path": folder,
        "already_in_library": already,
        "model_folders": settings.model_folders,
        "models": *models,
    }))
    .into_response()
}

/// An absolute path (`~/` is the home folder) to a folder that exists.
fn checked_folder(text: &str) -> Result<PathBuf, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("no folder given: type the path of the folder that holds the models, e.g. /home/you/models".to_owned());
    }
    let path = match text.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => {
                return Err(format!(
                    "'{text}' starts with ~ but the daemon has no HOME: give the full path"
                ))
            }
        },
        None => PathBuf::from(text),
    };
    if !path.is_absolute() {
        return Err(format!(
            "folder '{text}' is not an absolute path: give the full path, e.g. /home/you/models"
        ));
    }
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(path),
        Ok(_) => Err(format!(
            "'{}' is a file, not a folder: give the folder that holds the models",
            path.display()
        )),
        Err(err) => Err(format!(
            "folder '{}' cannot be opened ({err}): check the path (a folder on the machine the daemon runs on)",
            path.display()
        )),
    }
}
