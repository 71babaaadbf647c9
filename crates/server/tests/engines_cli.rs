//! `rigdeck engines`: list, register, remove, and a clear message for each kind of bad input.
//! (The real llama.cpp build is covered by rigdeck-core's `engine_build` test.)

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A stand-in llama-server: a script that answers `--version` and `--help` in llama.cpp's format.
fn fake_server(dir: &Path) -> PathBuf {
    let path = dir.join("llama-server");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         case \"$1\" in\n\
         --version) echo 'version: 0.5.0-dev (build 0, commit abc1234)' >&2 ;;\n\
         --list-devices) echo 'Available devices:' ;;\n\
         *) printf '%s\\n' '-m,    --model FNAME       model path' '--port PORT         port' \
            '-fit,  --fit [on|off]        fit' '--metrics           metrics' ;;\n\
         esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn list_register_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("No engines installed") && stdout.contains("rigdeck engines build"),
        "{stdout}"
    );

    let server = fake_server(dir.path());
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "register"])
        .arg(&server)
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("Registered engine #1: llama.cpp 0.5.0-dev (abc1234) for cpu"),
        "{stdout}"
    );

    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list"])
        .output()
        .unwrap();
    let (stdout, _) = support::output_text(&output);
    let row = stdout.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with("1 ") && row.contains("ready") && row.contains("--fit,metrics"),
        "{stdout}"
    );

    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    let builds: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(builds[0]["kind"], "llama.cpp");
    assert_eq!(builds[0]["status"], "ready");
    assert_eq!(builds[0]["capabilities"]["features"]["fit"], true);
    assert_eq!(builds[0]["capabilities"]["commit"], "abc1234");

    std::fs::remove_file(&server).unwrap();
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "list"])
        .output()
        .unwrap();
    let (stdout, _) = support::output_text(&output);
    assert!(
        stdout.contains("MISSING") && stdout.contains("the file is gone"),
        "{stdout}"
    );

    let output = support::rigdeck_in(dir.path())
        .args(["engines", "remove", "1"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("Removed engine #1"), "{stdout}");
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "remove", "1"])
        .output()
        .unwrap();
    let (_, stderr) = support::output_text(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("no engine build with id 1"), "{stderr}");
}

/// Runs `rigdeck engines ARGS`, expects a failure and returns stderr.
fn fails(dir: &Path, args: &[&str]) -> String {
    let output = support::rigdeck_in(dir)
        .arg("engines")
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(!output.status.success(), "{args:?} succeeded: {stdout}");
    stderr
}

#[test]
fn bad_input_gets_a_message_that_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(dir.path(), &["build", "--backend", "metal"]);
    assert!(
        err.contains("unknown backend 'metal'") && err.contains("cpu, cuda, vulkan or rocm"),
        "{err}"
    );

    let err = fails(dir.path(), &["build", "--kind", "ollama"]);
    assert!(err.contains("unknown engine kind 'ollama'"), "{err}");

    let err = fails(dir.path(), &["build", "--kind", "vllm"]);
    assert!(err.contains("vllm is not built from source"), "{err}");

    let err = fails(dir.path(), &["build", "--source", "/nonexistent/llama.cpp"]);
    assert!(
        err.contains("'/nonexistent/llama.cpp' does not exist"),
        "{err}"
    );

    let err = fails(
        dir.path(),
        &["build", "--backend", "cpu", "--cuda-arch", "86"],
    );
    assert!(
        err.contains("--cuda-arch only applies to --backend cuda"),
        "{err}"
    );

    let err = fails(dir.path(), &["register", "/nonexistent/llama-server"]);
    assert!(
        err.contains("'/nonexistent/llama-server' does not exist"),
        "{err}"
    );

    let not_engine = dir.path().join("hello");
    std::fs::write(&not_engine, "#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(&not_engine, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = fails(dir.path(), &["register", not_engine.to_str().unwrap()]);
    assert!(err.contains("is not a llama.cpp server binary"), "{err}");

    let err = fails(dir.path(), &["remove", "not-a-number"]);
    assert!(err.contains("invalid value 'not-a-number'"), "{err}");
}

/// A source tree that stops at CMake's configure step, under `dir`.
fn tree_that_stops_at_configure(dir: &Path) -> std::path::PathBuf {
    let tree = dir.join("tree");
    support::tree_that_stops_at_configure(&tree);
    tree
}

/// `engines build` with the CUDA toolkit's variables unset, as in the tests' environment.
fn build_from(dir: &Path, tree: &Path, extra: &[&str]) -> Output {
    support::rigdeck_in(dir)
        .args(["engines", "build"])
        .args(extra)
        .arg("--source")
        .arg(tree)
        .env_remove("CUDACXX")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .output()
        .unwrap()
}

