//! `rigdeck plan MODEL`: the per-device memory table, the llama-server flags and the speed
//! ceiling for a model on this rig (live) or on a preset rig, as given or placed automatically.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rigdeck_core::dry_run::{DryRunOutcome, DryRuns};
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::paths::AppPaths;
use rigdeck_core::placement::flags::parse_args;
use rigdeck_core::placement::from_gguf::{load_remote_shape, load_shape};
use rigdeck_core::placement::report::{report, PlanReport};
use rigdeck_core::placement::rig::{preset, presets, Margins};
use rigdeck_core::placement::{KvType, PlacementOptions};
use rigdeck_core::store::Store;
use rigdeck_core::telemetry::gpu::NvmlSource;
use rigdeck_core::telemetry::host::HostCollector;
use rigdeck_core::telemetry::snapshot::RigSample;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Draw a command line you already use: rigdeck plan --rig 4x3090 -- llama-server -m model.gguf -c 65536 -ngl 99 -ot 'blk\\.(1[0-9])\\.ffn_.*_exps=CPU'"
)]
pub struct PlanArgs {
    /// A GGUF model file (any shard of a split model), or an http(s) URL of one (for example a
    /// Hugging Face `resolve` link): only its headers are read, with HTTP Range requests.
    #[arg(required_unless_present = "command")]
    pub model: Option<String>,
    /// After `--`: a llama-server command line (its -m, -c, -ngl, -ts, -sm, -ot, -ctk/-ctv, -np,
    /// -kvu, -fa, -b/-ub …), drawn as llama.cpp would place it, with its problems.
    #[arg(last = true, conflicts_with_all = ["model", "ctx", "kv", "np", "auto"])]
    pub command: Vec<String>,
    /// `live` (this machine's GPUs and free memory now) or a preset: 4x3090, 4xpro6000, 2xgh200, 2x5060ti, cpu-minipc.
    #[arg(long, default_value = "live")]
    pub rig: String,
    /// Context length (-c); 0 = the model's trained context.
    #[arg(long, default_value_t = 4096)]
    pub ctx: u32,
    /// KV cache type for K and V (-ctk/-ctv): f16, q8_0, q4_0, …
    #[arg(long, default_value = "f16")]
    pub kv: String,
    /// Parallel slots (-np).
    #[arg(long, default_value_t = 1)]
    pub np: u32,
    /// Let the automatic placement choose -ngl, -ts and -ot.
    #[arg(long)]
    pub auto: bool,
    /// Also ask llama.cpp itself: run `llama-fit-params` of a registered build (`rigdeck
    /// engines list`) with the plan's flags and print its figures beside ours.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let kv = KvType::parse(&args.kv).ok_or_else(|| {
        anyhow::anyhow!(
            "--kv {}: use one of f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl",
            args.kv
        )
    })?;
    let devices = if args.rig == "live" {
        let sample = RigSample {
            at_ms: rigdeck_core::now_ms(),
            gpus: NvmlSource::from_env().read(&HashMap::new()),
            host: HostCollector::new(PathBuf::from("/sys"), Vec::new()).sample(),
        };
        live_devices(&sample, &Margins::default())
    } else {
        let ids: Vec<String> = presets().into_iter().map(|p| p.id).collect();
        preset(&args.rig)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown rig '{}': use live or one of {}",
                    args.rig,
                    ids.join(", ")
                )
            })?
            .devices(&Margins::default())
    };
    let (model, options, parsed) = if args.command.is_empty() {
        let options = PlacementOptions {
            context: args.ctx,
            cache_type_k: kv,
            cache_type_v: kv,
            parallel: args.np.max(1),
            ..Default::default()
        };
        (args.model.clone().unwrap_or_default(), options, None)
    } else {
        let parsed = parse_args(&args.command)?;
        let model = parsed.model.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "the command has no -m MODEL: add the model path so its tensors can be placed"
            )
        })?;
        (model, parsed.options.clone(), Some(parsed))
    };
    let loaded = load(&model)?;
    let mut report = report(&loaded.shape, &model, &devices, &options, args.auto)?;
    if let Some(parsed) = &parsed {
        // What the reader assumed (defaults llama-server would apply) is part of the answer.
        report.notes.extend(parsed.notes.iter().cloned());
    }
    let dry_run = match args.dry_run {
        true => Some(dry_run(&model, &report)?),
        false => None,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "model": loaded.summary, "report": report, "parsed": parsed, "dry_run": dry_run
            }))?
        );
    } else {
        print!("{}", render(&report));
        if let Some(outcome) = &dry_run {
            print!("{}", render_dry_run(outcome));
        }
    }
    Ok(if report.fits {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// llama.cpp's own figures for the plan, from the builds registered in Rigdeck's database.
fn dry_run(model: &str, report: &PlanReport) -> anyhow::Result<DryRunOutcome> {
    let paths = AppPaths::from_env()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let builds = match Store::open(&paths.database_file()).await {
            Ok(store) => store.engine_builds().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let outcome = DryRuns::default()
            .run(&builds, model, &report.args, &report.plan.devices)
            .await;
        Ok((*outcome).clone())
    })
}

/// Ours beside llama.cpp's, per device, in MiB (llama.cpp prints whole MiB).
fn render_dry_run(outcome: &DryRunOutcome) -> String {
    let mut out = String::from("\nllama.cpp dry run");
    if let Some(build) = &outcome.build {
        let _ = write!(
            out,
            " (llama.cpp {} {})",
            build.version,
            build.backend.as_str()
        );
    }
    out.push('\n');
    if let Some(error) = &outcome.error {
        let _ = writeln!(out, "  {error}");
        return out;
    }
    let mib = |b: u64| format!("{:.0}", b as f64 / (1u64 << 20) as f64);
    let _ = writeln!(
        out,
        "{:<44} {:>17} {:>17} {:>17}",
        "DEVICE", "MODEL ours/llama", "CONTEXT", "COMPUTE"
    );
    for d in &outcome.devices {
        let pair = |ours: u64, theirs: u64| format!("{}/{}", mib(ours), mib(theirs));
        let _ = writeln!(
            out,
            "{:<44} {:>17} {:>17} {:>17}",
            format!("{} ({})", d.device, d.llama_device),
            pair(d.ours.model_bytes, d.llama_cpp.model_bytes),
            pair(d.ours.context_bytes, d.llama_cpp.context_bytes),
            pair(d.ours.compute_bytes, d.llama_cpp.compute_bytes),
        );
    }
    for note in outcome.dry_run.iter().flat_map(|d| &d.notes) {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// A local file, or an http(s) URL whose headers are read with Range requests.
fn load(model: &str) -> anyhow::Result<rigdeck_core::placement::from_gguf::LoadedModel> {
    if model.starts_with("http://") || model.starts_with("https://") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (loaded, requests) = runtime.block_on(load_remote_shape(model))?;
        eprintln!("read the remote headers with {requests} HTTP request(s)");
        return Ok(loaded);
    }
    Ok(load_shape(std::path::Path::new(model))?)
}

fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 30) as f64)
}

