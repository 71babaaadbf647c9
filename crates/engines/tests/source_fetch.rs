//! Fetching a pinned source archive from a package index over HTTP, against a small local index
//! (PEP 691 JSON and PEP 503 HTML pages, the archive, a server that stalls): the archive is
//! verified before anything is unpacked, and nothing from it ever runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rigdeck_engines::cmake_build::BuildStep;
use rigdeck_engines::package_index::{IndexError, Timeouts};
use rigdeck_engines::source::{self, FetchOptions, PinnedSource, PreparedSource, SourceError};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the test server answers on a path.
#[derive(Clone)]
enum Reply {
    Ok {
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// Declares `declared` bytes, sends `sent`, then stays silent.
    Stall { declared: usize, sent: Vec<u8> },
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    accept: Option<String>,
}

/// A one-request-per-connection HTTP/1.1 server on loopback; unknown paths answer 404.
struct IndexServer {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl IndexServer {
    async fn start(routes: HashMap<String, Reply>) -> Self {
        Self::start_with(|_| routes).await
    }

    /// `routes` gets the server's address, for pages that link to the server itself.
    async fn start_with(routes: impl FnOnce(&str) -> HashMap<String, Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (routes, log) = (Arc::new(routes(&base)), seen.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, routes.clone(), log.clone()));
            }
        });
        Self { base, seen }
    }

    fn index_url(&self) -> String {
        format!("{}/simple", self.base)
    }

    fn paths(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    routes: Arc<HashMap<String, Reply>>,
    log: Arc<Mutex<Vec<Seen>>>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let accept = head
        .lines()
        .find_map(|l| l.strip_prefix("accept: ").or(l.strip_prefix("Accept: ")))
        .map(str::to_owned);
    log.lock().unwrap().push(Seen {
        path: path.clone(),
        accept,
    });
    let header = |status: &str, content_type: &str, length: usize| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
        )
    };
    match routes.get(&path) {
        Some(Reply::Ok { content_type, body }) => {
            let _ = stream
                .write_all(header("200 OK", content_type, body.len()).as_bytes())
                .await;
            let _ = stream.write_all(body).await;
        }
        Some(Reply::Stall { declared, sent }) => {
            let _ = stream
                .write_all(header("200 OK", "application/octet-stream", *declared).as_bytes())
                .await;
            let _ = stream.write_all(sent).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        None => {
            let _ = stream
                .write_all(header("404 Not Found", "text/plain", 9).as_bytes())
                .await;
            let _ = stream.write_all(b"not found").await;
        }
    }
    let _ = stream.shutdown().await;
}

