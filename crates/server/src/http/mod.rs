//! The HTTP surface: routes, shared state and the serve loop.

mod api;
mod error;
mod guard;
mod instances;
mod placement;
mod ui_assets;
mod ws;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};

use axum::routing::get;
use axum::Router;
use rigdeck_core::auth::ApiToken;
use rigdeck_core::events::EventBus;
use rigdeck_core::launch::instances::StartReport;
use rigdeck_core::launch::Instances;
use rigdeck_core::settings::{Settings, SettingsStore};
use rigdeck_core::store::Store;
use rigdeck_core::telemetry::TelemetryHandle;
use tokio::sync::watch;

pub use guard::AllowedHosts;

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
}

impl AppState {
    pub fn current_settings(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .current()
    }
}

/// The full router: UI assets and login open, `/api` behind the token; Host and Origin checked on all.
pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/status", get(api::status))
        .route("/telemetry/latest", get(api::latest))
        .route("/telemetry/history", get(api::history))
        .route("/settings", get(api::get_settings).put(api::put_settings))
        .route("/models", get(placement::models))
        .route(
            "/models/rescan",
            axum::routing::post(placement::rescan_models),
        )
        .route("/rigs", get(placement::rig_presets))
        .route("/plan", axum::routing::post(placement::plan))
        .route("/plan/parse", axum::routing::post(placement::parse))
        .route("/engines", get(instances::engines))
        .route(
            "/engines/build",
            axum::routing::post(instances::build_engine),
        )
        .route(
            "/engines/install",
            axum::routing::post(instances::install_engine),
        )
        .route(
            "/profiles",
            get(instances::list_profiles).post(instances::create_profile),
        )
        .route(
            "/profiles/{name}",
            get(instances::get_profile)
                .put(instances::update_profile)
                .delete(instances::delete_profile),
        )
        .route("/profiles/{name}/export", get(instances::export_profile))
        .route(
            "/profiles/{name}/start",
            axum::routing::post(instances::start_profile),
        )
        .route("/instances", get(instances::list_instances))
        .route(
            "/instances/{name}/stop",
            axum::routing::post(instances::stop_instance),
        )
        .route(
            "/instances/{name}/restart",
            axum::routing::post(instances::restart_instance),
        )
        .route("/instances/{name}/logs", get(instances::instance_logs))
        .route("/events", get(ws::events))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::require_token,
        ));
    let session = Router::new().route(
        "/session",
        axum::routing::post(api::sign_in).delete(api::sign_out),
    );
    Router::new()
        .nest("/api/v1", api.merge(session))
        .route("/login", get(api::login))
        .fallback(ui_assets::serve)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check_host_and_origin,
        ))
        .layer(axum::middleware::from_fn(guard::security_headers))
        .with_state(state)
}

/// Serves until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await
}

/// An IP as it appears in a URL's host part (`[::1]` for IPv6).
pub fn host_literal(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}
