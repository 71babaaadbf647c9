//! The supervisor against real processes: a small Python HTTP server plays the engine (503 while
//! "loading", then 200, llama.cpp-style progress dots on stderr), and the tests kill, stop,
//! starve and orphan it the way real engines get killed, stopped, starved and orphaned.
//!
//! Every test registers each engine pid with a `Reaper`, which SIGKILLs those process groups
//! when the test ends, so a failing assertion never leaves a process behind.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rigdeck_supervisor::process::{live_group_members, proc_stat};
use rigdeck_supervisor::wait_until;
use rigdeck_supervisor::{
    CrashCause, LaunchSpec, LogBuffer, LogLimits, LogStream, Phase, PidRecord, Probe,
    ProcessHandle, ProcessState, RestartPolicy, SuperviseError, Supervisor,
};

/// The fake engine. argv: MODE PORT LOAD_SECONDS FILLER_LINES.
/// MODE: `serve` (normal), `ignore-term` (ignores SIGTERM and starts a helper that does too),
/// `exit` (prints an error and exits 1 at once), `tick` (once loaded, prints `tick N` on stdout
/// every 100 ms, N counting from 0), `flood` (once loaded and sent SIGUSR1, writes FILLER_LINES
/// lines of about 100 bytes to stdout as fast as it can, then `flood done`; dies of SIGPIPE on a
/// closed pipe, as a C engine like llama-server does).
const ENGINE: &str = r#"
import http.server, signal, subprocess, sys, threading, time
mode, port, load_s, filler = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
flood_lines, flood = 0, threading.Event()
if mode == "flood":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, lambda *_: flood.set())
    filler, flood_lines = 0, filler

def out(msg):
    print(msg, flush=True)

def err(msg):
    print(msg, file=sys.stderr, flush=True)

if mode == "exit":
    err("error: invalid argument: --no-such-flag")
    sys.exit(1)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen(["/bin/sh", "-c", "trap '' TERM; sleep 300"])
    out("helper pid %d" % helper.pid)

out("build: 1 (fake) for the supervisor tests")
for i in range(filler):
    out("filler line %d %s" % (i, "x" * 40))
started = time.time()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ready = time.time() - started >= load_s
        if self.path != "/health":
            body, status = b"{}", 404
        elif ready:
            body, status = b'{"status":"ok"}', 200
        else:
            body, status = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}', 503
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

try:
    server = http.server.HTTPServer(("127.0.0.1", port), Health)
except OSError as e:
    err("start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: %d" % port)
    err("OSError: %s" % e)
    sys.exit(1)
threading.Thread(target=server.serve_forever, daemon=True).start()
err("main: HTTP server is listening, hostname: 127.0.0.1, port: %d" % port)
err("load_tensors: loading model tensors, this can take a while... (mmap = true)")
for _ in range(100):
    sys.stderr.write(".")
    sys.stderr.flush()
    time.sleep(load_s / 100)
sys.stderr.write("\n")
err("main: model loaded")
if mode == "tick":
    tick = 0
    while True:
        out("tick %d" % tick)
        tick += 1
        time.sleep(0.1)
if mode == "flood":
    while not flood.is_set():
        time.sleep(0.05)
    for i in range(flood_lines):
        sys.stdout.write("flood line %d %s\n" % (i, "y" * 80))
    out("flood done")
while True:
    time.sleep(3600)
"#;

/// SIGKILLs every registered process group when dropped.
#[derive(Default)]
struct Reaper {
    groups: Mutex<Vec<i32>>,
}

impl Reaper {
    fn track(&self, pid: Option<u32>) -> i32 {
        let pid = i32::try_from(pid.expect("the process has a pid")).expect("pid fits i32");
        self.groups.lock().unwrap().push(pid);
        pid
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for &pgid in self.groups.lock().unwrap().iter() {
            if pgid > 1 {
                // SAFETY: killpg only sends a signal.
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
            }
        }
    }
}

struct Rig {
    dir: tempfile::TempDir,
    reaper: Reaper,
}

