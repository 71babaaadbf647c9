//! Who is using an instance right now: a gateway request, a chat reply, a benchmark, a tuning
//! trial or a llama-bench run each hold the instance it uses ([`InstanceHold`], released when
//! dropped). The idle timer and eviction stop only an instance nobody holds, and mark it
//! draining in the same step ([`Holds::begin_drain`]); a hold asked for while it drains waits
//! until the stop is over, then finds the instance stopped and starts it again if it may.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Entry {
    held: usize,
    draining: bool,
}

/// The holds on every instance, by profile name.
#[derive(Debug, Default)]
pub struct Holds {
    entries: Mutex<HashMap<String, Entry>>,
    /// Woken when a drain ends (holders waiting for it look again).
    drained: Notify,
}

/// A use of an instance; the instance is not stopped for idleness or eviction while it lives.
#[derive(Debug)]
pub struct InstanceHold {
    holds: Arc<Holds>,
    name: String,
}

/// An instance chosen to stop: no hold can be taken on it until this is dropped.
#[derive(Debug)]
pub struct Drain {
    holds: Arc<Holds>,
    name: String,
}

impl Holds {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `name`, or `None` while it drains.
    pub fn try_hold(self: &Arc<Self>, name: &str) -> Option<InstanceHold> {
        let mut entries = self.lock();
        let entry = entries.entry(name.to_owned()).or_default();
        if entry.draining {
            return None;
        }
        entry.held += 1;
        Some(InstanceHold {
            holds: self.clone(),
            name: name.to_owned(),
        })
    }

    /// Holds `name`, first waiting for a drain in progress to end.
    pub async fn hold(self: &Arc<Self>, name: &str) -> InstanceHold {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before looking, so a drain ending in between is not missed.
            drained.as_mut().enable();
            if let Some(hold) = self.try_hold(name) {
                return hold;
            }
            drained.await;
        }
    }

    /// Marks `name` draining when nobody holds it and no drain is in progress; the choice and
    /// the mark are one step, so no request can slip in between.
    pub fn begin_drain(self: &Arc<Self>, name: &str) -> Option<Drain> {
        let mut entries = self.lock();
        let entry = entries.entry(name.to_owned()).or_default();
        if entry.held > 0 || entry.draining {
            return None;
        }
        entry.draining = true;
        Some(Drain {
            holds: self.clone(),
            name: name.to_owned(),
        })
    }

    /// How many uses of `name` are in progress.
    pub fn count(&self, name: &str) -> usize {
        self.lock().get(name).map_or(0, |e| e.held)
    }

    /// Forgets entries with no hold and no drain, so the map stays as small as the profiles.
    fn tidy(entries: &mut HashMap<String, Entry>, name: &str) {
        if entries
            .get(name)
            .is_some_and(|e| e.held == 0 && !e.draining)
        {
            entries.remove(name);
        }
    }
}

impl Drop for InstanceHold {
    fn drop(&mut self) {
        let mut entries = self.holds.lock();
        if let Some(entry) = entries.get_mut(&self.name) {
            entry.held = entry.held.saturating_sub(1);
        }
        Holds::tidy(&mut entries, &self.name);
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        {
            let mut entries = self.holds.lock();
            if let Some(entry) = entries.get_mut(&self.name) {
                entry.draining = false;
            }
            Holds::tidy(&mut entries, &self.name);
        }
        self.holds.drained.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_held_instance_cannot_be_drained_and_a_draining_one_cannot_be_held() {
        let holds = Arc::new(Holds::default());
        let hold = holds.try_hold("m").expect("free to hold");
        assert_eq!(holds.count("m"), 1);
        assert!(holds.begin_drain("m").is_none(), "held: not drained");
        drop(hold);
        let drain = holds.begin_drain("m").expect("nobody holds it");
        assert!(holds.begin_drain("m").is_none(), "one drain at a time");
        assert!(holds.try_hold("m").is_none(), "draining: no new hold");
        assert!(
            holds.try_hold("other").is_some(),
            "other instances unaffected"
        );
        drop(drain);
        assert!(holds.try_hold("m").is_some());
    }

    #[test]
    fn entries_are_forgotten_when_nothing_holds_or_drains_them() {
        let holds = Arc::new(Holds::default());
        for i in 0..100 {
            drop(holds.try_hold(&format!("m{i}")));
            drop(holds.begin_drain(&format!("d{i}")));
        }
        assert!(holds.lock().is_empty());
    }

    #[tokio::test]
    async fn a_hold_asked_for_during_a_drain_waits_for_it_to_end() {
        let holds = Arc::new(Holds::default());
        let drain = holds.begin_drain("m").unwrap();
        let waiting = tokio::spawn({
            let holds = holds.clone();
            async move { holds.hold("m").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the hold waits while the drain lasts"
        );
        drop(drain);
        let _hold = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the hold follows the drain's end")
            .unwrap();
        assert_eq!(holds.count("m"), 1);
    }
}
