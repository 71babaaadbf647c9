//! llama.cpp's own `llama-bench` run with a launch profile's flags: prompt-processing (pp) and
//! token-generation (tg) speed at context depths, measured inside the engine with no HTTP in
//! between, so a serving benchmark's figures can be checked against the engine's ceiling.
//!
//! llama-bench's command line is not llama-server's: `,` separates alternative values to sweep
//! (every combination becomes a test), so a profile's arguments are translated
//! ([`bench_flags`]) rather than passed on: tensor split uses `/` between devices, several tensor
//! overrides go in one `-ot` joined by `;`, boolean switches take `0|1`, and flags that only mean
//! something to a server (context size, slots, host, port…) are dropped and listed so the caller
//! can tell the user. The process runs from an argv vector ([`argv`], [`run`]), never a shell.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::process::Command;
use tokio::sync::watch;

use crate::stats::Stats;
use rigdeck_placement::{PlacementOptions, TensorOverride};

/// Largest prompt, generation or depth size accepted: beyond it a run is a typo, not a benchmark.
const MAX_TOKENS: u32 = 1_000_000;
/// Most values in one list: llama-bench runs every combination, so long lists multiply quickly.
const MAX_VALUES: usize = 32;
const MAX_REPETITIONS: u32 = 100;
/// `-ngl all` for llama-bench, which takes only numbers (more layers than any model has).
const ALL_LAYERS: &str = "999";
/// Lines of stderr kept for an error message.
const STDERR_TAIL: usize = 40;

/// What llama-bench measures: every prompt size and every generation size, each at every depth,
/// repeated `repetitions` times (llama-bench's `-p`, `-n`, `-d`, `-r`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlamaBenchSpec {
    /// Prompt sizes: one pp test per size and depth.
    pub prompt_tokens: Vec<u32>,
    /// Generation sizes: one tg test per size and depth.
    pub gen_tokens: Vec<u32>,
    /// Tokens already in the KV cache before each test (0 = empty context).
    pub depths: Vec<u32>,
    /// Timed repetitions of each test (after llama-bench's warm-up run).
    pub repetitions: u32,
}

impl Default for LlamaBenchSpec {
    /// llama-bench's own defaults (`-p 512 -n 128 -d 0 -r 5`), so figures compare with
    /// published ones.
    fn default() -> Self {
        Self {
            prompt_tokens: vec![512],
            gen_tokens: vec![128],
            depths: vec![0],
            repetitions: 5,
        }
    }
}

impl LlamaBenchSpec {
    /// Tests llama-bench runs: each prompt size and each generation size at each depth.
    pub fn tests(&self) -> u32 {
        ((self.prompt_tokens.len() + self.gen_tokens.len()) * self.depths.len()) as u32
    }

    /// Checks the spec before anything runs; the message names the field and the fix.
    pub fn validate(&self) -> Result<(), String> {
        let lists = [
            ("prompt_tokens", &self.prompt_tokens, 1, "e.g. [512]"),
            ("gen_tokens", &self.gen_tokens, 1, "e.g. [128]"),
            ("depths", &self.depths, 0, "use [0] for an empty context"),
        ];
        for (field, values, min, example) in lists {
            if values.is_empty() {
                return Err(format!(
                    "{field} is empty: give at least one value ({example})"
                ));
            }
            if values.len() > MAX_VALUES {
                return Err(format!(
                    "{field} has {} values: give at most {MAX_VALUES} (llama-bench runs every combination)",
                    values.len()
                ));
            }
            if let Some(v) = values.iter().find(|v| **v < min || **v > MAX_TOKENS) {
                return Err(format!(
                    "{field} value {v}: use {min} to {MAX_TOKENS} tokens"
                ));
            }
        }
        if self.repetitions == 0 || self.repetitions > MAX_REPETITIONS {
            return Err(format!(
                "repetitions {}: use 1 to {MAX_REPETITIONS} (5 is llama-bench's default)",
                self.repetitions
            ));
        }
        Ok(())
    }
}

