//! What a conversation is made of: its settings (model, system prompt, sampling, reasoning) and
//! its messages, a tree in which edits and regenerations are siblings.

use serde::{Deserialize, Serialize};

/// Sampling and reasoning settings, sent with every reply of the conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Params {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    pub max_tokens: Option<u32>,
    /// `None`: the model's default.
    pub reasoning: Option<Reasoning>,
    pub reasoning_effort: Option<Effort>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reasoning {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub id: i64,
    pub title: String,
    /// The gateway model (a profile name or alias).
    pub model: String,
    pub system_prompt: String,
    pub params: Params,
    /// The message whose branch is shown; `None`: the newest leaf.
    pub active_leaf: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A conversation in a list, with the text that matched a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationSummary {
    pub id: i64,
    pub title: String,
    pub model: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub snippet: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Complete,
    /// Being written now.
    Streaming,
    /// The user pressed Stop; the text so far is kept.
    Stopped,
    Error,
    /// The daemon ended while it was being written; the text so far is kept.
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Streaming => "streaming",
            Self::Stopped => "stopped",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Self {
        [
            Self::Complete,
            Self::Streaming,
            Self::Stopped,
            Self::Error,
            Self::Interrupted,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
        .unwrap_or(Self::Error)
    }
}

/// How a reply went, from the engine's own counts and times.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    pub ttft_ms: Option<f64>,
    pub prompt_tps: Option<f64>,
    pub decode_tps: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub duration_ms: Option<f64>,
    /// From the first to the last reasoning text.
    pub reasoning_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: i64,
    pub conversation_id: i64,
    pub parent_id: Option<i64>,
    pub role: Role,
    pub content: String,
    pub reasoning: String,
    /// `data:` URLs of attached images.
    pub images: Vec<String>,
    pub model: Option<String>,
    pub status: Status,
    pub error: Option<String>,
    pub stats: Stats,
    pub created_at_ms: i64,
}

/// The messages from the root down to `leaf`, oldest first.
pub fn path_to(messages: &[Message], leaf: i64) -> Vec<&Message> {
    let mut path = Vec::new();
    let mut at = Some(leaf);
    while let Some(id) = at {
        let Some(message) = messages.iter().find(|m| m.id == id) else {
            break;
        };
        path.push(message);
        at = message.parent_id;
        // A cycle cannot be written through the API; stop rather than loop if one appears.
        if path.len() > messages.len() {
            break;
        }
    }
    path.reverse();
    path
}
