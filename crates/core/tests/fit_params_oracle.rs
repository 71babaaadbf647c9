//! The planner checked against llama.cpp itself: `llama-fit-params -fitp on` prints, per device,
//! the model and context memory llama.cpp would allocate (a dry run, no weights loaded). For tiny
//! models written by our own writer, our figures must match: model within 1 %, context within 5 %;
//! the compute-buffer estimate within 5 % of llama.cpp's figure, and to the MiB for the
//! architectures whose graph the planner replays through ggml's allocator (`llama`, Qwen3-Next,
//! Qwen3.5).
//!
//! Needs the bundled llama.cpp CPU build (`make test` builds it) and its source tree (for a real
//! tokenizer): `RIGDECK_LLAMA_BIN_DIR` and `RIGDECK_LLAMA_SOURCE_DIR`, or the default cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use rigdeck_core::engines::source;
use rigdeck_gguf::tiny::{TinyMla, TinyModel};
use rigdeck_gguf::tiny_recurrent::{QwenHybrid, TinyMamba, TinyQwen3Next};
use rigdeck_placement::from_gguf::load_shape;
use rigdeck_placement::plan::{plan, DeviceSpec};
use rigdeck_placement::{DeviceId, KvType, PlacementOptions};

const MIB: f64 = (1u64 << 20) as f64;

fn fit_params(model: &Path, options: &PlacementOptions) -> (f64, f64, f64) {
    let bin = source::cached_llama_cpp_bin()
        .unwrap_or_else(|err| panic!("{err}"))
        .join("llama-fit-params");
    // `-nr`: on CPUs with AMX (or ARM's repack kernels) llama.cpp moves weights into an extra
    // "repack" buffer that its per-device table leaves out, so the Host line would show only the
    // token embedding. The bytes are the same; without repacking all of them are on that line.
    let mut args: Vec<String> = vec![
        "-m".into(),
        model.display().to_string(),
        "-fitp".into(),
        "on".into(),
        "-nr".into(),
    ];
    for (flag, value) in [
        ("-c", options.context.to_string()),
        ("-np", options.parallel.to_string()),
        ("-b", options.batch.to_string()),
        ("-ub", options.ubatch.to_string()),
        ("-ctk", options.cache_type_k.name().to_owned()),
        ("-ctv", options.cache_type_v.name().to_owned()),
        (
            "-fa",
            if options.flash_attention { "on" } else { "off" }.to_owned(),
        ),
    ] {
        args.push(flag.into());
        args.push(value);
    }
    let out = Command::new(&bin)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "llama-fit-params failed: {}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    // "Host <model> <context> <compute>" in whole MiB.
    let host = stdout
        .lines()
        .find(|l| l.starts_with("Host "))
        .unwrap_or_else(|| panic!("no Host line in: {stdout}"));
    let numbers: Vec<f64> = host
        .split_whitespace()
        .skip(1)
        .filter_map(|n| n.parse().ok())
        .collect();
    (numbers[0], numbers[1], numbers[2])
}

fn host_only() -> Vec<DeviceSpec> {
    vec![DeviceSpec {
        id: DeviceId::Cpu,
        name: "host".into(),
        capacity_bytes: 1 << 40,
        reserve_bytes: 0,
        overhead_bytes: 0,
        bandwidth_bytes_per_s: None,
        link_degraded: false,
        correction: None,
    }]
}

/// A real tokenizer from llama.cpp's source tree (llama.cpp will not load a model without one).
fn vocab() -> PathBuf {
    vocab_named("llama-bpe")
}

/// `models/ggml-vocab-{name}.gguf` from llama.cpp's source tree.
fn vocab_named(name: &str) -> PathBuf {
    source::cached_llama_cpp_source()
        .unwrap_or_else(|err| panic!("{err}"))
        .join(format!("models/ggml-vocab-{name}.gguf"))
}

/// llama-fit-params has no -kvu flag and keeps one KV stream per slot, so the plan must too.
fn compare(name: &str, model: TinyModel, options: PlacementOptions) {
    compare_with_vocab(name, model, &vocab(), options);
}

