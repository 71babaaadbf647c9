//! The graph llama.cpp reserves for `llama` (`src/models/llama.cpp`: Llama, Mistral and their
//! fine-tunes, dense or with Mixtral-style routed experts) and for the decoders built the same
//! way with a few more operations (`qwen2.cpp`: biases on Q, K and V; `qwen3.cpp`,
//! `qwen3moe.cpp`: Q and K normed per head; `gemma3.cpp`: those norms, scaled embeddings and
//! queries, norms after the attention and the feed-forward, and a sliding window on most layers;
//! `phi3.cpp`: one QKV projection, scaled queries, gate and up in one projection;
//! `command-r.cpp`: layer norms, the attention and the feed-forward side by side;
//! `minimax-m2.cpp`: Q and K normed over all their heads at once, experts chosen by sigmoid
//! gating over a selection bias; `gemma-embedding.cpp`: Gemma 3's layers attending over the
//! micro-batch alone, without a cache, and no logits after the final norm),
//! tensor by tensor, so that the compute buffer is llama.cpp's own byte count rather than a phase
//! formula (whose logits phase missed the rows llama.cpp leaves below them by up to 5 %).

use super::allocator::{Reuse, TensorId};
use super::builder::{layer_heads, replay, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions};

/// What a decoder's layer adds to `llama`'s.
#[derive(Clone, Copy)]
struct Decoder {
    /// `qwen2`: a bias added to each of the Q, K and V projections.
    qkv_bias: bool,
    /// `qwen3`, `qwen3moe`, `gemma3`: Q and K RMS-normed per head before RoPE.
    qk_norm: bool,
    /// `minimax-m2`: Q and K RMS-normed over all their heads, before they are split into heads.
    qk_norm_whole: bool,
    /// `minimax-m2`: the router chooses the experts over its probabilities plus a bias
    /// (`exp_probs_b`).
    selection_bias: bool,
    /// `gemma`, `gemma2`, `gemma3`: the embeddings and the queries scaled.
    gemma: bool,
    /// `gemma2`, `gemma3`: an RMS norm after the attention and after the feed-forward. (Gemma
    /// 2's soft caps on the scores and the logits, a scale, a tanh and a scale each, work in
    /// place: they take no memory of their own.)
    post_norms: bool,
    /// `phi3`: the queries scaled after RoPE, gate and up in one projection twice `n_ff` wide.
    phi: bool,
    /// `command-r`: layer norms, the attention and the feed-forward side by side on the same
    /// normed input, both added to the residual; the logits scaled.
    parallel: bool,
    /// Q, K and V from one `attn_qkv` projection (views of it), as a file may give any of
    /// these architectures and Phi-3's always do.
    fused_qkv: bool,
    /// The routed experts' width: `n_ff` for Mixtral-style `llama` experts whatever
    /// `expert_feed_forward_length` says, that key for `qwen3moe`.
    expert_ff: u64,
}

/// The decoder `model`'s architecture builds, or `None` for another graph (or a header whose
/// attention is not what that graph reads: recurrent layers, MLA, unequal K and V heads, a
/// sliding window outside `gemma3`).
fn decoder(model: &ModelShape) -> Option<Decoder> {
    let attention = &model.attention;
    let n_ff = u64::from(model.n_ff);
    let fused_qkv = has_tensor(model, ".attn_qkv.weight");
    let plain = Decoder {
        qkv_bias: false,
        qk_norm: false,
        qk_norm_whole: false,
        selection_bias: false,
        gemma: false,
        post_norms: false,
        phi: false,
        parallel: false,
        fused_qkv,
        expert_ff: n_ff,
    };
    let decoder = match model.architecture.as_str() {
        "llama" => plain,
        "qwen2" if model.experts.is_none() => Decoder {
            qkv_bias: true,
            ..plain
        },
        "qwen3" if model.experts.is_none() => Decoder {
            qk_norm: true,
            ..plain
        },
        "qwen3moe" => Decoder {
            qk_norm: true,
            expert_ff: model.experts.map_or(n_ff, |e| e.width(model.n_ff)),
            ..plain
        },
        "phi3" if model.experts.is_none() => Decoder { phi: true, ..plain },
        "minimax-m2" if model.experts.is_some() && !fused_qkv => Decoder {
            qk_norm_whole: true,
            selection_bias: true,
            ..plain
        },
        // Command R+'s per-head layer norms on Q and K are not built here.
        "command-r" if model.experts.is_none() && !has_tensor(model, ".attn_q_norm.weight") => {
            Decoder {
                parallel: true,
                ..plain
            }
        }
        "gemma" if model.experts.is_none() => Decoder {
            gemma: true,
            ..plain
        },
        "gemma2" if model.experts.is_none() => Decoder {
            gemma: true,
            post_norms: true,
            ..plain
        },
        "gemma3" | "gemma-embedding" if model.experts.is_none() => Decoder {
            qk_norm: true,
            gemma: true,
            post_norms: true,
            ..plain
        },
        _ => return None,
    };
    let windowed = attention.sliding_window.is_some() && attention.swa_layers.contains(&true);
    let supported = attention.recurrent.is_none()
        && (!windowed || decoder.gemma)
        && !attention.mla
        && attention.key_length == attention.value_length;
    supported.then_some(decoder)
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    decoder(model).is_some()
}

