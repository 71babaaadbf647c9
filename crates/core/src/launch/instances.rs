//! The instances service the daemon owns: starts profiles under the [`Supervisor`], tracks what
//! runs (state, uptime, address, planned vs. measured memory), stops and restarts, tells the
//! telemetry which GPU processes are Rigdeck's, publishes state changes and log lines as events,
//! and on daemon start adopts or cleans up the engines an earlier run left behind.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::AbortHandle;

mod holds;
mod measure;

use holds::Holds;
pub use holds::InstanceHold;

use crate::calibration::record::StartEstimate;
use crate::engines::registry::{EngineBuild, RegistryError};
use crate::engines::Backend;
use crate::profiles::admission::{
    self, admit, held_by, outstanding, AdmissionError, Claim, Held, PlannedGpu,
};
use crate::profiles::multi_node;
use crate::profiles::profile::{self, LaunchProfile, ProfileError};
use crate::store::launch_profiles::ProfileStoreError;
use crate::store::Store;
use crate::supervisor::{
    wait_until, LaunchSpec, LogLine, Phase, Probe, ProcessHandle, ProcessState, RestartPolicy,
    SuperviseError, Supervisor,
};
use crate::telemetry::StartedByRigdeck;
use rigdeck_telemetry::snapshot::GpuReadout;

/// Big models take minutes to load from disk; this is when "loading" becomes "never healthy".
pub const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a start waits for NVML to show the previous engine's memory released.
pub const RELEASE_WAIT: Duration = Duration::from_secs(30);
const RELEASE_POLL: Duration = Duration::from_millis(250);

/// The latest GPU readout (NVML through the telemetry collector), `None` before the first one.
pub type GpuSource = Arc<dyn Fn() -> Option<GpuReadout> + Send + Sync>;

/// Before the supervisor restarts a crashed engine, wait (bounded) until NVML no longer lists
/// the ended process: seed 004's restart OOMed while the old process's VRAM was still held.
fn release_gate(gpus: GpuSource, wait: Duration) -> crate::supervisor::RestartGate {
    Arc::new(move |pid| {
        let gpus = gpus.clone();
        Box::pin(async move {
            let released =
                || std::future::ready(gpus().is_none_or(|r| held_by(&r, &[pid]).is_empty()));
            if !wait_until(released, wait, RELEASE_POLL).await {
                tracing::warn!(
                    "pid {pid} still holds GPU memory after {} s; restarting anyway",
                    wait.as_secs()
                );
            }
        })
    })
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Profile(#[from] ProfileStoreError),
    #[error(transparent)]
    Invalid(#[from] ProfileError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    #[error(transparent)]
    Supervise(#[from] SuperviseError),
    #[error("no instance named '{0}' is known: start it with `rigdeck run {0}` (`rigdeck ps` lists instances)")]
    NotRunning(String),
    #[error("cannot find a free port on {host}: {source}; set a fixed port in the profile")]
    NoFreePort {
        host: String,
        source: std::io::Error,
    },
}

/// An instance as the API and the UI show it.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceView {
    #[serde(flatten)]
    pub state: ProcessState,
    pub host: Option<String>,
    pub port: Option<u16>,
    /// Since the current run became ready.
    pub uptime_ms: Option<i64>,
    /// Found running after a daemon restart and taken over (not restarted on failure).
    pub adopted: bool,
    pub planned_memory: Vec<PlannedGpu>,
    /// What NVML shows the engine's pid holding now.
    pub measured_memory: Vec<Held>,
    pub argv: Vec<String>,
    /// `argv` as one shell-quoted line: the run's real port, not the profile's 0.
    pub command_line: Option<String>,
    /// Uses in progress (gateway requests, chat replies, benchmarks): while any, the idle
    /// timer and eviction leave it running.
    pub holds: usize,
}

/// One engine output line, as the `instance.log` event.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceLog {
    pub name: String,
    #[serde(flatten)]
    pub line: LogLine,
}

/// What [`Instances::recover`] did with the engines an earlier daemon run left.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    pub adopted: Vec<String>,
    pub cleaned_up: Vec<String>,
    /// Name and why it could not be cleaned up.
    pub failed: Vec<(String, String)>,
}

