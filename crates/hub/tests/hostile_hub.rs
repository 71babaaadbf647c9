//! The hub client and the downloader against hubs that misbehave: a server that accepts and
//! never answers, answers that stall, a day-long `Retry-After`, a listing paged to exhaust
//! memory, a repository whose every file is refused, signed CDN addresses that must not reach
//! a message; and the files a download leaves on disk (a same-size re-upload in a plain folder,
//! a partial another download is writing, a resume that hashes what is on disk).

mod support;

use rigdeck_hub::api::client::MAX_RETRY_AFTER;
use rigdeck_hub::api::{ClientOptions, HubClient, HubError};
use rigdeck_hub::cache::{inventory, Destination, DownloadLock};
use rigdeck_hub::config::HubConfig;
use rigdeck_hub::download::{
    DownloadError, DownloadPlan, DownloadProgress, Downloader, FetchOptions,
};
use rigdeck_hub::repo::{CommitId, RepoFile, RepoId, RepoPath, Revision};
use sha2::Digest;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::fake_hub::{FakeFile, FakeRepo, RunningHub};
use support::raw_http::{answer, headers_only, RawServer, Reply};
use tokio_util::sync::CancellationToken;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// Longer than any deadline a test sets: reaching it means the client hung.
const HANG: Duration = Duration::from_secs(20);

fn quick_client_options() -> ClientOptions {
    ClientOptions {
        response_deadline: Duration::from_millis(300),
        body_stall: Duration::from_millis(300),
        api_attempts: 2,
        retry_wait: Duration::from_millis(20),
    }
}

fn quick_fetch_options() -> FetchOptions {
    FetchOptions {
        connections: 2,
        chunk_bytes: 256 << 10,
        stall_timeout: Duration::from_millis(300),
        max_attempts: 2,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(20),
        journal_every: 256 << 10,
    }
}

fn client_for(url: &str, cache: &std::path::Path) -> HubClient {
    let config = HubConfig {
        endpoint: url::Url::parse(url).expect("hub url"),
        cache_dir: cache.to_owned(),
        token: None,
    };
    HubClient::new(&config)
        .expect("client")
        .with_options(quick_client_options())
}

fn repo() -> RepoId {
    RepoId::parse("o/n").expect("repo")
}