/// How a llama-server flag becomes llama-bench's.
enum Rule {
    /// Same meaning and value syntax: passed on under this name.
    Same(&'static str),
    /// A value list llama-server separates with `,` and llama-bench with `/` (`-ts`, `-dev`).
    Slashed(&'static str),
    /// A switch without a value that llama-bench spells as `<flag> <value>`.
    Switch(&'static str, &'static str),
    GpuLayers,
    FlashAttention,
    /// `-ot`: one or more `PATTERN=BUFFER` separated by `,`.
    Overrides,
    /// `-ncmoe N`: the experts of the first N layers to the CPU.
    CpuMoeLayers,
    /// `-cmoe`: every expert tensor to the CPU.
    CpuMoe,
}

/// llama-server flags llama-bench understands, with every spelling llama-server accepts.
fn rule(flag: &str) -> Option<Rule> {
    use Rule::*;
    Some(match flag {
        "-m" | "--model" => Same("-m"),
        "-ngl" | "--gpu-layers" | "--n-gpu-layers" => GpuLayers,
        "-ts" | "--tensor-split" => Slashed("-ts"),
        "-dev" | "--device" => Slashed("-dev"),
        "-sm" | "--split-mode" => Same("-sm"),
        "-mg" | "--main-gpu" => Same("-mg"),
        "-ot" | "--override-tensor" => Overrides,
        "-ncmoe" | "--n-cpu-moe" => CpuMoeLayers,
        "-cmoe" | "--cpu-moe" => CpuMoe,
        "-ctk" | "--cache-type-k" => Same("-ctk"),
        "-ctv" | "--cache-type-v" => Same("-ctv"),
        "-fa" | "--flash-attn" => FlashAttention,
        "-b" | "--batch-size" => Same("-b"),
        "-ub" | "--ubatch-size" => Same("-ub"),
        "-t" | "--threads" => Same("-t"),
        "-C" | "--cpu-mask" => Same("-C"),
        "--cpu-strict" => Same("--cpu-strict"),
        "--poll" => Same("--poll"),
        "--prio" => Same("--prio"),
        "--numa" => Same("--numa"),
        "-lm" | "--load-mode" => Same("-lm"),
        "-nkvo" | "--no-kv-offload" => Switch("-nkvo", "1"),
        "-kvo" | "--kv-offload" => Switch("-nkvo", "0"),
        "-nopo" | "--no-op-offload" => Switch("-nopo", "1"),
        "--no-host" => Switch("--no-host", "1"),
        "--repack" => Switch("--repack", "1"),
        "-nr" | "--no-repack" => Switch("--repack", "0"),
        _ => return None,
    })
}

/// llama-server flags that take a value and mean nothing to llama-bench: dropped with their value
/// even when the value looks like a flag.
const SERVER_VALUED: &[&str] = &[
    "-c",
    "--ctx-size",
    "-np",
    "--parallel",
    "--host",
    "--port",
    "-a",
    "--alias",
    "--api-key",
    "--api-key-file",
    "-n",
    "--n-predict",
    "-p",
    "--prompt",
    "-r",
    "--reverse-prompt",
    "-s",
    "--seed",
    "-tb",
    "--threads-batch",
    "--temp",
    "--top-k",
    "--top-p",
    "--min-p",
    "--repeat-penalty",
    "--chat-template",
    "--chat-template-file",
    "--chat-template-kwargs",
    "--reasoning-format",
    "--reasoning-budget",
    "-md",
    "--model-draft",
    "-ngld",
    "--gpu-layers-draft",
    "--n-gpu-layers-draft",
    "-devd",
    "--device-draft",
    "--draft-max",
    "--draft-min",
    "-cd",
    "--ctx-size-draft",
    "--mmproj",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-hff",
    "--hf-file",
    "--log-file",
    "--slot-save-path",
    "-to",
    "--timeout",
    "--threads-http",
    "-cram",
    "--cache-ram",
    "--cache-reuse",
    "-fit",
    "--fit",
    "-fitt",
    "--fit-target",
    "-fitc",
    "--fit-ctx",
    "--rope-scaling",
    "--rope-freq-base",
    "--override-kv",
    "-lv",
    "--verbosity",
];

/// True when `word` is a flag rather than a value (negative numbers are values).
fn is_flag(word: &str) -> bool {
    word.starts_with('-') && word.parse::<f64>().is_err()
}

/// The llama-bench arguments that load the model as the llama-server arguments `server_args`
/// do (Rigdeck's `rigdeck_placement::flags::to_args` output plus a user's extra arguments; no
/// program name), and the server flags left out, each with its value (`"-c 8192"`), so the caller
/// can say what the benchmark does not reflect.
///
/// A flag given twice keeps its last value, as llama-server does (llama-bench would sweep both);
/// every `-ot`, `-ncmoe` and `-cmoe` goes, in order, into one `-ot A=X;B=Y`. `-ngl all|auto`
/// becomes 999, `-fa on|off` becomes `1|0`, switches such as `-nkvo` become `-nkvo 1`. A flag
/// llama-bench does not know is dropped rather than passed, since llama-bench exits on it; its
/// value is dropped with it (the next word, unless that is a flag). A model path containing `,`
/// cannot be expressed: llama-bench would read two models.
pub fn bench_flags(server_args: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut overrides: Vec<String> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let mut words = server_args.iter().peekable();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (word.as_str(), None),
        };
        let Some(rule) = rule(flag) else {
            let takes_value =
                SERVER_VALUED.contains(&flag) || words.peek().is_some_and(|next| !is_flag(next));
            let value = match inline {
                Some(v) => Some(v),
                None if takes_value && is_flag(flag) => words.next().cloned(),
                None => None,
            };
            dropped.push(match value {
                Some(v) => format!("{flag} {v}"),
                None => flag.to_owned(),
            });
            continue;
        };
        // Every rule but the switches and `-cmoe` takes a value; `-fa`'s is optional.
        let valued = !matches!(rule, Rule::Switch(..) | Rule::CpuMoe);
        let value = match (inline, valued) {
            (Some(v), _) => Some(v),
            (None, false) => None,
            (None, true) if matches!(rule, Rule::FlashAttention) => {
                let given = words.peek().is_some_and(|next| fa_value(next).is_some());
                if given {
                    words.next().cloned()
                } else {
                    None
                }
            }
            (None, true) => match words.next() {
                Some(v) => Some(v.clone()),
                None => {
                    dropped.push(flag.to_owned());
                    continue;
                }
            },
        };
        let value = value.unwrap_or_default();
        match rule {
            Rule::Same(name) => set(&mut out, name, value),
            Rule::Slashed(name) => set(&mut out, name, value.replace(',', "/")),
            Rule::Switch(name, v) => set(&mut out, name, v.to_owned()),
            Rule::GpuLayers => match value.as_str() {
                "all" | "auto" => set(&mut out, "-ngl", ALL_LAYERS.to_owned()),
                v if v.parse::<i64>().is_ok() => set(&mut out, "-ngl", value),
                _ => dropped.push(format!("{flag} {value}")),
            },
            Rule::FlashAttention => match fa_value(if value.is_empty() { "on" } else { &value }) {
                Some(v) => set(&mut out, "-fa", v.to_owned()),
                None => dropped.push(format!("{flag} {value}")),
            },
            Rule::Overrides => {
                overrides_here(&mut out);
                for entry in value.split(',') {
                    // `;` separates overrides inside llama-bench's one -ot value.
                    if entry.contains('=') && !entry.contains(';') {
                        overrides.push(entry.to_owned());
                    } else {
                        dropped.push(format!("{flag} {entry}"));
                    }
                }
            }
            Rule::CpuMoeLayers => match value.parse::<u32>() {
                Ok(n) => {
                    overrides_here(&mut out);
                    overrides.extend(
                        PlacementOptions::n_cpu_moe_overrides(n)
                            .iter()
                            .map(ot_entry),
                    );
                }
                Err(_) => dropped.push(format!("{flag} {value}")),
            },
            Rule::CpuMoe => {
                overrides_here(&mut out);
                overrides.push(ot_entry(&PlacementOptions::cpu_moe_override()));
            }
        }
    }
    if overrides.is_empty() {
        out.retain(|(f, _)| *f != "-ot");
    } else if let Some(entry) = out.iter_mut().find(|(f, _)| *f == "-ot") {
        entry.1 = overrides.join(";");
    }
    let args = out
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect();
    (args, dropped)
}

