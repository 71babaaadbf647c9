//! The quality corpora against real parts: conversations stored in a real chat database,
//! written with the special tokens of the real Gemma 3 270M GGUF and with real chat templates
//! from the pinned llama.cpp's `models/templates` (the Gemma file carries none of its own); the
//! built-in corpus counted with Gemma's own tokenizer by the shared llama.cpp build's
//! `llama-tokenize`.

use std::path::{Path, PathBuf};

use rigdeck_core::chat::{ChatStore, Message, Params, Role, Stats, Status};
use rigdeck_core::engines::cmake_build::{self, BuildRequest};
use rigdeck_core::engines::source;
use rigdeck_core::quality::corpus::{
    builtin_bytes, builtin_text, corpus_text, ChatFormat, CorpusError, CorpusSpec, BUILTIN_LABEL,
};
use rigdeck_core::store::Store;
use rigdeck_gguf::summary::CHAT_TEMPLATE_KEY;
use rigdeck_gguf::GgufFile;

/// The real Gemma 3 270M Q4_K_M, assembled once by `tests/fixtures/gemma3_270m.sh`.
fn gemma3_270m() -> PathBuf {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma3_270m.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .expect("run the Gemma fixture script");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The format the real Gemma GGUF declares.
fn gemma_format() -> ChatFormat {
    let file = GgufFile::open(gemma3_270m()).unwrap_or_else(|e| panic!("{e}"));
    ChatFormat::from_metadata(&file.metadata)
}

/// The Gemma format with `template` (a file of llama.cpp's `models/templates`) in its metadata.
fn gemma_format_with(template: &str) -> ChatFormat {
    let mut file = GgufFile::open(gemma3_270m()).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(templates().join(template)).expect("the template file");
    file.metadata.set(CHAT_TEMPLATE_KEY, text.as_str().into());
    ChatFormat::from_metadata(&file.metadata)
}

fn templates() -> PathBuf {
    source::cached_llama_cpp_source()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("models/templates")
}

struct Chats {
    _dir: tempfile::TempDir,
    store: ChatStore,
}

async fn chats() -> Chats {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("rigdeck.db")).await.unwrap();
    Chats {
        store: ChatStore::new(store.pool().clone()),
        _dir: dir,
    }
}

impl Chats {
    async fn conversation(&self, title: &str, system_prompt: &str) -> i64 {
        self.store
            .create(title, "gemma", system_prompt, &Params::default(), 1)
            .await
            .unwrap()
            .id
    }

    /// Adds a message under `parent`; the conversation then shows its branch.
    async fn say(&self, conversation: i64, parent: Option<i64>, role: Role, text: &str) -> i64 {
        let message = Message {
            id: 0,
            conversation_id: conversation,
            parent_id: parent,
            role,
            content: text.to_owned(),
            reasoning: String::new(),
            images: Vec::new(),
            model: None,
            status: Status::Complete,
            error: None,
            stats: Stats::default(),
            created_at_ms: 1,
        };
        self.store.add(&message, 1).await.unwrap().id
    }

    /// `turns` as alternating user and assistant messages, one chain; returns the last id.
    async fn exchange(&self, conversation: i64, turns: &[&str]) -> i64 {
        let mut parent = None;
        for (i, text) in turns.iter().enumerate() {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            parent = Some(self.say(conversation, parent, role, text).await);
        }
        parent.expect("at least one turn")
    }
}

