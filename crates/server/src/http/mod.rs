//! The HTTP surface: routes, shared state and the serve loop.

mod api;
mod bench;
mod chat;
mod daemon_metrics;
mod error;
mod fleet;
mod fleet_proxy;
pub(crate) mod fleet_rpc;
mod gang;
pub use fleet_rpc::lending_build;
pub(crate) use gang::resume_left;
mod gateway;
mod guard;
mod host;
mod hub;
mod hub_recommended;
mod instances;
mod model_folders;
mod model_runs;
mod placement;
mod quality;
mod telemetry_metrics;
mod tune;
mod ui_assets;
mod ws;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::routing::{delete, get, patch, post, put, MethodRouter};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rigdeck_core::auth::ApiToken;
use rigdeck_core::events::EventBus;
use rigdeck_core::launch::instances::StartReport;
use rigdeck_core::launch::Instances;
use rigdeck_core::settings::{Settings, SettingsStore};
use rigdeck_core::store::Store;
use rigdeck_core::telemetry::TelemetryHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

pub use guard::AllowedHosts;

/// Connections one listener holds at most: far below the usual open-files limits, so a flood
/// of connections on one port leaves descriptors for the database, the engines' logs and the
/// other listener. [`start`](crate::start) lowers it to a quarter of the process's limit.
pub const MAX_CONNECTIONS_PER_LISTENER: usize = 4096;

/// How long a connection may take to send a request's headers: its first request, and the
/// next one on a kept-alive connection (an idle connection is closed after it).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a shutdown waits for requests still open (a long streamed answer, a stalled upload)
/// before it drops their connections and stops the engines anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Bounds on each listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections served at once; the next ones wait in the kernel's queue until one closes.
    pub max_connections: usize,
    /// See [`HEADER_READ_TIMEOUT`]. Answers being streamed are not subject to it.
    pub header_read_timeout: Duration,
    /// See [`SHUTDOWN_GRACE`].
    pub shutdown_grace: Duration,
}

impl ListenerLimits {
    /// These limits with the connection cap at most a quarter of `open_files` (the process's
    /// descriptor limit, `None` when unlimited): the two listeners together leave at least half
    /// of the descriptors for the database, the engines and their logs.
    pub fn within_open_files(self, open_files: Option<u64>) -> Self {
        let quarter = open_files.map_or(usize::MAX, |limit| {
            usize::try_from(limit / 4).unwrap_or(usize::MAX)
        });
        Self {
            max_connections: self.max_connections.min(quarter).max(1),
            ..self
        }
    }
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS_PER_LISTENER,
            header_read_timeout: HEADER_READ_TIMEOUT,
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}

/// Everything a request handler may need.
pub struct AppState {
    pub token: ApiToken,
    pub allowed_hosts: AllowedHosts,
    pub telemetry: Arc<TelemetryHandle>,
    pub library: rigdeck_core::library::LibraryHandle,
    /// False when the database could not be opened: only the 15-minute history exists then.
    pub history_available: bool,
    pub settings: Mutex<SettingsStore>,
    /// Tells the collector about new settings.
    pub settings_tx: watch::Sender<Settings>,
    pub bus: EventBus,
    pub started_at_ms: i64,
    pub bind: SocketAddr,
    pub data_dir: PathBuf,
    pub ws_clients: AtomicUsize,
    /// Turns true when the server shuts down; long-lived connections end on it.
    pub stopping: watch::Receiver<bool>,
    /// The database (`None` when it could not be opened: profiles and instances answer 503).
    pub store: Option<Store>,
    /// Launch profiles' running engines.
    pub instances: Option<Arc<Instances>>,
    /// What happened to engines as the daemon started (recovered, autostarted, refused).
    pub engines_at_start: StartReport,
    /// The model download queue (`None` without a database).
    pub downloads: Option<rigdeck_core::downloads::Downloads>,
    /// Where Rigdeck keeps the user's Hugging Face token.
    pub hub_token_file: PathBuf,
    /// Hub models' headers already read (for "will it fit").
    pub hub_headers: rigdeck_core::hub_fit::HeaderCache,
    /// llama.cpp's dry runs of plans, cached.
    pub dry_runs: rigdeck_core::dry_run::DryRuns,
    /// The OpenAI/Anthropic endpoint (`None` without a database).
    pub gateway: Option<Arc<rigdeck_core::gateway::Gateway>>,
    /// Conversations and replies (`None` without a database).
    pub chat: Option<Arc<rigdeck_core::chat::Chat>>,
    /// Benchmark runs (`None` without a database).
    pub benchmarks: Option<Arc<rigdeck_core::benchmarks::Benchmarks>>,
    /// Tuning runs (`None` without a database or engine instances).
    pub tunings: Option<Arc<rigdeck_core::benchmarks::tuning::Tunings>>,
    /// The host's memory bandwidth: Rigdeck's measurement, unless the settings give one.
    pub memory_bandwidth: Arc<rigdeck_core::host_memory_bandwidth::HostMemoryBandwidth>,
    /// "Run this model" requests: download, place, save, start (see `model_runs`).
    pub model_runs: rigdeck_core::model_runs::ModelRuns,
    /// Recorded quality references (reference logits on disk).
    pub references: Arc<rigdeck_core::quality::references::References>,
    /// `<data dir>/quality`: references and the corpora they were recorded on.
    pub quality_dir: PathBuf,
    /// Corpora's token counts per model, so estimates do not tokenize again.
    pub token_counts: rigdeck_core::quality::recording::TokenCounts,
    /// Paired daemons (`None` without a database).
    pub fleet: Option<Arc<rigdeck_fleet::Fleet>>,
    /// Multi-node profiles this daemon heads (`None` without a database).
    pub gangs: Option<Arc<crate::gang::Gangs>>,
}

