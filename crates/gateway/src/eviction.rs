//! Which running model makes room for another (least recently used, idle, never a pinned one)
//! and which ones have been idle past their TTL. Pure: the times and states come in.

use serde::Serialize;

use crate::activity::ModelActivity;
use crate::fleet::{ModelEntry, ModelState};

/// A running model and how it is used, as the policies see it.
pub struct Candidate<'a> {
    pub entry: &'a ModelEntry,
    pub state: &'a ModelState,
    pub activity: ModelActivity,
}

/// The model to stop so that `target` can start, given the GPUs it is short on and by how much:
/// a ready one that is not pinned, serves no request, and holds memory on one of those GPUs (a
/// model without a plan may hold any), the least recently used first. `None` when stopping every
/// such model would still leave a GPU short: nothing is stopped in vain.
pub fn pick_victim<'a>(
    candidates: &[Candidate<'a>],
    target: &str,
    short: &[(u32, u64)],
) -> Option<&'a ModelEntry> {
    let evictable: Vec<&Candidate<'a>> = candidates
        .iter()
        .filter(|c| c.entry.name != target)
        .filter(|c| matches!(c.state, ModelState::Ready(_)))
        .filter(|c| !c.entry.policy.pinned && c.activity.in_flight == 0)
        .collect();
    let unplanned = evictable.iter().any(|c| c.entry.planned.is_empty());
    let enough = short.iter().all(|&(gpu, missing)| {
        let freed: u64 = evictable.iter().map(|c| c.entry.planned_on(gpu)).sum();
        unplanned || freed >= missing
    });
    if !enough {
        return None;
    }
    evictable
        .into_iter()
        .filter(|c| {
            c.entry.planned.is_empty()
                || short.is_empty()
                || short.iter().any(|&(gpu, _)| c.entry.planned_on(gpu) > 0)
        })
        .min_by_key(|c| c.activity.last_used_ms.unwrap_or(i64::MIN))
        .map(|c| c.entry)
}

/// Ready models with a TTL, no request in flight, and no use for longer than the TTL.
pub fn idle_past_ttl<'a>(candidates: &[Candidate<'a>], now_ms: i64) -> Vec<&'a ModelEntry> {
    candidates
        .iter()
        .filter(|c| matches!(c.state, ModelState::Ready(_)) && c.activity.in_flight == 0)
        .filter(|c| {
            let Some(ttl_s) = c.entry.policy.idle_ttl_s else {
                return false;
            };
            let ttl_ms = i64::try_from(ttl_s.saturating_mul(1000)).unwrap_or(i64::MAX);
            c.activity
                .last_used_ms
                .is_some_and(|used| now_ms.saturating_sub(used) >= ttl_ms)
        })
        .map(|c| c.entry)
        .collect()
}

/// What the gateway stopped, and why; the Gateway page lists the latest ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eviction {
    pub at_ms: i64,
    pub evicted: String,
    /// The model that needed the room; empty for an idle stop.
    pub for_model: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{ServePolicy, Upstream};

    const GIB: u64 = 1 << 30;

    fn entry(name: &str, gpus: &[u32], pinned: bool, ttl: Option<u64>) -> ModelEntry {
        ModelEntry {
            name: name.to_owned(),
            policy: ServePolicy {
                pinned,
                idle_ttl_s: ttl,
                ..ServePolicy::default()
            },
            planned: gpus.iter().map(|&g| (g, 10 * GIB)).collect(),
            model_file: format!("{name}.gguf"),
        }
    }

    fn ready() -> ModelState {
        ModelState::Ready(Upstream {
            base_url: String::new(),
            api_key: None,
            served_name: String::new(),
        })
    }

    fn used(in_flight: u32, at: i64) -> ModelActivity {
        ModelActivity {
            in_flight,
            last_used_ms: Some(at),
        }
    }

    #[test]
    fn evicts_the_least_recently_used_idle_unpinned_model_on_the_short_gpu() {
        let (old, busy, pinned, other_gpu, newer) = (
            entry("old", &[0], false, None),
            entry("busy", &[0], false, None),
            entry("pinned", &[0], true, None),
            entry("elsewhere", &[1], false, None),
            entry("newer", &[0, 1], false, None),
        );
        let (r, stopped) = (ready(), ModelState::Stopped);
        let candidates = [
            Candidate {
                entry: &busy,
                state: &r,
                activity: used(1, 1),
            },
            Candidate {
                entry: &pinned,
                state: &r,
                activity: used(0, 2),
            },
            Candidate {
                entry: &other_gpu,
                state: &r,
                activity: used(0, 3),
            },
            Candidate {
                entry: &newer,
                state: &r,
                activity: used(0, 50),
            },
            Candidate {
                entry: &old,
                state: &r,
                activity: used(0, 10),
            },
        ];
        assert_eq!(
            pick_victim(&candidates, "new", &[(0, GIB)]).map(|e| e.name.as_str()),
            Some("old")
        );
        assert_eq!(
            pick_victim(&candidates, "new", &[(1, GIB)]).map(|e| e.name.as_str()),
            Some("elsewhere")
        );
        assert_eq!(
            pick_victim(&candidates, "old", &[(0, GIB)]).map(|e| e.name.as_str()),
            Some("newer")
        );
        let none = [Candidate {
            entry: &old,
            state: &stopped,
            activity: used(0, 1),
        }];
        assert!(pick_victim(&none, "new", &[(0, GIB)]).is_none());
    }

    #[test]
    fn nothing_is_evicted_when_even_all_of_it_would_not_make_room() {
        let (a, b, pinned) = (
            entry("a", &[0], false, None),
            entry("b", &[0], false, None),
            entry("p", &[0], true, None),
        );
        let r = ready();
        let candidates = [
            Candidate {
                entry: &a,
                state: &r,
                activity: used(0, 1),
            },
            Candidate {
                entry: &b,
                state: &r,
                activity: used(0, 2),
            },
            Candidate {
                entry: &pinned,
                state: &r,
                activity: used(0, 0),
            },
        ];
        // a and b free 20 GiB on GPU 0; the pinned model's 10 do not count.
        assert!(pick_victim(&candidates, "new", &[(0, 25 * GIB)]).is_none());
        let first = pick_victim(&candidates, "new", &[(0, 15 * GIB)]);
        assert_eq!(first.map(|e| e.name.as_str()), Some("a"));
    }

    #[test]
    fn idle_models_stop_after_their_ttl_only() {
        let (short, long, never) = (
            entry("short", &[0], false, Some(60)),
            entry("long", &[0], false, Some(3600)),
            entry("never", &[0], false, None),
        );
        let r = ready();
        let candidates = [
            Candidate {
                entry: &short,
                state: &r,
                activity: used(0, 0),
            },
            Candidate {
                entry: &long,
                state: &r,
                activity: used(0, 0),
            },
            Candidate {
                entry: &never,
                state: &r,
                activity: used(0, 0),
            },
        ];
        let idle: Vec<&str> = idle_past_ttl(&candidates, 60_000)
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(idle, vec!["short"]);
        let busy = [Candidate {
            entry: &short,
            state: &r,
            activity: used(1, 0),
        }];
        assert!(idle_past_ttl(&busy, 600_000).is_empty());
    }
}
