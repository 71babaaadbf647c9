//! Gangs over HTTP. On the head: a multi-node profile starts and stops through the instance
//! endpoints (`POST /profiles/{name}/start`, `POST /instances/{name}/stop|restart`), which come
//! here; `GET /gangs` and `GET /gangs/{name}` show them; `GET|POST /gangs/{name}/fetch-model`
//! says which followers lack the model and downloads it there. On a follower's rig, called by
//! its desk over the fleet channel: `POST /gang/check` (this box's preflight), `POST
//! /gang/followers` (start a follower in its seat) and `POST /gang/model-copies` (where the
//! head's model download lands here, and queue it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use rigdeck_core::engines::registry::EngineBuild;
use rigdeck_core::launch::LaunchProfile;
use rigdeck_core::profiles::{profile, python_engines};
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use rigdeck_core::placement::rig::Margins;

use crate::gang::left::LeftOnRigs;
use crate::gang::lent::LentPlanning;
use crate::gang::member::FollowerStart;
use crate::gang::model_copies::{self, CopyRequest};
use crate::gang::preflight::{self, CheckRequest};
use crate::gang::{GangError, Gangs};

type ApiResult<T> = Result<T, ApiError>;

fn gangs(state: &AppState) -> ApiResult<&Arc<Gangs>> {
    state.gangs.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "gangs need the database and the instances, which could not be opened when the daemon started (see its log)",
        )
    })
}

fn gang_error(err: GangError) -> ApiError {
    let (status, code) = match &err {
        GangError::AlreadyRunning(_) => (StatusCode::CONFLICT, "already_running"),
        GangError::NotRunning(_) => (StatusCode::NOT_FOUND, "gang_not_found"),
        GangError::Preflight { .. } => (StatusCode::CONFLICT, "gang_preflight"),
        GangError::Refused(_) => (StatusCode::BAD_REQUEST, "invalid_profile"),
    };
    ApiError::new(status, code, err.to_string())
}

/// Starts a multi-node profile as a gang (from `POST /profiles/{name}/start`).
pub(super) async fn start(
    state: &AppState,
    profile: LaunchProfile,
    build: &EngineBuild,
) -> ApiResult<Json<Value>> {
    let planning = match profile.lenders.is_empty() {
        true => None,
        false => Some(lent_planning(state, &profile).await?),
    };
    let status = gangs(state)?
        .start(profile, build, planning)
        .await
        .map_err(gang_error)?;
    Ok(Json(json!(status)))
}

/// How long a gang the last daemon left running is tried again when its start is refused (a
/// rig not back yet): its rigs may be restarting too.
const RESUME_FOR: Duration = Duration::from_secs(600);
/// The longest wait between two of those tries.
const RESUME_WAIT_MAX: Duration = Duration::from_secs(15);

/// Starts again each gang the last daemon left running (`Gangs::take_over_left` found them and
/// stopped their heads here): what is left of it on other rigs is stopped first, then it starts
/// as the user started it; a refused start is tried again, with why in the gang's status.
pub(crate) async fn resume_left(state: Arc<AppState>, left: Vec<(String, LeftOnRigs)>) {
    let Some(gangs) = state.gangs.clone() else {
        return;
    };
    for (name, left) in left {
        let (state, gangs) = (state.clone(), gangs.clone());
        tokio::spawn(async move {
            gangs.clean_up_left(&name, &left).await;
            start_again(&state, &gangs, &name).await;
        });
    }
}

async fn start_again(state: &AppState, gangs: &Gangs, name: &str) {
    let deadline = Instant::now() + RESUME_FOR;
    let mut wait = Duration::from_secs(1);
    while gangs.is_resuming(name) {
        let (why, for_good) = match start_by_name(state, name).await {
            Ok(_) => return,
            Err(err) if err.code == "already_running" => return,
            // The profile is gone or no longer valid: no try can start it.
            Err(err) => (
                err.message,
                err.status.is_client_error() && err.status != StatusCode::CONFLICT,
            ),
        };
        let given_up = for_good || Instant::now() >= deadline || !gangs.is_resuming(name);
        gangs.resume_refused(name, &why, given_up).await;
        if given_up {
            tracing::warn!("gang '{name}' left by the last daemon was not started again: {why}");
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RESUME_WAIT_MAX);
    }
}

/// The profile `name` started as a gang.
async fn start_by_name(state: &AppState, name: &str) -> ApiResult<Json<Value>> {
    let profile = super::instances::store(state)?
        .launch_profile(name)
        .await
        .map_err(super::instances::store_error)?;
    let build = super::instances::profile_build(state, &profile).await?;
    start(state, profile, &build).await
}

/// What a profile with lenders is planned from: its model's shape and this rig's devices.
async fn lent_planning(state: &AppState, profile: &LaunchProfile) -> ApiResult<LentPlanning> {
    let (loaded, _) = super::placement::load(&profile.model.to_string_lossy()).await?;
    let (head_devices, _) = super::placement::planning_devices(
        state,
        "live",
        &Margins::default(),
        &loaded.shape.architecture,
    )
    .await?;
    Ok(LentPlanning {
        shape: loaded.shape,
        head_devices,
    })
}

