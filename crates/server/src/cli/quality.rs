//! `rigdeck quality`: KL divergence against a reference through the daemon. `reference MODEL`
//! records a model's log-probabilities over a corpus (the size shown first, progress while it
//! runs); `kld PROFILE` measures a launch profile against a reference; `references` lists them
//! with their size on disk, `delete ID` removes one.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use rigdeck_core::launch::client::DaemonClient;
use serde_json::{json, Value};

use super::progress_line::ProgressLine;
use super::run::{block_on, client};
use super::table;

#[derive(Debug, clap::Args)]
pub struct QualityArgs {
    #[command(subcommand)]
    pub command: QualityCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum QualityCommand {
    /// Record a reference: a model file (or a profile's) run by llama-perplexity over a corpus,
    /// its log-probabilities kept for KL-divergence runs.
    Reference(ReferenceArgs),
    /// Measure a launch profile's KL divergence from a reference (its model file, KV cache types
    /// and flags as the profile runs them).
    Kld(KldArgs),
    /// List the recorded references with their corpus, windows and size on disk.
    References,
    /// Delete a reference and its logits file (stops it if it is recording).
    Delete { id: String },
}

#[derive(Debug, clap::Args)]
pub struct ReferenceArgs {
    /// A GGUF file (the highest precision of the model you have: BF16, F16 or Q8_0) or a
    /// launch profile's name.
    pub model: String,
    /// `builtin` (the default), a text file's path, or `conversations:ID,ID…` from the chat.
    #[arg(long, default_value = "builtin")]
    pub corpus: String,
    /// Tokens per window (8192 shows a KV cache's effect; never measure those at 512).
    #[arg(long, default_value_t = 8192)]
    pub context: u32,
    /// Windows to read (all the corpus holds when left out).
    #[arg(long)]
    pub chunks: Option<u32>,
    /// Only say what it would read and write.
    #[arg(long)]
    pub estimate: bool,
}

#[derive(Debug, clap::Args)]
pub struct KldArgs {
    /// The launch profile to measure.
    pub profile: String,
    /// The reference's id (`rigdeck quality references`); the newest ready one when left out.
    #[arg(long)]
    pub against: Option<String>,
    /// Print the finished run as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: QualityArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        match args.command {
            QualityCommand::Reference(a) => reference(&client, &a).await,
            QualityCommand::Kld(a) => kld(&client, &a).await,
            QualityCommand::References => list(&client).await,
            QualityCommand::Delete { id } => {
                client
                    .delete(&format!("/api/v1/quality/references/{id}"))
                    .await?;
                println!("reference {id} deleted");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// The request body for a reference.
fn reference_body(a: &ReferenceArgs) -> anyhow::Result<Value> {
    let model = if Path::new(&a.model).is_file() {
        let path = std::fs::canonicalize(&a.model)
            .with_context(|| format!("cannot resolve {}", a.model))?;
        json!({"kind": "file", "path": path})
    } else if a.model.ends_with(".gguf") || a.model.contains('/') {
        bail!("model file {} does not exist: give a GGUF file's path or a profile's name (`rigdeck profiles list`)", a.model);
    } else {
        json!({"kind": "profile", "name": a.model})
    };
    Ok(json!({"model": model, "corpus": corpus_spec(&a.corpus)?,
              "context": a.context, "chunks": a.chunks}))
}

/// `builtin`, `conversations:1,2` or a file path.
fn corpus_spec(text: &str) -> anyhow::Result<Value> {
    if text == "builtin" {
        return Ok(json!({"kind": "builtin"}));
    }
    if let Some(ids) = text.strip_prefix("conversations:") {
        let ids: Vec<i64> = ids
            .split(',')
            .map(|i| i.trim().parse())
            .collect::<Result<_, _>>()
            .with_context(|| format!("--corpus {text}: give conversation ids like conversations:3,7 (`rigdeck chat --list` shows them)"))?;
        return Ok(json!({"kind": "conversations", "ids": ids}));
    }
    let path = std::fs::canonicalize(text).with_context(|| {
        format!("--corpus {text}: no such file; give `builtin`, a text file or conversations:ID,…")
    })?;
    Ok(json!({"kind": "file", "path": path}))
}

async fn reference(client: &DaemonClient, a: &ReferenceArgs) -> anyhow::Result<ExitCode> {
    let body = reference_body(a)?;
    let estimate = client
        .post("/api/v1/quality/references/estimate", &body)
        .await?;
    eprintln!("{}", estimate_words(&estimate));
    if let Some(problem) = estimate["problem"].as_str() {
        bail!("{problem}");
    }
    if a.estimate {
        return Ok(ExitCode::SUCCESS);
    }
    let begun = client.post("/api/v1/quality/references", &body).await?;
    let id = begun["id"]
        .as_str()
        .context("the daemon answered without a reference id")?
        .to_owned();
    let done = follow_reference(client, &id).await?;
    println!("{}", reference_words(&done));
    Ok(match done["state"].as_str() {
        Some("ready") => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

fn estimate_words(e: &Value) -> String {
    let gb = |v: &Value| v.as_f64().unwrap_or(0.0) / 1e9;
    let mut text = format!(
        "{} tokens in the corpus with this model's vocabulary; {} windows, {} tokens scored; the logits file takes {:.2} GB ({:.2} of {:.2} GB budget used)",
        e["corpus_tokens"], e["chunks"], e["scored_tokens"], gb(&e["bytes"]), gb(&e["used_bytes"]), gb(&e["budget_bytes"])
    );
    for note in e["notes"].as_array().into_iter().flatten() {
        text += &format!("\nnote: {}", note.as_str().unwrap_or_default());
    }
    if let Some(id) = e["existing"].as_str() {
        text += &format!("\nreference {id} was recorded the same way: it is reused");
    }
    text
}

fn reference_words(r: &Value) -> String {
    match r["state"].as_str() {
        Some("ready") => format!(
            "reference {} ready: {} over {} ({} windows of {} tokens, {} scored), {:.2} GB, recorded in {:.1} s with {}",
            r["id"].as_str().unwrap_or_default(),
            r["model_name"].as_str().unwrap_or_default(),
            r["corpus_label"].as_str().unwrap_or_default(),
            r["chunks"], r["context"], r["scored_tokens"],
            r["bytes"].as_f64().unwrap_or(0.0) / 1e9,
            r["wall_s"].as_f64().unwrap_or(0.0),
            r["engine"].as_str().unwrap_or_default(),
        ),
        _ => format!(
            "reference {} failed: {}",
            r["id"].as_str().unwrap_or_default(),
            r["error"].as_str().unwrap_or("no reason given")
        ),
    }
}

/// Polls the reference until it is ready or failed; Ctrl-C deletes it.
async fn follow_reference(client: &DaemonClient, id: &str) -> anyhow::Result<Value> {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut line = ProgressLine::stderr();
    loop {
        let all = client.get("/api/v1/quality/references").await?;
        let reference = all["references"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["id"] == id))
            .cloned()
            .with_context(|| format!("reference {id} disappeared (deleted elsewhere?)"))?;
        let fraction = reference["progress"]["fraction"].as_f64().unwrap_or(0.0);
        let eta = reference["progress"]["eta_s"]
            .as_f64()
            .map_or_else(String::new, |s| format!(", about {s:.0} s left"));
        let text = format!("recording {id}: {:.0} %{eta}", 100.0 * fraction);
        if reference["state"] != "recording" {
            line.finish(1.0, &text);
            return Ok(reference);
        }
        line.update(fraction, &text);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = &mut ctrl_c => {
                line.interrupt();
                client.delete(&format!("/api/v1/quality/references/{id}")).await?;
                bail!("recording {id} stopped and its partial file deleted");
            }
        }
    }
}

async fn list(client: &DaemonClient) -> anyhow::Result<ExitCode> {
    let all = client.get("/api/v1/quality/references").await?;
    let rows: Vec<Vec<String>> = all["references"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            vec![
                r["id"].as_str().unwrap_or_default().to_owned(),
                r["state"].as_str().unwrap_or_default().to_owned(),
                r["model_name"].as_str().unwrap_or_default().to_owned(),
                r["corpus_label"].as_str().unwrap_or_default().to_owned(),
                format!("{} × {}", r["chunks"], r["context"]),
                format!("{:.2} GB", r["bytes"].as_f64().unwrap_or(0.0) / 1e9),
                r["engine"].as_str().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("no references yet: record one with `rigdeck quality reference MODEL.gguf`");
        return Ok(ExitCode::SUCCESS);
    }
    print!(
        "{}",
        table::render(
            &["ID", "STATE", "MODEL", "CORPUS", "WINDOWS", "SIZE", "ENGINE"],
            &rows
        )
    );
    println!(
        "{:.2} GB of the {:.2} GB budget used",
        all["used_bytes"].as_f64().unwrap_or(0.0) / 1e9,
        all["budget_bytes"].as_f64().unwrap_or(0.0) / 1e9
    );
    Ok(ExitCode::SUCCESS)
}

/// The reference to measure against: the one named, else the newest ready one.
async fn chosen_reference(client: &DaemonClient, against: Option<&str>) -> anyhow::Result<String> {
    if let Some(id) = against {
        return Ok(id.to_owned());
    }
    let all = client.get("/api/v1/quality/references").await?;
    let newest = all["references"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["state"] == "ready")
        .context("no ready reference: record one with `rigdeck quality reference MODEL.gguf`")?;
    let id = newest["id"].as_str().unwrap_or_default().to_owned();
    eprintln!(
        "against reference {id} ({} over {})",
        newest["model_name"].as_str().unwrap_or_default(),
        newest["corpus_label"].as_str().unwrap_or_default()
    );
    Ok(id)
}

async fn kld(client: &DaemonClient, a: &KldArgs) -> anyhow::Result<ExitCode> {
    let reference = chosen_reference(client, a.against.as_deref()).await?;
    let body = json!({"target": {"kind": "profile", "name": a.profile}, "kind": "kld",
                      "kld": {"reference": reference}});
    let started = client.post("/api/v1/bench/runs", &body).await?;
    let id = started["id"]
        .as_i64()
        .context("the daemon answered without a run id")?;
    eprintln!("KL-divergence run {id} started (also on the Benchmarks page); Ctrl-C cancels");
    let detail = super::bench::follow(client, id).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&detail)?);
    } else {
        print!("{}", super::bench::kld_table(&detail));
    }
    Ok(match detail.summary.status {
        rigdeck_core::bench::store::Status::Done => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corpus_is_builtin_conversations_or_a_file() {
        assert_eq!(corpus_spec("builtin").unwrap(), json!({"kind": "builtin"}));
        assert_eq!(
            corpus_spec("conversations:3, 7").unwrap(),
            json!({"kind": "conversations", "ids": [3, 7]})
        );
        let err = corpus_spec("conversations:a").unwrap_err().to_string();
        assert!(err.contains("conversations:3,7"), "{err}");
        let err = corpus_spec("/no/such.txt").unwrap_err().to_string();
        assert!(err.contains("no such file"), "{err}");
    }
}
