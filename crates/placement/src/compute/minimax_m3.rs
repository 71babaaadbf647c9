//! The graph llama.cpp reserves for `minimax-m3` (`src/models/minimax-m3.cpp`): MiniMax-M2's
//! attention with per-head norms on the leading dense layers, and on the others MiniMax Sparse
//! Attention: an indexer (one head per KV head) scores blocks of the cache, the best blocks and
//! the local ones become a mask over every cache cell, per token and indexer head, and flash
//! attention runs over the whole cache under it; routed experts (sigmoid gating over a selection
//! bias, the weights scaled) beside a shared expert. Without flash attention (or with one cache
//! for several sequences) every layer attends densely. Reserved with an empty cache, the
//! position axis the indexer scores is one padding of 256 positions.

use std::collections::VecDeque;

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{layer_heads, replay, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::{self, ContextGeometry};
use crate::layers::LayerDevices;
use crate::model::{ExpertShape, ModelShape};
use crate::options::{DeviceId, PlacementOptions};

/// The positions the indexer scores in the reserved graph: `get_n_pos` of an empty cache.
const RESERVED_POSITIONS: u64 = 256;

/// What the sparse attention reads of the model: the indexer's heads and width, its block
/// size and the blocks it keeps; the shared expert's width.
#[derive(Clone, Copy)]
struct Sparse {
    heads: u64,
    width: u64,
    block: u64,
    top_k: u64,
    shared_width: u64,
}

/// The sparse attention's shape and the model's experts, or `None` for a header this graph
/// does not read.
fn sparse(model: &ModelShape) -> Option<(Sparse, ExpertShape)> {
    let attention = &model.attention;
    let experts = model.experts?;
    let plain = model.architecture == "minimax-m3"
        && attention.recurrent.is_none()
        && !attention.mla
        && attention.sliding_window.is_none()
        && attention.key_length == attention.value_length;
    let width = attention.indexer_key_length.iter().copied().max()?;
    let heads = u64::from(attention.indexer_heads);
    let per_kv_head = (attention.head_count_kv.iter()).all(|&kv| u64::from(kv) == heads);
    let block = u64::from(attention.indexer_block_size);
    let n_embd = u64::from(model.n_embd).max(1);
    let shared_width = model
        .tensors
        .iter()
        .find(|t| t.name.ends_with(".ffn_up_shexp.weight"))
        .map_or(0, |t| t.elements / n_embd);
    let sane = width > 0 && heads > 0 && per_kv_head && block > 0 && shared_width > 0;
    (plain && sane).then_some((
        Sparse {
            heads,
            width: u64::from(width),
            block,
            top_k: u64::from(attention.indexer_top_k),
            shared_width,
        },
        experts,
    ))
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    sparse(model).is_some()
}

/// The compute buffer of `device` for a MiniMax-M3 model, or `None` for another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let (shape, experts) = sparse(model)?;
    // `streams_ok`: one sequence, or a cache per sequence.
    let enabled = options.flash_attention && (options.parallel <= 1 || !options.kv_unified);
    let router = Router {
        selection_bias: true,
        scaled: experts.weights_scaled,
        ..Router::of(&experts, true)
    };
    let host_inputs = match enabled {
        true => HostInputs::BlockSparse {
            positions: RESERVED_POSITIONS,
            blocks: RESERVED_POSITIONS / shape.block,
        },
        false => HostInputs::Decoder,
    };
    let expert_ff = experts.width(model.n_ff);
    replay(
        model,
        device,
        layers,
        g,
        options,
        (host_inputs, scheduler),
        |mut builder, held, holds_output| {
            // The graph meets the sparse attention's inputs before the output rows.
            let selects_rows = held
                .last()
                .is_some_and(|&il| il + 1 == model.n_layer as usize);
            let mut cur = builder.inputs(model, held, 1, false, options, g);
            let indexed = |il: usize| model.attention.has_indexer(il);
            let sparse_held = held.iter().filter(|&&il| indexed(il)).count();
            // The f32 mask is made with the first sparse layer; a later device receives it.
            let first_sparse = (0..model.n_layer as usize).find(|&il| indexed(il));
            let receives_mask = first_sparse.is_some_and(|first| !held.contains(&first));
            let mut inputs = (enabled && sparse_held > 0).then(|| {
                let layers = (shape, sparse_held, receives_mask);
                SparseInputs::new(&mut builder, model, layers, options, g)
            });
            if selects_rows {
                let outputs = builder.batch.outputs;
                builder.output_rows = Some(builder.input(Element::I32, [outputs, 1, 1, 1]));
            }
            for &il in held {
                builder.begin_layer(il);
                let layer = Layer {
                    il,
                    shape,
                    router,
                    expert_ff,
                };
                cur = layer.build(&mut builder, model, cur, inputs.as_mut(), options, g);
            }
            builder.finish(cur, holds_output, |b, x| {
                let normed = b.rms_norm(x);
                b.logits(normed);
            })
        },
    )
}

