//! The daemon under what users and their agents do at once, for a fixed time: a `rigdeck serve`
//! process with two real llama-server profiles (the tiny model; started on request, stopped after
//! one idle second) and the NVML test double; workers issue a seeded random mix of starts, stops,
//! restarts, requests (whole, streamed, cut), `kill -9` of an engine and benchmarks, and the
//! daemon itself is killed and started again halfway. Then the invariants: every instance shown
//! ready listens on the port it shows and answers through `/v1`; no engine runs outside the
//! supervisor; every failed call said why and none hung; descriptors, tasks and memory are back
//! near where they started; the database passes `PRAGMA integrity_check`.
//!
//! `RIGDECK_CHAOS_SEED` replays a seed (each run prints its own); `RIGDECK_CHAOS_SECS` sets the
//! duration (60 s here; `make soak` runs an hour).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::daemon_process::{self, Daemon};
use support::listeners_on;

const PROFILES: [&str; 2] = ["alpha", "beta"];
const WORKERS: u64 = 4;
/// Longer than any wait the daemon itself may impose (a load, a stop's SIGKILL timeout): a call
/// still unanswered by then hung.
const CALL_DEADLINE: Duration = Duration::from_secs(90);

/// splitmix64: a seeded sequence, so a failing mix can be replayed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What every worker shares: where the daemon is, and what happened.
struct Stage {
    port: u16,
    token: String,
    key: String,
    client: reqwest::Client,
    /// True while the daemon is down on purpose (its calls fail as "connection refused").
    restarting: AtomicBool,
    outcomes: Mutex<BTreeMap<String, u64>>,
    /// Calls that got no answer within [`CALL_DEADLINE`], and failures that said nothing.
    violations: Mutex<Vec<String>>,
    operations: AtomicU64,
    /// The longest call, and what it was.
    longest: Mutex<(u64, String)>,
}

