//! `rigdeck profiles`, `run`, `ps`, `stop`, `logs` talk to the running daemon's API.

mod support;

use std::process::{Command, Output};

use support::TestServer;

fn rigdeck(url: &str, config: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .args(args)
        .env("RIGDECK_URL", url)
        .env("RIGDECK_CONFIG_DIR", config)
        .env("RIGDECK_DATA_DIR", config.join("unused-data"))
        .output()
        .expect("run rigdeck")
}

#[test]
fn without_a_daemon_the_commands_say_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "x".repeat(64)).unwrap();
    for args in [
        &["ps"][..],
        &["run", "qwen"],
        &["stop", "qwen"],
        &["logs", "qwen"],
    ] {
        let output = rigdeck("http://127.0.0.1:1", dir.path(), args);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(
                "no Rigdeck daemon answers at http://127.0.0.1:1: start `rigdeck serve` first"
            ),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_use_the_daemons_api() {
    let t = TestServer::start("2x5060ti.json").await;
    let url = t.server.base_url();
    let config = t.dir.path().join("config");
    let run = |args: &'static [&'static str]| {
        let (url, config) = (url.clone(), config.clone());
        tokio::task::spawn_blocking(move || rigdeck(&url, &config, args))
    };
    let ps = run(&["ps"]).await.unwrap();
    assert!(ps.status.success());
    assert!(String::from_utf8_lossy(&ps.stdout).contains("No instances"));
    let list = run(&["profiles", "list"]).await.unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains("No launch profiles"));
    let create = run(&[
        "profiles",
        "create",
        "qwen",
        "--engine",
        "42",
        "--model",
        "/etc/hostname",
        "--ctx",
        "8192",
        "--",
        "--metrics",
    ])
    .await
    .unwrap();
    assert!(!create.status.success());
    let stderr = String::from_utf8_lossy(&create.stderr);
    assert!(
        stderr.contains("engine build 42, which is not installed"),
        "{stderr}"
    );
    // The daemon's checks apply to the command line too: a line break in an environment value
    // (which an exported unit would have turned into a directive) is refused by name.
    let create = run(&[
        "profiles",
        "create",
        "qwen",
        "--engine",
        "42",
        "--model",
        "/etc/hostname",
        "--env",
        "CUDA_VISIBLE_DEVICES=0\nExecStartPre=/bin/sh -c evil",
    ])
    .await
    .unwrap();
    assert!(!create.status.success());
    let stderr = String::from_utf8_lossy(&create.stderr);
    assert!(
        stderr.contains(
            "environment value of CUDA_VISIBLE_DEVICES contains a line break (U+000A): remove it"
        ),
        "{stderr}"
    );
    let stop = run(&["stop", "qwen"]).await.unwrap();
    assert!(String::from_utf8_lossy(&stop.stderr).contains("no instance named 'qwen'"));
    t.server.shutdown().await;
}
