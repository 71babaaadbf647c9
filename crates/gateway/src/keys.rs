//! API keys for the gateway's clients, apart from the admin token: created with a name, shown
//! once, kept only as a SHA-256 digest, revoked (the row stays, so usage keeps its name). The
//! live keys are held in memory too, so checking a request costs a hash and a map look-up.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{Row, SqlitePool};

/// Every secret starts with this, so a leaked one is recognisable in logs and scanners.
pub const SECRET_PREFIX: &str = "rdk-";
/// How many characters of a secret are kept in clear to tell keys apart in lists.
const SHOWN_CHARS: usize = SECRET_PREFIX.len() + 6;
const MAX_NAME_CHARS: usize = 64;

/// Who sent a request: a key, or the app itself (the admin token: chat, benchmarks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub key_id: Option<i64>,
    pub name: String,
}

impl Caller {
    /// The daemon's own admin token (the UI's chat, the CLI).
    pub fn app() -> Self {
        Self {
            key_id: None,
            name: "rigdeck".to_owned(),
        }
    }
}

/// A key as lists show it; never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyView {
    pub id: i64,
    pub name: String,
    /// The secret's first characters (`rdk-3f9a1c`).
    pub prefix: String,
    pub created_at_ms: i64,
    pub last_used_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
}

/// A key just created: the only time its secret is seen.
#[derive(Debug, Clone, Serialize)]
pub struct NewKey {
    pub key: KeyView,
    pub secret: String,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("a key needs a name (up to {MAX_NAME_CHARS} characters, no control characters), e.g. the tool that will use it")]
    BadName,
    #[error("a key named '{0}' exists already: pick another name, or revoke that one first")]
    NameTaken(String),
    #[error("no API key with id {0}: `rigdeck keys list` shows them")]
    NotFound(i64),
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// The keys: the table, and the digests of the live ones in memory.
pub struct KeyRing {
    pool: SqlitePool,
    live: RwLock<HashMap<String, Caller>>,
}

impl KeyRing {
    /// Loads the live keys.
    pub async fn load(pool: SqlitePool) -> Result<Self, KeyError> {
        let rows = sqlx::query("SELECT id, name, hash FROM api_keys WHERE revoked_at_ms IS NULL")
            .fetch_all(&pool)
            .await?;
        let live = rows
            .iter()
            .map(|row| {
                let caller = Caller {
                    key_id: Some(row.get("id")),
                    name: row.get("name"),
                };
                (row.get::<String, _>("hash"), caller)
            })
            .collect();
        Ok(Self {
            pool,
            live: RwLock::new(live),
        })
    }

    /// The caller a presented secret belongs to; `None` for an unknown or revoked one.
    pub fn verify(&self, secret: &str) -> Option<Caller> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        live.get(&digest(secret)).cloned()
    }

    /// Newest first, revoked ones included.
    pub async fn list(&self) -> Result<Vec<KeyView>, KeyError> {
        let rows = sqlx::query(
            "SELECT k.id, k.name, k.prefix, k.created_at_ms, k.revoked_at_ms, \
             (SELECT MAX(r.at_ms) FROM gateway_requests r WHERE r.key_id = k.id) AS last_used_at_ms \
             FROM api_keys k ORDER BY k.id DESC",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(view).collect())
    }

    /// Creates a key; the secret in the answer is not stored anywhere.
    pub async fn create(&self, name: &str, now_ms: i64) -> Result<NewKey, KeyError> {
        let name = name.trim();
        if name.is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || name.chars().any(char::is_control)
        {
            return Err(KeyError::BadName);
        }
        let taken: Option<i64> =
            sqlx::query_scalar("SELECT id FROM api_keys WHERE name = ? AND revoked_at_ms IS NULL")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        if taken.is_some() {
            return Err(KeyError::NameTaken(name.to_owned()));
        }
        let secret = new_secret();
        let hash = digest(&secret);
        let prefix: String = secret.chars().take(SHOWN_CHARS).collect();
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO api_keys (name, prefix, hash, created_at_ms) VALUES (?, ?, ?, ?) RETURNING id",
        )
        .bind(name)
        .bind(&prefix)
        .bind(&hash)
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        self.live
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                hash,
                Caller {
                    key_id: Some(id),
                    name: name.to_owned(),
                },
            );
        let key = KeyView {
            id,
            name: name.to_owned(),
            prefix,
            created_at_ms: now_ms,
            last_used_at_ms: None,
            revoked_at_ms: None,
        };
        Ok(NewKey { key, secret })
    }

    /// Revokes a key at once (requests with it are refused from now on); revoking twice keeps
    /// the first time.
    pub async fn revoke(&self, id: i64, now_ms: i64) -> Result<KeyView, KeyError> {
        sqlx::query("UPDATE api_keys SET revoked_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL")
            .bind(now_ms)
            .bind(id)
            .execute(&self.pool)
            .await?;
        self.live
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, caller| caller.key_id != Some(id));
        self.list()
            .await?
            .into_iter()
            .find(|k| k.id == id)
            .ok_or(KeyError::NotFound(id))
    }
}

