//! Planning over the API: a split GLM-5.2-shaped model on disk and on a web server (headers read
//! with Range requests), a pasted command line with the seed's mistake, and the bad inputs.

mod support;

use reqwest::StatusCode;
use rigdeck_gguf::fixtures::MoeShape;
use support::TestServer;

async fn post(
    t: &TestServer,
    path: &str,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let response = t
        .client
        .post(t.url(path))
        .bearer_auth(t.server.token())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

fn glm(dir: &std::path::Path) -> std::path::PathBuf {
    MoeShape::glm_5_2()
        .writer()
        .write_split(dir, "GLM-5.2-IQ2", 6)
        .unwrap()[0]
        .clone()
}

#[tokio::test]
async fn automatic_placement_on_a_preset_rig_fits_and_writes_flags() {
    let t = TestServer::start("4x3090.json").await;
    let model = glm(t.dir.path());
    let body = serde_json::json!({"model": model, "rig": "4x3090", "auto": true,
        "options": {"context": 131072, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}});
    let (status, plan) = post(&t, "/api/v1/plan", body).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        plan["report"]["fits"], true,
        "{}",
        plan["report"]["problems"]
    );
    assert_eq!(plan["layers"], 78);
    let line = plan["report"]["command_line"]["Ok"].as_str().unwrap();
    assert!(line.contains("=CUDA0'") && line.ends_with("-kvu"), "{line}");
    assert!(plan["report"]["ceiling"]["tokens_per_s"].as_f64().unwrap() > 1.0);
    let presets: serde_json::Value = t.get_json("/api/v1/rigs").await;
    assert!(presets
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["id"] == "2xgh200"));
}

