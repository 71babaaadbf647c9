//! The graph llama.cpp reserves for `deepseek4` (DeepSeek V4, `src/models/deepseek4.cpp`): the
//! residual is four streams, mixed into each block's input and back around its output by
//! hyper-connections (the fused `ggml_dsv4_hc_pre`, `_comb` and `_post`); the attention is one
//! 512-wide KV head with sinks over a raw cache of the window, beside, on some layers, a cache
//! compressed by 4 (whose rows each token reads are chosen by a lightning indexer over a
//! compressed cache of its own) or by 128, each compressed row made from a window of projected
//! rows and scores that the compressor's state carries between micro-batches; the queries come
//! through a low-rank projection, the output is de-roped and projected back in groups; the
//! routed experts are chosen by token id on the first layers (hash routing), else by score with
//! a bias, beside a shared one.

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{hadamard_block, replay, rotation_block, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::{self, ContextGeometry};
use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions};

/// The compression llama.cpp pairs with the lightning indexer (`DSV4_CSA_RATIO`).
const WITH_INDEXER: u64 = 4;

/// The coarser compression (`DSV4_HCA_RATIO`).
const COARSE: u64 = 128;

/// The residual streams llama.cpp's hyper-connections mix (`hyper_connection.count`).
const STREAMS: u64 = 4;

/// The widths of DeepSeek V4's layers, from the header and the tensors.
struct Shape {
    /// The residual streams (`hyper_connection.count`).
    streams: u64,
    heads: u64,
    /// The one KV head's width, the queries' too (512).
    head: u64,
    /// `q_lora_rank`.
    query_rank: u64,
    /// The output's groups and each group's rank (`attention.output_group_count`,
    /// `attention.output_lora_rank`).
    groups: u64,
    group_rank: u64,
    /// Per layer: 0, [`WITH_INDEXER`] or [`COARSE`].
    ratios: Vec<u64>,
    indexer_heads: u64,
    indexer_width: u64,
    indexer_top_k: u64,
    /// Per layer: experts chosen by token id (`ffn_gate_tid2eid`).
    hashed: Vec<bool>,
    expert_ff: u64,
    shared_ff: u64,
}

impl Shape {
    /// `None` for a header this graph does not read: not `deepseek4`, other than four residual
    /// streams, no experts, a compression llama.cpp does not load, widths that do not divide.
    fn of(model: &ModelShape) -> Option<Shape> {
        if model.architecture != "deepseek4" {
            return None;
        }
        let attention = &model.attention;
        let experts = model.experts?;
        let n_layer = model.n_layer as usize;
        let streams = model.residual_streams();
        let heads = u64::from(attention.head_count.iter().copied().max()?);
        let head = u64::from(attention.key_length);
        let ratios: Vec<u64> = attention
            .compress_ratios
            .iter()
            .map(|&r| u64::from(r))
            .collect();
        let known = ratios.iter().all(|r| [0, WITH_INDEXER, COARSE].contains(r));
        let row_length = |suffix: &str| {
            model
                .tensors
                .iter()
                .find(|t| t.name.ends_with(suffix))
                .map(|t| t.row_length)
        };
        // `attn_output_a` is `heads × head / groups` wide, `attn_output_b` `groups × rank`.
        let group_width = row_length(".attn_output_a.weight").filter(|&w| w > 0)?;
        let groups = heads.checked_mul(head)? / group_width;
        let group_rank = row_length(".attn_output_b.weight")? / groups.max(1);
        let query_rank = model
            .tensors
            .iter()
            .find(|t| t.name.ends_with(".attn_q_a_norm.weight"))
            .map(|t| t.bytes / 4)?;
        let mut hashed = vec![false; n_layer];
        for t in &model.tensors {
            if let Some(il) = t.layer.map(|l| l as usize).filter(|&l| l < n_layer) {
                hashed[il] |= t.name.ends_with(".ffn_gate_tid2eid.weight");
            }
        }
        let shape = Shape {
            streams,
            heads,
            head,
            query_rank,
            groups,
            group_rank,
            ratios,
            indexer_heads: u64::from(attention.indexer_heads),
            indexer_width: u64::from(attention.indexer_key_length.iter().copied().max()?),
            indexer_top_k: u64::from(attention.indexer_top_k),
            hashed,
            expert_ff: u64::from(experts.feed_forward_length),
            shared_ff: u64::from(experts.feed_forward_length)
                .saturating_mul(u64::from(experts.shared)),
        };
        // The indexer's rows are rotated whole (llama.cpp rotates by the largest power of two
        // from 64 up dividing them).
        let indexed = !shape.ratios.contains(&WITH_INDEXER)
            || (shape.indexer_heads > 0
                && shape.indexer_top_k > 0
                && hadamard_block(shape.indexer_width, true).is_some());
        // llama.cpp's hyper-connections take four streams (`build_hc_pre` asserts it); a rank
        // read from a tensor's size is a header's width, a u32.
        let built = streams == STREAMS
            && query_rank <= u64::from(u32::MAX)
            && known
            && indexed
            && shape.ratios.len() == n_layer
            && groups > 0
            && group_rank > 0
            && query_rank > 0
            && shape.expert_ff > 0
            && heads.checked_mul(head)? == groups.checked_mul(group_width)?;
        built.then_some(shape)
    }
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    Shape::of(model).is_some()
}

