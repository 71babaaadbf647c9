//! `rigdeck bench`: a serving benchmark through the daemon, with the Benchmarks page's options.
//! Prints a progress bar while it runs and a table of every step at the end; Ctrl-C cancels
//! (what was measured is kept). `--list` shows stored runs; `--show ID` prints one again, or
//! exports it with `--format md|csv|json`; `--compare A,B` sets two quality probes side by side,
//! question by question.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use rigdeck_core::bench::quality::paired::{ProbeComparison, Verdict};
use rigdeck_core::bench::quality::{rate_text, ProbeSummary};
use rigdeck_core::bench::report::{median_and_p99, median_and_spread, median_of};
use rigdeck_core::bench::spec::{Api, PromptSource, Slo};
use rigdeck_core::bench::store::{RunDetail, RunSpec, RunSummary, Status};
use rigdeck_core::bench::{BenchSpec, Shape};
use rigdeck_core::launch::client::DaemonClient;
use serde_json::{json, Value};

use super::progress_line::ProgressLine;
use super::run::{block_on, client};
use super::table;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// A running instance (its profile's name); with --start, a profile started for the run.
    pub target: Option<String>,
    /// Start the profile for the run when it is not running (and stop it after).
    #[arg(long, requires = "target")]
    pub start: bool,
    /// Through Rigdeck's gateway, as clients see it: a profile's name or alias.
    #[arg(long, value_name = "MODEL", conflicts_with_all = ["target", "url"])]
    pub gateway: Option<String>,
    /// Any OpenAI-compatible base URL (ending in /v1), e.g. a cloud API as a baseline.
    #[arg(long, conflicts_with = "target", requires = "model")]
    pub url: Option<String>,
    /// The model name at --url.
    #[arg(long)]
    pub model: Option<String>,
    /// The environment variable that holds --url's API key (keeps it out of shell history).
    #[arg(long, value_name = "VAR", requires = "url")]
    pub api_key_env: Option<String>,
    /// Workload shapes, PROMPT:OUTPUT tokens (comma-separated or repeated).
    #[arg(long = "shape", value_delimiter = ',', default_value = "256:512")]
    pub shapes: Vec<Shape>,
    /// Context depths: tokens already in the cache before each request (like llama-bench -d).
    #[arg(long = "depth", value_delimiter = ',', default_value = "0")]
    pub depths: Vec<u32>,
    /// Concurrent streams per step (closed loop).
    #[arg(short = 'c', long, value_delimiter = ',', default_value = "1")]
    pub concurrency: Vec<u32>,
    /// Request rates (req/s, Poisson arrivals) instead of concurrency.
    #[arg(long = "rate", value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Requests per run in rate mode.
    #[arg(long, default_value_t = 32)]
    pub rate_requests: u32,
    /// Warm runs per step, after the cold one.
    #[arg(long, default_value_t = 10)]
    pub warm: u32,
    /// synthetic (exact, cheap; overstates speculative acceptance) or realistic.
    #[arg(long, default_value = "synthetic", value_parser = ["synthetic", "realistic"])]
    pub prompts: String,
    /// chat (/v1/chat/completions) or completions (/v1/completions).
    #[arg(long, default_value = "chat", value_parser = ["chat", "completions"])]
    pub api: String,
    /// Let requests share their opening (measures the prefix cache instead of avoiding it).
    #[arg(long)]
    pub shared_prefixes: bool,
    /// Do not force the output length (ignore_eos / min_tokens).
    #[arg(long)]
    pub no_force_output: bool,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Latency targets for goodput, in milliseconds.
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    #[arg(long)]
    pub slo_e2e_ms: Option<f64>,
    /// Runs under this speculative acceptance (a fraction) are counted.
    #[arg(long, default_value_t = 0.6)]
    pub min_acceptance: f64,
    /// The seed of the synthetic prompts, or of the quality probe's questions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One request's limit in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// The run's name (default: the target).
    #[arg(long)]
    pub name: Option<String>,
    /// List the stored runs.
    #[arg(long, conflicts_with_all = ["target", "gateway", "url", "show"])]
    pub list: bool,
    /// Print a stored run again.
    #[arg(long, value_name = "ID")]
    pub show: Option<i64>,
    /// With --show: md, csv, csv-requests or json instead of the table.
    #[arg(long, requires = "show", value_parser = ["md", "csv", "csv-requests", "json"])]
    pub format: Option<String>,
    /// A quality probe instead of a speed benchmark: questions with exact answers at
    /// temperature 0, graded; prints the pass rate per category.
    #[arg(long)]
    pub quality: bool,
    /// The quality probe's room per reply (reasoning models need a few thousand tokens).
    #[arg(long, default_value_t = 2048, requires = "quality")]
    pub max_tokens: u32,
    /// The quality probe's questions, generated from --seed (50 per category by default).
    #[arg(long, default_value_t = 250, requires = "quality")]
    pub count: u32,
    /// Two quality probes of one seed, question by question: BASE,OTHER (run ids).
    #[arg(long, value_name = "BASE,OTHER", value_delimiter = ',', num_args = 1,
        conflicts_with_all = ["target", "gateway", "url", "show", "list"])]
    pub compare: Vec<i64>,
    /// llama.cpp's own llama-bench instead, with the profile's flags (the profile must not be
    /// running): pp and tg tokens/s at each --depth.
    #[arg(long, requires = "target", conflicts_with_all = ["quality", "gateway", "url", "start"])]
    pub llama_bench: bool,
    /// llama-bench's prompt sizes (pp tests).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512",
        requires = "llama_bench"
    )]
    pub pp: Vec<u32>,
    /// llama-bench's generation sizes (tg tests).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128",
        requires = "llama_bench"
    )]
    pub tg: Vec<u32>,
    /// llama-bench's repetitions per test.
    #[arg(long, default_value_t = 5, requires = "llama_bench")]
    pub repetitions: u32,
    /// Print the finished run as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let client = client()?;
        if args.list {
            return list(&client).await;
        }
        if let Some(id) = args.show {
            return show(&client, id, args.format.as_deref()).await;
        }
        if !args.compare.is_empty() {
            return compare(&client, &args.compare).await;
        }
        let body = if args.quality {
            json!({"name": args.name, "target": target(&args)?, "kind": "quality",
                "probe": {"max_tokens": args.max_tokens, "request_timeout_s": args.timeout,
                    "count": args.count, "seed": args.seed}})
        } else if args.llama_bench {
            json!({"name": args.name, "target": {"kind": "profile", "name": args.target},
                "kind": "llama_bench", "llama_bench": {"prompt_tokens": args.pp,
                "gen_tokens": args.tg, "depths": args.depths, "repetitions": args.repetitions}})
        } else {
            json!({"name": args.name, "target": target(&args)?, "spec": spec(&args)})
        };
        let started = client.post("/api/v1/bench/runs", &body).await?;
        let id = started["id"]
            .as_i64()
            .context("the daemon answered without a run id")?;
        eprintln!("benchmark {id} started (also on the Benchmarks page); Ctrl-C cancels and keeps what was measured");
        let detail = follow(&client, id).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&detail)?);
        } else {
            print!("{}", result_table(&detail));
        }
        Ok(match detail.summary.status {
            Status::Done => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        })
    })
}