const FILE_NAME: &str = "fake_pkg-1.0.tar.gz";
const PAGE_PATH: &str = "/simple/fake-pkg/";
const FILE_PATH: &str = "/files/fake_pkg-1.0.tar.gz";

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An sdist-shaped tar.gz with a vendored llama.cpp tree, and a `setup.py` and in-tree build
/// backend that would create `marker` if anything ran them.
fn sdist(marker: &Path) -> Vec<u8> {
    let run_marker = format!(
        "open({:?}, 'w').write('ran')\n",
        marker.display().to_string()
    );
    let entries: Vec<(&str, Vec<u8>)> = vec![
        (
            "fake_pkg-1.0/PKG-INFO",
            b"Metadata-Version: 2.1\nName: fake-pkg\nVersion: 1.0\n".to_vec(),
        ),
        ("fake_pkg-1.0/setup.py", run_marker.clone().into_bytes()),
        (
            "fake_pkg-1.0/pyproject.toml",
            b"[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n"
                .to_vec(),
        ),
        ("fake_pkg-1.0/backend.py", run_marker.into_bytes()),
        (
            "fake_pkg-1.0/vendor/llama.cpp/CMakeLists.txt",
            b"project(llama)\n".to_vec(),
        ),
        (
            "fake_pkg-1.0/vendor/llama.cpp/include/llama.h",
            b"// llama\n".to_vec(),
        ),
    ];
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        builder
            .append_data(&mut header, name, data.as_slice())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// The same length, one byte changed: what a rewriting proxy or a bad mirror serves.
fn tampered(archive: &[u8]) -> Vec<u8> {
    let mut bytes = archive.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    bytes
}

fn pin_for(archive: &[u8]) -> PinnedSource {
    PinnedSource {
        package: "fake-pkg".into(),
        version: "1.0".into(),
        file_name: FILE_NAME.into(),
        sha256: sha256_hex(archive).into(),
        size_bytes: archive.len() as u64,
        tree_prefix: "fake_pkg-1.0/vendor/llama.cpp".into(),
        label: "abc1234".into(),
        commit: Some("abc1234".into()),
    }
}

fn json_page(base: &str, listed_sha256: Option<&str>) -> Reply {
    let hashes = listed_sha256
        .map(|h| serde_json::json!({ "sha256": h }))
        .unwrap_or_else(|| serde_json::json!({}));
    let page = serde_json::json!({
        "meta": { "api-version": "1.1" },
        "name": "fake-pkg",
        "files": [
            { "filename": "fake_pkg-0.9.tar.gz", "url": format!("{base}/files/fake_pkg-0.9.tar.gz"), "hashes": {} },
            { "filename": FILE_NAME, "url": format!("{base}{FILE_PATH}"), "hashes": hashes },
        ]
    });
    Reply::Ok {
        content_type: "application/vnd.pypi.simple.v1+json",
        body: page.to_string().into_bytes(),
    }
}

/// A PEP 503 page with a link relative to the page, with or without a `#sha256=` fragment.
fn html_page(listed_sha256: Option<&str>) -> Reply {
    let fragment = listed_sha256
        .map(|h| format!("#sha256={h}"))
        .unwrap_or_default();
    let body = format!(
        "<!DOCTYPE html><html><body>\n\
         <a href=\"../../files/fake_pkg-0.9.tar.gz\">fake_pkg-0.9.tar.gz</a><br/>\n\
         <a href=\"../../files/{FILE_NAME}{fragment}\" data-requires-python=\"&gt;=3.8\">{FILE_NAME}</a><br/>\n\
         </body></html>"
    );
    Reply::Ok {
        content_type: "text/html",
        body: body.into_bytes(),
    }
}

fn archive_reply(bytes: Vec<u8>) -> Reply {
    Reply::Ok {
        content_type: "application/octet-stream",
        body: bytes,
    }
}

fn routes(page: Reply, archive: Reply) -> HashMap<String, Reply> {
    HashMap::from([
        (PAGE_PATH.to_owned(), page),
        (FILE_PATH.to_owned(), archive),
    ])
}

/// Collects what the fetch reports.
#[derive(Default)]
struct Reports(Mutex<Vec<(BuildStep, String)>>);

impl Reports {
    fn sink(&self) -> impl Fn(BuildStep, &str) + Send + Sync + '_ {
        move |step, line| self.0.lock().unwrap().push((step, line.to_owned()))
    }

    fn lines(&self, step: BuildStep) -> Vec<String> {
        let reports = self.0.lock().unwrap();
        reports
            .iter()
            .filter(|(s, _)| *s == step)
            .map(|(_, l)| l.clone())
            .collect()
    }
}

fn options(index_url: String) -> FetchOptions {
    FetchOptions {
        index_url: Some(index_url),
        timeouts: Timeouts::default(),
    }
}

async fn fetch(
    pin: &PinnedSource,
    cache: &Path,
    options: &FetchOptions,
    reports: &Reports,
) -> Result<PreparedSource, SourceError> {
    source::prepare_pinned(pin, cache, options, &reports.sink()).await
}

/// A fetch from `server`'s index with default timeouts, its progress reports dropped.
async fn fetch_from(
    server: &IndexServer,
    pin: &PinnedSource,
    cache: &Path,
) -> Result<PreparedSource, SourceError> {
    fetch(
        pin,
        cache,
        &options(server.index_url()),
        &Reports::default(),
    )
    .await
}

