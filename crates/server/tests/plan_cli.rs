//! `rigdeck plan URL` writes a command llama-server accepts: a hub file as the path Rigdeck's
//! download of it will have (after the pull it names), any other address as `--model-url`.

mod support;

use std::process::Command;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// `rigdeck plan --rig cpu-minipc URL` with its own data folders and Hugging Face cache.
fn plan(dir: &std::path::Path, url: &str) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .args(["plan", "--rig", "cpu-minipc", url])
        .env("HF_HUB_CACHE", dir.join("hub"))
        .env("HF_HOME", dir.join("hf-home"))
        .env_remove("HF_ENDPOINT")
        .env("RIGDECK_CONFIG_DIR", dir.join("config"))
        .env("RIGDECK_DATA_DIR", dir.join("data"))
        .output()
        .expect("run rigdeck plan");
    let (stdout, stderr) = support::output_text(&output);
    (output.status.success(), format!("{stdout}{stderr}"))
}

fn command_of(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("llama-server "))
        .unwrap_or_else(|| panic!("no command line in {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_becomes_the_downloaded_path_or_model_url_never_dash_m_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served");
    let model = support::tiny_dense(dir.path());
    let in_repo = served.join(format!("org/Tiny-GGUF/resolve/{COMMIT}/Q4_K_M"));
    std::fs::create_dir_all(&in_repo).expect("repo folder");
    std::fs::copy(&model, in_repo.join("Tiny-Q4_K_M.gguf")).expect("hub file");
    let elsewhere = served.join("files");
    std::fs::create_dir_all(&elsewhere).expect("folder");
    std::fs::copy(&model, elsewhere.join("tiny.gguf")).expect("plain file");
    let base = support::serve_index_folder(&served)
        .await
        .trim_end_matches("/simple")
        .to_owned();

    // A hub file at a commit: the snapshot path in the cache, and the pull that writes it.
    let url = format!("{base}/org/Tiny-GGUF/resolve/{COMMIT}/Q4_K_M/Tiny-Q4_K_M.gguf");
    let (ok, out) = tokio::task::spawn_blocking({
        let (dir, url) = (dir.path().to_owned(), url.clone());
        move || plan(&dir, &url)
    })
    .await
    .expect("joined");
    assert!(ok, "{out}");
    let local = dir
        .path()
        .join(format!(
            "hub/models--org--Tiny-GGUF/snapshots/{COMMIT}/Q4_K_M/Tiny-Q4_K_M.gguf"
        ))
        .display()
        .to_string();
    let command = command_of(&out);
    assert!(
        command.starts_with(&format!("llama-server -m {local} ")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "after `rigdeck pull org/Tiny-GGUF:Q4_K_M --revision {COMMIT}`"
        )),
        "{out}"
    );
    assert!(!command.contains("http"), "{command}");

    // A branch whose commit the address's hub cannot tell: the address itself, and why.
    let main = served.join("org/Tiny-GGUF/resolve/main/Q4_K_M");
    std::fs::create_dir_all(&main).expect("branch folder");
    std::fs::copy(&model, main.join("Tiny-Q4_K_M.gguf")).expect("hub file");
    let url = format!("{base}/org/Tiny-GGUF/resolve/main/Q4_K_M/Tiny-Q4_K_M.gguf");
    let (ok, out) = tokio::task::spawn_blocking({
        let (dir, url) = (dir.path().to_owned(), url.clone());
        move || plan(&dir, &url)
    })
    .await
    .expect("joined");
    assert!(ok, "{out}");
    assert!(
        command_of(&out).starts_with(&format!("llama-server --model-url {url} ")),
        "{out}"
    );
    assert!(
        out.contains("cannot learn the commit of org/Tiny-GGUF at main"),
        "{out}"
    );

    // Any other address: llama-server's own --model-url.
    let url = format!("{base}/files/tiny.gguf");
    let (ok, out) = tokio::task::spawn_blocking({
        let (dir, url) = (dir.path().to_owned(), url.clone());
        move || plan(&dir, &url)
    })
    .await
    .expect("joined");
    assert!(ok, "{out}");
    assert!(
        command_of(&out).starts_with(&format!("llama-server --model-url {url} ")),
        "{out}"
    );
}

/// `rigdeck plan ARGS…` with its own data folders.
fn plan_with(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .arg("plan")
        .args(args)
        .env("RIGDECK_CONFIG_DIR", dir.join("config"))
        .env("RIGDECK_DATA_DIR", dir.join("data"))
        .output()
        .expect("run rigdeck plan");
    let (stdout, stderr) = support::output_text(&output);
    (output.status.code(), format!("{stdout}{stderr}"))
}

