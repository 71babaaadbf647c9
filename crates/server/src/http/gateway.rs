//! The gateway on the daemon's port: the OpenAI and Anthropic routes under `/v1` and `/metrics`
//! (an API key or the admin token), and under `/api/v1` the keys, the Gateway page's status and
//! the usage. Each handler is a thin wrapper over `rigdeck_gateway::Gateway`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use rigdeck_core::gateway::keys::{Caller, KeyError, KeyView, NewKey};
use rigdeck_core::gateway::metrics::PromText;
use rigdeck_core::gateway::service::GatewayStatus;
use rigdeck_core::gateway::usage::UsageSummary;
use rigdeck_core::gateway::{Dialect, ErrorKind, Gateway, GatewayError, Route};
use serde::Deserialize;

use super::error::ApiError;
use super::{daemon_metrics, guard, telemetry_metrics, AppState};

/// The largest request body the gateway reads (long contexts with images stay well below).
pub const MAX_BODY_BYTES: usize = 64 << 20;

type ApiResult<T> = Result<T, ApiError>;

/// `/v1/...` and `/metrics`, behind [`require_key`]: this daemon's models and its paired rigs'.
pub fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    model_routes(Reach::Fleet)
        .route("/v1/models", get(list_models))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(state, require_key))
}

/// `/v1/...` as a desk that joined this rig calls it over the fleet's channel (which admitted
/// the desk's pinned certificate): this daemon's own models only, the desk named as the caller.
pub fn peer_routes() -> Router<Arc<AppState>> {
    let desk = Caller {
        key_id: None,
        name: "fleet desk".to_owned(),
    };
    model_routes(Reach::Here)
        .route("/v1/models", get(list_own_models))
        .layer(Extension(desk))
}

/// Which models a request may reach.
#[derive(Debug, Clone, Copy)]
enum Reach {
    /// This daemon's and its paired rigs'.
    Fleet,
    /// This daemon's own.
    Here,
}

fn model_routes(reach: Reach) -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for route in Route::ALL {
        router = router.route(
            route.path(),
            post(
                move |state: State<Arc<AppState>>, caller: Extension<Caller>, request: Request| {
                    forward(state, caller, route, reach, request)
                },
            ),
        );
    }
    router
}

pub(super) fn dialect_of(path: &str) -> Dialect {
    if path.starts_with("/v1/messages") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

fn gateway(state: &AppState) -> Result<&Arc<Gateway>, GatewayError> {
    state.gateway.as_ref().ok_or_else(|| {
        GatewayError::new(
            ErrorKind::Unavailable,
            "the gateway needs the database, which could not be opened: see the daemon's log",
        )
    })
}

/// An API key (`Authorization: Bearer`, or Anthropic's `x-api-key`) or the admin token.
async fn require_key(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let dialect = dialect_of(request.uri().path());
    let presented = presented_key(request.headers());
    let caller = match presented {
        Some(key) if state.token.matches(key) => Some(Caller::app()),
        Some(key) => state.gateway.as_ref().and_then(|g| g.keys().verify(key)),
        None => None,
    };
    let Some(caller) = caller else {
        let message = match presented {
            Some(_) => "this API key is unknown or revoked: create one on the Gateway page or with `rigdeck keys create NAME`",
            None => "no API key: send `Authorization: Bearer <key>` (or `x-api-key: <key>`); create one on the Gateway page or with `rigdeck keys create NAME`",
        };
        return GatewayError::new(ErrorKind::Authentication, message).response(dialect);
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

pub(super) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    guard::bearer_token(headers).or_else(|| {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    })
}

async fn forward(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    route: Route,
    reach: Reach,
    request: Request,
) -> Response {
    let dialect = route.dialect();
    let gateway = match gateway(&state) {
        Ok(gateway) => gateway.clone(),
        Err(err) => return err.response(dialect),
    };
    let body = match axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            let message = format!(
                "the request body is larger than {} MiB (or was cut off): send less (fewer or smaller images, a shorter prompt)",
                MAX_BODY_BYTES >> 20
            );
            return GatewayError::new(ErrorKind::TooLarge, message).response(dialect);
        }
    };
    match reach {
        Reach::Fleet => gateway.handle(route, caller, body).await,
        Reach::Here => gateway.handle_here(route, caller, body).await,
    }
}

