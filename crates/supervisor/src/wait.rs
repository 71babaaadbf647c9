//! A small polling helper: wait until a condition holds, or give up after a timeout.
//!
//! Used before restarting an engine, to wait until the GPU driver shows the old process's
//! memory released (the caller supplies the NVML check as the predicate).

use std::future::Future;
use std::time::Duration;

use tokio::time::{sleep, Instant};

/// Evaluates `predicate` now and then every `poll` until it returns true (→ `true`) or
/// `timeout` has passed (→ `false`). The predicate is always asked at least once, and once
/// more at the deadline.
pub async fn wait_until<F, Fut>(mut predicate: F, timeout: Duration, poll: Duration) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if predicate().await {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        sleep(poll.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test(start_paused = true)]
    async fn returns_true_once_the_condition_holds() {
        let calls = Cell::new(0);
        let start = Instant::now();
        let held = wait_until(
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { n >= 3 }
            },
            Duration::from_secs(10),
            Duration::from_millis(100),
        )
        .await;
        assert!(held);
        assert_eq!(calls.get(), 3);
        assert_eq!(start.elapsed(), Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_the_deadline() {
        let start = Instant::now();
        let held = wait_until(
            || async { false },
            Duration::from_millis(250),
            Duration::from_millis(100),
        )
        .await;
        assert!(!held);
        assert_eq!(start.elapsed(), Duration::from_millis(250));
    }
}
