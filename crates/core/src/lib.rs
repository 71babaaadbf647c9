//! Rigdeck's GUI-free application layer: the store, settings, the token, the event bus, the model
//! library, launch profiles and the instances service, wiring the domain crates (engines, hub,
//! gateway, chat, bench, placement, telemetry, supervisor) together.
//!
//! Nothing in here knows about HTTP or windows; the server and the desktop shell wrap it.

pub mod auth;
pub mod benchmarks;
pub mod calibration;
pub mod downloads;
pub mod dry_run;
pub mod events;
pub mod host_memory_bandwidth;
pub mod hub_fit;
pub mod hub_recommend;
pub mod launch;
pub mod library;
pub mod live_rig;
pub mod model_runs;
pub mod network_interfaces;
pub mod packaged_engines;
pub mod paths;
pub mod profiles;
pub mod quality;
pub mod service_unit;
pub mod settings;
pub mod store;
pub mod telemetry;

/// Engines, the planner, engine processes, collectors and findings live in their own crates;
/// the core wires them to the rest.
pub use rigdeck_bench as bench;
pub use rigdeck_chat as chat;
pub use rigdeck_engines as engines;
pub use rigdeck_gateway as gateway;
pub use rigdeck_hub as hub;
pub use rigdeck_placement as placement;
pub use rigdeck_supervisor as supervisor;
pub use rigdeck_telemetry::findings;

/// Milliseconds since the Unix epoch, read from the system clock. Only the outermost loops call
/// this; logic that tests must control takes the time as an argument.
pub use rigdeck_supervisor::now_ms;
