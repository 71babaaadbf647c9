//! The dialling side of the channel: TCP to the address given, TLS with the peer pinned and this
//! daemon's certificate presented, one HTTP/1 request; each way it can fail said plainly.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;
use crate::identity::Identity;
use crate::verifier;

/// A request over the channel: where, to whom (the pinned fingerprint), what.
pub struct Call<'a> {
    pub address: &'a str,
    pub pin: Fingerprint,
    pub method: Method,
    pub path: &'a str,
    pub body: Option<Value>,
    /// For the whole exchange: connection, handshake, request and answer.
    pub within: Duration,
}

/// The peer's JSON answer when it was a success; its `{code, message}` error otherwise.
pub async fn call(identity: &Identity, call: Call<'_>) -> Result<Value, FleetError> {
    let within = call.within;
    let address = call.address.to_owned();
    match tokio::time::timeout(within, exchange(identity, call)).await {
        Ok(answer) => answer,
        Err(_) => Err(FleetError::new(
            FleetErrorKind::Unreachable,
            format!(
                "no answer from {address} within {} s: the host is down, or a firewall drops the packets (try `nc -vz {}` from here)",
                within.as_secs(),
                address.replace(':', " ")
            ),
        )),
    }
}

async fn exchange(identity: &Identity, call: Call<'_>) -> Result<Value, FleetError> {
    let address = call.address;
    let mut sender = open::<Full<Bytes>>(identity, address, call.pin).await?;
    let body = call.body.map(|b| b.to_string()).unwrap_or_default();
    let request = hyper::Request::builder()
        .method(call.method)
        .uri(call.path)
        .header("host", "rigdeck-fleet")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|err| FleetError::new(FleetErrorKind::Internal, err.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| broken(address, &err))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|err| broken(address, &err))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(value);
    }
    Err(peer_error(address, status.as_u16(), &value))
}

/// An HTTP/1 connection to the peer at `address` over TLS, the peer's certificate pinned to
/// `pin` and this daemon's presented.
pub async fn open<B>(
    identity: &Identity,
    address: &str,
    pin: Fingerprint,
) -> Result<hyper::client::conn::http1::SendRequest<B>, FleetError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    check_address(address)?;
    let tcp = TcpStream::connect(address)
        .await
        .map_err(|err| connect_error(address, &err))?;
    let _ = tcp.set_nodelay(true);
    let config = verifier::client_config(identity, pin).map_err(|err| {
        FleetError::new(
            FleetErrorKind::Internal,
            format!("cannot set up TLS with this daemon's certificate: {err}"),
        )
    })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let server_name = rustls::pki_types::ServerName::try_from("rigdeck-fleet")
        .map_err(|err| FleetError::new(FleetErrorKind::Internal, err.to_string()))?;
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|err| handshake_error(address, &err))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|err| broken(address, &err))?;
    // With upgrades: a relayed WebSocket or tunnel turns the connection into raw bytes after a 101.
    tokio::spawn(connection.with_upgrades());
    Ok(sender)
}

/// `HOST:PORT` with a port, or a clear refusal.
pub fn check_address(address: &str) -> Result<(), FleetError> {
    let port = address
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .filter(|port| *port != 0);
    match port {
        Some(_) => Ok(()),
        None => Err(FleetError::new(
            FleetErrorKind::BadInput,
            format!("'{address}' is not an address to dial: give HOST:PORT, e.g. 192.168.1.20:7879 or [fd00::2]:7879"),
        )),
    }
}

fn connect_error(address: &str, err: &std::io::Error) -> FleetError {
    let why = match err.kind() {
        ErrorKind::ConnectionRefused => format!(
            "nothing listens at {address} (connection refused): the peer's daemon is down, runs without --fleet-bind, \
             or the tunnel's far end is not up"
        ),
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => format!(
            "no route to {address} ({err}): this machine has no way to that network (the VPN is down, or the address is wrong)"
        ),
        ErrorKind::TimedOut => format!(
            "{address} did not answer the connection ({err}): the host is down, or a firewall drops the packets"
        ),
        _ if err.to_string().contains("lookup") || err.to_string().contains("resolve") => {
            format!("cannot resolve the host of {address} ({err}): check the name, or use its IP address")
        }
        _ => format!("cannot connect to {address}: {err}"),
    };
    FleetError::new(FleetErrorKind::Unreachable, why)
}

fn handshake_error(address: &str, err: &std::io::Error) -> FleetError {
    if let Some(mismatch) = verifier::mismatch_in(err) {
        return FleetError::new(
            FleetErrorKind::CertificateChanged,
            format!(
                "the certificate at {address} is not the one pinned: expected fingerprint {}, presented {}. \
                 Something else answers at that address, or the peer made a new identity (reinstalled, or its \
                 <config>/fleet was deleted): if you know it was reset, remove it (`rigdeck fleet remove NAME`) \
                 and pair again; otherwise do not trust that address",
                mismatch.expected, mismatch.presented
            ),
        );
    }
    FleetError::new(
        FleetErrorKind::Unreachable,
        format!(
            "{address} answered, but not as a Rigdeck fleet listener (the TLS handshake failed: {err}): \
             is that the port of --fleet-bind rather than the API's?"
        ),
    )
}

pub(crate) fn broken(address: &str, err: &dyn std::fmt::Display) -> FleetError {
    FleetError::new(
        FleetErrorKind::Unreachable,
        format!("the connection to {address} broke during the request: {err}"),
    )
}

pub(crate) fn peer_error(address: &str, status: u16, body: &Value) -> FleetError {
    let kind = body["code"]
        .as_str()
        .and_then(FleetErrorKind::from_code)
        .unwrap_or(FleetErrorKind::Unreachable);
    let message = body["message"].as_str().map_or_else(
        || format!("{address} answered HTTP {status} without an explanation"),
        str::to_owned,
    );
    FleetError::new(kind, message)
}
