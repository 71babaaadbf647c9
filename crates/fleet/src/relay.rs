//! A peer's `/api/v1` over the channel: the desk forwards a request to a rig as it came (method,
//! path, query, body; a WebSocket handshake with its upgrade) and streams the answer back; the
//! rig serves it from its own API for a pinned certificate only, and refuses what stays with each
//! daemon (fleet management, signing in, the hub token).

use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CONNECTION, UPGRADE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::dial;
use crate::error::{FleetError, FleetErrorKind};
use crate::identity::Identity;
use crate::peers::Peer;

/// The prefix of every API path that travels over the channel.
pub const API_PREFIX: &str = "/api/v1";

/// Set on the rig's own refusals, so the desk tells them from answers of the rig's API.
pub const REFUSAL_HEADER: &str = "x-rigdeck-fleet-refusal";

/// The largest refusal body the desk reads.
const REFUSAL_MAX_BYTES: usize = 16 * 1024;

/// Headers of the caller's request that stay on the desk: its credentials, its host, and the
/// connection's own.
const DROPPED_REQUEST_HEADERS: [&str; 7] = [
    "authorization",
    "cookie",
    "host",
    "origin",
    "connection",
    "upgrade",
    "x-rigdeck-token",
];

/// Why a path under `/api/v1` is not served to a peer (`None`: it is).
pub fn refusal(path: &str) -> Option<&'static str> {
    let rest = path.strip_prefix(API_PREFIX)?;
    if rest.contains("//") || rest.contains('%') || rest.split('/').any(|s| s == "." || s == "..") {
        return Some("a path with empty, dot or percent-encoded segments is not relayed: call the rig's API path as written");
    }
    let first = rest.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "fleet" => Some(
            "fleet management stays with each daemon: a peer cannot pair, list or remove peers on another rig (run `rigdeck fleet` on that rig)",
        ),
        "session" => Some("signing in is for the rig's own user, not for its peers"),
        "hub" if rest.trim_start_matches('/').starts_with("hub/token") => Some(
            "the rig's Hugging Face token stays on the rig: set it there (Settings, or `rigdeck hub login`)",
        ),
        _ => None,
    }
}

/// A refusal as the rig answers it: the status of its kind, `{code, message}`, and the header
/// that marks it as the channel's own.
pub fn refusal_response(err: &FleetError) -> Response<Body> {
    let body = serde_json::json!({ "code": err.kind.code(), "message": err.message });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(err.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        HeaderName::from_static(REFUSAL_HEADER),
        HeaderValue::from_static("1"),
    );
    response
}

/// Sends `request` (its path under `/api/v1`) to `peer` and returns the answer's head once it
/// arrives, its body still streaming. Connecting and the answer's head each have `within`.
pub async fn forward(
    identity: &Identity,
    peer: &Peer,
    mut request: Request<Body>,
    within: Duration,
) -> Result<Response<Incoming>, FleetError> {
    let address = peer.address.as_deref().ok_or_else(|| no_address(peer))?;
    let connecting = dial::open::<Body>(identity, address, peer.fingerprint);
    let mut sender = tokio::time::timeout(within, connecting)
        .await
        .map_err(|_| connect_timed_out(peer, address, within))??;
    let headers = request.headers_mut();
    let websocket = is_websocket_upgrade(headers);
    for name in DROPPED_REQUEST_HEADERS {
        headers.remove(name);
    }
    if websocket {
        // The event socket's handshake goes on to the rig; its key and version headers travel.
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    }
    headers.insert(
        axum::http::header::HOST,
        HeaderValue::from_static("rigdeck-fleet"),
    );
    let response = tokio::time::timeout(within, sender.send_request(request))
        .await
        .map_err(|_| answer_timed_out(peer, address, within))?
        .map_err(|err| dial::broken(address, &err))?;
    if response.headers().contains_key(REFUSAL_HEADER) {
        return Err(read_refusal(peer, address, response).await);
    }
    Ok(response)
}

/// A WebSocket handshake: `Connection: upgrade` with `Upgrade: websocket`.
pub fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    let has = |name, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    has(CONNECTION, "upgrade") && has(UPGRADE, "websocket")
}

/// The rig's own refusal, read back as a fleet error said from the desk's side.
async fn read_refusal(peer: &Peer, address: &str, response: Response<Incoming>) -> FleetError {
    let status = response.status().as_u16();
    let limited = http_body_util::Limited::new(response.into_body(), REFUSAL_MAX_BYTES);
    let value = match limited.collect().await {
        Ok(bytes) => serde_json::from_slice(&bytes.to_bytes()).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    crate::service::forgotten_by(peer, dial::peer_error(address, status, &value))
}

fn no_address(peer: &Peer) -> FleetError {
    FleetError::new(
        FleetErrorKind::Unavailable,
        format!(
            "the {} '{}' has no fleet listener this side could call (it joined without --fleet-bind)",
            peer.role.as_str(),
            peer.name
        ),
    )
}

fn connect_timed_out(peer: &Peer, address: &str, within: Duration) -> FleetError {
    FleetError::new(
        FleetErrorKind::TimedOut,
        format!(
            "the desk could not reach the {} '{}' at {address} within {} s (connecting and the TLS handshake): \
             the host is down, or a firewall drops the packets",
            peer.role.as_str(),
            peer.name,
            within.as_secs()
        ),
    )
}

fn answer_timed_out(peer: &Peer, address: &str, within: Duration) -> FleetError {
    FleetError::new(
        FleetErrorKind::TimedOut,
        format!(
            "the {} '{}' at {address} took the request but did not answer within {} s: its daemon is busy or stuck",
            peer.role.as_str(),
            peer.name,
            within.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn fleet_management_the_hub_token_and_odd_paths_are_refused() {
        for path in [
            "/api/v1/fleet",
            "/api/v1/fleet/join",
            "/api/v1/fleet/peers/x",
            "/api/v1/hub/token",
            "/api/v1//fleet/join",
            "/api/v1/%66leet/join",
            "/api/v1/./fleet",
        ] {
            assert!(refusal(path).is_some(), "{path} is relayed");
        }
        for path in [
            "/api/v1/telemetry/latest",
            "/api/v1/profiles",
            "/api/v1/instances/a/logs",
            "/api/v1/hub/search",
            "/api/v1/fleetwide",
            "/api/v1/events",
        ] {
            assert!(refusal(path).is_none(), "{path} is refused");
        }
    }
}
