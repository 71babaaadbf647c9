//! One row per request the gateway served or refused: who, which model, the engine's token
//! counts, time to first token, decode speed, outcome. Written by one task in batches so a
//! request never waits on the database; summed up by the database as totals, per model, per
//! key and over time (a bounded answer however many rows a range holds); deleted once older
//! than the retention the settings give.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};
use tokio::sync::{mpsc, oneshot};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The engine answered 2xx and, when streaming, the stream ended normally.
    Ok,
    /// The engine answered with an error status or an error event.
    Error,
    /// The client went away before the end (the engine's request was cancelled with it).
    Cancelled,
    /// The engine was unreachable or stopped mid-reply.
    EngineError,
    /// The gateway refused it (bad body, unknown model, model unavailable).
    Refused,
    /// The model's concurrency limit was reached.
    RateLimited,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::EngineError => "engine_error",
            Self::Refused => "refused",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// One request, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRecord {
    pub at_ms: i64,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<i64>,
    pub key_name: String,
    pub route: String,
    pub stream: bool,
    pub status: Outcome,
    pub http_status: u16,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the engine took from its cache.
    pub cached_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub decode_tps: Option<f64>,
    pub duration_ms: f64,
    pub error: Option<String>,
    /// The paired rig that answered (`None`: this daemon's own engine, or nobody).
    pub rig: Option<String>,
}

enum Message {
    Record(Box<UsageRecord>),
    Flushed(oneshot::Sender<()>),
}

/// Records waiting for the writer at most: a database that cannot keep up costs records, not
/// the daemon's memory.
pub const USAGE_QUEUE: usize = 10_000;

