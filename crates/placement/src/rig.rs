//! The devices a plan is made for: a hypothetical rig from a preset (planning a purchase, or a
//! rig from our users' write-ups), and the margins kept on every device (the live rig is built
//! from telemetry by `rigdeck-core`'s `live_rig`).

use serde::{Deserialize, Serialize};

use super::link::{Link, LinkError, RemoteBox};
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
    include_str!("../../../assets/rigs/2x3090.json"),
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

/// The port llama.cpp's `rpc-server` listens on by default.
pub const RPC_PORT: u16 = 50052;

/// Another box of a rig being planned: a preset, the link to it, and which of its GPUs it lends
/// (all when absent; a box without GPUs lends its CPU, as `rpc-server` does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlsoBox {
    pub preset: String,
    pub link: LinkChoice,
    #[serde(default)]
    pub lend: Option<Vec<u32>>,
}

/// A link by name (`2.5gbe`) or by measured figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LinkChoice {
    Named(String),
    Measured {
        throughput_bytes_per_s: u64,
        latency_s: f64,
    },
}

impl LinkChoice {
    pub fn link(&self) -> Result<Link, LinkError> {
        match self {
            LinkChoice::Named(name) => Link::named(name),
            LinkChoice::Measured {
                throughput_bytes_per_s,
                latency_s,
            } => Link::measured(*throughput_bytes_per_s, *latency_s),
        }
    }
}