fn target(args: &BenchArgs) -> anyhow::Result<Value> {
    if let Some(model) = &args.gateway {
        return Ok(json!({"kind": "gateway", "model": model}));
    }
    if let Some(url) = &args.url {
        let key = match &args.api_key_env {
            Some(var) => Some(std::env::var(var).with_context(|| {
                format!("--api-key-env: the environment variable {var} is not set")
            })?),
            None => None,
        };
        return Ok(json!({"kind": "url", "url": url, "model": args.model, "api_key": key}));
    }
    let Some(name) = &args.target else {
        bail!("what to benchmark? give an instance name (`rigdeck ps`), --start with a profile, --gateway MODEL or --url URL --model M");
    };
    let kind = if args.start { "profile" } else { "instance" };
    Ok(json!({"kind": kind, "name": name}))
}

fn spec(args: &BenchArgs) -> BenchSpec {
    BenchSpec {
        shapes: args.shapes.clone(),
        depths: args.depths.clone(),
        concurrency: args.concurrency.clone(),
        rates: args.rates.clone(),
        rate_requests: args.rate_requests,
        warm_runs: args.warm,
        prompts: if args.prompts == "realistic" {
            PromptSource::Realistic
        } else {
            PromptSource::Synthetic
        },
        api: if args.api == "completions" {
            Api::Completions
        } else {
            Api::Chat
        },
        unique_prefixes: !args.shared_prefixes,
        force_output: !args.no_force_output,
        temperature: args.temperature,
        slo: Slo {
            ttft_ms: args.slo_ttft_ms,
            tpot_ms: args.slo_tpot_ms,
            e2e_ms: args.slo_e2e_ms,
        },
        min_acceptance: args.min_acceptance,
        seed: args.seed,
        request_timeout_s: args.timeout,
    }
}

