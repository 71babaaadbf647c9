//! The rig description file: its serde model, validation, and evaluation of time-varying values.
//!
//! Parsing is strict (`deny_unknown_fields`) on purpose: a typo such as `temprature_c` in a
//! fixture would otherwise silently turn into "not supported" and a test would pass for the
//! wrong reason.

use std::collections::HashSet;
use std::f64::consts::TAU;
use std::fmt;

use nvml_wrapper_sys::bindings as sys;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// One whole rig: driver facts plus the GPUs in NVML index order.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rig {
    /// What `nvmlSystemGetDriverVersion` answers; absent means NOT_SUPPORTED.
    pub driver_version: Option<String>,
    /// What `nvmlSystemGetCudaDriverVersion_v2` answers (e.g. 13000 for CUDA 13.0).
    pub cuda_driver_version: Option<i32>,
    /// Required (may be empty) so that a file that forgot the list fails loudly.
    pub gpus: Vec<Gpu>,
}

/// One GPU. Only the identity fields and the VRAM size are mandatory; every other
/// field models a query the card may not support.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    pub uuid: String,
    /// `DDDDDDDD:BB:DD.F`, as NVML's `busId` field (and `nvidia-smi`) writes it.
    pub pci_bus_id: String,
    pub memory_total_mib: u64,
    /// Absent: the sum of the processes' `used_mib`.
    pub memory_used_mib: Option<Scalar>,
    pub utilization_gpu: Option<Scalar>,
    pub utilization_memory: Option<Scalar>,
    pub temperature_c: Option<Scalar>,
    /// Answered through `nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)`.
    pub memory_temperature_c: Option<Scalar>,
    /// Present: the card has one fan running at this percentage.
    pub fan_pct: Option<Scalar>,
    pub power_w: Option<Scalar>,
    pub power_limit_w: Option<Scalar>,
    pub clocks: Option<Clocks>,
    pub memory_bus_width_bits: Option<u32>,
    pub pcie: Option<Pcie>,
    pub throttle_reasons: Option<Vec<ThrottleReason>>,
    pub compute_capability: Option<[i32; 2]>,
    pub numa_node: Option<u32>,
    /// Compute processes. Absent: the process query is NOT_SUPPORTED; `[]`: none running.
    pub processes: Option<Vec<Process>>,
    /// The card fell off the bus: every query on it answers NVML_ERROR_GPU_IS_LOST.
    #[serde(default)]
    pub lost: bool,
}

/// Clock speeds in MHz. NVML's graphics clock is answered with the SM clock unless
/// `graphics_mhz` is given, because on the cards Rigdeck targets they are the same domain.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    pub sm_mhz: Option<Scalar>,
    pub sm_max_mhz: Option<Scalar>,
    pub graphics_mhz: Option<Scalar>,
    pub graphics_max_mhz: Option<Scalar>,
    pub mem_mhz: Option<Scalar>,
    pub mem_max_mhz: Option<Scalar>,
    pub video_mhz: Option<Scalar>,
    pub video_max_mhz: Option<Scalar>,
}

/// The PCIe link: current and maximum generation/width plus throughput in KB/s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    pub gen: Option<u32>,
    pub max_gen: Option<u32>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
    pub tx_kbps: Option<Scalar>,
    pub rx_kbps: Option<Scalar>,
}

/// A process holding a compute context (and VRAM) on the GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    pub used_mib: Scalar,
    /// What `nvmlSystemGetProcessName` answers for this pid; absent: `/proc/<pid>/comm`.
    pub name: Option<String>,
}

/// Clock throttle reasons by stable snake_case name, mapped to NVML's bit values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThrottleReason {
    GpuIdle,
    ApplicationsClocksSetting,
    /// Older NVML name for the same bit as `applications_clocks_setting`.
    UserDefinedClocks,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
}

impl ThrottleReason {
    /// The bit in NVML's `clocksThrottleReasons` mask, taken from the bindings so it
    /// cannot drift from what nvml-wrapper decodes.
    pub fn bit(self) -> u64 {
        let bit = match self {
            Self::GpuIdle => sys::nvmlClocksThrottleReasonGpuIdle,
            Self::ApplicationsClocksSetting => {
                sys::nvmlClocksThrottleReasonApplicationsClocksSetting
            }
            Self::UserDefinedClocks => sys::nvmlClocksThrottleReasonUserDefinedClocks,
            Self::SwPowerCap => sys::nvmlClocksThrottleReasonSwPowerCap,
            Self::HwSlowdown => sys::nvmlClocksThrottleReasonHwSlowdown,
            Self::SyncBoost => sys::nvmlClocksThrottleReasonSyncBoost,
            Self::SwThermalSlowdown => sys::nvmlClocksThrottleReasonSwThermalSlowdown,
            Self::HwThermalSlowdown => sys::nvmlClocksThrottleReasonHwThermalSlowdown,
            Self::HwPowerBrakeSlowdown => sys::nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
            Self::DisplayClockSetting => sys::nvmlClocksThrottleReasonDisplayClockSetting,
        };
        u64::from(bit)
    }
}

