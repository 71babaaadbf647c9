//! llama.cpp across boxes as a gang, with two real daemons paired on loopback, the real
//! `llama-server` and `rpc-server` of Rigdeck's cached CPU build and the tiny model: a profile
//! whose `lenders` borrow the other rig's CPU starts its lease first and then the head's
//! llama-server with `--rpc` to the lease's tunnel endpoint, and answers a completion through
//! the head's `/v1`. The lender's `rpc-server` killed stops the gang and starts it again (the
//! time from the kill to ready again is printed), and so does the lender's daemon killed, once
//! it is back, and so does the head's daemon killed and started again; a stop leaves no
//! `rpc-server` and no `llama-server` of the test running. A lender on another llama.cpp build is refused naming
//! both builds, and a lender whose daemon is down is refused saying so, before anything starts.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::fleet_member::Member;

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rigdeck-rpc-gang")
        .tempdir()
        .unwrap()
}

/// A daemon on a CPU-only rig with `program` (a `llama-server`) registered; the build's id.
async fn member(root: &Path, name: &str, program: &Path) -> (Member, Value) {
    let mut member = Member::new(root, name, "cpu-only.json");
    let build = support::register_engine(&member.dir.join("data"), program).await;
    member.serve().await;
    (member, json!({"id": build.id, "version": build.version}))
}

/// The profile `lent`: the tiny model on this rig, the CPU of `lender` lent.
fn lent_profile(build: i64, model: &Path, lender: &str) -> Value {
    json!({
        "name": "lent", "engine_build_id": build, "model": model,
        "placement": {"context": 512, "threads": 1},
        "restart": {"policy": "on_failure", "max_restarts": 3,
            "initial_backoff_ms": 200, "max_backoff_ms": 1000},
        "lenders": [{"rig": lender, "devices": ["CPU"]}],
    })
}

/// The leases the lender lends now.
async fn lent(lender: &Member) -> Vec<Value> {
    let (status, leases) = lender.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_eq!(status, 200, "{leases}");
    leases["lent"].as_array().cloned().unwrap_or_default()
}