/// The sparse attention's graph inputs, as each sparse layer reads them per sequence, and the
/// f32 copy of the cache's mask those layers share (made where first read).
struct SparseInputs {
    /// Per sparse layer and sequence, in the order read: position to cell `[positions]`,
    /// visibility by position `[positions, 1, tokens]`, the local blocks forced first
    /// `[blocks, 1, tokens]`, cell to block `[cells]`. Views of the host's inputs; on a device,
    /// a copy of each view received apart.
    views: VecDeque<[TensorId; 4]>,
    /// The indexer cache's rows for this batch.
    indexer_rows: TensorId,
    /// The f32 copy of the cache's mask: made here from it (on the device of the first sparse
    /// layer), or each layer's and sequence's view of it received apart (on a later one).
    mask_f32: Option<TensorId>,
    received_masks: VecDeque<TensorId>,
    cells: u64,
}

impl SparseInputs {
    /// The inputs of `layers` sparse layers, in the order the first reads them, with the f32
    /// mask's views received when `receives_mask` (the cache's own mask is then not read here).
    fn new(
        b: &mut Builder,
        model: &ModelShape,
        (shape, layers, receives_mask): (Sparse, usize, bool),
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> SparseInputs {
        let (tokens, streams) = (b.batch.tokens, b.batch.streams);
        let per_stream = tokens / streams;
        let cells = kv::cells(&model.attention, 0, options, g);
        let blocks = RESERVED_POSITIONS / shape.block;
        let indexer_rows = b.input(Element::I64, [tokens, 1, 1, 1]);
        let shapes = [
            (Element::I32, [RESERVED_POSITIONS, 1, 1, 1]),
            (Element::F32, [RESERVED_POSITIONS, 1, per_stream, 1]),
            (Element::F32, [blocks, 1, per_stream, 1]),
            (Element::I32, [cells, 1, 1, 1]),
        ];
        let reads = layers * streams as usize;
        let views = if b.is_host() {
            let whole = [
                (Element::I32, [RESERVED_POSITIONS, streams, 1, 1]),
                (Element::F32, [RESERVED_POSITIONS, tokens, 1, 1]),
                (Element::F32, [blocks, tokens, 1, 1]),
                (Element::I32, [cells, streams, 1, 1]),
            ]
            .map(|(element, ne)| b.input(element, ne));
            let view = |b: &mut Builder, i: usize| {
                let nb = b.graph.strides(whole[i]);
                b.graph.view(whole[i], shapes[i].1, nb)
            };
            (0..reads)
                .map(|_| [0, 1, 2, 3].map(|i| view(b, i)))
                .collect()
        } else {
            VecDeque::new()
        };
        // On a device each layer's and sequence's views arrive apart, in the order read: the
        // four, then (made on an earlier device) the f32 mask's.
        let mut views = views;
        let mut received_masks = VecDeque::new();
        for _ in 0..reads {
            if b.is_host() {
                break;
            }
            views.push_back(shapes.map(|(element, ne)| b.input(element, ne)));
            if receives_mask {
                received_masks.push_back(b.input(Element::F32, [cells, per_stream, 1, 1]));
            }
        }
        SparseInputs {
            views,
            indexer_rows,
            mask_f32: None,
            received_masks,
            cells,
        }
    }
}

/// One layer being built.
struct Layer {
    il: usize,
    shape: Sparse,
    router: Router,
    expert_ff: u64,
}

impl Layer {
    /// Norm, the attention (sparse on the layers with an indexer when enabled), the output
    /// projection, the residual; norm, a dense feed-forward (leading layers) or the routed
    /// experts and the shared one, the residual.
    fn build(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        input: TensorId,
        sparse: Option<&mut SparseInputs>,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let normed = b.rms_norm(input);
        let indexed = model.attention.has_indexer(self.il);
        let attended = match b.attention_elsewhere(normed, None) {
            Some(elsewhere) => elsewhere,
            None => match sparse.filter(|_| indexed) {
                Some(inputs) => self.sparse_attention(b, model, normed, inputs, options, g),
                None => self.attention(b, model, normed, options, g),
            },
        };
        let n_embd = b.n_embd;
        let mut mixed = b.matmul(n_embd, attended);
        let mut residual = input;
        if let (true, Some(rows)) = (self.il + 1 == model.n_layer as usize, b.output_rows) {
            let outputs = b.batch.outputs;
            mixed = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[mixed, rows]);
            residual = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[residual, rows]);
        }
        let feed_forward_input = b.elementwise(mixed, &[residual]);
        let normed = b.rms_norm(feed_forward_input);
        let feed_forward = if indexed {
            let routed = b.routed_experts(self.router, self.expert_ff, false, normed);
            let shared = b.dense_feed_forward(self.shape.shared_width, normed);
            b.elementwise(routed, &[shared])
        } else {
            b.dense_feed_forward(u64::from(model.n_ff), normed)
        };
        b.elementwise(feed_forward, &[feed_forward_input])
    }

    /// Q, K and V, each normed per head, Q and K roped.
    fn projections(&self, b: &mut Builder, model: &ModelShape, normed: TensorId) -> [TensorId; 3] {
        let tokens = b.batch.tokens;
        let (head, heads, kv_heads) = layer_heads(model, self.il);
        let project = |b: &mut Builder, count: u64, roped: bool| {
            let x = b.matmul(head * count, normed);
            let x = b.graph.reshape(x, [head, count, tokens, 1]);
            if roped {
                let x = b.rms_norm(x);
                b.rope(x)
            } else {
                x
            }
        };
        let q = project(b, heads, true);
        let k = project(b, kv_heads, true);
        let v = project(b, kv_heads, false);
        [q, k, v]
    }

    /// Dense attention over the cache ([`Builder::attend`]).
    fn attention(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        normed: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let qkv = self.projections(b, model, normed);
        b.attend(model, self.il, qkv, options, g)
    }

    /// MiniMax Sparse Attention over `normed`: the indexer's K written to its cache, Q, K and
    /// V (K and V written to theirs), then per sequence the block scores, the kept blocks'
    /// mask over every cell, and flash attention under it.
    fn sparse_attention(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        normed: TensorId,
        inputs: &mut SparseInputs,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let Sparse { heads, width, .. } = self.shape;
        let tokens = b.batch.tokens;
        let key = b.matmul(width, normed);
        let key = b.graph.reshape(key, [width, 1, tokens, 1]);
        let key = b.rms_norm(key);
        let key = b.rope(key);
        let flat = b.graph.reshape(key, [width, tokens, 1, 1]);
        let cache = b.graph.external(Element::F16, [width, inputs.cells, 1, 1]);
        let written = b.graph.write_rows(cache, flat, inputs.indexer_rows);
        b.graph.expand(written);
        let qkv = self.projections(b, model, normed);
        let Some((q, mask, value_rotation)) = b.write_layer_cache(model, self.il, qkv, options, g)
        else {
            return qkv[0];
        };
        let query = b.matmul(heads * width, normed);
        let query = b.graph.reshape(query, [width, heads, tokens, 1]);
        let query = b.rms_norm(query);
        let query = b.rope(query);
        // One sequence after another, joined along the tokens (`ggml_concat`).
        let streams = b.batch.streams;
        let per_stream = tokens / streams.max(1);
        let mut out: Option<TensorId> = None;
        for joined in 1..=streams {
            let next = self.stream(b, model, [q, query, mask], inputs);
            out = Some(match out {
                None => next,
                Some(before) => {
                    let width = b.graph.extents(next)[0];
                    let ne = [width, per_stream * joined, 1, 1];
                    b.op(Reuse::Fresh, ne, &[before, next])
                }
            });
        }
        let out = out.unwrap_or(q);
        b.rotate(out, value_rotation)
    }

    /// One sequence's sparse attention (`[head × heads, tokens of the sequence]` out): the
    /// blocks its tokens keep, their mask over every cell, flash attention under it.
    fn stream(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        [q, query, mask]: [TensorId; 3],
        inputs: &mut SparseInputs,
    ) -> TensorId {
        let Some([by_position, visible, bias, cell_blocks]) = inputs.views.pop_front() else {
            return q;
        };
        let blocks = RESERVED_POSITIONS / self.shape.block;
        let one = StreamShape {
            heads: self.shape.heads,
            blocks,
            kept: self.shape.top_k.min(blocks),
            tokens: b.batch.tokens / b.batch.streams,
            cells: inputs.cells,
        };
        let best = self.kept_blocks(b, one, query, [by_position, visible, bias]);
        let causal = match inputs.received_masks.pop_front() {
            Some(received) => received,
            None => *inputs.mask_f32.get_or_insert_with(|| {
                let ne = [one.cells, one.tokens, 1, b.batch.streams];
                b.graph.op(Reuse::Fresh, Element::F32, ne, &[mask])
            }),
        };
        let mask = cell_mask(b, one, [best, bias, cell_blocks, causal]);
        self.flash_attention(b, model, one, q, mask)
    }

    /// The indexer's best blocks for each token and indexer head (`[kept, heads, tokens]`,
    /// i32): its keys gathered by position times its queries, masked by visibility, the
    /// maximum of each block, the local blocks' bias added, the top ones.
    fn kept_blocks(
        &self,
        b: &mut Builder,
        one: StreamShape,
        query: TensorId,
        [by_position, visible, bias]: [TensorId; 3],
    ) -> TensorId {
        let (width, positions) = (self.shape.width, RESERVED_POSITIONS);
        let keys = b.graph.external(Element::F16, [width, one.cells, 1, 1]);
        let ne = [width, positions, 1, 1];
        let keys = b
            .graph
            .op(Reuse::Fresh, Element::F32, ne, &[keys, by_position]);
        let queries = view_of(b, query, [width, one.heads, one.tokens, 1]);
        let rows = one.heads * one.tokens;
        let queries = b.graph.reshape(queries, [width, rows, 1, 1]);
        let scores = b.op(Reuse::Fresh, [positions, rows, 1, 1], &[keys, queries]);
        let scores = (b.graph).reshape(scores, [positions, one.heads, one.tokens, 1]);
        let scores = b.graph.in_place(scores, &[visible]);
        let ne = [one.blocks, one.heads, one.tokens, 1];
        let block_scores = b.op(Reuse::Fresh, ne, &[scores]);
        let block_scores = b.elementwise(block_scores, &[bias]);
        let ne = [one.kept, one.heads, one.tokens, 1];
        b.graph.op(Reuse::Fresh, Element::I32, ne, &[block_scores])
    }

    /// Each KV head's group of queries attending over the whole cache under `mask`.
    fn flash_attention(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        one: StreamShape,
        q: TensorId,
        mask: TensorId,
    ) -> TensorId {
        let (head, heads, kv_heads) = layer_heads(model, self.il);
        let groups = heads / kv_heads.max(1);
        let q = view_of(b, q, [head, heads, one.tokens, 1]);
        let q = b.graph.reshape(q, [head, groups, kv_heads, one.tokens]);
        let q = b.graph.permute(q, [0, 2, 3, 1]);
        let [keys, values] = [0, 1].map(|_| {
            let cache = b
                .graph
                .external(Element::F16, [head, kv_heads, one.cells, 1]);
            b.graph.permute(cache, [0, 3, 1, 2])
        });
        let ne = [head, groups, one.tokens, kv_heads];
        let out = b.op(Reuse::Fresh, ne, &[q, keys, values, mask]);
        let out = b.graph.permute(out, [0, 1, 3, 2]);
        let out = b.op(Reuse::Fresh, [head, groups, kv_heads, one.tokens], &[out]);
        b.graph.reshape(out, [head * heads, one.tokens, 1, 1])
    }
}

