//! The graph llama.cpp reserves for `gemma4` (`src/models/gemma4.cpp`): Gemma 3's scaled
//! embeddings, per-head norms and norms after the attention and the feed-forward, with heads of
//! their own width on the sliding-window layers, V RMS-normed (and on the full layers of the
//! larger models taken from the K projection), and on the MoE models (26B-A4B) routed experts
//! beside every layer's dense feed-forward: their router reads the attention's output normed
//! apart, each path has its own norms, and the experts' output may be scaled per expert; a
//! scalar per layer, and the logits soft-capped. The smaller models' per-layer embeddings and
//! shared caches (E2B, E4B) are not built: those plan with the estimate.

use super::allocator::{Reuse, TensorId};
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
}

/// Each layer's [`LayerTensors`], or `None` for a header this graph does not read: not
/// `gemma4`, per-layer embeddings or shared caches (E2B, E4B), a fused QKV projection, or
/// unequal K and V heads.
fn layer_tensors(model: &ModelShape) -> Option<Vec<LayerTensors>> {
    let attention = &model.attention;
    let plain = model.architecture == "gemma4"
        && attention.recurrent.is_none()
        && !attention.mla
        && attention.shared_kv_layers == 0
        && (0..model.n_layer as usize).all(|il| {
            let (k, v) = attention.head_lengths(il);
            k == v
        });
    if !plain {
        return None;
    }
    let mut layers = vec![LayerTensors::default(); model.n_layer as usize];
    for tensor in &model.tensors {
        let name = tensor.name.as_str();
        if name.starts_with("per_layer_") || name.contains(".attn_qkv.") {
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
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Decoder, scheduler),
        |mut builder, held, holds_output| {
            let mut cur = builder.inputs(model, held, 1, holds_output, options, g);
            if held.first() == Some(&0) {
                cur = builder.elementwise(cur, &[]);
            }
            for &il in held {
                builder.begin_layer(il);
                let layer = Layer {
                    il,
                    tensors: tensors[il],
                    experts: model.experts,
                };
                cur = layer.build(&mut builder, model, cur, options, g);
            }
            if holds_output {
                builder.begin_output();
                output(&mut builder, cur);
            } else {
                builder.hand_on(cur);
            }
            builder
        },
    )
}

/// One layer being built: its index and what the file gives it.
struct Layer {
    il: usize,
    tensors: LayerTensors,
    experts: Option<ExpertShape>,
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
        let n_ff = u64::from(model.n_ff);
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
        let out = b.elementwise(feed_forward, &[attended]);
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
        let n_embd = b.n_embd;
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
        let expert_ff = match experts.feed_forward_length {
            0 => u64::from(model.n_ff),
            width => u64::from(width),
        };
        let out = b.routed_experts(router, expert_ff, self.tensors.fused_gate_up, input);
        b.rms_norm(out)
    }
}

/// The final norm (a graph output: the graph hands it on as `t_h_nextn`), the output rows
/// selected from it (a graph output), the logits (their soft cap, a scale, a tanh and a scale,
/// works in place: no memory of its own).
fn output(b: &mut Builder, x: TensorId) {
    let (n_embd, n_vocab) = (b.n_embd, b.n_vocab);
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
    b.graph.mark_output(rows);
    let logits = b.matmul(n_vocab, rows);
    b.graph.mark_output(logits);
    b.graph.expand(logits);
}
