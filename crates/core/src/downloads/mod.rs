//! The daemon's download queue: model downloads requested from the UI or the API run one at a
//! time through the hub crate's downloader, with pause, resume, cancel and retry; their state
//! is kept in the database, so a restart (or a crash) resumes what was running or queued, and
//! their progress is pushed to the UI. A finished download makes the library rescan at once.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

use crate::hub::api::HubClient;
use crate::hub::cache::{Destination, DownloadLock};
use crate::hub::config::{ConfigError, HubConfig};
use crate::hub::download::{
    CancellationToken, DownloadError, DownloadPlan, DownloadProgress, Downloader, FetchOptions,
    ProgressView, RateMeter,
};
use crate::hub::repo::{CommitId, RepoFile, RepoId, Revision};
use crate::store::Store;

/// How often a running download's progress is pushed.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// What to download: fixed when the user asks, stored as the row's body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DownloadRequest {
    pub repo: RepoId,
    pub revision: Revision,
    pub commit: CommitId,
    /// The quantization (or "all files").
    pub label: String,
    pub files: Vec<RepoFile>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DownloadState {
    Queued,
    Running,
    Paused,
    Failed,
    Done,
    Cancelled,
}

impl DownloadState {
    fn name(self) -> &'static str {
        match self {
            DownloadState::Queued => "queued",
            DownloadState::Running => "running",
            DownloadState::Paused => "paused",
            DownloadState::Failed => "failed",
            DownloadState::Done => "done",
            DownloadState::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> DownloadState {
        match text {
            "paused" => DownloadState::Paused,
            "failed" => DownloadState::Failed,
            "done" => DownloadState::Done,
            "cancelled" => DownloadState::Cancelled,
            // Running when the daemon stopped: it resumes.
            _ => DownloadState::Queued,
        }
    }
}

/// A download as the UI shows it.
#[derive(Clone, Debug, Serialize)]
pub struct DownloadView {
    pub id: i64,
    pub repo: RepoId,
    pub revision: Revision,
    pub label: String,
    pub files: usize,
    pub state: DownloadState,
    pub error: Option<String>,
    pub progress: ProgressView,
    /// The files under their repository names, once done.
    pub paths: Vec<PathBuf>,
    pub created_ms: i64,
}

/// Where the queue reports: `download.state` and `download.progress` on the bus.
pub trait DownloadEvents: Send + Sync {
    fn state(&self, view: DownloadView);
    fn progress(&self, view: DownloadView);
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("no download #{0}: GET /api/v1/downloads lists them")]
    NotFound(i64),
    #[error("download #{id} is {state:?}; it cannot be {action}")]
    WrongState {
        id: i64,
        state: DownloadState,
        action: &'static str,
    },
    #[error("database query failed: {0}")]
    Store(#[from] sqlx::Error),
    #[error("the stored download #{id} is unreadable ({detail}); it was skipped")]
    Corrupt { id: i64, detail: String },
}

struct Job {
    request: DownloadRequest,
    state: DownloadState,
    error: Option<String>,
    progress: Arc<DownloadProgress>,
    meter: RateMeter,
    /// Set while running; cancelling it stops the transfer.
    cancel: Option<CancellationToken>,
    /// What a stop of the running transfer means (paused or cancelled).
    stopping_as: Option<DownloadState>,
    paths: Vec<PathBuf>,
    created_ms: i64,
}

impl Job {
    fn new(
        request: DownloadRequest,
        state: DownloadState,
        error: Option<String>,
        created_ms: i64,
    ) -> Job {
        let progress = DownloadProgress::default();
        let total = request
            .files
            .iter()
            .fold(0u64, |t, f| t.saturating_add(f.size_bytes));
        progress
            .total_bytes
            .store(total, std::sync::atomic::Ordering::Relaxed);
        progress
            .files_total
            .store(request.files.len(), std::sync::atomic::Ordering::Relaxed);
        // A finished download (one restored after a restart) has all of it on disk.
        if state == DownloadState::Done {
            progress
                .done_bytes
                .store(total, std::sync::atomic::Ordering::Relaxed);
            progress
                .files_done
                .store(request.files.len(), std::sync::atomic::Ordering::Relaxed);
        }
        Job {
            request,
            state,
            error,
            progress: Arc::new(progress),
            meter: RateMeter::new(Duration::from_secs(5)),
            cancel: None,
            stopping_as: None,
            paths: Vec::new(),
            created_ms,
        }
    }

