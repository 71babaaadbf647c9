//! The fleet of one daemon: its identity, its pinned peers, the join codes it hands out, and
//! the requests it makes and answers over the channel.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use sqlx::sqlite::SqlitePool;

use crate::channel::{self, Caller};
use crate::dial::{self, Call};
use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;
use crate::identity::{is_usable_name, Identity, IdentityError};
use crate::invites;
use crate::join_code::{JoinCode, SECRET_BYTES};
use crate::peers::{self, NewPin, Peer, Pinned, Role};

/// How long a join may take (connection, handshake, two requests each).
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `list` waits for each peer's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a join code may live.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why the fleet could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("cannot listen for the fleet on {address}: {why}")]
    Bind { address: SocketAddr, why: String },
}

/// The desk's request to join, sent with the code's secret.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct JoinRequest {
    /// The secret, in hex.
    pub secret: String,
    /// The desk's name.
    pub name: String,
    /// The port of the desk's own fleet listener, if it has one (the rig dials it back at the
    /// address the join came from).
    pub listen_port: Option<u16>,
}

/// The rig's answer to a join.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct JoinAnswer {
    pub name: String,
    pub version: String,
    /// The rig had pinned this desk before (its pin was updated).
    pub already_paired: bool,
}

/// A peer's answer to hello.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    pub name: String,
    pub version: String,
    pub time_ms: i64,
}

/// A join code just made.
#[derive(Debug, serde::Serialize)]
pub struct Invite {
    pub code: String,
    pub address: String,
    pub fingerprint: Fingerprint,
    pub expires_at_ms: i64,
}

/// A finished join, from the desk's side.
#[derive(Debug, serde::Serialize)]
pub struct Joined {
    pub peer: Peer,
    pub already_paired: bool,
    pub message: String,
}

/// A peer and whether it answers now.
#[derive(Debug, serde::Serialize)]
pub struct PeerStatus {
    #[serde(flatten)]
    pub peer: Peer,
    /// `None` when this side cannot call it (a desk without a fleet listener).
    pub answering: Option<bool>,
    pub hello: Option<Hello>,
}

/// This daemon's fleet.
pub struct Fleet {
    identity: Identity,
    pool: SqlitePool,
    listen: Option<SocketAddr>,
    version: String,
    /// This daemon's own API as pinned peers call it (see [`Fleet::serve_api`]).
    local_api: std::sync::Mutex<Option<axum::Router>>,
    /// The rigs' latest state as this daemon (a desk) watches them.
    pub(crate) rigs: crate::watch::RigViews,
    /// llama.cpp RPC: the leases this daemon lends, the ones it took, and where its lending
    /// build comes from (see `rpc_leases`).
    pub(crate) rpc: crate::rpc_leases::RpcLeases,
}

/// Makes (or reads) the identity in `dir`, and when `bind` asks for it, starts the channel's
/// listener there until `stop`.
pub async fn start(
    dir: &Path,
    pool: SqlitePool,
    bind: Option<SocketAddr>,
    version: &str,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Arc<Fleet>, StartError> {
    let identity = Identity::load_or_create(dir)?;
    let listener = match bind {
        Some(address) => Some(bind_listener(address).await?),
        None => None,
    };
    let listen = listener.as_ref().and_then(|l| l.local_addr().ok());
    let fleet = Arc::new(Fleet {
        identity,
        pool,
        listen,
        version: version.to_owned(),
        local_api: std::sync::Mutex::new(None),
        rigs: Default::default(),
        rpc: Default::default(),
    });
    tokio::spawn(crate::rpc_leases::end_at_stop(fleet.clone(), stop.clone()));
    tokio::spawn(crate::watch::watch_rigs(fleet.clone(), stop.clone()));
    if let (Some(listener), Some(address)) = (listener, listen) {
        if !address.ip().is_loopback() {
            tracing::info!(
                "the fleet listener is on {address}, beyond loopback, as asked: only paired daemons' certificates are admitted"
            );
        }
        tracing::info!(
            "fleet: '{}' listens on {address} (fingerprint {})",
            fleet.identity.name,
            fleet.identity.fingerprint
        );
        tokio::spawn(channel::serve(listener, fleet.clone(), stop));
    }
    Ok(fleet)
}

async fn bind_listener(address: SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(address).await.map_err(|err| {
        let why = match err.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "port {} is already in use (`ss -ltnp 'sport = :{}'` shows who): choose another with --fleet-bind",
                address.port(),
                address.port()
            ),
            std::io::ErrorKind::AddrNotAvailable => format!(
                "{} is not an address of this machine: use 127.0.0.1, 0.0.0.0 or one of its own addresses with --fleet-bind",
                address.ip()
            ),
            _ => err.to_string(),
        };
        StartError::Bind { address, why }
    })
}

