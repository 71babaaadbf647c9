//! One file over several connections. The rest of the file is cut into chunks; each
//! connection takes the next chunk and fetches it with a Range request (retrying what is
//! missing after a stall or an error, with backoff); one writer puts chunks in the file in
//! order and hashes them as they go. Connections may run ahead of the writer by a bounded
//! window, so memory stays at `window × chunk` however large the file.

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::CONTENT_RANGE;
use reqwest::StatusCode;
use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::error::DownloadError;
use super::resume::{open_partial, ContentHash, Journal, Resumed};
use crate::api::redact::shown_url;
use crate::api::{HubClient, HubError};
use crate::cache::FilePaths;
use crate::repo::RepoFile;

/// How a file is fetched; the defaults suit a home connection to the hub's CDN.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Parallel connections per file.
    pub connections: usize,
    /// Bytes asked for in one Range request.
    pub chunk_bytes: u64,
    /// No response headers, or no byte of the body, for this long ends a request; it is
    /// retried from where it stopped.
    pub stall_timeout: Duration,
    /// Failed attempts in a row (without a byte of progress) before a chunk gives up.
    pub max_attempts: u32,
    /// First wait after a failure; doubled each time up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Bytes written between two saves of the resume journal.
    pub journal_every: u64,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            connections: 4,
            chunk_bytes: 16 << 20,
            stall_timeout: Duration::from_secs(30),
            max_attempts: 8,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            journal_every: 256 << 20,
        }
    }
}

/// A chunk as it arrived: its index and its frames (kept as received, never copied).
type Arrived = (usize, Vec<Bytes>);

/// What the connections of one file share.
struct Shared {
    client: HubClient,
    file: RepoFile,
    /// The hub's address for the file; `location` is where it last redirected to (a CDN),
    /// asked directly until it stops answering.
    resolve: Url,
    location: Mutex<Url>,
    options: FetchOptions,
    /// Index of the next chunk a connection may take.
    next: AtomicUsize,
    /// Bytes received, for progress (shared with the caller).
    received: Arc<AtomicU64>,
    cancel: CancellationToken,
}

/// Fetches `file` into `paths.partial`, resuming what is there, and checks its hash. Returns
/// once the partial file holds the whole, verified content (the caller moves it into place).
pub async fn fetch_file(
    client: &HubClient,
    resolve: Url,
    file: &RepoFile,
    paths: &FilePaths,
    options: &FetchOptions,
    received: Arc<AtomicU64>,
    cancel: &CancellationToken,
) -> Result<(), DownloadError> {
    let resumed = open_partial_off_the_runtime(paths, file).await?;
    received.fetch_add(resumed.offset, Ordering::Relaxed);
    let chunks = chunk_ranges(resumed.offset, file.size_bytes, options.chunk_bytes);
    let cancel = cancel.child_token();
    let shared = Arc::new(Shared {
        client: client.clone(),
        file: file.clone(),
        location: Mutex::new(resolve.clone()),
        resolve,
        options: options.clone(),
        next: AtomicUsize::new(0),
        received,
        cancel: cancel.clone(),
    });
    let (written_tx, written_rx) = watch::channel(0usize);
    let (arrived_tx, arrived_rx) = mpsc::unbounded_channel::<Arrived>();
    let writer = {
        let (file, paths, cancel) = (file.clone(), paths.clone(), cancel.clone());
        let (count, every) = (chunks.len(), options.journal_every);
        tokio::task::spawn_blocking(move || {
            write_in_order(
                resumed, &file, &paths, count, every, arrived_rx, written_tx, cancel,
            )
        })
    };
    let connections = options.connections.clamp(1, 32).min(chunks.len().max(1));
    let chunks = Arc::new(chunks);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (shared, chunks) = (shared.clone(), chunks.clone());
        let (arrived_tx, written_rx) = (arrived_tx.clone(), written_rx.clone());
        workers.spawn(async move { connection(&shared, &chunks, arrived_tx, written_rx).await });
    }
    drop(arrived_tx);
    let mut failure = None;
    while let Some(joined) = workers.join_next().await {
        if let Ok(Err(error)) = joined {
            // The first real error wins; the others are the cancellation it caused.
            cancel.cancel();
            if failure.is_none() || matches!(failure, Some(DownloadError::Cancelled)) {
                failure = Some(error);
            }
        }
    }
    let written = writer.await.unwrap_or(Err(DownloadError::Cancelled));
    let outcome = match (failure, written) {
        (None, Ok(hash)) => check_hash(file, paths, &hash),
        // The writer's own error (a full disk) caused the connections' cancellation.
        (Some(DownloadError::Cancelled) | None, Err(error)) => Err(error),
        (Some(error), _) => Err(error),
    };
    outcome.map_err(|error| with_kept_bytes(error, paths))
}

