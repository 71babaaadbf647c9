//! Writing one reply: the engine request built from the branch (system prompt, messages with
//! images, sampling, reasoning the way engines take it), sent through the gateway like any
//! client's, and its stream read event by event: text and reasoning appended, announced as
//! deltas, saved twice a second (so a daemon killed mid-reply keeps what was written), and the
//! engine's own figures and finish reason kept when it ends. Stop drops the stream, which
//! cancels the engine; the reply keeps its token count and speed from what had arrived.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use futures_util::StreamExt;
use rigdeck_gateway::proxy::sse::{events, EventSplitter};
use rigdeck_gateway::proxy::tally::Tally;
use rigdeck_gateway::{Caller, Gateway, Route};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::conversation::{Conversation, Message, Reasoning, Role, Stats, Status};
use crate::store::ChatStore;

/// How often a growing reply is written to the database.
const SAVE_EVERY: Duration = Duration::from_millis(500);

/// Text to append to a reply, as the UI receives it. Offsets count UTF-16 units, as
/// JavaScript strings do, so a client can tell whether it missed a delta.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delta {
    pub conversation_id: i64,
    pub message_id: i64,
    pub content_offset: usize,
    pub content: String,
    pub reasoning_offset: usize,
    pub reasoning: String,
    /// Text events so far (about one token each).
    pub completion_tokens: u64,
    pub elapsed_ms: u64,
    /// What happens before the first token ("loading model x on GPU 1, 40 %").
    pub status_line: Option<String>,
}

/// Where a reply's progress is announced (the daemon's event bus).
pub trait ChatEvents: Send + Sync + 'static {
    /// A message was created or changed state.
    fn message(&self, message: &Message);
    fn delta(&self, delta: &Delta);
}

