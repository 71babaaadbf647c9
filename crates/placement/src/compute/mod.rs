//! The compute buffer a device needs: llama.cpp's allocator reserves the worst-case graph for
//! one micro-batch and reuses memory between the graph's phases, so the buffer is the largest
//! phase with what is alive beside it, not the sum of the phases. Each phase below was measured
//! against `llama-fit-params -fitp on` on the CPU backend. Where the planner knows the graph
//! llama.cpp builds (`llama`, `qwen2`, `qwen3`, `qwen3moe`, `gemma3` with its sliding window,
//! `phi3`, `command-r`, `minimax-m2`, and `gemma-embedding`, which keeps no cache: [`llama`];
//! `deepseek2` with MLA and `glm-dsa` with its indexer: [`deepseek2`], [`dsa`]; `deepseek4`
//! with its hyper-connections and compressed caches: [`deepseek4`]; `gpt-oss`: [`gpt_oss`];
//! `gemma4`, dense, with experts beside the dense feed-forward or with each layer's own
//! embeddings and shared caches: [`gemma4`]; `gemma3n` with its four AltUp streams:
//! [`gemma3n`]; `minimax-m3` with its sparse attention: [`minimax_m3`]; `mamba` and `mamba2`:
//! [`mamba`]; Qwen3-Next and Qwen3.5, whose linear-attention layers defeated such formulas:
//! [`qwen_hybrid`]), it replays ggml's allocator over it instead ([`allocator`], [`builder`])
//! and gets llama.cpp's own byte count. `cargo run -p rigdeck-core --example estimate_vs_dry_run` prints the grid.

mod allocator;
mod builder;
mod deepseek2;
mod deepseek4;
mod dsa;
mod gemma3n;
mod gemma4;
mod gemma_layers;
mod gpt_oss;
mod llama;
mod mamba;
mod memo;
mod minimax_m3;
mod op_offload;
mod qwen_hybrid;
mod scheduler;

pub(crate) use memo::{remembered_matches, remembering};
pub(crate) use scheduler::Scheduler;

use super::kv::{self, ContextGeometry};
use super::layers::LayerDevices;
use super::model::{ModelShape, RecurrentKind};
use super::options::{DeviceId, PlacementOptions};
use super::plan::Plan;

/// Rows of the embedding width alive beside the logits on the output device: the last
/// layer's output and the final norm's.
const OUTPUT_ROWS: u64 = 2;

/// Beside the logits of a model without attention (Mamba) one more row is alive (measured).
const RECURRENT_OUTPUT_ROWS: u64 = 3;

/// Beside the logits of a model with several residual streams (DeepSeek V4's hyper-connections),
/// on top of the streams of the last layer's output: the head's mix of them, its norm and the
/// final norm (measured on gguf-py files: up to 6.5 rows of four streams' model).
const HYPER_CONNECTION_HEAD_ROWS: u64 = 3;

/// Beside a flash attention's queries, output and de-roped output and the layer's input streams
/// in a model with several residual streams: the normed input, the low-rank output's groups
/// and what the allocator could not reuse between them (measured: 4.5 rows at most).
const HYPER_CONNECTION_LAYER_ROWS: u64 = 5;

/// Rows of the embedding width alive beside a feed-forward's gate, up and gated product: the
/// residual stream, the normed input and the block's output (measured: 4 on every shape).
const FEED_FORWARD_ROWS: u64 = 4;

/// For a model whose graph the planner does not replay, the line a plan shows: its compute
/// figure is an estimate from the phase formulas, and how far those have missed llama.cpp's
/// (`llama-fit-params` on the CPU backend, files written by llama.cpp's gguf-py or ours);
/// `None` when the figure is llama.cpp's own byte count.
pub(crate) fn compute_estimate_note(model: &ModelShape) -> Option<String> {
    let replayed = [
        qwen_hybrid::replays,
        llama::replays,
        deepseek2::replays,
        deepseek4::replays,
        gpt_oss::replays,
        gemma3n::replays,
        gemma4::replays,
        minimax_m3::replays,
        mamba::replays,
    ];
    if replayed.iter().any(|replays| replays(model)) {
        return None;
    }
    let missed = match model.architecture.as_str() {
        "deepseek2" => {
            "it has come out from 18.5 % under to 5 % over llama.cpp's figure for this architecture"
        }
        "glm-dsa" => {
            "it has come out from 2.5 % under to 13 % over llama.cpp's figure for this architecture"
        }
        // A header the replay does not read (a compression llama.cpp does not load, widths
        // that do not divide). Measured on gguf-py files of DeepSeek V4 Flash's layers under
        // 129 280 and 32 000 tokens, and narrower ones; without flash attention the formulas
        // count the indexer's scores over every cell, not over its cache compressed by 4.
        "deepseek4" => {
            "it has come out from 3 % to 74 % over llama.cpp's figure for this architecture (the most without flash attention)"
        }
        // Its sparse attention's block mask (cache cells × tokens × indexer heads) is not in
        // the formulas (gguf-py files of MiniMax-M3's layers).
        "minimax-m3" => {
            "it has come out from 14 % under to 1.2 % over llama.cpp's figure for this architecture (its sparse attention's masks are not counted)"
        }
        _ => "it has not been measured against llama.cpp for this architecture",
    };
    Some(format!(
        "The compute buffer of this {} model is an estimate (llama.cpp's graph is not replayed for its architecture): {missed}; leave a margin or check with llama.cpp's dry run.",
        model.architecture
    ))
}

