//! `rigdeck engines install vllm`: a real `python3 -m venv` and a real pip, installing from a
//! local PEP 503 package index (the test double standing in for PyPI) that serves a hand-made
//! `vllm` wheel; the build is then listed as ready, and a second install reuses the environment.
//! The wheel's `vllm serve` stands in for vLLM's server (health and model list only), so a
//! launch profile on the environment is started, supervised and stopped through the daemon.

mod support;

use std::path::Path;
use std::process::Command;

/// Lays out `root/simple/vllm/{index.html, vllm-0.11.0-py3-none-any.whl}`. The wheel (a zip with
/// the package, METADATA, WHEEL and a RECORD of sha256 hashes) is written with Python's zipfile.
fn write_index(root: &Path) {
    let project = root.join("simple/vllm");
    std::fs::create_dir_all(&project).unwrap();
    let wheel = "vllm-0.11.0-py3-none-any.whl";
    let script = r#"
import base64, hashlib, sys, zipfile
# `vllm serve MODEL --host H --port P ...`: answers /health and /v1/models, prints its argv.
CLI = """
import http.server, json, sys

def main():
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "serve":
        sys.exit("usage: vllm serve MODEL [options]")
    model, options = args[1], args[2:]
    value = lambda flag, default: options[options.index(flag) + 1] if flag in options else default
    print("stand-in vllm serving", model, "with", " ".join(options), flush=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"" if self.path == "/health" else json.dumps({"data": [{"id": model}]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    address = (value("--host", "127.0.0.1"), int(value("--port", "8000")))
    http.server.ThreadingHTTPServer(address, Handler).serve_forever()
"""
files = {
    "vllm/__init__.py": "__version__ = \"0.11.0\"\n",
    "vllm/cli.py": CLI,
    "vllm-0.11.0.dist-info/entry_points.txt": "[console_scripts]\nvllm = vllm.cli:main\n",
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
        // An older release and a release candidate listed beside it (never downloaded): the
        // version list and the default install take the newest final release.
        format!(
            "<!DOCTYPE html><html><body><a href=\"{wheel}\">{wheel}</a>\n\
             <a href=\"vllm-0.9.2-py3-none-any.whl\">vllm-0.9.2-py3-none-any.whl</a>\n\
             <a href=\"vllm-0.12.0rc1-py3-none-any.whl\">vllm-0.12.0rc1-py3-none-any.whl</a>\n\
             </body></html>\n"
        ),
    )
    .unwrap();
}

/// Writes the index under `dir/index` and serves it on loopback; answers pip's `--index-url`.
async fn serve_index(dir: &Path) -> String {
    let index = dir.join("index");
    write_index(&index);
    support::serve_index_folder(&index).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_vllm_from_a_local_index_and_reuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;
    let listed_url = url.clone();

    let home = dir.path().to_owned();
    let install = move || {
        let home = home.clone();
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            support::rigdeck_in(&home)
                .args(["engines", "install", "vllm", "--index-url", &url])
                .output()
                .unwrap()
        })
    };

    let output = install().await.unwrap();
    let (stdout, stderr) = support::output_text(&output);
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

    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
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
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("vllm 0.11.0 is already installed"),
        "{stdout}"
    );
    assert!(!stdout.contains("with pip"), "{stdout}");
    assert!(stdout.contains("Reused engine #1: vllm 0.11.0"), "{stdout}");

    // The releases the index serves, newest first (no release candidate), against the install.
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "versions", "vllm", "--index-url", &listed_url])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "0.11.0  (newest: the default, installed)\n0.9.2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_the_index_lacks_is_refused_before_anything_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_index(dir.path()).await;
    let home = dir.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        support::rigdeck_in(&home)
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
    let (stdout, stderr) = support::output_text(&output);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stderr.contains("vllm 9.9.9 is not on the package index")
            && stderr.contains("its newest releases: 0.11.0"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("data/engines/vllm-9.9.9").exists(),
        "no environment made"
    );
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "[]");
}