/// What the daemon did about engines as it started: the last run's engines recovered, then the
/// autostart profiles. Kept for the Engines page (`GET /api/v1/status`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StartReport {
    pub recovery: Recovery,
    pub autostart: Autostart,
}

/// What [`Instances::autostart`] did at daemon start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Autostart {
    /// Started now, all admitted together.
    pub started: Vec<String>,
    /// Already running (adopted from the last run): left as they are.
    pub already_running: Vec<String>,
    /// Profiles that cannot start at all (build removed or missing), with why; the others
    /// still start.
    pub skipped: Vec<(String, String)>,
    /// Why the set was refused or failed (admission: nothing of it started).
    pub refused: Option<String>,
}

#[derive(Default)]
struct Meta {
    host: Option<String>,
    port: Option<u16>,
    planned: Vec<PlannedGpu>,
    argv: Vec<String>,
    /// The engine's `--api-key` (the gateway sends it upstream).
    api_key: Option<String>,
    adopted: bool,
    log_forwarder: Option<AbortHandle>,
    /// The plan made as the engine started, measured against once it is ready.
    estimate: Option<StartEstimate>,
}

/// Where the instances service reports what happens: every state change (the full view) and
/// every output line. The daemon's event bus implements it; the service knows no event enum.
pub trait InstanceEvents: Send + Sync + 'static {
    fn state(&self, view: InstanceView);
    fn log(&self, line: InstanceLog);
}

/// Starts, tracks and stops engines from launch profiles.
pub struct Instances {
    supervisor: Supervisor,
    store: Store,
    run_dir: PathBuf,
    ours: StartedByRigdeck,
    events: Arc<dyn InstanceEvents>,
    gpus: GpuSource,
    meta: Mutex<HashMap<String, Meta>>,
    /// Pids of engines that ended but that NVML may still list; a start waits for them.
    ended: Mutex<Vec<u32>>,
    /// Per profile, the lock its start, stop and restart take: one lifecycle change at a time.
    lifecycles: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Held from the admission decision until the admitted engines are registered, so two
    /// starts never both spend the same free VRAM.
    admission: tokio::sync::Mutex<()>,
    /// Who uses each instance (requests, replies, benchmarks): idle stops and eviction wait.
    holds: Arc<Holds>,
    ready_timeout: Duration,
    release_wait: Duration,
}

impl Instances {
    /// Logs go to `<data_dir>/logs`, pid files to `<data_dir>/run`. Must be called within a
    /// tokio runtime (a task follows the supervisor's state changes).
    pub fn new(
        store: Store,
        data_dir: &std::path::Path,
        ours: StartedByRigdeck,
        events: impl InstanceEvents,
        gpus: GpuSource,
    ) -> Arc<Self> {
        Self::with_timeouts(
            store,
            data_dir,
            ours,
            events,
            gpus,
            READY_TIMEOUT,
            RELEASE_WAIT,
        )
    }

    pub fn with_timeouts(
        store: Store,
        data_dir: &std::path::Path,
        ours: StartedByRigdeck,
        events: impl InstanceEvents,
        gpus: GpuSource,
        ready_timeout: Duration,
        release_wait: Duration,
    ) -> Arc<Self> {
        let run_dir = data_dir.join("run");
        let supervisor = Supervisor::new(data_dir.join("logs"), &run_dir)
            .with_restart_gate(release_gate(gpus.clone(), release_wait));
        let this = Arc::new(Self {
            supervisor,
            store,
            run_dir,
            ours,
            events: Arc::new(events),
            gpus,
            meta: Mutex::new(HashMap::new()),
            ended: Mutex::new(Vec::new()),
            lifecycles: Mutex::new(HashMap::new()),
            admission: tokio::sync::Mutex::new(()),
            holds: Arc::new(Holds::default()),
            ready_timeout,
            release_wait,
        });
        let mut states = this.supervisor.subscribe();
        let weak: Weak<Self> = Arc::downgrade(&this);
        tokio::spawn(async move {
            loop {
                match states.recv().await {
                    Ok(state) => match weak.upgrade() {
                        Some(this) => {
                            let adopted_crash = this.is_adopted_crash(&state);
                            if state.is_ready() {
                                tokio::spawn(this.clone().measure_after_load(state.clone()));
                            }
                            this.on_state(state.clone());
                            if adopted_crash {
                                tokio::spawn(this.restart_adopted(state.name));
                            }
                        }
                        None => break,
                    },
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => break,
                }
            }
        });
        this
    }