async fn text_of(
    chats: &Chats,
    ids: &[i64],
    format: &ChatFormat,
) -> rigdeck_core::quality::corpus::CorpusText {
    corpus_text(
        &CorpusSpec::Conversations { ids: ids.to_vec() },
        &chats.store,
        format,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn the_real_gemma_file_names_its_special_tokens_and_no_template() {
    let format = gemma_format();
    assert_eq!(format.bos_token, "<bos>");
    assert!(!format.eos_token.is_empty());
    assert_eq!(
        format.template, None,
        "the fixture carries no chat template"
    );

    let chats = chats().await;
    let id = chats.conversation("Tea", "").await;
    chats
        .exchange(
            id,
            &["How long should green tea steep?", "About two minutes."],
        )
        .await;
    let corpus = text_of(&chats, &[id], &format).await;
    assert_eq!(
        corpus.text,
        "user: How long should green tea steep?\n\nassistant: About two minutes."
    );
    assert_eq!(corpus.label, "1 conversation (2 messages)");
    assert_eq!(corpus.notes.len(), 1, "{:?}", corpus.notes);
    assert!(
        corpus.notes[0].contains("no chat template"),
        "{:?}",
        corpus.notes
    );
}

#[tokio::test]
async fn conversations_are_written_in_gemmas_turn_format() {
    let format = gemma_format_with("google-gemma-2-2b-it.jinja");
    let chats = chats().await;
    let first = chats.conversation("Steeping", "").await;
    chats
        .exchange(
            first,
            &[
                "How long should green tea steep?",
                "About two minutes, in water just under boiling.",
                "And black tea?",
                "Three to five minutes.",
            ],
        )
        .await;
    let second = chats.conversation("Kettles", "").await;
    chats
        .exchange(
            second,
            &[
                "Why does my kettle click off early?",
                "Scale on the sensor.",
            ],
        )
        .await;

    let corpus = text_of(&chats, &[second, first], &format).await;
    assert!(corpus.notes.is_empty(), "{:?}", corpus.notes);
    assert_eq!(corpus.label, "2 conversations (6 messages)");
    let expected_second =
        "<bos><start_of_turn>user\nWhy does my kettle click off early?<end_of_turn>\n\
         <start_of_turn>model\nScale on the sensor.<end_of_turn>\n";
    assert!(corpus.text.starts_with(expected_second), "{}", corpus.text);
    assert_eq!(corpus.text.matches("<start_of_turn>user").count(), 3);
    assert_eq!(corpus.text.matches("<start_of_turn>model").count(), 3);
    assert!(corpus.text.contains(
        "<start_of_turn>model\nAbout two minutes, in water just under boiling.<end_of_turn>"
    ));
    let kettle = corpus.text.find("kettle").unwrap();
    let black_tea = corpus.text.find("And black tea?").unwrap();
    assert!(
        kettle < black_tea,
        "the conversations keep the order asked for"
    );
    assert!(corpus
        .text
        .contains("<end_of_turn>\n\n<bos><start_of_turn>user\nHow long"));
    assert!(corpus.text.ends_with("Three to five minutes.<end_of_turn>"));
    assert!(
        !corpus.text.ends_with("<start_of_turn>model\n"),
        "no generation prompt"
    );
}

#[tokio::test]
async fn a_template_that_raises_falls_back_to_a_transcript_with_a_note() {
    // Gemma 2's template refuses a system prompt with raise_exception.
    let format = gemma_format_with("google-gemma-2-2b-it.jinja");
    let chats = chats().await;
    let id = chats.conversation("Pirate", "Answer like a pirate.").await;
    chats
        .exchange(id, &["Where is the map?", "Arr, in the chest."])
        .await;

    let corpus = text_of(&chats, &[id], &format).await;
    assert_eq!(
        corpus.text,
        "system: Answer like a pirate.\n\nuser: Where is the map?\n\nassistant: Arr, in the chest."
    );
    assert_eq!(corpus.label, "1 conversation (2 messages)");
    assert_eq!(corpus.notes.len(), 1, "{:?}", corpus.notes);
    let note = &corpus.notes[0];
    assert!(note.contains("System role not supported"), "{note}");
    assert!(
        note.contains(&format!("conversation {id}")) && note.contains("Pirate"),
        "{note}"
    );
}

#[tokio::test]
async fn the_shown_branch_is_written_and_its_siblings_are_not() {
    let format = gemma_format();
    let chats = chats().await;
    let id = chats.conversation("Branches", "Be brief.").await;
    let question = chats.say(id, None, Role::User, "Name a prime.").await;
    let first = chats
        .say(id, Some(question), Role::Assistant, "Seven.")
        .await;
    chats
        .say(id, Some(question), Role::Assistant, "Eleven.")
        .await;

    // The newest reply is the shown branch after it is written.
    let corpus = text_of(&chats, &[id], &format).await;
    assert!(corpus.text.contains("Eleven.") && !corpus.text.contains("Seven."));
    assert!(corpus
        .text
        .starts_with("system: Be brief.\n\nuser: Name a prime."));

    let mut conversation = chats.store.conversation(id).await.unwrap();
    conversation.active_leaf = Some(first);
    chats.store.save(&conversation, 2).await.unwrap();
    let corpus = text_of(&chats, &[id], &format).await;
    assert!(corpus.text.contains("Seven.") && !corpus.text.contains("Eleven."));
    assert_eq!(corpus.label, "1 conversation (2 messages)");
}

#[tokio::test]
async fn python_string_methods_in_a_real_template_render() {
    // Qwen3's template calls .split(), .strip(), .startswith() and .endswith() on strings.
    let mut format = gemma_format_with("Qwen-Qwen3-0.6B.jinja");
    format.bos_token = String::new();
    let chats = chats().await;
    let id = chats.conversation("Units", "You convert units.").await;
    chats
        .exchange(id, &["How many grams in a pound?", "About 453.6 grams."])
        .await;
    let corpus = text_of(&chats, &[id], &format).await;
    assert!(corpus.notes.is_empty(), "{:?}", corpus.notes);
    assert!(
        corpus
            .text
            .starts_with("<|im_start|>system\nYou convert units.<|im_end|>\n<|im_start|>user\nHow many grams in a pound?<|im_end|>"),
        "{}",
        corpus.text
    );
    assert!(
        corpus.text.contains("<|im_start|>assistant\n"),
        "{}",
        corpus.text
    );
    assert!(
        corpus.text.contains("About 453.6 grams."),
        "{}",
        corpus.text
    );
}

#[tokio::test]
async fn unknown_missing_or_empty_conversations_are_refused() {
    let format = gemma_format();
    let chats = chats().await;
    let spec = |ids: Vec<i64>| CorpusSpec::Conversations { ids };

    let error = corpus_text(&spec(Vec::new()), &chats.store, &format)
        .await
        .unwrap_err();
    assert!(matches!(error, CorpusError::NoConversations), "{error:?}");
    assert!(error.to_string().contains("pick at least one conversation"));

    let real = chats.conversation("Real", "").await;
    chats.exchange(real, &["Hello"]).await;
    let error = corpus_text(&spec(vec![real, 4242]), &chats.store, &format)
        .await
        .unwrap_err();
    assert!(
        matches!(error, CorpusError::UnknownConversation(4242)),
        "{error:?}"
    );
    assert!(error.to_string().contains("4242"), "{error}");

    let empty = chats.conversation("Empty", "A system prompt alone.").await;
    let error = corpus_text(&spec(vec![empty]), &chats.store, &format)
        .await
        .unwrap_err();
    assert!(matches!(error, CorpusError::NoMessages), "{error:?}");
}

#[tokio::test]
async fn a_file_corpus_goes_through_the_same_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.txt");
    std::fs::write(&path, b"ok \xff\xfe").unwrap();
    let chats = chats().await;
    let error = corpus_text(
        &CorpusSpec::File { path: path.clone() },
        &chats.store,
        &ChatFormat::default(),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("offset 3"), "{error}");
    assert!(error.to_string().contains(&path.display().to_string()));
}

/// Tokens of `file` with `model`'s vocabulary, by the shared build's `llama-tokenize`.
async fn token_count(model: &Path, file: &Path) -> u64 {
    let cache = source::cache_root().expect("a cache folder (RIGDECK_CACHE_DIR or HOME)");
    let built = cmake_build::build(&BuildRequest::shared_cpu(cache), &|_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let output = tokio::process::Command::new(built.bin_dir.join("llama-tokenize"))
        .arg("-m")
        .arg(model)
        .arg("-f")
        .arg(file)
        .args(["--show-count", "--log-disable"])
        .output()
        .await
        .expect("run llama-tokenize");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Total number of tokens: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no token count in: {}",
                &stdout[stdout.len().saturating_sub(300)..]
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_corpus_fills_two_8192_token_windows_with_gemmas_tokenizer() {
    let chats = chats().await;
    let corpus = corpus_text(&CorpusSpec::Builtin, &chats.store, &ChatFormat::default())
        .await
        .unwrap();
    assert_eq!(corpus.label, BUILTIN_LABEL);
    assert_eq!(corpus.text, builtin_text());
    assert_eq!(corpus.text.len() as u64, builtin_bytes());
    assert!(corpus.notes.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("builtin.txt");
    std::fs::write(&file, &corpus.text).unwrap();
    let tokens = token_count(&gemma3_270m(), &file).await;
    assert!(tokens >= 2 * 8192, "{tokens} tokens");
    println!(
        "built-in corpus: {} bytes, {tokens} Gemma 3 tokens",
        corpus.text.len()
    );
}