/// The compute buffer of `device` for a DeepSeek V4 model, or `None` for another model.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let shape = Shape::of(model)?;
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Placed { hold: hold_inputs }, scheduler),
        |mut builder, held, holds_output| {
            let (n_embd, tokens) = (builder.n_embd, builder.batch.tokens);
            builder.residual_streams = shape.streams;
            builder.arrived_norm_width = n_embd * shape.streams;
            if held.is_empty() && builder.follows_a_device {
                output_after_a_device(&mut builder, model, &shape, (options, g));
                return builder;
            }
            let embedded = builder.embeddings(held);
            let inputs = Inputs::place(&mut builder, model, &shape, (options, g));
            let streams = [n_embd, shape.streams, tokens, 1];
            let mut cur = if held.first() == Some(&0) {
                let one = builder.graph.reshape(embedded, [n_embd, 1, tokens, 1]);
                builder.op(Reuse::Fresh, streams, &[one])
            } else {
                // The streams the layer before handed on.
                builder.graph.reshape(embedded, streams)
            };
            for &il in held {
                builder.begin_layer(il);
                cur = layer(&mut builder, model, &shape, &inputs, il, cur);
            }
            let last = held
                .last()
                .is_some_and(|&il| il + 1 == model.n_layer as usize);
            if last && !holds_output && !builder.is_host() {
                hand_on_output_rows(&mut builder, &inputs, cur);
                return builder;
            }
            let mut built = builder.finish(cur, holds_output, |b, x| output(b, &shape, &inputs, x));
            if built.is_host() {
                inputs.hold(&mut built);
            }
            built
        },
    )
}

/// The output alone after another device's layers: that device runs the output rows'
/// selection and their norm, which arrive with each stream's rows; then [`head`].
fn output_after_a_device(
    b: &mut Builder,
    model: &ModelShape,
    shape: &Shape,
    (options, g): (&PlacementOptions, &ContextGeometry),
) {
    let inputs = Inputs::place(b, model, shape, (options, g));
    b.begin_output();
    let arrived = Arrived::of(b, shape.streams, inputs.output_rows);
    head(b, shape, arrived);
}

/// The last layer's device, when another holds the output: the output rows of the `streams`
/// and their norm run here too, up to the output's first weight.
fn hand_on_output_rows(b: &mut Builder, inputs: &Inputs, streams: TensorId) {
    let picked = output_rows(b, inputs, streams);
    let [width, outputs, ..] = b.graph.extents(picked);
    let normed = b.op(Reuse::InPlace, [width, outputs, 1, 1], &[picked]);
    b.graph.expand(normed);
}

/// The host's inputs when it holds no layer: all of them, for the devices to copy.
fn hold_inputs(
    b: &mut Builder,
    model: &ModelShape,
    options: &PlacementOptions,
    g: &ContextGeometry,
) {
    if let Some(shape) = Shape::of(model) {
        Inputs::place(b, model, &shape, (options, g)).hold(b);
    }
}

/// The graph's inputs besides the tokens: positions, output rows, the raw cache's rows, mask
/// and rotation (a quantized cache's), each compressor's ([`Compressor`]) where a layer
/// compresses that way; and the cache's row, the micro-batch's streams (one per slot).
struct Inputs {
    positions: TensorId,
    output_rows: TensorId,
    raw_rows: TensorId,
    raw_mask: TensorId,
    raw_rotation: Option<TensorId>,
    /// Token ids, for the hash layers' routing.
    token_ids: TensorId,
    with_indexer: Option<Compressor>,
    coarse: Option<Compressor>,
    indexer: Option<Compressor>,
    /// Bytes of a cache row of the head (`-ctk`'s type).
    cache_row: u64,
    streams: u64,
}

