//! Recorded references: a model's log-probabilities over a corpus, kept per (model file, corpus,
//! window length, windows) as `<quality dir>/references/<id>/logits.bin` with what it was recorded
//! from in `reference.json` beside it. A recording writes `logits.partial` and renames it only
//! once the file is exactly as long as its header says, so a half file is never taken as whole; a
//! recording the daemon did not see end is discarded at the next start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::corpus::CorpusSpec;
use crate::bench::kld::logits_file::{self, LogitsHeader};

const RECORD_FILE: &str = "reference.json";
const LOGITS_FILE: &str = "logits.bin";
const PARTIAL_FILE: &str = "logits.partial";

/// Where a reference stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceState {
    Recording,
    Ready,
    Failed,
}

/// How far a recording is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecordingProgress {
    pub fraction: f64,
    pub eta_s: Option<f64>,
}

/// One reference, as listed and as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub id: String,
    pub state: ReferenceState,
    pub error: Option<String>,
    pub model_path: PathBuf,
    pub model_name: String,
    pub model_bytes: u64,
    /// The launch profile whose placement and flags it ran with, if it came from one.
    pub profile: Option<String>,
    pub corpus: CorpusSpec,
    pub corpus_label: String,
    pub corpus_sha256: String,
    pub context: u32,
    pub chunks: Option<u32>,
    pub scored_tokens: Option<u64>,
    /// The corpus's tokens with this model's vocabulary.
    pub corpus_tokens: Option<u64>,
    pub n_vocab: Option<u32>,
    /// On disk once ready; the expected size while recording.
    pub bytes: u64,
    /// The llama.cpp build that recorded it (`llama.cpp 0c1e570 (cpu)`).
    pub engine: String,
    pub engine_build_id: i64,
    pub created_at_ms: i64,
    pub wall_s: Option<f64>,
    #[serde(default)]
    pub progress: Option<RecordingProgress>,
}

impl Reference {
    /// The same recording: same file, corpus text, windows.
    pub fn same_recording(&self, other: &Reference) -> bool {
        self.model_path == other.model_path
            && self.model_bytes == other.model_bytes
            && self.corpus_sha256 == other.corpus_sha256
            && self.context == other.context
            && self.chunks == other.chunks
            && self.engine_build_id == other.engine_build_id
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("no reference with id '{0}': `rigdeck quality references` lists them")]
    Unknown(String),
    #[error("reference '{id}' is {state}: {what}")]
    NotReady {
        id: String,
        state: &'static str,
        what: String,
    },
    #[error(transparent)]
    Logits(#[from] logits_file::LogitsFileError),
    #[error(
        "reference '{id}' does not match its logits file: {reason}; delete it and record it again"
    )]
    Mismatch { id: String, reason: String },
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The references on disk, with the cancel switch of each recording.
pub struct References {
    dir: PathBuf,
    entries: Mutex<BTreeMap<String, Reference>>,
    recordings: Mutex<BTreeMap<String, watch::Sender<bool>>>,
}