/// The writer's mailbox; cheap to clone.
#[derive(Clone)]
pub struct UsageLog {
    tx: mpsc::Sender<Message>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl UsageLog {
    /// Starts the writer task (it ends when every `UsageLog` is dropped).
    pub fn spawn(pool: SqlitePool) -> Self {
        Self::with_queue(pool, USAGE_QUEUE)
    }

    fn with_queue(pool: SqlitePool, capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        tokio::spawn(write_loop(pool, rx));
        Self {
            tx,
            dropped: Default::default(),
        }
    }

    /// Queues a record; with the queue full (the database stalled) it is counted and dropped.
    pub fn record(&self, record: UsageRecord) {
        use std::sync::atomic::Ordering;
        // Closed only once the daemon is shutting down; the record is lost with it.
        if let Err(mpsc::error::TrySendError::Full(_)) =
            self.tx.try_send(Message::Record(Box::new(record)))
        {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped == 1 || dropped.is_multiple_of(1_000) {
                tracing::warn!(
                    "gateway usage: {dropped} record(s) dropped: the database is not keeping up"
                );
            }
        }
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves once every record sent before it is in the database.
    pub async fn flushed(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flushed(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

async fn write_loop(pool: SqlitePool, mut rx: mpsc::Receiver<Message>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 256).await > 0 {
        let mut records = Vec::new();
        let mut waiting = Vec::new();
        for message in batch.drain(..) {
            match message {
                Message::Record(record) => records.push(record),
                Message::Flushed(done) => waiting.push(done),
            }
        }
        if let Err(err) = insert(&pool, &records).await {
            tracing::warn!(
                "could not record {} gateway request(s): {err}",
                records.len()
            );
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

async fn insert(pool: &SqlitePool, records: &[Box<UsageRecord>]) -> Result<(), sqlx::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    for r in records {
        sqlx::query(
            "INSERT INTO gateway_requests (at_ms, model, key_id, key_name, route, stream, status, \
             http_status, prompt_tokens, completion_tokens, cached_tokens, ttft_ms, decode_tps, \
             duration_ms, error, rig) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(r.at_ms)
        .bind(&r.model)
        .bind(r.key_id)
        .bind(&r.key_name)
        .bind(&r.route)
        .bind(r.stream)
        .bind(r.status.as_str())
        .bind(i64::from(r.http_status))
        .bind(r.prompt_tokens.map(clamp_i64))
        .bind(r.completion_tokens.map(clamp_i64))
        .bind(r.cached_tokens.map(clamp_i64))
        .bind(r.ttft_ms)
        .bind(r.decode_tps)
        .bind(r.duration_ms)
        .bind(&r.error)
        .bind(&r.rig)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Requests and tokens of one group.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub errors: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelUsage {
    pub model: String,
    #[serde(flatten)]
    pub totals: Totals,
    pub median_ttft_ms: Option<f64>,
    pub median_decode_tps: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyUsage {
    pub key_id: Option<i64>,
    pub key_name: String,
    #[serde(flatten)]
    pub totals: Totals,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub t: i64,
    pub model: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub bucket_ms: i64,
    pub points: Vec<SeriesPoint>,
}

/// What the Usage page shows for a time range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageSummary {
    pub totals: Totals,
    pub by_model: Vec<ModelUsage>,
    pub by_key: Vec<KeyUsage>,
    pub series: Series,
    /// The latest requests, newest first.
    pub recent: Vec<UsageRecord>,
}

/// Models summed up one by one; the rest of a range's models (names no profile has, sent by a
/// client) are summed up together under [`OTHER_MODELS`], so the answer stays small.
const SHOWN_MODELS: i64 = 50;
/// The name the models past [`SHOWN_MODELS`] are summed up under.
pub const OTHER_MODELS: &str = "(other models)";
const RECENT: i64 = 100;

/// The range's rows with each model's name, or [`OTHER_MODELS`] past the busiest ones
/// (`?1` from, `?2` to, `?3` how many models, `?4` the others' name).
const LABELLED: &str = "WITH shown AS (
    SELECT model FROM gateway_requests WHERE at_ms >= ?1 AND at_ms < ?2
    GROUP BY model ORDER BY COUNT(*) DESC, model LIMIT ?3),
  labelled AS (
    SELECT at_ms, status, prompt_tokens, completion_tokens, ttft_ms, decode_tps,
      CASE WHEN model IN (SELECT model FROM shown) THEN model ELSE ?4 END AS model
    FROM gateway_requests WHERE at_ms >= ?1 AND at_ms < ?2)";

/// The sums of a group, as SQL columns. A request the client cancelled (a chat's Stop, an
/// agent that hung up) is no error.
const SUMS: &str =
    "COUNT(*), TOTAL(status NOT IN ('ok', 'cancelled')), TOTAL(COALESCE(prompt_tokens, 0)), \
    TOTAL(COALESCE(completion_tokens, 0))";

/// Usage between `from_ms` (inclusive) and `to_ms` (exclusive), summed up by the database: a
/// page's worth of groups and the latest requests, however many rows the range holds.
pub async fn summary(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
) -> Result<UsageSummary, sqlx::Error> {
    let bucket_ms = bucket_for(to_ms.saturating_sub(from_ms));
    Ok(UsageSummary {
        totals: totals(pool, from_ms, to_ms).await?,
        by_model: by_model(pool, from_ms, to_ms).await?,
        by_key: by_key(pool, from_ms, to_ms).await?,
        series: Series {
            bucket_ms,
            points: series(pool, from_ms, to_ms, bucket_ms).await?,
        },
        recent: recent(pool, from_ms, to_ms).await?,
    })
}

/// A group's sums read from the four [`SUMS`] columns starting at `first`.
fn sums(row: &SqliteRow, first: usize) -> Totals {
    let count = |i: usize| unsigned_total(row.get::<f64, _>(first + i));
    Totals {
        requests: unsigned(row.get::<i64, _>(first)),
        errors: count(1),
        prompt_tokens: count(2),
        completion_tokens: count(3),
    }
}

/// SQLite's TOTAL() is a float (it cannot overflow); counts and token sums are whole.
fn unsigned_total(total: f64) -> u64 {
    if total.is_finite() && total > 0.0 {
        total as u64
    } else {
        0
    }
}

async fn totals(pool: &SqlitePool, from_ms: i64, to_ms: i64) -> Result<Totals, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {SUMS} FROM gateway_requests WHERE at_ms >= ? AND at_ms < ?"
    ))
    .bind(from_ms)
    .bind(to_ms)
    .fetch_one(pool)
    .await?;
    Ok(sums(&row, 0))
}

async fn by_model(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<ModelUsage>, sqlx::Error> {
    let rows = labelled_query(&format!(
        "{LABELLED} SELECT model, {SUMS} FROM labelled GROUP BY model ORDER BY model"
    ))
    .bind_range(from_ms, to_ms)
    .fetch_all(pool)
    .await?;
    let ttft = medians(pool, from_ms, to_ms, "ttft_ms").await?;
    let tps = medians(pool, from_ms, to_ms, "decode_tps").await?;
    Ok(rows
        .iter()
        .map(|row| {
            let model: String = row.get("model");
            ModelUsage {
                totals: sums(row, 1),
                median_ttft_ms: ttft.get(&model).copied(),
                median_decode_tps: tps.get(&model).copied(),
                model,
            }
        })
        .collect())
}

/// Each model's median of `column` (the mean of the middle two when their number is even).
async fn medians(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
    column: &'static str,
) -> Result<BTreeMap<String, f64>, sqlx::Error> {
    let rows = labelled_query(&format!(
        "{LABELLED} SELECT model, AVG(value) AS median FROM (
            SELECT model, {column} AS value,
              ROW_NUMBER() OVER (PARTITION BY model ORDER BY {column}) AS position,
              COUNT(*) OVER (PARTITION BY model) AS count
            FROM labelled WHERE {column} IS NOT NULL)
         WHERE position IN ((count + 1) / 2, (count + 2) / 2) GROUP BY model"
    ))
    .bind_range(from_ms, to_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .iter()
        .map(|row| (row.get("model"), row.get("median")))
        .collect())
}

async fn by_key(pool: &SqlitePool, from_ms: i64, to_ms: i64) -> Result<Vec<KeyUsage>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT key_id, key_name, {SUMS} FROM gateway_requests WHERE at_ms >= ? AND at_ms < ? \
         GROUP BY key_id, key_name ORDER BY key_id, key_name"
    ))
    .bind(from_ms)
    .bind(to_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .iter()
        .map(|row| KeyUsage {
            key_id: row.get("key_id"),
            key_name: row.get("key_name"),
            totals: sums(row, 2),
        })
        .collect())
}

async fn series(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
    bucket_ms: i64,
) -> Result<Vec<SeriesPoint>, sqlx::Error> {
    let rows = labelled_query(&format!(
        "{LABELLED} SELECT ?1 + (at_ms - ?1) / ?5 * ?5 AS t, model, {SUMS} FROM labelled \
         GROUP BY t, model ORDER BY t, model"
    ))
    .bind_range(from_ms, to_ms)
    .bind(bucket_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let totals = sums(row, 2);
            SeriesPoint {
                t: row.get("t"),
                model: row.get("model"),
                requests: totals.requests,
                prompt_tokens: totals.prompt_tokens,
                completion_tokens: totals.completion_tokens,
            }
        })
        .collect())
}