impl AppState {
    pub fn current_settings(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .current()
    }
}

/// One token-protected API endpoint. Every route under `/api/v1` except the sign-in session is
/// in [`api_endpoints`], so the router and the test that checks each one for a token are built
/// from the same table.
struct Endpoint {
    method: Method,
    path: &'static str,
    handler: MethodRouter<Arc<AppState>>,
}

/// A rig's API relayed over the fleet channel (see `fleet_proxy`).
const RELAYED: &str = "/fleet/peers/{name}/api/v1/{*rest}";

fn api_endpoints() -> Vec<Endpoint> {
    let at = |method: Method, path: &'static str, handler: MethodRouter<Arc<AppState>>| Endpoint {
        method,
        path,
        handler,
    };
    vec![
        at(Method::GET, "/status", get(api::status)),
        at(Method::GET, "/telemetry/latest", get(api::latest)),
        at(Method::GET, "/telemetry/history", get(api::history)),
        at(Method::GET, "/settings", get(api::get_settings)),
        at(Method::PUT, "/settings", put(api::put_settings)),
        at(
            Method::GET,
            "/host/memory-bandwidth",
            get(host::memory_bandwidth),
        ),
        at(
            Method::POST,
            "/host/memory-bandwidth",
            post(host::measure_memory_bandwidth),
        ),
        at(Method::GET, "/models", get(placement::models)),
        at(
            Method::POST,
            "/models/rescan",
            post(placement::rescan_models),
        ),
        at(
            Method::GET,
            "/models/found-folders",
            get(model_folders::found_folders),
        ),
        at(
            Method::POST,
            "/models/folders",
            post(model_folders::add_folder),
        ),
        at(Method::GET, "/rigs", get(placement::rig_presets)),
        at(Method::GET, "/rigs/links", get(placement::rig_links)),
        at(Method::POST, "/plan", post(placement::plan)),
        at(Method::POST, "/plan/parse", post(placement::parse)),
        at(Method::POST, "/plan/dry-run", post(placement::dry_run)),
        at(
            Method::GET,
            "/plan/calibration",
            get(placement::calibrations),
        ),
        at(Method::GET, "/engines", get(instances::engines)),
        at(
            Method::POST,
            "/engines/build",
            post(instances::build_engine),
        ),
        at(
            Method::POST,
            "/engines/install",
            post(instances::install_engine),
        ),
        at(
            Method::GET,
            "/engines/versions",
            get(instances::engine_versions),
        ),
        at(Method::GET, "/profiles", get(instances::list_profiles)),
        at(Method::POST, "/profiles", post(instances::create_profile)),
        at(Method::GET, "/profiles/{name}", get(instances::get_profile)),
        at(
            Method::PUT,
            "/profiles/{name}",
            put(instances::update_profile),
        ),
        at(
            Method::DELETE,
            "/profiles/{name}",
            delete(instances::delete_profile),
        ),
        at(
            Method::GET,
            "/profiles/{name}/export",
            get(instances::export_profile),
        ),
        at(
            Method::POST,
            "/profiles/{name}/start",
            post(instances::start_profile),
        ),
        at(Method::GET, "/instances", get(instances::list_instances)),
        at(Method::GET, "/gangs", get(gang::list)),
        at(Method::GET, "/gangs/{name}", get(gang::get)),
        at(
            Method::GET,
            "/gangs/{name}/fetch-model",
            get(gang::model_survey),
        ),
        at(
            Method::POST,
            "/gangs/{name}/fetch-model",
            post(gang::fetch_model),
        ),
        at(Method::POST, "/gang/model-copies", post(gang::copy_model)),
        at(Method::POST, "/gang/check", post(gang::check)),
        at(Method::POST, "/gang/followers", post(gang::start_follower)),
        at(Method::GET, "/gang/leases/{lease}", get(gang::lease)),
        at(
            Method::POST,
            "/instances/{name}/stop",
            post(instances::stop_instance),
        ),
        at(
            Method::POST,
            "/instances/{name}/restart",
            post(instances::restart_instance),
        ),
        at(
            Method::GET,
            "/instances/{name}/logs",
            get(instances::instance_logs),
        ),
        at(
            Method::GET,
            "/instances/{name}/speculation",
            get(instances::instance_speculation),
        ),
        at(Method::GET, "/quality/corpora", get(quality::corpora)),
        at(Method::GET, "/quality/references", get(quality::list)),
        at(Method::POST, "/quality/references", post(quality::record)),
        at(
            Method::POST,
            "/quality/references/estimate",
            post(quality::estimate),
        ),
        at(
            Method::DELETE,
            "/quality/references/{id}",
            delete(quality::delete),
        ),
        at(Method::GET, "/quality/frontier", get(quality::frontier)),
        at(
            Method::GET,
            "/quality/reference-candidates",
            get(quality::candidates),
        ),
        at(Method::GET, "/model-runs", get(model_runs::list)),
        at(Method::POST, "/model-runs", post(model_runs::start)),
        at(Method::GET, "/model-runs/{id}", get(model_runs::get)),
        at(Method::GET, "/hub/search", get(hub::search)),
        at(Method::GET, "/hub/starter", get(hub::starter)),
        at(
            Method::GET,
            "/hub/recommended",
            get(hub_recommended::recommended),
        ),
        at(Method::GET, "/hub/models/{owner}/{name}", get(hub::model)),
        at(
            Method::GET,
            "/hub/models/{owner}/{name}/card",
            get(hub::card),
        ),
        at(Method::POST, "/hub/fit", post(hub::fit)),
        at(Method::GET, "/hub/cache", get(hub::cached)),
        at(
            Method::DELETE,
            "/hub/cache/{owner}/{name}",
            delete(hub::remove_cached),
        ),
        at(
            Method::POST,
            "/hub/cache/{owner}/{name}/verify",
            post(hub::verify_cached),
        ),
        at(Method::GET, "/hub/token", get(hub::token_status)),
        at(Method::PUT, "/hub/token", put(hub::set_token)),
        at(Method::DELETE, "/hub/token", delete(hub::delete_token)),
        at(Method::GET, "/downloads", get(hub::list_downloads)),
        at(Method::POST, "/downloads", post(hub::create_download)),
        at(
            Method::DELETE,
            "/downloads/{id}",
            delete(hub::delete_download),
        ),
        at(
            Method::POST,
            "/downloads/{id}/{action}",
            post(hub::download_action),
        ),
        at(Method::GET, "/keys", get(gateway::list_keys)),
        at(Method::POST, "/keys", post(gateway::create_key)),
        at(Method::DELETE, "/keys/{id}", delete(gateway::revoke_key)),
        at(Method::GET, "/gateway", get(gateway::status)),
        at(Method::GET, "/gateway/usage", get(gateway::usage)),
        at(Method::GET, "/chat/models", get(chat::models)),
        at(Method::GET, "/chat/templates", get(chat::templates)),
        at(Method::GET, "/chat/conversations", get(chat::list)),
        at(Method::POST, "/chat/conversations", post(chat::create)),
        at(Method::GET, "/chat/conversations/{id}", get(chat::get)),
        at(
            Method::PATCH,
            "/chat/conversations/{id}",
            patch(chat::change),
        ),
        at(
            Method::DELETE,
            "/chat/conversations/{id}",
            delete(chat::delete),
        ),
        at(
            Method::POST,
            "/chat/conversations/{id}/messages",
            // Attached images travel in the body as data URLs (up to 20 MiB each).
            post(chat::send).layer(DefaultBodyLimit::max(chat::MAX_MESSAGE_BYTES)),
        ),
        at(
            Method::GET,
            "/chat/conversations/{id}/export",
            get(chat::export),
        ),
        at(
            Method::GET,
            "/chat/conversations/{id}/events",
            get(chat::conversation_events),
        ),
        at(
            Method::POST,
            "/chat/messages/{id}/regenerate",
            post(chat::regenerate),
        ),
        at(Method::POST, "/chat/messages/{id}/stop", post(chat::stop)),
        at(Method::GET, "/bench/runs", get(bench::list)),
        at(Method::POST, "/bench/runs", post(bench::start)),
        at(Method::GET, "/bench/runs/{id}", get(bench::get)),
        at(Method::DELETE, "/bench/runs/{id}", delete(bench::delete)),
        at(Method::POST, "/bench/runs/{id}/cancel", post(bench::cancel)),
        at(Method::GET, "/bench/runs/{id}/export", get(bench::export)),
        at(
            Method::GET,
            "/bench/compare-probes",
            get(bench::compare_probes),
        ),
        at(Method::GET, "/bench/tunes", get(tune::list)),
        at(Method::POST, "/bench/tunes", post(tune::start)),
        at(Method::GET, "/bench/tunes/{id}", get(tune::get)),
        at(Method::DELETE, "/bench/tunes/{id}", delete(tune::delete)),
        at(Method::POST, "/bench/tunes/{id}/cancel", post(tune::cancel)),
        at(
            Method::POST,
            "/bench/tunes/{id}/save",
            post(tune::save_best),
        ),
        at(Method::GET, "/fleet", get(fleet::identity)),
        at(Method::POST, "/fleet/invites", post(fleet::invite)),
        at(Method::POST, "/fleet/join", post(fleet::join)),
        at(Method::GET, "/fleet/peers", get(fleet::peers)),
        at(Method::GET, "/fleet/peers/{name}/hello", get(fleet::hello)),
        at(Method::DELETE, "/fleet/peers/{name}", delete(fleet::remove)),
        at(Method::GET, "/fleet/overview", get(fleet_proxy::overview)),
        at(
            Method::POST,
            "/fleet/peers/{name}/rpc",
            post(fleet_rpc::take),
        ),
        at(Method::GET, "/fleet/rpc", get(fleet_rpc::list)),
        at(
            Method::DELETE,
            "/fleet/rpc/{lease}",
            delete(fleet_rpc::release),
        ),
        at(Method::GET, RELAYED, get(fleet_proxy::relay)),
        at(Method::POST, RELAYED, post(fleet_proxy::relay)),
        at(Method::PUT, RELAYED, put(fleet_proxy::relay)),
        at(Method::PATCH, RELAYED, patch(fleet_proxy::relay)),
        at(Method::DELETE, RELAYED, delete(fleet_proxy::relay)),
        at(Method::GET, "/events", get(ws::events)),
    ]
}

