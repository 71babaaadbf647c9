//! Benchmark: the planner's estimate against llama.cpp's own dry run (`llama-fit-params -fitp on`
//! of the cached CPU build) over a grid of shapes per architecture family, written by our writer
//! with a real tokenizer (sparse files): weights, KV cache and compute buffer on the host, as
//! markdown rows, then the compute estimate's range per family.
//!
//! `cargo run --release -p rigdeck-core --example estimate_vs_dry_run [-- FAMILY…]`
//! (families: dense, moe, swa, mla, dsa, mamba, qwen3next; all by default)
//! (`RIGDECK_LLAMA_BIN_DIR`, `RIGDECK_LLAMA_SOURCE_DIR` override where the build and the
//! tokenizers are found, as in the oracle tests).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rigdeck_core::engines::{fit_params, source};
use rigdeck_core::placement::from_gguf::load_shape;
use rigdeck_core::placement::report::report;
use rigdeck_core::placement::rig::{preset, Margins};
use rigdeck_core::placement::{KvType, PlacementOptions};
use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::tiny::{TinyMla, TinyModel};
use rigdeck_gguf::tiny_recurrent::{QwenHybrid, TinyMamba, TinyQwen3Next};
use rigdeck_gguf::GgufFile;

/// Where the llama.cpp build and its tokenizer files are.
struct Tools {
    fit_params: PathBuf,
    vocabs: PathBuf,
}

impl Tools {
    fn vocab(&self, name: &str) -> PathBuf {
        self.vocabs.join(format!("ggml-vocab-{name}.gguf"))
    }
}

/// Writes a case's model to the path, with the tokenizers `Tools` finds.
type Writer = Box<dyn Fn(&Tools, &Path) -> anyhow::Result<()>>;

/// A family's name and its cases.
type Family = (&'static str, fn() -> Vec<Case>);

/// One model of the grid: a label, how it is written and how it is planned.
struct Case {
    family: &'static str,
    label: String,
    write: Writer,
    options: PlacementOptions,
}

fn options(context: u32, ubatch: u32, flash_attention: bool) -> PlacementOptions {
    PlacementOptions {
        context,
        ubatch,
        flash_attention,
        parallel: 1,
        kv_unified: false,
        ..Default::default()
    }
}

fn tiny(n_layer: u64, n_embd: u64, n_head: u64, n_head_kv: u64, n_ff: u64) -> TinyModel {
    TinyModel {
        name: "grid".into(),
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        n_ff,
        context_length: 1 << 17,
        experts: None,
        sliding_window: None,
        mla: None,
        random_weights: false,
    }
}

fn case(
    family: &'static str,
    label: String,
    options: PlacementOptions,
    write: impl Fn(&Tools, &Path) -> anyhow::Result<()> + 'static,
) -> Case {
    Case {
        family,
        label,
        write: Box::new(write),
        options,
    }
}

fn tiny_case(
    family: &'static str,
    label: String,
    model: TinyModel,
    vocab: &'static str,
    o: PlacementOptions,
) -> Case {
    case(family, label, o, move |tools, path| {
        model.write(&tools.vocab(vocab), path)?;
        Ok(())
    })
}

fn flags(o: &PlacementOptions) -> String {
    let fa = if o.flash_attention { "fa" } else { "no fa" };
    format!("ctx {} ub {} {fa}", o.context, o.ubatch)
}

fn dense_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_embd, n_head, n_ff) in [
        (512, 8, 1536),
        (1024, 8, 2816),
        (1024, 64, 2816),
        (2048, 16, 8192),
        (2048, 32, 5632),
        (4096, 32, 14336),
        (4096, 64, 11008),
    ] {
        for (context, ubatch, fa) in [
            (4096, 512, true),
            (16_384, 512, true),
            (4096, 128, true),
            (4096, 512, false),
            (16_384, 512, false),
            (16_384, 128, false),
        ] {
            let o = options(context, ubatch, fa);
            let label = format!("embd {n_embd}, {n_head} heads, ff {n_ff}, {}", flags(&o));
            let model = tiny(2, n_embd, n_head, n_head / 4, n_ff);
            cases.push(tiny_case("dense", label, model, "llama-bpe", o));
        }
    }
    // A 32 000-token vocabulary (llama-spm) lets the feed-forward (wide n_ff) or the flash
    // attention mask (long context, narrow n_ff) outgrow the logits.
    for (n_embd, n_head, n_head_kv, n_ff, context, ubatch, fa) in [
        (2048, 16, 4, 16_384, 4096, 512, true),
        (4096, 32, 8, 28_672, 4096, 512, true),
        (4096, 32, 8, 14_336, 131_072, 512, true),
        (1024, 8, 2, 2816, 131_072, 128, true),
        (1024, 8, 2, 512, 131_072, 512, true),
        (4096, 32, 32, 1024, 131_072, 512, true),
        (4096, 64, 64, 1024, 65_536, 512, true),
        (1024, 8, 8, 512, 8192, 512, true),
        (2048, 16, 4, 16_384, 1024, 512, false),
        (2048, 16, 16, 16_384, 1024, 512, false),
        (4096, 32, 32, 14_336, 512, 512, false),
    ] {
        let o = options(context, ubatch, fa);
        let label = format!(
            "embd {n_embd}, {n_head}/{n_head_kv} heads, ff {n_ff}, 32k vocabulary, {}",
            flags(&o)
        );
        let model = tiny(2, n_embd, n_head, n_head_kv, n_ff);
        cases.push(tiny_case("dense", label, model, "llama-spm", o));
    }
    // Quantized caches: llama.cpp rotates Q/K and V around them (Hadamard blocks of the head
    // size and of 64), with slots of their own.
    for (n_embd, n_head, k, v, parallel, fa) in [
        (1024, 8, KvType::Q8_0, KvType::Q8_0, 4, true),
        (2048, 16, KvType::Q4_0, KvType::F16, 1, true),
        (512, 8, KvType::Q8_0, KvType::Q5_1, 2, true),
        (2048, 32, KvType::Q8_0, KvType::F16, 1, false),
    ] {
        let o = PlacementOptions {
            parallel,
            cache_type_k: k,
            cache_type_v: v,
            ..options(16_384, 512, fa)
        };
        let label = format!(
            "embd {n_embd}, {n_head} heads, -ctk {} -ctv {}, {parallel} slots, {}",
            k.name(),
            v.name(),
            flags(&o)
        );
        let model = tiny(2, n_embd, n_head, n_head / 4, 2816);
        cases.push(tiny_case("dense", label, model, "llama-bpe", o));
    }
    cases
}