fn now_ms() -> i64 {
    rigdeck_supervisor::now_ms()
}

impl Fleet {
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Serves `api` (this daemon's `/api/v1` routes, without the token: the channel has already
    /// admitted the caller's pinned certificate) to pinned peers over the channel.
    pub fn serve_api(&self, api: axum::Router) {
        *self
            .local_api
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(api);
    }

    pub(crate) fn stop_serving_api(&self) {
        self.local_api
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// The API to serve `path` with, for a pinned `caller`; the refusal otherwise.
    pub(crate) async fn local_api_for(
        &self,
        caller: Caller,
        path: &str,
    ) -> Result<axum::Router, FleetError> {
        let Some(peer) = peers::by_fingerprint(&self.pool, caller.fingerprint).await? else {
            return Err(channel::unknown_caller(caller.fingerprint));
        };
        if peer.role != Role::Desk {
            return Err(FleetError::new(
                FleetErrorKind::Forbidden,
                format!(
                    "'{}' is a rig this desk joined, not a desk of this daemon: only a desk that joined a rig (with the rig's join code) calls that rig's API",
                    peer.name
                ),
            ));
        }
        if let Some(why) = crate::relay::refusal(path) {
            return Err(FleetError::new(FleetErrorKind::Forbidden, why));
        }
        self.local_api
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                FleetError::new(
                    FleetErrorKind::Unavailable,
                    "this daemon does not serve its API to peers yet: it is starting or stopping",
                )
            })
    }

    /// Forwards `request` (a path under `/api/v1`) to the peer named `name` over the channel;
    /// the answer's head within `within`, its body streaming.
    pub async fn relay(
        &self,
        name: &str,
        request: axum::http::Request<axum::body::Body>,
        within: Duration,
    ) -> Result<axum::http::Response<hyper::body::Incoming>, FleetError> {
        let peer = self.peer(name).await?;
        crate::relay::forward(&self.identity, &peer, request, within).await
    }

