//! Benchmark: read the header of a synthetic GLM-5.2-shaped split model (6 shards, ~1 800
//! tensors, 78 layers, 256 experts with 8 active, MLA) and plan it for the 4× RTX 3090 rig,
//! as `rigdeck plan --auto` does; then the same for a Qwen3-Next-80B-A3B-shaped file, whose
//! compute buffers come from its graph replayed through ggml's allocator. Prints the median
//! and spread of each step over many runs.
//!
//! `cargo run --release -p rigdeck-placement --example plan_bench [-- DIR]` (DIR keeps the fixture).

use std::time::{Duration, Instant};

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::tiny_recurrent::TinyQwen3Next;
use rigdeck_gguf::{Array, GgufWriter, StringArray, Value};
use rigdeck_placement::from_gguf::load_shape;
use rigdeck_placement::plan::DeviceSpec;
use rigdeck_placement::report::report;
use rigdeck_placement::rig::{preset, Margins};
use rigdeck_placement::{KvType, PlacementOptions};

const RUNS: usize = 50;

fn median(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1]),
    )
}

fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&dir)?;
    let shards = MoeShape::glm_5_2()
        .writer()
        .write_split(&dir, "GLM-5.2-IQ2", 6)?;
    let first = shards[0].clone();
    let devices = preset("4x3090")
        .ok_or_else(|| anyhow::anyhow!("preset missing"))?
        .devices(&Margins::default());
    let options = PlacementOptions {
        context: 131_072,
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..Default::default()
    };

    let label = format!("GLM-5.2-shaped split model: {} shards", shards.len());
    bench(&label, &first, &devices, &options, true)?;

    let qwen = dir.join("Qwen3-Next-80B-A3B.gguf");
    let model = TinyQwen3Next {
        full_attention_interval: 4,
        experts: (512, 10),
        ..TinyQwen3Next::with_linear_heads(48, 2048, 16, 32)
    };
    model.writer(&vocab(151_936)).write_to_path(&qwen)?;
    // Most of 160 GB of f16 weights land in host RAM: fitting is not the point here.
    bench(
        "Qwen3-Next-80B-A3B-shaped file",
        &qwen,
        &devices,
        &options,
        false,
    )?;
    Ok(())
}

/// Reads `first` and plans it RUNS times; prints each step's spread.
fn bench(
    label: &str,
    first: &std::path::Path,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
    must_fit: bool,
) -> anyhow::Result<()> {
    let (mut reads, mut plans, mut totals) = (Vec::new(), Vec::new(), Vec::new());
    let mut tensors = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let loaded = load_shape(first)?;
        let read = start.elapsed();
        let r = report(
            &loaded.shape,
            &first.display().to_string(),
            devices,
            options,
            true,
        )?;
        let total = start.elapsed();
        tensors = loaded.shape.tensors.len();
        anyhow::ensure!(r.fits || !must_fit, "{label} does not fit the rig");
        reads.push(read);
        plans.push(total - read);
        totals.push(total);
    }
    println!("{label}, {tensors} tensors; 4× RTX 3090 rig, --auto, ctx 131072 q8_0; {RUNS} runs");
    println!("| step | min ms | median ms | max ms |");
    println!("|---|---|---|---|");
    for (name, samples) in [
        ("read the headers", reads),
        ("automatic placement + flags + ceiling", plans),
        ("read + plan", totals),
    ] {
        let (min, med, max) = median(samples);
        println!("| {name} | {min:.2} | {med:.2} | {max:.2} |");
    }
    println!();
    Ok(())
}

/// A tokenizer of `n` made-up tokens: only its size reaches the plan (the logits).
fn vocab(n: usize) -> rigdeck_gguf::Metadata {
    let mut w = GgufWriter::new();
    let tokens: StringArray = (0..n).map(|i| format!("t{i}")).collect();
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    w.metadata().clone()
}
