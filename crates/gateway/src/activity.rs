//! Requests in flight and the last use of each model: the concurrency limit checks them, the
//! idle timer and the eviction policy read them. Beside them, each model's last reply (its
//! decode speed), which the dashboard shows for a running model.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::now_ms;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelActivity {
    pub in_flight: u32,
    /// When the last request began or ended (or the gateway first saw the model running).
    pub last_used_ms: Option<i64>,
}

/// The last reply a model finished (or its client stopped) with a decode speed, since it
/// started.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LastReply {
    pub at_ms: i64,
    /// Tokens per second while the reply was generated.
    pub decode_tps: f64,
    pub completion_tokens: Option<u64>,
}

/// Per model, by profile name.
#[derive(Default)]
pub struct Activity {
    models: Mutex<HashMap<String, ModelActivity>>,
    replies: Mutex<HashMap<String, LastReply>>,
}

/// The model's limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    pub limit: u32,
}

impl Activity {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, ModelActivity>> {
        crate::lock(&self.models)
    }

    /// Counts a request in, unless `limit` are already in flight. The guard counts it out.
    pub fn begin(self: &Arc<Self>, model: &str, limit: Option<u32>) -> Result<InFlight, Busy> {
        let mut models = self.lock();
        let entry = models.entry(model.to_owned()).or_default();
        if let Some(limit) = limit {
            if entry.in_flight >= limit {
                return Err(Busy { limit });
            }
        }
        entry.in_flight += 1;
        entry.last_used_ms = Some(now_ms());
        Ok(InFlight {
            activity: self.clone(),
            model: model.to_owned(),
        })
    }

    pub fn get(&self, model: &str) -> ModelActivity {
        self.lock().get(model).copied().unwrap_or_default()
    }

    /// Keeps `reply` as the model's last one.
    pub fn replied(&self, model: &str, reply: LastReply) {
        crate::lock(&self.replies).insert(model.to_owned(), reply);
    }

    /// The model's last reply since it started, if it gave one.
    pub fn last_reply(&self, model: &str) -> Option<LastReply> {
        crate::lock(&self.replies).get(model).copied()
    }

    /// Starts the idle clock of a model seen running for the first time (started outside the
    /// gateway), so its TTL counts from now rather than never.
    pub fn seen_running(&self, model: &str, now_ms: i64) -> ModelActivity {
        let mut models = self.lock();
        let entry = models.entry(model.to_owned()).or_default();
        entry.last_used_ms.get_or_insert(now_ms);
        *entry
    }

    /// Forgets the idle clock and the last reply of a stopped model, so a later start counts
    /// afresh.
    pub fn stopped(&self, model: &str) {
        crate::lock(&self.replies).remove(model);
        let mut models = self.lock();
        if models.get(model).is_some_and(|a| a.in_flight == 0) {
            models.remove(model);
        }
    }
}

/// One request in flight; dropping it counts it out and marks the model used.
pub struct InFlight {
    activity: Arc<Activity>,
    model: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut models = self.activity.lock();
        if let Some(entry) = models.get_mut(&self.model) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            entry.last_used_ms = Some(now_ms());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_counts_requests_in_flight() {
        let activity = Arc::new(Activity::default());
        let a = activity.begin("m", Some(2)).unwrap();
        let _b = activity.begin("m", Some(2)).unwrap();
        assert_eq!(activity.begin("m", Some(2)).err(), Some(Busy { limit: 2 }));
        assert_eq!(activity.get("m").in_flight, 2);
        drop(a);
        assert!(activity.begin("m", Some(2)).is_ok());
        assert!(activity.begin("other", None).is_ok());
        assert!(activity.get("m").last_used_ms.is_some());
    }

    #[test]
    fn the_last_reply_is_the_latest_and_goes_when_the_model_stops() {
        let activity = Activity::default();
        assert_eq!(activity.last_reply("m"), None);
        let reply = |at_ms, decode_tps| LastReply {
            at_ms,
            decode_tps,
            completion_tokens: Some(12),
        };
        activity.replied("m", reply(1, 40.0));
        activity.replied("m", reply(2, 55.5));
        activity.replied("other", reply(3, 9.0));
        assert_eq!(activity.last_reply("m"), Some(reply(2, 55.5)));
        activity.stopped("m");
        assert_eq!(activity.last_reply("m"), None);
        assert_eq!(activity.last_reply("other"), Some(reply(3, 9.0)));
    }

    #[test]
    fn a_model_first_seen_running_starts_its_idle_clock_once() {
        let activity = Activity::default();
        assert_eq!(activity.seen_running("m", 5).last_used_ms, Some(5));
        assert_eq!(activity.seen_running("m", 9).last_used_ms, Some(5));
        activity.stopped("m");
        assert_eq!(activity.get("m").last_used_ms, None);
    }
}
