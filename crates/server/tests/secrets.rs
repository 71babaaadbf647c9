//! The admin token stays where it belongs: not printed when the daemon's output goes to a log,
//! not accepted on the gateway-only listener; and the bearer scheme is read case-insensitively.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A generous bound past which a step counts as hung.
const HANG: Duration = Duration::from_secs(60);

/// A spawned `rigdeck serve`, killed when dropped (also when the test fails).
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_sign_in_url_is_not_printed_when_stdout_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::daemon_process::free_port();
    let mut daemon = Spawned(
        support::rigdeck_in(dir.path())
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rigdeck serve"),
    );
    let stdout = daemon.0.stdout.take().expect("piped stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + HANG;
    let mut printed = Vec::new();
    // Until it says how to sign in (the last line it prints at start).
    while !printed
        .iter()
        .any(|line: &String| line.to_lowercase().contains("sign in"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines_rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the daemon never said how to sign in: {printed:?}"));
        printed.push(line);
    }
    let token_file = dir.path().join("config/token");
    let token = std::fs::read_to_string(&token_file).expect("the token file");
    let token = token.trim();
    let _ = daemon.0.kill();
    let mut stderr = String::new();
    if let Some(mut pipe) = daemon.0.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let stdout = printed.join("\n");
    assert!(!stdout.contains(token), "the token was printed: {stdout}");
    assert!(!stderr.contains(token), "the token was logged: {stderr}");
    assert!(
        stdout.contains(&token_file.display().to_string()),
        "where to find the token is printed: {stdout}"
    );
}

/// A server with the gateway also on its own port, and an API key for it.
async fn server_with_gateway_port(
    dir: &tempfile::TempDir,
) -> (rigdeck_server::RunningServer, std::net::SocketAddr, String) {
    std::env::set_var(
        "RIGDECK_NVML_DOUBLE_RIG",
        support::scratch_rig(dir.path(), "2x5060ti.json"),
    );
    let mut options = support::options(dir.path(), "127.0.0.1:0");
    options.gateway_bind = Some("127.0.0.1:0".parse().unwrap());
    let server = rigdeck_server::start(options).await.unwrap();
    let gateway = server.gateway_addr().expect("a gateway address");
    let created: Value = reqwest::Client::new()
        .post(format!("{}/api/v1/keys", server.base_url()))
        .bearer_auth(server.token())
        .json(&json!({"name": "lan"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["secret"].as_str().expect("a key").to_owned();
    (server, gateway, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_port_refuses_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let (server, gateway, key) = server_with_gateway_port(&dir).await;
    let client = reqwest::Client::new();
    let models = format!("http://{gateway}/v1/models");
    let as_bearer = client
        .get(&models)
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    let status = as_bearer.status().as_u16();
    let body = as_bearer.text().await.unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("admin token"), "{body}");
    let as_anthropic_key = client
        .get(&models)
        .header("x-api-key", server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(as_anthropic_key.status().as_u16(), 401);
    // An API key still works there, and the token still works on the daemon's own port.
    let with_key = client.get(&models).bearer_auth(&key).send().await.unwrap();
    assert_eq!(with_key.status().as_u16(), 200);
    let on_main_port = client
        .get(format!("{}/v1/models", server.base_url()))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(on_main_port.status().as_u16(), 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let (server, gateway, key) = server_with_gateway_port(&dir).await;
    let client = reqwest::Client::new();
    for scheme in ["bearer", "BEARER", "Bearer", "bEaReR"] {
        let admin = client
            .get(format!("{}/api/v1/status", server.base_url()))
            .header("authorization", format!("{scheme} {}", server.token()))
            .send()
            .await
            .unwrap();
        assert_eq!(admin.status().as_u16(), 200, "admin API with '{scheme}'");
        let gateway = client
            .get(format!("http://{gateway}/v1/models"))
            .header("authorization", format!("{scheme} {key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(gateway.status().as_u16(), 200, "gateway with '{scheme}'");
    }
    server.shutdown().await;
}
