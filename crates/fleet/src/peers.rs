//! The `fleet_peers` table: the peers whose certificates this daemon pinned.

use sqlx::sqlite::SqlitePool;
use sqlx::Row;

use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;

/// What a peer is to this daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// This daemon joined it (with a code it made).
    Rig,
    /// It joined this daemon.
    Desk,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rig => "rig",
            Self::Desk => "desk",
        }
    }

    /// What this daemon is to a peer of this role.
    pub fn counterpart(self) -> Self {
        match self {
            Self::Rig => Self::Desk,
            Self::Desk => Self::Rig,
        }
    }
}

/// A pinned peer as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Peer {
    pub name: String,
    pub fingerprint: Fingerprint,
    pub role: Role,
    pub address: Option<String>,
    pub paired_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_answer_at_ms: Option<i64>,
    pub silent_since_ms: Option<i64>,
    pub last_problem: Option<String>,
}

/// The pin a pairing stores.
pub struct NewPin<'a> {
    pub name: &'a str,
    pub fingerprint: Fingerprint,
    pub role: Role,
    pub address: Option<&'a str>,
}

/// How a pin was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    New,
    /// The same certificate was pinned already: its row was updated, not duplicated.
    Updated,
}

const COLUMNS: &str = "name, fingerprint, role, address, paired_at_ms, updated_at_ms, \
                       last_answer_at_ms, silent_since_ms, last_problem";

fn peer_from(row: &sqlx::sqlite::SqliteRow) -> Result<Peer, FleetError> {
    let read = |err: sqlx::Error| FleetError::database("read the fleet's peers", err);
    let fingerprint: String = row.try_get("fingerprint").map_err(read)?;
    let role: String = row.try_get("role").map_err(read)?;
    Ok(Peer {
        name: row.try_get("name").map_err(read)?,
        fingerprint: fingerprint.parse().map_err(|err| {
            FleetError::new(FleetErrorKind::Internal, format!("a stored pin: {err}"))
        })?,
        role: if role == "rig" { Role::Rig } else { Role::Desk },
        address: row.try_get("address").map_err(read)?,
        paired_at_ms: row.try_get("paired_at_ms").map_err(read)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(read)?,
        last_answer_at_ms: row.try_get("last_answer_at_ms").map_err(read)?,
        silent_since_ms: row.try_get("silent_since_ms").map_err(read)?,
        last_problem: row.try_get("last_problem").map_err(read)?,
    })
}

/// Every peer, by name.
pub async fn list(pool: &SqlitePool) -> Result<Vec<Peer>, FleetError> {
    let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM fleet_peers ORDER BY name"))
        .fetch_all(pool)
        .await
        .map_err(|err| FleetError::database("read the fleet's peers", err))?;
    rows.iter().map(peer_from).collect()
}

/// The peer of that name.
pub async fn by_name(pool: &SqlitePool, name: &str) -> Result<Option<Peer>, FleetError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM fleet_peers WHERE name = ?"))
        .bind(name)
        .fetch_optional(pool)
        .await
        .map_err(|err| FleetError::database("read the fleet's peers", err))?;
    row.as_ref().map(peer_from).transpose()
}

/// The peer pinned with that certificate.
pub async fn by_fingerprint(
    pool: &SqlitePool,
    fingerprint: Fingerprint,
) -> Result<Option<Peer>, FleetError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM fleet_peers WHERE fingerprint = ?"
    ))
    .bind(fingerprint.to_string())
    .fetch_optional(pool)
    .await
    .map_err(|err| FleetError::database("read the fleet's peers", err))?;
    row.as_ref().map(peer_from).transpose()
}

/// Refuses a pin whose name another certificate already holds (before anything is stored).
pub async fn check_name_free(
    pool: &SqlitePool,
    name: &str,
    fingerprint: Fingerprint,
) -> Result<(), FleetError> {
    match by_name(pool, name).await? {
        Some(holder) if holder.fingerprint != fingerprint => Err(FleetError::new(
            FleetErrorKind::Conflict,
            format!(
                "another peer is already paired as '{name}' (fingerprint {}), and this one presents {fingerprint}: \
                 two machines share a name, or '{name}' was reset. Remove the old one with `rigdeck fleet remove {name}` \
                 and pair again, or rename one of them (its name is in <config>/fleet/name)",
                holder.fingerprint
            ),
        )),
        _ => Ok(()),
    }
}

/// Stores the pin inside `tx`: a certificate pinned already is updated in place (name, role,
/// address), never pinned twice.
pub async fn upsert(
    tx: &mut sqlx::SqliteConnection,
    pin: &NewPin<'_>,
    now_ms: i64,
) -> Result<Pinned, FleetError> {
    let fail = |err| FleetError::database("store the peer's pin", err);
    let updated = sqlx::query(
        "UPDATE fleet_peers SET name = ?, role = ?, address = ?, updated_at_ms = ?, \
         last_problem = NULL, silent_since_ms = NULL WHERE fingerprint = ?",
    )
    .bind(pin.name)
    .bind(pin.role.as_str())
    .bind(pin.address)
    .bind(now_ms)
    .bind(pin.fingerprint.to_string())
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    if updated.rows_affected() > 0 {
        return Ok(Pinned::Updated);
    }
    sqlx::query(
        "INSERT INTO fleet_peers (name, fingerprint, role, address, paired_at_ms, updated_at_ms) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(pin.name)
    .bind(pin.fingerprint.to_string())
    .bind(pin.role.as_str())
    .bind(pin.address)
    .bind(now_ms)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    Ok(Pinned::New)
}

/// Deletes the pin of that name; the removed peer, if there was one.
pub async fn remove(pool: &SqlitePool, name: &str) -> Result<Option<Peer>, FleetError> {
    let Some(peer) = by_name(pool, name).await? else {
        return Ok(None);
    };
    sqlx::query("DELETE FROM fleet_peers WHERE fingerprint = ?")
        .bind(peer.fingerprint.to_string())
        .execute(pool)
        .await
        .map_err(|err| FleetError::database("remove the peer", err))?;
    Ok(Some(peer))
}

/// Records whether the peer answered just now (the first silence keeps its time).
pub async fn record_answer(
    pool: &SqlitePool,
    fingerprint: Fingerprint,
    problem: Option<&str>,
    now_ms: i64,
) -> Result<(), FleetError> {
    let query = match problem {
        None => sqlx::query(
            "UPDATE fleet_peers SET last_answer_at_ms = ?, silent_since_ms = NULL, last_problem = NULL \
             WHERE fingerprint = ?",
        )
        .bind(now_ms),
        Some(problem) => sqlx::query(
            "UPDATE fleet_peers SET silent_since_ms = COALESCE(silent_since_ms, ?), last_problem = ? \
             WHERE fingerprint = ?",
        )
        .bind(now_ms)
        .bind(problem),
    };
    query
        .bind(fingerprint.to_string())
        .execute(pool)
        .await
        .map_err(|err| FleetError::database("record the peer's answer", err))?;
    Ok(())
}
