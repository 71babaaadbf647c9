//! `/api/v1/fleet`: this daemon's fleet identity, join codes (invites), joining a rig, the
//! paired peers with whether they answer, a peer's hello, and removing a peer. Thin wrappers
//! over `rigdeck_fleet::Fleet`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use rigdeck_fleet::{Fleet, FleetError, Hello, Invite, Joined, Peer, PeerStatus};
use serde::Deserialize;

use super::error::ApiError;
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

/// A join code's life unless the request says otherwise.
const DEFAULT_TTL: Duration = Duration::from_secs(600);

pub(super) fn api_fleet(state: &AppState) -> ApiResult<&Arc<Fleet>> {
    state.fleet.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "fleet_off",
            "the fleet is off: it needs the database and the config folder, one of which failed (see the daemon's log)",
        )
    })
}

pub(super) fn fleet_error(err: FleetError) -> ApiError {
    let status =
        StatusCode::from_u16(err.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, err.kind.code(), err.message)
}

/// `GET /fleet`: who this daemon is to its peers.
pub async fn identity(State(state): State<Arc<AppState>>) -> ApiResult<Json<serde_json::Value>> {
    let fleet = api_fleet(&state)?;
    Ok(Json(serde_json::json!({
        "name": fleet.identity().name,
        "fingerprint": fleet.identity().fingerprint,
        "listen": fleet.listen_address().map(|a| a.to_string()),
        "version": fleet.version(),
    })))
}

#[derive(Debug, Deserialize)]
pub struct InviteBody {
    /// `HOST:PORT` the desk dials (default: the fleet listener's address).
    pub address: Option<String>,
    /// Seconds the code lives (default 600).
    pub ttl_secs: Option<u64>,
}

/// `POST /fleet/invites`: a one-time join code.
pub async fn invite(
    State(state): State<Arc<AppState>>,
    Json(body): Json<InviteBody>,
) -> ApiResult<(StatusCode, Json<Invite>)> {
    let ttl = body.ttl_secs.map_or(DEFAULT_TTL, Duration::from_secs);
    let invite = api_fleet(&state)?
        .invite(body.address.as_deref(), ttl)
        .await
        .map_err(fleet_error)?;
    Ok((StatusCode::CREATED, Json(invite)))
}

#[derive(Debug, Deserialize)]
pub struct JoinBody {
    pub code: String,
}

/// `POST /fleet/join`: pairs with the rig the code names.
pub async fn join(
    State(state): State<Arc<AppState>>,
    Json(body): Json<JoinBody>,
) -> ApiResult<Json<Joined>> {
    let joined = api_fleet(&state)?
        .join(&body.code)
        .await
        .map_err(fleet_error)?;
    Ok(Json(joined))
}

/// `GET /fleet/peers`: each peer, asked whether it answers now.
pub async fn peers(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<PeerStatus>>> {
    let peers = api_fleet(&state)?.peers().await.map_err(fleet_error)?;
    Ok(Json(peers))
}

/// `GET /fleet/peers/{name}/hello`: the peer's hello over the channel.
pub async fn hello(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Hello>> {
    let hello = api_fleet(&state)?
        .hello_named(&name)
        .await
        .map_err(fleet_error)?;
    Ok(Json(hello))
}

/// `DELETE /fleet/peers/{name}`: unpins the peer; its requests are refused from now on.
pub async fn remove(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Peer>> {
    let peer = api_fleet(&state)?
        .remove(&name)
        .await
        .map_err(fleet_error)?;
    Ok(Json(peer))
}
