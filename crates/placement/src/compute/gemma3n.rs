//! The graph llama.cpp reserves for `gemma3n` (`src/models/gemma3n.cpp`). The residual stream
//! is four streams (AltUp): the scaled embeddings are stacked with three projections of
//! themselves matched to their magnitude; each layer predicts all four from a mix routed by the
//! active one, runs the active prediction through Gemma's attention (per-head norms, V
//! RMS-normed) beside a low-rank path (Laurel) and a feed-forward whose first ten layers keep
//! only activations above a Gaussian cutoff, then corrects the four by what the layer changed,
//! and adds the layer's own token embedding, gated by the corrected active stream, to the other
//! three. The last layers read the caches of earlier ones; the four streams are merged back
//! before the output.

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{batch_tokens, contiguous_strides, replay, Builder, GraphBackend, HostInputs};
use super::gemma_layers::{
    self, own_embedding, per_layer_inputs, per_layer_width, projected_per_layer,
};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions};

/// AltUp's streams (`llama_hparams::n_altup`: llama.cpp loads no other count).
const STREAMS: u64 = 4;

/// Laurel's rank (`llama_hparams::laurel_rank`).
const LAUREL_RANK: u64 = 64;

/// The layers whose feed-forward keeps only activations above the Gaussian cutoff
/// (`n_layer_sparsity`).
const SPARSE_LAYERS: usize = 10;

/// Whether [`compute_bytes`] builds `model`'s graph: a `gemma3n` header with each layer's own
/// embeddings, equal K and V heads and Q, K and V projected apart.
pub(super) fn replays(model: &ModelShape) -> bool {
    let attention = &model.attention;
    model.architecture == "gemma3n"
        && attention.recurrent.is_none()
        && !attention.mla
        && (0..model.n_layer as usize).all(|il| {
            let (k, v) = attention.head_lengths(il);
            k == v
        })
        && per_layer_width(model).is_some()
        && !model.tensors.iter().any(|t| t.name.contains(".attn_qkv."))
}

/// The compute buffer of `device` for a Gemma 3n model, or `None` for another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    if !replays(model) {
        return None;
    }
    let width = per_layer_width(model)?;
    let n_layer = u64::from(model.n_layer);
    let host_inputs = HostInputs::PerLayer {
        width,
        layers: n_layer,
    };
    let n_ff = u64::from(model.n_ff);
    // With op offload this device runs the host's layers, layer 0 and its stacking included.
    let runs_layer_zero = scheduler
        .offload
        .takes_host_layers(batch_tokens(g, options));
    let stacking = match layers.layers.first() {
        Some(&DeviceId::Cpu) if layers.output == device && !runs_layer_zero => {
            stacking_phase(model, device, (g, options), width)
        }
        _ => 0,
    };
    // Layer 0 and the output on two devices: the output's stacks the streams for the other.
    let layer_zero = layers.layers.first().copied().unwrap_or(DeviceId::Cpu);
    let apart = layer_zero != DeviceId::Cpu && layer_zero != layers.output;
    let graph = replay(
        model,
        device,
        layers,
        g,
        options,
        (host_inputs, scheduler),
        |mut builder, held, holds_output| {
            builder.residual_streams = STREAMS;
            if apart && holds_output && device != layer_zero {
                stack_for_another(&mut builder, width, n_layer);
            }
            let mut cur = builder.inputs(model, held, 1, holds_output, options, g);
            let mut embedded = None;
            let mut arrived = None;
            let mut active = None;
            if apart && held.first() == Some(&0) {
                // The output's device stacked the streams: they arrive, with their copy laid out
                // for the mix, the active one apart, and each layer's own embeddings looked up
                // and scaled; what arrived as the embeddings is them scaled there.
                let (n_embd, tokens) = (builder.n_embd, builder.batch.tokens);
                let scaled = cur;
                active = Some(builder.input(Element::F32, [n_embd, tokens, 1, 1]));
                arrived = Some(builder.input(Element::F32, [STREAMS, n_embd, tokens, 1]));
                cur = builder.input(Element::F32, [n_embd, tokens, STREAMS, 1]);
                let looked_up = builder.input(Element::F32, [width, n_layer, tokens, 1]);
                embedded = Some(projected_per_layer(&mut builder, width, looked_up, scaled));
            } else if held.first() == Some(&0) {
                let scaled = builder.elementwise(cur, &[]);
                embedded = Some(per_layer_inputs(&mut builder, width, n_layer, scaled));
                cur = stacked(&mut builder, scaled, holds_output);
            } else if builder.norm_arrives() {
                // After another device, which ran this layer's first copy of the streams and its
                // norm: the copy arrives too, placed where first read.
                let [n_embd, tokens, ..] = builder.graph.extents(cur);
                let laid_out = [STREAMS, n_embd, tokens, 1];
                arrived = Some(builder.graph.input(Element::F32, laid_out));
            }
            for &il in held {
                builder.begin_layer(il);
                let layer = Layer {
                    il,
                    n_ff,
                    embedded: (embedded, width),
                    arrived: arrived.take(),
                    active: active.take(),
                };
                cur = layer.build(&mut builder, model, cur, (options, g));
            }
            builder.finish(cur, holds_output, output)
        },
    )?;
    Some(graph.max(stacking))
}

