//! Live facts about the rig and what they mean: NVML and host collectors, the immutable sample
//! they produce, recent history and its downsampling, and the findings (plain-language rules) on
//! a sample. The loop that runs the collectors and publishes their frames is the daemon's.

pub mod downsample;
pub mod findings;
pub mod fixtures;
pub mod gpu;
pub mod history;
pub mod host;
pub mod memory_bandwidth;
pub mod snapshot;
pub mod sysfs;
