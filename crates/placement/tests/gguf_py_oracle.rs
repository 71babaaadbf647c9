//! The compute buffer checked against llama.cpp on files Rigdeck did not write: each model is
//! written by the gguf-py package of the pinned llama.cpp tree (`tests/gguf_py/write_model.py`,
//! other vocabularies, head layouts and feed-forward widths than the project's own writer uses),
//! planned from its header, and compared with `llama-fit-params -fitp on -nr` of the bundled CPU
//! build. A family whose graph the planner replays must match to the MiB llama.cpp prints.
//!
//! Needs the bundled llama.cpp CPU build and the pinned source tree (`make test` builds both;
//! `RIGDECK_LLAMA_BIN_DIR` and `RIGDECK_LLAMA_SOURCE_DIR` name others), and `python3` to create the
//! gguf-py venv (`tests/gguf_py/python.sh`) on first use.

use std::path::{Path, PathBuf};
use std::process::Command;

use rigdeck_placement::from_gguf::load_shape;
use rigdeck_placement::plan::{plan, DeviceSpec, Plan};
use rigdeck_placement::report::report;
use rigdeck_placement::{DeviceId, KvType, PlacementOptions, RpcServer, TensorOverride};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("RIGDECK_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    base.join("rigdeck")
}

/// The newest entry of the cache's `dir` whose name starts with `prefix` and ends with
/// `ending`, and `inside` it (`env` names the variable that points elsewhere).
fn cached(env: &str, dir: &str, (prefix, ending): (&str, &str), inside: &str) -> PathBuf {
    let under = cache_root().join(dir);
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&under)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `make test` once or set {env}",
                under.display()
            )
        })
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with(ending)
        })
        .map(|entry| entry.path().join(inside))
        .filter(|path| path.exists())
        .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| {
            panic!(
                "no {prefix}*{ending}/{inside} under {}; set {env}",
                under.display()
            )
        })
        .1
}

/// The bundled CPU build's `llama-fit-params` (its table has the one Host line read here);
/// `RIGDECK_LLAMA_BIN_DIR` names another build's `bin` folder.
fn fit_params_binary() -> PathBuf {
    const ENV: &str = "RIGDECK_LLAMA_BIN_DIR";
    match std::env::var_os(ENV) {
        Some(dir) => PathBuf::from(dir).join("llama-fit-params"),
        None => cached(
            ENV,
            "engines",
            ("llama.cpp-", "-cpu-portable"),
            "bin/llama-fit-params",
        ),
    }
}