/// On the output's device, where layer 0 is on another device: AltUp's stacking (it reads
/// `altup_proj`, which llama.cpp keeps with the output) from the embeddings and each layer's own
/// embeddings looked up on the host, both scaled, before this device's layers; what the other
/// device copies of it is freed when it has.
fn stack_for_another(b: &mut Builder, width: u64, n_layer: u64) {
    let stacking = Stacking::from_lookups(b, width, n_layer);
    b.graph.expand(stacking.looked_up);
    let Stacking {
        looked_up,
        scaled,
        streams,
        permuted,
    } = stacking;
    b.graph
        .read_elsewhere(&[streams, permuted, scaled, looked_up]);
}

/// What the output's device makes for another's layer 0 from the host's two lookups: each
/// layer's own embeddings scaled, the embeddings scaled, AltUp's streams stacked from them and
/// laid out for the mix.
struct Stacking {
    looked_up: TensorId,
    scaled: TensorId,
    streams: TensorId,
    permuted: TensorId,
}

impl Stacking {
    /// The two lookups copied in (each layer's own `width` wide, for `n_layer` layers; the
    /// embeddings), then the rest, none of it expanded.
    fn from_lookups(b: &mut Builder, width: u64, n_layer: u64) -> Stacking {
        let (n_embd, tokens) = (b.n_embd, b.batch.tokens);
        let looked_up = b.input(Element::F32, [width, n_layer, tokens, 1]);
        let looked_up = b.elementwise(looked_up, &[]);
        let embedded = b.input(Element::F32, [n_embd, tokens, 1, 1]);
        let scaled = b.elementwise(embedded, &[]);
        let streams = stacked(b, scaled, true);
        let permuted = laid_out_for_mix(b, streams);
        Stacking {
            looked_up,
            scaled,
            streams,
            permuted,
        }
    }
}

/// The output's device when layer 0 is on the host: before the layers, the scheduler runs
/// there what reads `altup_proj` and what its expansion adds around it (both embeddings
/// scaled, the streams stacked, layer 0's first copy and norm of them), from the host's two
/// lookups copied in; the host copies the results, which are freed before the device's layers
/// begin. Their high-water mark, a phase of its own.
fn stacking_phase(
    model: &ModelShape,
    device: DeviceId,
    (g, options): (&ContextGeometry, &PlacementOptions),
    width: u64,
) -> u64 {
    let mut b = Builder::new(model, g, options, 0, GraphBackend::of(device));
    let (n_embd, tokens) = (b.n_embd, b.batch.tokens);
    let Stacking {
        looked_up,
        scaled,
        streams,
        permuted,
    } = Stacking::from_lookups(&mut b, width, u64::from(model.n_layer));
    b.graph.mark_output(looked_up);
    let active = stream(&mut b, streams);
    let normed = b.op(Reuse::InPlace, [n_embd, tokens, 1, 1], &[active]);
    for handed in [scaled, streams, permuted, normed] {
        b.graph.mark_output(handed);
        b.graph.expand(handed);
    }
    b.reserve()
}

