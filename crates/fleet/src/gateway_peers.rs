//! The desk's gateway over its rigs: each live rig's `/v1/models` read over the pinned channel,
//! a request for a rig's model sent to that rig's own `/v1` (its gateway starts, evicts and
//! admits the model as for its own clients) and the answer streamed back as it comes; a rig
//! that cannot be reached is named, with the way it fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, Response};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rigdeck_gateway::elsewhere::{BodyError, BodyStream, Elsewhere, RemoteAnswer, RigModel};
use rigdeck_gateway::{ErrorKind, GatewayError, Route};
use serde_json::Value;

use crate::dial;
use crate::error::{FleetError, FleetErrorKind};
use crate::peers::{Peer, Role};
use crate::relay::REFUSAL_HEADER;
use crate::service::{forgotten_by, Fleet};

/// How long a rig may take to list its models.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest model list read from a rig.
const LIST_MAX_BYTES: usize = 1 << 20;
/// How long connecting to a rig may take, the TLS handshake included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a rig may take to begin its answer: a whole (not streamed) answer begins once the
/// rig has loaded the model on request, as long as the rig's own gateway lets a load take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a streaming answer's rig is looked up in the desk's watch while no chunk comes (a
/// rig that froze or dropped off the network sends nothing, and no error either).
const RIG_CHECK: Duration = Duration::from_millis(500);

/// What the desk last learnt of one rig's models.
#[derive(Default)]
struct Seen {
    models: Vec<String>,
    /// Why the last attempt to list them failed (`None`: it worked).
    failed: Option<String>,
}

/// The paired rigs' gateways, as the desk's gateway reaches them.
pub struct RigGateways {
    fleet: Weak<Fleet>,
    seen: Mutex<HashMap<String, Seen>>,
}

impl RigGateways {
    pub fn new(fleet: &Arc<Fleet>) -> Arc<Self> {
        Arc::new(Self {
            fleet: Arc::downgrade(fleet),
            seen: Mutex::new(HashMap::new()),
        })
    }

    fn note(&self, rig: &str, outcome: Result<&[RigModel], String>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = seen.entry(rig.to_owned()).or_default();
        match outcome {
            Ok(models) => {
                entry.models = models.iter().map(|m| m.name.clone()).collect();
                entry.failed = None;
            }
            Err(why) => entry.failed = Some(why),
        }
    }

    /// One rig's models, noted (or why they could not be read).
    async fn list(&self, fleet: &Fleet, rig: &str) -> Vec<RigModel> {
        match list_models(fleet, rig).await {
            Ok(models) => {
                self.note(rig, Ok(&models));
                models
            }
            Err(err) => {
                self.note(rig, Err(err.message));
                Vec::new()
            }
        }
    }
}

impl Elsewhere for RigGateways {
    fn models(&self) -> BoxFuture<'_, Vec<RigModel>> {
        Box::pin(async move {
            let Some(fleet) = self.fleet.upgrade() else {
                return Vec::new();
            };
            let live: Vec<String> = fleet
                .rig_views()
                .into_iter()
                .filter(|view| view.live)
                .map(|view| view.name)
                .collect();
            let lists = live.iter().map(|rig| self.list(&fleet, rig));
            futures_util::future::join_all(lists)
                .await
                .into_iter()
                .flatten()
                .collect()
        })
    }

    fn lost(&self, model: &str) -> Option<GatewayError> {
        let fleet = self.fleet.upgrade()?;
        let views = fleet.rig_views();
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.iter().find_map(|(rig, seen)| {
            let served = seen
                .models
                .iter()
                .any(|name| name == model || format!("{rig}/{name}") == model);
            let view = views.iter().find(|view| &view.name == rig);
            let why = match view {
                Some(view) if !view.live => view.why.clone(),
                _ => seen
                    .failed
                    .as_ref()
                    .map(|why| format!("the desk cannot reach the rig: {why}")),
            };
            let why = why.filter(|_| served)?;
            Some(GatewayError::new(
                ErrorKind::Unavailable,
                format!(
                    "'{model}' is served by the rig '{rig}', which cannot be reached now: {why}"
                ),
            ))
        })
    }

    fn open<'a>(
        &'a self,
        model: &'a RigModel,
        route: Route,
        body: Bytes,
    ) -> BoxFuture<'a, Result<RemoteAnswer, GatewayError>> {
        Box::pin(async move {
            let unreachable = |err: FleetError| {
                GatewayError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the rig '{}' serving '{}' cannot be reached: {}",
                        model.rig, model.name, err.message
                    ),
                )
            };
            let fleet = self.fleet.upgrade().ok_or_else(|| {
                GatewayError::new(ErrorKind::Unavailable, "the daemon is stopping")
            })?;
            let peer = rig_named(&fleet, &model.rig).await.map_err(unreachable)?;
            let request = Request::builder()
                .method(Method::POST)
                .uri(route.path())
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .map_err(|err| unreachable(internal(&err)))?;
            let answer = send(&fleet, &peer, request, ANSWER_TIMEOUT)
                .await
                .map_err(|err| {
                    self.note(&model.rig, Err(err.message.clone()));
                    unreachable(err)
                })?;
            Ok(remote_answer(&self.fleet, &model.rig, answer))
        })
    }
}

