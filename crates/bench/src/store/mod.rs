//! Benchmark runs in the daemon's SQLite database: a row per run (target, spec, context,
//! status), a row per step (its point, summary and the digest lists show), a row per run of a
//! step with its requests, and a row per telemetry point; and tuning runs with their trials
//! ([`tunes`]). A run's progress is appended as it comes: what each save writes does not grow
//! with what was saved before.

pub mod tunes;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use crate::kld::{KldResult, KldSpec};
use crate::llama_bench::{LlamaBenchSpec, LlamaBenchTest};
use crate::quality::{Answer, ProbeSpec, ProbeSummary};
use crate::result::{RunResult, StepResult, StepSummary};
use crate::spec::{BenchSpec, Point};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no benchmark run with id {0}: the Benchmarks page lists them")]
    NoRun(i64),
    #[error("no tuning run with id {0}: the Benchmarks page's Tuning tab lists them")]
    NoTune(i64),
    #[error("benchmark run {id} has a stored {what} this Rigdeck cannot read: {reason}")]
    Unreadable {
        id: i64,
        what: &'static str,
        reason: String,
    },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Done,
    /// Stopped by an error (the endpoint went down, every request of a run failed).
    Failed,
    /// Stopped by the user.
    Cancelled,
    /// The daemon stopped during the run.
    Aborted,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Aborted => "aborted",
        }
    }

    pub(crate) fn parse(text: &str) -> Status {
        match text {
            "running" => Status::Running,
            "done" => Status::Done,
            "cancelled" => Status::Cancelled,
            "aborted" => Status::Aborted,
            _ => Status::Failed,
        }
    }
}

/// One step in a run's list entry: where it stands and its headline medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDigest {
    pub point: Point,
    pub runs: u32,
    pub complete: bool,
    pub aggregate_tps: Option<f64>,
    pub stream_tps: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub failed_requests: u32,
}

impl StepDigest {
    pub fn of(step: &StepResult) -> Self {
        let summary = step.summary.as_ref();
        let median = |s: Option<crate::Stats>| s.map(|s| s.median);
        StepDigest {
            point: step.point,
            runs: step.runs.len() as u32,
            complete: step.complete,
            aggregate_tps: median(summary.and_then(|s| s.aggregate_tps)),
            stream_tps: median(summary.and_then(|s| s.stream_tps)),
            ttft_ms: median(summary.and_then(|s| s.ttft_ms)),
            failed_requests: summary.map_or(0, |s| s.failed_requests),
        }
    }
}

/// What a run does: a serving benchmark, a quality probe, llama-bench's tests or a KL divergence
/// against a reference (told apart by their fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RunSpec {
    Serving(BenchSpec),
    Quality(ProbeSpec),
    LlamaBench(LlamaBenchSpec),
    Kld(KldSpec),
}

impl RunSpec {
    /// Runs (serving) or questions (quality) the whole run has.
    fn total(&self) -> u32 {
        match self {
            RunSpec::Serving(spec) => spec.points().len() as u32 * spec.runs_per_step(),
            RunSpec::Quality(spec) => spec.total(),
            RunSpec::LlamaBench(spec) => spec.tests(),
            RunSpec::Kld(_) => 1,
        }
    }
}

/// Parts of a run done, of all.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct PartsDone {
    done: u32,
    total: u32,
}

/// A run as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: i64,
    pub name: String,
    /// `serving` or `quality`.
    pub kind: String,
    pub target: Value,
    pub spec: RunSpec,
    pub status: Status,
    pub error: Option<String>,
    /// Prompt lengths counted by the engine's tokenizer (else estimated); read it only when
    /// `prompts_known`.
    pub exact_prompts: bool,
    /// The engine's tokenizer was asked (false at the start of a run, before its first request;
    /// a daemon that does not say asked before it stored the run).
    #[serde(default = "asked_before_storing")]
    pub prompts_known: bool,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub steps: Vec<StepDigest>,
    /// A quality probe's pass counts.
    pub quality: Option<ProbeSummary>,
    /// A KL-divergence run's figures.
    #[serde(default)]
    pub kld: Option<KldResult>,
    /// Runs (serving) or questions (quality) done, of all.
    pub runs_done: u32,
    pub runs_total: u32,
}

fn asked_before_storing() -> bool {
    true
}