fn moe_cases() -> Vec<Case> {
    // With a 32 000-token vocabulary (llama-spm) the selected experts' gate, up and product
    // outgrow the logits.
    let mut cases = Vec::new();
    for (n_embd, n_head, n_ff, experts, context, ubatch, fa, vocab) in [
        (1024, 8, 1024, (8, 2), 8192, 512, true, "llama-bpe"),
        (1024, 8, 1024, (8, 2), 8192, 512, false, "llama-bpe"),
        (1024, 8, 1024, (8, 2), 4096, 128, true, "llama-bpe"),
        (2048, 32, 768, (64, 8), 8192, 512, true, "llama-bpe"),
        (2048, 32, 768, (64, 8), 8192, 512, false, "llama-bpe"),
        (2048, 32, 768, (64, 8), 4096, 128, true, "llama-bpe"),
        (2048, 16, 1536, (128, 16), 4096, 512, true, "llama-spm"),
        (2048, 16, 8192, (8, 2), 4096, 512, true, "llama-spm"),
        (1024, 8, 4096, (32, 8), 4096, 512, true, "llama-spm"),
        (2048, 16, 1536, (128, 16), 1024, 512, false, "llama-spm"),
    ] {
        let o = options(context, ubatch, fa);
        let label = format!(
            "embd {n_embd}, {} of {} experts × ff {n_ff}, {vocab}, {}",
            experts.1,
            experts.0,
            flags(&o)
        );
        let model = TinyModel {
            experts: Some(experts),
            ..tiny(2, n_embd, n_head, n_head / 4, n_ff)
        };
        cases.push(tiny_case("moe", label, model, vocab, o));
    }
    cases
}

