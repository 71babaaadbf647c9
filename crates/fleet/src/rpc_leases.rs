//! llama.cpp RPC leases as the fleet keeps them: the devices this daemon lends to its paired
//! peers (`rpc_lend`), the leases it took from them with their tunnels (`rpc_tunnel`), and the
//! [`Fleet`] methods the channel's routes and the daemon's API call.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::Method;
use serde::Serialize;

use crate::channel::{self, Caller};
use crate::dial::{self, Call};
use crate::error::{FleetError, FleetErrorKind};
use crate::peers::{self, Peer};
use crate::rpc_lend::{
    LeaseGranted, LeaseRequest, LendingBuildSource, Lent, LentLease, RpcBuild, TunnelInUse,
};
use crate::rpc_tunnel::{LenderLink, TakenLease, TakenLeases};
use crate::service::Fleet;

/// The path of the lender's leases.
pub const LEASES_PATH: &str = "/fleet/v1/rpc/leases";
/// How long a lease may take: connecting, and the lender starting its `rpc-server`.
const GRANT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long telling the lender of a release may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// A lent lease without a tunnel this long ends (its head went away without releasing it).
pub const IDLE_LEASE_LIMIT: Duration = Duration::from_secs(300);
/// How often idle leases are looked for.
const IDLE_CHECK_EVERY: Duration = Duration::from_secs(15);

/// One daemon's leases, both ways.
#[derive(Default)]
pub struct RpcLeases {
    lent: Lent,
    taken: TakenLeases,
    lending: Mutex<Option<LendingBuildSource>>,
}

/// What `GET /api/v1/fleet/rpc` lists.
#[derive(Debug, Serialize)]
pub struct RpcLeaseList {
    /// Leases this daemon took from its peers, with their tunnels' traffic.
    pub taken: Vec<TakenLease>,
    /// Leases this daemon lends to its peers.
    pub lent: Vec<LentLease>,
}

/// A released lease.
#[derive(Debug, Serialize)]
pub struct Released {
    pub lease: String,
    pub peer: String,
    /// Whether the lender confirmed it stopped its `rpc-server` (it stops it anyway when it
    /// unpins this daemon or restarts).
    pub lender_confirmed: bool,
    pub message: String,
}

