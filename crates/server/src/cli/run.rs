//! `rigdeck run`, `ps`, `stop` and `logs`: the running daemon owns the engines, so these commands
//! ask it over its API (`RIGDECK_URL`, default http://127.0.0.1:7878, with the token from the
//! config folder).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use rigdeck_core::launch::client::{ClientError, DaemonClient, DEFAULT_URL};
use rigdeck_core::paths::AppPaths;
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// What to run: a launch profile (`rigdeck profiles list`), a hub model as `REPO[:QUANT]`
    /// (downloaded, placed on this rig and saved as a profile first; without QUANT the one that
    /// fits best), or a model file's path.
    #[arg(value_name = "PROFILE | REPO[:QUANT] | PATH")]
    pub profile: String,
    /// Start even if the planned memory does not fit in the free VRAM now (profiles only).
    #[arg(long)]
    pub force: bool,
    /// Return once started (a profile) or ready (a model) instead of waiting or chatting.
    #[arg(long)]
    pub detach: bool,
    /// Send this one message once the model is ready, print the reply and exit.
    #[arg(short = 'm', long = "message")]
    pub message: Option<String>,
    /// The context length to plan a new profile for (tokens; default 32768, at most the model's).
    #[arg(long)]
    pub context: Option<u32>,
    /// The longest reply, in tokens (default: the chat's, at most half the engine's context).
    #[arg(long)]
    pub max_tokens: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Print the instances as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// The instance (its profile's name).
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    pub name: String,
    /// Keep printing new lines until Ctrl-C.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only lines containing this text.
    #[arg(long)]
    pub search: Option<String>,
    /// How many of the last lines to print first.
    #[arg(long, default_value_t = 100)]
    pub tail: usize,
}

/// A client for the daemon named by `RIGDECK_URL`, with the token from the config folder.
pub fn client() -> anyhow::Result<DaemonClient> {
    let url = std::env::var("RIGDECK_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let paths = AppPaths::from_env()?;
    let token_file = paths.token_file();
    let token = std::fs::read_to_string(&token_file).with_context(|| {
        format!(
            "cannot read the daemon's token '{}': start `rigdeck serve` first (it creates the token)",
            token_file.display()
        )
    })?;
    Ok(DaemonClient::new(url, token.trim()))
}

pub(crate) fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    future: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(future)
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        let model = match run_target(&client, &args.profile).await? {
            Target::Profile => {
                let started = start_profile(&client, &args).await?;
                if started != ExitCode::SUCCESS || args.message.is_none() {
                    return Ok(started);
                }
                args.profile.clone()
            }
            Target::Model(source) => match follow_model_run(&client, source, args.context).await? {
                Some(model) if !args.detach => model,
                Some(_) => return Ok(ExitCode::SUCCESS),
                None => return Ok(ExitCode::FAILURE),
            },
        };
        let chat = super::chat::ChatArgs {
            model,
            message: args.message.clone(),
            system: None,
            reasoning: None,
            show_reasoning: false,
            max_tokens: args.max_tokens,
            temperature: None,
            continue_id: None,
        };
        super::chat::converse(&client, &chat).await
    })
}

/// What `rigdeck run X` names.
enum Target {
    Profile,
    Model(Value),
}

