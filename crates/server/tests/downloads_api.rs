//! The daemon's hub and download queue over the API, against the hub crate's fake hub: a model
//! page grouped by quantization, a download that pauses, resumes and survives a daemon restart,
//! a cancel that leaves nothing behind, and bad requests answered with what to do.

mod support;

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::TestServer;

const MIB: u64 = 1 << 20;

fn repo() -> FakeRepo {
    FakeRepo::new(
        "org/Api-GGUF",
        0x3c,
        vec![
            FakeFile::new("README.md", 700, 1, false),
            FakeFile::new("Api-Q4_K_M.gguf", 3 * MIB, 2, true),
            FakeFile::new("Q8_0/Api-Q8_0-00001-of-00002.gguf", 4 * MIB, 3, true),
            FakeFile::new("Q8_0/Api-Q8_0-00002-of-00002.gguf", 2 * MIB + 9, 4, true),
        ],
    )
}

/// The fake hub, and the daemon's environment pointed at it (each test is its own process).
async fn hub_for(dir: &std::path::Path) -> RunningHub {
    let hub = RunningHub::start(vec![repo()]).await;
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", dir.join("hf-cache"));
    std::env::set_var("HF_HOME", dir.join("hf-home"));
    std::env::remove_var("HF_TOKEN");
    hub
}

