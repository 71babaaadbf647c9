//! Which file to record as a profile's reference: the library's files of the same model
//! (architecture, layers, width, vocabulary and parameter count) ranked by precision, BF16/F16
//! then Q8_0 first; and, for a model that came from a Hugging Face repository, that repository to
//! download a higher-precision file from when the library has none.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::library::ModelEntry;
use rigdeck_gguf::ModelSummary;

/// Bits per weight from which a file counts as a good reference (Q8_0 is 8.5).
const REFERENCE_BITS: f64 = 8.0;

/// One file the reference could be.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub path: PathBuf,
    pub name: String,
    pub file_type: Option<String>,
    pub bits_per_weight: Option<f64>,
    pub size_bytes: u64,
    /// Precise enough to stand for the original weights (8 bits per weight or more).
    pub good_reference: bool,
}

/// The same model as `target`: what its header says about its shape and vocabulary.
fn same_model(a: &ModelSummary, b: &ModelSummary) -> bool {
    let near = |x: u64, y: u64| x.abs_diff(y) as f64 <= 0.01 * x.max(y) as f64;
    a.architecture.is_some()
        && a.architecture == b.architecture
        && a.layers == b.layers
        && a.embedding_length == b.embedding_length
        && a.vocab_size == b.vocab_size
        && near(a.parameter_count, b.parameter_count)
}

/// Files of the same model as `target` in the library, highest precision first.
pub fn reference_candidates(entries: &[ModelEntry], target: &ModelSummary) -> Vec<Candidate> {
    let mut found: Vec<Candidate> = entries
        .iter()
        .filter(|e| e.problem.is_none())
        .filter_map(|e| Some((e, e.gguf.as_ref()?)))
        .filter(|(_, summary)| same_model(summary, target))
        .map(|(e, summary)| Candidate {
            path: e.path.clone(),
            name: e.name.clone(),
            file_type: summary.file_type.as_ref().map(|t| t.label.clone()),
            bits_per_weight: summary.bits_per_weight,
            size_bytes: e.size_bytes,
            good_reference: summary.bits_per_weight.is_some_and(|b| b >= REFERENCE_BITS),
        })
        .collect();
    found.sort_by(|a, b| {
        let bits = |c: &Candidate| c.bits_per_weight.unwrap_or(0.0);
        bits(b).total_cmp(&bits(a))
    });
    found
}

/// The Hugging Face repository a file in the shared cache came from
/// (`…/models--owner--name/snapshots/…`).
pub fn hub_repository(model: &Path) -> Option<String> {
    model.ancestors().find_map(|dir| {
        let name = dir.file_name()?.to_str()?;
        let id = name.strip_prefix("models--")?;
        let (owner, repo) = id.split_once("--")?;
        Some(format!("{owner}/{repo}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(bits: f64, params: u64, vocab: u64) -> ModelSummary {
        let mut s = ModelSummary {
            architecture: Some("gemma3".into()),
            parameter_count: params,
            bits_per_weight: Some(bits),
            layers: Some(18),
            embedding_length: Some(640),
            vocab_size: Some(vocab),
            ..ModelSummary::default()
        };
        s.file_type = None;
        s
    }

    fn entry(name: &str, s: ModelSummary) -> ModelEntry {
        ModelEntry {
            path: PathBuf::from(format!("/m/{name}.gguf")),
            name: name.into(),
            format: crate::library::ModelFormat::Gguf,
            folder: PathBuf::from("/m"),
            files: Vec::new(),
            size_bytes: 1,
            gguf: Some(s),
            safetensors: None,
            problem: None,
            ollama: None,
        }
    }

    #[test]
    fn files_of_the_same_model_come_highest_precision_first() {
        let target = summary(4.8, 268_098_176, 262_144);
        let entries = vec![
            entry("q4", summary(4.8, 268_098_176, 262_144)),
            entry("f16", summary(16.0, 268_098_176, 262_144)),
            entry("q8", summary(8.5, 268_098_176, 262_144)),
            entry("other-vocab", summary(16.0, 268_098_176, 32_000)),
            entry("bigger", summary(16.0, 1_000_000_000, 262_144)),
        ];
        let found = reference_candidates(&entries, &target);
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["f16", "q8", "q4"]);
        assert!(found[1].good_reference && !found[2].good_reference);
    }

    #[test]
    fn a_file_in_the_hub_cache_names_its_repository() {
        let p = Path::new("/h/models--unsloth--gemma-3-270m-it-GGUF/snapshots/abc/x-Q4_K_M.gguf");
        assert_eq!(
            hub_repository(p).as_deref(),
            Some("unsloth/gemma-3-270m-it-GGUF")
        );
        assert_eq!(hub_repository(Path::new("/m/x.gguf")), None);
    }
}
