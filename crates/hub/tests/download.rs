//! The downloader and the hub client against a local fake of the hub (`support/fake_hub.rs`):
//! the production code path end to end, with the faults the other apps' users complain of.

mod support;

use rigdeck_hub::api::{HubClient, HubError, SearchQuery, SortBy, WeightFormat};
use rigdeck_hub::cache::Destination;
use rigdeck_hub::config::{HubConfig, HubToken};
use rigdeck_hub::download::{
    DownloadError, DownloadPlan, DownloadProgress, Downloader, FetchOptions,
};
use rigdeck_hub::repo::{RepoId, Revision};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::fake_hub::{FakeFile, FakeRepo, RunningHub};
use tokio_util::sync::CancellationToken;

const MIB: u64 = 1 << 20;

fn quick_options() -> FetchOptions {
    FetchOptions {
        connections: 4,
        chunk_bytes: 256 << 10,
        stall_timeout: Duration::from_millis(500),
        max_attempts: 6,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        journal_every: 512 << 10,
    }
}

fn sharded_repo() -> FakeRepo {
    FakeRepo::new(
        "unsloth/Tiny-MoE-GGUF",
        0xab,
        vec![
            FakeFile::new("README.md", 1234, 1, false),
            FakeFile::new(
                "UD-IQ2_M/Tiny-MoE-UD-IQ2_M-00001-of-00003.gguf",
                3 * MIB + 17,
                2,
                true,
            ),
            FakeFile::new(
                "UD-IQ2_M/Tiny-MoE-UD-IQ2_M-00002-of-00003.gguf",
                2 * MIB,
                3,
                true,
            ),
            FakeFile::new(
                "UD-IQ2_M/Tiny-MoE-UD-IQ2_M-00003-of-00003.gguf",
                MIB / 2 + 5,
                4,
                true,
            ),
            FakeFile::new("Tiny-MoE-Q8_0.gguf", 5 * MIB, 5, true),
        ],
    )
}

struct Setup {
    hub: RunningHub,
    cache: tempfile::TempDir,
    client: HubClient,
}

async fn setup(repos: Vec<FakeRepo>, token: Option<&str>) -> Setup {
    let hub = RunningHub::start(repos).await;
    let cache = tempfile::tempdir().expect("cache dir");
    let config = HubConfig {
        endpoint: url::Url::parse(&hub.url).expect("hub url"),
        cache_dir: cache.path().to_owned(),
        token: token.map(|t| HubToken::parse(t).expect("token")),
    };
    let client = HubClient::new(&config).expect("client");
    Setup { hub, cache, client }
}

impl Setup {
    fn downloader(&self, options: FetchOptions) -> Downloader {
        Downloader::new(
            self.client.clone(),
            Destination::HubCache(self.cache.path().to_owned()),
            options,
        )
    }

    /// The plan for the files whose path starts with `prefix`, from the real listing.
    async fn plan(&self, repo: &str, prefix: &str) -> DownloadPlan {
        let repo = RepoId::parse(repo).expect("repo id");
        let info = self
            .client
            .model_info(&repo, &Revision::main())
            .await
            .expect("model info");
        let listing = self
            .client
            .list_files(&repo, &info.commit)
            .await
            .expect("listing");
        DownloadPlan {
            repo,
            revision: Revision::main(),
            commit: info.commit,
            files: listing
                .files
                .into_iter()
                .filter(|f| f.path.as_str().starts_with(prefix))
                .collect(),
        }
    }

    async fn run(
        &self,
        plan: &DownloadPlan,
        options: FetchOptions,
    ) -> Result<rigdeck_hub::download::Downloaded, DownloadError> {
        self.downloader(options)
            .download(
                plan,
                &DownloadProgress::default(),
                &CancellationToken::new(),
            )
            .await
    }
}

fn assert_same_content(path: &Path, file: &FakeFile) {
    let content = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(content.len() as u64, file.size, "{}", path.display());
    assert!(
        content == file.all_bytes(),
        "{} differs from the hub's file",
        path.display()
    );
}

