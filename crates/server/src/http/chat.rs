//! The chat API under `/api/v1/chat`: conversations, messages (send, regenerate, stop), export,
//! and the models a conversation can use. Thin wrappers over `rigdeck_chat::Chat`; replies
//! stream to the UI as `chat.delta` and `chat.message` events on the WebSocket.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use rigdeck_core::chat::engine::engine_props;
use rigdeck_core::chat::{
    default_reply_tokens, export, Chat, ChatError, Conversation, ConversationChange,
    ConversationSummary, Message, NewConversation, NewMessage,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use rigdeck_core::events::{Event, Subscription};
use rigdeck_core::library::ModelEntry;
use rigdeck_core::profiles::chat_templates;
use rigdeck_core::profiles::profile::LaunchProfile;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::error::ApiError;
use super::AppState;

type ApiResult<T> = Result<T, ApiError>;

/// The largest message body: text and a few images as data URLs.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

fn chat(state: &AppState) -> ApiResult<&Arc<Chat>> {
    state.chat.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_database",
            "chat needs the database, which could not be opened: see the daemon's log",
        )
    })
}

fn chat_error(err: ChatError) -> ApiError {
    let (status, code) = match &err {
        ChatError::NoConversation(_) => (StatusCode::NOT_FOUND, "no_such_conversation"),
        ChatError::NoMessage(_) => (StatusCode::NOT_FOUND, "no_such_message"),
        ChatError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_message"),
        ChatError::Query(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database"),
    };
    ApiError::new(status, code, err.to_string())
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    q: Option<String>,
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Vec<ConversationSummary>>> {
    let list = chat(&state)?
        .store()
        .list(query.q.as_deref())
        .await
        .map_err(chat_error)?;
    Ok(Json(list))
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    Json(new): Json<NewConversation>,
) -> ApiResult<(StatusCode, Json<Conversation>)> {
    let created = chat(&state)?
        .create(new, rigdeck_core::now_ms())
        .await
        .map_err(chat_error)?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<Value>> {
    let chat = chat(&state)?;
    let conversation = chat.store().conversation(id).await.map_err(chat_error)?;
    let messages = chat.store().messages(id).await.map_err(chat_error)?;
    Ok(Json(
        json!({"conversation": conversation, "messages": messages}),
    ))
}

pub async fn change(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
    Json(change): Json<ConversationChange>,
) -> ApiResult<Json<Conversation>> {
    let changed = chat(&state)?
        .change(id, change, rigdeck_core::now_ms())
        .await
        .map_err(chat_error)?;
    Ok(Json(changed))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<StatusCode> {
    chat(&state)?.store().delete(id).await.map_err(chat_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize)]
pub struct Sent {
    user: Message,
    assistant: Message,
}

pub async fn send(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
    Json(new): Json<NewMessage>,
) -> ApiResult<(StatusCode, Json<Sent>)> {
    let (user, assistant) = chat(&state)?
        .send(id, new, rigdeck_core::now_ms())
        .await
        .map_err(chat_error)?;
    Ok((StatusCode::ACCEPTED, Json(Sent { user, assistant })))
}

pub async fn regenerate(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let assistant = chat(&state)?
        .regenerate(id, rigdeck_core::now_ms())
        .await
        .map_err(chat_error)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"assistant": assistant}))))
}

pub async fn stop(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Json<Message>> {
    Ok(Json(chat(&state)?.stop(id).await.map_err(chat_error)?))
}

#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
}

pub async fn export(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
    Query(query): Query<ExportQuery>,
) -> ApiResult<Response> {
    let chat = chat(&state)?;
    let conversation = chat.store().conversation(id).await.map_err(chat_error)?;
    let messages = chat.store().messages(id).await.map_err(chat_error)?;
    let (text, content_type, extension) = match query.format.as_deref().unwrap_or("markdown") {
        "markdown" | "md" => (
            export::markdown(&conversation, &messages),
            "text/markdown; charset=utf-8",
            "md",
        ),
        "json" => (
            export::json(&conversation, &messages),
            "application/json",
            "json",
        ),
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_format",
                format!("no export format '{other}': use format=markdown or format=json"),
            ))
        }
    };
    let disposition = format!("attachment; filename=\"conversation-{id}.{extension}\"");
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        text,
    )
        .into_response())
}