    /// What a download restored after a restart has on disk: a finished one, its files (so the
    /// UI can open them again); a paused, failed or waiting one, the bytes already received (so
    /// it shows its real progress before it runs again).
    fn restore_from_disk(&mut self, destination: &Destination) {
        let paths = self.request.files.iter().map(|f| {
            (
                f,
                destination.paths(&self.request.repo, &self.request.commit, f),
            )
        });
        match self.state {
            DownloadState::Done => self.paths = paths.map(|(_, p)| p.visible).collect(),
            DownloadState::Cancelled => {}
            DownloadState::Queued
            | DownloadState::Running
            | DownloadState::Paused
            | DownloadState::Failed => {
                let (mut bytes, mut files) = (0u64, 0usize);
                for (file, p) in paths {
                    if p.content.is_file() {
                        bytes = bytes.saturating_add(file.size_bytes);
                        files += 1;
                    } else if let Ok(partial) = std::fs::metadata(&p.partial) {
                        bytes = bytes.saturating_add(partial.len().min(file.size_bytes));
                    }
                }
                let relaxed = std::sync::atomic::Ordering::Relaxed;
                self.progress.done_bytes.store(bytes, relaxed);
                self.progress.files_done.store(files, relaxed);
            }
        }
    }

    fn view(&mut self, id: i64) -> DownloadView {
        DownloadView {
            id,
            repo: self.request.repo.clone(),
            revision: self.request.revision.clone(),
            label: self.request.label.clone(),
            files: self.request.files.len(),
            state: self.state,
            error: self.error.clone(),
            progress: self.meter.view(&self.progress),
            paths: self.paths.clone(),
            created_ms: self.created_ms,
        }
    }
}

/// How the queue reaches the hub and where files go: read again for each download, so a token
/// or a download folder set meanwhile is used.
pub type HubSource = Arc<dyn Fn() -> Result<(HubConfig, Destination), ConfigError> + Send + Sync>;

struct Inner {
    store: Store,
    events: Arc<dyn DownloadEvents>,
    hub: HubSource,
    options: FetchOptions,
    jobs: Mutex<BTreeMap<i64, Job>>,
    wake: Notify,
    on_done: Box<dyn Fn() + Send + Sync>,
}

/// The queue; cheap to clone.
#[derive(Clone)]
pub struct Downloads {
    inner: Arc<Inner>,
}

impl Downloads {
    /// Loads the stored queue and starts its worker; downloads that were running or queued
    /// when the daemon stopped go on.
    pub async fn start(
        store: Store,
        events: Arc<dyn DownloadEvents>,
        hub: HubSource,
        options: FetchOptions,
        on_done: impl Fn() + Send + Sync + 'static,
    ) -> Result<Downloads, QueueError> {
        let mut jobs = BTreeMap::new();
        for row in store.downloads().await? {
            match serde_json::from_str::<DownloadRequest>(&row.body) {
                Ok(request) => {
                    let state = DownloadState::parse(&row.state);
                    jobs.insert(
                        row.id,
                        Job::new(request, state, row.error, row.created_at_ms),
                    );
                }
                Err(e) => tracing::warn!(
                    "{}",
                    QueueError::Corrupt {
                        id: row.id,
                        detail: e.to_string()
                    }
                ),
            }
        }
        if let Ok((_, destination)) = hub() {
            for job in jobs.values_mut() {
                job.restore_from_disk(&destination);
            }
        }
        let downloads = Downloads {
            inner: Arc::new(Inner {
                store,
                events,
                hub,
                options,
                jobs: Mutex::new(jobs),
                wake: Notify::new(),
                on_done: Box::new(on_done),
            }),
        };
        tokio::spawn(downloads.clone().work());
        Ok(downloads)
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, Job>> {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn list(&self) -> Vec<DownloadView> {
        self.jobs()
            .iter_mut()
            .map(|(id, job)| job.view(*id))
            .collect()
    }

    /// The finished downloads: what each asked for and where its files are.
    pub fn finished(&self) -> Vec<(DownloadRequest, Vec<PathBuf>)> {
        self.jobs()
            .values()
            .filter(|job| job.state == DownloadState::Done)
            .map(|job| (job.request.clone(), job.paths.clone()))
            .collect()
    }

    /// Where a download queued now would put its files.
    pub fn destination(&self) -> Result<Destination, ConfigError> {
        (self.inner.hub)().map(|(_, destination)| destination)
    }

    /// Queues a download; it starts when those before it are done.
    pub async fn enqueue(&self, request: DownloadRequest) -> Result<DownloadView, QueueError> {
        let body = serde_json::to_string(&request).map_err(|e| QueueError::Corrupt {
            id: 0,
            detail: e.to_string(),
        })?;
        let now = crate::now_ms();
        let id = self
            .inner
            .store
            .insert_download(&body, "queued", now)
            .await?;
        let view = {
            let mut jobs = self.jobs();
            let job = jobs
                .entry(id)
                .or_insert(Job::new(request, DownloadState::Queued, None, now));
            job.view(id)
        };
        self.inner.events.state(view.clone());
        self.inner.wake.notify_one();
        Ok(view)
    }

    /// Pause keeps the received part; resume and retry queue it again; cancel removes it.
    pub async fn pause(&self, id: i64) -> Result<DownloadView, QueueError> {
        self.stop(id, DownloadState::Paused, "paused").await
    }

    pub async fn cancel(&self, id: i64) -> Result<DownloadView, QueueError> {
        let view = self.stop(id, DownloadState::Cancelled, "cancelled").await?;
        if view.state == DownloadState::Cancelled {
            self.remove_partials(id);
        }
        Ok(view)
    }

    pub async fn resume(&self, id: i64) -> Result<DownloadView, QueueError> {
        self.requeue(
            id,
            &[DownloadState::Paused, DownloadState::Failed],
            "resumed",
        )
        .await
    }

    pub async fn retry(&self, id: i64) -> Result<DownloadView, QueueError> {
        self.requeue(
            id,
            &[
                DownloadState::Failed,
                DownloadState::Cancelled,
                DownloadState::Paused,
            ],
            "retried",
        )
        .await
    }

    /// Forgets a finished, failed or cancelled download (its files stay).
    pub async fn forget(&self, id: i64) -> Result<(), QueueError> {
        {
            let jobs = self.jobs();
            let job = jobs.get(&id).ok_or(QueueError::NotFound(id))?;
            if matches!(job.state, DownloadState::Running | DownloadState::Queued) {
                return Err(QueueError::WrongState {
                    id,
                    state: job.state,
                    action: "removed (pause or cancel it first)",
                });
            }
        }
        self.inner.store.delete_download(id).await?;
        self.jobs().remove(&id);
        Ok(())
    }

    async fn stop(
        &self,
        id: i64,
        to: DownloadState,
        action: &'static str,
    ) -> Result<DownloadView, QueueError> {
        let view = {
            let mut jobs = self.jobs();
            let job = jobs.get_mut(&id).ok_or(QueueError::NotFound(id))?;
            match job.state {
                DownloadState::Running => {
                    // The worker sees the cancellation, and records `to` when it has stopped.
                    job.stopping_as = Some(to);
                    if let Some(cancel) = &job.cancel {
                        cancel.cancel();
                    }
                    return Ok(job.view(id));
                }
                DownloadState::Queued | DownloadState::Paused if to != job.state => job.state = to,
                DownloadState::Failed if to == DownloadState::Cancelled => job.state = to,
                state => return Err(QueueError::WrongState { id, state, action }),
            }
            job.view(id)
        };
        self.record(&view).await?;
        Ok(view)
    }

    async fn requeue(
        &self,
        id: i64,
        from: &[DownloadState],
        action: &'static str,
    ) -> Result<DownloadView, QueueError> {
        let view = {
            let mut jobs = self.jobs();
            let job = jobs.get_mut(&id).ok_or(QueueError::NotFound(id))?;
            if !from.contains(&job.state) {
                return Err(QueueError::WrongState {
                    id,
                    state: job.state,
                    action,
                });
            }
            job.state = DownloadState::Queued;
            job.error = None;
            job.view(id)
        };
        self.record(&view).await?;
        self.inner.wake.notify_one();
        Ok(view)
    }

    /// Stores a view's state and announces it.
    async fn record(&self, view: &DownloadView) -> Result<(), QueueError> {
        self.inner
            .store
            .set_download_state(
                view.id,
                view.state.name(),
                view.error.as_deref(),
                crate::now_ms(),
            )
            .await?;
        self.inner.events.state(view.clone());
        Ok(())
    }

    /// The worker: runs the oldest queued download, one at a time, forever.
    async fn work(self) {
        loop {
            let next = self
                .jobs()
                .iter()
                .find(|(_, job)| job.state == DownloadState::Queued)
                .map(|(id, _)| *id);
            match next {
                Some(id) => self.run(id).await,
                None => self.inner.wake.notified().await,
            }
        }
    }

    async fn run(&self, id: i64) {
        let cancel = CancellationToken::new();
        let started = {
            let mut jobs = self.jobs();
            jobs.get_mut(&id).map(|job| {
                job.state = DownloadState::Running;
                job.cancel = Some(cancel.clone());
                job.stopping_as = None;
                job.error = None;
                // A rerun counts from what is on disk again.
                job.progress
                    .done_bytes
                    .store(0, std::sync::atomic::Ordering::Relaxed);
                job.progress
                    .files_done
                    .store(0, std::sync::atomic::Ordering::Relaxed);
                (job.request.clone(), job.progress.clone(), job.view(id))
            })
        };
        let Some((request, progress, view)) = started else {
            return;
        };
        if let Err(e) = self.record(&view).await {
            tracing::warn!("download #{id}: {e}");
        }
        let ticker = self.spawn_progress(id, cancel.clone());
        let outcome = self.transfer(&request, &progress, &cancel).await;
        ticker.abort();
        // A cancelled download's partial files go before anyone is told it is cancelled.
        let cancelled = matches!(outcome, Err(DownloadError::Cancelled))
            && self.jobs().get(&id).and_then(|job| job.stopping_as)
                == Some(DownloadState::Cancelled);
        if cancelled {
            self.remove_partials(id);
        }
        let view = {
            let mut jobs = self.jobs();
            let Some(job) = jobs.get_mut(&id) else {
                return;
            };
            job.cancel = None;
            match outcome {
                Ok(paths) => {
                    job.state = DownloadState::Done;
                    job.paths = paths;
                }
                Err(DownloadError::Cancelled) => {
                    job.state = job.stopping_as.take().unwrap_or(DownloadState::Paused);
                }
                Err(error) => {
                    job.state = DownloadState::Failed;
                    job.error = Some(error.to_string());
                }
            }
            job.view(id)
        };
        if view.state == DownloadState::Done {
            (self.inner.on_done)();
        }
        if let Err(e) = self.record(&view).await {
            tracing::warn!("download #{id}: {e}");
        }
    }

    async fn transfer(
        &self,
        request: &DownloadRequest,
        progress: &DownloadProgress,
        cancel: &CancellationToken,
    ) -> Result<Vec<PathBuf>, DownloadError> {
        let (config, destination) = (self.inner.hub)()?;
        let client = HubClient::new(&config).map_err(|source| DownloadError::Hub {
            file: request.repo.to_string(),
            source,
        })?;
        let downloader = Downloader::new(client, destination, self.inner.options.clone());
        let plan = DownloadPlan {
            repo: request.repo.clone(),
            revision: request.revision.clone(),
            commit: request.commit.clone(),
            files: request.files.clone(),
        };
        Ok(downloader.download(&plan, progress, cancel).await?.paths)
    }

    fn spawn_progress(&self, id: i64, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        let downloads = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(PROGRESS_EVERY) => {}
                    _ = cancel.cancelled() => return,
                }
                let view = downloads.jobs().get_mut(&id).map(|job| job.view(id));
                if let Some(view) = view {
                    downloads.inner.events.progress(view);
                }
            }
        })
    }

    /// A cancelled download leaves nothing behind but complete files (shared with others),
    /// and partial files another download is writing: each goes only under its lock.
    fn remove_partials(&self, id: i64) {
        let request = match self.jobs().get(&id) {
            Some(job) => job.request.clone(),
            None => return,
        };
        let Ok((_, destination)) = (self.inner.hub)() else {
            return;
        };
        for file in &request.files {
            let paths = destination.paths(&request.repo, &request.commit, file);
            match DownloadLock::try_acquire(&paths.lock) {
                Ok(Some(_unused)) => {
                    let _ = std::fs::remove_file(&paths.partial);
                    let _ = std::fs::remove_file(&paths.journal);
                }
                Ok(None) => tracing::info!(
                    file = %file.path,
                    "another download is writing this file; its partial file is kept"
                ),
                Err(e) => tracing::warn!(
                    file = %file.path,
                    "the partial file was kept: its lock {} could not be taken ({e})",
                    paths.lock.display()
                ),
            }
        }
    }
}

