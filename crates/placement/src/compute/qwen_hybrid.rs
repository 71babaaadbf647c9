//! The graph llama.cpp reserves for Qwen3-Next (`src/models/qwen3next.cpp`, the fused gated
//! delta net of `delta-net-base.cpp`, `build_attn` and `build_moe_ffn` of `llama-graph.cpp`)
//! and its Qwen3.5 successors (`qwen35moe.cpp`, `qwen35.cpp`), tensor by tensor, for
//! [`allocator::reserve`]. Its linear-attention layers free and reuse
//! some thirty tensors of every size in an order no formula of ours captured (the fitted
//! envelope was 6.5 % under to 12 % over llama.cpp's figure); replaying the allocator over the
//! same graph gives llama.cpp's own number.

use std::ops::{Deref, DerefMut};

use super::allocator::{Reuse, TensorId};
use super::builder::{contiguous_strides, layer_heads, replay, Batch, Builder, HostInputs, Router};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::{ModelShape, RecurrentKind, RecurrentShape};
use crate::options::{DeviceId, PlacementOptions};

/// The compute buffer of `device` for a Qwen3-Next or Qwen3.5 model, or `None` for a model
/// this graph does not describe.
/// Whether [`compute_bytes`] builds `model`'s graph (Qwen3-Next or Qwen3.5 with its linear
/// heads known).
pub(super) fn replays(model: &ModelShape) -> bool {
    model
        .attention
        .recurrent
        .filter(|r| r.kind == RecurrentKind::GatedDeltaNet)
        .is_some_and(|linear| {
            Flavour::of(model).is_some() && linear.group_count > 0 && linear.time_step_rank > 0
        })
}

pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let linear = model
        .attention
        .recurrent
        .filter(|r| r.kind == RecurrentKind::GatedDeltaNet)?;
    let flavour = Flavour::of(model)?;
    if linear.group_count == 0 || linear.time_step_rank == 0 {
        return None;
    }
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Decoder, scheduler),
        |builder, held, holds_output| {
            let mut graph = HybridGraph {
                builder,
                linear,
                flavour,
                forms: LayerForms::of(model),
            };
            graph.build(model, held, holds_output, options, g);
            graph.builder
        },
    )
}

/// Where the Qwen hybrids' graphs differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// `qwen3next`: beta and alpha from one projection split per key head, Q and K repeated
    /// to the value heads, routed and shared experts.
    Qwen3Next,
    /// `qwen35moe`: beta and alpha projected apart, Q and K left to the fused op's broadcast.
    Qwen35Moe,
    /// `qwen35`: as `qwen35moe` with a dense feed-forward.
    Qwen35,
}

impl Flavour {
    fn of(model: &ModelShape) -> Option<Flavour> {
        match (model.architecture.as_str(), model.experts.is_some()) {
            ("qwen3next", true) => Some(Flavour::Qwen3Next),
            ("qwen35moe", true) => Some(Flavour::Qwen35Moe),
            ("qwen35", false) => Some(Flavour::Qwen35),
            _ => None,
        }
    }
}

/// The shared [`Builder`] with what the linear-attention layers add.
struct HybridGraph {
    builder: Builder,
    linear: RecurrentShape,
    flavour: Flavour,
    forms: LayerForms,
}

/// Which form of each layer's tensors the file has (each changes the graph).
#[derive(Default)]
struct LayerForms {
    /// The single `ssm_in` projection of older conversions.
    ssm_in: Vec<bool>,
    /// The experts' gate and up projections in one `ffn_gate_up_exps`.
    gate_up: Vec<bool>,
    /// A shared expert (`ffn_up_shexp`).
    shared_expert: Vec<bool>,
}

