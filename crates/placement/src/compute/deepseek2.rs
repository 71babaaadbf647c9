//! The graph llama.cpp reserves for `deepseek2` with MLA (`src/models/deepseek2.cpp`: DeepSeek
//! V2/V3 and the files converted like them, whose header gives `key_length_mla` and
//! `value_length_mla`): queries through a low-rank projection (or one projection in the lite
//! models), the compressed KV and its roped key cached together, the queries absorbed into the
//! latent space, attention over the K-only cache ([`Builder::attend_latent`]), the leading
//! dense layers and then routed experts beside shared ones, tensor by tensor. `glm-dsa`
//! (GLM-5.x, `src/models/glm-dsa.cpp`) builds the same layers with a DSA indexer ([`Indexer`])
//! choosing the keys each token attends to.

use super::allocator::{Reuse, TensorId};
use super::builder::{replay, Builder, HostInputs, IndexerInputs, Router};
use super::dsa::Indexer;
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions};

/// The widths of one MLA layer, from the header (`key_length` = latent + rope, `value_length` =
/// latent, the `*_length_mla` per-head widths) and the tensors (the Q projection's rank, which
/// layers route experts and whether the router has a selection bias).
struct Latent {
    /// `kv_lora_rank`: the compressed KV (with MLA, V's width in the cache).
    rank: u64,
    /// The roped part of each key (`n_rot`).
    rope: u64,
    /// The unroped part of each query head.
    nope: u64,
    /// Each head's decompressed value (`value_length_mla`, or `value_length` without MLA).
    value: u64,
    /// MLA's absorbed attention over the latent cache; `false` for a file without
    /// `key_length_mla`, whose heads are decompressed before a full K and V cache.
    absorbed: bool,
    /// `q_lora_rank`, 0 when one projection makes the queries.
    query_rank: u64,
    /// Per layer: routed experts (else a dense feed-forward, the leading layers).
    routed: Vec<bool>,
    selection_bias: bool,
    /// `glm-dsa`'s indexer.
    indexer: Option<Indexer>,
}

impl Latent {
    /// `None` for a header this graph does not read: not `deepseek2` or `glm-dsa`, widths that
    /// do not add up, no experts, for `glm-dsa` no MLA, no Q projection's rank or an indexer
    /// [`Indexer::of`] does not build; without MLA (`deepseek2`'s older conversions), a rope
    /// width the header does not give or fewer KV heads than query heads.
    fn of(model: &ModelShape) -> Option<Latent> {
        let attention = &model.attention;
        let sparse = match model.architecture.as_str() {
            "deepseek2" => false,
            "glm-dsa" => true,
            _ => return None,
        };
        if (sparse && !attention.mla) || model.experts.is_none() {
            return None;
        }
        let n_layer = model.n_layer as usize;
        let mut routed = vec![false; n_layer];
        let mut query_rank = 0;
        let mut compressed_rank = 0;
        let mut selection_bias = false;
        for tensor in &model.tensors {
            let Some(il) = tensor.layer.map(|l| l as usize).filter(|&l| l < n_layer) else {
                continue;
            };
            let name = tensor.name.as_str();
            if name.ends_with(".ffn_gate_inp.weight") {
                routed[il] = true;
            } else if name.ends_with(".exp_probs_b.bias") {
                selection_bias = true;
            } else if name.ends_with(".attn_q_a_norm.weight") {
                // An F32 vector of q_lora_rank values (a header's width, so u32 at most).
                query_rank = tensor.bytes / 4;
            } else if name.ends_with(".attn_kv_a_norm.weight") {
                // An F32 vector of kv_lora_rank values.
                compressed_rank = tensor.bytes / 4;
            }
        }
        if query_rank > u64::from(u32::MAX) || (sparse && query_rank == 0) {
            return None;
        }
        let [rank, rope, nope, value] = if attention.mla {
            let rank = u64::from(attention.value_length);
            let rope = u64::from(attention.key_length).checked_sub(rank)?;
            let nope = u64::from(attention.mla_key_length).checked_sub(rope)?;
            [rank, rope, nope, u64::from(attention.mla_value_length)]
        } else {
            let rope = u64::from(model.rope_dimensions);
            let nope = u64::from(attention.key_length).checked_sub(rope)?;
            let full_heads = attention.head_count_kv == attention.head_count;
            let rank = compressed_rank.min(u64::from(u32::MAX));
            if !full_heads {
                return None;
            }
            [rank, rope, nope, u64::from(attention.value_length)]
        };
        if [rank, rope, nope, value].contains(&0) {
            return None;
        }
        let indexer = if sparse {
            Some(Indexer::of(model, rope)?)
        } else {
            None
        };
        Some(Latent {
            rank,
            rope,
            nope,
            value,
            absorbed: attention.mla,
            query_rank,
            routed,
            selection_bias,
            indexer,
        })
    }
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    Latent::of(model).is_some()
}

