//! The desk's watch over its rigs: each paired rig asked every second, over one kept-alive
//! channel connection, for its latest telemetry frame, its instances and its downloads; whether
//! it answers, why not and since when; its last known state kept (stale) while it does not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dial;
use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;
use crate::peers::{self, Peer, Role};
use crate::relay::REFUSAL_HEADER;
use crate::service::{forgotten_by, Fleet};

/// How often each rig is asked (its telemetry comes at 1 Hz).
pub const POLL_PERIOD: Duration = Duration::from_millis(500);
/// How long one round of questions to a rig may take, connecting included.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the list of rigs is read again (a rig paired or removed).
const LIST_PERIOD: Duration = Duration::from_secs(1);

/// The latest view of each rig, by its certificate.
pub(crate) type RigViews = Mutex<HashMap<Fingerprint, RigView>>;

/// A rig as the desk last saw it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RigView {
    pub name: String,
    pub address: Option<String>,
    /// Whether the rig's daemon answered the latest round.
    pub live: bool,
    /// Why it is not live, from the desk's side.
    pub why: Option<String>,
    /// The failure's kind (`unreachable`, `timed_out`, `unknown_peer`, `rig_error` …).
    pub reason: Option<String>,
    /// Since when it has been live, or not.
    pub since_ms: i64,
    /// The last state it gave (kept while it does not answer).
    pub last: Option<RigState>,
}

/// What a rig answered in one round.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RigState {
    /// When the desk received it.
    pub taken_at_ms: i64,
    /// `/api/v1/telemetry/latest` (`None` before the rig's first sample).
    pub telemetry: Option<Value>,
    /// `/api/v1/instances` (`Null` when the rig has none to give).
    pub instances: Value,
    /// `/api/v1/downloads` (`Null` likewise).
    pub downloads: Value,
}

/// Why a round failed: the rig was not reached, or its daemon answered with an error.
enum Failure {
    Unreached(FleetError),
    Answered(String),
}

impl Failure {
    fn why_and_reason(&self) -> (String, String) {
        match self {
            Failure::Unreached(err) if err.kind == FleetErrorKind::UnknownPeer => (
                format!("the desk cannot reach the rig: not paired (the rig refused this desk's certificate): {}", err.message),
                err.kind.code().to_owned(),
            ),
            Failure::Unreached(err) => (
                format!("the desk cannot reach the rig: {}", err.message),
                err.kind.code().to_owned(),
            ),
            Failure::Answered(what) => (
                format!("the rig's daemon answers but {what}"),
                "rig_error".to_owned(),
            ),
        }
    }
}

impl Fleet {
    /// Every watched rig's view, by name.
    pub fn rig_views(&self) -> Vec<RigView> {
        let mut views: Vec<RigView> = self
            .rigs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        views
    }

    fn record(&self, peer: &Peer, outcome: Result<RigState, Failure>) {
        let now = rigdeck_supervisor::now_ms();
        let mut views = self.rigs.lock().unwrap_or_else(PoisonError::into_inner);
        let view = views.entry(peer.fingerprint).or_insert_with(|| RigView {
            name: peer.name.clone(),
            address: peer.address.clone(),
            live: false,
            why: None,
            reason: None,
            since_ms: now,
            last: None,
        });
        let live = outcome.is_ok();
        if live != view.live || view.why.is_none() && !live {
            view.since_ms = now;
        }
        view.live = live;
        view.name.clone_from(&peer.name);
        view.address.clone_from(&peer.address);
        match outcome {
            Ok(state) => {
                view.why = None;
                view.reason = None;
                view.last = Some(state);
            }
            Err(failure) => {
                let (why, reason) = failure.why_and_reason();
                view.why = Some(why);
                view.reason = Some(reason);
            }
        }
    }

    fn forget(&self, fingerprint: Fingerprint) {
        self.rigs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fingerprint);
    }
}

