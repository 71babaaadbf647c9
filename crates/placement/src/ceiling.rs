//! The decode speed ceiling: bytes each device must read per generated token over its memory
//! bandwidth, the stages of a layer split added up, plus, for a model split across boxes, the
//! time its activations spend on the links. A ruler, not a prediction: real engines reach a
//! fraction of it, and the assumptions are listed with the figure.
//!
//! Per generated token:
//!
//! ```text
//! t = Σ_devices bytes_read / (bandwidth × efficiency)
//!   + Σ_crossings (latency + bytes_crossing / throughput)
//! ```
//!
//! A crossing is each time the token's activations change boxes on their way through the model:
//! from the head's input embedding into the first layer, between consecutive layers (and between
//! a layer and its experts when `-ot` puts them on another box), and the logits back to the head
//! for sampling. A hidden state is `n_embd × 4` bytes (f32); the logits `n_vocab × 4`. Between
//! two lent boxes the data goes through the head: two crossings. Weights never move after the
//! load, which sends each lent device's weights over its link once: `load = weights / throughput`.

use serde::{Deserialize, Serialize};

use super::link::{box_of, Link, RemoteBox};
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
    /// What each link to another box adds per token and to the load; empty on one box.
    #[serde(default)]
    pub links: Vec<LinkCost>,
    pub assumptions: Vec<String>,
}

/// The cost of one link to a lent box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkCost {
    pub box_name: String,
    pub link: Link,
    /// Times a token's activations cross this link (each direction counts).
    pub crossings_per_token: u32,
    pub bytes_per_token: u64,
    /// `crossings × latency + bytes / throughput`.
    pub seconds_per_token: f64,
    /// Weights sent over the link once, at load.
    pub load_bytes: u64,
    pub load_seconds: f64,
}

impl SpeedCeiling {
    /// Seconds per token the links add, all boxes together.
    pub fn link_seconds_per_token(&self) -> f64 {
        self.links.iter().map(|l| l.seconds_per_token).sum()
    }
}

/// The ceiling on one box: see [`ceiling_across`].
pub fn ceiling(model: &ModelShape, plan: &Plan) -> SpeedCeiling {
    ceiling_across(model, plan, &[])
}

/// Bytes a device reads for one token: its dense weights, the active share of its routed
/// experts, and its KV cache (full context, the worst case); and the links' time when lent
/// devices on `boxes` hold part of the model (the formula is in this module's documentation).
pub fn ceiling_across(model: &ModelShape, plan: &Plan, boxes: &[RemoteBox]) -> SpeedCeiling {
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
    let links = link_costs(model, plan, boxes);
    let link_seconds: f64 = links.iter().map(|l| l.seconds_per_token).sum();
    let total: Option<f64> = stages
        .iter()
        .map(|s| s.seconds_per_token)
        .sum::<Option<f64>>()
        .map(|t| t + link_seconds);
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
    if !links.is_empty() {
        assumptions.push("each crossing between boxes costs the link's latency plus n_embd × 4 bytes (n_vocab × 4 for the logits) at its throughput; the RPC graph itself is sent once and reused".to_owned());
    }
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
        links,
        assumptions,
    }
}

/// One point of a token's way through the model, and the bytes that arrive there.
struct Hop {
    device: DeviceId,
    bytes: u64,
}

/// The devices a token's activations visit in order: the input embedding, each layer (and its
/// experts when they are elsewhere), the output, and the head again for sampling.
fn token_path(model: &ModelShape, plan: &Plan) -> Vec<Hop> {
    let hidden = u64::from(model.n_embd).saturating_mul(4);
    let logits = u64::from(model.n_vocab).saturating_mul(4);
    let device_of_role = |role: TensorRole| {
        model
            .tensors
            .iter()
            .zip(&plan.tensor_devices)
            .find(|(t, _)| t.role == role)
            .map(|(_, &d)| d)
    };
    let holder = |layer: u32, experts: bool| {
        plan.devices
            .iter()
            .find(|d| match experts {
                true => d.usage.expert_layers.contains(&layer),
                false => d.usage.layers.contains(&layer),
            })
            .map(|d| d.spec.id)
    };
    let mut path = vec![Hop {
        device: device_of_role(TensorRole::TokenEmbedding).unwrap_or(DeviceId::Cpu),
        bytes: 0,
    }];
    let mut last = path[0].device;
    for layer in 0..model.n_layer {
        let device = holder(layer, false).unwrap_or(last);
        path.push(Hop {
            device,
            bytes: hidden,
        });
        // Weights `-ot` sent elsewhere (the layer's KV stays): their products run where they are.
        for weights in weights_elsewhere(model, plan, layer, device) {
            path.push(Hop {
                device: weights,
                bytes: hidden,
            });
            path.push(Hop {
                device,
                bytes: hidden,
            });
        }
        if let Some(experts) = holder(layer, true).filter(|&e| e != device) {
            path.push(Hop {
                device: experts,
                bytes: hidden,
            });
            path.push(Hop {
                device,
                bytes: hidden,
            });
        }
        last = device;
    }
    let output = device_of_role(TensorRole::Output).unwrap_or(last);
    path.push(Hop {
        device: output,
        bytes: hidden,
    });
    path.push(Hop {
        device: DeviceId::Cpu,
        bytes: logits,
    });
    path
}

/// The devices other than `device` that hold some of `layer`'s non-expert weights, in the order
/// of the model's tensors.
fn weights_elsewhere(
    model: &ModelShape,
    plan: &Plan,
    layer: u32,
    device: DeviceId,
) -> Vec<DeviceId> {
    let mut found = Vec::new();
    for (tensor, &at) in model.tensors.iter().zip(&plan.tensor_devices) {
        let own = tensor.layer == Some(layer) && tensor.role != TensorRole::Experts;
        if own && at != device && !found.contains(&at) {
            found.push(at);
        }
    }
    found
}

