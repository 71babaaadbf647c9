//! `rigdeck pull` and `rigdeck bench` with their stderr in a file, as a log or a pipe gets it:
//! plain progress lines, the last one the end state, and not a carriage return or escape code.

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;
#[path = "../../hub/tests/support/raw_http.rs"]
mod raw_http;
mod support;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use serde_json::json;
use support::engine_rig::Rig;

const MIB: u64 = 1 << 20;

/// Runs `command` with its stderr in a file; whether it succeeded and what the file holds.
async fn stderr_in_a_file(mut command: Command, dir: &std::path::Path) -> (bool, String) {
    let path = dir.join("stderr.log");
    let file = std::fs::File::create(&path).expect("log file");
    command.stdout(Stdio::null()).stderr(file);
    let status = tokio::task::spawn_blocking(move || command.status().expect("run rigdeck"))
        .await
        .expect("joined");
    (
        status.success(),
        std::fs::read_to_string(&path).expect("read log"),
    )
}

fn assert_plain(log: &str) {
    assert!(
        !log.contains('\r') && !log.contains('\x1b'),
        "a carriage return or escape code in {log:?}"
    );
}

#[tokio::test]
async fn a_pull_into_a_file_writes_plain_lines_ending_at_100_percent() {
    let repo = FakeRepo::new(
        "org/Model-GGUF",
        0x5a,
        vec![FakeFile::new("Model-Q4_K_M.gguf", 12 * MIB, 2, true)],
    );
    let hub = RunningHub::start(vec![repo]).await;
    // About three seconds: several polls of the progress.
    hub.state
        .faults
        .throttle_bps
        .store(4 * MIB, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_rigdeck"));
    command
        .args(["pull", "org/Model-GGUF:Q4_K_M", "--connections", "1"])
        .env("HF_ENDPOINT", &hub.url)
        .env("HF_HUB_CACHE", dir.path().join("hub"))
        .env("HF_HOME", dir.path().join("hf-home"))
        .env_remove("HF_TOKEN")
        .env("RIGDECK_CONFIG_DIR", dir.path().join("config"))
        .env("RIGDECK_DATA_DIR", dir.path().join("data"));
    let (ok, log) = stderr_in_a_file(command, dir.path()).await;
    assert!(ok, "{log}");
    assert_plain(&log);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains('%')).collect();
    assert!(lines.len() >= 2, "progress on the way: {log}");
    assert!(
        lines.len() <= 13,
        "a line per tenth at most, plus the end: {log}"
    );
    let last = lines.last().expect("a last line");
    assert!(last.contains("100.0%"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_benchmark_into_a_file_writes_plain_lines_ending_with_every_run() {
    let rig = Rig::start("2x5060ti.json").await;
    // The model in a library folder, so the run records its facts.
    let folder = rig.model.parent().expect("the model's folder");
    let (status, _) = rig
        .api(
            "PUT",
            "/api/v1/settings",
            Some(json!({"model_folders": [folder]})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = rig.api("POST", "/api/v1/models/rescan", None).await;
    assert_eq!(status, 200);
    rig.profile("tiny", json!({})).await;
    rig.run("tiny").await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_rigdeck"));
    command
        .args(["bench", "tiny", "--shape", "16:8", "--warm", "1"])
        .env("RIGDECK_URL", rig.t.url(""))
        .env("RIGDECK_CONFIG_DIR", rig.t.dir.path().join("config"))
        .env("RIGDECK_DATA_DIR", rig.t.dir.path().join("data"));
    let (ok, log) = stderr_in_a_file(command, rig.t.dir.path()).await;
    assert!(ok, "{log}");
    assert_plain(&log);
    let last = log
        .lines()
        .rfind(|l| l.contains(" runs"))
        .unwrap_or_else(|| panic!("no progress line in {log:?}"));
    let counts = last
        .split_once("] ")
        .and_then(|(_, rest)| rest.split_once(" runs"))
        .map(|(counts, _)| counts.to_owned())
        .expect(last);
    let (done, total) = counts.split_once('/').expect(last);
    assert_eq!(done, total, "the last line is the end state: {log}");

    // The run keeps the model's bits per weight as every page prints it: two decimals.
    let (_, runs) = rig.api("GET", "/api/v1/bench/runs", None).await;
    let id = runs[0]["id"].as_i64().expect("a run");
    let (_, run) = rig
        .api("GET", &format!("/api/v1/bench/runs/{id}"), None)
        .await;
    let bpw = run["context"]["model"]["bits_per_weight"]
        .as_f64()
        .unwrap_or_else(|| panic!("bits per weight in {}", run["context"]["model"]));
    assert_eq!(
        format!("{bpw}"),
        format!("{bpw:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.'),
        "{}",
        run["context"]["model"]
    );
}
