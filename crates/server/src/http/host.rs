//! The host's memory bandwidth: what the planner uses for the CPU, Rigdeck's measurement of it
//! and how it was taken, and measuring it again.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use rigdeck_core::host_memory_bandwidth::{probe_size_for, BandwidthStatus, MeasureError};

use super::error::ApiError;
use super::AppState;

pub async fn memory_bandwidth(State(state): State<Arc<AppState>>) -> Json<BandwidthStatus> {
    Json(state.memory_bandwidth.status(&state.current_settings()))
}

/// Measures now (a couple of seconds) and answers with the new status.
pub async fn measure_memory_bandwidth(
    State(state): State<Arc<AppState>>,
) -> Result<Json<BandwidthStatus>, ApiError> {
    let size = state
        .telemetry
        .latest()
        .and_then(|frame| probe_size_for(&frame.sample.host));
    state.memory_bandwidth.measure(size).await.map_err(|err| {
        let (status, code) = match &err {
            MeasureError::AlreadyMeasuring => (StatusCode::CONFLICT, "measuring"),
            MeasureError::TooLittleMemory => (StatusCode::SERVICE_UNAVAILABLE, "too_little_memory"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "measure_failed"),
        };
        ApiError::new(status, code, err.to_string())
    })?;
    Ok(Json(
        state.memory_bandwidth.status(&state.current_settings()),
    ))
}
