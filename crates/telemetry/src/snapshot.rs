//! Immutable telemetry snapshots: what the collectors produce and what goes over the wire.
//!
//! Units stay raw (bytes, milli-watts, milli-degrees Celsius, bytes per second, MHz); the UI
//! formats them. A value the hardware or driver does not report is `None`, never an error.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
pub type UnixMillis = i64;

/// One complete reading of the rig: every GPU and the host, taken at the same tick.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RigSample {
    pub at_ms: UnixMillis,
    pub gpus: GpuReadout,
    pub host: HostSnapshot,
}

/// The state of the NVIDIA side of the rig at one tick.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuReadout {
    pub driver: DriverState,
    pub gpus: Vec<GpuSnapshot>,
}

/// Whether NVML could be used at all.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DriverState {
    /// NVML is loaded and answered.
    Ready {
        driver_version: Option<String>,
        /// CUDA driver API version as NVML reports it, e.g. 13000 for 13.0.
        cuda_driver_version: Option<i32>,
    },
    /// No NVIDIA driver (libnvidia-ml) on this machine: GPU telemetry is off, the rest works.
    NoDriver { message: String },
    /// The library loaded but failed; the message names the cause and the fix.
    Failed { message: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuSnapshot {
    /// NVML index (the order `nvidia-smi` uses).
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// Domain:bus:device.function, e.g. `00000000:01:00.0`.
    pub pci_bus_id: Option<String>,
    /// Set when the GPU stopped answering (fallen off the bus); the other values are then absent.
    pub lost: Option<String>,
    pub memory: Option<GpuMemory>,
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_memory_pct: Option<u32>,
    pub temperature_mc: Option<i64>,
    pub memory_temperature_mc: Option<i64>,
    pub fan_pct: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub clocks: GpuClocks,
    pub memory_bus_width_bits: Option<u32>,
    /// Peak memory bandwidth implied by bus width and maximum memory clock (double data rate).
    pub peak_bandwidth_bytes_per_s: Option<u64>,
    pub pcie: PcieLink,
    /// NVML clock-throttle reasons currently active, as stable snake_case names.
    pub throttle_reasons: Option<Vec<String>>,
    pub compute_capability: Option<ComputeCapability>,
    pub numa_node: Option<u32>,
    pub processes: Vec<GpuProcess>,
}

impl GpuSnapshot {
    /// A GPU known only by its index; the collector fills in what the driver answers.
    pub fn blank(index: u32) -> Self {
        Self {
            index,
            name: None,
            uuid: None,
            pci_bus_id: None,
            lost: None,
            memory: None,
            utilization_gpu_pct: None,
            utilization_memory_pct: None,
            temperature_mc: None,
            memory_temperature_mc: None,
            fan_pct: None,
            power_mw: None,
            power_limit_mw: None,
            clocks: GpuClocks::default(),
            memory_bus_width_bits: None,
            peak_bandwidth_bytes_per_s: None,
            pcie: PcieLink::default(),
            throttle_reasons: None,
            compute_capability: None,
            numa_node: None,
            processes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuMemory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuClocks {
    pub sm_mhz: Option<u32>,
    pub sm_max_mhz: Option<u32>,
    pub memory_mhz: Option<u32>,
    pub memory_max_mhz: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PcieLink {
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
    pub tx_bytes_per_s: Option<u64>,
    pub rx_bytes_per_s: Option<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ComputeCapability {
    pub major: i32,
    pub minor: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: Option<String>,
    /// VRAM the process holds on this GPU; `None` where the driver does not say (e.g. some WSL setups).
    pub used_bytes: Option<u64>,
    pub kind: GpuProcessKind,
    /// True when Rigdeck itself started this process (an engine it supervises).
    pub started_by_rigdeck: bool,
    /// The Rigdeck instance (launch profile) this engine runs, when Rigdeck started it.
    pub rigdeck_instance: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GpuProcessKind {
    Compute,
    Graphics,
}

/// The host side: CPU, memory, NUMA and the disks that hold models.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HostSnapshot {
    pub hostname: Option<String>,
    pub cpu: CpuSnapshot,
    pub memory: HostMemory,
    pub load_average: Option<LoadAverage>,
    pub numa_nodes: Vec<NumaNode>,
    pub model_folders: Vec<FolderSpace>,
    /// Things that could not be read this tick (an unreadable /sys entry, say), each naming the path.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuSnapshot {
    pub model: Option<String>,
    pub physical_cores: Option<u32>,
    pub logical_cores: u32,
    /// Average over all logical CPUs, 0–100.
    pub usage_pct: f32,
    pub cores: Vec<CoreLoad>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CoreLoad {
    /// Logical CPU number as the kernel numbers it (`cpuN`).
    pub id: u32,
    pub usage_pct: f32,
    pub frequency_mhz: Option<u64>,
    /// Performance or efficiency core where the kernel exposes a hybrid layout; `None` otherwise.
    pub kind: Option<CoreKind>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CoreKind {
    Performance,
    Efficiency,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostMemory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_used_bytes: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct LoadAverage {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderSpace {
    pub path: String,
    pub exists: bool,
    /// Mount point of the file system that holds the folder (or its nearest existing parent).
    pub mount_point: Option<String>,
    pub available_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}
