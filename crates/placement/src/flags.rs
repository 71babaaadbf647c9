//! Plans as llama-server arguments and back: the exact flags for a placement, and a pasted
//! llama-server command line read into placement options (so it can be drawn and checked).

use serde::{Deserialize, Serialize};

use super::options::{DeviceId, KvType, PlacementOptions, RpcServer, SplitMode, TensorOverride};

/// Where the arguments are for: a llama-server that can offload to GPUs, or one that runs on
/// the CPU alone (a rig without GPUs, or a CPU build), which has no use for `-ngl`, `-ts`, `-sm`,
/// `-mg` or `-ot` (everything is in CPU RAM already) and warns about each of the first four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    Gpus,
    CpuOnly,
}

impl Offload {
    /// `CpuOnly` when no device is a GPU, here or lent by another box.
    pub fn for_devices<'a>(devices: impl IntoIterator<Item = &'a DeviceId>) -> Offload {
        if devices.into_iter().any(|d| d.is_offload()) {
            Offload::Gpus
        } else {
            Offload::CpuOnly
        }
    }
}

/// The arguments (after the program name) that make llama-server load `model` this way.
/// Every choice is explicit, so the command means the same on any llama.cpp version.
pub fn to_args(model: &str, options: &PlacementOptions) -> Result<Vec<String>, FlagError> {
    to_args_for(model, options, Offload::Gpus)
}

/// As [`to_args`], for a llama-server that offloads to GPUs or runs on the CPU alone: without
/// GPUs the placement flags are left out, so the engine's log carries no warning they caused.
pub fn to_args_for(
    model: &str,
    options: &PlacementOptions,
    offload: Offload,
) -> Result<Vec<String>, FlagError> {
    let mut args: Vec<String> = vec!["-m".into(), model.into()];
    // A CPU build with the RPC backend still offloads, to the devices other boxes lend.
    if offload == Offload::Gpus || !options.rpc_servers.is_empty() {
        push_gpu_placement(&mut args, options)?;
    }
    push_memory_and_batch(&mut args, options);
    Ok(args)
}

