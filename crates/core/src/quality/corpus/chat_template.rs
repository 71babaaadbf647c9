//! A model's chat format (its Jinja chat template and special tokens) and the rendering of a
//! conversation with it, as Hugging Face and llama.cpp render templates: blocks trimmed, Python
//! string methods (`.strip()`, `.split()`, …), `raise_exception` and `strftime_now`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use minijinja::{context, Environment, Error, ErrorKind, Value};
use rigdeck_gguf::summary::CHAT_TEMPLATE_KEY;
use rigdeck_gguf::Metadata;
use serde::{Deserialize, Serialize};

/// How a model writes a conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatFormat {
    /// The GGUF's `tokenizer.chat_template`; `None` when it carries none.
    pub template: Option<String>,
    pub bos_token: String,
    pub eos_token: String,
}

impl ChatFormat {
    /// The format a GGUF's metadata declares: its chat template (a blank one counts as none)
    /// and the text of its BOS and EOS tokens (empty when it names none).
    pub fn from_metadata(metadata: &Metadata) -> Self {
        Self {
            template: metadata
                .get_str(CHAT_TEMPLATE_KEY)
                .filter(|t| !t.trim().is_empty())
                .map(str::to_owned),
            bos_token: token_text(metadata, "tokenizer.ggml.bos_token_id"),
            eos_token: token_text(metadata, "tokenizer.ggml.eos_token_id"),
        }
    }
}

