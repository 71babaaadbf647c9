//! A stored run written out: CSV (a row per run of every step, or per request), and a Markdown
//! report (what ran where, then one table row per step with medians and spreads over the warm
//! runs and the cold run beside them). JSON is the stored run itself.

use std::fmt::Write;

use serde_json::Value;

use crate::quality::{rate_text, ProbeSpec, ProbeSummary};
use crate::result::{RunResult, StepResult};
use crate::spec::{BenchSpec, Load};
use crate::stats::Stats;
use crate::store::{RunDetail, RunSpec};

const RUN_COLUMNS: &str = "step,prompt_tokens,output_tokens,depth,concurrency,rate_rps,run,cold,wall_ms,ok,failed,prompt_tokens_total,output_tokens_total,aggregate_tps,total_tps,stream_tps,ttft_ms,prefill_tps,engine_decode_tps,drafted,accepted,acceptance,cache_hit_rate,goodput_rps,request_rps";
const REQUEST_COLUMNS: &str = "step,run,request,offset_ms,ok,error,ttft_ms,tpot_ms,e2e_ms,prompt_tokens,output_tokens,cached_tokens,chunks,engine_decode_tps,draft_tokens,draft_accepted";

const TEST_COLUMNS: &str = "test,n_prompt,n_gen,n_depth,repetition,tokens_per_s,avg_ts,stddev_ts";

