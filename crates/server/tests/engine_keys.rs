//! An engine's own API key never shows in `ps`: llama-server gets it through its environment,
//! still requires it, and the gateway still reaches it.

mod support;

use serde_json::json;
use support::engine_rig::Rig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engines_key_is_not_on_its_command_line_and_is_still_required() {
    let rig = Rig::start("2x5060ti.json").await;
    let secret = "engine-secret-4f1c";
    rig.profile("keyed", json!({"api_key": secret})).await;
    let view = rig.run("keyed").await;
    let pid = view["pid"].as_i64().expect("pid");
    let port = view["port"].as_u64().expect("port");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the engine's cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        !cmdline.contains(secret),
        "the key is on the command line: {cmdline}"
    );
    assert!(!cmdline.contains("--api-key"), "{cmdline}");
    assert!(
        !view.to_string().contains(secret),
        "the view shows the key: {view}"
    );

    // The engine still wants it: without it 401, with it an answer.
    let url = format!("http://127.0.0.1:{port}/v1/models");
    let client = reqwest::Client::new();
    let bare = client.get(&url).send().await.expect("engine answers");
    assert_eq!(bare.status().as_u16(), 401);
    let keyed = client
        .get(&url)
        .bearer_auth(secret)
        .send()
        .await
        .expect("engine answers");
    assert_eq!(keyed.status().as_u16(), 200);

    // And the gateway, which sends the engine's key upstream, reaches it.
    let (_, key) = rig.key("agent").await;
    let body = json!({"model": "keyed", "max_tokens": 4,
        "messages": [{"role": "user", "content": "Say something."}]});
    let (status, answer) = rig.call_v1("/v1/chat/completions", &key, &body).await;
    assert_eq!(status, 200, "{answer}");
}
