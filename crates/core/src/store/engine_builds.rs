//! The `engine_builds` table: every installed engine build, one row each (capabilities as JSON).

use std::path::PathBuf;

use sqlx::query::QueryScalar;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, Sqlite};

use super::Store;
use crate::engines::capabilities::Capabilities;
use crate::engines::registry::{
    availability, BuildOrigin, BuildStore, EngineBuild, NewEngineBuild, RegistryError,
};
use crate::engines::{display_os, Backend, EngineKind};

const COLUMNS: &str =
    "id, kind, version, backend, cuda_architectures, location, capabilities, source, created_at_ms";

impl Store {
    /// Stores a build; one already stored at the same location is updated in place (same id),
    /// so rebuilding or re-registering never duplicates it.
    pub async fn save_engine_build(
        &self,
        build: &NewEngineBuild,
        now_ms: i64,
    ) -> Result<EngineBuild, RegistryError> {
        let id = bind_build(
            sqlx::query_scalar(
                "INSERT INTO engine_builds (kind, version, backend, cuda_architectures, location, capabilities, source, created_at_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (location) DO UPDATE SET kind = excluded.kind, version = excluded.version, \
                 backend = excluded.backend, cuda_architectures = excluded.cuda_architectures, \
                 capabilities = excluded.capabilities, source = excluded.source, created_at_ms = excluded.created_at_ms \
                 RETURNING id",
            ),
            build,
            now_ms,
        )
        .fetch_one(self.pool())
        .await
        .map_err(query_failed)?;
        self.engine_build(id)
            .await?
            .ok_or(RegistryError::UnknownId(id))
    }

    /// Every build, oldest first, each with its current availability.
    pub async fn engine_builds(&self) -> Result<Vec<EngineBuild>, RegistryError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM engine_builds ORDER BY id"))
            .fetch_all(self.pool())
            .await
            .map_err(query_failed)?;
        rows.iter().map(row_to_build).collect()
    }

    pub async fn engine_build(&self, id: i64) -> Result<Option<EngineBuild>, RegistryError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM engine_builds WHERE id = ?"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
            .map_err(query_failed)?;
        row.as_ref().map(row_to_build).transpose()
    }

    /// Puts `build` in the place of build `id` (same id, so the profiles that name it follow):
    /// how a package upgrade's new shipped engine replaces the one the old package took away.
    pub async fn replace_engine_build(
        &self,
        id: i64,
        build: &NewEngineBuild,
        now_ms: i64,
    ) -> Result<EngineBuild, RegistryError> {
        let updated = bind_build(
            sqlx::query_scalar(
                "UPDATE engine_builds SET kind = ?, version = ?, backend = ?, cuda_architectures = ?, \
                 location = ?, capabilities = ?, source = ?, created_at_ms = ? WHERE id = ? RETURNING id",
            ),
            build,
            now_ms,
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .map_err(query_failed)?
        .ok_or(RegistryError::UnknownId(id))?;
        self.engine_build(updated)
            .await?
            .ok_or(RegistryError::UnknownId(id))
    }

    /// Forgets a build (its files stay on disk); returns what was removed.
    pub async fn remove_engine_build(&self, id: i64) -> Result<EngineBuild, RegistryError> {
        let build = self
            .engine_build(id)
            .await?
            .ok_or(RegistryError::UnknownId(id))?;
        sqlx::query("DELETE FROM engine_builds WHERE id = ?")
            .bind(id)
            .execute(self.pool())
            .await
            .map_err(query_failed)?;
        Ok(build)
    }
}

/// A build's eight columns, bound in the order both the insert and the update name them.
fn bind_build<'q>(
    query: QueryScalar<'q, Sqlite, i64, SqliteArguments<'q>>,
    build: &'q NewEngineBuild,
    now_ms: i64,
) -> QueryScalar<'q, Sqlite, i64, SqliteArguments<'q>> {
    let capabilities = serde_json::to_string(&build.capabilities).unwrap_or_else(|_| "{}".into());
    query
        .bind(build.kind.as_str())
        .bind(&build.version)
        .bind(build.backend.as_str())
        .bind(&build.cuda_architectures)
        .bind(display_os(build.location.as_os_str()))
        .bind(capabilities)
        .bind(build.source.as_str())
        .bind(now_ms)
}