impl Rig {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            reaper: Reaper::default(),
        }
    }

    fn log_dir(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    fn supervisor(&self) -> Supervisor {
        Supervisor::new(self.log_dir(), self.run_dir())
    }
}

fn python() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .expect("python3 on PATH")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn engine(name: &str, mode: &str, port: u16, load_s: f32, filler: u32) -> LaunchSpec {
    let mut spec = LaunchSpec::new(name, python(), format!("http://127.0.0.1:{port}/health"));
    spec.args = vec![
        "-c".into(),
        ENGINE.into(),
        mode.into(),
        port.to_string(),
        load_s.to_string(),
        filler.to_string(),
    ];
    spec.health.poll_every = Duration::from_millis(100);
    spec.health.ready_timeout = Duration::from_secs(20);
    spec.stop_timeout = Duration::from_secs(5);
    spec
}

async fn wait(handle: &ProcessHandle, what: fn(&ProcessState) -> bool) -> ProcessState {
    match handle.wait_for(what, Duration::from_secs(20)).await {
        Ok(state) => state,
        Err(err) => panic!("{err}; last lines: {:#?}", handle.logs().tail(15)),
    }
}

fn is_running(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|s| s.is_running())
}

fn crashed(state: &ProcessState) -> bool {
    matches!(state.phase, Phase::Crashed { .. })
}

fn restart_attempt(state: &ProcessState) -> Option<u32> {
    match &state.phase {
        Phase::Crashed { restart, .. } => restart.map(|r| r.attempt),
        _ => None,
    }
}

