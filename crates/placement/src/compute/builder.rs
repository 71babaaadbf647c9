//! The pieces llama.cpp's model graphs share (`llm_graph_context`'s `build_inp_*`, `build_norm`,
//! `build_attn`, `build_ffn`, `build_moe_ffn` in `llama-graph.cpp`), built tensor by tensor into
//! a [`Graph`] for [`allocator::reserve`]; each architecture's own graph ([`super::qwen_hybrid`],
//! [`super::llama`]) strings them together as its `src/models/*.cpp` does.

use super::allocator::{self, Element, Graph, Reuse, TensorId};
pub(super) use super::op_offload::CacheKind;
use super::op_offload::{FromHost, HostWeights};
use super::scheduler::Scheduler;
use crate::kv::{self, ContextGeometry};
use crate::layers::LayerDevices;
use crate::model::{ExpertShape, ModelShape};
use crate::options::{DeviceId, KvType, PlacementOptions};

/// The CPU buffer's alignment (`TENSOR_ALIGNMENT`); other backends align to 128 or 256 bytes,
/// which moves a graph of megabyte tensors by far less than a mebibyte.
const ALIGNMENT: u64 = 32;

/// About the tensors one layer's graph makes (a routed-experts layer with an indexer), the room
/// a graph is made with.
const TENSORS_PER_LAYER: usize = 160;

/// The batch llama.cpp reserves for (`llama_context::sched_reserve`): `min(n_ctx, ubatch)`
/// tokens spread evenly over `n_seq_max` sequences (rounded up to a multiple of them), and as
/// many outputs as tokens before the rounding.
#[derive(Clone, Copy)]
pub(super) struct Batch {
    pub(super) tokens: u64,
    /// The rows whose logits are computed: `min(n_ctx, ubatch)`, not rounded.
    pub(super) outputs: u64,
    pub(super) sequences: u64,
    /// Tokens per sequence.
    pub(super) per_sequence: u64,
    /// KV streams: one per sequence unless the cache is unified.
    pub(super) streams: u64,
}

/// The compute buffer of `device`: `build` strings together its share of the graph (the
/// layers it holds, in order, and whether the output is its) on a fresh builder, and the
/// allocator is replayed over the result; `None` when the model's dimensions are out of the
/// builder's range ([`plausible`]). The host looks the tokens up and holds the graph's inputs
/// (`ggml_backend_sched` puts inputs on the CPU and never offloads `GET_ROWS`): a device holding
/// layer 0 gets a copy of the embeddings looked up, and a host holding no layer still has that
/// lookup and every input in its buffer, for the devices to copy; another device with neither
/// layers nor the output has none.
pub(super) fn replay(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    options: &PlacementOptions,
    (host_inputs, scheduler): (HostInputs, &Scheduler),
    build: impl FnOnce(Builder, &[usize], bool) -> Builder,
) -> Option<u64> {
    let backend = GraphBackend::of(device);
    let host = backend == GraphBackend::Host;
    let mut builder = Builder::new(model, g, options, layers.layers.len(), backend);
    if !plausible(model, &builder.batch, g) {
        return None;
    }
    let tokens = builder.batch.tokens;
    let offload = &scheduler.offload;
    builder.input_copies = scheduler.copies;
    let from_host = HostWeights::of(
        model,
        device,
        layers,
        offload,
        options,
        (tokens, backend == GraphBackend::Cuda),
    );
    // With op offload the host's layers (and output) run on the first GPU, built there.
    let runs_here = |on: DeviceId, il: usize| {
        on == device || from_host.as_ref().is_some_and(|h| h.reads(il).built_here())
    };
    let taken_from_host = host && offload.takes_host_layers(tokens);
    let held: Vec<usize> = (0..layers.layers.len())
        .filter(|&il| runs_here(layers.layers[il], il) && !taken_from_host)
        .collect();
    let holds_output = runs_here(layers.output, layers.layers.len()) && !taken_from_host;
    // A device after another device's layers (or the host's, run by the first GPU) receives
    // their last layer's output and its next norm.
    let after_device = |il: usize| match layers.layers.get(il) {
        Some(DeviceId::Cpu) => {
            offload.takes_host_layers(tokens) && offload.target.is_some_and(|t| t != device)
        }
        Some(&other) => other != device,
        None => false,
    };
    builder.normed_arrives = !host
        && held
            .first()
            .and_then(|&il| il.checked_sub(1))
            .is_some_and(after_device);
    builder.follows_a_device = !host
        && layer_before(held.first().copied(), holds_output, layers.layers.len())
            .is_some_and(after_device);
    builder.host_weights = from_host;
    builder.layer_holders = (layers.layers.iter().chain([&layers.output]))
        .map(|&d| match d {
            DeviceId::Cpu => 0,
            DeviceId::Gpu(n) => n.saturating_add(1).min(31),
            DeviceId::Rpc(n) => n.saturating_add(32).min(63),
        })
        .collect();
    // The end of the host's last layer before this device's first runs here: the scheduler
    // gives the operations after its last weight to the next device. That layer is built too,
    // and handed over up to there.
    let before =
        layer_before(held.first().copied(), holds_output, layers.layers.len()).filter(|&il| {
            !host
                && !offload.takes_host_layers(tokens)
                && layers.layers.get(il) == Some(&DeviceId::Cpu)
        });
    if held.is_empty() && !holds_output {
        if !host || layers.layers.is_empty() {
            return Some(0);
        }
        // One position per token: M-RoPE's four (the Qwen hybrids) differ by kilobytes.
        let every_layer: Vec<usize> = (0..layers.layers.len()).collect();
        match host_inputs {
            HostInputs::Decoder => {
                builder.inputs(model, &every_layer, 1, true, options, g);
            }
            HostInputs::PerLayer { width, layers } => {
                builder.inputs(model, &every_layer, 1, true, options, g);
                builder.looked_up_per_layer(width, layers);
            }
            HostInputs::BlockSparse { positions, blocks } => {
                builder.inputs(model, &every_layer, 1, true, options, g);
                let (tokens, streams) = (builder.batch.tokens, builder.batch.streams);
                let cells = kv::cells(&model.attention, 0, options, g);
                builder.input(Element::I64, [tokens, 1, 1, 1]);
                builder.input(Element::I32, [positions, streams, 1, 1]);
                builder.input(Element::F32, [positions, tokens, 1, 1]);
                builder.input(Element::F32, [blocks, tokens, 1, 1]);
                builder.input(Element::I32, [cells, streams, 1, 1]);
            }
            HostInputs::Sparse { width } => {
                let (_, indexer) = builder.sparse_inputs(model, &every_layer, width, options, g);
                builder.place_sparse_inputs(indexer);
            }
            HostInputs::Placed { hold } => {
                builder.embeddings(&every_layer);
                hold(&mut builder, model, options, g);
            }
        }
        return Some(builder.reserve());
    }
    let places_its_inputs = matches!(host_inputs, HostInputs::Placed { .. });
    let Some(before) = before else {
        let mut built = build(builder, &held, holds_output);
        let partly = held.len() < layers.layers.len() || !holds_output;
        if host && partly && !places_its_inputs {
            built.hold_every_input(model, options, g);
        }
        return Some(built.reserve());
    };
    let with_before: Vec<usize> = std::iter::once(before)
        .chain(held.iter().copied())
        .collect();
    let mut built = build(builder, &with_before, holds_output);
    if let Some(cut) = (built.layer_starts.get(1).copied())
        .or(built.output_start)
        .and_then(|start| built.graph.last_memory_bound_node_before(start))
    {
        built.graph.hand_over_through(cut);
    }
    Some(built.reserve())
}

/// The layer before a device's share (of `n_layer`): before its first held layer, or where it
/// holds no layer but the output, the last.
pub(super) fn layer_before(
    first_held: Option<usize>,
    holds_output: bool,
    n_layer: usize,
) -> Option<usize> {
    first_held
        .or(holds_output.then_some(n_layer))
        .and_then(|il| il.checked_sub(1))
}

/// The rows whose logits the reserved batch computes: `min(n_ctx, ubatch)`.
fn batch_outputs(g: &ContextGeometry, options: &PlacementOptions) -> u64 {
    u64::from(options.ubatch.min(options.batch).max(1)).min(g.n_ctx.max(1))
}

/// The reserved batch's tokens: [`batch_outputs`] rounded up to a multiple of the sequences.
pub(super) fn batch_tokens(g: &ContextGeometry, options: &PlacementOptions) -> u64 {
    let sequences = u64::from(options.parallel.max(1));
    batch_outputs(g, options).div_ceil(sequences) * sequences
}

/// The inputs the host holds for the devices when it holds no layer itself: a decoder's, or
/// GLM-5.x's with the indexer's (`width`: its rotation's side), or Gemma 4's with each layer's
/// own token embeddings looked up too (`width` each, for `layers` layers), or MiniMax-M3's with
/// its sparse attention's (the indexer cache's rows, position to cell, visibility by position,
/// the local bias over `blocks` blocks of `positions`, cell to block).
#[derive(Clone, Copy)]
pub(super) enum HostInputs {
    Decoder,
    Sparse {
        width: u64,
    },
    PerLayer {
        width: u64,
        layers: u64,
    },
    BlockSparse {
        positions: u64,
        blocks: u64,
    },
    /// A graph whose inputs its family places itself (DeepSeek V4's): on the host, after the
    /// token lookup, `hold` places every input the devices copy; the host holding some layers
    /// holds them the same way, not a decoder's.
    Placed {
        hold: fn(&mut Builder, &ModelShape, &PlacementOptions, &ContextGeometry),
    },
}