/// Opens the partial file on a blocking thread: without a usable journal, resuming hashes
/// what is on disk (tens of GB from another tool's partial), which must not hold an async
/// worker (the gateway and the UI run on the same runtime).
async fn open_partial_off_the_runtime(
    paths: &FilePaths,
    file: &RepoFile,
) -> Result<Resumed, DownloadError> {
    let (owned_paths, owned_file) = (paths.clone(), file.clone());
    tokio::task::spawn_blocking(move || open_partial(&owned_paths, &owned_file))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|opened| opened)
        .map_err(DownloadError::disk(&paths.partial))
}

/// A stall's error says how much of the file is on disk for the next start.
fn with_kept_bytes(error: DownloadError, paths: &FilePaths) -> DownloadError {
    match error {
        DownloadError::Stalled {
            file,
            url,
            waited,
            attempts,
            ..
        } => DownloadError::Stalled {
            file,
            url,
            waited,
            attempts,
            kept_bytes: std::fs::metadata(&paths.partial).map_or(0, |m| m.len()),
        },
        other => other,
    }
}

/// `offset..size` cut into chunks of `chunk` bytes.
fn chunk_ranges(offset: u64, size: u64, chunk: u64) -> Vec<Range<u64>> {
    let chunk = chunk.max(1);
    let mut ranges = Vec::new();
    let mut start = offset;
    while start < size {
        let end = start.saturating_add(chunk).min(size);
        ranges.push(start..end);
        start = end;
    }
    ranges
}

/// One connection: takes chunks in turn until none is left.
async fn connection(
    shared: &Shared,
    chunks: &[Range<u64>],
    arrived: mpsc::UnboundedSender<Arrived>,
    mut written: watch::Receiver<usize>,
) -> Result<(), DownloadError> {
    let window = shared.options.connections.max(1) * 2;
    loop {
        let index = shared.next.fetch_add(1, Ordering::SeqCst);
        let Some(range) = chunks.get(index) else {
            return Ok(());
        };
        // Do not run further ahead of the writer than the window allows.
        tokio::select! {
            waited = written.wait_for(|done| index < done + window) => {
                waited.map_err(|_| DownloadError::Cancelled)?;
            }
            _ = shared.cancel.cancelled() => return Err(DownloadError::Cancelled),
        }
        let frames = fetch_chunk(shared, range.clone()).await?;
        arrived
            .send((index, frames))
            .map_err(|_| DownloadError::Cancelled)?;
    }
}

/// Why one attempt at a chunk ended early.
enum AttemptError {
    /// Worth another attempt (network, server side, rate limit, stall).
    Transient(DownloadError, Option<Duration>),
    Fatal(DownloadError),
}

/// Fetches one chunk, asking again for whatever is missing after a failure.
async fn fetch_chunk(shared: &Shared, range: Range<u64>) -> Result<Vec<Bytes>, DownloadError> {
    let mut frames = Vec::new();
    let mut got = 0u64;
    let mut failures = 0u32;
    let wanted = range.end - range.start;
    while got < wanted {
        let before = got;
        let attempt = attempt_range(shared, range.start + got..range.end, &mut frames, &mut got);
        let outcome = tokio::select! {
            outcome = attempt => outcome,
            _ = shared.cancel.cancelled() => return Err(DownloadError::Cancelled),
        };
        let (error, asked_wait) = match outcome {
            Ok(()) => continue,
            Err(AttemptError::Fatal(error)) => return Err(error),
            Err(AttemptError::Transient(error, wait)) => (error, wait),
        };
        failures = if got > before { 1 } else { failures + 1 };
        if failures >= shared.options.max_attempts {
            return Err(counted(error, failures));
        }
        let wait = asked_wait.unwrap_or_else(|| backoff(&shared.options, failures));
        tracing::warn!(file = %shared.file.path, attempt = failures, wait_ms = wait.as_millis() as u64, "{error}; trying again");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.cancel.cancelled() => return Err(DownloadError::Cancelled),
        }
    }
    Ok(frames)
}

/// A stall that ended the chunk, with the attempts that stalled in a row.
fn counted(error: DownloadError, failures: u32) -> DownloadError {
    match error {
        DownloadError::Stalled {
            file,
            url,
            waited,
            kept_bytes,
            ..
        } => DownloadError::Stalled {
            file,
            url,
            waited,
            attempts: failures,
            kept_bytes,
        },
        other => other,
    }
}

fn backoff(options: &FetchOptions, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    options
        .backoff_base
        .saturating_mul(factor)
        .min(options.backoff_max)
}