#[test]
fn the_automatic_backend_is_cuda_only_where_nvcc_can_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let tree = tree_that_stops_at_configure(dir.path());
    let output = build_from(dir.path(), &tree, &[]);
    let (stdout, stderr) = support::output_text(&output);
    assert!(!output.status.success(), "{stdout}");
    assert!(stderr.contains("stop here"), "{stderr}");
    if support::has_cuda_toolkit() {
        assert!(stdout.contains("-DCMAKE_CUDA_ARCHITECTURES=86"), "{stdout}");
    } else {
        // The 4×3090 rig is seen, nvcc is not: a CPU build, and how to get the CUDA one.
        assert!(
            stdout.contains("NVIDIA GPUs found (CUDA architectures 86) but no CUDA compiler (nvcc): building for the CPU"),
            "{stdout}"
        );
        assert!(!stdout.contains("CMAKE_CUDA_ARCHITECTURES"), "{stdout}");
    }
}

#[test]
fn a_cuda_build_needs_nvcc_and_takes_the_architectures_from_the_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let tree = tree_that_stops_at_configure(dir.path());
    let output = build_from(dir.path(), &tree, &["--backend", "cuda"]);
    let (stdout, stderr) = support::output_text(&output);
    assert!(!output.status.success(), "{stdout}");
    if support::has_cuda_toolkit() {
        // Past the tool check: the 4×3090 rig's compute capability 8.6 reached CMake.
        assert!(stdout.contains("-DCMAKE_CUDA_ARCHITECTURES=86"), "{stdout}");
        assert!(
            stderr.contains("CMake configure step failed") && stderr.contains("stop here"),
            "{stderr}"
        );
    } else {
        assert!(
            stderr.contains("nvcc was not found") && stderr.contains("CUDA"),
            "{stderr}"
        );
    }
}

/// `rigdeck engines list --json`, with `packaged` as the folder of shipped builds.
fn list_with_packaged(dir: &Path, packaged: &Path) -> Vec<serde_json::Value> {
    let output = support::rigdeck_in(dir)
        .env("RIGDECK_PACKAGED_ENGINES", packaged)
        .args(["engines", "list", "--json"])
        .output()
        .unwrap();
    let (stdout, stderr) = support::output_text(&output);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A package's shipped build, as `make package` lays it out.
fn ship(packaged: &Path, build: &str) -> PathBuf {
    let bin = packaged.join(build).join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let server = fake_server(&bin);
    std::fs::canonicalize(server).unwrap()
}

#[test]
fn the_engine_a_package_ships_is_registered_at_first_start_and_an_upgrade_keeps_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let packaged = dir.path().join("lib/rigdeck/engines");
    let first = ship(&packaged, "llama.cpp-abc1234-cpu-portable");

    let builds = list_with_packaged(dir.path(), &packaged);
    assert_eq!(builds.len(), 1, "{builds:?}");
    assert_eq!(builds[0]["source"], "packaged");
    assert_eq!(builds[0]["kind"], "llama.cpp");
    assert_eq!(builds[0]["backend"], "cpu");
    assert_eq!(builds[0]["status"], "ready");
    assert_eq!(builds[0]["location"], first.to_str().unwrap());
    let id = builds[0]["id"].clone();
    // Started again: nothing new, nothing duplicated.
    assert_eq!(list_with_packaged(dir.path(), &packaged).len(), 1);

    // An upgrade takes the old build's folder away and ships a newer one: same id, new place.
    std::fs::remove_dir_all(packaged.join("llama.cpp-abc1234-cpu-portable")).unwrap();
    let second = ship(&packaged, "llama.cpp-def5678-cpu-portable");
    let builds = list_with_packaged(dir.path(), &packaged);
    assert_eq!(builds.len(), 1, "{builds:?}");
    assert_eq!(builds[0]["id"], id);
    assert_eq!(builds[0]["location"], second.to_str().unwrap());
    assert_eq!(builds[0]["status"], "ready");

    // A build the user registered is never taken over by a shipped one.
    let own = fake_server(dir.path());
    let output = support::rigdeck_in(dir.path())
        .args(["engines", "register"])
        .arg(&own)
        .output()
        .unwrap();
    assert!(output.status.success());
    std::fs::remove_file(&own).unwrap();
    std::fs::remove_dir_all(packaged.join("llama.cpp-def5678-cpu-portable")).unwrap();
    ship(&packaged, "llama.cpp-0c1e570-cpu-portable");
    let builds = list_with_packaged(dir.path(), &packaged);
    let sources: Vec<&str> = builds.iter().filter_map(|b| b["source"].as_str()).collect();
    assert_eq!(sources, ["packaged", "registered"], "{builds:?}");
    assert_eq!(builds[1]["status"], "missing");
}
