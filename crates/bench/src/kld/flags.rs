//! `llama-perplexity` runs with a launch profile's own flags where they mean something to it: the
//! model, its placement (layers, tensor split, overrides, experts in RAM), and everything that
//! changes the numbers (KV cache types, flash attention, ik_llama.cpp's MLA and fused MoE…).
//! llama-perplexity takes llama.cpp's common options with the server's spelling, so those pass
//! unchanged; the server's own (host, port, key, slots, templates, drafts…) are dropped and
//! listed. Programs run from argv vectors, never a shell.

use std::path::Path;

/// Profile flags kept, and whether each takes a value.
const KEPT: &[(&[&str], Arity)] = &[
    (&["-m", "--model"], Arity::Value),
    (&["-ngl", "--gpu-layers", "--n-gpu-layers"], Arity::Value),
    (&["-ts", "--tensor-split"], Arity::Value),
    (&["-sm", "--split-mode"], Arity::Value),
    (&["-mg", "--main-gpu"], Arity::Value),
    (&["-dev", "--device"], Arity::Value),
    (&["-ot", "--override-tensor"], Arity::Value),
    (&["-ncmoe", "--n-cpu-moe"], Arity::Value),
    (&["-cmoe", "--cpu-moe"], Arity::Switch),
    (&["-ctk", "--cache-type-k"], Arity::Value),
    (&["-ctv", "--cache-type-v"], Arity::Value),
    (&["-fa", "--flash-attn"], Arity::OptionalValue),
    (&["-t", "--threads"], Arity::Value),
    (&["-tb", "--threads-batch"], Arity::Value),
    (&["-b", "--batch-size"], Arity::Value),
    (&["-ub", "--ubatch-size"], Arity::Value),
    (&["--numa"], Arity::Value),
    (&["--override-kv"], Arity::Value),
    (&["--rope-scaling"], Arity::Value),
    (&["--rope-freq-base"], Arity::Value),
    (&["--no-mmap"], Arity::Switch),
    (&["--mlock"], Arity::Switch),
    (&["-nkvo", "--no-kv-offload"], Arity::Switch),
    (&["--swa-full"], Arity::Switch),
    // ik_llama.cpp
    (&["-mla", "--mla-use"], Arity::Value),
    (&["-amb", "--attention-max-batch"], Arity::Value),
    (&["-ser", "--smart-expert-reduction"], Arity::Value),
    (&["-fmoe", "--fused-moe"], Arity::Switch),
    (&["-rtr", "--run-time-repack"], Arity::Switch),
];

/// Server flags whose value is another word, so it is dropped with them.
const SERVER_VALUED: &[&str] = &[
    "-c",
    "--ctx-size",
    "--host",
    "--port",
    "--api-key",
    "-a",
    "--alias",
    "-np",
    "--parallel",
    "--chat-template",
    "--chat-template-file",
    "-md",
    "--model-draft",
    "-ngld",
    "--gpu-layers-draft",
    "--draft-max",
    "--draft-min",
    "--draft-p-min",
    "--ctx-size-draft",
    "--cache-reuse",
    "--slot-save-path",
    "--reasoning-format",
    "--reasoning-budget",
    "--log-file",
    "--mmproj",
    "-n",
    "--n-predict",
    "--seed",
    "-s",
    "--spec-type",
    "--prio",
    "--cpu-mask",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    Switch,
    Value,
    /// `-fa` takes `on|off|auto` in llama.cpp and nothing in ik_llama.cpp.
    OptionalValue,
}

/// The profile flags llama-perplexity runs with (the program and `-c` left out), and those
/// dropped. `context` is the window length of the run: a batch size llama-perplexity cannot
/// split windows by is dropped too.
pub fn perplexity_flags(server_args: &[String], context: u32) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    let mut words = server_args.iter().peekable();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (word.as_str(), None),
        };
        let arity = KEPT
            .iter()
            .find(|(names, _)| names.contains(&flag))
            .map(|(_, a)| *a);
        let takes_value = match arity {
            Some(Arity::Value) => true,
            Some(Arity::Switch) => false,
            Some(Arity::OptionalValue) => words.peek().is_some_and(|w| is_fa_value(w)),
            None => SERVER_VALUED.contains(&flag) || words.peek().is_some_and(|w| !is_flag(w)),
        };
        let value = match inline {
            Some(v) => Some(v),
            None if takes_value => words.next().cloned(),
            None => None,
        };
        let shown = match &value {
            Some(v) => format!("{flag} {v}"),
            None => flag.to_owned(),
        };
        let batch_unsplittable = matches!(flag, "-b" | "--batch-size")
            && value
                .as_deref()
                .and_then(|v| v.parse::<u32>().ok())
                .is_some_and(|b| b > context && b % context != 0);
        if arity.is_none() || batch_unsplittable || (takes_value && value.is_none()) {
            dropped.push(shown);
            continue;
        }
        kept.push(flag.to_owned());
        kept.extend(value);
    }
    (kept, dropped)
}

