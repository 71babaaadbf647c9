//! Writes small valid GGUF files to seed a fuzzer's corpus (the cargo-fuzz target in `fuzz/`).
//!
//! Run: `cargo run -p rigdeck-gguf --example fuzz_seeds -- fuzz/corpus/read_header`

#[path = "../tests/common/mod.rs"]
mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::{GgmlType, GgufWriter, TensorData};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: fuzz_seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    let mut tiny = GgufWriter::new();
    tiny.set("general.architecture", "llama")
        .set("llama.block_count", 1u32)
        .add_tensor("w", &[32], GgmlType::Q8_0, TensorData::Zeros);
    let mut moe = MoeShape::small();
    moe.vocab = 64;
    let every = common::every_type_writer().header_bytes()?;
    let seeds = [
        ("tiny.gguf", tiny.to_bytes()?),
        ("every-type-header.gguf", every),
        ("moe-header.gguf", moe.writer().header_bytes()?),
    ];
    for (name, bytes) in seeds {
        let path = std::path::Path::new(&dir).join(name);
        std::fs::write(&path, &bytes)?;
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    Ok(())
}
