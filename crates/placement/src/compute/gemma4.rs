//! The graph llama.cpp reserves for `gemma4` (`src/models/gemma4.cpp`): Gemma 3's scaled
//! embeddings, per-head norms and norms after the attention and the feed-forward, with heads of
//! their own width on the sliding-window layers, V RMS-normed (and on the full layers of the
//! larger models taken from the K projection), and on the MoE models (26B-A4B) routed experts
//! beside every layer's dense feed-forward: their router reads the attention's output normed
//! apart, each path has its own norms, and the experts' output may be scaled per expert; a
//! scalar per layer, and the logits soft-capped. The smaller models (E2B, E4B) give each layer
//! a token embedding of its own, projected in from the embeddings and gated into the layer's
//! output, and their last layers attend over an earlier layer's cache, keeping none.

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{layer_heads, replay, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::{ExpertShape, ModelShape, TensorRole};
use crate::options::{DeviceId, PlacementOptions};

/// What the file gives each layer beyond the tensors every Gemma 4 layer has.
#[derive(Clone, Copy, Default)]
struct LayerTensors {
    /// `attn_v`: without it (a full layer of 26B-A4B or 31B) V is the K projection.
    value: bool,
    /// `layer_output_scale`: the layer's output multiplied by a scalar.
    output_scale: bool,
    /// `ffn_gate_inp`: routed experts beside the dense feed-forward.
    experts: bool,
    /// `ffn_gate_up_exps`: the experts' gate and up in one projection.
    fused_gate_up: bool,
    /// `ffn_down_exps.scale`: each expert's output scaled.
    down_scale: bool,
    /// The dense feed-forward's width (the shared layers' are twice the others').
    feed_forward: u64,
}

/// Each layer's [`LayerTensors`], or `None` for a header this graph does not read: not
/// `gemma4`, a fused QKV projection, or unequal K and V heads.
fn layer_tensors(model: &ModelShape) -> Option<Vec<LayerTensors>> {
    let attention = &model.attention;
    let plain = model.architecture == "gemma4"
        && attention.recurrent.is_none()
        && !attention.mla
        && (0..model.n_layer as usize).all(|il| {
            let (k, v) = attention.head_lengths(il);
            k == v
        });
    if !plain {
        return None;
    }
    let feed_forward = u64::from(model.n_ff);
    let mut layers = vec![
        LayerTensors {
            feed_forward,
            ..LayerTensors::default()
        };
        model.n_layer as usize
    ];
    let n_embd = u64::from(model.n_embd).max(1);
    for tensor in &model.tensors {
        let name = tensor.name.as_str();
        if name.contains(".attn_qkv.") {
            return None;
        }
        let Some(layer) = tensor.layer.and_then(|il| layers.get_mut(il as usize)) else {
            continue;
        };
        let kind = name.split('.').nth(2).unwrap_or("");
        let scale = name.ends_with(".scale");
        match kind {
            "attn_v" => layer.value = true,
            "layer_output_scale" => layer.output_scale = true,
            "ffn_gate_inp" => layer.experts = true,
            "ffn_gate_up_exps" => layer.fused_gate_up = true,
            "ffn_down_exps" if scale => layer.down_scale = true,
            "ffn_up" if tensor.elements > 0 => layer.feed_forward = tensor.elements / n_embd,
            _ => {}
        }
        if tensor.role == TensorRole::Experts {
            layer.experts = true;
        }
    }
    let experts_known = model.experts.is_some() || layers.iter().all(|l| !l.experts);
    experts_known.then_some(layers)
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    layer_tensors(model).is_some()
}

/// The compute buffer of `device` for a Gemma 4 model, or `None` for another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let tensors = layer_tensors(model)?;
    let per_layer = per_layer_width(model);
    if shared_cache_elsewhere(model, |il| layers.layers.get(il).copied()) {
        return None;
    }
    let n_layer = u64::from(model.n_layer);
    let host_inputs = match per_layer {
        Some(width) => HostInputs::PerLayer {
            width,
            layers: n_layer,
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
            let mut cur = builder.inputs(model, held, 1, holds_output, options, g);
            if held.first() == Some(&0) {
                cur = builder.elementwise(cur, &[]);
            }
            // Each layer's own embeddings, made where layer 0 is; a later device receives each
            // layer's slice as it reads it.
            let embedded = per_layer.map(|width| match held.first() {
                Some(0) => Some(per_layer_inputs(&mut builder, width, n_layer, cur)),
                _ => None,
            });
            for &il in held {
                builder.begin_layer(il);
                let layer = Layer {
                    il,
                    tensors: tensors[il],
                    experts: model.experts,
                    per_layer: embedded.zip(per_layer),
                };
                cur = layer.build(&mut builder, model, cur, options, g);
            }
            builder.finish(cur, holds_output, output)
        },
    )
}

