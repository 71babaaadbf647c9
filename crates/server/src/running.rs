//! Starting and stopping the server: token, settings, database, collectors, then the listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use rigdeck_core::auth::ApiToken;
use rigdeck_core::benchmarks::DaemonAddress;
use rigdeck_core::events::EventBus;
use rigdeck_core::host_memory_bandwidth::{probe_size_for, HostMemoryBandwidth};
use rigdeck_core::launch::fleet::InstancesFleet;
use rigdeck_core::launch::instances::{Autostart, GpuSource, StartReport};
use rigdeck_core::launch::Instances;
use rigdeck_core::paths::AppPaths;
use rigdeck_core::quality::references::References;
use rigdeck_core::settings::SettingsStore;
use rigdeck_core::store::Store;
use rigdeck_core::telemetry::collector::Sources;
use rigdeck_core::telemetry::gpu::{NvmlSource, NVML_LIBRARY_ENV};
use rigdeck_core::telemetry::host::HostCollector;
use rigdeck_core::telemetry::{spawn_collector, StartedByRigdeck, TelemetryHandle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http::{self, AllowedHosts, AppState, ListenerLimits};

/// Default address of `rigdeck serve`.
pub const DEFAULT_BIND: &str = "127.0.0.1:7878";

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Port 0 picks a free port (the desktop shell does this).
    pub bind: SocketAddr,
    /// Extra host names the UI may be reached by (reverse proxy, LAN name), beyond loopback and IPs.
    pub allow_hosts: Vec<String>,
    pub paths: AppPaths,
    /// The /sys tree the host collector reads (NUMA nodes, P/E cores).
    pub sysfs_root: PathBuf,
    /// An NVML library other than the driver's (the NVML test double in tests and benchmarks).
    pub nvml_library: Option<PathBuf>,
    /// A second address serving only the gateway (`/v1`, `/metrics`).
    pub gateway_bind: Option<SocketAddr>,
    /// Connection cap, header-read timeout and shutdown deadline of each listener.
    pub limits: ListenerLimits,
    /// Measure the host's memory bandwidth in the background when it was never measured.
    pub measure_memory_bandwidth: bool,
    /// The fleet's TLS listener for paired daemons (off when `None`).
    pub fleet_bind: Option<SocketAddr>,
}

impl ServeOptions {
    /// Loopback on the given address, with folders from the environment (XDG by default).
    pub fn from_env(bind: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self {
            bind,
            allow_hosts: Vec::new(),
            paths: AppPaths::from_env()?,
            sysfs_root: std::env::var_os("RIGDECK_SYSFS_ROOT")
                .map_or_else(|| PathBuf::from("/sys"), PathBuf::from),
            nvml_library: std::env::var_os(NVML_LIBRARY_ENV).map(PathBuf::from),
            gateway_bind: None,
            limits: ListenerLimits::default(),
            measure_memory_bandwidth: true,
            fleet_bind: None,
        })
    }
}

/// A server that is listening. Dropping it does not stop it; call `shutdown`.
pub struct RunningServer {
    pub local_addr: SocketAddr,
    token: ApiToken,
    state: Arc<AppState>,
    stop: watch::Sender<bool>,
    serving: JoinHandle<std::io::Result<()>>,
    /// The gateway-only listener's loop, when `gateway_bind` asked for one.
    gateway_serving: Option<JoinHandle<std::io::Result<()>>>,
    gateway_addr: Option<SocketAddr>,
    telemetry: Arc<TelemetryHandle>,
}

