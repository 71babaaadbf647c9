//! Gangs: a multi-node profile served by engines on several boxes, started and stopped as one.
//! The followers start first (on their rigs, through the fleet channel), each waited for; then
//! the head here, waited for until its followers have joined and it is ready (the profile's
//! join timeout), then asked for a real completion. While it runs, every member is watched: any
//! member's end, or its rig unreachable, stops them all, and the profile's restart setting says
//! whether the gang starts again (once every rig answers again). A start that never comes up
//! (a follower that never joins) stops everything, naming what it waited for.
//!
//! - [`member`]: the kinds of member and what the head does with each.
//! - [`preflight`]: what each box checks before a start (engine version, model, interface).
//! - [`model_copies`]: the model offered as a download to a follower's rig that lacks it.
//! - [`lent`]: a llama.cpp gang's preflight: devices lent over RPC, the measured link, the plan.
//! - [`left`]: what a gang holds on every rig, recorded so a daemon that crashed stops it and
//!   starts it again.
//!
//! A llama.cpp profile with `lenders` is a gang too: its members are the head's llama-server and
//! one RPC lease per lending rig; the leases are taken first, then the head starts with `--rpc`
//! to their endpoints, and a lender's `rpc-server` ending (or its rig unreachable) stops it all.

pub mod left;
pub mod lent;
pub mod member;
pub mod model_copies;
pub mod preflight;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rigdeck_core::downloads::Downloads;
use rigdeck_core::engines::registry::EngineBuild;
use rigdeck_core::engines::EngineKind;
use rigdeck_core::launch::{Instances, LaunchProfile};
use rigdeck_core::profiles::multi_node::{self, MultiNode, Seat};
use rigdeck_core::store::Store;
use rigdeck_fleet::Fleet;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use left::LeftOnRigs;
use lent::{LentPlacement, LentPlanning};
use member::{Crew, Member, MemberKind};
use model_copies::Survey;
use preflight::CheckRequest;

/// How long each follower may take from its start until it runs.
pub const MEMBER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Why a gang restarts at this daemon's start.
const LEFT_BY_THE_LAST_DAEMON: &str = "this daemon ended while the gang ran (its tunnels and connections to the gang's members went with it): what was left on every rig was stopped, and the gang starts again";
/// How long a stop waits for the gang's members to end.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// Where a gang is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GangPhase {
    Starting,
    Ready,
    /// A member ended; the gang was stopped and starts again (after a backoff, once every
    /// rig answers).
    Restarting,
    Stopping,
    Stopped,
    /// It did not come up, or ended and is not restarted: `message` says why.
    Failed,
}

/// A gang as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GangStatus {
    pub name: String,
    pub phase: GangPhase,
    /// Rank order; the head (rank 0) first.
    pub members: Vec<Member>,
    /// Starts after the first one.
    pub restarts: u32,
    /// Why it failed, restarts or waits.
    pub message: Option<String>,
    /// Which interfaces carry its unencrypted traffic.
    pub exposes: String,
    pub since_ms: i64,
}

/// Why a gang cannot be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GangError {
    #[error("gang '{0}' is already running: stop it first (POST /api/v1/instances/{0}/stop)")]
    AlreadyRunning(String),
    #[error("no gang named '{0}' runs: start it with POST /api/v1/profiles/{0}/start")]
    NotRunning(String),
    #[error("the gang '{name}' cannot start: {problems}")]
    Preflight { name: String, problems: String },
    #[error("{0}")]
    Refused(String),
}

/// One gang's start, fixed by the preflight.
#[derive(Debug, Clone)]
pub struct GangPlan {
    pub profile: LaunchProfile,
    pub kind: EngineKind,
    /// vLLM/SGLang across boxes; `None` for a llama.cpp gang of leases.
    pub multi: Option<MultiNode>,
    /// A llama.cpp gang's placement, its `--rpc` servers filled at each start.
    pub lent: Option<LentPlacement>,
    pub version: String,
    /// Rank order, the head first.
    pub members: Vec<Member>,
}

impl GangPlan {
    fn head(&self) -> &Member {
        &self.members[0]
    }

    fn followers(&self) -> &[Member] {
        &self.members[1..]
    }
}

