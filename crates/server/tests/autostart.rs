//! Autostart at daemon start, on the 2×16 GB rig played by the NVML test double: profiles marked
//! `autostart` start together when their planned VRAM fits, and are refused together (with the
//! reason) when it does not. The engine is the real llama-server from Rigdeck's cached CPU build;
//! the model is not a valid GGUF, so it exits soon after starting, which is all "started" needs
//! here (the ready path is in crates/core/tests/real_engine.rs).

mod support;

use std::path::Path;

use rigdeck_core::engines::registry::{self, EngineBuild};
use rigdeck_core::launch::{LaunchProfile, PlannedGpu, RestartSetting};
use rigdeck_core::store::Store;
use support::{llama_server, scratch_rig, TestServer};

const GIB: u64 = 1 << 30;

/// Registers the real llama-server in the daemon's database (before the daemon starts).
async fn prepare(dir: &Path) -> (Store, EngineBuild, std::path::PathBuf) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let store = Store::open(&dir.join("data/rigdeck.db")).await.unwrap();
    let build = registry::register_path(&store, &llama_server().await, None, None, 0)
        .await
        .unwrap();
    let model = dir.join("not-really.gguf");
    std::fs::write(&model, b"not a gguf").unwrap();
    (store, build, model)
}

fn profile(
    name: &str,
    build: i64,
    model: &Path,
    gib_on_gpu1: u64,
    autostart: bool,
) -> LaunchProfile {
    LaunchProfile {
        name: name.into(),
        engine_build_id: build,
        model: model.to_owned(),
        restart: RestartSetting::Never,
        planned_memory: vec![PlannedGpu {
            gpu: 1,
            bytes: gib_on_gpu1 * GIB,
        }],
        autostart,
        ..LaunchProfile::default()
    }
}

async fn instance_names(t: &TestServer) -> Vec<String> {
    let all = t.get_json("/api/v1/instances").await;
    all.as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autostart_profiles_that_cannot_coexist_are_refused_together() {
    let dir = tempfile::tempdir().unwrap();
    let (store, build, model) = prepare(dir.path()).await;
    // 10 GiB each on a 16 GB GPU: either fits alone, not both.
    for p in [
        profile("left", build.id, &model, 10, true),
        profile("right", build.id, &model, 10, true),
        profile("manual", build.id, &model, 1, false),
    ] {
        store.create_launch_profile(&p, 0).await.unwrap();
    }
    drop(store);
    let rig = scratch_rig(dir.path(), "2x5060ti.json");
    let t = TestServer::start_with_rig(dir, rig).await;

    let report = t.server.autostart();
    assert!(report.started.is_empty(), "{report:?}");
    let why = report.refused.as_deref().expect("a reason");
    assert!(
        why.contains("autostart of left, right refused")
            && why.contains("starting left and right together would need more memory")
            && why.contains("GPU 1 needs 20.")
            && why.contains("15.9 GiB free"),
        "{why}"
    );
    assert!(instance_names(&t).await.is_empty());
    // The Engines page shows the same reason from the daemon's status.
    let status = t.get_json("/api/v1/status").await;
    let at_start = &status["engines_at_start"];
    assert_eq!(
        at_start["autostart"]["refused"].as_str(),
        Some(why),
        "{status}"
    );
    assert_eq!(
        at_start["autostart"]["started"],
        serde_json::json!([]),
        "{status}"
    );
    assert_eq!(
        at_start["recovery"]["adopted"],
        serde_json::json!([]),
        "{status}"
    );
    t.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_autostart_profile_that_fits_starts_with_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (store, build, model) = prepare(dir.path()).await;
    for p in [
        profile("boot", build.id, &model, 1, true),
        profile("manual", build.id, &model, 1, false),
        // Its build is gone: skipped with the reason, the others still start.
        profile("orphan", 999, &model, 1, true),
    ] {
        store.create_launch_profile(&p, 0).await.unwrap();
    }
    drop(store);
    let rig = scratch_rig(dir.path(), "2x5060ti.json");
    let t = TestServer::start_with_rig(dir, rig).await;

    let report = t.server.autostart().clone();
    assert_eq!(report.started, ["boot"], "{report:?}");
    assert!(report.refused.is_none(), "{report:?}");
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].0, "orphan");
    assert!(
        report.skipped[0]
            .1
            .contains("engine build 999, which is not installed"),
        "{report:?}"
    );
    assert_eq!(instance_names(&t).await, ["boot"]);
    let all = t.get_json("/api/v1/instances").await;
    let view = &all[0];
    assert!(view["pid"].as_u64().is_some(), "{view}");
    assert_eq!(view["planned_memory"][0]["bytes"], GIB, "{view}");
    let status = t.get_json("/api/v1/status").await;
    let autostart = &status["engines_at_start"]["autostart"];
    assert_eq!(
        autostart["started"],
        serde_json::json!(["boot"]),
        "{status}"
    );
    assert_eq!(autostart["skipped"][0][0], "orphan", "{status}");
    t.server.shutdown().await;
}
