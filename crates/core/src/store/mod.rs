//! The SQLite database (sqlx): one file in the data dir, WAL mode, migrations from the repo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Row;

use crate::telemetry::downsample::Bucket;
use crate::telemetry::history::{GpuHistory, History, HistoryRange, HistorySource, HostHistory};
use crate::telemetry::snapshot::UnixMillis;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database '{path}' was written by a newer Rigdeck (schema {found}, this build knows up to {known}): upgrade Rigdeck, or start with another data dir (RIGDECK_DATA_DIR)")]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("cannot open database '{path}': {source}; check that the folder is writable and the file is a Rigdeck database")]
    Open { path: PathBuf, source: sqlx::Error },
    #[error("cannot update database '{path}' to the current schema: {source}")]
    Migrate {
        path: PathBuf,
        source: sqlx::migrate::MigrateError,
    },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Opens (creating if needed) the database and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(sqlx::Error::Io(e)))?;
        }
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(open_err)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(open_err)?;
        refuse_newer_schema(&pool, path).await?;
        MIGRATOR
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The connection pool, for the other modules' `impl Store` blocks (engines registry, …).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Writes one finished bucket in a single transaction.
    pub async fn insert_bucket(&self, bucket: &Bucket) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for gpu in &bucket.gpus {
            sqlx::query(
                "INSERT OR REPLACE INTO gpu_history (gpu_key, bucket_ms, gpu_index, name, memory_total_bytes, \
                 utilization_pct, memory_used_bytes, temperature_mc, power_mw, samples) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&gpu.gpu_key)
            .bind(bucket.start_ms)
            .bind(i64::from(gpu.index))
            .bind(&gpu.name)
            .bind(gpu.memory_total_bytes.and_then(|b| i64::try_from(b).ok()))
            .bind(gpu.averages.utilization_gpu_pct)
            .bind(gpu.averages.memory_used_bytes)
            .bind(gpu.averages.temperature_mc)
            .bind(gpu.averages.power_mw)
            .bind(i64::from(gpu.samples))
            .execute(&mut *tx)
            .await?;
        }
        let host = &bucket.host;
        sqlx::query(
            "INSERT OR REPLACE INTO host_history (bucket_ms, cpu_usage_pct, memory_used_bytes, swap_used_bytes, samples) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(bucket.start_ms)
        .bind(host.cpu_usage_pct)
        .bind(host.memory_used_bytes)
        .bind(host.swap_used_bytes)
        .bind(i64::from(host.samples))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes history older than `before_ms`; returns the number of rows removed.
    pub async fn prune(&self, before_ms: UnixMillis) -> Result<u64, StoreError> {
        let gpus = sqlx::query("DELETE FROM gpu_history WHERE bucket_ms < ?")
            .bind(before_ms)
            .execute(&self.pool)
            .await?;
        let host = sqlx::query("DELETE FROM host_history WHERE bucket_ms < ?")
            .bind(before_ms)
            .execute(&self.pool)
            .await?;
        Ok(gpus.rows_affected() + host.rows_affected())
    }

    /// History from `since` on, averaged over `step_ms` (a multiple of the stored bucket length).
    pub async fn history(
        &self,
        range: HistoryRange,
        since: UnixMillis,
        step_ms: i64,
    ) -> Result<History, StoreError> {
        let gpu_rows = sqlx::query(
            "SELECT gpu_key, (bucket_ms / ?1) * ?1 AS t, MAX(gpu_index) AS gpu_index, MAX(name) AS name, \
             MAX(memory_total_bytes) AS memory_total_bytes, AVG(utilization_pct) AS utilization_pct, \
             AVG(memory_used_bytes) AS memory_used_bytes, AVG(temperature_mc) AS temperature_mc, AVG(power_mw) AS power_mw \
             FROM gpu_history WHERE bucket_ms >= ?2 GROUP BY gpu_key, t ORDER BY gpu_key, t",
        )
        .bind(step_ms)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        let mut gpus: BTreeMap<String, GpuHistory> = BTreeMap::new();
        for row in gpu_rows {
            let key: String = row.try_get("gpu_key")?;
            let series = gpus.entry(key.clone()).or_default();
            series.uuid = (!key.starts_with("index:")).then_some(key);
            series.index = u32::try_from(row.try_get::<i64, _>("gpu_index")?).unwrap_or(0);
            series.name = row.try_get("name")?;
            series.memory_total_bytes = row
                .try_get::<Option<i64>, _>("memory_total_bytes")?
                .and_then(|b| u64::try_from(b).ok());
            series.t.push(row.try_get("t")?);
            series
                .utilization_gpu_pct
                .push(row.try_get("utilization_pct")?);
            series
                .memory_used_bytes
                .push(row.try_get("memory_used_bytes")?);
            series.temperature_mc.push(row.try_get("temperature_mc")?);
            series.power_mw.push(row.try_get("power_mw")?);
        }
        let host_rows = sqlx::query(
            "SELECT (bucket_ms / ?1) * ?1 AS t, AVG(cpu_usage_pct) AS cpu, AVG(memory_used_bytes) AS mem \
             FROM host_history WHERE bucket_ms >= ?2 GROUP BY t ORDER BY t",
        )
        .bind(step_ms)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        let mut host = HostHistory::default();
        for row in host_rows {
            host.push(row.try_get("t")?, row.try_get("cpu")?, row.try_get("mem")?);
        }
        let mut gpus: Vec<GpuHistory> = gpus.into_values().collect();
        gpus.sort_by_key(|g| g.index);
        Ok(History {
            range,
            step_ms,
            source: HistorySource::Database,
            gpus,
            host,
        })
    }
}

/// sqlx would refuse a database with migrations it does not know, but with a message about
/// "missing migrations"; say plainly that a newer Rigdeck wrote it, and touch nothing.
async fn refuse_newer_schema(pool: &SqlitePool, path: &Path) -> Result<(), StoreError> {
    let has_table: Option<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(pool)
    .await
    .map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    if has_table.is_none() {
        return Ok(());
    }
    let found: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(pool)
        .await
        .map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
    let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    match found {
        Some(found) if found > known => Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found,
            known,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::downsample::BucketAverager;
    use rigdeck_telemetry::fixtures::sample_at;

    #[tokio::test]
    async fn writes_buckets_reads_them_averaged_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("rigdeck.db")).await.unwrap();
        // The seventh sample closes the sixth bucket, as the collector's next tick would.
        let mut avg = BucketAverager::new(10_000);
        for (i, util) in [10, 20, 30, 40, 50, 60, 0].into_iter().enumerate() {
            if let Some(bucket) = avg.push(&sample_at(
                i as i64 * 10_000,
                &[(0, "GPU-a", util), (1, "GPU-b", 100)],
            )) {
                store.insert_bucket(&bucket).await.unwrap();
            }
        }
        let fine = store
            .history(HistoryRange::OneHour, 0, 10_000)
            .await
            .unwrap();
        assert_eq!(fine.source, HistorySource::Database);
        assert_eq!(fine.gpus.len(), 2);
        assert_eq!(fine.gpus[0].uuid.as_deref(), Some("GPU-a"));
        assert_eq!(fine.gpus[0].t.len(), 6);
        assert_eq!(fine.gpus[0].utilization_gpu_pct[2], Some(30.0));
        assert_eq!(fine.host.t.len(), 6);

        let coarse = store
            .history(HistoryRange::OneDay, 0, 60_000)
            .await
            .unwrap();
        assert_eq!(coarse.gpus[0].t, vec![0]);
        assert_eq!(coarse.gpus[0].utilization_gpu_pct, vec![Some(35.0)]);

        let removed = store.prune(30_000).await.unwrap();
        assert_eq!(removed, 3 * 2 + 3);
        let after = store
            .history(HistoryRange::OneHour, 0, 10_000)
            .await
            .unwrap();
        assert_eq!(after.gpus[0].t.first(), Some(&30_000));
    }

    #[tokio::test]
    async fn uses_wal_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rigdeck.db");
        let store = Store::open(&path).await.unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        store.close().await;
        Store::open(&path).await.unwrap();
    }

    #[tokio::test]
    async fn refuses_a_database_from_a_newer_version_and_leaves_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rigdeck.db");
        let store = Store::open(&path).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99990101000000, 'from the future', 1, x'00', 0)",
        )
        .execute(&store.pool)
        .await
        .unwrap();
        store.close().await;
        let err = Store::open(&path)
            .await
            .err()
            .expect("newer schema refused")
            .to_string();
        assert!(
            err.contains("newer Rigdeck") && err.contains("99990101000000"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_gets_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rigdeck.db");
        std::fs::write(
            &path,
            b"this is not sqlite, just some text that is long enough to fill a header......",
        )
        .unwrap();
        let err = Store::open(&path)
            .await
            .err()
            .expect("garbage refused")
            .to_string();
        assert!(err.contains("rigdeck.db"), "{err}");
    }
}