async fn list_models(State(state): State<Arc<AppState>>) -> Response {
    match gateway(&state) {
        Ok(gateway) => gateway.list_all_models().await,
        Err(err) => err.response(Dialect::OpenAi),
    }
}

async fn list_own_models(State(state): State<Arc<AppState>>) -> Response {
    match gateway(&state) {
        Ok(gateway) => gateway.list_models().await,
        Err(err) => err.response(Dialect::OpenAi),
    }
}

/// Prometheus: the rig's GPUs and host from the latest telemetry frame, the gateway, then the
/// daemon's own footprint.
async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut out = PromText::default();
    if let Some(frame) = state.telemetry.latest() {
        telemetry_metrics::write(&mut out, &frame.sample);
    }
    if let Some(gateway) = &state.gateway {
        gateway.write_metrics(&mut out);
    }
    daemon_metrics::write(&mut out);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        Body::from(out.finish()),
    )
        .into_response()
}

fn api_gateway(state: &AppState) -> ApiResult<&Arc<Gateway>> {
    state.gateway.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "the gateway needs the database, which could not be opened: see the daemon's log",
        )
    })
}

fn key_error(err: KeyError) -> ApiError {
    let (status, code) = match &err {
        KeyError::BadName => (StatusCode::BAD_REQUEST, "bad_key_name"),
        KeyError::NameTaken(_) => (StatusCode::CONFLICT, "key_name_taken"),
        KeyError::NotFound(_) => (StatusCode::NOT_FOUND, "no_such_key"),
        KeyError::Query(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database"),
    };
    ApiError::new(status, code, err.to_string())
}

/// `GET /keys`.
pub async fn list_keys(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<KeyView>>> {
    let keys = api_gateway(&state)?
        .keys()
        .list()
        .await
        .map_err(key_error)?;
    Ok(Json(keys))
}

#[derive(Debug, Deserialize)]
pub struct NewKeyBody {
    name: String,
}

/// `POST /keys`: the secret is in this answer only.
pub async fn create_key(
    State(state): State<Arc<AppState>>,
    Json(body): Json<NewKeyBody>,
) -> ApiResult<(StatusCode, Json<NewKey>)> {
    let created = api_gateway(&state)?
        .keys()
        .create(&body.name, rigdeck_core::now_ms())
        .await
        .map_err(key_error)?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// `DELETE /keys/{id}`: revoked at once; the key stays listed.
pub async fn revoke_key(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<KeyView>> {
    let key = api_gateway(&state)?
        .keys()
        .revoke(id, rigdeck_core::now_ms())
        .await
        .map_err(key_error)?;
    Ok(Json(key))
}

/// `GET /gateway`: the endpoint, the models with their state and use, the latest evictions.
pub async fn status(State(state): State<Arc<AppState>>) -> ApiResult<Json<serde_json::Value>> {
    let status: GatewayStatus = api_gateway(&state)?
        .status()
        .await
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "database", err))?;
    let base_url = format!(
        "http://{}:{}/v1",
        super::host_literal(loopback_or(state.bind.ip())),
        state.bind.port()
    );
    let mut value = serde_json::to_value(status).map_err(|err| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            err.to_string(),
        )
    })?;
    value["base_url"] = serde_json::Value::String(base_url);
    Ok(Json(value))
}

fn loopback_or(ip: std::net::IpAddr) -> std::net::IpAddr {
    if ip.is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        ip
    }
}

#[derive(Debug, Deserialize)]
pub struct UsageQuery {
    from_ms: Option<i64>,
    to_ms: Option<i64>,
}

/// `GET /gateway/usage?from_ms=&to_ms=` (default: the last 24 hours).
pub async fn usage(
    State(state): State<Arc<AppState>>,
    Query(query): Query<UsageQuery>,
) -> ApiResult<Json<UsageSummary>> {
    let to_ms = query.to_ms.unwrap_or_else(|| rigdeck_core::now_ms() + 1);
    let from_ms = query.from_ms.unwrap_or(to_ms - 86_400_000);
    if from_ms >= to_ms {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_range",
            "from_ms must be before to_ms",
        ));
    }
    let summary = api_gateway(&state)?
        .usage(from_ms, to_ms)
        .await
        .map_err(|err| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "database",
                err.to_string(),
            )
        })?;
    Ok(Json(summary))
}
