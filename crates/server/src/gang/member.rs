//! The members of a gang and what the head does with each: start, ask how it is, stop. A
//! member is an engine on this daemon (the head) or on a paired rig (a follower, started through
//! the rig's API over the fleet channel); another kind of member (a lent RPC device's lease)
//! becomes one more variant of [`MemberKind`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use rigdeck_core::engines::EngineKind;
use rigdeck_core::launch::instances::LaunchError;
use rigdeck_core::launch::{Instances, LaunchProfile};
use rigdeck_core::profiles::multi_node::Seat;
use rigdeck_core::supervisor::{Phase, ProcessState};
use rigdeck_fleet::Fleet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::preflight::{CheckAnswer, CheckRequest};

/// How long one call to a rig may take (connecting, then the answer's head).
pub const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a follower's start may take on its rig: it first waits (up to 30 s) for the memory
/// of an engine that just ended there to be released.
pub const FOLLOWER_START_TIMEOUT: Duration = Duration::from_secs(90);
/// The largest answer read from a rig.
const ANSWER_MAX_BYTES: usize = 4 << 20;

/// Where a member runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemberKind {
    /// An engine under this daemon's instances (the head).
    Local,
    /// An engine under a paired rig's instances (a follower), by the rig's fleet name.
    Peer { rig: String },
}

/// One member of a gang: where it runs, under which instance name, in which seat.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    #[serde(flatten)]
    pub kind: MemberKind,
    pub instance: String,
    pub seat: Seat,
}

/// What a member is doing, as the gang's watch sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum MemberState {
    Starting,
    Ready,
    /// Not running: stopped, crashed, or never started; why.
    Ended(String),
    /// Its rig does not answer; why.
    Unreachable(String),
}

/// A follower's start as the head asks a rig for it (`POST /api/v1/gang/followers`): the head's
/// profile (its engine build id is the head's, replaced by the rig's matching build), the
/// engine version every box runs, and the seat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FollowerStart {
    pub instance: String,
    pub profile: LaunchProfile,
    pub kind: EngineKind,
    pub version: String,
    pub seat: Seat,
}

/// What the gang's members need: this daemon's instances and its fleet.
pub struct Crew {
    pub instances: Arc<Instances>,
    pub fleet: Option<Arc<Fleet>>,
}

impl Member {
    /// Where it runs, for messages: "this rig" or "'mini'".
    pub fn place(&self) -> String {
        match &self.kind {
            MemberKind::Local => "this rig".to_owned(),
            MemberKind::Peer { rig } => format!("'{rig}'"),
        }
    }

    /// "rank 1 on 'mini'".
    pub fn label(&self) -> String {
        format!("rank {} on {}", self.seat.rank, self.place())
    }

    /// Starts the member's engine; returns once it is spawned (the head) or has been taken by
    /// its rig (a follower).
    pub async fn start(
        &self,
        crew: &Crew,
        profile: &LaunchProfile,
        engine: (EngineKind, &str),
    ) -> Result<(), String> {
        match &self.kind {
            MemberKind::Local => {
                let mut head = profile.clone();
                head.seat = Some(self.seat.clone());
                crew.instances
                    .start_variant(head, false)
                    .await
                    .map(|_| ())
                    .map_err(|err| err.to_string())
            }
            MemberKind::Peer { rig } => {
                let start = FollowerStart {
                    instance: self.instance.clone(),
                    profile: LaunchProfile {
                        multi_node: None,
                        ..profile.clone()
                    },
                    kind: engine.0,
                    version: engine.1.to_owned(),
                    seat: self.seat.clone(),
                };
                let body = serde_json::to_value(&start).map_err(|e| e.to_string())?;
                let (status, answer) = call_peer(
                    crew,
                    rig,
                    Method::POST,
                    "/api/v1/gang/followers",
                    Some(body),
                    FOLLOWER_START_TIMEOUT,
                )
                .await?;
                match status {
                    200..=299 => Ok(()),
                    _ => Err(answer_message(&answer)),
                }
            }
        }
    }

    /// How the member is now.
    pub async fn state(&self, crew: &Crew) -> MemberState {
        match &self.kind {
            MemberKind::Local => match crew.instances.get(&self.instance) {
                Some(view) => state_of(&view.state),
                None => MemberState::Ended("it is not running".to_owned()),
            },
            MemberKind::Peer { rig } => {
                match call_peer(
                    crew,
                    rig,
                    Method::GET,
                    "/api/v1/instances",
                    None,
                    PEER_CALL_TIMEOUT,
                )
                .await
                {
                    Ok((200, list)) => remote_state(&list, &self.instance),
                    Ok((_, answer)) => MemberState::Unreachable(answer_message(&answer)),
                    Err(why) => MemberState::Unreachable(why),
                }
            }
        }
    }

