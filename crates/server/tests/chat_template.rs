//! The chat template and the reply's ending against the real Gemma 3 270M (a GGUF written by
//! another tool, carrying no chat template) on the bundled llama-server: the library and the
//! chat's model list say the file has none, a profile naming `gemma` answers in Gemma's format
//! (no stray ChatML or turn markers), a reply that reaches its length says so with that length,
//! and a reply the user stops keeps its tokens and speed and is no error in the gateway's usage.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::engine_rig::Rig;

/// A conversation on `model`, greedy, with `max_tokens` when given.
async fn conversation(rig: &Rig, model: &str, max_tokens: Option<u32>) -> i64 {
    let (status, c) = rig
        .api(
            "POST",
            "/api/v1/chat/conversations",
            Some(json!({"model": model,
                "params": {"temperature": 0.0, "max_tokens": max_tokens}})),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    c["id"].as_i64().expect("conversation id")
}

/// Sends `text` and returns the reply's id.
async fn send(rig: &Rig, conversation: i64, text: &str) -> i64 {
    let (status, sent) = rig
        .api(
            "POST",
            &format!("/api/v1/chat/conversations/{conversation}/messages"),
            Some(json!({"parent_id": null, "content": text})),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    sent["assistant"]["id"].as_i64().expect("reply id")
}

const MARKERS: [&str; 4] = [
    "<|im_end|>",
    "<|im_start|>",
    "<end_of_turn>",
    "<start_of_turn>",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gguf_without_a_chat_template_is_named_and_its_architectures_template_answers_cleanly() {
    let rig = Rig::start("2x5060ti.json").await;
    let model = support::gemma3_270m();
    let folder = model.parent().expect("the model's folder").to_owned();
    let (status, settings) = rig
        .api(
            "PUT",
            "/api/v1/settings",
            Some(json!({"model_folders": [folder]})),
        )
        .await;
    assert_eq!(status, 200, "{settings}");
    let (_, library) = rig
        .api("POST", "/api/v1/models/rescan", Some(json!({})))
        .await;
    let entry = library
        .as_array()
        .and_then(|all| all.iter().find(|e| e["path"] == json!(model)).cloned())
        .expect("the library lists Gemma");
    assert_eq!(entry["gguf"]["architecture"], "gemma3");
    assert!(
        entry["gguf"]["chat_template"].is_null(),
        "the file carries no chat template: {}",
        entry["gguf"]["chat_template"]
    );

    // A small context: the default reply length is half of it, and this model rarely stops.
    let placement = json!({"context": 256, "threads": 2});
    rig.profile(
        "gemma-own",
        json!({"model": model, "placement": placement, "gateway": {"on_demand": true}}),
    )
    .await;
    rig.profile(
        "gemma",
        json!({"model": model, "placement": placement, "chat_template": "gemma",
            "gateway": {"on_demand": true}}),
    )
    .await;
    let (status, refused) = rig
        .api(
            "POST",
            "/api/v1/profiles",
            Some(
                json!({"name": "bad", "engine_build_id": rig.build.id, "model": model,
                "chat_template": "gemma-3"}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("not one llama-server knows"),
        "{refused}"
    );

    let (_, models) = rig.api("GET", "/api/v1/chat/models", None).await;
    let listed = |name: &str| {
        models
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(listed("gemma-own")["no_chat_template"], true, "{models}");
    assert_eq!(listed("gemma-own")["suggested_chat_template"], "gemma");
    assert_eq!(listed("gemma")["no_chat_template"], false, "{models}");

    // Named: Gemma's own turns, which the engine reads as the end of a turn: no marker in the
    // text. (This 270M model is small: what it says is not the point.)
    let question = "Hello! Who are you?";
    let c = conversation(&rig, "gemma", Some(64)).await;
    let id = send(&rig, c, question).await;
    let reply = rig.reply_ended(c, id).await;
    assert_eq!(reply["status"], "complete", "{reply}");
    let text = reply["content"].as_str().unwrap_or_default();
    assert!(!text.trim().is_empty(), "{reply}");
    for marker in MARKERS {
        assert!(!text.contains(marker), "{marker} in {text:?}");
    }

    // The file's own (none: llama-server's ChatML) for comparison: the same question, greedy,
    // and the model writes ChatML's markers into its reply.
    let c = conversation(&rig, "gemma-own", Some(64)).await;
    let id = send(&rig, c, question).await;
    let own = rig.reply_ended(c, id).await;
    let own_text = own["content"].as_str().unwrap_or_default();
    assert!(
        own_text.contains("<|im_end|>"),
        "without a template the reply shows ChatML's markers: {own}"
    );

    // A reply that reaches its length says so, with the length; the default applies when the
    // conversation sets none.
    let c = conversation(&rig, "gemma", Some(8)).await;
    let id = send(&rig, c, "Write a long story about a lighthouse keeper.").await;
    let cut = rig.reply_ended(c, id).await;
    assert_eq!(cut["status"], "complete", "{cut}");
    assert_eq!(cut["stats"]["finish_reason"], "length", "{cut}");
    assert_eq!(cut["stats"]["max_tokens"], 8, "{cut}");
    assert_eq!(cut["stats"]["completion_tokens"], 8, "{cut}");
    let c = conversation(&rig, "gemma", None).await;
    let id = send(&rig, c, "Say hello.").await;
    let default = rig.reply_ended(c, id).await;
    assert_eq!(
        default["stats"]["max_tokens"], 128,
        "half the engine's 256 tokens: {default}"
    );
    let (_, models) = rig.api("GET", "/api/v1/chat/models", None).await;
    let gemma = models
        .as_array()
        .and_then(|all| all.iter().find(|m| m["name"] == "gemma").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(gemma["default_max_tokens"], 128, "{gemma}");

    // Stopped by the user mid-reply: its tokens and speed kept, and no error in Usage.
    let (_, before) = rig.api("GET", "/api/v1/gateway/usage", None).await;
    let c = conversation(&rig, "gemma", Some(1500)).await;
    let id = send(&rig, c, "Count from 1 to 500, one number per line.").await;
    rig.message_when(c, id, |m| {
        m["content"].as_str().is_some_and(|t| t.len() > 40)
    })
    .await;
    let (status, stopped) = rig
        .api("POST", &format!("/api/v1/chat/messages/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    assert!(
        stopped["stats"]["completion_tokens"].as_u64().unwrap_or(0) > 5,
        "{stopped}"
    );
    assert!(
        stopped["stats"]["decode_tps"].as_f64().unwrap_or(0.0) > 0.0,
        "{stopped}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let (_, after) = rig.api("GET", "/api/v1/gateway/usage", None).await;
        let cancelled = after["recent"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["status"] == "cancelled"));
        if cancelled || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        after["recent"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["status"] == "cancelled")),
        "the stop is recorded as a cancel: {after}"
    );
    assert_eq!(
        after["totals"]["errors"], before["totals"]["errors"],
        "a stop is no error: {after}"
    );
}
