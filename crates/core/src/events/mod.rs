//! Typed domain events and the bus that fans them out (the server forwards them over the WebSocket).

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

use crate::engines::cmake_build::{BuildProgress, BuildStep};
use crate::launch::instances::{InstanceEvents, InstanceLog};
use crate::launch::InstanceView;
use rigdeck_telemetry::findings::Finding;
use rigdeck_telemetry::snapshot::RigSample;

/// A sample together with what the rules found in it: what the dashboard draws each tick.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct TelemetryFrame {
    pub sample: RigSample,
    pub findings: Vec<Finding>,
}

/// Everything the core announces. On the wire: `{"type": "<domain>.<event>", "data": …}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    #[serde(rename = "telemetry.frame")]
    TelemetryFrame(Arc<TelemetryFrame>),
    /// A step, a progress fraction or an output line of an engine build.
    #[serde(rename = "engine.build")]
    EngineBuild(Arc<BuildProgress>),
    /// The model library changed on disk (a model added, removed or modified): the full list.
    #[serde(rename = "library.changed")]
    LibraryChanged(Arc<Vec<crate::library::ModelEntry>>),
    /// An engine instance changed state (starting, loading, ready, crashed …): the full view.
    #[serde(rename = "instance.state")]
    InstanceState(Arc<InstanceView>),
    /// One output line of an engine instance.
    #[serde(rename = "instance.log")]
    InstanceLog(Arc<InstanceLog>),
    /// A model download was queued, started, paused, failed, finished …: its full view.
    #[serde(rename = "download.state")]
    DownloadState(Arc<crate::downloads::DownloadView>),
    /// A running download's bytes, rate and time left (twice a second).
    #[serde(rename = "download.progress")]
    DownloadProgress(Arc<crate::downloads::DownloadView>),
    /// A chat message was created or changed state (streaming, complete, stopped, failed).
    #[serde(rename = "chat.message")]
    ChatMessage(Arc<crate::chat::Message>),
    /// Text appended to a reply being written.
    #[serde(rename = "chat.delta")]
    ChatDelta(Arc<crate::chat::Delta>),
    /// A benchmark run started, finished a run of a step, or ended: its list entry.
    #[serde(rename = "bench.run")]
    BenchRun(Arc<crate::bench::store::RunSummary>),
    /// A tuning run started, began or ended a trial, or ended: its full view.
    #[serde(rename = "bench.tune")]
    BenchTune(Arc<crate::bench::store::tunes::TuneView>),
    /// A "run this model" request moved on a step (checking, downloading, … ready, failed).
    #[serde(rename = "model_run.state")]
    ModelRun(Arc<crate::model_runs::ModelRun>),
    /// A quality reference started recording, moved on, or ended (ready or failed): its entry.
    #[serde(rename = "quality.reference")]
    QualityReference(Arc<crate::quality::references::Reference>),
}

impl Event {
    /// High-rate events (output lines, telemetry frames): a client that falls behind may skip
    /// some, as long as it is told. State changes travel apart from them, so a flood of log
    /// lines cannot push an `instance.state` out of a slow client's queue.
    pub fn is_bulk(&self) -> bool {
        match self {
            Event::TelemetryFrame(_)
            | Event::InstanceLog(_)
            | Event::DownloadProgress(_)
            | Event::ChatDelta(_) => true,
            // A build's progress is bulk (the next report says where it is); its end is state.
            Event::EngineBuild(progress) => {
                !matches!(progress.step, BuildStep::Done | BuildStep::Failed)
            }
            Event::LibraryChanged(_)
            | Event::InstanceState(_)
            | Event::DownloadState(_)
            | Event::ChatMessage(_)
            | Event::BenchRun(_)
            | Event::BenchTune(_) => false,
            // Its download's progress moves it often; the next report says where it is.
            Event::ModelRun(run) => !run.step.ended(),
            Event::QualityReference(reference) => reference.progress.is_some(),
        }
    }
}

/// Which of the bus's two channels an event travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// State changes: instances, the library, build steps.
    State,
    /// Output lines and telemetry frames.
    Bulk,
}

/// Two broadcast channels of events, state changes and bulk. Slow subscribers skip ahead
/// rather than hold others back, and learn that they did (`Lagged`), so they can resync.
#[derive(Clone)]
pub struct EventBus {
    state: broadcast::Sender<Arc<Event>>,
    bulk: broadcast::Sender<Arc<Event>>,
}

/// A subscriber's two receivers.
pub struct Subscription {
    pub state: broadcast::Receiver<Arc<Event>>,
    pub bulk: broadcast::Receiver<Arc<Event>>,
}

impl EventBus {
    pub fn new() -> Self {
        // State changes are rare: a long queue costs little and makes a lag very unlikely.
        let (state, _) = broadcast::channel(1024);
        // A minute of telemetry at 4 Hz, or a burst of log lines; further behind, a client is
        // told to resync.
        let (bulk, _) = broadcast::channel(256);
        Self { state, bulk }
    }

    pub fn publish(&self, event: Event) {
        let sender = if event.is_bulk() {
            &self.bulk
        } else {
            &self.state
        };
        // No subscriber is not an error: nobody is watching right now.
        let _ = sender.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> Subscription {
        Subscription {
            state: self.state.subscribe(),
            bulk: self.bulk.subscribe(),
        }
    }

    /// A build-progress listener that publishes every report as an `engine.build` event.
    pub fn build_progress(&self) -> impl Fn(BuildProgress) + Send + Sync {
        let bus = self.clone();
        move |progress| bus.publish(Event::EngineBuild(Arc::new(progress)))
    }
}

/// The daemon's instances report on the bus, as `instance.state` and `instance.log`.
impl InstanceEvents for EventBus {
    fn state(&self, view: InstanceView) {
        self.publish(Event::InstanceState(Arc::new(view)));
    }

    fn log(&self, line: InstanceLog) {
        self.publish(Event::InstanceLog(Arc::new(line)));
    }
}

/// Chat replies report on the bus, as `chat.message` and `chat.delta`.
impl crate::chat::ChatEvents for EventBus {
    fn message(&self, message: &crate::chat::Message) {
        self.publish(Event::ChatMessage(Arc::new(message.clone())));
    }

    fn delta(&self, delta: &crate::chat::Delta) {
        self.publish(Event::ChatDelta(Arc::new(delta.clone())));
    }
}

/// The download queue reports on the bus, as `download.state` and `download.progress`.
impl crate::downloads::DownloadEvents for EventBus {
    fn state(&self, view: crate::downloads::DownloadView) {
        self.publish(Event::DownloadState(Arc::new(view)));
    }

    fn progress(&self, view: crate::downloads::DownloadView) {
        self.publish(Event::DownloadProgress(Arc::new(view)));
    }
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_goes_out_on_the_bus_as_engine_build_events() {
        let bus = EventBus::new();
        let mut events = bus.subscribe().bulk;
        let publish = bus.build_progress();
        publish(BuildProgress {
            build_id: "build-1".into(),
            step: BuildStep::Compile,
            fraction: Some(0.5),
            line: Some("[107/214] Building CXX object".into()),
        });
        let event = events.try_recv().unwrap();
        assert_eq!(
            serde_json::to_value(event.as_ref()).unwrap(),
            serde_json::json!({
                "type": "engine.build",
                "data": {
                    "build_id": "build-1",
                    "step": "compile",
                    "fraction": 0.5,
                    "line": "[107/214] Building CXX object",
                },
            })
        );
    }
}
