//! Stopping models the gateway may stop: the least recently used idle one when another model
//! needs its VRAM, and any idle past its profile's timeout; each stop remembered with its reason.

use std::sync::Arc;
use std::time::Duration;

use super::Gateway;
use crate::clock::now_ms;
use crate::error::{ErrorKind, GatewayError};
use crate::eviction::{idle_past_ttl, pick_victim, Candidate, Eviction};
use crate::fleet::{ModelEntry, ModelState};
use crate::lock;

/// How many evictions the Gateway page keeps.
const EVICTIONS_KEPT: usize = 20;

impl Gateway {
    pub(super) async fn victim_for(&self, target: &str, short: &[(u32, u64)]) -> Option<String> {
        let models = self.fleet.models().await.ok()?;
        let states: Vec<ModelState> = models.iter().map(|e| self.fleet.state(&e.name)).collect();
        let mut candidates = self.candidates(&models, &states);
        // A model without a plan frees what the driver shows it holding (nothing, on the CPU).
        for candidate in candidates.iter_mut().filter(|c| c.frees.is_empty()) {
            candidate.frees = self.fleet.gpu_memory(&candidate.entry.name);
        }
        pick_victim(&candidates, target, short).map(|e| e.name.clone())
    }

    fn candidates<'a>(
        &self,
        models: &'a [ModelEntry],
        states: &'a [ModelState],
    ) -> Vec<Candidate<'a>> {
        models
            .iter()
            .zip(states)
            .map(|(entry, state)| Candidate {
                entry,
                state,
                activity: self.activity.get(&entry.name),
                held: self.fleet.held(&entry.name),
                frees: entry.planned.clone(),
            })
            .collect()
    }

    /// Stops a model the policy chose, unless a use of it began since (then `Ok(false)` and
    /// nothing is stopped), and remembers why.
    pub(super) async fn stop_model(
        &self,
        name: &str,
        for_model: &str,
        reason: String,
    ) -> Result<bool, GatewayError> {
        let stopped = self.fleet.stop_if_unheld(name).await.map_err(|err| {
            GatewayError::new(
                ErrorKind::Unavailable,
                format!("cannot stop '{name}' to make room for '{for_model}': {err}"),
            )
        })?;
        if !stopped {
            tracing::info!("gateway: left '{name}' running: it is in use again");
            return Ok(false);
        }
        tracing::info!("gateway: stopped '{name}': {reason}");
        self.activity.stopped(name);
        self.metrics.eviction(name);
        let mut evictions = lock(&self.evictions);
        evictions.push_front(Eviction {
            at_ms: now_ms(),
            evicted: name.to_owned(),
            for_model: for_model.to_owned(),
            reason,
        });
        evictions.truncate(EVICTIONS_KEPT);
        Ok(true)
    }

    /// Stops models idle past their TTL, every `period`, until the gateway is dropped.
    pub fn spawn_idle_timer(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(gateway) = weak.upgrade() else { break };
                gateway.stop_idle().await;
            }
        })
    }

    async fn stop_idle(&self) {
        let Ok(models) = self.fleet.models().await else {
            return;
        };
        let now = now_ms();
        let states: Vec<ModelState> = models.iter().map(|e| self.fleet.state(&e.name)).collect();
        for (entry, state) in models.iter().zip(&states) {
            if matches!(state, ModelState::Ready(_)) {
                self.activity.seen_running(&entry.name, now);
            }
        }
        let candidates = self.candidates(&models, &states);
        let idle: Vec<(String, u64)> = idle_past_ttl(&candidates, now)
            .into_iter()
            .map(|e| (e.name.clone(), e.policy.idle_ttl_s.unwrap_or(0)))
            .collect();
        for (name, ttl_s) in idle {
            let reason = format!("idle for {ttl_s} s (its profile's idle timeout)");
            if let Err(err) = self.stop_model(&name, "", reason).await {
                tracing::warn!("gateway: {err}");
            }
        }
    }
}
