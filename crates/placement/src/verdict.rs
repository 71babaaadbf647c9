//! A plan in one phrase, for choosing between quantizations before downloading: does it fit on
//! the GPUs, only with some expert layers (or whole layers) in CPU RAM, or not at all.

use serde::Serialize;

use super::options::DeviceId;
use super::plan::Plan;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FitVerdict {
    /// Every layer and expert on the GPUs.
    OnGpus { gpus: usize },
    /// Routed experts of this many layers in CPU RAM (llama.cpp's `-ot …=CPU`), the rest on GPUs.
    ExpertsInRam { layers: usize },
    /// This many whole layers in CPU RAM (fewer `-ngl`): slower than experts alone.
    LayersInRam { layers: usize },
    /// The rig has no GPU: everything in CPU RAM, the only place there is (not a warning; a rig
    /// with GPUs whose layers all land in RAM is [`FitVerdict::LayersInRam`]).
    CpuOnly,
    /// More than the devices hold, by this many bytes.
    DoesNotFit { short_bytes: u64 },
}

impl FitVerdict {
    pub fn of(plan: &Plan) -> FitVerdict {
        if !plan.fits() {
            let short = plan
                .devices
                .iter()
                .fold(0u64, |sum, d| sum.saturating_add(d.overflow_bytes));
            return FitVerdict::DoesNotFit { short_bytes: short };
        }
        // Lent GPUs of other boxes count: the model is on GPUs all the same.
        let gpus = plan
            .devices
            .iter()
            .filter(|d| d.spec.id.is_offload())
            .count();
        let cpu = plan.devices.iter().find(|d| d.spec.id == DeviceId::Cpu);
        let (layers, expert_layers) = cpu.map_or((0, 0), |d| {
            (d.usage.layers.len(), d.usage.expert_layers.len())
        });
        match (gpus, layers, expert_layers) {
            (0, _, _) => FitVerdict::CpuOnly,
            (_, 0, 0) => FitVerdict::OnGpus { gpus },
            (_, 0, experts) => FitVerdict::ExpertsInRam { layers: experts },
            (_, layers, _) => FitVerdict::LayersInRam { layers },
        }
    }

    /// Better placements rank lower: what "recommended" compares first.
    pub fn rank(&self) -> u8 {
        match self {
            FitVerdict::OnGpus { .. } => 0,
            FitVerdict::ExpertsInRam { .. } => 1,
            FitVerdict::LayersInRam { .. } => 2,
            FitVerdict::CpuOnly => 3,
            FitVerdict::DoesNotFit { .. } => 4,
        }
    }

    pub fn fits(&self) -> bool {
        !matches!(self, FitVerdict::DoesNotFit { .. })
    }

    pub fn summary(&self) -> String {
        match self {
            FitVerdict::OnGpus { gpus: 1 } => "fits on the GPU".into(),
            FitVerdict::OnGpus { gpus } => format!("fits on the {gpus} GPUs"),
            FitVerdict::ExpertsInRam { layers } => {
                format!("fits with the experts of {layers} layer(s) in CPU RAM")
            }
            FitVerdict::LayersInRam { layers } => format!("fits with {layers} layer(s) in CPU RAM"),
            FitVerdict::CpuOnly => "fits in CPU RAM (the rig has no GPU)".into(),
            FitVerdict::DoesNotFit { short_bytes } => format!(
                "does not fit: {:.1} GiB short",
                *short_bytes as f64 / (1u64 << 30) as f64
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DevicePlan, DeviceSpec, DeviceUsage};

    fn device(
        id: DeviceId,
        layers: Vec<u32>,
        expert_layers: Vec<u32>,
        overflow: u64,
    ) -> DevicePlan {
        DevicePlan {
            spec: DeviceSpec {
                id,
                name: "d".into(),
                capacity_bytes: 1,
                reserve_bytes: 0,
                overhead_bytes: 0,
                bandwidth_bytes_per_s: None,
                link_degraded: false,
                correction: None,
            },
            usage: DeviceUsage {
                layers,
                expert_layers,
                ..DeviceUsage::default()
            },
            overflow_bytes: overflow,
        }
    }

    fn plan(devices: Vec<DevicePlan>) -> Plan {
        Plan {
            devices,
            tensor_devices: Vec::new(),
            kv_devices: Vec::new(),
            override_hits: Vec::new(),
            n_ctx: 0,
            n_ctx_seq: 0,
        }
    }

    #[test]
    fn verdicts_read_where_the_layers_and_experts_went() {
        let gpu = |l: Vec<u32>| device(DeviceId::Gpu(0), l.clone(), l, 0);
        let on_gpus = plan(vec![
            gpu(vec![0, 1]),
            device(DeviceId::Cpu, vec![], vec![], 0),
        ]);
        assert_eq!(FitVerdict::of(&on_gpus), FitVerdict::OnGpus { gpus: 1 });
        let experts = plan(vec![
            gpu(vec![0]),
            device(DeviceId::Cpu, vec![], vec![1, 2], 0),
        ]);
        assert_eq!(
            FitVerdict::of(&experts),
            FitVerdict::ExpertsInRam { layers: 2 }
        );
        let layers = plan(vec![
            gpu(vec![0]),
            device(DeviceId::Cpu, vec![1], vec![1], 0),
        ]);
        assert_eq!(
            FitVerdict::of(&layers),
            FitVerdict::LayersInRam { layers: 1 }
        );
        let cpu = plan(vec![device(DeviceId::Cpu, vec![0], vec![], 0)]);
        assert_eq!(FitVerdict::of(&cpu), FitVerdict::CpuOnly);
        let short = plan(vec![device(DeviceId::Gpu(0), vec![0], vec![], 3 << 30)]);
        assert_eq!(
            FitVerdict::of(&short).summary(),
            "does not fit: 3.0 GiB short"
        );
        assert!(FitVerdict::of(&experts).rank() < FitVerdict::of(&layers).rank());
    }

    #[test]
    fn cpu_only_means_the_rig_has_no_gpu_not_that_the_gpus_were_passed_over() {
        let everything_in_ram = plan(vec![
            device(DeviceId::Gpu(0), vec![], vec![], 0),
            device(DeviceId::Cpu, vec![0, 1, 2], vec![0, 1, 2], 0),
        ]);
        assert_eq!(
            FitVerdict::of(&everything_in_ram),
            FitVerdict::LayersInRam { layers: 3 }
        );
        let no_gpu = plan(vec![device(DeviceId::Cpu, vec![0, 1, 2], vec![], 0)]);
        assert_eq!(FitVerdict::of(&no_gpu), FitVerdict::CpuOnly);
        assert_eq!(
            FitVerdict::of(&no_gpu).summary(),
            "fits in CPU RAM (the rig has no GPU)"
        );
    }
}
