//! KL divergence measured end to end with llama.cpp's own tools on the real Gemma 3 270M: the
//! file from the package index re-quantized by the bundled `llama-quantize` into F16 (the
//! reference) and a ladder of smaller types, a reference recorded over the built-in corpus, each
//! file and each KV cache type measured as a launch profile. The order must be the known one
//! (q8_0 < q5_1 < q4_0 < q2_K; f16 KV < q8_0 KV < q4_0 KV), a model against itself reads ≈ 0,
//! the figures stored are those llama-perplexity printed, and bad input is refused up front.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::engine_rig::Rig;

/// Short windows keep the test quick on two cores; the default for users is 8192.
const CONTEXT: u32 = 512;
const CHUNKS: u32 = 4;

fn quantize(tool: &Path, from: &Path, to: &Path, kind: &str) {
    let output = std::process::Command::new(tool)
        .arg("--allow-requantize")
        .arg(from)
        .arg(to)
        .arg(kind)
        .output()
        .expect("run llama-quantize");
    assert!(
        output.status.success(),
        "llama-quantize {kind}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// F16 of the real Gemma (its Q4_K_M weights, dequantized) and the ladder made from it.
fn ladder(build_server: &Path, dir: &Path) -> (PathBuf, Vec<(&'static str, PathBuf)>) {
    let tool = build_server.with_file_name("llama-quantize");
    let f16 = dir.join("gemma-f16.gguf");
    quantize(&tool, &support::gemma3_270m(), &f16, "F16");
    let rungs = ["Q8_0", "Q5_1", "Q4_0", "Q2_K"]
        .into_iter()
        .map(|kind| {
            let path = dir.join(format!("gemma-{kind}.gguf"));
            quantize(&tool, &f16, &path, kind);
            (kind, path)
        })
        .collect();
    (f16, rungs)
}

/// Saves a profile for `model` with the KV cache type `kv` and measures it; returns the run.
async fn measure(rig: &Rig, name: &str, model: &Path, kv: &str, reference: &str) -> Value {
    let body = json!({"name": name, "engine_build_id": rig.build.id, "model": model,
        "restart": {"policy": "never"}, "placement": {"context": 2048, "threads": 2,
        "cache_type_k": kv, "cache_type_v": kv, "flash_attention": true}});
    let (status, saved) = rig.api("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    let (status, run) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(
                json!({"kind": "kld", "target": {"kind": "profile", "name": name},
                        "kld": {"reference": reference}}),
            ),
        )
        .await;
    assert!(status < 300, "{run}");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, detail) = rig
            .api("GET", &format!("/api/v1/bench/runs/{}", run["id"]), None)
            .await;
        if detail["status"] != "running" {
            assert_eq!(detail["status"], "done", "{name}: {detail}");
            // Progress counted in windows, as llama-perplexity reported them.
            assert_eq!(
                (detail["runs_done"].as_u64(), detail["runs_total"].as_u64()),
                (Some(4), Some(4))
            );
            return detail;
        }
        assert!(Instant::now() < deadline, "{name} never ended");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn mean(run: &Value) -> f64 {
    run["kld"]["mean"].as_f64().expect("a mean KLD")
}

#[tokio::test]
async fn quantizations_and_kv_caches_rank_as_known_and_the_figures_are_llama_perplexitys() {
    let rig = Rig::start("cpu-only.json").await;
    let files = tempfile::tempdir().expect("tempdir");
    let (f16, rungs) = ladder(&rig.build.location, files.path());

    let record = json!({"model": {"kind": "file", "path": f16}, "corpus": {"kind": "builtin"},
                        "context": CONTEXT, "chunks": CHUNKS});
    let (status, estimate) = rig
        .api(
            "POST",
            "/api/v1/quality/references/estimate",
            Some(record.clone()),
        )
        .await;
    assert_eq!(status, 200, "{estimate}");
    // 2 × (262 144 + 4) bytes per scored token, 255 scored per 512-token window.
    assert_eq!(estimate["bytes"], 534_790_132, "{estimate}");
    assert!(estimate["problem"].is_null(), "{estimate}");
    let (status, begun) = rig
        .api("POST", "/api/v1/quality/references", Some(record.clone()))
        .await;
    assert_eq!(status, 202, "{begun}");
    let id = begun["id"].as_str().unwrap().to_owned();
    let reference = rig.reference_when_ended(&id).await;
    assert_eq!(reference["state"], "ready", "{reference}");
    assert_eq!(reference["scored_tokens"], 1020);
    // Asked again: the same recording is reused, not made twice.
    let (status, again) = rig
        .api("POST", "/api/v1/quality/references", Some(record))
        .await;
    assert_eq!((status, &again["id"]), (200, &json!(id)));

    // The reference against itself: llama.cpp's floor (16-bit log-probabilities), not 0.
    let itself = measure(&rig, "f16", &f16, "f16", &id).await;
    assert!(mean(&itself) < 1e-3, "{}", itself["kld"]);
    assert!(itself["kld"]["same_top"].as_f64().unwrap() > 0.99);

    let mut previous = mean(&itself);
    for (kind, path) in &rungs {
        let run = measure(&rig, kind, path, "f16", &id).await;
        eprintln!("{kind}: {}", run["kld"]["summary"]);
        assert!(
            mean(&run) > previous,
            "{kind} should be further than the rung before: {}",
            run["kld"]
        );
        previous = mean(&run);
    }

    // The reference to pick for the Q4_0 profile: the library's F16 of the same model first.
    let folders = json!({"model_folders": [files.path()]});
    let (status, _) = rig.api("PUT", "/api/v1/settings", Some(folders)).await;
    assert_eq!(status, 200);
    rig.api("POST", "/api/v1/models/rescan", None).await;
    let (_, found) = rig
        .api(
            "GET",
            "/api/v1/quality/reference-candidates?profile=Q4_0",
            None,
        )
        .await;
    let first = &found["candidates"][0];
    assert_eq!(first["path"], json!(f16), "{found}");
    assert_eq!(first["good_reference"], true, "{found}");
    assert_eq!(
        found["candidates"].as_array().map(Vec::len),
        Some(5),
        "{found}"
    );

    let mut previous = mean(&itself);
    for kv in ["q8_0", "q4_0"] {
        let run = measure(&rig, &format!("f16-kv-{kv}"), &f16, kv, &id).await;
        eprintln!("KV {kv}: {}", run["kld"]["summary"]);
        assert!(mean(&run) > previous, "KV {kv}: {}", run["kld"]);
        previous = mean(&run);
        let line = run["context"]["kld"]["command_line"].as_str().unwrap();
        assert!(line.contains(&format!("-ctk {kv}")), "{line}");
    }

    // The stored figures are llama-perplexity's own: run its command by hand, compare lines.
    let q4 = measure(&rig, "q4-again", &rungs[2].1, "f16", &id).await;
    let argv = words(q4["context"]["kld"]["command_line"].as_str().unwrap());
    let output = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .expect("llama-perplexity by hand");
    let printed = String::from_utf8_lossy(&output.stdout);
    let k = &q4["kld"];
    for line in [
        format!(
            "Mean    KLD: {:10.6} ± {:10.6}",
            k["mean"].as_f64().unwrap(),
            k["mean_unc"].as_f64().unwrap()
        ),
        format!("99.0%   KLD: {:10.6}", k["p99"].as_f64().unwrap()),
        format!(
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * k["same_top"].as_f64().unwrap(),
            100.0 * k["same_top_unc"].as_f64().unwrap()
        ),
    ] {
        assert!(
            printed.contains(&line),
            "'{line}' not in llama-perplexity's printout:\n{printed}"
        );
    }

    // The frontier lists every measured profile of the reference.
    let (_, frontier) = rig
        .api(
            "GET",
            &format!("/api/v1/quality/frontier?reference={id}"),
            None,
        )
        .await;
    assert_eq!(
        frontier["points"].as_array().map(Vec::len),
        Some(8),
        "{frontier}"
    );
}

/// The command line as stored (no argument of it holds a space here).
fn words(line: &str) -> Vec<String> {
    line.split_whitespace()
        .map(|w| w.trim_matches('\'').to_owned())
        .collect()
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_runs() {
    let rig = Rig::start("cpu-only.json").await;
    let gemma = support::gemma3_270m();
    let files = tempfile::tempdir().expect("tempdir");

    // A corpus shorter than two windows: the tokens counted and the fix named.
    let short = files.path().join("short.txt");
    std::fs::write(&short, "Only a few words here.").unwrap();
    let (status, err) = rig
        .api(
            "POST",
            "/api/v1/quality/references/estimate",
            Some(json!({"model": {"kind": "file", "path": gemma},
                        "corpus": {"kind": "file", "path": short}, "context": 512})),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("needs at least 1024"),
        "{err}"
    );

    // No room in the budget: refused with the numbers, nothing recorded.
    let (status, _) = rig
        .api(
            "PUT",
            "/api/v1/settings",
            Some(json!({"quality_reference_budget_gb": 1.0})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, err) = rig
        .api(
            "POST",
            "/api/v1/quality/references",
            Some(json!({"model": {"kind": "file", "path": gemma}, "context": 512, "chunks": 8})),
        )
        .await;
    assert_eq!(status, 507, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("1.00 GB budget"),
        "{err}"
    );
    rig.api(
        "PUT",
        "/api/v1/settings",
        Some(json!({"quality_reference_budget_gb": 20.0})),
    )
    .await;

    // A reference to measure against, then a candidate of another vocabulary.
    let (_, begun) = rig
        .api(
            "POST",
            "/api/v1/quality/references",
            Some(json!({"model": {"kind": "file", "path": gemma}, "context": 512, "chunks": 2})),
        )
        .await;
    let id = begun["id"].as_str().expect("an id").to_owned();
    assert_eq!(rig.reference_when_ended(&id).await["state"], "ready");
    rig.profile("tiny", json!({})).await;
    let (status, err) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(
                json!({"kind": "kld", "target": {"kind": "profile", "name": "tiny"},
                        "kld": {"reference": id}}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("262144") && message.contains("vocabulary"),
        "{message}"
    );

    // A logits file cut short is refused with both sizes.
    let logits = rig
        .t
        .dir
        .path()
        .join(format!("data/quality/references/{id}/logits.bin"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&logits)
        .unwrap();
    file.set_len(1000).unwrap();
    let body = json!({"name": "g", "engine_build_id": rig.build.id, "model": gemma,
        "restart": {"policy": "never"}});
    rig.api("POST", "/api/v1/profiles", Some(body)).await;
    let (status, err) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(
                json!({"kind": "kld", "target": {"kind": "profile", "name": "g"},
                        "kld": {"reference": id}}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("cut short"),
        "{err}"
    );

    // Deleted: the files go with it.
    let (status, _) = rig
        .api("DELETE", &format!("/api/v1/quality/references/{id}"), None)
        .await;
    assert_eq!(status, 204);
    assert!(!logits.exists());
}
