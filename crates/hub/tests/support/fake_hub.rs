//! A local stand-in for the Hugging Face hub, for tests and the download benchmark: the
//! subset of the API the client and `huggingface_hub` use (search, model info, the file tree
//! with LFS hashes and paging, `resolve` with HEAD, Range and the hub's headers), a CDN on a
//! second port that `resolve` redirects LFS files to, and faults to inject (errors, rate
//! limits, stalls, cut connections, a flipped byte, gated repositories).
//!
//! File contents are generated, not stored: a 1 MiB pseudo-random pattern with each MiB's
//! index written into its first bytes, so multi-GB repositories cost no memory and any
//! misplaced chunk changes the hash.
#![allow(dead_code)]

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use sha2::Digest;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const PATTERN_BYTES: usize = 1 << 20;

/// A file of a fake repository.
#[derive(Clone)]
pub struct FakeFile {
    pub path: String,
    pub size: u64,
    pub seed: u64,
    /// Stored in LFS (redirected to the CDN, listed with a SHA-256) or in git.
    pub lfs: bool,
    pub sha256: String,
    pub git_oid: String,
    /// Served from this file instead of the generated pattern (a real GGUF for the planner).
    pub source: Option<std::path::PathBuf>,
}

/// Files served from disk are hashed only up to this size (a sparse 200 GB model written for
/// planning tests is read by its header only, never downloaded).
const HASHED_SOURCE_BYTES: u64 = 256 << 20;

impl FakeFile {
    /// A file served from disk under `path` in the repository.
    pub fn from_disk(path: &str, source: &std::path::Path) -> FakeFile {
        let size = std::fs::metadata(source).expect("source file").len();
        let mut file = FakeFile {
            path: path.to_owned(),
            size,
            seed: 0,
            lfs: true,
            sha256: hex(&sha2::Sha256::digest(path.as_bytes())),
            git_oid: hex(&sha1::Sha1::digest(path.as_bytes())),
            source: Some(source.to_owned()),
        };
        if size <= HASHED_SOURCE_BYTES {
            let content = std::fs::read(source).expect("read source");
            file.sha256 = hex(&sha2::Sha256::digest(&content));
            let mut git = sha1::Sha1::new();
            git.update(format!("blob {size}\0").as_bytes());
            git.update(&content);
            file.git_oid = hex(&git.finalize());
        }
        file
    }

    pub fn new(path: &str, size: u64, seed: u64, lfs: bool) -> FakeFile {
        let (sha256, git_oid) = hashes(size, seed);
        FakeFile {
            path: path.to_owned(),
            size,
            seed,
            lfs,
            sha256,
            git_oid,
            source: None,
        }
    }

    /// The file's bytes `start..end`.
    pub fn bytes(&self, start: u64, end: u64) -> Vec<u8> {
        if let Some(source) = &self.source {
            use std::io::{Read, Seek};
            let mut file = std::fs::File::open(source).expect("source file");
            file.seek(std::io::SeekFrom::Start(start)).expect("seek");
            let mut out = vec![0u8; (end - start) as usize];
            file.read_exact(&mut out).expect("read source");
            return out;
        }
        let pattern = pattern(self.seed);
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut at = start;
        while at < end {
            let block = at / PATTERN_BYTES as u64;
            let within = (at % PATTERN_BYTES as u64) as usize;
            let take = ((end - at) as usize).min(PATTERN_BYTES - within);
            let mut piece = pattern[within..within + take].to_vec();
            stamp_block_index(&mut piece, within, block);
            out.extend_from_slice(&piece);
            at += take as u64;
        }
        out
    }

    pub fn all_bytes(&self) -> Vec<u8> {
        self.bytes(0, self.size)
    }
}

/// Writes the block's index over its first 8 bytes (where they fall in `piece`).
fn stamp_block_index(piece: &mut [u8], within: usize, block: u64) {
    for (i, byte) in block.to_le_bytes().iter().enumerate() {
        if i >= within && i - within < piece.len() {
            piece[i - within] = *byte;
        }
    }
}

fn pattern(seed: u64) -> Arc<Vec<u8>> {
    static CACHE: Mutex<Option<HashMap<u64, Arc<Vec<u8>>>>> = Mutex::new(None);
    let mut cache = CACHE.lock().expect("pattern cache");
    cache
        .get_or_insert_with(HashMap::new)
        .entry(seed)
        .or_insert_with(|| {
            let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
            Arc::new(
                (0..PATTERN_BYTES / 8)
                    .flat_map(|_| {
                        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                        let mut z = state;
                        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                        (z ^ (z >> 31)).to_le_bytes()
                    })
                    .collect(),
            )
        })
        .clone()
}

