//! The `gpu_history` and `host_history` tables: finished 10 s telemetry buckets, pruned by age,
//! read back averaged to the step a chart needs.

use std::collections::BTreeMap;

use sqlx::Row;

use super::{Store, StoreError};
use rigdeck_telemetry::downsample::Bucket;
use rigdeck_telemetry::history::{GpuHistory, History, HistoryRange, HistorySource, HostHistory};
use rigdeck_telemetry::snapshot::UnixMillis;

impl Store {
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