/// llama-bench's `-fa` value for a llama-server one: `1|0`, which every llama-bench reads, and
/// `auto`, which only builds whose help lists `-fa <on|off|auto>` read (older ones exit on it,
/// saying so, rather than measure something else).
fn fa_value(value: &str) -> Option<&'static str> {
    match value {
        "on" | "enabled" | "true" | "1" => Some("1"),
        "off" | "disabled" | "false" | "0" => Some("0"),
        "auto" | "-1" => Some("auto"),
        _ => None,
    }
}

/// `PATTERN=BUFFER`, as `-ot` takes it (the placement crate's own spelling of `-ncmoe`/`-cmoe`).
fn ot_entry(o: &TensorOverride) -> String {
    format!("{}={}", o.pattern, o.device.buffer_name())
}

/// Places the one `-ot` where the first override appeared; its value is filled in at the end.
fn overrides_here(out: &mut Vec<(&'static str, String)>) {
    if !out.iter().any(|(f, _)| *f == "-ot") {
        out.push(("-ot", String::new()));
    }
}

/// Sets a llama-bench flag once: a later value replaces an earlier one.
fn set(out: &mut Vec<(&'static str, String)>, flag: &'static str, value: String) {
    match out.iter_mut().find(|(f, _)| *f == flag) {
        Some(entry) => entry.1 = value,
        None => out.push((flag, value)),
    }
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The whole command, program first: the profile's flags from [`bench_flags`], then the spec's
/// sizes (`-p`, `-n`, `-d` as `,` lists, so llama-bench runs each pp and each tg test at each
/// depth), `-r` and `-o json`. For [`run`], which starts it without a shell.
pub fn argv(program: &Path, bench_flags: &[String], spec: &LlamaBenchSpec) -> Vec<String> {
    let mut argv = vec![program.to_string_lossy().into_owned()];
    argv.extend(bench_flags.iter().cloned());
    argv.extend([
        "-p".to_owned(),
        join(&spec.prompt_tokens),
        "-n".to_owned(),
        join(&spec.gen_tokens),
        "-d".to_owned(),
        join(&spec.depths),
        "-r".to_owned(),
        spec.repetitions.to_string(),
        "-o".to_owned(),
        "json".to_owned(),
    ]);
    argv
}

/// One llama-bench test: a pp or tg size at one depth, its speed over the repetitions and what
/// it ran on (llama-bench reports the build, hardware and settings with every test, so a result
/// kept alone still says what was measured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaBenchTest {
    /// llama-bench's label with the depth: `pp512 @ d0`, `tg128 @ d4096`.
    pub test: String,
    pub n_prompt: u32,
    pub n_gen: u32,
    pub n_depth: u32,
    /// Tokens per second, llama-bench's mean over the repetitions.
    pub avg_ts: f64,
    pub stddev_ts: f64,
    /// Tokens per second of each repetition.
    pub samples_ts: Vec<f64>,
    /// The project's statistics of `samples_ts` (median, percentiles, CV).
    pub stats: Option<Stats>,
    pub build_commit: Option<String>,
    pub build_number: Option<i64>,
    /// ggml backends compiled in, e.g. `CUDA` or `CPU`.
    pub backends: Option<String>,
    /// GPU names; `None` when llama-bench saw none.
    pub gpu_info: Option<String>,
    pub cpu_info: Option<String>,
    pub model_filename: Option<String>,
    /// Architecture, size and type as llama.cpp names them, e.g. `llama 8B Q4_K - Medium`.
    pub model_type: Option<String>,
    pub model_size: Option<u64>,
    pub model_n_params: Option<u64>,
    pub n_threads: Option<i64>,
    pub n_gpu_layers: Option<i64>,
    pub n_cpu_moe: Option<i64>,
    pub n_batch: Option<i64>,
    pub n_ubatch: Option<i64>,
    pub type_k: Option<String>,
    pub type_v: Option<String>,
    pub split_mode: Option<String>,
    pub main_gpu: Option<i64>,
    /// `on`, `off` or `auto` (llama-bench prints 1, 0 or -1; older builds true or false).
    pub flash_attn: Option<String>,
    pub no_kv_offload: Option<bool>,
    /// As llama-bench prints it, e.g. `3.00/1.00`.
    pub tensor_split: Option<String>,
    /// As llama-bench prints it, e.g. `exps=CPU`, or `none`.
    pub tensor_buft_overrides: Option<String>,
    pub devices: Option<String>,
    /// When the test ran, ISO 8601 in UTC.
    pub test_time: Option<String>,
}

/// The tests of llama-bench's `-o json` output (a JSON array of objects, one per test). Lines
/// llama-bench printed before the array (it prints some errors to stdout) are skipped; fields this
/// module does not know are ignored, and fields older builds lack are `None` (or depth 0).
pub fn parse(json_text: &str) -> Result<Vec<LlamaBenchTest>, String> {
    let (_, json) = split_preamble(json_text);
    let value: Value = serde_json::from_str(json).map_err(|err| {
        format!(
            "llama-bench's output is not its -o json result ({err}); it began: {}",
            snippet(json_text)
        )
    })?;
    let Value::Array(items) = value else {
        return Err(format!(
            "llama-bench's output is JSON but not the array of tests -o json prints; it began: {}",
            snippet(json_text)
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(o) = item else {
                return Err(format!("llama-bench's test {} is not a JSON object", i + 1));
            };
            test(o).map_err(|err| format!("llama-bench's test {}: {err}", i + 1))
        })
        .collect()
}

/// Non-empty lines before the line that opens the JSON array, and the text from that line on.
fn split_preamble(text: &str) -> (Vec<&str>, &str) {
    let mut offset = 0;
    let mut preamble = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('[') {
            return (preamble, &text[offset..]);
        }
        if !line.trim().is_empty() {
            preamble.push(line.trim_end());
        }
        offset += line.len();
    }
    (preamble, text)
}

fn snippet(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "(nothing)".to_owned();
    }
    let cut: String = trimmed.chars().take(200).collect();
    if cut.len() < trimmed.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

fn test(o: &Map<String, Value>) -> Result<LlamaBenchTest, String> {
    let count = |key: &str, required: bool| -> Result<u32, String> {
        match o.get(key) {
            None | Some(Value::Null) if !required => Ok(0),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("{key} is {v}, not a token count")),
            None => Err(format!("no {key} field")),
        }
    };
    let n_prompt = count("n_prompt", true)?;
    let n_gen = count("n_gen", true)?;
    let n_depth = count("n_depth", false)?;
    let avg_ts = o
        .get("avg_ts")
        .and_then(Value::as_f64)
        .ok_or("no avg_ts number (tokens per second)")?;
    let samples_ts: Vec<f64> = match o.get("samples_ts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| v.as_f64().ok_or_else(|| format!("samples_ts holds {v}")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("samples_ts is {v}, not a list")),
    };
    let text = |key: &str| {
        o.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let int = |key: &str| match o.get(key)? {
        Value::Bool(b) => Some(i64::from(*b)),
        v => v.as_i64(),
    };
    let flash_attn = match o.get("flash_attn") {
        Some(Value::Bool(b)) => Some(if *b { "on" } else { "off" }.to_owned()),
        Some(Value::Number(n)) => n.as_i64().map(|n| {
            match n {
                0 => "off",
                n if n > 0 => "on",
                _ => "auto",
            }
            .to_owned()
        }),
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    Ok(LlamaBenchTest {
        test: label(n_prompt, n_gen, n_depth),
        n_prompt,
        n_gen,
        n_depth,
        avg_ts,
        stddev_ts: o.get("stddev_ts").and_then(Value::as_f64).unwrap_or(0.0),
        stats: Stats::of(samples_ts.iter().copied()),
        samples_ts,
        build_commit: text("build_commit"),
        build_number: int("build_number"),
        backends: text("backends"),
        gpu_info: text("gpu_info"),
        cpu_info: text("cpu_info"),
        model_filename: text("model_filename"),
        model_type: text("model_type"),
        model_size: o.get("model_size").and_then(Value::as_u64),
        model_n_params: o.get("model_n_params").and_then(Value::as_u64),
        n_threads: int("n_threads"),
        n_gpu_layers: int("n_gpu_layers"),
        n_cpu_moe: int("n_cpu_moe"),
        n_batch: int("n_batch"),
        n_ubatch: int("n_ubatch"),
        type_k: text("type_k"),
        type_v: text("type_v"),
        split_mode: text("split_mode"),
        main_gpu: int("main_gpu"),
        flash_attn,
        no_kv_offload: int("no_kv_offload").map(|v| v != 0),
        tensor_split: text("tensor_split"),
        tensor_buft_overrides: text("tensor_buft_overrides"),
        devices: text("devices"),
        test_time: text("test_time"),
    })
}

/// llama-bench's test name (`pp512`, `tg128`, `pp512+tg128`) with the depth always shown.
fn label(n_prompt: u32, n_gen: u32, n_depth: u32) -> String {
    let name = match (n_prompt, n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, g) => format!("tg{g}"),
        (p, g) => format!("pp{p}+tg{g}"),
    };
    format!("{name} @ d{n_depth}")
}

/// A finished llama-bench run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub tests: Vec<LlamaBenchTest>,
    /// The last lines llama-bench wrote to stderr (warnings worth showing with the results).
    pub stderr_tail: Vec<String>,
}

/// Runs `argv` (from [`argv`]) and parses its results. Cancelling (`cancel` turning true) or
/// passing `timeout` kills the process: a benchmark of a large model can run for many minutes
/// and must stop when asked. A failure names the binary and carries the end of its stderr, where
/// llama.cpp says why (a model that does not load, a flag it does not know). A run that exits 0
/// after printing an error to stdout also fails: llama-bench reports a bad `-ot` buffer type that
/// way and then measures without the override, which would not be the profile's figures.
pub async fn run(
    argv: &[String],
    env: &[(String, String)],
    mut cancel: watch::Receiver<bool>,
    timeout: Duration,
) -> Result<Run, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("no llama-bench command to run".into());
    };
    if *cancel.borrow() {
        return Err("cancelled".into());
    }
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("cannot run {program}: {err}"))?;
    // The future owns the child: dropping it (cancel, timeout) kills the process.
    let output = tokio::select! {
        output = tokio::time::timeout(timeout, child.wait_with_output()) => match output {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => return Err(format!("{program}: cannot read its output: {err}")),
            Err(_) => return Err(format!(
                "{program} did not finish within {} s and was stopped: use fewer or smaller tests, fewer repetitions, or a longer timeout",
                timeout.as_secs_f64()
            )),
        },
        Ok(_) = cancel.wait_for(|c| *c) => return Err("cancelled".into()),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr_tail = tail(&stderr, STDERR_TAIL);
    let (preamble, _) = split_preamble(&stdout);
    // A usage dump (a flag llama-bench rejects) says nothing its stderr line does not.
    let said: Vec<&str> = if preamble.first().is_some_and(|l| l.starts_with("usage:")) {
        Vec::new()
    } else {
        preamble.into_iter().take(STDERR_TAIL).collect()
    };
    let explain = |what: String| {
        let lines: Vec<&str> = said
            .iter()
            .copied()
            .chain(stderr_tail.iter().map(String::as_str))
            .collect();
        if lines.is_empty() {
            what
        } else {
            format!("{what}. Last lines:\n{}", lines.join("\n"))
        }
    };
    if !output.status.success() {
        return Err(explain(format!("{program} failed ({})", output.status)));
    }
    if said
        .iter()
        .any(|l| l.to_ascii_lowercase().contains("error"))
    {
        return Err(explain(format!(
            "{program} reported an error and measured without that setting"
        )));
    }
    let tests = parse(&stdout).map_err(explain)?;
    if tests.is_empty() {
        return Err(explain(format!("{program} finished without a test result")));
    }
    Ok(Run { tests, stderr_tail })
}