/// One compressor's inputs (`llm_graph_input_dsv4::comp_input` for the reserved micro-batch):
/// each token's position in its block, the rows the state keeps, the rows it reads per
/// compressed row, where those rows go and their positions, the compressed cache's mask and
/// its rotation; and its sizes.
#[derive(Clone, Copy)]
struct Compressor {
    ratio: u64,
    /// The compressed rows' width (the head, or the indexer's).
    head: u64,
    /// Each state row's width: the head's, twice over with the overlapping windows of the
    /// compression by 4.
    width: u64,
    state_rows: u64,
    positions_in_block: TensorId,
    kept_from: TensorId,
    kept_to: TensorId,
    read: TensorId,
    written: TensorId,
    written_positions: TensorId,
    mask: TensorId,
    rotation: Option<TensorId>,
}

impl Inputs {
    /// Places every input in the graph (the host holds them all: the devices copy theirs).
    fn hold(&self, b: &mut Builder) {
        let own = [
            Some(self.positions),
            Some(self.output_rows),
            Some(self.raw_rows),
            Some(self.raw_mask),
            self.raw_rotation,
            Some(self.token_ids),
        ];
        let compressors = [self.with_indexer, self.coarse, self.indexer]
            .into_iter()
            .flatten()
            .flat_map(|c| {
                [
                    Some(c.positions_in_block),
                    Some(c.kept_from),
                    Some(c.kept_to),
                    Some(c.read),
                    Some(c.written),
                    Some(c.written_positions),
                    Some(c.mask),
                    c.rotation,
                ]
            });
        for input in own.into_iter().chain(compressors).flatten() {
            b.graph.expand(input);
        }
    }

    fn place(
        b: &mut Builder,
        model: &ModelShape,
        shape: &Shape,
        (options, g): (&PlacementOptions, &ContextGeometry),
    ) -> Inputs {
        let (tokens, outputs) = (b.batch.tokens, b.batch.outputs);
        let streams = b.batch.sequences;
        let per_stream = tokens / streams;
        let positions = b.graph.input(Element::I32, [tokens, 1, 1, 1]);
        let output_rows = b.graph.input(Element::I32, [outputs, 1, 1, 1]);
        let raw_rows = b.graph.input(Element::I64, [tokens, 1, 1, 1]);
        let raw_cells = kv::raw_window_cells(&model.attention, options, g);
        let mask = b.mask_element();
        // Expanded first on the host, which holds the graph's inputs ([`Inputs::hold`]).
        let raw_mask = b.graph.input(mask, [raw_cells, per_stream, 1, streams]);
        if b.is_host() {
            b.graph.expand(raw_mask);
        }
        let rotation = |b: &mut Builder| {
            let head = u32::try_from(shape.head).unwrap_or(0);
            rotation_block(options.cache_type_k, head, true)
                .map(|block| b.graph.input(Element::F32, [block, block, 1, 1]))
        };
        let raw_rotation = rotation(b);
        let token_ids = match b.token_ids {
            Some(ids) => ids,
            None => b.graph.input(Element::I32, [tokens, 1, 1, 1]),
        };
        let has = |ratio: u64| shape.ratios.contains(&ratio);
        let compressed = |b: &mut Builder, ratio: u64| {
            let rotation = rotation(b);
            Compressor::place(b, (ratio, shape.head), (mask, rotation), g)
        };
        let with_indexer = has(WITH_INDEXER).then(|| compressed(b, WITH_INDEXER));
        let coarse = has(COARSE).then(|| compressed(b, COARSE));
        // The indexer's mask is f16 for the fused lightning indexer, whatever flash attention;
        // its rows are always rotated.
        let indexer = has(WITH_INDEXER).then(|| {
            let width = shape.indexer_width;
            let rotation = hadamard_block(width, true)
                .map(|block| b.graph.input(Element::F32, [block, block, 1, 1]));
            Compressor::place(b, (WITH_INDEXER, width), (Element::F16, rotation), g)
        });
        let cache_row = kv::row_bytes(options.cache_type_k, shape.head).unwrap_or(2 * shape.head);
        Inputs {
            positions,
            output_rows,
            raw_rows,
            raw_mask,
            raw_rotation,
            token_ids,
            with_indexer,
            coarse,
            indexer,
            cache_row,
            streams,
        }
    }
}