/// `--rpc` and `-dev` first (llama.cpp resolves the names in `-dev` and `-ot` as it reads them,
/// so the lent devices must be registered before), then `-ngl`, `-ts`, `-sm`, `-mg` and `-ot`:
/// which device holds what.
fn push_gpu_placement(args: &mut Vec<String>, options: &PlacementOptions) -> Result<(), FlagError> {
    let mut push = |flag: &str, value: String| {
        args.push(flag.into());
        args.push(value);
    };
    if !options.rpc_servers.is_empty() {
        for server in &options.rpc_servers {
            if server.endpoint.is_empty() || server.endpoint.contains(',') {
                return Err(FlagError::BadEndpoint(server.endpoint.clone()));
            }
        }
        let endpoints: Vec<&str> = options
            .rpc_servers
            .iter()
            .map(|s| s.endpoint.as_str())
            .collect();
        push("--rpc", endpoints.join(","));
    }
    for &device in &options.devices {
        lent_check(options, device)?;
    }
    if !options.devices.is_empty() {
        let names: Vec<String> = options.devices.iter().map(|d| d.device_name()).collect();
        push("-dev", names.join(","));
    }
    push(
        "-ngl",
        options
            .n_gpu_layers
            .map_or_else(|| "all".to_owned(), |n| n.to_string()),
    );
    if !options.tensor_split.is_empty() {
        push(
            "-ts",
            options
                .tensor_split
                .iter()
                .map(|v| trim_float(*v))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    push("-sm", split_mode_name(options.split_mode).into());
    if options.main_gpu != 0 {
        push("-mg", options.main_gpu.to_string());
    }
    for o in &options.overrides {
        if o.pattern.contains(',') || o.pattern.contains('=') {
            return Err(FlagError::PatternNotExpressible(o.pattern.clone()));
        }
        lent_check(options, o.device)?;
        let buffer = options
            .buffer_name(o.device)
            .unwrap_or_else(|| o.device.buffer_name());
        push("-ot", format!("{}={buffer}", o.pattern));
    }
    Ok(())
}

/// A lent device must be lent by one of the `--rpc` servers.
fn lent_check(options: &PlacementOptions, device: DeviceId) -> Result<(), FlagError> {
    match device {
        DeviceId::Rpc(i) if options.rpc_server_of(i).is_none() => Err(FlagError::NotLent {
            device: device.device_name(),
            lent: options.lent_devices(),
        }),
        _ => Ok(()),
    }
}

/// Context, KV cache, slots, batches and threads: the same with or without GPUs.
fn push_memory_and_batch(args: &mut Vec<String>, options: &PlacementOptions) {
    let mut push = |flag: &str, value: String| {
        args.push(flag.into());
        args.push(value);
    };
    push("-c", options.context.to_string());
    push("-ctk", options.cache_type_k.name().into());
    push("-ctv", options.cache_type_v.name().into());
    push(
        "-fa",
        if options.flash_attention { "on" } else { "off" }.into(),
    );
    push("-np", options.parallel.max(1).to_string());
    push("-b", options.batch.to_string());
    push("-ub", options.ubatch.to_string());
    if let Some(threads) = options.threads {
        push("-t", threads.to_string());
    }
    args.push(
        if options.kv_unified {
            "-kvu"
        } else {
            "-no-kvu"
        }
        .into(),
    );
    if !options.kv_offload {
        args.push("-nkvo".into());
    }
    if !options.op_offload {
        args.push("--no-op-offload".into());
    }
}

/// One line a user can paste into a shell: quoted where the shell would otherwise interpret.
pub fn command_line(program: &str, args: &[String]) -> String {
    std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One word as a POSIX shell reads it back: bare when it holds only safe characters, else in
/// single quotes (a `'` written as `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,=+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn split_mode_name(mode: SplitMode) -> &'static str {
    match mode {
        SplitMode::None => "none",
        SplitMode::Layer => "layer",
        SplitMode::Row => "row",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("the command line cannot be split into words: {0}")]
    Unparsable(String),
    #[error("{flag} needs a value")]
    MissingValue { flag: String },
    #[error("{flag} {value}: {reason}")]
    BadValue {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("-ot pattern '{0}' contains ',' or '=', which llama.cpp's -ot parser splits on: rewrite it (e.g. (1|2) instead of {{1,2}})")]
    PatternNotExpressible(String),
    #[error("--rpc server '{0}' is not a host:port llama.cpp can read: give one host:port without commas, e.g. 192.168.1.20:50052")]
    BadEndpoint(String),
    #[error("{device} is a lent device, but the --rpc servers lend {lent}: add the server that lends it")]
    NotLent { device: String, lent: u32 },
}

/// A pasted llama-server command, read into the planner's terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedCommand {
    pub program: Option<String>,
    pub model: Option<String>,
    pub options: PlacementOptions,
    /// Flags that do not affect placement or memory, kept so nothing is silently lost.
    pub other_args: Vec<String>,
    /// Things the reader had to assume, in plain words.
    pub notes: Vec<String>,
}

/// Flags of llama-server that take a value but do not change placement: skipped with their value.
const VALUED_FLAGS_WE_KEEP: &[&str] = &[
    "--host",
    "--port",
    "-a",
    "--alias",
    "--api-key",
    "--chat-template",
    "--chat-template-file",
    "-md",
    "--model-draft",
    "--temp",
    "--top-k",
    "--top-p",
    "--min-p",
    "--repeat-penalty",
    "-n",
    "--n-predict",
    "--reasoning-budget",
    "--reasoning-format",
    "--seed",
    "-s",
    "--log-file",
    "--slot-save-path",
    "--mmproj",
    "-ngld",
    "--gpu-layers-draft",
    "--draft-max",
    "--draft-min",
    "--numa",
    "--prio",
    "-tb",
    "--threads-batch",
    "--cache-reuse",
    "--ctx-size-draft",
    "--hf-repo",
    "-hf",
    "--hf-file",
    "-hff",
    "--jinja-template",
    "--rope-scaling",
    "--rope-freq-base",
    "--override-kv",
];

/// Reads a llama-server command line as a user would paste it (quotes, `\` line continuations).
pub fn parse_command(text: &str) -> Result<ParsedCommand, FlagError> {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let words = shell_words::split(&joined).map_err(|e| FlagError::Unparsable(e.to_string()))?;
    parse_args(&words)
}

pub fn parse_args(words: &[String]) -> Result<ParsedCommand, FlagError> {
    let mut parsed = ParsedCommand {
        program: None,
        model: None,
        options: PlacementOptions {
            context: 0,
            parallel: 4,
            kv_unified: true,
            ..Default::default()
        },
        other_args: Vec::new(),
        notes: Vec::new(),
    };
    // -ot entries naming a lent buffer type: resolved once every server's count is known.
    let mut lent_buffers: Vec<(usize, String)> = Vec::new();
    let mut parallel_given = false;
    let mut unified_given = false;
    let mut i = 0;
    if let Some(first) = words.first() {
        if !first.starts_with('-') {
            parsed.program = Some(first.clone());
            i = 1;
        }
    }
    while i < words.len() {
        let (flag, inline) = match words[i].split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (words[i].clone(), None),
        };
        let takes_value = takes_value(&flag);
        let value = if takes_value {
            match inline {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    Some(
                        words
                            .get(i)
                            .cloned()
                            .ok_or_else(|| FlagError::MissingValue { flag: flag.clone() })?,
                    )
                }
            }
        } else {
            None
        };
        i += 1;
        let o = &mut parsed.options;
        match (flag.as_str(), value) {
            ("-m" | "--model", Some(v)) => parsed.model = Some(v),
            ("--rpc", Some(v)) => o.rpc_servers.extend(parse_rpc(&flag, &v)?),
            ("-dev" | "--device", Some(v)) => o.devices = parse_devices(&flag, &v, o)?,
            ("-ngl" | "--gpu-layers" | "--n-gpu-layers", Some(v)) => {
                o.n_gpu_layers = parse_ngl(&flag, &v, &mut parsed.notes)?
            }
            ("-ts" | "--tensor-split", Some(v)) => o.tensor_split = parse_split(&flag, &v)?,
            ("-sm" | "--split-mode", Some(v)) => o.split_mode = parse_split_mode(&flag, &v)?,
            ("-mg" | "--main-gpu", Some(v)) => o.main_gpu = number(&flag, &v)?,
            ("-ot" | "--override-tensor", Some(v)) => {
                let parsed_overrides = parse_overrides(&flag, &v, o, &mut lent_buffers)?;
                o.overrides.extend(parsed_overrides)
            }
            ("-ncmoe" | "--n-cpu-moe", Some(v)) => o
                .overrides
                .extend(PlacementOptions::n_cpu_moe_overrides(number(&flag, &v)?)),
            ("-cmoe" | "--cpu-moe", None) => o.overrides.push(PlacementOptions::cpu_moe_override()),
            ("-c" | "--ctx-size", Some(v)) => o.context = number(&flag, &v)?,
            ("-np" | "--parallel", Some(v)) => {
                o.parallel = number(&flag, &v)?;
                parallel_given = true;
            }
            ("-kvu" | "--kv-unified", None) => {
                o.kv_unified = true;
                unified_given = true;
            }
            ("-no-kvu" | "--no-kv-unified", None) => {
                o.kv_unified = false;
                unified_given = true;
            }
            ("-ctk" | "--cache-type-k", Some(v)) => o.cache_type_k = kv_type(&flag, &v)?,
            ("-ctv" | "--cache-type-v", Some(v)) => o.cache_type_v = kv_type(&flag, &v)?,
            ("-fa" | "--flash-attn", Some(v)) => {
                o.flash_attention = !matches!(v.as_str(), "off" | "0" | "false" | "no")
            }
            ("-b" | "--batch-size", Some(v)) => o.batch = number(&flag, &v)?,
            ("-ub" | "--ubatch-size", Some(v)) => o.ubatch = number(&flag, &v)?,
            ("-t" | "--threads", Some(v)) => o.threads = Some(number(&flag, &v)?),
            ("-nkvo" | "--no-kv-offload", None) => o.kv_offload = false,
            ("--no-op-offload", None) => o.op_offload = false,
            ("--op-offload", None) => o.op_offload = true,
            (_, value) => {
                parsed.other_args.push(flag.clone());
                parsed.other_args.extend(value);
            }
        }
    }
    // llama-server: an explicit -np leaves the KV cache per slot unless -kvu says otherwise.
    if parallel_given && !unified_given {
        parsed.options.kv_unified = false;
    }
    if !parallel_given {
        parsed.notes.push(
            "no -np: llama-server's default of 4 slots sharing one KV cache is assumed".into(),
        );
    }
    if parsed.options.context == 0 {
        parsed.notes.push(
            "no -c: the model's trained context is assumed (llama-server may shrink it with --fit)"
                .into(),
        );
    }
    count_lent_devices_named(&mut parsed.options, &lent_buffers);
    if !parsed.options.rpc_servers.is_empty() {
        parsed.notes.push(format!(
            "--rpc: each server is counted with the devices the command names on it (at least one), numbered RPC0… in order; llama.cpp puts them before this box's GPUs unless -dev says otherwise ({} lent)",
            parsed.options.lent_devices()
        ));
    }
    Ok(parsed)
}

