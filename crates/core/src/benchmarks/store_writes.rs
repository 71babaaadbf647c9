//! What the benchmark store writes as a long sweep goes, counted by triggers on every benchmark
//! table: each step and telemetry point appends the same amount however many came before,
//! and a run reads back whole (its steps with their runs, its telemetry in order).

use serde_json::{json, Value};
use sqlx::SqlitePool;

use crate::bench::request::Sample;
use crate::bench::result::{EngineDeltas, RunResult};
use crate::bench::spec::{Point, Slo};
use crate::bench::store::{BenchStore, NewRun, RunSpec};
use crate::bench::{BenchSpec, StepResult, StepSummary};
use crate::store::Store;

/// Records the text bytes of every row inserted or updated in a `bench_*` table in
/// `bench_written` (ids and other numbers gain digits as rows are added, and are left out).
async fn count_writes(pool: &SqlitePool) {
    sqlx::query("CREATE TABLE bench_written (bytes INTEGER NOT NULL)")
        .execute(pool)
        .await
        .expect("the counting table");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'bench%' AND name != 'bench_written'",
    )
    .fetch_all(pool)
    .await
    .expect("the benchmark tables");
    for table in tables {
        let columns: Vec<String> =
            sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .fetch_all(pool)
                .await
                .expect("the table's columns");
        let bytes = columns
            .iter()
            .map(|c| {
                format!("CASE typeof(NEW.\"{c}\") WHEN 'text' THEN length(NEW.\"{c}\") ELSE 0 END")
            })
            .collect::<Vec<_>>()
            .join(" + ");
        for event in ["INSERT", "UPDATE"] {
            sqlx::query(&format!(
                "CREATE TRIGGER count_{table}_{event} AFTER {event} ON {table} \
                 BEGIN INSERT INTO bench_written (bytes) VALUES ({bytes}); END"
            ))
            .execute(pool)
            .await
            .expect("a counting trigger");
        }
    }
}

/// (rows, bytes) written so far.
async fn written(pool: &SqlitePool) -> (i64, i64) {
    sqlx::query_as("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM bench_written")
        .fetch_one(pool)
        .await
        .expect("the count")
}

fn run_result(index: u32) -> RunResult {
    let sample = Sample {
        ok: true,
        ttft_ms: Some(20.0),
        e2e_ms: 120.0,
        tpot_ms: Some(10.0),
        prompt_tokens: Some(64),
        output_tokens: Some(11),
        ..Sample::default()
    };
    RunResult::new(
        index,
        120.0,
        vec![sample; 4],
        &Slo::default(),
        EngineDeltas::default(),
    )
}

/// One telemetry point, the same size at every step.
fn telemetry_point() -> Value {
    json!({"t_ms": 1000, "gpus": [{"index": 0, "util_pct": 97, "temp_c": 61.0, "sm_clock_mhz": 2520}], "cpu_util_pct": 12.5})
}

const STEPS: u32 = 40;
const RUNS_PER_STEP: u32 = 3;

#[tokio::test]
async fn a_long_sweep_writes_the_same_per_step_however_many_came_before() {
    let dir = tempfile::tempdir().expect("a folder");
    let store = Store::open(&dir.path().join("db.sqlite"))
        .await
        .expect("the database");
    let pool = store.pool().clone();
    let bench = BenchStore::new(pool.clone());
    let spec = RunSpec::Serving(BenchSpec::default());
    let id = bench
        .create(NewRun {
            name: "sweep",
            kind: "serving",
            target: &json!({"kind": "url"}),
            spec: &spec,
            context: &json!({}),
            exact_prompts: Some(true),
            started_at_ms: 0,
        })
        .await
        .expect("the run");
    count_writes(&pool).await;
    let point = BenchSpec::default().points()[0];
    let mut per_step = Vec::new();
    for index in 0..STEPS {
        let before = written(&pool).await;
        save_one_step(&bench, id, index, point).await;
        let after = written(&pool).await;
        per_step.push((after.0 - before.0, after.1 - before.1));
    }
    let (first_rows, first_bytes) = per_step[1];
    let (last_rows, last_bytes) = per_step[per_step.len() - 1];
    assert_eq!(first_rows, last_rows, "rows written per step: {per_step:?}");
    // The step's index in its JSON gains a digit; nothing else may grow.
    assert!(
        last_bytes <= first_bytes + 4,
        "bytes written per step grew from {first_bytes} to {last_bytes}: {per_step:?}"
    );

    let run = bench.get(id).await.expect("the run reads back");
    assert_eq!(run.results.len(), STEPS as usize);
    assert!(run
        .results
        .iter()
        .all(|s| s.complete && s.runs.len() == RUNS_PER_STEP as usize));
    assert_eq!(run.results[7].runs[2], run_result(2));
    assert_eq!(run.telemetry.len(), (STEPS * RUNS_PER_STEP) as usize);
    assert_eq!(run.telemetry[0], telemetry_point());
    let listed = bench.summary(id).await.expect("the list entry");
    assert_eq!(listed.steps.len(), STEPS as usize);
    assert_eq!(listed.runs_done, STEPS * RUNS_PER_STEP);
    bench.delete(id).await.expect("deleted");
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM bench_steps) + (SELECT COUNT(*) FROM bench_step_runs) \
         + (SELECT COUNT(*) FROM bench_telemetry)",
    )
    .fetch_one(&pool)
    .await
    .expect("the count");
    assert_eq!(left, 0, "a deleted run leaves no rows behind");
}

/// Saves a step as the runner reports it (after each run, then complete), with a telemetry
/// point per run.
async fn save_one_step(bench: &BenchStore, id: i64, index: u32, point: Point) {
    let mut step = StepResult {
        index,
        point,
        runs: Vec::new(),
        summary: None,
        complete: false,
    };
    for run in 0..RUNS_PER_STEP {
        step.runs.push(run_result(run));
        step.summary = Some(StepSummary::new(&step.runs, 0.0));
        bench.save_step(id, &step).await.expect("the step");
        bench
            .add_telemetry(id, &telemetry_point())
            .await
            .expect("the point");
    }
    step.complete = true;
    bench.save_step(id, &step).await.expect("the step");
}

#[tokio::test]
async fn a_run_is_not_said_to_estimate_prompt_lengths_before_the_tokenizer_was_asked() {
    let dir = tempfile::tempdir().expect("a folder");
    let store = Store::open(&dir.path().join("db.sqlite"))
        .await
        .expect("the database");
    let bench = BenchStore::new(store.pool().clone());
    let spec = RunSpec::Serving(BenchSpec::default());
    let id = bench
        .create(NewRun {
            name: "exact later",
            kind: "serving",
            target: &json!({"kind": "url"}),
            spec: &spec,
            context: &json!({}),
            exact_prompts: None,
            started_at_ms: 0,
        })
        .await
        .expect("the run");
    let started = bench.summary(id).await.expect("the run");
    assert!(!started.prompts_known, "not asked yet: {started:?}");
    let json = serde_json::to_value(&started).expect("JSON");
    assert_eq!(json["prompts_known"], false);

    bench.set_exact_prompts(id, true).await.expect("saved");
    let counted = bench.summary(id).await.expect("the run");
    assert!(
        counted.prompts_known && counted.exact_prompts,
        "{counted:?}"
    );
    bench.set_exact_prompts(id, false).await.expect("saved");
    let estimated = bench.summary(id).await.expect("the run");
    assert!(estimated.prompts_known && !estimated.exact_prompts);
}