/// A numeric value that is either fixed or a smooth wave over wall-clock time, so live
/// charts move without a test having to rewrite the file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Fixed(f64),
    Wave(Wave),
}

/// `{"wave": {"min": 10, "max": 90, "period_s": 20, "phase_s": 0}}`: a raised cosine that
/// starts at `min` at (Unix time + `phase_s`) = 0 mod `period_s` and peaks at `max` half a
/// period later. `phase_s` lets cards in one rig move out of step.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wave {
    pub min: f64,
    pub max: f64,
    pub period_s: f64,
    #[serde(default)]
    pub phase_s: f64,
}

impl Scalar {
    /// The value at `now_s` (seconds since the Unix epoch).
    pub fn at(&self, now_s: f64) -> f64 {
        match *self {
            Scalar::Fixed(v) => v,
            Scalar::Wave(w) => {
                let cycle = ((now_s + w.phase_s) / w.period_s).rem_euclid(1.0);
                w.min + (w.max - w.min) * 0.5 * (1.0 - (TAU * cycle).cos())
            }
        }
    }

    /// The value rounded to a C `unsigned int`; NVML has no negative readings here.
    pub fn at_u32(&self, now_s: f64) -> u32 {
        to_u32(self.at(now_s))
    }

    fn check(&self, path: &str) -> Result<(), String> {
        match *self {
            Scalar::Fixed(v) if !v.is_finite() => Err(format!("{path}: not a finite number")),
            Scalar::Fixed(_) => Ok(()),
            Scalar::Wave(w) => {
                if !(w.min.is_finite() && w.max.is_finite() && w.phase_s.is_finite()) {
                    Err(format!("{path}: wave min, max and phase_s must be finite"))
                } else if !(w.period_s.is_finite() && w.period_s > 0.0) {
                    Err(format!("{path}: wave period_s must be greater than 0"))
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// Saturating, rounding conversion: waves and fractional values land on whole units.
pub fn to_u32(v: f64) -> u32 {
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        v.round() as u32
    }
}

/// MiB (possibly fractional, from a wave) to bytes, saturating at zero.
pub fn mib_to_bytes(mib: f64) -> u64 {
    if mib.is_nan() || mib <= 0.0 {
        0
    } else {
        // f64 -> u64 `as` saturates at u64::MAX, which is fine for absurd inputs.
        (mib * 1024.0 * 1024.0).round() as u64
    }
}

// A hand-written Deserialize so a bad value gets a message that says what is allowed,
// instead of serde's opaque "data did not match any variant of untagged enum".
impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;

        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or {\"wave\": {\"min\": .., \"max\": .., \"period_s\": ..}}")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Fixed(v as f64))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Fixed(v as f64))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Fixed(v))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                let mut wave = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "wave" {
                        return Err(de::Error::unknown_field(&key, &["wave"]));
                    }
                    if wave.is_some() {
                        return Err(de::Error::duplicate_field("wave"));
                    }
                    wave = Some(map.next_value::<Wave>()?);
                }
                wave.map(Scalar::Wave)
                    .ok_or_else(|| de::Error::missing_field("wave"))
            }
        }

        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// PCI location parsed from the bus id, for `nvmlPciInfo_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciLocation {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

/// Parses `DDDDDDDD:BB:DD.F` (also the legacy `DDDD:BB:DD.F`) in hex.
pub fn parse_pci_bus_id(id: &str) -> Option<PciLocation> {
    let mut parts = id.split(':');
    let domain = parts.next()?;
    let bus = parts.next()?;
    let rest = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, max_len: usize| {
        if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            None
        } else {
            u32::from_str_radix(s, 16).ok()
        }
    };
    Some(PciLocation {
        domain: hex(domain, 8)?,
        bus: hex(bus, 2)?,
        device: hex(device, 2)?,
        function: hex(function, 1)?,
    })
}

impl Rig {
    /// Parses and validates a rig file's text. The error is one line, ready to follow
    /// "rig file '...' is not valid: ".
    pub fn parse(text: &str) -> Result<Rig, String> {
        let rig: Rig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        rig.validate()?;
        Ok(rig)
    }