/// The pinned llama.cpp tree's gguf-py; `RIGDECK_LLAMA_SOURCE_DIR` names another tree.
fn gguf_py() -> PathBuf {
    const ENV: &str = "RIGDECK_LLAMA_SOURCE_DIR";
    let tree = match std::env::var_os(ENV) {
        Some(dir) => PathBuf::from(dir),
        None => cached(ENV, "sources", ("llama-cpp-python-", ""), "llama.cpp"),
    };
    tree.join("gguf-py")
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    let script = repository().join("tests/gguf_py/python.sh");
    let out = Command::new("bash").arg(&script).output().expect("bash");
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Writes the model `spec` describes with gguf-py into `dir`.
fn write_model(dir: &Path, python: &str, spec: &Value) -> PathBuf {
    let path = dir.join(format!("{}.gguf", spec["arch"].as_str().unwrap_or("model")));
    let out = Command::new(python)
        .arg(repository().join("tests/gguf_py/write_model.py"))
        .arg(gguf_py())
        .arg(&path)
        .arg(spec.to_string())
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "write_model.py {spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// llama.cpp's compute buffer: the whole MiB of the Host line of `-fitp on`, and the bytes its
/// verbose log prints to the hundredth of a MiB (`sched_reserve: CPU compute buffer size`, the
/// last reservation).
struct Measured {
    mib: u64,
    logged_mib: f64,
    /// The whole MiB of the Host line's context column: the KV cache (and recurrent state).
    context_mib: u64,
    /// The whole MiB of its model column: the weights.
    model_mib: u64,
}

/// llama.cpp's log is written by a thread of its own, which the process sometimes ends before
/// the last lines are out (about one run in ten): such a run is repeated.
fn fit_params_compute(model: &Path, options: &PlacementOptions) -> Measured {
    let flash = if options.flash_attention { "on" } else { "off" };
    fit_params_compute_with(model, options, flash)
}

/// [`fit_params_compute`] with `-fa flash` (`on`, `off` or `auto`).
fn fit_params_compute_with(model: &Path, options: &PlacementOptions, flash: &str) -> Measured {
    for _ in 0..5 {
        if let Some(measured) = fit_params_run(model, options, flash) {
            return measured;
        }
    }
    panic!("llama-fit-params -v logged no compute buffer size in 5 runs");
}

/// One run of `llama-fit-params`; `None` when its log lacks the compute buffer's line.
fn fit_params_run(model: &Path, options: &PlacementOptions, flash: &str) -> Option<Measured> {
    let args = fit_params_args(model, options, flash);
    let overrides = options.overrides.iter().flat_map(|o| {
        [
            "-ot".to_owned(),
            format!("{}={}", o.pattern, o.device.buffer_name()),
        ]
    });
    let bin = fit_params_binary();
    let out = Command::new(&bin)
        .args(&args)
        .args(overrides)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "llama-fit-params {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host = stdout
        .lines()
        .find(|l| l.starts_with("Host "))
        .unwrap_or_else(|| panic!("no Host line in: {stdout}"));
    let column = |n: usize, what: &str| {
        host.split_whitespace()
            .nth(n)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what} figure in {host:?}"))
    };
    let (model_mib, context_mib) = (column(1, "model"), column(2, "context"));
    let mib = column(3, "compute");
    let log = String::from_utf8_lossy(&out.stderr);
    let logged_mib = log
        .lines()
        .filter(|l| l.contains("CPU compute buffer size ="))
        .filter_map(|l| l.split('=').nth(1)?.split_whitespace().next()?.parse().ok())
        .next_back()?;
    Some(Measured {
        mib,
        logged_mib,
        context_mib,
        model_mib,
    })
}

/// Asserts that `llama-fit-params` refuses `options` with `-fa flash`, logging `reason` (its
/// log thread sometimes ends before the line is out, as in [`fit_params_compute`]: such a run
/// is repeated).
fn assert_fit_params_refuses(model: &Path, options: &PlacementOptions, flash: &str, reason: &str) {
    let args = fit_params_args(model, options, flash);
    let bin = fit_params_binary();
    let mut log = String::new();
    for _ in 0..5 {
        let out = Command::new(&bin)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(!out.status.success(), "llama-fit-params {args:?} ran");
        log = String::from_utf8_lossy(&out.stderr).into_owned();
        if log.contains(reason) {
            return;
        }
    }
    panic!("llama-fit-params {args:?} did not log {reason:?} in 5 runs: {log}");
}

/// `llama-fit-params`' arguments for `options` with `-fa flash` (the overrides apart).
fn fit_params_args(model: &Path, options: &PlacementOptions, flash: &str) -> Vec<String> {
    vec![
        "-m".to_owned(),
        model.display().to_string(),
        "-fitp".into(),
        "on".into(),
        "-nr".into(),
        "-v".into(),
        "-c".into(),
        options.context.to_string(),
        "-np".into(),
        options.parallel.to_string(),
        "-b".into(),
        options.batch.to_string(),
        "-ub".into(),
        options.ubatch.to_string(),
        "-ctk".into(),
        options.cache_type_k.name().to_owned(),
        "-ctv".into(),
        options.cache_type_v.name().to_owned(),
        "-fa".into(),
        flash.into(),
    ]
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

/// One comparison: the options the model is planned and dry-run with.
struct Shape {
    label: &'static str,
    options: PlacementOptions,
}

/// The shapes every family is checked at: flash attention on and off, one and four slots, a
/// q8_0 cache (rotated), 512- and 256-token micro-batches. `key_only_cache` (MLA, whose one
/// cache llama.cpp will not quantize for K alone): the last shape quantizes both, with flash
/// attention.
fn shapes(key_only_cache: bool) -> Vec<Shape> {
    let base = PlacementOptions {
        context: 4096,
        parallel: 1,
        kv_unified: false,
        flash_attention: true,
        ..Default::default()
    };
    vec![
        Shape {
            label: "4 096 ctx, flash attention",
            options: base.clone(),
        },
        Shape {
            label: "4 096 ctx, no flash attention",
            options: PlacementOptions {
                flash_attention: false,
                ..base.clone()
            },
        },
        Shape {
            label: "4 slots x 8 192, q8_0 cache",
            options: PlacementOptions {
                context: 32_768,
                parallel: 4,
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::Q8_0,
                ..base.clone()
            },
        },
        if key_only_cache {
            Shape {
                label: "3 slots x 2 048, ubatch 256, q8_0 cache",
                options: PlacementOptions {
                    context: 6144,
                    parallel: 3,
                    ubatch: 256,
                    cache_type_k: KvType::Q8_0,
                    cache_type_v: KvType::Q8_0,
                    ..base
                },
            }
        } else {
            Shape {
                label: "3 slots x 2 048, ubatch 256, no flash attention, q8_0 K",
                options: PlacementOptions {
                    context: 6144,
                    parallel: 3,
                    ubatch: 256,
                    flash_attention: false,
                    cache_type_k: KvType::Q8_0,
                    ..base
                },
            }
        },
    ]
}

/// Plans the model at `path` at every [`shapes`] entry beside llama.cpp and returns one line per
/// shape whose compute buffer misses the whole MiB llama.cpp prints, or the figure it logs to the
/// hundredth of a MiB by more than `tolerance` MiB, or whose KV cache or weights miss the whole
/// MiB of llama.cpp's context or model (empty when all match); prints the table.
fn misses(family: &str, path: &Path, tolerance: f64) -> Vec<String> {
    let shape = load_shape(path).unwrap_or_else(|e| panic!("{e}")).shape;
    let mut missed = Vec::new();
    for Shape { label, options } in shapes(shape.attention.caches_key_only()) {
        let plan = plan(&shape, &host_only(), &options).unwrap_or_else(|e| panic!("{e}"));
        let usage = &plan.device(DeviceId::Cpu).expect("the host").usage;
        let (ours, kv, weights) = (
            usage.compute_estimate_bytes,
            usage.kv_bytes,
            usage.weights_bytes,
        );
        let theirs = fit_params_compute(path, &options);
        let ours_mib = ours as f64 / MIB as f64;
        let line = format!(
            "{family} {label}: ours {ours_mib:.2} MiB, llama.cpp {:.2} MiB ({} printed); KV ours {}, llama.cpp {} MiB; weights ours {}, llama.cpp {} MiB",
            theirs.logged_mib,
            theirs.mib,
            kv / MIB,
            theirs.context_mib,
            weights / MIB,
            theirs.model_mib,
        );
        println!("{line}");
        let compute_missed =
            ours / MIB != theirs.mib || (ours_mib - theirs.logged_mib).abs() > tolerance;
        let memory_missed = kv / MIB != theirs.context_mib || weights / MIB != theirs.model_mib;
        if compute_missed || memory_missed {
            missed.push(line);
        }
    }
    missed
}

/// The hundredth of a MiB llama.cpp logs, rounded: a replayed graph's byte count.
const EXACT: f64 = 0.005;

/// A `qwen3moe` of 4 layers, 1 024 wide, 16 experts of 768 with 4 active, 32 000 tokens.
fn qwen3moe_with_16_narrow_experts() -> Value {
    json!({
        "arch": "qwen3moe", "n_vocab": 32_000, "n_embd": 1024, "n_layer": 4, "n_head": 16,
        "n_head_kv": 4, "head_dim": 128, "n_ff": 3072, "experts": 16, "experts_used": 4,
        "expert_ff": 768,
    })
}

/// GLM-5.2's pattern in 7 layers: full indexers on layers 0, 1, 2 and 6, the layers between
/// reusing the last selection; 64 heads, a 151 936-token vocabulary, a 1 M trained context.
fn glm_5_2_style() -> Value {
    json!({
        "arch": "glm-dsa", "n_vocab": 151_936, "n_embd": 2048, "n_layer": 7, "n_head": 64,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632, "context_length": 1_048_576,
        "mla": {"q_lora_rank": 1024, "kv_lora_rank": 512, "rope": 64, "nope": 192, "v_head": 256},
        "indexer": {"heads": 32, "head_size": 128, "top_k": 2048},
        "dense_lead": 3, "experts": 32, "experts_used": 8, "expert_ff": 256,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5,
    })
}

/// Writes `spec`'s model with gguf-py and asserts the planner's compute buffer is llama.cpp's.
fn assert_exact(spec: Value) {
    assert_within(spec, EXACT);
}

/// Writes `spec`'s model with gguf-py and asserts the planner's compute buffer is llama.cpp's
/// whole MiB and within `tolerance` MiB of its logged figure.
fn assert_within(spec: Value, tolerance: f64) {
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &spec);
    let family = format!("{} ({} tokens)", spec["arch"], spec["n_vocab"]);
    let missed = misses(&family, &path, tolerance);
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn gemma3_with_a_262k_vocabulary_and_a_sliding_window_matches_llama_cpp() {
    // Gemma 3 270M's layout: 640 wide, 4 heads of 256 over 1 KV head, a 512-token window on
    // five layers of six, the output tied to the embedding.
    assert_exact(json!({
        "arch": "gemma3", "n_vocab": 262_144, "n_embd": 640, "n_layer": 6, "n_head": 4,
        "n_head_kv": 1, "head_dim": 256, "n_ff": 2048, "sliding_window": 512, "tied": true,
    }));
}

#[test]
fn gemma3_with_a_32k_vocabulary_matches_llama_cpp() {
    // Gemma 3 1B's layers under a small vocabulary, so the layers lead (the phase formula
    // said 67.0 MiB without flash attention, llama.cpp 69.25).
    assert_exact(json!({
        "arch": "gemma3", "n_vocab": 32_000, "n_embd": 1152, "n_layer": 7, "n_head": 4,
        "n_head_kv": 1, "head_dim": 256, "n_ff": 6912, "sliding_window": 512,
    }));
}

#[test]
fn gemma3_with_wide_layers_and_a_152k_vocabulary_matches_llama_cpp() {
    // Gemma 3 4B's layers (8 heads of 256 over 4, n_ff 10 240), a 1 024 window (the formula
    // said 306.8 MiB with flash attention, llama.cpp 311.75).
    assert_exact(json!({
        "arch": "gemma3", "n_vocab": 151_936, "n_embd": 2560, "n_layer": 7, "n_head": 8,
        "n_head_kv": 4, "head_dim": 256, "n_ff": 10_240, "sliding_window": 1024,
    }));
}

#[test]
fn gemma3_with_many_narrow_heads_matches_llama_cpp() {
    // Gemma 3 27B's layers (32 heads of 128 over 16, 5 376 wide, n_ff 21 504): the formula
    // missed all four shapes, by up to 4.4 %.
    assert_exact(json!({
        "arch": "gemma3", "n_vocab": 32_000, "n_embd": 5376, "n_layer": 7, "n_head": 32,
        "n_head_kv": 16, "head_dim": 128, "n_ff": 21_504, "sliding_window": 1024,
    }));
}

#[test]
fn gemma2_with_soft_caps_and_a_window_on_every_other_layer_matches_llama_cpp() {
    // Gemma 2 2B's layout (2 304 wide, 8 heads of 256 over 4, n_ff 9 216, a 4 096-token window
    // on every other layer, the output tied, the logits and the scores without flash attention
    // soft-capped) under its 256 000-token vocabulary.
    assert_exact(json!({
        "arch": "gemma2", "n_vocab": 256_000, "n_embd": 2304, "n_layer": 6, "n_head": 8,
        "n_head_kv": 4, "head_dim": 256, "n_ff": 9216, "sliding_window": 4096,
        "soft_caps": [50.0, 30.0], "tied": true,
    }));
}

#[test]
fn gemma2_with_wide_layers_matches_llama_cpp() {
    // Gemma 2 9B's layers (3 584 wide, 16 heads of 256 over 8, n_ff 14 336) under a small
    // vocabulary, so the layers lead.
    assert_exact(json!({
        "arch": "gemma2", "n_vocab": 32_000, "n_embd": 3584, "n_layer": 6, "n_head": 16,
        "n_head_kv": 8, "head_dim": 256, "n_ff": 14_336, "sliding_window": 4096,
        "soft_caps": [50.0, 30.0], "tied": true,
    }));
}

#[test]
fn gemma_of_the_first_version_matches_llama_cpp() {
    // Gemma 2B's layout (2 048 wide, 8 heads of 256 over one KV head, n_ff 16 384, no window,
    // no norms after the attention or the feed-forward) under a 256 000-token vocabulary.
    assert_exact(json!({
        "arch": "gemma", "n_vocab": 256_000, "n_embd": 2048, "n_layer": 6, "n_head": 8,
        "n_head_kv": 1, "head_dim": 256, "n_ff": 16_384, "tied": true,
    }));
}

/// Gemma 4 26B-A4B's layout in 6 layers: 2 816 wide, 16 heads of 256 over 8 KV heads on the
/// five sliding layers (a 1 024-token window) and 16 of 512 over 2 on the full one, whose V is
/// its K; beside each layer's dense feed-forward (2 112 wide), 128 experts of 704 with 8
/// active in one gate-and-up projection, a scale per expert and per layer; the logits
/// soft-capped, the output tied to the 262 144-token embedding.
fn gemma4_26b_a4b_style() -> Value {
    json!({
        "arch": "gemma4", "n_vocab": 262_144, "n_embd": 2816, "n_layer": 6, "n_head": 16,
        "n_head_kv": 2, "n_head_kv_swa": 8, "head_dim": 512, "head_dim_swa": 256, "n_ff": 2112,
        "sliding_window": 1024, "sliding_window_pattern": [true, true, true, true, true, false],
        "k_eq_v": true, "experts": 128, "experts_used": 8, "expert_ff": 704,
        "fused_gate_up": true, "expert_scales": true, "layer_scale": true,
        "soft_caps": [0, 30.0], "tied": true,
    })
}

#[test]
fn gemma4_with_experts_beside_a_dense_feed_forward_matches_llama_cpp() {
    assert_exact(gemma4_26b_a4b_style());
}

#[test]
fn gemma4_with_experts_under_a_small_vocabulary_matches_llama_cpp() {
    // The same layers under a 32 000-token vocabulary, so the experts lead, with gate and up
    // apart and no scales.
    let mut spec = gemma4_26b_a4b_style();
    spec["n_vocab"] = json!(32_000);
    spec["fused_gate_up"] = json!(false);
    spec["expert_scales"] = json!(false);
    spec["layer_scale"] = json!(false);
    assert_exact(spec);
}

/// Gemma 4 E2B's layout in 10 layers: 1 536 wide, 8 heads over one KV head (256 wide sliding,
/// 512 full, a full layer every fifth), each layer's own 256-wide token embedding projected in,
/// the last 5 layers reading the caches of layers 3 and 4 with feed-forwards twice as wide.
fn gemma4_e2b_style() -> Value {
    json!({
        "arch": "gemma4", "n_vocab": 262_144, "n_embd": 1536, "n_layer": 10, "n_head": 8,
        "n_head_kv": 1, "n_head_kv_swa": 1, "head_dim": 512, "head_dim_swa": 256, "n_ff": 6144,
        "sliding_window": 512,
        "sliding_window_pattern": [true, true, true, true, false, true, true, true, true, false],
        "per_layer": 256, "shared_kv_layers": 5, "layer_scale": true, "soft_caps": [0, 30.0],
        "tied": true,
    })
}

#[test]
fn gemma4_with_per_layer_embeddings_and_shared_caches_matches_llama_cpp() {
    assert_exact(gemma4_e2b_style());
}

#[test]
fn gemma4_e4b_style_under_a_small_vocabulary_matches_llama_cpp() {
    // E4B's layers (2 560 wide, 8 heads over 2 KV heads, n_ff 10 240) under 32 000 tokens, so
    // the layers lead.
    let mut spec = gemma4_e2b_style();
    spec["n_vocab"] = json!(32_000);
    spec["n_embd"] = json!(2560);
    spec["n_head_kv"] = json!(2);
    spec["n_head_kv_swa"] = json!(2);
    spec["n_ff"] = json!(10_240);
    spec["tied"] = json!(false);
    assert_exact(spec);
}

/// Gemma 3n E2B's layers, 22 of its 30 (the last two reading the caches of layers 18 and 19,
/// as llama.cpp caches only the first 20): 2 048 wide, 8 heads of 256 over 2, a full layer every
/// fifth, AltUp's four streams, activation sparsity on the first ten feed-forwards, a
/// 262 144-token vocabulary and each layer's own 256-wide embedding.
fn gemma3n_e2b_style() -> Value {
    let pattern: Vec<bool> = (0..22).map(|il| il % 5 != 4).collect();
    json!({
        "arch": "gemma3n", "n_vocab": 262_144, "n_embd": 2048, "n_layer": 22, "n_head": 8,
        "n_head_kv": 2, "head_dim": 256, "n_ff": 8192, "sliding_window": 512,
        "sliding_window_pattern": pattern, "soft_caps": [0, 30.0], "tied": true,
    })
}

#[test]
fn gemma3n_with_altup_laurel_and_shared_caches_matches_llama_cpp() {
    assert_exact(gemma3n_e2b_style());
}

#[test]
fn gemma3n_e4b_style_under_a_small_vocabulary_matches_llama_cpp() {
    // E4B's layers (2 048 wide, n_ff 16 384) under 32 000 tokens and an output of its own, so
    // the layers lead; 12 layers, all with caches and the last two dense.
    let mut spec = gemma3n_e2b_style();
    spec["n_vocab"] = json!(32_000);
    spec["n_ff"] = json!(16_384);
    spec["n_layer"] = json!(12);
    let pattern: Vec<bool> = (0..12).map(|il| il % 5 != 4).collect();
    spec["sliding_window_pattern"] = json!(pattern);
    spec["tied"] = json!(false);
    assert_exact(spec);
}

/// DeepSeek V4 Flash's layout in 6 layers: 4 096 wide, 64 heads of 512 over one KV head, the
/// first two layers uncompressed, then compressed by 4 (with the indexer) and by 128 in turn,
/// 256 experts of 2 048 with 6 active (by token id on the first three layers) beside a shared
/// one, four hyper-connection streams, 129 280 tokens.
fn deepseek4_flash_style() -> Value {
    json!({
        "arch": "deepseek4", "n_vocab": 129_280, "n_embd": 4096, "n_layer": 6, "n_head": 64,
        "n_head_kv": 1, "head_dim": 512, "rope": 64, "n_ff": 2048, "q_lora_rank": 1024,
        "o_groups": 8, "o_lora_rank": 1024, "experts": 256, "experts_used": 6,
        "expert_ff": 2048, "shared_experts": 1, "sliding_window": 128,
        "compress_ratios": [0, 0, 4, 128, 4, 128],
        "indexer": {"heads": 64, "head_size": 128, "top_k": 512}, "hc": 4, "hash_layers": 3,
    })
}

/// DeepSeek V4 narrower, under 32 000 tokens: 2 048 wide, 32 heads in 4 output groups, 64
/// experts of 1 024 with 4 active.
fn deepseek4_narrow() -> Value {
    varied(
        deepseek4_flash_style(),
        [
            ("n_vocab", json!(32_000)),
            ("n_embd", json!(2048)),
            ("n_head", json!(32)),
            ("q_lora_rank", json!(512)),
            ("o_groups", json!(4)),
            ("o_lora_rank", json!(512)),
            ("experts", json!(64)),
            ("experts_used", json!(4)),
            ("expert_ff", json!(1024)),
        ],
    )
}

/// `spec` with each key of `changes` set to its value.
fn varied<const N: usize>(mut spec: Value, changes: [(&str, Value); N]) -> Value {
    for (key, value) in changes {
        spec[key] = value;
    }
    spec
}

#[test]
fn deepseek4_on_a_device_and_split_with_the_host_is_llama_cpps() {
    // All on RPC0 (the host looks the tokens up and holds every input: the raw cache's, each
    // compressor's, the indexer's rotation), and split after layers 2 and 3: the host's last
    // layer ends on RPC0 (its mix back into the streams reads no weight), which also runs the
    // norm of the streams its first layer begins with.
    check_on_a_device(
        deepseek4_narrow(),
        &[(true, 99), (false, 99), (true, 3), (false, 4), (true, 1)],
    );
}

#[test]
fn deepseek4_matches_llama_cpp() {
    // DeepSeek V4 Flash's layers under its own 129 280-token vocabulary (the logits lead) and
    // under 32 000 (the layers lead), and narrower ones: the four residual streams mixed by
    // hyper-connections, the raw window's cache, the caches compressed by 4 (with the lightning
    // indexer's) and by 128 and their compressors' states, hash routing on the first layers.
    // Before the replay the formulas were up to 27 % under.
    let small_vocabulary = varied(deepseek4_flash_style(), [("n_vocab", json!(32_000))]);
    for spec in [
        deepseek4_flash_style(),
        small_vocabulary,
        deepseek4_narrow(),
    ] {
        assert_exact(spec);
    }
}

/// MiniMax-M2's layout in 4 layers: 3 072 wide, 48 heads of 128 over 8 (64 of each rotated),
/// Q and K normed whole, 256 experts of 1 536 with 8 active chosen by sigmoid gating over a
/// selection bias, a 200 064-token vocabulary.
fn minimax_m2_style() -> Value {
    json!({
        "arch": "minimax-m2", "n_vocab": 200_064, "n_embd": 3072, "n_layer": 4, "n_head": 48,
        "n_head_kv": 8, "head_dim": 128, "rope": 64, "n_ff": 1536, "experts": 256,
        "experts_used": 8, "expert_ff": 1536,
    })
}

#[test]
fn minimax_m2_with_whole_qk_norms_and_sigmoid_routing_matches_llama_cpp() {
    assert_exact(minimax_m2_style());
}

#[test]
fn minimax_m2_under_a_small_vocabulary_matches_llama_cpp() {
    // The same layers under 32 000 tokens, so the attention and the experts lead.
    let mut spec = minimax_m2_style();
    spec["n_vocab"] = json!(32_000);
    assert_exact(spec);
}

/// MiniMax-M3's layout in 4 layers (its attention as M2's with per-head norms, a dense first
/// layer, then 128 experts of 1 536 with 8 active beside a shared one, the sparse attention's
/// indexer of one 128-wide head per KV head, 16 blocks of 64 tokens kept).
fn minimax_m3_style() -> Value {
    json!({
        "arch": "minimax-m3", "n_vocab": 200_064, "n_embd": 3072, "n_layer": 4, "n_head": 48,
        "n_head_kv": 8, "head_dim": 128, "rope": 64, "n_ff": 8192, "dense_lead": 1,
        "experts": 128, "experts_used": 8, "expert_ff": 1536, "shared_experts": 1,
        "weights_scale": 2.5,
        "indexer": {"heads": 8, "head_size": 128, "top_k": 16, "block_size": 64, "local_blocks": 1},
    })
}

#[test]
fn minimax_m3_with_sparse_attention_matches_llama_cpp() {
    assert_exact(minimax_m3_style());
}

#[test]
fn minimax_m3_under_a_small_vocabulary_matches_llama_cpp() {
    // The sparse attention's block masks lead (cells × tokens × indexer heads, f32), with
    // 2 dense layers, 4 local blocks of 128 and 2 kept.
    let mut spec = minimax_m3_style();
    spec["n_vocab"] = json!(32_000);
    spec["n_layer"] = json!(5);
    spec["dense_lead"] = json!(2);
    spec["indexer"] =
        json!({"heads": 8, "head_size": 128, "top_k": 2, "block_size": 128, "local_blocks": 4});
    assert_exact(spec);
}

#[test]
fn gemma4_dense_with_separate_projections_matches_llama_cpp() {
    // Gemma 4 31B's layers (5 376 wide, 32 heads of 256 over 16 sliding, of 512 over 4 full,
    // n_ff 21 504) with a V projection on every layer, gate and up apart, no soft cap, under a
    // 32 000-token vocabulary so the layers lead.
    assert_exact(json!({
        "arch": "gemma4", "n_vocab": 32_000, "n_embd": 5376, "n_layer": 7, "n_head": 32,
        "n_head_kv": 4, "n_head_kv_swa": 16, "head_dim": 512, "head_dim_swa": 256,
        "n_ff": 21_504, "sliding_window": 1024,
        "sliding_window_pattern": [true, true, true, true, true, false, true],
    }));
}

/// EmbeddingGemma 300M's layout in 6 of its 24 layers: 768 wide, 3 heads of 256 over 1 KV
/// head, a 512-token window on five layers of six, mean pooling, the sentence-transformers
/// projections to 3 072 and back, the output tied to the embedding.
fn embeddinggemma_300m_style() -> Value {
    json!({
        "arch": "gemma-embedding", "n_vocab": 262_144, "n_embd": 768, "n_layer": 6,
        "n_head": 3, "n_head_kv": 1, "head_dim": 256, "n_ff": 1152, "sliding_window": 512,
        "tied": true, "pooling": "mean", "dense": 3072, "context_length": 2048,
    })
}

#[test]
fn gemma_embedding_without_a_cache_matches_llama_cpp() {
    // No cache at all (llama.cpp's context column is 0): the attention runs over the
    // micro-batch, and the graph ends at the final norm.
    assert_exact(embeddinggemma_300m_style());
}

#[test]
fn gemma_embedding_with_grouped_heads_under_a_small_vocabulary_matches_llama_cpp() {
    assert_exact(varied(
        embeddinggemma_300m_style(),
        [
            ("n_vocab", json!(32_000)),
            ("n_embd", json!(1024)),
            ("n_head", json!(8)),
            ("n_head_kv", json!(2)),
            ("head_dim", json!(128)),
            ("n_ff", json!(4096)),
            (
                "sliding_window_pattern",
                json!([true, false, true, true, false, true]),
            ),
        ],
    ));
}

#[test]
fn a_gemma4_assistant_alone_is_refused_by_llama_cpp_and_its_plan_says_why() {
    // Gemma 4 E2B's draft head: 4 blocks 256 wide over a 1 536-wide target, Q alone.
    let spec = json!({
        "arch": "gemma4-assistant", "n_vocab": 262_144, "n_embd": 256, "n_layer": 4,
        "n_head": 4, "n_head_kv": 1, "n_head_kv_swa": 1, "head_dim": 512, "head_dim_swa": 256,
        "n_ff": 2048, "sliding_window": 512,
        "sliding_window_pattern": [true, true, true, false], "tied": true, "target": 1536,
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python(), &spec);
    let options = PlacementOptions {
        context: 4096,
        ..Default::default()
    };
    assert_fit_params_refuses(&path, &options, "on", "requires ctx_other");
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let said = report(&shape, "assistant.gguf", &host_only(), &options, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let problem = said
        .problems
        .iter()
        .find(|p| p.contains("draft head"))
        .unwrap_or_else(|| panic!("no problem names the draft head: {:?}", said.problems));
    assert!(problem.contains("-md THIS.gguf"), "{problem}");
}

#[test]
fn the_real_gemma3_270m_matches_llama_cpp() {
    let script = repository().join("tests/fixtures/gemma3_270m.sh");
    let out = Command::new("bash").arg(&script).output().expect("bash");
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let missed = misses("gemma3 270M Q4_K_M", &path, EXACT);
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn qwen2_with_biased_projections_matches_llama_cpp() {
    // Qwen2.5 0.5B's layers: 14 heads of 64 over 2, biases on Q, K and V.
    assert_exact(json!({
        "arch": "qwen2", "n_vocab": 32_000, "n_embd": 896, "n_layer": 4, "n_head": 14,
        "n_head_kv": 2, "head_dim": 64, "n_ff": 4864,
    }));
}

#[test]
fn qwen3_with_normed_queries_and_keys_matches_llama_cpp() {
    // Qwen3 0.6B's layers: 16 heads of 128 (wider than the 1 024 embedding) over 8, Q and K
    // normed per head; the formula said 300.8 MiB with flash attention, llama.cpp 312.76.
    assert_exact(json!({
        "arch": "qwen3", "n_vocab": 151_936, "n_embd": 1024, "n_layer": 4, "n_head": 16,
        "n_head_kv": 8, "head_dim": 128, "n_ff": 3072,
    }));
}

#[test]
fn qwen3moe_with_narrow_experts_matches_llama_cpp() {
    // 16 experts of 768 with 4 active (the formula said 156.0 MiB without flash attention,
    // llama.cpp 152.01).
    assert_exact(qwen3moe_with_16_narrow_experts());
}

#[test]
fn llama_written_by_gguf_py_matches_llama_cpp() {
    // TinyLlama's layers: 32 heads of 64 over 4, n_ff 5 632.
    assert_exact(json!({
        "arch": "llama", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 4, "n_head": 32,
        "n_head_kv": 4, "head_dim": 64, "n_ff": 5632,
    }));
}

#[test]
fn mixtral_style_llama_written_by_gguf_py_matches_llama_cpp() {
    // 8 experts of n_ff with 2 active, a 151 936-token vocabulary.
    assert_exact(json!({
        "arch": "llama", "n_vocab": 151_936, "n_embd": 1024, "n_layer": 3, "n_head": 8,
        "n_head_kv": 2, "head_dim": 128, "n_ff": 2816, "experts": 8, "experts_used": 2,
    }));
}

#[test]
fn deepseek2_v3_style_with_mla_matches_llama_cpp() {
    // DeepSeek V3's layout, narrower: queries through a rank-768 projection, a 512-wide latent
    // with a 64-wide roped key, one dense layer, then 16 experts of 512 (4 active, sigmoid
    // gating with a selection bias, weights scaled by 2.5) beside a shared one. The formulas
    // said 70.5 MiB with flash attention, llama.cpp 78.51 (-10 %).
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 4, "n_head": 16,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 16, "experts_used": 4, "expert_ff": 512,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5,
    }));
}

#[test]
fn deepseek2_lite_with_one_query_projection_matches_llama_cpp() {
    // DeepSeek V2 Lite's 27 layers (llama.cpp reads no q_lora_rank at that depth): one Q
    // projection, 32 heads, 8 experts of 1 024 with 2 active and 2 shared, softmax gating, a
    // 151 936-token vocabulary.
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 151_936, "n_embd": 1024, "n_layer": 27, "n_head": 32,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 4096,
        "mla": {"q_lora_rank": 0, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 8, "experts_used": 2, "expert_ff": 1024, "shared_experts": 2,
        "weights_norm": false,
    }));
}

