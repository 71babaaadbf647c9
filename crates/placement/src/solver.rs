//! Automatic placement. Fills the GPUs (keeping each one's reserve free), sends routed experts
//! to the CPU before any dense layer, keeps every GPU's experts with that GPU's own layers (so
//! the kept experts never pile onto the last card), and leaves cards on degraded links out of
//! a split. The result is ordinary options the user can start from and edit.
//!
//! With devices lent by other boxes, this box comes first: a model that fits on its own GPUs
//! stays here. Otherwise whole layers go to the lent devices, the first layers of the model,
//! because weights never move after the load while every token's activations cross the link at
//! each boundary between boxes: a run of whole layers costs two crossings per token however
//! long it is (in from the input embedding, out to this box's next layer), where the experts of
//! a layer sent alone would cost two per layer; and the first layers rather than the last keep
//! the output layer here, so the logits (`n_vocab × 4` bytes a token) never cross. That is also
//! llama.cpp's own order (lent devices before local GPUs). How many layers go is the count with
//! the best speed ceiling, links counted; a tie keeps more here.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::ceiling::ceiling_across;
use super::link::{rpc_servers, RemoteBox};
use super::model::{ModelShape, TensorRole};
use super::options::{DeviceId, PlacementOptions, SplitMode, TensorOverride};
use super::plan::{plan, DeviceSpec, Plan, PlanError};
use super::verdict::FitVerdict;

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
    solve_across(model, devices, &[], base)
}

/// As [`solve`], with the devices `boxes` lend (`RPC…` in `devices`): used only when this box
/// alone does not hold the model on its GPUs, and then as the module's documentation says.
pub fn solve_across(
    model: &ModelShape,
    devices: &[DeviceSpec],
    boxes: &[RemoteBox],
    base: &PlacementOptions,
) -> Result<Solution, PlanError> {
    // Every trial below plans this one model: a device's share replayed once is remembered.
    crate::compute::remembering(|| solve_across_remembering(model, devices, boxes, base))
}

/// [`solve_across`]'s body, its compute buffers remembered.
fn solve_across_remembering(
    model: &ModelShape,
    devices: &[DeviceSpec],
    boxes: &[RemoteBox],
    base: &PlacementOptions,
) -> Result<Solution, PlanError> {
    let lent: Vec<&DeviceSpec> = devices.iter().filter(|d| d.id.is_lent()).collect();
    let here_only = PlacementOptions {
        rpc_servers: Vec::new(),
        devices: Vec::new(),
        ..base.clone()
    };
    if lent.is_empty() {
        return solve_here(model, devices, &here_only);
    }
    let here: Vec<DeviceSpec> = devices
        .iter()
        .filter(|d| !d.id.is_lent())
        .cloned()
        .collect();
    let alone = solve_here(model, &here, &here_only)?;
    // The same options on every device: the lent ones hold nothing without --rpc.
    let mut alone = Solution {
        plan: plan(model, devices, &alone.options)?,
        ..alone
    };
    if matches!(FitVerdict::of(&alone.plan), FitVerdict::OnGpus { .. }) {
        alone.notes.push("the model fits on this box's GPUs alone, so the lent devices are left out: every token would cross the link to them".into());
        return Ok(alone);
    }
    let alone_speed = alone
        .plan
        .fits()
        .then(|| ceiling_across(model, &alone.plan, boxes).tokens_per_s);
    let Some((across, speed)) = best_split_across(model, devices, boxes, base)? else {
        alone
            .notes
            .push("the lent devices do not make the model fit either: it stays on this box".into());
        return Ok(alone);
    };
    let better = match (alone_speed, speed) {
        (None, _) => true,
        (Some(Some(here)), Some(there)) => there > here * 1.05,
        (Some(_), _) => false,
    };
    if !better {
        alone.notes.push("the lent devices would not make it faster than this box alone (links counted), so they are left out".into());
        return Ok(alone);
    }
    Ok(across)
}

