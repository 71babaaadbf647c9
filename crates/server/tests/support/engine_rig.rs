//! A test daemon with the real llama-server (Rigdeck's cached CPU build) registered and the
//! tiny model written: launch profiles, instances, API keys and usage through the API.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rigdeck_core::engines::registry::EngineBuild;
use serde_json::{json, Value};

use super::{register_llama_server, tiny_runnable, TestServer};

pub const READY: Duration = Duration::from_secs(120);

pub struct Rig {
    pub t: TestServer,
    pub build: EngineBuild,
    pub model: PathBuf,
}

impl Rig {
    pub async fn start(fixture: &str) -> Self {
        let t = TestServer::start(fixture).await;
        let build = register_llama_server(&t.dir.path().join("data")).await;
        let model = tiny_runnable(t.dir.path());
        Self { t, build, model }
    }

    pub async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .t
            .client
            .request(method, self.t.url(path))
            .bearer_auth(self.t.server.token());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A quality reference once it is no longer recording (ready or failed).
    #[allow(dead_code)] // not every test binary records references
    pub async fn reference_when_ended(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let (_, all) = self.api("GET", "/api/v1/quality/references", None).await;
            let found = all["references"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["id"] == id))
                .cloned()
                .unwrap_or(Value::Null);
            if found["state"] != "recording" {
                return found;
            }
            assert!(Instant::now() < deadline, "never recorded: {found}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// A profile for the tiny model; `patch` overrides fields.
    pub async fn profile(&self, name: &str, patch: Value) {
        let mut body = json!({"name": name, "engine_build_id": self.build.id, "model": self.model,
            "restart": {"policy": "never"}, "extra_args": ["--metrics"]});
        body["placement"] = json!({"context": 8192, "threads": 1});
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, saved) = self.api("POST", "/api/v1/profiles", Some(body)).await;
        assert_eq!(status, 201, "{saved}");
    }

    pub async fn instance(&self, name: &str) -> Value {
        let (_, all) = self.api("GET", "/api/v1/instances", None).await;
        all.as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub async fn wait_phase(&self, name: &str, phase: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let view = self.instance(name).await;
            if view["phase"] == phase {
                return view;
            }
            assert!(Instant::now() < deadline, "{name} never {phase}: {view}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn run(&self, name: &str) -> Value {
        let (status, view) = self
            .api(
                "POST",
                &format!("/api/v1/profiles/{name}/start"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{view}");
        self.wait_phase(name, "ready", READY).await
    }

    pub async fn key(&self, name: &str) -> (i64, String) {
        let (status, created) = self
            .api("POST", "/api/v1/keys", Some(json!({"name": name})))
            .await;
        assert_eq!(status, 201, "{created}");
        (
            created["key"]["id"].as_i64().unwrap(),
            created["secret"].as_str().unwrap().to_owned(),
        )
    }

    /// POSTs `body` to a gateway route with `key`: the status and the answer (JSON, else text).
    pub async fn call_v1(&self, path: &str, key: &str, body: &Value) -> (u16, Value) {
        let response = self.v1(path, Some(key)).json(body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub fn v1(&self, path: &str, key: Option<&str>) -> reqwest::RequestBuilder {
        let request = self.t.client.post(self.t.url(path));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    pub async fn usage(&self) -> Value {
        let (status, usage) = self.api("GET", "/api/v1/gateway/usage", None).await;
        assert_eq!(status, 200, "{usage}");
        usage
    }

    /// Runs `rigdeck ARGS` against this daemon (its URL and token), off the async workers.
    pub async fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_rigdeck"));
        command
            .args(args)
            .env("RIGDECK_URL", self.t.url(""))
            .env("RIGDECK_CONFIG_DIR", self.t.dir.path().join("config"))
            .env("RIGDECK_DATA_DIR", self.t.dir.path().join("data"));
        let output = tokio::task::spawn_blocking(move || command.output().expect("run rigdeck"))
            .await
            .unwrap();
        let (stdout, stderr) = super::output_text(&output);
        (output.status.success(), stdout, stderr)
    }

    /// A GET with a gateway key, as text (`/metrics`).
    pub async fn text_with(&self, path: &str, key: &str) -> String {
        let response = self.t.client.get(self.t.url(path)).bearer_auth(key).send();
        response.await.unwrap().text().await.unwrap()
    }

    /// Message `message` of a conversation once `done` holds for it (three minutes at most).
    #[allow(dead_code)] // not every test binary chats
    pub async fn message_when(
        &self,
        conversation: i64,
        message: i64,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let path = format!("/api/v1/chat/conversations/{conversation}");
            let (_, c) = self.api("GET", &path, None).await;
            let m = c["messages"]
                .as_array()
                .and_then(|all| all.iter().find(|m| m["id"] == message).cloned())
                .unwrap_or(Value::Null);
            if done(&m) {
                return m;
            }
            assert!(Instant::now() < deadline, "reply {message}: {m}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reply `message` once it is no longer streaming.
    #[allow(dead_code)] // not every test binary chats
    pub async fn reply_ended(&self, conversation: i64, message: i64) -> Value {
        self.message_when(conversation, message, |m| m["status"] != "streaming")
            .await
    }
}