#[test]
fn deepseek2_with_64_heads_matches_llama_cpp() {
    // 64 heads over a rank-1 536 query projection, 32 experts of 256 with 8 active: without
    // flash attention the scores of 64 heads lead (728 MiB).
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 4096, "n_layer": 3, "n_head": 64,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 8192,
        "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 32, "experts_used": 8, "expert_ff": 256,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5,
    }));
}

#[test]
fn deepseek2_with_experts_in_groups_matches_llama_cpp() {
    // DeepSeek V3's router: 256 experts in 8 groups of which the best 4 are kept, 8 active
    // experts of 2 048 so that the experts' phase leads (without the groups' tensors the replay
    // said 203.51 MiB without flash attention, llama.cpp 203.01).
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 3, "n_head": 16,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 256, "experts_used": 8, "expert_ff": 2048,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5, "expert_groups": [8, 4],
    }));
}

#[test]
fn deepseek2_with_unnormalized_expert_weights_matches_llama_cpp() {
    // DeepSeek V2's router (`expert_weights_norm` false): 64 experts of 2 048 with 6 active and
    // 2 shared, no normalization of the selected weights (with it the replay was 0.01 MiB over).
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 3, "n_head": 16,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 64, "experts_used": 6, "expert_ff": 2048,
        "shared_experts": 2, "weights_norm": false,
    }));
}

