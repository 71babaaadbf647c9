//! GPU telemetry through NVML (nvml-wrapper): one `NvmlSource` per process, loaded once.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::snapshot::{
    ComputeCapability, DriverState, GpuClocks, GpuMemory, GpuProcess, GpuProcessKind, GpuReadout,
    GpuSnapshot, PcieLink,
};

/// Names a different NVML library (the NVML test double in tests and benchmarks).
pub const NVML_LIBRARY_ENV: &str = "RIGDECK_NVML_LIBRARY";

/// NVML's field id for the memory (HBM/GDDR) temperature.
const FIELD_MEMORY_TEMPERATURE: u32 = 82;

/// The loaded NVML library, or why there is none.
pub struct NvmlSource {
    nvml: Option<Nvml>,
    unavailable: Option<DriverState>,
}

impl NvmlSource {
    /// Loads NVML once: from `RIGDECK_NVML_LIBRARY` when set, else the driver's library.
    pub fn from_env() -> Self {
        Self::open(
            std::env::var_os(NVML_LIBRARY_ENV)
                .map(PathBuf::from)
                .as_deref(),
        )
    }

    /// Loads NVML from `library`, or from the driver's usual names. Never fails: a machine
    /// without the NVIDIA driver gets a `NoDriver` state and everything else keeps working.
    pub fn open(library: Option<&Path>) -> Self {
        match init_nvml(library) {
            Ok(nvml) => Self {
                nvml: Some(nvml),
                unavailable: None,
            },
            Err(state) => {
                tracing::warn!("GPU telemetry is off: {}", state_message(&state));
                Self {
                    nvml: None,
                    unavailable: Some(state),
                }
            }
        }
    }

    /// Reads every GPU. A GPU that stopped answering is reported as lost; the others are unaffected.
    pub fn read(&self, started_by_rigdeck: &HashMap<u32, String>) -> GpuReadout {
        let Some(nvml) = &self.nvml else {
            let driver = self
                .unavailable
                .clone()
                .unwrap_or_else(|| no_driver("NVML is not loaded".into()));
            return GpuReadout {
                driver,
                gpus: Vec::new(),
            };
        };
        let driver = DriverState::Ready {
            driver_version: nvml.sys_driver_version().ok(),
            cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        };
        let count = match nvml.device_count() {
            Ok(count) => count,
            Err(err) => {
                let message = format!(
                    "NVML could not count the GPUs: {err}; check `nvidia-smi` and the driver"
                );
                return GpuReadout {
                    driver: DriverState::Failed { message },
                    gpus: Vec::new(),
                };
            }
        };
        let gpus = (0..count)
            .map(|index| read_gpu(nvml, index, started_by_rigdeck))
            .collect();
        GpuReadout { driver, gpus }
    }
}

fn init_nvml(library: Option<&Path>) -> Result<Nvml, DriverState> {
    if let Some(path) = library {
        return Nvml::builder()
            .lib_path(path.as_os_str())
            .init()
            .map_err(|err| init_failure(err, path));
    }
    // Many drivers install only the versioned name; bottom and nvtop retry with it too.
    Nvml::init().or_else(|first| match first {
        NvmlError::LibloadingError(_) => Nvml::builder()
            .lib_path(OsStr::new("libnvidia-ml.so.1"))
            .init()
            .map_err(|err| init_failure(err, Path::new("libnvidia-ml.so.1"))),
        other => Err(init_failure(other, Path::new("libnvidia-ml.so"))),
    })
}

fn init_failure(err: NvmlError, library: &Path) -> DriverState {
    match err {
        NvmlError::LibloadingError(cause) => no_driver(format!(
            "no NVIDIA driver found: {} could not be loaded ({cause}); install the NVIDIA driver to see GPUs — host monitoring works without it",
            library.display()
        )),
        NvmlError::DriverNotLoaded => no_driver(
            "no NVIDIA driver found: the NVIDIA kernel module is not loaded; load it (or reboot after installing the driver)".into(),
        ),
        NvmlError::NoPermission => DriverState::Failed {
            message: "NVML refused access (no permission): run Rigdeck as a user allowed to use the GPUs".into(),
        },
        other => DriverState::Failed {
            message: format!("NVML failed to start ({other}) from {}: check `nvidia-smi`", library.display()),
        },
    }
}

fn no_driver(message: String) -> DriverState {
    DriverState::NoDriver { message }
}

fn state_message(state: &DriverState) -> &str {
    match state {
        DriverState::NoDriver { message } | DriverState::Failed { message } => message,
        DriverState::Ready { .. } => "ready",
    }
}

/// Collects one value, noting when the GPU has fallen off the bus. Every other error
/// (not supported, a symbol the library lacks, …) just means the value is absent.
struct Reader {
    lost: Option<String>,
}

impl Reader {
    fn get<T>(&mut self, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::GpuLost) => {
                self.lost.get_or_insert_with(|| {
                    "the GPU has fallen off the bus or stopped answering".into()
                });
                None
            }
            Err(_) => None,
        }
    }
}

