//! A KL-divergence run for a launch profile: the profile's model file with its placement and its
//! numerics flags (KV cache types, flash attention, ik_llama.cpp's options) measured by the
//! build's `llama-perplexity` against a recorded reference, after the checks that would
//! otherwise give a meaningless figure: the same llama.cpp version as the reference's, the same
//! vocabulary, a whole logits file, and the model not loaded twice.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::Target;
use crate::bench::kld::{flags, KldSpec};
use crate::engines::EngineKind;
use crate::launch::Instances;
use crate::profiles::profile;
use crate::quality::recording::{self, model_facts};
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
    let name = match target {
        Target::Profile { name } | Target::Instance { name } => name,
        _ => return Err(
            "a KL divergence runs a profile's model file with its flags: pick a profile as the target"
                .into(),
        ),
    };
    let (reference, logits, header) = references
        .logits(&spec.reference)
        .map_err(|e| e.to_string())?;
    let profile = profiles
        .launch_profile(name)
        .await
        .map_err(|e| e.to_string())?;
    let build = profiles
        .engine_build(profile.engine_build_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "profile '{name}' uses engine build {}, which is not installed",
                profile.engine_build_id
            )
        })?;
    if !matches!(build.kind, EngineKind::LlamaCpp | EngineKind::IkLlamaCpp) {
        return Err(format!(
            "a KL divergence is measured by llama.cpp's llama-perplexity; profile '{name}' runs {}",
            build.kind
        ));
    }
    let engine = crate::quality::engine_label(&build);
    if engine != reference.engine {
        return Err(format!(
            "reference '{}' was recorded with {}, and profile '{name}' runs {engine}: figures from two llama.cpp versions do not compare; record the reference again with this build",
            reference.id, reference.engine
        ));
    }
    let tools = recording::tools_beside(&build.location, build.id)?;
    let model = profile.model.clone();
    let facts = tokio::task::spawn_blocking(move || model_facts(&model))
        .await
        .map_err(|e| e.to_string())??;
    if facts.n_vocab != header.n_vocab {
        return Err(format!(
            "profile '{name}' runs {} with a {}-token vocabulary and reference '{}' ({}) has {}: a KL divergence compares files of the same model",
            profile.model.display(),
            facts.n_vocab,
            reference.id,
            reference.model_name,
            header.n_vocab
        ));
    }
    if let Some((phase, _, _)) = instances.and_then(|i| i.phase_and_address(name)) {
        if super::is_up(&phase) {
            return Err(format!(
                "'{name}' is running: llama-perplexity loads the model itself, so the two would share the memory and the cores; stop the instance first"
            ));
        }
    }
    let server_argv = profile::argv(&profile, &build, 0, None).map_err(|e| e.to_string())?;
    let server_argv = profile::key_masked(&server_argv);
    let (kept, dropped) =
        flags::perplexity_flags(server_argv.get(1..).unwrap_or_default(), header.context);
    Ok(Prepared {
        argv: flags::candidate_argv(&tools.perplexity, &kept, header.context, &logits),
        env: profile.env.into_iter().collect(),
        dropped,
        context: header.context,
        chunks: header.chunks,
        scored_tokens: header.scored_tokens(),
        logits,
        reference,
    })
}
