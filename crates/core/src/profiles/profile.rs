//! A launch profile: which engine build runs which model with which placement, on which address,
//! with which environment, and the one pure function that turns it into the exact argv.
//!
//! The argv is a vector from start to end (numactl prefix included): it is handed to the
//! supervisor as is and never joined into a shell command line.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::admission::PlannedGpu;
use super::chat_templates;
use super::engine_settings::{self, EngineSettings};
use super::lenders::{self, Lender};
use super::multi_node::{self, MultiNode, Seat};
use super::python_engines;
use super::speculative::{self, Speculative};
use crate::engines::registry::{Availability, EngineBuild};
use crate::engines::{Backend, EngineKind};
use crate::gateway::ServePolicy;
use crate::placement::flags::{shell_quote, to_args, to_args_for, FlagError, Offload};
use crate::placement::PlacementOptions;
use crate::supervisor::RestartPolicy;

/// The address an engine listens on unless the profile says otherwise: loopback only.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// What a profile's displayed command line has in place of the port when the port is picked at
/// each start (port 0): the real one is only known once the engine runs.
pub const PORT_CHOSEN_AT_START: &str = "<chosen at start>";

/// Everything needed to start one engine. Absent JSON fields take the defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchProfile {
    /// Unique; letters, digits, '-', '_' and '.'.
    pub name: String,
    /// The id `GET /api/v1/engines` (or `rigdeck engines list`) shows.
    pub engine_build_id: i64,
    /// The model file (any shard of a split GGUF).
    pub model: PathBuf,
    /// Placement, context, slots, KV types, threads: llama-server flags.
    pub placement: PlacementOptions,
    /// Bind CPU and memory to this NUMA node with `numactl --cpunodebind=N --membind=N`.
    pub numa_node: Option<u32>,
    /// Added to the engine's environment (`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`, …).
    pub env: BTreeMap<String, String>,
    /// Listen address; loopback unless set on purpose.
    pub host: String,
    /// 0 picks a free port at each start.
    pub port: u32,
    /// Passed as `--api-key`; clients then need `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// `--reasoning on|off` (only for builds that have the option).
    pub reasoning: Option<bool>,
    /// llama.cpp / ik_llama.cpp: `--chat-template NAME` (with `--no-jinja`, so the name is
    /// read as a built-in template), one of the templates llama-server knows
    /// ([`chat_templates::CHAT_TEMPLATES`]); for a GGUF that carries none. `None`: the file's
    /// own (or llama-server's ChatML when it has none).
    pub chat_template: Option<String>,
    /// More llama-server arguments, written after Rigdeck's own.
    pub extra_args: Vec<String>,
    pub restart: RestartSetting,
    /// Memory per GPU the planner predicted when the profile was saved (for admission).
    pub planned_memory: Vec<PlannedGpu>,
    /// Started when the daemon starts; all autostart profiles are admitted together, so a set
    /// that cannot coexist on the GPUs is refused as a whole (see `Instances::autostart`).
    pub autostart: bool,
    /// vLLM/SGLang: GPUs to split the model over (`--tensor-parallel-size` / `--tp-size`).
    pub tensor_parallel: Option<u32>,
    /// vLLM/SGLang: the share of each GPU to preallocate (`--gpu-memory-utilization` /
    /// `--mem-fraction-static`), 0–1.
    pub gpu_memory_fraction: Option<f64>,
    /// How the gateway serves it: aliases, start on request, pinned, idle timeout, concurrency.
    pub gateway: ServePolicy,
    /// Speculative decoding: a draft model, MTP heads, n-gram lookup or EAGLE heads.
    pub speculative: Option<Speculative>,
    /// Engine knobs beyond placement (CPU pinning, memory locking; vLLM batching, offload).
    pub engine: EngineSettings,
    /// vLLM/SGLang across boxes: the paired rigs that join this one, and the interfaces used.
    /// Such a profile starts and stops as a gang (see the server's `gang` module).
    pub multi_node: Option<MultiNode>,
    /// llama.cpp across boxes: paired rigs lending devices over RPC through the fleet's channel.
    /// Such a profile starts and stops as a gang (leases first, then this rig's llama-server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lenders: Vec<Lender>,
    /// This member's seat in a gang being started; set for that start only, never stored.
    #[serde(skip)]
    pub seat: Option<Seat>,
}

impl Default for LaunchProfile {
    fn default() -> Self {
        Self {
            name: String::new(),
            engine_build_id: 0,
            model: PathBuf::new(),
            placement: PlacementOptions::default(),
            numa_node: None,
            env: BTreeMap::new(),
            host: DEFAULT_HOST.to_owned(),
            port: 0,
            api_key: None,
            reasoning: None,
            chat_template: None,
            extra_args: Vec::new(),
            restart: RestartSetting::default(),
            planned_memory: Vec::new(),
            autostart: false,
            tensor_parallel: None,
            gpu_memory_fraction: None,
            gateway: ServePolicy::default(),
            speculative: None,
            engine: EngineSettings::default(),
            multi_node: None,
            lenders: Vec::new(),
            seat: None,
        }
    }
}