/// Whether any of `model`'s tensors is named `*{suffix}`.
fn has_tensor(model: &ModelShape, suffix: &str) -> bool {
    model.tensors.iter().any(|t| t.name.ends_with(suffix))
}

/// The compute buffer of `device` for a model one of these decoders builds, or `None` for
/// another architecture.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let decoder = decoder(model)?;
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Decoder, scheduler),
        |mut builder, held, holds_output| {
            let mut cur = builder.decoder_inputs(model, held, options, g);
            if decoder.gemma && held.first() == Some(&0) {
                cur = builder.elementwise(cur, &[]);
            }
            for &il in held {
                builder.begin_layer(il);
                cur = layer(&mut builder, model, decoder, il, cur, options, g);
            }
            builder.finish(cur, holds_output, |b, x| {
                output(b, decoder, !model.attention.cacheless, x)
            })
        },
    )
}

/// One decoder layer: norm, attention (Q, K, V projections with their biases or per-head norms,
/// RoPE, [`Builder::attend`], the output projection), on the last layer only the rows whose
/// logits are wanted, the residual, norm, feed-forward (dense or routed experts) and the second
/// residual; Gemma's norms after the attention and the feed-forward.
fn layer(
    b: &mut Builder,
    model: &ModelShape,
    decoder: Decoder,
    il: usize,
    input: TensorId,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> TensorId {
    let normed = if decoder.parallel {
        b.layer_norm(input)
    } else {
        b.rms_norm(input)
    };
    let n_embd = b.n_embd;
    let mut mixed = match b.attention_elsewhere(normed, None) {
        Some(elsewhere) => elsewhere,
        None => attention(b, model, decoder, il, normed, options, g),
    };
    let mut residual = input;
    let last = il + 1 == model.n_layer as usize;
    if decoder.parallel {
        return side_by_side(b, model, last, [mixed, residual, normed]);
    }
    if let (true, Some(rows)) = (last, b.output_rows) {
        let outputs = b.batch.outputs;
        mixed = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[mixed, rows]);
        residual = b.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[residual, rows]);
    }
    if decoder.post_norms {
        mixed = b.rms_norm(mixed);
    }
    let feed_forward_input = b.elementwise(mixed, &[residual]);
    let normed = b.rms_norm(feed_forward_input);
    let mut feed_forward = match model.experts {
        // llama.cpp's llama and qwen3moe graphs pass no fused gate/up tensor.
        Some(experts) => {
            let router = Router {
                selection_bias: decoder.selection_bias,
                ..Router::of(&experts, true)
            };
            b.routed_experts(router, decoder.expert_ff, false, normed)
        }
        // Phi-3: gate and up in one projection, SwiGLU over its halves.
        None if decoder.phi => {
            let n_ff = u64::from(model.n_ff);
            let both = b.matmul(2 * n_ff, normed);
            let activated = b.op(
                Reuse::Fresh,
                [n_ff, b.graph.extents(both)[1], 1, 1],
                &[both],
            );
            b.matmul(b.n_embd, activated)
        }
        // SwiGLU or (Gemma) GeGLU: the same tensors.
        None => b.dense_feed_forward(u64::from(model.n_ff), normed),
    };
    if decoder.post_norms {
        feed_forward = b.rms_norm(feed_forward);
    }
    // Phi-3 adds the feed-forward to the residual (the residual first: its memory is reused).
    if decoder.phi {
        b.elementwise(feed_forward_input, &[feed_forward])
    } else {
        b.elementwise(feed_forward, &[feed_forward_input])
    }
}

