//! Recommended for this rig: a catalog of candidates served by the stand-in hub, planned on the
//! live rig from their headers and ranked. A CPU-only rig gets the small fast models first and a
//! slow dense one after them; the 4x3090 rig gets the larger dense model on its GPUs first; what
//! does not fit goes last, marked; a repository the hub does not have is left out with its
//! reason; a hub that cannot be reached is said in one line.

mod support;

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;

use std::path::{Path, PathBuf};

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use rigdeck_gguf::fixtures::MoeShape;
use serde_json::{json, Value};
use support::TestServer;

/// A 2 GB mixture of experts with 2 of 64 experts active: fast wherever it fits.
fn sparse_moe() -> MoeShape {
    MoeShape {
        name: "sparse MoE (synthetic)".into(),
        layers: 20,
        embedding: 2048,
        expert_ff: 1024,
        experts: 64,
        experts_used: 2,
        ..MoeShape::small()
    }
}

/// About 4 GB with every expert active: read whole for each token, as a dense model is.
fn all_active() -> MoeShape {
    MoeShape {
        name: "all experts active (synthetic)".into(),
        layers: 20,
        embedding: 2048,
        expert_ff: 1024,
        experts: 128,
        experts_used: 128,
        ..MoeShape::small()
    }
}

fn written(dir: &Path, prefix: &str, shape: &MoeShape, shards: u16) -> Vec<PathBuf> {
    shape
        .writer()
        .write_split(dir, prefix, shards)
        .expect("model written")
}

fn repo_of(id: &str, seed: u8, files: &[(String, PathBuf)]) -> FakeRepo {
    let files = files
        .iter()
        .map(|(name, path)| FakeFile::from_disk(name, path))
        .collect();
    FakeRepo::new(id, seed, files)
}

/// The stand-in hub with four repositories, and a catalog naming them and one it lacks.
async fn hub_and_catalog(dir: &Path) -> RunningHub {
    let models = dir.join("written");
    std::fs::create_dir_all(&models).expect("mkdir");
    let tiny = written(&models, "tiny", &MoeShape::small(), 1);
    let moe = written(&models, "moe", &sparse_moe(), 1);
    let dense = written(&models, "dense", &all_active(), 1);
    let huge = written(&models, "huge", &MoeShape::glm_5_2(), 6);
    let huge_files: Vec<(String, PathBuf)> = huge
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("UD-IQ2_M/Huge-UD-IQ2_M-{:05}-of-00006.gguf", i + 1),
                p.clone(),
            )
        })
        .collect();
    let hub = RunningHub::start(vec![
        repo_of(
            "o/Tiny-GGUF",
            1,
            &[("Tiny-Q4_K_M.gguf".into(), tiny[0].clone())],
        ),
        repo_of(
            "o/Moe-GGUF",
            2,
            &[("Moe-Q4_K_M.gguf".into(), moe[0].clone())],
        ),
        repo_of(
            "o/Dense-GGUF",
            3,
            &[("Dense-Q4_K_M.gguf".into(), dense[0].clone())],
        ),
        repo_of("o/Huge-GGUF", 4, &huge_files),
    ])
    .await;
    let entry = |repo: &str, quant: &str| {
        json!({"repo": repo, "quant": quant, "kind": "moe", "params": "?", "approx_gb": 1,
               "why": format!("{repo} for the test")})
    };
    let catalog = json!({
        "about": "test candidates",
        "models": [
            entry("o/Huge-GGUF", "UD-IQ2_M"),
            entry("o/Tiny-GGUF", "Q4_K_M"),
            entry("o/Missing-GGUF", "Q4_K_M"),
            // The repository has no Q8_0: its best fitting quantization is offered.
            entry("o/Moe-GGUF", "Q8_0"),
            entry("o/Dense-GGUF", "Q4_K_M"),
        ],
    });
    let path = dir.join("catalog.json");
    std::fs::write(&path, catalog.to_string()).expect("catalog");
    std::env::set_var("RIGDECK_STARTER_CATALOG", &path);
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", dir.join("hf-cache"));
    std::env::remove_var("HF_TOKEN");
    hub
}

/// GETs the recommendations once the live rig has its first reading.
async fn recommended(server: &TestServer, query: &str) -> Value {
    let url = server.url(&format!("/api/v1/hub/recommended{query}"));
    for _ in 0..50 {
        let response = server
            .client
            .get(&url)
            .bearer_auth(server.server.token())
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or_default();
        if status == 503 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(status, 200, "{answer}");
        return answer;
    }
    panic!("the live rig never had a reading");
}

/// A laptop's memory bandwidth, typed in the settings: the CPU's speed ceiling is then known.
async fn laptop_bandwidth(server: &TestServer) {
    let response = server
        .client
        .put(server.url("/api/v1/settings"))
        .bearer_auth(server.server.token())
        .json(&json!({"cpu_bandwidth_gb_s": 20}))
        .send()
        .await
        .expect("request");
    assert!(response.status().is_success(), "{}", response.status());
}