fn read_gpu(nvml: &Nvml, index: u32, started_by_rigdeck: &HashMap<u32, String>) -> GpuSnapshot {
    let mut reader = Reader { lost: None };
    let device = match nvml.device_by_index(index) {
        Ok(device) => Some(device),
        Err(err) => {
            reader.lost = Some(format!("NVML cannot open GPU {index}: {err}"));
            None
        }
    };
    let mut snapshot = GpuSnapshot::blank(index);
    if let Some(device) = device {
        fill_snapshot(
            &mut snapshot,
            nvml,
            &device,
            &mut reader,
            started_by_rigdeck,
        );
    }
    if let Some(reason) = reader.lost {
        // A lost GPU keeps only its identity; half-read figures would mislead.
        return GpuSnapshot {
            lost: Some(reason),
            ..identity_only(snapshot)
        };
    }
    snapshot
}

fn fill_snapshot(
    s: &mut GpuSnapshot,
    nvml: &Nvml,
    device: &Device<'_>,
    r: &mut Reader,
    started_by_rigdeck: &HashMap<u32, String>,
) {
    s.name = r.get(device.name());
    s.uuid = r.get(device.uuid());
    s.pci_bus_id = r.get(device.pci_info()).map(|pci| pci.bus_id);
    s.memory = r.get(device.memory_info()).map(|m| GpuMemory {
        total_bytes: m.total,
        used_bytes: m.used,
        free_bytes: m.free,
    });
    if let Some(util) = r.get(device.utilization_rates()) {
        s.utilization_gpu_pct = Some(util.gpu);
        s.utilization_memory_pct = Some(util.memory);
    }
    s.temperature_mc = r
        .get(device.temperature(TemperatureSensor::Gpu))
        .map(|c| i64::from(c) * 1000);
    s.memory_temperature_mc = memory_temperature(device, r);
    s.fan_pct = r.get(device.fan_speed(0));
    s.power_mw = r.get(device.power_usage());
    s.power_limit_mw = r.get(device.enforced_power_limit());
    s.clocks = GpuClocks {
        sm_mhz: r.get(device.clock_info(Clock::SM)),
        sm_max_mhz: r.get(device.max_clock_info(Clock::SM)),
        memory_mhz: r.get(device.clock_info(Clock::Memory)),
        memory_max_mhz: r.get(device.max_clock_info(Clock::Memory)),
    };
    s.memory_bus_width_bits = r.get(device.memory_bus_width());
    s.peak_bandwidth_bytes_per_s = peak_bandwidth(s.memory_bus_width_bits, s.clocks.memory_max_mhz);
    s.pcie = PcieLink {
        gen_current: r.get(device.current_pcie_link_gen()),
        gen_max: r.get(device.max_pcie_link_gen()),
        width_current: r.get(device.current_pcie_link_width()),
        width_max: r.get(device.max_pcie_link_width()),
        tx_bytes_per_s: r
            .get(device.pcie_throughput(PcieUtilCounter::Send))
            .map(kib_to_bytes),
        rx_bytes_per_s: r
            .get(device.pcie_throughput(PcieUtilCounter::Receive))
            .map(kib_to_bytes),
    };
    s.throttle_reasons = r
        .get(device.current_throttle_reasons())
        .map(throttle_reason_names);
    s.compute_capability = r
        .get(device.cuda_compute_capability())
        .map(|cc| ComputeCapability {
            major: cc.major,
            minor: cc.minor,
        });
    s.numa_node = r.get(device.numa_node_id());
    s.processes = processes(nvml, device, r, started_by_rigdeck);
}

fn memory_temperature(device: &Device<'_>, r: &mut Reader) -> Option<i64> {
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let fields = r.get(device.field_values_for(&[FieldId(FIELD_MEMORY_TEMPERATURE)]))?;
    let sample = fields.into_iter().next()?.ok()?;
    let celsius = match sample.value.ok()? {
        SampleValue::U32(v) => i64::from(v),
        SampleValue::U64(v) => i64::try_from(v).ok()?,
        SampleValue::I64(v) => v,
        SampleValue::F64(v) => v as i64,
    };
    // The driver answers 0 on cards without a memory sensor rather than "not supported".
    (celsius > 0).then_some(celsius * 1000)
}

fn processes(
    nvml: &Nvml,
    device: &Device<'_>,
    r: &mut Reader,
    ours: &HashMap<u32, String>,
) -> Vec<GpuProcess> {
    let compute = r
        .get(device.running_compute_processes())
        .unwrap_or_default();
    let graphics = r
        .get(device.running_graphics_processes())
        .unwrap_or_default();
    let mut seen = HashSet::new();
    let tagged = compute
        .into_iter()
        .map(|p| (p, GpuProcessKind::Compute))
        .chain(graphics.into_iter().map(|p| (p, GpuProcessKind::Graphics)));
    tagged
        .filter(|(p, _)| seen.insert(p.pid))
        .map(|(p, kind)| to_gpu_process(nvml, p, kind, ours))
        .collect()
}

