//! Live telemetry of the rig: the collection loop lives here (it publishes on the event bus and
//! writes the store); collectors, samples, history and findings are `rigdeck-telemetry`'s.

pub mod collector;

pub use collector::{spawn_collector, StartedByRigdeck, TelemetryHandle};
pub use rigdeck_telemetry::{downsample, gpu, history, host, snapshot, sysfs};