#[tokio::test]
async fn a_split_quant_lands_in_the_shared_cache_layout_verified() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "UD-IQ2_M/").await;
    assert_eq!(plan.files.len(), 3);
    let done = s.run(&plan, quick_options()).await.expect("download");
    let repo = sharded_repo();
    let repo_dir = s.cache.path().join("models--unsloth--Tiny-MoE-GGUF");
    for (path, file) in done.paths.iter().zip(&repo.files[1..4]) {
        assert!(path.starts_with(repo_dir.join("snapshots").join(&repo.commit)));
        assert!(std::fs::symlink_metadata(path)
            .expect("link")
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_link(path).expect("target"),
            Path::new("../../../blobs").join(&file.sha256),
            "a relative link one level deeper for the quant's folder"
        );
        assert_same_content(path, file);
    }
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).expect("ref"),
        repo.commit
    );
    let leftovers: Vec<_> = std::fs::read_dir(repo_dir.join("blobs"))
        .expect("blobs")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no partial or journal left: {leftovers:?}"
    );
    assert!(
        s.hub.state.seen.range_requests.load(Ordering::SeqCst) > 3,
        "several ranges per file"
    );
    // A second run finds everything in place and fetches nothing.
    let before = s.hub.state.seen.body_bytes.load(Ordering::SeqCst);
    let again = s.run(&plan, quick_options()).await.expect("again");
    assert_eq!(again.reused, 3);
    assert_eq!(s.hub.state.seen.body_bytes.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn a_git_file_is_checked_against_its_git_id() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "README").await;
    let done = s.run(&plan, quick_options()).await.expect("download");
    assert_same_content(&done.paths[0], &sharded_repo().files[0]);
}

#[tokio::test]
async fn a_flipped_byte_is_caught_and_the_file_fetched_again() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    s.hub
        .state
        .faults
        .flip_offset
        .store(3 * MIB + 12345, Ordering::SeqCst);
    s.hub.state.faults.flips.store(1, Ordering::SeqCst);
    let done = s
        .run(&plan, quick_options())
        .await
        .expect("second fetch is good");
    assert_same_content(&done.paths[0], sharded_repo().file("Tiny-MoE-Q8_0.gguf"));
    assert!(
        s.hub.state.seen.body_bytes.load(Ordering::SeqCst) >= 10 * MIB,
        "fetched twice"
    );

    // Corrupt every time: refused, and nothing corrupt is left in the cache.
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    s.hub.state.faults.flip_offset.store(7, Ordering::SeqCst);
    s.hub.state.faults.flips.store(usize::MAX, Ordering::SeqCst);
    let error = s
        .run(&plan, quick_options())
        .await
        .expect_err("always corrupt");
    assert!(
        matches!(error, DownloadError::HashMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("Tiny-MoE-Q8_0.gguf"), "{error}");
    let blob = s
        .cache
        .path()
        .join("models--unsloth--Tiny-MoE-GGUF/blobs")
        .join(&sharded_repo().file("Tiny-MoE-Q8_0.gguf").sha256);
    assert!(!blob.exists());
    assert!(!blob.with_extension("incomplete").exists());
}

#[tokio::test]
async fn stalls_cuts_server_errors_and_rate_limits_are_retried() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "UD-IQ2_M/").await;
    let faults = &s.hub.state.faults;
    faults.stalls.store(2, Ordering::SeqCst);
    faults.cuts.store(2, Ordering::SeqCst);
    faults.server_errors.store(3, Ordering::SeqCst);
    faults.rate_limits.store(1, Ordering::SeqCst);
    let done = s.run(&plan, quick_options()).await.expect("recovered");
    for (path, file) in done.paths.iter().zip(&sharded_repo().files[1..4]) {
        assert_same_content(path, file);
    }
    assert_eq!(
        faults.stalls.load(Ordering::SeqCst),
        0,
        "the stalls happened"
    );
}