/// A count of first layers on the lent devices, the rest here: the fitting one with the best
/// ceiling (links counted), fewer lent layers on a tie within 1 %. The counts are tried on a
/// coarse grid first, then one by one around the best of it.
fn best_split_across(
    model: &ModelShape,
    devices: &[DeviceSpec],
    boxes: &[RemoteBox],
    base: &PlacementOptions,
) -> Result<Option<(Solution, Option<f64>)>, PlanError> {
    let split = LentSplit::new(model, devices, boxes, base);
    let total = model.n_layer + 1;
    let step = (total / 16).max(1);
    let mut best: Option<Candidate> = None;
    let mut tried = std::collections::BTreeSet::new();
    // Without a GPU here every offloaded layer is lent, whatever the counts say.
    let no_gpu_here = split.here_room.iter().all(|&r| r == 0);
    let grid: Vec<u32> = match no_gpu_here {
        true => vec![total],
        false => (1..=total).step_by(step as usize).chain([total]).collect(),
    };
    for lent_layers in grid {
        if !tried.insert(lent_layers) {
            continue;
        }
        let Some(candidate) = split.try_count(lent_layers)? else {
            continue;
        };
        let done = candidate.all_on_gpus;
        keep_better(&mut best, candidate);
        if done {
            break;
        }
    }
    let Some(centre) = best.as_ref().map(|b| b.lent_layers) else {
        return Ok(None);
    };
    let around = match no_gpu_here {
        true => total..=total,
        false => centre.saturating_sub(step - 1).max(1)..=(centre + step - 1).min(total),
    };
    for lent_layers in around {
        if tried.insert(lent_layers) {
            if let Some(candidate) = split.try_count(lent_layers)? {
                keep_better(&mut best, candidate);
            }
        }
    }
    Ok(best.map(|b| {
        let names = boxes.iter().map(|x| x.name.as_str()).collect::<Vec<_>>();
        let mut notes = vec![format!(
            "this box's GPUs do not hold the model, so its first {} of {total} layers go to the lent devices ({}): whole layers cross a link only where the split changes boxes, and the output and its logits stay here",
            b.lent_layers,
            names.join(", ")
        )];
        let whole_layers_only = 2 * names.len() as u32;
        if b.crossings > whole_layers_only {
            notes.push(format!(
                "a token crosses the links {} times, not {whole_layers_only}: the experts of some lent layers did not fit there and stay in this box's RAM, out and back at each such layer (the speed ceiling counts it, and this split is still the fastest found)",
                b.crossings
            ));
        }
        let solution = Solution {
            options: b.options,
            plan: b.plan,
            notes,
        };
        (solution, b.speed)
    }))
}

/// One fitting split across boxes and its ceiling.
struct Candidate {
    lent_layers: u32,
    options: PlacementOptions,
    plan: Plan,
    speed: Option<f64>,
    /// Crossings of the links per token, all boxes together.
    crossings: u32,
    all_on_gpus: bool,
}

/// Faster by more than 1 %, or as fast with fewer layers lent.
fn keep_better(best: &mut Option<Candidate>, candidate: Candidate) {
    let better = match best.as_ref() {
        None => true,
        Some(b) => match (b.speed, candidate.speed) {
            (Some(old), Some(new)) => {
                new > old * 1.01 || (new >= old * 0.99 && candidate.lent_layers < b.lent_layers)
            }
            _ => candidate.lent_layers < b.lent_layers,
        },
    };
    if better {
        *best = Some(candidate);
    }
}

/// The fixed parts of a split across boxes: the servers, the device order, the room of each.
struct LentSplit<'a> {
    model: &'a ModelShape,
    devices: &'a [DeviceSpec],
    boxes: &'a [RemoteBox],
    options: PlacementOptions,
    lent_room: Vec<u64>,
    here_room: Vec<u64>,
    moe: bool,
}

