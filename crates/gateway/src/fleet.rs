//! What the gateway needs from the daemon's instances service, as a trait the application crate
//! implements: the models it may route to (launch profiles and their running instances), their
//! state, and starting and stopping them through the normal path (VRAM admission, release wait).

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// How the gateway may treat one model; stored with its launch profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServePolicy {
    /// More names the model answers to on the gateway.
    pub aliases: Vec<String>,
    /// A request for it while stopped starts it.
    pub on_demand: bool,
    /// Never stopped to make room for another model.
    pub pinned: bool,
    /// Stopped after this long without a request (`None`: kept running).
    pub idle_ttl_s: Option<u64>,
    /// Requests in flight at once; more get 429 (`None`: no limit).
    pub max_concurrent: Option<u32>,
}

/// Where a ready engine answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The engine's own `--api-key`, sent upstream in place of the client's key.
    pub api_key: Option<String>,
    /// What the engine calls the model (vLLM and SGLang check the `model` field).
    pub served_name: String,
}

/// A model's state as the gateway acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelState {
    Stopped,
    /// Starting or loading, or waiting for a restart after a crash; `progress` 0–1 where the
    /// engine reports one.
    Loading {
        progress: Option<f32>,
    },
    Ready(Upstream),
    Stopping,
    /// Ended and will not restart on its own.
    Crashed {
        explanation: String,
    },
}

impl ModelState {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Loading { .. } => "loading",
            Self::Ready(_) => "ready",
            Self::Stopping => "stopping",
            Self::Crashed { .. } => "crashed",
        }
    }
}

/// One model the gateway can serve.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// The launch profile's name.
    pub name: String,
    pub policy: ServePolicy,
    /// Its planned memory per GPU (index, bytes): for messages, and for choosing what to
    /// evict. Empty when it has no plan (a CPU build, or a plan never made).
    pub planned: Vec<(u32, u64)>,
    /// The model file's name, for "loading model X on GPU 2–3".
    pub model_file: String,
}

impl ModelEntry {
    /// The GPUs its plan uses.
    pub fn gpus(&self) -> Vec<u32> {
        self.planned.iter().map(|(gpu, _)| *gpu).collect()
    }

    /// What its plan puts on `gpu`.
    pub fn planned_on(&self, gpu: u32) -> u64 {
        self.planned
            .iter()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, b)| b)
            .sum()
    }

    pub fn answers_to(&self, model: &str) -> bool {
        self.name == model || self.policy.aliases.iter().any(|a| a == model)
    }
}

/// Why a start did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// VRAM admission refused it; `short` has each GPU short of memory and by how many bytes,
    /// `message` the numbers as the user reads them.
    NeedsMemory {
        short: Vec<(u32, u64)>,
        message: String,
    },
    /// Someone else started it first (a click in the UI, another request).
    AlreadyRunning,
    /// Anything else (profile invalid, build missing, no free port), with its message.
    Refused(String),
}

/// The daemon's instances, as the gateway sees them.
pub trait Fleet: Send + Sync + 'static {
    /// Every launch profile, in name order.
    fn models(&self) -> BoxFuture<'_, Result<Vec<ModelEntry>, String>>;
    /// The current state of a profile's instance (in memory, cheap).
    fn state(&self, name: &str) -> ModelState;
    /// Starts it through the daemon's normal path.
    fn start<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StartError>>;
    /// Holds it for one request (see [`Hold`]); waits while it is being stopped for
    /// idleness or eviction, so the request then finds it stopped rather than cut.
    fn hold<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Hold>;
    /// Whether anything uses it now: a request, a reply, a benchmark, a tuning trial.
    fn held(&self, name: &str) -> bool;
    /// What it holds on each GPU now (index, bytes), as the driver reports it.
    fn gpu_memory(&self, name: &str) -> Vec<(u32, u64)>;
    /// Stops it (SIGTERM, then SIGKILL after the stop timeout) unless something holds it, the
    /// check and the stop's start being one step; `Ok(false)` when it was held.
    fn stop_if_unheld<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, String>>;
}

/// A use of a model that keeps the idle timer and eviction away until dropped.
pub type Hold = Box<dyn std::any::Any + Send + Sync>;

/// `GPU 2–3`, `GPU 0, 2`, `CPU` for a model's planned devices.
pub fn describe_gpus(gpus: &[u32]) -> String {
    let mut sorted = gpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    match sorted.as_slice() {
        [] => "CPU".to_owned(),
        [one] => format!("GPU {one}"),
        [first, .., last] if (last - first) as usize + 1 == sorted.len() => {
            format!("GPU {first}–{last}")
        }
        many => {
            let list: Vec<String> = many.iter().map(u32::to_string).collect();
            format!("GPU {}", list.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_ranges_read_like_a_person_writes_them() {
        assert_eq!(describe_gpus(&[]), "CPU");
        assert_eq!(describe_gpus(&[1]), "GPU 1");
        assert_eq!(describe_gpus(&[3, 2, 2]), "GPU 2–3");
        assert_eq!(describe_gpus(&[0, 2]), "GPU 0, 2");
    }
}