/// One row per run of every step (per repetition of every test for llama-bench).
pub fn runs_csv(run: &RunDetail) -> String {
    if matches!(run.summary.spec, RunSpec::LlamaBench(_)) {
        return tests_csv(run);
    }
    let mut out = format!("{RUN_COLUMNS}\n");
    for step in &run.results {
        for r in &step.runs {
            let acceptance = r.acceptance;
            let cells = [
                step_cells(step),
                vec![
                    r.index.to_string(),
                    r.cold.to_string(),
                    num(Some(r.wall_ms)),
                    r.ok.to_string(),
                    r.failed.to_string(),
                    r.prompt_tokens.to_string(),
                    r.output_tokens.to_string(),
                    num(r.aggregate_tps),
                    num(r.total_tps),
                    num(r.stream_tps),
                    num(r.ttft_ms),
                    num(r.prefill_tps),
                    num(r.engine_decode_tps),
                    opt(acceptance.map(|a| a.drafted)),
                    opt(acceptance.map(|a| a.accepted)),
                    num(acceptance.and_then(|a| a.rate())),
                    num(r.cache_hit_rate),
                    num(r.goodput_rps),
                    num(r.request_rps),
                ],
            ]
            .concat();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    out
}

/// One row per repetition of every llama-bench test.
fn tests_csv(run: &RunDetail) -> String {
    let mut out = format!("{TEST_COLUMNS}\n");
    for t in &run.tests {
        for (i, tps) in t.samples_ts.iter().enumerate() {
            let cells = [
                quote(&t.test),
                t.n_prompt.to_string(),
                t.n_gen.to_string(),
                t.n_depth.to_string(),
                (i + 1).to_string(),
                num(Some(*tps)),
                num(Some(t.avg_ts)),
                num(Some(t.stddev_ts)),
            ];
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    out
}

/// One row per request of every run.
pub fn requests_csv(run: &RunDetail) -> String {
    let mut out = format!("{REQUEST_COLUMNS}\n");
    for step in &run.results {
        for r in &step.runs {
            for (i, s) in r.requests.iter().enumerate() {
                let cells = [
                    step.index.to_string(),
                    r.index.to_string(),
                    i.to_string(),
                    num(Some(s.offset_ms)),
                    s.ok.to_string(),
                    quote(s.error.as_deref().unwrap_or("")),
                    num(s.ttft_ms),
                    num(s.tpot_ms),
                    num(Some(s.e2e_ms)),
                    opt(s.prompt_tokens),
                    opt(s.output_tokens),
                    opt(s.cached_tokens),
                    s.chunks.to_string(),
                    num(s.engine_decode_tps),
                    opt(s.draft_tokens),
                    opt(s.draft_accepted),
                ];
                out.push_str(&cells.join(","));
                out.push('\n');
            }
        }
    }
    out
}

fn step_cells(step: &StepResult) -> Vec<String> {
    let (concurrency, rate) = match step.point.load {
        Load::Concurrency(c) => (c.to_string(), String::new()),
        Load::Rate(r) => (String::new(), num(Some(r))),
    };
    vec![
        step.index.to_string(),
        step.point.shape.prompt_tokens.to_string(),
        step.point.shape.output_tokens.to_string(),
        step.point.depth.to_string(),
        concurrency,
        rate,
    ]
}

fn num(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v:.3}"))
}

fn opt(value: Option<u64>) -> String {
    value.map_or_else(String::new, |v| v.to_string())
}

/// A CSV field, quoted when it holds a separator, a quote or a line break.
fn quote(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// A readable report of the run.
pub fn markdown(run: &RunDetail) -> String {
    let s = &run.summary;
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", s.name);
    let _ = writeln!(
        out,
        "- Status: {:?}{}",
        s.status,
        s.error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "- Target: {}", compact(&s.target));
    for (label, pointer) in [
        ("Engine", "/engine"),
        ("Command line", "/command_line"),
        ("Model", "/model"),
        ("GPUs before", "/hardware_before/gpus"),
        ("GPUs after", "/hardware_after/gpus"),
        ("CPU", "/hardware_before/cpu"),
    ] {
        if let Some(value) = run.context.pointer(pointer).filter(|v| !v.is_null()) {
            let _ = writeln!(out, "- {label}: `{}`", compact(value).replace('`', "'"));
        }
    }
    match &s.spec {
        RunSpec::Serving(spec) => serving_section(&mut out, run, spec),
        RunSpec::Quality(spec) => quality_section(&mut out, run, spec),
        RunSpec::LlamaBench(_) => llama_bench_section(&mut out, run),
        RunSpec::Kld(_) => kld_section(&mut out, run),
    }
    out
}

/// A KL-divergence run's figures with their uncertainties, as llama-perplexity printed them.
fn kld_section(out: &mut String, run: &RunDetail) {
    let Some(k) = &run.summary.kld else {
        let _ = writeln!(out, "\nKL divergence: no result (the run did not finish).");
        return;
    };
    let _ = writeln!(
        out,
        "\nKL divergence against reference {} over {} scored tokens ({} windows of {}), {:.1} s: {}.\n",
        k.reference, k.scored_tokens, k.chunks, k.context, k.wall_s, k.summary
    );
    let s = &k.stats;
    let _ = writeln!(out, "| Figure | Value |\n|---|---|");
    for (label, value) in [
        ("Mean KLD", format!("{:.6} ± {:.6}", s.mean, s.mean_unc)),
        ("Median KLD", format!("{:.6}", s.median)),
        ("99 % KLD", format!("{:.6}", s.p99)),
        ("Maximum KLD", format!("{:.6}", s.max)),
        (
            "Same top token",
            format!(
                "{:.3} ± {:.3} %",
                100.0 * s.same_top,
                100.0 * s.same_top_unc
            ),
        ),
        (
            "RMS Δp",
            format!("{:.3} ± {:.3} %", 100.0 * s.rms_dp, 100.0 * s.rms_dp_unc),
        ),
        (
            "PPL(Q)/PPL(base)",
            format!("{:.6} ± {:.6}", s.ppl_ratio, s.ppl_ratio_unc),
        ),
    ] {
        let _ = writeln!(out, "| {label} | {value} |");
    }
}

fn serving_section(out: &mut String, run: &RunDetail, spec: &BenchSpec) {
    let _ = writeln!(
        out,
        "- Prompts: {:?}, {}; {} warm runs after one cold run per step; output {}forced",
        spec.prompts,
        if run.summary.exact_prompts {
            "lengths counted by the engine's tokenizer"
        } else {
            "lengths estimated (no tokenizer)"
        },
        spec.warm_runs,
        if spec.force_output { "" } else { "not " },
    );
    let _ = writeln!(
        out,
        "\nMedians over the warm runs, p10–p90 in brackets; the cold run beside them.\n"
    );
    let _ = writeln!(out, "| Step | Runs | Aggregate tok/s | Per stream tok/s | TTFT ms (p50 / p99) | TPOT ms | ITL ms (p50 / p99) | E2E ms | Prefill tok/s | Acceptance | Cold: aggregate tok/s, TTFT ms | Failed |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for step in &run.results {
        let _ = writeln!(out, "{}", step_row(step));
    }
}

/// The pass rate with its interval, per category, then every question with what the model
/// answered; failed requests are counted apart.
fn quality_section(out: &mut String, run: &RunDetail, spec: &ProbeSpec) {
    let summary = ProbeSummary::of(spec, &run.answers);
    let _ = writeln!(
        out,
        "\nQuality probe ({} generated questions, seed {}), at temperature 0: {}.\n",
        spec.count,
        spec.seed,
        summary.headline()
    );
    let _ = writeln!(
        out,
        "| Category | Passed | Rate (95 % interval) | Failed requests |\n|---|---|---|---|"
    );
    for (category, (passed, graded)) in &summary.by_category {
        let rate = (*graded > 0).then(|| f64::from(*passed) / f64::from(*graded));
        let interval = summary.category_intervals.get(category).copied();
        let errors = summary.category_errors.get(category).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "| {category} | {passed} / {graded} | {} | {errors} |",
            rate_text(rate, interval)
        );
    }
    let _ = writeln!(
        out,
        "\n| Question | Expected | Answered | Pass |\n|---|---|---|---|"
    );
    for a in &run.answers {
        let got = a.shown();
        let cell = |t: &str| t.replace('|', "\\|").replace('\n', " ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            a.id,
            cell(&a.expected),
            cell(&got),
            if a.pass { "yes" } else { "no" }
        );
    }
}

/// llama-bench's tests: tokens/s per test with the spread over its repetitions.
fn llama_bench_section(out: &mut String, run: &RunDetail) {
    if let Some(dropped) = run
        .context
        .pointer("/llama_bench/dropped")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
    {
        let _ = writeln!(
            out,
            "- Profile flags llama-bench has no use for: `{}`",
            compact(&Value::Array(dropped.clone()))
        );
    }
    let _ = writeln!(
        out,
        "\nllama-bench (inside the engine, no HTTP): tokens/s per test, median over its repetitions with p10–p90.\n"
    );
    let _ = writeln!(
        out,
        "| Test | Depth | Repetitions | tok/s | Mean ± stdev |\n|---|---|---|---|---|"
    );
    for t in &run.tests {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} ± {:.1} |",
            t.test,
            t.n_depth,
            t.samples_ts.len(),
            median_and_spread(t.stats),
            t.avg_ts,
            t.stddev_ts
        );
    }
}

fn step_row(step: &StepResult) -> String {
    let Some(summary) = &step.summary else {
        return format!("| {} | 0 | | | | | | | | | | |", step.point);
    };
    let (spread, median, tail) = (median_and_spread, median_of, median_and_p99);
    let acceptance = summary.acceptance.map_or_else(String::new, |a| {
        let below = summary.runs_below_acceptance.unwrap_or(0);
        format!("{:.0} % ({below} runs below)", a.median * 100.0)
    });
    let cold = step
        .runs
        .iter()
        .find(|r| r.cold)
        .map_or_else(String::new, cold_cell);
    format!(
        "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        step.point,
        if step.complete { "" } else { " (incomplete)" },
        summary.runs,
        spread(summary.aggregate_tps),
        spread(summary.stream_tps),
        tail(summary.ttft_ms),
        median(summary.tpot_ms),
        tail(summary.itl_ms),
        median(summary.e2e_ms),
        median(summary.prefill_tps),
        acceptance,
        cold,
        summary.failed_requests,
    )
}

/// `median (p10–p90)`, or a dash when there is nothing to summarize.
pub fn median_and_spread(stats: Option<Stats>) -> String {
    stats.map_or_else(
        || "–".to_owned(),
        |s| format!("{:.1} ({:.1}–{:.1})", s.median, s.p10, s.p90),
    )
}

/// `median / p99`, or a dash.
pub fn median_and_p99(stats: Option<Stats>) -> String {
    stats.map_or_else(
        || "–".to_owned(),
        |s| format!("{:.1} / {:.1}", s.median, s.p99),
    )
}

/// The median alone, or a dash.
pub fn median_of(stats: Option<Stats>) -> String {
    stats.map_or_else(|| "–".to_owned(), |s| format!("{:.1}", s.median))
}

fn cold_cell(run: &RunResult) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"));
    format!("{}, {}", f(run.aggregate_tps), f(run.ttft_ms))
}

fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_separators_are_quoted() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
