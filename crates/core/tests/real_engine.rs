//! A real llama-server, built through Rigdeck's own build path (bundled llama.cpp, the portable
//! CPU build the packages ship; cached after the first build), serving a tiny GGUF written by the
//! project's writer with a real tokenizer, launched from a stored launch profile by the instances
//! service.
//!
//! Checks: ready, an OpenAI chat completion answered, logs captured and searchable, `kill -9`
//! seen as a crash within 2 s and restarted by policy, stop leaves no process, a missing model
//! file and a port in use each classified, and a start waits for NVML (here a scripted readout)
//! to show the previous engine's memory released. Generous timeouts: two busy cores.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rigdeck_core::engines::cmake_build::{self, BuildRequest};
use rigdeck_core::engines::registry::{self, EngineBuild};
use rigdeck_core::engines::source;
use rigdeck_core::events::EventBus;
use rigdeck_core::launch::instances::{GpuSource, LaunchError};
use rigdeck_core::launch::{AdmissionError, Instances, LaunchProfile, PlannedGpu, RestartSetting};
use rigdeck_core::store::Store;
use rigdeck_core::supervisor::{CrashCause, Phase, ProcessState};
use rigdeck_core::telemetry::snapshot::{
    DriverState, GpuMemory, GpuProcess, GpuProcessKind, GpuReadout, GpuSnapshot,
};
use rigdeck_core::telemetry::StartedByRigdeck;
use rigdeck_gguf::tiny::TinyModel;

const LOADING: Duration = Duration::from_secs(180);
const GIB: u64 = 1 << 30;

async fn llama_server() -> PathBuf {
    let cache = source::cache_root().expect("a cache folder (RIGDECK_CACHE_DIR or HOME)");
    let request = BuildRequest::shared_cpu(cache);
    let built = cmake_build::build(&request, &|_| {})
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    built.llama_server
}

fn tiny_model(dir: &Path) -> PathBuf {
    let cache = source::cache_root().expect("cache folder");
    let vocab =
        cache.join("sources/llama-cpp-python-0.3.36/llama.cpp/models/ggml-vocab-llama-bpe.gguf");
    let model = dir.join("tiny.gguf");
    TinyModel::dense_runnable()
        .write(&vocab, &model)
        .expect("write the tiny model");
    model
}

/// A readout the test scripts (stands in for NVML): one 24 GiB GPU and its process list.
#[derive(Clone, Default)]
struct Gpus(Arc<Mutex<Vec<u32>>>);

impl Gpus {
    fn set_processes(&self, pids: &[u32]) {
        *self.0.lock().unwrap() = pids.to_vec();
    }

    fn source(&self) -> GpuSource {
        let pids = self.0.clone();
        Arc::new(move || {
            let mut gpu = GpuSnapshot::blank(0);
            gpu.memory = Some(GpuMemory {
                total_bytes: 24 * GIB,
                used_bytes: 2 * GIB,
                free_bytes: 22 * GIB,
            });
            gpu.processes = pids
                .lock()
                .unwrap()
                .iter()
                .map(|&pid| GpuProcess {
                    pid,
                    name: Some("llama-server".into()),
                    used_bytes: Some(GIB),
                    kind: GpuProcessKind::Compute,
                    started_by_rigdeck: true,
                    rigdeck_instance: Some("tiny".into()),
                })
                .collect();
            Some(GpuReadout {
                driver: DriverState::Ready {
                    driver_version: None,
                    cuda_driver_version: None,
                },
                gpus: vec![gpu],
            })
        })
    }
}