/// One Range request for `range`, appending what arrives to `frames`.
async fn attempt_range(
    shared: &Shared,
    range: Range<u64>,
    frames: &mut Vec<Bytes>,
    got: &mut u64,
) -> Result<(), AttemptError> {
    let file = shared.file.path.to_string();
    let location = shared
        .location
        .lock()
        .map(|l| l.clone())
        .unwrap_or_else(|_| shared.resolve.clone());
    let stall = shared.options.stall_timeout;
    let asked = shared.client.get(&location, Some(range.clone()));
    let fetched = match tokio::time::timeout(stall, asked).await {
        Ok(Ok(fetched)) => fetched,
        Ok(Err(error)) => return Err(classify(shared, &location, file, error)),
        Err(_) => {
            let error = HubError::no_response(&location, stall);
            return Err(classify(shared, &location, file, error));
        }
    };
    if fetched.url != location {
        if let Ok(mut remembered) = shared.location.lock() {
            *remembered = fetched.url.clone();
        }
    }
    check_range(
        &fetched.response,
        &range,
        shared.file.size_bytes,
        &file,
        &fetched.url,
    )
    .map_err(AttemptError::Fatal)?;
    let mut body = fetched.response.bytes_stream();
    let wanted = range.end - range.start;
    let mut this_attempt = 0u64;
    while this_attempt < wanted {
        let frame = match tokio::time::timeout(stall, body.next()).await {
            Err(_) => {
                let stalled = DownloadError::Stalled {
                    file,
                    url: shown_url(&fetched.url),
                    waited: stall,
                    attempts: 1,
                    kept_bytes: 0,
                };
                return Err(AttemptError::Transient(stalled, None));
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                let error = HubError::Network {
                    url: shown_url(&fetched.url),
                    detail: error.without_url().to_string(),
                };
                return Err(AttemptError::Transient(
                    DownloadError::Hub {
                        file,
                        source: error,
                    },
                    None,
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        // A server sending more than asked: keep what was asked, drop the rest.
        let keep = frame.len().min((wanted - this_attempt) as usize);
        let frame = frame.slice(..keep);
        this_attempt += keep as u64;
        *got += keep as u64;
        shared.received.fetch_add(keep as u64, Ordering::Relaxed);
        frames.push(frame);
    }
    if this_attempt < wanted {
        let short = HubError::Network {
            url: shown_url(&fetched.url),
            detail: format!("the answer ended after {this_attempt} of {wanted} bytes"),
        };
        return Err(AttemptError::Transient(
            DownloadError::Hub {
                file,
                source: short,
            },
            None,
        ));
    }
    Ok(())
}

/// Sorts a failed request: the CDN's signed address may have expired (ask the hub again),
/// the network or server may recover (retry), or not (give up).
fn classify(shared: &Shared, location: &Url, file: String, error: HubError) -> AttemptError {
    let expired = *location != shared.resolve
        && matches!(
            error,
            HubError::Unauthorized { .. }
                | HubError::NotFound { .. }
                | HubError::Status { status: 410, .. }
        );
    if expired {
        if let Ok(mut remembered) = shared.location.lock() {
            *remembered = shared.resolve.clone();
        }
        return AttemptError::Transient(
            DownloadError::Hub {
                file,
                source: error,
            },
            Some(Duration::ZERO),
        );
    }
    let wait = error.retry_after();
    if error.is_transient() {
        AttemptError::Transient(
            DownloadError::Hub {
                file,
                source: error,
            },
            wait,
        )
    } else {
        AttemptError::Fatal(DownloadError::Hub {
            file,
            source: error,
        })
    }
}

/// The answer must be the asked range of a file of the listed size.
fn check_range(
    response: &reqwest::Response,
    range: &Range<u64>,
    size: u64,
    file: &str,
    url: &Url,
) -> Result<(), DownloadError> {
    if response.status() == StatusCode::OK {
        // A whole-file answer is usable only when the whole file was asked for.
        let whole = range.start == 0 && range.end == size;
        if whole && response.content_length().is_none_or(|n| n == size) {
            return Ok(());
        }
        return Err(DownloadError::RangeIgnored {
            file: file.to_owned(),
            url: shown_url(url),
        });
    }
    let content_range = response
        .headers()
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range);
    match content_range {
        Some((_, _, total)) if total != size => Err(DownloadError::SizeMismatch {
            file: file.to_owned(),
            listed: size,
            served: total,
        }),
        // The server may send less than asked (the rest is asked for again), never elsewhere.
        Some((start, end, _)) if start == range.start && end < range.end => Ok(()),
        _ => Err(DownloadError::RangeIgnored {
            file: file.to_owned(),
            url: shown_url(url),
        }),
    }
}

/// `bytes 0-99/1000` → (0, 99, 1000); the end is inclusive, as HTTP writes it.
fn parse_content_range(text: &str) -> Option<(u64, u64, u64)> {
    let rest = text.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end, total) = (start.parse().ok()?, end.parse().ok()?, total.parse().ok()?);
    (start <= end && end < total).then_some((start, end, total))
}

/// The writer: appends chunks in index order, hashing each byte once, and saves the resume
/// journal every `journal_every` bytes and when it stops for any reason.
#[allow(clippy::too_many_arguments)]
fn write_in_order(
    resumed: Resumed,
    file: &RepoFile,
    paths: &FilePaths,
    count: usize,
    journal_every: u64,
    mut arrived: mpsc::UnboundedReceiver<Arrived>,
    written: watch::Sender<usize>,
    cancel: CancellationToken,
) -> Result<ContentHash, DownloadError> {
    let Resumed {
        file: mut out,
        mut hash,
        ..
    } = resumed;
    let every = journal_every.max(1);
    let mut waiting: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
    let mut next = 0usize;
    let mut since_journal = 0u64;
    let save = |out: &std::fs::File, hash: &ContentHash| {
        if let Some(journal) = hash.journal(file) {
            if let Err(error) = save_journal(out, &journal, &paths.journal) {
                tracing::warn!(file = %file.path, "the resume journal was not saved: {error}");
            }
        }
    };
    while next < count {
        let Some((index, frames)) = arrived.blocking_recv() else {
            save(&out, &hash);
            return Err(DownloadError::Cancelled);
        };
        waiting.insert(index, frames);
        while let Some(frames) = waiting.remove(&next) {
            for frame in &frames {
                if let Err(error) = out.write_all(frame) {
                    save(&out, &hash);
                    cancel.cancel();
                    return Err(DownloadError::disk(&paths.partial)(error));
                }
                hash.update(frame);
                since_journal += frame.len() as u64;
            }
            next += 1;
            let _ = written.send(next);
            if since_journal >= every {
                save(&out, &hash);
                since_journal = 0;
            }
        }
    }
    out.sync_all()
        .map_err(DownloadError::disk(&paths.partial))?;
    save(&out, &hash);
    Ok(hash)
}

/// Saves the journal only once the partial file's bytes it vouches for are on the disk: a
/// crash must never leave a journal that claims bytes the file lost.
fn save_journal(
    partial: &std::fs::File,
    journal: &Journal,
    path: &std::path::Path,
) -> std::io::Result<()> {
    partial.sync_data()?;
    journal.save(path)
}

/// The whole file is there: its hash must be the hub's. A mismatch removes the partial file
/// and its journal, since no part of it can be trusted.
fn check_hash(file: &RepoFile, paths: &FilePaths, hash: &ContentHash) -> Result<(), DownloadError> {
    let got = hash.hex_digest();
    let expected = file
        .lfs_sha256
        .clone()
        .unwrap_or_else(|| file.git_oid.clone());
    if got == expected {
        return Ok(());
    }
    let _ = std::fs::remove_file(&paths.partial);
    let _ = std::fs::remove_file(&paths.journal);
    Err(DownloadError::HashMismatch {
        file: file.path.to_string(),
        expected,
        got,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_rest_of_the_file_exactly() {
        assert_eq!(chunk_ranges(0, 10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(chunk_ranges(7, 10, 4), vec![7..10]);
        assert!(chunk_ranges(10, 10, 4).is_empty());
        assert_eq!(
            chunk_ranges(0, 3, 0).len(),
            3,
            "a zero chunk size still advances"
        );
    }

    #[test]
    fn content_ranges_parse_strictly() {
        assert_eq!(parse_content_range("bytes 0-99/1000"), Some((0, 99, 1000)));
        assert_eq!(parse_content_range("bytes 5-4/1000"), None);
        assert_eq!(parse_content_range("bytes 0-1000/1000"), None);
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }

    #[test]
    fn no_journal_is_saved_for_a_partial_that_could_not_be_synced() {
        let dir = tempfile::tempdir().expect("tempdir");
        // fsync fails on a socket: it stands for a partial file whose bytes did not reach the
        // disk.
        let (socket, _peer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let unsynced = std::fs::File::from(std::os::fd::OwnedFd::from(socket));
        let journal = Journal {
            blob: "b".repeat(64),
            size: 10,
            hash: super::super::sha::ResumableSha256::default().checkpoint(),
        };
        let path = dir.path().join("b.resume.json");
        assert!(save_journal(&unsynced, &journal, &path).is_err());
        assert!(!path.exists(), "a journal vouches only for synced bytes");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let options = FetchOptions::default();
        let waits: Vec<u64> = (1..=7).map(|n| backoff(&options, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    }
}
