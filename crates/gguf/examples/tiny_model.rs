//! Writes a tiny llama-architecture model with a real tokenizer, for trying engines by hand:
//! `cargo run -p rigdeck-gguf --example tiny_model -- VOCAB.gguf OUT.gguf [moe]`
//! (VOCAB is one of llama.cpp's `models/ggml-vocab-*.gguf`).

use rigdeck_gguf::tiny::TinyModel;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(vocab), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: tiny_model VOCAB.gguf OUT.gguf [moe]".into());
    };
    let mut model = TinyModel::dense_runnable();
    if args.get(2).map(String::as_str) == Some("moe") {
        model.experts = Some((4, 2));
    }
    let bytes = model.write(vocab.as_ref(), out.as_ref())?;
    println!("wrote {out} ({bytes} bytes)");
    Ok(())
}