    /// The paired peers as stored (nobody asked).
    pub async fn paired(&self) -> Result<Vec<Peer>, FleetError> {
        peers::list(&self.pool).await
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Where the channel listens, when it does.
    pub fn listen_address(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// A one-time join code for `address` (the fleet listener's own address by default),
    /// valid for `ttl`.
    pub async fn invite(&self, address: Option<&str>, ttl: Duration) -> Result<Invite, FleetError> {
        let Some(listen) = self.listen else {
            return Err(FleetError::new(
                FleetErrorKind::Unavailable,
                "the fleet listener is off, so no desk could use a join code: restart the daemon with \
                 `rigdeck serve --fleet-bind 127.0.0.1:7879` (or an address the desks reach), then make the code",
            ));
        };
        let address = match address {
            Some(address) => address.trim().to_owned(),
            None => default_address(listen)?,
        };
        dial::check_address(&address)?;
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(FleetError::new(
                FleetErrorKind::BadInput,
                "a join code lives from 1 second to 7 days: choose --ttl within that (e.g. 10m)",
            ));
        }
        let now = now_ms();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        // The code carries whole seconds: round the expiry down so both sides agree.
        let expires_at_ms = (now + ttl_ms).div_euclid(1000) * 1000;
        let secret = invites::new_secret()?;
        invites::store(&self.pool, &secret, &address, now, expires_at_ms).await?;
        let code = JoinCode {
            address: address.clone(),
            fingerprint: self.identity.fingerprint,
            secret,
            expires_at_ms,
        };
        Ok(Invite {
            code: code.encode(),
            address,
            fingerprint: self.identity.fingerprint,
            expires_at_ms,
        })
    }

    /// Joins the rig a code names: its certificate must have the code's fingerprint; the code's
    /// secret pins this daemon there, then the rig is pinned here.
    pub async fn join(&self, text: &str) -> Result<Joined, FleetError> {
        let code = JoinCode::decode(text)
            .map_err(|err| FleetError::new(FleetErrorKind::BadInput, err.to_string()))?;
        if code.fingerprint == self.identity.fingerprint {
            return Err(FleetError::new(
                FleetErrorKind::BadInput,
                "this join code was made by this very daemon: run `rigdeck fleet join` on the other machine (the desk)",
            ));
        }
        if code.is_expired(now_ms()) {
            return Err(invites::expired(code.expires_at_ms));
        }
        let rig_name = self.ask_name(&code).await?;
        peers::check_name_free(&self.pool, &rig_name, code.fingerprint).await?;
        let answer = self.send_join(&code).await?;
        let pin = NewPin {
            name: &answer.name,
            fingerprint: code.fingerprint,
            role: Role::Rig,
            address: Some(&code.address),
        };
        let pinned = self.store_pin(&pin).await?;
        let already_paired = answer.already_paired || pinned == Pinned::Updated;
        let peer = peers::by_fingerprint(&self.pool, code.fingerprint)
            .await?
            .ok_or_else(|| {
                FleetError::new(FleetErrorKind::Internal, "the pin just stored is gone")
            })?;
        let message = if already_paired {
            format!(
                "already paired with the rig '{}' (since {}): its pin was updated, not duplicated (address {})",
                peer.name,
                rigdeck_supervisor::logs::format_utc_ms(peer.paired_at_ms),
                code.address
            )
        } else {
            format!(
                "paired with the rig '{}' at {} (fingerprint {})",
                peer.name, code.address, code.fingerprint
            )
        };
        Ok(Joined {
            peer,
            already_paired,
            message,
        })
    }

    async fn ask_name(&self, code: &JoinCode) -> Result<String, FleetError> {
        let answer = dial::call(
            &self.identity,
            Call {
                address: &code.address,
                pin: code.fingerprint,
                method: Method::GET,
                path: "/fleet/v1/name",
                body: None,
                within: JOIN_TIMEOUT,
            },
        )
        .await?;
        answer["name"]
            .as_str()
            .filter(|name| is_usable_name(name))
            .map(str::to_owned)
            .ok_or_else(|| {
                FleetError::new(
                    FleetErrorKind::Unreachable,
                    format!("the rig at {} did not give a usable name", code.address),
                )
            })
    }

    async fn send_join(&self, code: &JoinCode) -> Result<JoinAnswer, FleetError> {
        let request = JoinRequest {
            secret: hex(&code.secret),
            name: self.identity.name.clone(),
            listen_port: self.listen.map(|l| l.port()),
        };
        let answer = dial::call(
            &self.identity,
            Call {
                address: &code.address,
                pin: code.fingerprint,
                method: Method::POST,
                path: "/fleet/v1/join",
                body: Some(serde_json::to_value(&request).unwrap_or_default()),
                within: JOIN_TIMEOUT,
            },
        )
        .await?;
        serde_json::from_value(answer).map_err(|err| {
            FleetError::new(
                FleetErrorKind::Unreachable,
                format!("the rig at {} answered the join oddly: {err}", code.address),
            )
        })
    }

    async fn store_pin(&self, pin: &NewPin<'_>) -> Result<Pinned, FleetError> {
        let fail = |err| FleetError::database("store the peer's pin", err);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        let pinned = peers::upsert(&mut tx, pin, now_ms()).await?;
        tx.commit().await.map_err(fail)?;
        Ok(pinned)
    }

    /// The rig's side of a join: the secret checked (one-time, unexpired, in constant time),
    /// then, in one transaction, the code used up and the caller's certificate pinned.
    pub async fn accept_join(
        &self,
        caller: Caller,
        request: JoinRequest,
    ) -> Result<JoinAnswer, FleetError> {
        let secret = parse_secret(&request.secret)?;
        if !is_usable_name(&request.name) {
            return Err(FleetError::new(
                FleetErrorKind::BadInput,
                format!(
                    "the desk's name '{}' is not usable: 1 to 63 letters, digits, '.', '-' or '_' (it is in the desk's <config>/fleet/name)",
                    request.name
                ),
            ));
        }
        let now = now_ms();
        let invite = invites::check(&self.pool, &secret, now).await?;
        peers::check_name_free(&self.pool, &request.name, caller.fingerprint).await?;
        let address = request
            .listen_port
            .map(|port| SocketAddr::new(caller.remote.ip(), port).to_string());
        let pin = NewPin {
            name: &request.name,
            fingerprint: caller.fingerprint,
            role: Role::Desk,
            address: address.as_deref(),
        };
        let fail = |err| FleetError::database("pair the desk", err);
        let mut tx = self.pool.begin().await.map_err(fail)?;
        invites::use_up(&mut tx, &invite, &request.name, now).await?;
        let pinned = peers::upsert(&mut tx, &pin, now).await?;
        tx.commit().await.map_err(fail)?;
        tracing::info!(
            "fleet: the desk '{}' paired (fingerprint {})",
            request.name,
            caller.fingerprint
        );
        Ok(JoinAnswer {
            name: self.identity.name.clone(),
            version: self.version.clone(),
            already_paired: pinned == Pinned::Updated,
        })
    }

    /// Answers a pinned peer's hello; refuses any other certificate.
    pub async fn answer_hello(&self, caller: Caller) -> Result<Hello, FleetError> {
        if peers::by_fingerprint(&self.pool, caller.fingerprint)
            .await?
            .is_none()
        {
            return Err(channel::unknown_caller(caller.fingerprint));
        }
        Ok(Hello {
            name: self.identity.name.clone(),
            version: self.version.clone(),
            time_ms: now_ms(),
        })
    }

    /// The peer's hello over the channel, recorded as its latest answer (or silence).
    pub async fn hello(&self, peer: &Peer) -> Result<Hello, FleetError> {
        let Some(address) = &peer.address else {
            return Err(FleetError::new(
                FleetErrorKind::Unavailable,
                format!(
                    "the {} '{}' has no fleet listener this side could call (it joined without --fleet-bind)",
                    peer.role.as_str(),
                    peer.name
                ),
            ));
        };
        let answer = dial::call(
            &self.identity,
            Call {
                address,
                pin: peer.fingerprint,
                method: Method::GET,
                path: "/fleet/v1/hello",
                body: None,
                within: HELLO_TIMEOUT,
            },
        )
        .await
        .map_err(|err| forgotten_by(peer, err))
        .and_then(|value| {
            serde_json::from_value::<Hello>(value).map_err(|err| {
                FleetError::new(
                    FleetErrorKind::Unreachable,
                    format!("{address} answered hello oddly: {err}"),
                )
            })
        });
        let problem = answer.as_ref().err().map(|err| err.message.clone());
        peers::record_answer(&self.pool, peer.fingerprint, problem.as_deref(), now_ms()).await?;
        answer
    }

    /// The hello of the peer of that name.
    pub async fn hello_named(&self, name: &str) -> Result<Hello, FleetError> {
        let peer = self.peer(name).await?;
        self.hello(&peer).await
    }

    /// Every peer with whether it answers now (each asked at once, a few seconds at most).
    pub async fn peers(&self) -> Result<Vec<PeerStatus>, FleetError> {
        let listed = peers::list(&self.pool).await?;
        let asks = listed.iter().map(|peer| async move {
            match peer.address {
                None => (None, None),
                Some(_) => match self.hello(peer).await {
                    Ok(hello) => (Some(true), Some(hello)),
                    Err(_) => (Some(false), None),
                },
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        // Read again: the hellos recorded their answers.
        let fresh = peers::list(&self.pool).await?;
        Ok(fresh
            .into_iter()
            .map(|peer| {
                let answer = listed
                    .iter()
                    .position(|p| p.fingerprint == peer.fingerprint)
                    .and_then(|i| answers.get(i).cloned());
                let (answering, hello) = answer.unwrap_or((None, None));
                PeerStatus {
                    peer,
                    answering,
                    hello,
                }
            })
            .collect())
    }

    /// The peer of that name, or a refusal that says how to find the names.
    pub async fn peer(&self, name: &str) -> Result<Peer, FleetError> {
        peers::by_name(&self.pool, name).await?.ok_or_else(|| {
            FleetError::new(
                FleetErrorKind::NotFound,
                format!("no peer is named '{name}': `rigdeck fleet list` shows the names"),
            )
        })
    }

    /// Unpins the peer of that name: its requests are refused from now on.
    pub async fn remove(&self, name: &str) -> Result<Peer, FleetError> {
        let peer = self.peer(name).await?;
        peers::remove(&self.pool, &peer.name).await?;
        self.end_rpc_leases_of(&peer);
        tracing::info!(
            "fleet: removed the {} '{}' ({})",
            peer.role.as_str(),
            peer.name,
            peer.fingerprint
        );
        Ok(peer)
    }
}

/// The listener's own address, unless it listens on every interface (then the desk's way in
/// must be said).
fn default_address(listen: SocketAddr) -> Result<String, FleetError> {
    if listen.ip().is_unspecified() {
        return Err(FleetError::new(
            FleetErrorKind::BadInput,
            format!(
                "the fleet listener is on every interface ({listen}): say which address the desk dials with \
                 --address HOST:{} (this machine's LAN or VPN address, or a tunnel's local end)",
                listen.port()
            ),
        ));
    }
    Ok(listen.to_string())
}

/// A refusal by a peer that no longer knows this daemon, said from this side.
pub(crate) fn forgotten_by(peer: &Peer, err: FleetError) -> FleetError {
    if err.kind != FleetErrorKind::UnknownPeer {
        return err;
    }
    FleetError::new(
        FleetErrorKind::UnknownPeer,
        format!(
            "the {role} '{name}' no longer knows this {me}: pair again (`rigdeck fleet invite` on the rig, \
             `rigdeck fleet join CODE` on the desk), or remove it here with `rigdeck fleet remove {name}`",
            role = peer.role.as_str(),
            name = peer.name,
            me = peer.role.counterpart().as_str()
        ),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_secret(text: &str) -> Result<[u8; SECRET_BYTES], FleetError> {
    let bad = || {
        FleetError::new(
            FleetErrorKind::BadInput,
            "the join request's secret is not 32 hex digits: use `rigdeck fleet join CODE`",
        )
    };
    if text.len() != 2 * SECRET_BYTES || !text.is_ascii() {
        return Err(bad());
    }
    let mut secret = [0u8; SECRET_BYTES];
    for (i, byte) in secret.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(secret)
}
