//! One desk over many rigs, with three real `rigdeck serve` daemons on loopback, each playing
//! its own NVML test-double rig: a desk paired with two rigs sees both rigs' GPUs on its fleet
//! overview and calls their API through the pinned channel (GET with a query, POST, DELETE);
//! fleet management and the hub token are refused through it, and a rig cannot call its desk's
//! API the other way; a killed rig turns unreachable
//! with why and since, its last state kept stale, and live again once restarted; a stopped
//! (frozen) rig answers 504 saying which way failed; a rig that revoked the desk says "not
//! paired".

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::fleet_member::Member;

impl Member {
    /// The same through the desk's relay to the rig `rig`.
    async fn via(&self, rig: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, &format!("/api/v1/fleet/peers/{rig}{path}"), body)
            .await
    }

    /// Waits until the overview's entry for `name` passes `check`; the entry.
    async fn entry_when(
        &self,
        name: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (status, overview) = self.call("GET", "/api/v1/fleet/overview", None).await;
            assert_eq!(status, 200, "{overview}");
            let entry = overview["entries"]
                .as_array()
                .and_then(|e| e.iter().find(|e| e["name"] == name).cloned());
            if let Some(entry) = entry.filter(|e| check(e)) {
                return entry;
            }
            assert!(
                Instant::now() < deadline,
                "the overview's '{name}' never matched: {overview:#}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The GPU names of a fixture rig, in order.
fn fixture_gpu_names(rig: &str) -> Vec<String> {
    let text = std::fs::read_to_string(support::fixture(rig)).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    value["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect()
}

fn gpu_names(entry: &Value) -> Vec<String> {
    entry["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn live_with_gpus(entry: &Value) -> bool {
    entry["state"] == "live" && !entry["gpus"].as_array().is_none_or(Vec::is_empty)
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desk_over_two_rigs_sees_them_calls_them_and_says_how_each_one_fails() {
    let root = tempfile::Builder::new()
        .prefix("rigdeck-fleet-desk")
        .tempdir()
        .unwrap();
    let desk = Member::start(root.path(), "desk", "4x3090.json").await;
    let mut tower = Member::start(root.path(), "tower", "2x5060ti.json").await;
    let mini = Member::start(root.path(), "mini", "2xgh200.json").await;
    desk.pair_with(&tower).await;
    desk.pair_with(&mini).await;

    // The overview: the desk itself and both rigs, live, each with its own GPUs.
    let within = Duration::from_secs(15);
    for (member, rig) in [
        (&desk, "4x3090.json"),
        (&tower, "2x5060ti.json"),
        (&mini, "2xgh200.json"),
    ] {
        let entry = desk.entry_when(&member.name, within, live_with_gpus).await;
        assert_eq!(gpu_names(&entry), fixture_gpu_names(rig), "{entry:#}");
        assert!(
            entry["gpus"][0]["vram_total_bytes"].as_u64().unwrap() > 0,
            "{entry:#}"
        );
        assert!(
            entry["gpus"][0]["temperature_c"].as_f64().is_some(),
            "{entry:#}"
        );
        assert!(entry["frame_age_ms"].as_i64().unwrap() < 2_000, "{entry:#}");
        assert_eq!(entry["stale"], false);
    }

    // A proxied GET is the rig's own answer: the same GPUs as asked of the rig directly.
    let (status, relayed) = desk
        .via("tower", "GET", "/api/v1/telemetry/latest", None)
        .await;
    assert_eq!(status, 200, "{relayed}");
    let (_, direct) = tower.call("GET", "/api/v1/telemetry/latest", None).await;
    let uuids = |frame: &Value| -> Vec<Value> {
        frame["sample"]["gpus"]["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["uuid"].clone())
            .collect()
    };
    assert_eq!(uuids(&relayed), uuids(&direct));
    // The query string travels: the rig refuses a bad range with its own words.
    let (status, refused) = desk
        .via("tower", "GET", "/api/v1/telemetry/history?range=2d", None)
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("'2d'"),
        "{refused}"
    );
    // The desk's token is needed: without it, nothing is relayed.
    let bare = desk
        .request("GET", "/api/v1/fleet/peers/tower/api/v1/telemetry/latest")
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status().as_u16(), 401);

    // A proxied POST creates an API key on the rig, seen there directly; a proxied DELETE revokes it.
    let (status, key) = desk
        .via(
            "mini",
            "POST",
            "/api/v1/keys",
            Some(json!({"name": "from-desk"})),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let (_, keys) = mini.call("GET", "/api/v1/keys", None).await;
    let listed = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "from-desk")
        .cloned();
    let listed = listed.unwrap_or_else(|| panic!("the key is not on the rig: {keys}"));
    let (_, desk_keys) = desk.call("GET", "/api/v1/keys", None).await;
    assert!(
        !desk_keys.to_string().contains("from-desk"),
        "the key landed on the desk"
    );
    let id = listed["id"].as_i64().unwrap();
    let (status, revoked) = desk
        .via("mini", "DELETE", &format!("/api/v1/keys/{id}"), None)
        .await;
    assert!((200..300).contains(&status), "{status} {revoked}");

    // Fleet management and the hub token stay with each rig.
    for (method, path) in [
        ("GET", "/api/v1/fleet/peers"),
        ("POST", "/api/v1/fleet/invites"),
        ("DELETE", "/api/v1/fleet/peers/desk"),
        ("GET", "/api/v1//fleet/peers"),
        ("PUT", "/api/v1/hub/token"),
    ] {
        let (status, refused) = desk.via("tower", method, path, Some(json!({}))).await;
        assert_eq!(status, 403, "{method} {path}: {refused}");
        assert_eq!(refused["code"], "forbidden", "{refused}");
    }
    // Only a desk calls a rig's API: the rig cannot call its desk's the other way.
    let (status, refused) = tower
        .via("desk", "GET", "/api/v1/telemetry/latest", None)
        .await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("is a rig this desk joined"),
        "{refused}"
    );
    let (_, peers) = tower.call("GET", "/api/v1/fleet/peers", None).await;
    assert_eq!(
        peers.as_array().unwrap().len(),
        1,
        "the desk is still paired: {peers}"
    );

    // The tower killed: unreachable, why and since, its last state kept and flagged stale. A poll
    // in flight when it died says the connection broke; the next one is refused, and the why
    // follows the latest poll.
    let killed_at = now_ms();
    tower.kill();
    let entry = desk
        .entry_when("tower", Duration::from_secs(5), |e| {
            e["state"] == "unreachable"
                && e["why"]
                    .as_str()
                    .is_some_and(|w| w.contains("connection refused"))
        })
        .await;
    let why = entry["why"].as_str().unwrap();
    assert!(
        why.starts_with("the desk cannot reach the rig"),
        "{entry:#}"
    );
    assert!(why.contains("connection refused"), "{entry:#}");
    assert!(
        entry["since_ms"].as_i64().unwrap() >= killed_at,
        "{entry:#}"
    );
    assert_eq!(entry["stale"], true, "{entry:#}");
    assert!(entry["taken_at_ms"].as_i64().unwrap() <= entry["since_ms"].as_i64().unwrap());
    assert_eq!(gpu_names(&entry), fixture_gpu_names("2x5060ti.json"));
    let mini_entry = desk.entry_when("mini", within, live_with_gpus).await;
    assert_eq!(mini_entry["stale"], false);
    let (status, failed) = desk
        .via("tower", "GET", "/api/v1/telemetry/latest", None)
        .await;
    assert_eq!(status, 502, "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{failed}"
    );

    // Restarted: live again.
    tower.serve().await;
    let entry = desk
        .entry_when("tower", within, |e| {
            e["state"] == "live" && e["stale"] == false
        })
        .await;
    assert!(entry["why"].is_null(), "{entry:#}");

    // Frozen (SIGSTOP): the kernel takes the connection, the daemon never answers: 504, which way.
    tower.signal("-STOP");
    let started = Instant::now();
    let (status, timed_out) = desk
        .via("tower", "GET", "/api/v1/telemetry/latest", None)
        .await;
    tower.signal("-CONT");
    assert_eq!(status, 504, "{timed_out}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let message = timed_out["message"].as_str().unwrap();
    // The stop races the request: a handshake the daemon finished before it stopped leaves a
    // request it took and never answered; either way the message says which.
    let unreached = message.contains("could not reach the rig 'tower'");
    let unanswered = message.contains("the rig 'tower'")
        && message.contains("took the request but did not answer");
    assert!(
        (unreached || unanswered) && message.contains("within 15 s"),
        "{message}"
    );
    desk.entry_when("tower", within, |e| e["state"] == "live")
        .await;

    // The mini revokes the desk: "not paired".
    let (status, removed) = mini.call("DELETE", "/api/v1/fleet/peers/desk", None).await;
    assert_eq!(status, 200, "{removed}");
    let entry = desk
        .entry_when("mini", within, |e| e["state"] == "unreachable")
        .await;
    assert_eq!(entry["reason"], "unknown_peer", "{entry:#}");
    assert!(
        entry["why"].as_str().unwrap().contains("not paired"),
        "{entry:#}"
    );
    let (status, refused) = desk
        .via("mini", "GET", "/api/v1/telemetry/latest", None)
        .await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("no longer knows this desk"),
        "{refused}"
    );
}