/// The text of the token whose id `id_key` holds.
fn token_text(metadata: &Metadata, id_key: &str) -> String {
    metadata
        .get_u64(id_key)
        .and_then(|id| usize::try_from(id).ok())
        .and_then(|id| {
            metadata
                .get_arr("tokenizer.ggml.tokens")?
                .as_strings()?
                .get(id)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// One message as chat templates expect it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct TemplateMessage {
    pub role: &'static str,
    pub content: String,
    /// An assistant's reasoning, for templates that write it back (`reasoning_content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A conversation written by a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rendered {
    pub text: String,
    /// The template wrote the date it was rendered on (`strftime_now`).
    pub dated: bool,
}

/// `messages` through `template`, without a generation prompt.
pub(super) fn render(
    template: &str,
    format: &ChatFormat,
    messages: &[TemplateMessage],
) -> Result<Rendered, Error> {
    let dated = Arc::new(AtomicBool::new(false));
    let env = environment(dated.clone());
    let text = env.render_str(
        &without_generation_tags(template),
        context! {
            messages => Value::from_serialize(messages),
            bos_token => &format.bos_token,
            eos_token => &format.eos_token,
            add_generation_prompt => false,
            // Hugging Face passes `tools=None` when a conversation has none.
            tools => Value::from(()),
        },
    )?;
    Ok(Rendered {
        text,
        dated: dated.load(Ordering::Relaxed),
    })
}

/// `template` with Hugging Face's `{% generation %}` … `{% endgeneration %}` (which marks the
/// assistant's tokens for training masks and writes nothing) as an always-true `if` block, which
/// minijinja knows; whitespace control (`{%-`, `-%}`) is kept.
fn without_generation_tags(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}").map(|end| end + 2) else {
            break;
        };
        let (before, tag) = (&rest[..start], &rest[start..start + len]);
        out.push_str(before);
        let inner =
            tag[2..len - 2].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        match inner {
            "generation" => out.push_str(&tag.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&tag.replacen("endgeneration", "endif", 1)),
            _ => out.push_str(tag),
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// Jinja as chat templates are written for: trimmed blocks, Python's string and dict methods,
/// and the two functions Hugging Face adds.
fn environment(dated: Arc<AtomicBool>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    // Python's None is not iterable (minijinja's is, as an empty sequence): templates guard
    // `tools|length` with `tools is iterable`.
    env.add_test("iterable", |value: Value| {
        !value.is_none() && value.try_iter().is_ok()
    });
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", move |format: String| {
        dated.store(true, Ordering::Relaxed);
        strftime_now(&format)
    });
    env
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// The local date and time in a `strftime` format; a format chrono cannot write is an error,
/// not a panic.
fn strftime_now(format: &str) -> Result<String, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now cannot write the format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `role: content` per message, a blank line between them: the conversation without a template.
pub(super) fn plain_transcript(messages: &[TemplateMessage]) -> String {
    messages
        .iter()
        .map(|m| format!("{}: {}", m.role, m.content.trim()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &'static str, content: &str) -> TemplateMessage {
        TemplateMessage {
            role,
            content: content.to_owned(),
            reasoning_content: None,
        }
    }

    fn format() -> ChatFormat {
        ChatFormat {
            template: None,
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
        }
    }

    #[test]
    fn python_string_methods_and_the_special_tokens_render() {
        let template = "{{ bos_token }}{% for m in messages %}{{ m.role.upper() }}={{ m['content'].strip().split(',')[1] }}|{% endfor %}{{ eos_token }}";
        let rendered = render(
            template,
            &format(),
            &[message("user", "  a,b,c \n"), message("assistant", "x,y")],
        )
        .unwrap();
        assert_eq!(rendered.text, "<s>USER=b|ASSISTANT=y|</s>");
        assert!(!rendered.dated);
    }

    #[test]
    fn blocks_are_trimmed_like_hugging_face_renders_them() {
        let template = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n";
        let rendered = render(template, &format(), &[message("user", "hi")]).unwrap();
        assert_eq!(rendered.text, "[hi]\n");
    }

    #[test]
    fn no_generation_prompt_is_asked_for() {
        let template = "{% if add_generation_prompt %}PROMPT{% else %}none{% endif %}";
        let rendered = render(template, &format(), &[message("user", "hi")]).unwrap();
        assert_eq!(rendered.text, "none");
    }

    #[test]
    fn raise_exception_is_an_error_carrying_its_message() {
        let error = render(
            "{{ raise_exception('System role not supported') }}",
            &format(),
            &[],
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("System role not supported"),
            "{error}"
        );
    }

    #[test]
    fn strftime_now_writes_today_and_is_flagged() {
        let rendered = render("{{ strftime_now('%Y') }}", &format(), &[]).unwrap();
        let year = chrono::Local::now().format("%Y").to_string();
        assert_eq!(rendered.text, year);
        assert!(rendered.dated);
        assert!(render("{{ strftime_now('%Q') }}", &format(), &[]).is_err());
    }

    #[test]
    fn generation_blocks_render_their_content() {
        let template = "{% for m in messages %}{%- generation -%}\n[{{ m.content }}]\n{%- endgeneration %}{% endfor %}";
        assert_eq!(
            without_generation_tags(template),
            "{% for m in messages %}{%- if true -%}\n[{{ m.content }}]\n{%- endif %}{% endfor %}"
        );
        let rendered = render(template, &format(), &[message("assistant", "ok")]).unwrap();
        assert_eq!(rendered.text, "[ok]");
        let unclosed = "{{ x }}{% if";
        assert_eq!(without_generation_tags(unclosed), unclosed);
        assert_eq!(
            without_generation_tags("{% set generation = 1 %}"),
            "{% set generation = 1 %}"
        );
    }

    #[test]
    fn no_tools_pass_every_guard_of_real_templates() {
        let template =
            "{% if tools is not none and tools|length > 0 %}tools{% else %}none{% endif %}";
        let rendered = render(template, &format(), &[]).unwrap();
        assert_eq!(rendered.text, "none");
    }

    #[test]
    fn a_plain_transcript_names_each_role() {
        let text = plain_transcript(&[
            message("system", "Be brief."),
            message("user", " Hello \n"),
            message("assistant", "Hi."),
        ]);
        assert_eq!(text, "system: Be brief.\n\nuser: Hello\n\nassistant: Hi.");
    }

    #[test]
    fn the_format_comes_from_gguf_metadata() {
        let mut writer = rigdeck_gguf::GgufWriter::new();
        let mut tokens = rigdeck_gguf::StringArray::with_capacity(3);
        for token in ["<pad>", "<eos>", "<bos>"] {
            tokens.push(token);
        }
        writer
            .set("general.architecture", "llama")
            .set(
                "tokenizer.ggml.tokens",
                rigdeck_gguf::Value::Array(rigdeck_gguf::Array::String(tokens)),
            )
            .set("tokenizer.ggml.bos_token_id", 2u32)
            .set("tokenizer.ggml.eos_token_id", 1u32)
            .set(CHAT_TEMPLATE_KEY, "{{ messages[0].content }}");
        let format = ChatFormat::from_metadata(writer.metadata());
        assert_eq!(format.bos_token, "<bos>");
        assert_eq!(format.eos_token, "<eos>");
        assert_eq!(
            format.template.as_deref(),
            Some("{{ messages[0].content }}")
        );

        writer
            .set(CHAT_TEMPLATE_KEY, "  \n")
            .set("tokenizer.ggml.bos_token_id", 99u32);
        let format = ChatFormat::from_metadata(writer.metadata());
        assert_eq!(format.template, None);
        assert_eq!(format.bos_token, "");
    }
}
