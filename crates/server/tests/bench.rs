//! Benchmarks through the daemon against a real llama-server (the tiny model): prompts of an
//! exact token count from its tokenizer, forced output lengths, a concurrency sweep whose
//! decode speed agrees with the engine's own `predicted_per_second`, the run's context and
//! exports, the CLI's table; and the bad cases: a target that is not running, an endpoint
//! that is down, a cancel mid-run, a profile started for the run, a daemon killed mid-run.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_process;
use support::engine_rig::Rig;

/// Polls a run until it is no longer running.
async fn ended(rig: &Rig, id: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (status, run) = rig
            .api("GET", &format!("/api/v1/bench/runs/{id}"), None)
            .await;
        assert_eq!(status, 200, "{run}");
        if run["status"] != "running" {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "benchmark {id} never ended: {}",
            run["runs_done"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(rig: &Rig, body: Value) -> i64 {
    let (status, run) = rig.api("POST", "/api/v1/bench/runs", Some(body)).await;
    assert_eq!(status, 201, "{run}");
    run["id"].as_i64().expect("a run id")
}

fn samples(run: &Value) -> Vec<Value> {
    let mut all = Vec::new();
    for step in run["results"].as_array().expect("results") {
        for r in step["runs"].as_array().expect("runs") {
            all.extend(r["requests"].as_array().expect("requests").iter().cloned());
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_llama_server_counts_exact_tokens_and_agrees_with_its_decode_speed() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "tiny",
        json!({"placement": {"context": 4096, "threads": 1, "parallel": 2}}),
    )
    .await;
    rig.run("tiny").await;
    let id = start(
        &rig,
        json!({"target": {"kind": "instance", "name": "tiny"}, "spec": {
            "shapes": [{"prompt_tokens": 48, "output_tokens": 24}],
            "concurrency": [1, 2], "warm_runs": 2, "api": "completions"}}),
    )
    .await;
    let run = ended(&rig, id).await;
    assert_eq!(run["status"], "done", "{}", run["error"]);
    assert_eq!(run["exact_prompts"], true);
    assert_eq!(run["runs_done"], 6);
    let results = run["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["point"]["load"]["concurrency"], 2);
    assert_eq!(
        results[1]["runs"][1]["requests"].as_array().map(Vec::len),
        Some(2)
    );

    let all = samples(&run);
    assert_eq!(all.len(), 9);
    for s in &all {
        assert_eq!(s["ok"], true, "{s}");
        // Forced length, counted by the engine; the prompt is what was built (plus BOS).
        assert_eq!(s["output_tokens"], 24, "{s}");
        let prompt = s["prompt_tokens"].as_u64().expect("prompt tokens");
        assert!((48..=49).contains(&prompt), "{s}");
    }
    // One stream: our decode speed (1 / TPOT) against llama.cpp's own. The two clocks are read
    // in two processes on a shared machine, so a single run can differ by several per cent under
    // load; the median of the three runs stays within 12 % unless the figure is wrong in kind
    // (the prefill counted in the gaps, the first token's wait taken as decode).
    let mut ratios: Vec<f64> = all[..3]
        .iter()
        .map(|s| {
            let ours = 1000.0 / s["tpot_ms"].as_f64().expect("tpot");
            ours / s["engine_decode_tps"].as_f64().expect("engine's figure")
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    assert!((ratios[1] - 1.0).abs() < 0.12, "ours / engine: {ratios:?}");
    let summary = &results[0]["summary"];
    assert_eq!(summary["runs"], 2, "the cold run stays out of the summary");
    // One gap between each two text chunks of the warm runs' requests. llama-server holds back
    // a token that ends inside a UTF-8 character and sends it with the next, so a random model's
    // 24 tokens may come in fewer chunks; most still come one by one.
    let warm_chunks: Vec<u64> = results[0]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .skip(1)
        .flat_map(|r| r["requests"].as_array().cloned().unwrap_or_default())
        .map(|r| r["chunks"].as_u64().expect("chunks"))
        .collect();
    let gaps: u64 = warm_chunks.iter().map(|c| c.saturating_sub(1)).sum();
    assert_eq!(warm_chunks.len(), 2, "{warm_chunks:?}");
    assert_eq!(summary["itl_ms"]["n"].as_u64(), Some(gaps));
    assert!(gaps >= 2 * 12, "{warm_chunks:?}");
    assert!(summary["aggregate_tps"]["median"].as_f64().expect("tok/s") > 0.0);

    let context = &run["context"];
    assert!(
        context["command_line"]
            .as_str()
            .expect("command line")
            .contains("llama-server"),
        "{context}"
    );
    assert_eq!(context["engine"]["kind"], "llama.cpp");
    assert!(context["model"]["file"].as_str().is_some(), "{context}");
    assert!(context["hardware_before"]["gpus"].is_array(), "{context}");
    assert!(context["hardware_after"]["gpus"].is_array(), "{context}");

    let csv = rig
        .t
        .client
        .get(
            rig.t
                .url(&format!("/api/v1/bench/runs/{id}/export?format=csv")),
        )
        .bearer_auth(rig.t.server.token())
        .send()
        .await
        .expect("export")
        .text()
        .await
        .expect("csv");
    assert_eq!(csv.lines().count(), 1 + 6, "{csv}");
    let (ok, table, stderr) = rig
        .cli(&["bench", "--show", &id.to_string(), "--format", "md"])
        .await;
    assert!(ok, "{stderr}");
    assert!(table.contains("| 48:24, 2 streams |"), "{table}");

    // The command line runs one too, with a table at the end.
    let (ok, out, stderr) = rig
        .cli(&["bench", "tiny", "--shape", "16:8", "--warm", "1"])
        .await;
    assert!(ok, "{stderr}");
    assert!(out.contains("16:8, 1 stream"), "{out}");
    assert!(out.contains("AGGREGATE TOK/S"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_targets_a_dead_endpoint_and_a_cancel_are_stored_with_what_was_measured() {
    let rig = Rig::start("2x5060ti.json").await;
    // Not running: refused at once, saying how to fix it.
    let (status, refused) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(json!({"target": {"kind": "instance", "name": "tiny"}})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .expect("message")
            .contains("no instance named 'tiny'"),
        "{refused}"
    );
    let (status, bad) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(
                json!({"target": {"kind": "instance", "name": "x"}, "spec": {"concurrency": [0]}}),
            ),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        bad["message"]
            .as_str()
            .expect("message")
            .contains("concurrency 0"),
        "{bad}"
    );

    // Nothing listens at the URL: the run fails, naming it.
    let port = daemon_process::free_port();
    let id = start(&rig, json!({"target": {"kind": "url", "url": format!("http://127.0.0.1:{port}/v1"), "model": "m"},
        "spec": {"warm_runs": 1, "shapes": [{"prompt_tokens": 8, "output_tokens": 4}]}})).await;
    let run = ended(&rig, id).await;
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().expect("error");
    assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
    assert_eq!(run["exact_prompts"], false);
    assert_eq!(
        run["results"][0]["runs"][0]["failed"], 1,
        "the failed run is stored"
    );

    // A profile started for the run, cancelled mid-run: stored as cancelled, the engine stopped.
    rig.profile("tiny", json!({})).await;
    let id = start(
        &rig,
        json!({"target": {"kind": "profile", "name": "tiny"},
        "spec": {"warm_runs": 50, "shapes": [{"prompt_tokens": 16, "output_tokens": 64}]}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (_, run) = rig
            .api("GET", &format!("/api/v1/bench/runs/{id}"), None)
            .await;
        if run["runs_done"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no run finished: {run}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = rig
        .api(
            "POST",
            &format!("/api/v1/bench/runs/{id}/cancel"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200);
    let run = ended(&rig, id).await;
    assert_eq!(run["status"], "cancelled");
    assert!(run["results"][0]["runs"].as_array().expect("runs").len() >= 2);
    rig.wait_phase("tiny", "stopped", Duration::from_secs(30))
        .await;
    let (status, _) = rig
        .api("DELETE", &format!("/api/v1/bench/runs/{id}"), None)
        .await;
    assert_eq!(status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_by_a_killed_daemon_is_marked_aborted_and_keeps_its_steps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = daemon_process::free_port();
    let daemon = daemon_process::serve(dir.path(), port).await;
    let token = std::fs::read_to_string(dir.path().join("config/token")).expect("token");
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{port}/api/v1{path}");
    let build = support::register_llama_server(&dir.path().join("data")).await;
    let model = support::tiny_runnable(dir.path());
    let profile = json!({"name": "tiny", "engine_build_id": build.id, "model": model,
        "placement": {"context": 4096, "threads": 1}});
    let created = client
        .post(url("/profiles"))
        .bearer_auth(token.trim())
        .json(&profile)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status().as_u16(), 201);
    let body = json!({"target": {"kind": "profile", "name": "tiny"},
        "spec": {"warm_runs": 100, "shapes": [{"prompt_tokens": 16, "output_tokens": 64}]}});
    let run: Value = client
        .post(url("/bench/runs"))
        .bearer_auth(token.trim())
        .json(&body)
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("run");
    let id = run["id"].as_i64().expect("id");
    let get = || async {
        let run: Value = client
            .get(url(&format!("/bench/runs/{id}")))
            .bearer_auth(token.trim())
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("run");
        run
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let run = get().await;
        if run["runs_done"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        assert_eq!(run["status"], "running", "{}", run["error"]);
        assert!(Instant::now() < deadline, "no run finished: {run}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.kill_hard();

    let _again = daemon_process::serve(dir.path(), port).await;
    let run = get().await;
    assert_eq!(run["status"], "aborted", "{}", run["error"]);
    assert!(run["error"]
        .as_str()
        .expect("why")
        .contains("stopped during this run"));
    assert!(run["results"][0]["runs"].as_array().expect("runs").len() >= 2);
    client
        .post(url("/instances/tiny/stop"))
        .bearer_auth(token.trim())
        .json(&json!({}))
        .send()
        .await
        .expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quality_probe_grades_every_question_and_prints_the_pass_rate() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "tiny",
        json!({"placement": {"context": 4096, "threads": 1, "parallel": 4}}),
    )
    .await;
    rig.run("tiny").await;
    let probe = [
        "bench",
        "tiny",
        "--quality",
        "--max-tokens",
        "24",
        "--count",
        "10",
        "--seed",
        "7",
    ];
    let (ok, out, stderr) = rig.cli(&probe).await;
    // The tiny model's weights are random: it answers nothing right, but every question is
    // asked, graded and stored, with the interval the ten answers allow.
    assert!(!out.is_empty(), "{stderr}");
    assert!(out.contains("arithmetic-1"), "{out}");
    assert!(out.contains("code-2"), "{out}");
    assert!(
        out.contains("passed 0 of 10: 0 % (95 % interval 0–28 %)"),
        "{out}"
    );
    assert!(ok, "{stderr}");
    let (_, runs) = rig.api("GET", "/api/v1/bench/runs", None).await;
    let run = &runs[0];
    assert_eq!(run["kind"], "quality");
    assert_eq!(run["status"], "done");
    assert_eq!(run["spec"]["count"], 10);
    assert_eq!(run["spec"]["seed"], 7);
    assert_eq!(run["quality"]["answered"], 10);
    assert_eq!(run["quality"]["graded"], 10);
    assert_eq!(run["quality"]["errors"], 0);
    assert_eq!(run["runs_done"], 10);
    let id = run["id"].as_i64().expect("id");
    let (_, detail) = rig
        .api("GET", &format!("/api/v1/bench/runs/{id}"), None)
        .await;
    let answer = &detail["answers"][0];
    assert_eq!(answer["id"], "arithmetic-1");
    assert!(
        answer["question"]
            .as_str()
            .is_some_and(|q| q.starts_with("What is")),
        "{answer}"
    );
    assert_eq!(answer["truncated"], true, "{answer}");
    assert_eq!(answer["output_tokens"], 24, "{answer}");
    let (ok, md, _) = rig
        .cli(&["bench", "--show", &id.to_string(), "--format", "md"])
        .await;
    assert!(ok);
    assert!(
        md.contains(
            "Quality probe (10 generated questions, seed 7), at temperature 0: passed 0 of 10"
        ),
        "{md}"
    );

    // The same seed again asks the same questions: compared question by question, nothing
    // tells the two apart.
    let (ok, _, stderr) = rig.cli(&probe).await;
    assert!(ok, "{stderr}");
    let (_, runs) = rig.api("GET", "/api/v1/bench/runs", None).await;
    let again = runs[0]["id"].as_i64().expect("id");
    let (ok, out, stderr) = rig
        .cli(&["bench", "--compare", &format!("{id},{again}")])
        .await;
    assert!(ok, "{stderr}");
    assert!(out.contains("10 shared questions"), "{out}");
    assert!(out.contains("not distinguishable (p = 1)"), "{out}");
    // Another seed asks other questions: refused, saying why.
    let (ok, _, stderr) = rig
        .cli(&[
            "bench",
            "tiny",
            "--quality",
            "--max-tokens",
            "16",
            "--count",
            "5",
            "--seed",
            "8",
        ])
        .await;
    assert!(ok, "{stderr}");
    let (_, runs) = rig.api("GET", "/api/v1/bench/runs", None).await;
    let other_seed = runs[0]["id"].as_i64().expect("id");
    let (status, refused) = rig
        .api(
            "GET",
            &format!("/api/v1/bench/compare-probes?base={id}&other={other_seed}"),
            None,
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .expect("message")
            .contains("asked different questions"),
        "{refused}"
    );
}

/// An endpoint that answers "Answer: 0" and fails every third request with 503.
async fn endpoint_failing_every_third_request() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    let count = std::sync::Arc::new(AtomicU32::new(0));
    let answer = move || {
        let count = count.clone();
        async move {
            if count.fetch_add(1, Ordering::SeqCst) % 3 == 2 {
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": {"message": "loading"}})),
                );
            }
            let reply = json!({"choices": [{"message": {"content": "Answer: 0"}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 3}});
            (axum::http::StatusCode::OK, axum::Json(reply))
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// Failed requests are counted apart from wrong answers: the pass rate is of the graded replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_failed_requests_are_counted_apart_not_as_wrong() {
    let t = support::TestServer::start("2x5060ti.json").await;
    let url = endpoint_failing_every_third_request().await;
    let (status, run) = t
        .post_json(
            "/api/v1/bench/runs",
            &json!({"kind": "quality", "target": {"kind": "url", "url": url, "model": "m"},
                "probe": {"count": 9, "concurrency": 1}}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_i64().expect("id");
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let run = t.get_json(&format!("/api/v1/bench/runs/{id}")).await;
        if run["status"] != "running" {
            break run;
        }
        assert!(Instant::now() < deadline, "{run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run["status"], "done", "{run}");
    let quality = &run["quality"];
    assert_eq!(quality["answered"], 9, "{quality}");
    assert_eq!(quality["errors"], 3, "{quality}");
    assert_eq!(quality["graded"], 6, "{quality}");
    let passed = quality["passed"].as_u64().expect("passed");
    assert_eq!(
        quality["pass_rate"].as_f64(),
        Some(passed as f64 / 6.0),
        "{quality}"
    );
    let failed: Vec<&Value> = run["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .filter(|a| a["error"].is_string())
        .collect();
    assert_eq!(failed.len(), 3);
    assert!(failed.iter().all(|a| a["pass"] == false), "{failed:?}");
    assert!(
        failed[0]["error"].as_str().expect("error").contains("503"),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_bench_runs_with_the_profiles_flags_and_is_stored_like_a_benchmark() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "tiny",
        json!({"placement": {"context": 2048, "threads": 1, "ubatch": 64}}),
    )
    .await;
    let body = |target: Value| {
        json!({"target": target, "kind": "llama_bench",
            "llama_bench": {"prompt_tokens": [16], "gen_tokens": [8], "depths": [0, 16], "repetitions": 2}})
    };
    // Only a profile's model and flags can be measured this way.
    let (status, refused) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(body(json!({"kind": "gateway", "model": "tiny"}))),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("pick a profile"));

    let id = start(&rig, body(json!({"kind": "profile", "name": "tiny"}))).await;
    let run = ended(&rig, id).await;
    assert_eq!(run["status"], "done", "{}", run["error"]);
    assert_eq!(run["kind"], "llama_bench");
    assert_eq!(
        (run["runs_done"].as_u64(), run["runs_total"].as_u64()),
        (Some(4), Some(4))
    );
    let tests = run["tests"].as_array().expect("tests");
    let labels: Vec<&str> = tests.iter().filter_map(|t| t["test"].as_str()).collect();
    assert_eq!(labels, ["pp16 @ d0", "tg8 @ d0", "pp16 @ d16", "tg8 @ d16"]);
    for t in tests {
        assert!(t["avg_ts"].as_f64().expect("tok/s") > 0.0, "{t}");
        assert_eq!(t["samples_ts"].as_array().map(Vec::len), Some(2), "{t}");
        // The profile's flags reached llama-bench.
        assert_eq!(
            (t["n_ubatch"].as_u64(), t["n_threads"].as_u64()),
            (Some(64), Some(1)),
            "{t}"
        );
    }
    let llama_bench = &run["context"]["llama_bench"];
    let command = llama_bench["command_line"].as_str().expect("command line");
    assert!(
        command.contains("llama-bench") && command.contains("-ub 64"),
        "{command}"
    );
    let dropped: Vec<&str> = llama_bench["dropped"]
        .as_array()
        .expect("dropped")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(dropped.iter().any(|d| d.starts_with("-c")), "{dropped:?}");
    assert!(run["context"]["hardware_before"]["gpus"].is_array());

    let (ok, csv, _) = rig
        .cli(&["bench", "--show", &id.to_string(), "--format", "csv"])
        .await;
    assert!(ok);
    assert_eq!(csv.lines().count(), 1 + 4 * 2, "{csv}");
    let (ok, table, stderr) = rig
        .cli(&[
            "bench",
            "tiny",
            "--llama-bench",
            "--pp",
            "16",
            "--tg",
            "8",
            "--repetitions",
            "2",
        ])
        .await;
    assert!(ok, "{stderr}");
    assert!(
        table.contains("pp16 @ d0") && table.contains("tg8 @ d0"),
        "{table}"
    );

    // A running instance would share the memory and cores with llama-bench: refused.
    rig.run("tiny").await;
    let (status, refused) = rig
        .api(
            "POST",
            "/api/v1/bench/runs",
            Some(body(json!({"kind": "profile", "name": "tiny"}))),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("is running"));
}

/// An OpenAI-compatible endpoint that takes requests and never answers them.
async fn endpoint_that_never_answers() -> String {
    async fn hold() -> &'static str {
        std::future::pending::<()>().await;
        ""
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(hold));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_benchmark_cancels_it_and_deletes_it() {
    let t = support::TestServer::start("2x5060ti.json").await;
    let url = endpoint_that_never_answers().await;
    let (status, run) = t
        .post_json(
            "/api/v1/bench/runs",
            &json!({"target": {"kind": "url", "url": url, "model": "m"},
                "spec": {"warm_runs": 1, "request_timeout_s": 600,
                    "shapes": [{"prompt_tokens": 8, "output_tokens": 4}]}}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "running");
    let path = format!("/api/v1/bench/runs/{}", run["id"]);
    let deleted = t
        .client
        .delete(t.url(&path))
        .bearer_auth(t.server.token())
        .send()
        .await
        .unwrap();
    let status = deleted.status();
    assert_eq!(status, 204, "{}", deleted.text().await.unwrap());
    let gone = t
        .client
        .get(t.url(&path))
        .bearer_auth(t.server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let listed = t.get_json("/api/v1/bench/runs").await;
    assert_eq!(listed, json!([]), "nothing of the run is left");
}