/// Whether llama.cpp runs `options`' cache with flash attention though `-fa` is off: a quantized
/// V cache needs it (`llama_init_from_model` turns `-fa auto` on for one and refuses `-fa off`),
/// and MLA's one cache is K and V at once (their types must match), so there a quantized K is a
/// quantized V.
fn needs_flash_attention(model: &ModelShape, options: &PlacementOptions) -> bool {
    let key_is_value = model.attention.caches_key_only();
    !options.flash_attention
        && (options.cache_type_v.is_quantized()
            || (key_is_value && options.cache_type_k.is_quantized()))
}

/// When flash attention is off with a cache that needs it ([`needs_flash_attention`]), the line
/// a plan shows: llama.cpp refuses `-fa off` with that cache, and the compute figures are the
/// graph it builds with flash attention on (`-fa auto` turns it on); `None` otherwise.
pub(crate) fn flash_attention_note(
    model: &ModelShape,
    options: &PlacementOptions,
) -> Option<String> {
    if !needs_flash_attention(model, options) {
        return None;
    }
    let why = if model.attention.caches_key_only() {
        format!(
            "this {} model caches K and V as one ({}), so its V cache is the quantized {} K cache (-ctk and -ctv must match)",
            model.architecture,
            one_cache(model),
            options.cache_type_k.name()
        )
    } else {
        format!("the V cache is quantized ({})", options.cache_type_v.name())
    };
    Some(format!(
        "Flash attention is off but {why}: llama.cpp refuses to start with -fa off and such a cache; the compute figures are for flash attention on, which -fa auto (llama-server's default) turns on. Use -fa auto or -fa on, or an f16 cache without flash attention."
    ))
}

/// When an MLA model's cache has different K and V types, the line a plan shows: its one cache
/// is K and V at once, and `llama_init_from_model` refuses to start with `-ctk` and `-ctv`
/// apart; `None` otherwise.
pub(crate) fn cache_types_note(model: &ModelShape, options: &PlacementOptions) -> Option<String> {
    if !model.attention.caches_key_only() || options.cache_type_k == options.cache_type_v {
        return None;
    }
    let (k, v) = (options.cache_type_k.name(), options.cache_type_v.name());
    Some(format!(
        "llama.cpp refuses to start with this cache: this {} model caches K and V as one ({}), so -ctk and -ctv must be the same type (here {k} and {v}): set both to {k}, or both to {v}.",
        model.architecture,
        one_cache(model)
    ))
}

/// Why a model's cache is K and V at once, as a plan says it.
fn one_cache(model: &ModelShape) -> &'static str {
    if model.attention.mla {
        "MLA"
    } else {
        "compressed caches"
    }
}

/// When layers stay in host memory beside a GPU for a micro-batch under the op-offload
/// threshold, the line a plan shows: the host computes its layers, but llama.cpp's scheduler
/// still runs their operations over many rows (the per-head norms) on the first GPU, with small
/// copies the replay does not build; `None` otherwise (past the threshold op offload is
/// replayed, and with `--no-op-offload` the host computes everything it holds).
pub(crate) fn host_layers_note(plan: &Plan, options: &PlacementOptions) -> Option<String> {
    let holds_layers = |wanted: fn(&DeviceId) -> bool| {
        plan.devices
            .iter()
            .any(|d| wanted(&d.spec.id) && !d.usage.layers.is_empty())
    };
    let micro_batch = u64::from(options.ubatch.min(options.batch));
    let partly = options.op_offload
        && micro_batch < op_offload::MIN_BATCH
        && holds_layers(|id| *id == DeviceId::Cpu)
        && plan
            .devices
            .iter()
            .any(|d| matches!(d.spec.id, DeviceId::Gpu(_)));
    partly.then(|| {
        format!("Layers in host memory beside a GPU at a micro-batch under {} tokens: the host computes them, but llama.cpp still runs their operations over many rows (the per-head norms of Q and K) on the first GPU, copying those small weights and activations into its compute buffer, which the figures here do not count (measured on an H200: 1.27 MiB over the plan for a qwen3moe with 5 host layers at -ub 16). Leave that margin on the first GPU, or use --no-op-offload.", op_offload::MIN_BATCH)
    })
}