fn view(row: &sqlx::sqlite::SqliteRow) -> KeyView {
    KeyView {
        id: row.get("id"),
        name: row.get("name"),
        prefix: row.get("prefix"),
        created_at_ms: row.get("created_at_ms"),
        last_used_at_ms: row.get("last_used_at_ms"),
        revoked_at_ms: row.get("revoked_at_ms"),
    }
}

/// `rdk-` and 192 random bits in hex.
fn new_secret() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SECRET_PREFIX}{hex}")
}

/// The stored form. A fast hash is right here: the secret has 192 random bits, nothing a
/// dictionary could guess, and every request is checked against it.
fn digest(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An in-memory database with the gateway's tables (the real migration file).
    pub(crate) async fn pool() -> SqlitePool {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let schema = include_str!("../../core/migrations/20261125000001_gateway.sql");
        sqlx::raw_sql(schema).execute(&pool).await.unwrap();
        let rig = include_str!("../../core/migrations/20261205002801_gateway_rig.sql");
        sqlx::raw_sql(rig).execute(&pool).await.unwrap();
        pool
    }

    #[tokio::test]
    async fn a_created_key_verifies_until_revoked_and_only_its_digest_is_stored() {
        let ring = KeyRing::load(pool().await).await.unwrap();
        let new = ring.create("  aider ", 1_000).await.unwrap();
        assert!(new.secret.starts_with("rdk-") && new.secret.len() == 52);
        assert_eq!(new.key.name, "aider");
        assert!(new.secret.starts_with(&new.key.prefix));
        let caller = ring.verify(&new.secret).expect("verifies");
        assert_eq!(caller.key_id, Some(new.key.id));
        assert!(ring.verify("rdk-000").is_none());

        let stored: String = sqlx::query_scalar("SELECT hash FROM api_keys")
            .fetch_one(&ring.pool)
            .await
            .unwrap();
        assert!(!stored.contains(&new.secret[4..]));

        let revoked = ring.revoke(new.key.id, 2_000).await.unwrap();
        assert_eq!(revoked.revoked_at_ms, Some(2_000));
        assert!(ring.verify(&new.secret).is_none());
        // A fresh load (daemon restart) agrees.
        let reloaded = KeyRing::load(ring.pool.clone()).await.unwrap();
        assert!(reloaded.verify(&new.secret).is_none());
        assert_eq!(
            ring.revoke(new.key.id, 3_000).await.unwrap().revoked_at_ms,
            Some(2_000)
        );
    }

    #[tokio::test]
    async fn names_are_required_and_unique_among_live_keys() {
        let ring = KeyRing::load(pool().await).await.unwrap();
        assert!(matches!(ring.create(" ", 0).await, Err(KeyError::BadName)));
        assert!(matches!(
            ring.create("a\nb", 0).await,
            Err(KeyError::BadName)
        ));
        let first = ring.create("agent", 0).await.unwrap();
        assert!(matches!(
            ring.create("agent", 0).await,
            Err(KeyError::NameTaken(_))
        ));
        ring.revoke(first.key.id, 1).await.unwrap();
        ring.create("agent", 2).await.expect("name free again");
        assert!(matches!(
            ring.revoke(999, 3).await,
            Err(KeyError::NotFound(999))
        ));
        assert_eq!(ring.list().await.unwrap().len(), 2);
    }
}