    /// Checks what serde cannot: lengths that must fit NVML's fixed buffers, bus id
    /// syntax, unique identities, and sane wave parameters.
    fn validate(&self) -> Result<(), String> {
        if let Some(v) = &self.driver_version {
            fits(
                "driver_version",
                v,
                sys::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE,
            )?;
        }
        let mut uuids = HashSet::new();
        let mut bus_ids = HashSet::new();
        for (i, gpu) in self.gpus.iter().enumerate() {
            let at = |field: &str| format!("gpus[{i}].{field}");
            fits(&at("name"), &gpu.name, sys::NVML_DEVICE_NAME_V2_BUFFER_SIZE)?;
            fits(&at("uuid"), &gpu.uuid, sys::NVML_DEVICE_UUID_V2_BUFFER_SIZE)?;
            if gpu.uuid.is_empty() {
                return Err(format!("{}: must not be empty", at("uuid")));
            }
            if parse_pci_bus_id(&gpu.pci_bus_id).is_none() {
                return Err(format!(
                    "{}: expected DDDDDDDD:BB:DD.F in hex, got '{}'",
                    at("pci_bus_id"),
                    gpu.pci_bus_id
                ));
            }
            if !uuids.insert(gpu.uuid.as_str()) {
                return Err(format!("{}: '{}' used twice", at("uuid"), gpu.uuid));
            }
            if !bus_ids.insert(gpu.pci_bus_id.to_ascii_lowercase()) {
                return Err(format!(
                    "{}: '{}' used twice",
                    at("pci_bus_id"),
                    gpu.pci_bus_id
                ));
            }
            for (field, value) in gpu.scalars() {
                value.check(&at(field))?;
            }
            if let Some(processes) = &gpu.processes {
                for (p, process) in processes.iter().enumerate() {
                    process
                        .used_mib
                        .check(&at(&format!("processes[{p}].used_mib")))?;
                }
            }
        }
        Ok(())
    }
}

impl Gpu {
    /// Every optional time-varying value with its field path, for validation.
    fn scalars(&self) -> Vec<(&'static str, &Scalar)> {
        let mut all = vec![
            ("memory_used_mib", self.memory_used_mib.as_ref()),
            ("utilization_gpu", self.utilization_gpu.as_ref()),
            ("utilization_memory", self.utilization_memory.as_ref()),
            ("temperature_c", self.temperature_c.as_ref()),
            ("memory_temperature_c", self.memory_temperature_c.as_ref()),
            ("fan_pct", self.fan_pct.as_ref()),
            ("power_w", self.power_w.as_ref()),
            ("power_limit_w", self.power_limit_w.as_ref()),
        ];
        if let Some(c) = &self.clocks {
            all.extend([
                ("clocks.sm_mhz", c.sm_mhz.as_ref()),
                ("clocks.sm_max_mhz", c.sm_max_mhz.as_ref()),
                ("clocks.graphics_mhz", c.graphics_mhz.as_ref()),
                ("clocks.graphics_max_mhz", c.graphics_max_mhz.as_ref()),
                ("clocks.mem_mhz", c.mem_mhz.as_ref()),
                ("clocks.mem_max_mhz", c.mem_max_mhz.as_ref()),
                ("clocks.video_mhz", c.video_mhz.as_ref()),
                ("clocks.video_max_mhz", c.video_max_mhz.as_ref()),
            ]);
        }
        if let Some(p) = &self.pcie {
            all.extend([
                ("pcie.tx_kbps", p.tx_kbps.as_ref()),
                ("pcie.rx_kbps", p.rx_kbps.as_ref()),
            ]);
        }
        all.into_iter()
            .filter_map(|(name, v)| v.map(|v| (name, v)))
            .collect()
    }

    /// VRAM in use in bytes at `now_s`: the explicit value, or the processes' sum;
    /// capped at the total so `free` never underflows.
    pub fn memory_used_bytes(&self, now_s: f64) -> u64 {
        let used = match &self.memory_used_mib {
            Some(v) => mib_to_bytes(v.at(now_s)),
            None => self
                .processes
                .iter()
                .flatten()
                .map(|p| mib_to_bytes(p.used_mib.at(now_s)))
                .fold(0u64, u64::saturating_add),
        };
        used.min(self.memory_total_bytes())
    }

    pub fn memory_total_bytes(&self) -> u64 {
        self.memory_total_mib.saturating_mul(1024 * 1024)
    }

