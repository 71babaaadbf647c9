//! KV cache size per layer, with llama.cpp's own rules (`src/llama-context.cpp`,
//! `src/llama-kv-cache*.cpp`): context padded to 256, one stream per slot unless unified,
//! sliding-window layers capped at the window, MLA caching K only. Recurrent layers (Mamba,
//! gated delta net) keep a fixed F32 state per sequence instead (`src/llama-memory-recurrent.cpp`),
//! counted here too: it lives on the layer's device as the KV cache does, and llama.cpp reports
//! both as "context" memory.
//!
//! Every product saturates: the factors come from a model header and the user's options, and a
//! wrapped byte count would turn "needs 2^70 bytes" into "fits".

use super::model::AttentionLayout;
use super::options::{KvType, PlacementOptions};

const PAD: u64 = 256;

fn pad(n: u64) -> u64 {
    n.div_ceil(PAD).saturating_mul(PAD)
}

/// The context geometry llama.cpp derives from `-c`, `-np` and `-kvu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextGeometry {
    pub n_ctx: u64,
    pub n_ctx_seq: u64,
    pub n_stream: u64,
}

pub fn geometry(options: &PlacementOptions, trained_context: u32) -> ContextGeometry {
    let requested = if options.context == 0 {
        trained_context
    } else {
        options.context
    };
    let n_seq = u64::from(options.parallel.max(1));
    let n_ctx = pad(u64::from(requested.max(1)));
    if options.kv_unified {
        return ContextGeometry {
            n_ctx,
            n_ctx_seq: n_ctx,
            n_stream: 1,
        };
    }
    let n_ctx_seq = pad(n_ctx / n_seq);
    ContextGeometry {
        n_ctx: n_ctx_seq.saturating_mul(n_seq),
        n_ctx_seq,
        n_stream: n_seq,
    }
}

/// Bytes of one cache row of `n` elements; `None` when a quantized type's block does not divide it.
pub fn row_bytes(kind: KvType, n: u64) -> Option<u64> {
    let (block, bytes) = kind.block();
    n.is_multiple_of(block)
        .then(|| (n / block).saturating_mul(bytes))
}

/// [`row_bytes`] of layer `il`'s cache, or why `kind` cannot hold that row.
fn layer_row_bytes(kind: KvType, n: u64, il: usize) -> Result<u64, KvError> {
    row_bytes(kind, n).ok_or(KvError::RowNotDivisible {
        kind: kind.name(),
        block: kind.block().0,
        layer: il as u32,
        row: n,
    })
}

/// Why a KV configuration cannot work, in the user's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("KV cache type {kind} needs rows divisible by {block} elements, but layer {layer} has {row}: use f16 or q8_0 with a model whose head size fits")]
    RowNotDivisible {
        kind: &'static str,
        block: u64,
        layer: u32,
        row: u64,
    },
}