/// What in a device's backend shapes its share of the graph's memory, beside the layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum GraphBackend {
    /// The CPU: it looks the tokens up and holds the graph's inputs.
    Host,
    /// A CUDA GPU: the fusions `ggml_backend_cuda_graph_optimize` plans (MoE routing, the
    /// weighted sum of the experts) keep their tensors alive until the fused group's end, and
    /// its flash attention converts a cache of another type than f16 in its own allocation.
    Cuda,
    /// A lent device (llama.cpp RPC): plain allocation.
    Remote,
}

impl GraphBackend {
    pub(super) fn of(device: DeviceId) -> GraphBackend {
        match device {
            DeviceId::Cpu => GraphBackend::Host,
            DeviceId::Gpu(_) => GraphBackend::Cuda,
            DeviceId::Rpc(_) => GraphBackend::Remote,
        }
    }
}

/// What the first held layer reads: token ids to look up, or the previous device's output.
enum LayerInput {
    Tokens(TensorId),
    Received(TensorId),
}

/// The graph under construction with the inputs every layer reads.
pub(super) struct Builder {
    pub(super) graph: Graph,
    pub(super) batch: Batch,
    pub(super) n_embd: u64,
    pub(super) n_vocab: u64,
    pub(super) experts_used: u64,
    flash_attention: bool,
    /// Whether K's and V's caches hold another type than f16 (CUDA's flash attention then
    /// converts them).
    cache_not_f16: [bool; 2],
    /// The recurrent layers' state indices (`build_rs_inp`).
    pub(super) state_copy: Option<TensorId>,
    /// Placed whenever a held layer attends (for a sliding-window model, a full-attention one).
    attention: Option<AttentionInputs>,
    /// A sliding-window model's second set (`build_attn_inp_kv_iswa`): the window cache's rows,
    /// mask and rotations, placed when a held layer attends over the window.
    window_attention: Option<AttentionInputs>,
    /// The rows whose logits are wanted (`build_inp_out_ids`).
    pub(super) output_rows: Option<TensorId>,
    /// Whose graph this is: the host's looks the tokens up and holds the inputs.
    backend: GraphBackend,
    /// What this graph reads from host memory (op offload), and the layer being built (the
    /// output as layer `n_layer`).
    host_weights: Option<HostWeights>,
    layer: usize,
    /// The model's layers: the output's index as a "layer".
    n_layer: usize,
    /// Routed experts per layer (the first dimension of an experts tensor past its matrix).
    expert_count: u64,
    /// The first held layer follows another device's (not the host's): that device ran its
    /// norm, which arrives with its input ([`Builder::hand_on`]).
    normed_arrives: bool,
    arrived_norm: Option<TensorId>,
    /// The width of that norm: the model's, or (DeepSeek V4, whose layers begin with a norm of
    /// all the streams together) wider.
    pub(super) arrived_norm_width: u64,
    /// The layer before this graph's first (or before the output, holding no layer) ran on
    /// another device, not the host: that device runs on until this one's first weight.
    pub(super) follows_a_device: bool,
    /// The copies the scheduler keeps of each input (pipeline parallelism: 4).
    input_copies: u32,
    /// Each layer's device (the output's last), as numbers that tell devices apart.
    layer_holders: Vec<u32>,
    /// A model with sliding-window layers: its attention is built over the interleaved caches.
    interleaved_window: bool,
    /// The widest layer's V row, as wide as every transposed V cache row (no flash attention).
    value_width_max: u64,
    /// How many residual streams a layer hands the next (Gemma 3n's AltUp: 4), each
    /// `[n_embd, tokens]`: what a device not holding layer 0 receives.
    pub(super) residual_streams: u64,
    /// Where each built layer's tensors begin ([`Graph::tensor_count`] when it began), and the
    /// output's.
    layer_starts: Vec<usize>,
    output_start: Option<usize>,
    /// The token ids this graph looks up (the host's, holding layer 0).
    pub(super) token_ids: Option<TensorId>,
}

/// The inputs `build_attn_inp_kv` adds: positions, the cache rows K and V are written to, the
/// mask, and the Hadamard rotations applied to Q/K and to V around a quantized cache. MLA's
/// K-only cache (`build_attn_inp_k`) has no V rows and no rotations; a cacheless model's
/// (`build_attn_inp_no_cache`) has no rows at all, and a mask over the micro-batch.
#[derive(Clone, Copy)]
struct AttentionInputs {
    positions: TensorId,
    key_rows: Option<TensorId>,
    value_rows: Option<TensorId>,
    mask: TensorId,
    key_rotation: Option<TensorId>,
    value_rotation: Option<TensorId>,
}

/// The DSA indexer's inputs (`llm_graph_input_attn_k_dsa`'s `_lid` tensors): the rows its keys
/// are written to, its mask and the Hadamard rotation of its queries and keys.
#[derive(Clone, Copy)]
pub(super) struct IndexerInputs {
    pub(super) key_rows: TensorId,
    pub(super) mask: TensorId,
    pub(super) rotation: TensorId,
}

impl Builder {
    /// A builder for a device holding `layers` layers of `model`.
    pub(super) fn new(
        model: &ModelShape,
        g: &ContextGeometry,
        options: &PlacementOptions,
        layers: usize,
        backend: GraphBackend,
    ) -> Builder {
        let sequences = u64::from(options.parallel.max(1));
        let outputs = batch_outputs(g, options);
        let tokens = batch_tokens(g, options);
        Builder {
            graph: Graph::with_capacity(TENSORS_PER_LAYER * (layers + 1)),
            batch: Batch {
                tokens,
                outputs,
                sequences,
                per_sequence: tokens / sequences,
                streams: g.n_stream.max(1),
            },
            n_embd: u64::from(model.n_embd),
            n_vocab: u64::from(model.n_vocab),
            experts_used: u64::from(model.experts.map_or(1, |e| e.used).max(1)),
            flash_attention: options.flash_attention,
            cache_not_f16: [
                options.cache_type_k != KvType::F16,
                options.cache_type_v != KvType::F16,
            ],
            state_copy: None,
            attention: None,
            window_attention: None,
            output_rows: None,
            backend,
            host_weights: None,
            layer: 0,
            n_layer: model.n_layer as usize,
            expert_count: u64::from(model.experts.map_or(0, |e| e.count)),
            normed_arrives: false,
            arrived_norm: None,
            arrived_norm_width: u64::from(model.n_embd),
            follows_a_device: false,
            input_copies: 1,
            layer_holders: Vec::new(),
            value_width_max: model.attention.value_width_max(),
            interleaved_window: model.attention.sliding_window.is_some()
                && model.attention.swa_layers.contains(&true),
            residual_streams: 1,
            layer_starts: Vec::new(),
            output_start: None,
            token_ids: None,
        }
    }

    /// Marks where a held layer's tensors begin (the architectures call it before each).
    pub(super) fn begin_layer(&mut self, il: usize) {
        self.follow(il);
        self.layer = il;
        self.graph
            .made_for(self.layer_holders.get(il).copied().unwrap_or(0));
        self.layer_starts.push(self.graph.tensor_count());
    }

    /// In another device's layer (built here for its experts), its attention over `normed`,
    /// all of which runs there: one stand-in result of the layer's width, made there; `None`
    /// in a layer this graph runs.
    pub(super) fn attention_elsewhere(
        &mut self,
        normed: TensorId,
        indexer: Option<IndexerInputs>,
    ) -> Option<TensorId> {
        if !self.reads_from_host().another_devices() {
            return None;
        }
        let theirs = self.graph.weight(Element::F32, [1, 1, 1, 1]);
        self.graph.used_elsewhere(theirs);
        // It reads the attention's inputs (the host's copies go to that device then).
        let mut sources = vec![normed, theirs];
        if let Some(indexer) = indexer {
            sources.extend([indexer.rotation, indexer.key_rows, indexer.mask]);
        }
        for inputs in [self.attention, self.window_attention]
            .into_iter()
            .flatten()
        {
            sources.extend([inputs.positions, inputs.mask]);
            sources.extend(inputs.key_rows);
            sources.extend(inputs.value_rows);
            sources.extend(inputs.key_rotation);
            sources.extend(inputs.value_rotation);
        }
        let ne = [self.n_embd, self.batch.tokens, 1, 1];
        Some(self.op(Reuse::Fresh, ne, &sources))
    }

    /// A device's last layer's output `cur`, which the next device reads: it stays here until
    /// the next layer's first operation (its norm, which reads no weight) has run here too, as
    /// the scheduler's expansion places it. The host runs its last layer up to its last
    /// operation on a weight or a cache and hands the rest to the device ([`replay`]).
    pub(super) fn hand_on(&mut self, cur: TensorId) {
        if self.backend == GraphBackend::Host {
            self.graph.expand(cur);
            let end = self.graph.tensor_count();
            if let Some(cut) = self.graph.last_memory_bound_node_before(end) {
                self.graph.end_at(cut);
            }
            return;
        }
        let ne = self.graph.extents(cur);
        let normed = self.op(Reuse::Fresh, ne, &[cur]);
        self.graph.expand(normed);
    }

    /// The graph's end after the held layers' output `cur`: on the device holding the output,
    /// `output` over it (its tensors the output "layer"'s), elsewhere `cur` handed on
    /// ([`Builder::hand_on`]).
    pub(super) fn finish(
        mut self,
        cur: TensorId,
        holds_output: bool,
        output: impl FnOnce(&mut Builder, TensorId),
    ) -> Builder {
        if holds_output {
            self.begin_output();
            output(&mut self, cur);
        } else {
            self.hand_on(cur);
        }
        self
    }

