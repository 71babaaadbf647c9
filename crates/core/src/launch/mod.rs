//! Launch profiles and running instances: how Rigdeck starts an engine from a stored profile,
//! keeps it under the supervisor and refuses starts that would not fit in the GPUs' memory.
//!
//! - [`profile`]: the profile itself, its checks, and the exact argv it launches (pure).
//! - [`python_engines`]: the same for vLLM and SGLang environments, and their planned memory.
//! - [`export`]: the same command as a shell script or a systemd unit (pure).
//! - [`admission`]: planned memory per GPU against live free VRAM (pure, tested with samples).
//! - [`instances`]: the service the daemon owns: start, stop, restart, recover after a restart.
//! - [`client`]: the command line's client of the daemon's JSON API.

pub mod admission;
pub mod client;
pub mod export;
pub mod instances;
pub mod profile;
pub mod python_engines;

/// Profiles are stored by `crate::store::launch_profiles`; its error is part of this API.
pub use crate::store::launch_profiles::ProfileStoreError;
pub use admission::{AdmissionError, PlannedGpu};
pub use instances::{InstanceView, Instances, LaunchError};
pub use profile::{LaunchProfile, ProfileError, RestartSetting};
