//! The daemon follows the rig as it changes: a link that drops, a GPU that falls off the bus,
//! a process that releases its VRAM; and it keeps running through broken input.

mod support;

use support::TestServer;

#[tokio::test]
async fn a_gpu_falling_off_the_bus_is_reported_and_the_others_keep_updating() {
    let t = TestServer::start("4xpro6000.json").await;
    t.edit_rig(|rig| rig["gpus"][2]["lost"] = serde_json::json!(true));
    let frame = t
        .wait_for_frame("GPU 2 lost", |f| {
            f["sample"]["gpus"]["gpus"][2]["lost"].is_string()
        })
        .await;
    let gpus = frame["sample"]["gpus"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    assert!(
        gpus[2]["memory"].is_null(),
        "a lost GPU shows no stale figures"
    );
    assert!(gpus[1]["memory"]["total_bytes"].as_u64().is_some());
    let lost: Vec<_> = frame["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "gpu_lost")
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0]["severity"], "critical");
}

#[tokio::test]
async fn a_vram_holding_process_that_exits_disappears_and_its_finding_with_it() {
    let t = TestServer::start("4x3090.json").await;
    let holder = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = holder.id();
    t.edit_rig(|rig| {
        rig["gpus"][0]["processes"] = serde_json::json!([{"pid": pid, "used_mib": 9000}]);
        rig["gpus"][0]
            .as_object_mut()
            .unwrap()
            .remove("memory_used_mib");
    });
    let frame = t
        .wait_for_frame("the process on GPU 0", |f| {
            f["sample"]["gpus"]["gpus"][0]["processes"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["pid"] == pid))
        })
        .await;
    let process = &frame["sample"]["gpus"]["gpus"][0]["processes"][0];
    assert_eq!(
        process["name"], "sleep",
        "named from /proc when NVML has no name"
    );
    assert_eq!(process["used_bytes"], 9000u64 << 20);
    assert!(frame["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rule"] == "foreign_vram" && f["gpu_index"] == 0));

    t.edit_rig(|rig| rig["gpus"][0]["processes"] = serde_json::json!([]));
    let frame = t
        .wait_for_frame("VRAM released", |f| {
            f["sample"]["gpus"]["gpus"][0]["processes"]
                .as_array()
                .is_some_and(Vec::is_empty)
        })
        .await;
    assert_eq!(
        frame["sample"]["gpus"]["gpus"][0]["memory"]["used_bytes"],
        0
    );
    assert!(!frame["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rule"] == "foreign_vram" && f["gpu_index"] == 0));
    let mut holder = holder;
    let _ = holder.kill();
}

#[tokio::test]
async fn a_link_that_drops_to_x4_is_noticed_on_the_next_tick() {
    let t = TestServer::start("2x5060ti.json").await;
    let before = t.get_json("/api/v1/telemetry/latest").await;
    assert!(!before["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rule"] == "pcie_narrow"));
    t.edit_rig(|rig| rig["gpus"][1]["pcie"]["width"] = serde_json::json!(4));
    let frame = t
        .wait_for_frame("the narrow link", |f| {
            f["sample"]["gpus"]["gpus"][1]["pcie"]["width_current"] == 4
        })
        .await;
    let finding = frame["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "pcie_narrow")
        .cloned()
        .unwrap();
    assert_eq!(finding["title"], "PCIe link x4 (card supports x8)");
}

#[tokio::test]
async fn a_broken_rig_file_leaves_gpus_off_with_a_message_and_the_host_working() {
    let dir = tempfile::tempdir().unwrap();
    let rig = dir.path().join("broken.json");
    std::fs::write(&rig, "{ \"gpus\": [ { \"name\": ").unwrap();
    let t = TestServer::start_with_rig(dir, rig).await;
    let frame = t.get_json("/api/v1/telemetry/latest").await;
    assert_eq!(frame["sample"]["gpus"]["driver"]["state"], "failed");
    assert!(frame["sample"]["gpus"]["driver"]["message"]
        .as_str()
        .unwrap()
        .contains("NVML failed to start"));
    assert!(
        frame["sample"]["host"]["cpu"]["logical_cores"]
            .as_u64()
            .unwrap()
            >= 1
    );
}