impl Compressor {
    /// The inputs of a compressor by `ratio` into rows of `head` (`dsv4_build_reserve_comp_plan`
    /// for the reserved micro-batch: at most `tokens / ratio + sequences` compressed rows, a
    /// state of twice the ratio in rows per slot where the windows overlap, else the ratio).
    fn place(
        b: &mut Builder,
        (ratio, head): (u64, u64),
        (mask, rotation): (Element, Option<TensorId>),
        g: &ContextGeometry,
    ) -> Compressor {
        let (tokens, streams) = (b.batch.tokens, b.batch.sequences);
        let overlapping = ratio == WITH_INDEXER;
        let (width, state_size) = if overlapping {
            (2 * head, 2 * ratio)
        } else {
            (head, ratio)
        };
        let state_rows = state_size * streams;
        let blocks = tokens / ratio + streams;
        let kept = tokens.min(state_rows);
        let reads = if overlapping { 2 } else { 1 } * ratio * blocks;
        let i32 = |b: &mut Builder, n: u64| b.graph.input(Element::I32, [n, 1, 1, 1]);
        let cells = kv::compressed_cells(ratio, g);
        Compressor {
            ratio,
            head,
            width,
            state_rows,
            positions_in_block: i32(b, tokens),
            kept_from: i32(b, kept),
            kept_to: i32(b, kept),
            read: i32(b, reads),
            written: b.graph.input(Element::I64, [blocks, 1, 1, 1]),
            written_positions: i32(b, blocks),
            mask: b.graph.input(mask, [cells, tokens / streams, 1, streams]),
            rotation,
        }
    }

    /// Compressed rows from `normed` (`[n_embd, tokens]`): the layer's projected rows and
    /// scores (the score with each token's position in its block added) after the state's
    /// rows ([`Compressor::gathered`]), the scores' softmax over each compressed row's window
    /// weighing its rows, summed, normed and roped (`build_overlap_compressed_kv_from_state`,
    /// `build_hca_compressed_kv_from_state`), rotated, written into the compressed cache; then
    /// the rows the state keeps written into it.
    fn compress(&self, b: &mut Builder, normed: TensorId) {
        let tokens = b.batch.tokens;
        let (head, width) = (self.head, self.width);
        let rows = b.matmul(width, normed);
        let scores = b.matmul(width, normed);
        let by_position = b.weight([width, self.ratio, 1, 1]);
        let by_position = b.op(
            Reuse::Fresh,
            [width, tokens, 1, 1],
            &[by_position, self.positions_in_block],
        );
        let scores = b.elementwise(scores, &[by_position]);
        let values = self.gathered(b, rows);
        let weights = self.gathered(b, scores);
        let weights = b.elementwise(weights, &[]);
        let weighted = b.elementwise(values, &[weights]);
        let blocks = b.graph.extents(self.written)[0];
        let summed = b.op(Reuse::Fresh, [1, head, blocks, 1], &[weighted]);
        let summed = b.graph.permute(summed, [1, 0, 2, 3]);
        let compressed = b.op(Reuse::Fresh, [head, 1, blocks, 1], &[summed]);
        let compressed = b.rms_norm(compressed);
        let compressed = b.elementwise(compressed, &[self.written_positions]);
        let compressed = b.rotate(compressed, self.rotation);
        let flat = b.graph.reshape(compressed, [head, blocks, 1, 1]);
        let cells = b.graph.extents(self.mask)[0];
        let cache = b.cache([head, cells, 1, 1]);
        let written = b.graph.write_rows(cache, flat, self.written);
        b.graph.expand(written);
        let kept = b.graph.extents(self.kept_from)[0];
        for x in [rows, scores] {
            let picked = b.op(Reuse::Fresh, [width, kept, 1, 1], &[x, self.kept_from]);
            let state = b.cache([width, self.state_rows, 1, 1]);
            let stored = b.graph.write_rows(state, picked, self.kept_to);
            b.graph.expand(stored);
        }
    }

