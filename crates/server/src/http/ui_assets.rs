//! The web UI, built from `ui/` by Vite and embedded in the binary.

use axum::http::{header, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "../../ui/dist"]
#[allow_missing = true]
struct UiAssets;

/// Serves a built file; unknown paths without an extension get the app (it routes itself).
pub async fn serve(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    if let Some(file) = UiAssets::get(path) {
        return file_response(path, file.data.into_owned());
    }
    if path != "index.html" && (path.contains('.') || path.starts_with("api/")) {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    }
    match UiAssets::get("index.html") {
        Some(index) => file_response("index.html", index.data.into_owned()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Html("<!doctype html><title>Rigdeck</title><p>This build of Rigdeck has no web UI: build it with <code>make build</code> (the API under /api/v1 works).</p>"),
        )
            .into_response(),
    }
}

fn file_response(path: &str, bytes: Vec<u8>) -> Response {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    // Vite puts a content hash in every asset name, so those never change; the page itself may.
    let cache = if path.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, mime.as_ref().to_owned()),
            (header::CACHE_CONTROL, cache.to_owned()),
        ],
        bytes,
    )
        .into_response()
}