#[test]
fn gpt_oss_20b_style_matches_llama_cpp() {
    // gpt-oss-20b's layers: 2 880 wide, 64 heads of 64 over 8, a 128-token window on every
    // other layer, biases everywhere, 32 experts of 2 880 with 4 active.
    assert_exact(json!({
        "arch": "gpt-oss", "n_vocab": 32_000, "n_embd": 2880, "n_layer": 4, "n_head": 64,
        "n_head_kv": 8, "head_dim": 64, "n_ff": 2880, "sliding_window": 128, "experts": 32,
        "experts_used": 4, "expert_ff": 2880,
    }));
}

#[test]
fn gpt_oss_120b_style_with_a_152k_vocabulary_matches_llama_cpp() {
    // 128 experts with 4 active, 6 layers (without the last layer's output kept the replay said
    // 308.0 MiB for 4 slots, llama.cpp 316.83, and 154.0 for 169.96 with 3 slots).
    assert_exact(json!({
        "arch": "gpt-oss", "n_vocab": 151_936, "n_embd": 2880, "n_layer": 6, "n_head": 64,
        "n_head_kv": 8, "head_dim": 64, "n_ff": 2880, "sliding_window": 128, "experts": 128,
        "experts_used": 4, "expert_ff": 2880,
    }));
}

#[test]
fn gpt_oss_with_one_active_expert_keeps_the_last_layers_output() {
    // One expert active (its output made contiguous) and the last layer's output kept as a
    // graph output beside the logits (without it the replay was 4.77 MiB under).
    assert_exact(json!({
        "arch": "gpt-oss", "n_vocab": 32_000, "n_embd": 1024, "n_layer": 3, "n_head": 16,
        "n_head_kv": 2, "head_dim": 128, "n_ff": 4096, "sliding_window": 128, "experts": 8,
        "experts_used": 1, "expert_ff": 4096,
    }));
}

#[test]
fn phi3_with_a_fused_qkv_projection_matches_llama_cpp() {
    // Phi-3 mini's layers: one QKV projection (Q, K and V are views of it; without flash
    // attention V is made contiguous for the transposed cache), 32 heads of 96, gate and up in
    // one projection of 2 × 8 192, the feed-forward added onto the residual.
    assert_exact(json!({
        "arch": "phi3", "n_vocab": 32_064, "n_embd": 3072, "n_layer": 4, "n_head": 32,
        "n_head_kv": 32, "head_dim": 96, "n_ff": 8192,
    }));
}

#[test]
fn phi3_with_grouped_heads_and_a_152k_vocabulary_matches_llama_cpp() {
    // 16 heads of 64 over 4: with a q8_0 cache the V view of the fused projection is made
    // contiguous before its rotation.
    assert_exact(json!({
        "arch": "phi3", "n_vocab": 151_936, "n_embd": 1024, "n_layer": 3, "n_head": 16,
        "n_head_kv": 4, "head_dim": 64, "n_ff": 4096,
    }));
}

#[test]
fn command_r_with_its_feed_forward_beside_the_attention_matches_llama_cpp() {
    // Layer norms, the feed-forward over the same normed input as the attention (n_ff 14 336
    // leads): llama.cpp runs the attention first (without that order the replay was 2 MiB
    // over with flash attention, 1 MiB under with 3 slots).
    assert_exact(json!({
        "arch": "command-r", "n_vocab": 32_000, "n_embd": 1024, "n_layer": 3, "n_head": 8,
        "n_head_kv": 8, "head_dim": 128, "n_ff": 14_336, "tied": true,
    }));
}

#[test]
fn command_r_with_a_262k_vocabulary_matches_llama_cpp() {
    // Aya-style: 16 heads of 128 over 4, 262 144 tokens whose scaled logits lead.
    assert_exact(json!({
        "arch": "command-r", "n_vocab": 262_144, "n_embd": 2048, "n_layer": 3, "n_head": 16,
        "n_head_kv": 4, "head_dim": 128, "n_ff": 5632, "tied": true,
    }));
}

#[test]
fn mamba_with_the_scan_leading_matches_llama_cpp() {
    // 4 096 wide, an inner width of 8 192 whose scan (six rows of it per token) outgrows the
    // logits; 1, 4 and 3 sequences.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 32_000, "n_embd": 4096, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 8192, "d_state": 16, "dt_rank": 256},
    }));
}

#[test]
fn mamba_with_a_wide_state_matches_llama_cpp() {
    // The n_embd 5 632, d_state 20 layout of the project's own Mamba check, 2 layers.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 32_000, "n_embd": 5632, "n_layer": 2, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 11_264, "d_state": 20, "dt_rank": 352},
    }));
}

#[test]
fn mamba_under_large_logits_matches_llama_cpp() {
    // With 151 936 tokens the logits lead: they sit above whatever the last layer left where
    // the embeddings lookup and the first layer's conv state were placed, so their order counts.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 151_936, "n_embd": 2048, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 4096, "d_state": 64, "dt_rank": 128},
    }));
}

#[test]
fn mamba2_with_eight_groups_matches_llama_cpp() {
    // Codestral Mamba's layout: 4 096 wide, 128 heads of 64, 8 groups of a 128-wide state (B and
    // C 2 048 wide each beside x in the convolution), 32 768 tokens; the scan leads.
    assert_exact(json!({
        "arch": "mamba2", "n_vocab": 32_768, "n_embd": 4096, "n_layer": 2, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 8192, "d_state": 128, "dt_rank": 128, "n_group": 8},
    }));
}

#[test]
fn mamba2_with_one_group_matches_llama_cpp() {
    // Mamba-2 2.7B's layout: 2 560 wide, 80 heads of 64 over an inner width of 5 120, one group
    // of a 128-wide state, 50 280 tokens whose logits lead.
    assert_exact(json!({
        "arch": "mamba2", "n_vocab": 50_280, "n_embd": 2560, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 5120, "d_state": 128, "dt_rank": 80, "n_group": 1},
    }));
}

#[test]
fn mamba2_under_large_logits_matches_llama_cpp() {
    // 151 936 tokens over a narrow scan: 24 heads of 64, 2 groups of a 64-wide state.
    assert_exact(json!({
        "arch": "mamba2", "n_vocab": 151_936, "n_embd": 768, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 1536, "d_state": 64, "dt_rank": 24, "n_group": 2},
    }));
}