/// The table a user reads: one row per device, GiB, with the overflow marked.
pub fn render(r: &PlanReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<44} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  LAYERS / EXPERT LAYERS",
        "DEVICE", "WEIGHTS", "KV", "COMPUTE", "OVERHEAD", "TOTAL", "FREE"
    );
    for d in &r.plan.devices {
        let room = d.spec.capacity_bytes.saturating_sub(d.spec.reserve_bytes);
        let mark = if d.overflow_bytes > 0 {
            format!("  OVER by {} GiB", gib(d.overflow_bytes))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:<44} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {} / {}{mark}",
            d.spec.name,
            gib(d.usage.weights_bytes),
            gib(d.usage.kv_bytes),
            gib(d.usage.compute_bytes),
            gib(d.usage.overhead_bytes),
            gib(d.usage.total_bytes()),
            gib(room),
            d.usage.layers.len(),
            d.usage.expert_layers.len(),
        );
    }
    let _ = writeln!(
        out,
        "(GiB; FREE is capacity minus the reserve; context {} tokens)",
        r.plan.n_ctx
    );
    match &r.command_line {
        Ok(line) => {
            let _ = writeln!(out, "\n{line}");
        }
        Err(why) => {
            let _ = writeln!(out, "\nno command line: {why}");
        }
    }
    match r.ceiling.tokens_per_s {
        Some(tps) => {
            let _ = writeln!(
                out,
                "\nspeed ceiling: {tps:.1} tokens/s decode (an upper bound)"
            );
        }
        None => {
            let _ = writeln!(out, "\nspeed ceiling: unknown");
        }
    }
    for a in &r.ceiling.assumptions {
        let _ = writeln!(out, "  - {a}");
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for p in &r.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    out
}