fn hashes(size: u64, seed: u64) -> (String, String) {
    let file = FakeFile {
        path: String::new(),
        size,
        seed,
        lfs: false,
        sha256: String::new(),
        git_oid: String::new(),
        source: None,
    };
    let mut sha256 = sha2::Sha256::new();
    let mut sha1 = sha1::Sha1::new();
    sha1.update(format!("blob {size}\0").as_bytes());
    let mut at = 0;
    while at < size {
        let end = (at + 8 * PATTERN_BYTES as u64).min(size);
        let piece = file.bytes(at, end);
        sha256.update(&piece);
        sha1.update(&piece);
        at = end;
    }
    (hex(&sha256.finalize()), hex(&sha1.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fake repository.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<FakeFile>,
    /// A token that must be sent to read the files (`None`: public).
    pub gated_token: Option<String>,
    pub downloads: u64,
    pub likes: u64,
    pub tags: Vec<String>,
    /// Earlier commits still served with the same files (main has moved on from them).
    pub old_commits: Vec<String>,
}

impl FakeRepo {
    pub fn new(id: &str, commit_seed: u8, files: Vec<FakeFile>) -> FakeRepo {
        FakeRepo {
            id: id.to_owned(),
            commit: format!("{commit_seed:02x}").repeat(20),
            files,
            gated_token: None,
            downloads: 0,
            likes: 0,
            tags: vec!["gguf".into()],
            old_commits: Vec::new(),
        }
    }

    /// `main`, the current commit or one of the old ones.
    pub fn serves(&self, revision: &str) -> bool {
        revision == "main"
            || revision == self.commit
            || self.old_commits.iter().any(|c| c == revision)
    }

    pub fn file(&self, path: &str) -> &FakeFile {
        self.files
            .iter()
            .find(|f| f.path == path)
            .expect("file of repo")
    }
}

/// Faults the server injects, each consumed as it fires.
#[derive(Default)]
pub struct Faults {
    /// Answer this many `resolve`/CDN requests with 503 first.
    pub server_errors: AtomicUsize,
    /// Answer this many with 429 and `Retry-After: 1` first.
    pub rate_limits: AtomicUsize,
    /// Answer this many model-info (revision API) requests with 429 and `Retry-After: 1`.
    pub model_info_rate_limits: AtomicUsize,
    /// This many bodies send half their bytes, then nothing (the connection stays open).
    pub stalls: AtomicUsize,
    /// This many bodies send half their bytes, then close the connection.
    pub cuts: AtomicUsize,
    /// Flip one byte at this offset of every body covering it, this many times.
    pub flips: AtomicUsize,
    pub flip_offset: AtomicU64,
    /// Delay before each body, in milliseconds (a slow server).
    pub delay_ms: AtomicU64,
    /// Serve bodies at most this many bytes per second per request (0: unlimited).
    pub throttle_bps: AtomicU64,
}

fn take(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// What the server saw, for assertions.
#[derive(Default)]
pub struct Seen {
    /// `Authorization` headers that reached the CDN (must stay empty).
    pub cdn_authorizations: Mutex<Vec<String>>,
    pub hub_authorizations: Mutex<Vec<String>>,
    pub range_requests: AtomicUsize,
    pub body_bytes: AtomicU64,
}

pub struct FakeHub {
    pub repos: Mutex<Vec<FakeRepo>>,
    pub faults: Faults,
    pub seen: Seen,
    /// Tree listings are paged by this many entries.
    pub page_size: AtomicUsize,
    /// The tree listing of these repositories is replaced by this raw JSON (hostile listings).
    pub raw_trees: Mutex<HashMap<String, String>>,
    pub cdn: Mutex<String>,
    pub hub: Mutex<String>,
}

pub struct RunningHub {
    pub state: Arc<FakeHub>,
    pub url: String,
    pub cdn_url: String,
}

impl RunningHub {
    /// Starts the hub and its CDN on loopback ports.
    pub async fn start(repos: Vec<FakeRepo>) -> RunningHub {
        let state = Arc::new(FakeHub {
            repos: Mutex::new(repos),
            faults: Faults::default(),
            seen: Seen::default(),
            page_size: AtomicUsize::new(1000),
            raw_trees: Mutex::new(HashMap::new()),
            cdn: Mutex::new(String::new()),
            hub: Mutex::new(String::new()),
        });
        let hub_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind hub");
        // The CDN is another origin: "localhost" rather than the hub's 127.0.0.1, another port.
        let cdn_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind cdn");
        let url = format!("http://{}", addr(&hub_listener));
        let cdn_url = format!("http://localhost:{}", addr(&cdn_listener).port());
        *state.cdn.lock().expect("cdn") = cdn_url.clone();
        *state.hub.lock().expect("hub") = url.clone();
        tokio::spawn(serve(hub_listener, hub_router(state.clone())));
        tokio::spawn(serve(cdn_listener, cdn_router(state.clone())));
        RunningHub {
            state,
            url,
            cdn_url,
        }
    }
}

fn addr(listener: &tokio::net::TcpListener) -> SocketAddr {
    listener.local_addr().expect("address")
}

async fn serve(listener: tokio::net::TcpListener, router: Router) {
    let _ = axum::serve(listener, router).await;
}

fn hub_router(state: Arc<FakeHub>) -> Router {
    Router::new()
        .route("/api/models", get(search))
        .route("/api/models/{owner}/{name}/revision/{rev}", get(model_info))
        .route("/api/models/{owner}/{name}", get(model_info_main))
        .route("/api/models/{owner}/{name}/tree/{rev}", get(tree))
        .route(
            "/{owner}/{name}/resolve/{rev}/{*path}",
            get(resolve).head(resolve),
        )
        .route("/loop/a", get(|| async { redirect("/loop/b") }))
        .route("/loop/b", get(|| async { redirect("/loop/a") }))
        .with_state(state)
}

fn cdn_router(state: Arc<FakeHub>) -> Router {
    Router::new()
        .route("/cdn/{owner}/{name}/{sha}", get(cdn_get).head(cdn_get))
        .with_state(state)
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [("location", to.to_owned())]).into_response()
}

fn find_repo(state: &FakeHub, owner: &str, name: &str) -> Option<FakeRepo> {
    let id = format!("{owner}/{name}");
    state
        .repos
        .lock()
        .expect("repos")
        .iter()
        .find(|r| r.id == id)
        .cloned()
}

fn not_found(code: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        [("x-error-code", code.to_owned())],
        "not found",
    )
        .into_response()
}

fn model_json(state: &FakeHub, repo: &FakeRepo) -> serde_json::Value {
    let _ = state;
    serde_json::json!({
        "_id": "x",
        "id": repo.id,
        "modelId": repo.id,
        "sha": repo.commit,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "lastModified": "2026-11-01T00:00:00.000Z",
        "tags": repo.tags,
        "pipeline_tag": "text-generation",
        "library_name": "gguf",
        "private": false,
        "gated": if repo.gated_token.is_some() { serde_json::json!("manual") } else { serde_json::json!(false) },
        "disabled": false,
        "siblings": repo.files.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect::<Vec<_>>(),
    })
}

async fn search(
    State(state): State<Arc<FakeHub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let text = query
        .get("search")
        .cloned()
        .unwrap_or_default()
        .to_lowercase();
    let filter = query.get("filter").cloned();
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(30);
    let mut repos: Vec<FakeRepo> = state
        .repos
        .lock()
        .expect("repos")
        .iter()
        .filter(|r| r.id.to_lowercase().contains(&text))
        .filter(|r| filter.as_ref().is_none_or(|f| r.tags.contains(f)))
        .cloned()
        .collect();
    match query.get("sort").map(String::as_str) {
        Some("likes") => repos.sort_by_key(|r| std::cmp::Reverse(r.likes)),
        _ => repos.sort_by_key(|r| std::cmp::Reverse(r.downloads)),
    }
    let hits: Vec<_> = repos
        .iter()
        .take(limit)
        .map(|r| model_json(&state, r))
        .collect();
    axum::Json(hits).into_response()
}

async fn model_info_main(
    State(state): State<Arc<FakeHub>>,
    Path((owner, name)): Path<(String, String)>,
) -> Response {
    model_info(State(state), Path((owner, name, "main".into()))).await
}

async fn model_info(
    State(state): State<Arc<FakeHub>>,
    Path((owner, name, rev)): Path<(String, String, String)>,
) -> Response {
    if take(&state.faults.model_info_rate_limits) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "slow down",
        )
            .into_response();
    }
    match find_repo(&state, &owner, &name) {
        Some(mut repo) if repo.serves(&rev) => {
            if rev != "main" {
                repo.commit = rev; // an old commit describes itself
            }
            axum::Json(model_json(&state, &repo)).into_response()
        }
        Some(_) => not_found("RevisionNotFound"),
        None => not_found("RepoNotFound"),
    }
}