/// The scripted loopback server of the hub crate's tests (also the fit path's tests').
#[cfg(test)]
#[path = "../../../hub/tests/support/raw_http.rs"]
pub(crate) mod raw_http;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::config::parse_endpoint;
    use crate::hub::repo::RepoPath;

    struct Quiet;

    impl DownloadEvents for Quiet {
        fn state(&self, _: DownloadView) {}
        fn progress(&self, _: DownloadView) {}
    }

    fn quick_options() -> FetchOptions {
        FetchOptions {
            connections: 1,
            stall_timeout: Duration::from_millis(300),
            max_attempts: 2,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(20),
            ..FetchOptions::default()
        }
    }

    /// A hub that accepts connections and never answers a byte.
    async fn silent_hub() -> String {
        super::raw_http::RawServer::start(|_| super::raw_http::Reply::Silence)
            .await
            .url
    }

    fn request(blob_seed: u8) -> DownloadRequest {
        let file = RepoFile {
            path: RepoPath::parse("m-Q4_K_M.gguf").expect("path"),
            size_bytes: 10,
            git_oid: "1".repeat(40),
            lfs_sha256: Some(format!("{blob_seed:02x}").repeat(32)),
        };
        DownloadRequest {
            repo: RepoId::parse("o/n").expect("repo"),
            revision: Revision::main(),
            commit: CommitId::parse(&"c".repeat(40)).expect("commit"),
            label: "Q4_K_M".into(),
            files: vec![file],
        }
    }

    async fn queue(dir: &std::path::Path, hub: &str) -> Downloads {
        let store = Store::open(&dir.join("rigdeck.db")).await.expect("store");
        let endpoint = parse_endpoint(Some(hub)).expect("endpoint");
        let cache = dir.join("hub");
        let source: HubSource = Arc::new(move || {
            let config = HubConfig {
                endpoint: endpoint.clone(),
                cache_dir: cache.clone(),
                token: None,
            };
            Ok((config, Destination::HubCache(cache.clone())))
        });
        Downloads::start(store, Arc::new(Quiet), source, quick_options(), || {})
            .await
            .expect("queue")
    }

    /// The download's view once `reached` holds, failing the test after 15 s.
    async fn wait_for(
        downloads: &Downloads,
        id: i64,
        reached: impl Fn(&DownloadView) -> bool,
    ) -> DownloadView {
        for _ in 0..300 {
            let view = downloads.list().into_iter().find(|v| v.id == id);
            if let Some(view) = view.filter(|v| reached(v)) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("download #{id} never got there: {:?}", downloads.list());
    }

    /// `request` stored in `state` by an earlier daemon, as the queue restores it at its start.
    async fn restored(
        dir: &std::path::Path,
        request: &DownloadRequest,
        state: &str,
    ) -> DownloadView {
        let store = Store::open(&dir.join("rigdeck.db")).await.expect("store");
        let body = serde_json::to_string(request).expect("body");
        let id = store
            .insert_download(&body, state, 1)
            .await
            .expect("stored");
        drop(store);
        let downloads = queue(dir, &silent_hub().await).await;
        let view = downloads.list().into_iter().find(|v| v.id == id);
        view.expect("restored")
    }

    #[tokio::test]
    async fn a_finished_download_restored_after_a_restart_shows_its_full_size_done() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut finished = request(0xdd);
        finished.files[0].size_bytes = 253_000_000;
        let view = restored(dir.path(), &finished, "done").await;
        assert_eq!(view.state, DownloadState::Done);
        assert_eq!(view.progress.total_bytes, 253_000_000);
        assert_eq!(view.progress.done_bytes, 253_000_000, "{view:?}");
        assert_eq!(view.progress.files_done, 1, "{view:?}");
    }

    #[tokio::test]
    async fn a_paused_download_restored_after_a_restart_shows_what_it_received() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paused = request(0xee);
        let paths = Destination::HubCache(dir.path().join("hub")).paths(
            &paused.repo,
            &paused.commit,
            &paused.files[0],
        );
        std::fs::create_dir_all(paths.partial.parent().expect("blobs")).expect("mkdir");
        std::fs::write(&paths.partial, b"0123").expect("partial");
        let view = restored(dir.path(), &paused, "paused").await;
        assert_eq!(view.state, DownloadState::Paused);
        assert_eq!(view.progress.done_bytes, 4, "{view:?}");
        assert_eq!(view.progress.files_done, 0, "{view:?}");
    }

    #[tokio::test]
    async fn a_download_whose_hub_never_answers_fails_and_the_queue_moves_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let downloads = queue(dir.path(), &silent_hub().await).await;
        let first = downloads.enqueue(request(0xaa)).await.expect("first").id;
        let second = downloads.enqueue(request(0xbb)).await.expect("second").id;
        let failed = wait_for(&downloads, first, |v| v.state == DownloadState::Failed).await;
        let error = failed.error.unwrap_or_default();
        assert!(error.contains("sent no response headers"), "{error}");
        wait_for(&downloads, second, |v| v.state != DownloadState::Queued).await;
    }

    #[tokio::test]
    async fn cancelling_a_download_keeps_the_partial_another_live_download_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let downloads = queue(dir.path(), &silent_hub().await).await;
        let request = request(0xcc);
        let paths = Destination::HubCache(dir.path().join("hub")).paths(
            &request.repo,
            &request.commit,
            &request.files[0],
        );
        // Another download of the same file (another queue, `hf`) is writing its partial.
        let _live = DownloadLock::acquire(&paths.lock, || {})
            .await
            .expect("lock");
        std::fs::create_dir_all(paths.partial.parent().expect("blobs")).expect("mkdir");
        std::fs::write(&paths.partial, b"01234").expect("partial");

        let id = downloads.enqueue(request).await.expect("queued").id;
        wait_for(&downloads, id, |v| v.state == DownloadState::Running).await;
        downloads.pause(id).await.expect("paused");
        wait_for(&downloads, id, |v| v.state == DownloadState::Paused).await;
        downloads.cancel(id).await.expect("cancelled");
        assert!(
            paths.partial.exists(),
            "the partial another download writes is kept"
        );
    }
}
