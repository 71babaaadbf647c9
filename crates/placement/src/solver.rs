//! Automatic placement. Fills the GPUs (keeping each one's reserve free), sends routed experts
//! to the CPU before any dense layer, keeps every GPU's experts with that GPU's own layers (so
//! the kept experts never pile onto the last card), and leaves cards on degraded links out of
//! a split. The result is ordinary options the user can start from and edit.

use serde::{Deserialize, Serialize};

use super::model::{ModelShape, TensorRole};
use super::options::{DeviceId, PlacementOptions, SplitMode, TensorOverride};
use super::plan::{plan, DeviceSpec, Plan, PlanError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    pub options: PlacementOptions,
    pub plan: Plan,
    /// What the solver decided and why, in plain words.
    pub notes: Vec<String>,
}

/// Finds a placement for `model` on `devices`, keeping the context, cache types, slots and
/// batch sizes of `base`; its placement fields (-ngl, -ts, -ot, -sm) are replaced.
pub fn solve(
    model: &ModelShape,
    devices: &[DeviceSpec],
    base: &PlacementOptions,
) -> Result<Solution, PlanError> {
    let mut notes = Vec::new();
    let gpus: Vec<&DeviceSpec> = devices
        .iter()
        .filter(|d| matches!(d.id, DeviceId::Gpu(_)))
        .collect();
    if gpus.is_empty() {
        return on_the_cpu_alone(model, devices, base);
    }
    let healthy: Vec<&DeviceSpec> = gpus.iter().copied().filter(|g| !g.link_degraded).collect();
    for g in gpus.iter().filter(|g| g.link_degraded) {
        notes.push(format!("{} is on a degraded PCIe link, so it is left out of the split (it suits a small model of its own)", g.name));
    }
    if healthy.is_empty() {
        if let Some(solution) = whole_model_on_a_degraded_card(model, devices, &gpus, base)? {
            return Ok(solution);
        }
    }
    let mut options = base.clone();
    options.split_mode = SplitMode::Layer;
    options.overrides.clear();
    options.tensor_split = split_by_room(&gpus, &healthy);
    let moe = model.tensors.iter().any(|t| t.role == TensorRole::Experts);
    if moe {
        options.overrides = vec![PlacementOptions::cpu_moe_override()];
    }
    options.n_gpu_layers = None;
    let mut current = plan(model, devices, &options)?;
    // Dense layers leave the GPUs only when even expert-free layers do not fit.
    let total_slots = model.n_layer + 1;
    let mut ngl = total_slots;
    while !gpus_fit(&current) && ngl > 0 {
        ngl -= 1;
        options.n_gpu_layers = Some(ngl);
        current = plan(model, devices, &options)?;
    }
    if ngl < total_slots {
        notes.push(format!(
            "{} of {} layers fit on the GPUs; the first {} run on the CPU",
            ngl,
            total_slots,
            total_slots - ngl
        ));
    }
    if moe && ngl > 0 {
        options.overrides = bring_experts_back(model, devices, &options, &current)?;
        current = plan(model, devices, &options)?;
        let kept: usize = current
            .devices
            .iter()
            .filter(|d| matches!(d.spec.id, DeviceId::Gpu(_)))
            .map(|d| d.usage.expert_layers.len())
            .sum();
        let moe_layers = model
            .tensors
            .iter()
            .filter(|t| t.role == TensorRole::Experts)
            .filter_map(|t| t.layer)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        notes.push(format!("experts of {kept} of {moe_layers} MoE layers are on the GPUs, each with its own layer; the rest are in CPU RAM"));
    }
    if !current.fits() {
        notes.push("the model does not fit even with everything possible on the CPU: reduce the context, use a smaller KV type, or pick a smaller quantization".into());
    }
    Ok(Solution {
        options,
        plan: current,
        notes,
    })
}

/// No GPU: every layer and expert in CPU RAM, with no placement flag to write (no `-ngl`,
/// `-ts`, `-sm`, `-mg` or `-ot`: there is nowhere else for a tensor to go).
fn on_the_cpu_alone(
    model: &ModelShape,
    devices: &[DeviceSpec],
    base: &PlacementOptions,
) -> Result<Solution, PlanError> {
    let options = PlacementOptions {
        n_gpu_layers: Some(0),
        tensor_split: Vec::new(),
        split_mode: SplitMode::None,
        main_gpu: 0,
        overrides: Vec::new(),
        ..base.clone()
    };
    let plan = plan(model, devices, &options)?;
    let mut notes = vec!["no GPU: the whole model runs from CPU RAM".to_owned()];
    if !plan.fits() {
        notes.push("the model does not fit in CPU RAM: reduce the context, use a smaller KV type, or pick a smaller quantization".into());
    }
    Ok(Solution {
        options,
        plan,
        notes,
    })
}

