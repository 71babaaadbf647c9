//! llama.cpp RPC through the fleet's channel, with real daemons, the real `rpc-server` and
//! `llama-server` of Rigdeck's cached CPU build and the tiny model: a head takes a lease of a
//! paired lender's CPU, its llama-server reaches the lent device through the tunnel and
//! answers a completion; the rpc-server listens on loopback only; mismatched builds, unknown
//! devices, an unpinned peer and another peer's lease are refused; nothing is left running
//! once a lease is released, its peer removed or the lender's daemon killed. One test puts the
//! lender in a network namespace of its own, so its loopback is another host's.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rigdeck_core::engines::registry::EngineBuild;
use rigdeck_fleet::rpc_lend::{LeaseRequest, LendingBuild, Lent, RpcBuild, RpcServer};
use rigdeck_fleet::{Fingerprint, FleetErrorKind};
use serde_json::{json, Value};
use support::fleet_member::Member;

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rigdeck-fleet-rpc")
        .tempdir()
        .unwrap()
}

/// The cached build's `rpc-server` (built with the RPC backend beside `llama-server`).
async fn rpc_server() -> PathBuf {
    let program = support::llama_server().await.with_file_name("rpc-server");
    assert!(
        program.is_file(),
        "{} is missing: the cached llama.cpp build predates the RPC backend (run `cargo nextest run -p rigdeck-core --test engine_build`)",
        program.display()
    );
    program
}

/// A daemon with `builds` registered, then the cached build (its newest).
async fn member(root: &Path, name: &str, rig: &str, builds: &[PathBuf]) -> (Member, EngineBuild) {
    let mut member = Member::new(root, name, rig);
    let data = member.dir.join("data");
    for program in builds {
        support::register_engine(&data, program).await;
    }
    let build = support::register_llama_server(&data).await;
    member.serve().await;
    (member, build)
}

/// A lender and a head (the head joined the lender), each with the cached build registered.
async fn lender_and_head(root: &Path) -> (Member, Member) {
    let (lender, _) = member(root, "lender", "cpu-only.json", &[]).await;
    let (head, _) = member(root, "head", "4x3090.json", &[]).await;
    head.pair_with(&lender).await;
    (lender, head)
}

async fn take_lease(head: &Member, devices: Value) -> (u16, Value) {
    head.call(
        "POST",
        "/api/v1/fleet/peers/lender/rpc",
        Some(json!({ "devices": devices })),
    )
    .await
}

/// The lender's one lent lease.
async fn lent(lender: &Member) -> Value {
    let (status, leases) = lender.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_eq!(status, 200, "{leases}");
    assert_eq!(leases["lent"].as_array().map(Vec::len), Some(1), "{leases}");
    leases["lent"][0].clone()
}