/// Method and full path of every endpoint that needs the token, for the test that calls each one
/// without it.
pub fn protected_endpoints() -> Vec<(Method, String)> {
    api_endpoints()
        .into_iter()
        .map(|e| (e.method, format!("/api/v1{}", e.path)))
        .collect()
}

/// The full router: UI assets and login open, `/api` behind the token, the gateway's `/v1` and
/// `/metrics` behind an API key (or the token); Host and Origin checked on all.
pub fn router(state: Arc<AppState>) -> Router {
    let api = api_routes(api_endpoints()).route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        guard::require_token,
    ));
    let session = Router::new().route("/session", post(api::sign_in).delete(api::sign_out));
    Router::new()
        .nest("/api/v1", api.merge(session))
        .merge(gateway::routes(state.clone()))
        .route("/login", get(api::login))
        .fallback(ui_assets::serve)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check_host_and_origin,
        ))
        .layer(axum::middleware::from_fn(guard::security_headers))
        .with_state(state)
}

/// The endpoints' routes, those sharing a path merged.
fn api_routes(endpoints: Vec<Endpoint>) -> Router<Arc<AppState>> {
    let mut by_path: BTreeMap<&'static str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for endpoint in endpoints {
        let merged = match by_path.remove(endpoint.path) {
            Some(earlier) => earlier.merge(endpoint.handler),
            None => endpoint.handler,
        };
        by_path.insert(endpoint.path, merged);
    }
    by_path
        .into_iter()
        .fold(Router::new(), |api, (path, handler)| {
            api.route(path, handler)
        })
}