impl RunningServer {
    /// `http://127.0.0.1:PORT` (the loopback address even when bound to all interfaces).
    pub fn base_url(&self) -> String {
        let ip = self.local_addr.ip();
        let host = if ip.is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            http::host_literal(ip)
        };
        format!("http://{host}:{}", self.local_addr.port())
    }

    /// Opening this URL signs the browser in (it sets the session cookie and drops the token from the address).
    pub fn login_url(&self) -> String {
        format!("{}/login?token={}", self.base_url(), self.token.as_str())
    }

    /// Where the gateway alone is served, when `gateway_bind` asked for it.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway_addr
    }

    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// The event bus the WebSocket forwards (the daemon's domains publish on it).
    pub fn events(&self) -> &rigdeck_core::events::EventBus {
        &self.state.bus
    }

    /// Authenticated WebSocket clients connected right now.
    pub fn ws_clients(&self) -> usize {
        self.state.ws_clients.load(Ordering::Relaxed)
    }

    /// The user's choice for the desktop window: keep serving after it closes.
    pub fn keep_running_in_background(&self) -> bool {
        self.state.current_settings().keep_running_in_background
    }

    /// This daemon's fleet (identity, peers, listener), when the database is there.
    pub fn fleet(&self) -> Option<&Arc<rigdeck_fleet::Fleet>> {
        self.state.fleet.as_ref()
    }

    /// What starting the autostart profiles did (started, skipped, or refused and why).
    pub fn autostart(&self) -> &Autostart {
        &self.state.engines_at_start.autostart
    }

    /// Resolves when the server stops on its own (it only does on a listener error).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.serving)
            .await
            .context("server task failed")?
            .context("server stopped")
    }

    /// Stops accepting requests, closes WebSockets (they watch the same stop signal) and the
    /// connections as their requests end (those still open after the shutdown grace are
    /// dropped), stops the engines it started, and stops the collector, flushing the history
    /// bucket in progress.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let listeners = std::iter::once(self.serving).chain(self.gateway_serving);
        for serving in listeners {
            if let Err(err) = serving.await {
                tracing::warn!("server task ended abnormally: {err}");
            }
        }
        // Benchmarks in progress end as cancelled, keeping what they measured.
        if let Some(tunings) = &self.state.tunings {
            tunings.cancel_all_and_wait(BENCH_STOP_WAIT).await;
        }
        if let Some(benchmarks) = &self.state.benchmarks {
            benchmarks.cancel_all_and_wait(BENCH_STOP_WAIT).await;
        }
        // Gangs first: their followers on other rigs end with them.
        if let Some(gangs) = &self.state.gangs {
            gangs.stop_all().await;
        }
        // An orderly shutdown ends the engines; a crash leaves them for `recover` to find.
        if let Some(instances) = &self.state.instances {
            instances.stop_all().await;
        }
        self.telemetry.shutdown().await;
    }
}