fn gpus_fit(p: &Plan) -> bool {
    p.devices
        .iter()
        .filter(|d| matches!(d.spec.id, DeviceId::Gpu(_)))
        .all(|d| d.overflow_bytes == 0)
}

/// Room each GPU offers after its reserve and overhead; degraded cards get 0 (no layers).
fn split_by_room(gpus: &[&DeviceSpec], healthy: &[&DeviceSpec]) -> Vec<f64> {
    gpus.iter()
        .map(|g| {
            if healthy.iter().any(|h| h.id == g.id) {
                g.capacity_bytes
                    .saturating_sub(g.reserve_bytes + g.overhead_bytes) as f64
                    / (1u64 << 30) as f64
            } else {
                0.0
            }
        })
        .map(|gib| (gib * 100.0).round() / 100.0)
        .collect()
}

/// Per GPU, the experts of its own layers for as long as they fit, then a CPU catch-all last.
fn bring_experts_back(
    model: &ModelShape,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
    start: &Plan,
) -> Result<Vec<TensorOverride>, PlanError> {
    let mut overrides = Vec::new();
    for device in start
        .devices
        .iter()
        .filter(|d| matches!(d.spec.id, DeviceId::Gpu(_)))
    {
        let room = device
            .spec
            .capacity_bytes
            .saturating_sub(device.spec.reserve_bytes);
        let mut used = device.usage.total_bytes();
        let mut layers = Vec::new();
        for &layer in &device.usage.layers {
            let experts = expert_bytes(model, layer);
            if experts > 0 && used.saturating_add(experts) <= room {
                used = used.saturating_add(experts);
                layers.push(layer);
            }
        }
        if !layers.is_empty() {
            let list = layers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("|");
            overrides.push(TensorOverride {
                pattern: format!(r"blk\.({list})\.ffn_.*_exps"),
                device: device.spec.id,
            });
        }
    }
    overrides.push(PlacementOptions::cpu_moe_override());
    // Compute buffers grow a little when experts move; confirm and back off a layer if needed.
    let mut trial = options.clone();
    trial.overrides = overrides.clone();
    let checked = plan(model, devices, &trial)?;
    if gpus_fit(&checked) {
        return Ok(overrides);
    }
    Ok(vec![PlacementOptions::cpu_moe_override()])
}

fn expert_bytes(model: &ModelShape, layer: u32) -> u64 {
    model
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Experts && t.layer == Some(layer))
        .fold(0, |sum, t| sum.saturating_add(t.bytes))
}

