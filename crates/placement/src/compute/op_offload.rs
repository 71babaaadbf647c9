//! llama.cpp's op offload: with weights in host memory beside a GPU (layers left on the host,
//! routed experts sent there by `-ot`), `ggml_backend_sched` runs each operation reading one on
//! the first GPU when the micro-batch is large enough for it (CUDA's `offload_op`: 32 tokens),
//! and a host layer's other operations follow it there; only the writes into the host layer's
//! cache stay on the host. The GPU's buffer gets a copy of each weight (and of a host layer's
//! cache before its attention) at the start of the split that reads it ([`super::allocator`]'s
//! `Graph::split_across_devices`); the host's holds its graph inputs alone. `--no-op-offload` turns
//! it off: the host then computes its own layers.

use std::collections::HashMap;

use crate::layers::LayerDevices;
use crate::model::{ModelShape, TensorRole};
use crate::options::{DeviceId, KvType, PlacementOptions};

/// The smallest batch whose operations CUDA takes from the host (`op_offload_min_batch_size`):
/// a matrix product's tokens.
pub(crate) const MIN_BATCH: u64 = 32;

/// CUDA pads a quantized tensor's last row to a multiple of this many elements
/// (`MATRIX_ROW_PADDING`).
const CUDA_ROW_PADDING: u64 = 512;

/// Where a plan's op offload goes: the GPU that runs it, and the layers whose routed experts
/// alone are in host memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct OpOffload {
    /// The first GPU of the plan's devices, when op offload is on.
    pub(crate) target: Option<DeviceId>,
    /// Layers held by a device whose routed experts are in host memory.
    pub(crate) host_experts: Vec<u32>,
}

impl OpOffload {
    /// For a plan over `devices` (in llama.cpp's order) that puts each tensor of `model` on
    /// `tensor_devices` and each layer on `layers`.
    pub(crate) fn of(
        model: &ModelShape,
        devices: &[DeviceId],
        layers: &LayerDevices,
        tensor_devices: &[DeviceId],
        options: &PlacementOptions,
    ) -> OpOffload {
        let target = devices
            .iter()
            .copied()
            .find(|d| matches!(d, DeviceId::Gpu(_)))
            .filter(|_| options.op_offload);
        let mut host_experts: Vec<u32> = model
            .tensors
            .iter()
            .zip(tensor_devices)
            .filter(|(t, &d)| t.role == TensorRole::Experts && d == DeviceId::Cpu)
            .filter_map(|(t, _)| t.layer)
            .filter(|&il| {
                layers
                    .layers
                    .get(il as usize)
                    .is_some_and(|&d| d != DeviceId::Cpu)
            })
            .collect();
        host_experts.sort_unstable();
        host_experts.dedup();
        OpOffload {
            target,
            host_experts,
        }
    }

    /// Whether the host's layers and output run on a GPU for a batch of `tokens`.
    pub(super) fn takes_host_layers(&self, tokens: u64) -> bool {
        self.target.is_some() && tokens >= MIN_BATCH
    }
}

/// Which cache a read is of: its type is K's (`-ctk`: the DSA indexer's too) or V's (`-ctv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheKind {
    Key,
    Value,
}

/// What `device`'s graph reads of each layer (and of the output, last) from host memory for a
/// batch of `tokens` under `offload`; `None` when nothing.
pub(super) fn reads_from_host(
    device: DeviceId,
    layers: &LayerDevices,
    offload: &OpOffload,
    tokens: u64,
) -> Option<Vec<FromHost>> {
    let Some(target) = offload.target.filter(|_| offload.takes_host_layers(tokens)) else {
        return experts_run_on_the_host(device, layers, offload);
    };
    if device == DeviceId::Cpu {
        return None;
    }
    let of_target = |on: DeviceId| match on {
        DeviceId::Cpu if device == target => FromHost::Everything,
        _ => FromHost::Nothing,
    };
    let mut reads: Vec<FromHost> = layers.layers.iter().map(|&d| of_target(d)).collect();
    for &il in &offload.host_experts {
        let (Some(read), Some(&holder)) =
            (reads.get_mut(il as usize), layers.layers.get(il as usize))
        else {
            continue;
        };
        *read = match (holder == device, device == target) {
            (true, true) => FromHost::Experts,
            (true, false) => FromHost::ExpertsElsewhere,
            (false, true) => FromHost::Foreign,
            (false, false) => FromHost::Nothing,
        };
    }
    reads.push(of_target(layers.output));
    (!reads.iter().all(|&r| r == FromHost::Nothing)).then_some(reads)
}