/// `/api/v1` as paired daemons call it over the fleet channel: every endpoint the channel
/// relays, without the token (the channel admitted the caller's pinned certificate), and the
/// gateway's `/v1` with this daemon's own models; no UI, no sign-in, no `/metrics`.
pub fn fleet_api_router(state: Arc<AppState>) -> Router {
    let relayed = api_endpoints()
        .into_iter()
        .filter(|e| rigdeck_fleet::relay::refusal(&format!("/api/v1{}", e.path)).is_none())
        .collect();
    Router::new()
        .nest("/api/v1", api_routes(relayed))
        .merge(gateway::peer_routes())
        .with_state(state)
}

/// Serves the full router until `stop` turns true (see [`serve_connections`]).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    limits: ListenerLimits,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    serve_connections(listener, router(state), limits, stop).await;
    Ok(())
}

/// Serves the gateway alone (`/v1`, `/metrics`: API keys, no UI, no admin API) until `stop`.
/// Browsers' cross-origin requests are refused: tools call it, web pages do not. The admin token
/// is refused too: this port is the one other machines reach.
pub async fn serve_gateway(
    listener: TcpListener,
    state: Arc<AppState>,
    limits: ListenerLimits,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let router = gateway::routes(state.clone())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::refuse_admin_token,
        ))
        .layer(axum::middleware::from_fn(guard::refuse_browser_origins))
        .layer(axum::middleware::from_fn(guard::security_headers))
        .with_state(state);
    serve_connections(listener, router, limits, stop).await;
    Ok(())
}