/// The compute buffer of `device` for a `deepseek2` or `glm-dsa` model, or `None` for another
/// model.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let latent = Latent::of(model)?;
    let host_inputs = match &latent.indexer {
        Some(indexer) => HostInputs::Sparse {
            width: indexer.width(),
        },
        None => HostInputs::Decoder,
    };
    replay(
        model,
        device,
        layers,
        g,
        options,
        (host_inputs, scheduler),
        |mut builder, held, holds_output| {
            let (mut cur, mut sparse) = match &latent.indexer {
                Some(indexer) => {
                    let (cur, inputs) =
                        builder.sparse_inputs(model, held, indexer.width(), options, g);
                    let sparse = Sparse {
                        indexer,
                        inputs,
                        selected: None,
                    };
                    (cur, Some(sparse))
                }
                None => (builder.decoder_inputs(model, held, options, g), None),
            };
            for &il in held {
                builder.begin_layer(il);
                let context = LayerContext {
                    model,
                    latent: &latent,
                    options,
                    g,
                };
                cur = layer(&mut builder, context, il, cur, sparse.as_mut());
            }
            builder.finish(cur, holds_output, |b, x| {
                let normed = b.rms_norm(x);
                b.logits(normed);
            })
        },
    )
}

/// What every layer reads: the model, its widths and the options it is planned with.
#[derive(Clone, Copy)]
struct LayerContext<'a> {
    model: &'a ModelShape,
    latent: &'a Latent,
    options: &'a PlacementOptions,
    g: &'a ContextGeometry,
}

/// `glm-dsa`'s indexer, its inputs and the last full layer's selection.
struct Sparse<'a> {
    indexer: &'a Indexer,
    inputs: IndexerInputs,
    selected: Option<TensorId>,
}

/// One layer: norm, the absorbed MLA attention (over the keys `sparse`'s indexer selects), on the last layer only the output rows, the
/// residual, norm, the dense feed-forward or the routed and shared experts, the residual.
fn layer(
    b: &mut Builder,
    context: LayerContext,
    il: usize,
    input: TensorId,
    sparse: Option<&mut Sparse>,
) -> TensorId {
    let LayerContext { model, latent, .. } = context;
    let mixed = attention(b, context, il, input, sparse);
    let n_embd = b.n_embd;
    let (mut mixed, mut residual) = (mixed, input);
    if let (true, Some(rows)) = (il + 1 == model.n_layer as usize, b.output_rows) {
        let outputs = b.batch.outputs;
        mixed = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[mixed, rows]);
        residual = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[residual, rows]);
    }
    let feed_forward_input = b.elementwise(mixed, &[residual]);
    let normed = b.rms_norm(feed_forward_input);
    let feed_forward = match model.experts {
        Some(experts) if latent.routed.get(il).copied().unwrap_or(false) => {
            let width = u64::from(experts.feed_forward_length.max(1));
            let router = Router {
                selection_bias: latent.selection_bias,
                scaled: experts.weights_scaled,
                ..Router::of(&experts, experts.weights_norm)
            };
            let routed = b.routed_experts(router, width, false, normed);
            let shared = width * u64::from(experts.shared);
            if shared == 0 {
                routed
            } else {
                let shared = b.dense_feed_forward(shared, normed);
                b.elementwise(routed, &[shared])
            }
        }
        _ => b.dense_feed_forward(u64::from(model.n_ff), normed),
    };
    b.elementwise(feed_forward, &[feed_forward_input])
}