/// A model a conversation can use, with what the chat window needs to know about it.
#[derive(Debug, Serialize)]
pub struct ChatModel {
    name: String,
    aliases: Vec<String>,
    state: &'static str,
    on_demand: bool,
    /// The running engine's context size (tokens), else the profile's; `None` when unknown.
    context: Option<u64>,
    /// Served with a vision projector.
    vision: bool,
    /// The profile's GGUF carries no chat template and the profile names none: llama-server
    /// answers in ChatML, which the model may not know.
    no_chat_template: bool,
    /// The template of the model's architecture, to set in the profile in that case.
    suggested_chat_template: Option<&'static str>,
    /// The reply length a conversation that sets none gets now (half the running engine's
    /// context, at most `DEFAULT_REPLY_TOKENS`).
    default_max_tokens: u32,
}

/// `GET /chat/models`: every profile, with the engine's own context size and vision support
/// when it runs (llama-server's `/props`), else what the profile says.
pub async fn models(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<ChatModel>>> {
    let Some(gateway) = state.gateway.clone() else {
        return Err(chat_error(ChatError::Invalid(
            "the gateway is off: see the daemon's log".into(),
        )));
    };
    let status = gateway
        .status()
        .await
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "database", err))?;
    let profiles = match &state.store {
        Some(store) => store.launch_profiles().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let library = state.library.entries();
    let mut models = Vec::new();
    for model in status.models {
        let profile = profiles.iter().find(|p| p.name == model.name);
        let profile_context = profile
            .map(|p| u64::from(p.placement.context))
            .filter(|c| *c > 0);
        let profile_vision = profile.is_some_and(|p| {
            p.extra_args
                .iter()
                .any(|a| a == "--mmproj" || a == "-mm" || a.starts_with("--mmproj="))
        });
        let props = match gateway.upstream(&model.name) {
            Some(upstream) => engine_props(&upstream).await,
            None => None,
        };
        let engine_context = props.and_then(|p| p.context);
        let missing_template = profile.and_then(|p| template_missing(p, &library));
        models.push(ChatModel {
            no_chat_template: missing_template.is_some(),
            suggested_chat_template: missing_template.flatten(),
            context: engine_context.or(profile_context),
            vision: props.map_or(profile_vision, |p| p.vision),
            // As a reply is sent: from the running engine's context only.
            default_max_tokens: default_reply_tokens(engine_context),
            state: model.state,
            on_demand: model.on_demand,
            aliases: model.aliases,
            name: model.name,
        });
    }
    Ok(Json(models))
}

/// For a llama.cpp profile that names no chat template and whose GGUF (as the library read it)
/// carries none: `Some` with its architecture's template, if one is certain.
fn template_missing(
    profile: &LaunchProfile,
    library: &[ModelEntry],
) -> Option<Option<&'static str>> {
    if profile.chat_template.is_some() {
        return None;
    }
    let summary = library
        .iter()
        .find(|e| e.path == profile.model)?
        .gguf
        .as_ref()?;
    if summary.chat_template.is_some() {
        return None;
    }
    Some(
        summary
            .architecture
            .as_deref()
            .and_then(chat_templates::for_architecture),
    )
}

/// The chat templates llama-server knows by name, and the one of each architecture.
#[derive(Debug, Serialize)]
pub struct ChatTemplates {
    names: &'static [&'static str],
    by_architecture: std::collections::BTreeMap<&'static str, &'static str>,
}

/// `GET /chat/templates`: what a profile's `chat_template` may name.
pub async fn templates() -> Json<ChatTemplates> {
    Json(ChatTemplates {
        names: chat_templates::CHAT_TEMPLATES,
        by_architecture: chat_templates::ARCHITECTURE_TEMPLATES
            .iter()
            .copied()
            .collect(),
    })
}

/// How often an idle conversation stream sends a comment: writing to a client that went away
/// fails, which ends the stream and its subscription to the bus.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// `GET /chat/conversations/{id}/events`: this conversation's `chat.message` and `chat.delta`
/// events as server-sent events, for clients without the WebSocket (`rigdeck chat`). Open it
/// before sending, so no delta of the reply is missed.
pub async fn conversation_events(
    State(state): State<Arc<AppState>>,
    Path(id): Path<i64>,
) -> ApiResult<Response> {
    chat(&state)?
        .store()
        .conversation(id)
        .await
        .map_err(chat_error)?;
    let events = conversation_stream(state.bus.subscribe(), state.stopping.clone(), id);
    Ok(with_keep_alive(events, KEEP_ALIVE_EVERY).into_response())
}

