//! The `downloads` table: the download queue, one row per requested model download.

use sqlx::Row;

use super::Store;

/// A stored download: the request as JSON and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadRow {
    pub id: i64,
    pub body: String,
    pub state: String,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Store {
    pub async fn insert_download(
        &self,
        body: &str,
        state: &str,
        now_ms: i64,
    ) -> Result<i64, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO downloads (body, state, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?)",
        )
        .bind(body)
        .bind(state)
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(done.last_insert_rowid())
    }

    pub async fn set_download_state(
        &self,
        id: i64,
        state: &str,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE downloads SET state = ?, error = ?, updated_at_ms = ? WHERE id = ?")
            .bind(state)
            .bind(error)
            .bind(now_ms)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    pub async fn downloads(&self) -> Result<Vec<DownloadRow>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, body, state, error, created_at_ms, updated_at_ms FROM downloads ORDER BY id",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|row| DownloadRow {
                id: row.get("id"),
                body: row.get("body"),
                state: row.get("state"),
                error: row.get("error"),
                created_at_ms: row.get("created_at_ms"),
                updated_at_ms: row.get("updated_at_ms"),
            })
            .collect())
    }

    pub async fn delete_download(&self, id: i64) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM downloads WHERE id = ?")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}