/// The attention of `deepseek2.cpp`'s MLA branch, up to the output projection.
fn attention(
    b: &mut Builder,
    context: LayerContext,
    il: usize,
    input: TensorId,
    sparse: Option<&mut Sparse>,
) -> TensorId {
    let LayerContext { model, latent, .. } = context;
    let tokens = b.batch.tokens;
    let heads = u64::from(model.attention.head_count.get(il).copied().unwrap_or(0));
    let Latent {
        rank, rope, nope, ..
    } = *latent;
    let head = nope + rope;
    let normed = b.rms_norm(input);
    let indexer = sparse.as_ref().map(|s| s.inputs);
    if let Some(elsewhere) = b.attention_elsewhere(normed, indexer) {
        // A selection made there reaches a later layer here as a copy.
        if let Some(sparse) = sparse.filter(|s| s.indexer.selects(il)) {
            sparse.selected = None;
        }
        return elsewhere;
    }
    let queries = if latent.query_rank > 0 {
        let compressed = b.matmul(latent.query_rank, normed);
        b.rms_norm(compressed)
    } else {
        normed
    };
    let sparse_mask = sparse.and_then(|sparse| {
        let selected =
            sparse
                .indexer
                .select(b, sparse.inputs, il, [normed, queries], sparse.selected);
        sparse.selected = Some(selected);
        b.sparse_mask(selected)
    });
    let q = b.matmul(heads * head, queries);
    let q = b.graph.reshape(q, [head, heads, tokens, 1]);
    let kv = b.matmul(rank + rope, normed);
    let row = 4 * (rank + rope);
    let kv_strides = [4, row, row * tokens, row * tokens];
    let compressed = b.graph.view(kv, [rank, tokens, 1, 1], kv_strides);
    let key_rope = b
        .graph
        .view(kv, [rope, 1, tokens, 1], [4, row, row, row * tokens]);
    let key_rope = b.rope(key_rope);
    let compressed = b.rms_norm(compressed);
    if !latent.absorbed {
        let attended = decompressed(b, context, il, [q, key_rope, compressed]);
        let n_embd = b.n_embd;
        return b.matmul(n_embd, attended);
    }
    let q_strides = b.graph.strides(q);
    let q_nope = b.graph.view(q, [nope, heads, tokens, 1], q_strides);
    let q_rope = b.graph.view(q, [rope, heads, tokens, 1], q_strides);
    let q_rope = b.rope(q_rope);
    let q_nope = b.graph.permute(q_nope, [0, 2, 1, 3]);
    let absorb = b.weight([nope, rank, heads, 1]);
    let absorbed = b.op(Reuse::Fresh, [rank, tokens, heads, 1], &[absorb, q_nope]);
    let absorbed = b.graph.permute(absorbed, [0, 2, 1, 3]);
    let q = b.op(
        Reuse::Fresh,
        [rank + rope, heads, tokens, 1],
        &[absorbed, q_rope],
    );
    let v = b.graph.reshape(compressed, [rank, 1, tokens, 1]);
    let k = b.op(Reuse::Fresh, [rank + rope, 1, tokens, 1], &[v, key_rope]);
    let attended = b.attend_latent([q, k, v], latent.value, sparse_mask);
    let n_embd = b.n_embd;
    b.matmul(n_embd, attended)
}

/// The attention of `deepseek2.cpp` without MLA (files without `key_length_mla`): the
/// compressed KV decompressed for every head by `attn_kv_b` (each head's unroped key beside its
/// value), V made contiguous, the queries roped whole, each key the head's unroped part beside
/// the roped `key_rope` repeated to every head, then [`Builder::attend`] over a full K and V cache.
fn decompressed(
    b: &mut Builder,
    context: LayerContext,
    il: usize,
    [q, key_rope, compressed]: [TensorId; 3],
) -> TensorId {
    let LayerContext {
        model,
        latent,
        options,
        g,
    } = context;
    let tokens = b.batch.tokens;
    let [_, heads, ..] = b.graph.extents(q);
    let Latent {
        rope, nope, value, ..
    } = *latent;
    let kv = b.matmul(heads * (nope + value), compressed);
    let row = 4 * (nope + value);
    let strides = [4, row, row * heads, row * heads * tokens];
    let key_nope = b.graph.view(kv, [nope, heads, tokens, 1], strides);
    let v = b.graph.view(kv, [value, heads, tokens, 1], strides);
    let v = b.op(Reuse::Fresh, [value, heads, tokens, 1], &[v]);
    let q = b.rope(q);
    let repeated = b.op(Reuse::Fresh, [rope, heads, tokens, 1], &[key_rope]);
    let k = b.op(
        Reuse::Fresh,
        [nope + rope, heads, tokens, 1],
        &[key_nope, repeated],
    );
    b.attend(model, il, [q, k, v], options, g)
}