/// One layer being built: its index and what the file gives it.
struct Layer {
    il: usize,
    tensors: LayerTensors,
    experts: Option<ExpertShape>,
    /// Every layer's own token embeddings (`[width, tokens, layers]`, `None` where made on
    /// another device) and their width.
    per_layer: Option<(Option<TensorId>, u64)>,
}

impl Layer {
    /// Norm, the attention, its norm and residual; the dense feed-forward (beside the routed
    /// experts where the layer has them), its norm and residual; the layer's scalar.
    fn build(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        input: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let normed = b.rms_norm(input);
        let mixed = match b.attention_elsewhere(normed, None) {
            Some(elsewhere) => elsewhere,
            None => self.attention(b, model, normed, options, g),
        };
        let mixed = b.rms_norm(mixed);
        let attended = b.elementwise(mixed, &[input]);
        let n_ff = self.tensors.feed_forward;
        let feed_forward = if let Some(experts) = self.experts.filter(|_| self.tensors.experts) {
            let dense = b.rms_norm(attended);
            let dense = b.dense_feed_forward(n_ff, dense);
            let dense = b.rms_norm(dense);
            let routed = self.routed(b, model, experts, attended);
            b.elementwise(dense, &[routed])
        } else {
            let normed = b.rms_norm(attended);
            b.dense_feed_forward(n_ff, normed)
        };
        let feed_forward = b.rms_norm(feed_forward);
        let mut out = b.elementwise(feed_forward, &[attended]);
        if let Some((embedded, width)) = self.per_layer {
            out = own_embedding(b, out, embedded, width);
        }
        if self.tensors.output_scale {
            let scalar = b.weight([1, 1, 1, 1]);
            b.elementwise(out, &[scalar])
        } else {
            out
        }
    }

    /// Q with its per-head norm and RoPE; K (and V, or K's projection again as V) normed, K
    /// roped; [`Builder::attend`]; the output projection.
    fn attention(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        normed: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let tokens = b.batch.tokens;
        let (head, heads, kv_heads) = layer_heads(model, self.il);
        let q = b.matmul(head * heads, normed);
        let q = b.graph.reshape(q, [head, heads, tokens, 1]);
        let q = b.rms_norm(q);
        let q = b.rope(q);
        let n_embd = b.n_embd;
        if !model.attention.has_kv(self.il) {
            let attended = b.attend_shared(model, self.il, q, options, g);
            return b.matmul(n_embd, attended);
        }
        let k = b.matmul(head * kv_heads, normed);
        let v = if self.tensors.value {
            b.matmul(head * kv_heads, normed)
        } else {
            k
        };
        let [k, v] = [k, v].map(|x| b.graph.reshape(x, [head, kv_heads, tokens, 1]));
        let k = b.rms_norm(k);
        let v = b.op(Reuse::InPlace, [head, kv_heads, tokens, 1], &[v]);
        let k = b.rope(k);
        let attended = b.attend(model, self.il, [q, k, v], options, g);
        b.matmul(n_embd, attended)
    }

    /// The routed experts over the attention's output: their own norm of it as input, the
    /// router's logits from it normed apart (scaled, times the router's scale), softmax gating
    /// with the selected weights normalized, the experts' norm after them.
    fn routed(
        &self,
        b: &mut Builder,
        model: &ModelShape,
        experts: ExpertShape,
        attended: TensorId,
    ) -> TensorId {
        let input = b.rms_norm(attended);
        let ne = b.graph.extents(attended);
        let routed = b.op(Reuse::InPlace, ne, &[attended]);
        let routed = b.elementwise(routed, &[]);
        let scale = b.weight([ne[0], 1, 1, 1]);
        let routed = b.elementwise(routed, &[scale]);
        let logits = b.matmul(u64::from(experts.count), routed);
        let router = Router {
            logits: Some(logits),
            down_scaled: self.tensors.down_scale,
            ..Router::of(&experts, true)
        };
        let expert_ff = experts.width(model.n_ff);
        let out = b.routed_experts(router, expert_ff, self.tensors.fused_gate_up, input);
        b.rms_norm(out)
    }
}