/// The body of the engine request for a reply whose branch is `path` (oldest first), with
/// `default_max_tokens` as the reply length when the conversation sets none.
pub fn request_body(
    conversation: &Conversation,
    path: &[&Message],
    default_max_tokens: u32,
) -> Value {
    let mut messages = Vec::new();
    if !conversation.system_prompt.trim().is_empty() {
        messages.push(json!({"role": "system", "content": conversation.system_prompt}));
    }
    for m in path {
        messages.push(match (m.role, m.images.is_empty()) {
            (Role::User, false) => {
                let mut parts = vec![json!({"type": "text", "text": m.content})];
                parts.extend(
                    m.images
                        .iter()
                        .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
                );
                json!({"role": "user", "content": parts})
            }
            (role, _) => json!({"role": role.as_str(), "content": m.content}),
        });
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(conversation.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    let p = &conversation.params;
    let numbers = [
        ("temperature", p.temperature.map(|v| json!(v))),
        ("top_p", p.top_p.map(|v| json!(v))),
        ("top_k", p.top_k.map(|v| json!(v))),
        ("min_p", p.min_p.map(|v| json!(v))),
        (
            "max_tokens",
            Some(json!(p.max_tokens.unwrap_or(default_max_tokens))),
        ),
    ];
    for (name, value) in numbers {
        if let Some(value) = value {
            body.insert(name.into(), value);
        }
    }
    // llama.cpp, vLLM and SGLang pass chat_template_kwargs to the model's template, whose
    // `enable_thinking` switches reasoning (Qwen3, GLM, DeepSeek); gpt-oss takes an effort.
    if let Some(reasoning) = p.reasoning {
        body.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": reasoning == Reasoning::On}),
        );
    }
    if let Some(effort) = p.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    Value::Object(body)
}

/// A reply being written.
pub struct Writer {
    pub store: ChatStore,
    pub gateway: Arc<Gateway>,
    pub events: Arc<dyn ChatEvents>,
}

/// Follows one reply from request to end.
struct Progress {
    reply: Message,
    tally: Tally,
    started: Instant,
    saved: Instant,
    content_units: usize,
    reasoning_units: usize,
    text_events: u64,
    /// When the first and the latest reasoning text arrived ("thought for 12.3 s").
    reasoning_from: Option<Instant>,
    reasoning_to: Option<Instant>,
    /// The engine's `finish_reason`, once it says.
    finish_reason: Option<String>,
    /// The request's reply length.
    max_tokens: Option<u32>,
}

impl Writer {
    /// Writes `reply` (already stored, status streaming) until the engine ends or `stop` turns
    /// true; returns the final message.
    pub async fn write(
        &self,
        reply: Message,
        body: Value,
        mut stop: watch::Receiver<bool>,
    ) -> Message {
        let mut progress = Progress {
            reply,
            tally: Tally::default(),
            started: Instant::now(),
            saved: Instant::now(),
            content_units: 0,
            reasoning_units: 0,
            text_events: 0,
            reasoning_from: None,
            reasoning_to: None,
            finish_reason: None,
            max_tokens: body
                .get("max_tokens")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        };
        let caller = Caller {
            key_id: None,
            name: "Rigdeck chat".to_owned(),
        };
        let bytes = bytes::Bytes::from(body.to_string());
        let response = tokio::select! {
            response = self.gateway.handle(Route::ChatCompletions, caller, bytes) => response,
            _ = stopped(&mut stop) => return self.end(progress, Status::Stopped, None).await,
        };
        if !response.status().is_success() {
            let error = error_text(response).await;
            return self.end(progress, Status::Error, Some(error)).await;
        }
        let mut stream = response.into_body().into_data_stream();
        let mut splitter = EventSplitter::default();
        loop {
            let chunk = tokio::select! {
                chunk = stream.next() => chunk,
                _ = stopped(&mut stop) => return self.end(progress, Status::Stopped, None).await,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    if let Some(whole) = splitter.push(&bytes) {
                        self.read_events(&mut progress, &whole);
                    }
                }
                Some(Err(err)) => {
                    let error = format!("the reply broke off: {err}");
                    return self.end(progress, Status::Error, Some(error)).await;
                }
                None => break,
            }
            if progress.saved.elapsed() >= SAVE_EVERY {
                progress.saved = Instant::now();
                self.save(&progress).await;
            }
        }
        let error = progress.tally.error.clone();
        let status = if error.is_some() {
            Status::Error
        } else {
            Status::Complete
        };
        self.end(progress, status, error).await
    }

    fn read_events(&self, progress: &mut Progress, whole: &[u8]) {
        for (range, event) in events(whole) {
            let raw = &whole[range];
            let now = Instant::now();
            if let Some(comment) = raw.strip_prefix(b": ") {
                let line = String::from_utf8_lossy(comment).trim().to_owned();
                self.announce(progress, String::new(), String::new(), Some(line));
                continue;
            }
            progress.tally.event(&event.data, now, false);
            let Ok(value) = serde_json::from_slice::<Value>(&event.data) else {
                continue;
            };
            if let Some(reason) = value
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
            {
                progress.finish_reason = Some(reason.to_owned());
            }
            let delta = value.pointer("/choices/0/delta");
            let text = |key: &str| {
                delta
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let (content, reasoning) = (text("content"), text("reasoning_content"));
            if !reasoning.is_empty() {
                progress.reasoning_from.get_or_insert(now);
                progress.reasoning_to = Some(now);
            }
            if !content.is_empty() || !reasoning.is_empty() {
                progress.text_events += 1;
                self.announce(progress, content, reasoning, None);
            }
        }
    }

    fn announce(
        &self,
        progress: &mut Progress,
        content: String,
        reasoning: String,
        status_line: Option<String>,
    ) {
        let delta = Delta {
            conversation_id: progress.reply.conversation_id,
            message_id: progress.reply.id,
            content_offset: progress.content_units,
            reasoning_offset: progress.reasoning_units,
            completion_tokens: progress.text_events,
            elapsed_ms: u64::try_from(progress.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            status_line,
            content,
            reasoning,
        };
        progress.content_units += delta.content.encode_utf16().count();
        progress.reasoning_units += delta.reasoning.encode_utf16().count();
        progress.reply.content.push_str(&delta.content);
        progress.reply.reasoning.push_str(&delta.reasoning);
        self.events.delta(&delta);
    }

    async fn save(&self, progress: &Progress) {
        if let Err(err) = self.store.update_reply(&progress.reply).await {
            tracing::warn!("could not save chat reply {}: {err}", progress.reply.id);
        }
    }

    async fn end(&self, mut progress: Progress, status: Status, error: Option<String>) -> Message {
        progress.reply.stats = stats(&progress.tally, progress.started, progress.text_events);
        progress.reply.stats.max_tokens = progress.max_tokens;
        progress.reply.stats.finish_reason = progress.finish_reason.take();
        progress.reply.stats.reasoning_ms = match (progress.reasoning_from, progress.reasoning_to) {
            (Some(from), Some(to)) => Some(to.duration_since(from).as_secs_f64() * 1000.0),
            _ => None,
        };
        progress.reply.status = status;
        progress.reply.error = error;
        self.save(&progress).await;
        self.events.message(&progress.reply);
        progress.reply
    }
}

/// Resolves when Stop was pressed (never when the reply's stop switch is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The reply's figures: the engine's counts, else (a reply stopped before the engine's last
/// event) the text events that arrived, about one token each.
fn stats(tally: &Tally, started: Instant, text_events: u64) -> Stats {
    let mut tally = tally.clone();
    if tally.completion_tokens.is_none() && text_events > 0 {
        tally.completion_tokens = Some(text_events);
    }
    let ttft = tally.first_token.map(|t| t.duration_since(started));
    let prompt_tps = tally.engine_prompt_tps.or_else(|| {
        let seconds = ttft?.as_secs_f64();
        let tokens = tally.prompt_tokens? - tally.cached_tokens.unwrap_or(0);
        (seconds > 0.0 && tokens > 0).then(|| tokens as f64 / seconds)
    });
    Stats {
        ttft_ms: ttft.map(|d| d.as_secs_f64() * 1000.0),
        prompt_tps,
        decode_tps: tally.decode_tps(),
        prompt_tokens: tally.prompt_tokens,
        completion_tokens: tally.completion_tokens,
        duration_ms: Some(started.elapsed().as_secs_f64() * 1000.0),
        reasoning_ms: None,
        finish_reason: None,
        max_tokens: None,
    }
}

/// The message of an error answer (OpenAI's shape), else its text.
async fn error_text(response: Response) -> String {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    value
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map_or_else(
            || {
                format!(
                    "the gateway answered {status}: {}",
                    String::from_utf8_lossy(&body)
                )
            },
            str::to_owned,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Effort, Params};

    fn message(id: i64, role: Role, content: &str, images: Vec<String>) -> Message {
        Message {
            id,
            conversation_id: 1,
            parent_id: None,
            role,
            content: content.into(),
            reasoning: String::new(),
            images,
            model: None,
            status: Status::Complete,
            error: None,
            stats: Stats::default(),
            created_at_ms: 0,
        }
    }

    #[test]
    fn the_request_carries_the_branch_sampling_and_reasoning_switch() {
        let conversation = Conversation {
            id: 1,
            title: "t".into(),
            model: "qwen".into(),
            system_prompt: "Be brief.".into(),
            params: Params {
                temperature: Some(0.6),
                max_tokens: Some(64),
                reasoning: Some(Reasoning::Off),
                reasoning_effort: Some(Effort::Low),
                ..Params::default()
            },
            active_leaf: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        let (q, a, img) = (
            message(1, Role::User, "Hi", vec![]),
            message(2, Role::Assistant, "Hello", vec![]),
            message(
                3,
                Role::User,
                "What is this?",
                vec!["data:image/png;base64,AA==".into()],
            ),
        );
        let body = request_body(&conversation, &[&q, &a, &img], 2048);
        assert_eq!(body["model"], "qwen");
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(body["messages"][2]["role"], "assistant");
        assert_eq!(
            body["messages"][3]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AA=="
        );
        assert_eq!(body["temperature"], 0.6);
        assert_eq!(body["max_tokens"], 64);
        assert!(body.get("top_p").is_none());
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(body["reasoning_effort"], "low");
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    #[test]
    fn a_conversation_without_a_reply_length_gets_the_default() {
        let conversation = Conversation {
            id: 1,
            title: "t".into(),
            model: "gemma".into(),
            system_prompt: String::new(),
            params: Params::default(),
            active_leaf: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        let q = message(1, Role::User, "Hi", vec![]);
        let body = request_body(&conversation, &[&q], 1024);
        assert_eq!(body["max_tokens"], 1024);
    }

    #[test]
    fn a_stopped_reply_counts_the_tokens_that_arrived() {
        let mut tally = Tally::default();
        let start = Instant::now();
        let chunk = br#"{"choices":[{"delta":{"content":"a"}}]}"#;
        for i in 0..11u64 {
            tally.event(chunk, start + Duration::from_millis(100 + 50 * i), false);
        }
        let stats = stats(&tally, start, 11);
        assert_eq!(stats.completion_tokens, Some(11));
        let tps = stats
            .decode_tps
            .expect("a speed from the tokens that arrived");
        // Ten gaps of 50 ms between the eleven tokens.
        assert!((tps - 20.0).abs() < 0.01, "{tps}");
    }
}
