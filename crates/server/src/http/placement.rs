//! Planning endpoints: rig presets, plan a model (as given or automatically), and read a pasted
//! llama-server command line into a drawn plan. Each is a thin wrapper over `core::placement`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rigdeck_core::calibration::{self, record, DeviceCalibration};
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::placement::flags::parse_command;
use rigdeck_core::placement::from_gguf::{load_remote_shape, load_shape, LoadedModel};
use rigdeck_core::placement::link::{Link, RemoteBox};
use rigdeck_core::placement::report::{report_across, PlanReport};
use rigdeck_core::placement::rig::{combine, preset, presets, AlsoBox, Margins};
use rigdeck_core::placement::{DeviceSpec, PlacementOptions};
use serde::Deserialize;

use super::error::ApiError;
use super::AppState;

pub async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(serde_json::json!(*state.library.entries()))
}

pub async fn rescan_models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(serde_json::json!(*state.library.rescan().await))
}

pub async fn rig_presets() -> Json<serde_json::Value> {
    let margins = Margins::default();
    let list: Vec<_> = presets()
        .into_iter()
        .map(|p| serde_json::json!({ "id": p.id, "name": p.name, "source": p.source, "devices": p.devices(&margins) }))
        .collect();
    Json(serde_json::json!(list))
}

/// The links a box of a planned rig can be on, with the figures the planner uses.
pub async fn rig_links() -> Json<serde_json::Value> {
    let list: Vec<_> = Link::names()
        .into_iter()
        .filter_map(|id| Some(serde_json::json!({ "id": id, "link": Link::named(id).ok()? })))
        .collect();
    Json(serde_json::json!(list))
}

/// The rig of a plan: `live` or a preset id, or `{preset, also: [{preset, link, lend?}]}` for
/// this rig (or a preset) with other boxes lending devices over a link.
#[derive(Debug, Clone)]
pub struct RigChoice {
    head: String,
    also: Vec<AlsoBox>,
    given: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CombinedRequest {
    preset: String,
    #[serde(default)]
    also: Vec<AlsoBox>,
}

impl<'de> Deserialize<'de> for RigChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let given = serde_json::Value::deserialize(deserializer)?;
        let (head, also) = match &given {
            serde_json::Value::String(id) => (id.clone(), Vec::new()),
            object @ serde_json::Value::Object(_) => {
                let c = CombinedRequest::deserialize(object).map_err(|e| {
                    serde::de::Error::custom(format!(
                        "rig: {e}: write {{\"preset\": \"4x3090\", \"also\": [{{\"preset\": \"2x3090\", \"link\": \"2.5gbe\"}}]}}"
                    ))
                })?;
                (c.preset, c.also)
            }
            _ => {
                return Err(serde::de::Error::custom(
                    "rig: give live, a preset id, or {\"preset\": …, \"also\": [{\"preset\": …, \"link\": …}]}",
                ))
            }
        };
        Ok(RigChoice { head, also, given })
    }
}

