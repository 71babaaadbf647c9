//! One endpoint for the fleet, with three real `rigdeck serve` daemons on loopback: a desk
//! paired with two rigs, one of which runs the real llama-server on the tiny model on request.
//! The desk's `/v1/models` lists the rig's model with the rig it belongs to; a streamed chat
//! completion with the desk's key reaches it over the pinned channel (the rig starts it on
//! request), arrives as a stream and is recorded on the desk with the rig that answered; a rig
//! killed mid-stream ends the stream with an error event naming it, its model drops out of the
//! list within seconds, and a request for it is a 503 that names the rig and the way it fails.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::daemon_process::{free_port, Daemon};

/// One daemon: its folder, its ports and its token.
struct Member {
    name: String,
    dir: PathBuf,
    api_port: u16,
    fleet_port: u16,
    daemon: Option<Daemon>,
    token: String,
    http: reqwest::Client,
}

impl Member {
    fn new(root: &Path, name: &str) -> Self {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("config/fleet")).unwrap();
        std::fs::write(dir.join("config/fleet/name"), format!("{name}\n")).unwrap();
        Self {
            name: name.to_owned(),
            dir,
            api_port: free_port(),
            fleet_port: free_port(),
            daemon: None,
            token: String::new(),
            http: reqwest::Client::new(),
        }
    }

    async fn serve(&mut self, rig: &str) {
        let child = support::rigdeck_in(&self.dir)
            .env("RIGDECK_NVML_DOUBLE_RIG", support::fixture(rig))
            .args(["serve", "--bind", &format!("127.0.0.1:{}", self.api_port)])
            .args(["--fleet-bind", &format!("127.0.0.1:{}", self.fleet_port)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rigdeck serve");
        self.daemon = Some(Daemon(child, self.dir.join("data")));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.token = std::fs::read_to_string(self.dir.join("config/token"))
                .unwrap_or_default()
                .trim()
                .to_owned();
            if !self.token.is_empty() && self.call("GET", "/api/v1/fleet", None).await.0 == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "{} did not start", self.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    /// `METHOD path` with `key`: status and JSON (or text).
    async fn call_with(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, self.url(path))
            .timeout(Duration::from_secs(120))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let Ok(response) = request.send().await else {
            return (0, Value::Null);
        };
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_with(&self.token.clone(), method, path, body)
            .await
    }

    async fn pair_with(&self, rig: &Member) {
        let (status, invite) = rig
            .call("POST", "/api/v1/fleet/invites", Some(json!({})))
            .await;
        assert_eq!(status, 201, "{invite}");
        let body = json!({ "code": invite["code"] });
        let (status, joined) = self.call("POST", "/api/v1/fleet/join", Some(body)).await;
        assert_eq!(status, 200, "{joined}");
    }

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

    fn kill(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            daemon.kill_hard();
        }
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
    let mut desk = Member::new(root.path(), "desk");
    let mut tower = Member::new(root.path(), "tower");
    let mut mini = Member::new(root.path(), "mini");
    let build = support::register_llama_server(&tower.dir.join("data")).await;
    let model = support::tiny_runnable(&tower.dir);
    desk.serve("4x3090.json").await;
    tower.serve("2x5060ti.json").await;
    mini.serve("2xgh200.json").await;
    let profile = json!({"name": "tiny-tower", "engine_build_id": build.id, "model": model,
        "restart": {"policy": "never"}, "placement": {"context": 8192, "threads": 1},
        "gateway": {"on_demand": true}});
    let (status, saved) = tower.call("POST", "/api/v1/profiles", Some(profile)).await;
    assert_eq!(status, 201, "{saved}");
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

    // The rig killed mid-stream: the client's stream ends with an error event naming it.
    let answer = chat_stream(&desk, &key, "tiny-tower", 6000).await;
    assert_eq!(answer.status(), 200);
    let mut body = answer.bytes_stream();
    let first = body.next().await.expect("a first chunk").unwrap();
    assert!(!first.is_empty());
    tower.kill();
    let mut rest = String::new();
    let reading = async {
        while let Some(Ok(chunk)) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(20), reading)
        .await
        .expect("the stream ended, not hung");
    let last = data_lines(&rest)
        .last()
        .copied()
        .unwrap_or_default()
        .to_owned();
    assert!(
        last.contains("error") && last.contains("rig 'tower'"),
        "{rest}"
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