fn labelled_query(sql: &str) -> LabelledQuery<'_> {
    LabelledQuery(sqlx::query(sql))
}

/// A query over [`LABELLED`], waiting for its range.
struct LabelledQuery<'q>(sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>);

impl<'q> LabelledQuery<'q> {
    fn bind_range(
        self,
        from_ms: i64,
        to_ms: i64,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        self.0
            .bind(from_ms)
            .bind(to_ms)
            .bind(SHOWN_MODELS)
            .bind(OTHER_MODELS)
    }
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// About 60 points over the range, on a round step (a minute, 5 minutes, an hour…).
fn bucket_for(range_ms: i64) -> i64 {
    const STEPS_MS: [i64; 8] = [
        10_000, 60_000, 300_000, 900_000, 3_600_000, 10_800_000, 21_600_000, 86_400_000,
    ];
    STEPS_MS
        .into_iter()
        .find(|step| range_ms / step <= 60)
        .unwrap_or(86_400_000)
}

/// How many rows one pruning statement deletes, so the database is never locked for long.
const PRUNE_BATCH: i64 = 10_000;
const DAY_MS: i64 = 86_400_000;

/// Deletes the requests recorded before `before_ms`, a batch at a time; how many.
pub async fn prune(pool: &SqlitePool, before_ms: i64) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM gateway_requests WHERE id IN \
             (SELECT id FROM gateway_requests WHERE at_ms < ? LIMIT ?)",
        )
        .bind(before_ms)
        .bind(PRUNE_BATCH)
        .execute(pool)
        .await?;
        deleted += done.rows_affected();
        if done.rows_affected() < PRUNE_BATCH as u64 {
            return Ok(deleted);
        }
    }
}