impl LaunchProfile {
    /// Whether it starts as a gang: across boxes the vLLM way, or with devices lent over RPC.
    pub fn is_gang(&self) -> bool {
        self.multi_node.is_some() || !self.lenders.is_empty()
    }

    /// The engine's environment: what the settings need (`VLLM_MARLIN_USE_ATOMIC_ADD`), then the
    /// profile's own variables, which win.
    pub fn engine_env(&self) -> std::collections::BTreeMap<String, String> {
        let mut env = engine_settings::env(&self.engine);
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
}

/// The restart policy as stored (milliseconds, so it reads well in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum RestartSetting {
    Never,
    OnFailure {
        max_restarts: u32,
        initial_backoff_ms: u64,
        max_backoff_ms: u64,
    },
}

impl Default for RestartSetting {
    /// A crashed engine comes back a few times (1 s, 2 s, 4 s …), then stays down.
    fn default() -> Self {
        RestartSetting::OnFailure {
            max_restarts: 3,
            initial_backoff_ms: 1000,
            max_backoff_ms: 30_000,
        }
    }
}

impl RestartSetting {
    pub fn policy(self) -> RestartPolicy {
        match self {
            RestartSetting::Never => RestartPolicy::Never,
            RestartSetting::OnFailure {
                max_restarts,
                initial_backoff_ms,
                max_backoff_ms,
            } => RestartPolicy::OnFailure {
                max_restarts,
                initial_backoff: Duration::from_millis(initial_backoff_ms),
                max_backoff: Duration::from_millis(max_backoff_ms.max(initial_backoff_ms)),
            },
        }
    }
}