    /// Stops the member's engine; one that is not running (or a rig that cannot be reached) is
    /// left as it is, with why.
    pub async fn stop(&self, crew: &Crew) -> Result<(), String> {
        match &self.kind {
            MemberKind::Local => match crew.instances.stop(&self.instance).await {
                Ok(_) | Err(LaunchError::NotRunning(_)) => Ok(()),
                Err(err) => Err(err.to_string()),
            },
            MemberKind::Peer { rig } => {
                let path = format!("/api/v1/instances/{}/stop", self.instance);
                match call_peer(crew, rig, Method::POST, &path, None, PEER_CALL_TIMEOUT).await? {
                    (200..=299 | 404, _) => Ok(()),
                    (_, answer) => Err(answer_message(&answer)),
                }
            }
        }
    }
}

impl MemberKind {
    /// The member's own preflight: on this box, or asked of its rig.
    pub async fn check(
        &self,
        crew: &Crew,
        store: &rigdeck_core::store::Store,
        request: &CheckRequest,
    ) -> Result<CheckAnswer, String> {
        match self {
            MemberKind::Local => Ok(super::preflight::check_here(store, request).await),
            MemberKind::Peer { rig } => {
                let body = serde_json::to_value(request).map_err(|e| e.to_string())?;
                match call_peer(crew, rig, Method::POST, "/api/v1/gang/check", Some(body), PEER_CALL_TIMEOUT).await? {
                    (200, answer) => serde_json::from_value(answer).map_err(|e| {
                        format!("its answer to the gang check is not readable ({e}): update Rigdeck there")
                    }),
                    (_, answer) => Err(answer_message(&answer)),
                }
            }
        }
    }
}

/// The instance named `name` in a rig's `GET /instances` answer, as a member state.
fn remote_state(list: &Value, name: &str) -> MemberState {
    let found = list
        .as_array()
        .and_then(|all| all.iter().find(|i| i["name"] == name));
    let Some(instance) = found else {
        return MemberState::Ended("it is not running there".to_owned());
    };
    match instance["phase"].as_str() {
        Some("ready") => MemberState::Ready,
        Some("starting" | "loading") => MemberState::Starting,
        Some("crashed") => MemberState::Ended(format!(
            "it crashed: {}",
            instance["explanation"].as_str().unwrap_or("no explanation")
        )),
        Some(other) => MemberState::Ended(format!("it is {other}")),
        None => MemberState::Ended("its state is not readable".to_owned()),
    }
}

fn state_of(state: &ProcessState) -> MemberState {
    match &state.phase {
        Phase::Ready => MemberState::Ready,
        Phase::Starting | Phase::Loading { .. } => MemberState::Starting,
        Phase::Crashed { explanation, .. } => {
            MemberState::Ended(format!("it crashed: {explanation}"))
        }
        other => MemberState::Ended(format!("it is {}", other.name())),
    }
}

/// An API answer's message (`{code, message}`), or the answer itself.
fn answer_message(answer: &Value) -> String {
    answer["message"]
        .as_str()
        .map_or_else(|| answer.to_string(), str::to_owned)
}

/// `METHOD path` on the rig `rig`'s API over the fleet channel, its answer's head `within`: the
/// status and the JSON answer; `Err` with why when the rig was not reached.
async fn call_peer(
    crew: &Crew,
    rig: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    within: Duration,
) -> Result<(u16, Value), String> {
    let fleet = crew
        .fleet
        .as_ref()
        .ok_or("the fleet is off on this daemon: a gang needs it to reach its other boxes")?;
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| e.to_string())?;
    let answer = fleet
        .relay(rig, request, within)
        .await
        .map_err(|err| err.message)?;
    let status = answer.status().as_u16();
    let bytes = axum::body::to_bytes(Body::new(answer.into_body()), ANSWER_MAX_BYTES)
        .await
        .map_err(|err| format!("its answer broke off: {err}"))?;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rigs_instance_list_gives_the_members_state() {
        let list = json!([
            {"name": "other", "phase": "ready"},
            {"name": "m.rank1", "phase": "crashed", "explanation": "killed by signal 9"}
        ]);
        assert_eq!(
            remote_state(&list, "m.rank1"),
            MemberState::Ended("it crashed: killed by signal 9".to_owned())
        );
        assert!(matches!(remote_state(&list, "gone"), MemberState::Ended(_)));
        assert_eq!(
            remote_state(&json!([{"name": "x", "phase": "loading"}]), "x"),
            MemberState::Starting
        );
    }
}