fn commit() -> CommitId {
    CommitId::parse(COMMIT).expect("commit")
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An LFS file of the repository holding `content`.
fn lfs_file(path: &str, content: &[u8]) -> RepoFile {
    RepoFile {
        path: RepoPath::parse(path).expect("path"),
        size_bytes: content.len() as u64,
        git_oid: "1".repeat(40),
        lfs_sha256: Some(sha256_hex(content)),
    }
}

fn plan_of(files: Vec<RepoFile>) -> DownloadPlan {
    DownloadPlan {
        repo: repo(),
        revision: Revision::main(),
        commit: commit(),
        files,
    }
}

async fn download(
    client: HubClient,
    destination: Destination,
    plan: &DownloadPlan,
) -> Result<rigdeck_hub::download::Downloaded, DownloadError> {
    let downloader = Downloader::new(client, destination, quick_fetch_options());
    let (progress, cancel) = (DownloadProgress::default(), CancellationToken::new());
    tokio::time::timeout(HANG, downloader.download(plan, &progress, &cancel))
        .await
        .expect("the download hung past every deadline")
}

fn model_json() -> Vec<u8> {
    serde_json::json!({"id": "o/n", "sha": COMMIT})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn an_api_call_to_a_hub_that_never_answers_fails_within_its_deadline() {
    let server = RawServer::start(|_| Reply::Silence).await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let info = tokio::time::timeout(HANG, client.model_info(&repo(), &Revision::main()))
        .await
        .expect("model info hung");
    let error = info.expect_err("no answer is an error");
    let message = error.to_string();
    assert!(
        message.contains("sent no response headers") && message.contains("HF_ENDPOINT"),
        "{message}"
    );
    assert_eq!(
        server.requests().len(),
        2,
        "tried as often as the options say"
    );
    let listing = tokio::time::timeout(HANG, client.list_files(&repo(), &commit()))
        .await
        .expect("the listing hung");
    assert!(
        matches!(listing, Err(HubError::NoResponse { .. })),
        "{listing:?}"
    );
}

#[tokio::test]
async fn an_api_answer_whose_body_stalls_fails_within_its_deadline() {
    let server = RawServer::start(|_| {
        let mut bytes = headers_only(
            "200 OK",
            &[("content-type", "application/json".into())],
            500,
        );
        bytes.extend_from_slice(b"[{\"type\":");
        Reply::ThenSilence(bytes)
    })
    .await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let listing = tokio::time::timeout(HANG, client.list_files(&repo(), &commit()))
        .await
        .expect("the listing hung");
    let message = listing.expect_err("a stalled body is an error").to_string();
    assert!(message.contains("stopped sending"), "{message}");
}

#[tokio::test]
async fn a_resolve_that_never_answers_is_retried_then_fails_naming_the_hub() {
    let server = RawServer::start(|_| Reply::Silence).await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let plan = plan_of(vec![lfs_file("m.gguf", b"0123456789")]);
    let result = download(client, Destination::HubCache(cache.path().into()), &plan).await;
    let message = result.expect_err("no answer is an error").to_string();
    assert!(message.contains("sent no response headers"), "{message}");
    assert_eq!(
        server.requests().len(),
        2,
        "retried like other transient errors"
    );
}

#[tokio::test]
async fn a_retry_after_of_a_day_is_capped_at_a_minute() {
    let server = RawServer::start(|_| {
        Reply::Bytes(answer(
            "429 Too Many Requests",
            &[("retry-after", "86400".into())],
            b"slow down",
        ))
    })
    .await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path()).with_options(ClientOptions {
        api_attempts: 1,
        ..quick_client_options()
    });
    let error = client
        .model_info(&repo(), &Revision::main())
        .await
        .expect_err("rate limited");
    assert_eq!(error.retry_after(), Some(MAX_RETRY_AFTER), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("86400") && message.contains("60 s"),
        "the message says the ask was capped: {message}"
    );
    assert!(!message.contains("retrying"), "{message}");
}

#[tokio::test]
async fn a_rate_limited_model_info_is_retried_as_announced() {
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let server = RawServer::start(move |_| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::Bytes(answer(
                "429 Too Many Requests",
                &[("retry-after", "1".into())],
                b"",
            ))
        } else {
            Reply::Bytes(answer("200 OK", &[], &model_json()))
        }
    })
    .await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let info = client
        .model_info(&repo(), &Revision::main())
        .await
        .expect("the second try answers");
    assert_eq!(info.commit, commit());
}

#[tokio::test]
async fn a_listing_paged_into_huge_entries_is_bounded_in_total() {
    const PAGES: usize = 5;
    let pages = std::sync::atomic::AtomicUsize::new(0);
    let base = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let link_base = base.clone();
    let entry = serde_json::json!([{
        "type": "file",
        "path": "a".repeat(20 << 20),
        "size": 1,
        "oid": "1".repeat(40),
    }])
    .to_string();
    let server = RawServer::start(move |_| {
        let page = pages.fetch_add(1, Ordering::SeqCst);
        let mut headers = vec![("content-type", "application/json".to_owned())];
        if page + 1 < PAGES {
            let next = format!(
                "<{}/api/models/o/n/tree/{COMMIT}?recursive=true&cursor={}>; rel=\"next\"",
                link_base.lock().expect("base"),
                page + 1
            );
            headers.push(("link", next));
        }
        Reply::Bytes(answer("200 OK", &headers, entry.as_bytes()))
    })
    .await;
    *base.lock().expect("base") = server.url.clone();
    let cache = tempfile::tempdir().expect("cache");
    // Pages this large take a moment to write in a debug build.
    let client = client_for(&server.url, cache.path()).with_options(ClientOptions {
        response_deadline: Duration::from_secs(5),
        body_stall: Duration::from_secs(5),
        ..quick_client_options()
    });
    let listing = client.list_files(&repo(), &commit()).await;
    let message = listing.expect_err("past the total bound").to_string();
    assert!(message.contains("in total"), "{message}");
    assert!(server.requests().len() < PAGES, "stopped at the bound");
}