impl LayerForms {
    /// One pass over the tensor table.
    fn of(model: &ModelShape) -> LayerForms {
        let n = model.n_layer as usize;
        let mut forms = LayerForms {
            ssm_in: vec![false; n],
            gate_up: vec![false; n],
            shared_expert: vec![false; n],
        };
        for tensor in &model.tensors {
            let Some(il) = tensor.layer.map(|l| l as usize).filter(|&l| l < n) else {
                continue;
            };
            let suffix = tensor
                .name
                .strip_prefix("blk.")
                .and_then(|rest| rest.split_once('.'))
                .map(|(_, suffix)| suffix);
            match suffix {
                Some("ssm_in.weight") => forms.ssm_in[il] = true,
                Some("ffn_gate_up_exps.weight") => forms.gate_up[il] = true,
                Some("ffn_up_shexp.weight") => forms.shared_expert[il] = true,
                _ => {}
            }
        }
        forms
    }

    fn has(flags: &[bool], il: usize) -> bool {
        flags.get(il).copied().unwrap_or(false)
    }
}

impl Deref for HybridGraph {
    type Target = Builder;

    fn deref(&self) -> &Builder {
        &self.builder
    }
}

impl DerefMut for HybridGraph {
    fn deref_mut(&mut self) -> &mut Builder {
        &mut self.builder
    }
}

impl HybridGraph {
    /// The graph of the layers `held` (and the output when `holds_output`), as
    /// `llama_model_qwen3next::graph::graph` builds it.
    fn build(
        &mut self,
        model: &ModelShape,
        held: &[usize],
        holds_output: bool,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) {
        // Qwen3.5's M-RoPE reads four positions per token.
        let positions = if self.flavour == Flavour::Qwen3Next {
            1
        } else {
            4
        };
        let mut cur = self.inputs(model, held, positions, holds_output, options, g);
        for &il in held {
            self.begin_layer(il);
            cur = self.layer(model, il, cur, options, g);
        }
        if holds_output {
            self.begin_output();
            self.output(cur);
        } else {
            self.hand_on(cur);
        }
    }

    fn layer(
        &mut self,
        model: &ModelShape,
        il: usize,
        input: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let normed = self.rms_norm(input);
        self.graph.expand(normed);
        let mixed = if model.attention.is_recurrent(il) {
            self.linear_attention(il, normed)
        } else {
            self.attention(model, il, normed, options, g)
        };
        let residual = self.elementwise(mixed, &[input]);
        let post_normed = self.rms_norm(residual);
        let feed_forward = self.feed_forward(model, il, post_normed);
        self.elementwise(feed_forward, &[residual])
    }

    /// `build_layer_attn_linear` with the fused Q/K/V and gate projections and the fused
    /// `ggml_gated_delta_net` (one op writing the output and the final state).
    fn linear_attention(&mut self, il: usize, x: TensorId) -> TensorId {
        let Batch {
            tokens,
            sequences,
            per_sequence,
            ..
        } = self.batch;
        let shape = self.linear;
        let head = u64::from(shape.state_size);
        let key_heads = u64::from(shape.group_count);
        let value_heads = u64::from(shape.time_step_rank);
        let value_width = u64::from(shape.inner_size);
        let value_head = value_width / value_heads;
        let channels = shape.conv_channels();
        let (qkv, z) = self.qkvz(il, x);
        let qkv = self
            .graph
            .reshape(qkv, [channels, per_sequence, sequences, 1]);
        let (beta, gate) = self.beta_and_gate(x);

        let conv_input = self.convolution_input(qkv);
        let state = self.recurrent_state(shape.ssm_state_elements());
        let state = self
            .graph
            .reshape(state, [value_head, value_head, value_heads, sequences]);
        let kernel = self.weight([u64::from(shape.conv_kernel), channels, 1, 1]);
        let convolved = self.op(
            Reuse::Fresh,
            [channels, per_sequence, sequences, 1],
            &[conv_input, kernel],
        );
        let convolved = self.elementwise(convolved, &[]);
        let row = channels * 4;
        let strides = [4, head * 4, row, row * per_sequence];
        let q = self.graph.view(
            convolved,
            [head, key_heads, per_sequence, sequences],
            strides,
        );
        let k = self.graph.view(
            convolved,
            [head, key_heads, per_sequence, sequences],
            strides,
        );
        let v = self.graph.view(
            convolved,
            [value_head, value_heads, per_sequence, sequences],
            [4, value_head * 4, row, row * per_sequence],
        );
        let q = self.l2_norm_repeated(q);
        let k = self.l2_norm_repeated(k);
        let fused = self.op(
            Reuse::Fresh,
            [
                value_head * value_heads,
                tokens + value_head * sequences,
                1,
                1,
            ],
            &[q, k, v, gate, beta, state],
        );
        let output = self.graph.view(
            fused,
            [value_head, value_heads, per_sequence, sequences],
            contiguous_strides([value_head, value_heads, per_sequence, sequences]),
        );
        let new_state = self.graph.view(
            fused,
            [value_head, value_head, value_heads, sequences],
            contiguous_strides([value_head, value_head, value_heads, sequences]),
        );
        let cache = self.cache([shape.ssm_state_elements(), sequences, 1, 1]);
        let written = self.graph.copy(new_state, cache);
        self.graph.expand(written);
        let z = self
            .graph
            .reshape(z, [value_head, value_heads, per_sequence, sequences]);
        let normed = self.rms_norm(output);
        let activated = self.elementwise(z, &[]);
        let gated = self.elementwise(normed, &[activated]);
        let flat = self
            .graph
            .reshape(gated, [value_width, per_sequence, sequences, 1]);
        let n_embd = self.n_embd;
        let projected = self.matmul(n_embd, flat);
        self.graph.reshape(projected, [n_embd, tokens, 1, 1])
    }