/// Starts everything and returns once the listener is bound and the first sample is taken.
pub async fn start(options: ServeOptions) -> anyhow::Result<RunningServer> {
    let limits = options.limits.within_open_files(raise_open_files_limit());
    tracing::info!(
        "each listener serves up to {} connections at once",
        limits.max_connections
    );
    let paths = &options.paths;
    let token = ApiToken::load_or_create(&paths.token_file())?;
    let (settings, problem) = SettingsStore::load(paths);
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    let listener = bind(options.bind).await?;
    let local_addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    let store = open_store(paths).await;
    if let Some(store) = &store {
        rigdeck_core::packaged_engines::adopt(store).await;
    }
    let (settings_tx, settings_rx) = watch::channel(settings.current());
    let bus = EventBus::new();
    let library_bus = bus.clone();
    let library = rigdeck_core::library::spawn_library_watcher(settings_rx.clone(), move |list| {
        library_bus.publish(rigdeck_core::events::Event::LibraryChanged(list))
    });
    let sources = Sources {
        nvml: NvmlSource::open(options.nvml_library.as_deref()),
        host: HostCollector::new(
            options.sysfs_root.clone(),
            settings.current().library_folders(),
        ),
    };
    // Shared with the instances service, which registers the engines' pids: their VRAM is ours.
    let ours = StartedByRigdeck::default();
    let telemetry = Arc::new(spawn_collector(
        sources,
        settings_rx.clone(),
        bus.clone(),
        store.clone(),
        ours.clone(),
    ));
    telemetry.first_frame().await;
    let (instances, engines_at_start) = match &store {
        Some(store) => {
            let latest = telemetry.clone();
            let gpus: GpuSource = Arc::new(move || latest.latest().map(|f| f.sample.gpus.clone()));
            let instances = Instances::new(store.clone(), &paths.data_dir, ours, bus.clone(), gpus);
            // Engines an earlier daemon left: adopt those that answer, end the rest.
            let recovery = instances.recover().await;
            if !recovery.adopted.is_empty() || !recovery.cleaned_up.is_empty() {
                tracing::info!(
                    "engines from the last run: adopted {:?}, cleaned up {:?}",
                    recovery.adopted,
                    recovery.cleaned_up
                );
            }
            // Then the profiles marked autostart, admitted together.
            let autostart = instances.autostart().await;
            log_autostart(&autostart);
            let report = StartReport {
                recovery,
                autostart,
            };
            (Some(instances), report)
        }
        None => (None, StartReport::default()),
    };
    let downloads = match &store {
        Some(store) => {
            let settings = settings_rx.clone();
            start_downloads(store.clone(), bus.clone(), library.clone(), settings, paths).await
        }
        None => None,
    };
    let gateway = match (&store, &instances) {
        (Some(store), Some(instances)) => start_gateway(store, instances).await,
        _ => None,
    };
    if let (Some(store), Some(_)) = (&store, &gateway) {
        // Usage older than the setting's days goes, now and then daily.
        let settings = settings_rx.clone();
        rigdeck_core::gateway::usage::spawn_pruning(store.pool().clone(), move || {
            settings.borrow().usage_retention_days
        });
    }
    let chat = match (&store, &gateway) {
        (Some(store), Some(gateway)) => start_chat(store, gateway, &bus).await,
        _ => None,
    };
    let references = Arc::new(References::open(&paths.quality_dir()));
    let benchmarks = match &store {
        Some(store) => {
            let daemon = DaemonAddress {
                url: format!("http://{}", loopback_address(local_addr)),
                token: token.as_str().to_owned(),
            };
            let (telemetry, library) = (telemetry.clone(), library.clone());
            let references = references.clone();
            start_benchmarks(
                store, &instances, telemetry, library, &bus, daemon, references,
            )
            .await
        }
        None => None,
    };
    let tunings = match (&benchmarks, &store, &instances) {
        (Some(benchmarks), Some(store), Some(instances)) => {
            start_tunings(benchmarks, store, instances, &bus).await
        }
        _ => None,
    };
    let memory_bandwidth = Arc::new(HostMemoryBandwidth::open(&paths.data_dir));
    if options.measure_memory_bandwidth {
        let size = telemetry
            .latest()
            .and_then(|frame| probe_size_for(&frame.sample.host));
        memory_bandwidth.measure_if_never_measured(size);
    }
    let (stop, stop_rx) = watch::channel(false);
    let fleet = start_fleet(&options, store.as_ref(), stop_rx.clone()).await?;
    if let (Some(gateway), Some(fleet)) = (&gateway, &fleet) {
        gateway.serve_elsewhere(rigdeck_fleet::gateway_peers::RigGateways::new(fleet));
    }
    let gangs = match (&instances, &store) {
        (Some(instances), Some(store)) => Some(crate::gang::Gangs::new(
            instances.clone(),
            store.clone(),
            fleet.clone(),
            downloads.clone(),
        )),
        _ => None,
    };
    // Gangs an earlier daemon left running: their heads here stopped before the API serves.
    let left_gangs = match &gangs {
        Some(gangs) => gangs.take_over_left().await,
        None => Vec::new(),
    };
    let state = Arc::new(AppState {
        stopping: stop_rx.clone(),
        token: token.clone(),
        allowed_hosts: AllowedHosts::new(local_addr, &options.allow_hosts),
        telemetry: telemetry.clone(),
        library,
        history_available: store.is_some(),
        settings: Mutex::new(settings),
        settings_tx,
        model_runs: rigdeck_core::model_runs::ModelRuns::new(bus.clone()),
        bus,
        started_at_ms: rigdeck_core::now_ms(),
        bind: local_addr,
        data_dir: paths.data_dir.clone(),
        ws_clients: AtomicUsize::new(0),
        store,
        instances,
        engines_at_start,
        downloads,
        hub_token_file: paths.hub_token_file(),
        hub_headers: Default::default(),
        dry_runs: Default::default(),
        gateway,
        chat,
        benchmarks,
        tunings,
        memory_bandwidth,
        references,
        quality_dir: paths.quality_dir(),
        token_counts: Default::default(),
        gangs,
        fleet,
    });
    if let Some(fleet) = state
        .fleet
        .as_ref()
        .filter(|f| f.listen_address().is_some())
    {
        fleet.serve_api(http::fleet_api_router(state.clone()));
        if let Some(store) = state.store.clone() {
            fleet.lend_with(Arc::new(move || {
                let store = store.clone();
                Box::pin(async move { http::lending_build(&store).await })
            }));
        }
    }
    tokio::spawn(http::resume_left(state.clone(), left_gangs));
    let gateway_listener = match options.gateway_bind {
        Some(address) => {
            let listener = bind(address).await?;
            let bound = listener
                .local_addr()
                .context("cannot read the gateway's address")?;
            let serving = tokio::spawn(http::serve_gateway(
                listener,
                state.clone(),
                limits,
                stop_rx.clone(),
            ));
            Some((bound, serving))
        }
        None => None,
    };
    let (gateway_addr, gateway_serving) = gateway_listener.unzip();
    let serving = tokio::spawn(http::serve(listener, state.clone(), limits, stop_rx));
    Ok(RunningServer {
        gateway_addr,
        gateway_serving,
        local_addr,
        token,
        state,
        stop,
        serving,
        telemetry,
    })
}

