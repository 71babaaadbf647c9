//! The engines beyond the bundled llama.cpp, through the daemon's API: ik_llama.cpp built from its
//! own pinned source (the real CPU build, cached like llama.cpp's) serving the tiny model through
//! a profile; speculative decoding as a profile setting — n-gram lookup on the real llama-server
//! with its draft counters read back by the instance view, and a stand-in vLLM whose Prometheus
//! counters the same view reads — and the refusals at save time.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rigdeck_core::engines::cmake_build::{self, BuildRequest};
use rigdeck_core::engines::registry::{self, EngineBuild};
use rigdeck_core::engines::source::{self, SourceSpec};
use rigdeck_core::engines::{Backend, EngineKind};
use serde_json::{json, Value};
use support::engine_rig::Rig;

/// ik_llama.cpp from the pinned `ik-llama-cpp-python` sdist, built once into the cache (about
/// half an hour on two cores the first time), registered in the rig's database.
async fn register_ik_llama(rig: &Rig) -> EngineBuild {
    let cache = source::cache_root().expect("a cache folder");
    let request = BuildRequest {
        kind: EngineKind::IkLlamaCpp,
        source: SourceSpec::pinned(EngineKind::IkLlamaCpp, None).expect("a pinned source"),
        ..BuildRequest::bundled(Backend::Cpu, cache.join("engines"), cache.clone())
    };
    let built = cmake_build::build(&request, &|_| {})
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    register(rig, &built.llama_server, EngineKind::IkLlamaCpp).await
}

/// Registers an engine in the rig's database, as `rigdeck engines register` does.
async fn register(rig: &Rig, path: &Path, kind: EngineKind) -> EngineBuild {
    let store = rigdeck_core::store::Store::open(&rig.t.dir.path().join("data/rigdeck.db"))
        .await
        .expect("the daemon's database");
    let build = registry::register_path(&store, path, Some(kind), None, 0)
        .await
        .unwrap_or_else(|err| panic!("{} registers: {err}", path.display()));
    store.close().await;
    build
}

/// A chat completion straight to the engine, its output held to words by a grammar (the tiny
/// model's weights are random, and ik_llama.cpp refuses to send broken UTF-8).
async fn chat(port: u64, prompt: &str, grammar: &str, max_tokens: u32) -> Value {
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "grammar": grammar}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("the engine answers");
    let status = response.status();
    let body: Value = response.json().await.expect("JSON");
    assert!(status.is_success(), "{status}: {body}");
    body
}