async fn wait_gone(pid: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while support::process_alive(pid) {
        assert!(Instant::now() < deadline, "{what} (pid {pid}) still runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The head instance's pid and argv.
async fn head_process(head: &Member) -> (i64, Vec<String>) {
    let (status, list) = head.call("GET", "/api/v1/instances", None).await;
    assert_eq!(status, 200, "{list}");
    let view = list
        .as_array()
        .and_then(|all| all.iter().find(|i| i["name"] == "lent"))
        .unwrap_or_else(|| panic!("no instance 'lent': {list:#}"));
    let pid = view["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid: {view:#}"));
    let argv = serde_json::from_value(view["argv"].clone()).unwrap();
    (pid, argv)
}

/// A gateway key of the head's.
async fn gateway_key(head: &Member) -> String {
    let (status, created) = head
        .call("POST", "/api/v1/keys", Some(json!({"name": "test"})))
        .await;
    assert_eq!(status, 201, "{created}");
    created["secret"].as_str().unwrap().to_owned()
}

/// A completion through the head daemon's `/v1` (its gateway).
async fn complete_through_the_head(head: &Member, key: &str) -> Value {
    let body =
        json!({"model": "lent", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0});
    let (status, answer) = head
        .call_with(key, "POST", "/v1/completions", Some(body))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A lender and a head paired, the profile `lent` saved on the head and started: both
/// daemons and the start's answer.
async fn start_lent_gang(root: &Path) -> (Member, Member, Value) {
    let program = support::llama_server().await;
    let (lender, _) = member(root, "lender", &program).await;
    let (head, build) = member(root, "head", &program).await;
    head.pair_with(&lender).await;
    let model = support::tiny_runnable(root);
    let body = lent_profile(build["id"].as_i64().unwrap(), &model, "lender");
    let (status, saved) = head.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    let (status, started) = head.call("POST", "/api/v1/profiles/lent/start", None).await;
    assert_eq!(status, 200, "{started}");
    (lender, head, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_cpu_gang_answers_and_restarts_when_its_rpc_server_or_its_rig_dies() {
    let root = tempdir();
    let (mut lender, head, started) = start_lent_gang(root.path()).await;
    let members = started["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{started}");
    assert_eq!(members[1]["kind"], "lease", "{started}");
    assert_eq!(members[1]["rig"], "lender", "{started}");
    assert!(
        started["message"]
            .as_str()
            .is_some_and(|m| m.contains("the link to 'lender': measured (")),
        "{started}"
    );
    println!("{}", started["message"]);
    // The lease the preflight planned with is the one the gang runs on: one rpc-server.
    let planned_with = lent(&lender).await;
    assert_eq!(planned_with.len(), 1, "{planned_with:?}");
    head.gang_when("lent", Duration::from_secs(120), |g| g["phase"] == "ready")
        .await;
    let running_on = lent(&lender).await;
    assert_eq!(
        running_on[0]["pid"], planned_with[0]["pid"],
        "the rpc-server was started again after the preflight: {running_on:?}"
    );

    // The head's llama-server uses the lease's endpoint, every layer on the lent device.
    let (_, taken) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    let endpoint = taken["taken"][0]["endpoint"].as_str().unwrap().to_owned();
    let (head_pid, argv) = head_process(&head).await;
    assert!(
        argv.windows(2).any(|w| w[0] == "--rpc" && w[1] == endpoint),
        "{argv:?} {taken}"
    );
    let key = gateway_key(&head).await;
    let answer = complete_through_the_head(&head, &key).await;
    assert!(answer["choices"][0]["text"].as_str().is_some(), "{answer}");
    let (_, taken) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    assert!(
        taken["taken"][0]["bytes_sent"].as_u64().unwrap() > 1 << 20,
        "the weights did not cross the tunnel: {taken}"
    );

    // The lender's rpc-server killed: the gang stops (the head's llama-server too) and comes back.
    let leases = lent(&lender).await;
    assert_eq!(leases.len(), 1, "{leases:?}");
    let rpc_pid = leases[0]["pid"].as_i64().unwrap();
    let killed_at = Instant::now();
    assert!(std::process::Command::new("kill")
        .args(["-9", &rpc_pid.to_string()])
        .status()
        .unwrap()
        .success());
    let back = head
        .gang_when("lent", Duration::from_secs(120), |g| {
            g["phase"] == "ready" && g["restarts"] == 1
        })
        .await;
    let took = killed_at.elapsed();
    println!(
        "from the lender's rpc-server killed to the gang ready again: {:.2} s",
        took.as_secs_f64()
    );
    wait_gone(head_pid, "the first head llama-server").await;
    let (new_head_pid, _) = head_process(&head).await;
    assert_ne!(new_head_pid, head_pid, "{back}");
    let leases = lent(&lender).await;
    assert_eq!(leases.len(), 1, "{leases:?}");
    let new_rpc_pid = leases[0]["pid"].as_i64().unwrap();
    assert_ne!(new_rpc_pid, rpc_pid);
    complete_through_the_head(&head, &key).await;

    // The lender's daemon killed (its rpc-server ends with it): the gang stops, waits for the
    // rig, and comes back once it answers again.
    lender.kill();
    wait_gone(new_rpc_pid, "the rpc-server of a killed lender").await;
    let waiting = head
        .gang_when("lent", Duration::from_secs(60), |g| {
            g["phase"] == "restarting"
                && g["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("'lender' cannot be reached"))
        })
        .await;
    wait_gone(
        new_head_pid,
        "the head's llama-server of a gang whose lender went away",
    )
    .await;
    lender.serve().await;
    head.gang_when("lent", Duration::from_secs(120), |g| {
        g["phase"] == "ready" && g["restarts"] == 2
    })
    .await;
    println!("while the lender was down: {}", waiting["message"]);
    complete_through_the_head(&head, &key).await;
    let (new_head_pid, _) = head_process(&head).await;
    let new_rpc_pid = lent(&lender).await[0]["pid"].as_i64().unwrap();

    // Stopped: nothing of the gang runs on either rig.
    let (status, stopped) = head.call("POST", "/api/v1/instances/lent/stop", None).await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["phase"], "stopped", "{stopped}");
    wait_gone(new_head_pid, "the head's llama-server after the stop").await;
    wait_gone(new_rpc_pid, "the lender's rpc-server after the stop").await;
    assert!(lent(&lender).await.is_empty());
    let (_, taken) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_eq!(taken["taken"], json!([]), "{taken}");
}

/// The head's daemon killed mid-gang: its tunnel went with it, so the head's llama-server left
/// running has lost its lent device. The daemon started again stops that llama-server (not
/// adopted as a lone engine), ends the lease the lender still runs for it, and starts the gang
/// again, lease first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_whose_head_daemon_was_killed_starts_again_when_it_returns() {
    let root = tempdir();
    let (lender, mut head, _) = start_lent_gang(root.path()).await;
    head.gang_when("lent", Duration::from_secs(120), |g| g["phase"] == "ready")
        .await;
    let (head_pid, _) = head_process(&head).await;
    let rpc_pid = lent(&lender).await[0]["pid"].as_i64().unwrap();

    head.kill();
    head.serve().await;
    let killed_at = Instant::now();
    let back = head
        .gang_when("lent", Duration::from_secs(120), |g| g["phase"] == "ready")
        .await;
    println!(
        "from the head's daemon back to the gang ready again: {:.2} s ({})",
        killed_at.elapsed().as_secs_f64(),
        back["message"]
    );
    wait_gone(head_pid, "the head's llama-server the killed daemon left").await;
    wait_gone(
        rpc_pid,
        "the lender's rpc-server of the killed daemon's lease",
    )
    .await;
    let (new_head_pid, argv) = head_process(&head).await;
    assert_ne!(new_head_pid, head_pid);
    let leases = lent(&lender).await;
    assert_eq!(leases.len(), 1, "{leases:?}");
    let (_, taken) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    let endpoint = taken["taken"][0]["endpoint"].as_str().unwrap().to_owned();
    assert!(
        argv.windows(2).any(|w| w[0] == "--rpc" && w[1] == endpoint),
        "{argv:?} {taken}"
    );
    let key = gateway_key(&head).await;
    complete_through_the_head(&head, &key).await;

    // Stopped by the user, it stays stopped when the daemon starts again.
    let (status, stopped) = head.call("POST", "/api/v1/instances/lent/stop", None).await;
    assert_eq!(status, 200, "{stopped}");
    let new_rpc_pid = leases[0]["pid"].as_i64().unwrap();
    wait_gone(new_rpc_pid, "the lender's rpc-server after the stop").await;
    head.kill();
    head.serve().await;
    let (status, gang) = head.call("GET", "/api/v1/gangs/lent", None).await;
    assert_eq!(status, 404, "{gang}");
    assert!(lent(&lender).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_build_or_a_lender_down_is_refused_before_anything_starts() {
    let root = tempdir();
    let other = support::other_build(root.path()).await;
    let (mut lender, lender_build) = member(root.path(), "lender", &other).await;
    let (head, build) = member(root.path(), "head", &support::llama_server().await).await;
    head.pair_with(&lender).await;
    let model = support::tiny_runnable(root.path());
    let mut body = lent_profile(build["id"].as_i64().unwrap(), &model, "lender");
    body["gateway"] = json!({"on_demand": true});
    let (status, saved) = head.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");

    let (status, refused) = head.call("POST", "/api/v1/profiles/lent/start", None).await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap();
    let (theirs, ours) = (
        lender_build["version"].as_str().unwrap(),
        build["version"].as_str().unwrap(),
    );
    assert_ne!(theirs, ours);
    assert!(
        message.contains("'lender'") && message.contains(theirs) && message.contains(ours),
        "{message}"
    );
    assert!(lent(&lender).await.is_empty());

    lender.kill();
    let (status, refused) = head.call("POST", "/api/v1/profiles/lent/start", None).await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("'lender' cannot be asked"), "{message}");
    // Not as one engine (the gateway's start on request): only as a gang.
    let key = gateway_key(&head).await;
    let body = json!({"model": "lent", "prompt": "Hi", "max_tokens": 1});
    let (status, refused) = head
        .call_with(&key, "POST", "/v1/completions", Some(body))
        .await;
    let refused = refused.get("error").cloned().unwrap_or(refused);
    assert!(
        status >= 400
            && refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("starts as a gang")),
        "{status} {refused}"
    );
    let (_, instances) = head.call("GET", "/api/v1/instances", None).await;
    assert!(
        instances
            .as_array()
            .is_none_or(|all| all.iter().all(|i| i["name"] != "lent")),
        "{instances}"
    );
}

#[tokio::test]
async fn lenders_are_checked_at_save() {
    let root = tempdir();
    let (head, build) = member(root.path(), "head", &support::llama_server().await).await;
    let model = support::tiny_runnable(root.path());
    let mut body = lent_profile(build["id"].as_i64().unwrap(), &model, "lender");
    body["lenders"][0]["devices"] = json!(["CPU,-H"]);
    let (status, refused) = head.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("lenders: ") && m.contains("[\"CPU\"]")),
        "{refused}"
    );
}
