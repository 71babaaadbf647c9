//! One endpoint for the fleet, with three real `rigdeck serve` daemons on loopback: a desk
//! paired with two rigs that run the real llama-server on the tiny model on request. The desk's
//! `/v1/models` lists each rig's models with the rig they belong to (`rig/model` for a name both
//! have); a streamed chat completion with the desk's key reaches the rig over the pinned channel
//! (the rig starts the model on request), arrives as a stream and is recorded on the desk with
//! the rig that answered; Anthropic's route goes the same way, and the official `openai` SDK
//! streams through the desk too (where the SDK tests' virtual environment exists). A rig frozen or killed mid-stream ends the stream with an
//! error event naming it; a killed rig's models drop out of the list within seconds, and a
//! request for one is a 503 that names the rig and the way it fails.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::fleet_member::Member;

impl Member {
    async fn key(&self, name: &str) -> String {
        let (status, created) = self
            .call("POST", "/api/v1/keys", Some(json!({"name": name})))
            .await;
        assert_eq!(status, 201, "{created}");
        created["secret"].as_str().unwrap().to_owned()
    }

    /// `/v1/models` with `key` once `check` holds for it (within `within`).
    async fn models_when(
        &self,
        key: &str,
        within: Duration,
        check: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let (status, list) = self.call_with(key, "GET", "/v1/models", None).await;
            assert_eq!(status, 200, "{list}");
            let data = list["data"].as_array().cloned().unwrap_or_default();
            if check(&data) {
                return data;
            }
            assert!(
                Instant::now() < deadline,
                "/v1/models never matched: {list:#}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn instance_phase(&self, name: &str) -> Value {
        let (_, all) = self.call("GET", "/api/v1/instances", None).await;
        all.as_array()
            .and_then(|all| all.iter().find(|v| v["name"] == name))
            .map_or(Value::Null, |v| v["phase"].clone())
    }
}

fn lists(data: &[Value], id: &str) -> bool {
    data.iter().any(|m| m["id"] == id)
}

/// A streamed chat completion on the desk: the response, once its head arrived.
async fn chat_stream(desk: &Member, key: &str, model: &str, max_tokens: u32) -> reqwest::Response {
    let body = json!({
        "model": model,
        "stream": true,
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "messages": [{"role": "user", "content": "Say hello."}],
    });
    desk.http
        .post(desk.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("the desk answers")
}

/// The rest of a stream whose rig is made to fail by `fail` after its first chunk: the last
/// data line, which must come within 20 s.
async fn last_event_after(answer: reqwest::Response, fail: impl FnOnce()) -> String {
    assert_eq!(answer.status(), 200);
    let mut body = answer.bytes_stream();
    let first = body.next().await.expect("a first chunk").unwrap();
    assert!(!first.is_empty());
    fail();
    let mut rest = String::new();
    let reading = async {
        while let Some(Ok(chunk)) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(20), reading)
        .await
        .expect("the stream ended, not hung");
    data_lines(&rest)
        .last()
        .copied()
        .unwrap_or_default()
        .to_owned()
}

/// The official `openai` SDK's streamed chat completion through the desk, when the SDK tests'
/// virtual environment is there (`None`, said, otherwise): the text it received.
async fn openai_sdk_stream(desk: &Member, key: &str, model: &str) -> Option<String> {
    let cache = std::env::var_os("RIGDECK_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rigdeck")))?;
    let python = cache.join("venvs/sdk/bin/python");
    if !python.exists() {
        eprintln!(
            "skipped the openai SDK call: no {} (run `make test-sdk` once)",
            python.display()
        );
        return None;
    }
    let script = r#"
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
stream = client.chat.completions.create(model=sys.argv[3], stream=True, max_tokens=8,
    messages=[{"role": "user", "content": "Say hello."}])
print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
"#;
    let mut command = std::process::Command::new(python);
    command.args(["-c", script, &desk.url("/v1"), key, model]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "the openai SDK failed: {stderr}");
    Some(stdout)
}