impl Stage {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn count(&self, kind: String) {
        *self.outcomes.lock().unwrap().entry(kind).or_default() += 1;
    }

    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }

    fn took(&self, started: Instant, what: &str) {
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut longest = self.longest.lock().unwrap();
        if ms > longest.0 {
            *longest = (ms, what.to_owned());
        }
        self.operations.fetch_add(1, Ordering::Relaxed);
    }

    async fn admin(&self, method: reqwest::Method, path: &str) -> Option<(u16, Value)> {
        let request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .json(&json!({}));
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let text = response.text().await.ok()?;
        Some((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    async fn instances(&self) -> Vec<Value> {
        match self.admin(reqwest::Method::GET, "/api/v1/instances").await {
            Some((200, Value::Array(all))) => all,
            other => panic!("cannot list instances: {other:?}"),
        }
    }
}

/// The error message a failed answer carries (JSON in either dialect, or an SSE error event).
fn error_message(body: &str) -> Option<String> {
    let json = serde_json::from_str::<Value>(body).ok().or_else(|| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .find_map(|d| {
                serde_json::from_str::<Value>(d)
                    .ok()
                    .filter(|v| v.get("error").is_some())
            })
    })?;
    json.pointer("/error/message")
        .or_else(|| json.get("message"))
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .map(str::to_owned)
}

/// The first words of a message, numbers and names folded, to count failures by kind.
fn kind_of(message: &str) -> String {
    let folded: String = message
        .chars()
        .take(70)
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    folded.replace("alpha", "P").replace("beta", "P")
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Start,
    Stop,
    Restart,
    Ask,
    Stream,
    StreamCut,
    Kill,
}

fn pick(dice: &mut Dice) -> Action {
    match dice.below(40) {
        0..=3 => Action::Start,
        4..=6 => Action::Stop,
        7..=8 => Action::Restart,
        9..=22 => Action::Ask,
        23..=32 => Action::Stream,
        33..=38 => Action::StreamCut,
        _ => Action::Kill,
    }
}

async fn act(stage: &Stage, action: Action, profile: &str) {
    let started = Instant::now();
    let done = tokio::time::timeout(CALL_DEADLINE, run_action(stage, action, profile)).await;
    stage.took(started, &format!("{action:?} on {profile}"));
    match done {
        Ok(kind) => stage.count(format!("{action:?}: {kind}")),
        Err(_) if stage.restarting.load(Ordering::Relaxed) => {
            stage.count(format!("{action:?}: cut by the daemon restart"));
        }
        Err(_) => stage.violation(format!(
            "{action:?} on {profile} got no answer within {} s",
            CALL_DEADLINE.as_secs()
        )),
    }
}

/// Runs one action; what came of it, as a kind to count.
async fn run_action(stage: &Stage, action: Action, profile: &str) -> String {
    match action {
        Action::Start => lifecycle(stage, &format!("/api/v1/profiles/{profile}/start")).await,
        Action::Stop => lifecycle(stage, &format!("/api/v1/instances/{profile}/stop")).await,
        Action::Restart => lifecycle(stage, &format!("/api/v1/instances/{profile}/restart")).await,
        Action::Ask => ask(stage, profile, false, false).await,
        Action::Stream => ask(stage, profile, true, false).await,
        Action::StreamCut => ask(stage, profile, true, true).await,
        Action::Kill => kill_engine(stage, profile).await,
    }
}

async fn lifecycle(stage: &Stage, path: &str) -> String {
    match stage.admin(reqwest::Method::POST, path).await {
        None => unreachable_daemon(stage, path),
        Some((status, _)) if status < 300 => "ok".to_owned(),
        Some((status, body)) => match body["message"].as_str() {
            Some(message) if !message.trim().is_empty() => format!("{status} {}", kind_of(message)),
            _ => {
                stage.violation(format!(
                    "{path} answered {status} without a message: {body}"
                ));
                format!("{status} without a message")
            }
        },
    }
}

fn unreachable_daemon(stage: &Stage, what: &str) -> String {
    if !stage.restarting.load(Ordering::Relaxed) {
        stage.violation(format!("{what}: the daemon did not answer"));
    }
    "daemon unreachable (restarting)".to_owned()
}

async fn ask(stage: &Stage, profile: &str, stream: bool, cut: bool) -> String {
    let body = json!({"model": profile, "stream": stream, "max_tokens": 12,
        "messages": [{"role": "user", "content": "Say something."}]});
    let sent = stage
        .client
        .post(stage.url("/v1/chat/completions"))
        .bearer_auth(&stage.key)
        .json(&body)
        .send()
        .await;
    let Ok(response) = sent else {
        return unreachable_daemon(stage, "a /v1 request");
    };
    let status = response.status().as_u16();
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => return "stream ended early (engine gone)".to_owned(),
        }
        if cut && text.contains("data: {") {
            return "cut by the client".to_owned();
        }
    }
    match (status, error_message(&text)) {
        (200, None) => "ok".to_owned(),
        (_, Some(message)) => format!("{status} {}", kind_of(&message)),
        (_, None) => {
            stage.violation(format!(
                "a /v1 request for {profile} got {status} without a message: {text:.200}"
            ));
            format!("{status} without a message")
        }
    }
}

async fn kill_engine(stage: &Stage, profile: &str) -> String {
    let pid = stage
        .instances()
        .await
        .into_iter()
        .find(|v| v["name"] == profile && v["phase"] == "ready")
        .and_then(|v| v["pid"].as_i64());
    match pid {
        Some(pid) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            "killed".to_owned()
        }
        None => "nothing ready to kill".to_owned(),
    }
}

async fn worker(stage: Arc<Stage>, mut dice: Dice, until: Instant) {
    while Instant::now() < until {
        let action = pick(&mut dice);
        let profile = PROFILES[usize::from(dice.below(2) == 1)];
        act(&stage, action, profile).await;
        // Pauses around the idle timeout (one second), so requests meet idle stops.
        tokio::time::sleep(Duration::from_millis(dice.below(1_500))).await;
    }
}