#[test]
fn glm_dsa_with_an_indexer_on_every_layer_matches_llama_cpp() {
    // GLM-5's layout, narrower: MLA over a rank-768 query projection (192 + 64 per query head,
    // 256 per value head), the DSA lightning indexer (32 heads of 128, the best 2 048 keys) on
    // every layer (a trained context under 1 M), one dense layer, then 16 experts of 512 with 4
    // active beside a shared one. The formulas said 80.5 MiB at 16 384 ctx q8_0, llama.cpp 75.
    assert_exact(json!({
        "arch": "glm-dsa", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 4, "n_head": 16,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 192, "v_head": 256},
        "indexer": {"heads": 32, "head_size": 128, "top_k": 2048},
        "dense_lead": 1, "experts": 16, "experts_used": 4, "expert_ff": 512,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5,
    }));
}

#[test]
fn glm_dsa_with_shared_indexer_layers_matches_llama_cpp() {
    // GLM-5.2's pattern (a 1 M trained context): full indexers on layers 0, 1, 2 and 6, the
    // layers between reusing the last selection; 64 heads, a 151 936-token vocabulary.
    assert_exact(glm_5_2_style());
}

#[test]
fn deepseek2_without_mla_lengths_matches_llama_cpp() {
    // An older DeepSeek V2 conversion (no key_length_mla): llama.cpp decompresses K and V with
    // one attn_kv_b projection and caches 16 heads of 192-wide keys and 128-wide values; 8
    // experts of 1 024 with 2 active beside 2 shared.
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 3, "n_head": 16,
        "n_head_kv": 16, "head_dim": 192, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128,
                "absorbed": false},
        "dense_lead": 1, "experts": 8, "experts_used": 2, "expert_ff": 1024, "shared_experts": 2,
    }));
}

#[test]
fn deepseek2_lite_without_mla_lengths_matches_llama_cpp() {
    // DeepSeek V2 Lite's older conversion: 27 layers with one Q projection, 151 936 tokens.
    assert_exact(json!({
        "arch": "deepseek2", "n_vocab": 151_936, "n_embd": 1024, "n_layer": 27, "n_head": 16,
        "n_head_kv": 16, "head_dim": 192, "n_ff": 4096,
        "mla": {"q_lora_rank": 0, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128,
                "absorbed": false},
        "dense_lead": 1, "experts": 8, "experts_used": 2, "expert_ff": 1024, "shared_experts": 2,
        "weights_norm": false,
    }));
}

#[test]
fn falcon_mamba_with_normed_scan_parameters_matches_llama_cpp() {
    // FalconMamba 7B's layout, 3 layers: 4 096 wide, an inner width of 8 192, a 16-wide state,
    // dt, B and C RMS-normed (`ssm.dt_b_c_rms`) before the scan; 65 024 tokens.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 65_024, "n_embd": 4096, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 8192, "d_state": 16, "dt_rank": 256, "dt_b_c_rms": true},
    }));
}

#[test]
fn falcon_mamba_under_large_logits_matches_llama_cpp() {
    // A narrow FalconMamba-style scan under 151 936 tokens' logits.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 151_936, "n_embd": 2048, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 4096, "d_state": 64, "dt_rank": 128, "dt_b_c_rms": true},
    }));
}

#[test]
fn falcon_mamba_with_a_wide_state_matches_llama_cpp() {
    // A state as wide as the inner width, so that the normed B and C (a row of the state per
    // token each) weigh beside the scan.
    assert_exact(json!({
        "arch": "mamba", "n_vocab": 32_000, "n_embd": 1024, "n_layer": 3, "n_head": 0,
        "n_head_kv": 0, "head_dim": 0, "n_ff": 0,
        "ssm": {"d_conv": 4, "d_inner": 2048, "d_state": 1024, "dt_rank": 64, "dt_b_c_rms": true},
    }));
}