/// The names in the sources folder: what a fetch left behind.
fn sources_entries(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(source::sources_dir(cache))
        .map(|read| {
            read.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// After a refused fetch: no archive under its final name, no partial download, nothing unpacked.
fn assert_nothing_kept(cache: &Path, pin: &PinnedSource) {
    assert_eq!(sources_entries(cache), Vec::<String>::new());
    assert!(!pin.tree_dir(&source::sources_dir(cache)).exists());
}

#[tokio::test]
async fn fetches_through_a_pep_691_json_index_and_unpacks_only_the_verified_archive() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    let server = IndexServer::start_with(|base| {
        routes(
            json_page(base, Some(&*pin.sha256)),
            archive_reply(archive.clone()),
        )
    })
    .await;
    let cache = dir.path().join("cache");
    let reports = Reports::default();

    let prepared = fetch(&pin, &cache, &options(server.index_url()), &reports)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let sources = source::sources_dir(&cache);
    assert_eq!(prepared.tree, pin.tree_dir(&sources));
    assert!(prepared.tree.join("CMakeLists.txt").is_file());
    assert_eq!(prepared.sha256.as_deref(), Some(&*pin.sha256));
    assert_eq!(
        source::sha256_file(&sources.join(FILE_NAME)).unwrap(),
        pin.sha256
    );
    assert_eq!(
        sources_entries(&cache),
        vec!["fake-pkg-1.0".to_owned(), FILE_NAME.to_owned()],
        "no partial download left"
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen[0].path, PAGE_PATH);
    assert!(
        seen[0]
            .accept
            .as_deref()
            .is_some_and(|a| a.contains("application/vnd.pypi.simple.v1+json")),
        "{seen:?}"
    );
    assert!(
        reports
            .lines(BuildStep::Fetch)
            .iter()
            .any(|l| l.contains(FILE_PATH)),
        "{:?}",
        reports.lines(BuildStep::Fetch)
    );

    // Verified and unpacked once: the next time nothing is asked of the index.
    let before = server.paths().len();
    fetch(&pin, &cache, &options(server.index_url()), &reports)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(server.paths().len(), before);
}

#[tokio::test]
async fn fetches_through_a_pep_503_html_index_with_a_relative_link() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    let server = IndexServer::start(routes(
        html_page(Some(&*pin.sha256)),
        archive_reply(archive.clone()),
    ))
    .await;
    let cache = dir.path().join("cache");

    let prepared = fetch_from(&server, &pin, &cache)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    assert!(prepared.tree.join("include/llama.h").is_file());
    assert_eq!(
        server.paths(),
        vec![PAGE_PATH.to_owned(), FILE_PATH.to_owned()]
    );
}

#[tokio::test]
async fn a_tampered_archive_is_refused_and_nothing_is_unpacked() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    // The index lists the right hash; what arrives is something else.
    let server = IndexServer::start(routes(
        html_page(Some(&*pin.sha256)),
        archive_reply(tampered(&archive)),
    ))
    .await;
    let cache = dir.path().join("cache");
    let reports = Reports::default();

    let err = fetch(&pin, &cache, &options(server.index_url()), &reports)
        .await
        .unwrap_err();

    let text = err.to_string();
    assert!(matches!(err, SourceError::HashMismatch { .. }), "{text}");
    assert!(text.contains(&*pin.sha256), "names the pinned hash: {text}");
    assert!(
        text.contains(&sha256_hex(&tampered(&archive))),
        "names the hash received: {text}"
    );
    assert!(text.contains(FILE_PATH), "names where it came from: {text}");
    assert!(text.contains("not kept"), "says the fix: {text}");
    assert_nothing_kept(&cache, &pin);
    assert!(reports.lines(BuildStep::Extract).is_empty());
}

