//! Checking downloaded files against the hub: each file of a cached snapshot re-hashed from
//! disk (SHA-256, or the git blob id for small files) against the hub's listing at that commit,
//! and whether the branch has moved on upstream since.

use serde::Serialize;
use std::io::Read;
use std::path::Path;

use super::resume::ContentHash;
use crate::api::{HubClient, HubError};
use crate::cache::Destination;
use crate::repo::{CommitId, RepoFile, RepoId, Revision};

/// One file checked against the hub.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub path: String,
    pub ok: bool,
    /// What is wrong: a different hash, a missing file, a file the hub no longer lists.
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    pub commit: CommitId,
    pub files: Vec<Checked>,
    /// The hub's branch points to another commit now (the local files are an older version).
    pub upstream_commit: Option<CommitId>,
}

/// Re-hashes a cached snapshot's files against the hub's listing at that commit, and says
/// whether `revision` has moved on upstream.
pub async fn verify(
    client: &HubClient,
    cache_dir: &Path,
    repo: &RepoId,
    revision: &Revision,
) -> Result<Verification, HubError> {
    let dir = cache_dir.join(repo.cache_folder_name());
    let local = Destination::HubCache(cache_dir.to_owned())
        .read_ref(repo, revision)
        .ok_or_else(|| HubError::NotFound {
            what: format!("a downloaded '{repo}' at {revision}"),
            url: dir.display().to_string(),
        })?;
    let info = client.model_info(repo, revision).await?;
    let listing = client.list_files(repo, &local).await?;
    let snapshot = dir.join("snapshots").join(local.as_str());
    let mut files = Vec::new();
    for file in &listing.files {
        let path = snapshot.join(file.path.as_str());
        if !path.exists() {
            continue; // not downloaded (another quantization): nothing to check
        }
        let expected = file.blob_name().to_owned();
        let listed = file.clone();
        let got = tokio::task::spawn_blocking(move || hash_file(&path, &listed))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        files.push(match got {
            Ok(got) if got == expected => Checked {
                path: file.path.to_string(),
                ok: true,
                problem: None,
            },
            Ok(got) => Checked {
                path: file.path.to_string(),
                ok: false,
                problem: Some(format!(
                    "hashes to {got}, the hub says {expected}: download it again"
                )),
            },
            Err(e) => Checked {
                path: file.path.to_string(),
                ok: false,
                problem: Some(format!("cannot be read: {e}")),
            },
        });
    }
    Ok(Verification {
        upstream_commit: (info.commit != local).then_some(info.commit),
        commit: local,
        files,
    })
}

/// The hash the hub names this file by, computed from the file on disk.
pub(crate) fn hash_file(path: &Path, file: &RepoFile) -> std::io::Result<String> {
    let mut reader = std::fs::File::open(path)?;
    let mut buffer = vec![0u8; 4 << 20];
    let mut hash = ContentHash::new(file);
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            return Ok(hash.hex_digest());
        }
        hash.update(&buffer[..read]);
    }
}
