//! The monitor's small tools: tasks that end with their owner, and waiting for a stop request.

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

/// Resolves when a stop was requested; never, if the requesting side is gone.
pub(crate) async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|requested| *requested).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A spawned task that is cancelled when this is dropped, so nothing the monitor started
/// outlives it.
pub(crate) struct Task(JoinHandle<()>);

pub(crate) fn spawn_task(future: impl std::future::Future<Output = ()> + Send + 'static) -> Task {
    Task(tokio::spawn(future))
}

impl Task {
    /// Waits for the task to end, until `deadline` at most; true when it ran to its end (was not
    /// cancelled and did not panic).
    pub(crate) async fn join_by(&mut self, deadline: Instant) -> bool {
        matches!(timeout_at(deadline, &mut self.0).await, Ok(Ok(())))
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}
