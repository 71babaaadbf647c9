//! One desk over many rigs: `ANY /api/v1/fleet/peers/{name}/api/v1/…` relays a call of a rig's
//! API over the pinned channel (the desk's token stays on the desk, the rig admits the desk's
//! certificate) — the rig's event WebSocket included, spliced once both sides switched — and
//! `GET /api/v1/fleet/overview` gives every watched rig and the desk itself.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rigdeck_fleet::overview::{self, Entry};
use rigdeck_fleet::RigState;

use super::error::ApiError;
use super::fleet::{api_fleet, fleet_error};
use super::AppState;

/// How long the desk waits for a rig to take a relayed call (connecting), and then for the
/// answer's head; a streamed body is not bounded.
pub const RELAY_TIMEOUT: Duration = Duration::from_secs(15);

/// Headers of the rig's answer that belong to its own connection.
const HOP_BY_HOP: [header::HeaderName; 3] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// `ANY /fleet/peers/{name}/api/v1/{*rest}`: the rig's answer, streamed.
pub async fn relay(State(state): State<Arc<AppState>>, mut request: Request) -> Response {
    let Some((name, uri)) = split_relayed(request.uri()) else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_path",
            "a relayed call is /api/v1/fleet/peers/NAME/api/v1/PATH",
        )
        .into_response();
    };
    let fleet = match api_fleet(&state) {
        Ok(fleet) => fleet.clone(),
        Err(err) => return err.into_response(),
    };
    *request.uri_mut() = uri;
    let browser_upgrade = rigdeck_fleet::relay::is_websocket_upgrade(request.headers())
        .then(|| hyper::upgrade::on(&mut request));
    match fleet.relay(&name, request, RELAY_TIMEOUT).await {
        Ok(answer) if answer.status() == StatusCode::SWITCHING_PROTOCOLS => match browser_upgrade {
            Some(browser) => spliced(browser, answer),
            None => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "unexpected_upgrade",
                format!("the rig '{name}' switched protocols on a call that asked for none"),
            )
            .into_response(),
        },
        Ok(answer) => {
            let (mut parts, body) = answer.into_parts();
            drop_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(err) => fleet_error(err).into_response(),
    }
}

/// The rig's 101 handed to the browser, and once both sides have switched, the browser's socket
/// and the rig's joined byte for byte (the rig's event socket, carried over the channel) until
/// either side closes.
fn spliced(browser: OnUpgrade, mut answer: hyper::Response<hyper::body::Incoming>) -> Response {
    let rig = hyper::upgrade::on(&mut answer);
    tokio::spawn(async move {
        let (Ok(browser), Ok(rig)) = (browser.await, rig.await) else {
            return;
        };
        let (mut browser, mut rig) = (TokioIo::new(browser), TokioIo::new(rig));
        let _ = tokio::io::copy_bidirectional(&mut browser, &mut rig).await;
    });
    let (parts, _) = answer.into_parts();
    Response::from_parts(parts, Body::empty())
}

/// The peer's name and the rig's own URI (`/api/v1/…?query`) in a relayed call's URI.
fn split_relayed(uri: &Uri) -> Option<(String, Uri)> {
    let path = uri.path();
    let after = &path[path.find("/fleet/peers/")? + "/fleet/peers/".len()..];
    let (name, rest) = after.split_once('/')?;
    let rest = rest.strip_prefix("api/v1")?;
    let target = match uri.query() {
        Some(query) => format!("/api/v1{rest}?{query}"),
        None => format!("/api/v1{rest}"),
    };
    Some((name.to_owned(), target.parse().ok()?))
}

fn drop_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `GET /fleet/overview`: the desk and each rig it watches.
pub async fn overview(
    State(state): State<Arc<AppState>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let fleet = api_fleet(&state)?;
    let now = rigdeck_core::now_ms();
    let mut desk = overview::desk_entry(&fleet.identity().name, &own_state(&state, now), now);
    desk.since_ms = state.started_at_ms;
    let mut entries: Vec<Entry> = vec![desk];
    entries.extend(
        fleet
            .rig_views()
            .iter()
            .map(|view| overview::rig_entry(view, now)),
    );
    let paired = fleet.paired().await.map_err(fleet_error)?;
    Ok(Json(serde_json::json!({
        "now_ms": now,
        "desk": fleet.identity().name,
        "paired": paired.len(),
        "entries": entries,
    })))
}

/// The desk's own telemetry, instances and downloads, as a rig gives them.
fn own_state(state: &AppState, now: i64) -> RigState {
    let value = |v: Option<serde_json::Value>| v.unwrap_or(serde_json::Value::Null);
    RigState {
        taken_at_ms: now,
        telemetry: state
            .telemetry
            .latest()
            .and_then(|frame| serde_json::to_value(&*frame).ok()),
        instances: value(
            state
                .instances
                .as_ref()
                .and_then(|i| serde_json::to_value(i.list()).ok()),
        ),
        downloads: value(
            state
                .downloads
                .as_ref()
                .and_then(|d| serde_json::to_value(d.list()).ok()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::split_relayed;

    #[test]
    fn a_relayed_uri_names_the_peer_and_keeps_the_path_and_query() {
        let uri = "/api/v1/fleet/peers/tower/api/v1/telemetry/history?range=1h"
            .parse()
            .unwrap();
        let (name, target) = split_relayed(&uri).unwrap();
        assert_eq!(name, "tower");
        assert_eq!(target.to_string(), "/api/v1/telemetry/history?range=1h");
        let nested = "/fleet/peers/mini/api/v1/profiles/a%2Fb".parse().unwrap();
        let (name, target) = split_relayed(&nested).unwrap();
        assert_eq!(name, "mini");
        assert_eq!(target.to_string(), "/api/v1/profiles/a%2Fb");
        assert!(split_relayed(&"/api/v1/fleet/peers/x/v1/models".parse().unwrap()).is_none());
    }
}
