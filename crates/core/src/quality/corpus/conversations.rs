//! A corpus from chat conversations: the branch each one shows (its system prompt first), written
//! in the model's chat template, or as a plain transcript when there is none or it fails.

use rigdeck_chat::conversation::path_to;
use rigdeck_chat::{ChatError, ChatStore, Conversation, Message};

use super::chat_template::{plain_transcript, render, ChatFormat, TemplateMessage};
use super::{CorpusError, CorpusText};

/// The conversations `ids` (in that order, each once), joined by a blank line.
pub(super) async fn corpus(
    ids: &[i64],
    chats: &ChatStore,
    format: &ChatFormat,
) -> Result<CorpusText, CorpusError> {
    if ids.is_empty() {
        return Err(CorpusError::NoConversations);
    }
    let mut texts = Vec::new();
    let mut notes = Vec::new();
    let mut message_count = 0;
    for id in distinct(ids) {
        let (conversation, messages) = read(chats, id).await?;
        message_count += messages.iter().filter(|m| m.role != "system").count();
        let (text, note) = written(&conversation, &messages, format);
        // Exactly one blank line between conversations, whatever a template ends with.
        texts.push(text.trim_end().to_owned());
        notes.extend(note);
    }
    if message_count == 0 {
        return Err(CorpusError::NoMessages);
    }
    if format.template.is_none() {
        notes.insert(0, NO_TEMPLATE_NOTE.to_owned());
    }
    let label = label(texts.len(), message_count);
    Ok(CorpusText::new(label, texts.join("\n\n"), notes))
}

const NO_TEMPLATE_NOTE: &str = "the model carries no chat template (tokenizer.chat_template): \
     conversations are plain 'role: content' transcripts";

fn distinct(ids: &[i64]) -> Vec<i64> {
    let mut seen = Vec::with_capacity(ids.len());
    for id in ids {
        if !seen.contains(id) {
            seen.push(*id);
        }
    }
    seen
}

/// A conversation and the messages of the branch it shows, as a template takes them.
async fn read(
    chats: &ChatStore,
    id: i64,
) -> Result<(Conversation, Vec<TemplateMessage>), CorpusError> {
    let conversation = chats.conversation(id).await.map_err(|e| match e {
        ChatError::NoConversation(id) => CorpusError::UnknownConversation(id),
        other => CorpusError::Chat(other),
    })?;
    let all = chats.messages(id).await.map_err(CorpusError::Chat)?;
    let messages = shown_branch(&conversation, &all);
    Ok((conversation, messages))
}

/// The system prompt (when set), then the shown branch from the root down, as the chat and its
/// Markdown export show it: to the chosen leaf, else to the newest message.
fn shown_branch(conversation: &Conversation, all: &[Message]) -> Vec<TemplateMessage> {
    let system = conversation.system_prompt.trim();
    let system = (!system.is_empty()).then(|| TemplateMessage {
        role: "system",
        content: system.to_owned(),
        reasoning_content: None,
    });
    let leaf = conversation
        .active_leaf
        .or_else(|| all.last().map(|m| m.id));
    let path = leaf.map(|leaf| path_to(all, leaf)).unwrap_or_default();
    system
        .into_iter()
        .chain(path.into_iter().map(template_message))
        .collect()
}

fn template_message(message: &Message) -> TemplateMessage {
    TemplateMessage {
        role: message.role.as_str(),
        content: message.content.clone(),
        reasoning_content: Some(message.reasoning.clone()).filter(|r| !r.trim().is_empty()),
    }
}

/// The conversation in the template, or as a plain transcript with a note saying why.
fn written(
    conversation: &Conversation,
    messages: &[TemplateMessage],
    format: &ChatFormat,
) -> (String, Option<String>) {
    let Some(template) = &format.template else {
        return (plain_transcript(messages), None);
    };
    match render(template, format, messages) {
        Ok(rendered) if rendered.dated => (
            rendered.text,
            Some(format!(
                "the chat template wrote today's date into conversation {} ('{}'): its text, \
                 and the corpus's sha256, change from day to day",
                conversation.id, conversation.title
            )),
        ),
        Ok(rendered) => (rendered.text, None),
        Err(error) => (
            plain_transcript(messages),
            Some(format!(
                "the chat template failed on conversation {} ('{}'): {error}; it is a plain \
                 'role: content' transcript instead",
                conversation.id, conversation.title
            )),
        ),
    }
}

fn label(conversations: usize, messages: usize) -> String {
    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    format!(
        "{} ({})",
        plural(conversations, "conversation"),
        plural(messages, "message")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_ids_count_once_in_their_first_place() {
        assert_eq!(distinct(&[4, 2, 4, 7, 2]), vec![4, 2, 7]);
    }

    #[test]
    fn the_label_counts_conversations_and_messages() {
        assert_eq!(label(1, 1), "1 conversation (1 message)");
        assert_eq!(label(3, 12), "3 conversations (12 messages)");
    }
}