/// A saved profile by that name; else a file that exists; else a hub `REPO[:QUANT]`.
async fn run_target(client: &DaemonClient, text: &str) -> anyhow::Result<Target> {
    let looks_like_profile = !text.contains('/') && !text.ends_with(".gguf");
    if looks_like_profile {
        match client.get(&format!("/api/v1/profiles/{text}")).await {
            Ok(_) => return Ok(Target::Profile),
            Err(ClientError::Api { status: 404, .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let path = std::path::Path::new(text);
    if path.exists() {
        let absolute = std::path::absolute(path)?;
        return Ok(Target::Model(json!({ "kind": "file", "path": absolute })));
    }
    match text.split_once('/') {
        Some((owner, rest)) if !owner.is_empty() && !rest.is_empty() && !text.starts_with('.') => {
            let (repo, quant) = match text.rsplit_once(':') {
                Some((repo, quant)) => (repo, Some(quant)),
                None => (text, None),
            };
            Ok(Target::Model(
                json!({ "kind": "hub", "repo": repo, "quant": quant }),
            ))
        }
        _ => anyhow::bail!(
            "'{text}' is no launch profile (`rigdeck profiles list`), no file, and no hub model: \
             name a profile, a path to a .gguf file, or a hub model as OWNER/NAME[:QUANT]"
        ),
    }
}

/// Today's `rigdeck run PROFILE`: start it and wait until ready (or return with `--detach`).
async fn start_profile(client: &DaemonClient, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let path = format!("/api/v1/profiles/{}/start", args.profile);
    let view = client.post(&path, &json!({ "force": args.force })).await?;
    println!(
        "started '{}' (pid {}) on http://{}:{}",
        args.profile,
        view["pid"],
        view["host"].as_str().unwrap_or("?"),
        view["port"]
    );
    if args.detach {
        return Ok(ExitCode::SUCCESS);
    }
    wait_until_ready(client, &args.profile).await
}

/// Asks the daemon to run a model and prints its steps until ready: the model's chat name, or
/// `None` after printing why it failed and what to do.
async fn follow_model_run(
    client: &DaemonClient,
    source: Value,
    context: Option<u32>,
) -> anyhow::Result<Option<String>> {
    let run = client
        .post(
            "/api/v1/model-runs",
            &json!({ "source": source, "context": context }),
        )
        .await?;
    let path = format!("/api/v1/model-runs/{}", run["id"]);
    let mut last = String::new();
    loop {
        let run = client.get(&path).await?;
        let line = run_line(&run);
        if line != last {
            eprintln!("{line}");
            last = line;
        }
        match run["step"].as_str() {
            Some("ready") => return Ok(run["model"].as_str().map(str::to_owned)),
            Some("failed") => {
                if let (Some(repo), Some(quant)) =
                    (run["fix"]["repo"].as_str(), run["fix"]["quant"].as_str())
                {
                    eprintln!("try: rigdeck run {repo}:{quant}");
                }
                return Ok(None);
            }
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

/// One progress line: the step's words, download progress rounded to 10 % so a pipe gets a
/// handful of lines, not hundreds.
fn run_line(run: &Value) -> String {
    let title = run["title"].as_str().unwrap_or("model");
    let detail = run["detail"].as_str().unwrap_or("");
    match (run["step"].as_str(), run["progress"].as_f64()) {
        (Some("downloading"), Some(p)) => {
            format!("{title}: downloading {:.0} %", (p * 10.0).floor() * 10.0)
        }
        (Some("failed"), _) => format!("{title}: failed: {detail}"),
        _ => format!("{title}: {detail}"),
    }
}

/// Prints each phase change until the engine is ready (success) or crashed for good (failure).
async fn wait_until_ready(client: &DaemonClient, name: &str) -> anyhow::Result<ExitCode> {
    let mut last = String::new();
    loop {
        let all = client.get("/api/v1/instances").await?;
        let Some(view) = all
            .as_array()
            .and_then(|a| a.iter().find(|v| v["name"] == name))
        else {
            anyhow::bail!("instance '{name}' disappeared from the daemon");
        };
        let phase = view["phase"].as_str().unwrap_or("unknown").to_owned();
        let progress = view["progress"]
            .as_f64()
            .map(|p| format!(" {:.0}%", p * 100.0))
            .unwrap_or_default();
        let line = format!("{phase}{progress}");
        if line != last {
            println!("{name}: {line}");
            last = line;
        }
        match phase.as_str() {
            "ready" => return Ok(ExitCode::SUCCESS),
            "stopped" => return Ok(ExitCode::FAILURE),
            "crashed" if view["restart"].is_null() => {
                eprintln!(
                    "{name} crashed: {}",
                    view["explanation"].as_str().unwrap_or("")
                );
                for line in view["last_lines"].as_array().into_iter().flatten() {
                    eprintln!("  {}", line.as_str().unwrap_or(""));
                }
                return Ok(ExitCode::FAILURE);
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

pub fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let all = client()?.get("/api/v1/instances").await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&all)?);
        } else {
            print!("{}", render_ps(&all));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The `rigdeck ps` table.
pub fn render_ps(all: &Value) -> String {
    let rows = all.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return "No instances. Start one with `rigdeck run PROFILE`.\n".to_owned();
    }
    let mut out = format!(
        "{:<24} {:<10} {:>8} {:>6} {:>10}  {}\n",
        "NAME", "STATE", "PID", "PORT", "UPTIME", "VRAM (planned / measured)"
    );
    for v in rows {
        let sum = |key: &str| -> u64 {
            v[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["bytes"].as_u64())
                .sum()
        };
        let uptime = v["uptime_ms"]
            .as_i64()
            .map(|ms| format!("{}s", ms / 1000))
            .unwrap_or_else(|| "-".to_owned());
        out.push_str(&format!(
            "{:<24} {:<10} {:>8} {:>6} {:>10}  {} / {}\n",
            v["name"].as_str().unwrap_or("?"),
            v["phase"].as_str().unwrap_or("?"),
            v["pid"].as_u64().map_or("-".to_owned(), |p| p.to_string()),
            v["port"].as_u64().map_or("-".to_owned(), |p| p.to_string()),
            uptime,
            rigdeck_core::profiles::admission::gib(sum("planned_memory")),
            rigdeck_core::profiles::admission::gib(sum("measured_memory")),
        ));
    }
    out
}

pub fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let path = format!("/api/v1/instances/{}/stop", args.name);
        let view = client()?.post(&path, &json!({})).await?;
        println!("{}: {}", args.name, view["phase"].as_str().unwrap_or("?"));
        Ok(ExitCode::SUCCESS)
    })
}

pub fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        let search = args
            .search
            .as_deref()
            .map(|s| format!("&search={}", encode(s)))
            .unwrap_or_default();
        let mut path = format!(
            "/api/v1/instances/{}/logs?tail={}{search}",
            args.name, args.tail
        );
        loop {
            let lines = client.get(&path).await?;
            let mut last_seq = None;
            for line in lines.as_array().into_iter().flatten() {
                println!("{}", line["text"].as_str().unwrap_or(""));
                last_seq = line["seq"].as_u64();
            }
            if !args.follow {
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(seq) = last_seq {
                path = format!(
                    "/api/v1/instances/{}/logs?tail=100000&after={seq}{search}",
                    args.name
                );
            } else if !path.contains("after=") {
                path = format!(
                    "/api/v1/instances/{}/logs?tail=100000&after=0{search}",
                    args.name
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
