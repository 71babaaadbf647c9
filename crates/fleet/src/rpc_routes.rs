//! The channel's routes for llama.cpp RPC leases: a pinned peer takes a lease, ends it, and
//! opens a tunnel to its `rpc-server` (an HTTP upgrade to raw bytes, piped to the loopback port).

use std::sync::Arc;

use axum::extract::{Extension, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::net::TcpStream;

use crate::channel::Caller;
use crate::error::{FleetError, FleetErrorKind};
use crate::rpc_lend::{LeaseGranted, LeaseRequest};
use crate::rpc_tunnel::UPGRADE_PROTOCOL;
use crate::service::Fleet;

/// `POST /fleet/v1/rpc/leases`: starts an `rpc-server` for the caller's devices.
pub(crate) async fn grant(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    Json(request): Json<LeaseRequest>,
) -> Result<(StatusCode, Json<LeaseGranted>), FleetError> {
    let granted = fleet.grant_rpc_lease(caller, request).await?;
    Ok((StatusCode::CREATED, Json(granted)))
}

/// `DELETE /fleet/v1/rpc/leases/{id}`: stops the caller's lease.
pub(crate) async fn end(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, FleetError> {
    fleet.end_rpc_lease(caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /fleet/v1/rpc/leases/{id}/tunnel` with `Upgrade: rigdeck-rpc`: 101, then the
/// connection's bytes piped both ways to the lease's `rpc-server`.
pub(crate) async fn tunnel(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    mut request: Request,
) -> Response {
    let asked = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(UPGRADE_PROTOCOL));
    if !asked {
        return FleetError::new(
            FleetErrorKind::BadInput,
            format!("a tunnel is asked for with `Connection: upgrade` and `Upgrade: {UPGRADE_PROTOCOL}`"),
        )
        .into_response();
    }
    let (address, in_use) = match fleet.open_rpc_tunnel(caller, &id).await {
        Ok(opened) => opened,
        Err(err) => return err.into_response(),
    };
    // Connected before the 101, so a dead rpc-server is an error the head can read.
    let rpc = match TcpStream::connect(address).await {
        Ok(rpc) => rpc,
        Err(err) => {
            return FleetError::new(
                FleetErrorKind::Unavailable,
                format!("the lease's rpc-server on {address} does not take connections ({err}): release the lease and take another"),
            )
            .into_response()
        }
    };
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let _in_use = in_use;
        match upgrading.await {
            Ok(upgraded) => {
                // The head lists a tunnel's traffic; this side's count is not kept.
                let traffic = Arc::new(crate::rpc_tunnel::Traffic::default());
                if let Err(err) = crate::rpc_pipe::pipe(rpc, upgraded, traffic).await {
                    tracing::debug!("rpc tunnel to {address} ended: {err}");
                }
            }
            Err(err) => tracing::debug!("rpc tunnel to {address}: the upgrade failed: {err}"),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE_PROTOCOL));
    response
}