/// Per lent box: the crossings of its link per token, and the load of its devices' weights.
fn link_costs(model: &ModelShape, plan: &Plan, boxes: &[RemoteBox]) -> Vec<LinkCost> {
    if boxes.is_empty() {
        return Vec::new();
    }
    let mut crossings = vec![(0u32, 0u64); boxes.len()];
    let index =
        |d: DeviceId| box_of(boxes, d).and_then(|b| boxes.iter().position(|x| std::ptr::eq(x, b)));
    let path = token_path(model, plan);
    for pair in path.windows(2) {
        let (from, to) = (index(pair[0].device), index(pair[1].device));
        if from == to {
            continue;
        }
        // Leaving one box and entering another: each lent end crosses its own link.
        for b in [from, to].into_iter().flatten() {
            if let Some(c) = crossings.get_mut(b) {
                c.0 += 1;
                c.1 = c.1.saturating_add(pair[1].bytes);
            }
        }
    }
    boxes
        .iter()
        .zip(crossings)
        .filter_map(|(b, (count, bytes))| {
            let load_bytes = plan
                .devices
                .iter()
                .filter(|d| b.devices.contains(&d.spec.id))
                .fold(0u64, |sum, d| sum.saturating_add(d.usage.weights_bytes));
            if count == 0 && load_bytes == 0 {
                return None;
            }
            let throughput = b.link.throughput_bytes_per_s.max(1) as f64;
            Some(LinkCost {
                box_name: b.name.clone(),
                link: b.link.clone(),
                crossings_per_token: count,
                bytes_per_token: bytes,
                seconds_per_token: f64::from(count) * b.link.latency_s + bytes as f64 / throughput,
                load_bytes,
                load_seconds: load_bytes as f64 / throughput,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Link;
    use crate::options::{PlacementOptions, RpcServer, TensorOverride};
    use crate::plan::plan;
    use crate::testing::{gpus, lend, moe_model, GIB, MIB};

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
    fn each_boundary_between_boxes_costs_latency_plus_activations_over_the_link() {
        let model = moe_model(8, 0, 100 * MIB, 600 * MIB);
        let mut rig = gpus(1, 24 * GIB);
        let link = Link::measured(100_000_000, 0.001).unwrap();
        let remote = lend(&mut rig, 1, 24 * GIB, link);
        // Without -dev, llama.cpp puts the lent device first: layers 0… there.
        let mut options = PlacementOptions {
            rpc_servers: vec![RpcServer {
                endpoint: "10.0.0.2:50052".into(),
                devices: 1,
            }],
            tensor_split: vec![2.0, 7.0],
            ..Default::default()
        };
        let p = plan(&model, &rig, &options).unwrap();
        assert_eq!(p.device(DeviceId::Rpc(0)).unwrap().usage.layers, [0, 1]);
        let c = ceiling_across(&model, &p, std::slice::from_ref(&remote));
        let hidden = 6144 * 4;
        let link = &c.links[0];
        assert_eq!(link.crossings_per_token, 2);
        assert_eq!(link.bytes_per_token, 2 * hidden);
        let expected = 2.0 * 0.001 + (2 * hidden) as f64 / 1e8;
        assert!((link.seconds_per_token - expected).abs() < 1e-12);
        let weights = p.device(DeviceId::Rpc(0)).unwrap().usage.weights_bytes;
        assert_eq!(link.load_bytes, weights);
        assert!((link.load_seconds - weights as f64 / 1e8).abs() < 1e-6);
        let stages: f64 = c.stages.iter().filter_map(|s| s.seconds_per_token).sum();
        assert!((1.0 / c.tokens_per_s.unwrap() - stages - expected).abs() < 1e-12);

        // The experts of layers 5 and 6 sent alone: out and back at each of them too.
        options.overrides = vec![TensorOverride {
            pattern: r"blk\.(5|6)\.ffn_.*_exps".into(),
            device: DeviceId::Rpc(0),
        }];
        let p = plan(&model, &rig, &options).unwrap();
        let c = ceiling_across(&model, &p, std::slice::from_ref(&remote));
        assert_eq!(c.links[0].crossings_per_token, 6);

        // A layer's attention weights sent by -ot (its KV cache stays where -ts put the layer): its
        // matrix products run where the weights are, out and back.
        options.overrides = vec![TensorOverride {
            pattern: r"blk\.5\.attn_".into(),
            device: DeviceId::Rpc(0),
        }];
        let p = plan(&model, &rig, &options).unwrap();
        assert!(p
            .device(DeviceId::Gpu(0))
            .unwrap()
            .usage
            .layers
            .contains(&5));
        let c = ceiling_across(&model, &p, std::slice::from_ref(&remote));
        assert_eq!(c.links[0].crossings_per_token, 4);

        // The lent device last (-dev): the logits cross on their way back for sampling.
        options.overrides.clear();
        options.devices = vec![DeviceId::Gpu(0), DeviceId::Rpc(0)];
        options.tensor_split = vec![7.0, 2.0];
        let p = plan(&model, &rig, &options).unwrap();
        assert_eq!(p.device(DeviceId::Rpc(0)).unwrap().usage.layers, [7]);
        let c = ceiling_across(&model, &p, &[remote]);
        assert_eq!(c.links[0].crossings_per_token, 2);
        assert_eq!(c.links[0].bytes_per_token, hidden + 154_880 * 4);
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
