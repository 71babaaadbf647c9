//! `rigdeck profiles`: list, show, export and create launch profiles through the running
//! daemon (it checks them against the engine build and plans their memory on the live rig).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use rigdeck_core::gateway::ServePolicy;
use rigdeck_core::launch::{LaunchProfile, RestartSetting};
use rigdeck_core::placement::{KvType, PlacementOptions};
use rigdeck_core::profiles::engine_settings::EngineSettings;
use rigdeck_core::profiles::speculative::{SpecMethod, Speculative};
use serde_json::{json, Value};

use super::run::{client, encode};

#[derive(Debug, clap::Args)]
pub struct ProfilesArgs {
    #[command(subcommand)]
    pub command: ProfilesCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ProfilesCommand {
    /// List the launch profiles.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one profile as JSON, with its exact command line and planned memory.
    Show { name: String },
    /// Print a profile as a shell script or a systemd unit.
    Export {
        name: String,
        #[arg(long, default_value = "shell", value_parser = ["shell", "systemd"])]
        format: String,
    },
    /// Create a profile from flags; arguments after `--` go to the engine as they are.
    Create(Box<CreateArgs>),
    /// Delete a profile (a running instance keeps running).
    Delete { name: String },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    pub name: String,
    /// Engine build id (`rigdeck engines list`).
    #[arg(long)]
    pub engine: i64,
    /// The model: a .gguf file, or for vLLM/SGLang a model folder (config.json + weights).
    #[arg(long)]
    pub model: PathBuf,
    /// Context size (-c).
    #[arg(long)]
    pub ctx: Option<u32>,
    /// Parallel slots (-np).
    #[arg(long)]
    pub np: Option<u32>,
    /// Layers on GPUs (-ngl); default all.
    #[arg(long)]
    pub ngl: Option<u32>,
    /// KV cache type for K (-ctk), e.g. q8_0.
    #[arg(long, value_parser = parse_kv)]
    pub ctk: Option<KvType>,
    /// KV cache type for V (-ctv).
    #[arg(long, value_parser = parse_kv)]
    pub ctv: Option<KvType>,
    /// Every MoE expert tensor in CPU RAM (-cmoe); the rest of the layers stay on the GPUs.
    #[arg(long, conflicts_with = "n_cpu_moe")]
    pub cpu_moe: bool,
    /// The MoE expert tensors of the first N layers in CPU RAM (-ncmoe N).
    #[arg(long, value_name = "N")]
    pub n_cpu_moe: Option<u32>,
    /// CPU threads (-t).
    #[arg(long)]
    pub threads: Option<u32>,
    /// vLLM/SGLang: GPUs to split the model over (--tensor-parallel-size / --tp-size).
    #[arg(long, value_name = "N")]
    pub tensor_parallel: Option<u32>,
    /// vLLM/SGLang: share of each GPU to preallocate, 0–1 (--gpu-memory-utilization /
    /// --mem-fraction-static); planned as 0.9 when unset.
    #[arg(long, value_name = "F")]
    pub gpu_memory_fraction: Option<f64>,
    /// Listen address (default 127.0.0.1; anything else exposes the engine).
    #[arg(long)]
    pub host: Option<String>,
    /// Port (default 0: a free one at each start).
    #[arg(long)]
    pub port: Option<u32>,
    #[arg(long)]
    pub api_key: Option<String>,
    /// Reasoning default: on or off (builds with --reasoning only).
    #[arg(long, value_parser = ["on", "off"])]
    pub reasoning: Option<String>,
    /// Environment variable for the engine, KEY=VALUE; repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Bind to this NUMA node with numactl.
    #[arg(long)]
    pub numa: Option<u32>,
    /// Never restart a crashed engine (default: on failure, up to 3 times).
    #[arg(long)]
    pub no_restart: bool,
    /// Let the planner's solver choose the placement on the live rig.
    #[arg(long)]
    pub from_plan_auto: bool,
    /// Start this profile when the daemon starts (with the other autostart profiles, only
    /// when their planned VRAM fits together).
    #[arg(long)]
    pub autostart: bool,
    /// Another name the gateway answers to for this model; repeatable.
    #[arg(long = "alias", value_name = "NAME")]
    pub aliases: Vec<String>,
    /// Start it when a gateway request names it (under the VRAM admission check).
    #[arg(long)]
    pub on_demand: bool,
    /// Never stop it to make room for another model.
    #[arg(long)]
    pub pinned: bool,
    /// Stop it after this many seconds without a gateway request.
    #[arg(long, value_name = "SECONDS")]
    pub idle_ttl: Option<u64>,
    /// Gateway requests at once; more are answered 429 with Retry-After.
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<u32>,
    /// llama.cpp: the chat template by name (`--chat-template NAME`), for a GGUF that carries
    /// none (llama-server would use ChatML): gemma, llama3, chatml, mistral-v7, …
    #[arg(long, value_name = "NAME")]
    pub chat_template: Option<String>,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
    #[command(flatten)]
    pub knobs: EngineKnobArgs,
    /// Extra engine arguments (after `--`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// Speculative decoding; the daemon checks it against what the engine build supports.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Speculative decoding")]
pub struct SpeculativeArgs {
    /// How tokens are drafted: draft_model (a smaller model of the same family), mtp (the
    /// model's own multi-token-prediction heads), ngram (continuations of text already seen),
    /// eagle or eagle3 (EAGLE heads).
    #[arg(long, value_name = "METHOD", value_parser = parse_spec_method)]
    pub speculative: Option<SpecMethod>,
    /// Tokens drafted per step (default 3; 2–4 is typical).
    #[arg(long, value_name = "N", requires = "speculative")]
    pub draft_tokens: Option<u32>,
    /// The draft or EAGLE checkpoint (draft_model, eagle, eagle3).
    #[arg(long, value_name = "PATH", requires = "speculative")]
    pub draft_model: Option<PathBuf>,
    /// llama.cpp: the shortest draft worth verifying (draft n-min).
    #[arg(long, value_name = "N", requires = "speculative")]
    pub draft_min_tokens: Option<u32>,
    /// llama.cpp: a drafted token below this probability ends the draft, 0–1 (draft p-min).
    #[arg(long, value_name = "P", requires = "speculative")]
    pub draft_p_min: Option<f64>,
    /// n-gram lookup: how many of the latest tokens must match earlier text before its
    /// continuation is drafted.
    #[arg(long, value_name = "N", requires = "speculative")]
    pub ngram_match: Option<u32>,
}

/// Engine knobs beyond placement; one the build's engine lacks is refused by the daemon.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Engine settings")]
pub struct EngineKnobArgs {
    /// llama.cpp: the CPUs the threads may run on, as a hex mask (ff = CPUs 0–7).
    #[arg(long, value_name = "HEX")]
    pub cpu_mask: Option<String>,
    /// llama.cpp: one thread per CPU of the mask, in order (--cpu-strict 1).
    #[arg(long)]
    pub cpu_strict: bool,
    /// llama.cpp: keep the weights in RAM, never swapped (--mlock).
    #[arg(long)]
    pub mlock: bool,
    /// llama.cpp: read the weights into memory instead of mapping the file (--no-mmap).
    #[arg(long)]
    pub no_mmap: bool,
    /// ik_llama.cpp: repack the weights at load for faster CPU matrix products (-rtr).
    #[arg(long)]
    pub run_time_repack: bool,
    /// ik_llama.cpp: how latent attention is computed, 1–3 (-mla).
    #[arg(long, value_name = "MODE")]
    pub mla: Option<u8>,
    /// ik_llama.cpp: the attention compute buffer capped at this many MiB (-amb).
    #[arg(long, value_name = "MIB")]
    pub attn_max_batch: Option<u32>,
    /// vLLM/SGLang: GiB of weights kept in CPU RAM per GPU (--cpu-offload-gb).
    #[arg(long, value_name = "GIB")]
    pub cpu_offload_gb: Option<f64>,
    /// vLLM/SGLang: the KV cache's element type (--kv-cache-dtype): auto, fp8, fp8_e4m3, …
    #[arg(long, value_name = "TYPE")]
    pub kv_cache_dtype: Option<String>,
    /// vLLM/SGLang: sequences decoded together (--max-num-seqs / --max-running-requests).
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u32>,
    /// vLLM/SGLang: tokens per step (--max-num-batched-tokens / --chunked-prefill-size).
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM/SGLang: tokens per KV cache block (--block-size / --page-size).
    #[arg(long, value_name = "N")]
    pub block_size: Option<u32>,
    /// vLLM: VLLM_MARLIN_USE_ATOMIC_ADD=1, faster Marlin GPTQ/AWQ kernels on small batches.
    #[arg(long)]
    pub marlin_atomic_add: bool,
}

/// The speculative methods by their API names.
const SPEC_METHODS: [SpecMethod; 5] = [
    SpecMethod::DraftModel,
    SpecMethod::Mtp,
    SpecMethod::Ngram,
    SpecMethod::Eagle,
    SpecMethod::Eagle3,
];

fn parse_spec_method(text: &str) -> Result<SpecMethod, String> {
    SPEC_METHODS
        .into_iter()
        .find(|m| m.as_str() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = SPEC_METHODS.iter().map(|m| m.as_str()).collect();
            format!("unknown method '{text}': use one of {}", names.join(", "))
        })
}

impl SpeculativeArgs {
    /// The setting, when a method is given (clap refuses the other flags without one); the
    /// flags left out take the API's defaults, as a profile's JSON without them would.
    fn setting(&self) -> anyhow::Result<Option<Speculative>> {
        let Some(method) = self.speculative else {
            return Ok(None);
        };
        let mut given = json!({ "method": method });
        let draft_model = self
            .draft_model
            .as_deref()
            .map(std::path::absolute)
            .transpose()?;
        let fields = [
            ("tokens", self.draft_tokens.map(Value::from)),
            ("draft_model", draft_model.map(|p| json!(p))),
            ("min_tokens", self.draft_min_tokens.map(Value::from)),
            ("p_min", self.draft_p_min.map(Value::from)),
            ("ngram_match", self.ngram_match.map(Value::from)),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                given[name] = value;
            }
        }
        Ok(Some(serde_json::from_value(given)?))
    }
}