/// The compute buffer of `device` in bytes (before any correction from this rig's records).
/// The phases:
/// - on the output device, the logits (n_vocab × ubatch f32) and [`OUTPUT_ROWS`];
/// - on a device with layers, the attention mask, alive from the first layer to the last,
///   under the larger of the feed-forward phase ([`feed_forward_width`]) and the attention
///   phase ([`attention_phase`]);
/// - on a device with recurrent layers, the recurrent phase ([`recurrent_phase`]), which
///   carries its own activations;
/// - for a DSA model with flash attention, its own attention phase and the leaves it keeps
///   ([`sparse_flash_attention`]).
///
/// A cache that needs flash attention ([`needs_flash_attention`]) is planned with it on, as
/// llama.cpp runs it.
pub(crate) fn compute_estimate(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> u64 {
    let with_flash_attention;
    let options = if needs_flash_attention(model, options) {
        with_flash_attention = PlacementOptions {
            flash_attention: true,
            ..options.clone()
        };
        &with_flash_attention
    } else {
        options
    };
    memo::recall(device, layers, g, (options, scheduler), || {
        estimate(model, device, layers, g, (options, scheduler))
    })
}

/// [`compute_estimate`] without the memo: the replayed graph, or the phase formulas.
fn estimate(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> u64 {
    let share = (options, scheduler);
    let replayed = qwen_hybrid::compute_bytes(model, device, layers, g, share)
        .or_else(|| llama::compute_bytes(model, device, layers, g, share))
        .or_else(|| deepseek2::compute_bytes(model, device, layers, g, share))
        .or_else(|| deepseek4::compute_bytes(model, device, layers, g, share))
        .or_else(|| gpt_oss::compute_bytes(model, device, layers, g, share))
        .or_else(|| gemma3n::compute_bytes(model, device, layers, g, share))
        .or_else(|| gemma4::compute_bytes(model, device, layers, g, share))
        .or_else(|| minimax_m3::compute_bytes(model, device, layers, g, share))
        .or_else(|| mamba::compute_bytes(model, device, layers, g, share));
    if let Some(bytes) = replayed {
        return bytes;
    }
    let holds_layers = layers.layers.contains(&device);
    let holds_output = layers.output == device;
    if !holds_layers && !holds_output {
        return 0;
    }
    let ub = u64::from(options.ubatch.min(options.batch).max(1));
    let mask = if attends(model) && holds_layers {
        attention_mask(model, g, options, ub)
    } else {
        0
    };
    let output = if holds_output {
        output_phase(model, ub, mask)
    } else {
        0
    };
    if !holds_layers {
        return output;
    }
    let (in_layers, kept) = layer_phases(model, device, layers, g, options, ub, mask);
    output.max(in_layers).saturating_add(kept)
}

/// The largest phase inside the layers `device` holds (the mask alive beside it), and what
/// stays allocated for the whole graph on top of it (DSA's kept rows).
fn layer_phases(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    options: &PlacementOptions,
    ub: u64,
    mask: u64,
) -> (u64, u64) {
    let heads = u64::from(
        model
            .attention
            .head_count
            .iter()
            .copied()
            .max()
            .unwrap_or(0),
    );
    let attention = if attends(model) {
        attention_phase(model, heads, g.n_ctx_seq, ub, options.flash_attention)
    } else {
        0
    };
    let feed_forward = feed_forward_phase(model, ub, options.flash_attention);
    let mut in_layers = mask.saturating_add(feed_forward.max(attention));
    let mut kept = 0;
    let attention_layers = layers
        .layers
        .iter()
        .zip(&model.attention.head_count_kv)
        .filter(|&(&d, &kv_heads)| d == device && kv_heads > 0)
        .count() as u64;
    if options.flash_attention {
        if let Some(dsa) = sparse_flash_attention(model, heads, g.n_ctx_seq, ub, attention_layers) {
            in_layers = in_layers.max(dsa.phase);
            kept = dsa.kept;
        }
    }
    let holds_recurrent = layers
        .layers
        .iter()
        .enumerate()
        .any(|(il, &d)| d == device && model.attention.is_recurrent(il));
    if holds_recurrent {
        let sequences = u64::from(options.parallel.max(1));
        in_layers = in_layers.max(recurrent_phase(model, ub, sequences));
    }
    (in_layers, kept)
}

/// The feed-forward phase: gate, up and their product ([`feed_forward_width`] each) beside
/// [`FEED_FORWARD_ROWS`]; without flash attention half a row of the key and value widths comes
/// on top (measured: the blocks the attention freed are not where the feed-forward's tensors
/// fit).
fn feed_forward_phase(model: &ModelShape, ub: u64, flash_attention: bool) -> u64 {
    let leftover = if flash_attention {
        0
    } else {
        key_value_width(model) / 2
    };
    let per_token = feed_forward_width(model)
        .saturating_mul(3)
        .saturating_add(u64::from(model.n_embd).saturating_mul(FEED_FORWARD_ROWS))
        .saturating_add(leftover);
    f32_rows(per_token, ub)
}

/// Bytes of `per_token` f32 values for each of the micro-batch's `ub` tokens.
fn f32_rows(per_token: u64, ub: u64) -> u64 {
    per_token.saturating_mul(ub).saturating_mul(4)
}

/// Whether any layer has attention (Mamba has none).
fn attends(model: &ModelShape) -> bool {
    model.attention.head_count_kv.iter().any(|&h| h > 0)
}

/// The logits (n_vocab × ubatch f32) and the rows beside them (each residual stream's, with
/// several). In a hybrid (Qwen3-Next) the
/// attention mask is still allocated when the logits are (measured from 4 K to 16 K context).
fn output_phase(model: &ModelShape, ub: u64, mask: u64) -> u64 {
    let rows = match model.residual_streams() {
        1 if attends(model) => OUTPUT_ROWS,
        1 => RECURRENT_OUTPUT_ROWS,
        streams => streams.saturating_add(HYPER_CONNECTION_HEAD_ROWS),
    };
    let logits = f32_rows(
        u64::from(model.n_vocab).saturating_add(u64::from(model.n_embd).saturating_mul(rows)),
        ub,
    );
    let hybrid = model.attention.recurrent_layers.iter().any(|&r| r);
    if hybrid {
        logits.saturating_add(mask)
    } else {
        logits
    }
}

/// The masks the attention layers read, alive through every layer: one over the whole context
/// and, for a model with sliding-window layers, one over the window's cells; f16 with flash
/// attention, f32 without.
fn attention_mask(
    model: &ModelShape,
    g: &ContextGeometry,
    options: &PlacementOptions,
    ub: u64,
) -> u64 {
    let attention = &model.attention;
    let width = if options.flash_attention { 2 } else { 4 };
    let mut kinds = attention
        .head_count_kv
        .iter()
        .enumerate()
        .filter(|&(_, &h)| h > 0)
        .map(|(il, _)| kv::cells(attention, il, options, g))
        .collect::<Vec<u64>>();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
        .iter()
        .map(|&cells| cells.saturating_mul(ub).saturating_mul(width))
        .fold(0, u64::saturating_add)
}

/// The feed-forward's width per token: the dense one, or the routed experts' together (each
/// selected expert's gate, up and product are alive at once, `[n_ff, n_used, ubatch]`).
fn feed_forward_width(model: &ModelShape) -> u64 {
    let dense = u64::from(model.n_ff);
    let Some(experts) = model.experts else {
        return dense;
    };
    let expert_ff = experts.width(model.n_ff);
    dense.max(expert_ff.saturating_mul(u64::from(experts.used)))
}

/// A token's key and value widths together (the widest layer's).
fn key_value_width(model: &ModelShape) -> u64 {
    let attention = &model.attention;
    let kv_heads = u64::from(attention.head_count_kv.iter().copied().max().unwrap_or(0));
    kv_heads.saturating_mul(
        u64::from(attention.key_length).saturating_add(u64::from(attention.value_length)),
    )
}

/// The attention phase without the mask, in bytes:
/// - with flash attention, the query, key and value projections with their roped copies and
///   the output: 9/2 rows of the embedding and 3/4 of the key and value widths (measured at
///   GQA 1 and 4, 32 and 64 heads, 64 K and 128 K context);
/// - without it, the scores (heads × n_kv × ubatch f32) and beside them 5 rows of the embedding
///   and the key and value widths once; queries wider than the embedding add
///   [`wide_queries`], a DSA indexer [`sparse_attention`];
/// - for MLA without flash attention, per head the absorbed query (the cache's key width), the
///   latent output (its value width), the query itself and the decompressed value (the
///   `*_length_mla` widths), beside 2 rows of the embedding (measured at 16 and 64 heads).
fn attention_phase(model: &ModelShape, heads: u64, n_kv: u64, ub: u64, flash: bool) -> u64 {
    let attention = &model.attention;
    let rows = |per_token: u64| f32_rows(per_token, ub);
    let n_embd = u64::from(model.n_embd);
    let kv_width = key_value_width(model);
    let streams = model.residual_streams();
    if flash && streams > 1 {
        // Several residual streams (DeepSeek V4, measured on gguf-py files): the queries, the
        // attention's output and its de-roped copy, a head per query head each, beside the
        // layer's input streams and [`HYPER_CONNECTION_LAYER_ROWS`] more.
        let queries = heads.saturating_mul(u64::from(attention.key_length));
        return rows(
            queries
                .saturating_mul(3)
                .saturating_add(n_embd.saturating_mul(streams + HYPER_CONNECTION_LAYER_ROWS)),
        );
    }
    if flash {
        return rows(
            n_embd
                .saturating_mul(18)
                .saturating_add(kv_width.saturating_mul(3))
                / 4,
        );
    }
    let scores = rows(heads.saturating_mul(n_kv));
    let beside = if attention.mla {
        let per_head = [
            attention.key_length,
            attention.value_length,
            attention.mla_key_length,
            attention.mla_value_length,
        ]
        .iter()
        .map(|&w| u64::from(w))
        .fold(0, u64::saturating_add);
        rows(
            heads
                .saturating_mul(per_head)
                .saturating_add(n_embd.saturating_mul(2)),
        )
    } else {
        rows(n_embd.saturating_mul(5).saturating_add(kv_width))
            .saturating_add(wide_queries(model, heads, ub))
    };
    scores
        .saturating_add(beside)
        .saturating_add(sparse_attention(model, n_kv, ub))
}

/// The largest phase of a recurrent layer, whole: its own live activations are included, so it
/// competes with the other phases plus theirs instead of adding to them. llama.cpp reserves
/// the graph for ubatch tokens spread over `n_seq_max` sequences (`sched_reserve`). Measured
/// against `llama-fit-params` on the CPU backend:
/// - Mamba (`build_mamba_layer`): per token the x/z projection (2 × d_inner), the conv input and
///   output, the scan output and the gated product: 6 × d_inner for Mamba 1 (written here as
///   4 × d_inner + 2 × conv channels so that Mamba-2's B/C groups count), and a row of n_embd;
///   per sequence the SSM state (the scan's final state) and the conv state (measured at
///   n_embd 2 048 to 8 192, d_state 16 to 64, 1 to 8 sequences, ubatch 256 to 1 024: within
///   1.3 %).
/// - Gated delta net, only where the replayed graph ([`qwen_hybrid`], which covers Qwen3-Next and
///   Qwen3.5) declines: a header whose dimensions no real model has, or a hybrid of another
///   shape. The envelope first fitted to Qwen3-Next's fused op:
///   the larger of the convolution (its input, output and SiLU: 3 × conv channels per token,
///   with the output gate z (d_inner) and 5/2 rows of n_embd) and the delta net itself (per
///   token 7/4 × conv channels, 3/2 × d_inner for z and the output, 3/2 × the width of Q and K
///   (d_inner when they are repeated to more value heads), 21/4 rows of n_embd; per sequence
///   the state read and the state written, 2 × n_embd_s). A fitted envelope: the allocator's
///   reuse between the many small tensors of the layer has no simple form (it was 6.5 % under
///   to 12 % over llama.cpp's figure on Qwen3-Next, 3.6 % under to 36 % over on Qwen3.5).
fn recurrent_phase(model: &ModelShape, ub: u64, sequences: u64) -> u64 {
    let Some(shape) = model.attention.recurrent else {
        return 0;
    };
    let floats = |n: u64| n.saturating_mul(4);
    let per_token = |n: u64| f32_rows(n, ub);
    let d_inner = u64::from(shape.inner_size);
    let channels = shape.conv_channels();
    let n_embd = u64::from(model.n_embd);
    let conv_state = shape.conv_state_elements();
    let ssm_state = shape.ssm_state_elements();
    match shape.kind {
        RecurrentKind::Mamba => {
            let tokens = d_inner
                .saturating_mul(4)
                .saturating_add(channels.saturating_mul(2))
                .saturating_add(n_embd);
            let sequence = ssm_state.saturating_add(conv_state);
            per_token(tokens).saturating_add(floats(sequence.saturating_mul(sequences)))
        }
        RecurrentKind::GatedDeltaNet => {
            let keys = u64::from(shape.state_size).saturating_mul(u64::from(shape.group_count));
            let q_k = if shape.group_count == shape.time_step_rank {
                keys
            } else {
                d_inner
            };
            let convolution = channels
                .saturating_mul(3)
                .saturating_add(d_inner)
                .saturating_add(n_embd.saturating_mul(5).div_ceil(2));
            let quarters = channels
                .saturating_mul(7)
                .saturating_add(q_k.saturating_mul(6))
                .saturating_add(d_inner.saturating_mul(6))
                .saturating_add(n_embd.saturating_mul(21));
            let delta_net = per_token(quarters.div_ceil(4)).saturating_add(floats(
                ssm_state.saturating_mul(2).saturating_mul(sequences),
            ));
            per_token(convolution).max(delta_net)
        }
    }
}

/// Without flash attention, queries wider than the embedding (heads × head size > n_embd, as
/// Qwen3-Next's 16 × 256 over 2048, whose Q projection also carries an output gate) keep more
/// alive beside the scores than the embedding rows cover: about 7/2 floats per token for each
/// extra query column (measured against `llama-fit-params` at 1×, 2× and 4× the embedding
/// width), 4 with a margin.
/// 0 for MLA, whose key length is the latent width, not a per-head query width.
fn wide_queries(model: &ModelShape, heads: u64, ub: u64) -> u64 {
    if model.attention.mla {
        return 0;
    }
    let width = heads.saturating_mul(u64::from(model.attention.key_length));
    let extra = width.saturating_sub(u64::from(model.n_embd));
    f32_rows(extra.saturating_mul(4), ub)
}

/// Whether the model has a DSA indexer (GLM-5.x) on some layer.
fn has_indexer(model: &ModelShape) -> bool {
    let attention = &model.attention;
    attention.indexer_heads > 0 && attention.indexer_key_length.iter().any(|&w| w > 0)
}

/// The DSA indexer's share of the attention phase without flash attention (GLM-5.x): per key
/// and token the indexer's score, its top-k order and the sparse mask, 12 bytes in all
/// (llama.cpp's fused lightning indexer keeps one score per key, not one per indexer head);
/// measured at 8 to 64 heads, 16 K to 64 K context. 0 for models without an indexer. (With
/// flash attention, see [`sparse_flash_attention`].)
fn sparse_attention(model: &ModelShape, n_ctx: u64, ub: u64) -> u64 {
    if !has_indexer(model) {
        return 0;
    }
    n_ctx.saturating_mul(ub).saturating_mul(12)
}

/// The DSA graph with flash attention (GLM-5.x; llama.cpp's fused lightning indexer), measured
/// against `llama-fit-params` on GLM-5.2-sized shapes (4 to 78 layers, 8 to 64 heads, latent
/// widths 320 and 576, 2 K to 128 K context): its attention phase and what stays allocated for
/// the whole graph.
/// - The phase: per key and token one f32 indexer score beside the masks of the sparse
///   attention (8 bytes in all, not one score per indexer head); per head and token two rows
///   of the latent key width; six rows of the embedding. It holds the layer's activations
///   itself.
/// - Kept: on each attention layer of the device, the row of zeros that unmasks the selected
///   keys (top-k × ubatch f32) is a graph leaf, allocated for the whole graph.
struct SparseFlashAttention {
    phase: u64,
    kept: u64,
}

fn sparse_flash_attention(
    model: &ModelShape,
    heads: u64,
    n_ctx: u64,
    ub: u64,
    attention_layers: u64,
) -> Option<SparseFlashAttention> {
    if !has_indexer(model) {
        return None;
    }
    let attention = &model.attention;
    let scores_and_masks = n_ctx.saturating_mul(ub).saturating_mul(8);
    let latent_rows = heads
        .saturating_mul(u64::from(attention.key_length))
        .saturating_mul(2);
    let embedding_rows = u64::from(model.n_embd).saturating_mul(6);
    let selected = u64::from(attention.indexer_top_k).min(n_ctx);
    Some(SparseFlashAttention {
        phase: scores_and_masks
            .saturating_add(f32_rows(latent_rows.saturating_add(embedding_rows), ub)),
        kept: f32_rows(selected.saturating_mul(attention_layers), ub),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RecurrentShape;
    use crate::options::KvType;
    use crate::plan::plan;
    use crate::testing::{gpus, moe_model, GIB, MIB};

    /// A Mamba-shaped model: no attention, every layer recurrent, `n_embd` wide.
    fn mamba_model(n_layer: u32, n_embd: u32, n_vocab: u32) -> ModelShape {
        let mut model = moe_model(n_layer, n_layer, 10 * MIB, 0);
        model.architecture = "mamba".into();
        model.n_embd = n_embd;
        model.n_vocab = n_vocab;
        model.n_ff = 0;
        model.experts = None;
        let attention = &mut model.attention;
        attention.head_count_kv = vec![0; n_layer as usize];
        attention.head_count = vec![0; n_layer as usize];
        attention.mla = false;
        attention.recurrent = Some(RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: 4,
            inner_size: 2 * n_embd,
            state_size: 16,
            group_count: 0,
            time_step_rank: n_embd / 16,
            normed_scan_parameters: false,
        });
        attention.recurrent_layers = vec![true; n_layer as usize];
        model
    }

    #[test]
    fn a_plan_says_when_its_compute_figure_is_an_estimate() {
        // A DeepSeek header of an older conversion (no MLA lengths: full K and V cached) whose
        // KV heads are fewer than its query heads, which that graph does not build.
        let mut model = moe_model(4, 4, 10 * MIB, 0);
        model.architecture = "deepseek2".into();
        model.attention.mla = false;
        (model.attention.key_length, model.attention.value_length) = (192, 128);
        let report = crate::report::report(
            &model,
            "m.gguf",
            &gpus(1, 80 * GIB),
            &PlacementOptions::default(),
            false,
        )
        .unwrap();
        let note = report
            .notes
            .iter()
            .find(|n| n.contains("is an estimate"))
            .expect("a note on the estimate");
        assert!(
            note.contains("deepseek2") && note.contains("18.5 %"),
            "{note}"
        );
        // With as many KV heads as query heads and the compressed KV's norm (kv_lora_rank
        // wide), the older conversion's graph is replayed.
        let mut full_heads = model.clone();
        full_heads.attention.head_count_kv = vec![64; 4];
        assert!(compute_estimate_note(&full_heads).is_some());
        full_heads.tensors.push(crate::model::ModelTensor {
            name: "blk.0.attn_kv_a_norm.weight".into(),
            bytes: 512 * 4,
            layer: Some(0),
            role: crate::model::TensorRole::Layer,
            elements: 512,
            row_length: 512,
            quantized: false,
        });
        assert_eq!(compute_estimate_note(&full_heads), None);
        // With MLA its graph is replayed.
        model.attention.mla = true;
        assert_eq!(compute_estimate_note(&model), None);
        // An architecture nobody measured says so.
        model.architecture = "starcoder2".into();
        let note = compute_estimate_note(&model).expect("a note");
        assert!(note.contains("not been measured"), "{note}");
        // A replayed graph is llama.cpp's own count: no note.
        let mut decoder = mamba_model(4, 2048, 32_000);
        let attention = &mut decoder.attention;
        attention.recurrent = None;
        attention.recurrent_layers = vec![false; 4];
        attention.head_count_kv = vec![1; 4];
        attention.head_count = vec![4; 4];
        (attention.key_length, attention.value_length) = (256, 256);
        for architecture in ["llama", "qwen2", "qwen3"] {
            decoder.architecture = architecture.into();
            assert_eq!(compute_estimate_note(&decoder), None, "{architecture}");
        }
        decoder.architecture = "gemma3".into();
        decoder.attention.sliding_window = Some(512);
        decoder.attention.swa_layers = vec![true, true, true, false];
        assert_eq!(compute_estimate_note(&decoder), None);
        // A window outside gemma3 is not what the decoders build.
        decoder.architecture = "qwen3".into();
        assert!(compute_estimate_note(&decoder).is_some());
    }

    #[test]
    fn a_cache_that_needs_flash_attention_is_planned_with_it_and_says_so() {
        let model = moe_model(4, 4, 10 * MIB, 0);
        assert!(model.attention.mla, "the fixture is an MLA model");
        let compute = |options: &PlacementOptions| {
            let plan = plan(&model, &gpus(1, 80 * GIB), options).unwrap();
            plan.device(DeviceId::Gpu(0))
                .unwrap()
                .usage
                .compute_estimate_bytes
        };
        let off = PlacementOptions {
            flash_attention: false,
            cache_type_k: KvType::Q4_0,
            cache_type_v: KvType::Q4_0,
            ..Default::default()
        };
        let on = PlacementOptions {
            flash_attention: true,
            ..off.clone()
        };
        assert_eq!(compute(&off), compute(&on));
        let note = flash_attention_note(&model, &off).expect("a note");
        assert!(note.contains("MLA") && note.contains("q4_0"), "{note}");
        let report =
            crate::report::report(&model, "m.gguf", &gpus(1, 80 * GIB), &off, false).unwrap();
        assert!(report.notes.contains(&note), "{:?}", report.notes);
        // An f16 cache runs without flash attention: its own graph, no note.
        let f16 = PlacementOptions {
            cache_type_k: KvType::F16,
            cache_type_v: KvType::F16,
            ..off.clone()
        };
        assert_eq!(flash_attention_note(&model, &f16), None);
        assert_ne!(compute(&f16), compute(&on));
        // Outside MLA a quantized K beside an f16 V runs without it; a quantized V does not.
        let mut decoder = model.clone();
        decoder.attention.mla = false;
        let key_only = PlacementOptions {
            cache_type_v: KvType::F16,
            ..off.clone()
        };
        assert_eq!(flash_attention_note(&decoder, &key_only), None);
        let note = flash_attention_note(&decoder, &off).expect("a note");
        assert!(note.contains("V cache is quantized (q4_0)"), "{note}");

        // MLA with K and V of different types: llama.cpp refuses, flash attention or not.
        assert_eq!(cache_types_note(&model, &on), None);
        let apart = PlacementOptions {
            cache_type_v: KvType::F16,
            ..on.clone()
        };
        let note = cache_types_note(&model, &apart).expect("a note");
        assert!(note.contains("here q4_0 and f16"), "{note}");
        let report =
            crate::report::report(&model, "m.gguf", &gpus(1, 80 * GIB), &apart, false).unwrap();
        assert!(report.notes.contains(&note), "{:?}", report.notes);
        assert_eq!(cache_types_note(&decoder, &apart), None);
    }

    #[test]
    fn a_hostile_mla_header_plans_as_too_big_without_overflowing() {
        let mut model = moe_model(4, 4, 10 * MIB, 0);
        model.architecture = "deepseek2".into();
        let attention = &mut model.attention;
        (attention.key_length, attention.value_length) = (576, 512);
        (attention.mla_key_length, attention.mla_value_length) = (192, u32::MAX);
        // Few enough heads that the cache's widths pass the bounds; the decompressed values'
        // width (2^32 per head) does not.
        attention.head_count = vec![3_000_000; 4];
        attention.indexer_heads = 0;
        let options = PlacementOptions {
            flash_attention: false,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(1, 80 * GIB), &options).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        assert!(gpu.compute_estimate_bytes > 80 * GIB, "{gpu:?}");
        assert!(!plan.fits());
    }

    #[test]
    fn a_wide_mamba_sizes_its_compute_buffer_by_the_scan_and_its_context_by_the_state() {
        // 8192 wide, a 50k vocabulary: the selective scan's tensors (6 × d_inner per token)
        // outgrow the logits; the state is per sequence, the context length plays no part.
        let model = mamba_model(4, 8192, 50_277);
        let options = PlacementOptions {
            context: 65_536,
            parallel: 8,
            ubatch: 512,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(0, 0), &options).unwrap();
        let host = &plan.device(DeviceId::Cpu).unwrap().usage;
        let d = 16_384u64;
        let (conv, ssm) = (3 * d, 16 * d);
        assert_eq!(host.kv_bytes, 4 * 8 * (conv + ssm) * 4);
        // The replayed graph; llama-fit-params (4 layers, 8 sequences, 512 tokens): 219 MiB
        // (the phase formula, (6 × d_inner + n_embd) rows and the states, said 217.5).
        let mib = host.compute_estimate_bytes / MIB;
        assert_eq!(mib, 219, "{} bytes", host.compute_estimate_bytes);
    }

    #[test]
    fn a_narrow_mamba_holds_the_logits_and_three_rows_of_its_embedding() {
        let model = mamba_model(4, 2048, 50_277);
        let options = PlacementOptions {
            ubatch: 512,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(0, 0), &options).unwrap();
        let host = &plan.device(DeviceId::Cpu).unwrap().usage;
        // llama-fit-params: 110 MiB (the logits, 98 MiB, and 3 rows of n_embd).
        let logits_and_rows = (50_277 + 3 * 2048) * 512 * 4;
        assert_eq!(host.compute_estimate_bytes / MIB, logits_and_rows / MIB);
    }

    /// Codestral Mamba's layout (4 096 wide, 128 heads of 64, 8 groups of a 128-wide state) in
    /// `layers` layers with 32 768 tokens.
    fn mamba2_model(layers: u32) -> ModelShape {
        let mut model = mamba_model(layers, 4096, 32_768);
        model.architecture = "mamba2".into();
        model.attention.recurrent = Some(RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: 4,
            inner_size: 8192,
            state_size: 128,
            group_count: 8,
            time_step_rank: 128,
            normed_scan_parameters: false,
        });
        model
    }

    #[test]
    fn a_mamba2_graph_is_replayed_where_its_heads_and_groups_divide_the_inner_width() {
        let model = mamba2_model(2);
        assert_eq!(compute_estimate_note(&model), None);
        let plan = plan(&model, &gpus(0, 0), &PlacementOptions::default()).unwrap();
        let host = &plan.device(DeviceId::Cpu).unwrap().usage;
        // llama-fit-params on the gguf-py file of this layout logs 116.49 MiB (the formulas
        // said 116.12).
        let hundredths = (host.compute_estimate_bytes * 100 + MIB / 2) / MIB;
        assert_eq!(hundredths, 11_649, "{} bytes", host.compute_estimate_bytes);
        for (heads, groups) in [(100, 8), (128, 0), (0, 8)] {
            let mut odd = mamba2_model(2);
            let shape = odd.attention.recurrent.as_mut().unwrap();
            (shape.time_step_rank, shape.group_count) = (heads, groups);
            let note = compute_estimate_note(&odd).expect("the formulas' note");
            assert!(note.contains("mamba2"), "{note}");
        }
    }

    #[test]
    fn a_hostile_mamba2_header_plans_as_too_big() {
        let mut model = mamba2_model(2);
        let shape = model.attention.recurrent.as_mut().unwrap();
        (shape.inner_size, shape.time_step_rank, shape.group_count) = (1 << 30, 1 << 30, 1);
        let plan = plan(&model, &gpus(1, 80 * GIB), &PlacementOptions::default()).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        assert!(gpu.compute_estimate_bytes > 80 * GIB, "{gpu:?}");
        assert!(!plan.fits());
    }

    #[test]
    fn a_mamba_whose_logits_lead_gets_llama_cpps_byte_count() {
        // 151 936 tokens over 2 048 wide layers: llama-fit-params on the gguf-py file of this
        // layout logs 308.75 MiB (with the embeddings looked up after the first conv state the
        // logits sat 48 KiB higher: 308.80).
        let mut model = mamba_model(3, 2048, 151_936);
        let shape = model.attention.recurrent.as_mut().unwrap();
        (shape.inner_size, shape.state_size, shape.time_step_rank) = (4096, 64, 128);
        let plan = plan(&model, &gpus(0, 0), &PlacementOptions::default()).unwrap();
        let host = &plan.device(DeviceId::Cpu).unwrap().usage;
        let hundredths = (host.compute_estimate_bytes * 100 + MIB / 2) / MIB;
        assert_eq!(hundredths, 30_875, "{} bytes", host.compute_estimate_bytes);
    }

    #[test]
    fn hostile_recurrent_shapes_saturate_the_compute_estimate() {
        let mut model = mamba_model(4, 2048, 50_277);
        model.attention.recurrent = Some(RecurrentShape {
            kind: RecurrentKind::GatedDeltaNet,
            conv_kernel: u32::MAX,
            inner_size: u32::MAX,
            state_size: u32::MAX,
            group_count: u32::MAX,
            time_step_rank: 1,
            normed_scan_parameters: false,
        });
        let options = PlacementOptions {
            parallel: u32::MAX,
            ubatch: u32::MAX,
            batch: u32::MAX,
            ..Default::default()
        };
        let plan = plan(&model, &gpus(1, 24 * GIB), &options).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        assert_eq!(gpu.compute_estimate_bytes, u64::MAX);
        assert_eq!(gpu.kv_bytes, u64::MAX);
        assert!(!plan.fits());
    }
}
