//! The tuning loop's quality floor through the daemon on the real Gemma 3 270M: a reference
//! recorded by llama-perplexity, a grid over the KV cache type (f16, q4_0) and threads held to a
//! tight mean-KLD bound. q4_0 breaks the floor and is never the best; trials that differ only in
//! threads reuse one KL divergence; the temporary profiles the KLD runs measured are gone after,
//! a cancel during a KLD run included; and a floor naming no recorded reference is refused before
//! any engine restarts.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::engine_rig::Rig;

/// Short windows keep the test quick on two cores (users get 8192 by default).
const CONTEXT: u32 = 512;
const CHUNKS: u32 = 2;

/// Gemma against itself reads about 0.000001 and with a q4_0 KV cache about 0.16.
const MAX_MEAN_KLD: f64 = 0.01;

async fn tune_when_ended(rig: &Rig, id: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let (status, tune) = rig
            .api("GET", &format!("/api/v1/bench/tunes/{id}"), None)
            .await;
        assert_eq!(status, 200, "{tune}");
        if tune["status"] != "running" {
            return tune;
        }
        assert!(Instant::now() < deadline, "tuning {id} never ended: {tune}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn tuning(floor: Value) -> Value {
    json!({"profile": "gemma", "spec": {
        "strategy": "grid",
        "knobs": [{"name": "cache_type", "values": ["f16", "q4_0"]},
                  {"name": "threads", "values": [1, 2]}],
        "bench": {"shapes": [{"prompt_tokens": 32, "output_tokens": 16}], "warm_runs": 3,
                  "api": "completions"},
        "quality_floor": floor}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_type_over_the_floor_is_never_the_best_and_threads_trials_share_one_kld() {
    let rig = Rig::start("cpu-only.json").await;
    let gemma = support::gemma3_270m();
    rig.profile(
        "gemma",
        json!({"model": gemma, "extra_args": [],
               "placement": {"context": 2048, "threads": 2, "flash_attention": true}}),
    )
    .await;

    let (status, refused) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(tuning(json!({"reference": "nowhere"}))),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nowhere") && message.contains("rigdeck quality references"),
        "{message}"
    );

    let record = json!({"model": {"kind": "file", "path": gemma}, "corpus": {"kind": "builtin"},
                        "context": CONTEXT, "chunks": CHUNKS});
    let (status, begun) = rig
        .api("POST", "/api/v1/quality/references", Some(record))
        .await;
    assert_eq!(status, 202, "{begun}");
    let reference = begun["id"].as_str().expect("an id").to_owned();
    let recorded = rig.reference_when_ended(&reference).await;
    assert_eq!(recorded["state"], "ready", "{recorded}");

    let (status, tune) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(tuning(
                json!({"reference": reference, "max_mean_kld": MAX_MEAN_KLD}),
            )),
        )
        .await;
    assert_eq!(status, 201, "{tune}");
    let tune = tune_when_ended(&rig, tune["id"].as_i64().expect("an id")).await;
    assert_eq!(tune["status"], "done", "{tune}");
    let trials = tune["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 5, "{tune}");

    let mut kld_runs = BTreeSet::new();
    for (index, trial) in trials.iter().enumerate() {
        assert_eq!(trial["outcome"], "measured", "{trial}");
        let kld = &trial["kld"];
        kld_runs.insert(kld["run_id"].as_i64().expect("a KLD run"));
        let q4 = trial["values"]["cache_type"] == "q4_0";
        assert_eq!(kld["within"], !q4, "{trial}");
        assert_eq!(kld["bound"], MAX_MEAN_KLD, "{trial}");
        let reason = trial["decision"]["reason"].as_str().expect("a reason");
        if q4 {
            assert_eq!(trial["decision"]["verdict"], "broke_floor", "{trial}");
            assert!(reason.contains("> bound 0.0100"), "{reason}");
        } else {
            assert!(kld["mean"].as_f64().expect("a mean") < MAX_MEAN_KLD);
            assert!(reason.contains("≤ bound 0.0100"), "{reason}");
        }
        // The grid: the baseline, then (f16, 1) (f16, 2) (q4_0, 1) (q4_0, 2). Only the
        // baseline and the first q4_0 trial change the numbers from every trial before.
        let measured_by = match index {
            0 | 3 => Value::Null,
            1 | 2 => json!(0),
            _ => json!(3),
        };
        assert_eq!(
            kld["same_numerics_as"], measured_by,
            "trial {index}: {trial}"
        );
        if let Some(earlier) = measured_by.as_u64() {
            assert_eq!(kld["run_id"], trials[earlier as usize]["kld"]["run_id"]);
            let words = format!("KLD of trial {}: same numerics", earlier + 1);
            assert!(reason.contains(&words), "{reason}");
        }
    }
    assert_eq!(kld_runs.len(), 2, "{tune}");

    // The q4_0 trial's KLD run measured its values, not the profile as saved.
    let q4_run = trials[3]["kld"]["run_id"].as_i64().expect("q4_0's run");
    let (_, run) = rig
        .api("GET", &format!("/api/v1/bench/runs/{q4_run}"), None)
        .await;
    assert_eq!(
        (&run["kind"], &run["status"]),
        (&json!("kld"), &json!("done"))
    );
    let line = run["context"]["kld"]["command_line"]
        .as_str()
        .unwrap_or_default();
    assert!(
        line.contains("-ctk q4_0") && line.contains("-t 1"),
        "{line}"
    );
    assert!(run["kld"]["mean"].as_f64().expect("a mean") > MAX_MEAN_KLD);

    // However fast q4_0 ran, the best (when a trial beat the baseline) keeps an f16 cache.
    if !tune["best"].is_null() {
        assert_ne!(tune["best"]["values"]["cache_type"], "q4_0", "{tune}");
        assert_eq!(tune["best"]["kld"]["within"], true, "{tune}");
    }

    // The temporary profiles the KLD runs measured are gone.
    assert_eq!(profile_names(&rig).await, ["gemma"]);

    // Cancelled while the baseline's KLD runs: the trial is marked so and its profile deleted.
    let (status, tune) = rig
        .api(
            "POST",
            "/api/v1/bench/tunes",
            Some(tuning(json!({"reference": reference}))),
        )
        .await;
    assert_eq!(status, 201, "{tune}");
    let id = tune["id"].as_i64().expect("an id");
    let deadline = Instant::now() + Duration::from_secs(300);
    while profile_names(&rig).await.len() < 2 {
        assert!(Instant::now() < deadline, "no KLD run started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = rig
        .api("POST", &format!("/api/v1/bench/tunes/{id}/cancel"), None)
        .await;
    assert_eq!(status, 200);
    let tune = tune_when_ended(&rig, id).await;
    assert_eq!(tune["status"], "cancelled", "{tune}");
    assert_eq!(tune["trials"][0]["outcome"], "cancelled", "{tune}");
    assert_eq!(profile_names(&rig).await, ["gemma"]);
}

async fn profile_names(rig: &Rig) -> Vec<String> {
    let (_, profiles) = rig.api("GET", "/api/v1/profiles", None).await;
    profiles
        .as_array()
        .expect("profiles")
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect()
}
