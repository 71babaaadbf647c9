//! Live telemetry of the rig: collectors (NVML, host), the collection loop, and recent history.

pub mod collector;
pub mod downsample;
pub mod gpu;
pub mod history;
pub mod host;
pub mod snapshot;
pub mod sysfs;

pub use collector::{spawn_collector, StartedByRigdeck, TelemetryHandle};
