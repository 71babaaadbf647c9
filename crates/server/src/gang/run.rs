//! One gang's life, as a task: bring every member up in order, watch them, stop them all when
//! one ends, and start again as the profile's restart setting says, once every rig answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rigdeck_core::store::Store;
use rigdeck_core::supervisor::RestartPolicy;
use serde_json::json;
use tokio::sync::watch;

use rigdeck_core::profiles::multi_node::MultiNode;

use super::left;
use super::member::{Crew, Member, MemberKind, MemberState};
use super::preflight::CheckRequest;
use super::{GangPhase, GangPlan, GangStatus, MEMBER_START_TIMEOUT};

/// How often members are asked how they are.
const POLL: Duration = Duration::from_millis(500);
/// How long a rig may not answer before its member counts as dead.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(3);
/// How long a llama.cpp head may take to load its model onto the lent devices.
const LENT_HEAD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the head's first completion may take.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(60);

/// Why bringing the gang up or watching it ended.
enum Halt {
    /// A stop was asked for.
    Stopped,
    /// A member did not come up, or ended: why.
    Failed(String),
}

/// The gang's task: runs until it is stopped, fails at its first start, or has used its
/// restarts.
pub(super) async fn run(
    crew: Arc<Crew>,
    store: Store,
    plan: GangPlan,
    status: watch::Sender<GangStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let policy = plan.profile.restart.policy();
    let mut restarts = 0u32;
    let mut ever_ready = false;
    loop {
        let halt = match bring_up(&crew, &store, &plan, &mut stop).await {
            Ok(()) => {
                ever_ready = true;
                publish(&status, GangPhase::Ready, None);
                watch_members(&crew, &plan, &mut stop).await
            }
            Err(halt) => halt,
        };
        publish(&status, GangPhase::Stopping, None);
        stop_all(&crew, &plan).await;
        let why = match halt {
            Halt::Stopped => {
                left::forget(&store, &plan.profile.name).await;
                publish(&status, GangPhase::Stopped, None);
                return;
            }
            Halt::Failed(why) => why,
        };
        tracing::warn!("gang '{}': {why}", plan.profile.name);
        let Some(backoff) = next_backoff(policy, restarts).filter(|_| ever_ready) else {
            let ending = if ever_ready {
                format!("{why}; every member was stopped and the gang is not restarted (its restart setting)")
            } else {
                format!("{why}; every member was stopped")
            };
            left::forget(&store, &plan.profile.name).await;
            publish(&status, GangPhase::Failed, Some(ending));
            return;
        };
        restarts += 1;
        status.send_modify(|s| s.restarts = restarts);
        publish(
            &status,
            GangPhase::Restarting,
            Some(format!("{why}; every member was stopped, starting again")),
        );
        if sleep_or_stop(backoff, &mut stop).await
            || !wait_for_every_rig(&crew, &store, &plan, &status, &mut stop).await
        {
            left::forget(&store, &plan.profile.name).await;
            publish(&status, GangPhase::Stopped, None);
            return;
        }
        publish(&status, GangPhase::Starting, None);
    }
}

fn publish(status: &watch::Sender<GangStatus>, phase: GangPhase, message: Option<String>) {
    status.send_modify(|s| {
        s.phase = phase;
        if message.is_some() || phase != GangPhase::Stopping {
            s.message = message;
        }
        s.since_ms = rigdeck_core::now_ms();
    });
}

/// The wait before restart number `done + 1`, or `None` when the policy allows no more.
fn next_backoff(policy: RestartPolicy, done: u32) -> Option<Duration> {
    match policy {
        RestartPolicy::Never => None,
        RestartPolicy::OnFailure {
            max_restarts,
            initial_backoff,
            max_backoff,
        } => (done < max_restarts).then(|| {
            initial_backoff
                .saturating_mul(1 << done.min(16))
                .min(max_backoff)
        }),
    }
}

