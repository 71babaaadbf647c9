//! Registers the llama.cpp builds a Rigdeck package ships (see [`crate::engines::packaged`]) each
//! time the daemon or the engines command opens the database: the first start of a fresh install
//! finds a working engine, and an upgrade's new build takes the old one's id (and its profiles).

use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::engines::packaged::{packaged_engines_dir, probe_shipped, shipped_servers};
use crate::engines::registry::{Availability, BuildOrigin, EngineBuild, RegistryError};
use crate::store::Store;

/// Registers what the package ships, when it ships anything, and logs what changed. Failures
/// are logged too: an unusable shipped build must not keep Rigdeck from starting.
pub async fn adopt(store: &Store) {
    let Some(dir) = packaged_engines_dir() else {
        return;
    };
    let now_ms = crate::now_ms();
    for server in shipped_servers(&dir) {
        match adopt_one(store, &server, now_ms).await {
            Ok(Some(build)) => tracing::info!(
                "engine #{} shipped with Rigdeck: {} {} at {}",
                build.id,
                build.kind,
                build.version,
                build.location.display()
            ),
            Ok(None) => {}
            Err(err) => tracing::warn!(
                "the engine shipped at {} cannot be used: {err}",
                server.display()
            ),
        }
    }
}

/// Nothing when the build is registered already and its binary is no newer than the record;
/// else it is probed and stored, in the place of a shipped build of the same kind and backend
/// whose files an upgrade removed.
async fn adopt_one(
    store: &Store,
    server: &Path,
    now_ms: i64,
) -> Result<Option<EngineBuild>, RegistryError> {
    let builds = store.engine_builds().await?;
    let known = builds.iter().find(|b| b.location == server);
    if let Some(known) = known {
        if modified_ms(server).is_some_and(|changed| changed <= known.created_at_ms) {
            return Ok(None);
        }
    }
    let new = probe_shipped(server).await?;
    // A build already at this location is updated where it is (its location is unique).
    let replaced = match known {
        Some(_) => None,
        None => builds.iter().find(|b| {
            b.source == BuildOrigin::Packaged
                && b.status == Availability::Missing
                && b.kind == new.kind
                && b.backend == new.backend
        }),
    };
    let stored = match replaced {
        Some(old) => store.replace_engine_build(old.id, &new, now_ms).await?,
        None => store.save_engine_build(&new, now_ms).await?,
    };
    Ok(Some(stored))
}

/// When the binary was last written (an upgrade rewrites it), in ms since the epoch.
fn modified_ms(path: &Path) -> Option<i64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}