impl<'a> LentSplit<'a> {
    fn new(
        model: &'a ModelShape,
        devices: &'a [DeviceSpec],
        boxes: &'a [RemoteBox],
        base: &PlacementOptions,
    ) -> Self {
        let lent: Vec<&DeviceSpec> = devices.iter().filter(|d| d.id.is_lent()).collect();
        let here: Vec<&DeviceSpec> = devices
            .iter()
            .filter(|d| matches!(d.id, DeviceId::Gpu(_)))
            .collect();
        let healthy: Vec<&DeviceSpec> = here.iter().copied().filter(|g| !g.link_degraded).collect();
        let mut options = base.clone();
        options.split_mode = SplitMode::Layer;
        options.n_gpu_layers = None;
        options.main_gpu = 0;
        options.rpc_servers = rpc_servers(boxes);
        options.devices = lent.iter().chain(&here).map(|d| d.id).collect();
        LentSplit {
            model,
            devices,
            boxes,
            options,
            lent_room: room(&lent, &lent),
            here_room: room(&here, &healthy),
            moe: model.tensors.iter().any(|t| t.role == TensorRole::Experts),
        }
    }

    /// `lent_layers` first layers on the lent devices (by their room), the rest here; routed
    /// experts to the CPU, then back to each GPU that holds their layer while they fit.
    fn try_count(&self, lent_layers: u32) -> Result<Option<Candidate>, PlanError> {
        let total = self.model.n_layer + 1;
        let mut options = self.options.clone();
        let mut counts = shares(lent_layers, &self.lent_room);
        counts.extend(shares(total - lent_layers, &self.here_room));
        options.tensor_split = counts.iter().map(|&c| f64::from(c)).collect();
        if self.moe {
            options.overrides = vec![PlacementOptions::cpu_moe_override()];
        }
        let mut current = plan(self.model, self.devices, &options)?;
        if !gpus_fit(&current) {
            return Ok(None);
        }
        if self.moe {
            (options.overrides, current) =
                bring_experts_back(self.model, self.devices, &options, current)?;
        }
        if !current.fits() {
            return Ok(None);
        }
        let ceiling = ceiling_across(self.model, &current, self.boxes);
        Ok(Some(Candidate {
            lent_layers,
            speed: ceiling.tokens_per_s,
            crossings: ceiling.links.iter().map(|l| l.crossings_per_token).sum(),
            all_on_gpus: matches!(FitVerdict::of(&current), FitVerdict::OnGpus { .. }),
            options,
            plan: current,
        }))
    }
}

/// Room after reserve and overhead of each of `devices`, 0 for those not in `usable`.
fn room(devices: &[&DeviceSpec], usable: &[&DeviceSpec]) -> Vec<u64> {
    devices
        .iter()
        .map(|d| match usable.iter().any(|u| u.id == d.id) {
            true => d
                .capacity_bytes
                .saturating_sub(d.reserve_bytes.saturating_add(d.overhead_bytes)),
            false => 0,
        })
        .collect()
}

/// `n` whole layers shared by `weights` (largest remainders), as `-ts` counts.
fn shares(n: u32, weights: &[u64]) -> Vec<u32> {
    let sum: f64 = weights.iter().map(|&w| w as f64).sum();
    if weights.is_empty() {
        return Vec::new();
    }
    if sum <= 0.0 {
        return weights.iter().map(|_| 0).collect();
    }
    let exact: Vec<f64> = weights
        .iter()
        .map(|&w| f64::from(n) * w as f64 / sum)
        .collect();
    let mut counts: Vec<u32> = exact.iter().map(|e| e.floor() as u32).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let given: u32 = counts.iter().sum();
    for &i in order.iter().take(n.saturating_sub(given) as usize) {
        counts[i] += 1;
    }
    counts
}