    /// The delta net's write strength (beta, a sigmoid) and decay gate (softplus of alpha plus
    /// its bias, times A), one per value head and token, shaped `[1, value heads, tokens, seqs]`.
    fn beta_and_gate(&mut self, x: TensorId) -> (TensorId, TensorId) {
        let Batch {
            sequences,
            per_sequence,
            ..
        } = self.batch;
        let value_heads = u64::from(self.linear.time_step_rank);
        let per_head = [1, value_heads, per_sequence, sequences];
        let (beta, alpha) = if self.flavour == Flavour::Qwen3Next {
            // One projection, [beta | alpha] per key head, split and made contiguous.
            let key_heads = u64::from(self.linear.group_count);
            let per_group = value_heads / key_heads;
            let ba = self.matmul(2 * value_heads, x);
            let ba = self
                .graph
                .reshape(ba, [2 * per_group, key_heads, per_sequence, sequences]);
            let strides = self.graph.strides(ba);
            let split = [per_group, key_heads, per_sequence, sequences];
            let b = self.graph.view(ba, split, strides);
            let a = self.graph.view(ba, split, strides);
            let b = self.op(Reuse::Fresh, split, &[b]);
            let beta = self.elementwise(b, &[]);
            let alpha = self.op(
                Reuse::Fresh,
                [value_heads, per_sequence, sequences, 1],
                &[a],
            );
            (self.graph.reshape(beta, per_head), alpha)
        } else {
            let beta = self.matmul(value_heads, x);
            let beta = self.graph.reshape(beta, per_head);
            let beta = self.elementwise(beta, &[]);
            let alpha = self.matmul(value_heads, x);
            let alpha = self
                .graph
                .reshape(alpha, [value_heads, per_sequence, sequences, 1]);
            (beta, alpha)
        };
        let bias = self.weight([value_heads, 1, 1, 1]);
        let alpha = self.elementwise(alpha, &[bias]);
        let alpha = self.elementwise(alpha, &[]);
        let decay = self.weight([value_heads, 1, 1, 1]);
        let gate = self.elementwise(alpha, &[decay]);
        (beta, self.graph.reshape(gate, per_head))
    }