/// The same install through the API (the Engines page's button): refused kinds at once, then
/// pip runs in the background and the environment appears among the builds, ready; a profile on
/// it plans a share of GPU 0, starts, becomes ready and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_installs_vllm_in_the_background() {
    // Only this test's process: a user's pip.conf must not send pip elsewhere.
    std::env::set_var("PIP_CONFIG_FILE", "/dev/null");
    let t = support::TestServer::start("4x3090.json").await;
    let url = serve_index(t.dir.path()).await;
    for (body, code, names) in [
        (
            serde_json::json!({"kind": "llama.cpp"}),
            "bad_kind",
            "engines/build",
        ),
        (serde_json::json!({"kind": "tgi"}), "bad_kind", "tgi"),
        (
            serde_json::json!({}),
            "bad_request",
            r#"send JSON like {"kind": "vllm"}"#,
        ),
        (
            serde_json::json!({"kind": "vllm", "version": "latest; rm -rf"}),
            "bad_version",
            "latest; rm -rf",
        ),
        (
            serde_json::json!({"kind": "vllm", "version": "9.9.9", "index_url": url}),
            "unknown_version",
            "vllm 9.9.9 is not on the package index",
        ),
    ] {
        let (status, error) = t.post_json("/api/v1/engines/install", &body).await;
        assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
        assert_eq!(error["code"], code, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(names),
            "{error}"
        );
    }
    let versions = t
        .get_json(&format!(
            "/api/v1/engines/versions?kind=vllm&index_url={url}"
        ))
        .await;
    assert_eq!(
        versions["versions"],
        serde_json::json!(["0.11.0", "0.9.2"]),
        "{versions}"
    );
    assert_eq!(versions["default"], "0.11.0");
    let install = serde_json::json!({"kind": "vllm", "index_url": url});
    let (status, _) = t.post_json("/api/v1/engines/install", &install).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
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

    // A launch profile on the environment: a model folder, a tenth of one GPU preallocated.
    let model = t.dir.path().join("Qwen3-0.6B");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    let profile = serde_json::json!({
        "name": "vl",
        "engine_build_id": builds[0]["id"],
        "model": model,
        "gpu_memory_fraction": 0.1,
        "placement": {"context": 8192},
    });
    let (status, saved) = t.post_json("/api/v1/profiles", &profile).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{saved}");
    let argv = saved["argv"].as_array().expect("an argv").clone();
    assert!(argv[0].as_str().unwrap().ends_with("/bin/vllm"), "{saved}");
    assert_eq!(argv[1], "serve", "{saved}");
    let planned = &saved["profile"]["planned_memory"];
    assert_eq!(planned.as_array().map(Vec::len), Some(1), "{saved}");
    assert_eq!(planned[0]["gpu"], 0, "{saved}");
    let gpu0_total = t.get_json("/api/v1/telemetry/latest").await["sample"]["gpus"]["gpus"][0]
        ["memory"]["total_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(
        planned[0]["bytes"],
        (gpu0_total as f64 * 0.1) as u64,
        "{saved}"
    );

    let (status, _) = t
        .post_json("/api/v1/profiles/vl/start", &serde_json::json!({}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let all = t.get_json("/api/v1/instances").await;
        if all[0]["phase"] == "ready" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not ready: {all}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let logs = t
        .get_json("/api/v1/instances/vl/logs?search=stand-in")
        .await;
    let line = logs[0]["text"].as_str().unwrap_or_default();
    assert!(
        line.contains("--max-model-len 8192") && line.contains("--gpu-memory-utilization 0.1"),
        "{logs}"
    );
    let (_, view) = t
        .post_json("/api/v1/instances/vl/stop", &serde_json::json!({}))
        .await;
    assert_eq!(view["phase"], "stopped", "{view}");
    t.server.shutdown().await;
}