impl EngineKnobArgs {
    fn settings(&self) -> EngineSettings {
        EngineSettings {
            cpu_mask: self.cpu_mask.clone(),
            cpu_strict: self.cpu_strict,
            mlock: self.mlock,
            no_mmap: self.no_mmap,
            run_time_repack: self.run_time_repack,
            mla: self.mla,
            attn_max_batch_mib: self.attn_max_batch,
            cpu_offload_gb: self.cpu_offload_gb,
            kv_cache_dtype: self.kv_cache_dtype.clone(),
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            block_size: self.block_size,
            marlin_atomic_add: self.marlin_atomic_add,
        }
    }
}

fn parse_kv(text: &str) -> Result<KvType, String> {
    KvType::parse(text).ok_or_else(|| {
        let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
        format!("unknown KV type '{text}': use one of {}", names.join(", "))
    })
}

/// The profile the flags describe.
pub fn profile_from(args: &CreateArgs) -> anyhow::Result<LaunchProfile> {
    let mut profile = LaunchProfile {
        name: args.name.clone(),
        engine_build_id: args.engine,
        model: std::path::absolute(&args.model)?,
        ..LaunchProfile::default()
    };
    profile.gateway = ServePolicy {
        aliases: args.aliases.clone(),
        on_demand: args.on_demand,
        pinned: args.pinned,
        idle_ttl_s: args.idle_ttl,
        max_concurrent: args.max_concurrent,
    };
    let p = &mut profile.placement;
    if let Some(ctx) = args.ctx {
        p.context = ctx;
    }
    if let Some(np) = args.np {
        p.parallel = np;
    }
    p.n_gpu_layers = args.ngl.or(p.n_gpu_layers);
    p.cache_type_k = args.ctk.unwrap_or(p.cache_type_k);
    p.cache_type_v = args.ctv.unwrap_or(p.cache_type_v);
    p.threads = args.threads.or(p.threads);
    if args.cpu_moe {
        p.overrides = vec![PlacementOptions::cpu_moe_override()];
    } else if let Some(n) = args.n_cpu_moe {
        p.overrides = PlacementOptions::n_cpu_moe_overrides(n);
    }
    if let Some(host) = &args.host {
        profile.host = host.clone();
    }
    profile.port = args.port.unwrap_or(0);
    profile.autostart = args.autostart;
    profile.tensor_parallel = args.tensor_parallel;
    profile.gpu_memory_fraction = args.gpu_memory_fraction;
    profile.api_key = args.api_key.clone();
    profile.reasoning = args.reasoning.as_deref().map(|r| r == "on");
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--env {pair}: write it as KEY=VALUE"))?;
        env.insert(key.to_owned(), value.to_owned());
    }
    profile.env = env;
    profile.numa_node = args.numa;
    if args.no_restart {
        profile.restart = RestartSetting::Never;
    }
    profile.chat_template = args.chat_template.clone();
    profile.speculative = args.speculative.setting()?;
    profile.engine = args.knobs.settings();
    profile.extra_args = args.extra.clone();
    Ok(profile)
}