#[tokio::test]
async fn a_server_that_keeps_failing_is_given_up_on_with_its_answer_and_the_part_kept() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    // Let the first chunks through, then fail: the received prefix must survive.
    let options = FetchOptions {
        connections: 1,
        max_attempts: 3,
        ..quick_options()
    };
    let cancel = CancellationToken::new();
    let progress = DownloadProgress::default();
    let downloader = s.downloader(options.clone());
    let faults = &s.hub.state.faults;
    faults.throttle_bps.store(4 * MIB, Ordering::SeqCst);
    let run = downloader.download(&plan, &progress, &cancel);
    let fail_later = async {
        while progress.done_bytes.load(Ordering::Relaxed) < MIB {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        faults.server_errors.store(usize::MAX, Ordering::SeqCst);
    };
    let (result, ()) = tokio::join!(run, fail_later);
    let error = result.expect_err("keeps failing");
    assert!(error.to_string().contains("503"), "{error}");
    let partial = s
        .cache
        .path()
        .join("models--unsloth--Tiny-MoE-GGUF/blobs")
        .join(format!(
            "{}.incomplete",
            sharded_repo().file("Tiny-MoE-Q8_0.gguf").sha256
        ));
    let kept = std::fs::metadata(&partial).expect("partial kept").len();
    assert!(kept >= MIB / 2, "kept {kept} bytes");

    // The server recovers: the next run resumes from the kept part.
    faults.server_errors.store(0, Ordering::SeqCst);
    faults.throttle_bps.store(0, Ordering::SeqCst);
    let served_before = s.hub.state.seen.body_bytes.load(Ordering::SeqCst);
    let done = s.run(&plan, options).await.expect("resumed");
    assert_same_content(&done.paths[0], sharded_repo().file("Tiny-MoE-Q8_0.gguf"));
    let served = s.hub.state.seen.body_bytes.load(Ordering::SeqCst) - served_before;
    assert!(
        served <= 5 * MIB - kept,
        "only the rest was fetched: {served} bytes"
    );
}