/// The tensors `llama-fit-params -ot PATTERN=CPU -v` reports moved, with the MiB it prints
/// for each (`tensor NAME (N MiB TYPE) buffer type overridden to CPU`).
fn overridden_by_llama_cpp(model: &Path, pattern: &str) -> Vec<(String, u64)> {
    let bin = fit_params_binary();
    let out = Command::new(&bin)
        .args([
            "-m",
            &model.display().to_string(),
            "-fitp",
            "on",
            "-nr",
            "-v",
        ])
        .args(["-c", "4096", "-ot", &format!("{pattern}=CPU")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let mut moved: Vec<(String, u64)> = log
        .lines()
        .filter(|l| l.ends_with("buffer type overridden to CPU"))
        .filter_map(|l| {
            let rest = l.split(" tensor ").nth(1)?;
            let (name, size) = rest.split_once(" (")?;
            let mib = size.split_whitespace().next()?.parse().ok()?;
            Some((name.to_owned(), mib))
        })
        .collect();
    moved.sort();
    moved
}

#[test]
fn experts_sent_to_the_cpu_by_ot_are_the_tensors_llama_cpp_moves() {
    // The bundled build has one device (CPU), so llama.cpp's per-device compute with experts
    // off a GPU cannot be measured here; what it shows is which tensors `-ot` moves and their
    // sizes, and that its host compute buffer is what the planner replays on a host-only rig.
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &qwen3moe_with_16_narrow_experts());
    let pattern = r"blk\.[12]\.ffn_.*_exps\.";
    let theirs = overridden_by_llama_cpp(&path, pattern);
    assert_eq!(theirs.len(), 6, "{theirs:?}");
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let options = PlacementOptions {
        context: 4096,
        overrides: vec![TensorOverride {
            pattern: pattern.to_owned(),
            device: DeviceId::Cpu,
        }],
        ..Default::default()
    };
    let mut rig = host_only();
    rig.insert(
        0,
        DeviceSpec {
            id: DeviceId::Gpu(0),
            name: "gpu".into(),
            ..rig[0].clone()
        },
    );
    let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
    let mut ours: Vec<(String, u64)> = shape
        .tensors
        .iter()
        .zip(&planned.tensor_devices)
        .filter(|(t, &device)| device == DeviceId::Cpu && t.name != "token_embd.weight")
        .map(|(t, _)| (t.name.clone(), (t.bytes + MIB / 2) / MIB))
        .collect();
    ours.sort();
    assert_eq!(ours, theirs);
    assert_eq!(planned.override_hits, vec![6]);
    // The moved experts' bytes are the host's, beside the embeddings.
    let host = &planned.device(DeviceId::Cpu).expect("the host").usage;
    let embedding = shape.embedding_bytes();
    let moved: u64 = shape
        .tensors
        .iter()
        .filter(|t| theirs.iter().any(|(name, _)| *name == t.name))
        .map(|t| t.bytes)
        .sum();
    assert_eq!(host.weights_bytes, embedding + moved);
    // On the host alone the override changes nothing llama.cpp computes.
    let host_plan = plan(&shape, &host_only(), &options).unwrap_or_else(|e| panic!("{e}"));
    let ours = &host_plan.device(DeviceId::Cpu).expect("the host").usage;
    let measured = fit_params_compute(&path, &options);
    assert_eq!(ours.compute_estimate_bytes / MIB, measured.mib);
    let logged = ours.compute_estimate_bytes as f64 / MIB as f64;
    assert!(
        (logged - measured.logged_mib).abs() <= EXACT,
        "{logged} vs {}",
        measured.logged_mib
    );
}

/// A model whose one MLA cache holds K and V (`deepseek2` with MLA, `glm-dsa`) planned with a
/// quantized cache and flash attention off: llama.cpp refuses `-fa off` for it (a quantized V
/// needs flash attention, and MLA's K and V types must match), and `-fa auto` turns flash
/// attention on; the plan must be that run's figure, at q8_0 and q4_0, one slot and three.
fn assert_quantized_mla_without_flash_attention_is_llama_cpps(spec: Value) {
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &spec);
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let mut missed = Vec::new();
    for kind in [KvType::Q8_0, KvType::Q4_0] {
        for (context, parallel, ubatch) in [(4096, 1, 512), (6144, 3, 256)] {
            let options = PlacementOptions {
                context,
                parallel,
                ubatch,
                kv_unified: false,
                flash_attention: false,
                cache_type_k: kind,
                cache_type_v: kind,
                ..Default::default()
            };
            if missed.is_empty() && kind == KvType::Q8_0 && parallel == 1 {
                let reason = "quantized V cache requires flash_attn";
                assert_fit_params_refuses(&path, &options, "off", reason);
            }
            let plan = plan(&shape, &host_only(), &options).unwrap_or_else(|e| panic!("{e}"));
            let ours = &plan.device(DeviceId::Cpu).expect("the host").usage;
            let theirs = fit_params_compute_with(&path, &options, "auto");
            let ours_mib = ours.compute_estimate_bytes as f64 / MIB as f64;
            let line = format!(
                "{} {} cache, {parallel} slots, no -fa: ours {ours_mib:.2} MiB, llama.cpp -fa auto {:.2} MiB ({} printed)",
                spec["arch"],
                kind.name(),
                theirs.logged_mib,
                theirs.mib
            );
            println!("{line}");
            let whole = ours.compute_estimate_bytes / MIB;
            if whole != theirs.mib || (ours_mib - theirs.logged_mib).abs() > EXACT {
                missed.push(line);
            }
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn deepseek2_with_mla_and_a_quantized_cache_without_flash_attention_matches_llama_cpp() {
    assert_quantized_mla_without_flash_attention_is_llama_cpps(json!({
        "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 4, "n_head": 16,
        "n_head_kv": 1, "head_dim": 576, "n_ff": 5632,
        "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128, "v_head": 128},
        "dense_lead": 1, "experts": 16, "experts_used": 4, "expert_ff": 512,
        "shared_experts": 1, "sigmoid": true, "weights_scale": 2.5,
    }));
}

#[test]
fn glm_dsa_with_a_quantized_cache_without_flash_attention_matches_llama_cpp() {
    assert_quantized_mla_without_flash_attention_is_llama_cpps(glm_5_2_style());
}

#[test]
fn deepseek2_without_mla_lengths_and_a_q4_0_key_cache_matches_llama_cpp() {
    // The older conversion's full K and V caches: a q4_0 K beside an f16 V runs without flash
    // attention (the every-shape check covers q8_0 with three slots); one slot here.
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(
        dir.path(),
        &python,
        &json!({
            "arch": "deepseek2", "n_vocab": 32_000, "n_embd": 2048, "n_layer": 3, "n_head": 16,
            "n_head_kv": 16, "head_dim": 192, "n_ff": 5632,
            "mla": {"q_lora_rank": 768, "kv_lora_rank": 512, "rope": 64, "nope": 128,
                    "v_head": 128, "absorbed": false},
            "dense_lead": 1, "experts": 8, "experts_used": 2, "expert_ff": 1024,
            "shared_experts": 2,
        }),
    );
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let options = PlacementOptions {
        context: 4096,
        kv_unified: false,
        flash_attention: false,
        cache_type_k: KvType::Q4_0,
        ..Default::default()
    };
    let planned = plan(&shape, &host_only(), &options).unwrap_or_else(|e| panic!("{e}"));
    let ours = &planned.device(DeviceId::Cpu).expect("the host").usage;
    let theirs = fit_params_compute(&path, &options);
    let ours_mib = ours.compute_estimate_bytes as f64 / MIB as f64;
    assert_eq!(
        ours.compute_estimate_bytes / MIB,
        theirs.mib,
        "{ours_mib:.2} MiB"
    );
    assert!(
        (ours_mib - theirs.logged_mib).abs() <= EXACT,
        "{ours_mib:.2} vs {:.2}",
        theirs.logged_mib
    );
}

/// Writes the project's `qwen3next`/`qwen35`/`qwen35moe` file (gguf-py has no writer for their
/// linear-attention layers) with Qwen's tokenizer from the pinned tree and checks every
/// [`shapes`] entry, the quantized K without flash attention among them.
fn assert_hybrid_exact(model: rigdeck_gguf::tiny_recurrent::TinyQwen3Next) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.gguf", model.name));
    let vocab = gguf_py().join("../models/ggml-vocab-qwen2.gguf");
    model
        .write(&vocab, &path)
        .unwrap_or_else(|e| panic!("{}: {e}", vocab.display()));
    let missed = misses(model.hybrid.architecture(), &path, EXACT);
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn qwen3next_matches_llama_cpp_with_quantized_caches_and_without_flash_attention() {
    use rigdeck_gguf::tiny_recurrent::TinyQwen3Next;
    assert_hybrid_exact(TinyQwen3Next::with_linear_heads(3, 2048, 16, 32));
}

#[test]
fn qwen35_and_qwen35moe_match_llama_cpp_with_quantized_caches_and_without_flash_attention() {
    use rigdeck_gguf::tiny_recurrent::{QwenHybrid, TinyQwen3Next};
    for hybrid in [QwenHybrid::Qwen35, QwenHybrid::Qwen35Moe] {
        assert_hybrid_exact(TinyQwen3Next {
            hybrid,
            n_ff: 8192,
            full_attention_interval: 4,
            ..TinyQwen3Next::with_linear_heads(4, 2048, 16, 48)
        });
    }
}

/// A real `rpc-server` of the bundled build, lending its CPU on a loopback port: a device to
/// llama.cpp (`RPC0`) whose compute buffer its scheduler reserves as it does a GPU's. Killed
/// when dropped.
struct RpcDevice {
    endpoint: String,
    process: std::process::Child,
}

impl RpcDevice {
    fn start() -> RpcDevice {
        let program = fit_params_binary().with_file_name("rpc-server");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let endpoint = format!("127.0.0.1:{port}");
        let process = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-d", "CPU"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(&endpoint).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "{endpoint} never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        RpcDevice { endpoint, process }
    }
}

impl Drop for RpcDevice {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// llama.cpp's compute buffers (MiB to the hundredth, its log's last `sched_reserve`) of
/// `RPC0` and of the host, with `-dev RPC0 -ngl NGL`.
fn rpc_and_host_compute(
    model: &Path,
    rpc: &RpcDevice,
    options: &PlacementOptions,
    ngl: u32,
) -> (f64, f64) {
    let flash = if options.flash_attention { "on" } else { "off" };
    let args = fit_params_args(model, options, flash);
    let bin = fit_params_binary();
    for _ in 0..5 {
        let out = Command::new(&bin)
            .args(&args)
            .args([
                "--rpc",
                &rpc.endpoint,
                "-dev",
                "RPC0",
                "-ngl",
                &ngl.to_string(),
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = String::from_utf8_lossy(&out.stderr);
        let last = |device: &str| {
            log.lines()
                .filter(|l| l.contains(&format!("{device} compute buffer size =")))
                .filter_map(|l| l.split('=').nth(1)?.split_whitespace().next()?.parse().ok())
                .next_back()
        };
        if let (Some(rpc), Some(host)) = (last("]"), last(" CPU")) {
            return (rpc, host);
        }
    }
    panic!("llama-fit-params logged no compute buffer sizes in 5 runs");
}

#[test]
fn on_a_device_alone_or_after_host_layers_the_plan_is_llama_cpps() {
    // The output alone on the device (-ngl 1): the end of the host's last layer runs there too,
    // and the host holds the output rows it reads. Every layer on the device: the host looks
    // the tokens up and holds the inputs. Layers on
    // the host first (-ngl 3, 5): the end of the host's last layer, after its last weight,
    // runs on the device (the scheduler's expansion), which receives what it reads; and the
    // host holds every graph input, those only the device reads too (gemma3's full-attention
    // mask, +8 MiB). GLM-5.2-shaped: each shared-indexer layer on the device reads its own
    // copy of the selection the host's last full-indexer layer made, and the device places
    // the leaves it makes before what it receives, received in the order it is read.
    for spec in [
        qwen3moe_with_16_narrow_experts(),
        llama_of_the_gpu_check(),
        gemma3_of_the_gpu_check(),
        glm_5_2_style(),
        minimax_m3_style(),
    ] {
        check_on_a_device(
            spec,
            &[
                (false, 1),
                (false, 99),
                (true, 99),
                (false, 5),
                (false, 3),
                (true, 3),
            ],
        );
    }
}

#[test]
fn gemma4_with_own_embeddings_on_a_device_is_llama_cpps() {
    // E2B-shaped: the host looks up each layer's own embeddings, the device holding layer 0
    // receives them and projects them in (its weights go with layer 0), a later device
    // receives each layer's slice. -ngl 99: all on RPC0; -ngl 8: layers 0-2 on the host.
    check_on_a_device(
        gemma4_e2b_style(),
        &[(false, 99), (true, 99), (false, 8), (true, 8)],
    );
    // -ngl 5, 4 and 2: the last layers on RPC0, the layers whose caches they read on the host:
    // RPC0 copies the views of those caches each of its last layers reads (it was planned up
    // to 11 % under when the replay left them out).
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &gemma4_e2b_style());
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let server = [RpcDevice::start()];
    for (flash, ngl) in [(true, 5), (false, 5), (true, 4), (false, 2)] {
        let (ratios, notes) = planned_over_llama_cpps((&path, &shape), &server, flash, ngl);
        for (id, ratio) in ratios {
            assert!(
                (ratio - 1.0).abs() <= 1e-4,
                "-fa {flash} -ngl {ngl} {id:?}: {ratio:.5} of llama.cpp's"
            );
        }
        assert!(!notes.iter().any(|n| n.contains("estimates")), "{notes:?}");
    }
}

#[test]
fn gemma3n_on_a_device_and_split_with_the_host_is_llama_cpps() {
    // E2B-shaped: -ngl 99, all on RPC0 (the host looks up both embeddings and holds the
    // inputs); -ngl 10, layers 13-21 and the output on RPC0, which also stacks the streams
    // (AltUp's projection is the output's) for the host's layers, then receives the four
    // streams from the host's last layer.
    check_on_a_device(
        gemma3n_e2b_style(),
        &[(false, 99), (true, 99), (false, 10), (true, 10)],
    );
    // Under 32 000 tokens the stacking, not the logits, can be RPC0's largest phase: -ngl 1
    // puts only the output there.
    let mut spec = gemma3n_e2b_style();
    spec["n_vocab"] = json!(32_000);
    check_on_a_device(spec, &[(false, 1), (true, 5), (false, 12)]);
}

/// `spec`'s model planned and dry-run on the host and a real `rpc-server`'s CPU as `RPC0`, with
/// flash attention on or off and `-ngl` as each of `runs` says.
fn check_on_a_device(spec: Value, runs: &[(bool, u32)]) {
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &spec);
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let rpc = RpcDevice::start();
    let mut rig = host_only();
    rig.push(DeviceSpec {
        id: DeviceId::Rpc(0),
        name: "RPC0".into(),
        ..rig[0].clone()
    });
    for &(flash, ngl) in runs {
        let options = PlacementOptions {
            context: 4096,
            parallel: 1,
            batch: 2048,
            ubatch: 512,
            flash_attention: flash,
            n_gpu_layers: Some(ngl),
            devices: vec![DeviceId::Rpc(0)],
            rpc_servers: vec![RpcServer {
                endpoint: rpc.endpoint.clone(),
                devices: 1,
            }],
            ..Default::default()
        };
        let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
        let ours = |id| {
            planned
                .device(id)
                .expect("the device")
                .usage
                .compute_estimate_bytes as f64
                / MIB as f64
        };
        let (theirs_rpc, theirs_host) = rpc_and_host_compute(&path, &rpc, &options, ngl);
        for (what, ours, theirs) in [
            ("RPC0", ours(DeviceId::Rpc(0)), theirs_rpc),
            ("the host", ours(DeviceId::Cpu), theirs_host),
        ] {
            assert!(
                (ours - theirs).abs() <= EXACT,
                "{} -fa {flash} -ngl {ngl}, {what}: planned {ours:.2} MiB, llama.cpp {theirs} MiB",
                spec["arch"]
            );
        }
    }
}

#[test]
fn across_two_devices_the_plan_is_llama_cpps() {
    // Two real rpc-servers as RPC0 and RPC1. Host layers first (-ngl 5, 3): where one device's
    // layers end and the next one's begin, the first device also runs the next layer's norm
    // (the scheduler's expansion: no weight places it), and the next device receives that norm
    // first, then the last layer's output where its residual reads it. Every layer on the
    // devices (-ngl 99): pipeline parallelism, each device (and the host) holding four copies
    // of every input it receives, allocated first and kept. Gemma 3n E2B's and Gemma 4 E2B's
    // last layers read the caches of earlier ones: split from them, their device receives the
    // views of those caches it reads, and only the inputs its nodes read (a device holding
    // only such layers writes no cache: no row indices come to it).
    let specs = vec![
        gemma3n_e2b_style(),
        gemma4_e2b_style(),
        llama_of_the_gpu_check(),
        qwen3moe_of_the_gpu_check(),
        gemma3_of_the_gpu_check(),
        glm_5_2_style(),
        gemma4_26b_a4b_style(),
        minimax_m3_style(),
        deepseek4_narrow(),
    ];
    let mut missed = Vec::new();
    for (run, planned, theirs) in over_two_devices(specs) {
        let ids = [DeviceId::Rpc(0), DeviceId::Rpc(1), DeviceId::Cpu];
        let figures = ids.into_iter().zip(theirs.into_iter().map(Some));
        missed.extend(misses_per_device(&planned, figures, &run, "llama.cpp"));
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// Each spec's model planned and dry-run on two real rpc-servers, host layers first (-ngl 5,
/// 3) and every layer on them (-ngl 99, evenly and 3:1 with two slots), flash attention on and
/// off: each run's label, plan and llama.cpp's compute buffers (RPC0, RPC1, the host).
fn over_two_devices(specs: Vec<Value>) -> Vec<(String, Plan, Vec<f64>)> {
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let servers = [RpcDevice::start(), RpcDevice::start()];
    let mut rig = host_only();
    for (index, _) in servers.iter().enumerate() {
        rig.push(DeviceSpec {
            id: DeviceId::Rpc(index as u32),
            name: format!("RPC{index}"),
            ..rig[0].clone()
        });
    }
    let mut results = Vec::new();
    for spec in specs {
        let path = write_model(dir.path(), &python, &spec);
        let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
        let runs = [
            (true, 5, 1.0, 1),
            (false, 5, 1.0, 1),
            (true, 3, 1.0, 1),
            (true, 99, 1.0, 1),
            (false, 99, 1.0, 1),
            (true, 99, 3.0, 2),
        ];
        for (flash, ngl, first_share, parallel) in runs {
            let options = PlacementOptions {
                context: 8192,
                parallel,
                // llama-fit-params' -np keeps a cache per slot (no -kvu).
                kv_unified: parallel == 1,
                flash_attention: flash,
                n_gpu_layers: Some(ngl),
                tensor_split: vec![first_share, 1.0],
                devices: vec![DeviceId::Rpc(0), DeviceId::Rpc(1)],
                rpc_servers: servers
                    .iter()
                    .map(|s| RpcServer {
                        endpoint: s.endpoint.clone(),
                        devices: 1,
                    })
                    .collect(),
                ..Default::default()
            };
            let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
            let theirs = devices_compute(&path, &servers, &options, ngl);
            let run = format!(
                "{} -fa {flash} -ngl {ngl} -ts {first_share},1 -np {parallel}",
                spec["arch"]
            );
            results.push((run, planned, theirs));
        }
    }
    results
}

#[test]
fn experts_in_host_memory_under_a_lent_device_run_on_the_host_as_planned() {
    // A real rpc-server as RPC0 never takes operations on host weights: the routed experts
    // that -ot leaves in host memory under its layers run on the host, which receives their
    // input and selection and sends their output back (before, the plan counted them on RPC0:
    // the host 16.01 MiB where llama.cpp has 80.01 on the qwen3moe).
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let servers = [RpcDevice::start()];
    let mut rig = host_only();
    rig.push(DeviceSpec {
        id: DeviceId::Rpc(0),
        name: "RPC0".into(),
        ..rig[0].clone()
    });
    let mut missed = Vec::new();
    for (spec, layers) in [
        (qwen3moe_of_the_gpu_check(), "1|2"),
        (qwen3moe_of_the_gpu_check(), "5|6"),
        (glm_5_2_style(), "4|5"),
    ] {
        let path = write_model(dir.path(), &python, &spec);
        let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
        for (flash, ngl) in [(true, 99), (false, 99), (true, 5)] {
            let pattern = format!(r"blk\.({layers})\.ffn_.*_exps\.");
            let options = PlacementOptions {
                context: 8192,
                flash_attention: flash,
                n_gpu_layers: Some(ngl),
                tensor_split: vec![1.0],
                devices: vec![DeviceId::Rpc(0)],
                rpc_servers: vec![RpcServer {
                    endpoint: servers[0].endpoint.clone(),
                    devices: 1,
                }],
                overrides: vec![TensorOverride {
                    pattern: pattern.clone(),
                    device: DeviceId::Cpu,
                }],
                ..Default::default()
            };
            let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
            let ot = format!("{pattern}=CPU");
            let theirs = devices_compute_with(&path, &servers, &options, ngl, &["-ot", &ot]);
            let run = format!("{} -fa {flash} -ngl {ngl} -ot {ot}", spec["arch"]);
            let ids = [DeviceId::Rpc(0), DeviceId::Cpu];
            let figures = ids.into_iter().zip(theirs.into_iter().map(Some));
            missed.extend(misses_per_device(&planned, figures, &run, "llama.cpp"));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// llama.cpp's compute buffers (MiB to the hundredth, its log's last `sched_reserve`) of each
/// of `servers` (as `RPC0`, `RPC1`, … with `-ts` from `options`) and of the host.
fn devices_compute(
    model: &Path,
    servers: &[RpcDevice],
    options: &PlacementOptions,
    ngl: u32,
) -> Vec<f64> {
    devices_compute_with(model, servers, options, ngl, &[])
}

/// [`devices_compute`] with `extra` arguments.
fn devices_compute_with(
    model: &Path,
    servers: &[RpcDevice],
    options: &PlacementOptions,
    ngl: u32,
    extra: &[&str],
) -> Vec<f64> {
    let flash = if options.flash_attention { "on" } else { "off" };
    let endpoints: Vec<&str> = servers.iter().map(|s| s.endpoint.as_str()).collect();
    let names: Vec<String> = (0..servers.len()).map(|i| format!("RPC{i}")).collect();
    let split: Vec<String> = options.tensor_split.iter().map(|t| t.to_string()).collect();
    let bin = fit_params_binary();
    for _ in 0..5 {
        let out = Command::new(&bin)
            .args(fit_params_args(model, options, flash))
            .args(["--rpc", &endpoints.join(","), "-dev", &names.join(",")])
            .args(["-ts", &split.join(","), "-ngl", &ngl.to_string()])
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = String::from_utf8_lossy(&out.stderr);
        let last = |device: &str| -> Option<f64> {
            log.lines()
                .filter(|l| l.contains(&format!("{device} compute buffer size =")))
                .filter_map(|l| l.split('=').nth(1)?.split_whitespace().next()?.parse().ok())
                .next_back()
        };
        let mut figures: Vec<Option<f64>> = endpoints
            .iter()
            .map(|endpoint| last(&format!("{endpoint}]")))
            .collect();
        figures.push(last(" CPU"));
        if let Some(all) = figures.into_iter().collect::<Option<Vec<f64>>>() {
            return all;
        }
    }
    panic!("llama-fit-params logged no compute buffer sizes in 5 runs");
}

/// The qwen3moe of the GPU check (`tests/gpu/planned_vs_measured.sh`): 8 layers, 2 048 wide,
/// 128 experts of 768 with 8 active, 151 936 tokens.
fn qwen3moe_of_the_gpu_check() -> Value {
    json!({
        "arch": "qwen3moe", "n_vocab": 151_936, "n_embd": 2048, "n_layer": 8, "n_head": 32,
        "n_head_kv": 4, "head_dim": 128, "n_ff": 6144, "experts": 128, "experts_used": 8,
        "expert_ff": 768,
    })
}

/// The dense llama of the GPU check: 8 layers, 4 096 wide, 32 heads of 128 over 8, n_ff 14 336.
fn llama_of_the_gpu_check() -> Value {
    json!({
        "arch": "llama", "n_vocab": 32_000, "n_embd": 4096, "n_layer": 8, "n_head": 32,
        "n_head_kv": 8, "head_dim": 128, "n_ff": 14_336,
    })
}

/// The gemma3 of the GPU check: Gemma 3 270M's layout in 6 layers.
fn gemma3_of_the_gpu_check() -> Value {
    json!({
        "arch": "gemma3", "n_vocab": 262_144, "n_embd": 640, "n_layer": 6, "n_head": 4,
        "n_head_kv": 1, "head_dim": 256, "n_ff": 2048, "sliding_window": 512, "tied": true,
    })
}

/// The shapes the GPU check dry-ran with every layer on CUDA0, -c 8192 -np 1: flash attention
/// on and off, on with a q8_0 cache, on and off with a 256-token micro-batch.
fn gpu_check_shapes() -> [PlacementOptions; 5] {
    let base = PlacementOptions {
        context: 8192,
        parallel: 1,
        batch: 2048,
        ubatch: 512,
        flash_attention: true,
        n_gpu_layers: Some(99),
        ..Default::default()
    };
    [
        base.clone(),
        PlacementOptions {
            flash_attention: false,
            ..base.clone()
        },
        PlacementOptions {
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..base.clone()
        },
        PlacementOptions {
            ubatch: 256,
            ..base.clone()
        },
        PlacementOptions {
            ubatch: 256,
            flash_attention: false,
            ..base
        },
    ]
}

/// For each device and llama.cpp's figure for it (MiB; `None`: not one to check), a line when
/// `planned`'s compute buffer there is not that figure to the hundredth; `run` names the run,
/// `source` where the figure comes from.
fn misses_per_device(
    planned: &Plan,
    figures: impl IntoIterator<Item = (DeviceId, Option<f64>)>,
    run: &str,
    source: &str,
) -> Vec<String> {
    let mut missed = Vec::new();
    for (id, theirs) in figures {
        let Some(theirs) = theirs else { continue };
        let ours = planned
            .device(id)
            .expect("the device")
            .usage
            .compute_estimate_bytes as f64
            / MIB as f64;
        if (ours - theirs).abs() > EXACT {
            missed.push(format!(
                "{run}, {id:?}: planned {ours:.2} MiB, {source} {theirs} MiB"
            ));
        }
    }
    missed
}

/// A command and llama.cpp's compute buffers for it: CUDA0's, and the host's where it is the
/// plan's to check.
type Recorded = (String, (f64, Option<f64>));

/// The CUDA0 + host rig of the H200 check: the GPU first, then the host.
fn cuda_rig() -> Vec<DeviceSpec> {
    let mut rig = host_only();
    rig.insert(
        0,
        DeviceSpec {
            id: DeviceId::Gpu(0),
            name: "CUDA0".into(),
            ..rig[0].clone()
        },
    );
    rig
}

#[test]
fn with_weights_in_host_memory_on_a_cuda_gpu_the_plan_is_what_llama_cpp_reserved_on_an_h200() {
    // llama.cpp's figures as `llama-fit-params -v` of the CUDA build logged them on an NVIDIA
    // H200 (tests/gpu/planned_vs_measured.sh, 2026-11-28; CUDA0 and the host, MiB), -c 8192,
    // -fa on, -ub 512 unless said. With 5 host layers (-ngl 3) op offload runs the host layers
    // on CUDA0, each weight copied into its buffer as the split reading it starts, and a host
    // layer's cache copied before its attention; the host then holds only its inputs. With
    // --no-op-offload the host computes its own layers. Under 32 tokens (-ub 16) the host
    // computes them: the llama's and GLM-5.2-shaped figures are the plan's; the qwen3moe's and
    // gemma3's are not here (their per-head norms still run on the GPU: 1.27 MiB over, and
    // gemma3's host 0.06 under). -ot sends two layers' routed experts to the host: CUDA0 runs
    // them with each experts tensor copied whole; with --no-op-offload the host runs them.
    let ngl = |n: u32, op_offload: bool, ubatch: u32| {
        let mut args = format!("llama-server -m m.gguf -c 8192 -np 1 -fa on -ngl {n} -ub {ubatch}");
        if !op_offload {
            args.push_str(" --no-op-offload");
        }
        args
    };
    let experts = |layers: &str| {
        format!(
            r"llama-server -m m.gguf -c 8192 -np 1 -fa on -ngl 99 -ot blk\.({layers})\.ffn_.*_exps\.=CPU"
        )
    };
    let recorded: [(Value, Vec<Recorded>); 4] = [
        (
            llama_of_the_gpu_check(),
            vec![
                (ngl(3, true, 512), (216.00, Some(24.01))),
                (ngl(3, false, 512), (108.01, Some(124.01))),
                (ngl(3, true, 16), (3.38, Some(3.88))),
            ],
        ),
        (
            qwen3moe_of_the_gpu_check(),
            vec![
                (ngl(3, true, 512), (468.00, Some(16.01))),
                (ngl(3, false, 512), (300.75, Some(96.01))),
                (experts("1|2"), (444.79, Some(16.01))),
                // The host runs the experts then, copies of their input and selection in.
                (
                    format!("{} --no-op-offload", experts("1|2")),
                    (341.54, Some(80.01)),
                ),
            ],
        ),
        (
            gemma3_of_the_gpu_check(),
            vec![
                (ngl(3, true, 512), (513.25, Some(11.52))),
                (ngl(3, false, 512), (513.25, Some(26.77))),
            ],
        ),
        (
            glm_5_2_style(),
            vec![
                (ngl(3, true, 512), (309.05, Some(24.08))),
                (ngl(3, false, 512), (309.05, Some(226.08))),
                (ngl(3, true, 16), (9.66, Some(7.13))),
                (experts("4|5"), (305.05, Some(24.08))),
            ],
        ),
    ];
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let rig = cuda_rig();
    let mut missed = Vec::new();
    for (spec, runs) in recorded {
        let path = write_model(dir.path(), &python, &spec);
        let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
        for (command, (cuda0, host)) in runs {
            let options = rigdeck_placement::flags::parse_command(&command)
                .unwrap_or_else(|e| panic!("{command}: {e}"))
                .options;
            let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
            let figures = [(DeviceId::Gpu(0), Some(cuda0)), (DeviceId::Cpu, host)];
            let run = format!("{} `{command}`", spec["arch"]);
            missed.extend(misses_per_device(
                &planned,
                figures,
                &run,
                "llama.cpp on the H200",
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn on_a_cuda_gpu_the_plan_is_what_llama_cpp_reserved_on_an_h200() {
    // CI has no GPU: these are llama.cpp's figures as `llama-fit-params -v` of the CUDA build
    // (sm_90) logged them on an NVIDIA H200 for the same gguf-py files, every layer on CUDA0
    // (tests/gpu/planned_vs_measured.sh and its comparison of these shapes, 2026-11-28), CUDA0's
    // and the host's compute buffers, MiB. What CUDA does that the CPU does not: its fusions of
    // the MoE routing and of the experts' weighted sum keep their tensors alive longer (+40 MiB
    // on the qwen3moe), its flash attention converts a q8_0 cache to f16 inside its output's
    // allocation (+8 MiB on the llama); and a host holding no layer holds GLM-5.x's indexer
    // inputs (+8 MiB).
    let recorded: [(Value, [(f64, f64); 5]); 4] = [
        (
            llama_of_the_gpu_check(),
            [
                (116.01, 24.01),
                (564.01, 36.01),
                (116.09, 24.09),
                (58.01, 12.01),
                (282.00, 18.00),
            ],
        ),
        (
            qwen3moe_of_the_gpu_check(),
            [
                (341.54, 16.01),
                (574.79, 26.01),
                (341.54, 16.09),
                (170.77, 8.01),
                (287.40, 13.00),
            ],
        ),
        (
            gemma3_of_the_gpu_check(),
            [
                (513.25, 11.52),
                (513.25, 22.51),
                (513.25, 12.05),
                (256.62, 5.64),
                (256.62, 11.01),
            ],
        ),
        (
            glm_5_2_style(),
            [
                (305.05, 24.08),
                (1262.07, 32.08),
                (305.05, 24.08),
                (152.53, 12.07),
                (631.07, 16.07),
            ],
        ),
    ];
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let rig = cuda_rig();
    let mut missed = Vec::new();
    for (spec, figures) in recorded {
        let path = write_model(dir.path(), &python, &spec);
        let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
        for (options, (cuda0, host)) in gpu_check_shapes().into_iter().zip(figures) {
            let planned = plan(&shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
            let figures = [(DeviceId::Gpu(0), Some(cuda0)), (DeviceId::Cpu, Some(host))];
            let run = format!(
                "{} -fa {} -ub {} -ctk {:?}",
                spec["arch"], options.flash_attention, options.ubatch, options.cache_type_k
            );
            missed.extend(misses_per_device(
                &planned,
                figures,
                &run,
                "llama.cpp on the H200",
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// Each device's planned compute buffer over llama.cpp's (`llama-fit-params` with `servers` as
/// RPC0, RPC1…), the devices first and the host last, with the plan's notes.
fn planned_over_llama_cpps(
    (path, shape): (&Path, &rigdeck_placement::model::ModelShape),
    servers: &[RpcDevice],
    flash: bool,
    ngl: u32,
) -> (Vec<(DeviceId, f64)>, Vec<String>) {
    let mut rig = host_only();
    for index in 0..servers.len() {
        rig.push(DeviceSpec {
            id: DeviceId::Rpc(index as u32),
            name: format!("RPC{index}"),
            ..rig[0].clone()
        });
    }
    let options = PlacementOptions {
        context: 8192,
        parallel: 1,
        kv_unified: true,
        flash_attention: flash,
        n_gpu_layers: Some(ngl),
        tensor_split: vec![1.0; servers.len()],
        devices: (0..servers.len() as u32).map(DeviceId::Rpc).collect(),
        rpc_servers: servers
            .iter()
            .map(|s| RpcServer {
                endpoint: s.endpoint.clone(),
                devices: 1,
            })
            .collect(),
        ..Default::default()
    };
    let report = rigdeck_placement::report::report(shape, "model.gguf", &rig, &options, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let planned = plan(shape, &rig, &options).unwrap_or_else(|e| panic!("{e}"));
    let theirs = devices_compute(path, servers, &options, ngl);
    let ids = (0..servers.len() as u32)
        .map(DeviceId::Rpc)
        .chain([DeviceId::Cpu]);
    let ratios = ids
        .zip(theirs)
        .map(|(id, theirs)| {
            let ours = planned
                .device(id)
                .expect("the device")
                .usage
                .compute_estimate_bytes;
            (id, ours as f64 / MIB as f64 / theirs)
        })
        .collect();
    (ratios, report.notes)
}

#[test]
fn gemma3n_over_two_devices_is_llama_cpps() {
    // Layers from the host on (-ngl 15: layers 8-14 on RPC0, 15-21 and the output on RPC1):
    // RPC1 stacks the streams first for the host, RPC0 runs the end of the host's last layer,
    // RPC1 receives RPC0's copy of the streams laid out for the mix, its norm and the streams.
    // Every layer on the two (-ngl 99): layer 0 on RPC0, the output on RPC1, which stacks the
    // streams before its layers (AltUp's projection is the output's) and frees them once RPC0
    // has its copies: the streams, their layout for the mix, the active one apart, the scaled
    // embeddings and each layer's own scaled; four of each (pipeline parallelism). The plan
    // was 53 to 67 % under on RPC0 and 15 to 38 % under on RPC1 before.
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(dir.path(), &python, &gemma3n_e2b_style());
    let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
    let servers = [RpcDevice::start(), RpcDevice::start()];
    let mut missed = Vec::new();
    for flash in [true, false] {
        let (ratios, _) = planned_over_llama_cpps((&path, &shape), &servers, flash, 15);
        for (id, ratio) in ratios {
            if (ratio - 1.0).abs() > 1e-4 {
                missed.push(format!(
                    "-fa {flash} -ngl 15 {id:?}: {ratio:.4} of llama.cpp's"
                ));
            }
        }
        let (ratios, notes) = planned_over_llama_cpps((&path, &shape), &servers, flash, 99);
        for (id, ratio) in ratios {
            if (ratio - 1.0).abs() > 1e-4 {
                missed.push(format!(
                    "-fa {flash} -ngl 99 {id:?}: {ratio:.4} of llama.cpp's"
                ));
            }
        }
        assert!(!notes.iter().any(|n| n.contains("estimates")), "{notes:?}");
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn gemma_embedding_on_a_device_and_split_with_the_host_is_llama_cpps() {
    // All on RPC0 (the host looks the tokens up and holds the two masks over the micro-batch),
    // and split: layers 3-5 and the output on RPC0, or the output alone.
    check_on_a_device(
        embeddinggemma_300m_style(),
        &[(true, 99), (false, 99), (true, 4), (false, 1)],
    );
}

#[test]
fn deepseek4_headers_the_replay_does_not_read_plan_with_the_estimate_and_say_so() {
    // Three streams (llama.cpp asserts four) and an indexer 96 wide (its rotation needs a
    // multiple of 64): planned with the formulas, the plan's note naming the estimate.
    let python = python();
    let dir = tempfile::tempdir().expect("tempdir");
    let three_streams = varied(deepseek4_narrow(), [("hc", json!(3))]);
    let indexer = json!({"heads": 64, "head_size": 96, "top_k": 512});
    let odd_indexer = varied(deepseek4_narrow(), [("indexer", indexer)]);
    for spec in [three_streams, odd_indexer] {
        let path = write_model(dir.path(), &python, &spec);
        let shape = load_shape(&path).unwrap_or_else(|e| panic!("{e}")).shape;
        let options = PlacementOptions {
            context: 4096,
            ..Default::default()
        };
        let said =
            rigdeck_placement::report::report(&shape, "v4.gguf", &host_only(), &options, false)
                .unwrap_or_else(|e| panic!("{e}"));
        let compute = said.plan.devices[0].usage.compute_estimate_bytes;
        assert!(compute > 0 && compute < 1 << 40, "{compute}");
        assert!(
            said.notes.iter().any(|n| n.contains("is an estimate")),
            "{:?}",
            said.notes
        );
    }
}