/// A finished Q8_0 download's files hold exactly the hub's bytes.
fn assert_q8_files(done: &serde_json::Value) {
    let paths = done["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), 2, "{done}");
    for (path, file) in paths.iter().zip(&repo().files[2..]) {
        let content = std::fs::read(path.as_str().expect("path")).expect("downloaded file");
        assert!(
            content == file.all_bytes(),
            "{path} differs from the hub's file"
        );
    }
}

/// Queues `quant` of the test repository and waits until it runs; its id.
async fn start_download(server: &TestServer, quant: &str) -> i64 {
    let body = serde_json::json!({"repo": "org/Api-GGUF", "quant": quant});
    let (status, view) = server.post_json("/api/v1/downloads", &body).await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_i64().expect("id");
    wait_for_state(server, id, "running").await;
    id
}

async fn wait_for_state(server: &TestServer, id: i64, state: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    for _ in 0..600 {
        let list = server.get_json("/api/v1/downloads").await;
        let view = list
            .as_array()
            .and_then(|l| l.iter().find(|d| d["id"] == id))
            .cloned()
            .unwrap_or_default();
        if view["state"] == state {
            return view;
        }
        last = view.clone();
        if view["state"] == "failed" && state != "failed" {
            panic!("download failed: {view}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("download #{id} never became {state}: {last}");
}

#[tokio::test]
async fn a_model_page_groups_quantizations_and_its_download_lands_in_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = hub_for(dir.path()).await;
    let server = TestServer::start("4x3090.json").await;
    let hits = server
        .get_json("/api/v1/hub/search?text=api&format=gguf")
        .await;
    assert_eq!(hits[0]["id"], "org/Api-GGUF", "{hits}");
    let page = server.get_json("/api/v1/hub/models/org/Api-GGUF").await;
    let labels: Vec<&str> = page["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter(|g| g["kind"] == "gguf")
        .map(|g| g["label"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(labels, ["Q4_K_M", "Q8_0"], "{page}");
    let card = server
        .get_json("/api/v1/hub/models/org/Api-GGUF/card")
        .await;
    assert!(
        card["markdown"].as_str().is_some_and(|m| !m.is_empty()),
        "{card}"
    );

    let (status, view) = server
        .post_json(
            "/api/v1/downloads",
            &serde_json::json!({"repo": "org/Api-GGUF", "quant": "Q8_0"}),
        )
        .await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_i64().expect("id");
    let done = wait_for_state(&server, id, "done").await;
    assert_eq!(done["progress"]["done_bytes"], 6 * MIB + 9);
    let first = done["paths"][0].as_str().expect("path").to_owned();
    assert_q8_files(&done);
    // The library rescans at once and lists the split model by its first shard.
    let mut listed = false;
    for _ in 0..100 {
        let models = server.get_json("/api/v1/models").await;
        listed = models
            .as_array()
            .is_some_and(|m| m.iter().any(|e| e["path"].as_str() == Some(first.as_str())));
        if listed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "{first} is not in the library");
    drop(hub);
}

#[tokio::test]
async fn pause_resume_and_a_daemon_restart_continue_the_same_download() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = hub_for(dir.path()).await;
    hub.state.faults.throttle_bps.store(MIB, Ordering::SeqCst);
    let server = TestServer::start("4x3090.json").await;
    let id = start_download(&server, "q8_0").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, paused) = server
        .post_json(
            &format!("/api/v1/downloads/{id}/pause"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 200, "{paused}");
    let paused = wait_for_state(&server, id, "paused").await;
    assert!(
        paused["progress"]["done_bytes"].as_u64() > Some(0),
        "{paused}"
    );
    let (status, wrong) = server
        .post_json(
            &format!("/api/v1/downloads/{id}/pause"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 409, "{wrong}");
    assert!(
        wrong["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot be paused"),
        "{wrong}"
    );

    server
        .post_json(
            &format!("/api/v1/downloads/{id}/resume"),
            &serde_json::json!({}),
        )
        .await;
    wait_for_state(&server, id, "running").await;
    // The daemon stops mid-download; the next one picks the download up by itself.
    let TestServer {
        server: running,
        dir: server_dir,
        rig,
        ..
    } = server;
    running.shutdown().await;
    hub.state.faults.throttle_bps.store(0, Ordering::SeqCst);
    let server = TestServer::start_with_rig(server_dir, rig).await;
    let done = wait_for_state(&server, id, "done").await;
    assert_q8_files(&done);
    // After one more restart the finished download still names its files (for "Plan").
    let TestServer {
        server: running,
        dir: server_dir,
        rig,
        ..
    } = server;
    running.shutdown().await;
    let server = TestServer::start_with_rig(server_dir, rig).await;
    assert_q8_files(&wait_for_state(&server, id, "done").await);
}

#[tokio::test]
async fn a_cancelled_download_leaves_no_partial_file_and_bad_requests_say_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = hub_for(dir.path()).await;
    hub.state
        .faults
        .throttle_bps
        .store(MIB / 8, Ordering::SeqCst);
    let server = TestServer::start("4x3090.json").await;
    let id = start_download(&server, "Q4_K_M").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    server
        .post_json(
            &format!("/api/v1/downloads/{id}/cancel"),
            &serde_json::json!({}),
        )
        .await;
    wait_for_state(&server, id, "cancelled").await;
    let blobs = dir.path().join("hf-cache/models--org--Api-GGUF/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");

    for (body, expected) in [
        (
            serde_json::json!({"repo": "org/Api-GGUF"}),
            "name one as REPO:QUANT",
        ),
        (
            serde_json::json!({"repo": "org/Api-GGUF", "quant": "IQ1_S"}),
            "Q4_K_M",
        ),
        (
            serde_json::json!({"repo": "../../etc"}),
            "is not a repository id",
        ),
        (serde_json::json!({"repo": "org/None-GGUF"}), "not found"),
        (
            serde_json::json!({"model": "x"}),
            "request body is not valid",
        ),
    ] {
        let (status, answer) = server.post_json("/api/v1/downloads", &body).await;
        assert!(status.is_client_error(), "{body}: {status} {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap_or_default()
                .contains(expected),
            "{body}: {answer}"
        );
    }
}

#[tokio::test]
async fn every_quantization_is_planned_on_the_rig_before_downloading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = dir.path().join("written");
    std::fs::create_dir_all(&models).expect("mkdir");
    let small = rigdeck_gguf::fixtures::MoeShape::small()
        .writer()
        .write_split(&models, "small", 1)
        .expect("small model");
    let glm = rigdeck_gguf::fixtures::MoeShape::glm_5_2()
        .writer()
        .write_split(&models, "GLM-5.2-UD-IQ2_M", 6)
        .expect("GLM-5.2-shaped model");
    let mut files = vec![FakeFile::from_disk("Model-Q4_K_M.gguf", &small[0])];
    for (i, shard) in glm.iter().enumerate() {
        let name = format!("UD-IQ2_M/GLM-5.2-UD-IQ2_M-{:05}-of-00006.gguf", i + 1);
        files.push(FakeFile::from_disk(&name, shard));
    }
    let hub = RunningHub::start(vec![FakeRepo::new("org/Fit-GGUF", 0x77, files)]).await;
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", dir.path().join("hf-cache"));
    let server = TestServer::start("4x3090.json").await;
    let body = serde_json::json!({"repo": "org/Fit-GGUF", "rig": "4x3090", "context": 65536});
    let (status, fit) = server.post_json("/api/v1/hub/fit", &body).await;
    assert_eq!(status, 200, "{fit}");
    let quants = fit["quants"].as_array().expect("quants");
    let by_label = |label: &str| {
        quants
            .iter()
            .find(|q| q["label"] == label)
            .cloned()
            .unwrap_or_default()
    };
    let small_fit = by_label("Q4_K_M");
    assert_eq!(small_fit["verdict"]["kind"], "on_gpus", "{fit}");
    assert_eq!(small_fit["recommended"], true, "{fit}");
    let glm_fit = by_label("UD-IQ2_M");
    assert_eq!(glm_fit["verdict"]["kind"], "experts_in_ram", "{glm_fit}");
    assert!(
        glm_fit["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("layer(s) in CPU RAM"),
        "{glm_fit}"
    );
    assert!(
        glm_fit["total_bytes"].as_u64() > small_fit["total_bytes"].as_u64(),
        "{fit}"
    );
    assert_eq!(
        glm_fit["devices"].as_array().map(Vec::len),
        Some(5),
        "4 GPUs and the CPU"
    );
    assert!(
        hub.state.seen.body_bytes.load(Ordering::SeqCst) < 64 << 20,
        "headers only"
    );

    let (status, bad) = server
        .post_json(
            "/api/v1/hub/fit",
            &serde_json::json!({"repo": "org/Fit-GGUF", "context": 0}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("out of range"),
        "{bad}"
    );
}

#[tokio::test]
async fn the_starter_catalog_names_valid_repositories_and_their_quantizations() {
    let server = TestServer::start("4x3090.json").await;
    let catalog = server.get_json("/api/v1/hub/starter").await;
    let models = catalog["models"].as_array().expect("models");
    assert!(models.len() >= 6, "{catalog}");
    for model in models {
        let repo = model["repo"].as_str().expect("repo");
        assert!(
            rigdeck_core::hub::repo::RepoId::parse(repo).is_ok(),
            "{repo}"
        );
        let quant = model["quant"].as_str().expect("quant");
        assert!(
            rigdeck_core::hub::quants::quant_label(&format!("x-{quant}.gguf")).is_some(),
            "{quant}"
        );
    }
    for kind in ["dense", "moe"] {
        assert!(models.iter().any(|m| m["kind"] == kind), "a {kind} model");
    }
}

#[tokio::test]
async fn the_cache_is_listed_verified_and_cleaned_over_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _hub = hub_for(dir.path()).await;
    let server = TestServer::start("4x3090.json").await;
    let body = serde_json::json!({"repo": "org/Api-GGUF", "quant": "Q8_0"});
    let (_, view) = server.post_json("/api/v1/downloads", &body).await;
    let id = view["id"].as_i64().expect("id");
    wait_for_state(&server, id, "done").await;

    let cache = server.get_json("/api/v1/hub/cache").await;
    assert_eq!(cache["models"][0]["repo"], "org/Api-GGUF", "{cache}");
    assert_eq!(cache["models"][0]["size_on_disk"], 6 * MIB + 9);

    let (status, checked) = server
        .post_json(
            "/api/v1/hub/cache/org/Api-GGUF/verify",
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 200, "{checked}");
    let files = checked["files"].as_array().expect("files");
    assert_eq!(files.len(), 2);
    assert!(files.iter().all(|f| f["ok"] == true), "{checked}");
    assert!(checked["upstream_commit"].is_null());

    let delete = || {
        server
            .client
            .delete(server.url("/api/v1/hub/cache/org/Api-GGUF"))
            .bearer_auth(server.server.token())
            .send()
    };
    let response = delete().await.expect("delete");
    assert_eq!(response.status(), 200);
    let removed: serde_json::Value = response.json().await.expect("json");
    assert_eq!(removed["freed_bytes"], 6 * MIB + 9);
    assert!(!dir.path().join("hf-cache/models--org--Api-GGUF").exists());
    assert_eq!(delete().await.expect("delete again").status(), 404);
}

#[tokio::test]
async fn a_download_folder_from_the_settings_gets_plain_files_that_the_library_lists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _hub = hub_for(dir.path()).await;
    let server = TestServer::start("4x3090.json").await;
    let folder = dir.path().join("plain-models");
    let response = server
        .client
        .put(server.url("/api/v1/settings"))
        .bearer_auth(server.server.token())
        .json(&serde_json::json!({ "download_folder": folder }))
        .send()
        .await
        .expect("settings");
    assert_eq!(response.status(), 200);
    let body = serde_json::json!({"repo": "org/Api-GGUF", "quant": "Q4_K_M"});
    let (_, view) = server.post_json("/api/v1/downloads", &body).await;
    let id = view["id"].as_i64().expect("id");
    let done = wait_for_state(&server, id, "done").await;
    let file = folder.join("Api-Q4_K_M.gguf");
    assert_eq!(done["paths"][0].as_str(), file.to_str(), "{done}");
    assert!(std::fs::read(&file).expect("plain file") == repo().files[1].all_bytes());
    assert!(!dir.path().join("hf-cache/models--org--Api-GGUF").exists());
    let mut listed = false;
    for _ in 0..100 {
        let models = server.get_json("/api/v1/models").await;
        listed = models.to_string().contains("Api-Q4_K_M.gguf");
        if listed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "the download folder is scanned by the library");
}

#[tokio::test]
async fn removing_a_model_while_it_downloads_is_refused_and_keeps_its_partial() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = hub_for(dir.path()).await;
    let server = TestServer::start("4x3090.json").await;
    let body = serde_json::json!({"repo": "org/Api-GGUF", "quant": "Q4_K_M"});
    let (_, view) = server.post_json("/api/v1/downloads", &body).await;
    wait_for_state(&server, view["id"].as_i64().expect("id"), "done").await;

    hub.state.faults.throttle_bps.store(MIB, Ordering::SeqCst);
    let running = start_download(&server, "Q8_0").await;
    let blobs = dir.path().join("hf-cache/models--org--Api-GGUF/blobs");
    let partial = || {
        std::fs::read_dir(&blobs)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "incomplete"))
    };
    for _ in 0..200 {
        if partial().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let written = partial().expect("the running download's partial file");

    let response = server
        .client
        .delete(server.url("/api/v1/hub/cache/org/Api-GGUF"))
        .bearer_auth(server.server.token())
        .send()
        .await
        .expect("delete");
    assert_eq!(response.status(), 409);
    let refused: serde_json::Value = response.json().await.expect("json");
    assert!(
        refused.to_string().contains("is being downloaded"),
        "{refused}"
    );
    assert!(written.exists(), "the live download's partial file is kept");
    let (status, _) = server
        .post_json(
            &format!("/api/v1/downloads/{running}/cancel"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 200);
}
