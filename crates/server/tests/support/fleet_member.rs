//! One daemon of a test fleet: a real `rigdeck serve` with its own folder, NVML test-double rig,
//! API and fleet ports and token; started, signalled, killed, called, and paired with another.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::daemon_process::{free_port, Daemon};

pub struct Member {
    pub name: String,
    pub dir: PathBuf,
    /// The NVML double's rig fixture it plays.
    pub rig: String,
    pub api_port: u16,
    pub fleet_port: u16,
    pub daemon: Option<Daemon>,
    pub token: String,
    pub http: reqwest::Client,
}

impl Member {
    /// Its folder (named `name` under `root`, the fleet name set) and ports; not started.
    pub fn new(root: &Path, name: &str, rig: &str) -> Self {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("config/fleet")).unwrap();
        std::fs::write(dir.join("config/fleet/name"), format!("{name}\n")).unwrap();
        Self {
            name: name.to_owned(),
            dir,
            rig: rig.to_owned(),
            api_port: free_port(),
            fleet_port: free_port(),
            daemon: None,
            token: String::new(),
            http: reqwest::Client::new(),
        }
    }

    pub async fn start(root: &Path, name: &str, rig: &str) -> Self {
        let mut member = Self::new(root, name, rig);
        member.serve().await;
        member
    }

    /// Starts (or starts again) its daemon and waits until its API answers.
    pub async fn serve(&mut self) {
        let child = super::rigdeck_in(&self.dir)
            .env("RIGDECK_NVML_DOUBLE_RIG", super::fixture(&self.rig))
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

    pub fn kill(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            daemon.kill_hard();
        }
    }

    /// `kill -STOP`, `-CONT` …: the daemon frozen or thawed.
    pub fn signal(&self, which: &str) {
        let pid = self.daemon.as_ref().expect("running").0.id().to_string();
        let status = std::process::Command::new("kill")
            .args([which, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    pub fn request(&self, method: &str, path: &str) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        self.http
            .request(method, self.url(path))
            .timeout(Duration::from_secs(120))
    }

    /// `METHOD path` with `key`: status and JSON (or text); status 0 when nothing answered.
    pub async fn call_with(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.request(method, path).bearer_auth(key);
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

    /// The same with this daemon's own token.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_with(&self.token, method, path, body).await
    }

    /// Joins `rig` with a code it makes: this daemon becomes its desk.
    pub async fn pair_with(&self, rig: &Member) {
        let (status, invite) = rig
            .call("POST", "/api/v1/fleet/invites", Some(json!({})))
            .await;
        assert_eq!(status, 201, "{invite}");
        let body = json!({ "code": invite["code"] });
        let (status, joined) = self.call("POST", "/api/v1/fleet/join", Some(body)).await;
        assert_eq!(status, 200, "{joined}");
    }

    /// Waits until its gang `name` passes `check`; the gang's status.
    pub async fn gang_when(
        &self,
        name: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (status, gang) = self
                .call("GET", &format!("/api/v1/gangs/{name}"), None)
                .await;
            assert_eq!(status, 200, "{gang}");
            if check(&gang) {
                return gang;
            }
            assert!(
                Instant::now() < deadline,
                "the gang never got there: {gang:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
