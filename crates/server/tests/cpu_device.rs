//! The CPU as a first-class device: the host's memory bandwidth measured by Rigdeck (kept,
//! measured again on request, the user's value winning) gives the planner's CPU device a speed,
//! and a rig without GPUs gets a plan with no GPU flags, which the real llama-server starts
//! without a warning they caused.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::engine_rig::Rig;

/// The live rig with its GPUs gone: the double reports none.
async fn without_gpus(rig: &Rig) {
    rig.t.edit_rig(|r| r["gpus"] = json!([]));
    rig.t
        .wait_for_frame("no GPU", |f| {
            f["sample"]["gpus"]["gpus"]
                .as_array()
                .is_some_and(Vec::is_empty)
        })
        .await;
}

fn cpu_device(plan: &Value) -> Value {
    plan["report"]["plan"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["spec"]["id"]["kind"] == "cpu")
        .cloned()
        .expect("a CPU device")
}

async fn plan_live(rig: &Rig) -> Value {
    let (status, plan) = rig
        .api(
            "POST",
            "/api/v1/plan",
            Some(json!({"model": rig.model, "rig": "live", "options": {"context": 2048}, "auto": true})),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_measured_bandwidth_is_kept_measured_again_and_yields_to_the_users_value() {
    let rig = Rig::start("2x5060ti.json").await;
    without_gpus(&rig).await;
    let (_, before) = rig.api("GET", "/api/v1/host/memory-bandwidth", None).await;
    assert_eq!(before["measured"], Value::Null, "{before}");
    assert_eq!(before["in_use_bytes_per_s"], Value::Null, "{before}");

    let (status, measured) = rig
        .api("POST", "/api/v1/host/memory-bandwidth", Some(json!({})))
        .await;
    assert_eq!(status, 200, "{measured}");
    let reading = &measured["measured"];
    assert!(
        reading["buffer_bytes"].as_u64().unwrap() >= 64 << 20,
        "{measured}"
    );
    assert!(reading["threads"].as_u64().unwrap() >= 1, "{measured}");
    assert!(reading["passes"].as_u64().unwrap() >= 1, "{measured}");
    assert!(
        reading["measured_at_ms"].as_i64().unwrap() > 0,
        "{measured}"
    );
    assert_eq!(measured["source"], "measured");
    let bytes_per_s = reading["bytes_per_s"].as_u64().expect("a speed");
    assert_eq!(measured["in_use_bytes_per_s"].as_u64(), Some(bytes_per_s));
    assert!(
        rig.t.dir.path().join("data/memory-bandwidth.json").exists(),
        "kept in the data folder"
    );

    // The planner's CPU device has it, so a CPU-only rig's ceiling is a number.
    let plan = plan_live(&rig).await;
    assert_eq!(
        cpu_device(&plan)["spec"]["bandwidth_bytes_per_s"].as_u64(),
        Some(bytes_per_s)
    );
    assert!(
        plan["report"]["ceiling"]["tokens_per_s"].as_f64().unwrap() > 0.0,
        "{}",
        plan["report"]["ceiling"]
    );

    // A value the user typed wins; 0 goes back to the measurement.
    let (status, _) = rig
        .api(
            "PUT",
            "/api/v1/settings",
            Some(json!({"cpu_bandwidth_gb_s": 41.5})),
        )
        .await;
    assert_eq!(status, 200);
    let (_, typed) = rig.api("GET", "/api/v1/host/memory-bandwidth", None).await;
    assert_eq!(typed["source"], "settings", "{typed}");
    assert_eq!(typed["in_use_bytes_per_s"].as_u64(), Some(41_500_000_000));
    assert_eq!(typed["measured"], measured["measured"], "still shown");
    assert_eq!(
        cpu_device(&plan_live(&rig).await)["spec"]["bandwidth_bytes_per_s"].as_u64(),
        Some(41_500_000_000)
    );
    let (status, _) = rig
        .api(
            "PUT",
            "/api/v1/settings",
            Some(json!({"cpu_bandwidth_gb_s": 0})),
        )
        .await;
    assert_eq!(status, 200);
    let (_, back) = rig.api("GET", "/api/v1/host/memory-bandwidth", None).await;
    assert_eq!(back["source"], "measured", "{back}");

    // Measured again on request: a new reading replaces the kept one.
    let (status, again) = rig
        .api("POST", "/api/v1/host/memory-bandwidth", Some(json!({})))
        .await;
    assert_eq!(status, 200, "{again}");
    assert!(
        again["measured"]["measured_at_ms"].as_i64() > reading["measured_at_ms"].as_i64(),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_measures_in_the_background() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::env::set_var(
        "RIGDECK_NVML_DOUBLE_RIG",
        support::scratch_rig(dir.path(), "2x5060ti.json"),
    );
    let mut options = support::options(dir.path(), "127.0.0.1:0");
    options.measure_memory_bandwidth = true;
    let server = rigdeck_server::start(options).await.expect("server starts");
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/host/memory-bandwidth", server.base_url());
    let mut status = Value::Null;
    for _ in 0..300 {
        status = client
            .get(&url)
            .bearer_auth(server.token())
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        if !status["measured"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status["source"], "measured", "{status}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_only_plan_starts_the_real_engine_without_gpu_flags_or_their_warnings() {
    let rig = Rig::start("2x5060ti.json").await;
    without_gpus(&rig).await;
    let plan = plan_live(&rig).await;
    let report = &plan["report"];
    let args: Vec<&str> = report["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for flag in ["-ngl", "-ts", "-sm", "-mg", "-ot"] {
        assert!(!args.contains(&flag), "{flag} in {args:?}");
    }

    let mut placement = report["options"].clone();
    placement["threads"] = json!(1);
    rig.profile("cpu", json!({"placement": placement})).await;
    let view = rig.run("cpu").await;
    let argv = view["argv"].to_string();
    for flag in ["\"-ngl\"", "\"-ts\"", "\"-sm\"", "\"-mg\"", "\"-ot\""] {
        assert!(!argv.contains(flag), "{flag} in {argv}");
    }
    let (status, all) = rig.api("GET", "/api/v1/instances/cpu/logs", None).await;
    assert_eq!(status, 200, "{all}");
    let lines: Vec<&str> = all
        .as_array()
        .expect("log lines")
        .iter()
        .filter_map(|l| l["text"].as_str())
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("listening")),
        "the engine logged its start: {lines:#?}"
    );
    // llama.cpp's flag warnings ("warning: no usable GPU found, --gpu-layers option will be
    // ignored", "… Setting the split mode has no effect") and any warning-level line (" W ")
    // about GPUs, layers, splits or tensors.
    let placement_words = ["gpu", "layer", "split", "offload", "tensor"];
    let caused: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains("warn")
                || (l.contains(" W ") && placement_words.iter().any(|w| lower.contains(w)))
        })
        .collect();
    assert!(
        caused.is_empty(),
        "warnings in the engine's log: {caused:#?}"
    );
    let (status, _) = rig
        .api("POST", "/api/v1/instances/cpu/stop", Some(json!({})))
        .await;
    assert_eq!(status, 200);
}
