//! One supervised engine: the handle callers hold, and the monitor task behind it that runs the
//! state machine (start, load, ready, crash, restart, stop).
//!
//! The monitor owns the child process. It notices an exit the moment the kernel reports it
//! (tokio's child `wait` future, driven by SIGCHLD), not on a polling tick, so a `kill -9` shows
//! as `Crashed` within milliseconds.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::classify::{self, CrashCause, ExitFacts};
use super::error::SuperviseError;
use super::health::{self, HealthUrl, Probe};
use super::logs::{LogBuffer, LogStream};
use super::output::{self, Followers, StartAt};
use super::pidfile::{self, PidRecord};
use super::process::{self, live_group_members};
use super::restart::RestartTracker;
use super::spec::LaunchSpec;
use super::state::{PendingRestart, Phase, ProcessState};
use super::task::{spawn_task, stop_requested};

/// A single health probe never takes longer than this (loopback answers in microseconds).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Lines of a run that the classifier reads, and lines shown with a crash.
pub(crate) const CLASSIFY_LINES: usize = 60;
pub(crate) const CRASH_LINES: usize = 20;

/// A supervised process, as callers see it. Cheap to clone; dropping it changes nothing.
#[derive(Clone)]
pub struct ProcessHandle {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    logs: LogBuffer,
    state: watch::Receiver<ProcessState>,
    stop: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

impl std::fmt::Debug for ProcessHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessHandle")
            .field("name", &self.shared.name)
            .field("state", &*self.shared.state.borrow())
            .finish()
    }
}

/// The monitor's side of a handle.
pub(crate) struct MonitorLink {
    pub publisher: Publisher,
    pub stop: watch::Receiver<bool>,
    pub done: watch::Sender<bool>,
}

impl ProcessHandle {
    /// A handle and the link its monitor task drives, starting in `initial`.
    pub(crate) fn pair(
        initial: ProcessState,
        logs: LogBuffer,
        events: broadcast::Sender<ProcessState>,
    ) -> (Self, MonitorLink) {
        let name = initial.name.clone();
        let (state_tx, state_rx) = watch::channel(initial.clone());
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let _ = events.send(initial);
        let handle = Self {
            shared: Arc::new(Shared {
                name,
                logs,
                state: state_rx,
                stop: stop_tx,
                done: done_rx,
            }),
        };
        let link = MonitorLink {
            publisher: Publisher {
                state: state_tx,
                events,
            },
            stop: stop_rx,
            done: done_tx,
        };
        (handle, link)
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The current state.
    pub fn state(&self) -> ProcessState {
        self.shared.state.borrow().clone()
    }

    /// A receiver that sees every later state (the latest one when several come at once).
    pub fn subscribe_state(&self) -> watch::Receiver<ProcessState> {
        self.shared.state.clone()
    }

    pub fn logs(&self) -> &LogBuffer {
        &self.shared.logs
    }

    /// The engine's pid (also its process group id) in the current or last run.
    pub fn pid(&self) -> Option<u32> {
        self.shared.state.borrow().pid
    }

    /// Whether the monitor has finished: the process is stopped, or crashed for good.
    pub fn is_finished(&self) -> bool {
        *self.shared.done.borrow()
    }

    /// Stops the engine: SIGTERM to its process group, SIGKILL after the spec's stop timeout.
    /// Returns the final state. Stopping an engine that already exited is fine: one that crashed
    /// for good keeps its crash report, one waiting for a restart is `Stopped` instead. Errors
    /// if any process of the group is still running afterwards.
    pub async fn stop(&self) -> Result<ProcessState, SuperviseError> {
        self.shared.stop.send_replace(true);
        let mut done = self.shared.done.clone();
        let finished = done.wait_for(|d| *d).await.is_ok();
        let state = self.state();
        let Some(pgid) = state.pid.and_then(|p| i32::try_from(p).ok()) else {
            return Ok(state);
        };
        let pids = live_group_members(pgid);
        match (pids.is_empty(), finished) {
            (true, _) => Ok(state),
            (false, true) => Err(SuperviseError::StillRunning {
                name: self.shared.name.clone(),
                pgid,
                pids,
            }),
            (false, false) => Err(SuperviseError::Detached {
                name: self.shared.name.clone(),
                pids,
            }),
        }
    }

    /// Waits until the state satisfies `predicate`, for at most `limit`.
    pub async fn wait_for(
        &self,
        predicate: impl Fn(&ProcessState) -> bool,
        limit: Duration,
    ) -> Result<ProcessState, SuperviseError> {
        let mut states = self.subscribe_state();
        let found = timeout(limit, states.wait_for(|s| predicate(s))).await;
        if let Ok(Ok(state)) = found {
            return Ok(state.clone());
        }
        let state = self.state();
        if predicate(&state) {
            return Ok(state);
        }
        Err(SuperviseError::WaitTimedOut {
            name: self.shared.name.clone(),
            waited: limit,
            state: state.phase_name().to_string(),
        })
    }
}

/// Publishes state changes on the watch channel and as events.
pub(crate) struct Publisher {
    state: watch::Sender<ProcessState>,
    events: broadcast::Sender<ProcessState>,
}

impl Publisher {
    /// Applies `change`; `since_ms` moves only when the phase itself changes (not on progress).
    pub fn update(&self, change: impl FnOnce(&mut ProcessState)) {
        self.state.send_modify(|state| {
            let before = std::mem::discriminant(&state.phase);
            change(state);
            if std::mem::discriminant(&state.phase) != before {
                state.since_ms = crate::now_ms();
            }
        });
        // Nobody listening is fine.
        let _ = self.events.send(self.state.borrow().clone());
    }