#[tokio::test]
async fn a_repository_whose_every_file_is_refused_is_an_error_naming_why() {
    let hub = RunningHub::start(vec![FakeRepo::new("o/n", 0x11, Vec::new())]).await;
    let hostile = serde_json::json!([
        {"type": "file", "path": "../escape.gguf", "size": 1, "oid": "1".repeat(40)},
        {"type": "file", "path": "/etc/passwd", "size": 1, "oid": "2".repeat(40)},
    ]);
    hub.state
        .raw_trees
        .lock()
        .expect("raw")
        .insert("o/n".into(), hostile.to_string());
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&hub.url, cache.path());
    let commit = CommitId::parse(&"11".repeat(20)).expect("commit");
    let error = client
        .list_files(&repo(), &commit)
        .await
        .expect_err("nothing usable");
    let message = error.to_string();
    assert!(
        message.contains("every file") && message.contains("climbing with '.' or '..'"),
        "{message}"
    );
}

#[tokio::test]
async fn an_empty_plan_downloads_nothing_and_writes_no_ref() {
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for("http://127.0.0.1:9", cache.path());
    let result = download(
        client,
        Destination::HubCache(cache.path().into()),
        &plan_of(Vec::new()),
    )
    .await;
    assert!(result.is_err(), "{result:?}");
    assert!(!cache.path().join("models--o--n/refs/main").exists());
}

#[tokio::test]
async fn a_stall_with_nothing_received_does_not_claim_a_kept_part() {
    let server = RawServer::start(|_| {
        Reply::ThenSilence(headers_only(
            "206 Partial Content",
            &[("content-range", "bytes 0-9/10".into())],
            10,
        ))
    })
    .await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let plan = plan_of(vec![lfs_file("m.gguf", b"0123456789")]);
    let result = download(client, Destination::HubCache(cache.path().into()), &plan).await;
    let message = result.expect_err("stalled").to_string();
    assert!(message.contains("no data"), "{message}");
    assert!(!message.contains("kept"), "nothing was kept: {message}");
}

#[tokio::test]
async fn removing_a_model_keeps_the_partial_a_live_download_writes() {
    let content = b"finished file".to_vec();
    let cache = tempfile::tempdir().expect("cache");
    let destination = Destination::HubCache(cache.path().into());
    let done = lfs_file("done.gguf", &content);
    let done_paths = destination.paths(&repo(), &commit(), &done);
    std::fs::create_dir_all(done_paths.content.parent().expect("blobs")).expect("mkdir");
    std::fs::write(&done_paths.content, &content).expect("blob");
    destination.publish(&done, &done_paths).expect("link");
    // Another download of the same repository is writing its partial file, under its lock.
    let live = lfs_file("live.gguf", b"a file being downloaded");
    let live_paths = destination.paths(&repo(), &commit(), &live);
    let _lock = DownloadLock::acquire(&live_paths.lock, || {})
        .await
        .expect("lock");
    std::fs::write(&live_paths.partial, b"a file bei").expect("partial");

    let removed = inventory::remove(cache.path(), &repo(), None);
    let error = removed.expect_err("a live download blocks the removal");
    assert!(error.to_string().contains("being downloaded"), "{error}");
    assert!(live_paths.partial.exists(), "the live partial is kept");
}

