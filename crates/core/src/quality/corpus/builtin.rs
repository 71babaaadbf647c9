//! The built-in corpus: original text written for Rigdeck (`assets/quality/corpus/`, Apache-2.0),
//! prose, code, conversations and step-by-step reasoning in English, German, French, Spanish,
//! Chinese and Japanese, embedded in the binary and joined in a fixed, interleaved order.

use serde::Serialize;

/// The label of the built-in corpus.
pub const BUILTIN_LABEL: &str =
    "Built-in mix (prose, code, conversations, reasoning; en de fr es zh ja)";

/// What a part of the built-in corpus is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    Prose,
    Code,
    /// A `User:` / `Assistant:` dialogue.
    Conversation,
    /// A worked problem, step by step.
    Reasoning,
}

/// One part of the built-in corpus, as listed to people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuiltinPart {
    pub name: &'static str,
    pub kind: PartKind,
    /// The language it is written in: `en`, `de`, `fr`, `es`, `zh` or `ja`; for code the
    /// programming language (`python`, `rust`, `c`, `shell`).
    pub language: &'static str,
    /// Its UTF-8 bytes in the corpus (surrounding blank lines trimmed).
    pub bytes: u64,
}

struct Part {
    name: &'static str,
    kind: PartKind,
    language: &'static str,
    text: &'static str,
}

/// A part read from `assets/quality/corpus/<name>.txt`.
macro_rules! part {
    ($name:literal, $kind:ident, $language:literal) => {
        Part {
            name: $name,
            kind: PartKind::$kind,
            language: $language,
            text: include_str!(concat!(
                "../../../../../assets/quality/corpus/",
                $name,
                ".txt"
            )),
        }
    };
}

/// The parts in corpus order: languages and kinds take turns.
const PARTS: &[Part] = &[
    part!("prose-en-harbour", Prose, "en"),
    part!("code-python-inventory", Code, "python"),
    part!("prose-de-backstube", Prose, "de"),
    part!("conversation-en-kitchen", Conversation, "en"),
    part!("prose-fr-train-de-nuit", Prose, "fr"),
    part!("reasoning-en-arithmetic", Reasoning, "en"),
    part!("prose-zh-tea", Prose, "zh"),
    part!("code-rust-ring-buffer", Code, "rust"),
    part!("prose-es-mercado", Prose, "es"),
    part!("conversation-en-server", Conversation, "en"),
    part!("prose-ja-rain", Prose, "ja"),
    part!("code-c-checksum", Code, "c"),
    part!("conversation-de-fahrrad", Conversation, "de"),
    part!("reasoning-en-logic", Reasoning, "en"),
    part!("code-shell-backup", Code, "shell"),
    part!("reasoning-fr-geometrie", Reasoning, "fr"),
    part!("conversation-es-red", Conversation, "es"),
    part!("reasoning-zh-puzzles", Reasoning, "zh"),
    part!("conversation-ja-travel", Conversation, "ja"),
    part!("prose-en-clockmaker", Prose, "en"),
    part!("code-python-text-stats", Code, "python"),
    part!("reasoning-es-probabilidad", Reasoning, "es"),
    part!("conversation-zh-debugging", Conversation, "zh"),
    part!("prose-de-wattenmeer", Prose, "de"),
    part!("conversation-fr-jardin", Conversation, "fr"),
    part!("reasoning-ja-sansu", Reasoning, "ja"),
    part!("code-rust-tokenizer", Code, "rust"),
    part!("reasoning-de-zinsen", Reasoning, "de"),
];

/// The parts of the built-in corpus, in order.
pub fn builtin_parts() -> Vec<BuiltinPart> {
    PARTS
        .iter()
        .map(|p| BuiltinPart {
            name: p.name,
            kind: p.kind,
            language: p.language,
            bytes: p.text.trim().len() as u64,
        })
        .collect()
}

