//! The members of a gang and what the head does with each: start, ask how it is, stop. A
//! member is an engine on this daemon (the head) or on a paired rig (a follower, started through
//! the rig's API over the fleet channel); another kind of member (a lent RPC device's lease)
//! is one more variant of [`MemberKind`]: taken from its rig at the start, released at the stop,
//! and dead when its `rpc-server` ended there or the rig stopped answering.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use rigdeck_core::engines::EngineKind;
use rigdeck_core::launch::instances::LaunchError;
use rigdeck_core::launch::{Instances, LaunchProfile};
use rigdeck_core::profiles::multi_node::Seat;
use rigdeck_core::supervisor::{Phase, ProcessState};
use rigdeck_fleet::rpc_lend::RpcBuild;
use rigdeck_fleet::rpc_tunnel::TakenLease;
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
    /// Devices a paired rig lends over llama.cpp RPC, reached through the fleet's tunnel.
    Lease {
        rig: String,
        devices: Vec<String>,
        /// This rig's llama.cpp build, which the lender must run too.
        #[serde(skip)]
        build: RpcBuild,
    },
}

/// One member of a gang: where it runs, under which instance name, in which seat.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    #[serde(flatten)]
    pub kind: MemberKind,
    pub instance: String,
    /// Its seat in a vLLM/SGLang gang; none in a llama.cpp one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat: Option<Seat>,
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

/// What the gang's members need: this daemon's instances and its fleet, and the RPC leases
/// its lease members hold now (by member instance).
pub struct Crew {
    pub instances: Arc<Instances>,
    pub fleet: Option<Arc<Fleet>>,
    pub leases: Mutex<HashMap<String, TakenLease>>,
}

impl Crew {
    pub fn fleet(&self) -> Result<&Arc<Fleet>, String> {
        self.fleet.as_ref().ok_or_else(|| {
            "the fleet is off on this daemon: a gang needs it to reach its other boxes".to_owned()
        })
    }

    /// The lease member `instance` holds now.
    pub fn lease(&self, instance: &str) -> Option<TakenLease> {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(instance)
            .cloned()
    }
}

impl Member {
    /// Where it runs, for messages: "this rig" or "'mini'".
    pub fn place(&self) -> String {
        self.kind.place()
    }

    /// "rank 1 on 'mini'", "the lease of CPU on 'mini'", "the head on this rig".
    pub fn label(&self) -> String {
        match (&self.seat, &self.kind) {
            (Some(seat), _) => format!("rank {} on {}", seat.rank, self.place()),
            (None, MemberKind::Lease { devices, .. }) => {
                format!("the lease of {} on {}", devices.join(","), self.place())
            }
            (None, _) => format!("the head on {}", self.place()),
        }
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
                head.seat = self.seat.clone();
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
                    seat: self.seat.clone().ok_or("a follower has no seat")?,
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
            MemberKind::Lease {
                rig,
                devices,
                build,
            } => {
                if crew.lease(&self.instance).is_some() {
                    // Held since the preflight planned with it: its rpc-server already runs.
                    return Ok(());
                }
                let taken = crew
                    .fleet()?
                    .take_rpc_lease(rig, devices.clone(), build.clone())
                    .await
                    .map_err(|err| err.message)?;
                crew.leases
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(self.instance.clone(), taken);
                Ok(())
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
            MemberKind::Lease { rig, .. } => {
                let Some(lease) = crew.lease(&self.instance) else {
                    return MemberState::Ended("no lease is held".to_owned());
                };
                let path = format!("/api/v1/gang/leases/{}", lease.lease);
                match call_peer(crew, rig, Method::GET, &path, None, PEER_CALL_TIMEOUT).await {
                    Ok((200, lent)) if lent["running"] == true => MemberState::Ready,
                    Ok((200, _)) => MemberState::Ended("its rpc-server ended there".to_owned()),
                    Ok((404, _)) => MemberState::Ended(
                        "the lease ended there (released, its daemon restarted, or it unpinned this rig)".to_owned(),
                    ),
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
            MemberKind::Lease { .. } => {
                let held = crew
                    .leases
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&self.instance);
                let Some(lease) = held else { return Ok(()) };
                let released = crew
                    .fleet()?
                    .release_rpc_lease(&lease.lease)
                    .await
                    .map_err(|err| err.message)?;
                if released.lender_confirmed {
                    Ok(())
                } else {
                    Err(released.message)
                }
            }
        }
    }
}

impl MemberKind {
    /// Where it runs, for messages: "this rig" or "'mini'".
    pub fn place(&self) -> String {
        match self {
            MemberKind::Local => "this rig".to_owned(),
            MemberKind::Peer { rig } | MemberKind::Lease { rig, .. } => format!("'{rig}'"),
        }
    }

    /// The member's own preflight: on this box, or asked of its rig.
    pub async fn check(
        &self,
        crew: &Crew,
        store: &rigdeck_core::store::Store,
        request: &CheckRequest,
    ) -> Result<CheckAnswer, String> {
        match self {
            MemberKind::Local => Ok(super::preflight::check_here(store, request).await),
            MemberKind::Peer { rig } | MemberKind::Lease { rig, .. } => {
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
pub(super) async fn call_peer(
    crew: &Crew,
    rig: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    within: Duration,
) -> Result<(u16, Value), String> {
    let fleet = crew.fleet()?;
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
