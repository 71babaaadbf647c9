//! Names from the hub made safe before use: a repository id (`org/name`), a file's path inside a
//! repository, a commit id, and a listed file. Each is validated once, where it enters, so the
//! rest of the crate can join them to local paths without re-checking.

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Why a name from the hub (or the user) was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NameError {
    #[error("'{0}' is not a repository id: write it as owner/name (letters, digits, '-', '_', '.'), e.g. unsloth/Qwen3-8B-GGUF")]
    RepoId(String),
    #[error("the hub listed a file path {path:?} that is {why}; it was left out so nothing is written outside the model's folder")]
    Path { path: String, why: &'static str },
    #[error("'{0}' is not a commit id (40 hexadecimal characters)")]
    Commit(String),
    #[error("'{0}' is not a revision: use a branch, a tag or a commit id without '..', '/' at either end or control characters")]
    Revision(String),
}

/// Longest repository id the hub accepts (owner and name are each at most 96 characters).
const MAX_REPO_PART: usize = 96;
/// Longest file path inside a repository we accept, and longest single component (most file
/// systems' limit).
const MAX_PATH_LEN: usize = 1024;
const MAX_COMPONENT_LEN: usize = 255;

/// `owner/name` on the hub.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoId(String);

impl RepoId {
    pub fn parse(text: &str) -> Result<RepoId, NameError> {
        let refuse = || NameError::RepoId(text.to_owned());
        let (owner, name) = text.split_once('/').ok_or_else(refuse)?;
        let part_ok = |part: &str| {
            !part.is_empty()
                && part.len() <= MAX_REPO_PART
                && !part.starts_with(['.', '-'])
                && !part.ends_with('.')
                && !part.contains("..")
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if part_ok(owner) && part_ok(name) {
            Ok(RepoId(text.to_owned()))
        } else {
            Err(refuse())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The Hugging Face cache's folder name: `models--owner--name`.
    pub fn cache_folder_name(&self) -> String {
        format!("models--{}", self.0.replace('/', "--"))
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RepoId {
    type Error = NameError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        RepoId::parse(&text)
    }
}

impl From<RepoId> for String {
    fn from(id: RepoId) -> String {
        id.0
    }
}

/// A relative path inside a repository: `/`-separated, no empty, `.` or `..` component, no
/// leading `/`, no backslash or control character, bounded lengths. Joining it to a folder can
/// only name something inside that folder.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoPath(String);

impl RepoPath {
    pub fn parse(text: &str) -> Result<RepoPath, NameError> {
        let refuse = |why| NameError::Path {
            path: text.chars().take(200).collect(),
            why,
        };
        if text.is_empty() {
            return Err(refuse("empty"));
        }
        if text.len() > MAX_PATH_LEN {
            return Err(refuse("longer than 1024 bytes"));
        }
        if text.starts_with('/') {
            return Err(refuse("absolute"));
        }
        if text.contains('\\') {
            return Err(refuse("written with a backslash"));
        }
        if text.chars().any(char::is_control) {
            return Err(refuse("holding a control character"));
        }
        for component in text.split('/') {
            match component {
                "" => {
                    return Err(refuse(
                        "holding an empty component ('//' or a trailing '/')",
                    ))
                }
                "." | ".." => return Err(refuse("climbing with '.' or '..'")),
                _ if component.len() > MAX_COMPONENT_LEN => {
                    return Err(refuse("holding a component longer than 255 bytes"))
                }
                _ => {}
            }
        }
        Ok(RepoPath(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last component: the file's own name.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The folder part (empty for a file at the repository's root).
    pub fn folder(&self) -> &str {
        self.0.rsplit_once('/').map_or("", |(folder, _)| folder)
    }

    /// How many folders deep the file sits (0 at the root).
    pub fn depth(&self) -> usize {
        self.0.matches('/').count()
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RepoPath {
    type Error = NameError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        RepoPath::parse(&text)
    }
}

impl From<RepoPath> for String {
    fn from(path: RepoPath) -> String {
        path.0
    }
}

/// A commit on the hub: 40 lowercase hexadecimal characters (the snapshot folder's name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommitId(String);

impl CommitId {
    pub fn parse(text: &str) -> Result<CommitId, NameError> {
        if text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(CommitId(text.to_ascii_lowercase()))
        } else {
            Err(NameError::Commit(text.chars().take(80).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for CommitId {
    type Error = NameError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        CommitId::parse(&text)
    }
}

impl From<CommitId> for String {
    fn from(id: CommitId) -> String {
        id.0
    }
}

/// A branch, tag or commit the user asks for (`main` by default). It names a file under
/// `refs/` in the cache, so it obeys the same rules as a repository path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Revision(String);

impl Revision {
    pub fn main() -> Revision {
        Revision("main".to_owned())
    }

    pub fn parse(text: &str) -> Result<Revision, NameError> {
        match RepoPath::parse(text) {
            Ok(_) if text.len() <= 255 => Ok(Revision(text.to_owned())),
            _ => Err(NameError::Revision(text.chars().take(80).collect())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The commit itself when the revision is a commit id (nothing to remember under `refs/`).
    pub fn as_commit(&self) -> Option<CommitId> {
        CommitId::parse(&self.0).ok()
    }
}

impl Default for Revision {
    fn default() -> Self {
        Revision::main()
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Revision {
    type Error = NameError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Revision::parse(&text)
    }
}

impl From<Revision> for String {
    fn from(revision: Revision) -> String {
        revision.0
    }
}

/// A file of a repository at one commit, as the tree listing gives it. Read back (from the
/// download queue's table) only with hashes that are hex digests, since they name files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredRepoFile")]
pub struct RepoFile {
    pub path: RepoPath,
    pub size_bytes: u64,
    /// The git blob id (SHA-1 of `blob <len>\0<content>`): what the hub calls the file's etag
    /// when it is not stored in LFS.
    pub git_oid: String,
    /// SHA-256 of the content for files stored in LFS (every weight file): their etag, and the
    /// name of their blob in the cache.
    pub lfs_sha256: Option<String>,
}

/// `RepoFile` as stored, before its hashes are checked.
#[derive(Deserialize)]
struct StoredRepoFile {
    path: RepoPath,
    size_bytes: u64,
    git_oid: String,
    lfs_sha256: Option<String>,
}

impl TryFrom<StoredRepoFile> for RepoFile {
    type Error = String;
    fn try_from(stored: StoredRepoFile) -> Result<Self, Self::Error> {
        let lfs_ok = stored
            .lfs_sha256
            .as_deref()
            .is_none_or(|h| is_hex_digest(h, 64));
        if !is_hex_digest(&stored.git_oid, 40) || !lfs_ok {
            return Err(format!(
                "'{}' has a hash that is not a hex digest",
                stored.path
            ));
        }
        Ok(RepoFile {
            path: stored.path,
            size_bytes: stored.size_bytes,
            git_oid: stored.git_oid,
            lfs_sha256: stored.lfs_sha256,
        })
    }
}

impl RepoFile {
    /// The name of this file's blob in the cache, as `huggingface_hub` names it: the SHA-256
    /// for LFS files, the git blob id otherwise.
    pub fn blob_name(&self) -> &str {
        self.lfs_sha256.as_deref().unwrap_or(&self.git_oid)
    }
}

/// A hash as the hub writes it: lowercase hex of the given length.
pub fn is_hex_digest(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_ids_are_owner_slash_name() {
        for good in ["unsloth/GLM-5.2-GGUF", "a/b", "Qwen/Qwen3_8B.v2"] {
            assert!(RepoId::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "noslash",
            "a/b/c",
            "../x",
            "a/..",
            "a/.hidden",
            "a/b.",
            "-a/b",
            "a /b",
            "a/b\n",
            "a/b?x=1",
            "a/b#f",
        ] {
            assert!(RepoId::parse(bad).is_err(), "{bad:?}");
        }
        let id = RepoId::parse("unsloth/GLM-5.2-GGUF").expect("valid id");
        assert_eq!(id.cache_folder_name(), "models--unsloth--GLM-5.2-GGUF");
    }

    #[test]
    fn listed_paths_cannot_leave_the_model_folder() {
        for good in [
            "model.gguf",
            "UD-IQ2_M/GLM-00001-of-00006.gguf",
            "a b/ü.json",
            "..x/y..z",
        ] {
            assert!(RepoPath::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "a\\..\\b",
            "a\u{0}b",
            "a\nb",
        ] {
            let error = RepoPath::parse(bad).expect_err(bad);
            assert!(error.to_string().contains("left out"), "{error}");
        }
        assert!(RepoPath::parse(&"x".repeat(256)).is_err());
        assert!(RepoPath::parse(&format!("{}/f", "d/".repeat(600))).is_err());
        let path = RepoPath::parse("UD-IQ2_M/a.gguf").expect("valid path");
        assert_eq!(
            (path.folder(), path.file_name(), path.depth()),
            ("UD-IQ2_M", "a.gguf", 1)
        );
    }

    #[test]
    fn commits_and_revisions() {
        let sha = "0123456789abcdef0123456789ABCDEF01234567";
        assert_eq!(
            CommitId::parse(sha).expect("commit").as_str(),
            sha.to_lowercase()
        );
        assert!(CommitId::parse("main").is_err());
        assert!(Revision::parse("main")
            .expect("branch")
            .as_commit()
            .is_none());
        assert!(Revision::parse(sha).expect("commit").as_commit().is_some());
        assert!(Revision::parse("refs/pr/3").is_ok());
        assert!(Revision::parse("../../etc").is_err());
        assert!(is_hex_digest(&"a".repeat(64), 64) && !is_hex_digest(&"A".repeat(64), 64));
    }

    #[test]
    fn a_stored_file_is_read_back_only_with_hashes_that_cannot_name_another_file() {
        let good = RepoFile {
            path: RepoPath::parse("a.gguf").expect("path"),
            size_bytes: 1,
            git_oid: "1".repeat(40),
            lfs_sha256: Some("2".repeat(64)),
        };
        let json = serde_json::to_string(&good).expect("json");
        assert_eq!(serde_json::from_str::<RepoFile>(&json).expect("back"), good);
        let hostile = json.replace(&"2".repeat(64), "../../../../etc/passwd");
        assert!(serde_json::from_str::<RepoFile>(&hostile).is_err());
    }
}
