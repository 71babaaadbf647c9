//! Quality as KL divergence: how far a candidate's next-token distribution (a quantized file, a
//! quantized KV cache, another engine option) strays from a reference's over the same text,
//! measured by llama.cpp's own `llama-perplexity` — first `--kl-divergence-base` on the reference
//! to record its log-probabilities ([`logits_file`]), then `--kl-divergence` on the candidate.
//! This module builds the commands ([`flags`]), runs them ([`run`]) and reads their printout
//! ([`printout`]); the daemon finds the binaries, the files and the corpus.

pub mod flags;
pub mod logits_file;
pub mod printout;
pub mod run;

use serde::{Deserialize, Serialize};

pub use printout::KldStats;

/// A KL-divergence run's spec: the recorded reference it is measured against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KldSpec {
    /// The reference's id (`rigdeck quality references` lists them).
    pub reference: String,
}

impl KldSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.reference.trim().is_empty() {
            return Err("a KL-divergence run needs a reference: record one with `rigdeck quality reference MODEL`, then pass its id".into());
        }
        Ok(())
    }
}

/// A finished run's figures with what they were measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KldResult {
    pub reference: String,
    #[serde(flatten)]
    pub stats: KldStats,
    pub scored_tokens: u64,
    pub context: u32,
    pub chunks: u32,
    pub wall_s: f64,
    /// The figures in plain words.
    pub summary: String,
}

/// "top token unchanged on 99.1 % of tokens; mean KLD 0.0012 ± 0.0001 …".
pub fn plain_words(s: &KldStats) -> String {
    let verdict = if s.mean <= 2.0 * s.mean_unc.max(1e-4) {
        "indistinguishable from the reference on this text"
    } else if s.mean < 0.01 {
        "very close to the reference"
    } else if s.mean < 0.05 {
        "close to the reference"
    } else if s.mean < 0.2 {
        "noticeably different from the reference"
    } else {
        "far from the reference"
    };
    format!(
        "top token unchanged on {:.1} % of tokens; mean KLD {:.4} ± {:.4} (99th percentile {:.3}); perplexity ×{:.3}: {verdict}",
        100.0 * s.same_top,
        s.mean,
        s.mean_unc,
        s.p99,
        s.ppl_ratio
    )
}
