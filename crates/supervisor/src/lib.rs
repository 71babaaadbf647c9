//! Process supervision for inference engines: start an engine from an argv vector in its own
//! process group, capture its output, follow it through loading to ready, classify its crashes,
//! restart it by policy, stop it without leaving anything behind, and find engines again after
//! the daemon itself restarted.
//!
//! ```text
//! Starting → Loading{progress} → Ready → Stopping → Stopped
//!     └──────────┴───────────────┴──→ Crashed{cause, last lines} ─(policy)→ Starting (attempt + 1)
//! ```
//!
//! Files: `<log_dir>/<name>.log` (rotated by size), `<run_dir>/<name>.json` (pid file, present
//! while the engine runs) and `<run_dir>/<name>.stdout` / `.stderr` (what the engine writes, with
//! `.offset` records of how far the daemon has read them; present while the engine runs). Every
//! engine gets a pid file before `start` returns, and a daemon that comes back calls
//! [`Supervisor::recover`] to adopt or clean up what the last one left running, so no forgotten
//! engine holds VRAM; an adopted engine's output is followed on from the recorded offsets.

mod adopt;
pub mod classify;
mod error;
pub mod health;
pub mod logs;
mod output;
pub mod pidfile;
pub mod process;
pub mod restart;
mod spec;
mod state;
mod supervised;
mod task;
mod wait;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::broadcast;
use tokio::task::AbortHandle;

pub use adopt::Orphan;
pub use classify::{CrashCause, ExitFacts};
pub use error::SuperviseError;
pub use health::Probe;
pub use logs::{LineSplitter, LogBuffer, LogLimits, LogLine, LogStream};
pub use pidfile::PidRecord;
pub use spec::{name_problem, HealthCheck, LaunchSpec, RestartPolicy};
pub use state::{PendingRestart, Phase, ProcessState};
pub use supervised::ProcessHandle;
pub use wait::wait_until;

/// How many state changes a slow event subscriber may fall behind.
const EVENT_BACKLOG: usize = 256;

