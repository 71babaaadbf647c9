//! Chat against a real llama-server (the tiny model) through the daemon's API: a conversation
//! on a model loaded on request, the reply streamed as events and stored with the engine's
//! figures, stop keeps the partial text, regenerate and edit make branches, search, export; and
//! with the daemon as its own process, a kill -9 mid-reply keeps the text written so far,
//! marked interrupted at the next start.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::daemon_process;
use support::engine_rig::Rig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_streams_stops_branches_searches_and_exports() {
    let rig = Rig::start("2x5060ti.json").await;
    rig.profile("tiny", json!({"gateway": {"on_demand": true}}))
        .await;
    let (status, models) = rig.api("GET", "/api/v1/chat/models", None).await;
    assert_eq!(status, 200, "{models}");
    assert_eq!(models[0]["name"], "tiny");
    assert_eq!(
        models[0]["context"], 8192,
        "the profile's context before it runs"
    );

    let (status, c) = rig
        .api(
            "POST",
            "/api/v1/chat/conversations",
            Some(json!({"model": "tiny",
            "params": {"max_tokens": 16, "reasoning": "off", "temperature": 0.5}})),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let id = c["id"].as_i64().unwrap();

    // The reply's deltas arrive on the WebSocket while it is written.
    let ws_url = rig.t.url("/api/v1/events").replace("http://", "ws://");
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws_url)
            .unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", rig.t.server.token()).parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();

    let (status, sent) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": null, "content": "Tell me about GPUs."})),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    assert_eq!(sent["assistant"]["status"], "streaming");
    let reply_id = sent["assistant"]["id"].as_i64().unwrap();
    let mut deltas = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let Ok(Some(Ok(frame))) =
            tokio::time::timeout(Duration::from_secs(60), socket.next()).await
        else {
            break;
        };
        let Ok(text) = frame.into_text() else {
            continue;
        };
        let event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match event["type"].as_str() {
            Some("chat.delta") if event["data"]["message_id"] == reply_id => {
                assert_eq!(
                    event["data"]["content_offset"].as_u64().unwrap() as usize,
                    deltas.encode_utf16().count()
                );
                deltas.push_str(event["data"]["content"].as_str().unwrap());
            }
            Some("chat.message")
                if event["data"]["id"] == reply_id && event["data"]["status"] != "streaming" =>
            {
                break
            }
            _ => {}
        }
    }
    let reply = rig.reply_ended(id, reply_id).await;
    assert_eq!(reply["status"], "complete", "{reply}");
    assert_eq!(
        reply["content"].as_str().unwrap(),
        deltas,
        "the deltas add up to the stored reply"
    );
    assert_eq!(reply["stats"]["completion_tokens"], 16);
    assert!(reply["stats"]["ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(reply["stats"]["decode_tps"].as_f64().unwrap() > 0.0);
    assert!(reply["stats"]["prompt_tokens"].as_u64().unwrap() > 5);
    let (_, c) = rig
        .api("GET", &format!("/api/v1/chat/conversations/{id}"), None)
        .await;
    assert_eq!(c["conversation"]["title"], "Tell me about GPUs.");
    assert_eq!(c["conversation"]["active_leaf"], reply_id);
    // The gateway counted the chat's request like any client's.
    let usage = rig.usage().await;
    assert_eq!(usage["recent"][0]["key_name"], "Rigdeck chat");

    // Regenerate: a sibling under the same question.
    let (status, again) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/messages/{reply_id}/regenerate"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{again}");
    let sibling = rig
        .reply_ended(id, again["assistant"]["id"].as_i64().unwrap())
        .await;
    assert_eq!(sibling["parent_id"], reply["parent_id"]);

    // A long reply, stopped: the text so far stays.
    rig.api(
        "PATCH",
        &format!("/api/v1/chat/conversations/{id}"),
        Some(json!({"params": {"max_tokens": 6000}})),
    )
    .await;
    let (_, sent) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": reply_id, "content": "Go on, at length."})),
        )
        .await;
    let long_id = sent["assistant"]["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, c) = rig
            .api("GET", &format!("/api/v1/chat/conversations/{id}"), None)
            .await;
        let m = c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == long_id)
            .cloned()
            .unwrap();
        if !m["content"].as_str().unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the long reply never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, stopped) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/messages/{long_id}/stop"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    assert!(!stopped["content"].as_str().unwrap().is_empty());

    rig.api(
        "PATCH",
        &format!("/api/v1/chat/conversations/{id}"),
        Some(json!({"params": {"max_tokens": 16}})),
    )
    .await;

    // An edit of the first question: a new root branch.
    let (status, edited) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": null, "content": "Tell me about CPUs."})),
        )
        .await;
    assert_eq!(status, 202);
    rig.reply_ended(id, edited["assistant"]["id"].as_i64().unwrap())
        .await;
    let (_, c) = rig
        .api("GET", &format!("/api/v1/chat/conversations/{id}"), None)
        .await;
    let roots = c["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["parent_id"].is_null())
        .count();
    assert_eq!(roots, 2);

    // Bad input names the problem.
    let (status, err) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": null, "content": " "})),
        )
        .await;
    assert_eq!(status, 400);
    assert!(err["message"].as_str().unwrap().contains("empty"), "{err}");
    let (status, _) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": null, "content": "x", "images": ["file:///etc/passwd"]})),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = rig.api("GET", "/api/v1/chat/conversations/999", None).await;
    assert_eq!(status, 404);

    // Search and export.
    let (_, found) = rig
        .api("GET", "/api/v1/chat/conversations?q=CPUs", None)
        .await;
    assert_eq!(found[0]["id"], id);
    assert!(found[0]["snippet"].as_str().unwrap().contains("CPUs"));
    let (_, none) = rig
        .api("GET", "/api/v1/chat/conversations?q=zebra", None)
        .await;
    assert_eq!(none.as_array().unwrap().len(), 0);
    let markdown = rig
        .t
        .client
        .get(rig.t.url(&format!(
            "/api/v1/chat/conversations/{id}/export?format=markdown"
        )))
        .bearer_auth(rig.t.server.token())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        markdown.contains("## User") && markdown.contains("Tell me about CPUs."),
        "{markdown}"
    );
    assert!(
        !markdown.contains("## User\n\nTell me about GPUs."),
        "only the branch shown (the title is the first question): {markdown}"
    );
    let (_, exported) = rig
        .api(
            "GET",
            &format!("/api/v1/chat/conversations/{id}/export?format=json"),
            None,
        )
        .await;
    assert_eq!(exported["messages"].as_array().unwrap().len(), 7);

    // The terminal chat: one message, the reply streamed, its figures, stored like the rest.
    let (ok, stdout, stderr) = rig
        .cli(&[
            "chat",
            "tiny",
            "-m",
            "Hello from the terminal",
            "--max-tokens",
            "8",
        ])
        .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "no reply text: {stderr}");
    assert!(stderr.contains("[8 tokens · first token"), "{stderr}");
    let (_, found) = rig
        .api("GET", "/api/v1/chat/conversations?q=terminal", None)
        .await;
    assert_eq!(found.as_array().unwrap().len(), 1);
    // A 3 MB image goes through; a model served without a vision projector says so in the reply.
    let image = format!("data:image/png;base64,{}", "A".repeat(3 << 20));
    let (status, sent) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{id}/messages"),
            Some(json!({"parent_id": null, "content": "What is this?", "images": [image]})),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    let refused = rig
        .reply_ended(id, sent["assistant"]["id"].as_i64().unwrap())
        .await;
    assert_eq!(refused["status"], "error", "{refused}");
    assert!(
        !refused["error"].as_str().unwrap_or("").is_empty(),
        "{refused}"
    );

    let (ok, _, stderr) = rig.cli(&["chat", "nope", "-m", "Hi"]).await;
    assert!(!ok);
    assert!(stderr.contains("no model named 'nope'"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_by_a_killed_daemon_keeps_its_text_and_is_marked_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let port = daemon_process::free_port();
    let daemon = daemon_process::serve(dir.path(), port).await;
    let token = std::fs::read_to_string(dir.path().join("config/token")).unwrap();
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{port}/api/v1{path}");
    let call = |method: reqwest::Method, path: &str, body: Value| {
        client
            .request(method, url(path))
            .bearer_auth(token.trim())
            .json(&body)
            .send()
    };
    let build = support::register_llama_server(&dir.path().join("data")).await;
    let model = support::tiny_runnable(dir.path());
    let profile = json!({"name": "tiny", "engine_build_id": build.id, "model": model,
        "placement": {"context": 8192, "threads": 1}, "gateway": {"on_demand": true}});
    assert_eq!(
        call(reqwest::Method::POST, "/profiles", profile)
            .await
            .unwrap()
            .status()
            .as_u16(),
        201
    );
    let c: Value = call(
        reqwest::Method::POST,
        "/chat/conversations",
        json!({"model": "tiny", "params": {"max_tokens": 6000}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = c["id"].as_i64().unwrap();
    let sent: Value = call(
        reqwest::Method::POST,
        &format!("/chat/conversations/{id}/messages"),
        json!({"parent_id": null, "content": "Write a long story."}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let reply_id = sent["assistant"]["id"].as_i64().unwrap();

    // Once some text is saved, kill the daemon without warning.
    let db = dir.path().join("data/rigdeck.db");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let store = rigdeck_core::store::Store::open(&db).await.unwrap();
        let saved = rigdeck_core::chat::ChatStore::new(store.pool().clone())
            .message(reply_id)
            .await
            .unwrap();
        store.close().await;
        if saved.content.len() > 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no text was saved while streaming"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.kill_hard();

    let _again = daemon_process::serve(dir.path(), port).await;
    let c: Value = client
        .get(url(&format!("/chat/conversations/{id}")))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reply = c["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == reply_id)
        .cloned()
        .unwrap();
    assert_eq!(reply["status"], "interrupted", "{reply}");
    assert!(reply["content"].as_str().unwrap().len() > 20, "{reply}");
    // The engine outlived the killed daemon and was adopted; stop it before leaving.
    call(reqwest::Method::POST, "/instances/tiny/stop", json!({}))
        .await
        .unwrap();
}
