//! Continuing a file where the last run stopped. The partial file is always a contiguous
//! prefix (ranges arrive out of order but are written in order), and the journal beside it
//! holds the hash state of the first `length` bytes, so a resume costs no re-read. A journal
//! that is missing or disagrees with the file (a crash between the two writes) falls back to
//! hashing the prefix on disk once.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::sha::{ResumableSha256, Sha256Checkpoint};
use crate::cache::FilePaths;
use crate::repo::RepoFile;

/// The journal's content.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Journal {
    /// The blob this partial file becomes (its SHA-256).
    pub blob: String,
    pub size: u64,
    pub hash: Sha256Checkpoint,
}

impl Journal {
    pub fn load(path: &Path) -> Option<Journal> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Written beside and renamed over the old one, so a crash leaves one or the other.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let staged = path.with_extension("json.new");
        std::fs::write(&staged, serde_json::to_vec(self).map_err(io::Error::other)?)?;
        std::fs::rename(&staged, path)
    }
}

/// What checks the received bytes: SHA-256 for LFS files (resumable), the git blob id for the
/// small files stored in git itself (always fetched whole).
pub enum ContentHash {
    Sha256(ResumableSha256),
    GitBlob(sha1::Sha1),
}

impl ContentHash {
    pub fn new(file: &RepoFile) -> ContentHash {
        match file.lfs_sha256 {
            Some(_) => ContentHash::Sha256(ResumableSha256::default()),
            None => {
                use sha1::Digest;
                let mut hash = sha1::Sha1::new();
                hash.update(format!("blob {}\0", file.size_bytes).as_bytes());
                ContentHash::GitBlob(hash)
            }
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            ContentHash::Sha256(hash) => hash.update(data),
            ContentHash::GitBlob(hash) => sha1::Digest::update(hash, data),
        }
    }

    pub fn hex_digest(&self) -> String {
        match self {
            ContentHash::Sha256(hash) => hash.hex_digest(),
            ContentHash::GitBlob(hash) => sha1::Digest::finalize(hash.clone())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }

    /// The journal for the bytes hashed so far (none for git blobs, which restart).
    pub fn journal(&self, file: &RepoFile) -> Option<Journal> {
        match self {
            ContentHash::Sha256(hash) => Some(Journal {
                blob: file.blob_name().to_owned(),
                size: file.size_bytes,
                hash: hash.checkpoint(),
            }),
            ContentHash::GitBlob(_) => None,
        }
    }
}

/// The partial file opened for appending, the hash of what it holds, and its length.
pub struct Resumed {
    pub file: File,
    pub hash: ContentHash,
    pub offset: u64,
}

/// Opens (or creates) the partial file and finds where to continue.
pub fn open_partial(paths: &FilePaths, file: &RepoFile) -> io::Result<Resumed> {
    if let Some(parent) = paths.partial.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut partial = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&paths.partial)?;
    let on_disk = partial.metadata()?.len();
    let mut hash = ContentHash::new(file);
    let mut offset = 0;
    if let ContentHash::Sha256(sha) = &mut hash {
        let journal = Journal::load(&paths.journal)
            .filter(|j| j.blob == file.blob_name() && j.size == file.size_bytes);
        let restored = journal
            .filter(|j| j.hash.length <= on_disk)
            .and_then(|j| ResumableSha256::restore(&j.hash));
        if let Some(restored) = restored {
            offset = restored.length();
            *sha = restored;
        } else if on_disk > 0 && on_disk <= file.size_bytes {
            rehash_prefix(&mut partial, on_disk, sha)?;
            offset = on_disk;
        }
    }
    partial.set_len(offset)?;
    partial.seek(SeekFrom::Start(offset))?;
    Ok(Resumed {
        file: partial,
        hash,
        offset,
    })
}

/// Hashes the first `length` bytes of the partial file (the fallback without a journal).
fn rehash_prefix(partial: &mut File, length: u64, hash: &mut ResumableSha256) -> io::Result<()> {
    tracing::info!(
        bytes = length,
        "no usable resume journal; hashing the received part once"
    );
    partial.seek(SeekFrom::Start(0))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut reader = partial.take(length);
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            return Ok(());
        }
        hash.update(&buffer[..read]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Destination;
    use crate::repo::{CommitId, RepoId, RepoPath};
    use sha2::Digest;
    use std::io::Write;

    fn setup(content: &[u8]) -> (tempfile::TempDir, FilePaths, RepoFile) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sha: String = sha2::Sha256::digest(content)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let file = RepoFile {
            path: RepoPath::parse("m.gguf").expect("path"),
            size_bytes: content.len() as u64,
            git_oid: "0".repeat(40),
            lfs_sha256: Some(sha),
        };
        let dest = Destination::HubCache(dir.path().to_owned());
        let paths = dest.paths(
            &RepoId::parse("o/n").expect("repo"),
            &CommitId::parse(&"c".repeat(40)).expect("commit"),
            &file,
        );
        (dir, paths, file)
    }

    fn finish(mut resumed: Resumed, content: &[u8]) -> String {
        let rest = &content[resumed.offset as usize..];
        resumed.file.write_all(rest).expect("write");
        resumed.hash.update(rest);
        resumed.hash.hex_digest()
    }

    #[test]
    fn a_journal_resumes_without_reading_and_drops_bytes_written_after_it() {
        let content: Vec<u8> = (0..5000u32).map(|i| (i % 199) as u8).collect();
        let (_dir, paths, file) = setup(&content);
        let mut first = open_partial(&paths, &file).expect("open");
        first.file.write_all(&content[..3000]).expect("write");
        first.hash.update(&content[..3000]);
        first
            .hash
            .journal(&file)
            .expect("lfs")
            .save(&paths.journal)
            .expect("journal");
        // Bytes that reached the file after the last journal (a kill -9 in between).
        first.file.write_all(&content[3000..3500]).expect("write");
        drop(first);
        let resumed = open_partial(&paths, &file).expect("resume");
        assert_eq!(resumed.offset, 3000);
        assert_eq!(Some(finish(resumed, &content)), file.lfs_sha256);
    }

    #[test]
    fn without_a_journal_the_prefix_on_disk_is_hashed_once() {
        let content: Vec<u8> = (0..5000u32).map(|i| (i % 97) as u8).collect();
        let (_dir, paths, file) = setup(&content);
        std::fs::create_dir_all(paths.partial.parent().expect("blobs")).expect("mkdir");
        std::fs::write(&paths.partial, &content[..1234]).expect("partial");
        let resumed = open_partial(&paths, &file).expect("resume");
        assert_eq!(resumed.offset, 1234);
        assert_eq!(Some(finish(resumed, &content)), file.lfs_sha256);
    }

    #[test]
    fn a_journal_for_another_blob_or_longer_than_the_file_is_ignored() {
        let content = vec![7u8; 4096];
        let (_dir, paths, file) = setup(&content);
        std::fs::create_dir_all(paths.partial.parent().expect("blobs")).expect("mkdir");
        std::fs::write(&paths.partial, &content[..100]).expect("partial");
        let mut hash = ResumableSha256::default();
        hash.update(&content[..200]);
        let journal = Journal {
            blob: file.blob_name().to_owned(),
            size: file.size_bytes,
            hash: hash.checkpoint(),
        };
        journal.save(&paths.journal).expect("journal");
        let resumed = open_partial(&paths, &file).expect("resume");
        assert_eq!(
            resumed.offset, 100,
            "the file holds less than the journal claims"
        );
        assert_eq!(Some(finish(resumed, &content)), file.lfs_sha256);
    }
}
