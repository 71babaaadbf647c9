//! The `gang_runs` table: the gangs this daemon heads while they run, with what each has on
//! every rig (a JSON document the gangs write and read), so the next daemon finds them.

use sqlx::Row;

use super::Store;

impl Store {
    /// Records (or replaces) what the running gang `name` has on every rig.
    pub async fn record_gang_run(
        &self,
        name: &str,
        members: &serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO gang_runs (name, members, at_ms) VALUES (?, ?, ?)
             ON CONFLICT (name) DO UPDATE SET members = excluded.members, at_ms = excluded.at_ms",
        )
        .bind(name)
        .bind(members.to_string())
        .bind(crate::now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The gang `name` ended (stopped, or failed for good): nothing of it is left to find.
    pub async fn forget_gang_run(&self, name: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM gang_runs WHERE name = ?")
            .bind(name)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Every recorded gang with what it had on every rig; a row whose document is not JSON
    /// (written by hand) comes as `null`, so its gang is still found.
    pub async fn gang_runs(&self) -> Result<Vec<(String, serde_json::Value)>, sqlx::Error> {
        let rows = sqlx::query("SELECT name, members FROM gang_runs ORDER BY name")
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let members: String = row.get("members");
                let members = serde_json::from_str(&members).unwrap_or_default();
                (row.get("name"), members)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_gang_run_is_recorded_replaced_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("rigdeck.db")).await.unwrap();
        store
            .record_gang_run("big", &json!({"leases": []}))
            .await
            .unwrap();
        store
            .record_gang_run("big", &json!({"leases": [{"rig": "mini", "lease": "l1"}]}))
            .await
            .unwrap();
        store.record_gang_run("other", &json!({})).await.unwrap();
        let runs = store.gang_runs().await.unwrap();
        assert_eq!(
            runs,
            [
                (
                    "big".to_owned(),
                    json!({"leases": [{"rig": "mini", "lease": "l1"}]})
                ),
                ("other".to_owned(), json!({}))
            ]
        );
        store.forget_gang_run("big").await.unwrap();
        assert_eq!(store.gang_runs().await.unwrap().len(), 1);
    }
}