    /// An adopted engine (not our child) that ended on its own: the supervisor's restart policy
    /// never covered it, so [`Self::restart_adopted`] does.
    fn is_adopted_crash(&self, state: &ProcessState) -> bool {
        matches!(state.phase, Phase::Crashed { .. })
            && lock(&self.meta).get(&state.name).is_some_and(|m| m.adopted)
    }

    /// Starts an adopted engine that died again, through the normal path (the wait for its
    /// VRAM to be released, admission), when its profile restarts on failure. From then on it
    /// is our child and the supervisor's policy applies.
    async fn restart_adopted(self: Arc<Self>, name: String) {
        let profile = match self.store.launch_profile(&name).await {
            Ok(profile) => profile,
            Err(err) => {
                tracing::warn!("adopted engine '{name}' ended; not restarted: {err}");
                return;
            }
        };
        if profile.restart.policy() == RestartPolicy::Never {
            return;
        }
        tracing::info!("adopted engine '{name}' ended; starting it again (restart on failure)");
        if let Err(err) = self.start(&name, false).await {
            tracing::warn!("could not restart engine '{name}' after it ended: {err}");
        }
    }

    /// Registers pids with the telemetry, remembers ended ones, publishes `instance.state`.
    fn on_state(&self, state: ProcessState) {
        if let Some(pid) = state.pid {
            if state.is_running() {
                self.ours.insert(pid, &state.name);
            } else {
                // Stays "ours" until NVML shows its memory gone (see `prune_ended`).
                self.remember_ended(&state);
            }
        }
        let view = self.view_of(state);
        self.events.state(view);
    }

    fn view_of(&self, state: ProcessState) -> InstanceView {
        let meta = lock(&self.meta);
        let meta = meta.get(&state.name);
        let measured = match (state.pid, state.is_running(), (self.gpus)()) {
            (Some(pid), true, Some(gpus)) => held_by(&gpus, &engine_pids(pid)),
            _ => Vec::new(),
        };
        let uptime_ms = match (state.is_ready(), state.ready_at_ms) {
            (true, Some(at)) => Some(crate::now_ms() - at),
            _ => None,
        };
        let argv = meta.map(|m| m.argv.clone()).unwrap_or_default();
        InstanceView {
            host: meta.and_then(|m| m.host.clone()),
            port: meta.and_then(|m| m.port),
            uptime_ms,
            adopted: meta.is_some_and(|m| m.adopted),
            planned_memory: meta.map(|m| m.planned.clone()).unwrap_or_default(),
            measured_memory: measured,
            command_line: (!argv.is_empty()).then(|| profile::display_command_line(&argv)),
            argv,
            holds: self.holds.count(&state.name),
            state,
        }
    }

    /// Every instance started or adopted since the daemon started, by name.
    pub fn list(&self) -> Vec<InstanceView> {
        let mut views: Vec<InstanceView> = self
            .supervisor
            .processes()
            .iter()
            .map(|h| self.view_of(h.state()))
            .collect();
        views.sort_by(|a, b| a.state.name.cmp(&b.state.name));
        views
    }

    pub fn get(&self, name: &str) -> Option<InstanceView> {
        self.supervisor.get(name).map(|h| self.view_of(h.state()))
    }

    /// The state of an instance and where it listens (the gateway asks at every request, so
    /// this skips what the full view reads: NVML, the command line).
    pub fn phase_and_address(&self, name: &str) -> Option<(Phase, String, Option<u16>)> {
        let state = self.supervisor.get(name)?.state();
        let meta = lock(&self.meta);
        let meta = meta.get(name);
        let host = meta
            .and_then(|m| m.host.as_deref())
            .map_or_else(|| "127.0.0.1".to_owned(), probe_host);
        Some((state.phase, host, meta.and_then(|m| m.port)))
    }

    /// The engine's own API key, which requests to it must carry.
    pub fn engine_api_key(&self, name: &str) -> Option<String> {
        lock(&self.meta).get(name).and_then(|m| m.api_key.clone())
    }

