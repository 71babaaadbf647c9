//! Engines left by an earlier daemon run: finding them through their pid files after a restart,
//! and either adopting them (watch and stop them like our own) or cleaning them up.
//!
//! An adopted engine is not our child, so its exit status cannot be read and its output (whose
//! pipes went to the dead daemon) cannot be captured: the monitor polls `/proc` and the health
//! URL instead. Such an engine usually dies of SIGPIPE the next time it writes a log line; the
//! point of adoption is the ones that sit idle holding VRAM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::classify::CrashCause;
use super::error::SuperviseError;
use super::health::{self, HealthUrl, Probe};
use super::instance::{stop_requested, InstanceHandle, MonitorLink};
use super::logs::{LogBuffer, LogStream};
use super::pidfile::{self, PidRecord};
use super::process::terminate_group;
use super::state::{InstanceState, Phase};

/// How often an adopted engine is looked at: its death is noticed within this.
const ADOPTED_POLL: Duration = Duration::from_millis(500);

/// Timeout of the one health probe `recover` makes per orphan.
const RECOVER_PROBE: Duration = Duration::from_secs(2);

/// An engine started by an earlier run of the daemon that is still running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub record: PidRecord,
    pub pid_file: PathBuf,
    /// The engine process itself still runs (else only helpers it left in its group do).
    pub leader_alive: bool,
    /// Running processes of its group.
    pub members: Vec<i32>,
    /// What its health endpoint answered during recovery.
    pub health: Probe,
}

impl Orphan {
    pub fn name(&self) -> &str {
        &self.record.name
    }

    /// Ends the orphan's process group (SIGTERM, then SIGKILL after its stop timeout) and
    /// removes its pid file.
    pub async fn cleanup(&self) -> Result<(), SuperviseError> {
        // Look again: between recovery and now it may have exited and its pid been reused.
        if !self.record.leader_alive() && self.record.live_members().is_empty() {
            pidfile::remove(&self.pid_file);
            return Ok(());
        }
        let grace = Duration::from_millis(self.record.stop_timeout_ms);
        let outcome = terminate_group(self.record.pgid, None, grace).await;
        if !outcome.left.is_empty() {
            return Err(SuperviseError::StillRunning {
                name: self.record.name.clone(),
                pgid: self.record.pgid,
                pids: outcome.left,
            });
        }
        pidfile::remove(&self.pid_file);
        Ok(())
    }
}

/// Reads every pid file in `run_dir`: live engines come back as orphans; files of dead engines,
/// of pids now used by other processes, and unreadable files are removed.
pub(crate) async fn recover(run_dir: &Path) -> Result<Vec<Orphan>, SuperviseError> {
    let paths = pidfile::list(run_dir).map_err(|source| SuperviseError::RunDir {
        path: run_dir.to_path_buf(),
        source,
    })?;
    let mut orphans = Vec::new();
    for path in paths {
        let record = match pidfile::read(&path) {
            Ok(record) => record,
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "removing unreadable pid file");
                pidfile::remove(&path);
                continue;
            }
        };
        let leader_alive = record.leader_alive();
        let members = record.live_members();
        if !leader_alive && members.is_empty() {
            pidfile::remove(&path);
            continue;
        }
        let health = match HealthUrl::parse(&record.health_url) {
            Ok(url) => health::probe(&url, RECOVER_PROBE).await,
            Err(err) => Probe::Unreachable {
                reason: err.to_string(),
            },
        };
        orphans.push(Orphan {
            record,
            pid_file: path,
            leader_alive,
            members,
            health,
        });
    }
    Ok(orphans)
}

/// Starts watching an orphan as an instance.
pub(crate) fn adopt(
    orphan: Orphan,
    logs: LogBuffer,
    events: broadcast::Sender<InstanceState>,
) -> (InstanceHandle, JoinHandle<()>) {
    let now = crate::now_ms();
    let ready = orphan.health == Probe::Ready;
    let initial = InstanceState {
        name: orphan.record.name.clone(),
        phase: if ready {
            Phase::Ready
        } else {
            Phase::Loading { progress: None }
        },
        attempt: 1,
        pid: u32::try_from(orphan.record.pid).ok(),
        started_at_ms: Some(orphan.record.started_at_ms),
        // When it really became ready is unknown; from now on is what we can vouch for.
        ready_at_ms: ready.then_some(now),
        since_ms: now,
    };
    logs.push(
        LogStream::Supervisor,
        format!(
            "adopted pid {} from an earlier run; its earlier output is in the log file, later output cannot be captured",
            orphan.record.pid
        ),
    );
    let (handle, link) = InstanceHandle::pair(initial, logs, events);
    let task = tokio::spawn(Adopted { orphan, link }.run());
    (handle, task)
}

struct Adopted {
    orphan: Orphan,
    link: MonitorLink,
}

impl Adopted {
    async fn run(mut self) {
        let url = HealthUrl::parse(&self.orphan.record.health_url).ok();
        loop {
            tokio::select! {
                biased;
                () = stop_requested(&mut self.link.stop) => {
                    self.stop().await;
                    break;
                }
                () = sleep(ADOPTED_POLL) => {
                    if !self.alive() {
                        self.vanished();
                        break;
                    }
                    self.check_health(url.as_ref()).await;
                }
            }
        }
        self.link.done.send_replace(true);
    }

    fn alive(&self) -> bool {
        self.orphan.record.leader_alive() || !self.orphan.record.live_members().is_empty()
    }

    async fn check_health(&self, url: Option<&HealthUrl>) {
        let Some(url) = url else { return };
        if self.link.publisher.current().is_ready() {
            return;
        }
        if health::probe(url, RECOVER_PROBE).await == Probe::Ready {
            let now = crate::now_ms();
            self.link.publisher.update(|state| {
                state.phase = Phase::Ready;
                state.ready_at_ms = Some(now);
            });
        }
    }

    async fn stop(&self) {
        self.link.publisher.phase(Phase::Stopping);
        let grace = Duration::from_millis(self.orphan.record.stop_timeout_ms);
        let outcome = terminate_group(self.orphan.record.pgid, None, grace).await;
        if outcome.left.is_empty() {
            pidfile::remove(&self.orphan.pid_file);
        }
        self.link.publisher.phase(Phase::Stopped);
    }

    /// It ended on its own; without being its parent we cannot say how.
    fn vanished(&self) {
        pidfile::remove(&self.orphan.pid_file);
        let cause = CrashCause::Other { exit_code: None };
        self.link.publisher.phase(Phase::Crashed {
            exit_code: None,
            signal: None,
            explanation: cause.explanation(),
            cause,
            last_lines: Vec::new(),
            restart: None,
        });
    }
}
