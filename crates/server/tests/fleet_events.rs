//! A rig's live events through its desk: the browser's event WebSocket, opened on the desk's
//! relay (`/api/v1/fleet/peers/NAME/api/v1/events`), is the rig's own event stream carried over
//! the pinned channel — its hello, its telemetry frames, its events as they happen — under the
//! desk's token and origin checks; it closes when the rig goes away.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::fleet_member::Member;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The upgrade request for `path` on `member`, with its token when `signed_in`, from `origin`.
fn ws_request(
    member: &Member,
    path: &str,
    signed_in: bool,
    origin: Option<&str>,
) -> tungstenite::handshake::client::Request {
    let url = member.url(path).replacen("http://", "ws://", 1);
    let mut request = url.into_client_request().unwrap();
    if signed_in {
        let bearer = format!("Bearer {}", member.token);
        request
            .headers_mut()
            .insert("authorization", bearer.parse().unwrap());
    }
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().unwrap());
    }
    request
}

/// The next JSON message of `type` within `within` (others are skipped); `None` when the socket
/// closed first.
async fn next_of(socket: &mut Socket, kind: &str, within: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("no '{kind}' event within {within:?}"));
        match message {
            Some(Ok(Message::Text(text))) => {
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["type"] == kind {
                    return Some(value);
                }
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

fn gpu_names(frame: &Value) -> Vec<String> {
    frame["data"]["sample"]["gpus"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rigs_event_socket_reaches_the_browser_through_its_desk() {
    let root = tempfile::Builder::new()
        .prefix("rigdeck-fleet-events")
        .tempdir()
        .unwrap();
    let desk = Member::start(root.path(), "desk", "4x3090.json").await;
    let mut tower = Member::start(root.path(), "tower", "2x5060ti.json").await;
    desk.pair_with(&tower).await;
    let relayed = "/api/v1/fleet/peers/tower/api/v1/events";

    // Without the desk's token, or from another site's page, the desk refuses the upgrade.
    let unsigned = tokio_tungstenite::connect_async(ws_request(&desk, relayed, false, None)).await;
    assert!(unsigned.is_err(), "an upgrade without a token was accepted");
    let foreign = ws_request(&desk, relayed, true, Some("http://evil.example"));
    assert!(tokio_tungstenite::connect_async(foreign).await.is_err());

    // Signed in: the rig's hello, then frames of the rig's GPUs (not the desk's), live.
    let own_origin = desk.url("");
    let request = ws_request(&desk, relayed, true, Some(&own_origin));
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the relayed event socket opens");
    let within = Duration::from_secs(15);
    let hello = next_of(&mut socket, "hello", within)
        .await
        .expect("a hello");
    assert!(
        hello["data"]["telemetry_period_ms"].as_u64().is_some(),
        "{hello}"
    );
    let first = next_of(&mut socket, "telemetry.frame", within)
        .await
        .expect("a frame");
    assert_eq!(gpu_names(&first), ["NVIDIA GeForce RTX 5060 Ti"; 2]);
    let second = next_of(&mut socket, "telemetry.frame", within)
        .await
        .expect("a second frame");
    assert!(
        second["data"]["sample"]["at_ms"].as_i64() > first["data"]["sample"]["at_ms"].as_i64(),
        "the frames are not live: {second}"
    );

    // An event the rig publishes as it happens: a model folder added on the rig.
    let folder = root.path().join("tower-models");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("notes.gguf"), b"not a model").unwrap();
    let body = json!({ "path": folder });
    let (status, added) = tower
        .call("POST", "/api/v1/models/folders", Some(body))
        .await;
    assert!((200..300).contains(&status), "{status} {added}");
    let changed = next_of(&mut socket, "library.changed", within).await;
    assert!(
        changed.is_some(),
        "the rig's library.changed did not arrive"
    );

    // The desk's own socket still carries the desk's own GPUs.
    let request = ws_request(&desk, "/api/v1/events", true, Some(&own_origin));
    let (mut own, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let frame = next_of(&mut own, "telemetry.frame", within).await.unwrap();
    assert_eq!(gpu_names(&frame).len(), 4, "{frame}");

    // The rig goes away: the browser's socket closes, so its client reconnects and says why.
    tower.kill();
    let ended = tokio::time::timeout(within, async {
        while next_of(&mut socket, "never", Duration::from_secs(60))
            .await
            .is_some()
        {}
    })
    .await;
    assert!(ended.is_ok(), "the relayed socket outlived its rig");
}
