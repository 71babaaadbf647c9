//! Benchmark: llama.cpp's dry run (`llama-fit-params` of the cached CPU build) of a GLM-5.2-shaped
//! split model (6 shards of sparse files, 78 layers, 256 experts, MLA + DSA, a real tokenizer),
//! planned for the host at 131 072 tokens of q8_0 cache, against the planner's own estimate of
//! the same plan. Each dry run is a fresh process (the daemon's cache is not used).
//!
//! `cargo run --release -p rigdeck-core --example dry_run_bench [-- CONTEXT UBATCH on|off]`
//! (defaults 131072, 512, flash attention on)
//! (`RIGDECK_LLAMA_BIN_DIR`, `RIGDECK_LLAMA_SOURCE_DIR` override where the build and the
//! tokenizer are found, as in the oracle tests).

use std::time::{Duration, Instant};

use rigdeck_core::engines::{fit_params, source};
use rigdeck_core::placement::from_gguf::load_shape;
use rigdeck_core::placement::report::report;
use rigdeck_core::placement::rig::{preset, Margins};
use rigdeck_core::placement::{KvType, PlacementOptions};
use rigdeck_gguf::fixtures::MoeShape;

const DRY_RUNS: usize = 5;
const ESTIMATES: usize = 50;

fn spread(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "min {:.1} ms, median {:.1} ms, max {:.1} ms ({} runs)",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1]),
        samples.len()
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let bin = source::cached_llama_cpp_bin()?.join("llama-fit-params");
    let vocab = source::cached_llama_cpp_source()?.join("models/ggml-vocab-llama-bpe.gguf");
    let vocab = rigdeck_gguf::GgufFile::open(&vocab)?;
    let dir = tempfile::tempdir()?;
    let shards = MoeShape::glm_5_2()
        .writer_with_tokenizer(&vocab.metadata)
        .write_split(dir.path(), "GLM-5.2-IQ2", 6)?;
    let first = shards[0].display().to_string();
    let devices = preset("cpu-minipc")
        .ok_or_else(|| anyhow::anyhow!("preset missing"))?
        .devices(&Margins::default());
    let arg = |i: usize| std::env::args().nth(i);
    let options = PlacementOptions {
        context: arg(1).and_then(|a| a.parse().ok()).unwrap_or(131_072),
        ubatch: arg(2).and_then(|a| a.parse().ok()).unwrap_or(512),
        flash_attention: arg(3).is_none_or(|a| a != "off"),
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        kv_unified: false,
        ..Default::default()
    };

    let mut estimates = Vec::new();
    let mut planned = None;
    for _ in 0..ESTIMATES {
        let start = Instant::now();
        let loaded = load_shape(&shards[0])?;
        let r = report(&loaded.shape, &first, &devices, &options, false)?;
        estimates.push(start.elapsed());
        planned = Some(r);
    }
    let planned = planned.ok_or_else(|| anyhow::anyhow!("no estimate"))?;
    let mut dry_runs = Vec::new();
    let mut table = None;
    for _ in 0..DRY_RUNS {
        let start = Instant::now();
        let run = fit_params::run(&bin, &planned.args, Duration::from_secs(120)).await?;
        dry_runs.push(start.elapsed());
        table = Some(run);
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "GLM-5.2-shaped model, 6 shards, host only, {} tokens of q8_0 cache, ubatch {}, flash attention {}",
        options.context, options.ubatch, options.flash_attention
    );
    println!("estimate (read 6 headers + plan): {}", spread(estimates));
    println!("llama.cpp dry run (llama-fit-params): {}", spread(dry_runs));
    let host = &planned.plan.devices[planned.plan.devices.len() - 1].usage;
    println!(
        "ours: model {:.1} MiB, context {:.1} MiB, compute {:.1} MiB",
        mib(host.weights_bytes),
        mib(host.kv_bytes),
        mib(host.compute_bytes)
    );
    for d in table.iter().flat_map(|t| &t.devices) {
        println!(
            "llama.cpp {}: model {} MiB, context {} MiB, compute {} MiB",
            d.device,
            mib(d.model_bytes),
            mib(d.context_bytes),
            mib(d.compute_bytes)
        );
    }
    Ok(())
}