fn swa_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_embd, n_head, window) in [(1024, 8, 1024), (2560, 8, 4096)] {
        for (context, ubatch, fa) in [(32_768, 512, true), (8192, 512, false)] {
            let o = options(context, ubatch, fa);
            let label = format!("embd {n_embd}, window {window}, {}", flags(&o));
            let model = TinyModel {
                sliding_window: Some(window),
                ..tiny(6, n_embd, n_head, n_head / 2, n_embd * 4)
            };
            cases.push(tiny_case("swa", label, model, "llama-bpe", o));
        }
    }
    cases
}

fn mla_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_embd, n_head) in [(1024, 16), (2048, 64)] {
        for (context, ubatch, fa) in [(16_384, 512, true), (8192, 512, false)] {
            let o = options(context, ubatch, fa);
            let label = format!("embd {n_embd}, {n_head} heads, {}", flags(&o));
            let model = TinyModel {
                experts: Some((8, 2)),
                mla: Some(TinyMla::deepseek_v3()),
                ..tiny(3, n_embd, n_head, n_head, 512)
            };
            cases.push(tiny_case("mla", label, model, "llama-bpe", o));
        }
    }
    cases
}

fn dsa_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (embedding, heads, layers, context, fa) in [
        (1024, 8, 4, 2048, true),
        (1024, 8, 4, 16_384, true),
        (1024, 8, 4, 65_536, true),
        (1024, 8, 32, 65_536, true),
        (1024, 8, 4, 32_768, false),
        (6144, 64, 4, 2048, true),
        (6144, 64, 4, 65_536, true),
        (6144, 64, 32, 65_536, true),
        (6144, 64, 4, 16_384, false),
        (4096, 32, 4, 32_768, false),
    ] {
        let ubatch = 512;
        let mut o = options(context, ubatch, fa);
        if fa {
            o.cache_type_k = KvType::Q8_0;
            o.cache_type_v = KvType::Q8_0;
        }
        let label = format!(
            "embd {embedding}, {heads} heads, {layers} layers, {}",
            flags(&o)
        );
        let shape = MoeShape {
            layers,
            embedding,
            heads,
            expert_ff: 1024,
            dense_ff: 2048,
            ..MoeShape::small()
        };
        cases.push(case("dsa", label, o, move |tools, path| {
            let vocab = GgufFile::open(tools.vocab("llama-bpe"))?;
            shape
                .writer_with_tokenizer(&vocab.metadata)
                .write_to_path(path)?;
            Ok(())
        }));
    }
    cases
}

fn mamba_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_embd, d_state) in [(2048, 16), (2048, 64), (4096, 16), (5632, 20), (8192, 16)] {
        for (parallel, ubatch) in [(1, 512), (5, 512), (8, 512), (8, 256), (1, 1024)] {
            let o = PlacementOptions {
                parallel,
                ..options(4096, ubatch, true)
            };
            let label =
                format!("embd {n_embd}, d_state {d_state}, {parallel} sequences, ub {ubatch}");
            let model = TinyMamba {
                name: "grid".into(),
                n_layer: 4,
                n_embd,
                d_state,
                d_conv: 4,
                dt_rank: n_embd.div_ceil(16),
                context_length: 1 << 20,
            };
            cases.push(case("mamba", label, o, move |tools, path| {
                model.write(&tools.vocab("gpt-neox"), path)?;
                Ok(())
            }));
        }
    }
    cases
}