/// Cells (tokens) the cache of layer `il` holds.
pub(crate) fn cells(
    attention: &AttentionLayout,
    il: usize,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> u64 {
    let swa = attention.swa_layers.get(il).copied().unwrap_or(false);
    match (swa, attention.sliding_window) {
        (true, Some(window)) => {
            let slots = if options.kv_unified {
                u64::from(options.parallel.max(1))
            } else {
                1
            };
            let window_cells = u64::from(window)
                .saturating_mul(slots)
                .saturating_add(u64::from(options.ubatch));
            pad(g.n_ctx_seq.min(window_cells))
        }
        _ => g.n_ctx_seq,
    }
}

/// KV bytes of each layer (K + V, plus the K-only indexer cache where the model has one, plus
/// the recurrent state of a recurrent layer).
pub fn layer_kv_bytes(
    attention: &AttentionLayout,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> Result<Vec<u64>, KvError> {
    let attention_kv = if attention.compress_ratios.is_empty() {
        attention_kv_bytes(attention, options, g)?
    } else {
        compressed_kv_bytes(attention, options, g)?
    };
    Ok(attention_kv
        .into_iter()
        .enumerate()
        .map(|(il, kv)| kv.saturating_add(recurrent_state_bytes(attention, il, options)))
        .collect())
}

/// DeepSeek V4's caches of each layer (`llama_kv_cache_dsv4`), K alone in `-ctk`'s type and
/// one stream per slot even with `-kvu`: every layer's raw cache over the window; a layer
/// compressed by 4 a cache of a row per 4 tokens and its lightning indexer's, one compressed by
/// 128 a row per 128 tokens (those caches padded to 256 cells); and each compressing layer's
/// F32 state (values and scores) over twice its ratio in rows (4) or its ratio (128).
fn compressed_kv_bytes(
    attention: &AttentionLayout,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> Result<Vec<u64>, KvError> {
    let streams = u64::from(options.parallel.max(1));
    let window = raw_window_cells(attention, options, g);
    let head = u64::from(attention.key_length);
    let kind = options.cache_type_k;
    (0..attention.compress_ratios.len())
        .map(|il| {
            let row = |width: u64| layer_row_bytes(kind, width, il);
            let ratio = u64::from(attention.compress_ratios[il]);
            let indexer = u64::from(attention.indexer_key_length.get(il).copied().unwrap_or(0));
            let mut per_stream = row(head)?.saturating_mul(window);
            if ratio > 0 {
                let compressed = compressed_cells(ratio, g);
                // The compressor's state: values and scores, F32, twice as wide over twice the
                // ratio in rows where it compresses by 4, over the ratio where by 128.
                let (widths, rows) = if ratio == 4 {
                    (2, 2 * ratio)
                } else {
                    (1, ratio)
                };
                let width_state = |width: u64| (widths * width).saturating_mul(rows * 2 * 4);
                let mut cached = row(head)?;
                let mut state = width_state(head);
                if indexer > 0 {
                    cached = cached.saturating_add(row(indexer)?);
                    state = state.saturating_add(width_state(indexer));
                }
                per_stream = per_stream
                    .saturating_add(cached.saturating_mul(compressed))
                    .saturating_add(state);
            }
            Ok(per_stream.saturating_mul(streams))
        })
        .collect()
}

/// The cells of DeepSeek V4's raw cache: the window and a micro-batch, padded, within the
/// context.
pub(crate) fn raw_window_cells(
    attention: &AttentionLayout,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> u64 {
    let micro_batch = u64::from(options.ubatch.min(options.batch));
    let window = u64::from(attention.sliding_window.unwrap_or(0)).saturating_add(micro_batch);
    pad(g.n_ctx_seq.min(window))
}

/// The cells of a cache compressed by `ratio` (a row per `ratio` tokens), padded.
pub(crate) fn compressed_cells(ratio: u64, g: &ContextGeometry) -> u64 {
    pad(g.n_ctx_seq.div_ceil(ratio.max(1)).max(1))
}

/// The recurrent state of layer `il`: conv + SSM state, F32, one row per sequence
/// (`mem_size = max(1, n_seq_max)` in `llama_model::create_memory`), whatever the context,
/// `-ctk`/`-ctv` or `-kvu`. (llama.cpp keeps `1 + n_rs_seq` rows per sequence when speculative
/// decoding needs rollback; the plan has no such option, so one.) 0 for an attention layer.
fn recurrent_state_bytes(
    attention: &AttentionLayout,
    il: usize,
    options: &PlacementOptions,
) -> u64 {
    match attention.recurrent {
        Some(shape) if attention.is_recurrent(il) => shape.state_bytes(options.parallel),
        _ => 0,
    }
}

/// The attention KV cache of each layer (0 for a layer without attention).
fn attention_kv_bytes(
    attention: &AttentionLayout,
    options: &PlacementOptions,
    g: &ContextGeometry,
) -> Result<Vec<u64>, KvError> {
    // Without flash attention llama.cpp stores V transposed, every layer as wide as the widest.
    let v_width_max = attention.value_width_max();
    (0..attention.head_count_kv.len())
        .map(|il| {
            let heads = attention.head_count_kv.get(il).copied().unwrap_or(0);
            if heads == 0 || !attention.has_kv(il) {
                return Ok(0);
            }
            let c = cells(attention, il, options, g).saturating_mul(g.n_stream);
            let (key_length, _) = attention.head_lengths(il);
            let k_width = u64::from(key_length).saturating_mul(u64::from(heads));
            let row = |kind: KvType, width: u64| layer_row_bytes(kind, width, il);
            let k = row(options.cache_type_k, k_width)?.saturating_mul(c);
            let v = if attention.mla {
                0
            } else {
                let width = if options.flash_attention {
                    attention.value_width(il)
                } else {
                    v_width_max
                };
                row(options.cache_type_v, width)?.saturating_mul(c)
            };
            let indexer_width =
                u64::from(attention.indexer_key_length.get(il).copied().unwrap_or(0));
            let indexer = if indexer_width > 0 {
                let value_width = u64::from(attention.indexer_value_length);
                let value = match value_width {
                    0 => 0,
                    width => row(options.cache_type_v, width)?,
                };
                row(options.cache_type_k, indexer_width)?
                    .saturating_add(value)
                    .saturating_mul(g.n_ctx_seq)
                    .saturating_mul(g.n_stream)
            } else {
                0
            };
            Ok(k.saturating_add(v).saturating_add(indexer))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecurrentKind, RecurrentShape};

    fn dense(n_layer: usize, kv_heads: u32, head: u32) -> AttentionLayout {
        AttentionLayout {
            head_count_kv: vec![kv_heads; n_layer],
            head_count: vec![kv_heads * 8; n_layer],
            key_length: head,
            value_length: head,
            key_length_swa: 0,
            value_length_swa: 0,
            shared_kv_layers: 0,
            cacheless: false,
            mla: false,
            mla_key_length: 0,
            mla_value_length: 0,
            sliding_window: None,
            swa_layers: vec![false; n_layer],
            indexer_key_length: vec![0; n_layer],
            indexer_value_length: 0,
            indexer_heads: 0,
            indexer_top_k: 0,
            indexer_block_size: 0,
            compress_ratios: Vec::new(),
            recurrent: None,
            recurrent_layers: Vec::new(),
        }
    }

    fn total(attention: &AttentionLayout, options: &PlacementOptions) -> u64 {
        let g = geometry(options, 131_072);
        layer_kv_bytes(attention, options, &g).unwrap().iter().sum()
    }

    #[test]
    fn llama_3_1_70b_is_320_kib_per_token_at_f16() {
        // The reference's worked example: 80 layers, 8 KV heads × 128 → 10 GiB at 32k.
        let options = PlacementOptions {
            context: 32_768,
            ..Default::default()
        };
        assert_eq!(total(&dense(80, 8, 128), &options), 10 << 30);
    }

    #[test]
    fn deepseek_v3_mla_is_68_6_kib_per_token() {
        let mut mla = dense(61, 1, 576);
        mla.mla = true;
        let options = PlacementOptions {
            context: 131_072,
            ..Default::default()
        };
        let per_token = total(&mla, &options) as f64 / 131_072.0 / 1024.0;
        assert!((per_token - 68.625).abs() < 0.01, "{per_token}");
    }

    #[test]
    fn q8_0_costs_34_bytes_per_32_elements() {
        let options = PlacementOptions {
            context: 4096,
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..Default::default()
        };
        assert_eq!(
            total(&dense(1, 8, 128), &options),
            2 * 4096 * 1024 / 32 * 34
        );
    }

    #[test]
    fn a_quantized_cache_needs_divisible_rows() {
        let options = PlacementOptions {
            cache_type_k: KvType::Q4_0,
            ..Default::default()
        };
        let g = geometry(&options, 4096);
        let err = layer_kv_bytes(&dense(1, 1, 40), &options, &g).unwrap_err();
        assert!(err.to_string().contains("divisible by 32"), "{err}");
    }

    #[test]
    fn context_is_padded_and_split_per_slot_without_unified_kv() {
        let options = PlacementOptions {
            context: 10_000,
            parallel: 4,
            kv_unified: false,
            ..Default::default()
        };
        let g = geometry(&options, 0);
        assert_eq!(g.n_ctx_seq, 2560);
        assert_eq!(g.n_stream, 4);
        assert_eq!(g.n_ctx, 10_240);
        let unified = geometry(
            &PlacementOptions {
                context: 10_000,
                parallel: 4,
                ..Default::default()
            },
            0,
        );
        assert_eq!(
            (unified.n_ctx, unified.n_ctx_seq, unified.n_stream),
            (10_240, 10_240, 1)
        );
    }

    #[test]
    fn sliding_window_layers_hold_only_the_window() {
        // Gemma 3 style: 5 of every 6 layers slide over 1024 tokens.
        let mut attention = dense(6, 8, 128);
        attention.sliding_window = Some(1024);
        attention.swa_layers = (0..6).map(|il| il % 6 < 5).collect();
        let options = PlacementOptions {
            context: 32_768,
            parallel: 1,
            ubatch: 512,
            ..Default::default()
        };
        let g = geometry(&options, 0);
        let per_layer = layer_kv_bytes(&attention, &options, &g).unwrap();
        let row = 2 * 8 * 128 * 2; // K + V, f16
        assert_eq!(per_layer[0], row * 1536);
        assert_eq!(per_layer[5], row * 32_768);
    }

    #[test]
    fn gemma4_sliding_layers_have_their_own_heads_and_shared_layers_no_cache() {
        // Gemma 4 E-style: sliding layers 8 heads of 256, the full one 2 of 512; the last two
        // layers read an earlier cache.
        let mut attention = dense(8, 8, 512);
        attention.head_count_kv[5] = 2;
        attention.key_length_swa = 256;
        attention.value_length_swa = 256;
        attention.shared_kv_layers = 2;
        attention.sliding_window = Some(1024);
        attention.swa_layers = (0..8).map(|il| il != 5).collect();
        let flash = PlacementOptions {
            context: 4096,
            parallel: 1,
            ubatch: 512,
            flash_attention: true,
            ..Default::default()
        };
        let g = geometry(&flash, 0);
        let per_layer = layer_kv_bytes(&attention, &flash, &g).unwrap();
        assert_eq!(per_layer[0], 2 * (8 * 256 * 2) * 1536);
        assert_eq!(per_layer[5], 2 * (2 * 512 * 2) * 4096);
        assert_eq!(per_layer[6..], [0, 0], "the shared layers keep no cache");
        // Without flash attention V is stored transposed, as wide as the widest layer's V
        // (the sliding layers' 8 × 256), on the full layer too.
        let transposed = PlacementOptions {
            flash_attention: false,
            ..flash
        };
        let per_layer = layer_kv_bytes(&attention, &transposed, &g).unwrap();
        assert_eq!(per_layer[5], (2 * 512 * 2 + 8 * 256 * 2) * 4096);
    }

    fn mamba(n_layer: usize) -> AttentionLayout {
        let mut layout = dense(n_layer, 0, 0);
        layout.recurrent = Some(RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: 4,
            inner_size: 4096,
            state_size: 16,
            group_count: 0,
            time_step_rank: 128,
            normed_scan_parameters: false,
        });
        layout.recurrent_layers = vec![true; n_layer];
        layout
    }

    #[test]
    fn recurrent_state_is_f32_per_sequence_whatever_the_context_and_cache_type() {
        let layout = mamba(8);
        let per_layer_seq = (3 + 16) * 4096 * 4;
        let at = |context: u32, parallel: u32, kind: KvType| {
            let options = PlacementOptions {
                context,
                parallel,
                kv_unified: false,
                cache_type_k: kind,
                cache_type_v: kind,
                ..Default::default()
            };
            total(&layout, &options)
        };
        assert_eq!(at(4096, 1, KvType::F16), 8 * per_layer_seq);
        assert_eq!(at(131_072, 1, KvType::Q4_0), 8 * per_layer_seq);
        assert_eq!(at(4096, 6, KvType::F16), 6 * 8 * per_layer_seq);
        // -np 0 still allocates one sequence.
        assert_eq!(at(4096, 0, KvType::F16), 8 * per_layer_seq);
    }

    #[test]
    fn a_hybrid_caches_kv_on_attention_layers_and_state_on_recurrent_ones() {
        // Qwen3-Next style: three linear-attention layers, then a full attention layer (whose
        // KV heads the reader keeps; the recurrent layers' are 0).
        let mut layout = dense(4, 2, 256);
        layout.head_count_kv = vec![0, 0, 0, 2];
        layout.recurrent = Some(RecurrentShape {
            kind: RecurrentKind::GatedDeltaNet,
            conv_kernel: 4,
            inner_size: 4096,
            state_size: 128,
            group_count: 16,
            time_step_rank: 32,
            normed_scan_parameters: false,
        });
        layout.recurrent_layers = vec![true, true, true, false];
        let options = PlacementOptions {
            context: 8192,
            parallel: 2,
            kv_unified: false,
            ..Default::default()
        };
        let g = geometry(&options, 0);
        let per_layer = layer_kv_bytes(&layout, &options, &g).unwrap();
        let state = 2 * (3 * 8192 + 128 * 4096) * 4;
        assert_eq!(per_layer[..3], [state, state, state]);
        assert_eq!(
            per_layer[3],
            2 * 2 * 256 * 2 * 8192,
            "K + V, f16, two streams of 4096"
        );
    }
}