    pub fn phase(&self, phase: Phase) {
        self.update(|state| state.phase = phase);
    }

    pub fn current(&self) -> ProcessState {
        self.state.borrow().clone()
    }
}

/// Everything the monitor of an owned engine needs.
pub(crate) struct Launch {
    pub spec: LaunchSpec,
    pub health: HealthUrl,
    pub logs: LogBuffer,
    pub run_dir: PathBuf,
    pub restart_gate: Option<super::RestartGate>,
}

/// One run of the engine process.
struct Run {
    child: Child,
    pid: i32,
    attempt: u32,
    spawned: Instant,
    ready_since: Option<Instant>,
    /// First log line of this run: the classifier reads this run's lines only.
    first_seq: u64,
    /// The followers of the output files; cancelled with the run if the monitor itself is
    /// dropped.
    output: Followers,
    /// The followers read the output files to their end after the exit (the files can go).
    drained: bool,
    progress: watch::Receiver<Option<f32>>,
    pid_file: PathBuf,
}

/// How a run ended, as far as the monitor is concerned.
enum RunEnd {
    StopRequested,
    Failed(Failure),
}

/// An end nobody asked for.
enum Failure {
    Exited(Option<ExitStatus>),
    NeverHealthy,
}

/// A failed run, ready to be published.
struct Crash {
    exit_code: Option<i32>,
    signal: Option<i32>,
    cause: CrashCause,
    last_lines: Vec<String>,
    ready_for: Option<Duration>,
}

/// Spawns the first run (so a spawn error reaches the caller) and the monitor task.
pub(crate) fn launch(
    launch: Launch,
    events: broadcast::Sender<ProcessState>,
) -> Result<(ProcessHandle, JoinHandle<()>), SuperviseError> {
    let run = start_run(&launch, 1)?;
    let initial = ProcessState {
        name: launch.spec.name.clone(),
        phase: Phase::Starting,
        attempt: 1,
        pid: u32::try_from(run.pid).ok(),
        started_at_ms: Some(crate::now_ms()),
        ready_at_ms: None,
        since_ms: crate::now_ms(),
    };
    let (handle, link) = ProcessHandle::pair(initial, launch.logs.clone(), events);
    let task = tokio::spawn(Monitor { launch, link }.run(run));
    Ok((handle, task))
}

/// Spawns the engine, starts reading its output and writes its pid file.
fn start_run(launch: &Launch, attempt: u32) -> Result<Run, SuperviseError> {
    let spec = &launch.spec;
    launch.logs.push(
        LogStream::Supervisor,
        format!("starting {} (attempt {attempt})", spec.program.display()),
    );
    let first_seq = launch.logs.next_seq();
    let spawn_error = |source| SuperviseError::Spawn {
        name: spec.name.clone(),
        program: spec.program.clone(),
        source,
    };
    let files = output::create(&launch.run_dir, &spec.name)
        .map_err(|(path, source)| SuperviseError::OutputFile { path, source })?;
    let forget_output = |err| {
        output::remove(&launch.run_dir, &spec.name);
        err
    };
    let child = process::spawn(spec, files)
        .map_err(spawn_error)
        .map_err(forget_output)?;
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
    let pid = pid.ok_or_else(|| {
        forget_output(spawn_error(std::io::Error::other(
            "the process exited before its pid could be read",
        )))
    })?;
    let (progress_tx, progress) = watch::channel(None);
    let output = Followers::start(
        &launch.run_dir,
        &spec.name,
        &launch.logs,
        &progress_tx,
        StartAt::Beginning,
    );
    let pid_file = write_pid_file(launch, pid).map_err(|err| {
        // Without a pid file nobody could find this engine after a daemon crash: end it now.
        let _ = process::signal_group(pid, libc::SIGKILL);
        forget_output(err)
    })?;
    launch
        .logs
        .push(LogStream::Supervisor, format!("started pid {pid}"));
    Ok(Run {
        child,
        pid,
        attempt,
        spawned: Instant::now(),
        ready_since: None,
        first_seq,
        output,
        drained: false,
        progress,
        pid_file,
    })
}

fn write_pid_file(launch: &Launch, pid: i32) -> Result<PathBuf, SuperviseError> {
    let spec = &launch.spec;
    let record = PidRecord {
        name: spec.name.clone(),
        pid,
        pgid: pid,
        // An engine that already died has no stat; 0 never matches, so its file reads as stale.
        start_time: process::proc_stat(pid).map_or(0, |s| s.start_time),
        program: spec.program.clone(),
        args: spec.args.clone(),
        health_url: launch.health.as_str().to_string(),
        stop_timeout_ms: u64::try_from(spec.stop_timeout.as_millis()).unwrap_or(u64::MAX),
        started_at_ms: crate::now_ms(),
    };
    pidfile::write(&launch.run_dir, &record).map_err(|source| SuperviseError::PidFile {
        path: pidfile::path_for(&launch.run_dir, &spec.name),
        source,
    })
}

struct Monitor {
    launch: Launch,
    link: MonitorLink,
}

impl Monitor {
    async fn run(mut self, first: Run) {
        let mut tracker = RestartTracker::default();
        let mut next = Some(first);
        let mut attempt = 1;
        loop {
            let mut ended_pid = None;
            let run = match next.take() {
                Some(run) => Ok(run),
                None => start_run(&self.launch, attempt),
            };
            let crash = match run {
                Ok(mut run) => {
                    self.announce_start(&run);
                    let failure = match self.watch_run(&mut run).await {
                        RunEnd::Failed(failure) => failure,
                        RunEnd::StopRequested => {
                            self.stop_run(&mut run).await;
                            break;
                        }
                    };
                    ended_pid = u32::try_from(run.pid).ok();
                    let crash = self.crash_report(&mut run, failure).await;
                    let delay = tracker.on_failure(
                        &self.launch.spec.restart,
                        crash.ready_for,
                        &crash.cause,
                    );
                    self.publish_crash(crash, delay, attempt + 1);
                    self.clean_up(&mut run).await;
                    delay
                }
                Err(err) => {
                    let crash = spawn_failure(&err);
                    let delay = tracker.on_failure(&self.launch.spec.restart, None, &crash.cause);
                    self.launch
                        .logs
                        .push(LogStream::Supervisor, err.to_string());
                    self.publish_crash(crash, delay, attempt + 1);
                    delay
                }
            };
            let Some(delay) = crash else { break };
            if self.backoff_or_stop(delay).await {
                self.link.publisher.phase(Phase::Stopped);
                break;
            }
            if let (Some(gate), Some(pid)) = (&self.launch.restart_gate, ended_pid) {
                self.launch.logs.push(
                    LogStream::Supervisor,
                    format!(
                        "waiting for the GPUs to release the memory of pid {pid} before restarting"
                    ),
                );
                gate(pid).await;
            }
            attempt += 1;
        }
        self.link.done.send_replace(true);
    }