fn row_to_build(row: &SqliteRow) -> Result<EngineBuild, RegistryError> {
    let id: i64 = row.try_get("id").map_err(query_failed)?;
    let corrupt = |detail: String| RegistryError::Corrupt { id, detail };
    let kind: EngineKind = row
        .try_get::<String, _>("kind")
        .map_err(query_failed)?
        .parse()
        .map_err(|e: crate::engines::UnknownKind| corrupt(e.to_string()))?;
    let backend: Backend = row
        .try_get::<String, _>("backend")
        .map_err(query_failed)?
        .parse()
        .map_err(|e: crate::engines::UnknownBackend| corrupt(e.to_string()))?;
    let source = match row
        .try_get::<String, _>("source")
        .map_err(query_failed)?
        .as_str()
    {
        "built" => BuildOrigin::Built,
        "registered" => BuildOrigin::Registered,
        "packaged" => BuildOrigin::Packaged,
        other => return Err(corrupt(format!("unknown source '{other}'"))),
    };
    let capabilities: Capabilities = serde_json::from_str(
        &row.try_get::<String, _>("capabilities")
            .map_err(query_failed)?,
    )
    .map_err(|e| corrupt(format!("capabilities: {e}")))?;
    let location = PathBuf::from(row.try_get::<String, _>("location").map_err(query_failed)?);
    Ok(EngineBuild {
        id,
        kind,
        version: row.try_get("version").map_err(query_failed)?,
        backend,
        cuda_architectures: row.try_get("cuda_architectures").map_err(query_failed)?,
        status: availability(kind, &location),
        location,
        capabilities,
        source,
        created_at_ms: row.try_get("created_at_ms").map_err(query_failed)?,
    })
}

/// The engines crate keeps no database type in its errors: a failed query travels as its text.
fn query_failed(e: sqlx::Error) -> RegistryError {
    RegistryError::Query(e.to_string())
}

impl BuildStore for Store {
    async fn save_engine_build(
        &self,
        build: &NewEngineBuild,
        now_ms: i64,
    ) -> Result<EngineBuild, RegistryError> {
        Store::save_engine_build(self, build, now_ms).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::migrate::Migrator;
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::SqlitePool;
    use std::borrow::Cow;

    /// The migration that allowed packaged builds.
    const PACKAGED: i64 = 20261129000001;

    /// A database as the release before packaged builds left it: two builds registered, the
    /// newer one removed again (so the id counter is ahead of the highest id).
    async fn database_before_packaged_builds(path: &std::path::Path) {
        let pool = SqlitePool::connect_with(
            SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
        let older = Migrator {
            migrations: Cow::Owned(
                super::super::MIGRATOR
                    .iter()
                    .filter(|m| m.version < PACKAGED)
                    .cloned()
                    .collect(),
            ),
            ..Migrator::DEFAULT
        };
        older.run(&pool).await.unwrap();
        for location in ["/opt/a/llama-server", "/opt/b/llama-server"] {
            sqlx::query(
                "INSERT INTO engine_builds (kind, version, backend, location, capabilities, source, created_at_ms) \
                 VALUES ('llama.cpp', 'b1', 'cpu', ?, '{}', 'registered', 1)",
            )
            .bind(location)
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query("DELETE FROM engine_builds WHERE id = 2")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }

    #[tokio::test]
    async fn an_older_database_keeps_its_builds_and_ids_and_takes_packaged_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rigdeck.db");
        database_before_packaged_builds(&path).await;

        let store = Store::open(&path).await.unwrap();
        let builds = store.engine_builds().await.unwrap();
        assert_eq!(builds.len(), 1);
        assert_eq!(builds[0].id, 1);
        assert_eq!(builds[0].location, PathBuf::from("/opt/a/llama-server"));
        assert_eq!(builds[0].source, BuildOrigin::Registered);

        let packaged = NewEngineBuild {
            kind: EngineKind::LlamaCpp,
            version: "b2".into(),
            backend: Backend::Cpu,
            cuda_architectures: None,
            location: PathBuf::from("/usr/lib/rigdeck/engines/x/bin/llama-server"),
            capabilities: Capabilities::default(),
            source: BuildOrigin::Packaged,
        };
        let saved = store.save_engine_build(&packaged, 2).await.unwrap();
        // Id 2 was handed out before the migration: never again.
        assert_eq!(saved.id, 3);
        assert_eq!(saved.source, BuildOrigin::Packaged);

        let moved = NewEngineBuild {
            location: PathBuf::from("/usr/lib/rigdeck/engines/y/bin/llama-server"),
            ..packaged
        };
        let replaced = store.replace_engine_build(3, &moved, 3).await.unwrap();
        assert_eq!((replaced.id, replaced.location), (3, moved.location));
    }
}
