//! The event WebSocket: token and origin checked on the upgrade, then a hello and live frames.

mod support;

use futures_util::StreamExt;
use support::TestServer;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

fn ws_request(
    t: &TestServer,
    token: Option<&str>,
    origin: Option<&str>,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let url = t.url("/api/v1/events").replacen("http://", "ws://", 1);
    let mut request = url.into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().unwrap());
    }
    request
}

/// A WebSocket signed in with the token, from the daemon's own origin.
async fn signed_in_socket(
    t: &TestServer,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let origin = t.server.base_url();
    let request = ws_request(t, Some(t.server.token()), Some(&origin));
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

async fn next_json(
    socket: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> serde_json::Value {
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(5), socket.next())
            .await
            .expect("message in time");
        if let Message::Text(text) = message.expect("open").expect("no error") {
            return serde_json::from_str(&text).expect("json");
        }
    }
}

#[tokio::test]
async fn an_authenticated_client_gets_hello_then_live_frames_and_is_counted() {
    let t = TestServer::start("4x3090.json").await;
    let mut socket = signed_in_socket(&t).await;
    let hello = next_json(&mut socket).await;
    assert_eq!(hello["type"], "hello");
    let first = next_json(&mut socket).await;
    assert_eq!(first["type"], "telemetry.frame");
    assert_eq!(
        first["data"]["sample"]["gpus"]["gpus"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let second = next_json(&mut socket).await;
    assert!(
        second["data"]["sample"]["at_ms"].as_i64() > first["data"]["sample"]["at_ms"].as_i64(),
        "a newer sample follows"
    );
    assert_eq!(t.server.ws_clients(), 1);
    drop(socket);
    for _ in 0..50 {
        if t.server.ws_clients() == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("closed client still counted");
}

#[tokio::test]
async fn the_upgrade_needs_the_token_and_our_origin() {
    let t = TestServer::start("4x3090.json").await;
    let no_token = tokio_tungstenite::connect_async(ws_request(&t, None, None))
        .await
        .unwrap_err();
    assert!(no_token.to_string().contains("401"), "{no_token}");
    let foreign = tokio_tungstenite::connect_async(ws_request(
        &t,
        Some(t.server.token()),
        Some("http://evil.example"),
    ))
    .await
    .unwrap_err();
    assert!(foreign.to_string().contains("403"), "{foreign}");
    assert_eq!(t.server.ws_clients(), 0);
}

#[tokio::test]
async fn shutdown_closes_open_sockets_and_still_saves_history() {
    let t = TestServer::start("2x5060ti.json").await;
    let mut socket = signed_in_socket(&t).await;
    assert_eq!(next_json(&mut socket).await["type"], "hello");
    let db = t.dir.path().join("data/rigdeck.db");
    let TestServer { server, dir, .. } = t;
    tokio::time::timeout(std::time::Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown does not hang on an open socket");
    let closed = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(5), socket.next())
            .await
            .expect("socket ends")
        {
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break true,
            Some(Ok(_)) => continue,
        }
    };
    assert!(closed);
    let store = rigdeck_core::store::Store::open(&db).await.unwrap();
    let history = store
        .history(
            rigdeck_core::telemetry::history::HistoryRange::OneHour,
            0,
            10_000,
        )
        .await
        .unwrap();
    assert_eq!(
        history.gpus.len(),
        2,
        "the partial bucket was written at shutdown"
    );
    drop(dir);
}

#[tokio::test]
async fn a_client_that_falls_behind_is_told_to_resync_and_loses_no_state_change() {
    use rigdeck_core::events::Event;
    use rigdeck_core::launch::instances::InstanceLog;
    use rigdeck_core::supervisor::{LogLine, LogStream};
    use std::sync::Arc;

    let t = TestServer::start("4x3090.json").await;
    let mut socket = signed_in_socket(&t).await;
    assert_eq!(next_json(&mut socket).await["type"], "hello");
    // The client reads nothing while an engine floods its log: 40 MB of lines fill the socket
    // buffers, and the daemon's queue for this client overflows.
    let bus = t.server.events();
    let text = "x".repeat(2000);
    for seq in 0..20_000u64 {
        let line = LogLine {
            seq,
            at_ms: 0,
            stream: LogStream::Stdout,
            text: text.clone(),
        };
        bus.publish(Event::InstanceLog(Arc::new(InstanceLog {
            name: "flood".into(),
            line,
        })));
        if seq == 10_000 {
            // A state change in the middle of the flood.
            bus.publish(Event::LibraryChanged(Arc::new(Vec::new())));
        }
    }
    let (mut resync, mut state_change, mut last_seq) = (None, false, 0);
    while last_seq < 19_999 || resync.is_none() || !state_change {
        let event = next_json(&mut socket).await;
        match event["type"].as_str() {
            Some("resync") => resync = Some(event["data"].clone()),
            Some("library.changed") => state_change = true,
            Some("instance.log") => last_seq = event["data"]["seq"].as_u64().unwrap(),
            _ => {}
        }
    }
    let resync = resync.unwrap();
    assert_eq!(resync["channel"], "bulk", "{resync}");
    assert!(resync["missed"].as_u64().unwrap() > 0, "{resync}");
}
