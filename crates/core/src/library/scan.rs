//! Walks the model folders: GGUF files (split shards grouped into one model), safetensors
//! folders and Ollama stores (one model per tag). Follows symbolic links (the Hugging Face cache
//! links snapshots to blobs) without looping, and skips what cannot be a model.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rigdeck_gguf::split::{MissingParts, SplitName};

use super::ollama::{self, OllamaTag};

/// Deep enough for `hub/models--org--name/snapshots/<rev>/sub/file.gguf`.
const MAX_DEPTH: usize = 8;

/// A file of a model, with what tells whether it changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct FileStamp {
    pub path: PathBuf,
    pub size_bytes: u64,
    pub modified_ms: i64,
}

/// What the walk found, before any header is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// One GGUF file, or all present shards of a split one (first shard first).
    Gguf {
        folder: PathBuf,
        files: Vec<FileStamp>,
        /// Parts of a split model not in the folder (empty when complete or unsplit).
        missing: MissingParts,
    },
    /// A folder with `config.json` and safetensors weights.
    Safetensors {
        folder: PathBuf,
        dir: PathBuf,
        files: Vec<FileStamp>,
    },
    /// A tag of an Ollama store: its GGUF blob under the tag's name.
    Ollama { folder: PathBuf, tag: OllamaTag },
}

impl Found {
    /// What tells whether the model changed on disk: all its files (and an Ollama manifest).
    pub fn stamps(&self) -> Vec<FileStamp> {
        match self {
            Found::Gguf { files, .. } | Found::Safetensors { files, .. } => files.clone(),
            Found::Ollama { tag, .. } => std::iter::once(tag.manifest.clone())
                .chain(tag.files.iter().cloned())
                .collect(),
        }
    }
}

/// What one model folder holds, before shards are grouped.
#[derive(Default)]
struct Visited {
    ggufs: Vec<FileStamp>,
    safetensors: Vec<(PathBuf, Vec<FileStamp>)>,
    ollama: Vec<OllamaTag>,
}

pub fn walk(folders: &[PathBuf]) -> Vec<Found> {
    let mut found = Vec::new();
    let mut seen_dirs = HashSet::new();
    for folder in folders {
        let mut visited = Visited::default();
        visit(folder, 0, &mut seen_dirs, &mut visited);
        found.extend(
            visited
                .safetensors
                .into_iter()
                .map(|(dir, files)| Found::Safetensors {
                    folder: folder.clone(),
                    dir,
                    files,
                }),
        );
        found.extend(visited.ollama.into_iter().map(|tag| Found::Ollama {
            folder: folder.clone(),
            tag,
        }));
        found.extend(group_shards(folder, visited.ggufs));
    }
    found
}

pub(super) fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        path: path.to_owned(),
        size_bytes: meta.len(),
        modified_ms: meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000,
    })
}

fn visit(dir: &Path, depth: usize, seen: &mut HashSet<(u64, u64)>, visited: &mut Visited) {
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    if depth > MAX_DEPTH || !meta.is_dir() || !seen.insert((meta.dev(), meta.ino())) {
        return;
    }
    // Ollama's blobs are reached through its manifests; GGUF files elsewhere in it still count.
    let ollama_store = ollama::is_store(dir);
    if ollama_store {
        visited.ollama.extend(ollama::read_store(dir));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut weights = Vec::new();
    let mut has_config = false;
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "blobs" {
            continue; // .locks, .git, partial downloads; HF blobs are reached through snapshots
        }
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if !(ollama_store && name == "manifests") {
                subdirs.push(path);
            }
        } else if name.ends_with(".gguf") {
            visited.ggufs.extend(stamp(&path));
        } else if name.ends_with(".safetensors") {
            weights.extend(stamp(&path));
        } else if name == "config.json" {
            has_config = true;
        }
    }
    if has_config && !weights.is_empty() {
        weights.sort_by(|a, b| a.path.cmp(&b.path));
        visited.safetensors.push((dir.to_owned(), weights));
    }
    subdirs.sort();
    for sub in subdirs {
        visit(&sub, depth + 1, seen, visited);
    }
}

/// Shards `x-00001-of-00003.gguf` … become one model; a missing shard is named.
fn group_shards(folder: &Path, files: Vec<FileStamp>) -> Vec<Found> {
    let mut splits: BTreeMap<(PathBuf, String, u32), Vec<(u32, FileStamp)>> = BTreeMap::new();
    let mut out = Vec::new();
    for file in files {
        let name = file
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned);
        match name.as_deref().and_then(SplitName::parse) {
            Some(split) => {
                let dir = file
                    .path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                splits
                    .entry((dir, split.prefix, split.count))
                    .or_default()
                    .push((split.number, file));
            }
            None => out.push(Found::Gguf {
                folder: folder.to_owned(),
                files: vec![file],
                missing: MissingParts::default(),
            }),
        }
    }
    for ((_, prefix, count), mut parts) in splits {
        parts.sort_by_key(|(n, _)| *n);
        let present: HashSet<u32> = parts.iter().map(|(n, _)| *n).collect();
        let missing = MissingParts::find(&prefix, count, |n| present.contains(&n));
        out.push(Found::Gguf {
            folder: folder.to_owned(),
            files: parts.into_iter().map(|(_, f)| f).collect(),
            missing,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    #[test]
    fn groups_shards_follows_links_and_finds_safetensors_folders() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        touch(&r.join("a/Qwen3-8B-Q4_K_M.gguf"));
        touch(&r.join("b/GLM-00001-of-00003.gguf"));
        touch(&r.join("b/GLM-00002-of-00003.gguf"));
        touch(&r.join("c/model-00001-of-00002.safetensors"));
        touch(&r.join("c/config.json"));
        touch(&r.join("hub/models--x--y/blobs/abcdef"));
        std::os::unix::fs::symlink(r.join("a/Qwen3-8B-Q4_K_M.gguf"), {
            std::fs::create_dir_all(r.join("hub/models--x--y/snapshots/rev")).unwrap();
            r.join("hub/models--x--y/snapshots/rev/linked.gguf")
        })
        .unwrap();
        std::os::unix::fs::symlink(r, r.join("a/loop")).unwrap();
        let found = walk(&[r.to_owned()]);
        let ggufs: Vec<_> = found
            .iter()
            .filter_map(|f| match f {
                Found::Gguf { files, missing, .. } => Some((files.len(), missing.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(ggufs.len(), 3, "{found:#?}");
        assert!(ggufs.contains(&(2, "'GLM-00003-of-00003.gguf' is".to_owned())));
        assert_eq!(
            found
                .iter()
                .filter(|f| matches!(f, Found::Safetensors { .. }))
                .count(),
            1
        );
    }

    #[test]
    fn a_missing_folder_is_simply_empty() {
        assert!(walk(&[PathBuf::from("/nonexistent/models")]).is_empty());
    }
}
