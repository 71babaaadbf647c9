//! `rigdeck engines install vllm`: a real `python3 -m venv` and a real pip, installing from a
//! local PEP 503 package index (the test double standing in for PyPI) that serves a hand-made
//! `vllm` wheel; the build is then listed as ready, and a second install reuses the environment.

mod support;

use std::path::Path;
use std::process::{Command, Output};

/// `rigdeck` with its own config, data and cache folders under `dir`.
fn rigdeck(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rigdeck"));
    command
        .env("RIGDECK_CONFIG_DIR", dir.join("config"))
        .env("RIGDECK_DATA_DIR", dir.join("data"))
        .env("RIGDECK_CACHE_DIR", dir.join("cache"))
        .env("RIGDECK_NVML_LIBRARY", support::nvml_double())
        .env("RIGDECK_NVML_DOUBLE_RIG", support::fixture("4x3090.json"))
        // A user's pip.conf must not send pip elsewhere.
        .env("PIP_CONFIG_FILE", "/dev/null");
    command
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Lays out `root/simple/vllm/{index.html, vllm-0.11.0-py3-none-any.whl}`. The wheel (a zip with
/// the package, METADATA, WHEEL and a RECORD of sha256 hashes) is written with Python's zipfile.
fn write_index(root: &Path) {
    let project = root.join("simple/vllm");
    std::fs::create_dir_all(&project).unwrap();
    let wheel = "vllm-0.11.0-py3-none-any.whl";
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "vllm/__init__.py": "__version__ = \"0.11.0\"\n",
    "vllm-0.11.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n",
    "vllm-0.11.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: rigdeck-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as whl:
    for name, body in files.items():
        data = body.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
        whl.writestr(name, data)
    record.append("vllm-0.11.0.dist-info/RECORD,,")
    whl.writestr("vllm-0.11.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(project.join(wheel))
        .status()
        .expect("python3");
    assert!(status.success());
    std::fs::write(
        project.join("index.html"),
        format!("<!DOCTYPE html><html><body><a href=\"{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
}

/// Writes the index under `dir/index` and serves it on loopback; answers pip's `--index-url`.
async fn serve_index(dir: &Path) -> String {
    let index = dir.join("index");
    write_index(&index);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback_service(tower_http::services::ServeDir::new(&index));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://127.0.0.1:{port}/simple")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_vllm_from_a_local_index_and_reuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;

    let home = dir.path().to_owned();
    let install = move || {
        let home = home.clone();
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            rigdeck(&home)
                .args(["engines", "install", "vllm", "--index-url", &url])
                .output()
                .unwrap()
        })
    };

    let output = install().await.unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("creating the environment"), "{stdout}");
    assert!(
        stdout.contains("installing vllm==0.11.0 with pip"),
        "{stdout}"
    );
    // pip's own output is streamed.
    assert!(
        stdout.contains("Successfully installed vllm-0.11.0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Installed engine #1: vllm 0.11.0"),
        "{stdout}"
    );
    let venv = dir.path().join("data/engines/vllm-0.11.0");
    assert!(venv.join("bin/python").exists());

    let output = rigdeck(dir.path())
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let builds: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let builds = builds.as_array().unwrap();
    assert_eq!(builds.len(), 1, "{stdout}");
    assert_eq!(builds[0]["kind"], "vllm");
    assert_eq!(builds[0]["version"], "0.11.0");
    assert_eq!(builds[0]["status"], "ready");
    assert_eq!(
        builds[0]["location"],
        std::fs::canonicalize(&venv).unwrap().display().to_string()
    );

    // The second install finds the package importable and does not run pip again.
    let output = install().await.unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("vllm 0.11.0 is already installed"),
        "{stdout}"
    );
    assert!(!stdout.contains("with pip"), "{stdout}");
    assert!(stdout.contains("Reused engine #1: vllm 0.11.0"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_the_index_lacks_fails_with_pips_last_lines() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;
    let home = dir.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        rigdeck(&home)
            .args([
                "engines",
                "install",
                "vllm",
                "--version",
                "9.9.9",
                "--index-url",
                &url,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stderr.contains("pip could not install vllm==9.9.9")
            && stderr.contains("No matching distribution found for vllm==9.9.9"),
        "{stderr}"
    );
    let output = rigdeck(dir.path())
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "[]");
}

/// The same install through the API (the Engines page's button): refused kinds at once, then
/// pip runs in the background and the environment appears among the builds, ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_installs_vllm_in_the_background() {
    // Only this test's process: a user's pip.conf must not send pip elsewhere.
    std::env::set_var("PIP_CONFIG_FILE", "/dev/null");
    let t = support::TestServer::start("4x3090.json").await;
    let url = serve_index(t.dir.path()).await;
    let post = |body: serde_json::Value| {
        t.client
            .post(t.url("/api/v1/engines/install"))
            .bearer_auth(t.server.token())
            .json(&body)
            .send()
    };
    for (body, code, names) in [
        (
            serde_json::json!({"kind": "llama.cpp"}),
            "bad_kind",
            "engines/build",
        ),
        (serde_json::json!({"kind": "tgi"}), "bad_kind", "tgi"),
        (
            serde_json::json!({"kind": "vllm", "version": "latest; rm -rf"}),
            "bad_version",
            "latest; rm -rf",
        ),
    ] {
        let response = post(body).await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["code"], code, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(names),
            "{error}"
        );
    }
    let response = post(serde_json::json!({"kind": "vllm", "index_url": url}))
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let builds = loop {
        let builds = t.get_json("/api/v1/engines").await;
        if builds.as_array().is_some_and(|b| !b.is_empty()) {
            break builds;
        }
        assert!(std::time::Instant::now() < deadline, "no build after 180 s");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(builds[0]["kind"], "vllm", "{builds}");
    assert_eq!(builds[0]["version"], "0.11.0", "{builds}");
    assert_eq!(builds[0]["status"], "ready", "{builds}");
    t.server.shutdown().await;
}