    /// The rows `x` (`[width, tokens]`) after the state's, each compressed row's window of them
    /// gathered, `[window, head, compressed rows]`: with overlapping windows a zero row (a -inf
    /// score) after them, each window the second half of the row before's and the first of its
    /// own.
    fn gathered(&self, b: &mut Builder, x: TensorId) -> TensorId {
        let (head, width) = (self.head, self.width);
        let tokens = b.batch.tokens;
        let blocks = b.graph.extents(self.written)[0];
        let overlapping = width != head;
        let state = b.cache([width, self.state_rows, 1, 1]);
        let mut source = b.op(
            Reuse::Fresh,
            [width, self.state_rows + tokens, 1, 1],
            &[state, x],
        );
        if overlapping {
            let first = b
                .graph
                .view(source, [width, 1, 1, 1], b.graph.strides(source));
            let zero = b.elementwise(first, &[]);
            let zero = b.graph.reshape(zero, [width, 1, 1, 1]);
            let rows = self.state_rows + tokens + 1;
            source = b.op(Reuse::Fresh, [width, rows, 1, 1], &[source, zero]);
        }
        let window = if overlapping { 2 } else { 1 } * self.ratio;
        let picked = b.op(
            Reuse::Fresh,
            [width, window * blocks, 1, 1],
            &[source, self.read],
        );
        let by_block = if overlapping {
            let reads = self.ratio * blocks;
            let strides = b.graph.strides(picked);
            let halves = [(); 2].map(|()| {
                let half = b.graph.view(picked, [head, reads, 1, 1], strides);
                let half = b.op(Reuse::Fresh, [head, reads, 1, 1], &[half]);
                b.graph.reshape(half, [head, self.ratio, blocks, 1])
            });
            b.op(Reuse::Fresh, [head, window, blocks, 1], &halves)
        } else {
            b.graph.reshape(picked, [head, window, blocks, 1])
        };
        let across = b.graph.permute(by_block, [1, 0, 2, 3]);
        b.op(Reuse::Fresh, [window, head, blocks, 1], &[across])
    }
}

/// The hyper-connections' mix into a block (`build_hc_pre`, fused): the streams RMS-normed
/// together and projected to the mix's coefficients; the block's input (each stream weighed
/// by its sigmoid coefficient), and the coefficients of the mix back ([`Mix`]), made now and
/// expanded where llama.cpp expands them.
fn mix_in(b: &mut Builder, streams: TensorId, count: u64) -> (TensorId, Mix) {
    let [n_embd, _, tokens, _] = b.graph.extents(streams);
    let flat = b.graph.reshape(streams, [n_embd * count, tokens, 1, 1]);
    // After another device's layer this norm ran there (no weight places it here).
    let normed = match b.arrived_norm([n_embd * count, tokens, 1, 1]) {
        Some(arrived) => arrived,
        None => b.op(Reuse::InPlace, [n_embd * count, tokens, 1, 1], &[flat]),
    };
    let coefficients = (2 + count) * count;
    let mixes = b.matmul(coefficients, normed);
    let scale = b.weight([3, 1, 1, 1]);
    let base = b.weight([coefficients, 1, 1, 1]);
    let mixes_strides = b.graph.strides(mixes);
    let gate = |b: &mut Builder| {
        let part = b.graph.view(mixes, [count, tokens, 1, 1], mixes_strides);
        let scale_part = b.graph.view(scale, [1, 1, 1, 1], [4, 4, 4, 4]);
        let scaled = b.elementwise(part, &[scale_part]);
        let base_part = b
            .graph
            .view(base, [count, 1, 1, 1], [4, 4 * count, 4 * count, 4 * count]);
        let shifted = b.elementwise(scaled, &[base_part]);
        let squashed = b.elementwise(shifted, &[]);
        b.elementwise(squashed, &[])
    };
    let pre = gate(b);
    let post = gate(b);
    let comb = b.op(
        Reuse::Fresh,
        [count, count, tokens, 1],
        &[mixes, scale, base],
    );
    let input = b.op(Reuse::Fresh, [n_embd, tokens, 1, 1], &[streams, pre]);
    (input, Mix { post, comb })
}

/// The coefficients of a block's mix back into the streams.
#[derive(Clone, Copy)]
struct Mix {
    post: TensorId,
    comb: TensorId,
}

/// `build_hc_post`, fused: the block's output and the streams before it mixed into new streams.
fn mix_out(b: &mut Builder, out: TensorId, residual: TensorId, mix: Mix) -> TensorId {
    let ne = b.graph.extents(residual);
    b.op(Reuse::Fresh, ne, &[out, residual, mix.post, mix.comb])
}

