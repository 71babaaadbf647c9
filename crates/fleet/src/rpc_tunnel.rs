//! The head's side of a lease: a loopback listener whose every connection (llama-server's
//! `--rpc 127.0.0.1:P`) is dialled to the lender over the pinned TLS channel, upgraded to raw
//! bytes and piped to the lender's `rpc-server`; the bytes moved are counted. Ending the lease
//! closes the listener and every tunnel.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use http_body_util::Empty;
use hyper::StatusCode;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::dial;
use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;
use crate::rpc_lend::{LeaseGranted, RpcBuild, RpcDevice};
use crate::service::Fleet;

/// The `Upgrade` protocol of a tunnel.
pub const UPGRADE_PROTOCOL: &str = "rigdeck-rpc";

/// The path of a lease's tunnel on the lender.
pub fn tunnel_path(lease: &str) -> String {
    format!("/fleet/v1/rpc/leases/{lease}/tunnel")
}

/// Bytes through a lease's tunnels, both ways.
#[derive(Debug, Default)]
pub struct Traffic {
    /// From the head's llama-server to the lender.
    pub sent: AtomicU64,
    /// From the lender to the head's llama-server.
    pub received: AtomicU64,
    /// Tunnels open now.
    pub open: AtomicUsize,
    /// Tunnels opened since the lease was taken.
    pub opened: AtomicU64,
}

/// A lease as the head lists it.
#[derive(Debug, Clone, Serialize)]
pub struct TakenLease {
    pub lease: String,
    pub peer: String,
    /// What llama-server's `--rpc` takes.
    pub endpoint: String,
    pub build: RpcBuild,
    pub devices: Vec<RpcDevice>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub tunnels_open: usize,
    pub tunnels_opened: u64,
    pub since_ms: i64,
}

struct Taken {
    peer: String,
    endpoint: SocketAddr,
    granted: LeaseGranted,
    traffic: Arc<Traffic>,
    since_ms: i64,
    /// The listener and its tunnels: aborted when the lease ends.
    serving: JoinHandle<()>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// The leases this daemon took.
#[derive(Default)]
pub struct TakenLeases {
    leases: Mutex<BTreeMap<String, Taken>>,
}

/// Where and how to reach the lender: this daemon's fleet (held weakly: a lease does not keep a
/// stopping daemon's fleet alive) and the lender's address and pinned certificate.
#[derive(Clone)]
pub struct LenderLink {
    pub fleet: Weak<Fleet>,
    pub address: String,
    pub pin: Fingerprint,
}

impl TakenLeases {
    /// Opens the loopback listener for a lease the lender granted.
    pub async fn open(
        &self,
        peer: &str,
        link: LenderLink,
        granted: LeaseGranted,
    ) -> Result<TakenLease, FleetError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|err| {
                FleetError::new(
                    FleetErrorKind::Internal,
                    format!("cannot listen on 127.0.0.1 for the lease's tunnel: {err}"),
                )
            })?;
        let endpoint = listener.local_addr().map_err(|err| {
            FleetError::new(
                FleetErrorKind::Internal,
                format!("the tunnel's listener: {err}"),
            )
        })?;
        let traffic = Arc::new(Traffic::default());
        let path = tunnel_path(&granted.lease);
        let serving = tokio::spawn(serve_tunnels(listener, link, path, traffic.clone()));
        let taken = Taken {
            peer: peer.to_owned(),
            endpoint,
            granted,
            traffic,
            since_ms: rigdeck_supervisor::now_ms(),
            serving,
        };
        let listed = taken.listed();
        self.lock().insert(listed.lease.clone(), taken);
        Ok(listed)
    }

    /// Closes the lease's listener and tunnels; the peer's name and the lease, to tell the
    /// lender.
    pub fn close(&self, lease: &str) -> Result<(String, String), FleetError> {
        let taken = self.lock().remove(lease).ok_or_else(|| {
            FleetError::new(
                FleetErrorKind::NotFound,
                format!("this daemon holds no lease '{lease}': `rigdeck fleet lend --list` shows the leases held"),
            )
        })?;
        Ok((taken.peer.clone(), taken.granted.lease.clone()))
    }

    pub fn list(&self) -> Vec<TakenLease> {
        self.lock().values().map(Taken::listed).collect()
    }

    /// Closes every lease (the daemon stops).
    pub fn close_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Taken>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Taken {
    fn listed(&self) -> TakenLease {
        TakenLease {
            lease: self.granted.lease.clone(),
            peer: self.peer.clone(),
            endpoint: self.endpoint.to_string(),
            build: self.granted.build.clone(),
            devices: self.granted.devices.clone(),
            bytes_sent: self.traffic.sent.load(Ordering::Relaxed),
            bytes_received: self.traffic.received.load(Ordering::Relaxed),
            tunnels_open: self.traffic.open.load(Ordering::Relaxed),
            tunnels_opened: self.traffic.opened.load(Ordering::Relaxed),
            since_ms: self.since_ms,
        }
    }
}

/// Accepts connections until aborted; the tunnels end with it (the set aborts them on drop).
async fn serve_tunnels(
    listener: TcpListener,
    link: LenderLink,
    path: String,
    traffic: Arc<Traffic>,
) {
    let mut tunnels = JoinSet::new();
    loop {
        let (local, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::debug!("rpc tunnel listener: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        while tunnels.try_join_next().is_some() {}
        let (link, path, traffic) = (link.clone(), path.clone(), traffic.clone());
        tunnels.spawn(async move {
            traffic.open.fetch_add(1, Ordering::Relaxed);
            traffic.opened.fetch_add(1, Ordering::Relaxed);
            if let Err(err) = tunnel(local, &link, &path, &traffic).await {
                tracing::warn!("rpc tunnel from {from} to {}: {err}", link.address);
            }
            traffic.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// One connection piped to the lender's `rpc-server` through an upgraded channel request.
async fn tunnel(
    local: TcpStream,
    link: &LenderLink,
    path: &str,
    traffic: &Arc<Traffic>,
) -> Result<(), FleetError> {
    let upgraded = upgrade(link, path).await?;
    crate::rpc_pipe::pipe(local, upgraded, traffic.clone())
        .await
        .map_err(|err| dial::broken(&link.address, &err))
}

/// The channel's request for the tunnel, answered with 101 and turned into raw bytes.
pub async fn upgrade(
    link: &LenderLink,
    path: &str,
) -> Result<hyper::upgrade::Upgraded, FleetError> {
    let address = &link.address;
    let fleet = link.fleet.upgrade().ok_or_else(|| {
        FleetError::new(
            FleetErrorKind::Unavailable,
            "this daemon is stopping: no new tunnel",
        )
    })?;
    let mut sender = dial::open::<Empty<Bytes>>(fleet.identity(), address, link.pin).await?;
    drop(fleet);
    let request = hyper::Request::builder()
        .method(hyper::Method::GET)
        .uri(path)
        .header("host", "rigdeck-fleet")
        .header("connection", "upgrade")
        .header("upgrade", UPGRADE_PROTOCOL)
        .body(Empty::new())
        .map_err(|err| FleetError::new(FleetErrorKind::Internal, err.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| dial::broken(address, &err))?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = response.status().as_u16();
        let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
            response.into_body(),
            16 * 1024,
        ))
        .await
        .map(|b| serde_json::from_slice(&b.to_bytes()).unwrap_or_default())
        .unwrap_or_default();
        return Err(dial::peer_error(address, status, &body));
    }
    hyper::upgrade::on(response)
        .await
        .map_err(|err| dial::broken(address, &err))
}