/// A rig's answer with its body's breaks said as the rig's, and cut with an error once the
/// desk's watch finds the rig unreachable.
fn remote_answer(fleet: &Weak<Fleet>, rig: &str, answer: Response<Incoming>) -> RemoteAnswer {
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let named = rig.to_owned();
    let body = answer.into_body().into_data_stream().map(move |chunk| {
        chunk.map_err(|err| -> BodyError {
            format!("the connection to the rig '{named}' broke: {err}").into()
        })
    });
    RemoteAnswer {
        status,
        content_type,
        body: watched(body.boxed(), fleet.clone(), rig.to_owned()),
    }
}

/// `body` until it ends, or until the rig turns unreachable after the answer began. A stream
/// ends with its final event: a client that closes once it has that event then finds the
/// request recorded as done, not as cancelled while the rig's end of the body was on its way.
fn watched(body: BodyStream, fleet: Weak<Fleet>, rig: String) -> BodyStream {
    let began_ms = rigdeck_supervisor::now_ms();
    let state = Some((body, fleet, rig));
    futures_util::stream::unfold(state, move |state| async move {
        let (mut body, fleet, rig) = state?;
        loop {
            tokio::select! {
                chunk = body.next() => {
                    let chunk = chunk?;
                    let last = chunk.as_ref().is_ok_and(|c| ends_stream(c));
                    let next = (!last).then_some((body, fleet, rig));
                    return Some((chunk, next));
                }
                () = tokio::time::sleep(RIG_CHECK) => {
                    if let Some(why) = gone_since(&fleet, &rig, began_ms) {
                        let err: BodyError =
                            format!("the rig '{rig}' stopped answering: {why}").into();
                        return Some((Err(err), None));
                    }
                }
            }
        }
    })
    .boxed()
}

/// Whether `chunk` ends with a stream's final event (OpenAI's `[DONE]`, Anthropic's
/// `message_stop`).
fn ends_stream(chunk: &[u8]) -> bool {
    let text = String::from_utf8_lossy(chunk);
    let Some(last) = text.trim_end().rsplit("\n\n").next() else {
        return false;
    };
    last.trim_end().ends_with("data: [DONE]") || last.starts_with("event: message_stop")
}

/// Why the watch finds `rig` unreachable, when it turned so at or after `began_ms`.
fn gone_since(fleet: &Weak<Fleet>, rig: &str, began_ms: i64) -> Option<String> {
    let views = fleet.upgrade()?.rig_views();
    let view = views.iter().find(|view| view.name == rig)?;
    (!view.live && view.since_ms >= began_ms).then(|| view.why.clone().unwrap_or_default())
}

/// The paired rig named `name` (a desk of this daemon is not one to send requests to).
async fn rig_named(fleet: &Fleet, name: &str) -> Result<Peer, FleetError> {
    let peer = fleet.peer(name).await?;
    if peer.role != Role::Rig {
        return Err(FleetError::new(
            FleetErrorKind::Forbidden,
            format!("'{name}' is a desk of this daemon, not a rig it joined"),
        ));
    }
    Ok(peer)
}