/// Starts and watches engines. Dropping it stops watching but leaves the engines running,
/// exactly as a daemon crash would: they are found again by [`Supervisor::recover`]. To end
/// them on an orderly shutdown, call [`Supervisor::stop_all`] first.
/// Awaited before an automatic restart, with the pid of the run that ended: the daemon uses it
/// to wait until the GPUs have released that process's memory (a restart into memory that is
/// still held fails with out-of-memory).
pub type RestartGate = std::sync::Arc<
    dyn Fn(u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

pub struct Supervisor {
    log_dir: PathBuf,
    run_dir: PathBuf,
    limits: LogLimits,
    restart_gate: Option<RestartGate>,
    events: broadcast::Sender<ProcessState>,
    processes: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    handle: ProcessHandle,
    monitor: AbortHandle,
}

impl Supervisor {
    /// A supervisor writing logs to `log_dir` and pid files to `run_dir` (both created on the
    /// first start).
    pub fn new(log_dir: impl Into<PathBuf>, run_dir: impl Into<PathBuf>) -> Self {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        Self {
            log_dir: log_dir.into(),
            run_dir: run_dir.into(),
            limits: LogLimits::default(),
            restart_gate: None,
            events,
            processes: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces the default ring and log file sizes (5 000 lines, 10 MiB × 3 files).
    pub fn with_log_limits(mut self, limits: LogLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets what automatic restarts wait for first (see [`RestartGate`]).
    pub fn with_restart_gate(mut self, gate: RestartGate) -> Self {
        self.restart_gate = Some(gate);
        self
    }

    /// Every state change of every process, in order.
    pub fn subscribe(&self) -> broadcast::Receiver<ProcessState> {
        self.events.subscribe()
    }

    /// Starts an engine. Returns once the process is spawned and its pid file written; follow
    /// its progress through the handle. Must be called within a tokio runtime.
    pub async fn start(&self, spec: LaunchSpec) -> Result<ProcessHandle, SuperviseError> {
        let health = spec.validate()?;
        // Held across the spawn (no await inside) so two starts of one name cannot race.
        let mut processes = self.lock();
        check_not_running(&processes, &spec.name)?;
        check_no_orphan(&self.run_dir, &spec.name)?;
        create_dir(&self.log_dir, "log")?;
        create_dir(&self.run_dir, "run")?;
        let logs = self.open_logs(&spec.name)?;
        let name = spec.name.clone();
        let launch = supervised::Launch {
            spec,
            health,
            logs,
            run_dir: self.run_dir.clone(),
            restart_gate: self.restart_gate.clone(),
        };
        let (handle, task) = supervised::launch(launch, self.events.clone())?;
        processes.insert(
            name,
            Entry {
                handle: handle.clone(),
                monitor: task.abort_handle(),
            },
        );
        Ok(handle)
    }

    /// The process called `name`, running or finished.
    pub fn get(&self, name: &str) -> Option<ProcessHandle> {
        self.lock().get(name).map(|entry| entry.handle.clone())
    }

    /// All processes this supervisor started or adopted.
    pub fn processes(&self) -> Vec<ProcessHandle> {
        self.lock()
            .values()
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// Stops every process (concurrently) and returns the errors of those that did not stop.
    pub async fn stop_all(&self) -> Vec<SuperviseError> {
        let mut stops = tokio::task::JoinSet::new();
        for handle in self.processes() {
            stops.spawn(async move { handle.stop().await });
        }
        let mut errors = Vec::new();
        while let Some(joined) = stops.join_next().await {
            if let Ok(Err(err)) = joined {
                errors.push(err);
            }
        }
        errors
    }

    /// Finds engines that an earlier daemon run started and that still run (see [`Orphan`]);
    /// removes pid files of engines that are gone or whose pid now belongs to another process.
    pub async fn recover(run_dir: &Path) -> Result<Vec<Orphan>, SuperviseError> {
        adopt::recover(run_dir).await
    }

    /// Takes an orphan under supervision: its state is followed by polling `/proc` and its
    /// health URL, and it can be stopped through the handle. It is not restarted when it dies
    /// (its full launch spec is not in the pid file); start it again from its profile.
    pub fn adopt(&self, orphan: Orphan) -> Result<ProcessHandle, SuperviseError> {
        let mut processes = self.lock();
        check_not_running(&processes, orphan.name())?;
        create_dir(&self.log_dir, "log")?;
        let logs = self.open_logs(orphan.name())?;
        let name = orphan.name().to_string();
        let (handle, task) = adopt::adopt(orphan, logs, self.events.clone());
        processes.insert(
            name,
            Entry {
                handle: handle.clone(),
                monitor: task.abort_handle(),
            },
        );
        Ok(handle)
    }

    fn open_logs(&self, name: &str) -> Result<LogBuffer, SuperviseError> {
        let path = self.log_dir.join(format!("{name}.log"));
        LogBuffer::with_file(&path, self.limits)
            .map_err(|source| SuperviseError::LogFile { path, source })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.processes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Supervisor {
    /// Stops watching; the engines keep running (see the type's documentation).
    fn drop(&mut self) {
        for entry in self.lock().values() {
            entry.monitor.abort();
        }
    }
}

fn check_not_running(processes: &HashMap<String, Entry>, name: &str) -> Result<(), SuperviseError> {
    match processes.get(name) {
        Some(entry) if !entry.handle.is_finished() => Err(SuperviseError::AlreadyRunning {
            name: name.to_string(),
            pid: entry.handle.pid().unwrap_or_default(),
        }),
        _ => Ok(()),
    }
}

/// A live engine of the same name from an earlier daemon run would have its pid file
/// overwritten and be forgotten: refuse until it is adopted or cleaned up.
fn check_no_orphan(run_dir: &Path, name: &str) -> Result<(), SuperviseError> {
    let Ok(record) = pidfile::read(&pidfile::path_for(run_dir, name)) else {
        return Ok(());
    };
    if record.leader_alive() || !record.live_members().is_empty() {
        return Err(SuperviseError::OrphanAlive {
            name: name.to_string(),
            pid: record.pid,
        });
    }
    Ok(())
}

fn create_dir(path: &Path, what: &'static str) -> Result<(), SuperviseError> {
    std::fs::create_dir_all(path).map_err(|source| SuperviseError::Folder {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Milliseconds since the Unix epoch, read from the system clock: the time of log lines, states
/// and every record the daemon keeps.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
