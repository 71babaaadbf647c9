//! The graph llama.cpp reserves for the `llama` architecture (`src/models/llama.cpp`: Llama,
//! Mistral and their fine-tunes, dense or with Mixtral-style routed experts), tensor by tensor,
//! so that its compute buffer is llama.cpp's own byte count rather than a phase formula (whose
//! logits phase missed the rows llama.cpp leaves below them by up to 5 %).

use super::allocator::{Reuse, TensorId};
use super::builder::{layer_heads, replay, Builder};
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions};

/// The compute buffer of `device` for a `llama` model, or `None` for another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    options: &PlacementOptions,
) -> Option<u64> {
    let attention = &model.attention;
    let plain = model.architecture == "llama"
        && attention.recurrent.is_none()
        && attention.sliding_window.is_none()
        && !attention.mla
        && attention.key_length == attention.value_length;
    if !plain {
        return None;
    }
    replay(
        model,
        device,
        layers,
        g,
        options,
        |mut builder, held, holds_output| {
            let last = model.n_layer as usize;
            let selects_rows = held.last().is_some_and(|&il| il + 1 == last);
            let mut cur = builder.inputs(model, held, 1, selects_rows, options, g);
            for &il in held {
                cur = layer(&mut builder, model, il, cur, options, g);
            }
            if holds_output {
                output(&mut builder, cur);
            }
            builder
        },
    )
}

/// One decoder layer: norm, attention (Q, K, V projections, RoPE, [`Builder::attend`], the
/// output projection), on the last layer only the rows whose logits are wanted, the residual,
/// norm, feed-forward (dense or routed experts) and the second residual.
fn layer(
    b: &mut Builder,
    model: &ModelShape,
    il: usize,
    input: TensorId,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> TensorId {
    let tokens = b.batch.tokens;
    let (head, heads, kv_heads) = layer_heads(model, il);
    let normed = b.rms_norm(input);
    let q = b.matmul(head * heads, normed);
    let k = b.matmul(head * kv_heads, normed);
    let v = b.matmul(head * kv_heads, normed);
    let q = b.graph.reshape(q, [head, heads, tokens, 1]);
    let k = b.graph.reshape(k, [head, kv_heads, tokens, 1]);
    let v = b.graph.reshape(v, [head, kv_heads, tokens, 1]);
    let q = b.rope(q);
    let k = b.rope(k);
    let attended = b.attend(model, il, [q, k, v], options, g);
    let n_embd = b.n_embd;
    let mut mixed = b.matmul(n_embd, attended);
    let mut residual = input;
    if let (true, Some(rows)) = (il + 1 == model.n_layer as usize, b.output_rows) {
        mixed = b.op(Reuse::Fresh, [n_embd, tokens, 1, 1], &[mixed, rows]);
        residual = b.op(Reuse::Fresh, [n_embd, tokens, 1, 1], &[residual, rows]);
    }
    let feed_forward_input = b.elementwise(mixed, &[residual]);
    let normed = b.rms_norm(feed_forward_input);
    // Mixtral-style experts are `n_ff` wide whatever `expert_feed_forward_length` says.
    let n_ff = u64::from(model.n_ff);
    let feed_forward = match model.experts {
        // llama.cpp's llama graph passes no fused gate/up tensor.
        Some(experts) => b.routed_experts(u64::from(experts.count), n_ff, false, normed),
        None => b.dense_feed_forward(n_ff, normed),
    };
    b.elementwise(feed_forward, &[feed_forward_input])
}

/// The final norm (a graph output) and the logits.
fn output(b: &mut Builder, x: TensorId) {
    let n_vocab = b.n_vocab;
    let normed = b.rms_norm(x);
    b.graph.mark_output(normed);
    let logits = b.matmul(n_vocab, normed);
    b.graph.mark_output(logits);
    b.graph.expand(logits);
}

#[cfg(test)]
mod tests {
    use crate::plan::plan;
    use crate::testing::{gpus, shape_of_writer, synthetic_vocab, GIB};
    use crate::{DeviceId, KvType, PlacementOptions};
    use rigdeck_gguf::tiny::TinyModel;

    fn llama(n_layer: u64, n_head_kv: u64, n_ff: u64) -> TinyModel {
        TinyModel {
            name: "llama".into(),
            n_layer,
            n_embd: 1024,
            n_head: 8,
            n_head_kv,
            n_ff,
            context_length: 1 << 17,
            experts: None,
            sliding_window: None,
            mla: None,
            random_weights: false,
        }
    }

    fn compute(model: &TinyModel, vocab: usize, options: &PlacementOptions) -> u64 {
        let shape = shape_of_writer(&model.writer(&synthetic_vocab(vocab))).unwrap();
        let plan = plan(&shape, &gpus(1, 64 * GIB), options).unwrap();
        plan.device(DeviceId::Gpu(0))
            .unwrap()
            .usage
            .compute_estimate_bytes
    }

    #[test]
    fn llama_graphs_give_llama_cpps_own_buffer_to_the_byte() {
        // The byte counts ggml-alloc reached in llama.cpp's `llama-fit-params` (0c1e570, CPU).
        // The logits lead and sit above rows left in the freed mask's hole (70 MiB printed;
        // the phase formula said 66.5):
        let options = PlacementOptions {
            context: 8192,
            ubatch: 512,
            flash_attention: true,
            kv_unified: false,
            ..Default::default()
        };
        assert_eq!(compute(&llama(2, 8, 512), 32_000, &options), 73_926_656);
        // A q8_0 cache: Q, K and V rotated around it; four slots (256 MiB printed).
        let options = PlacementOptions {
            context: 16_384,
            parallel: 4,
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..options
        };
        assert_eq!(compute(&llama(16, 2, 2816), 128_256, &options), 268_961_792);
    }
}
