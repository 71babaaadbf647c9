//! Puts it together: every tensor and every layer's KV cache on a device, and the memory each
//! device needs (weights, KV, compute buffers, overhead) against what it has.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::correction::Correction;
use super::kv::{self, ContextGeometry, KvError};
use super::layers::{assign_layers, LayerDevices};
use super::model::{ModelShape, RecurrentKind, TensorRole};
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
    #[error(
        "-ot sends tensors to {device}, which this rig does not have: use CUDA0…CUDA{last} or CPU"
    )]
    UnknownDevice { device: String, last: u32 },
    #[error("{0}")]
    Kv(#[from] KvError),
}

struct CompiledOverride {
    regex: Regex,
    device: DeviceId,
}

fn compile_overrides(
    options: &PlacementOptions,
    n_gpus: u32,
) -> Result<Vec<CompiledOverride>, PlanError> {
    options
        .overrides
        .iter()
        .map(|o| {
            if let DeviceId::Gpu(i) = o.device {
                if i >= n_gpus {
                    return Err(PlanError::UnknownDevice {
                        device: o.device.buffer_name(),
                        last: n_gpus.saturating_sub(1),
                    });
                }
            }
            let regex = Regex::new(&o.pattern).map_err(|e| PlanError::BadPattern {
                pattern: o.pattern.clone(),
                reason: e.to_string(),
            })?;
            Ok(CompiledOverride {
                regex,
                device: o.device,
            })
        })
        .collect()
}

