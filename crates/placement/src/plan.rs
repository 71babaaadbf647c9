//! Puts it together: every tensor and every layer's KV cache on a device, and the memory each
//! device needs (weights, KV, compute buffers, overhead) against what it has.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::compute::{compute_estimate, remembered_matches, Scheduler};
use super::correction::Correction;
use super::kv::{self, KvError};
use super::layers::{assign_layers, LayerDevices};
use super::model::{ModelShape, TensorRole};
use super::options::{DeviceId, PlacementOptions, SplitMode};

/// A device as the planner sees it: what it holds and what must stay free.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub id: DeviceId,
    pub name: String,
    /// Memory the planner may fill: free VRAM (live) or total (hypothetical rig), host RAM for the CPU.
    pub capacity_bytes: u64,
    /// Kept free on purpose (the user's reserve).
    pub reserve_bytes: u64,
    /// Memory a GPU loses before any tensor lands (CUDA context), calibrated by the user.
    pub overhead_bytes: u64,
    /// Peak memory bandwidth, for the speed ceiling.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// The GPU sits on a link of x4 or less (a riser): fine alone, bad inside a split.
    #[serde(default)]
    pub link_degraded: bool,
    /// Learned from this rig's records: scales the compute estimate, replaces the overhead.
    #[serde(default)]
    pub correction: Option<Correction>,
}

/// What one device ends up holding.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceUsage {
    pub weights_bytes: u64,
    pub kv_bytes: u64,
    /// The compute buffer counted in the total: the estimate after this rig's correction.
    pub compute_bytes: u64,
    /// The compute-buffer estimate itself, before any correction (what records compare).
    #[serde(default)]
    pub compute_estimate_bytes: u64,
    pub overhead_bytes: u64,
    /// Layers whose non-expert tensors are here.
    pub layers: Vec<u32>,
    /// Layers whose routed experts are here.
    pub expert_layers: Vec<u32>,
}

