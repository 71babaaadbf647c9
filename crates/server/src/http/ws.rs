//! The event WebSocket: a hello, the latest frame at once, then every event as it happens.
//!
//! A client too slow for the stream skips ahead rather than hold the daemon back, but it is never
//! left with a stale view: whenever events were dropped for it, it gets a `resync` event (how
//! many, on which channel) and refetches what it shows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use rigdeck_core::events::{Channel, Event};
use tokio::sync::broadcast::error::RecvError;

use super::AppState;

const PING_EVERY: Duration = Duration::from_secs(20);

pub async fn events(State(state): State<Arc<AppState>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| stream_events(socket, state))
}

/// Counts the client while it is connected, even if the task ends by an error.
struct ClientCount(Arc<AppState>);

impl ClientCount {
    fn enter(state: Arc<AppState>) -> Self {
        state.ws_clients.fetch_add(1, Ordering::Relaxed);
        Self(state)
    }
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.ws_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn stream_events(mut socket: WebSocket, state: Arc<AppState>) {
    let _count = ClientCount::enter(state.clone());
    let mut events = state.bus.subscribe();
    let hello = serde_json::json!({
        "type": "hello",
        "data": { "version": env!("CARGO_PKG_VERSION"), "telemetry_period_ms": state.current_settings().telemetry_period_ms },
    });
    if send_json(&mut socket, &hello).await.is_err() {
        return;
    }
    if let Some(frame) = state.telemetry.latest() {
        if send_json(&mut socket, &Event::TelemetryFrame(frame))
            .await
            .is_err()
        {
            return;
        }
    }
    let mut ping = tokio::time::interval(PING_EVERY);
    let mut stopping = state.stopping.clone();
    loop {
        tokio::select! {
            biased;
            // Graceful shutdown does not wait for upgraded connections: close them ourselves.
            _ = async { let _ = stopping.wait_for(|stop| *stop).await; } => {
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
            // Bulk first when both are ready: an event published before another stays before it.
            event = events.bulk.recv() => if forward(&mut socket, event, Channel::Bulk).await.is_err() { break },
            event = events.state.recv() => if forward(&mut socket, event, Channel::State).await.is_err() { break },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            _ = ping.tick() => if socket.send(Message::Ping(Vec::new().into())).await.is_err() { break },
        }
    }
}

/// Sends one received event, or a `resync` when some were dropped for this client; `Err` ends
/// the connection.
async fn forward(
    socket: &mut WebSocket,
    received: Result<Arc<Event>, RecvError>,
    channel: Channel,
) -> Result<(), ()> {
    match received {
        Ok(event) => send_json(socket, event.as_ref()).await,
        Err(RecvError::Lagged(missed)) => {
            let resync = serde_json::json!({
                "type": "resync",
                "data": { "missed": missed, "channel": channel },
            });
            send_json(socket, &resync).await
        }
        Err(RecvError::Closed) => Err(()),
    }
}

async fn send_json(socket: &mut WebSocket, value: &impl serde::Serialize) -> Result<(), ()> {
    let text = serde_json::to_string(value)
        .map_err(|err| tracing::error!("event not serialisable: {err}"))?;
    socket
        .send(Message::Text(text.into()))
        .await
        .map_err(|_| ())
}