impl References {
    /// Reads `<quality dir>/references`; a recording left by a daemon that stopped is discarded
    /// (its partial file deleted) and shown as failed.
    pub fn open(quality_dir: &Path) -> Self {
        let dir = quality_dir.join("references");
        let mut entries = BTreeMap::new();
        for folder in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Some(mut reference) = read_record(&folder.path()) else {
                continue;
            };
            if reference.state == ReferenceState::Recording {
                let _ = std::fs::remove_file(folder.path().join(PARTIAL_FILE));
                reference.state = ReferenceState::Failed;
                reference.progress = None;
                reference.error = Some(
                    "the daemon stopped while this was recording; the partial file was deleted: record it again".into(),
                );
                let _ = write_record(&folder.path(), &reference);
            }
            entries.insert(reference.id.clone(), reference);
        }
        Self {
            dir,
            entries: Mutex::new(entries),
            recordings: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn list(&self) -> Vec<Reference> {
        let mut all: Vec<Reference> = lock(&self.entries).values().cloned().collect();
        all.sort_by_key(|r| std::cmp::Reverse(r.created_at_ms));
        all
    }

    pub fn get(&self, id: &str) -> Result<Reference, ReferenceError> {
        lock(&self.entries)
            .get(id)
            .cloned()
            .ok_or_else(|| ReferenceError::Unknown(id.to_owned()))
    }

    /// Bytes the recorded and recording references take (or will).
    pub fn used_bytes(&self) -> u64 {
        lock(&self.entries)
            .values()
            .filter(|r| r.state != ReferenceState::Failed)
            .map(|r| r.bytes)
            .sum()
    }

    /// A ready reference recorded the same way, to reuse instead of recording again.
    pub fn existing(&self, wanted: &Reference) -> Option<Reference> {
        lock(&self.entries)
            .values()
            .find(|r| r.state == ReferenceState::Ready && r.same_recording(wanted))
            .cloned()
    }

    /// Stores a new recording and returns where its logits go and its cancel switch.
    pub fn begin(
        &self,
        reference: &Reference,
    ) -> Result<(PathBuf, watch::Receiver<bool>), ReferenceError> {
        let folder = self.dir.join(&reference.id);
        std::fs::create_dir_all(&folder).map_err(|source| ReferenceError::Io {
            what: "create the folder",
            path: folder.clone(),
            source,
        })?;
        write_record(&folder, reference)?;
        lock(&self.entries).insert(reference.id.clone(), reference.clone());
        let (tx, rx) = watch::channel(false);
        lock(&self.recordings).insert(reference.id.clone(), tx);
        Ok((folder.join(PARTIAL_FILE), rx))
    }

    /// Changes a reference in memory (progress) without writing it.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Reference)) -> Option<Reference> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(id)?;
        change(entry);
        Some(entry.clone())
    }

    /// Ends a recording: the partial file checked and renamed into place, or deleted with the
    /// error kept. Returns the reference as stored.
    pub fn finish(
        &self,
        id: &str,
        outcome: Result<f64, String>,
    ) -> Result<Reference, ReferenceError> {
        lock(&self.recordings).remove(id);
        let folder = self.dir.join(id);
        let partial = folder.join(PARTIAL_FILE);
        let checked = outcome.and_then(|wall_s| {
            let header = logits_file::check(&partial).map_err(|e| e.to_string())?;
            std::fs::rename(&partial, folder.join(LOGITS_FILE))
                .map_err(|e| format!("cannot keep the logits file: {e}"))?;
            Ok((wall_s, header))
        });
        let reference = self
            .update(id, |r| {
                r.progress = None;
                match &checked {
                    Ok((wall_s, header)) => {
                        r.state = ReferenceState::Ready;
                        r.wall_s = Some(*wall_s);
                        r.bytes = header.file_bytes();
                        r.n_vocab = Some(header.n_vocab);
                        r.chunks = Some(header.chunks);
                        r.scored_tokens = Some(header.scored_tokens());
                    }
                    Err(why) => {
                        r.state = ReferenceState::Failed;
                        r.error = Some(why.clone());
                    }
                }
            })
            .ok_or_else(|| ReferenceError::Unknown(id.to_owned()))?;
        if checked.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        write_record(&folder, &reference)?;
        Ok(reference)
    }

