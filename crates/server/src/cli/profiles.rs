//! `rigdeck profiles`: list, show, export and create launch profiles through the running
//! daemon (it checks them against the engine build and plans their memory on the live rig).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use rigdeck_core::gateway::ServePolicy;
use rigdeck_core::launch::{LaunchProfile, RestartSetting};
use rigdeck_core::placement::{KvType, PlacementOptions};
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
    /// Extra engine arguments (after `--`).
    #[arg(last = true)]
    pub extra: Vec<String>,
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

    #[derive(Parser)]
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
