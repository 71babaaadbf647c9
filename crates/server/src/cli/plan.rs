//! `rigdeck plan MODEL`: the per-device memory table, the llama-server flags and the speed
//! ceiling for a model on this rig (live) or on a preset rig, as given or placed automatically.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rigdeck_core::dry_run::{DryRunOutcome, DryRuns};
use rigdeck_core::host_memory_bandwidth::HostMemoryBandwidth;
use rigdeck_core::hub::api::HubClient;
use rigdeck_core::hub::cache::Destination;
use rigdeck_core::hub::config::HubConfig;
use rigdeck_core::hub::quants::quant_label;
use rigdeck_core::hub::repo::{CommitId, RepoFile, RepoId, RepoPath, Revision};
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::paths::AppPaths;
use rigdeck_core::placement::flags::{command_line, parse_args};
use rigdeck_core::placement::from_gguf::{load_remote_shape, load_shape};
use rigdeck_core::placement::report::{report_across, PlanReport};
use rigdeck_core::placement::rig::{combine, preset, presets, AlsoBox, Margins};
use rigdeck_core::placement::{KvType, PlacementOptions};
use rigdeck_core::settings::SettingsStore;
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
    /// `live` (this machine's GPUs and free memory now) or a preset: 4x3090, 4xpro6000, 2xgh200, 2x5060ti, cpu-minipc, 2x3090.
    #[arg(long, default_value = "live")]
    pub rig: String,
    /// Another box lending its GPUs (or its CPU) over llama.cpp RPC, as PRESET@LINK, for
    /// example `--also 2x3090@2.5gbe`; links: 1gbe, 2.5gbe, 5gbe, 10gbe, 25gbe, usb4. Repeat
    /// for more boxes.
    #[arg(long, value_name = "PRESET@LINK")]
    pub also: Vec<String>,
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
        live_devices(&sample, &live_margins())
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
    let also = args
        .also
        .iter()
        .map(|text| AlsoBox::parse(text))
        .collect::<Result<Vec<_>, _>>()?;
    let rig = combine(devices, &also, &Margins::default())?;
    if args.dry_run && !rig.boxes.is_empty() {
        anyhow::bail!("--dry-run with --also: llama-fit-params would need the lent boxes' rpc-servers; dry-run the head box's part on its own rig");
    }
    let loaded = load(&model)?;
    let mut report = report_across(
        &loaded.shape,
        &model,
        &rig.devices,
        &rig.boxes,
        &options,
        args.auto,
    )?;
    if let Some(parsed) = &parsed {
        // What the reader assumed (defaults llama-server would apply) is part of the answer.
        report.notes.extend(parsed.notes.iter().cloned());
    }
    let dry_run = match args.dry_run {
        true => Some(dry_run(&model, &report)?),
        false => None,
    };
    if model.starts_with("http://") || model.starts_with("https://") {
        name_the_model_as_llama_server_takes_it(&mut report, &model);
    }
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

/// This machine's margins: the CPU's bandwidth as the daemon's planner has it (the user's
/// setting, else Rigdeck's measurement), so a CPU-only rig's ceiling is a number here too.
fn live_margins() -> Margins {
    let Ok(paths) = AppPaths::from_env() else {
        return Margins::default();
    };
    let (settings, _) = SettingsStore::load(&paths);
    Margins {
        cpu_bandwidth_bytes_per_s: HostMemoryBandwidth::open(&paths.data_dir)
            .for_planner(&settings.current()),
        ..Margins::default()
    }
}

/// llama-server takes no address after `-m`: a hub file becomes the path Rigdeck's download
/// of it will have (with the pull that downloads it), any other address `--model-url URL`.
fn name_the_model_as_llama_server_takes_it(report: &mut PlanReport, url: &str) {
    let Some(at) = report.args.iter().position(|a| a == url) else {
        return;
    };
    match hub_download_of(url) {
        Ok(download) => {
            report.args[at] = download.path.display().to_string();
            report.notes.push(format!(
                "the command is for after `{}`, which downloads the file to {}",
                download.pull,
                download.path.display()
            ));
        }
        Err(why) => {
            if at > 0 && report.args[at - 1] == "-m" {
                report.args[at - 1] = "--model-url".into();
            }
            if let Some(why) = why {
                report.notes.push(why);
            }
        }
    }
    if report.command_line.is_ok() {
        report.command_line = Ok(command_line("llama-server", &report.args));
    }
}

/// A hub file as Rigdeck downloads it: where it will be, and the command that fetches it.
#[derive(Debug, PartialEq)]
struct HubDownload {
    path: PathBuf,
    pull: String,
}

