//! A conversation as a file: Markdown (the branch shown, reasoning folded) or JSON (everything,
//! every branch, as the API returns it).

use std::fmt::Write as _;

use serde_json::json;

use crate::conversation::{path_to, Conversation, Message, Role, Status};

/// The branch shown, as Markdown.
pub fn markdown(conversation: &Conversation, messages: &[Message]) -> String {
    let mut out = format!(
        "# {}\n\nModel: `{}`\n",
        conversation.title, conversation.model
    );
    if !conversation.system_prompt.trim().is_empty() {
        let _ = write!(out, "\n> System: {}\n", conversation.system_prompt.trim());
    }
    let leaf = conversation
        .active_leaf
        .or_else(|| messages.last().map(|m| m.id));
    let path = leaf.map(|leaf| path_to(messages, leaf)).unwrap_or_default();
    for m in path {
        let who = match m.role {
            Role::User => "User".to_owned(),
            Role::Assistant => format!("Assistant ({})", m.model.as_deref().unwrap_or("?")),
        };
        let _ = write!(out, "\n## {who}\n\n");
        if !m.reasoning.trim().is_empty() {
            let _ = write!(
                out,
                "<details><summary>Reasoning</summary>\n\n{}\n\n</details>\n\n",
                m.reasoning.trim()
            );
        }
        out.push_str(m.content.trim_end());
        out.push('\n');
        for _ in &m.images {
            out.push_str("\n*(image attached)*\n");
        }
        match m.status {
            Status::Stopped => out.push_str("\n*(stopped)*\n"),
            Status::Interrupted => out.push_str("\n*(interrupted)*\n"),
            Status::Error => {
                let _ = write!(out, "\n*(error: {})*\n", m.error.as_deref().unwrap_or("?"));
            }
            Status::Complete | Status::Streaming => {}
        }
    }
    out
}

/// Everything, every branch.
pub fn json(conversation: &Conversation, messages: &[Message]) -> String {
    let value = json!({"conversation": conversation, "messages": messages});
    serde_json::to_string_pretty(&value).unwrap_or_default()
}