/// A run in full.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Engine build, command line, placement, model, hardware before and after.
    pub context: Value,
    /// Samples taken during the run.
    pub telemetry: Vec<Value>,
    pub results: Vec<StepResult>,
    /// A quality probe's graded answers.
    pub answers: Vec<Answer>,
    /// llama-bench's tests.
    pub tests: Vec<LlamaBenchTest>,
}

/// A new run's fixed facts.
pub struct NewRun<'a> {
    pub name: &'a str,
    pub kind: &'a str,
    pub target: &'a Value,
    pub spec: &'a RunSpec,
    pub context: &'a Value,
    /// `None`: not known until the engine's tokenizer is asked ([`BenchStore::set_exact_prompts`]).
    pub exact_prompts: Option<bool>,
    pub started_at_ms: i64,
}

const COLUMNS: &str = "id, name, kind, target, spec, answers, tests, kld, progress, status, error, exact_prompts, prompts_known, started_at_ms, finished_at_ms";

/// A step's own row: the step without its runs, which have rows of their own.
#[derive(Serialize)]
struct StepHeader<'a> {
    index: u32,
    point: &'a Point,
    runs: &'a [RunResult],
    summary: &'a Option<StepSummary>,
    complete: bool,
}

impl<'a> StepHeader<'a> {
    fn of(step: &'a StepResult) -> Self {
        StepHeader {
            index: step.index,
            point: &step.point,
            runs: &[],
            summary: &step.summary,
            complete: step.complete,
        }
    }
}

/// The benchmark tables over the daemon's database.
#[derive(Clone)]
pub struct BenchStore {
    pool: SqlitePool,
}

impl BenchStore {
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// Runs a daemon left 'running' when it stopped are marked aborted; their steps are kept.
    pub async fn mark_aborted(&self, now_ms: i64) -> Result<u64, StoreError> {
        mark_aborted(
            &self.pool,
            "bench_runs",
            "Rigdeck stopped during this run; the steps measured before are kept",
            now_ms,
        )
        .await
    }