#[test]
fn another_box_over_a_link_makes_a_model_fit_with_the_links_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = rigdeck_gguf::fixtures::MoeShape::glm_5_2()
        .writer()
        .write_split(dir.path(), "GLM-5.2-IQ2", 6)
        .expect("model")[0]
        .display()
        .to_string();
    // The mini PC alone holds nothing of a 200 GB model …
    let (code, out) = plan_with(dir.path(), &["--rig", "cpu-minipc", "--auto", &model]);
    assert_eq!(code, Some(2), "{out}");
    // … with the GPU tower lending its cards over 10 GbE it fits, and the link is counted.
    let args = [
        "--rig",
        "cpu-minipc",
        "--also",
        "4xpro6000@10gbe",
        "--auto",
        &model,
    ];
    let (code, out) = plan_with(dir.path(), &args);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        command_of(&out).contains(" --rpc box2:50052 -dev RPC0,RPC1,RPC2,RPC3 "),
        "{out}"
    );
    assert!(
        out.contains("RPC3 · GPU 3 · RTX PRO 6000 Blackwell · on box 2 · 4xpro6000 over 10 GbE"),
        "{out}"
    );
    let link = out
        .lines()
        .find(|l| l.contains("link to box 2 · 4xpro6000 over 10 GbE (1175 MB/s, 0.05 ms)"))
        .unwrap_or_else(|| panic!("no link line in {out}"));
    assert!(link.contains("2 crossings a token"), "{link}");
    assert!(out.contains("speed ceiling: "), "{out}");

    let (code, out) = plan_with(
        dir.path(),
        &["--rig", "4x3090", "--also", "2x3090@wifi", &model],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("unknown link 'wifi'") && out.contains("2.5gbe, 5gbe, 10gbe"),
        "{out}"
    );
    let (code, out) = plan_with(dir.path(), &["--rig", "4x3090", "--also", "2x3090", &model]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("PRESET@LINK"), "{out}");
}

/// A child process ended when the test ends, passed or not.
struct Ended(std::process::Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn the_written_rpc_flags_are_what_llama_cpp_reads() {
    let bin =
        rigdeck_core::engines::source::cached_llama_cpp_bin().unwrap_or_else(|e| panic!("{e}"));
    let rpc_server = bin.join("rpc-server");
    assert!(
        rpc_server.exists(),
        "{} is missing: the cached llama.cpp build needs GGML_RPC=ON (make test builds it)",
        rpc_server.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let model = support::tiny_dense(dir.path()).display().to_string();
    let endpoint = format!("127.0.0.1:{}", free_port());
    let (host, port) = endpoint.split_once(':').expect("host:port");
    let _lender = Ended(
        Command::new(&rpc_server)
            .args(["-H", host, "-p", port])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start rpc-server"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&endpoint).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "rpc-server never listened on {endpoint}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A command lending the box's device: drawn on a rig with that box, and written back.
    let ot = format!(r"blk\.(0|1)\.ffn_.*=RPC0[{endpoint}]");
    let pasted = [
        "--rig",
        "cpu-minipc",
        "--also",
        "cpu-minipc@1gbe",
        "--json",
        "--",
        "llama-server",
        "-m",
        &model,
        "--rpc",
        &endpoint,
        "-dev",
        "RPC0",
        "-ngl",
        "8",
        "-ot",
        &ot,
        "-c",
        "2048",
    ];
    let (code, out) = plan_with(dir.path(), &pasted);
    let answer: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, Some(0), "{out}");
    let args: Vec<String> = serde_json::from_value(answer["report"]["args"].clone()).expect("args");
    let line = args.join(" ");
    assert!(
        line.contains(&format!("--rpc {endpoint} -dev RPC0 -ngl 8 ")),
        "{line}"
    );
    assert!(line.contains(&format!("=RPC0[{endpoint}]")), "{line}");
    let rpc0 = &answer["report"]["plan"]["devices"][0];
    assert_eq!(
        rpc0["spec"]["id"],
        serde_json::json!({"kind": "rpc", "index": 0})
    );
    // -ngl 8: the output and the last 7 layers.
    assert_eq!(
        rpc0["usage"]["layers"],
        serde_json::json!([9, 10, 11, 12, 13, 14, 15]),
        "{rpc0}"
    );
    let ours_mib = rpc0["usage"]["weights_bytes"].as_u64().expect("weights") as f64 / 1048576.0;

    // llama.cpp itself reads the same words: the lent device gets its layers.
    // -kvu is llama-server's alone; llama-fit-params refuses it.
    let fit = Command::new(bin.join("llama-fit-params"))
        .args(
            args.iter()
                .filter(|a| !matches!(a.as_str(), "-kvu" | "-no-kvu")),
        )
        .args(["-fitp", "on"])
        .output()
        .expect("run llama-fit-params");
    let (stdout, stderr) = support::output_text(&fit);
    assert!(fit.status.success(), "{stdout}{stderr}");
    let rpc_line = stdout
        .lines()
        .find(|l| l.starts_with("RPC0 "))
        .unwrap_or_else(|| panic!("no RPC0 line in {stdout}{stderr}"));
    let model_mib: u64 = rpc_line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("RPC0's model MiB");
    // The lent device holds what the plan says: its layers, the output and the -ot tensors.
    assert!(
        (model_mib as f64 - ours_mib).abs() <= ours_mib * 0.01 + 1.0,
        "llama.cpp {rpc_line} against ours {ours_mib:.1} MiB"
    );
}