fn repos(answer: &Value) -> Vec<String> {
    answer["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["repo"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn entry<'a>(answer: &'a Value, repo: &str) -> &'a Value {
    answer["models"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["repo"] == repo))
        .unwrap_or_else(|| panic!("{repo} in {answer}"))
}

/// What every rig's answer has: the missing repository left out with why, the huge one last
/// and marked as not fitting, the Moe repository's fitting quantization offered instead of Q8_0.
fn check_common(answer: &Value) {
    assert_eq!(answer["offline"], false, "{answer}");
    let left_out = answer["left_out"].as_array().expect("left_out");
    assert_eq!(left_out.len(), 1, "{answer}");
    assert_eq!(left_out[0]["repo"], "o/Missing-GGUF");
    assert!(
        left_out[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not found"),
        "{answer}"
    );
    let order = repos(answer);
    assert_eq!(
        order.last().map(String::as_str),
        Some("o/Huge-GGUF"),
        "{answer}"
    );
    let moe = entry(answer, "o/Moe-GGUF");
    assert_eq!(moe["quant"], "Q4_K_M", "{moe}");
    assert_eq!(moe["fits"], true, "{moe}");
    assert_eq!(
        moe["choice"],
        "Q8_0 is not in the repository: Q4_K_M fits best"
    );
    assert!(moe["total_bytes"].as_u64().unwrap_or(0) > 1 << 30, "{moe}");
    assert_eq!(
        entry(answer, "o/Tiny-GGUF")["why"],
        "o/Tiny-GGUF for the test"
    );
}

#[tokio::test]
async fn a_cpu_only_rig_gets_the_small_fast_models_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _hub = hub_and_catalog(dir.path()).await;
    let server = TestServer::start("cpu-only.json").await;
    laptop_bandwidth(&server).await;

    let answer = recommended(&server, "").await;
    check_common(&answer);
    assert_eq!(answer["context"], 32_768, "the default context");
    assert_eq!(
        repos(&answer),
        ["o/Moe-GGUF", "o/Tiny-GGUF", "o/Dense-GGUF", "o/Huge-GGUF"],
        "{answer}"
    );
    for repo in ["o/Moe-GGUF", "o/Tiny-GGUF"] {
        let model = entry(&answer, repo);
        assert_eq!(model["verdict"]["kind"], "cpu_only", "{model}");
        assert!(
            model["tokens_per_s"].as_f64().unwrap_or(0.0) >= 10.0,
            "{model}"
        );
    }
    let dense = entry(&answer, "o/Dense-GGUF");
    assert!(
        dense["tokens_per_s"].as_f64().unwrap_or(f64::MAX) < 10.0,
        "{dense}"
    );
    let huge = entry(&answer, "o/Huge-GGUF");
    assert_eq!(huge["fits"], false, "{huge}");
    assert_eq!(huge["verdict"]["kind"], "does_not_fit", "{huge}");
}

#[tokio::test]
async fn a_rig_of_four_3090s_gets_the_largest_model_its_gpus_hold_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _hub = hub_and_catalog(dir.path()).await;
    let server = TestServer::start("4x3090.json").await;

    let answer = recommended(&server, "?context=8192").await;
    check_common(&answer);
    assert_eq!(answer["context"], 8192);
    assert_eq!(
        repos(&answer),
        ["o/Dense-GGUF", "o/Moe-GGUF", "o/Tiny-GGUF", "o/Huge-GGUF"],
        "{answer}"
    );
    for repo in ["o/Dense-GGUF", "o/Moe-GGUF", "o/Tiny-GGUF"] {
        let model = entry(&answer, repo);
        assert_eq!(model["verdict"]["kind"], "on_gpus", "{model}");
        assert!(
            model["tokens_per_s"].as_f64().unwrap_or(0.0) >= 10.0,
            "{model}"
        );
    }
}

#[tokio::test]
async fn a_hub_that_cannot_be_reached_is_said_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    std::env::set_var("HF_ENDPOINT", &address);
    std::env::set_var("HF_HUB_CACHE", dir.path().join("hf-cache"));
    std::env::remove_var("RIGDECK_STARTER_CATALOG");
    let server = TestServer::start("cpu-only.json").await;

    let started = std::time::Instant::now();
    let answer = recommended(&server, "").await;
    assert_eq!(answer["offline"], true, "{answer}");
    let message = answer["message"].as_str().expect("message");
    assert!(
        message.contains(&address) && message.contains("cannot be reached"),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
    assert_eq!(answer["models"], json!([]), "{answer}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "said before every candidate was tried: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_catalog_file_that_is_not_valid_is_named_with_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("catalog.json");
    std::fs::write(&path, r#"{"about": "x", "models": [{"repo": "noslash"}]}"#).expect("write");
    std::env::set_var("RIGDECK_STARTER_CATALOG", &path);
    let server = TestServer::start("cpu-only.json").await;
    let response = server
        .client
        .get(server.url("/api/v1/hub/recommended"))
        .bearer_auth(server.server.token())
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 500);
    let error: Value = response.json().await.expect("json");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(&path.display().to_string()), "{message}");
}
