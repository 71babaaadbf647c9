//! The `rigdeck` command line: one subcommand per module.

pub mod bench;
pub mod chat;
pub mod desktop;
pub mod engines;
pub mod fleet;
pub mod gpus;
pub mod hub;
pub mod keys;
pub mod models;
pub mod plan;
pub mod profiles;
mod progress_line;
pub mod quality;
pub mod run;
pub mod serve;
pub mod service;
mod table;

use clap::{Parser, Subcommand};

/// Rigdeck: run large language models on your own GPUs — monitor the rig, plan, launch, serve.
///
/// With no command, opens the desktop app (or, without a display, starts the daemon).
/// Files: token and settings in $XDG_CONFIG_HOME/rigdeck (RIGDECK_CONFIG_DIR), database in
/// $XDG_DATA_HOME/rigdeck (RIGDECK_DATA_DIR).
#[derive(Debug, Parser)]
#[command(name = "rigdeck", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open the desktop window (the default). It runs the server in-process on loopback,
    /// or connects to another rig's daemon with --remote.
    Desktop(desktop::DesktopArgs),
    /// Run the headless daemon: web UI, JSON API and live events (for boxes without a screen,
    /// or to manage the rig from a laptop's browser).
    Serve(serve::ServeArgs),
    /// Print the GPUs with their memory, load, temperature, power and PCIe links.
    Gpus(gpus::GpusArgs),
    /// Inference engines: list, build llama.cpp from source (bundled or yours), install vLLM or
    /// SGLang into a managed environment, register a binary or Python environment, remove.
    Engines(engines::EnginesArgs),
    /// List the models in the model folders (GGUF, split or not, and safetensors folders).
    Models(models::ModelsArgs),
    /// Search the Hugging Face hub (or HF_ENDPOINT's mirror) for models.
    Search(hub::SearchArgs),
    /// Download a model (REPO or REPO:QUANT) into the shared Hugging Face cache: several
    /// connections, verified against the hub's SHA-256, resumable (Ctrl-C pauses).
    Pull(hub::PullArgs),
    /// A hub repository's quantizations and sizes; the models in the cache (list, rm); the
    /// Hugging Face token for gated models.
    Hub(hub::HubArgs),
    /// Re-hash a downloaded model's files against the hub's hashes, and say whether the hub
    /// has a newer version (exit code 1 when a file is wrong).
    Verify(hub::VerifyArgs),
    /// Plan a GGUF model on this rig or a preset: memory per device, llama-server flags, speed ceiling.
    Plan(plan::PlanArgs),
    /// Launch profiles (through the running daemon): list, show, export as a shell script or
    /// systemd unit, create from flags or from the planner's solution, delete.
    Profiles(profiles::ProfilesArgs),
    /// Start an engine from a launch profile on the running daemon and wait until it is ready.
    Run(run::RunArgs),
    /// List the daemon's engine instances: state, pid, port, uptime, VRAM planned / measured.
    Ps(run::PsArgs),
    /// Stop an engine instance.
    Stop(run::StopArgs),
    /// Print an instance's log lines (searchable); --follow keeps printing.
    Logs(run::LogsArgs),
    /// The gateway's API keys: list, create (prints the secret once), revoke.
    Keys(keys::KeysArgs),
    /// Chat with a model in the terminal (stored like the Chat page's conversations).
    Chat(chat::ChatArgs),
    /// Benchmark an instance, a profile, the gateway or any OpenAI-compatible URL: workload
    /// shapes, context depth, concurrency or request-rate sweeps, one cold and N warm runs.
    Bench(Box<bench::BenchArgs>),
    /// Quality as KL divergence: record a reference's logits over a corpus, measure a profile
    /// against it, list and delete references.
    Quality(quality::QualityArgs),
    /// Run the daemon under systemd (user or system service): install, uninstall, status, unit.
    Service(service::ServiceArgs),
    /// Pair daemons into a fleet over pinned TLS: invite (a one-time join code, on the rig),
    /// join CODE (on the desk), list, hello, remove.
    Fleet(fleet::FleetArgs),
}

/// Logs to stderr; `RUST_LOG` overrides the level (e.g. `RUST_LOG=debug`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
