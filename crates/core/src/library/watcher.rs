//! Keeps the library current while the daemon runs: a rescan every few seconds (only changed
//! files have their headers read again) and at once when the model folders setting changes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::{Library, ModelEntry};
use crate::settings::Settings;

const RESCAN_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct LibraryHandle {
    entries: watch::Receiver<Arc<Vec<ModelEntry>>>,
    rescan_now: Arc<Notify>,
}

impl LibraryHandle {
    pub fn entries(&self) -> Arc<Vec<ModelEntry>> {
        self.entries.borrow().clone()
    }

    /// Asks for a rescan and waits until the next list is published (or 30 s pass).
    pub async fn rescan(&self) -> Arc<Vec<ModelEntry>> {
        let mut entries = self.entries.clone();
        entries.mark_unchanged();
        self.rescan_now.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(30), entries.changed()).await;
        self.entries()
    }
}

/// Rescans every [`RESCAN_EVERY`], on request and on a settings change; `on_change` hears of
/// each list that differs from the last (the daemon publishes it as `library.changed`).
pub fn spawn_library_watcher(
    mut settings: watch::Receiver<Settings>,
    on_change: impl Fn(Arc<Vec<ModelEntry>>) + Send + 'static,
) -> LibraryHandle {
    let (tx, entries) = watch::channel(Arc::new(Vec::new()));
    let rescan_now = Arc::new(Notify::new());
    let notify = rescan_now.clone();
    let library = Arc::new(Mutex::new(Library::default()));
    tokio::spawn(async move {
        loop {
            let folders = settings.borrow().library_folders();
            let lib = library.clone();
            let scanned = tokio::task::spawn_blocking(move || {
                let mut library = lib.lock().unwrap_or_else(PoisonError::into_inner);
                let changed = library.rescan(&folders);
                (changed, Arc::new(library.entries().to_vec()))
            })
            .await;
            match scanned {
                Ok((changed, list)) => {
                    if changed {
                        on_change(list.clone());
                    }
                    // Always publish: a rescan request waits for it even when nothing changed.
                    tx.send_replace(list);
                }
                Err(err) => tracing::error!("model library scan failed: {err}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(RESCAN_EVERY) => {}
                _ = notify.notified() => {}
                changed = settings.changed() => if changed.is_err() { break },
            }
        }
    });
    LibraryHandle {
        entries,
        rescan_now,
    }
}
