//! The tests' fake hub as a standalone server, for the download benchmark and the check that
//! `huggingface_hub` reads what Rigdeck downloads (both need a hub another process can reach).
//!
//! `fake_hub SPEC.json` prints the hub's address on the first line of standard output, then
//! serves until killed. The spec: `{"repos": [{"id": "org/name", "files": [{"path": "a.gguf",
//! "size": 1048576, "lfs": true}]}]}`; `"throttle_bps"` slows every body.

#[path = "../tests/support/fake_hub.rs"]
mod fake_hub;

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use std::io::Write;
use std::sync::atomic::Ordering;

#[derive(serde::Deserialize)]
struct Spec {
    repos: Vec<RepoSpec>,
    #[serde(default)]
    throttle_bps: u64,
}

#[derive(serde::Deserialize)]
struct RepoSpec {
    id: String,
    files: Vec<FileSpec>,
}

#[derive(serde::Deserialize)]
struct FileSpec {
    path: String,
    size: u64,
    #[serde(default = "yes")]
    lfs: bool,
}

fn yes() -> bool {
    true
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: fake_hub SPEC.json")?;
    let spec: Spec = serde_json::from_slice(&std::fs::read(&path)?)?;
    let repos = spec
        .repos
        .iter()
        .enumerate()
        .map(|(r, repo)| {
            let files = repo
                .files
                .iter()
                .enumerate()
                .map(|(f, file)| {
                    FakeFile::new(&file.path, file.size, (r * 1000 + f) as u64, file.lfs)
                })
                .collect();
            FakeRepo::new(&repo.id, r as u8 + 1, files)
        })
        .collect();
    let hub = RunningHub::start(repos).await;
    hub.state
        .faults
        .throttle_bps
        .store(spec.throttle_bps, Ordering::SeqCst);
    println!("{}", hub.url);
    std::io::stdout().flush()?;
    std::future::pending::<()>().await;
    Ok(())
}
