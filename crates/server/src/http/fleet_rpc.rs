//! `/api/v1/fleet/…/rpc`: llama.cpp RPC through the fleet's channel. The head takes a lease of a
//! peer's devices and gets a loopback endpoint for llama-server's `--rpc`; it lists its leases
//! (with the bytes each tunnel moved) and releases them. This daemon lends with its own newest
//! llama.cpp build that has an `rpc-server` ([`lending_build`]).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use rigdeck_core::engines::registry::{Availability, EngineBuild};
use rigdeck_core::engines::EngineKind;
use rigdeck_core::store::Store;
use rigdeck_fleet::rpc_leases::{Released, RpcLeaseList};
use rigdeck_fleet::rpc_lend::{LendingBuild, RpcBuild};
use rigdeck_fleet::rpc_tunnel::TakenLease;
use serde::Deserialize;

use super::error::ApiError;
use super::fleet::{api_fleet, fleet_error};
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

/// The RPC server's name beside a build's `llama-server`.
const RPC_SERVER: &str = "rpc-server";

#[derive(Debug, Deserialize)]
pub struct LeaseBody {
    /// The peer's devices to use: `["CPU"]`, `["CUDA0", "CUDA1"]`…
    pub devices: Vec<String>,
    /// This daemon's llama.cpp build the lease is for (default: its newest with RPC).
    pub engine_build_id: Option<i64>,
}

/// `POST /fleet/peers/{name}/rpc`: a lease of the peer's devices; its endpoint is what
/// llama-server's `--rpc` takes.
pub async fn take(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Json(body): Json<LeaseBody>,
) -> ApiResult<(StatusCode, Json<TakenLease>)> {
    let fleet = api_fleet(&state)?;
    let store = state.store.as_ref().ok_or_else(no_store)?;
    let build = rpc_build(store, body.engine_build_id)
        .await
        .map_err(|why| ApiError::new(StatusCode::CONFLICT, "no_rpc_build", why))?;
    let taken = fleet
        .take_rpc_lease(&name, body.devices, build.build)
        .await
        .map_err(fleet_error)?;
    Ok((StatusCode::CREATED, Json(taken)))
}

/// `GET /fleet/rpc`: the leases this daemon took (with their tunnels' traffic) and lends.
pub async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<RpcLeaseList>> {
    Ok(Json(api_fleet(&state)?.rpc_leases()))
}

/// `DELETE /fleet/rpc/{lease}`: closes the lease's endpoint and tunnels, and has the lender stop
/// its rpc-server.
pub async fn release(
    State(state): State<Arc<AppState>>,
    Path(lease): Path<String>,
) -> ApiResult<Json<Released>> {
    let released = api_fleet(&state)?
        .release_rpc_lease(&lease)
        .await
        .map_err(fleet_error)?;
    Ok(Json(released))
}

fn no_store() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_database",
        "the database is off, so this daemon cannot find its engine builds (see the daemon's log)",
    )
}

/// What this daemon lends with: its newest ready llama.cpp build that has an `rpc-server`.
pub async fn lending_build(store: &Store) -> Result<LendingBuild, String> {
    rpc_build(store, None).await
}

/// The llama.cpp build `id` (or the newest ready one with RPC), with its `rpc-server`.
async fn rpc_build(store: &Store, id: Option<i64>) -> Result<LendingBuild, String> {
    let builds = store
        .engine_builds()
        .await
        .map_err(|err| format!("cannot read the engine builds: {err}"))?;
    let chosen: Vec<&EngineBuild> = match id {
        Some(id) => {
            let build = builds.iter().find(|b| b.id == id).ok_or_else(|| {
                format!("no engine build has the id {id}: `rigdeck engines list` shows them")
            })?;
            vec![build]
        }
        None => builds
            .iter()
            .rev()
            .filter(|b| b.kind == EngineKind::LlamaCpp && b.status == Availability::Ready)
            .collect(),
    };
    let mut why = Vec::new();
    for build in chosen {
        match build.tool(RPC_SERVER) {
            Ok(rpc_server) => {
                return Ok(LendingBuild {
                    rpc_server,
                    build: build_identity(build),
                })
            }
            Err(err) => why.push(err),
        }
    }
    Err(if why.is_empty() {
        "this daemon has no ready llama.cpp build: build the bundled one with `rigdeck engines build` (it includes the RPC backend)".to_owned()
    } else {
        format!(
            "no llama.cpp build here has the RPC backend: {}",
            why.join("; ")
        )
    })
}

/// The build as the other side compares it: Rigdeck's version label and the commit the
/// binary reports.
pub(crate) fn build_identity(build: &EngineBuild) -> RpcBuild {
    RpcBuild {
        version: build.version.clone(),
        commit: build.capabilities.version.commit.clone(),
    }
}