async fn wait_gone(pid: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while support::process_alive(pid.into()) {
        assert!(
            Instant::now() < deadline,
            "{what}: the rpc-server (pid {pid}) still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The local addresses listening on `port`, as the kernel's socket table has them.
fn listening_addresses(port: u16) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

/// The real llama-server on the tiny model, every layer on the lent device `RPC0` at `endpoint`.
struct HeadServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for HeadServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HeadServer {
    async fn start(dir: &Path, endpoint: &str) -> Self {
        let model = support::tiny_runnable(dir);
        let program = support::llama_server().await;
        let port = support::daemon_process::free_port();
        let log = dir.join("llama-server.log");
        let child = Command::new(&program)
            .args(["-m"])
            .arg(&model)
            .args(["--rpc", endpoint, "--device", "RPC0", "-ngl", "99"])
            .args(["-c", "512", "-t", "1", "--host", "127.0.0.1", "-lv", "4"])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start llama-server");
        let mut server = Self { child, port, log };
        server.wait_healthy().await;
        server
    }

    async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let url = format!("http://127.0.0.1:{}/health", self.port);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("llama-server exited ({status}): {}", self.log_text());
            }
            if reqwest::get(&url).await.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server never became healthy: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn complete(&self) -> Value {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/completion", self.port))
            .json(&json!({ "prompt": "Once upon a time", "n_predict": 8, "temperature": 0 }))
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("the completion answers")
            .json()
            .await
            .unwrap()
    }
}

/// The completion came from the lent device: tokens predicted, the model's weights went
/// through the tunnel, and llama.cpp put its layers on RPC0.
fn assert_ran_on_the_lent_device(head_server: &HeadServer, completion: &Value, taken: &Value) {
    assert!(
        completion["tokens_predicted"].as_u64().unwrap_or(0) > 0,
        "{completion}"
    );
    let log = head_server.log_text();
    let on_rpc = rpc_model_buffer_mib(&log)
        .unwrap_or_else(|| panic!("llama-server put no weights on RPC0: {log}"));
    assert!(on_rpc > 1.0, "{log}");
    let sent = taken["bytes_sent"].as_u64().unwrap() as f64;
    assert!(
        sent >= on_rpc * 1024.0 * 1024.0,
        "{sent} bytes went through the tunnel for {on_rpc} MiB of weights on RPC0: {taken}"
    );
    assert!(taken["bytes_received"].as_u64().unwrap() > 0, "{taken}");
    assert!(taken["tunnels_opened"].as_u64().unwrap() >= 1, "{taken}");
}

/// `… RPC0[127.0.0.1:P] model buffer size =    67.42 MiB` in llama-server's log.
fn rpc_model_buffer_mib(log: &str) -> Option<f64> {
    log.lines()
        .filter(|l| l.contains("RPC0") && l.contains("model buffer size"))
        .find_map(|l| {
            l.rsplit_once('=')?
                .1
                .trim()
                .strip_suffix("MiB")?
                .trim()
                .parse()
                .ok()
        })
}

#[tokio::test]
async fn a_lent_cpu_answers_the_heads_llama_server_through_the_tunnel() {
    let root = tempdir();
    let (lender, head) = lender_and_head(root.path()).await;
    let (status, taken) = take_lease(&head, json!(["CPU"])).await;
    assert_eq!(status, 201, "{taken}");
    let endpoint = taken["endpoint"].as_str().unwrap().to_owned();
    assert!(endpoint.starts_with("127.0.0.1:"), "{taken}");
    assert_eq!(taken["devices"][0]["name"], "CPU", "{taken}");
    assert!(
        taken["devices"][0]["total_mib"].as_u64().unwrap() > 0,
        "{taken}"
    );

    // The lender's rpc-server listens on its loopback only.
    let lease = lent(&lender).await;
    let pid = lease["pid"].as_u64().unwrap() as u32;
    let listen: SocketAddr = lease["listen"].as_str().unwrap().parse().unwrap();
    assert!(listen.ip().is_loopback(), "{lease}");
    assert_eq!(support::listeners_on(listen.port()), [i64::from(pid)]);
    assert_eq!(listening_addresses(listen.port()), [listen.to_string()]);

    let server = HeadServer::start(root.path(), &endpoint).await;
    let completion = server.complete().await;
    let (_, leases) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_ran_on_the_lent_device(&server, &completion, &leases["taken"][0]);
    drop(server);

    // Released: the endpoint closes and the lender's rpc-server is gone.
    let lease_id = taken["lease"].as_str().unwrap();
    let (status, released) = head
        .call("DELETE", &format!("/api/v1/fleet/rpc/{lease_id}"), None)
        .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["lender_confirmed"], true, "{released}");
    wait_gone(pid, "after the release").await;
    assert!(
        std::net::TcpStream::connect(&endpoint).is_err(),
        "the endpoint still listens"
    );
    let (_, leases) = lender.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_eq!(leases["lent"], json!([]), "{leases}");
    let (status, again) = head
        .call("DELETE", &format!("/api/v1/fleet/rpc/{lease_id}"), None)
        .await;
    assert_eq!(status, 404, "{again}");
}

#[tokio::test]
async fn mismatched_builds_unknown_devices_and_an_unpinned_head_are_refused() {
    let root = tempdir();
    let (lender, lender_build) = member(root.path(), "lender", "cpu-only.json", &[]).await;
    let other = support::other_build(root.path()).await;
    let (head, _) = member(root.path(), "head", "4x3090.json", &[other]).await;
    head.pair_with(&lender).await;

    // A head on another build (its first registered, id 1): refused by the lender, both
    // builds named, nothing started.
    let (status, refused) = head
        .call(
            "POST",
            "/api/v1/fleet/peers/lender/rpc",
            Some(json!({ "devices": ["CPU"], "engine_build_id": 1 })),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap();
    let (lender_version, head_version) = (lender_build.version.as_str(), "9999 (deadbee)");
    assert_ne!(lender_version, head_version);
    assert!(
        message.contains(&format!("runs {lender_version}"))
            && message.contains(&format!("the caller {head_version}")),
        "{message}"
    );
    let (_, leases) = lender.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_eq!(leases["lent"], json!([]), "{leases}");

    // A device the lender does not have: said, with the ones it has.
    let (status, refused) = take_lease(&head, json!(["NOPE7"])).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("NOPE7") && message.contains("CPU:"),
        "{message}"
    );
    let (status, refused) = take_lease(&head, json!(["CPU,-H"])).await;
    assert_eq!(status, 400, "{refused}");

    // The lender unpins the head: its lease ends, its tunnel is refused, no new lease.
    let (status, taken) = take_lease(&head, json!(["CPU"])).await;
    assert_eq!(status, 201, "{taken}");
    let pid = lent(&lender).await["pid"].as_u64().unwrap() as u32;
    let (status, removed) = lender
        .call("DELETE", "/api/v1/fleet/peers/head", None)
        .await;
    assert_eq!(status, 200, "{removed}");
    wait_gone(pid, "after the head was unpinned").await;
    let endpoint = taken["endpoint"].as_str().unwrap();
    let mut stream = tokio::net::TcpStream::connect(endpoint).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
    )
    .await
    .expect("the refused tunnel closes");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the tunnel carried {read:?}"
    );
    let (status, refused) = take_lease(&head, json!(["CPU"])).await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("no longer knows"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_lease_ends_with_the_lenders_daemon_even_killed() {
    let root = tempdir();
    let (mut lender, head) = lender_and_head(root.path()).await;
    let (status, taken) = take_lease(&head, json!(["CPU"])).await;
    assert_eq!(status, 201, "{taken}");
    let pid = lent(&lender).await["pid"].as_u64().unwrap() as u32;
    assert!(support::process_alive(pid.into()));
    lender.kill();
    wait_gone(pid, "after the lender's daemon was killed").await;
}

#[tokio::test]
async fn a_lease_is_its_peers_alone_and_a_taken_port_is_said() {
    let program = rpc_server().await;
    let build = RpcBuild {
        version: "v1".into(),
        commit: None,
    };
    let lending = LendingBuild {
        rpc_server: program.clone(),
        build: build.clone(),
    };
    let (owner, other) = (Fingerprint::of_der(b"owner"), Fingerprint::of_der(b"other"));
    let lent = Lent::default();
    let request = LeaseRequest {
        devices: vec!["CPU".into()],
        build,
    };
    let granted = lent.grant(owner, &request, &lending).await.unwrap();
    assert_eq!(granted.devices[0].name, "CPU");
    let pid = lent.list()[0].pid.unwrap();
    for err in [
        lent.open_tunnel(&granted.lease, other).err().unwrap(),
        lent.end(&granted.lease, other).unwrap_err(),
    ] {
        assert_eq!(err.kind, FleetErrorKind::NotFound, "{err}");
    }
    assert!(
        support::process_alive(pid.into()),
        "another peer ended the lease"
    );
    lent.end(&granted.lease, owner).unwrap();
    wait_gone(pid, "after its owner ended it").await;

    // A lease its head left without a tunnel ends; one in use does not.
    let idle = lent.grant(owner, &request, &lending).await.unwrap();
    let used = lent.grant(owner, &request, &lending).await.unwrap();
    let idle_pid = lent
        .list()
        .iter()
        .find(|l| l.lease == idle.lease)
        .unwrap()
        .pid
        .unwrap();
    let (_, tunnel) = lent.open_tunnel(&used.lease, owner).unwrap();
    assert_eq!(lent.end_idle(Duration::from_secs(60)), 0);
    assert_eq!(lent.end_idle(Duration::ZERO), 1);
    wait_gone(idle_pid, "once idle").await;
    assert_eq!(lent.list().len(), 1);
    drop(tunnel);
    assert_eq!(lent.end_idle(Duration::ZERO), 1);
    assert!(lent.list().is_empty());

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let err = RpcServer::start(&program, port, &["CPU".to_owned()])
        .await
        .err()
        .expect("a taken port fails the start");
    assert_eq!(err.kind, FleetErrorKind::Conflict, "{err}");
    assert!(
        err.message.contains(&format!(
            "the RPC port 127.0.0.1:{port} is taken by another process"
        )),
        "{err}"
    );
}

/// The lender in a network namespace of its own (its loopback is not this host's), joined to
/// this host by a veth pair; removed when dropped.
struct LenderHost {
    netns: String,
    ip: String,
    link: String,
}

impl LenderHost {
    fn make() -> Option<Self> {
        let id = std::process::id() % 100_000;
        let host = Self {
            netns: format!("rdrpc{id}"),
            ip: "10.251.0.1".to_owned(),
            link: format!("rdr{id}h"),
        };
        let (ns, link) = (&host.netns, &host.link);
        let steps = [
            format!("netns add {ns}"),
            format!("link add {link} type veth peer name rdr{id}l netns {ns}"),
            format!("-n {ns} link set lo up"),
            format!("-n {ns} addr add {}/30 dev rdr{id}l", host.ip),
            "addr add 10.251.0.2/30 dev LINK".replace("LINK", link),
            format!("-n {ns} link set rdr{id}l up"),
            format!("link set {link} up"),
        ];
        for step in &steps {
            match Command::new("ip").args(step.split(' ')).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    println!(
                        "skipped: cannot make a network namespace (`ip {step}`: {})",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    return None;
                }
                Err(err) => {
                    println!("skipped: cannot run `ip`: {err}");
                    return None;
                }
            }
        }
        Some(host)
    }

    /// `rigdeck ARGS` in the namespace against the daemon of `dir` on `api_port`.
    fn rigdeck(&self, dir: &Path, api_port: u16) -> Command {
        let base = support::rigdeck_in(dir);
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.netns])
            .arg(base.get_program());
        for (key, value) in base.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        command.env("RIGDECK_URL", format!("http://127.0.0.1:{api_port}"));
        command
    }
}

