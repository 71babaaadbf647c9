//! Rigdeck's chat: conversations stored server-side (the window and any browser see the same
//! ones), messages as a tree so edits and regenerations are branches to flip between, replies
//! written by the daemon through the gateway (so a model loads on request like for any client)
//! and saved as they stream, stop, search and export.

pub mod conversation;
pub mod engine;
pub mod export;
pub mod reply;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rigdeck_gateway::Gateway;
use serde::Deserialize;
use tokio::sync::watch;

pub use conversation::{
    default_reply_tokens, Conversation, ConversationSummary, Message, Params, Role, Stats, Status,
    DEFAULT_REPLY_TOKENS,
};
pub use reply::{ChatEvents, Delta};
pub use store::{ChatError, ChatStore};

use conversation::path_to;
use reply::{request_body, Writer};

/// A new conversation.
#[derive(Debug, Clone, Deserialize)]
pub struct NewConversation {
    pub model: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub params: Option<Params>,
}

/// Changes to a conversation; absent fields stay.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationChange {
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    pub params: Option<Params>,
    pub active_leaf: Option<i64>,
}

/// A user message to send.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMessage {
    /// The message it answers (an assistant reply), or `None` for the first message; an edit
    /// uses the edited message's parent.
    pub parent_id: Option<i64>,
    pub content: String,
    #[serde(default)]
    pub images: Vec<String>,
}

/// The largest attached image, as a `data:` URL.
const MAX_IMAGE_BYTES: usize = 20 << 20;
const NEW_TITLE: &str = "New chat";

pub struct Chat {
    store: ChatStore,
    writer: Arc<Writer>,
    /// Replies being written, by message id: sending `true` stops one.
    running: Arc<Mutex<HashMap<i64, watch::Sender<bool>>>>,
}

impl Chat {
    /// Marks replies an earlier daemon left half-written as interrupted.
    pub async fn start(
        pool: sqlx::SqlitePool,
        gateway: Arc<Gateway>,
        events: Arc<dyn ChatEvents>,
    ) -> Result<Arc<Self>, ChatError> {
        let store = ChatStore::new(pool);
        let interrupted = store.mark_interrupted().await?;
        if interrupted > 0 {
            tracing::info!("{interrupted} chat repl(ies) were cut off by the last shutdown");
        }
        Ok(Arc::new(Self {
            writer: Arc::new(Writer {
                store: store.clone(),
                gateway,
                events,
            }),
            store,
            running: Arc::default(),
        }))
    }

    pub fn store(&self) -> &ChatStore {
        &self.store
    }

    pub async fn create(
        &self,
        new: NewConversation,
        now_ms: i64,
    ) -> Result<Conversation, ChatError> {
        if new.model.trim().is_empty() {
            return Err(ChatError::Invalid(
                "a conversation needs a model: pick one of GET /api/v1/chat/models".into(),
            ));
        }
        let title = new.title.filter(|t| !t.trim().is_empty());
        self.store
            .create(
                title.as_deref().unwrap_or(NEW_TITLE),
                new.model.trim(),
                new.system_prompt.as_deref().unwrap_or(""),
                &new.params.unwrap_or_default(),
                now_ms,
            )
            .await
    }

    pub async fn change(
        &self,
        id: i64,
        change: ConversationChange,
        now_ms: i64,
    ) -> Result<Conversation, ChatError> {
        let mut c = self.store.conversation(id).await?;
        if let Some(leaf) = change.active_leaf {
            let message = self.store.message(leaf).await?;
            if message.conversation_id != id {
                return Err(ChatError::NoMessage(leaf));
            }
            c.active_leaf = Some(leaf);
        }
        if let Some(title) = change.title.filter(|t| !t.trim().is_empty()) {
            c.title = title.trim().to_owned();
        }
        if let Some(model) = change.model.filter(|m| !m.trim().is_empty()) {
            c.model = model.trim().to_owned();
        }
        if let Some(prompt) = change.system_prompt {
            c.system_prompt = prompt;
        }
        if let Some(params) = change.params {
            c.params = params;
        }
        self.store.save(&c, now_ms).await
    }