/// The built-in corpus: its parts in order, a blank line between them.
pub fn builtin_text() -> String {
    PARTS
        .iter()
        .map(|p| p.text.trim())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The size of [`builtin_text`] in UTF-8 bytes.
pub fn builtin_bytes() -> u64 {
    builtin_text().len() as u64
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    const LANGUAGES: [&str; 6] = ["en", "de", "fr", "es", "zh", "ja"];

    fn parts_of(kind: PartKind) -> Vec<&'static Part> {
        PARTS.iter().filter(|p| p.kind == kind).collect()
    }

    fn languages_of(kind: PartKind) -> HashSet<&'static str> {
        parts_of(kind).iter().map(|p| p.language).collect()
    }

    fn is_han(c: char) -> bool {
        ('\u{4E00}'..='\u{9FFF}').contains(&c)
    }

    fn is_kana(c: char) -> bool {
        ('\u{3040}'..='\u{30FF}').contains(&c)
    }

    #[test]
    fn every_kind_is_there_and_prose_is_in_all_six_languages() {
        for kind in [
            PartKind::Prose,
            PartKind::Code,
            PartKind::Conversation,
            PartKind::Reasoning,
        ] {
            assert!(parts_of(kind).len() >= 4, "too few {kind:?} parts");
        }
        let prose = languages_of(PartKind::Prose);
        for language in LANGUAGES {
            assert!(prose.contains(language), "no prose in {language}");
        }
        let code = languages_of(PartKind::Code);
        for language in ["python", "rust", "c", "shell"] {
            assert!(code.contains(language), "no {language} code");
        }
        let talk: HashSet<_> = languages_of(PartKind::Conversation)
            .union(&languages_of(PartKind::Reasoning))
            .copied()
            .collect();
        assert_eq!(talk.len(), LANGUAGES.len(), "{talk:?}");
    }

    #[test]
    fn each_part_is_written_in_its_language() {
        for part in PARTS.iter().filter(|p| p.kind != PartKind::Code) {
            let chars = part.text.chars().count();
            let han = part.text.chars().filter(|c| is_han(*c)).count();
            let kana = part.text.chars().filter(|c| is_kana(*c)).count();
            match part.language {
                "zh" => assert!(han * 3 > chars && kana == 0, "{}: {han} Han", part.name),
                "ja" => assert!(kana * 4 > chars && han > 0, "{}: {kana} kana", part.name),
                _ => assert_eq!(han + kana, 0, "{} has CJK text", part.name),
            }
        }
        let marks = [("de", "ß"), ("fr", "è"), ("es", "ñ")];
        for (language, mark) in marks {
            for part in PARTS.iter().filter(|p| p.language == language) {
                assert!(part.text.contains(mark), "{} has no {mark}", part.name);
            }
        }
    }

    #[test]
    fn conversations_are_user_and_assistant_turns() {
        for part in parts_of(PartKind::Conversation) {
            let users = part.text.matches("User:").count();
            let assistants = part.text.matches("Assistant:").count();
            assert!(users >= 3 && assistants >= 3, "{}", part.name);
            assert!(part.text.trim_start().starts_with("User:"), "{}", part.name);
        }
    }

    #[test]
    fn the_corpus_is_large_enough_for_two_8192_token_windows() {
        // Over 90 KB: about 25 000 tokens with a 262k vocabulary (Gemma 3 counts are in
        // assets/quality/corpus/README.md).
        assert!(builtin_bytes() >= 90_000, "{} bytes", builtin_bytes());
        for part in PARTS {
            assert!(part.text.trim().len() >= 2_000, "{} is short", part.name);
        }
    }

    #[test]
    fn the_parts_are_joined_in_order_by_blank_lines() {
        let text = builtin_text();
        let parts = builtin_parts();
        let separators = 2 * (parts.len() as u64 - 1);
        assert_eq!(
            parts.iter().map(|p| p.bytes).sum::<u64>() + separators,
            builtin_bytes()
        );
        let mut at = 0;
        for part in PARTS {
            let found = text[at..].find(part.text.trim()).map(|i| i + at);
            assert_eq!(found, Some(at), "{} is not next", part.name);
            at += part.text.trim().len() + 2;
        }
        assert!(!text.contains("\n\n\n\n"));
    }

    #[test]
    fn languages_and_kinds_take_turns() {
        for pair in PARTS.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                a.language != b.language || a.kind != b.kind,
                "{} and {} are alike",
                a.name,
                b.name
            );
        }
        let first_six: HashSet<_> = PARTS[..6].iter().map(|p| p.language).collect();
        assert!(first_six.len() >= 4, "{first_six:?}");
    }

    #[test]
    fn no_long_line_is_repeated() {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for part in PARTS {
            for line in part.text.lines().map(str::trim).filter(|l| l.len() >= 50) {
                if let Some(first) = seen.insert(line, part.name) {
                    panic!("{line:?} is in {first} and {}", part.name);
                }
            }
        }
    }
}