    pub fn handle(&self, name: &str) -> Result<ProcessHandle, LaunchError> {
        self.supervisor
            .get(name)
            .ok_or_else(|| LaunchError::NotRunning(name.to_owned()))
    }

    /// Starts one profile (see [`Instances::start_many`]).
    pub async fn start(&self, name: &str, force: bool) -> Result<InstanceView, LaunchError> {
        let mut views = self.start_many(&[name.to_owned()], force).await?;
        views
            .pop()
            .ok_or_else(|| LaunchError::NotRunning(name.to_owned()))
    }

    /// Starts profiles together (e.g. at boot): all are admitted as one, so two that cannot
    /// coexist on the same GPUs are refused together. First waits (bounded) until NVML no
    /// longer lists engines that just ended; `force` skips the admission refusal and the
    /// refusal after that wait. Each profile's lifecycle lock is held throughout, so a second
    /// start of the same profile finds the first one running and is refused before it changes
    /// anything.
    pub async fn start_many(
        &self,
        names: &[String],
        force: bool,
    ) -> Result<Vec<InstanceView>, LaunchError> {
        let _locked = self.lock_lifecycles(names).await;
        self.start_many_locked(names, force).await
    }

    async fn start_many_locked(
        &self,
        names: &[String],
        force: bool,
    ) -> Result<Vec<InstanceView>, LaunchError> {
        let mut prepared = Vec::new();
        for name in names {
            let profile = self.store.launch_profile(name).await?;
            if profile.multi_node.is_some() {
                return Err(ProfileError::BadMultiNode {
                    reason: format!("profile '{name}' runs across boxes and starts as a gang, with its followers: start it with POST /api/v1/profiles/{name}/start (the Start button)"),
                }
                .into());
            }
            if !profile.lenders.is_empty() {
                return Err(ProfileError::BadLenders {
                    reason: format!("profile '{name}' borrows devices from other rigs and starts as a gang, their leases first: start it with POST /api/v1/profiles/{name}/start (the Start button)"),
                }
                .into());
            }
            let build = self.build_of(&profile).await?;
            self.refuse_if_running(name)?;
            prepared.push((profile, build));
        }
        self.launch(prepared, force).await
    }

    /// Starts a profile as given rather than as saved (a tuning trial: the saved profile with
    /// some knobs changed), under its name, through the same release wait and admission.
    pub async fn start_variant(
        &self,
        profile: LaunchProfile,
        force: bool,
    ) -> Result<InstanceView, LaunchError> {
        let name = profile.name.clone();
        let _locked = self.lock_lifecycles(std::slice::from_ref(&name)).await;
        let build = self.build_of(&profile).await?;
        self.refuse_if_running(&name)?;
        let mut views = self.launch(vec![(profile, build)], force).await?;
        views.pop().ok_or(LaunchError::NotRunning(name))
    }