/// One layer being built.
struct Layer {
    il: usize,
    n_ff: u64,
    /// Every layer's own token embeddings (`[width, tokens, layers]`, `None` where made on
    /// another device) and their width.
    embedded: (Option<TensorId>, u64),
    /// The streams' copy laid out for the prediction's mix, made by the device before.
    arrived: Option<TensorId>,
    /// The active stream, copied apart from the streams by the device that stacked them.
    active: Option<TensorId>,
}

impl Layer {
    /// The four streams `input` predicted; the active prediction normed, its Laurel path, the
    /// attention, its norm, the prediction and the Laurel path added and scaled; the
    /// feed-forward, its norm and residual; the streams corrected, and the other three given
    /// the layer's own embedding gated by the active one.
    fn build(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        input: TensorId,
        (options, g): (&PlacementOptions, &ContextGeometry),
    ) -> TensorId {
        let predictions = predicted(b, input, (self.arrived, self.active));
        let active = stream(b, predictions);
        let normed = b.rms_norm(active);
        let laurel = laurel(b, normed);
        let attended = match b.attention_elsewhere(normed, None) {
            Some(elsewhere) => elsewhere,
            None => gemma_layers::attention(b, model, (self.il, true), normed, (options, g)),
        };
        let attended = b.rms_norm(attended);
        let gated = b.elementwise(attended, &[active]);
        let with_laurel = b.elementwise(gated, &[laurel]);
        let with_laurel = b.elementwise(with_laurel, &[]);
        let normed = b.rms_norm(with_laurel);
        let feed_forward = feed_forward(b, self.n_ff, self.il < SPARSE_LAYERS, normed);
        let feed_forward = b.rms_norm(feed_forward);
        let activated = b.elementwise(feed_forward, &[with_laurel]);
        let corrected = corrected(b, predictions, activated);
        let first = stream(b, corrected);
        let scale = b.weight([b.n_embd, 1, 1, 1]);
        let first = b.elementwise(first, &[scale]);
        let (embedded, width) = self.embedded;
        let embedding = own_embedding(b, first, embedded, width);
        let [n_embd, tokens, streams, _] = b.graph.extents(corrected);
        let head = stream(b, corrected);
        let rest = others(b, corrected);
        let rest = b.op(
            Reuse::InPlace,
            [n_embd, tokens, streams - 1, 1],
            &[rest, embedding],
        );
        b.op(Reuse::Fresh, [n_embd, tokens, streams, 1], &[head, rest])
    }
}

/// One stream of `streams` (`[n_embd, tokens, streams]`): a view (which one does not matter to
/// the allocator, which never places a view).
fn stream(b: &mut Builder, streams: TensorId) -> TensorId {
    let [n_embd, tokens, ..] = b.graph.extents(streams);
    let nb = b.graph.strides(streams);
    b.graph.view(
        streams,
        [n_embd, tokens, 1, 1],
        [nb[0], nb[1], nb[2], nb[2]],
    )
}

/// The streams of `streams` after the active one, `[n_embd, tokens, 3]`: a view, whose strides
/// are a contiguous tensor's (`ggml_view_3d`), so what adds to it may work in place on a copy.
fn others(b: &mut Builder, streams: TensorId) -> TensorId {
    let [n_embd, tokens, count, _] = b.graph.extents(streams);
    let ne = [n_embd, tokens, count - 1, 1];
    b.graph.view(streams, ne, contiguous_strides(ne))
}

