//! The live rig as the planner sees it: telemetry's latest sample turned into placement
//! devices (free VRAM per GPU, available host RAM). Lives here, not in `rigdeck-placement`, so
//! the planner stays free of telemetry.

use rigdeck_placement::rig::{degraded, Margins};
use rigdeck_placement::{DeviceId, DeviceSpec};

use rigdeck_telemetry::snapshot::{GpuReadout, RigSample};

/// The live rig: each GPU's free VRAM now (what a new engine can have), available host RAM.
/// Lost GPUs are left out.
pub fn live_devices(sample: &RigSample, margins: &Margins) -> Vec<DeviceSpec> {
    let mut devices = gpu_devices(&sample.gpus, margins);
    devices.push(DeviceSpec {
        id: DeviceId::Cpu,
        name: format!(
            "CPU RAM · {}",
            sample.host.cpu.model.as_deref().unwrap_or("host")
        ),
        capacity_bytes: sample.host.memory.available_bytes,
        reserve_bytes: margins
            .ram_reserve_bytes
            .min(sample.host.memory.available_bytes / 4),
        overhead_bytes: 0,
        bandwidth_bytes_per_s: margins.cpu_bandwidth_bytes_per_s,
        link_degraded: false,
        correction: None,
    });
    devices
}

/// Each GPU NVML reads as a placement device with its free VRAM now.
pub fn gpu_devices(gpus: &GpuReadout, margins: &Margins) -> Vec<DeviceSpec> {
    gpus.gpus
        .iter()
        .filter(|g| g.lost.is_none())
        .filter_map(|g| {
            let memory = g.memory?;
            let link = g.pcie;
            Some(DeviceSpec {
                id: DeviceId::Gpu(g.index),
                name: format!("GPU {} · {}", g.index, g.name.as_deref().unwrap_or("unknown")),
                capacity_bytes: memory.free_bytes,
                reserve_bytes: margins.gpu_reserve_bytes,
                overhead_bytes: margins.gpu_overhead_bytes,
                bandwidth_bytes_per_s: g.peak_bandwidth_bytes_per_s,
                link_degraded: matches!((link.width_current, link.width_max), (Some(w), Some(m)) if degraded(w, m)),
                correction: None,
            })
        })
        .collect()
}
