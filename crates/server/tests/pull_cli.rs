//! `rigdeck pull`, `rigdeck search` and `rigdeck hub show` as a user runs them, against the
//! hub crate's local fake of the Hugging Face hub: a `kill -9` mid-download resumes to a
//! verified file without fetching the received part again; a hub that never answers, rate
//! limits the revision API or lists only refused files ends the pull with a clear error.

#[path = "../../hub/tests/support/fake_hub.rs"]
mod fake_hub;
#[path = "../../hub/tests/support/raw_http.rs"]
mod raw_http;

use fake_hub::{FakeFile, FakeRepo, RunningHub};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn repo() -> FakeRepo {
    FakeRepo::new(
        "org/Model-GGUF",
        0x5a,
        vec![
            FakeFile::new("README.md", 900, 1, false),
            FakeFile::new("Model-Q4_K_M.gguf", 6 * MIB, 2, true),
            FakeFile::new("Q8_0/Model-Q8_0-00001-of-00002.gguf", 12 * MIB + 3, 3, true),
            FakeFile::new("Q8_0/Model-Q8_0-00002-of-00002.gguf", 4 * MIB, 4, true),
        ],
    )
}

struct Env {
    dir: tempfile::TempDir,
    hub: String,
}

impl Env {
    fn new(hub: &RunningHub) -> Env {
        Env {
            dir: tempfile::tempdir().expect("tempdir"),
            hub: hub.url.clone(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("hub")
    }

    fn rigdeck(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rigdeck"));
        command
            .args(args)
            .env("HF_ENDPOINT", &self.hub)
            .env("HF_HUB_CACHE", self.cache())
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env_remove("HF_TOKEN")
            .env("RIGDECK_CONFIG_DIR", self.dir.path().join("config"))
            .env("RIGDECK_DATA_DIR", self.dir.path().join("data"));
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut command = self.rigdeck(args);
        tokio::task::spawn_blocking(move || command.output().expect("run rigdeck"))
            .await
            .expect("joined")
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn blob(cache: &Path, file: &FakeFile) -> PathBuf {
    cache
        .join("models--org--Model-GGUF/blobs")
        .join(&file.sha256)
}

#[tokio::test]
async fn a_kill_9_mid_download_resumes_to_a_verified_file() {
    let hub = RunningHub::start(vec![repo()]).await;
    let env = Env::new(&hub);
    hub.state
        .faults
        .throttle_bps
        .store(2 * MIB, Ordering::SeqCst);
    let mut child = env
        .rigdeck(&["pull", "org/Model-GGUF:Q8_0", "--connections", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start rigdeck pull");
    let first = repo().files[2].clone();
    let partial = blob(&env.cache(), &first).with_extension("incomplete");
    let started = Instant::now();
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < first.size / 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the download did not reach half"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    let kept = std::fs::metadata(&partial).expect("partial kept").len();
    let served_before = hub.state.seen.body_bytes.load(Ordering::SeqCst);

    hub.state.faults.throttle_bps.store(0, Ordering::SeqCst);
    let output = env.run(&["pull", "org/Model-GGUF:Q8_0"]).await;
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("2 file(s) verified"),
        "{}",
        text(&output)
    );
    for file in &repo().files[2..] {
        let content = std::fs::read(blob(&env.cache(), file)).expect("blob");
        assert!(
            content == file.all_bytes(),
            "{} differs from the hub's",
            file.path
        );
    }
    let resumed = hub.state.seen.body_bytes.load(Ordering::SeqCst) - served_before;
    let total: u64 = repo().files[2..].iter().map(|f| f.size).sum();
    assert!(
        resumed <= total - kept,
        "the resume fetched {resumed} bytes, the received {kept} should not be fetched again"
    );
}

#[tokio::test]
async fn search_show_and_pull_speak_in_quantizations() {
    let hub = RunningHub::start(vec![repo()]).await;
    let env = Env::new(&hub);
    let search = env.run(&["search", "model", "--gguf"]).await;
    assert!(search.status.success(), "{}", text(&search));
    assert!(
        text(&search).contains("org/Model-GGUF"),
        "{}",
        text(&search)
    );

    let show = env.run(&["hub", "show", "org/Model-GGUF"]).await;
    let shown = text(&show);
    let q8 = shown.lines().find(|l| l.starts_with("Q8_0")).expect(&shown);
    assert!(q8.contains("16.0 MiB") && q8.contains(" 2"), "{q8}");
    assert!(shown.contains("Q4_K_M"), "{shown}");

    let ambiguous = env.run(&["pull", "org/Model-GGUF"]).await;
    assert_eq!(ambiguous.status.code(), Some(2), "{}", text(&ambiguous));
    assert!(
        text(&ambiguous).contains("name one as REPO:QUANT"),
        "{}",
        text(&ambiguous)
    );
    let unknown = env.run(&["pull", "org/Model-GGUF:IQ1_S"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown).contains("Q4_K_M") && text(&unknown).contains("Q8_0"),
        "{}",
        text(&unknown)
    );
    let bad = env.run(&["pull", "../etc:Q8_0"]).await;
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("is not a repository id"),
        "{}",
        text(&bad)
    );
    assert!(
        !env.cache().exists(),
        "nothing was written for refused pulls"
    );

    let to = env.dir.path().join("plain");
    let pulled = env
        .run(&[
            "pull",
            "org/Model-GGUF:q4_k_m",
            "--to",
            to.to_str().expect("utf-8"),
        ])
        .await;
    assert!(pulled.status.success(), "{}", text(&pulled));
    let content = std::fs::read(to.join("Model-Q4_K_M.gguf")).expect("plain file");
    assert!(content == repo().files[1].all_bytes());
}

#[tokio::test]
async fn a_gated_model_asks_for_a_token_and_login_keeps_it_private() {
    let mut gated = repo();
    gated.gated_token = Some("hf_letmein".into());
    let hub = RunningHub::start(vec![gated]).await;
    let env = Env::new(&hub);
    let refused = env.run(&["pull", "org/Model-GGUF:Q4_K_M"]).await;
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("is gated") && text(&refused).contains("rigdeck hub login"),
        "{}",
        text(&refused)
    );

    let mut login = env.rigdeck(&["hub", "login"]);
    login
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = login.spawn().expect("login");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"hf_letmein\n").expect("token");
    }
    let out = child.wait_with_output().expect("login done");
    assert!(out.status.success(), "{}", text(&out));
    let token_file = env.dir.path().join("config/hf_token");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file)
        .expect("saved")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let pulled = env.run(&["pull", "org/Model-GGUF:Q4_K_M"]).await;
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert!(
        !text(&pulled).contains("hf_letmein"),
        "the token is never printed"
    );
    assert!(hub
        .state
        .seen
        .cdn_authorizations
        .lock()
        .expect("seen")
        .is_empty());
}

