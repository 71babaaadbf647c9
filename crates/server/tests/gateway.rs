//! The gateway against real llama-server instances (Rigdeck's cached CPU build) serving the tiny
//! model: keys, routing by name and alias, streaming passed through, `/v1/messages`, usage with
//! the engine's counts, on-demand loads (a burst starts one instance), the idle timeout,
//! eviction when another model needs the VRAM (the NVML test double's rig is rewritten to show
//! the engine's memory), a client that leaves, an engine killed mid-stream, and bad requests.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::engine_rig::Rig;

fn chat(model: &str, stream: bool, max_tokens: u32) -> Value {
    json!({"model": model, "stream": stream, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say something."}]})
}

/// A request that keeps generating until the client or the context stops it.
fn endless(model: &str) -> Value {
    let mut body = chat(model, true, 100_000);
    body["ignore_eos"] = json!(true);
    body
}

/// The events of an SSE body, each as its text.
fn events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// A counter from an engine's own Prometheus endpoint.
async fn engine_metric(port: &Value, name: &str) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in the engine's metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_name_and_alias_streams_and_records_the_engines_counts() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "alpha",
        json!({"gateway": {"aliases": ["a", "org/alpha-7b"]}}),
    )
    .await;
    rig.profile("beta", json!({})).await;
    // A name can only point at one model.
    let (status, err) = rig
        .api(
            "POST",
            "/api/v1/profiles",
            Some(json!({"name": "gamma", "engine_build_id": rig.build.id,
            "model": rig.model, "gateway": {"aliases": ["a"]}})),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("'a' already names the gateway model 'alpha'"),
        "{err}"
    );
    let alpha = rig.run("alpha").await;
    let beta = rig.run("beta").await;
    let (key_id, key) = rig.key("aider").await;

    // No key, a wrong key: refused in the caller's dialect.
    let none = rig
        .v1("/v1/chat/completions", None)
        .json(&chat("a", false, 4))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status().as_u16(), 401);
    let body: Value = none.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    let wrong = rig
        .v1("/v1/messages", Some("rdk-nope"))
        .json(&chat("a", false, 4))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown or revoked"));

    // The models list carries names and aliases.
    let models: Value = rig
        .t
        .client
        .get(rig.t.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["alpha", "a", "org/alpha-7b", "beta"]);

    // Streaming through an alias: events arrive as the engine writes them; the usage chunk the
    // gateway asked for is not shown to a client that did not ask.
    let response = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("org/alpha-7b", true, 24))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut chunks = 0;
    let mut text = String::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        chunks += 1;
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let streamed = events(&text);
    assert!(chunks > 3, "the stream came in {chunks} chunk(s)");
    assert_eq!(streamed.last().map(String::as_str), Some("data: [DONE]"));
    assert!(
        !text.contains("\"usage\""),
        "the injected usage chunk leaked: {text}"
    );

    // Non-streaming to the other model, with the engine's own usage.
    let (_, answer) = rig
        .call_v1("/v1/chat/completions", &key, &chat("beta", false, 8))
        .await;
    let engine_usage = answer["usage"].clone();
    assert_eq!(engine_usage["completion_tokens"], 8, "{answer}");

    // Each engine served its own requests.
    assert_eq!(
        engine_metric(&alpha["port"], "llamacpp:requests_processing").await,
        0.0
    );
    assert_eq!(
        engine_metric(&alpha["port"], "llamacpp:tokens_predicted_total").await,
        24.0
    );
    assert_eq!(
        engine_metric(&beta["port"], "llamacpp:tokens_predicted_total").await,
        8.0
    );

    // The other OpenAI routes: completions and responses.
    let (_, completion) = rig
        .call_v1(
            "/v1/completions",
            &key,
            &json!({"model": "beta", "prompt": "Once upon", "max_tokens": 4}),
        )
        .await;
    assert_eq!(completion["usage"]["completion_tokens"], 4, "{completion}");
    let (_, response) = rig
        .call_v1(
            "/v1/responses",
            &key,
            &json!({"model": "beta", "input": "Hello", "max_output_tokens": 4}),
        )
        .await;
    assert_eq!(response["object"], "response", "{response}");

    // Anthropic's routes.
    let message: Value = rig
        .v1("/v1/messages", Some(&key))
        .json(&json!({"model": "a", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}))
        .send().await.unwrap().json().await.unwrap();
    assert_eq!(message["type"], "message", "{message}");
    assert_eq!(message["usage"]["output_tokens"], 5);
    let streamed = rig
        .v1("/v1/messages", Some(&key))
        .header("x-api-key", &key)
        .json(&json!({"model": "a", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}))
        .send().await.unwrap().text().await.unwrap();
    assert!(
        streamed.contains("event: message_start") && streamed.contains("event: message_stop"),
        "{streamed}"
    );
    let (_, count) = rig
        .call_v1(
            "/v1/messages/count_tokens",
            &key,
            &json!({"model": "a", "messages": [{"role": "user", "content": "Hello there"}]}),
        )
        .await;
    assert!(count["input_tokens"].as_u64().unwrap() > 0, "{count}");

    // Usage: every request, with the engine's counts and the key's name.
    let usage = rig.usage().await;
    let recent = usage["recent"].as_array().unwrap();
    let beta_row = recent
        .iter()
        .find(|r| r["model"] == "beta" && r["route"] == "chat.completions")
        .expect("beta recorded");
    assert_eq!(beta_row["key_name"], "aider");
    assert_eq!(beta_row["status"], "ok");
    assert_eq!(beta_row["prompt_tokens"], engine_usage["prompt_tokens"]);
    assert_eq!(beta_row["completion_tokens"], 8);
    let stream_row = recent
        .iter()
        .find(|r| r["model"] == "alpha" && r["route"] == "chat.completions")
        .unwrap();
    assert_eq!(stream_row["stream"], true);
    assert_eq!(stream_row["completion_tokens"], 24);
    assert!(stream_row["ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(stream_row["decode_tps"].as_f64().unwrap() > 0.0);
    let by_key = usage["by_key"].as_array().unwrap();
    assert!(
        by_key
            .iter()
            .any(|k| k["key_id"] == key_id && k["requests"].as_u64().unwrap() >= 5),
        "{by_key:?}"
    );

    // Stable across restarts: the engine comes back on another port, the address stays.
    let (status, _) = rig
        .api("POST", "/api/v1/instances/alpha/restart", Some(json!({})))
        .await;
    assert_eq!(status, 200);
    let restarted = rig
        .wait_phase("alpha", "ready", support::engine_rig::READY)
        .await;
    assert_ne!(restarted["port"], alpha["port"], "port 0 picks a new port");
    let (again, _) = rig
        .call_v1("/v1/chat/completions", &key, &chat("a", false, 2))
        .await;
    assert_eq!(again, 200);

    // Bad requests: clear errors in the OpenAI shape.
    for (body, status, code) in [
        ("{not json".to_owned(), 400, "invalid_request"),
        (json!({"messages": []}).to_string(), 400, "invalid_request"),
        (chat("nope", false, 1).to_string(), 404, "model_not_found"),
    ] {
        let response = rig
            .v1("/v1/chat/completions", Some(&key))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        let err: Value = response.json().await.unwrap();
        assert_eq!(err["error"]["code"], code, "{err}");
    }
    // On a connection of its own: the server answers before reading the rest and closes it.
    let huge = vec![b' '; 65 << 20];
    let response = reqwest::Client::new()
        .post(rig.t.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);

    // Prometheus: the gateway's counters and the rig's gauges, behind a key.
    let metrics = rig.text_with("/metrics", &key).await;
    assert!(
        metrics.contains(r#"rigdeck_gateway_requests_total{model="beta",status="ok"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("rigdeck_gpu_memory_total_bytes{gpu=\"1\""),
        "{metrics}"
    );
    let anonymous = rig
        .t
        .client
        .get(rig.t.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    // Keys from the command line work the same.
    let (ok, secret, stderr) = rig.cli(&["keys", "create", "script"]).await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("only time its secret is shown"), "{stderr}");
    let from_cli = rig
        .v1("/v1/chat/completions", Some(secret.trim()))
        .json(&chat("beta", false, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(from_cli.status().as_u16(), 200);
    let (ok, listed, _) = rig.cli(&["keys", "list"]).await;
    assert!(
        ok && listed.contains("script") && listed.contains("aider"),
        "{listed}"
    );

    // A revoked key stops working at once.
    let (status, revoked) = rig
        .api("DELETE", &format!("/api/v1/keys/{key_id}"), None)
        .await;
    assert_eq!(status, 200);
    assert!(revoked["revoked_at_ms"].is_i64());
    let (after, _) = rig
        .call_v1("/v1/chat/completions", &key, &chat("beta", false, 1))
        .await;
    assert_eq!(after, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_first_requests_starts_one_instance_and_it_stops_when_idle() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile(
        "lazy",
        json!({"gateway": {"on_demand": true, "idle_ttl_s": 1}}),
    )
    .await;
    rig.profile("manual", json!({})).await;
    let (_, key) = rig.key("burst").await;

    // A model that may not start on request says how to start it.
    let refused = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("manual", false, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    let err: Value = refused.json().await.unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Start on request"),
        "{err}"
    );

    let mut requests = Vec::new();
    for i in 0..20 {
        let request = rig
            .v1("/v1/chat/completions", Some(&key))
            .json(&chat("lazy", i % 2 == 0, 4));
        requests.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }));
    }
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(!body.contains("\"error\""), "{body}");
    }
    let view = rig.instance("lazy").await;
    assert_eq!(view["phase"], "ready");
    assert_eq!(view["attempt"], 1, "one instance, started once: {view}");
    let metrics = rig.text_with("/metrics", &key).await;
    assert!(
        metrics.contains(r#"rigdeck_gateway_loads_total{model="lazy"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"rigdeck_gateway_requests_total{model="lazy",status="ok"} 20"#),
        "{metrics}"
    );

    // Idle past its TTL (1 s; the timer looks every 5 s): stopped, and the page says why. The
    // gateway records the eviction once the stop has returned, a moment after the instance
    // shows "stopped".
    rig.wait_phase("lazy", "stopped", Duration::from_secs(20))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let (_, status) = rig.api("GET", "/api/v1/gateway", None).await;
        if !status["evictions"][0].is_null() || std::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["evictions"][0]["evicted"], "lazy", "{status}");
    assert!(
        status["evictions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("idle"),
        "{status}"
    );
    assert!(status["base_url"].as_str().unwrap().ends_with("/v1"));

    // A streaming client hears that the model is loading before the first token.
    let body = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("lazy", true, 4))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let first = events(&body).into_iter().next().unwrap_or_default();
    assert!(
        first.starts_with(": loading model tiny.gguf on CPU"),
        "{body}"
    );
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_model_makes_room_when_another_needs_its_vram() {
    let rig = Rig::start("2x5060ti.json").await;
    let ten_gib = json!([{"gpu": 1, "bytes": 10u64 << 30}]);
    rig.profile(
        "first",
        json!({"planned_memory": ten_gib, "gateway": {"on_demand": true}}),
    )
    .await;
    rig.profile(
        "second",
        json!({"planned_memory": ten_gib, "gateway": {"on_demand": true}}),
    )
    .await;
    rig.profile(
        "keeper",
        json!({"gateway": {"on_demand": true, "pinned": true}}),
    )
    .await;
    let (_, key) = rig.key("evict").await;

    let (ok, _) = rig
        .call_v1("/v1/chat/completions", &key, &chat("first", false, 2))
        .await;
    assert_eq!(ok, 200);
    let first = rig.instance("first").await;
    let pid = first["pid"].as_u64().unwrap();
    // NVML now shows the engine holding its 10 GiB on GPU 1.
    rig.t.edit_rig(|r| {
        r["gpus"][1]["processes"] = json!([{"pid": pid, "used_mib": 10240, "name": "llama-server"}])
    });
    rig.t
        .wait_for_frame("the engine's memory in NVML", |f| {
            f.to_string().contains(&format!("\"pid\":{pid}"))
        })
        .await;

    // When the first engine has stopped, NVML stops listing it (as the driver would).
    let watcher = {
        let client = rig.t.client.clone();
        let url = rig.t.url("/api/v1/instances");
        let token = rig.t.server.token().to_owned();
        let rig_file = rig.t.rig.clone();
        tokio::spawn(async move {
            loop {
                let all: Value = client
                    .get(&url)
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let stopped = all
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["name"] == "first" && v["phase"] == "stopped");
                if stopped {
                    let mut rig: Value =
                        serde_json::from_str(&std::fs::read_to_string(&rig_file).unwrap()).unwrap();
                    rig["gpus"][1]["processes"] = json!([]);
                    let tmp = rig_file.with_extension("tmp");
                    std::fs::write(&tmp, rig.to_string()).unwrap();
                    std::fs::rename(&tmp, &rig_file).unwrap();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let answer = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("second", false, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status().as_u16(),
        200,
        "{}",
        answer.text().await.unwrap()
    );
    watcher.await.unwrap();
    assert_eq!(rig.instance("first").await["phase"], "stopped");
    assert_eq!(rig.instance("second").await["phase"], "ready");
    let (_, status) = rig.api("GET", "/api/v1/gateway", None).await;
    let eviction = &status["evictions"][0];
    assert_eq!(eviction["evicted"], "first", "{status}");
    assert_eq!(eviction["for_model"], "second");
    assert!(
        eviction["reason"].as_str().unwrap().contains("GPU 1 needs"),
        "{eviction}"
    );

    // A model that would not fit even with every idle model stopped: refused at once, with the
    // numbers, and nothing stopped for it.
    rig.profile(
        "huge",
        json!({"planned_memory": [{"gpu": 1, "bytes": 40u64 << 30}], "gateway": {"on_demand": true}}),
    )
    .await;
    let refused = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("huge", false, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    let err: Value = refused.json().await.unwrap();
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("GPU 1 needs 40.2 GiB") && message.contains("would not free enough"),
        "{message}"
    );
    assert_eq!(rig.instance("second").await["phase"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_the_engine_and_a_killed_engine_ends_the_stream_with_an_error()
{
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile("solo", json!({"gateway": {"max_concurrent": 1}}))
        .await;
    let view = rig.run("solo").await;
    let port = view["port"].clone();
    let (_, key) = rig.key("leaver").await;

    // Read a few events, then hang up: the engine stops generating.
    let response = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&endless("solo"))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    assert_eq!(
        engine_metric(&port, "llamacpp:requests_processing").await,
        1.0
    );
    // The limit of one request at a time answers 429 with when to retry.
    let busy = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&chat("solo", false, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status().as_u16(), 429);
    assert_eq!(busy.headers()["retry-after"], "1");
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine_metric(&port, "llamacpp:requests_processing").await != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the engine kept generating for a client that left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let usage = rig.usage().await;
    assert!(
        usage["recent"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["status"] == "cancelled"),
        "{usage}"
    );

    // The engine dies mid-stream: the client gets an error event, the instance is crashed.
    let response = rig
        .v1("/v1/chat/completions", Some(&key))
        .json(&endless("solo"))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    stream.next().await.unwrap().unwrap();
    let pid = view["pid"].as_u64().unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let mut rest = String::new();
    while let Some(chunk) = stream.next().await {
        rest.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream ends with an event, not a broken body"),
        ));
    }
    let last = events(&rest).pop().unwrap_or_default();
    assert!(
        last.contains("stopped mid-reply") && last.contains("engine_failed"),
        "{rest}"
    );
    rig.wait_phase("solo", "crashed", Duration::from_secs(10))
        .await;
    let usage = rig.usage().await;
    assert_eq!(usage["recent"][0]["status"], "engine_error", "{usage}");
    // And the next request says the model is not running.
    let (after, _) = rig
        .call_v1("/v1/chat/completions", &key, &chat("solo", false, 1))
        .await;
    assert_eq!(after, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_alone_on_its_own_port_takes_keys_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var(
        "RIGDECK_NVML_DOUBLE_RIG",
        support::scratch_rig(dir.path(), "2x5060ti.json"),
    );
    let mut options = support::options(dir.path(), "127.0.0.1:0");
    options.gateway_bind = Some("127.0.0.1:0".parse().unwrap());
    let server = rigdeck_server::start(options).await.unwrap();
    let gateway = server.gateway_addr().expect("a gateway address");
    let client = reqwest::Client::new();
    let created: Value = client
        .post(format!("{}/api/v1/keys", server.base_url()))
        .bearer_auth(server.token())
        .json(&json!({"name": "lan"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["secret"].as_str().unwrap();
    let at = |path: &str| format!("http://{gateway}{path}");

    let models = client
        .get(at("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status().as_u16(), 200);
    let anonymous = client.get(at("/v1/models")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    // Neither the admin API nor the UI is served there.
    let admin = client
        .get(at("/api/v1/status"))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status().as_u16(), 404);
    // A web page cannot use it through a browser.
    let from_page = client
        .get(at("/v1/models"))
        .bearer_auth(key)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(from_page.status().as_u16(), 403);
    server.shutdown().await;
}
