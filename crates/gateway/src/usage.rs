//! One row per request the gateway served or refused: who, which model, the engine's token
//! counts, time to first token, decode speed, outcome. Written by one task in batches so a
//! request never waits on the database; read back as totals, per model, per key and over time.

use std::collections::BTreeMap;

use serde::Serialize;
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
}

enum Message {
    Record(Box<UsageRecord>),
    Flushed(oneshot::Sender<()>),
}

/// The writer's mailbox; cheap to clone.
#[derive(Clone)]
pub struct UsageLog {
    tx: mpsc::UnboundedSender<Message>,
}

impl UsageLog {
    /// Starts the writer task (it ends when every `UsageLog` is dropped).
    pub fn spawn(pool: SqlitePool) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(pool, rx));
        Self { tx }
    }

    pub fn record(&self, record: UsageRecord) {
        // Only fails once the daemon is shutting down; the record is lost with it.
        let _ = self.tx.send(Message::Record(Box::new(record)));
    }

    /// Resolves once every record sent before it is in the database.
    pub async fn flushed(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flushed(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

async fn write_loop(pool: SqlitePool, mut rx: mpsc::UnboundedReceiver<Message>) {
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
             duration_ms, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

impl Totals {
    fn add(&mut self, row: &UsageRow) {
        self.requests += 1;
        if row.status != Outcome::Ok.as_str() {
            self.errors += 1;
        }
        self.prompt_tokens += row.prompt_tokens.unwrap_or(0);
        self.completion_tokens += row.completion_tokens.unwrap_or(0);
    }
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

/// The fields the summary needs from one row.
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

const RECENT: i64 = 100;

/// Usage between `from_ms` (inclusive) and `to_ms` (exclusive).
pub async fn summary(
    pool: &SqlitePool,
    from_ms: i64,
    to_ms: i64,
) -> Result<UsageSummary, sqlx::Error> {
    let rows: Vec<UsageRow> = sqlx::query(
        "SELECT at_ms, model, key_id, key_name, status, prompt_tokens, completion_tokens, ttft_ms, decode_tps \
         FROM gateway_requests WHERE at_ms >= ? AND at_ms < ? ORDER BY at_ms",
    )
    .bind(from_ms)
    .bind(to_ms)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| UsageRow {
        at_ms: r.get("at_ms"),
        model: r.get("model"),
        key_id: r.get("key_id"),
        key_name: r.get("key_name"),
        status: r.get("status"),
        prompt_tokens: r.get::<Option<i64>, _>("prompt_tokens").map(unsigned),
        completion_tokens: r.get::<Option<i64>, _>("completion_tokens").map(unsigned),
        ttft_ms: r.get("ttft_ms"),
        decode_tps: r.get("decode_tps"),
    })
    .collect();
    let recent = recent(pool, from_ms, to_ms).await?;
    Ok(summarise(&rows, from_ms, to_ms, recent))
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn summarise(
    rows: &[UsageRow],
    from_ms: i64,
    to_ms: i64,
    recent: Vec<UsageRecord>,
) -> UsageSummary {
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
        recent,
    }
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
        assert_eq!(s.totals.errors, 1);
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

    #[test]
    fn buckets_are_round_and_few() {
        assert_eq!(bucket_for(3_600_000), 60_000);
        assert_eq!(bucket_for(86_400_000), 3_600_000);
        assert_eq!(bucket_for(7 * 86_400_000), 10_800_000);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut []), None);
    }
}
