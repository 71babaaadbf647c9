//! The listeners' bounds: idle connections are closed after the header-read timeout, a flood of
//! them leaves the admin API answering, a listener holds no more than its cap, streamed answers
//! are not cut by that timeout, a shutdown does not wait past its deadline for open requests,
//! and the daemon raises its open-files limit.

mod support;

use std::time::{Duration, Instant};

use rigdeck_server::http::ListenerLimits;
use rigdeck_server::RunningServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// As many idle connections as took the daemon's 1 024 descriptors in the issue.
const IDLE_CONNECTIONS: usize = 1_100;

/// A generous bound past which a step counts as hung (never a performance assertion).
const HANG: Duration = Duration::from_secs(30);

/// A test server whose listeners use `limits` (no engines: nothing to reap).
struct BoundedServer {
    server: RunningServer,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl BoundedServer {
    async fn start(limits: ListenerLimits) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let rig = support::scratch_rig(dir.path(), "2x5060ti.json");
        std::env::set_var("RIGDECK_NVML_DOUBLE_RIG", &rig);
        let mut options = support::options(dir.path(), "127.0.0.1:0");
        options.limits = limits;
        let server = rigdeck_server::start(options).await.expect("server starts");
        Self {
            server,
            client: reqwest::Client::new(),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url())
    }
}

/// Waits until the server closes `stream` (end of file or a reset); false if it is still open
/// after `within`.
async fn closed_by_server(mut stream: TcpStream, within: Duration) -> bool {
    let mut buffer = [0u8; 256];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A 408 or other answer before the close is fine: keep reading to the end.
            Ok(Ok(_)) => continue,
        }
    }
}