fn last_lines(state: &ProcessState) -> Vec<String> {
    match &state.phase {
        Phase::Crashed { last_lines, .. } => last_lines.clone(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn starts_loads_becomes_ready_and_stops_cleanly() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let mut events = supervisor.subscribe();
    let port = free_port();
    let handle = supervisor
        .start(engine("llm", "serve", port, 1.5, 3))
        .await
        .unwrap();
    let pid = rig.reaper.track(handle.pid());
    let pid_file = rig.run_dir().join("llm.json");
    assert!(pid_file.exists(), "pid file written before start returns");

    let ready = wait(&handle, ProcessState::is_ready).await;
    assert!(ready.started_at_ms.is_some() && ready.ready_at_ms >= ready.started_at_ms);
    let record: PidRecord = serde_json::from_slice(&std::fs::read(&pid_file).unwrap()).unwrap();
    assert_eq!((record.pid, record.pgid), (pid, pid));
    assert_eq!(record.start_time, proc_stat(pid).unwrap().start_time);
    assert_eq!(record.health_url, format!("http://127.0.0.1:{port}/health"));

    let stopped = handle.stop().await.unwrap();
    assert_eq!(stopped.phase, Phase::Stopped);
    assert!(
        live_group_members(pid).is_empty(),
        "nothing of the group is left"
    );
    assert!(!pid_file.exists(), "pid file removed on a clean stop");
    assert_eq!(
        run_dir_files(&rig),
        Vec::<String>::new(),
        "output files and their offset records removed too"
    );

    // Every transition, in order: Starting, Loading (with parsed progress), Ready, Stopping, Stopped.
    let mut phases = Vec::new();
    while let Ok(state) = events.try_recv() {
        phases.push(state.phase);
    }
    let names: Vec<&str> = phases
        .iter()
        .map(|p| match p {
            Phase::Starting => "starting",
            Phase::Loading { .. } => "loading",
            Phase::Ready => "ready",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
            Phase::Crashed { .. } => "crashed",
        })
        .collect();
    let mut order = names.clone();
    order.dedup();
    assert_eq!(
        order,
        ["starting", "loading", "ready", "stopping", "stopped"],
        "{phases:?}"
    );
    let partial = phases
        .iter()
        .any(|p| matches!(p, Phase::Loading { progress: Some(f) } if *f > 0.0 && *f < 1.0));
    assert!(
        partial,
        "load progress from the dots was published: {phases:?}"
    );
}

#[tokio::test]
async fn logs_go_to_ring_file_subscribers_and_search() {
    let rig = Rig::new();
    let limits = LogLimits {
        ring_lines: 100,
        file_max_bytes: 4096,
        file_keep: 2,
    };
    let supervisor = rig.supervisor().with_log_limits(limits);
    let handle = supervisor
        .start(engine("chatty", "serve", free_port(), 0.2, 300))
        .await
        .unwrap();
    rig.reaper.track(handle.pid());
    let mut lines = handle.logs().subscribe();
    wait(&handle, ProcessState::is_ready).await;

    let ring = handle.logs().tail(10_000);
    assert_eq!(ring.len(), 100, "the ring keeps only its capacity");
    assert_eq!(
        handle.logs().search("FILLER LINE 299").len(),
        1,
        "search ignores case"
    );
    assert!(
        handle.logs().search("filler line 5 ").is_empty(),
        "old lines left the ring"
    );
    let streams = handle.logs().search("");
    assert!(streams.iter().any(|l| l.stream == LogStream::Stdout));
    assert!(streams.iter().any(|l| l.stream == LogStream::Stderr));
    let loaded = wait_until(
        || async { !handle.logs().search("main: model loaded").is_empty() },
        Duration::from_secs(5),
        Duration::from_millis(20),
    );
    assert!(loaded.await, "the last line after loading arrives too");
    let subscribed = tokio::time::timeout(Duration::from_secs(5), lines.recv()).await;
    assert!(matches!(subscribed, Ok(Ok(_))), "subscribers get lines");

    let file = rig.log_dir().join("chatty.log");
    let current = std::fs::read_to_string(&file).unwrap();
    assert!(current.len() <= 4096);
    assert!(
        current
            .lines()
            .all(|l| l.len() > 25 && l.as_bytes()[4] == b'-'),
        "timestamped"
    );
    assert!(rig.log_dir().join("chatty.log.1").exists());
    assert!(rig.log_dir().join("chatty.log.2").exists());
    assert!(
        !rig.log_dir().join("chatty.log.3").exists(),
        "only two rotated files kept"
    );
    let all_files = [
        file.clone(),
        file.with_extension("log.1"),
        file.with_extension("log.2"),
    ]
    .iter()
    .map(|p| std::fs::read_to_string(p).unwrap())
    .collect::<String>();
    assert!(all_files.contains(" stdout filler line 299 "));
    handle.stop().await.unwrap();
}

#[tokio::test]
async fn kill_9_is_a_crash_seen_at_once_and_restarted_until_the_limit() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let mut spec = engine("flaky", "serve", free_port(), 0.0, 0);
    spec.restart = RestartPolicy::OnFailure {
        max_restarts: 2,
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_millis(300),
    };
    let handle = supervisor.start(spec).await.unwrap();
    let mut pids = Vec::new();
    for round in 1..=3u32 {
        let ready = wait(&handle, ProcessState::is_ready).await;
        assert_eq!(ready.attempt, round);
        let pid = rig.reaper.track(ready.pid);
        assert!(!pids.contains(&pid), "each restart is a new process");
        pids.push(pid);

        let killed_at = Instant::now();
        // SAFETY: kill only sends a signal, to our own engine.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let state = wait(&handle, crashed).await;
        assert!(
            killed_at.elapsed() < Duration::from_secs(2),
            "crash seen in {:?}",
            killed_at.elapsed()
        );
        assert_eq!(state.crash_cause(), Some(&CrashCause::Killed { signal: 9 }));
        match &state.phase {
            Phase::Crashed {
                signal,
                exit_code,
                explanation,
                ..
            } => {
                assert_eq!((*signal, *exit_code), (Some(9), None));
                assert!(explanation.contains("SIGKILL"));
            }
            other => panic!("{other:?}"),
        }
        let expected = (round < 3).then_some(round + 1);
        assert_eq!(restart_attempt(&state), expected, "round {round}");
        if round < 3 {
            // The backoff is respected: no new run before it has passed.
            let next = round + 1;
            let restarted = handle
                .wait_for(move |s| s.attempt == next, Duration::from_secs(10))
                .await;
            assert!(restarted.is_ok(), "{restarted:?}");
            let backoff = if round == 1 { 200 } else { 300 };
            assert!(killed_at.elapsed() >= Duration::from_millis(backoff));
        }
    }
    let last = handle.wait_for(|_| false, Duration::from_millis(700)).await;
    assert!(
        matches!(last, Err(SuperviseError::WaitTimedOut { .. })),
        "no fourth run"
    );
    assert!(handle.is_finished() && handle.state().is_final());
    assert!(!rig.run_dir().join("flaky.json").exists());
    // Stopping a crashed process is fine and keeps the crash report.
    assert!(crashed(&handle.stop().await.unwrap()));
}

#[tokio::test]
async fn a_process_that_ignores_sigterm_is_killed_with_its_helper() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let mut spec = engine("stubborn", "ignore-term", free_port(), 0.0, 0);
    spec.stop_timeout = Duration::from_millis(800);
    let handle = supervisor.start(spec).await.unwrap();
    let pgid = rig.reaper.track(handle.pid());
    wait(&handle, ProcessState::is_ready).await;
    let helper: i32 = handle
        .logs()
        .search("helper pid")
        .first()
        .and_then(|l| l.text.rsplit(' ').next()?.parse().ok())
        .expect("the engine reported its helper");
    assert!(is_running(helper));
    assert_eq!(
        proc_stat(helper).unwrap().pgrp,
        pgid,
        "the helper is in the engine's group"
    );

    let asked = Instant::now();
    let stopped = handle.stop().await.unwrap();
    let took = asked.elapsed();
    assert_eq!(stopped.phase, Phase::Stopped);
    assert!(
        took >= Duration::from_millis(800),
        "SIGTERM was given its time: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "then SIGKILL: {took:?}");
    assert!(
        !is_running(pgid) && !is_running(helper),
        "engine and helper are gone"
    );
    assert!(live_group_members(pgid).is_empty());
    assert_eq!(handle.logs().search("sent SIGKILL").len(), 1);
}

#[tokio::test]
async fn a_second_engine_on_a_taken_port_is_port_in_use() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let port = free_port();
    let first = supervisor
        .start(engine("first", "serve", port, 0.0, 0))
        .await
        .unwrap();
    rig.reaper.track(first.pid());
    wait(&first, ProcessState::is_ready).await;

    let second = supervisor
        .start(engine("second", "serve", port, 0.0, 0))
        .await
        .unwrap();
    rig.reaper.track(second.pid());
    let state = wait(&second, crashed).await;
    assert_eq!(
        state.crash_cause(),
        Some(&CrashCause::PortInUse { port: Some(port) })
    );
    assert!(last_lines(&state)
        .iter()
        .any(|l| l.contains("Address already in use")));
    assert!(state.is_final());
    assert!(first.state().is_ready(), "the first engine is untouched");
    first.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_program_is_refused_by_name() {
    let rig = Rig::new();
    let mut spec = engine("ghost", "serve", free_port(), 0.0, 0);
    spec.program = "/opt/nowhere/llama-server".into();
    let err = rig.supervisor().start(spec).await.unwrap_err();
    assert!(matches!(err, SuperviseError::BadProgram { .. }));
    assert!(
        err.to_string()
            .contains("'/opt/nowhere/llama-server' does not exist"),
        "{err}"
    );
    assert!(!rig.run_dir().join("ghost.json").exists());
}

#[tokio::test]
async fn an_engine_that_exits_at_once_shows_its_last_words() {
    let rig = Rig::new();
    let mut spec = engine("typo", "exit", free_port(), 0.0, 0);
    // A bad flag is not fixed by retrying, but the policy still retries once; then gives up.
    spec.restart = RestartPolicy::OnFailure {
        max_restarts: 1,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(50),
    };
    let supervisor = rig.supervisor();
    let handle = supervisor.start(spec).await.unwrap();
    rig.reaper.track(handle.pid());
    let state = wait(&handle, ProcessState::is_final).await;
    assert_eq!(state.attempt, 2);
    assert_eq!(
        state.crash_cause(),
        Some(&CrashCause::ExitedImmediately { exit_code: Some(1) })
    );
    assert_eq!(
        last_lines(&state),
        ["error: invalid argument: --no-such-flag"]
    );
    match &state.phase {
        Phase::Crashed {
            exit_code,
            explanation,
            ..
        } => {
            assert_eq!(*exit_code, Some(1));
            assert!(explanation.contains("flag"), "{explanation}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_engine_that_never_gets_healthy_is_stopped_after_the_timeout() {
    let rig = Rig::new();
    let mut spec = engine("slowpoke", "serve", free_port(), 1000.0, 0);
    spec.health.ready_timeout = Duration::from_millis(1500);
    let supervisor = rig.supervisor();
    let handle = supervisor.start(spec).await.unwrap();
    let pgid = rig.reaper.track(handle.pid());
    wait(&handle, |s| matches!(s.phase, Phase::Loading { .. })).await;
    let state = wait(&handle, crashed).await;
    assert_eq!(
        state.crash_cause(),
        Some(&CrashCause::NeverHealthy { waited_ms: 1500 })
    );
    assert!(last_lines(&state)
        .iter()
        .any(|l| l.contains("loading model tensors")));
    assert!(live_group_members(pgid).is_empty(), "nothing left running");
    assert!(!rig.run_dir().join("slowpoke.json").exists());
}

#[tokio::test]
async fn a_process_without_an_endpoint_is_ready_once_it_runs_and_its_end_is_seen() {
    let rig = Rig::new();
    // Its "engine" never serves the health URL: as process-only it is ready anyway.
    let mut spec = engine("follower", "serve", free_port(), 1000.0, 0);
    spec.health.process_only = true;
    spec.health.ready_timeout = Duration::from_millis(500);
    let supervisor = rig.supervisor();
    let handle = supervisor.start(spec).await.unwrap();
    let pgid = rig.reaper.track(handle.pid());
    let ready = wait(&handle, |s| s.is_ready()).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(handle.state().is_ready(), "no ready timeout applies");
    assert!(handle
        .logs()
        .tail(5)
        .iter()
        .any(|l| l.text.contains("ready: the process runs")));
    let pid = ready.pid.unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    wait(&handle, crashed).await;
    assert!(live_group_members(pgid).is_empty(), "nothing left running");
}

/// Starts an engine, waits until it is ready, then drops the supervisor as a crashing daemon
/// would: the engine keeps running and only its pid file remembers it.
async fn orphan_an_engine(rig: &Rig, name: &str) -> i32 {
    let supervisor = rig.supervisor();
    let handle = supervisor
        .start(engine(name, "serve", free_port(), 0.0, 0))
        .await
        .unwrap();
    let pid = rig.reaper.track(handle.pid());
    wait(&handle, ProcessState::is_ready).await;
    drop(handle);
    drop(supervisor);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        is_running(pid),
        "dropping the supervisor does not kill the engine"
    );
    pid
}

fn write_record(run_dir: &Path, name: &str, pid: i32, start_time: u64) -> PathBuf {
    let record = PidRecord {
        name: name.into(),
        pid,
        pgid: pid,
        start_time,
        program: "/usr/bin/llama-server".into(),
        args: Vec::new(),
        health_url: "http://127.0.0.1:1/health".into(),
        stop_timeout_ms: 1000,
        started_at_ms: 0,
    };
    let path = run_dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn recover_finds_orphans_and_cleans_up_stale_pid_files() {
    let rig = Rig::new();
    let pid = orphan_an_engine(&rig, "left-behind").await;

    // A dead pid, and our own pid with another start time (as if the pid had been reused).
    let mut short = std::process::Command::new("/bin/true").spawn().unwrap();
    let dead = i32::try_from(short.id()).unwrap();
    short.wait().unwrap();
    let dead_file = write_record(&rig.run_dir(), "dead", dead, 1);
    let me = i32::try_from(std::process::id()).unwrap();
    let my_start = proc_stat(me).unwrap().start_time;
    let reused_file = write_record(&rig.run_dir(), "reused", me, my_start + 1000);
    std::fs::write(rig.run_dir().join("garbage.json"), "{not json").unwrap();

    let orphans = Supervisor::recover(&rig.run_dir()).await.unwrap();
    assert_eq!(orphans.len(), 1, "{orphans:#?}");
    let orphan = &orphans[0];
    assert_eq!((orphan.name(), orphan.record.pid), ("left-behind", pid));
    assert!(orphan.leader_alive && orphan.members.contains(&pid));
    assert_eq!(orphan.health, Probe::Ready);
    assert!(
        !dead_file.exists() && !reused_file.exists(),
        "stale pid files removed"
    );
    assert!(!rig.run_dir().join("garbage.json").exists());
    assert!(is_running(me), "a reused pid is not ours to touch");

    // A new engine of the same name is refused while the orphan lives.
    let err = rig
        .supervisor()
        .start(engine("left-behind", "serve", free_port(), 0.0, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, SuperviseError::OrphanAlive { .. }), "{err}");

    orphan.cleanup().await.unwrap();
    assert!(!is_running(pid) && live_group_members(pid).is_empty());
    assert!(!orphan.pid_file.exists());
    assert!(Supervisor::recover(&rig.run_dir())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn an_adopted_orphan_is_watched_and_stopped() {
    let rig = Rig::new();
    let first = orphan_an_engine(&rig, "kept").await;
    let second = orphan_an_engine(&rig, "doomed").await;
    let mut orphans = Supervisor::recover(&rig.run_dir()).await.unwrap();
    orphans.sort_by(|a, b| a.name().cmp(b.name()));
    assert_eq!(
        orphans.iter().map(|o| o.name()).collect::<Vec<_>>(),
        ["doomed", "kept"]
    );

    let supervisor = rig.supervisor();
    let doomed = supervisor.adopt(orphans.remove(0)).unwrap();
    let kept = supervisor.adopt(orphans.remove(0)).unwrap();
    assert!(kept.state().is_ready() && doomed.state().is_ready());
    assert!(kept.logs().search("adopted pid").len() == 1);

    // Its death is noticed without being its parent.
    let killed_at = Instant::now();
    // SAFETY: kill only sends a signal, to our own engine.
    assert_eq!(unsafe { libc::kill(second, libc::SIGKILL) }, 0);
    let state = wait(&doomed, crashed).await;
    assert!(killed_at.elapsed() < Duration::from_secs(2));
    assert_eq!(
        state.crash_cause(),
        Some(&CrashCause::Other { exit_code: None })
    );
    assert!(!rig.run_dir().join("doomed.json").exists());

    let stopped = kept.stop().await.unwrap();
    assert_eq!(stopped.phase, Phase::Stopped);
    assert!(!is_running(first) && live_group_members(first).is_empty());
    assert!(!rig.run_dir().join("kept.json").exists());
}

#[tokio::test]
async fn names_are_unique_while_running() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let handle = supervisor
        .start(engine("solo", "serve", free_port(), 0.0, 0))
        .await
        .unwrap();
    rig.reaper.track(handle.pid());
    let err = supervisor
        .start(engine("solo", "serve", free_port(), 0.0, 0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SuperviseError::AlreadyRunning { .. }),
        "{err}"
    );
    assert!(supervisor.stop_all().await.is_empty());
    // Once stopped, the name is free again.
    let again = supervisor
        .start(engine("solo", "serve", free_port(), 0.0, 0))
        .await
        .unwrap();
    rig.reaper.track(again.pid());
    wait(&again, ProcessState::is_ready).await;
    again.stop().await.unwrap();
}

#[tokio::test]
async fn an_automatic_restart_waits_for_the_restart_gate_with_the_ended_pid() {
    let rig = Rig::new();
    let gated: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = gated.clone();
    // Stands in for "NVML still lists the old pid": the gate holds the restart for 1.5 s.
    let gate: rigdeck_supervisor::RestartGate = Arc::new(move |pid| {
        seen.lock().unwrap().push(pid);
        Box::pin(tokio::time::sleep(Duration::from_millis(1500)))
    });
    let supervisor = rig.supervisor().with_restart_gate(gate);
    let mut spec = engine("gated", "serve", free_port(), 0.0, 0);
    spec.restart = RestartPolicy::OnFailure {
        max_restarts: 1,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(100),
    };
    let handle = supervisor.start(spec).await.unwrap();
    let first = wait(&handle, ProcessState::is_ready).await;
    let pid = rig.reaper.track(first.pid);
    let killed_at = Instant::now();
    // SAFETY: kill only sends a signal, to our own engine.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let restarted = handle
        .wait_for(|s| s.attempt == 2, Duration::from_secs(15))
        .await;
    assert!(restarted.is_ok(), "{restarted:?}");
    assert!(
        killed_at.elapsed() >= Duration::from_millis(1500),
        "the restart waited for the gate"
    );
    assert_eq!(*gated.lock().unwrap(), vec![pid as u32]);
    assert_eq!(handle.logs().search("release the memory of pid").len(), 1);
    let second = wait(&handle, ProcessState::is_ready).await;
    rig.reaper.track(second.pid);
    handle.stop().await.unwrap();
}

/// The names of the files left in the run folder.
fn run_dir_files(rig: &Rig) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(rig.run_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The N of every `tick N` line in `logs`.
fn ticks(logs: &LogBuffer) -> Vec<u64> {
    logs.search("tick ")
        .iter()
        .filter(|line| line.stream == LogStream::Stdout)
        .filter_map(|line| line.text.strip_prefix("tick ")?.parse().ok())
        .collect()
}

async fn wait_for_line(logs: &LogBuffer, needle: &str, limit: Duration) {
    let seen = wait_until(
        || async { !logs.search(needle).is_empty() },
        limit,
        Duration::from_millis(20),
    );
    assert!(seen.await, "no '{needle}' in {:#?}", logs.tail(10));
}

/// Starts a fake engine in `mode` (printing `lines` when asked) under `supervisor` and waits
/// until it is ready; returns its handle and pid (reaped at the end of the test).
async fn start_ready(
    rig: &Rig,
    supervisor: &Supervisor,
    name: &str,
    mode: &str,
    lines: u32,
) -> (ProcessHandle, i32) {
    let handle = supervisor
        .start(engine(name, mode, free_port(), 0.0, lines))
        .await
        .unwrap();
    let pid = rig.reaper.track(handle.pid());
    wait(&handle, ProcessState::is_ready).await;
    (handle, pid)
}

/// The only orphan in the run folder, adopted by a new supervisor (a restarted daemon).
async fn adopt_the_orphan(rig: &Rig) -> (Supervisor, ProcessHandle) {
    let mut orphans = Supervisor::recover(&rig.run_dir()).await.unwrap();
    assert_eq!(orphans.len(), 1, "{orphans:#?}");
    let supervisor = rig.supervisor();
    let handle = supervisor.adopt(orphans.remove(0)).unwrap();
    (supervisor, handle)
}

#[tokio::test]
async fn adopted_engine_output_is_still_captured() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let (handle, pid) = start_ready(&rig, &supervisor, "ticker", "tick", 0).await;
    wait_for_line(handle.logs(), "tick 5", Duration::from_secs(10)).await;
    // The daemon dies: its tasks stop, the lines it had read stay in this buffer.
    let before = handle.logs().clone();
    drop(handle);
    drop(supervisor);
    let seen_before = ticks(&before).into_iter().max().unwrap();

    // Meanwhile the engine goes on printing, with nobody reading.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(is_running(pid), "the engine outlives the daemon");
    let (_supervisor, adopted) = adopt_the_orphan(&rig).await;
    assert_eq!(adopted.pid(), Some(pid as u32));
    let later = format!("tick {}", seen_before + 30);
    wait_for_line(adopted.logs(), &later, Duration::from_secs(10)).await;

    let after = ticks(adopted.logs());
    assert!(
        after
            .iter()
            .any(|&t| t > seen_before && t < seen_before + 10),
        "lines printed while no daemon ran arrive: {after:?}"
    );
    let mut all: Vec<u64> = ticks(&before).into_iter().chain(after).collect();
    all.sort_unstable();
    all.dedup();
    let top = *all.last().unwrap();
    assert_eq!(all, (0..=top).collect::<Vec<_>>(), "no tick is missing");
    assert!(adopted.logs().search("adopted pid").len() == 1);

    adopted.stop().await.unwrap();
    assert!(!is_running(pid));
    assert_eq!(
        run_dir_files(&rig),
        Vec::<String>::new(),
        "pid file, output files and offset records removed once stopped"
    );
}

#[tokio::test]
async fn an_engine_whose_daemon_died_keeps_writing_and_is_not_killed_by_sigpipe() {
    let rig = Rig::new();
    let supervisor = rig.supervisor();
    let (handle, pid) = start_ready(&rig, &supervisor, "loud", "flood", 50_000).await;
    drop(handle);
    drop(supervisor);

    // About 5 MB with no daemon: far more than a pipe holds, and every write would have hit a
    // pipe without a reader.
    // SAFETY: kill only sends a signal, to our own engine.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    let output = rig.run_dir().join("loud.stdout");
    let done = wait_until(
        || async { std::fs::read(&output).is_ok_and(|bytes| bytes.ends_with(b"flood done\n")) },
        Duration::from_secs(20),
        Duration::from_millis(50),
    );
    assert!(done.await, "the engine wrote all of it");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        is_running(pid),
        "no SIGPIPE, no EPIPE: the engine still runs"
    );

    let (_supervisor, adopted) = adopt_the_orphan(&rig).await;
    assert!(adopted.state().is_ready());
    wait_for_line(adopted.logs(), "flood done", Duration::from_secs(20)).await;
    assert!(!adopted.logs().search("flood line 49999 ").is_empty());
    adopted.stop().await.unwrap();
}

/// Whether `dir`'s filesystem can punch holes into files.
fn punches_holes(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let path = dir.join("hole-probe");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate only changes the allocation of our own open file.
    let punched = unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, 4096) } == 0;
    std::fs::remove_file(&path).unwrap();
    punched
}

#[tokio::test]
async fn a_chatty_engines_output_file_stays_small_and_loses_no_line() {
    const LINES: usize = 200_000;
    let rig = Rig::new();
    // One log file big enough for all of it, to count the lines afterwards.
    let limits = LogLimits {
        ring_lines: 1000,
        file_max_bytes: 1 << 30,
        file_keep: 1,
    };
    let supervisor = rig.supervisor().with_log_limits(limits);
    let (handle, pid) = start_ready(&rig, &supervisor, "chatty", "flood", LINES as u32).await;
    // SAFETY: kill only sends a signal, to our own engine.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    wait_for_line(handle.logs(), "flood done", Duration::from_secs(60)).await;

    let output = rig.run_dir().join("chatty.stdout");
    let size = std::fs::metadata(&output).unwrap().len();
    assert!(size > 15_000_000, "{size} bytes written");
    if punches_holes(&rig.run_dir()) {
        use std::os::unix::fs::MetadataExt;
        let allocated = || std::fs::metadata(&output).unwrap().blocks() * 512;
        let small = wait_until(
            || async { allocated() < 4 << 20 },
            Duration::from_secs(10),
            Duration::from_millis(100),
        );
        assert!(small.await, "{} bytes on disk of {size}", allocated());
    } else {
        eprintln!("the run folder's filesystem cannot punch holes: disk use not checked");
    }

    let log = std::fs::read_to_string(rig.log_dir().join("chatty.log")).unwrap();
    let flood: Vec<&str> = log.lines().filter(|l| l.contains(" flood line ")).collect();
    assert_eq!(flood.len(), LINES, "every line arrived once");
    assert!(flood
        .last()
        .unwrap()
        .contains(&format!(" flood line {} ", LINES - 1)));
    handle.stop().await.unwrap();
}
