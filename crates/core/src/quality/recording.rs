//! What a reference recording needs before it runs — the model's vocabulary and chat format, the
//! tools beside the engine build, the corpus's exact token count with that vocabulary (counted by
//! the build's own `llama-tokenize`), the windows and the file's size, room within the budget
//! and on the disk — and the recording itself, run in the background with its progress announced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::process::Command;
use tokio::sync::watch;

use super::corpus::{ChatFormat, CorpusText};
use super::references::{RecordingProgress, References};
use crate::bench::kld::logits_file;
use crate::bench::kld::printout::{self, KnownFailure};
use crate::bench::kld::run as perplexity;
use crate::events::{Event, EventBus};

/// What a model file says that a recording or a measurement needs.
pub struct ModelFacts {
    pub n_vocab: u32,
    pub chat: ChatFormat,
}

/// Reads the model's header (the first file of a split model holds the vocabulary).
pub fn model_facts(path: &Path) -> Result<ModelFacts, String> {
    let file = rigdeck_gguf::GgufFile::open(path)
        .map_err(|e| format!("cannot read the model {}: {e}", path.display()))?;
    let n_vocab = file
        .metadata
        .get_arr("tokenizer.ggml.tokens")
        .map(|a| a.len())
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "{} has no vocabulary (tokenizer.ggml.tokens): a KL divergence needs a model with its tokenizer",
                path.display()
            )
        })?;
    Ok(ModelFacts {
        n_vocab,
        chat: ChatFormat::from_metadata(&file.metadata),
    })
}

/// Token counts already made, by corpus text, model file (and its size) and tokenizer program:
/// an estimate asked again for another window length, or the recording after its estimate, does
/// not run llama-tokenize again.
#[derive(Default)]
pub struct TokenCounts(std::sync::Mutex<HashMap<(String, PathBuf, u64, PathBuf), u64>>);

impl TokenCounts {
    /// The corpus's tokens with the model's vocabulary, counted once.
    pub async fn count(
        &self,
        tokenize: &Path,
        model: &Path,
        corpus_file: &Path,
        corpus_sha256: &str,
    ) -> Result<u64, String> {
        let model_bytes = std::fs::metadata(model).map(|m| m.len()).unwrap_or(0);
        let key = (
            corpus_sha256.to_owned(),
            model.to_owned(),
            model_bytes,
            tokenize.to_owned(),
        );
        if let Some(tokens) = self.lock().get(&key) {
            return Ok(*tokens);
        }
        let tokens = count_tokens(tokenize, model, corpus_file).await?;
        self.lock().insert(key, tokens);
        Ok(tokens)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, PathBuf, u64, PathBuf), u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The corpus's tokens with the model's vocabulary (BOS included, as llama-perplexity counts).
async fn count_tokens(tokenize: &Path, model: &Path, corpus: &Path) -> Result<u64, String> {
    let output = Command::new(tokenize)
        .arg("-m")
        .arg(model)
        .arg("-f")
        .arg(corpus)
        .args(["--show-count", "--log-disable"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", tokenize.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total number of tokens:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| {
            format!(
                "llama-tokenize could not count the corpus's tokens ({}): {}",
                output.status,
                perplexity::last_lines(&String::from_utf8_lossy(&output.stderr), 5)
            )
        })
}

/// The windows a recording reads and the file it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Windows {
    pub corpus_tokens: u64,
    pub chunks: u32,
    pub scored_tokens: u64,
    pub bytes: u64,
}

/// Windows of `context` tokens over the corpus (all, or `chunks` of them). llama-perplexity needs
/// at least two windows' worth of text.
pub fn windows(
    label: &str,
    context: u32,
    n_vocab: u32,
    corpus_tokens: u64,
    chunks: Option<u32>,
) -> Result<Windows, String> {
    if context < 16 {
        return Err(format!(
            "a context of {context} tokens is too short to measure anything: use 512 or more (8192 for a KV cache comparison)"
        ));
    }
    let available = corpus_tokens / u64::from(context);
    if available < 2 {
        return Err(format!(
            "corpus '{label}' is {corpus_tokens} tokens with this model's vocabulary; a context of {context} needs at least {}: choose a context of at most {} or a longer corpus",
            2 * u64::from(context),
            corpus_tokens / 2
        ));
    }
    if chunks == Some(0) {
        return Err("chunks must be at least 1 (leave it out to use the whole corpus)".into());
    }
    let available = u32::try_from(available).unwrap_or(u32::MAX);
    let chunks = chunks.map_or(available, |c| c.min(available));
    Ok(Windows {
        corpus_tokens,
        chunks,
        scored_tokens: logits_file::LogitsHeader::scored_per_chunk(context) * u64::from(chunks),
        bytes: logits_file::expected_bytes(context, n_vocab, chunks),
    })
}

