//! The SQLite database (sqlx): one file in the data dir, WAL mode, migrations from the repo.
//! Every table's queries live here, one module per table group:
//! - [`history`]: `gpu_history` and `host_history` (10 s telemetry buckets);
//! - [`engine_builds`]: the installed engine builds;
//! - [`launch_profiles`]: the launch profiles;
//! - [`gang_runs`]: the gangs this daemon heads while they run.

pub mod downloads;
pub mod engine_builds;
pub mod gang_runs;
pub mod history;
pub mod launch_profiles;
pub mod plan_observations;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

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
    /// Bumped by every write to the launch profiles, so readers on a hot path (the gateway
    /// resolves a model at each request) can keep what they decoded until it changes.
    profiles_generation: Arc<AtomicU64>,
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
        // One process at a time opens the file and brings its schema up to date: switching a new
        // file to WAL needs it alone ("database is locked" otherwise), and sqlx takes no lock
        // on SQLite, so a second migrator would find the first one's tables half made.
        let lock = lock_for_opening(path).await.map_err(open_err)?;
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
        drop(lock);
        Ok(Self {
            pool,
            profiles_generation: Arc::default(),
        })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Changes whenever a launch profile is created, changed or deleted through this store.
    pub fn profiles_generation(&self) -> u64 {
        self.profiles_generation.load(Ordering::Acquire)
    }

    pub(crate) fn profiles_changed(&self) {
        self.profiles_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The connection pool: the table modules' `impl Store` blocks, and domain crates that own
    /// their tables' queries (the gateway's keys and usage).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// An exclusive lock on `<database>.open-lock` beside the database, held until dropped
/// (processes that open the database together wait here in turn).
async fn lock_for_opening(path: &Path) -> Result<std::fs::File, sqlx::Error> {
    let mut name = path.as_os_str().to_owned();
    name.push(".open-lock");
    let lock_path = PathBuf::from(name);
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(|e| sqlx::Error::Io(std::io::Error::other(e)))?
    .map_err(sqlx::Error::Io)
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
    use rigdeck_telemetry::downsample::BucketAverager;
    use rigdeck_telemetry::fixtures::sample_at;
    use rigdeck_telemetry::history::{HistoryRange, HistorySource};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn processes_opening_a_fresh_database_at_once_all_get_it() {
        // `rigdeck serve` and a CLI command started together on a new data dir: each used to
        // run the migrations, and the slower failed with "table launch_profiles already exists".
        for _ in 0..4 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("rigdeck.db");
            let opens: Vec<_> = (0..6)
                .map(|_| {
                    let path = path.clone();
                    tokio::spawn(async move { Store::open(&path).await.map(|_| ()) })
                })
                .collect();
            for open in opens {
                let opened = open.await.unwrap();
                assert!(opened.is_ok(), "{:?}", opened.err().map(|e| e.to_string()));
            }
        }
    }

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