async fn save_profile(rig: &Rig, body: Value) -> (u16, Value) {
    rig.api("POST", "/api/v1/profiles", Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ik_llama_cpp_from_its_pinned_source_serves_the_tiny_model_through_a_profile() {
    let rig = Rig::start("2x5060ti.json").await;
    let ik = register_ik_llama(&rig).await;
    assert_eq!(ik.kind, EngineKind::IkLlamaCpp);
    let f = &ik.capabilities.features;
    assert!(
        f.mla && f.attn_max_batch && f.run_time_repack && f.fused_moe,
        "ik_llama.cpp's own options detected: {f:?}"
    );
    assert!(
        ik.capabilities.version_label().contains("py0.1.5"),
        "{:?}",
        ik.capabilities
    );

    // Its own knobs are settings on it, refused on llama.cpp (and llama.cpp's on it).
    let base = json!({"model": rig.model, "restart": {"policy": "never"},
        "placement": {"context": 2048, "threads": 1}});
    let mut on_llama = base.clone();
    on_llama["name"] = json!("upstream");
    on_llama["engine_build_id"] = json!(rig.build.id);
    on_llama["engine"] = json!({"attn_max_batch_mib": 256});
    let (status, refused) = save_profile(&rig, on_llama).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("attn_max_batch_mib needs `-amb`")),
        "{refused}"
    );
    let mut reverse = base.clone();
    reverse["name"] = json!("ik-wrong");
    reverse["engine_build_id"] = json!(ik.id);
    reverse["extra_args"] = json!(["--load-mode", "mmap"]);
    let (status, refused) = save_profile(&rig, reverse).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("'--load-mode'")),
        "{refused}"
    );

    let mut profile = base.clone();
    profile["name"] = json!("ik");
    profile["engine_build_id"] = json!(ik.id);
    profile["engine"] = json!({"attn_max_batch_mib": 256, "mla": 3});
    let (status, saved) = save_profile(&rig, profile).await;
    assert_eq!(status, 201, "{saved}");
    let view = rig.run("ik").await;
    let argv: Vec<&str> = view["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        argv[0].ends_with("ik_llama.cpp-py0.1.5-cpu/bin/llama-server"),
        "{argv:?}"
    );
    assert!(argv.windows(2).any(|w| w == ["-amb", "256"]), "{argv:?}");
    let port = view["port"].as_u64().expect("a port");
    let reply = chat(port, "Say hello.", "root ::= [a-z ]+", 12).await;
    let text = reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("");
    assert!(!text.trim().is_empty(), "{reply}");
    assert!(
        reply["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 0,
        "{reply}"
    );
    let (status, _) = rig.api("POST", "/api/v1/instances/ik/stop", None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngram_speculation_on_llama_server_reports_its_drafts_on_the_instance() {
    let rig = Rig::start("2x5060ti.json").await;
    // A method this build lacks is refused when saved, with what it offers.
    let (status, refused) = save_profile(
        &rig,
        json!({"name": "eagle", "engine_build_id": rig.build.id, "model": rig.model,
            "speculative": {"method": "eagle", "tokens": 3, "draft_model": rig.model}}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap_or("");
    assert!(
        message.contains("speculative method eagle") && message.contains("ngram-mod"),
        "{refused}"
    );

    rig.profile(
        "lookup",
        json!({"extra_args": [], "speculative": {"method": "ngram", "tokens": 8, "ngram_match": 4}}),
    )
    .await;
    let view = rig.run("lookup").await;
    let line = view["command_line"].as_str().unwrap_or("");
    assert!(
        line.contains("--spec-type ngram-mod --spec-ngram-mod-n-max 8 --spec-ngram-mod-n-min 1 --spec-ngram-mod-n-match 4 --metrics"),
        "{line}"
    );
    // Before any request: counters readable, nothing drafted.
    let (status, before) = rig
        .api("GET", "/api/v1/instances/lookup/speculation", None)
        .await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["available"], true, "{before}");
    assert_eq!(before["drafted"], 0, "{before}");

    // A repetitive prompt and a reply held to the same words: its n-grams are in the prompt.
    let prompt = "one two three ".repeat(60);
    let reply = chat(
        view["port"].as_u64().unwrap(),
        &prompt,
        "root ::= (\"one two three \"){40}",
        120,
    )
    .await;
    let drafted_in_reply = reply["timings"]["draft_n"].as_u64().unwrap_or(0);
    assert!(
        drafted_in_reply > 0,
        "the reply's timings count drafts: {reply}"
    );

    let (_, after) = rig
        .api("GET", "/api/v1/instances/lookup/speculation", None)
        .await;
    let drafted = after["drafted"].as_u64().unwrap();
    let accepted = after["accepted"].as_u64().unwrap();
    assert_eq!(drafted, drafted_in_reply, "{after} vs {reply}");
    assert!(accepted <= drafted, "{after}");
    let rate = after["acceptance_rate"].as_f64().unwrap();
    assert!(
        (rate - accepted as f64 / drafted as f64).abs() < 1e-9,
        "{after}"
    );
    assert!(
        after["mean_accepted_length"].as_f64().unwrap() >= 1.0,
        "{after}"
    );

    let (status, missing) = rig
        .api("GET", "/api/v1/instances/nobody/speculation", None)
        .await;
    assert_eq!(status, 404, "{missing}");
}

/// A virtual environment where `import vllm` works, with vLLM's speculative method list where a
/// real install keeps it, and a `vllm serve` that answers health, models and Prometheus
/// counters (those of a run with MTP drafting) and writes its argv to `argv.json`.
fn stand_in_vllm(dir: &Path) -> PathBuf {
    let (venv, site) = support::stand_in_vllm::venv(dir, "0.33.0");
    std::fs::create_dir_all(site.join("vllm/config")).unwrap();
    std::fs::write(
        site.join("vllm/config/speculative.py"),
        "SpeculativeMethod = Literal[\"ngram\", \"draft_model\", \"eagle3\", \"mtp\"]\n",
    )
    .unwrap();
    let serve = format!(
        r##"import http.server, json, sys
options = sys.argv[3:]
value = lambda flag: options[options.index(flag) + 1]
json.dump(sys.argv, open({argv_file:?}, "w"))
METRICS = b"""# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{model_name="m"}} 40
vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} 80
vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} 60
"""
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {{"/health": b"", "/metrics": METRICS}}.get(self.path, json.dumps({{"data": [{{"id": value("--served-model-name")}}]}}).encode())
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Handler).serve_forever()
"##,
        argv_file = dir.join("argv.json").display().to_string(),
    );
    support::stand_in_vllm::install_program(&venv, &serve);
    venv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_profile_writes_its_speculative_config_and_the_instance_reads_its_counters() {
    let rig = Rig::start("2x5060ti.json").await;
    let work = rig.t.dir.path().join("vllm");
    std::fs::create_dir_all(work.join("model")).unwrap();
    std::fs::write(work.join("model/config.json"), "{}").unwrap();
    let venv = stand_in_vllm(&work);
    let build = register(&rig, &venv, EngineKind::Vllm).await;
    assert_eq!(
        build.capabilities.features.speculative_types,
        ["ngram", "eagle", "eagle3", "draft_model", "mtp"]
            .iter()
            .filter(|m| **m != "eagle")
            .map(|m| m.to_string())
            .collect::<Vec<_>>(),
        "read from the install's own source"
    );
    let id = build.id;
    let base = json!({"engine_build_id": id, "model": work.join("model"),
        "restart": {"policy": "never"}, "gpu_memory_fraction": 0.25,
        "env": {"CUDA_VISIBLE_DEVICES": "0"}});

    let mut eagle = base.clone();
    eagle["name"] = json!("eagle-v1");
    eagle["speculative"] =
        json!({"method": "eagle", "tokens": 3, "draft_model": work.join("model")});
    let (status, refused) = save_profile(&rig, eagle).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("eagle") && m.contains("ngram, eagle3, draft_model, mtp")),
        "{refused}"
    );
    let mut llama_knob = base.clone();
    llama_knob["name"] = json!("locked");
    llama_knob["engine"] = json!({"mlock": true});
    let (status, refused) = save_profile(&rig, llama_knob).await;
    assert_eq!(status, 400, "{refused}");

    let mut profile = base.clone();
    profile["name"] = json!("mtp");
    profile["speculative"] = json!({"method": "mtp", "tokens": 2});
    profile["engine"] =
        json!({"max_num_seqs": 4, "kv_cache_dtype": "fp8", "marlin_atomic_add": true});
    let (status, saved) = save_profile(&rig, profile).await;
    assert_eq!(status, 201, "{saved}");
    rig.run("mtp").await;
    let argv: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(work.join("argv.json")).unwrap()).unwrap();
    let config = argv
        .windows(2)
        .find(|w| w[0] == "--speculative-config")
        .map(|w| w[1].clone())
        .expect("--speculative-config written");
    assert_eq!(config, r#"{"method":"mtp","num_speculative_tokens":2}"#);
    assert!(
        argv.windows(2).any(|w| w == ["--max-num-seqs", "4"]),
        "{argv:?}"
    );
    assert!(
        argv.windows(2).any(|w| w == ["--kv-cache-dtype", "fp8"]),
        "{argv:?}"
    );

    let (status, seen) = rig
        .api("GET", "/api/v1/instances/mtp/speculation", None)
        .await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(
        (
            seen["drafted"].as_u64(),
            seen["accepted"].as_u64(),
            seen["drafts"].as_u64()
        ),
        (Some(80), Some(60), Some(40)),
        "{seen}"
    );
    assert_eq!(seen["acceptance_rate"], 0.75, "{seen}");
    assert_eq!(seen["mean_accepted_length"], 2.5, "{seen}");
    let (status, _) = rig.api("POST", "/api/v1/instances/mtp/stop", None).await;
    assert_eq!(status, 200);
}