    /// The NVML throttle-reason bitmask, or None when the field is absent.
    pub fn throttle_mask(&self) -> Option<u64> {
        self.throttle_reasons
            .as_ref()
            .map(|list| list.iter().fold(0, |mask, r| mask | r.bit()))
    }
}

/// Strings go into caller buffers of NVML's documented sizes, terminating NUL included.
fn fits(path: &str, value: &str, buffer: u32) -> Result<(), String> {
    if value.len() < buffer as usize && !value.contains('\0') {
        Ok(())
    } else {
        Err(format!(
            "{path}: must be shorter than {buffer} bytes and contain no NUL"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"gpus": [{"name": "G", "uuid": "GPU-1",
        "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 1024}]}"#;

    #[test]
    fn minimal_rig_parses_with_everything_optional_absent() {
        let rig = Rig::parse(MINIMAL).expect("minimal rig");
        let gpu = &rig.gpus[0];
        assert!(gpu.temperature_c.is_none() && gpu.processes.is_none() && !gpu.lost);
        assert_eq!(gpu.memory_used_bytes(0.0), 0);
        assert_eq!(gpu.throttle_mask(), None);
    }

    #[test]
    fn wave_spans_min_to_max_over_a_period() {
        let w = Scalar::Wave(Wave {
            min: 10.0,
            max: 90.0,
            period_s: 20.0,
            phase_s: 0.0,
        });
        assert!((w.at(0.0) - 10.0).abs() < 1e-9);
        assert!((w.at(10.0) - 90.0).abs() < 1e-9);
        assert!((w.at(5.0) - 50.0).abs() < 1e-9);
        assert!((w.at(1_700_000_020.0) - w.at(1_700_000_000.0)).abs() < 1e-6);
    }

    #[test]
    fn scalar_accepts_numbers_and_waves_and_explains_other_input() {
        let s: Scalar = serde_json::from_str("42").expect("int");
        assert_eq!(s, Scalar::Fixed(42.0));
        let s: Scalar = serde_json::from_str("1.5").expect("float");
        assert_eq!(s, Scalar::Fixed(1.5));
        let s: Scalar =
            serde_json::from_str(r#"{"wave": {"min": 1, "max": 2, "period_s": 3}}"#).expect("w");
        assert!(matches!(s, Scalar::Wave(w) if w.period_s == 3.0));
        let err = serde_json::from_str::<Scalar>("\"hot\"").expect_err("string");
        assert!(err.to_string().contains("a number or"), "{err}");
        let err = serde_json::from_str::<Scalar>(r#"{"wav": {}}"#).expect_err("typo");
        assert!(err.to_string().contains("wave"), "{err}");
    }

    #[test]
    fn validation_rejects_bad_bus_ids_periods_and_reasons() {
        let bad_bus = MINIMAL.replace("00000000:01:00.0", "1:2");
        assert!(Rig::parse(&bad_bus)
            .expect_err("bus")
            .contains("pci_bus_id"));
        let bad_wave = MINIMAL.replace(
            "\"memory_total_mib\": 1024",
            r#""memory_total_mib": 1024, "power_w": {"wave": {"min": 1, "max": 2, "period_s": 0}}"#,
        );
        assert!(Rig::parse(&bad_wave)
            .expect_err("wave")
            .contains("period_s"));
        let bad_reason = MINIMAL.replace(
            "\"memory_total_mib\": 1024",
            r#""memory_total_mib": 1024, "throttle_reasons": ["too_hot"]"#,
        );
        assert!(Rig::parse(&bad_reason)
            .expect_err("reason")
            .contains("unknown variant"));
        let typo = MINIMAL.replace(
            "\"memory_total_mib\"",
            "\"temprature_c\": 1, \"memory_total_mib\"",
        );
        assert!(Rig::parse(&typo)
            .expect_err("typo")
            .contains("unknown field"));
    }

    #[test]
    fn bus_id_parses_both_widths() {
        let loc = parse_pci_bus_id("00000019:0a:1f.1").expect("long");
        assert_eq!(
            (loc.domain, loc.bus, loc.device, loc.function),
            (0x19, 0x0a, 0x1f, 1)
        );
        assert!(parse_pci_bus_id("0000:01:00.0").is_some());
        assert!(parse_pci_bus_id("0000:01:00").is_none());
        assert!(parse_pci_bus_id("zz:01:00.0").is_none());
    }

    #[test]
    fn throttle_names_map_to_nvml_bits() {
        assert_eq!(ThrottleReason::SwPowerCap.bit(), 4);
        assert_eq!(ThrottleReason::HwThermalSlowdown.bit(), 64);
        assert_eq!(ThrottleReason::DisplayClockSetting.bit(), 256);
    }
}