fn takes_value(flag: &str) -> bool {
    const VALUED: &[&str] = &[
        "-m",
        "--model",
        "--rpc",
        "-dev",
        "--device",
        "-ngl",
        "--gpu-layers",
        "--n-gpu-layers",
        "-ts",
        "--tensor-split",
        "-sm",
        "--split-mode",
        "-mg",
        "--main-gpu",
        "-ot",
        "--override-tensor",
        "-ncmoe",
        "--n-cpu-moe",
        "-c",
        "--ctx-size",
        "-np",
        "--parallel",
        "-ctk",
        "--cache-type-k",
        "-ctv",
        "--cache-type-v",
        "-fa",
        "--flash-attn",
        "-b",
        "--batch-size",
        "-ub",
        "--ubatch-size",
        "-t",
        "--threads",
    ];
    VALUED.contains(&flag) || VALUED_FLAGS_WE_KEEP.contains(&flag)
}

fn bad(flag: &str, value: &str, reason: impl Into<String>) -> FlagError {
    FlagError::BadValue {
        flag: flag.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn number(flag: &str, value: &str) -> Result<u32, FlagError> {
    value
        .trim()
        .parse()
        .map_err(|_| bad(flag, value, "expected a whole number"))
}

fn parse_ngl(flag: &str, value: &str, notes: &mut Vec<String>) -> Result<Option<u32>, FlagError> {
    match value {
        "all" => Ok(None),
        "auto" | "-1" => {
            notes.push(
                "-ngl auto: llama.cpp's --fit decides; drawn with every layer on the GPUs".into(),
            );
            Ok(None)
        }
        _ => number(flag, value).map(Some),
    }
}

/// `-ts` proportions: `3,1` or `3/1`.
pub fn parse_split(flag: &str, value: &str) -> Result<Vec<f64>, FlagError> {
    value
        .split([',', '/'])
        .map(|part| {
            part.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(flag, value, "expected non-negative numbers like 3,1"))
        })
        .collect()
}

fn parse_split_mode(flag: &str, value: &str) -> Result<SplitMode, FlagError> {
    match value {
        "none" => Ok(SplitMode::None),
        "layer" => Ok(SplitMode::Layer),
        "row" => Ok(SplitMode::Row),
        _ => Err(bad(flag, value, "expected none, layer or row")),
    }
}

fn kv_type(flag: &str, value: &str) -> Result<KvType, FlagError> {
    KvType::parse(value).ok_or_else(|| {
        bad(
            flag,
            value,
            "expected one of f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl",
        )
    })
}

/// `--rpc host:port,host:port`: each server lending one device until a name says more.
fn parse_rpc(flag: &str, value: &str) -> Result<Vec<RpcServer>, FlagError> {
    value
        .split(',')
        .map(|endpoint| {
            let endpoint = endpoint.trim();
            match endpoint.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    Ok(RpcServer {
                        endpoint: endpoint.to_owned(),
                        devices: 1,
                    })
                }
                _ => Err(bad(
                    flag,
                    value,
                    format!("'{endpoint}' is not host:port, e.g. 192.168.1.20:50052"),
                )),
            }
        })
        .collect()
}