impl Drop for LenderHost {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
    }
}

#[tokio::test]
async fn a_lender_on_another_host_lends_through_the_channel_only() {
    let Some(host) = LenderHost::make() else {
        return;
    };
    let root = tempdir();
    let dir = root.path().join("lender");
    std::fs::create_dir_all(dir.join("config/fleet")).unwrap();
    std::fs::write(dir.join("config/fleet/name"), "lender\n").unwrap();
    support::register_llama_server(&dir.join("data")).await;
    let (api_port, fleet_port) = (
        support::daemon_process::free_port(),
        support::daemon_process::free_port(),
    );
    let child = host
        .rigdeck(&dir, api_port)
        .env("RIGDECK_NVML_DOUBLE_RIG", support::fixture("cpu-only.json"))
        .args(["serve", "--bind", &format!("127.0.0.1:{api_port}")])
        .args(["--fleet-bind", &format!("{}:{fleet_port}", host.ip)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = support::daemon_process::Daemon(child, dir.join("data"));
    let lender_cli = |args: &[&str]| -> (bool, String) {
        let out = host.rigdeck(&dir, api_port).args(args).output().unwrap();
        let (stdout, stderr) = support::output_text(&out);
        (
            out.status.success(),
            if out.status.success() { stdout } else { stderr },
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lender_cli(&["fleet", "identity"]).0 {
        assert!(Instant::now() < deadline, "the lender did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut head = Member::new(root.path(), "head", "4x3090.json");
    support::register_llama_server(&head.dir.join("data")).await;
    head.serve().await;
    let (ok, code) = lender_cli(&["fleet", "invite"]);
    assert!(ok, "{code}");
    let (status, joined) = head
        .call(
            "POST",
            "/api/v1/fleet/join",
            Some(json!({ "code": code.trim() })),
        )
        .await;
    assert_eq!(status, 200, "{joined}");

    // The CLI prints the endpoint alone.
    let out = support::rigdeck_in(&head.dir)
        .env("RIGDECK_URL", head.url(""))
        .args(["fleet", "lend", "lender", "--devices", "CPU"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&out);
    assert!(out.status.success(), "{stderr}");
    let endpoint = stdout.trim().to_owned();
    assert!(endpoint.starts_with("127.0.0.1:"), "{stdout}");
    assert!(stderr.contains(&format!("--rpc {endpoint}")), "{stderr}");

    // The rpc-server is on the lender's loopback: not reachable from this host at all.
    let (ok, listed) = lender_cli(&["fleet", "lend", "--list", "--json"]);
    assert!(ok, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let listen: SocketAddr = listed["lent"][0]["listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(listen.ip().is_loopback(), "{listed}");
    let direct = format!("{}:{}", host.ip, listen.port());
    assert!(
        std::net::TcpStream::connect_timeout(&direct.parse().unwrap(), Duration::from_secs(2))
            .is_err()
    );

    let server = HeadServer::start(root.path(), &endpoint).await;
    let completion = server.complete().await;
    let (_, leases) = head.call("GET", "/api/v1/fleet/rpc", None).await;
    assert_ran_on_the_lent_device(&server, &completion, &leases["taken"][0]);
    drop(server);
    let lease = leases["taken"][0]["lease"].as_str().unwrap();
    let out = support::rigdeck_in(&head.dir)
        .env("RIGDECK_URL", head.url(""))
        .args(["fleet", "lend", "--release", lease])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&out);
    assert!(
        out.status.success() && stdout.contains("stopped its rpc-server"),
        "{stdout}{stderr}"
    );
    let (ok, listed) = lender_cli(&["fleet", "lend", "--list", "--json"]);
    assert!(
        ok && serde_json::from_str::<Value>(&listed).unwrap()["lent"] == json!([]),
        "{listed}"
    );
}
