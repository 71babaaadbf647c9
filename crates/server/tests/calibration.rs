//! The planner's closed loop over the API: llama.cpp's dry run and an engine measured after load
//! are kept next to the estimate, later plans on the same architecture, backend and device model
//! are corrected by them, and the plan says how far off the estimate was on this rig last time.
//! The dry run is the real llama-fit-params of the cached CPU build; the measured engine is the
//! real llama-server, its GPU memory played by the NVML test double's process list.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use rigdeck_core::engines::registry::register_path;
use rigdeck_core::engines::Backend;
use serde_json::{json, Value};
use support::engine_rig::Rig;
use support::TestServer;

const MIB: f64 = (1u64 << 20) as f64;

fn mib(v: &Value) -> f64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not a byte count: {v}")) as f64
        / MIB
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_corrects_the_compute_estimate_and_says_how_far_off_it_was() {
    let t = TestServer::start("4x3090.json").await;
    support::register_llama_server(&t.dir.path().join("data")).await;
    let model = support::tiny_dense(t.dir.path());
    let body = json!({"model": model, "rig": "cpu-minipc",
        "options": {"context": 4096, "parallel": 1, "kv_unified": false}});

    // Nothing recorded yet: the estimate stands alone.
    let (status, first) = t.post_json("/api/v1/plan", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["calibration"], json!([]), "{first}");
    let none = t.get_json("/api/v1/plan/calibration").await;
    assert_eq!(none, json!([]));

    let (status, dry) = t.post_json("/api/v1/plan/dry-run", &body).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert!(dry["error"].is_null(), "{dry}");
    let host = &dry["devices"][0];
    let theirs = mib(&host["llama_cpp"]["compute_bytes"]);
    let ours = mib(&host["ours"]["compute_estimate_bytes"]);
    assert_ne!(
        theirs.round(),
        ours.round(),
        "the estimate is not llama.cpp's figure"
    );

    // The record: llama architecture, CPU build, host memory; off by what the two totals say.
    let kept = t.get_json("/api/v1/plan/calibration").await;
    let kept = &kept[0];
    assert_eq!(kept["architecture"], "llama", "{kept}");
    assert_eq!(kept["backend"], "cpu", "{kept}");
    assert_eq!(kept["device_model"], "CPU", "{kept}");
    assert_eq!(kept["last"]["source"], "dry_run", "{kept}");
    assert_eq!(kept["dry_runs"], 1, "{kept}");
    let estimated = mib(&host["ours"]["model_bytes"]) + mib(&host["ours"]["context_bytes"]) + ours;
    let observed =
        mib(&host["llama_cpp"]["model_bytes"]) + mib(&host["llama_cpp"]["context_bytes"]) + theirs;
    let off = kept["last"]["off_by_percent"].as_f64().unwrap();
    assert!(
        (off - (estimated - observed) / observed * 100.0).abs() < 0.01,
        "{off} vs {estimated} / {observed}"
    );
    let factor = kept["correction"]["compute_factor"].as_f64().unwrap();
    assert!((factor - theirs / ours).abs() < 1e-6, "{kept}");

    // The next plan of this architecture on the host is corrected: compute now llama.cpp's.
    let (_, second) = t.post_json("/api/v1/plan", &body).await;
    let calibration = &second["calibration"][0];
    assert_eq!(calibration["device"]["kind"], "cpu", "{second}");
    assert_eq!(calibration["last"]["source"], "dry_run", "{second}");
    let usage = &second["report"]["plan"]["devices"][0]["usage"];
    assert!(
        (mib(&usage["compute_bytes"]) - theirs).abs() < 0.01,
        "{usage}"
    );
    assert!(
        (mib(&usage["compute_estimate_bytes"]) - ours).abs() < 0.01,
        "{usage}"
    );

    // Asking for the same dry run again updates its record instead of counting it twice.
    t.post_json("/api/v1/plan/dry-run", &body).await;
    let again = t.get_json("/api/v1/plan/calibration").await;
    assert_eq!(again[0]["dry_runs"], 1, "{again}");

    // Another architecture on the same host has no record to use.
    let moe = t.dir.path().join("moe.gguf");
    rigdeck_gguf::fixtures::MoeShape::small()
        .writer()
        .write_to_path(&moe)
        .unwrap();
    let other = json!({"model": moe, "rig": "cpu-minipc", "options": {"context": 4096}});
    let (status, plan) = t.post_json("/api/v1/plan", &other).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["calibration"], json!([]), "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_measured_after_load_sets_the_gpu_overhead() {
    let rig = Rig::start("2x5060ti.json").await;
    // The cached llama-server registered as a CUDA build: the planner predicts GPU memory for
    // it, and NVML (the double) says what its process holds.
    let store = rigdeck_core::store::Store::open(&rig.t.dir.path().join("data/rigdeck.db"))
        .await
        .unwrap();
    let program = support::llama_server().await;
    let cuda = register_path(&store, &program, None, Some(Backend::Cuda), 1)
        .await
        .unwrap();
    store.close().await;
    rig.profile("measured", json!({"engine_build_id": cuda.id}))
        .await;
    let (_, profile) = rig.api("GET", "/api/v1/profiles/measured", None).await;
    let planned = profile["profile"]["planned_memory"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!planned.is_empty(), "{profile}");

    let ready = rig.run("measured").await;
    let pid = ready["pid"].as_u64().unwrap();
    // Each GPU's process holds its plan less 100 MiB: 300 MiB of context and slack beyond the
    // weights, KV and compute instead of the default 400 MiB margin.
    let held: Vec<(u64, u64)> = planned
        .iter()
        .map(|p| {
            let bytes = p["bytes"].as_u64().unwrap() - (100 << 20);
            (p["gpu"].as_u64().unwrap(), bytes)
        })
        .collect();
    rig.t.edit_rig(|r| {
        for (gpu, bytes) in &held {
            let list = r["gpus"][*gpu as usize]["processes"]
                .as_array_mut()
                .unwrap();
            list.push(json!({"pid": pid, "used_mib": *bytes as f64 / MIB, "name": "llama-server"}));
        }
    });

    let deadline = Instant::now() + Duration::from_secs(90);
    let kept = loop {
        let (_, all) = rig.api("GET", "/api/v1/plan/calibration", None).await;
        let found = all
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["backend"] == "cuda")
            .cloned();
        if let Some(c) = found.filter(|c| c["measured"] == held.len()) {
            break c;
        }
        assert!(Instant::now() < deadline, "never measured: {all}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(kept["architecture"], "llama", "{kept}");
    assert_eq!(kept["device_model"], "NVIDIA GeForce RTX 5060 Ti", "{kept}");
    assert_eq!(kept["last"]["source"], "measured", "{kept}");
    let overhead = mib(&kept["correction"]["overhead_bytes"]);
    assert!((overhead - 300.0).abs() < 1.0, "{kept}");
    let off = kept["last"]["off_by_percent"].as_f64().unwrap();
    assert!(off > 0.0, "planned more than measured: {kept}");

    // A new profile of the same model is planned with the measured overhead: 100 MiB less per GPU.
    rig.profile("again", json!({"engine_build_id": cuda.id}))
        .await;
    let (_, again) = rig.api("GET", "/api/v1/profiles/again", None).await;
    let again = again["profile"]["planned_memory"]
        .as_array()
        .unwrap()
        .clone();
    for (before, after) in planned.iter().zip(&again) {
        let less = mib(&before["bytes"]) - mib(&after["bytes"]);
        assert!((less - 100.0).abs() < 1.0, "{before} vs {after}");
    }
}