pub fn run(args: ProfilesArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let client = client()?;
        match args.command {
            ProfilesCommand::List { json } => {
                let all = client.get("/api/v1/profiles").await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&all)?);
                } else {
                    print!("{}", render_list(&all));
                }
            }
            ProfilesCommand::Show { name } => {
                let shown = client
                    .get(&format!("/api/v1/profiles/{}", encode(&name)))
                    .await?;
                println!("{}", serde_json::to_string_pretty(&shown)?);
            }
            ProfilesCommand::Export { name, format } => {
                let path = format!("/api/v1/profiles/{}/export?format={format}", encode(&name));
                print!("{}", client.get_text(&path).await?);
            }
            ProfilesCommand::Create(create) => {
                let profile = profile_from(&create)?;
                let path = if create.from_plan_auto {
                    "/api/v1/profiles?auto=true"
                } else {
                    "/api/v1/profiles"
                };
                let saved = client.post(path, &json!(profile)).await?;
                for warning in saved["warnings"].as_array().into_iter().flatten() {
                    eprintln!("warning: {}", warning.as_str().unwrap_or(""));
                }
                println!("created profile '{}'", create.name);
                if let Some(line) = saved["command_line"].as_str() {
                    println!("{line}");
                }
            }
            ProfilesCommand::Delete { name } => {
                client
                    .delete(&format!("/api/v1/profiles/{}", encode(&name)))
                    .await?;
                println!("deleted profile '{name}'");
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn render_list(all: &Value) -> String {
    let rows = all.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return "No launch profiles. Create one with `rigdeck profiles create NAME --engine ID --model PATH`.\n".to_owned();
    }
    let mut out = format!(
        "{:<24} {:>6} {:>6}  {}\n",
        "NAME", "ENGINE", "PORT", "MODEL"
    );
    for p in rows {
        out.push_str(&format!(
            "{:<24} {:>6} {:>6}  {}\n",
            p["name"].as_str().unwrap_or("?"),
            p["engine_build_id"],
            match p["port"].as_u64() {
                Some(0) | None => "auto".to_owned(),
                Some(port) => port.to_string(),
            },
            p["model"].as_str().unwrap_or("?"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Create {
        #[command(flatten)]
        args: CreateArgs,
    }

    fn parse(extra: &[&str]) -> LaunchProfile {
        let argv = ["create", "boot", "--engine", "1", "--model", "/m.gguf"];
        let args = Create::parse_from(argv.iter().chain(extra)).args;
        profile_from(&args).unwrap()
    }

    #[test]
    fn autostart_is_off_unless_asked_for() {
        assert!(!parse(&[]).autostart);
        let profile = parse(&["--autostart"]);
        assert!(profile.autostart);
        assert_eq!(
            serde_json::to_value(&profile).unwrap()["autostart"],
            json!(true)
        );
    }

    #[test]
    fn speculative_flags_become_the_setting_with_the_apis_defaults() {
        assert_eq!(parse(&[]).speculative, None);
        let ngram = parse(&["--speculative", "ngram", "--ngram-match", "8"]);
        let spec = ngram.speculative.expect("a speculative setting");
        assert_eq!(spec.method, SpecMethod::Ngram);
        assert_eq!(spec.ngram_match, Some(8));
        let unset: Speculative = serde_json::from_value(json!({"method": "ngram"})).unwrap();
        assert_eq!(spec.tokens, unset.tokens, "the API's default draft length");
        let draft = parse(&[
            "--speculative",
            "draft_model",
            "--draft-model",
            "small.gguf",
            "--draft-tokens",
            "5",
            "--draft-min-tokens",
            "2",
            "--draft-p-min",
            "0.6",
        ])
        .speculative
        .unwrap();
        assert_eq!(draft.tokens, 5);
        assert_eq!(draft.min_tokens, Some(2));
        assert_eq!(draft.p_min, Some(0.6));
        let path = draft.draft_model.unwrap();
        assert!(
            path.is_absolute() && path.ends_with("small.gguf"),
            "{path:?}"
        );
    }

    #[test]
    fn draft_flags_need_a_method_and_the_method_is_named() {
        let argv = ["create", "x", "--engine", "1", "--model", "/m"];
        let without = Create::try_parse_from(argv.iter().chain(&["--draft-tokens", "4"]));
        assert!(without.unwrap_err().to_string().contains("--speculative"));
        let unknown = Create::try_parse_from(argv.iter().chain(&["--speculative", "medusa"]));
        let message = unknown.unwrap_err().to_string();
        assert!(
            message.contains("unknown method 'medusa': use one of draft_model, mtp, ngram"),
            "{message}"
        );
    }

    #[test]
    fn engine_knobs_and_the_chat_template_reach_the_profile() {
        assert_eq!(parse(&[]).engine, EngineSettings::default());
        assert_eq!(parse(&[]).chat_template, None);
        let profile = parse(&[
            "--cpu-mask",
            "ff",
            "--cpu-strict",
            "--mlock",
            "--no-mmap",
            "--run-time-repack",
            "--mla",
            "3",
            "--attn-max-batch",
            "512",
            "--cpu-offload-gb",
            "24",
            "--kv-cache-dtype",
            "fp8",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "4096",
            "--block-size",
            "32",
            "--marlin-atomic-add",
            "--chat-template",
            "gemma",
        ]);
        assert_eq!(profile.chat_template.as_deref(), Some("gemma"));
        assert_eq!(
            profile.engine,
            EngineSettings {
                cpu_mask: Some("ff".into()),
                cpu_strict: true,
                mlock: true,
                no_mmap: true,
                run_time_repack: true,
                mla: Some(3),
                attn_max_batch_mib: Some(512),
                cpu_offload_gb: Some(24.0),
                kv_cache_dtype: Some("fp8".into()),
                max_num_seqs: Some(8),
                max_num_batched_tokens: Some(4096),
                block_size: Some(32),
                marlin_atomic_add: true,
            }
        );
    }

    #[test]
    fn cpu_moe_flags_become_expert_overrides_to_the_cpu() {
        assert!(parse(&[]).placement.overrides.is_empty());
        let all = parse(&["--cpu-moe"]).placement.overrides;
        assert_eq!(all, vec![PlacementOptions::cpu_moe_override()]);
        let first_two = parse(&["--n-cpu-moe", "2"]).placement.overrides;
        assert_eq!(first_two, PlacementOptions::n_cpu_moe_overrides(2));
        assert_eq!(first_two.len(), 2);
        let both = [
            "create",
            "x",
            "--engine",
            "1",
            "--model",
            "/m",
            "--cpu-moe",
            "--n-cpu-moe",
            "1",
        ];
        assert!(Create::try_parse_from(both).is_err());
    }
}