    /// The output's tensors follow (its weights are the model's last "layer").
    pub(super) fn begin_output(&mut self) {
        let output = self.n_layer;
        self.output_start = Some(self.graph.tensor_count());
        self.follow(output);
        self.graph
            .made_for(self.layer_holders.get(output).copied().unwrap_or(0));
        self.layer = output;
    }

    /// Layer `il` is built next: when the layer before it is not in this graph (it ran on
    /// another device), its first operation runs where that one ran.
    fn follow(&mut self, il: usize) {
        let built_before = !self.layer_starts.is_empty() && self.layer.checked_add(1) == Some(il);
        if il > 0 && !built_before {
            self.graph.after_gap();
        }
    }

    /// What this graph reads from host memory of the layer being built.
    fn reads_from_host(&self) -> FromHost {
        match &self.host_weights {
            Some(host) => host.reads(self.layer),
            None => FromHost::Nothing,
        }
    }

    /// The inputs of a decoder whose tokens take one position each, the output rows selected
    /// when the device holds the last layer.
    pub(super) fn decoder_inputs(
        &mut self,
        model: &ModelShape,
        held: &[usize],
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let last = model.n_layer as usize;
        let selects_rows = held.last().is_some_and(|&il| il + 1 == last);
        self.inputs(model, held, 1, selects_rows, options, g)
    }