/// This box alone (no lent device): the placement the module's documentation describes.
fn solve_here(
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
        (options.overrides, current) = bring_experts_back(model, devices, &options, current)?;
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
        .filter(|d| d.spec.id.is_offload())
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

/// Per GPU, the experts of its own layers for as long as they fit, then a CPU catch-all last;
/// with the plan they make (`start` itself when they do not fit after all).
fn bring_experts_back(
    model: &ModelShape,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
    start: Plan,
) -> Result<(Vec<TensorOverride>, Plan), PlanError> {
    let experts_by_layer = expert_bytes(model);
    let mut overrides = Vec::new();
    for device in start.devices.iter().filter(|d| d.spec.id.is_offload()) {
        let room = device
            .spec
            .capacity_bytes
            .saturating_sub(device.spec.reserve_bytes);
        let mut used = device.usage.total_bytes();
        let mut layers = Vec::new();
        for &layer in &device.usage.layers {
            let experts = experts_by_layer.get(&layer).copied().unwrap_or(0);
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
        return Ok((overrides, checked));
    }
    Ok((vec![PlacementOptions::cpu_moe_override()], start))
}

/// The bytes of each layer's routed experts, by layer.
fn expert_bytes(model: &ModelShape) -> HashMap<u32, u64> {
    let mut bytes = HashMap::new();
    for t in model
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Experts)
    {
        if let Some(il) = t.layer {
            let sum = bytes.entry(il).or_insert(0u64);
            *sum = sum.saturating_add(t.bytes);
        }
    }
    bytes
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
    use crate::link::Link;
    use crate::options::RpcServer;
    use crate::testing::{gpus, lend, moe_model, GIB, MIB};

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

    fn layers_on(plan: &Plan, id: DeviceId) -> Vec<u32> {
        plan.device(id).unwrap().usage.layers.clone()
    }

    #[test]
    fn a_model_that_fits_here_leaves_the_lent_devices_out() {
        let model = moe_model(40, 40, 500 * MIB, 0);
        let mut rig = gpus(2, 24 * GIB);
        let remote = lend(&mut rig, 2, 24 * GIB, Link::named("10gbe").unwrap());
        let s = solve_across(&model, &rig, &[remote], &PlacementOptions::default()).unwrap();
        assert!(s.plan.fits());
        assert!(s.options.rpc_servers.is_empty() && s.options.devices.is_empty());
        assert!(layers_on(&s.plan, DeviceId::Rpc(0)).is_empty());
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("fits on this box's GPUs alone")),
            "{:?}",
            s.notes
        );
    }

    #[test]
    fn a_model_too_big_for_this_box_sends_its_first_layers_to_the_lent_gpus() {
        // 80 dense layers of 900 MiB: 2 × 24 GiB here hold about half.
        let model = moe_model(80, 80, 600 * MIB, 0);
        let mut rig = gpus(2, 24 * GIB);
        let remote = lend(&mut rig, 2, 24 * GIB, Link::named("2.5gbe").unwrap());
        let alone = solve(&model, &gpus(2, 24 * GIB), &PlacementOptions::default()).unwrap();
        assert!(alone.options.n_gpu_layers.is_some(), "layers in RAM alone");
        let s = solve_across(
            &model,
            &rig,
            std::slice::from_ref(&remote),
            &PlacementOptions::default(),
        )
        .unwrap();
        assert!(s.plan.fits(), "{:?}", s.notes);
        assert_eq!(
            s.options.n_gpu_layers, None,
            "every layer on a GPU: {:?}",
            s.notes
        );
        assert_eq!(
            s.options.rpc_servers,
            [RpcServer {
                endpoint: "10.0.0.2:50052".into(),
                devices: 2
            }]
        );
        assert_eq!(
            s.options.devices,
            [
                DeviceId::Rpc(0),
                DeviceId::Rpc(1),
                DeviceId::Gpu(0),
                DeviceId::Gpu(1)
            ]
        );
        let lent: Vec<u32> = [DeviceId::Rpc(0), DeviceId::Rpc(1)]
            .iter()
            .flat_map(|&d| layers_on(&s.plan, d))
            .collect();
        let here: Vec<u32> = [DeviceId::Gpu(0), DeviceId::Gpu(1)]
            .iter()
            .flat_map(|&d| layers_on(&s.plan, d))
            .collect();
        assert_eq!(
            lent,
            (0..lent.len() as u32).collect::<Vec<_>>(),
            "the first layers"
        );
        assert!(
            lent.len() < here.len(),
            "this box is filled first: {} lent",
            lent.len()
        );
        assert!(!lent.is_empty());
        let output = model
            .tensors
            .iter()
            .position(|t| t.role == TensorRole::Output)
            .unwrap();
        assert_eq!(
            s.plan.tensor_devices[output],
            DeviceId::Gpu(1),
            "the output stays here"
        );
        let c = crate::ceiling::ceiling_across(&model, &s.plan, &[remote]);
        assert_eq!(c.links.len(), 1);
        assert_eq!(c.links[0].crossings_per_token, 2, "in and out once");
        let local = crate::ceiling::ceiling(&model, &alone.plan);
        assert!(c.tokens_per_s.unwrap() > 3.0 * local.tokens_per_s.unwrap());
    }

    #[test]
    fn a_moe_model_puts_whole_layers_with_their_experts_on_the_lent_gpus() {
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let base = PlacementOptions {
            context: 32_768,
            ..Default::default()
        };
        let mut rig = gpus(2, 24 * GIB);
        let remote = lend(&mut rig, 2, 24 * GIB, Link::named("10gbe").unwrap());
        let s = solve_across(&model, &rig, std::slice::from_ref(&remote), &base).unwrap();
        assert!(s.plan.fits(), "{:?}", s.notes);
        for id in [DeviceId::Rpc(0), DeviceId::Rpc(1)] {
            let d = s.plan.device(id).unwrap();
            assert!(!d.usage.expert_layers.is_empty(), "{id:?} holds experts");
            assert!(
                d.usage
                    .expert_layers
                    .iter()
                    .all(|l| d.usage.layers.contains(l)),
                "{id:?}: only its own layers' experts"
            );
        }
        let c = crate::ceiling::ceiling_across(&model, &s.plan, &[remote]);
        // In and out once, and out and back for each lent layer whose experts did not fit there.
        let cpu_experts = &s.plan.device(DeviceId::Cpu).unwrap().usage.expert_layers;
        let lent_layers_with_experts_here = [DeviceId::Rpc(0), DeviceId::Rpc(1)]
            .iter()
            .flat_map(|&d| layers_on(&s.plan, d))
            .filter(|l| cpu_experts.contains(l))
            .count() as u32;
        assert_eq!(
            c.links[0].crossings_per_token,
            2 + 2 * lent_layers_with_experts_here
        );
        let said = s.notes.iter().any(|n| n.contains("times, not 2"));
        assert_eq!(said, lent_layers_with_experts_here > 0, "{:?}", s.notes);
        let alone = crate::ceiling::ceiling(
            &model,
            &solve(&model, &gpus(2, 24 * GIB), &base).unwrap().plan,
        );
        assert!(c.tokens_per_s.unwrap() > alone.tokens_per_s.unwrap());
    }

    #[test]
    fn a_head_without_a_gpu_lends_every_layer_it_cannot_hold() {
        let model = moe_model(40, 40, 600 * MIB, 0);
        let mut rig = gpus(0, 0);
        rig[0].capacity_bytes = 16 * GIB;
        let remote = lend(&mut rig, 2, 24 * GIB, Link::named("10gbe").unwrap());
        let s = solve_across(
            &model,
            &rig,
            std::slice::from_ref(&remote),
            &PlacementOptions::default(),
        )
        .unwrap();
        assert!(s.plan.fits(), "{:?}", s.notes);
        assert_eq!(s.options.devices, [DeviceId::Rpc(0), DeviceId::Rpc(1)]);
        assert!(layers_on(&s.plan, DeviceId::Cpu).is_empty());
        assert!(
            s.notes[0].contains("first 41 of 41 layers"),
            "{:?}",
            s.notes
        );
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