    pub async fn create(&self, run: NewRun<'_>) -> Result<i64, StoreError> {
        let id = sqlx::query_scalar(
            "INSERT INTO bench_runs (name, kind, target, spec, context, status, exact_prompts, prompts_known, started_at_ms) \
             VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?) RETURNING id",
        )
        .bind(run.name)
        .bind(run.kind)
        .bind(run.target.to_string())
        .bind(json(run.spec))
        .bind(run.context.to_string())
        .bind(run.exact_prompts.unwrap_or(false))
        .bind(run.exact_prompts.is_some())
        .bind(run.started_at_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(id)
    }

    /// Saves a step as its latest run left it: the step's row (point, summary, digest) and
    /// that run's row. The runner reports a step after each run, so its earlier runs are
    /// stored already; a report with no new run (the step completing) writes only the step.
    pub async fn save_step(&self, id: i64, step: &StepResult) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT OR REPLACE INTO bench_steps (run_id, idx, result, digest) VALUES (?, ?, ?, ?)",
        )
        .bind(id)
        .bind(step.index)
        .bind(json(&StepHeader::of(step)))
        .bind(json(&StepDigest::of(step)))
        .execute(&mut *tx)
        .await?;
        if let Some(run) = step.runs.last() {
            sqlx::query(
                "INSERT OR IGNORE INTO bench_step_runs (run_id, step_idx, idx, result) VALUES (?, ?, ?, ?)",
            )
            .bind(id)
            .bind(step.index)
            .bind(run.index)
            .bind(json(run))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Appends a telemetry point taken during the run.
    pub async fn add_telemetry(&self, id: i64, point: &Value) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO bench_telemetry (run_id, point) VALUES (?, ?)")
            .bind(id)
            .bind(point.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A quality probe's answers so far.
    pub async fn save_answers(&self, id: i64, answers: &[Answer]) -> Result<(), StoreError> {
        self.set(id, "answers", json(answers)).await
    }

    /// Parts done of all, for a run that reports its own progress (a KL divergence's windows).
    pub async fn set_progress(&self, id: i64, done: u32, total: u32) -> Result<(), StoreError> {
        self.set(id, "progress", json(&PartsDone { done, total }))
            .await
    }

    /// A KL-divergence run's figures.
    pub async fn save_kld(&self, id: i64, kld: &KldResult) -> Result<(), StoreError> {
        self.set(id, "kld", json(kld)).await
    }

    /// llama-bench's results.
    pub async fn save_tests(&self, id: i64, tests: &[LlamaBenchTest]) -> Result<(), StoreError> {
        self.set(id, "tests", json(tests)).await
    }

    pub async fn set_context(&self, id: i64, context: &Value) -> Result<(), StoreError> {
        self.set(id, "context", context.to_string()).await
    }

    /// Whether prompt lengths came from the engine's tokenizer (known once the run starts).
    pub async fn set_exact_prompts(&self, id: i64, exact: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE bench_runs SET exact_prompts = ?, prompts_known = 1 WHERE id = ?")
            .bind(exact)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set(&self, id: i64, column: &'static str, value: String) -> Result<(), StoreError> {
        sqlx::query(&format!("UPDATE bench_runs SET {column} = ? WHERE id = ?"))
            .bind(value)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn finish(
        &self,
        id: i64,
        status: Status,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        finish(&self.pool, "bench_runs", id, status, error, now_ms).await
    }

    /// Every run, newest first.
    pub async fn list(&self) -> Result<Vec<RunSummary>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM bench_runs ORDER BY id DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        let digests: Vec<(i64, String)> =
            sqlx::query_as("SELECT run_id, digest FROM bench_steps ORDER BY run_id, idx")
                .fetch_all(&self.pool)
                .await?;
        let mut by_run: HashMap<i64, Vec<StepDigest>> = HashMap::new();
        for (run_id, digest) in digests {
            by_run
                .entry(run_id)
                .or_default()
                .extend(parse_digest(&digest));
        }
        rows.iter()
            .map(|row| summary(row, by_run.remove(&row.get("id")).unwrap_or_default()))
            .collect()
    }

    /// A run's list entry alone (its steps' runs are not read).
    pub async fn summary(&self, id: i64) -> Result<RunSummary, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM bench_runs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NoRun(id))?;
        summary(&row, self.digests(id).await?)
    }

    async fn digests(&self, id: i64) -> Result<Vec<StepDigest>, StoreError> {
        let digests: Vec<String> =
            sqlx::query_scalar("SELECT digest FROM bench_steps WHERE run_id = ? ORDER BY idx")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        Ok(digests.iter().filter_map(|d| parse_digest(d)).collect())
    }

    pub async fn get(&self, id: i64) -> Result<RunDetail, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, context FROM bench_runs WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NoRun(id))?;
        let telemetry: Vec<String> =
            sqlx::query_scalar("SELECT point FROM bench_telemetry WHERE run_id = ? ORDER BY id")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        Ok(RunDetail {
            answers: answers(&row),
            tests: tests(&row),
            summary: summary(&row, self.digests(id).await?)?,
            context: parse_or_null(&row.get::<String, _>("context")),
            telemetry: telemetry.iter().map(|p| parse_or_null(p)).collect(),
            results: self.steps(id).await?,
        })
    }

    /// A run's steps, each with its runs.
    async fn steps(&self, id: i64) -> Result<Vec<StepResult>, StoreError> {
        let unreadable = |what: &'static str| {
            move |e: serde_json::Error| StoreError::Unreadable {
                id,
                what,
                reason: e.to_string(),
            }
        };
        let headers: Vec<String> =
            sqlx::query_scalar("SELECT result FROM bench_steps WHERE run_id = ? ORDER BY idx")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        let mut steps = headers
            .iter()
            .map(|s| serde_json::from_str(s))
            .collect::<Result<Vec<StepResult>, _>>()
            .map_err(unreadable("step"))?;
        let runs: Vec<(u32, String)> = sqlx::query_as(
            "SELECT step_idx, result FROM bench_step_runs WHERE run_id = ? ORDER BY step_idx, idx",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        for (step_index, run) in runs {
            let run: RunResult = serde_json::from_str(&run).map_err(unreadable("step's run"))?;
            if let Some(step) = steps.iter_mut().find(|s| s.index == step_index) {
                step.runs.push(run);
            }
        }
        Ok(steps)
    }

    pub async fn delete(&self, id: i64) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM bench_runs WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoRun(id));
        }
        Ok(())
    }
}

/// A step's digest; one an earlier version never wrote is left out of the list.
fn parse_digest(text: &str) -> Option<StepDigest> {
    serde_json::from_str(text).ok()
}

