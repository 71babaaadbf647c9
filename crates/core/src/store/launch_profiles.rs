//! The `launch_profiles` table: one row per profile, its body as JSON.

use sqlx::Row;

use super::Store;
use crate::profiles::profile::LaunchProfile;

#[derive(Debug, thiserror::Error)]
pub enum ProfileStoreError {
    #[error("no launch profile named '{0}': `rigdeck profiles list` shows them")]
    NotFound(String),
    #[error("a launch profile named '{0}' already exists: pick another name, or change it with PUT /api/v1/profiles/{0}")]
    Exists(String),
    #[error("launch profile '{name}' in the database is unreadable ({detail}): delete it and create it again")]
    Corrupt { name: String, detail: String },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

impl Store {
    pub async fn launch_profiles(&self) -> Result<Vec<LaunchProfile>, ProfileStoreError> {
        let rows = sqlx::query("SELECT name, body FROM launch_profiles ORDER BY name")
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|row| decode(row.get("name"), row.get("body")))
            .collect()
    }

    pub async fn launch_profile(&self, name: &str) -> Result<LaunchProfile, ProfileStoreError> {
        let row = sqlx::query("SELECT name, body FROM launch_profiles WHERE name = ?")
            .bind(name)
            .fetch_optional(self.pool())
            .await?
            .ok_or_else(|| ProfileStoreError::NotFound(name.to_owned()))?;
        decode(row.get("name"), row.get("body"))
    }

    /// Stores a new profile; refuses a name that exists.
    pub async fn create_launch_profile(
        &self,
        profile: &LaunchProfile,
        now_ms: i64,
    ) -> Result<(), ProfileStoreError> {
        let body = encode(profile)?;
        let inserted = sqlx::query(
            "INSERT INTO launch_profiles (name, body, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT(name) DO NOTHING",
        )
        .bind(&profile.name)
        .bind(body)
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(ProfileStoreError::Exists(profile.name.clone()));
        }
        self.profiles_changed();
        Ok(())
    }

    /// Replaces the profile called `name` (the body may rename it).
    pub async fn update_launch_profile(
        &self,
        name: &str,
        profile: &LaunchProfile,
        now_ms: i64,
    ) -> Result<(), ProfileStoreError> {
        if name != profile.name && self.launch_profile(&profile.name).await.is_ok() {
            return Err(ProfileStoreError::Exists(profile.name.clone()));
        }
        let updated = sqlx::query(
            "UPDATE launch_profiles SET name = ?, body = ?, updated_at_ms = ? WHERE name = ?",
        )
        .bind(&profile.name)
        .bind(encode(profile)?)
        .bind(now_ms)
        .bind(name)
        .execute(self.pool())
        .await?;
        if updated.rows_affected() == 0 {
            return Err(ProfileStoreError::NotFound(name.to_owned()));
        }
        self.profiles_changed();
        Ok(())
    }

    pub async fn delete_launch_profile(&self, name: &str) -> Result<(), ProfileStoreError> {
        let deleted = sqlx::query("DELETE FROM launch_profiles WHERE name = ?")
            .bind(name)
            .execute(self.pool())
            .await?;
        if deleted.rows_affected() == 0 {
            return Err(ProfileStoreError::NotFound(name.to_owned()));
        }
        self.profiles_changed();
        Ok(())
    }
}

fn encode(profile: &LaunchProfile) -> Result<String, ProfileStoreError> {
    serde_json::to_string(profile).map_err(|err| ProfileStoreError::Corrupt {
        name: profile.name.clone(),
        detail: err.to_string(),
    })
}

fn decode(name: String, body: String) -> Result<LaunchProfile, ProfileStoreError> {
    let mut profile: LaunchProfile =
        serde_json::from_str(&body).map_err(|err| ProfileStoreError::Corrupt {
            name: name.clone(),
            detail: err.to_string(),
        })?;
    // The column is the truth (it is the unique key).
    profile.name = name;
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn profiles_round_trip_and_names_stay_unique() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let mut p = LaunchProfile {
            name: "a".into(),
            engine_build_id: 3,
            ..LaunchProfile::default()
        };
        store.create_launch_profile(&p, 1).await.unwrap();
        assert!(matches!(
            store.create_launch_profile(&p, 2).await,
            Err(ProfileStoreError::Exists(_))
        ));
        p.port = 9000;
        store.update_launch_profile("a", &p, 3).await.unwrap();
        assert_eq!(store.launch_profile("a").await.unwrap().port, 9000);
        p.name = "b".into();
        store.update_launch_profile("a", &p, 4).await.unwrap();
        assert_eq!(store.launch_profiles().await.unwrap().len(), 1);
        assert!(matches!(
            store.launch_profile("a").await,
            Err(ProfileStoreError::NotFound(_))
        ));
        let before = store.profiles_generation();
        store.delete_launch_profile("b").await.unwrap();
        assert_eq!(store.profiles_generation(), before + 1);
        assert!(store.delete_launch_profile("b").await.is_err());
        assert_eq!(
            store.profiles_generation(),
            before + 1,
            "a failed write changes nothing"
        );
    }

    #[tokio::test]
    async fn autostart_round_trips_and_older_bodies_read_as_off() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        // A body saved before the field existed.
        sqlx::query("INSERT INTO launch_profiles (name, body, created_at_ms, updated_at_ms) VALUES ('old', ?, 0, 0)")
            .bind(r#"{"name": "old", "engine_build_id": 1, "model": "/m.gguf"}"#)
            .execute(store.pool())
            .await
            .unwrap();
        assert!(!store.launch_profile("old").await.unwrap().autostart);
        let p = LaunchProfile {
            name: "boot".into(),
            autostart: true,
            ..LaunchProfile::default()
        };
        store.create_launch_profile(&p, 1).await.unwrap();
        assert!(store.launch_profile("boot").await.unwrap().autostart);
    }
}
