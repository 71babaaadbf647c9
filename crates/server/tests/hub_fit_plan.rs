//! A model page's fit and the placement editor's automatic plan of the same file, on the same
//! live rig at the same context, are one plan: the same devices with the same capacity and
//! reserve, the same memory on each, the same llama-server flags.

mod support;

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use support::TestServer;

const REPO: &str = "org/Fit-GGUF";
const FILE: &str = "Model-Q4_K_M.gguf";
const CONTEXT: u64 = 32_768;

/// POSTs until the live rig has its first reading (a 503 in the daemon's first second).
async fn post_when_sampled(
    server: &TestServer,
    path: &str,
    body: &serde_json::Value,
) -> serde_json::Value {
    for _ in 0..50 {
        let (status, answer) = server.post_json(path, body).await;
        if status == 503 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(status, 200, "POST {path}: {answer}");
        return answer;
    }
    panic!("POST {path}: the live rig never had a reading");
}

/// The flags after `-m MODEL`: the fit names the file in the repository, the plan its address.
fn flags_past_model(line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "-m")
        .expect("-m in the line");
    words
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at + 1)
        .map(|(_, w)| (*w).to_owned())
        .skip(1)
        .collect()
}

#[tokio::test]
async fn the_fit_of_a_model_page_and_the_automatic_plan_it_opens_are_one_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = dir.path().join("written");
    std::fs::create_dir_all(&models).expect("mkdir");
    let small = rigdeck_gguf::fixtures::MoeShape::small()
        .writer()
        .write_split(&models, "small", 1)
        .expect("small model");
    let hub = RunningHub::start(vec![FakeRepo::new(
        REPO,
        0x5a,
        vec![FakeFile::from_disk(FILE, &small[0])],
    )])
    .await;
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", dir.path().join("hf-cache"));
    std::env::remove_var("HF_TOKEN");
    let server = TestServer::start("4x3090.json").await;

    let fit_body = serde_json::json!({"repo": REPO, "rig": "live", "context": CONTEXT});
    let fit = post_when_sampled(&server, "/api/v1/hub/fit", &fit_body).await;
    let quant = fit["quants"]
        .as_array()
        .and_then(|q| q.iter().find(|q| q["label"] == "Q4_K_M"))
        .cloned()
        .expect("the Q4_K_M fit");
    let commit = fit["commit"].as_str().expect("commit");
    let address = format!("{}/{REPO}/resolve/{commit}/{FILE}", hub.url);
    let plan_body = serde_json::json!({
        "model": address,
        "rig": "live",
        "options": {"context": CONTEXT},
        "auto": true,
    });
    let plan = post_when_sampled(&server, "/api/v1/plan", &plan_body).await;
    let planned = plan["report"]["plan"]["devices"]
        .as_array()
        .expect("plan devices");
    let fitted = quant["devices"].as_array().expect("fit devices");

    assert_eq!(fitted.len(), planned.len(), "{quant}\n{plan}");
    for (f, p) in fitted.iter().zip(planned) {
        let spec = &p["spec"];
        assert_eq!(f["name"], spec["name"], "{f} / {spec}");
        assert_eq!(f["reserve_bytes"], spec["reserve_bytes"], "{f} / {spec}");
        let usage = &p["usage"];
        let used: u64 = [
            "weights_bytes",
            "kv_bytes",
            "compute_bytes",
            "overhead_bytes",
        ]
        .iter()
        .filter_map(|k| usage[*k].as_u64())
        .sum();
        assert_eq!(f["used_bytes"].as_u64(), Some(used), "{f} / {usage}");
        let (fc, pc) = (
            f["capacity_bytes"].as_u64().unwrap_or(0),
            spec["capacity_bytes"].as_u64().unwrap_or(0),
        );
        if spec["id"]["kind"] == "cpu" || spec["id"] == "cpu" {
            // The host's available RAM moves a little between the two readings.
            assert!(fc.abs_diff(pc) < pc / 20, "{f} / {spec}");
        } else {
            assert_eq!(fc, pc, "{f} / {spec}");
        }
    }
    let fit_line = quant["command_line"].as_str().expect("fit command line");
    let plan_line = plan["report"]["command_line"]["Ok"]
        .as_str()
        .or_else(|| plan["report"]["command_line"].as_str())
        .expect("plan command line");
    assert_eq!(
        flags_past_model(fit_line),
        flags_past_model(plan_line),
        "{fit_line}\n{plan_line}"
    );
}
