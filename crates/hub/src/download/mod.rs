//! Downloading a set of files of one repository at one commit: refuse up front when the disk
//! cannot hold them, then fetch each file (resumably, verified, over several connections),
//! move it into place only once its hash matches, and make it visible under its repository
//! name. Files already in the cache are reused; a run stopped at any point resumes.

pub mod error;
pub mod fetch;
pub mod progress;
pub mod resume;
pub mod sha;
pub mod verify;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

pub use error::DownloadError;
pub use fetch::FetchOptions;
pub use progress::{DownloadProgress, ProgressView, RateMeter};
/// How a download is paused or cancelled (re-exported so callers need no other crate).
pub use tokio_util::sync::CancellationToken;

use crate::api::HubClient;
use crate::cache::{Destination, DownloadLock, FilePaths};
use crate::repo::{CommitId, RepoFile, RepoId, Revision};

/// Room kept free beyond the files themselves (journals, the file system's own needs), as a
/// fraction of what is fetched: 1 %.
const DISK_MARGIN_DIVISOR: u64 = 100;
/// Whole-file attempts when the finished file's hash is wrong (a corrupted transfer).
const HASH_ATTEMPTS: u32 = 2;

/// What to download.
#[derive(Clone, Debug)]
pub struct DownloadPlan {
    pub repo: RepoId,
    /// The branch or tag asked for, remembered under `refs/` (or the commit itself).
    pub revision: Revision,
    pub commit: CommitId,
    pub files: Vec<RepoFile>,
}

/// What a finished download left.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Downloaded {
    /// Each file under its repository name, in the plan's order.
    pub paths: Vec<PathBuf>,
    /// Files that were already complete.
    pub reused: usize,
}

pub struct Downloader {
    client: HubClient,
    destination: Destination,
    options: FetchOptions,
}

impl Downloader {
    pub fn new(client: HubClient, destination: Destination, options: FetchOptions) -> Downloader {
        Downloader {
            client,
            destination,
            options,
        }
    }

    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    pub async fn download(
        &self,
        plan: &DownloadPlan,
        progress: &DownloadProgress,
        cancel: &CancellationToken,
    ) -> Result<Downloaded, DownloadError> {
        if plan.files.is_empty() {
            return Err(DownloadError::NothingToDownload {
                repo: plan.repo.to_string(),
            });
        }
        let files: Vec<(&RepoFile, FilePaths)> = plan
            .files
            .iter()
            .map(|f| (f, self.destination.paths(&plan.repo, &plan.commit, f)))
            .collect();
        let total = plan
            .files
            .iter()
            .fold(0u64, |t, f| t.saturating_add(f.size_bytes));
        progress.total_bytes.store(total, Ordering::Relaxed);
        progress.files_total.store(files.len(), Ordering::Relaxed);
        self.check_disk_space(&plan.repo, &files)?;
        let mut downloaded = Downloaded {
            paths: Vec::new(),
            reused: 0,
        };
        for (file, paths) in &files {
            if self.fetch_one(plan, file, paths, progress, cancel).await? {
                downloaded.reused += 1;
            }
            progress.files_done.fetch_add(1, Ordering::Relaxed);
            downloaded.paths.push(paths.visible.clone());
        }
        self.destination
            .write_ref(&plan.repo, &plan.revision, &plan.commit)
            .map_err(DownloadError::disk(self.destination.repo_dir(&plan.repo)))?;
        Ok(downloaded)
    }

    /// Refuses a download the disk cannot hold, with the numbers, before a byte is fetched.
    fn check_disk_space(
        &self,
        repo: &RepoId,
        files: &[(&RepoFile, FilePaths)],
    ) -> Result<(), DownloadError> {
        let needed = files.iter().fold(0u64, |sum, (file, paths)| {
            let have = if is_recorded_complete(paths, file) {
                file.size_bytes
            } else {
                file_len(&paths.partial).min(file.size_bytes)
            };
            sum.saturating_add(file.size_bytes - have)
        });
        if needed == 0 {
            return Ok(());
        }
        let dir = self.destination.repo_dir(repo);
        let Some(available) = available_bytes(&dir) else {
            return Ok(()); // unknown (an exotic file system): the write itself will tell
        };
        if needed.saturating_add(needed / DISK_MARGIN_DIVISOR) > available {
            return Err(DownloadError::DiskSpace {
                path: existing_ancestor(&dir),
                needed,
                available,
            });
        }
        Ok(())
    }

    /// One file, under its lock. Returns whether it was already complete.
    async fn fetch_one(
        &self,
        plan: &DownloadPlan,
        file: &RepoFile,
        paths: &FilePaths,
        progress: &DownloadProgress,
        cancel: &CancellationToken,
    ) -> Result<bool, DownloadError> {
        progress.set_current(file.path.as_str());
        let lock = DownloadLock::acquire(&paths.lock, || {
            tracing::info!(file = %file.path, "another program is downloading this file; waiting for it");
        });
        let _lock = tokio::select! {
            lock = lock => lock.map_err(DownloadError::disk(&paths.lock))?,
            _ = cancel.cancelled() => return Err(DownloadError::Cancelled),
        };
        let reused = is_complete(paths, file).await;
        if reused {
            progress
                .done_bytes
                .fetch_add(file.size_bytes, Ordering::Relaxed);
        } else {
            self.fetch_verified(plan, file, paths, progress, cancel)
                .await?;
            move_into_place(paths)?;
            record_verified(paths, file)?;
        }
        self.destination
            .publish(file, paths)
            .map_err(DownloadError::disk(&paths.visible))?;
        Ok(reused)
    }

