//! The listening side of the channel: a TLS listener of its own (off unless asked for), mutual
//! TLS, and HTTP/1 routes under `/fleet/v1` that admit only pinned certificates — except the
//! join, which pins a new one in exchange for a one-time secret.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;
use crate::service::{Fleet, Hello, JoinAnswer, JoinRequest};

/// Connections the channel serves at once.
const MAX_CONNECTIONS: usize = 256;
/// How long a connection may take to finish its TLS handshake, or to send a request's headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Who is calling: the certificate it proved it holds, and where it called from.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub fingerprint: Fingerprint,
    pub remote: SocketAddr,
}

impl IntoResponse for FleetError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({ "code": self.kind.code(), "message": self.message });
        (status, Json(body)).into_response()
    }
}

fn routes(fleet: Arc<Fleet>) -> Router {
    Router::new()
        .route("/fleet/v1/name", get(name))
        .route("/fleet/v1/join", post(join))
        .route("/fleet/v1/hello", get(hello))
        .route(crate::link_probe::PROBE_PATH, get(crate::link_probe::probe))
        .route(
            crate::rpc_leases::LEASES_PATH,
            post(crate::rpc_routes::grant),
        )
        .route(
            "/fleet/v1/rpc/leases/{id}",
            axum::routing::delete(crate::rpc_routes::end),
        )
        .route(
            "/fleet/v1/rpc/leases/{id}/tunnel",
            get(crate::rpc_routes::tunnel),
        )
        .route("/api/v1/{*rest}", any(local_api))
        .route("/v1/{*rest}", any(local_api))
        .with_state(fleet)
}

/// `GET /fleet/v1/name`: who this daemon is (asked before a join, over the pinned certificate).
async fn name(State(fleet): State<Arc<Fleet>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "name": fleet.identity().name,
        "version": fleet.version(),
    }))
}

/// `POST /fleet/v1/join`: a desk with a join code's secret pins itself.
async fn join(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    Json(request): Json<JoinRequest>,
) -> Result<Json<JoinAnswer>, FleetError> {
    fleet.accept_join(caller, request).await.map(Json)
}

/// `GET /fleet/v1/hello`: a pinned peer's first authenticated request.
async fn hello(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Hello>, FleetError> {
    fleet.answer_hello(caller).await.map(Json)
}

/// `ANY /api/v1/…` and `/v1/…`: a pinned peer's call of this daemon's own API or gateway,
/// served as if local, except what [`relay::refusal`](crate::relay::refusal) keeps on this
/// daemon.
async fn local_api(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    mut request: axum::extract::Request,
) -> Response {
    // The API routes the request afresh: this route's own path parameters must not travel, but
    // the connection's upgrade (the event socket's WebSocket handshake) must.
    let upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>();
    request.extensions_mut().clear();
    if let Some(upgrade) = upgrade {
        request.extensions_mut().insert(upgrade);
    }
    match fleet.local_api_for(caller, request.uri().path()).await {
        Ok(api) => match tower::ServiceExt::oneshot(api, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(err) => crate::relay::refusal_response(&err),
    }
}

/// Serves the channel until `stop` turns true.
pub async fn serve(listener: TcpListener, fleet: Arc<Fleet>, mut stop: watch::Receiver<bool>) {
    let config = match crate::verifier::server_config(fleet.identity()) {
        Ok(config) => Arc::new(config),
        Err(err) => {
            tracing::error!("the fleet listener is off: cannot set up TLS: {err}");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let router = routes(fleet.clone());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut open = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = accept_within_cap(&listener, &slots) => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        while open.try_join_next().is_some() {}
        if let Some((stream, remote, slot)) = accepted {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            open.spawn(async move {
                serve_connection(stream, remote, acceptor, router).await;
                drop(slot);
            });
        }
    }
    open.shutdown().await;
    // The API router holds the daemon's state, which holds the fleet: let it go.
    fleet.stop_serving_api();
}

/// The next connection once a slot is free for it (`None` when accepting failed).
async fn accept_within_cap(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    // The semaphore is never closed, so this only waits.
    let slot = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, remote)) => {
            // No Nagle delay: an RPC tunnel's small requests and answers are latency-bound.
            let _ = stream.set_nodelay(true);
            Some((stream, remote, slot))
        }
        Err(err) => {
            tracing::debug!("fleet listener: cannot accept a connection: {err}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            None
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            tracing::debug!("fleet listener: handshake with {remote} failed: {err}");
            return;
        }
        Err(_) => return,
    };
    let Some(certificate) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
        return;
    };
    let caller = Caller {
        fingerprint: Fingerprint::of_der(certificate),
        remote,
    };
    let service = TowerToHyperService::new(router.layer(Extension(caller)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT);
    // With upgrades: the relayed event socket (and tunnels) continue as raw bytes after a 101.
    let connection = http
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades();
    if let Err(err) = connection.await {
        tracing::debug!("fleet listener: connection from {remote} ended: {err}");
    }
}

/// The refusal of a certificate this daemon has not pinned.
pub fn unknown_caller(fingerprint: Fingerprint) -> FleetError {
    FleetError::new(
        FleetErrorKind::UnknownPeer,
        format!("this daemon has not paired with the certificate {fingerprint} (or removed it): pair again"),
    )
}