/// One layer: the attention between the streams' mixes, then the routed and shared experts
/// between the next.
fn layer(
    b: &mut Builder,
    model: &ModelShape,
    shape: &Shape,
    inputs: &Inputs,
    il: usize,
    streams: TensorId,
) -> TensorId {
    let (input, mix) = mix_in(b, streams, shape.streams);
    let normed = b.rms_norm(input);
    let attended = attention(b, shape, inputs, il, normed);
    let after_attention = mix_out(b, attended, streams, mix);
    let (input, mix) = mix_in(b, after_attention, shape.streams);
    for x in [after_attention, mix.post, mix.comb] {
        b.graph.expand(x);
    }
    let normed = b.rms_norm(input);
    let Some(experts) = model.experts else {
        return after_attention;
    };
    let hashed = shape.hashed.get(il).copied().unwrap_or(false);
    let chosen = hashed.then(|| {
        let (used, tokens) = (b.experts_used, b.batch.tokens);
        let table = b.weight([used, b.n_vocab, 1, 1]);
        let ids = inputs.token_ids;
        b.graph.op(
            Reuse::Fresh,
            Element::I32,
            [used, tokens, 1, 1],
            &[table, ids],
        )
    });
    let router = Router {
        sqrt_softplus: true,
        selection_bias: !hashed,
        chosen,
        scaled: experts.weights_scaled,
        ..Router::of(&experts, experts.weights_norm)
    };
    let routed = b.routed_experts(router, shape.expert_ff, false, normed);
    let shared = b.dense_feed_forward(shape.shared_ff, normed);
    let out = b.elementwise(routed, &[shared]);
    mix_out(b, out, after_attention, mix)
}

/// A layer's attention over its `normed` input: its compressors first, then the queries
/// (low-rank, RMS-normed per head, roped) and the one KV row (normed, roped), both rotated
/// around a quantized cache, the row written into the raw cache, attention ([`attend`]) over
/// the raw cache and the layer's compressed one (its rows chosen by the indexer where it
/// compresses by 4), rotated back, de-roped, projected in groups and back to the model's
/// width.
fn attention(
    b: &mut Builder,
    shape: &Shape,
    inputs: &Inputs,
    il: usize,
    normed: TensorId,
) -> TensorId {
    let ratio = shape.ratios.get(il).copied().unwrap_or(0);
    let (head, heads) = (shape.head, shape.heads);
    let tokens = b.batch.tokens;
    let compressed = match ratio {
        WITH_INDEXER => inputs.with_indexer,
        COARSE => inputs.coarse,
        _ => None,
    };
    if let Some(compressor) = compressed {
        compressor.compress(b, normed);
    }
    if let (WITH_INDEXER, Some(indexer)) = (ratio, inputs.indexer) {
        indexer.compress(b, normed);
    }
    let low_rank = b.matmul(shape.query_rank, normed);
    let low_rank = b.rms_norm(low_rank);
    let q = b.matmul(heads * head, low_rank);
    let q = b.graph.reshape(q, [head, heads, tokens, 1]);
    let q = b.op(Reuse::InPlace, [head, heads, tokens, 1], &[q]);
    let q = b.elementwise(q, &[inputs.positions]);
    let q = b.rotate(q, inputs.raw_rotation);
    let kv = b.matmul(head, normed);
    let kv = b.rms_norm(kv);
    let kv = b.graph.reshape(kv, [head, 1, tokens, 1]);
    let kv = b.elementwise(kv, &[inputs.positions]);
    let kv = b.rotate(kv, inputs.raw_rotation);
    b.graph.expand(q);
    b.graph.expand(kv);
    let raw_cells = b.graph.extents(inputs.raw_mask)[0];
    let streams = inputs.streams;
    let raw = b.cache([head, raw_cells * streams, 1, 1]);
    let flat = b.graph.reshape(kv, [head, tokens, 1, 1]);
    let written = b.graph.write_rows(raw, flat, inputs.raw_rows);
    b.graph.expand(written);
    let raw_keys = b.cache([head, 1, raw_cells, streams]);
    let (keys, mask) = match compressed {
        Some(compressor) => {
            let cells = b.graph.extents(compressor.mask)[0];
            let all = raw_cells + cells;
            let theirs = b.cache([head, 1, cells, streams]);
            let row = inputs.cache_row;
            let keys = (b.graph).op(
                Reuse::Fresh,
                Element::I8,
                [row, 1, all, streams],
                &[raw_keys, theirs],
            );
            let compressed_mask = match ratio {
                WITH_INDEXER => {
                    let selected = select(b, shape, inputs, low_rank, normed);
                    let zeros = b.mask_element();
                    b.top_k_mask(compressor.mask, selected, zeros)
                }
                _ => compressor.mask,
            };
            let per_stream = tokens / streams;
            let mask = b.graph.op(
                Reuse::Fresh,
                b.mask_element(),
                [all, per_stream, 1, streams],
                &[inputs.raw_mask, compressed_mask],
            );
            (keys, mask)
        }
        None => (raw_keys, inputs.raw_mask),
    };
    let attended = attend(b, shape, inputs, q, (keys, mask));
    let attended = b.rotate(attended, inputs.raw_rotation);
    let attended = b.graph.reshape(attended, [head, heads, tokens, 1]);
    let derope = b.elementwise(attended, &[inputs.positions]);
    let group_width = heads * head / shape.groups;
    let grouped = b
        .graph
        .reshape(derope, [group_width, shape.groups, tokens, 1]);
    let grouped = b.graph.permute(grouped, [0, 2, 1, 3]);
    let projection = b.weight([group_width, shape.group_rank, shape.groups, 1]);
    let projected = b.op(
        Reuse::Fresh,
        [shape.group_rank, tokens, shape.groups, 1],
        &[projection, grouped],
    );
    let projected = b.graph.permute(projected, [0, 2, 1, 3]);
    let width = shape.group_rank * shape.groups;
    let flat = b.op(Reuse::Fresh, [width, tokens, 1, 1], &[projected]);
    let n_embd = b.n_embd;
    b.matmul(n_embd, flat)
}

