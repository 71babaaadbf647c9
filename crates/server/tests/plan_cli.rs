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
