//! The graph llama.cpp reserves for Qwen3-Next (`src/models/qwen3next.cpp`, the fused gated
//! delta net of `delta-net-base.cpp`, `build_attn` and `build_moe_ffn` of `llama-graph.cpp`)
//! and its Qwen3.5 successors (`qwen35moe.cpp`, `qwen35.cpp`), tensor by tensor, for
//! [`allocator::reserve`]. Its linear-attention layers free and reuse
//! some thirty tensors of every size in an order no formula of ours captured (the fitted
//! envelope was 6.5 % under to 12 % over llama.cpp's figure); replaying the allocator over the
//! same graph gives llama.cpp's own number.

use super::allocator::{self, Element, Graph, Reuse, TensorId};
use crate::kv::{self, ContextGeometry};
use crate::layers::LayerDevices;
use crate::model::{ModelShape, RecurrentKind, RecurrentShape};
use crate::options::{DeviceId, PlacementOptions};

/// The CPU buffer's alignment (`TENSOR_ALIGNMENT`); other backends align to 128 or 256 bytes,
/// which moves a graph of megabyte tensors by far less than a mebibyte.
const ALIGNMENT: u64 = 32;

/// The compute buffer of `device` for a Qwen3-Next model, or `None` for a model this graph
/// does not describe (no gated delta net, no experts).
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    options: &PlacementOptions,
) -> Option<u64> {
    let linear = model
        .attention
        .recurrent
        .filter(|r| r.kind == RecurrentKind::GatedDeltaNet)?;
    let flavour = Flavour::of(model)?;
    if linear.group_count == 0 || linear.time_step_rank == 0 {
        return None;
    }
    let experts_used = model.experts.map_or(1, |e| e.used);
    let mut builder = Builder::new(model, linear, experts_used, g, options);
    builder.flavour = flavour;
    builder.forms = LayerForms::of(model);
    if !plausible(model, &builder.batch, g) {
        return None;
    }
    let held: Vec<usize> = (0..layers.layers.len())
        .filter(|&il| layers.layers[il] == device)
        .collect();
    let holds_output = layers.output == device;
    if held.is_empty() && !holds_output {
        return Some(0);
    }
    builder.build(model, &held, holds_output, options, g);
    Some(allocator::reserve(&builder.graph, ALIGNMENT))
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

/// The batch llama.cpp reserves for (`llama_context::sched_reserve`): `min(n_ctx, ubatch)`
/// tokens spread evenly over `n_seq_max` sequences (rounded up to a multiple of them), every
/// token an output.
#[derive(Clone, Copy)]
struct Batch {
    tokens: u64,
    sequences: u64,
    /// Tokens per sequence.
    per_sequence: u64,
    /// KV streams: one per sequence unless the cache is unified.
    streams: u64,
}

/// The graph under construction with the inputs every layer reads.
struct Builder {
    graph: Graph,
    batch: Batch,
    n_embd: u64,
    n_vocab: u64,
    linear: RecurrentShape,
    experts_used: u64,
    flash_attention: bool,
    tokens: Option<TensorId>,
    state_copy: Option<TensorId>,
    positions: Option<TensorId>,
    key_rows: Option<TensorId>,
    value_rows: Option<TensorId>,
    mask: Option<TensorId>,
    output_rows: Option<TensorId>,
    forms: LayerForms,
    flavour: Flavour,
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

impl Builder {
    fn new(
        model: &ModelShape,
        linear: RecurrentShape,
        experts_used: u32,
        g: &ContextGeometry,
        options: &PlacementOptions,
    ) -> Builder {
        let sequences = u64::from(options.parallel.max(1));
        let ubatch = u64::from(options.ubatch.min(options.batch).max(1));
        let tokens = ubatch.min(g.n_ctx.max(1)).div_ceil(sequences) * sequences;
        Builder {
            graph: Graph::default(),
            batch: Batch {
                tokens,
                sequences,
                per_sequence: tokens / sequences,
                streams: g.n_stream.max(1),
            },
            n_embd: u64::from(model.n_embd),
            n_vocab: u64::from(model.n_vocab),
            linear,
            experts_used: u64::from(experts_used.max(1)),
            flash_attention: options.flash_attention,
            tokens: None,
            state_copy: None,
            positions: None,
            key_rows: None,
            value_rows: None,
            mask: None,
            output_rows: None,
            forms: LayerForms::default(),
            flavour: Flavour::Qwen3Next,
        }
    }

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
        let (tokens, n_embd) = (self.batch.tokens, self.n_embd);
        let first_layer = held.first().is_some_and(|&il| il == 0);
        let attention_layer = held
            .iter()
            .copied()
            .find(|&il| !model.attention.is_recurrent(il));
        // Inputs are placed first, in the order the graph meets them.
        let mut input = if first_layer {
            let ids = self.input(Element::I32, [tokens, 1, 1, 1]);
            self.tokens = Some(ids);
            // The embeddings input is allocated though token ids feed this graph.
            self.input(Element::F32, [n_embd, tokens, 1, 1]);
            None
        } else {
            // A device after the first receives the previous layer's output.
            Some(self.input(Element::F32, [n_embd, tokens, 1, 1]))
        };
        if held.iter().any(|&il| model.attention.is_recurrent(il)) {
            self.state_copy = Some(self.input(Element::I32, [self.batch.sequences, 1, 1, 1]));
        }
        if let Some(il) = attention_layer {
            // Qwen3.5's M-RoPE reads four positions per token.
            let per_token = if self.flavour == Flavour::Qwen3Next {
                1
            } else {
                4
            };
            self.positions = Some(self.input(Element::I32, [tokens * per_token, 1, 1, 1]));
            self.key_rows = Some(self.input(Element::I64, [tokens, 1, 1, 1]));
            // Without flash attention V is stored transposed, written element by element.
            let value_rows = if self.flash_attention {
                tokens
            } else {
                let kv_heads = model.attention.head_count_kv.get(il).copied().unwrap_or(0);
                tokens * u64::from(kv_heads) * u64::from(model.attention.value_length)
            };
            self.value_rows = Some(self.input(Element::I64, [value_rows, 1, 1, 1]));
            let cells = kv::cells(&model.attention, il, options, g);
            let element = if self.flash_attention {
                Element::F16
            } else {
                Element::F32
            };
            let per_stream = tokens / self.batch.streams;
            self.mask = Some(self.input(element, [cells, per_stream, 1, self.batch.streams]));
        }
        if holds_output {
            self.output_rows = Some(self.input(Element::I32, [tokens, 1, 1, 1]));
        }
        if let Some(ids) = self.tokens {
            let table = self
                .graph
                .external(Element::F32, [n_embd, self.n_vocab, 1, 1]);
            input = Some(self.op(Reuse::Fresh, [n_embd, tokens, 1, 1], &[table, ids]));
        }
        let Some(mut cur) = input else { return };
        for &il in held {
            cur = self.layer(model, il, cur, options, g);
        }
        if holds_output {
            self.output(cur);
        }
    }

    fn input(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        let id = self.graph.input(element, ne);
        self.graph.expand(id);
        id
    }

    fn weight(&mut self, ne: [u64; 4]) -> TensorId {
        self.graph.external(Element::F32, ne)
    }

    /// An f32 result of `ne` from `sources`.
    fn op(&mut self, reuse: Reuse, ne: [u64; 4], sources: &[TensorId]) -> TensorId {
        self.graph.op(reuse, Element::F32, ne, sources)
    }

    /// `ggml_mul_mat(weight, x)`: `rows` outputs for each of x's columns.
    fn matmul(&mut self, rows: u64, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let weight = self.weight([ne[0], rows, 1, 1]);
        self.op(Reuse::Fresh, [rows, ne[1], ne[2], ne[3]], &[weight, x])
    }

    /// `build_norm(x, weight, LLM_NORM_RMS)`: the norm, then the weight applied in place.
    fn rms_norm(&mut self, x: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let norm = self.op(Reuse::InPlace, ne, &[x]);
        let weight = self.weight([ne[0], 1, 1, 1]);
        self.op(Reuse::InPlace, ne, &[norm, weight])
    }

    /// An element-wise operation over `x` (with `other` broadcast), which may work in place.
    fn elementwise(&mut self, x: TensorId, other: &[TensorId]) -> TensorId {
        let ne = self.graph.extents(x);
        let mut sources = vec![x];
        sources.extend_from_slice(other);
        self.op(Reuse::InPlace, ne, &sources)
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
        let key_width = head * key_heads;
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
            0,
        );
        let k = self.graph.view(
            convolved,
            [head, key_heads, per_sequence, sequences],
            strides,
            key_width * 4,
        );
        let v = self.graph.view(
            convolved,
            [value_head, value_heads, per_sequence, sequences],
            [4, value_head * 4, row, row * per_sequence],
            2 * key_width * 4,
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
            0,
        );
        let new_state = self.graph.view(
            fused,
            [value_head, value_head, value_heads, sequences],
            contiguous_strides([value_head, value_head, value_heads, sequences]),
            value_head * value_heads * tokens * 4,
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
        let projected = self.matmul(self.n_embd, flat);
        self.graph.reshape(projected, [self.n_embd, tokens, 1, 1])
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
            let b = self.graph.view(ba, split, strides, 0);
            let a = self.graph.view(ba, split, strides, per_group * 4);
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
        let query = self.graph.view(mixed, part(head), strides, 0);
        let key = self.graph.view(mixed, part(head), strides, head * 4);
        let value = self
            .graph
            .view(mixed, part(per_group), strides, 2 * head * 4);
        let z = self
            .graph
            .view(mixed, part(per_group), strides, (2 * head + per_group) * 4);
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
            .view(input, [kept, channels, sequences, 1], strides, 0);
        let cache = self.cache([shape.conv_state_elements(), sequences, 1, 1]);
        let written = self.graph.copy(last, cache);
        self.graph.expand(written);
        input
    }

    /// `build_rs`: each sequence's stored state gathered by the state-copy indices.
    fn recurrent_state(&mut self, elements: u64) -> TensorId {
        let sequences = self.batch.sequences;
        // The zeroed slot and the extra sequences' copies touch only the cache (and none in the
        // reserved batch), so they are left out.
        let cache = self.cache([elements, sequences, 1, 1]);
        let indices = self.state_copy.unwrap_or(cache);
        let gathered = self.op(Reuse::Fresh, [elements, sequences, 1, 1], &[cache, indices]);
        self.graph.expand(gathered);
        gathered
    }

    /// A recurrent or KV cache tensor: memory outside the compute buffer.
    fn cache(&mut self, ne: [u64; 4]) -> TensorId {
        self.graph.external(Element::F32, ne)
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
    /// cache written and read (`build_attn`, with or without flash attention), the gate.
    fn attention(
        &mut self,
        model: &ModelShape,
        il: usize,
        x: TensorId,
        options: &PlacementOptions,
        g: &ContextGeometry,
    ) -> TensorId {
        let Batch {
            tokens, streams, ..
        } = self.batch;
        let attention = &model.attention;
        let head = u64::from(attention.key_length);
        let heads = u64::from(attention.head_count.get(il).copied().unwrap_or(0));
        let kv_heads = u64::from(attention.head_count_kv.get(il).copied().unwrap_or(0));
        let cells = kv::cells(attention, il, options, g);
        let per_stream = tokens / streams;
        let full = self.matmul(2 * head * heads, x);
        let full = self.graph.reshape(full, [2 * head, heads, tokens, 1]);
        let strides = self.graph.strides(full);
        let q = self.graph.view(full, [head, heads, tokens, 1], strides, 0);
        let gate = self
            .graph
            .view(full, [head, heads, tokens, 1], strides, head * 4);
        let k = self.matmul(head * kv_heads, x);
        let v = self.matmul(head * kv_heads, x);
        let k = self.graph.reshape(k, [head, kv_heads, tokens, 1]);
        let v = self.graph.reshape(v, [head, kv_heads, tokens, 1]);
        let q = self.rms_norm(q);
        let k = self.rms_norm(k);
        let positions = self.positions.unwrap_or(x);
        let q = self.elementwise(q, &[positions]);
        let k = self.elementwise(k, &[positions]);
        // `build_attn` expands Q, then V, then K (so that RoPE may write K into the cache).
        self.graph.expand(q);
        self.graph.expand(v);
        self.graph.expand(k);
        for (projection, rows) in [(k, self.key_rows), (v, self.value_rows)] {
            let flat = self
                .graph
                .reshape(projection, [head * kv_heads, tokens, 1, 1]);
            let cache = self
                .graph
                .external(Element::F16, [head * kv_heads, cells, 1, 1]);
            let rows = rows.unwrap_or(cache);
            let written = self.graph.write_rows(cache, flat, rows);
            self.graph.expand(written);
        }
        let q = self.graph.reshape(q, [head, heads, per_stream, streams]);
        let q = self.graph.permute(q, [0, 2, 1, 3]);
        let keys = self
            .graph
            .external(Element::F16, [head, cells, kv_heads, streams]);
        let values = self
            .graph
            .external(Element::F16, [head, cells, kv_heads, streams]);
        let mask = self.mask.unwrap_or(keys);
        let attended = if self.flash_attention {
            let out = self.op(
                Reuse::Fresh,
                [head, heads, per_stream, streams],
                &[q, keys, values, mask],
            );
            self.graph.reshape(out, [head * heads, tokens, 1, 1])
        } else {
            let scores = self.op(
                Reuse::Fresh,
                [cells, per_stream, heads, streams],
                &[keys, q],
            );
            let weights = self.elementwise(scores, &[mask]);
            let mixed = self.op(
                Reuse::Fresh,
                [head, per_stream, heads, streams],
                &[values, weights],
            );
            let mixed = self.graph.permute(mixed, [0, 2, 1, 3]);
            self.op(Reuse::Fresh, [head * heads, tokens, 1, 1], &[mixed])
        };
        let gate = self.op(Reuse::Fresh, [head * heads, tokens, 1, 1], &[gate]);
        let gate = self.elementwise(gate, &[]);
        let gated = self.elementwise(attended, &[gate]);
        self.matmul(self.n_embd, gated)
    }

    /// `build_layer_ffn`: the routed experts (`build_moe_ffn`: softmax gating, top-k, weights
    /// normalized, gate/up/down per selected expert, their weighted sum) and, when the file has
    /// one, the shared expert gated by a sigmoid.
    fn feed_forward(&mut self, model: &ModelShape, il: usize, x: TensorId) -> TensorId {
        let tokens = self.batch.tokens;
        let Some(experts) = model.experts else {
            return self.dense_feed_forward(u64::from(model.n_ff), x);
        };
        let (count, used) = (u64::from(experts.count), self.experts_used);
        let expert_ff = match experts.feed_forward_length {
            0 => u64::from(model.n_ff) / used,
            ff => u64::from(ff),
        };
        let logits = self.matmul(count, x);
        let probabilities = self.elementwise(logits, &[]);
        let per_expert = self.graph.reshape(probabilities, [1, count, tokens, 1]);
        let order = self.graph.op(
            Reuse::Fresh,
            Element::I32,
            [count, tokens, 1, 1],
            &[probabilities],
        );
        let selected = self
            .graph
            .view(order, [used, tokens, 1, 1], self.graph.strides(order), 0);
        let weights = self.op(Reuse::Fresh, [1, used, tokens, 1], &[per_expert, selected]);
        let weights = self.graph.reshape(weights, [used, tokens, 1, 1]);
        let sum = self.op(Reuse::Fresh, [1, tokens, 1, 1], &[weights]);
        let sum = self.elementwise(sum, &[]);
        let weights = self.op(Reuse::InPlace, [used, tokens, 1, 1], &[weights, sum]);
        let weights = self.graph.reshape(weights, [1, used, tokens, 1]);
        self.graph.expand(weights);
        let x3 = self.graph.reshape(x, [self.n_embd, 1, tokens, 1]);
        let activated = if LayerForms::has(&self.forms.gate_up, il) {
            let both = self.expert_matmul(2 * expert_ff, x3, selected);
            let strides = self.graph.strides(both);
            let gate = self
                .graph
                .view(both, [expert_ff, used, tokens, 1], strides, 0);
            let up = self
                .graph
                .view(both, [expert_ff, used, tokens, 1], strides, expert_ff * 4);
            self.op(Reuse::Fresh, [expert_ff, used, tokens, 1], &[gate, up])
        } else {
            let up = self.expert_matmul(expert_ff, x3, selected);
            let gate = self.expert_matmul(expert_ff, x3, selected);
            self.op(Reuse::Fresh, [expert_ff, used, tokens, 1], &[gate, up])
        };
        let down = self.expert_matmul(self.n_embd, activated, selected);
        let weighted = self.elementwise(down, &[weights]);
        self.graph.expand(weighted);
        let strides = self.graph.strides(weighted);
        let views: Vec<TensorId> = (0..used)
            .map(|i| {
                let view = self.graph.view(
                    weighted,
                    [self.n_embd, tokens, 1, 1],
                    [4, strides[2], strides[2], strides[2]],
                    i * strides[1],
                );
                self.graph.expand(view);
                view
            })
            .collect();
        let mut sum = views[0];
        for &view in &views[1..] {
            sum = self.elementwise(sum, &[view]);
            self.graph.expand(sum);
        }
        if used == 1 {
            sum = self.op(Reuse::Fresh, [self.n_embd, tokens, 1, 1], &[sum]);
        }
        if !LayerForms::has(&self.forms.shared_expert, il) {
            return sum;
        }
        let shared_ff = match experts.shared_feed_forward_length {
            0 => u64::from(model.n_ff),
            ff => u64::from(ff),
        };
        let shared = self.dense_feed_forward(shared_ff, x);
        let shared_gate = self.matmul(1, x);
        let shared_gate = self.elementwise(shared_gate, &[]);
        let shared = self.elementwise(shared, &[shared_gate]);
        self.elementwise(sum, &[shared])
    }

    /// `build_ffn` with SiLU gating (`LLM_FFN_SILU`, `LLM_FFN_PAR`): up, gate, their SwiGLU and
    /// the down projection.
    fn dense_feed_forward(&mut self, width: u64, x: TensorId) -> TensorId {
        let tokens = self.batch.tokens;
        let up = self.matmul(width, x);
        let gate = self.matmul(width, x);
        let activated = self.op(Reuse::Fresh, [width, tokens, 1, 1], &[gate, up]);
        self.matmul(self.n_embd, activated)
    }

    /// `ggml_mul_mat_id`: `rows` outputs per selected expert and token.
    fn expert_matmul(&mut self, rows: u64, x: TensorId, selected: TensorId) -> TensorId {
        let ne = self.graph.extents(x);
        let weight = self.weight([ne[0], rows, 1, 1]);
        let used = self.graph.extents(selected)[0];
        self.op(
            Reuse::Fresh,
            [rows, used, self.batch.tokens, 1],
            &[weight, x, selected],
        )
    }

    /// The final norm, the output rows and the logits: all three graph outputs, never freed.
    fn output(&mut self, x: TensorId) {
        let tokens = self.batch.tokens;
        let normed = self.rms_norm(x);
        self.graph.mark_output(normed);
        let rows = self.output_rows.unwrap_or(normed);
        let selected = self.op(Reuse::Fresh, [self.n_embd, tokens, 1, 1], &[normed, rows]);
        self.graph.mark_output(selected);
        let logits = self.matmul(self.n_vocab, selected);
        self.graph.mark_output(logits);
        self.graph.expand(logits);
    }
}

/// Elements no tensor of a real graph comes near (a 256 K vocabulary's logits over 8 K tokens
/// are 2^31); past it, a damaged or hostile header's dimensions could overflow the plain
/// arithmetic of [`Builder`], so such a model gets the saturating formulas instead.
const MAX_ELEMENTS: u64 = 1 << 46;

/// Whether every tensor of the graph stays under [`MAX_ELEMENTS`]: the products below bound
/// each one (and every byte offset into it).
fn plausible(model: &ModelShape, batch: &Batch, g: &ContextGeometry) -> bool {
    let attention = &model.attention;
    let Some(linear) = attention.recurrent else {
        return false;
    };
    let widest = |values: &[u32]| u64::from(values.iter().copied().max().unwrap_or(0));
    let heads = widest(&attention.head_count).max(widest(&attention.head_count_kv));
    let head = u64::from(attention.key_length.max(attention.value_length));
    let experts = model.experts.map_or(0, |e| {
        u64::from(e.count.max(e.used)).saturating_mul(u64::from(
            e.feed_forward_length.max(e.shared_feed_forward_length),
        ))
    });
    let rows = [
        u64::from(model.n_vocab),
        u64::from(model.n_embd),
        u64::from(model.n_ff),
        g.n_ctx.saturating_mul(heads.max(1)),
        heads.saturating_mul(head).saturating_mul(2),
        experts.saturating_mul(2),
        linear.conv_channels(),
        linear.ssm_state_elements(),
        u64::from(linear.conv_kernel).saturating_mul(linear.conv_channels()),
        u64::from(linear.inner_size).saturating_mul(u64::from(linear.state_size)),
        u64::from(linear.time_step_rank).saturating_mul(u64::from(linear.state_size)),
    ];
    let columns = batch
        .tokens
        .saturating_add(batch.sequences.saturating_mul(u64::from(linear.state_size)))
        .saturating_add(u64::from(linear.conv_kernel).saturating_mul(batch.sequences));
    rows.iter()
        .all(|&row| row.saturating_mul(columns.max(1)) <= MAX_ELEMENTS)
}

fn contiguous_strides(ne: [u64; 4]) -> [u64; 4] {
    [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]]
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

    fn compute_on_one_gpu(model: &ModelShape, options: &PlacementOptions) -> u64 {
        let plan = plan(model, &gpus(1, 64 * GIB), options).unwrap();
        plan.device(DeviceId::Gpu(0))
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
        assert_eq!(compute_on_one_gpu(&model, &options(1, true)), 132_659_232);
        assert_eq!(compute_on_one_gpu(&model, &options(4, true)), 120_076_320);
        assert_eq!(compute_on_one_gpu(&model, &options(1, false)), 610_281_504);
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
            assert_eq!(compute_on_one_gpu(&shape, &options), bytes, "{hybrid:?}");
        }
    }

    #[test]
    fn split_layers_give_each_device_its_own_smaller_graph() {
        let model = three_layers(TinyQwen3Next::with_linear_heads(3, 2048, 16, 32));
        let options = PlacementOptions {
            tensor_split: vec![2.0, 1.0],
            ..options(1, true)
        };
        let whole = compute_on_one_gpu(&model, &options);
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
        assert_eq!(compute_on_one_gpu(&model, &options), u64::MAX);
    }
}