/// Polls the run, showing its progress on stderr (a bar on a terminal, plain lines in a file),
/// until it ends; Ctrl-C cancels it.
pub(super) async fn follow(client: &DaemonClient, id: i64) -> anyhow::Result<RunDetail> {
    let path = format!("/api/v1/bench/runs/{id}");
    let mut cancelled = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut line = ProgressLine::stderr();
    loop {
        let detail: RunDetail = serde_json::from_value(client.get(&path).await?)?;
        let (fraction, text) = progress(&detail.summary);
        if detail.summary.status != Status::Running {
            line.finish(fraction, &text);
            if let Some(error) = &detail.summary.error {
                eprintln!(
                    "benchmark {id} {}: {error}",
                    status_word(detail.summary.status)
                );
            }
            return Ok(detail);
        }
        line.update(fraction, &text);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = &mut ctrl_c, if !cancelled => {
                cancelled = true;
                line.interrupt();
                eprintln!("cancelling benchmark {id}…");
                client.post(&format!("{path}/cancel"), &json!({})).await?;
            }
        }
    }
}

/// How far the run is (0–1) and a bar with the runs done and the step being measured.
fn progress(run: &RunSummary) -> (f64, String) {
    const WIDTH: usize = 30;
    let done = run.runs_done.min(run.runs_total) as usize;
    let filled = if run.runs_total == 0 {
        0
    } else {
        done * WIDTH / run.runs_total as usize
    };
    let current = run.steps.iter().rev().find(|s| s.runs > 0);
    let step = current.map_or_else(String::new, |s| {
        let speed = s
            .aggregate_tps
            .map_or_else(String::new, |t| format!(", {t:.1} tok/s"));
        format!(" · {}{speed}", s.point)
    });
    let fraction = if run.runs_total == 0 {
        0.0
    } else {
        done as f64 / run.runs_total as f64
    };
    let text = format!(
        "[{}{}] {done}/{} runs{step}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        run.runs_total
    );
    (fraction, text)
}

fn status_word(status: Status) -> &'static str {
    match status {
        Status::Running => "is running",
        Status::Done => "finished",
        Status::Failed => "failed",
        Status::Cancelled => "was cancelled",
        Status::Aborted => "was aborted",
    }
}

/// A serving run's steps, a quality probe's answers, or llama-bench's tests.
fn result_table(run: &RunDetail) -> String {
    match run.summary.spec {
        RunSpec::LlamaBench(_) => return tests_table(run),
        RunSpec::Kld(_) => return kld_table(run),
        _ => {}
    }
    match &run.summary.quality {
        Some(quality) => answers_table(run, quality),
        None => steps_table(run),
    }
}

/// A KL-divergence run's figures, with their uncertainties and the words under them.
pub(super) fn kld_table(run: &RunDetail) -> String {
    let Some(k) = &run.summary.kld else {
        return String::new();
    };
    let s = &k.stats;
    let rows = vec![
        vec![
            "Mean KLD".into(),
            format!("{:.6} ± {:.6}", s.mean, s.mean_unc),
        ],
        vec!["Median KLD".into(), format!("{:.6}", s.median)],
        vec!["99 % KLD".into(), format!("{:.6}", s.p99)],
        vec!["Maximum KLD".into(), format!("{:.6}", s.max)],
        vec![
            "Same top token".into(),
            format!(
                "{:.3} ± {:.3} %",
                100.0 * s.same_top,
                100.0 * s.same_top_unc
            ),
        ],
        vec![
            "RMS Δp".into(),
            format!("{:.3} ± {:.3} %", 100.0 * s.rms_dp, 100.0 * s.rms_dp_unc),
        ],
        vec![
            "PPL ratio".into(),
            format!("{:.6} ± {:.6}", s.ppl_ratio, s.ppl_ratio_unc),
        ],
    ];
    format!(
        "{}{} tokens scored ({} windows of {}) against reference {} in {:.1} s\n{}\n",
        table::render(&["FIGURE", "VALUE"], &rows),
        k.scored_tokens,
        k.chunks,
        k.context,
        k.reference,
        k.wall_s,
        k.summary
    )
}