fn summary(row: &SqliteRow, steps: Vec<StepDigest>) -> Result<RunSummary, StoreError> {
    let id: i64 = row.get("id");
    let spec = parse_spec(&row.get::<String, _>("spec")).map_err(|e| StoreError::Unreadable {
        id,
        what: "spec",
        reason: e.to_string(),
    })?;
    let answers = answers(row);
    let kld: Option<KldResult> = serde_json::from_str(&row.get::<String, _>("kld")).ok();
    let parts: Option<PartsDone> = serde_json::from_str(&row.get::<String, _>("progress")).ok();
    let quality = match &spec {
        RunSpec::Quality(probe) => Some(ProbeSummary::of(probe, &answers)),
        _ => None,
    };
    let runs_done = match &spec {
        RunSpec::Serving(_) => steps.iter().map(|s| s.runs).sum(),
        RunSpec::Quality(_) => answers.len() as u32,
        RunSpec::LlamaBench(_) => tests(row).len() as u32,
        RunSpec::Kld(_) => match (&kld, parts) {
            (Some(_), _) => parts.map_or(1, |p| p.total),
            (None, Some(p)) => p.done,
            (None, None) => 0,
        },
    };
    let runs_total = match (&spec, parts) {
        (RunSpec::Kld(_), Some(p)) => p.total,
        _ => spec.total(),
    };
    Ok(RunSummary {
        id,
        name: row.get("name"),
        kind: row.get("kind"),
        target: parse_or_null(&row.get::<String, _>("target")),
        runs_done,
        runs_total,
        quality,
        kld,
        steps,
        spec,
        status: Status::parse(&row.get::<String, _>("status")),
        error: row.get("error"),
        exact_prompts: row.get("exact_prompts"),
        prompts_known: row.get("prompts_known"),
        started_at_ms: row.get("started_at_ms"),
        finished_at_ms: row.get("finished_at_ms"),
    })
}

/// Questions a probe asked before they were generated: the 30 of the fixed set.
const FIXED_SET_QUESTIONS: u32 = 30;

/// A stored spec; a probe stored before the count was a setting asked the fixed set.
fn parse_spec(text: &str) -> Result<RunSpec, serde_json::Error> {
    let value: Value = serde_json::from_str(text)?;
    let mut spec: RunSpec = serde_json::from_value(value.clone())?;
    if let RunSpec::Quality(probe) = &mut spec {
        if value.get("count").is_none() {
            probe.count = FIXED_SET_QUESTIONS;
        }
    }
    Ok(spec)
}

fn answers(row: &SqliteRow) -> Vec<Answer> {
    serde_json::from_str(&row.get::<String, _>("answers")).unwrap_or_default()
}

/// Rows of `table` a stopped daemon left 'running' become 'aborted', with `why` as their error.
pub(crate) async fn mark_aborted(
    pool: &SqlitePool,
    table: &'static str,
    why: &str,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let done = sqlx::query(&format!(
        "UPDATE {table} SET status = 'aborted', finished_at_ms = ?, error = ? WHERE status = 'running'"
    ))
    .bind(now_ms)
    .bind(why)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// How a row of `table` ended.
pub(crate) async fn finish(
    pool: &SqlitePool,
    table: &'static str,
    id: i64,
    status: Status,
    error: Option<&str>,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "UPDATE {table} SET status = ?, error = ?, finished_at_ms = ? WHERE id = ?"
    ))
    .bind(status.as_str())
    .bind(error)
    .bind(now_ms)
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

fn tests(row: &SqliteRow) -> Vec<LlamaBenchTest> {
    serde_json::from_str(&row.get::<String, _>("tests")).unwrap_or_default()
}

pub(crate) fn parse_or_null(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Our own types always serialize.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_stored_before_questions_were_generated_counts_its_thirty() {
        let old = parse_spec(r#"{"max_tokens":2048,"concurrency":4,"request_timeout_s":600}"#)
            .expect("a spec");
        assert!(
            matches!(old, RunSpec::Quality(ref p) if p.count == 30 && p.seed == 1),
            "{old:?}"
        );
        let new = parse_spec(
            r#"{"max_tokens":2048,"concurrency":4,"request_timeout_s":600,"count":100,"seed":9}"#,
        )
        .expect("a spec");
        assert!(
            matches!(new, RunSpec::Quality(ref p) if p.count == 100 && p.seed == 9),
            "{new:?}"
        );
        assert!(matches!(
            parse_spec(r#"{"warm_runs":2}"#),
            Ok(RunSpec::Serving(_))
        ));
    }
}
