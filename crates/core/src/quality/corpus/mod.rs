//! The text a KL-divergence run measures on: the built-in mix shipped with Rigdeck, a text file, or
//! conversations from the chat, each in the model's own chat format.

mod builtin;
mod chat_template;
mod conversations;
mod file;

use std::path::PathBuf;

use rigdeck_chat::{ChatError, ChatStore};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use builtin::{
    builtin_bytes, builtin_parts, builtin_text, BuiltinPart, PartKind, BUILTIN_LABEL,
};
pub use chat_template::ChatFormat;
pub use file::MAX_FILE_BYTES;

/// Which text to measure on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CorpusSpec {
    /// The mix shipped with Rigdeck: prose, code, conversations and reasoning in six languages.
    Builtin,
    /// Any UTF-8 text file.
    File { path: PathBuf },
    /// Chat conversations (their shown branches), in the model's chat format.
    Conversations { ids: Vec<i64> },
}

/// The text of a corpus, ready for `llama-perplexity -f`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CorpusText {
    /// What the text is, for people.
    pub label: String,
    pub text: String,
    /// Lower-case hex sha256 of `text`'s UTF-8 bytes.
    pub sha256: String,
    /// What was done differently than asked (a chat template that failed, …).
    pub notes: Vec<String>,
}

impl CorpusText {
    fn new(label: impl Into<String>, text: String, notes: Vec<String>) -> Self {
        let sha256 = format!("{:x}", Sha256::digest(text.as_bytes()));
        Self {
            label: label.into(),
            text,
            sha256,
            notes,
        }
    }
}

/// Why a corpus has no text; each message names the thing and the fix.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("corpus file {0} does not exist: give the path of a UTF-8 text file")]
    Missing(PathBuf),
    #[error("corpus path {0} is a folder: name a text file inside it")]
    Folder(PathBuf),
    #[error("corpus path {0} is not a regular file: name a UTF-8 text file")]
    NotAFile(PathBuf),
    #[error("corpus file {path} could not be read ({source}): check its permissions")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "corpus file {path} is not UTF-8 text (invalid byte at offset {offset}): save it as UTF-8 \
         or pick a text file"
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("corpus file {0} is empty or only whitespace: put the text to measure on in it")]
    Empty(PathBuf),
    #[error(
        "corpus file {path} is over {limit_mib} MiB: use an excerpt of at most {limit_mib} MiB",
        limit_mib = MAX_FILE_BYTES >> 20
    )]
    TooLarge { path: PathBuf },
    #[error("no conversations chosen: pick at least one conversation (the Chat page lists them)")]
    NoConversations,
    #[error("no conversation with id {0}: pick one the Chat page lists")]
    UnknownConversation(i64),
    #[error(
        "the chosen conversations have no messages yet: pick conversations with messages in them"
    )]
    NoMessages,
    #[error("reading the chosen conversations failed: {0}")]
    Chat(ChatError),
}

/// The text of `spec`; conversations are read from `chats` and written in `format`.
pub async fn corpus_text(
    spec: &CorpusSpec,
    chats: &ChatStore,
    format: &ChatFormat,
) -> Result<CorpusText, CorpusError> {
    match spec {
        CorpusSpec::Builtin => Ok(CorpusText::new(BUILTIN_LABEL, builtin_text(), Vec::new())),
        CorpusSpec::File { path } => file::corpus(path).await,
        CorpusSpec::Conversations { ids } => conversations::corpus(ids, chats, format).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sha256_is_of_the_text() {
        let corpus = CorpusText::new("x", "abc".to_owned(), Vec::new());
        assert_eq!(
            corpus.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_spec_reads_from_json_by_kind_and_refuses_unknown_fields() {
        let file: CorpusSpec =
            serde_json::from_str(r#"{"kind": "file", "path": "/data/a.txt"}"#).unwrap();
        assert_eq!(
            file,
            CorpusSpec::File {
                path: "/data/a.txt".into()
            }
        );
        let chats: CorpusSpec =
            serde_json::from_str(r#"{"kind": "conversations", "ids": [3, 1]}"#).unwrap();
        assert_eq!(chats, CorpusSpec::Conversations { ids: vec![3, 1] });
        assert_eq!(
            serde_json::to_value(CorpusSpec::Builtin).unwrap(),
            serde_json::json!({"kind": "builtin"})
        );
        let extra = r#"{"kind": "file", "path": "a.txt", "paht": "b.txt"}"#;
        assert!(serde_json::from_str::<CorpusSpec>(extra).is_err());
        assert!(serde_json::from_str::<CorpusSpec>(r#"{"kind": "web"}"#).is_err());
    }
}