/// Why a profile cannot be saved or launched. Each message names the field and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    #[error("profile name '{name}' is not usable: {reason}; use letters, digits, '-', '_' or '.' (at most 64)")]
    BadName { name: String, reason: &'static str },
    #[error("profile '{profile}' uses engine build {id}, which is not installed: pick one from `rigdeck engines list` (GET /api/v1/engines)")]
    UnknownBuild { profile: String, id: i64 },
    #[error("engine build {id} ('{}') is missing on disk: rebuild it with `rigdeck engines build` or register it again", location.display())]
    BuildMissing { id: i64, location: PathBuf },
    #[error("model file '{}' does not exist: give the full path of the .gguf (GET /api/v1/models lists the library)", path.display())]
    MissingModel { path: PathBuf },
    #[error("environment variable name '{name}' is not valid: use letters, digits and '_', not starting with a digit (e.g. CUDA_VISIBLE_DEVICES)")]
    BadEnvName { name: String },
    #[error("{field} contains {} (U+{:04X}): remove it", control_name(*.found), u32::from(*.found))]
    ControlCharacter { field: String, found: char },
    #[error("port {port} is out of range: use 1–65535, or 0 to pick a free port at each start")]
    PortOutOfRange { port: u32 },
    #[error("host '{host}' is not an IP address: use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's addresses")]
    BadHost { host: String },
    #[error("'{flag}' in the extra arguments is not an option of engine build {id} (its --help does not list it): check the spelling, or `{program} --help`")]
    UnknownFlag {
        flag: String,
        id: i64,
        program: String,
    },
    #[error("'{flag}' in the extra arguments is set by the profile itself: use the profile's {field} field instead")]
    ManagedFlag { flag: String, field: &'static str },
    #[error("the reasoning default needs `--reasoning`, which engine build {id} does not have: update llama.cpp or leave reasoning unset")]
    NoReasoningOption { id: i64 },
    #[error("chat template '{name}' is not one llama-server knows: pick one of {known}, or leave it unset to use the file's own")]
    UnknownChatTemplate { name: String, known: String },
    #[error("NUMA node {node} does not exist: this machine has {nodes} node(s), numbered from 0")]
    NoSuchNumaNode { node: u32, nodes: usize },
    #[error("NUMA binding needs `numactl`, which is not installed: install it (apt install numactl) or remove numa_node from the profile")]
    NumactlMissing,
    #[error(transparent)]
    Flags(#[from] FlagError),
    #[error("{kind} serves a model folder (config.json beside the weights) or a .gguf file; '{}' is neither", path.display())]
    NotServable { path: PathBuf, kind: String },
    #[error(
        "{setting} is a llama.cpp setting; {kind} has no such option: remove it from the profile"
    )]
    LlamaOnly { setting: &'static str, kind: String },
    #[error(
        "gpu_memory_fraction {fraction} is not between 0 and 1 (e.g. 0.9 for 90 % of each GPU)"
    )]
    BadMemoryFraction { fraction: f64 },
    #[error("tensor_parallel must be at least 1 (the number of GPUs to split the model over)")]
    BadTensorParallel,
    #[error("speculative method {method} is not offered by engine build {id} ({kind}; it offers: {offered}): pick one of those, or update the engine")]
    SpeculativeUnsupported {
        method: &'static str,
        id: i64,
        kind: String,
        offered: String,
    },
    #[error("speculative decoding: {reason}")]
    BadSpeculative { reason: String },
    #[error("{setting} is not a setting of {kind}: remove it from the profile")]
    NotForEngine { setting: &'static str, kind: String },
    #[error("engine setting: {reason}")]
    BadEngineSetting { reason: String },
    #[error("{setting} needs `{flag}`, which engine build {id} does not have (its --help does not list it): update the engine or leave {setting} unset")]
    OptionMissing {
        setting: &'static str,
        flag: String,
        id: i64,
    },
    #[error("gateway alias {alias:?} is not usable: give a non-empty name of at most 128 characters, without spaces around it")]
    BadAlias { alias: String },
    #[error("'{name}' already names the gateway model '{owner}': pick another alias (or profile name), or remove it from '{owner}'")]
    GatewayNameTaken { name: String, owner: String },
    #[error("lenders: {reason}")]
    BadLenders { reason: String },
    #[error("multi_node: {reason}")]
    BadMultiNode { reason: String },
    #[error("multi_node on this rig: {0}")]
    Interface(#[from] crate::network_interfaces::InterfaceProblem),
}

/// Checks a profile against the build it names. `numa_nodes` is how many NUMA nodes the machine
/// has (0 when unknown: no check). Returns warnings a user should see but that do not block.
pub fn validate(
    profile: &LaunchProfile,
    build: Option<&EngineBuild>,
    numa_nodes: usize,
) -> Result<Vec<String>, ProfileError> {
    check_text(profile)?;
    let build = build.ok_or_else(|| ProfileError::UnknownBuild {
        profile: profile.name.clone(),
        id: profile.engine_build_id,
    })?;
    check_build(build)?;
    check_chat_template(profile, build)?;
    lenders::validate(&profile.lenders, build.kind, profile.multi_node.is_some())?;
    if let Some(multi) = &profile.multi_node {
        multi_node::validate(multi, build.kind)?;
        crate::network_interfaces::private_address(&multi.interface)?;
    }
    if build.kind.is_python() {
        python_engines::validate(profile, build)?;
    } else if !profile.model.is_file() {
        return Err(ProfileError::MissingModel {
            path: profile.model.clone(),
        });
    }
    engine_settings::validate(&profile.engine, build)?;
    if let Some(spec) = &profile.speculative {
        speculative::validate(spec, build)?;
    }
    if profile.port > u32::from(u16::MAX) {
        return Err(ProfileError::PortOutOfRange { port: profile.port });
    }
    let mut warnings = Vec::new();
    let host: IpAddr = profile.host.parse().map_err(|_| ProfileError::BadHost {
        host: profile.host.clone(),
    })?;
    if !host.is_loopback() {
        warnings.push(format!(
            "the engine listens on {host}, so other machines can reach it{}",
            if profile.api_key.is_some() {
                " (an API key is set)"
            } else {
                ": set an API key, or use 127.0.0.1"
            }
        ));
    }
    if build.kind.is_python() {
        return Ok(warnings);
    }
    if profile.reasoning.is_some() && !build.capabilities.features.reasoning {
        return Err(ProfileError::NoReasoningOption { id: build.id });
    }
    check_extra_args(&profile.extra_args, build)?;
    if let Some(node) = profile.numa_node {
        if numa_nodes > 0 && node as usize >= numa_nodes {
            return Err(ProfileError::NoSuchNumaNode {
                node,
                nodes: numa_nodes,
            });
        }
        if numa_nodes == 1 {
            warnings.push(
                "this machine has one NUMA node: the numactl binding changes nothing".to_owned(),
            );
        }
    }
    // Surfaces a -ot pattern llama.cpp cannot parse now rather than at start.
    to_args(&profile.model.to_string_lossy(), &profile.placement)?;
    Ok(warnings)
}

/// A chat template by name is a llama.cpp setting, and the name one llama-server knows.
fn check_chat_template(profile: &LaunchProfile, build: &EngineBuild) -> Result<(), ProfileError> {
    let Some(name) = &profile.chat_template else {
        return Ok(());
    };
    if build.kind.is_python() {
        return Err(ProfileError::LlamaOnly {
            setting: "the chat template (--chat-template)",
            kind: build.kind.to_string(),
        });
    }
    if !chat_templates::is_known(name) {
        return Err(ProfileError::UnknownChatTemplate {
            name: name.clone(),
            known: chat_templates::CHAT_TEMPLATES.join(", "),
        });
    }
    Ok(())
}

pub(crate) fn check_build(build: &EngineBuild) -> Result<(), ProfileError> {
    if build.status == Availability::Missing {
        return Err(ProfileError::BuildMissing {
            id: build.id,
            location: build.location.clone(),
        });
    }
    Ok(())
}

/// Same rules as instance names: the name becomes a file name.
pub fn check_name(name: &str) -> Result<(), ProfileError> {
    match crate::supervisor::name_problem(name) {
        Some(reason) => Err(ProfileError::BadName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// What every user-given string of a profile may hold, wherever it ends up (argv, environment, an
/// exported script or unit): a usable name, environment variable names every shell and systemd
/// accept, and no control characters anywhere. A line break in a value would become a new
/// command in an exported script or a new directive in a unit (`ExecStartPre=…`); a tab splits
/// a word in a unit and is never part of a legitimate engine argument, so it is refused too.
/// Part of [`validate`], and run again by the exports for profiles stored before these checks.
pub fn check_text(profile: &LaunchProfile) -> Result<(), ProfileError> {
    no_control(&profile.name, || "profile name".to_owned())?;
    check_name(&profile.name)?;
    for (name, value) in &profile.env {
        no_control(name, || format!("environment variable name {name:?}"))?;
        if !valid_env_name(name) {
            return Err(ProfileError::BadEnvName { name: name.clone() });
        }
        no_control(value, || format!("environment value of {name}"))?;
    }
    no_control(&profile.model.to_string_lossy(), || "model path".to_owned())?;
    no_control(&profile.host, || "host".to_owned())?;
    if let Some(key) = &profile.api_key {
        no_control(key, || "API key".to_owned())?;
    }
    if let Some(draft) = profile
        .speculative
        .as_ref()
        .and_then(|s| s.draft_model.as_ref())
    {
        no_control(&draft.to_string_lossy(), || "draft model path".to_owned())?;
    }
    if let Some(mask) = &profile.engine.cpu_mask {
        no_control(mask, || "cpu_mask".to_owned())?;
    }
    if let Some(dtype) = &profile.engine.kv_cache_dtype {
        no_control(dtype, || "kv_cache_dtype".to_owned())?;
    }
    for (i, arg) in profile.extra_args.iter().enumerate() {
        no_control(arg, || format!("extra argument {} ({arg:?})", i + 1))?;
    }
    for (i, o) in profile.placement.overrides.iter().enumerate() {
        no_control(&o.pattern, || format!("tensor override {} pattern", i + 1))?;
    }
    for alias in &profile.gateway.aliases {
        no_control(alias, || format!("gateway alias {alias:?}"))?;
        if alias.trim().is_empty() || alias.trim() != alias || alias.chars().count() > 128 {
            return Err(ProfileError::BadAlias {
                alias: alias.clone(),
            });
        }
    }
    Ok(())
}

/// Refuses a profile whose name or an alias is already another profile's name or alias: the
/// gateway routes by these names, so each must point at one model. `replacing` is the name of
/// the profile being updated (it may keep its own names).
pub fn check_gateway_names(
    profile: &LaunchProfile,
    others: &[LaunchProfile],
    replacing: Option<&str>,
) -> Result<(), ProfileError> {
    let mine = std::iter::once(&profile.name).chain(&profile.gateway.aliases);
    for name in mine {
        let owner = others
            .iter()
            .filter(|o| Some(o.name.as_str()) != replacing && o.name != profile.name)
            .find(|o| &o.name == name || o.gateway.aliases.contains(name));
        if let Some(owner) = owner {
            return Err(ProfileError::GatewayNameTaken {
                name: name.clone(),
                owner: owner.name.clone(),
            });
        }
    }
    if let Some(alias) = profile.gateway.aliases.iter().find(|a| **a == profile.name) {
        return Err(ProfileError::GatewayNameTaken {
            name: alias.clone(),
            owner: profile.name.clone(),
        });
    }
    Ok(())
}

/// Refuses `text` when it holds a control character (`char::is_control`: C0, DEL and C1), with
/// `field()` naming where it was found.
pub(crate) fn no_control(text: &str, field: impl FnOnce() -> String) -> Result<(), ProfileError> {
    match text.chars().find(|c| c.is_control()) {
        Some(found) => Err(ProfileError::ControlCharacter {
            field: field(),
            found,
        }),
        None => Ok(()),
    }
}

/// A control character as a person would name it.
fn control_name(c: char) -> &'static str {
    match c {
        '\n' => "a line break",
        '\r' => "a carriage return",
        '\t' => "a tab",
        '\0' => "a NUL byte",
        '\u{1b}' => "an escape character",
        '\u{7f}' => "a delete character",
        _ => "a control character",
    }
}

/// POSIX portable names: what every shell and systemd accept.
fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Unknown options are refused when the build's `--help` was read (its option list is not
/// empty); values (words not starting with '-', or negative numbers) pass.
fn check_extra_args(args: &[String], build: &EngineBuild) -> Result<(), ProfileError> {
    for arg in args {
        if !arg.starts_with('-') || arg.len() < 2 || arg[1..].parse::<f64>().is_ok() {
            continue;
        }
        let flag = arg.split('=').next().unwrap_or(arg);
        if let Some(field) = managed_field(flag) {
            return Err(ProfileError::ManagedFlag {
                flag: flag.to_owned(),
                field,
            });
        }
        let known = &build.capabilities.options;
        if !known.is_empty() && !known.contains(flag) {
            return Err(ProfileError::UnknownFlag {
                flag: flag.to_owned(),
                id: build.id,
                program: build.location.display().to_string(),
            });
        }
    }
    Ok(())
}

/// Options Rigdeck writes itself, and the profile field for each: the same option in the extra
/// arguments would contradict the profile (the engine takes the last one, and the health check
/// would probe the wrong port).
fn managed_field(flag: &str) -> Option<&'static str> {
    match flag {
        "-m" | "--model" => Some("model"),
        "--host" => Some("host"),
        "--port" => Some("port"),
        "--api-key" => Some("api_key"),
        "--chat-template" => Some("chat_template"),
        "--spec-type"
        | "-md"
        | "--model-draft"
        | "--spec-draft-model"
        | "--spec-draft-n-max"
        | "--draft-max"
        | "--draft"
        | "--spec-draft-n-min"
        | "--draft-min"
        | "-mtp"
        | "--multi-token-prediction" => Some("speculative"),
        "--cpu-mask"
        | "-C"
        | "--cpu-strict"
        | "--mlock"
        | "--no-mmap"
        | "--load-mode"
        | "-lm"
        | "-fmoe"
        | "--fused-moe"
        | "-rtr"
        | "--run-time-repack"
        | "-mla"
        | "--mla-use"
        | "-amb"
        | "--attention-max-batch" => Some("engine"),
        _ => None,
    }
}

/// The placement flags as `build` reads them. ik_llama.cpp parses `-ngl` as a number (no
/// `all`) and has no `-kvu`/`-no-kvu`: its slots always split the context, which is what the
/// planner counts for the KV cache either way (the total is `-c`). Older llama.cpp trees without
/// the unified switch get the same treatment, judged by their `--help`.
fn in_build_dialect(args: Vec<String>, build: &EngineBuild) -> Vec<String> {
    let ik = build.kind == EngineKind::IkLlamaCpp;
    let caps = &build.capabilities;
    let no_unified_switch = ik || (!caps.options.is_empty() && !caps.accepts("-kvu"));
    let mut out = Vec::with_capacity(args.len());
    let mut previous: Option<&str> = None;
    for arg in &args {
        match arg.as_str() {
            "-kvu" | "-no-kvu" if no_unified_switch => continue,
            // Every layer: more than any model has.
            "all" if ik && previous == Some("-ngl") => out.push(ALL_LAYERS.to_owned()),
            _ => out.push(arg.clone()),
        }
        previous = Some(arg.as_str());
    }
    out
}

/// A CPU build has no GPU to place anything on: it gets no `-ngl`, `-ts`, `-sm`, `-mg` or
/// `-ot`, which it would only warn about.
fn offload_of(build: &EngineBuild) -> Offload {
    match build.backend {
        Backend::Cpu => Offload::CpuOnly,
        Backend::Cuda | Backend::Vulkan | Backend::Rocm => Offload::Gpus,
    }
}

/// What `-ngl` gets for "all layers" where the build wants a number.
const ALL_LAYERS: &str = "999";

/// The exact argv (program first) that starts `profile` on `build` listening on `port`. With a
/// NUMA node the argv starts with `numactl` (its absolute path, `numactl`), still no shell.
pub fn argv(
    profile: &LaunchProfile,
    build: &EngineBuild,
    port: u16,
    numactl: Option<&Path>,
) -> Result<Vec<String>, ProfileError> {
    assemble(profile, build, &port.to_string(), numactl)
}

/// The environment variable an engine reads its API key from, where it reads one: llama.cpp's
/// `LLAMA_API_KEY` (its `--api-key` option's variable) and vLLM's `VLLM_API_KEY`. ik_llama.cpp
/// and SGLang read it only from `--api-key`.
pub fn api_key_variable(kind: EngineKind) -> Option<&'static str> {
    match kind {
        EngineKind::LlamaCpp => Some("LLAMA_API_KEY"),
        EngineKind::Vllm => Some("VLLM_API_KEY"),
        EngineKind::IkLlamaCpp | EngineKind::Sglang => None,
    }
}

/// Takes `--api-key KEY` out of an argv for an engine that reads the key from its environment,
/// so no `ps` shows it: the argv without it, and the variable to set. Other engines' argv is
/// returned as it is.
pub fn key_into_environment(
    argv: Vec<String>,
    kind: EngineKind,
) -> (Vec<String>, Option<(&'static str, String)>) {
    let Some(variable) = api_key_variable(kind) else {
        return (argv, None);
    };
    let mut out = Vec::with_capacity(argv.len());
    let mut key = None;
    let mut words = argv.into_iter();
    while let Some(word) = words.next() {
        if word == "--api-key" {
            key = words.next().map(|value| (variable, value));
        } else {
            out.push(word);
        }
    }
    (out, key)
}

/// An argv with the value after every `--api-key` replaced, for what is shown or stored.
pub fn key_masked(argv: &[String]) -> Vec<String> {
    let mut out = argv.to_vec();
    for i in 1..out.len() {
        if out[i - 1] == "--api-key" {
            out[i] = "********".to_owned();
        }
    }
    out
}

/// The argv a profile view shows before anything runs: as [`argv`], with the profile's port, or
/// [`PORT_CHOSEN_AT_START`] when each start picks one (port 0), so the view never shows a port
/// the engine will not use. A running instance shows the argv it was started with instead.
pub fn display_argv(
    profile: &LaunchProfile,
    build: &EngineBuild,
) -> Result<Vec<String>, ProfileError> {
    let port = match profile.port {
        0 => PORT_CHOSEN_AT_START.to_owned(),
        port => port.to_string(),
    };
    assemble(profile, build, &port, None)
}

/// An argv as one line for people, quoted for a POSIX shell. The port placeholder stays bare:
/// it reads as a placeholder, and a pasted line fails at once (`<` is a redirection) instead of
/// starting an engine on a made-up port.
pub fn display_command_line(argv: &[String]) -> String {
    argv.iter()
        .enumerate()
        .map(|(i, word)| {
            let placeholder = word == PORT_CHOSEN_AT_START && i > 0 && argv[i - 1] == "--port";
            if placeholder {
                word.clone()
            } else {
                shell_quote(word)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `--chat-template NAME`, and `--no-jinja` where the build has it: with Jinja on (llama-server's
/// default) the name would be read as a template's text and the model would see only the word.
fn chat_template_args(profile: &LaunchProfile, build: &EngineBuild) -> Vec<String> {
    let Some(name) = &profile.chat_template else {
        return Vec::new();
    };
    let mut args = vec!["--chat-template".to_owned(), name.clone()];
    if build.capabilities.options.contains("--no-jinja") {
        args.push("--no-jinja".to_owned());
    }
    args
}

/// The argv with `port` written as given (a number, or the display placeholder).
fn assemble(
    profile: &LaunchProfile,
    build: &EngineBuild,
    port: &str,
    numactl: Option<&Path>,
) -> Result<Vec<String>, ProfileError> {
    if let Some(argv) = python_engines::argv(profile, build, port)? {
        return Ok(argv);
    }
    let mut argv = Vec::new();
    if let Some(node) = profile.numa_node {
        let numactl = numactl.ok_or(ProfileError::NumactlMissing)?;
        argv.push(numactl.display().to_string());
        argv.push(format!("--cpunodebind={node}"));
        argv.push(format!("--membind={node}"));
    }
    argv.push(build.location.display().to_string());
    argv.extend(in_build_dialect(
        to_args_for(
            &profile.model.to_string_lossy(),
            &profile.placement,
            offload_of(build),
        )?,
        build,
    ));
    argv.extend(["--host".to_owned(), profile.host.clone()]);
    argv.extend(["--port".to_owned(), port.to_owned()]);
    if let Some(key) = &profile.api_key {
        argv.extend(["--api-key".to_owned(), key.clone()]);
    }
    if let Some(on) = profile.reasoning {
        if build.capabilities.features.reasoning {
            argv.push("--reasoning".to_owned());
            argv.push(if on { "on" } else { "off" }.to_owned());
        }
    }
    argv.extend(chat_template_args(profile, build));
    argv.extend(engine_settings::llama_args(&profile.engine, build));
    if let Some(spec) = &profile.speculative {
        argv.extend(speculative::args(spec, build)?);
    }
    argv.extend(profile.extra_args.iter().cloned());
    Ok(argv)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engines::capabilities::Capabilities;
    use crate::engines::registry::BuildOrigin;
    use crate::engines::{Backend, EngineKind};
    use crate::placement::{DeviceId, TensorOverride};

    pub(crate) fn build(location: &str, options: &[&str]) -> EngineBuild {
        let mut capabilities = Capabilities {
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            ..Capabilities::default()
        };
        capabilities.features.reasoning = options.contains(&"--reasoning");
        EngineBuild {
            id: 7,
            kind: EngineKind::LlamaCpp,
            version: "b1".into(),
            backend: Backend::Cuda,
            cuda_architectures: Some("86".into()),
            location: PathBuf::from(location),
            capabilities,
            source: BuildOrigin::Built,
            created_at_ms: 0,
            status: Availability::Ready,
        }
    }

    pub(crate) fn profile(model: &Path) -> LaunchProfile {
        LaunchProfile {
            name: "qwen".into(),
            engine_build_id: 7,
            model: model.to_owned(),
            ..LaunchProfile::default()
        }
    }

    #[test]
    fn argv_has_the_placement_the_address_and_the_extras_in_order() {
        let b = build("/opt/llama/llama-server", &["--reasoning", "--metrics"]);
        let mut p = profile(Path::new("/models/my model.gguf"));
        p.api_key = Some("s3cret".into());
        p.reasoning = Some(false);
        p.extra_args = vec!["--metrics".into()];
        let argv = argv(&p, &b, 8081, None).unwrap();
        assert_eq!(argv[0], "/opt/llama/llama-server");
        assert_eq!(argv[1..3], ["-m", "/models/my model.gguf"]);
        let tail = argv.iter().rev().take(9).rev().cloned().collect::<Vec<_>>();
        assert_eq!(
            tail,
            [
                "--host",
                "127.0.0.1",
                "--port",
                "8081",
                "--api-key",
                "s3cret",
                "--reasoning",
                "off",
                "--metrics"
            ]
        );
        assert!(argv.windows(2).any(|w| w == ["-c", "4096"]));
    }

    #[test]
    fn the_key_leaves_the_command_line_for_engines_that_read_it_from_their_environment() {
        let mut p = profile(Path::new("/m.gguf"));
        p.api_key = Some("s3cret".into());
        let llama = build("/bin/llama-server", &[]);
        let (argv_llama, key) =
            key_into_environment(argv(&p, &llama, 9000, None).unwrap(), llama.kind);
        assert!(!argv_llama.iter().any(|w| w == "s3cret" || w == "--api-key"));
        assert_eq!(key, Some(("LLAMA_API_KEY", "s3cret".to_owned())));
        let mut ik = build("/ik/llama-server", &[]);
        ik.kind = EngineKind::IkLlamaCpp;
        let (argv_ik, key) = key_into_environment(argv(&p, &ik, 9000, None).unwrap(), ik.kind);
        assert!(argv_ik.windows(2).any(|w| w == ["--api-key", "s3cret"]));
        assert_eq!(key, None);
        let shown = key_masked(&argv_ik);
        assert!(shown.windows(2).any(|w| w == ["--api-key", "********"]));
    }

    #[test]
    fn ik_llama_gets_a_layer_count_and_no_unified_kv_switch() {
        let mut ik = build("/ik/llama-server", &["--metrics"]);
        ik.kind = EngineKind::IkLlamaCpp;
        let argv = argv(&profile(Path::new("/m.gguf")), &ik, 9000, None).unwrap();
        assert!(argv.windows(2).any(|w| w == ["-ngl", "999"]), "{argv:?}");
        assert!(
            !argv
                .iter()
                .any(|a| a == "-kvu" || a == "-no-kvu" || a == "all"),
            "{argv:?}"
        );
        let upstream = build("/llama/llama-server", &["-kvu", "-ngl"]);
        let argv = super::argv(&profile(Path::new("/m.gguf")), &upstream, 9000, None).unwrap();
        assert!(argv.windows(2).any(|w| w == ["-ngl", "all"]) && argv.contains(&"-kvu".to_owned()));
    }

    #[test]
    fn numa_binding_prefixes_numactl_and_reasoning_needs_the_option() {
        let b = build("/opt/llama/llama-server", &[]);
        let mut p = profile(Path::new("/m.gguf"));
        p.numa_node = Some(1);
        p.reasoning = Some(true);
        let argv = argv(&p, &b, 9000, Some(Path::new("/usr/bin/numactl"))).unwrap();
        assert_eq!(
            argv[..4],
            [
                "/usr/bin/numactl",
                "--cpunodebind=1",
                "--membind=1",
                "/opt/llama/llama-server"
            ]
        );
        assert!(!argv.contains(&"--reasoning".to_owned()));
        assert_eq!(
            super::argv(&p, &b, 9000, None),
            Err(ProfileError::NumactlMissing)
        );
    }

    #[test]
    fn a_chat_template_by_name_is_written_for_llama_cpp_and_ik_llama_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let mut p = profile(&model);
        p.chat_template = Some("gemma".into());
        for kind in [EngineKind::LlamaCpp, EngineKind::IkLlamaCpp] {
            let mut b = build("/opt/llama/llama-server", &[]);
            b.kind = kind;
            let argv = super::argv(&p, &b, 9000, None).unwrap();
            let at = argv.iter().position(|a| a == "--chat-template");
            assert_eq!(
                at.map(|i| argv[i + 1].as_str()),
                Some("gemma"),
                "{kind}: {argv:?}"
            );
            assert_eq!(validate(&p, Some(&b), 1), Ok(vec![]));
        }
        let b = build(
            "/opt/llama/llama-server",
            &["--chat-template", "--no-jinja"],
        );
        let argv = super::argv(&p, &b, 9000, None).unwrap();
        assert!(
            argv.windows(3)
                .any(|w| w == ["--chat-template", "gemma", "--no-jinja"]),
            "with Jinja off the name is a built-in template: {argv:?}"
        );
        let mut bad = p.clone();
        bad.chat_template = Some("Gemma-3".into());
        let err = validate(&bad, Some(&b), 1).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "chat template 'Gemma-3' is not one llama-server knows: pick one of chatml, llama2"
            ),
            "{err}"
        );
        let mut doubled = profile(&model);
        doubled.extra_args = vec!["--chat-template".into(), "chatml".into()];
        let err = validate(&doubled, Some(&b), 1).unwrap_err().to_string();
        assert!(
            err.contains("use the profile's chat_template field"),
            "{err}"
        );
        let none = super::argv(&profile(&model), &b, 9000, None).unwrap();
        assert!(!none.contains(&"--chat-template".to_owned()), "{none:?}");
    }

    #[test]
    fn validation_names_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let b = build("/opt/llama/llama-server", &["--metrics", "-fa"]);
        let ok = profile(&model);
        assert_eq!(validate(&ok, Some(&b), 1), Ok(vec![]));

        let err = |p: &LaunchProfile| validate(p, Some(&b), 2).unwrap_err().to_string();
        assert!(validate(&ok, None, 1)
            .unwrap_err()
            .to_string()
            .contains("engine build 7, which is not installed"));
        let mut p = ok.clone();
        p.model = dir.path().join("gone.gguf");
        assert!(err(&p).contains("gone.gguf' does not exist"));
        let mut p = ok.clone();
        p.env.insert("1BAD".into(), "x".into());
        assert!(err(&p).contains("'1BAD' is not valid"));
        let mut p = ok.clone();
        p.port = 70_000;
        assert!(err(&p).contains("port 70000 is out of range"));
        let mut p = ok.clone();
        p.extra_args = vec!["--metrics".into(), "--no-such".into(), "3".into()];
        assert!(err(&p).contains("'--no-such' in the extra arguments is not an option"));
        let mut p = ok.clone();
        p.extra_args = vec!["--port=9".into()];
        assert!(err(&p).contains("use the profile's port field"));
        let mut p = ok.clone();
        p.reasoning = Some(true);
        assert!(err(&p).contains("needs `--reasoning`"));
        let mut p = ok.clone();
        p.numa_node = Some(2);
        assert!(err(&p).contains("NUMA node 2 does not exist"));
        let mut p = ok.clone();
        p.name = "../x".into();
        assert!(err(&p).contains("'../x' is not usable"));
        let mut p = ok.clone();
        p.host = "0.0.0.0".into();
        let warnings = validate(&p, Some(&b), 1).unwrap();
        assert!(
            warnings[0].contains("other machines can reach it"),
            "{warnings:?}"
        );
        p.host = "example.com".into();
        assert!(err(&p).contains("not an IP address"));
    }

    #[test]
    fn a_control_character_in_any_string_of_a_profile_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let b = build("/opt/llama/llama-server", &["--metrics"]);
        let ok = profile(&model);
        let refused = |change: &dyn Fn(&mut LaunchProfile)| {
            let mut p = ok.clone();
            change(&mut p);
            validate(&p, Some(&b), 1).unwrap_err().to_string()
        };
        let evil = "0\nExecStartPre=/bin/sh -c evil";
        assert_eq!(
            refused(&|p| {
                p.env.insert("CUDA_VISIBLE_DEVICES".into(), evil.into());
            }),
            "environment value of CUDA_VISIBLE_DEVICES contains a line break (U+000A): remove it"
        );
        assert_eq!(
            refused(&|p| {
                p.env.insert("BAD\tNAME".into(), "1".into());
            }),
            r#"environment variable name "BAD\tNAME" contains a tab (U+0009): remove it"#
        );
        assert_eq!(
            refused(&|p| p.extra_args = vec!["--metrics".into(), format!("x{evil}")]),
            r#"extra argument 2 ("x0\nExecStartPre=/bin/sh -c evil") contains a line break (U+000A): remove it"#
        );
        assert!(refused(&|p| p.name = "a\rb".into())
            .starts_with("profile name contains a carriage return (U+000D)"));
        assert!(refused(&|p| p.model = dir.path().join("m\u{1b}.gguf"))
            .starts_with("model path contains an escape character (U+001B)"));
        assert!(refused(&|p| p.host = "127.0.0.1\0".into()).starts_with("host contains a NUL byte"));
        assert!(refused(&|p| p.api_key = Some("k\u{7f}".into()))
            .starts_with("API key contains a delete character (U+007F)"));
        assert!(refused(&|p| p.placement.overrides = vec![TensorOverride {
            pattern: "blk\\.1\\.\n".into(),
            device: DeviceId::Cpu,
        }])
        .starts_with("tensor override 1 pattern contains a line break"));
        // Values a shell or systemd would read specially are fine: the exports quote them.
        let mut p = ok.clone();
        p.env
            .insert("ODD".into(), "$HOME %h 'q' \"d\" \\ ; modèle 🦙".into());
        assert_eq!(validate(&p, Some(&b), 1), Ok(vec![]));
    }

    #[test]
    fn a_port_picked_at_start_is_shown_as_such_and_a_fixed_or_real_one_as_a_number() {
        let b = build("/opt/llama/llama-server", &[]);
        let mut p = profile(Path::new("/models/my model.gguf"));
        p.extra_args = vec!["--metrics".into()];
        let shown = display_command_line(&display_argv(&p, &b).unwrap());
        assert!(
            shown.contains(" --port <chosen at start> --metrics"),
            "{shown}"
        );
        assert!(shown.contains("-m '/models/my model.gguf'"), "{shown}");
        assert!(!shown.contains("8080"), "{shown}");
        p.port = 9001;
        let shown = display_command_line(&display_argv(&p, &b).unwrap());
        assert!(shown.contains(" --port 9001 --metrics"), "{shown}");
        // A running instance shows the argv it was started with: the port it really uses.
        p.port = 0;
        let running = display_command_line(&argv(&p, &b, 38211, None).unwrap());
        assert!(running.contains(" --port 38211 --metrics"), "{running}");
        // The placeholder is bare only as the value of --port; anywhere else it is quoted.
        let words = ["/x".to_owned(), PORT_CHOSEN_AT_START.to_owned()];
        assert_eq!(display_command_line(&words), "/x '<chosen at start>'");
    }

    #[test]
    fn profile_json_takes_defaults_and_refuses_typos() {
        let p: LaunchProfile =
            serde_json::from_str(r#"{"name":"a","engine_build_id":1,"model":"/m.gguf"}"#).unwrap();
        assert_eq!(p.host, "127.0.0.1");
        assert_eq!(p.port, 0);
        assert!(matches!(p.restart, RestartSetting::OnFailure { .. }));
        assert!(serde_json::from_str::<LaunchProfile>(r#"{"name":"a","prot":1}"#).is_err());
        let never: LaunchProfile =
            serde_json::from_str(r#"{"restart":{"policy":"never"}}"#).unwrap();
        assert_eq!(never.restart.policy(), RestartPolicy::Never);
    }
}
