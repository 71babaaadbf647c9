//! The decode speed ceiling: bytes each device must read per generated token over its memory
//! bandwidth, the stages of a layer split added up. A ruler, not a prediction: real engines
//! reach a fraction of it, and the assumptions are listed with the figure.

use serde::{Deserialize, Serialize};

use super::model::{ModelShape, TensorRole};
use super::options::DeviceId;
use super::plan::Plan;

/// Share of peak bandwidth a decode step achieves (benchmarks.md: 0.7–0.9 GPU, 0.6–0.8 CPU).
pub const GPU_EFFICIENCY: f64 = 0.8;
pub const CPU_EFFICIENCY: f64 = 0.7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    pub device: DeviceId,
    pub bytes_per_token: u64,
    /// `None` when the device's bandwidth is unknown.
    pub seconds_per_token: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedCeiling {
    /// Upper bound on decode tokens per second; `None` when a stage's bandwidth is unknown.
    pub tokens_per_s: Option<f64>,
    pub stages: Vec<StageCost>,
    pub assumptions: Vec<String>,
}

/// Bytes a device reads for one token: its dense weights, the active share of its routed
/// experts, and its KV cache (full context, the worst case).
pub fn ceiling(model: &ModelShape, plan: &Plan) -> SpeedCeiling {
    let active_share = model
        .experts
        .map_or(1.0, |e| f64::from(e.used) / f64::from(e.count.max(1)));
    let mut stages = Vec::new();
    for device in &plan.devices {
        let id = device.spec.id;
        let weights: f64 = model
            .tensors
            .iter()
            .zip(&plan.tensor_devices)
            .filter(|(_, &d)| d == id)
            .map(|(t, _)| match t.role {
                // One row of the input embedding per token: negligible.
                TensorRole::TokenEmbedding => 0.0,
                TensorRole::Experts => t.bytes as f64 * active_share,
                _ => t.bytes as f64,
            })
            .sum();
        let bytes = (weights + device.usage.kv_bytes as f64) as u64;
        if bytes == 0 {
            continue;
        }
        let efficiency = if matches!(id, DeviceId::Cpu) {
            CPU_EFFICIENCY
        } else {
            GPU_EFFICIENCY
        };
        let seconds = device
            .spec
            .bandwidth_bytes_per_s
            .filter(|&bw| bw > 0)
            .map(|bw| bytes as f64 / (bw as f64 * efficiency));
        stages.push(StageCost {
            device: id,
            bytes_per_token: bytes,
            seconds_per_token: seconds,
        });
    }
    let total: Option<f64> = stages.iter().map(|s| s.seconds_per_token).sum();
    let mut assumptions = vec![
        format!("layer split: the stages run one after another, so their times add"),
        format!(
            "{:.0} % of peak bandwidth on GPUs, {:.0} % on the CPU",
            GPU_EFFICIENCY * 100.0,
            CPU_EFFICIENCY * 100.0
        ),
        "KV cache read in full at the planned context (worst case; shorter chats are faster)"
            .to_owned(),
        "compute, PCIe transfers between stages and sampling are not counted".to_owned(),
    ];
    if let Some(e) = model.experts {
        assumptions.push(format!(
            "{} of {} routed experts read per token; shared experts always",
            e.used, e.count
        ));
    }
    if stages.iter().any(|s| s.seconds_per_token.is_none()) {
        assumptions.push("a device's memory bandwidth is unknown, so no ceiling is given: measure the CPU's on the Settings page (Memory bandwidth), or type it there".to_owned());
    }
    SpeedCeiling {
        tokens_per_s: total.filter(|&t| t > 0.0).map(|t| 1.0 / t),
        stages,
        assumptions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::PlacementOptions;
    use crate::plan::plan;
    use crate::testing::{gpus, moe_model, GIB, MIB};

    #[test]
    fn moe_experts_on_the_cpu_bound_the_speed_by_dram() {
        // 75 MoE layers × 3 GiB of experts, 8 of 256 active → 7 GiB per token from DRAM.
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let mut options = PlacementOptions {
            context: 4096,
            ..Default::default()
        };
        options.overrides = vec![PlacementOptions::cpu_moe_override()];
        let p = plan(&model, &gpus(4, 24 * GIB), &options).unwrap();
        let c = ceiling(&model, &p);
        let cpu = c.stages.iter().find(|s| s.device == DeviceId::Cpu).unwrap();
        let expected_cpu = 75.0 * 3.0 * GIB as f64 * 8.0 / 256.0;
        assert!((cpu.bytes_per_token as f64 - expected_cpu).abs() / expected_cpu < 0.01);
        let tps = c.tokens_per_s.unwrap();
        // DRAM alone: 89.6 GB/s × 0.7 / 7.03 GiB ≈ 8.3 tok/s; the GPU stages make it a little slower.
        assert!(tps > 6.0 && tps < 8.4, "{tps}");
        assert!(c.assumptions.iter().any(|a| a.contains("8 of 256")));
    }

    #[test]
    fn unknown_bandwidth_gives_no_ceiling_and_says_why() {
        let model = moe_model(4, 4, 100 * MIB, 0);
        let mut rig = gpus(1, 24 * GIB);
        rig[0].bandwidth_bytes_per_s = None;
        let p = plan(&model, &rig, &PlacementOptions::default()).unwrap();
        let c = ceiling(&model, &p);
        assert!(c.tokens_per_s.is_none());
        assert!(c.assumptions.iter().any(|a| a.contains("unknown")));
    }
}
