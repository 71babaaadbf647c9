//! Benchmark: read the headers of a GLM-5.2-shaped split model (about 1 800 tensors in 6
//! parts, a 154 880-token vocabulary) into one model, locally and over HTTP.
//!
//! The parts are written as sparse files (headers only, zero data as holes), so the ~200 GB
//! model takes a few megabytes of disk. Prints a small table: the median and best of N local
//! reads, and the number of HTTP Range requests (and time) for the remote read of the same set
//! from a local HTTP server.
//!
//! Run: `cargo run --release -p rigdeck-gguf --example read_bench [-- RUNS]`

#[path = "../tests/common/mod.rs"]
mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::remote::HttpReader;
use rigdeck_gguf::{GgufModel, ModelSummary};
use std::time::{Duration, Instant};

const GB: f64 = 1e9;
const MIB: f64 = 1024.0 * 1024.0;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(25);
    let dir = tempfile::tempdir()?;

    let t = Instant::now();
    let writer = MoeShape::glm_5_2().writer();
    let paths = writer.write_split(dir.path(), "GLM-5.2-IQ2_XXS", 6)?;
    let build = t.elapsed();

    // Warm the page cache once, then time whole reads of all six headers into one model.
    let model = GgufModel::open(&paths[0])?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let m = GgufModel::open(&paths[3])?;
        times.push(t.elapsed());
        assert_eq!(m.tensors.len(), model.tensors.len());
    }
    let best = times.iter().min().copied().unwrap_or_default();
    let local = median(times);

    let t = Instant::now();
    let summary = ModelSummary::from_model(&model);
    let summarise = t.elapsed();

    let server = common::TestServer::start(dir.path(), false).await;
    let reader = HttpReader::new();
    let t = Instant::now();
    let remote = reader
        .read_model(&server.url("GLM-5.2-IQ2_XXS-00001-of-00006.gguf"))
        .await?;
    let remote_time = t.elapsed();
    assert_eq!(remote.tensors, model.tensors);

    let apparent: u64 = model.file_size().unwrap_or(0);
    let on_disk = disk_usage(&paths);
    println!("rigdeck-gguf read benchmark: GLM-5.2-shaped split model (synthetic)");
    println!(
        "  parts {}, tensors {}, layers {:?}, experts {:?}, vocab {:?}",
        model.shards.len(),
        model.tensors.len(),
        summary.layers,
        summary.experts.as_ref().map(|e| (e.count, e.used)),
        summary.vocab_size
    );
    println!(
        "  parameters {:.0} B, tensor data {:.1} GB, files {:.1} GB apparent, {:.1} MiB on disk",
        summary.parameter_count as f64 / 1e9,
        summary.tensor_bytes as f64 / GB,
        apparent as f64 / GB,
        on_disk as f64 / MIB
    );
    println!(
        "  header bytes per part: {:?}",
        model
            .shards
            .iter()
            .map(|s| s.header_bytes)
            .collect::<Vec<_>>()
    );
    println!();
    let rows = [
        (
            format!("local: 6 headers into one model, median of {runs}"),
            ms(local),
        ),
        (
            format!("local: 6 headers into one model, best of {runs}"),
            ms(best),
        ),
        ("summary of the model".to_owned(), ms(summarise)),
        (
            "remote (local HTTP): requests for 6 parts".to_owned(),
            reader.requests().to_string(),
        ),
        ("remote (local HTTP): time".to_owned(), ms(remote_time)),
        ("writing the sparse parts (setup)".to_owned(), ms(build)),
    ];
    println!("| {:<46} | {:>10} |", "measurement", "value");
    println!("|{:-<48}|{:->12}|", "", "");
    for (label, value) in rows {
        println!("| {label:<46} | {value:>10} |");
    }
    Ok(())
}

/// Bytes allocated on disk (sparse files allocate only their headers).
fn disk_usage(paths: &[std::path::PathBuf]) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }
    #[cfg(not(unix))]
    {
        let _ = paths;
        0
    }
}