    /// `build_qkvz`: Q, K and V (the convolution's channels) and the output gate z, from the
    /// fused `attn_qkv`/`attn_gate` projections, or from the legacy `ssm_in` one split and
    /// made contiguous.
    fn qkvz(&mut self, il: usize, x: TensorId) -> (TensorId, TensorId) {
        let shape = self.linear;
        let channels = shape.conv_channels();
        let value_width = u64::from(shape.inner_size);
        if !LayerForms::has(&self.forms.ssm_in, il) {
            let qkv = self.matmul(channels, x);
            let z = self.matmul(value_width, x);
            return (qkv, z);
        }
        let Batch {
            sequences,
            per_sequence,
            ..
        } = self.batch;
        let head = u64::from(shape.state_size);
        let key_heads = u64::from(shape.group_count);
        let per_group = value_width / key_heads;
        let row = 2 * head + 2 * per_group;
        let mixed = self.matmul(row * key_heads, x);
        let mixed = self
            .graph
            .reshape(mixed, [row, key_heads, per_sequence, sequences]);
        let strides = self.graph.strides(mixed);
        let part = |width: u64| [width, key_heads, per_sequence, sequences];
        let query = self.graph.view(mixed, part(head), strides);
        let key = self.graph.view(mixed, part(head), strides);
        let value = self.graph.view(mixed, part(per_group), strides);
        let z = self.graph.view(mixed, part(per_group), strides);
        let z = self.op(Reuse::Fresh, part(per_group), &[z]);
        let flat = |width: u64| [width, per_sequence, sequences, 1];
        let query = self.op(Reuse::Fresh, flat(head * key_heads), &[query]);
        let key = self.op(Reuse::Fresh, flat(head * key_heads), &[key]);
        let value = self.op(Reuse::Fresh, flat(value_width), &[value]);
        let qk = self.op(Reuse::Fresh, flat(2 * head * key_heads), &[query, key]);
        let qkv = self.op(Reuse::Fresh, flat(channels), &[qk, value]);
        (qkv, z)
    }

    /// `build_conv_state`: the stored conv state of each sequence before this batch's
    /// columns, and the last columns written back.
    fn convolution_input(&mut self, qkv: TensorId) -> TensorId {
        let shape = self.linear;
        let sequences = self.batch.sequences;
        let channels = shape.conv_channels();
        let kept = u64::from(shape.conv_kernel.saturating_sub(1));
        let states = self.recurrent_state(shape.conv_state_elements());
        let states = self.graph.reshape(states, [kept, channels, sequences, 1]);
        let transposed = self.graph.permute(qkv, [1, 0, 2, 3]);
        let columns = self.graph.extents(transposed)[0] + kept;
        let input = self.op(
            Reuse::Fresh,
            [columns, channels, sequences, 1],
            &[states, transposed],
        );
        let strides = self.graph.strides(input);
        let last = self
            .graph
            .view(input, [kept, channels, sequences, 1], strides);
        let cache = self.cache([shape.conv_state_elements(), sequences, 1, 1]);
        let written = self.graph.copy(last, cache);
        self.graph.expand(written);
        input
    }

    /// `build_gdn_l2_norm` (an RMS norm and a scale) and, with more value heads than key heads,
    /// the repeat to as many heads as values (`ggml_repeat_4d`).
    fn l2_norm_repeated(&mut self, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let normed = self.op(Reuse::InPlace, ne, &[x]);
        let scaled = self.elementwise(normed, &[]);
        let shape = self.linear;
        let (key_heads, value_heads) = (
            u64::from(shape.group_count),
            u64::from(shape.time_step_rank),
        );
        // Qwen3.5 leaves the repeat to the fused op (`[TAG_GGML_GDN_BCAST]`).
        if key_heads == value_heads || self.flavour != Flavour::Qwen3Next {
            return scaled;
        }
        let factor = value_heads / key_heads;
        let split = self
            .graph
            .reshape(scaled, [ne[0], 1, key_heads, ne[2] * ne[3]]);
        let repeated = self.op(
            Reuse::Fresh,
            [ne[0], factor, key_heads, ne[2] * ne[3]],
            &[split],
        );
        self.graph
            .reshape(repeated, [ne[0], factor * key_heads, ne[2], ne[3]])
    }