    /// Stops a recording (if one runs) and deletes the reference with its files.
    pub fn delete(&self, id: &str) -> Result<(), ReferenceError> {
        if let Some(cancel) = lock(&self.recordings).remove(id) {
            let _ = cancel.send(true);
        }
        lock(&self.entries)
            .remove(id)
            .ok_or_else(|| ReferenceError::Unknown(id.to_owned()))?;
        let folder = self.dir.join(id);
        std::fs::remove_dir_all(&folder).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(ReferenceError::Io {
                what: "delete",
                path: folder,
                source: e,
            }),
        })
    }

    /// The logits file of a ready reference, checked against what was recorded.
    pub fn logits(&self, id: &str) -> Result<(Reference, PathBuf, LogitsHeader), ReferenceError> {
        let reference = self.get(id)?;
        if reference.state != ReferenceState::Ready {
            let (state, what) = match reference.state {
                ReferenceState::Recording => {
                    ("still recording", "wait for it to finish".to_owned())
                }
                _ => (
                    "failed",
                    format!(
                        "{}; delete it and record it again",
                        reference.error.as_deref().unwrap_or("it did not finish")
                    ),
                ),
            };
            return Err(ReferenceError::NotReady {
                id: id.to_owned(),
                state,
                what,
            });
        }
        let path = self.dir.join(id).join(LOGITS_FILE);
        let header = logits_file::check(&path)?;
        if Some(header.n_vocab) != reference.n_vocab || Some(header.chunks) != reference.chunks {
            return Err(ReferenceError::Mismatch {
                id: id.to_owned(),
                reason: format!(
                    "the file holds {} windows over a {}-token vocabulary",
                    header.chunks, header.n_vocab
                ),
            });
        }
        Ok((reference, path, header))
    }
}

fn read_record(folder: &Path) -> Option<Reference> {
    let text = std::fs::read(folder.join(RECORD_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn write_record(folder: &Path, reference: &Reference) -> Result<(), ReferenceError> {
    let path = folder.join(RECORD_FILE);
    let temporary = folder.join(".reference.json.tmp");
    let bytes = serde_json::to_vec_pretty(reference).unwrap_or_default();
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, &path))
        .map_err(|source| ReferenceError::Io {
            what: "write",
            path,
            source,
        })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A recording reference for tests: 2 windows of 64 tokens over a 10-token vocabulary.
#[cfg(test)]
pub(crate) fn sample(id: &str) -> Reference {
    Reference {
        id: id.into(),
        state: ReferenceState::Recording,
        error: None,
        model_path: "/m/f16.gguf".into(),
        model_name: "f16.gguf".into(),
        model_bytes: 1,
        profile: None,
        corpus: CorpusSpec::Builtin,
        corpus_label: "Built-in".into(),
        corpus_sha256: "ab".into(),
        context: 64,
        chunks: Some(2),
        scored_tokens: None,
        corpus_tokens: Some(200),
        n_vocab: Some(10),
        bytes: 100,
        engine: "llama.cpp x (cpu)".into(),
        engine_build_id: 1,
        created_at_ms: 1,
        wall_s: None,
        progress: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_the_daemon_did_not_see_end_is_discarded_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let references = References::open(dir.path());
        let (partial, _cancel) = references.begin(&sample("r1")).unwrap();
        std::fs::write(&partial, b"_logits_ half").unwrap();
        drop(references);

        let reopened = References::open(dir.path());
        let r = reopened.get("r1").unwrap();
        assert_eq!(r.state, ReferenceState::Failed);
        assert!(r.error.unwrap().contains("record it again"));
        assert!(!partial.exists(), "the partial file is deleted");
        assert_eq!(reopened.used_bytes(), 0);
        assert!(matches!(
            reopened.logits("r1"),
            Err(ReferenceError::NotReady { .. })
        ));
    }

    #[test]
    fn a_partial_file_cut_short_ends_failed_and_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let references = References::open(dir.path());
        let (partial, _cancel) = references.begin(&sample("r2")).unwrap();
        std::fs::write(&partial, b"_logits_\x40\0\0\0\x0a\0\0\0\x02\0\0\0").unwrap();
        let r = references.finish("r2", Ok(1.0)).unwrap();
        assert_eq!(r.state, ReferenceState::Failed);
        assert!(r.error.unwrap().contains("cut short"));
        assert!(!partial.exists());
        assert!(!dir.path().join("references/r2/logits.bin").exists());
    }
}