/// The hub file a `…/{owner}/{name}/resolve/{revision}/{path}` address names, as `rigdeck
/// pull` will lay it out. `Err(None)`: not such an address; `Err(Some(why))`: one whose
/// commit could not be learned (a branch or tag asks the hub).
fn hub_download_of(url: &str) -> Result<HubDownload, Option<String>> {
    let file = HubFileAddress::parse(url).ok_or(None)?;
    let paths = AppPaths::from_env().map_err(|e| Some(e.to_string()))?;
    let mut config =
        HubConfig::from_env(Some(&paths.hub_token_file())).map_err(|e| Some(e.to_string()))?;
    let commit = match file.revision.as_commit() {
        Some(commit) => commit,
        None => {
            config.endpoint = file.endpoint.clone();
            commit_of(&config, &file).map_err(|e| {
                Some(format!(
                    "cannot learn the commit of {} at {} ({e}): the command reads the model from the address",
                    file.repo.as_str(),
                    file.revision.as_str()
                ))
            })?
        }
    };
    let (settings, _) = SettingsStore::load(&paths);
    let folder = settings.current().download_folder;
    let destination = match &folder {
        Some(dir) => Destination::Folder(dir.clone()),
        None => Destination::HubCache(config.cache_dir.clone()),
    };
    let repo_file = RepoFile {
        path: file.path.clone(),
        size_bytes: 0,
        git_oid: String::new(),
        lfs_sha256: None,
    };
    Ok(HubDownload {
        path: destination.paths(&file.repo, &commit, &repo_file).visible,
        pull: file.pull_command(folder.as_deref()),
    })
}

fn commit_of(config: &HubConfig, file: &HubFileAddress) -> anyhow::Result<CommitId> {
    let client = HubClient::new(config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime
        .block_on(client.model_info(&file.repo, &file.revision))?
        .commit)
}

/// `{endpoint}/{owner}/{name}/resolve/{revision}/{path}` taken apart.
#[derive(Debug, PartialEq)]
struct HubFileAddress {
    endpoint: reqwest::Url,
    repo: RepoId,
    revision: Revision,
    path: RepoPath,
}

impl HubFileAddress {
    fn parse(url: &str) -> Option<HubFileAddress> {
        let parsed = reqwest::Url::parse(url).ok()?;
        let segments: Vec<String> = parsed
            .path_segments()?
            .map(|s| percent_decode(s).unwrap_or_else(|| s.to_owned()))
            .collect();
        let at = segments
            .iter()
            .position(|s| s == "resolve")
            .filter(|&i| i >= 2)?;
        let mut endpoint = parsed.clone();
        endpoint.set_path(&segments[..at - 2].join("/"));
        endpoint.set_query(None);
        Some(HubFileAddress {
            endpoint,
            repo: RepoId::parse(&segments[at - 2..at].join("/")).ok()?,
            revision: Revision::parse(segments.get(at + 1)?).ok()?,
            path: RepoPath::parse(&segments.get(at + 2..)?.join("/")).ok()?,
        })
    }

    /// `rigdeck pull REPO:QUANT`, with the revision and the folder when they are not the defaults.
    fn pull_command(&self, folder: Option<&std::path::Path>) -> String {
        let mut words = vec!["rigdeck".to_owned(), "pull".to_owned()];
        words.push(match quant_label(self.path.file_name()) {
            Some(quant) => format!("{}:{quant}", self.repo.as_str()),
            None => self.repo.as_str().to_owned(),
        });
        if self.revision.as_str() != "main" {
            words.extend(["--revision".to_owned(), self.revision.as_str().to_owned()]);
        }
        if let Some(dir) = folder {
            words.extend(["--to".to_owned(), dir.display().to_string()]);
        }
        command_line(&words[0], &words[1..])
    }
}

/// `%XX` escapes of one path segment undone; `None` when they do not decode to UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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

/// Ours beside llama.cpp's, per device, in MiB: llama.cpp prints whole MiB rounded down, and
/// ours are rounded down too, so that equal figures read equal (11.52 MiB was "12/11").
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
    let mib = |b: u64| (b >> 20).to_string();
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
    for l in &r.ceiling.links {
        let _ = writeln!(
            out,
            "  link to {} over {}: {} crossings a token, {:.2} ms a token; load {} GiB in {:.0} s",
            l.box_name,
            l.link.describe(),
            l.crossings_per_token,
            l.seconds_per_token * 1e3,
            gib(l.load_bytes),
            l.load_seconds
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use rigdeck_core::dry_run::{DeviceComparison, Figures};
    use rigdeck_core::placement::DeviceId;

    #[test]
    fn equal_figures_read_equal_beside_llama_cpps_whole_mib() {
        const MIB: u64 = 1 << 20;
        let figures = |compute: u64| Figures {
            model_bytes: 320 * MIB,
            context_bytes: 0,
            compute_bytes: compute,
            compute_estimate_bytes: compute,
        };
        let outcome = DryRunOutcome {
            build: None,
            dry_run: None,
            devices: vec![DeviceComparison {
                id: DeviceId::Cpu,
                device: "CPU RAM".into(),
                llama_device: "Host".into(),
                // 11.52 MiB planned, llama.cpp's table: 11.
                ours: figures(11 * MIB + 545_260),
                llama_cpp: figures(11 * MIB),
            }],
            error: None,
            refused: false,
        };
        let table = render_dry_run(&outcome);
        assert!(table.contains(" 11/11"), "{table}");
        assert!(table.contains("320/320"), "{table}");
    }
}