fn is_flag(word: &str) -> bool {
    word.starts_with('-') && word.parse::<f64>().is_err()
}

fn is_fa_value(word: &str) -> bool {
    matches!(word, "on" | "off" | "auto" | "0" | "1" | "true" | "false")
}

/// The run that records a reference's logits over `corpus` in windows of `context` tokens.
pub fn reference_argv(
    program: &Path,
    flags: &[String],
    corpus: &Path,
    context: u32,
    chunks: Option<u32>,
    logits_out: &Path,
) -> Vec<String> {
    let mut argv = vec![program.display().to_string()];
    argv.extend(flags.iter().cloned());
    argv.extend(["-f".to_owned(), corpus.display().to_string()]);
    argv.extend(["-c".to_owned(), context.to_string()]);
    if let Some(n) = chunks {
        argv.extend(["--chunks".to_owned(), n.to_string()]);
    }
    argv.extend([
        "--kl-divergence-base".to_owned(),
        logits_out.display().to_string(),
    ]);
    argv
}

/// The run that measures a candidate against recorded logits (their tokens are in the file).
pub fn candidate_argv(
    program: &Path,
    flags: &[String],
    context: u32,
    logits: &Path,
) -> Vec<String> {
    let mut argv = vec![program.display().to_string()];
    argv.extend(flags.iter().cloned());
    argv.extend(["-c".to_owned(), context.to_string()]);
    argv.extend([
        "--kl-divergence-base".to_owned(),
        logits.display().to_string(),
        "--kl-divergence".to_owned(),
    ]);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn placement_and_numerics_pass_and_the_server_flags_are_listed() {
        let args = words(
            "-m /m/q4.gguf --host 127.0.0.1 --port 8080 --api-key k -c 8192 -np 2 -ngl 99 \
             -ts 1,1 -ot blk\\.3\\.ffn_.*=CPU -fa on -ctk q8_0 -ctv q8_0 --jinja --metrics \
             --alias gemma --no-mmap -t 8",
        );
        let (kept, dropped) = perplexity_flags(&args, 512);
        assert_eq!(
            kept,
            words("-m /m/q4.gguf -ngl 99 -ts 1,1 -ot blk\\.3\\.ffn_.*=CPU -fa on -ctk q8_0 -ctv q8_0 --no-mmap -t 8")
        );
        assert_eq!(
            dropped,
            vec![
                "--host 127.0.0.1",
                "--port 8080",
                "--api-key k",
                "-c 8192",
                "-np 2",
                "--jinja",
                "--metrics",
                "--alias gemma"
            ]
        );
    }

    #[test]
    fn ik_switches_and_a_bare_fa_are_kept_and_an_unsplittable_batch_dropped() {
        let (kept, dropped) = perplexity_flags(
            &words("-fa -fmoe -mla 3 -rtr -b 3000 --cache-type-k=q4_0"),
            2048,
        );
        assert_eq!(kept, words("-fa -fmoe -mla 3 -rtr --cache-type-k q4_0"));
        assert_eq!(dropped, vec!["-b 3000"]);
        let (kept, _) = perplexity_flags(&words("-b 4096 -ub 512"), 2048);
        assert_eq!(kept, words("-b 4096 -ub 512"));
    }

    #[test]
    fn the_two_passes_read_the_same_windows() {
        let p = Path::new("/e/llama-perplexity");
        let flags = words("-m /m/f16.gguf");
        let r = reference_argv(
            p,
            &flags,
            Path::new("/c.txt"),
            512,
            Some(4),
            Path::new("/r.tmp"),
        );
        assert_eq!(
            r,
            words("/e/llama-perplexity -m /m/f16.gguf -f /c.txt -c 512 --chunks 4 --kl-divergence-base /r.tmp")
        );
        let c = candidate_argv(p, &words("-m /m/q4.gguf -ctk q8_0"), 512, Path::new("/r"));
        assert_eq!(
            c,
            words("/e/llama-perplexity -m /m/q4.gguf -ctk q8_0 -c 512 --kl-divergence-base /r --kl-divergence")
        );
    }
}
