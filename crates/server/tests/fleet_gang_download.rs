//! A gang's model offered as a download to a follower's rig that lacks it, with real `rigdeck
//! serve` daemons, the hub crate's fake Hugging Face hub and a stand-in vLLM. The follower runs
//! in a mount namespace of its own with an empty Hugging Face cache at the desk's cache path,
//! as a second box would be: the desk's download of the model is not there.
//!
//! Checked: the start refused naming the follower and offering the fetch; the survey saying
//! where the download lands there; the fetch starting the download on the follower, which ends
//! with the hub's files at the profile's path, and the gang then ready; a model that did not come
//! from the hub refused with the advice to copy it (rsync).

mod support;

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use rigdeck_core::engines::{registry, EngineKind};
use serde_json::{json, Value};
use support::daemon_process::Daemon;
use support::fleet_member::Member;

const REPO: &str = "org/Tiny-vllm";

fn repo() -> FakeRepo {
    FakeRepo::new(
        REPO,
        0x5a,
        vec![
            FakeFile::new("config.json", 300, 1, false),
            FakeFile::new("model.safetensors", 1 << 20, 2, true),
        ],
    )
}

/// Whether this process may make a mount namespace (it runs as root).
fn can_unshare() -> bool {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts `member`'s daemon in a mount namespace where `hidden` is an empty tmpfs; waits until
/// its API answers.
async fn serve_without(member: &mut Member, hidden: &Path) {
    let plain = support::rigdeck_in(&member.dir);
    let mut command = Command::new("unshare");
    command
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs tmpfs "$0" && exec "$@""#)
        .arg(hidden)
        .arg(plain.get_program());
    for (key, value) in plain.get_envs() {
        if let Some(value) = value {
            command.env(key, value);
        }
    }
    let child = command
        .env("RIGDECK_NVML_DOUBLE_RIG", support::fixture(&member.rig))
        .args(["serve", "--bind", &format!("127.0.0.1:{}", member.api_port)])
        .args(["--fleet-bind", &format!("127.0.0.1:{}", member.fleet_port)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rigdeck serve in its own mounts");
    member.daemon = Some(Daemon(child, member.dir.join("data")));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        member.token = std::fs::read_to_string(member.dir.join("config/token"))
            .unwrap_or_default()
            .trim()
            .to_owned();
        if !member.token.is_empty() && member.call("GET", "/api/v1/fleet", None).await.0 == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "{} did not start", member.name);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stand-in vLLM: a follower connects to its head's master port; the head is healthy once
/// every follower has.
fn stand_in_vllm(dir: &Path) -> PathBuf {
    let (venv, _) = support::stand_in_vllm::venv(dir, "0.33.0");
    let serve = r##"import http.server, socket, sys, threading, time
args = sys.argv[3:]
def value(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
nodes, rank = int(value("--nnodes", "1")), int(value("--node-rank", "0"))
master = (value("--master-addr"), int(value("--master-port", "0")))
if rank > 0:
    deadline = time.time() + 60
    while True:
        try:
            head = socket.create_connection(master, timeout=1)
            break
        except OSError:
            if time.time() > deadline:
                sys.exit(3)
            time.sleep(0.1)
    head.sendall(b"1\n")
    head.settimeout(None)
    head.recv(1)
    sys.exit(4)
ready = threading.Event()
def gather(server):
    conns = []
    while len(conns) < nodes - 1:
        conn, _ = server.accept()
        conn.recv(16)
        conns.append(conn)
    ready.set()
    while True:
        time.sleep(3600)
threading.Thread(target=gather, args=(socket.create_server(master),), daemon=True).start()
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, code, body):
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(200 if ready.is_set() else 503, b"")
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.answer(200 if ready.is_set() else 503, b'{"choices": [{"index": 0, "text": " hi"}]}')
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Handler).serve_forever()
"##;
    support::stand_in_vllm::install_program(&venv, serve);
    venv
}

/// Registers `venv` in the member's database, as `rigdeck engines register` does; its id.
async fn register(member: &Member, venv: &Path) -> i64 {
    let store = rigdeck_core::store::Store::open(&member.dir.join("data/rigdeck.db"))
        .await
        .expect("the daemon's database");
    let build = registry::register_path(&store, venv, Some(EngineKind::Vllm), None, 0)
        .await
        .unwrap_or_else(|err| panic!("{} registers: {err}", venv.display()));
    store.close().await;
    build.id
}

/// Waits until `member`'s download `id` is done; its view.
async fn download_done(member: &Member, id: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, list) = member.call("GET", "/api/v1/downloads", None).await;
        assert_eq!(status, 200, "{list}");
        let view = list
            .as_array()
            .and_then(|all| all.iter().find(|d| d["id"] == id).cloned())
            .unwrap_or_default();
        match view["state"].as_str() {
            Some("done") => return view,
            Some("failed" | "cancelled") => panic!("{}'s download failed: {view}", member.name),
            _ => {}
        }
        assert!(Instant::now() < deadline, "never done: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gang_profile(name: &str, build: i64, model: &Path, port: u16) -> Value {
    json!({
        "name": name, "engine_build_id": build, "model": model,
        "gpu_memory_fraction": 0.25, "env": {"CUDA_VISIBLE_DEVICES": "0"},
        "multi_node": {"interface": "lo", "nodes": [{"peer": "mini", "interface": "lo"}],
            "master_port": port, "join_timeout_s": 30},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_lacking_the_model_downloads_the_heads_copy_and_the_gang_starts() {
    if !can_unshare() {
        eprintln!("skipped: a mount namespace (unshare -m) needs root; the follower cannot be given a cache of its own");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let hub = RunningHub::start(vec![repo()]).await;
    let cache = root.path().join("hf");
    std::fs::create_dir_all(&cache).unwrap();
    std::env::set_var("HF_ENDPOINT", &hub.url);
    std::env::set_var("HF_HUB_CACHE", &cache);
    std::env::set_var("HF_HOME", root.path().join("hf-home"));
    std::env::remove_var("HF_TOKEN");

    let desk = Member::start(root.path(), "desk", "2x5060ti.json").await;
    let mut mini = Member::new(root.path(), "mini", "2x5060ti.json");
    serve_without(&mut mini, &cache).await;
    desk.pair_with(&mini).await;
    let desk_build = register(&desk, &stand_in_vllm(&root.path().join("desk-vllm"))).await;
    register(&mini, &stand_in_vllm(&root.path().join("mini-vllm"))).await;

    // The desk downloads the model from the hub: a snapshot folder of its cache.
    let (status, queued) = desk
        .call("POST", "/api/v1/downloads", Some(json!({"repo": REPO})))
        .await;
    assert_eq!(status, 201, "{queued}");
    let done = download_done(&desk, queued["id"].as_i64().unwrap()).await;
    let config = PathBuf::from(done["paths"][0].as_str().expect("a path"));
    let model = config.parent().unwrap().to_path_buf();
    assert!(
        model.ends_with(format!("snapshots/{}", repo().commit)),
        "{done}"
    );

    let port = support::daemon_process::free_port();
    let body = gang_profile("big", desk_build, &model, port);
    let (status, saved) = desk.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");

    // Refused, naming the follower and offering the fetch.
    let (status, refused) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    let shown = model.display().to_string();
    assert!(
        message.contains(&format!("'mini' has no model at '{shown}'")),
        "{message}"
    );
    assert!(
        message.contains(REPO) && message.contains(&repo().commit),
        "{message}"
    );
    assert!(
        message.contains("POST /api/v1/gangs/big/fetch-model"),
        "{message}"
    );
    assert!(
        message.contains(&format!("'mini' would download it to '{shown}'")),
        "{message}"
    );

    let (status, survey) = desk
        .call("GET", "/api/v1/gangs/big/fetch-model", None)
        .await;
    assert_eq!(status, 200, "{survey}");
    assert_eq!(survey["missing"][0]["rig"], "mini", "{survey}");
    assert_eq!(survey["missing"][0]["same_path"], true, "{survey}");
    assert_eq!(survey["missing"][0]["download_id"], Value::Null, "{survey}");
    assert_eq!(survey["origin"]["request"]["repo"], REPO, "{survey}");

    // The fetch starts the download on the follower's rig; it lands at the profile's path there.
    let (status, fetched) = desk
        .call("POST", "/api/v1/gangs/big/fetch-model", None)
        .await;
    assert_eq!(status, 200, "{fetched}");
    let id = fetched["missing"][0]["download_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no download on mini: {fetched}"));
    assert_eq!(fetched["missing"][0]["lands_at"], json!(model), "{fetched}");
    let on_mini = download_done(&mini, id).await;
    assert_eq!(on_mini["paths"][0], json!(config), "{on_mini}");

    // Now every box has it: the gang starts and is ready.
    let (status, started) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 200, "{started}");
    desk.gang_when("big", Duration::from_secs(60), |g| g["phase"] == "ready")
        .await;
    let (status, stopped) = desk.call("POST", "/api/v1/instances/big/stop", None).await;
    assert_eq!(status, 200, "{stopped}");

    // A model the desk did not download: nothing to fetch, copy it.
    let handmade = cache.join("handmade");
    std::fs::create_dir_all(&handmade).unwrap();
    std::fs::write(handmade.join("config.json"), "{}").unwrap();
    let port = support::daemon_process::free_port();
    let body = gang_profile("hand", desk_build, &handmade, port);
    let (status, saved) = desk.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    let (status, refused) = desk.call("POST", "/api/v1/profiles/hand/start", None).await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    let shown = handmade.display().to_string();
    assert!(
        message.contains(&format!("rsync -a '{shown}/' mini:'{shown}/'")),
        "{message}"
    );
    assert!(!message.contains("fetch-model"), "{message}");
    let (_, survey) = desk
        .call("GET", "/api/v1/gangs/hand/fetch-model", None)
        .await;
    assert_eq!(survey["origin"], Value::Null, "{survey}");
    assert_eq!(survey["missing"][0]["rig"], "mini", "{survey}");
}
