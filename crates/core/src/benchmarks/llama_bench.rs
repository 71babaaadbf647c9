//! llama.cpp's own `llama-bench` for a launch profile: the bundled binary beside the profile's
//! llama-server, the profile's flags translated to llama-bench's syntax (the ones a server alone
//! uses are listed as dropped), the profile's environment (`CUDA_VISIBLE_DEVICES` …), and pp/tg
//! tests at depth, stored with the run like a serving benchmark's steps.

use serde_json::{json, Value};

use super::{llama_tool, Target};
use crate::bench::llama_bench::{self, LlamaBenchSpec};
use crate::launch::Instances;
use crate::profiles::profile;
use crate::store::Store;

/// What runs: the argv, the environment, and the profile flags llama-bench has no use for.
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dropped: Vec<String>,
}

impl Prepared {
    /// Stored in the run's context.
    pub fn context(&self) -> Value {
        json!({
            "command_line": profile::display_command_line(&self.argv),
            "dropped": self.dropped,
        })
    }
}

/// The llama-bench command for the profile a target names; the message names the fix.
pub async fn prepare(
    profiles: &Store,
    instances: Option<&Instances>,
    target: &Target,
    spec: &LlamaBenchSpec,
) -> Result<Prepared, String> {
    let t = llama_tool::resolve(profiles, instances, target, "llama-bench").await?;
    // llama-bench takes no key; the flags it cannot take are listed in the report, masked.
    let (flags, dropped) = llama_bench::bench_flags(&t.server_args);
    Ok(Prepared {
        argv: llama_bench::argv(&t.program, &flags, spec),
        env: t.profile.env.into_iter().collect(),
        dropped,
    })
}
