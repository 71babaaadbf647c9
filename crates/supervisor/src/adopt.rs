//! Engines left by an earlier daemon run: finding them through their pid files after a restart,
//! and either adopting them (watch and stop them like our own) or cleaning them up.
//!
//! An adopted engine is not our child, so its exit status cannot be read: the monitor polls
//! `/proc` and the health URL instead. Its output goes on as before: the engine writes to its
//! output files in the run folder, not to pipes of the daemon that died, and the adopting daemon
//! follows those files from the offset the last one recorded (see `output`). So the lines it
//! printed while no daemon ran and all later ones reach the process's logs, a crash is
//! classified from its last lines, and the files go once it has ended and they are read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::classify::{self, ExitFacts};
use super::error::SuperviseError;
use super::health::{self, HealthUrl, Probe};
use super::logs::{LogBuffer, LogStream};
use super::output::{self, Followers, StartAt};
use super::pidfile::{self, PidRecord};
use super::process::terminate_group;
use super::state::{Phase, ProcessState};
use super::supervised::{engine_lines, MonitorLink, ProcessHandle, CLASSIFY_LINES, CRASH_LINES};
use super::task::stop_requested;

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

    /// The run folder its pid file (and its output files) are in.
    fn run_dir(&self) -> &Path {
        self.pid_file.parent().unwrap_or(Path::new("."))
    }

    /// Ends the orphan's process group (SIGTERM, then SIGKILL after its stop timeout) and
    /// removes its pid file.
    pub async fn cleanup(&self) -> Result<(), SuperviseError> {
        // Look again: between recovery and now it may have exited and its pid been reused.
        if !self.record.leader_alive() && self.record.live_members().is_empty() {
            forget(&self.pid_file, self.name());
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
        forget(&self.pid_file, self.name());
        Ok(())
    }
}

/// Removes the pid file of an engine that is gone, and its output files, which nobody reads.
fn forget(pid_file: &Path, name: &str) {
    pidfile::remove(pid_file);
    if let Some(run_dir) = pid_file.parent() {
        output::remove(run_dir, name);
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
            forget(&path, &record.name);
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

/// Starts watching an orphan as a process.
pub(crate) fn adopt(
    orphan: Orphan,
    logs: LogBuffer,
    events: broadcast::Sender<ProcessState>,
) -> (ProcessHandle, JoinHandle<()>) {
    let now = crate::now_ms();
    let ready = orphan.health == Probe::Ready;
    let initial = ProcessState {
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
    let pid = orphan.record.pid;
    let note = if output::present(orphan.run_dir(), orphan.name()) {
        format!("adopted pid {pid} from an earlier run; its output goes on from where that run stopped reading it")
    } else {
        format!("adopted pid {pid} from an earlier run; it writes its output to pipes of that run (an older Rigdeck started it), so later output cannot be captured")
    };
    logs.push(LogStream::Supervisor, note);
    let first_seq = logs.next_seq();
    let (progress_tx, progress) = watch::channel(None);
    let output = Followers::start(
        orphan.run_dir(),
        orphan.name(),
        &logs,
        &progress_tx,
        StartAt::Recorded,
    );
    let (handle, link) = ProcessHandle::pair(initial, logs.clone(), events);
    let adopted = Adopted {
        orphan,
        link,
        logs,
        first_seq,
        output,
        progress,
    };
    let task = tokio::spawn(adopted.run());
    (handle, task)
}

struct Adopted {
    orphan: Orphan,
    link: MonitorLink,
    logs: LogBuffer,
    /// The first line logged after adoption: the lines a crash is classified from start here.
    first_seq: u64,
    output: Followers,
    progress: watch::Receiver<Option<f32>>,
}

impl Adopted {
    async fn run(mut self) {
        let url = HealthUrl::parse(&self.orphan.record.health_url).ok();
        let mut progress_open = true;
        loop {
            tokio::select! {
                biased;
                () = stop_requested(&mut self.link.stop) => {
                    self.stop().await;
                    break;
                }
                () = sleep(ADOPTED_POLL) => {
                    if !self.alive() {
                        self.vanished(url.as_ref()).await;
                        break;
                    }
                    self.check_health(url.as_ref()).await;
                }
                changed = self.progress.changed(), if progress_open => match changed {
                    Ok(()) => self.publish_loading(),
                    Err(_) => progress_open = false,
                },
            }
        }
        self.link.done.send_replace(true);
    }

    /// Load progress of an engine adopted while it was still loading.
    fn publish_loading(&self) {
        let current = self.link.publisher.current();
        if !matches!(current.phase, Phase::Loading { .. }) {
            return;
        }
        let phase = Phase::Loading {
            progress: *self.progress.borrow(),
        };
        if current.phase != phase {
            self.link.publisher.phase(phase);
        }
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
            self.output.catch_up().await;
            let now = crate::now_ms();
            self.link.publisher.update(|state| {
                state.phase = Phase::Ready;
                state.ready_at_ms = Some(now);
            });
        }
    }

    async fn stop(&mut self) {
        self.link.publisher.phase(Phase::Stopping);
        let grace = Duration::from_millis(self.orphan.record.stop_timeout_ms);
        let outcome = terminate_group(self.orphan.record.pgid, None, grace).await;
        let drained = self.output.drain().await;
        if outcome.left.is_empty() {
            self.forget(drained);
        }
        self.link.publisher.phase(Phase::Stopped);
    }

    /// It ended on its own. Without being its parent we do not know its exit status, so the
    /// cause comes from its last lines (since adoption) alone.
    async fn vanished(&mut self, url: Option<&HealthUrl>) {
        let drained = self.output.drain().await;
        self.forget(drained);
        let state = self.link.publisher.current();
        let facts = ExitFacts {
            uptime: Duration::from_millis(
                u64::try_from(crate::now_ms() - self.orphan.record.started_at_ms).unwrap_or(0),
            ),
            was_ready: state.ready_at_ms.is_some(),
            port: url.map(HealthUrl::port),
            ..ExitFacts::default()
        };
        let lines = engine_lines(&self.logs, self.first_seq);
        let recent = &lines[lines.len().saturating_sub(CLASSIFY_LINES)..];
        let cause = classify::classify(&facts, recent, &|path: &Path| path.exists());
        self.link.publisher.phase(Phase::Crashed {
            exit_code: None,
            signal: None,
            explanation: cause.explanation(),
            cause,
            last_lines: lines[lines.len().saturating_sub(CRASH_LINES)..].to_vec(),
            restart: None,
        });
    }

    /// Removes the pid file of the ended engine, and its output files if they were read.
    fn forget(&self, drained: bool) {
        pidfile::remove(&self.orphan.pid_file);
        output::forget(
            self.orphan.run_dir(),
            self.orphan.name(),
            drained,
            &self.logs,
        );
    }
}
