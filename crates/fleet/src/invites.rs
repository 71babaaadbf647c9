//! The `fleet_invites` table: one-time join secrets (their SHA-256 only), each with an expiry,
//! checked in constant time and used up in the same transaction that pins the desk.

use sha2::{Digest, Sha256};
use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use subtle::ConstantTimeEq;

use crate::error::{FleetError, FleetErrorKind};
use crate::join_code::SECRET_BYTES;

/// How long a used or expired invite is remembered, so that its code is told "used" or
/// "expired" rather than "unknown".
const REMEMBER_MS: i64 = 7 * 24 * 3_600_000;

/// Whether two secret digests are equal, in time that does not depend on where they differ.
pub fn digests_match(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// The digest kept for a secret.
pub fn digest(secret: &[u8; SECRET_BYTES]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

/// A new secret from the system's random source.
pub fn new_secret() -> Result<[u8; SECRET_BYTES], FleetError> {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; SECRET_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| {
            FleetError::new(
                FleetErrorKind::Internal,
                "the system's random source failed: cannot make a join code",
            )
        })?;
    Ok(secret)
}

/// Stores an invite (and forgets those past remembering).
pub async fn store(
    pool: &SqlitePool,
    secret: &[u8; SECRET_BYTES],
    address: &str,
    now_ms: i64,
    expires_at_ms: i64,
) -> Result<(), FleetError> {
    let fail = |err| FleetError::database("store the join code", err);
    sqlx::query("DELETE FROM fleet_invites WHERE expires_at_ms < ?")
        .bind(now_ms - REMEMBER_MS)
        .execute(pool)
        .await
        .map_err(fail)?;
    sqlx::query(
        "INSERT INTO fleet_invites (secret_sha256, address, created_at_ms, expires_at_ms) VALUES (?, ?, ?, ?)",
    )
    .bind(digest(secret).to_vec())
    .bind(address)
    .bind(now_ms)
    .bind(expires_at_ms)
    .execute(pool)
    .await
    .map_err(fail)?;
    Ok(())
}

/// A usable invite, found by its secret.
pub struct ValidInvite {
    pub id: i64,
}

/// The invite whose secret this is, if it is neither used nor expired; otherwise the error that
/// says which. Every stored digest is compared, each in constant time.
pub async fn check(
    pool: &SqlitePool,
    secret: &[u8; SECRET_BYTES],
    now_ms: i64,
) -> Result<ValidInvite, FleetError> {
    let rows = sqlx::query(
        "SELECT id, secret_sha256, expires_at_ms, used_at_ms, used_by FROM fleet_invites",
    )
    .fetch_all(pool)
    .await
    .map_err(|err| FleetError::database("read the join codes", err))?;
    let presented = digest(secret);
    let mut found = None;
    for row in &rows {
        let stored: Vec<u8> = row.try_get("secret_sha256").unwrap_or_default();
        let stored: [u8; 32] = stored.try_into().unwrap_or([0; 32]);
        if digests_match(&stored, &presented) {
            found = Some(row);
        }
    }
    let Some(row) = found else {
        return Err(FleetError::new(
            FleetErrorKind::WrongSecret,
            "the rig did not make this join code (its secret is unknown there): make a new code with `rigdeck fleet invite` on the rig",
        ));
    };
    let read = |err| FleetError::database("read the join code", err);
    let used_at: Option<i64> = row.try_get("used_at_ms").map_err(read)?;
    if let Some(used_at) = used_at {
        let by: Option<String> = row.try_get("used_by").map_err(read)?;
        return Err(FleetError::new(
            FleetErrorKind::Used,
            format!(
                "this join code was already used at {} (by '{}'): a code pairs one desk once; make a new one with `rigdeck fleet invite` on the rig",
                rigdeck_supervisor::logs::format_utc_ms(used_at),
                by.unwrap_or_default()
            ),
        ));
    }
    let expires_at: i64 = row.try_get("expires_at_ms").map_err(read)?;
    if now_ms >= expires_at {
        return Err(expired(expires_at));
    }
    Ok(ValidInvite {
        id: row.try_get("id").map_err(read)?,
    })
}

/// The message for a code past its time.
pub fn expired(expires_at_ms: i64) -> FleetError {
    FleetError::new(
        FleetErrorKind::Expired,
        format!(
            "this join code expired at {}: make a new one with `rigdeck fleet invite` on the rig (--ttl gives it longer)",
            rigdeck_supervisor::logs::format_utc_ms(expires_at_ms)
        ),
    )
}

/// Marks the invite used by `desk` inside `tx`; refused when another join used it meanwhile.
pub async fn use_up(
    tx: &mut sqlx::SqliteConnection,
    invite: &ValidInvite,
    desk: &str,
    now_ms: i64,
) -> Result<(), FleetError> {
    let done = sqlx::query(
        "UPDATE fleet_invites SET used_at_ms = ?, used_by = ? WHERE id = ? AND used_at_ms IS NULL",
    )
    .bind(now_ms)
    .bind(desk)
    .bind(invite.id)
    .execute(&mut *tx)
    .await
    .map_err(|err| FleetError::database("use up the join code", err))?;
    if done.rows_affected() == 0 {
        return Err(FleetError::new(
            FleetErrorKind::Used,
            "this join code was used by another desk a moment ago: make a new one with `rigdeck fleet invite` on the rig",
        ));
    }
    Ok(())
}