    /// Fetches until the hash matches, at most `HASH_ATTEMPTS` times.
    async fn fetch_verified(
        &self,
        plan: &DownloadPlan,
        file: &RepoFile,
        paths: &FilePaths,
        progress: &DownloadProgress,
        cancel: &CancellationToken,
    ) -> Result<(), DownloadError> {
        let url = self
            .client
            .resolve_url(&plan.repo, &plan.commit, &file.path);
        let mut attempt = 1;
        loop {
            let before = progress.done_bytes.load(Ordering::Relaxed);
            let fetched = fetch::fetch_file(
                &self.client,
                url.clone(),
                file,
                paths,
                &self.options,
                progress.done_bytes.clone(),
                cancel,
            )
            .await;
            match fetched {
                Err(DownloadError::HashMismatch { .. }) if attempt < HASH_ATTEMPTS => {
                    tracing::warn!(file = %file.path, "hash mismatch; fetching the file again");
                    let counted = progress.done_bytes.load(Ordering::Relaxed) - before;
                    progress.done_bytes.fetch_sub(counted, Ordering::Relaxed);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// The verified partial file becomes the content (readable by all, as `huggingface_hub`
/// leaves blobs); its journal goes.
fn move_into_place(paths: &FilePaths) -> Result<(), DownloadError> {
    let fail = DownloadError::disk(&paths.content);
    std::fs::set_permissions(&paths.partial, std::fs::Permissions::from_mode(0o644))
        .map_err(DownloadError::disk(&paths.partial))?;
    if let Some(parent) = paths.content.parent() {
        std::fs::create_dir_all(parent).map_err(DownloadError::disk(parent))?;
    }
    std::fs::rename(&paths.partial, &paths.content).map_err(fail)?;
    let _ = std::fs::remove_file(&paths.journal);
    Ok(())
}

/// Whether the content is this file, without reading it: in the cache a blob of the right
/// size (it only arrives there, under its hash's name, after its hash matched; `rigdeck
/// verify` re-hashes on request); in a plain folder a file of the right size whose record
/// names this blob.
fn is_recorded_complete(paths: &FilePaths, file: &RepoFile) -> bool {
    has_listed_size(paths, file)
        && (paths.record.is_none() || recorded_blob(paths).is_some_and(|b| b == file.blob_name()))
}

/// Whether the content is this file: as [`is_recorded_complete`], and a plain-folder file
/// with no record (another tool's, an older Rigdeck's) of the right size that hashes to it,
/// which is then recorded. A record naming another blob means the file changed upstream (a
/// same-size re-upload): it is fetched again. The hashing runs on a blocking thread.
async fn is_complete(paths: &FilePaths, file: &RepoFile) -> bool {
    if paths.record.is_none() || !has_listed_size(paths, file) {
        return is_recorded_complete(paths, file);
    }
    if let Some(blob) = recorded_blob(paths) {
        return blob == file.blob_name();
    }
    let (content, listed) = (paths.content.clone(), file.clone());
    let hashed = tokio::task::spawn_blocking(move || verify::hash_file(&content, &listed)).await;
    let same = matches!(hashed, Ok(Ok(got)) if got == file.blob_name());
    same && record_verified(paths, file).is_ok()
}

fn has_listed_size(paths: &FilePaths, file: &RepoFile) -> bool {
    std::fs::metadata(&paths.content).is_ok_and(|m| m.is_file() && m.len() == file.size_bytes)
}

/// The blob a plain-folder file was recorded as, if it was.
fn recorded_blob(paths: &FilePaths) -> Option<String> {
    let text = std::fs::read_to_string(paths.record.as_ref()?).ok()?;
    Some(text.trim().to_owned())
}

/// In a plain folder, records which blob the content now is.
fn record_verified(paths: &FilePaths, file: &RepoFile) -> Result<(), DownloadError> {
    let Some(record) = &paths.record else {
        return Ok(());
    };
    if let Some(parent) = record.parent() {
        std::fs::create_dir_all(parent).map_err(DownloadError::disk(parent))?;
    }
    std::fs::write(record, file.blob_name()).map_err(DownloadError::disk(record))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The deepest folder of `path` that exists (where the files will be created).
fn existing_ancestor(path: &Path) -> PathBuf {
    path.ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_owned()
}

/// Bytes an unprivileged user may still write on the file system holding `path`.
pub fn available_bytes(path: &Path) -> Option<u64> {
    let dir = existing_ancestor(path);
    let c_path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    let status = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) };
    (status == 0).then(|| (stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}
