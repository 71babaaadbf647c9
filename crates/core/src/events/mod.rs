//! Typed domain events and the bus that fans them out (the server forwards them over the WebSocket).

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

use crate::engines::cmake_build::BuildProgress;
use crate::findings::Finding;
use crate::telemetry::snapshot::RigSample;

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
    InstanceState(Arc<crate::launch::InstanceView>),
    /// One output line of an engine instance.
    #[serde(rename = "instance.log")]
    InstanceLog(Arc<crate::launch::instances::InstanceLog>),
}

/// A broadcast channel of events. Slow subscribers skip ahead rather than hold others back.
#[derive(Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<Event>>,
}

impl EventBus {
    pub fn new() -> Self {
        // A minute of telemetry at 4 Hz; a client further behind than that gets the newest frames.
        let (sender, _) = broadcast::channel(256);
        Self { sender }
    }

    pub fn publish(&self, event: Event) {
        // No subscriber is not an error: nobody is watching right now.
        let _ = self.sender.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}
