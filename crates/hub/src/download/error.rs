//! What stops a download, each case naming the file, the numbers and what happens next.

use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

use crate::api::error::seconds_text;
use crate::api::HubError;

#[derive(Debug, Error)]
pub enum DownloadError {
    #[error("{file}: {source}")]
    Hub {
        file: String,
        #[source]
        source: HubError,
    },
    #[error("{file}: no data from {url} for {}, {attempts} time(s) in a row; {}", seconds_text(*waited), kept_text(*kept_bytes))]
    Stalled {
        file: String,
        url: String,
        waited: Duration,
        attempts: u32,
        /// Bytes of the file on disk when the download stopped (what the next start resumes).
        kept_bytes: u64,
    },
    #[error("{file}: the received bytes hash to {got}, the hub says {expected}; the partial file was removed and the file is fetched again")]
    HashMismatch {
        file: String,
        expected: String,
        got: String,
    },
    #[error("{file}: the hub serves {served} bytes but its listing says {listed}; refused (the repository may have changed during the download: start it again)")]
    SizeMismatch {
        file: String,
        listed: u64,
        served: u64,
    },
    #[error("{file}: the server at {url} answered a range request with the whole file; refused, since resuming and parallel connections depend on ranges")]
    RangeIgnored { file: String, url: String },
    #[error("not enough disk space in {}: the download needs {} more, {} is free; free some space or choose another models folder", path.display(), human_bytes(*needed), human_bytes(*available))]
    DiskSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("{}: {}; the received part is kept, the next start resumes it", path.display(), describe_io(source))]
    Disk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("nothing to download from {repo}: no file was chosen; nothing was written")]
    NothingToDownload { repo: String },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("the download was stopped")]
    Cancelled,
}

impl DownloadError {
    pub fn disk(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DownloadError {
        let path = path.into();
        move |source| DownloadError::Disk { path, source }
    }
}

/// What a stopped download left for the next start to resume.
fn kept_text(kept_bytes: u64) -> String {
    if kept_bytes == 0 {
        "nothing was received yet".into()
    } else {
        format!(
            "the {} received are kept, the next start resumes them",
            human_bytes(kept_bytes)
        )
    }
}

/// "the disk is full" rather than "No space left on device (os error 28)".
fn describe_io(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENOSPC) => "the disk is full".into(),
        Some(libc::EDQUOT) => "the disk quota is used up".into(),
        _ => error.to_string(),
    }
}

/// Bytes for a message: GiB with two decimals from 1 GiB up, MiB with one below.
pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (MIB * 1024.0))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}