/// The data lines of a whole event stream.
fn data_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_desks_gateway_serves_a_rigs_model_and_says_when_the_rig_is_gone() {
    let root = tempfile::Builder::new()
        .prefix("rigdeck-fleet-gateway")
        .tempdir()
        .unwrap();
    let mut desk = Member::new(root.path(), "desk", "4x3090.json");
    let mut tower = Member::new(root.path(), "tower", "2x5060ti.json");
    let mut mini = Member::new(root.path(), "mini", "2xgh200.json");
    let build = support::register_llama_server(&tower.dir.join("data")).await;
    let model = support::tiny_runnable(&tower.dir);
    let mini_build = support::register_llama_server(&mini.dir.join("data")).await;
    let mini_model = support::tiny_runnable(&mini.dir);
    desk.serve().await;
    tower.serve().await;
    mini.serve().await;
    for (rig, name, build, model) in [
        (&tower, "tiny-tower", build.id, &model),
        (&tower, "tiny-shared", build.id, &model),
        (&mini, "tiny-shared", mini_build.id, &mini_model),
    ] {
        let profile = json!({"name": name, "engine_build_id": build, "model": model,
            "restart": {"policy": "never"}, "placement": {"context": 8192, "threads": 1},
            "gateway": {"on_demand": true}});
        let (status, saved) = rig.call("POST", "/api/v1/profiles", Some(profile)).await;
        assert_eq!(status, 201, "{saved}");
    }
    desk.pair_with(&tower).await;
    desk.pair_with(&mini).await;
    let key = desk.key("laptop").await;

    // The desk's list: the rig's model under its own name, saying which rig.
    let data = desk
        .models_when(&key, Duration::from_secs(20), |d| lists(d, "tiny-tower"))
        .await;
    let entry = data.iter().find(|m| m["id"] == "tiny-tower").unwrap();
    assert_eq!(entry["owned_by"], "tower", "{entry}");
    assert_eq!(entry["rig"], "tower", "{entry}");
    assert_eq!(entry["status"]["value"], "stopped", "{entry}");
    // A name both rigs have is listed once per rig, as rig/model.
    let data = desk
        .models_when(&key, Duration::from_secs(10), |d| {
            lists(d, "mini/tiny-shared")
        })
        .await;
    assert!(lists(&data, "tower/tiny-shared"), "{data:?}");
    assert!(!lists(&data, "tiny-shared"), "{data:?}");

    // The desk's keys guard it: none, or a rig's own key, is refused.
    let (status, _) = desk.call_with("rdk-nope", "GET", "/v1/models", None).await;
    assert_eq!(status, 401);

    // A streamed completion through the desk: the rig starts the model on request.
    assert_eq!(tower.instance_phase("tiny-tower").await, Value::Null);
    let answer = chat_stream(&desk, &key, "tiny-tower", 16).await;
    assert_eq!(answer.status(), 200);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let text = answer.text().await.unwrap();
    let lines = data_lines(&text);
    assert_eq!(lines.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["delta"]["content"].is_string()),
        "no content came: {text}"
    );
    assert!(
        chunks.iter().all(|c| c["usage"].is_null() || c["choices"].as_array().is_some_and(|a| !a.is_empty())),
        "the usage chunk the desk asked for reached the client: {text}"
    );
    assert_eq!(tower.instance_phase("tiny-tower").await, "ready");

    // Usage on the desk names the rig; the rig's own names the desk as the caller.
    let (status, usage) = desk.call("GET", "/api/v1/gateway/usage", None).await;
    assert_eq!(status, 200, "{usage}");
    let record = &usage["recent"][0];
    assert_eq!(record["model"], "tiny-tower", "{usage:#}");
    assert_eq!(record["rig"], "tower", "{usage:#}");
    assert_eq!(record["key_name"], "laptop", "{usage:#}");
    assert_eq!(record["status"], "ok", "{usage:#}");
    assert_eq!(record["completion_tokens"], 16, "{usage:#}");
    let (_, on_tower) = tower.call("GET", "/api/v1/gateway/usage", None).await;
    assert_eq!(
        on_tower["recent"][0]["key_name"], "fleet desk",
        "{on_tower:#}"
    );
    assert!(on_tower["recent"][0]["rig"].is_null(), "{on_tower:#}");

    // The official SDK through the desk, to the rig/model name: the other rig answers.
    if let Some(text) = openai_sdk_stream(&desk, &key, "mini/tiny-shared").await {
        assert!(!text.trim().is_empty(), "the SDK received no text");
        let (_, usage) = desk.call("GET", "/api/v1/gateway/usage", None).await;
        let record = &usage["recent"][0];
        assert_eq!(record["model"], "mini/tiny-shared", "{usage:#}");
        assert_eq!(record["rig"], "mini", "{usage:#}");
        assert_eq!(record["status"], "ok", "{usage:#}");
        assert_eq!(mini.instance_phase("tiny-shared").await, "ready");
        assert_eq!(tower.instance_phase("tiny-shared").await, Value::Null);
    }

    // Anthropic's route, whole, to the rig's model that is running now.
    let body = json!({"model": "tiny-tower", "max_tokens": 4,
        "messages": [{"role": "user", "content": "Say hello."}]});
    let (status, message) = desk
        .call_with(&key, "POST", "/v1/messages", Some(body))
        .await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["type"], "message", "{message}");
    let (_, usage) = desk.call("GET", "/api/v1/gateway/usage", None).await;
    assert_eq!(usage["recent"][0]["route"], "messages", "{usage:#}");
    assert_eq!(usage["recent"][0]["rig"], "tower", "{usage:#}");

    // A model no daemon has: not found, naming what there is.
    let (status, missing) = desk
        .call_with(
            &key,
            "POST",
            "/v1/chat/completions",
            Some(json!({"model": "nope", "messages": []})),
        )
        .await;
    assert_eq!(status, 404, "{missing}");

    // The rig frozen mid-stream (it sends nothing, and no error either): once the desk's
    // watch finds it unreachable the stream ends with an error event naming it.
    let answer = chat_stream(&desk, &key, "tiny-tower", 6000).await;
    let last = last_event_after(answer, || tower.signal("-STOP")).await;
    assert!(
        last.contains("error") && last.contains("rig 'tower'"),
        "{last}"
    );
    tower.signal("-CONT");
    desk.models_when(&key, Duration::from_secs(10), |d| lists(d, "tiny-tower"))
        .await;

    // The rig killed mid-stream: the client's stream ends with an error event naming it.
    let answer = chat_stream(&desk, &key, "tiny-tower", 6000).await;
    let last = last_event_after(answer, || tower.kill()).await;
    assert!(
        last.contains("error") && last.contains("rig 'tower'"),
        "{last}"
    );

    // The list drops the rig's model within seconds; a request for it is a 503 naming it.
    let gone = Instant::now();
    desk.models_when(&key, Duration::from_secs(6), |d| !lists(d, "tiny-tower"))
        .await;
    assert!(gone.elapsed() < Duration::from_secs(6));
    let (status, refused) = desk
        .call_with(
            &key,
            "POST",
            "/v1/chat/completions",
            Some(json!({"model": "tiny-tower", "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    assert_eq!(status, 503, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("rig 'tower'"), "{message}");
    assert!(message.contains("cannot reach"), "{message}");
    let (_, usage) = desk.call("GET", "/api/v1/gateway/usage", None).await;
    assert_eq!(usage["recent"][0]["http_status"], 503, "{usage:#}");
    mini.kill();
    desk.kill();
}
