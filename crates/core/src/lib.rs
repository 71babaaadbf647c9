//! Rigdeck's GUI-free core: telemetry collectors, findings, storage, settings and the event bus.
//!
//! Nothing in here knows about HTTP or windows; the server and the desktop shell wrap it.

pub mod auth;
pub mod engines;
pub mod events;
pub mod launch;
pub mod library;
pub mod live_rig;
pub mod paths;
pub mod settings;
pub mod store;
pub mod telemetry;

/// The planner, engine processes, collectors and findings live in their own crates; the core
/// wires them to the rest.
pub use rigdeck_placement as placement;
pub use rigdeck_supervisor as supervisor;
pub use rigdeck_telemetry::findings;

/// Milliseconds since the Unix epoch, read from the system clock.
///
/// Only the outermost loops call this; logic that tests must control takes the time as an argument.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