/// Prunes now and then once a day, keeping `retention_days()` days (read at each pass, so a
/// changed setting applies at the next). Ends when the runtime does.
pub fn spawn_pruning(
    pool: SqlitePool,
    retention_days: impl Fn() -> u32 + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut daily = tokio::time::interval(std::time::Duration::from_millis(DAY_MS as u64));
        loop {
            daily.tick().await;
            let days = i64::from(retention_days());
            let before_ms = crate::clock::now_ms() - days * DAY_MS;
            match prune(&pool, before_ms).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("deleted {n} gateway request(s) older than {days} days"),
                Err(err) => tracing::warn!("could not delete old gateway usage: {err}"),
            }
        }
    })
}

async fn recent(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<UsageRecord>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT * FROM gateway_requests WHERE at_ms >= ? AND at_ms < ? ORDER BY at_ms DESC, id DESC LIMIT ?",
    )
    .bind(from_ms)
    .bind(to_ms)
    .bind(RECENT)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .iter()
        .map(|r| UsageRecord {
            at_ms: r.get("at_ms"),
            model: r.get("model"),
            key_id: r.get("key_id"),
            key_name: r.get("key_name"),
            route: r.get("route"),
            stream: r.get("stream"),
            status: outcome(r.get("status")),
            http_status: u16::try_from(r.get::<i64, _>("http_status")).unwrap_or(0),
            prompt_tokens: r.get::<Option<i64>, _>("prompt_tokens").map(unsigned),
            completion_tokens: r.get::<Option<i64>, _>("completion_tokens").map(unsigned),
            cached_tokens: r.get::<Option<i64>, _>("cached_tokens").map(unsigned),
            ttft_ms: r.get("ttft_ms"),
            decode_tps: r.get("decode_tps"),
            duration_ms: r.get("duration_ms"),
            error: r.get("error"),
            rig: r.get("rig"),
        })
        .collect())
}

