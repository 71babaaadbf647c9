//! Which running model makes room for another (least recently used, unused, never a pinned one,
//! never one that frees nothing on the GPUs that are short) and which ones have been idle past
//! their TTL. Pure: the times, states and holds come in.

use serde::Serialize;

use crate::activity::ModelActivity;
use crate::fleet::{ModelEntry, ModelState};

/// A running model and how it is used, as the policies see it.
pub struct Candidate<'a> {
    pub entry: &'a ModelEntry,
    pub state: &'a ModelState,
    pub activity: ModelActivity,
    /// Something uses it now: a gateway request, a chat reply, a benchmark, a tuning trial.
    pub held: bool,
    /// What stopping it frees on each GPU (index, bytes): its plan, or what the driver shows it
    /// holding when it has none. Empty for a model on the CPU.
    pub frees: Vec<(u32, u64)>,
}

impl Candidate<'_> {
    fn frees_on(&self, gpu: u32) -> u64 {
        self.frees
            .iter()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, bytes)| bytes)
            .sum()
    }

    /// Ready, and nobody uses it.
    fn unused(&self) -> bool {
        matches!(self.state, ModelState::Ready(_)) && !self.held && self.activity.in_flight == 0
    }
}

/// The model to stop so that `target` can start, given the GPUs it is short on and by how much:
/// a ready one that is not pinned, that nothing uses, and that frees memory on one of those GPUs,
/// the least recently used first. `None` when stopping every such model would still leave a GPU
/// short: nothing is stopped in vain, and a model on the CPU is never stopped for GPU room.
pub fn pick_victim<'a>(
    candidates: &[Candidate<'a>],
    target: &str,
    short: &[(u32, u64)],
) -> Option<&'a ModelEntry> {
    let evictable: Vec<&Candidate<'a>> = candidates
        .iter()
        .filter(|c| c.entry.name != target && !c.entry.policy.pinned && c.unused())
        .collect();
    let enough = short.iter().all(|&(gpu, missing)| {
        let freed: u64 = evictable.iter().map(|c| c.frees_on(gpu)).sum();
        freed >= missing
    });
    if !enough {
        return None;
    }
    evictable
        .into_iter()
        .filter(|c| match short {
            [] => c.frees.iter().any(|(_, bytes)| *bytes > 0),
            short => short.iter().any(|&(gpu, _)| c.frees_on(gpu) > 0),
        })
        .min_by_key(|c| c.activity.last_used_ms.unwrap_or(i64::MIN))
        .map(|c| c.entry)
}

/// Ready models with a TTL, nobody using them, and no use for longer than the TTL.
pub fn idle_past_ttl<'a>(candidates: &[Candidate<'a>], now_ms: i64) -> Vec<&'a ModelEntry> {
    candidates
        .iter()
        .filter(|c| c.unused())
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

    /// Frees what its plan says, and nothing holds it.
    fn candidate<'a>(
        entry: &'a ModelEntry,
        state: &'a ModelState,
        activity: ModelActivity,
    ) -> Candidate<'a> {
        Candidate {
            entry,
            state,
            activity,
            held: false,
            frees: entry.planned.clone(),
        }
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
            candidate(&busy, &r, used(1, 1)),
            candidate(&pinned, &r, used(0, 2)),
            candidate(&other_gpu, &r, used(0, 3)),
            candidate(&newer, &r, used(0, 50)),
            candidate(&old, &r, used(0, 10)),
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
        let none = [candidate(&old, &stopped, used(0, 1))];
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
            candidate(&a, &r, used(0, 1)),
            candidate(&b, &r, used(0, 2)),
            candidate(&pinned, &r, used(0, 0)),
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
            candidate(&short, &r, used(0, 0)),
            candidate(&long, &r, used(0, 0)),
            candidate(&never, &r, used(0, 0)),
        ];
        let idle: Vec<&str> = idle_past_ttl(&candidates, 60_000)
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(idle, vec!["short"]);
        let busy = [candidate(&short, &r, used(1, 0))];
        assert!(idle_past_ttl(&busy, 600_000).is_empty());
    }

    #[test]
    fn a_held_model_is_neither_evicted_nor_stopped_for_idleness() {
        let (bench, idle) = (
            entry("bench", &[0], false, Some(1)),
            entry("idle", &[0], false, Some(1)),
        );
        let r = ready();
        let mut held = candidate(&bench, &r, used(0, 0));
        held.held = true;
        let candidates = [held, candidate(&idle, &r, used(0, 5))];
        assert_eq!(
            pick_victim(&candidates, "new", &[(0, GIB)]).map(|e| e.name.as_str()),
            Some("idle")
        );
        let idle_ones: Vec<&str> = idle_past_ttl(&candidates, 60_000)
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(idle_ones, vec!["idle"]);
    }

    #[test]
    fn a_model_on_the_cpu_is_never_evicted_for_gpu_room() {
        let (cpu, gpu) = (
            entry("cpu", &[], false, None),
            entry("gpu", &[0], false, None),
        );
        let r = ready();
        // The CPU model is the least recently used, yet stopping it frees no VRAM.
        let candidates = [
            candidate(&cpu, &r, used(0, 1)),
            candidate(&gpu, &r, used(0, 9)),
        ];
        assert_eq!(
            pick_victim(&candidates, "new", &[(0, GIB)]).map(|e| e.name.as_str()),
            Some("gpu")
        );
        assert!(pick_victim(&candidates[..1], "new", &[(0, GIB)]).is_none());
        // Without a plan, what the driver shows it holding counts.
        let mut measured = candidate(&cpu, &r, used(0, 1));
        measured.frees = vec![(0, 2 * GIB)];
        assert_eq!(
            pick_victim(&[measured], "new", &[(0, GIB)]).map(|e| e.name.as_str()),
            Some("cpu")
        );
    }
}
