//! The rig's live readings as Prometheus gauges for `/metrics`: per GPU (memory, load,
//! temperatures, power, clocks, PCIe link now and at best) and the host (CPU, memory, swap).
//! Units follow Prometheus conventions (bytes, ratios, Celsius, watts, hertz).

use rigdeck_core::gateway::metrics::PromText;
use rigdeck_core::telemetry::snapshot::{GpuSnapshot, RigSample};

/// One GPU gauge: its name, help, and how to read it from a snapshot.
struct GpuGauge {
    name: &'static str,
    help: &'static str,
    read: fn(&GpuSnapshot) -> Option<f64>,
}

const GPU_GAUGES: &[GpuGauge] = &[
    GpuGauge {
        name: "rigdeck_gpu_memory_used_bytes",
        help: "GPU memory in use.",
        read: |g| g.memory.map(|m| m.used_bytes as f64),
    },
    GpuGauge {
        name: "rigdeck_gpu_memory_total_bytes",
        help: "GPU memory in all.",
        read: |g| g.memory.map(|m| m.total_bytes as f64),
    },
    GpuGauge {
        name: "rigdeck_gpu_utilization_ratio",
        help: "GPU compute load, 0-1.",
        read: |g| g.utilization_gpu_pct.map(|p| f64::from(p) / 100.0),
    },
    GpuGauge {
        name: "rigdeck_gpu_temperature_celsius",
        help: "GPU core temperature.",
        read: |g| g.temperature_mc.map(|mc| mc as f64 / 1000.0),
    },
    GpuGauge {
        name: "rigdeck_gpu_memory_temperature_celsius",
        help: "GPU memory temperature.",
        read: |g| g.memory_temperature_mc.map(|mc| mc as f64 / 1000.0),
    },
    GpuGauge {
        name: "rigdeck_gpu_power_watts",
        help: "GPU power draw.",
        read: |g| g.power_mw.map(|mw| f64::from(mw) / 1000.0),
    },
    GpuGauge {
        name: "rigdeck_gpu_power_limit_watts",
        help: "GPU power limit.",
        read: |g| g.power_limit_mw.map(|mw| f64::from(mw) / 1000.0),
    },
    GpuGauge {
        name: "rigdeck_gpu_sm_clock_hertz",
        help: "GPU SM clock.",
        read: |g| g.clocks.sm_mhz.map(|mhz| f64::from(mhz) * 1e6),
    },
    GpuGauge {
        name: "rigdeck_gpu_memory_clock_hertz",
        help: "GPU memory clock.",
        read: |g| g.clocks.memory_mhz.map(|mhz| f64::from(mhz) * 1e6),
    },
    GpuGauge {
        name: "rigdeck_gpu_pcie_link_width",
        help: "PCIe lanes in use now.",
        read: |g| g.pcie.width_current.map(f64::from),
    },
    GpuGauge {
        name: "rigdeck_gpu_pcie_link_width_max",
        help: "PCIe lanes the card and slot allow.",
        read: |g| g.pcie.width_max.map(f64::from),
    },
    GpuGauge {
        name: "rigdeck_gpu_pcie_link_generation",
        help: "PCIe generation in use now.",
        read: |g| g.pcie.gen_current.map(f64::from),
    },
    GpuGauge {
        name: "rigdeck_gpu_pcie_link_generation_max",
        help: "PCIe generation the card and slot allow.",
        read: |g| g.pcie.gen_max.map(f64::from),
    },
];

pub fn write(out: &mut PromText, sample: &RigSample) {
    for gauge in GPU_GAUGES {
        out.family(gauge.name, "gauge", gauge.help);
        for gpu in &sample.gpus.gpus {
            if let Some(value) = (gauge.read)(gpu) {
                let index = gpu.index.to_string();
                let name = gpu.name.as_deref().unwrap_or("");
                let uuid = gpu.uuid.as_deref().unwrap_or("");
                out.sample(
                    gauge.name,
                    &[("gpu", &index), ("name", name), ("uuid", uuid)],
                    value,
                );
            }
        }
    }
    let host = &sample.host;
    let gauges = [
        (
            "rigdeck_host_cpu_utilization_ratio",
            "CPU load over all logical CPUs, 0-1.",
            f64::from(host.cpu.usage_pct) / 100.0,
        ),
        (
            "rigdeck_host_memory_total_bytes",
            "Host memory in all.",
            host.memory.total_bytes as f64,
        ),
        (
            "rigdeck_host_memory_available_bytes",
            "Host memory available to programs.",
            host.memory.available_bytes as f64,
        ),
        (
            "rigdeck_host_swap_used_bytes",
            "Swap in use.",
            host.memory.swap_used_bytes as f64,
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, "gauge", help);
        out.sample(name, &[], value);
    }
}
