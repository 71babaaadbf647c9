//! Writes a llama-architecture model with a real tokenizer, for trying engines by hand and for the
//! planned-vs-measured check on a GPU machine:
//! `cargo run -p rigdeck-gguf --example tiny_model -- VOCAB.gguf OUT.gguf [moe] [--layers N]
//! [--embd N] [--heads N] [--kv-heads N] [--ff N] [--experts TOTAL/USED] [--zeros]`
//! (VOCAB is one of llama.cpp's `models/ggml-vocab-*.gguf`). Without shape options it is the tiny
//! runnable model; `--zeros` writes a sparse file of any size in seconds (it loads, answers nonsense).

use rigdeck_gguf::tiny::TinyModel;

const USAGE: &str =
    "usage: tiny_model VOCAB.gguf OUT.gguf [moe] [--layers N] [--embd N] [--heads N] \
                     [--kv-heads N] [--ff N] [--experts TOTAL/USED] [--zeros]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(vocab), Some(out)) = (args.first(), args.get(1)) else {
        return Err(USAGE.into());
    };
    let mut model = TinyModel::dense_runnable();
    let mut rest = args[2..].iter();
    while let Some(arg) = rest.next() {
        if arg == "moe" {
            model.experts = Some((4, 2));
            continue;
        }
        if arg == "--zeros" {
            model.random_weights = false;
            continue;
        }
        let value = rest
            .next()
            .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{arg}: `{value}` is not a whole number"))
        };
        match arg.as_str() {
            "--layers" => model.n_layer = number()?,
            "--embd" => model.n_embd = number()?,
            "--heads" => model.n_head = number()?,
            "--kv-heads" => model.n_head_kv = number()?,
            "--ff" => model.n_ff = number()?,
            "--experts" => model.experts = Some(experts(value)?),
            _ => return Err(format!("unknown option {arg}; {USAGE}").into()),
        }
    }
    if model.n_head == 0
        || model.n_head_kv == 0
        || !model.n_embd.is_multiple_of(model.n_head)
        || !model.n_head.is_multiple_of(model.n_head_kv)
    {
        return Err("--embd must be a multiple of --heads, and --heads of --kv-heads".into());
    }
    model.name = format!("rigdeck-{}l-{}e", model.n_layer, model.n_embd);
    let bytes = model.write(vocab.as_ref(), out.as_ref())?;
    println!("wrote {out} ({bytes} bytes)");
    Ok(())
}

/// `64/8` → 64 experts, 8 used per token.
fn experts(value: &str) -> Result<(u64, u64), String> {
    let parsed = value
        .split_once('/')
        .and_then(|(total, used)| Some((total.parse().ok()?, used.parse().ok()?)));
    match parsed {
        Some((total, used)) if used >= 1 && used <= total => Ok((total, used)),
        _ => Err(format!("--experts: `{value}` is not TOTAL/USED, e.g. 64/8")),
    }
}
