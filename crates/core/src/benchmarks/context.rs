//! What a benchmark records about the rig around it: a hardware snapshot before and after
//! (driver, per-GPU clocks, temperatures, power and limits, PCIe links, throttle reasons; the
//! CPU, its governor, memory) and a compact telemetry point each second during the run, so a
//! throttling GPU is visible next to the numbers.

use serde_json::{json, Value};

use rigdeck_telemetry::snapshot::{DriverState, GpuSnapshot, RigSample};

/// The full snapshot kept as `hardware_before` / `hardware_after`.
pub fn hardware(sample: Option<&RigSample>) -> Value {
    let Some(sample) = sample else {
        return json!({"unavailable": "no telemetry sample yet"});
    };
    let driver = match &sample.gpus.driver {
        DriverState::Ready {
            driver_version,
            cuda_driver_version,
        } => {
            json!({"driver_version": driver_version, "cuda_driver_version": cuda_driver_version})
        }
        DriverState::NoDriver { message } | DriverState::Failed { message } => {
            json!({"unavailable": message})
        }
    };
    let host = &sample.host;
    json!({
        "at_ms": sample.at_ms,
        "driver": driver,
        "gpus": sample.gpus.gpus.iter().map(gpu).collect::<Vec<_>>(),
        "cpu": {
            "model": host.cpu.model,
            "physical_cores": host.cpu.physical_cores,
            "logical_cores": host.cpu.logical_cores,
            "usage_pct": host.cpu.usage_pct,
            "governor": cpu_governor(),
        },
        "memory": host.memory,
        "numa_nodes": host.numa_nodes.len(),
    })
}

fn gpu(g: &GpuSnapshot) -> Value {
    json!({
        "index": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "temperature_c": g.temperature_mc.map(|t| t as f64 / 1000.0),
        "power_w": g.power_mw.map(|p| f64::from(p) / 1000.0),
        "power_limit_w": g.power_limit_mw.map(|p| f64::from(p) / 1000.0),
        "sm_clock_mhz": g.clocks.sm_mhz,
        "sm_clock_max_mhz": g.clocks.sm_max_mhz,
        "memory_clock_mhz": g.clocks.memory_mhz,
        "memory_clock_max_mhz": g.clocks.memory_max_mhz,
        "pcie": {
            "gen": g.pcie.gen_current, "gen_max": g.pcie.gen_max,
            "width": g.pcie.width_current, "width_max": g.pcie.width_max,
        },
        "memory_used_bytes": g.memory.map(|m| m.used_bytes),
        "memory_total_bytes": g.memory.map(|m| m.total_bytes),
        "throttle_reasons": g.throttle_reasons,
    })
}

/// One point of the run's telemetry, `t_ms` after its start.
pub fn telemetry_point(sample: &RigSample, t_ms: i64) -> Value {
    let gpus: Vec<Value> = sample
        .gpus
        .gpus
        .iter()
        .map(|g| {
            json!({
                "index": g.index,
                "name": g.name,
                "util_pct": g.utilization_gpu_pct,
                "temp_c": g.temperature_mc.map(|t| t as f64 / 1000.0),
                "sm_clock_mhz": g.clocks.sm_mhz,
                "power_w": g.power_mw.map(|p| f64::from(p) / 1000.0),
                "mem_used_bytes": g.memory.map(|m| m.used_bytes),
            })
        })
        .collect();
    json!({"t_ms": t_ms, "gpus": gpus, "cpu_util_pct": sample.host.cpu.usage_pct})
}

/// The CPU frequency governor (`performance`, `powersave`, …) where Linux exposes it: a
/// `powersave` host can cost CPU-offloaded layers a good share of their speed.
fn cpu_governor() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        .ok()
        .map(|s| s.trim().to_owned())
}
