//! Where a downloaded file lives: the Hugging Face cache layout that `huggingface_hub`, `hf`
//! and llama.cpp's `-hf` share (`models--owner--name/{blobs,snapshots,refs}`, locks under
//! `.locks/`), or a plain folder the user chose.

use std::io;
use std::path::{Path, PathBuf};

use crate::repo::{CommitId, RepoFile, RepoId, Revision};

/// Where files go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The shared cache (`$HF_HUB_CACHE`): content in `blobs/<hash>`, each snapshot a tree of
    /// relative symbolic links to them.
    HubCache(PathBuf),
    /// Files as they are named in the repository, under this folder.
    Folder(PathBuf),
}

/// Every path one file's download touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePaths {
    /// Where the verified content ends up (the blob, or the file in the plain folder).
    pub content: PathBuf,
    /// The name the user and the engines see (the snapshot's link, or `content` itself).
    pub visible: PathBuf,
    /// The bytes received so far, always a contiguous prefix of the file.
    pub partial: PathBuf,
    /// What lets a later run continue hashing where this one stopped.
    pub journal: PathBuf,
    /// Held while downloading, so two programs never write one file (same name as
    /// `huggingface_hub`'s lock, so `hf` and Rigdeck wait for each other).
    pub lock: PathBuf,
    /// In a plain folder, where the blob the content was verified as is recorded: the
    /// content's name says nothing of its version there (in the cache, the name is the hash).
    pub record: Option<PathBuf>,
}

impl Destination {
    /// The folder holding everything of this repository.
    pub fn repo_dir(&self, repo: &RepoId) -> PathBuf {
        match self {
            Destination::HubCache(root) => root.join(repo.cache_folder_name()),
            Destination::Folder(dir) => dir.clone(),
        }
    }

    pub fn paths(&self, repo: &RepoId, commit: &CommitId, file: &RepoFile) -> FilePaths {
        let blob = file.blob_name();
        match self {
            Destination::HubCache(root) => {
                let repo_dir = self.repo_dir(repo);
                let content = repo_dir.join("blobs").join(blob);
                FilePaths {
                    visible: repo_dir
                        .join("snapshots")
                        .join(commit.as_str())
                        .join(file.path.as_str()),
                    partial: repo_dir.join("blobs").join(format!("{blob}.incomplete")),
                    journal: repo_dir.join("blobs").join(format!("{blob}.resume.json")),
                    lock: root
                        .join(".locks")
                        .join(repo.cache_folder_name())
                        .join(format!("{blob}.lock")),
                    record: None,
                    content,
                }
            }
            Destination::Folder(dir) => {
                let content = dir.join(file.path.as_str());
                let state = dir.join(".rigdeck-downloads");
                FilePaths {
                    visible: content.clone(),
                    partial: state.join(format!("{blob}.incomplete")),
                    journal: state.join(format!("{blob}.resume.json")),
                    lock: state.join(format!("{blob}.lock")),
                    record: Some(state.join("verified").join(file.path.as_str())),
                    content,
                }
            }
        }
    }

    /// Makes the finished file visible under its repository name: in the cache, a relative
    /// link `snapshots/<commit>/<path>` → `../../blobs/<hash>` (one more `..` per folder
    /// level), replacing an older link; in a plain folder the content is already there.
    pub fn publish(&self, file: &RepoFile, paths: &FilePaths) -> io::Result<()> {
        if let Destination::Folder(_) = self {
            return Ok(());
        }
        let target = Path::new("../".repeat(2 + file.path.depth()).as_str())
            .join("blobs")
            .join(file.blob_name());
        if let Some(parent) = paths.visible.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let staged = paths.visible.with_extension("rigdeck-link");
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&target, &staged)?;
        std::fs::rename(&staged, &paths.visible)
    }

    /// Remembers which commit a branch or tag named when it was downloaded (`refs/<revision>`),
    /// as `huggingface_hub` does; a commit id needs no ref.
    pub fn write_ref(
        &self,
        repo: &RepoId,
        revision: &Revision,
        commit: &CommitId,
    ) -> io::Result<()> {
        if revision.as_commit().is_some() {
            return Ok(());
        }
        let Destination::HubCache(_) = self else {
            return Ok(());
        };
        let path = self.repo_dir(repo).join("refs").join(revision.as_str());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let staged = path.with_extension("rigdeck-new");
        std::fs::write(&staged, commit.as_str())?;
        std::fs::rename(&staged, &path)
    }

    /// The commit a branch pointed to when it was last downloaded.
    pub fn read_ref(&self, repo: &RepoId, revision: &Revision) -> Option<CommitId> {
        if let Some(commit) = revision.as_commit() {
            return Some(commit);
        }
        let path = self.repo_dir(repo).join("refs").join(revision.as_str());
        let text = std::fs::read_to_string(path).ok()?;
        CommitId::parse(text.trim()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::RepoPath;

    fn file(path: &str) -> RepoFile {
        RepoFile {
            path: RepoPath::parse(path).expect("path"),
            size_bytes: 3,
            git_oid: "1".repeat(40),
            lfs_sha256: Some("f".repeat(64)),
        }
    }

    #[test]
    fn cache_paths_follow_huggingface_hub() {
        let root = PathBuf::from("/c");
        let dest = Destination::HubCache(root);
        let repo = RepoId::parse("o/n").expect("repo");
        let commit = CommitId::parse(&"c".repeat(40)).expect("commit");
        let paths = dest.paths(&repo, &commit, &file("Q4/x.gguf"));
        let blob = "f".repeat(64);
        assert_eq!(
            paths.content,
            PathBuf::from(format!("/c/models--o--n/blobs/{blob}"))
        );
        assert_eq!(
            paths.visible,
            PathBuf::from(format!(
                "/c/models--o--n/snapshots/{}/Q4/x.gguf",
                "c".repeat(40)
            ))
        );
        assert_eq!(
            paths.lock,
            PathBuf::from(format!("/c/.locks/models--o--n/{blob}.lock"))
        );
    }

    #[test]
    fn a_published_link_resolves_to_the_blob_and_refs_name_the_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dest = Destination::HubCache(dir.path().to_owned());
        let repo = RepoId::parse("o/n").expect("repo");
        let commit = CommitId::parse(&"c".repeat(40)).expect("commit");
        let nested = file("a/b/x.gguf");
        let paths = dest.paths(&repo, &commit, &nested);
        std::fs::create_dir_all(paths.content.parent().expect("blobs")).expect("mkdir");
        std::fs::write(&paths.content, b"abc").expect("blob");
        dest.publish(&nested, &paths).expect("link");
        dest.publish(&nested, &paths).expect("link again replaces");
        assert_eq!(std::fs::read(&paths.visible).expect("through link"), b"abc");
        let main = Revision::main();
        dest.write_ref(&repo, &main, &commit).expect("ref");
        assert_eq!(dest.read_ref(&repo, &main), Some(commit));
    }
}