#[tokio::test]
async fn a_paused_download_resumes_without_fetching_or_reading_the_prefix_again() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    s.hub
        .state
        .faults
        .throttle_bps
        .store(8 * MIB, Ordering::SeqCst);
    let cancel = CancellationToken::new();
    let progress = DownloadProgress::default();
    let downloader = s.downloader(quick_options());
    let pause = async {
        while progress.done_bytes.load(Ordering::Relaxed) < 2 * MIB {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(downloader.download(&plan, &progress, &cancel), pause);
    assert!(
        matches!(result, Err(DownloadError::Cancelled)),
        "{result:?}"
    );
    let blobs = s.cache.path().join("models--unsloth--Tiny-MoE-GGUF/blobs");
    let sha = sharded_repo().file("Tiny-MoE-Q8_0.gguf").sha256.clone();
    let journal = blobs.join(format!("{sha}.resume.json"));
    assert!(journal.exists(), "the hash state was saved on pause");
    let written = std::fs::metadata(blobs.join(format!("{sha}.incomplete")))
        .expect("partial")
        .len();
    assert!(written > 0);

    s.hub.state.faults.throttle_bps.store(0, Ordering::SeqCst);
    let served_before = s.hub.state.seen.body_bytes.load(Ordering::SeqCst);
    let resumed = DownloadProgress::default();
    let done = s
        .downloader(quick_options())
        .download(&plan, &resumed, &CancellationToken::new())
        .await
        .expect("resumed");
    assert_same_content(&done.paths[0], sharded_repo().file("Tiny-MoE-Q8_0.gguf"));
    let served = s.hub.state.seen.body_bytes.load(Ordering::SeqCst) - served_before;
    assert_eq!(
        served,
        5 * MIB - written,
        "exactly the missing part was fetched"
    );
}

#[tokio::test]
async fn a_gated_repository_needs_a_token_that_never_reaches_the_cdn() {
    let mut repo = sharded_repo();
    repo.gated_token = Some("hf_sesame".into());
    let s = setup(vec![repo.clone()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    let error = s.run(&plan, quick_options()).await.expect_err("no token");
    assert!(
        matches!(
            &error,
            DownloadError::Hub {
                source: HubError::Gated { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("is gated") && error.to_string().contains("token"),
        "{error}"
    );

    let s = setup(vec![repo], Some("hf_sesame")).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    let done = s.run(&plan, quick_options()).await.expect("with the token");
    assert_same_content(&done.paths[0], sharded_repo().file("Tiny-MoE-Q8_0.gguf"));
    let seen = &s.hub.state.seen;
    assert!(seen
        .hub_authorizations
        .lock()
        .expect("seen")
        .iter()
        .all(|a| a == "Bearer hf_sesame"));
    assert!(!seen.hub_authorizations.lock().expect("seen").is_empty());
    assert!(
        seen.cdn_authorizations.lock().expect("seen").is_empty(),
        "the token went to another host"
    );
}

#[tokio::test]
async fn a_redirect_loop_is_refused() {
    let s = setup(vec![], Some("hf_x")).await;
    let url = url::Url::parse(&format!("{}/loop/a", s.hub.url)).expect("url");
    let error = s.client.get(&url, None).await.err().expect("loop");
    assert!(matches!(error, HubError::RedirectLoop { .. }), "{error}");
}

#[tokio::test]
async fn search_info_and_a_paged_listing() {
    let mut big = sharded_repo();
    big.downloads = 10;
    let mut small = FakeRepo::new(
        "bartowski/Small-GGUF",
        0x01,
        vec![FakeFile::new("s-Q4_K_M.gguf", 10, 9, true)],
    );
    small.downloads = 99;
    small.likes = 0;
    big.likes = 5;
    let s = setup(vec![big, small], None).await;
    let hits = s
        .client
        .search(&SearchQuery {
            text: "gguf".into(),
            format: Some(WeightFormat::Gguf),
            sort: SortBy::Downloads,
            limit: None,
        })
        .await
        .expect("search");
    let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["bartowski/Small-GGUF", "unsloth/Tiny-MoE-GGUF"]);
    s.hub.state.page_size.store(2, Ordering::SeqCst);
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "").await;
    assert_eq!(plan.files.len(), 5, "three pages joined");
    let missing = s
        .client
        .model_info(
            &RepoId::parse("nobody/none").expect("id"),
            &Revision::main(),
        )
        .await
        .expect_err("missing");
    assert!(missing.to_string().contains("nobody/none"), "{missing}");
}

#[tokio::test]
async fn a_hostile_listing_is_refused_entry_by_entry() {
    let s = setup(vec![sharded_repo()], None).await;
    let sha = "a".repeat(64);
    let oid = "b".repeat(40);
    let raw = serde_json::json!([
        {"type": "file", "path": "../../../etc/cron.d/x", "size": 1, "oid": oid},
        {"type": "file", "path": "/abs.gguf", "size": 1, "oid": oid},
        {"type": "file", "path": "ok.gguf", "size": 4, "oid": oid, "lfs": {"oid": sha, "size": 4}},
        {"type": "file", "path": "dup.gguf", "size": 4, "oid": oid},
        {"type": "file", "path": "dup.gguf", "size": 5, "oid": oid},
        {"type": "file", "path": "a\u{0}b", "size": 1, "oid": oid},
    ]);
    s.hub
        .state
        .raw_trees
        .lock()
        .expect("raw")
        .insert("unsloth/Tiny-MoE-GGUF".into(), raw.to_string());
    let repo = RepoId::parse("unsloth/Tiny-MoE-GGUF").expect("id");
    let info = s
        .client
        .model_info(&repo, &Revision::main())
        .await
        .expect("info");
    let listing = s
        .client
        .list_files(&repo, &info.commit)
        .await
        .expect("listing");
    assert_eq!(
        listing
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>(),
        ["ok.gguf"]
    );
    assert_eq!(listing.refused.len(), 4, "{:#?}", listing.refused);

    s.hub
        .state
        .raw_trees
        .lock()
        .expect("raw")
        .insert("unsloth/Tiny-MoE-GGUF".into(), "{not json".into());
    let error = s
        .client
        .list_files(&repo, &info.commit)
        .await
        .expect_err("garbage");
    assert!(error.to_string().contains("does not parse"), "{error}");
}

#[tokio::test]
async fn a_file_whose_size_changed_upstream_is_refused() {
    let s = setup(vec![sharded_repo()], None).await;
    let mut plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    plan.files[0].size_bytes += 1;
    let error = s.run(&plan, quick_options()).await.expect_err("size");
    assert!(
        matches!(error, DownloadError::SizeMismatch { .. }),
        "{error}"
    );
}

/// A small tmpfs of its own: the only way to see a real "disk full" (CI runs as root).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> SmallDisk {
        let dir = tempfile::tempdir().expect("mount point");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a {bytes}-byte tmpfs failed: this test needs root (CI runs as root)"
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test]
async fn a_full_disk_is_refused_up_front_or_kept_for_resume_when_it_fills_midway() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "Tiny-MoE-Q8_0").await;
    let disk = SmallDisk::mount(4 * MIB);
    let to_disk = |dir: &Path, options| {
        Downloader::new(
            s.client.clone(),
            Destination::HubCache(dir.to_owned()),
            options,
        )
    };
    let error = to_disk(disk.path(), quick_options())
        .download(
            &plan,
            &DownloadProgress::default(),
            &CancellationToken::new(),
        )
        .await
        .expect_err("5 MiB on a 4 MiB disk");
    let message = error.to_string();
    assert!(
        matches!(error, DownloadError::DiskSpace { .. })
            && message.contains("needs 5.0 MiB")
            && message.contains("free"),
        "{message}"
    );
    assert_eq!(
        s.hub.state.seen.body_bytes.load(Ordering::SeqCst),
        0,
        "refused before a byte"
    );
    drop(disk);

    // Room at the start, then something else fills the disk.
    let disk = SmallDisk::mount(8 * MIB);
    s.hub
        .state
        .faults
        .throttle_bps
        .store(8 * MIB, Ordering::SeqCst);
    let progress = DownloadProgress::default();
    let downloader = to_disk(
        disk.path(),
        FetchOptions {
            connections: 1,
            ..quick_options()
        },
    );
    let filler = disk.path().join("filler");
    let fill = async {
        while progress.done_bytes.load(Ordering::Relaxed) < MIB {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Take every free byte (the download keeps writing meanwhile).
        let mut file = std::fs::File::create(&filler).expect("filler");
        while std::io::Write::write_all(&mut file, &[0u8; 64 << 10]).is_ok() {}
    };
    let cancel = CancellationToken::new();
    let (result, ()) = tokio::join!(downloader.download(&plan, &progress, &cancel), fill);
    let error = result.expect_err("disk filled midway");
    assert!(error.to_string().contains("the disk is full"), "{error}");
    assert!(error.to_string().contains("kept"), "{error}");
    let sha = sharded_repo().file("Tiny-MoE-Q8_0.gguf").sha256.clone();
    let blobs = disk.path().join("models--unsloth--Tiny-MoE-GGUF/blobs");
    assert!(
        !blobs.join(&sha).exists(),
        "no half-written file where the finished one goes"
    );
    assert!(blobs.join(format!("{sha}.incomplete")).exists());

    std::fs::remove_file(&filler).expect("free the space");
    s.hub.state.faults.throttle_bps.store(0, Ordering::SeqCst);
    let done = to_disk(disk.path(), quick_options())
        .download(
            &plan,
            &DownloadProgress::default(),
            &CancellationToken::new(),
        )
        .await
        .expect("resumed after space was freed");
    assert_same_content(&done.paths[0], sharded_repo().file("Tiny-MoE-Q8_0.gguf"));
}

#[tokio::test]
async fn the_cache_lists_disk_use_removes_unshared_blobs_and_verifies_against_the_hub() {
    use rigdeck_hub::cache::inventory;
    use rigdeck_hub::download::verify::verify;
    let s = setup(vec![sharded_repo()], None).await;
    let all = s.plan("unsloth/Tiny-MoE-GGUF", "").await;
    s.run(&all, quick_options()).await.expect("download");
    let repo = all.repo.clone();
    // A second snapshot sharing one blob with the first (the hub moved main on).
    let other = rigdeck_hub::repo::CommitId::parse(&"e".repeat(40)).expect("commit");
    let shared = DownloadPlan {
        commit: other.clone(),
        revision: Revision::parse(&"e".repeat(40)).expect("rev"),
        files: all
            .files
            .iter()
            .filter(|f| f.path.as_str() == "Tiny-MoE-Q8_0.gguf")
            .cloned()
            .collect(),
        ..all.clone()
    };
    s.run(&shared, quick_options()).await.expect("linked only");

    let listed = inventory::list(s.cache.path());
    assert_eq!(listed.len(), 1);
    let total: u64 = sharded_repo().files.iter().map(|f| f.size).sum();
    assert_eq!(listed[0].size_on_disk, total, "a shared blob counts once");
    assert_eq!(listed[0].snapshots.len(), 2);
    let main = listed[0]
        .snapshots
        .iter()
        .find(|s| s.refs == ["main"])
        .expect("main");
    assert_eq!(main.files.len(), 5);

    let verified = verify(&s.client, s.cache.path(), &repo, &Revision::main())
        .await
        .expect("verify");
    assert!(verified.files.iter().all(|f| f.ok), "{verified:?}");
    assert_eq!(verified.files.len(), 5);
    assert!(verified.upstream_commit.is_none());
    // A byte changed on disk is found.
    let q8 = s
        .cache
        .path()
        .join("models--unsloth--Tiny-MoE-GGUF/blobs")
        .join(&sharded_repo().file("Tiny-MoE-Q8_0.gguf").sha256);
    let mut content = std::fs::read(&q8).expect("blob");
    content[4096] ^= 0xff;
    std::fs::write(&q8, &content).expect("tamper");
    let verified = verify(&s.client, s.cache.path(), &repo, &Revision::main())
        .await
        .expect("verify");
    let bad: Vec<&str> = verified
        .files
        .iter()
        .filter(|f| !f.ok)
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(bad, ["Tiny-MoE-Q8_0.gguf"]);

    // Removing main frees every blob but the one the other snapshot still links.
    let removed = inventory::remove(s.cache.path(), &repo, Some(&main.commit)).expect("remove");
    assert_eq!((removed.blobs_removed, removed.blobs_kept), (4, 1));
    assert_eq!(
        removed.freed_bytes,
        total - sharded_repo().file("Tiny-MoE-Q8_0.gguf").size
    );
    assert!(q8.exists());
    let removed = inventory::remove(s.cache.path(), &repo, None).expect("remove the rest");
    assert_eq!(removed.blobs_removed, 1);
    assert!(inventory::list(s.cache.path()).is_empty());
}

#[tokio::test]
async fn a_branch_that_moved_on_upstream_is_flagged() {
    let s = setup(vec![sharded_repo()], None).await;
    let plan = s.plan("unsloth/Tiny-MoE-GGUF", "README").await;
    s.run(&plan, quick_options()).await.expect("download");
    {
        // The hub's main moves to a new commit; the old one is still served.
        let mut repos = s.hub.state.repos.lock().expect("repos");
        let old = std::mem::replace(&mut repos[0].commit, "f".repeat(40));
        repos[0].old_commits.push(old);
    }
    let checked = rigdeck_hub::download::verify::verify(
        &s.client,
        s.cache.path(),
        &plan.repo,
        &Revision::main(),
    )
    .await
    .expect("verify");
    assert_eq!(
        checked.commit, plan.commit,
        "the local files are checked at their own commit"
    );
    assert_eq!(
        checked.upstream_commit.map(|c| c.to_string()),
        Some("f".repeat(40))
    );
    assert!(checked.files.iter().all(|f| f.ok));
}