/// Where the hard open-files limit is "unlimited", the soft one is raised to this (Linux's
/// default `fs.nr_open`; the kernel refuses more).
const OPEN_FILES_WHEN_UNLIMITED: u64 = 1 << 20;

/// Lifts the soft open-files limit to the hard one (systemd starts services with 1 024, which a
/// few hundred idle connections would use up) and logs it; the limit in force afterwards
/// (`None`: unlimited).
fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let target = before.maximum.unwrap_or(OPEN_FILES_WHEN_UNLIMITED);
    let current = match before.current {
        Some(current) if current < target => current,
        already => {
            tracing::info!("open-files limit: {}", describe_limit(already));
            return already;
        }
    };
    let raised = Rlimit {
        current: Some(target),
        maximum: before.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!("open-files limit: {target} (raised from {current})");
            Some(target)
        }
        Err(err) => {
            tracing::warn!(
                "open-files limit stays at {current} (cannot raise it to {target}: {err}); raise it with LimitNOFILE= in the service's unit or `ulimit -n`"
            );
            Some(current)
        }
    }
}

fn describe_limit(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |limit| limit.to_string())
}

/// How often the gateway looks for models idle past their TTL (cheap: states read from memory),
/// so a timeout of a few seconds is kept to about a second.
const IDLE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The gateway over the instances, with its idle timer (which ends with the gateway).
async fn start_gateway(
    store: &Store,
    instances: &Arc<Instances>,
) -> Option<Arc<rigdeck_core::gateway::Gateway>> {
    let fleet = Arc::new(InstancesFleet::new(instances.clone(), store.clone()));
    let options = rigdeck_core::gateway::GatewayOptions::default();
    match rigdeck_core::gateway::Gateway::new(fleet, store.pool().clone(), options).await {
        Ok(gateway) => {
            gateway.spawn_idle_timer(IDLE_CHECK_EVERY);
            Some(gateway)
        }
        Err(err) => {
            tracing::warn!("the gateway is off: cannot read its API keys: {err}");
            None
        }
    }
}

/// The fleet: this daemon's identity (made at first start) and, when `fleet_bind` asks for it,
/// the channel's listener. Without a database it is off; a listener asked for that cannot
/// start stops the start.
async fn start_fleet(
    options: &ServeOptions,
    store: Option<&Store>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<Arc<rigdeck_fleet::Fleet>>> {
    let asked = options.fleet_bind.is_some();
    let Some(store) = store else {
        anyhow::ensure!(
            !asked,
            "the fleet needs the database, which cannot be opened (see above): fix that, or start without --fleet-bind"
        );
        return Ok(None);
    };
    let dir = options.paths.config_dir.join("fleet");
    let pool = store.pool().clone();
    let version = env!("CARGO_PKG_VERSION");
    match rigdeck_fleet::start(&dir, pool, options.fleet_bind, version, stop).await {
        Ok(fleet) => Ok(Some(fleet)),
        Err(err) if asked => Err(err.into()),
        Err(err) => {
            tracing::warn!("the fleet is off: {err}");
            Ok(None)
        }
    }
}

/// How long a shutdown waits for benchmarks to store how they ended.
const BENCH_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The daemon's address as a local client reaches it (an unspecified bind means loopback).
fn loopback_address(bound: std::net::SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    } else {
        bound.ip()
    };
    format!("{}:{}", http::host_literal(ip), bound.port())
}

/// Benchmarks; runs a stopped daemon left unfinished are marked aborted.
async fn start_benchmarks(
    store: &Store,
    instances: &Option<Arc<Instances>>,
    telemetry: Arc<rigdeck_core::telemetry::TelemetryHandle>,
    library: rigdeck_core::library::LibraryHandle,
    bus: &EventBus,
    daemon: DaemonAddress,
    references: Arc<References>,
) -> Option<Arc<rigdeck_core::benchmarks::Benchmarks>> {
    let started = rigdeck_core::benchmarks::Benchmarks::start(
        store.clone(),
        instances.clone(),
        telemetry,
        library,
        bus.clone(),
        daemon,
        references,
    )
    .await;
    match started {
        Ok(benchmarks) => Some(benchmarks),
        Err(err) => {
            tracing::warn!("benchmarks are off: {err}");
            None
        }
    }
}