fn outcome(text: &str) -> Outcome {
    [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Cancelled,
        Outcome::EngineError,
        Outcome::Refused,
        Outcome::RateLimited,
    ]
    .into_iter()
    .find(|o| o.as_str() == text)
    .unwrap_or(Outcome::Error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::pool;

    fn record(at_ms: i64, model: &str, key: Option<i64>, status: Outcome) -> UsageRecord {
        UsageRecord {
            at_ms,
            model: model.to_owned(),
            key_id: key,
            key_name: key.map_or("rigdeck".to_owned(), |k| format!("key{k}")),
            route: "chat.completions".to_owned(),
            stream: true,
            status,
            http_status: 200,
            prompt_tokens: Some(10),
            completion_tokens: Some(20),
            cached_tokens: None,
            ttft_ms: Some(at_ms as f64),
            decode_tps: Some(50.0),
            duration_ms: 100.0,
            error: None,
            rig: None,
        }
    }

    #[tokio::test]
    async fn records_are_written_and_summarised_per_model_key_and_bucket() {
        let pool = pool().await;
        let log = UsageLog::spawn(pool.clone());
        log.record(record(1_000, "a", Some(1), Outcome::Ok));
        log.record(record(2_000, "a", Some(1), Outcome::Ok));
        log.record(record(70_000, "b", None, Outcome::Cancelled));
        log.record(record(3_600_000, "a", Some(1), Outcome::Ok));
        log.flushed().await;

        let s = summary(&pool, 0, 3_600_000).await.unwrap();
        assert_eq!(s.totals.requests, 3, "the end of the range is excluded");
        assert_eq!(s.totals.errors, 0, "a cancelled request is no error");
        assert_eq!(s.totals.completion_tokens, 60);
        assert_eq!(s.by_model[0].model, "a");
        assert_eq!(s.by_model[0].median_ttft_ms, Some(1_500.0));
        assert_eq!(s.by_key.len(), 2);
        assert_eq!(s.series.bucket_ms, 60_000);
        let at: Vec<(i64, &str)> = s
            .series
            .points
            .iter()
            .map(|p| (p.t, p.model.as_str()))
            .collect();
        assert_eq!(at, vec![(0, "a"), (60_000, "b")]);
        assert_eq!(s.recent[0].model, "b");
        assert_eq!(s.recent[0].status, Outcome::Cancelled);
    }

    #[tokio::test]
    async fn a_request_the_client_cancelled_is_no_error() {
        let pool = pool().await;
        let log = UsageLog::spawn(pool.clone());
        log.record(record(1_000, "a", None, Outcome::Ok));
        log.record(record(2_000, "a", None, Outcome::Cancelled));
        log.record(record(3_000, "a", None, Outcome::EngineError));
        log.flushed().await;

        let s = summary(&pool, 0, 60_000).await.unwrap();
        assert_eq!(s.totals.requests, 3);
        assert_eq!(s.totals.errors, 1, "a stop by the client is no error");
        assert_eq!(s.by_model[0].totals.errors, 1);
        assert_eq!(s.by_key[0].totals.errors, 1);
    }

    #[tokio::test]
    async fn a_stalled_database_costs_records_not_memory() {
        let pool = pool().await;
        // The only connection is taken: the writer cannot write.
        let held = pool.acquire().await.unwrap();
        let log = UsageLog::with_queue(pool.clone(), 10);
        for at in 0..100 {
            log.record(record(at, "a", None, Outcome::Ok));
            tokio::task::yield_now().await;
        }
        // At most one batch taken by the writer and one full queue wait; the rest are counted.
        assert!(log.dropped() >= 80, "dropped {}", log.dropped());
        drop(held);
        log.flushed().await;
        let written: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM gateway_requests")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(written as u64 + log.dropped(), 100);
    }

    #[test]
    fn buckets_are_round_and_few() {
        assert_eq!(bucket_for(3_600_000), 60_000);
        assert_eq!(bucket_for(86_400_000), 3_600_000);
        assert_eq!(bucket_for(7 * 86_400_000), 10_800_000);
    }

    /// The fields the in-memory summary read from one row.
    struct UsageRow {
        at_ms: i64,
        model: String,
        key_id: Option<i64>,
        key_name: String,
        status: String,
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
        ttft_ms: Option<f64>,
        decode_tps: Option<f64>,
    }

    impl Totals {
        fn add(&mut self, row: &UsageRow) {
            self.requests += 1;
            if row.status != Outcome::Ok.as_str() && row.status != Outcome::Cancelled.as_str() {
                self.errors += 1;
            }
            self.prompt_tokens += row.prompt_tokens.unwrap_or(0);
            self.completion_tokens += row.completion_tokens.unwrap_or(0);
        }
    }

    fn median(values: &mut [f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let mid = values.len() / 2;
        Some(if values.len().is_multiple_of(2) {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        })
    }

    /// The summary as the Usage page's endpoint computed it before, every row of the range in
    /// memory: the reference the database's sums must equal.
    fn summarise_in_memory(rows: &[UsageRow], from_ms: i64, to_ms: i64) -> UsageSummary {
        let mut totals = Totals::default();
        let mut models: BTreeMap<&str, (Totals, Vec<f64>, Vec<f64>)> = BTreeMap::new();
        let mut keys: BTreeMap<(Option<i64>, &str), Totals> = BTreeMap::new();
        let bucket_ms = bucket_for(to_ms.saturating_sub(from_ms));
        let mut points: BTreeMap<(i64, &str), SeriesPoint> = BTreeMap::new();
        for row in rows {
            totals.add(row);
            let model = models.entry(&row.model).or_default();
            model.0.add(row);
            model.1.extend(row.ttft_ms);
            model.2.extend(row.decode_tps);
            keys.entry((row.key_id, &row.key_name))
                .or_default()
                .add(row);
            let t = from_ms + (row.at_ms - from_ms) / bucket_ms * bucket_ms;
            let point = points
                .entry((t, &row.model))
                .or_insert_with(|| SeriesPoint {
                    t,
                    model: row.model.clone(),
                    requests: 0,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                });
            point.requests += 1;
            point.prompt_tokens += row.prompt_tokens.unwrap_or(0);
            point.completion_tokens += row.completion_tokens.unwrap_or(0);
        }
        UsageSummary {
            totals,
            by_model: models
                .into_iter()
                .map(|(model, (totals, mut ttft, mut tps))| ModelUsage {
                    model: model.to_owned(),
                    totals,
                    median_ttft_ms: median(&mut ttft),
                    median_decode_tps: median(&mut tps),
                })
                .collect(),
            by_key: keys
                .into_iter()
                .map(|((key_id, key_name), totals)| KeyUsage {
                    key_id,
                    key_name: key_name.to_owned(),
                    totals,
                })
                .collect(),
            series: Series {
                bucket_ms,
                points: points.into_values().collect(),
            },
            recent: Vec::new(),
        }
    }

    /// A varied day: five models, three callers, every outcome, missing counts and timings.
    fn fixture() -> Vec<UsageRecord> {
        let outcomes = [
            Outcome::Ok,
            Outcome::Ok,
            Outcome::Error,
            Outcome::Cancelled,
            Outcome::Refused,
        ];
        (0..600_i64)
            .map(|i| {
                let mut r = record(
                    i * 139_411 % 86_400_000,
                    ["alpha", "beta", "gamma", "Zeta", "org/model-7b"][(i % 5) as usize],
                    [None, Some(1), Some(2)][(i % 3) as usize],
                    outcomes[(i * 7 % 5) as usize],
                );
                r.prompt_tokens = (i % 11 != 0).then_some((i * 37 % 4000) as u64);
                r.completion_tokens = (i % 13 != 0).then_some((i * 53 % 900) as u64);
                r.ttft_ms = (i % 4 != 0).then_some((i * 97 % 1000) as f64 / 7.0);
                r.decode_tps = (i % 6 != 0).then_some((i * 31 % 200) as f64 / 3.0);
                r
            })
            .collect()
    }

    fn row_of(r: &UsageRecord) -> UsageRow {
        UsageRow {
            at_ms: r.at_ms,
            model: r.model.clone(),
            key_id: r.key_id,
            key_name: r.key_name.clone(),
            status: r.status.as_str().to_owned(),
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            ttft_ms: r.ttft_ms,
            decode_tps: r.decode_tps,
        }
    }

    #[tokio::test]
    async fn the_databases_sums_equal_the_in_memory_summary_of_every_row() {
        let pool = pool().await;
        let log = UsageLog::spawn(pool.clone());
        let records = fixture();
        for r in &records {
            log.record(r.clone());
        }
        log.flushed().await;
        for (from_ms, to_ms) in [(0, 86_400_000), (3_600_000, 7_200_000), (0, 7 * 86_400_000)] {
            let rows: Vec<UsageRow> = records
                .iter()
                .filter(|r| r.at_ms >= from_ms && r.at_ms < to_ms)
                .map(row_of)
                .collect();
            let mut summed = summary(&pool, from_ms, to_ms).await.unwrap();
            assert_eq!(summed.recent.len(), rows.len().min(RECENT as usize));
            summed.recent.clear();
            assert_eq!(summed, summarise_in_memory(&rows, from_ms, to_ms));
        }
    }

    #[tokio::test]
    async fn models_past_the_busiest_are_summed_up_together() {
        let pool = pool().await;
        let log = UsageLog::spawn(pool.clone());
        let names = SHOWN_MODELS + 30;
        for i in 0..names {
            // The first models are the busiest: two requests each.
            for _ in 0..(if i < SHOWN_MODELS { 2 } else { 1 }) {
                log.record(record(
                    1_000 + i,
                    &format!("m{i:03}"),
                    None,
                    Outcome::Refused,
                ));
            }
        }
        log.flushed().await;
        let s = summary(&pool, 0, 86_400_000).await.unwrap();
        assert_eq!(s.by_model.len(), SHOWN_MODELS as usize + 1);
        let others = &s.by_model[0];
        assert_eq!(others.model, OTHER_MODELS);
        assert_eq!(others.totals.requests, 30);
        assert!(s.series.points.len() <= SHOWN_MODELS as usize + 1);
        assert_eq!(s.totals.requests, (2 * SHOWN_MODELS + 30) as u64);
    }

    #[tokio::test]
    async fn pruning_deletes_only_the_rows_older_than_the_cut() {
        let pool = pool().await;
        let log = UsageLog::spawn(pool.clone());
        for at_ms in [1_000, 2_000, 2_999, 3_000, 4_000] {
            log.record(record(at_ms, "a", None, Outcome::Ok));
        }
        log.flushed().await;
        assert_eq!(prune(&pool, 3_000).await.unwrap(), 3);
        let left: Vec<i64> =
            sqlx::query_scalar("SELECT at_ms FROM gateway_requests ORDER BY at_ms")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(left, vec![3_000, 4_000]);
        assert_eq!(prune(&pool, 3_000).await.unwrap(), 0);
    }
}