fn tail(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    /// The shape `rigdeck_placement::flags::to_args` writes, two GPUs, overrides and extras.
    #[test]
    fn a_profile_becomes_llama_bench_flags() {
        let mut server = words(
            "-m /models/m.gguf -ngl all -ts 3,1 -sm layer -mg 1 \
             -ot blk\\.(3|4)\\.ffn_.*_exps=CUDA0 -ot blk\\.(5|6)\\.ffn_.*_exps=CUDA1 -ot exps=CPU \
             -c 32768 -ctk q8_0 -ctv q8_0 -fa off -np 4 -b 2048 -ub 512 -t 8 -no-kvu -nkvo",
        );
        server.extend(words(
            "--host 127.0.0.1 --port 8080 --jinja --metrics -a my-model",
        ));
        let (args, dropped) = bench_flags(&server);
        assert_eq!(
            args,
            words(
                "-m /models/m.gguf -ngl 999 -ts 3/1 -sm layer -mg 1 \
                 -ot blk\\.(3|4)\\.ffn_.*_exps=CUDA0;blk\\.(5|6)\\.ffn_.*_exps=CUDA1;exps=CPU \
                 -ctk q8_0 -ctv q8_0 -fa 0 -b 2048 -ub 512 -t 8 -nkvo 1"
            )
        );
        assert_eq!(
            dropped,
            vec![
                "-c 32768",
                "-np 4",
                "-no-kvu",
                "--host 127.0.0.1",
                "--port 8080",
                "--jinja",
                "--metrics",
                "-a my-model"
            ]
        );
    }

    #[test]
    fn values_and_spellings_are_translated() {
        let (args, dropped) = bench_flags(&words(
            "--model=/m.gguf --n-gpu-layers 20 -fa on -kvu --tensor-split=1,1,2 -dev CUDA0,CUDA1",
        ));
        assert_eq!(
            args,
            words("-m /m.gguf -ngl 20 -fa 1 -ts 1/1/2 -dev CUDA0/CUDA1")
        );
        assert_eq!(dropped, vec!["-kvu"]);
        // -fa with no value (older servers) is on; auto passes as auto.
        let (args, _) = bench_flags(&words("-fa -t 2"));
        assert_eq!(args, words("-fa 1 -t 2"));
        let (args, _) = bench_flags(&words("-fa auto -ngl -1"));
        assert_eq!(args, words("-fa auto -ngl -1"));
        let (args, dropped) = bench_flags(&words("-ngl lots"));
        assert!(args.is_empty());
        assert_eq!(dropped, vec!["-ngl lots"]);
    }

    #[test]
    fn a_repeated_flag_keeps_its_last_value() {
        // llama-bench would sweep both values; llama-server keeps the last one.
        let (args, _) = bench_flags(&words("-t 4 -m a.gguf -t 8"));
        assert_eq!(args, words("-t 8 -m a.gguf"));
    }

    #[test]
    fn moe_flags_join_the_overrides_in_order() {
        let (args, dropped) = bench_flags(&words(
            "-ot a=CUDA0,b=CPU -ncmoe 2 -cmoe -ot bad-entry -ot x;y=CPU",
        ));
        let expected = [
            "a=CUDA0",
            "b=CPU",
            r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
            r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
            r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
        ];
        assert_eq!(args, vec!["-ot".to_owned(), expected.join(";")]);
        assert_eq!(dropped, vec!["-ot bad-entry", "-ot x;y=CPU"]);
        // Nothing expressible: no empty -ot.
        let (args, _) = bench_flags(&words("-t 1 -ot nonsense -ncmoe 0"));
        assert_eq!(args, words("-t 1"));
    }

    #[test]
    fn unknown_flags_are_dropped_with_their_values() {
        let (args, dropped) = bench_flags(&words(
            "--some-new-flag 12 -m m.gguf --seed -1 -r User: --flag-alone -n -1 --reasoning-budget=0 -t",
        ));
        assert_eq!(args, words("-m m.gguf"));
        assert_eq!(
            dropped,
            vec![
                "--some-new-flag 12",
                "--seed -1",
                "-r User:",
                "--flag-alone",
                "-n -1",
                "--reasoning-budget 0",
                // A known flag missing its value.
                "-t"
            ]
        );
    }

    #[test]
    fn argv_adds_the_spec() {
        let spec = LlamaBenchSpec {
            prompt_tokens: vec![512, 2048],
            gen_tokens: vec![128],
            depths: vec![0, 4096],
            repetitions: 3,
        };
        let flags = words("-m m.gguf -t 4");
        assert_eq!(
            argv(Path::new("/opt/llama-bench"), &flags, &spec),
            words("/opt/llama-bench -m m.gguf -t 4 -p 512,2048 -n 128 -d 0,4096 -r 3 -o json")
        );
    }

    #[test]
    fn spec_defaults_and_validation() {
        let spec = LlamaBenchSpec::default();
        assert_eq!(
            (spec.prompt_tokens.as_slice(), spec.gen_tokens.as_slice()),
            (&[512][..], &[128][..])
        );
        assert_eq!((spec.depths.as_slice(), spec.repetitions), (&[0][..], 5));
        assert_eq!(spec.validate(), Ok(()));

        let from_json: LlamaBenchSpec = serde_json::from_str(r#"{"depths": [0, 8192]}"#).unwrap();
        assert_eq!(from_json.depths, vec![0, 8192]);
        assert_eq!(from_json.repetitions, 5);
        assert!(serde_json::from_str::<LlamaBenchSpec>(r#"{"depth": [1]}"#).is_err());

        let check = |edit: fn(&mut LlamaBenchSpec), needle: &str| {
            let mut spec = LlamaBenchSpec::default();
            edit(&mut spec);
            let err = spec.validate().unwrap_err();
            assert!(err.contains(needle), "{err}");
        };
        check(|s| s.prompt_tokens.clear(), "prompt_tokens is empty");
        check(|s| s.gen_tokens = vec![0], "gen_tokens value 0");
        check(|s| s.depths.clear(), "use [0]");
        check(|s| s.depths = vec![2_000_000], "depths value 2000000");
        check(|s| s.prompt_tokens = vec![1_000_001], "1 to 1000000");
        check(|s| s.repetitions = 0, "repetitions 0");
        check(|s| s.repetitions = 101, "1 to 100");
        check(|s| s.depths = (0..33).collect(), "at most 32");
        let ok = LlamaBenchSpec {
            depths: vec![0, 1_000_000],
            ..LlamaBenchSpec::default()
        };
        assert_eq!(ok.validate(), Ok(()));
    }

    /// Trimmed from a real `llama-bench -p 16 -n 8 -d 0,16 -r 2 -t 1 -o json` (build 0c1e570),
    /// after a line llama-bench prints to stdout before the array.
    const REAL_OUTPUT: &str = r#"Available buffer types:
[
  {
    "build_commit": "0c1e570",
    "build_number": 0,
    "cpu_info": "Intel(R) Xeon(R) Processor",
    "gpu_info": "",
    "backends": "CPU",
    "model_filename": "/tmp/lb_tiny.gguf",
    "model_type": "llama ?B F16",
    "model_size": 136061952,
    "model_n_params": 68028672,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": 1,
    "cpu_mask": "0x0",
    "cpu_strict": false,
    "poll": 50,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": -1,
    "n_cpu_moe": 0,
    "split_mode": "layer",
    "main_gpu": 0,
    "no_kv_offload": false,
    "flash_attn": -1,
    "devices": "auto",
    "tensor_split": "0.00",
    "tensor_buft_overrides": "none",
    "load_mode": "auto",
    "n_prompt": 16,
    "n_gen": 0,
    "n_depth": 0,
    "test_time": "2026-11-24T06:18:20Z",
    "avg_ns": 7993145,
    "stddev_ns": 488241,
    "avg_ts": 2005.456477,
    "stddev_ts": 122.498395,
    "samples_ns": [ 8338384, 7647906 ],
    "samples_ts": [ 1918.84, 2092.08 ]
  },
  {
    "build_commit": "0c1e570",
    "model_type": "llama ?B F16",
    "n_threads": 1,
    "no_kv_offload": true,
    "flash_attn": 1,
    "tensor_split": "3.00/1.00",
    "n_prompt": 0,
    "n_gen": 8,
    "n_depth": 16,
    "avg_ts": 280.708384,
    "stddev_ts": 1.295591,
    "samples_ts": [ 281.625, 279.792 ]
  }
]
"#;

    #[test]
    fn parses_real_output() {
        let tests = parse(REAL_OUTPUT).unwrap();
        assert_eq!(tests.len(), 2);
        let pp = &tests[0];
        assert_eq!(pp.test, "pp16 @ d0");
        assert_eq!((pp.n_prompt, pp.n_gen, pp.n_depth), (16, 0, 0));
        assert!((pp.avg_ts - 2005.456477).abs() < 1e-9);
        assert_eq!(pp.samples_ts, vec![1918.84, 2092.08]);
        let stats = pp.stats.unwrap();
        assert_eq!(stats.n, 2);
        assert!((stats.mean - 2005.46).abs() < 1e-6);
        assert_eq!(pp.build_commit.as_deref(), Some("0c1e570"));
        assert_eq!(pp.gpu_info, None);
        assert_eq!(pp.backends.as_deref(), Some("CPU"));
        assert_eq!(pp.model_size, Some(136_061_952));
        assert_eq!(pp.n_gpu_layers, Some(-1));
        assert_eq!(pp.flash_attn.as_deref(), Some("auto"));
        assert_eq!(pp.no_kv_offload, Some(false));
        let tg = &tests[1];
        assert_eq!(tg.test, "tg8 @ d16");
        assert_eq!(tg.flash_attn.as_deref(), Some("on"));
        assert_eq!(tg.no_kv_offload, Some(true));
        assert_eq!(tg.cpu_info, None);
        assert_eq!(tg.tensor_split.as_deref(), Some("3.00/1.00"));
    }

    #[test]
    fn older_output_without_depth_or_samples() {
        let tests =
            parse(r#"[{"n_prompt": 512, "n_gen": 128, "avg_ts": 10.5, "flash_attn": true}]"#)
                .unwrap();
        assert_eq!(tests[0].test, "pp512+tg128 @ d0");
        assert_eq!(tests[0].stats, None);
        assert_eq!(tests[0].flash_attn.as_deref(), Some("on"));
        assert_eq!(parse("[]").unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_a_clear_error() {
        for (text, needle) in [
            ("", "(nothing)"),
            ("| model | size |\n| --- | --- |", "not its -o json result"),
            ("[\n", "not its -o json result"),
            (r#"{"avg_ts": 1}"#, "not the array of tests"),
            ("[1, 2]", "test 1 is not a JSON object"),
            (r#"[{"n_gen": 1, "avg_ts": 2}]"#, "no n_prompt field"),
            (
                r#"[{"n_prompt": -4, "n_gen": 1, "avg_ts": 2}]"#,
                "not a token count",
            ),
            (r#"[{"n_prompt": 4, "n_gen": 0}]"#, "no avg_ts"),
            (
                r#"[{"n_prompt": 4, "n_gen": 0, "avg_ts": 2, "samples_ts": "x"}]"#,
                "not a list",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn run_reports_failures_and_stops_when_cancelled() {
        let (_tx, rx) = watch::channel(false);
        let sh = |script: &str| vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];

        let ok = run(
            &sh(r#"echo '[{"n_prompt": 4, "n_gen": 0, "avg_ts": 9, "samples_ts": [9]}]'; echo warn >&2"#),
            &[],
            rx.clone(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(ok.tests[0].test, "pp4 @ d0");
        assert_eq!(ok.stderr_tail, vec!["warn"]);

        let err = run(
            &sh("echo '['; echo \"llama_bench: error: failed to load model 'x.gguf'\" >&2; exit 1"),
            &[],
            rx.clone(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(err.starts_with("/bin/sh failed (exit status: 1)"), "{err}");
        assert!(err.contains("failed to load model 'x.gguf'"), "{err}");

        let err = run(
            &sh("echo \"error: unrecognized buffer type 'CUDA0'\"; echo '[]'"),
            &[],
            rx.clone(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(err.contains("unrecognized buffer type 'CUDA0'"), "{err}");

        let err = run(
            &["/nonexistent/llama-bench".to_owned()],
            &[],
            rx.clone(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(
            err.starts_with("cannot run /nonexistent/llama-bench"),
            "{err}"
        );

        let err = run(&sh("sleep 30"), &[], rx.clone(), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(err.contains("did not finish within 0.2 s"), "{err}");

        // Cancelled before it starts: nothing runs.
        let (_, already) = watch::channel(true);
        let err = run(&sh("sleep 30"), &[], already, Duration::from_secs(60))
            .await
            .unwrap_err();
        assert_eq!(err, "cancelled");

        // Cancelled: the process is gone, not left running.
        let dir = std::env::temp_dir().join(format!("rigdeck-llama-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let (tx, rx) = watch::channel(false);
        let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        let started = std::time::Instant::now();
        let cancel = async {
            while !std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tx.send(true).unwrap();
        };
        let command = sh(&script);
        let (result, ()) = tokio::join!(run(&command, &[], rx, Duration::from_secs(60)), cancel);
        assert_eq!(result.unwrap_err(), "cancelled");
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let gone = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !gone() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(), "the cancelled process {pid} still runs");
        std::fs::remove_dir_all(&dir).ok();
    }
}
