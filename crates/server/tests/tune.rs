//! The tuning loop through the daemon against a real llama-server (the tiny model): the engine
//! restarted for each trial with the values on its command line, every trial benchmarked and
//! judged against the noise, a trial whose engine cannot start recorded while the loop goes on,
//! the running profile brought back as saved, the best saved as a new profile; and the bad
//! input: unknown knobs, values the profile cannot take, a second tuning at once, a cancel.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::engine_rig::Rig;

/// Polls a tuning until it is no longer running.
async fn ended(rig: &Rig, id: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(400);
    loop {
        let (status, tune) = rig
            .api("GET", &format!("/api/v1/bench/tunes/{id}"), None)
            .await;
        assert_eq!(status, 200, "{tune}");
        if tune["status"] != "running" {
            return tune;
        }
        assert!(Instant::now() < deadline, "tuning {id} never ended: {tune}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// One small workload point, three warm runs (the least a trial may have).
fn quick_bench() -> Value {
    json!({"shapes": [{"prompt_tokens": 32, "output_tokens": 16}], "warm_runs": 3, "api": "completions"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grid_restarts_the_engine_per_trial_records_a_crash_and_saves_the_best() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "tiny",
        json!({"placement": {"context": 2048, "threads": 1, "ubatch": 512}}),
    )
    .await;
    rig.run("tiny").await;

    // A lora file that does not exist: llama-server exits while loading.
    let (status, tune) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(json!({"profile": "tiny", "spec": {
                "strategy": "grid",
                "knobs": [{"name": "ubatch", "values": [64, 128]},
                          {"name": "--lora", "values": ["off", "/nowhere/adapter.gguf"]}],
                "bench": quick_bench()}})),
        )
        .await;
    assert_eq!(status, 201, "{tune}");
    let id = tune["id"].as_i64().expect("an id");
    assert_eq!(tune["trials_planned"], 5);

    // One tuning at a time: a second is refused while the first runs.
    let (status, busy) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(json!({"profile": "tiny", "spec": {"knobs": [{"name": "threads", "values": [2]}], "bench": quick_bench()}})),
        )
        .await;
    assert_eq!(status, 409, "{busy}");

    let tune = ended(&rig, id).await;
    assert_eq!(tune["status"], "done", "{tune}");
    let trials = tune["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 5, "{tune}");
    assert_eq!(trials[0]["values"], json!({}));
    assert_eq!(trials[0]["decision"]["verdict"], "baseline");
    for trial in trials {
        let crashed = trial["values"]["--lora"] == "/nowhere/adapter.gguf";
        if crashed {
            assert_eq!(trial["outcome"], "crashed", "{trial}");
            assert_eq!(trial["decision"]["verdict"], "failed", "{trial}");
            assert!(trial["error"].as_str().is_some(), "{trial}");
            continue;
        }
        assert_eq!(trial["outcome"], "measured", "{trial}");
        let run_id = trial["run_id"].as_i64().expect("the trial's benchmark run");
        let (_, run) = rig
            .api("GET", &format!("/api/v1/bench/runs/{run_id}"), None)
            .await;
        assert_eq!(run["status"], "done", "{run}");
        assert_eq!(run["results"][0]["runs"].as_array().map(Vec::len), Some(4));
        // The trial's values reached the engine's command line.
        let command = trial["command_line"].as_str().expect("command line");
        if let Some(ubatch) = trial["values"]["ubatch"].as_str() {
            assert!(command.contains(&format!("-ub {ubatch}")), "{command}");
            assert_eq!(run["context"]["command_line"], command);
        }
        let reason = trial["decision"]["reason"].as_str().expect("a reason");
        assert!(reason.contains("median"), "{reason}");
        assert!(trial["objective"]["stdev"].as_f64().is_some(), "{trial}");
    }

    // The profile was running before: it runs again, as saved (ubatch 512, no lora).
    let instance = rig
        .wait_phase("tiny", "ready", Duration::from_secs(120))
        .await;
    let command = instance["command_line"].as_str().expect("command line");
    assert!(
        command.contains("-ub 512") && !command.contains("--lora"),
        "{command}"
    );

    // Saving the best: only when a trial beat the baseline beyond the noise.
    let (status, saved) = rig
        .api(
            "POST",
            &format!("/api/v1/bench/tunes/{id}/save"),
            Some(json!({"name": "tiny-tuned"})),
        )
        .await;
    if tune["best"].is_null() {
        assert_eq!(status, 400, "{saved}");
        assert!(saved["message"]
            .as_str()
            .unwrap_or_default()
            .contains("noise"));
    } else {
        assert_eq!(status, 201, "{saved}");
        let ubatch = tune["best"]["values"]["ubatch"]
            .as_str()
            .expect("best ubatch");
        assert_eq!(saved["profile"]["placement"]["ubatch"].to_string(), ubatch);
        let (_, again) = rig
            .api("GET", &format!("/api/v1/bench/tunes/{id}"), None)
            .await;
        assert_eq!(again["saved_profile"], "tiny-tuned");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tunings_are_refused_before_any_restart_and_a_cancel_keeps_the_trials() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "tiny",
        json!({"placement": {"context": 2048, "threads": 1}}),
    )
    .await;
    let refused = |body: Value| {
        let rig = &rig;
        async move {
            let (status, answer) = rig.api("POST", "/api/v1/bench/tunes", Some(body)).await;
            assert_eq!(status, 400, "{answer}");
            answer["message"].as_str().unwrap_or_default().to_owned()
        }
    };
    let message =
        refused(json!({"profile": "tiny", "spec": {"knobs": [{"name": "speed", "values": [1]}]}}))
            .await;
    assert!(message.contains("threads"), "{message}");
    let message = refused(
        json!({"profile": "tiny", "spec": {"knobs": [{"name": "cache_type", "values": ["q9"]}]}}),
    )
    .await;
    assert!(message.contains("q8_0"), "{message}");
    let message = refused(json!({"profile": "tiny", "spec": {"knobs": [{"name": "--no-such-flag", "values": ["1"]}]}})).await;
    assert!(message.contains("--no-such-flag"), "{message}");
    let message = refused(
        json!({"profile": "nope", "spec": {"knobs": [{"name": "threads", "values": [2]}]}}),
    )
    .await;
    assert!(message.contains("profiles list"), "{message}");
    let message = refused(json!({"profile": "tiny", "spec": {"knobs": [{"name": "threads", "values": [1, 2]}], "bench": {"warm_runs": 1}}})).await;
    assert!(message.contains("3 warm runs"), "{message}");
    let message = refused(json!({"profile": "tiny", "spec": {"knobs": []}, "extra": 1})).await;
    assert!(message.contains("extra"), "{message}");
    assert!(
        rig.instance("tiny").await.is_null() || rig.instance("tiny").await["phase"] != "ready",
        "nothing was started"
    );

    // A walk cancelled during its first trial: stored as cancelled with that trial kept.
    let (status, tune) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(json!({"profile": "tiny", "spec": {"knobs": [{"name": "threads", "values": [2]}],
                "bench": {"shapes": [{"prompt_tokens": 32, "output_tokens": 400}], "warm_runs": 3, "api": "completions"}}})),
        )
        .await;
    assert_eq!(status, 201, "{tune}");
    let id = tune["id"].as_i64().expect("id");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, now) = rig
            .api("GET", &format!("/api/v1/bench/tunes/{id}"), None)
            .await;
        if now["trials"][0]["run_id"].is_i64()
            || now["trials"].as_array().is_some_and(|t| !t.is_empty())
                && rig.instance("tiny").await["phase"] == "ready"
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first trial never started: {now}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = rig
        .api("POST", &format!("/api/v1/bench/tunes/{id}/cancel"), None)
        .await;
    assert_eq!(status, 200);
    let tune = ended(&rig, id).await;
    assert_eq!(tune["status"], "cancelled", "{tune}");
    assert_eq!(tune["trials"].as_array().map(Vec::len), Some(1), "{tune}");
    // It was not running before: it is stopped after.
    let phase = &rig.instance("tiny").await["phase"];
    assert!(phase == "stopped" || phase.is_null(), "{phase}");
    let (status, _) = rig
        .api("DELETE", &format!("/api/v1/bench/tunes/{id}"), None)
        .await;
    assert_eq!(status, 204);
}