    /// `build_layer_attn`: a Q projection carrying an output gate, Q/K norms, RoPE, the KV
    /// cache written and read ([`Builder::attend`]), the gate.
    fn attention(
        &mut self,
        model: &ModelShape,
        il: usize,
        x: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let tokens = self.batch.tokens;
        let (head, heads, kv_heads) = layer_heads(model, il);
        let full = self.matmul(2 * head * heads, x);
        let full = self.graph.reshape(full, [2 * head, heads, tokens, 1]);
        let strides = self.graph.strides(full);
        let q = self.graph.view(full, [head, heads, tokens, 1], strides);
        let gate = self.graph.view(full, [head, heads, tokens, 1], strides);
        let k = self.matmul(head * kv_heads, x);
        let v = self.matmul(head * kv_heads, x);
        let k = self.graph.reshape(k, [head, kv_heads, tokens, 1]);
        let v = self.graph.reshape(v, [head, kv_heads, tokens, 1]);
        let q = self.rms_norm(q);
        let k = self.rms_norm(k);
        let q = self.rope(q);
        let k = self.rope(k);
        let attended = self.attend(model, il, [q, k, v], options, g);
        let gate = self.op(Reuse::Fresh, [head * heads, tokens, 1, 1], &[gate]);
        let gate = self.elementwise(gate, &[]);
        let gated = self.elementwise(attended, &[gate]);
        let n_embd = self.n_embd;
        self.matmul(n_embd, gated)
    }

    /// `build_layer_ffn`: the routed experts ([`Builder::routed_experts`]) and, when the file
    /// has one, the shared expert gated by a sigmoid; Qwen3.5 dense a plain feed-forward.
    fn feed_forward(&mut self, model: &ModelShape, il: usize, x: TensorId) -> TensorId {
        let n_ff = u64::from(model.n_ff);
        let Some(experts) = model.experts else {
            return self.dense_feed_forward(n_ff, x);
        };
        // `n_ff_exp`, else the dense width shared among the selected experts.
        let expert_ff = match experts.feed_forward_length {
            0 => n_ff / self.experts_used,
            ff => u64::from(ff),
        };
        let fused = LayerForms::has(&self.forms.gate_up, il);
        let routed = self.routed_experts(Router::of(&experts, true), expert_ff, fused, x);
        if !LayerForms::has(&self.forms.shared_expert, il) {
            return routed;
        }
        let shared_ff = match experts.shared_feed_forward_length {
            0 => n_ff,
            ff => u64::from(ff),
        };
        let shared = self.dense_feed_forward(shared_ff, x);
        let shared_gate = self.matmul(1, x);
        let shared_gate = self.elementwise(shared_gate, &[]);
        let shared = self.elementwise(shared, &[shared_gate]);
        self.elementwise(routed, &[shared])
    }

    /// The final norm, the output rows and the logits: all three graph outputs, never freed.
    fn output(&mut self, x: TensorId) {
        let (outputs, n_embd, n_vocab) = (self.batch.outputs, self.n_embd, self.n_vocab);
        let normed = self.rms_norm(x);
        self.graph.mark_output(normed);
        let rows = self.output_rows.unwrap_or(normed);
        let selected = self.op(Reuse::Fresh, [n_embd, outputs, 1, 1], &[normed, rows]);
        self.graph.mark_output(selected);
        let logits = self.matmul(n_vocab, selected);
        self.graph.mark_output(logits);
        self.graph.expand(logits);
    }
}

#[cfg(test)]
mod tests {
    use crate::model::RecurrentShape;
    use crate::plan::plan;
    use crate::testing::{gpus, shape_of_writer, synthetic_vocab, GIB};
    use crate::{DeviceId, ModelShape, PlacementOptions};
    use rigdeck_gguf::tiny_recurrent::{QwenHybrid, TinyQwen3Next};

    /// Three layers (two linear, one full attention), 16/32 linear heads of 128, 16 experts
    /// with 4 active, GPT-NeoX's vocabulary size.
    fn three_layers(model: TinyQwen3Next) -> ModelShape {
        shape_of_writer(&model.writer(&synthetic_vocab(50_432))).unwrap()
    }

