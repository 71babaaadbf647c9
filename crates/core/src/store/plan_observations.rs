//! The `plan_observations` table: the planner's estimates next to llama.cpp's dry runs and
//! measured engines, per device (see `crate::calibration`).

use sqlx::Row;

use super::Store;
use crate::calibration::{DeviceKey, Observation, Source, Terms};

/// Rows kept: enough for every key's recent records on a rig with many models.
const KEPT: i64 = 2000;

impl Store {
    /// Stores `observation` under `dedupe_key` (a second record of the same dry run or engine
    /// run replaces the first), keeping the newest rows only.
    pub async fn record_plan_observation(
        &self,
        dedupe_key: &str,
        o: &Observation,
    ) -> Result<(), sqlx::Error> {
        let observed = o.observed_terms;
        sqlx::query(
            "INSERT INTO plan_observations (dedupe_key, source, architecture, backend, device_model, model, at_ms,
               estimated_weights_bytes, estimated_kv_bytes, estimated_compute_bytes, estimated_overhead_bytes,
               observed_weights_bytes, observed_kv_bytes, observed_compute_bytes, observed_total_bytes)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (dedupe_key) DO UPDATE SET at_ms = excluded.at_ms,
               estimated_weights_bytes = excluded.estimated_weights_bytes,
               estimated_kv_bytes = excluded.estimated_kv_bytes,
               estimated_compute_bytes = excluded.estimated_compute_bytes,
               estimated_overhead_bytes = excluded.estimated_overhead_bytes,
               observed_weights_bytes = excluded.observed_weights_bytes,
               observed_kv_bytes = excluded.observed_kv_bytes,
               observed_compute_bytes = excluded.observed_compute_bytes,
               observed_total_bytes = excluded.observed_total_bytes",
        )
        .bind(dedupe_key)
        .bind(o.source.as_str())
        .bind(&o.key.architecture)
        .bind(o.key.backend.as_str())
        .bind(&o.key.device_model)
        .bind(&o.model)
        .bind(o.at_ms)
        .bind(db(o.estimated.weights_bytes))
        .bind(db(o.estimated.kv_bytes))
        .bind(db(o.estimated.compute_bytes))
        .bind(db(o.estimated.overhead_bytes))
        .bind(observed.map(|t| db(t.weights_bytes)))
        .bind(observed.map(|t| db(t.kv_bytes)))
        .bind(observed.map(|t| db(t.compute_bytes)))
        .bind(db(o.observed_total_bytes))
        .execute(self.pool())
        .await?;
        sqlx::query(
            "DELETE FROM plan_observations WHERE id NOT IN
               (SELECT id FROM plan_observations ORDER BY at_ms DESC, id DESC LIMIT ?)",
        )
        .bind(KEPT)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Every kept record, newest first; rows this version cannot read (a backend or source
    /// from a newer one) are left out.
    pub async fn plan_observations(&self) -> Result<Vec<Observation>, sqlx::Error> {
        let rows = sqlx::query("SELECT * FROM plan_observations ORDER BY at_ms DESC, id DESC")
            .fetch_all(self.pool())
            .await?;
        Ok(rows.iter().filter_map(observation).collect())
    }
}

fn observation(row: &sqlx::sqlite::SqliteRow) -> Option<Observation> {
    let backend: String = row.get("backend");
    let source: String = row.get("source");
    let bytes = |column: &str| u64::try_from(row.get::<i64, _>(column)).unwrap_or(0);
    let maybe = |column: &str| {
        row.get::<Option<i64>, _>(column)
            .map(|v| u64::try_from(v).unwrap_or(0))
    };
    let observed_terms = match (
        maybe("observed_weights_bytes"),
        maybe("observed_kv_bytes"),
        maybe("observed_compute_bytes"),
    ) {
        (Some(weights_bytes), Some(kv_bytes), Some(compute_bytes)) => Some(Terms {
            weights_bytes,
            kv_bytes,
            compute_bytes,
            overhead_bytes: 0,
        }),
        _ => None,
    };
    Some(Observation {
        key: DeviceKey {
            architecture: row.get("architecture"),
            backend: backend.parse().ok()?,
            device_model: row.get("device_model"),
        },
        source: Source::parse(&source)?,
        model: row.get("model"),
        at_ms: row.get("at_ms"),
        estimated: Terms {
            weights_bytes: bytes("estimated_weights_bytes"),
            kv_bytes: bytes("estimated_kv_bytes"),
            compute_bytes: bytes("estimated_compute_bytes"),
            overhead_bytes: bytes("estimated_overhead_bytes"),
        },
        observed_terms,
        observed_total_bytes: bytes("observed_total_bytes"),
    })
}

/// SQLite integers are signed; a byte count past i64 (only from a hostile header) is capped.
fn db(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
