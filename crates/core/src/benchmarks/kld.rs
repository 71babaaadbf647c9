//! A KL-divergence run for a launch profile: the profile's model file with its placement and its
//! numerics flags (KV cache types, flash attention, ik_llama.cpp's options) measured by the
//! build's `llama-perplexity` against a recorded reference, after the checks that would
//! otherwise give a meaningless figure: the same llama.cpp version as the reference's, the same
//! vocabulary, a whole logits file, and the model not loaded twice.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::{llama_tool, Target};
use crate::bench::kld::{flags, KldSpec};
use crate::launch::Instances;
use crate::profiles::profile;
use crate::quality::recording::model_facts;
use crate::quality::references::{Reference, References};
use crate::store::Store;

/// What runs, and what it is measured against.
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dropped: Vec<String>,
    pub reference: Reference,
    pub context: u32,
    pub chunks: u32,
    pub scored_tokens: u64,
    pub logits: PathBuf,
}

impl Prepared {
    /// Stored in the run's context.
    pub fn context(&self) -> Value {
        let r = &self.reference;
        json!({
            "command_line": profile::display_command_line(&self.argv),
            "dropped": self.dropped,
            "reference": {
                "id": r.id,
                "model_path": r.model_path,
                "model_name": r.model_name,
                "profile": r.profile,
                "corpus": r.corpus_label,
                "corpus_sha256": r.corpus_sha256,
                "context": self.context,
                "chunks": self.chunks,
                "engine": r.engine,
            },
        })
    }
}

/// The llama-perplexity command for the profile a target names; the message names the fix.
pub async fn prepare(
    profiles: &Store,
    instances: Option<&Instances>,
    references: &References,
    target: &Target,
    spec: &KldSpec,
) -> Result<Prepared, String> {
    let (reference, logits, header) = references
        .logits(&spec.reference)
        .map_err(|e| e.to_string())?;
    let t = llama_tool::resolve(profiles, instances, target, "llama-perplexity").await?;
    let (name, build) = (&t.name, &t.build);
    same_engine(&reference, name, &crate::quality::engine_label(build))?;
    let model = t.profile.model.clone();
    let facts = tokio::task::spawn_blocking(move || model_facts(&model))
        .await
        .map_err(|e| e.to_string())??;
    if facts.n_vocab != header.n_vocab {
        return Err(format!(
            "profile '{name}' runs {} with a {}-token vocabulary and reference '{}' ({}) has {}: a KL divergence compares files of the same model",
            t.profile.model.display(),
            facts.n_vocab,
            reference.id,
            reference.model_name,
            header.n_vocab
        ));
    }
    let (kept, dropped) = flags::perplexity_flags(&t.server_args, header.context);
    Ok(Prepared {
        argv: flags::candidate_argv(&t.program, &kept, header.context, &logits),
        env: t.profile.env.into_iter().collect(),
        dropped,
        context: header.context,
        chunks: header.chunks,
        scored_tokens: header.scored_tokens(),
        logits,
        reference,
    })
}

/// A candidate is measured only by the engine and version that recorded its reference.
fn same_engine(reference: &Reference, profile: &str, engine: &str) -> Result<(), String> {
    if engine == reference.engine {
        return Ok(());
    }
    Err(format!(
        "reference '{}' was recorded with {}, and profile '{profile}' runs {engine}: figures from two llama.cpp versions do not compare; record the reference again with this build",
        reference.id, reference.engine
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_from_another_llama_cpp_version_is_refused_naming_both() {
        let mut reference = crate::quality::references::sample("r1");
        reference.engine = "llama.cpp b6000 (cpu)".into();
        assert!(same_engine(&reference, "q4", "llama.cpp b6000 (cpu)").is_ok());
        let err = same_engine(&reference, "q4", "llama.cpp b7000 (cuda)").unwrap_err();
        assert!(
            err.contains("b6000")
                && err.contains("b7000")
                && err.contains("record the reference again"),
            "{err}"
        );
    }
}