/// Followers in order, each waited for; then the head, waited for until it is ready (its
/// followers joined it), watching the followers meanwhile; then a real completion. What each
/// holds is recorded as it starts, for a daemon that finds it after a crash.
async fn bring_up(
    crew: &Crew,
    store: &Store,
    plan: &GangPlan,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Halt> {
    left::remember(crew, store, plan).await;
    for (at, follower) in plan.followers().iter().enumerate() {
        // One left by an earlier run (its rig was cut off while the gang was stopped); a lease
        // held now is the one the preflight planned with: kept.
        let leftover = match follower.kind {
            MemberKind::Lease { .. } => Ok(()),
            _ => follower.stop(crew).await,
        };
        if let Err(why) = leftover {
            tracing::info!(
                "{}: nothing stopped before the start ({why})",
                follower.label()
            );
        }
        follower
            .start(crew, &plan.profile, (plan.kind, &plan.version))
            .await
            .map_err(|why| Halt::Failed(format!("{} did not start: {why}", follower.label())))?;
        left::remember(crew, store, plan).await;
        let timeout = format!(
            "{} did not run within {} s",
            follower.label(),
            MEMBER_START_TIMEOUT.as_secs()
        );
        let earlier = &plan.followers()[..at];
        wait_until_ready(
            crew,
            follower,
            earlier,
            MEMBER_START_TIMEOUT,
            &timeout,
            stop,
        )
        .await?;
    }
    let head = plan.head();
    let mut profile = plan.profile.clone();
    if let Some(lent) = &plan.lent {
        profile.placement = lent
            .with_endpoints(crew, plan.followers())
            .map_err(Halt::Failed)?;
    }
    head.start(crew, &profile, (plan.kind, &plan.version))
        .await
        .map_err(|why| Halt::Failed(format!("the head did not start: {why}")))?;
    let (join, timeout) = match &plan.multi {
        Some(multi) => (
            Duration::from_secs(multi.join_timeout_s),
            never_joined(plan, multi),
        ),
        None => (
            LENT_HEAD_TIMEOUT,
            format!(
                "the head's llama-server was not ready within {} s with its lent devices",
                LENT_HEAD_TIMEOUT.as_secs()
            ),
        ),
    };
    wait_until_ready(crew, head, plan.followers(), join, &timeout, stop).await?;
    complete_once(crew, plan).await.map_err(Halt::Failed)
}

/// What a head that never got ready waited for.
fn never_joined(plan: &GangPlan, multi: &MultiNode) -> String {
    let waited: Vec<String> = plan
        .followers()
        .iter()
        .filter_map(|f| {
            let seat = f.seat.as_ref()?;
            Some(format!(
                "{} (interface {}, {})",
                f.label(),
                seat.interface,
                seat.address
            ))
        })
        .collect();
    let (addr, port) = plan
        .head()
        .seat
        .as_ref()
        .map_or((None, 0), |s| (Some(s.master_addr), s.master_port));
    format!(
        "the gang was not ready within {} s (join_timeout_s): the head on this rig kept waiting for its followers, and {} never joined it; check that each reaches {}:{} and that no firewall drops that port",
        multi.join_timeout_s,
        waited.join(", "),
        addr.map_or_else(|| "the head".to_owned(), |a| a.to_string()),
        port
    )
}

/// Waits until `member` is ready within `within`, while every one of `watched` stays up.
async fn wait_until_ready(
    crew: &Crew,
    member: &Member,
    watched: &[Member],
    within: Duration,
    timeout: &str,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Halt> {
    let deadline = Instant::now() + within;
    let mut unreachable = HashMap::new();
    loop {
        match member.state(crew).await {
            MemberState::Ready => return Ok(()),
            MemberState::Ended(why) => {
                return Err(Halt::Failed(format!("{} ended: {why}", member.label())))
            }
            MemberState::Starting | MemberState::Unreachable(_) => {}
        }
        check_watched(crew, watched, &mut unreachable).await?;
        if Instant::now() >= deadline {
            return Err(Halt::Failed(timeout.to_owned()));
        }
        if sleep_or_stop(POLL, stop).await {
            return Err(Halt::Stopped);
        }
    }
}

/// Every running member's end, or its rig unreachable past the grace, is the gang's.
async fn watch_members(crew: &Crew, plan: &GangPlan, stop: &mut watch::Receiver<bool>) -> Halt {
    let mut unreachable = HashMap::new();
    loop {
        if let Err(halt) = check_watched(crew, &plan.members, &mut unreachable).await {
            return halt;
        }
        if sleep_or_stop(POLL, stop).await {
            return Halt::Stopped;
        }
    }
}

/// Fails on the first of `members` that ended, or whose rig has not answered for longer than
/// [`UNREACHABLE_GRACE`] (`unreachable`: since when each has not answered).
async fn check_watched(
    crew: &Crew,
    members: &[Member],
    unreachable: &mut HashMap<String, Instant>,
) -> Result<(), Halt> {
    for member in members {
        match member.state(crew).await {
            MemberState::Ended(why) => {
                return Err(Halt::Failed(format!("{} ended: {why}", member.label())))
            }
            MemberState::Unreachable(why) => {
                let since = *unreachable
                    .entry(member.instance.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() >= UNREACHABLE_GRACE {
                    return Err(Halt::Failed(format!(
                        "{} counts as dead: its rig has not answered for {} s ({why})",
                        member.label(),
                        UNREACHABLE_GRACE.as_secs()
                    )));
                }
            }
            MemberState::Ready | MemberState::Starting => {
                unreachable.remove(&member.instance);
            }
        }
    }
    Ok(())
}

/// The head's health is a real completion, not only its health endpoint.
async fn complete_once(crew: &Crew, plan: &GangPlan) -> Result<(), String> {
    let name = &plan.head().instance;
    let Some((_, host, Some(port))) = crew.instances.phase_and_address(name) else {
        return Err("the head's port is not known: restart the gang".to_owned());
    };
    let client = reqwest::Client::builder()
        .timeout(COMPLETION_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let mut request = client
        .post(format!("http://{host}:{port}/v1/completions"))
        .json(&json!({"model": plan.profile.name, "prompt": "Hello", "max_tokens": 1}));
    if let Some(key) = crew.instances.engine_api_key(name) {
        request = request.bearer_auth(key);
    }
    let failed = |why: String| format!("the head is up but a first completion failed: {why}");
    let response = request.send().await.map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if status.is_success() && body["choices"].is_array() {
        return Ok(());
    }
    Err(failed(format!("it answered {status}: {body}")))
}

/// The head first (it must never be left waiting on a dead follower), then the followers;
/// what cannot be stopped (a rig cut off) is logged: its follower loses its head and ends.
async fn stop_all(crew: &Crew, plan: &GangPlan) {
    for member in &plan.members {
        if let Err(why) = member.stop(crew).await {
            tracing::warn!(
                "gang '{}': {} not stopped: {why}",
                plan.profile.name,
                member.label()
            );
        }
    }
}

/// Before a restart: every box answers its preflight again (a rig that disappeared is back).
/// `false` when a stop was asked for meanwhile.
async fn wait_for_every_rig(
    crew: &Crew,
    store: &Store,
    plan: &GangPlan,
    status: &watch::Sender<GangStatus>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        let mut missing = Vec::new();
        for member in &plan.members {
            let lends = matches!(member.kind, MemberKind::Lease { .. });
            let request = CheckRequest {
                kind: plan.kind,
                version: plan.version.clone(),
                model: (!lends).then(|| plan.profile.model.clone()),
                interface: member.seat.as_ref().map(|s| s.interface.clone()),
            };
            match member.kind.check(crew, store, &request).await {
                Ok(answer) if answer.problems.is_empty() => {}
                Ok(answer) => {
                    missing.push(format!("{} {}", member.place(), answer.problems.join("; ")))
                }
                Err(why) => missing.push(format!("{} cannot be reached: {why}", member.place())),
            }
        }
        if missing.is_empty() {
            return true;
        }
        status.send_modify(|s| {
            s.message = Some(format!(
                "waiting to start again until every box is ready: {}",
                missing.join("; ")
            ));
        });
        if sleep_or_stop(Duration::from_secs(1), stop).await {
            return false;
        }
    }
}

/// Sleeps `wait`; `true` when a stop was asked for first (or already).
async fn sleep_or_stop(wait: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => *stop.borrow(),
        changed = stop.changed() => changed.is_err() || *stop.borrow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_and_end_at_the_policys_count() {
        let policy = RestartPolicy::OnFailure {
            max_restarts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(3),
        };
        let waits: Vec<Option<Duration>> = (0..4).map(|done| next_backoff(policy, done)).collect();
        assert_eq!(
            waits,
            [
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(3)),
                None
            ]
        );
        assert_eq!(next_backoff(RestartPolicy::Never, 0), None);
    }
}
