//! The reference logits file `llama-perplexity --kl-divergence-base` writes: `_logits_`, the
//! window length, the vocabulary size and the window count (32-bit each), every window's tokens,
//! then for each window the log-probabilities of its scored second half, 16 bits per entry in rows
//! of `2·⌈vocab/2⌉ + 4` entries. Its header says exactly how long a whole file is, so a file cut
//! short (a run killed midway, a full disk) is told apart from a whole one.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 8] = b"_logits_";
const HEADER_BYTES: u64 = 8 + 4 + 4 + 4;

/// What a logits file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogitsHeader {
    pub context: u32,
    pub n_vocab: u32,
    pub chunks: u32,
}

impl LogitsHeader {
    /// Tokens scored per window: llama-perplexity scores the second half of each.
    pub fn scored_per_chunk(context: u32) -> u64 {
        u64::from(context.saturating_sub(1 + context / 2))
    }

    pub fn scored_tokens(&self) -> u64 {
        Self::scored_per_chunk(self.context) * u64::from(self.chunks)
    }

    /// The size of the whole file.
    pub fn file_bytes(&self) -> u64 {
        expected_bytes(self.context, self.n_vocab, self.chunks)
    }
}

/// The size of a logits file for these windows and this vocabulary.
pub fn expected_bytes(context: u32, n_vocab: u32, chunks: u32) -> u64 {
    let row = 2 * u64::from(n_vocab).div_ceil(2) + 4;
    let tokens = u64::from(context) * u64::from(chunks);
    HEADER_BYTES
        + 4 * tokens
        + 2 * row * LogitsHeader::scored_per_chunk(context) * u64::from(chunks)
}

#[derive(Debug, thiserror::Error)]
pub enum LogitsFileError {
    #[error("cannot read the reference logits file {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path} is not a llama-perplexity logits file (it does not start with `_logits_`): record the reference again")]
    NotLogits { path: String },
    #[error("the reference logits file {path} is cut short: {actual} bytes of the {expected} its header promises (a run stopped midway, or a full disk): delete it and record the reference again")]
    Truncated {
        path: String,
        actual: u64,
        expected: u64,
    },
    #[error("the reference logits file {path} is {actual} bytes, more than the {expected} its header promises: it was not written by this llama-perplexity; record the reference again")]
    Oversized {
        path: String,
        actual: u64,
        expected: u64,
    },
}

/// Reads the header and checks the file is exactly as long as it says.
pub fn check(path: &Path) -> Result<LogitsHeader, LogitsFileError> {
    let shown = path.display().to_string();
    let io = |e: std::io::Error| LogitsFileError::Io {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let mut file = File::open(path).map_err(io)?;
    let actual = file.metadata().map_err(io)?.len();
    let mut head = [0u8; HEADER_BYTES as usize];
    if actual < HEADER_BYTES {
        return Err(LogitsFileError::Truncated {
            path: shown,
            actual,
            expected: HEADER_BYTES,
        });
    }
    file.read_exact(&mut head).map_err(io)?;
    if &head[..8] != MAGIC {
        return Err(LogitsFileError::NotLogits { path: shown });
    }
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let header = LogitsHeader {
        context: word(8),
        n_vocab: word(12),
        chunks: word(16),
    };
    let expected = header.file_bytes();
    match actual.cmp(&expected) {
        std::cmp::Ordering::Less => Err(LogitsFileError::Truncated {
            path: shown,
            actual,
            expected,
        }),
        std::cmp::Ordering::Greater => Err(LogitsFileError::Oversized {
            path: shown,
            actual,
            expected,
        }),
        std::cmp::Ordering::Equal => Ok(header),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, header: LogitsHeader, cut: u64) -> std::path::PathBuf {
        let path = dir.join("ref.logits");
        let mut bytes = MAGIC.to_vec();
        for w in [header.context, header.n_vocab, header.chunks] {
            bytes.extend(w.to_le_bytes());
        }
        bytes.resize((header.file_bytes() - cut) as usize, 7);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn the_size_matches_what_llama_perplexity_wrote_for_gemma() {
        // Gemma 3 270M (262 144 tokens), 4 windows of 512: 534 790 132 bytes on disk.
        assert_eq!(expected_bytes(512, 262_144, 4), 534_790_132);
        assert_eq!(expected_bytes(512, 262_144, 2), 267_395_076);
    }

    #[test]
    fn a_whole_file_is_read_and_a_cut_one_refused_with_both_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let header = LogitsHeader {
            context: 64,
            n_vocab: 1001,
            chunks: 3,
        };
        assert_eq!(check(&write(dir.path(), header, 0)).unwrap(), header);
        assert_eq!(header.scored_tokens(), 93);
        let err = check(&write(dir.path(), header, 10))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cut short") && err.contains(&header.file_bytes().to_string()),
            "{err}"
        );
    }

    #[test]
    fn another_file_is_not_taken_for_logits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        std::fs::write(&path, b"GGUF\x03\0\0\0 and more than twenty bytes").unwrap();
        assert!(matches!(
            check(&path),
            Err(LogitsFileError::NotLogits { .. })
        ));
        std::fs::write(&path, b"_log").unwrap();
        assert!(matches!(
            check(&path),
            Err(LogitsFileError::Truncated { .. })
        ));
    }
}