impl DeviceUsage {
    pub fn total_bytes(&self) -> u64 {
        // Saturating: a byte count from a hostile header must read "too big", never wrap to "fits".
        self.weights_bytes
            .saturating_add(self.kv_bytes)
            .saturating_add(self.compute_bytes)
            .saturating_add(self.overhead_bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicePlan {
    pub spec: DeviceSpec,
    pub usage: DeviceUsage,
    /// How far past its capacity (minus reserve) the device is; 0 when it fits.
    pub overflow_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub devices: Vec<DevicePlan>,
    /// The device of each tensor, in the model's tensor order.
    pub tensor_devices: Vec<DeviceId>,
    /// The device of each layer's KV cache.
    pub kv_devices: Vec<DeviceId>,
    /// Tensors each override (in order) took; 0 means an earlier one or no tensor matched.
    pub override_hits: Vec<u32>,
    pub n_ctx: u64,
    pub n_ctx_seq: u64,
}

impl Plan {
    pub fn fits(&self) -> bool {
        self.devices.iter().all(|d| d.overflow_bytes == 0)
    }

    pub fn device(&self, id: DeviceId) -> Option<&DevicePlan> {
        self.devices.iter().find(|d| d.spec.id == id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("-ot pattern '{pattern}' is not a valid regular expression: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("{flag} names {device}, which this rig does not have: use {available}")]
    UnknownDevice {
        flag: &'static str,
        device: String,
        available: String,
    },
    #[error("{0}")]
    Kv(#[from] KvError),
}

/// What a message names as the devices there are: `CUDA0, CUDA1, RPC0 or CPU`.
fn available_names(devices: &[DeviceSpec]) -> String {
    let names: Vec<String> = devices.iter().map(|d| d.id.device_name()).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "no device (the rig is empty)".to_owned(),
    }
}

/// Refuses an override to a device the rig does not have.
fn check_override_devices(
    options: &PlacementOptions,
    devices: &[DeviceSpec],
) -> Result<(), PlanError> {
    match options
        .overrides
        .iter()
        .find(|o| !devices.iter().any(|d| d.id == o.device))
    {
        Some(o) => Err(PlanError::UnknownDevice {
            flag: "-ot",
            device: o.device.buffer_name(),
            available: available_names(devices),
        }),
        None => Ok(()),
    }
}

/// For each of `model`'s tensors, the first override whose pattern matches its name (llama.cpp
/// applies the first); each pattern's matches remembered while a solver plans the model
/// ([`remembered_matches`]).
fn first_matches(
    model: &ModelShape,
    options: &PlacementOptions,
) -> Result<Vec<Option<usize>>, PlanError> {
    let matches = options
        .overrides
        .iter()
        .map(|o| {
            let pattern = o.pattern.as_str();
            remembered_matches(pattern, || {
                let regex = Regex::new(pattern).map_err(|e| PlanError::BadPattern {
                    pattern: pattern.to_owned(),
                    reason: e.to_string(),
                })?;
                Ok(model
                    .tensors
                    .iter()
                    .map(|t| regex.is_match(&t.name))
                    .collect())
            })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    Ok((0..model.tensors.len())
        .map(|i| matches.iter().position(|hits| hits.get(i) == Some(&true)))
        .collect())
}

/// The devices layers can be offloaded to, in the order llama.cpp uses them, which `-ts`, `-mg`
/// and the layer split follow: the `-dev` list when given; else llama.cpp's own order
/// (`llama_model_load`): the lent (RPC) devices the `--rpc` servers lend first, then this
/// box's GPUs.
pub fn offload_order<'a>(
    devices: &'a [DeviceSpec],
    options: &PlacementOptions,
) -> Result<Vec<&'a DeviceSpec>, PlanError> {
    if options.devices.is_empty() {
        let lent_by_servers = options.lent_devices();
        let lent = devices
            .iter()
            .filter(move |d| matches!(d.id, DeviceId::Rpc(i) if i < lent_by_servers));
        let local = devices.iter().filter(|d| matches!(d.id, DeviceId::Gpu(_)));
        return Ok(lent.chain(local).collect());
    }
    let lent_by_servers = options.lent_devices();
    let usable = |d: &&DeviceSpec| match d.id {
        DeviceId::Rpc(i) => i < lent_by_servers,
        other => other.is_offload(),
    };
    options
        .devices
        .iter()
        .map(|&id| {
            devices
                .iter()
                .filter(usable)
                .find(|d| d.id == id)
                .ok_or_else(|| PlanError::UnknownDevice {
                    flag: "-dev",
                    device: id.device_name(),
                    available: available_names(
                        &devices.iter().filter(usable).cloned().collect::<Vec<_>>(),
                    ),
                })
        })
        .collect()
}

/// Plans `model` on `devices` (this box's GPUs in backend order, lent devices, the CPU) with
/// `options`.
pub fn plan(
    model: &ModelShape,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
) -> Result<Plan, PlanError> {
    let gpus = offload_order(devices, options)?;
    check_override_devices(options, devices)?;
    let first_match = first_matches(model, options)?;
    let free: Vec<u64> = gpus.iter().map(|d| d.capacity_bytes).collect();
    // Layers come back by position in the offload order; each position is a real device.
    let mut layer_devices = assign_layers(model.n_layer, &free, options);
    let by_position = |d: DeviceId| match d {
        DeviceId::Gpu(position) => gpus.get(position as usize).map_or(d, |spec| spec.id),
        other => other,
    };
    for d in layer_devices.layers.iter_mut() {
        *d = by_position(*d);
    }
    layer_devices.output = by_position(layer_devices.output);
    let mut override_hits = vec![0u32; options.overrides.len()];
    let tensor_devices: Vec<DeviceId> = model
        .tensors
        .iter()
        .zip(first_match.iter())
        .map(|(t, &matched)| {
            if let Some(hit) = matched.and_then(|i| override_hits.get_mut(i)) {
                *hit = hit.saturating_add(1);
            }
            tensor_device(
                t.role,
                t.layer,
                &layer_devices,
                matched.map(|i| options.overrides[i].device),
            )
        })
        .collect();
    let geometry = kv::geometry(options, model.context_length);
    let kv_per_layer = kv::layer_kv_bytes(&model.attention, options, &geometry)?;
    let main_device = gpus
        .get(options.main_gpu as usize)
        .map_or(DeviceId::Gpu(options.main_gpu), |d| d.id);
    let kv_devices = kv_devices(&layer_devices, options, main_device);

    let mut ledger = Ledger {
        ids: devices.iter().map(|d| d.id).collect(),
        usage: vec![DeviceUsage::default(); devices.len()],
    };
    let row_split = RowSplit::new(options, &gpus);
    for (t, &device) in model.tensors.iter().zip(&tensor_devices) {
        ledger.add_weights(device, t.bytes, t.role, t.layer, &row_split);
    }
    let output_copied =
        layer_devices.output != DeviceId::Cpu || model.copies_tied_output_everywhere();
    if model.ties_output_to_embedding() && output_copied {
        // llama.cpp uses token_embd as the output matrix too; on the CPU that is the same
        // tensor (but for the architectures that load the output first), while an output
        // layer on a GPU gets its own copy there.
        ledger.add_weights(
            layer_devices.output,
            model.embedding_bytes(),
            TensorRole::Output,
            Some(model.n_layer),
            &row_split,
        );
    }
    for (&bytes, &device) in kv_per_layer.iter().zip(&kv_devices) {
        if let Some(u) = ledger.at(device) {
            u.kv_bytes = u.kv_bytes.saturating_add(bytes);
        }
    }
    for (il, &device) in layer_devices.layers.iter().enumerate() {
        if let Some(u) = ledger.at(device) {
            u.layers.push(il as u32);
        }
    }
    for (t, &device) in model.tensors.iter().zip(&tensor_devices) {
        if let (TensorRole::Experts, Some(layer), Some(u)) = (t.role, t.layer, ledger.at(device)) {
            if !u.expert_layers.contains(&layer) {
                u.expert_layers.push(layer);
            }
        }
    }
    let ids: Vec<DeviceId> = devices.iter().map(|d| d.id).collect();
    let scheduler = Scheduler::of(model, &ids, &layer_devices, &tensor_devices, options);
    for spec in devices {
        let compute = compute_estimate(
            model,
            spec.id,
            &layer_devices,
            &geometry,
            (options, &scheduler),
        );
        if let Some(u) = ledger.at(spec.id) {
            u.expert_layers.sort_unstable();
            u.compute_estimate_bytes = compute;
            u.compute_bytes = Correction::compute(spec.correction.as_ref(), compute);
            // A GPU pays its context even when it holds nothing (a lent one on its own box);
            // host memory has no such cost.
            u.overhead_bytes = if spec.id.is_offload() {
                Correction::overhead(spec.correction.as_ref(), spec.overhead_bytes)
            } else {
                0
            };
        }
    }
    let devices = devices
        .iter()
        .zip(ledger.usage)
        .map(|(spec, usage)| {
            let room = spec.capacity_bytes.saturating_sub(spec.reserve_bytes);
            DevicePlan {
                overflow_bytes: usage.total_bytes().saturating_sub(room),
                spec: spec.clone(),
                usage,
            }
        })
        .collect();
    Ok(Plan {
        devices,
        tensor_devices,
        kv_devices,
        override_hits,
        n_ctx: geometry.n_ctx,
        n_ctx_seq: geometry.n_ctx_seq,
    })
}

/// The first matching override wins; then the input embedding on the CPU, layers on their device.
fn tensor_device(
    role: TensorRole,
    layer: Option<u32>,
    layers: &LayerDevices,
    overridden: Option<DeviceId>,
) -> DeviceId {
    if let Some(device) = overridden {
        return device;
    }
    match (role, layer) {
        (TensorRole::TokenEmbedding, _) | (TensorRole::Other, _) => DeviceId::Cpu,
        (TensorRole::Output, _) => layers.output,
        (_, Some(il)) => layers
            .layers
            .get(il as usize)
            .copied()
            .unwrap_or(DeviceId::Cpu),
        (_, None) => DeviceId::Cpu,
    }
}

/// KV of a layer lives with the layer (moving experts with `-ot` does not move it); in row mode
/// on the main GPU; with `-nkvo` in host memory.
fn kv_devices(layers: &LayerDevices, options: &PlacementOptions, main: DeviceId) -> Vec<DeviceId> {
    layers
        .layers
        .iter()
        .map(|&d| match (options.kv_offload, options.split_mode, d) {
            (false, _, _) | (_, _, DeviceId::Cpu) => DeviceId::Cpu,
            (true, SplitMode::Row, _) => main,
            (true, _, gpu) => gpu,
        })
        .collect()
}

/// Memory per device while the plan is being added up.
struct Ledger {
    ids: Vec<DeviceId>,
    usage: Vec<DeviceUsage>,
}

impl Ledger {
    fn at(&mut self, id: DeviceId) -> Option<&mut DeviceUsage> {
        let index = self.ids.iter().position(|&d| d == id)?;
        self.usage.get_mut(index)
    }

    /// Row mode splits the layers' matrices across the GPUs by `-ts`; everything else lands whole.
    fn add_weights(
        &mut self,
        device: DeviceId,
        bytes: u64,
        role: TensorRole,
        layer: Option<u32>,
        rows: &RowSplit,
    ) {
        let split =
            rows.active && device.is_offload() && layer.is_some() && role != TensorRole::Output;
        if !split {
            if let Some(u) = self.at(device) {
                u.weights_bytes = u.weights_bytes.saturating_add(bytes);
            }
            return;
        }
        for &(gpu, share) in &rows.shares {
            if let Some(u) = self.at(gpu) {
                // A float-to-int `as` saturates, so a huge share stays huge.
                u.weights_bytes = u
                    .weights_bytes
                    .saturating_add((bytes as f64 * share) as u64);
            }
        }
    }
}

/// The share of each GPU in `-sm row` mode.
struct RowSplit {
    active: bool,
    shares: Vec<(DeviceId, f64)>,
}

impl RowSplit {
    fn new(options: &PlacementOptions, gpus: &[&DeviceSpec]) -> Self {
        let weights: Vec<f64> = (0..gpus.len())
            .map(|i| options.tensor_split.get(i).copied().unwrap_or(0.0).max(0.0))
            .collect();
        let sum: f64 = weights.iter().sum();
        let even = 1.0 / gpus.len().max(1) as f64;
        let shares = gpus
            .iter()
            .zip(&weights)
            .map(|(g, w)| (g.id, if sum > 0.0 { w / sum } else { even }))
            .collect();
        Self {
            active: options.split_mode == SplitMode::Row && gpus.len() > 1,
            shares,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::TensorOverride;
    use crate::testing::{gpus, moe_model, GIB, MIB};

    #[test]
    fn everything_adds_up_to_the_model_plus_the_kv_cache() {
        let model = moe_model(20, 2, 200 * MIB, 1200 * MIB);
        let options = PlacementOptions {
            context: 32_768,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(2, 48 * GIB), &options).unwrap();
        let weights: u64 = plan.devices.iter().map(|d| d.usage.weights_bytes).sum();
        assert_eq!(weights, model.total_bytes());
        let kv: u64 = plan.devices.iter().map(|d| d.usage.kv_bytes).sum();
        assert_eq!(kv, 20 * 576 * 2 * 32_768);
        let cpu = plan.device(DeviceId::Cpu).unwrap();
        assert_eq!(
            cpu.usage.weights_bytes,
            800 * MIB,
            "only the input embedding stays on the CPU"
        );
        assert_eq!(cpu.usage.kv_bytes, 0);
    }

    #[test]
    fn n_cpu_moe_with_a_layer_split_piles_the_kept_experts_on_the_last_card() {
        // Seed 002: -ncmoe with -sm layer over 4× 24 GB tried to put 54 GB on one card.
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let mut options = PlacementOptions {
            context: 32_768,
            ..Default::default()
        };
        options.overrides = PlacementOptions::n_cpu_moe_overrides(60);
        let plan = plan(&model, &gpus(4, 24 * GIB), &options).unwrap();
        let last = plan.device(DeviceId::Gpu(3)).unwrap();
        assert_eq!(last.usage.expert_layers, (60..78).collect::<Vec<_>>());
        assert!(
            last.overflow_bytes > 20 * GIB,
            "overflow {} GiB",
            last.overflow_bytes / GIB
        );
        assert!(plan
            .device(DeviceId::Gpu(0))
            .unwrap()
            .usage
            .expert_layers
            .is_empty());
        assert!(!plan.fits());
    }

    #[test]
    fn the_first_matching_override_wins_and_kv_stays_with_its_layer() {
        let model = moe_model(8, 0, 100 * MIB, 600 * MIB);
        let mut options = PlacementOptions {
            context: 8192,
            ..Default::default()
        };
        options.overrides = vec![
            TensorOverride {
                pattern: r"blk\.(0|1)\.ffn_.*_exps".into(),
                device: DeviceId::Gpu(1),
            },
            PlacementOptions::cpu_moe_override(),
        ];
        let plan = plan(&model, &gpus(2, 24 * GIB), &options).unwrap();
        assert_eq!(
            plan.device(DeviceId::Gpu(1)).unwrap().usage.expert_layers,
            vec![0, 1]
        );
        assert_eq!(
            plan.device(DeviceId::Cpu).unwrap().usage.expert_layers,
            (2..8).collect::<Vec<_>>()
        );
        // Layers 0 and 1 sit on GPU 0 by the split; their KV stays there.
        assert_eq!(plan.kv_devices[0], DeviceId::Gpu(0));
    }

    #[test]
    fn bad_overrides_name_the_pattern_or_the_device() {
        let model = moe_model(4, 0, 10 * MIB, 10 * MIB);
        let mut options = PlacementOptions {
            overrides: vec![TensorOverride {
                pattern: "blk\\.(0".into(),
                device: DeviceId::Cpu,
            }],
            ..Default::default()
        };
        let err = plan(&model, &gpus(1, GIB), &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("blk\\.(0") && err.contains("not a valid regular expression"),
            "{err}"
        );
        options.overrides = vec![TensorOverride {
            pattern: "exps".into(),
            device: DeviceId::Gpu(5),
        }];
        let err = plan(&model, &gpus(2, GIB), &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("-ot names CUDA5") && err.contains("use CUDA0, CUDA1 or CPU"),
            "{err}"
        );
    }

    #[test]
    fn a_tied_output_is_loaded_twice() {
        let mut model = moe_model(4, 4, 10 * MIB, 0);
        model.tensors.retain(|t| t.name != "output.weight");
        let plan = plan(&model, &gpus(1, 24 * GIB), &PlacementOptions::default()).unwrap();
        let gpu = plan.device(DeviceId::Gpu(0)).unwrap();
        let cpu = plan.device(DeviceId::Cpu).unwrap();
        assert_eq!(cpu.usage.weights_bytes, 800 * MIB);
        assert!(
            gpu.usage.weights_bytes >= 800 * MIB,
            "the duplicate output matrix is on the GPU"
        );
    }

    #[test]
    fn the_reserve_and_overhead_count_against_capacity() {
        let model = moe_model(4, 4, 100 * MIB, 0);
        let mut rig = gpus(1, 2 * GIB);
        rig[0].reserve_bytes = GIB;
        let plan = plan(
            &model,
            &rig,
            &PlacementOptions {
                context: 512,
                ..Default::default()
            },
        )
        .unwrap();
        let gpu = plan.device(DeviceId::Gpu(0)).unwrap();
        assert_eq!(gpu.usage.overhead_bytes, 300 * MIB);
        assert_eq!(gpu.overflow_bytes, gpu.usage.total_bytes() - GIB);
    }

    #[test]
    fn byte_counts_saturate_instead_of_wrapping_to_fits() {
        // Widths no header may claim any more, and options a client may still send: the KV
        // product passes 2^64, which wrapped would read as a few bytes that "fit".
        let mut model = moe_model(4, 1, 10 * MIB, 10 * MIB);
        model.attention.key_length = u32::MAX;
        model.attention.value_length = u32::MAX;
        model.attention.head_count_kv = vec![u32::MAX; 4];
        model.n_embd = u32::MAX;
        model.n_ff = u32::MAX;
        model.n_vocab = u32::MAX;
        let options = PlacementOptions {
            context: u32::MAX,
            parallel: u32::MAX,
            ubatch: u32::MAX,
            batch: u32::MAX,
            ..PlacementOptions::default()
        };
        let plan = plan(&model, &gpus(2, 24 * GIB), &options).unwrap();
        assert!(!plan.fits());
        assert!(plan
            .devices
            .iter()
            .any(|d| d.usage.kv_bytes == u64::MAX && d.usage.total_bytes() == u64::MAX));
    }
}