fn qwen3next_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (n_embd, key_heads, value_heads) in [(2048, 16, 32), (2560, 32, 96)] {
        for (parallel, fa) in [(1, true), (2, true), (4, true), (8, true), (1, false)] {
            let o = PlacementOptions {
                parallel,
                ..options(16_384, 512, fa)
            };
            let label = format!(
                "embd {n_embd}, {key_heads}/{value_heads} linear heads, {parallel} slots, {}",
                flags(&o)
            );
            let model = TinyQwen3Next::with_linear_heads(3, n_embd, key_heads, value_heads);
            cases.push(qwen3next_case(label, model, "gpt-neox", o));
        }
    }
    // A 32 000-token vocabulary, so that the linear attention rather than the logits leads:
    // equal and repeated heads, narrow heads, slots that do not divide the micro-batch.
    for (n_embd, key_heads, value_heads, head) in [
        (1024, 8, 8, 128),
        (2048, 16, 32, 128),
        (4096, 16, 64, 128),
        (2048, 16, 16, 64),
    ] {
        for (parallel, ubatch, fa) in [
            (1, 256, true),
            (3, 512, true),
            (8, 1024, false),
            (2, 512, false),
        ] {
            let o = PlacementOptions {
                parallel,
                ..options(8_192, ubatch, fa)
            };
            let label = format!(
                "embd {n_embd}, {key_heads}/{value_heads} linear heads of {head}, {parallel} slots, {}",
                flags(&o)
            );
            let model = TinyQwen3Next {
                linear_head_dim: head,
                ..TinyQwen3Next::with_linear_heads(3, n_embd, key_heads, value_heads)
            };
            cases.push(qwen3next_case(label, model, "llama-spm", o));
        }
    }
    // One routed expert per token, and eight of 64 over eight layers.
    for (experts, n_layer) in [((16, 1), 3), ((64, 8), 8)] {
        let o = options(8_192, 512, true);
        let label = format!(
            "embd 2048, {} of {} experts, {n_layer} layers, {}",
            experts.1,
            experts.0,
            flags(&o)
        );
        let model = TinyQwen3Next {
            experts,
            expert_ff: 256,
            full_attention_interval: 4,
            ..TinyQwen3Next::with_linear_heads(n_layer, 2048, 16, 32)
        };
        cases.push(qwen3next_case(label, model, "llama-spm", o));
    }
    // A q8_0 cache (rotated around, for the full-attention layers) over two slots.
    let o = PlacementOptions {
        parallel: 2,
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..options(16_384, 512, true)
    };
    let label = format!(
        "embd 2048, 16/32 linear heads, q8_0 cache, 2 slots, {}",
        flags(&o)
    );
    let model = TinyQwen3Next::with_linear_heads(3, 2048, 16, 32);
    cases.push(qwen3next_case(label, model, "llama-spm", o));
    // The older single `ssm_in` projection, and the experts' gate and up fused.
    for (legacy_ssm_in, fused_gate_up, fa) in [
        (true, false, true),
        (true, false, false),
        (false, true, true),
    ] {
        let o = options(8_192, 512, fa);
        let form = if legacy_ssm_in {
            "ssm_in"
        } else {
            "gate_up_exps"
        };
        let label = format!("embd 2048, 16/32 linear heads, {form}, {}", flags(&o));
        let model = TinyQwen3Next {
            legacy_ssm_in,
            fused_gate_up,
            ..TinyQwen3Next::with_linear_heads(3, 2048, 16, 32)
        };
        cases.push(qwen3next_case(label, model, "llama-spm", o));
    }
    // Qwen3.5, MoE and dense: beta and alpha projected apart, no repeat of Q and K, M-RoPE;
    // Qwen's 152 K vocabulary (the logits lead) and a 32 K one (the layers lead).
    for (hybrid, n_embd, key_heads, value_heads, parallel, fa, vocab) in [
        (QwenHybrid::Qwen35Moe, 2048, 16, 32, 1, true, "qwen35"),
        (QwenHybrid::Qwen35Moe, 2048, 16, 32, 4, false, "llama-spm"),
        (QwenHybrid::Qwen35Moe, 3072, 16, 64, 2, true, "llama-spm"),
        (QwenHybrid::Qwen35Moe, 2048, 16, 32, 8, true, "llama-spm"),
        (QwenHybrid::Qwen35, 2560, 16, 32, 1, true, "qwen35"),
        (QwenHybrid::Qwen35, 2560, 16, 32, 3, false, "llama-spm"),
        (QwenHybrid::Qwen35, 4096, 16, 48, 8, true, "llama-spm"),
        (QwenHybrid::Qwen35, 1024, 16, 16, 1, true, "llama-spm"),
    ] {
        let o = PlacementOptions {
            parallel,
            ..options(8_192, 512, fa)
        };
        let label = format!(
            "{}, embd {n_embd}, {key_heads}/{value_heads} linear heads, {parallel} slots, {}",
            hybrid.architecture(),
            flags(&o)
        );
        let model = TinyQwen3Next {
            hybrid,
            n_ff: 4 * n_embd,
            full_attention_interval: 4,
            ..TinyQwen3Next::with_linear_heads(4, n_embd, key_heads, value_heads)
        };
        cases.push(qwen3next_case(label, model, vocab, o));
    }
    cases
}