/// One slot of `context` tokens with flash attention and llama-spm's tokenizer, whose 32 000
/// tokens make logits small enough for the layers' phases to lead.
fn compare_small_vocabulary(name: &str, model: TinyModel, context: u32) {
    let options = PlacementOptions {
        context,
        parallel: 1,
        flash_attention: true,
        ..Default::default()
    };
    compare_with_vocab(name, model, &vocab_named("llama-spm"), options);
}

fn compare_with_vocab(name: &str, model: TinyModel, vocab: &Path, options: PlacementOptions) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.gguf"));
    model.write(vocab, &path).unwrap();
    // The writer's plain models are the `llama` architecture, whose graph the planner replays;
    // Gemma 3 (sliding window) and DeepSeek's MLA keep the phase formulas.
    let tolerance = if model.sliding_window.is_none() && model.mla.is_none() {
        REPLAYED
    } else {
        WITHIN_5_PERCENT
    };
    compare_file_within(name, &path, options, tolerance);
}

/// How far the compute estimate may fall below and rise above llama.cpp's figure.
struct ComputeTolerance {
    below: f64,
    above: f64,
}

const WITHIN_5_PERCENT: ComputeTolerance = ComputeTolerance {
    below: 0.05,
    above: 0.05,
};

/// A graph the planner replays through ggml's allocator: llama.cpp's own figure, to the MiB.
const REPLAYED: ComputeTolerance = ComputeTolerance {
    below: 0.0,
    above: 0.0,
};

/// A Qwen hybrid written with llama.cpp's `vocab` tokenizer, held to the MiB.
fn compare_replayed(name: &str, model: TinyQwen3Next, vocab: &str, options: PlacementOptions) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.gguf"));
    model.write(&vocab_named(vocab), &path).unwrap();
    compare_file_within(name, &path, options, REPLAYED);
}

fn compare_file(name: &str, path: &Path, options: PlacementOptions) {
    compare_file_within(name, path, options, WITHIN_5_PERCENT);
}

fn compare_file_within(
    name: &str,
    path: &Path,
    options: PlacementOptions,
    tolerance: ComputeTolerance,
) {
    let options = PlacementOptions {
        kv_unified: false,
        ..options
    };
    let (their_model, their_context, their_compute) = fit_params(path, &options);
    let shape = load_shape(path).unwrap().shape;
    let ours = plan(&shape, &host_only(), &options).unwrap();
    let host = &ours.devices[0].usage;
    let (our_model, our_context) = (host.weights_bytes as f64 / MIB, host.kv_bytes as f64 / MIB);
    let our_compute = host.compute_bytes as f64 / MIB;
    println!("{name}: model ours {our_model:.1} MiB vs llama.cpp {their_model} MiB; context ours {our_context:.1} vs {their_context}; compute (an estimate) ours {our_compute:.1} vs {their_compute}");
    assert!(
        their_model >= 200.0 && their_context >= 100.0,
        "{name}: the test model is too small for a 1 % comparison"
    );
    // llama.cpp truncates to whole MiB, so compare against the interval it stands for.
    let within = |ours: f64, theirs: f64, tolerance: f64| {
        ours >= theirs * (1.0 - tolerance) && ours <= (theirs + 1.0) * (1.0 + tolerance)
    };
    assert!(
        within(our_model, their_model, 0.01),
        "{name}: model {our_model:.1} MiB vs llama.cpp {their_model} MiB"
    );
    assert!(
        within(our_context, their_context, 0.05),
        "{name}: context {our_context:.1} MiB vs llama.cpp {their_context} MiB"
    );
    // The compute buffer has no closed form (the allocator reuses memory between phases);
    // the estimate's phases were measured on the CPU backend.
    assert!(
        our_compute >= their_compute * (1.0 - tolerance.below)
            && our_compute <= (their_compute + 1.0) * (1.0 + tolerance.above),
        "{name}: compute estimate {our_compute:.1} MiB vs llama.cpp {their_compute} MiB"
    );
}

fn big_dense() -> TinyModel {
    TinyModel {
        name: "dense".into(),
        n_layer: 16,
        n_embd: 1024,
        n_head: 8,
        n_head_kv: 8,
        n_ff: 2816,
        context_length: 32_768,
        experts: None,
        sliding_window: None,
        mla: None,
        random_weights: false,
    }
}

