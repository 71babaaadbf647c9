//! `rigdeck search`, `rigdeck pull` and `rigdeck hub`: find models on the Hugging Face hub (or
//! the mirror in `HF_ENDPOINT`), see a repository's quantizations with their sizes, and
//! download one into the shared cache with a live progress bar. Downloads run in this process
//! (like `hf download`): Ctrl-C pauses, the same command resumes.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rigdeck_core::hub::api::{ClientOptions, HubClient, SearchQuery, SortBy, WeightFormat};
use rigdeck_core::hub::cache::{inventory, Destination};
use rigdeck_core::hub::config::{HubConfig, HubToken};
use rigdeck_core::hub::download::verify;
use rigdeck_core::hub::download::{
    CancellationToken, DownloadError, DownloadPlan, DownloadProgress, Downloader, FetchOptions,
    ProgressView, RateMeter,
};
use rigdeck_core::hub::quants::{self, FileGroup, GroupKind};
use rigdeck_core::hub::repo::{CommitId, RepoId, Revision};
use rigdeck_core::paths::AppPaths;

use super::progress_line::ProgressLine;
use super::table;

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// Words to look for in model names (e.g. "GLM-5.2 GGUF").
    pub text: Vec<String>,
    /// Only GGUF repositories (llama.cpp's format).
    #[arg(long, conflicts_with = "safetensors")]
    pub gguf: bool,
    /// Only safetensors repositories (vLLM and SGLang's format).
    #[arg(long)]
    pub safetensors: bool,
    /// Order of the hits.
    #[arg(long, value_enum, default_value = "downloads")]
    pub sort: SortArg,
    /// How many hits (1–100).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print the hits as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SortArg {
    Downloads,
    Likes,
    Updated,
}

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// The repository, and the quantization to fetch: `unsloth/GLM-5.2-GGUF:UD-IQ2_M`. Without
    /// a quantization, a GGUF repository with one quantization fetches it, one with several lists
    /// them; any other repository is fetched whole.
    pub model: String,
    /// Branch, tag or commit.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Put the files in this folder as they are named in the repository, instead of the shared
    /// Hugging Face cache ($HF_HUB_CACHE).
    #[arg(long)]
    pub to: Option<std::path::PathBuf>,
    /// Parallel connections per file.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Seconds the hub may leave a request without an answer, or a transfer without a byte,
    /// before it is tried again (a few times, then the pull stops and says why).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Print the result as JSON (no progress bar).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct HubArgs {
    #[command(subcommand)]
    pub command: HubCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum HubCommand {
    /// A repository's files grouped by quantization, with sizes (what `rigdeck pull REPO:QUANT`
    /// takes).
    Show {
        repo: String,
        #[arg(long, default_value = "main")]
        revision: String,
        #[arg(long)]
        json: bool,
    },
    /// The models in the shared cache with their disk use (a blob shared by two snapshots
    /// counts once), snapshots and refs.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a model from the cache: `REPO` (every snapshot) or `REPO@COMMIT`; a file another
    /// snapshot still uses stays.
    Rm { model: String },
    /// Save a Hugging Face access token for gated repositories (read from standard input; kept
    /// readable by you only, never logged; HF_TOKEN overrides it).
    Login,
    /// Forget the saved token.
    Logout,
}

