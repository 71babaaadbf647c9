//! The graph llama.cpp reserves for `gpt-oss` (`src/models/openai-moe.cpp`): a sliding window on
//! every other layer, biases on the Q, K, V and output projections, attention sinks (an operand
//! of the attention, no tensor of the compute buffer), a norm after the attention, routed
//! experts chosen over the router's biased logits with the softmax taken over the selected ones
//! and a bias on every expert projection; the output rows are selected after the last layer.

use super::allocator::{Reuse, TensorId};
use super::builder::{layer_heads, replay, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::{ExpertShape, ModelShape};
use crate::options::{DeviceId, PlacementOptions};

/// The experts of a header this graph reads: `gpt-oss` with experts and equal K and V heads.
fn experts(model: &ModelShape) -> Option<ExpertShape> {
    let attention = &model.attention;
    let plain = attention.recurrent.is_none()
        && !attention.mla
        && attention.key_length == attention.value_length;
    model
        .experts
        .filter(|_| model.architecture == "gpt-oss" && plain)
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    experts(model).is_some()
}

/// The compute buffer of `device` for a `gpt-oss` model, or `None` for another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let experts = experts(model)?;
    let router = Router {
        softmax_after_selection: true,
        biased_logits: true,
        biased_experts: true,
        ..Router::of(&experts, false)
    };
    let expert_ff = experts.width(model.n_ff);
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Decoder, scheduler),
        |mut builder, held, holds_output| {
            let mut cur = builder.inputs(model, held, 1, holds_output, options, g);
            for &il in held {
                builder.begin_layer(il);
                cur = layer(&mut builder, model, router, expert_ff, il, cur, options, g);
            }
            builder.finish(cur, holds_output, output)
        },
    )
}

/// One layer: norm, biased Q, K and V, RoPE, [`Builder::attend`], the biased output
/// projection, the residual, the norm after the attention, the routed experts, the residual.
#[allow(clippy::too_many_arguments)]
fn layer(
    b: &mut Builder,
    model: &ModelShape,
    router: Router,
    expert_ff: u64,
    il: usize,
    input: TensorId,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> TensorId {
    let tokens = b.batch.tokens;
    let (head, heads, kv_heads) = layer_heads(model, il);
    let normed = b.rms_norm(input);
    let [q, k, v] = [heads, kv_heads, kv_heads].map(|count| {
        let projected = b.matmul(head * count, normed);
        let bias = b.weight([head * count, 1, 1, 1]);
        let projected = b.elementwise(projected, &[bias]);
        b.graph.reshape(projected, [head, count, tokens, 1])
    });
    let q = b.rope(q);
    let k = b.rope(k);
    let attended = b.attend(model, il, [q, k, v], options, g);
    let n_embd = b.n_embd;
    let mixed = b.matmul(n_embd, attended);
    let bias = b.weight([n_embd, 1, 1, 1]);
    let mixed = b.elementwise(mixed, &[bias]);
    let feed_forward_input = b.elementwise(mixed, &[input]);
    let normed = b.rms_norm(feed_forward_input);
    let experts = b.routed_experts(router, expert_ff, false, normed);
    b.elementwise(experts, &[feed_forward_input])
}

/// The last layer's output (a graph output: the graph hands it on as `t_h_nextn`), the output
/// rows selected from it, the final norm (a graph output) and the logits.
fn output(b: &mut Builder, x: TensorId) {
    let n_embd = b.n_embd;
    b.graph.mark_output(x);
    let rows = match b.output_rows {
        Some(rows) => b.op(Reuse::Fresh, [n_embd, b.batch.outputs, 1, 1], &[x, rows]),
        None => x,
    };
    let normed = b.rms_norm(rows);
    b.logits(normed);
}
