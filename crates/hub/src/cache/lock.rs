//! An exclusive lock on one file's download, shared with `huggingface_hub` (it takes the same
//! `flock` on the same path), so two programs or two Rigdeck processes never write one file.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// Held until dropped (closing the file releases the lock, also when the process dies).
pub struct DownloadLock {
    _file: File,
}

/// How often a waiting download asks again.
const POLL: Duration = Duration::from_millis(250);

impl DownloadLock {
    /// Takes the lock, waiting while another process holds it; `on_wait` is called once when
    /// the first attempt finds it taken (to tell the user why nothing moves).
    pub async fn acquire(path: &Path, on_wait: impl FnOnce()) -> io::Result<DownloadLock> {
        let file = open_lock_file(path)?;
        let mut on_wait = Some(on_wait);
        loop {
            if lock_now(&file)? {
                return Ok(DownloadLock { _file: file });
            }
            if let Some(tell) = on_wait.take() {
                tell();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Takes the lock if nobody holds it; `None` while a download (of this or another
    /// process) holds it: what removing a partial file must check first.
    pub fn try_acquire(path: &Path) -> io::Result<Option<DownloadLock>> {
        let file = open_lock_file(path)?;
        Ok(lock_now(&file)?.then_some(DownloadLock { _file: file }))
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// One attempt at the exclusive lock: `false` when another holder has it.
fn lock_now(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor the caller owns; no memory is involved.
    let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if taken == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_for_the_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".locks/x.lock");
        let first = DownloadLock::acquire(&path, || {}).await.expect("first");
        let waited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = waited.clone();
        let second = tokio::spawn(async move {
            DownloadLock::acquire(&path, move || {
                flag.store(true, std::sync::atomic::Ordering::SeqCst)
            })
            .await
            .map(|_| ())
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!second.is_finished());
        drop(first);
        second.await.expect("joined").expect("second");
        assert!(waited.load(std::sync::atomic::Ordering::SeqCst));
    }
}