/// Ends lent leases left idle by their heads while the daemon runs, and every lease both ways
/// when it stops: nothing it started for a peer outlives it.
pub(crate) async fn end_at_stop(fleet: Arc<Fleet>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut every = tokio::time::interval(IDLE_CHECK_EVERY);
    loop {
        tokio::select! {
            _ = every.tick() => {
                fleet.rpc.lent.end_idle(IDLE_LEASE_LIMIT);
            }
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    fleet.rpc.lent.end_all();
    fleet.rpc.taken.close_all();
}

impl Fleet {
    /// Lets this daemon lend devices, with the build `source` finds (the daemon's registry).
    pub fn lend_with(&self, source: LendingBuildSource) {
        *self
            .rpc
            .lending
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(source);
    }

    /// A pinned peer's lease request (`POST /fleet/v1/rpc/leases`).
    pub(crate) async fn grant_rpc_lease(
        &self,
        caller: Caller,
        request: LeaseRequest,
    ) -> Result<LeaseGranted, FleetError> {
        self.pinned(caller).await?;
        let source = self
            .rpc
            .lending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                FleetError::new(
                    FleetErrorKind::Unavailable,
                    "this daemon does not lend devices yet: it is starting",
                )
            })?;
        let lending = source()
            .await
            .map_err(|why| FleetError::new(FleetErrorKind::Unavailable, why))?;
        self.rpc
            .lent
            .grant(caller.fingerprint, &request, &lending)
            .await
    }

    /// Where the caller's lease `id` listens, for a tunnel (`GET …/{id}/tunnel`).
    pub(crate) async fn open_rpc_tunnel(
        &self,
        caller: Caller,
        id: &str,
    ) -> Result<(std::net::SocketAddr, TunnelInUse), FleetError> {
        self.pinned(caller).await?;
        self.rpc.lent.open_tunnel(id, caller.fingerprint)
    }

    /// The caller ends its lease `id` (`DELETE …/{id}`).
    pub(crate) async fn end_rpc_lease(&self, caller: Caller, id: &str) -> Result<(), FleetError> {
        self.pinned(caller).await?;
        self.rpc.lent.end(id, caller.fingerprint)
    }

    /// The peer was unpinned: what it took from this daemon ends.
    pub(crate) fn end_rpc_leases_of(&self, peer: &Peer) {
        let ended = self.rpc.lent.end_all_of(peer.fingerprint);
        if ended > 0 {
            tracing::info!(
                "fleet: ended {ended} RPC lease(s) of the removed peer '{}'",
                peer.name
            );
        }
    }

    pub(crate) async fn pinned(&self, caller: Caller) -> Result<Peer, FleetError> {
        peers::by_fingerprint(self.pool(), caller.fingerprint)
            .await?
            .ok_or_else(|| channel::unknown_caller(caller.fingerprint))
    }

    /// Takes a lease of `devices` from the peer `name` for this daemon's llama.cpp `build`, and
    /// opens its loopback endpoint for llama-server's `--rpc`.
    pub async fn take_rpc_lease(
        self: &Arc<Self>,
        name: &str,
        devices: Vec<String>,
        build: RpcBuild,
    ) -> Result<TakenLease, FleetError> {
        let peer = self.peer(name).await?;
        let address = peer.address.clone().ok_or_else(|| {
            FleetError::new(
                FleetErrorKind::Unavailable,
                format!(
                    "the {} '{}' has no fleet listener this side could call (it joined without --fleet-bind): \
                     take the lease from the side that has one",
                    peer.role.as_str(),
                    peer.name
                ),
            )
        })?;
        let request = LeaseRequest { devices, build };
        let answer = dial::call(
            self.identity(),
            Call {
                address: &address,
                pin: peer.fingerprint,
                method: Method::POST,
                path: LEASES_PATH,
                body: Some(serde_json::to_value(&request).unwrap_or_default()),
                within: GRANT_TIMEOUT,
            },
        )
        .await
        .map_err(|err| crate::service::forgotten_by(&peer, err))?;
        let granted: LeaseGranted = serde_json::from_value(answer).map_err(|err| {
            FleetError::new(
                FleetErrorKind::Unreachable,
                format!(
                    "the {} '{}' answered the lease oddly: {err}",
                    peer.role.as_str(),
                    peer.name
                ),
            )
        })?;
        let link = LenderLink {
            fleet: Arc::downgrade(self),
            address,
            pin: peer.fingerprint,
        };
        self.rpc.taken.open(&peer.name, link, granted).await
    }

    /// Both ways' leases.
    pub fn rpc_leases(&self) -> RpcLeaseList {
        RpcLeaseList {
            taken: self.rpc.taken.list(),
            lent: self.rpc.lent.list(),
        }
    }

    /// Closes the lease's endpoint and tunnels here, then tells the lender to stop its
    /// `rpc-server`.
    pub async fn release_rpc_lease(&self, lease: &str) -> Result<Released, FleetError> {
        let (name, lease) = self.rpc.taken.close(lease)?;
        let told = self.tell_lender_released(&name, &lease).await;
        let message = match &told {
            Ok(()) => format!("released the lease {lease}: '{name}' stopped its rpc-server"),
            Err(err) => format!(
                "released the lease {lease} here; '{name}' was not told ({err}): it stops the rpc-server when it \
                 restarts or when you remove this daemon there"
            ),
        };
        Ok(Released {
            lease,
            peer: name,
            lender_confirmed: told.is_ok(),
            message,
        })
    }

    /// Tells the lender `name` to end the lease `lease` that an earlier run of this daemon took
    /// (its tunnels ended with that run): its `rpc-server` stops now, not at the idle limit.
    pub async fn end_lease_left(&self, name: &str, lease: &str) -> Result<(), FleetError> {
        self.tell_lender_released(name, lease).await
    }

    async fn tell_lender_released(&self, name: &str, lease: &str) -> Result<(), FleetError> {
        let peer = self.peer(name).await?;
        let address = peer.address.clone().unwrap_or_default();
        dial::call(
            self.identity(),
            Call {
                address: &address,
                pin: peer.fingerprint,
                method: Method::DELETE,
                path: &format!("{LEASES_PATH}/{lease}"),
                body: None,
                within: RELEASE_TIMEOUT,
            },
        )
        .await
        .map(drop)
    }
}
