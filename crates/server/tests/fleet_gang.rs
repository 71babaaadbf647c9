//! vLLM across boxes as a gang, with real `rigdeck serve` daemons on loopback (a desk that
//! heads the gang, and the rigs it joined) and a stand-in vLLM on each: the head listens on its
//! master port and is healthy only once every follower has connected there; a follower
//! (`--headless`) connects and ends when its head goes, and the head ends when a follower goes,
//! as NCCL would. Each run writes its argv and its network environment.
//!
//! Checked: the argv and environment of each seat, the followers started before the head, a
//! killed follower stopping the gang and the gang starting again, a rig's daemon killed
//! (unreachable) and the gang back once it returns, a stop leaving nothing running on any rig;
//! a follower that never joins (timeout, everything stopped, named); a public interface address
//! refused at save and at start; another vLLM version on a rig refused naming both.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rigdeck_core::engines::{registry, EngineKind};
use serde_json::{json, Value};
use support::fleet_member::Member;

/// A venv where `import vllm` gives `version`, with a multi-node `vllm serve` stand-in that
/// appends `{argv, env, pid, at}` to `runs.jsonl` beside it. With `never_join`, a follower runs
/// but never connects to its head.
fn stand_in_vllm(dir: &Path, version: &str, never_join: bool) -> PathBuf {
    let (venv, _) = support::stand_in_vllm::venv(dir, version);
    let serve = format!(
        r##"import http.server, json, os, socket, sys, threading, time
args = sys.argv[3:]
def value(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
env = {{k: os.environ.get(k) for k in ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}}
with open({runs:?}, "a") as runs:
    runs.write(json.dumps({{"argv": sys.argv, "env": env, "pid": os.getpid(), "at": time.time()}}) + "\n")
nodes, rank = int(value("--nnodes", "1")), int(value("--node-rank", "0"))
master = (value("--master-addr"), int(value("--master-port", "0")))
if rank > 0:
    if {never_join}:
        time.sleep(3600)
    deadline = time.time() + 60
    while True:
        try:
            head = socket.create_connection(master, timeout=1)
            break
        except OSError:
            if time.time() > deadline:
                sys.exit(3)
            time.sleep(0.1)
    head.sendall(b"%d\n" % rank)
    head.settimeout(None)
    head.recv(1)
    print("the head went away", flush=True)
    sys.exit(4)
ready = threading.Event()
def follow(conn):
    conn.recv(1)
    print("a follower went away", flush=True)
    os._exit(5)
def gather(server):
    conns = []
    while len(conns) < nodes - 1:
        conn, _ = server.accept()
        conn.recv(16)
        conns.append(conn)
    ready.set()
    for conn in conns:
        threading.Thread(target=follow, args=(conn,), daemon=True).start()
if nodes > 1:
    threading.Thread(target=gather, args=(socket.create_server(master),), daemon=True).start()
else:
    ready.set()
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
        body = json.dumps({{"choices": [{{"index": 0, "text": " hi"}}]}}).encode()
        self.answer(200 if ready.is_set() else 503, body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Handler).serve_forever()
"##,
        runs = dir.join("runs.jsonl").display().to_string(),
        never_join = if never_join { "True" } else { "False" },
    );
    support::stand_in_vllm::install_program(&venv, &serve);
    venv
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`'s 22nd field).
fn process_start_ticks(pid: u64) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(19).unwrap().parse().unwrap()
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

/// Each run of the stand-in in `dir`, in order.
fn runs(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("runs.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn argv(run: &Value) -> Vec<String> {
    serde_json::from_value(run["argv"].clone()).unwrap()
}

fn has(argv: &[String], pair: [&str; 2]) -> bool {
    argv.windows(2).any(|w| w == pair)
}

/// A model folder every box has at the same path (the boxes share this machine).
fn model_folder(root: &Path) -> PathBuf {
    let model = root.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    model
}

fn gang_profile(
    build: i64,
    model: &Path,
    followers: &[(&str, &str)],
    port: u16,
    join_s: u64,
) -> Value {
    let nodes: Vec<Value> = followers
        .iter()
        .map(|(peer, interface)| json!({"peer": peer, "interface": interface}))
        .collect();
    json!({
        "name": "big", "engine_build_id": build, "model": model,
        "gpu_memory_fraction": 0.25, "env": {"CUDA_VISIBLE_DEVICES": "0"},
        "restart": {"policy": "on_failure", "max_restarts": 3,
            "initial_backoff_ms": 200, "max_backoff_ms": 1000},
        "multi_node": {"interface": "lo", "nodes": nodes, "master_port": port,
            "join_timeout_s": join_s},
    })
}

/// The instance `name` on `member`, if listed.
async fn instance(member: &Member, name: &str) -> Option<Value> {
    let (status, list) = member.call("GET", "/api/v1/instances", None).await;
    assert_eq!(status, 200, "{list}");
    list.as_array()
        .and_then(|all| all.iter().find(|i| i["name"] == name).cloned())
}

fn alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Nothing of the gang runs on `member`: its instance is not running and its process is gone.
async fn nothing_running(member: &Member, name: &str, dir: &Path) {
    if let Some(view) = instance(member, name).await {
        assert!(
            !["starting", "loading", "ready", "stopping"]
                .contains(&view["phase"].as_str().unwrap_or("")),
            "{name} still runs on {}: {view}",
            member.name
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for run in runs(dir) {
        let pid = run["pid"].as_i64().unwrap();
        while alive(pid) {
            assert!(
                Instant::now() < deadline,
                "pid {pid} of {} still alive",
                member.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_starts_followers_first_and_restarts_when_a_member_dies_or_its_rig_returns() {
    let root = tempfile::tempdir().unwrap();
    let mut desk = Member::start(root.path(), "desk", "2x5060ti.json").await;
    let mut rig = Member::start(root.path(), "mini", "2x5060ti.json").await;
    desk.pair_with(&rig).await;
    let (desk_dir, rig_dir) = (root.path().join("desk-vllm"), root.path().join("mini-vllm"));
    let desk_build = register(&desk, &stand_in_vllm(&desk_dir, "0.33.0", false)).await;
    register(&rig, &stand_in_vllm(&rig_dir, "0.33.0", false)).await;
    let model = model_folder(root.path());
    let port = support::daemon_process::free_port();

    let body = gang_profile(desk_build, &model, &[("mini", "lo")], port, 30);
    let (status, saved) = desk.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    let exposes = saved["exposes"].as_str().unwrap_or_default();
    assert!(
        exposes.contains("lo on this rig and lo on 'mini'") && exposes.contains("unencrypted"),
        "{saved}"
    );
    assert!(
        saved["command_line"]
            .as_str()
            .is_some_and(|c| c.contains("--nnodes 2 --node-rank 0")),
        "{saved}"
    );
    // Not as one engine: only as a gang.
    let (status, started) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(
        started["members"].as_array().map(Vec::len),
        Some(2),
        "{started}"
    );
    let ready = desk
        .gang_when("big", Duration::from_secs(60), |g| g["phase"] == "ready")
        .await;
    assert_eq!(ready["restarts"], 0, "{ready}");

    let (head, follower) = (runs(&desk_dir), runs(&rig_dir));
    assert_eq!(
        (head.len(), follower.len()),
        (1, 1),
        "{head:?} {follower:?}"
    );
    // Spawn order, as the kernel saw it (a stand-in's own clock reading comes after its Python
    // started, which under load can be after its head's).
    let started = |run: &Value| process_start_ticks(run["pid"].as_u64().unwrap());
    assert!(
        started(&follower[0]) <= started(&head[0]),
        "the follower starts first"
    );
    let (head_argv, follower_argv) = (argv(&head[0]), argv(&follower[0]));
    let port_text = port.to_string();
    for seat in [&head_argv, &follower_argv] {
        assert!(has(seat, ["--nnodes", "2"]), "{seat:?}");
        assert!(has(seat, ["--master-addr", "127.0.0.1"]), "{seat:?}");
        assert!(has(seat, ["--master-port", &port_text]), "{seat:?}");
        assert!(has(seat, ["--pipeline-parallel-size", "2"]), "{seat:?}");
    }
    assert!(
        has(&head_argv, ["--served-model-name", "big"]),
        "{head_argv:?}"
    );
    assert!(has(&head_argv, ["--node-rank", "0"]) && !head_argv.contains(&"--headless".into()));
    assert!(
        has(&follower_argv, ["--node-rank", "1"]) && follower_argv.contains(&"--headless".into())
    );
    for run in [&head[0], &follower[0]] {
        assert_eq!(
            run["env"],
            json!({"VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"})
        );
    }
    let on_rig = instance(&rig, "big.rank1")
        .await
        .expect("the follower is listed on its rig");
    assert_eq!(on_rig["phase"], "ready", "{on_rig}");

    // A follower killed: the head ends with it, the gang stops all and starts again.
    let killed_at = Instant::now();
    let pid = on_rig["pid"].as_i64().unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let again = desk
        .gang_when("big", Duration::from_secs(60), |g| {
            g["phase"] == "ready" && g["restarts"] == 1
        })
        .await;
    println!(
        "a killed follower to the gang ready again: {:.1} s",
        killed_at.elapsed().as_secs_f64()
    );
    assert_eq!(
        (runs(&desk_dir).len(), runs(&rig_dir).len()),
        (2, 2),
        "{again}"
    );

    // The rig's daemon gone: its member counts as dead, everything stops; back when it returns.
    rig.kill();
    let waiting = desk
        .gang_when("big", Duration::from_secs(30), |g| {
            g["phase"] == "restarting"
                && g["message"].as_str().is_some_and(|m| m.contains("waiting"))
        })
        .await;
    assert!(
        waiting["message"].as_str().unwrap().contains("'mini'"),
        "{waiting}"
    );
    assert!(instance(&desk, "big")
        .await
        .is_none_or(|v| v["phase"] != "ready"));
    rig.serve().await;
    let back = desk
        .gang_when("big", Duration::from_secs(90), |g| {
            g["phase"] == "ready" && g["restarts"] == 2
        })
        .await;
    assert_eq!(runs(&rig_dir).len(), 3, "{back}");

    // The desk's daemon killed: the next one stops what the gang left on both rigs (the head
    // here, the follower there) and starts it again, the follower first.
    let follower_pid = instance(&rig, "big.rank1").await.unwrap()["pid"].as_i64();
    desk.kill();
    desk.serve().await;
    let again = desk
        .gang_when("big", Duration::from_secs(90), |g| g["phase"] == "ready")
        .await;
    assert_eq!(
        (runs(&desk_dir).len(), runs(&rig_dir).len()),
        (4, 4),
        "{again}"
    );
    let follower_pid = follower_pid.unwrap();
    assert!(
        !alive(follower_pid),
        "the old follower (pid {follower_pid}) runs on"
    );
    let (head, follower) = (runs(&desk_dir), runs(&rig_dir));
    assert!(
        started(&follower[3]) <= started(&head[3]),
        "the follower starts first"
    );

    // A stop: every member, on every rig.
    let (status, stopped) = desk.call("POST", "/api/v1/instances/big/stop", None).await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["phase"], "stopped", "{stopped}");
    nothing_running(&desk, "big", &desk_dir).await;
    nothing_running(&rig, "big.rank1", &rig_dir).await;
}

/// A veth interface with a public (documentation) address, removed (with its peer) when
/// dropped.
struct PublicInterface(String);

impl PublicInterface {
    fn add() -> Self {
        let name = format!("rgkpub{}", std::process::id() % 100_000);
        let octet = std::process::id() % 200 + 20;
        let ip = |args: &[&str]| {
            let status = std::process::Command::new("ip")
                .args(args)
                .status()
                .expect("iproute2");
            assert!(
                status.success(),
                "ip {args:?} (the test needs root to add an interface)"
            );
        };
        let peer = format!("rgkpeer{}", std::process::id() % 100_000);
        ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]);
        ip(&[
            "addr",
            "add",
            &format!("198.51.100.{octet}/32"),
            "dev",
            &name,
        ]);
        ip(&["link", "set", &name, "up"]);
        Self(name)
    }
}

impl Drop for PublicInterface {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_never_joins_stops_everything_and_bad_boxes_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let desk = Member::start(root.path(), "desk", "2x5060ti.json").await;
    let rig = Member::start(root.path(), "slow", "2x5060ti.json").await;
    desk.pair_with(&rig).await;
    let (desk_dir, rig_dir) = (root.path().join("desk-vllm"), root.path().join("slow-vllm"));
    let desk_build = register(&desk, &stand_in_vllm(&desk_dir, "0.33.0", false)).await;
    let newer = register(
        &desk,
        &stand_in_vllm(&root.path().join("newer"), "0.34.0", false),
    )
    .await;
    register(&rig, &stand_in_vllm(&rig_dir, "0.33.0", true)).await;
    let model = model_folder(root.path());
    let port = support::daemon_process::free_port();

    // A public address: refused on this rig at save, and on the follower's rig at start.
    let public = PublicInterface::add();
    let mut body = gang_profile(desk_build, &model, &[("slow", "lo")], port, 3);
    body["multi_node"]["interface"] = json!(public.0);
    let (status, refused) = desk.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(&public.0) && message.contains("a public address"),
        "{refused}"
    );
    let body = gang_profile(desk_build, &model, &[("slow", &public.0)], port, 3);
    let (status, saved) = desk.call("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    let (status, refused) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("'slow' cannot carry the engine's traffic")
            && message.contains("198.51.100."),
        "{refused}"
    );
    drop(public);

    // Another vLLM version on the head than on the rig: refused, both named.
    let body = gang_profile(newer, &model, &[("slow", "lo")], port, 3);
    let (status, _) = desk.call("PUT", "/api/v1/profiles/big", Some(body)).await;
    assert_eq!(status, 200);
    let (status, refused) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("'slow' has vllm 0.33.0 but the head runs vllm 0.34.0"),
        "{refused}"
    );
    assert!(
        runs(&rig_dir).is_empty() && runs(&desk_dir).is_empty(),
        "nothing started"
    );

    // A follower that never joins: the head waits its join timeout, then everything stops.
    let body = gang_profile(desk_build, &model, &[("slow", "lo")], port, 3);
    let (status, _) = desk.call("PUT", "/api/v1/profiles/big", Some(body)).await;
    assert_eq!(status, 200);
    let (status, started) = desk.call("POST", "/api/v1/profiles/big/start", None).await;
    assert_eq!(status, 200, "{started}");
    let failed = desk
        .gang_when("big", Duration::from_secs(60), |g| g["phase"] == "failed")
        .await;
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("rank 1 on 'slow' (interface lo, 127.0.0.1) never joined")
            && message.contains("not ready within 3 s")
            && message.contains("every member was stopped"),
        "{failed}"
    );
    assert_eq!(
        (runs(&desk_dir).len(), runs(&rig_dir).len()),
        (1, 1),
        "each started once"
    );
    nothing_running(&desk, "big", &desk_dir).await;
    nothing_running(&rig, "big.rank1", &rig_dir).await;
}