/// `build_attn_mha` over the one KV head `keys` (`[head, 1, cells, streams]`, V the same
/// rows): flash attention with the sinks, or the scores, their masked softmax with the sinks,
/// V transposed and made contiguous, weighted, the heads made contiguous; `[head × heads,
/// tokens]` out.
fn attend(
    b: &mut Builder,
    shape: &Shape,
    inputs: &Inputs,
    q: TensorId,
    (keys, mask): (TensorId, TensorId),
) -> TensorId {
    let (head, heads, streams) = (shape.head, shape.heads, inputs.streams);
    let tokens = b.batch.tokens;
    let per_stream = tokens / streams;
    let cells = b.graph.extents(keys)[2];
    let q = b.graph.reshape(q, [head, heads, per_stream, streams]);
    let q = b.graph.permute(q, [0, 2, 1, 3]);
    let k = b.graph.permute(keys, [0, 2, 1, 3]);
    let sinks = b.weight([heads, 1, 1, 1]);
    let out = if b.flash_attention() {
        let out = b.op(
            Reuse::Fresh,
            [head, heads, per_stream, streams],
            &[q, k, k, mask, sinks],
        );
        b.graph.reshape(out, [head * heads, tokens, 1, 1])
    } else {
        let scores = b.op(Reuse::Fresh, [cells, per_stream, heads, streams], &[k, q]);
        let weights = b.elementwise(scores, &[mask, sinks]);
        let transposed = b.graph.permute(k, [1, 0, 2, 3]);
        let values = (b.graph).op(
            Reuse::Fresh,
            Element::F16,
            [cells, head, 1, streams],
            &[transposed],
        );
        let mixed = b.op(
            Reuse::Fresh,
            [head, per_stream, heads, streams],
            &[values, weights],
        );
        let mixed = b.graph.permute(mixed, [0, 2, 1, 3]);
        b.op(Reuse::Fresh, [head * heads, tokens, 1, 1], &[mixed])
    };
    b.graph.expand(out);
    out
}

