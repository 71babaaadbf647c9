//! Tuning runs in the database: the profile and spec, every trial as it ends (its values, the
//! benchmark run that measured it, how it came out and the decision on it, its KL divergence
//! under a quality floor), the best values, and the profile they were saved as.

use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use super::{json, Status, StoreError};
use crate::stats::Stats;
use crate::tune::{Assignment, Decision, TuneSpec};

/// How a trial came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialOutcome {
    /// Restarting the engine or measuring it.
    Running,
    /// Every warm run measured.
    Measured,
    /// The engine ran out of GPU memory while loading.
    OutOfMemory,
    /// The engine ended (or never became ready) for another reason.
    Crashed,
    /// The engine was not started (refused) or the benchmark failed.
    Failed,
    /// The user stopped the tuning during this trial.
    Cancelled,
}

/// One trial: the profile with some knobs changed, restarted and benchmarked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub index: u32,
    /// Knobs changed from the profile (none: the baseline).
    pub values: Assignment,
    pub outcome: TrialOutcome,
    /// The benchmark run that measured it (its steps, context and telemetry).
    pub run_id: Option<i64>,
    /// The engine's command line for this trial.
    pub command_line: Option<String>,
    /// The objective across the warm runs.
    pub objective: Option<Stats>,
    /// Against the best so far, with the figures.
    pub decision: Option<Decision>,
    /// Why it did not measure (the engine's own explanation when it crashed).
    pub error: Option<String>,
    /// Its KL divergence from the quality floor's reference (tunings with a floor only).
    #[serde(default)]
    pub kld: Option<TrialKld>,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

/// A trial's KL divergence from the floor's reference and the bound it was held to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialKld {
    pub mean: f64,
    pub mean_unc: f64,
    /// Share of tokens whose top candidate is the reference's (0–1).
    pub same_top: f64,
    /// The KLD benchmark run that measured it.
    pub run_id: i64,
    /// The earlier trial whose figure this is: only knobs that leave the numbers alone
    /// (threads, batch sizes, placement) differ from it, so it was not measured again.
    pub same_numerics_as: Option<u32>,
    /// The highest mean allowed; none when no bound could be set (the base was not measured).
    pub bound: Option<f64>,
    pub within: Option<bool>,
}

/// The best trial and how far it is from the profile as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub trial: u32,
    pub values: Assignment,
    pub objective: Stats,
    /// The baseline's figure.
    pub baseline: Stats,
    /// Median against the baseline's, in percent (positive is better whatever the direction).
    pub gain_percent: f64,
    /// Its KL divergence, under the quality floor's bound (tunings with a floor only).
    #[serde(default)]
    pub kld: Option<TrialKld>,
}

/// A tuning run as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneView {
    pub id: i64,
    pub name: String,
    pub profile: String,
    pub spec: TuneSpec,
    pub status: Status,
    pub error: Option<String>,
    pub trials: Vec<Trial>,
    /// At most this many trials (fewer when a walk stops early).
    pub trials_planned: u32,
    /// Set once a trial beat the baseline beyond the noise.
    pub best: Option<Best>,
    /// The profile the best values were saved as.
    pub saved_profile: Option<String>,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

const COLUMNS: &str =
    "id, name, profile, spec, trials, best, saved_profile, status, error, started_at_ms, finished_at_ms";

/// The tuning table over the daemon's database.
#[derive(Clone)]
pub struct TuneStore {
    pool: SqlitePool,
}

impl TuneStore {
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// Tunings a daemon left 'running' when it stopped are marked aborted; trials are kept.
    pub async fn mark_aborted(&self, now_ms: i64) -> Result<u64, StoreError> {
        super::mark_aborted(
            &self.pool,
            "bench_tunes",
            "Rigdeck stopped during this tuning; the trials measured before are kept",
            now_ms,
        )
        .await
    }

    pub async fn create(
        &self,
        name: &str,
        profile: &str,
        spec: &TuneSpec,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let id = sqlx::query_scalar(
            "INSERT INTO bench_tunes (name, profile, spec, status, started_at_ms) \
             VALUES (?, ?, ?, 'running', ?) RETURNING id",
        )
        .bind(name)
        .bind(profile)
        .bind(json(spec))
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(id)
    }

    /// The trials so far and the best among them.
    pub async fn save_trials(
        &self,
        id: i64,
        trials: &[Trial],
        best: Option<&Best>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE bench_tunes SET trials = ?, best = ? WHERE id = ?")
            .bind(json(trials))
            .bind(best.map(json))
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
        super::finish(&self.pool, "bench_tunes", id, status, error, now_ms).await
    }

    pub async fn set_saved_profile(&self, id: i64, profile: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE bench_tunes SET saved_profile = ? WHERE id = ?")
            .bind(profile)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Every tuning, newest first.
    pub async fn list(&self) -> Result<Vec<TuneView>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM bench_tunes ORDER BY id DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(view).collect()
    }

    pub async fn get(&self, id: i64) -> Result<TuneView, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM bench_tunes WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NoTune(id))?;
        view(&row)
    }

    /// Deletes the tuning; its trials' benchmark runs stay in the run history.
    pub async fn delete(&self, id: i64) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM bench_tunes WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoTune(id));
        }
        Ok(())
    }
}

fn view(row: &SqliteRow) -> Result<TuneView, StoreError> {
    let id: i64 = row.get("id");
    let unreadable = |what: &'static str| {
        move |e: serde_json::Error| StoreError::Unreadable {
            id,
            what,
            reason: e.to_string(),
        }
    };
    let spec: TuneSpec =
        serde_json::from_str(&row.get::<String, _>("spec")).map_err(unreadable("tuning spec"))?;
    let trials: Vec<Trial> = serde_json::from_str(&row.get::<String, _>("trials"))
        .map_err(unreadable("list of trials"))?;
    let best = row
        .get::<Option<String>, _>("best")
        .map(|b| serde_json::from_str(&b))
        .transpose()
        .map_err(unreadable("best trial"))?;
    Ok(TuneView {
        id,
        name: row.get("name"),
        profile: row.get("profile"),
        trials_planned: (spec.trials_needed() as u32).min(spec.max_trials),
        spec,
        status: Status::parse(&row.get::<String, _>("status")),
        error: row.get("error"),
        trials,
        best,
        saved_profile: row.get("saved_profile"),
        started_at_ms: row.get("started_at_ms"),
        finished_at_ms: row.get("finished_at_ms"),
    })
}