fn authorized(repo: &FakeRepo, headers: &HeaderMap) -> bool {
    match &repo.gated_token {
        None => true,
        Some(token) => headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {token}")),
    }
}

fn gated() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            ("x-error-code", "GatedRepo"),
            (
                "x-error-message",
                "Access to this model is restricted: you must be authenticated",
            ),
        ],
        "gated",
    )
        .into_response()
}

async fn tree(
    State(state): State<Arc<FakeHub>>,
    Path((owner, name, rev)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(repo) = find_repo(&state, &owner, &name) else {
        return not_found("RepoNotFound");
    };
    if !repo.serves(&rev) {
        return not_found("RevisionNotFound");
    }
    if let Some(raw) = state.raw_trees.lock().expect("raw").get(&repo.id) {
        return ([("content-type", "application/json")], raw.clone()).into_response();
    }
    let entries: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|f| {
            let mut entry = serde_json::json!({"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path});
            if f.lfs {
                entry["lfs"] = serde_json::json!({"oid": f.sha256, "size": f.size, "pointerSize": 134});
            }
            entry
        })
        .collect();
    let _ = headers;
    let page_size = state.page_size.load(Ordering::SeqCst).max(1);
    let cursor: usize = query
        .get("cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let page: Vec<_> = entries
        .iter()
        .skip(cursor)
        .take(page_size)
        .cloned()
        .collect();
    let mut response = axum::Json(page).into_response();
    if cursor + page_size < entries.len() {
        let next = format!(
            "<{}/api/models/{}/tree/{}?recursive=true&cursor={}>; rel=\"next\"",
            state.hub.lock().expect("hub"),
            repo.id,
            rev,
            cursor + page_size
        );
        response
            .headers_mut()
            .insert("link", HeaderValue::from_str(&next).expect("link"));
    }
    response
}

/// Keeps the `Authorization` header a request carried, for the token assertions.
fn record_authorization(seen: &Mutex<Vec<String>>, headers: &HeaderMap) {
    if let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        seen.lock().expect("seen").push(value.to_owned());
    }
}

/// The hub's `resolve`: git files are served here, LFS files redirect to the CDN with the
/// hub's metadata headers (what `huggingface_hub` reads from its HEAD request).
async fn resolve(
    State(state): State<Arc<FakeHub>>,
    Path((owner, name, rev, path)): Path<(String, String, String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    record_authorization(&state.seen.hub_authorizations, &headers);
    let Some(repo) = find_repo(&state, &owner, &name) else {
        return not_found("RepoNotFound");
    };
    if !repo.serves(&rev) {
        return not_found("RevisionNotFound");
    }
    if !authorized(&repo, &headers) {
        return gated();
    }
    let Some(file) = repo.files.iter().find(|f| f.path == path).cloned() else {
        return not_found("EntryNotFound");
    };
    if file.lfs {
        let location = format!(
            "{}/cdn/{}/{}",
            state.cdn.lock().expect("cdn"),
            repo.id,
            file.sha256
        );
        let mut response = redirect(&location);
        let h = response.headers_mut();
        h.insert(
            "x-repo-commit",
            HeaderValue::from_str(&repo.commit).expect("commit"),
        );
        h.insert(
            "x-linked-etag",
            HeaderValue::from_str(&format!("\"{}\"", file.sha256)).expect("etag"),
        );
        h.insert("x-linked-size", HeaderValue::from(file.size));
        h.insert(
            "etag",
            HeaderValue::from_str(&format!("\"{}\"", file.git_oid)).expect("etag"),
        );
        return response;
    }
    let mut response = body_response(&state, &file, &method, &headers).await;
    let h = response.headers_mut();
    h.insert(
        "x-repo-commit",
        HeaderValue::from_str(&repo.commit).expect("commit"),
    );
    h.insert(
        "etag",
        HeaderValue::from_str(&format!("\"{}\"", file.git_oid)).expect("etag"),
    );
    response
}

async fn cdn_get(
    State(state): State<Arc<FakeHub>>,
    Path((owner, name, sha)): Path<(String, String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    record_authorization(&state.seen.cdn_authorizations, &headers);
    let Some(repo) = find_repo(&state, &owner, &name) else {
        return not_found("RepoNotFound");
    };
    let Some(file) = repo.files.iter().find(|f| f.sha256 == sha).cloned() else {
        return not_found("EntryNotFound");
    };
    let mut response = body_response(&state, &file, &method, &headers).await;
    response.headers_mut().insert(
        "etag",
        HeaderValue::from_str(&format!("\"{}\"", file.sha256)).expect("etag"),
    );
    response
}

/// `bytes=a-b` / `bytes=a-` → the range, clamped to the file.
fn parse_range(headers: &HeaderMap, size: u64) -> Option<(u64, u64)> {
    let text = headers
        .get("range")?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (start, end) = text.split_once('-')?;
    let start: u64 = start.parse().ok()?;
    let end: u64 = if end.is_empty() {
        size - 1
    } else {
        end.parse::<u64>().ok()?.min(size - 1)
    };
    (start <= end).then_some((start, end + 1))
}

async fn body_response(
    state: &Arc<FakeHub>,
    file: &FakeFile,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    if take(&state.faults.server_errors) {
        return (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response();
    }
    if take(&state.faults.rate_limits) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "slow down",
        )
            .into_response();
    }
    let delay = state.faults.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    let range = parse_range(headers, file.size);
    if headers.get("range").is_some() && range.is_none() && file.size > 0 {
        return (
            StatusCode::RANGE_NOT_SATISFIABLE,
            [("content-range", format!("bytes */{}", file.size))],
        )
            .into_response();
    }
    let (start, end) = range.unwrap_or((0, file.size));
    let mut builder = Response::builder()
        .header("content-length", end - start)
        .header("accept-ranges", "bytes");
    builder = if range.is_some() {
        state.seen.range_requests.fetch_add(1, Ordering::SeqCst);
        builder.status(StatusCode::PARTIAL_CONTENT).header(
            "content-range",
            format!("bytes {start}-{}/{}", end - 1, file.size),
        )
    } else {
        builder.status(StatusCode::OK)
    };
    if method == Method::HEAD {
        return builder.body(Body::empty()).expect("head");
    }
    builder
        .body(body_stream(state.clone(), file.clone(), start, end))
        .expect("body")
}

/// The body in 256 KiB frames, with the injected faults.
fn body_stream(state: Arc<FakeHub>, file: FakeFile, start: u64, end: u64) -> Body {
    let half = start + (end - start) / 2;
    let stall = take(&state.faults.stalls);
    let cut = !stall && take(&state.faults.cuts);
    let flip_at = state.faults.flip_offset.load(Ordering::SeqCst);
    let flip = (start..end).contains(&flip_at) && take(&state.faults.flips);
    let throttle = state.faults.throttle_bps.load(Ordering::SeqCst);
    let stream = async_stream(
        move |tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>| async move {
            let mut at = start;
            while at < end {
                if (stall || cut) && at >= half {
                    if stall {
                        // Hold the connection open without a byte until the client gives up.
                        tx.closed().await;
                        return;
                    }
                    let _ = tx.send(Err(std::io::Error::other("cut"))).await;
                    return;
                }
                let limit = if stall || cut { half.max(at + 1) } else { end };
                let next = (at + (256 << 10)).min(end).min(limit);
                let mut piece = file.bytes(at, next);
                if flip && (at..next).contains(&flip_at) {
                    piece[(flip_at - at) as usize] ^= 0x01;
                }
                state
                    .seen
                    .body_bytes
                    .fetch_add(piece.len() as u64, Ordering::Relaxed);
                if tx.send(Ok(Bytes::from(piece))).await.is_err() {
                    return;
                }
                if throttle > 0 {
                    let nanos = (next - at) as u128 * 1_000_000_000 / throttle as u128;
                    tokio::time::sleep(std::time::Duration::from_nanos(nanos as u64)).await;
                }
                at = next;
            }
        },
    );
    Body::from_stream(stream)
}

/// A stream fed by a task (no extra stream-macro crate needed).
fn async_stream<F, Fut>(
    produce: F,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(produce(tx));
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
