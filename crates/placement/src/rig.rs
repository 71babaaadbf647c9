//! The devices a plan is made for: a hypothetical rig from a preset (planning a purchase, or a
//! rig from our users' write-ups), and the margins kept on every device (the live rig is built
//! from telemetry by `rigdeck-core`'s `live_rig`).

use serde::{Deserialize, Serialize};

use super::options::DeviceId;
use super::plan::DeviceSpec;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The presets shipped in `assets/rigs/`, built into the binary.
const PRESETS: &[&str] = &[
    include_str!("../../../assets/rigs/4x3090.json"),
    include_str!("../../../assets/rigs/4xpro6000.json"),
    include_str!("../../../assets/rigs/2xgh200.json"),
    include_str!("../../../assets/rigs/2x5060ti.json"),
    include_str!("../../../assets/rigs/cpu-minipc.json"),
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RigPreset {
    pub id: String,
    pub name: String,
    pub source: String,
    pub gpus: Vec<PresetGpu>,
    pub cpu: PresetCpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetGpu {
    pub name: String,
    pub memory_mib: u64,
    pub bandwidth_gb_s: f64,
    pub pcie_width: u32,
    pub pcie_max_width: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetCpu {
    pub name: String,
    pub ram_gib: u64,
    pub bandwidth_gb_s: f64,
}

/// What every GPU keeps back: the user's reserve and the CUDA context overhead (calibratable).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Margins {
    pub gpu_reserve_bytes: u64,
    pub gpu_overhead_bytes: u64,
    /// Host memory left for the system and other programs.
    pub ram_reserve_bytes: u64,
    /// DRAM bandwidth of the live machine (not measurable from /proc), for the speed ceiling.
    pub cpu_bandwidth_bytes_per_s: Option<u64>,
}

impl Default for Margins {
    fn default() -> Self {
        Self {
            gpu_reserve_bytes: 512 * MIB,
            gpu_overhead_bytes: 400 * MIB,
            ram_reserve_bytes: 8 * GIB,
            cpu_bandwidth_bytes_per_s: None,
        }
    }
}

/// All presets; a malformed one is a build defect, reported once and left out.
pub fn presets() -> Vec<RigPreset> {
    PRESETS
        .iter()
        .filter_map(|text| match serde_json::from_str::<RigPreset>(text) {
            Ok(preset) => Some(preset),
            Err(err) => {
                tracing::error!("a built-in rig preset is malformed: {err}");
                None
            }
        })
        .collect()
}

pub fn preset(id: &str) -> Option<RigPreset> {
    presets().into_iter().find(|p| p.id == id)
}

/// A width of x4 or less on a card that supports more: what risers and chipset slots give.
pub fn degraded(width: u32, max: u32) -> bool {
    width <= 4 && width < max
}

impl RigPreset {
    pub fn devices(&self, margins: &Margins) -> Vec<DeviceSpec> {
        let mut devices: Vec<DeviceSpec> = self
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| DeviceSpec {
                id: DeviceId::Gpu(i as u32),
                name: format!("GPU {i} · {}", g.name),
                capacity_bytes: g.memory_mib * MIB,
                reserve_bytes: margins.gpu_reserve_bytes,
                overhead_bytes: margins.gpu_overhead_bytes,
                bandwidth_bytes_per_s: Some((g.bandwidth_gb_s * 1e9) as u64),
                link_degraded: degraded(g.pcie_width, g.pcie_max_width),
                correction: None,
            })
            .collect();
        devices.push(DeviceSpec {
            id: DeviceId::Cpu,
            name: format!("CPU RAM · {}", self.cpu.name),
            capacity_bytes: self.cpu.ram_gib * GIB,
            reserve_bytes: margins.ram_reserve_bytes,
            overhead_bytes: 0,
            bandwidth_bytes_per_s: Some((self.cpu.bandwidth_gb_s * 1e9) as u64),
            link_degraded: false,
            correction: None,
        });
        devices
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_the_x1_card_is_degraded() {
        let all = presets();
        assert_eq!(all.len(), PRESETS.len());
        let rig = preset("4x3090").unwrap().devices(&Margins::default());
        assert_eq!(rig.len(), 5);
        assert!(rig[3].link_degraded);
        assert!(!rig[1].link_degraded, "x8 of x16 is not a riser");
        assert_eq!(rig[4].id, DeviceId::Cpu);
        assert_eq!(rig[4].capacity_bytes, 192 * GIB);
        assert!(
            preset("cpu-minipc")
                .unwrap()
                .devices(&Margins::default())
                .len()
                == 1
        );
    }
}