struct Running {
    status: watch::Receiver<GangStatus>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The gangs this daemon heads.
pub struct Gangs {
    crew: Arc<Crew>,
    store: Store,
    /// This rig's downloads: where a gang's model came from, to offer it to a rig lacking it.
    downloads: Option<Downloads>,
    running: Mutex<HashMap<String, Running>>,
    /// Gangs the last daemon left running, to be started again (by `http::gang`): their status
    /// until they start, are stopped, or are given up.
    resuming: Mutex<HashMap<String, GangStatus>>,
}

impl Gangs {
    pub fn new(
        instances: Arc<Instances>,
        store: Store,
        fleet: Option<Arc<Fleet>>,
        downloads: Option<Downloads>,
    ) -> Arc<Self> {
        Arc::new(Self {
            crew: Arc::new(Crew {
                instances,
                fleet,
                leases: Mutex::new(HashMap::new()),
            }),
            store,
            downloads,
            running: Mutex::new(HashMap::new()),
            resuming: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `name` is a gang this daemon started (running or ended).
    pub fn knows(&self, name: &str) -> bool {
        lock(&self.running).contains_key(name) || self.is_resuming(name)
    }

    /// Checks every box, then starts the gang in the background; the status as it starts.
    /// `planning`: the model's shape and this rig's devices, for a profile with lenders.
    pub async fn start(
        &self,
        profile: LaunchProfile,
        build: &EngineBuild,
        planning: Option<LentPlanning>,
    ) -> Result<GangStatus, GangError> {
        let name = profile.name.clone();
        if self.is_active(&name) {
            return Err(GangError::AlreadyRunning(name));
        }
        let (plan, notes) = match planning {
            Some(planning) if !profile.lenders.is_empty() => {
                self.preflight_lent(profile, build, &planning).await?
            }
            _ => (self.preflight(profile, build).await?, Vec::new()),
        };
        let exposes = match &plan.multi {
            Some(multi) => multi_node::exposure(multi),
            None => "nothing beyond the fleet's channel: the RPC traffic is tunnelled inside its pinned TLS, each rpc-server listens on its rig's loopback".to_owned(),
        };
        let status = GangStatus {
            name: name.clone(),
            phase: GangPhase::Starting,
            members: plan.members.clone(),
            restarts: 0,
            message: (!notes.is_empty()).then(|| notes.join("; ")),
            exposes,
            since_ms: rigdeck_core::now_ms(),
        };
        let (status_tx, status_rx) = watch::channel(status.clone());
        let (stop_tx, stop_rx) = watch::channel(false);
        let spawned = {
            let mut running = lock(&self.running);
            if running.get(&name).is_some_and(|r| !r.task.is_finished()) {
                Err(plan)
            } else {
                let task = tokio::spawn(run::run(
                    self.crew.clone(),
                    self.store.clone(),
                    plan,
                    status_tx,
                    stop_rx,
                ));
                let running_gang = Running {
                    status: status_rx,
                    stop: stop_tx,
                    task,
                };
                running.insert(name.clone(), running_gang);
                lock(&self.resuming).remove(&name);
                Ok(())
            }
        };
        if let Err(plan) = spawned {
            // Started meanwhile by another call: the leases this one took go back.
            lent::release(&self.crew, &plan.members).await;
            return Err(GangError::AlreadyRunning(name));
        }
        Ok(status)
    }

    fn is_active(&self, name: &str) -> bool {
        lock(&self.running)
            .get(name)
            .is_some_and(|r| !r.task.is_finished())
    }

    /// Stops every member and waits (bounded) until they have ended; the final status.
    pub async fn stop(&self, name: &str) -> Result<GangStatus, GangError> {
        let resuming = lock(&self.resuming).remove(name);
        if let Some(mut resuming) = resuming {
            left::forget(&self.store, name).await;
            resuming.phase = GangPhase::Stopped;
            resuming.message = None;
            return Ok(resuming);
        }
        let (mut status, task) = {
            let mut running = lock(&self.running);
            let Some(gang) = running.get_mut(name) else {
                return Err(GangError::NotRunning(name.to_owned()));
            };
            let _ = gang.stop.send(true);
            let task = std::mem::replace(&mut gang.task, tokio::spawn(async {}));
            (gang.status.clone(), task)
        };
        if tokio::time::timeout(STOP_WAIT, task).await.is_err() {
            tracing::warn!(
                "gang '{name}' did not stop within {} s",
                STOP_WAIT.as_secs()
            );
        }
        let last = status.borrow_and_update().clone();
        Ok(last)
    }

    /// The gang's status now.
    pub fn status(&self, name: &str) -> Option<GangStatus> {
        let running = lock(&self.running)
            .get(name)
            .map(|r| r.status.borrow().clone());
        running.or_else(|| lock(&self.resuming).get(name).cloned())
    }

    pub fn list(&self) -> Vec<GangStatus> {
        let mut all: Vec<GangStatus> = lock(&self.running)
            .values()
            .map(|r| r.status.borrow().clone())
            .collect();
        all.extend(
            lock(&self.resuming)
                .values()
                .filter(|r| !all.iter().any(|a| a.name == r.name))
                .cloned()
                .collect::<Vec<_>>(),
        );
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The gangs the last daemon recorded and never ended (it crashed, or was killed): each
    /// one's head left here is stopped (its tunnels and followers' connections ended with that
    /// daemon; adopted, it would answer with devices it no longer reaches), and each is listed
    /// as restarting until [`Gangs::clean_up_left`] and a start take it on.
    pub async fn take_over_left(&self) -> Vec<(String, LeftOnRigs)> {
        let found = left::found(&self.store).await;
        for (name, left) in &found {
            let head = Member {
                kind: MemberKind::Local,
                instance: left.head.clone(),
                seat: None,
            };
            if let Err(why) = head.stop(&self.crew).await {
                tracing::warn!("gang '{name}': the head the last daemon left not stopped: {why}");
            }
            let status = GangStatus {
                name: name.clone(),
                phase: GangPhase::Restarting,
                members: Vec::new(),
                restarts: 0,
                message: Some(LEFT_BY_THE_LAST_DAEMON.to_owned()),
                exposes: String::new(),
                since_ms: rigdeck_core::now_ms(),
            };
            lock(&self.resuming).insert(name.clone(), status);
        }
        found
    }

    /// Stops what the gang `name` left on other rigs: its followers, its leases.
    pub async fn clean_up_left(&self, name: &str, left: &LeftOnRigs) {
        left::clean_up_elsewhere(&self.crew, name, left).await;
    }

    /// Whether the gang `name` waits to be started again (not stopped, not started meanwhile).
    pub fn is_resuming(&self, name: &str) -> bool {
        lock(&self.resuming).contains_key(name)
    }

    /// A start of the resuming gang `name` was refused: `why`, and whether it is given up.
    pub async fn resume_refused(&self, name: &str, why: &str, given_up: bool) {
        let message = match given_up {
            false => format!(
                "{LEFT_BY_THE_LAST_DAEMON}; its start was refused, tried again shortly: {why}"
            ),
            true => format!("{LEFT_BY_THE_LAST_DAEMON}; it was not started again: {why}"),
        };
        if given_up {
            left::forget(&self.store, name).await;
        }
        if let Some(status) = lock(&self.resuming).get_mut(name) {
            status.message = Some(message);
            if given_up {
                status.phase = GangPhase::Failed;
            }
            status.since_ms = rigdeck_core::now_ms();
        }
    }

    /// Stops every gang (orderly daemon shutdown).
    pub async fn stop_all(&self) {
        let names: Vec<String> = lock(&self.running).keys().cloned().collect();
        for name in names {
            if let Err(err) = self.stop(&name).await {
                tracing::warn!("{err}");
            }
        }
    }

    /// Asks every box (this one included) whether it can take its part, and fixes the seats.
    async fn preflight(
        &self,
        profile: LaunchProfile,
        build: &EngineBuild,
    ) -> Result<GangPlan, GangError> {
        let name = profile.name.clone();
        let multi = profile.multi_node.clone().ok_or_else(|| {
            GangError::Refused(format!(
                "profile '{name}' does not run across boxes (no multi_node)"
            ))
        })?;
        let mut places = vec![(MemberKind::Local, multi.interface.clone())];
        places.extend(multi.nodes.iter().map(|n| {
            (
                MemberKind::Peer {
                    rig: n.peer.clone(),
                },
                n.interface.clone(),
            )
        }));
        let mut problems = Vec::new();
        let mut addresses = Vec::new();
        let mut lacking = Vec::new();
        for (kind, interface) in &places {
            let request = CheckRequest {
                kind: build.kind,
                version: build.version.clone(),
                model: Some(profile.model.clone()),
                interface: Some(interface.clone()),
            };
            let place = kind.place();
            match kind.check(&self.crew, &self.store, &request).await {
                Ok(answer) => {
                    problems.extend(answer.problems.iter().map(|p| format!("{place} {p}")));
                    addresses.push(answer.address);
                    if let (true, MemberKind::Peer { rig }) = (answer.model_missing, kind) {
                        lacking.push(rig.clone());
                    }
                }
                Err(why) => {
                    problems.push(format!("{place} cannot be asked: {why}"));
                    addresses.push(None);
                }
            }
        }
        if !lacking.is_empty() {
            let survey = self.survey_rigs(&profile.model, &lacking, false).await;
            problems.push(model_copies::offer(&survey, &name));
        }
        let found: Option<Vec<_>> = addresses.into_iter().collect();
        let (Some(addresses), true) = (found, problems.is_empty()) else {
            return Err(GangError::Preflight {
                name,
                problems: problems.join("; "),
            });
        };
        let nodes = u32::try_from(places.len()).unwrap_or(u32::MAX);
        let members = places
            .into_iter()
            .zip(addresses.iter())
            .enumerate()
            .map(|(rank, ((kind, interface), address))| {
                let rank = u32::try_from(rank).unwrap_or(u32::MAX);
                Member {
                    instance: instance_name(&name, rank),
                    seat: Some(Seat {
                        nodes,
                        rank,
                        master_addr: addresses[0],
                        master_port: multi.master_port,
                        interface,
                        address: *address,
                        split: multi.split,
                    }),
                    kind,
                }
            })
            .collect();
        Ok(GangPlan {
            profile,
            kind: build.kind,
            multi: Some(multi),
            lent: None,
            version: build.version.clone(),
            members,
        })
    }

    /// Which of a multi-node profile's followers lack its model, and where the head's download
    /// of it lands on each; with `start`, those downloads are queued there.
    pub async fn model_survey(
        &self,
        profile: &LaunchProfile,
        build: &EngineBuild,
        start: bool,
    ) -> Result<Survey, GangError> {
        let multi = profile.multi_node.as_ref().ok_or_else(|| {
            GangError::Refused(format!(
                "profile '{}' does not run across boxes (no multi_node)",
                profile.name
            ))
        })?;
        let request = CheckRequest {
            kind: build.kind,
            version: build.version.clone(),
            model: Some(profile.model.clone()),
            interface: None,
        };
        let mut lacking = Vec::new();
        for node in &multi.nodes {
            let follower = MemberKind::Peer {
                rig: node.peer.clone(),
            };
            let answer = follower
                .check(&self.crew, &self.store, &request)
                .await
                .map_err(|why| {
                    GangError::Refused(format!("'{}' cannot be asked: {why}", node.peer))
                })?;
            if answer.model_missing {
                lacking.push(node.peer.clone());
            }
        }
        Ok(self.survey_rigs(&profile.model, &lacking, start).await)
    }

    async fn survey_rigs(&self, model: &std::path::Path, rigs: &[String], start: bool) -> Survey {
        model_copies::survey(&self.crew, self.downloads.as_ref(), model, rigs, start).await
    }

    /// A llama.cpp gang: every box checked, the leases taken once to plan with their devices
    /// and measured links; the plan and its notes, or every problem.
    async fn preflight_lent(
        &self,
        profile: LaunchProfile,
        build: &EngineBuild,
        planning: &LentPlanning,
    ) -> Result<(GangPlan, Vec<String>), GangError> {
        let name = profile.name.clone();
        let refused = |problems: Vec<String>| GangError::Preflight {
            name: name.clone(),
            problems: problems.join("; "),
        };
        let rpc_build = crate::http::fleet_rpc::build_identity(build);
        let mut members = vec![Member {
            kind: MemberKind::Local,
            instance: name.clone(),
            seat: None,
        }];
        members.extend(profile.lenders.iter().enumerate().map(|(i, l)| Member {
            kind: MemberKind::Lease {
                rig: l.rig.clone(),
                devices: l.devices.clone(),
                build: rpc_build.clone(),
            },
            instance: format!("{name}.lease{}", i + 1),
            seat: None,
        }));
        let head = CheckRequest {
            kind: build.kind,
            version: build.version.clone(),
            model: Some(profile.model.clone()),
            interface: None,
        };
        let problems = lent::check_boxes(&self.crew, &self.store, &head, &members[1..]).await;
        if !problems.is_empty() {
            return Err(refused(problems));
        }
        let model = profile.model.to_string_lossy().into_owned();
        let (placement, notes) = lent::plan_across(
            &self.crew,
            planning,
            &model,
            &profile.placement,
            &members[1..],
        )
        .await
        .map_err(refused)?;
        let plan = GangPlan {
            profile,
            kind: build.kind,
            multi: None,
            lent: Some(placement),
            version: build.version.clone(),
            members,
        };
        Ok((plan, notes))
    }
}

/// The head runs under the profile's own name (the gateway routes to it); follower `r` as
/// `NAME.rankR` on its rig.
fn instance_name(profile: &str, rank: u32) -> String {
    match rank {
        0 => profile.to_owned(),
        r => format!("{profile}.rank{r}"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