    /// Sends a user message and starts the reply; both come back at once.
    pub async fn send(
        &self,
        conversation_id: i64,
        new: NewMessage,
        now_ms: i64,
    ) -> Result<(Message, Message), ChatError> {
        let mut conversation = self.store.conversation(conversation_id).await?;
        if new.content.trim().is_empty() && new.images.is_empty() {
            return Err(ChatError::Invalid(
                "the message is empty: write something or attach an image".into(),
            ));
        }
        if let Some(bad) = new
            .images
            .iter()
            .find(|i| !i.starts_with("data:image/") || i.len() > MAX_IMAGE_BYTES)
        {
            let start: String = bad.chars().take(30).collect();
            return Err(ChatError::Invalid(format!(
                "attachment '{start}…' is not an image data URL of at most {} MiB: attach PNG, JPEG or WebP files",
                MAX_IMAGE_BYTES >> 20
            )));
        }
        if let Some(parent) = new.parent_id {
            let parent = self.store.message(parent).await?;
            if parent.conversation_id != conversation_id || parent.role != Role::Assistant {
                return Err(ChatError::Invalid(format!(
                    "message {} is not a reply in this conversation: a new message follows an assistant reply (or none, to start over)",
                    parent.id
                )));
            }
        }
        if conversation.title == NEW_TITLE {
            conversation.title = title_from(&new.content);
            conversation = self.store.save(&conversation, now_ms).await?;
        }
        let user = self
            .store
            .add(
                &Message {
                    id: 0,
                    conversation_id,
                    parent_id: new.parent_id,
                    role: Role::User,
                    content: new.content,
                    reasoning: String::new(),
                    images: new.images,
                    model: None,
                    status: Status::Complete,
                    error: None,
                    stats: Stats::default(),
                    created_at_ms: now_ms,
                },
                now_ms,
            )
            .await?;
        // Another window showing this conversation learns of the question at once.
        self.writer.events.message(&user);
        let reply = self.reply_to(&conversation, &user, now_ms).await?;
        Ok((user, reply))
    }

    /// Writes another reply to the same user message (a sibling branch).
    pub async fn regenerate(&self, message_id: i64, now_ms: i64) -> Result<Message, ChatError> {
        let old = self.store.message(message_id).await?;
        let parent = match (old.role, old.parent_id) {
            (Role::Assistant, Some(parent)) => self.store.message(parent).await?,
            _ => {
                return Err(ChatError::Invalid(format!(
                    "message {message_id} is not a reply: regenerate an assistant message"
                )))
            }
        };
        let conversation = self.store.conversation(old.conversation_id).await?;
        self.reply_to(&conversation, &parent, now_ms).await
    }

    async fn reply_to(
        &self,
        conversation: &Conversation,
        user: &Message,
        now_ms: i64,
    ) -> Result<Message, ChatError> {
        let messages = self.store.messages(conversation.id).await?;
        let path = path_to(&messages, user.id);
        let body = request_body(
            conversation,
            &path,
            self.default_reply_tokens(&conversation.model).await,
        );
        let reply = self
            .store
            .add(
                &Message {
                    id: 0,
                    conversation_id: conversation.id,
                    parent_id: Some(user.id),
                    role: Role::Assistant,
                    content: String::new(),
                    reasoning: String::new(),
                    images: Vec::new(),
                    model: Some(conversation.model.clone()),
                    status: Status::Streaming,
                    error: None,
                    stats: Stats::default(),
                    created_at_ms: now_ms,
                },
                now_ms,
            )
            .await?;
        self.writer.events.message(&reply);
        let (stop, stopped) = watch::channel(false);
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(reply.id, stop);
        let writer = self.writer.clone();
        let running = self.running.clone();
        let started = reply.clone();
        tokio::spawn(async move {
            let id = started.id;
            writer.write(started, body, stopped).await;
            running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        });
        Ok(reply)
    }

    /// The reply length for `model` when a conversation sets none: from its engine's context
    /// when it runs and says (llama-server), else [`DEFAULT_REPLY_TOKENS`].
    pub async fn default_reply_tokens(&self, model: &str) -> u32 {
        let context = match self.writer.gateway.upstream(model) {
            Some(upstream) => engine::engine_props(&upstream)
                .await
                .and_then(|p| p.context),
            None => None,
        };
        default_reply_tokens(context)
    }

    /// Stops a reply being written; its text so far is kept.
    pub async fn stop(&self, message_id: i64) -> Result<Message, ChatError> {
        let stop = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&message_id);
        if let Some(stop) = stop {
            let _ = stop.send(true);
            // The writer saves and announces the stopped message; wait for it to land.
            for _ in 0..100 {
                let message = self.store.message(message_id).await?;
                if message.status != Status::Streaming {
                    return Ok(message);
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        self.store.message(message_id).await
    }
}

/// The first line of the first message, shortened.
fn title_from(content: &str) -> String {
    let line = content
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    if title.is_empty() {
        NEW_TITLE.to_owned()
    } else {
        title
    }
}