#[tokio::test]
async fn list_verify_and_remove_what_was_pulled() {
    let hub = RunningHub::start(vec![repo()]).await;
    let env = Env::new(&hub);
    let pulled = env.run(&["pull", "org/Model-GGUF:Q8_0"]).await;
    assert!(pulled.status.success(), "{}", text(&pulled));

    let listed = env.run(&["hub", "list"]).await;
    let listed = text(&listed);
    let row = listed
        .lines()
        .find(|l| l.starts_with("org/Model-GGUF"))
        .expect(&listed);
    assert!(row.contains("16.0 MiB") && row.contains("(main)"), "{row}");

    let verified = env.run(&["verify", "org/Model-GGUF"]).await;
    assert!(verified.status.success(), "{}", text(&verified));
    assert_eq!(
        text(&verified).matches("ok ").count(),
        2,
        "{}",
        text(&verified)
    );
    let shard = blob(&env.cache(), &repo().files[3]);
    let mut content = std::fs::read(&shard).expect("blob");
    content[10] ^= 1;
    std::fs::write(&shard, content).expect("tamper");
    let tampered = env.run(&["verify", "org/Model-GGUF"]).await;
    assert_eq!(tampered.status.code(), Some(1));
    assert!(
        text(&tampered).contains("BAD     Q8_0/Model-Q8_0-00002-of-00002.gguf"),
        "{}",
        text(&tampered)
    );

    let removed = env.run(&["hub", "rm", "org/Model-GGUF"]).await;
    assert!(removed.status.success(), "{}", text(&removed));
    assert!(
        text(&removed).contains("16.0 MiB freed"),
        "{}",
        text(&removed)
    );
    assert!(!env.cache().join("models--org--Model-GGUF").exists());
}

#[tokio::test]
async fn a_pull_from_a_hub_that_never_answers_fails_within_its_timeout() {
    let silent = raw_http::RawServer::start(|_| raw_http::Reply::Silence).await;
    let hub = RunningHub::start(vec![repo()]).await;
    let mut env = Env::new(&hub);
    env.hub = silent.url.clone();
    let mut child = env
        .rigdeck(&["pull", "org/Model-GGUF:Q4_K_M", "--timeout", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start rigdeck pull");
    let started = Instant::now();
    while child.try_wait().expect("poll").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("rigdeck pull still waits on a hub that never answers");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = child.wait_with_output().expect("output");
    assert!(!output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("sent no response headers") && text(&output).contains("HF_ENDPOINT"),
        "{}",
        text(&output)
    );
}

#[tokio::test]
async fn a_rate_limited_revision_api_is_retried_before_the_pull_gives_up() {
    let hub = RunningHub::start(vec![repo()]).await;
    hub.state
        .faults
        .model_info_rate_limits
        .store(1, Ordering::SeqCst);
    let env = Env::new(&hub);
    let pulled = env.run(&["pull", "org/Model-GGUF:Q4_K_M"]).await;
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert!(
        text(&pulled).contains("1 file(s) verified"),
        "{}",
        text(&pulled)
    );
}

#[tokio::test]
async fn a_repository_whose_every_file_is_refused_fails_and_writes_no_ref() {
    let hub = RunningHub::start(vec![repo()]).await;
    let hostile = serde_json::json!([
        {"type": "file", "path": "../escape.gguf", "size": 1, "oid": "1".repeat(40)},
        {"type": "file", "path": "a//b.gguf", "size": 1, "oid": "2".repeat(40)},
    ]);
    hub.state
        .raw_trees
        .lock()
        .expect("raw")
        .insert("org/Model-GGUF".into(), hostile.to_string());
    let env = Env::new(&hub);
    let pulled = env.run(&["pull", "org/Model-GGUF"]).await;
    assert!(!pulled.status.success(), "{}", text(&pulled));
    assert!(
        text(&pulled).contains("every file was refused")
            && text(&pulled).contains("climbing with '.' or '..'"),
        "{}",
        text(&pulled)
    );
    assert!(
        !env.cache()
            .join("models--org--Model-GGUF/refs/main")
            .exists(),
        "no ref for a pull that got nothing"
    );
}
