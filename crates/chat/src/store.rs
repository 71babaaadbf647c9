//! The chat tables: conversations and their message trees.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use crate::conversation::{
    Conversation, ConversationSummary, Message, Params, Role, Stats, Status,
};

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("no conversation with id {0}: the Chat page lists them")]
    NoConversation(i64),
    #[error("no message with id {0} in this conversation")]
    NoMessage(i64),
    #[error("{0}")]
    Invalid(String),
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// The chat tables over the daemon's database.
#[derive(Clone)]
pub struct ChatStore {
    pool: SqlitePool,
}

const CONVERSATION_COLUMNS: &str =
    "id, title, model, system_prompt, params, active_leaf, created_at_ms, updated_at_ms";

impl ChatStore {
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// Replies a daemon left half-written when it ended are marked so; their text is kept.
    pub async fn mark_interrupted(&self) -> Result<u64, ChatError> {
        let done = sqlx::query(
            "UPDATE chat_messages SET status = 'interrupted', \
             error = 'Rigdeck stopped while this reply was being written' WHERE status = 'streaming'",
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    pub async fn create(
        &self,
        title: &str,
        model: &str,
        system_prompt: &str,
        params: &Params,
        now_ms: i64,
    ) -> Result<Conversation, ChatError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO chat_conversations (title, model, system_prompt, params, created_at_ms, updated_at_ms) \
             VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(title)
        .bind(model)
        .bind(system_prompt)
        .bind(json(params))
        .bind(now_ms)
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        self.conversation(id).await
    }

    pub async fn conversation(&self, id: i64) -> Result<Conversation, ChatError> {
        let row = sqlx::query(&format!(
            "SELECT {CONVERSATION_COLUMNS} FROM chat_conversations WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(ChatError::NoConversation(id))?;
        Ok(conversation(&row))
    }

    /// Newest first; with `query`, those whose title or a message contains it.
    pub async fn list(&self, query: Option<&str>) -> Result<Vec<ConversationSummary>, ChatError> {
        let query = query.map(str::trim).filter(|q| !q.is_empty());
        let rows = match query {
            None => {
                sqlx::query(
                    "SELECT id, title, model, created_at_ms, updated_at_ms, NULL AS snippet \
                     FROM chat_conversations ORDER BY updated_at_ms DESC, id DESC",
                )
                .fetch_all(&self.pool)
                .await?
            }
            Some(q) => {
                let pattern = format!(
                    "%{}%",
                    q.replace('\\', "\\\\")
                        .replace('%', "\\%")
                        .replace('_', "\\_")
                );
                sqlx::query(
                    "SELECT c.id, c.title, c.model, c.created_at_ms, c.updated_at_ms, \
                     (SELECT m.content FROM chat_messages m WHERE m.conversation_id = c.id \
                      AND m.content LIKE ?1 ESCAPE '\\' ORDER BY m.id DESC LIMIT 1) AS snippet \
                     FROM chat_conversations c WHERE c.title LIKE ?1 ESCAPE '\\' OR EXISTS \
                     (SELECT 1 FROM chat_messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\') \
                     ORDER BY c.updated_at_ms DESC, c.id DESC",
                )
                .bind(pattern)
                .fetch_all(&self.pool)
                .await?
            }
        };
        Ok(rows
            .iter()
            .map(|r| ConversationSummary {
                id: r.get("id"),
                title: r.get("title"),
                model: r.get("model"),
                created_at_ms: r.get("created_at_ms"),
                updated_at_ms: r.get("updated_at_ms"),
                snippet: r
                    .get::<Option<String>, _>("snippet")
                    .map(|text| excerpt(&text, query.unwrap_or(""))),
            })
            .collect())
    }

    pub async fn save(&self, c: &Conversation, now_ms: i64) -> Result<Conversation, ChatError> {
        let updated = sqlx::query(
            "UPDATE chat_conversations SET title = ?, model = ?, system_prompt = ?, params = ?, \
             active_leaf = ?, updated_at_ms = ? WHERE id = ?",
        )
        .bind(&c.title)
        .bind(&c.model)
        .bind(&c.system_prompt)
        .bind(json(&c.params))
        .bind(c.active_leaf)
        .bind(now_ms)
        .bind(c.id)
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(ChatError::NoConversation(c.id));
        }
        self.conversation(c.id).await
    }

    pub async fn delete(&self, id: i64) -> Result<(), ChatError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM chat_messages WHERE conversation_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let deleted = sqlx::query("DELETE FROM chat_conversations WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if deleted.rows_affected() == 0 {
            return Err(ChatError::NoConversation(id));
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every message of every branch, oldest first.
    pub async fn messages(&self, conversation_id: i64) -> Result<Vec<Message>, ChatError> {
        let rows = sqlx::query("SELECT * FROM chat_messages WHERE conversation_id = ? ORDER BY id")
            .bind(conversation_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(message).collect())
    }

    pub async fn message(&self, id: i64) -> Result<Message, ChatError> {
        let row = sqlx::query("SELECT * FROM chat_messages WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(ChatError::NoMessage(id))?;
        Ok(message(&row))
    }

    /// Adds a message and makes it the conversation's shown branch.
    pub async fn add(&self, m: &Message, now_ms: i64) -> Result<Message, ChatError> {
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO chat_messages (conversation_id, parent_id, role, content, reasoning, images, \
             model, status, error, stats, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(m.conversation_id)
        .bind(m.parent_id)
        .bind(m.role.as_str())
        .bind(&m.content)
        .bind(&m.reasoning)
        .bind(json(&m.images))
        .bind(&m.model)
        .bind(m.status.as_str())
        .bind(&m.error)
        .bind(json(&m.stats))
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE chat_conversations SET active_leaf = ?, updated_at_ms = ? WHERE id = ?",
        )
        .bind(id)
        .bind(now_ms)
        .bind(m.conversation_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.message(id).await
    }

    /// Writes a reply's text, state and figures as they are now.
    pub async fn update_reply(&self, m: &Message) -> Result<(), ChatError> {
        sqlx::query(
            "UPDATE chat_messages SET content = ?, reasoning = ?, status = ?, error = ?, stats = ? WHERE id = ?",
        )
        .bind(&m.content)
        .bind(&m.reasoning)
        .bind(m.status.as_str())
        .bind(&m.error)
        .bind(json(&m.stats))
        .bind(m.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    // Plain data types: serialising cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

fn conversation(row: &SqliteRow) -> Conversation {
    Conversation {
        id: row.get("id"),
        title: row.get("title"),
        model: row.get("model"),
        system_prompt: row.get("system_prompt"),
        params: serde_json::from_str(row.get("params")).unwrap_or_default(),
        active_leaf: row.get("active_leaf"),
        created_at_ms: row.get("created_at_ms"),
        updated_at_ms: row.get("updated_at_ms"),
    }
}

fn message(row: &SqliteRow) -> Message {
    let role: String = row.get("role");
    Message {
        id: row.get("id"),
        conversation_id: row.get("conversation_id"),
        parent_id: row.get("parent_id"),
        role: if role == "user" {
            Role::User
        } else {
            Role::Assistant
        },
        content: row.get("content"),
        reasoning: row.get("reasoning"),
        images: serde_json::from_str(row.get("images")).unwrap_or_default(),
        model: row.get("model"),
        status: Status::parse(row.get("status")),
        error: row.get("error"),
        stats: serde_json::from_str::<Stats>(row.get("stats")).unwrap_or_default(),
        created_at_ms: row.get("created_at_ms"),
    }
}

/// About 120 characters of `text` around the first match of `query`.
fn excerpt(text: &str, query: &str) -> String {
    let lower = text.to_lowercase();
    let at = lower.find(&query.to_lowercase()).unwrap_or(0);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let index = chars.iter().position(|(i, _)| *i >= at).unwrap_or(0);
    let start = index.saturating_sub(40);
    let end = (index + 80).min(chars.len());
    let mut out: String = chars[start..end].iter().map(|(_, c)| c).collect();
    if start > 0 {
        out.insert(0, '…');
    }
    if end < chars.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_centre_on_the_match_and_respect_characters() {
        let text = format!("{}needle{}", "é".repeat(100), "x".repeat(100));
        let e = excerpt(&text, "NEEDLE");
        assert!(e.starts_with('…') && e.ends_with('…') && e.contains("needle"));
        assert_eq!(excerpt("short", "zz"), "short");
    }
}