    /// Publishes `Starting` for a restart (the first run's state was set by `launch`).
    fn announce_start(&self, run: &Run) {
        if run.attempt == self.link.publisher.current().attempt {
            return;
        }
        let now = crate::now_ms();
        self.link.publisher.update(|state| {
            state.phase = Phase::Starting;
            state.attempt = run.attempt;
            state.pid = u32::try_from(run.pid).ok();
            state.started_at_ms = Some(now);
            state.ready_at_ms = None;
        });
    }

    /// Follows a run until it exits, is asked to stop, or does not get ready in time.
    async fn watch_run(&mut self, run: &mut Run) -> RunEnd {
        let health = &self.launch.spec.health;
        let (probe_tx, mut probes) = watch::channel(None);
        let mut poller = (!health.process_only).then(|| {
            spawn_task(poll_health(
                self.launch.health.clone(),
                health.poll_every,
                probe_tx,
            ))
        });
        if health.process_only {
            self.mark_ready(run).await;
        }
        let deadline = run.spawned + health.ready_timeout;
        let mut progress_open = true;
        loop {
            tokio::select! {
                biased;
                status = run.child.wait() => return RunEnd::Failed(Failure::Exited(status.ok())),
                () = stop_requested(&mut self.link.stop) => return RunEnd::StopRequested,
                () = sleep_until(deadline), if run.ready_since.is_none() => return RunEnd::Failed(Failure::NeverHealthy),
                changed = probes.changed(), if poller.is_some() => {
                    let probe = probes.borrow_and_update().clone();
                    match (changed, probe) {
                        (Err(_), _) => poller = None,
                        (Ok(()), Some(Probe::Ready)) => {
                            poller = None;
                            self.mark_ready(run).await;
                        }
                        (Ok(()), Some(_)) => self.publish_loading(run),
                        (Ok(()), None) => {}
                    }
                }
                changed = run.progress.changed(), if progress_open && run.ready_since.is_none() => {
                    match changed {
                        Ok(()) => self.publish_loading(run),
                        Err(_) => progress_open = false,
                    }
                }
            }
        }
    }

