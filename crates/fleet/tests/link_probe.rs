//! The link probe between two paired fleets in one process, the rig behind a loopback TCP relay
//! that counts the connections made through it: the round trips and the bulk transfer share one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use rigdeck_fleet::dial::{call, Call};
use rigdeck_fleet::link_probe::{ProbePlan, MAX_PROBE_BYTES, PROBE_PATH};
use rigdeck_fleet::FleetErrorKind;
use sqlx::sqlite::SqlitePoolOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const MIGRATION: &str = include_str!("../../core/migrations/20261204000001_fleet_peers.sql");
const TTL: Duration = Duration::from_secs(600);

struct Daemon {
    fleet: Arc<rigdeck_fleet::Fleet>,
    _stop: watch::Sender<bool>,
}

async fn daemon(dir: &std::path::Path, name: &str) -> Daemon {
    let folder = dir.join(name);
    std::fs::create_dir_all(folder.join("fleet")).unwrap();
    std::fs::write(folder.join("fleet/name"), name).unwrap();
    let url = format!("sqlite://{}?mode=rwc", folder.join("rigdeck.db").display());
    let pool = SqlitePoolOptions::new().connect(&url).await.unwrap();
    sqlx::raw_sql(MIGRATION).execute(&pool).await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let bind = Some("127.0.0.1:0".parse().unwrap());
    let fleet = rigdeck_fleet::start(&folder.join("fleet"), pool, bind, "test", stop_rx)
        .await
        .unwrap();
    Daemon { fleet, _stop: stop }
}

/// A TCP relay to `target` on a loopback port of its own; the count of connections it accepted.
async fn counting_relay(target: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut outbound = TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (address, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_times_round_trips_and_a_streamed_transfer_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let rig = daemon(dir.path(), "rig").await;
    let desk = daemon(dir.path(), "desk").await;
    let (relay, accepted) = counting_relay(rig.fleet.listen_address().unwrap()).await;
    let invite = rig.fleet.invite(Some(&relay), TTL).await.unwrap();
    desk.fleet.join(&invite.code).await.unwrap();

    let before = accepted.load(Ordering::SeqCst);
    let plan = ProbePlan {
        round_trips: 5,
        bulk_bytes: 16 << 20,
        bulk_time_cap: Duration::from_secs(60),
    };
    let measured = desk.fleet.measure_link("rig", plan).await.unwrap();
    println!("{}", measured.describe());
    assert_eq!(accepted.load(Ordering::SeqCst) - before, 1, "{measured:?}");
    assert_eq!(measured.round_trips, 5);
    assert!(measured.median_round_trip_s > 0.0, "{measured:?}");
    // Every byte arrived, and the throughput is what arrived after the first chunk over its time.
    assert_eq!(measured.bytes, 16 << 20);
    assert!(
        measured.bytes_after_first > 0 && measured.bytes_after_first < measured.bytes,
        "{measured:?}"
    );
    let expected = measured.bytes_after_first as f64 / measured.seconds_after_first;
    assert!(
        (measured.throughput_bytes_per_s as f64 - expected).abs() <= 1.0,
        "{measured:?}"
    );
    assert_eq!(
        measured.latency_s(),
        measured.median_round_trip_s / 2.0,
        "{measured:?}"
    );
}

#[tokio::test]
async fn the_probe_refuses_a_size_over_its_cap_and_an_unpaired_caller() {
    let dir = tempfile::tempdir().unwrap();
    let rig = daemon(dir.path(), "rig").await;
    let desk = daemon(dir.path(), "desk").await;
    let stranger = daemon(dir.path(), "stranger").await;
    let invite = rig.fleet.invite(None, TTL).await.unwrap();
    desk.fleet.join(&invite.code).await.unwrap();
    let address = rig.fleet.listen_address().unwrap().to_string();
    let pin = rig.fleet.identity().fingerprint;
    let path = format!("{PROBE_PATH}?bytes={}", MAX_PROBE_BYTES + 1);
    fn ask<'a>(address: &'a str, pin: rigdeck_fleet::Fingerprint, path: &'a str) -> Call<'a> {
        Call {
            address,
            pin,
            method: Method::GET,
            path,
            body: None,
            within: Duration::from_secs(10),
        }
    }

    let err = call(desk.fleet.identity(), ask(&address, pin, &path))
        .await
        .unwrap_err();
    assert_eq!(err.kind, FleetErrorKind::BadInput, "{err}");
    assert!(err.message.contains("at most 67108864 bytes"), "{err}");

    let small = format!("{PROBE_PATH}?bytes=1");
    let err = call(stranger.fleet.identity(), ask(&address, pin, &small))
        .await
        .unwrap_err();
    assert_eq!(err.kind, FleetErrorKind::UnknownPeer, "{err}");
}
