//! The `rigdeck` command itself: `gpus` as a table and as JSON, `--help`, no driver.

mod support;

use std::process::Command;

fn rigdeck(rig: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rigdeck"));
    command
        .env("RIGDECK_NVML_LIBRARY", support::nvml_double())
        .env("RIGDECK_NVML_DOUBLE_RIG", support::fixture(rig));
    command
}

#[test]
fn gpus_prints_a_table_with_the_degraded_link_marked_and_explained() {
    let output = rigdeck("4x3090.json").arg("gpus").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("NVIDIA driver 580.105.08, 4 GPU(s)"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows[3].contains("Gen4 x1 (max Gen4 x16) !"), "{}", rows[3]);
    assert!(
        rows[0].contains("Gen4 x16") && !rows[0].contains("max"),
        "{}",
        rows[0]
    );
    assert!(rows[0].contains("24.0 GiB"), "{}", rows[0]);
    assert!(
        text.contains("! GPU 3 · NVIDIA GeForce RTX 3090: PCIe link x1 (card supports x16)"),
        "{text}"
    );
    assert!(text.contains("sidecar"));
}

#[test]
fn gpus_json_is_the_raw_readout_for_scripts() {
    let output = rigdeck("2xgh200.json")
        .args(["gpus", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let readout: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(readout["driver"]["state"], "ready");
    assert_eq!(readout["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(readout["gpus"][1]["numa_node"], 1);
    assert_eq!(readout["gpus"][0]["compute_capability"]["major"], 9);
}

#[test]
fn gpus_without_a_driver_says_so_plainly() {
    let output = Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .env("RIGDECK_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .arg("gpus")
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("no NVIDIA driver found"), "{text}");
}

#[test]
fn help_documents_every_command() {
    let output = Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    for command in ["desktop", "serve", "gpus"] {
        assert!(text.contains(command), "--help lacks {command}: {text}");
    }
    let serve = Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8(serve.stdout).unwrap();
    assert!(
        text.contains("--bind") && text.contains("127.0.0.1:7878") && text.contains("--allow-host"),
        "{text}"
    );
}

#[test]
fn serve_warns_when_bound_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = rigdeck("2x5060ti.json")
        .args(["serve", "--bind", "0.0.0.0:0"])
        .env("RIGDECK_CONFIG_DIR", dir.path().join("c"))
        .env("RIGDECK_DATA_DIR", dir.path().join("d"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("WARNING") && stderr.contains("reachable from the network"),
        "{stderr}"
    );
}

#[test]
fn plan_draws_a_pasted_llama_server_command_with_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    let model = rigdeck_gguf::fixtures::MoeShape::small()
        .writer()
        .write_split(dir.path(), "tiny-moe", 1)
        .unwrap()[0]
        .clone();
    let output = rigdeck("4x3090.json")
        .args([
            "plan",
            "--rig",
            "4x3090",
            "--json",
            "--",
            "llama-server",
            "-m",
        ])
        .arg(&model)
        .args([
            "-c",
            "8192",
            "-ngl",
            "99",
            "-ot",
            "exps=CPU",
            "-ot",
            r"blk\.1\.ffn_.*_exps=CUDA0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["parsed"]["options"]["context"], 8192);
    assert_eq!(
        json["report"]["options"]["overrides"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let problems = json["report"]["problems"].to_string();
    assert!(
        problems.contains("-ot #2") && problems.contains("takes no tensor"),
        "{problems}"
    );
    assert!(json["report"]["notes"].is_array(), "{json}");

    // The table form, and a command without -m.
    let table = rigdeck("4x3090.json")
        .args(["plan", "--rig", "4x3090", "--", "llama-server", "-m"])
        .arg(&model)
        .args(["-ot", "exps=CPU"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("DEVICE"));
    let no_model = rigdeck("4x3090.json")
        .args(["plan", "--", "llama-server", "-c", "4096"])
        .output()
        .unwrap();
    assert!(!no_model.status.success());
    assert!(String::from_utf8_lossy(&no_model.stderr).contains("no -m MODEL"));
}

#[tokio::test]
async fn plan_asks_llama_cpp_for_its_own_figures_with_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = support::tiny_dense(dir.path());
    let server = support::llama_server().await;
    let registered = support::rigdeck_in(dir.path())
        .args(["engines", "register"])
        .arg(&server)
        .output()
        .unwrap();
    assert!(
        registered.status.success(),
        "{:?}",
        support::output_text(&registered)
    );
    let output = support::rigdeck_in(dir.path())
        .args(["plan", "--rig", "cpu-minipc", "--ctx", "4096", "--dry-run"])
        .arg(&model)
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("llama.cpp dry run (llama.cpp"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.contains("(Host)"))
        .expect(&stdout);
    assert!(row.contains("256/256"), "context ours/llama.cpp: {row}");

    // Without a registered build the dry run says what to do.
    let empty = tempfile::tempdir().unwrap();
    let output = support::rigdeck_in(empty.path())
        .args(["plan", "--rig", "cpu-minipc", "--dry-run"])
        .arg(&model)
        .output()
        .unwrap();
    let (stdout, _) = support::output_text(&output);
    assert!(
        stdout.contains("no llama.cpp build with llama-fit-params"),
        "{stdout}"
    );
}

#[test]
fn service_prints_its_unit_and_installs_nothing_without_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let unit = support::rigdeck_in(dir.path())
        .args(["service", "unit", "--gateway-bind", "0.0.0.0:8080"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&unit);
    assert!(unit.status.success(), "{stderr}");
    let program = std::fs::canonicalize(env!("CARGO_BIN_EXE_rigdeck")).unwrap();
    assert!(
        stdout.contains(&format!(
            "ExecStart={} serve --bind 127.0.0.1:7878 --gateway-bind 0.0.0.0:8080",
            program.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains(&format!(
        "Environment=RIGDECK_DATA_DIR={}",
        dir.path().join("data").display()
    )));
    let system = support::rigdeck_in(dir.path())
        .args(["service", "unit", "--system"])
        .env_remove("SUDO_USER")
        .output()
        .unwrap();
    assert!(!system.status.success());
    assert!(support::output_text(&system).1.contains("--user NAME"));

    // Where systemd does not answer (containers, CI), install says so and writes nothing. Where
    // it does, this test installs nothing for real.
    let systemd_answers = Command::new("systemctl")
        .args(["--user", "show-environment"])
        .output()
        .is_ok_and(|o| o.status.success());
    if systemd_answers {
        return;
    }
    let install = support::rigdeck_in(dir.path())
        .args(["service", "install"])
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .output()
        .unwrap();
    let (_, stderr) = support::output_text(&install);
    assert!(!install.status.success());
    assert!(
        stderr.contains("systemd does not answer here") && stderr.contains("nothing was installed"),
        "{stderr}"
    );
    assert!(!dir.path().join("xdg/systemd").exists());
    let status = support::rigdeck_in(dir.path())
        .args(["service", "status"])
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(3));
    assert!(support::output_text(&status).0.contains("not installed"));
}