impl RigChoice {
    fn live() -> Self {
        RigChoice {
            head: "live".to_owned(),
            also: Vec::new(),
            given: serde_json::json!("live"),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// Path of a GGUF file (any shard of a split model).
    model: String,
    /// `live` (this machine now), a preset id, or either with other boxes: see [`RigChoice`].
    #[serde(default = "RigChoice::live")]
    rig: RigChoice,
    #[serde(default)]
    options: PlacementOptions,
    #[serde(default)]
    margins: Margins,
    #[serde(default)]
    auto: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParseRequest {
    command: String,
    #[serde(default = "RigChoice::live")]
    rig: RigChoice,
    #[serde(default)]
    margins: Margins,
}

pub async fn plan(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let request: PlanRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    match plan_response(
        &state,
        &request.model,
        &request.rig,
        &request.options,
        &request.margins,
        request.auto,
        None,
    )
    .await
    {
        Ok(json) => Json(json).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn parse(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let request: ParseRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let parsed = match parse_command(&request.command) {
        Ok(p) => p,
        Err(e) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_command", e.to_string())
                .into_response()
        }
    };
    let Some(model) = parsed.model.clone() else {
        let message =
            "the command has no -m MODEL: add the model path so its tensors can be placed";
        return ApiError::new(StatusCode::BAD_REQUEST, "bad_command", message).into_response();
    };
    let parsed_json = serde_json::to_value(&parsed).unwrap_or_default();
    match plan_response(
        &state,
        &model,
        &request.rig,
        &parsed.options,
        &request.margins,
        false,
        Some(parsed_json),
    )
    .await
    {
        Ok(json) => Json(json).into_response(),
        Err(e) => e.into_response(),
    }
}

/// llama.cpp's own figures for the plan (`llama-fit-params` of a registered build), beside
/// ours; a plan the dry run cannot check says why.
pub async fn dry_run(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let result: Result<serde_json::Value, ApiError> = async {
        let request: PlanRequest = parse_body(&body)?;
        if !request.rig.also.is_empty() {
            let message = "a rig of several boxes cannot be dry-run here: llama-fit-params would need the lent boxes' rpc-servers; dry-run the head box's part on its own rig";
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "bad_rig", message));
        }
        let planned = planned(
            &state,
            &request.model,
            &request.rig,
            &request.options,
            &request.margins,
            request.auto,
        )
        .await?;
        let builds = match &state.store {
            Some(store) => store.engine_builds().await.unwrap_or_default(),
            None => Vec::new(),
        };
        let outcome = state
            .dry_runs
            .run(
                &builds,
                &request.model,
                &planned.report.args,
                &planned.report.plan.devices,
            )
            .await;
        if let Some(store) = &state.store {
            let frame = live_frame(state.as_ref(), &request.rig.head);
            let models = record::device_models(frame.as_ref().map(|f| &f.sample.gpus));
            let records = record::from_dry_run(
                &outcome,
                &planned.report.plan.devices,
                &planned.loaded.shape.architecture,
                &models,
                &request.model,
                rigdeck_core::now_ms(),
            );
            for (key, observation) in records {
                if let Err(e) = store.record_plan_observation(&key, &observation).await {
                    tracing::warn!("could not keep the dry run's figures: {e}");
                }
            }
        }
        Ok(serde_json::json!(*outcome))
    }
    .await;
    match result {
        Ok(json) => Json(json).into_response(),
        Err(e) => e.into_response(),
    }
}

pub(super) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("request body is not valid: {e}"),
        )
    })
}

/// A model planned on a rig: what every planning route starts from.
struct Planned {
    loaded: LoadedModel,
    /// HTTP requests the headers took (a model on a web server).
    requests: Option<u64>,
    report: PlanReport,
    /// This rig's records that corrected the plan, per device.
    calibration: Vec<DeviceCalibration>,
    /// The other boxes lending devices, with their links.
    boxes: Vec<RemoteBox>,
}

async fn planned(
    state: &AppState,
    model_path: &str,
    rig: &RigChoice,
    options: &PlacementOptions,
    margins: &Margins,
    auto: bool,
) -> Result<Planned, ApiError> {
    // Checked first: a rig with no reading yet, or a box that cannot be, answers at once,
    // before the model is read.
    let head = devices_for(state, &rig.head, margins)?;
    combined(head, &rig.also, margins)?;
    let (loaded, requests) = load(model_path).await?;
    let (devices, calibration) =
        planning_devices(state, &rig.head, margins, &loaded.shape.architecture).await?;
    let rig = combined(devices, &rig.also, margins)?;
    let report = report_across(
        &loaded.shape,
        model_path,
        &rig.devices,
        &rig.boxes,
        options,
        auto,
    )
    .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_placement", e.to_string()))?;
    Ok(Planned {
        loaded,
        requests,
        report,
        calibration,
        boxes: rig.boxes,
    })
}

/// The head's devices with the other boxes' lent ones; a bad box is the client's mistake.
fn combined(
    head: Vec<DeviceSpec>,
    also: &[AlsoBox],
    margins: &Margins,
) -> Result<rigdeck_core::placement::rig::CombinedRig, ApiError> {
    combine(head, also, margins)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_rig", e.to_string()))
}