impl AlsoBox {
    /// `2x3090@2.5gbe`: a preset and the named link to it.
    pub fn parse(text: &str) -> Result<AlsoBox, RigError> {
        let (preset, link) = text
            .split_once('@')
            .ok_or_else(|| RigError::BadAlso(text.to_owned()))?;
        Ok(AlsoBox {
            preset: preset.trim().to_owned(),
            link: LinkChoice::Named(link.trim().to_owned()),
            lend: None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RigError {
    #[error("unknown rig preset '{id}': use one of {known}", known = preset_ids().join(", "))]
    UnknownPreset { id: String },
    #[error("the link to box {position} ({preset}): {source}")]
    Link {
        position: usize,
        preset: String,
        source: LinkError,
    },
    #[error("box {position} ({preset}) lends no device: {why}")]
    EmptyBox {
        position: usize,
        preset: String,
        why: String,
    },
    #[error("'{0}' is not a box and its link: write PRESET@LINK, for example 2x3090@2.5gbe (links: {links})", links = Link::names().join(", "))]
    BadAlso(String),
}

/// The ids of the presets, for messages.
pub fn preset_ids() -> Vec<String> {
    presets().into_iter().map(|p| p.id).collect()
}

/// A rig of several boxes: the head's devices with every lent one (`RPC0…`) before its CPU,
/// and the boxes they are on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CombinedRig {
    pub devices: Vec<DeviceSpec>,
    pub boxes: Vec<RemoteBox>,
}

/// The head box's `devices` with the devices of each box in `also`, lent over its link. Each
/// box gets one `rpc-server` (`boxN:50052`, N counting the head as 1) lending its chosen GPUs,
/// or its CPU when it has none; llama.cpp numbers the lent devices in that order.
pub fn combine(
    head: Vec<DeviceSpec>,
    also: &[AlsoBox],
    margins: &Margins,
) -> Result<CombinedRig, RigError> {
    let (mut devices, head_cpu): (Vec<DeviceSpec>, Vec<DeviceSpec>) =
        head.into_iter().partition(|d| d.id != DeviceId::Cpu);
    let mut boxes = Vec::new();
    let mut next = 0u32;
    for (i, wanted) in also.iter().enumerate() {
        let position = i + 2;
        let preset = preset(&wanted.preset).ok_or_else(|| RigError::UnknownPreset {
            id: wanted.preset.clone(),
        })?;
        let link = wanted.link.link().map_err(|source| RigError::Link {
            position,
            preset: preset.id.clone(),
            source,
        })?;
        let lent = preset.lent_devices(wanted.lend.as_deref(), margins, position)?;
        let name = format!("box {position} · {}", preset.id);
        let mut ids = Vec::new();
        for mut spec in lent {
            spec.id = DeviceId::Rpc(next);
            spec.name = format!("RPC{next} · {} · on {name} over {}", spec.name, link.name);
            ids.push(spec.id);
            devices.push(spec);
            next += 1;
        }
        boxes.push(RemoteBox {
            name,
            endpoint: format!("box{position}:{RPC_PORT}"),
            link,
            devices: ids,
        });
    }
    devices.extend(head_cpu);
    Ok(CombinedRig { devices, boxes })
}

/// A width of x4 or less on a card that supports more: what risers and chipset slots give.
pub fn degraded(width: u32, max: u32) -> bool {
    width <= 4 && width < max
}

impl RigPreset {
    /// What this box lends another: the GPUs in `lend` (all when `None`), or its CPU's RAM
    /// when it has no GPU. Names are the devices' own; the caller numbers them.
    fn lent_devices(
        &self,
        lend: Option<&[u32]>,
        margins: &Margins,
        position: usize,
    ) -> Result<Vec<DeviceSpec>, RigError> {
        let empty = |why: String| RigError::EmptyBox {
            position,
            preset: self.id.clone(),
            why,
        };
        let all = self.devices(margins);
        let (gpus, cpu): (Vec<DeviceSpec>, Vec<DeviceSpec>) =
            all.into_iter().partition(|d| d.id != DeviceId::Cpu);
        if gpus.is_empty() {
            let lent: Vec<DeviceSpec> = cpu
                .into_iter()
                .filter(|d| d.capacity_bytes > d.reserve_bytes)
                .collect();
            return match lent.is_empty() {
                true => Err(empty("it has no GPU and no RAM beyond its reserve".into())),
                false => Ok(lent),
            };
        }
        let Some(chosen) = lend else { return Ok(gpus) };
        if chosen.is_empty() {
            return Err(empty(format!(
                "the list of GPUs it lends is empty: name some of 0…{}, or leave the list out to lend all",
                gpus.len() - 1
            )));
        }
        chosen
            .iter()
            .map(|&g| {
                gpus.get(g as usize).cloned().ok_or_else(|| {
                    empty(format!(
                        "it has no GPU {g}: its GPUs are 0…{}",
                        gpus.len() - 1
                    ))
                })
            })
            .collect()
    }

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

    fn head() -> Vec<DeviceSpec> {
        preset("4x3090").unwrap().devices(&Margins::default())
    }

    #[test]
    fn a_second_box_lends_its_gpus_numbered_as_llama_cpp_numbers_them() {
        let also = [
            AlsoBox::parse("2x3090@2.5gbe").unwrap(),
            AlsoBox::parse("cpu-minipc@1gbe").unwrap(),
        ];
        let rig = combine(head(), &also, &Margins::default()).unwrap();
        let ids: Vec<DeviceId> = rig.devices.iter().map(|d| d.id).collect();
        assert_eq!(
            ids,
            [
                DeviceId::Gpu(0),
                DeviceId::Gpu(1),
                DeviceId::Gpu(2),
                DeviceId::Gpu(3),
                DeviceId::Rpc(0),
                DeviceId::Rpc(1),
                DeviceId::Rpc(2),
                DeviceId::Cpu
            ]
        );
        assert!(
            rig.devices[5]
                .name
                .starts_with("RPC1 · GPU 1 · RTX 3090 · on box 2 · 2x3090 over 2.5 GbE"),
            "{}",
            rig.devices[5].name
        );
        assert_eq!(rig.devices[5].capacity_bytes, 24_576 * MIB);
        // A box without a GPU lends its CPU's RAM, as rpc-server does.
        assert_eq!(rig.devices[6].capacity_bytes, 32 * GIB);
        assert!(rig.devices[6].name.contains("CPU RAM"));
        assert_eq!(rig.boxes.len(), 2);
        assert_eq!(rig.boxes[0].devices, [DeviceId::Rpc(0), DeviceId::Rpc(1)]);
        assert_eq!(rig.boxes[0].endpoint, "box2:50052");
        assert_eq!(rig.boxes[1].link.name, "1 GbE");
        assert_eq!(rig.devices[7].capacity_bytes, 192 * GIB, "the head's RAM");
    }

    #[test]
    fn bad_boxes_say_what_exists() {
        let combined = |also: AlsoBox| {
            combine(head(), &[also], &Margins::default())
                .unwrap_err()
                .to_string()
        };
        let err = combined(AlsoBox::parse("8x4090@10gbe").unwrap());
        assert!(
            err.contains("unknown rig preset '8x4090'") && err.contains("4x3090, 4xpro6000"),
            "{err}"
        );
        let err = combined(AlsoBox::parse("2x3090@wifi").unwrap());
        assert!(
            err.contains("box 2 (2x3090)")
                && err.contains("unknown link 'wifi'")
                && err.contains("2.5gbe"),
            "{err}"
        );
        let err = combined(AlsoBox {
            preset: "2x3090".into(),
            link: LinkChoice::Measured {
                throughput_bytes_per_s: 0,
                latency_s: 0.0002,
            },
            lend: None,
        });
        assert!(err.contains("0 bytes/s moves nothing"), "{err}");
        let err = combined(AlsoBox {
            preset: "2x3090".into(),
            link: LinkChoice::Named("10gbe".into()),
            lend: Some(Vec::new()),
        });
        assert!(
            err.contains("box 2 (2x3090) lends no device") && err.contains("0…1"),
            "{err}"
        );
        let err = combined(AlsoBox {
            preset: "2x3090".into(),
            link: LinkChoice::Named("10gbe".into()),
            lend: Some(vec![2]),
        });
        assert!(err.contains("it has no GPU 2"), "{err}");
        let err = AlsoBox::parse("2x3090").unwrap_err().to_string();
        assert!(err.contains("PRESET@LINK"), "{err}");
        let measured: AlsoBox = serde_json::from_str(
            r#"{"preset":"2x3090","link":{"throughput_bytes_per_s":250000000,"latency_s":0.0003},"lend":[1]}"#,
        )
        .unwrap();
        let rig = combine(head(), &[measured], &Margins::default()).unwrap();
        assert_eq!(rig.boxes[0].link.name, "measured");
        assert_eq!(rig.boxes[0].devices, [DeviceId::Rpc(0)]);
    }

    #[test]
    fn every_preset_parses_and_the_x1_card_is_degraded() {
        let all = presets();
        assert_eq!(all.len(), PRESETS.len());
        assert!(all.iter().any(|p| p.id == "2x3090"));
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