/// A server lends as many devices as llama.cpp finds there, which a command line does not say:
/// `-dev` naming more `RPC…` than the servers are known to lend counts the rest on the last one.
/// The `-ot` entries naming lent buffer types count first (a device index on a named server);
/// then the `-ot` entries get their `RPC…` numbers.
fn count_lent_devices_named(options: &mut PlacementOptions, lent_buffers: &[(usize, String)]) {
    for (_, name) in lent_buffers {
        if let Some((local, endpoint)) = split_lent_buffer(name) {
            if let Some(server) = options
                .rpc_servers
                .iter_mut()
                .find(|s| s.endpoint == endpoint)
            {
                server.devices = server.devices.max(local.saturating_add(1));
            }
        }
    }
    let named = options
        .devices
        .iter()
        .filter_map(|d| match d {
            DeviceId::Rpc(i) => Some(i.saturating_add(1)),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let missing = named.saturating_sub(options.lent_devices());
    if let Some(last) = options.rpc_servers.last_mut() {
        last.devices = last.devices.saturating_add(missing);
    }
    for (index, name) in lent_buffers {
        let device = options.lent_device_of_buffer(name);
        if let (Some(o), Some(device)) = (options.overrides.get_mut(*index), device) {
            o.device = device;
        }
    }
}

/// `RPC1[host:port]` → (1, `host:port`).
fn split_lent_buffer(name: &str) -> Option<(u32, &str)> {
    let (local, endpoint) = name
        .strip_prefix("RPC")?
        .strip_suffix(']')?
        .split_once('[')?;
    Some((local.parse().ok()?, endpoint))
}

/// `-dev CUDA0,RPC0`: the offload devices in order (`none`: no offload at all).
fn parse_devices(
    flag: &str,
    value: &str,
    options: &mut PlacementOptions,
) -> Result<Vec<DeviceId>, FlagError> {
    if value.trim() == "none" {
        options.n_gpu_layers = Some(0);
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|name| {
            let device = buffer_device(name.trim())
                .filter(|d| d.is_offload())
                .ok_or_else(|| {
                    bad(
                        flag,
                        value,
                        format!("unknown device '{name}': use CUDA0, CUDA1, … or RPC0, RPC1, … (llama-server --list-devices shows them)"),
                    )
                })?;
            if device.is_lent() && options.rpc_servers.is_empty() {
                return Err(bad(
                    flag,
                    value,
                    format!("{name} is a lent device, but no --rpc server comes before -dev: add --rpc host:port first"),
                ));
            }
            Ok(device)
        })
        .collect()
}

/// A buffer type `RPC{k}[host:port]` of a server already named by `--rpc`, as llama.cpp
/// requires; its `RPC…` number waits until every server's count is known (a placeholder now).
fn lent_buffer_device(name: &str, options: &PlacementOptions) -> Option<DeviceId> {
    let (_, endpoint) = split_lent_buffer(name)?;
    options
        .rpc_servers
        .iter()
        .any(|s| s.endpoint == endpoint)
        .then_some(DeviceId::Rpc(0))
}

/// `pattern=CUDA0,pattern2=CPU`: llama.cpp splits on ',' then on the first '='.
fn parse_overrides(
    flag: &str,
    value: &str,
    options: &PlacementOptions,
    lent_buffers: &mut Vec<(usize, String)>,
) -> Result<Vec<TensorOverride>, FlagError> {
    value
        .split(',')
        .enumerate()
        .map(|(i, entry)| {
            let (pattern, buffer) = entry.split_once('=').ok_or_else(|| {
                bad(
                    flag,
                    entry,
                    "expected <tensor pattern>=<buffer type>, e.g. exps=CPU",
                )
            })?;
            let device = buffer_device(buffer)
                .filter(|d| !d.is_lent())
                .or_else(|| {
                    let lent = lent_buffer_device(buffer, options)?;
                    lent_buffers.push((options.overrides.len() + i, buffer.to_owned()));
                    Some(lent)
                })
                .ok_or_else(|| {
                    bad(
                        flag,
                        entry,
                        format!("unknown buffer type '{buffer}': use CUDA0, CUDA1, …, CPU, or RPC0[host:port] of a server named by --rpc before it"),
                    )
                })?;
            regex::Regex::new(pattern).map_err(|e| {
                bad(
                    flag,
                    entry,
                    format!("the pattern is not a valid regular expression: {e}"),
                )
            })?;
            Ok(TensorOverride {
                pattern: pattern.to_owned(),
                device,
            })
        })
        .collect()
}

fn buffer_device(name: &str) -> Option<DeviceId> {
    if name.eq_ignore_ascii_case("CPU") {
        return Some(DeviceId::Cpu);
    }
    if let Some(index) = name.strip_prefix("RPC").and_then(|n| n.parse().ok()) {
        return Some(DeviceId::Rpc(index));
    }
    ["CUDA", "Vulkan", "ROCm", "SYCL"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix)?.parse().ok().map(DeviceId::Gpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the script in seed 002: a per-card -ot block with the CPU catch-all last.
    const SEED_SCRIPT: &str = r#"./llama-server \
  -m /models/GLM-5.2-UD-IQ2_M-00001-of-00006.gguf \
  -c 131072 -ctk q8_0 -ctv q8_0 -fa on \
  -ngl 99 -ts 1,1,1,1 \
  -ot "blk\.(3|4|5|6|7)\.ffn_.*_exps=CUDA0" \
  -ot "blk\.(8|9|10|11|12)\.ffn_.*_exps=CUDA1" \
  -ot "exps=CPU" \
  -t 12 --host 127.0.0.1 --port 8080 --jinja"#;

    #[test]
    fn a_command_with_fa_off_and_a_quantized_v_cache_is_read_as_written() {
        // llama.cpp's default (-fa auto) runs flash attention; with -fa off it refuses a quantized
        // V cache, which the plan says (compute::flash_attention_note) — the reader keeps it off.
        let auto = parse_command("llama-server -m m.gguf -ctk q8_0 -ctv q8_0").unwrap();
        assert!(auto.options.flash_attention);
        let off = parse_command("llama-server -m m.gguf -ctv q8_0 -fa off").unwrap();
        assert!(
            !off.options.flash_attention,
            "-fa off is what the command says"
        );
        assert!(!off.notes.iter().any(|n| n.contains("turns -fa on")));
    }

    #[test]
    fn reads_a_pasted_script_with_continuations_and_quotes() {
        let parsed = parse_command(SEED_SCRIPT).unwrap();
        assert_eq!(parsed.program.as_deref(), Some("./llama-server"));
        assert_eq!(
            parsed.model.as_deref(),
            Some("/models/GLM-5.2-UD-IQ2_M-00001-of-00006.gguf")
        );
        let o = &parsed.options;
        assert_eq!(
            (o.context, o.n_gpu_layers, o.threads),
            (131_072, Some(99), Some(12))
        );
        assert_eq!(o.tensor_split, vec![1.0; 4]);
        assert_eq!(o.cache_type_k, KvType::Q8_0);
        assert_eq!(o.overrides.len(), 3);
        assert_eq!(o.overrides[1].device, DeviceId::Gpu(1));
        assert_eq!(
            o.overrides[2],
            TensorOverride {
                pattern: "exps".into(),
                device: DeviceId::Cpu
            }
        );
        assert_eq!(
            parsed.other_args,
            vec!["--host", "127.0.0.1", "--port", "8080", "--jinja"]
        );
        assert!(parsed.notes.iter().any(|n| n.contains("4 slots")));
    }

    #[test]
    fn op_offload_off_is_read_and_written_back() {
        let off = parse_command("llama-server -m m.gguf -ngl 3 --no-op-offload").unwrap();
        assert!(!off.options.op_offload);
        assert!(off.other_args.is_empty(), "{:?}", off.other_args);
        let args = to_args("m.gguf", &off.options).unwrap();
        assert!(args.contains(&"--no-op-offload".to_owned()), "{args:?}");
        let on = parse_command("llama-server -m m.gguf --no-op-offload --op-offload").unwrap();
        assert!(on.options.op_offload);
        let args = to_args("m.gguf", &on.options).unwrap();
        assert!(!args.iter().any(|a| a.contains("op-offload")), "{args:?}");
    }

    #[test]
    fn cpu_moe_flags_expand_in_order() {
        let parsed =
            parse_command(r"llama-server -m x.gguf -ot 'blk\.0\.ffn_up_exps=CUDA0' -ncmoe 2 -cmoe")
                .unwrap();
        let patterns: Vec<_> = parsed
            .options
            .overrides
            .iter()
            .map(|o| o.pattern.as_str())
            .collect();
        assert_eq!(
            patterns,
            vec![
                r"blk\.0\.ffn_up_exps",
                r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps",
                r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps",
                r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
            ]
        );
    }

    #[test]
    fn bad_flags_name_the_flag_and_the_fix() {
        let err = parse_command("llama-server -ot 'blk\\.(3=CUDA0'")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("-ot blk\\.(3=CUDA0") && err.contains("not a valid regular expression"),
            "{err}"
        );
        let err = parse_command("llama-server -ot exps=GPU0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown buffer type 'GPU0'"), "{err}");
        let err = parse_command("llama-server -ctk q3_k")
            .unwrap_err()
            .to_string();
        assert!(err.contains("-ctk q3_k") && err.contains("q8_0"), "{err}");
        assert!(parse_command("llama-server -c")
            .unwrap_err()
            .to_string()
            .contains("-c needs a value"));
        assert!(parse_command("llama-server -ts 1,x").is_err());
        assert!(parse_command("llama-server 'unclosed").is_err());
    }

    #[test]
    fn an_explicit_slot_count_means_per_slot_kv_unless_unified() {
        assert!(!parse_command("s -np 2").unwrap().options.kv_unified);
        assert!(parse_command("s -np 2 -kvu").unwrap().options.kv_unified);
    }

    #[test]
    fn written_flags_read_back_to_the_same_options() {
        let mut options = PlacementOptions {
            n_gpu_layers: Some(60),
            tensor_split: vec![1.0, 0.75, 0.9, 1.0],
            context: 170_000,
            parallel: 4,
            threads: Some(32),
            ..Default::default()
        };
        options.overrides = vec![
            TensorOverride {
                pattern: r"blk\.(3|4)\.ffn_.*_exps".into(),
                device: DeviceId::Gpu(2),
            },
            PlacementOptions::cpu_moe_override(),
        ];
        let args = to_args("/m/model.gguf", &options).unwrap();
        let line = command_line("llama-server", &args);
        assert!(
            line.contains(r"-ot 'blk\.(3|4)\.ffn_.*_exps=CUDA2'"),
            "{line}"
        );
        let reread = parse_command(&line).unwrap();
        assert_eq!(reread.options, options);
        assert_eq!(reread.model.as_deref(), Some("/m/model.gguf"));
    }

    #[test]
    fn a_cpu_only_engine_gets_the_memory_flags_and_no_placement_flags() {
        let options = PlacementOptions {
            n_gpu_layers: Some(20),
            tensor_split: vec![1.0, 1.0],
            main_gpu: 1,
            overrides: vec![PlacementOptions::cpu_moe_override()],
            threads: Some(8),
            ..Default::default()
        };
        let cpu = to_args_for("m.gguf", &options, Offload::CpuOnly).unwrap();
        let gpus = to_args("m.gguf", &options).unwrap();
        let placement = ["-ngl", "-ts", "-sm", "-mg", "-ot"];
        assert!(
            placement.iter().all(|f| gpus.iter().any(|a| a == f)),
            "{gpus:?}"
        );
        assert!(
            !cpu.iter().any(|a| placement.contains(&a.as_str())),
            "{cpu:?}"
        );
        let without_placement: Vec<&String> = gpus
            .iter()
            .enumerate()
            .filter(|(i, _)| !(2..12).contains(i))
            .map(|(_, a)| a)
            .collect();
        assert_eq!(cpu.iter().collect::<Vec<_>>(), without_placement);
        assert_eq!(
            Offload::for_devices(&[DeviceId::Cpu]),
            Offload::CpuOnly,
            "the CPU alone"
        );
        assert_eq!(
            Offload::for_devices(&[DeviceId::Gpu(0), DeviceId::Cpu]),
            Offload::Gpus
        );
    }

    fn lent_options() -> PlacementOptions {
        PlacementOptions {
            rpc_servers: vec![
                RpcServer {
                    endpoint: "10.0.0.2:50052".into(),
                    devices: 2,
                },
                RpcServer {
                    endpoint: "10.0.0.3:50052".into(),
                    devices: 1,
                },
            ],
            devices: vec![
                DeviceId::Rpc(0),
                DeviceId::Rpc(1),
                DeviceId::Rpc(2),
                DeviceId::Gpu(0),
            ],
            tensor_split: vec![10.0, 10.0, 5.0, 36.0],
            overrides: vec![
                TensorOverride {
                    pattern: r"blk\.(30|31)\.ffn_.*_exps".into(),
                    device: DeviceId::Rpc(2),
                },
                TensorOverride {
                    pattern: r"blk\.(28|29)\.ffn_.*_exps".into(),
                    device: DeviceId::Rpc(1),
                },
                PlacementOptions::cpu_moe_override(),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn lent_devices_are_written_as_llama_cpp_names_them_and_read_back() {
        let options = lent_options();
        let args = to_args("m.gguf", &options).unwrap();
        let line = command_line("llama-server", &args);
        // --rpc registers the devices, so it comes before -dev and -ot, which resolve names
        // as they are read (common/arg.cpp); RPC0… count across servers, while a buffer type
        // is named by the device's index on its own server (ggml-rpc.cpp).
        assert!(
            line.starts_with("llama-server -m m.gguf --rpc 10.0.0.2:50052,10.0.0.3:50052 -dev RPC0,RPC1,RPC2,CUDA0 -ngl all -ts 10,10,5,36 "),
            "{line}"
        );
        assert!(
            line.contains(r"-ot 'blk\.(30|31)\.ffn_.*_exps=RPC0[10.0.0.3:50052]'"),
            "{line}"
        );
        assert!(
            line.contains(r"-ot 'blk\.(28|29)\.ffn_.*_exps=RPC1[10.0.0.2:50052]'"),
            "{line}"
        );
        let reread = parse_command(&line).unwrap();
        assert_eq!(reread.options, options);
        assert!(reread.notes.iter().any(|n| n.contains("--rpc")));
    }

    #[test]
    fn a_cpu_build_still_offloads_to_lent_devices() {
        let args = to_args_for("m.gguf", &lent_options(), Offload::CpuOnly).unwrap();
        let line = command_line("llama-server", &args);
        assert!(
            line.starts_with("llama-server -m m.gguf --rpc 10.0.0.2:50052,10.0.0.3:50052 -dev "),
            "{line}"
        );
    }

    #[test]
    fn lent_names_need_their_server_first() {
        let err =
            parse_command("llama-server -ot 'exps=RPC0[10.0.0.2:50052]' --rpc 10.0.0.2:50052")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("unknown buffer type 'RPC0[10.0.0.2:50052]'")
                && err.contains("--rpc before it"),
            "{err}"
        );
        let err = parse_command("llama-server -dev CUDA0,RPC1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RPC1 is a lent device") && err.contains("add --rpc host:port first"),
            "{err}"
        );
        // A server lends what llama.cpp finds there: named devices beyond the count are its.
        let two = parse_command("llama-server --rpc 10.0.0.2:50052 -dev CUDA0,RPC1").unwrap();
        assert_eq!(two.options.rpc_servers[0].devices, 2);
        let err = parse_command("llama-server --rpc 10.0.0.2")
            .unwrap_err()
            .to_string();
        assert!(err.contains("'10.0.0.2' is not host:port"), "{err}");
        let mut options = lent_options();
        options.rpc_servers.pop();
        let err = to_args("m.gguf", &options).unwrap_err().to_string();
        assert!(
            err.contains("RPC2 is a lent device") && err.contains("lend 2"),
            "{err}"
        );
        options.rpc_servers[0].endpoint = "a:1,b:2".into();
        assert!(matches!(
            to_args("m.gguf", &options),
            Err(FlagError::BadEndpoint(_))
        ));
    }

    #[test]
    fn a_pattern_with_a_comma_cannot_be_written() {
        let options = PlacementOptions {
            overrides: vec![TensorOverride {
                pattern: r"blk\.\d{1,2}\.ffn".into(),
                device: DeviceId::Cpu,
            }],
            ..Default::default()
        };
        assert!(matches!(
            to_args("m", &options),
            Err(FlagError::PatternNotExpressible(_))
        ));
    }
}