/// Whether a layer that keeps no cache is on another device than the layer whose cache it
/// reads (llama.cpp's reuse: the last sliding or full layer before the shared ones), whose
/// attention then runs where that cache is: not replayed.
pub(super) fn shared_cache_elsewhere(
    model: &ModelShape,
    device_of: impl Fn(usize) -> Option<DeviceId>,
) -> bool {
    let attention = &model.attention;
    let n_layer = model.n_layer as usize;
    let first_shared = n_layer.saturating_sub(attention.shared_kv_layers as usize);
    (first_shared..n_layer).any(|il| {
        let windowed = attention.swa_layers.get(il).copied().unwrap_or(false);
        let source = first_shared.checked_sub(if windowed { 2 } else { 1 });
        source.and_then(&device_of) != device_of(il)
    })
}

/// The width of each layer's own token embedding (`per_layer_proj_norm`'s), when the model
/// has them.
fn per_layer_width(model: &ModelShape) -> Option<u64> {
    model
        .tensors
        .iter()
        .find(|t| t.name == "per_layer_proj_norm.weight")
        .map(|t| t.elements)
        .filter(|&width| width > 0)
}

/// `build_inp_per_layer` and `project_per_layer_inputs`: each layer's token embeddings looked
/// up on the host (with a token input of their own) and scaled, the scaled embeddings `scaled`
/// projected to every layer's width, scaled, normed, added to them and scaled; `[width, tokens,
/// layers]` made contiguous out.
fn per_layer_inputs(b: &mut Builder, width: u64, n_layer: u64, scaled: TensorId) -> TensorId {
    let tokens = b.batch.tokens;
    let looked_up = b.looked_up_per_layer(width, n_layer);
    let looked_up = b.elementwise(looked_up, &[]);
    b.graph.expand(looked_up);
    let projected = b.matmul(width * n_layer, scaled);
    let projected = b.elementwise(projected, &[]);
    let projected = b.graph.reshape(projected, [width, n_layer, tokens, 1]);
    let projected = b.rms_norm(projected);
    let summed = b.elementwise(projected, &[looked_up]);
    let summed = b.elementwise(summed, &[]);
    let permuted = b.graph.permute(summed, [0, 2, 1, 3]);
    b.op(Reuse::Fresh, [width, tokens, n_layer, 1], &[permuted])
}

/// A layer's own embedding gated into its output `out`: the output projected to the
/// embedding's width, GELU, times this layer's slice of `embedded` (received, a copy of that
/// slice alone, when made on another device), projected back, normed, added to the output.
fn own_embedding(
    b: &mut Builder,
    out: TensorId,
    embedded: Option<TensorId>,
    width: u64,
) -> TensorId {
    let tokens = b.batch.tokens;
    let gate = b.matmul(width, out);
    let gate = b.elementwise(gate, &[]);
    let slice = match embedded {
        Some(all) => {
            let strides = b.graph.strides(all);
            let nb = [4, strides[1], strides[2], strides[2]];
            b.graph.view(all, [width, tokens, 1, 1], nb)
        }
        None => b.input(Element::F32, [width, tokens, 1, 1]),
    };
    let gated = b.elementwise(gate, &[slice]);
    let n_embd = b.n_embd;
    let projected = b.matmul(n_embd, gated);
    let projected = b.rms_norm(projected);
    b.elementwise(out, &[projected])
}

/// The final norm (a graph output: the graph hands it on as `t_h_nextn`), the output rows
/// selected from it (a graph output), the logits (their soft cap, a scale, a tanh and a scale,
/// works in place: no memory of its own).
fn output(b: &mut Builder, x: TensorId) {
    let n_embd = b.n_embd;
    let normed = b.rms_norm(x);
    b.graph.mark_output(normed);
    let rows = match b.output_rows {
        Some(rows) => b.op(
            Reuse::Fresh,
            [n_embd, b.batch.outputs, 1, 1],
            &[normed, rows],
        ),
        None => normed,
    };
    b.logits(rows);
}
