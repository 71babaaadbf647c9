//! One click from a hub model to a reply, through the API and `rigdeck run`: the real Gemma 3
//! 270M (written by another tool, no chat template) served by a stand-in hub, the real
//! llama-server. A quantization that does not fit is refused before a byte is downloaded, with
//! the one that fits as the fix; nothing is left half-made by a failed run.

mod support;

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;

use std::time::{Duration, Instant};

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use serde_json::{json, Value};
use support::engine_rig::{Rig, READY};

const REPO: &str = "google-test/Gemma-3-270m-GGUF";

async fn run_until_ended(rig: &Rig, body: Value) -> Value {
    let began = Instant::now();
    let (status, run) = rig.api("POST", "/api/v1/model-runs", Some(body)).await;
    assert_eq!(status, 202, "{run}");
    let deadline = Instant::now() + READY + Duration::from_secs(60);
    loop {
        let (_, run) = rig
            .api("GET", &format!("/api/v1/model-runs/{}", run["id"]), None)
            .await;
        if run["step"] == "ready" || run["step"] == "failed" {
            eprintln!("run ended after {:?}: {}", began.elapsed(), run["detail"]);
            return run;
        }
        assert!(Instant::now() < deadline, "the run never ended: {run}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn profile_names(rig: &Rig) -> Vec<String> {
    let (_, profiles) = rig.api("GET", "/api/v1/profiles", None).await;
    profiles
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_hub_model_runs_in_one_request_and_a_quantization_that_does_not_fit_is_refused_first() {
    let written = tempfile::tempdir().expect("tempdir");
    // A file far larger than this rig (GLM-5.2's shape, sparse on disk): only its header is read.
    let huge = rigdeck_gguf::fixtures::MoeShape::glm_5_2()
        .writer()
        .write_split(written.path(), "huge", 1)
        .expect("huge model");
    let hub = RunningHub::start(vec![FakeRepo::new(
        REPO,
        0x27,
        vec![
            FakeFile::from_disk("gemma-3-270m-Q4_K_M.gguf", &support::gemma3_270m()),
            FakeFile::from_disk("gemma-3-270m-Q8_0.gguf", &huge[0]),
        ],
    )])
    .await;
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", written.path().join("hf-cache"));
    std::env::remove_var("HF_TOKEN");
    let rig = Rig::start("2x5060ti.json").await;
    rig.t
        .wait_for_frame("a first reading", |f| !f.is_null())
        .await;

    // Too big: refused before downloading, the quantization that fits offered, nothing made.
    let refused = run_until_ended(
        &rig,
        json!({"source": {"kind": "hub", "repo": REPO, "quant": "Q8_0"}}),
    )
    .await;
    assert_eq!(refused["step"], "failed", "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not fit")),
        "{refused}"
    );
    assert_eq!(refused["fix"]["quant"], "Q4_K_M", "{refused}");
    assert!(refused["download_id"].is_null(), "{refused}");
    let (_, downloads) = rig.api("GET", "/api/v1/downloads", None).await;
    assert_eq!(downloads, json!([]), "nothing downloaded");
    assert!(profile_names(&rig).await.is_empty());

    // No quantization named: the one that fits, downloaded, placed, saved, started. A second
    // click on the same model at the same moment shares the download and the profile.
    let body = json!({"source": {"kind": "hub", "repo": REPO}, "context": 4096});
    let (ready, twin) = tokio::join!(
        run_until_ended(&rig, body.clone()),
        run_until_ended(&rig, body)
    );
    assert_eq!(ready["step"], "ready", "{ready}");
    assert_eq!(twin["step"], "ready", "{twin}");
    assert_eq!(ready["model"], twin["model"]);
    assert_eq!(ready["download_id"], twin["download_id"], "one download");
    // The run that made the profile carries its notes.
    let ready = if ready["created_profile"] == true {
        ready
    } else {
        twin
    };
    let name = ready["model"].as_str().expect("model name").to_owned();
    assert_eq!(name, "gemma-3-270m-q4_k_m");
    assert_eq!(profile_names(&rig).await, vec![name.clone()]);
    assert!(
        ready["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("CPU")))),
        "a CPU build on a rig with GPUs is said: {ready}"
    );
    let (_, profile) = rig
        .api("GET", &format!("/api/v1/profiles/{name}"), None)
        .await;
    let profile = if profile["profile"].is_object() {
        &profile["profile"]
    } else {
        &profile
    };
    assert_eq!(
        profile["chat_template"], "gemma",
        "the file carries no template: Gemma's own is named, {profile}"
    );
    assert!(
        ready["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("no chat template")))),
        "{ready}"
    );
    let (_, key) = rig.key("first-run").await;
    let (status, answer) = rig
        .call_v1(
            "/v1/chat/completions",
            &key,
            &json!({"model": name, "max_tokens": 8,
                "messages": [{"role": "user", "content": "Say hello."}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    // Run again: the same profile, already running, no second download.
    let again = run_until_ended(
        &rig,
        json!({"source": {"kind": "hub", "repo": REPO, "quant": "Q4_K_M"}}),
    )
    .await;
    assert_eq!(again["step"], "ready", "{again}");
    assert_eq!(again["model"], name.as_str());
    assert!(!again["created_profile"].as_bool().unwrap_or(true));
    let (_, downloads) = rig.api("GET", "/api/v1/downloads", None).await;
    assert_eq!(downloads.as_array().map(Vec::len), Some(1), "{downloads}");

    // The command line: one reply from the running model.
    let began = Instant::now();
    let (ok, stdout, stderr) = rig
        .cli(&[
            "run",
            &format!("{REPO}:Q4_K_M"),
            "-m",
            "Say hello.",
            "--max-tokens",
            "24",
        ])
        .await;
    eprintln!("rigdeck run took {:?}", began.elapsed());
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("ready"), "{stderr}");
    assert!(!stdout.trim().is_empty(), "a reply: {stdout}\n{stderr}");
    assert!(
        !stdout.contains("<end_of_turn>") && !stdout.contains("<|im_end|>"),
        "{stdout}"
    );
    assert!(
        !stderr.contains('\r'),
        "plain lines into a pipe: {stderr:?}"
    );

    // A file that is not there: one line, nothing made.
    let missing = run_until_ended(
        &rig,
        json!({"source": {"kind": "file", "path": "/nowhere/model.gguf"}}),
    )
    .await;
    assert_eq!(missing["step"], "failed");
    assert!(
        missing["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nowhere/model.gguf")),
        "{missing}"
    );
    assert_eq!(profile_names(&rig).await, vec![name]);
}

#[tokio::test]
async fn without_an_engine_build_a_run_stops_before_downloading_and_says_how_to_get_one() {
    let written = tempfile::tempdir().expect("tempdir");
    let tiny = support::tiny_runnable(written.path());
    let hub = RunningHub::start(vec![FakeRepo::new(
        REPO,
        0x28,
        vec![FakeFile::from_disk("tiny-Q4_K_M.gguf", &tiny)],
    )])
    .await;
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", written.path().join("hf-cache"));
    std::env::remove_var("HF_TOKEN");
    let server = support::TestServer::start("2x5060ti.json").await;
    server
        .wait_for_frame("a first reading", |f| !f.is_null())
        .await;

    let (status, run) = server
        .post_json(
            "/api/v1/model-runs",
            &json!({"source": {"kind": "hub", "repo": REPO}}),
        )
        .await;
    assert_eq!(status, 202, "{run}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let run = server
            .get_json(&format!("/api/v1/model-runs/{}", run["id"]))
            .await;
        if run["step"] == "failed" || run["step"] == "ready" {
            break run;
        }
        assert!(Instant::now() < deadline, "{run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run["step"], "failed", "{run}");
    assert!(
        run["error"].as_str().is_some_and(
            |e| e.contains("no llama.cpp build") && e.contains("rigdeck engines build")
        ),
        "{run}"
    );
    assert!(run["download_id"].is_null(), "{run}");
    assert_eq!(server.get_json("/api/v1/downloads").await, json!([]));
    assert_eq!(server.get_json("/api/v1/profiles").await, json!([]));
}