/// Tuning over the benchmarks; tunings a stopped daemon left unfinished are marked aborted.
async fn start_tunings(
    benchmarks: &Arc<rigdeck_core::benchmarks::Benchmarks>,
    store: &Store,
    instances: &Arc<Instances>,
    bus: &EventBus,
) -> Option<Arc<rigdeck_core::benchmarks::tuning::Tunings>> {
    let started = rigdeck_core::benchmarks::tuning::Tunings::start(
        benchmarks.clone(),
        store.clone(),
        instances.clone(),
        bus.clone(),
    )
    .await;
    match started {
        Ok(tunings) => Some(tunings),
        Err(err) => {
            tracing::warn!("tuning is off: {err}");
            None
        }
    }
}

/// Chat over the gateway; replies cut off by the last shutdown are marked interrupted.
async fn start_chat(
    store: &Store,
    gateway: &Arc<rigdeck_core::gateway::Gateway>,
    bus: &EventBus,
) -> Option<Arc<rigdeck_core::chat::Chat>> {
    let events = Arc::new(bus.clone());
    match rigdeck_core::chat::Chat::start(store.pool().clone(), gateway.clone(), events).await {
        Ok(chat) => Some(chat),
        Err(err) => {
            tracing::warn!("chat is off: {err}");
            None
        }
    }
}

/// The download queue: the hub as the environment names it (`HF_ENDPOINT`, `HF_HUB_CACHE` …)
/// with the token Rigdeck keeps, into the download folder of the settings (the Hugging Face
/// cache unless the user chose a folder); a finished download makes the library rescan.
async fn start_downloads(
    store: Store,
    bus: EventBus,
    library: rigdeck_core::library::LibraryHandle,
    settings: watch::Receiver<rigdeck_core::settings::Settings>,
    paths: &AppPaths,
) -> Option<rigdeck_core::downloads::Downloads> {
    use rigdeck_core::hub::cache::Destination;
    use rigdeck_core::hub::config::HubConfig;
    let token_file = paths.hub_token_file();
    let hub: rigdeck_core::downloads::HubSource = Arc::new(move || {
        let config = HubConfig::from_env(Some(&token_file))?;
        let destination = match settings.borrow().download_folder.clone() {
            Some(folder) => Destination::Folder(folder),
            None => Destination::HubCache(config.cache_dir.clone()),
        };
        Ok((config, destination))
    });
    let rescan = move || {
        let library = library.clone();
        tokio::spawn(async move { library.rescan().await });
    };
    let started = rigdeck_core::downloads::Downloads::start(
        store,
        Arc::new(bus),
        hub,
        rigdeck_core::hub::download::FetchOptions::default(),
        rescan,
    )
    .await;
    match started {
        Ok(downloads) => Some(downloads),
        Err(e) => {
            tracing::warn!("model downloads are unavailable: {e}");
            None
        }
    }
}

fn log_autostart(report: &Autostart) {
    if !report.started.is_empty() {
        tracing::info!("autostart: started {}", report.started.join(", "));
    }
    if !report.already_running.is_empty() {
        tracing::info!(
            "autostart: already running (adopted) {}",
            report.already_running.join(", ")
        );
    }
    for (name, why) in &report.skipped {
        tracing::warn!("autostart: skipped '{name}': {why}");
    }
    if let Some(why) = &report.refused {
        tracing::warn!("{why}");
    }
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|err| match err.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "port {} on {} is already in use (another `rigdeck serve`? `ss -ltnp 'sport = :{}'` shows who): stop it, or choose another address with --bind {}:{}",
            addr.port(), addr.ip(), addr.port(), addr.ip(), addr.port().wrapping_add(1)
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "address {} does not belong to this machine: use 127.0.0.1, 0.0.0.0 or one of this machine's own addresses with --bind",
            addr.ip()
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "not allowed to listen on port {}: ports below 1024 need root; choose a higher one with --bind", addr.port()
        ),
        _ => anyhow::Error::new(err).context(format!("cannot listen on {addr}")),
    })
}

/// The daemon keeps running without stored history when the database cannot be used;
/// live telemetry and the 15-minute view still work, and the reason is logged.
async fn open_store(paths: &AppPaths) -> Option<Store> {
    match Store::open(&paths.database_file()).await {
        Ok(store) => Some(store),
        Err(err) => {
            tracing::error!("telemetry history is off: {err}");
            None
        }
    }
}