/// Server-sent events with a comment after each `every` without an event.
fn with_keep_alive<S>(events: S, every: Duration) -> impl IntoResponse
where
    S: Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
{
    Sse::new(events).keep_alive(KeepAlive::new().interval(every))
}

/// The events of conversation `id` from the bus, until the daemon stops.
fn conversation_stream(
    subscription: Subscription,
    stopping: watch::Receiver<bool>,
    id: i64,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(
        (subscription, stopping),
        move |(mut sub, mut stopping)| async move {
            loop {
                let event = tokio::select! {
                    event = sub.state.recv() => event,
                    event = sub.bulk.recv() => event,
                    _ = stopping.wait_for(|s| *s) => return None,
                };
                let event = match event {
                    Ok(event) => event,
                    // A client that fell behind is told, and refetches the conversation.
                    Err(RecvError::Lagged(_)) => {
                        let lagged = SseEvent::default().event("lagged").data("{}");
                        return Some((Ok(lagged), (sub, stopping)));
                    }
                    Err(RecvError::Closed) => return None,
                };
                let mine = match event.as_ref() {
                    Event::ChatMessage(m) => m.conversation_id == id,
                    Event::ChatDelta(d) => d.conversation_id == id,
                    _ => false,
                };
                if mine {
                    let text = serde_json::to_string(event.as_ref()).unwrap_or_default();
                    return Some((Ok(SseEvent::default().data(text)), (sub, stopping)));
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::broadcast;

    /// Serves one conversation's stream over a subscription whose senders the test keeps.
    async fn serve_stream(
        state: &broadcast::Sender<Arc<Event>>,
        bulk: &broadcast::Sender<Arc<Event>>,
        keep_alive: Duration,
    ) -> std::net::SocketAddr {
        let subscription = Subscription {
            state: state.subscribe(),
            bulk: bulk.subscribe(),
        };
        let slot = Arc::new(std::sync::Mutex::new(Some(subscription)));
        let (running, stopping) = watch::channel(false);
        let app = axum::Router::new().route(
            "/events",
            axum::routing::get(move || {
                let subscription = slot.lock().expect("never poisoned").take();
                let stopping = stopping.clone();
                async move {
                    let subscription = subscription.expect("one client");
                    with_keep_alive(conversation_stream(subscription, stopping, 7), keep_alive)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The daemon never stops during the test.
        std::mem::forget(running);
        addr
    }

    /// Stands between a client and `server` like a NAT that forgot the connection once the
    /// client left: the server is told nothing until it next writes, and then it is closed.
    async fn forgetful_middlebox(server: std::net::SocketAddr) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            let (client, _) = listener.accept().await.expect("the client");
            let upstream = tokio::net::TcpStream::connect(server)
                .await
                .expect("the server");
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = upstream.into_split();
            let (mut up, mut down) = ([0u8; 4096], [0u8; 4096]);
            loop {
                tokio::select! {
                    read = from_client.read(&mut up) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => to_server.write_all(&up[..n]).await.expect("relayed"),
                    },
                    read = from_server.read(&mut down) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => { let _ = to_client.write_all(&down[..n]).await; }
                    },
                }
            }
            // The client is gone; the next bytes from the server get the connection closed.
            let _ = from_server.read(&mut down).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_client_that_vanished_ends_its_conversation_stream_and_subscription() {
        let (state, _) = broadcast::channel::<Arc<Event>>(16);
        let (bulk, _) = broadcast::channel::<Arc<Event>>(16);
        let server = serve_stream(&state, &bulk, Duration::from_millis(50)).await;
        let middlebox = forgetful_middlebox(server).await;
        let mut client = tokio::net::TcpStream::connect(middlebox)
            .await
            .expect("connects");
        client
            .write_all(b"GET /events HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .expect("the request");
        let mut head = [0u8; 512];
        let read = client.read(&mut head).await.expect("the answer's head");
        assert!(String::from_utf8_lossy(&head[..read]).contains("text/event-stream"));
        assert_eq!(state.receiver_count(), 1, "the stream is subscribed");
        drop(client);
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.receiver_count() > 0 || bulk.receiver_count() > 0 {
            assert!(
                Instant::now() < deadline,
                "the stream of a client that vanished is still subscribed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
