//! `GET /gang/probe?bytes=N`: N zero bytes, for a head that measures its link to this rig
//! through the fleet's channel (a few empty round trips, then a few MB) before it plans a split.

use axum::extract::Query;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::ApiError;

/// The most one probe sends.
const MAX_PROBE_BYTES: u64 = 64 << 20;

#[derive(Debug, Deserialize)]
pub struct ProbeQuery {
    #[serde(default)]
    bytes: u64,
}

pub async fn probe(Query(query): Query<ProbeQuery>) -> Response {
    if query.bytes > MAX_PROBE_BYTES {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_probe",
            format!(
                "a probe sends at most {MAX_PROBE_BYTES} bytes, not {}: ask for fewer",
                query.bytes
            ),
        )
        .into_response();
    }
    let body = vec![0u8; usize::try_from(query.bytes).unwrap_or(0)];
    ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
}
