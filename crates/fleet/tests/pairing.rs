//! Two fleets in one process, each with its own SQLite database (the daemon's migration) and
//! identity, paired over a real TLS listener on loopback.

use std::sync::Arc;
use std::time::Duration;

use rigdeck_fleet::{FleetErrorKind, JoinCode, Role};
use sqlx::sqlite::SqlitePoolOptions;
use tokio::sync::watch;

const MIGRATION: &str = include_str!("../../core/migrations/20261204000001_fleet_peers.sql");

struct Daemon {
    fleet: Arc<rigdeck_fleet::Fleet>,
    _stop: watch::Sender<bool>,
}

async fn daemon(dir: &std::path::Path, name: &str, listen: bool) -> Daemon {
    let folder = dir.join(name);
    std::fs::create_dir_all(folder.join("fleet")).unwrap();
    std::fs::write(folder.join("fleet/name"), name).unwrap();
    let url = format!("sqlite://{}?mode=rwc", folder.join("rigdeck.db").display());
    let pool = SqlitePoolOptions::new().connect(&url).await.unwrap();
    sqlx::raw_sql(MIGRATION).execute(&pool).await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let bind = listen.then(|| "127.0.0.1:0".parse().unwrap());
    let fleet = rigdeck_fleet::start(&folder.join("fleet"), pool, bind, "test", stop_rx)
        .await
        .unwrap();
    Daemon { fleet, _stop: stop }
}

const TTL: Duration = Duration::from_secs(600);

#[tokio::test]
async fn a_desk_joins_a_rig_and_each_says_hello_to_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let rig = daemon(dir.path(), "rig", true).await;
    let desk = daemon(dir.path(), "desk", true).await;
    let invite = rig.fleet.invite(None, TTL).await.unwrap();
    let joined = desk.fleet.join(&invite.code).await.unwrap();
    assert!(!joined.already_paired);
    assert_eq!(joined.peer.name, "rig");
    assert_eq!(joined.peer.role, Role::Rig);
    assert_eq!(joined.peer.fingerprint, rig.fleet.identity().fingerprint);

    let hello = desk.fleet.hello_named("rig").await.unwrap();
    assert_eq!(hello.name, "rig");
    let back = rig.fleet.hello_named("desk").await.unwrap();
    assert_eq!(back.name, "desk");

    // The same code again: used.
    let err = desk.fleet.join(&invite.code).await.unwrap_err();
    assert_eq!(err.kind, FleetErrorKind::Used, "{err}");
    // A second code: the pin is updated, not duplicated.
    let again = rig.fleet.invite(None, TTL).await.unwrap();
    let joined = desk.fleet.join(&again.code).await.unwrap();
    assert!(joined.already_paired, "{}", joined.message);
    assert_eq!(desk.fleet.peers().await.unwrap().len(), 1);
    assert_eq!(rig.fleet.peers().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_wrong_secret_pins_nothing_and_removal_is_refused_after() {
    let dir = tempfile::tempdir().unwrap();
    let rig = daemon(dir.path(), "rig", true).await;
    let desk = daemon(dir.path(), "desk", false).await;
    let invite = rig.fleet.invite(None, TTL).await.unwrap();
    let mut forged = JoinCode::decode(&invite.code).unwrap();
    forged.secret[0] ^= 0xff;
    let err = desk.fleet.join(&forged.encode()).await.unwrap_err();
    assert_eq!(err.kind, FleetErrorKind::WrongSecret, "{err}");
    assert!(rig.fleet.peers().await.unwrap().is_empty());
    assert!(desk.fleet.peers().await.unwrap().is_empty());

    desk.fleet.join(&invite.code).await.unwrap();
    let listed = rig.fleet.peers().await.unwrap();
    assert_eq!(
        listed[0].answering, None,
        "the desk has no listener to call"
    );
    rig.fleet.remove("desk").await.unwrap();
    let err = desk.fleet.hello_named("rig").await.unwrap_err();
    assert_eq!(err.kind, FleetErrorKind::UnknownPeer);
    assert!(
        err.message
            .contains("the rig 'rig' no longer knows this desk: pair again"),
        "{err}"
    );
    let listed = desk.fleet.peers().await.unwrap();
    assert_eq!(listed[0].answering, Some(false));
    assert!(listed[0].peer.silent_since_ms.is_some());
}