/// Without op offload for this batch, routed experts in host memory under a device's layer run
/// on the host: the device's graph leaves them to it, and the host's is the whole graph, its
/// own layers and the experts it runs for the devices here, the rest on them.
fn experts_run_on_the_host(
    device: DeviceId,
    layers: &LayerDevices,
    offload: &OpOffload,
) -> Option<Vec<FromHost>> {
    if offload.host_experts.is_empty() {
        return None;
    }
    let host_runs = |il: usize| offload.host_experts.contains(&(il as u32));
    let mut reads: Vec<FromHost> = layers
        .layers
        .iter()
        .enumerate()
        .map(|(il, &holder)| match (device, holder) {
            (DeviceId::Cpu, DeviceId::Cpu) => FromHost::Nothing,
            (DeviceId::Cpu, _) if host_runs(il) => FromHost::DeviceExpertsHere,
            (DeviceId::Cpu, _) => FromHost::Device,
            (_, holder) if holder == device && host_runs(il) => FromHost::ExpertsOnTheHost,
            _ => FromHost::Nothing,
        })
        .collect();
    reads.push(match (device, layers.output) {
        (DeviceId::Cpu, DeviceId::Cpu) => FromHost::Nothing,
        (DeviceId::Cpu, _) => FromHost::Device,
        _ => FromHost::Nothing,
    });
    (!reads.iter().all(|&r| r == FromHost::Nothing)).then_some(reads)
}

impl FromHost {
    /// Whether the graph builds the layer though this device does not hold it.
    pub(super) fn built_here(self) -> bool {
        matches!(
            self,
            FromHost::Everything
                | FromHost::Foreign
                | FromHost::Device
                | FromHost::DeviceExpertsHere
        )
    }

    /// Whether the layer is another device's: its weights (but the experts run here) are used
    /// there.
    pub(super) fn another_devices(self) -> bool {
        matches!(
            self,
            FromHost::Foreign | FromHost::Device | FromHost::DeviceExpertsHere
        )
    }
}

/// What a device's graph reads of one layer from host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum FromHost {
    Nothing,
    /// Every weight and the cache: a host layer (or the host's output) run here.
    Everything,
    /// The routed experts of a layer this device holds, run here.
    Experts,
    /// The routed experts of a layer this device holds, run on the first GPU.
    ExpertsElsewhere,
    /// Another device's layer, whose routed experts (and what follows them up to the next
    /// weight of that device) run here.
    Foreign,
    /// The routed experts of a layer this device holds, run on the host (no op offload).
    ExpertsOnTheHost,
    /// In the host's graph: a device's layer, all of it run there.
    Device,
    /// In the host's graph: a device's layer whose routed experts (in host memory) the host
    /// runs.
    DeviceExpertsHere,
}

/// What one device's graph reads from host memory, layer by layer (the output as layer
/// `n_layer`), and what a copy of each weight and cache costs there.
pub(super) struct HostWeights {
    reads: Vec<FromHost>,
    /// A copy's bytes by layer and element count (the largest, where several tensors of a layer
    /// have as many elements).
    copies: HashMap<(u32, u64), u64>,
    cache_types: [KvType; 2],
}

impl HostWeights {
    /// What `device` reads from host memory for a batch of `tokens` under `offload`; `None`
    /// when nothing. `cuda`: its copies of quantized weights are padded as CUDA pads them.
    pub(super) fn of(
        model: &ModelShape,
        device: DeviceId,
        layers: &LayerDevices,
        offload: &OpOffload,
        options: &PlacementOptions,
        (tokens, cuda): (u64, bool),
    ) -> Option<HostWeights> {
        let reads = reads_from_host(device, layers, offload, tokens)?;
        let mut copies = HashMap::new();
        for tensor in &model.tensors {
            let (Some(layer), true) = (tensor.layer, tensor.elements > 0) else {
                continue;
            };
            // Only what this graph copies in: a host layer's weights, experts run here.
            let wanted = match reads.get(layer as usize) {
                Some(FromHost::Everything) => true,
                Some(FromHost::Experts | FromHost::Foreign) => tensor.role == TensorRole::Experts,
                _ => false,
            };
            if !wanted {
                continue;
            }
            let padded = cuda && tensor.quantized && tensor.row_length % CUDA_ROW_PADDING != 0;
            let padding = if padded {
                (CUDA_ROW_PADDING - tensor.row_length % CUDA_ROW_PADDING) * tensor.bytes
                    / tensor.elements
            } else {
                0
            };
            let bytes = tensor.bytes.saturating_add(padding);
            let slot = copies.entry((layer, tensor.elements)).or_insert(0);
            *slot = bytes.max(*slot);
        }
        Some(HostWeights {
            reads,
            copies,
            cache_types: [options.cache_type_k, options.cache_type_v],
        })
    }

    /// What the graph reads of `layer` from host memory.
    pub(super) fn reads(&self, layer: usize) -> FromHost {
        self.reads.get(layer).copied().unwrap_or(FromHost::Nothing)
    }

    /// A copy of `layer`'s weight of `elements` (as f16 where the model's table has none).
    pub(super) fn weight_bytes(&self, layer: usize, elements: u64) -> u64 {
        let key = (u32::try_from(layer).unwrap_or(u32::MAX), elements);
        self.copies
            .get(&key)
            .copied()
            .unwrap_or_else(|| elements.saturating_mul(2))
    }

    /// A copy of `elements` of a cache of `kind`.
    pub(super) fn cache_bytes(&self, elements: u64, kind: CacheKind) -> u64 {
        let (block, bytes) = match kind {
            CacheKind::Key => self.cache_types[0].block(),
            CacheKind::Value => self.cache_types[1].block(),
        };
        elements.div_ceil(block).saturating_mul(bytes)
    }
}
