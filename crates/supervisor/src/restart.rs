//! The restart policy's arithmetic: whether to restart after a failure, and after how long.
//!
//! Kept apart from the process handling so it can be tested with made-up durations: time is
//! passed in, never read from the clock.

use std::time::Duration;

use super::classify::CrashCause;
use super::spec::RestartPolicy;

/// A run that stayed ready at least this long counts as a success: the failure count restarts
/// from zero, so a server that crashes once a day is not given up on after a week.
pub const STABLE_RUN: Duration = Duration::from_secs(60);

/// Counts consecutive failures of one process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RestartTracker {
    failures: u32,
}

impl RestartTracker {
    /// Records a failed run (`ready_for`: how long it had been ready, if it ever was) and returns
    /// the backoff before the next attempt, or `None` to give up.
    pub fn on_failure(
        &mut self,
        policy: &RestartPolicy,
        ready_for: Option<Duration>,
        cause: &CrashCause,
    ) -> Option<Duration> {
        if ready_for.is_some_and(|d| d >= STABLE_RUN) {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let RestartPolicy::OnFailure {
            max_restarts,
            initial_backoff,
            max_backoff,
        } = *policy
        else {
            return None;
        };
        if self.failures > max_restarts || !cause.worth_retrying() {
            return None;
        }
        Some(backoff(initial_backoff, max_backoff, self.failures))
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// `initial × 2^(failures − 1)`, capped at `max`.
fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    initial.saturating_mul(1u32 << doublings).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RestartPolicy = RestartPolicy::OnFailure {
        max_restarts: 4,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(5),
    };
    const KILLED: CrashCause = CrashCause::Killed { signal: 9 };

    #[test]
    fn backoff_doubles_up_to_the_cap_then_gives_up() {
        let mut tracker = RestartTracker::default();
        let waits: Vec<Option<u64>> = (0..5)
            .map(|_| {
                tracker
                    .on_failure(&POLICY, None, &KILLED)
                    .map(|d| d.as_secs())
            })
            .collect();
        assert_eq!(waits, [Some(1), Some(2), Some(4), Some(5), None]);
    }

    #[test]
    fn a_long_healthy_run_resets_the_count() {
        let mut tracker = RestartTracker::default();
        for _ in 0..3 {
            tracker.on_failure(&POLICY, Some(Duration::from_secs(5)), &KILLED);
        }
        assert_eq!(tracker.failures(), 3);
        let wait = tracker.on_failure(&POLICY, Some(STABLE_RUN), &KILLED);
        assert_eq!(
            (wait, tracker.failures()),
            (Some(Duration::from_secs(1)), 1)
        );
    }

    #[test]
    fn never_and_hopeless_causes_do_not_restart() {
        let mut tracker = RestartTracker::default();
        assert_eq!(
            tracker.on_failure(&RestartPolicy::Never, None, &KILLED),
            None
        );
        let missing = CrashCause::MissingFile { path: None };
        assert_eq!(
            RestartTracker::default().on_failure(&POLICY, None, &missing),
            None
        );
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        assert_eq!(
            backoff(Duration::from_secs(1), Duration::from_secs(9), u32::MAX),
            Duration::from_secs(9)
        );
    }
}