/// Whether `name` is a gang this daemon heads (its stop and restart come here).
pub(super) fn is_gang(state: &AppState, name: &str) -> bool {
    state.gangs.as_ref().is_some_and(|g| g.knows(name))
}

/// Stops a gang (from `POST /instances/{name}/stop`): every member, the head first.
pub(super) async fn stop(state: &AppState, name: &str) -> ApiResult<Json<Value>> {
    let status = gangs(state)?.stop(name).await.map_err(gang_error)?;
    Ok(Json(json!(status)))
}

/// `GET /gangs`.
pub async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Value>> {
    Ok(Json(json!(gangs(&state)?.list())))
}

/// `GET /gangs/{name}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let status = gangs(&state)?
        .status(&name)
        .ok_or_else(|| gang_error(GangError::NotRunning(name)))?;
    Ok(Json(json!(status)))
}

/// `GET /gangs/{name}/fetch-model`: which followers of the multi-node profile `name` lack its
/// model, and where the head's download of it would land on each (or how to copy it).
pub async fn model_survey(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    survey_for(&state, &name, false).await
}

/// `POST /gangs/{name}/fetch-model`: the head's download of the model queued on each follower's
/// rig that lacks it; the rigs' download ids and where each lands.
pub async fn fetch_model(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    survey_for(&state, &name, true).await
}

async fn survey_for(state: &AppState, name: &str, start: bool) -> ApiResult<Json<Value>> {
    let store = state.store.as_ref().ok_or_else(no_database)?;
    let profile = store
        .launch_profile(name)
        .await
        .map_err(super::instances::store_error)?;
    let build = super::instances::profile_build(state, &profile).await?;
    let survey = gangs(state)?
        .model_survey(&profile, &build, start)
        .await
        .map_err(gang_error)?;
    Ok(Json(json!(survey)))
}

/// `POST /gang/model-copies`: where a head's model download lands on this rig and, unless a dry
/// run, the download queued (it shows in `GET /downloads` as any).
pub async fn copy_model(
    State(state): State<Arc<AppState>>,
    Json(asked): Json<CopyRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let downloads = state.downloads.as_ref().ok_or_else(no_database)?;
    let started = !asked.dry_run;
    let answer = model_copies::copy_here(downloads, asked)
        .await
        .map_err(|why| ApiError::new(StatusCode::CONFLICT, "download_refused", why))?;
    let status = if started {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!(answer))))
}

/// `POST /gang/check`: whether this box can take a part in a head's gang.
pub async fn check(
    State(state): State<Arc<AppState>>,
    Json(request): Json<CheckRequest>,
) -> ApiResult<Json<Value>> {
    let store = state.store.as_ref().ok_or_else(no_database)?;
    Ok(Json(json!(preflight::check_here(store, &request).await)))
}

/// `POST /gang/followers`: starts a follower in its seat with this rig's build of the head's
/// engine version; it runs under the instances, so it is listed, logged and stopped as any.
pub async fn start_follower(
    State(state): State<Arc<AppState>>,
    Json(start): Json<FollowerStart>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let store = state.store.as_ref().ok_or_else(no_database)?;
    let instances = state.instances.as_ref().ok_or_else(no_database)?;
    let refused =
        |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_follower", message);
    if !start.seat.is_follower() {
        return Err(refused(
            "a follower's seat has a rank above 0: the head runs on the desk".to_owned(),
        ));
    }
    let builds = store
        .engine_builds()
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let build = preflight::matching_build(&builds, start.kind, &start.version).map_err(|why| {
        ApiError::new(
            StatusCode::CONFLICT,
            "gang_preflight",
            format!("this rig {why}"),
        )
    })?;
    let mut follower = LaunchProfile {
        name: start.instance.clone(),
        engine_build_id: build.id,
        port: 0,
        autostart: false,
        multi_node: None,
        planned_memory: Vec::new(),
        ..start.profile.clone()
    };
    profile::validate(&follower, Some(build), 0).map_err(|e| refused(e.to_string()))?;
    if let Some(frame) = state.telemetry.latest() {
        follower.planned_memory = python_engines::planned_memory(&follower, &frame.sample.gpus);
    }
    follower.seat = Some(start.seat);
    let view = instances
        .start_variant(follower, false)
        .await
        .map_err(|err| ApiError::new(StatusCode::CONFLICT, "follower_refused", err.to_string()))?;
    Ok((StatusCode::CREATED, Json(json!(view))))
}

/// `GET /gang/leases/{lease}`: whether a lease this rig lends still has its `rpc-server`
/// (a head's gang asks, over the fleet channel, while it runs).
pub async fn lease(
    State(state): State<Arc<AppState>>,
    Path(lease): Path<String>,
) -> ApiResult<Json<Value>> {
    let fleet = state.fleet.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "fleet_off",
            "the fleet is off on this rig (see its log): it lends nothing",
        )
    })?;
    let found = fleet
        .rpc_leases()
        .lent
        .into_iter()
        .find(|l| l.lease == lease)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "lease_not_found",
                format!("this rig lends no lease '{lease}': it was released, its daemon restarted, or it unpinned its head"),
            )
        })?;
    Ok(Json(
        json!({"lease": found.lease, "running": found.running, "pid": found.pid}),
    ))
}

fn no_database() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_database",
        "the database could not be opened when the daemon started (see its log): a gang's follower needs it",
    )
}
