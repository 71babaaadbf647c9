//! Quality measured as KL divergence against a reference: corpora, reference logits, runs.

pub mod candidates;
pub mod corpus;
pub mod recording;
pub mod references;

use crate::engines::registry::EngineBuild;

/// How a reference names the build that recorded it: `llama.cpp 0c1e570 (cpu)`. A measurement
/// compares with it only from the same engine and version.
pub fn engine_label(build: &EngineBuild) -> String {
    format!("{} {} ({})", build.kind, build.version, build.backend)
}
