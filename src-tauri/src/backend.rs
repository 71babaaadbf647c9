//! The in-process server, owned by one task so that the window (on the GTK main thread) can ask it
//! questions and stop it without sharing the `RunningServer` itself: `wait` needs it mutably for
//! as long as it serves, and `shutdown` consumes it.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use rigdeck_server::RunningServer;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long the window waits for the server to answer a question before assuming the default.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Shutting down flushes the telemetry history to disk; give it time, but never hang the exit.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

enum Request {
    KeepRunningInBackground(std_mpsc::Sender<bool>),
    Shutdown,
}

/// Cheap to clone; every clone talks to the same server task.
#[derive(Clone)]
pub struct Backend {
    requests: mpsc::UnboundedSender<Request>,
}

/// Joins the server task after [`Backend::request_shutdown`].
pub struct BackendTask(JoinHandle<()>);

/// Moves `server` into its own task. `failed` receives the error if the server stops by itself.
pub fn spawn(
    runtime: &tokio::runtime::Handle,
    mut server: RunningServer,
) -> (Backend, BackendTask, oneshot::Receiver<anyhow::Error>) {
    let (requests, mut inbox) = mpsc::unbounded_channel();
    let (failed_tx, failed) = oneshot::channel();
    let task = runtime.spawn(async move {
        loop {
            tokio::select! {
                outcome = server.wait() => {
                    // The listener only stops by itself on an error; there is nothing left to flush
                    // through `shutdown` (its task has already ended), so report and let the app exit.
                    let err = outcome.err().unwrap_or_else(|| anyhow::anyhow!("the server stopped unexpectedly"));
                    let _ = failed_tx.send(err);
                    return;
                }
                request = inbox.recv() => match request {
                    Some(Request::KeepRunningInBackground(reply)) => {
                        let _ = reply.send(server.keep_running_in_background());
                    }
                    // All senders gone means the app is gone: stop as on a shutdown request.
                    Some(Request::Shutdown) | None => {
                        server.shutdown().await;
                        return;
                    }
                },
            }
        }
    });
    (Backend { requests }, BackendTask(task), failed)
}

impl Backend {
    /// The user's "keep running in the background" setting, read now (it changes in the UI).
    /// False when the server does not answer, so that closing the window still ends the app.
    pub fn keep_running_in_background(&self) -> bool {
        let (reply, answer) = std_mpsc::channel();
        if self
            .requests
            .send(Request::KeepRunningInBackground(reply))
            .is_err()
        {
            return false;
        }
        answer.recv_timeout(ANSWER_TIMEOUT).unwrap_or_else(|err| {
            tracing::warn!("the server did not say whether to keep running ({err}); closing");
            false
        })
    }

    /// Asks the server to stop; [`BackendTask::join`] waits for it.
    pub fn request_shutdown(&self) {
        // An error means the task has already ended (the server failed): nothing to stop.
        let _ = self.requests.send(Request::Shutdown);
    }
}

impl BackendTask {
    /// Waits for the server to finish stopping (history flushed), within a time limit.
    pub async fn join(self) {
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, self.0).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!("the server task ended abnormally: {err}"),
            Err(_) => tracing::warn!(
                "the server did not stop within {SHUTDOWN_TIMEOUT:?}; exiting anyway"
            ),
        }
    }
}