/// A benchmark every few seconds on one profile: the run holds the instance.
async fn benchmarker(stage: Arc<Stage>, until: Instant) {
    while Instant::now() + Duration::from_secs(10) < until {
        let started = Instant::now();
        let body = json!({"target": {"kind": "profile", "name": "alpha"},
            "spec": {"warm_runs": 2, "shapes": [{"prompt_tokens": 16, "output_tokens": 8}]}});
        let response = stage
            .client
            .post(stage.url("/api/v1/bench/runs"))
            .bearer_auth(&stage.token)
            .json(&body)
            .send()
            .await;
        let id = match response {
            Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["id"].as_i64()),
            Err(_) => None,
        };
        let Some(id) = id else {
            stage.count("Benchmark: not started (daemon restarting)".to_owned());
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        };
        let status = loop {
            let run = stage
                .admin(reqwest::Method::GET, &format!("/api/v1/bench/runs/{id}"))
                .await;
            match run {
                Some((200, run)) if run["status"] != "running" && run["status"] != "queued" => {
                    break format!(
                        "{} {}",
                        run["status"],
                        kind_of(run["error"].as_str().unwrap_or(""))
                    );
                }
                _ if started.elapsed() > CALL_DEADLINE => {
                    stage.violation(format!(
                        "benchmark {id} still running after {} s",
                        CALL_DEADLINE.as_secs()
                    ));
                    break "hung".to_owned();
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        };
        stage.took(started, "a benchmark");
        stage.count(format!("Benchmark: {status}"));
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// What the daemon process holds: open descriptors, resident memory, live tokio tasks.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    fds: usize,
    rss_kib: u64,
    tasks: u64,
}

async fn footprint(stage: &Stage, daemon: &Daemon) -> Footprint {
    let pid = daemon.0.id();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let metrics = stage
        .client
        .get(stage.url("/metrics"))
        .bearer_auth(&stage.key)
        .send()
        .await
        .expect("/metrics")
        .text()
        .await
        .expect("/metrics text");
    let tasks = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rigdeck_daemon_tasks "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("rigdeck_daemon_tasks in /metrics") as u64;
    Footprint {
        fds,
        rss_kib,
        tasks,
    }
}

/// Stops both profiles and waits until no instance runs: the daemon at rest.
async fn settle(stage: &Stage) {
    for profile in PROFILES {
        stage
            .admin(
                reqwest::Method::POST,
                &format!("/api/v1/instances/{profile}/stop"),
            )
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while stage
        .instances()
        .await
        .iter()
        .any(|v| !matches!(v["phase"].as_str(), Some("stopped" | "crashed")))
    {
        assert!(
            Instant::now() < deadline,
            "instances did not stop: {:?}",
            stage.instances().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let the idle connections and the tasks of the stopped engines wind down.
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// The footprint after the mix is within reach of the one before (pools and caches may have
/// filled a little; a leak per operation would be far beyond).
fn assert_back_near(before: Footprint, after: Footprint, operations: u64) {
    eprintln!("footprint before {before:?}, after {after:?} ({operations} operations)");
    assert!(
        after.fds <= before.fds + 16,
        "descriptors grew from {} to {}",
        before.fds,
        after.fds
    );
    assert!(
        after.tasks <= before.tasks + 16,
        "tasks grew from {} to {}",
        before.tasks,
        after.tasks
    );
    assert!(
        after.rss_kib <= before.rss_kib + 64 * 1024 + before.rss_kib / 2,
        "resident memory grew from {} KiB to {} KiB",
        before.rss_kib,
        after.rss_kib
    );
}

/// Engines started from this test's folder that are alive now (by their command line).
fn engines_running(dir: &Path) -> Vec<i64> {
    let marker = dir.display().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if cmdline.contains("llama-server") && cmdline.contains(&marker) && !zombie {
            pids.push(pid);
        }
    }
    pids
}

/// Every instance shown ready listens on the port it shows and answers through `/v1`; every
/// engine alive is one the daemon shows running. The idle timer (one second) may stop an
/// instance between the view and the look at the sockets: a mismatch counts only when the view
/// still says the same after the look.
async fn assert_consistent(stage: &Stage, dir: &Path) {
    for view in stage.instances().await {
        if view["phase"] != "ready" {
            continue;
        }
        let name = view["name"].as_str().unwrap_or_default().to_owned();
        let port = view["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("a ready instance shows its port");
        let pid = view["pid"]
            .as_i64()
            .expect("a ready instance shows its pid");
        let listening = listeners_on(port);
        if !listening.contains(&pid) {
            let now = shown(stage, &name).await;
            assert!(
                now["phase"] != "ready" || now["pid"] != view["pid"] || now["port"] != view["port"],
                "'{name}' is shown ready on port {port} with pid {pid}, but the listeners there are {listening:?}"
            );
        }
        let status = ask(stage, &name, false, false).await;
        assert_eq!(status, "ok", "'{name}' is ready but /v1 answered: {status}");
    }
    // After the requests above (which may start a model again), once no start, restart or stop
    // is under way: nothing starts an engine between the list and the look at the processes.
    let views = steady_instances(stage).await;
    let supervised: Vec<i64> = views
        .iter()
        .filter(|v| v["phase"] != "stopped" && v["phase"] != "crashed")
        .filter_map(|v| v["pid"].as_i64())
        .collect();
    for pid in engines_running(dir) {
        assert!(
            supervised.contains(&pid),
            "engine pid {pid} runs outside the supervisor (an orphan); the daemon shows {views:?}"
        );
    }
}

/// The instances once none is starting, loading, stopping or waiting to restart.
async fn steady_instances(stage: &Stage) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let views = stage.instances().await;
        let steady = views.iter().all(|v| match v["phase"].as_str() {
            Some("ready" | "stopped") => true,
            Some("crashed") => v["restart"].is_null(),
            _ => false,
        });
        if steady {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "instances never settled: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The view of one instance now.
async fn shown(stage: &Stage, name: &str) -> Value {
    stage
        .instances()
        .await
        .into_iter()
        .find(|v| v["name"] == name)
        .unwrap_or(Value::Null)
}

async fn create_profiles(stage: &Stage, build_id: i64, model: &Path) {
    for name in PROFILES {
        let body = json!({"name": name, "engine_build_id": build_id, "model": model,
            "restart": {"policy": "on_failure", "max_restarts": 1000, "initial_backoff_ms": 200,
                "max_backoff_ms": 1000},
            "extra_args": ["--metrics"],
            "placement": {"context": 2048, "threads": 1},
            "gateway": {"on_demand": true, "idle_ttl_s": 1}});
        let response = stage
            .client
            .post(stage.url("/api/v1/profiles"))
            .bearer_auth(&stage.token)
            .json(&body)
            .send()
            .await
            .expect("create a profile");
        assert_eq!(
            response.status().as_u16(),
            201,
            "{:?}",
            response.text().await
        );
    }
}

async fn create_key(port: u16, token: &str, client: &reqwest::Client) -> String {
    let created: Value = client
        .post(format!("http://127.0.0.1:{port}/api/v1/keys"))
        .bearer_auth(token)
        .json(&json!({"name": "chaos"}))
        .send()
        .await
        .expect("create a key")
        .json()
        .await
        .expect("the key");
    created["secret"].as_str().expect("secret").to_owned()
}

async fn run_mix(stage: &Arc<Stage>, seed: u64, secs: u64) {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..WORKERS {
        tasks.push(tokio::spawn(worker(
            stage.clone(),
            Dice(seed ^ (i + 1)),
            until,
        )));
    }
    tasks.push(tokio::spawn(benchmarker(stage.clone(), until)));
    for task in tasks {
        task.await.expect("worker");
    }
}

fn seed() -> u64 {
    std::env::var("RIGDECK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_mix_of_everything_at_once_keeps_every_invariant() {
    let seed = seed();
    let secs: u64 = std::env::var("RIGDECK_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    eprintln!("chaos seed {seed} for {secs} s (replay: RIGDECK_CHAOS_SEED={seed})");
    let dir = tempfile::tempdir().expect("temp dir");
    let port = daemon_process::free_port();
    let build = support::register_llama_server(&dir.path().join("data")).await;
    let model: PathBuf = support::tiny_runnable(dir.path());
    let daemon = daemon_process::serve(dir.path(), port).await;
    let token = std::fs::read_to_string(dir.path().join("config/token"))
        .expect("token")
        .trim()
        .to_owned();
    // No idle connections kept: each would be a task and a descriptor in the daemon.
    let client = reqwest::Client::builder()
        .timeout(CALL_DEADLINE)
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let key = create_key(port, &token, &client).await;
    let stage = Arc::new(Stage {
        port,
        token,
        key,
        client,
        restarting: AtomicBool::new(false),
        outcomes: Mutex::new(BTreeMap::new()),
        violations: Mutex::new(Vec::new()),
        operations: AtomicU64::new(0),
        longest: Mutex::new((0, String::new())),
    });
    create_profiles(&stage, build.id, &model).await;
    let started = Instant::now();

    // First half, against a footprint taken once both engines ran once.
    for profile in PROFILES {
        assert_eq!(ask(&stage, profile, false, false).await, "ok");
    }
    settle(&stage).await;
    let before = footprint(&stage, &daemon).await;
    run_mix(&stage, seed, secs / 2).await;
    assert_consistent(&stage, dir.path()).await;
    settle(&stage).await;
    assert_back_near(
        before,
        footprint(&stage, &daemon).await,
        stage.operations.load(Ordering::Relaxed),
    );

    // The daemon killed outright with engines running, then started again: it adopts them.
    for profile in PROFILES {
        assert_eq!(ask(&stage, profile, false, false).await, "ok");
    }
    stage.restarting.store(true, Ordering::Relaxed);
    daemon.crash();
    let daemon = daemon_process::serve(dir.path(), port).await;
    stage.restarting.store(false, Ordering::Relaxed);
    assert_consistent(&stage, dir.path()).await;
    // Second half, against the new daemon's footprint once it ran both engines.
    settle(&stage).await;
    for profile in PROFILES {
        assert_eq!(ask(&stage, profile, false, false).await, "ok");
    }
    settle(&stage).await;
    let before = footprint(&stage, &daemon).await;
    let first_half = stage.operations.load(Ordering::Relaxed);
    run_mix(&stage, seed.rotate_left(17), secs - secs / 2).await;
    assert_consistent(&stage, dir.path()).await;
    settle(&stage).await;
    assert!(
        engines_running(dir.path()).is_empty(),
        "engines left after every profile stopped"
    );
    let operations = stage.operations.load(Ordering::Relaxed);
    assert_back_near(
        before,
        footprint(&stage, &daemon).await,
        operations - first_half,
    );

    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let (longest_ms, longest) = stage.longest.lock().unwrap().clone();
    eprintln!(
        "chaos seed {seed}: {operations} operations in {minutes:.1} min ({:.0} per minute), longest call {longest_ms} ms ({longest})",
        operations as f64 / minutes
    );
    for (kind, n) in stage.outcomes.lock().unwrap().iter() {
        eprintln!("  {n:>6}  {kind}");
    }
    assert!(
        daemon.stop(Duration::from_secs(30)),
        "the daemon did not stop within 30 s of SIGTERM"
    );
    let db = dir.path().join("data/rigdeck.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("open the database");
    let check: (String,) = sqlx::query_as("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .expect("integrity_check");
    assert_eq!(check.0, "ok");
    let violations = stage.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}