#[tokio::test]
async fn a_same_size_reupload_replaces_the_file_in_a_plain_folder() {
    let first = FakeRepo::new(
        "o/n",
        0x21,
        vec![FakeFile::new("chat.gguf", 300 << 10, 1, true)],
    );
    let hub = RunningHub::start(vec![first]).await;
    let cache = tempfile::tempdir().expect("cache");
    let folder = cache.path().join("plain");
    let client = client_for(&hub.url, cache.path());
    let pull = |client: HubClient| {
        let folder = folder.clone();
        async move {
            let info = client
                .model_info(&repo(), &Revision::main())
                .await
                .expect("info");
            let listing = client
                .list_files(&repo(), &info.commit)
                .await
                .expect("listing");
            let plan = DownloadPlan {
                repo: repo(),
                revision: Revision::main(),
                commit: info.commit,
                files: listing.files,
            };
            download(client, Destination::Folder(folder), &plan).await
        }
    };
    pull(client.clone()).await.expect("first pull");
    // The same file re-uploaded with other bytes of the same size (a chat-template fix).
    let fixed = FakeFile::new("chat.gguf", 300 << 10, 2, true);
    *hub.state.repos.lock().expect("repos") = vec![FakeRepo::new("o/n", 0x22, vec![fixed.clone()])];
    let second = pull(client.clone()).await.expect("second pull");
    assert_eq!(second.reused, 0, "the old bytes are not the new file");
    let content = std::fs::read(folder.join("chat.gguf")).expect("file");
    assert!(
        content == fixed.all_bytes(),
        "the folder holds the re-uploaded file"
    );

    // Unchanged upstream: the recorded file is reused without fetching it.
    let served = hub.state.seen.body_bytes.load(Ordering::SeqCst);
    let third = pull(client.clone()).await.expect("third pull");
    assert_eq!(third.reused, 1);
    assert_eq!(hub.state.seen.body_bytes.load(Ordering::SeqCst), served);

    // A file with no record (an older Rigdeck's, another tool's) is hashed once and reused.
    let records = folder.join(".rigdeck-downloads/verified");
    std::fs::remove_dir_all(&records).expect("records removed");
    let fourth = pull(client).await.expect("fourth pull");
    assert_eq!(fourth.reused, 1);
    assert_eq!(hub.state.seen.body_bytes.load(Ordering::SeqCst), served);
    assert!(records.join("chat.gguf").exists(), "recorded again");
}

#[tokio::test]
async fn resuming_a_partial_without_a_journal_hashes_it_off_the_async_threads() {
    let content: Vec<u8> = (0..(8u32 << 20)).map(|i| (i % 251) as u8).collect();
    let cache = tempfile::tempdir().expect("cache");
    let destination = Destination::HubCache(cache.path().into());
    let file = lfs_file("big.gguf", &content);
    let paths = destination.paths(&repo(), &commit(), &file);
    std::fs::create_dir_all(paths.partial.parent().expect("blobs")).expect("mkdir");
    // Another tool's partial: the whole file, no resume journal.
    std::fs::write(&paths.partial, &content).expect("partial");
    let client = client_for("http://127.0.0.1:9", cache.path());
    let downloader = Downloader::new(client, destination, quick_fetch_options());
    let progress = DownloadProgress::default();
    let cancel = CancellationToken::new();
    let plan = plan_of(vec![file]);
    let mut run = std::pin::pin!(downloader.download(&plan, &progress, &cancel));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let first = run.as_mut().poll(&mut context);
    assert!(first.is_pending());
    assert_eq!(
        progress.done_bytes.load(Ordering::SeqCst),
        0,
        "the received part was hashed inside the async task's poll"
    );
    let done = tokio::time::timeout(HANG, run).await.expect("finished");
    done.expect("the partial was complete and verified");
}

#[tokio::test]
async fn a_signed_cdn_address_loses_its_query_in_errors() {
    let server = RawServer::start(|line| {
        if line.contains("/resolve/") {
            Reply::Bytes(answer(
                "302 Found",
                &[(
                    "location",
                    "/signed/blob?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIAEXAMPLE".into(),
                )],
                b"",
            ))
        } else {
            Reply::Bytes(answer("503 Service Unavailable", &[], b"busy"))
        }
    })
    .await;
    let cache = tempfile::tempdir().expect("cache");
    let client = client_for(&server.url, cache.path());
    let plan = plan_of(vec![lfs_file("m.gguf", b"0123456789")]);
    let result = download(client, Destination::HubCache(cache.path().into()), &plan).await;
    let message = result.expect_err("the CDN keeps failing").to_string();
    assert!(message.contains("/signed/blob"), "{message}");
    assert!(
        !message.contains("s3cr3t") && !message.contains("X-Amz"),
        "{message}"
    );
}