/// The attention of a layer over its `normed` input: Q, K and V (with their biases or
/// per-head norms, RoPE), [`Builder::attend`], the output projection.
fn attention(
    b: &mut Builder,
    model: &ModelShape,
    decoder: Decoder,
    il: usize,
    normed: TensorId,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> TensorId {
    let (head, heads, kv_heads) = layer_heads(model, il);
    let [q, k, v] = projections(b, decoder, [head, heads, kv_heads], normed);
    let [q, k] = [q, k].map(|x| {
        let x = if decoder.qk_norm { b.rms_norm(x) } else { x };
        b.rope(x)
    });
    let q = if decoder.gemma || decoder.phi {
        b.elementwise(q, &[])
    } else {
        q
    };
    let attended = b.attend(model, il, [q, k, v], options, g);
    let n_embd = b.n_embd;
    b.matmul(n_embd, attended)
}

/// Command R's rest of a layer: on the last layer the output rows of the attention's output, the
/// residual and the normed input; the feed-forward over the normed input; the residual and the
/// attention's output added to it.
fn side_by_side(
    b: &mut Builder,
    model: &ModelShape,
    last: bool,
    [mut attended, mut residual, mut normed]: [TensorId; 3],
) -> TensorId {
    if let (true, Some(rows)) = (last, b.output_rows) {
        let ne = [b.n_embd, b.batch.outputs, 1, 1];
        attended = b.op(Reuse::Fresh, ne, &[attended, rows]);
        residual = b.op(Reuse::Fresh, ne, &[residual, rows]);
        normed = b.op(Reuse::Fresh, ne, &[normed, rows]);
    }
    let feed_forward = b.dense_feed_forward(u64::from(model.n_ff), normed);
    let sum = b.elementwise(feed_forward, &[residual]);
    b.elementwise(sum, &[attended])
}

/// `build_qkv`: Q, K and V (`[head, heads, tokens]`) from three projections, or as views of
/// one fused projection, with their biases (Qwen2) added.
fn projections(
    b: &mut Builder,
    decoder: Decoder,
    [head, heads, kv_heads]: [u64; 3],
    x: TensorId,
) -> [TensorId; 3] {
    let tokens = b.batch.tokens;
    let counts = [heads, kv_heads, kv_heads];
    let biased = |b: &mut Builder, projected: TensorId| {
        if !decoder.qkv_bias {
            return projected;
        }
        let width = b.graph.extents(projected)[0];
        let bias = b.weight([width, 1, 1, 1]);
        b.elementwise(projected, &[bias])
    };
    if decoder.fused_qkv {
        let qkv = b.matmul(head * (heads + 2 * kv_heads), x);
        let qkv = biased(b, qkv);
        let row = b.graph.strides(qkv)[1];
        return counts.map(|count| {
            b.graph.view(
                qkv,
                [head, count, tokens, 1],
                [4, 4 * head, row, row * tokens],
            )
        });
    }
    // MiniMax M2 norms Q and K whole, before they are split into heads.
    let normed_whole = [decoder.qk_norm_whole, decoder.qk_norm_whole, false];
    let mut normed = normed_whole.into_iter();
    counts.map(|count| {
        let projected = b.matmul(head * count, x);
        let projected = biased(b, projected);
        let projected = match normed.next() {
            Some(true) => b.rms_norm(projected),
            _ => projected,
        };
        b.graph.reshape(projected, [head, count, tokens, 1])
    })
}

/// The final norm (a graph output) and the `logits` (Command R's scaled in place); an embedding
/// model's graph ends at the norm (its pooling is built only with `--embedding`).
fn output(b: &mut Builder, decoder: Decoder, logits: bool, x: TensorId) {
    let n_vocab = b.n_vocab;
    let normed = if decoder.parallel {
        b.layer_norm(x)
    } else {
        b.rms_norm(x)
    };
    b.graph.mark_output(normed);
    if !logits {
        b.graph.expand(normed);
        return;
    }
    let mut logits = b.matmul(n_vocab, normed);
    if decoder.parallel {
        logits = b.elementwise(logits, &[]);
    }
    b.graph.mark_output(logits);
    b.graph.expand(logits);
}

#[cfg(test)]
mod tests {
    use crate::plan::plan;
    use crate::testing::{gpus, shape_of_writer, synthetic_vocab};
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
        let plan = plan(&shape, &gpus(0, 0), options).unwrap();
        plan.device(DeviceId::Cpu)
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
