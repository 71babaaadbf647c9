//! What a conversation is made of: its settings (model, system prompt, sampling, reasoning) and
//! its messages, a tree in which edits and regenerations are siblings.

use serde::{Deserialize, Serialize};

/// The reply length (tokens) when a conversation sets none: long enough for a full answer, short
/// enough that a model that never stops (a missing chat template, a small model looping) ends
/// within a minute or two instead of filling its context.
pub const DEFAULT_REPLY_TOKENS: u32 = 2048;

/// The reply length used when a conversation sets none: [`DEFAULT_REPLY_TOKENS`], and at most
/// half the engine's context per slot (when known), so the conversation keeps room.
pub fn default_reply_tokens(context: Option<u64>) -> u32 {
    let half = context
        .filter(|c| *c > 1)
        .map_or(u64::from(DEFAULT_REPLY_TOKENS), |c| c / 2);
    u32::try_from(half.min(u64::from(DEFAULT_REPLY_TOKENS))).unwrap_or(DEFAULT_REPLY_TOKENS)
}

/// Sampling and reasoning settings, sent with every reply of the conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Params {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    /// `None`: [`default_reply_tokens`].
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
    /// Why the engine ended the reply (`stop`, `length`, …); `None` when it did not say (a
    /// reply stopped by the user or cut off).
    pub finish_reason: Option<String>,
    /// The reply length it was written under (`max_tokens` of the request).
    pub max_tokens: Option<u32>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reply_length_leaves_half_the_context() {
        assert_eq!(default_reply_tokens(None), DEFAULT_REPLY_TOKENS);
        assert_eq!(default_reply_tokens(Some(0)), DEFAULT_REPLY_TOKENS);
        assert_eq!(default_reply_tokens(Some(32_768)), DEFAULT_REPLY_TOKENS);
        assert_eq!(default_reply_tokens(Some(2_048)), 1_024);
        assert_eq!(default_reply_tokens(Some(u64::MAX)), DEFAULT_REPLY_TOKENS);
    }
}