/// `streams` (`[n_embd, tokens, 4]`) made contiguous as `[4, n_embd, tokens]`, the layout
/// `altup_predict` mixes them in.
fn laid_out_for_mix(b: &mut Builder, streams: TensorId) -> TensorId {
    let [n_embd, tokens, count, _] = b.graph.extents(streams);
    let permuted = b.graph.permute(streams, [1, 2, 0, 3]);
    b.op(Reuse::Fresh, [count, n_embd, tokens, 1], &[permuted])
}

/// `calc_magnitude`: the square root of each row's sum of squares.
fn magnitude(b: &mut Builder, x: TensorId) -> TensorId {
    let [_, rows, planes, _] = b.graph.extents(x);
    let squared = b.elementwise(x, &[]);
    let summed = b.op(Reuse::Fresh, [1, rows, planes, 1], &[squared]);
    b.elementwise(summed, &[])
}

/// The scaled embeddings `x` stacked with three projections of them, each matched to their
/// magnitude: `[n_embd, tokens, 4]`; the projection is another device's without `with_output`.
fn stacked(b: &mut Builder, x: TensorId, with_output: bool) -> TensorId {
    let [n_embd, tokens, ..] = b.graph.extents(x);
    let added = [n_embd, tokens, STREAMS - 1, 1];
    let target = magnitude(b, x);
    let repeated = b.op(Reuse::Fresh, added, &[x]);
    let projection = b.weight([n_embd, n_embd, STREAMS - 1, 1]);
    if !with_output {
        b.graph.used_elsewhere(projection);
    }
    let projected = b.op(Reuse::Fresh, added, &[projection, repeated]);
    let reached = magnitude(b, projected);
    let projected = b.elementwise(projected, &[target]);
    let projected = b.elementwise(projected, &[reached]);
    b.op(Reuse::Fresh, [n_embd, tokens, STREAMS, 1], &[x, projected])
}

/// `altup_compute_router_modalities`: `x` normed, scaled, routed to one weight per stream, tanh.
fn modalities(b: &mut Builder, x: TensorId) -> TensorId {
    let normed = b.rms_norm(x);
    let scaled = b.elementwise(normed, &[]);
    let routed = b.matmul(STREAMS, scaled);
    b.elementwise(routed, &[])
}

/// `altup_predict`: each stream of `x` predicted as a mix of all four (coefficients per token
/// from the active stream's modalities), plus itself; the streams laid out for the mix, and the
/// active one, are taken from `x` here unless they arrived.
fn predicted(
    b: &mut Builder,
    x: TensorId,
    (arrived, active): (Option<TensorId>, Option<TensorId>),
) -> TensorId {
    let [n_embd, tokens, streams, _] = b.graph.extents(x);
    let permuted = arrived.unwrap_or_else(|| laid_out_for_mix(b, x));
    let active = active.unwrap_or_else(|| stream(b, x));
    let modalities = modalities(b, active);
    let coefficients = b.matmul(streams * streams, modalities);
    let coefficients = b.graph.reshape(coefficients, [streams, streams, tokens, 1]);
    let mixed = b.op(
        Reuse::Fresh,
        [n_embd, streams, tokens, 1],
        &[permuted, coefficients],
    );
    let mixed = b.graph.permute(mixed, [0, 2, 1, 3]);
    let mixed = b.op(Reuse::Fresh, [n_embd, tokens, streams, 1], &[mixed]);
    b.elementwise(mixed, &[x])
}