    /// Takes the lifecycle locks of `names`, in name order (two starts of overlapping sets
    /// cannot each hold one the other waits for).
    async fn lock_lifecycles(&self, names: &[String]) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut guards = Vec::with_capacity(sorted.len());
        for name in sorted {
            let lifecycle = lock(&self.lifecycles)
                .entry(name.clone())
                .or_default()
                .clone();
            guards.push(lifecycle.lock_owned().await);
        }
        guards
    }

    /// Holds `name` for a use (a request, a reply, a benchmark): while the hold lives, the idle
    /// timer and eviction leave the instance alone. Waits while the instance is being stopped
    /// for idleness or eviction, so the caller then finds it stopped rather than cut mid-use.
    pub async fn hold(&self, name: &str) -> InstanceHold {
        self.holds.hold(name).await
    }

    /// How many uses hold `name` now.
    pub fn holds_on(&self, name: &str) -> usize {
        self.holds.count(name)
    }

    /// Stops `name` for idleness or to make room, unless something holds it: the check and
    /// the draining mark are one step, so a use that arrives meanwhile waits for the stop and
    /// then starts it again instead of being cut. `Ok(None)` when it was held (nothing done).
    pub async fn stop_if_unheld(&self, name: &str) -> Result<Option<InstanceView>, LaunchError> {
        let Some(_drain) = self.holds.begin_drain(name) else {
            return Ok(None);
        };
        self.stop(name).await.map(Some)
    }

    async fn build_of(&self, profile: &LaunchProfile) -> Result<EngineBuild, LaunchError> {
        self.store
            .engine_build(profile.engine_build_id)
            .await?
            .ok_or_else(|| {
                ProfileError::UnknownBuild {
                    profile: profile.name.clone(),
                    id: profile.engine_build_id,
                }
                .into()
            })
    }

    fn refuse_if_running(&self, name: &str) -> Result<(), LaunchError> {
        match self.supervisor.get(name) {
            Some(handle) if !handle.is_finished() => Err(SuperviseError::AlreadyRunning {
                name: name.to_owned(),
                pid: handle.pid().unwrap_or_default(),
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// The release wait, admission (unless forced), then each start, under the admission lock
    /// so that the engines admitted are registered before anyone else is admitted.
    async fn launch(
        &self,
        prepared: Vec<(LaunchProfile, EngineBuild)>,
        force: bool,
    ) -> Result<Vec<InstanceView>, LaunchError> {
        let _admission = self.admission.lock().await;
        self.wait_for_release(&prepared, force).await?;
        if !force {
            self.admit(&prepared)?;
        }
        let mut views = Vec::new();
        for (profile, build) in prepared {
            views.push(self.start_one(profile, &build).await?);
        }
        Ok(views)
    }

    /// Starts every profile marked `autostart` (call after [`Instances::recover`]), together
    /// through [`Instances::start_many`]: when their planned memory cannot coexist with each
    /// other and what the GPUs already hold, none is started and `refused` says why. Profiles
    /// already running (adopted) are left alone; ones whose build is gone are skipped.
    pub async fn autostart(&self) -> Autostart {
        let mut report = Autostart::default();
        let profiles = match self.store.launch_profiles().await {
            Ok(profiles) => profiles,
            Err(err) => {
                report.refused = Some(format!("cannot read the launch profiles: {err}"));
                return report;
            }
        };
        let mut names = Vec::new();
        for profile in profiles.into_iter().filter(|p| p.autostart) {
            if self
                .supervisor
                .get(&profile.name)
                .is_some_and(|h| !h.is_finished())
            {
                report.already_running.push(profile.name);
                continue;
            }
            let usable = match self.store.engine_build(profile.engine_build_id).await {
                Ok(Some(build)) => profile::check_build(&build).map_err(|e| e.to_string()),
                Ok(None) => Err(ProfileError::UnknownBuild {
                    profile: profile.name.clone(),
                    id: profile.engine_build_id,
                }
                .to_string()),
                Err(err) => Err(err.to_string()),
            };
            match usable {
                Ok(()) => names.push(profile.name),
                Err(why) => report.skipped.push((profile.name, why)),
            }
        }
        if names.is_empty() {
            return report;
        }
        match self.start_many(&names, false).await {
            Ok(views) => report.started = views.into_iter().map(|v| v.state.name).collect(),
            Err(err) => {
                // Admission refuses the whole set before anything starts; a later failure
                // (one engine's spawn) can leave the ones before it running: say which.
                report.started = names
                    .iter()
                    .filter(|n| self.supervisor.get(n).is_some_and(|h| !h.is_finished()))
                    .cloned()
                    .collect();
                report.refused = Some(format!("autostart of {} refused: {err}", names.join(", ")));
            }
        }
        report
    }

    fn admit(&self, prepared: &[(LaunchProfile, EngineBuild)]) -> Result<(), LaunchError> {
        let Some(gpus) = (self.gpus)() else {
            return Ok(());
        };
        let pending: Vec<(String, Vec<PlannedGpu>)> = self
            .supervisor
            .processes()
            .iter()
            .map(ProcessHandle::state)
            .filter(|s| matches!(s.phase, Phase::Starting | Phase::Loading { .. }))
            .filter_map(|s| {
                let meta = lock(&self.meta);
                let planned = &meta.get(&s.name)?.planned;
                Some((s.name.clone(), outstanding(planned, s.pid, &gpus)))
            })
            .collect();
        let pending: Vec<Claim<'_>> = pending
            .iter()
            .map(|(name, planned)| Claim { name, planned })
            .collect();
        let new: Vec<Claim<'_>> = prepared
            .iter()
            .map(|(p, _)| Claim {
                name: &p.name,
                planned: &p.planned_memory,
            })
            .collect();
        admit(&new, &pending, &gpus, admission::ADMISSION_MARGIN_BYTES)?;
        Ok(())
    }

    /// Waits until no engine that ended still holds memory on the GPUs these profiles use
    /// (their planned GPUs; every GPU for a GPU build without a plan; none for a CPU build).
    async fn wait_for_release(
        &self,
        prepared: &[(LaunchProfile, EngineBuild)],
        force: bool,
    ) -> Result<(), LaunchError> {
        let mut gpus_used: Vec<u32> = Vec::new();
        let mut all_gpus = false;
        for (profile, build) in prepared {
            if profile.planned_memory.is_empty() {
                all_gpus |= build.backend != Backend::Cpu;
            }
            gpus_used.extend(profile.planned_memory.iter().map(|p| p.gpu));
        }
        if gpus_used.is_empty() && !all_gpus {
            return Ok(());
        }
        let ended = lock(&self.ended).clone();
        if ended.is_empty() {
            return Ok(());
        }
        let still_held = |readout: &GpuReadout| -> Vec<Held> {
            held_by(readout, &ended)
                .into_iter()
                .filter(|h| all_gpus || gpus_used.contains(&h.gpu))
                .collect()
        };
        let released = wait_until(
            || {
                let held = (self.gpus)().map(|r| still_held(&r)).unwrap_or_default();
                std::future::ready(held.is_empty())
            },
            self.release_wait,
            RELEASE_POLL,
        )
        .await;
        self.prune_ended();
        if released || force {
            return Ok(());
        }
        let held = (self.gpus)().map(|r| still_held(&r)).unwrap_or_default();
        match held.first() {
            Some(h) => Err(AdmissionError::StillHeld {
                pid: h.pid,
                gpu: h.gpu,
                bytes: h.bytes,
                waited_s: self.release_wait.as_secs(),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Forgets ended pids NVML no longer lists (and tells the telemetry they are gone).
    fn prune_ended(&self) {
        let Some(readout) = (self.gpus)() else {
            return;
        };
        let mut ended = lock(&self.ended);
        ended.retain(|&pid| {
            let listed = !held_by(&readout, &[pid]).is_empty();
            if !listed {
                self.ours.remove(pid);
            }
            listed
        });
    }

    async fn start_one(
        &self,
        profile: LaunchProfile,
        build: &EngineBuild,
    ) -> Result<InstanceView, LaunchError> {
        let port = match u16::try_from(profile.port) {
            Ok(0) => free_port(&profile.host)?,
            Ok(port) => port,
            Err(_) => return Err(ProfileError::PortOutOfRange { port: profile.port }.into()),
        };
        let numactl = profile
            .numa_node
            .and_then(|_| crate::engines::find_in_path("numactl"));
        let argv = profile::argv(&profile, build, port, numactl.as_deref())?;
        // The key goes through the environment where the engine reads it there: `ps` shows
        // every process's arguments to every user.
        let (argv, key_variable) = profile::key_into_environment(argv, build.kind);
        let Some((program, args)) = argv.split_first() else {
            return Err(ProfileError::NumactlMissing.into());
        };
        let mut spec = LaunchSpec::new(
            profile.name.clone(),
            program,
            format!("http://{}:{port}/health", probe_host(&profile.host)),
        );
        spec.args = args.to_vec();
        spec.env = profile.engine_env().into_iter().collect();
        if let Some((variable, key)) = key_variable {
            spec.env.push((variable.to_owned(), key));
        }
        // Files an engine writes where it runs (ik_llama.cpp's llama.log) land beside its pid
        // file, not wherever the daemon was started.
        let workdir = self.run_dir.join("work").join(&profile.name);
        if std::fs::create_dir_all(&workdir).is_ok() {
            spec.working_dir = Some(workdir);
        }
        spec.restart = profile.restart.policy();
        spec.health.ready_timeout = self.ready_timeout;
        if let Some(seat) = &profile.seat {
            spec.env.extend(multi_node::env(build.kind, seat));
            spec.health.process_only = seat.is_follower();
            // A gang member ends with its gang: the gang restarts every member together.
            spec.restart = RestartPolicy::Never;
        }
        let estimate = self.estimate_for(&profile, build).await;
        let handle = self.supervisor.start(spec).await?;
        // Recorded only now that the spawn succeeded: a refused start changes nothing.
        let old = lock(&self.meta).insert(
            profile.name.clone(),
            Meta {
                host: Some(profile.host.clone()),
                port: Some(port),
                planned: profile.planned_memory.clone(),
                argv: profile::key_masked(&argv),
                api_key: profile.api_key.clone(),
                adopted: false,
                log_forwarder: None,
                estimate,
            },
        );
        if let Some(forwarder) = old.and_then(|m| m.log_forwarder) {
            forwarder.abort();
        }
        if let Some(pid) = handle.pid() {
            self.ours.insert(pid, handle.name());
        }
        self.forward_logs(&handle);
        tracing::info!(
            "started '{}' (pid {:?}) on {}:{port}",
            profile.name,
            handle.pid(),
            profile.host
        );
        Ok(self.view_of(handle.state()))
    }

    /// Reports each output line (the daemon publishes it as an `instance.log` event).
    fn forward_logs(&self, handle: &ProcessHandle) {
        let mut lines = handle.logs().subscribe();
        let events = self.events.clone();
        let name = handle.name().to_owned();
        let task = tokio::spawn(async move {
            loop {
                match lines.recv().await {
                    Ok(line) => events.log(InstanceLog {
                        name: name.clone(),
                        line,
                    }),
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => break,
                }
            }
        });
        if let Some(meta) = lock(&self.meta).get_mut(handle.name()) {
            meta.log_forwarder = Some(task.abort_handle());
        }
    }

    /// SIGTERM, then SIGKILL of the group after the stop timeout.
    pub async fn stop(&self, name: &str) -> Result<InstanceView, LaunchError> {
        let _locked = self.lock_lifecycles(&[name.to_owned()]).await;
        self.stop_locked(name).await
    }

    async fn stop_locked(&self, name: &str) -> Result<InstanceView, LaunchError> {
        let handle = self.handle(name)?;
        let state = handle.stop().await?;
        self.remember_ended(&state);
        Ok(self.view_of(state))
    }

    /// Recorded here as well as by the event task, so a start right after a stop already
    /// waits for this pid's memory (the task may not have seen the state yet).
    fn remember_ended(&self, state: &ProcessState) {
        if let Some(pid) = state.pid {
            let mut ended = lock(&self.ended);
            if !ended.contains(&pid) {
                ended.push(pid);
            }
        }
    }

    /// Stops (if running) and starts again, waiting for the old memory to be released; no
    /// other start or stop of the profile can come in between.
    pub async fn restart(&self, name: &str, force: bool) -> Result<InstanceView, LaunchError> {
        let names = [name.to_owned()];
        let _locked = self.lock_lifecycles(&names).await;
        if self.supervisor.get(name).is_some() {
            self.stop_locked(name).await?;
        }
        let mut views = self.start_many_locked(&names, force).await?;
        views
            .pop()
            .ok_or_else(|| LaunchError::NotRunning(name.to_owned()))
    }

    /// Log lines: after `after` (a `seq`, for following), else matching `search`, else all,
    /// then the last `tail` of those.
    pub fn logs(
        &self,
        name: &str,
        search: Option<&str>,
        after: Option<u64>,
        tail: usize,
    ) -> Result<Vec<LogLine>, LaunchError> {
        let handle = self.handle(name)?;
        let logs = handle.logs();
        let mut lines = match (after, search) {
            (Some(seq), _) => logs.since(seq.saturating_add(1)),
            (None, Some(needle)) if !needle.is_empty() => logs.search(needle),
            _ => logs.tail(tail),
        };
        if after.is_some() {
            if let Some(needle) = search.filter(|s| !s.is_empty()) {
                lines.retain(|l| l.text.contains(needle));
            }
        }
        let skip = lines.len().saturating_sub(tail);
        Ok(lines.split_off(skip))
    }

    /// On daemon start: engines an earlier run left are adopted when their health endpoint
    /// answers, and ended (their whole process group) otherwise, so no orphan holds VRAM.
    pub async fn recover(&self) -> Recovery {
        let mut recovery = Recovery::default();
        let orphans = match Supervisor::recover(&self.run_dir).await {
            Ok(orphans) => orphans,
            Err(err) => {
                tracing::warn!("cannot look for engines of an earlier run: {err}");
                return recovery;
            }
        };
        for orphan in orphans {
            let name = orphan.name().to_owned();
            if orphan.leader_alive && orphan.health == Probe::Ready {
                let record = orphan.record.clone();
                let (host, port) = host_port(&record.health_url);
                let argv: Vec<String> = std::iter::once(record.program.display().to_string())
                    .chain(record.args.iter().cloned())
                    .collect();
                // A key passed through the environment is not in the pid file: the profile has it.
                let api_key = match api_key_in(&record.args) {
                    Some(key) => Some(key),
                    None => self
                        .store
                        .launch_profile(&name)
                        .await
                        .ok()
                        .and_then(|p| p.api_key),
                };
                lock(&self.meta).insert(
                    name.clone(),
                    Meta {
                        host,
                        port,
                        argv: profile::key_masked(&argv),
                        api_key,
                        adopted: true,
                        ..Meta::default()
                    },
                );
                match self.supervisor.adopt(orphan) {
                    Ok(handle) => {
                        if let Some(pid) = handle.pid() {
                            self.ours.insert(pid, handle.name());
                        }
                        tracing::info!(
                            "adopted engine '{name}' (pid {}) left running by an earlier run",
                            record.pid
                        );
                        recovery.adopted.push(name);
                    }
                    Err(err) => {
                        tracing::warn!("cannot adopt engine '{name}': {err}");
                        recovery.failed.push((name, err.to_string()));
                    }
                }
                continue;
            }
            match orphan.cleanup().await {
                Ok(()) => {
                    tracing::info!(
                        "stopped engine '{name}' (pid {}) left by an earlier run: its health endpoint did not answer",
                        orphan.record.pid
                    );
                    recovery.cleaned_up.push(name);
                }
                Err(err) => {
                    tracing::error!("cannot clean up engine '{name}': {err}");
                    recovery.failed.push((name, err.to_string()));
                }
            }
        }
        recovery
    }

    /// Stops every engine (orderly daemon shutdown).
    pub async fn stop_all(&self) {
        for err in self.supervisor.stop_all().await {
            tracing::error!("{err}");
        }
    }
}

/// An engine's processes: its whole process group (it leads one), since vLLM and SGLang hold
/// VRAM in worker processes rather than in the process Rigdeck started.
fn engine_pids(pid: u32) -> Vec<u32> {
    let Ok(pgid) = i32::try_from(pid) else {
        return vec![pid];
    };
    let mut pids: Vec<u32> = crate::supervisor::process::live_group_members(pgid)
        .into_iter()
        .filter_map(|p| u32::try_from(p).ok())
        .collect();
    if !pids.contains(&pid) {
        pids.push(pid);
    }
    pids
}

/// Host and port of `http://host:port/health` (from an adopted engine's pid file).
fn host_port(url: &str) -> (Option<String>, Option<u16>) {
    let authority = url
        .strip_prefix("http://")
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or_default();
    match authority.rsplit_once(':') {
        Some((host, port)) => (
            Some(host.trim_matches(['[', ']']).to_owned()),
            port.parse().ok(),
        ),
        None => (Some(authority.to_owned()), None),
    }
}

/// The health probe needs an address to connect to: "every interface" means loopback will do.
/// The value after `--api-key` in an adopted engine's recorded arguments.
fn api_key_in(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "--api-key")?;
    args.get(at + 1).cloned()
}

fn probe_host(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => host.to_owned(),
    }
}

/// Asks the kernel for a free port on `host`. Another program could take it before the engine
/// binds; the engine then crashes with `port_in_use`, and the next start picks again. The
/// exports use it too, for a profile without a fixed port (see `export::export_port`).
pub(crate) fn free_port(host: &str) -> Result<u16, LaunchError> {
    let err = |source| LaunchError::NoFreePort {
        host: host.to_owned(),
        source,
    };
    let ip: IpAddr = host.parse().map_err(|_| {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not an IP address",
        ))
    })?;
    let listener = std::net::TcpListener::bind((ip, 0)).map_err(err)?;
    Ok(listener.local_addr().map_err(err)?.port())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