fn profile(name: &str, build: &EngineBuild, model: &Path) -> LaunchProfile {
    let mut p = LaunchProfile {
        name: name.into(),
        engine_build_id: build.id,
        model: model.to_owned(),
        restart: RestartSetting::OnFailure {
            max_restarts: 2,
            initial_backoff_ms: 200,
            max_backoff_ms: 1000,
        },
        ..LaunchProfile::default()
    };
    p.placement.context = 512;
    p.placement.threads = Some(2);
    p
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive either; the supervisor reaps its children.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

async fn final_state(instances: &Instances, name: &str) -> ProcessState {
    instances
        .handle(name)
        .unwrap()
        .wait_for(ProcessState::is_final, LOADING)
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_llama_server_from_a_profile() {
    let program = llama_server().await;
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let build = registry::register_path(&store, &program, None, None, 0)
        .await
        .expect("register the built llama-server");
    let gpus = Gpus::default();
    let instances = Instances::with_timeouts(
        store.clone(),
        &dir.path().join("data"),
        StartedByRigdeck::default(),
        EventBus::new(),
        gpus.source(),
        LOADING,
        Duration::from_secs(30),
    );

    // Ready, answering an OpenAI chat completion.
    let mut tiny = profile("tiny", &build, &model);
    // Planned on GPU 0 so the release wait below applies (the CPU build ignores it).
    tiny.planned_memory = vec![PlannedGpu { gpu: 0, bytes: GIB }];
    store.create_launch_profile(&tiny, 0).await.unwrap();
    let view = instances
        .start("tiny", false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = view.port.expect("a port was picked");
    assert_eq!(view.argv[0], program.display().to_string());
    let handle = instances.handle("tiny").unwrap();
    handle
        .wait_for(ProcessState::is_ready, LOADING)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", handle.logs().tail(20)));
    let answer = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(r#"{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8}"#)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("the engine answers");
    assert!(answer.status().is_success(), "{}", answer.status());
    let body: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert!(body["choices"][0]["message"].is_object(), "{body}");

    // Logs captured and searchable.
    let lines = instances.logs("tiny", None, None, 10_000).unwrap();
    assert!(lines.len() > 10, "{lines:?}");
    let found = instances
        .logs("tiny", Some(&format!(":{port}")), None, 10_000)
        .unwrap();
    assert!(!found.is_empty() && found.iter().all(|l| l.text.contains(&format!(":{port}"))));
    let view = instances.get("tiny").unwrap();
    assert!(view.uptime_ms.is_some());

    // kill -9: crashed within 2 s, then restarted by the policy.
    let first_pid = handle.pid().unwrap();
    let mut states = handle.subscribe_state();
    let killed_at = Instant::now();
    // SAFETY: kill only sends a signal, to the engine we started.
    unsafe { libc::kill(first_pid as i32, libc::SIGKILL) };
    let crashed = tokio::time::timeout(
        Duration::from_secs(2),
        states.wait_for(|s| matches!(s.phase, Phase::Crashed { .. })),
    )
    .await
    .expect("the crash is seen within 2 s")
    .unwrap()
    .clone();
    eprintln!("crash seen after {:?}", killed_at.elapsed());
    assert_eq!(
        crashed.crash_cause(),
        Some(&CrashCause::Killed { signal: 9 })
    );
    let restarted = handle
        .wait_for(|s| s.attempt == 2 && s.is_ready(), LOADING)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let second_pid = restarted.pid.unwrap();
    assert_ne!(first_pid, second_pid);

    // Stop leaves nothing behind.
    let stopped = instances.stop("tiny").await.unwrap();
    assert_eq!(stopped.state.phase, Phase::Stopped);
    assert!(!alive(first_pid) && !alive(second_pid));

    // NVML still lists the stopped engine: the next start waits until it is gone.
    gpus.set_processes(&[second_pid]);
    let clear = gpus.clone();
    let clearing = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        clear.set_processes(&[]);
    });
    let waited = Instant::now();
    instances
        .start("tiny", false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        waited.elapsed() >= Duration::from_millis(1400),
        "started while the old memory was still held"
    );
    clearing.await.unwrap();
    let third_pid = instances.handle("tiny").unwrap().pid().unwrap();
    instances.stop("tiny").await.unwrap();
    assert!(!alive(third_pid));

    // Planned memory that does not fit is refused, naming the GPU; force overrides.
    let mut huge = profile("huge", &build, &model);
    huge.planned_memory = vec![PlannedGpu {
        gpu: 0,
        bytes: 40 * GIB,
    }];
    huge.restart = RestartSetting::Never;
    store.create_launch_profile(&huge, 0).await.unwrap();
    let refused = instances.start("huge", false).await.unwrap_err();
    assert!(
        matches!(
            refused,
            LaunchError::Admission(AdmissionError::DoesNotFit { .. })
        ),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .starts_with("GPU 0 needs 40.2 GiB, 22.0 GiB free"),
        "{refused}"
    );
    assert!(instances.get("huge").is_none(), "nothing was started");

    // A model file deleted after the profile was saved: classified as missing_file.
    let doomed = dir.path().join("doomed.gguf");
    std::fs::copy(&model, &doomed).unwrap();
    let mut gone = profile("gone", &build, &doomed);
    gone.restart = RestartSetting::Never;
    store.create_launch_profile(&gone, 0).await.unwrap();
    std::fs::remove_file(&doomed).unwrap();
    instances.start("gone", false).await.unwrap();
    let ended = final_state(&instances, "gone").await;
    assert!(
        matches!(ended.crash_cause(), Some(CrashCause::MissingFile { .. })),
        "{:?}",
        ended.phase
    );

    // A port already in use: classified as port_in_use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut busy = profile("busy", &build, &model);
    busy.port = u32::from(taken.local_addr().unwrap().port());
    busy.restart = RestartSetting::Never;
    store.create_launch_profile(&busy, 0).await.unwrap();
    instances.start("busy", false).await.unwrap();
    let ended = final_state(&instances, "busy").await;
    assert!(
        matches!(ended.crash_cause(), Some(CrashCause::PortInUse { .. })),
        "{:?}",
        ended.phase
    );
    drop(taken);

    instances.stop_all().await;
    for view in instances.list() {
        assert!(!view.state.is_running(), "{} still runs", view.state.name);
        if let Some(pid) = view.state.pid {
            assert!(!alive(pid), "{} left pid {pid}", view.state.name);
        }
    }
}
