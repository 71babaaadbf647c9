//! "I already have models" over the API: an Ollama store in the home folder is found with its
//! model count, size and broken tag; adding it puts its tags in the library under their names;
//! a bad path gets one clear 400. One test in this binary: it sets HOME for the daemon.

mod support;

use std::path::Path;

use reqwest::StatusCode;
use rigdeck_gguf::fixtures::MoeShape;
use support::TestServer;

/// A real small GGUF as an Ollama blob, and a manifest naming it.
fn write_tag(store: &Path, tag_path: &str, hex: &str, size: Option<u64>) -> u64 {
    let blob = store.join("blobs").join(format!("sha256-{hex}"));
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    let written = match size {
        Some(size) => size,
        None => MoeShape::small().writer().write_to_path(&blob).unwrap(),
    };
    let manifest = store.join("manifests").join(tag_path);
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    let layers = serde_json::json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{hex}"), "size": written},
        {"mediaType": "application/vnd.ollama.image.license", "digest": format!("sha256:{:064x}", 7), "size": 20},
    ]});
    std::fs::write(manifest, layers.to_string()).unwrap();
    written
}

#[tokio::test]
async fn an_ollama_store_in_home_is_found_added_and_listed_by_its_tags() {
    let home = tempfile::tempdir().unwrap();
    for var in [
        "XDG_CACHE_HOME",
        "HF_HUB_CACHE",
        "HF_HOME",
        "LLAMA_CACHE",
        "OLLAMA_MODELS",
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("HOME", home.path());
    let store = home.path().join(".ollama/models");
    let size = write_tag(
        &store,
        "registry.ollama.ai/library/tiny/q4",
        &format!("{:064x}", 1),
        None,
    );
    write_tag(
        &store,
        "registry.ollama.ai/library/qwen3/8b",
        &format!("{:064x}", 2),
        Some(5_000_000_000),
    );
    let t = TestServer::start("2x5060ti.json").await;

    let found = t.get_json("/api/v1/models/found-folders").await;
    let rows = found.as_array().unwrap();
    let ollama = rows
        .iter()
        .find(|f| f["tool"] == "Ollama" && f["path"] == store.to_str().unwrap())
        .unwrap_or_else(|| panic!("no Ollama folder in {found}"));
    assert_eq!(ollama["display_path"], "~/.ollama/models");
    assert_eq!(ollama["models"], 2, "{ollama}");
    assert_eq!(ollama["size_bytes"], size, "{ollama}");
    assert_eq!(ollama["added"], false);
    let problems = ollama["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{ollama}");
    assert_eq!(
        problems[0].as_str().unwrap(),
        format!(
            "qwen3:8b: Ollama's qwen3:8b names blob sha256-{:064x} which is not in {}: run `ollama pull qwen3:8b` again",
            2,
            store.join("blobs").display()
        )
    );

    let (status, added) = t
        .post_json(
            "/api/v1/models/folders",
            &serde_json::json!({"path": "~/.ollama/models"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    assert_eq!(added["already_in_library"], false);
    assert!(added["model_folders"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == store.to_str().unwrap()));
    let models = t.get_json("/api/v1/models").await;
    let tiny = models
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "tiny:q4")
        .unwrap_or_else(|| panic!("tiny:q4 not in the library: {models}"));
    assert_eq!(
        tiny["path"],
        store
            .join(format!("blobs/sha256-{:064x}", 1))
            .to_str()
            .unwrap()
    );
    assert_eq!(tiny["ollama"]["tag"], "tiny:q4");
    assert!(tiny["problem"].is_null(), "{tiny}");
    let (status, plan) = t
        .post_json(
            "/api/v1/plan",
            &serde_json::json!({"model": tiny["path"], "rig": "4x3090", "auto": true}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the blob is planned like any GGUF: {plan}"
    );
    let found = t.get_json("/api/v1/models/found-folders").await;
    assert!(found
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["path"] == store.to_str().unwrap() && f["added"] == true));

    let (status, again) = t
        .post_json(
            "/api/v1/models/folders",
            &serde_json::json!({"path": store.join("manifests")}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["already_in_library"], true);

    let file = store.join(format!("blobs/sha256-{:064x}", 1));
    for (body, says) in [
        (
            serde_json::json!({"path": "models"}),
            "not an absolute path",
        ),
        (
            serde_json::json!({"path": "/nonexistent/models"}),
            "cannot be opened",
        ),
        (serde_json::json!({"path": file}), "is a file, not a folder"),
        (serde_json::json!({"path": ""}), "no folder given"),
        (serde_json::json!({"folder": "/tmp"}), "send {\"path\""),
    ] {
        let (status, answer) = t.post_json("/api/v1/models/folders", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
}
