//! What a gang has on every rig while it runs (its head here, its followers' engines and the
//! RPC leases it holds there), recorded in the store at each start. A daemon that ended without
//! stopping its gangs (a crash, a kill) finds the record at its next start: what is left of the
//! gang is stopped on every rig (a head left running here lost its tunnels and its followers'
//! connections with the daemon), then the gang starts again as a gang.

use rigdeck_core::store::Store;
use serde::{Deserialize, Serialize};

use super::member::{Crew, Member, MemberKind};
use super::GangPlan;

/// A gang's engines and leases, by rig.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LeftOnRigs {
    /// The head's instance on this rig.
    pub head: String,
    /// The followers' instances on their rigs.
    pub followers: Vec<Follower>,
    /// The RPC leases taken from lending rigs.
    pub leases: Vec<Lease>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Follower {
    pub rig: String,
    pub instance: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub rig: String,
    pub lease: String,
}

impl LeftOnRigs {
    /// What `plan`'s members hold now: every follower, and the leases taken so far.
    fn of(crew: &Crew, plan: &GangPlan) -> Self {
        let mut left = Self {
            head: plan.head().instance.clone(),
            ..Self::default()
        };
        for member in plan.followers() {
            match &member.kind {
                MemberKind::Local => {}
                MemberKind::Peer { rig } => left.followers.push(Follower {
                    rig: rig.clone(),
                    instance: member.instance.clone(),
                }),
                MemberKind::Lease { rig, .. } => {
                    if let Some(taken) = crew.lease(&member.instance) {
                        left.leases.push(Lease {
                            rig: rig.clone(),
                            lease: taken.lease,
                        });
                    }
                }
            }
        }
        left
    }
}

/// Records what the gang of `plan` holds now; a store that cannot take it is logged (the gang
/// runs on, it is only not found again after a crash).
pub async fn remember(crew: &Crew, store: &Store, plan: &GangPlan) {
    let left = LeftOnRigs::of(crew, plan);
    let recorded = match serde_json::to_value(&left) {
        Ok(members) => store
            .record_gang_run(&plan.profile.name, &members)
            .await
            .map_err(|e| e.to_string()),
        Err(err) => Err(err.to_string()),
    };
    if let Err(why) = recorded {
        tracing::warn!(
            "gang '{}': cannot record its members ({why}); after a crash of this daemon they are not stopped",
            plan.profile.name
        );
    }
}

/// The gang `name` ended: nothing of it is to be found again.
pub async fn forget(store: &Store, name: &str) {
    if let Err(err) = store.forget_gang_run(name).await {
        tracing::warn!("gang '{name}': cannot forget its members: {err}");
    }
}

/// The gangs an earlier daemon recorded and never ended; a record this version cannot read
/// stands for a gang with nothing known on other rigs (their leases end on their own).
pub async fn found(store: &Store) -> Vec<(String, LeftOnRigs)> {
    match store.gang_runs().await {
        Ok(runs) => runs
            .into_iter()
            .map(|(name, members)| {
                let left = serde_json::from_value(members).unwrap_or_else(|_| LeftOnRigs {
                    head: name.clone(),
                    ..LeftOnRigs::default()
                });
                (name, left)
            })
            .collect(),
        Err(err) => {
            tracing::warn!("cannot read the gangs an earlier daemon ran: {err}");
            Vec::new()
        }
    }
}

/// Stops the followers and ends the leases `left` names on their rigs; what cannot be
/// reached is logged (a follower without its head ends, a lease without its tunnel ends after
/// the lender's idle limit).
pub async fn clean_up_elsewhere(crew: &Crew, name: &str, left: &LeftOnRigs) {
    for follower in &left.followers {
        let member = Member {
            kind: MemberKind::Peer {
                rig: follower.rig.clone(),
            },
            instance: follower.instance.clone(),
            seat: None,
        };
        if let Err(why) = member.stop(crew).await {
            tracing::warn!(
                "gang '{name}': {} left by the last daemon not stopped: {why}",
                member.label()
            );
        }
    }
    for lease in &left.leases {
        let ended = match crew.fleet() {
            Ok(fleet) => fleet
                .end_lease_left(&lease.rig, &lease.lease)
                .await
                .map_err(|err| err.message),
            Err(why) => Err(why),
        };
        if let Err(why) = ended {
            tracing::warn!(
                "gang '{name}': the lease {} on '{}' left by the last daemon not ended: {why}",
                lease.lease,
                lease.rig
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_from_another_version_still_names_its_head() {
        let read: LeftOnRigs = serde_json::from_value(serde_json::json!({
            "head": "big", "leases": [{"rig": "mini", "lease": "l1"}], "later": 1
        }))
        .unwrap();
        assert_eq!(read.head, "big");
        assert_eq!(read.followers, []);
        assert_eq!(read.leases[0].lease, "l1");
    }
}
