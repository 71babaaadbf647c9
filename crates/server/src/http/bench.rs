//! The benchmarks API under `/api/v1/bench`: start a run against an instance, a profile, the
//! gateway or a URL; list, read, cancel and delete runs; export one as CSV, JSON or Markdown.
//! Progress reaches the UI as `bench.run` events on the WebSocket.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rigdeck_core::bench::quality::paired::{compare_runs, ProbeComparison};
use rigdeck_core::bench::report;
use rigdeck_core::bench::store::{RunDetail, RunSummary, StoreError};
use rigdeck_core::benchmarks::{BenchError, Benchmarks, NewBenchmark};
use serde::Deserialize;

use super::error::ApiError;
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

fn benchmarks(state: &AppState) -> ApiResult<&Arc<Benchmarks>> {
    state.benchmarks.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "benchmarks need the database, which could not be opened: see the daemon's log",
        )
    })
}

pub(super) fn store_error(err: StoreError) -> ApiError {
    let (status, code) = match &err {
        StoreError::NoRun(_) => (StatusCode::NOT_FOUND, "no_such_run"),
        StoreError::NoTune(_) => (StatusCode::NOT_FOUND, "no_such_tuning"),
        StoreError::Unreadable { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "unreadable_run"),
        StoreError::Query(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database"),
    };
    ApiError::new(status, code, err.to_string())
}

fn bench_error(err: BenchError) -> ApiError {
    match err {
        BenchError::Invalid(message) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_benchmark", message)
        }
        BenchError::NotRunning(_) => {
            ApiError::new(StatusCode::CONFLICT, "not_running", err.to_string())
        }
        BenchError::Store(err) => store_error(err),
    }
}

/// `POST /bench/runs`: the body is read here so a bad one gets a message naming the field.
pub async fn start(
    State(state): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<RunSummary>)> {
    let new: NewBenchmark = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_benchmark",
            format!("the benchmark request is not valid: {e}"),
        )
    })?;
    let run = benchmarks(&state)?.begin(new).await.map_err(bench_error)?;
    Ok((StatusCode::CREATED, Json(run)))
}

pub async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<RunSummary>>> {
    let runs = benchmarks(&state)?
        .store()
        .list()
        .await
        .map_err(store_error)?;
    Ok(Json(runs))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<RunDetail>> {
    let run = benchmarks(&state)?
        .store()
        .get(id)
        .await
        .map_err(store_error)?;
    Ok(Json(run))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<RunSummary>> {
    let benchmarks = benchmarks(&state)?;
    benchmarks.cancel(id).await.map_err(bench_error)?;
    Ok(Json(benchmarks.summary(id).await.map_err(store_error)?))
}

/// `DELETE /bench/runs/{id}`: a running benchmark is cancelled, then deleted.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<StatusCode> {
    benchmarks(&state)?.delete(id).await.map_err(bench_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
pub struct ProbePair {
    base: i64,
    other: i64,
}

/// `GET /bench/compare-probes?base=ID&other=ID`: two quality probes of one seed, question by
/// question (McNemar's exact test), each pass rate with its 95 % interval.
pub async fn compare_probes(
    State(state): State<Arc<AppState>>,
    Query(pair): Query<ProbePair>,
) -> ApiResult<Json<ProbeComparison>> {
    let store = benchmarks(&state)?.store();
    let base = store.get(pair.base).await.map_err(store_error)?;
    let other = store.get(pair.other).await.map_err(store_error)?;
    let comparison = compare_runs(&base, &other)
        .map_err(|message| ApiError::new(StatusCode::BAD_REQUEST, "not_comparable", message))?;
    Ok(Json(comparison))
}

#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
    /// `runs` (default) or `requests`, for CSV.
    rows: Option<String>,
}

pub async fn export(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
    Query(query): Query<ExportQuery>,
) -> ApiResult<Response> {
    let run = benchmarks(&state)?
        .store()
        .get(id)
        .await
        .map_err(store_error)?;
    let (text, content_type, extension) = match (
        query.format.as_deref().unwrap_or("json"),
        query.rows.as_deref(),
    ) {
        ("csv", None | Some("runs")) => (report::runs_csv(&run), "text/csv; charset=utf-8", "csv"),
        ("csv", Some("requests")) => (
            report::requests_csv(&run),
            "text/csv; charset=utf-8",
            "requests.csv",
        ),
        ("csv", Some(other)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_rows",
                format!("no CSV rows '{other}': use rows=runs or rows=requests"),
            ))
        }
        ("markdown" | "md", _) => (report::markdown(&run), "text/markdown; charset=utf-8", "md"),
        ("json", _) => (
            serde_json::to_string_pretty(&run).unwrap_or_default(),
            "application/json",
            "json",
        ),
        (other, _) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_format",
                format!("no export format '{other}': use format=csv, format=json or format=md"),
            ))
        }
    };
    let disposition = format!("attachment; filename=\"benchmark-{id}.{extension}\"");
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        text,
    )
        .into_response())
}