/// The lightning indexer's choice of compressed rows for each token (`build_lid_top_k`): its
/// queries from the low-rank ones, roped and rotated, its heads' weights from the normed
/// input, the fused score of every compressed indexer row, the best `top_k`.
fn select(
    b: &mut Builder,
    shape: &Shape,
    inputs: &Inputs,
    low_rank: TensorId,
    normed: TensorId,
) -> TensorId {
    let (heads, width) = (shape.indexer_heads, shape.indexer_width);
    let (tokens, streams) = (b.batch.tokens, inputs.streams);
    let per_stream = tokens / streams;
    let Some(indexer) = inputs.indexer else {
        return low_rank;
    };
    let q = b.matmul(heads * width, low_rank);
    let q = b.graph.reshape(q, [width, heads, tokens, 1]);
    let q = b.op(
        Reuse::InPlace,
        [width, heads, tokens, 1],
        &[q, inputs.positions],
    );
    let q = b.rotate(q, indexer.rotation);
    let weights = b.matmul(heads, normed);
    let weights = b.elementwise(weights, &[]);
    let cells = b.graph.extents(indexer.mask)[0];
    let keys = b.cache([width, 1, cells, streams]);
    let scores = b.op(
        Reuse::Fresh,
        [cells, per_stream, 1, streams],
        &[q, keys, weights, indexer.mask],
    );
    let kept = [shape.indexer_top_k.min(cells), per_stream, 1, streams];
    let best = b.graph.op(Reuse::Fresh, Element::I32, kept, &[scores]);
    b.graph.op(Reuse::Fresh, Element::I32, kept, &[best])
}

/// The output rows of the streams and their norm, where the output's own weights meet them.
struct Arrived {
    normed: TensorId,
    /// Each stream's rows (views of the rows, or each a copy of such a view).
    streams: Vec<TensorId>,
}

impl Arrived {
    /// What a device holding only the output receives from the device before: the norm, then
    /// each stream's view of the output rows, copied apart (as wide as the view spans).
    fn of(b: &mut Builder, count: u64, output_rows: TensorId) -> Arrived {
        let n_embd = b.n_embd;
        let outputs = b.graph.extents(output_rows)[0];
        let normed = b.input(Element::F32, [n_embd * count, outputs, 1, 1]);
        let row = 4 * n_embd * count;
        let ne = [n_embd, outputs, 1, 1];
        let nb = [4, row, row * outputs, row * outputs];
        let streams = (0..count)
            .map(|_| b.graph.input_laid_out(Element::F32, ne, nb))
            .collect();
        Arrived { normed, streams }
    }
}

/// The output rows of the streams, `[n_embd × streams, outputs]`.
fn output_rows(b: &mut Builder, inputs: &Inputs, streams: TensorId) -> TensorId {
    let [n_embd, count, tokens, _] = b.graph.extents(streams);
    let outputs = b.graph.extents(inputs.output_rows)[0];
    let flat = b.graph.reshape(streams, [n_embd * count, tokens, 1, 1]);
    b.op(
        Reuse::Fresh,
        [n_embd * count, outputs, 1, 1],
        &[flat, inputs.output_rows],
    )
}

/// The output (`build_hc_head`): the output rows of the streams, their norm, [`head`].
fn output(b: &mut Builder, shape: &Shape, inputs: &Inputs, streams: TensorId) {
    let n_embd = b.n_embd;
    let picked = output_rows(b, inputs, streams);
    let [width, outputs, ..] = b.graph.extents(picked);
    let normed = b.op(Reuse::InPlace, [width, outputs, 1, 1], &[picked]);
    let row = b.graph.strides(picked)[1];
    let streams = (0..shape.streams)
        .map(|_| {
            b.graph
                .view(picked, [n_embd, outputs, 1, 1], [4, row, row, row])
        })
        .collect();
    head(b, shape, Arrived { normed, streams });
}

/// The streams' output rows mixed into one by their sigmoid coefficients from the `normed`
/// rows (stream by stream: the fused mix is for the layers only), the final norm, the logits.
fn head(b: &mut Builder, shape: &Shape, arrived: Arrived) {
    let Arrived { normed, streams } = arrived;
    let count = shape.streams;
    let mixes = b.matmul(count, normed);
    let scale = b.weight([1, 1, 1, 1]);
    let base = b.weight([count, 1, 1, 1]);
    let scaled = b.elementwise(mixes, &[scale]);
    let shifted = b.elementwise(scaled, &[base]);
    let squashed = b.elementwise(shifted, &[]);
    let pre = b.elementwise(squashed, &[]);
    let [_, outputs, ..] = b.graph.extents(pre);
    let weight_row = b.graph.strides(pre)[1];
    let mut mixed = None;
    for x in streams {
        let w = b.graph.view(
            pre,
            [1, outputs, 1, 1],
            [4, weight_row, weight_row, weight_row],
        );
        let weighted = b.elementwise(x, &[w]);
        mixed = Some(match mixed {
            Some(sum) => b.elementwise(sum, &[weighted]),
            None => weighted,
        });
    }
    let normed = b.rms_norm(mixed.unwrap_or(pre));
    b.logits(normed);
}