/// One sequence's sizes in the sparse attention: indexer heads, the blocks scored and kept,
/// its tokens, the cache's cells.
#[derive(Clone, Copy)]
struct StreamShape {
    heads: u64,
    blocks: u64,
    kept: u64,
    tokens: u64,
    cells: u64,
}

/// A view of `of` with extents `ne` and its strides (a sequence's part of it).
fn view_of(b: &mut Builder, of: TensorId, ne: [u64; 4]) -> TensorId {
    let nb = b.graph.strides(of);
    b.graph.view(of, ne, nb)
}

/// The attention mask of one sequence (`[cells, tokens, 1, heads]`, f16): -inf at every
/// block, 0 at the `best` ones (set over a -inf fill of the bias's shape), spread over the
/// cells by each cell's block, the `causal` f32 mask added.
fn cell_mask(
    b: &mut Builder,
    one: StreamShape,
    [best, bias, cell_blocks, causal]: [TensorId; 4],
) -> TensorId {
    let StreamShape {
        heads,
        blocks,
        kept,
        tokens,
        cells,
    } = one;
    let zero = b.graph.op(
        Reuse::Fresh,
        Element::F32,
        [kept, heads, tokens, 1],
        &[best],
    );
    let zero = b.elementwise(zero, &[]);
    let minus = b.op(Reuse::Fresh, [blocks, 1, tokens, 1], &[bias]);
    let minus = (b.graph).op(Reuse::Fresh, Element::F16, [blocks, 1, tokens, 1], &[minus]);
    let ne = [blocks, heads, tokens, 1];
    let filled = b.graph.op(Reuse::Fresh, Element::F16, ne, &[minus]);
    let rows = heads * tokens;
    let filled = b.graph.reshape(filled, [1, blocks, rows, 1]);
    let zero = b.graph.reshape(zero, [1, kept, rows, 1]);
    let best = b.graph.reshape(best, [kept, rows, 1, 1]);
    let by_block = b.graph.write_rows(filled, zero, best);
    let by_block = b.graph.reshape(by_block, [blocks, heads, tokens, 1]);
    let by_block = b.graph.permute(by_block, [0, 2, 1, 3]);
    let ne = [blocks, tokens, heads, 1];
    let by_block = b.graph.op(Reuse::Fresh, Element::F16, ne, &[by_block]);
    let flat = b.graph.reshape(by_block, [blocks, rows, 1, 1]);
    let flat = b.graph.permute(flat, [1, 0, 2, 3]);
    let flat = b
        .graph
        .op(Reuse::Fresh, Element::F16, [rows, blocks, 1, 1], &[flat]);
    let by_cell = b.op(Reuse::Fresh, [rows, cells, 1, 1], &[flat, cell_blocks]);
    let by_cell = b.graph.permute(by_cell, [1, 0, 2, 3]);
    let by_cell = b.op(Reuse::Fresh, [cells, rows, 1, 1], &[by_cell]);
    let by_cell = b.graph.reshape(by_cell, [cells, tokens, heads, 1]);
    let causal = view_of(b, causal, [cells, tokens, 1, 1]);
    let combined = b.graph.in_place(by_cell, &[causal]);
    let combined = b.graph.reshape(combined, [cells, tokens, 1, heads]);
    b.graph.op(
        Reuse::Fresh,
        Element::F16,
        [cells, tokens, 1, heads],
        &[combined],
    )
}