    /// The inputs of GLM-5.x's graph (`build_attn_inp_k_dsa`): beside the token ids, MLA's
    /// cache rows and mask, and the indexer cache's rows, mask (f16: the fused lightning
    /// indexer's, whatever the flash attention setting) and Hadamard rotation (`width` square);
    /// the positions and output rows as for any decoder. All but the first are left where the
    /// graph first meets them, as ggml places a leaf: with an indexer on the first layer, its
    /// rotation comes before the positions.
    pub(super) fn sparse_inputs(
        &mut self,
        model: &ModelShape,
        held: &[usize],
        width: u64,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> (TensorId, IndexerInputs) {
        let first = self.layer_input(held);
        let embedded = self.embedded(first);
        let Batch {
            tokens,
            outputs,
            streams,
            ..
        } = self.batch;
        let cells = held
            .first()
            .map_or(0, |&il| kv::cells(&model.attention, il, options, g));
        let mask_shape = [cells, tokens / streams, 1, streams];
        let positions = self.graph.input(Element::I32, [tokens, 1, 1, 1]);
        let key_rows = Some(self.graph.input(Element::I64, [tokens, 1, 1, 1]));
        let mask = self.graph.input(self.mask_element(), mask_shape);
        self.attention = Some(AttentionInputs {
            positions,
            key_rows,
            value_rows: None,
            mask,
            key_rotation: None,
            value_rotation: None,
        });
        let last = model.n_layer as usize;
        if held.last().is_some_and(|&il| il + 1 == last) {
            self.output_rows = Some(self.graph.input(Element::I32, [outputs, 1, 1, 1]));
        }
        let indexer = IndexerInputs {
            key_rows: self.graph.input(Element::I64, [tokens, 1, 1, 1]),
            mask: self.graph.input(Element::F16, mask_shape),
            rotation: self.graph.input(Element::F32, [width, width, 1, 1]),
        };
        (embedded, indexer)
    }

    /// On the host holding some layers: the inputs only the devices' layers read, which the
    /// host holds all the same (`ggml_backend_sched` puts every graph input on the CPU) until
    /// the devices copy them — another kind of attention's (a sliding-window model's full
    /// attention mask), the output rows.
    fn hold_every_input(
        &mut self,
        model: &ModelShape,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) {
        let positions = self
            .attention
            .or(self.window_attention)
            .map(|a| a.positions);
        let mut held = Vec::new();
        for il in (0..model.n_layer as usize).filter(|&il| !model.attention.is_recurrent(il)) {
            let windowed = is_windowed(model, il);
            let missing = match windowed {
                true => self.window_attention.is_none(),
                false => self.attention.is_none(),
            };
            if !missing {
                continue;
            }
            let inputs = self.attention_inputs(model, il, 1, positions, options, g);
            held.extend(inputs.key_rows);
            held.push(inputs.mask);
            held.extend(inputs.value_rows);
            match windowed {
                true => self.window_attention = Some(inputs),
                false => self.attention = Some(inputs),
            }
        }
        if self.output_rows.is_none() {
            let outputs = self.batch.outputs;
            held.push(self.input(Element::I32, [outputs, 1, 1, 1]));
        }
        for input in held {
            self.graph.expand(input);
        }
    }

    /// Places [`Builder::sparse_inputs`]' leaves, which the layers would meet, in a graph with
    /// no layer (the host's, holding them for the devices).
    fn place_sparse_inputs(&mut self, indexer: IndexerInputs) {
        let attention = self
            .attention
            .iter()
            .flat_map(|a| [Some(a.positions), a.key_rows, Some(a.mask)])
            .flatten();
        let leaves: Vec<TensorId> = attention
            .chain(self.output_rows)
            .chain([indexer.key_rows, indexer.mask, indexer.rotation])
            .collect();
        for leaf in leaves {
            self.graph.expand(leaf);
        }
    }

    /// Whether the graph's attention is flash attention.
    pub(super) fn flash_attention(&self) -> bool {
        self.flash_attention
    }

    /// The attention mask's element: f16 for flash attention, f32 for the softmax.
    pub(super) fn mask_element(&self) -> Element {
        if self.flash_attention {
            Element::F16
        } else {
            Element::F32
        }
    }

    /// DSA's mask (`build_attn` with `top_k`): MLA's mask filled with -inf, zeros written over
    /// the `selected` keys (`[top-k, tokens per stream, 1, streams]` I32) from a zero-filled leaf,
    /// and the original mask added; `None` without MLA's inputs.
    pub(super) fn sparse_mask(&mut self, selected: TensorId) -> Option<TensorId> {
        let mask = self.attention?.mask;
        Some(self.top_k_mask(mask, selected, Element::F32))
    }

    /// `mask` (`[cells, tokens per stream, 1, streams]`) filled with -inf, zeros (of
    /// `zeros_element`) written over the `selected` cells (`[top-k, tokens per stream, 1, streams]`
    /// I32), and `mask` added: DSA's and DeepSeek V4's `build_top_k_mask`.
    pub(super) fn top_k_mask(
        &mut self,
        mask: TensorId,
        selected: TensorId,
        zeros_element: Element,
    ) -> TensorId {
        let element = self.mask_element();
        let [cells, per_stream, _, streams] = self.graph.extents(mask);
        let [top_k, ..] = self.graph.extents(selected);
        let shape = [cells, per_stream, 1, streams];
        let filled = self.graph.op(Reuse::InPlace, element, shape, &[mask]);
        let size = self.graph.strides(filled)[0];
        let row = size * cells;
        let as_rows = self.graph.view(
            filled,
            [1, cells, per_stream, streams],
            [size, size, row, row * per_stream],
        );
        let selected_strides = self.graph.strides(selected);
        let by_token = self
            .graph
            .view(selected, [top_k, per_stream, streams, 1], selected_strides);
        let zeros_shape = [1, top_k, per_stream, streams];
        // In another device's layer (built here for its experts) the zeros are that device's.
        let zeros = match self.reads_from_host() {
            read if read.another_devices() => self.graph.external(zeros_element, zeros_shape),
            _ => self.graph.scratch(zeros_element, zeros_shape),
        };
        let zeros = (self.graph).op(Reuse::InPlace, zeros_element, zeros_shape, &[zeros]);
        let unmasked = self.graph.write_rows(as_rows, zeros, by_token);
        let unmasked = self.graph.view(
            unmasked,
            shape,
            contiguous_strides(shape).map(|nb| nb / 4 * size),
        );
        self.graph
            .op(Reuse::Fresh, element, shape, &[unmasked, mask])
    }

    /// The graph's inputs, placed before anything computed in the order the graph meets them,
    /// and the first held layer's input: the token embeddings looked up on the device holding
    /// layer 0, else the activations received from the previous device. `positions_per_token`
    /// is 4 for M-RoPE; `rows_out` when this device selects the output rows.
    pub(super) fn inputs(
        &mut self,
        model: &ModelShape,
        held: &[usize],
        positions_per_token: u64,
        rows_out: bool,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let first = self.layer_input(held);
        if held.iter().any(|&il| model.attention.is_recurrent(il)) {
            self.state_copy = Some(self.input(Element::I32, [self.batch.sequences, 1, 1, 1]));
        }
        self.place_attention_inputs(model, held, positions_per_token, options, g);
        if rows_out {
            let outputs = self.batch.outputs;
            self.output_rows = Some(self.input(Element::I32, [outputs, 1, 1, 1]));
        }
        self.embedded(first)
    }

    /// The token ids and the embeddings input on the host holding layer 0, else the
    /// embeddings or activations copied from the host or the previous device, placed now.
    fn layer_input(&mut self, held: &[usize]) -> LayerInput {
        let (tokens, n_embd) = (self.batch.tokens, self.n_embd);
        if self.backend == GraphBackend::Host && held.first().is_some_and(|&il| il == 0) {
            let ids = self.input(Element::I32, [tokens, 1, 1, 1]);
            // The embeddings input is allocated though token ids feed this graph.
            self.input(Element::F32, [n_embd, tokens, 1, 1]);
            self.token_ids = Some(ids);
            return LayerInput::Tokens(ids);
        }
        // The embeddings looked up on the host, or the residual stream(s) of the layer before.
        let streams = if held.first() == Some(&0) {
            1
        } else {
            self.residual_streams
        };
        let received = [n_embd, tokens, streams, 1];
        if self.normed_arrives {
            // The norm arrives first, read first; the output itself is placed where the graph
            // first reads it (the first layer's residual).
            let width = self.arrived_norm_width;
            self.arrived_norm = Some(self.input(Element::F32, [width, tokens, 1, 1]));
            LayerInput::Received(self.graph.input(Element::F32, received))
        } else {
            LayerInput::Received(self.input(Element::F32, received))
        }
    }

    /// The first held layer's input alone (a graph whose other inputs are its own): the token
    /// embeddings looked up, or the activations received ([`Builder::inputs`]).
    pub(super) fn embeddings(&mut self, held: &[usize]) -> TensorId {
        let first = self.layer_input(held);
        self.embedded(first)
    }

    /// The first held layer's input: the token embeddings looked up, or the activations received.
    fn embedded(&mut self, first: LayerInput) -> TensorId {
        let (tokens, n_embd) = (self.batch.tokens, self.n_embd);
        match first {
            LayerInput::Tokens(ids) => {
                let table = self
                    .graph
                    .weight(Element::F32, [n_embd, self.n_vocab, 1, 1]);
                let embedded = self.op(Reuse::Fresh, [n_embd, tokens, 1, 1], &[table, ids]);
                // `build_inp_embd` expands the lookup at once (`ggml_build_forward_select`):
                // it comes before a first layer's recurrent state, which its layer expands
                // before anything reads the embeddings.
                self.graph.expand(embedded);
                embedded
            }
            LayerInput::Received(activations) => activations,
        }
    }

    /// The attention inputs of the held layers, in the order the graph meets them: one set, or
    /// for a sliding-window model one per kind of layer held (window or full), the first held
    /// layer's kind first, both sharing the positions.
    fn place_attention_inputs(
        &mut self,
        model: &ModelShape,
        held: &[usize],
        positions_per_token: u64,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) {
        let attending = || {
            held.iter()
                .copied()
                .filter(|&il| !model.attention.is_recurrent(il))
        };
        let windowed = |il: usize| is_windowed(model, il);
        let Some(first) = attending().next() else {
            return;
        };
        let mut positions = None;
        let mut kinds = vec![first];
        kinds.extend(attending().find(|&il| windowed(il) != windowed(first)));
        for il in kinds {
            let inputs =
                self.attention_inputs(model, il, positions_per_token, positions, options, g);
            positions = Some(inputs.positions);
            if windowed(il) {
                self.window_attention = Some(inputs);
            } else {
                self.attention = Some(inputs);
            }
        }
    }

    /// The inputs layer `il`'s attention reads, placed in the order the graph meets them; the
    /// positions are placed with the first set and shared by a second.
    fn attention_inputs(
        &mut self,
        model: &ModelShape,
        il: usize,
        positions_per_token: u64,
        positions: Option<TensorId>,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> AttentionInputs {
        let tokens = self.batch.tokens;
        let attention = &model.attention;
        if attention.cacheless {
            let positions = positions.unwrap_or_else(|| {
                self.input(Element::I32, [tokens * positions_per_token, 1, 1, 1])
            });
            let mask = self.input(self.mask_element(), [tokens, tokens, 1, 1]);
            return AttentionInputs {
                positions,
                key_rows: None,
                value_rows: None,
                mask,
                key_rotation: None,
                value_rotation: None,
            };
        }
        let key_only = attention.mla;
        let rotation = |kind: KvType, head: u32, largest: bool| {
            rotation_block(kind, head, largest).filter(|_| !key_only)
        };
        // The K rotation is met before the positions (the rotated Q's first source), the V one
        // after.
        let (key_length, value_length) = attention.head_lengths(il);
        let key_rotation = rotation(options.cache_type_k, key_length, true)
            .map(|block| self.input(Element::F32, [block, block, 1, 1]));
        let positions = positions
            .unwrap_or_else(|| self.input(Element::I32, [tokens * positions_per_token, 1, 1, 1]));
        let value_rotation = rotation(options.cache_type_v, value_length, false)
            .map(|block| self.input(Element::F32, [block, block, 1, 1]));
        let key_rows = Some(self.input(Element::I64, [tokens, 1, 1, 1]));
        // Without flash attention V is stored transposed, written element by element.
        let value_rows = if self.flash_attention {
            tokens
        } else {
            tokens * self.value_width_max
        };
        let value_rows = (!key_only).then(|| self.input(Element::I64, [value_rows, 1, 1, 1]));
        let cells = kv::cells(attention, il, options, g);
        let per_stream = tokens / self.batch.streams;
        let mask = self.input(
            self.mask_element(),
            [cells, per_stream, 1, self.batch.streams],
        );
        AttentionInputs {
            positions,
            key_rows,
            value_rows,
            mask,
            key_rotation,
            value_rotation,
        }
    }

    /// RoPE over `x` (`[head, heads, tokens]`) with the positions input.
    pub(super) fn rope(&mut self, x: TensorId) -> TensorId {
        let positions: Vec<TensorId> = self
            .attention
            .or(self.window_attention)
            .map(|a| a.positions)
            .into_iter()
            .collect();
        self.elementwise(x, &positions)
    }

    /// The compute buffer this graph needs (with the copies of what it reads from host memory).
    pub(super) fn reserve(mut self) -> u64 {
        if self.backend != GraphBackend::Host {
            self.graph.receive_only_read_inputs();
        }
        if self.input_copies > 1 {
            // Pipeline parallelism: every input's copies first, kept for the whole graph.
            self.graph.keep_input_copies(self.input_copies, ALIGNMENT);
        } else if self.backend != GraphBackend::Host {
            self.graph.place_scratch_first();
        }
        self.graph
            .split_across_devices(self.backend == GraphBackend::Host);
        allocator::reserve(&self.graph, ALIGNMENT)
    }

    /// Each layer's own token embeddings, `[width, layers, tokens]`: looked up here on the
    /// host, with token ids of their own (`build_inp_per_layer`; `ggml_backend_sched` never
    /// offloads `GET_ROWS`), else received from it (a copy of that shape: no view).
    pub(super) fn looked_up_per_layer(&mut self, width: u64, layers: u64) -> TensorId {
        let tokens = self.batch.tokens;
        let ne = [width, layers, tokens, 1];
        if self.backend != GraphBackend::Host {
            return self.input(Element::F32, ne);
        }
        let ids = self.input(Element::I32, [tokens, 1, 1, 1]);
        let table = self
            .graph
            .weight(Element::F32, [width * layers, self.n_vocab, 1, 1]);
        let rows = self.op(Reuse::Fresh, [width * layers, tokens, 1, 1], &[table, ids]);
        self.graph.expand(rows);
        self.graph.reshape(rows, ne)
    }

    /// Whether the first held layer's norm arrives from the device before (which ran it).
    pub(super) fn norm_arrives(&self) -> bool {
        self.arrived_norm.is_some()
    }

    /// Whether this is the host's graph, which holds the graph's inputs (a device receives
    /// copies of what it reads of them).
    pub(super) fn is_host(&self) -> bool {
        self.backend == GraphBackend::Host
    }

    /// A graph input, met (and so placed) now.
    pub(super) fn input(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        let id = self.graph.input(element, ne);
        self.graph.expand(id);
        id
    }

    /// A weight: memory outside the compute buffer (of the host, copied in when this graph
    /// runs the layer for it).
    pub(super) fn weight(&mut self, ne: [u64; 4]) -> TensorId {
        let weight = self.graph.weight(Element::F32, ne);
        match self.reads_from_host() {
            FromHost::Everything => self.copy_weight_from_host(weight, ne.iter().product()),
            read if read.another_devices() => self.graph.used_elsewhere(weight),
            _ => {}
        }
        weight
    }

    /// `weight` (of `elements`) is read from host memory: a copy of it comes in.
    fn copy_weight_from_host(&mut self, weight: TensorId, elements: u64) {
        if let Some(host) = &self.host_weights {
            let bytes = host.weight_bytes(self.layer, elements);
            self.graph.in_host_memory(weight, bytes, false);
        }
    }

    /// A cache of the layer being built, `ne` elements of `kind`: when the layer's cache is in
    /// host memory, a copy of it comes in before its attention.
    pub(super) fn cache_read(&mut self, ne: [u64; 4], kind: CacheKind) -> TensorId {
        let cache = self.graph.external(Element::F16, ne);
        if self.reads_from_host() == FromHost::Everything {
            if let Some(host) = &self.host_weights {
                let bytes = host.cache_bytes(ne.iter().product(), kind);
                self.graph.in_host_memory(cache, bytes, true);
            }
        }
        cache
    }

    /// A write into the layer's cache: run on the host when that cache is there.
    pub(super) fn cache_written(&mut self, written: TensorId) {
        if self.reads_from_host() == FromHost::Everything {
            self.graph.run_on_host(written);
        }
    }

    /// The logits of `normed` (the final norm, or the output rows of it), both graph outputs,
    /// the logits expanded: the graph's end.
    pub(super) fn logits(&mut self, normed: TensorId) {
        self.graph.mark_output(normed);
        let logits = self.matmul(self.n_vocab, normed);
        self.graph.mark_output(logits);
        self.graph.expand(logits);
    }

    /// An f32 result of `ne` from `sources`.
    pub(super) fn op(&mut self, reuse: Reuse, ne: [u64; 4], sources: &[TensorId]) -> TensorId {
        self.graph.op(reuse, Element::F32, ne, sources)
    }

    /// `ggml_mul_mat(weight, x)`: `rows` outputs for each of x's columns.
    pub(super) fn matmul(&mut self, rows: u64, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let weight = self.weight([ne[0], rows, 1, 1]);
        self.op(Reuse::Fresh, [rows, ne[1], ne[2], ne[3]], &[weight, x])
    }

    /// `build_norm(x, weight, LLM_NORM_RMS)`: the norm, then the weight applied in place.
    pub(super) fn rms_norm(&mut self, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let norm = match self.arrived_norm(ne) {
            Some(arrived) => arrived,
            None => self.op(Reuse::InPlace, ne, &[x]),
        };
        let weight = self.weight([ne[0], 1, 1, 1]);
        self.op(Reuse::InPlace, ne, &[norm, weight])
    }

    /// The first held layer's norm, when the previous device computed it (its expansion runs
    /// the next layer's first operation): an input of this graph, placed where it is read.
    pub(super) fn arrived_norm(&mut self, ne: [u64; 4]) -> Option<TensorId> {
        self.arrived_norm
            .take()
            .filter(|&arrived| self.graph.extents(arrived) == ne)
    }

    /// `build_rs`: each sequence's stored state gathered by the state-copy indices.
    pub(super) fn recurrent_state(&mut self, elements: u64) -> TensorId {
        let sequences = self.batch.sequences;
        // The zeroed slot and the extra sequences' copies touch only the cache (and none in the
        // reserved batch), so they are left out.
        let cache = self.cache([elements, sequences, 1, 1]);
        let indices = self.state_copy.unwrap_or(cache);
        let gathered = self.op(Reuse::Fresh, [elements, sequences, 1, 1], &[cache, indices]);
        self.graph.expand(gathered);
        gathered
    }

    /// A recurrent or KV cache tensor: memory outside the compute buffer.
    pub(super) fn cache(&mut self, ne: [u64; 4]) -> TensorId {
        self.graph.external(Element::F32, ne)
    }

    /// `build_norm(x, weight, LLM_NORM)`: the layer norm (which ggml never runs in place), then
    /// the weight applied in place.
    pub(super) fn layer_norm(&mut self, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let norm = match self.arrived_norm(ne) {
            Some(arrived) => arrived,
            None => self.op(Reuse::Fresh, ne, &[x]),
        };
        let weight = self.weight([ne[0], 1, 1, 1]);
        self.op(Reuse::InPlace, ne, &[norm, weight])
    }

    /// An element-wise operation over `x` (with `other` broadcast), which may work in place.
    pub(super) fn elementwise(&mut self, x: TensorId, other: &[TensorId]) -> TensorId {
        let ne = self.graph.extents(x);
        let mut sources = vec![x];
        sources.extend_from_slice(other);
        self.op(Reuse::InPlace, ne, &sources)
    }

    /// `build_attn` over roped Q and K and V (`[head, heads, tokens]`): K and V written into the
    /// cache, then flash attention over the cache with the mask, or without it the scores, their
    /// masked softmax and the weighted values made contiguous; `[value head × heads, tokens]` out.
    /// A cacheless model attends over the micro-batch's own K and V ([`Builder::attend_batch`]).
    pub(super) fn attend(
        &mut self,
        model: &ModelShape,
        il: usize,
        [q, k, v]: [TensorId; 3],
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        if model.attention.cacheless {
            return self.attend_batch(model, il, [q, k, v]);
        }
        self.attend_cache(model, il, q, Some([k, v]), options, g)
    }

    /// `build_attn` with `llm_graph_input_attn_no_cache`: Q, K and V expanded, then over K and V
    /// themselves (permuted views) flash attention with K and V cast to f16, or the scores,
    /// their masked softmax, V transposed and made contiguous, the weighted values made
    /// contiguous; `[value head × heads, tokens]` out.
    fn attend_batch(
        &mut self,
        model: &ModelShape,
        il: usize,
        [q, k, v]: [TensorId; 3],
    ) -> TensorId {
        let Some(inputs) = self.layer_attention_inputs(model, il) else {
            return q;
        };
        for x in [q, k, v] {
            self.graph.expand(x);
        }
        let tokens = self.batch.tokens;
        let (head, heads, kv_heads) = layer_heads(model, il);
        let value_head = u64::from(model.attention.head_lengths(il).1);
        let [q, k, v] = [q, k, v].map(|x| self.graph.permute(x, [0, 2, 1, 3]));
        let attended = if self.flash_attention {
            let k = (self.graph).op(
                Reuse::Fresh,
                Element::F16,
                [head, tokens, kv_heads, 1],
                &[k],
            );
            let v = (self.graph).op(
                Reuse::Fresh,
                Element::F16,
                [value_head, tokens, kv_heads, 1],
                &[v],
            );
            let out = self.op(
                Reuse::Fresh,
                [value_head, heads, tokens, 1],
                &[q, k, v, inputs.mask],
            );
            self.graph.reshape(out, [value_head * heads, tokens, 1, 1])
        } else {
            let scores = self.op(Reuse::Fresh, [tokens, tokens, heads, 1], &[k, q]);
            let weights = self.elementwise(scores, &[inputs.mask]);
            let transposed = self.graph.permute(v, [1, 0, 2, 3]);
            let values = self.op(
                Reuse::Fresh,
                [tokens, value_head, kv_heads, 1],
                &[transposed],
            );
            let mixed = self.op(
                Reuse::Fresh,
                [value_head, tokens, heads, 1],
                &[values, weights],
            );
            let mixed = self.graph.permute(mixed, [0, 2, 1, 3]);
            self.op(Reuse::Fresh, [value_head * heads, tokens, 1, 1], &[mixed])
        };
        self.graph.expand(attended);
        attended
    }

    /// [`Builder::attend`] for a layer that keeps no cache of its own (Gemma 4's last layers):
    /// Q over the cache of the earlier layer it reads, nothing written.
    pub(super) fn attend_shared(
        &mut self,
        model: &ModelShape,
        il: usize,
        q: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        self.attend_cache(model, il, q, None, options, g)
    }

    /// The attention inputs layer `il` reads: the sliding window's or the full attention's
    /// ([`Builder::inputs`] places them for every graph with an attending layer).
    fn layer_attention_inputs(&self, model: &ModelShape, il: usize) -> Option<AttentionInputs> {
        if is_windowed(model, il) {
            self.window_attention
        } else {
            self.attention
        }
    }

    /// Whether layer `il`, keeping no cache of its own, reads the cache of a layer on another
    /// device (llama.cpp's reuse: the last sliding or full layer before the shared ones).
    fn reads_another_devices_cache(&self, model: &ModelShape, il: usize) -> bool {
        let source = model.attention.shared_source(il);
        let holder = |il: usize| self.layer_holders.get(il).copied();
        source.is_some_and(|source| holder(source) != holder(il))
    }

    /// A copy of a view `ne` of a cache of `kind` on another device: an input of the bytes it
    /// spans.
    fn cache_copy(&mut self, ne: [u64; 4], kind: KvType) -> TensorId {
        if kind == KvType::F16 {
            return self.graph.input(Element::F16, ne);
        }
        let (block, bytes) = kind.block();
        let elements: u64 = ne.iter().product();
        let size = elements.div_ceil(block).saturating_mul(bytes);
        self.graph.input(Element::I8, [size, 1, 1, 1])
    }

    /// [`Builder::attend`], with K and V `written` into the cache or none.
    fn attend_cache(
        &mut self,
        model: &ModelShape,
        il: usize,
        q: TensorId,
        written: Option<[TensorId; 2]>,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let Some(inputs) = self.layer_attention_inputs(model, il) else {
            return q;
        };
        let Batch {
            tokens, streams, ..
        } = self.batch;
        let (head, heads, kv_heads) = layer_heads(model, il);
        // DeepSeek's older conversions cache values narrower than keys.
        let value_head = u64::from(model.attention.head_lengths(il).1);
        let cells = kv::cells(&model.attention, il, options, g);
        let per_stream = tokens / streams;
        let q = self.rotate(q, inputs.key_rotation);
        self.graph.expand(q);
        if let Some([k, v]) = written {
            let k = self.rotate(k, inputs.key_rotation);
            let v = self.rotate(v, inputs.value_rotation);
            let interleaved = self.interleaved_window;
            let dims = [head, kv_heads, value_head, cells];
            self.write_cache([k, v], inputs, dims, interleaved);
        }
        let q = self.graph.reshape(q, [head, heads, per_stream, streams]);
        let q = self.graph.permute(q, [0, 2, 1, 3]);
        let key_shape = [head, cells, kv_heads, streams];
        let value_shape = [value_head, cells, kv_heads, streams];
        let (keys, values) = if written.is_none() && self.reads_another_devices_cache(model, il) {
            // The views of that cache this layer reads are copied in apart, for each such layer.
            (
                self.cache_copy(key_shape, options.cache_type_k),
                self.cache_copy(value_shape, options.cache_type_v),
            )
        } else {
            (
                self.cache_read(key_shape, CacheKind::Key),
                self.cache_read(value_shape, CacheKind::Value),
            )
        };
        let attended = if self.flash_attention {
            let out = self.op(
                Reuse::Fresh,
                [value_head, heads, per_stream, streams],
                &[q, keys, values, inputs.mask],
            );
            self.convert_cache_for_flash_attention(out, keys, Some(values));
            self.graph.reshape(out, [value_head * heads, tokens, 1, 1])
        } else {
            let scores = self.op(
                Reuse::Fresh,
                [cells, per_stream, heads, streams],
                &[keys, q],
            );
            let weights = self.elementwise(scores, &[inputs.mask]);
            let mixed = self.op(
                Reuse::Fresh,
                [value_head, per_stream, heads, streams],
                &[values, weights],
            );
            let mixed = self.graph.permute(mixed, [0, 2, 1, 3]);
            self.op(Reuse::Fresh, [value_head * heads, tokens, 1, 1], &[mixed])
        };
        // `build_attn_mha` ends by expanding its output: in a graph whose feed-forward does not
        // read the attention (Command R's), the attention comes first.
        self.graph.expand(attended);
        self.rotate(attended, inputs.value_rotation)
    }

    /// Layer `il`'s Q, K and V (`[head, heads, tokens]`, roped) rotated around a quantized
    /// cache, Q, K and V expanded and K and V written into the layer's cache (MiniMax-M3's sparse
    /// attention, which then reads the cache itself): Q rotated, the cache's mask, and the V
    /// rotation its output is rotated back by.
    pub(super) fn write_layer_cache(
        &mut self,
        model: &ModelShape,
        il: usize,
        [q, k, v]: [TensorId; 3],
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> Option<(TensorId, TensorId, Option<TensorId>)> {
        let inputs = self.attention?;
        let (head, _, kv_heads) = layer_heads(model, il);
        let value_head = u64::from(model.attention.head_lengths(il).1);
        let cells = kv::cells(&model.attention, il, options, g);
        let q = self.rotate(q, inputs.key_rotation);
        let k = self.rotate(k, inputs.key_rotation);
        let v = self.rotate(v, inputs.value_rotation);
        self.graph.expand(q);
        let dims = [head, kv_heads, value_head, cells];
        self.write_cache([k, v], inputs, dims, true);
        Some((q, inputs.mask, inputs.value_rotation))
    }

    /// K and V (roped, rotated) written into the layer's cache rows (`cpy_k`, `cpy_v`), after
    /// `build_attn` expands them: V, then K (so that RoPE may write K into the cache); the
    /// sliding-window models' (`llm_graph_input_attn_kv_iswa`, `interleaved`) K, then V.
    fn write_cache(
        &mut self,
        [k, v]: [TensorId; 2],
        inputs: AttentionInputs,
        [head, kv_heads, value_head, cells]: [u64; 4],
        interleaved: bool,
    ) {
        let tokens = self.batch.tokens;
        if interleaved {
            self.graph.expand(k);
            self.graph.expand(v);
        } else {
            self.graph.expand(v);
            self.graph.expand(k);
        }
        // Without flash attention V is written transposed: a V that is a view of a fused QKV
        // projection is first made contiguous (`cpy_v`).
        let rows = [
            (k, inputs.key_rows, false, head),
            (v, inputs.value_rows, !self.flash_attention, value_head),
        ];
        for (projection, rows, transposed, head) in rows
            .into_iter()
            .filter_map(|(p, r, t, h)| Some((p, r?, t, h)))
        {
            let width = [head * kv_heads, tokens, 1, 1];
            let mut flat = if transposed && !self.graph.is_contiguous(projection) {
                self.op(Reuse::Fresh, width, &[projection])
            } else {
                self.graph.reshape(projection, width)
            };
            // A transposed V narrower than the cache's rows is padded to them (Gemma 4's full
            // layers beside its wider sliding ones).
            let widest = self.value_width_max;
            if transposed && head * kv_heads < widest {
                flat = self.op(Reuse::Fresh, [widest, tokens, 1, 1], &[flat]);
            }
            let cache = self
                .graph
                .external(Element::F16, [head * kv_heads, cells, 1, 1]);
            let written = self.graph.write_rows(cache, flat, rows);
            self.cache_written(written);
            self.graph.expand(written);
        }
    }

    /// `build_attn` over MLA's K-only cache (`llm_graph_input_attn_k`, DeepSeek's absorbed
    /// attention): Q `[latent + rope, heads, tokens]` and K `[latent + rope, 1, tokens]` (the
    /// compressed KV `latent` wide, V, is K's first columns, read from the same cache), K written
    /// into the cache; flash attention over it or the scores, their masked softmax, V made
    /// contiguous and weighted; each head decompressed to `value_width` (`wv_b`), `[value_width
    /// × heads, tokens]` out. `sparse_mask` replaces MLA's mask (DSA's selected keys).
    pub(super) fn attend_latent(
        &mut self,
        [q, k, v]: [TensorId; 3],
        value_width: u64,
        sparse_mask: Option<TensorId>,
    ) -> TensorId {
        let Some(inputs) = self.attention else {
            return q;
        };
        let mask = sparse_mask.unwrap_or(inputs.mask);
        // The mask spans the cache's cells (MLA has no sliding window).
        let cells = self.graph.extents(mask)[0];
        let Batch {
            tokens, streams, ..
        } = self.batch;
        let [width, heads, ..] = self.graph.extents(q);
        let latent = self.graph.extents(v)[0];
        let per_stream = tokens / streams;
        self.graph.expand(q);
        self.graph.expand(v);
        self.graph.expand(k);
        let flat = self.graph.reshape(k, [width, tokens, 1, 1]);
        let cache = self.graph.external(Element::F16, [width, cells, 1, 1]);
        if let Some(rows) = inputs.key_rows {
            let written = self.graph.write_rows(cache, flat, rows);
            self.cache_written(written);
            self.graph.expand(written);
        }
        let q = self.graph.reshape(q, [width, heads, per_stream, streams]);
        let q = self.graph.permute(q, [0, 2, 1, 3]);
        let keys = self.cache_read([width, cells, 1, streams], CacheKind::Key);
        let values = self
            .graph
            .view(keys, [latent, cells, 1, streams], self.graph.strides(keys));
        let per_head = if self.flash_attention {
            let out = self.op(
                Reuse::Fresh,
                [latent, heads, per_stream, streams],
                &[q, keys, values, mask],
            );
            // V is K's first columns: converted with K.
            self.convert_cache_for_flash_attention(out, keys, None);
            self.graph.permute(out, [0, 2, 1, 3])
        } else {
            let scores = self.op(
                Reuse::Fresh,
                [cells, per_stream, heads, streams],
                &[keys, q],
            );
            let weights = self.elementwise(scores, &[mask]);
            let transposed = self.graph.permute(values, [1, 0, 2, 3]);
            let values = self.graph.op(
                Reuse::Fresh,
                Element::F16,
                [cells, latent, 1, streams],
                &[transposed],
            );
            self.op(
                Reuse::Fresh,
                [latent, per_stream, heads, streams],
                &[values, weights],
            )
        };
        let decompress = self.weight([latent, value_width, heads, 1]);
        let decompressed = self.op(
            Reuse::Fresh,
            [value_width, per_stream, heads, streams],
            &[decompress, per_head],
        );
        let decompressed = self.graph.permute(decompressed, [0, 2, 1, 3]);
        let out = self.op(
            Reuse::Fresh,
            [value_width * heads, tokens, 1, 1],
            &[decompressed],
        );
        self.graph.expand(out);
        out
    }

    /// CUDA's flash attention over a cache of another type than f16, for a micro-batch of more
    /// than two tokens per sequence (its tensor-core and tile kernels; the vector kernel reads
    /// a quantized cache as it is): the output's allocation also holds K and V converted to f16,
    /// each from a 128-byte boundary (`ggml_cuda_flash_attn_ext_get_alloc_size`). `values` is
    /// `None` when V is a view of K (MLA), converted once.
    fn convert_cache_for_flash_attention(
        &mut self,
        out: TensorId,
        keys: TensorId,
        values: Option<TensorId>,
    ) {
        let per_stream = self.batch.tokens / self.batch.streams.max(1);
        if self.backend != GraphBackend::Cuda || per_stream <= 2 {
            return;
        }
        let out_bytes = self.graph.bytes(out);
        let mut end = out_bytes;
        let converted = [
            (Some(keys), self.cache_not_f16[0]),
            (values, self.cache_not_f16[1]),
        ];
        for (tensor, not_f16) in converted {
            if let (Some(tensor), true) = (tensor, not_f16) {
                let elements: u64 = self.graph.extents(tensor).iter().product();
                end = (end.div_ceil(128) * 128).saturating_add(elements.saturating_mul(2));
            }
        }
        if end > out_bytes {
            self.graph.allocate_extra(out, end - out_bytes);
        }
    }

    /// `llama_mul_mat_hadamard` over a contiguous `x` when there is a rotation: its elements in
    /// rows of the rotation's width, multiplied by it, in `x`'s shape again.
    pub(super) fn rotate(&mut self, x: TensorId, rotation: Option<TensorId>) -> TensorId {
        let Some(rotation) = rotation else {
            return x;
        };
        let ne = self.graph.extents(x);
        let block = self.graph.extents(rotation)[0].max(1);
        let rows = [block, ne.iter().product::<u64>() / block, 1, 1];
        let flat = if self.graph.is_contiguous(x) {
            self.graph.reshape(x, rows)
        } else {
            self.op(Reuse::Fresh, rows, &[x])
        };
        let rotated = self.op(Reuse::Fresh, rows, &[rotation, flat]);
        self.graph.reshape(rotated, ne)
    }

    /// `build_moe_ffn` with softmax (or sigmoid) gating and normalized weights: the router's
    /// top-k of its experts ([`Router`]), gate/up/down (`expert_ff` wide; one
    /// `ffn_gate_up_exps` projection when `fused_gate_up`) per selected expert and token, their
    /// weighted sum.
    pub(super) fn routed_experts(
        &mut self,
        router: Router,
        expert_ff: u64,
        fused_gate_up: bool,
        x: TensorId,
    ) -> TensorId {
        let (tokens, used) = (self.graph.extents(x)[1], self.experts_used);
        let Routing {
            selected,
            weights,
            nodes,
        } = self.route(router, x);
        let x3 = self.graph.reshape(x, [self.n_embd, 1, tokens, 1]);
        if self.backend == GraphBackend::Cuda && router.fuses_top_k() {
            // `ggml_backend_cuda_graph_optimize` keeps the fused nodes and their sources until
            // the node after them: the input's reshape for the expert projections.
            let kept = self.with_sources(&nodes);
            self.graph.keep_until(&kept, x3);
        }
        let activated = if fused_gate_up {
            let both = self.expert_matmul(2 * expert_ff, x3, selected);
            let strides = self.graph.strides(both);
            let gate = self.graph.view(both, [expert_ff, used, tokens, 1], strides);
            let up = self.graph.view(both, [expert_ff, used, tokens, 1], strides);
            self.op(Reuse::Fresh, [expert_ff, used, tokens, 1], &[gate, up])
        } else {
            let up = self.expert_matmul(expert_ff, x3, selected);
            let up = self.expert_bias(router, up, selected);
            let gate = self.expert_matmul(expert_ff, x3, selected);
            let gate = self.expert_bias(router, gate, selected);
            self.op(Reuse::Fresh, [expert_ff, used, tokens, 1], &[gate, up])
        };
        let down = self.expert_matmul(self.n_embd, activated, selected);
        let down = self.expert_scale(router, down, selected);
        let down = self.expert_bias(router, down, selected);
        self.weighted_sum(down, weights)
    }

    /// `build_lora_mm_id`'s scale: each selected expert's scale (`[count]`, repeated over the
    /// tokens, its rows gathered) multiplied into its output, when the experts have one.
    fn expert_scale(&mut self, router: Router, x: TensorId, selected: TensorId) -> TensorId {
        if !router.down_scaled {
            return x;
        }
        let ne = self.graph.extents(x);
        let [used, tokens, ..] = self.graph.extents(selected);
        let scales = self.weight([router.count, 1, 1, 1]);
        let scales = self.graph.reshape(scales, [1, router.count, 1, 1]);
        let repeated = self.op(Reuse::Fresh, [1, router.count, tokens, 1], &[scales]);
        let picked = self.op(Reuse::Fresh, [1, used, tokens, 1], &[repeated, selected]);
        self.op(Reuse::InPlace, ne, &[x, picked])
    }

    /// The router of `build_moe_ffn`: the gating over every expert, the top-k, the selected
    /// weights (normalized, scaled); the routing nodes from the gating on, in graph order.
    fn route(&mut self, router: Router, x: TensorId) -> Routing {
        let count = router.count;
        let (tokens, used) = (self.graph.extents(x)[1], self.experts_used);
        let mut logits = match router.logits {
            Some(given) => given,
            None => self.matmul(count, x),
        };
        if router.biased_logits {
            let bias = self.weight([count, 1, 1, 1]);
            logits = self.elementwise(logits, &[bias]);
        }
        // Softmax or sigmoid over every expert, or (gpt-oss) the logits themselves.
        let probabilities = if router.softmax_after_selection {
            logits
        } else if router.sqrt_softplus {
            let softplus = self.elementwise(logits, &[]);
            self.elementwise(softplus, &[])
        } else {
            self.elementwise(logits, &[])
        };
        let per_expert = self.graph.reshape(probabilities, [1, count, tokens, 1]);
        if let Some(chosen) = router.chosen {
            let weights = self.op(Reuse::Fresh, [1, used, tokens, 1], &[per_expert, chosen]);
            let nodes = vec![probabilities, per_expert, chosen, weights];
            return self.weigh(router, chosen, weights, nodes);
        }
        let selection = if router.selection_bias {
            let bias = self.weight([count, 1, 1, 1]);
            self.elementwise(probabilities, &[bias])
        } else {
            probabilities
        };
        let selection = match router.groups {
            Some((groups, kept)) => self.mask_groups(selection, count, groups, kept),
            None => selection,
        };
        let order = self.graph.op(
            Reuse::Fresh,
            Element::I32,
            [count, tokens, 1, 1],
            &[selection],
        );
        let selected = self
            .graph
            .view(order, [used, tokens, 1, 1], self.graph.strides(order));
        let weights = self.op(Reuse::Fresh, [1, used, tokens, 1], &[per_expert, selected]);
        let mut nodes = vec![probabilities, per_expert];
        if selection != probabilities {
            nodes.push(selection);
        }
        nodes.extend([order, selected, weights]);
        self.weigh(router, selected, weights, nodes)
    }

    /// The rest of [`Builder::route`] after the selected experts' `weights`: their softmax,
    /// normalization and scale as `router` says, expanded.
    fn weigh(
        &mut self,
        router: Router,
        selected: TensorId,
        mut weights: TensorId,
        mut nodes: Vec<TensorId>,
    ) -> Routing {
        let [_, used, tokens, _] = self.graph.extents(weights);
        if router.softmax_after_selection {
            let flat = self.graph.reshape(weights, [used, tokens, 1, 1]);
            let normed = self.elementwise(flat, &[]);
            weights = self.graph.reshape(normed, [1, used, tokens, 1]);
        }
        if router.normalized {
            let flat = self.graph.reshape(weights, [used, tokens, 1, 1]);
            let sum = self.op(Reuse::Fresh, [1, tokens, 1, 1], &[flat]);
            let clamped = self.elementwise(sum, &[]);
            let normed = self.op(Reuse::InPlace, [used, tokens, 1, 1], &[flat, clamped]);
            weights = self.graph.reshape(normed, [1, used, tokens, 1]);
            nodes.extend([flat, sum, clamped, normed, weights]);
        }
        if router.scaled {
            weights = self.elementwise(weights, &[]);
            nodes.push(weights);
        }
        self.graph.expand(weights);
        Routing {
            selected,
            weights,
            nodes,
        }
    }

    /// `nodes` and every source of theirs, each once, in order.
    fn with_sources(&self, nodes: &[TensorId]) -> Vec<TensorId> {
        let mut all: Vec<TensorId> = Vec::new();
        for &node in nodes {
            for &tensor in std::iter::once(&node).chain(self.graph.sources(node)) {
                if !all.contains(&tensor) {
                    all.push(tensor);
                }
            }
        }
        all
    }

    /// The experts' outputs `down` weighted and summed over the selected experts (views of
    /// the weighted rows added in turn, as `build_moe_ffn` orders them).
    fn weighted_sum(&mut self, down: TensorId, weights: TensorId) -> TensorId {
        let [_, used, tokens, _] = self.graph.extents(down);
        let weighted = self.elementwise(down, &[weights]);
        self.graph.expand(weighted);
        let strides = self.graph.strides(weighted);
        let views: Vec<TensorId> = (0..used)
            .map(|_| {
                let view = self.graph.view(
                    weighted,
                    [self.n_embd, tokens, 1, 1],
                    [4, strides[2], strides[2], strides[2]],
                );
                self.graph.expand(view);
                view
            })
            .collect();
        let mut sum = views[0];
        for &view in &views[1..] {
            sum = self.elementwise(sum, &[view]);
            self.graph.expand(sum);
        }
        if used == 1 {
            sum = self.op(Reuse::Fresh, [self.n_embd, tokens, 1, 1], &[sum]);
        }
        if self.backend == GraphBackend::Cuda && (2..=MAX_FUSED_REDUCTION).contains(&used) {
            // CUDA fuses the weighting and the sum of the experts into one kernel, and keeps
            // its inputs until the sum is computed (`ggml_cuda_match_moe_weighted_reduction`):
            // the weighted experts can no longer take the experts' memory.
            self.graph.keep_until(&[down, weights], sum);
        }
        sum
    }

    /// `ggml_add_id`: each selected expert's bias added to its rows, when the experts have
    /// biases (gpt-oss).
    fn expert_bias(&mut self, router: Router, x: TensorId, selected: TensorId) -> TensorId {
        if !router.biased_experts {
            return x;
        }
        let [rows, ..] = self.graph.extents(x);
        let bias = self.weight([rows, router.count, 1, 1]);
        self.elementwise(x, &[bias, selected])
    }

    /// The group selection of `build_moe_ffn` (DeepSeek V3): the experts' scores `[count,
    /// tokens]` in `groups`, each group scored by its best two, the `kept` best groups' scores
    /// written over a copy filled with -inf; `[count, tokens]` out.
    fn mask_groups(&mut self, selection: TensorId, count: u64, groups: u64, kept: u64) -> TensorId {
        let tokens = self.graph.extents(selection)[1];
        let per_group = count / groups;
        let grouped = self
            .graph
            .reshape(selection, [per_group, groups, tokens, 1]);
        let order = self.graph.op(
            Reuse::Fresh,
            Element::I32,
            [per_group, groups, tokens, 1],
            &[grouped],
        );
        let best_two = self
            .graph
            .view(order, [2, groups, tokens, 1], self.graph.strides(order));
        let rows = self.graph.reshape(grouped, [1, per_group, groups, tokens]);
        let best = self.op(Reuse::Fresh, [1, 2, groups, tokens], &[rows, best_two]);
        let best = self.graph.reshape(best, [2, groups, tokens, 1]);
        let scores = self.op(Reuse::Fresh, [1, groups, tokens, 1], &[best]);
        let scores = self.graph.reshape(scores, [groups, tokens, 1, 1]);
        let group_order = self.graph.op(
            Reuse::Fresh,
            Element::I32,
            [groups, tokens, 1, 1],
            &[scores],
        );
        let chosen = self.graph.view(
            group_order,
            [kept, tokens, 1, 1],
            self.graph.strides(group_order),
        );
        let kept_scores = self.op(
            Reuse::Fresh,
            [per_group, kept, tokens, 1],
            &[grouped, chosen],
        );
        let filled = self.op(Reuse::InPlace, [per_group, groups, tokens, 1], &[grouped]);
        let masked = self.graph.write_rows(filled, kept_scores, chosen);
        self.graph.reshape(masked, [count, tokens, 1, 1])
    }

    /// `build_ffn` with SiLU gating (`LLM_FFN_SILU`, `LLM_FFN_PAR`): up, gate, their SwiGLU and
    /// the down projection.
    pub(super) fn dense_feed_forward(&mut self, width: u64, x: TensorId) -> TensorId {
        let tokens = self.graph.extents(x)[1];
        let up = self.matmul(width, x);
        let gate = self.matmul(width, x);
        let activated = self.op(Reuse::Fresh, [width, tokens, 1, 1], &[gate, up]);
        self.matmul(self.n_embd, activated)
    }

    /// `ggml_mul_mat_id`: `rows` outputs per selected expert and token.
    fn expert_matmul(&mut self, rows: u64, x: TensorId, selected: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let weight = self.graph.weight(Element::F32, [ne[0], rows, 1, 1]);
        match self.reads_from_host() {
            FromHost::Nothing | FromHost::DeviceExpertsHere => {}
            FromHost::ExpertsElsewhere | FromHost::Device => self.graph.used_elsewhere(weight),
            FromHost::ExpertsOnTheHost => self.graph.used_by_host(weight),
            _ => {
                let elements = ne[0] * rows * self.expert_count;
                self.copy_weight_from_host(weight, elements);
            }
        }
        let [used, tokens, ..] = self.graph.extents(selected);
        self.op(
            Reuse::Fresh,
            [rows, used, tokens, 1],
            &[weight, x, selected],
        )
    }
}

/// How `build_moe_ffn` routes: among `count` experts, chosen over the probabilities plus a
/// per-expert bias when `selection_bias` (DeepSeek V3's `exp_probs_b`), within the best of
/// `groups` when set (groups, groups kept); the selected weights normalized to sum to one when
/// `normalized`.
#[derive(Clone, Copy)]
pub(super) struct Router {
    pub(super) count: u64,
    pub(super) selection_bias: bool,
    pub(super) groups: Option<(u64, u64)>,
    pub(super) normalized: bool,
    /// gpt-oss (`SOFTMAX_WEIGHT`): the experts chosen over the logits, the softmax taken over
    /// the selected ones only.
    pub(super) softmax_after_selection: bool,
    /// DeepSeek V3: the selected weights scaled (`ggml_scale` by `expert_weights_scale`).
    pub(super) scaled: bool,
    /// gpt-oss: a bias on the router's logits and on every expert's projections.
    pub(super) biased_logits: bool,
    pub(super) biased_experts: bool,
    /// Gemma 4: the router's logits, computed by the graph apart (`probs_in`).
    pub(super) logits: Option<TensorId>,
    /// Gemma 4: each expert's output scaled (`ffn_down_exps.scale`).
    pub(super) down_scaled: bool,
    /// DeepSeek V4 (`SQRT_SOFTPLUS`): the gating is a softplus, then its square root.
    pub(super) sqrt_softplus: bool,
    /// DeepSeek V4's hash layers: the experts each token id is routed to, looked up by the graph
    /// apart (`ffn_gate_tid2eid`), in place of the top-k.
    pub(super) chosen: Option<TensorId>,
}

/// What [`Builder::route`] leaves: the selected experts' ids, their weights, and the routing
/// nodes from the gating on (what CUDA fuses).
struct Routing {
    selected: TensorId,
    weights: TensorId,
    nodes: Vec<TensorId>,
}

/// The most experts per token CUDA sums in one fused kernel
/// (`MOE_WEIGHTED_REDUCTION_MAX_EXPERTS`).
const MAX_FUSED_REDUCTION: u64 = 15;

impl Router {
    /// Whether CUDA fuses this routing (`ggml_cuda_topk_moe_fusion` and
    /// `ggml_cuda_should_use_topk_moe`): the gating over every expert (softmax, sigmoid or
    /// DeepSeek V4's square root of a softplus, with a selection bias or not), the top-k (not
    /// the experts a hash layer looks up), optionally the normalization, with no expert
    /// groups between them, over a power-of-two count of experts up to 512 (or 288, 576).
    fn fuses_top_k(&self) -> bool {
        let count = self.count;
        let instantiated =
            (count.is_power_of_two() && count <= 512) || count == 288 || count == 576;
        instantiated
            && self.groups.is_none()
            && !self.softmax_after_selection
            && self.chosen.is_none()
    }

    /// The softmax router of `experts`' layers, normalized or not (llama.cpp reads the groups
    /// for every architecture and uses them when there are several that divide the experts).
    pub(super) fn of(experts: &ExpertShape, normalized: bool) -> Router {
        let count = u64::from(experts.count);
        let (groups, kept) = (u64::from(experts.groups), u64::from(experts.groups_used));
        let grouped = groups > 1 && kept > 0 && count.is_multiple_of(groups);
        Router {
            count,
            selection_bias: false,
            groups: grouped.then_some((groups, kept.min(groups))),
            normalized,
            scaled: false,
            softmax_after_selection: false,
            biased_logits: false,
            biased_experts: false,
            logits: None,
            down_scaled: false,
            sqrt_softplus: false,
            chosen: None,
        }
    }
}

/// Elements no tensor of a real graph comes near (a 256 K vocabulary's logits over 8 K tokens
/// are 2^31); past it, a damaged or hostile header's dimensions could overflow the plain
/// arithmetic of [`Builder`], so such a model gets the saturating formulas instead.
const MAX_ELEMENTS: u64 = 1 << 46;

/// Whether every tensor of the graph stays under [`MAX_ELEMENTS`]: the products below bound
/// each one (and every byte offset into it).
fn plausible(model: &ModelShape, batch: &Batch, g: &ContextGeometry) -> bool {
    let attention = &model.attention;
    let widest = |values: &[u32]| u64::from(values.iter().copied().max().unwrap_or(0));
    let heads = widest(&attention.head_count).max(widest(&attention.head_count_kv));
    let head = [
        attention.key_length,
        attention.value_length,
        attention.key_length_swa,
        attention.value_length_swa,
        attention.mla_key_length,
        attention.mla_value_length,
    ]
    .into_iter()
    .max()
    .map_or(0, u64::from);
    let n_ff = u64::from(model.n_ff);
    let experts = model.experts.map_or(0, |e| {
        let shared = u64::from(e.feed_forward_length).saturating_mul(u64::from(e.shared));
        let width = u64::from(e.feed_forward_length.max(e.shared_feed_forward_length))
            .max(n_ff)
            .max(shared);
        u64::from(e.count.max(e.used)).saturating_mul(width)
    });
    let mut rows = vec![
        u64::from(model.n_vocab),
        u64::from(model.n_embd),
        n_ff,
        g.n_ctx.saturating_mul(heads.max(1)),
        heads.saturating_mul(head).saturating_mul(2),
        experts.saturating_mul(2),
    ];
    let mut columns = batch.tokens;
    if let Some(linear) = attention.recurrent {
        let (kernel, state) = (u64::from(linear.conv_kernel), u64::from(linear.state_size));
        rows.extend([
            linear.ssm_state_elements(),
            kernel.saturating_mul(linear.conv_channels()),
            u64::from(linear.inner_size).saturating_mul(state),
            u64::from(linear.time_step_rank).saturating_mul(state),
        ]);
        columns = columns
            .saturating_add(batch.sequences.saturating_mul(state))
            .saturating_add(kernel.saturating_mul(batch.sequences));
    }
    rows.iter()
        .all(|&row| row.saturating_mul(columns.max(1)) <= MAX_ELEMENTS)
}

/// The Hadamard block llama.cpp rotates a quantized cache's rows by
/// (`llama_kv_cache::build_input_k_rot`): for K the largest power of two from 64 up that divides
/// the head (`largest`), for V 64; none for an unquantized cache or a head not a multiple of 64.
pub(super) fn rotation_block(kind: KvType, head: u32, largest: bool) -> Option<u64> {
    kind.is_quantized()
        .then(|| hadamard_block(u64::from(head), largest))
        .flatten()
}

/// The Hadamard block rows of `head` are rotated by: the largest power of two from 64 up that
/// divides it (`largest`), or 64; none for a head not a multiple of 64.
pub(super) fn hadamard_block(head: u64, largest: bool) -> Option<u64> {
    if head == 0 || !head.is_multiple_of(64) {
        return None;
    }
    let mut block: u64 = 64;
    while largest && head.is_multiple_of(block * 2) {
        block *= 2;
    }
    Some(block)
}

/// Whether layer `il` attends over a sliding window (its own cache, mask and rotations).
fn is_windowed(model: &ModelShape, il: usize) -> bool {
    let attention = &model.attention;
    attention.sliding_window.is_some() && attention.swa_layers.get(il).copied().unwrap_or(false)
}

/// Layer `il`'s head size, query heads and KV heads.
pub(super) fn layer_heads(model: &ModelShape, il: usize) -> (u64, u64, u64) {
    let attention = &model.attention;
    let count = |counts: &[u32]| u64::from(counts.get(il).copied().unwrap_or(0));
    (
        u64::from(attention.head_lengths(il).0),
        count(&attention.head_count),
        count(&attention.head_count_kv),
    )
}

/// The byte strides of a contiguous f32 tensor of extents `ne`.
pub(super) fn contiguous_strides(ne: [u64; 4]) -> [u64; 4] {
    [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]]
}