/// Accepts connections while fewer than `limits.max_connections` are open and serves each over
/// HTTP/1 with the header-read timeout. On `stop` it stops accepting and closes the connections
/// as their requests end, dropping those still open after `limits.shutdown_grace`.
async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut open = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = accept_within_cap(&listener, &slots) => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        // Forget the connections that ended meanwhile.
        while open.try_join_next().is_some() {}
        if let Some((stream, slot)) = accepted {
            let (router, stop) = (router.clone(), stop.clone());
            open.spawn(serve_connection(
                stream,
                router,
                limits.header_read_timeout,
                stop,
                slot,
            ));
        }
    }
    drop(listener);
    close_connections(open, limits.shutdown_grace).await;
}

/// The next connection, once a slot is free for it (`None` when accepting failed).
async fn accept_within_cap(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    // The semaphore is never closed, so this only waits.
    let slot = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _peer)) => Some((stream, slot)),
        Err(err) => {
            pause_after_accept_error(&err).await;
            None
        }
    }
}

/// A connection that went away before it was accepted is skipped; anything else (out of
/// descriptors, out of memory) is logged and retried a second later, not in a busy loop.
async fn pause_after_accept_error(err: &std::io::Error) {
    use std::io::ErrorKind;
    let gone = [
        ErrorKind::ConnectionAborted,
        ErrorKind::ConnectionReset,
        ErrorKind::ConnectionRefused,
    ];
    if gone.contains(&err.kind()) {
        return;
    }
    tracing::warn!(
        "cannot accept a connection ({err}); retrying in a second. Out of file descriptors? \
         Raise the open-files limit (`ulimit -n`, or LimitNOFILE= in the service's unit)"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// One connection: HTTP/1 (WebSocket upgrades included) until the client closes it, its next
/// request's headers do not arrive within `header_read_timeout`, or the server stops (then it
/// closes once the request in progress is answered). Holds its `slot` until it ends.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let connection = http
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!("connection ended: {err}");
                }
                return;
            }
            _ = stop.wait_for(|stopped| *stopped), if !stopping => {
                connection.as_mut().graceful_shutdown();
                stopping = true;
            }
        }
    }
}

/// Waits up to `grace` for the connections to close after a stop; then drops those still open
/// (a stream that does not end, a request whose body never comes), so the shutdown goes on.
async fn close_connections(mut open: JoinSet<()>, grace: Duration) {
    let all_closed = async { while open.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all_closed).await.is_err() {
        tracing::warn!(
            "{} connection(s) still open {} s after the stop: closing them",
            open.len(),
            grace.as_secs()
        );
        open.shutdown().await;
    }
}

/// An IP as it appears in a URL's host part (`[::1]` for IPv6).
pub fn host_literal(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}
