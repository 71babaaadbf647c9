//! Running instances: how Rigdeck starts an engine from a stored profile (see `crate::profiles`),
//! keeps it under the supervisor and refuses starts that would not fit in the GPUs' memory.
//!
//! - [`export`]: a profile's command as a shell script or a systemd unit.
//! - [`instances`]: the service the daemon owns: start, stop, restart, recover after a restart.
//! - [`client`]: the command line's client of the daemon's JSON API.
//! - [`fleet`]: the instances as the gateway sees them (models to route to, start on request).
//! - [`speculation`]: a running engine's speculative acceptance, read from its `/metrics`.

pub mod client;
pub mod export;
pub mod fleet;
pub mod instances;
pub mod speculation;

pub use crate::profiles::admission::{AdmissionError, PlannedGpu};
pub use crate::profiles::profile::{LaunchProfile, ProfileError, RestartSetting};
/// Profiles are stored by `crate::store::launch_profiles`; its error is part of this API.
pub use crate::store::launch_profiles::ProfileStoreError;
pub use instances::{InstanceView, Instances, LaunchError};
