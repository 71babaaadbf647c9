//! A stand-in vLLM for tests: a virtual environment where `import vllm` gives a version, and a
//! `vllm` program the test writes (its serve behaviour), as a real install would lay them out.

use std::path::{Path, PathBuf};

/// A venv under `dir` whose `vllm` package says `version`; the venv and its site-packages.
pub fn venv(dir: &Path, version: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let venv = dir.join("vllm-env");
    let status = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 -m venv");
    assert!(status.success());
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .next()
        .expect("site-packages");
    std::fs::create_dir_all(site.join("vllm")).unwrap();
    std::fs::write(
        site.join("vllm/__init__.py"),
        format!("__version__ = \"{version}\"\n"),
    )
    .unwrap();
    (venv, site)
}

/// Writes `script` (a Python program, without its `#!` line) as the venv's `bin/vllm`.
pub fn install_program(venv: &Path, script: &str) {
    let program = venv.join("bin/vllm");
    let text = format!("#!{}\n{script}", venv.join("bin/python").display());
    std::fs::write(&program, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
}