fn to_gpu_process(
    nvml: &Nvml,
    p: ProcessInfo,
    kind: GpuProcessKind,
    ours: &HashMap<u32, String>,
) -> GpuProcess {
    let instance = instance_of(p.pid, ours);
    GpuProcess {
        pid: p.pid,
        name: process_name(nvml, p.pid),
        used_bytes: match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(bytes),
            UsedGpuMemory::Unavailable => None,
        },
        kind,
        started_by_rigdeck: instance.is_some(),
        rigdeck_instance: instance,
    }
}

/// The Rigdeck instance holding `pid`: the engine itself, or one of its workers (vLLM and SGLang
/// hold VRAM in child processes of the engine's process group, which the engine leads).
fn instance_of(pid: u32, ours: &HashMap<u32, String>) -> Option<String> {
    if let Some(name) = ours.get(&pid) {
        return Some(name.clone());
    }
    if ours.is_empty() {
        return None;
    }
    let stat = rigdeck_supervisor::process::proc_stat(i32::try_from(pid).ok()?)?;
    ours.get(&u32::try_from(stat.pgrp).ok()?).cloned()
}

/// NVML's name first (it sees processes in other PID namespaces), then /proc.
fn process_name(nvml: &Nvml, pid: u32) -> Option<String> {
    let from_nvml = nvml
        .sys_process_name(pid, 256)
        .ok()
        .filter(|n| !n.is_empty());
    from_nvml.or_else(|| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .map(|n| n.trim().to_owned())
    })
}

/// Peak bandwidth = bus width in bytes × memory clock × 2 (NVML reports the clock of a
/// double-data-rate interface): 384 bit × 9751 MHz × 2 ≈ 936 GB/s for an RTX 3090.
pub fn peak_bandwidth(bus_width_bits: Option<u32>, memory_max_mhz: Option<u32>) -> Option<u64> {
    let bytes_per_transfer = u64::from(bus_width_bits?) / 8;
    Some(bytes_per_transfer * u64::from(memory_max_mhz?) * 1_000_000 * 2)
}

fn kib_to_bytes(kib: u32) -> u64 {
    u64::from(kib) * 1024
}

/// Stable snake_case names for the active throttle reasons; `gpu_idle` and `none` are left
/// out because they are normal states, not reasons for concern.
pub fn throttle_reason_names(reasons: ThrottleReasons) -> Vec<String> {
    let named = [
        (
            ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (
            ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
        ),
        (
            ThrottleReasons::DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
        ),
    ];
    named
        .iter()
        .filter(|(bit, _)| reasons.contains(*bit))
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

fn identity_only(s: GpuSnapshot) -> GpuSnapshot {
    GpuSnapshot {
        name: s.name,
        uuid: s.uuid,
        pci_bus_id: s.pci_bus_id,
        ..GpuSnapshot::blank(s.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_in_an_engines_process_group_counts_as_that_engine() {
        use std::os::unix::process::CommandExt as _;
        let spawn = |group: i32| {
            std::process::Command::new("sleep")
                .arg("30")
                .process_group(group)
                .spawn()
                .unwrap()
        };
        // The engine leads its own group; its worker joins it, as vLLM's do.
        let mut engine = spawn(0);
        let mut worker = spawn(engine.id() as i32);
        let ours = HashMap::from([(engine.id(), "vl".to_owned())]);
        assert_eq!(instance_of(engine.id(), &ours).as_deref(), Some("vl"));
        assert_eq!(instance_of(worker.id(), &ours).as_deref(), Some("vl"));
        assert_eq!(instance_of(worker.id(), &HashMap::new()), None);
        assert_eq!(instance_of(std::process::id(), &ours), None);
        for child in [&mut engine, &mut worker] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn peak_bandwidth_matches_the_vendor_figures() {
        // RTX 3090: 384-bit GDDR6X at 19.5 Gbps ≈ 936 GB/s.
        assert_eq!(peak_bandwidth(Some(384), Some(9751)), Some(936_096_000_000));
        // H100/GH200 HBM3: 5120-bit at 2619 MHz ≈ 3.35 TB/s.
        assert_eq!(
            peak_bandwidth(Some(5120), Some(2619)),
            Some(3_352_320_000_000)
        );
        assert_eq!(peak_bandwidth(None, Some(2619)), None);
    }

    #[test]
    fn idle_is_not_a_throttle_reason() {
        let names =
            throttle_reason_names(ThrottleReasons::GPU_IDLE | ThrottleReasons::SW_POWER_CAP);
        assert_eq!(names, vec!["sw_power_cap".to_owned()]);
    }

    #[test]
    fn a_missing_library_means_no_driver_not_a_failure() {
        let source = NvmlSource::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        let readout = source.read(&HashMap::new());
        match readout.driver {
            DriverState::NoDriver { message } => {
                assert!(message.contains("no NVIDIA driver found"), "{message}")
            }
            other => panic!("expected no_driver, got {other:?}"),
        }
        assert!(readout.gpus.is_empty());
    }
}
