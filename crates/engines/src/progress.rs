//! How far a build or an install has got: the steps, one progress report, and the listener that
//! hears them (the CLI prints, the daemon publishes). Fetching, building and pip all report here.

use serde::{Deserialize, Serialize};

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStep {
    Fetch,
    Verify,
    Extract,
    Configure,
    Compile,
    Done,
    Failed,
}

impl BuildStep {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStep::Fetch => "fetch",
            BuildStep::Verify => "verify",
            BuildStep::Extract => "extract",
            BuildStep::Configure => "configure",
            BuildStep::Compile => "compile",
            BuildStep::Done => "done",
            BuildStep::Failed => "failed",
        }
    }
}

impl std::fmt::Display for BuildStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One progress report of a build; published on the bus as `engine.build`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildProgress {
    pub build_id: String,
    pub step: BuildStep,
    /// Progress within the compile step (Ninja's `[N/M]`), 1.0 when done; `None` where unknown.
    pub fraction: Option<f64>,
    /// The latest output line, or what the step is doing.
    pub line: Option<String>,
}

/// A progress listener: the CLI prints, the server publishes on the event bus
/// (`EventBus::build_progress`): builds know nothing of events.
pub type ProgressSink<'a> = &'a (dyn Fn(BuildProgress) + Send + Sync);