/// The telemetry frame of the live rig (none for a hypothetical one, whose GPUs are not these).
fn live_frame(state: &AppState, rig: &str) -> Option<Arc<rigdeck_core::events::TelemetryFrame>> {
    (rig == "live").then(|| state.telemetry.latest()).flatten()
}

/// What this rig's records say: per (architecture, backend, device model) the last check of the
/// estimate and the correction later plans use.
pub async fn calibrations(State(state): State<Arc<AppState>>) -> Response {
    let Some(store) = &state.store else {
        return Json(serde_json::json!([])).into_response();
    };
    match store.plan_observations().await {
        Ok(records) => Json(serde_json::json!(calibration::calibrate(&records))).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_failed",
            format!("the planner's records cannot be read: {e}"),
        )
        .into_response(),
    }
}

async fn plan_response(
    state: &AppState,
    model_path: &str,
    rig: &RigChoice,
    options: &PlacementOptions,
    margins: &Margins,
    auto: bool,
    parsed: Option<serde_json::Value>,
) -> Result<serde_json::Value, ApiError> {
    let Planned {
        loaded,
        requests,
        report,
        calibration,
        boxes,
    } = planned(state, model_path, rig, options, margins, auto).await?;
    Ok(serde_json::json!({
        "model": loaded.summary,
        "layers": loaded.shape.n_layer,
        "experts": loaded.shape.experts,
        "rig": rig.given,
        "boxes": boxes,
        "remote_requests": requests,
        "report": report,
        "calibration": calibration,
        "parsed": parsed,
    }))
}

/// A local path, or an http(s) URL whose headers are read with Range requests (no download).
pub(super) async fn load(model: &str) -> Result<(LoadedModel, Option<u64>), ApiError> {
    let bad = |e: rigdeck_core::placement::from_gguf::ShapeError| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "bad_model", e.to_string())
    };
    if model.starts_with("http://") || model.starts_with("https://") {
        let (loaded, requests) = load_remote_shape(model).await.map_err(bad)?;
        return Ok((loaded, Some(requests)));
    }
    let path = model.to_owned();
    let loaded = tokio::task::spawn_blocking(move || load_shape(std::path::Path::new(&path)))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "plan_failed",
                e.to_string(),
            )
        })?
        .map_err(bad)?;
    Ok((loaded, None))
}

/// The devices a plan of a model of `architecture` uses on `rig`: the rig with `margins`,
/// corrected by this rig's records for that architecture (which corrections, per device, come
/// back too). The placement editor's plans and the hub's fit both start here, so a model page's
/// verdict and the plan it opens are made on the same devices.
pub(super) async fn planning_devices(
    state: &AppState,
    rig: &str,
    margins: &Margins,
    architecture: &str,
) -> Result<(Vec<DeviceSpec>, Vec<DeviceCalibration>), ApiError> {
    let mut devices = devices_for(state, rig, margins)?;
    let calibration = match &state.store {
        Some(store) => {
            let frame = live_frame(state, rig);
            let gpus = frame.as_ref().map(|f| &f.sample.gpus);
            calibration::correct(store, gpus, architecture, &mut devices).await
        }
        None => Vec::new(),
    };
    Ok((devices, calibration))
}

pub(super) fn devices_for(
    state: &AppState,
    rig: &str,
    margins: &Margins,
) -> Result<Vec<DeviceSpec>, ApiError> {
    if rig == "live" {
        let frame = state.telemetry.latest().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_sample_yet",
                "no telemetry sample yet: retry in a second",
            )
        })?;
        let mut margins = *margins;
        if margins.cpu_bandwidth_bytes_per_s.is_none() {
            margins.cpu_bandwidth_bytes_per_s = state
                .memory_bandwidth
                .for_planner(&state.current_settings());
        }
        return Ok(live_devices(&frame.sample, &margins));
    }
    preset(rig).map(|p| p.devices(margins)).ok_or_else(|| {
        let ids: Vec<String> = presets().into_iter().map(|p| p.id).collect();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "unknown_rig",
            format!("unknown rig '{rig}': use live or one of {}", ids.join(", ")),
        )
    })
}