/// GET /api/v1/status with the token on a fresh connection; its latency.
async fn timed_status(t: &BoundedServer, client: &reqwest::Client) -> Duration {
    let started = Instant::now();
    let response = tokio::time::timeout(
        HANG,
        client
            .get(t.url("/api/v1/status"))
            .bearer_auth(t.server.token())
            .send(),
    )
    .await
    .expect("the admin API answers while idle connections are open")
    .expect("the admin API answers");
    assert_eq!(response.status().as_u16(), 200);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_the_admin_api_keeps_answering() {
    support::raise_own_descriptor_limit();
    let header_timeout = Duration::from_secs(2);
    let t = BoundedServer::start(ListenerLimits {
        header_read_timeout: header_timeout,
        ..ListenerLimits::default()
    })
    .await;
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(
            TcpStream::connect(t.server.local_addr)
                .await
                .expect("open an idle connection"),
        );
    }
    // Fresh connections each time, like a new client while the idle ones are held.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut latencies = Vec::new();
    for _ in 0..20 {
        latencies.push(timed_status(&t, &client).await);
    }
    latencies.sort();
    eprintln!(
        "admin API with {IDLE_CONNECTIONS} idle connections open: median {:?}, max {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    let waits = idle
        .into_iter()
        .map(|stream| closed_by_server(stream, header_timeout + HANG));
    let closed = futures_util::future::join_all(waits).await;
    let still_open = closed.iter().filter(|closed| !**closed).count();
    assert_eq!(
        still_open, 0,
        "idle connections the server left open past its header timeout"
    );
    t.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_after_the_header_timeout() {
    let header_timeout = Duration::from_secs(1);
    let t = BoundedServer::start(ListenerLimits {
        header_read_timeout: header_timeout,
        ..ListenerLimits::default()
    })
    .await;
    let mut kept = TcpStream::connect(t.server.local_addr).await.unwrap();
    let request = format!(
        "GET /api/v1/status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        t.server.local_addr,
        t.server.token()
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    // Reads the answer, then waits for the server to close the idle connection.
    assert!(
        closed_by_server(kept, header_timeout + HANG).await,
        "a kept-alive connection stayed open past the header timeout"
    );
    t.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_wait_for_a_free_slot() {
    let cap = 4;
    let t = BoundedServer::start(ListenerLimits {
        max_connections: cap,
        header_read_timeout: HANG,
        ..ListenerLimits::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..cap {
        idle.push(TcpStream::connect(t.server.local_addr).await.unwrap());
    }
    let request = format!(
        "GET /api/v1/status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        t.server.local_addr,
        t.server.token()
    );
    let mut waiting = TcpStream::connect(t.server.local_addr).await.unwrap();
    waiting.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 12];
    let early = tokio::time::timeout(Duration::from_millis(500), waiting.read(&mut first)).await;
    assert!(
        early.is_err(),
        "a connection past the cap was served while {cap} others held every slot"
    );
    // One slot frees: the waiting connection is served.
    drop(idle.pop());
    let mut answer = String::new();
    tokio::time::timeout(HANG, waiting.read_to_string(&mut answer))
        .await
        .expect("served once a slot is free")
        .expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    t.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_outlives_the_header_timeout() {
    let header_timeout = Duration::from_secs(1);
    let t = BoundedServer::start(ListenerLimits {
        header_read_timeout: header_timeout,
        ..ListenerLimits::default()
    })
    .await;
    let created = t
        .client
        .post(t.url("/api/v1/chat/conversations"))
        .bearer_auth(t.server.token())
        .json(&serde_json::json!({"model": "any"}))
        .send()
        .await
        .expect("create a conversation");
    assert_eq!(created.status().as_u16(), 201);
    let conversation: serde_json::Value = created.json().await.expect("the conversation");
    let id = conversation["id"].as_i64().expect("a conversation id");
    let mut events = t
        .client
        .get(t.url(&format!("/api/v1/chat/conversations/{id}/events")))
        .bearer_auth(t.server.token())
        .send()
        .await
        .expect("the event stream opens");
    assert_eq!(events.status().as_u16(), 200);
    tokio::time::sleep(header_timeout * 3).await;
    // Still open: nothing arrives, and the stream has not ended.
    let next = tokio::time::timeout(Duration::from_millis(300), events.chunk()).await;
    assert!(
        next.is_err(),
        "the event stream ended after the header timeout: {next:?}"
    );
    t.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drops_requests_still_open_at_its_deadline() {
    let t = BoundedServer::start(ListenerLimits::default()).await;
    // A request whose body never finishes: the handler waits for it for ever.
    let mut stuck = TcpStream::connect(t.server.local_addr).await.unwrap();
    let head = format!(
        "POST /api/v1/plan HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\":",
        t.server.local_addr,
        t.server.token()
    );
    stuck.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grace = ListenerLimits::default().shutdown_grace;
    let started = Instant::now();
    tokio::time::timeout(grace + HANG, t.server.shutdown())
        .await
        .expect("the shutdown ends although a request is still open");
    eprintln!("shutdown with an open request took {:?}", started.elapsed());
    assert!(
        closed_by_server(stuck, HANG).await,
        "the open request's connection was dropped"
    );
}

/// The `Max open files` soft and hard limits of a running process, from /proc.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read its limits");
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_owned(), fields[4].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_raises_its_open_files_limit_to_the_hard_limit() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::daemon_process::free_port();
    // Started as systemd starts it: a soft limit of 1 024.
    let rigdeck = support::rigdeck_in(dir.path());
    let environment = rigdeck
        .get_envs()
        .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned())));
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -Sn 1024 && exec \"$0\" serve --bind \"$1\"")
        .arg(rigdeck.get_program())
        .arg(format!("127.0.0.1:{port}"))
        .envs(environment)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn rigdeck serve");
    let daemon = support::daemon_process::Daemon(child, dir.path().join("data"));
    let deadline = Instant::now() + HANG;
    while reqwest::get(format!("http://127.0.0.1:{port}/login"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the daemon did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (soft, hard) = open_files_limits(daemon.0.id());
    assert_eq!(soft, hard, "the daemon's soft open-files limit");
    drop(daemon);
}