#[test]
fn a_dense_model_matches_llama_cpp() {
    compare(
        "dense",
        big_dense(),
        PlacementOptions {
            context: 4096,
            parallel: 1,
            ..Default::default()
        },
    );
}

#[test]
fn gqa_per_slot_kv_and_a_q8_0_cache_match_llama_cpp() {
    let model = TinyModel {
        n_head_kv: 2,
        ..big_dense()
    };
    let options = PlacementOptions {
        context: 16_384,
        parallel: 4,
        kv_unified: false,
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..Default::default()
    };
    compare("gqa-q8", model, options);
}

#[test]
fn an_moe_model_matches_llama_cpp() {
    let model = TinyModel {
        name: "moe".into(),
        experts: Some((8, 2)),
        n_ff: 1024,
        ..big_dense()
    };
    compare(
        "moe",
        model,
        PlacementOptions {
            context: 8192,
            parallel: 1,
            ..Default::default()
        },
    );
}

#[test]
fn a_sliding_window_model_with_a_tied_output_matches_llama_cpp() {
    // Gemma 3: five of every six layers keep only the window (+ a micro-batch) in their cache.
    let model = TinyModel {
        name: "swa".into(),
        n_layer: 24,
        sliding_window: Some(1024),
        ..big_dense()
    };
    compare(
        "swa",
        model,
        PlacementOptions {
            context: 32_768,
            parallel: 1,
            ..Default::default()
        },
    );
}

#[test]
fn a_latent_attention_model_caches_k_only_as_llama_cpp_does() {
    // DeepSeek-style MLA: one 576-wide latent row per token and layer, no V cache.
    let model = TinyModel {
        name: "mla".into(),
        n_layer: 12,
        n_head: 16,
        n_ff: 512,
        experts: Some((8, 2)),
        mla: Some(TinyMla::deepseek_v3()),
        ..big_dense()
    };
    compare(
        "mla",
        model,
        PlacementOptions {
            context: 16_384,
            parallel: 1,
            ..Default::default()
        },
    );
}

#[test]
fn many_heads_without_flash_attention_size_the_compute_buffer_by_the_scores() {
    // 64 heads and no flash attention: the attention scores (heads × n_kv × ubatch floats)
    // are the largest phase of the graph, larger than the logits; the buffer is that phase,
    // not the sum of all phases.
    let model = TinyModel {
        name: "heads".into(),
        n_layer: 4,
        n_head: 64,
        n_head_kv: 64,
        ..big_dense()
    };
    compare(
        "heads",
        model,
        PlacementOptions {
            context: 8192,
            parallel: 1,
            flash_attention: false,
            ..Default::default()
        },
    );
}

#[test]
fn the_selected_experts_size_the_compute_buffer_when_they_outgrow_the_logits() {
    // 8 of 16 experts × 2 048: each selected expert's gate, up and product are alive at once
    // (96 MiB per 512 tokens), more than a 32 000-token vocabulary's logits (62.5 MiB).
    let model = TinyModel {
        name: "moe-wide".into(),
        n_layer: 8,
        experts: Some((16, 8)),
        n_ff: 2048,
        ..big_dense()
    };
    compare_small_vocabulary("moe-wide", model, 8192);
}

#[test]
fn at_long_context_the_flash_attention_mask_sizes_the_compute_buffer() {
    // 131 072 keys × 512 tokens of f16 mask (128 MiB), alive through every layer, under the
    // feed-forward phase.
    let model = TinyModel {
        name: "long".into(),
        n_ff: 512,
        ..big_dense()
    };
    compare_small_vocabulary("long", model, 131_072);
}

#[test]
fn latent_attention_without_flash_attention_keeps_its_absorbed_queries_beside_the_scores() {
    // MLA without flash attention: per head the absorbed query (576), the latent output (512),
    // the query (192) and the decompressed value (128) beside the scores.
    let model = TinyModel {
        name: "mla-no-fa".into(),
        n_layer: 12,
        n_embd: 2048,
        n_head: 64,
        n_ff: 512,
        experts: Some((8, 2)),
        mla: Some(TinyMla::deepseek_v3()),
        ..big_dense()
    };
    compare(
        "mla-no-fa",
        model,
        PlacementOptions {
            context: 16_384,
            parallel: 1,
            flash_attention: false,
            ..Default::default()
        },
    );
}