#[cfg(test)]
mod tests {
    use crate::model::{ModelTensor, TensorRole};
    use crate::plan::plan;
    use crate::testing::{gpus, moe_model, GIB};
    use crate::{DeviceId, PlacementOptions};

    #[test]
    fn a_hostile_indexer_header_plans_as_too_big() {
        // A MiniMax-M3 header whose indexer claims 4 G-wide keys: replayed with sizes that
        // stay in range (no overflow, no panic), it needs more than any GPU has.
        let mut model = moe_model(4, 1, 100 << 20, 300 << 20);
        model.architecture = "minimax-m3".into();
        let attention = &mut model.attention;
        attention.mla = false;
        (attention.key_length, attention.value_length) = (128, 128);
        attention.head_count_kv = vec![8; 4];
        attention.indexer_heads = 8;
        attention.indexer_block_size = 64;
        attention.indexer_top_k = 16;
        attention.indexer_key_length = vec![0, u32::MAX, u32::MAX, u32::MAX];
        model.tensors.push(ModelTensor {
            name: "blk.1.ffn_up_shexp.weight".into(),
            bytes: 1 << 20,
            layer: Some(1),
            role: TensorRole::SharedExperts,
            elements: 6144 * 1536,
            row_length: 6144,
            quantized: false,
        });
        assert!(super::replays(&model), "the header reads as MiniMax-M3's");
        let plan = plan(&model, &gpus(1, 24 * GIB), &PlacementOptions::default()).expect("a plan");
        let gpu = &plan.device(DeviceId::Gpu(0)).expect("the GPU").usage;
        assert!(gpu.compute_estimate_bytes > 24 * GIB, "{gpu:?}");
        assert!(!plan.fits());
    }
}