#[tokio::test]
async fn a_remote_model_is_planned_from_its_headers_alone() {
    let t = TestServer::start("4x3090.json").await;
    let files = tempfile::tempdir().unwrap();
    glm(files.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app =
        axum::Router::new().fallback_service(tower_http::services::ServeDir::new(files.path()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://127.0.0.1:{port}/GLM-5.2-IQ2-00001-of-00006.gguf");
    let (status, plan) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": url, "rig": "4xpro6000", "auto": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["layers"], 78);
    let requests = plan["remote_requests"].as_u64().unwrap();
    assert!(requests <= 8, "{requests} requests for 6 shards");
}

#[tokio::test]
async fn a_pasted_command_is_drawn_with_its_problems() {
    let t = TestServer::start("4x3090.json").await;
    let model = glm(t.dir.path());
    let command = format!(
        "./llama-server -m {} -c 32768 -ngl 99 -ncmoe 60 --port 8080",
        model.display()
    );
    let (status, plan) = post(
        &t,
        "/api/v1/plan/parse",
        serde_json::json!({"command": command, "rig": "4x3090"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["report"]["fits"], false);
    let problems = plan["report"]["problems"].to_string();
    assert!(problems.contains("-ncmoe with a layer split"), "{problems}");
    assert_eq!(
        plan["parsed"]["other_args"],
        serde_json::json!(["--port", "8080"])
    );
}

#[tokio::test]
async fn bad_input_gets_messages_that_name_the_thing() {
    let t = TestServer::start("4x3090.json").await;
    let model = glm(t.dir.path());
    let (status, body) = post(&t, "/api/v1/plan/parse", serde_json::json!({"command": format!("llama-server -m {} -ot 'blk\\.(3=CUDA0'", model.display())})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not a valid regular expression"),
        "{body}"
    );
    let (status, body) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": "/nonexistent/x.gguf"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"].as_str().unwrap().contains("x.gguf"),
        "{body}"
    );
    // The first 4 KiB of a real header: a model file cut short (the shard itself is sparse and huge).
    let truncated = t.dir.path().join("cut.gguf");
    let mut head = vec![0u8; 4096];
    std::io::Read::read_exact(&mut std::fs::File::open(&model).unwrap(), &mut head).unwrap();
    std::fs::write(&truncated, head).unwrap();
    let (status, body) = post(&t, "/api/v1/plan", serde_json::json!({"model": truncated})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("cut.gguf")
            && message.contains("at byte")
            && message.contains("re-download"),
        "{body}"
    );
    let (status, body) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": model, "rig": "8xb200"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("4x3090"),
        "{body}"
    );
    let (status, _) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": model, "options": {"contex": 5}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_second_box_over_a_link_lends_its_gpus_and_its_link_is_counted() {
    let t = TestServer::start("4x3090.json").await;
    let model = glm(t.dir.path());
    let options =
        serde_json::json!({"context": 131072, "cache_type_k": "q8_0", "cache_type_v": "q8_0"});
    let (status, alone) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": model, "rig": "4x3090", "auto": true, "options": options}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{alone}");
    let rig =
        serde_json::json!({"preset": "4x3090", "also": [{"preset": "2x3090", "link": "2.5gbe"}]});
    let (status, plan) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": model, "rig": rig, "auto": true, "options": options}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let report = &plan["report"];
    assert_eq!(report["fits"], true, "{}", report["problems"]);
    assert_eq!(plan["rig"], rig);
    assert_eq!(plan["boxes"][0]["endpoint"], "box2:50052");
    let line = report["command_line"]["Ok"].as_str().unwrap();
    assert!(
        line.contains(" --rpc box2:50052 -dev RPC0,RPC1,CUDA0,CUDA1,CUDA2,CUDA3 "),
        "{line}"
    );
    // Each lent GPU is a column of the editor, named with its box and link.
    let names: Vec<&str> = report["plan"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["spec"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("RPC1 ·") && n.contains("on box 2 · 2x3090 over 2.5 GbE")),
        "{names:?}"
    );
    let link = &report["ceiling"]["links"][0];
    assert_eq!(link["link"]["name"], "2.5 GbE");
    assert!(link["crossings_per_token"].as_u64().unwrap() >= 2, "{link}");
    assert!(link["load_bytes"].as_u64().unwrap() > 20 << 30, "{link}");
    let across = report["ceiling"]["tokens_per_s"].as_f64().unwrap();
    let here = alone["report"]["ceiling"]["tokens_per_s"].as_f64().unwrap();
    assert!(across > here, "{across} tok/s across, {here} alone");
    let links: serde_json::Value = t.get_json("/api/v1/rigs/links").await;
    assert!(
        links.as_array().unwrap().iter().any(|l| l["id"] == "10gbe"
            && l["link"]["throughput_bytes_per_s"].as_u64() > Some(1_000_000_000)),
        "{links}"
    );
}

#[tokio::test]
async fn bad_boxes_and_links_are_refused_naming_what_exists() {
    let t = TestServer::start("4x3090.json").await;
    let model = glm(t.dir.path());
    let refused = |also: serde_json::Value| {
        let body = serde_json::json!({"model": model, "rig": {"preset": "4x3090", "also": [also]}});
        let t = &t;
        async move {
            let (status, body) = post(t, "/api/v1/plan", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            body["message"].as_str().unwrap().to_owned()
        }
    };
    let message = refused(serde_json::json!({"preset": "8xb200", "link": "10gbe"})).await;
    assert!(
        message.contains("unknown rig preset '8xb200'") && message.contains("2x3090"),
        "{message}"
    );
    let message = refused(serde_json::json!({"preset": "2x3090", "link": "3gbe"})).await;
    assert!(
        message.contains("unknown link '3gbe'") && message.contains("1gbe, 2.5gbe, 5gbe, 10gbe"),
        "{message}"
    );
    let message = refused(serde_json::json!({"preset": "2x3090",
        "link": {"throughput_bytes_per_s": 0, "latency_s": 0.0002}}))
    .await;
    assert!(message.contains("0 bytes/s moves nothing"), "{message}");
    let message =
        refused(serde_json::json!({"preset": "2x3090", "link": "10gbe", "lend": []})).await;
    assert!(
        message.contains("box 2 (2x3090) lends no device"),
        "{message}"
    );
    let (status, body) = post(
        &t,
        "/api/v1/plan",
        serde_json::json!({"model": model, "rig": {"preset": "4x3090", "boxes": []}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("\"also\""),
        "{body}"
    );
}

#[tokio::test]
async fn the_library_lists_models_in_the_configured_folders() {
    let t = TestServer::start("2x5060ti.json").await;
    let folder = t.dir.path().join("models");
    std::fs::create_dir_all(&folder).unwrap();
    let put = t
        .client
        .put(t.url("/api/v1/settings"))
        .bearer_auth(t.server.token())
        .json(&serde_json::json!({"model_folders": [folder]}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    MoeShape::small()
        .writer()
        .write_split(&folder, "tiny-moe", 2)
        .unwrap();
    let (status, list) = post(&t, "/api/v1/models/rescan", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let entries = list.as_array().unwrap();
    assert_eq!(entries.len(), 1, "{list}");
    assert_eq!(entries[0]["format"], "gguf");
    assert_eq!(entries[0]["files"].as_array().unwrap().len(), 2);
    assert!(entries[0]["gguf"]["experts"]["count"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn llama_cpps_dry_run_is_set_beside_the_estimate() {
    let t = TestServer::start("4x3090.json").await;
    support::register_llama_server(&t.dir.path().join("data")).await;
    let model = support::tiny_dense(t.dir.path());
    let body = serde_json::json!({"model": model, "rig": "cpu-minipc",
        "options": {"context": 4096, "parallel": 1, "kv_unified": false}});
    let (status, outcome) = post(&t, "/api/v1/plan/dry-run", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert!(outcome["error"].is_null(), "{outcome}");
    let host = &outcome["devices"][0];
    assert_eq!(host["llama_device"], "Host", "{outcome}");
    let mib = |v: &serde_json::Value| v.as_u64().unwrap() as f64 / (1u64 << 20) as f64;
    assert_eq!(mib(&host["llama_cpp"]["context_bytes"]), 256.0, "{outcome}");
    assert!(
        (mib(&host["ours"]["context_bytes"]) - 256.0).abs() < 1.0,
        "{outcome}"
    );
    let (ours, theirs) = (
        mib(&host["ours"]["model_bytes"]),
        mib(&host["llama_cpp"]["model_bytes"]),
    );
    assert!(
        ours >= theirs && ours <= theirs * 1.01 + 1.0,
        "{ours} vs {theirs}"
    );
    assert!(
        outcome["dry_run"]["args"].to_string().contains("-fitp"),
        "{outcome}"
    );

    // The same request again comes from the cache, at once and identical.
    let (_, again) = post(&t, "/api/v1/plan/dry-run", body).await;
    assert_eq!(again, outcome);

    // The live rig has GPUs and only a CPU build is registered: said, not guessed.
    let live = serde_json::json!({"model": model, "rig": "live", "options": {"context": 4096}});
    let (status, refused) = post(&t, "/api/v1/plan/dry-run", live).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no llama.cpp build"),
        "{refused}"
    );

    // A plan llama.cpp refuses (a quantized V cache without flash attention): its own words,
    // marked as a refusal of the plan.
    let refusing = serde_json::json!({"model": model, "rig": "cpu-minipc",
        "options": {"context": 4096, "flash_attention": false, "cache_type_v": "q8_0"}});
    let (status, refusal) = post(&t, "/api/v1/plan/dry-run", refusing).await;
    assert_eq!(status, StatusCode::OK, "{refusal}");
    assert_eq!(refusal["refused"], true, "{refusal}");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap_or_default()
            .contains("flash_attn"),
        "{refusal}"
    );
    assert_eq!(outcome["refused"], false, "{outcome}");

    // A broken model file: llama.cpp's own words.
    let broken = t.dir.path().join("broken.gguf");
    let mut bytes = std::fs::read(&model).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&broken, bytes).unwrap();
    let body =
        serde_json::json!({"model": broken, "rig": "cpu-minipc", "options": {"context": 4096}});
    let (status, answer) = post(&t, "/api/v1/plan/dry-run", body).await;
    // Our own reader refuses a truncated file before llama.cpp is asked.
    assert!(status.is_client_error(), "{answer}");

    // A model on a web server: its headers over a sparse local copy, the same figures.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app =
        axum::Router::new().fallback_service(tower_http::services::ServeDir::new(t.dir.path()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://127.0.0.1:{port}/dense.gguf");
    let remote = serde_json::json!({"model": url, "rig": "cpu-minipc",
        "options": {"context": 4096, "parallel": 1, "kv_unified": false}});
    let (status, answer) = post(&t, "/api/v1/plan/dry-run", remote).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(answer["error"].is_null(), "{answer}");
    assert_eq!(
        answer["devices"][0]["llama_cpp"], outcome["devices"][0]["llama_cpp"],
        "{answer}"
    );
}