/// With only degraded links, a model that fits whole on one card goes there alone (`-sm none`).
fn whole_model_on_a_degraded_card(
    model: &ModelShape,
    devices: &[DeviceSpec],
    gpus: &[&DeviceSpec],
    base: &PlacementOptions,
) -> Result<Option<Solution>, PlanError> {
    for g in gpus {
        let DeviceId::Gpu(index) = g.id else { continue };
        let options = PlacementOptions {
            split_mode: SplitMode::None,
            main_gpu: index,
            n_gpu_layers: None,
            tensor_split: Vec::new(),
            overrides: Vec::new(),
            ..base.clone()
        };
        let p = plan(model, devices, &options)?;
        if p.fits() {
            let notes = vec![format!("the whole model fits on {} alone, where a slow link matters little once it is loaded", g.name)];
            return Ok(Some(Solution {
                options,
                plan: p,
                notes,
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{gpus, moe_model, GIB, MIB};

    #[test]
    fn a_big_moe_keeps_experts_spread_over_every_card_not_piled_on_the_last() {
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let base = PlacementOptions {
            context: 32_768,
            ..Default::default()
        };
        let s = solve(&model, &gpus(4, 24 * GIB), &base).unwrap();
        assert!(s.plan.fits(), "{:#?}", s.notes);
        let per_gpu: Vec<usize> = (0..4)
            .map(|g| {
                s.plan
                    .device(DeviceId::Gpu(g))
                    .unwrap()
                    .usage
                    .expert_layers
                    .len()
            })
            .collect();
        assert!(
            per_gpu.iter().all(|&n| n >= 4),
            "experts on every card: {per_gpu:?}"
        );
        assert!(
            per_gpu.iter().max().unwrap() - per_gpu.iter().min().unwrap() <= 2,
            "{per_gpu:?}"
        );
        // Each GPU's experts belong to layers that GPU already holds.
        for g in 0..4 {
            let d = s.plan.device(DeviceId::Gpu(g)).unwrap();
            assert!(d
                .usage
                .expert_layers
                .iter()
                .all(|l| d.usage.layers.contains(l)));
        }
        assert_eq!(
            s.options.overrides.last(),
            Some(&PlacementOptions::cpu_moe_override()),
            "CPU catch-all last"
        );
        assert_eq!(
            s.options.n_gpu_layers, None,
            "experts leave before any dense layer does"
        );
    }

    #[test]
    fn every_gpu_keeps_its_reserve() {
        let model = moe_model(40, 1, 100 * MIB, GIB);
        let mut rig = gpus(2, 24 * GIB);
        for g in rig.iter_mut().take(2) {
            g.reserve_bytes = 2 * GIB;
        }
        let s = solve(&model, &rig, &PlacementOptions::default()).unwrap();
        for g in 0..2 {
            let d = s.plan.device(DeviceId::Gpu(g)).unwrap();
            assert!(d.usage.total_bytes() <= 22 * GIB);
        }
    }

    #[test]
    fn a_card_on_an_x1_riser_is_left_out_of_the_split() {
        let model = moe_model(40, 1, 100 * MIB, GIB);
        let mut rig = gpus(4, 24 * GIB);
        rig[3].link_degraded = true;
        let s = solve(&model, &rig, &PlacementOptions::default()).unwrap();
        let x1 = s.plan.device(DeviceId::Gpu(3)).unwrap();
        assert!(x1.usage.layers.is_empty() && x1.usage.expert_layers.is_empty());
        assert!(s.notes.iter().any(|n| n.contains("degraded PCIe link")));
    }

    #[test]
    fn a_small_model_goes_whole_onto_a_lone_x1_card() {
        let model = moe_model(16, 16, 100 * MIB, 0);
        let mut rig = gpus(1, 24 * GIB);
        rig[0].link_degraded = true;
        let s = solve(&model, &rig, &PlacementOptions::default()).unwrap();
        assert_eq!(s.options.split_mode, SplitMode::None);
        assert!(s.plan.fits());
        assert_eq!(
            s.plan.device(DeviceId::Gpu(0)).unwrap().usage.layers.len(),
            16
        );
    }

    #[test]
    fn without_a_gpu_everything_is_in_cpu_ram_with_no_placement_flags() {
        let model = moe_model(24, 1, 100 * MIB, 200 * MIB);
        let cpu_only: Vec<DeviceSpec> = gpus(0, 0);
        let s = solve(&model, &cpu_only, &PlacementOptions::default()).unwrap();
        assert!(s.plan.fits(), "{:#?}", s.notes);
        let cpu = s.plan.device(DeviceId::Cpu).unwrap();
        assert_eq!(cpu.usage.layers.len(), 24);
        assert!(s.options.overrides.is_empty() && s.options.tensor_split.is_empty());
        let args = crate::flags::to_args_for(
            "m.gguf",
            &s.options,
            crate::flags::Offload::for_devices(cpu_only.iter().map(|d| &d.id)),
        )
        .unwrap();
        for gpu_flag in ["-ngl", "-ts", "-sm", "-mg", "-ot"] {
            assert!(
                !args.iter().any(|a| a == gpu_flag),
                "{gpu_flag} in {args:?}"
            );
        }
    }

    #[test]
    fn dense_layers_move_to_the_cpu_only_when_they_must() {
        let model = moe_model(40, 40, 900 * MIB, 0);
        let s = solve(&model, &gpus(1, 24 * GIB), &PlacementOptions::default()).unwrap();
        let ngl = s.options.n_gpu_layers.expect("not everything fits");
        assert!(ngl > 15 && ngl < 41, "{ngl}");
        assert!(s.plan.device(DeviceId::Gpu(0)).unwrap().overflow_bytes == 0);
    }
}
