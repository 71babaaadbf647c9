//! The measured half of the planner's closed loop: a GPU engine's plan is made as it starts (on
//! the free VRAM llama.cpp splits by), and once it is ready NVML's figure for its processes on
//! each planned GPU is stored next to it (`crate::calibration`).

use std::sync::Arc;
use std::time::Duration;

use super::{engine_pids, lock, Instances};
use crate::calibration::record::{estimate_at_start, from_measured, StartEstimate};
use crate::engines::registry::EngineBuild;
use crate::profiles::admission::{held_by, Held};
use crate::profiles::profile::LaunchProfile;
use crate::supervisor::ProcessState;

/// NVML is read this often after ready until two readings agree.
const MEASURE_EVERY: Duration = Duration::from_secs(1);
/// Readings before giving up (an engine that keeps allocating is not a clean record).
const MEASURE_TRIES: u32 = 60;

impl Instances {
    /// The plan to measure a starting engine against; `None` for engines the planner does not
    /// predict (CPU builds, vLLM, SGLang) or before NVML's first reading.
    pub(super) async fn estimate_for(
        &self,
        profile: &LaunchProfile,
        build: &EngineBuild,
    ) -> Option<StartEstimate> {
        let gpus = (self.gpus)()?;
        let (model, options, build) = (
            profile.model.clone(),
            profile.placement.clone(),
            build.clone(),
        );
        tokio::task::spawn_blocking(move || estimate_at_start(&model, &options, &build, &gpus))
            .await
            .ok()
            .flatten()
    }

    /// Waits until the ready engine's memory on every planned GPU reads the same twice, then
    /// stores it; stops early when the engine ends.
    pub(super) async fn measure_after_load(self: Arc<Self>, state: ProcessState) {
        let estimate = lock(&self.meta)
            .get(&state.name)
            .and_then(|m| m.estimate.clone());
        let (Some(estimate), Some(pid)) = (estimate, state.pid) else {
            return;
        };
        let run = format!(
            "{}|{pid}|{}",
            state.name,
            state.ready_at_ms.unwrap_or_default()
        );
        let mut previous: Option<Vec<Held>> = None;
        for _ in 0..MEASURE_TRIES {
            tokio::time::sleep(MEASURE_EVERY).await;
            let same_run = self
                .supervisor
                .get(&state.name)
                .is_some_and(|h| h.state().pid == Some(pid) && h.state().is_ready());
            if !same_run {
                return;
            }
            let held = (self.gpus)()
                .map(|r| held_by(&r, &engine_pids(pid)))
                .unwrap_or_default();
            let on_every_gpu = estimate
                .gpus
                .iter()
                .all(|(gpu, _, _)| held.iter().any(|h| h.gpu == *gpu && h.bytes > 0));
            if on_every_gpu && previous.as_ref() == Some(&held) {
                self.record(&estimate, &held, &run).await;
                return;
            }
            previous = Some(held);
        }
    }

    async fn record(&self, estimate: &StartEstimate, held: &[Held], run: &str) {
        for (key, observation) in from_measured(estimate, held, run, crate::now_ms()) {
            if let Err(e) = self.store.record_plan_observation(&key, &observation).await {
                tracing::warn!("could not store the measured memory of '{run}': {e}");
            }
        }
    }
}