/// Plans `model` on `devices` (GPUs first, in backend order, then the CPU) with `options`.
pub fn plan(
    model: &ModelShape,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
) -> Result<Plan, PlanError> {
    let gpus: Vec<&DeviceSpec> = devices
        .iter()
        .filter(|d| matches!(d.id, DeviceId::Gpu(_)))
        .collect();
    let n_gpus = gpus.len() as u32;
    let overrides = compile_overrides(options, n_gpus)?;
    let free: Vec<u64> = gpus.iter().map(|d| d.capacity_bytes).collect();
    let layer_devices = assign_layers(model.n_layer, &free, options);
    let mut override_hits = vec![0u32; overrides.len()];
    let tensor_devices: Vec<DeviceId> = model
        .tensors
        .iter()
        .map(|t| {
            let matched = overrides.iter().position(|o| o.regex.is_match(&t.name));
            if let Some(hit) = matched.and_then(|i| override_hits.get_mut(i)) {
                *hit = hit.saturating_add(1);
            }
            tensor_device(
                t.role,
                t.layer,
                &layer_devices,
                matched.map(|i| overrides[i].device),
            )
        })
        .collect();
    let geometry = kv::geometry(options, model.context_length);
    let kv_per_layer = kv::layer_kv_bytes(&model.attention, options, &geometry)?;
    let kv_devices = kv_devices(&layer_devices, options);

    let mut ledger = Ledger {
        ids: devices.iter().map(|d| d.id).collect(),
        usage: vec![DeviceUsage::default(); devices.len()],
    };
    let row_split = RowSplit::new(options, &gpus);
    for (t, &device) in model.tensors.iter().zip(&tensor_devices) {
        ledger.add_weights(device, t.bytes, t.role, t.layer, &row_split);
    }
    if model.ties_output_to_embedding() && layer_devices.output != DeviceId::Cpu {
        // llama.cpp uses token_embd as the output matrix too; on the CPU that is the same
        // tensor, but an output layer on a GPU gets its own copy there.
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
    for spec in devices {
        let compute = compute_estimate(model, spec.id, &layer_devices, &geometry, options);
        if let Some(u) = ledger.at(spec.id) {
            u.expert_layers.sort_unstable();
            u.compute_estimate_bytes = compute;
            u.compute_bytes = Correction::compute(spec.correction.as_ref(), compute);
            // A GPU pays its context even when it holds nothing; host memory has no such cost.
            u.overhead_bytes = if matches!(spec.id, DeviceId::Gpu(_)) {
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
fn kv_devices(layers: &LayerDevices, options: &PlacementOptions) -> Vec<DeviceId> {
    layers
        .layers
        .iter()
        .map(|&d| match (options.kv_offload, options.split_mode, d) {
            (false, _, _) | (_, _, DeviceId::Cpu) => DeviceId::Cpu,
            (true, SplitMode::Row, DeviceId::Gpu(_)) => DeviceId::Gpu(options.main_gpu),
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
        let split = rows.active
            && matches!(device, DeviceId::Gpu(_))
            && layer.is_some()
            && role != TensorRole::Output;
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

/// Live activations a graph phase holds besides its own big tensor, in rows of the embedding
/// width (measured: 7 × ubatch × n_embd floats covers every shape we tried).
const ACTIVATION_ROWS: u64 = 7;

/// Rows of the embedding width a purely recurrent graph (no attention layer at all, e.g. Mamba)
/// holds beside the logits: 3 measured, one more for margin. Such a graph has no attention
/// phase to keep Q, K, V and scores alive, so the 7 rows of a transformer overestimated Mamba's
/// buffer by a quarter.
const RECURRENT_ACTIVATION_ROWS: u64 = 4;

/// The largest phase of a recurrent layer, whole: its own live activations are included, so it
/// competes with the other phases plus theirs instead of adding to them. llama.cpp reserves
/// the graph for ubatch tokens spread over `n_seq_max` sequences (`sched_reserve`). Envelopes
/// measured against `llama-fit-params` on the CPU backend (the allocator's reuse rules out a
/// closed form): over 48 Mamba and 108 Qwen3-Next shapes (n_embd 2048–8192, 1–8 sequences,
/// 512- and 1024-token micro-batches) never under llama.cpp's figure and at most 15 % over.
/// - Mamba (`build_mamba_layer`): per token the x/z projection (2 × d_inner), the conv input and
///   output, the scan output and the gated product: 6 × d_inner for Mamba 1 (written here as
///   4 × d_inner + 2 × conv channels so that Mamba-2's B/C groups count), and 2 rows of n_embd
///   (1 measured); per sequence the SSM state (the scan's final state) and the conv state twice
///   (gathered, then inside the conv input).
/// - Gated delta net (`qwen3next`, the fused `ggml_gated_delta_net` op of `build_delta_net`):
///   the larger of the convolution (its input, output and SiLU: 3 × conv channels per token,
///   with the output gate z (d_inner) and 5/2 rows of n_embd) and the delta net itself (per
///   token 7/4 × conv channels, 3/2 × d_inner for z and the output, 3/2 × the width of Q and K
///   (d_inner when they are repeated to more value heads), 21/4 rows of n_embd; per sequence
///   the state read and the state written, 2 × n_embd_s).
fn recurrent_phase(model: &ModelShape, ub: u64, sequences: u64) -> u64 {
    let Some(shape) = model.attention.recurrent else {
        return 0;
    };
    let floats = |n: u64| n.saturating_mul(4);
    let per_token = |n: u64| floats(n.saturating_mul(ub));
    let d_inner = u64::from(shape.inner_size);
    let channels = shape.conv_channels();
    let n_embd = u64::from(model.n_embd);
    let conv_state = shape.conv_state_elements();
    let ssm_state = shape.ssm_state_elements();
    match shape.kind {
        RecurrentKind::Mamba => {
            let tokens = d_inner
                .saturating_mul(4)
                .saturating_add(channels.saturating_mul(2))
                .saturating_add(n_embd.saturating_mul(2));
            let sequence = ssm_state.saturating_add(conv_state.saturating_mul(2));
            per_token(tokens).saturating_add(floats(sequence.saturating_mul(sequences)))
        }
        RecurrentKind::GatedDeltaNet => {
            let keys = u64::from(shape.state_size).saturating_mul(u64::from(shape.group_count));
            let q_k = if shape.group_count == shape.time_step_rank {
                keys
            } else {
                d_inner
            };
            let convolution = channels
                .saturating_mul(3)
                .saturating_add(d_inner)
                .saturating_add(n_embd.saturating_mul(5).div_ceil(2));
            let quarters = channels
                .saturating_mul(7)
                .saturating_add(q_k.saturating_mul(6))
                .saturating_add(d_inner.saturating_mul(6))
                .saturating_add(n_embd.saturating_mul(21));
            let delta_net = per_token(quarters.div_ceil(4)).saturating_add(floats(
                ssm_state.saturating_mul(2).saturating_mul(sequences),
            ));
            per_token(convolution).max(delta_net)
        }
    }
}

/// Without flash attention, queries wider than the embedding (heads × head size > n_embd, as
/// Qwen3-Next's 16 × 256 over 2048, whose Q projection also carries an output gate) keep more
/// alive beside the scores than the activation rows cover: about 7/2 floats per token for each
/// extra query column (measured against `llama-fit-params` at 1×, 2× and 4× the embedding
/// width), 4 with a margin.
/// 0 for MLA, whose key length is the latent width, not a per-head query width.
fn wide_queries(model: &ModelShape, heads: u64, ub: u64) -> u64 {
    if model.attention.mla {
        return 0;
    }
    let width = heads.saturating_mul(u64::from(model.attention.key_length));
    let extra = width.saturating_sub(u64::from(model.n_embd));
    extra.saturating_mul(4).saturating_mul(ub).saturating_mul(4)
}

/// The DSA indexer's share of the attention phase without flash attention (GLM-5.x), measured
/// against `llama-fit-params` on a small shape: its scores over the whole context (indexer
/// heads × n_kv × ubatch floats), the selected keys ((heads + 2) × top-k × ubatch floats) and
/// n_kv × (2 × ubatch + 640) bytes of temporaries. 0 for models without an indexer. (With flash
/// attention, see [`sparse_flash_attention`].)
fn sparse_attention(model: &ModelShape, heads: u64, n_ctx: u64, ub: u64) -> u64 {
    let attention = &model.attention;
    if attention.indexer_heads == 0 || attention.indexer_key_length.iter().all(|&w| w == 0) {
        return 0;
    }
    let floats = |n: u64| n.saturating_mul(ub).saturating_mul(4);
    let scores = floats(u64::from(attention.indexer_heads).saturating_mul(n_ctx));
    let selected = floats(
        heads
            .saturating_add(2)
            .saturating_mul(u64::from(attention.indexer_top_k)),
    );
    let temporaries = n_ctx.saturating_mul(ub.saturating_mul(2).saturating_add(640));
    // Each full indexer layer adds about 11 ubatch rows of its key width (measured).
    let indexer_rows: u64 = attention
        .indexer_key_length
        .iter()
        .map(|&w| u64::from(w).saturating_mul(11))
        .fold(0, u64::saturating_add);
    scores
        .saturating_add(selected)
        .saturating_add(temporaries)
        .saturating_add(floats(indexer_rows))
}

/// The DSA graph with flash attention (GLM-5.x; llama.cpp's fused lightning indexer), measured
/// against `llama-fit-params` on GLM-5.2-sized shapes (8 and 78 layers, 16 to 96 heads, 2 K to
/// 128 K context, ubatch 128 to 512): its attention phase and what stays allocated for the whole
/// graph.
/// - The phase: per key and token one f32 indexer score beside the masks of the sparse
///   attention (8 bytes in all, not one score per indexer head); per head and token about
///   three rows of the latent key width; three rows of the embedding. It holds the layer's
///   activations itself.
/// - Kept: on each attention layer of the device, the row of zeros that unmasks the selected
///   keys (top-k × ubatch f32) is a graph leaf, allocated for the whole graph.
struct SparseFlashAttention {
    phase: u64,
    kept: u64,
}

fn sparse_flash_attention(
    model: &ModelShape,
    heads: u64,
    n_ctx: u64,
    ub: u64,
    attention_layers: u64,
) -> Option<SparseFlashAttention> {
    let attention = &model.attention;
    if attention.indexer_heads == 0 || attention.indexer_key_length.iter().all(|&w| w == 0) {
        return None;
    }
    let floats = |n: u64| n.saturating_mul(ub).saturating_mul(4);
    let scores_and_masks = n_ctx.saturating_mul(ub).saturating_mul(8);
    let latent_rows = heads
        .saturating_mul(u64::from(attention.key_length))
        .saturating_mul(3);
    let embedding_rows = u64::from(model.n_embd).saturating_mul(3);
    let selected = u64::from(attention.indexer_top_k).min(n_ctx);
    Some(SparseFlashAttention {
        phase: scores_and_masks.saturating_add(floats(latent_rows.saturating_add(embedding_rows))),
        kept: floats(selected.saturating_mul(attention_layers)),
    })
}

/// The compute buffer: llama.cpp's allocator reserves the worst-case graph for one micro-batch
/// and reuses memory between phases, so the buffer is the largest phase, not their sum
/// (summing them overestimated by 12 % to 37 %). The phases, calibrated against
/// `llama-fit-params -fitp on` on the CPU backend over dense, GQA, MoE, sliding-window and MLA
/// shapes (`crates/core/tests/fit_params_oracle.rs`):
/// - attention: without flash attention the scores (heads × n_kv × ubatch f32), the mask
///   (n_kv × ubatch f32) and what queries wider than the embedding add (`wide_queries`); with
///   it only an f16 mask; none for a model without attention layers;
/// - feed-forward: gate, up and their product (3 × n_ff × ubatch);
/// - on the output device, the logits (n_vocab × ubatch f32);
/// - on a device with recurrent layers, the recurrent phase (see `recurrent_phase`), which
///   carries its own activations;
/// - for a DSA model with flash attention, its own attention phase and the leaves it keeps
///   (see `sparse_flash_attention`).
fn compute_estimate(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    options: &PlacementOptions,
) -> u64 {
    let holds_layers = layers.layers.contains(&device);
    let holds_output = layers.output == device;
    if !holds_layers && !holds_output {
        return 0;
    }
    let ub = u64::from(options.ubatch.min(options.batch).max(1));
    let floats = |n: u64| n.saturating_mul(ub).saturating_mul(4);
    // A recurrent model without any attention layer (Mamba) has neither a mask nor scores.
    let attends =
        model.attention.recurrent.is_none() || model.attention.head_count_kv.iter().any(|&h| h > 0);
    let rows = if attends {
        ACTIVATION_ROWS
    } else {
        RECURRENT_ACTIVATION_ROWS
    };
    let activations = floats(u64::from(model.n_embd)).saturating_mul(rows);
    let heads = u64::from(
        model
            .attention
            .head_count
            .iter()
            .copied()
            .max()
            .unwrap_or(0),
    );
    let feed_forward = floats(u64::from(model.n_ff).saturating_mul(3));
    let logits = if holds_output {
        floats(u64::from(model.n_vocab))
    } else {
        0
    };
    if options.flash_attention && attends {
        let attention_layers = layers
            .layers
            .iter()
            .zip(&model.attention.head_count_kv)
            .filter(|&(&d, &kv_heads)| d == device && kv_heads > 0)
            .count() as u64;
        let dsa = sparse_flash_attention(model, heads, g.n_ctx_seq, ub, attention_layers);
        if let Some(dsa) = dsa {
            let attention = if holds_layers { dsa.phase } else { 0 };
            let others = activations.saturating_add(feed_forward.max(logits));
            return attention.max(others).saturating_add(dsa.kept);
        }
    }
    let attention = match options.flash_attention {
        _ if !attends => 0,
        true => g.n_ctx_seq.saturating_mul(ub).saturating_mul(2),
        false => floats(g.n_ctx_seq.saturating_mul(heads.saturating_add(1)))
            .saturating_add(sparse_attention(model, heads, g.n_ctx_seq, ub))
            .saturating_add(wide_queries(model, heads, ub)),
    };
    let layer_phase = if holds_layers {
        attention.max(feed_forward)
    } else {
        0
    };
    let holds_recurrent = layers
        .layers
        .iter()
        .enumerate()
        .any(|(il, &d)| d == device && model.attention.is_recurrent(il));
    let recurrent = if holds_recurrent {
        recurrent_phase(model, ub, u64::from(options.parallel.max(1)))
    } else {
        0
    };
    activations
        .saturating_add(layer_phase.max(logits))
        .max(recurrent)
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
            err.contains("CUDA5") && err.contains("CUDA0…CUDA1"),
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

    /// A Mamba-shaped model: no attention, every layer recurrent, `n_embd` wide.
    fn mamba_model(n_layer: u32, n_embd: u32, n_vocab: u32) -> ModelShape {
        let mut model = moe_model(n_layer, n_layer, 10 * MIB, 0);
        model.architecture = "mamba".into();
        model.n_embd = n_embd;
        model.n_vocab = n_vocab;
        model.n_ff = 0;
        model.experts = None;
        let attention = &mut model.attention;
        attention.head_count_kv = vec![0; n_layer as usize];
        attention.head_count = vec![0; n_layer as usize];
        attention.mla = false;
        attention.recurrent = Some(crate::model::RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: 4,
            inner_size: 2 * n_embd,
            state_size: 16,
            group_count: 0,
            time_step_rank: n_embd / 16,
        });
        attention.recurrent_layers = vec![true; n_layer as usize];
        model
    }

    #[test]
    fn a_wide_mamba_sizes_its_compute_buffer_by_the_scan_and_its_context_by_the_state() {
        // 8192 wide, a 50k vocabulary: the selective scan's tensors (6 × d_inner per token)
        // outgrow the logits; the state is per sequence, the context length plays no part.
        let model = mamba_model(4, 8192, 50_277);
        let options = PlacementOptions {
            context: 65_536,
            parallel: 8,
            ubatch: 512,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(1, 80 * GIB), &options).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        let (d, e) = (16_384u64, 8192u64);
        let (conv, ssm) = (3 * d, 16 * d);
        assert_eq!(gpu.kv_bytes, 4 * 8 * (conv + ssm) * 4);
        let scan = (6 * d + 2 * e) * 512 * 4 + 8 * (ssm + 2 * conv) * 4;
        assert_eq!(gpu.compute_estimate_bytes, scan);
        // llama-fit-params: 451 MiB at 1024 tokens, so about 225 at 512.
        let mib = gpu.compute_estimate_bytes / MIB;
        assert!((225..260).contains(&mib), "{mib} MiB");
    }

    #[test]
    fn a_narrow_mamba_holds_the_logits_and_fewer_activation_rows_than_a_transformer() {
        let model = mamba_model(4, 2048, 50_277);
        let options = PlacementOptions {
            ubatch: 512,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(1, 80 * GIB), &options).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        // llama-fit-params: 110 MiB (the logits, 98 MiB, and 3 rows of n_embd).
        assert_eq!(gpu.compute_estimate_bytes, (50_277 + 4 * 2048) * 512 * 4);
    }

    #[test]
    fn hostile_recurrent_shapes_saturate_the_compute_estimate() {
        let mut model = mamba_model(4, 2048, 50_277);
        model.attention.recurrent = Some(crate::model::RecurrentShape {
            kind: RecurrentKind::GatedDeltaNet,
            conv_kernel: u32::MAX,
            inner_size: u32::MAX,
            state_size: u32::MAX,
            group_count: u32::MAX,
            time_step_rank: 1,
        });
        let options = PlacementOptions {
            parallel: u32::MAX,
            ubatch: u32::MAX,
            batch: u32::MAX,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(1, 24 * GIB), &options).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        assert_eq!(gpu.compute_estimate_bytes, u64::MAX);
        assert_eq!(gpu.kv_bytes, u64::MAX);
        assert!(!plan.fits());
    }
}