/// `altup_correct`: what the layer changed in the active stream (`activated` less its
/// prediction), repeated over the streams, scaled per stream and token by coefficients from its
/// modalities, added to the `predictions`.
fn corrected(b: &mut Builder, predictions: TensorId, activated: TensorId) -> TensorId {
    let [n_embd, tokens, streams, _] = b.graph.extents(predictions);
    let modalities = modalities(b, activated);
    let active = stream(b, predictions);
    let innovation = b.elementwise(activated, &[active]);
    let coefficients = b.matmul(streams, modalities);
    let coefficients = b.elementwise(coefficients, &[]);
    let transposed = b.graph.permute(coefficients, [1, 0, 2, 3]);
    let coefficients = b.op(Reuse::Fresh, [1, tokens, streams, 1], &[transposed]);
    let repeated = b.op(Reuse::Fresh, [n_embd, tokens, streams, 1], &[innovation]);
    let scaled = b.elementwise(repeated, &[coefficients]);
    b.elementwise(scaled, &[predictions])
}

/// Laurel: `x` through a rank-64 projection and back, normed, plus `x`.
fn laurel(b: &mut Builder, x: TensorId) -> TensorId {
    let low = b.matmul(LAUREL_RANK, x);
    let back = b.matmul(b.n_embd, low);
    let back = b.rms_norm(back);
    b.elementwise(back, &[x])
}

/// GeGLU over `x`, `width` wide, the gate first kept above its Gaussian cutoff when `sparse`.
fn feed_forward(b: &mut Builder, width: u64, sparse: bool, x: TensorId) -> TensorId {
    let up = b.matmul(width, x);
    let mut gate = b.matmul(width, x);
    if sparse {
        gate = above_cutoff(b, gate);
    }
    let gate = b.elementwise(gate, &[]);
    let product = b.elementwise(up, &[gate]);
    b.matmul(b.n_embd, product)
}

/// `gaussian_topk`: `x` less its row's mean plus 1.645 standard deviations, through a ReLU.
fn above_cutoff(b: &mut Builder, x: TensorId) -> TensorId {
    let [width, tokens, ..] = b.graph.extents(x);
    let mean = b.op(Reuse::Fresh, [1, tokens, 1, 1], &[x]);
    let centred = b.op(Reuse::InPlace, [width, tokens, 1, 1], &[x, mean]);
    let squared = b.elementwise(centred, &[]);
    let summed = b.op(Reuse::Fresh, [1, tokens, 1, 1], &[squared]);
    let variance = b.elementwise(summed, &[]);
    let deviation = b.elementwise(variance, &[]);
    let deviation = b.elementwise(deviation, &[]);
    let cutoff = b.elementwise(mean, &[deviation]);
    let below = b.elementwise(x, &[cutoff]);
    b.elementwise(below, &[])
}

/// The four streams merged back (the other three projected out, matched to the active one's
/// magnitude, summed with it and averaged), the output rows selected, the final norm and the
/// logits (soft-capped in place).
fn output(b: &mut Builder, x: TensorId) {
    let [n_embd, tokens, streams, _] = b.graph.extents(x);
    let others = [n_embd, tokens, streams - 1, 1];
    let active = stream(b, x);
    let target = magnitude(b, active);
    let rest = self::others(b, x);
    let projection = b.weight([n_embd, n_embd, streams - 1, 1]);
    let projected = b.op(Reuse::Fresh, others, &[projection, rest]);
    let reached = magnitude(b, projected);
    let projected = b.elementwise(projected, &[target]);
    let projected = b.elementwise(projected, &[reached]);
    let mut merged = stream(b, x);
    for _ in 1..streams {
        let other = stream(b, projected);
        merged = b.op(Reuse::InPlace, [n_embd, tokens, 1, 1], &[merged, other]);
    }
    let merged = b.elementwise(merged, &[]);
    let rows = match b.output_rows {
        Some(rows) => b.op(
            Reuse::Fresh,
            [n_embd, b.batch.outputs, 1, 1],
            &[merged, rows],
        ),
        None => merged,
    };
    let normed = b.rms_norm(rows);
    b.logits(normed);
}
