//! Housekeeping in the shared cache: what is there (repositories, their snapshots and refs,
//! disk use counting each blob once), and removing a snapshot (a blob goes only when no other
//! snapshot links to it).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::DownloadLock;
use crate::repo::{CommitId, RepoId};

/// One snapshot (a commit) of a cached repository.
#[derive(Clone, Debug, Serialize)]
pub struct CachedSnapshot {
    pub commit: CommitId,
    /// Branches or tags under `refs/` that name this commit.
    pub refs: Vec<String>,
    /// The files, by repository path, with the blob each links to.
    pub files: Vec<CachedFile>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CachedFile {
    pub path: String,
    pub blob: String,
    pub size_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CachedRepo {
    pub repo: RepoId,
    pub dir: PathBuf,
    pub snapshots: Vec<CachedSnapshot>,
    /// Bytes of the blobs, each counted once however many snapshots share it.
    pub size_on_disk: u64,
}

/// Every repository in the cache folder (`models--owner--name`); folders whose name is not a
/// valid repository are skipped.
pub fn list(cache_dir: &Path) -> Vec<CachedRepo> {
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let mut repos: Vec<CachedRepo> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let id = name.strip_prefix("models--")?.replacen("--", "/", 1);
            let repo = RepoId::parse(&id).ok()?;
            Some(read_repo(repo, entry.path()))
        })
        .collect();
    repos.sort_by(|a, b| a.repo.cmp(&b.repo));
    repos
}

fn read_repo(repo: RepoId, dir: PathBuf) -> CachedRepo {
    let refs = read_refs(&dir.join("refs"));
    let mut snapshots = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("snapshots")) {
        for entry in entries.filter_map(Result::ok) {
            let Some(commit) = entry
                .file_name()
                .to_str()
                .and_then(|n| CommitId::parse(n).ok())
            else {
                continue;
            };
            let mut files = Vec::new();
            collect_links(&entry.path(), "", &mut files);
            files.sort_by(|a, b| a.path.cmp(&b.path));
            let names = refs
                .iter()
                .filter(|(_, c)| *c == commit)
                .map(|(name, _)| name.clone())
                .collect();
            snapshots.push(CachedSnapshot {
                commit,
                refs: names,
                files,
            });
        }
    }
    snapshots.sort_by(|a, b| a.commit.as_str().cmp(b.commit.as_str()));
    let blobs: BTreeMap<&str, u64> = snapshots
        .iter()
        .flat_map(|s| s.files.iter().map(|f| (f.blob.as_str(), f.size_bytes)))
        .collect();
    let size_on_disk = blobs.values().fold(0u64, |t, s| t.saturating_add(*s));
    CachedRepo {
        repo,
        dir,
        snapshots,
        size_on_disk,
    }
}

/// `refs/<name>` files (names may hold '/', e.g. `refs/pr/1`): name → commit.
fn read_refs(dir: &Path) -> Vec<(String, CommitId)> {
    let mut found = Vec::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((folder, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Some(name) = entry.file_name().to_str().map(|n| format!("{prefix}{n}")) else {
                continue;
            };
            let path = entry.path();
            if path.is_dir() && stack.len() < 64 {
                stack.push((path, format!("{name}/")));
            } else if let Some(commit) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| CommitId::parse(t.trim()).ok())
            {
                found.push((name, commit));
            }
        }
    }
    found
}

/// The snapshot's links (files inside it), recursively, with their blob names and sizes.
fn collect_links(dir: &Path, prefix: &str, out: &mut Vec<CachedFile>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() && prefix.matches('/').count() < 32 {
            collect_links(&path, &format!("{prefix}{name}/"), out);
            continue;
        }
        let blob = std::fs::read_link(&path)
            .ok()
            .and_then(|t| t.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .unwrap_or_default();
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        out.push(CachedFile {
            path: format!("{prefix}{name}"),
            blob,
            size_bytes,
        });
    }
}

/// Takes every download lock of the repository (`.locks/models--owner--name/*.lock`, shared
/// with `huggingface_hub`), so no download of it runs while it is removed; an error naming
/// the blob when one is held.
fn hold_downloads(cache_dir: &Path, repo: &RepoId) -> std::io::Result<Vec<DownloadLock>> {
    let locks = cache_dir.join(".locks").join(repo.cache_folder_name());
    let Ok(entries) = std::fs::read_dir(&locks) else {
        return Ok(Vec::new());
    };
    let mut held = Vec::new();
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        if path.extension().is_none_or(|e| e != "lock") {
            continue;
        }
        match DownloadLock::try_acquire(&path)? {
            Some(lock) => held.push(lock),
            None => {
                let blob = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ResourceBusy,
                    format!(
                        "{repo} is being downloaded (blob {}): pause or cancel that download, then remove it",
                        blob.unwrap_or_default()
                    ),
                ));
            }
        }
    }
    Ok(held)
}

/// What removing a snapshot freed.
#[derive(Clone, Debug, Serialize)]
pub struct Removed {
    pub freed_bytes: u64,
    pub blobs_removed: usize,
    /// Blobs kept because another snapshot still links to them.
    pub blobs_kept: usize,
}

/// Removes one snapshot of a repository (or all when `commit` is `None`), then the blobs no
/// remaining snapshot uses, and refs that pointed to removed snapshots. Refused (with
/// `ResourceBusy`) while a download of the repository runs: its partial file would go.
pub fn remove(
    cache_dir: &Path,
    repo: &RepoId,
    commit: Option<&CommitId>,
) -> std::io::Result<Removed> {
    let _downloads_held_off = hold_downloads(cache_dir, repo)?;
    let dir = cache_dir.join(repo.cache_folder_name());
    let before = read_repo(repo.clone(), dir.clone());
    let (gone, kept): (Vec<&CachedSnapshot>, Vec<&CachedSnapshot>) = before
        .snapshots
        .iter()
        .partition(|s| commit.is_none_or(|c| s.commit == *c));
    if gone.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{repo} has no such snapshot in {}", cache_dir.display()),
        ));
    }
    let in_use: BTreeSet<&str> = kept
        .iter()
        .flat_map(|s| s.files.iter().map(|f| f.blob.as_str()))
        .collect();
    let candidates: BTreeMap<&str, u64> = gone
        .iter()
        .flat_map(|s| s.files.iter().map(|f| (f.blob.as_str(), f.size_bytes)))
        .collect();
    let mut removed = Removed {
        freed_bytes: 0,
        blobs_removed: 0,
        blobs_kept: 0,
    };
    for snapshot in &gone {
        std::fs::remove_dir_all(dir.join("snapshots").join(snapshot.commit.as_str()))?;
        for name in &snapshot.refs {
            let _ = std::fs::remove_file(dir.join("refs").join(name));
        }
    }
    for (blob, size) in candidates {
        if in_use.contains(blob) {
            removed.blobs_kept += 1;
        } else if !blob.is_empty()
            && !blob.contains('/')
            && std::fs::remove_file(dir.join("blobs").join(blob)).is_ok()
        {
            removed.blobs_removed += 1;
            removed.freed_bytes = removed.freed_bytes.saturating_add(size);
        }
    }
    if kept.is_empty() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(removed)
}