    fn compute_on_the_host(model: &ModelShape, options: &PlacementOptions) -> u64 {
        let plan = plan(model, &gpus(0, 0), options).unwrap();
        plan.device(DeviceId::Cpu)
            .unwrap()
            .usage
            .compute_estimate_bytes
    }

    fn options(parallel: u32, flash_attention: bool) -> PlacementOptions {
        PlacementOptions {
            context: 16_384,
            ubatch: 512,
            parallel,
            flash_attention,
            kv_unified: false,
            ..Default::default()
        }
    }

    #[test]
    fn the_replay_gives_llama_cpps_own_buffer_to_the_byte() {
        // The byte counts ggml-alloc reached for these graphs in llama.cpp's `llama-fit-params`
        // (0c1e570, CPU backend; it prints them as 126, 114 and 582 MiB).
        let model = three_layers(TinyQwen3Next::with_linear_heads(3, 2048, 16, 32));
        assert_eq!(compute_on_the_host(&model, &options(1, true)), 132_659_232);
        assert_eq!(compute_on_the_host(&model, &options(4, true)), 120_076_320);
        assert_eq!(compute_on_the_host(&model, &options(1, false)), 610_281_504);
    }

    #[test]
    fn qwen3_5_graphs_give_llama_cpps_own_buffer_to_the_byte() {
        // Eight layers (every fourth full attention), 16/48 linear heads, n_ff 8 192, a
        // 32 000-token vocabulary, eight slots: llama.cpp's allocator reached these byte counts
        // (printed as 118 and 115 MiB).
        for (hybrid, bytes) in [
            (QwenHybrid::Qwen35Moe, 124_735_520),
            (QwenHybrid::Qwen35, 121_524_256),
        ] {
            let model = TinyQwen3Next {
                hybrid,
                n_ff: 8192,
                full_attention_interval: 4,
                ..TinyQwen3Next::with_linear_heads(8, 2048, 16, 48)
            };
            let shape = shape_of_writer(&model.writer(&synthetic_vocab(32_000))).unwrap();
            let options = PlacementOptions {
                context: 16_384,
                parallel: 8,
                kv_unified: false,
                ..Default::default()
            };
            assert_eq!(compute_on_the_host(&shape, &options), bytes, "{hybrid:?}");
        }
    }

    #[test]
    fn split_layers_give_each_device_its_own_smaller_graph() {
        let model = three_layers(TinyQwen3Next::with_linear_heads(3, 2048, 16, 32));
        // The output on the host, computed there: no pipeline parallelism (its copies of every
        // input would outgrow the whole graph) and no op offload.
        let options = PlacementOptions {
            tensor_split: vec![2.0, 1.0],
            n_gpu_layers: Some(3),
            op_offload: false,
            ..options(1, true)
        };
        let whole = compute_on_the_host(&model, &options);
        let plan = plan(&model, &gpus(2, 64 * GIB), &options).unwrap();
        let compute = |id| plan.device(id).unwrap().usage.compute_estimate_bytes;
        let (first, second) = (compute(DeviceId::Gpu(0)), compute(DeviceId::Gpu(1)));
        assert!(first > 0 && second > 0, "{first} {second}");
        assert!(
            first < whole && second < whole,
            "{first} {second} of {whole}"
        );
    }

    #[test]
    fn hostile_dimensions_fall_back_to_the_saturating_estimate() {
        let mut model = three_layers(TinyQwen3Next::with_linear_heads(3, 2048, 16, 32));
        model.attention.recurrent = model.attention.recurrent.map(|shape| RecurrentShape {
            inner_size: u32::MAX,
            state_size: u32::MAX,
            ..shape
        });
        model.n_vocab = u32::MAX;
        let options = PlacementOptions {
            ubatch: u32::MAX,
            batch: u32::MAX,
            parallel: u32::MAX,
            ..options(1, true)
        };
        assert_eq!(compute_on_the_host(&model, &options), u64::MAX);
    }
}