/// A GLM-5.x-shaped model (`glm-dsa`: MLA, the DSA indexer, MoE) with `layers` blocks, a real
/// tokenizer and sizes large enough for a 1 % comparison; `extra` sets keys under the
/// architecture's prefix. Compared with llama.cpp at 65 536 tokens with flash attention.
fn compare_glm_dsa(name: &str, layers: u32, extra: &[(&str, rigdeck_gguf::Value)]) {
    let vocab = rigdeck_gguf::GgufFile::open(vocab()).unwrap();
    let shape = rigdeck_gguf::fixtures::MoeShape {
        layers,
        embedding: 1024,
        expert_ff: 1024,
        dense_ff: 2048,
        heads: 8,
        ..rigdeck_gguf::fixtures::MoeShape::small()
    };
    let mut writer = shape.writer_with_tokenizer(&vocab.metadata);
    for (key, value) in extra {
        writer.set(&format!("{}.{key}", shape.architecture), value.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.gguf"));
    writer.write_to_path(&path).unwrap();
    compare_file(
        name,
        &path,
        PlacementOptions {
            context: 65_536,
            parallel: 1,
            flash_attention: true,
            ..Default::default()
        },
    );
}

#[test]
fn a_dsa_model_with_some_full_indexer_layers_matches_llama_cpp() {
    // GLM-5.x's sparse attention: a K-only indexer cache on the layers its `indexer.types`
    // marks, written as gguf-py writes it (a bool array); the indexer's scores grow the
    // compute buffer with the context.
    let flags = rigdeck_gguf::Array::Bool(vec![true, false, false, false]);
    compare_glm_dsa(
        "dsa",
        4,
        &[("attention.indexer.types", rigdeck_gguf::Value::Array(flags))],
    );
}

#[test]
fn a_glm_5_2_sized_dsa_model_matches_llama_cpp_at_long_context() {
    // The seeds' main model at full size (78 layers, 64 heads, 256 experts; six shards of sparse
    // files): llama.cpp's fused lightning indexer keeps one score per key, not one per indexer
    // head, and a row of zeros per layer for the selected keys, so the compute buffer is about
    // a gigabyte at 128 K tokens, not nine.
    let vocab = rigdeck_gguf::GgufFile::open(vocab()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shards = rigdeck_gguf::fixtures::MoeShape::glm_5_2()
        .writer_with_tokenizer(&vocab.metadata)
        .write_split(dir.path(), "GLM-5.2", 6)
        .unwrap();
    for context in [32_768, 131_072] {
        compare_file(
            &format!("glm-5.2 at {context}"),
            &shards[0],
            PlacementOptions {
                context,
                parallel: 1,
                flash_attention: true,
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::Q8_0,
                ..Default::default()
            },
        );
    }
}

#[test]
fn an_mtp_block_at_the_end_is_neither_loaded_nor_cached_as_in_llama_cpp() {
    // GLM-5.x files carry their multi-token-prediction block as the last `blk.N`
    // (`nextn_predict_layers = 1`); llama.cpp skips its weights and its cache unless
    // speculative MTP is on, so 5 blocks plan as a 4-layer trunk.
    compare_glm_dsa(
        "mtp",
        5,
        &[("nextn_predict_layers", rigdeck_gguf::Value::U32(1))],
    );
}

#[test]
fn a_recurrent_mamba_model_matches_llama_cpp() {
    // Mamba 1: no attention, so no KV cache; every layer keeps a conv state ((d_conv - 1) ×
    // d_inner) and an SSM state (d_state × d_inner) in F32 per sequence, whatever the
    // context. Five slots make the state large enough to compare (24 × 5 × 0.99 MiB). A wide
    // embedding (d_inner 11 264) and GPT-NeoX's tokenizer (the one Mamba checkpoints ship,
    // 50k tokens) make the selective scan, not the logits, the largest compute phase.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mamba.gguf");
    let model = TinyMamba {
        name: "mamba".into(),
        n_layer: 24,
        n_embd: 5632,
        d_state: 20,
        d_conv: 4,
        dt_rank: 352,
        context_length: 1 << 20,
    };
    model.write(&vocab_named("gpt-neox"), &path).unwrap();
    compare_file(
        "mamba",
        &path,
        PlacementOptions {
            context: 4096,
            parallel: 5,
            ..Default::default()
        },
    );
}

#[test]
fn a_hybrid_qwen3next_model_matches_llama_cpp() {
    // Qwen3-Next: gated delta net layers with a full attention layer every third here (the
    // file's `full_attention_interval`; Qwen ships 4). The attention layers cache K and V per
    // slot (the header's single head_count_kv does not apply to the linear layers); the
    // linear ones keep Q/K/V conv and head-size² × value-heads states per sequence. Wide
    // linear attention (96 value heads over 32 key heads) with GPT-NeoX's 50k tokenizer makes
    // the delta net the largest compute phase.
    let model = TinyQwen3Next::with_linear_heads(12, 2560, 32, 96);
    compare_replayed(
        "qwen3next",
        model,
        "gpt-neox",
        PlacementOptions {
            context: 16_384,
            parallel: 4,
            ..Default::default()
        },
    );
}

#[test]
fn an_older_qwen3next_file_without_flash_attention_matches_llama_cpp() {
    // The single `ssm_in` projection of older conversions (split and made contiguous in the
    // graph), no flash attention (scores, and V written element by element) and three slots
    // that do not divide the micro-batch (llama.cpp rounds it up to 513 tokens).
    let model = TinyQwen3Next {
        legacy_ssm_in: true,
        ..TinyQwen3Next::with_linear_heads(12, 2048, 16, 32)
    };
    compare_replayed(
        "qwen3next-ssm-in",
        model,
        "llama-spm",
        PlacementOptions {
            context: 16_384,
            parallel: 3,
            flash_attention: false,
            ..Default::default()
        },
    );
}

#[test]
fn a_full_size_qwen3_next_80b_matches_llama_cpp() {
    // Qwen3-Next-80B-A3B's shape (48 layers, every fourth full attention, 512 experts with 10
    // active, Qwen's 151 k tokenizer) as a sparse file: the replayed graph holds at full size.
    let model = TinyQwen3Next {
        name: "Qwen3-Next-80B-A3B".into(),
        full_attention_interval: 4,
        experts: (512, 10),
        ..TinyQwen3Next::with_linear_heads(48, 2048, 16, 32)
    };
    compare_replayed(
        "qwen3-next-80b",
        model,
        "qwen2",
        PlacementOptions {
            context: 32_768,
            parallel: 2,
            ..Default::default()
        },
    );
}

#[test]
fn qwen3_5_models_match_llama_cpp() {
    // Qwen3.5 (`qwen35moe`, `qwen35`): beta and alpha projected apart, Q and K broadcast by the
    // fused delta net instead of repeated, M-RoPE sections. A 32 000-token vocabulary lets the
    // layers, not the logits, lead; eight slots.
    for hybrid in [QwenHybrid::Qwen35Moe, QwenHybrid::Qwen35] {
        let name = hybrid.architecture();
        let model = TinyQwen3Next {
            hybrid,
            n_ff: 8192,
            full_attention_interval: 4,
            ..TinyQwen3Next::with_linear_heads(8, 2048, 16, 48)
        };
        compare_replayed(
            name,
            model,
            "llama-spm",
            PlacementOptions {
                context: 16_384,
                parallel: 8,
                ..Default::default()
            },
        );
    }
}

#[test]
fn a_full_size_qwen3_5_35b_matches_llama_cpp() {
    // Qwen3.5-35B-A3B's shape (40 layers, 256 experts with 8 active) as a sparse file, with
    // the 151 936-token Qwen tokenizer of llama.cpp's test vocabularies.
    let model = TinyQwen3Next {
        name: "Qwen3.5-35B-A3B".into(),
        hybrid: QwenHybrid::Qwen35Moe,
        full_attention_interval: 4,
        experts: (256, 8),
        ..TinyQwen3Next::with_linear_heads(40, 2048, 16, 32)
    };
    compare_replayed(
        "qwen3.5-35b",
        model,
        "qwen35",
        PlacementOptions {
            context: 65_536,
            parallel: 1,
            ..Default::default()
        },
    );
}