/// One line per llama-bench test: tokens/s with the spread over its repetitions.
fn tests_table(run: &RunDetail) -> String {
    let rows: Vec<Vec<String>> = run
        .tests
        .iter()
        .map(|t| {
            vec![
                t.test.clone(),
                t.samples_ts.len().to_string(),
                median_and_spread(t.stats),
                format!("{:.1} ± {:.1}", t.avg_ts, t.stddev_ts),
            ]
        })
        .collect();
    let mut out = table::render(
        &["TEST", "REPS", "TOK/S MEDIAN (P10–P90)", "MEAN ± STDEV"],
        &rows,
    );
    if let Some(dropped) = run
        .context
        .pointer("/llama_bench/dropped")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
    {
        let words: Vec<&str> = dropped.iter().filter_map(Value::as_str).collect();
        out += &format!(
            "profile flags llama-bench has no use for: {}\n",
            words.join(" ")
        );
    }
    out
}

/// Every question with the model's answer, then the pass rate overall and per category, each
/// with its 95 % interval; failed requests are marked and counted apart.
fn answers_table(run: &RunDetail, quality: &ProbeSummary) -> String {
    let rows: Vec<Vec<String>> = run
        .answers
        .iter()
        .map(|a| {
            let got: String = a.shown().chars().take(40).collect();
            let mark = match (&a.error, a.pass) {
                (Some(_), _) => "error",
                (None, true) => "yes",
                (None, false) => "no",
            };
            vec![a.id.clone(), a.expected.clone(), got, mark.to_owned()]
        })
        .collect();
    let mut out = table::render(&["QUESTION", "EXPECTED", "ANSWERED", "PASS"], &rows);
    out += &format!("{}\n", quality.headline());
    let categories: Vec<Vec<String>> = quality
        .by_category
        .iter()
        .map(|(category, (passed, graded))| {
            let rate = (*graded > 0).then(|| f64::from(*passed) / f64::from(*graded));
            let interval = quality.category_intervals.get(category).copied();
            let errors = quality.category_errors.get(category).copied().unwrap_or(0);
            vec![
                category.clone(),
                format!("{passed}/{graded}"),
                rate_text(rate, interval),
                errors.to_string(),
            ]
        })
        .collect();
    out += &table::render(
        &["CATEGORY", "PASSED", "RATE", "FAILED REQUESTS"],
        &categories,
    );
    out
}

/// `--compare BASE,OTHER`: both pass rates with their intervals on the shared questions, the
/// questions only one passed, and McNemar's verdict.
async fn compare(client: &DaemonClient, ids: &[i64]) -> anyhow::Result<ExitCode> {
    let [base, other] = ids else {
        bail!("--compare takes two probe ids, BASE,OTHER (`rigdeck bench --list` shows them)");
    };
    let value = client
        .get(&format!(
            "/api/v1/bench/compare-probes?base={base}&other={other}"
        ))
        .await?;
    let comparison: ProbeComparison = serde_json::from_value(value)?;
    print!("{}", comparison_text(*base, *other, &comparison));
    Ok(ExitCode::SUCCESS)
}

fn comparison_text(base: i64, other: i64, c: &ProbeComparison) -> String {
    let (base_name, other_name) = (format!("#{base}"), format!("#{other}"));
    let rows = vec![
        vec![
            base_name.clone(),
            format!("{}/{}", c.base.passed, c.shared),
            rate_text(c.base.pass_rate, c.base.interval),
            c.base_only.to_string(),
        ],
        vec![
            other_name.clone(),
            format!("{}/{}", c.other.passed, c.shared),
            rate_text(c.other.pass_rate, c.other.interval),
            c.other_only.to_string(),
        ],
    ];
    let mut out = table::render(&["PROBE", "PASSED", "RATE", "ONLY THIS ONE PASSED"], &rows);
    out += &format!(
        "{} shared questions ({} passed by both, {} by neither); {} left out (not asked of both, or a failed request)\n",
        c.shared, c.both_passed, c.neither, c.left_out
    );
    let verdict = c.sentence(&base_name, &other_name);
    out += &match c.verdict {
        Verdict::NotDistinguishable => {
            format!("{verdict}: McNemar's exact test cannot tell them apart on these questions\n")
        }
        _ => format!("{verdict}, McNemar's exact test\n"),
    };
    out
}