    async fn mark_ready(&self, run: &mut Run) {
        run.ready_since = Some(Instant::now());
        run.output.catch_up().await;
        let now = crate::now_ms();
        self.link.publisher.update(|state| {
            state.phase = Phase::Ready;
            state.ready_at_ms = Some(now);
        });
        let why = if self.launch.spec.health.process_only {
            "ready: the process runs (it has no endpoint of its own to ask)"
        } else {
            "ready: the health endpoint answered 200"
        };
        self.launch.logs.push(LogStream::Supervisor, why);
    }

    fn publish_loading(&self, run: &Run) {
        let phase = Phase::Loading {
            progress: *run.progress.borrow(),
        };
        if self.link.publisher.current().phase != phase {
            self.link.publisher.phase(phase);
        }
    }

    /// A requested stop: SIGTERM, SIGKILL after the stop timeout, reap, then `Stopped`.
    async fn stop_run(&mut self, run: &mut Run) {
        self.link.publisher.phase(Phase::Stopping);
        self.launch.logs.push(
            LogStream::Supervisor,
            format!("stopping: SIGTERM to process group {}", run.pid),
        );
        let left = self.end_group(run).await;
        self.drain(run).await;
        self.forget_if_gone(run, &left);
        self.link.publisher.phase(Phase::Stopped);
    }

    /// Ends whatever is left of the run's process group, noting an escalation to SIGKILL.
    async fn end_group(&self, run: &mut Run) -> Vec<i32> {
        let grace = self.launch.spec.stop_timeout;
        let outcome = process::terminate_group(run.pid, Some(&mut run.child), grace).await;
        if outcome.killed {
            self.launch.logs.push(
                LogStream::Supervisor,
                format!(
                    "still running {} ms after SIGTERM: sent SIGKILL to process group {}",
                    grace.as_millis(),
                    run.pid
                ),
            );
        }
        outcome.left
    }

    /// Removes the pid file once the group is gone, and the output files once they are read to
    /// their end; keeps the pid file (and says so) if anything survived, so the next daemon start
    /// still finds the survivors, and the output files for it to follow.
    fn forget_if_gone(&self, run: &Run, left: &[i32]) {
        if left.is_empty() {
            pidfile::remove(&run.pid_file);
            output::forget(
                &self.launch.run_dir,
                &self.launch.spec.name,
                run.drained,
                &self.launch.logs,
            );
        } else {
            self.launch.logs.push(
                LogStream::Supervisor,
                format!(
                    "processes {left:?} of group {} survived SIGKILL; keeping the pid file",
                    run.pid
                ),
            );
        }
    }

    /// Gives the output followers a moment to deliver the last lines, then cancels them.
    async fn drain(&self, run: &mut Run) {
        run.drained = run.output.drain().await;
    }

