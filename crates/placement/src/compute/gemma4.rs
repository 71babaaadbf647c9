//! The graph llama.cpp reserves for `gemma4` (`src/models/gemma4.cpp`): Gemma 3's scaled
//! embeddings, per-head norms and norms after the attention and the feed-forward, with heads of
//! their own width on the sliding-window layers, V RMS-normed (and on the full layers of the
//! larger models taken from the K projection), and on the MoE models (26B-A4B) routed experts
//! beside every layer's dense feed-forward: their router reads the attention's output normed
//! apart, each path has its own norms, and the experts' output may be scaled per expert; a
//! scalar per layer, and the logits soft-capped. The smaller models (E2B, E4B) give each layer
//! a token embedding of its own, projected in from the embeddings and gated into the layer's
//! output, and their last layers attend over an earlier layer's cache, keeping none.

use super::allocator::{Reuse, TensorId};
use super::builder::{replay, Builder, HostInputs, Router};
use super::gemma_layers::{self, own_embedding, per_layer_inputs, per_layer_width};
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
            None => {
                let value_projection = (self.il, self.tensors.value);
                gemma_layers::attention(b, model, value_projection, normed, (options, g))
            }
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
            let projected = own_embedding(b, out, embedded, width);
            out = b.elementwise(out, &[projected]);
        }
        if self.tensors.output_scale {
            let scalar = b.weight([1, 1, 1, 1]);
            b.elementwise(out, &[scalar])
        } else {
            out
        }
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