/// Why a file of `bytes` cannot be recorded now, with the numbers; `None` when it can.
pub fn space_problem(bytes: u64, used: u64, budget: u64, free_disk: Option<u64>) -> Option<String> {
    let gb = |b: u64| b as f64 / 1e9;
    if used + bytes > budget {
        return Some(format!(
            "this reference takes {:.2} GB and the references already take {:.2} GB of the {:.2} GB budget: delete one, record fewer windows, or raise the budget in Settings",
            gb(bytes),
            gb(used),
            gb(budget)
        ));
    }
    // A margin, so recording never fills the disk to the last byte.
    let margin = 1_000_000_000;
    match free_disk {
        Some(free) if bytes + margin > free => Some(format!(
            "this reference takes {:.2} GB and the disk holding Rigdeck's data has {:.2} GB free (1 GB is kept spare): free space or record fewer windows",
            gb(bytes),
            gb(free)
        )),
        _ => None,
    }
}

/// Free bytes on the disk that holds `path` (or its nearest existing parent).
pub fn free_disk_bytes(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    rigdeck_telemetry::host::statvfs_space(existing)
        .ok()
        .map(|(available, _)| available)
}

/// Writes the corpus text where llama-perplexity reads it: `<quality dir>/corpora/<sha256>.txt`.
pub fn write_corpus(quality_dir: &Path, corpus: &CorpusText) -> Result<PathBuf, String> {
    let dir = quality_dir.join("corpora");
    let path = dir.join(format!("{}.txt", corpus.sha256));
    if path.is_file() {
        return Ok(path);
    }
    let temporary = dir.join(format!(".{}.tmp", corpus.sha256));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&temporary, &corpus.text))
        .and_then(|()| std::fs::rename(&temporary, &path))
        .map_err(|e| format!("cannot write the corpus to {}: {e}", path.display()))?;
    Ok(path)
}

/// Runs a recording to its end: progress announced, the file checked and kept, or the failure
/// said in words the user can act on.
pub async fn record(
    references: Arc<References>,
    bus: EventBus,
    id: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cancel: watch::Receiver<bool>,
) {
    let announce = |reference: Option<super::references::Reference>| {
        if let Some(reference) = reference {
            bus.publish(Event::QualityReference(Arc::new(reference)));
        }
    };
    let mut last_step = -1.0;
    let ran = perplexity::run(&argv, &env, cancel, |p| {
        let fraction = p.fraction.unwrap_or(0.0);
        // Announced at each whole percent, not at every piece of output.
        if fraction - last_step >= 0.01 {
            last_step = fraction;
            announce(references.update(&id, |r| {
                r.progress = Some(RecordingProgress {
                    fraction,
                    eta_s: p.eta_s,
                })
            }));
        }
    })
    .await;
    let outcome = match ran {
        Ok(done) if done.success => Ok(done.wall_s),
        Ok(done) => Err(failure_words(&done)),
        Err(why) => Err(why),
    };
    match references.finish(&id, outcome) {
        Ok(reference) => announce(Some(reference)),
        Err(err) => tracing::warn!("reference {id}: {err}"),
    }
}

/// A failed llama-perplexity run in words: a known cause with its fix, else its last lines.
pub fn failure_words(done: &perplexity::Finished) -> String {
    let all = format!("{}\n{}", done.stdout, done.stderr);
    match printout::known_failure(&all) {
        Some(KnownFailure::CorpusTooShort { tokens, needed }) => format!(
            "the corpus is {tokens} tokens with this model; the context needs at least {}: choose a shorter context or a longer corpus",
            needed.map_or_else(|| "two windows".to_owned(), |n| n.to_string())
        ),
        Some(KnownFailure::Vocabulary(line)) => format!(
            "the model's vocabulary differs from the reference's ({line}): measure a file of the same model"
        ),
        None => format!(
            "llama-perplexity failed ({}): {}",
            done.status,
            perplexity::last_lines(&all, 8)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_need_two_contexts_of_text_and_size_the_file() {
        let w = windows("Built-in", 512, 262_144, 29_920, Some(4)).unwrap();
        assert_eq!((w.chunks, w.scored_tokens, w.bytes), (4, 1020, 534_790_132));
        assert_eq!(windows("b", 512, 262_144, 29_920, None).unwrap().chunks, 58);
        let err = windows("Built-in", 8192, 262_144, 12_000, None).unwrap_err();
        assert!(
            err.contains("needs at least 16384") && err.contains("at most 6000"),
            "{err}"
        );
        assert!(windows("b", 512, 100, 5000, Some(0)).is_err());
    }

    #[test]
    fn space_is_checked_against_the_budget_then_the_disk() {
        let gb = 1_000_000_000;
        assert!(space_problem(2 * gb, 19 * gb, 20 * gb, None)
            .is_some_and(|w| w.contains("20.00 GB budget")));
        assert!(space_problem(2 * gb, 0, 20 * gb, Some(2 * gb))
            .is_some_and(|w| w.contains("2.00 GB free")));
        assert_eq!(space_problem(2 * gb, 0, 20 * gb, Some(10 * gb)), None);
    }
}
