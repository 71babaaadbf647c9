//! One lifecycle per profile, against real llama-server instances on the NVML test double:
//! two starts of one profile at once leave one engine on the port the daemon shows; two
//! profiles started at once are admitted against the same free VRAM once; requests sent around
//! an idle timeout never meet a half-stopped engine; a benchmark holds its engine against the
//! idle timeout.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::engine_rig::{Rig, READY};
use support::listeners_on;

async fn start(rig: &Rig, name: &str) -> (u16, Value) {
    rig.api(
        "POST",
        &format!("/api/v1/profiles/{name}/start"),
        Some(json!({})),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starts_of_one_profile_at_once_leave_the_engine_on_the_port_shown() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile("twice", json!({})).await;
    for round in 0..5 {
        let (first, second) = tokio::join!(start(&rig, "twice"), start(&rig, "twice"));
        let mut statuses = [first.0, second.0];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [200, 409],
            "round {round}: one start runs, the other is told it runs: {first:?} {second:?}"
        );
        let view = rig.wait_phase("twice", "ready", READY).await;
        let port = u16::try_from(view["port"].as_u64().expect("port")).expect("a port");
        let pid = view["pid"].as_i64().expect("pid");
        assert_eq!(
            listeners_on(port),
            vec![pid],
            "round {round}: shown on port {port} (pid {pid})"
        );
        let (status, stopped) = rig
            .api("POST", "/api/v1/instances/twice/stop", Some(json!({})))
            .await;
        assert_eq!(status, 200, "{stopped}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_started_at_once_spend_the_same_free_vram_once() {
    let rig = Rig::start("2x5060ti.json").await;
    // GPU 1 has 16 GiB free: either fits, both do not.
    let plan = json!({"planned_memory": [{"gpu": 1, "bytes": 10u64 << 30}]});
    rig.profile("left", plan.clone()).await;
    rig.profile("right", plan).await;
    let (left, right) = tokio::join!(start(&rig, "left"), start(&rig, "right"));
    let mut statuses = [left.0, right.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{left:?} {right:?}");
    let refused = if left.0 == 409 { &left.1 } else { &right.1 };
    assert_eq!(refused["code"], "does_not_fit", "{refused}");
}

/// A rig with the profile `idle` (started on request, stopped after one idle second), an API
/// key, and a short chat request for it.
async fn idle_after_a_second() -> (Rig, String, Value) {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "idle",
        json!({"gateway": {"on_demand": true, "idle_ttl_s": 1}}),
    )
    .await;
    let (_, key) = rig.key("agent").await;
    let body = json!({"model": "idle", "max_tokens": 4,
        "messages": [{"role": "user", "content": "Say something."}]});
    (rig, key, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_around_the_idle_timeout_never_meet_a_half_stopped_engine() {
    let (rig, key, body) = idle_after_a_second().await;
    let mut failures = Vec::new();
    // Gaps from just under to just over the timeout and its checks, so some requests arrive
    // as the idle timer stops the engine.
    for i in 0..24u64 {
        let (status, answer) = rig.call_v1("/v1/chat/completions", &key, &body).await;
        if status != 200 {
            failures.push(format!("request {i}: {status} {answer}"));
        }
        tokio::time::sleep(Duration::from_millis(700 + (i * 97) % 900)).await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_benchmark_holds_its_engine_against_the_idle_timeout() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "held",
        json!({"gateway": {"on_demand": true, "idle_ttl_s": 1}}),
    )
    .await;
    rig.run("held").await;
    // Runs that go to the engine directly, longer than the test watches: the gateway sees no
    // request, and the idle timer looks every second.
    let (status, run) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(json!({"target": {"kind": "instance", "name": "held"},
                "spec": {"warm_runs": 500, "shapes": [{"prompt_tokens": 16, "output_tokens": 64}]}})),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_i64().expect("id");
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(6) {
        let (_, run) = rig
            .api("GET", &format!("/api/v1/bench/runs/{id}"), None)
            .await;
        assert!(
            run["status"] == "running" || run["status"] == "queued",
            "the run ended under the test: {run}"
        );
        let view = rig.instance("held").await;
        assert_eq!(
            view["phase"], "ready",
            "stopped under the benchmark: {view}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = rig
        .api(
            "POST",
            &format!("/api/v1/bench/runs/{id}/cancel"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200);
    // Once the run let go, the idle timeout applies again.
    rig.wait_phase("held", "stopped", Duration::from_secs(30))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finds_its_model_stopping_for_idleness_waits_and_starts_it_again() {
    let (rig, key, body) = idle_after_a_second().await;
    let mut caught = 0;
    for round in 0..5 {
        let (status, answer) = rig.call_v1("/v1/chat/completions", &key, &body).await;
        assert_eq!(status, 200, "round {round}: {answer}");
        // Watch for the idle stop to begin, then ask at once.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let stopping = loop {
            let phase = rig.instance("idle").await["phase"].clone();
            if phase == "stopping" {
                break true;
            }
            if phase == "stopped" || std::time::Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if !stopping {
            continue;
        }
        caught += 1;
        let (status, answer) = rig.call_v1("/v1/chat/completions", &key, &body).await;
        assert_eq!(
            status, 200,
            "round {round}: asked while it stopped: {answer}"
        );
    }
    eprintln!("the idle stop was caught in progress {caught} time(s) of 5");
    assert!(caught > 0, "the idle stop was never seen in progress");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_a_load_on_request_outlives_a_stop_from_the_api() {
    let (rig, key, body) = idle_after_a_second().await;
    let asked = rig.call_v1("/v1/chat/completions", &key, &body);
    let stopped = async {
        // The request started the load; a stop from the API meanwhile.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !matches!(
            rig.instance("idle").await["phase"].as_str(),
            Some("starting" | "loading")
        ) {
            assert!(std::time::Instant::now() < deadline, "the load never began");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        rig.api("POST", "/api/v1/instances/idle/stop", Some(json!({})))
            .await
    };
    let ((status, answer), (stop, view)) = tokio::join!(asked, stopped);
    assert_eq!(stop, 200, "{view}");
    // It starts on request, and a request still wants it: started again.
    assert_eq!(status, 200, "the waiting request failed: {answer}");
}