fn hub_config() -> anyhow::Result<(HubConfig, AppPaths)> {
    let paths = AppPaths::from_env()?;
    let config = HubConfig::from_env(Some(&paths.hub_token_file()))?;
    Ok((config, paths))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn search(args: SearchArgs) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let client = HubClient::new(&config)?;
    let query = SearchQuery {
        text: args.text.join(" "),
        format: match (args.gguf, args.safetensors) {
            (true, _) => Some(WeightFormat::Gguf),
            (_, true) => Some(WeightFormat::Safetensors),
            _ => None,
        },
        sort: match args.sort {
            SortArg::Downloads => SortBy::Downloads,
            SortArg::Likes => SortBy::Likes,
            SortArg::Updated => SortBy::Updated,
        },
        limit: Some(args.limit),
    };
    let hits = runtime()?.block_on(client.search(&query))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
        return Ok(ExitCode::SUCCESS);
    }
    if hits.is_empty() {
        println!("no models match '{}' on {}", query.text, config.endpoint);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = hits
        .iter()
        .map(|h| {
            vec![
                h.id.to_string(),
                h.downloads.to_string(),
                h.likes.to_string(),
                h.last_modified
                    .as_deref()
                    .map(|d| d.chars().take(10).collect())
                    .unwrap_or_default(),
                if h.gated {
                    "gated".into()
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(&["MODEL", "DOWNLOADS", "LIKES", "UPDATED", ""], &rows)
    );
    println!("see its quantizations: rigdeck hub show MODEL");
    Ok(ExitCode::SUCCESS)
}

pub fn hub(args: HubArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        HubCommand::Show {
            repo,
            revision,
            json,
        } => show(&repo, &revision, json),
        HubCommand::Login => login(),
        HubCommand::List { json } => list_cache(json),
        HubCommand::Rm { model } => remove_cached(&model),
        HubCommand::Logout => {
            let (_, paths) = hub_config()?;
            match std::fs::remove_file(paths.hub_token_file()) {
                Ok(()) => println!("token removed"),
                Err(_) => println!("no saved token"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list_cache(json: bool) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let repos = inventory::list(&config.cache_dir);
    if json {
        println!("{}", serde_json::to_string_pretty(&repos)?);
        return Ok(ExitCode::SUCCESS);
    }
    if repos.is_empty() {
        println!("no models in {}", config.cache_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = repos
        .iter()
        .map(|r| {
            let refs: Vec<String> = r
                .snapshots
                .iter()
                .map(|s| {
                    let short: String = s.commit.as_str().chars().take(10).collect();
                    match s.refs.as_slice() {
                        [] => short,
                        refs => format!("{short} ({})", refs.join(", ")),
                    }
                })
                .collect();
            vec![
                r.repo.to_string(),
                human(r.size_on_disk),
                r.snapshots
                    .iter()
                    .map(|s| s.files.len())
                    .sum::<usize>()
                    .to_string(),
                refs.join("; "),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(&["MODEL", "ON DISK", "FILES", "SNAPSHOTS"], &rows)
    );
    println!("in {}", config.cache_dir.display());
    Ok(ExitCode::SUCCESS)
}

fn remove_cached(model: &str) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let (repo, commit) = match model.split_once('@') {
        Some((repo, commit)) => (RepoId::parse(repo)?, Some(CommitId::parse(commit)?)),
        None => (RepoId::parse(model)?, None),
    };
    let removed = inventory::remove(&config.cache_dir, &repo, commit.as_ref())
        .with_context(|| format!("removing {model}"))?;
    println!(
        "removed {model}: {} freed ({} file(s)); {} file(s) kept, still used by another snapshot",
        human(removed.freed_bytes),
        removed.blobs_removed,
        removed.blobs_kept
    );
    Ok(ExitCode::SUCCESS)
}

/// `rigdeck verify REPO[@REVISION]`: re-hash the downloaded files against the hub.
pub fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let client = HubClient::new(&config)?;
    let (repo, revision) = match args.model.split_once('@') {
        Some((repo, revision)) => (RepoId::parse(repo)?, Revision::parse(revision)?),
        None => (RepoId::parse(&args.model)?, Revision::main()),
    };
    let checked =
        runtime()?.block_on(verify::verify(&client, &config.cache_dir, &repo, &revision))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&checked)?);
    } else {
        for file in &checked.files {
            match &file.problem {
                None => println!("ok      {}", file.path),
                Some(problem) => println!("BAD     {}: {problem}", file.path),
            }
        }
        if let Some(upstream) = &checked.upstream_commit {
            println!(
                "{revision} has moved on upstream: the local files are at {}, the hub is at {upstream}; `rigdeck pull` fetches the new version",
                checked.commit
            );
        }
    }
    let bad = checked.files.iter().filter(|f| !f.ok).count();
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// `REPO` or `REPO@REVISION` (default main), as downloaded into the cache.
    pub model: String,
    #[arg(long)]
    pub json: bool,
}

fn login() -> anyhow::Result<ExitCode> {
    let (_, paths) = hub_config()?;
    if std::io::stdin().is_terminal() {
        eprint!("paste a Hugging Face access token (https://huggingface.co/settings/tokens), then Enter: ");
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let token =
        HubToken::parse(&line).map_err(|why| anyhow::anyhow!("the token was not saved: {why}"))?;
    token.save(&paths.hub_token_file())?;
    println!(
        "token saved to {} (readable by you only)",
        paths.hub_token_file().display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The repository at a revision: its commit and its files grouped.
async fn groups_of(
    client: &HubClient,
    repo: &RepoId,
    revision: &Revision,
) -> anyhow::Result<(rigdeck_core::hub::api::ModelInfo, Vec<FileGroup>)> {
    let info = client.model_info(repo, revision).await?;
    let listing = client.list_files(repo, &info.commit).await?;
    for refused in &listing.refused {
        eprintln!("rigdeck: {refused}");
    }
    Ok((info, quants::group(&listing.files)))
}

fn show(repo: &str, revision: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let client = HubClient::new(&config)?;
    let (repo, revision) = (RepoId::parse(repo)?, Revision::parse(revision)?);
    let (info, groups) = runtime()?.block_on(groups_of(&client, &repo, &revision))?;
    if json {
        let out = serde_json::json!({"model": info, "groups": groups});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} at {} ({})", repo, info.commit, info.page_url);
    let rows: Vec<Vec<String>> = groups
        .iter()
        .filter(|g| g.kind != GroupKind::Other)
        .map(|g| {
            vec![
                g.label.clone(),
                kind_name(g.kind).into(),
                human(g.total_bytes),
                g.files.len().to_string(),
                g.missing
                    .as_ref()
                    .map(|m| format!("incomplete upload: {m}"))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(&["QUANT", "KIND", "SIZE", "FILES", ""], &rows)
    );
    println!("download one: rigdeck pull {repo}:QUANT");
    Ok(ExitCode::SUCCESS)
}

fn kind_name(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::Gguf => "gguf",
        GroupKind::Projector => "vision projector",
        GroupKind::Safetensors => "safetensors",
        GroupKind::Other => "other",
    }
}

fn human(bytes: u64) -> String {
    rigdeck_core::hub::download::error::human_bytes(bytes)
}

pub fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let (config, _) = hub_config()?;
    let patience = Duration::from_secs(args.timeout);
    let client = HubClient::new(&config)?.with_options(ClientOptions {
        response_deadline: patience,
        body_stall: patience,
        ..ClientOptions::default()
    });
    let (repo_text, quant) = match args.model.split_once(':') {
        Some((repo, quant)) => (repo, Some(quant)),
        None => (args.model.as_str(), None),
    };
    let repo = RepoId::parse(repo_text)?;
    let revision = Revision::parse(&args.revision)?;
    let runtime = runtime()?;
    let (info, groups) = runtime.block_on(groups_of(&client, &repo, &revision))?;
    let files = match quants::select(&groups, quant) {
        Ok((_, files)) => files,
        Err(message) => {
            eprintln!("rigdeck: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let destination = match &args.to {
        Some(dir) => Destination::Folder(dir.clone()),
        None => Destination::HubCache(config.cache_dir.clone()),
    };
    let plan = DownloadPlan {
        repo,
        revision,
        commit: info.commit,
        files,
    };
    let options = FetchOptions {
        connections: args.connections.clamp(1, 32),
        stall_timeout: patience,
        ..FetchOptions::default()
    };
    let downloader = Downloader::new(client, destination, options);
    runtime.block_on(run_download(&downloader, &plan, args.json))
}

async fn run_download(
    downloader: &Downloader,
    plan: &DownloadPlan,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let progress = Arc::new(DownloadProgress::default());
    let cancel = CancellationToken::new();
    let on_ctrl_c = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        })
    };
    // Stops the progress with the download, or with Ctrl-C.
    let stop_drawing = cancel.child_token();
    let bar = (!json).then(|| tokio::spawn(draw_progress(progress.clone(), stop_drawing.clone())));
    let result = downloader.download(plan, &progress, &cancel).await;
    on_ctrl_c.abort();
    if let Some(bar) = bar {
        stop_drawing.cancel();
        if let Ok(mut line) = bar.await {
            let (fraction, text) = status_line(&RateMeter::new(RATE_WINDOW).view(&progress));
            line.finish(fraction, &text);
        }
    }
    match result {
        Ok(done) if json => {
            println!("{}", serde_json::to_string_pretty(&done)?);
            Ok(ExitCode::SUCCESS)
        }
        Ok(done) => {
            println!(
                "{} file(s) verified ({} already there):",
                done.paths.len(),
                done.reused
            );
            for path in &done.paths {
                println!("  {}", path.display());
            }
            if let Some(first) = done
                .paths
                .iter()
                .find(|p| p.extension().is_some_and(|e| e == "gguf"))
            {
                println!("plan it: rigdeck plan {}", first.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(DownloadError::Cancelled) => {
            eprintln!("paused; run the same command again to resume where it stopped");
            Ok(ExitCode::from(130))
        }
        Err(error) => Err(error).context(format!("downloading {}", plan.repo)),
    }
}

/// The span the transfer rate is averaged over.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Shows the download's progress every 200 ms (a bar on a terminal, plain lines in a file)
/// until cancelled; the line, for the caller to finish.
async fn draw_progress(
    progress: Arc<DownloadProgress>,
    cancel: CancellationToken,
) -> ProgressLine<std::io::Stderr> {
    let mut line = ProgressLine::stderr();
    let mut meter = RateMeter::new(RATE_WINDOW);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = cancel.cancelled() => return line,
        }
        let (fraction, text) = status_line(&meter.view(&progress));
        line.update(fraction, &text);
    }
}

/// How far the download is (0–1) and its line: bar, bytes, rate, time left, file.
fn status_line(view: &ProgressView) -> (f64, String) {
    let fraction = if view.total_bytes == 0 {
        1.0
    } else {
        view.done_bytes as f64 / view.total_bytes as f64
    };
    let filled = (fraction * 24.0).round() as usize;
    let eta = view
        .eta_s
        .map_or("--:--".into(), |s| format!("{}:{:02}", s / 60, s % 60));
    let name = view.current.rsplit('/').next().unwrap_or_default();
    let text = format!(
        "[{}{}] {:5.1}%  {} / {}  {}/s  ETA {eta}  file {}/{} {name}",
        "#".repeat(filled.min(24)),
        " ".repeat(24 - filled.min(24)),
        fraction * 100.0,
        human(view.done_bytes),
        human(view.total_bytes),
        human(view.rate_bps),
        (view.files_done + 1).min(view.files_total),
        view.files_total,
    );
    (fraction, text)
}