#[tokio::test]
async fn nothing_from_the_archive_runs_before_its_hash_matches() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let archive = sdist(&marker);
    let pin = pin_for(&archive);
    let cache = dir.path().join("cache");

    // An index with no hash to check up front, serving a file with a runnable setup.py and build
    // backend that is not the pinned one: refused, and neither ran.
    let server =
        IndexServer::start(routes(html_page(None), archive_reply(tampered(&archive)))).await;
    let err = fetch_from(&server, &pin, &cache).await.unwrap_err();
    assert!(matches!(err, SourceError::HashMismatch { .. }), "{err}");
    assert!(
        !marker.exists(),
        "the archive's code ran before its hash was checked"
    );
    assert_nothing_kept(&cache, &pin);

    // The pinned file is only hashed and unpacked: its code does not run then either.
    let server = IndexServer::start(routes(html_page(None), archive_reply(archive.clone()))).await;
    let prepared = fetch_from(&server, &pin, &cache)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(prepared.tree.join("CMakeLists.txt").is_file());
    assert!(!marker.exists(), "the archive's code ran");
}

#[tokio::test]
async fn an_index_listing_another_sha256_is_refused_before_the_download() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    let other = "ab".repeat(32);
    let server = IndexServer::start_with(|base| {
        routes(
            json_page(base, Some(&other)),
            archive_reply(archive.clone()),
        )
    })
    .await;
    let cache = dir.path().join("cache");

    let err = fetch_from(&server, &pin, &cache).await.unwrap_err();

    let text = err.to_string();
    assert!(matches!(err, SourceError::IndexDisagrees { .. }), "{text}");
    assert!(
        text.contains(&other) && text.contains(&*pin.sha256),
        "{text}"
    );
    assert!(
        text.contains(&server.index_url()),
        "names the index: {text}"
    );
    assert!(text.contains("--index-url"), "says the fix: {text}");
    assert_eq!(
        server.paths(),
        vec![PAGE_PATH.to_owned()],
        "never downloaded"
    );
    assert_nothing_kept(&cache, &pin);
}

#[tokio::test]
async fn a_server_that_stalls_mid_body_is_cut_off_by_the_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    let stall = Reply::Stall {
        declared: archive.len(),
        sent: archive[..archive.len() / 2].to_vec(),
    };
    let server = IndexServer::start(routes(html_page(None), stall)).await;
    let cache = dir.path().join("cache");
    let options = FetchOptions {
        index_url: Some(server.index_url()),
        timeouts: Timeouts {
            read: Duration::from_millis(300),
            ..Timeouts::default()
        },
    };

    let started = Instant::now();
    let err = fetch(&pin, &cache, &options, &Reports::default())
        .await
        .unwrap_err();

    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(
        matches!(&err, SourceError::Fetch { source, .. } if matches!(**source, IndexError::Transfer { .. })),
        "{text}"
    );
    assert!(text.contains("sent nothing for 300 ms"), "{text}");
    assert_nothing_kept(&cache, &pin);
}

#[tokio::test]
async fn an_answer_over_the_byte_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    // A pin three times smaller than what the server sends: over the 2x budget.
    let pin = PinnedSource {
        size_bytes: archive.len() as u64 / 3,
        ..pin_for(&archive)
    };
    let server = IndexServer::start(routes(html_page(None), archive_reply(archive.clone()))).await;
    let cache = dir.path().join("cache");

    let err = fetch_from(&server, &pin, &cache).await.unwrap_err();

    let text = err.to_string();
    assert!(
        text.contains("over the") && text.contains("allowed"),
        "{text}"
    );
    assert_nothing_kept(&cache, &pin);
}

#[tokio::test]
async fn a_missing_project_or_index_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let archive = sdist(&dir.path().join("marker"));
    let pin = pin_for(&archive);
    let cache = dir.path().join("cache");
    let server = IndexServer::start(HashMap::new()).await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/simple", listener.local_addr().unwrap())
    };

    for index in [server.index_url(), closed] {
        let err = fetch(&pin, &cache, &options(index.clone()), &Reports::default())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, SourceError::Fetch { .. }), "{text}");
        for needed in [
            index.as_str(),
            FILE_NAME,
            "--index-url",
            "--source-sha256",
            &*pin.sha256,
        ] {
            assert!(text.contains(needed), "names {needed}: {text}");
        }
        assert_nothing_kept(&cache, &pin);
    }
}