/// One line per step: medians over the warm runs, spreads, the cold run beside them.
fn steps_table(run: &RunDetail) -> String {
    let (spread, tail, median) = (median_and_spread, median_and_p99, median_of);
    let rows: Vec<Vec<String>> = run
        .results
        .iter()
        .map(|step| {
            let summary = step.summary.as_ref();
            let cold = step
                .runs
                .iter()
                .find(|r| r.cold)
                .and_then(|r| r.aggregate_tps);
            vec![
                step.point.to_string(),
                summary.map_or(0, |s| s.runs).to_string(),
                spread(summary.and_then(|s| s.aggregate_tps)),
                spread(summary.and_then(|s| s.stream_tps)),
                tail(summary.and_then(|s| s.ttft_ms)),
                median(summary.and_then(|s| s.tpot_ms)),
                tail(summary.and_then(|s| s.itl_ms)),
                median(summary.and_then(|s| s.e2e_ms)),
                cold.map_or_else(|| "–".to_owned(), |t| format!("{t:.1}")),
                summary
                    .and_then(|s| s.acceptance)
                    .map_or_else(|| "–".to_owned(), |a| format!("{:.0} %", a.median * 100.0)),
                summary.map_or(0, |s| s.failed_requests).to_string(),
            ]
        })
        .collect();
    let mut out = table::render(
        &[
            "STEP",
            "WARM",
            "AGGREGATE TOK/S",
            "STREAM TOK/S",
            "TTFT MS p50/p99",
            "TPOT MS",
            "ITL MS p50/p99",
            "E2E MS",
            "COLD TOK/S",
            "ACCEPT",
            "FAILED",
        ],
        &rows,
    );
    if !run.summary.exact_prompts {
        out.push_str(
            "prompt lengths are estimates: the endpoint has no tokenizer Rigdeck can ask\n",
        );
    }
    out
}

async fn list(client: &DaemonClient) -> anyhow::Result<ExitCode> {
    let runs: Vec<RunSummary> = serde_json::from_value(client.get("/api/v1/bench/runs").await?)?;
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let first = r.steps.first();
            let headline = match &r.quality {
                Some(q) => q.headline(),
                None => first.map_or_else(String::new, |s| {
                    let tps = s
                        .aggregate_tps
                        .map_or_else(|| "–".to_owned(), |t| format!("{t:.1}"));
                    format!("{}: {tps} tok/s", s.point)
                }),
            };
            vec![
                r.id.to_string(),
                r.name.clone(),
                r.kind.clone(),
                format!("{:?}", r.status).to_lowercase(),
                format!("{}/{}", r.runs_done, r.runs_total),
                headline,
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(
            &["ID", "NAME", "KIND", "STATUS", "DONE", "FIRST RESULT"],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

async fn show(client: &DaemonClient, id: i64, format: Option<&str>) -> anyhow::Result<ExitCode> {
    let base = format!("/api/v1/bench/runs/{id}");
    let text = match format {
        Some("md") => client.get_text(&format!("{base}/export?format=md")).await?,
        Some("csv") => {
            client
                .get_text(&format!("{base}/export?format=csv"))
                .await?
        }
        Some("csv-requests") => {
            client
                .get_text(&format!("{base}/export?format=csv&rows=requests"))
                .await?
        }
        Some(_) => serde_json::to_string_pretty(&client.get(&base).await?)? + "\n",
        None => {
            let detail: RunDetail = serde_json::from_value(client.get(&base).await?)?;
            result_table(&detail)
        }
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rigdeck_core::bench::quality::paired::PairedSide;
    use rigdeck_core::bench::quality::significance::wilson;

    #[test]
    fn a_comparison_prints_both_rates_the_split_and_the_verdict() {
        let side = |passed| PairedSide {
            passed,
            pass_rate: Some(f64::from(passed) / 35.0),
            interval: wilson(passed, 35),
        };
        let comparison = ProbeComparison {
            shared: 35,
            base: side(29),
            other: side(21),
            both_passed: 20,
            base_only: 9,
            other_only: 1,
            neither: 5,
            p_value: 22.0 / 1024.0,
            verdict: Verdict::BaseBetter,
            left_out: 2,
        };
        let text = comparison_text(3, 8, &comparison);
        assert!(text.contains("#3"), "{text}");
        assert!(text.contains("29/35"), "{text}");
        assert!(text.contains("83 % (95 % interval 67–92 %)"), "{text}");
        assert!(
            text.contains("35 shared questions (20 passed by both, 5 by neither); 2 left out"),
            "{text}"
        );
        assert!(
            text.contains("#3 better (p = 0.021), McNemar's exact test"),
            "{text}"
        );
    }
}
