//! The figures of an abuse run against a real `rigdeck serve` (benchmarks, not run by `make
//! test`: `make bench-abuse`): the admin API's latency while 1 100 idle connections are open,
//! `/metrics` before and after 10 000 requests naming models that do not exist, and the same
//! profile started twice at once, 200 times, against the port its engine really listens on.
//! Each prints its figures and holds its target.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::daemon_process::{self, Daemon};

struct Abused {
    daemon: Daemon,
    dir: tempfile::TempDir,
    port: u16,
    token: String,
    client: reqwest::Client,
}

impl Abused {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = daemon_process::free_port();
        let daemon = daemon_process::serve(dir.path(), port).await;
        let token = std::fs::read_to_string(dir.path().join("config/token"))
            .expect("token")
            .trim()
            .to_owned();
        Self {
            daemon,
            dir,
            port,
            token,
            client: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn api(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .expect("the daemon answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn key(&self) -> String {
        let (_, created) = self
            .api(
                reqwest::Method::POST,
                "/api/v1/keys",
                json!({"name": "abuse"}),
            )
            .await;
        created["secret"].as_str().expect("a key").to_owned()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-abuse"]
async fn the_admin_api_keeps_answering_while_1100_idle_connections_are_open() {
    support::raise_own_descriptor_limit();
    let abused = Abused::start().await;
    let mut idle = Vec::new();
    for _ in 0..1_100 {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", abused.port))
                .await
                .expect("an idle connection"),
        );
    }
    // New connections each time: the one request a client makes when it finds the daemon.
    let mut took = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let client = reqwest::Client::new();
        let status = client
            .get(abused.url("/api/v1/status"))
            .bearer_auth(&abused.token)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("the admin API answers")
            .status();
        assert_eq!(status.as_u16(), 200);
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.sort_by(f64::total_cmp);
    eprintln!(
        "admin API with 1 100 idle connections open: median {:.2} ms, p95 {:.2} ms, max {:.2} ms (50 requests)",
        percentile(&took, 0.5),
        percentile(&took, 0.95),
        took[took.len() - 1]
    );
    assert!(percentile(&took, 0.5) < 100.0, "target: within 100 ms");
    drop(idle);
    drop(abused.daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-abuse"]
async fn metrics_do_not_grow_with_made_up_model_names() {
    let abused = Abused::start().await;
    let key = abused.key().await;
    let scrape = || async {
        abused
            .client
            .get(abused.url("/metrics"))
            .bearer_auth(&key)
            .send()
            .await
            .expect("/metrics")
            .text()
            .await
            .expect("/metrics text")
    };
    let ask = |i: usize| {
        let client = abused.client.clone();
        let (url, key) = (abused.url("/v1/chat/completions"), key.clone());
        async move {
            let body = json!({"model": format!("no-such-model-{i}"), "messages": []});
            let answer = client
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .expect("the gateway answers");
            assert_eq!(answer.status().as_u16(), 404);
        }
    };
    // One made-up name first, so the `unknown` label exists in both scrapes.
    ask(0).await;
    let before = scrape().await;
    futures_util::stream::iter(1..=10_000)
        .map(ask)
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let after = scrape().await;
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let unknown = |text: &str| text.matches(r#"model="unknown""#).count();
    eprintln!(
        "/metrics before 10 000 made-up model names: {} series, {} bytes; after: {} series, {} bytes",
        series(&before),
        before.len(),
        series(&after),
        after.len()
    );
    assert_eq!(series(&before), series(&after), "target: unchanged");
    assert_eq!(unknown(&before), unknown(&after));
    drop(abused.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-abuse"]
async fn two_starts_at_once_200_times_leave_no_inconsistent_instance() {
    let abused = Abused::start().await;
    let build = support::register_llama_server(&abused.dir.path().join("data")).await;
    let model = support::tiny_runnable(abused.dir.path());
    let profile = json!({"name": "twice", "engine_build_id": build.id, "model": model,
        "restart": {"policy": "never"}, "placement": {"context": 512, "threads": 1}});
    let (status, created) = abused
        .api(reqwest::Method::POST, "/api/v1/profiles", profile)
        .await;
    assert_eq!(status, 201, "{created}");
    let start = || {
        abused.api(
            reqwest::Method::POST,
            "/api/v1/profiles/twice/start",
            json!({}),
        )
    };
    let mut inconsistent = Vec::new();
    let started = Instant::now();
    for round in 0..200 {
        let (first, second) = tokio::join!(start(), start());
        let oks = [first.0, second.0].iter().filter(|s| **s == 200).count();
        let view = loop {
            let (_, all) = abused
                .api(reqwest::Method::GET, "/api/v1/instances", json!({}))
                .await;
            let view = all
                .as_array()
                .and_then(|a| a.iter().find(|v| v["name"] == "twice").cloned())
                .unwrap_or(Value::Null);
            if view["phase"] != "starting" && view["phase"] != "loading" {
                break view;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let port = view["port"].as_u64().and_then(|p| u16::try_from(p).ok());
        let pid = view["pid"].as_i64();
        let listening = port.map(support::listeners_on).unwrap_or_default();
        let consistent =
            oks == 1 && view["phase"] == "ready" && pid.is_some_and(|pid| listening.contains(&pid));
        if !consistent {
            inconsistent.push(format!(
                "round {round}: starts {} and {}, shown {} on port {port:?} (pid {pid:?}), listening there {listening:?}",
                first.0, second.0, view["phase"]
            ));
        }
        abused
            .api(
                reqwest::Method::POST,
                "/api/v1/instances/twice/stop",
                json!({}),
            )
            .await;
    }
    eprintln!(
        "two starts at once, 200 times in {:.0} s: {} inconsistent instance(s)",
        started.elapsed().as_secs_f64(),
        inconsistent.len()
    );
    assert!(
        inconsistent.is_empty(),
        "target 0:\n{}",
        inconsistent.join("\n")
    );
}