/// The models the rig named `rig` lists on its own gateway (aliases included).
async fn list_models(fleet: &Fleet, rig: &str) -> Result<Vec<RigModel>, FleetError> {
    let peer = rig_named(fleet, rig).await?;
    let request = Request::get("/v1/models")
        .body(Body::empty())
        .map_err(|err| internal(&err))?;
    let reading = async {
        let answer = send(fleet, &peer, request, LIST_TIMEOUT).await?;
        let status = answer.status();
        let limited = http_body_util::Limited::new(answer.into_body(), LIST_MAX_BYTES);
        let bytes = limited
            .collect()
            .await
            .map_err(|err| dial::broken(rig, &err))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(FleetError::new(
                FleetErrorKind::Unavailable,
                format!("the rig's gateway answered HTTP {status} to /v1/models: {value}"),
            ));
        }
        Ok(value)
    };
    let value = tokio::time::timeout(LIST_TIMEOUT, reading)
        .await
        .map_err(|_| {
            FleetError::new(
                FleetErrorKind::TimedOut,
                format!(
                    "the rig did not list its models within {} s",
                    LIST_TIMEOUT.as_secs()
                ),
            )
        })??;
    Ok(rig_models(rig, &value))
}

/// The entries of a `/v1/models` answer.
fn rig_models(rig: &str, list: &Value) -> Vec<RigModel> {
    let entries = list["data"].as_array().map_or(&[][..], Vec::as_slice);
    entries
        .iter()
        .filter_map(|entry| {
            Some(RigModel {
                rig: rig.to_owned(),
                name: entry["id"].as_str()?.to_owned(),
                listing: entry.clone(),
            })
        })
        .collect()
}

/// Sends `request` to `peer` over the channel; the answer's head. Connecting has
/// [`CONNECT_TIMEOUT`], the answer's head `within`.
async fn send(
    fleet: &Fleet,
    peer: &Peer,
    mut request: Request<Body>,
    within: Duration,
) -> Result<Response<Incoming>, FleetError> {
    let address = peer.address.as_deref().ok_or_else(|| {
        FleetError::new(
            FleetErrorKind::Unavailable,
            format!(
                "the rig '{}' has no fleet listener this desk could call",
                peer.name
            ),
        )
    })?;
    let connecting = dial::open::<Body>(fleet.identity(), address, peer.fingerprint);
    let mut sender = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| {
            FleetError::new(
                FleetErrorKind::TimedOut,
                format!(
                    "the desk could not connect to {address} within {} s: the host is down, or a firewall drops the packets",
                    CONNECT_TIMEOUT.as_secs()
                ),
            )
        })??;
    request.headers_mut().insert(
        header::HOST,
        header::HeaderValue::from_static("rigdeck-fleet"),
    );
    let answer = tokio::time::timeout(within, sender.send_request(request))
        .await
        .map_err(|_| {
            FleetError::new(
                FleetErrorKind::TimedOut,
                format!(
                    "{address} took the request but did not answer within {} s: the rig's daemon is busy or stuck",
                    within.as_secs()
                ),
            )
        })?
        .map_err(|err| dial::broken(address, &err))?;
    if answer.headers().contains_key(REFUSAL_HEADER) {
        let status = answer.status().as_u16();
        let limited = http_body_util::Limited::new(answer.into_body(), LIST_MAX_BYTES);
        let value = match limited.collect().await {
            Ok(bytes) => serde_json::from_slice(&bytes.to_bytes()).unwrap_or_default(),
            Err(_) => Value::Null,
        };
        return Err(forgotten_by(
            peer,
            dial::peer_error(address, status, &value),
        ));
    }
    Ok(answer)
}

fn internal(err: &dyn std::fmt::Display) -> FleetError {
    FleetError::new(FleetErrorKind::Internal, err.to_string())
}

#[cfg(test)]
mod tests {
    use super::rig_models;

    #[test]
    fn a_streams_final_event_is_found_at_a_chunks_end_only() {
        use super::ends_stream;
        assert!(ends_stream(b"data: {\"a\":1}\n\ndata: [DONE]\n\n"));
        assert!(ends_stream(
            b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        ));
        assert!(!ends_stream(b"data: {\"text\":\"[DONE]\"}\n\n"));
        assert!(!ends_stream(b"data: [DONE]\n\ndata: {}\n\n"));
    }

    #[test]
    fn a_rig_list_gives_each_entry_by_its_id() {
        let list =
            serde_json::json!({"data": [{"id": "a"}, {"id": "b", "alias_of": "a"}, {"x": 1}]});
        let names: Vec<String> = rig_models("tower", &list)
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(rig_models("tower", &serde_json::Value::Null).is_empty());
    }
}