fn qwen3next_case(
    label: String,
    model: TinyQwen3Next,
    vocab: &'static str,
    o: PlacementOptions,
) -> Case {
    case("qwen3next", label, o, move |tools, path| {
        model.write(&tools.vocab(vocab), path)?;
        Ok(())
    })
}

/// Ours against llama.cpp's for one case, in MiB: (weights, KV, compute) each.
struct Row {
    ours: [f64; 3],
    theirs: [f64; 3],
}

async fn measure(tools: &Tools, case: &Case, dir: &Path) -> anyhow::Result<Row> {
    let path = dir.join("model.gguf");
    (case.write)(tools, &path)?;
    let devices = preset("cpu-minipc")
        .ok_or_else(|| anyhow::anyhow!("the cpu-minipc preset is missing"))?
        .devices(&Margins::default());
    let shape = load_shape(&path)?.shape;
    let planned = report(
        &shape,
        &path.display().to_string(),
        &devices,
        &case.options,
        false,
    )?;
    let run = fit_params::run(&tools.fit_params, &planned.args, Duration::from_secs(300)).await?;
    std::fs::remove_file(&path)?;
    let host = planned
        .plan
        .devices
        .last()
        .ok_or_else(|| anyhow::anyhow!("no device in the plan"))?;
    let theirs = run
        .devices
        .iter()
        .find(|d| d.device == "Host")
        .ok_or_else(|| anyhow::anyhow!("no Host line in llama.cpp's table"))?;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    Ok(Row {
        ours: [
            mib(host.usage.weights_bytes),
            mib(host.usage.kv_bytes),
            mib(host.usage.compute_bytes),
        ],
        theirs: [
            mib(theirs.model_bytes),
            mib(theirs.context_bytes),
            mib(theirs.compute_bytes),
        ],
    })
}

/// How far ours is from llama.cpp's whole-MiB figure (which truncates): 0 inside its MiB.
fn off_by(ours: f64, theirs: f64) -> f64 {
    if ours >= theirs && ours <= theirs + 1.0 {
        0.0
    } else if ours > theirs {
        (ours / (theirs + 1.0) - 1.0) * 100.0
    } else {
        (ours / theirs.max(1.0) - 1.0) * 100.0
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let tools = Tools {
        fit_params: source::cached_llama_cpp_bin()?.join("llama-fit-params"),
        vocabs: source::cached_llama_cpp_source()?.join("models"),
    };
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let families: [Family; 7] = [
        ("dense", dense_cases),
        ("moe", moe_cases),
        ("swa", swa_cases),
        ("mla", mla_cases),
        ("dsa", dsa_cases),
        ("mamba", mamba_cases),
        ("qwen3next", qwen3next_cases),
    ];
    let dir = tempfile::tempdir()?;
    println!("| family | shape | weights ours / llama.cpp | KV ours / llama.cpp | compute ours / llama.cpp | compute off by |");
    println!("|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for (family, cases) in families {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == family) {
            continue;
        }
        let mut range: Option<(f64, f64)> = None;
        let mut worst_other: f64 = 0.0;
        for case in cases() {
            let row = match measure(&tools, &case, dir.path()).await {
                Ok(row) => row,
                Err(err) => {
                    println!(
                        "| {} | {} | failed: {err:#} | | | |",
                        case.family, case.label
                    );
                    continue;
                }
            };
            let off = off_by(row.ours[2], row.theirs[2]);
            range = Some(range.map_or((off, off), |(lo, hi)| (lo.min(off), hi.max(off))));
            for i in 0..2 {
                worst_other = worst_other.max(off_by(row.ours[i], row.theirs[i]).abs());
            }
            let pair = |i: usize| format!("{:.1} / {}", row.ours[i], row.theirs[i]);
            println!(
                "| {} | {} | {} | {} | {} | {off:+.1} % |",
                case.family,
                case.label,
                pair(0),
                pair(1),
                pair(2)
            );
        }
        if let Some((lo, hi)) = range {
            summary.push(format!(
                "{family}: compute {lo:+.1} % to {hi:+.1} %, weights and KV within {worst_other:.2} %"
            ));
        }
    }
    println!();
    for line in summary {
        println!("{line}");
    }
    Ok(())
}