/// Watches every paired rig (one task each) until `stop`.
pub(crate) async fn watch_rigs(fleet: Arc<Fleet>, mut stop: watch::Receiver<bool>) {
    let mut tasks: HashMap<Fingerprint, JoinHandle<()>> = HashMap::new();
    loop {
        tasks.retain(|_, task| !task.is_finished());
        if let Ok(listed) = peers::list(fleet.pool()).await {
            for peer in listed.into_iter().filter(is_watched) {
                tasks.entry(peer.fingerprint).or_insert_with(|| {
                    tokio::spawn(watch_rig(fleet.clone(), peer.fingerprint, stop.clone()))
                });
            }
        }
        tokio::select! {
            () = tokio::time::sleep(LIST_PERIOD) => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    for task in tasks.into_values() {
        task.abort();
    }
}

fn is_watched(peer: &Peer) -> bool {
    peer.role == Role::Rig && peer.address.is_some()
}

/// Asks one rig every [`POLL_PERIOD`] until it is removed or `stop`.
async fn watch_rig(fleet: Arc<Fleet>, fingerprint: Fingerprint, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(POLL_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connection: Option<SendRequest<Full<Bytes>>> = None;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let peer = match peers::by_fingerprint(fleet.pool(), fingerprint).await {
            Ok(Some(peer)) if is_watched(&peer) => peer,
            Ok(_) => {
                fleet.forget(fingerprint);
                return;
            }
            Err(_) => continue,
        };
        let round = tokio::time::timeout(POLL_TIMEOUT, ask(&fleet, &peer, &mut connection));
        let outcome = match round.await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Unreached(FleetError::new(
                FleetErrorKind::TimedOut,
                format!(
                    "no answer from {} within {} s (timed out): the host is down, or a firewall drops the packets",
                    peer.address.as_deref().unwrap_or("?"),
                    POLL_TIMEOUT.as_secs()
                ),
            ))),
        };
        if outcome.is_err() {
            connection = None;
        }
        fleet.record(&peer, outcome);
    }
}

/// One round: the rig's telemetry, instances and downloads over the kept connection (made
/// again when it closed).
async fn ask(
    fleet: &Fleet,
    peer: &Peer,
    connection: &mut Option<SendRequest<Full<Bytes>>>,
) -> Result<RigState, Failure> {
    let address = peer.address.as_deref().unwrap_or_default();
    let sender = match connection {
        Some(sender) if !sender.is_closed() => sender,
        _ => connection.insert(
            dial::open(fleet.identity(), address, peer.fingerprint)
                .await
                .map_err(Failure::Unreached)?,
        ),
    };
    let telemetry = match get(sender, peer, "/api/v1/telemetry/latest").await? {
        (status, value) if (200..300).contains(&status) => Some(value),
        (_, value) if value["code"] == "no_sample_yet" => None,
        (status, value) => {
            let message = value["message"].as_str().unwrap_or("no explanation");
            return Err(Failure::Answered(format!(
                "its telemetry failed (HTTP {status}): {message}"
            )));
        }
    };
    let instances = success_or_null(get(sender, peer, "/api/v1/instances").await?);
    let downloads = success_or_null(get(sender, peer, "/api/v1/downloads").await?);
    Ok(RigState {
        taken_at_ms: rigdeck_supervisor::now_ms(),
        telemetry,
        instances,
        downloads,
    })
}

fn success_or_null((status, value): (u16, Value)) -> Value {
    if (200..300).contains(&status) {
        value
    } else {
        Value::Null
    }
}

/// `GET path` on the rig: its status and JSON; the channel's own refusal as a failure.
async fn get(
    sender: &mut SendRequest<Full<Bytes>>,
    peer: &Peer,
    path: &str,
) -> Result<(u16, Value), Failure> {
    let address = peer.address.as_deref().unwrap_or_default();
    let broken = |err: &dyn std::fmt::Display| Failure::Unreached(dial::broken(address, err));
    sender.ready().await.map_err(|err| broken(&err))?;
    let request = hyper::Request::get(path)
        .header("host", "rigdeck-fleet")
        .body(Full::new(Bytes::new()))
        .map_err(|err| broken(&err))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| broken(&err))?;
    let status = response.status().as_u16();
    let refused = response.headers().contains_key(REFUSAL_HEADER);
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|err| broken(&err))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if refused {
        let err = dial::peer_error(address, status, &value);
        return Err(Failure::Unreached(forgotten_by(peer, err)));
    }
    Ok((status, value))
}