    /// Works out why an unrequested end happened; a never-healthy engine is stopped first.
    async fn crash_report(&mut self, run: &mut Run, failure: Failure) -> Crash {
        let uptime = run.spawned.elapsed();
        let mut facts = ExitFacts {
            uptime,
            was_ready: run.ready_since.is_some(),
            port: Some(self.launch.health.port()),
            ..ExitFacts::default()
        };
        match failure {
            Failure::Exited(status) => {
                facts.exit_code = status.and_then(|s| s.code());
                facts.signal = status.and_then(|s| s.signal());
            }
            Failure::NeverHealthy => {
                self.launch.logs.push(
                    LogStream::Supervisor,
                    format!(
                        "not ready after {} ms: stopping",
                        self.launch.spec.health.ready_timeout.as_millis()
                    ),
                );
                facts.never_healthy_after = Some(self.launch.spec.health.ready_timeout);
                self.end_group(run).await;
            }
        }
        self.drain(run).await;
        let lines = engine_lines(&self.launch.logs, run.first_seq);
        let recent = &lines[lines.len().saturating_sub(CLASSIFY_LINES)..];
        let working_dir = self.launch.spec.working_dir.clone();
        let exists = move |path: &Path| match &working_dir {
            Some(dir) => dir.join(path).exists(),
            None => path.exists(),
        };
        Crash {
            exit_code: facts.exit_code,
            signal: facts.signal,
            cause: classify::classify(&facts, recent, &exists),
            last_lines: lines[lines.len().saturating_sub(CRASH_LINES)..].to_vec(),
            ready_for: run.ready_since.map(|t| t.elapsed()),
        }
    }

    fn publish_crash(&self, crash: Crash, delay: Option<Duration>, next_attempt: u32) {
        let restart = delay.map(|delay| PendingRestart {
            attempt: next_attempt,
            at_ms: crate::now_ms() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2),
        });
        let note = match restart {
            Some(r) => format!(
                "crashed: {:?}; restarting as attempt {} in {} ms",
                crash.cause,
                r.attempt,
                delay.unwrap_or_default().as_millis()
            ),
            None => format!("crashed: {:?}; not restarting", crash.cause),
        };
        self.launch.logs.push(LogStream::Supervisor, note);
        self.link.publisher.phase(Phase::Crashed {
            exit_code: crash.exit_code,
            signal: crash.signal,
            explanation: crash.cause.explanation(),
            cause: crash.cause,
            last_lines: crash.last_lines,
            restart,
        });
    }

    /// After a crash: end any helper processes the engine left in its group, then forget it.
    async fn clean_up(&mut self, run: &mut Run) {
        let left = self.end_group(run).await;
        self.forget_if_gone(run, &left);
    }

    /// Sleeps out the backoff; returns true if a stop was requested meanwhile.
    async fn backoff_or_stop(&mut self, delay: Duration) -> bool {
        tokio::select! {
            () = sleep(delay) => false,
            () = stop_requested(&mut self.link.stop) => true,
        }
    }
}

/// What the engine itself printed from line `first_seq` on (Rigdeck's own notes left out).
pub(crate) fn engine_lines(logs: &LogBuffer, first_seq: u64) -> Vec<String> {
    logs.since(first_seq)
        .into_iter()
        .filter(|line| line.stream != LogStream::Supervisor)
        .map(|line| line.text)
        .collect()
}

/// A restart whose spawn failed counts as a failed run; a removed binary is a missing file.
fn spawn_failure(err: &SuperviseError) -> Crash {
    let cause = match err {
        SuperviseError::Spawn {
            program, source, ..
        } if source.kind() == std::io::ErrorKind::NotFound => CrashCause::MissingFile {
            path: Some(program.display().to_string()),
        },
        _ => CrashCause::ExitedImmediately { exit_code: None },
    };
    Crash {
        exit_code: None,
        signal: None,
        cause,
        last_lines: vec![err.to_string()],
        ready_for: None,
    }
}

/// Probes the health URL every `every` and publishes each answer.
pub(crate) async fn poll_health(
    url: HealthUrl,
    every: Duration,
    answers: watch::Sender<Option<Probe>>,
) {
    loop {
        let probe = health::probe(
            &url,
            PROBE_TIMEOUT.min(every.max(Duration::from_millis(250))),
        )
        .await;
        if answers.send(Some(probe)).is_err() {
            return;
        }
        sleep(every).await;
    }
}
